//! The Rhai modules a workflow sees, one file per script module, every one registered here
//! ([`register`]): cluster actions (`kube::`), rendering and profiles (`render::`, `profiles::`), checks
//! of manifests (`validate::`, `lint::`), judgements of what ran (`probe::`, `doctor::`, `bench::`), the
//! run's report (`report::`), its inputs and files (`params::`, `fs::`), `shell::` (with
//! `--allow-shell`), plus the global `step(title)`.

mod bench;
mod doctor;
mod fs;
mod kube;
mod lint;
mod params;
mod probe;
mod profiles;
mod render;
mod report;
mod shell;
mod validate;

pub use render::is_value_key;

use std::sync::Arc;

use rhai::{Dynamic, Engine, EvalAltResult};
use serde::Serialize;

use super::convert::to_dyn;
use super::{Ctx, cluster_error, runtime_error};
use crate::error::ExecError;

type RResult<T> = Result<T, Box<EvalAltResult>>;

/// An executor error as a Rhai error: a cluster failure (or Ctrl-C) as a `ClusterError`, the rest as
/// the script's own.
fn exec_err(e: ExecError) -> Box<EvalAltResult> {
    if e.is_cluster_error() || matches!(e, ExecError::Cancelled { .. }) {
        cluster_error(e.to_string())
    } else {
        runtime_error(e.to_string())
    }
}

/// A serializable value as the Rhai value scripts get (maps, arrays, strings, numbers).
fn ser<T: Serialize>(v: &T) -> RResult<Dynamic> {
    let json = serde_json::to_value(v).map_err(|e| runtime_error(e.to_string()))?;
    to_dyn(&json)
}

/// Registers every module and the global `step(title)` on `engine`.
pub(crate) fn register(engine: &mut Engine, ctx: &Arc<Ctx>) {
    // Global: step(title) — marks a workflow step (plans, reports, error messages).
    let c = ctx.clone();
    engine.register_fn("step", move |title: &str| {
        c.exec.begin_step(title);
        c.report().begin_step(title);
    });
    let modules = [
        ("kube", kube::create_module(ctx)),
        ("render", render::create_module(ctx)),
        ("profiles", profiles::create_module(ctx)),
        ("doctor", doctor::create_module()),
        ("probe", probe::create_module(ctx)),
        ("bench", bench::create_module(ctx)),
        ("validate", validate::create_module(ctx)),
        ("lint", lint::create_module(ctx)),
        ("report", report::create_module(ctx)),
        ("params", params::create_module(ctx)),
        ("fs", fs::create_module(ctx)),
        ("shell", shell::create_module(ctx)),
    ];
    for (name, module) in modules {
        engine.register_static_module(name, module.into());
    }
}
