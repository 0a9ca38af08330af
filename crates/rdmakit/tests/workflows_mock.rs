//! The seed workflows end to end against a fake Kubernetes API server behind kube-rs (tower-test mock):
//! discovery, server-side apply, lists with label selectors, deletes and logs go over the real client;
//! the server plays the operators (a RayCluster turns ready and gets its pods, an MPIJob gets workers,
//! a launcher, allocated ResourceClaims and finishes). Exec and cp need a websocket the mock cannot
//! upgrade, so they are answered from canned output shaped like the seeds' (exec_ws.rs runs exec and cp
//! over a real websocket). Each workflow: PASS on a healthy cluster and realistic FAILs.
#![allow(clippy::unwrap_used)] // helpers outside #[test] fns unwrap too: a failure is a test failure

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Request, Response, StatusCode};
use kube::client::Body;
use rdmakit::cancel::Cancel;
use rdmakit::error::ExecError;
use rdmakit::exec::kube::{KubeExecutor, RetryPolicy};
use rdmakit::exec::{
    CopySpec, ExecOutput, ExecSpec, Executor, FieldSpec, ListSpec, LogSpec, Manifest,
    MergeSecretsSpec, MergeSummary, ObjRef, WaitSpec,
};
use rdmakit::host::{Host, HostConfig, RunOutcome};
use rdmakit::report::Verdict;
use serde_json::{Value, json};

// ------------------------------------------------------------------------------------------------------
// The fake API server.

/// One request as the server saw it.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    uri: String,
    body: String,
}

/// A kind the server serves.
struct Kind {
    group_version: &'static str,
    kind: &'static str,
    plural: &'static str,
    namespaced: bool,
}

const KINDS: &[Kind] = &[
    Kind {
        group_version: "v1",
        kind: "Pod",
        plural: "pods",
        namespaced: true,
    },
    Kind {
        group_version: "v1",
        kind: "Node",
        plural: "nodes",
        namespaced: false,
    },
    Kind {
        group_version: "v1",
        kind: "Secret",
        plural: "secrets",
        namespaced: true,
    },
    Kind {
        group_version: "v1",
        kind: "Service",
        plural: "services",
        namespaced: true,
    },
    Kind {
        group_version: "v1",
        kind: "PersistentVolumeClaim",
        plural: "persistentvolumeclaims",
        namespaced: true,
    },
    Kind {
        group_version: "apps/v1",
        kind: "Deployment",
        plural: "deployments",
        namespaced: true,
    },
    Kind {
        group_version: "ray.io/v1",
        kind: "RayCluster",
        plural: "rayclusters",
        namespaced: true,
    },
    Kind {
        group_version: "kubeflow.org/v2beta1",
        kind: "MPIJob",
        plural: "mpijobs",
        namespaced: true,
    },
    Kind {
        group_version: "resource.k8s.io/v1",
        kind: "DeviceClass",
        plural: "deviceclasses",
        namespaced: false,
    },
    Kind {
        group_version: "resource.k8s.io/v1",
        kind: "ResourceClaimTemplate",
        plural: "resourceclaimtemplates",
        namespaced: true,
    },
    Kind {
        group_version: "resource.k8s.io/v1",
        kind: "ResourceClaim",
        plural: "resourceclaims",
        namespaced: true,
    },
    Kind {
        group_version: "resource.k8s.io/v1",
        kind: "ResourceSlice",
        plural: "resourceslices",
        namespaced: false,
    },
];

/// Cluster state: objects by (plural, namespace, name), pod logs, and API groups left uninstalled.
#[derive(Default)]
struct Cluster {
    objects: BTreeMap<(String, String, String), Value>,
    logs: HashMap<String, String>,
    missing_groups: Vec<&'static str>,
    /// What the MPIJob's launcher logs when the job runs.
    launcher_log: String,
}

fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message, "reason": reason, "code": code})
}

fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => {
                out.push(u8::from_str_radix(&s[i + 1..i + 3], 16).unwrap());
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).unwrap()
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
        let resources: Vec<Value> = KINDS
            .iter()
            .filter(|k| k.group_version == gv)
            .map(|k| json!({"name": k.plural, "singularName": k.kind.to_lowercase(), "namespaced": k.namespaced, "kind": k.kind, "verbs": ["create", "delete", "get", "list", "patch", "watch"]}))
            .collect();
        (!resources.is_empty()).then(|| json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}))
    }

    /// Answers one request: (status, body, content type).
    fn handle(&mut self, s: &Seen) -> (u16, Vec<u8>, &'static str) {
        let js = |code: u16, v: Value| (code, serde_json::to_vec(&v).unwrap(), "application/json");
        let (path, query) = s.uri.split_once('?').unwrap_or((&s.uri, ""));
        let selector = query
            .split('&')
            .find_map(|kv| kv.strip_prefix("labelSelector="))
            .map(decode)
            .unwrap_or_default();
        let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        // /api/v1/... or /apis/GROUP/VERSION/...
        let (gv, rest) = match parts.as_slice() {
            ["api", v, rest @ ..] => ((*v).to_owned(), rest),
            ["apis", g, v, rest @ ..] => (format!("{g}/{v}"), rest),
            _ => return js(404, status(404, "NotFound", &format!("fake: no {}", s.uri))),
        };
        if rest.is_empty() {
            return match self.discovery(&gv) {
                Some(d) => js(200, d),
                None => js(
                    404,
                    status(
                        404,
                        "NotFound",
                        "the server could not find the requested resource",
                    ),
                ),
            };
        }
        if self.missing_groups.iter().any(|g| gv.starts_with(g)) {
            return js(
                404,
                status(
                    404,
                    "NotFound",
                    "the server could not find the requested resource",
                ),
            );
        }
        let (ns, rest) = match rest {
            ["namespaces", ns, rest @ ..] => ((*ns).to_owned(), rest),
            r => (String::new(), r),
        };
        let Some(kind) = KINDS
            .iter()
            .find(|k| k.group_version == gv && Some(&k.plural) == rest.first())
        else {
            return js(404, status(404, "NotFound", &format!("fake: no {}", s.uri)));
        };
        let name = rest.get(1).map(|n| (*n).to_owned());
        let key = |n: &str| (kind.plural.to_owned(), ns.clone(), n.to_owned());
        match (s.method.as_str(), name, rest.get(2)) {
            ("GET", Some(n), Some(&"log")) => match self.logs.get(&n) {
                Some(l) => (200, l.clone().into_bytes(), "text/plain"),
                None => js(
                    404,
                    status(404, "NotFound", &format!("pods \"{n}\" not found")),
                ),
            },
            ("GET", Some(n), None) => match self.objects.get(&key(&n)) {
                Some(o) => js(200, o.clone()),
                None => js(
                    404,
                    status(
                        404,
                        "NotFound",
                        &format!("{} \"{n}\" not found", kind.plural),
                    ),
                ),
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
                None => js(
                    404,
                    status(
                        404,
                        "NotFound",
                        &format!("{} \"{n}\" not found", kind.plural),
                    ),
                ),
            },
            _ => js(
                405,
                status(
                    405,
                    "MethodNotAllowed",
                    &format!("fake: {} {}", s.method, s.uri),
                ),
            ),
        }
    }
}

// ------------------------------------------------------------------------------------------------------
// The executor: kube-rs against the fake server, exec and cp answered from canned output.

type Answer = Box<dyn Fn(&ExecSpec) -> ExecOutput + Send + Sync>;

struct Canned {
    inner: KubeExecutor,
    answer: Answer,
    copies: Mutex<Vec<String>>,
}

impl std::fmt::Debug for Canned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Canned")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl Executor for Canned {
    fn is_dry_run(&self) -> bool {
        false
    }
    fn has_api(&self, v: &str, k: &str, t: Duration) -> Result<bool, ExecError> {
        self.inner.has_api(v, k, t)
    }
    fn apply(&self, m: &Manifest, t: Duration) -> Result<Vec<ObjRef>, ExecError> {
        self.inner.apply(m, t)
    }
    fn delete(&self, m: &Manifest, t: Duration) -> Result<Vec<ObjRef>, ExecError> {
        self.inner.delete(m, t)
    }
    fn wait(&self, s: &WaitSpec) -> Result<Value, ExecError> {
        self.inner.wait(s)
    }
    fn exec(&self, s: &ExecSpec) -> Result<ExecOutput, ExecError> {
        Ok((self.answer)(s))
    }
    fn exec_many(&self, s: &[ExecSpec]) -> Result<Vec<ExecOutput>, ExecError> {
        Ok(s.iter().map(|x| (self.answer)(x)).collect())
    }
    fn get_field(&self, s: &FieldSpec) -> Result<String, ExecError> {
        self.inner.get_field(s)
    }
    fn copy_to(&self, s: &CopySpec) -> Result<(), ExecError> {
        // The file must exist (the workflow rendered it); record what went where.
        assert!(
            s.local.is_file(),
            "cp of a missing file {}",
            s.local.display()
        );
        self.copies
            .lock()
            .unwrap()
            .push(format!("{} -> {}:{}", s.local_display, s.pod, s.remote));
        Ok(())
    }
    fn logs(&self, s: &LogSpec) -> Result<String, ExecError> {
        self.inner.logs(s)
    }
    fn list(&self, s: &ListSpec) -> Result<Vec<Value>, ExecError> {
        self.inner.list(s)
    }
    fn merge_registry_secrets(&self, s: &MergeSecretsSpec) -> Result<MergeSummary, ExecError> {
        self.inner.merge_registry_secrets(s)
    }
}

fn out(stdout: &str) -> ExecOutput {
    ExecOutput {
        stdout: stdout.to_owned(),
        stderr: String::new(),
        code: 0,
        dry_run: false,
    }
}

struct Run {
    outcome: RunOutcome,
    seen: Vec<Seen>,
    copies: Vec<String>,
    dir: tempfile::TempDir,
    /// What the script printed (report::finish's line) is not captured; the files are.
    report_md: String,
    report_json: String,
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn fixture(name: &str) -> String {
    std::fs::read_to_string(root().join("crates/probe/tests/fixtures/logs").join(name)).unwrap()
}

/// Runs `scripts/workflows/<name>.rhai` against `cluster`, answering exec with `answer`.
fn run_workflow(name: &str, cluster: Cluster, answer: Answer, params: &[(&str, &str)]) -> Run {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (svc, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen2 = seen.clone();
    let cluster = Arc::new(Mutex::new(cluster));
    rt.spawn(async move {
        let mut handle = Box::pin(handle);
        while let Some((req, send)) = handle.as_mut().next_request().await {
            let (parts, body) = req.into_parts();
            let bytes = body.collect_bytes().await.unwrap_or_default();
            let s = Seen {
                method: parts.method.to_string(),
                uri: parts.uri.to_string(),
                body: String::from_utf8_lossy(&bytes).into_owned(),
            };
            seen2.lock().unwrap().push(s.clone());
            let (code, body, ct) = cluster.lock().unwrap().handle(&s);
            send.send_response(
                Response::builder()
                    .status(StatusCode::from_u16(code).unwrap())
                    .header("content-type", ct)
                    .body(Body::from(body))
                    .unwrap(),
            );
        }
    });
    let client = {
        let _g = rt.enter();
        kube::Client::new(svc, "default")
    };
    let inner = KubeExecutor::new(client, rt.handle().clone(), Cancel::new())
        .with_retry(RetryPolicy {
            attempts: 3,
            base: Duration::from_millis(5),
        })
        .with_poll_interval(Duration::from_millis(20));
    let exec = Arc::new(Canned {
        inner,
        answer,
        copies: Mutex::new(Vec::new()),
    });
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = HostConfig::new(dir.path());
    cfg.lib_dirs = vec![root().join("scripts/lib")];
    cfg.params = params
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    let src =
        std::fs::read_to_string(root().join(format!("scripts/workflows/{name}.rhai"))).unwrap();
    let host = Host::new(exec.clone(), cfg, Cancel::new(), &format!("{name}.rhai"));
    let outcome = host.run(&format!("scripts/workflows/{name}.rhai"), &src);
    let seen = seen.lock().unwrap().clone();
    let copies = exec.copies.lock().unwrap().clone();
    drop(host);
    drop(rt);
    let report_md = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
    let report_json = std::fs::read_to_string(dir.path().join("report.json")).unwrap();
    Run {
        outcome,
        seen,
        copies,
        dir,
        report_md,
        report_json,
    }
}

fn error_text(r: &RunOutcome) -> String {
    r.error
        .as_ref()
        .map(|e| format!("{e} {:?}", e.trace))
        .unwrap_or_default()
}

fn failed_checks(r: &RunOutcome) -> Vec<String> {
    r.report
        .checks
        .iter()
        .filter(|c| c.status == rdmakit::report::Status::Fail)
        .map(|c| format!("{}: {}", c.name, c.detail))
        .collect()
}

fn applied(seen: &[Seen], path_part: &str) -> bool {
    seen.iter().any(|s| {
        s.method == "PATCH" && s.uri.contains(path_part) && s.uri.contains("fieldManager=rdmakit")
    })
}

fn deleted(seen: &[Seen], path_part: &str) -> bool {
    seen.iter()
        .any(|s| s.method == "DELETE" && s.uri.contains(path_part))
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
            out(&format!(
                "unlimited\nhca_id:\terdma_0\n\ttransport:\t\t\teRDMA (0)\n\tfw_ver:\t\t\t\t0.2.0\n\t\tport:\t1\n\t\t\tstate:\t\t\t{}\n\t\t\tlink_layer:\t\tEthernet\n",
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
                out(&fixture("rdt-demo-ok.log"))
            } else {
                out(&fixture("rdt-demo-ok.log")
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

#[test]
fn erdma_ray_rdt_passes_on_a_healthy_cluster_with_the_seeds_figures() {
    let r = run_workflow(
        "erdma-ray-rdt",
        erdma_cluster(),
        erdma_answer(HEALTHY),
        ERDMA_PARAMS,
    );
    assert!(r.outcome.error.is_none(), "{}", error_text(&r.outcome));
    assert_eq!(
        r.outcome.verdict(),
        Verdict::Pass,
        "{:?}",
        failed_checks(&r.outcome)
    );

    // Every cluster object went through server-side apply and was cleaned up.
    for p in [
        "/deployments/buildkitd",
        "/pods/buildkit-client",
        "/rayclusters/ray-erdma-cluster",
        "/pods/erdma-nccl-check-0",
        "/pods/erdma-nccl-check-1",
    ] {
        assert!(applied(&r.seen, p), "{p} not applied");
        assert!(deleted(&r.seen, p), "{p} not deleted");
    }
    // The registry credentials were merged into one Secret holding both registries...
    let merged = r
        .seen
        .iter()
        .find(|s| s.method == "PATCH" && s.uri.contains("/secrets/buildkit-push-creds"))
        .expect("merged secret applied");
    let body: Value = serde_json::from_str(&merged.body).unwrap();
    use base64::Engine as _;
    let cfg: Value = serde_json::from_slice(
        &base64::engine::general_purpose::STANDARD
            .decode(body["data"]["config.json"].as_str().unwrap())
            .unwrap(),
    )
    .unwrap();
    assert_eq!(cfg["auths"].as_object().unwrap().len(), 2);
    // ...and never printed: not in the report, nor anywhere in the out dir.
    for f in walk(r.dir.path()) {
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        assert!(
            !text.contains(PULL_AUTH) && !text.contains(PUSH_AUTH),
            "a credential leaked into {}",
            f.display()
        );
    }
    assert!(r.report_md.contains("registry credentials merged"));

    // The files went where the seed puts them.
    assert!(
        r.copies
            .iter()
            .any(|c| c == "bundle/Dockerfile -> buildkit-client:/ctx/Dockerfile"),
        "{:?}",
        r.copies
    );
    assert!(
        r.copies.iter().any(|c| c
            == "bundle/rdt_nccl_demo.py -> ray-erdma-cluster-head-9v5sd:/tmp/rdt_nccl_demo.py"),
        "{:?}",
        r.copies
    );

    // The report carries the seed's proof: 1.53 GiB over eRDMA, 0.000 GiB in the TCP run, the RDT table.
    let m = &r.report_md;
    for needle in [
        "PASS NCCL 2.30.7 (23007) in the image: NCCL 2.30.7 (23007), the profile's pin",
        "PASS worker 0: RLIMIT_MEMLOCK unlimited",
        "PASS worker 1: erdma_0 visible and PORT_ACTIVE: erdma_0 port 1 PORT_ACTIVE (4), link_layer Ethernet, transport eRDMA (0)",
        "PASS NCCL all_reduce over eRDMA moved its bytes on the device (rank 0): eRDMA tx during check: 2.5 GiB (want >= 1.25 GiB)",
        "PASS NCCL all_reduce with NCCL_IB_DISABLE=1 left the device idle (rank 0): eRDMA tx during check: 0.0 GiB (want <= 0.025 GiB)",
        "PASS RDT traffic crossed eRDMA (device counters): eRDMA moved 1.529 GiB",
        "the transfer went over RDMA",
        "measured eRDMA tx during the run: 1.529 GiB",
        "TCP-run eRDMA tx delta: 0.000 GiB",
        "PASS worker 0: NCCL log shows NET/IB on erdma_0: worker:2214:2301 [0] NCCL INFO NET/IB : Using [0]erdma_0:1/RoCE",
        "RDT demo over eRDMA: iterations:",
        "11.84",
        "INFO RDT steady-state throughput, eRDMA vs NCCL_IB_DISABLE=1: ours 11.68 GiB/s beside the TCP run 1.17 GiB/s",
        "PASS no leftover NCCLUniqueIDStore actors: killed 0 leftover NCCLUniqueIDStore actor(s)",
        "- verdict: **PASS**",
    ] {
        assert!(m.contains(needle), "missing {needle:?} in\n{m}");
    }
    let json: Value = serde_json::from_str(&r.report_json).unwrap();
    assert_eq!(json["verdict"], "pass");
    assert_eq!(json["dry_run"], false);
    let measured: Vec<&str> = json["measurements"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    assert!(
        measured.contains(&"RDT demo over eRDMA: steady-state throughput"),
        "{measured:?}"
    );
    assert!(
        json["tables"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["text"].as_str().unwrap().contains("checksum"))
    );
}

fn walk(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn erdma_ray_rdt_fails_on_the_known_bad_nccl_and_names_the_pin() {
    let r = run_workflow(
        "erdma-ray-rdt",
        erdma_cluster(),
        erdma_answer(ErdmaPods {
            nccl_code: "22809",
            ..HEALTHY
        }),
        ERDMA_PARAMS,
    );
    assert!(r.outcome.error.is_none(), "{}", error_text(&r.outcome));
    assert_eq!(r.outcome.verdict(), Verdict::Fail);
    let fails = failed_checks(&r.outcome);
    assert_eq!(fails.len(), 1, "{fails:?}");
    let f = &fails[0];
    assert!(
        f.contains("NCCL 2.28.9 (22809) is known bad on eRDMA"),
        "{f}"
    );
    assert!(f.contains("ncclNetInit"), "{f}");
    assert!(f.contains("nvidia-nccl-cu13==2.30.7"), "{f}");
    assert!(
        r.report_md
            .contains("- verdict: **FAIL** — 1 check(s) failed"),
        "{}",
        r.report_md
    );
}

#[test]
fn erdma_ray_rdt_fails_on_a_silent_tcp_fallback() {
    let r = run_workflow(
        "erdma-ray-rdt",
        erdma_cluster(),
        erdma_answer(ErdmaPods {
            rdma_works: false,
            ..HEALTHY
        }),
        ERDMA_PARAMS,
    );
    assert!(r.outcome.error.is_none(), "{}", error_text(&r.outcome));
    assert_eq!(r.outcome.verdict(), Verdict::Fail);
    let fails = failed_checks(&r.outcome).join("\n");
    // The counters stayed flat although the demo said OK...
    assert!(
        fails.contains("RDT traffic crossed eRDMA (device counters): eRDMA moved 0.000 GiB"),
        "{fails}"
    );
    assert!(fails.contains("silent TCP fallback"), "{fails}");
    // The NCCL-only check (no Ray) already shows the device idle.
    assert!(fails.contains("NCCL all_reduce over eRDMA moved its bytes on the device (rank 0): eRDMA tx during check: 0.0 GiB (want >= 1.25 GiB) — the device stayed idle"), "{fails}");
    // ...the A/B names the fix, the NCCL logs and the doctor say NET/Socket.
    assert!(fails.contains("NCCL fell back to TCP"), "{fails}");
    assert!(
        fails.contains("worker 0: NCCL log shows NET/IB on erdma_0: NCCL used TCP sockets"),
        "{fails}"
    );
    assert!(
        fails.contains("RDT demo output: nccl-tcp-fallback"),
        "{fails}"
    );
    let json: Value = serde_json::from_str(&r.report_json).unwrap();
    assert_eq!(json["verdict"], "fail");
}

#[test]
fn erdma_ray_rdt_fails_when_the_erdma_port_is_down() {
    let r = run_workflow(
        "erdma-ray-rdt",
        erdma_cluster(),
        erdma_answer(ErdmaPods {
            port_state: "PORT_DOWN (1)",
            ..HEALTHY
        }),
        ERDMA_PARAMS,
    );
    assert!(r.outcome.error.is_none(), "{}", error_text(&r.outcome));
    let fails = failed_checks(&r.outcome);
    assert_eq!(fails.len(), 2, "{fails:?}");
    assert!(fails[0].starts_with("worker 0: erdma_0 visible and PORT_ACTIVE: erdma_0 has no active port ([\"port 1 PORT_DOWN (1)\"])"), "{}", fails[0]);
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
    assert!(
        e.location
            .starts_with("scripts/workflows/erdma-ray-rdt.rhai:"),
        "{}",
        e.location
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
fn dranet_nccl_tests_passes_with_net_ib_and_the_busbw_table() {
    let r = run_workflow(
        "dranet-nccl-tests",
        dranet_cluster(fixture("nccl-tests-erdma.log")),
        no_exec(),
        &[],
    );
    assert!(r.outcome.error.is_none(), "{}", error_text(&r.outcome));
    assert_eq!(
        r.outcome.verdict(),
        Verdict::Pass,
        "{:?}",
        failed_checks(&r.outcome)
    );
    for p in [
        "/deviceclasses/erdma.alibaba.dra.net",
        "/resourceclaimtemplates/erdma",
        "/mpijobs/nccl-test-erdma",
    ] {
        assert!(applied(&r.seen, p), "{p} not applied");
        assert!(deleted(&r.seen, p), "{p} not deleted");
    }
    // The launcher's log was read through the API.
    assert!(r.seen.iter().any(|s| {
        s.uri
            .starts_with("/api/v1/namespaces/default/pods/nccl-test-erdma-launcher-5mq8t/log")
    }));
    let m = &r.report_md;
    for needle in [
        "PASS DeviceClass served",
        "PASS MPIJob served",
        "PASS eRDMA devices published: 2 eRDMA device(s)",
        "PASS one allocated eRDMA claim per worker: 2/2 ResourceClaims allocated",
        "PASS NCCL uses NET/IB over erdma: nccl-test-erdma-worker-0:45:60 [0] NCCL INFO NET/IB : Using [0]erdma_0:1/RoCE [RO]",
        "PASS all_reduce_perf ran every size without errors (#wrong = 0 where validated): 5 sizes, #wrong N/A (-c 0: results not validated)",
        "nccl-tests all_reduce_perf (bus bandwidth per size):",
        "8589934592",
        "measured nccl-tests average bus bandwidth: 9.023 GB/s",
        "measured nccl-tests peak bus bandwidth: 9.060 GB/s",
        "PASS launcher log: no known failure signature",
    ] {
        assert!(m.contains(needle), "missing {needle:?} in\n{m}");
    }
    let json: Value = serde_json::from_str(&r.report_json).unwrap();
    assert_eq!(json["verdict"], "pass");
}

#[test]
fn dranet_nccl_tests_fails_when_nccl_falls_back_to_net_socket() {
    let log = fixture("nccl-tests-erdma.log")
        .replace("NET/IB : Using [0]erdma_0:1/RoCE [RO]; OOB eth0:172.16.0.21<0>", "NET/Socket : Using [0]eth0:172.16.0.21<0>")
        .replace("Using network IB", "Using network Socket")
        .replace("via NET/IB/0", "via NET/Socket/0")
        .replace("nccl-test-erdma-worker-0:45:60 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 'erdma_0'\n", "");
    let r = run_workflow("dranet-nccl-tests", dranet_cluster(log), no_exec(), &[]);
    assert!(r.outcome.error.is_none(), "{}", error_text(&r.outcome));
    assert_eq!(r.outcome.verdict(), Verdict::Fail);
    let fails = failed_checks(&r.outcome).join("\n");
    assert!(fails.contains("NCCL uses NET/IB over erdma: NCCL used TCP sockets (silent TCP fallback): nccl-test-erdma-worker-0:45:60 [0] NCCL INFO NET/Socket : Using [0]eth0:172.16.0.21"), "{fails}");
    assert!(fails.contains("launcher log: nccl-tcp-fallback"), "{fails}");
    // The bandwidth table is still reported: the numbers are what TCP gave.
    assert!(
        r.report_md
            .contains("nccl-tests all_reduce_perf (bus bandwidth per size):")
    );
}

#[test]
fn dranet_nccl_tests_stops_when_the_mpi_operator_is_missing() {
    let mut c = dranet_cluster(fixture("nccl-tests-erdma.log"));
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
        fails.contains("MPIJob served: not served: install it (MPI Operator v0.7.0"),
        "{fails}"
    );
    // Nothing was applied before the check stopped the run.
    assert!(!r.seen.iter().any(|s| s.method == "PATCH"));
}

// ------------------------------------------------------------------------------------------------------
// shared-device-raycluster (seed 001)

fn shared_cluster(with_b: bool) -> Cluster {
    let mut c = Cluster::default();
    for i in 0..3 {
        let mut cap =
            json!({"nvidia.com/gpu-h800": "8", "rdma/rdma_shared_device_a": "1", "cpu": "192"});
        if with_b {
            cap["rdma/rdma_shared_device_b"] = json!("1");
        }
        c.node(&format!("gpu-node-{i}"), cap);
    }
    c
}

fn shared_answer() -> Answer {
    Box::new(|s: &ExecSpec| {
        let cmd = s.command.join(" ");
        if cmd.contains("ulimit -l") {
            out("unlimited\nissm0\nrdma_cm\numad0\numad1\nuverbs0\nuverbs1\nmlx5_0\nmlx5_1\n")
        } else if cmd == "nvidia-smi -L" {
            out("GPU 0: NVIDIA H800 (UUID: GPU-3c1f)\nGPU 1: NVIDIA H800 (UUID: GPU-9a2e)\n")
        } else if cmd == "ray status" {
            out(
                "======== Autoscaler status ========\nResources\n---------------------------------------------------------------\nUsage:\n 0.0/432.0 CPU\n 0.0/24.0 GPU\n",
            )
        } else {
            panic!(
                "shared-device-raycluster: unexpected exec in {}: {cmd}",
                s.pod
            )
        }
    })
}

#[test]
fn shared_device_raycluster_passes_with_both_shared_devices() {
    let r = run_workflow(
        "shared-device-raycluster",
        shared_cluster(true),
        shared_answer(),
        &[],
    );
    assert!(r.outcome.error.is_none(), "{}", error_text(&r.outcome));
    assert_eq!(
        r.outcome.verdict(),
        Verdict::Pass,
        "{:?}",
        failed_checks(&r.outcome)
    );
    let apply = r
        .seen
        .iter()
        .find(|s| s.method == "PATCH" && s.uri.contains("/rayclusters/raycluster-kuberay"))
        .expect("RayCluster applied");
    for res in [
        "rdma/rdma_shared_device_a",
        "rdma/rdma_shared_device_b",
        "nvidia.com/gpu-h800",
    ] {
        assert!(
            apply.body.contains(res),
            "{res} missing from the applied RayCluster"
        );
    }
    // cleanup=false by default: the cluster is what the user came for.
    assert!(!deleted(&r.seen, "/rayclusters/"));
    let m = &r.report_md;
    for needle in [
        "PASS at least 3 nodes report nvidia.com/gpu-h800 and rdma/rdma_shared_device_a",
        "PASS at least 3 nodes report nvidia.com/gpu-h800 and rdma/rdma_shared_device_b",
        "PASS head: RLIMIT_MEMLOCK unlimited",
        "PASS worker 1: RDMA devices visible (/dev/infiniband, mlx5*)",
        "PASS worker 0 sees its GPUs",
        "PASS ray status lists the GPUs",
        "INFO RayCluster kept",
    ] {
        assert!(m.contains(needle), "missing {needle:?} in\n{m}");
    }
}

#[test]
fn shared_device_raycluster_fails_when_nodes_lack_a_shared_device() {
    let r = run_workflow(
        "shared-device-raycluster",
        shared_cluster(false),
        shared_answer(),
        &[("cleanup", "true")],
    );
    assert!(r.outcome.error.is_none(), "{}", error_text(&r.outcome));
    assert_eq!(r.outcome.verdict(), Verdict::Fail);
    let fails = failed_checks(&r.outcome);
    assert_eq!(fails.len(), 1, "{fails:?}");
    assert!(
        fails[0].starts_with(
            "at least 3 nodes report nvidia.com/gpu-h800 and rdma/rdma_shared_device_b: 0 node(s)"
        ),
        "{}",
        fails[0]
    );
    assert!(fails[0].contains("GPU nodes without rdma/rdma_shared_device_b: [\"gpu-node-0\", \"gpu-node-1\", \"gpu-node-2\"]"), "{}", fails[0]);
    assert!(
        fails[0].contains("is the RDMA shared device plugin running on that node?"),
        "{}",
        fails[0]
    );
    // The workflow stops at the failed node check: no RayCluster is applied for pods no node could take.
    assert!(
        !applied(&r.seen, "/rayclusters/"),
        "applied a RayCluster after the node check failed"
    );
}
