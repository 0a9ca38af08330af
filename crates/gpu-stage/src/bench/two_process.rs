//! The harness of the two-process benchmarks, for any transport: the control connection between
//! the processes (`READY i` before each transfer, the receiver's `RESULT` or `ERROR` at the end)
//! and the verified, timed transfers over the transport.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::config::BenchConfig;
use super::result::{BenchResult, summarise, verify};
use crate::checksum::{checksum, pattern};
use crate::device::Device;
use crate::error::{StageError, TransportError};
use crate::pipeline::{Receiver, Sender};
use crate::ring::StagingRing;
use crate::transport::{RecvTransport, SendTransport};

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

pub(super) fn control_io(what: &str) -> impl FnOnce(std::io::Error) -> StageError + '_ {
    move |e| {
        StageError::Transport(TransportError::Io {
            context: format!("benchmark control connection: {what}"),
            source: e,
        })
    }
}

/// The receiving half of a two-process benchmark, for any transport: accepts the control
/// connection, then lets `make` set up the transport (it gets the receive ring), and runs
/// `warmup + iterations` verified transfers, each announced to the sender with `READY i`.
pub(super) fn two_process_receiver<D: Device, T: RecvTransport, E: Into<StageError>>(
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

/// The sending half of a two-process benchmark: connects the control connection to `addrs`,
/// lets `make` set up the transport (it gets the send ring), then sends on every `READY i` and
/// collects the receiver's verified report. Returns the result and the transport.
pub(super) fn two_process_sender<D: Device, T: SendTransport, E: Into<StageError>>(
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
