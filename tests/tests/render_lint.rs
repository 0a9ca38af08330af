//! Rendered bundles pass the RDMA linter: no error-severity finding for any built-in profile, and the
//! warnings that remain are listed here on purpose.

use k8s_render::lint::{LintOptions, lint};
use k8s_render::manifest::{Severity, parse_str};
use k8s_render::{FileKind, RdmaAttachment, Values, render_all};
use rdmakit::profiles::{builtin_names, load_builtin};

#[test]
fn rendered_bundles_have_no_lint_errors() {
    let mut linted = 0;
    for name in builtin_names() {
        let profile = load_builtin(name).unwrap();
        let extra = match &profile.rdma {
            RdmaAttachment::DevicePlugin { resources } => resources.keys().cloned().collect(),
            RdmaAttachment::Dra(_) => Vec::new(),
        };
        let bundle = render_all(&profile, &Values::default()).unwrap();
        for file in bundle
            .files()
            .iter()
            .filter(|f| f.kind == FileKind::Manifest)
        {
            let options = LintOptions {
                rdma_nodes: None,
                device_pattern: Some(profile.devices.name_pattern.clone()),
                // nccl-tests with NCCL_SHM_DISABLE=1 is a benchmark by design.
                benchmark: file.path == "mpi-job.yaml",
                extra_rdma_resources: extra.clone(),
            };
            let docs = parse_str(&file.path, &file.contents).unwrap();
            let findings = lint(&docs, &options);
            let errors: Vec<String> = findings
                .iter()
                .filter(|f| f.severity == Severity::Error)
                .map(ToString::to_string)
                .collect();
            assert!(
                errors.is_empty(),
                "{name}: {}:\n{}",
                file.path,
                errors.join("\n")
            );
            linted += docs.len();
        }
    }
    assert!(linted >= 30, "only {linted} documents linted");
}
