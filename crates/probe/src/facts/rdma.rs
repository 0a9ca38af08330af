//! RDMA devices from `/sys/class/infiniband` and device nodes from `/dev/infiniband`.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::sysfs::{list_dir, parse_u64, read_opt, under};

/// Alibaba Cloud eRDMA PCI vendor id.
pub const ERDMA_VENDOR_ID: u32 = 0x1ded;
/// Alibaba Cloud eRDMA PCI device id.
pub const ERDMA_DEVICE_ID: u32 = 0x107f;
/// Mellanox / NVIDIA networking PCI vendor id.
pub const MELLANOX_VENDOR_ID: u32 = 0x15b3;
/// Amazon (EFA) PCI vendor id.
pub const AMAZON_VENDOR_ID: u32 = 0x1d0f;
/// Intel PCI vendor id (irdma on E810 / X722).
pub const INTEL_VENDOR_ID: u32 = 0x8086;
/// Broadcom PCI vendor id (bnxt_re sits on NetXtreme-E NICs).
pub const BROADCOM_VENDOR_ID: u32 = 0x14e4;

/// Which driver family a device belongs to; decides counter files and known limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceKind {
    /// Alibaba Cloud elastic RDMA (PCI 1ded:107f, names `erdma_*`).
    Erdma,
    /// NVIDIA/Mellanox ConnectX (`mlx5_*`, PCI vendor 0x15b3).
    Mlx5,
    /// Soft-RoCE (`rxe*`).
    Rxe,
    /// Soft-iWARP (`siw*`).
    Siw,
    /// Intel E810 (`irdma*`).
    Irdma,
    /// AWS Elastic Fabric Adapter (`efa_*`, `rdmap*`, PCI vendor 0x1d0f).
    Efa,
    /// Broadcom NetXtreme-E RoCE (`bnxt_re*`).
    #[serde(rename = "bnxt_re")]
    BnxtRe,
    /// Anything else.
    Other,
}

impl DeviceKind {
    /// Every family, for lookups by name.
    pub const ALL: [DeviceKind; 8] = [
        DeviceKind::Erdma,
        DeviceKind::Mlx5,
        DeviceKind::Rxe,
        DeviceKind::Siw,
        DeviceKind::Irdma,
        DeviceKind::Efa,
        DeviceKind::BnxtRe,
        DeviceKind::Other,
    ];

    /// Device name prefixes the kernel gives this family (empty for `Other`).
    pub fn name_prefixes(self) -> &'static [&'static str] {
        match self {
            DeviceKind::Erdma => &["erdma"],
            DeviceKind::Mlx5 => &["mlx5"],
            DeviceKind::Rxe => &["rxe"],
            DeviceKind::Siw => &["siw"],
            DeviceKind::Irdma => &["irdma"],
            // EFA devices are `efa_0` on older drivers and `rdmap<bus>s<slot>` on current AMIs.
            DeviceKind::Efa => &["efa", "rdmap"],
            DeviceKind::BnxtRe => &["bnxt_re"],
            DeviceKind::Other => &[],
        }
    }

    /// Classify by name and (when known) PCI ids; the PCI ids win.
    pub fn classify(name: &str, vendor_id: Option<u32>, device_id: Option<u32>) -> Self {
        match (vendor_id, device_id) {
            (Some(ERDMA_VENDOR_ID), Some(ERDMA_DEVICE_ID)) => return DeviceKind::Erdma,
            (Some(MELLANOX_VENDOR_ID), _) if name.starts_with("mlx5") => return DeviceKind::Mlx5,
            (Some(AMAZON_VENDOR_ID), _) => return DeviceKind::Efa,
            // systemd's RDMA naming (`rocep65s0f0`) hides the driver: trust the PCI vendor.
            (Some(BROADCOM_VENDOR_ID), _) => return DeviceKind::BnxtRe,
            (Some(INTEL_VENDOR_ID), _) if !name.starts_with("hfi") => return DeviceKind::Irdma,
            _ => {}
        }
        Self::ALL
            .into_iter()
            .find(|k| k.name_prefixes().iter().any(|p| name.starts_with(p)))
            .unwrap_or(DeviceKind::Other)
    }

    /// The family's name as users write it (`eRDMA`, `mlx5`, `EFA`, ...).
    pub fn label(self) -> &'static str {
        match self {
            DeviceKind::Erdma => "eRDMA",
            DeviceKind::Mlx5 => "mlx5",
            DeviceKind::Rxe => "rxe",
            DeviceKind::Siw => "siw",
            DeviceKind::Irdma => "irdma",
            DeviceKind::Efa => "EFA",
            DeviceKind::BnxtRe => "bnxt_re",
            DeviceKind::Other => "RDMA device",
        }
    }
}

/// One GID table entry that is in use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GidEntry {
    /// Index in the GID table (what `NCCL_IB_GID_INDEX` / `ib_write_bw -x` take).
    pub index: u32,
    /// The GID as the kernel prints it (`fe80:0000:...`).
    pub gid: String,
    /// `RoCE v2`, `IB/RoCE v1`, ... from `gid_attrs/types/<index>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gid_type: Option<String>,
    /// The network device behind the GID, from `gid_attrs/ndevs/<index>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netdev: Option<String>,
}

impl GidEntry {
    /// True for an IPv4-mapped GID (`::ffff:a.b.c.d`), the one RoCE v2 routes by.
    pub fn is_ipv4_mapped(&self) -> bool {
        self.gid
            .to_ascii_lowercase()
            .starts_with("0000:0000:0000:0000:0000:ffff:")
    }
}

/// One port of an RDMA device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RdmaPort {
    /// Port number (1-based).
    pub port: u32,
    /// Logical state as written by the kernel, e.g. `4: ACTIVE`.
    pub state: String,
    /// Physical state, e.g. `5: LinkUp`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phys_state: Option<String>,
    /// `Ethernet` (RoCE/iWARP) or `InfiniBand`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_layer: Option<String>,
    /// Link rate, e.g. `100 Gb/sec (4X EDR)`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<String>,
    /// GID entries that are set (all-zero slots are skipped).
    pub gids: Vec<GidEntry>,
    /// Counter files under `hw_counters/` (driver-specific: eRDMA, rxe, mlx5 extras).
    pub hw_counters: Vec<String>,
    /// Counter files under `counters/` (the IB PMA set: `port_xmit_data`, ...).
    pub counters: Vec<String>,
}

impl RdmaPort {
    /// True when the logical state is ACTIVE.
    pub fn is_active(&self) -> bool {
        self.state.to_ascii_uppercase().contains("ACTIVE")
    }

    /// The GID index NCCL should use: the first IPv4-mapped RoCE v2 entry, else the first
    /// RoCE v2 entry, else `None` (InfiniBand needs no GID index).
    pub fn suggested_gid_index(&self) -> Option<u32> {
        let v2 = |g: &&GidEntry| {
            g.gid_type
                .as_deref()
                .is_some_and(|t| t.to_ascii_lowercase().contains("v2"))
        };
        self.gids
            .iter()
            .filter(v2)
            .find(|g| g.is_ipv4_mapped())
            .or_else(|| self.gids.iter().find(v2))
            .or_else(|| {
                // eRDMA (iWARP-style) exposes no gid_attrs types; its IPv4-mapped entry is the one.
                self.gids.iter().find(|g| g.is_ipv4_mapped())
            })
            .map(|g| g.index)
    }
}

/// One RDMA device as sysfs shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RdmaDevice {
    /// Device name (`erdma_0`, `mlx5_0`, `rxe0`).
    pub name: String,
    /// Driver family.
    pub kind: DeviceKind,
    /// `node_guid`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_guid: Option<String>,
    /// `node_type`, e.g. `1: CA` or `4: RNIC`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_type: Option<String>,
    /// Firmware version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fw_ver: Option<String>,
    /// PCI vendor id (`device/vendor`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vendor_id: Option<u32>,
    /// PCI device id (`device/device`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_id: Option<u32>,
    /// The netdev a soft device (rxe/siw) sits on, from `parent`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_netdev: Option<String>,
    /// Ports.
    pub ports: Vec<RdmaPort>,
}

impl RdmaDevice {
    /// `vendor:device` as `1ded:107f`, when both ids are known.
    pub fn pci_id(&self) -> Option<String> {
        Some(format!("{:04x}:{:04x}", self.vendor_id?, self.device_id?))
    }

    /// Network devices behind this device (from GID attributes, then `parent`).
    pub fn netdevs(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for p in &self.ports {
            for g in &p.gids {
                if let Some(n) = &g.netdev
                    && !out.contains(n)
                {
                    out.push(n.clone());
                }
            }
        }
        if let Some(p) = &self.parent_netdev
            && !out.contains(p)
        {
            out.push(p.clone());
        }
        out
    }
}

/// Read every device under `<root>/sys/class/infiniband`.
pub fn read_devices(root: &Path) -> Result<Vec<RdmaDevice>> {
    let base = under(root, "/sys/class/infiniband");
    let mut out = Vec::new();
    for name in list_dir(&base)? {
        out.push(read_device(root, &name)?);
    }
    Ok(out)
}

/// Read one device; `Ok` with empty fields for files that are missing.
pub fn read_device(root: &Path, name: &str) -> Result<RdmaDevice> {
    let dir = under(root, "/sys/class/infiniband").join(name);
    let vendor_id = read_opt(&dir.join("device/vendor"))?
        .and_then(|s| parse_u64(&s))
        .and_then(|v| u32::try_from(v).ok());
    let device_id = read_opt(&dir.join("device/device"))?
        .and_then(|s| parse_u64(&s))
        .and_then(|v| u32::try_from(v).ok());
    let mut ports = Vec::new();
    for p in list_dir(&dir.join("ports"))? {
        let Ok(num) = p.parse::<u32>() else { continue };
        ports.push(read_port(&dir.join("ports").join(&p), num)?);
    }
    Ok(RdmaDevice {
        name: name.to_string(),
        kind: DeviceKind::classify(name, vendor_id, device_id),
        node_guid: read_opt(&dir.join("node_guid"))?,
        node_type: read_opt(&dir.join("node_type"))?,
        fw_ver: read_opt(&dir.join("fw_ver"))?.filter(|s| !s.is_empty()),
        vendor_id,
        device_id,
        parent_netdev: read_opt(&dir.join("parent"))?.filter(|s| !s.is_empty()),
        ports,
    })
}

fn read_port(dir: &Path, port: u32) -> Result<RdmaPort> {
    let mut gids = Vec::new();
    for idx in list_dir(&dir.join("gids"))? {
        let Ok(index) = idx.parse::<u32>() else {
            continue;
        };
        let Some(gid) = read_opt(&dir.join("gids").join(&idx))? else {
            continue;
        };
        if gid.chars().all(|c| c == '0' || c == ':') {
            continue;
        }
        let gid_type = read_opt(&dir.join("gid_attrs/types").join(&idx))?.filter(|s| !s.is_empty());
        let netdev = read_opt(&dir.join("gid_attrs/ndevs").join(&idx))?.filter(|s| !s.is_empty());
        gids.push(GidEntry {
            index,
            gid,
            gid_type,
            netdev,
        });
    }
    Ok(RdmaPort {
        port,
        state: read_opt(&dir.join("state"))?.unwrap_or_else(|| "unknown".into()),
        phys_state: read_opt(&dir.join("phys_state"))?,
        link_layer: read_opt(&dir.join("link_layer"))?,
        rate: read_opt(&dir.join("rate"))?,
        gids,
        hw_counters: list_dir(&dir.join("hw_counters"))?
            .into_iter()
            .filter(|n| n != "lifespan")
            .collect(),
        counters: list_dir(&dir.join("counters"))?,
    })
}

/// What `/dev/infiniband` holds: the device nodes a container needs for verbs and rdma_cm.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DevInfiniband {
    /// Whether the directory exists at all.
    pub present: bool,
    /// `uverbs0`, `uverbs1`, ...
    pub uverbs: Vec<String>,
    /// Whether `rdma_cm` is there (needed for librdmacm, hence iWARP/eRDMA connection setup).
    pub rdma_cm: bool,
    /// Every entry, as listed.
    pub entries: Vec<String>,
}

/// Read `<root>/dev/infiniband`.
pub fn read_dev_infiniband(root: &Path) -> Result<DevInfiniband> {
    let dir = under(root, "/dev/infiniband");
    let present = dir.is_dir();
    let entries = list_dir(&dir)?;
    Ok(DevInfiniband {
        present,
        uverbs: entries
            .iter()
            .filter(|e| e.starts_with("uverbs"))
            .cloned()
            .collect(),
        rdma_cm: entries.iter().any(|e| e == "rdma_cm"),
        entries,
    })
}
