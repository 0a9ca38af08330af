//! The dry-run executor: talks to no cluster, records every action with its kubectl equivalent.
//!
//! Reads return placeholders marked `dry_run: true` (names such as `${WORKERS[0]}` that plan.sh binds to
//! the real pods with a `kubectl get`), so a workflow can run end to end without presenting anything as
//! measured.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::{Value, json};

use super::kinds::plural_lower;
use super::{
    CopySpec, ExecOutput, ExecSpec, Executor, FIELD_MANAGER, FieldSpec, KUBECTL_APPLY, ListSpec,
    LogSpec, Manifest, MergeSecretsSpec, MergeSummary, ObjRef, SecretSpec, WaitFor, WaitSpec,
};
use crate::error::ExecError;
use crate::plan::{Plan, shell_join, shell_quote};

/// Records actions into a shared [`Plan`].
#[derive(Debug, Clone)]
pub struct DryRunExecutor {
    plan: Arc<Mutex<Plan>>,
    /// Files applied only if absent: plan.sh deletes them only when it applied them.
    if_absent: Arc<Mutex<Vec<String>>>,
    /// How many `exec_many` groups the plan has run side by side (names their ranks' PID files).
    rank_groups: Arc<std::sync::atomic::AtomicUsize>,
}

/// The plan.sh variable set when an apply-if-absent applied `file` (`RDMAKIT_OWN_BUNDLE_DEVICE_CLASS_YAML`).
fn own_var(file: &str) -> String {
    crate::plan::shell_var("RDMAKIT_OWN_", file)
}

impl DryRunExecutor {
    /// A dry-run executor for `workflow`, with the kubectl global flags a user passed.
    pub fn new(workflow: &str, context: Option<&str>, namespace: Option<&str>) -> Self {
        Self {
            plan: Arc::new(Mutex::new(Plan::new(workflow, context, namespace))),
            if_absent: Arc::new(Mutex::new(Vec::new())),
            rank_groups: Arc::new(std::sync::atomic::AtomicUsize::new(0)),
        }
    }

    /// A copy of the plan recorded so far.
    pub fn plan(&self) -> Plan {
        self.lock().clone()
    }

    fn lock(&self) -> MutexGuard<'_, Plan> {
        // A panic while holding the lock cannot leave the plan half-written in a harmful way.
        self.plan.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The kubectl prefix; an action's own namespace (DRANET's kube-system) replaces the run's `-n`.
    fn kubectl(&self, namespace: Option<&str>) -> String {
        let plan = self.lock();
        match namespace {
            Some(ns) => plan.kubectl_in(Some(ns)),
            None => plan.kubectl.clone(),
        }
    }

    /// The kubectl prefix for cluster-scoped kinds: the run's context, no namespace.
    fn kubectl_cluster(&self) -> String {
        self.lock().kubectl_in(None)
    }

    fn exec_line(&self, spec: &ExecSpec) -> (String, Vec<String>, String) {
        let k = self.kubectl(spec.namespace.as_deref());
        let mut argv: Vec<String> = Vec::new();
        if !spec.env.is_empty() {
            argv.push("env".into());
            argv.extend(spec.env.iter().map(|(k, v)| format!("{k}={v}")));
        }
        argv.extend(spec.command.iter().cloned());
        let cmd = format!(
            "{k} exec {}{}{} -- {}",
            shell_quote(&spec.pod),
            container_flag(spec.container.as_deref()),
            if spec.stdin.is_some() { " -i" } else { "" },
            shell_join(&argv)
        );
        // stdin: a secret comes from its environment variable, never from the plan's text.
        let cmd = match (&spec.stdin_env, &spec.stdin) {
            (Some(var), _) => format!(
                "printf '%s' \"${{{var}:?export {var} (a secret parameter) first}}\" | {cmd}"
            ),
            (None, Some(bytes)) => format!(
                "printf '%s' {} | {cmd}",
                shell_quote(&String::from_utf8_lossy(bytes))
            ),
            (None, None) => cmd,
        };
        let line = match &spec.capture_var {
            Some(v) => format!("{v}=$({cmd})"),
            None => cmd,
        };
        let where_ = match &spec.container {
            Some(c) => format!("{} (container {c})", spec.pod),
            None => spec.pod.clone(),
        };
        (
            format!("exec in {where_}, timeout {}", secs(spec.timeout)),
            vec![format!("command: {}", shell_join(&argv))],
            line,
        )
    }

    fn record(&self, summary: String, detail: Vec<String>, shell: Vec<String>) {
        self.lock().action(summary, detail, shell);
    }
}

/// A wait that ends at once on a `Failed` condition, as the live run's does (`kubectl wait
/// --for=condition=Succeeded` would sit out its whole timeout on a failed job).
fn finished_or_failed(k: &str, target: &str, done: &str, timeout: Duration) -> String {
    let polls = timeout.as_secs().div_ceil(5).max(1);
    format!(
        "RDMAKIT_STATE=\nfor _ in $(seq {polls}); do\n  RDMAKIT_STATE=\" $({k} get {target} -o jsonpath='{{.status.conditions[?(@.status==\"True\")].type}}' 2>/dev/null) \"\n  case \"$RDMAKIT_STATE\" in\n    *\" {done} \"*) break ;;\n    *\" Failed \"*) echo {} >&2; exit 1 ;;\n  esac\n  sleep 5\ndone\ncase \"$RDMAKIT_STATE\" in *\" {done} \"*) ;; *) echo {} >&2; exit 1 ;; esac",
        shell_quote(&format!("{target} Failed")),
        shell_quote(&format!(
            "{target}: not {done} after {}s",
            timeout.as_secs()
        )),
    )
}

fn secs(d: Duration) -> String {
    format!("{}s", d.as_secs())
}

fn container_flag(c: Option<&str>) -> String {
    c.map(|c| format!(" -c {}", shell_quote(c)))
        .unwrap_or_default()
}

fn objects_detail(manifest: &Manifest) -> Result<(Vec<ObjRef>, Vec<String>), ExecError> {
    let refs = manifest
        .objects
        .iter()
        .map(|o| ObjRef::from_object(o, &manifest.display_path))
        .collect::<Result<Vec<_>, _>>()?;
    let detail = refs
        .iter()
        .map(|r| format!("{} {}", r.api_version, r))
        .collect();
    Ok((refs, detail))
}

fn labels_from_selector(selector: Option<&str>) -> Value {
    let mut labels = serde_json::Map::new();
    for part in selector.unwrap_or("").split(',') {
        if let Some((k, v)) = part.split_once('=') {
            labels.insert(
                k.trim().trim_end_matches('=').to_owned(),
                Value::String(v.trim().to_owned()),
            );
        }
    }
    Value::Object(labels)
}

impl Executor for DryRunExecutor {
    fn is_dry_run(&self) -> bool {
        true
    }

    fn begin_step(&self, name: &str) {
        self.lock().begin_step(name);
    }

    fn note(&self, text: &str) {
        self.lock().note(text);
    }

    fn stopped(&self, error: &str) {
        self.lock().stop(error);
    }

    fn plan_shell(&self, summary: &str, line: &str) {
        self.record(summary.to_owned(), vec![], vec![line.to_owned()]);
    }

    fn has_api(
        &self,
        api_version: &str,
        kind: &str,
        _timeout: Duration,
    ) -> Result<bool, ExecError> {
        let group = api_version.split_once('/').map(|(g, _)| g).unwrap_or("");
        let k = self.kubectl_cluster();
        self.record(
            format!("check that the cluster serves {api_version} {kind}"),
            vec![],
            // grep -q would exit at the first match and kubectl then dies of SIGPIPE, which pipefail turns
            // into a failed plan (exit 141): read the whole listing.
            vec![format!(
                "{k} api-resources --api-group={} | grep -w {kind} >/dev/null",
                shell_quote(group)
            )],
        );
        Ok(true)
    }

    fn apply(&self, manifest: &Manifest, _timeout: Duration) -> Result<Vec<ObjRef>, ExecError> {
        let (refs, detail) = objects_detail(manifest)?;
        let k = self.kubectl(None);
        self.record(
            format!(
                "apply {} (server-side, field manager {FIELD_MANAGER}, forcing conflicts)",
                manifest.display_path
            ),
            detail,
            vec![format!(
                "{k} {KUBECTL_APPLY} -f {}",
                shell_quote(&manifest.display_path)
            )],
        );
        Ok(refs)
    }

    fn apply_if_absent(
        &self,
        manifest: &Manifest,
        _timeout: Duration,
    ) -> Result<(Vec<ObjRef>, Vec<ObjRef>), ExecError> {
        let (refs, detail) = objects_detail(manifest)?;
        let k = self.kubectl(None);
        let file = shell_quote(&manifest.display_path);
        let var = own_var(&manifest.display_path);
        let undo =
            format!("if [ -n \"${{{var}:-}}\" ]; then {k} delete --ignore-not-found -f {file}; fi");
        self.lock().action_with_undo(
            format!(
                "apply {} only if the cluster lacks it (what is already there is someone else's: left alone, never deleted)",
                manifest.display_path
            ),
            detail,
            vec![format!(
                "if {k} get -f {file} >/dev/null 2>&1; then\n  echo {}\nelse\n  {k} {KUBECTL_APPLY} -f {file}\n  {var}=1\nfi",
                shell_quote(&format!(
                    "{}: already in the cluster, left as it is (not this run's)",
                    manifest.display_path
                ))
            )],
            vec![undo],
        );
        self.if_absent
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(manifest.display_path.clone());
        Ok((refs, Vec::new()))
    }

    fn delete(&self, manifest: &Manifest, _timeout: Duration) -> Result<Vec<ObjRef>, ExecError> {
        let (refs, detail) = objects_detail(manifest)?;
        let k = self.kubectl(None);
        let applied_if_absent = self
            .if_absent
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&manifest.display_path);
        if applied_if_absent {
            // Delete it only if this plan applied it.
            let file = shell_quote(&manifest.display_path);
            let var = own_var(&manifest.display_path);
            self.record(
                format!(
                    "delete {} if this plan applied it (not when it was already there)",
                    manifest.display_path
                ),
                detail,
                vec![format!(
                    "if [ -n \"${{{var}:-}}\" ]; then {k} delete --ignore-not-found -f {file}; fi"
                )],
            );
            return Ok(refs);
        }
        // A bundle file is deleted by file; an object the run made in memory (the merged registry Secret)
        // by kind/name.
        let what = if manifest.display_path.ends_with(".yaml")
            || manifest.display_path.ends_with(".yml")
        {
            format!("-f {}", shell_quote(&manifest.display_path))
        } else {
            refs.iter()
                .map(|r| shell_quote(&r.kubectl_name()))
                .collect::<Vec<_>>()
                .join(" ")
        };
        self.record(
            format!("delete {}", manifest.display_path),
            detail,
            vec![format!("{k} delete --ignore-not-found {what}")],
        );
        Ok(refs)
    }

    fn wait(&self, spec: &WaitSpec) -> Result<Value, ExecError> {
        let k = self.kubectl(spec.namespace.as_deref());
        let kind = spec.kind.to_lowercase();
        let target = match (&spec.name, &spec.selector) {
            (Some(n), _) => format!("{kind}/{}", shell_quote(n)),
            (None, Some(s)) => format!("{kind} -l {}", shell_quote(s)),
            (None, None) => format!("{kind} --all"),
        };
        let t = secs(spec.timeout);
        let (summary, shell) = match &spec.what {
            WaitFor::PodsReady => {
                // `kubectl wait` on a selector fails at once ("no matching resources found") while the
                // controller has not made the pods yet, and passes early when only some exist: first wait
                // for the expected count to exist, within the same timeout.
                let n = spec.expect.max(1);
                let polls = spec.timeout.as_secs().div_ceil(2).max(1);
                self.record(
                    format!("wait until {target} exists ({n} or more), timeout {t}"),
                    vec![],
                    vec![format!(
                        "for _ in $(seq {polls}); do [ \"$({k} get {target} -o name 2>/dev/null | wc -l)\" -ge {n} ] && break; sleep 2; done"
                    )],
                );
                (
                    format!("wait until {target} Ready (at least {n}), timeout {t}"),
                    format!("{k} wait --for=condition=Ready {target} --timeout={t}"),
                )
            }
            WaitFor::RayClusterReady => (
                format!("wait until {target} reports status.state=ready, timeout {t}"),
                format!("{k} wait --for=jsonpath='{{.status.state}}'=ready {target} --timeout={t}"),
            ),
            WaitFor::MpiJobFinished => (
                format!("wait until {target} Succeeded (Failed stops the workflow), timeout {t}"),
                finished_or_failed(&k, &target, "Succeeded", spec.timeout),
            ),
            WaitFor::Condition(c) if spec.kind == "Job" && c == "Complete" => (
                format!("wait until {target} is Complete (Failed stops the workflow), timeout {t}"),
                finished_or_failed(&k, &target, "Complete", spec.timeout),
            ),
            WaitFor::ClaimsAllocated => (
                format!(
                    "wait until {} ResourceClaims are allocated, timeout {t}",
                    spec.expect.max(1)
                ),
                format!("{k} get resourceclaims"),
            ),
            WaitFor::Condition(c) => (
                format!("wait until {target} has {c}=True, timeout {t}"),
                format!("{k} wait --for=condition={c} {target} --timeout={t}"),
            ),
        };
        self.record(summary, vec![], vec![shell]);
        Ok(json!({"dry_run": true, "state": "planned"}))
    }

    fn exec(&self, spec: &ExecSpec) -> Result<ExecOutput, ExecError> {
        let (summary, detail, line) = self.exec_line(spec);
        self.record(summary, detail, vec![line]);
        Ok(ExecOutput {
            dry_run: true,
            ..ExecOutput::default()
        })
    }

    fn exec_many(&self, specs: &[ExecSpec]) -> Result<Vec<ExecOutput>, ExecError> {
        let mut detail = Vec::new();
        let mut shell = Vec::new();
        let group = self
            .rank_groups
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // As the live run does, each of several ranks runs under the PID-recording wrapper (its PID file
        // named after this plan.sh's PID, the group and the rank), so one still running when another fails
        // is killed in its pod, not only its local kubectl.
        let mut kills = Vec::new();
        for (i, spec) in specs.iter().enumerate() {
            let (summary, d, line) = self.exec_line(spec);
            detail.push(summary);
            detail.extend(d.into_iter().map(|l| format!("  {l}")));
            if specs.len() == 1 {
                shell.push(line);
            } else {
                if i == 0 {
                    shell.push("RDMAKIT_PIDS=()".into());
                }
                let var = format!("RDMAKIT_RANK_{group}_{i}");
                let token = format!("${{{var}}}");
                shell.push(format!("{var}=\"rdmakit-rank-$$-{group}-{i}\""));
                let (_, _, wrapped) = self.exec_line(&super::kube::wrapped_rank(spec, &token));
                shell.push(format!("{wrapped} &\nRDMAKIT_PIDS+=(\"$!\")"));
                let (_, _, kill) = self.exec_line(&super::kube::rank_kill(spec, &token));
                kills.push(format!(
                    "    if kill -0 \"${{RDMAKIT_PIDS[{i}]}}\" 2>/dev/null; then kill \"${{RDMAKIT_PIDS[{i}]}}\" 2>/dev/null || true; {kill} || true; fi\n"
                ));
            }
        }
        if specs.len() > 1 {
            // A bare `wait` returns 0 whatever the ranks did: wait for each as it ends (`wait -n`), and as
            // the live run does, stop the others when one fails: a rank whose kubectl still runs is
            // killed in its pod too.
            shell.push(format!(
                "for _ in \"${{RDMAKIT_PIDS[@]}}\"; do\n  wait -n || {{\n    rc=$?\n{}    echo \"a rank failed (exit $rc): stopped the others\" >&2\n    exit \"$rc\"\n  }}\ndone",
                kills.concat()
            ));
        }
        self.record(
            format!("run {} commands at the same time", specs.len()),
            detail,
            shell,
        );
        Ok(specs
            .iter()
            .map(|_| ExecOutput {
                dry_run: true,
                ..ExecOutput::default()
            })
            .collect())
    }

    fn get_field(&self, spec: &FieldSpec) -> Result<String, ExecError> {
        let k = self.kubectl(spec.namespace.as_deref());
        let cmd = format!(
            "{k} get {} {} -o jsonpath='{{{}}}'",
            spec.kind.to_lowercase(),
            shell_quote(&spec.name),
            spec.path
        );
        let (line, value) = match &spec.capture_var {
            Some(v) => (format!("{v}=$({cmd})"), format!("${{{v}}}")),
            None => (
                cmd,
                format!("<dry-run: {}{} of {}>", spec.kind, spec.path, spec.name),
            ),
        };
        self.record(
            format!(
                "read {} of {}/{}",
                spec.path,
                spec.kind.to_lowercase(),
                spec.name
            ),
            vec![],
            vec![line],
        );
        Ok(value)
    }

    fn copy_to(&self, spec: &CopySpec) -> Result<(), ExecError> {
        let k = self.kubectl(spec.namespace.as_deref());
        self.record(
            format!(
                "copy {} to {}:{}",
                spec.local_display, spec.pod, spec.remote
            ),
            vec![],
            vec![format!(
                "{k} cp {} {}{}",
                shell_quote(&spec.local_display),
                shell_quote_pod_path(&spec.pod, &spec.remote),
                container_flag(spec.container.as_deref())
            )],
        );
        Ok(())
    }

    fn logs(&self, spec: &LogSpec) -> Result<String, ExecError> {
        let k = self.kubectl(spec.namespace.as_deref());
        let tail = spec
            .tail
            .map(|n| format!(" --tail={n}"))
            .unwrap_or_default();
        let cmd = format!(
            "{k} logs {}{}{tail}",
            shell_quote(&spec.pod),
            container_flag(spec.container.as_deref())
        );
        let line = match &spec.capture_var {
            Some(v) => format!("{v}=$({cmd})"),
            None => cmd,
        };
        self.record(format!("read the log of {}", spec.pod), vec![], vec![line]);
        Ok(String::new())
    }

    fn list(&self, spec: &ListSpec) -> Result<Vec<Value>, ExecError> {
        let cluster_scoped =
            spec.kind == "Node" || spec.kind == "DeviceClass" || spec.kind == "ResourceSlice";
        // Cluster-scoped kinds take no namespace flag.
        let k = if cluster_scoped {
            self.kubectl_cluster()
        } else {
            self.kubectl(spec.namespace.as_deref())
        };
        let resource = plural_lower(&spec.kind);
        let sel = spec
            .selector
            .as_deref()
            .map(|s| format!(" -l {}", shell_quote(s)))
            .unwrap_or_default();
        let line = match (&spec.capture_var, spec.kind.as_str()) {
            // Two steps, shellcheck-clean (no SC2207), and `set -e` still sees kubectl fail.
            (Some(v), _) => format!(
                "{v}_NAMES=$({k} get {resource}{sel} -o jsonpath='{{.items[*].metadata.name}}')\nread -r -a {v} <<<\"${v}_NAMES\""
            ),
            (None, _) if !spec.columns.is_empty() => {
                let cols: Vec<String> = spec
                    .columns
                    .iter()
                    .map(|(h, p)| format!("{h}:{p}"))
                    .collect();
                format!(
                    "{k} get {resource}{sel} -o custom-columns={}",
                    shell_quote(&cols.join(","))
                )
            }
            (None, _) => format!("{k} get {resource}{sel} -o wide"),
        };
        let what = match &spec.selector {
            Some(s) => format!("list {resource} with labels {s}"),
            None => format!("list {resource}"),
        };
        self.record(what, vec![], vec![line]);
        let labels = labels_from_selector(spec.selector.as_deref());
        let n = spec.expect.max(1);
        Ok((0..n)
            .map(|i| {
                let name = match &spec.capture_var {
                    Some(v) => format!("${{{v}[{i}]}}"),
                    None => format!("dry-run-{}-{i}", spec.kind.to_lowercase()),
                };
                json!({
                    "apiVersion": spec.api_version,
                    "kind": spec.kind,
                    "metadata": {"name": name, "labels": labels},
                    "status": {},
                    "dry_run": true,
                })
            })
            .collect())
    }

    fn merge_registry_secrets(&self, spec: &MergeSecretsSpec) -> Result<MergeSummary, ExecError> {
        if spec.sources.is_empty() {
            return Err(ExecError::Input(
                "merge_registry_secrets: give at least one source Secret".into(),
            ));
        }
        let k = self.kubectl(spec.namespace.as_deref());
        let mut shell = vec![
            "# Merge registry credentials without echoing them: files live in a private temp dir."
                .to_owned(),
            "CREDS_DIR=$(umask 077; mktemp -d)".to_owned(),
        ];
        for (i, s) in spec.sources.iter().enumerate() {
            shell.push(format!(
                "{k} get secret {} -o jsonpath='{{.data.\\.dockerconfigjson}}' | base64 -d > \"$CREDS_DIR/{i}.json\"",
                shell_quote(s)
            ));
        }
        let files: Vec<String> = (0..spec.sources.len())
            .map(|i| format!("\"$CREDS_DIR/{i}.json\""))
            .collect();
        let sum: Vec<String> = (0..spec.sources.len())
            .map(|i| format!(".[{i}].auths"))
            .collect();
        shell.push(format!(
            "jq -s '{{auths: ({})}}' {} > \"$CREDS_DIR/merged.json\"",
            sum.join(" + "),
            files.join(" ")
        ));
        shell.push(format!(
            "{k} create secret generic {} --from-file={}=\"$CREDS_DIR/merged.json\" --dry-run=client -o yaml | {k} {KUBECTL_APPLY} -f -",
            shell_quote(&spec.target),
            spec.key
        ));
        shell.push("rm -rf \"$CREDS_DIR\"".to_owned());
        self.record(
            format!(
                "merge registry credentials {} -> secret/{} (key {}; contents never printed)",
                spec.sources
                    .iter()
                    .map(|s| format!("secret/{s}"))
                    .collect::<Vec<_>>()
                    .join(" + "),
                spec.target,
                spec.key
            ),
            vec![],
            shell,
        );
        Ok(MergeSummary {
            target: spec.target.clone(),
            registries: vec![],
            dry_run: true,
            sensitive: vec![],
        })
    }

    fn apply_secret(&self, spec: &SecretSpec) -> Result<ObjRef, ExecError> {
        let k = self.kubectl(spec.namespace.as_deref());
        // Secret values come from their environment variables through process substitution: never in
        // the plan's text, nor in kubectl's argv.
        let from: Vec<String> = spec
            .data
            .iter()
            .map(|(key, v)| match spec.env.get(key) {
                Some(var) => format!(
                    "--from-file={key}=<(printf '%s' \"${{{var}:?export {var} (a secret parameter) first}}\")"
                ),
                None => format!("--from-literal={}", shell_quote(&format!("{key}={}", v.expose()))),
            })
            .collect();
        self.record(
            format!(
                "apply secret/{} (keys {}; values never printed)",
                spec.name,
                spec.data.keys().cloned().collect::<Vec<_>>().join(", ")
            ),
            vec![],
            vec![format!(
                "{k} create secret generic {} {} --dry-run=client -o yaml | {k} {KUBECTL_APPLY} -f -",
                shell_quote(&spec.name),
                from.join(" ")
            )],
        );
        Ok(ObjRef {
            api_version: "v1".into(),
            kind: "Secret".into(),
            name: spec.name.clone(),
            namespace: spec.namespace.clone(),
        })
    }
}

fn shell_quote_pod_path(pod: &str, remote: &str) -> String {
    if crate::plan::is_placeholder(pod) {
        format!("\"{pod}\":{}", shell_quote(remote))
    } else {
        shell_quote(&format!("{pod}:{remote}"))
    }
}
