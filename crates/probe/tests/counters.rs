//! Counter snapshots, diffs and the RDMA-vs-TCP proof on fixture trees.

use std::path::{Path, PathBuf};

use probe::counters::{self, Basis, CounterDelta};
use probe::facts::DeviceKind;
use probe::{ProbeError, Verdict};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// Copy a fixture tree so a test can bump counter files like a run would.
fn copy_tree(from: &Path, to: &Path) {
    for e in std::fs::read_dir(from).expect("read fixture dir") {
        let e = e.expect("dir entry");
        let dst = to.join(e.file_name());
        if e.file_type().expect("file type").is_dir() {
            std::fs::create_dir_all(&dst).expect("mkdir");
            copy_tree(&e.path(), &dst);
        } else {
            std::fs::copy(e.path(), &dst).expect("copy");
        }
    }
}

fn bump(root: &Path, dev: &str, file: &str, by: u64) {
    let p = root
        .join("sys/class/infiniband")
        .join(dev)
        .join("ports/1")
        .join(file);
    let v: u64 = std::fs::read_to_string(&p)
        .expect("counter file")
        .trim()
        .parse()
        .expect("counter value");
    std::fs::write(&p, format!("{}\n", v + by)).expect("write counter");
}

const GIB: u64 = 1 << 30;

#[test]
fn erdma_rdt_run_moves_1_53_gib_and_tcp_run_moves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    copy_tree(&fixture("erdma"), dir.path());
    let root = dir.path();
    // RDMA run: three 512 MiB transfers plus protocol overhead (the runbook saw 1.53 GiB).
    let before = counters::snapshot(root, "erdma_0", 1).unwrap();
    assert_eq!(before.kind, DeviceKind::Erdma);
    assert_eq!(before.values["hw_counters/hw_tx_bytes_cnt"], 7_421_337_610);
    bump(
        root,
        "erdma_0",
        "hw_counters/hw_tx_bytes_cnt",
        1_642_824_909,
    );
    bump(root, "erdma_0", "hw_counters/hw_tx_packets_cnt", 401_080);
    bump(root, "erdma_0", "hw_counters/hw_rx_bytes_cnt", 2_100_000);
    let after = counters::snapshot(root, "erdma_0", 1).unwrap();
    let rdma = CounterDelta::between(&before, &after).unwrap();
    assert_eq!(rdma.tx_bytes, Some(1_642_824_909));
    assert_eq!(rdma.rx_bytes, Some(2_100_000));
    assert_eq!(rdma.tx_packets, Some(401_080));
    let proof = counters::prove(&rdma, 3 * 512 * (1 << 20), counters::DEFAULT_MIN_FRACTION);
    assert_eq!(proof.verdict, Verdict::Ok);
    assert_eq!(proof.basis, Basis::Bytes);
    assert!(proof.summary.contains("1.530 GiB"), "{}", proof.summary);

    // TCP run with NCCL_IB_DISABLE=1: the counter does not move.
    let before_tcp = counters::snapshot(root, "erdma_0", 1).unwrap();
    let after_tcp = counters::snapshot(root, "erdma_0", 1).unwrap();
    let tcp = CounterDelta::between(&before_tcp, &after_tcp).unwrap();
    let ab = counters::compare_ab(&rdma, &tcp, 3 * 512 * (1 << 20));
    assert_eq!(ab.verdict, Verdict::Ok);
    assert_eq!(ab.lines[0], "eRDMA tx during RDMA run: 1.530 GiB");
    assert_eq!(ab.lines[1], "TCP-run eRDMA tx delta: 0.000 GiB");
    assert!(ab.fix.is_none());
}

#[test]
fn silent_fallback_fails_the_proof() {
    let root = fixture("erdma");
    let s = counters::snapshot(&root, "erdma_0", 1).unwrap();
    let still = CounterDelta::between(&s, &s).unwrap();
    let proof = counters::prove(&still, GIB, 0.9);
    assert_eq!(proof.verdict, Verdict::Fail);
    assert!(proof.summary.contains("TCP fallback"));
    let ab = counters::compare_ab(&still, &still, GIB);
    assert_eq!(ab.verdict, Verdict::Fail);
    assert!(ab.fix.as_deref().unwrap().contains("fell back to TCP"));
}

#[test]
fn tcp_run_that_moves_rdma_bytes_is_a_warning() {
    let root = fixture("erdma");
    let before = counters::snapshot(&root, "erdma_0", 1).unwrap();
    let mut after = before.clone();
    *after.values.get_mut("hw_counters/hw_tx_bytes_cnt").unwrap() += 2 * GIB;
    let d = CounterDelta::between(&before, &after).unwrap();
    let ab = counters::compare_ab(&d, &d, GIB);
    assert_eq!(ab.verdict, Verdict::Warn);
    assert!(ab.fix.as_deref().unwrap().contains("NCCL_IB_DISABLE"));
}

#[test]
fn mlx5_counts_four_byte_words() {
    let root = fixture("mlx5");
    let before = counters::snapshot(&root, "mlx5_0", 1).unwrap();
    assert_eq!(before.kind, DeviceKind::Mlx5);
    assert!(before.values.contains_key("counters/port_xmit_data"));
    assert!(before.values.contains_key("hw_counters/out_of_buffer"));
    let mut after = before.clone();
    *after.values.get_mut("counters/port_xmit_data").unwrap() += GIB / 4;
    let d = CounterDelta::between(&before, &after).unwrap();
    assert_eq!(d.tx_bytes, Some(GIB));
    assert_eq!(counters::prove(&d, GIB, 0.9).verdict, Verdict::Ok);
    assert_eq!(counters::prove(&d, 2 * GIB, 0.9).verdict, Verdict::Fail);
}

#[test]
fn rxe_uses_a_packet_estimate() {
    let root = fixture("rxe");
    let before = counters::snapshot(&root, "rxe0", 1).unwrap();
    assert_eq!(before.kind, DeviceKind::Rxe);
    let mut after = before.clone();
    *after.values.get_mut("hw_counters/sent_pkts").unwrap() += 70_000;
    let d = CounterDelta::between(&before, &after).unwrap();
    assert_eq!(d.tx_bytes, None);
    assert_eq!(d.tx_packets, Some(70_000));
    let p = counters::prove(&d, 256 << 20, 0.9);
    assert_eq!(p.basis, Basis::PacketEstimate);
    assert_eq!(p.verdict, Verdict::Ok, "{}", p.summary);
    let p = counters::prove(&d, 4 * GIB, 0.9);
    assert_eq!(p.verdict, Verdict::Fail);
}

#[test]
fn rxe_byte_counters_win_where_the_kernel_has_them() {
    // The linux-rdma series "RDMA/rxe: support perf mgmt GET method" adds hw_counters/sent_bytes
    // and rcvd_bytes; with them the receipt counts bytes, not a packet estimate.
    let tmp = tempfile::tempdir().unwrap();
    copy_tree(&fixture("rxe"), tmp.path());
    let hw = tmp
        .path()
        .join("sys/class/infiniband/rxe0/ports/1/hw_counters");
    std::fs::write(hw.join("sent_bytes"), "1000\n").unwrap();
    std::fs::write(hw.join("rcvd_bytes"), "2000\n").unwrap();
    let before = counters::snapshot(tmp.path(), "rxe0", 1).unwrap();
    bump(tmp.path(), "rxe0", "hw_counters/sent_bytes", 300 << 20);
    bump(tmp.path(), "rxe0", "hw_counters/sent_pkts", 80_000);
    let after = counters::snapshot(tmp.path(), "rxe0", 1).unwrap();
    let d = CounterDelta::between(&before, &after).unwrap();
    assert_eq!(d.tx_bytes, Some(300 << 20));
    let p = counters::prove(&d, 256 << 20, 0.9);
    assert_eq!(
        (p.basis, p.verdict),
        (Basis::Bytes, Verdict::Ok),
        "{}",
        p.summary
    );
}

#[test]
fn counter_reset_is_reported_not_underflowed() {
    let root = fixture("erdma");
    let before = counters::snapshot(&root, "erdma_0", 1).unwrap();
    let mut after = before.clone();
    *after.values.get_mut("hw_counters/hw_tx_bytes_cnt").unwrap() = 5;
    let d = CounterDelta::between(&before, &after).unwrap();
    assert_eq!(d.tx_bytes, Some(0));
    assert_eq!(d.reset, vec!["hw_counters/hw_tx_bytes_cnt".to_string()]);
}

#[test]
fn errors_name_the_device_and_the_path() {
    let root = fixture("erdma");
    let e = counters::snapshot(&root, "mlx5_0", 1).unwrap_err();
    assert!(matches!(e, ProbeError::NoSuchDevice { .. }));
    let msg = e.to_string();
    assert!(
        msg.contains("mlx5_0") && msg.contains("found: erdma_0"),
        "{msg}"
    );
    let e = counters::snapshot(&root, "erdma_0", 2).unwrap_err();
    assert!(matches!(e, ProbeError::NoCounters { port: 2, .. }), "{e}");
    let a = counters::snapshot(&root, "erdma_0", 1).unwrap();
    let b = counters::snapshot(&fixture("mlx5"), "mlx5_0", 1).unwrap();
    assert!(matches!(
        CounterDelta::between(&a, &b),
        Err(ProbeError::SnapshotMismatch(_))
    ));
}

#[test]
fn snapshot_all_covers_every_port() {
    let all = counters::snapshot_all(&fixture("mlx5")).unwrap();
    let names: Vec<(String, u32)> = all.iter().map(|s| (s.device.clone(), s.port)).collect();
    assert_eq!(names, vec![("mlx5_0".into(), 1), ("mlx5_1".into(), 1)]);
}

/// Bump `file` of `dev` port 1 in a snapshot (what a run does to the sysfs file).
fn bumped(s: &counters::CounterSnapshot, file: &str, by: u64) -> counters::CounterSnapshot {
    let mut a = s.clone();
    *a.values
        .get_mut(file)
        .unwrap_or_else(|| panic!("{} has no {file}", s.device)) += by;
    a
}

fn vendor(dev: &str) -> counters::CounterSnapshot {
    counters::snapshot(&fixture("vendors"), dev, 1).unwrap_or_else(|e| panic!("{dev}: {e}"))
}

#[test]
fn efa_receipt_reads_tx_bytes_and_falls_back_to_rdma_write_bytes() {
    // Current driver: tx_bytes/rx_bytes, classified by the Amazon PCI vendor (name rdmapXsY).
    let s = vendor("rdmap16s27");
    assert_eq!(s.kind, DeviceKind::Efa);
    let d = CounterDelta::between(&s, &bumped(&s, "hw_counters/tx_bytes", GIB)).unwrap();
    assert_eq!(d.tx_bytes, Some(GIB));
    let p = counters::prove(&d, GIB, 0.9);
    assert_eq!(
        (p.basis, p.verdict),
        (Basis::Bytes, Verdict::Ok),
        "{}",
        p.summary
    );
    assert!(
        p.summary.starts_with("EFA moved 1.000 GiB"),
        "{}",
        p.summary
    );
    assert_eq!(p.fraction, Some(1.0));
    // RDMA-write counters alone do not count when tx_bytes exists (no double counting).
    let d = CounterDelta::between(&s, &bumped(&s, "hw_counters/rdma_write_bytes", GIB)).unwrap();
    assert_eq!(d.tx_bytes, Some(0));
    // A driver with only the RDMA-write counters.
    let s = vendor("efa_0");
    let d = CounterDelta::between(&s, &bumped(&s, "hw_counters/rdma_write_bytes", GIB)).unwrap();
    assert_eq!(d.tx_bytes, Some(GIB));
    assert_eq!(counters::prove(&d, GIB, 0.9).verdict, Verdict::Ok);
}

#[test]
fn bnxt_re_prefers_roce_only_bytes() {
    let s = vendor("bnxt_re0");
    assert_eq!(s.kind, DeviceKind::BnxtRe);
    // Function-level bytes moved (TCP on the same port), RoCE bytes did not: a fallback.
    let d = CounterDelta::between(&s, &bumped(&s, "hw_counters/tx_bytes", GIB)).unwrap();
    assert_eq!(d.tx_bytes, Some(0));
    let p = counters::prove(&d, GIB, 0.9);
    assert_eq!(p.verdict, Verdict::Fail);
    assert!(
        p.summary.contains("(0% of it, 90% needed)"),
        "{}",
        p.summary
    );
    assert!(
        p.fix
            .as_deref()
            .unwrap_or_default()
            .contains("fell back to TCP")
    );
    let d = CounterDelta::between(&s, &bumped(&s, "hw_counters/tx_roce_only_bytes", GIB)).unwrap();
    assert_eq!(counters::prove(&d, GIB, 0.9).verdict, Verdict::Ok);
    // Older kernels have only tx_bytes.
    let s = vendor("bnxt_re1");
    let d = CounterDelta::between(&s, &bumped(&s, "hw_counters/tx_bytes", GIB)).unwrap();
    assert_eq!(d.tx_bytes, Some(GIB));
}

#[test]
fn irdma_sums_ipv4_and_ipv6_octets() {
    // systemd names it rocep65s0f0; the Intel PCI vendor makes it irdma.
    let s = vendor("rocep65s0f0");
    assert_eq!(s.kind, DeviceKind::Irdma);
    let a = bumped(
        &bumped(&s, "hw_counters/ip4OutOctets", GIB / 2),
        "hw_counters/ip6OutOctets",
        GIB / 2,
    );
    let d = CounterDelta::between(&s, &a).unwrap();
    assert_eq!(d.tx_bytes, Some(GIB));
    assert_eq!(counters::prove(&d, GIB, 0.9).verdict, Verdict::Ok);
}

#[test]
fn no_counters_fails_closed() {
    // siw keeps no counters: the snapshot says so by name...
    let e = counters::snapshot(&fixture("vendors"), "siw0", 1).unwrap_err();
    assert!(matches!(e, ProbeError::NoCounters { port: 1, .. }), "{e}");
    // ...and a delta without a usable counter is a failed receipt, never a pass.
    let d = CounterDelta {
        device: "siw0".into(),
        port: 1,
        kind: DeviceKind::Siw,
        deltas: Default::default(),
        reset: vec![],
        tx_bytes: None,
        rx_bytes: None,
        tx_packets: None,
        rx_packets: None,
    };
    let p = counters::prove(&d, GIB, 0.9);
    assert_eq!((p.basis, p.verdict), (Basis::None, Verdict::Fail));
    assert!(p.summary.contains("no receipt"), "{}", p.summary);
    assert!(
        p.fix
            .as_deref()
            .unwrap_or_default()
            .contains("NET/IB : Using")
    );
    let ab = counters::compare_ab(&d, &d, GIB);
    assert_eq!(ab.verdict, Verdict::Fail);
}

/// Counters read with `cat` in several pods (what workflows do), summed and judged: seed 000's RDT run
/// through eRDMA's byte counter, mlx5's 4-byte words, a counter that went backwards, and pods that differ.
#[test]
fn summed_pod_readings_prove_the_run_and_the_ab() {
    let erdma = counters::CounterSpec {
        name_pattern: "erdma_*".into(),
        exclude: vec![],
        tx_counter: "ports/1/hw_counters/hw_tx_bytes_cnt".into(),
        counter_multiplier: 1,
    };
    let run = 3 * 512 * 1024 * 1024_u64;
    let d = counters::summed_delta(&erdma, &[1000, 5000], &[1000 + 1_642_000_000, 5000]).unwrap();
    assert_eq!(d.kind, DeviceKind::Erdma);
    assert_eq!(
        d.deltas.get("hw_counters/hw_tx_bytes_cnt"),
        Some(&1_642_000_000)
    );
    assert_eq!(d.device, "erdma_* on 2 pod(s)");
    let proof = counters::prove(&d, run, counters::DEFAULT_MIN_FRACTION);
    assert_eq!(proof.verdict, Verdict::Ok, "{}", proof.summary);
    let flat = counters::summed_delta(&erdma, &[1000, 5000], &[1000, 5000]).unwrap();
    let proof = counters::prove(&flat, run, counters::DEFAULT_MIN_FRACTION);
    assert_eq!(proof.verdict, Verdict::Fail);
    assert!(
        proof.summary.contains("silent TCP fallback"),
        "{}",
        proof.summary
    );
    let ab = counters::compare_ab(&d, &flat, run);
    assert_eq!(ab.verdict, Verdict::Ok);
    assert!(
        ab.lines[1].contains("TCP-run eRDMA tx delta: 0.000 GiB"),
        "{:?}",
        ab.lines
    );
    let mlx5 = counters::CounterSpec {
        name_pattern: "mlx5_*".into(),
        exclude: vec!["mlx5_bond_*".into()],
        tx_counter: "ports/1/counters/port_xmit_data".into(),
        counter_multiplier: 4,
    };
    let words = counters::summed_delta(&mlx5, &[10, 20], &[110, 5]).unwrap();
    assert_eq!(words.tx_bytes, Some(400));
    assert_eq!(words.device, "mlx5_* but mlx5_bond_* on 2 pod(s)");
    assert_eq!(words.reset, vec!["counters/port_xmit_data (pod 1)"]);
    let e = counters::summed_delta(&erdma, &[1], &[1, 2]).unwrap_err();
    assert!(
        matches!(&e, ProbeError::SnapshotMismatch(m) if m.contains("1 reading(s) before but 2 after")),
        "{e}"
    );
}
