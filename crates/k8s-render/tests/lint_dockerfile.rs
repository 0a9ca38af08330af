//! Dockerfile rules: known-bad NCCL pins (pip, ENV, base image tags), torch's bundled NCCL, RDMA
//! userspace packages and the vendor APT source.

use k8s_render::lint::{self, Finding, LintOptions, is_dockerfile, lint_dockerfile};
use k8s_render::manifest::Severity;

fn erdma() -> LintOptions {
    LintOptions {
        device_pattern: Some("erdma_*".into()),
        userspace_packages: vec![
            "libibverbs1".into(),
            "ibverbs-providers".into(),
            "ibverbs-utils".into(),
            "librdmacm1".into(),
        ],
        apt_source: Some(
            "http://mirrors.cloud.aliyuncs.com/erdma/apt/ubuntu ${VERSION_CODENAME}/erdma main"
                .into(),
        ),
        ..Default::default()
    }
}

fn rules(f: &[Finding]) -> Vec<(&str, Option<u64>, Severity)> {
    f.iter()
        .map(|f| (f.rule, f.location.line, f.severity))
        .collect()
}

const GOOD: &str = "# syntax=docker/dockerfile:1
# NCCL 2.28.7 and 2.28.9 segfault on eRDMA (a comment is no pin).
FROM rayproject/ray-llm:2.57.0-py312-cu130
USER root
RUN apt-get update -qq \\
 && wget -qO - http://mirrors.cloud.aliyuncs.com/erdma/GPGKEY | gpg --dearmor -o /usr/share/keyrings/erdma.gpg \\
 && echo \"deb [signed-by=/usr/share/keyrings/erdma.gpg] http://mirrors.cloud.aliyuncs.com/erdma/apt/ubuntu jammy/erdma main\" > /etc/apt/sources.list.d/erdma.list \\
 && apt-get update -qq \\
 && apt-get install -y -qq --no-install-recommends libibverbs1 ibverbs-providers ibverbs-utils librdmacm1
RUN pip install --no-cache-dir nvidia-nccl-cu13==2.30.7
";

#[test]
fn a_seed_000_style_dockerfile_is_clean() {
    assert!(is_dockerfile("Dockerfile", GOOD));
    assert!(is_dockerfile("build/ray.Dockerfile", "RUN true"));
    assert!(is_dockerfile("image.txt", "ARG BASE=x\nFROM ${BASE}\n"));
    assert!(!is_dockerfile("pod.yaml", "apiVersion: v1\nkind: Pod\n"));
    let f = lint_dockerfile("Dockerfile", GOOD, &erdma());
    assert!(f.is_empty(), "{f:#?}");
}

#[test]
fn bad_nccl_pins_anywhere_in_the_dockerfile() {
    let text = "FROM nvcr.io/nvidia/pytorch:25.01-py3\nENV NCCL_VERSION=2.28.9\nARG NCCL=2.28.7\nRUN pip install nvidia-nccl-cu12==2.28.9\nRUN apt-get install -y libnccl2=2.28.7-1+cuda12.9 libibverbs1 ibverbs-providers ibverbs-utils librdmacm1\n";
    let f = lint_dockerfile(
        "Dockerfile",
        &text.replace(
            "\nRUN apt",
            "\nRUN echo mirrors.cloud.aliyuncs.com/erdma && apt",
        ),
        &erdma(),
    );
    let mut bad: Vec<(Option<u64>, String)> = f
        .iter()
        .filter(|f| f.rule == "nccl-known-bad-version")
        .map(|f| (f.location.line, f.location.path.to_string()))
        .collect();
    bad.sort();
    let lines: Vec<(Option<u64>, &str)> = bad.iter().map(|(l, p)| (*l, p.as_str())).collect();
    assert_eq!(
        lines,
        [
            (Some(2), "ENV"),
            (Some(3), "ARG"),
            (Some(4), "RUN"),
            (Some(5), "RUN")
        ],
        "{f:#?}"
    );
    assert!(f.iter().all(|f| f.severity == Severity::Error));
    assert_eq!(f[0].location.object, "Dockerfile");
    // A base image tag that bundles a bad NCCL.
    let f = lint_dockerfile(
        "Dockerfile",
        "FROM registry/pai/nccl-tests:12.2.2-nccl2.28.9-1\nRUN apt-get install -y rdma-core\n",
        &LintOptions::default(),
    );
    assert_eq!(
        rules(&f),
        [("nccl-known-bad-version", Some(1), Severity::Error)]
    );
}

#[test]
fn torch_base_image_without_a_pin_warns() {
    let text =
        "FROM pytorch/pytorch:2.11.0-cuda12.8-cudnn9-runtime\nRUN apt-get install -y rdma-core\n";
    let f = lint_dockerfile("Dockerfile", text, &LintOptions::default());
    assert_eq!(
        rules(&f),
        [("torch-bundled-bad-nccl", Some(1), Severity::Warning)]
    );
    let pinned = format!("{text}RUN pip install nvidia-nccl-cu12==2.30.7\n");
    assert!(lint_dockerfile("Dockerfile", &pinned, &LintOptions::default()).is_empty());
}

#[test]
fn missing_userspace_and_vendor_source() {
    // No RDMA packages at all: an error with the profile, naming every missing package.
    let f = lint_dockerfile(
        "Dockerfile",
        "FROM rayproject/ray-llm:2.57.0-py312-cu130\nRUN pip install nvidia-nccl-cu13==2.30.7\n",
        &erdma(),
    );
    assert_eq!(
        rules(&f),
        [(
            "dockerfile-missing-rdma-userspace",
            Some(1),
            Severity::Error
        )]
    );
    assert!(
        f[0].message
            .contains("missing libibverbs1, ibverbs-providers, ibverbs-utils, librdmacm1")
    );
    assert!(
        f[0].fix
            .contains("apt-get install -y --no-install-recommends libibverbs1")
    );

    // The packages from the distribution, not the vendor: the erdma provider is missing.
    let f = lint_dockerfile(
        "Dockerfile",
        "FROM ubuntu:22.04\nRUN apt-get update && apt-get install -y libibverbs1 ibverbs-providers ibverbs-utils librdmacm1\n",
        &erdma(),
    );
    assert_eq!(
        rules(&f),
        [(
            "dockerfile-apt-without-vendor-source",
            Some(2),
            Severity::Error
        )]
    );
    assert!(
        f[0].message.contains("mirrors.cloud.aliyuncs.com/erdma"),
        "{}",
        f[0]
    );

    // Some packages only; without a profile the finding is a warning.
    let f = lint_dockerfile(
        "Dockerfile",
        "FROM ubuntu:22.04\nRUN apt-get install -y libibverbs1\n",
        &LintOptions::default(),
    );
    assert_eq!(
        rules(&f),
        [(
            "dockerfile-missing-rdma-userspace",
            Some(1),
            Severity::Warning
        )]
    );
    assert!(
        f[0].message
            .contains("does not install every RDMA userspace package: missing ibverbs-providers")
    );
}

#[test]
fn every_rule_is_explained() {
    for r in lint::rules() {
        let text = lint::explain(r.id).expect("known rule");
        assert!(text.starts_with(r.id) && text.contains(r.why), "{text}");
    }
    let e = lint::explain("rdma-missing-ipc-lok").unwrap_err();
    assert!(e.contains("did you mean rdma-missing-ipc-lock?"), "{e}");
}

#[test]
fn the_readme_rule_table_lists_every_rule() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README readable");
    for r in lint::rules() {
        assert!(
            readme.contains(&format!("| `{}` |", r.id)),
            "README.md's rule table lacks `{}`",
            r.id
        );
    }
}
