//! Cluster preflight verdicts and report rendering.

use std::collections::BTreeMap;
use std::path::PathBuf;

use probe::facts::LimitValue;
use probe::preflight::{self, ClusterSnapshot, NodeInfo, PodFacts, PreflightPolicy};
use probe::report::{self, Report};
use probe::{HostFacts, ProbeOptions, Verdict, doctor};

fn node(name: &str, gpu: &str, erdma: Option<&str>) -> NodeInfo {
    let mut capacity = BTreeMap::new();
    capacity.insert("nvidia.com/gpu".to_string(), gpu.to_string());
    capacity.insert("cpu".to_string(), "256".to_string());
    if let Some(e) = erdma {
        capacity.insert("aliyun/erdma".to_string(), e.to_string());
    }
    let mut labels = BTreeMap::new();
    labels.insert(
        "aliyun.accelerator/nvidia_name".to_string(),
        "NVIDIA-RTX-PRO-5000-72GB-Blackwell".to_string(),
    );
    NodeInfo {
        name: name.into(),
        capacity: capacity.clone(),
        allocatable: capacity,
        labels,
        ready: true,
        unschedulable: false,
        dra_rdma_devices: vec![],
    }
}

fn pod(name: &str, memlock: LimitValue, nccl: &str) -> PodFacts {
    PodFacts {
        namespace: "default".into(),
        name: name.into(),
        node: Some("cn-beijing.10.0.5.75".into()),
        memlock: Some(memlock),
        cap_ipc_lock: Some(true),
        dev_infiniband: vec!["rdma_cm".into(), "uverbs0".into()],
        rdma_devices: vec!["erdma_0".into()],
        nccl_version: Some(nccl.into()),
        requested_rdma: vec!["aliyun/erdma=1".into()],
        unreadable: vec![],
    }
}

#[test]
fn two_erdma_gpu_nodes_pass() {
    let snap = ClusterSnapshot {
        nodes: vec![
            node("cn-beijing.10.0.5.75", "8", Some("400")),
            node("cn-beijing.10.0.5.76", "8", Some("400")),
            NodeInfo {
                name: "cpu-node".into(),
                ready: true,
                ..Default::default()
            },
        ],
        pods: vec![
            pod(
                "ray-erdma-cluster-gpu-erdma-worker-nldp2",
                LimitValue::Unlimited,
                "2.30.7",
            ),
            pod(
                "ray-erdma-cluster-gpu-erdma-worker-zttzj",
                LimitValue::Unlimited,
                "2.30.7",
            ),
        ],
    };
    let r = preflight::evaluate(
        &snap,
        &PreflightPolicy {
            workers: Some(2),
            ..Default::default()
        },
    );
    assert_eq!(r.verdict, Verdict::Ok, "{:#?}", r.checks);
    assert_eq!(r.nodes[0].gpus, 8);
    assert_eq!(r.nodes[0].rdma, 400);
    assert_eq!(r.nodes[0].rdma_resources, vec!["aliyun/erdma"]);
    assert!(r.nodes[0].eligible);
    assert!(!r.nodes[2].eligible);
    assert_eq!(
        r.nodes[0].gpu_model.as_deref(),
        Some("NVIDIA-RTX-PRO-5000-72GB-Blackwell")
    );
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["verdict"], "ok");
    let t = report::nodes_table(&r);
    assert!(
        t.contains("cn-beijing.10.0.5.76") && t.contains("400") && t.contains("aliyun/erdma"),
        "{t}"
    );
}

#[test]
fn fewer_than_two_rdma_gpu_nodes_fail() {
    let snap = ClusterSnapshot {
        nodes: vec![
            node("a", "8", Some("400")),
            node("b", "8", None),
            node("c", "8", Some("0")),
        ],
        pods: vec![],
    };
    let r = preflight::evaluate(
        &snap,
        &PreflightPolicy {
            workers: Some(2),
            ..Default::default()
        },
    );
    assert_eq!(r.verdict, Verdict::Fail);
    let c = r.checks.iter().find(|c| c.id == "rdma-gpu-nodes").unwrap();
    assert_eq!(c.verdict, Verdict::Fail);
    assert!(c.summary.starts_with("1 node(s)"));
    let b = r.checks.iter().find(|c| c.subject == "b").unwrap();
    assert_eq!(b.verdict, Verdict::Warn);
    assert!(
        b.fix
            .as_deref()
            .unwrap()
            .contains("alibabacloud-erdma-agent")
    );
    let w = r.checks.iter().find(|c| c.id == "worker-replicas").unwrap();
    assert!(w.fix.as_deref().unwrap().contains("at most 1"));
}

#[test]
fn dra_devices_and_shared_device_plugin_count_as_rdma() {
    let mut a = node("a", "2", None);
    a.dra_rdma_devices = vec!["erdma_0".into()];
    let mut b = node("b", "0", None);
    b.capacity.insert("nvidia.com/gpu-h800".into(), "8".into());
    b.capacity
        .insert("rdma/rdma_shared_device_a".into(), "1k".into());
    let r = preflight::evaluate(
        &ClusterSnapshot {
            nodes: vec![a, b],
            pods: vec![],
        },
        &PreflightPolicy::default(),
    );
    assert_eq!(r.nodes[0].rdma, 1);
    assert_eq!(r.nodes[1].gpus, 8);
    assert_eq!(r.nodes[1].rdma, 1000);
    assert_eq!(r.verdict, Verdict::Ok);
}

#[test]
fn pod_facts_fail_on_memlock_devices_and_bad_nccl() {
    let mut bad = pod("w0", LimitValue::Bytes(65536), "2.28.9");
    bad.dev_infiniband.clear();
    bad.cap_ipc_lock = Some(false);
    let snap = ClusterSnapshot {
        nodes: vec![node("a", "8", Some("400")), node("b", "8", Some("400"))],
        pods: vec![bad, pod("w1", LimitValue::Unlimited, "2.30.7")],
    };
    let r = preflight::evaluate(&snap, &PreflightPolicy::default());
    let ids: Vec<(&str, Verdict)> = r
        .checks
        .iter()
        .filter(|c| c.subject == "default/w0")
        .map(|c| (c.id.as_str(), c.verdict))
        .collect();
    assert!(ids.contains(&("pod-memlock", Verdict::Fail)), "{ids:?}");
    assert!(ids.contains(&("pod-ipc-lock", Verdict::Warn)));
    assert!(ids.contains(&("pod-devices", Verdict::Fail)));
    assert!(ids.contains(&("pod-nccl", Verdict::Fail)));
    assert!(r.checks.iter().any(|c| c.id == "pod-nccl-mismatch"));
    assert_eq!(r.verdict, Verdict::Fail);
}

#[test]
fn pod_facts_from_probe() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/erdma");
    let f = HostFacts::gather(&ProbeOptions::new(root)).unwrap();
    let p = PodFacts::from_host_facts("default", "w", Some("n"), &f);
    assert_eq!(p.memlock, Some(LimitValue::Unlimited));
    assert_eq!(p.cap_ipc_lock, Some(true));
    assert_eq!(p.rdma_devices, vec!["erdma_0"]);
    assert_eq!(p.nccl_version.as_deref(), Some("2.30.7"));
}

#[test]
fn quantities() {
    assert_eq!(preflight::parse_quantity("8"), Some(8));
    assert_eq!(preflight::parse_quantity("1k"), Some(1000));
    assert_eq!(preflight::parse_quantity("2Ki"), Some(2048));
    assert_eq!(preflight::parse_quantity("500m"), None);
    assert_eq!(preflight::parse_quantity(""), None);
    assert_eq!(preflight::parse_quantity("99999999999999999999"), None);
}

#[test]
fn reports_render_as_table_and_json() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/erdma-broken");
    let f = HostFacts::gather(&ProbeOptions::new(root)).unwrap();
    let r = Report::from(&f);
    assert_eq!(r.verdict, Verdict::Fail);
    let table = r.render_table();
    assert!(table.starts_with("rdmakit probe ("), "{table}");
    assert!(table.contains("FAIL"));
    assert!(table.contains("memlock"));
    let json: serde_json::Value = serde_json::from_str(&r.to_json().unwrap()).unwrap();
    assert_eq!(json["verdict"], "fail");
    assert!(
        json["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["id"] == "memlock" && i["verdict"] == "fail")
    );
    assert_eq!(r.rows().len(), r.items.len());

    let d =
        doctor::diagnose("x NCCL WARN Call to ibv_create_qp failed with error Unknown error -12\n")
            .unwrap();
    let dr = Report::from(&d);
    assert_eq!(dr.items[0].subject, "line 1");
    assert!(
        dr.render_table_width(100)
            .contains("memlock-create-qp-enomem")
    );
    let empty = Report::from(&doctor::diagnose("").unwrap());
    assert!(empty.render_table().contains("NCCL_DEBUG=INFO"));
}

#[test]
fn result_tables() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let n = probe::parse::parse_nccl_tests(
        &std::fs::read_to_string(dir.join("logs/nccl-tests-erdma.log")).unwrap(),
    )
    .unwrap();
    let t = report::nccl_tests_table(&n);
    assert!(
        t.contains("536870912") && t.contains("Avg bus bandwidth: 9.02337 GB/s"),
        "{t}"
    );
    let r = probe::parse::parse_rdt(
        &std::fs::read_to_string(dir.join("logs/rdt-demo-ok.log")).unwrap(),
    )
    .unwrap();
    let t = report::rdt_table(&r);
    assert!(
        t.contains("11.84") && t.contains("RDT over eRDMA: OK"),
        "{t}"
    );
    let p = probe::parse::parse_perftest(
        &std::fs::read_to_string(dir.join("ib_write_bw.txt")).unwrap(),
    )
    .unwrap();
    let t = report::perftest_table(&p);
    assert!(t.starts_with("RDMA_Write BW Test on rxe0"), "{t}");
    assert!(t.contains("1101.22"));
}

/// Seed 002's DeviceClass for eRDMA under DRANET, as its two CEL selectors.
fn erdma_device_class() -> Vec<String> {
    vec![
        r#"device.driver == "dra.net" && device.attributes["dra.net"].rdma == true"#.into(),
        r#""alibaba.dra.net" in device.attributes && device.attributes["alibaba.dra.net"]["erdma"] == true"#.into(),
    ]
}

/// The devices of tests/fixtures/resourceslices-erdma.json.
fn erdma_slices() -> Vec<probe::preflight::DraDevice> {
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/resourceslices-erdma.json"),
    )
    .expect("tests/fixtures/resourceslices-erdma.json is readable");
    probe::preflight::parse_resource_slices(&text).expect("the fixture parses")
}

#[test]
fn dra_gap_names_the_missing_attribute() {
    let devices = erdma_slices();
    assert_eq!(devices.len(), 3);
    // v1beta1 `basic` attributes without a domain belong to the driver's.
    assert_eq!(
        devices[2]
            .attributes
            .get("dra.net/rdmaDevice")
            .map(String::as_str),
        Some("erdma_0")
    );
    assert_eq!(devices[0].node, "cn-beijing.10.0.5.75");
    let terms = probe::preflight::parse_cel_selector(&erdma_device_class()[1]);
    assert_eq!(terms.len(), 2, "{terms:?}");
    let gaps = probe::preflight::dra_selector_gaps(&erdma_device_class(), &devices);
    assert_eq!(gaps.len(), 1, "{gaps:#?}");
    assert_eq!(gaps[0].selector, 1);
    assert_eq!(gaps[0].term, "alibaba.dra.net/erdma == true");
    assert!(
        gaps[0].reason.contains("other values: eth1=false"),
        "{}",
        gaps[0].reason
    );
    // With the attribute published as true on one node, the class is satisfiable.
    let mut fixed = devices.clone();
    fixed[2]
        .attributes
        .insert("alibaba.dra.net/erdma".into(), "true".into());
    assert!(probe::preflight::dra_selector_gaps(&erdma_device_class(), &fixed).is_empty());
    // Node .75 publishes no alibaba.dra.net attribute at all: only .76 can satisfy the class.
    let only_75: Vec<_> = devices[..2].to_vec();
    let gaps = probe::preflight::dra_selector_gaps(&erdma_device_class(), &only_75);
    let terms: Vec<&str> = gaps.iter().map(|g| g.term.as_str()).collect();
    assert_eq!(
        terms,
        vec![
            "\"alibaba.dra.net\" in device.attributes",
            "alibaba.dra.net/erdma == true"
        ]
    );
    assert!(
        gaps[1]
            .reason
            .contains("no published device has the attribute")
    );
}

#[test]
fn dra_gap_when_no_single_device_satisfies_all() {
    use probe::preflight::{DraDevice, dra_selector_gaps};
    let dev = |name: &str, k: &str| DraDevice {
        node: "n1".into(),
        driver: "dra.net".into(),
        name: name.into(),
        attributes: [(k.to_string(), "true".to_string())].into(),
    };
    let devices = vec![
        dev("eth0", "dra.net/rdma"),
        dev("eth1", "alibaba.dra.net/erdma"),
    ];
    let gaps = dra_selector_gaps(&erdma_device_class(), &devices);
    assert_eq!(gaps.len(), 1, "{gaps:#?}");
    assert!(
        gaps[0].reason.contains("no single device"),
        "{}",
        gaps[0].reason
    );
    assert!(gaps[0].device.is_some());
    // Not JSON, or not ResourceSlices: typed errors that say what to pass.
    let e = probe::preflight::parse_resource_slices("nope").unwrap_err();
    assert!(
        e.to_string().contains("kubectl get resourceslices -o json"),
        "{e}"
    );
    assert!(probe::preflight::parse_resource_slices("{\"kind\":\"Pod\"}").is_err());
}

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

#[test]
fn device_class_checks_name_the_missing_attribute() {
    // Seed 002's DeviceClass as `kubectl get deviceclass erdma.alibaba.dra.net -o json` prints it.
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let class = std::fs::read_to_string(dir.join("deviceclass-erdma.json")).unwrap();
    let (name, selectors) = preflight::parse_device_class(&class).unwrap();
    assert_eq!(name, "erdma.alibaba.dra.net");
    assert_eq!(selectors, erdma_device_class());
    let slices = std::fs::read_to_string(dir.join("resourceslices-erdma.json")).unwrap();
    let mut devices = preflight::parse_resource_slices(&slices).unwrap();
    let cs = preflight::device_class_checks(&name, &selectors, &devices);
    assert_eq!(cs.len(), 1, "{cs:?}");
    assert_eq!(
        (cs[0].id.as_str(), cs[0].verdict),
        ("dra-device-class", Verdict::Fail)
    );
    assert_eq!(cs[0].subject, "DeviceClass erdma.alibaba.dra.net");
    assert!(
        cs[0].summary.contains("selector 2")
            && cs[0].summary.contains("alibaba.dra.net/erdma == true"),
        "{}",
        cs[0].summary
    );
    assert!(cs[0].fix.as_deref().unwrap_or("").contains("stays pending"));
    devices[2]
        .attributes
        .insert("alibaba.dra.net/erdma".into(), "true".into());
    let cs = preflight::device_class_checks(&name, &selectors, &devices);
    assert_eq!(cs[0].verdict, Verdict::Ok, "{cs:?}");
    assert!(
        cs[0]
            .summary
            .starts_with("1 device(s) satisfy every selector"),
        "{}",
        cs[0].summary
    );
    // Wrong input: typed errors that say what to pass.
    let e = preflight::parse_device_class(&slices).unwrap_err();
    assert!(e.to_string().contains("not a DeviceClass"), "{e}");
    assert!(
        preflight::parse_device_class("{")
            .unwrap_err()
            .to_string()
            .contains("kubectl get deviceclass")
    );
}

/// The built-in aliyun-erdma-dra profile's second selector tests the key first
/// (`"erdma" in device.attributes["alibaba.dra.net"]`): that is the attribute alibaba.dra.net/erdma, not a
/// domain called `erdma` (which no device has, so the profile's own class was reported unsatisfiable).
#[test]
fn key_in_domain_is_the_attribute_not_a_domain() {
    use probe::preflight::{DraDevice, SelectorTerm, dra_selector_gaps, parse_cel_selector};
    let profile_selectors = vec![
        r#"device.driver == "dra.net" && device.attributes["dra.net"].rdma == true"#.to_string(),
        r#""alibaba.dra.net" in device.attributes && "erdma" in device.attributes["alibaba.dra.net"] && device.attributes["alibaba.dra.net"]["erdma"] == true"#.to_string(),
    ];
    let terms = parse_cel_selector(&profile_selectors[1]);
    assert!(
        terms.contains(&SelectorTerm::Domain("alibaba.dra.net".into())),
        "{terms:?}"
    );
    assert!(
        !terms.contains(&SelectorTerm::Domain("erdma".into())),
        "{terms:?}"
    );
    assert!(
        terms.contains(&SelectorTerm::Attribute {
            key: "alibaba.dra.net/erdma".into(),
            value: None
        }),
        "{terms:?}"
    );
    let device = |erdma: Option<&str>| {
        let mut attributes: std::collections::BTreeMap<String, String> = [
            ("dra.net/rdma", "true"),
            ("dra.net/rdmaDevice", "erdma_0"),
            ("alibaba.dra.net/instanceType", "ecs.gn8is-2x.8xlarge"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        if let Some(v) = erdma {
            attributes.insert("alibaba.dra.net/erdma".into(), v.into());
        }
        DraDevice {
            node: "n1".into(),
            driver: "dra.net".into(),
            name: "erdma-0".into(),
            attributes,
        }
    };
    assert!(dra_selector_gaps(&profile_selectors, &[device(Some("true"))]).is_empty());
    let gaps = dra_selector_gaps(&profile_selectors, &[device(None)]);
    assert!(
        gaps.iter()
            .any(|g| g.term.contains("alibaba.dra.net/erdma")),
        "{gaps:#?}"
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

/// The aliyun-erdma-dra profile's DeviceClass selectors (the key is tested before it is read).
fn profile_device_class() -> Vec<String> {
    vec![
        r#"device.driver == "dra.net" && device.attributes["dra.net"].rdma == true"#.into(),
        r#""alibaba.dra.net" in device.attributes && "erdma" in device.attributes["alibaba.dra.net"] && device.attributes["alibaba.dra.net"]["erdma"] == true"#.into(),
    ]
}

#[test]
fn select_devices_per_node_and_names_what_a_partial_device_lacks() {
    use probe::preflight::{DraDevice, select_devices};
    let dev = |node: &str, name: &str, attrs: &[(&str, &str)]| DraDevice {
        node: node.into(),
        driver: "dra.net".into(),
        name: name.into(),
        attributes: attrs
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect(),
    };
    let good = |node: &str| {
        dev(
            node,
            "erdma-0",
            &[
                ("dra.net/rdma", "true"),
                ("dra.net/rdmaDevice", "erdma_0"),
                ("alibaba.dra.net/instanceType", "ecs.gn8is-2x.8xlarge"),
                ("alibaba.dra.net/erdma", "true"),
            ],
        )
    };
    let devices = vec![
        good("n1"),
        dev("n1", "eth0", &[("dra.net/rdma", "false")]),
        // DRANET could not tell n2's adapter is eRDMA: the domain is there, the erdma attribute is not.
        dev(
            "n2",
            "erdma-0",
            &[
                ("dra.net/rdma", "true"),
                ("dra.net/rdmaDevice", "erdma_0"),
                ("alibaba.dra.net/instanceType", "ecs.gn8is-2x.8xlarge"),
            ],
        ),
        // Another driver's device is not the class's business.
        DraDevice {
            driver: "gpu.nvidia.com".into(),
            ..good("n3")
        },
    ];
    let s = select_devices(&profile_device_class(), &devices);
    assert_eq!(s.driver.as_deref(), Some("dra.net"));
    // The existence test of alibaba.dra.net/erdma is folded into its comparison.
    assert_eq!(
        s.terms,
        vec![
            "device.driver == \"dra.net\"",
            "dra.net/rdma == true",
            "\"alibaba.dra.net\" in device.attributes",
            "alibaba.dra.net/erdma == true",
        ]
    );
    assert_eq!(s.attributes, vec!["dra.net/rdma", "alibaba.dra.net/erdma"]);
    assert!(s.unchecked.is_empty());
    assert_eq!(s.selected.len(), 1, "{s:#?}");
    assert_eq!(s.selected["n1"], vec!["erdma-0 (erdma_0)"]);
    assert_eq!(s.lacking.len(), 1, "{s:#?}");
    assert_eq!(s.lacking[0].device, "n2/erdma-0 (erdma_0)");
    assert_eq!(s.lacking[0].missing, vec!["alibaba.dra.net/erdma == true"]);
    let (able, short) = s.nodes_with(1);
    assert_eq!(able, vec!["n1 (1: erdma-0 (erdma_0))"]);
    assert!(short.is_empty());
    let (able, short) = s.nodes_with(2);
    assert!(able.is_empty());
    assert_eq!(short, vec!["n1 has 1 of 2"]);
    // A selector of another shape is not judged here, and says so.
    let odd = vec![
        r#"device.capacity["dra.net"].bandwidth.compareTo(quantity("100G")) >= 0"#.to_string(),
    ];
    let s = select_devices(&odd, &devices);
    assert_eq!(s.unchecked, odd);
    assert!(s.selected.is_empty() && s.lacking.is_empty());
}

#[test]
fn select_devices_reads_the_slices_fixture() {
    let devices = erdma_slices();
    let s = probe::preflight::select_devices(&profile_device_class(), &devices);
    // No device publishes alibaba.dra.net/erdma == true: nothing selectable, the RDMA ones lacking it.
    assert!(s.selected.is_empty(), "{s:#?}");
    let lacking: Vec<&str> = s.lacking.iter().map(|l| l.device.as_str()).collect();
    assert_eq!(
        lacking,
        vec![
            "cn-beijing.10.0.5.75/eth1 (erdma_0)",
            "cn-beijing.10.0.5.76/eth1 (erdma_0)"
        ],
        "{s:#?}"
    );
}
