//! The CLI's live path as a subprocess against a small HTTP server on localhost: kubeconfig discovery
//! ($KUBECONFIG, --kubeconfig), --context and -n reach the request path; a rejection prints the server's
//! message with exit code 3; Ctrl-C during a hung cluster action exits 130 with the report written.
#![allow(clippy::unwrap_used)] // helpers outside #[test] fns unwrap too: a failure is a test failure

mod common;

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::cli::{Workflow, rdmakit_process};
use common::fake_api::{self, OnPort, Reply, Seen};

/// An API server that knows no object: 404 with a Status naming the pod (the last path segment).
fn not_found() -> OnPort {
    fake_api::on_port(Box::new(|s: &Seen| {
        let name = s
            .path()
            .trim_end_matches("/log")
            .rsplit('/')
            .next()
            .unwrap_or("")
            .to_owned();
        Some(Reply::status(
            404,
            "NotFound",
            &format!("pods \"{name}\" not found"),
        ))
    }))
}

/// A kubeconfig with two clusters: `ack` (current; namespace ray) at `port_a`, `vke` (namespace mpi) at
/// `port_b`.
fn kubeconfig(dir: &Path, port_a: u16, port_b: u16) -> std::path::PathBuf {
    let kc = dir.join("kubeconfig");
    std::fs::write(
        &kc,
        format!(
            "apiVersion: v1
kind: Config
current-context: ack
clusters:
- name: ack
  cluster: {{server: \"http://127.0.0.1:{port_a}\"}}
- name: vke
  cluster: {{server: \"http://127.0.0.1:{port_b}\"}}
contexts:
- name: ack
  context: {{cluster: ack, user: me, namespace: ray}}
- name: vke
  context: {{cluster: vke, user: me, namespace: mpi}}
users:
- name: me
  user: {{token: not-a-real-token}}
"
        ),
    )
    .unwrap();
    kc
}

#[test]
fn kubeconfig_discovery_context_and_namespace_reach_the_api_server() {
    let (a, b) = (not_found(), not_found());
    let (port_a, port_b) = (a.port, b.port);
    let wf = Workflow::new(
        "w.rhai",
        "step(\"read a log\");\nkube::logs(\"worker-0\");\n",
    );
    let dir = &wf.dir;
    let kc = kubeconfig(dir.path(), port_a, port_b);
    let run = |args: &[&str], env_kubeconfig: bool| {
        let mut c = wf.live();
        c.args(args);
        if env_kubeconfig {
            c.env("KUBECONFIG", &kc);
        }
        c.output().unwrap()
    };
    let last = |api: &OnPort| api.lines().last().cloned().unwrap_or_default();

    // $KUBECONFIG and its current context (namespace ray).
    let o = run(&[], true);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{stderr}");
    assert!(
        last(&a).starts_with("GET /api/v1/namespaces/ray/pods/worker-0/log"),
        "{:?}",
        a.lines()
    );
    // The server's own message, the file, line and step.
    assert!(
        stderr.contains("the API server rejected it (404 NotFound): pods \"worker-0\" not found"),
        "{stderr}"
    );
    assert!(stderr.contains("w.rhai:2:"), "{stderr}");
    assert!(stderr.contains("during step: read a log"), "{stderr}");
    // Which cluster said so: the server URL and the context.
    assert!(
        stderr.contains(&format!(
            "cluster: server http://127.0.0.1:{port_a}/, context ack"
        )),
        "{stderr}"
    );

    // --context picks the other cluster and its namespace; -n overrides the namespace.
    let o = run(&["--context", "vke"], true);
    assert_eq!(o.status.code(), Some(3));
    assert!(
        last(&b).starts_with("GET /api/v1/namespaces/mpi/pods/worker-0/log"),
        "{:?}",
        b.lines()
    );
    let o = run(&["--context", "vke", "-n", "team"], true);
    assert_eq!(o.status.code(), Some(3));
    assert!(last(&b).starts_with("GET /api/v1/namespaces/team/pods/worker-0/log"));

    // --kubeconfig without the environment variable.
    let n = a.lines().len();
    let kc_arg = kc.to_str().unwrap().to_owned();
    let o = run(&["--kubeconfig", &kc_arg, "-n", "default"], false);
    assert_eq!(o.status.code(), Some(3));
    assert_eq!(a.lines().len(), n + 1);
    assert!(last(&a).starts_with("GET /api/v1/namespaces/default/pods/worker-0/log"));

    // An unknown context is a usage error (the user's input, not the cluster), naming the known ones,
    // before anything is sent.
    let (na, nb) = (a.lines().len(), b.lines().len());
    let o = run(&["--context", "nope"], true);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("context \"nope\" is not in $KUBECONFIG")
            && stderr.contains("its contexts: ack, vke"),
        "{stderr}"
    );
    assert!(!stderr.contains("cannot reach"), "{stderr}");
    assert_eq!(a.lines().len(), na);
    assert_eq!(b.lines().len(), nb);

    // A kubeconfig that does not exist or does not parse: exit 2, naming the file.
    let missing = dir.path().join("no-such-kubeconfig");
    let o = run(&["--kubeconfig", missing.to_str().unwrap()], false);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("no-such-kubeconfig"), "{stderr}");
    let garbled = dir.path().join("garbled");
    std::fs::write(&garbled, "clusters: [unclosed\n").unwrap();
    let o = run(&["--kubeconfig", garbled.to_str().unwrap()], false);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("garbled"), "{stderr}");
    // No kubeconfig anywhere (HOME has none, KUBECONFIG unset) and not in a pod.
    let o = run(&[], false);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("no cluster configuration"), "{stderr}");
}

#[test]
fn ctrl_c_stops_a_hung_cluster_action_and_writes_the_report() {
    // A hung API server: it takes each request and never answers.
    let api = fake_api::on_port(Box::new(|_: &Seen| None));
    let wf = Workflow::new(
        "w.rhai",
        "step(\"wait for the workers\");\nkube::wait_pods(\"app=worker\", #{ timeout: 120 });\n",
    );
    let kc = kubeconfig(wf.dir.path(), api.port, api.port);
    let out = wf.out();
    let mut child = rdmakit_process()
        .arg("run")
        .arg(&wf.path)
        .arg("--out")
        .arg(&out)
        .env("KUBECONFIG", &kc)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let started = Instant::now();
    let kill = std::process::Command::new("kill")
        .arg("-INT")
        .arg(child.id().to_string())
        .status()
        .unwrap();
    assert!(kill.success());
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if started.elapsed() > Duration::from_secs(15) {
            let _ = child.kill();
            panic!("rdmakit did not stop within 15 s of Ctrl-C");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("interrupt"), "{stderr}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    assert_eq!(report["verdict"], "interrupted");
    assert_eq!(report["steps"][0], "wait for the workers");
}

#[test]
fn registry_credentials_are_merged_without_printing_them_even_at_trace_level() {
    const PULL: &str = "cHVsbC11c2VyOnB1bGwtc2VjcmV0LXZhbHVl";
    const PUSH: &str = "cHVzaC11c2VyOnB1c2gtc2VjcmV0LXZhbHVl";
    let secret = |name: &str, reg: &str, auth: &str| {
        use base64::Engine as _;
        let cfg = format!(r#"{{"auths":{{"{reg}":{{"auth":"{auth}"}}}}}}"#);
        let data = base64::engine::general_purpose::STANDARD.encode(cfg);
        let json = format!(
            r#"{{"apiVersion":"v1","kind":"Secret","metadata":{{"name":"{name}","namespace":"ray"}},"type":"kubernetes.io/dockerconfigjson","data":{{".dockerconfigjson":"{data}"}}}}"#
        );
        (json, data)
    };
    let (pull_secret, pull_b64) = secret("acr-pull", "docker.io", PULL);
    let (push_secret, push_b64) = secret("acr-push", "registry.cn-beijing.aliyuncs.com", PUSH);
    let merged = r#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"buildkit-push-creds","namespace":"ray"},"type":"Opaque"}"#;
    let ok = |body: &str| Reply::json(200, &serde_json::from_str(body).unwrap());
    let api = fake_api::on_port(Box::new(move |s: &Seen| {
        Some(match (s.method.as_str(), s.path()) {
            ("GET", "/api/v1/namespaces/ray/secrets/acr-pull") => ok(&pull_secret),
            ("GET", "/api/v1/namespaces/ray/secrets/acr-push") => ok(&push_secret),
            ("PATCH", "/api/v1/namespaces/ray/secrets/buildkit-push-creds") => ok(merged),
            _ => Reply::status(404, "NotFound", "not found"),
        })
    }));
    let wf = Workflow::new(
        "w.rhai",
        "step(\"merge\");\nlet m = kube::merge_registry_secrets([\"acr-pull\", \"acr-push\"], \"buildkit-push-creds\");\nprint(m);\nreport::pass(\"merged\", `${m}`);\n",
    );
    let kc = kubeconfig(wf.dir.path(), api.port, api.port);
    let out = wf.out();
    let o = rdmakit_process()
        .args(["-vvv", "run"])
        .arg(&wf.path)
        .arg("--out")
        .arg(&out)
        .env("KUBECONFIG", &kc)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{stderr}");
    assert!(
        api.lines()
            .iter()
            .any(|l| l.starts_with("PATCH /api/v1/namespaces/ray/secrets/buildkit-push-creds"))
    );
    assert!(
        stdout.contains("docker.io") && stdout.contains("registry.cn-beijing.aliyuncs.com"),
        "{stdout}"
    );
    let mut texts = vec![stdout.into_owned(), stderr.into_owned()];
    for f in ["report.md", "report.json"] {
        texts.push(std::fs::read_to_string(out.join(f)).unwrap());
    }
    for t in &texts {
        for needle in [PULL, PUSH, pull_b64.as_str(), push_b64.as_str()] {
            assert!(!t.contains(needle), "a credential was printed:\n{t}");
        }
    }
}

#[test]
fn the_verdict_is_the_exit_code() {
    let api = not_found();
    let wf = Workflow::new("w.rhai", "");
    let kc = kubeconfig(wf.dir.path(), api.port, api.port);
    for (body, code, verdict) in [
        ("report::pass(\"a\", \"fine\");", 0, "pass"),
        (
            "report::pass(\"a\", \"fine\");\nreport::fail(\"b\", \"broken\");",
            1,
            "fail",
        ),
        ("throw \"stop\";", 2, "error"),
    ] {
        wf.rewrite(&format!("step(\"s\");\n{body}\n"));
        let o = wf.live().env("KUBECONFIG", &kc).output().unwrap();
        assert_eq!(
            o.status.code(),
            Some(code),
            "{body}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let report: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(wf.out().join("report.json")).unwrap())
                .unwrap();
        assert_eq!(report["verdict"], verdict, "{body}");
    }
}

#[test]
fn one_retry_policy_a_503_is_tried_four_times_not_thirteen() {
    let api = fake_api::on_port(Box::new(|_: &Seen| {
        Some(Reply::status(
            503,
            "ServiceUnavailable",
            "the server is currently unable to handle the request",
        ))
    }));
    let wf = Workflow::new(
        "w.rhai",
        "step(\"read a log\");\nkube::logs(\"worker-0\");\n",
    );
    let kc = kubeconfig(wf.dir.path(), api.port, api.port);
    let o = wf.live().env("KUBECONFIG", &kc).output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("503"), "{stderr}");
    let log_reads = api
        .lines()
        .iter()
        .filter(|l| l.contains("/pods/worker-0/log"))
        .count();
    // rdmakit's own policy (4 attempts), without kube's RetryLayer multiplying it.
    assert_eq!(log_reads, 4, "{:?}", api.lines());
}
