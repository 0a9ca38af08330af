//! What the integration tests share: the workspace's paths and fixtures, a script run through the host
//! (dry-run or with any executor), the binary as a user runs it ([`cli`]) and the fake Kubernetes API
//! server ([`fake_api`]).
#![allow(clippy::unwrap_used)] // helpers outside #[test] fns unwrap too: a failure is a test failure
#![allow(dead_code)] // each test file uses part of it

pub mod cli;
pub mod fake_api;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rdmakit::cancel::Cancel;
use rdmakit::exec::dry::DryRunExecutor;
use rdmakit::exec::{ExecOutput, Executor};
use rdmakit::host::{Host, HostConfig, Limits, RunOutcome};
use rdmakit::plan::Plan;

/// The workspace root (two levels above this crate).
pub fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root")
}

/// A file of probe's test fixtures (`crates/probe/tests/fixtures/<path>`), as text.
pub fn fixture(path: &str) -> String {
    std::fs::read_to_string(workspace().join("crates/probe/tests/fixtures").join(path)).unwrap()
}

/// The text of `scripts/workflows/<name>.rhai`.
pub fn workflow_source(name: &str) -> String {
    std::fs::read_to_string(workspace().join(format!("scripts/workflows/{name}.rhai"))).unwrap()
}

/// A host configuration writing into `out`, with `scripts/lib` importable and `--set` `params`.
pub fn host_config(out: &Path, params: &[(&str, &str)]) -> HostConfig {
    let mut cfg = HostConfig::new(out);
    cfg.lib_dirs = vec![workspace().join("scripts/lib")];
    cfg.params = params
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    cfg
}

/// Runs `script` as `scripts/workflows/<name>.rhai` on `exec`.
pub fn run(exec: Arc<dyn Executor>, name: &str, script: &str, cfg: HostConfig) -> RunOutcome {
    let host = Host::new(exec, cfg, Cancel::new(), &format!("{name}.rhai"));
    host.run(&format!("scripts/workflows/{name}.rhai"), script)
}

/// Runs `script` as `t.rhai` (no folder: error locations read `t.rhai:LINE:COL`) on `exec`.
pub fn run_t(exec: Arc<dyn Executor>, cfg: HostConfig, script: &str) -> RunOutcome {
    Host::new(exec, cfg, Cancel::new(), "t.rhai").run("t.rhai", script)
}

/// Runs a script in dry-run with `scripts/lib` importable; returns the outcome and the plan.
pub fn dry_run(
    name: &str,
    script: &str,
    out: &Path,
    params: &[(&str, &str)],
    limits: Option<Limits>,
) -> (RunOutcome, Plan) {
    let dry = Arc::new(DryRunExecutor::new(&format!("{name}.rhai"), None, None));
    let mut cfg = host_config(out, params);
    if let Some(l) = limits {
        cfg.limits = l;
    }
    let outcome = run(dry.clone(), name, script, cfg);
    (outcome, dry.plan())
}

/// What a command that printed `stdout` and exited 0 returns.
pub fn output(stdout: &str) -> ExecOutput {
    ExecOutput {
        stdout: stdout.to_owned(),
        stderr: String::new(),
        code: 0,
        ..Default::default()
    }
}
