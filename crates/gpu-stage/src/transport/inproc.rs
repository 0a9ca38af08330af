//! In-process transport: both pipelines share one ring, so a chunk is never copied on the CPU.
//! The sender's device→host copy fills a slot, this transport passes the slot number across a
//! channel, the receiver's host→device copy drains it and releases the slot back to the sender.

use std::sync::Arc;
use std::sync::mpsc;

use super::{Chunk, RecvTransport, SendTransport, TransferSummary};
use crate::error::TransportError;
use crate::ring::{SlotToken, StagingRing};

enum Msg {
    Chunk(Chunk, SlotToken),
    End(TransferSummary),
    Abort(String),
}

/// Creates the two connected halves. Both pipelines must use the same [`StagingRing`].
pub fn in_process_pair() -> (InProcSender, InProcReceiver) {
    let (tx, rx) = mpsc::channel();
    (
        InProcSender { tx, ring: None },
        InProcReceiver {
            rx,
            ring: None,
            expect_seq: 0,
            bytes: 0,
        },
    )
}

/// Sending half of [`in_process_pair`].
#[derive(Debug)]
pub struct InProcSender {
    tx: mpsc::Sender<Msg>,
    ring: Option<Arc<StagingRing>>,
}

/// Receiving half of [`in_process_pair`].
#[derive(Debug)]
pub struct InProcReceiver {
    rx: mpsc::Receiver<Msg>,
    ring: Option<Arc<StagingRing>>,
    expect_seq: u64,
    bytes: u64,
}

impl std::fmt::Debug for Msg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Msg::Chunk(c, _) => write!(f, "Chunk({c:?})"),
            Msg::End(s) => write!(f, "End({s:?})"),
            Msg::Abort(r) => write!(f, "Abort({r})"),
        }
    }
}

fn closed() -> TransportError {
    TransportError::Closed("the in-process peer was dropped".into())
}

impl SendTransport for InProcSender {
    fn attach(&mut self, ring: &Arc<StagingRing>) -> Result<(), TransportError> {
        self.ring = Some(Arc::clone(ring));
        Ok(())
    }

    fn submit(
        &mut self,
        ring: &Arc<StagingRing>,
        chunk: Chunk,
        slot: SlotToken,
    ) -> Result<(), TransportError> {
        if !self.ring.as_ref().is_some_and(|r| Arc::ptr_eq(r, ring)) {
            return Err(TransportError::Protocol(
                "submit with a ring the transport was not attached to".into(),
            ));
        }
        // Ownership of the slot passes to the receiving pipeline, which releases it.
        self.tx.send(Msg::Chunk(chunk, slot)).map_err(|_| closed())
    }

    fn finish(&mut self, summary: TransferSummary) -> Result<(), TransportError> {
        self.tx.send(Msg::End(summary)).map_err(|_| closed())
    }

    fn abort(&mut self, reason: &str) {
        let _ = self.tx.send(Msg::Abort(reason.to_string()));
    }
}

impl RecvTransport for InProcReceiver {
    fn attach(&mut self, ring: &Arc<StagingRing>) -> Result<(), TransportError> {
        self.ring = Some(Arc::clone(ring));
        self.expect_seq = 0;
        self.bytes = 0;
        Ok(())
    }

    fn next_chunk(
        &mut self,
        ring: &Arc<StagingRing>,
    ) -> Result<Option<(Chunk, SlotToken)>, TransportError> {
        match self.rx.recv().map_err(|_| closed())? {
            Msg::Chunk(c, slot) => {
                if !self.ring.as_ref().is_some_and(|r| Arc::ptr_eq(r, ring)) {
                    return Err(TransportError::Protocol(
                        "the in-process transport needs both pipelines on one StagingRing \
                         (build them with Sender::with_ring / Receiver::with_ring, or use \
                         InProcessStage)"
                            .into(),
                    ));
                }
                if c.seq != self.expect_seq {
                    return Err(TransportError::Protocol(format!(
                        "chunk {} arrived where chunk {} was expected",
                        c.seq, self.expect_seq
                    )));
                }
                self.expect_seq += 1;
                self.bytes += c.len as u64;
                Ok(Some((c, slot)))
            }
            Msg::End(summary) => {
                let got = TransferSummary {
                    chunks: self.expect_seq,
                    bytes: self.bytes,
                };
                self.expect_seq = 0;
                self.bytes = 0;
                if got != summary {
                    return Err(TransportError::Protocol(format!(
                        "sender reported {summary:?} but {got:?} arrived"
                    )));
                }
                Ok(None)
            }
            Msg::Abort(reason) => Err(TransportError::Aborted(reason)),
        }
    }
}
