//! What this run applied and has not deleted yet. When a live run stops on a script error or Ctrl-C it is
//! deleted, newest first so workloads go before what they use, unless the workflow was told `keep=true`; a
//! finished run deletes only what it made for itself (the merged registry Secret), since what a workflow
//! leaves running on purpose (shared-device-raycluster's RayCluster) is what the user came for. The report
//! lists what was cleaned and what was left. Only objects this run applied are ever deleted.

use std::sync::Mutex;
use std::time::Duration;

use crate::exec::{Executor, Manifest};
use crate::report::{RunReport, Status};

/// One applied manifest; `own` marks what the run made for its own use and never leaves behind.
#[derive(Debug, Clone)]
struct Entry {
    manifest: Manifest,
    own: bool,
}

/// Manifests applied by the run, oldest first.
#[derive(Debug, Default)]
pub struct Ledger(Mutex<Vec<Entry>>);

impl Ledger {
    fn entries(&self) -> std::sync::MutexGuard<'_, Vec<Entry>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn record(&self, m: &Manifest, own: bool) {
        let mut e = self.entries();
        if !e.iter().any(|x| x.manifest.display_path == m.display_path) {
            e.push(Entry {
                manifest: m.clone(),
                own,
            });
        }
    }

    /// Records an applied manifest (a re-apply of the same file keeps its first place).
    pub fn applied(&self, m: &Manifest) {
        self.record(m, false);
    }

    /// Records an object the run made for its own use (deleted even when the workflow finishes).
    pub fn made_for_the_run(&self, m: &Manifest) {
        self.record(m, true);
    }

    /// Forgets a manifest the workflow deleted itself.
    pub fn deleted(&self, m: &Manifest) {
        self.entries()
            .retain(|x| x.manifest.display_path != m.display_path);
    }

    /// Deletes what is still recorded (after a stop) or only the run's own objects (`all` false), newest
    /// first, and reports each outcome. Returns how many manifests could not be deleted.
    pub fn clean_up(&self, exec: &dyn Executor, report: &mut RunReport, all: bool) -> usize {
        let pending: Vec<Manifest> = {
            let mut e = self.entries();
            let (go, stay): (Vec<Entry>, Vec<Entry>) = e.drain(..).partition(|x| all || x.own);
            *e = stay;
            go.into_iter().rev().map(|x| x.manifest).collect()
        };
        let mut left = 0;
        for m in pending {
            let names = m
                .objects
                .iter()
                .filter_map(|o| {
                    Some(format!(
                        "{}/{}",
                        o.get("kind")?.as_str()?,
                        o.pointer("/metadata/name")?.as_str()?
                    ))
                })
                .collect::<Vec<_>>()
                .join(", ");
            match exec.delete(&m, Duration::from_secs(120)) {
                Ok(_) if exec.is_dry_run() => report.check(
                    &format!("cleanup: {}", m.display_path),
                    Status::Planned,
                    &format!("would delete {names}"),
                ),
                Ok(_) => report.check(
                    &format!("cleanup: {}", m.display_path),
                    Status::Info,
                    &format!("deleted {names}"),
                ),
                Err(e) => {
                    left += 1;
                    report.check(
                        &format!("cleanup: {}", m.display_path),
                        Status::Info,
                        &format!(
                            "LEFT BEHIND {names}: {e} — delete it with kubectl delete -f {}",
                            m.display_path
                        ),
                    );
                }
            }
        }
        left
    }

    /// Whether nothing is recorded.
    pub fn is_empty(&self) -> bool {
        self.entries().is_empty()
    }

    #[cfg(test)]
    fn names(&self) -> Vec<String> {
        self.entries()
            .iter()
            .map(|x| x.manifest.display_path.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::dry::DryRunExecutor;

    fn m(path: &str) -> Manifest {
        Manifest {
            display_path: path.into(),
            objects: vec![
                serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": path}}),
            ],
        }
    }

    #[test]
    fn a_finished_run_deletes_only_its_own_objects_a_stopped_run_everything_newest_first() {
        let l = Ledger::default();
        l.applied(&m("a.yaml"));
        l.made_for_the_run(&m("secret"));
        l.applied(&m("b.yaml"));
        l.applied(&m("a.yaml"));
        l.applied(&m("c.yaml"));
        l.deleted(&m("c.yaml"));
        assert_eq!(l.names(), ["a.yaml", "secret", "b.yaml"]);
        let exec = DryRunExecutor::new("t", None, None);
        let mut report = RunReport::new("t", false);
        assert_eq!(l.clean_up(&exec, &mut report, false), 0);
        assert_eq!(l.names(), ["a.yaml", "b.yaml"]);
        l.clean_up(&exec, &mut report, true);
        assert!(l.is_empty());
        let order: Vec<&str> = report.checks.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            order,
            ["cleanup: secret", "cleanup: b.yaml", "cleanup: a.yaml"]
        );
    }
}
