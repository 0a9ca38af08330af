//! Cluster preflight verdicts and report rendering.

use std::path::PathBuf;

use probe::facts::LimitValue;
use probe::preflight::{self, ClusterSnapshot, NodeInfo, PodFacts, PreflightPolicy};
use probe::report::{self, Report};
use probe::{HostFacts, ProbeOptions, Verdict, doctor};

mod preflight_common;
use preflight_common::node;

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
