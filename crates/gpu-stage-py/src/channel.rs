//! One direction of one actor pair: a staging ring, a transport session (TCP or RDMA) and the
//! pipelines that copy between the ring and CPU or CUDA buffers. Set up once, used for every
//! object the pair exchanges; any failure closes it (gpu-stage rings stay failed), and the next
//! transfer opens a new one.
//!
//! Every object starts with its [`Header`] (tag, count, sizes, token; on the direct lane over TCP,
//! a staged transfer of its own over RDMA). When the sender's non-empty buffers share one device,
//! they follow as one gathered transfer (chunks cross tensor boundaries: one pair of pipeline
//! threads and one END/ACK per object, however many tensors), and the receiver scatters it into
//! its buffers; otherwise one transfer per non-empty buffer, in order. The receiver checks the
//! header against what it expected before any byte lands in a caller's buffer.
//!
//! [`AbortHandle::abort`] works from any thread while a transfer runs: it fails the ring's gate
//! (which wakes every party blocked on a slot) and shuts the TCP connections down (which wakes
//! every blocked read and write), so the transfer returns an error on both ends at once instead of
//! after a timeout. A pending accept polls the handle every 50 ms.

use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use gpu_stage::{
    Bounce, CudaDevice, Device, HostDevice, HostMemory, Receiver, RecvTransport, SendTransport,
    Sender, StageError, StagingRing, TcpOptions, TcpReceiver, TcpSender, TcpShutdown,
    TransferStats,
};

use crate::buffer::{BufferSpec, HEADER_LEN, Header, Place, one_place};
use crate::config::{ChannelConfig, TransportKind};
use crate::direct;
use crate::error::BindError;
use crate::handshake::{self, FLAG_PULL, SMALL_OBJECT, Token};
use crate::pool::{self, Lease};

/// Aborts a channel (or a pending accept) from any thread.
#[derive(Debug, Default)]
pub struct AbortHandle {
    state: Mutex<AbortState>,
}

/// What an armed handle holds of its channel. Its socket handles are duplicates that keep the
/// connections open: they go as soon as the handle fired (after shutting the connections down) and
/// when the channel is dropped, so that the channel's own close reaches the peer. (A connection
/// shut down with a full receive queue and left open makes no RST: a peer blocked writing into it
/// waited for its write timeout, twice, before it saw the consumer abort.)
#[derive(Debug, Default)]
struct AbortState {
    reason: Option<String>,
    ring: Option<Arc<StagingRing>>,
    tcp: Option<TcpShutdown>,
    /// A handle of the channel's direct lane (see [`crate::direct`]).
    direct: Option<TcpStream>,
    /// Which arming the three above belong to (see [`AbortHandle::disarm`]).
    armed: u64,
}

impl AbortHandle {
    /// A handle that has not fired.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Fires: the running transfer (if any) fails on both ends, and every later one is refused.
    /// Idempotent; the first reason is kept.
    pub fn abort(&self, reason: &str) {
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if st.reason.is_none() {
            st.reason = Some(reason.to_string());
        }
        Self::fire(&mut st);
    }

    /// The reason, once fired.
    pub fn reason(&self) -> Option<String> {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .reason
            .clone()
    }

    fn fire(st: &mut AbortState) {
        if let Some(reason) = &st.reason {
            if let Some(ring) = st.ring.take() {
                ring.gate().fail(format!("aborted: {reason}"));
            }
            if let Some(tcp) = st.tcp.take() {
                tcp.shutdown();
            }
            if let Some(d) = st.direct.take() {
                let _ = d.shutdown(Shutdown::Both);
            }
        }
    }

    /// Lets go of what arming `armed` gave the handle (the channel is being dropped), unless a
    /// later arming replaced it.
    fn disarm(&self, armed: u64) {
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if st.armed == armed {
            st.ring = None;
            st.tcp = None;
            st.direct = None;
        }
    }

    /// Connects the handle to a channel's ring and sockets; fires at once if already aborted.
    /// Returns the arming's number, for [`AbortHandle::disarm`].
    fn arm(
        &self,
        ring: &Arc<StagingRing>,
        tcp: Option<TcpShutdown>,
        direct: Option<&TcpStream>,
    ) -> Result<u64, BindError> {
        // Without its own handle of the lane an abort could not wake a blocked read on it: no
        // channel then.
        let direct = direct.map(TcpStream::try_clone).transpose().map_err(|e| {
            BindError::Transport(gpu_stage::TransportError::Io {
                context: "cloning the direct lane's socket handle".into(),
                source: e,
            })
        })?;
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        st.ring = Some(Arc::clone(ring));
        st.tcp = tcp;
        st.direct = direct;
        st.armed += 1;
        Self::fire(&mut st);
        Ok(st.armed)
    }

    /// Whether the peer closed or reset a TCP connection of the armed channel (see
    /// [`TcpShutdown::peer_closed`]); false before arming and for RDMA.
    pub fn peer_closed(&self) -> bool {
        let st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        st.tcp.as_ref().is_some_and(TcpShutdown::peer_closed)
    }

    pub(crate) fn check(&self) -> Result<(), BindError> {
        match self.reason() {
            Some(r) => Err(BindError::Aborted(r)),
            None => Ok(()),
        }
    }
}

/// What both ends keep besides their pipelines: the abort handle and, once a transfer failed,
/// why the channel is closed.
#[derive(Debug)]
struct Guard {
    abort: Arc<AbortHandle>,
    /// This channel's arming of `abort`.
    armed: u64,
    closed: Option<String>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        // The handle may outlive the channel (Python holds it): it must not keep the sockets open.
        self.abort.disarm(self.armed);
    }
}

impl Guard {
    /// Refuses a transfer on a closed or aborted channel.
    fn enter(&self) -> Result<(), BindError> {
        if let Some(why) = &self.closed {
            return Err(BindError::Closed(why.clone()));
        }
        self.abort.check()
    }

    /// Closes the channel after a failed transfer (`tell_peer` passes the reason on), and names
    /// the abort as the cause when one fired during the transfer.
    fn leave<T>(
        &mut self,
        r: Result<T, BindError>,
        tell_peer: impl FnOnce(&str),
    ) -> Result<T, BindError> {
        let e = match r {
            Ok(v) => return Ok(v),
            Err(e) => e,
        };
        let why = e.to_string();
        tell_peer(&why);
        self.closed = Some(why);
        match self.abort.reason() {
            Some(r) if !matches!(e, BindError::Aborted(_)) => Err(BindError::Aborted(format!(
                "{r} (the transfer then failed with: {e})"
            ))),
            _ => Err(e),
        }
    }
}

fn tcp_options(cfg: &ChannelConfig) -> TcpOptions {
    TcpOptions {
        connections: cfg.connections,
        timeout: cfg.timeout,
        checksum: false,
    }
}

/// Shuts a channel's direct lane down (after a failure: the peer's blocked read or write ends).
fn shut(lane: &Option<TcpStream>) {
    if let Some(l) = lane {
        let _ = l.shutdown(Shutdown::Both);
    }
}

/// A staging ring from the process's pool (see [`crate::pool`]).
fn make_ring(cfg: &ChannelConfig, abort: &AbortHandle) -> Result<Lease, BindError> {
    pool::take(cfg, abort)
}

#[cfg(feature = "rdma")]
fn rdma_config(cfg: &ChannelConfig) -> gpu_stage::RdmaConfig {
    gpu_stage::RdmaConfig {
        devices: cfg.rdma_devices.clone(),
        qps: cfg.qps,
        gid_index: cfg.gid_index,
        timeout: cfg.timeout,
        ..gpu_stage::RdmaConfig::default()
    }
}

#[cfg(not(feature = "rdma"))]
fn no_rdma() -> BindError {
    BindError::Unsupported(
        "RDMAKIT_TRANSPORT=rdma, but this build of rdmakit-rdt has no RDMA transport (build the \
         wheel with the `rdma` feature: see the package README)"
            .into(),
    )
}

enum SendLink {
    Tcp(TcpSender),
    #[cfg(feature = "rdma")]
    Rdma(Box<gpu_stage::RdmaSender>),
}

enum RecvLink {
    Tcp(TcpReceiver),
    #[cfg(feature = "rdma")]
    Rdma(Box<gpu_stage::RdmaReceiver>),
}

/// One transfer of `mems` back to back (one buffer is the one-element case).
fn send_over<D: Device>(
    sender: &mut Sender<D>,
    mems: &[&D::Memory],
    link: &mut SendLink,
) -> Result<TransferStats, StageError> {
    match link {
        SendLink::Tcp(t) => sender.send_gather(mems, t),
        #[cfg(feature = "rdma")]
        SendLink::Rdma(t) => sender.send_gather(mems, t.as_mut()),
    }
}

/// One transfer into `mems` back to back.
fn recv_over<D: Device, X: gpu_stage::RecvTarget<D::Memory>>(
    receiver: &mut Receiver<D>,
    mems: &mut [X],
    link: &mut RecvLink,
) -> Result<TransferStats, StageError> {
    let mut refs: Vec<&mut X> = mems.iter_mut().collect();
    match link {
        RecvLink::Tcp(t) => receiver.recv_scatter(&mut refs, t),
        #[cfg(feature = "rdma")]
        RecvLink::Rdma(t) => receiver.recv_scatter(&mut refs, t.as_mut()),
    }
}

/// The CUDA devices a channel has opened, by ordinal.
struct CudaDevices(Vec<(usize, CudaDevice)>);

impl CudaDevices {
    fn get(&mut self, ordinal: usize) -> Result<CudaDevice, BindError> {
        if let Some((_, d)) = self.0.iter().find(|(o, _)| *o == ordinal) {
            return Ok(d.clone());
        }
        let d = CudaDevice::new(ordinal)?;
        self.0.push((ordinal, d.clone()));
        Ok(d)
    }
}

/// The pipeline of CUDA device `ordinal`, made on first use (all of a channel's pipelines share its
/// ring and transport; transfers run one at a time).
fn lane<P>(
    lanes: &mut Vec<(usize, P)>,
    ordinal: usize,
    make: impl FnOnce() -> Result<P, StageError>,
) -> Result<&mut P, BindError> {
    let pos = match lanes.iter().position(|(o, _)| *o == ordinal) {
        Some(p) => p,
        None => {
            lanes.push((ordinal, make()?));
            lanes.len() - 1
        }
    };
    Ok(&mut lanes[pos].1)
}

/// Borrows a CPU buffer as "device" memory of the host backend.
fn host_view(index: usize, spec: &BufferSpec) -> Result<HostMemory, BindError> {
    // SAFETY: `spec` came from a contiguous numpy array / CPU tensor that the Python caller keeps
    // alive, and does not otherwise touch, for the whole call (documented on `send`/`recv` and
    // on the Python API); BufferSpec::parse checked non-null and no wrap-around.
    unsafe { HostMemory::borrowed(spec.addr() as *mut u8, spec.len()) }
        .map_err(|e| BindError::buffer(index, e.to_string()))
}

/// Borrows a CUDA buffer; the driver checks that it is device memory of `dev` and large enough.
fn cuda_view(
    index: usize,
    dev: &CudaDevice,
    spec: &BufferSpec,
) -> Result<gpu_stage::BorrowedCudaMemory, BindError> {
    // SAFETY: as for `host_view`; the Python layer also synchronised the tensor's stream before
    // a send, so no queued kernel still writes it.
    unsafe { dev.borrow_raw(spec.addr(), spec.len()) }
        .map_err(|e| BindError::buffer(index, e.to_string()))
}

/// CUDA views of the non-empty buffers of `run` (all on `dev`; `first` is the first one's
/// position in the object, for errors).
fn cuda_views(
    dev: &CudaDevice,
    first: usize,
    run: &[BufferSpec],
) -> Result<Vec<gpu_stage::BorrowedCudaMemory>, BindError> {
    run.iter()
        .enumerate()
        .filter(|(_, b)| !b.is_empty())
        .map(|(j, b)| cuda_view(first + j, dev, b))
        .collect()
}

/// GPU `ordinal` and its bounce buffer for small objects (made on first use), of a channel's
/// `devices` and `bounces`.
fn small_lane<'a>(
    devices: &mut CudaDevices,
    bounces: &'a mut Vec<(usize, Bounce<CudaDevice>)>,
    ordinal: usize,
) -> Result<(CudaDevice, &'a mut Bounce<CudaDevice>), BindError> {
    let dev = devices.get(ordinal)?;
    let bounce = lane(bounces, ordinal, || {
        Bounce::new(&dev, SMALL_OBJECT as usize)
    })?;
    Ok((dev, bounce))
}

/// Sending end of an actor pair.
pub struct SendChannel {
    link: SendLink,
    host: Sender<HostDevice>,
    host_device: HostDevice,
    devices: CudaDevices,
    cuda: Vec<(usize, Sender<CudaDevice>)>,
    /// Per GPU, the page-locked buffer small CUDA objects go through (made on first use).
    bounces: Vec<(usize, Bounce<CudaDevice>)>,
    guard: Guard,
    peer: String,
    token: Token,
    last_used: Instant,
    /// Staged transfers of payload so far (the header's and inline objects' not counted).
    staged: u64,
    /// The direct lane (TCP only; RDMA sends the header as a staged transfer).
    direct: Option<TcpStream>,
    timeout: std::time::Duration,
    /// Lent by the process's pool; last, so it goes back after everything that used it.
    ring: Lease,
}

impl std::fmt::Debug for SendChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendChannel")
            .field("peer", &self.peer)
            .field("closed", &self.guard.closed)
            .finish()
    }
}

impl SendChannel {
    /// Connects to a receiver listening at `addr`.
    ///
    /// Over TCP every connection first presents `token` and `cfg`'s settings (see
    /// [`handshake`]); a receiver waiting for another object refuses them
    /// ([`BindError::Refused`]). The token then goes in every object's header.
    pub fn connect(
        addr: &str,
        cfg: &ChannelConfig,
        abort: Arc<AbortHandle>,
        token: Token,
    ) -> Result<Self, BindError> {
        abort.check()?;
        match cfg.transport {
            TransportKind::Tcp => {
                // The handshake first: a refusal costs no ring allocation.
                let got = handshake::connect(addr, cfg, &token, 0, &abort)?;
                Self::over_tcp(got.streams, got.direct, cfg, abort, token, addr.to_string())
            }
            #[cfg(feature = "rdma")]
            TransportKind::Rdma => {
                let ring = make_ring(cfg, &abort)?;
                let link = SendLink::Rdma(Box::new(gpu_stage::RdmaSender::connect(
                    addr,
                    &rdma_config(cfg),
                    ring.ring(),
                )?));
                Self::build(link, None, ring, None, cfg, abort, token, addr.to_string())
            }
            #[cfg(not(feature = "rdma"))]
            TransportKind::Rdma => Err(no_rdma()),
        }
    }

    /// The sending end over connections already greeted and accepted (`cfg` holds the
    /// negotiated settings): a push sender's, or a producer's server's for one consumer.
    pub(crate) fn over_tcp(
        streams: Vec<TcpStream>,
        direct: TcpStream,
        cfg: &ChannelConfig,
        abort: Arc<AbortHandle>,
        token: Token,
        peer: String,
    ) -> Result<Self, BindError> {
        let ring = make_ring(cfg, &abort)?;
        let t = TcpSender::from_streams(streams, tcp_options(cfg))?;
        let h = t.shutdown_handle()?;
        Self::build(
            SendLink::Tcp(t),
            Some(h),
            ring,
            Some(direct),
            cfg,
            abort,
            token,
            peer,
        )
    }

    /// A producer's server's sending end of an RDMA pull session: `streams` is the one greeted
    /// data connection, which becomes gpu-stage's RDMA side channel (`cfg` holds the negotiated
    /// settings; the RDMA devices and QPs are this end's own).
    pub(crate) fn over_rdma(
        mut streams: Vec<TcpStream>,
        direct: TcpStream,
        cfg: &ChannelConfig,
        abort: Arc<AbortHandle>,
        token: Token,
        peer: String,
    ) -> Result<Self, BindError> {
        let (Some(side), true) = (streams.pop(), streams.is_empty()) else {
            return Err(BindError::Refused(
                "an RDMA pull session has exactly one data connection".into(),
            ));
        };
        #[cfg(feature = "rdma")]
        {
            let ring = make_ring(cfg, &abort)?;
            let link = SendLink::Rdma(Box::new(gpu_stage::RdmaSender::over_stream(
                side,
                peer.clone(),
                &rdma_config(cfg),
                ring.ring(),
            )?));
            Self::build(link, None, ring, Some(direct), cfg, abort, token, peer)
        }
        #[cfg(not(feature = "rdma"))]
        {
            let _ = (side, direct, cfg, abort, token, peer);
            Err(no_rdma())
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn build(
        link: SendLink,
        tcp: Option<TcpShutdown>,
        ring: Lease,
        lane: Option<TcpStream>,
        cfg: &ChannelConfig,
        abort: Arc<AbortHandle>,
        token: Token,
        peer: String,
    ) -> Result<Self, BindError> {
        let armed = abort.arm(ring.ring(), tcp, lane.as_ref())?;
        let host_device = HostDevice::new();
        let host = Sender::with_ring(&host_device, Arc::clone(ring.ring()))?;
        Ok(SendChannel {
            ring,
            link,
            host,
            host_device,
            devices: CudaDevices(Vec::new()),
            cuda: Vec::new(),
            bounces: Vec::new(),
            guard: Guard {
                abort,
                armed,
                closed: None,
            },
            peer,
            token,
            last_used: Instant::now(),
            staged: 0,
            direct: lane,
            timeout: cfg.timeout,
        })
    }

    /// The direct lane, where a server reads its consumer's requests (TCP only).
    pub(crate) fn lane(&mut self) -> Option<&mut TcpStream> {
        self.direct.as_mut()
    }

    /// The receiver's address.
    pub fn peer(&self) -> &str {
        &self.peer
    }

    /// Why the channel is closed, if it is.
    pub fn closed(&self) -> Option<&str> {
        self.guard.closed.as_deref()
    }

    /// Whether the receiver's process closed a connection (it died or restarted): the channel is
    /// dead even though no transfer failed on it yet.
    pub fn peer_closed(&self) -> bool {
        self.guard.abort.peer_closed()
    }

    /// Time since the last transfer started (or since the channel was made).
    pub fn idle(&self) -> std::time::Duration {
        self.last_used.elapsed()
    }

    /// Sends one object: the header for `tag`, then every non-empty buffer in order. Returns the
    /// bytes sent (buffers only).
    ///
    /// The caller promises that each buffer's address and length describe live memory of the
    /// stated device that nobody writes until this returns.
    ///
    /// `token` is the object's token (it goes in the header, where the receiver checks it); `None`
    /// uses the one the channel was opened with.
    pub fn send(
        &mut self,
        tag: &str,
        buffers: &[BufferSpec],
        token: Option<Token>,
    ) -> Result<u64, BindError> {
        self.guard.enter()?;
        self.last_used = Instant::now();
        let token = token.unwrap_or(self.token);
        let r = self.send_inner(tag, buffers, &token);
        let (link, lane) = (&mut self.link, &self.direct);
        self.guard.leave(r, |why| {
            shut(lane);
            match link {
                SendLink::Tcp(t) => SendTransport::abort(t, why),
                #[cfg(feature = "rdma")]
                SendLink::Rdma(t) => SendTransport::abort(t.as_mut(), why),
            }
        })
    }

    fn send_inner(
        &mut self,
        tag: &str,
        buffers: &[BufferSpec],
        token: &Token,
    ) -> Result<u64, BindError> {
        let header = Header::new(tag, buffers, token).encode();
        if let Some(conn) = self.direct.as_mut() {
            let inline = if !direct::is_inline(buffers) {
                None
            } else if let Some(Place::Cuda(ordinal)) = one_place(buffers) {
                let (dev, bounce) = small_lane(&mut self.devices, &mut self.bounces, ordinal)?;
                let mems = cuda_views(&dev, 0, buffers)?;
                let refs: Vec<&<CudaDevice as Device>::Memory> =
                    mems.iter().map(|m| &**m).collect();
                Some(vec![bounce.gather(&refs)?])
            } else {
                Some(direct::host_parts(buffers)?)
            };
            direct::send_object(conn, &header, inline.as_deref(), self.timeout)?;
            if inline.is_some() {
                return Ok(buffers.iter().map(|b| b.len() as u64).sum());
            }
        } else {
            let mem = self.host_device.upload(&header)?;
            send_over(&mut self.host, &[&mem], &mut self.link)?;
        }
        if let Some(place) = one_place(buffers) {
            return self.send_run(place, 0, buffers);
        }
        // Buffers on several devices: one transfer each (a transfer runs on one device's pipeline).
        let mut bytes = 0u64;
        for (i, spec) in buffers.iter().enumerate().filter(|(_, b)| !b.is_empty()) {
            bytes += self.send_run(spec.place(), i, std::slice::from_ref(spec))?;
        }
        Ok(bytes)
    }

    /// The non-empty buffers of `run` (all in `place`; `first` is the first one's position in
    /// the object, for errors) as one transfer: one pair of pipeline threads and one
    /// end-of-transfer round trip, however many tensors it holds.
    fn send_run(
        &mut self,
        place: Place,
        first: usize,
        run: &[BufferSpec],
    ) -> Result<u64, BindError> {
        let full = || {
            run.iter()
                .enumerate()
                .filter(|(_, b)| !b.is_empty())
                .map(|(j, b)| (first + j, b))
        };
        let stats = match place {
            Place::Cpu => {
                let mems = full()
                    .map(|(i, b)| host_view(i, b))
                    .collect::<Result<Vec<_>, _>>()?;
                let refs: Vec<&HostMemory> = mems.iter().collect();
                send_over(&mut self.host, &refs, &mut self.link)?
            }
            Place::Cuda(ordinal) => {
                let dev = self.devices.get(ordinal)?;
                let mems = cuda_views(&dev, first, run)?;
                let refs: Vec<&<CudaDevice as Device>::Memory> =
                    mems.iter().map(|m| &**m).collect();
                let ring = &self.ring;
                let sender = lane(&mut self.cuda, ordinal, || {
                    Sender::with_ring(&dev, Arc::clone(ring.ring()))
                })?;
                send_over(sender, &refs, &mut self.link)?
            }
        };
        self.staged += 1;
        Ok(stats.bytes)
    }

    /// Staged transfers of payload this channel ran: one per object whose buffers share a device
    /// (the header and objects sent inline on the direct lane take none).
    pub fn staged_transfers(&self) -> u64 {
        self.staged
    }
}

/// A listening socket on `addr` (`10.0.0.2:0` picks a free port on that address).
pub(crate) fn bind_listener(addr: &str) -> Result<TcpListener, BindError> {
    let addrs: Vec<SocketAddr> = addr
        .to_socket_addrs()
        .map_err(|e| BindError::env("bind address", addr, &e.to_string()))?
        .collect();
    TcpListener::bind(&addrs[..])
        .map_err(|e| BindError::env("bind address", addr, &format!("cannot listen: {e}")))
}

/// The listening socket (one per process under Ray); [`PairListener::accept`] makes a
/// [`RecvChannel`] for one sender, identified by its object token.
#[derive(Debug)]
pub struct PairListener {
    listener: TcpListener,
    refused: AtomicU64,
}

impl PairListener {
    /// Binds `addr` (`10.0.0.2:0` picks a free port on that address).
    pub fn bind(addr: &str) -> Result<Self, BindError> {
        let listener = bind_listener(addr)?;
        Ok(PairListener {
            listener,
            refused: AtomicU64::new(0),
        })
    }

    /// The bound address (the port is the one to publish).
    pub fn local_addr(&self) -> Result<SocketAddr, BindError> {
        self.listener.local_addr().map_err(|e| {
            BindError::Transport(gpu_stage::TransportError::Io {
                context: "reading the listener's address".into(),
                source: e,
            })
        })
    }

    /// Connections refused so far (wrong or absent token, not an rdmakit-rdt sender).
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Waits (at most `cfg.timeout`, checking `abort` every 50 ms) for the sender of the object
    /// whose token is `token`, refusing every other connection, then sets the channel up with the
    /// sender's connection count and ring geometry (see [`handshake`]).
    ///
    /// Accepts on one listener must not run at the same time (a connection taken by one would
    /// be refused for the other): the Python layer serialises them.
    pub fn accept(
        &self,
        cfg: &ChannelConfig,
        abort: Arc<AbortHandle>,
        token: Token,
    ) -> Result<RecvChannel, BindError> {
        let deadline = Instant::now() + cfg.timeout;
        match cfg.transport {
            TransportKind::Tcp => {
                let got = handshake::accept(
                    &self.listener,
                    cfg,
                    &abort,
                    &token,
                    deadline,
                    &self.refused,
                )?;
                let cfg = got.negotiated.apply(cfg);
                RecvChannel::over_tcp(got.streams, got.direct, &cfg, abort, token)
            }
            #[cfg(feature = "rdma")]
            TransportKind::Rdma => {
                abort.check()?;
                let ring = make_ring(cfg, &abort)?;
                let link = RecvLink::Rdma(Box::new(gpu_stage::RdmaReceiver::accept(
                    &self.listener,
                    &rdma_config(cfg),
                    ring.ring(),
                )?));
                RecvChannel::build(link, None, ring, None, cfg, abort, token)
            }
            #[cfg(not(feature = "rdma"))]
            TransportKind::Rdma => Err(no_rdma()),
        }
    }
}

/// Receiving end of an actor pair.
pub struct RecvChannel {
    link: RecvLink,
    host: Receiver<HostDevice>,
    host_device: HostDevice,
    devices: CudaDevices,
    cuda: Vec<(usize, Receiver<CudaDevice>)>,
    /// As for [`SendChannel`].
    bounces: Vec<(usize, Bounce<CudaDevice>)>,
    guard: Guard,
    token: Token,
    last_used: Instant,
    /// Staged transfers of payload so far (the header's and inline objects' not counted).
    staged: u64,
    /// The direct lane (TCP only; RDMA receives the header as a staged transfer).
    direct: Option<TcpStream>,
    timeout: std::time::Duration,
    /// As for [`SendChannel`].
    ring: Lease,
}

impl std::fmt::Debug for RecvChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecvChannel")
            .field("closed", &self.guard.closed)
            .finish()
    }
}

impl RecvChannel {
    /// A consumer's pull session with the producer's [`crate::server::Server`] at `addr`,
    /// authenticated with `token` (the token of an object the server holds; each pull presents its
    /// own object's token again). `cfg`'s settings are proposed, and the server adopts them. With
    /// `RDMAKIT_TRANSPORT=rdma` the data goes over gpu-stage's RDMA session, set up over one greeted
    /// connection (the server sends, this end receives); requests and headers use the direct lane.
    pub fn connect(
        addr: &str,
        cfg: &ChannelConfig,
        abort: Arc<AbortHandle>,
        token: Token,
    ) -> Result<Self, BindError> {
        abort.check()?;
        match cfg.transport {
            TransportKind::Tcp => {
                let got = handshake::connect(addr, cfg, &token, FLAG_PULL, &abort)?;
                Self::over_tcp(got.streams, got.direct, cfg, abort, token)
            }
            #[cfg(feature = "rdma")]
            TransportKind::Rdma => {
                // One data connection: gpu-stage's RDMA side channel, over which the server sets
                // up the sending end and this end the receiving one.
                let one = ChannelConfig {
                    connections: 1,
                    ..cfg.clone()
                };
                let mut got = handshake::connect(
                    addr,
                    &one,
                    &token,
                    FLAG_PULL | handshake::FLAG_RDMA,
                    &abort,
                )?;
                let side = got
                    .streams
                    .pop()
                    .ok_or_else(|| BindError::Refused("no RDMA side channel".into()))?;
                let ring = make_ring(cfg, &abort)?;
                let link = RecvLink::Rdma(Box::new(gpu_stage::RdmaReceiver::over_stream(
                    side,
                    format!("producer {addr}"),
                    &rdma_config(cfg),
                    ring.ring(),
                )?));
                Self::build(link, None, ring, Some(got.direct), cfg, abort, token)
            }
            #[cfg(not(feature = "rdma"))]
            TransportKind::Rdma => Err(no_rdma()),
        }
    }

    /// The receiving end over connections already greeted (`cfg` holds the negotiated settings).
    fn over_tcp(
        streams: Vec<TcpStream>,
        direct: TcpStream,
        cfg: &ChannelConfig,
        abort: Arc<AbortHandle>,
        token: Token,
    ) -> Result<Self, BindError> {
        let ring = make_ring(cfg, &abort)?;
        let t = TcpReceiver::from_streams(streams, tcp_options(cfg))?;
        let h = t.shutdown_handle()?;
        Self::build(
            RecvLink::Tcp(t),
            Some(h),
            ring,
            Some(direct),
            cfg,
            abort,
            token,
        )
    }

    fn build(
        link: RecvLink,
        tcp: Option<TcpShutdown>,
        ring: Lease,
        lane: Option<TcpStream>,
        cfg: &ChannelConfig,
        abort: Arc<AbortHandle>,
        token: Token,
    ) -> Result<Self, BindError> {
        let armed = abort.arm(ring.ring(), tcp, lane.as_ref())?;
        let host_device = HostDevice::new();
        let host = Receiver::with_ring(&host_device, Arc::clone(ring.ring()))?;
        Ok(RecvChannel {
            ring,
            link,
            host,
            host_device,
            devices: CudaDevices(Vec::new()),
            cuda: Vec::new(),
            bounces: Vec::new(),
            guard: Guard {
                abort,
                armed,
                closed: None,
            },
            token,
            last_used: Instant::now(),
            staged: 0,
            direct: lane,
            timeout: cfg.timeout,
        })
    }

    /// Pulls the object `tag` (whose token is `token`) from the server this channel is connected
    /// to, into `buffers` (the same promise as [`RecvChannel::recv`]). A refusal (the server holds
    /// no such object, or not with this token) is [`BindError::Refused`]; like every failure it
    /// closes the channel.
    pub fn pull(
        &mut self,
        tag: &str,
        buffers: &[BufferSpec],
        token: Token,
    ) -> Result<u64, BindError> {
        self.guard.enter()?;
        let timeout = self.timeout;
        let Some(lane) = self.direct.as_mut() else {
            return Err(BindError::Unsupported(
                "this channel has no direct lane (RDMA): pulls run over TCP sessions".into(),
            ));
        };
        if let Err(e) = direct::send_request(lane, tag, &token, timeout) {
            let lane = &self.direct;
            return self.guard.leave(Err(e), |_| shut(lane));
        }
        self.recv(tag, buffers, Some(token))
    }

    /// Why the channel is closed, if it is.
    pub fn closed(&self) -> Option<&str> {
        self.guard.closed.as_deref()
    }

    /// Whether the sender's process closed a connection (it died or restarted).
    pub fn peer_closed(&self) -> bool {
        self.guard.abort.peer_closed()
    }

    /// Time since the last transfer started (or since the channel was made).
    pub fn idle(&self) -> std::time::Duration {
        self.last_used.elapsed()
    }

    /// Receives one object into `buffers` after checking the sender's header against `tag` and
    /// the buffers' sizes. Returns the bytes received.
    ///
    /// The caller promises that each buffer's address and length describe live, writable memory
    /// of the stated device that nobody reads or writes until this returns.
    ///
    /// `token` is the token the object must carry (the header's is compared in constant time);
    /// `None` expects the one the channel was accepted with.
    pub fn recv(
        &mut self,
        tag: &str,
        buffers: &[BufferSpec],
        token: Option<Token>,
    ) -> Result<u64, BindError> {
        self.guard.enter()?;
        self.last_used = Instant::now();
        let token = token.unwrap_or(self.token);
        let r = self.recv_inner(tag, buffers, &token);
        let (link, lane) = (&mut self.link, &self.direct);
        // Tells the sender why (TCP: an ABORT frame) before the sockets close with the channel.
        self.guard.leave(r, |why| {
            shut(lane);
            match link {
                RecvLink::Tcp(t) => RecvTransport::abort(t, why),
                #[cfg(feature = "rdma")]
                RecvLink::Rdma(t) => RecvTransport::abort(t.as_mut(), why),
            }
        })
    }

    fn recv_inner(
        &mut self,
        tag: &str,
        buffers: &[BufferSpec],
        token: &Token,
    ) -> Result<u64, BindError> {
        let expected = Header::new(tag, buffers, token);
        let got = if let Some(lane) = self.direct.as_mut() {
            let (inline, header) = direct::recv_header(lane, self.timeout)?;
            // Checked before a byte of the payload is read into a buffer.
            let got = Header::decode(&header)?;
            got.check_against(&expected)?;
            if inline {
                return self.recv_small(buffers);
            }
            got
        } else {
            let mut mem = self.host_device.alloc_zeroed(HEADER_LEN)?;
            let stats = recv_over(
                &mut self.host,
                std::slice::from_mut(&mut mem),
                &mut self.link,
            )?;
            if stats.bytes != HEADER_LEN as u64 {
                return Err(BindError::Mismatch(format!(
                    "the peer's object header is {} bytes, expected {HEADER_LEN}",
                    stats.bytes
                )));
            }
            let got = Header::decode(mem.as_slice())?;
            got.check_against(&expected)?;
            got
        };
        if got.gathered {
            let Some(place) = one_place(buffers) else {
                return Err(BindError::Unsupported(
                    "the sender sends this object as one transfer (its buffers share a device), \
                     but this end's buffers are on several devices: receive it into buffers on \
                     one device"
                        .into(),
                ));
            };
            return self.recv_run(place, 0, buffers);
        }
        let mut bytes = 0u64;
        for (i, spec) in buffers.iter().enumerate().filter(|(_, b)| !b.is_empty()) {
            bytes += self.recv_run(spec.place(), i, std::slice::from_ref(spec))?;
        }
        Ok(bytes)
    }

    /// An inline object's bytes (the header matched `buffers`' sizes) into `buffers`: host
    /// memory straight from the socket, one GPU's through its bounce buffer; then the
    /// confirmation.
    fn recv_small(&mut self, buffers: &[BufferSpec]) -> Result<u64, BindError> {
        let timeout = self.timeout;
        let total: u64 = buffers.iter().map(|b| b.len() as u64).sum();
        let conn = self.direct.as_mut().ok_or_else(|| {
            BindError::Unsupported(
                "an inline object arrived on a channel without a direct lane".into(),
            )
        })?;
        match (one_place(buffers), total) {
            (Some(Place::Cuda(ordinal)), _) => {
                let (dev, bounce) = small_lane(&mut self.devices, &mut self.bounces, ordinal)?;
                let mut mems = cuda_views(&dev, 0, buffers)?;
                direct::read_payload(conn, bounce.fill(total as usize)?, timeout)?;
                let mut targets: Vec<&mut gpu_stage::BorrowedCudaMemory> =
                    mems.iter_mut().collect();
                bounce.scatter(&mut targets)?;
            }
            // Host memory, or nothing to write.
            (Some(Place::Cpu), _) | (None, 0) => {
                direct::recv_inline(conn, buffers, timeout)?;
            }
            (None, _) => {
                return Err(BindError::Unsupported(
                    "the sender sent this object inline, but this end's buffers are on several \
                     devices: receive it into buffers on one device"
                        .into(),
                ));
            }
        }
        direct::confirm(conn, timeout)?;
        Ok(total)
    }

    /// One transfer into the non-empty buffers of `run` (all in `place`; `first` as for
    /// [`SendChannel`]'s runs), checked to fill them exactly.
    fn recv_run(
        &mut self,
        place: Place,
        first: usize,
        run: &[BufferSpec],
    ) -> Result<u64, BindError> {
        let total: u64 = run.iter().map(|b| b.len() as u64).sum();
        let full = || {
            run.iter()
                .enumerate()
                .filter(|(_, b)| !b.is_empty())
                .map(|(j, b)| (first + j, b))
        };
        let stats = match place {
            Place::Cpu => {
                let mut mems = full()
                    .map(|(i, b)| host_view(i, b))
                    .collect::<Result<Vec<_>, _>>()?;
                recv_over(&mut self.host, &mut mems, &mut self.link)?
            }
            Place::Cuda(ordinal) => {
                let dev = self.devices.get(ordinal)?;
                let mut mems = cuda_views(&dev, first, run)?;
                let ring = &self.ring;
                let receiver = lane(&mut self.cuda, ordinal, || {
                    Receiver::with_ring(&dev, Arc::clone(ring.ring()))
                })?;
                recv_over(receiver, &mut mems, &mut self.link)?
            }
        };
        self.staged += 1;
        if stats.bytes != total {
            let why = format!(
                "the sender sent {} bytes into {total} bytes of buffers",
                stats.bytes
            );
            return Err(match run {
                [_] => BindError::buffer(first, why),
                _ => BindError::Mismatch(why),
            });
        }
        Ok(stats.bytes)
    }

    /// Staged transfers of payload this channel received (see [`SendChannel::staged_transfers`]).
    pub fn staged_transfers(&self) -> u64 {
        self.staged
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::net::TcpListener;
    use std::thread;
    use std::time::{Duration, Instant};

    use super::*;

    /// A connection whose receiving end never reads: the returned thread writes into it until a
    /// write fails and gives how long that took; it returns once the receive queue is full.
    fn stalled_writer() -> (TcpStream, thread::JoinHandle<Duration>) {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let mut w = TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
        let (r, _) = l.accept().expect("accept");
        w.set_write_timeout(Some(Duration::from_secs(20)))
            .expect("timeout");
        let writer = thread::spawn(move || {
            let buf = vec![7u8; 1 << 20];
            loop {
                let t0 = Instant::now();
                if w.write_all(&buf).is_err() {
                    return t0.elapsed();
                }
            }
        });
        thread::sleep(Duration::from_millis(500)); // both queues full: the writer blocks
        (r, writer)
    }

    /// A heap ring (no CUDA set-up inside a test's time window on a GPU machine).
    fn ring(abort: &AbortHandle) -> Lease {
        let cfg = ChannelConfig {
            backend: crate::config::RingBackend::Host,
            ..ChannelConfig::default()
        };
        make_ring(&cfg, abort).expect("ring")
    }

    /// The consumer side of an abort: the handle shuts the lane down and lets go of its duplicate,
    /// so when the channel drops its own handle the blocked peer sees a reset at once, though the
    /// abort handle lives on (before: the duplicate kept the connection open, the peer's write
    /// waited for its timeout).
    #[test]
    fn a_fired_abort_handle_keeps_no_connection_open() {
        let abort = AbortHandle::new();
        let lease = ring(&abort);
        let (r, writer) = stalled_writer();
        abort.arm(lease.ring(), None, Some(&r)).expect("arm");
        abort.abort("test");
        drop(r);
        let waited = writer.join().expect("writer");
        assert!(
            waited < Duration::from_secs(3),
            "the peer's write failed after {waited:?}"
        );
        assert!(abort.reason().is_some());
    }

    /// The same when the channel goes without an abort (its drop disarms the handle); a stale
    /// arming's disarm leaves a later arming alone.
    #[test]
    fn a_dropped_channel_leaves_its_abort_handle_nothing_to_keep_open() {
        let abort = AbortHandle::new();
        let lease = ring(&abort);
        let (r, writer) = stalled_writer();
        let first = abort.arm(lease.ring(), None, Some(&r)).expect("arm");
        let second = abort.arm(lease.ring(), None, Some(&r)).expect("arm again");
        abort.disarm(first);
        assert!(abort.state.lock().expect("state").direct.is_some());
        abort.disarm(second);
        drop(r);
        let waited = writer.join().expect("writer");
        assert!(
            waited < Duration::from_secs(3),
            "the peer's write failed after {waited:?}"
        );
    }
}
