//! Soft-RoCE VM tier: probe the live `rxe0` from the real `/` root and prove that its counters
//! move when perftest's `ib_write_bw` pushes traffic through it. Run by `tests/rxe/run.sh`.

use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use probe::counters::{self, Basis, CounterDelta};
use probe::facts::DeviceKind;
use probe::{HostFacts, ProbeOptions, Verdict};

fn device() -> String {
    std::env::var("RDMAKIT_RXE_DEVICE").unwrap_or_else(|_| "rxe0".into())
}

fn gid_index() -> u32 {
    std::env::var("RDMAKIT_RXE_GID_INDEX")
        .ok()
        .and_then(|g| g.parse().ok())
        .unwrap_or(1)
}

/// Wait for a child with a deadline; kill it (by its own pid) if it overruns.
fn wait_output(mut child: Child, limit: Duration, what: &str) -> String {
    let start = Instant::now();
    loop {
        match child.try_wait().expect("try_wait") {
            Some(status) => {
                let mut out = String::new();
                if let Some(mut s) = child.stdout.take() {
                    s.read_to_string(&mut out).expect("read stdout");
                }
                let mut err = String::new();
                if let Some(mut s) = child.stderr.take() {
                    s.read_to_string(&mut err).expect("read stderr");
                }
                assert!(status.success(), "{what} failed ({status}):\n{out}\n{err}");
                return out;
            }
            None if start.elapsed() > limit => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{what} did not finish within {limit:?}");
            }
            None => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

#[test]
#[ignore = "soft-RoCE VM tier: run by tests/rxe/run.sh"]
fn probe_live_rxe_device() {
    let dev = device();
    let mut opts = ProbeOptions::new("/").with_env("NCCL_IB_HCA", dev.clone());
    opts.live_verbs = true;
    let f = HostFacts::gather(&opts).expect("probe /");
    eprintln!("{}", probe::Report::from(&f).render_table());
    let d = f
        .rdma_devices
        .iter()
        .find(|d| d.name == dev)
        .unwrap_or_else(|| panic!("{dev} not found; have {:?}", f.rdma_devices));
    assert_eq!(d.kind, DeviceKind::Rxe);
    let p = &d.ports[0];
    assert!(p.is_active(), "{dev} port state {}", p.state);
    assert_eq!(p.link_layer.as_deref(), Some("Ethernet"));
    assert!(
        p.gids
            .iter()
            .any(|g| g.index == gid_index() && g.is_ipv4_mapped()),
        "{:?}",
        p.gids
    );
    assert!(
        p.hw_counters.iter().any(|c| c == "sent_pkts"),
        "{:?}",
        p.hw_counters
    );
    assert!(
        !f.dev_infiniband.uverbs.is_empty(),
        "no /dev/infiniband/uverbs*"
    );
    let ib_hca = f
        .checks
        .iter()
        .find(|c| c.id == "ib-hca")
        .expect("ib-hca check");
    assert_eq!(ib_hca.verdict, Verdict::Ok);
    // libibverbs (through erdma-verbs) lists and opens it too.
    let live = f.live.as_ref().expect("live verbs queried");
    let l = live
        .devices
        .iter()
        .find(|l| l.name == dev)
        .expect("verbs lists the device");
    let caps = l
        .caps
        .as_ref()
        .unwrap_or_else(|| panic!("cannot open {dev}: {:?}", l.error));
    assert!(caps.rc);
    assert!(
        f.checks
            .iter()
            .any(|c| c.id == "verbs-caps" && c.subject == dev)
    );
    assert!(
        !f.checks.iter().any(|c| c.id == "verbs-devices"),
        "{:#?}",
        f.checks
    );
    // The VM harness raises memlock before the tests.
    assert!(
        f.memlock.is_some_and(|m| m.is_unlimited()),
        "{:?}",
        f.memlock
    );
}

#[test]
#[ignore = "soft-RoCE VM tier: run by tests/rxe/run.sh"]
fn counters_move_after_ib_write_bw() {
    let dev = device();
    let gid = gid_index().to_string();
    let size: u64 = 65536;
    let iters: u64 = 300;
    let port = "18733";
    let common = |c: &mut Command| {
        c.args([
            "-d",
            &dev,
            "-x",
            &gid,
            "-s",
            &size.to_string(),
            "-n",
            &iters.to_string(),
            "-p",
            port,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    };
    let root = Path::new("/");
    let before = counters::snapshot(root, &dev, 1).expect("snapshot before");

    let mut server = Command::new("ib_write_bw");
    common(&mut server);
    let server = server
        .spawn()
        .expect("spawn ib_write_bw server (perftest installed?)");
    std::thread::sleep(Duration::from_secs(2));
    let mut client = Command::new("ib_write_bw");
    common(&mut client);
    let ip = std::env::var("RDMAKIT_RXE_IP").unwrap_or_else(|_| "127.0.0.1".into());
    client.arg(&ip);
    let client = client.spawn().expect("spawn ib_write_bw client");
    let client_out = wait_output(client, Duration::from_secs(180), "ib_write_bw client");
    let _server_out = wait_output(server, Duration::from_secs(60), "ib_write_bw server");

    let after = counters::snapshot(root, &dev, 1).expect("snapshot after");
    let delta = CounterDelta::between(&before, &after).expect("delta");
    eprintln!("{}", probe::report::counters_table(&delta));
    let proof = counters::prove(&delta, size * iters, 0.9);
    eprintln!("{}", proof.summary);
    // Released kernels count rxe packets only; kernels with the perf-mgmt series also count bytes.
    let basis = if before.values.contains_key("hw_counters/sent_bytes") {
        Basis::Bytes
    } else {
        Basis::PacketEstimate
    };
    assert_eq!(proof.basis, basis);
    assert_eq!(proof.verdict, Verdict::Ok, "{}", proof.summary);
    assert!(delta.tx_packets.unwrap_or(0) >= size * iters / 4096);

    // The client's output parses, and names the device.
    let run = probe::parse::parse_perftest(&client_out).expect("parse ib_write_bw output");
    assert_eq!(run.device(), Some(dev.as_str()));
    assert_eq!(run.bw.len(), 1);
    assert_eq!(run.bw[0].bytes, size);
    assert!(run.bw[0].bw_average > 0.0);

    // A real run that moves nothing: two snapshots a moment apart with no traffic between them.
    // Its proof must fail (this is what a silent TCP fallback looks like on the counters), and as
    // the TCP side of the A/B it leaves the RDMA run's verdict ok.
    let idle_before = counters::snapshot(root, &dev, 1).expect("idle snapshot before");
    std::thread::sleep(Duration::from_secs(1));
    let idle_after = counters::snapshot(root, &dev, 1).expect("idle snapshot after");
    let idle = CounterDelta::between(&idle_before, &idle_after).expect("idle delta");
    let idle_proof = counters::prove(&idle, size * iters, 0.9);
    eprintln!("{}", idle_proof.summary);
    assert_eq!(idle_proof.basis, basis);
    assert_eq!(idle_proof.verdict, Verdict::Fail, "{}", idle_proof.summary);
    assert!(idle.tx_packets.unwrap_or(0) < size * iters / 4096);
    let ab = counters::compare_ab(&delta, &idle, size * iters);
    assert_eq!(ab.verdict, Verdict::Ok, "{:?}", ab.lines);
}

#[test]
#[ignore = "soft-RoCE VM tier: run by tests/rxe/run.sh"]
fn ibv_devinfo_live_output_parses_and_doctor_reads_it() {
    let dev = device();
    let out = Command::new("ibv_devinfo")
        .args(["-d", &dev])
        .output()
        .expect("run ibv_devinfo");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let devs = probe::parse::parse_ibv_devinfo(&text).expect("parse ibv_devinfo");
    assert_eq!(devs[0].hca_id, dev);
    assert!(devs[0].ports[0].is_active());
    let d = probe::doctor::diagnose(&text).expect("kb");
    assert!(d.has("ibv-hca-id"));
    assert!(d.has("ibv-port-active"));
    assert_eq!(d.verdict, Verdict::Ok);
}
