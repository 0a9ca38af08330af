//! Remote exec over the API server's websocket (`kubectl exec`): one command with stdin, stdout and stderr
//! collected as they arrive and the exit code from the status channel; several ranks at once, where the
//! first to fail stops the others and the stopped ones are killed in their pods through a PID file.

use std::sync::Mutex;
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::AttachParams;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::retry::map_kube_err;
use super::{KubeExecutor, spinner};
use crate::error::ExecError;
use crate::exec::{ExecOutput, ExecSpec};

impl KubeExecutor {
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
        let action = exec_action(spec);
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
        let stderr = String::from_utf8_lossy(&err).into_owned();
        let code = match status {
            // The exit code travels only in the status frame; without it the command may have failed.
            None => {
                return Err(not_run(
                    spec,
                    "the API server sent no exit status (an exec protocol without a status channel, or \
                     the connection closed early): the command's outcome is unknown",
                ));
            }
            Some(s) if s.status.as_deref() == Some("Success") => 0,
            Some(s) => match exit_code(&s) {
                Some(code) => code,
                // A Failure without an exit code: the command did not run (the runtime could not start
                // it, the kubelet or API server failed): a cluster error, never an outcome of the command.
                None => {
                    let why = s
                        .message
                        .as_deref()
                        .unwrap_or("the exec failed without an exit code");
                    let reason = s.reason.as_deref().unwrap_or("no reason");
                    return Err(not_run(
                        spec,
                        &format!("the command did not run ({reason}): {why}"),
                    ));
                }
            },
        };
        Ok(ExecOutput {
            stdout: String::from_utf8_lossy(&out).into_owned(),
            stderr,
            code,
            ..ExecOutput::default()
        })
    }

    /// [`Executor::exec_many`](crate::exec::Executor::exec_many): every rank at once under its own deadline;
    /// the first failure stops the rest, which are then killed in their pods.
    pub(super) fn run_ranks(&self, specs: &[ExecSpec]) -> Result<Vec<ExecOutput>, ExecError> {
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
            // A rank that could not run at all (the exec was refused, the runtime could not start it) is a
            // cluster error, never an outcome of the ranks: the run stops naming that exec.
            if let Some(i) = ended
                .iter()
                .position(|e| matches!(e, Some(Err(e)) if !matches!(e, ExecError::Timeout { .. })))
                && let Some(Some(Err(e))) = ended.get_mut(i).map(Option::take)
            {
                return Err(e);
            }
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
}

/// The exit code of a command that ran and failed: the kubelet's `Failure`/`NonZeroExitCode` status
/// carries it in `details.causes` (reason `ExitCode`); any other failure has none.
fn exit_code(s: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Status) -> Option<i64> {
    s.details
        .as_ref()
        .and_then(|d| d.causes.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.reason.as_deref() == Some("ExitCode")))
        .and_then(|c| c.message.as_deref())
        .and_then(|m| m.trim().parse::<i64>().ok())
}

/// An exec that could not run, or whose outcome is unknown: a transport error naming the pod, the
/// container and the command (the workflow ends with a cluster error, not a verdict about the pod).
pub(crate) fn not_run(spec: &ExecSpec, why: &str) -> ExecError {
    ExecError::Transport {
        action: exec_action(spec),
        message: why.to_owned(),
    }
}

/// `exec in pod P container C [command]`: what errors and the spinner call one exec.
fn exec_action(spec: &ExecSpec) -> String {
    let container = spec
        .container
        .as_deref()
        .map(|c| format!(" container {c}"))
        .unwrap_or_default();
    format!(
        "exec in pod {}{container} [{}]",
        spec.pod,
        shown_command(spec).chars().take(120).collect::<String>()
    )
}

/// The command as a user would type it: the rank wrapper (`sh -c WRAPPER TOKEN`) left out.
fn shown_command(spec: &ExecSpec) -> String {
    match spec.command.as_slice() {
        [sh, c, w, _token, rest @ ..] if sh == "sh" && c == "-c" && w == RANK_WRAPPER => {
            rest.join(" ")
        }
        all => all.join(" "),
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
