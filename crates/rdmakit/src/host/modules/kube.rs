//! `kube::` — every cluster action a workflow takes, through the executor (dry-run or live): apply, delete,
//! waits, exec (with stdin), cp, logs, list/pods/nodes, get_field, exec_many, the registry-credentials merge
//! and Secrets from secret parameters. What comes back is redacted of every secret the run knows.

use std::sync::Arc;
use std::time::Duration;

use rhai::{Array, Dynamic, Map, Module};

use super::super::convert::{
    check_keys, opt_bool, opt_int, opt_namespace, opt_str, opt_timeout, str_array, to_dyn,
};
use super::super::{Ctx, SecretParam, cluster_error, runtime_error};
use super::{RResult, exec_err};
use crate::exec::{
    CopySpec, ExecSpec, FieldSpec, ListSpec, LogSpec, Manifest, MergeSecretsSpec, WaitFor,
    WaitSpec, api_version_for_kind,
};
use crate::manifests::read_yaml_file;

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
        namespace: opt_namespace(opts)?,
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
        namespace: opt_namespace(opts)?,
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
/// The `kube::` module.
pub(crate) fn create_module(ctx: &Arc<Ctx>) -> Module {
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
    // #{if_absent: true}: apply only the objects the cluster lacks; what is there is someone else's (never
    // deleted by this run).
    let apply = move |path: &str, opts: Map| -> RResult<Array> {
        check_keys("kube::apply", &opts, &["timeout", "if_absent"])?;
        let t = opt_timeout(&opts, 120)?;
        let if_absent = opt_bool(&opts, "if_absent")?.unwrap_or(false);
        c.precheck()?;
        let mut out = Array::new();
        for m in manifests_for(&c, path, "kube::apply")? {
            if if_absent {
                out.extend(apply_absent(&c, &m, t)?);
                continue;
            }
            let refs = c.exec.apply(&m, t);
            // A partly applied manifest is recorded too: its cleanup deletes what did land.
            c.ledger.applied(&m);
            out.extend(refs_to_array(refs.map_err(exec_err)?));
        }
        Ok(out)
    };
    regp_opts!(&mut m, "apply", apply, path: &str);

    let c = ctx.clone();
    let delete = move |path: &str, opts: Map| -> RResult<Array> {
        check_keys("kube::delete", &opts, &["timeout"])?;
        let t = opt_timeout(&opts, 120)?;
        let mut out = Array::new();
        // Delete files in reverse order: workloads before the things they use.
        for m in manifests_for(&c, path, "kube::delete")?.iter().rev() {
            let ours = without_others(&c, m);
            if !ours.objects.is_empty() {
                out.extend(refs_to_array(c.exec.delete(&ours, t).map_err(exec_err)?));
            }
            c.ledger.deleted(m);
        }
        Ok(out)
    };
    regp_opts!(&mut m, "delete", delete, path: &str);

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
        regp_opts!(&mut m, fname, w, target: &str);
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
        remember_pod_secrets(&c, &spec.pod, spec.namespace.as_deref());
        Ok(exec_result(&c, out))
    };
    regp_opts!(&mut m, "exec", exec, pod: &str, argv: Array);

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
    regp_opts!(&mut m, "cp", cp, local: &str, pod: &str, remote: &str);

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
            namespace: opt_namespace(&opts)?,
            timeout: opt_timeout(&opts, 60)?,
            capture_var: opt_str(&opts, "save_as")?,
        };
        Ok(c.redactor.redact(&c.exec.logs(&spec).map_err(exec_err)?))
    };
    regp_opts!(&mut m, "logs", logs, pod: &str);

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
            namespace: opt_namespace(&opts)?,
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
    regp_opts!(&mut m, "list", list.clone(), kind: &str);
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
    regp_opts!(&mut m, "pods", pods, selector: &str);

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
    regp_opts!(&mut m, "nodes", nodes,);

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
            namespace: opt_namespace(&opts)?,
            capture_var: opt_str(&opts, "save_as")?,
            timeout: opt_timeout(&opts, 60)?,
        };
        Ok(c.redactor
            .redact(&c.exec.get_field(&spec).map_err(exec_err)?))
    };
    regp_opts!(&mut m, "get_field", get_field, kind: &str, name: &str, path: &str);

    // exec_many([#{pod, command, container, env, timeout}, ...]) -> one #{stdout, stderr, code, error,
    // cancelled} per rank, run at the same time, each under its own timeout; the first rank that fails
    // stops the others (cancelled, with what they printed so far).
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
        c.precheck()?;
        let outs = c.exec.exec_many(&specs).map_err(exec_err)?;
        for s in &specs {
            remember_pod_secrets(&c, &s.pod, s.namespace.as_deref());
        }
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
            namespace: opt_namespace(&opts)?,
            timeout: opt_timeout(&opts, 60)?,
        };
        c.precheck()?;
        let s = c.exec.merge_registry_secrets(&spec).map_err(exec_err)?;
        for t in &s.sensitive {
            let label = format!("secret/{} (registry credentials)", s.target);
            c.redactor.add(&label, t.expose());
            c.redactor.add_base64(&label, t.expose());
        }
        // The merged credentials are this run's own: deleted at the end (unless keep=true); plan.sh
        // deletes them in its last step.
        own_secret(
            &c,
            &s.target,
            spec.namespace.as_deref(),
            "merged registry credentials",
        );
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
    regp_opts!(&mut m, "merge_registry_secrets", merge, sources: Array, target: &str);

    // apply_secret(name, #{key: value or secret parameter, ...}[, #{namespace, timeout}]) -> "Secret/name".
    // The run's own: deleted at its end (unless keep=true), as the merged registry credentials are.
    let c = ctx.clone();
    let apply_secret = move |name: &str, data: Map, opts: Map| -> RResult<String> {
        check_keys("kube::apply_secret", &opts, &["namespace", "timeout"])?;
        let mut spec = crate::exec::SecretSpec {
            name: name.to_owned(),
            data: Default::default(),
            env: Default::default(),
            namespace: opt_namespace(&opts)?,
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
        c.precheck()?;
        let r = c.exec.apply_secret(&spec).map_err(exec_err)?;
        own_secret(
            &c,
            &r.name,
            r.namespace.as_deref(),
            "from secret parameters",
        );
        Ok(r.to_string())
    };
    regp_opts!(&mut m, "apply_secret", apply_secret, name: &str, data: Map);
    m
}

/// `kube::apply(.., #{if_absent: true})` of one manifest: the ledger gets only what was applied, and what
/// was already there is remembered as someone else's.
fn apply_absent(ctx: &Ctx, m: &Manifest, timeout: Duration) -> RResult<Array> {
    let (applied, present) = ctx.exec.apply_if_absent(m, timeout).map_err(exec_err)?;
    let mine = |o: &serde_json::Value| {
        crate::exec::ObjRef::from_object(o, &m.display_path).is_ok_and(|r| applied.contains(&r))
    };
    let own = Manifest {
        display_path: m.display_path.clone(),
        objects: m.objects.iter().filter(|o| mine(o)).cloned().collect(),
    };
    if !own.objects.is_empty() {
        ctx.ledger.applied(&own);
    }
    for r in &present {
        ctx.report().check(
            &format!("{r} left as it is"),
            crate::report::Status::Info,
            "already in the cluster before this run: someone else's (DRANET, a cloud add-on), so it is neither changed nor deleted",
        );
    }
    ctx.not_ours
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .extend(present);
    Ok(refs_to_array(applied))
}

/// `m` without the objects that were already in the cluster when this run applied it if absent.
fn without_others(ctx: &Ctx, m: &Manifest) -> Manifest {
    let not_ours = ctx.not_ours.lock().unwrap_or_else(|e| e.into_inner());
    Manifest {
        display_path: m.display_path.clone(),
        objects: m
            .objects
            .iter()
            .filter(|o| {
                crate::exec::ObjRef::from_object(o, &m.display_path)
                    .map_or(true, |r| !not_ours.contains(&r))
            })
            .cloned()
            .collect(),
    }
}

/// Records a Secret the run made for its own use (deleted at its end unless keep=true, and in plan.sh's
/// last step).
fn own_secret(ctx: &Ctx, name: &str, namespace: Option<&str>, what: &str) {
    let mut meta = serde_json::json!({ "name": name });
    if let Some(ns) = namespace {
        meta["namespace"] = ns.into();
    }
    ctx.ledger.made_for_the_run(&Manifest {
        display_path: format!("secret/{name} ({what})"),
        objects: vec![
            serde_json::json!({ "apiVersion": "v1", "kind": "Secret", "metadata": meta }),
        ],
    });
}

/// The Secrets a pod mounts, reads into its environment or pulls images with: an exec in it could print
/// their values (`cat` a mounted file), so they are redacted from its output. Read once per pod, live
/// only; what cannot be read (no permission, a server without it) is left to the other layers.
fn remember_pod_secrets(ctx: &Ctx, pod: &str, namespace: Option<&str>) {
    if ctx.exec.is_dry_run() {
        return;
    }
    let key = (pod.to_owned(), namespace.map(str::to_owned));
    if !ctx
        .pods_seen
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key)
    {
        return;
    }
    // One field of an object as JSON, or nothing (not there, not allowed).
    let json_field = |kind: &str, name: &str, path: &str| {
        let spec = FieldSpec {
            kind: kind.into(),
            name: name.to_owned(),
            path: path.into(),
            namespace: namespace.map(str::to_owned),
            capture_var: None,
            timeout: Duration::from_secs(30),
        };
        ctx.exec
            .get_field(&spec)
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
    };
    let Some(pod_spec) = json_field("Pod", pod, ".spec") else {
        return;
    };
    let names = secret_names(&pod_spec);
    if names.is_empty() {
        return;
    }
    // Each by name (`get`, not `list`: the least a namespace-scoped credential needs).
    for name in names {
        if let Some(data) = json_field("Secret", &name, ".data") {
            remember_secret(
                ctx,
                &serde_json::json!({ "metadata": { "name": name }, "data": data }),
            );
        }
    }
}

/// Names of the Secrets a pod spec refers to: secret and projected volumes, `envFrom`, `env` secret keys,
/// `imagePullSecrets`.
fn secret_names(spec: &serde_json::Value) -> std::collections::BTreeSet<String> {
    let items = |v: &serde_json::Value, p: &str| -> Vec<serde_json::Value> {
        v.pointer(p)
            .and_then(serde_json::Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let mut out = std::collections::BTreeSet::new();
    let mut add = |v: Option<&serde_json::Value>| {
        if let Some(n) = v.and_then(serde_json::Value::as_str) {
            out.insert(n.to_owned());
        }
    };
    for v in items(spec, "/volumes") {
        add(v.pointer("/secret/secretName"));
        for src in items(&v, "/projected/sources") {
            add(src.pointer("/secret/name"));
        }
    }
    let containers = items(spec, "/containers");
    for c in containers.iter().chain(&items(spec, "/initContainers")) {
        for e in items(c, "/envFrom") {
            add(e.pointer("/secretRef/name"));
        }
        for e in items(c, "/env") {
            add(e.pointer("/valueFrom/secretKeyRef/name"));
        }
    }
    for s in items(spec, "/imagePullSecrets") {
        add(s.get("name"));
    }
    out
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
