//! The run's state, shared by every registered function ([`Ctx`]): the executor, the report, the out dir
//! and what the run wrote there, the ledger of what it applied (`ledger`), which objects are its own
//! (`ownership`), the pods whose Secrets the redactor knows and the redactor (`secret_walk`), the
//! permission pre-check (`precheck`), and path resolution with its read sandbox (`paths`).

mod ledger;
mod ownership;
mod paths;
mod precheck;
mod secret_walk;

pub use ledger::Ledger;
pub(crate) use secret_walk::redact_secret;

use std::sync::{Arc, Mutex, MutexGuard};

use rhai::EvalAltResult;

use super::{HostConfig, runtime_error};
use crate::cancel::Cancel;
use crate::exec::Executor;
use crate::report::RunReport;

/// State shared by the registered functions.
#[derive(Debug)]
pub struct Ctx {
    /// The executor (dry-run or live).
    pub exec: Arc<dyn Executor>,
    /// Run configuration.
    pub config: HostConfig,
    /// The report under construction.
    pub report: Mutex<RunReport>,
    /// Cancellation (Ctrl-C).
    pub cancel: Cancel,
    /// The out dir and the files this run wrote in it (`render::`, `fs::`, reports, plan.sh).
    pub out: crate::outdir::OutDir,
    /// Manifests this run applied and has not deleted (deleted on a script error or Ctrl-C).
    pub ledger: Ledger,
    /// The `--set` keys the script read (`params::get`, every key after `params::all()`).
    pub params_read: Mutex<std::collections::BTreeSet<String>>,
    /// Objects `kube::apply(.., #{if_absent: true})` found already in the cluster: someone else's, so
    /// `kube::delete` and the cleanup leave them alone.
    pub not_ours: Mutex<Vec<crate::exec::ObjRef>>,
    /// Pods whose Secrets (mounted, in the environment, image pulls) the redactor knows: an exec in them
    /// cannot print those values back.
    pub pods_seen: Mutex<std::collections::BTreeSet<(String, Option<String>)>>,
    /// Whether the permission pre-check ran (once, before the first change of a live run).
    pub prechecked: std::sync::atomic::AtomicBool,
    /// Every secret text the run has seen (secret parameters, merged registry credentials, listed
    /// Secrets' data): redacted from exec output, logs, reports, plans and errors.
    pub redactor: crate::secrets::Redactor,
}

impl Ctx {
    /// The report under construction (a poisoned lock still yields it: a panicked function must not
    /// lose the run's checks).
    pub(crate) fn report(&self) -> MutexGuard<'_, RunReport> {
        self.report.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Writes report.md and report.json into the out dir and records them.
    pub(crate) fn write_report(&self, report: &RunReport) -> Result<(), crate::error::ExecError> {
        let mut report = report.clone();
        report.map_text(&|t| self.redactor.redact(t));
        report.write_to(&self.config.out_dir)?;
        self.out.record("report.md")?;
        self.out.record("report.json")
    }

    /// Records a file this run wrote (relative to the out dir), so the next run here can remove it.
    pub(crate) fn wrote(&self, rel: &str) -> Result<(), Box<EvalAltResult>> {
        self.out
            .record(rel)
            .map_err(|e| runtime_error(e.to_string()))
    }
}
