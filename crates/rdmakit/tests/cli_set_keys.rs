//! The friction a newcomer hit (issue 25): `--set` keys listed by `render --help`, user profiles used by
//! name, `run --profile`, keys the chosen workflow or system never reads refused, and `--set` values
//! checked by their kind at the boundary.
#![allow(clippy::unwrap_used)] // helpers outside #[test] fns unwrap too: a failure is a test failure

mod common;

use common::cli::{dry_run, rdmakit};
use predicates::prelude::*;

#[test]
fn render_help_lists_every_set_key_with_its_kind_and_default() {
    let o = rdmakit().args(["render", "--help"]).output().unwrap();
    assert!(o.status.success());
    let help = String::from_utf8_lossy(&o.stdout);
    for want in [
        "worker_replicas",
        "mpi_workers",
        "nccl_tests_image",
        "node_selector.<label>",
        "1..1024",
        "(default 512M)",
    ] {
        assert!(
            help.contains(want),
            "`{want}` not in render --help:\n{help}"
        );
    }
}

/// A user profile in `$XDG_CONFIG_HOME/rdmakit/profiles` named `my-erdma`.
fn user_profile() -> tempfile::TempDir {
    let erdma =
        std::fs::read_to_string(common::workspace().join("scripts/vendors/aliyun-erdma.rhai"))
            .unwrap();
    let xdg = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(xdg.path().join("rdmakit/profiles")).unwrap();
    std::fs::write(
        xdg.path().join("rdmakit/profiles/mine.rhai"),
        erdma.replacen("name: \"aliyun-erdma\"", "name: \"my-erdma\"", 1),
    )
    .unwrap();
    xdg
}

#[test]
fn a_user_profile_is_used_by_its_listed_name_everywhere() {
    let xdg = user_profile();
    let out = tempfile::tempdir().unwrap();
    let with_xdg = |args: &[&str]| {
        let mut c = rdmakit();
        c.env("XDG_CONFIG_HOME", xdg.path()).args(args);
        c
    };
    with_xdg(&["profiles", "my-erdma"])
        .assert()
        .success()
        .stdout(predicate::str::contains("\"name\": \"my-erdma\""));
    with_xdg(&["render", "raycluster", "--profile", "my-erdma", "--stdout"])
        .assert()
        .success()
        .stdout(predicate::str::contains("kind: RayCluster"));
    let mut c = with_xdg(&[
        "run",
        "erdma-ray-rdt",
        "--dry-run",
        "--set",
        "profile=my-erdma",
    ]);
    c.arg("--out").arg(out.path()).assert().success();
    assert!(
        std::fs::read_to_string(out.path().join("plan.json"))
            .unwrap()
            .contains("my-erdma")
    );
    // An unknown name lists the known ones, the user's included, and the nearest.
    with_xdg(&["profiles", "my-erdmaa"])
        .assert()
        .code(2)
        .stderr(
            predicate::str::contains("did you mean `my-erdma`")
                .and(predicate::str::contains("aliyun-erdma")),
        );
}

#[test]
fn run_takes_profile_as_a_flag() {
    let out = tempfile::tempdir().unwrap();
    dry_run("nccl-tests", out.path())
        .args(["--profile", "aws-efa-eks"])
        .assert()
        .success();
    let plan = std::fs::read_to_string(out.path().join("plan.json")).unwrap();
    assert!(plan.contains("aws-efa-eks"), "{plan}");
    // Both ways at once, with different profiles, is ambiguous.
    dry_run("nccl-tests", out.path())
        .args(["--profile", "aws-efa-eks", "--set", "profile=mellanox-ib"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--profile"));
}

#[test]
fn a_render_value_the_workflow_never_reads_is_refused() {
    let out = tempfile::tempdir().unwrap();
    dry_run("nccl-tests", out.path())
        .args(["--set", "worker_replicas=5"])
        .assert()
        .code(2)
        .stderr(
            predicate::str::contains("worker_replicas")
                .and(predicate::str::contains("mpi_workers")),
        );
    // The key it does read works.
    dry_run("nccl-tests", out.path())
        .args(["--set", "mpi_workers=5"])
        .args([
            "--set",
            "nccl_tests_image=registry.example.com/nccl-tests:2.19",
        ])
        .assert()
        .success();
    // render: a key the chosen systems do not read.
    rdmakit()
        .args([
            "render",
            "mpijob",
            "--profile",
            "mellanox-ib",
            "--stdout",
            "--set",
            "worker_replicas=5",
        ])
        .assert()
        .code(2)
        .stderr(
            predicate::str::contains("worker_replicas")
                .and(predicate::str::contains("mpi_workers")),
        );
}

#[test]
fn set_values_are_checked_by_kind_naming_key_value_and_an_example() {
    let bad = [
        (
            "registry=r.example.com/me\nRUN echo injected",
            "registry=r.example.com/me\\nRUN echo injected",
        ),
        ("nccl_debug=INFO $(touch P)", "nccl_debug=INFO $(touch P)"),
        ("all_reduce_perf=/opt/x;id;#", "all_reduce_perf=/opt/x;id;#"),
        ("worker_replicas=2147483648", "from 1 to 1024"),
        ("worker_replicas=5000000000", "from 1 to 1024"),
        ("mpi_workers=100000", "from 1 to 1024"),
        ("node_selector.pool=bar; baz", "label value"),
    ];
    for (set, want) in bad {
        let o = rdmakit()
            .args([
                "render",
                "mpijob",
                "--profile",
                "mellanox-ib",
                "--stdout",
                "--set",
                set,
            ])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{set:?}: {err}");
        assert!(err.contains(want), "{set:?}: `{want}` not in {err}");
        assert!(err.contains("e.g. `"), "{set:?}: no example in {err}");
    }
}
