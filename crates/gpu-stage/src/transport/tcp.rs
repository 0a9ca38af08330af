//! TCP transport: N parallel connections, chunk `seq` travels on connection `seq % N`, each
//! connection has its own writer (sender) or reader (receiver) thread so the connections really
//! run in parallel, and the receiver puts chunks back in order.
//!
//! Framing: every frame starts with a 40-byte little-endian header
//! `magic u32 | kind u32 | seq u64 | offset u64 | len u64 | aux u64`.
//! - `HELLO` (once per connection): `seq` = connection index, `aux` = number of connections.
//! - `DATA`: `len` payload bytes follow, destined for `offset`.
//! - `END` (on every connection after the last chunk): `len` = total bytes, `aux` = total chunks.
//! - `ACK` (receiver → sender on connection 0, after the data is on the device): same totals.
//! - `ABORT`: `len` bytes of UTF-8 reason follow.
//!
//! Backpressure is TCP's own: a receiver reader that finds no free ring slot stops reading, the
//! socket buffers fill, the sender's writer blocks, its slots stay busy and the sender's copy
//! issuer waits for them.
//!
//! Every blocking step is bounded by the transport's timeout (default [`DEFAULT_TIMEOUT`], like the
//! RDMA transport): connecting, accepting, the greeting, each write (a peer that stops reading for
//! that long fails the transfer), the wait for the next chunk and for the ACK. A stall fails with
//! [`TransportError::Timeout`] naming the step and the peer. Dropping either end shuts its sockets
//! down, so no worker thread stays blocked on a stalled peer.

use std::collections::BTreeMap;
use std::io::{self, IoSlice, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use super::{Chunk, RecvTransport, SendTransport, TransferSummary, accept_within, io_or_timeout};
use crate::error::TransportError;
use crate::ring::{SlotToken, StagingRing};

const MAGIC: u32 = 0x4753_5447; // "GTSG" little-endian: gpu-stage
const HEADER_LEN: usize = 40;
/// Most parallel connections one transport opens.
pub const MAX_CONNECTIONS: usize = 64;
/// Default number of parallel connections (see the crate README for the measurement).
pub const DEFAULT_CONNECTIONS: usize = 4;
/// Default bound on every blocking step (connect, accept, one write, the next chunk, the ACK).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

fn check_timeout(timeout: Duration) -> Result<(), TransportError> {
    if timeout.is_zero() {
        return Err(TransportError::Config {
            field: "timeout",
            value: format!("{timeout:?}"),
            reason: "use a timeout above zero".into(),
        });
    }
    Ok(())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
enum Kind {
    Hello = 1,
    Data = 2,
    End = 3,
    Ack = 4,
    Abort = 5,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Frame {
    kind: Kind,
    seq: u64,
    offset: u64,
    len: u64,
    aux: u64,
}

impl Frame {
    fn new(kind: Kind, seq: u64, offset: u64, len: u64, aux: u64) -> Self {
        Frame {
            kind,
            seq,
            offset,
            len,
            aux,
        }
    }

    fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4..8].copy_from_slice(&(self.kind as u32).to_le_bytes());
        b[8..16].copy_from_slice(&self.seq.to_le_bytes());
        b[16..24].copy_from_slice(&self.offset.to_le_bytes());
        b[24..32].copy_from_slice(&self.len.to_le_bytes());
        b[32..40].copy_from_slice(&self.aux.to_le_bytes());
        b
    }

    fn decode(b: &[u8; HEADER_LEN]) -> Result<Self, TransportError> {
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(a)
        };
        let magic = u32_at(0);
        if magic != MAGIC {
            return Err(TransportError::Protocol(format!(
                "bad frame magic {magic:#010x} (expected {MAGIC:#010x}): the peer is not a gpu-stage TCP transport or the stream lost sync"
            )));
        }
        let kind = match u32_at(4) {
            1 => Kind::Hello,
            2 => Kind::Data,
            3 => Kind::End,
            4 => Kind::Ack,
            5 => Kind::Abort,
            k => return Err(TransportError::Protocol(format!("unknown frame kind {k}"))),
        };
        Ok(Frame {
            kind,
            seq: u64_at(8),
            offset: u64_at(16),
            len: u64_at(24),
            aux: u64_at(32),
        })
    }
}

/// Reads one header. `Ok(None)` on a clean EOF before the first byte.
fn read_frame(stream: &mut TcpStream) -> io::Result<Option<Frame>> {
    let mut b = [0u8; HEADER_LEN];
    let mut got = 0;
    while got < HEADER_LEN {
        match stream.read(&mut b[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(io::Error::from(io::ErrorKind::UnexpectedEof)),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Frame::decode(&b)
        .map(Some)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))
}

fn write_all_vectored(stream: &mut TcpStream, parts: &[&[u8]]) -> io::Result<()> {
    let mut slices: Vec<IoSlice<'_>> = parts.iter().map(|p| IoSlice::new(p)).collect();
    let mut bufs: &mut [IoSlice<'_>] = &mut slices;
    while !bufs.is_empty() {
        match stream.write_vectored(bufs) {
            Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
            Ok(n) => IoSlice::advance_slices(&mut bufs, n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn check_connections(connections: usize) -> Result<(), TransportError> {
    if (1..=MAX_CONNECTIONS).contains(&connections) {
        Ok(())
    } else {
        Err(TransportError::Config {
            field: "connections",
            value: connections.to_string(),
            reason: format!("use 1..={MAX_CONNECTIONS} parallel TCP connections"),
        })
    }
}

fn read_reason(stream: &mut TcpStream, len: u64) -> String {
    let mut buf = vec![0u8; len.min(4096) as usize];
    match stream.read_exact(&mut buf) {
        Ok(()) => String::from_utf8_lossy(&buf).into_owned(),
        Err(_) => "peer aborted (reason unreadable)".into(),
    }
}

enum WriterJob {
    Data(Chunk, SlotToken),
    End(TransferSummary, mpsc::Sender<Result<(), String>>),
}

/// Sending half of the TCP transport.
#[derive(Debug)]
pub struct TcpSender {
    writers: Vec<mpsc::Sender<WriterJob>>,
    handles: Vec<JoinHandle<()>>,
    sockets: Vec<TcpStream>,
    peer: String,
    timeout: Duration,
}

impl std::fmt::Debug for WriterJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WriterJob::Data(c, _) => write!(f, "Data({c:?})"),
            WriterJob::End(s, _) => write!(f, "End({s:?})"),
        }
    }
}

impl TcpSender {
    /// Opens `connections` connections to a [`TcpReceiver`] listening at `addr`, with the
    /// [`DEFAULT_TIMEOUT`] on every blocking step.
    pub fn connect(addr: impl ToSocketAddrs, connections: usize) -> Result<Self, TransportError> {
        Self::connect_with_timeout(addr, connections, DEFAULT_TIMEOUT)
    }

    /// Like [`TcpSender::connect`], with `timeout` bounding each connect, each write (a receiver
    /// that reads nothing for that long fails the transfer) and the wait for the receiver's ACK.
    pub fn connect_with_timeout(
        addr: impl ToSocketAddrs,
        connections: usize,
        timeout: Duration,
    ) -> Result<Self, TransportError> {
        check_connections(connections)?;
        check_timeout(timeout)?;
        let addrs: Vec<_> = addr
            .to_socket_addrs()
            .map_err(TransportError::io("resolving the receiver address"))?
            .collect();
        let peer = addrs
            .first()
            .map(|a| a.to_string())
            .ok_or_else(|| TransportError::Config {
                field: "address",
                value: String::new(),
                reason: "the address resolved to nothing".into(),
            })?;
        // Built as a value from the start: a failure halfway drops it, which shuts down and joins
        // the writers already started.
        let mut this = TcpSender {
            writers: Vec::with_capacity(connections),
            handles: Vec::with_capacity(connections),
            sockets: Vec::with_capacity(connections),
            peer,
            timeout,
        };
        let peer = this.peer.clone();
        for index in 0..connections {
            let mut stream = connect_any(&addrs, timeout).map_err(io_or_timeout(
                timeout,
                format!("connecting data connection {index} to {peer}"),
            ))?;
            stream
                .set_nodelay(true)
                .map_err(TransportError::io("setting TCP_NODELAY"))?;
            stream
                .set_write_timeout(Some(timeout))
                .map_err(TransportError::io("setting a write timeout"))?;
            let hello = Frame::new(Kind::Hello, index as u64, 0, 0, connections as u64);
            stream
                .write_all(&hello.encode())
                .map_err(TransportError::io(format!(
                    "greeting {peer} on connection {index}"
                )))?;
            this.sockets.push(
                stream
                    .try_clone()
                    .map_err(TransportError::io("cloning a socket handle"))?,
            );
            let (tx, rx) = mpsc::channel();
            let context = format!("sending to {peer} on connection {index}");
            let handle = std::thread::Builder::new()
                .name(format!("gpu-stage-tcp-w{index}"))
                .spawn(move || writer_loop(stream, rx, index, context, timeout))
                .map_err(TransportError::io("spawning a writer thread"))?;
            this.writers.push(tx);
            this.handles.push(handle);
        }
        Ok(this)
    }

    /// Number of parallel connections.
    pub fn connections(&self) -> usize {
        self.writers.len()
    }

    /// A handle that shuts this sender's connections down from another thread (see
    /// [`TcpShutdown`]).
    pub fn shutdown_handle(&self) -> Result<TcpShutdown, TransportError> {
        TcpShutdown::of(&self.sockets)
    }
}

/// Shuts a TCP transport's connections down from any thread: every blocked read, write or wait
/// of either end then fails at once (the peer sees the connections close), so an abort never waits
/// for a timeout. Made by [`TcpSender::shutdown_handle`] / [`TcpReceiver::shutdown_handle`]; the
/// transport stays unusable afterwards.
#[derive(Debug)]
pub struct TcpShutdown {
    sockets: Vec<TcpStream>,
}

impl TcpShutdown {
    fn of(sockets: &[TcpStream]) -> Result<Self, TransportError> {
        let sockets = sockets
            .iter()
            .map(|s| s.try_clone())
            .collect::<Result<Vec<_>, _>>()
            .map_err(TransportError::io("cloning a socket handle"))?;
        Ok(TcpShutdown { sockets })
    }

    /// Shuts every connection down in both directions (idempotent).
    pub fn shutdown(&self) {
        for s in &self.sockets {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

/// Connects to the first of `addrs` that answers, each attempt bounded by `timeout`.
fn connect_any(addrs: &[std::net::SocketAddr], timeout: Duration) -> io::Result<TcpStream> {
    let mut last = io::Error::from(io::ErrorKind::AddrNotAvailable);
    for a in addrs {
        match TcpStream::connect_timeout(a, timeout) {
            Ok(s) => return Ok(s),
            Err(e) => last = e,
        }
    }
    Err(last)
}

fn writer_loop(
    mut stream: TcpStream,
    rx: mpsc::Receiver<WriterJob>,
    index: usize,
    context: String,
    timeout: Duration,
) {
    let describe = |e: io::Error| match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
            format!("{context}: timed out after {timeout:?} (the receiver stopped reading)")
        }
        _ => format!("{context}: {e}"),
    };
    let mut failure: Option<String> = None;
    for job in rx {
        match job {
            WriterJob::Data(c, slot) => {
                if failure.is_none() {
                    let r = (|| -> Result<(), String> {
                        let bytes = slot.bytes(c.len).map_err(|e| e.to_string())?;
                        let header =
                            Frame::new(Kind::Data, c.seq, c.offset, c.len as u64, index as u64)
                                .encode();
                        write_all_vectored(&mut stream, &[&header, bytes]).map_err(describe)
                    })();
                    if let Err(e) = r {
                        slot.ring().gate().fail(format!("TCP transport: {e}"));
                        failure = Some(e);
                    }
                }
                // The bytes left (or never will): the slot goes back to the pipeline.
                drop(slot);
            }
            WriterJob::End(summary, reply) => {
                let r = match &failure {
                    Some(e) => Err(e.clone()),
                    None => {
                        let end =
                            Frame::new(Kind::End, 0, 0, summary.bytes, summary.chunks).encode();
                        stream
                            .write_all(&end)
                            .and_then(|()| stream.flush())
                            .map_err(describe)
                    }
                };
                if let Err(e) = &r {
                    failure = Some(e.clone());
                }
                let _ = reply.send(r);
            }
        }
    }
}

impl SendTransport for TcpSender {
    fn submit(
        &mut self,
        _ring: &Arc<StagingRing>,
        chunk: Chunk,
        slot: SlotToken,
    ) -> Result<(), TransportError> {
        let n = self.writers.len();
        let conn = (chunk.seq % n as u64) as usize;
        self.writers[conn]
            .send(WriterJob::Data(chunk, slot))
            .map_err(|_| {
                // The writer exited; the job (and with it the slot's token) was dropped, which
                // frees the slot so the pipeline can unwind.
                TransportError::Closed(format!(
                    "writer for connection {conn} to {} exited",
                    self.peer
                ))
            })
    }

    fn finish(&mut self, summary: TransferSummary) -> Result<(), TransportError> {
        let mut replies = Vec::with_capacity(self.writers.len());
        for (i, w) in self.writers.iter().enumerate() {
            let (tx, rx) = mpsc::channel();
            w.send(WriterJob::End(summary, tx)).map_err(|_| {
                TransportError::Closed(format!("writer for connection {i} to {} exited", self.peer))
            })?;
            replies.push(rx);
        }
        for (i, rx) in replies.into_iter().enumerate() {
            match rx.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    return Err(TransportError::Closed(format!("connection {i}: {e}")));
                }
                Err(_) => {
                    return Err(TransportError::Closed(format!(
                        "writer for connection {i} to {} exited",
                        self.peer
                    )));
                }
            }
        }
        // Wait for the receiver's acknowledgement that the data is on its device.
        let control = self
            .sockets
            .first_mut()
            .ok_or_else(|| TransportError::Closed("no connections".into()))?;
        control
            .set_read_timeout(Some(self.timeout))
            .map_err(TransportError::io("setting a read timeout"))?;
        let frame = read_frame(control)
            .map_err(io_or_timeout(
                self.timeout,
                format!("for the ACK from {}", self.peer),
            ))?
            .ok_or_else(|| {
                TransportError::Closed(format!(
                    "{} closed the connection before acknowledging",
                    self.peer
                ))
            })?;
        match frame.kind {
            Kind::Ack if frame.len == summary.bytes && frame.aux == summary.chunks => Ok(()),
            Kind::Ack => Err(TransportError::Protocol(format!(
                "receiver acknowledged {} bytes in {} chunks, sent {} bytes in {} chunks",
                frame.len, frame.aux, summary.bytes, summary.chunks
            ))),
            Kind::Abort => Err(TransportError::Aborted(format!(
                "receiver aborted: {}",
                read_reason(control, frame.len)
            ))),
            k => Err(TransportError::Protocol(format!("expected ACK, got {k:?}"))),
        }
    }

    fn abort(&mut self, _reason: &str) {
        // Writers may be blocked mid-frame; shutting the sockets down is the only clean signal.
        for s in &self.sockets {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

impl Drop for TcpSender {
    fn drop(&mut self) {
        // Closing the job channels ends the writers after their queues; shutting the sockets down
        // makes a writer blocked on a stalled peer fail at once (dropping the slot tokens of its
        // queued chunks), so every writer can be joined here instead of being left blocked.
        self.writers.clear();
        for s in &self.sockets {
            let _ = s.shutdown(Shutdown::Both);
        }
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

enum ReaderMsg {
    Chunk(Chunk, SlotToken),
    End(TransferSummary),
    Failed(TransportError),
}

/// State shared by the reader threads: the ring to fill and the acquisition ticket.
///
/// Slots must be acquired in global chunk order: if reader A took slot `s` for chunk `k + N`
/// before reader B took it for chunk `k`, chunk `k` could never land and `k + N` could never be
/// delivered in order (deadlock). The ticket serialises acquisitions, not reads.
#[derive(Debug, Default)]
struct Shared {
    state: Mutex<SharedState>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct SharedState {
    ring: Option<Arc<StagingRing>>,
    /// Global index (over all transfers of this transport) of the next chunk to acquire a slot.
    next_acquire: u64,
    failed: Option<String>,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, SharedState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn ring(&self) -> Result<Arc<StagingRing>, TransportError> {
        let mut g = self.lock();
        loop {
            if let Some(f) = &g.failed {
                return Err(TransportError::Aborted(f.clone()));
            }
            if let Some(r) = g.ring.as_ref() {
                return Ok(Arc::clone(r));
            }
            g = self.changed.wait(g).unwrap_or_else(PoisonError::into_inner);
        }
    }

    fn put_ring(&self, ring: &Arc<StagingRing>) {
        self.lock().ring = Some(Arc::clone(ring));
        self.changed.notify_all();
    }

    /// Waits for chunk `global`'s turn, then acquires `slot` (which may block: backpressure).
    fn acquire_in_order(
        &self,
        ring: &Arc<StagingRing>,
        global: u64,
        slot: usize,
    ) -> Result<SlotToken, TransportError> {
        let mut g = self.lock();
        loop {
            if let Some(f) = &g.failed {
                return Err(TransportError::Aborted(f.clone()));
            }
            if g.next_acquire == global {
                break;
            }
            g = self.changed.wait(g).unwrap_or_else(PoisonError::into_inner);
        }
        drop(g);
        let r = ring
            .acquire(slot)
            .map_err(|e| TransportError::Aborted(e.to_string()));
        self.lock().next_acquire += 1;
        self.changed.notify_all();
        r
    }

    fn fail(&self, why: &str) {
        let ring = {
            let mut g = self.lock();
            if g.failed.is_some() {
                return;
            }
            g.failed = Some(why.to_string());
            g.ring.clone()
        };
        self.changed.notify_all();
        if let Some(r) = ring {
            r.gate().fail(format!("TCP transport: {why}"));
        }
    }
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
    /// Accepts the `connections` connections of one [`TcpSender`] on `listener`, with the
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
                base += frame.aux;
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
    let mut token = shared.acquire_in_order(ring, base + frame.seq, slot)?;
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
        {
            let mut g = self.shared.lock();
            if g.failed.is_none() {
                g.failed = Some("receiver dropped".into());
            }
        }
        self.shared.changed.notify_all();
        for s in &self.sockets {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_reject_garbage() {
        let f = Frame::new(Kind::Data, 7, 1 << 40, 4 << 20, 3);
        assert_eq!(Frame::decode(&f.encode()).unwrap(), f);
        let mut bad = f.encode();
        bad[0] ^= 0xff;
        assert!(
            Frame::decode(&bad)
                .unwrap_err()
                .to_string()
                .contains("magic")
        );
        let mut bad = f.encode();
        bad[4] = 99;
        assert!(
            Frame::decode(&bad)
                .unwrap_err()
                .to_string()
                .contains("kind 99")
        );
    }

    #[test]
    fn connection_count_is_checked() {
        assert!(check_connections(0).is_err());
        assert!(check_connections(MAX_CONNECTIONS + 1).is_err());
        check_connections(1).unwrap();
    }
}
