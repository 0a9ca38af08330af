//! How a pod gets its RDMA devices (device-plugin resources or a DRA claim) and which devices they
//! are (name glob, driver, traffic counters).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::DevicePattern;

/// How a pod is given an RDMA device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum RdmaAttachment {
    /// A device plugin advertises extended resources; each RDMA container asks for them in requests and limits.
    DevicePlugin {
        /// Resource name → count, e.g. `aliyun/erdma: 1`.
        resources: BTreeMap<String, u32>,
    },
    /// Dynamic Resource Allocation: a DeviceClass selects the devices, a ResourceClaimTemplate asks for them.
    Dra(DraSettings),
}

/// DRA objects of a profile (`resource.k8s.io/v1`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DraSettings {
    /// DeviceClass name (`erdma.alibaba.dra.net`).
    pub device_class: String,
    /// CEL selectors of the DeviceClass; all must match.
    pub selectors: Vec<String>,
    /// ResourceClaimTemplate name (`erdma`).
    pub claim_template: String,
    /// Request name inside the template and claim name inside the pod (`erdma`).
    pub request_name: String,
    /// Devices per pod.
    #[serde(default = "one")]
    pub count: u32,
}

fn one() -> u32 {
    1
}

/// Device naming and traffic counters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceSpec {
    /// Glob over `/sys/class/infiniband/` names (`erdma_*`, `mlx5_*`, `rdmap*`).
    pub name_pattern: DevicePattern,
    /// Globs of devices `name_pattern` matches that carry none of the run's RDMA traffic (a front-end
    /// NIC `mlx5_bond_*`, a storage NIC): the counter proof does not read them.
    #[serde(default)]
    pub exclude: Vec<DevicePattern>,
    /// Kernel driver of the devices (`erdma`, `mlx5_ib`, `efa`): which counter names apply.
    #[serde(default)]
    pub driver: Option<String>,
    /// Transmit counter, relative to `/sys/class/infiniband/<dev>/`.
    pub tx_counter: String,
    /// Receive counter, relative to `/sys/class/infiniband/<dev>/`.
    #[serde(default)]
    pub rx_counter: Option<String>,
    /// Bytes per counter unit (1 for byte counters; 4 for mlx5 `port_xmit_data`, counted in 4-byte words).
    #[serde(default = "one_u64")]
    pub counter_multiplier: u64,
}

fn one_u64() -> u64 {
    1
}
