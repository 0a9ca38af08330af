//! Object ownership: which objects are this run's to delete. What `kube::apply(.., #{if_absent: true})`
//! found already in the cluster is someone else's (never changed or deleted by the run); the Secrets the
//! run makes for itself are deleted at its end (unless keep=true) and in plan.sh's last step.

use super::Ctx;
use crate::exec::{Manifest, ObjRef};
use crate::report::Status;

impl Ctx {
    /// After an apply-if-absent of `m`: the ledger gets only what was `applied`, and what was `present`
    /// already is recorded (a report line each) as someone else's.
    pub(crate) fn applied_if_absent(&self, m: &Manifest, applied: &[ObjRef], present: Vec<ObjRef>) {
        let mine = |o: &serde_json::Value| {
            ObjRef::from_object(o, &m.display_path).is_ok_and(|r| applied.contains(&r))
        };
        let own = Manifest {
            display_path: m.display_path.clone(),
            objects: m.objects.iter().filter(|o| mine(o)).cloned().collect(),
        };
        if !own.objects.is_empty() {
            self.ledger.applied(&own);
        }
        for r in &present {
            self.report().check(
                &format!("{r} left as it is"),
                Status::Info,
                "already in the cluster before this run: someone else's (DRANET, a cloud add-on), so it is neither changed nor deleted",
            );
        }
        self.not_ours
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(present);
    }

    /// `m` without the objects that were already in the cluster when this run applied it if absent.
    pub(crate) fn without_others(&self, m: &Manifest) -> Manifest {
        let not_ours = self.not_ours.lock().unwrap_or_else(|e| e.into_inner());
        Manifest {
            display_path: m.display_path.clone(),
            objects: m
                .objects
                .iter()
                .filter(|o| {
                    ObjRef::from_object(o, &m.display_path).map_or(true, |r| !not_ours.contains(&r))
                })
                .cloned()
                .collect(),
        }
    }

    /// Records a Secret the run made for its own use (deleted at its end unless keep=true, and in plan.sh's
    /// last step).
    pub(crate) fn own_secret(&self, name: &str, namespace: Option<&str>, what: &str) {
        let mut meta = serde_json::json!({ "name": name });
        if let Some(ns) = namespace {
            meta["namespace"] = ns.into();
        }
        self.ledger.made_for_the_run(&Manifest {
            display_path: format!("secret/{name} ({what})"),
            objects: vec![
                serde_json::json!({ "apiVersion": "v1", "kind": "Secret", "metadata": meta }),
            ],
        });
    }
}
