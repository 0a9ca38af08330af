//! What the issue asks of each of the four workflows, beyond erdma-ray-rdt (whose own tests in workflows.rs
//! cover it): a second run on the used cluster passes, and Ctrl-C in the middle of a run exits 130 with
//! nothing of the run's own left behind.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::harness::{Kind, Ns, kubeconfig, kubectl_ok, rdmakit_path};

fn assert_clean(ns: &Ns) {
    let left = ns.leftovers();
    assert!(
        left.is_empty(),
        "the run left objects behind in {}: {left:?}",
        ns.name
    );
}

/// shared-device-raycluster and vke-ib-pod, twice each on the same namespace: both passes, nothing left.
#[test]
#[ignore = "control-plane tier: make cluster-test"]
fn shared_device_and_vke_pass_a_second_time_on_the_used_cluster() {
    for (workflow, args) in [
        ("shared-device-raycluster", &["--set", "cleanup=true"][..]),
        ("vke-ib-pod", &[][..]),
    ] {
        let ns = Ns::new(&format!("again-{}", &workflow[..6]), Kind::Mlx5);
        ns.run(workflow, args).assert_pass();
        assert_clean(&ns);
        ns.run(workflow, args).assert_pass();
        assert_clean(&ns);
    }
}

/// Starts `workflow` in `ns`, sends SIGINT once `resource` (what the run applies) exists in the namespace,
/// and checks the run's answer: exit 130, the report says interrupted and lists its cleanup, and the
/// namespace holds nothing of the run's own.
fn interrupt_once_applied(ns: &Ns, workflow: &str, args: &[&str], resource: &str) {
    let mut child = Command::new(rdmakit_path())
        .args(["run", workflow, "-n", &ns.name, "--out"])
        .arg(&ns.out)
        .args(args)
        .env("KUBECONFIG", kubeconfig())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while kubectl_ok(&["-n", &ns.name, "get", resource, "-o", "name"])
        .trim()
        .is_empty()
    {
        assert!(
            child.try_wait().unwrap().is_none(),
            "{workflow} ended before it applied a {resource}"
        );
        assert!(
            t0.elapsed() < Duration::from_secs(180),
            "{workflow}: no {resource} after 180 s"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let pid = child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .unwrap()
            .success()
    );
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{workflow}: {stderr}");
    let report = std::fs::read_to_string(ns.out.join("report.json")).unwrap();
    assert!(report.contains("\"interrupted\""), "{workflow}: {report}");
    assert!(
        report.contains("cleanup: "),
        "{workflow}: the report lists the cleanup: {report}"
    );
    assert_clean(ns);
}

#[test]
#[ignore = "control-plane tier: make cluster-test"]
fn an_interrupted_dranet_shared_device_or_vke_run_exits_130_and_leaves_nothing_of_its_own() {
    let dranet = Ns::new("dranet-int", Kind::Erdma);
    interrupt_once_applied(&dranet, "dranet-nccl-tests", &[], "mpijobs.kubeflow.org");
    // The default (cleanup=false) leaves a finished RayCluster running for the user; an interrupted run
    // is not finished, so it goes.
    let shared = Ns::new("shared-int", Kind::Mlx5);
    interrupt_once_applied(
        &shared,
        "shared-device-raycluster",
        &[],
        "rayclusters.ray.io",
    );
    let vke = Ns::new("vke-int", Kind::Mlx5);
    interrupt_once_applied(&vke, "vke-ib-pod", &[], "pods");
}
