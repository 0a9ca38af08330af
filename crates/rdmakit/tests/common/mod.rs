//! Helpers shared by the integration tests.
#![allow(clippy::unwrap_used)] // helpers outside #[test] fns unwrap too: a failure is a test failure
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Arc;

use rdmakit::cancel::Cancel;
use rdmakit::exec::dry::DryRunExecutor;
use rdmakit::host::{Host, HostConfig, Limits, RunOutcome};
use rdmakit::plan::Plan;

/// The workspace root (two levels above this crate).
pub fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root")
}

/// Runs a script in dry-run with `scripts/lib` importable; returns the outcome and the plan.
pub fn dry_run(
    name: &str,
    script: &str,
    out: &std::path::Path,
    params: &[(&str, &str)],
    limits: Option<Limits>,
) -> (RunOutcome, Plan) {
    let dry = Arc::new(DryRunExecutor::new(&format!("{name}.rhai"), None, None));
    let mut cfg = HostConfig::new(out);
    cfg.lib_dirs = vec![workspace().join("scripts/lib")];
    cfg.params = params
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    if let Some(l) = limits {
        cfg.limits = l;
    }
    let host = Host::new(dry.clone(), cfg, Cancel::new(), &format!("{name}.rhai"));
    let outcome = host.run(&format!("scripts/workflows/{name}.rhai"), script);
    (outcome, dry.plan())
}
