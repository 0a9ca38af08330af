//! Vendor profiles: everything that differs between RDMA vendors, as plain data.
//!
//! A [`Profile`] says how a pod gets an RDMA device, which GPU resource it asks for, which pod settings
//! the vendor's RDMA stack needs, how NCCL must be pointed at the device, which userspace packages go into
//! the image, which NCCL versions are known good or bad, and which sysfs counters prove that traffic went
//! over RDMA. Built-in profiles are Rhai scripts under `scripts/vendors/` (read by `rdmakit::profiles`);
//! this crate only holds the data and checks it ([`Profile::check`]).
//!
//! Files: `rdma` (how a pod gets its devices, which devices they are), `pod` (pod settings,
//! tolerations, node labels), `nccl` (NCCL's transport, net plugins, version lists), `userspace`
//! (image packages), `instance` (node shapes and the expectation facts), `check` (what serde cannot
//! check).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

mod check;
mod instance;
mod nccl;
mod pod;
mod rdma;
mod userspace;

pub use check::ProfileInvalid;
pub(crate) use check::is_dns_label;
pub use instance::{ExpectationFacts, InstanceType};
pub use nccl::{NcclSettings, NcclTransport, NetPlugin, PluginSource};
pub use pod::{HostPathMount, NodeLabelException, PodSettings, ShmVolume, TolerationSpec};
pub use rdma::{DeviceSpec, DraSettings, RdmaAttachment};
pub use userspace::{AptSource, Userspace};

/// A vendor profile. Field names are snake_case in Rhai scripts and JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// Profile id, kebab-case (`aliyun-erdma`).
    pub name: String,
    /// One line for `rdmakit profiles`.
    #[serde(default)]
    pub description: String,
    /// Human name of the RDMA fabric, used in program output (`RDT over eRDMA: OK`).
    pub fabric: String,
    /// Short lowercase token used in object and file names (`erdma` → `ray-cluster-erdma.yaml`).
    pub short_name: String,
    /// How a pod gets its RDMA device.
    pub rdma: RdmaAttachment,
    /// Extended resource name of the GPU (`nvidia.com/gpu`, `nvidia.com/gpu-h800`).
    #[serde(default = "default_gpu_resource")]
    pub gpu_resource: String,
    /// Pod settings the vendor's RDMA stack requires on every RDMA pod.
    #[serde(default)]
    pub pod: PodSettings,
    /// NCCL environment and version constraints.
    pub nccl: NcclSettings,
    /// Node selector put on every RDMA pod (values may be overridden by `Values::node_selector`).
    #[serde(default)]
    pub node_selector: BTreeMap<String, String>,
    /// Labels the RDMA nodes must carry (documentation and preflight; e.g. `vke.node.rdma.mode: ib-shared`).
    #[serde(default)]
    pub node_labels: BTreeMap<String, String>,
    /// Every value the node check accepts for a `node_labels` key, when more than the one
    /// `node_labels` gives (`vke.node.rdma.mode: ["ib-shared", "ib-shared-multi"]`).
    #[serde(default)]
    pub node_label_values: BTreeMap<String, Vec<String>>,
    /// Instance types for which the vendor does not recommend a `node_labels` value (seed 004:
    /// ib-shared is recommended except on ecs.hpcg1ve.21xlarge and, in North China,
    /// ecs.hpcpni2.28xlarge).
    #[serde(default)]
    pub node_label_exceptions: Vec<NodeLabelException>,
    /// Tolerations put on every RDMA pod.
    #[serde(default)]
    pub tolerations: Vec<TolerationSpec>,
    /// Userspace RDMA packages for the image and their apt source.
    #[serde(default)]
    pub userspace: Userspace,
    /// Device naming and the counters that prove traffic.
    pub devices: DeviceSpec,
    /// Storage class for the BuildKit cache volume (`None`: the cluster default).
    #[serde(default)]
    pub storage_class: Option<String>,
    /// Vendor notes shown by `rdmakit profiles` and in bundle notes (NUMA policy, limitations, ...).
    #[serde(default)]
    pub notes: Vec<String>,
    /// Value defaults of this profile, keyed as `--set` keys them (`gpus_per_worker: 2`,
    /// `node_selector.<label>: ...`): what the seed this profile reproduces runs with. They replace
    /// [`Values::default`](crate::Values) for every key the user does not set
    /// ([`Values::with_profile_defaults`](crate::Values::with_profile_defaults)).
    #[serde(default)]
    pub values: BTreeMap<String, serde_json::Value>,
    /// Instance types (node shapes) this profile knows, keyed by the provider's name
    /// (`p5.48xlarge`, `ecs.gn8is-2x.8xlarge`): GPUs, RDMA devices, NIC rate and count, GPUDirect,
    /// PCIe generation. The `instance_type` value picks one; its GPU count becomes the default
    /// `gpus_per_worker` and its `resources` the device-plugin counts (see [`InstanceType`]).
    #[serde(default)]
    pub instance_types: BTreeMap<String, InstanceType>,
}

fn default_gpu_resource() -> String {
    "nvidia.com/gpu".to_owned()
}

impl Profile {
    /// Deserialises a profile from JSON (what a Rhai object map converts to). On error the field path
    /// (`nccl.pin`, `pod.host_paths[0].name`) and serde's message are returned. Call [`Profile::check`]
    /// afterwards for value checks.
    pub fn from_json(value: serde_json::Value) -> Result<Profile, ProfileInvalid> {
        serde_path_to_error::deserialize(value).map_err(|e| {
            let path = e.path().to_string();
            ProfileInvalid {
                field: if path.is_empty() {
                    ".".to_owned()
                } else {
                    path
                },
                message: e.into_inner().to_string(),
            }
        })
    }

    /// Values the node check accepts for label `key`: `node_label_values[key]`, else the one
    /// `node_labels` value; empty when the profile names no such label.
    pub fn accepted_label_values(&self, key: &str) -> Vec<String> {
        match self.node_label_values.get(key) {
            Some(v) if !v.is_empty() => v.clone(),
            _ => self.node_labels.get(key).cloned().into_iter().collect(),
        }
    }

    /// The exceptions that apply to `instance_type` (in `region`, when the exception names one:
    /// a region-bound exception is returned when `region` is `None`, since it may apply).
    pub fn node_label_exceptions_for(
        &self,
        instance_type: &str,
        region: Option<&str>,
    ) -> Vec<&NodeLabelException> {
        self.node_label_exceptions
            .iter()
            .filter(|e| e.instance_type == instance_type)
            .filter(|e| match (&e.region, region) {
                (Some(r), Some(given)) => r.eq_ignore_ascii_case(given),
                _ => true,
            })
            .collect()
    }

    /// The net plugin, when NCCL reaches the fabric through one.
    pub fn net_plugin(&self) -> Option<&NetPlugin> {
        match &self.nccl.transport {
            NcclTransport::NetPlugin(p) => Some(p),
            NcclTransport::IbVerbs | NcclTransport::Sockets => None,
        }
    }

    /// The variable and value that force NCCL onto TCP for an A/B run: `NCCL_IB_DISABLE=1` for
    /// NCCL's IB transport, `NCCL_NET=Socket` where a net plugin (or nothing) carries the traffic.
    pub fn tcp_switch(&self) -> (&'static str, &'static str) {
        if self.uses_ib_verbs() {
            ("NCCL_IB_DISABLE", "1")
        } else {
            ("NCCL_NET", "Socket")
        }
    }

    /// What NCCL's INFO log prints when the fabric carries the traffic: `NET/IB : Using` for IB
    /// verbs, the plugin's `log_marker` (`NET/OFI`), `NET/Socket : Using` for sockets.
    pub fn nccl_log_marker(&self) -> String {
        match &self.nccl.transport {
            NcclTransport::IbVerbs => "NET/IB : Using".to_owned(),
            NcclTransport::NetPlugin(p) => p
                .log_marker
                .clone()
                .unwrap_or_else(|| format!("NET/Plugin (the {} plugin)", p.name)),
            NcclTransport::Sockets => "NET/Socket : Using".to_owned(),
        }
    }

    /// Whether NCCL uses its own IB verbs transport (`NCCL_IB_HCA` applies).
    pub fn uses_ib_verbs(&self) -> bool {
        matches!(self.nccl.transport, NcclTransport::IbVerbs)
    }

    /// Whether plugin version `version` is on the plugin's known-bad list.
    pub fn plugin_version_is_bad(&self, version: &str) -> bool {
        self.net_plugin()
            .is_some_and(|p| p.known_bad.iter().any(|v| v == version))
    }

    /// The first device name that matches the pattern (`erdma_*` → `erdma_0`), for examples and commands.
    pub fn example_device(&self) -> String {
        self.devices.name_pattern.example()
    }

    /// Whether NCCL `version` is on the profile's known-bad list.
    pub fn nccl_version_is_bad(&self, version: &str) -> bool {
        self.nccl.known_bad.iter().any(|v| v == version)
    }
}
