//! The NCCL check program reads the counters of the same devices the product's counter proof reads:
//! `devices.name_pattern` (a comma-separated list of globs) minus `devices.exclude`.
#![allow(clippy::unwrap_used)] // helpers outside #[test] fns unwrap too: a failure is a test failure

use k8s_render::{Profile, System, Values, render};
use serde_json::json;

/// Runs the rendered program's own `counter_devices()` (its constants and that function, lifted out with
/// Python's `ast`: the program imports torch at the top) against a fake `/sys/class/infiniband`.
fn counter_devices(program: &str, devices: &[&str]) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let sysfs = dir.path().join("sysfs");
    for d in devices {
        std::fs::create_dir_all(sysfs.join(d)).unwrap();
    }
    let f = dir.path().join("nccl_allreduce_check.py");
    std::fs::write(&f, program).unwrap();
    let lift = r#"
import ast, fnmatch, os, sys
src = open(sys.argv[1]).read()
keep = [n for n in ast.parse(src).body
        if (isinstance(n, ast.FunctionDef) and n.name == "counter_devices")
        or (isinstance(n, ast.Assign) and any(getattr(t, "id", "") in ("DEVICE_GLOB", "DEVICE_EXCLUDE") for t in n.targets))]
ns = {"os": os, "fnmatch": fnmatch, "SYSFS": sys.argv[2]}
exec(compile(ast.Module(keep, []), sys.argv[1], "exec"), ns)
print(",".join(ns["counter_devices"]()))
"#;
    let o = std::process::Command::new("python3")
        .args(["-c", lift])
        .arg(&f)
        .arg(&sysfs)
        .output()
        .expect("python3 runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout)
        .unwrap()
        .trim()
        .split(',')
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

fn program(devices: serde_json::Value) -> String {
    let p = Profile::from_json(json!({
        "name": "mlx-like", "fabric": "RoCE", "short_name": "mlx",
        "rdma": {"kind": "device-plugin", "resources": {"rdma/rdma_shared_device_a": 1}},
        "nccl": {"ib_hca": "mlx5"},
        "devices": devices,
    }))
    .unwrap();
    p.check().unwrap();
    let b = render(System::NcclCheck, &p, &Values::default()).unwrap();
    b.get("nccl_allreduce_check.py").unwrap().contents.clone()
}

#[test]
fn excluded_devices_are_not_summed() {
    // Before: the program globbed `name_pattern` alone and summed the front-end bond too.
    let text = program(json!({
        "name_pattern": "mlx5_*", "exclude": ["mlx5_bond_*"],
        "tx_counter": "ports/1/counters/port_xmit_data",
    }));
    assert!(
        text.contains("excluded: mlx5_bond_*"),
        "docstring names the exclude list"
    );
    let got = counter_devices(&text, &["mlx5_0", "mlx5_1", "mlx5_bond_0", "erdma_0"]);
    assert_eq!(got, ["mlx5_0", "mlx5_1"]);
}

#[test]
fn a_list_of_globs_is_read_as_the_product_reads_it() {
    let text = program(json!({
        "name_pattern": "mlx5_*,rdmap*", "tx_counter": "ports/1/counters/port_xmit_data",
    }));
    let got = counter_devices(&text, &["mlx5_0", "rdmap0s1", "erdma_0"]);
    assert_eq!(got, ["mlx5_0", "rdmap0s1"]);
}
