//! A profile's value defaults (`values` in the profile) sit between the crate's defaults and `--set`.

use k8s_render::{Profile, System, Values, render};
use serde_json::json;

fn profile(values: serde_json::Value) -> Profile {
    Profile::from_json(json!({
        "name": "two-gpu",
        "fabric": "RoCE",
        "short_name": "roce",
        "rdma": {"kind": "device-plugin", "resources": {"rdma/hca": 1}},
        "nccl": {"ib_hca": "mlx5", "pip_package": "nvidia-nccl-cu13"},
        "devices": {"name_pattern": "mlx5_*", "tx_counter": "ports/1/counters/port_xmit_data"},
        "values": values,
    }))
    .expect("profile parses")
}

#[test]
fn profile_values_replace_crate_defaults_but_not_set_keys() {
    let p = profile(
        json!({"gpus_per_worker": 2, "worker_group": "workergroup", "node_selector.pool": "gpu"}),
    );
    assert!(p.check().is_ok());

    let v = Values::for_profile(&p).unwrap();
    assert_eq!(v.gpus_per_worker, 2);
    assert_eq!(v.worker_group.as_deref(), Some("workergroup"));
    assert_eq!(v.node_selector.get("pool").map(String::as_str), Some("gpu"));
    assert_eq!(
        v.slots_for(),
        2,
        "slots follow the profile's GPUs per worker"
    );
    assert!(
        !v.is_set("gpus_per_worker"),
        "a profile default is not a user setting"
    );

    // --set of the crate's own default value still wins over the profile.
    let mut user = Values::default();
    user.set("gpus_per_worker", "1").unwrap();
    user.set("node_selector.pool", "cpu").unwrap();
    let v = user.with_profile_defaults(&p).unwrap();
    assert_eq!(v.gpus_per_worker, 1);
    assert_eq!(v.node_selector.get("pool").map(String::as_str), Some("cpu"));
    assert_eq!(v.worker_group.as_deref(), Some("workergroup"));

    // A value changed without `set` (a values file read with serde) also wins.
    let mut file = Values::default();
    file.gpus_per_worker = 4;
    assert_eq!(file.with_profile_defaults(&p).unwrap().gpus_per_worker, 4);
}

#[test]
fn rendering_applies_the_profile_values() {
    let p = profile(json!({"gpus_per_worker": 2}));
    // nccl_tests_image has no default: the MPIJob needs one named.
    let mut v = Values::default();
    v.set("nccl_tests_image", "registry.example.com/nccl-tests:2.19")
        .unwrap();
    let b = render(System::MpiJob, &p, &v).unwrap();
    let job = &b.get("mpi-job.yaml").expect("rendered").documents[0];
    assert_eq!(job["spec"]["slotsPerWorker"], json!(2));
    let worker = &job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0];
    assert_eq!(worker["resources"]["limits"]["nvidia.com/gpu"], json!("2"));
}

#[test]
fn bad_profile_values_name_the_field() {
    let e = profile(json!({"gpus_per_wroker": 2})).check().unwrap_err();
    assert_eq!(e.field, "values.gpus_per_wroker");
    assert!(e.message.contains("unknown value key"), "{e}");

    let e = profile(json!({"gpus_per_worker": "two"}))
        .check()
        .unwrap_err();
    assert_eq!(e.field, "values.gpus_per_worker");
    assert!(e.to_string().contains("two"), "{e}");

    let e = profile(json!({"gpus_per_worker": [2]}))
        .check()
        .unwrap_err();
    assert_eq!(e.field, "values.gpus_per_worker");
    assert!(e.message.contains("string, number or boolean"), "{e}");

    // Out of its range: refused when set, naming the value's own field (issue 25).
    let e = profile(json!({"gpus_per_worker": 0})).check().unwrap_err();
    assert_eq!(e.field, "values.gpus_per_worker");
    assert!(e.message.contains("from 1 to 64"), "{e}");
}

#[test]
fn rdt_transport_rdmakit_installs_the_wheel() {
    let p = profile(json!({}));
    let plain = render(System::Image, &p, &Values::default()).unwrap();
    assert!(
        !plain
            .get("Dockerfile")
            .unwrap()
            .contents
            .contains("rdmakit_rdt")
    );
    let mut v = Values::default();
    v.set("rdt_transport", "rdmakit").unwrap();
    let d = render(System::Image, &p, &v)
        .unwrap()
        .get("Dockerfile")
        .unwrap()
        .contents
        .clone();
    assert!(
        d.contains("COPY rdmakit_rdt-*.whl /tmp/rdmakit-rdt/\nRUN pip install --no-cache-dir /tmp/rdmakit-rdt/rdmakit_rdt-*.whl\n"),
        "{d}"
    );
    let e = v.set("rdt_transport", "nixl").unwrap_err();
    assert!(e.to_string().contains("one of nccl, rdmakit"), "{e}");
}

#[test]
fn gpus_per_worker_precedence_over_the_instance_type() {
    let mut p = profile(json!({"instance_type": "big"}));
    p.instance_types = serde_json::from_value(json!({
        "big": {"gpus": 8, "rdma_devices": 2, "nic_gbps": 200.0, "gpudirect": true, "pcie_gen": 5}
    }))
    .unwrap();
    assert!(p.check().is_ok());
    // The instance type's count over the crate default ...
    assert_eq!(Values::for_profile(&p).unwrap().gpus_per_worker, 8);
    // ... the profile's own gpus_per_worker over the instance type ...
    p.values
        .insert("gpus_per_worker".into(), serde_json::json!(4));
    assert_eq!(Values::for_profile(&p).unwrap().gpus_per_worker, 4);
    // ... and --set over both.
    let mut v = Values::default();
    v.set("gpus_per_worker", "1").unwrap();
    assert_eq!(v.with_profile_defaults(&p).unwrap().gpus_per_worker, 1);
    // An unknown instance type is refused at render time, naming the known ones.
    let mut v = Values::default();
    v.set("instance_type", "small").unwrap();
    let e = render(System::MpiJob, &p, &v).unwrap_err().to_string();
    assert!(e.contains("small") && e.contains("big"), "{e}");
}

#[test]
fn an_mpijob_without_an_image_is_refused_naming_the_key() {
    // Before: `image: ""` was written and the API server accepted it; every worker then failed to pull.
    let p = profile(json!({}));
    let e = render(System::MpiJob, &p, &Values::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("`nccl_tests_image` has no default")
            && e.contains("--set nccl_tests_image=IMAGE"),
        "{e}"
    );
    let mut v = Values::default();
    v.set("nccl_tests_image", "registry.example.com/nccl-tests:2.19")
        .unwrap();
    assert!(render(System::MpiJob, &p, &v).is_ok());
}
