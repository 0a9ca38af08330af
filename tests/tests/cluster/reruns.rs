//! What the issue asks of each of the four workflows, beyond erdma-ray-rdt (whose own tests in workflows.rs
//! cover it): a second run on the used cluster passes, and Ctrl-C in the middle of a run exits 130 with
//! nothing of the run's own left behind.

use super::harness::{Kind, Ns, assert_clean, interrupt_once_applied};

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

#[test]
#[ignore = "control-plane tier: make cluster-test"]
fn an_interrupted_dranet_run_exits_130_and_leaves_nothing_of_its_own() {
    let dranet = Ns::new("dranet-int", Kind::Erdma);
    interrupt_once_applied(&dranet, "dranet-nccl-tests", &[], "mpijobs.kubeflow.org");
}

#[test]
#[ignore = "control-plane tier: make cluster-test"]
fn an_interrupted_shared_device_or_vke_run_exits_130_and_leaves_nothing_of_its_own() {
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
