//! Issue 25's injections, as a user runs them: a `--set` value in a step title, in the MPIJob launcher
//! and in the Dockerfile changes a value, never the generated script; a dry-run that failed a check
//! writes a plan.sh that stops before it applies anything.
#![allow(clippy::unwrap_used)] // a failure is a test failure

mod common;

use common::cli::{Workflow, fake_kubectl, rdmakit, run_plan};

/// A fake kubectl that logs its arguments beside itself.
const LOGGING_KUBECTL: &str = "#!/bin/sh\necho \"$*\" >>\"$(dirname \"$0\")/kubectl.log\"\n";

#[test]
fn a_newline_in_a_step_title_stays_in_the_comment() {
    let wf = Workflow::new(
        "s.rhai",
        "let t = params::get(\"target\", \"a\");\nstep(`Deploy to ${t}`);\n",
    );
    wf.dry_run()
        .args(["--set", "target=a\ntouch PWNED"])
        .assert()
        .success();
    let sh = std::fs::read_to_string(wf.out().join("plan.sh")).unwrap();
    assert!(
        sh.contains("# --- Step 1: Deploy to a\\ntouch PWNED\n"),
        "{sh}"
    );
    let bin = fake_kubectl(wf.dir.path(), LOGGING_KUBECTL);
    let r = run_plan(&wf.out().join("plan.sh"), &bin);
    assert!(r.status.success(), "{r:?}");
    // The echo of the title prints it as it is, newline included; nothing else runs.
    assert!(String::from_utf8_lossy(&r.stdout).contains("Deploy to a\ntouch PWNED"));
    for dir in [wf.dir.path().to_path_buf(), wf.out(), common::workspace()] {
        assert!(
            !dir.join("PWNED").exists(),
            "PWNED created in {}",
            dir.display()
        );
    }
}

#[test]
fn the_launcher_script_runs_no_value() {
    // Layer 1: the --set boundary refuses both values, naming the key.
    for (set, key) in [
        ("nccl_debug=INFO $(touch P)", "nccl_debug"),
        ("all_reduce_perf=/opt/x;id;#", "all_reduce_perf"),
    ] {
        let r = rdmakit()
            .args([
                "render",
                "mpijob",
                "--profile",
                "mellanox-ib",
                "--set",
                set,
                "--stdout",
            ])
            .assert()
            .code(2);
        let err = String::from_utf8_lossy(&r.get_output().stderr).into_owned();
        assert!(err.contains(key), "{err}");
    }
    // The launcher's own quoting (every value one shell word, whatever reaches it: profile fields such as
    // nccl.socket_ifname are not --set values) is what the fuzz target checks: tests/fuzz_injection runs the
    // rendered launcher among logging stubs with hostile profile fields and asserts sleep, then mpirun,
    // each value one whole argument.
}

#[test]
fn a_newline_in_the_image_reference_is_refused_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let r = rdmakit()
        .args(["render", "image", "--profile", "mellanox-ib"])
        .args([
            "--set",
            "registry=r.example.com/me\nRUN echo injected",
            "--out",
        ])
        .arg(dir.path().join("d"))
        .assert()
        .failure();
    let err = String::from_utf8_lossy(&r.get_output().stderr).into_owned();
    // Refused at the --set boundary (the Dockerfile's own refusal of a newline is k8s-render's quote test).
    assert!(err.contains("registry") && err.contains("\\n"), "{err}");
    assert!(
        !dir.path().join("d/Dockerfile").exists(),
        "nothing is written"
    );
}

#[test]
fn plan_sh_stops_before_applying_a_bundle_that_failed_lint() {
    // A bundle with a lint error (a pod asking for an RDMA device without IPC_LOCK), applied after lint.
    let wf = Workflow::new(
        "w.rhai",
        r#"step("Write a bad pod");
fs::write("bundle/pod.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: c\n    image: busybox\n    resources: {limits: {rdma/hca_shared_devices_a: 1}}\n");
step("Lint and apply it");
lint::bundle("bundle", #{ profile: "mellanox-ib" });
kube::apply("bundle/pod.yaml");
"#,
    );
    let r = wf.dry_run().assert();
    let text = String::from_utf8_lossy(&r.get_output().stdout).into_owned();
    let sh = std::fs::read_to_string(wf.out().join("plan.sh")).unwrap();
    assert!(
        sh.contains("kubectl apply"),
        "the plan applies the pod: {sh}"
    );
    assert!(
        text.contains("== FAILED: "),
        "the printed plan says it: {text}"
    );
    let bin = fake_kubectl(wf.dir.path(), LOGGING_KUBECTL);
    let run = run_plan(&wf.out().join("plan.sh"), &bin);
    assert_eq!(run.status.code(), Some(1), "{run:?}");
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(
        err.contains("plan.sh refuses to run: the dry-run failed"),
        "{err}"
    );
    assert!(
        err.contains("FAIL [Lint and apply it] bundle lint: "),
        "{err}"
    );
    let log = std::fs::read_to_string(wf.dir.path().join("bin/kubectl.log")).unwrap_or_default();
    assert!(log.is_empty(), "kubectl ran: {log}");
}
