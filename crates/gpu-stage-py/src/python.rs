//! The `rdmakit_rdt._native` extension module (PyO3, abi3 for Python ≥ 3.10).
//!
//! Every blocking call releases the GIL (`Python::detach`) and runs inside `catch_unwind`, so a
//! panic anywhere below becomes an `RdmakitError` naming it (and closes the channel) instead of
//! crossing into the interpreter. Errors map to `RdmakitError` (a `RuntimeError`),
//! `RdmakitTimeoutError` and `RdmakitAbortedError` (both subclasses of it), with the full cause
//! in the message.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use pyo3::create_exception;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::buffer::BufferSpec;
use crate::channel::{self, AbortHandle, PairListener};
use crate::config::{ChannelConfig, RingBackend, TransportKind};
use crate::error::{BindError, ErrorKind};
use crate::handshake::Token;
use crate::server::{Ready, Server};

/// A per-object token from Python, if one was given (else the channel's own is used).
fn object_token(t: Option<&[u8]>) -> PyResult<Option<Token>> {
    t.map(|b| Token::from_bytes(b).map_err(to_py)).transpose()
}

/// The object token from Python (`bytes` of 32), or the all-zero token when none is given.
fn token(t: Option<&[u8]>) -> PyResult<Token> {
    t.map_or(Ok(Token::NONE), |b| Token::from_bytes(b).map_err(to_py))
}

create_exception!(
    rdmakit_rdt._native,
    RdmakitError,
    PyRuntimeError,
    "A transfer or its setup failed; the message names the cause."
);
create_exception!(
    rdmakit_rdt._native,
    RdmakitTimeoutError,
    RdmakitError,
    "A wait on the peer exceeded RDMAKIT_TIMEOUT_S."
);
create_exception!(
    rdmakit_rdt._native,
    RdmakitRefusedError,
    RdmakitError,
    "The peer refused the handshake (a wrong or absent object token, another protocol)."
);
create_exception!(
    rdmakit_rdt._native,
    RdmakitAbortedError,
    RdmakitError,
    "The transfer was aborted (abort_transport or Abort.abort)."
);

fn to_py(e: BindError) -> PyErr {
    let msg = e.to_string();
    match e.kind() {
        ErrorKind::Timeout => RdmakitTimeoutError::new_err(msg),
        ErrorKind::Aborted => RdmakitAbortedError::new_err(msg),
        ErrorKind::Refused => RdmakitRefusedError::new_err(msg),
        ErrorKind::Invalid | ErrorKind::Other => RdmakitError::new_err(msg),
    }
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}

/// Runs `f` without the GIL, catching panics.
fn run<T: Send>(
    py: Python<'_>,
    f: impl FnOnce() -> Result<T, BindError> + Send,
) -> Result<T, BindError> {
    py.detach(|| match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => Err(BindError::Panic(panic_message(p.as_ref()))),
    })
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Settings: the environment (`RDMAKIT_*`, `NCCL_IB_HCA`, `NCCL_IB_GID_INDEX`), then keyword
/// overrides by short name (`transport="tcp"`, `chunk="8MiB"`, `slots=16`, `tcp_connections=8`,
/// `timeout_s=5`, `backend="host"`, `rdma_devices="erdma_0,erdma_1"`, `qps=4`, `gid_index=1`,
/// `pinned_pool="2GiB"`).
#[pyclass(module = "rdmakit_rdt._native", name = "Config", frozen)]
#[derive(Debug)]
struct PyConfig {
    inner: ChannelConfig,
}

const OVERRIDES: [(&str, &str); 10] = [
    ("transport", "RDMAKIT_TRANSPORT"),
    ("backend", "RDMAKIT_BACKEND"),
    ("chunk", "RDMAKIT_CHUNK"),
    ("slots", "RDMAKIT_SLOTS"),
    ("tcp_connections", "RDMAKIT_TCP_CONNECTIONS"),
    ("timeout_s", "RDMAKIT_TIMEOUT_S"),
    ("rdma_devices", "RDMAKIT_RDMA_DEVICES"),
    ("qps", "RDMAKIT_QPS"),
    ("gid_index", "RDMAKIT_GID_INDEX"),
    ("pinned_pool", "RDMAKIT_PINNED_POOL"),
];

#[pymethods]
impl PyConfig {
    #[new]
    #[pyo3(signature = (**overrides))]
    fn new(overrides: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        let mut given: Vec<(&'static str, String)> = Vec::new();
        if let Some(d) = overrides {
            for (k, v) in d.iter() {
                let key: String = k.extract()?;
                let var = OVERRIDES
                    .iter()
                    .find(|(short, _)| *short == key)
                    .map(|(_, var)| *var)
                    .ok_or_else(|| {
                        RdmakitError::new_err(format!(
                            "unknown setting {key:?}; known: {}",
                            OVERRIDES.map(|(s, _)| s).join(", ")
                        ))
                    })?;
                if !v.is_none() {
                    given.push((var, v.str()?.to_string()));
                }
            }
        }
        let inner = ChannelConfig::from_lookup(|k| {
            given
                .iter()
                .find(|(var, _)| *var == k)
                .map(|(_, v)| v.clone())
                .or_else(|| std::env::var(k).ok())
        })
        .map_err(to_py)?;
        Ok(PyConfig { inner })
    }

    #[getter]
    fn transport(&self) -> &'static str {
        match self.inner.transport {
            TransportKind::Tcp => "tcp",
            TransportKind::Rdma => "rdma",
        }
    }
    #[getter]
    fn backend(&self) -> &'static str {
        match self.inner.backend {
            RingBackend::Auto => "auto",
            RingBackend::Cuda => "cuda",
            RingBackend::Host => "host",
        }
    }
    #[getter]
    fn chunk_bytes(&self) -> usize {
        self.inner.ring.chunk_bytes
    }
    #[getter]
    fn slots(&self) -> usize {
        self.inner.ring.slots
    }
    #[getter]
    fn pinned_pool_bytes(&self) -> u64 {
        self.inner.pool_bytes
    }
    #[getter]
    fn tcp_connections(&self) -> usize {
        self.inner.connections
    }
    #[getter]
    fn timeout_s(&self) -> f64 {
        self.inner.timeout.as_secs_f64()
    }
    #[getter]
    fn rdma_devices(&self) -> Vec<String> {
        self.inner.rdma_devices.clone()
    }
    #[getter]
    fn qps(&self) -> usize {
        self.inner.qps
    }
    #[getter]
    fn gid_index(&self) -> u32 {
        self.inner.gid_index
    }
    fn __repr__(&self) -> String {
        format!(
            "Config(transport={:?}, backend={:?}, chunk_bytes={}, slots={}, tcp_connections={}, \
             timeout_s={}, rdma_devices={:?}, qps={}, gid_index={}, pinned_pool_bytes={})",
            self.transport(),
            self.backend(),
            self.chunk_bytes(),
            self.slots(),
            self.tcp_connections(),
            self.timeout_s(),
            self.inner.rdma_devices,
            self.qps(),
            self.gid_index(),
            self.pinned_pool_bytes()
        )
    }
}

/// Aborts a pending accept or a running transfer from any thread.
#[pyclass(module = "rdmakit_rdt._native", name = "Abort", frozen)]
#[derive(Debug)]
struct PyAbort {
    inner: Arc<AbortHandle>,
}

#[pymethods]
impl PyAbort {
    #[new]
    fn new() -> Self {
        PyAbort {
            inner: AbortHandle::new(),
        }
    }
    /// Fires (idempotent): the transfer fails on both ends within milliseconds.
    fn abort(&self, reason: &str) {
        self.inner.abort(reason);
    }
    /// The reason, once fired.
    #[getter]
    fn reason(&self) -> Option<String> {
        self.inner.reason()
    }
}

type PyBuffer = (String, i64, u64, u64);

fn specs(buffers: &[PyBuffer]) -> Result<Vec<BufferSpec>, BindError> {
    buffers
        .iter()
        .enumerate()
        // SAFETY: `_native` is private to the rdmakit_rdt package (the leading underscore), and its Python
        // layer (`rdmakit_rdt/buffers.py`, `exported`) describes only contiguous numpy arrays, torch tensors
        // and buffer objects, holds a buffer export of every array and buffer object until `send`/`recv`
        // returns (a resize from another thread then raises instead of freeing the memory), and refuses
        // read-only receive targets (flags, and the page table for CPU tensors): that is
        // BufferSpec::parse's promise. What it cannot hold: a torch tensor has no export, so a `resize_`
        // of a tensor by another thread during its own transfer is the caller's to avoid (buffers.py says
        // so). Python code that calls `_native` directly with made-up addresses is outside the promise,
        // as with ctypes.
        .map(|(i, (dev, idx, addr, len))| unsafe { BufferSpec::parse(i, dev, *idx, *addr, *len) })
        .collect()
}

/// Listening socket for one peer.
#[pyclass(module = "rdmakit_rdt._native", name = "Listener", frozen)]
#[derive(Debug)]
struct PyListener {
    inner: PairListener,
}

#[pymethods]
impl PyListener {
    #[new]
    #[pyo3(signature = (bind = "127.0.0.1:0"))]
    fn new(bind: &str) -> PyResult<Self> {
        Ok(PyListener {
            inner: PairListener::bind(bind).map_err(to_py)?,
        })
    }
    /// The bound port.
    #[getter]
    fn port(&self) -> PyResult<u16> {
        Ok(self.inner.local_addr().map_err(to_py)?.port())
    }
    /// The bound address, `host:port`.
    #[getter]
    fn address(&self) -> PyResult<String> {
        Ok(self.inner.local_addr().map_err(to_py)?.to_string())
    }
    /// Connections refused so far (wrong or absent token, not an rdmakit-rdt sender).
    #[getter]
    fn refused(&self) -> u64 {
        self.inner.refused()
    }
    /// Waits for the sender of the object whose token is `token` (32 bytes; other connections
    /// are refused) with the GIL released, and returns the receiving channel.
    #[pyo3(signature = (config, abort, token = None))]
    fn accept(
        &self,
        py: Python<'_>,
        config: &PyConfig,
        abort: &PyAbort,
        token: Option<&[u8]>,
    ) -> PyResult<PyRecv> {
        let handle = Arc::clone(&abort.inner);
        let cfg = config.inner.clone();
        let tok = self::token(token)?;
        let ch = run(py, || self.inner.accept(&cfg, Arc::clone(&handle), tok)).map_err(to_py)?;
        Ok(PyRecv(Held::new(ch, handle)))
    }
}

/// What `SendChannel` and `RecvChannel` share: the channel behind a lock (a transfer holds it
/// with the GIL released) and its abort handle (usable without the lock, from any thread).
#[derive(Debug)]
struct Held<T> {
    inner: Mutex<Option<T>>,
    abort: Arc<AbortHandle>,
}

trait Closable {
    fn closed(&self) -> Option<&str>;
    fn peer_closed(&self) -> bool;
    fn idle(&self) -> std::time::Duration;
}

impl Closable for channel::SendChannel {
    fn closed(&self) -> Option<&str> {
        channel::SendChannel::closed(self)
    }
    fn peer_closed(&self) -> bool {
        channel::SendChannel::peer_closed(self)
    }
    fn idle(&self) -> std::time::Duration {
        channel::SendChannel::idle(self)
    }
}

impl Closable for channel::RecvChannel {
    fn closed(&self) -> Option<&str> {
        channel::RecvChannel::closed(self)
    }
    fn peer_closed(&self) -> bool {
        channel::RecvChannel::peer_closed(self)
    }
    fn idle(&self) -> std::time::Duration {
        channel::RecvChannel::idle(self)
    }
}

impl<T: Closable + Send> Held<T> {
    fn new(ch: T, abort: Arc<AbortHandle>) -> Self {
        Held {
            inner: Mutex::new(Some(ch)),
            abort,
        }
    }

    /// Runs one transfer without the GIL; a caught panic drops the channel.
    fn transfer(
        &self,
        py: Python<'_>,
        buffers: &[PyBuffer],
        f: impl FnOnce(&mut T, &[BufferSpec]) -> Result<u64, BindError> + Send,
    ) -> PyResult<u64> {
        let specs = specs(buffers).map_err(to_py)?;
        let r = run(py, || match lock(&self.inner).as_mut() {
            Some(ch) => f(ch, &specs),
            None => Err(BindError::Closed("the channel was closed".into())),
        });
        if matches!(r, Err(BindError::Panic(_))) {
            self.inner.clear_poison();
            *lock(&self.inner) = None;
        }
        r.map_err(to_py)
    }

    fn closed(&self) -> Option<String> {
        if let Some(r) = self.abort.reason() {
            return Some(format!("aborted: {r}"));
        }
        match self.inner.try_lock() {
            Ok(g) => match g.as_ref() {
                Some(ch) => ch.closed().map(str::to_string).or_else(|| {
                    ch.peer_closed()
                        .then(|| "the peer closed its connections (it exited or restarted)".into())
                }),
                None => Some("the channel was closed".into()),
            },
            // A transfer is running: the channel is in use, not closed.
            Err(_) => None,
        }
    }

    /// Seconds since the last transfer started; 0 while one runs.
    fn idle_s(&self) -> f64 {
        match self.inner.try_lock() {
            Ok(g) => g
                .as_ref()
                .map_or(f64::INFINITY, |ch| ch.idle().as_secs_f64()),
            Err(_) => 0.0,
        }
    }

    /// An idle channel is dropped as it is, so its staging ring goes back to the process's pool;
    /// one busy with a transfer on another thread is aborted first (which fails its ring for good).
    fn close(&self, py: Python<'_>) {
        let idle = run(py, || {
            Ok(match self.inner.try_lock() {
                Ok(mut g) => {
                    g.take();
                    true
                }
                Err(_) => false,
            })
        });
        if idle.unwrap_or(false) {
            return;
        }
        self.abort.abort("the channel was closed");
        let _ = run(py, || {
            lock(&self.inner).take();
            Ok(())
        });
    }
}

/// Sending end of an actor pair.
#[pyclass(module = "rdmakit_rdt._native", name = "SendChannel", frozen)]
#[derive(Debug)]
struct PySend(Held<channel::SendChannel>);

#[pymethods]
impl PySend {
    /// Connects to `address` ("host:port"), GIL released.
    /// `token` (32 bytes) is presented in the handshake and put in every object's header.
    #[staticmethod]
    #[pyo3(signature = (address, config, abort, token = None))]
    fn connect(
        py: Python<'_>,
        address: &str,
        config: &PyConfig,
        abort: &PyAbort,
        token: Option<&[u8]>,
    ) -> PyResult<Self> {
        let handle = Arc::clone(&abort.inner);
        let cfg = config.inner.clone();
        let tok = self::token(token)?;
        let ch = run(py, || {
            channel::SendChannel::connect(address, &cfg, Arc::clone(&handle), tok)
        })
        .map_err(to_py)?;
        Ok(PySend(Held::new(ch, handle)))
    }

    /// Sends one object: `buffers` is a list of `(device, index, address, nbytes)`. The memory
    /// must stay alive and unmodified until this returns (the caller keeps the arrays/tensors).
    /// `token`: the object's token (default: the one given to `connect`).
    #[pyo3(signature = (tag, buffers, token = None))]
    fn send(
        &self,
        py: Python<'_>,
        tag: &str,
        buffers: Vec<PyBuffer>,
        token: Option<&[u8]>,
    ) -> PyResult<u64> {
        let tok = object_token(token)?;
        self.0
            .transfer(py, &buffers, |ch, specs| ch.send(tag, specs, tok))
    }

    /// Seconds since the last transfer started (0 while one runs).
    #[getter]
    fn idle_s(&self) -> f64 {
        self.0.idle_s()
    }

    /// Aborts the running transfer (callable from any thread while `send` runs).
    fn abort(&self, reason: &str) {
        self.0.abort.abort(reason);
    }

    /// Why the channel can no longer be used, or None.
    #[getter]
    fn closed(&self) -> Option<String> {
        self.0.closed()
    }

    /// Closes the connections (aborting a running transfer first).
    fn close(&self, py: Python<'_>) {
        self.0.close(py);
    }
}

/// Receiving end of an actor pair, or a consumer's pull session with a producer's `Server`.
#[pyclass(module = "rdmakit_rdt._native", name = "RecvChannel", frozen)]
#[derive(Debug)]
struct PyRecv(Held<channel::RecvChannel>);

#[pymethods]
impl PyRecv {
    /// Opens a pull session with the producer's `Server` at `address` ("host:port"), GIL
    /// released, authenticated with `token` (32 bytes: the token of an object it holds).
    #[staticmethod]
    fn connect(
        py: Python<'_>,
        address: &str,
        config: &PyConfig,
        abort: &PyAbort,
        token: &[u8],
    ) -> PyResult<Self> {
        let handle = Arc::clone(&abort.inner);
        let cfg = config.inner.clone();
        let tok = Token::from_bytes(token).map_err(to_py)?;
        let ch = run(py, || {
            channel::RecvChannel::connect(address, &cfg, Arc::clone(&handle), tok)
        })
        .map_err(to_py)?;
        Ok(PyRecv(Held::new(ch, handle)))
    }

    /// Pulls the object `tag` whose token is `token` from the session's server into `buffers`
    /// (as for `recv`); a refusal (no such object there, a wrong token) is `RdmakitRefusedError`.
    fn pull(
        &self,
        py: Python<'_>,
        tag: &str,
        buffers: Vec<PyBuffer>,
        token: &[u8],
    ) -> PyResult<u64> {
        let tok = Token::from_bytes(token).map_err(to_py)?;
        self.0
            .transfer(py, &buffers, |ch, specs| ch.pull(tag, specs, tok))
    }

    /// Receives one object into `buffers` (list of `(device, index, address, nbytes)`, writable,
    /// kept alive and untouched by the caller until this returns).
    /// `token`: the token the object must carry (default: the one given to `accept`).
    #[pyo3(signature = (tag, buffers, token = None))]
    fn recv(
        &self,
        py: Python<'_>,
        tag: &str,
        buffers: Vec<PyBuffer>,
        token: Option<&[u8]>,
    ) -> PyResult<u64> {
        let tok = object_token(token)?;
        self.0
            .transfer(py, &buffers, |ch, specs| ch.recv(tag, specs, tok))
    }

    /// Seconds since the last transfer started (0 while one runs).
    #[getter]
    fn idle_s(&self) -> f64 {
        self.0.idle_s()
    }

    /// Aborts the running transfer (callable from any thread while `recv` runs).
    fn abort(&self, reason: &str) {
        self.0.abort.abort(reason);
    }

    /// Why the channel can no longer be used, or None.
    #[getter]
    fn closed(&self) -> Option<String> {
        self.0.closed()
    }

    /// Closes the connections (aborting a running transfer first).
    fn close(&self, py: Python<'_>) {
        self.0.close(py);
    }
}

/// The per-process serving side of pulls: holds the objects this process produced and serves
/// every consumer's session on its own thread (see the crate's `server` module).
#[pyclass(module = "rdmakit_rdt._native", name = "Server", frozen)]
#[derive(Debug)]
struct PyServer {
    inner: Server,
}

#[pymethods]
impl PyServer {
    /// Listens on `bind` ("host:port"; port 0 picks one). `config` gives the ring backend and
    /// timeouts (sessions adopt their consumer's connections and ring geometry); a session
    /// without a request for `idle_s` seconds is closed.
    #[new]
    #[pyo3(signature = (bind = "127.0.0.1:0", config = None, idle_s = 300.0))]
    fn new(bind: &str, config: Option<&PyConfig>, idle_s: f64) -> PyResult<Self> {
        let cfg = match config {
            Some(c) => c.inner.clone(),
            None => ChannelConfig::from_env().map_err(to_py)?,
        };
        if !(idle_s.is_finite() && idle_s > 0.0) {
            return Err(RdmakitError::new_err(format!(
                "idle_s must be a positive number of seconds, got {idle_s}"
            )));
        }
        let idle = std::time::Duration::from_secs_f64(idle_s);
        Ok(PyServer {
            inner: Server::bind(bind, &cfg, idle).map_err(to_py)?,
        })
    }
    /// The bound port.
    #[getter]
    fn port(&self) -> u16 {
        self.inner.local_addr().port()
    }
    /// The bound address, `host:port`.
    #[getter]
    fn address(&self) -> String {
        self.inner.local_addr().to_string()
    }
    /// Registers (or replaces) the object `tag`: consumers presenting `token` (32 bytes) may pull
    /// `buffers` until `unregister(tag)`. `keep` must hold every array/tensor the buffers
    /// describe (and their buffer exports); the server keeps it while the object is registered
    /// or being served. `ready` (a callable, or None) runs once, on a serving thread with the
    /// GIL, before the first byte is staged; an exception in it refuses the pull.
    #[pyo3(signature = (tag, buffers, token, keep, ready = None))]
    fn register(
        &self,
        tag: &str,
        buffers: Vec<PyBuffer>,
        token: &[u8],
        keep: Py<PyAny>,
        ready: Option<Py<PyAny>>,
    ) -> PyResult<()> {
        let specs = specs(&buffers).map_err(to_py)?;
        let tok = Token::from_bytes(token).map_err(to_py)?;
        let ready = ready.map(|f| -> Ready {
            Box::new(move || {
                Python::attach(|py| f.call0(py).map(|_| ()).map_err(|e| e.to_string()))
            })
        });
        // SAFETY: `keep` is the Python layer's tuple of the object's arrays/tensors and the buffer
        // exports of its numpy arrays (transport.py, `extract_tensor_transport_metadata`): while it
        // is alive the memory `specs` describe stays allocated (an exported array cannot be
        // resized or freed; a tensor keeps its storage). Not writing it meanwhile is Ray's contract
        // for RDT objects (the README says so, as for NIXL); the server drops `keep` only after
        // the last send that reads it returned.
        unsafe { self.inner.register(tag, specs, tok, ready, Box::new(keep)) }.map_err(to_py)
    }
    /// Forgets the object `tag` (later pulls of it are refused); whether it was registered.
    fn unregister(&self, tag: &str) -> bool {
        self.inner.unregister(tag)
    }
    /// Counters: registered, unregistered, sessions_opened, sessions_open, serving, served,
    /// bytes_served, serve_failures, pulls_refused, connections_refused.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.inner.stats();
        let d = PyDict::new(py);
        for (k, v) in [
            ("registered", s.registered),
            ("unregistered", s.unregistered),
            ("sessions_opened", s.sessions_opened),
            ("sessions_open", s.sessions_open),
            ("serving", s.serving),
            ("served", s.served),
            ("bytes_served", s.bytes_served),
            ("serve_failures", s.serve_failures),
            ("pulls_refused", s.pulls_refused),
            ("connections_refused", s.connections_refused),
        ] {
            d.set_item(k, v)?;
        }
        Ok(d)
    }
    /// The last pulls served (at most 1,024), oldest first: `(tag, start, end, bytes, ok)`, times
    /// in seconds since the Unix epoch.
    fn spans(&self) -> Vec<(String, f64, f64, u64, bool)> {
        self.inner
            .spans()
            .into_iter()
            .map(|s| (s.tag, s.start, s.end, s.bytes, s.ok))
            .collect()
    }
    /// Stops serving: no new sessions, running ones cut.
    fn close(&self) {
        self.inner.close();
    }
}

/// True when a CUDA driver and at least one GPU are visible to this process.
#[pyfunction]
fn cuda_available() -> bool {
    gpu_stage::cuda_driver_present() && gpu_stage::CudaDevice::count().is_ok_and(|n| n > 0)
}

/// Counters of this process's pool of staging rings (see `RDMAKIT_PINNED_POOL`): allocated,
/// reused, waited, refused, live_bytes, idle.
#[pyfunction]
fn pool_stats(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let s = crate::pool::stats();
    let d = PyDict::new(py);
    for (k, v) in [
        ("allocated", s.allocated),
        ("reused", s.reused),
        ("waited", s.waited),
        ("refused", s.refused),
        ("live_bytes", s.live_bytes),
        ("idle", s.idle),
    ] {
        d.set_item(k, v)?;
    }
    Ok(d)
}

/// True when this build has the RDMA transport.
#[pyfunction]
fn has_rdma() -> bool {
    cfg!(feature = "rdma")
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<PyConfig>()?;
    m.add_class::<PyAbort>()?;
    m.add_class::<PyListener>()?;
    m.add_class::<PySend>()?;
    m.add_class::<PyRecv>()?;
    m.add_class::<PyServer>()?;
    m.add_function(wrap_pyfunction!(cuda_available, m)?)?;
    m.add_function(wrap_pyfunction!(has_rdma, m)?)?;
    m.add_function(wrap_pyfunction!(pool_stats, m)?)?;
    m.add("RdmakitError", py.get_type::<RdmakitError>())?;
    m.add("RdmakitTimeoutError", py.get_type::<RdmakitTimeoutError>())?;
    m.add("RdmakitAbortedError", py.get_type::<RdmakitAbortedError>())?;
    m.add("RdmakitRefusedError", py.get_type::<RdmakitRefusedError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
