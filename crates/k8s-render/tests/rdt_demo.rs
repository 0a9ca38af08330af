//! The RDT demo from one template: seed 000's NCCL demo by default, gpu-stage's `RDMAKIT` transport with
//! `rdt_transport=rdmakit` (its own file name, its own A/B switch, no collective group); both are valid Python.
#![allow(clippy::unwrap_used)] // helpers outside #[test] fns unwrap too: a failure is a test failure

use k8s_render::{Profile, System, Values, render};
use serde_json::json;

fn demo(v: &Values) -> (String, String) {
    let p = Profile::from_json(json!({
        "name": "erdma-like",
        "fabric": "eRDMA",
        "short_name": "erdma",
        "rdma": {"kind": "device-plugin", "resources": {"aliyun/erdma": 1}},
        "nccl": {"ib_hca": "erdma", "pip_package": "nvidia-nccl-cu13"},
        "devices": {"name_pattern": "erdma_*", "tx_counter": "ports/1/hw_counters/hw_tx_bytes_cnt"},
    }))
    .expect("profile parses");
    let b = render(System::RdtDemo, &p, v).expect("renders");
    let names: Vec<String> = ["rdt_nccl_demo.py", "rdt_rdmakit_demo.py"]
        .iter()
        .filter(|n| b.get(n).is_some())
        .map(|n| (*n).to_owned())
        .collect();
    assert_eq!(names.len(), 1, "exactly one demo file: {names:?}");
    let text = b.get(&names[0]).unwrap().contents.clone();
    (names[0].clone(), text)
}

fn compiles_as_python(name: &str, text: &str) {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join(name);
    std::fs::write(&f, text).unwrap();
    let o = std::process::Command::new("python3")
        .args(["-m", "py_compile"])
        .arg(&f)
        .output()
        .expect("python3 runs");
    assert!(
        o.status.success(),
        "{name} is not valid Python: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn nccl_by_default_rdmakit_on_request() {
    let (name, nccl) = demo(&Values::default());
    assert_eq!(name, "rdt_nccl_demo.py");
    for needle in [
        "TRANSPORT = \"nccl\"",
        "@ray.method(tensor_transport=\"nccl\")",
        "TCP_ENV = {\"NCCL_IB_DISABLE\": \"1\"}",
        "create_collective_group([producer, consumer], backend=\"nccl\")",
    ] {
        assert!(nccl.contains(needle), "nccl demo lacks {needle}");
    }
    compiles_as_python(&name, &nccl);

    let mut v = Values::default();
    v.set("rdt_transport", "rdmakit").unwrap();
    let (name, rdmakit) = demo(&v);
    assert_eq!(name, "rdt_rdmakit_demo.py");
    for needle in [
        "TRANSPORT = \"rdmakit\"",
        "@ray.method(tensor_transport=\"RDMAKIT\")",
        "rdmakit_rdt.register()",
        "TCP_ENV = {\"RDMAKIT_TRANSPORT\": \"tcp\"}",
        "kubectl cp rdt_rdmakit_demo.py $HEAD:/tmp/rdt_rdmakit_demo.py",
        "--tcp repeats the run with RDMAKIT_TRANSPORT=tcp",
    ] {
        assert!(rdmakit.contains(needle), "rdmakit demo lacks {needle}");
    }
    // register() must run before the classes: @ray.method checks the transport name at definition.
    assert!(rdmakit.find("rdmakit_rdt.register()") < rdmakit.find("class Producer"));
    compiles_as_python(&name, &rdmakit);
}
