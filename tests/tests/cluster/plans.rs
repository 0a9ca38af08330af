//! Each workflow's `plan.sh` (written by `rdmakit run --dry-run`), run by the real kubectl against the tier in
//! a fresh namespace: exit 0 on the healthy cluster, non-zero on a fault.

use std::process::Command;

use rdmakit_tests::path_with;

use super::harness::OutputWithin;
use super::harness::{
    ERDMA_SECRETS, Kind, Ns, assert_clean, kubeconfig, kubectl_path, output_ok, push_image, rdmakit,
};

/// Writes the plan with `rdmakit run --dry-run -n NS` and runs it with the tier's kubectl first on PATH.
fn run_plan(ns: &Ns, workflow: &str, args: &[&str]) -> (i32, String) {
    let dir = ns.out.join("plan");
    output_ok(
        rdmakit()
            .args(["run", workflow, "--dry-run", "-n", &ns.name, "--out"])
            .arg(&dir)
            .args(args),
    );
    let o = Command::new("bash")
        .arg(dir.join("plan.sh"))
        .env("KUBECONFIG", kubeconfig())
        .env("PATH", path_with(kubectl_path().parent().unwrap()))
        .output_within()
        .unwrap();
    let text = format!(
        "{}\n--- stderr\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    (o.status.code().unwrap_or(-1), text)
}

/// Runs the plan, asserts exit 0 and that it left nothing behind; returns its output.
fn assert_plan_passes(ns: &Ns, workflow: &str, args: &[&str]) -> String {
    let (code, text) = run_plan(ns, workflow, args);
    assert_eq!(
        code, 0,
        "{workflow}'s plan.sh failed against the real cluster:\n{text}"
    );
    assert_clean(ns);
    text
}

/// Runs the plan, asserts a non-zero exit whose output holds one of `any_of`, and that the plan's trap cleaned
/// up.
fn assert_plan_fails(ns: &Ns, workflow: &str, args: &[&str], any_of: &[&str]) {
    let (code, text) = run_plan(ns, workflow, args);
    assert_ne!(code, 0, "{workflow}'s plan.sh passed:\n{text}");
    assert!(any_of.iter().any(|n| text.contains(n)), "{text}");
    assert_clean(ns);
}

#[test]
#[ignore = "control-plane tier: make cluster-test"]
fn erdma_ray_rdt_plan_runs_under_kubectl_and_fails_on_the_known_bad_nccl() {
    let ns = Ns::new("plan-erdma", Kind::Erdma);
    assert_plan_passes(&ns, "erdma-ray-rdt", ERDMA_SECRETS);
    // A prebuilt image that carries torch 2.11's NCCL 2.28.9 (the render refuses to pin it itself).
    let image = "registry.example.com/rdt:torch-2.11";
    push_image(image, Some("2.28.9"));
    let bad = Ns::new("plan-erdma-bad", Kind::Erdma);
    let set_image = format!("image={image}");
    let args = [
        ERDMA_SECRETS,
        &["--set", "skip_build=true", "--set", &set_image],
    ]
    .concat();
    assert_plan_fails(&bad, "erdma-ray-rdt", &args, &["SIGSEGV", "2.28.9"]);
}

#[test]
#[ignore = "control-plane tier: make cluster-test"]
fn dranet_nccl_tests_plan_runs_under_kubectl_and_enforces_the_busbw_floor() {
    let ns = Ns::new("plan-dranet", Kind::Erdma);
    // The launcher's ranks run over erdma_0 at the node fixtures' 11.8 GiB/s: a peak bus bandwidth of 11.90
    // GB/s (94 % of it at 8 GiB, the stand-in NCCL's efficiency; tests/cluster/emulator/emu/mpi.py).
    let text = assert_plan_passes(&ns, "dranet-nccl-tests", &["--set", "min_busbw_gbps=11"]);
    // The DeviceClass's two attributes per device, read by the real kubectl's custom columns (seed 002).
    let table = text
        .lines()
        .skip_while(|l| !l.starts_with("NODE "))
        .take(3)
        .collect::<Vec<_>>();
    assert!(
        table.len() == 3
            && table[0].contains("DRA_NET_RDMA")
            && table[0].contains("ALIBABA_DRA_NET_ERDMA"),
        "no ResourceSlice attribute table:\n{text}"
    );
    assert!(
        table[1..]
            .iter()
            .all(|l| l.contains("erdma_0") && l.matches("true").count() == 2),
        "attribute table rows: {table:?}"
    );
    // The launcher's bandwidth table, header to average, and the floor's verdict.
    assert!(
        text.contains("out-of-place") && text.contains("# Avg bus bandwidth    : 11.87408"),
        "{text}"
    );
    assert!(
        text.contains("peak busbw 11.90 GB/s (floor 11.0)"),
        "{text}"
    );

    let high = Ns::new("plan-dranet-floor", Kind::Erdma);
    assert_plan_fails(
        &high,
        "dranet-nccl-tests",
        &["--set", "min_busbw_gbps=12.5"],
        &["peak busbw 11.90 GB/s (floor 12.5)"],
    );
}

#[test]
#[ignore = "control-plane tier: make cluster-test"]
fn shared_device_raycluster_plan_runs_under_kubectl() {
    let ns = Ns::new("plan-shared", Kind::Mlx5);
    // cleanup=true: by default the workflow leaves the RayCluster running for the user.
    assert_plan_passes(&ns, "shared-device-raycluster", &["--set", "cleanup=true"]);
}

#[test]
#[ignore = "control-plane tier: make cluster-test"]
fn vke_ib_pod_plan_runs_under_kubectl() {
    let ns = Ns::new("plan-vke", Kind::Mlx5);
    assert_plan_passes(&ns, "vke-ib-pod", &[]);
}
