//! Rendered bundles pass the RDMA linter: no error-severity finding for any built-in profile, and the
//! warnings that remain are listed here on purpose.

use k8s_render::lint::{LintOptions, is_dockerfile, lint, lint_dockerfile};
use k8s_render::manifest::{Severity, parse_str};
use k8s_render::{FileKind, System, Values, render, render_all};
use rdmakit::profiles::{builtin_names, load_builtin};

/// Default values, plus an nccl-tests image when the profile names none (rdmakit has no default: issue 25),
/// so `render_all` renders the MPIJob; a profile's own image stays in the snapshots.
fn named_image(profile: &k8s_render::Profile) -> Values {
    let mut v = Values::default();
    if !profile.values.contains_key("nccl_tests_image") {
        v.set("nccl_tests_image", "registry.example.com/nccl-tests:2.19")
            .expect("a valid image reference");
    }
    v
}

#[test]
fn rendered_bundles_have_no_lint_errors() {
    let mut linted = 0;
    for name in builtin_names() {
        let profile = load_builtin(name).unwrap();
        let bundle = render_all(&profile, &named_image(&profile)).unwrap();
        for file in bundle
            .files()
            .iter()
            .filter(|f| f.kind == FileKind::Manifest)
        {
            // nccl-tests with NCCL_SHM_DISABLE=1 is a benchmark by design.
            let options = LintOptions::for_profile(&profile, None, file.path == "mpi-job.yaml");
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

/// Every profile's rendered Dockerfile is recognised as one and passes the Dockerfile rules with
/// that profile's options (packages, APT source, NCCL pin); with another vendor's packages it does not.
#[test]
fn rendered_dockerfiles_pass_the_dockerfile_rules() {
    for name in builtin_names() {
        let profile = load_builtin(name).unwrap();
        let bundle = render(System::Image, &profile, &Values::default()).unwrap();
        let file = bundle.get("Dockerfile").expect("Dockerfile rendered");
        assert!(is_dockerfile(&file.path, &file.contents));
        let findings = lint_dockerfile(
            &file.path,
            &file.contents,
            &LintOptions::for_profile(&profile, None, false),
        );
        assert!(
            findings.is_empty(),
            "{name}:\n{}",
            findings
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    // The mlx5 image (distribution packages, no vendor source) linted for eRDMA.
    let mlx = render(
        System::Image,
        &load_builtin("mellanox-ib").unwrap(),
        &Values::default(),
    )
    .unwrap();
    let erdma = LintOptions::for_profile(&load_builtin("aliyun-erdma").unwrap(), None, false);
    let file = mlx.get("Dockerfile").expect("Dockerfile");
    let rules: Vec<&str> = lint_dockerfile(&file.path, &file.contents, &erdma)
        .iter()
        .map(|f| f.rule)
        .collect();
    assert!(
        rules.contains(&"dockerfile-apt-without-vendor-source"),
        "{rules:?}"
    );
}

/// The rendered Ray programs (RDT demo, NCCL check) pass the text rules: receiver with
/// enable_tensor_transport, a collective group, no ray.get of an RDT ref, no GLOO/NIXL.
#[test]
fn rendered_programs_pass_the_text_rules() {
    for name in builtin_names() {
        let profile = load_builtin(name).unwrap();
        let bundle = render_all(&profile, &named_image(&profile)).unwrap();
        let options = LintOptions::for_profile(&profile, None, false);
        for file in bundle.files().iter().filter(|f| f.kind == FileKind::Python) {
            let findings = k8s_render::lint::lint_text(&file.path, &file.contents, &options);
            assert!(findings.is_empty(), "{name}: {}: {findings:#?}", file.path);
        }
    }
}
