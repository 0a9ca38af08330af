//! The CLI's live path as a subprocess against a small HTTP server on localhost: kubeconfig discovery
//! ($KUBECONFIG, --kubeconfig), --context and -n reach the request path; a rejection prints the server's
//! message with exit code 3; Ctrl-C during a hung cluster action exits 130 with the report written.
#![allow(clippy::unwrap_used)] // helpers outside #[test] fns unwrap too: a failure is a test failure

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Clone)]
enum Mode {
    /// Answer every request with 404 and a Status naming the path.
    NotFound,
    /// Answer `METHOD path` from the table (by path prefix), else 404.
    Routes(Arc<Vec<(&'static str, String, String)>>),
    /// Accept connections and never answer (a hung API server).
    Hang,
    /// Answer every request with 503 Service Unavailable.
    Unavailable,
}

/// Starts the server; returns its port and the request lines it saw.
fn serve(mode: Mode) -> (u16, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen2 = seen.clone();
    std::thread::spawn(move || {
        let mut parked: Vec<TcpStream> = Vec::new();
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            match &mode {
                Mode::Hang => parked.push(stream),
                Mode::NotFound => {
                    let seen = seen2.clone();
                    std::thread::spawn(move || answer(stream, &seen, &[]));
                }
                Mode::Unavailable => {
                    let seen = seen2.clone();
                    std::thread::spawn(move || unavailable(stream, &seen));
                }
                Mode::Routes(routes) => {
                    let (seen, routes) = (seen2.clone(), routes.clone());
                    std::thread::spawn(move || answer(stream, &seen, &routes));
                }
            }
        }
    });
    (port, seen)
}

fn answer(stream: TcpStream, seen: &Mutex<Vec<String>>, routes: &[(&'static str, String, String)]) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut out = stream;
    loop {
        let mut first = String::new();
        if reader.read_line(&mut first).unwrap_or(0) == 0 {
            return;
        }
        let mut len = 0usize;
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                break;
            }
            if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
                len = v.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0u8; len];
        std::io::Read::read_exact(&mut reader, &mut body).unwrap();
        let line = first.trim().to_owned();
        seen.lock().unwrap().push(line.clone());
        let path = line
            .split(' ')
            .nth(1)
            .unwrap_or("")
            .split('?')
            .next()
            .unwrap_or("")
            .to_owned();
        let method = line.split(' ').next().unwrap_or("");
        if let Some((_, _, body)) = routes
            .iter()
            .find(|(m, p, _)| *m == method && path.starts_with(p.as_str()))
        {
            let resp = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
            if out.write_all(resp.as_bytes()).is_err() {
                return;
            }
            continue;
        }
        let name = path
            .trim_end_matches("/log")
            .rsplit('/')
            .next()
            .unwrap_or("")
            .to_owned();
        let status = format!(
            r#"{{"kind":"Status","apiVersion":"v1","metadata":{{}},"status":"Failure","message":"pods \"{name}\" not found","reason":"NotFound","code":404}}"#
        );
        let resp = format!(
            "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{status}",
            status.len()
        );
        if out.write_all(resp.as_bytes()).is_err() {
            return;
        }
    }
}

/// Reads requests and answers each with 503.
fn unavailable(stream: TcpStream, seen: &Mutex<Vec<String>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut out = stream;
    loop {
        let mut first = String::new();
        if reader.read_line(&mut first).unwrap_or(0) == 0 {
            return;
        }
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                break;
            }
        }
        seen.lock().unwrap().push(first.trim().to_owned());
        let body = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"the server is currently unable to handle the request","reason":"ServiceUnavailable","code":503}"#;
        let resp = format!(
            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        if out.write_all(resp.as_bytes()).is_err() {
            return;
        }
    }
}

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

fn rdmakit() -> Command {
    let mut c = Command::new(assert_cmd::cargo::cargo_bin("rdmakit"));
    c.env_remove("KUBECONFIG")
        .env_remove("RDMAKIT_CONTEXT")
        .env("HOME", "/nonexistent");
    c
}

fn script(dir: &Path, text: &str) -> std::path::PathBuf {
    let p = dir.join("w.rhai");
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn kubeconfig_discovery_context_and_namespace_reach_the_api_server() {
    let (port_a, seen_a) = serve(Mode::NotFound);
    let (port_b, seen_b) = serve(Mode::NotFound);
    let dir = tempfile::tempdir().unwrap();
    let kc = kubeconfig(dir.path(), port_a, port_b);
    let wf = script(
        dir.path(),
        "step(\"read a log\");\nkube::logs(\"worker-0\");\n",
    );
    let run = |args: &[&str], env_kubeconfig: bool| {
        let mut c = rdmakit();
        c.arg("run")
            .arg(&wf)
            .arg("--out")
            .arg(dir.path().join("out"));
        c.args(args);
        if env_kubeconfig {
            c.env("KUBECONFIG", &kc);
        }
        c.output().unwrap()
    };
    let last =
        |seen: &Arc<Mutex<Vec<String>>>| seen.lock().unwrap().last().cloned().unwrap_or_default();

    // $KUBECONFIG and its current context (namespace ray).
    let o = run(&[], true);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{stderr}");
    assert!(
        last(&seen_a).starts_with("GET /api/v1/namespaces/ray/pods/worker-0/log"),
        "{:?}",
        seen_a.lock().unwrap()
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
        last(&seen_b).starts_with("GET /api/v1/namespaces/mpi/pods/worker-0/log"),
        "{:?}",
        seen_b.lock().unwrap()
    );
    let o = run(&["--context", "vke", "-n", "team"], true);
    assert_eq!(o.status.code(), Some(3));
    assert!(last(&seen_b).starts_with("GET /api/v1/namespaces/team/pods/worker-0/log"));

    // --kubeconfig without the environment variable.
    let n = seen_a.lock().unwrap().len();
    let kc_arg = kc.to_str().unwrap().to_owned();
    let o = run(&["--kubeconfig", &kc_arg, "-n", "default"], false);
    assert_eq!(o.status.code(), Some(3));
    assert_eq!(seen_a.lock().unwrap().len(), n + 1);
    assert!(last(&seen_a).starts_with("GET /api/v1/namespaces/default/pods/worker-0/log"));

    // An unknown context is a usage error (the user's input, not the cluster), naming the known ones,
    // before anything is sent.
    let (na, nb) = (seen_a.lock().unwrap().len(), seen_b.lock().unwrap().len());
    let o = run(&["--context", "nope"], true);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("context \"nope\" is not in $KUBECONFIG")
            && stderr.contains("its contexts: ack, vke"),
        "{stderr}"
    );
    assert!(!stderr.contains("cannot reach"), "{stderr}");
    assert_eq!(seen_a.lock().unwrap().len(), na);
    assert_eq!(seen_b.lock().unwrap().len(), nb);

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
    let (port, _) = serve(Mode::Hang);
    let dir = tempfile::tempdir().unwrap();
    let kc = kubeconfig(dir.path(), port, port);
    let wf = script(
        dir.path(),
        "step(\"wait for the workers\");\nkube::wait_pods(\"app=worker\", #{ timeout: 120 });\n",
    );
    let out = dir.path().join("out");
    let mut child = rdmakit()
        .arg("run")
        .arg(&wf)
        .arg("--out")
        .arg(&out)
        .env("KUBECONFIG", &kc)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let started = Instant::now();
    let kill = Command::new("kill")
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
    let routes = vec![
        ("GET", "/api/v1/namespaces/ray/secrets/acr-pull".to_owned(), pull_secret),
        ("GET", "/api/v1/namespaces/ray/secrets/acr-push".to_owned(), push_secret),
        ("PATCH", "/api/v1/namespaces/ray/secrets/buildkit-push-creds".to_owned(),
         r#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"buildkit-push-creds","namespace":"ray"},"type":"Opaque"}"#.to_owned()),
    ];
    let (port, seen) = serve(Mode::Routes(Arc::new(routes)));
    let dir = tempfile::tempdir().unwrap();
    let kc = kubeconfig(dir.path(), port, port);
    let wf = script(
        dir.path(),
        "step(\"merge\");\nlet m = kube::merge_registry_secrets([\"acr-pull\", \"acr-push\"], \"buildkit-push-creds\");\nprint(m);\nreport::pass(\"merged\", `${m}`);\n",
    );
    let out = dir.path().join("out");
    let o = rdmakit()
        .args(["-vvv", "run"])
        .arg(&wf)
        .arg("--out")
        .arg(&out)
        .env("KUBECONFIG", &kc)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{stderr}");
    assert!(
        seen.lock()
            .unwrap()
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
    let (port, _) = serve(Mode::NotFound);
    let dir = tempfile::tempdir().unwrap();
    let kc = kubeconfig(dir.path(), port, port);
    for (body, code, verdict) in [
        ("report::pass(\"a\", \"fine\");", 0, "pass"),
        (
            "report::pass(\"a\", \"fine\");\nreport::fail(\"b\", \"broken\");",
            1,
            "fail",
        ),
        ("throw \"stop\";", 2, "error"),
    ] {
        let wf = script(dir.path(), &format!("step(\"s\");\n{body}\n"));
        let out = dir.path().join("out");
        let o = rdmakit()
            .arg("run")
            .arg(&wf)
            .arg("--out")
            .arg(&out)
            .env("KUBECONFIG", &kc)
            .output()
            .unwrap();
        assert_eq!(
            o.status.code(),
            Some(code),
            "{body}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let report: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap())
                .unwrap();
        assert_eq!(report["verdict"], verdict, "{body}");
    }
}

#[test]
fn one_retry_policy_a_503_is_tried_four_times_not_thirteen() {
    let (port, seen) = serve(Mode::Unavailable);
    let dir = tempfile::tempdir().unwrap();
    let kc = kubeconfig(dir.path(), port, port);
    let wf = script(
        dir.path(),
        "step(\"read a log\");\nkube::logs(\"worker-0\");\n",
    );
    let o = rdmakit()
        .arg("run")
        .arg(&wf)
        .arg("--out")
        .arg(dir.path().join("out"))
        .env("KUBECONFIG", &kc)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("503"), "{stderr}");
    let log_reads = seen
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.contains("/pods/worker-0/log"))
        .count();
    // rdmakit's own policy (4 attempts), without kube's RetryLayer multiplying it.
    assert_eq!(log_reads, 4, "{:?}", seen.lock().unwrap());
}
