//! `ibv_devinfo` (and `ibv_devinfo -v`) output.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::ParseError;

/// One port block.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IbvPort {
    /// Port number.
    pub port: u32,
    /// `PORT_ACTIVE (4)`.
    pub state: Option<String>,
    /// `4096 (5)`.
    pub max_mtu: Option<String>,
    /// `1024 (3)`.
    pub active_mtu: Option<String>,
    /// `Ethernet` / `InfiniBand`.
    pub link_layer: Option<String>,
    /// `sm_lid`.
    pub sm_lid: Option<String>,
    /// `port_lid`.
    pub port_lid: Option<String>,
    /// `GID[ 1]: ...` entries (with `-v`), index → GID text.
    pub gids: BTreeMap<u32, String>,
    /// Any other `key: value` of the port.
    pub extra: BTreeMap<String, String>,
}

impl IbvPort {
    /// State is PORT_ACTIVE.
    pub fn is_active(&self) -> bool {
        self.state
            .as_deref()
            .is_some_and(|s| s.starts_with("PORT_ACTIVE"))
    }
}

/// One `hca_id:` block.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IbvDevice {
    /// Device name.
    pub hca_id: String,
    /// `eRDMA (0)`, `InfiniBand (0)`.
    pub transport: Option<String>,
    /// Firmware.
    pub fw_ver: Option<String>,
    /// Node GUID.
    pub node_guid: Option<String>,
    /// System image GUID.
    pub sys_image_guid: Option<String>,
    /// `0x1ded`.
    pub vendor_id: Option<String>,
    /// Part id (decimal as printed).
    pub vendor_part_id: Option<String>,
    /// Hardware version.
    pub hw_ver: Option<String>,
    /// `phys_port_cnt`.
    pub phys_port_cnt: Option<u32>,
    /// Ports.
    pub ports: Vec<IbvPort>,
    /// Other device-level keys (`-v` prints many).
    pub extra: BTreeMap<String, String>,
}

impl IbvDevice {
    /// Vendor id as a number.
    pub fn vendor_id_num(&self) -> Option<u32> {
        let v = self.vendor_id.as_deref()?;
        u32::from_str_radix(v.trim().trim_start_matches("0x"), 16).ok()
    }
}

/// Parse `ibv_devinfo` output; returns every device in order.
pub fn parse_ibv_devinfo(text: &str) -> Result<Vec<IbvDevice>, ParseError> {
    let mut devs: Vec<IbvDevice> = Vec::new();
    for (n, raw) in text.lines().enumerate() {
        let line = raw.trim();
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let key = key.trim();
        let value = value.trim().to_string();
        if key == "hca_id" {
            devs.push(IbvDevice {
                hca_id: value,
                ..Default::default()
            });
            continue;
        }
        let Some(dev) = devs.last_mut() else {
            continue;
        };
        if key == "port" {
            let Ok(port) = value.parse() else {
                return Err(ParseError::new(
                    "ibv_devinfo",
                    Some(n + 1),
                    format!("`port:` is followed by `{value}`, expected a port number"),
                ));
            };
            dev.ports.push(IbvPort {
                port,
                ..Default::default()
            });
            continue;
        }
        if let Some(port) = dev.ports.last_mut() {
            if let Some(idx) = key.strip_prefix("GID[").and_then(|r| r.strip_suffix(']')) {
                if let Ok(i) = idx.trim().parse() {
                    port.gids.insert(i, value);
                }
                continue;
            }
            match key {
                "state" => port.state = Some(value),
                "max_mtu" => port.max_mtu = Some(value),
                "active_mtu" => port.active_mtu = Some(value),
                "link_layer" => port.link_layer = Some(value),
                "sm_lid" => port.sm_lid = Some(value),
                "port_lid" => port.port_lid = Some(value),
                _ => {
                    port.extra.insert(key.to_string(), value);
                }
            }
            continue;
        }
        match key {
            "transport" => dev.transport = Some(value),
            "fw_ver" => dev.fw_ver = Some(value),
            "node_guid" => dev.node_guid = Some(value),
            "sys_image_guid" => dev.sys_image_guid = Some(value),
            "vendor_id" => dev.vendor_id = Some(value),
            "vendor_part_id" => dev.vendor_part_id = Some(value),
            "hw_ver" => dev.hw_ver = Some(value),
            "phys_port_cnt" => dev.phys_port_cnt = value.parse().ok(),
            _ => {
                dev.extra.insert(key.to_string(), value);
            }
        }
    }
    if devs.is_empty() {
        return Err(ParseError::new(
            "ibv_devinfo",
            None,
            if text.contains("No IB devices found") {
                "`No IB devices found`: verbs sees no device (request the RDMA resource, install the provider)"
            } else {
                "no `hca_id:` line; pass the output of `ibv_devinfo` (or `ibv_devinfo -d <dev>`)"
            },
        ));
    }
    Ok(devs)
}
