//! `rdmakit run --bundle DIR`: a bundle the user edited runs instead of a rendered one. The files come
//! from DIR (the --out DIR of a dry-run, or its bundle/ folder) under the names --out writes; a missing
//! or extra file, a schema error or a lint error stops the run before anything is applied, and
//! `--accept-lint` runs it with the lint errors recorded as warnings. Dry-run here (plan.sh shows what
//! would be applied); the same bundle through the live executor is in workflows_mock.rs.
#![allow(clippy::unwrap_used)] // helpers outside #[test] fns unwrap too: a failure is a test failure

mod common;

use std::path::Path;

use common::cli::{dry_run, rdmakit};

/// The rendered vke-ib-pod bundle in `dir` (a dry-run's --out).
fn rendered(dir: &Path) {
    dry_run("vke-ib-pod", dir).assert().success();
    assert!(dir.join("bundle/rdma-test-pod.yaml").is_file());
}

/// `rdmakit run vke-ib-pod --dry-run --bundle BUNDLE --out OUT [more]`.
fn with_bundle(bundle: &Path, out: &Path, more: &[&str]) -> std::process::Output {
    rdmakit()
        .args(["run", "vke-ib-pod", "--dry-run", "--bundle"])
        .arg(bundle)
        .arg("--out")
        .arg(out)
        .args(more)
        .output()
        .unwrap()
}

fn edit(file: &Path, from: &str, to: &str) {
    let text = std::fs::read_to_string(file).unwrap();
    assert!(
        text.contains(from),
        "{from:?} not in {}:\n{text}",
        file.display()
    );
    std::fs::write(file, text.replacen(from, to, 1)).unwrap();
}

#[test]
fn the_edited_files_are_what_the_run_applies() {
    let d = tempfile::tempdir().unwrap();
    let (a, b) = (d.path().join("a"), d.path().join("b"));
    rendered(&a);
    let pod = a.join("bundle/rdma-test-pod.yaml");
    edit(
        &pod,
        "    app.kubernetes.io/managed-by: rdmakit\n",
        "    app.kubernetes.io/managed-by: rdmakit\n    edited-by: me\n",
    );
    let o = with_bundle(&a, &b, &[]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{stderr}");
    // The run's bundle is the user's file, byte for byte; plan.sh applies it.
    assert_eq!(
        std::fs::read_to_string(b.join("bundle/rdma-test-pod.yaml")).unwrap(),
        std::fs::read_to_string(&pod).unwrap()
    );
    let plan = std::fs::read_to_string(b.join("plan.sh")).unwrap();
    assert!(plan.contains("bundle/rdma-test-pod.yaml"), "{plan}");
    // The bundle/ folder itself works as DIR too.
    let o = with_bundle(&a.join("bundle"), &d.path().join("c"), &[]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn a_missing_or_extra_file_is_an_error_naming_it() {
    let d = tempfile::tempdir().unwrap();
    let a = d.path().join("a");
    rendered(&a);
    std::fs::write(
        a.join("bundle/extra.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n",
    )
    .unwrap();
    let o = with_bundle(&a, &d.path().join("b"), &[]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("extra.yaml not rendered by this workflow (it renders rdma-test-pod.yaml)"),
        "{stderr}"
    );
    std::fs::remove_file(a.join("bundle/extra.yaml")).unwrap();
    std::fs::remove_file(a.join("bundle/rdma-test-pod.yaml")).unwrap();
    std::fs::write(a.join("bundle/other.yaml"), "kind: ConfigMap\n").unwrap();
    let o = with_bundle(&a, &d.path().join("b"), &[]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("rdma-test-pod.yaml is missing: this workflow renders it (rdma-test-pod for volcengine-ib)"),
        "{stderr}"
    );
    // Nothing was planned to be applied.
    let plan = std::fs::read_to_string(d.path().join("b/plan.sh")).unwrap_or_default();
    assert!(!plan.contains("kubectl apply"), "{plan}");
}

#[test]
fn a_lint_error_stops_the_run_unless_accepted_and_the_report_keeps_it() {
    let d = tempfile::tempdir().unwrap();
    let a = d.path().join("a");
    rendered(&a);
    edit(&a.join("bundle/rdma-test-pod.yaml"), "IPC_LOCK", "SYS_NICE");
    let b = d.path().join("b");
    let o = with_bundle(&a, &b, &[]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("error(s) in the edited bundle (")
            && stderr.contains("rdma-missing-ipc-lock")
            && stderr.contains("--accept-lint"),
        "{stderr}"
    );
    let report = std::fs::read_to_string(b.join("report.md")).unwrap();
    assert!(report.contains("rdma-missing-ipc-lock"), "{report}");
    let plan = std::fs::read_to_string(b.join("plan.sh")).unwrap();
    assert!(!plan.contains("apply --server-side"), "{plan}");

    // Accepted: the run goes on, the finding is in the report as a warning.
    let o = with_bundle(&a, &b, &["--accept-lint"]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{stderr}");
    let report = std::fs::read_to_string(b.join("report.json")).unwrap();
    let report: serde_json::Value = serde_json::from_str(&report).unwrap();
    let lint = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| {
            c["name"]
                .as_str()
                .unwrap()
                .contains("rdma-missing-ipc-lock")
        })
        .unwrap();
    assert_eq!(lint["status"], "warn", "{lint}");
    assert!(
        lint["detail"]
            .as_str()
            .unwrap()
            .starts_with("accepted with --accept-lint"),
        "{lint}"
    );
    let plan = std::fs::read_to_string(b.join("plan.sh")).unwrap();
    assert!(plan.contains("apply --server-side"), "{plan}");

    // --accept-lint means nothing without --bundle.
    rdmakit()
        .args(["run", "vke-ib-pod", "--dry-run", "--accept-lint"])
        .assert()
        .code(2);
}

#[test]
fn an_invalid_edit_stops_the_run_naming_the_field() {
    let d = tempfile::tempdir().unwrap();
    let a = d.path().join("a");
    rendered(&a);
    edit(
        &a.join("bundle/rdma-test-pod.yaml"),
        "  name: rdma-test\n",
        "  name: rdma-test\n  colour: blue\n",
    );
    let o = with_bundle(&a, &d.path().join("b"), &["--accept-lint"]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("the edited bundle is not valid") && stderr.contains("colour"),
        "{stderr}"
    );
}
