//! Benchmarks behind `stage_bench` and `rdmakit bench stage`: in-process, pinned copies, two
//! processes over TCP and (feature `rdma`) over RDMA (`run_rdma_receiver` / `run_rdma_sender`
//! on the two nodes). Every run verifies the data
//! that arrived against a checksum of what was sent, on every iteration, warm-ups included; a
//! mismatch is an error, never a number.

use std::cell::RefCell;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::checksum::{checksum, pattern};
use crate::config::RingConfig;
use crate::device::{CudaDevice, Device, HostDevice};
use crate::error::{StageError, TransportError};
use crate::pipeline::{InProcessStage, Receiver, Sender};
use crate::ring::StagingRing;
#[cfg(feature = "rdma")]
use crate::transport::rdma::{RdmaConfig, RdmaReceiver, RdmaSender};
use crate::transport::tcp::{DEFAULT_CONNECTIONS, TcpReceiver, TcpSender};
use crate::transport::{RecvTransport, SendTransport};
use std::sync::Arc;

/// Which backend a benchmark runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// GPUs through the CUDA driver.
    Cuda,
    /// The host-memory backend (no GPU needed; measures the pipeline's own overhead).
    Host,
}

/// What to measure.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BenchConfig {
    /// Bytes per transfer.
    pub bytes: usize,
    /// Ring geometry.
    pub ring: RingConfig,
    /// Untimed (but verified) transfers first.
    pub warmup: usize,
    /// Timed transfers.
    pub iterations: usize,
    /// Source GPU ordinal.
    pub src_device: usize,
    /// Destination GPU ordinal.
    pub dst_device: usize,
    /// Parallel TCP connections.
    pub connections: usize,
    /// Backend.
    pub backend: Backend,
    /// Seed of the test pattern.
    pub seed: u64,
}

impl Default for BenchConfig {
    fn default() -> Self {
        BenchConfig {
            bytes: 512 << 20,
            ring: RingConfig::default(),
            warmup: 1,
            iterations: 5,
            src_device: 0,
            dst_device: 1,
            connections: DEFAULT_CONNECTIONS,
            backend: Backend::Cuda,
            seed: 0x5EED,
        }
    }
}

/// One measured configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BenchResult {
    /// `inprocess`, `tcp`, `pinned_d2h` or `pinned_h2d`.
    pub name: String,
    /// Backend used.
    pub backend: Backend,
    /// Bytes per transfer.
    pub bytes: u64,
    /// Chunk size (pipelines only).
    pub chunk_bytes: Option<usize>,
    /// Ring buffers (pipelines only).
    pub slots: Option<usize>,
    /// TCP connections (TCP only).
    pub connections: Option<usize>,
    /// Devices involved, described.
    pub devices: Vec<String>,
    /// Seconds per timed iteration.
    pub seconds: Vec<f64>,
    /// Best throughput, GiB/s.
    pub gib_s_best: f64,
    /// Median throughput, GiB/s.
    pub gib_s_median: f64,
    /// Every iteration's data matched the source checksum (`verified_iterations` covers the warmup
    /// and the timed iterations).
    pub verified: bool,
    /// Iterations (warmup included) whose received data matched the source checksum.
    #[serde(default)]
    pub verified_iterations: usize,
    /// Checksum of the source data (hex).
    pub checksum: String,
    /// When the run ended (seconds since the Unix epoch).
    pub unix_time: u64,
}

fn gib_s(bytes: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        bytes as f64 / secs / (1u64 << 30) as f64
    } else {
        0.0
    }
}

fn summarise(
    name: &str,
    cfg: &BenchConfig,
    devices: Vec<String>,
    seconds: Vec<f64>,
    sum: u64,
    verified_iterations: usize,
) -> BenchResult {
    let bytes = cfg.bytes as u64;
    let mut rates: Vec<f64> = seconds.iter().map(|s| gib_s(bytes, *s)).collect();
    rates.sort_by(|a, b| a.total_cmp(b));
    let best = rates.last().copied().unwrap_or(0.0);
    let median = if rates.is_empty() {
        0.0
    } else {
        rates[rates.len() / 2]
    };
    BenchResult {
        name: name.into(),
        backend: cfg.backend,
        bytes,
        chunk_bytes: None,
        slots: None,
        connections: None,
        devices,
        seconds,
        gib_s_best: best,
        gib_s_median: median,
        verified: verified_iterations == cfg.warmup + cfg.iterations,
        verified_iterations,
        checksum: format!("{sum:016x}"),
        unix_time: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
    }
}

/// Whether `mem` holds data with checksum `want`. A mismatch is not an error: the run goes on and
/// reports fewer verified iterations (and `verified: false`); it is logged with both checksums.
fn verify<D: Device>(dev: &D, mem: &D::Memory, want: u64, what: &str) -> Result<bool, StageError> {
    Ok(matches_checksum(&dev.download(mem)?, want, what))
}

fn matches_checksum(data: &[u8], want: u64, what: &str) -> bool {
    let got = checksum(data);
    if got != want {
        tracing::warn!(
            "{what}: checksum {got:016x} of the received data differs from the source's {want:016x}"
        );
    }
    got == want
}

fn check_cfg(cfg: &BenchConfig) -> Result<(), StageError> {
    cfg.ring.validate()?;
    if cfg.iterations == 0 {
        return Err(StageError::config(
            "iterations",
            0,
            "measure at least one iteration",
        ));
    }
    Ok(())
}

/// A measurement on a source and a destination device of one backend (the same type, so one
/// generic body serves CUDA and the host backend).
trait PairBench {
    fn run<D: Device>(self, src: &D, dst: &D, cfg: &BenchConfig)
    -> Result<BenchResult, StageError>;
}

/// Checks `cfg`, opens `src_device` and `dst_device` on its backend and runs `bench` on them.
fn on_pair(cfg: &BenchConfig, bench: impl PairBench) -> Result<BenchResult, StageError> {
    check_cfg(cfg)?;
    match cfg.backend {
        Backend::Cuda => {
            let a = CudaDevice::new(cfg.src_device)?;
            let b = CudaDevice::new(cfg.dst_device)?;
            bench.run(&a, &b, cfg)
        }
        Backend::Host => bench.run(&HostDevice::new(), &HostDevice::new(), cfg),
    }
}

/// The timing loop every local benchmark shares: `warmup + iterations` rounds of `reset` (untimed),
/// `body` (timed) and `check(i)` (untimed: does the destination hold the source's bytes?).
/// Returns the timed seconds of the measured rounds and how many rounds verified.
fn timed_rounds(
    cfg: &BenchConfig,
    mut reset: impl FnMut() -> Result<(), StageError>,
    mut body: impl FnMut() -> Result<(), StageError>,
    mut check: impl FnMut(usize) -> Result<bool, StageError>,
) -> Result<(Vec<f64>, usize), StageError> {
    let mut seconds = Vec::with_capacity(cfg.iterations);
    let mut verified = 0;
    for i in 0..cfg.warmup + cfg.iterations {
        reset()?;
        let t = Instant::now();
        body()?;
        let secs = t.elapsed().as_secs_f64();
        verified += usize::from(check(i)?);
        if i >= cfg.warmup {
            seconds.push(secs);
        }
    }
    Ok((seconds, verified))
}

/// What a device-to-device benchmark moves: the source pattern uploaded, a zeroed destination (in a
/// `RefCell`: the reset, transfer and check closures of [`timed_rounds`] each borrow it in turn), and
/// the pattern's checksum.
struct Endpoints<M> {
    src: M,
    dst: RefCell<M>,
    want: u64,
}

/// The [`Endpoints`] of a run from `src_dev` to `dst_dev`.
fn endpoints<D: Device>(
    src_dev: &D,
    dst_dev: &D,
    cfg: &BenchConfig,
) -> Result<Endpoints<D::Memory>, StageError> {
    let data = pattern(cfg.bytes, cfg.seed);
    let want = checksum(&data);
    let src = src_dev.upload(&data)?;
    drop(data);
    Ok(Endpoints {
        src,
        dst: RefCell::new(dst_dev.alloc_zeroed(cfg.bytes)?),
        want,
    })
}

/// GPU `src_device` → host ring → GPU `dst_device` in one process (or host → host with
/// [`Backend::Host`]).
pub fn run_inprocess(cfg: &BenchConfig) -> Result<BenchResult, StageError> {
    on_pair(cfg, InProcessBench)
}

struct InProcessBench;

impl PairBench for InProcessBench {
    fn run<D: Device>(
        self,
        src_dev: &D,
        dst_dev: &D,
        cfg: &BenchConfig,
    ) -> Result<BenchResult, StageError> {
        let Endpoints { src, dst, want } = endpoints(src_dev, dst_dev, cfg)?;
        let mut stage = InProcessStage::new(src_dev, dst_dev, cfg.ring)?;
        let (seconds, verified) = timed_rounds(
            cfg,
            || dst_dev.zero(&mut dst.borrow_mut()),
            || stage.transfer(&src, &mut dst.borrow_mut()).map(drop),
            |i| {
                verify(
                    dst_dev,
                    &dst.borrow(),
                    want,
                    &format!("in-process iteration {i}"),
                )
            },
        )?;
        let mut r = summarise(
            "inprocess",
            cfg,
            vec![src_dev.describe(), dst_dev.describe()],
            seconds,
            want,
            verified,
        );
        r.chunk_bytes = Some(cfg.ring.chunk_bytes);
        r.slots = Some(cfg.ring.slots);
        Ok(r)
    }
}

/// Direction of a single large pinned copy (the "copy engine alone" peer).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Device to host.
    D2h,
    /// Host to device.
    H2d,
}

/// A ring of one slot of the whole transfer size, on `dev`: the page-locked buffer the pinned peers
/// copy through.
fn one_slot_ring<D: Device>(dev: &D, cfg: &BenchConfig) -> Result<Arc<StagingRing>, StageError> {
    Ok(StagingRing::from_buffers(
        RingConfig {
            chunk_bytes: cfg.bytes,
            slots: 1,
        },
        vec![dev.alloc_staging(cfg.bytes)?],
    ))
}

/// One `cudaMemcpyAsync`-equivalent of `bytes` between GPU `src_device` and one page-locked
/// (not write-combined) host buffer: the ceiling the in-process pipeline is held against.
pub fn run_pinned_copy(cfg: &BenchConfig, direction: Direction) -> Result<BenchResult, StageError> {
    on_pair(cfg, PinnedBench(direction))
}

struct PinnedBench(Direction);

impl PairBench for PinnedBench {
    /// On `src_device` alone (the destination device is not used).
    fn run<D: Device>(self, dev: &D, _: &D, cfg: &BenchConfig) -> Result<BenchResult, StageError> {
        let data = pattern(cfg.bytes, cfg.seed);
        let want = checksum(&data);
        let ring = one_slot_ring(dev, cfg)?;
        // This function is the ring's only user: it owns the one slot for the whole measurement.
        let mut slot = ring.acquire(0)?;
        let (ptr, len) = (slot.ptr(cfg.bytes)?, cfg.bytes);
        let stream = dev.new_stream()?;
        let (name, (seconds, verified)) = match self.0 {
            Direction::D2h => {
                let src = dev.upload(&data)?;
                let rounds = timed_rounds(
                    cfg,
                    || {
                        // SAFETY: the ring (and its one buffer) outlives the copy; no copy is in
                        // flight here (each round drains the stream).
                        unsafe { std::ptr::write_bytes(ptr, 0, len) };
                        Ok(())
                    },
                    || {
                        // SAFETY: exclusive use of the buffer; the stream is drained before reading it.
                        unsafe { dev.copy_d2h(&stream, &src, 0, ptr, len)? };
                        dev.wait_stream(&stream)
                    },
                    |i| {
                        Ok(matches_checksum(
                            slot.bytes(len)?,
                            want,
                            &format!("pinned D2H iteration {i}"),
                        ))
                    },
                )?;
                ("pinned_d2h", rounds)
            }
            Direction::H2d => {
                // Before any copy is queued: nothing else touches the slot.
                slot.bytes_mut(len)?.copy_from_slice(&data);
                let dst = RefCell::new(dev.alloc_zeroed(cfg.bytes)?);
                let rounds = timed_rounds(
                    cfg,
                    || dev.zero(&mut dst.borrow_mut()),
                    || {
                        // SAFETY: the buffer is not modified while the copy runs; we wait below.
                        unsafe { dev.copy_h2d(&stream, ptr, len, &mut dst.borrow_mut(), 0)? };
                        dev.wait_stream(&stream)
                    },
                    |i| {
                        verify(
                            dev,
                            &dst.borrow(),
                            want,
                            &format!("pinned H2D iteration {i}"),
                        )
                    },
                )?;
                ("pinned_h2d", rounds)
            }
        };
        Ok(summarise(
            name,
            cfg,
            vec![dev.describe()],
            seconds,
            want,
            verified,
        ))
    }
}

/// The floor a staged transfer of `bytes` is held against: one pinned D2H of the whole size from GPU
/// `src_device` into one page-locked host buffer, then one pinned H2D of it into GPU `dst_device`,
/// back to back, timed together (no overlap is possible: the H2D needs the D2H's bytes). Small
/// transfers cannot pipeline, so this is what the copy engines alone take for them.
pub fn run_pinned_floor(cfg: &BenchConfig) -> Result<BenchResult, StageError> {
    on_pair(cfg, FloorBench)
}

struct FloorBench;

impl PairBench for FloorBench {
    fn run<D: Device>(
        self,
        src_dev: &D,
        dst_dev: &D,
        cfg: &BenchConfig,
    ) -> Result<BenchResult, StageError> {
        let Endpoints { src, dst, want } = endpoints(src_dev, dst_dev, cfg)?;
        let ring = one_slot_ring(src_dev, cfg)?;
        // This function is the ring's only user: it owns the one slot for the whole measurement.
        let slot = ring.acquire(0)?;
        let (ptr, len) = (slot.ptr(cfg.bytes)?, cfg.bytes);
        let (d2h, h2d) = (src_dev.new_stream()?, dst_dev.new_stream()?);
        let (seconds, verified) = timed_rounds(
            cfg,
            || dst_dev.zero(&mut dst.borrow_mut()),
            || {
                // SAFETY: the slot's buffer is ours alone and outlives both copies; the D2H stream is
                // drained before the H2D reads the buffer, and the H2D stream before the next D2H
                // writes it.
                unsafe { src_dev.copy_d2h(&d2h, &src, 0, ptr, len)? };
                src_dev.wait_stream(&d2h)?;
                // SAFETY: as above.
                unsafe { dst_dev.copy_h2d(&h2d, ptr, len, &mut dst.borrow_mut(), 0)? };
                dst_dev.wait_stream(&h2d)
            },
            |i| {
                verify(
                    dst_dev,
                    &dst.borrow(),
                    want,
                    &format!("pinned D2H + H2D iteration {i}"),
                )
            },
        )?;
        Ok(summarise(
            "pinned_d2h_then_h2d",
            cfg,
            vec![src_dev.describe(), dst_dev.describe()],
            seconds,
            want,
            verified,
        ))
    }
}

/// What the TCP receiver reports back to the sender at the end of a run.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct ReceiverReport {
    verified_iterations: usize,
    seconds: Vec<f64>,
    device: String,
}

/// Runs `setup` (a transport accepting its own connections on `listener`) while watching the
/// control connection: a sender that fails or is stopped before connecting its transport closes
/// the control connection, and without this the receiver would sit in `accept` forever. On EOF
/// the watcher wakes the accept with a throw-away connection, and the error says what happened.
fn watch_setup<T>(
    control: &TcpStream,
    listener: &TcpListener,
    setup: impl FnOnce() -> Result<T, StageError>,
) -> Result<T, StageError> {
    use std::io::{ErrorKind, Read};
    use std::sync::atomic::{AtomicBool, Ordering};
    let watch = control.try_clone().map_err(control_io("watch"))?;
    watch
        .set_read_timeout(Some(std::time::Duration::from_millis(100)))
        .map_err(control_io("watch"))?;
    let mut wake = listener
        .local_addr()
        .map_err(control_io("listener address"))?;
    if wake.ip().is_unspecified() {
        wake.set_ip(match wake {
            std::net::SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            std::net::SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    let done = AtomicBool::new(false);
    let gone = AtomicBool::new(false);
    let result = std::thread::scope(|s| {
        s.spawn(|| {
            let mut byte = [0u8; 1];
            while !done.load(Ordering::Acquire) {
                match (&watch).read(&mut byte) {
                    // The sender writes nothing on the control connection: only EOF matters.
                    Ok(n) if n > 0 => {}
                    Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    _ => {
                        gone.store(true, Ordering::Release);
                        let timeout = std::time::Duration::from_secs(1);
                        drop(TcpStream::connect_timeout(&wake, timeout));
                        break;
                    }
                }
            }
        });
        let r = setup();
        done.store(true, Ordering::Release);
        r
    });
    // The socket's timeout is shared with `control`; later reads should block as before.
    let _ = watch.set_read_timeout(None);
    match result {
        Err(e) if gone.load(Ordering::Acquire) => {
            Err(StageError::Transport(TransportError::Closed(format!(
                "the sender closed its control connection before its transport connected (it \
                 failed or was stopped: see its output); setup ended with: {e}"
            ))))
        }
        r => r,
    }
}

fn control_io(what: &str) -> impl FnOnce(std::io::Error) -> StageError + '_ {
    move |e| {
        StageError::Transport(TransportError::Io {
            context: format!("benchmark control connection: {what}"),
            source: e,
        })
    }
}

/// Receiving process of the two-process TCP benchmark: accepts the control connection, then the
/// data connections on `listener`, receives into GPU `dst_device`, and verifies every iteration.
pub fn run_tcp_receiver(
    cfg: &BenchConfig,
    listener: &TcpListener,
) -> Result<BenchResult, StageError> {
    check_cfg(cfg)?;
    match cfg.backend {
        Backend::Cuda => tcp_receiver_with(&CudaDevice::new(cfg.dst_device)?, cfg, listener),
        Backend::Host => tcp_receiver_with(&HostDevice::new(), cfg, listener),
    }
}

fn tcp_receiver_with<D: Device>(
    dev: &D,
    cfg: &BenchConfig,
    listener: &TcpListener,
) -> Result<BenchResult, StageError> {
    two_process_receiver(dev, cfg, listener, "TCP", "tcp_receiver", |ring| {
        let _ = ring;
        TcpReceiver::accept(listener, cfg.connections)
    })
    .map(|mut r| {
        r.connections = Some(cfg.connections);
        r
    })
}

/// The receiving half of a two-process benchmark, for any transport: accepts the control
/// connection, then lets `make` set up the transport (it gets the receive ring), and runs
/// `warmup + iterations` verified transfers, each announced to the sender with `READY i`.
fn two_process_receiver<D: Device, T: RecvTransport, E: Into<StageError>>(
    dev: &D,
    cfg: &BenchConfig,
    listener: &TcpListener,
    what: &str,
    name: &str,
    make: impl FnOnce(&Arc<StagingRing>) -> Result<T, E>,
) -> Result<BenchResult, StageError> {
    let (mut control, _) = listener.accept().map_err(control_io("accept"))?;
    let want = checksum(&pattern(cfg.bytes, cfg.seed));
    let outcome = (|| -> Result<ReceiverReport, StageError> {
        let mut receiver = Receiver::new(dev, cfg.ring)?;
        let mut transport = watch_setup(&control, listener, || {
            make(receiver.ring()).map_err(Into::into)
        })?;
        let mut dst = dev.alloc_zeroed(cfg.bytes)?;
        let mut seconds = Vec::new();
        let mut verified_iterations = 0;
        for i in 0..cfg.warmup + cfg.iterations {
            dev.zero(&mut dst)?;
            writeln!(control, "READY {i}").map_err(control_io("ready"))?;
            let st = receiver.recv(&mut dst, &mut transport)?;
            let what = format!("{what} iteration {i}");
            if st.bytes != cfg.bytes as u64 {
                tracing::warn!(
                    "{what}: received {} bytes, expected {}",
                    st.bytes,
                    cfg.bytes
                );
            } else if verify(dev, &dst, want, &what)? {
                verified_iterations += 1;
            }
            if i >= cfg.warmup {
                seconds.push(st.elapsed.as_secs_f64());
            }
        }
        Ok(ReceiverReport {
            verified_iterations,
            seconds,
            device: dev.describe(),
        })
    })();
    match outcome {
        Ok(report) => {
            let line = serde_json::to_string(&report)
                .map_err(|e| StageError::Verify(format!("encoding the report: {e}")))?;
            writeln!(control, "RESULT {line}").map_err(control_io("result"))?;
            let mut r = summarise(
                name,
                cfg,
                vec![report.device],
                report.seconds,
                want,
                report.verified_iterations,
            );
            r.chunk_bytes = Some(cfg.ring.chunk_bytes);
            r.slots = Some(cfg.ring.slots);
            Ok(r)
        }
        Err(e) => {
            let _ = writeln!(control, "ERROR {}", e.to_string().replace('\n', " "));
            Err(e)
        }
    }
}

/// Sending process of the two-process TCP benchmark: connects to the receiver at `addr`, sends
/// from GPU `src_device`, times each transfer from the first copy to the receiver's ACK (data on
/// the receiving GPU), and returns the result including the receiver's verification.
pub fn run_tcp_sender(
    cfg: &BenchConfig,
    addr: impl ToSocketAddrs,
) -> Result<BenchResult, StageError> {
    check_cfg(cfg)?;
    match cfg.backend {
        Backend::Cuda => tcp_sender_with(&CudaDevice::new(cfg.src_device)?, cfg, addr),
        Backend::Host => tcp_sender_with(&HostDevice::new(), cfg, addr),
    }
}

fn tcp_sender_with<D: Device>(
    dev: &D,
    cfg: &BenchConfig,
    addr: impl ToSocketAddrs,
) -> Result<BenchResult, StageError> {
    let addrs: Vec<_> = addr
        .to_socket_addrs()
        .map_err(control_io("resolve"))?
        .collect();
    two_process_sender(dev, cfg, &addrs, "tcp", |_ring| {
        TcpSender::connect(&addrs[..], cfg.connections)
    })
    .map(|(mut r, _)| {
        r.connections = Some(cfg.connections);
        r
    })
}

/// The sending half of a two-process benchmark: connects the control connection to `addrs`,
/// lets `make` set up the transport (it gets the send ring), then sends on every `READY i` and
/// collects the receiver's verified report. Returns the result and the transport.
fn two_process_sender<D: Device, T: SendTransport, E: Into<StageError>>(
    dev: &D,
    cfg: &BenchConfig,
    addrs: &[std::net::SocketAddr],
    name: &str,
    make: impl FnOnce(&Arc<StagingRing>) -> Result<T, E>,
) -> Result<(BenchResult, T), StageError> {
    let control = TcpStream::connect(addrs).map_err(control_io("connect"))?;
    let mut lines = BufReader::new(control);
    let data = pattern(cfg.bytes, cfg.seed);
    let want = checksum(&data);
    let src = dev.upload(&data)?;
    drop(data);
    let mut sender = Sender::new(dev, cfg.ring)?;
    let mut transport = make(sender.ring()).map_err(Into::into)?;
    let mut seconds = Vec::new();
    let mut line = String::new();
    let mut read_line = |line: &mut String| -> Result<String, StageError> {
        line.clear();
        lines.read_line(line).map_err(control_io("read"))?;
        let l = line.trim_end().to_string();
        if let Some(msg) = l.strip_prefix("ERROR ") {
            return Err(StageError::Aborted(format!("receiver failed: {msg}")));
        }
        if l.is_empty() {
            return Err(StageError::Aborted(
                "receiver closed the control connection".into(),
            ));
        }
        Ok(l)
    };
    for i in 0..cfg.warmup + cfg.iterations {
        let l = read_line(&mut line)?;
        if l != format!("READY {i}") {
            return Err(StageError::Verify(format!(
                "expected `READY {i}` from the receiver, got `{l}`"
            )));
        }
        let t = Instant::now();
        sender.send(&src, &mut transport)?;
        let secs = t.elapsed().as_secs_f64();
        if i >= cfg.warmup {
            seconds.push(secs);
        }
    }
    let l = read_line(&mut line)?;
    let report: ReceiverReport = l
        .strip_prefix("RESULT ")
        .ok_or_else(|| StageError::Verify(format!("expected the receiver's RESULT, got `{l}`")))
        .and_then(|j| {
            serde_json::from_str(j).map_err(|e| StageError::Verify(format!("receiver report: {e}")))
        })?;
    // Only the receiver can check what arrived: its count of matching iterations is the verdict.
    let mut r = summarise(
        name,
        cfg,
        vec![dev.describe(), report.device],
        seconds,
        want,
        report.verified_iterations,
    );
    r.chunk_bytes = Some(cfg.ring.chunk_bytes);
    r.slots = Some(cfg.ring.slots);
    Ok((r, transport))
}

/// Receiving process of the two-process RDMA benchmark (feature `rdma`): accepts the control
/// connection and then the RDMA transport's side channel on `listener`, receives into GPU
/// `cfg.dst_device` (or host memory with [`Backend::Host`]) through a ring registered with the
/// devices in `rdma`, and verifies every iteration against the pattern's checksum. The result is
/// named `rdma_receiver`; `connections` holds the number of queue pairs. Fails with the
/// transport's error (a peer that vanished, a mismatched setting, a timeout) or
/// [`StageError::Verify`].
#[cfg(feature = "rdma")]
pub fn run_rdma_receiver(
    cfg: &BenchConfig,
    rdma: &RdmaConfig,
    listener: &TcpListener,
) -> Result<BenchResult, StageError> {
    check_cfg(cfg)?;
    rdma.validate()?;
    match cfg.backend {
        Backend::Cuda => rdma_receiver_with(&CudaDevice::new(cfg.dst_device)?, cfg, rdma, listener),
        Backend::Host => rdma_receiver_with(&HostDevice::new(), cfg, rdma, listener),
    }
}

#[cfg(feature = "rdma")]
fn rdma_receiver_with<D: Device>(
    dev: &D,
    cfg: &BenchConfig,
    rdma: &RdmaConfig,
    listener: &TcpListener,
) -> Result<BenchResult, StageError> {
    let mut devices = Vec::new();
    let mut r = two_process_receiver(dev, cfg, listener, "RDMA", "rdma_receiver", |ring| {
        let t = RdmaReceiver::accept(listener, rdma, ring)?;
        devices = t.devices();
        Ok::<_, StageError>(t)
    })?;
    r.connections = Some(rdma.qps);
    r.devices.extend(devices);
    Ok(r)
}

/// Sending process of the two-process RDMA benchmark (feature `rdma`): connects to the receiver
/// at `addr` (control connection, then the transport's side channel), sends from GPU
/// `cfg.src_device` (or host memory), times each transfer from the first device→host copy to the
/// receiver's ACK (data on the receiving device), and returns the result (named `rdma`,
/// `connections` = queue pairs, `devices` = both staging devices then the local RDMA devices)
/// with the receiver's verification in `verified`.
#[cfg(feature = "rdma")]
pub fn run_rdma_sender(
    cfg: &BenchConfig,
    rdma: &RdmaConfig,
    addr: impl ToSocketAddrs,
) -> Result<BenchResult, StageError> {
    check_cfg(cfg)?;
    rdma.validate()?;
    let addrs: Vec<_> = addr
        .to_socket_addrs()
        .map_err(control_io("resolve"))?
        .collect();
    match cfg.backend {
        Backend::Cuda => rdma_sender_with(&CudaDevice::new(cfg.src_device)?, cfg, rdma, &addrs),
        Backend::Host => rdma_sender_with(&HostDevice::new(), cfg, rdma, &addrs),
    }
}

#[cfg(feature = "rdma")]
fn rdma_sender_with<D: Device>(
    dev: &D,
    cfg: &BenchConfig,
    rdma: &RdmaConfig,
    addrs: &[std::net::SocketAddr],
) -> Result<BenchResult, StageError> {
    let (mut r, t) = two_process_sender(dev, cfg, addrs, "rdma", |ring| {
        RdmaSender::connect(addrs, rdma, ring)
    })?;
    r.connections = Some(t.qps());
    r.devices.extend(t.devices());
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::MIB;

    fn host_cfg(bytes: usize) -> BenchConfig {
        BenchConfig {
            bytes,
            ring: RingConfig::new(MIB, 4).unwrap(),
            warmup: 1,
            iterations: 2,
            backend: Backend::Host,
            connections: 2,
            ..BenchConfig::default()
        }
    }

    #[test]
    fn inprocess_host_bench_verifies_and_reports() {
        let r = run_inprocess(&host_cfg(3 * MIB + 17)).unwrap();
        assert_eq!(r.name, "inprocess");
        assert!(r.verified);
        assert_eq!(r.seconds.len(), 2);
        assert!(r.gib_s_best >= r.gib_s_median && r.gib_s_median > 0.0);
        let json = serde_json::to_string(&r).unwrap();
        let back: BenchResult = serde_json::from_str(&json).unwrap();
        // serde_json may round floats by one ulp; compare the exact fields exactly.
        assert_eq!(
            (back.bytes, back.slots, back.checksum.clone()),
            (r.bytes, r.slots, r.checksum.clone())
        );
        assert!((back.gib_s_best - r.gib_s_best).abs() < 1e-9);
    }

    fn corrupting(n: usize) -> HostDevice {
        HostDevice::with_faults(crate::HostFaults {
            corrupt_h2d_at: Some(n),
            ..crate::HostFaults::default()
        })
    }

    #[test]
    fn a_corrupted_chunk_makes_the_inprocess_run_unverified() {
        let cfg = host_cfg(3 * MIB + 17);
        let clean = InProcessBench
            .run(&HostDevice::new(), &HostDevice::new(), &cfg)
            .unwrap();
        assert!(clean.verified);
        assert_eq!(clean.verified_iterations, 3);
        // The 6th host→device copy is chunk 1 of the second iteration (4 chunks per iteration).
        let dev = corrupting(5);
        let r = InProcessBench.run(&dev, &dev, &cfg).unwrap();
        assert!(!r.verified, "a corrupted chunk must not verify");
        assert_eq!(r.verified_iterations, 2);
    }

    #[test]
    fn a_corrupted_chunk_on_the_receiver_makes_both_tcp_ends_unverified() {
        let cfg = host_cfg(2 * MIB);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let rcfg = cfg.clone();
        let t = std::thread::spawn(move || tcp_receiver_with(&corrupting(0), &rcfg, &listener));
        let sent = run_tcp_sender(&cfg, addr).unwrap();
        let received = t.join().unwrap().unwrap();
        for r in [&sent, &received] {
            assert!(!r.verified, "{}: the warmup chunk was corrupted", r.name);
            assert_eq!(r.verified_iterations, 2, "{}", r.name);
        }
    }

    #[test]
    fn pinned_host_bench_runs_both_directions() {
        let cfg = host_cfg(2 * MIB + 1);
        assert!(run_pinned_copy(&cfg, Direction::D2h).unwrap().verified);
        assert!(run_pinned_copy(&cfg, Direction::H2d).unwrap().verified);
    }

    #[test]
    fn tcp_host_bench_two_ends() {
        let cfg = host_cfg(5 * MIB + 3);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let rcfg = cfg.clone();
        let t = std::thread::spawn(move || run_tcp_receiver(&rcfg, &listener));
        let r = run_tcp_sender(&cfg, addr).unwrap();
        let rr = t.join().unwrap().unwrap();
        assert!(r.verified && rr.verified);
        assert_eq!(r.seconds.len(), 2);
        assert_eq!(r.connections, Some(2));
    }

    #[test]
    fn tcp_receiver_fails_fast_when_the_sender_leaves_before_its_transport_connects() {
        // Bound on all interfaces: the watcher must wake the accept through loopback.
        let listener = TcpListener::bind("0.0.0.0:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let cfg = host_cfg(MIB);
        let t = std::thread::spawn(move || run_tcp_receiver(&cfg, &listener));
        // A sender that connects its control connection and dies before the data connections.
        drop(TcpStream::connect(("127.0.0.1", port)).unwrap());
        let started = Instant::now();
        let err = t.join().unwrap().unwrap_err();
        assert!(
            err.to_string().contains("closed its control connection"),
            "{err}"
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
    }

    #[test]
    fn zero_iterations_is_rejected() {
        let mut cfg = host_cfg(MIB);
        cfg.iterations = 0;
        assert!(
            run_inprocess(&cfg)
                .unwrap_err()
                .to_string()
                .contains("iterations")
        );
    }

    #[test]
    fn the_pinned_floor_verifies_small_and_odd_sizes() {
        for bytes in [1, 4096, MIB + 3] {
            let r = run_pinned_floor(&host_cfg(bytes)).unwrap();
            assert_eq!(r.name, "pinned_d2h_then_h2d");
            assert!(r.verified, "{bytes} bytes: {r:?}");
            assert_eq!(r.seconds.len(), 2);
        }
    }
}
