//! Pod settings an RDMA pod of the vendor needs (host network, capabilities, `/dev/shm`, hostPath
//! mounts, annotations), its tolerations, and the node-label exceptions of the vendor's docs.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Pod-level settings an RDMA pod of this vendor needs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PodSettings {
    /// `hostNetwork: true` (the RDMA netdev lives in the host network namespace).
    #[serde(default)]
    pub host_network: bool,
    /// `hostIPC: true`.
    #[serde(default)]
    pub host_ipc: bool,
    /// `dnsPolicy`, normally `ClusterFirstWithHostNet` together with `host_network`.
    #[serde(default)]
    pub dns_policy: Option<String>,
    /// Linux capabilities added to RDMA containers (`IPC_LOCK` lets ibverbs pin memory).
    #[serde(default)]
    pub capabilities: Vec<String>,
    /// A memory-backed `/dev/shm` volume (NCCL uses shared memory between local ranks).
    #[serde(default)]
    pub shm: Option<ShmVolume>,
    /// hostPath mounts, e.g. `/var/run/nvidia-topologyd` on VKE.
    #[serde(default)]
    pub host_paths: Vec<HostPathMount>,
    /// Annotations on every RDMA pod, for platforms that attach secondary networks through
    /// them (Multus `k8s.v1.cni.cncf.io/networks`, GKE `networking.gke.io/interfaces`).
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
}

/// A memory-backed emptyDir mounted at `/dev/shm`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShmVolume {
    /// Volume name (`shm`, `cache-volume`).
    pub volume_name: String,
    /// `sizeLimit` of the emptyDir (`8Gi`); `None` leaves it unbounded.
    #[serde(default)]
    pub size_limit: Option<String>,
}

/// A hostPath volume and its mount.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostPathMount {
    /// Volume name.
    pub name: String,
    /// Path on the node.
    pub host_path: String,
    /// Path in the container.
    pub mount_path: String,
    /// Mount read-only.
    #[serde(default)]
    pub read_only: bool,
    /// hostPath `type` (`DirectoryOrCreate`, `Directory`, ...).
    #[serde(default)]
    pub host_path_type: Option<String>,
    /// Why the mount is there (rendered as nothing; shown by `rdmakit profiles`).
    #[serde(default)]
    pub why: Option<String>,
}

/// An instance type on which a recommended node label value does not apply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeLabelException {
    /// Instance type (`ecs.hpcg1ve.21xlarge`).
    pub instance_type: String,
    /// Where the exception holds, as the vendor words it (`North China`); `None`: everywhere.
    #[serde(default)]
    pub region: Option<String>,
    /// Label key (`vke.node.rdma.mode`).
    pub label: String,
    /// The value not recommended there (`ib-shared`).
    pub not_recommended: String,
    /// What the vendor says instead, or that it says nothing more.
    #[serde(default)]
    pub note: Option<String>,
}

/// A pod toleration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TolerationSpec {
    /// Taint key.
    pub key: String,
    /// `Exists` or `Equal`.
    #[serde(default = "exists")]
    pub operator: String,
    /// Taint value for `Equal`.
    #[serde(default)]
    pub value: Option<String>,
    /// `NoSchedule`, `PreferNoSchedule`, `NoExecute`; `None` matches all effects.
    #[serde(default)]
    pub effect: Option<String>,
}

fn exists() -> String {
    "Exists".to_owned()
}
