//! Two processes over the TCP transport.

use std::net::{TcpListener, ToSocketAddrs};

use super::config::{Backend, BenchConfig, check_cfg};
use super::result::BenchResult;
use super::two_process::{control_io, two_process_receiver, two_process_sender};
use crate::device::{CudaDevice, Device, HostDevice};
use crate::error::StageError;
use crate::transport::tcp::{TcpOptions, TcpReceiver, TcpSender};

fn options(cfg: &BenchConfig) -> TcpOptions {
    TcpOptions {
        checksum: cfg.tcp_checksum,
        ..TcpOptions::with_connections(cfg.connections)
    }
}

/// `tcp`, or `tcp+checksum` when the run measures per-transfer checksums.
fn named(mut r: BenchResult, cfg: &BenchConfig) -> BenchResult {
    r.connections = Some(cfg.connections);
    if cfg.tcp_checksum {
        r.name.push_str("+checksum");
    }
    r
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
        TcpReceiver::accept_with(listener, options(cfg))
    })
    .map(|r| named(r, cfg))
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
        TcpSender::connect_with(&addrs[..], options(cfg))
    })
    .map(|(r, _)| named(r, cfg))
}

#[cfg(test)]
mod tests {
    use std::net::TcpStream;
    use std::time::Instant;

    use super::*;
    use crate::bench::test_cfg::{corrupting, host_cfg};
    use crate::config::MIB;

    /// Both ends of a loopback run: the receiver (on `dev`) in a thread, the sender here.
    fn both_ends(cfg: &BenchConfig, dev: HostDevice) -> (BenchResult, BenchResult) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let rcfg = cfg.clone();
        let t = std::thread::spawn(move || tcp_receiver_with(&dev, &rcfg, &listener));
        let sent = run_tcp_sender(cfg, addr).unwrap();
        (sent, t.join().unwrap().unwrap())
    }

    #[test]
    fn a_corrupted_chunk_on_the_receiver_makes_both_tcp_ends_unverified() {
        let (sent, received) = both_ends(&host_cfg(2 * MIB), corrupting(0));
        for r in [&sent, &received] {
            assert!(!r.verified, "{}: the warmup chunk was corrupted", r.name);
            assert_eq!(r.verified_iterations, 2, "{}", r.name);
        }
    }

    #[test]
    fn tcp_host_bench_two_ends() {
        let (r, rr) = both_ends(&host_cfg(5 * MIB + 3), HostDevice::new());
        assert!(r.verified && rr.verified);
        assert_eq!(r.seconds.len(), 2);
        assert_eq!(r.connections, Some(2));
    }

    #[test]
    fn tcp_host_bench_with_checksums_verifies_and_names_the_run() {
        let cfg = BenchConfig {
            tcp_checksum: true,
            ..host_cfg(3 * MIB + 5)
        };
        let (r, rr) = both_ends(&cfg, HostDevice::new());
        assert!(r.verified && rr.verified);
        assert!(r.name.ends_with("+checksum"), "{}", r.name);
        // The receiver's H2D corrupting what lands on the device happens after the digest was taken
        // from the staged bytes: the checksum covers the wire, not the device copies.
        let (sent, received) = both_ends(&cfg, corrupting(0));
        assert!(!sent.verified && !received.verified);
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
}
