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
    let c = ctx.clone();
    rhai::FuncRegistration::new("step")
        .with_volatility(true)
        .with_comments([super::api_docs::doc_comment(
            "step(title): starts a workflow step: a plan header, a report section, the context of an error.",
        )])
        .with_params_info(["title: string"])
        .register_into_engine(engine, move |title: &str| {
            c.exec.begin_step(title);
            c.report().begin_step(title);
        });
    // Each module with the doc the API reference opens its section with.
    let modules = [
        (
            "kube",
            "Every cluster action a workflow takes, through the executor: a dry run records each into the plan (and plan.sh).",
            kube::create_module(ctx),
        ),
        (
            "render",
            "Render a system's manifests for a vendor profile (k8s-render).",
            render::create_module(ctx),
        ),
        (
            "profiles",
            "Vendor profiles: a user file under a vendor dir or a path, else a built-in.",
            profiles::create_module(ctx),
        ),
        (
            "doctor",
            "Known failure signatures in logs (probe's doctor).",
            doctor::create_module(),
        ),
        (
            "probe",
            "The probe crate's judgements and readers: text in (a command's output, a log, what kube:: returned), a verdict or fact out; a profile argument is a name, a path, or what profiles::load returned.",
            probe::create_module(ctx),
        ),
        (
            "bench",
            "Benchmarks on this machine (gpu-stage), benchmark output parsed and judged against a profile's expected rate, ours-beside-the-peer ratios; what is judged is recorded in the report.",
            bench::create_module(ctx),
        ),
        (
            "validate",
            "Schema validation of the manifests this run wrote.",
            validate::create_module(ctx),
        ),
        (
            "lint",
            "RDMA lint of the manifests this run wrote.",
            lint::create_module(ctx),
        ),
        (
            "report",
            "The run's report: checks, measurements, tables and the verdict (report.md and report.json in the out dir).",
            report::create_module(ctx),
        ),
        (
            "params",
            "The run's `--set` and `--set-secret` values.",
            params::create_module(ctx),
        ),
        (
            "fs",
            "Files: writes inside the out dir only, reads confined to the out dir, the workflow's folders and the files named on the command line.",
            fs::create_module(ctx),
        ),
        (
            "shell",
            "Local commands, refused unless the run was started with `--allow-shell`.",
            shell::create_module(ctx),
        ),
    ];
    for (name, doc, mut module) in modules {
        module.set_doc(doc);
        engine.register_static_module(name, module.into());
    }
}
