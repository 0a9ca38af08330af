//! The node the preflight tests build clusters from: a GPU node of seed 000 (eight GPUs, 256 CPUs, the
//! RayCluster's GPU model label) with or without eRDMA capacity.

use std::collections::BTreeMap;

use probe::preflight::NodeInfo;

/// Node `name` with `gpu` GPUs and, when given, `erdma` eRDMA devices, Ready and schedulable.
pub fn node(name: &str, gpu: &str, erdma: Option<&str>) -> NodeInfo {
    let mut capacity = BTreeMap::new();
    capacity.insert("nvidia.com/gpu".to_string(), gpu.to_string());
    capacity.insert("cpu".to_string(), "256".to_string());
    if let Some(e) = erdma {
        capacity.insert("aliyun/erdma".to_string(), e.to_string());
    }
    let mut labels = BTreeMap::new();
    labels.insert(
        "aliyun.accelerator/nvidia_name".to_string(),
        "NVIDIA-RTX-PRO-5000-72GB-Blackwell".to_string(),
    );
    NodeInfo {
        name: name.into(),
        capacity: capacity.clone(),
        allocatable: capacity,
        labels,
        ready: true,
        unschedulable: false,
        dra_rdma_devices: vec![],
    }
}
