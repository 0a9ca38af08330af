//! Built-in Rhai modules that need only the executor, one file per script module (each with its own
//! `create_module`): `kube::`, `report::`, `params::`, `fs::`, `shell::`, plus the global `step(title)`.

mod fs;
mod kube;
mod params;
mod report;
mod shell;

use std::sync::Arc;

use rhai::{Engine, EvalAltResult};

use super::{Ctx, cluster_error, runtime_error};
use crate::error::ExecError;

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
    engine.register_static_module("kube", kube::create_module(ctx).into());
    engine.register_static_module("report", report::create_module(ctx).into());
    engine.register_static_module("params", params::create_module(ctx).into());
    engine.register_static_module("fs", fs::create_module(ctx).into());
    engine.register_static_module("shell", shell::create_module(ctx).into());
}
