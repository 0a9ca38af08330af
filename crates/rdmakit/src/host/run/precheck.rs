//! The permission pre-check: before a live run's first change, one SelfSubjectAccessReview per permission
//! the run will need, so namespace-scoped credentials fail before anything changed, naming each missing
//! permission.

use rhai::EvalAltResult;

use super::Ctx;
use crate::host::cluster_error;

impl Ctx {
    /// Before a live run's first change: are the credentials allowed to create, patch and delete every
    /// object in the manifests the run has rendered so far, to exec into pods, to read and write Secrets?
    /// Namespace-scoped credentials then fail here, naming each missing permission, instead of half-way.
    pub(crate) fn precheck(&self) -> Result<(), Box<EvalAltResult>> {
        use std::sync::atomic::Ordering;
        if self.exec.is_dry_run() || self.prechecked.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        let access =
            |verb: &str, api_version: &str, kind: &str, sub: Option<&str>, ns: Option<String>| {
                crate::exec::Access {
                    verb: verb.into(),
                    api_version: api_version.into(),
                    kind: kind.into(),
                    subresource: sub.map(str::to_owned),
                    namespace: ns,
                }
            };
        let mut needed = std::collections::BTreeSet::new();
        for verb in ["get", "list"] {
            needed.insert(access(verb, "v1", "Pod", None, None));
        }
        needed.insert(access("create", "v1", "Pod", Some("exec"), None));
        needed.insert(access("get", "v1", "Pod", Some("log"), None));
        for rel in self.out.files() {
            if !(rel.ends_with(".yaml") || rel.ends_with(".yml")) {
                continue;
            }
            let Ok(objects) = crate::manifests::read_yaml_file(&self.config.out_dir.join(&rel))
            else {
                continue;
            };
            for o in &objects {
                let Ok(r) = crate::exec::ObjRef::from_object(o, &rel) else {
                    continue;
                };
                for verb in ["create", "patch", "delete"] {
                    needed.insert(access(
                        verb,
                        &r.api_version,
                        &r.kind,
                        None,
                        r.namespace.clone(),
                    ));
                }
            }
        }
        let needed: Vec<_> = needed.into_iter().collect();
        let denied = self
            .exec
            .denied(&needed, std::time::Duration::from_secs(60))
            .map_err(|e| cluster_error(e.to_string()))?;
        if denied.is_empty() {
            return Ok(());
        }
        Err(cluster_error(format!(
            "permission pre-check: these credentials may not {}; nothing was changed. Ask for a Role (or \
             ClusterRole) that grants them; `kubectl auth can-i VERB RESOURCE` checks one",
            denied
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ")
        )))
    }
}
