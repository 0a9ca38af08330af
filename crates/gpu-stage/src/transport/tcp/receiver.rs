//! The receiving half: one reader thread per connection fills ring slots (acquired in chunk order),
//! `next_chunk` hands chunks out in sequence and checks every connection's END totals, `complete`
//! sends the ACK.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{Arc, mpsc};
use std::time::Duration;

use super::acquire::Shared;
use super::config::{DEFAULT_TIMEOUT, check_connections, check_timeout};
use super::shutdown::TcpShutdown;
use super::wire::{Frame, Kind, read_frame, read_reason, write_all_vectored};
use crate::error::TransportError;
use crate::ring::{SlotToken, StagingRing};
use crate::transport::{Chunk, RecvTransport, TransferSummary, accept_within, io_or_timeout};

/// What a reader thread hands to [`TcpReceiver::next_chunk`](RecvTransport::next_chunk), tagged
/// with the transfer it belongs to.
enum ReaderMsg {
    Chunk(Chunk, SlotToken),
    End(TransferSummary),
    Failed(TransportError),
}

/// Receiving half of the TCP transport.
#[derive(Debug)]
pub struct TcpReceiver {
    results: mpsc::Receiver<(u64, ReaderMsg)>,
    sockets: Vec<TcpStream>,
    shared: Arc<Shared>,
    /// Chunks that arrived ahead of their turn (with their slots), keyed by (transfer, seq).
    pending: BTreeMap<(u64, u64), (Chunk, SlotToken)>,
    /// END frames seen, per transfer.
    ends: BTreeMap<u64, Vec<TransferSummary>>,
    transfer: u64,
    next_seq: u64,
    bytes: u64,
    peer: String,
    timeout: Duration,
}

impl std::fmt::Debug for ReaderMsg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReaderMsg::Chunk(c, _) => write!(f, "Chunk({c:?})"),
            ReaderMsg::End(s) => write!(f, "End({s:?})"),
            ReaderMsg::Failed(e) => write!(f, "Failed({e})"),
        }
    }
}

impl TcpReceiver {
    /// Accepts the `connections` connections of one [`TcpSender`](super::TcpSender) on `listener`, with the
    /// [`DEFAULT_TIMEOUT`] on every blocking step.
    pub fn accept(listener: &TcpListener, connections: usize) -> Result<Self, TransportError> {
        Self::accept_with_timeout(listener, connections, DEFAULT_TIMEOUT)
    }

    /// Like [`TcpReceiver::accept`], with `timeout` bounding each accept and greeting, the wait for
    /// each chunk of a transfer and each write of an ACK.
    pub fn accept_with_timeout(
        listener: &TcpListener,
        connections: usize,
        timeout: Duration,
    ) -> Result<Self, TransportError> {
        check_connections(connections)?;
        check_timeout(timeout)?;
        let mut slots: Vec<Option<TcpStream>> = (0..connections).map(|_| None).collect();
        let mut peer = String::new();
        for _ in 0..connections {
            let (mut stream, addr) = accept_within(listener, timeout, "a TCP sender")?;
            peer = addr.to_string();
            stream
                .set_nodelay(true)
                .map_err(TransportError::io("setting TCP_NODELAY"))?;
            stream
                .set_read_timeout(Some(timeout))
                .map_err(TransportError::io("setting a read timeout"))?;
            stream
                .set_write_timeout(Some(timeout))
                .map_err(TransportError::io("setting a write timeout"))?;
            let hello = read_frame(&mut stream)
                .map_err(io_or_timeout(
                    timeout,
                    format!("for the greeting from {addr}"),
                ))?
                .ok_or_else(|| TransportError::Closed(format!("{addr} closed before greeting")))?;
            if hello.kind != Kind::Hello {
                return Err(TransportError::Protocol(format!(
                    "{addr} sent {:?} before HELLO",
                    hello.kind
                )));
            }
            if hello.aux != connections as u64 {
                return Err(TransportError::Config {
                    field: "connections",
                    value: connections.to_string(),
                    reason: format!(
                        "the sender at {addr} opens {} connections; both ends must use the same number",
                        hello.aux
                    ),
                });
            }
            let idx = hello.seq as usize;
            match slots.get_mut(idx) {
                Some(s @ None) => *s = Some(stream),
                _ => {
                    return Err(TransportError::Protocol(format!(
                        "{addr} announced connection index {idx} twice or out of range"
                    )));
                }
            }
        }
        // Every fallible step before the first reader starts; readers block on their sockets
        // without a timeout (idle between transfers is fine) and end when the sockets shut down.
        let mut streams = Vec::with_capacity(connections);
        let mut sockets = Vec::with_capacity(connections);
        for (index, stream) in slots.into_iter().enumerate() {
            let stream = stream.ok_or_else(|| {
                TransportError::Protocol(format!("connection {index} never arrived"))
            })?;
            stream
                .set_read_timeout(None)
                .map_err(TransportError::io("clearing the read timeout"))?;
            sockets.push(
                stream
                    .try_clone()
                    .map_err(TransportError::io("cloning a socket handle"))?,
            );
            streams.push(stream);
        }
        let (tx, results) = mpsc::channel();
        // From here on a failure drops `this`, which shuts the sockets down and ends the readers.
        let this = TcpReceiver {
            results,
            sockets,
            shared: Arc::new(Shared::default()),
            pending: BTreeMap::new(),
            ends: BTreeMap::new(),
            transfer: 0,
            next_seq: 0,
            bytes: 0,
            peer,
            timeout,
        };
        for (index, stream) in streams.into_iter().enumerate() {
            let tx = tx.clone();
            let shared = Arc::clone(&this.shared);
            let context = format!("receiving from {} on connection {index}", this.peer);
            std::thread::Builder::new()
                .name(format!("gpu-stage-tcp-r{index}"))
                .spawn(move || reader_loop(stream, tx, shared, index, connections, context))
                .map_err(TransportError::io("spawning a reader thread"))?;
        }
        Ok(this)
    }

    /// Number of parallel connections.
    pub fn connections(&self) -> usize {
        self.sockets.len()
    }

    /// A handle that shuts this receiver's connections down from another thread (see
    /// [`TcpShutdown`]).
    pub fn shutdown_handle(&self) -> Result<TcpShutdown, TransportError> {
        TcpShutdown::of(&self.sockets)
    }
}

fn reader_loop(
    mut stream: TcpStream,
    tx: mpsc::Sender<(u64, ReaderMsg)>,
    shared: Arc<Shared>,
    index: usize,
    connections: usize,
    context: String,
) {
    let mut expect = index as u64;
    let mut transfer = 0u64;
    // Chunks of all earlier transfers: turns the per-transfer seq into a global index.
    let mut base = 0u64;
    loop {
        let frame = match read_frame(&mut stream) {
            Ok(Some(f)) => Ok(f),
            Ok(None) => {
                // Clean close at a frame boundary: not a failure of the ring (the sender may
                // simply be done); a pipeline still waiting for data gets this as its error.
                let _ = tx.send((
                    transfer,
                    ReaderMsg::Failed(TransportError::Closed(format!(
                        "{context}: the sender closed the connection"
                    ))),
                ));
                return;
            }
            Err(e) => Err(TransportError::Io {
                context: context.clone(),
                source: e,
            }),
        };
        let msg = frame.and_then(|frame| match frame.kind {
            Kind::Data => {
                let ring = shared.ring()?;
                let (chunk, slot) =
                    read_data(&mut stream, &shared, &ring, frame, expect, base, &context)?;
                expect += connections as u64;
                Ok(ReaderMsg::Chunk(chunk, slot))
            }
            Kind::End => {
                expect = index as u64;
                // The count comes from the peer (issue 26, F7): an overflow is its error, not a wrap.
                base = advance_base(base, frame.aux, &context)?;
                Ok(ReaderMsg::End(TransferSummary {
                    chunks: frame.aux,
                    bytes: frame.len,
                }))
            }
            Kind::Abort => Err(TransportError::Aborted(format!(
                "sender aborted: {}",
                read_reason(&mut stream, frame.len)
            ))),
            k => Err(TransportError::Protocol(format!(
                "{context}: unexpected {k:?} frame"
            ))),
        });
        match msg {
            Ok(m) => {
                let is_end = matches!(m, ReaderMsg::End(_));
                if tx.send((transfer, m)).is_err() {
                    return;
                }
                if is_end {
                    transfer += 1;
                }
            }
            Err(e) => {
                shared.fail(&e.to_string());
                let _ = tx.send((transfer, ReaderMsg::Failed(e)));
                return;
            }
        }
    }
}

/// `base + chunks`, checked: the count comes from the peer (issue 26, F7), so an overflow is a
/// protocol error, never a wrap or a panic.
fn advance_base(base: u64, chunks: u64, context: &str) -> Result<u64, TransportError> {
    base.checked_add(chunks).ok_or_else(|| {
        TransportError::Protocol(format!(
            "{context}: chunk count {chunks} after {base} earlier chunks overflows the counter"
        ))
    })
}

fn read_data(
    stream: &mut TcpStream,
    shared: &Shared,
    ring: &Arc<StagingRing>,
    frame: Frame,
    expect: u64,
    base: u64,
    context: &str,
) -> Result<(Chunk, SlotToken), TransportError> {
    if frame.seq != expect {
        return Err(TransportError::Protocol(format!(
            "{context}: chunk {} arrived where chunk {expect} was expected",
            frame.seq
        )));
    }
    let len = usize::try_from(frame.len).unwrap_or(usize::MAX);
    if len > ring.chunk_bytes() {
        return Err(TransportError::Protocol(format!(
            "{context}: chunk {} is {} bytes but the receive ring holds {}-byte chunks; \
             use the same or a larger chunk size on the receiver",
            frame.seq,
            frame.len,
            ring.chunk_bytes()
        )));
    }
    let slot = (frame.seq % ring.slots() as u64) as usize;
    // In chunk order; blocks while the pipeline still copies the slot's previous occupant to the
    // device (backpressure: we stop reading, the sender's socket fills up).
    let mut token = shared.acquire_in_order(ring, advance_base(base, frame.seq, context)?, slot)?;
    let buf = token
        .bytes_mut(len)
        .map_err(|e| TransportError::Protocol(e.to_string()))?;
    stream.read_exact(buf).map_err(TransportError::io(format!(
        "{context}: reading chunk {}",
        frame.seq
    )))?;
    let chunk = Chunk {
        seq: frame.seq,
        slot,
        offset: frame.offset,
        len,
    };
    Ok((chunk, token))
}

impl RecvTransport for TcpReceiver {
    fn attach(&mut self, ring: &Arc<StagingRing>) -> Result<(), TransportError> {
        self.shared.put_ring(ring);
        self.next_seq = 0;
        self.bytes = 0;
        Ok(())
    }

    fn next_chunk(
        &mut self,
        _ring: &Arc<StagingRing>,
    ) -> Result<Option<(Chunk, SlotToken)>, TransportError> {
        let connections = self.sockets.len();
        loop {
            if let Some((c, slot)) = self.pending.remove(&(self.transfer, self.next_seq)) {
                self.next_seq += 1;
                self.bytes += c.len as u64;
                return Ok(Some((c, slot)));
            }
            if self.ends.get(&self.transfer).map_or(0, Vec::len) == connections {
                let ends = self.ends.remove(&self.transfer).unwrap_or_default();
                let got = TransferSummary {
                    chunks: self.next_seq,
                    bytes: self.bytes,
                };
                self.transfer += 1;
                self.next_seq = 0;
                self.bytes = 0;
                if let Some(bad) = ends.iter().find(|s| **s != ends[0]) {
                    return Err(TransportError::Protocol(format!(
                        "connections disagree on the transfer totals: {:?} vs {bad:?}",
                        ends[0]
                    )));
                }
                if ends.first() != Some(&got) {
                    return Err(TransportError::Protocol(format!(
                        "sender reported {:?} but {} bytes in {} chunks arrived",
                        ends.first(),
                        got.bytes,
                        got.chunks
                    )));
                }
                return Ok(None);
            }
            let (transfer, msg) = match self.results.recv_timeout(self.timeout) {
                Ok(m) => m,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    return Err(TransportError::Timeout {
                        after: self.timeout,
                        waiting_for: format!("for chunk {} from {}", self.next_seq, self.peer),
                    });
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(TransportError::Closed(format!(
                        "all reader threads for {} exited",
                        self.peer
                    )));
                }
            };
            match msg {
                ReaderMsg::Chunk(c, slot) => {
                    self.pending.insert((transfer, c.seq), (c, slot));
                }
                ReaderMsg::End(s) => self.ends.entry(transfer).or_default().push(s),
                ReaderMsg::Failed(e) => return Err(e),
            }
        }
    }

    fn complete(&mut self, summary: TransferSummary) -> Result<(), TransportError> {
        let control = self
            .sockets
            .first_mut()
            .ok_or_else(|| TransportError::Closed("no connections".into()))?;
        let ack = Frame::new(Kind::Ack, 0, 0, summary.bytes, summary.chunks).encode();
        control.write_all(&ack).map_err(io_or_timeout(
            self.timeout,
            format!("acknowledging to {}", self.peer),
        ))
    }

    fn abort(&mut self, reason: &str) {
        if let Some(control) = self.sockets.first_mut() {
            let _ = control.set_write_timeout(Some(Duration::from_secs(1)));
            let frame = Frame::new(Kind::Abort, 0, 0, reason.len() as u64, 0).encode();
            let _ = write_all_vectored(control, &[&frame, reason.as_bytes()]);
        }
        for s in &self.sockets {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

impl Drop for TcpReceiver {
    fn drop(&mut self) {
        // Unblocks the reader threads (they hold their own Arc of the ring, so nothing dangles).
        self.shared.close("receiver dropped");
        for s in &self.sockets {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_chunk_count_that_overflows_is_a_protocol_error() {
        assert_eq!(advance_base(5, 7, "conn 0").expect("fits"), 12);
        let e = advance_base(u64::MAX - 1, 2, "conn 0").expect_err("overflows");
        assert!(matches!(e, TransportError::Protocol(_)), "{e}");
        assert!(e.to_string().contains("overflows the counter"), "{e}");
    }
}
