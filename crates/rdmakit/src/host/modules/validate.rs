//! `validate::` — schema validation (Kubernetes and the CRDs k8s-render knows) of the manifests this run
//! wrote, recorded in the report.

use std::sync::Arc;

use rhai::{Dynamic, Module};

use super::super::{Ctx, runtime_error};
use super::{RResult, ser};

/// The `validate::` module.
pub(super) fn create_module(ctx: &Arc<Ctx>) -> Module {
    let mut m = Module::new();
    let c = ctx.clone();
    regp!(&mut m, "bundle",
        "bundle(dir) -> [violation, ...]: validates the manifests this run wrote against the \
        Kubernetes and CRD schemas (strict: unknown fields are errors) and records \"bundle: schema \
        validation (strict)\" as pass or fail (local files, no cluster involved).",
        move |dir: &str| -> RResult<Dynamic> {
        let path = c.resolve_path(dir, "validate::bundle")?;
        let docs = c.run_docs(&path).map_err(runtime_error)?;
        let violations = k8s_render::validate::validate(&docs, &k8s_render::validate::ValidateOptions::default());
        let errors: Vec<String> = violations
            .iter()
            .filter(|v| v.severity == k8s_render::manifest::Severity::Error)
            .map(|v| v.to_string())
            .collect();
        c.exec.note(&format!("validated {dir} against the Kubernetes/CRD schemas: {} error(s)", errors.len()));
        let mut r = c.report();
        if errors.is_empty() {
            r.check("bundle: schema validation (strict)", crate::report::Status::Pass, &format!("{} document(s) valid", docs.len()));
        } else {
            r.check("bundle: schema validation (strict)", crate::report::Status::Fail, &errors.join("; "));
        }
        drop(r);
        // An edited bundle (--bundle) that is not valid is not applied.
        if let (Some(user), false) = (&c.config.bundle, errors.is_empty()) {
            return Err(runtime_error(format!("--bundle {}: the edited bundle is not valid ({}): fix the files", user.dir.display(), errors.join("; "))));
        }
        ser(&violations)
    }, dir: &str);
    m
}
