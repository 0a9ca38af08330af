//! One call into each packaged crate's public API, from outside the workspace (tests/package/run.sh).

use gpu_stage::{Device, HostDevice, InProcessStage, MIB, RingConfig};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // gpu-stage: the staging pipeline on its host backend.
    let dev = HostDevice::new();
    let data: Vec<u8> = (0..3 * MIB + 5).map(|i| (i % 251) as u8).collect();
    let src = dev.upload(&data)?;
    let mut dst = dev.alloc_zeroed(data.len())?;
    let mut stage = InProcessStage::new(&dev, &dev, RingConfig::new(MIB, 2)?)?;
    let stats = stage.transfer(&src, &mut dst)?;
    assert_eq!(stats.chunks, 4);
    assert_eq!(dev.download(&dst)?, data);
    gpu_stage::RdmaConfig::new(["erdma_0"]).validate()?;

    // erdma-verbs: the device list (empty on a machine without RDMA).
    for d in erdma_verbs::devices()? {
        println!("RDMA device {}", d.name);
    }

    // rdmakit-probe (imported as `probe`): the log doctor names a memlock failure.
    let log = "w0:41:88 [0] misc/ibvwrap.cc:130 NCCL WARN Call to ibv_create_qp failed with error Unknown error -12\n";
    let diagnosis = probe::doctor::diagnose(log)?;
    assert_eq!(diagnosis.findings[0].id, "memlock-create-qp-enomem");

    // k8s-render: strict validation against the vendored KubeRay schema names a misspelt field.
    let yaml = "apiVersion: ray.io/v1\nkind: RayCluster\nmetadata:\n  name: demo\nspec:\n  headGroupSpec:\n    rayStartParams: {}\n    templat: {}\n";
    let docs = k8s_render::manifest::parse_str("demo.yaml", yaml)?;
    let found = k8s_render::validate::validate(&docs, &k8s_render::validate::ValidateOptions::default());
    assert!(
        found.iter().any(|v| v.location.path.to_string() == "spec.headGroupSpec.templat"),
        "{found:#?}"
    );
    println!("user of the packaged crates: ok ({} violation(s) in the misspelt RayCluster)", found.len());
    Ok(())
}
