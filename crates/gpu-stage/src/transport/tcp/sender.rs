//! The sending half: one writer thread per connection, chunk `seq` on connection `seq % N`, then
//! END on every connection and a wait for the receiver's ACK on connection 0.

use std::io::{self, Write};
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::sync::{Arc, mpsc};
use std::thread::JoinHandle;
use std::time::Duration;

use super::config::{DEFAULT_TIMEOUT, TcpOptions};
use super::shutdown::TcpShutdown;
use super::wire::{FLAG_CHECKSUM, Frame, Kind, read_frame, read_reason, write_all_vectored};
use crate::checksum::chunk_digest;
use crate::error::TransportError;
use crate::ring::{SlotToken, StagingRing};
use crate::transport::{Chunk, SendTransport, TransferSummary, io_or_timeout};

enum WriterJob {
    Data(Chunk, SlotToken),
    /// Answered with the digest of the connection's chunks of the transfer (0 without checksums).
    End(TransferSummary, mpsc::Sender<Result<u64, String>>),
}

/// Sending half of the TCP transport.
#[derive(Debug)]
pub struct TcpSender {
    writers: Vec<mpsc::Sender<WriterJob>>,
    handles: Vec<JoinHandle<()>>,
    sockets: Vec<TcpStream>,
    peer: String,
    timeout: Duration,
    checksum: bool,
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
    /// Opens `connections` connections to a [`TcpReceiver`](super::TcpReceiver) listening at `addr`, with the
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
        Self::connect_with(
            addr,
            TcpOptions {
                connections,
                timeout,
                ..TcpOptions::default()
            },
        )
    }

    /// Opens a transport with `options` (connections, timeout, per-transfer checksums; the receiver
    /// must use the same connection count and checksum setting).
    pub fn connect_with(
        addr: impl ToSocketAddrs,
        options: TcpOptions,
    ) -> Result<Self, TransportError> {
        options.check()?;
        let TcpOptions {
            connections,
            timeout,
            ..
        } = options;
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
        let mut streams = Vec::with_capacity(connections);
        for index in 0..connections {
            streams.push(connect_any(&addrs, timeout).map_err(io_or_timeout(
                timeout,
                format!("connecting data connection {index} to {peer}"),
            ))?);
        }
        Self::from_streams(streams, options)
    }

    /// A sender over `options.connections` streams already connected to one
    /// [`TcpReceiver`](super::TcpReceiver), in connection-index order (stream `i` carries chunks
    /// `i, i + N, ...`), for callers that run their own handshake first (the rdmakit-rdt binding
    /// authenticates each connection). Sets TCP_NODELAY and the write timeout itself.
    pub fn from_streams(
        streams: Vec<TcpStream>,
        options: TcpOptions,
    ) -> Result<Self, TransportError> {
        options.check()?;
        let TcpOptions {
            connections,
            timeout,
            checksum,
        } = options;
        super::config::check_handed_over(streams.len(), connections)?;
        let peer = streams
            .first()
            .and_then(|s| s.peer_addr().ok())
            .map_or_else(|| "a TCP receiver".to_string(), |a| a.to_string());
        // Built as a value from the start: a failure halfway drops it, which shuts down and joins
        // the writers already started.
        let mut this = TcpSender {
            writers: Vec::with_capacity(connections),
            handles: Vec::with_capacity(connections),
            sockets: Vec::with_capacity(connections),
            peer,
            timeout,
            checksum,
        };
        let peer = this.peer.clone();
        for (index, mut stream) in streams.into_iter().enumerate() {
            stream
                .set_nodelay(true)
                .map_err(TransportError::io("setting TCP_NODELAY"))?;
            stream
                .set_write_timeout(Some(timeout))
                .map_err(TransportError::io("setting a write timeout"))?;
            let flags = if checksum { FLAG_CHECKSUM } else { 0 };
            let hello = Frame::new(Kind::Hello, index as u64, flags, 0, connections as u64);
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
                .spawn(move || writer_loop(stream, rx, index, context, timeout, checksum))
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
    checksum: bool,
) {
    let describe = |e: io::Error| match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
            format!("{context}: timed out after {timeout:?} (the receiver stopped reading)")
        }
        _ => format!("{context}: {e}"),
    };
    let mut failure: Option<String> = None;
    // Sum of this connection's chunk digests in the current transfer (checksums on).
    let mut digest = 0u64;
    for job in rx {
        match job {
            WriterJob::Data(c, slot) => {
                if failure.is_none() {
                    let r = (|| -> Result<(), String> {
                        let bytes = slot.bytes(c.len).map_err(|e| e.to_string())?;
                        if checksum {
                            digest = digest.wrapping_add(chunk_digest(c.offset, bytes));
                        }
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
                let sum = std::mem::take(&mut digest);
                let r = match &failure {
                    Some(e) => Err(e.clone()),
                    None => {
                        let end =
                            Frame::new(Kind::End, 0, sum, summary.bytes, summary.chunks).encode();
                        stream
                            .write_all(&end)
                            .and_then(|()| stream.flush())
                            .map(|()| sum)
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
        let mut digest = 0u64;
        for (i, w) in self.writers.iter().enumerate() {
            let (tx, rx) = mpsc::channel();
            w.send(WriterJob::End(summary, tx)).map_err(|_| {
                TransportError::Closed(format!("writer for connection {i} to {} exited", self.peer))
            })?;
            replies.push(rx);
        }
        for (i, rx) in replies.into_iter().enumerate() {
            match rx.recv() {
                Ok(Ok(d)) => digest = digest.wrapping_add(d),
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
            Kind::Ack
                if frame.len == summary.bytes
                    && frame.aux == summary.chunks
                    && self.checksum
                    && frame.offset != digest =>
            {
                Err(TransportError::Checksum {
                    context: format!("in the ACK from {}", self.peer),
                    sent: digest,
                    computed: frame.offset,
                })
            }
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
