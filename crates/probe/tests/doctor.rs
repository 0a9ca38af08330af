//! Every signature of the knowledge base against fixture logs with real-world noise.

use std::collections::BTreeSet;
use std::path::PathBuf;

use probe::Verdict;
use probe::doctor::{self, KnowledgeBase, SIGNATURES};

mod logs_common;
use logs_common::{diag, find, fix, ids, log};

#[test]
fn builtin_knowledge_base_compiles_and_ids_are_unique() {
    let kb = KnowledgeBase::builtin().expect("compiles");
    let ids: Vec<&str> = kb.signatures().map(|s| s.id).collect();
    let unique: BTreeSet<&str> = ids.iter().copied().collect();
    assert_eq!(ids.len(), unique.len(), "duplicate signature ids");
    assert!(ids.len() >= 40, "knowledge base shrank to {}", ids.len());
    for s in SIGNATURES {
        if s.severity >= Verdict::Warn {
            assert!(!s.fix.is_empty(), "{} is a problem but has no fix", s.id);
        }
        assert!(!s.cause.is_empty(), "{} has no cause", s.id);
    }
}

#[test]
fn memlock_enomem_is_diagnosed_with_the_containerd_fix() {
    let d = diag("nccl-memlock.log");
    let f = find(&d, "memlock-create-qp-enomem");
    assert_eq!(f.line, 11);
    assert_eq!(f.occurrences, 2);
    assert_eq!(f.lines, vec![11, 14]);
    assert_eq!(f.severity, Verdict::Fail);
    assert!(
        f.evidence
            .contains("ibv_create_qp failed with error Unknown error -12")
    );
    let fix = fix(f);
    assert!(fix.contains("LimitMEMLOCK=infinity"), "{fix}");
    assert!(fix.contains("10-memlock.conf"), "{fix}");
    assert_eq!(find(&d, "memlock-create-cq-enomem").line, 15);
    assert_eq!(find(&d, "memlock-reg-mr-enomem").line, 16);
    // The summary lines at the end: the errno-less form is a fallback, reported once.
    assert_eq!(find(&d, "create-qp-failed").line, 26);
    assert_eq!(find(&d, "nccl-unhandled-system-error").line, 23);
    // Positive findings are reported too, in order.
    assert_eq!(find(&d, "nccl-net-ib-using").line, 7);
    assert!(
        find(&d, "nccl-net-ib-using")
            .cause
            .contains("[0]erdma_0:1/RoCE")
    );
    assert_eq!(find(&d, "nccl-ib-hca-env").cause, "NCCL_IB_HCA=erdma_0");
    let lines: Vec<usize> = d.findings.iter().map(|f| f.line).collect();
    let mut sorted = lines.clone();
    sorted.sort_unstable();
    assert_eq!(lines, sorted, "findings are in order of first appearance");
    assert_eq!(d.verdict, Verdict::Fail);
    assert!(!d.has("nccl-tcp-fallback"));
}

#[test]
fn netinit_segfault_needs_the_signal_nearby_and_escalates_bad_version() {
    let d = diag("ray-segfault-netinit.log");
    let f = find(&d, "nccl-netinit-segfault");
    assert_eq!(f.line, 10);
    assert!(fix(f).contains("nvidia-nccl-cu13==2.30.7"));
    let v = find(&d, "nccl-version-known-bad");
    assert_eq!(v.line, 4);
    assert_eq!(v.severity, Verdict::Fail, "escalated: the log shows erdma");
    assert!(v.cause.contains("2.28.9"));
    assert!(d.has("segfault"));
    // Without a SIGSEGV nearby, a mere mention of ncclNetInit is not a crash.
    let calm = doctor::diagnose("NCCL INFO ncclNetInit done\nall good\n").expect("kb");
    assert!(!calm.has("nccl-netinit-segfault"));
}

#[test]
fn ucx_on_erdma_points_to_nccl_transport() {
    let d = diag("nixl-ucx-erdma.log");
    let ud = find(&d, "ucx-ud-unsupported");
    assert_eq!(ud.line, 4);
    assert!(ud.cause.contains("erdma_0:1"), "{}", ud.cause);
    assert!(fix(ud).contains("tensor_transport=\"nccl\""));
    assert_eq!(find(&d, "ucx-srq-unsupported").line, 5);
    assert_eq!(find(&d, "extended-verbs-unsupported").line, 6);
    assert_eq!(find(&d, "ucx-no-am-transport").line, 7);
    assert!(find(&d, "ucx-transport-unavailable").cause.contains("rc_x"));
}

#[test]
fn rdt_timeout_names_the_missing_receive_thread() {
    let d = diag("ray-rdt-timeout.log");
    let f = find(&d, "rdt-object-not-found");
    assert_eq!(f.line, 13);
    assert!(f.cause.contains("60.0s"));
    assert!(fix(f).contains("enable_tensor_transport=True"));
    assert_eq!(ids(&d), vec!["rdt-object-not-found"]);
}

#[test]
fn leftover_unique_id_store_actor() {
    let d = diag("ray-uniqueid-leftover.log");
    let s = find(&d, "ray-uniqueid-store-leftover");
    assert_eq!(s.line, 12);
    assert_eq!(s.severity, Verdict::Warn);
    assert!(fix(s).contains("ray.kill"));
    assert_eq!(d.verdict, Verdict::Warn);
}

#[test]
fn rdt_checksum_mismatch() {
    let d = diag("rdt-checksum-mismatch.log");
    let f = find(&d, "rdt-checksum-bad");
    assert_eq!(f.line, 4);
    assert_eq!(f.severity, Verdict::Fail);
    assert!(!d.has("rdt-iteration-ok"));
}

#[test]
fn successful_rdt_run_reports_positives_only() {
    let d = diag("rdt-demo-ok.log");
    for id in [
        "nccl-bootstrap",
        "nccl-version",
        "nccl-ib-hca-env",
        "nccl-net-ib-using",
        "nccl-using-network-ib",
        "nccl-gdr-disabled",
        "nccl-channel-net-ib",
        "nccl-qp-created",
        "rdt-iteration-ok",
        "rdt-demo-ok",
    ] {
        find(&d, id);
    }
    assert_eq!(
        find(&d, "nccl-qp-created").cause,
        "NCCL created RC queue pairs on erdma_0"
    );
    assert!(find(&d, "nccl-gdr-disabled").cause.contains("erdma_0"));
    assert_eq!(find(&d, "rdt-iteration-ok").occurrences, 3);
    assert_eq!(find(&d, "rdt-demo-ok").line, 20);
    assert_eq!(find(&d, "nccl-version").cause, "NCCL 2.30.7+cuda13.0");
    assert!(d.verdict <= Verdict::Info, "{:?}", d.verdict);
}

#[test]
fn silent_tcp_fallback_is_a_failure() {
    let d = diag("nccl-tcp-fallback.log");
    let f = find(&d, "nccl-tcp-fallback");
    assert_eq!(f.line, 8);
    assert_eq!(f.severity, Verdict::Fail);
    assert_eq!(find(&d, "nccl-ib-no-device").line, 7);
    assert_eq!(find(&d, "ibverbs-no-provider").line, 5);
    assert_eq!(
        find(&d, "ibverbs-couldnt-load-driver").severity,
        Verdict::Info
    );
    assert_eq!(find(&d, "nccl-channel-net-socket").occurrences, 2);
    // Ordered: the fallback finding sits between line 7 and line 11 findings.
    let pos = |id: &str| d.findings.iter().position(|f| f.id == id).unwrap();
    assert!(pos("nccl-ib-no-device") < pos("nccl-tcp-fallback"));
    assert!(pos("nccl-tcp-fallback") < pos("nccl-channel-net-socket"));
}

#[test]
fn tcp_ab_run_is_only_info() {
    let d = diag("nccl-ab-tcp-run.log");
    let f = find(&d, "nccl-tcp-fallback");
    assert_eq!(f.severity, Verdict::Info);
    assert_eq!(f.line, 4);
    assert!(d.has("nccl-ib-disabled-env"));
    assert!(d.verdict <= Verdict::Info);
}

#[test]
fn qp_transition_timeout_points_at_the_gid_index() {
    let d = diag("nccl-modify-qp-timeout.log");
    let t = find(&d, "modify-qp-timeout");
    assert_eq!(t.line, 8);
    assert!(t.evidence.contains("next state RTR"));
    assert!(fix(t).contains("NCCL_IB_GID_INDEX"));
    assert_eq!(find(&d, "nccl-gid-index-env").cause, "NCCL_IB_GID_INDEX=3");
    assert!(find(&d, "nccl-channel-net-ib").cause.contains("/GDRDMA"));
    // The summary line is a fallback: reported, but the WARN line before it is the cause.
    assert_eq!(find(&d, "nccl-unhandled-system-error").line, 12);
}

#[test]
fn qp_transition_unreachable_and_no_device() {
    let d = diag("nccl-modify-qp-unreachable.log");
    let f = find(&d, "modify-qp-unreachable");
    assert_eq!(f.line, 4);
    assert!(fix(f).contains("eRDMA profile: 1"));
    let d = diag("nccl-modify-qp-no-device.log");
    let f = find(&d, "modify-qp-no-device");
    assert_eq!(f.line, 3);
    assert!(fix(f).contains("NCCL_IB_HCA=^mlx5_3"));
}

#[test]
fn retry_exceeded_and_remote_error() {
    let d = diag("nccl-retry-exceeded.log");
    let f = find(&d, "nccl-retry-exceeded");
    assert_eq!(f.line, 4);
    assert!(fix(f).contains("NCCL_IB_GID_INDEX"));
    // Both GIDs are IPv4-mapped: not a GID-type mismatch.
    assert!(!d.has("nccl-gid-type-mismatch"));
    let d = diag("nccl-remote-error.log");
    assert_eq!(find(&d, "nccl-remote-error").line, 3);
}

#[test]
fn missing_verbs_userspace() {
    let d = diag("nccl-libibverbs-missing.log");
    assert_eq!(find(&d, "nccl-libibverbs-missing").line, 3);
    assert_eq!(find(&d, "ibverbs-no-devices").line, 6);
    assert_eq!(find(&d, "ibverbs-no-devices").occurrences, 2);
    assert_eq!(find(&d, "nccl-tcp-fallback").severity, Verdict::Fail);
}

#[test]
fn buildkit_and_registry() {
    let d = diag("buildkit-dockerhub-timeout.log");
    let f = find(&d, "dockerhub-unreachable");
    assert_eq!((f.line, f.occurrences), (6, 2));
    assert_eq!(ids(&d), vec!["dockerhub-unreachable"]);
    let d = diag("buildkit-erdma-apt.log");
    assert_eq!(find(&d, "erdma-apt-unreachable").line, 5);
    assert_eq!(ids(&d), vec!["erdma-apt-unreachable"]);
    let d = diag("buildkit-push-scope.log");
    let f = find(&d, "registry-insufficient-scope");
    assert_eq!((f.line, f.occurrences), (9, 2));
    assert!(fix(f).contains("repository you own"));
    let d = diag("buildkit-push-unauthorized.log");
    assert_eq!(find(&d, "registry-unauthorized").line, 4);
    assert_eq!(ids(&d), vec!["registry-unauthorized"]);
    let d = diag("buildkit-disk.log");
    assert_eq!(find(&d, "buildkit-no-space").line, 4);
    assert!(fix(find(&d, "buildkit-no-space")).contains("200 GiB"));
    assert_eq!(find(&d, "k8s-ephemeral-eviction").line, 8);
    let d = diag("buildkit-ok.log");
    assert_eq!(
        find(&d, "buildkit-pushed").cause,
        "image pushed: registry.example.com/team/ray-llm:2.57.0-py312-cu130-erdma"
    );
    assert_eq!(d.verdict, Verdict::Ok);
}

/// A collage on purpose: logs of different hosts and failures pasted together (what users do in
/// an issue) still give each failure once, in order, with line numbers of the whole text.
#[test]
fn several_failures_in_one_log() {
    let parts = [
        "nccl-modify-qp-timeout.log",
        "nccl-gid-type-mismatch.log",
        "buildkit-push-scope.log",
        "ray-uniqueid-leftover.log",
    ];
    let text: String = parts.iter().map(|p| log(p)).collect();
    let d = doctor::diagnose(&text).unwrap();
    let offset = |i: usize| -> usize { parts[..i].iter().map(|p| log(p).lines().count()).sum() };
    assert_eq!(find(&d, "modify-qp-timeout").line, 8);
    assert_eq!(find(&d, "nccl-gid-type-mismatch").line, offset(1) + 6);
    assert_eq!(find(&d, "registry-insufficient-scope").line, offset(2) + 9);
    assert_eq!(find(&d, "ray-uniqueid-store-leftover").line, offset(3) + 12);
    // Two NCCL versions in one text: both reported, as separate findings.
    let versions: Vec<&str> = d
        .findings
        .iter()
        .filter(|f| f.id == "nccl-version")
        .map(|f| f.cause.as_str())
        .collect();
    assert_eq!(
        versions,
        vec!["NCCL 2.26.2+cuda12.8", "NCCL 2.27.7+cuda12.9"]
    );
}

#[test]
fn scheduling_events() {
    let d = diag("k8s-events.log");
    let causes: Vec<&str> = d
        .findings
        .iter()
        .filter(|f| f.id == "k8s-insufficient-resource")
        .map(|f| f.cause.as_str())
        .collect();
    // Only the first capture of a line is used; the line names aliyun/erdma first.
    assert_eq!(causes, vec!["no node has free aliyun/erdma"]);
    assert_eq!(find(&d, "k8s-node-selector-mismatch").line, 9);
}

#[test]
fn nccl_tests_logs() {
    let d = diag("nccl-tests-erdma.log");
    assert!(find(&d, "nccl-tests-avg-busbw").cause.contains("9.02337"));
    assert!(d.has("nccl-shm-disable-env"));
    assert!(d.has("nccl-net-ib-using"));
    assert!(!d.has("nccl-tests-wrong-values"));
    let d = diag("nccl-tests-wrong.log");
    let f = find(&d, "nccl-tests-wrong-values");
    assert_eq!(f.line, 10);
    assert!(f.cause.contains("12 wrong"));
}

#[test]
fn worker_verification_output() {
    let d = diag("worker-verify.log");
    assert_eq!(
        find(&d, "ibv-hca-id").cause,
        "RDMA device erdma_0 is visible to verbs"
    );
    assert_eq!(find(&d, "ibv-port-active").line, 13);
    assert_eq!(d.verdict, Verdict::Ok);
    // One failure per log: the 64 KiB memlock on a healthy device, and a port that is down.
    let d = diag("worker-verify-memlock.log");
    let m = find(&d, "ulimit-memlock-limited");
    assert_eq!(m.line, 8);
    assert!(m.cause.contains("64 KiB"));
    assert!(!d.has("ibv-port-down"));
    assert_eq!(d.verdict, Verdict::Fail);
    let d = diag("worker-verify-port-down.log");
    assert_eq!(
        find(&d, "ibv-port-down").cause,
        "port state is DOWN, not ACTIVE"
    );
    assert!(!d.has("ulimit-memlock-limited"));
}

#[test]
fn every_signature_has_a_fixture() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/logs");
    let mut seen = BTreeSet::new();
    for e in std::fs::read_dir(&dir).unwrap() {
        let text = std::fs::read_to_string(e.unwrap().path()).unwrap();
        for f in doctor::diagnose(&text).unwrap().findings {
            seen.insert(f.id);
        }
    }
    let missing: Vec<&str> = SIGNATURES
        .iter()
        .map(|s| s.id)
        .filter(|id| !seen.contains(*id))
        .collect();
    assert!(
        missing.is_empty(),
        "signatures without a fixture: {missing:?}"
    );
    assert!(seen.contains("nccl-tcp-fallback"));
}

#[test]
fn reader_handles_crlf_ansi_and_invalid_utf8() {
    let mut bytes = b"\x1b[33m(Producer pid=1)\x1b[0m NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.0.0.1<0>\r\n".to_vec();
    bytes.extend_from_slice(b"garbage \xff\xfe here\n");
    bytes.extend_from_slice(
        b"misc/ibvwrap.cc:130 NCCL WARN Call to ibv_create_qp failed with error Unknown error -12",
    );
    let d = doctor::diagnose_reader(std::io::Cursor::new(bytes)).unwrap();
    assert_eq!(d.lines_read, 3);
    let f = find(&d, "nccl-net-ib-using");
    assert!(!f.evidence.contains('\x1b'));
    assert!(f.cause.contains("[0]mlx5_0:1/IB"));
    assert_eq!(find(&d, "memlock-create-qp-enomem").line, 3);
}

#[test]
fn empty_and_unknown_logs() {
    let d = doctor::diagnose("").unwrap();
    assert_eq!(d.lines_read, 0);
    assert!(d.findings.is_empty());
    assert_eq!(d.verdict, Verdict::Ok);
    let d = doctor::diagnose("hello\nworld\n").unwrap();
    assert_eq!(d.lines_read, 2);
    assert!(d.findings.is_empty());
}

/// An MPIJob launcher's failures as Open MPI, nccl-tests and NCCL print them (issue 24: the tier's launcher
/// runs its script, so these reach the doctor): each named with its cause, and NCCL's /dev/shm ENOSPC is not
/// a build that ran out of disk. The lines are the shapes the tier's stand-ins print (tests/cluster/emulator/
/// emu/mpi.py: Open MPI 4's slot message, nccl-tests' CUDACHECK line, NCCL's shmutils warnings).
#[test]
fn launcher_failures_of_mpirun_nccl_tests_and_shm() {
    let d = diag("mpijob-launcher-failures.log");
    assert!(find(&d, "mpi-not-enough-slots").cause.contains("8 ranks"));
    assert!(fix(find(&d, "mpi-not-enough-slots")).contains("slotsPerWorker"));
    assert!(fix(find(&d, "nccl-tests-no-gpu")).contains("nvidia.com/gpu"));
    let shm = find(&d, "nccl-shm-too-small");
    assert!(
        shm.cause.contains("/dev/shm/nccl-5113cd to 9637892 bytes"),
        "{}",
        shm.cause
    );
    assert!(fix(shm).contains("medium: Memory"));
    assert!(!d.has("buildkit-no-space"), "{:?}", ids(&d));
}
