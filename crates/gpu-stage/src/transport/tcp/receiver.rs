//! The receiving half: one reader thread per connection fills ring slots (acquired in chunk order),
//! `next_chunk` hands chunks out in sequence and checks every connection's END totals, `complete`
//! sends the ACK.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{Arc, mpsc};
use std::thread::JoinHandle;
use std::time::Duration;

use super::acquire::Shared;
use super::config::{DEFAULT_TIMEOUT, TcpOptions};
use super::shutdown::TcpShutdown;
use super::wire::{FLAG_CHECKSUM, Frame, Kind, read_frame, read_reason, write_all_vectored};
use crate::checksum::chunk_digest;
use crate::error::TransportError;
use crate::ring::{SlotToken, StagingRing};
use crate::transport::{Chunk, RecvTransport, TransferSummary, accept_within, io_or_timeout};

/// What a reader thread hands to [`TcpReceiver::next_chunk`](RecvTransport::next_chunk), tagged
/// with the transfer it belongs to.
enum ReaderMsg {
    Chunk(Chunk, SlotToken),
    /// The END totals and the digest of what this connection carried (0 without checksums).
    End(TransferSummary, u64),
    Failed(TransportError),
}

impl std::fmt::Debug for ReaderMsg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReaderMsg::Chunk(c, _) => write!(f, "Chunk({c:?})"),
            ReaderMsg::End(s, d) => write!(f, "End({s:?}, {d:#x})"),
            ReaderMsg::Failed(e) => write!(f, "Failed({e})"),
        }
    }
}

/// Receiving half of the TCP transport.
#[derive(Debug)]
pub struct TcpReceiver {
    inbox: Inbox,
    sockets: Vec<TcpStream>,
}

/// The reader threads over any byte streams (sockets; in-memory ones for the hostile-peer tests and
/// the fuzz target) and the in-order reassembly of what they read.
///
/// Bounded whatever the peer sends: every chunk queued or pending holds one of the ring's slots; a
/// reader reads no frame of a transfer after the current one (an honest sender waits for the ACK),
/// so at most one END per connection is queued; the END map holds the current transfer only.
#[derive(Debug)]
pub(crate) struct Inbox {
    results: mpsc::Receiver<(u64, ReaderMsg)>,
    shared: Arc<Shared>,
    /// Chunks of the current transfer that arrived ahead of their turn (with their slots), by seq.
    pending: BTreeMap<u64, (Chunk, SlotToken)>,
    /// The current transfer's END frames so far, with each connection's digest.
    ends: Vec<(TransferSummary, u64)>,
    connections: usize,
    transfer: u64,
    next_seq: u64,
    bytes: u64,
    /// Sum of the digests of the last completed transfer (for the ACK).
    last_digest: u64,
    peer: String,
    timeout: Duration,
    readers: Vec<JoinHandle<()>>,
}

/// Reads and checks one connection's HELLO; its connection index.
fn greet(
    stream: &mut impl Read,
    options: &TcpOptions,
    from: &str,
) -> Result<usize, TransportError> {
    let hello = read_frame(stream)
        .map_err(io_or_timeout(
            options.timeout,
            format!("for the greeting from {from}"),
        ))?
        .ok_or_else(|| TransportError::Closed(format!("{from} closed before greeting")))?;
    if hello.kind != Kind::Hello {
        return Err(TransportError::Protocol(format!(
            "{from} sent {:?} before HELLO",
            hello.kind
        )));
    }
    if hello.aux != options.connections as u64 {
        return Err(TransportError::Config {
            field: "connections",
            value: options.connections.to_string(),
            reason: format!(
                "the sender at {from} opens {} connections; both ends must use the same number",
                hello.aux
            ),
        });
    }
    if hello.offset & !FLAG_CHECKSUM != 0 {
        return Err(TransportError::Protocol(format!(
            "{from} greeted with unknown flags {:#x}",
            hello.offset
        )));
    }
    let theirs = hello.offset & FLAG_CHECKSUM != 0;
    if theirs != options.checksum {
        return Err(TransportError::Config {
            field: "checksum",
            value: options.checksum.to_string(),
            reason: format!(
                "the sender at {from} has checksums {}; both ends must agree",
                if theirs { "on" } else { "off" }
            ),
        });
    }
    usize::try_from(hello.seq)
        .ok()
        .filter(|i| *i < options.connections)
        .ok_or_else(|| {
            TransportError::Protocol(format!(
                "{from} announced connection index {} of {}",
                hello.seq, options.connections
            ))
        })
}

/// Sets an accepted stream's options and reads its HELLO: its connection index and the stream.
fn prepare(
    mut stream: TcpStream,
    options: &TcpOptions,
    peer: &str,
) -> Result<(usize, TcpStream), TransportError> {
    stream
        .set_nodelay(true)
        .map_err(TransportError::io("setting TCP_NODELAY"))?;
    stream
        .set_read_timeout(Some(options.timeout))
        .map_err(TransportError::io("setting a read timeout"))?;
    stream
        .set_write_timeout(Some(options.timeout))
        .map_err(TransportError::io("setting a write timeout"))?;
    let idx = greet(&mut stream, options, peer)?;
    Ok((idx, stream))
}

/// Orders greeted streams by their announced index: each index exactly once.
fn by_index<S>(
    greeted: impl IntoIterator<Item = (usize, S)>,
    connections: usize,
    from: &str,
) -> Result<Vec<S>, TransportError> {
    let mut slots: Vec<Option<S>> = (0..connections).map(|_| None).collect();
    for (idx, s) in greeted {
        match slots.get_mut(idx) {
            Some(slot @ None) => *slot = Some(s),
            _ => {
                return Err(TransportError::Protocol(format!(
                    "{from} announced connection index {idx} twice or out of range"
                )));
            }
        }
    }
    slots
        .into_iter()
        .enumerate()
        .map(|(i, s)| {
            s.ok_or_else(|| TransportError::Protocol(format!("connection {i} never arrived")))
        })
        .collect()
}

impl Inbox {
    /// Starts one reader thread per stream (in connection-index order).
    fn start<R: Read + Send + 'static>(
        streams: Vec<R>,
        peer: String,
        options: &TcpOptions,
    ) -> Result<Inbox, TransportError> {
        let (tx, results) = mpsc::channel();
        let connections = streams.len();
        // From here on a failure drops `this`, which closes `shared`: readers waiting on it end.
        let mut this = Inbox {
            results,
            shared: Arc::new(Shared::default()),
            pending: BTreeMap::new(),
            ends: Vec::with_capacity(connections),
            connections,
            transfer: 0,
            next_seq: 0,
            bytes: 0,
            last_digest: 0,
            peer,
            timeout: options.timeout,
            readers: Vec::with_capacity(connections),
        };
        for (index, stream) in streams.into_iter().enumerate() {
            let tx = tx.clone();
            let shared = Arc::clone(&this.shared);
            let reader = Reader {
                index,
                connections,
                checksum: options.checksum,
                context: format!("receiving from {} on connection {index}", this.peer),
            };
            let handle = std::thread::Builder::new()
                .name(format!("gpu-stage-tcp-r{index}"))
                .spawn(move || reader.run(stream, tx, shared))
                .map_err(TransportError::io("spawning a reader thread"))?;
            this.readers.push(handle);
        }
        Ok(this)
    }

    fn attach(&mut self, ring: &Arc<StagingRing>) {
        self.shared.put_ring(ring);
        self.next_seq = 0;
        self.bytes = 0;
    }

    fn next_chunk(&mut self) -> Result<Option<(Chunk, SlotToken)>, TransportError> {
        loop {
            if let Some((c, slot)) = self.pending.remove(&self.next_seq) {
                self.next_seq += 1;
                self.bytes += c.len as u64;
                return Ok(Some((c, slot)));
            }
            if self.ends.len() == self.connections {
                return self.end_of_transfer().map(|()| None);
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
                ReaderMsg::Failed(e) => return Err(e),
                // Readers read no frame past the current transfer, and one before it is over.
                _ if transfer != self.transfer => {
                    return Err(TransportError::Protocol(format!(
                        "a frame of transfer {transfer} arrived during transfer {} from {}",
                        self.transfer, self.peer
                    )));
                }
                ReaderMsg::Chunk(c, slot) => {
                    if self.pending.insert(c.seq, (c, slot)).is_some() {
                        // Readers check their seqs, so only a bug gets here: refuse, never overwrite.
                        return Err(TransportError::Protocol(format!(
                            "chunk {} arrived twice from {}",
                            c.seq, self.peer
                        )));
                    }
                }
                ReaderMsg::End(s, d) => self.ends.push((s, d)),
            }
        }
    }

    /// Every connection sent its END: check them against what arrived and move to the next transfer.
    fn end_of_transfer(&mut self) -> Result<(), TransportError> {
        let ends = std::mem::take(&mut self.ends);
        let got = TransferSummary {
            chunks: self.next_seq,
            bytes: self.bytes,
        };
        // Chunks that arrived but never got their turn (a gap before them) are the peer's error; their
        // slots go back (no copy was queued for them).
        let stray = std::mem::take(&mut self.pending);
        self.last_digest = ends.iter().fold(0, |a, (_, d)| a.wrapping_add(*d));
        self.transfer += 1;
        self.next_seq = 0;
        self.bytes = 0;
        self.shared.set_current_transfer(self.transfer);
        if let Some(seq) = stray.keys().next() {
            return Err(TransportError::Protocol(format!(
                "chunk {seq} arrived from {} but chunk {} never did before every END",
                self.peer, got.chunks
            )));
        }
        let first = ends.first().map(|(s, _)| *s);
        if let Some((bad, _)) = ends.iter().find(|(s, _)| Some(*s) != first) {
            return Err(TransportError::Protocol(format!(
                "connections disagree on the transfer totals: {first:?} vs {bad:?}"
            )));
        }
        if first != Some(got) {
            return Err(TransportError::Protocol(format!(
                "sender reported {first:?} but {} bytes in {} chunks arrived",
                got.bytes, got.chunks
            )));
        }
        Ok(())
    }

    /// Wakes every reader waiting for a ring or its turn (they then fail), without failing the
    /// ring's gate (the ring may outlive this transport).
    fn close(&self, why: &str) {
        self.shared.close(why);
    }
}

impl Drop for Inbox {
    fn drop(&mut self) {
        // Readers waiting for a ring or their turn fail at once (a failed start included).
        self.close("receiver dropped");
    }
}

/// One connection's reader: its place among the connections and what it checks.
struct Reader {
    index: usize,
    connections: usize,
    checksum: bool,
    context: String,
}

impl Reader {
    fn run<R: Read>(self, mut stream: R, tx: mpsc::Sender<(u64, ReaderMsg)>, shared: Arc<Shared>) {
        let context = &self.context;
        let mut expect = self.index as u64;
        let mut transfer = 0u64;
        // Chunks of all earlier transfers: turns the per-transfer seq into a global index.
        let mut base = 0u64;
        // Sum of the digests of this connection's chunks in the current transfer (checksums on).
        let mut digest = 0u64;
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
            let msg = frame.and_then(|frame| {
                let current = shared.current_transfer();
                if transfer > current {
                    // An honest sender waits for the ACK of a transfer before it starts the next one;
                    // refusing to read ahead bounds what a peer can make us queue (issue 26, F7).
                    return Err(TransportError::Protocol(format!(
                        "{context}: a {:?} frame of transfer {transfer} while transfer {current} is \
                         not complete (one transfer at a time)",
                        frame.kind
                    )));
                }
                match frame.kind {
                    Kind::Data => {
                        let ring = shared.ring()?;
                        let (chunk, mut slot) =
                            read_data(&mut stream, &shared, &ring, frame, expect, base, context)?;
                        if self.checksum {
                            // Over what was read, in the slot this reader still owns.
                            let bytes = slot
                                .bytes_mut(chunk.len)
                                .map_err(|e| TransportError::Protocol(e.to_string()))?;
                            digest = digest.wrapping_add(chunk_digest(chunk.offset, bytes));
                        }
                        expect += self.connections as u64;
                        Ok(ReaderMsg::Chunk(chunk, slot))
                    }
                    Kind::End => {
                        let sum = std::mem::take(&mut digest);
                        if self.checksum && frame.offset != sum {
                            return Err(TransportError::Checksum {
                                context: format!("{context}, transfer {transfer}"),
                                sent: frame.offset,
                                computed: sum,
                            });
                        }
                        expect = self.index as u64;
                        // The count comes from the peer (issue 26, F7): an overflow is its error.
                        base = advance_base(base, frame.aux, context)?;
                        Ok(ReaderMsg::End(
                            TransferSummary {
                                chunks: frame.aux,
                                bytes: frame.len,
                            },
                            sum,
                        ))
                    }
                    Kind::Abort => Err(TransportError::Aborted(format!(
                        "sender aborted: {}",
                        read_reason(&mut stream, frame.len)
                    ))),
                    k => Err(TransportError::Protocol(format!(
                        "{context}: unexpected {k:?} frame"
                    ))),
                }
            });
            match msg {
                Ok(m) => {
                    let is_end = matches!(m, ReaderMsg::End(..));
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
        Self::accept_with(
            listener,
            TcpOptions {
                connections,
                timeout,
                ..TcpOptions::default()
            },
        )
    }

    /// Accepts one sender's connections with `options` (the sender must use the same connection
    /// count and checksum setting).
    pub fn accept_with(
        listener: &TcpListener,
        options: TcpOptions,
    ) -> Result<Self, TransportError> {
        options.check()?;
        let mut greeted = Vec::with_capacity(options.connections);
        let mut peer = String::new();
        for _ in 0..options.connections {
            // Greeted as it arrives: a connection that closes without a HELLO fails the accept
            // at once instead of after the next accept's timeout.
            let (stream, addr) = accept_within(listener, options.timeout, "a TCP sender")?;
            peer = addr.to_string();
            greeted.push(prepare(stream, &options, &peer)?);
        }
        Self::start(greeted, peer, options)
    }

    /// A receiver over `options.connections` streams already accepted from one
    /// [`TcpSender`](super::TcpSender) (in any order: each announces its index in its HELLO), for
    /// callers that run their own handshake before handing the sockets over (the rdmakit-rdt
    /// binding authenticates each connection first). Sets TCP_NODELAY and the timeouts itself.
    pub fn from_streams(
        streams: Vec<TcpStream>,
        options: TcpOptions,
    ) -> Result<Self, TransportError> {
        options.check()?;
        super::config::check_handed_over(streams.len(), options.connections)?;
        let mut greeted = Vec::with_capacity(options.connections);
        let mut peer = String::new();
        for stream in streams {
            peer = stream
                .peer_addr()
                .map_or_else(|_| "a TCP sender".to_string(), |a| a.to_string());
            greeted.push(prepare(stream, &options, &peer)?);
        }
        Self::start(greeted, peer, options)
    }

    /// Orders the greeted streams and starts the readers.
    fn start(
        greeted: Vec<(usize, TcpStream)>,
        peer: String,
        options: TcpOptions,
    ) -> Result<Self, TransportError> {
        let streams = by_index(greeted, options.connections, &peer)?;
        // Every fallible step before the first reader starts; readers block on their sockets
        // without a timeout (idle between transfers is fine) and end when the sockets shut down.
        let mut sockets = Vec::with_capacity(streams.len());
        for stream in &streams {
            stream
                .set_read_timeout(None)
                .map_err(TransportError::io("clearing the read timeout"))?;
            sockets.push(
                stream
                    .try_clone()
                    .map_err(TransportError::io("cloning a socket handle"))?,
            );
        }
        let mut inbox = Inbox::start(streams, peer, &options).inspect_err(|_| {
            // The readers already started end with their sockets.
            for s in &sockets {
                let _ = s.shutdown(Shutdown::Both);
            }
        })?;
        // The real readers end when the sockets shut down (Drop), so they are not joined.
        inbox.readers.clear();
        Ok(TcpReceiver { inbox, sockets })
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
    stream: &mut impl Read,
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
    if len == 0 {
        // A sender never sends an empty chunk; endless empty ones would keep a transfer alive for ever.
        return Err(TransportError::Protocol(format!(
            "{context}: chunk {} is empty",
            frame.seq
        )));
    }
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
        self.inbox.attach(ring);
        Ok(())
    }

    fn next_chunk(
        &mut self,
        _ring: &Arc<StagingRing>,
    ) -> Result<Option<(Chunk, SlotToken)>, TransportError> {
        self.inbox.next_chunk()
    }

    fn complete(&mut self, summary: TransferSummary) -> Result<(), TransportError> {
        let digest = self.inbox.last_digest;
        let control = self
            .sockets
            .first_mut()
            .ok_or_else(|| TransportError::Closed("no connections".into()))?;
        let ack = Frame::new(Kind::Ack, 0, digest, summary.bytes, summary.chunks).encode();
        control.write_all(&ack).map_err(io_or_timeout(
            self.inbox.timeout,
            format!("acknowledging to {}", self.inbox.peer),
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
        self.inbox.close("receiver dropped");
        for s in &self.sockets {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

/// The receiving half over in-memory streams, for the hostile-peer tests and the fuzz target.
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) mod memory {
    use super::*;
    use crate::Device;
    use crate::config::RingConfig;
    use crate::device::HostDevice;
    use crate::error::StageError;
    use crate::pipeline::{Receiver, TransferStats};

    /// A [`RecvTransport`] over an [`Inbox`] of in-memory streams; the ACK goes nowhere.
    struct MemoryReceiver(Inbox);

    impl RecvTransport for MemoryReceiver {
        fn attach(&mut self, ring: &Arc<StagingRing>) -> Result<(), TransportError> {
            self.0.attach(ring);
            Ok(())
        }
        fn next_chunk(
            &mut self,
            _ring: &Arc<StagingRing>,
        ) -> Result<Option<(Chunk, SlotToken)>, TransportError> {
            self.0.next_chunk()
        }
    }

    /// What a receive from fake peers did: each transfer's result and the bytes that landed.
    #[derive(Debug)]
    pub(crate) struct Received {
        pub(crate) transfers: Vec<Result<TransferStats, StageError>>,
        #[cfg_attr(not(test), allow(dead_code))]
        pub(crate) data: Vec<u8>,
    }

    /// Receives up to `transfers` transfers into `dst_len` bytes of host memory from one fake sender
    /// whose connections wrote `streams` (each starting with its HELLO), through the real greeting,
    /// reader threads, reassembly and pipeline. Stops at the first error. Every thread it started
    /// has ended when it returns.
    pub(crate) fn receive(
        streams: Vec<Vec<u8>>,
        options: TcpOptions,
        ring: RingConfig,
        dst_len: usize,
        transfers: usize,
    ) -> Result<Received, StageError> {
        options.check()?;
        let from = "the fake peer";
        let mut greeted = Vec::with_capacity(streams.len());
        for bytes in streams {
            let mut stream = std::io::Cursor::new(bytes);
            let idx = greet(&mut stream, &options, from)?;
            greeted.push((idx, stream));
        }
        let streams = by_index(greeted, options.connections, from)?;
        let dev = HostDevice::new();
        let mut rx = Receiver::new(&dev, ring)?;
        let ring = Arc::clone(rx.ring());
        let mut dst = dev.alloc_zeroed(dst_len)?;
        let mut transport = MemoryReceiver(Inbox::start(streams, from.into(), &options)?);
        let mut results = Vec::new();
        for _ in 0..transfers {
            let r = rx.recv(&mut dst, &mut transport);
            let failed = r.is_err();
            results.push(r);
            if failed {
                break;
            }
        }
        // Wake every reader (blocked on a slot, its turn or the ring), then wait for all of them.
        ring.gate().fail("fake peer: done");
        transport.0.close("fake peer: done");
        for h in transport.0.readers.drain(..) {
            let _ = h.join();
        }
        let data = dev.download(&dst)?;
        Ok(Received {
            transfers: results,
            data,
        })
    }

    /// One frame as a fake sender writes it.
    pub(crate) fn frame(kind: u32, seq: u64, offset: u64, len: u64, aux: u64) -> Vec<u8> {
        let kind = match kind {
            1 => Kind::Hello,
            2 => Kind::Data,
            3 => Kind::End,
            4 => Kind::Ack,
            _ => Kind::Abort,
        };
        Frame::new(kind, seq, offset, len, aux).encode().to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::memory::{frame, receive};
    use super::*;
    use crate::config::RingConfig;
    use crate::error::StageError;

    const CHUNK: usize = 1 << 20;
    /// What the fake peer sends per chunk: whole ring chunks, or short ones under Miri (every byte
    /// costs there; chunks only need to be equal, not ring-sized).
    const PIECE: usize = if cfg!(miri) { 4096 } else { CHUNK };

    fn opts(connections: usize, checksum: bool) -> TcpOptions {
        TcpOptions {
            connections,
            // Under Miri the readers take seconds per chunk; no test here waits for a timeout.
            timeout: Duration::from_millis(if cfg!(miri) { 120_000 } else { 300 }),
            checksum,
        }
    }

    fn hello(index: u64, connections: u64, flags: u64) -> Vec<u8> {
        frame(1, index, flags, 0, connections)
    }

    /// One connection carrying `data` in `PIECE`-byte chunks, then END with `digest` in `offset`.
    fn one_connection(data: &[u8], flags: u64, digest: impl Fn(u64) -> u64) -> Vec<u8> {
        let mut s = hello(0, 1, flags);
        let mut sum = 0u64;
        for (seq, c) in data.chunks(PIECE).enumerate() {
            let offset = (seq * PIECE) as u64;
            sum = sum.wrapping_add(chunk_digest(offset, c));
            s.extend(frame(2, seq as u64, offset, c.len() as u64, 0));
            s.extend_from_slice(c);
        }
        let chunks = data.len().div_ceil(PIECE) as u64;
        s.extend(frame(3, 0, digest(sum), data.len() as u64, chunks));
        s
    }

    fn ring() -> RingConfig {
        RingConfig::new(CHUNK, 2).unwrap()
    }

    #[test]
    fn an_honest_fake_peer_is_received_whole_with_and_without_checksums() {
        let data = crate::checksum::pattern(3 * PIECE + 77, 5);
        for (flags, checksum) in [(0, false), (FLAG_CHECKSUM, true)] {
            let s = one_connection(&data, flags, |d| if checksum { d } else { 0 });
            let r = receive(vec![s], opts(1, checksum), ring(), data.len(), 1).unwrap();
            let stats = r.transfers[0].as_ref().expect("received");
            assert_eq!((stats.bytes, stats.chunks), (data.len() as u64, 4));
            assert_eq!(r.data, data);
        }
    }

    /// Before, the reader took the END's `offset` for nothing: a corrupted transfer passed.
    #[test]
    fn a_digest_that_does_not_match_the_bytes_is_a_checksum_error() {
        let data = crate::checksum::pattern(2 * PIECE + 1, 6);
        let s = one_connection(&data, FLAG_CHECKSUM, |d| d ^ 1);
        let r = receive(vec![s], opts(1, true), ring(), data.len(), 1).unwrap();
        let e = r.transfers[0].as_ref().unwrap_err();
        assert!(
            matches!(e, StageError::Transport(TransportError::Checksum { .. })),
            "{e}"
        );
        assert!(e.to_string().contains("checksum mismatch"), "{e}");
    }

    #[test]
    fn checksum_settings_must_agree() {
        let s = one_connection(&[1; 10], 0, |_| 0);
        let e = receive(vec![s], opts(1, true), ring(), 10, 1).unwrap_err();
        assert!(e.to_string().contains("checksums off"), "{e}");
        let s = one_connection(&[1; 10], 6, |_| 0);
        let e = receive(vec![s], opts(1, false), ring(), 10, 1).unwrap_err();
        assert!(e.to_string().contains("unknown flags 0x6"), "{e}");
    }

    /// Before, empty chunks tiled nothing, passed every check, and a peer could send them for ever.
    #[test]
    fn an_empty_chunk_is_a_protocol_error() {
        let mut s = hello(0, 1, 0);
        for seq in 0..3 {
            s.extend(frame(2, seq, 0, 0, 0));
        }
        s.extend(frame(3, 0, 0, 0, 3));
        let r = receive(vec![s], opts(1, false), ring(), 16, 1).unwrap();
        let e = r.transfers[0].as_ref().unwrap_err();
        assert!(e.to_string().contains("chunk 0 is empty"), "{e}");
    }

    /// Before, a reader read and queued every END a peer sent, however far ahead of the transfer
    /// being received: 10 000 ENDs were 10 000 queued messages (and `ends` map entries) with nobody
    /// receiving. Now a reader reads no frame of a later transfer: one END, then an error.
    #[test]
    fn a_peer_cannot_queue_ends_ahead_of_the_transfer_being_received() {
        let mut s = Vec::new();
        for _ in 0..if cfg!(miri) { 100 } else { 10_000 } {
            s.extend(frame(3, 0, 0, 0, 0));
        }
        let mut inbox = Inbox::start(
            vec![std::io::Cursor::new(s)],
            "the fake peer".into(),
            &opts(1, false),
        )
        .unwrap();
        for h in inbox.readers.drain(..) {
            h.join().unwrap();
        }
        let queued: Vec<_> = inbox.results.try_iter().collect();
        assert_eq!(queued.len(), 2, "{queued:?}");
        assert!(matches!(queued[0].1, ReaderMsg::End(..)), "{queued:?}");
        let ReaderMsg::Failed(e) = &queued[1].1 else {
            panic!("{queued:?}")
        };
        assert!(e.to_string().contains("one transfer at a time"), "{e}");
    }

    #[test]
    fn back_to_back_empty_transfers_from_a_peer_that_waits_are_fine() {
        // An honest sender waits for each ACK, so the receiver is always on the transfer being read;
        // with in-memory streams the reader may race ahead, which must end in an error, not a hang.
        let mut s = hello(0, 1, 0);
        for _ in 0..3 {
            s.extend(frame(3, 0, 0, 0, 0));
        }
        let r = receive(vec![s], opts(1, false), ring(), 16, 3).unwrap();
        assert!(!r.transfers.is_empty());
        assert!(r.transfers[0].is_ok(), "{:?}", r.transfers);
    }

    #[test]
    fn connections_announcing_the_same_index_are_refused() {
        let e = receive(
            vec![hello(0, 2, 0), hello(0, 2, 0)],
            opts(2, false),
            ring(),
            16,
            1,
        )
        .unwrap_err();
        assert!(e.to_string().contains("index 0 twice"), "{e}");
        let e = receive(
            vec![hello(7, 2, 0), hello(0, 2, 0)],
            opts(2, false),
            ring(),
            16,
            1,
        )
        .unwrap_err();
        assert!(e.to_string().contains("index 7 of 2"), "{e}");
    }

    #[test]
    fn a_peer_chunk_count_that_overflows_is_a_protocol_error() {
        assert_eq!(advance_base(5, 7, "conn 0").expect("fits"), 12);
        let e = advance_base(u64::MAX - 1, 2, "conn 0").expect_err("overflows");
        assert!(matches!(e, TransportError::Protocol(_)), "{e}");
        assert!(e.to_string().contains("overflows the counter"), "{e}");
    }
}
