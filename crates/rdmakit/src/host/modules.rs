//! Built-in Rhai modules that need only the executor: `kube::`, `report::`, `params::`, `fs::`, `shell::`,
//! plus the global `step(title)`.

use std::path::{Component, Path};
use std::sync::Arc;
use std::time::Duration;

use rhai::{Array, Dynamic, Engine, EvalAltResult, Map, Module};

use super::convert::{check_keys, opt_bool, opt_int, opt_str, opt_timeout, str_array, to_dyn};
use super::{Ctx, SecretParam, cluster_error, runtime_error};
use crate::error::ExecError;
use crate::exec::{
    CopySpec, ExecSpec, FieldSpec, ListSpec, LogSpec, Manifest, MergeSecretsSpec, WaitFor,
    WaitSpec, api_version_for_kind,
};
use crate::manifests::read_yaml_file;
use crate::report::Status;

type RResult<T> = Result<T, Box<EvalAltResult>>;

fn exec_err(e: ExecError) -> Box<EvalAltResult> {
    if e.is_cluster_error() || matches!(e, ExecError::Cancelled { .. }) {
        cluster_error(e.to_string())
    } else {
        runtime_error(e.to_string())
    }
}

pub(crate) fn register(engine: &mut Engine, ctx: &Arc<Ctx>) {
    // Global: step(title) — marks a workflow step (plans, reports, error messages).
    let c = ctx.clone();
    engine.register_fn("step", move |title: &str| {
        c.exec.begin_step(title);
        c.report().begin_step(title);
    });
    engine.register_static_module("kube", kube_module(ctx).into());
    engine.register_static_module("report", report_module(ctx).into());
    engine.register_static_module("params", params_module(ctx).into());
    engine.register_static_module("fs", fs_module(ctx).into());
    engine.register_static_module("shell", shell_module(ctx).into());
}

fn manifests_for(ctx: &Ctx, path: &str, what: &str) -> RResult<Vec<Manifest>> {
    let p = ctx.resolve_path(path, what)?;
    let files = ctx.yaml_files(&p).map_err(exec_err)?;
    files
        .iter()
        .map(|f| {
            Ok(Manifest {
                display_path: ctx.display_path(f),
                objects: read_yaml_file(f).map_err(exec_err)?,
            })
        })
        .collect()
}

fn refs_to_array(refs: Vec<crate::exec::ObjRef>) -> Array {
    refs.into_iter()
        .map(|r| Dynamic::from(r.to_string()))
        .collect()
}

fn wait_spec(
    kind: &str,
    target: &str,
    what: WaitFor,
    opts: &Map,
    default_timeout: u64,
) -> RResult<WaitSpec> {
    check_keys("wait", opts, &["timeout", "expect", "namespace"])?;
    let (name, selector) = if target.contains('=') || target.is_empty() {
        (None, (!target.is_empty()).then(|| target.to_owned()))
    } else {
        (Some(target.to_owned()), None)
    };
    Ok(WaitSpec {
        what,
        kind: kind.to_owned(),
        name,
        selector,
        expect: opt_int(opts, "expect")?.unwrap_or(1).max(1).unsigned_abs() as usize,
        namespace: opt_str(opts, "namespace")?,
        timeout: opt_timeout(opts, default_timeout)?,
    })
}

/// A secret parameter held in `d`, if it is one.
fn secret_in(d: &Dynamic) -> Option<SecretParam> {
    d.clone().try_cast::<SecretParam>()
}

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
        namespace: opt_str(opts, "namespace")?,
        timeout: opt_timeout(opts, 300)?,
        capture_var: opt_str(opts, "save_as")?,
        progress: opt_bool(opts, "progress")?.unwrap_or(false),
        env,
    })
}

/// What an exec returned, as scripts see it: with every secret the run knows redacted (an exec that
/// `cat`s a mounted Secret cannot undo the redaction).
fn exec_result(ctx: &Ctx, out: crate::exec::ExecOutput) -> Map {
    let mut r = Map::new();
    r.insert("stdout".into(), ctx.redactor.redact(&out.stdout).into());
    r.insert("stderr".into(), ctx.redactor.redact(&out.stderr).into());
    r.insert("code".into(), out.code.into());
    r.insert("dry_run".into(), out.dry_run.into());
    r
}

fn kube_module(ctx: &Arc<Ctx>) -> Module {
    let mut m = Module::new();

    let c = ctx.clone();
    reg!(&mut m, "dry_run", move || c.exec.is_dry_run());

    let c = ctx.clone();
    reg!(&mut m, "note", move |text: &str| c.exec.note(text));

    // plan_only(summary, shell_line): dry-run plan.sh gets a line computing what the workflow computes.
    let c = ctx.clone();
    reg!(&mut m, "plan_only", move |summary: &str, line: &str| c
        .exec
        .plan_shell(summary, line));

    // has_api(apiVersion, kind) -> bool, through discovery.
    let c = ctx.clone();
    regp!(&mut m, "has_api", move |api_version: &str,
                                  kind: &str|
          -> RResult<bool> {
        c.exec
            .has_api(api_version, kind, Duration::from_secs(30))
            .map_err(exec_err)
    }, api_version: &str, kind: &str);

    // apply(path[, opts]) — a YAML file or a bundle directory (every *.yaml, in name order).
    let c = ctx.clone();
    let apply = move |path: &str, opts: Map| -> RResult<Array> {
        check_keys("kube::apply", &opts, &["timeout"])?;
        let t = opt_timeout(&opts, 120)?;
        let mut out = Array::new();
        for m in manifests_for(&c, path, "kube::apply")? {
            let refs = c.exec.apply(&m, t);
            // A partly applied manifest is recorded too: its cleanup deletes what did land.
            c.ledger.applied(&m);
            out.extend(refs_to_array(refs.map_err(exec_err)?));
        }
        Ok(out)
    };
    let a2 = apply.clone();
    regp!(&mut m, "apply", move |path: &str| a2(path, Map::new()), path: &str);
    regp!(&mut m, "apply", apply, path: &str, opts: Map);

    let c = ctx.clone();
    let delete = move |path: &str, opts: Map| -> RResult<Array> {
        check_keys("kube::delete", &opts, &["timeout"])?;
        let t = opt_timeout(&opts, 120)?;
        let mut out = Array::new();
        // Delete files in reverse order: workloads before the things they use.
        for m in manifests_for(&c, path, "kube::delete")?.iter().rev() {
            out.extend(refs_to_array(c.exec.delete(m, t).map_err(exec_err)?));
            c.ledger.deleted(m);
        }
        Ok(out)
    };
    let d2 = delete.clone();
    regp!(&mut m, "delete", move |path: &str| d2(path, Map::new()), path: &str);
    regp!(&mut m, "delete", delete, path: &str, opts: Map);

    // Waits: target is a name, or a label selector when it contains '='.
    let waits: [(&str, &str, WaitFor, u64); 4] = [
        ("wait_pods", "Pod", WaitFor::PodsReady, 600),
        (
            "wait_raycluster",
            "RayCluster",
            WaitFor::RayClusterReady,
            900,
        ),
        ("wait_mpijob", "MPIJob", WaitFor::MpiJobFinished, 3600),
        (
            "wait_claims",
            "ResourceClaim",
            WaitFor::ClaimsAllocated,
            300,
        ),
    ];
    for (fname, kind, what, default_t) in waits {
        let c = ctx.clone();
        let w = move |target: &str, opts: Map| -> RResult<Dynamic> {
            let spec = wait_spec(kind, target, what.clone(), &opts, default_t)?;
            to_dyn(&c.exec.wait(&spec).map_err(exec_err)?)
        };
        let w2 = w.clone();
        regp!(&mut m, fname, move |target: &str| w2(target, Map::new()), target: &str);
        regp!(&mut m, fname, w, target: &str, opts: Map);
    }
    let c = ctx.clone();
    regp!(&mut m, "wait_condition", move |kind: &str,
                                         target: &str,
                                         cond: &str,
                                         opts: Map|
          -> RResult<Dynamic> {
        if api_version_for_kind(kind).is_none() {
            return Err(runtime_error(format!(
                "kube::wait_condition: unknown kind {kind:?}"
            )));
        }
        let spec = wait_spec(
            kind,
            target,
            WaitFor::Condition(cond.to_owned()),
            &opts,
            600,
        )?;
        to_dyn(&c.exec.wait(&spec).map_err(exec_err)?)
    }, kind: &str, target: &str, cond: &str, opts: Map);

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
        let out = c.exec.exec(&spec).map_err(exec_err)?;
        if opt_bool(&opts, "check")?.unwrap_or(false) && out.code != 0 {
            return Err(cluster_error(format!(
                "command `{}` in {pod} exited with {}: {}",
                spec.command.join(" "),
                out.code,
                c.redactor.redact(out.stderr.trim())
            )));
        }
        Ok(exec_result(&c, out))
    };
    let e2 = exec.clone();
    regp!(&mut m, "exec", move |pod: &str, argv: Array| e2(
        pod,
        argv,
        Map::new()
    ), pod: &str, argv: Array);
    regp!(&mut m, "exec", exec, pod: &str, argv: Array, opts: Map);

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
            namespace: opt_str(&opts, "namespace")?,
            timeout: opt_timeout(&opts, 120)?,
        };
        c.exec.copy_to(&spec).map_err(exec_err)
    };
    let cp2 = cp.clone();
    regp!(&mut m, "cp", move |local: &str, pod: &str, remote: &str| {
        cp2(local, pod, remote, Map::new())
    }, local: &str, pod: &str, remote: &str);
    regp!(&mut m, "cp", cp, local: &str, pod: &str, remote: &str, opts: Map);

    // logs(pod[, opts]) -> string
    let c = ctx.clone();
    let logs = move |pod: &str, opts: Map| -> RResult<String> {
        check_keys(
            "kube::logs",
            &opts,
            &["container", "tail", "timeout", "namespace", "save_as"],
        )?;
        let spec = LogSpec {
            pod: pod.to_owned(),
            container: opt_str(&opts, "container")?,
            tail: opt_int(&opts, "tail")?,
            namespace: opt_str(&opts, "namespace")?,
            timeout: opt_timeout(&opts, 60)?,
            capture_var: opt_str(&opts, "save_as")?,
        };
        Ok(c.redactor.redact(&c.exec.logs(&spec).map_err(exec_err)?))
    };
    let l2 = logs.clone();
    regp!(&mut m, "logs", move |pod: &str| l2(pod, Map::new()), pod: &str);
    regp!(&mut m, "logs", logs, pod: &str, opts: Map);

    // list(kind[, opts]) -> array of objects; pods(selector[, opts]) -> array of names.
    let c = ctx.clone();
    let list = move |kind: &str, opts: Map| -> RResult<Array> {
        check_keys(
            "kube::list",
            &opts,
            &[
                "selector",
                "namespace",
                "save_as",
                "expect",
                "timeout",
                "api_version",
                "columns",
            ],
        )?;
        let api_version = match opt_str(&opts, "api_version")? {
            Some(v) => v,
            None => api_version_for_kind(kind)
                .ok_or_else(|| runtime_error(format!("kube::list: unknown kind {kind:?}; pass #{{api_version: \"group/version\"}}")))?
                .to_owned(),
        };
        let spec = ListSpec {
            api_version,
            kind: kind.to_owned(),
            selector: opt_str(&opts, "selector")?,
            namespace: opt_str(&opts, "namespace")?,
            capture_var: opt_str(&opts, "save_as")?,
            expect: opt_int(&opts, "expect")?.unwrap_or(1).max(1).unsigned_abs() as usize,
            timeout: opt_timeout(&opts, 60)?,
            columns: match opts.get("columns") {
                Some(d) => {
                    let a = d.clone().try_cast::<Array>().ok_or_else(|| runtime_error("kube::list: option `columns` must be an array of \"HEADER:.json.path\""))?;
                    str_array(&a, "kube::list columns")?
                        .into_iter()
                        .map(|c| match c.split_once(':') {
                            Some((h, p)) => Ok((h.to_owned(), p.to_owned())),
                            None => Err(runtime_error(format!(
                                "kube::list: column {c:?} must look like HEADER:.json.path"
                            ))),
                        })
                        .collect::<RResult<Vec<_>>>()?
                }
                None => Vec::new(),
            },
        };
        let mut items = c.exec.list(&spec).map_err(exec_err)?;
        if spec.kind == "Secret" {
            for item in &mut items {
                remember_secret(&c, item);
                redact_secret(item);
            }
        }
        if !c.redactor.is_empty() {
            let text = serde_json::to_string(&items).map_err(|e| runtime_error(e.to_string()))?;
            items = serde_json::from_str(&c.redactor.redact(&text))
                .map_err(|e| runtime_error(e.to_string()))?;
        }
        items.iter().map(to_dyn).collect()
    };
    let list2 = list.clone();
    regp!(&mut m, "list", move |kind: &str| list2(kind, Map::new()), kind: &str);
    let list3 = list.clone();
    regp!(&mut m, "list", list3, kind: &str, opts: Map);
    let list4 = list.clone();
    let pods = move |selector: &str, mut opts: Map| -> RResult<Array> {
        opts.insert("selector".into(), selector.into());
        let items = list4("Pod", opts)?;
        Ok(items
            .into_iter()
            .filter_map(|d| d.try_cast::<Map>())
            .filter_map(|o| o.get("metadata").cloned().and_then(|m| m.try_cast::<Map>()))
            .filter_map(|meta| meta.get("name").cloned())
            .collect())
    };
    let p2 = pods.clone();
    regp!(&mut m, "pods", move |selector: &str| p2(
        selector,
        Map::new()
    ), selector: &str);
    regp!(&mut m, "pods", pods, selector: &str, opts: Map);

    // nodes() -> [#{name, labels, capacity, allocatable, dry_run}]
    let list5 = list;
    let nodes = move |opts: Map| -> RResult<Array> {
        check_keys("kube::nodes", &opts, &["resources", "columns", "timeout"])?;
        let mut lopts = Map::new();
        if let Some(t) = opts.get("timeout") {
            lopts.insert("timeout".into(), t.clone());
        }
        if let Some(d) = opts.get("resources") {
            let a = d.clone().try_cast::<Array>().ok_or_else(|| {
                runtime_error("kube::nodes: option `resources` must be an array of resource names")
            })?;
            let mut cols: Array = vec![Dynamic::from("NAME:.metadata.name".to_owned())];
            for r in str_array(&a, "kube::nodes resources")? {
                let header: String = r
                    .rsplit('/')
                    .next()
                    .unwrap_or(&r)
                    .chars()
                    .map(|ch| {
                        if ch.is_ascii_alphanumeric() {
                            ch.to_ascii_uppercase()
                        } else {
                            '_'
                        }
                    })
                    .collect();
                cols.push(Dynamic::from(format!(
                    "{header}:.status.capacity.{}",
                    r.replace('.', "\\.")
                )));
            }
            lopts.insert("columns".into(), cols.into());
        }
        // Extra plan.sh columns ("HEADER:.json.path"), e.g. a label or the kubelet version.
        if let Some(d) = opts.get("columns") {
            let extra = d.clone().try_cast::<Array>().ok_or_else(|| {
                runtime_error(
                    "kube::nodes: option `columns` must be an array of \"HEADER:.json.path\"",
                )
            })?;
            let mut cols = lopts
                .get("columns")
                .cloned()
                .and_then(|c| c.try_cast::<Array>())
                .unwrap_or_else(|| vec![Dynamic::from("NAME:.metadata.name".to_owned())]);
            cols.extend(extra);
            lopts.insert("columns".into(), cols.into());
        }
        let items = list5("Node", lopts)?;
        let mut out = Array::new();
        for d in items {
            let o = d.try_cast::<Map>().unwrap_or_default();
            let meta = o
                .get("metadata")
                .cloned()
                .and_then(|m| m.try_cast::<Map>())
                .unwrap_or_default();
            let status = o
                .get("status")
                .cloned()
                .and_then(|m| m.try_cast::<Map>())
                .unwrap_or_default();
            let mut n = Map::new();
            n.insert(
                "name".into(),
                meta.get("name").cloned().unwrap_or(Dynamic::UNIT),
            );
            n.insert(
                "labels".into(),
                meta.get("labels")
                    .cloned()
                    .unwrap_or_else(|| Map::new().into()),
            );
            n.insert(
                "capacity".into(),
                status
                    .get("capacity")
                    .cloned()
                    .unwrap_or_else(|| Map::new().into()),
            );
            n.insert(
                "allocatable".into(),
                status
                    .get("allocatable")
                    .cloned()
                    .unwrap_or_else(|| Map::new().into()),
            );
            // `v1.24.15-vke.12`: vendors gate RDMA support on the kubelet build.
            n.insert(
                "kubelet_version".into(),
                status
                    .get("nodeInfo")
                    .cloned()
                    .and_then(|i| i.try_cast::<Map>())
                    .and_then(|i| i.get("kubeletVersion").cloned())
                    .unwrap_or(Dynamic::UNIT),
            );
            n.insert(
                "dry_run".into(),
                o.get("dry_run").cloned().unwrap_or(false.into()),
            );
            out.push(n.into());
        }
        Ok(out)
    };
    let n2 = nodes.clone();
    regp!(&mut m, "nodes", move || n2(Map::new()),);
    regp!(&mut m, "nodes", nodes, opts: Map);

    // get_field(kind, name, ".status.podIP"[, #{var}]) -> string
    let c = ctx.clone();
    let get_field = move |kind: &str, name: &str, path: &str, opts: Map| -> RResult<String> {
        check_keys(
            "kube::get_field",
            &opts,
            &["save_as", "namespace", "timeout"],
        )?;
        if kind == "Secret"
            && !matches!(
                path.trim_start_matches('.').split('.').next(),
                Some("metadata" | "type")
            )
        {
            return Err(runtime_error(format!(
                "kube::get_field: secret/{name} {path}: scripts read a Secret's metadata and type only, never its values (use kube::merge_registry_secrets to combine registry credentials)"
            )));
        }
        let spec = FieldSpec {
            kind: kind.to_owned(),
            name: name.to_owned(),
            path: path.to_owned(),
            namespace: opt_str(&opts, "namespace")?,
            capture_var: opt_str(&opts, "save_as")?,
            timeout: opt_timeout(&opts, 60)?,
        };
        Ok(c.redactor
            .redact(&c.exec.get_field(&spec).map_err(exec_err)?))
    };
    let g2 = get_field.clone();
    regp!(&mut m, "get_field", move |kind: &str, name: &str, path: &str| g2(kind, name, path, Map::new()), kind: &str, name: &str, path: &str);
    regp!(&mut m, "get_field", get_field, kind: &str, name: &str, path: &str, opts: Map);

    // exec_many([#{pod, command, container, env, timeout}, ...]) -> [results], run at the same time.
    let c = ctx.clone();
    regp!(&mut m, "exec_many", move |items: Array| -> RResult<Array> {
        let mut specs = Vec::new();
        for it in items {
            let o = it.try_cast::<Map>().ok_or_else(|| {
                runtime_error("kube::exec_many: each item must be a map #{pod, command, ...}")
            })?;
            check_keys(
                "kube::exec_many item",
                &o,
                &["pod", "command", "container", "env", "timeout", "namespace"],
            )?;
            let pod = opt_str(&o, "pod")?
                .ok_or_else(|| runtime_error("kube::exec_many: an item has no `pod`"))?;
            let cmd = o
                .get("command")
                .cloned()
                .and_then(|d| d.try_cast::<Array>())
                .ok_or_else(|| {
                    runtime_error("kube::exec_many: `command` must be an array of strings")
                })?;
            specs.push(exec_spec(&pod, cmd, &o)?);
        }
        let outs = c.exec.exec_many(&specs).map_err(exec_err)?;
        Ok(outs
            .into_iter()
            .map(|o| Dynamic::from(exec_result(&c, o)))
            .collect())
    }, items: Array);

    // merge_registry_secrets([pull, push], target[, opts]) -> #{target, registries, dry_run}
    let c = ctx.clone();
    let merge = move |sources: Array, target: &str, opts: Map| -> RResult<Map> {
        check_keys(
            "kube::merge_registry_secrets",
            &opts,
            &["key", "namespace", "timeout"],
        )?;
        let spec = MergeSecretsSpec {
            sources: str_array(&sources, "kube::merge_registry_secrets sources")?,
            target: target.to_owned(),
            key: opt_str(&opts, "key")?.unwrap_or_else(|| "config.json".into()),
            namespace: opt_str(&opts, "namespace")?,
            timeout: opt_timeout(&opts, 60)?,
        };
        let s = c.exec.merge_registry_secrets(&spec).map_err(exec_err)?;
        for t in &s.sensitive {
            let label = format!("secret/{} (registry credentials)", s.target);
            c.redactor.add(&label, t.expose());
            c.redactor.add_base64(&label, t.expose());
        }
        {
            // The merged credentials are this run's own: deleted at the end (unless keep=true); plan.sh
            // deletes them in its last step.
            let mut meta = serde_json::json!({ "name": s.target });
            if let Some(ns) = &spec.namespace {
                meta["namespace"] = ns.clone().into();
            }
            c.ledger.made_for_the_run(&crate::exec::Manifest {
                display_path: format!("secret/{} (merged registry credentials)", s.target),
                objects: vec![
                    serde_json::json!({ "apiVersion": "v1", "kind": "Secret", "metadata": meta }),
                ],
            });
        }
        let mut r = Map::new();
        r.insert("target".into(), s.target.into());
        r.insert(
            "registries".into(),
            s.registries
                .into_iter()
                .map(Dynamic::from)
                .collect::<Array>()
                .into(),
        );
        r.insert("dry_run".into(), s.dry_run.into());
        Ok(r)
    };
    let m2 = merge.clone();
    regp!(&mut m, "merge_registry_secrets", move |sources: Array, target: &str| m2(sources, target, Map::new()), sources: Array, target: &str);
    regp!(&mut m, "merge_registry_secrets", merge, sources: Array, target: &str, opts: Map);

    // apply_secret(name, #{key: value or secret parameter, ...}[, #{namespace, timeout}]) -> "Secret/name".
    // The run's own: deleted at its end (unless keep=true), as the merged registry credentials are.
    let c = ctx.clone();
    let apply_secret = move |name: &str, data: Map, opts: Map| -> RResult<String> {
        check_keys("kube::apply_secret", &opts, &["namespace", "timeout"])?;
        let mut spec = crate::exec::SecretSpec {
            name: name.to_owned(),
            data: Default::default(),
            env: Default::default(),
            namespace: opt_str(&opts, "namespace")?,
            timeout: opt_timeout(&opts, 60)?,
        };
        for (k, v) in &data {
            let value = match secret_in(v) {
                Some(s) => {
                    spec.env
                        .insert(k.to_string(), crate::secrets::env_var(&s.key));
                    s.value
                }
                None if v.is_string() => crate::secrets::SecretText::new(v.to_string()),
                None => {
                    return Err(runtime_error(format!(
                        "kube::apply_secret: secret/{name} key {k}: expected a string or a secret parameter, got {}",
                        v.type_name()
                    )));
                }
            };
            spec.data.insert(k.to_string(), value);
        }
        let r = c.exec.apply_secret(&spec).map_err(exec_err)?;
        let mut meta = serde_json::json!({ "name": r.name });
        if let Some(ns) = &r.namespace {
            meta["namespace"] = ns.clone().into();
        }
        c.ledger.made_for_the_run(&crate::exec::Manifest {
            display_path: format!("secret/{} (from secret parameters)", r.name),
            objects: vec![
                serde_json::json!({ "apiVersion": "v1", "kind": "Secret", "metadata": meta }),
            ],
        });
        Ok(r.to_string())
    };
    let as2 = apply_secret.clone();
    regp!(&mut m, "apply_secret", move |name: &str, data: Map| as2(name, data, Map::new()), name: &str, data: Map);
    regp!(&mut m, "apply_secret", apply_secret, name: &str, data: Map, opts: Map);
    m
}

/// A listed Secret's values: what an exec that reads its mounted files would print, redacted from then on.
fn remember_secret(ctx: &Ctx, obj: &serde_json::Value) {
    let name = obj
        .pointer("/metadata/name")
        .and_then(serde_json::Value::as_str)
        .unwrap_or("secret");
    for (field, b64) in [("data", true), ("stringData", false)] {
        if let Some(m) = obj.get(field).and_then(serde_json::Value::as_object) {
            for (k, v) in m {
                let (Some(v), label) = (v.as_str(), format!("secret/{name} {k}")) else {
                    continue;
                };
                if b64 {
                    ctx.redactor.add_base64(&label, v);
                } else {
                    ctx.redactor.add(&label, v);
                }
            }
        }
    }
}

/// Secret values never reach scripts (they could print them): keys stay, values become `<redacted>`.
fn redact_secret(obj: &mut serde_json::Value) {
    for field in ["data", "stringData"] {
        if let Some(m) = obj
            .get_mut(field)
            .and_then(serde_json::Value::as_object_mut)
        {
            for v in m.values_mut() {
                *v = "<redacted>".into();
            }
        }
    }
    // The last-applied annotation of a kubectl-created Secret holds the values too.
    if let Some(a) = obj
        .pointer_mut("/metadata/annotations")
        .and_then(serde_json::Value::as_object_mut)
    {
        a.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
}

fn report_module(ctx: &Arc<Ctx>) -> Module {
    let mut m = Module::new();
    let statuses: [(&str, Status); 5] = [
        ("pass", Status::Pass),
        ("fail", Status::Fail),
        ("planned", Status::Planned),
        ("skip", Status::Skip),
        ("info", Status::Info),
    ];
    for (name, status) in statuses {
        let c = ctx.clone();
        reg!(&mut m, name, move |check: &str, detail: &str| {
            if status == Status::Fail {
                eprintln!("FAIL: {check}: {detail}");
            }
            c.report().check(check, status, detail);
        });
    }
    // check(name, ok, detail): pass or fail.
    let c = ctx.clone();
    reg!(&mut m, "check", move |check: &str,
                                ok: bool,
                                detail: &str|
          -> bool {
        c.report()
            .check(check, if ok { Status::Pass } else { Status::Fail }, detail);
        ok
    });
    let c = ctx.clone();
    regp!(&mut m, "measure", move |name: &str,
                                  value: f64,
                                  unit: &str|
          -> RResult<()> {
        if c.exec.is_dry_run() {
            return Err(runtime_error(format!(
                "report::measure({name:?}) in dry-run: nothing was measured; guard it with `if !DRY_RUN`"
            )));
        }
        c.report().measure(name, value, unit);
        Ok(())
    }, name: &str, value: f64, unit: &str);
    let c = ctx.clone();
    regp!(&mut m, "measure", move |name: &str,
                                  value: i64,
                                  unit: &str|
          -> RResult<()> {
        if c.exec.is_dry_run() {
            return Err(runtime_error(format!(
                "report::measure({name:?}) in dry-run: nothing was measured"
            )));
        }
        c.report().measure(name, value as f64, unit);
        Ok(())
    }, name: &str, value: i64, unit: &str);
    let c = ctx.clone();
    reg!(&mut m, "title", move |t: &str| c.report().title =
        t.to_owned());
    // table(title, text): a preformatted table kept verbatim (a code block in report.md).
    let c = ctx.clone();
    reg!(&mut m, "table", move |title: &str, text: &str| c
        .report()
        .table(title, text));
    // finish() -> verdict word; writes report.md / report.json.
    let c = ctx.clone();
    regp!(&mut m, "finish", move || -> RResult<String> {
        let mut r = c.report();
        let v = r.finish();
        c.write_report(&r)
            .map_err(|e| runtime_error(e.to_string()))?;
        Ok(format!("{}: {}", v.word(), r.summary))
    },);
    m
}

fn params_module(ctx: &Arc<Ctx>) -> Module {
    let mut m = Module::new();
    // get(key, default): --set value converted to the default's type.
    let c = ctx.clone();
    regp!(&mut m, "get", move |key: &str,
                              default: Dynamic|
          -> RResult<Dynamic> {
        c.params_read
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key.to_owned());
        if let Some(v) = c.config.secrets.get(key) {
            return Ok(Dynamic::from(SecretParam { key: key.to_owned(), value: v.clone() }));
        }
        let Some(v) = c.config.params.get(key) else {
            return Ok(default);
        };
        let bad = |what: &str| runtime_error(format!("--set {key}={v}: expected {what}"));
        if default.is_int() {
            v.trim()
                .parse::<i64>()
                .map(Dynamic::from)
                .map_err(|_| bad("an integer"))
        } else if default.is_float() {
            v.trim()
                .parse::<f64>()
                .map(Dynamic::from)
                .map_err(|_| bad("a number"))
        } else if default.is_bool() {
            match v.trim() {
                "true" | "1" | "yes" => Ok(true.into()),
                "false" | "0" | "no" => Ok(false.into()),
                _ => Err(bad("true or false")),
            }
        } else {
            Ok(v.clone().into())
        }
    }, key: &str, default: Dynamic);
    // secret(key): a parameter the workflow declares secret, from --set-secret (or --set, still kept out of
    // everything the run writes); an opaque value that prints as `<secret KEY>`. A live run needs a value;
    // a dry-run's plan.sh reads it from RDMAKIT_SECRET_KEY.
    let c = ctx.clone();
    regp!(&mut m, "secret", move |key: &str| -> RResult<Dynamic> {
        c.params_read
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key.to_owned());
        let value = match (c.config.secrets.get(key), c.config.params.get(key)) {
            (Some(v), _) => v.clone(),
            (None, Some(v)) => {
                c.redactor.add(key, v);
                crate::secrets::SecretText::new(v.clone())
            }
            (None, None) if c.exec.is_dry_run() => crate::secrets::SecretText::default(),
            (None, None) => {
                return Err(runtime_error(format!(
                    "params::secret({key:?}): no value; pass --set-secret {key} with {} in the environment (or --set-secret {key}=VALUE)",
                    crate::secrets::env_var(key)
                )));
            }
        };
        Ok(Dynamic::from(SecretParam { key: key.to_owned(), value }))
    }, key: &str);
    let c = ctx.clone();
    reg!(&mut m, "all", move || -> Map {
        c.params_read
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(c.config.params.keys().cloned());
        c.config
            .params
            .iter()
            .map(|(k, v)| (k.as_str().into(), Dynamic::from(v.clone())))
            .chain(c.config.secrets.iter().map(|(k, v)| {
                (
                    k.as_str().into(),
                    Dynamic::from(SecretParam {
                        key: k.clone(),
                        value: v.clone(),
                    }),
                )
            }))
            .collect()
    });
    m
}

/// Paths scripts may write: relative, inside the out dir, no `..`.
fn confined(ctx: &Ctx, rel: &str) -> RResult<std::path::PathBuf> {
    let p = Path::new(rel);
    if p.is_absolute() || p.components().any(|c| matches!(c, Component::ParentDir)) {
        return Err(runtime_error(format!(
            "fs: {rel:?} must be a relative path inside the out dir (no `..`)"
        )));
    }
    Ok(ctx.config.out_dir.join(p))
}

fn fs_module(ctx: &Arc<Ctx>) -> Module {
    let mut m = Module::new();
    let c = ctx.clone();
    regp!(&mut m, "write", move |rel: &str,
                                text: &str|
          -> RResult<String> {
        let p = confined(&c, rel)?;
        if let Some(dir) = p.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| runtime_error(format!("{}: {e}", dir.display())))?;
        }
        std::fs::write(&p, text).map_err(|e| runtime_error(format!("{}: {e}", p.display())))?;
        c.wrote(rel)?;
        Ok(rel.to_owned())
    }, rel: &str, text: &str);
    let c = ctx.clone();
    regp!(&mut m, "read", move |path: &str| -> RResult<String> {
        let p = c.resolve_path(path, "fs::read")?;
        std::fs::read_to_string(&p).map_err(|e| runtime_error(format!("{}: {e}", p.display())))
    }, path: &str);
    let c = ctx.clone();
    regp!(&mut m, "exists", move |path: &str| -> RResult<bool> {
        Ok(c.resolve_path(path, "fs::exists")?.exists())
    }, path: &str);
    let c = ctx.clone();
    reg!(&mut m, "out_dir", move || c
        .config
        .out_dir
        .display()
        .to_string());
    m
}

fn shell_module(ctx: &Arc<Ctx>) -> Module {
    let mut m = Module::new();
    let c = ctx.clone();
    regp!(&mut m, "run", move |cmd: &str| -> RResult<Map> {
        if !c.config.allow_shell {
            return Err(runtime_error(format!(
                "shell::run refused: this workflow wants to run `{cmd}` on your machine; re-run with --allow-shell if you trust it"
            )));
        }
        let mut r = Map::new();
        if c.exec.is_dry_run() {
            c.exec
                .note(&format!("local shell (not run in dry-run): {cmd}"));
            r.insert("stdout".into(), "".into());
            r.insert("stderr".into(), "".into());
            r.insert("code".into(), 0_i64.into());
            r.insert("dry_run".into(), true.into());
            return Ok(r);
        }
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(cmd)
            .output()
            .map_err(|e| runtime_error(format!("shell::run `{cmd}`: {e}")))?;
        r.insert(
            "stdout".into(),
            String::from_utf8_lossy(&out.stdout).into_owned().into(),
        );
        r.insert(
            "stderr".into(),
            String::from_utf8_lossy(&out.stderr).into_owned().into(),
        );
        r.insert(
            "code".into(),
            i64::from(out.status.code().unwrap_or(-1)).into(),
        );
        r.insert("dry_run".into(), false.into());
        Ok(r)
    }, cmd: &str);
    m
}
