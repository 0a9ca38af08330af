//! The live executor: kube-rs with server-side apply, discovery, exec/cp over the API, polling waits with
//! a progress spinner, retries with backoff on transient API errors, and deadlines enforced in Rust.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use indicatif::{ProgressBar, ProgressStyle};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{
    ApiResource, AttachParams, DeleteParams, DynamicObject, GroupVersionKind, ListParams,
    LogParams, Patch, PatchParams,
};
use kube::discovery::{ApiCapabilities, Scope};
use kube::{Api, Client, Config};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::wait::{WaitState, evaluate};
use super::{
    Access, CopySpec, ExecOutput, ExecSpec, Executor, FIELD_MANAGER, FieldSpec, ListSpec, LogSpec,
    Manifest, MergeSecretsSpec, MergeSummary, ObjRef, SecretSpec, WaitSpec, api_version_for_kind,
    field_at, missing_api_fix,
};
use crate::cancel::Cancel;
use crate::error::{ConfigError, ExecError};

/// How to reach the cluster (kubectl-like flags).
#[derive(Debug, Clone, Default)]
pub struct ClusterOptions {
    /// Kubeconfig file (`--kubeconfig`); otherwise `$KUBECONFIG`, `~/.kube/config`, or in-cluster config.
    pub kubeconfig: Option<PathBuf>,
    /// Context name (`--context`).
    pub context: Option<String>,
    /// Namespace (`-n`); otherwise the context's namespace or `default`.
    pub namespace: Option<String>,
}

/// A client and where it points; cluster errors name both (`server https://10.0.0.1:6443, context ack`).
#[derive(Clone)]
pub struct Connection {
    /// The client.
    pub client: Client,
    /// The API server URL.
    pub server: String,
    /// The kubeconfig context in use (`None` inside a pod, with the service account).
    pub context: Option<String>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("server", &self.server)
            .field("context", &self.context)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Display for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.context {
            Some(c) => write!(f, "server {}, context {c}", self.server),
            None => write!(f, "server {} (in-cluster service account)", self.server),
        }
    }
}

/// Builds a kube client the way kubectl finds its config: `--kubeconfig`, else `$KUBECONFIG` (a list of
/// files is merged), else `~/.kube/config`, else the in-cluster service account. Everything here is
/// local: a missing or unreadable kubeconfig or an unknown context is a [`ConfigError`] (the user's input),
/// never a cluster error; nothing is sent to the server yet.
pub async fn connect(opts: &ClusterOptions) -> Result<Connection, ConfigError> {
    use kube::config::Kubeconfig;
    let env = std::env::var_os("KUBECONFIG").filter(|v| !v.is_empty());
    let (kc, source) = match (&opts.kubeconfig, &env) {
        (Some(path), _) => (
            Kubeconfig::read_from(path).map_err(|e| ConfigError::Kubeconfig {
                source_name: format!("--kubeconfig {}", path.display()),
                message: e.to_string(),
            })?,
            format!("--kubeconfig {}", path.display()),
        ),
        (None, Some(v)) => {
            let source = format!("$KUBECONFIG ({})", v.to_string_lossy());
            let kc = Kubeconfig::read().map_err(|e| ConfigError::Kubeconfig {
                source_name: source.clone(),
                message: e.to_string(),
            })?;
            (kc, source)
        }
        (None, None) => {
            let home = std::env::home_dir().map(|h| h.join(".kube").join("config"));
            match home.filter(|p| p.exists()) {
                Some(p) => (
                    Kubeconfig::read_from(&p).map_err(|e| ConfigError::Kubeconfig {
                        source_name: p.display().to_string(),
                        message: e.to_string(),
                    })?,
                    p.display().to_string(),
                ),
                None => return in_cluster(opts),
            }
        }
    };
    let known: Vec<String> = kc.contexts.iter().map(|c| c.name.clone()).collect();
    let context = match opts.context.clone().or_else(|| kc.current_context.clone()) {
        Some(c) if known.contains(&c) => c,
        Some(c) => {
            return Err(ConfigError::UnknownContext {
                context: c,
                source_name: source,
                known,
            });
        }
        None => {
            return Err(ConfigError::NoContext {
                source_name: source,
                known,
            });
        }
    };
    let kc_opts = kube::config::KubeConfigOptions {
        context: Some(context.clone()),
        ..Default::default()
    };
    let config = Config::from_custom_kubeconfig(kc, &kc_opts)
        .await
        .map_err(|e| ConfigError::Kubeconfig {
            source_name: format!("{source}, context {context}"),
            message: e.to_string(),
        })?;
    connection(config, opts, Some(context))
}

/// The client for `config`, with `-n` applied.
fn connection(
    mut config: Config,
    opts: &ClusterOptions,
    context: Option<String>,
) -> Result<Connection, ConfigError> {
    if let Some(ns) = &opts.namespace {
        config.default_namespace = ns.clone();
    }
    // One retry policy: the executor's (RetryPolicy, cancellable, logged). kube's own RetryLayer on top
    // of it made one 503 into 13 requests.
    config.default_retry = false;
    let server = config.cluster_url.to_string();
    let client = Client::try_from(config).map_err(|e| ConfigError::Client {
        server: server.clone(),
        message: e.to_string(),
    })?;
    Ok(Connection {
        client,
        server,
        context,
    })
}

/// No kubeconfig anywhere: the pod's service account, or a [`ConfigError::NotFound`].
fn in_cluster(opts: &ClusterOptions) -> Result<Connection, ConfigError> {
    if let Some(c) = &opts.context {
        return Err(ConfigError::UnknownContext {
            context: c.clone(),
            source_name: "no kubeconfig ($KUBECONFIG unset, no ~/.kube/config)".into(),
            known: Vec::new(),
        });
    }
    let config = Config::incluster().map_err(|e| ConfigError::NotFound {
        in_cluster: e.to_string(),
    })?;
    connection(config, opts, None)
}

/// Retry policy for transient API errors.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    /// Total attempts (1 = no retry).
    pub attempts: u32,
    /// First backoff; doubles each retry.
    pub base: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            attempts: 4,
            base: Duration::from_millis(250),
        }
    }
}

/// The kube-rs executor.
pub struct KubeExecutor {
    client: Client,
    handle: tokio::runtime::Handle,
    namespace: String,
    cancel: Cancel,
    retry: RetryPolicy,
    poll: Duration,
    discovered: Mutex<HashMap<(String, String), (ApiResource, ApiCapabilities)>>,
}

impl std::fmt::Debug for KubeExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeExecutor")
            .field("namespace", &self.namespace)
            .field("retry", &self.retry)
            .field("poll", &self.poll)
            .finish_non_exhaustive()
    }
}

fn is_transient(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => matches!(s.code, 429 | 500 | 502 | 503 | 504),
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        _ => false,
    }
}

fn map_kube_err(action: &str, e: kube::Error) -> ExecError {
    match e {
        kube::Error::Api(s) => ExecError::Rejected {
            action: action.to_owned(),
            code: s.code,
            reason: if s.reason.is_empty() {
                "Unknown".into()
            } else {
                s.reason.clone()
            },
            message: if s.message.is_empty() {
                "(no message)".into()
            } else {
                s.message.clone()
            },
        },
        other => ExecError::Transport {
            action: action.to_owned(),
            message: other.to_string(),
        },
    }
}

/// A rejection that no retry or wait changes: a 4xx other than 404 (not there yet), 409 (conflict) and 429
/// (throttled).
fn is_permanent(e: &ExecError) -> bool {
    matches!(e, ExecError::Rejected { code, .. }
        if (400..500).contains(code) && !matches!(code, 404 | 409 | 429))
}

fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

fn spinner(msg: &str) -> ProgressBar {
    let pb = ProgressBar::new_spinner();
    if let Ok(style) = ProgressStyle::with_template("{spinner} {elapsed:>4} {msg}") {
        pb.set_style(style);
    }
    pb.set_message(msg.to_owned());
    pb.enable_steady_tick(Duration::from_millis(150));
    pb
}

impl KubeExecutor {
    /// An executor over `client`. `handle` must belong to a runtime that is not driving the calling thread
    /// (calls block on it); the CLI runs scripts on their own thread for that reason.
    pub fn new(client: Client, handle: tokio::runtime::Handle, cancel: Cancel) -> Self {
        let namespace = client.default_namespace().to_owned();
        Self {
            client,
            handle,
            namespace,
            cancel,
            retry: RetryPolicy::default(),
            poll: Duration::from_secs(2),
            discovered: Mutex::new(HashMap::new()),
        }
    }

    /// Sets the retry policy (tests use a short one).
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Sets the poll interval of waits.
    pub fn with_poll_interval(mut self, poll: Duration) -> Self {
        self.poll = poll;
        self
    }

    /// Runs `fut` on the runtime with a deadline and Ctrl-C cancellation.
    fn block<T>(
        &self,
        action: &str,
        timeout: Duration,
        fut: impl Future<Output = Result<T, ExecError>>,
    ) -> Result<T, ExecError> {
        let cancel = self.cancel.clone();
        self.handle.block_on(async move {
            tokio::select! {
                r = tokio::time::timeout(timeout, fut) => r.unwrap_or_else(|_| Err(ExecError::Timeout {
                    action: action.to_owned(), limit: timeout, hint: String::new(),
                })),
                _ = cancel.cancelled() => Err(ExecError::Cancelled { action: action.to_owned() }),
            }
        })
    }

    async fn retrying<T, F, Fut>(&self, action: &str, f: F) -> Result<T, ExecError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, kube::Error>>,
    {
        self.retrying_raw(action, f)
            .await
            .map_err(|e| map_kube_err(action, e))
    }

    /// Retries transient errors with backoff; the last error comes back as kube's own.
    async fn retrying_raw<T, F, Fut>(&self, action: &str, mut f: F) -> Result<T, kube::Error>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, kube::Error>>,
    {
        let mut delay = self.retry.base;
        let mut attempt = 1;
        loop {
            match f().await {
                Ok(v) => return Ok(v),
                Err(e) if attempt < self.retry.attempts && is_transient(&e) => {
                    tracing::warn!(%action, attempt, error = %e, "transient API error, retrying");
                    tokio::time::sleep(delay).await;
                    delay = delay.saturating_mul(2);
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Finds the API resource for `apiVersion`/`kind` through discovery (cached).
    pub async fn resolve(
        &self,
        api_version: &str,
        kind: &str,
    ) -> Result<(ApiResource, ApiCapabilities), ExecError> {
        let key = (api_version.to_owned(), kind.to_owned());
        if let Some(hit) = self
            .discovered
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
        {
            return Ok(hit.clone());
        }
        let (group, version) = match api_version.split_once('/') {
            Some((g, v)) => (g, v),
            None => ("", api_version),
        };
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let action = format!("discover {api_version} {kind}");
        // Discovery is retried like every other call: a 503 from an aggregated API is not "not served".
        let found = self
            .retrying_raw(&action, || kube::discovery::pinned_kind(&self.client, &gvk))
            .await
            .map_err(|e| match e {
                kube::Error::Discovery(_) => missing(api_version, kind),
                kube::Error::Api(s) if s.code == 404 => missing(api_version, kind),
                other => map_kube_err(&action, other),
            })?;
        self.discovered
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, found.clone());
        Ok(found)
    }

    async fn dyn_api(
        &self,
        api_version: &str,
        kind: &str,
        ns: Option<&str>,
    ) -> Result<Api<DynamicObject>, ExecError> {
        let (ar, caps) = self.resolve(api_version, kind).await?;
        Ok(match caps.scope {
            Scope::Cluster => Api::all_with(self.client.clone(), &ar),
            Scope::Namespaced => {
                Api::namespaced_with(self.client.clone(), ns.unwrap_or(&self.namespace), &ar)
            }
        })
    }

    /// Server-side apply of one object.
    pub async fn apply_object(&self, obj: &Value, source: &str) -> Result<ObjRef, ExecError> {
        let r = ObjRef::from_object(obj, source)?;
        let api = self
            .dyn_api(&r.api_version, &r.kind, r.namespace.as_deref())
            .await?;
        let action = format!("apply {} {r} (from {source})", r.api_version);
        let pp = PatchParams::apply(FIELD_MANAGER).force();
        let patch = Patch::Apply(obj);
        self.retrying(&action, || api.patch(&r.name, &pp, &patch))
            .await?;
        tracing::info!("applied {r}");
        Ok(r)
    }

    async fn list_values(
        &self,
        api_version: &str,
        kind: &str,
        name: Option<&str>,
        selector: Option<&str>,
        ns: Option<&str>,
    ) -> Result<Vec<Value>, ExecError> {
        let api = self.dyn_api(api_version, kind, ns).await?;
        if let Some(n) = name {
            // 404 is "not there (yet)"; transient errors are retried like every other call.
            let action = format!("get {kind}/{n}");
            return match self.retrying(&action, || api.get_opt(n)).await? {
                Some(o) => Ok(vec![
                    serde_json::to_value(o).map_err(|e| ExecError::Input(e.to_string()))?,
                ]),
                None => Ok(vec![]),
            };
        }
        let mut lp = ListParams::default();
        if let Some(s) = selector {
            lp = lp.labels(s);
        }
        let action = format!("list {kind}");
        let list = self.retrying(&action, || api.list(&lp)).await?;
        list.items
            .into_iter()
            .map(|o| serde_json::to_value(o).map_err(|e| ExecError::Input(e.to_string())))
            .collect()
    }

    /// Polls until the wait condition holds (async form; the trait method adds the deadline).
    pub async fn wait_async(&self, spec: &WaitSpec) -> Result<Value, ExecError> {
        let api_version = api_version_for_kind(&spec.kind)
            .ok_or_else(|| ExecError::Input(format!("wait: unknown kind {:?}", spec.kind)))?;
        let target = spec
            .name
            .clone()
            .or_else(|| spec.selector.clone().map(|s| format!("-l {s}")))
            .unwrap_or_default();
        let action = format!("wait for {} {target}", spec.kind);
        let pb = spinner(&action);
        let deadline = Instant::now() + spec.timeout;
        let mut last = String::from("no answer from the API server yet");
        // A watch on the same objects wakes the wait as soon as one changes (kube::runtime's watcher); the
        // state is judged on a fresh list each time. While the watch runs, a list is only the fallback
        // every `poll` x 15; a server (or proxy) that cannot watch falls back to a list every `poll`.
        let mut changes = match self
            .dyn_api(api_version, &spec.kind, spec.namespace.as_deref())
            .await
        {
            Ok(api) => {
                let mut cfg = kube::runtime::watcher::Config::default();
                if let Some(sel) = &spec.selector {
                    cfg = cfg.labels(sel);
                }
                if let Some(n) = &spec.name {
                    cfg = cfg.fields(&format!("metadata.name={n}"));
                }
                Some(kube::runtime::watcher(api, cfg).boxed())
            }
            Err(_) => None,
        };
        let result = loop {
            // A list that hangs past the deadline ends the wait with what was seen before it.
            let list = self.list_values(
                api_version,
                &spec.kind,
                spec.name.as_deref(),
                spec.selector.as_deref(),
                spec.namespace.as_deref(),
            );
            let Ok(objs) =
                tokio::time::timeout(deadline.saturating_duration_since(Instant::now()), list)
                    .await
            else {
                break Err(ExecError::Timeout {
                    action: action.clone(),
                    limit: spec.timeout,
                    hint: format!(" (last seen: {last})"),
                });
            };
            match objs {
                Ok(objs) => match evaluate(spec, &objs) {
                    WaitState::Done(msg) => {
                        let names: Vec<Value> = objs
                            .iter()
                            .filter_map(|o| o.pointer("/metadata/name").cloned())
                            .collect();
                        break Ok(json!({"state": msg, "names": names, "dry_run": false}));
                    }
                    WaitState::Failed(msg) => {
                        break Err(ExecError::Failed {
                            action: action.clone(),
                            message: msg,
                        });
                    }
                    WaitState::Pending(msg) => last = msg,
                },
                Err(e @ ExecError::MissingApi { .. }) => break Err(e),
                // Forbidden, Unauthorized, Invalid...: waiting does not change the answer.
                Err(e) if is_permanent(&e) => break Err(e),
                Err(e) => last = e.to_string(),
            }
            pb.set_message(format!("{action}: {last}"));
            if Instant::now() + self.poll > deadline {
                break Err(ExecError::Timeout {
                    action: action.clone(),
                    limit: spec.timeout,
                    hint: format!(" (last seen: {last})"),
                });
            }
            match changes.as_mut() {
                Some(stream) => {
                    let until = tokio::time::Instant::from_std(
                        (Instant::now() + self.poll * 15).min(deadline),
                    );
                    if !next_change(stream, until).await {
                        tracing::debug!("{action}: no watch; polling every {:?}", self.poll);
                        changes = None;
                    }
                }
                None => tokio::time::sleep(self.poll).await,
            }
        };
        pb.finish_and_clear();
        result
    }

    /// Runs a command in a container over the API (websocket).
    pub async fn exec_async(&self, spec: &ExecSpec) -> Result<ExecOutput, ExecError> {
        let (out, err) = (Mutex::new(Vec::new()), Mutex::new(Vec::new()));
        self.exec_into(spec, &out, &err).await
    }

    /// [`exec_async`](Self::exec_async), with stdout and stderr collected into `out_buf`/`err_buf` as they
    /// arrive: when the future is dropped (another rank failed, a deadline), what the command printed until
    /// then is still there.
    async fn exec_into(
        &self,
        spec: &ExecSpec,
        out_buf: &Mutex<Vec<u8>>,
        err_buf: &Mutex<Vec<u8>>,
    ) -> Result<ExecOutput, ExecError> {
        let pods: Api<Pod> = Api::namespaced(
            self.client.clone(),
            spec.namespace.as_deref().unwrap_or(&self.namespace),
        );
        let mut ap = AttachParams::default()
            .stdin(spec.stdin.is_some())
            .stdout(true)
            .stderr(true);
        if let Some(c) = &spec.container {
            ap = ap.container(c.clone());
        }
        let mut argv: Vec<String> = Vec::new();
        if !spec.env.is_empty() {
            argv.push("env".into());
            argv.extend(spec.env.iter().map(|(k, v)| format!("{k}={v}")));
        }
        argv.extend(spec.command.iter().cloned());
        // The command's own name, not the rank wrapper's `sh`.
        let shown = match spec.command.as_slice() {
            [sh, c, w, _token, cmd, ..] if sh == "sh" && c == "-c" && w == RANK_WRAPPER => {
                cmd.as_str()
            }
            _ => argv.first().map(String::as_str).unwrap_or(""),
        };
        let action = format!("exec in {} [{shown}]", spec.pod);
        let mut proc = pods
            .exec(&spec.pod, argv, &ap)
            .await
            .map_err(|e| map_kube_err(&action, e))?;
        if let (Some(data), Some(mut w)) = (&spec.stdin, proc.stdin()) {
            w.write_all(data).await.map_err(|e| ExecError::Transport {
                action: action.clone(),
                message: e.to_string(),
            })?;
            w.shutdown().await.map_err(|e| ExecError::Transport {
                action: action.clone(),
                message: e.to_string(),
            })?;
        }
        let status = proc.take_status();
        let pb = spec.progress.then(|| spinner(&action));
        let (out_reader, err_reader) = (proc.stdout(), proc.stderr());
        let lock =
            |b: &Mutex<Vec<u8>>| -> Vec<u8> { b.lock().unwrap_or_else(|e| e.into_inner()).clone() };
        let stdout = pump(out_reader, out_buf, |chunk| {
            if let Some(pb) = &pb {
                let text = String::from_utf8_lossy(chunk).into_owned();
                if let Some(line) = text.lines().rev().find(|l| !l.trim().is_empty()) {
                    pb.set_message(line.chars().take(120).collect::<String>());
                }
            }
        });
        let stderr = pump(err_reader, err_buf, |_| {});
        tokio::join!(stdout, stderr);
        let (out, err) = (lock(out_buf), lock(err_buf));
        if let Some(pb) = pb {
            pb.finish_and_clear();
        }
        let status = match status {
            Some(s) => s.await,
            None => None,
        };
        let _ = proc.join().await;
        let mut stderr = String::from_utf8_lossy(&err).into_owned();
        let code = match status {
            // The exit code travels only in the status frame; without it the command may have failed.
            None => {
                return Err(ExecError::Transport {
                    action: format!(
                        "exec in {} [{}]",
                        spec.pod,
                        spec.command.join(" ").chars().take(80).collect::<String>()
                    ),
                    message: "the API server sent no exit status (an exec protocol without a status \
                              channel, or the connection closed early): the command's outcome is unknown"
                        .into(),
                });
            }
            Some(s) if s.status.as_deref() == Some("Success") => 0,
            Some(s) => {
                // Non-zero exits arrive as Failure/NonZeroExitCode with the code in details.causes.
                let code = s
                    .details
                    .as_ref()
                    .and_then(|d| d.causes.as_ref())
                    .and_then(|cs| cs.iter().find(|c| c.reason.as_deref() == Some("ExitCode")))
                    .and_then(|c| c.message.as_deref())
                    .and_then(|m| m.parse::<i64>().ok());
                if code.is_none() {
                    stderr.push_str(
                        s.message
                            .as_deref()
                            .unwrap_or("the command failed without an exit code"),
                    );
                }
                code.unwrap_or(-1)
            }
        };
        Ok(ExecOutput {
            stdout: String::from_utf8_lossy(&out).into_owned(),
            stderr,
            code,
            ..ExecOutput::default()
        })
    }
}

/// Waits for the next change a watch reports (an object applied or deleted; the watcher's own initial
/// listing is not a change), or for `until`. False when the watch failed or ended: the caller polls instead.
async fn next_change<S>(stream: &mut S, until: tokio::time::Instant) -> bool
where
    S: futures::Stream<
            Item = Result<
                kube::runtime::watcher::Event<DynamicObject>,
                kube::runtime::watcher::Error,
            >,
        > + Unpin,
{
    use futures::StreamExt as _;
    use kube::runtime::watcher::Event;
    loop {
        match tokio::time::timeout_at(until, stream.next()).await {
            Err(_) => return true,
            Ok(Some(Ok(Event::Apply(_) | Event::Delete(_)))) => return true,
            Ok(Some(Ok(_))) => continue,
            Ok(Some(Err(_)) | None) => return false,
        }
    }
}

/// Reads `reader` to its end into `buf` as the bytes arrive, showing each chunk to `seen`.
async fn pump(
    reader: Option<impl tokio::io::AsyncRead + Unpin>,
    buf: &Mutex<Vec<u8>>,
    mut seen: impl FnMut(&[u8]),
) {
    let Some(mut r) = reader else { return };
    let mut chunk = [0u8; 8192];
    while let Ok(n) = r.read(&mut chunk).await {
        if n == 0 {
            break;
        }
        buf.lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(&chunk[..n]);
        seen(&chunk[..n]);
    }
}

/// How `exec_many` starts each of several ranks: `sh -c RANK_WRAPPER TOKEN argv...` writes the shell's PID
/// to `/tmp/TOKEN.pid` and `exec`s the command, which keeps that PID. Closing an exec stream does not stop
/// the process it started in the container, so a rank stopped because another failed (or that timed out)
/// is killed in its pod through the PID ([`RANK_KILL`]). A pod without a writable /tmp still runs the
/// command; only the kill then has nothing to go by.
pub const RANK_WRAPPER: &str = "{ echo $$ > \"/tmp/$0.pid\"; } 2>/dev/null; exec \"$@\"";

/// `sh -c RANK_KILL TOKEN`: stops the rank [`RANK_WRAPPER`] started as TOKEN: SIGTERM, up to 5 s for it to
/// end, then SIGKILL; prints what it did and removes the PID file.
pub const RANK_KILL: &str = "f=\"/tmp/$0.pid\"; p=$(cat \"$f\" 2>/dev/null) || { echo \"no PID file $f: the command may still run\"; exit 0; }; \
if ! kill -TERM \"$p\" 2>/dev/null; then rm -f \"$f\"; echo \"pid $p had already ended\"; exit 0; fi; \
i=0; while kill -0 \"$p\" 2>/dev/null && [ \"$i\" -lt 5 ]; do sleep 1; i=$((i+1)); done; \
if kill -KILL \"$p\" 2>/dev/null; then echo \"killed pid $p (SIGKILL: it ignored SIGTERM for 5 s)\"; else echo \"stopped pid $p (SIGTERM)\"; fi; rm -f \"$f\"";

/// How long the kill of one stopped rank may take (the TERM grace, the exec round trips).
const RANK_KILL_TIMEOUT: Duration = Duration::from_secs(20);

/// A token unique to this process and call, per rank: the name of the rank's PID file in its pod.
fn rank_tokens(n: usize) -> Vec<String> {
    static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    (0..n)
        .map(|i| format!("rdmakit-rank-{}-{call}-{i}", std::process::id()))
        .collect()
}

/// `spec` run under [`RANK_WRAPPER`] as `token`.
pub(crate) fn wrapped_rank(spec: &ExecSpec, token: &str) -> ExecSpec {
    let mut command = vec![
        "sh".to_owned(),
        "-c".to_owned(),
        RANK_WRAPPER.to_owned(),
        token.to_owned(),
    ];
    command.extend(spec.command.iter().cloned());
    ExecSpec {
        command,
        ..spec.clone()
    }
}

/// The exec that stops the rank started as `token` in `spec`'s pod and container.
pub(crate) fn rank_kill(spec: &ExecSpec, token: &str) -> ExecSpec {
    ExecSpec {
        pod: spec.pod.clone(),
        container: spec.container.clone(),
        namespace: spec.namespace.clone(),
        command: vec![
            "sh".to_owned(),
            "-c".to_owned(),
            RANK_KILL.to_owned(),
            token.to_owned(),
        ],
        timeout: RANK_KILL_TIMEOUT,
        ..ExecSpec::default()
    }
}

/// A rank's stdout and stderr as they arrive.
type Captured = (Mutex<Vec<u8>>, Mutex<Vec<u8>>);

/// One rank's result from what it printed and how it ended (`None`: stopped because `failed` did).
/// `killed`: what stopping the rank's command in its pod did, for a rank that did not end on its own.
fn rank_output(
    spec: &ExecSpec,
    out: &Mutex<Vec<u8>>,
    err: &Mutex<Vec<u8>>,
    ended: Option<Result<ExecOutput, ExecError>>,
    failed: Option<&str>,
    killed: Option<String>,
) -> ExecOutput {
    let text = |b: &Mutex<Vec<u8>>| {
        String::from_utf8_lossy(&b.lock().unwrap_or_else(|e| e.into_inner())).into_owned()
    };
    let in_pod = killed
        .map(|k| format!("; in the pod: {k}"))
        .unwrap_or_default();
    match ended {
        Some(Ok(o)) => o,
        Some(Err(e)) => ExecOutput {
            stdout: text(out),
            stderr: text(err),
            code: -1,
            error: Some(format!("{e}{in_pod}")),
            ..ExecOutput::default()
        },
        None => ExecOutput {
            stdout: text(out),
            stderr: text(err),
            code: -1,
            error: Some(format!(
                "exec in {}: stopped because {} failed first{in_pod}",
                spec.pod,
                failed.unwrap_or("another rank")
            )),
            cancelled: true,
            ..ExecOutput::default()
        },
    }
}

/// What the kill exec of a stopped rank reported, in one line.
fn kill_outcome(r: Result<ExecOutput, ExecError>) -> String {
    match r {
        Ok(o) if o.code == 0 => {
            let t = o.stdout.trim();
            if t.is_empty() {
                "kill sent".to_owned()
            } else {
                t.to_owned()
            }
        }
        Ok(o) => format!(
            "the kill exited {}: {} (the command may still run)",
            o.code,
            o.stderr.trim()
        ),
        Err(e) => format!("could not kill it ({e}); the command may still run"),
    }
}

fn missing(api_version: &str, kind: &str) -> ExecError {
    ExecError::MissingApi {
        api_version: api_version.to_owned(),
        kind: kind.to_owned(),
        fix: missing_api_fix(kind),
    }
}

/// Merges the `auths` of several docker config JSON documents; later ones win per registry.
pub fn merge_docker_configs(configs: &[(String, Vec<u8>)]) -> Result<Value, ExecError> {
    let mut auths = serde_json::Map::new();
    for (name, bytes) in configs {
        let v: Value = serde_json::from_slice(bytes).map_err(|e| {
            ExecError::Input(format!("secret/{name}: .dockerconfigjson is not valid JSON ({e}); recreate it with `kubectl create secret docker-registry`"))
        })?;
        let Some(a) = v.get("auths").and_then(Value::as_object) else {
            return Err(ExecError::Input(format!(
                "secret/{name}: .dockerconfigjson has no \"auths\" object"
            )));
        };
        for (k, v) in a {
            auths.insert(k.clone(), v.clone());
        }
    }
    Ok(json!({ "auths": auths }))
}

impl Executor for KubeExecutor {
    fn is_dry_run(&self) -> bool {
        false
    }

    fn begin_step(&self, name: &str) {
        eprintln!("==> {name}");
    }

    fn has_api(&self, api_version: &str, kind: &str, timeout: Duration) -> Result<bool, ExecError> {
        self.block(&format!("discover {api_version} {kind}"), timeout, async {
            match self.resolve(api_version, kind).await {
                Ok(_) => Ok(true),
                Err(ExecError::MissingApi { .. }) => Ok(false),
                Err(e) => Err(e),
            }
        })
    }

    fn apply(&self, manifest: &Manifest, timeout: Duration) -> Result<Vec<ObjRef>, ExecError> {
        // Validate every object first, so a bad document does not leave the file half-applied.
        for o in &manifest.objects {
            ObjRef::from_object(o, &manifest.display_path)?;
        }
        self.block(
            &format!("apply {}", manifest.display_path),
            timeout,
            async {
                let mut done = Vec::new();
                for o in &manifest.objects {
                    done.push(self.apply_object(o, &manifest.display_path).await?);
                }
                Ok(done)
            },
        )
    }

    fn apply_if_absent(
        &self,
        manifest: &Manifest,
        timeout: Duration,
    ) -> Result<(Vec<ObjRef>, Vec<ObjRef>), ExecError> {
        for o in &manifest.objects {
            ObjRef::from_object(o, &manifest.display_path)?;
        }
        self.block(
            &format!("apply {} (if absent)", manifest.display_path),
            timeout,
            async {
                let (mut applied, mut present) = (Vec::new(), Vec::new());
                for o in &manifest.objects {
                    let r = ObjRef::from_object(o, &manifest.display_path)?;
                    let api = self
                        .dyn_api(&r.api_version, &r.kind, r.namespace.as_deref())
                        .await?;
                    let action = format!("get {r}");
                    if self
                        .retrying(&action, || api.get_opt(&r.name))
                        .await?
                        .is_some()
                    {
                        tracing::info!("{r} is already there: left as it is");
                        present.push(r);
                    } else {
                        applied.push(self.apply_object(o, &manifest.display_path).await?);
                    }
                }
                Ok((applied, present))
            },
        )
    }

    fn denied(&self, needed: &[Access], timeout: Duration) -> Result<Vec<Access>, ExecError> {
        use k8s_openapi::api::authorization::v1::{
            ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
        };
        self.block("check permissions", timeout, async {
            let reviews: Api<SelfSubjectAccessReview> = Api::all(self.client.clone());
            let pp = kube::api::PostParams::default();
            let mut denied = Vec::new();
            for a in needed {
                // A kind the cluster does not serve is not a permission question (its action names the CRD).
                let Ok((ar, caps)) = self.resolve(&a.api_version, &a.kind).await else {
                    continue;
                };
                let namespace = match caps.scope {
                    Scope::Cluster => None,
                    Scope::Namespaced => Some(
                        a.namespace
                            .clone()
                            .unwrap_or_else(|| self.namespace.clone()),
                    ),
                };
                let review = SelfSubjectAccessReview {
                    spec: SelfSubjectAccessReviewSpec {
                        resource_attributes: Some(ResourceAttributes {
                            verb: Some(a.verb.clone()),
                            group: Some(ar.group.clone()),
                            resource: Some(ar.plural.clone()),
                            subresource: a.subresource.clone(),
                            namespace: namespace.clone(),
                            ..Default::default()
                        }),
                        ..Default::default()
                    },
                    ..Default::default()
                };
                let action = format!("check permission to {a}");
                match self
                    .retrying_raw(&action, || reviews.create(&pp, &review))
                    .await
                {
                    Ok(r) if r.status.as_ref().is_some_and(|s| !s.allowed) => denied.push(Access {
                        namespace,
                        ..a.clone()
                    }),
                    Ok(_) => {}
                    Err(e) => {
                        // No authorization API (or not allowed to ask): the actions will say what fails.
                        tracing::info!("permission pre-check skipped: {e}");
                        return Ok(Vec::new());
                    }
                }
            }
            Ok(denied)
        })
    }

    fn delete(&self, manifest: &Manifest, timeout: Duration) -> Result<Vec<ObjRef>, ExecError> {
        self.block(
            &format!("delete {}", manifest.display_path),
            timeout,
            async {
                let mut done = Vec::new();
                let mut going = Vec::new();
                // Reverse order: dependents before what they depend on.
                for o in manifest.objects.iter().rev() {
                    let r = ObjRef::from_object(o, &manifest.display_path)?;
                    let api = match self
                        .dyn_api(&r.api_version, &r.kind, r.namespace.as_deref())
                        .await
                    {
                        Ok(api) => api,
                        Err(ExecError::MissingApi { .. }) => continue,
                        Err(e) => return Err(e),
                    };
                    match api.delete(&r.name, &DeleteParams::background()).await {
                        Ok(answer) => {
                            // The object came back (finalizers, a grace period): it is still going;
                            // wait below until it is gone. A Status means it already is.
                            if let Some(uid) = answer.left().and_then(|obj| obj.metadata.uid) {
                                going.push((api, r.clone(), uid));
                            }
                            done.push(r);
                        }
                        Err(e) if is_not_found(&e) => {}
                        Err(e) => return Err(map_kube_err(&format!("delete {r}"), e)),
                    }
                }
                // A delete is done when the object is gone (or replaced by a new one of the same name), as
                // kube-rs' `conditions::is_deleted` judges through a watch; the caller's deadline bounds it.
                for (api, r, uid) in going {
                    kube::runtime::wait::await_condition(
                        api,
                        &r.name,
                        kube::runtime::wait::conditions::is_deleted(&uid),
                    )
                    .await
                    .map_err(|e| ExecError::Transport {
                        action: format!("wait for {r} to be deleted"),
                        message: e.to_string(),
                    })?;
                }
                Ok(done)
            },
        )
    }

    fn wait(&self, spec: &WaitSpec) -> Result<Value, ExecError> {
        // wait_async enforces the deadline itself (with the last observed state); the outer limit is a backstop.
        self.block(
            &format!("wait for {}", spec.kind),
            spec.timeout + self.poll + Duration::from_secs(5),
            self.wait_async(spec),
        )
    }

    fn exec(&self, spec: &ExecSpec) -> Result<ExecOutput, ExecError> {
        self.block(
            &format!("exec in {}", spec.pod),
            spec.timeout,
            self.exec_async(spec),
        )
    }

    fn exec_many(&self, specs: &[ExecSpec]) -> Result<Vec<ExecOutput>, ExecError> {
        use futures::StreamExt as _;
        // Each rank has its own deadline; this outer one (later by the time the kills may take) only
        // guards the whole.
        let limit = specs
            .iter()
            .map(|s| s.timeout)
            .max()
            .unwrap_or(Duration::from_secs(60))
            + RANK_KILL_TIMEOUT
            + Duration::from_secs(5);
        // Several ranks run under the PID-recording wrapper, so the ones stopped early can be killed.
        let tokens = rank_tokens(specs.len());
        let several = specs.len() > 1;
        let run: Vec<ExecSpec> = if several {
            specs
                .iter()
                .zip(&tokens)
                .map(|(s, t)| wrapped_rank(s, t))
                .collect()
        } else {
            specs.to_vec()
        };
        let specs = run.as_slice();
        self.block(&format!("{} parallel execs", specs.len()), limit, async {
            let bufs: Vec<Captured> = specs
                .iter()
                .map(|_| (Mutex::new(Vec::new()), Mutex::new(Vec::new())))
                .collect();
            let mut ended: Vec<Option<Result<ExecOutput, ExecError>>> =
                specs.iter().map(|_| None).collect();
            let mut failed = None;
            {
                let mut running: futures::stream::FuturesUnordered<_> = specs
                    .iter()
                    .zip(&bufs)
                    .enumerate()
                    .map(|(i, (spec, (out, err)))| async move {
                        let r = tokio::time::timeout(spec.timeout, self.exec_into(spec, out, err))
                            .await
                            .unwrap_or_else(|_| {
                                Err(ExecError::Timeout {
                                    action: format!("exec in {}", spec.pod),
                                    limit: spec.timeout,
                                    hint: String::new(),
                                })
                            });
                        (i, r)
                    })
                    .collect();
                while let Some((i, r)) = running.next().await {
                    let bad = match &r {
                        Ok(o) => (o.code != 0).then(|| format!("exit code {}", o.code)),
                        Err(e) => Some(e.to_string()),
                    };
                    ended[i] = Some(r);
                    if let Some(why) = bad {
                        failed = Some(format!("rank {i} ({}: {why})", specs[i].pod));
                        break;
                    }
                }
                // Dropping the rest closes their streams; their commands keep running in the pods.
            }
            // A rank without an exit code of its own (stopped, timed out, cut off) may still run in its
            // pod: kill it there, all at once.
            let kills = futures::future::join_all(specs.iter().zip(&tokens).zip(&ended).map(
                |((spec, token), e)| async move {
                    if !several || matches!(e, Some(Ok(_))) {
                        return None;
                    }
                    let kill = rank_kill(spec, token);
                    let r = tokio::time::timeout(kill.timeout, self.exec_async(&kill))
                        .await
                        .unwrap_or_else(|_| {
                            Err(ExecError::Timeout {
                                action: format!("kill in {}", spec.pod),
                                limit: kill.timeout,
                                hint: String::new(),
                            })
                        });
                    Some(kill_outcome(r))
                },
            ))
            .await;
            Ok(specs
                .iter()
                .zip(&bufs)
                .zip(ended)
                .zip(kills)
                .map(|(((spec, (out, err)), e), k)| {
                    rank_output(spec, out, err, e, failed.as_deref(), k)
                })
                .collect())
        })
    }

    fn get_field(&self, spec: &FieldSpec) -> Result<String, ExecError> {
        let api_version = api_version_for_kind(&spec.kind)
            .ok_or_else(|| ExecError::Input(format!("get: unknown kind {:?}", spec.kind)))?;
        let action = format!("read {} of {}/{}", spec.path, spec.kind, spec.name);
        self.block(&action, spec.timeout, async {
            let objs = self
                .list_values(
                    api_version,
                    &spec.kind,
                    Some(&spec.name),
                    None,
                    spec.namespace.as_deref(),
                )
                .await?;
            let obj = objs.first().ok_or_else(|| ExecError::Failed {
                action: action.clone(),
                message: format!("{}/{} not found", spec.kind, spec.name),
            })?;
            field_at(obj, &spec.path).ok_or_else(|| ExecError::Failed {
                action: action.clone(),
                message: format!("{}/{} has no {}", spec.kind, spec.name, spec.path),
            })
        })
    }

    fn copy_to(&self, spec: &CopySpec) -> Result<(), ExecError> {
        let data = std::fs::read(&spec.local).map_err(|e| ExecError::io(&spec.local, e))?;
        let expected = data.len();
        let exec = ExecSpec {
            pod: spec.pod.clone(),
            container: spec.container.clone(),
            command: vec![
                "sh".into(),
                "-c".into(),
                "mkdir -p \"$(dirname \"$1\")\" && cat > \"$1\" && wc -c < \"$1\"".into(),
                "rdmakit-cp".into(),
                spec.remote.clone(),
            ],
            stdin: Some(data),
            namespace: spec.namespace.clone(),
            timeout: spec.timeout,
            ..ExecSpec::default()
        };
        let out = self.exec(&exec)?;
        let action = || {
            format!(
                "copy {} to {}:{}",
                spec.local_display, spec.pod, spec.remote
            )
        };
        if out.code != 0 {
            return Err(ExecError::Failed {
                action: action(),
                message: format!("exit code {}: {}", out.code, out.stderr.trim()),
            });
        }
        // What arrived, as the pod counts it: a transfer cut short must not pass.
        let arrived = out.stdout.trim();
        if arrived.parse::<usize>().ok() != Some(expected) {
            return Err(ExecError::Failed {
                action: action(),
                message: format!(
                    "expected {expected} bytes, the pod has {}",
                    if arrived.is_empty() {
                        "no byte count"
                    } else {
                        arrived
                    }
                ),
            });
        }
        Ok(())
    }

    fn logs(&self, spec: &LogSpec) -> Result<String, ExecError> {
        let pods: Api<Pod> = Api::namespaced(
            self.client.clone(),
            spec.namespace.as_deref().unwrap_or(&self.namespace),
        );
        let lp = LogParams {
            container: spec.container.clone(),
            tail_lines: spec.tail,
            ..LogParams::default()
        };
        let action = format!("logs of {}", spec.pod);
        self.block(&action, spec.timeout, async {
            self.retrying(&action, || pods.logs(&spec.pod, &lp)).await
        })
    }

    fn list(&self, spec: &ListSpec) -> Result<Vec<Value>, ExecError> {
        self.block(
            &format!("list {}", spec.kind),
            spec.timeout,
            self.list_values(
                &spec.api_version,
                &spec.kind,
                None,
                spec.selector.as_deref(),
                spec.namespace.as_deref(),
            ),
        )
    }

    fn merge_registry_secrets(&self, spec: &MergeSecretsSpec) -> Result<MergeSummary, ExecError> {
        let ns = spec
            .namespace
            .clone()
            .unwrap_or_else(|| self.namespace.clone());
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), &ns);
        self.block(&format!("merge registry credentials into secret/{}", spec.target), spec.timeout, async {
            let mut configs = Vec::new();
            for name in &spec.sources {
                let action = format!("read secret/{name}");
                let s = self.retrying(&action, || secrets.get(name)).await?;
                let ty = s.type_.clone().unwrap_or_default();
                if ty != "kubernetes.io/dockerconfigjson" {
                    return Err(ExecError::Input(format!(
                        "secret/{name} has type {ty:?}, expected kubernetes.io/dockerconfigjson (create it with `kubectl create secret docker-registry`)"
                    )));
                }
                let bytes = s
                    .data
                    .as_ref()
                    .and_then(|d| d.get(".dockerconfigjson"))
                    .map(|b| b.0.clone())
                    .ok_or_else(|| ExecError::Input(format!("secret/{name} has no .dockerconfigjson key")))?;
                configs.push((name.clone(), bytes));
            }
            let merged = merge_docker_configs(&configs)?;
            let sensitive = sensitive_in_docker_configs(&configs, &merged);
            let registries: Vec<String> = merged
                .get("auths")
                .and_then(Value::as_object)
                .map(|m| m.keys().cloned().collect())
                .unwrap_or_default();
            let body = serde_json::to_vec(&merged).map_err(|e| ExecError::Input(e.to_string()))?;
            let secret = Secret {
                metadata: kube::api::ObjectMeta {
                    name: Some(spec.target.clone()),
                    labels: Some(BTreeMap::from([("app.kubernetes.io/managed-by".to_owned(), "rdmakit".to_owned())])),
                    ..Default::default()
                },
                type_: Some("Opaque".into()),
                data: Some(BTreeMap::from([(spec.key.clone(), ByteString(body))])),
                ..Default::default()
            };
            let mut value = serde_json::to_value(&secret).map_err(|e| ExecError::Input(e.to_string()))?;
            if let Some(o) = value.as_object_mut() {
                o.insert("apiVersion".into(), "v1".into());
                o.insert("kind".into(), "Secret".into());
            }
            let action = format!("apply secret/{}", spec.target);
            let pp = PatchParams::apply(FIELD_MANAGER).force();
            let patch = Patch::Apply(&value);
            self.retrying(&action, || secrets.patch(&spec.target, &pp, &patch)).await?;
            Ok(MergeSummary { target: spec.target.clone(), registries, dry_run: false, sensitive })
        })
    }

    fn apply_secret(&self, spec: &SecretSpec) -> Result<ObjRef, ExecError> {
        let ns = spec
            .namespace
            .clone()
            .unwrap_or_else(|| self.namespace.clone());
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), &ns);
        let action = format!("apply secret/{}", spec.name);
        self.block(&action, spec.timeout, async {
            let secret = Secret {
                metadata: kube::api::ObjectMeta {
                    name: Some(spec.name.clone()),
                    labels: Some(BTreeMap::from([(
                        "app.kubernetes.io/managed-by".to_owned(),
                        "rdmakit".to_owned(),
                    )])),
                    ..Default::default()
                },
                type_: Some("Opaque".into()),
                data: Some(
                    spec.data
                        .iter()
                        .map(|(k, v)| (k.clone(), ByteString(v.expose().as_bytes().to_vec())))
                        .collect(),
                ),
                ..Default::default()
            };
            let mut value =
                serde_json::to_value(&secret).map_err(|e| ExecError::Input(e.to_string()))?;
            if let Some(o) = value.as_object_mut() {
                o.insert("apiVersion".into(), "v1".into());
                o.insert("kind".into(), "Secret".into());
            }
            let pp = PatchParams::apply(FIELD_MANAGER).force();
            let patch = Patch::Apply(&value);
            self.retrying(&action, || secrets.patch(&spec.name, &pp, &patch))
                .await?;
            Ok(ObjRef {
                api_version: "v1".into(),
                kind: "Secret".into(),
                name: spec.name.clone(),
                namespace: Some(ns.clone()),
            })
        })
    }
}

/// What a run must redact after a merge: each source's config text, every credential field in it
/// (`auth`, `password`, `identitytoken`, `registrytoken`) and the merged text.
fn sensitive_in_docker_configs(
    configs: &[(String, Vec<u8>)],
    merged: &Value,
) -> Vec<crate::secrets::SecretText> {
    use crate::secrets::SecretText;
    let mut out: Vec<SecretText> = Vec::new();
    for (_, bytes) in configs {
        out.push(SecretText::new(String::from_utf8_lossy(bytes).into_owned()));
    }
    out.push(SecretText::new(merged.to_string()));
    if let Some(auths) = merged.get("auths").and_then(Value::as_object) {
        for entry in auths.values() {
            for field in ["auth", "password", "identitytoken", "registrytoken"] {
                if let Some(v) = entry.get(field).and_then(Value::as_str) {
                    out.push(SecretText::new(v));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spinner_shows_the_action_until_finished() {
        // What a user reads while a step waits is the spinner's message: it must be the action itself.
        let pb = spinner("wait for RayCluster ray-erdma-cluster");
        assert_eq!(pb.message(), "wait for RayCluster ray-erdma-cluster");
        assert!(!pb.is_finished());
        pb.finish_and_clear();
        assert!(pb.is_finished(), "a cleared spinner must stop ticking");
    }

    #[test]
    fn docker_configs_merge_with_the_later_secret_winning() {
        let a =
            br#"{"auths": {"docker.io": {"auth": "a"}, "reg.example": {"auth": "old"}}}"#.to_vec();
        let b = br#"{"auths": {"reg.example": {"auth": "new"}}}"#.to_vec();
        let m = merge_docker_configs(&[("pull".into(), a), ("push".into(), b)]).unwrap();
        assert_eq!(m["auths"]["docker.io"]["auth"], "a");
        assert_eq!(m["auths"]["reg.example"]["auth"], "new");
        let e = merge_docker_configs(&[("broken".into(), b"{".to_vec())])
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("secret/broken: .dockerconfigjson is not valid JSON"),
            "{e}"
        );
        let e = merge_docker_configs(&[("empty".into(), b"{}".to_vec())])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("secret/empty: .dockerconfigjson has no \"auths\" object"),
            "{e}"
        );
    }

    #[test]
    fn only_throttling_server_errors_and_connection_failures_are_retried() {
        let api = |code: u16| {
            kube::Error::Api(kube::core::Status::failure("", "").with_code(code).boxed())
        };
        for code in [429, 500, 502, 503, 504] {
            assert!(is_transient(&api(code)), "{code}");
        }
        for code in [400, 403, 404, 409, 422] {
            assert!(!is_transient(&api(code)), "{code}");
        }
        let e = map_kube_err("apply Pod/x", api(422));
        assert_eq!(
            e.to_string(),
            "apply Pod/x: the API server rejected it (422 Unknown): (no message)"
        );
    }
}
