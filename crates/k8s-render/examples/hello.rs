//! Hello, k8s-render: render one vendor profile's RayCluster and print it for `kubectl apply -f -`.
//!
//! `cargo run -p k8s-render --example hello` prints the RayCluster of a generic mlx5 RoCE profile;
//! `-- worker_replicas=4 gpus_per_worker=8` sets values the way `rdmakit --set key=value` does. The
//! profile is written here as JSON (rdmakit's built-ins are Rhai scripts that evaluate to the same map),
//! and the rendered cluster is checked with the crate's own validator and linter before it is printed.

use k8s_render::{System, Values, lint, manifest, render, validate};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let profile = k8s_render::Profile::from_json(serde_json::json!({
        "name": "hello-roce",
        "description": "mlx5 RoCE HCAs through the RDMA shared device plugin",
        "fabric": "RoCE",
        "short_name": "roce",
        "rdma": {"kind": "device-plugin", "resources": {"rdma/hca_shared_devices_a": 1}},
        "pod": {"capabilities": ["IPC_LOCK"], "shm": {"volume_name": "shm", "size_limit": "8Gi"}},
        "nccl": {"ib_hca": "mlx5", "socket_ifname": "eth0", "gid_index": 3},
        "devices": {
            "name_pattern": "mlx5_*",
            "driver": "mlx5_ib",
            "tx_counter": "ports/1/counters/port_xmit_data",
            "counter_multiplier": 4,
        },
    }))?;
    profile.check()?;

    let mut values = Values::default();
    for arg in std::env::args().skip(1) {
        let (key, value) = arg
            .split_once('=')
            .ok_or_else(|| format!("`{arg}`: expected key=value"))?;
        values.set(key, value)?;
    }

    let bundle = render(System::RayCluster, &profile, &values)?;
    let stream = bundle.to_stream();

    // What we print passes our own checks: schema (strict) and the RDMA linter.
    let docs = manifest::parse_str("ray-cluster-roce.yaml", &stream)?;
    let violations = validate::validate(&docs, &validate::ValidateOptions::default());
    let findings = lint::lint(
        &docs,
        &lint::LintOptions::for_profile(&profile, None, false),
    );
    if let Some(v) = violations.first() {
        return Err(format!("rendered RayCluster does not validate: {v}").into());
    }
    eprintln!(
        "rendered {} for profile {} ({} lint finding(s))",
        System::RayCluster,
        profile.name,
        findings.len()
    );
    print!("{stream}");
    Ok(())
}
