//! `kube::exec`, `kube::exec_each`, `kube::exec_many` and `kube::cp`: commands in containers, secret parameters
//! only through stdin, output redacted of every secret the run knows (and of the pod's own Secrets once it is
//! seen).

use std::sync::Arc;

use rhai::{Array, Dynamic, Map, Module};

use super::super::super::convert::{
    check_keys, opt_bool, opt_namespace, opt_str, opt_timeout, str_array,
};
use super::super::super::{Ctx, cluster_error, runtime_error};
use super::super::{RResult, exec_err};
use super::secret_in;
use crate::exec::fanout::Fanout;
use crate::exec::{CopySpec, ExecSpec};

/// The exec `pod`, `argv` and the options map ask for; a secret parameter in the argv or the environment
/// is refused (both show in plan.sh and `ps`).
fn exec_spec(pod: &str, argv: Array, opts: &Map) -> RResult<ExecSpec> {
    if let Some(s) = argv.iter().find_map(secret_in) {
        return Err(runtime_error(format!(
            "kube::exec: secret {} in the command line: an argv shows in plan.sh, `ps` and the API server's audit log; pass it with #{{ stdin: ... }} or put it in a Secret with kube::apply_secret",
            s.key
        )));
    }
    let command = str_array(&argv, "kube::exec command")?;
    if command.is_empty() {
        return Err(runtime_error("kube::exec: the command is empty"));
    }
    let env = match opts.get("env") {
        None => Vec::new(),
        Some(d) => {
            let em = d
                .clone()
                .try_cast::<Map>()
                .ok_or_else(|| runtime_error("kube::exec: option `env` must be a map"))?;
            if let Some((k, s)) = em.iter().find_map(|(k, v)| secret_in(v).map(|s| (k, s))) {
                return Err(runtime_error(format!(
                    "kube::exec: env {k} = secret {}: the environment of a command shows in its argv (`env K=V ...`) and in plan.sh; pass it with #{{ stdin: ... }} or kube::apply_secret",
                    s.key
                )));
            }
            em.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        }
    };
    let (stdin, stdin_env) = match opts.get("stdin") {
        None => (None, None),
        Some(d) if d.is_string() => (Some(d.to_string().into_bytes()), None),
        Some(d) => match secret_in(d) {
            Some(s) => (
                Some(s.value.expose().as_bytes().to_vec()),
                Some(crate::secrets::env_var(&s.key)),
            ),
            None => {
                return Err(runtime_error(format!(
                    "kube::exec: option `stdin` must be a string or a secret parameter, got {}",
                    d.type_name()
                )));
            }
        },
    };
    Ok(ExecSpec {
        pod: pod.to_owned(),
        container: opt_str(opts, "container")?,
        command,
        stdin,
        stdin_env,
        namespace: opt_namespace(opts)?,
        timeout: opt_timeout(opts, 300)?,
        capture_var: opt_str(opts, "save_as")?,
        progress: opt_bool(opts, "progress")?.unwrap_or(false),
        env,
    })
}

/// The exec specs of `items` (maps with `pod`, `command` and any of `keys`), for `fname`.
fn item_specs(fname: &str, items: Array, keys: &[&str]) -> RResult<Vec<ExecSpec>> {
    let mut specs = Vec::new();
    for it in items {
        let o = it.try_cast::<Map>().ok_or_else(|| {
            runtime_error(format!(
                "kube::{fname}: each item must be a map #{{pod, command, ...}}"
            ))
        })?;
        check_keys(&format!("kube::{fname} item"), &o, keys)?;
        let pod = opt_str(&o, "pod")?
            .ok_or_else(|| runtime_error(format!("kube::{fname}: an item has no `pod`")))?;
        let cmd = o
            .get("command")
            .cloned()
            .and_then(|d| d.try_cast::<Array>())
            .ok_or_else(|| {
                runtime_error(format!(
                    "kube::{fname}: `command` must be an array of strings"
                ))
            })?;
        specs.push(exec_spec(&pod, cmd, &o)?);
    }
    Ok(specs)
}

/// What an exec returned, as scripts see it: with every secret the run knows redacted (an exec that
/// `cat`s a mounted Secret cannot undo the redaction).
fn exec_result(ctx: &Ctx, out: crate::exec::ExecOutput) -> Map {
    let mut r = Map::new();
    r.insert("stdout".into(), ctx.redactor.redact(&out.stdout).into());
    r.insert("stderr".into(), ctx.redactor.redact(&out.stderr).into());
    r.insert("code".into(), out.code.into());
    r.insert("dry_run".into(), out.dry_run.into());
    // exec_many: why a rank has no exit code (-1), and whether another rank's failure stopped it.
    r.insert(
        "error".into(),
        out.error
            .map(|e| Dynamic::from(ctx.redactor.redact(&e)))
            .unwrap_or(Dynamic::UNIT),
    );
    r.insert("cancelled".into(), out.cancelled.into());
    r
}

/// `exec`, `cp`, `exec_many`.
pub(super) fn register(m: &mut Module, ctx: &Arc<Ctx>) {
    // exec(pod, argv[, opts]) -> #{stdout, stderr, code, dry_run}
    let c = ctx.clone();
    let exec = move |pod: &str, argv: Array, opts: Map| -> RResult<Map> {
        check_keys(
            "kube::exec",
            &opts,
            &[
                "container",
                "timeout",
                "save_as",
                "progress",
                "env",
                "namespace",
                "check",
                "stdin",
            ],
        )?;
        let spec = exec_spec(pod, argv, &opts)?;
        c.precheck()?;
        let out = c.exec.exec(&spec).map_err(exec_err)?;
        if opt_bool(&opts, "check")?.unwrap_or(false) && out.code != 0 {
            return Err(cluster_error(format!(
                "command `{}` in {pod} exited with {}: {}",
                spec.command.join(" "),
                out.code,
                c.redactor.redact(out.stderr.trim())
            )));
        }
        c.remember_pod_secrets(&spec.pod, spec.namespace.as_deref());
        Ok(exec_result(&c, out))
    };
    regp_opts!(m, "exec",
        "exec(pod, argv[, #{container, timeout, env, save_as, progress, check, namespace, stdin}]) -> \
        #{stdout, stderr, code, dry_run, error, cancelled}: runs a command in a container over the \
        API (websocket). `stdin` is a string or a secret parameter; a secret in argv or env is \
        refused (both show in plan.sh and `ps`). `check: true` makes a non-zero exit a cluster \
        error; `save_as` names plan.sh's variable for stdout; `progress` shows the last output line \
        on a spinner. The output is redacted of every secret the run knows, including the pod's own \
        Secrets.",
        exec, pod: &str, argv: Array);

    // cp(local, pod, remote[, opts])
    let c = ctx.clone();
    let cp = move |local: &str, pod: &str, remote: &str, opts: Map| -> RResult<()> {
        check_keys("kube::cp", &opts, &["container", "timeout", "namespace"])?;
        let path = c.resolve_path(local, "kube::cp")?;
        if !path.is_file() {
            return Err(runtime_error(format!("kube::cp: {local}: no such file")));
        }
        let spec = CopySpec {
            local_display: c.display_path(&path),
            local: path,
            pod: pod.to_owned(),
            container: opt_str(&opts, "container")?,
            remote: remote.to_owned(),
            namespace: opt_namespace(&opts)?,
            timeout: opt_timeout(&opts, 120)?,
        };
        c.precheck()?;
        c.exec.copy_to(&spec).map_err(exec_err)
    };
    regp_opts!(m, "cp",
        "cp(local, pod, remote[, #{container, timeout, namespace}]): copies a local file (confined \
        like fs::read) into a container and checks the byte count that arrived.",
        cp, local: &str, pod: &str, remote: &str);

    // exec_each([#{pod, command, ...}]) -> one exec result per item, side by side (bounded), independent.
    let c = ctx.clone();
    regp!(m, "exec_each",
        "exec_each([#{pod, command, container, env, timeout, save_as, namespace}, ...]) -> one \
        #{stdout, stderr, code, dry_run} per item, as `exec` gives: independent commands (a reading per \
        pod) run side by side, at most an eighth of them (8 to 64) at once, so 64 pods cost a few \
        exec latencies rather than 64; one that cannot run at all is the cluster error it would be \
        alone. In dry-run the plan lists them in order.",
        move |items: Array| -> RResult<Array> {
        let keys = ["pod", "command", "container", "env", "timeout", "save_as", "namespace"];
        let mut specs = item_specs("exec_each", items, &keys)?;
        // Spinners of commands side by side would overwrite each other.
        for s in &mut specs {
            s.progress = false;
        }
        c.precheck()?;
        // The plan is a script: its lines keep the items' order.
        let outs: Vec<Result<crate::exec::ExecOutput, crate::error::ExecError>> = if c.exec.is_dry_run() {
            specs.iter().map(|s| c.exec.exec(s)).collect()
        } else {
            let fanout = Fanout::sized(specs.len(), None, None);
            // No deadline is set, so every item starts; `None` would be a fan-out that stopped early.
            fanout
                .run("exec", &specs, |s| c.exec.exec(s))
                .into_iter()
                .zip(&specs)
                .map(|(r, s)| r.unwrap_or_else(|| Err(crate::error::ExecError::Failed {
                    action: format!("exec in {}", s.pod),
                    message: "not started: the commands beside it stopped first; run the step again".into(),
                })))
                .collect()
        };
        let mut results = Array::new();
        for (s, out) in specs.iter().zip(outs) {
            let out = out.map_err(exec_err)?;
            c.remember_pod_secrets(&s.pod, s.namespace.as_deref());
            results.push(Dynamic::from(exec_result(&c, out)));
        }
        Ok(results)
    }, items: Array);

    let c = ctx.clone();
    regp!(m, "exec_many",
        "exec_many([#{pod, command, container, env, timeout, namespace}, ...]) -> one #{stdout, \
        stderr, code, error, cancelled} per rank: side by side, each under its own timeout. The \
        first rank that fails stops the others, which come back `cancelled` with what they printed \
        so far, their commands killed in their pods (the pods need `sh` and a writable `/tmp` for \
        that).",
        move |items: Array| -> RResult<Array> {
        let keys = ["pod", "command", "container", "env", "timeout", "namespace"];
        let specs = item_specs("exec_many", items, &keys)?;
        c.precheck()?;
        let outs = c.exec.exec_many(&specs).map_err(exec_err)?;
        for s in &specs {
            c.remember_pod_secrets(&s.pod, s.namespace.as_deref());
        }
        Ok(outs
            .into_iter()
            .map(|o| Dynamic::from(exec_result(&c, o)))
            .collect())
    }, items: Array);
}
