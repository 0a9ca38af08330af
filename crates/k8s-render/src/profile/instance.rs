//! Node shapes a profile knows (GPUs, RDMA devices, NIC rate, GPUDirect, PCIe) and the facts
//! `probe::expect` computes an expected bandwidth from.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::check::invalid;
use super::{NcclTransport, Profile, ProfileInvalid};

/// One node shape of a profile: what the hardware has, as the provider documents it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InstanceType {
    /// GPUs per node (`8` on p5.48xlarge, `2` on ecs.gn8is-2x.8xlarge).
    pub gpus: u32,
    /// GPU model, for people (`H100 80GB`).
    #[serde(default)]
    pub gpu_model: Option<String>,
    /// RDMA devices per node as the device plugin or DRA driver counts them (EFA interfaces,
    /// HCAs, eRDMA adapters).
    pub rdma_devices: u32,
    /// Line rate of one RDMA NIC in Gb/s (decimal, as vendors quote it: 100 for an EFA
    /// interface of p5.48xlarge, 400 for a ConnectX-7 NDR port); leave it out when the vendor
    /// does not publish it (the expected-bandwidth model then cannot run).
    #[serde(default)]
    pub nic_gbps: Option<f64>,
    /// RDMA NICs carrying that rate; default `rdma_devices`.
    #[serde(default)]
    pub nics: Option<u32>,
    /// Whether GPUDirect RDMA works on this instance type (the NIC reads GPU memory).
    pub gpudirect: bool,
    /// PCIe generation of the GPU's host link (3 to 6).
    pub pcie_gen: u8,
    /// PCIe lanes of the GPU's host link.
    #[serde(default = "sixteen")]
    pub pcie_lanes: u8,
    /// Device-plugin resource counts a pod that takes the whole node asks for
    /// (`vpc.amazonaws.com/efa: 32`); empty keeps `rdma.resources`.
    #[serde(default)]
    pub resources: BTreeMap<String, u32>,
    /// Where the figures come from, and what could not be verified.
    #[serde(default)]
    pub source: Option<String>,
}

fn sixteen() -> u8 {
    16
}

/// What `probe::expect` needs from a profile: the hardware facts of one instance type and how
/// many NICs a transfer spreads over. Field names and meaning are those of
/// `probe::expect::ExpectationInputs` (serialised, it deserialises into that type, with the
/// measured rates absent).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExpectationFacts {
    /// Line rate of one NIC in Gb/s.
    pub nic_line_gbps: f64,
    /// RDMA NICs on the node.
    pub nics_per_node: u32,
    /// NICs the transfer spreads over: 1 when `NCCL_IB_HCA` names one device, the listed
    /// count for a list, every NIC for a prefix, a net plugin or DRA.
    pub nics_used: u32,
    /// Whether GPUDirect RDMA is on.
    pub gpudirect: bool,
    /// PCIe generation of the GPU's link.
    pub pcie_gen: u8,
    /// PCIe lanes of the GPU's link.
    pub pcie_lanes: u8,
}

impl Profile {
    /// The instance type `name`, else the profile's `values.instance_type` default; `None` when
    /// neither names one. An unknown name is an error listing the known ones.
    pub fn instance_type<'a>(
        &'a self,
        name: Option<&str>,
    ) -> Result<Option<(&'a str, &'a InstanceType)>, ProfileInvalid> {
        let wanted = match name {
            Some(n) if !n.trim().is_empty() => n.trim().to_owned(),
            _ => match self
                .values
                .get("instance_type")
                .and_then(crate::values::setting_text)
            {
                Some(n) if !n.is_empty() => n,
                _ => return Ok(None),
            },
        };
        match self.instance_types.get_key_value(wanted.as_str()) {
            Some((k, it)) => Ok(Some((k.as_str(), it))),
            None => Err(invalid(
                "instance_type",
                format!(
                    "`{wanted}` is not an instance type of profile {}; known: {}",
                    self.name,
                    self.known_instance_types(
                        "none (add an `instance_types` table to the profile)"
                    )
                ),
            )),
        }
    }

    /// The hardware facts `probe::expect` needs for one instance type (`None`: the profile's
    /// default instance type). Errors when the profile has no such instance type.
    ///
    /// `nics_used` follows how NCCL is pointed at the devices: `NCCL_IB_HCA=erdma_0` (one
    /// device) uses 1 NIC, a list `mlx5_0,mlx5_1` its length, a prefix (`mlx5`) every NIC; a net
    /// plugin and DRA spread over every NIC; sockets use none of them (1, so the model still
    /// computes).
    pub fn expectation_facts(
        &self,
        instance_type: Option<&str>,
    ) -> Result<ExpectationFacts, ProfileInvalid> {
        let Some((it_name, it)) = self.instance_type(instance_type)? else {
            return Err(invalid(
                "instance_type",
                format!(
                    "profile {} names no instance type: pass one ({})",
                    self.name,
                    self.known_instance_types("the profile has no `instance_types` table")
                ),
            ));
        };
        let Some(nic_gbps) = it.nic_gbps else {
            return Err(invalid(
                format!("instance_types.{it_name}.nic_gbps"),
                "the profile does not know the NIC line rate of this instance type: add it (Gb/s) to compute an expectation",
            ));
        };
        let nics = it.nics.unwrap_or(it.rdma_devices).max(1);
        let nics_used = match &self.nccl.transport {
            NcclTransport::IbVerbs => self
                .nccl
                .ib_hca
                .as_deref()
                .map_or(nics, |h| hca_nic_count(h, nics)),
            NcclTransport::NetPlugin(_) => nics,
            NcclTransport::Sockets => 1,
        };
        Ok(ExpectationFacts {
            nic_line_gbps: nic_gbps,
            nics_per_node: nics,
            nics_used: nics_used.clamp(1, nics),
            gpudirect: it.gpudirect,
            pcie_gen: it.pcie_gen,
            pcie_lanes: it.pcie_lanes,
        })
    }

    /// The instance type names, comma-separated, for messages; `none` when the profile has none.
    fn known_instance_types(&self, none: &str) -> String {
        if self.instance_types.is_empty() {
            none.to_owned()
        } else {
            self.instance_types
                .keys()
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        }
    }
}

/// NICs an `NCCL_IB_HCA` value selects out of `nics`: one exact device (`erdma_0`, `=mlx5_0`,
/// `mlx5_0:1`) is 1, a list is its length, a prefix or an exclusion (`^mlx5_2`) is every NIC.
fn hca_nic_count(hca: &str, nics: u32) -> u32 {
    let v = hca.trim();
    if v.is_empty() || v.starts_with('^') {
        return nics;
    }
    let list = v.strip_prefix('=').unwrap_or(v);
    let entries: Vec<&str> = list
        .split(',')
        .map(|e| e.split(':').next().unwrap_or("").trim())
        .filter(|e| !e.is_empty())
        .collect();
    let exact = |e: &&str| e.ends_with(|c: char| c.is_ascii_digit()) && e.contains('_');
    if !entries.is_empty() && entries.iter().all(exact) {
        u32::try_from(entries.len()).unwrap_or(nics)
    } else {
        nics
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hca_selects_nics() {
        assert_eq!(hca_nic_count("erdma_0", 2), 1);
        assert_eq!(hca_nic_count("erdma", 2), 2);
        assert_eq!(hca_nic_count("mlx5", 8), 8);
        assert_eq!(hca_nic_count("=mlx5_0,mlx5_1", 8), 2);
        assert_eq!(hca_nic_count("mlx5_0:1", 8), 1);
        assert_eq!(hca_nic_count("^mlx5_2", 8), 8);
    }
}
