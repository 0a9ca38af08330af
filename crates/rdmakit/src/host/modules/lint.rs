//! `lint::` — k8s-render's RDMA lint of the manifests this run wrote, with a profile's facts when given:
//! errors fail the report, other findings are recorded beside them.

use std::sync::Arc;

use rhai::{Dynamic, Map, Module};

use super::super::{Ctx, runtime_error};
use super::profiles::load_profile;
use super::{RResult, ser};

/// The `lint::` module.
pub(super) fn create_module(ctx: &Arc<Ctx>) -> Module {
    let mut m = Module::new();
    let c = ctx.clone();
    regp!(&mut m, "bundle",
        "bundle(dir[, #{profile, nodes, benchmark}]) -> [finding, ...]: k8s-render's RDMA lint of the \
        manifests this run wrote, with the profile's device names, resources and NCCL settings when \
        given. Each finding is recorded (error: fail, warning: warn, info: info), then \"bundle: RDMA \
        lint\" passes when there is no error.",
        move |dir: &str, opts: Map| -> RResult<Dynamic> {
        super::super::convert::check_keys("lint::bundle", &opts, &["profile", "nodes", "benchmark"])?;
        let profile = match super::super::convert::opt_str(&opts, "profile")? {
            Some(p) => Some(load_profile(&c, &p)?),
            None => None,
        };
        let nodes = super::super::convert::opt_int(&opts, "nodes")?.map(|n| n.clamp(0, i64::from(u32::MAX)) as u32);
        let benchmark = super::super::convert::opt_bool(&opts, "benchmark")?.unwrap_or(false);
        let path = c.resolve_path(dir, "lint::bundle")?;
        let docs = c.run_docs(&path).map_err(runtime_error)?;
        let findings = k8s_render::lint::lint(&docs, &crate::bridge::lint_options(profile.as_ref(), nodes, benchmark));
        let mut r = c.report();
        let mut errors = Vec::new();
        // An edited bundle (--bundle) with lint errors stops here unless the user accepted them.
        let accepted = c.config.bundle.is_some() && c.config.accept_lint;
        for f in &findings {
            let status = match f.severity {
                k8s_render::manifest::Severity::Error => {
                    errors.push(f.rule.to_string());
                    if accepted { crate::report::Status::Warn } else { crate::report::Status::Fail }
                }
                k8s_render::manifest::Severity::Warning => crate::report::Status::Warn,
                k8s_render::manifest::Severity::Info => crate::report::Status::Info,
            };
            let detail = if accepted && status == crate::report::Status::Warn && f.severity == k8s_render::manifest::Severity::Error { format!("accepted with --accept-lint: {f}") } else { f.to_string() };
            r.check(&format!("bundle lint: {} ({})", f.rule, f.severity), status, &detail);
        }
        c.exec.note(&format!("linted {dir} for RDMA pitfalls: {} error(s), {} finding(s) in all", errors.len(), findings.len()));
        if errors.is_empty() {
            r.check("bundle: RDMA lint", crate::report::Status::Pass, &format!("no errors in {} document(s), {} note(s)", docs.len(), findings.len()));
        }
        drop(r);
        if let (Some(user), false, false) = (&c.config.bundle, errors.is_empty(), accepted) {
            return Err(runtime_error(format!("--bundle {}: lint found {} error(s) in the edited bundle ({}; each is in the report): fix the files, or pass --accept-lint to run it with the findings recorded as warnings", user.dir.display(), errors.len(), errors.join(", "))));
        }
        ser(&findings)
    }, dir: &str, opts: Map);
    m
}
