//! The fake Kubernetes API server the tests talk to. One answering model — a [`Handler`] turns each
//! request it has [`Seen`] into a [`Reply`], or into silence (a hung server) — reached two ways:
//! - [`in_process`]: tower-test's mock service behind kube-rs (the pattern kube-rs uses in its own tests),
//!   for what a real API server will not produce on demand: a 409 or 422 with a given message, 503s that
//!   stop after two tries, a group that is not served, a watch event at a chosen moment;
//! - [`on_port`]: the same handler over HTTP/1.1 on a localhost port, for the CLI run as a subprocess
//!   (it reads a kubeconfig) and for exec and cp, whose websocket upgrade a mock service cannot complete
//!   (an [`ExecSession`] speaks that protocol).
//!
//! A workflow against the in-process server has its exec and cp answered by [`CannedExec`].

use std::future::Future;
use std::pin::Pin;
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
use rdmakit::host::RunOutcome;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

/// One request as the fake server saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    /// Path and query, as sent.
    pub uri: String,
    pub content_type: String,
    pub body: String,
}

impl Seen {
    /// The URI without its query.
    pub fn path(&self) -> &str {
        self.uri.split('?').next().unwrap_or("")
    }

    /// `METHOD URI`, the request line a log of the server would show.
    pub fn line(&self) -> String {
        format!("{} {}", self.method, self.uri)
    }
}

/// What the server answers one request with.
#[derive(Debug, Clone)]
pub struct Reply {
    pub code: u16,
    pub content_type: &'static str,
    pub body: Vec<u8>,
}

impl Reply {
    /// A JSON body.
    pub fn json(code: u16, body: &Value) -> Self {
        Self {
            code,
            content_type: "application/json",
            body: serde_json::to_vec(body).unwrap(),
        }
    }

    /// A plain-text body (a pod's log).
    pub fn text(code: u16, body: impl Into<String>) -> Self {
        Self {
            code,
            content_type: "text/plain",
            body: body.into().into_bytes(),
        }
    }

    /// The API server's refusal: a `Status` object with `code`, `reason` and `message`.
    pub fn status(code: u16, reason: &str, message: &str) -> Self {
        Self::json(code, &status(code, reason, message))
    }
}

/// Answers each request; `None` never answers it (a hung API server: the connection stays open).
pub type Handler = Box<dyn FnMut(&Seen) -> Option<Reply> + Send>;

/// A handler written as `(status code, JSON body)` pairs.
pub fn json(mut answer: impl FnMut(&Seen) -> Option<(u16, Value)> + Send + 'static) -> Handler {
    Box::new(move |s| answer(s).map(|(code, v)| Reply::json(code, &v)))
}

/// A `Status` object as the API server sends it with a refusal.
pub fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message, "reason": reason, "code": code})
}

/// Discovery's answer for `group_version`: its `resources` (APIResource objects).
pub fn resource_list(group_version: &str, resources: Value) -> Value {
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources})
}

/// The decoded values of `key` in the URI's query (`command=a&command=b` gives both, in order).
pub fn query_values(uri: &str, key: &str) -> Vec<String> {
    let prefix = format!("{key}=");
    uri.split_once('?')
        .map(|(_, q)| q)
        .unwrap_or("")
        .split('&')
        .filter_map(|kv| kv.strip_prefix(prefix.as_str()))
        .map(percent_decode)
        .collect()
}

/// Decodes a query value (`%2F` and `+`).
fn percent_decode(s: &str) -> String {
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

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// The fake served in process: a kube client whose requests go to the handler.
pub struct InProcess {
    pub rt: tokio::runtime::Runtime,
    pub client: kube::Client,
    pub seen: Arc<Mutex<Vec<Seen>>>,
}

/// Serves `handler` through tower-test's mock service.
pub fn in_process(mut handler: Handler) -> InProcess {
    let rt = runtime();
    let (svc, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    rt.spawn(async move {
        let mut handle = Box::pin(handle);
        // Requests left unanswered: kept, so their callers wait instead of seeing a dropped connection.
        let mut parked = Vec::new();
        while let Some((req, send)) = handle.as_mut().next_request().await {
            let (parts, body) = req.into_parts();
            let bytes = body.collect_bytes().await.unwrap_or_default();
            let s = Seen {
                method: parts.method.to_string(),
                uri: parts.uri.to_string(),
                content_type: parts
                    .headers
                    .get("content-type")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_owned(),
                body: String::from_utf8_lossy(&bytes).into_owned(),
            };
            log.lock().unwrap().push(s.clone());
            match handler(&s) {
                Some(r) => send.send_response(
                    Response::builder()
                        .status(StatusCode::from_u16(r.code).unwrap())
                        .header("content-type", r.content_type)
                        .body(Body::from(r.body))
                        .unwrap(),
                ),
                None => parked.push(send),
            }
        }
    });
    let client = {
        let _g = rt.enter();
        kube::Client::new(svc, "default")
    };
    InProcess { rt, client, seen }
}

impl InProcess {
    /// The live executor on this client: three attempts 5 ms apart and 20 ms polls, so retries and
    /// waits take milliseconds.
    pub fn executor(&self, cancel: Cancel) -> KubeExecutor {
        KubeExecutor::new(self.client.clone(), self.rt.handle().clone(), cancel)
            .with_retry(RetryPolicy {
                attempts: 3,
                base: Duration::from_millis(5),
            })
            .with_poll_interval(Duration::from_millis(20))
    }

    /// Every request so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

/// One websocket exec session: given the accepted connection (its upgrade request not yet read).
pub type ExecSession =
    Arc<dyn Fn(tokio::net::TcpStream) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// The fake served on a localhost port.
pub struct OnPort {
    pub rt: tokio::runtime::Runtime,
    pub port: u16,
    pub seen: Arc<Mutex<Vec<Seen>>>,
}

/// Serves `handler` over HTTP/1.1 on a free localhost port.
pub fn on_port(handler: Handler) -> OnPort {
    serve(handler, None)
}

/// Serves `exec` for websocket upgrades (exec and cp) and `handler` for every other request.
pub fn on_port_with_exec(handler: Handler, exec: ExecSession) -> OnPort {
    serve(handler, Some(exec))
}

fn serve(handler: Handler, exec: Option<ExecSession>) -> OnPort {
    let rt = runtime();
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let handler = Arc::new(Mutex::new(handler));
    rt.spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (handler, log, exec) = (handler.clone(), log.clone(), exec.clone());
            tokio::spawn(async move {
                match exec {
                    Some(exec) if is_upgrade(&stream).await => exec(stream).await,
                    // With exec served, one request per connection: an exec's upgrade must be the first
                    // request of its connection (the only one `is_upgrade` looks at), not a pooled one's.
                    Some(_) => http(stream, &handler, &log, true).await,
                    None => http(stream, &handler, &log, false).await,
                }
            });
        }
    });
    OnPort { rt, port, seen }
}

impl OnPort {
    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// A kube client for this server with `namespace` as its default.
    pub fn client(&self, namespace: &str) -> kube::Client {
        let mut config = kube::Config::new(self.url().parse().unwrap());
        config.default_namespace = namespace.into();
        let _g = self.rt.enter();
        kube::Client::try_from(config).unwrap()
    }

    /// Every request so far, as `METHOD URI` lines.
    pub fn lines(&self) -> Vec<String> {
        self.seen.lock().unwrap().iter().map(Seen::line).collect()
    }
}

/// Whether the connection's first request asks for a websocket (read without taking it off the stream).
async fn is_upgrade(stream: &tokio::net::TcpStream) -> bool {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match stream.peek(&mut buf).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => n,
        };
        let head = String::from_utf8_lossy(&buf[..n]).to_ascii_lowercase();
        if let Some(end) = head.find("\r\n\r\n") {
            return head[..end].contains("upgrade: websocket");
        }
        if n == buf.len() {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Answers the requests of one keep-alive connection.
async fn http(
    stream: tokio::net::TcpStream,
    handler: &Mutex<Handler>,
    log: &Mutex<Vec<Seen>>,
    close: bool,
) {
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    loop {
        let mut first = String::new();
        if reader.read_line(&mut first).await.unwrap_or(0) == 0 {
            return;
        }
        let (mut len, mut content_type) = (0usize, String::new());
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).await.unwrap_or(0) == 0 || h == "\r\n" {
                break;
            }
            let lower = h.to_ascii_lowercase();
            if let Some(v) = lower.strip_prefix("content-length:") {
                len = v.trim().parse().unwrap_or(0);
            } else if lower.starts_with("content-type:") {
                content_type = h["content-type:".len()..].trim().to_owned();
            }
        }
        let mut body = vec![0u8; len];
        if reader.read_exact(&mut body).await.is_err() {
            return;
        }
        let mut words = first.split_whitespace();
        let s = Seen {
            method: words.next().unwrap_or("").to_owned(),
            uri: words.next().unwrap_or("").to_owned(),
            content_type,
            body: String::from_utf8_lossy(&body).into_owned(),
        };
        log.lock().unwrap().push(s.clone());
        let reply = (handler.lock().unwrap())(&s);
        let Some(r) = reply else {
            // Hung: hold the connection until the client leaves.
            let _ = reader.read_to_end(&mut Vec::new()).await;
            return;
        };
        let code = StatusCode::from_u16(r.code).unwrap();
        let head = format!(
            "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n{}\r\n",
            code.as_u16(),
            code.canonical_reason().unwrap_or(""),
            r.content_type,
            r.body.len(),
            if close { "Connection: close\r\n" } else { "" }
        );
        if write.write_all(head.as_bytes()).await.is_err()
            || write.write_all(&r.body).await.is_err()
            || close
        {
            return;
        }
    }
}

/// What a pod prints for one exec.
pub type Answer = Box<dyn Fn(&ExecSpec) -> ExecOutput + Send + Sync>;

/// The kube executor against the in-process fake with exec answered from `answer` (a mock service cannot
/// complete exec's websocket upgrade) and cp recorded: everything else goes to the fake API server.
pub struct CannedExec {
    pub inner: KubeExecutor,
    pub answer: Answer,
    /// `LOCAL -> POD:REMOTE` for each cp, in order.
    pub copies: Mutex<Vec<String>>,
}

impl CannedExec {
    pub fn new(inner: KubeExecutor, answer: Answer) -> Self {
        Self {
            inner,
            answer,
            copies: Mutex::new(Vec::new()),
        }
    }
}

impl std::fmt::Debug for CannedExec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CannedExec")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl Executor for CannedExec {
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

/// A built-in workflow's run against the in-process fake.
pub struct WorkflowRun {
    pub outcome: RunOutcome,
    /// Every request the fake API server saw.
    pub seen: Vec<Seen>,
    /// The report.md the run wrote (what the script printed is not captured).
    pub report_md: String,
}

/// Runs `scripts/workflows/<name>.rhai` against `handler` with `--set` `params`, answering exec with
/// `answer`.
pub fn run_workflow(
    name: &str,
    handler: Handler,
    answer: Answer,
    params: &[(&str, &str)],
) -> WorkflowRun {
    run_workflow_with(name, handler, answer, params, |_| {})
}

/// [`run_workflow`] with the host configuration changed by `configure` (`--bundle`, say).
pub fn run_workflow_with(
    name: &str,
    handler: Handler,
    answer: Answer,
    params: &[(&str, &str)],
    configure: impl FnOnce(&mut rdmakit::host::HostConfig),
) -> WorkflowRun {
    let api = in_process(handler);
    let exec = Arc::new(CannedExec::new(api.executor(Cancel::new()), answer));
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = super::host_config(dir.path(), params);
    configure(&mut cfg);
    let outcome = super::run(exec, name, &super::workflow_source(name), cfg);
    let seen = api.seen();
    drop(api);
    WorkflowRun {
        outcome,
        seen,
        report_md: std::fs::read_to_string(dir.path().join("report.md")).unwrap(),
    }
}

/// An exec session that accepts the websocket (v5.channel.k8s.io) and sends `status` as its only frame
/// on the status channel: how a kubelet answers an exec whose command it could not start.
#[allow(clippy::result_large_err)] // the handshake callback's error type is tungstenite's, not ours
pub fn exec_answering_status(status: &'static str) -> ExecSession {
    use futures::SinkExt as _;
    use tokio_tungstenite::tungstenite::Message;
    use tokio_tungstenite::tungstenite::handshake::server::{
        Request as WsRequest, Response as WsResponse,
    };
    Arc::new(move |stream| {
        Box::pin(async move {
            let protocol = |_: &WsRequest, mut resp: WsResponse| {
                resp.headers_mut().insert(
                    "Sec-WebSocket-Protocol",
                    "v5.channel.k8s.io".parse().unwrap(),
                );
                Ok(resp)
            };
            let Ok(mut ws) = tokio_tungstenite::accept_hdr_async(stream, protocol).await else {
                return;
            };
            let mut frame = vec![3u8];
            frame.extend_from_slice(status.as_bytes());
            let _ = ws.send(Message::binary(frame)).await;
            let _ = ws.close(None).await;
        })
    })
}

/// [`run_workflow`] with exec going through the live executor's websocket to `session` (a real exec
/// round trip: the status frame, the exit code) and every other request to `handler`, on a port.
pub fn run_workflow_exec_live(
    name: &str,
    handler: Handler,
    session: ExecSession,
    params: &[(&str, &str)],
) -> WorkflowRun {
    let api = on_port_with_exec(handler, session);
    let exec = Arc::new(
        KubeExecutor::new(
            api.client("default"),
            api.rt.handle().clone(),
            Cancel::new(),
        )
        .with_retry(RetryPolicy {
            attempts: 3,
            base: Duration::from_millis(5),
        })
        .with_poll_interval(Duration::from_millis(20)),
    );
    let dir = tempfile::tempdir().unwrap();
    let outcome = super::run(
        exec,
        name,
        &super::workflow_source(name),
        super::host_config(dir.path(), params),
    );
    let seen = api.seen.lock().unwrap().clone();
    drop(api);
    WorkflowRun {
        outcome,
        seen,
        report_md: std::fs::read_to_string(dir.path().join("report.md")).unwrap(),
    }
}
