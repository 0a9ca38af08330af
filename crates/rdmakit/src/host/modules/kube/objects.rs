//! `kube::` over manifests: apply (all, or only what the cluster lacks), delete (leaving what was someone
//! else's), whether an API is served, and the plan's notes.

use std::sync::Arc;
use std::time::Duration;

use rhai::{Array, Dynamic, Map, Module};

use super::super::super::Ctx;
use super::super::super::convert::{check_keys, opt_bool, opt_timeout};
use super::super::{RResult, exec_err};
use crate::exec::Manifest;
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

/// `dry_run`, `note`, `plan_only`, `has_api`, `apply`, `delete`.
pub(super) fn register(m: &mut Module, ctx: &Arc<Ctx>) {
    let c = ctx.clone();
    reg!(
        m,
        "dry_run",
        "True in a dry run (nothing touches a cluster; every action is recorded into the plan).",
        move || c.exec.is_dry_run(),
    );

    let c = ctx.clone();
    reg!(m, "note",
        "Adds a human note to the plan (`# ...` in plan.sh).",
        move |text: &str| c.exec.note(text), text: &str);

    let c = ctx.clone();
    reg!(m, "plan_only",
        "plan_only(summary, shell_line): in a dry run, plan.sh gets a line computing what the \
        workflow computes in Rhai (a counter delta, say); a live run ignores it.",
        move |summary: &str, line: &str| c
        .exec
        .plan_shell(summary, line), summary: &str, line: &str);

    let c = ctx.clone();
    regp!(m, "has_api",
        "Whether the cluster serves `apiVersion`/`kind` (a CRD or DRA installed), through discovery.",
        move |api_version: &str,
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
    regp_opts!(m, "apply",
        "apply(path[, #{timeout, if_absent}]) -> [\"Kind/name\", ...]: server-side apply (field manager \
        `rdmakit`, forcing conflicts) of a YAML file or a bundle directory (every *.yaml, in name \
        order; in the out dir, only the files this run wrote). `if_absent: true` applies only the \
        objects the cluster lacks: what is already there, such as DRANET's DeviceClass, is someone \
        else's and neither `kube::delete` nor the cleanup touches it; plan.sh does the same per \
        file. What a live run applied is deleted when it stops on an error or Ctrl-C (unless \
        `keep=true`).",
        apply, path: &str);

    let c = ctx.clone();
    let delete = move |path: &str, opts: Map| -> RResult<Array> {
        check_keys("kube::delete", &opts, &["timeout"])?;
        let t = opt_timeout(&opts, 120)?;
        let mut out = Array::new();
        // Delete files in reverse order: workloads before the things they use.
        for m in manifests_for(&c, path, "kube::delete")?.iter().rev() {
            let ours = c.without_others(m);
            if !ours.objects.is_empty() {
                out.extend(refs_to_array(c.exec.delete(&ours, t).map_err(exec_err)?));
            }
            c.ledger.deleted(m);
        }
        Ok(out)
    };
    regp_opts!(m, "delete",
        "delete(path[, #{timeout}]) -> [\"Kind/name\", ...]: deletes the objects of a file or bundle \
        directory (files in reverse order, missing objects are fine), leaving what was someone \
        else's, and waits until they are gone.",
        delete, path: &str);
}

/// `kube::apply(.., #{if_absent: true})` of one manifest: only what the cluster lacks is applied, and only
/// that is this run's ([`Ctx::applied_if_absent`]).
fn apply_absent(ctx: &Ctx, m: &Manifest, timeout: Duration) -> RResult<Array> {
    let (applied, present) = ctx.exec.apply_if_absent(m, timeout).map_err(exec_err)?;
    ctx.applied_if_absent(m, &applied, present);
    Ok(refs_to_array(applied))
}
