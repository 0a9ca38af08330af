//! Network interfaces from `/sys/class/net`, as candidates for `NCCL_SOCKET_IFNAME`.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::sysfs::{list_dir, read_opt, under};

/// Prefixes of virtual interfaces that never carry NCCL's bootstrap traffic between nodes.
pub const SKIPPED_PREFIXES: [&str; 12] = [
    "lo",
    "docker",
    "veth",
    "cali",
    "flannel",
    "cni",
    "virbr",
    "br-",
    "tunl",
    "kube-ipvs",
    "cilium",
    "vxlan",
];

/// One network interface.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetInterface {
    /// Name (`eth0`).
    pub name: String,
    /// `operstate` (`up`, `down`, `unknown`).
    pub operstate: String,
    /// MTU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    /// MAC address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
}

impl NetInterface {
    /// Up (or `unknown`, which is what many virtual NICs report while working).
    pub fn is_up(&self) -> bool {
        matches!(self.operstate.as_str(), "up" | "unknown")
    }
}

/// Whether an interface name is virtual plumbing to skip.
pub fn is_skipped(name: &str) -> bool {
    SKIPPED_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// Interfaces under `<root>/sys/class/net`, skipping loopback, docker, veth and CNI plumbing.
pub fn read_interfaces(root: &Path) -> Result<Vec<NetInterface>> {
    let base = under(root, "/sys/class/net");
    let mut out = Vec::new();
    for name in list_dir(&base)? {
        if is_skipped(&name) {
            continue;
        }
        let dir = base.join(&name);
        out.push(NetInterface {
            operstate: read_opt(&dir.join("operstate"))?.unwrap_or_else(|| "unknown".into()),
            mtu: read_opt(&dir.join("mtu"))?.and_then(|m| m.parse().ok()),
            address: read_opt(&dir.join("address"))?,
            name,
        });
    }
    Ok(out)
}

/// The interface to suggest for `NCCL_SOCKET_IFNAME`: `eth0` if up, else the first up one
/// (preferring one that backs an RDMA device).
pub fn suggest_socket_ifname<'a>(
    ifaces: &'a [NetInterface],
    rdma_netdevs: &[String],
) -> Option<&'a str> {
    let up: Vec<&NetInterface> = ifaces.iter().filter(|i| i.is_up()).collect();
    up.iter()
        .find(|i| i.name == "eth0")
        .or_else(|| up.iter().find(|i| rdma_netdevs.contains(&i.name)))
        .or_else(|| up.first())
        .map(|i| i.name.as_str())
}
