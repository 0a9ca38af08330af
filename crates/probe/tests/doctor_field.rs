//! The users' ten most common RDMA-on-Kubernetes failures (issue 15), each from a fixture in the
//! shape the tool prints it: the doctor must name the cause and the fix (the variable and the
//! profile's value), not only the symptom.

use probe::Verdict;
use probe::doctor;

mod logs_common;
use logs_common::{diag, find, fix};

// 1. Silent TCP fallback, in NCCL 2.23+'s plugin wording.
#[test]
fn tcp_fallback_in_plugin_wording() {
    let d = diag("vllm-ray-socket-fallback.log");
    let ib = find(&d, "nccl-net-plugin-ib-failed");
    assert_eq!((ib.line, ib.severity), (8, Verdict::Fail));
    let fb = find(&d, "nccl-tcp-fallback");
    assert_eq!((fb.line, fb.severity), (9, Verdict::Fail));
    assert!(fix(fb).contains("NCCL_IB_DISABLE=0"), "{}", fix(fb));
    assert_eq!(find(&d, "nccl-net-plugin-socket").occurrences, 2);
    // A missing libnccl-net.so is normal: information, not a problem.
    assert_eq!(find(&d, "nccl-net-plugin-absent").severity, Verdict::Info);
    // The plugin form alone (no `NET/Socket : Using`, no `Using network`) is enough.
    let only = "w:1:1 [0] NCCL INFO Initialized NET plugin Socket\n";
    assert!(doctor::diagnose(only).unwrap().has("nccl-tcp-fallback"));
    let ib_ok = "w:1:1 [0] NCCL INFO Initialized NET plugin IB\nw:1:1 [0] NCCL INFO Initialized NET plugin Socket\n";
    let d = doctor::diagnose(ib_ok).unwrap();
    assert!(d.has("nccl-net-plugin-ib"));
    assert!(!d.has("nccl-tcp-fallback"), "IB loaded: not a fallback");
    // A named plugin that fails to load is a warning; the default absent one is not.
    let d = doctor::diagnose(
        "w:1:1 [0] NCCL INFO NET/Plugin: Plugin load (libnccl-net-ofi.so) returned 2 : libfabric.so.1: cannot open shared object file\n",
    )
    .unwrap();
    let f = find(&d, "nccl-net-plugin-load-failed");
    assert!(f.cause.contains("libnccl-net-ofi.so"), "{}", f.cause);
    // On EFA the missing OFI plugin is the reason for the fallback, and the fallback says so.
    let d = diag("nccl-ofi-plugin-missing.log");
    assert_eq!(find(&d, "nccl-net-plugin-load-failed").line, 4);
    let fb = find(&d, "nccl-tcp-fallback");
    assert!(fb.cause.contains("net plugin of line 4"), "{}", fb.cause);
    // Healthy plugin-era log: IB plugin, GPUDirect on, no fallback.
    let d = diag("nccl-plugin-ib-gdr.log");
    assert_eq!(find(&d, "nccl-net-plugin-ib").occurrences, 2);
    assert!(find(&d, "nccl-gdr-enabled").cause.contains("mlx5_0"));
    assert!(d.verdict <= Verdict::Info, "{:?}", d.verdict);
}

// 2. Wrong or changing GID index on RoCE.
#[test]
fn gid_type_mismatch_names_both_gids_and_the_index_variables() {
    let d = diag("nccl-gid-type-mismatch.log");
    let f = find(&d, "nccl-gid-type-mismatch");
    assert_eq!((f.line, f.severity), (6, Verdict::Fail));
    assert!(f.cause.contains("local ::ffff:10.0.7.21"), "{}", f.cause);
    assert!(
        f.cause.contains("remote fe80::bace:f6ff:fea1:4e2d"),
        "{}",
        f.cause
    );
    for needle in ["NCCL_IB_GID_INDEX", "UCX_IB_GID_INDEX", "eRDMA: 1"] {
        assert!(fix(f).contains(needle), "{needle}: {}", fix(f));
    }
    // The more specific finding replaces the generic retry-exceeded one on that line.
    assert!(!d.has("nccl-retry-exceeded"));
    // The other way round (local link-local, remote IPv4-mapped) too.
    let rev = "NCCL WARN NET/IB : Got completion from peer 10.0.0.2<1> with status=12 opcode=0 len=0 vendor err 129 (Send) localGid fe80::1 remoteGids::ffff:10.0.0.2 hca mlx5_0\n";
    let d = doctor::diagnose(rev).unwrap();
    assert!(
        find(&d, "nccl-gid-type-mismatch")
            .cause
            .contains("local fe80::1")
    );
}

#[test]
fn ucx_rtr_failure_names_ucx_variables() {
    let d = diag("ucx-modify-qp-rtr.log");
    let f = find(&d, "ucx-modify-qp-rtr");
    assert_eq!((f.line, f.severity), (5, Verdict::Fail));
    assert!(f.cause.contains("(No such device)"), "{}", f.cause);
    assert!(fix(f).contains("UCX_NET_DEVICES=<dev>:1"));
    assert!(fix(f).contains("UCX_IB_GID_INDEX"));
    assert!(fix(f).contains("eRDMA profile: 1"));
}

#[test]
fn perftest_zero_gid_in_a_pod() {
    let d = diag("perftest-zero-gid.log");
    let g = find(&d, "perftest-zero-gid");
    assert_eq!((g.line, g.occurrences), (17, 2));
    assert!(fix(g).contains("-x <index>") && fix(g).contains("hostNetwork"));
    assert_eq!(find(&d, "perftest-connect-failed").line, 20);
}

// 3. Locked memory.
#[test]
fn ulimit_l_prints_a_number() {
    let d = diag("ulimit-l.log");
    let f = find(&d, "ulimit-l-limited");
    assert_eq!((f.line, f.severity), (2, Verdict::Fail));
    assert!(f.cause.contains("64 KiB"));
    assert!(fix(f).contains("LimitMEMLOCK=infinity"));
    // A bare number far from any `ulimit -l` is not a limit.
    let d = doctor::diagnose("ls\n64\nfoo\nbar\nbaz\nulimit -l\nunlimited\n").unwrap();
    assert!(!d.has("ulimit-l-limited"));
}

// 7 (and 3). UCX registration ENOMEM on eRDMA: the 64 GiB cap.
#[test]
fn erdma_registration_over_the_cap() {
    let d = diag("ucx-reg-mr-erdma.log");
    let f = find(&d, "memlock-reg-mr-enomem");
    assert_eq!(f.line, 2);
    assert!(
        f.cause.contains("70 GiB") && f.cause.contains("64 GiB"),
        "{}",
        f.cause
    );
    assert!(fix(f).contains("--gpu-memory-utilization"));
    // Without eRDMA in the log, the same line is a memlock problem.
    let line = "[1] [h:1:0] ib_md.c:309 UCX ERROR ibv_reg_mr(address=0x1, length=75161927680, access=0xf) failed: Cannot allocate memory\n";
    let d = doctor::diagnose(line).unwrap();
    let f = find(&d, "memlock-reg-mr-enomem");
    assert!(!f.cause.contains("cap (about"), "{}", f.cause);
    assert!(fix(f).contains("LimitMEMLOCK=infinity"));
}

// 4. Device plugin with 0 devices, DRA claims that stay pending.
#[test]
fn shared_device_plugin_exposes_nothing() {
    let d = diag("rdma-shared-dev-plugin-zero.log");
    let z = find(&d, "rdma-dp-exposing-zero");
    assert_eq!((z.line, z.severity), (13, Verdict::Fail));
    assert!(fix(z).contains("selectors"));
    assert!(
        find(&d, "rdma-dp-no-devices-for-resource")
            .cause
            .contains("rdma_shared_device_a")
    );
    let m = find(&d, "rdma-dp-missing-char-device");
    assert!(m.cause.contains("/dev/infiniband/rdma_cm"), "{}", m.cause);
    assert!(fix(m).contains("modprobe rdma_ucm"));
}

#[test]
fn dra_claim_pending() {
    let d = diag("dra-claim-pending.log");
    let p = find(&d, "dra-claim-pending");
    assert_eq!((p.line, p.occurrences), (3, 2));
    let c = find(&d, "dra-cannot-allocate");
    assert_eq!((c.line, c.severity), (12, Verdict::Fail));
    assert!(fix(c).contains("dra_selector_gaps"));
}

// 5. Wrong NIC.
#[test]
fn socket_ifname_that_matches_nothing() {
    let d = diag("nccl-socket-ifname.log");
    let f = find(&d, "nccl-socket-ifname-no-match");
    assert_eq!((f.line, f.occurrences), (3, 2));
    assert!(f.cause.contains("NCCL_SOCKET_IFNAME=eth1"), "{}", f.cause);
    assert!(fix(f).contains("eth0 for hostNetwork eRDMA"), "{}", fix(f));
}

#[test]
fn ib_hca_that_matches_nothing() {
    let d = diag("nccl-ib-hca-mismatch.log");
    let f = find(&d, "nccl-ib-no-device");
    assert_eq!(f.line, 3);
    assert!(
        f.cause
            .starts_with("NCCL_IB_HCA=mlx5_0 matches no RDMA device"),
        "{}",
        f.cause
    );
    assert!(fix(f).contains("eRDMA: erdma_0"), "{}", fix(f));
    assert_eq!(find(&d, "nccl-tcp-fallback").severity, Verdict::Fail);
}

#[test]
fn ucx_on_every_interface() {
    let d = diag("ucx-net-devices-all.log");
    let f = find(&d, "ucx-tcp-lane");
    assert_eq!((f.line, f.severity), (4, Verdict::Warn));
    assert!(f.cause.contains("TCP on eth0"), "{}", f.cause);
    assert!(fix(f).contains("UCX_NET_DEVICES") && fix(f).contains("erdma_0:1"));
    assert!(d.has("ucx-net-devices-all"));
    let d = doctor::diagnose(
        "[1] [h:1:0] ucp_context.c:1110 UCX  WARN  network device 'mlx5_0:1' is not available, please use one or more of: 'eth0'(tcp)\n",
    )
    .unwrap();
    assert!(
        find(&d, "ucx-net-device-unavailable")
            .cause
            .contains("mlx5_0:1")
    );
    let d = diag("ucx-net-device-unavailable.log");
    assert_eq!(find(&d, "ucx-net-device-unavailable").line, 3);
}

// 6. GPUDirect fragility.
#[test]
fn gpudirect_without_peermem_or_dmabuf() {
    let d = diag("nccl-gdr-no-peermem.log");
    let f = find(&d, "nccl-gdr-no-peermem");
    assert_eq!((f.line, f.severity), (5, Verdict::Warn));
    assert!(fix(f).contains("modprobe nvidia_peermem"));
    assert!(
        fix(f).contains("probe::expect"),
        "the fix says what rate to expect"
    );
    // The specific finding replaces the generic GDR-disabled one.
    assert!(!d.has("nccl-gdr-disabled"));
    assert_eq!(d.verdict, Verdict::Warn);
    let d = diag("nccl-dmabuf-unsupported.log");
    let f = find(&d, "nccl-dmabuf-unsupported");
    assert_eq!(f.line, 3);
    assert!(fix(f).contains("NCCL_DMABUF_ENABLE=0"));
    assert!(d.has("nccl-dmabuf-available"));
    // On eRDMA, GDR off is expected and only informational, with the staged expectation.
    let d = diag("rdt-demo-ok.log");
    let f = find(&d, "nccl-gdr-disabled");
    assert_eq!(f.severity, Verdict::Info);
    assert!(f.cause.contains("staged"), "{}", f.cause);
}

// 8. Secondary network and service mesh.
#[test]
fn rdma_cm_without_a_netdev() {
    let d = diag("rdma-cm-no-netdev.log");
    let f = find(&d, "rdma-cm-no-netdev");
    assert_eq!((f.line, f.occurrences), (2, 2));
    assert!(fix(f).contains("Multus") && fix(f).contains("hostNetwork"));
}

#[test]
fn mesh_sidecar_in_an_nccl_pod() {
    let d = diag("istio-sidecar.log");
    let f = find(&d, "service-mesh-sidecar");
    assert_eq!(f.line, 12);
    assert!(f.cause.contains("istio-proxy"));
    assert!(fix(f).contains("sidecar.istio.io/inject"));
    assert!(fix(f).contains("linkerd.io/inject"));
    assert_eq!(find(&d, "nccl-socket-reset").line, 15);
}

// 9. NCCL regressions read from the log's version line, per vendor.
#[test]
fn known_bad_nccl_is_per_vendor() {
    let on_erdma = "NCCL version 2.28.9+cuda13.0\nw:1:1 [0] NCCL INFO NET/IB : Using [0]erdma_0:1/RoCE [RO]; OOB eth0:10.0.0.1<0>\n";
    let d = doctor::diagnose(on_erdma).unwrap();
    let f = find(&d, "nccl-version-known-bad");
    assert_eq!((f.line, f.severity), (1, Verdict::Fail));
    assert!(f.cause.contains("this log shows eRDMA"), "{}", f.cause);
    assert!(fix(f).contains("nvidia-nccl-cu13==2.30.7"));
    let on_mlx5 = "NCCL version 2.28.7+cuda12.9\nw:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.0.0.1<0>\n";
    let d = doctor::diagnose(on_mlx5).unwrap();
    let f = find(&d, "nccl-version-known-bad");
    assert_eq!(f.severity, Verdict::Warn, "harmless off eRDMA");
    assert!(f.cause.contains("harmless elsewhere"));
    let good = doctor::diagnose("NCCL version 2.30.7+cuda13.0\nerdma_0\n").unwrap();
    assert!(!good.has("nccl-version-known-bad"));
    // A word that merely contains the vendor's prefix is not a device.
    let d =
        doctor::diagnose("NCCL version 2.28.9\nsee https://example.com/nonerdma_docs\n").unwrap();
    assert_eq!(find(&d, "nccl-version-known-bad").severity, Verdict::Warn);
}

// 10. Collective watchdog timeouts.
#[test]
fn watchdog_timeout_names_op_and_the_silent_rank() {
    let d = diag("torch-watchdog-timeout.log");
    let f = find(&d, "torch-watchdog-timeout");
    assert_eq!((f.line, f.occurrences), (1, 4));
    assert!(f.cause.contains("ALLREDUCE (SeqNum 1580)"), "{}", f.cause);
    assert!(f.cause.contains("600000 ms"));
    assert!(
        f.cause.contains("timed out in this log: 0, 1, 3"),
        "{}",
        f.cause
    );
    assert!(
        f.cause.contains("rank(s) 2 did not time out"),
        "{}",
        f.cause
    );
    for needle in [
        "NET/IB : Using",
        "--counters",
        "TORCH_NCCL_TRACE_BUFFER_SIZE",
    ] {
        assert!(fix(f).contains(needle), "{needle}");
    }
    // All ranks present: no suspect named.
    let all = "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, OpType=BROADCAST, NumelIn=1, NumelOut=1, Timeout(ms)=1000) ran for 1001 milliseconds before timing out.\n\
               [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, OpType=BROADCAST, NumelIn=1, NumelOut=1, Timeout(ms)=1000) ran for 1002 milliseconds before timing out.\n";
    let d = doctor::diagnose(all).unwrap();
    let f = find(&d, "torch-watchdog-timeout");
    assert!(!f.cause.contains("did not time out"), "{}", f.cause);
    assert!(f.cause.contains("BROADCAST"));
}
