//! The producer's side of a receiver pull (Ray's one-sided contract): one [`Server`] per process
//! holds the objects this process produced ([`Server::register`], at Ray's extract) and serves
//! every consumer that asks for one, each on its own thread, so consumers of one producer are
//! served at the same time and nothing waits for the producer's Ray threads.
//!
//! A consumer opens a *session* ([`RecvChannel::connect`](crate::channel::RecvChannel::connect)):
//! `connections` data connections and the direct lane, all with one random session id, the pull
//! flag and the token of an object the server holds (see [`crate::handshake`]). The server's
//! accept thread hands each new connection to a short-lived vetting thread (a connection that
//! never greets holds only its own thread, for at most two seconds); a greeting with a token of
//! no registered object, another protocol or wrong settings is refused and dropped, and serving
//! goes on. Once a session's connections are all there, one thread serves it: it waits for a
//! request on the direct lane (`RDKTPULL`, tag, token: see [`crate::direct`]), checks the token of
//! the registered object in constant time, waits for the object's `ready` hook (the Python layer:
//! the CUDA events recorded on the producer's stream at extract), and sends the object as a push
//! sender would (header, then one gathered staged transfer or inline). A request for an object
//! that is not registered (never produced here, or garbage-collected) is answered with a refusal
//! that names it, and the session stays; a wrong token ends the session. A session ends when its
//! consumer closes it, when a send fails (the consumer aborted or died: only that session ends),
//! or after `idle` without a request.
//!
//! A session over RDMA (the consumer's `RDMAKIT_TRANSPORT=rdma`) greets with one data connection,
//! which becomes gpu-stage's RDMA side channel: the server sets up the sending end over it
//! ([`gpu_stage::RdmaSender::over_stream`]), the consumer the receiving end; requests and headers
//! still go over the direct lane.
//!
//! Each session stages on its own ring: N consumers pulling one CUDA object at once make N copies
//! from the GPU (not one copy sent N times).
//!
//! [`Server::unregister`] (Ray's garbage collection) forgets an object; a pull already running
//! keeps its registration (and the memory it describes) until its send returns.

use std::any::Any;
use std::collections::{HashMap, VecDeque};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::buffer::BufferSpec;
use crate::channel::{AbortHandle, SendChannel, bind_listener};
use crate::config::ChannelConfig;
use crate::direct;
use crate::error::BindError;
use crate::handshake::{
    self, FLAG_PULL, FLAG_RDMA, Hello, SESSION_LEN, Token, check_hello, negotiated, poll_readable,
    read_hello,
};

/// The sessions a server accepts: TCP pulls, and RDMA pulls where this build has RDMA.
const BASES: &[u64] = if cfg!(feature = "rdma") {
    &[FLAG_PULL, FLAG_PULL | FLAG_RDMA]
} else {
    &[FLAG_PULL]
};

/// Waits before the first byte of an object is staged (the Python layer waits for the producer's
/// CUDA events); `Err` is why the object cannot be served.
pub type Ready = Box<dyn Fn() -> Result<(), String> + Send + Sync>;

/// Connections being vetted at once; more are dropped unread (a flood cannot make threads).
const MAX_VETTING: usize = 64;
/// Spans kept for [`Server::spans`].
const MAX_SPANS: usize = 1024;
/// How often the accept and session threads look at the stop flag.
const POLL_MS: i32 = 100;

/// One registered object.
struct Registration {
    buffers: Vec<BufferSpec>,
    token: Token,
    ready: Option<Ready>,
    ready_done: AtomicBool,
    /// What keeps `buffers`' memory alive (the Python objects); dropped with the last `Arc`:
    /// by `unregister` (which Python calls with the GIL held) when no pull reads it, else by the
    /// serving thread whose send ended last, without the GIL. PyO3 then defers the Python
    /// reference's release to the next time this process enters PyO3 (its next extract, stats or
    /// garbage collection), so the tensors outlive their object by that long.
    _keep: Box<dyn Any + Send + Sync>,
}

impl Registration {
    fn wait_ready(&self) -> Result<(), String> {
        if self.ready_done.load(Ordering::Acquire) {
            return Ok(());
        }
        if let Some(ready) = &self.ready {
            ready()?;
        }
        self.ready_done.store(true, Ordering::Release);
        Ok(())
    }
}

/// Counters of a server (all since it was made, except the `*_open`, `registered` and `serving`
/// gauges).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServerStats {
    /// Objects registered now.
    pub registered: u64,
    /// Objects dropped by [`Server::unregister`].
    pub unregistered: u64,
    /// Sessions set up.
    pub sessions_opened: u64,
    /// Sessions being served now.
    pub sessions_open: u64,
    /// Pulls being served now.
    pub serving: u64,
    /// Objects served.
    pub served: u64,
    /// Bytes served.
    pub bytes_served: u64,
    /// Pulls whose send failed (the consumer aborted or went away).
    pub serve_failures: u64,
    /// Pulls refused (no such object, a wrong token, the ready hook failed).
    pub pulls_refused: u64,
    /// Connections refused in the handshake (no or a wrong token, another protocol).
    pub connections_refused: u64,
}

/// One served pull: the object's tag, wall-clock start and end (seconds since the Unix epoch:
/// comparable across processes of one machine), bytes, and whether it succeeded.
#[derive(Clone, Debug, PartialEq)]
pub struct Span {
    /// The object's tag.
    pub tag: String,
    /// When the request was read.
    pub start: f64,
    /// When the send returned.
    pub end: f64,
    /// Bytes sent (0 when it failed).
    pub bytes: u64,
    /// Whether the send succeeded.
    pub ok: bool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn now_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

struct Pending {
    first: Hello,
    streams: Vec<TcpStream>,
    since: Instant,
}

struct Shared {
    cfg: ChannelConfig,
    idle: Duration,
    objects: Mutex<HashMap<String, Arc<Registration>>>,
    pending: Mutex<HashMap<[u8; SESSION_LEN], Pending>>,
    sessions: Mutex<HashMap<u64, Arc<AbortHandle>>>,
    next_session: Mutex<u64>,
    stats: Mutex<ServerStats>,
    spans: Mutex<VecDeque<Span>>,
    vetting: AtomicUsize,
    stop: AtomicBool,
}

impl Shared {
    fn count(&self, f: impl FnOnce(&mut ServerStats)) {
        f(&mut lock(&self.stats));
    }

    /// Whether `t` is the token of a registered object (each compared in constant time).
    fn knows(&self, t: &Token) -> bool {
        lock(&self.objects).values().any(|r| r.token.matches(t))
    }
}

/// The per-process serving side of pulls. Dropping it stops serving (running sessions are cut).
pub struct Server {
    shared: Arc<Shared>,
    addr: SocketAddr,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server").field("addr", &self.addr).finish()
    }
}

impl Server {
    /// Listens on `addr` (`10.0.0.2:0` picks a free port on that address) and starts the accept
    /// thread. Sessions adopt their consumer's connection count and ring geometry; `cfg` gives
    /// the rest (ring backend, timeouts). A session without a request for `idle` is closed.
    pub fn bind(addr: &str, cfg: &ChannelConfig, idle: Duration) -> Result<Self, BindError> {
        let listener = bind_listener(addr)?;
        let local = listener.local_addr().map_err(|e| {
            BindError::Transport(gpu_stage::TransportError::Io {
                context: "reading the server's address".into(),
                source: e,
            })
        })?;
        let shared = Arc::new(Shared {
            cfg: cfg.clone(),
            idle,
            objects: Mutex::new(HashMap::new()),
            pending: Mutex::new(HashMap::new()),
            sessions: Mutex::new(HashMap::new()),
            next_session: Mutex::new(0),
            stats: Mutex::new(ServerStats::default()),
            spans: Mutex::new(VecDeque::new()),
            vetting: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
        });
        let s = Arc::clone(&shared);
        thread::Builder::new()
            .name("rdmakit-rdt-serve".into())
            .spawn(move || accept_loop(&listener, &s))
            .map_err(|e| {
                BindError::Transport(gpu_stage::TransportError::Io {
                    context: "starting the server's accept thread".into(),
                    source: e,
                })
            })?;
        Ok(Server {
            shared,
            addr: local,
        })
    }

    /// The bound address (its port is what consumers are told).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Registers (or replaces) the object `tag`: consumers presenting `token` may pull `buffers`
    /// until [`Server::unregister`]. `ready` runs (once, on a serving thread) before the first
    /// byte is staged.
    ///
    /// # Safety
    ///
    /// The memory every spec of `buffers` describes must stay allocated, and must not be written,
    /// for as long as `keep` is alive: the server reads it from its serving threads at any time
    /// until the registration is dropped, and drops `keep` only after the last send that reads it
    /// returned.
    pub unsafe fn register(
        &self,
        tag: &str,
        buffers: Vec<BufferSpec>,
        token: Token,
        ready: Option<Ready>,
        keep: Box<dyn Any + Send + Sync>,
    ) -> Result<(), BindError> {
        if tag.len() > direct::MAX_TAG {
            return Err(BindError::env(
                "object tag",
                tag,
                &format!("at most {} bytes", direct::MAX_TAG),
            ));
        }
        let reg = Arc::new(Registration {
            buffers,
            token,
            ready,
            ready_done: AtomicBool::new(false),
            _keep: keep,
        });
        let n = {
            let mut objects = lock(&self.shared.objects);
            objects.insert(tag.to_string(), reg);
            objects.len() as u64
        };
        self.shared.count(|s| s.registered = n);
        Ok(())
    }

    /// Forgets the object `tag` (a later pull of it is refused); whether it was registered. A
    /// pull of it that is running finishes.
    pub fn unregister(&self, tag: &str) -> bool {
        let (gone, n) = {
            let mut objects = lock(&self.shared.objects);
            let gone = objects.remove(tag);
            (gone, objects.len() as u64)
        };
        self.shared.count(|s| {
            s.registered = n;
            s.unregistered += u64::from(gone.is_some());
        });
        // The registration (and the memory it keeps) goes when the last running pull returns.
        gone.is_some()
    }

    /// The counters.
    pub fn stats(&self) -> ServerStats {
        lock(&self.shared.stats).clone()
    }

    /// The last pulls served (at most 1,024), oldest first.
    pub fn spans(&self) -> Vec<Span> {
        lock(&self.shared.spans).iter().cloned().collect()
    }

    /// Stops accepting and cuts every running session (also done on drop).
    pub fn close(&self) {
        self.shared.stop.store(true, Ordering::Release);
        for abort in lock(&self.shared.sessions).values() {
            abort.abort("the producer's server was closed");
        }
        lock(&self.shared.pending).clear();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.close();
    }
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    while !shared.stop.load(Ordering::Acquire) {
        // Sessions whose connections stopped coming are dropped.
        let limit = shared.cfg.timeout;
        lock(&shared.pending).retain(|_, p| p.since.elapsed() < limit);
        match poll_readable(listener, POLL_MS) {
            Ok(true) => {}
            Ok(false) => continue,
            Err(_) => {
                thread::sleep(Duration::from_millis(POLL_MS as u64));
                continue;
            }
        }
        let Ok((s, _)) = listener.accept() else {
            continue;
        };
        if shared.vetting.fetch_add(1, Ordering::AcqRel) >= MAX_VETTING {
            shared.vetting.fetch_sub(1, Ordering::AcqRel);
            shared.count(|st| st.connections_refused += 1);
            continue; // dropped unread
        }
        let sh = Arc::clone(shared);
        let spawned = thread::Builder::new()
            .name("rdmakit-rdt-vet".into())
            .spawn(move || {
                vet(&sh, s);
                sh.vetting.fetch_sub(1, Ordering::AcqRel);
            });
        if spawned.is_err() {
            shared.vetting.fetch_sub(1, Ordering::AcqRel);
            shared.count(|st| st.connections_refused += 1);
        }
    }
}

/// Greets one connection: it opens a session (connection 0, with a registered object's token)
/// or joins the one its session id names; once a session is complete, its serving thread starts.
fn vet(shared: &Arc<Shared>, mut s: TcpStream) {
    let cfg = &shared.cfg;
    let deadline = Instant::now() + cfg.timeout;
    let refuse = |mut s: TcpStream| {
        shared.count(|st| st.connections_refused += 1);
        handshake::refuse(&mut s);
    };
    let h = match read_hello(&mut s, cfg, deadline) {
        Ok(h) => h,
        Err(_) => return refuse(s),
    };
    let complete = {
        let mut pending = lock(&shared.pending);
        match pending.get_mut(&h.session) {
            None => {
                if check_hello(&h, |t| shared.knows(t), None, BASES).is_err()
                    || handshake::welcome(&mut s, &h, cfg).is_err()
                {
                    drop(pending);
                    return refuse(s);
                }
                pending.insert(
                    h.session,
                    Pending {
                        first: h,
                        streams: vec![s],
                        since: Instant::now(),
                    },
                );
                None
            }
            Some(p) => {
                let ok = check_hello(&h, |_| true, Some(&p.first), BASES).is_ok()
                    && h.index as usize == p.streams.len()
                    && handshake::welcome(&mut s, &h, cfg).is_ok();
                if !ok {
                    drop(pending);
                    return refuse(s);
                }
                p.streams.push(s);
                if p.streams.len() == p.first.connections as usize + 1 {
                    pending.remove(&h.session)
                } else {
                    None
                }
            }
        }
    };
    if let Some(p) = complete {
        let sh = Arc::clone(shared);
        let _ = thread::Builder::new()
            .name("rdmakit-rdt-session".into())
            .spawn(move || serve_session(&sh, p));
    }
}

/// Serves one consumer's session until it closes, fails, idles out or the server stops.
fn serve_session(shared: &Arc<Shared>, p: Pending) {
    let Pending {
        first, mut streams, ..
    } = p;
    let cfg = negotiated(&first).apply(&shared.cfg);
    let Some(direct_lane) = streams.pop() else {
        return;
    };
    let peer = direct_lane
        .peer_addr()
        .map_or_else(|_| "a consumer".into(), |a| format!("consumer {a}"));
    let abort = AbortHandle::new();
    let id = {
        let mut n = lock(&shared.next_session);
        *n += 1;
        *n
    };
    lock(&shared.sessions).insert(id, Arc::clone(&abort));
    if shared.stop.load(Ordering::Acquire) {
        abort.abort("the producer's server was closed");
    }
    let ch = if first.flags & FLAG_RDMA != 0 {
        SendChannel::over_rdma(streams, direct_lane, &cfg, abort, first.token, peer)
    } else {
        SendChannel::over_tcp(streams, direct_lane, &cfg, abort, first.token, peer)
    };
    if let Ok(mut ch) = ch {
        shared.count(|s| {
            s.sessions_opened += 1;
            s.sessions_open += 1;
        });
        serve_requests(shared, &mut ch, &cfg);
        shared.count(|s| s.sessions_open -= 1);
    }
    lock(&shared.sessions).remove(&id);
}

fn serve_requests(shared: &Shared, ch: &mut SendChannel, cfg: &ChannelConfig) {
    let timeout = cfg.timeout;
    let mut waited = Instant::now();
    while !shared.stop.load(Ordering::Acquire) && ch.closed().is_none() {
        let Some(lane) = ch.lane() else { return };
        match poll_readable(lane, POLL_MS) {
            Ok(true) => {}
            Ok(false) if waited.elapsed() < shared.idle => continue,
            _ => return, // idle too long, or the lane failed
        }
        // Readable: a request, or the consumer closed the session (then this fails and ends it).
        let Ok((tag, token)) = direct::read_request(lane, timeout) else {
            return;
        };
        let reg = lock(&shared.objects).get(&tag).cloned();
        let reg = match reg {
            Some(r) if r.token.matches(&token) => r,
            Some(_) => {
                shared.count(|s| s.pulls_refused += 1);
                let _ = direct::refuse_request(
                    lane,
                    &format!("wrong token for object {tag:?}: refused"),
                    timeout,
                );
                return; // whoever sent it is not a consumer of this object
            }
            None => {
                shared.count(|s| s.pulls_refused += 1);
                let why = format!(
                    "object {tag:?} is not registered with this producer (it was \
                     garbage-collected, or never produced in this process)"
                );
                if direct::refuse_request(lane, &why, timeout).is_err() {
                    return;
                }
                waited = Instant::now();
                continue;
            }
        };
        if let Err(why) = reg.wait_ready() {
            shared.count(|s| s.pulls_refused += 1);
            let why = format!("object {tag:?} cannot be served: {why}");
            if direct::refuse_request(lane, &why, timeout).is_err() {
                return;
            }
            continue;
        }
        shared.count(|s| s.serving += 1);
        let start = now_s();
        let r = ch.send(&tag, &reg.buffers, Some(reg.token));
        let end = now_s();
        drop(reg);
        let ok = r.is_ok();
        let bytes = *r.as_ref().unwrap_or(&0);
        shared.count(|s| {
            s.serving -= 1;
            if ok {
                s.served += 1;
                s.bytes_served += bytes;
            } else {
                s.serve_failures += 1;
            }
        });
        {
            let mut spans = lock(&shared.spans);
            if spans.len() == MAX_SPANS {
                spans.pop_front();
            }
            spans.push_back(Span {
                tag,
                start,
                end,
                bytes,
                ok,
            });
        }
        if !ok {
            return; // the channel is closed; the consumer opens a new session
        }
        waited = Instant::now();
    }
}
