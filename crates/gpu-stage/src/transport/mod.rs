//! Transports move filled ring buffers to the peer: [`inproc`] (one process, the receiving
//! pipeline reads the very buffer the sending pipeline filled), [`tcp`] (N parallel connections)
//! and, with the `rdma` feature, `rdma` (WRITE_WITH_IMM into the peer's registered ring, with
//! credits): it registers each buffer once through [`StagingRing::raw_region`], posts a write in
//! `submit` and releases the slot from its completion poller; on the receiving side it acquires
//! slots as credits and returns them from `next_chunk` when the immediate-data completion
//! arrives.
//!
//! Slot ownership follows the protocol in [`crate::ring`]: a sending transport gets each submitted
//! slot's [`SlotToken`] and owns the slot until it drops the token; a receiving transport acquires a
//! slot ([`StagingRing::acquire`]) before filling it and hands the token to the pipeline with the
//! chunk, and the pipeline drops it after its host→device copy.

pub mod inproc;
#[cfg(feature = "rdma")]
pub mod rdma;
pub mod tcp;

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::error::TransportError;
use crate::ring::{SlotToken, StagingRing};

/// One chunk of a transfer, sitting in ring buffer `slot`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Chunk {
    /// Position in the transfer, from 0.
    pub seq: u64,
    /// Ring buffer holding the bytes.
    pub slot: usize,
    /// Destination offset of the first byte, relative to the start of the transfer.
    pub offset: u64,
    /// Number of bytes (≤ the ring's chunk size; only the last chunk may be short).
    pub len: usize,
}

/// Totals of a finished transfer, used by both ends to check completeness.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransferSummary {
    /// Number of chunks.
    pub chunks: u64,
    /// Number of bytes.
    pub bytes: u64,
}

/// Sending half of a transport.
pub trait SendTransport: Send {
    /// Called at the start of every transfer with the ring the chunks will come from. An RDMA
    /// transport registers the buffers here (once per ring).
    fn attach(&mut self, ring: &Arc<StagingRing>) -> Result<(), TransportError> {
        let _ = ring;
        Ok(())
    }

    /// Sends `chunk` (its bytes are in `ring` slot `chunk.slot`, copied from the device already,
    /// readable through `slot`). From now on the transport owns the slot and releases it by
    /// dropping `slot` once it no longer reads it (on an error too). May return before the bytes
    /// have left (asynchronous transports).
    fn submit(
        &mut self,
        ring: &Arc<StagingRing>,
        chunk: Chunk,
        slot: SlotToken,
    ) -> Result<(), TransportError>;

    /// All chunks were submitted: flush, and wait until the peer confirms it has everything.
    fn finish(&mut self, summary: TransferSummary) -> Result<(), TransportError>;

    /// The pipeline failed; tell the peer if possible. Must not block for long.
    fn abort(&mut self, reason: &str) {
        let _ = reason;
    }
}

/// Receiving half of a transport.
pub trait RecvTransport: Send {
    /// Called at the start of every transfer with the ring to receive into.
    fn attach(&mut self, ring: &Arc<StagingRing>) -> Result<(), TransportError> {
        let _ = ring;
        Ok(())
    }

    /// Waits for the next chunk in sequence order, filled into slot `chunk.slot`, with that slot's
    /// token; the pipeline drops the token after copying the slot to the device. `Ok(None)` marks
    /// the end of the transfer (the transport has checked the peer's totals).
    fn next_chunk(
        &mut self,
        ring: &Arc<StagingRing>,
    ) -> Result<Option<(Chunk, SlotToken)>, TransportError>;

    /// The data is on the device: acknowledge to the sender (TCP sends an ACK frame).
    fn complete(&mut self, summary: TransferSummary) -> Result<(), TransportError> {
        let _ = summary;
        Ok(())
    }

    /// The pipeline failed; tell the peer if possible. Must not block for long.
    fn abort(&mut self, reason: &str) {
        let _ = reason;
    }
}

impl<T: SendTransport + ?Sized> SendTransport for &mut T {
    fn attach(&mut self, ring: &Arc<StagingRing>) -> Result<(), TransportError> {
        (**self).attach(ring)
    }
    fn submit(
        &mut self,
        ring: &Arc<StagingRing>,
        chunk: Chunk,
        slot: SlotToken,
    ) -> Result<(), TransportError> {
        (**self).submit(ring, chunk, slot)
    }
    fn finish(&mut self, summary: TransferSummary) -> Result<(), TransportError> {
        (**self).finish(summary)
    }
    fn abort(&mut self, reason: &str) {
        (**self).abort(reason)
    }
}

impl<T: RecvTransport + ?Sized> RecvTransport for &mut T {
    fn attach(&mut self, ring: &Arc<StagingRing>) -> Result<(), TransportError> {
        (**self).attach(ring)
    }
    fn next_chunk(
        &mut self,
        ring: &Arc<StagingRing>,
    ) -> Result<Option<(Chunk, SlotToken)>, TransportError> {
        (**self).next_chunk(ring)
    }
    fn complete(&mut self, summary: TransferSummary) -> Result<(), TransportError> {
        (**self).complete(summary)
    }
    fn abort(&mut self, reason: &str) {
        (**self).abort(reason)
    }
}

/// Accepts one connection on `listener` within `timeout` ([`TransportError::Timeout`] names `who`
/// and the address), and returns it in blocking mode.
pub(crate) fn accept_within(
    listener: &TcpListener,
    timeout: Duration,
    who: &str,
) -> Result<(TcpStream, SocketAddr), TransportError> {
    listener
        .set_nonblocking(true)
        .map_err(TransportError::io("making the listener non-blocking"))?;
    let deadline = Instant::now() + timeout;
    let r = loop {
        match listener.accept() {
            Ok(v) => break Ok(v),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    break Err(TransportError::Timeout {
                        after: timeout,
                        waiting_for: format!(
                            "for {who} to connect to {}",
                            listener
                                .local_addr()
                                .map_or_else(|_| "?".into(), |a| a.to_string())
                        ),
                    });
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => break Err(TransportError::io(format!("accepting {who}"))(e)),
        }
    };
    let _ = listener.set_nonblocking(false);
    let (s, a) = r?;
    s.set_nonblocking(false)
        .map_err(TransportError::io("making an accepted socket blocking"))?;
    Ok((s, a))
}

/// Maps a read or write that hit its socket timeout to [`TransportError::Timeout`], anything else
/// to [`TransportError::Io`] with `context`.
pub(crate) fn io_or_timeout(
    timeout: Duration,
    context: impl Into<String>,
) -> impl FnOnce(io::Error) -> TransportError {
    let context = context.into();
    move |e| match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => TransportError::Timeout {
            after: timeout,
            waiting_for: context,
        },
        _ => TransportError::Io { context, source: e },
    }
}
