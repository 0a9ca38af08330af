//! The seed workflows against a fake Kubernetes API server behind kube-rs (tower-test mock, a [`Cluster`]
//! of objects answering it), for what a real cluster cannot stage on demand: a cluster that does not serve
//! an operator's API (KubeRay, the MPI Operator), where the workflow must stop and name what to install,
//! and vke-ib-pod on a VKE node (its RDMA mode label, InfiniBand resource and kubelet build). Everything a
//! real cluster can stage (healthy runs, the seeds' figures, NCCL and device faults, a node without its
//! RDMA resource) runs live on the control-plane tier (tests/tests/cluster/workflows.rs in the
//! rdmakit-tests crate).
#![allow(clippy::unwrap_used)] // helpers outside #[test] fns unwrap too: a failure is a test failure

mod common;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use common::fake_api::{self, Answer, Reply, Seen, WorkflowRun, resource_list};
use common::{fixture, output as out};
use rdmakit::exec::kinds::{self, KindInfo};
use rdmakit::exec::{ExecOutput, ExecSpec};
use rdmakit::host::RunOutcome;
use rdmakit::report::Verdict;
use serde_json::{Value, json};

// ------------------------------------------------------------------------------------------------------
// The cluster behind the fake API server.

/// The kinds the server serves, by name; their apiVersion, plural and scope come from the kinds table the
/// executors use (`rdmakit::exec::kinds`). The table's other kinds get a 404, as on a cluster without them.
const SERVED: &[&str] = &[
    "Pod",
    "Node",
    "Secret",
    "Service",
    "PersistentVolumeClaim",
    "Deployment",
    "RayCluster",
    "MPIJob",
    "DeviceClass",
    "ResourceClaimTemplate",
    "ResourceClaim",
    "ResourceSlice",
];

/// The served kinds' rows of the kinds table.
fn served() -> impl Iterator<Item = &'static KindInfo> {
    kinds::KINDS.iter().filter(|k| SERVED.contains(&k.kind))
}

/// Cluster state: objects by (plural, namespace, name), pod logs, and API groups left uninstalled.
#[derive(Default)]
struct Cluster {
    objects: BTreeMap<(String, String, String), Value>,
    logs: HashMap<String, String>,
    missing_groups: Vec<&'static str>,
    /// What the MPIJob's launcher logs when the job runs.
    launcher_log: String,
}

fn labels_match(obj: &Value, selector: &str) -> bool {
    selector.split(',').filter(|p| !p.is_empty()).all(|p| {
        let (k, v) = p.split_once('=').unwrap();
        obj.pointer("/metadata/labels")
            .and_then(|l| l.get(k))
            .and_then(Value::as_str)
            == Some(v)
    })
}

fn ready_pod(name: &str, ns: &str, labels: Value, ip: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {"containers": [{"name": "main", "image": "img"}]},
        "status": {"phase": "Running", "podIP": ip, "conditions": [{"type": "Ready", "status": "True"}]}
    })
}

impl Cluster {
    fn put(&mut self, plural: &str, ns: &str, obj: Value) {
        let name = obj["metadata"]["name"].as_str().unwrap().to_owned();
        self.objects
            .insert((plural.to_owned(), ns.to_owned(), name), obj);
    }

    fn node(&mut self, name: &str, capacity: Value) {
        self.put(
            "nodes",
            "",
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {}}, "status": {"capacity": capacity, "allocatable": capacity}}),
        );
    }

    /// What the operators would do once an object is applied.
    fn on_apply(&mut self, plural: &str, ns: &str, obj: &mut Value) {
        let name = obj["metadata"]["name"].as_str().unwrap().to_owned();
        let ip = format!("10.0.5.{}", 70 + self.objects.len() % 100);
        match plural {
            "pods" => {
                obj["status"] = json!({"phase": "Running", "podIP": ip, "conditions": [{"type": "Ready", "status": "True"}]});
            }
            "deployments" => {
                let labels = obj
                    .pointer("/spec/template/metadata/labels")
                    .cloned()
                    .unwrap_or(json!({}));
                self.put(
                    "pods",
                    ns,
                    ready_pod(&format!("{name}-7c9d5-0"), ns, labels, &ip),
                );
            }
            "rayclusters" => {
                let replicas = obj
                    .pointer("/spec/workerGroupSpecs/0/replicas")
                    .and_then(Value::as_i64)
                    .unwrap();
                let group = obj
                    .pointer("/spec/workerGroupSpecs/0/groupName")
                    .and_then(Value::as_str)
                    .unwrap()
                    .to_owned();
                obj["status"] = json!({"state": "ready", "readyWorkerReplicas": replicas});
                self.put(
                    "pods",
                    ns,
                    ready_pod(
                        &format!("{name}-head-9v5sd"),
                        ns,
                        json!({"ray.io/cluster": name, "ray.io/node-type": "head"}),
                        "10.0.5.82",
                    ),
                );
                for i in 0..replicas {
                    self.put("pods", ns, ready_pod(&format!("{name}-{group}-worker-{i}"), ns, json!({"ray.io/cluster": name, "ray.io/node-type": "worker", "ray.io/group": group}), &format!("10.0.5.{}", 75 + i)));
                }
            }
            "mpijobs" => {
                let workers = obj
                    .pointer("/spec/mpiReplicaSpecs/Worker/replicas")
                    .and_then(Value::as_i64)
                    .unwrap();
                let claim_tpl = obj.pointer("/spec/mpiReplicaSpecs/Worker/template/spec/resourceClaims/0/resourceClaimTemplateName").and_then(Value::as_str).unwrap().to_owned();
                for i in 0..workers {
                    let w = format!("{name}-worker-{i}");
                    self.put("pods", ns, ready_pod(&w, ns, json!({"training.kubeflow.org/job-name": name, "training.kubeflow.org/job-role": "worker"}), &format!("172.16.0.{}", 21 + i)));
                    self.put("resourceclaims", ns, json!({
                        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                        "metadata": {"name": format!("{w}-{claim_tpl}-x7k2p"), "namespace": ns},
                        "status": {"allocation": {"devices": {"results": [{"request": claim_tpl, "driver": "dra.net", "pool": format!("node-{i}"), "device": "erdma_0"}]}}, "reservedFor": [{"resource": "pods", "name": w}]}
                    }));
                }
                let launcher = format!("{name}-launcher-5mq8t");
                self.put("pods", ns, ready_pod(&launcher, ns, json!({"training.kubeflow.org/job-name": name, "training.kubeflow.org/job-role": "launcher"}), "172.16.0.30"));
                let log = self.launcher_log.clone();
                self.logs.insert(launcher, log);
                obj["status"] = json!({"conditions": [{"type": "Created", "status": "True"}, {"type": "Running", "status": "False"}, {"type": "Succeeded", "status": "True"}]});
            }
            _ => {}
        }
    }

    fn discovery(&self, gv: &str) -> Option<Value> {
        if self.missing_groups.iter().any(|g| gv.starts_with(g)) {
            return None;
        }
        let resources: Vec<Value> = served()
            .filter(|k| k.api_version == gv)
            .map(|k| json!({"name": k.plural, "singularName": k.kind.to_lowercase(), "namespaced": k.namespaced, "kind": k.kind, "verbs": ["create", "delete", "get", "list", "patch", "watch"]}))
            .collect();
        (!resources.is_empty()).then(|| resource_list(gv, Value::Array(resources)))
    }

    /// Answers one request.
    fn handle(&mut self, s: &Seen) -> Reply {
        let js = |code: u16, v: Value| Reply::json(code, &v);
        let not_found = |what: &str| Reply::status(404, "NotFound", what);
        let not_served = || not_found("the server could not find the requested resource");
        let selector = fake_api::query_values(&s.uri, "labelSelector")
            .pop()
            .unwrap_or_default();
        let parts: Vec<&str> = s.path().trim_start_matches('/').split('/').collect();
        // /api/v1/... or /apis/GROUP/VERSION/...
        let (gv, rest) = match parts.as_slice() {
            ["api", v, rest @ ..] => ((*v).to_owned(), rest),
            ["apis", g, v, rest @ ..] => (format!("{g}/{v}"), rest),
            _ => return not_found(&format!("fake: no {}", s.uri)),
        };
        if rest.is_empty() {
            return match self.discovery(&gv) {
                Some(d) => js(200, d),
                None => not_served(),
            };
        }
        if self.missing_groups.iter().any(|g| gv.starts_with(g)) {
            return not_served();
        }
        let (ns, rest) = match rest {
            ["namespaces", ns, rest @ ..] => ((*ns).to_owned(), rest),
            r => (String::new(), r),
        };
        let Some(kind) = served().find(|k| k.api_version == gv && Some(&k.plural) == rest.first())
        else {
            return not_found(&format!("fake: no {}", s.uri));
        };
        let name = rest.get(1).map(|n| (*n).to_owned());
        let key = |n: &str| (kind.plural.to_owned(), ns.clone(), n.to_owned());
        let missing = |n: &str| not_found(&format!("{} \"{n}\" not found", kind.plural));
        match (s.method.as_str(), name, rest.get(2)) {
            ("GET", Some(n), Some(&"log")) => match self.logs.get(&n) {
                Some(l) => Reply::text(200, l.clone()),
                None => missing(&n),
            },
            ("GET", Some(n), None) => match self.objects.get(&key(&n)) {
                Some(o) => js(200, o.clone()),
                None => missing(&n),
            },
            ("GET", None, None) => {
                let items: Vec<Value> = self
                    .objects
                    .iter()
                    .filter(|((p, o_ns, _), _)| {
                        p == kind.plural && (!kind.namespaced || *o_ns == ns)
                    })
                    .map(|(_, o)| o.clone())
                    .filter(|o| labels_match(o, &selector))
                    .collect();
                js(
                    200,
                    json!({"apiVersion": gv, "kind": format!("{}List", kind.kind), "metadata": {}, "items": items}),
                )
            }
            ("PATCH", Some(n), None) => {
                let mut obj: Value = serde_json::from_str(&s.body).unwrap();
                if kind.namespaced {
                    obj["metadata"]["namespace"] = json!(ns);
                }
                assert_eq!(obj["metadata"]["name"], json!(n));
                self.on_apply(kind.plural, &ns, &mut obj);
                self.objects.insert(key(&n), obj.clone());
                js(200, obj)
            }
            ("DELETE", Some(n), None) => match self.objects.remove(&key(&n)) {
                Some(o) => js(200, o),
                None => missing(&n),
            },
            _ => Reply::status(
                405,
                "MethodNotAllowed",
                &format!("fake: {} {}", s.method, s.uri),
            ),
        }
    }
}

/// Runs `scripts/workflows/<name>.rhai` against `cluster`, answering exec with `answer`.
fn run_workflow(
    name: &str,
    cluster: Cluster,
    answer: Answer,
    params: &[(&str, &str)],
) -> WorkflowRun {
    let mut cluster = cluster;
    let handler = Box::new(move |s: &Seen| Some(cluster.handle(s)));
    fake_api::run_workflow(name, handler, answer, params)
}

fn failed_checks(r: &RunOutcome) -> Vec<String> {
    r.report
        .checks
        .iter()
        .filter(|c| c.status == rdmakit::report::Status::Fail)
        .map(|c| format!("{}: {}", c.name, c.detail))
        .collect()
}

// ------------------------------------------------------------------------------------------------------
// erdma-ray-rdt (seed 000)

const PULL_AUTH: &str = "cHVsbDpzM2NyZXQtcHVsbA==";
const PUSH_AUTH: &str = "cHVzaDpzM2NyZXQtcHVzaA==";

fn erdma_cluster() -> Cluster {
    use base64::Engine as _;
    let mut c = Cluster::default();
    for n in ["cn-beijing.10.0.5.75", "cn-beijing.10.0.5.76"] {
        c.node(
            n,
            json!({"nvidia.com/gpu": "8", "aliyun/erdma": "400", "cpu": "256"}),
        );
    }
    c.node("cn-beijing.10.0.5.90", json!({"cpu": "32"})); // a CPU node: not counted
    let secret = |name: &str, registry: &str, auth: &str| {
        let cfg = json!({"auths": {registry: {"auth": auth}}});
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": "default"},
               "type": "kubernetes.io/dockerconfigjson",
               "data": {".dockerconfigjson": base64::engine::general_purpose::STANDARD.encode(serde_json::to_vec(&cfg).unwrap())}})
    };
    c.put(
        "secrets",
        "default",
        secret(
            "acr-pull",
            "registry.cn-beijing.aliyuncs.com/rayproject",
            PULL_AUTH,
        ),
    );
    c.put(
        "secrets",
        "default",
        secret("acr-push", "registry.cn-beijing.aliyuncs.com/me", PUSH_AUTH),
    );
    c
}

/// How the eRDMA cluster behaves inside the pods.
#[derive(Clone, Copy)]
struct ErdmaPods {
    /// `cupy.cuda.nccl.get_version()` in the worker image.
    nccl_code: &'static str,
    /// Whether NCCL really uses eRDMA (false: a silent TCP fallback; counters stay flat).
    rdma_works: bool,
    /// `ibv_devinfo`'s port state in the workers.
    port_state: &'static str,
}

const HEALTHY: ErdmaPods = ErdmaPods {
    nccl_code: "23007",
    rdma_works: true,
    port_state: "PORT_ACTIVE (4)",
};

const DEMO_TCP: &str = "producer node=c59eae7f8c63a1f51638d8c2554486ef4288e98408cd6b39d009b12e gpu=NVIDIA RTX PRO 5000 72GB Blackwell
consumer node=2ef590a9e0e27dc130d85579fb46e1ce6c09d0903027d2c0419b39c8 gpu=NVIDIA RTX PRO 5000 72GB Blackwell
iter 0: 512 MiB -> cuda:0 in 1203.9 ms (0.42 GiB/s), checksum OK
iter 1: 512 MiB -> cuda:0 in 431.2 ms (1.16 GiB/s), checksum OK
iter 2: 512 MiB -> cuda:0 in 425.0 ms (1.18 GiB/s), checksum OK
RDT over TCP (NCCL_IB_DISABLE=1): OK
";

fn erdma_answer(pods: ErdmaPods) -> Answer {
    let counters: Arc<Mutex<HashMap<String, u64>>> = Arc::new(Mutex::new(HashMap::new()));
    Box::new(move |s: &ExecSpec| {
        let cmd = s.command.join(" ");
        let ib_disabled = s
            .env
            .iter()
            .any(|(k, v)| k == "NCCL_IB_DISABLE" && v == "1");
        if cmd.starts_with("mkdir") {
            out("")
        } else if cmd.contains("buildctl") {
            ExecOutput {
                stderr: "#6 [2/3] RUN apt-get update -qq && apt-get install -y -qq wget ...\n#6 DONE 42.6s\n#7 [3/3] RUN pip install --no-cache-dir ... nvidia-nccl-cu13==2.30.7\n#7 DONE 38.1s\n#8 exporting to image\n#8 pushing layers 484.0s done\n#8 pushing manifest for registry.example.com/your-namespace/ray-llm:2.57.0-py312-cu130-erdma\n#8 DONE 485.1s\n".into(),
                ..out("")
            }
        } else if cmd.contains("ulimit -l") {
            out("unlimited\nerdma_0\n")
        } else if cmd.contains("ibv_devinfo -d") {
            out(&format!(
                "hca_id:\terdma_0\n\ttransport:\t\t\teRDMA (0)\n\tfw_ver:\t\t\t\t0.2.0\n\t\tport:\t1\n\t\t\tstate:\t\t\t{}\n\t\t\tlink_layer:\t\tEthernet\n",
                pods.port_state
            ))
        } else if cmd.contains("get_version") {
            out(&format!("{}\n", pods.nccl_code))
        } else if cmd.contains("nccl_allreduce_check.py") {
            let rank = if cmd.contains("--rank 0") { 0 } else { 1 };
            let gib = if ib_disabled || !pods.rdma_works {
                "0.000"
            } else {
                "2.500"
            };
            out(&format!(
                "rank {rank} iter 0: all_reduce 512 MiB in 86.2 ms, result OK\nrank {rank} iter 1: all_reduce 512 MiB in 84.9 ms, result OK\nrank {rank}: eRDMA tx during check: {gib} GiB (NCCL_IB_DISABLE={})\n",
                if ib_disabled { "1" } else { "0" }
            ))
        } else if cmd.contains("NCCLUniqueIDStore") {
            out("killed 0 leftover NCCLUniqueIDStore actor(s)\n")
        } else if cmd.contains("hw_tx_bytes_cnt") {
            let v = *counters
                .lock()
                .unwrap()
                .entry(s.pod.clone())
                .or_insert(7_340_032_000);
            out(&format!("{v}\n"))
        } else if cmd.contains("rdt_nccl_demo.py") && cmd.contains("--tcp") {
            out(DEMO_TCP)
        } else if cmd.contains("rdt_nccl_demo.py") {
            if pods.rdma_works {
                // Three 512 MiB transfers put 1.53 GiB on the producer's eRDMA device (the seed's figure).
                let mut c = counters.lock().unwrap();
                let producer = c.keys().find(|k| k.ends_with("worker-0")).cloned().unwrap();
                *c.get_mut(&producer).unwrap() += 1_642_000_000;
                out(&fixture("logs/rdt-demo-ok.log"))
            } else {
                out(&fixture("logs/rdt-demo-ok.log")
                    .replace(
                        "NET/IB : Using [0]erdma_0:1/RoCE [RO]; OOB eth0:10.0.5.76<0>",
                        "NET/Socket : Using [0]eth0:10.0.5.76<0>",
                    )
                    .replace("Using network IB", "Using network Socket")
                    .replace("via NET/IB/0", "via NET/Socket/0")
                    .lines()
                    .filter(|l| {
                        !l.contains("ncclIbReceiverQpsCreateToRts")
                            && !l.contains("GPU Direct RDMA")
                    })
                    .collect::<Vec<_>>()
                    .join("\n"))
            }
        } else if cmd.contains("/tmp/nccl-") {
            out(if pods.rdma_works {
                "worker:2214:2301 [0] NCCL INFO NET/IB : Using [0]erdma_0:1/RoCE [RO]; OOB eth0:10.0.5.76<0>\nworker:2214:2301 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 'erdma_0'\n"
            } else {
                "worker:2214:2301 [0] NCCL INFO NET/IB : No device found.\nworker:2214:2301 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.5.76<0>\nworker:2214:2301 [0] NCCL INFO Using network Socket\n"
            })
        } else {
            panic!("erdma-ray-rdt: unexpected exec in {}: {cmd}", s.pod)
        }
    })
}

const ERDMA_PARAMS: &[(&str, &str)] = &[
    ("pull_secret_source", "acr-pull"),
    ("push_secret_source", "acr-push"),
];

/// Every kind the fake serves is a row of the one table: a name it lacks would silently not be served.
#[test]
fn the_fake_serves_kinds_of_the_executors_table() {
    let rows: Vec<&str> = served().map(|k| k.kind).collect();
    assert_eq!(rows.len(), SERVED.len(), "served {rows:?} of {SERVED:?}");
}

#[test]
fn erdma_ray_rdt_stops_with_the_operator_to_install_when_kuberay_is_missing() {
    let mut c = erdma_cluster();
    c.missing_groups = vec!["ray.io"];
    let r = run_workflow("erdma-ray-rdt", c, erdma_answer(HEALTHY), ERDMA_PARAMS);
    let e = r.outcome.error.as_ref().expect("the workflow stops");
    assert!(e.cluster, "{e}");
    assert!(
        e.message.contains("does not serve ray.io/v1 RayCluster"),
        "{e}"
    );
    assert!(e.message.contains("KubeRay operator"), "{e}");
    assert_eq!(
        e.step.as_deref(),
        Some("Deploy the RayCluster (CPU-only head, GPU workers with aliyun/erdma)")
    );
    // The apply is the shared RayCluster deploy of scripts/lib/ray.rhai (through dra::apply); the trace names
    // the workflow's call.
    assert!(e.location.contains("lib/dra.rhai:"), "{}", e.location);
    assert!(
        e.trace.iter().any(|t| t.starts_with("in function deploy")
            && t.contains("scripts/workflows/erdma-ray-rdt.rhai:")),
        "{:?}",
        e.trace
    );
    assert_eq!(r.outcome.verdict(), Verdict::Error);
    assert!(
        r.report_md.contains("- verdict: **ERROR**"),
        "{}",
        r.report_md
    );
}

// ------------------------------------------------------------------------------------------------------
// dranet-nccl-tests (seed 002)

fn dranet_cluster(launcher_log: String) -> Cluster {
    let mut c = Cluster {
        launcher_log,
        ..Cluster::default()
    };
    for (i, n) in ["cn-hangzhou.172.16.0.21", "cn-hangzhou.172.16.0.22"]
        .iter()
        .enumerate()
    {
        c.node(n, json!({"nvidia.com/gpu": "2"}));
        c.put(
            "pods",
            "kube-system",
            ready_pod(
                &format!("dranet-{i}x9z"),
                "kube-system",
                json!({"k8s-app": "dranet"}),
                &format!("172.16.0.{}", 21 + i),
            ),
        );
        c.put("resourceslices", "", json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": format!("{n}-dra.net-abcde")},
            "spec": {"driver": "dra.net", "nodeName": n, "pool": {"name": n, "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": "erdma-0", "attributes": {
                         "dra.net/rdma": {"bool": true}, "dra.net/rdmaDevice": {"string": "erdma_0"},
                         "dra.net/pciAddress": {"string": "0000:00:0b.0"},
                         "alibaba.dra.net/instanceType": {"string": "ecs.gn8is-2x.8xlarge"}, "alibaba.dra.net/erdma": {"bool": true}}},
                         {"name": "eth0", "attributes": {"dra.net/rdma": {"bool": false}}}]}
        }));
    }
    c
}

fn no_exec() -> Answer {
    Box::new(|s: &ExecSpec| panic!("unexpected exec in {}: {:?}", s.pod, s.command))
}

#[test]
fn dranet_nccl_tests_stops_when_the_mpi_operator_is_missing() {
    let mut c = dranet_cluster(fixture("logs/nccl-tests-erdma.log"));
    c.missing_groups = vec!["kubeflow.org"];
    let r = run_workflow("dranet-nccl-tests", c, no_exec(), &[]);
    let e = r.outcome.error.as_ref().expect("the workflow stops");
    assert!(
        e.message
            .contains("does not serve kubeflow.org/v2beta1 MPIJob"),
        "{e}"
    );
    let fails = failed_checks(&r.outcome).join("\n");
    assert!(
        fails.contains("MPIJob served: not served: install the MPI Operator v0.7.0"),
        "{fails}"
    );
    // Nothing was applied before the check stopped the run.
    assert!(!r.seen.iter().any(|s| s.method == "PATCH"));
}

// ------------------------------------------------------------------------------------------------------
// vke-ib-pod

/// The first VKE build with RDMA support.
const VKE_WITH_RDMA: &str = "v1.24.15-vke.12";

/// What a healthy VKE pod prints for the workflow's checks (memlock, the RDMA devices, the mounts).
const HEALTHY_VKE_POD: &str = "unlimited\nrdma_cm\nuverbs0\nmlx5_0\nshm on /dev/shm type tmpfs (rw)\ntmpfs on /var/run/nvidia-topologyd type tmpfs (ro)\nCapEff:\t00000000a80465fb\n";

/// A VKE cluster of one InfiniBand node whose kubelet is `version`.
fn vke_cluster(version: &str) -> Cluster {
    let mut c = Cluster::default();
    c.put(
        "nodes",
        "",
        json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "vke-node-1", "labels": {"vke.node.rdma.mode": "ib-shared"}},
            "status": {"capacity": {"nvidia.com/gpu": "8", "vke.volcengine.com/infiniband-rdma": "1"},
                       "nodeInfo": {"kubeletVersion": version}}
        }),
    );
    c
}

/// Runs vke-ib-pod on [`vke_cluster`]; every exec in the test pod prints `prints`.
fn run_vke(version: &str, prints: String) -> WorkflowRun {
    run_workflow(
        "vke-ib-pod",
        vke_cluster(version),
        Box::new(move |_| out(&prints)),
        &[],
    )
}

/// `--bundle`: the live run applies the user's edited pod (server-side apply of its text), not a fresh
/// render, and still runs every check.
#[test]
fn vke_ib_pod_applies_an_edited_bundle() {
    let d = tempfile::tempdir().unwrap();
    // The rendered bundle, through a dry-run of the same workflow, then one edit.
    let (dry, _) = common::dry_run(
        "vke-ib-pod",
        &common::workflow_source("vke-ib-pod"),
        d.path(),
        &[],
        None,
    );
    assert!(dry.error.is_none());
    let pod = d.path().join("bundle/rdma-test-pod.yaml");
    let text = std::fs::read_to_string(&pod).unwrap();
    std::fs::write(
        &pod,
        text.replacen(
            "    app.kubernetes.io/managed-by: rdmakit\n",
            "    app.kubernetes.io/managed-by: rdmakit\n    edited-by: me\n",
            1,
        ),
    )
    .unwrap();
    let user = rdmakit::manifests::UserBundle::read(d.path()).unwrap();
    let mut cluster = vke_cluster(VKE_WITH_RDMA);
    let r = fake_api::run_workflow_with(
        "vke-ib-pod",
        Box::new(move |s: &Seen| Some(cluster.handle(s))),
        Box::new(|_| out(HEALTHY_VKE_POD)),
        &[],
        |cfg| cfg.bundle = Some(user),
    );
    assert!(r.outcome.error.is_none(), "{:?}", r.outcome.error);
    assert_eq!(r.outcome.verdict(), Verdict::Pass);
    let apply = r
        .seen
        .iter()
        .find(|s| s.method == "PATCH" && s.uri.contains("/pods/rdma-test"))
        .expect("pod applied");
    assert!(apply.body.contains("edited-by"), "{}", apply.body);
}

/// An exec the kubelet could not start (exit −1 on the wire: a Failure with no exit code, "Internal error
/// occurred") ends the run as a cluster error naming the exec, not as a FAIL blaming the pod's RDMA grant.
#[test]
fn vke_ib_pod_reports_an_exec_that_could_not_run_as_a_cluster_error_naming_it() {
    let mut cluster = vke_cluster(VKE_WITH_RDMA);
    let handler = Box::new(move |s: &Seen| Some(cluster.handle(s)));
    let r = fake_api::run_workflow_exec_live(
        "vke-ib-pod",
        handler,
        fake_api::exec_answering_status(
            r#"{"metadata":{},"status":"Failure","message":"Internal error occurred: no exec found for container","reason":"InternalError","code":500}"#,
        ),
        &[],
    );
    let e = r.outcome.error.as_ref().expect("the run stops at the exec");
    assert!(e.cluster, "{e}");
    for part in [
        "exec in pod rdma-test",
        "[sh -c ulimit -l;",
        "did not run (InternalError): Internal error occurred: no exec found for container",
    ] {
        assert!(e.message.contains(part), "{part:?} in {e}");
    }
    assert_eq!(r.outcome.verdict(), Verdict::Error);
    let fails = failed_checks(&r.outcome).join("\n");
    assert!(!fails.contains("did not get"), "{fails}");
    assert!(
        r.report_md.contains("- verdict: **ERROR**"),
        "{}",
        r.report_md
    );
}

/// A pod without CAP_IPC_LOCK (containerd's default set) and with the runtime's own 64 MiB /dev/shm: both are
/// failed checks naming the fix, though memlock is unlimited and /dev/shm is mounted.
#[test]
fn vke_ib_pod_fails_without_ipc_lock_and_on_the_default_dev_shm() {
    let pod = HEALTHY_VKE_POD.replace("a80465fb", "a80425fb").replace(
        "shm on /dev/shm type tmpfs (rw)",
        "shm on /dev/shm type tmpfs (rw,nosuid,nodev,noexec,relatime,size=65536k)",
    );
    let WorkflowRun { outcome, .. } = run_vke(VKE_WITH_RDMA, pod);
    assert_eq!(outcome.verdict(), Verdict::Fail);
    let failed = failed_checks(&outcome);
    let text = failed.join("\n");
    for needle in [
        "CapEff 00000000a80425fb lacks CAP_IPC_LOCK",
        "capabilities.add: [IPC_LOCK]",
        "/dev/shm is 64 MiB, the container runtime's default",
    ] {
        assert!(text.contains(needle), "no {needle:?} in\n{text}");
    }
    assert_eq!(failed.len(), 2, "{text}");
}

#[test]
fn vke_ib_pod_workflow_runs_against_the_mock_and_passes_on_a_healthy_pod() {
    let WorkflowRun { outcome, seen, .. } = run_vke(VKE_WITH_RDMA, HEALTHY_VKE_POD.into());
    assert!(
        outcome.error.is_none(),
        "{}",
        outcome.error.map(|e| e.to_string()).unwrap_or_default()
    );
    assert_eq!(outcome.verdict(), Verdict::Pass);
    // The pod went through server-side apply and was deleted at the end.
    let apply = seen
        .iter()
        .find(|s| s.method == "PATCH" && s.uri.contains("/pods/rdma-test"))
        .expect("pod applied");
    assert!(apply.uri.contains("fieldManager=rdmakit"), "{}", apply.uri);
    assert!(apply.body.contains("vke.volcengine.com/infiniband-rdma"));
    assert!(
        seen.iter()
            .any(|s| s.method == "DELETE" && s.uri.contains("/pods/rdma-test"))
    );
}

#[test]
fn vke_ib_pod_workflow_fails_with_the_fix_when_memlock_is_limited() {
    let WorkflowRun { outcome, .. } = run_vke(
        VKE_WITH_RDMA,
        HEALTHY_VKE_POD.replacen("unlimited", "64", 1),
    );
    assert!(outcome.error.is_none());
    assert_eq!(outcome.verdict(), Verdict::Fail);
    let md = outcome.report.to_markdown();
    assert!(md.contains("LimitMEMLOCK"), "{md}");
}

#[test]
fn vke_ib_pod_workflow_fails_on_a_kubernetes_build_without_rdma_support() {
    for (version, ok) in [
        ("v1.24.10-vke.30", false),
        ("v1.24.15-vke.11", false),
        ("v1.20.15-vke.18", true),
        ("v1.22.3-vke.5", false),
        ("v1.28.2-vke.1", true),
    ] {
        let WorkflowRun { outcome, .. } = run_vke(version, HEALTHY_VKE_POD.into());
        assert!(outcome.error.is_none(), "{version}");
        let check = outcome
            .report
            .checks
            .iter()
            .find(|c| c.name == "RDMA nodes run a VKE Kubernetes build that supports RDMA")
            .unwrap();
        assert_eq!(
            check.status == rdmakit::report::Status::Pass,
            ok,
            "{version}: {}",
            check.detail
        );
        if !ok {
            assert!(check.detail.contains(version), "{}", check.detail);
            assert!(
                check.detail.contains("v1.24.15-vke.12+"),
                "{}",
                check.detail
            );
            assert_eq!(outcome.verdict(), Verdict::Fail);
        }
    }
}
