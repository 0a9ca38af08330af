//! Pod facts by exec: what one `sh -c POD_PROBE_SCRIPT` prints in a worker, parsed into memlock, IPC_LOCK,
//! device and NCCL checks (a healthy worker, the runbook's broken one, a minimal container, a failed exec).

use probe::Verdict;
use probe::facts::LimitValue;
use probe::preflight::{self, ClusterSnapshot, PodFacts, PreflightPolicy};

mod preflight_common;
use preflight_common::node;

/// What `sh -c POD_PROBE_SCRIPT` prints in a healthy eRDMA worker (Ray image, hostNetwork,
/// `aliyun/erdma: 1`, IPC_LOCK added: CapEff has bit 14).
const GOOD_WORKER: &str = "\
### limits
Limit                     Soft Limit           Hard Limit           Units
Max cpu time              unlimited            unlimited            seconds
Max locked memory         unlimited            unlimited            bytes
Max address space         unlimited            unlimited            bytes
### ulimit-l
unlimited
### status
CapPrm:\t00000000a80465fb
CapEff:\t00000000a80465fb
### dev-infiniband
rdma_cm
uverbs0
### sys-infiniband
erdma_0
### nccl
nvidia-nccl-cu13 2.30.7
### end
";

/// The runbook's broken worker: containerd's 64 KiB memlock, no IPC_LOCK, the device plugin
/// mounted nothing (hostNetwork still shows erdma_0 in sysfs), torch 2.11's NCCL 2.28.9.
const BROKEN_WORKER: &str = "\
### limits
Limit                     Soft Limit           Hard Limit           Units
Max locked memory         65536                65536                bytes
### ulimit-l
64
### status
CapPrm:\t00000000a80425fb
CapEff:\t00000000a80425fb
### dev-infiniband
ls: cannot access '/dev/infiniband': No such file or directory
### sys-infiniband
erdma_0
### nccl
nvidia-nccl-cu13 2.28.9
### end
";

fn checks_of(p: PodFacts) -> Vec<(String, Verdict, String, String)> {
    let snap = ClusterSnapshot {
        nodes: vec![node("a", "8", Some("400")), node("b", "8", Some("400"))],
        pods: vec![p],
    };
    preflight::evaluate(&snap, &PreflightPolicy::default())
        .checks
        .into_iter()
        .filter(|c| c.subject.starts_with("ray/"))
        .map(|c| (c.id, c.verdict, c.summary, c.fix.unwrap_or_default()))
        .collect()
}

fn check<'a>(
    cs: &'a [(String, Verdict, String, String)],
    id: &str,
) -> &'a (String, Verdict, String, String) {
    cs.iter()
        .find(|c| c.0 == id)
        .unwrap_or_else(|| panic!("no {id} in {cs:?}"))
}

#[test]
fn pod_probe_script_of_a_healthy_worker() {
    assert_eq!(preflight::POD_PROBE_COMMAND[..2], ["sh", "-c"]);
    assert!(preflight::POD_PROBE_SCRIPT.contains("/proc/self/limits"));
    let req = vec!["aliyun/erdma=1".to_string()];
    let p = PodFacts::from_pod_probe(
        "ray",
        "worker-0",
        Some("cn-beijing.10.0.5.75"),
        &req,
        GOOD_WORKER,
    );
    assert_eq!(p.memlock, Some(LimitValue::Unlimited));
    assert_eq!(p.cap_ipc_lock, Some(true));
    assert_eq!(p.dev_infiniband, vec!["rdma_cm", "uverbs0"]);
    assert_eq!(p.rdma_devices, vec!["erdma_0"]);
    assert_eq!(p.nccl_version.as_deref(), Some("2.30.7"));
    assert!(p.unreadable.is_empty(), "{:?}", p.unreadable);
    let cs = checks_of(p);
    assert!(cs.iter().all(|c| c.1 == Verdict::Ok), "{cs:?}");
    assert_eq!(check(&cs, "pod-devices").2, "devices: erdma_0");
}

#[test]
fn pod_probe_script_of_the_broken_worker() {
    let req = vec!["aliyun/erdma=1".to_string()];
    let p = PodFacts::from_pod_probe(
        "ray",
        "worker-1",
        Some("cn-beijing.10.0.5.76"),
        &req,
        BROKEN_WORKER,
    );
    assert_eq!(p.memlock, Some(LimitValue::Bytes(65536)));
    assert_eq!(p.cap_ipc_lock, Some(false));
    assert!(p.dev_infiniband.is_empty());
    assert!(
        p.unreadable.is_empty(),
        "absent /dev/infiniband is a fact: {:?}",
        p.unreadable
    );
    let cs = checks_of(p);
    let m = check(&cs, "pod-memlock");
    assert_eq!(m.1, Verdict::Fail);
    assert!(
        m.3.contains("On node cn-beijing.10.0.5.76") && m.3.contains("LimitMEMLOCK=infinity"),
        "{}",
        m.3
    );
    assert_eq!(check(&cs, "pod-ipc-lock").1, Verdict::Warn);
    let d = check(&cs, "pod-devices");
    assert_eq!(d.1, Verdict::Fail);
    assert!(d.2.contains("sysfs lists erdma_0"), "{}", d.2);
    assert!(
        d.3.contains("requests aliyun/erdma=1") && d.3.contains("cn-beijing.10.0.5.76"),
        "{}",
        d.3
    );
    let n = check(&cs, "pod-nccl");
    assert_eq!(n.1, Verdict::Fail);
    assert!(n.3.contains("nvidia-nccl-cu13==2.30.7"), "{}", n.3);
    // The same pod without any RDMA request: the fix says to request one.
    let p = PodFacts::from_pod_probe("ray", "worker-1", None, &[], BROKEN_WORKER);
    let cs = checks_of(p);
    assert!(
        check(&cs, "pod-devices")
            .3
            .contains("requests no RDMA resource")
    );
}

#[test]
fn pod_probe_in_a_minimal_container() {
    // No /proc/self/limits readable, no python3, no CapEff line, and the exec cut short: every
    // missing fact is named, and the readable ones still count (`ulimit -l` prints KiB).
    let out = "\
Welcome to the banner of a login shell
### limits
cat: /proc/self/limits: Permission denied
### ulimit-l
8192
### status
### dev-infiniband
uverbs0
### sys-infiniband
rdmap16s27
### nccl
sh: 1: python3: not found
";
    let p = PodFacts::from_pod_probe("ray", "w", None, &["vpc.amazonaws.com/efa=4".into()], out);
    assert_eq!(p.memlock, Some(LimitValue::Bytes(8192 * 1024)));
    assert_eq!(p.cap_ipc_lock, None);
    assert_eq!(p.nccl_version, None);
    assert_eq!(p.rdma_devices, vec!["rdmap16s27"]);
    assert!(
        p.unreadable.iter().any(|u| u.contains("end marker")),
        "{:?}",
        p.unreadable
    );
    assert!(
        p.unreadable.iter().any(|u| u.contains("CAP_IPC_LOCK")),
        "{:?}",
        p.unreadable
    );
    let cs = checks_of(p);
    assert_eq!(check(&cs, "pod-memlock").1, Verdict::Fail);
    assert_eq!(check(&cs, "pod-devices").1, Verdict::Ok);
    let probe = check(&cs, "pod-probe");
    assert_eq!(probe.1, Verdict::Warn);
    assert!(probe.3.contains("rdmakit probe --json"));
    // NCCL that is bad on eRDMA, in a pod with EFA devices only: a warning that says so.
    let p = PodFacts {
        nccl_version: Some("2.28.7".into()),
        rdma_devices: vec!["rdmap16s27".into()],
        dev_infiniband: vec!["uverbs0".into()],
        memlock: Some(LimitValue::Unlimited),
        namespace: "ray".into(),
        name: "efa".into(),
        ..Default::default()
    };
    let cs = checks_of(p);
    let n = check(&cs, "pod-nccl");
    assert_eq!(n.1, Verdict::Warn);
    assert!(n.2.contains("no eRDMA device in this pod"), "{}", n.2);
}

#[test]
fn pod_facts_json_stays_compatible() {
    let old = r#"{"namespace":"d","name":"p","node":null,"memlock":{"kind":"unlimited"},"cap_ipc_lock":true,"dev_infiniband":["uverbs0"],"rdma_devices":[],"nccl_version":null}"#;
    let p: PodFacts = serde_json::from_str(old).unwrap();
    assert!(p.requested_rdma.is_empty() && p.unreadable.is_empty());
    let back = serde_json::to_string(&p).unwrap();
    assert!(!back.contains("requested_rdma"), "{back}");
    let q = PodFacts::from_pod_probe("d", "p", None, &["claim:rdma".into()], BROKEN_WORKER);
    let again: PodFacts = serde_json::from_str(&serde_json::to_string(&q).unwrap()).unwrap();
    assert_eq!(again, q);
}

#[test]
fn pod_probe_script_runs_in_sh_here() {
    // The script is real shell: run it on this machine the way the CLI runs it in a pod.
    let [sh, flag, script] = preflight::POD_PROBE_COMMAND;
    let out = std::process::Command::new(sh)
        .args([flag, script])
        .output()
        .expect("sh runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let parsed = preflight::parse_pod_probe(&stdout);
    assert!(parsed.complete, "{stdout}");
    let p = PodFacts::from_pod_probe("local", "host", None, &[], &stdout);
    assert!(p.memlock.is_some(), "{stdout}");
    assert!(p.cap_ipc_lock.is_some(), "{stdout}");
    let nccl = parsed.nccl.unwrap_or_default();
    assert!(
        !nccl.contains("SyntaxError") && !nccl.contains("IndentationError"),
        "the embedded Python must parse: {nccl}"
    );
}

/// An exec that failed (nothing came back) says nothing about the devices: pod-devices is a warning that
/// points at pod-probe, not a failure claiming the plugin injected nothing.
#[test]
fn a_probe_that_read_nothing_does_not_fail_the_devices() {
    let req = vec!["aliyun/erdma=1".to_string()];
    let mut p = PodFacts::from_pod_probe("ray", "worker-0", Some("cn-beijing.10.0.5.75"), &req, "");
    p.unreadable.push("exec: connection refused".into());
    assert!(
        p.unreadable
            .iter()
            .any(|u| u.starts_with("/dev/infiniband")),
        "{:?}",
        p.unreadable
    );
    let cs = checks_of(p);
    let d = check(&cs, "pod-devices");
    assert_eq!(d.1, Verdict::Warn, "{d:?}");
    assert!(d.2.contains("not read"), "{d:?}");
    assert_eq!(check(&cs, "pod-probe").1, Verdict::Warn, "{cs:?}");
    assert!(
        cs.iter().all(|c| c.1 != Verdict::Fail),
        "nothing read, nothing failed: {cs:?}"
    );
}
