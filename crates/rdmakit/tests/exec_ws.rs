//! Exec and cp through the live executor against a fake API server that speaks Kubernetes' websocket
//! exec protocol (v5.channel.k8s.io: stdin 0, stdout 1, stderr 2, status 3, close 255) over a real TCP
//! connection: stdout/stderr/exit codes (a missing status is an error), `env`, the file `cp` streams over
//! stdin and the byte count it checks, and a deadline on a
//! command that never ends.
#![allow(clippy::unwrap_used)] // helpers outside #[test] fns unwrap too: a failure is a test failure

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::fake_api::{self, Reply, Seen};
use futures::{SinkExt, StreamExt};
use rdmakit::cancel::Cancel;
use rdmakit::error::ExecError;
use rdmakit::exec::kube::KubeExecutor;
use rdmakit::exec::{CopySpec, ExecSpec, Executor};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::server::{Request, Response};

/// Files written through the fake `cp` (path -> bytes), and every exec URI seen.
#[derive(Default)]
struct Node {
    files: HashMap<String, Vec<u8>>,
    uris: Vec<String>,
    /// Send no status frame (an API server whose exec protocol has none): the exit code is unknown.
    no_status: bool,
    /// Keep only this many bytes of what `cp` streams (a transfer cut short).
    cp_keep: Option<usize>,
    /// `nccl-hang` sessions the client closed.
    hung_closed: usize,
    /// exec_many's ranks started under the PID-recording wrapper: (pod, token).
    ranks: Vec<(String, String)>,
    /// Kills of such ranks: (pod, token).
    killed: Vec<(String, String)>,
}

/// The argv as the workflow gave it: without exec_many's rank wrapper (`sh -c WRAPPER TOKEN`).
fn unwrapped(argv: &[String]) -> String {
    match argv
        .iter()
        .position(|a| a == rdmakit::exec::kube::RANK_WRAPPER)
    {
        Some(i) if i >= 2 && i + 1 < argv.len() => {
            let mut v: Vec<&str> = argv[..i - 2].iter().map(String::as_str).collect();
            v.extend(argv[i + 2..].iter().map(String::as_str));
            v.join(" ")
        }
        _ => argv.join(" "),
    }
}

fn frame(channel: u8, data: &[u8]) -> Message {
    let mut v = vec![channel];
    v.extend_from_slice(data);
    Message::binary(v)
}

fn success() -> Message {
    frame(3, br#"{"metadata":{},"status":"Success"}"#)
}

/// One exec session: the argv comes from the query, the behaviour from argv[0].
#[allow(clippy::result_large_err)] // the handshake callback's error type is tungstenite's, not ours
async fn session(stream: tokio::net::TcpStream, node: Arc<Mutex<Node>>) {
    let uri = Arc::new(Mutex::new(String::new()));
    let uri2 = uri.clone();
    let callback = move |req: &Request, mut resp: Response| {
        *uri2.lock().unwrap() = req.uri().to_string();
        resp.headers_mut().insert(
            "Sec-WebSocket-Protocol",
            "v5.channel.k8s.io".parse().unwrap(),
        );
        Ok(resp)
    };
    let Ok(mut ws) = tokio_tungstenite::accept_hdr_async(stream, callback).await else {
        return;
    };
    let uri = uri.lock().unwrap().clone();
    node.lock().unwrap().uris.push(uri.clone());
    let (no_status, cp_keep) = {
        let n = node.lock().unwrap();
        (n.no_status, n.cp_keep)
    };
    let success = || (!no_status).then(success);
    let argv = fake_api::query_values(&uri, "command");
    // `env K=V cmd...` as the executor sends it.
    let mut cmd: Vec<&str> = argv
        .iter()
        .map(String::as_str)
        .skip_while(|a| *a == "env" || a.contains('='))
        .collect();
    let pod = uri
        .split("/pods/")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .unwrap_or("")
        .to_owned();
    // exec_many's rank wrapper (`sh -c WRAPPER TOKEN cmd...`): the rank is the command after the token.
    if cmd.len() > 4 && cmd[0] == "sh" && cmd[2] == rdmakit::exec::kube::RANK_WRAPPER {
        node.lock()
            .unwrap()
            .ranks
            .push((pod.clone(), cmd[3].to_owned()));
        cmd.drain(..4);
    }
    if cmd.len() == 4 && cmd[0] == "sh" && cmd[2] == rdmakit::exec::kube::RANK_KILL {
        node.lock()
            .unwrap()
            .killed
            .push((pod.clone(), cmd[3].to_owned()));
        let _ = ws.send(frame(1, b"stopped pid 4242 (SIGTERM)\n")).await;
        if let Some(m) = success() {
            let _ = ws.send(m).await;
        }
        let _ = ws.close(None).await;
        return;
    }
    match cmd.first().copied() {
        Some("sh") if argv.iter().any(|a| a == "rdmakit-cp") => {
            // cp: stdin until the close-stdin frame, into the path after the marker.
            let path = argv.last().unwrap().clone();
            let mut data = Vec::new();
            while let Some(Ok(m)) = ws.next().await {
                if let Message::Binary(b) = m {
                    match b.first() {
                        Some(0) => data.extend_from_slice(&b[1..]),
                        Some(255) => break,
                        _ => {}
                    }
                }
            }
            if let Some(keep) = cp_keep {
                data.truncate(keep);
            }
            // The executor's command ends with `wc -c < "$1"`.
            let _ = ws
                .send(frame(1, format!("{}\n", data.len()).as_bytes()))
                .await;
            node.lock().unwrap().files.insert(path, data);
            if let Some(m) = success() {
                let _ = ws.send(m).await;
            }
        }
        Some("cat") => {
            let content = node.lock().unwrap().files.get(cmd[1]).cloned();
            match content {
                Some(c) => {
                    let _ = ws.send(frame(1, &c)).await;
                    if let Some(m) = success() {
                        let _ = ws.send(m).await;
                    }
                }
                None => {
                    let _ = ws
                        .send(frame(
                            2,
                            format!("cat: {}: No such file or directory\n", cmd[1]).as_bytes(),
                        ))
                        .await;
                    let _ = ws.send(frame(3, br#"{"metadata":{},"status":"Failure","message":"command terminated with non-zero exit code: exit status 1","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"1"}]}}"#)).await;
                }
            }
        }
        Some("no-such-program") => {
            // What a kubelet sends when the runtime cannot start the command: a Failure with no exit code.
            let _ = ws.send(frame(3, br#"{"metadata":{},"status":"Failure","message":"Internal error occurred: error executing command in container: exec: \"no-such-program\": executable file not found in $PATH","reason":"InternalError","details":{"causes":[{"message":"error executing command in container"}]},"code":500}"#)).await;
        }
        Some("sleep") => {
            // Never answers; the client's deadline must end it.
            while ws.next().await.is_some() {}
        }
        Some("nccl-hang") => {
            // A rank stuck in NCCL init: says so, then waits for a peer forever (until the client leaves).
            let _ = ws
                .send(frame(1, b"NCCL INFO Bootstrap: waiting for rank 1\n"))
                .await;
            while ws.next().await.is_some() {}
            node.lock().unwrap().hung_closed += 1;
        }
        Some("nccl-crash") => {
            // A rank that crashes after a moment.
            tokio::time::sleep(Duration::from_millis(200)).await;
            let _ = ws
                .send(frame(
                    2,
                    b"Caught signal 11 (Segmentation fault) in ncclNetInit\n",
                ))
                .await;
            let _ = ws.send(frame(3, br#"{"metadata":{},"status":"Failure","message":"command terminated with non-zero exit code: exit status 139","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"139"}]}}"#)).await;
        }
        _ => {
            let _ = ws
                .send(frame(1, format!("ran: {}\n", unwrapped(&argv)).as_bytes()))
                .await;
            let _ = ws.send(frame(2, b"a warning on stderr\n")).await;
            if let Some(m) = success() {
                let _ = ws.send(m).await;
            }
        }
    }
    let _ = ws.close(None).await;
}

struct Fake {
    rt: tokio::runtime::Runtime,
    exec: KubeExecutor,
    node: Arc<Mutex<Node>>,
}

/// The fake API server on a port: exec sessions on `node`, nothing else served.
fn fake() -> Fake {
    let node = Arc::new(Mutex::new(Node::default()));
    let on_node = node.clone();
    let api = fake_api::on_port_with_exec(
        Box::new(|s: &Seen| {
            Some(Reply::status(
                404,
                "NotFound",
                &format!("fake: no {}", s.uri),
            ))
        }),
        Arc::new(move |stream| Box::pin(session(stream, on_node.clone()))),
    );
    let exec = KubeExecutor::new(api.client("ray"), api.rt.handle().clone(), Cancel::new());
    Fake {
        rt: api.rt,
        exec,
        node,
    }
}

fn spec(pod: &str, argv: &[&str]) -> ExecSpec {
    ExecSpec {
        pod: pod.into(),
        container: Some("ray-worker".into()),
        command: argv.iter().map(|s| (*s).to_owned()).collect(),
        timeout: Duration::from_secs(10),
        ..ExecSpec::default()
    }
}

#[test]
fn exec_returns_stdout_stderr_and_the_exit_code() {
    let f = fake();
    let mut s = spec("worker-0", &["bash", "-lc", "ulimit -l"]);
    s.env = vec![("NCCL_IB_DISABLE".into(), "1".into())];
    let out = f.exec.exec(&s).unwrap();
    assert_eq!(out.code, 0);
    assert_eq!(
        out.stdout,
        "ran: env NCCL_IB_DISABLE=1 bash -lc ulimit -l\n"
    );
    assert_eq!(out.stderr, "a warning on stderr\n");
    assert!(!out.dry_run);
    let uri = f.node.lock().unwrap().uris[0].clone();
    assert!(
        uri.starts_with("/api/v1/namespaces/ray/pods/worker-0/exec?"),
        "{uri}"
    );
    assert!(uri.contains("container=ray-worker"), "{uri}");
    // A non-zero exit arrives as a Failure status with the code in its causes.
    let out = f.exec.exec(&spec("worker-0", &["cat", "/nope"])).unwrap();
    assert_eq!(out.code, 1);
    assert!(
        out.stderr.contains("No such file or directory"),
        "{}",
        out.stderr
    );
    drop(f.rt);
}

#[test]
fn cp_streams_the_file_over_stdin_and_exec_reads_it_back() {
    let f = fake();
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("rdt_nccl_demo.py");
    // Larger than one websocket frame of stdin.
    let body: String = (0..20_000).map(|i| format!("# line {i}\n")).collect();
    std::fs::write(&local, &body).unwrap();
    let cp = cp_spec(&local);
    f.exec.copy_to(&cp).unwrap();
    assert_eq!(
        f.node
            .lock()
            .unwrap()
            .files
            .get("/tmp/rdt_nccl_demo.py")
            .map(Vec::len),
        Some(body.len())
    );
    let uri = f.node.lock().unwrap().uris[0].clone();
    assert!(
        uri.contains("stdin=true") && uri.contains("container=ray-head"),
        "{uri}"
    );
    let back = f
        .exec
        .exec(&spec("head-0", &["cat", "/tmp/rdt_nccl_demo.py"]))
        .unwrap();
    assert_eq!(back.stdout, body);
    drop(f.rt);
}

#[test]
fn a_command_that_never_ends_hits_the_deadline() {
    let f = fake();
    let mut s = spec("worker-0", &["sleep", "infinity"]);
    s.timeout = Duration::from_millis(500);
    let started = Instant::now();
    let err = f.exec.exec(&s).unwrap_err();
    assert!(matches!(err, ExecError::Timeout { .. }), "{err:?}");
    assert!(
        err.to_string()
            .starts_with("exec in worker-0: timed out after"),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    // exec_many runs its commands side by side under the longest deadline.
    let specs = [
        spec("worker-0", &["echo", "a"]),
        spec("worker-1", &["echo", "b"]),
    ];
    let outs = f.exec.exec_many(&specs).unwrap();
    assert_eq!(outs[0].stdout, "ran: echo a\n");
    assert_eq!(outs[1].stdout, "ran: echo b\n");
    drop(f.rt);
}

#[test]
fn exec_many_stops_the_other_ranks_when_one_fails_and_keeps_every_ranks_output() {
    let f = fake();
    // Rank 0 hangs in NCCL init (timeout 600 s), rank 1 crashes: the call ends with rank 1's crash,
    // not after 600 s.
    let mut hang = spec("worker-0", &["nccl-hang"]);
    hang.timeout = Duration::from_secs(600);
    let mut crash = spec("worker-1", &["nccl-crash"]);
    crash.timeout = Duration::from_secs(600);
    let started = Instant::now();
    let outs = f.exec.exec_many(&[hang, crash]).unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(outs[1].code, 139);
    assert!(!outs[1].cancelled);
    assert!(
        outs[1]
            .stderr
            .contains("Segmentation fault) in ncclNetInit"),
        "{:?}",
        outs[1]
    );
    assert!(outs[0].cancelled, "{:?}", outs[0]);
    assert_eq!(outs[0].code, -1);
    assert_eq!(
        outs[0].stdout, "NCCL INFO Bootstrap: waiting for rank 1\n",
        "what the stopped rank printed is kept"
    );
    let why = outs[0].error.as_deref().unwrap();
    assert!(
        why.contains("stopped because rank 1 (worker-1: exit code 139) failed first"),
        "{why}"
    );
    // The hung rank's stream was closed, not left open.
    let deadline = Instant::now() + Duration::from_secs(5);
    while f.node.lock().unwrap().hung_closed == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(f.node.lock().unwrap().hung_closed, 1);
    // Closing the stream does not stop a process in a container: the stopped rank's command was started
    // under the PID-recording wrapper and killed in its pod; the crashed rank, which ended, was not.
    {
        let n = f.node.lock().unwrap();
        let token = |pod: &str| {
            n.ranks
                .iter()
                .find(|(p, _)| p == pod)
                .map(|(_, t)| t.clone())
                .unwrap()
        };
        assert_eq!(n.ranks.len(), 2, "{:?}", n.ranks);
        assert_ne!(
            token("worker-0"),
            token("worker-1"),
            "each rank has its own PID file"
        );
        assert_eq!(
            n.killed,
            vec![("worker-0".to_owned(), token("worker-0"))],
            "{:?}",
            n.killed
        );
    }
    assert!(
        why.ends_with("; in the pod: stopped pid 4242 (SIGTERM)"),
        "{why}"
    );
    assert!(outs[1].error.is_none(), "{:?}", outs[1]);

    // A rank that times out is that rank's result (its own deadline), and stops the others too.
    let mut slow = spec("worker-0", &["nccl-hang"]);
    slow.timeout = Duration::from_millis(300);
    let mut other = spec("worker-1", &["nccl-hang"]);
    other.timeout = Duration::from_secs(600);
    let started = Instant::now();
    let outs = f.exec.exec_many(&[slow, other]).unwrap();
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(!outs[0].cancelled);
    assert!(
        outs[0]
            .error
            .as_deref()
            .unwrap()
            .contains("timed out after 0.3s"),
        "{:?}",
        outs[0]
    );
    assert!(outs[0].stdout.contains("waiting for rank 1"));
    assert!(outs[1].cancelled);
    // Both are killed in their pods: the timed-out rank still runs there too.
    {
        let n = f.node.lock().unwrap();
        let killed: Vec<&(String, String)> = n.killed.iter().skip(1).collect();
        assert_eq!(killed.len(), 2, "{:?}", n.killed);
        assert!(
            n.ranks[2..].iter().all(|r| n.killed.contains(r)),
            "{:?}",
            n.killed
        );
    }
    assert!(
        outs[0]
            .error
            .as_deref()
            .unwrap()
            .ends_with("; in the pod: stopped pid 4242 (SIGTERM)"),
        "{:?}",
        outs[0]
    );
    drop(f.rt);
}

/// The rank wrapper and the kill, in a real shell: the wrapper records the PID of the command itself (it
/// `exec`s, so the PID is the command's), passes the arguments through untouched, and the kill stops it.
#[test]
fn the_rank_wrapper_records_the_commands_pid_and_the_kill_stops_it() {
    use rdmakit::exec::kube::{RANK_KILL, RANK_WRAPPER};
    use std::process::{Command, Stdio};
    let token = format!("rdmakit-rank-test-{}", std::process::id());
    let pid_file = std::path::PathBuf::from(format!("/tmp/{token}.pid"));
    // Arguments arrive as given (spaces, quotes, a `$`).
    let o = Command::new("sh")
        .args([
            "-c",
            RANK_WRAPPER,
            &token,
            "printf",
            "%s|",
            "a b",
            "it's",
            "$HOME",
        ])
        .output()
        .unwrap();
    assert!(o.status.success());
    assert_eq!(String::from_utf8_lossy(&o.stdout), "a b|it's|$HOME|");
    assert!(pid_file.is_file(), "the wrapper wrote its PID file");
    std::fs::remove_file(&pid_file).unwrap();
    // A rank that would run for a minute: its PID file names the sleep itself, and the kill ends it.
    let mut child = Command::new("sh")
        .args(["-c", RANK_WRAPPER, &token, "sleep", "60"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let child_id = child.id();
    // Reaped as soon as it ends (a container's runtime does that for an exec'd process).
    let waiter = std::thread::spawn(move || child.wait());
    let deadline = Instant::now() + Duration::from_secs(5);
    let pid = loop {
        if let Ok(t) = std::fs::read_to_string(&pid_file)
            && let Ok(p) = t.trim().parse::<u32>()
        {
            break p;
        }
        assert!(Instant::now() < deadline, "no PID file");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(pid, child_id, "the PID is the command's own (exec)");
    let k = Command::new("sh")
        .args(["-c", RANK_KILL, &token])
        .output()
        .unwrap();
    assert!(k.status.success());
    assert_eq!(
        String::from_utf8_lossy(&k.stdout).trim(),
        format!("stopped pid {pid} (SIGTERM)")
    );
    let status = waiter.join().unwrap().unwrap();
    assert!(!status.success(), "the sleep was killed: {status:?}");
    assert!(!pid_file.exists(), "the kill removes the PID file");
    // A second kill finds nothing to do and says so.
    let again = Command::new("sh")
        .args(["-c", RANK_KILL, &token])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&again.stdout).contains("no PID file"));
}

fn cp_spec(local: &std::path::Path) -> CopySpec {
    CopySpec {
        local: local.to_owned(),
        local_display: "bundle/rdt_nccl_demo.py".into(),
        pod: "head-0".into(),
        container: Some("ray-head".into()),
        remote: "/tmp/rdt_nccl_demo.py".into(),
        namespace: None,
        timeout: Duration::from_secs(10),
    }
}

#[test]
fn exec_without_a_status_is_an_error_naming_pod_and_command() {
    let f = fake();
    f.node.lock().unwrap().no_status = true;
    let err = f
        .exec
        .exec(&spec("worker-0", &["bash", "-lc", "ulimit -l"]))
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("worker-0") && msg.contains("bash") && msg.contains("no exit status"),
        "{msg}"
    );
    // So cp does not report success on such a server.
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("demo.py");
    std::fs::write(&local, "print(1)\n").unwrap();
    let err = f.exec.copy_to(&cp_spec(&local)).unwrap_err();
    assert!(err.to_string().contains("no exit status"), "{err}");
    drop(f.rt);
}

/// A command the runtime could not start (the kubelet's InternalError, no exit code) is an error naming
/// the pod, the container and the command, never an exit code a check would blame the pod for.
#[test]
fn an_exec_that_could_not_run_is_an_error_not_an_exit_code() {
    let f = fake();
    let err = f
        .exec
        .exec(&spec("worker-0", &["no-such-program", "--flag"]))
        .unwrap_err();
    assert!(err.is_cluster_error(), "{err:?}");
    let msg = err.to_string();
    for part in [
        "exec in pod worker-0 container ray-worker [no-such-program --flag]",
        "did not run (InternalError)",
        "executable file not found",
    ] {
        assert!(msg.contains(part), "{part:?} in {msg}");
    }
    // A command that ran and exited 1 still comes back with its exit code.
    let out = f.exec.exec(&spec("worker-0", &["cat", "/nope"])).unwrap();
    assert_eq!(out.code, 1);

    // In exec_many the rank that could not run ends the call with that error; its peer is stopped.
    let mut hang = spec("worker-1", &["nccl-hang"]);
    hang.timeout = Duration::from_secs(600);
    let started = Instant::now();
    let err = f
        .exec
        .exec_many(&[hang, spec("worker-0", &["no-such-program"])])
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(30));
    let msg = err.to_string();
    assert!(
        msg.contains("exec in pod worker-0 container ray-worker [no-such-program]")
            && msg.contains("did not run"),
        "{msg}"
    );
    // The hung rank was killed in its pod.
    let killed = f.node.lock().unwrap().killed.clone();
    assert!(
        killed.iter().any(|(pod, _)| pod == "worker-1"),
        "{killed:?}"
    );
    drop(f.rt);
}

#[test]
fn cp_that_arrives_short_fails_with_expected_and_actual_bytes() {
    let f = fake();
    f.node.lock().unwrap().cp_keep = Some(1000);
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("demo.py");
    std::fs::write(&local, vec![b'x'; 5000]).unwrap();
    let err = f.exec.copy_to(&cp_spec(&local)).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("head-0:/tmp/rdt_nccl_demo.py")
            && msg.contains("5000 bytes")
            && msg.contains("1000"),
        "{msg}"
    );
    drop(f.rt);
}
