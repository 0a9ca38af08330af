//! `kube::wait_*`: block until pods are ready, a RayCluster is ready, an MPIJob finished, claims are
//! allocated, or any object has a condition; the target is a name, or a label selector when it has `=`.

use std::sync::Arc;

use rhai::{Dynamic, Map, Module};

use super::super::super::convert::{check_keys, opt_int, opt_namespace, opt_timeout, to_dyn};
use super::super::super::{Ctx, runtime_error};
use super::super::{RResult, exec_err};
use crate::exec::{WaitFor, WaitSpec, api_version_for_kind};

/// The wait for `kind` objects named by `target`, with the options `#{timeout, expect, namespace}`.
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

/// `wait_pods`, `wait_raycluster`, `wait_mpijob`, `wait_claims`, `wait_condition`.
pub(super) fn register(m: &mut Module, ctx: &Arc<Ctx>) {
    // Waits: target is a name, or a label selector when it contains '='.
    let waits: [(&str, &str, WaitFor, u64, &str); 4] = [
        (
            "wait_pods",
            "Pod",
            WaitFor::PodsReady,
            600,
            "until `expect` (default 1) pods are Ready",
        ),
        (
            "wait_raycluster",
            "RayCluster",
            WaitFor::RayClusterReady,
            900,
            "until the RayCluster's `status.state` is `ready`",
        ),
        (
            "wait_mpijob",
            "MPIJob",
            WaitFor::MpiJobFinished,
            3600,
            "until the MPIJob has condition `Succeeded` (`Failed` ends the wait with an error at once)",
        ),
        (
            "wait_claims",
            "ResourceClaim",
            WaitFor::ClaimsAllocated,
            300,
            "until `expect` ResourceClaims (those the selector matches, or all in the namespace with \"\") \
             are allocated",
        ),
    ];
    for (fname, kind, what, default_t, until) in waits {
        let doc = format!(
            "{fname}(name or selector[, #{{expect, timeout, namespace}}]) -> #{{state, names, dry_run}}: \
             {until}; a target with `=` is a label selector. Default timeout {default_t} s."
        );
        let c = ctx.clone();
        let w = move |target: &str, opts: Map| -> RResult<Dynamic> {
            let spec = wait_spec(kind, target, what.clone(), &opts, default_t)?;
            to_dyn(&c.exec.wait(&spec).map_err(exec_err)?)
        };
        regp_opts!(m, fname, doc, w, target: &str);
    }
    let c = ctx.clone();
    regp!(m, "wait_condition",
        "wait_condition(kind, name or selector, condition, #{expect, timeout, namespace}) -> #{state, \
        names, dry_run}: until the objects have `status.conditions[type=condition].status == \
        \"True\"`; `kind` is one the kinds table knows. Default timeout 600 s.",
        move |kind: &str,
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
}
