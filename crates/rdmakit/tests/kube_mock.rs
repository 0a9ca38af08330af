//! The kube executor against a tower-test mock API server (the pattern kube-rs uses in its own tests):
//! apply, discovery, a pod turning Ready, exec's request, rejections with the server's message, timeouts,
//! retries on transient errors and the registry-credentials merge; under the host, apply-if-absent and the
//! permission pre-check. (The workflows against the same fake: workflows_mock.rs.)
#![allow(clippy::unwrap_used)] // helpers outside #[test] fns unwrap too: a failure is a test failure

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::fake_api::{self, Seen, resource_list, status};
use rdmakit::cancel::Cancel;
use rdmakit::error::ExecError;
use rdmakit::exec::kube::KubeExecutor;
use rdmakit::exec::{ExecSpec, Executor, Manifest, MergeSecretsSpec, WaitFor, WaitSpec};
use serde_json::{Value, json};

/// Answers one request with (status code, JSON body); `None` never answers (a hung server).
type Responder = Box<dyn FnMut(&Seen) -> Option<(u16, Value)> + Send>;

struct Mock {
    rt: tokio::runtime::Runtime,
    exec: KubeExecutor,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Mock {
    /// How many requests so far match `which`.
    fn count(&self, which: impl Fn(&Seen) -> bool) -> usize {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|s| which(s))
            .count()
    }
}

/// Starts the in-process fake API server answering with `responder`, and the kube executor on it.
fn mock(responder: Responder) -> Mock {
    let api = fake_api::in_process(fake_api::json(responder));
    let exec = api.executor(Cancel::new());
    Mock {
        rt: api.rt,
        exec,
        seen: api.seen,
    }
}

fn core_v1_resources() -> Value {
    resource_list(
        "v1",
        json!([
            {"name": "pods", "singularName": "pod", "namespaced": true, "kind": "Pod", "verbs": ["create", "delete", "get", "list", "patch", "watch"]},
            {"name": "pods/exec", "singularName": "", "namespaced": true, "kind": "PodExecOptions", "verbs": ["create", "get"]},
            {"name": "secrets", "singularName": "secret", "namespaced": true, "kind": "Secret", "verbs": ["create", "delete", "get", "list", "patch"]}
        ]),
    )
}

fn ray_resources() -> Value {
    resource_list(
        "ray.io/v1",
        json!([{"name": "rayclusters", "singularName": "raycluster", "namespaced": true, "kind": "RayCluster", "verbs": ["create", "delete", "get", "list", "patch", "watch"]}]),
    )
}

/// Discovery answers; every other request is refused with 403 and `message`.
fn forbidden(message: &'static str) -> Responder {
    Box::new(move |s: &Seen| {
        Some(match s.uri.as_str() {
            "/api/v1" => (200, core_v1_resources()),
            _ => (403, status(403, "Forbidden", message)),
        })
    })
}

/// A PodList of `items`.
fn pod_list(items: Vec<Value>) -> Value {
    json!({"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": items})
}

/// A wait for one Ready pod labelled app=buildkitd in the default namespace.
fn buildkitd_ready(timeout: Duration) -> WaitSpec {
    WaitSpec {
        what: WaitFor::PodsReady,
        kind: "Pod".into(),
        name: None,
        selector: Some("app=buildkitd".into()),
        expect: 1,
        namespace: None,
        timeout,
    }
}

fn pod(name: &str, ready: bool) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "buildkitd"}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
        "status": {"conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}
    })
}

fn pod_manifest() -> Manifest {
    Manifest {
        display_path: "bundle/pod.yaml".into(),
        objects: vec![
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "rdma-test"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}),
        ],
    }
}

fn raycluster_manifest() -> Manifest {
    Manifest {
        display_path: "bundle/ray-cluster-erdma.yaml".into(),
        objects: vec![
            json!({"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "ray-erdma-cluster"}, "spec": {}}),
        ],
    }
}

#[test]
fn apply_uses_discovery_and_server_side_apply_with_field_manager() {
    let m = mock(Box::new(|s: &Seen| {
        Some(match (s.method.as_str(), s.uri.as_str()) {
            ("GET", "/api/v1") => (200, core_v1_resources()),
            ("PATCH", u) if u.starts_with("/api/v1/namespaces/default/pods/rdma-test") => {
                (200, pod("rdma-test", false))
            }
            _ => (404, status(404, "NotFound", "unexpected")),
        })
    }));
    let refs = m
        .exec
        .apply(&pod_manifest(), Duration::from_secs(5))
        .unwrap();
    assert_eq!(refs.len(), 1);
    assert_eq!(refs[0].to_string(), "Pod/rdma-test");
    let seen = m.seen.lock().unwrap().clone();
    let patch = seen
        .iter()
        .find(|s| s.method == "PATCH")
        .expect("a PATCH was sent");
    assert!(patch.uri.contains("fieldManager=rdmakit"), "{}", patch.uri);
    // Server-side apply takes over fields another manager set (kubectl --force-conflicts).
    assert!(patch.uri.contains("force=true"), "{}", patch.uri);
    assert_eq!(patch.content_type, "application/apply-patch+yaml");
    let body: Value = serde_json::from_str(&patch.body).unwrap();
    assert_eq!(body["metadata"]["name"], "rdma-test");
    drop(m.rt);
}

#[test]
fn rejected_apply_surfaces_the_servers_message_422_and_409() {
    for (code, reason, message) in [
        (
            422,
            "Invalid",
            "RayCluster.ray.io \"ray-erdma-cluster\" is invalid: spec.headGroupSpec: Required value",
        ),
        (
            409,
            "Conflict",
            "Apply failed with 1 conflict: conflict with \"kubectl-client-side-apply\": .spec.rayVersion",
        ),
    ] {
        let m = mock(Box::new(move |s: &Seen| {
            Some(match (s.method.as_str(), s.uri.as_str()) {
                ("GET", "/apis/ray.io/v1") => (200, ray_resources()),
                ("PATCH", _) => (code, status(code, reason, message)),
                _ => (404, status(404, "NotFound", "unexpected")),
            })
        }));
        let err = m
            .exec
            .apply(&raycluster_manifest(), Duration::from_secs(5))
            .unwrap_err();
        match &err {
            ExecError::Rejected {
                code: c,
                reason: r,
                message: msg,
                ..
            } => {
                assert_eq!(*c, code);
                assert_eq!(r, reason);
                assert_eq!(msg, message);
            }
            other => panic!("expected Rejected, got {other:?}"),
        }
        let text = err.to_string();
        assert!(text.contains(message), "{text}");
        assert!(text.contains("RayCluster/ray-erdma-cluster"), "{text}");
        assert!(err.is_cluster_error());
        // Only one PATCH: 4xx rejections are not retried.
        assert_eq!(m.count(|s| s.method == "PATCH"), 1);
    }
}

#[test]
fn missing_crd_names_the_operator_to_install() {
    for (group_version, kind, want) in [
        ("ray.io/v1", "RayCluster", "install the KubeRay operator"),
        (
            "kubeflow.org/v2beta1",
            "MPIJob",
            "install the MPI Operator: kubectl apply --server-side -k",
        ),
        (
            "resource.k8s.io/v1",
            "DeviceClass",
            "DynamicResourceAllocation enabled",
        ),
    ] {
        let path = format!("/apis/{group_version}");
        let m = mock(Box::new(move |s: &Seen| {
            Some(if s.uri == path {
                (
                    404,
                    status(
                        404,
                        "NotFound",
                        "the server could not find the requested resource",
                    ),
                )
            } else {
                (404, status(404, "NotFound", "unexpected"))
            })
        }));
        let manifest = Manifest {
            display_path: "bundle/x.yaml".into(),
            objects: vec![
                json!({"apiVersion": group_version, "kind": kind, "metadata": {"name": "x"}, "spec": {}}),
            ],
        };
        let err = m.exec.apply(&manifest, Duration::from_secs(5)).unwrap_err();
        assert!(matches!(err, ExecError::MissingApi { .. }), "{err:?}");
        let text = err.to_string();
        assert!(
            text.contains(&format!(
                "the cluster does not serve {group_version} {kind}"
            )),
            "{text}"
        );
        assert!(text.contains(want), "{text}");
        assert!(
            !m.exec
                .has_api(group_version, kind, Duration::from_secs(5))
                .unwrap()
        );
        // Nothing was sent but discovery.
        assert!(m.seen.lock().unwrap().iter().all(|s| s.method == "GET"));
    }
}

#[test]
fn wait_sees_a_pod_turn_ready() {
    let mut lists = 0;
    let m = mock(Box::new(move |s: &Seen| {
        Some(match (s.method.as_str(), s.uri.as_str()) {
            ("GET", "/api/v1") => (200, core_v1_resources()),
            ("GET", u) if u.starts_with("/api/v1/namespaces/default/pods?") => {
                assert!(u.contains("labelSelector=app%3Dbuildkitd"), "{u}");
                lists += 1;
                let ready = lists >= 3;
                (200, pod_list(vec![pod("buildkitd-0", ready)]))
            }
            _ => (404, status(404, "NotFound", "unexpected")),
        })
    }));
    let spec = buildkitd_ready(Duration::from_secs(10));
    let out = m.exec.wait(&spec).unwrap();
    assert_eq!(out["state"], "1/1 pods Ready (want 1)");
    assert_eq!(out["names"][0], "buildkitd-0");
    let lists = m.count(|s| s.uri.contains("pods?"));
    assert!(lists >= 3, "polled {lists} times");
}

#[test]
fn wait_times_out_with_the_last_state() {
    let m = mock(Box::new(|s: &Seen| {
        Some(match s.uri.as_str() {
            "/api/v1" => (200, core_v1_resources()),
            u if u.starts_with("/api/v1/namespaces/default/pods?") => {
                (200, pod_list(vec![pod("buildkitd-0", false)]))
            }
            _ => (404, status(404, "NotFound", "unexpected")),
        })
    }));
    let spec = buildkitd_ready(Duration::from_secs(1));
    let started = std::time::Instant::now();
    let err = m.exec.wait(&spec).unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(5));
    match &err {
        ExecError::Timeout { limit, hint, .. } => {
            assert_eq!(*limit, Duration::from_secs(1));
            assert!(hint.contains("0/1 pods Ready"), "{hint}");
        }
        other => panic!("expected Timeout, got {other:?}"),
    }
}

#[test]
fn a_wait_fails_at_once_on_a_403_and_keeps_the_last_error_on_a_timeout() {
    let pods_wait = buildkitd_ready;
    let m = mock(forbidden(
        "pods is forbidden: User \"ci\" cannot list resource \"pods\"",
    ));
    let started = std::time::Instant::now();
    let err = m
        .exec
        .wait(&pods_wait(Duration::from_secs(30)))
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(3), "{err}");
    assert!(
        matches!(&err, ExecError::Rejected { code: 403, message, .. } if message.contains("cannot list")),
        "{err:?}"
    );
    let lists = m.count(|s| s.uri.contains("pods?"));
    assert_eq!(lists, 1, "a 403 is asked once");
    // A server that first fails (a retried 503) and then hangs: the timeout names the last error.
    let m = mock(Box::new(|s: &Seen| match s.uri.as_str() {
        "/api/v1" => Some((200, core_v1_resources())),
        u if u.contains("pods?") && s.method == "GET" => {
            static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
            (N.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < 3).then(|| {
                (
                    503,
                    status(503, "ServiceUnavailable", "etcd leader changed"),
                )
            })
        }
        _ => None,
    }));
    let err = m.exec.wait(&pods_wait(Duration::from_secs(1))).unwrap_err();
    match &err {
        ExecError::Timeout { hint, .. } => assert!(hint.contains("etcd leader changed"), "{hint}"),
        other => panic!("expected Timeout, got {other:?}"),
    }
}

#[test]
fn a_hung_api_server_hits_the_rust_side_timeout() {
    let m = mock(Box::new(|s: &Seen| match s.uri.as_str() {
        "/api/v1" => Some((200, core_v1_resources())),
        _ => None, // never answer the PATCH
    }));
    let started = std::time::Instant::now();
    let err = m
        .exec
        .apply(&pod_manifest(), Duration::from_millis(300))
        .unwrap_err();
    assert!(matches!(err, ExecError::Timeout { .. }), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[test]
fn transient_errors_are_retried_with_backoff() {
    // 429 (throttled) and 503 (etcd leader change) twice, then success: three PATCHes, no error.
    for (code, reason, message) in [
        (
            429,
            "TooManyRequests",
            "the server has received too many requests and has asked us to try again later",
        ),
        (503, "ServiceUnavailable", "etcd leader changed"),
    ] {
        let mut patches = 0;
        let m = mock(Box::new(move |s: &Seen| {
            Some(match (s.method.as_str(), s.uri.as_str()) {
                ("GET", "/api/v1") => (200, core_v1_resources()),
                ("PATCH", _) => {
                    patches += 1;
                    if patches < 3 {
                        (code, status(code, reason, message))
                    } else {
                        (200, pod("rdma-test", false))
                    }
                }
                _ => (404, status(404, "NotFound", "unexpected")),
            })
        }));
        let started = std::time::Instant::now();
        m.exec
            .apply(&pod_manifest(), Duration::from_secs(5))
            .unwrap();
        // Backoff 5 ms then 10 ms.
        assert!(started.elapsed() >= Duration::from_millis(15));
        assert_eq!(m.count(|s| s.method == "PATCH"), 3, "{code}");
    }
}

#[test]
fn transient_errors_give_up_after_the_retry_budget_with_the_servers_message() {
    let m = mock(Box::new(|s: &Seen| {
        Some(match (s.method.as_str(), s.uri.as_str()) {
            ("GET", "/api/v1") => (200, core_v1_resources()),
            ("PATCH", _) => (
                503,
                status(503, "ServiceUnavailable", "etcd leader changed"),
            ),
            _ => (404, status(404, "NotFound", "unexpected")),
        })
    }));
    let err = m
        .exec
        .apply(&pod_manifest(), Duration::from_secs(5))
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("(503 ServiceUnavailable): etcd leader changed"),
        "{err}"
    );
    assert_eq!(m.count(|s| s.method == "PATCH"), 3);
}

#[test]
fn reads_are_retried_too_and_a_missing_object_is_named() {
    let mut gets = 0;
    let m = mock(Box::new(move |s: &Seen| {
        Some(match (s.method.as_str(), s.uri.as_str()) {
            ("GET", "/api/v1") => (200, core_v1_resources()),
            ("GET", "/api/v1/namespaces/default/pods/erdma-nccl-check-0") => {
                gets += 1;
                if gets == 1 {
                    (
                        503,
                        status(503, "ServiceUnavailable", "etcd leader changed"),
                    )
                } else {
                    let mut p = pod("erdma-nccl-check-0", true);
                    p["status"]["podIP"] = json!("10.0.5.76");
                    (200, p)
                }
            }
            _ => (404, status(404, "NotFound", "pods \"gone\" not found")),
        })
    }));
    let field = |name: &str| rdmakit::exec::FieldSpec {
        kind: "Pod".into(),
        name: name.into(),
        path: ".status.podIP".into(),
        namespace: None,
        capture_var: None,
        timeout: Duration::from_secs(5),
    };
    assert_eq!(
        m.exec.get_field(&field("erdma-nccl-check-0")).unwrap(),
        "10.0.5.76"
    );
    let err = m.exec.get_field(&field("gone")).unwrap_err().to_string();
    assert_eq!(err, "read .status.podIP of Pod/gone: Pod/gone not found");
}

#[test]
fn exec_builds_the_websocket_request_and_reports_a_refusal() {
    // A mock service cannot complete a websocket upgrade, so this checks the request exec sends and
    // that a refused upgrade comes back as an error (exec_ws.rs runs exec and cp over a real websocket).
    let m = mock(forbidden(
        "pods \"buildkit-client\" is forbidden: User cannot create pods/exec",
    ));
    let spec = ExecSpec {
        pod: "buildkit-client".into(),
        container: Some("client".into()),
        command: vec!["mkdir".into(), "-p".into(), "/ctx".into()],
        timeout: Duration::from_secs(5),
        ..ExecSpec::default()
    };
    let err = m.exec.exec(&spec).unwrap_err();
    let seen = m.seen.lock().unwrap().clone();
    let req = seen
        .iter()
        .find(|s| s.uri.contains("/exec"))
        .expect("an exec request was sent");
    assert!(
        req.uri
            .starts_with("/api/v1/namespaces/default/pods/buildkit-client/exec?"),
        "{}",
        req.uri
    );
    for part in [
        "command=mkdir",
        "command=-p",
        "command=%2Fctx",
        "container=client",
        "stdout=true",
        "stderr=true",
    ] {
        assert!(req.uri.contains(part), "missing {part} in {}", req.uri);
    }
    assert!(!req.uri.contains("stdin=true"), "{}", req.uri);
    assert!(
        err.to_string()
            .contains("exec in pod buildkit-client container client [mkdir -p /ctx"),
        "{err}"
    );
}

#[test]
fn registry_credentials_are_merged_into_one_secret_without_printing_them() {
    use base64::Engine as _;
    let b64 = |v: &Value| {
        base64::engine::general_purpose::STANDARD.encode(serde_json::to_vec(v).unwrap())
    };
    let pull = json!({"auths": {"docker.io": {"auth": "cHVsbDpzZWNyZXQx"}}});
    let push = json!({"auths": {"registry.cn-beijing.aliyuncs.com": {"auth": "cHVzaDpzZWNyZXQy"}}});
    let (p1, p2) = (b64(&pull), b64(&push));
    let m = mock(Box::new(move |s: &Seen| {
        let secret = |name: &str, data: &str| json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "type": "kubernetes.io/dockerconfigjson", "data": {".dockerconfigjson": data}});
        Some(match (s.method.as_str(), s.uri.as_str()) {
            ("GET", "/api/v1/namespaces/default/secrets/acr-pull") => {
                (200, secret("acr-pull", &p1))
            }
            ("GET", "/api/v1/namespaces/default/secrets/acr-push") => {
                (200, secret("acr-push", &p2))
            }
            ("PATCH", u)
                if u.starts_with("/api/v1/namespaces/default/secrets/buildkit-push-creds") =>
            {
                (
                    200,
                    json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "buildkit-push-creds"}}),
                )
            }
            _ => (404, status(404, "NotFound", "unexpected")),
        })
    }));
    let spec = MergeSecretsSpec {
        sources: vec!["acr-pull".into(), "acr-push".into()],
        target: "buildkit-push-creds".into(),
        key: "config.json".into(),
        namespace: None,
        timeout: Duration::from_secs(5),
    };
    let summary = m.exec.merge_registry_secrets(&spec).unwrap();
    assert_eq!(
        summary.registries,
        vec![
            "docker.io".to_owned(),
            "registry.cn-beijing.aliyuncs.com".to_owned()
        ]
    );
    // The summary (what rdmakit may print) holds no credentials.
    let printed = format!("{summary:?} {}", serde_json::to_string(&summary).unwrap());
    assert!(
        !printed.contains("cHVsbDpzZWNyZXQx") && !printed.contains("cHVzaDpzZWNyZXQy"),
        "{printed}"
    );
    let seen = m.seen.lock().unwrap().clone();
    let patch = seen
        .iter()
        .find(|s| s.method == "PATCH")
        .expect("the merged secret was applied");
    assert!(patch.uri.contains("fieldManager=rdmakit"));
    let body: Value = serde_json::from_str(&patch.body).unwrap();
    assert_eq!(body["type"], "Opaque");
    let config = base64::engine::general_purpose::STANDARD
        .decode(body["data"]["config.json"].as_str().unwrap())
        .unwrap();
    let config: Value = serde_json::from_slice(&config).unwrap();
    assert_eq!(config["auths"]["docker.io"]["auth"], "cHVsbDpzZWNyZXQx");
    assert_eq!(
        config["auths"]["registry.cn-beijing.aliyuncs.com"]["auth"],
        "cHVzaDpzZWNyZXQy"
    );
    // What the run must redact from then on: each credential it read.
    let sensitive: Vec<&str> = summary.sensitive.iter().map(|t| t.expose()).collect();
    assert!(sensitive.contains(&"cHVsbDpzZWNyZXQx") && sensitive.contains(&"cHVzaDpzZWNyZXQy"));
}

#[test]
fn a_secret_from_secret_parameters_is_applied_as_an_opaque_secret() {
    use base64::Engine as _;
    let m = mock(Box::new(|s: &Seen| {
        Some(match s.method.as_str() {
            "PATCH" => (
                200,
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "registry-login"}}),
            ),
            _ => (404, status(404, "NotFound", "unexpected")),
        })
    }));
    let spec = rdmakit::exec::SecretSpec {
        name: "registry-login".into(),
        data: [(
            "password".to_owned(),
            rdmakit::secrets::SecretText::new("hunter22-s3cret"),
        )]
        .into(),
        env: Default::default(),
        namespace: Some("ray".into()),
        timeout: Duration::from_secs(5),
    };
    let r = m.exec.apply_secret(&spec).unwrap();
    assert_eq!(r.to_string(), "Secret/registry-login");
    let seen = m.seen.lock().unwrap().clone();
    let patch = seen.iter().find(|s| s.method == "PATCH").unwrap();
    assert!(
        patch
            .uri
            .starts_with("/api/v1/namespaces/ray/secrets/registry-login?")
            && patch.uri.contains("fieldManager=rdmakit"),
        "{}",
        patch.uri
    );
    let body: Value = serde_json::from_str(&patch.body).unwrap();
    assert_eq!(body["type"], "Opaque");
    let pw = base64::engine::general_purpose::STANDARD
        .decode(body["data"]["password"].as_str().unwrap())
        .unwrap();
    assert_eq!(pw, b"hunter22-s3cret");
    assert!(!format!("{spec:?}").contains("hunter22"));
}

#[test]
fn merge_refuses_a_secret_of_the_wrong_type() {
    let m = mock(Box::new(|s: &Seen| {
        Some(match s.uri.as_str() {
            "/api/v1/namespaces/default/secrets/plain" => (
                200,
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "plain"}, "type": "Opaque", "data": {}}),
            ),
            _ => (404, status(404, "NotFound", "unexpected")),
        })
    }));
    let spec = MergeSecretsSpec {
        sources: vec!["plain".into()],
        target: "t".into(),
        key: "config.json".into(),
        namespace: None,
        timeout: Duration::from_secs(5),
    };
    let err = m
        .exec
        .merge_registry_secrets(&spec)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("secret/plain has type \"Opaque\", expected kubernetes.io/dockerconfigjson"),
        "{err}"
    );
}

#[test]
fn cancellation_stops_a_wait() {
    let cancel = Cancel::new();
    // Discovery's answer to every request: the pod never shows up.
    let api = fake_api::in_process(fake_api::json(|_: &Seen| Some((200, core_v1_resources()))));
    let exec = api.executor(cancel.clone());
    let c2 = cancel.clone();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        c2.cancel();
    });
    let spec = WaitSpec {
        what: WaitFor::PodsReady,
        kind: "Pod".into(),
        name: Some("never".into()),
        selector: None,
        expect: 1,
        namespace: None,
        timeout: Duration::from_secs(30),
    };
    let err = exec.wait(&spec).unwrap_err();
    assert!(matches!(err, ExecError::Cancelled { .. }), "{err:?}");
}

/// A Secret that is already in the cluster (someone else's) and a Pod that is not.
fn if_absent_cluster() -> Responder {
    Box::new(|s: &Seen| {
        Some(match (s.method.as_str(), s.uri.as_str()) {
            ("GET", "/api/v1") => (200, core_v1_resources()),
            ("GET", "/api/v1/namespaces/default/secrets/shared") => (
                200,
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "shared", "namespace": "default"}}),
            ),
            ("GET", "/api/v1/namespaces/default/pods/mine") => {
                (404, status(404, "NotFound", "pods \"mine\" not found"))
            }
            ("PATCH", u) if u.starts_with("/api/v1/namespaces/default/pods/mine?") => {
                (200, pod("mine", false))
            }
            ("DELETE", "/api/v1/namespaces/default/pods/mine") => (200, pod("mine", false)),
            _ => (
                404,
                status(404, "NotFound", &format!("mock: no {} {}", s.method, s.uri)),
            ),
        })
    })
}

fn run_if_absent(script: &str) -> (rdmakit::host::RunOutcome, Vec<Seen>) {
    let Mock { rt, exec, seen } = mock(if_absent_cluster());
    let out = tempfile::tempdir().unwrap();
    let prelude = "fs::write(\"both.yaml\", \"apiVersion: v1\\nkind: Secret\\nmetadata: {name: shared}\\n---\\napiVersion: v1\\nkind: Pod\\nmetadata: {name: mine}\\nspec: {containers: [{name: c, image: busybox}]}\\n\");\n";
    let outcome = common::run_t(
        Arc::new(exec),
        rdmakit::host::HostConfig::new(out.path()),
        &format!("{prelude}{script}"),
    );
    let seen = seen.lock().unwrap().clone();
    drop(rt);
    (outcome, seen)
}

#[test]
fn apply_if_absent_leaves_what_was_there_and_never_deletes_it() {
    let writes = |seen: &[Seen]| -> Vec<String> {
        seen.iter()
            .filter(|s| s.method == "PATCH" || s.method == "DELETE")
            .map(|s| format!("{} {}", s.method, s.uri.split('?').next().unwrap()))
            .collect()
    };
    // The workflow deletes what it applied: only the Pod it created.
    let (o, seen) = run_if_absent(
        "let r = kube::apply(\"both.yaml\", #{ if_absent: true });\nif r != [\"Pod/mine\"] { throw `applied ${r}`; }\nkube::delete(\"both.yaml\");\n",
    );
    assert!(o.error.is_none(), "{:?}", o.error);
    assert_eq!(
        writes(&seen),
        vec![
            "PATCH /api/v1/namespaces/default/pods/mine",
            "DELETE /api/v1/namespaces/default/pods/mine"
        ]
    );
    assert!(
        o.report
            .checks
            .iter()
            .any(|c| c.name == "Secret/shared left as it is"),
        "{:?}",
        o.report.checks
    );
    // A failed run cleans up what it applied: again only the Pod.
    let (o, seen) =
        run_if_absent("kube::apply(\"both.yaml\", #{ if_absent: true });\nthrow \"boom\";\n");
    assert!(o.error.is_some());
    assert_eq!(
        writes(&seen),
        vec![
            "PATCH /api/v1/namespaces/default/pods/mine",
            "DELETE /api/v1/namespaces/default/pods/mine"
        ]
    );
}

#[test]
fn a_permission_pre_check_names_what_the_credentials_lack_before_the_first_change() {
    let m = mock(Box::new(|s: &Seen| {
        Some(match (s.method.as_str(), s.uri.as_str()) {
            ("GET", "/api/v1") => (200, core_v1_resources()),
            ("POST", u)
                if u.starts_with("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews") =>
            {
                let mut review: Value = serde_json::from_str(&s.body).unwrap();
                let attrs = review["spec"]["resourceAttributes"].clone();
                // Namespace-scoped credentials that may not delete Secrets nor exec into pods.
                let allowed = !(attrs["resource"] == "secrets" && attrs["verb"] == "delete")
                    && attrs["subresource"] != "exec";
                review["status"] = json!({ "allowed": allowed });
                (201, review)
            }
            _ => (404, status(404, "NotFound", "unexpected")),
        })
    }));
    let seen = m.seen.clone();
    let out = tempfile::tempdir().unwrap();
    let o = common::run_t(
        Arc::new(m.exec),
        rdmakit::host::HostConfig::new(out.path()),
        "fs::write(\"s.yaml\", \"apiVersion: v1\\nkind: Secret\\nmetadata: {name: s}\\n\");\nstep(\"Apply\");\nkube::apply(\"s.yaml\");\n",
    );
    let e = o.error.expect("refused up front");
    assert!(e.cluster, "{e:?}");
    assert!(
        e.message
            .starts_with("permission pre-check: these credentials may not"),
        "{}",
        e.message
    );
    assert!(
        e.message
            .contains("create Pod (v1)/exec in namespace default"),
        "{}",
        e.message
    );
    assert!(
        e.message
            .contains("delete Secret (v1) in namespace default"),
        "{}",
        e.message
    );
    assert!(!e.message.contains("patch Secret"), "{}", e.message);
    assert!(e.message.contains("nothing was changed"), "{}", e.message);
    let seen = seen.lock().unwrap().clone();
    assert!(!seen.iter().any(|s| s.method == "PATCH"), "nothing applied");
    drop(m.rt);
}

#[test]
fn a_delete_waits_until_the_object_is_gone() {
    let terminating = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "mine", "namespace": "default", "uid": "u-1", "resourceVersion": "7",
                     "deletionTimestamp": "2026-12-01T00:00:00Z", "finalizers": ["example.com/slow"]},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}
    });
    let t2 = terminating.clone();
    let m = mock(Box::new(move |s: &Seen| {
        Some(match (s.method.as_str(), s.uri.as_str()) {
            ("GET", "/api/v1") => (200, core_v1_resources()),
            ("DELETE", u) if u.starts_with("/api/v1/namespaces/default/pods/mine") => {
                (200, t2.clone())
            }
            // The watcher's list: still there, terminating.
            ("GET", u)
                if u.starts_with("/api/v1/namespaces/default/pods?")
                    && !u.contains("watch=true") =>
            {
                (
                    200,
                    json!({"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "7"}, "items": [t2.clone()]}),
                )
            }
            // Its watch: the object goes.
            ("GET", u) if u.starts_with("/api/v1/namespaces/default/pods?") => {
                (200, json!({"type": "DELETED", "object": t2.clone()}))
            }
            _ => (404, status(404, "NotFound", "unexpected")),
        })
    }));
    let manifest = Manifest {
        display_path: "bundle/pod.yaml".into(),
        objects: vec![json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "mine"}})],
    };
    let done = m.exec.delete(&manifest, Duration::from_secs(10)).unwrap();
    assert_eq!(done.len(), 1);
    let seen: Vec<String> = m
        .seen
        .lock()
        .unwrap()
        .iter()
        .map(|s| format!("{} {}", s.method, s.uri))
        .collect();
    let delete = seen.iter().position(|s| s.starts_with("DELETE")).unwrap();
    let watch = seen
        .iter()
        .position(|s| s.contains("watch=true") && s.contains("fieldSelector=metadata.name%3Dmine"))
        .expect("waited on a watch of the object");
    assert!(delete < watch, "{seen:?}");
    drop(terminating);
}

#[test]
fn a_wait_wakes_on_a_watch_event_instead_of_polling() {
    let watched = Arc::new(Mutex::new(false));
    let w = watched.clone();
    let m = mock(Box::new(move |s: &Seen| {
        Some(match (s.method.as_str(), s.uri.as_str()) {
            ("GET", "/api/v1") => (200, core_v1_resources()),
            // The watch: the pod turns Ready.
            ("GET", u)
                if u.starts_with("/api/v1/namespaces/default/pods?")
                    && u.contains("watch=true") =>
            {
                *w.lock().unwrap() = true;
                (
                    200,
                    json!({"type": "MODIFIED", "object": pod("buildkitd-0", true)}),
                )
            }
            // A list: Ready only once the watch said so.
            ("GET", u) if u.starts_with("/api/v1/namespaces/default/pods?") => {
                let ready = *w.lock().unwrap();
                (
                    200,
                    json!({"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "1"}, "items": [pod("buildkitd-0", ready)]}),
                )
            }
            _ => (404, status(404, "NotFound", "unexpected")),
        })
    }));
    // A poll interval of 2 s: with a working watch the fallback list would come after 30 s.
    let exec = m.exec.with_poll_interval(Duration::from_secs(2));
    let spec = buildkitd_ready(Duration::from_secs(60));
    let started = std::time::Instant::now();
    let out = exec.wait(&spec).unwrap();
    assert_eq!(out["state"], "1/1 pods Ready (want 1)");
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "{:?}",
        started.elapsed()
    );
    assert!(*watched.lock().unwrap());
    drop(m.rt);
}

/// Pods of one run, labelled as `check` labels them, still terminating.
fn run_pod(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": format!("u-{name}"), "resourceVersion": "9",
                     "labels": {"rdmakit.io/check": "r1"}, "deletionTimestamp": "2026-12-01T00:00:00Z"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}
    })
}

/// A hundred pods go with one DELETE on the collection (by the label) and one watch until none is left,
/// not a delete and a watch each.
#[test]
fn a_collection_delete_is_one_request_and_one_watch_until_none_is_left() {
    let pods: Vec<Value> = (0..100).map(|i| run_pod(&format!("p{i:03}"))).collect();
    let listed = pods.clone();
    let m = mock(Box::new(move |s: &Seen| {
        Some(match (s.method.as_str(), s.uri.as_str()) {
            ("GET", "/api/v1") => (200, core_v1_resources()),
            ("DELETE", u) if u.starts_with("/api/v1/namespaces/default/pods?") => (
                200,
                json!({"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": listed.clone()}),
            ),
            // The watcher's list: two are still terminating; its watch: both go.
            ("GET", u)
                if u.starts_with("/api/v1/namespaces/default/pods?")
                    && !u.contains("watch=true") =>
            {
                (
                    200,
                    json!({"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "9"},
                           "items": [listed[0].clone(), listed[1].clone()]}),
                )
            }
            ("GET", u) if u.starts_with("/api/v1/namespaces/default/pods?") => {
                // One event per answer: the first pod goes, then the second.
                let which = if u.contains("resourceVersion=9") {
                    0
                } else {
                    1
                };
                let mut gone = listed[which].clone();
                gone["metadata"]["resourceVersion"] = json!(format!("1{which}"));
                (200, json!({"type": "DELETED", "object": gone}))
            }
            _ => (404, status(404, "NotFound", "unexpected")),
        })
    }));
    let n = m
        .exec
        .delete_selected(
            "v1",
            "Pod",
            "default",
            "rdmakit.io/check=r1",
            Duration::from_secs(10),
        )
        .unwrap();
    assert_eq!(n, 100);
    let deletes: Vec<Seen> = m
        .seen
        .lock()
        .unwrap()
        .iter()
        .filter(|s| s.method == "DELETE")
        .cloned()
        .collect();
    assert_eq!(deletes.len(), 1, "{deletes:?}");
    assert!(
        deletes[0]
            .uri
            .contains("labelSelector=rdmakit.io%2Fcheck%3Dr1"),
        "{:?}",
        deletes[0].uri
    );
    assert!(
        deletes[0].body.contains("Background"),
        "{:?}",
        deletes[0].body
    );
    let watches = m.count(|s| s.method == "GET" && s.uri.contains("watch=true"));
    assert!(
        (1..=2).contains(&watches),
        "one watch (its reconnects aside), saw {watches}"
    );
    drop(pods);
}

/// Credentials without `deletecollection` get the API server's 403 as a rejection the caller can fall back
/// on (check deletes its pods one by one then); pods that never go end the wait naming them.
#[test]
fn a_collection_delete_refused_or_stuck_says_so() {
    let m = mock(forbidden(
        "pods is forbidden: User \"team-ml\" cannot deletecollection resource \"pods\"",
    ));
    let e = m
        .exec
        .delete_selected(
            "v1",
            "Pod",
            "default",
            "rdmakit.io/check=r1",
            Duration::from_secs(5),
        )
        .unwrap_err();
    assert!(matches!(e, ExecError::Rejected { code: 403, .. }), "{e}");
    assert!(e.to_string().contains("cannot deletecollection"), "{e}");

    let stuck = run_pod("p000");
    let m = mock(Box::new(move |s: &Seen| {
        Some(match (s.method.as_str(), s.uri.as_str()) {
            ("GET", "/api/v1") => (200, core_v1_resources()),
            ("DELETE", _) => (200, pod_list(vec![stuck.clone()])),
            ("GET", u) if !u.contains("watch=true") => (
                200,
                json!({"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "9"}, "items": [stuck.clone()]}),
            ),
            // The watch never reports the pod gone.
            _ => return None,
        })
    }));
    let e = m
        .exec
        .delete_selected(
            "v1",
            "Pod",
            "default",
            "rdmakit.io/check=r1",
            Duration::from_millis(800),
        )
        .unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, ExecError::Timeout { .. }), "{text}");
    assert!(text.contains("1 still there: default/p000"), "{text}");
}
