//! The binding's handshake on every TCP connection, before gpu-stage's own HELLO: the object
//! token, the protocol version and the settings the sender chose.
//!
//! ```text
//! sender → receiver (88 bytes): magic "RDKTHELO" | version u32 | index u32 | connections u32
//!                               | slots u32 | chunk u64 | flags u64 | session [16] | token [32]
//! receiver → sender (8 bytes):  "RDKT-OK1" (accepted) or "RDKT-NO1" (refused, then closed)
//! ```
//!
//! The token is minted per object by the producer (32 random bytes, Python's `secrets`), travels
//! to the consumer inside Ray's object metadata and never appears in a message, a `Debug` output
//! or the KV store. A receiver accepts a connection only if its token is the one of the object it
//! is waiting for, compared in constant time. Anything else that connects to the port (a port
//! scan, a stale sender whose receiver's port was reused by another process, a sender of another
//! object) is refused and dropped, and the receiver goes on waiting for its sender until its
//! deadline: such a connection cannot break a transfer.
//!
//! Besides the `connections` data connections (gpu-stage's TCP session), the sender opens one more,
//! the *direct lane* (index `connections`, flag bit 1): object headers travel there, and objects of
//! at most [`SMALL_OBJECT`] bytes on one device (host memory or one GPU) travel there whole, without
//! the staging pipeline
//! (see [`crate::channel`]).
//!
//! Every connection of one channel carries the same random *session* id, so a listener that many
//! connectors reach at once (the producer's [`crate::server::Server`], where consumers pull) can
//! tell whose connection each is. Flag bit 2 ([`FLAG_PULL`]) marks a pull session: the connector is
//! the consumer (it receives the data) and the listener the producer's server; a push sender
//! (flag clear) can only reach a [`crate::channel::PairListener`] and a pull consumer only a
//! server: each refuses the other.
//!
//! The settings are negotiated: the receiver adopts the sender's connection count and ring
//! geometry (chunk, slots) after checking they are in range, so the two ends can never disagree on
//! them; the transport kind and checksum flag must match, and a mismatch is refused with a message
//! naming both.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use gpu_stage::RingConfig;

use crate::channel::AbortHandle;
use crate::config::ChannelConfig;
use crate::error::BindError;

/// Length of an object token.
pub const TOKEN_LEN: usize = 32;

/// A per-object secret. `Debug` never shows the bytes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Token([u8; TOKEN_LEN]);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

impl Token {
    /// A token from its bytes (exactly [`TOKEN_LEN`]).
    pub fn from_bytes(b: &[u8]) -> Result<Self, BindError> {
        let arr: [u8; TOKEN_LEN] = b.try_into().map_err(|_| {
            BindError::env(
                "token",
                "<redacted>",
                &format!(
                    "an object token is {TOKEN_LEN} bytes, this one is {}",
                    b.len()
                ),
            )
        })?;
        Ok(Token(arr))
    }

    /// The all-zero token: what a caller without one (the native API used without Ray) presents.
    pub const NONE: Token = Token([0; TOKEN_LEN]);

    /// The bytes (for the object header).
    pub fn bytes(&self) -> &[u8; TOKEN_LEN] {
        &self.0
    }

    /// Constant-time comparison (no early exit on the first differing byte).
    pub fn matches(&self, other: &Token) -> bool {
        ct_eq(&self.0, &other.0)
    }
}

/// Constant-time equality of two equal-length byte strings (false for different lengths).
pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

const MAGIC: &[u8; 8] = b"RDKTHELO";
const VERSION: u32 = 5;
/// `Hello::flags` bit of the direct lane (the connection after the data connections).
pub const FLAG_DIRECT: u64 = 1 << 1;
/// `Hello::flags` bit of every connection of a pull session (the connector receives).
pub const FLAG_PULL: u64 = 1 << 2;
/// `Hello::flags` bit of every connection of a pull session over RDMA: its one data connection is
/// gpu-stage's RDMA side channel (the server then sets up the sending end over it).
pub const FLAG_RDMA: u64 = 1 << 3;
/// Length of a session id.
pub const SESSION_LEN: usize = 16;
/// Objects up to this many bytes, on one device (host memory or one GPU), travel whole on the
/// direct lane.
pub const SMALL_OBJECT: u64 = 64 << 10;
/// Length of the sender's handshake.
pub const HELLO_LEN: usize = 88;
const OK: &[u8; 8] = b"RDKT-OK1";
const NO: &[u8; 8] = b"RDKT-NO1";
/// How long the receiver waits for one connection's 88 bytes: a connection that sends nothing
/// (a port scan that only connects) holds the accept loop at most this long.
const HELLO_WAIT: Duration = Duration::from_secs(2);

/// One connection's handshake.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Hello {
    /// Connection index (0..connections).
    pub index: u32,
    /// How many connections the sender opens.
    pub connections: u32,
    /// Ring slots the sender uses.
    pub slots: u32,
    /// Ring chunk size the sender uses.
    pub chunk: u64,
    /// Bit 1 ([`FLAG_DIRECT`]): this is the direct lane; bit 2 ([`FLAG_PULL`]): a pull session;
    /// other bits 0.
    pub flags: u64,
    /// The channel's session id (the same on all its connections).
    pub session: [u8; SESSION_LEN],
    /// The object token (redacted in `Debug`).
    pub token: Token,
}

impl Hello {
    /// The wire form.
    pub fn encode(&self) -> [u8; HELLO_LEN] {
        let mut out = [0u8; HELLO_LEN];
        out[..8].copy_from_slice(MAGIC);
        out[8..12].copy_from_slice(&VERSION.to_le_bytes());
        out[12..16].copy_from_slice(&self.index.to_le_bytes());
        out[16..20].copy_from_slice(&self.connections.to_le_bytes());
        out[20..24].copy_from_slice(&self.slots.to_le_bytes());
        out[24..32].copy_from_slice(&self.chunk.to_le_bytes());
        out[32..40].copy_from_slice(&self.flags.to_le_bytes());
        out[40..56].copy_from_slice(&self.session);
        out[56..].copy_from_slice(&self.token.0);
        out
    }

    /// Parses the wire form; the error says what is wrong (never the token).
    pub fn decode(b: &[u8; HELLO_LEN]) -> Result<Self, String> {
        if &b[..8] != MAGIC {
            return Err("not an rdmakit-rdt handshake".into());
        }
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(w)
        };
        let version = u32_at(8);
        if version != VERSION {
            return Err(format!(
                "handshake version {version}, this receiver speaks {VERSION}"
            ));
        }
        let mut token = [0u8; TOKEN_LEN];
        token.copy_from_slice(&b[56..]);
        let mut session = [0u8; SESSION_LEN];
        session.copy_from_slice(&b[40..56]);
        Ok(Hello {
            index: u32_at(12),
            connections: u32_at(16),
            slots: u32_at(20),
            chunk: u64_at(24),
            flags: u64_at(32),
            session,
            token: Token(token),
        })
    }
}

/// What the receiver adopted from the sender.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Negotiated {
    /// Connections.
    pub connections: usize,
    /// Ring geometry.
    pub ring: RingConfig,
}

impl Negotiated {
    /// The receiver's settings with the sender's choices applied.
    pub fn apply(&self, cfg: &ChannelConfig) -> ChannelConfig {
        ChannelConfig {
            connections: self.connections,
            ring: self.ring,
            ..cfg.clone()
        }
    }
}

fn io_err(context: String) -> impl FnOnce(std::io::Error) -> BindError {
    move |source| BindError::Transport(gpu_stage::TransportError::Io { context, source })
}

/// What [`connect`] opened: the data connections, in index order, and the direct lane.
#[derive(Debug)]
pub struct Connected {
    /// The data connections (gpu-stage's session).
    pub streams: Vec<TcpStream>,
    /// The direct lane (read and write timeouts set to `cfg.timeout`).
    pub direct: TcpStream,
}

/// A fresh random session id (the kernel's random source).
pub fn new_session() -> Result<[u8; SESSION_LEN], BindError> {
    let mut id = [0u8; SESSION_LEN];
    let mut got = 0;
    while got < SESSION_LEN {
        // SAFETY: writes at most `SESSION_LEN - got` bytes into the live array `id` from `got` on.
        let n = unsafe {
            libc::getrandom(
                id[got..].as_mut_ptr().cast::<libc::c_void>(),
                SESSION_LEN - got,
                0,
            )
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(io_err("drawing a session id".into())(e));
        }
        got += n as usize;
    }
    Ok(id)
}

/// Opens `cfg.connections` data connections and the direct lane to `addr` and greets each with
/// `token`, `cfg`'s settings and one fresh session id; every connection must be accepted. Each
/// step is bounded by `cfg.timeout`, and the wait for each reply also ends within 50 ms of an
/// `abort`. `base`: the flags of every connection: 0 for a push sender's channel to a receiver's
/// [`crate::channel::PairListener`], [`FLAG_PULL`] (and [`FLAG_RDMA`]) for a consumer's session
/// with a producer's server.
pub fn connect(
    addr: &str,
    cfg: &ChannelConfig,
    token: &Token,
    base: u64,
    abort: &AbortHandle,
) -> Result<Connected, BindError> {
    let session = new_session()?;
    let addrs: Vec<SocketAddr> = addr
        .to_socket_addrs()
        .map_err(|e| BindError::env("receiver address", addr, &e.to_string()))?
        .collect();
    let target = *addrs
        .first()
        .ok_or_else(|| BindError::env("receiver address", addr, "resolves to nothing"))?;
    let mut streams = Vec::with_capacity(cfg.connections + 1);
    for index in 0..=cfg.connections {
        let mut s = TcpStream::connect_timeout(&target, cfg.timeout)
            .map_err(io_err(format!("connecting connection {index} to {addr}")))?;
        s.set_read_timeout(Some(cfg.timeout))
            .map_err(io_err("setting a read timeout".into()))?;
        s.set_write_timeout(Some(cfg.timeout))
            .map_err(io_err("setting a write timeout".into()))?;
        s.set_nodelay(true)
            .map_err(io_err("setting TCP_NODELAY".into()))?;
        let hello = Hello {
            index: index as u32,
            connections: cfg.connections as u32,
            slots: cfg.ring.slots as u32,
            chunk: cfg.ring.chunk_bytes as u64,
            flags: base
                | if index == cfg.connections {
                    FLAG_DIRECT
                } else {
                    0
                },
            session,
            token: *token,
        };
        s.write_all(&hello.encode())
            .map_err(io_err(format!("greeting {addr} on connection {index}")))?;
        let waited = Instant::now();
        loop {
            abort.check()?;
            let ready = poll_readable(&s, 50)
                .map_err(io_err(format!("waiting for {addr}'s handshake reply")))?;
            if ready || waited.elapsed() >= cfg.timeout {
                break; // the read below returns the reply, or times out naming the wait
            }
        }
        let mut reply = [0u8; 8];
        match s.read_exact(&mut reply) {
            Ok(()) if &reply == OK => {}
            Ok(()) if &reply == NO => {
                return Err(BindError::Refused(format!(
                    "{addr} refused connection {index} (not the object it waits for or serves, \
                     or a wrong token)"
                )));
            }
            Ok(()) => {
                return Err(BindError::Refused(format!(
                    "{addr} answered connection {index} with something other than an rdmakit-rdt \
                     reply"
                )));
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::UnexpectedEof
                        | std::io::ErrorKind::ConnectionReset
                        | std::io::ErrorKind::ConnectionAborted
                ) =>
            {
                return Err(BindError::Refused(format!(
                    "{addr} closed connection {index} during the handshake (not an rdmakit-rdt \
                     receiver waiting for this object?)"
                )));
            }
            Err(e) => return Err(io_err(format!("the handshake reply from {addr}"))(e)),
        }
        if index < cfg.connections {
            s.set_read_timeout(None)
                .map_err(io_err("clearing the read timeout".into()))?;
        }
        streams.push(s);
    }
    let direct = streams
        .pop()
        .ok_or_else(|| BindError::Refused("no direct lane".into()))?;
    Ok(Connected { streams, direct })
}

/// Whether `fd` becomes readable (data, a pending connection, or the peer's close) within `ms`
/// milliseconds; an interrupted wait counts as not yet.
pub(crate) fn poll_readable(fd: &impl AsRawFd, ms: i32) -> std::io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd for a descriptor that the caller's borrow of its owner keeps open
    // for the duration of the call.
    let n = unsafe { libc::poll(&mut pfd, 1, ms) };
    if n < 0 {
        let e = std::io::Error::last_os_error();
        if e.kind() == std::io::ErrorKind::Interrupted {
            return Ok(false);
        }
        return Err(e);
    }
    Ok(n > 0)
}

/// Waits until `listener` has a connection (checking `abort` every 50 ms) or `deadline` passes.
fn wait_readable(
    listener: &TcpListener,
    deadline: Instant,
    abort: &AbortHandle,
) -> Result<bool, BindError> {
    loop {
        abort.check()?;
        if poll_readable(listener, 50)
            .map_err(io_err("waiting for the sender to connect".into()))?
        {
            return Ok(true);
        }
        if Instant::now() >= deadline {
            return Ok(false);
        }
    }
}

/// Reads one connection's greeting, waiting at most [`HELLO_WAIT`] (and not past `deadline`), and
/// sets the connection's write timeout to `cfg.timeout`; `Err` is why it is refused.
pub(crate) fn read_hello(
    s: &mut TcpStream,
    cfg: &ChannelConfig,
    deadline: Instant,
) -> Result<Hello, String> {
    let wait = HELLO_WAIT.min(deadline.saturating_duration_since(Instant::now()));
    let wait = wait.max(Duration::from_millis(1));
    s.set_read_timeout(Some(wait)).map_err(|e| e.to_string())?;
    s.set_write_timeout(Some(cfg.timeout))
        .map_err(|e| e.to_string())?;
    let mut b = [0u8; HELLO_LEN];
    s.read_exact(&mut b)
        .map_err(|e| format!("no handshake: {e}"))?;
    Hello::decode(&b)
}

/// Checks one greeting: its token (`token_ok`), its flags (connection 0's must be one of `bases`,
/// the others' the same as connection 0's), and either that it opens a channel (`first` is
/// `None`: connection 0, settings in range) or that it belongs to the channel `first` opened
/// (same session, token and settings). The caller checks the index.
pub(crate) fn check_hello(
    h: &Hello,
    token_ok: impl FnOnce(&Token) -> bool,
    first: Option<&Hello>,
    bases: &[u64],
) -> Result<(), String> {
    if !token_ok(&h.token) {
        return Err("wrong object token".into());
    }
    let want = match first {
        Some(f) if h.index == f.connections => f.flags | FLAG_DIRECT,
        Some(f) => f.flags,
        None if bases.contains(&h.flags) => h.flags,
        None => {
            return Err(format!(
                "handshake flags {:#x}: not a kind of channel this end accepts",
                h.flags
            ));
        }
    };
    if h.flags != want {
        return Err(format!(
            "handshake flags {:#x}, expected {want:#x}",
            h.flags
        ));
    }
    match first {
        None => {
            let n = h.connections as usize;
            if n == 0 || n > gpu_stage::transport::tcp::MAX_CONNECTIONS {
                return Err(format!("{n} connections is out of range"));
            }
            if h.index != 0 {
                return Err(format!("connection {} came before connection 0", h.index));
            }
            let ring = RingConfig {
                chunk_bytes: usize::try_from(h.chunk).map_err(|_| "chunk too large".to_string())?,
                slots: h.slots as usize,
            };
            ring.validate().map_err(|e| format!("ring settings: {e}"))?;
        }
        Some(f) => {
            if !ct_eq(&h.session, &f.session) || !h.token.matches(&f.token) {
                return Err("not a connection of the channel being set up".into());
            }
            if (h.connections, h.slots, h.chunk) != (f.connections, f.slots, f.chunk) {
                return Err("settings differ from the first connection's".into());
            }
        }
    }
    Ok(())
}

/// Answers an accepted greeting and sets the connection's read timeout: none for a data
/// connection (gpu-stage's readers block; idle is fine), `cfg.timeout` for the direct lane.
pub(crate) fn welcome(s: &mut TcpStream, h: &Hello, cfg: &ChannelConfig) -> Result<(), BindError> {
    // Small frames go out at once: a pull's request after the previous object's confirmation
    // would otherwise wait for the delayed ACK (40 ms), and so would the confirmation itself.
    s.set_nodelay(true)
        .map_err(io_err("setting TCP_NODELAY".into()))?;
    s.write_all(OK)
        .map_err(io_err("answering the peer's handshake".into()))?;
    let timeout = (h.flags & FLAG_DIRECT != 0).then_some(cfg.timeout);
    s.set_read_timeout(timeout)
        .map_err(io_err("setting the read timeout".into()))
}

/// Refuses a greeting (best effort: the connection is dropped right after).
pub(crate) fn refuse(s: &mut TcpStream) {
    let _ = s.write_all(NO);
}

/// The settings a channel opened by `first` adopts.
pub(crate) fn negotiated(first: &Hello) -> Negotiated {
    Negotiated {
        connections: first.connections as usize,
        ring: RingConfig {
            chunk_bytes: first.chunk as usize,
            slots: first.slots as usize,
        },
    }
}

/// What [`accept`] found.
#[derive(Debug)]
pub struct Accepted {
    /// The sender's data connections, in index order.
    pub streams: Vec<TcpStream>,
    /// The direct lane (read and write timeouts set to `cfg.timeout`).
    pub direct: TcpStream,
    /// The settings adopted from the sender.
    pub negotiated: Negotiated,
}

/// Accepts one sender's connections for the object whose token is `token`, refusing (and
/// counting in `refused`) every other connection, until `deadline`.
pub fn accept(
    listener: &TcpListener,
    cfg: &ChannelConfig,
    abort: &AbortHandle,
    token: &Token,
    deadline: Instant,
    refused: &AtomicU64,
) -> Result<Accepted, BindError> {
    let mut first: Option<Hello> = None;
    let mut streams: Vec<TcpStream> = Vec::new();
    let timed_out = || {
        BindError::Transport(gpu_stage::TransportError::Timeout {
            after: cfg.timeout,
            waiting_for: format!(
                "for the sender to connect to {}",
                listener
                    .local_addr()
                    .map_or_else(|_| "?".into(), |a| a.to_string())
            ),
        })
    };
    loop {
        if let Some(f) = &first
            && streams.len() == f.connections as usize + 1
        {
            break;
        }
        if !wait_readable(listener, deadline, abort)? {
            return Err(timed_out());
        }
        let (mut s, _) = match listener.accept() {
            Ok(x) => x,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(io_err("accepting a connection".into())(e)),
        };
        let vetted = read_hello(&mut s, cfg, deadline).and_then(|h| {
            check_hello(&h, |t| t.matches(token), first.as_ref(), &[0])?;
            // The sender opens its connections one after another, each after the previous one
            // was accepted: any other order is not this sender.
            if h.index as usize != streams.len() {
                return Err(format!("connection {} out of order", h.index));
            }
            Ok(h)
        });
        match vetted {
            Ok(h) => {
                welcome(&mut s, &h, cfg)?;
                first.get_or_insert(h);
                streams.push(s);
            }
            Err(_why) => {
                // Refused: say so (best effort) and drop it; keep waiting for the real sender.
                refused.fetch_add(1, Ordering::Relaxed);
                refuse(&mut s);
            }
        }
    }
    let f = first.ok_or_else(timed_out)?;
    let direct = streams.pop().ok_or_else(timed_out)?;
    Ok(Accepted {
        streams,
        direct,
        negotiated: negotiated(&f),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tok(b: u8) -> Token {
        Token([b; TOKEN_LEN])
    }

    #[test]
    fn hello_round_trips_and_debug_hides_the_token() {
        let h = Hello {
            index: 2,
            connections: 3,
            slots: 8,
            chunk: 4 << 20,
            flags: FLAG_PULL,
            session: [7; SESSION_LEN],
            token: tok(0xA5),
        };
        assert_eq!(Hello::decode(&h.encode()).expect("decodes"), h);
        let shown = format!("{h:?}");
        assert!(
            shown.contains("redacted") && !shown.contains("165"),
            "{shown}"
        );
        let mut bad = h.encode();
        bad[0] = b'X';
        assert!(Hello::decode(&bad).is_err());
        let mut v2 = h.encode();
        v2[8] = 9;
        assert!(
            Hello::decode(&v2)
                .expect_err("version")
                .contains("version 9")
        );
    }

    #[test]
    fn tokens_compare_in_full() {
        assert!(tok(1).matches(&tok(1)));
        assert!(!tok(1).matches(&tok(2)));
        let mut one_off = [1u8; TOKEN_LEN];
        one_off[TOKEN_LEN - 1] = 0;
        assert!(!tok(1).matches(&Token(one_off)));
        assert!(!ct_eq(b"ab", b"abc"));
        assert!(Token::from_bytes(&[0; 31]).is_err());
    }
}
