//! Every lint rule: a manifest that triggers it and one that does not, plus the seed manifests.

use k8s_render::lint::{self, Finding, LintOptions};
use k8s_render::manifest::{self, Document, Severity};

fn parse(yaml: &str) -> Vec<Document> {
    manifest::parse_str("lint.yaml", yaml).expect("test YAML parses")
}

fn fixture(name: &str) -> Vec<Document> {
    let path = format!("{}/tests/fixtures/check/{name}", env!("CARGO_MANIFEST_DIR"));
    manifest::read_path(&path).expect("fixture parses")
}

fn run(yaml: &str, options: &LintOptions) -> Vec<Finding> {
    lint::lint(&parse(yaml), options)
}

fn with_rule<'f>(findings: &'f [Finding], rule: &str) -> Vec<&'f Finding> {
    findings.iter().filter(|f| f.rule == rule).collect()
}

fn erdma() -> LintOptions {
    LintOptions {
        rdma_nodes: Some(2),
        device_pattern: Some("erdma_*".into()),
        ..LintOptions::default()
    }
}

/// A well-formed eRDMA worker pod; tests replace one line to break it.
const GOOD_POD: &str = r#"
apiVersion: v1
kind: Pod
metadata:
  name: nccl-check-0
spec:
  hostNetwork: true
  hostIPC: true
  dnsPolicy: ClusterFirstWithHostNet
  containers:
  - name: nccl
    image: registry.example.com/ray-llm:2.57.0-py312-cu130-erdma
    command: ["sleep", "infinity"]
    env:
    - {name: NCCL_IB_HCA, value: erdma_0}
    - {name: NCCL_SOCKET_IFNAME, value: eth0}
    - {name: NCCL_IB_DISABLE, value: "0"}
    resources:
      limits: {nvidia.com/gpu: 1, aliyun/erdma: 1}
    securityContext:
      capabilities:
        add: [IPC_LOCK]
"#;

fn broken(from: &str, to: &str) -> String {
    assert!(GOOD_POD.contains(from), "fixture lacks {from:?}");
    GOOD_POD.replacen(from, to, 1)
}

#[test]
fn good_pod_and_seed_manifests_are_clean() {
    assert_eq!(run(GOOD_POD, &erdma()), Vec::new());
    for name in ["ray-cluster-erdma.yaml", "vke-rdma-pod.yaml"] {
        let f = lint::lint(&fixture(name), &erdma());
        assert!(
            f.is_empty(),
            "{name}: {}",
            f.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    // The DRANET benchmark MPIJob is clean when linted as a benchmark.
    let bench = LintOptions {
        benchmark: true,
        ..erdma()
    };
    assert_eq!(
        lint::lint(&fixture("dranet-mpijob.yaml"), &bench),
        Vec::new()
    );
}

#[test]
fn rule_list_is_complete_and_documented() {
    let rules = lint::rules();
    assert!(rules.len() >= 22, "{}", rules.len());
    for r in &rules {
        assert!(!r.why.is_empty() && !r.summary.is_empty(), "{}", r.id);
    }
}

#[test]
fn ray_head_num_gpus() {
    let cluster = |params: &str, limits: &str| {
        format!(
            r#"
apiVersion: ray.io/v1
kind: RayCluster
metadata: {{name: demo}}
spec:
  headGroupSpec:
    rayStartParams: {params}
    template:
      spec:
        containers:
        - name: ray-head
          image: rayproject/ray:2.57.0
          resources: {{limits: {limits}}}
"#
        )
    };
    let f = run(&cluster(r#"{num-cpus: "0"}"#, "{cpu: 4}"), &erdma());
    let hits = with_rule(&f, "ray-head-num-gpus");
    assert_eq!(hits.len(), 1, "{f:#?}");
    assert_eq!(
        hits[0].location.path.to_string(),
        "spec.headGroupSpec.rayStartParams"
    );
    assert_eq!(hits[0].severity, Severity::Error);
    assert!(hits[0].fix.contains("num-gpus: \"0\""));
    assert!(
        with_rule(
            &run(&cluster(r#"{num-gpus: "0"}"#, "{cpu: 4}"), &erdma()),
            "ray-head-num-gpus"
        )
        .is_empty()
    );
    // A head with its own GPUs (seed 001) may advertise them.
    assert!(
        with_rule(
            &run(&cluster("{}", "{nvidia.com/gpu-h800: 8}"), &erdma()),
            "ray-head-num-gpus"
        )
        .is_empty()
    );
}

#[test]
fn ray_start_params_not_string() {
    let yaml = |v: &str| {
        format!(
            "apiVersion: ray.io/v1\nkind: RayCluster\nmetadata: {{name: d}}\nspec:\n  headGroupSpec:\n    rayStartParams: {{num-gpus: {v}, num-cpus: \"0\"}}\n    template: {{spec: {{containers: [{{name: h, image: ray}}]}}}}\n"
        )
    };
    let f = run(&yaml("0"), &erdma());
    let hits = with_rule(&f, "ray-start-params-not-string");
    assert_eq!(hits.len(), 1);
    assert_eq!(
        hits[0].location.path.to_string(),
        "spec.headGroupSpec.rayStartParams.num-gpus"
    );
    assert_eq!(hits[0].location.line, Some(6));
    assert!(hits[0].fix.contains("num-gpus: \"0\""));
    assert!(
        with_rule(
            &run(&yaml("\"0\""), &erdma()),
            "ray-start-params-not-string"
        )
        .is_empty()
    );
}

#[test]
fn rdma_missing_ipc_lock() {
    let f = run(&broken("add: [IPC_LOCK]", "add: [NET_ADMIN]"), &erdma());
    let hits = with_rule(&f, "rdma-missing-ipc-lock");
    assert_eq!(hits.len(), 1, "{f:#?}");
    assert_eq!(
        hits[0].location.path.to_string(),
        "spec.containers[0].securityContext"
    );
    // Seed 001 requests shared RDMA devices without IPC_LOCK on head and workers.
    let seed = lint::lint(
        &fixture("raycluster-shared-device.yaml"),
        &LintOptions::default(),
    );
    assert_eq!(
        with_rule(&seed, "rdma-missing-ipc-lock").len(),
        2,
        "{seed:#?}"
    );
    assert!(with_rule(&run(GOOD_POD, &erdma()), "rdma-missing-ipc-lock").is_empty());
}

#[test]
fn rdma_missing_ipc_lock_through_dra_claim() {
    let docs = fixture("dranet-mpijob.yaml");
    let mut value = docs[2].value.clone();
    let caps = value
        .pointer_mut("/spec/mpiReplicaSpecs/Worker/template/spec/containers/0/securityContext")
        .expect("fixture has a securityContext");
    *caps = serde_json::json!({});
    let doc = Document::from_value("mpijob.yaml", 0, value).expect("object");
    let f = lint::lint(
        &[doc],
        &LintOptions {
            benchmark: true,
            ..erdma()
        },
    );
    assert_eq!(with_rule(&f, "rdma-missing-ipc-lock").len(), 1, "{f:#?}");
}

#[test]
fn rdma_ipc_lock_without_device() {
    // Seed 004's pod with its vke.volcengine.com/infiniband-rdma request swapped for a CPU one.
    let docs = fixture("vke-rdma-pod.yaml");
    let mut value = docs[0].value.clone();
    let limits = &mut value["spec"]["containers"][0]["resources"]["limits"];
    limits
        .as_object_mut()
        .expect("limits")
        .remove("vke.volcengine.com/infiniband-rdma")
        .expect("the fixture requests the RDMA resource");
    limits["cpu"] = serde_json::json!("1");
    let doc = Document::from_value("vke.yaml", 0, value).expect("object");
    let clean = |f: &[Finding], what: &str| {
        assert!(
            with_rule(f, "rdma-ipc-lock-without-device").is_empty(),
            "{what}: {f:#?}"
        );
    };
    let vke = LintOptions {
        device_pattern: Some("mlx5_*".into()),
        extra_rdma_resources: vec!["vke.volcengine.com/infiniband-rdma".into()],
        ..LintOptions::default()
    };
    let f = lint::lint(std::slice::from_ref(&doc), &vke);
    let hits = with_rule(&f, "rdma-ipc-lock-without-device");
    assert_eq!(hits.len(), 1, "{f:#?}");
    assert_eq!(hits[0].severity, Severity::Error);
    assert_eq!(
        hits[0].location.path.to_string(),
        "spec.containers[0].resources.limits"
    );
    assert!(
        hits[0]
            .fix
            .contains("vke.volcengine.com/infiniband-rdma: \"1\""),
        "{hits:#?}"
    );
    // Not judged: a container that adds ALL (a debug shell), or asks for huge pages (DPDK) or a device
    // the linter has no name for (an SR-IOV VF may be the NIC); nor a DRA profile's fix names a resource.
    for (edit, what) in [
        (
            serde_json::json!({"cpu": "1", "hugepages-2Mi": "1Gi"}),
            "huge pages",
        ),
        (
            serde_json::json!({"cpu": "1", "nvidia.com/sriov_ib": "1"}),
            "an unknown device",
        ),
    ] {
        let mut v = doc.value.clone();
        v["spec"]["containers"][0]["resources"]["limits"] = edit;
        let d = Document::from_value("vke.yaml", 0, v).expect("object");
        clean(&lint::lint(&[d], &vke), what);
    }
    let mut v = doc.value.clone();
    v["spec"]["containers"][0]["securityContext"]["capabilities"]["add"] =
        serde_json::json!(["ALL"]);
    let d = Document::from_value("vke.yaml", 0, v).expect("object");
    clean(&lint::lint(&[d], &vke), "ALL");
    let dra = LintOptions {
        device_pattern: Some("mlx5_*".into()),
        ..LintOptions::default()
    };
    let f = lint::lint(std::slice::from_ref(&doc), &dra);
    let hits = with_rule(&f, "rdma-ipc-lock-without-device");
    assert_eq!(hits.len(), 1, "{f:#?}");
    assert!(hits[0].fix.contains("resourceClaim"), "{hits:#?}");
    // Without a profile IPC_LOCK may be for mlock or hugepages: not judged.
    clean(&lint::lint(&[doc], &LintOptions::default()), "no profile");
    // The unedited pod, the eRDMA pod and a DRA worker (its device comes from a claim) are clean.
    clean(
        &lint::lint(&fixture("vke-rdma-pod.yaml"), &vke),
        "the VKE pod",
    );
    clean(&run(GOOD_POD, &erdma()), "the eRDMA pod");
    clean(
        &lint::lint(&fixture("dranet-mpijob.yaml"), &erdma()),
        "the DRA worker",
    );
}

#[test]
fn host_network_dns_policy() {
    let f = run(
        &broken("  dnsPolicy: ClusterFirstWithHostNet\n", ""),
        &erdma(),
    );
    let hits = with_rule(&f, "host-network-dns-policy");
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].location.path.to_string(), "spec.hostNetwork");
    let f = run(
        &broken(
            "dnsPolicy: ClusterFirstWithHostNet",
            "dnsPolicy: ClusterFirst",
        ),
        &erdma(),
    );
    assert_eq!(
        with_rule(&f, "host-network-dns-policy")[0]
            .location
            .path
            .to_string(),
        "spec.dnsPolicy"
    );
    assert!(with_rule(&run(GOOD_POD, &erdma()), "host-network-dns-policy").is_empty());
}

fn worker_group(replicas: u32, max: u32, anti_affinity: bool) -> String {
    let affinity = if anti_affinity {
        "        affinity:\n          podAntiAffinity:\n            requiredDuringSchedulingIgnoredDuringExecution:\n            - labelSelector: {matchLabels: {app: w}}\n              topologyKey: kubernetes.io/hostname\n"
    } else {
        ""
    };
    format!(
        r#"apiVersion: ray.io/v1
kind: RayCluster
metadata: {{name: demo}}
spec:
  headGroupSpec:
    rayStartParams: {{num-cpus: "0", num-gpus: "0"}}
    template: {{spec: {{containers: [{{name: ray-head, image: ray}}]}}}}
  workerGroupSpecs:
  - groupName: gpu
    replicas: {replicas}
    minReplicas: {replicas}
    maxReplicas: {max}
    template:
      spec:
        hostNetwork: true
        hostIPC: true
        dnsPolicy: ClusterFirstWithHostNet
{affinity}        containers:
        - name: ray-worker
          image: ray
          resources: {{limits: {{nvidia.com/gpu: 1, aliyun/erdma: 1}}}}
          securityContext: {{capabilities: {{add: [IPC_LOCK]}}}}
"#
    )
}

#[test]
fn host_network_replicas_exceed_nodes() {
    let f = run(&worker_group(3, 4, true), &erdma());
    let hits = with_rule(&f, "host-network-replicas-exceed-nodes");
    let paths: Vec<String> = hits.iter().map(|h| h.location.path.to_string()).collect();
    assert_eq!(
        paths,
        [
            "spec.workerGroupSpecs[0].maxReplicas",
            "spec.workerGroupSpecs[0].replicas"
        ]
    );
    assert!(hits[1].message.contains("worker group \"gpu\""));
    assert!(
        with_rule(
            &run(&worker_group(2, 2, true), &erdma()),
            "host-network-replicas-exceed-nodes"
        )
        .is_empty()
    );
    // Without a node count the rule cannot judge.
    assert!(
        with_rule(
            &run(&worker_group(3, 4, true), &LintOptions::default()),
            "host-network-replicas-exceed-nodes"
        )
        .is_empty()
    );
}

#[test]
fn host_network_no_spread() {
    let f = run(&worker_group(2, 2, false), &erdma());
    let hits = with_rule(&f, "host-network-no-spread");
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].severity, Severity::Warning);
    assert_eq!(
        hits[0].location.path.to_string(),
        "spec.workerGroupSpecs[0].template.spec.affinity"
    );
    assert!(
        with_rule(
            &run(&worker_group(2, 2, true), &erdma()),
            "host-network-no-spread"
        )
        .is_empty()
    );
    assert!(
        with_rule(
            &run(&worker_group(1, 1, false), &erdma()),
            "host-network-no-spread"
        )
        .is_empty()
    );
}

#[test]
fn nccl_ib_hca_without_rdma() {
    let f = run(
        &broken(
            "{nvidia.com/gpu: 1, aliyun/erdma: 1}",
            "{nvidia.com/gpu: 1}",
        ),
        &erdma(),
    );
    let hits = with_rule(&f, "nccl-ib-hca-without-rdma");
    assert_eq!(hits.len(), 1);
    assert_eq!(
        hits[0].location.path.to_string(),
        "spec.containers[0].env[0].value"
    );
    assert!(with_rule(&run(GOOD_POD, &erdma()), "nccl-ib-hca-without-rdma").is_empty());
    // The MPIJob launcher exports NCCL_IB_HCA with -x; it is checked on the workers (which hold a claim).
    let f = lint::lint(&fixture("dranet-mpijob.yaml"), &erdma());
    assert!(
        with_rule(&f, "nccl-ib-hca-without-rdma").is_empty(),
        "{f:#?}"
    );
}

#[test]
fn nccl_ib_hca_mismatch() {
    let f = run(&broken("value: erdma_0}", "value: mlx5_0}"), &erdma());
    let hits = with_rule(&f, "nccl-ib-hca-mismatch");
    assert_eq!(hits.len(), 1);
    assert!(
        hits[0]
            .message
            .contains("\"mlx5_0\" does not match the device pattern erdma_*")
    );
    assert!(hits[0].fix.contains("erdma_0"));
    let mlx = LintOptions {
        device_pattern: Some("mlx5_*".into()),
        ..LintOptions::default()
    };
    assert_eq!(
        with_rule(&run(GOOD_POD, &mlx), "nccl-ib-hca-mismatch").len(),
        1
    );
    assert!(with_rule(&run(GOOD_POD, &erdma()), "nccl-ib-hca-mismatch").is_empty());
    // `erdma` is a prefix NCCL expands to erdma_0, erdma_1, ... (seed 002).
    let f = lint::lint(&fixture("dranet-mpijob.yaml"), &erdma());
    assert!(with_rule(&f, "nccl-ib-hca-mismatch").is_empty(), "{f:#?}");
}

#[test]
fn nccl_shm_disabled() {
    let f = lint::lint(&fixture("dranet-mpijob.yaml"), &erdma());
    let hits = with_rule(&f, "nccl-shm-disabled");
    assert_eq!(hits.len(), 1, "{f:#?}");
    assert_eq!(hits[0].severity, Severity::Warning);
    // Attributed to the launcher's mpirun line, which exports it to the workers.
    assert_eq!(
        hits[0].location.path.to_string(),
        "spec.mpiReplicaSpecs.Launcher.template.spec.containers[0].args[0]"
    );
    assert_eq!(hits[0].location.doc, 2);
    assert!(
        hits[0].message.contains(
            "(Worker replicas) gets NCCL_SHM_DISABLE=1 (exported by the launcher's mpirun -x)"
        ),
        "{}",
        hits[0].message
    );
    let bench = LintOptions {
        benchmark: true,
        ..erdma()
    };
    assert!(
        with_rule(
            &lint::lint(&fixture("dranet-mpijob.yaml"), &bench),
            "nccl-shm-disabled"
        )
        .is_empty()
    );
}

#[test]
fn nccl_ib_disabled() {
    let yaml = broken(
        "{name: NCCL_IB_DISABLE, value: \"0\"}",
        "{name: NCCL_IB_DISABLE, value: \"1\"}",
    );
    let f = run(&yaml, &erdma());
    let hits = with_rule(&f, "nccl-ib-disabled");
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].severity, Severity::Error);
    let bench = LintOptions {
        benchmark: true,
        ..erdma()
    };
    assert_eq!(
        with_rule(&run(&yaml, &bench), "nccl-ib-disabled")[0].severity,
        Severity::Warning
    );
    assert!(with_rule(&run(GOOD_POD, &erdma()), "nccl-ib-disabled").is_empty());
}

#[test]
fn nccl_known_bad_version() {
    let cmd = |pin: &str| {
        broken(
            r#"command: ["sleep", "infinity"]"#,
            &format!(r#"command: ["bash", "-c", "pip install {pin} && sleep infinity"]"#),
        )
    };
    for bad in ["nvidia-nccl-cu13==2.28.9", "nvidia-nccl-cu12==2.28.7"] {
        let f = run(&cmd(bad), &erdma());
        let hits = with_rule(&f, "nccl-known-bad-version");
        assert_eq!(hits.len(), 1, "{bad}: {f:#?}");
        assert_eq!(
            hits[0].location.path.to_string(),
            "spec.containers[0].command[2]"
        );
    }
    assert!(
        with_rule(
            &run(&cmd("nvidia-nccl-cu13==2.30.7"), &erdma()),
            "nccl-known-bad-version"
        )
        .is_empty()
    );
    // A Dockerfile kept in a ConfigMap is a string like any other.
    let cm = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: df}\ndata:\n  Dockerfile: |\n    FROM rayproject/ray-llm:2.57.0-py312-cu130\n    RUN pip install --no-cache-dir nvidia-nccl-cu13==2.28.9\n";
    assert_eq!(
        with_rule(&run(cm, &erdma()), "nccl-known-bad-version").len(),
        1
    );
}

#[test]
fn torch_bundled_bad_nccl_and_lint_text() {
    let bad = "FROM rayproject/ray-llm:2.57.0-py312-cu130\nRUN pip install torch==2.11.0\n";
    let f = lint::lint_text("Dockerfile", bad, &erdma());
    assert_eq!(f.len(), 1, "{f:#?}");
    assert_eq!(
        (f[0].rule, f[0].location.line),
        ("torch-bundled-bad-nccl", Some(2))
    );
    let good = "FROM x\nRUN pip install torch==2.11.0\nRUN pip install nvidia-nccl-cu13==2.30.7\n";
    assert!(lint::lint_text("Dockerfile", good, &erdma()).is_empty());
    let pinned_bad = "RUN pip install nvidia-nccl-cu13==2.28.9\n";
    assert_eq!(
        lint::lint_text("Dockerfile", pinned_bad, &erdma())[0].rule,
        "nccl-known-bad-version"
    );
}

#[test]
fn nccl_missing_dev_shm() {
    let f = run(&broken("  hostIPC: true\n", ""), &erdma());
    let hits = with_rule(&f, "nccl-missing-dev-shm");
    assert_eq!(hits.len(), 1);
    assert_eq!(
        hits[0].location.path.to_string(),
        "spec.containers[0].volumeMounts"
    );
    assert!(with_rule(&run(GOOD_POD, &erdma()), "nccl-missing-dev-shm").is_empty());
    // A memory-backed emptyDir at /dev/shm is the other accepted form (seeds 002 and 004).
    let f = lint::lint(&fixture("dranet-mpijob.yaml"), &erdma());
    assert!(with_rule(&f, "nccl-missing-dev-shm").is_empty(), "{f:#?}");
}

#[test]
fn privileged_instead_of_ipc_lock() {
    let f = run(
        &broken("capabilities:\n        add: [IPC_LOCK]", "privileged: true"),
        &erdma(),
    );
    let hits = with_rule(&f, "privileged-instead-of-ipc-lock");
    assert_eq!(hits.len(), 1);
    assert_eq!(
        hits[0].location.path.to_string(),
        "spec.containers[0].securityContext.privileged"
    );
    assert!(with_rule(&f, "rdma-missing-ipc-lock").is_empty());
    assert!(with_rule(&run(GOOD_POD, &erdma()), "privileged-instead-of-ipc-lock").is_empty());
}

#[test]
fn vke_mgpu_with_rdma_and_topology_mount() {
    let docs = fixture("vke-rdma-pod.yaml");
    let mut value = docs[0].value.clone();
    value["spec"]["containers"][0]["resources"]["limits"]["vke.volcengine.com/mgpu-memory"] =
        serde_json::json!(4096);
    value["spec"]["containers"][0]["volumeMounts"]
        .as_array_mut()
        .expect("mounts")
        .truncate(1);
    let doc = Document::from_value("vke.yaml", 0, value).expect("object");
    let f = lint::lint(&[doc], &LintOptions::default());
    let mgpu = with_rule(&f, "vke-mgpu-with-rdma");
    assert_eq!(mgpu.len(), 1, "{f:#?}");
    assert_eq!(
        mgpu[0].location.path.to_string(),
        "spec.containers[0].resources.limits[\"vke.volcengine.com/mgpu-memory\"]"
    );
    assert_eq!(with_rule(&f, "vke-missing-topology-mount").len(), 1);
    let clean = lint::lint(&fixture("vke-rdma-pod.yaml"), &LintOptions::default());
    assert!(clean.is_empty(), "{clean:#?}");
}

#[test]
fn ucx_nixl_on_erdma() {
    let cm = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: demo}\ndata:\n  demo.py: |\n    @ray.method(tensor_transport=\"nixl\")\n    def make(self): ...\n";
    let f = run(cm, &erdma());
    assert_eq!(with_rule(&f, "ucx-nixl-on-erdma").len(), 1);
    // On mlx5 NIXL is fine.
    let mlx = LintOptions {
        device_pattern: Some("mlx5_*".into()),
        ..LintOptions::default()
    };
    assert!(with_rule(&run(cm, &mlx), "ucx-nixl-on-erdma").is_empty());
    let ucx = broken(
        "- {name: NCCL_SOCKET_IFNAME, value: eth0}",
        "- {name: NCCL_SOCKET_IFNAME, value: eth0}\n    - {name: UCX_NET_DEVICES, value: \"erdma_0:1\"}",
    );
    let f = run(&ucx, &LintOptions::default());
    let hits = with_rule(&f, "ucx-nixl-on-erdma");
    assert_eq!(hits.len(), 1, "{f:#?}");
    assert_eq!(hits[0].severity, Severity::Warning);
    assert!(with_rule(&run(GOOD_POD, &erdma()), "ucx-nixl-on-erdma").is_empty());
}

#[test]
fn rdma_request_limit_mismatch() {
    let yaml = broken(
        "limits: {nvidia.com/gpu: 1, aliyun/erdma: 1}",
        "requests: {aliyun/erdma: 1, nvidia.com/gpu: 2}\n      limits: {nvidia.com/gpu: 1}",
    );
    let f = run(&yaml, &erdma());
    let paths: Vec<String> = with_rule(&f, "rdma-request-limit-mismatch")
        .iter()
        .map(|h| h.location.path.to_string())
        .collect();
    assert_eq!(
        paths,
        [
            "spec.containers[0].resources.requests[\"aliyun/erdma\"]",
            "spec.containers[0].resources.requests[\"nvidia.com/gpu\"]",
        ]
    );
    // Equal values written as string and number agree (seed 001 uses numbers).
    let same = broken(
        "limits: {nvidia.com/gpu: 1, aliyun/erdma: 1}",
        "requests: {aliyun/erdma: \"1\"}\n      limits: {nvidia.com/gpu: 1, aliyun/erdma: 1}",
    );
    assert!(with_rule(&run(&same, &erdma()), "rdma-request-limit-mismatch").is_empty());
}

#[test]
fn dra_claim_mismatch() {
    let docs = fixture("dranet-mpijob.yaml");
    let mut value = docs[2].value.clone();
    let worker = value
        .pointer_mut("/spec/mpiReplicaSpecs/Worker/template/spec")
        .expect("worker spec");
    worker["containers"][0]["resources"]["claims"] = serde_json::json!([{"name": "rdma"}]);
    let doc = Document::from_value("mpijob.yaml", 0, value).expect("object");
    let f = lint::lint(
        &[doc],
        &LintOptions {
            benchmark: true,
            ..erdma()
        },
    );
    let paths: Vec<String> = with_rule(&f, "dra-claim-mismatch")
        .iter()
        .map(|h| h.location.path.to_string())
        .collect();
    assert_eq!(
        paths,
        [
            "spec.mpiReplicaSpecs.Worker.template.spec.containers[0].resources.claims[0]",
            "spec.mpiReplicaSpecs.Worker.template.spec.resourceClaims[0]",
        ],
        "{f:#?}"
    );
    assert!(
        with_rule(
            &lint::lint(&fixture("dranet-mpijob.yaml"), &erdma()),
            "dra-claim-mismatch"
        )
        .is_empty()
    );
}

#[test]
fn nccl_socket_ifname_unset() {
    let f = run(
        &broken("    - {name: NCCL_SOCKET_IFNAME, value: eth0}\n", ""),
        &erdma(),
    );
    let hits = with_rule(&f, "nccl-socket-ifname-unset");
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].severity, Severity::Info);
    assert!(with_rule(&run(GOOD_POD, &erdma()), "nccl-socket-ifname-unset").is_empty());
}

#[test]
fn findings_are_sorted_displayable_and_serialisable() {
    let f = lint::lint(
        &fixture("raycluster-shared-device.yaml"),
        &LintOptions::default(),
    );
    assert!(f.len() >= 4, "{f:#?}");
    let mut sorted = f.clone();
    sorted.sort_by(|a, b| {
        (a.location.doc, &a.location.path).cmp(&(b.location.doc, &b.location.path))
    });
    assert_eq!(f, sorted);
    let text = f[0].to_string();
    assert!(text.starts_with("error[rdma-missing-ipc-lock] "), "{text}");
    assert!(
        text.contains("\n  why: ") && text.contains("\n  fix: "),
        "{text}"
    );
    let json = serde_json::to_value(&f[0]).expect("serialises");
    assert_eq!(json["rule"], "rdma-missing-ipc-lock");
    assert_eq!(json["severity"], "error");
    assert_eq!(
        json["path"],
        "spec.headGroupSpec.template.spec.containers[0].securityContext"
    );
    assert!(json["line"].is_u64());
}

const RDT_DEMO: &str = r#"import ray, torch
from ray.experimental.collective import create_collective_group

@ray.remote(num_gpus=1)
class Producer:
    @ray.method(tensor_transport="nccl")
    def make_tensor(self, n: int):
        return torch.ones(n, dtype=torch.float32, device="cuda")

@ray.remote(num_gpus=1, enable_tensor_transport=True)
class Consumer:
    def consume(self, tensor):
        return tensor.sum().item()

producer, consumer = Producer.remote(), Consumer.remote()
create_collective_group([producer, consumer], backend="nccl")
"#;

#[test]
fn rdt_receiver_missing_enable_tensor_transport() {
    assert!(lint::lint_text("rdt_nccl_demo.py", RDT_DEMO, &erdma()).is_empty());
    let bad = RDT_DEMO.replace(
        "@ray.remote(num_gpus=1, enable_tensor_transport=True)",
        "@ray.remote(num_gpus=1)",
    );
    let f = lint::lint_text("rdt_nccl_demo.py", &bad, &erdma());
    assert_eq!(f.len(), 1, "{f:#?}");
    assert_eq!(
        (f[0].rule, f[0].location.line),
        ("rdt-receiver-missing-enable-tensor-transport", Some(6))
    );
    // The same program kept in a ConfigMap is linted as a manifest string.
    let cm = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: rdt}}\ndata:\n  rdt_nccl_demo.py: {}\n",
        serde_json::Value::String(bad)
    );
    let f = run(&cm, &erdma());
    assert_eq!(
        with_rule(&f, "rdt-receiver-missing-enable-tensor-transport")[0]
            .location
            .path
            .to_string(),
        "data[\"rdt_nccl_demo.py\"]"
    );
}

#[test]
fn rdt_missing_collective_group() {
    let bad = RDT_DEMO.replace(
        "create_collective_group([producer, consumer], backend=\"nccl\")",
        "",
    );
    let bad = bad.replace(
        "from ray.experimental.collective import create_collective_group\n",
        "",
    );
    let f = lint::lint_text("rdt_nccl_demo.py", &bad, &erdma());
    assert_eq!(f.len(), 1, "{f:#?}");
    assert_eq!(f[0].rule, "rdt-missing-collective-group");
    // NIXL needs no NCCL group (but is its own finding on eRDMA).
    let nixl = bad.replace("tensor_transport=\"nccl\"", "tensor_transport=\"nixl\"");
    let rules: Vec<&str> = lint::lint_text("demo.py", &nixl, &erdma())
        .iter()
        .map(|f| f.rule)
        .collect();
    assert_eq!(rules, ["ucx-nixl-on-erdma"]);
}

#[test]
fn bad_nccl_pin_is_a_warning_on_other_vendors() {
    let mlx = LintOptions {
        device_pattern: Some("mlx5_*".into()),
        ..LintOptions::default()
    };
    let f = lint::lint_text(
        "Dockerfile",
        "RUN pip install nvidia-nccl-cu13==2.28.9\n",
        &mlx,
    );
    assert_eq!(
        (f[0].rule, f[0].severity),
        ("nccl-known-bad-version", Severity::Warning)
    );
    let f = lint::lint_text(
        "Dockerfile",
        "RUN pip install nvidia-nccl-cu13==2.28.9\n",
        &LintOptions::default(),
    );
    assert_eq!(f[0].severity, Severity::Error);
}

/// One finding of `rule`, on the path given, with the severity given.
fn only(findings: &[Finding], rule: &str, path: &str, severity: Severity) {
    let hits = with_rule(findings, rule);
    assert_eq!(hits.len(), 1, "{findings:#?}");
    assert_eq!(
        (hits[0].location.path.to_string().as_str(), hits[0].severity),
        (path, severity),
        "{}",
        hits[0]
    );
}

#[test]
fn ucx_all_devices_and_a_socket_ifname_that_selects_nothing() {
    let f = run(
        &broken(
            "    - {name: NCCL_IB_DISABLE, value: \"0\"}",
            "    - {name: NCCL_IB_DISABLE, value: \"0\"}\n    - {name: UCX_NET_DEVICES, value: all}",
        ),
        &LintOptions::default(),
    );
    only(
        &f,
        "ucx-net-devices-all",
        "spec.containers[0].env[3].value",
        Severity::Warning,
    );
    let f = run(&broken("value: eth0}", "value: \"^\"}"), &erdma());
    only(
        &f,
        "nccl-socket-ifname-excludes-nothing",
        "spec.containers[0].env[1].value",
        Severity::Warning,
    );
    assert!(
        with_rule(
            &run(GOOD_POD, &erdma()),
            "nccl-socket-ifname-excludes-nothing"
        )
        .is_empty()
    );
}

#[test]
fn mesh_sidecar_on_an_nccl_pod() {
    let f = run(
        &broken(
            "  name: nccl-check-0",
            "  name: nccl-check-0\n  annotations: {sidecar.istio.io/inject: \"true\"}",
        ),
        &erdma(),
    );
    only(
        &f,
        "service-mesh-sidecar-on-nccl-pod",
        r#"metadata.annotations["sidecar.istio.io/inject"]"#,
        Severity::Error,
    );
    assert!(
        f.iter()
            .any(|x| x.fix.contains("sidecar.istio.io/inject: \"false\""))
    );
    // Opted out: nothing.
    let f = run(
        &broken(
            "  name: nccl-check-0",
            "  name: nccl-check-0\n  labels: {sidecar.istio.io/inject: \"false\"}",
        ),
        &erdma(),
    );
    assert!(with_rule(&f, "service-mesh-sidecar-on-nccl-pod").is_empty());
    // A proxy container already injected into a worker group's template.
    let docs = fixture("ray-cluster-erdma.yaml");
    let mut v = docs[0].value.clone();
    let containers = v
        .pointer_mut("/spec/workerGroupSpecs/0/template/spec/containers")
        .and_then(|c| c.as_array_mut())
        .expect("worker containers");
    let proxy_index = containers.len();
    containers.push(serde_json::json!({"name": "istio-proxy", "image": "istio/proxyv2"}));
    let doc = manifest::Document::from_value("rc.yaml", 0, v).expect("doc");
    let f = lint::lint(&[doc], &erdma());
    only(
        &f,
        "service-mesh-sidecar-on-nccl-pod",
        &format!("spec.workerGroupSpecs[0].template.spec.containers[{proxy_index}]"),
        Severity::Error,
    );
}

#[test]
fn gid_index_other_than_the_profiles() {
    let options = LintOptions {
        gid_index: Some(1),
        ..erdma()
    };
    let with_gid = |v: &str| {
        broken(
            "    - {name: NCCL_IB_DISABLE, value: \"0\"}",
            &format!(
                "    - {{name: NCCL_IB_DISABLE, value: \"0\"}}\n    - {{name: NCCL_IB_GID_INDEX, value: \"{v}\"}}"
            ),
        )
    };
    let f = run(&with_gid("3"), &options);
    only(
        &f,
        "nccl-gid-index-mismatch",
        "spec.containers[0].env[3].value",
        Severity::Error,
    );
    assert!(f.iter().any(|x| x.fix.contains("NCCL_IB_GID_INDEX=1")));
    assert!(with_rule(&run(&with_gid("1"), &options), "nccl-gid-index-mismatch").is_empty());
    assert!(
        with_rule(&run(&with_gid("3"), &erdma()), "nccl-gid-index-mismatch").is_empty(),
        "no profile index: no rule"
    );
}

#[test]
fn expandable_segments_on_an_rdma_pod() {
    let yaml = broken(
        "    - {name: NCCL_IB_DISABLE, value: \"0\"}",
        "    - {name: NCCL_IB_DISABLE, value: \"0\"}\n    - {name: PYTORCH_CUDA_ALLOC_CONF, value: \"expandable_segments:True\"}",
    );
    only(
        &run(&yaml, &erdma()),
        "pytorch-expandable-segments-rdma",
        "spec.containers[0].env[3].value",
        Severity::Warning,
    );
    let no_rdma = yaml.replace(", aliyun/erdma: 1", "");
    assert!(with_rule(&run(&no_rdma, &erdma()), "pytorch-expandable-segments-rdma").is_empty());
}

#[test]
fn gloo_tensor_transport_is_a_cpu_path() {
    let program = "import ray\n@ray.remote(num_gpus=1, enable_tensor_transport=True)\nclass P:\n    @ray.method(tensor_transport=\"gloo\")\n    def send(self): ...\n";
    let f = lint::lint_text("demo.py", program, &erdma());
    let hits = with_rule(&f, "rdt-gloo-cpu-transport");
    assert_eq!(hits.len(), 1, "{f:#?}");
    assert_eq!(
        (hits[0].location.line, hits[0].severity),
        (Some(4), Severity::Warning)
    );
}

#[test]
fn ray_get_of_an_rdt_ref_copies_through_the_object_store() {
    let program = "import ray\n@ray.remote(num_gpus=1, enable_tensor_transport=True)\nclass P:\n    @ray.method(tensor_transport=\"nccl\")\n    def make(self):\n        ...\nref = p.make.remote()\nt = ray.get(ref)\nu = ray.get(p.make.remote())\n";
    let f = lint::lint_text("demo.py", program, &erdma());
    let mut lines: Vec<Option<u64>> = with_rule(&f, "rdt-ray-get-copies-through-object-store")
        .iter()
        .map(|x| x.location.line)
        .collect();
    lines.sort();
    assert_eq!(lines, [Some(8), Some(9)], "{f:#?}");
    // Passing the ref to the receiver is the RDT path: nothing.
    let good = "@ray.method(tensor_transport=\"nccl\")\ndef make(self):\n    ...\nref = p.make.remote()\nok = ray.get(c.consume.remote(ref))\n";
    assert!(
        with_rule(
            &lint::lint_text("demo.py", good, &erdma()),
            "rdt-ray-get-copies-through-object-store"
        )
        .is_empty()
    );
}
