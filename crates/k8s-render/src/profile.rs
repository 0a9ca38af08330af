//! Vendor profiles: everything that differs between RDMA vendors, as plain data.
//!
//! A [`Profile`] says how a pod gets an RDMA device, which GPU resource it asks for, which pod settings
//! the vendor's RDMA stack needs, how NCCL must be pointed at the device, which userspace packages go into
//! the image, which NCCL versions are known good or bad, and which sysfs counters prove that traffic went
//! over RDMA. Built-in profiles are Rhai scripts under `scripts/vendors/` (read by `rdmakit::profiles`);
//! this crate only holds the data and checks it ([`Profile::check`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

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

fn default_gpu_resource() -> String {
    "nvidia.com/gpu".to_owned()
}

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

/// NCCL environment and version constraints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NcclSettings {
    /// How NCCL reaches the fabric: its own IB verbs transport (default), a net plugin, or sockets.
    #[serde(default)]
    pub transport: NcclTransport,
    /// `NCCL_IB_HCA`: a device name (`erdma_0`) or prefix (`erdma`, `mlx5`). Required with the
    /// `ib-verbs` transport; a net plugin or sockets do not read it (leave it out there).
    #[serde(default)]
    pub ib_hca: Option<String>,
    /// `NCCL_SOCKET_IFNAME`: the interface for bootstrap and TCP fallback (`eth0`).
    #[serde(default)]
    pub socket_ifname: Option<String>,
    /// `NCCL_IB_GID_INDEX` (RoCE GID to use); `None` lets NCCL pick.
    #[serde(default)]
    pub gid_index: Option<u32>,
    /// More environment for RDMA containers.
    #[serde(default)]
    pub extra_env: BTreeMap<String, String>,
    /// pip package that carries libnccl for the image's CUDA (`nvidia-nccl-cu13`).
    #[serde(default = "default_nccl_package")]
    pub pip_package: String,
    /// NCCL version installed into the image; `None` keeps the one the base image ships.
    #[serde(default)]
    pub pin: Option<String>,
    /// Versions known to fail on this fabric.
    #[serde(default)]
    pub known_bad: Vec<String>,
    /// Why the known-bad versions fail (shown in errors).
    #[serde(default)]
    pub bad_reason: Option<String>,
    /// Versions known to work on this fabric.
    #[serde(default)]
    pub known_good: Vec<String>,
}

/// How NCCL reaches the fabric.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum NcclTransport {
    /// NCCL's built-in IB verbs transport (`NET/IB`), pointed at devices with `NCCL_IB_HCA`.
    #[default]
    IbVerbs,
    /// A network plugin NCCL loads (`libnccl-net*.so`): aws-ofi-nccl over libfabric on EFA,
    /// Google's gIB on GKE RDMA.
    NetPlugin(Box<NetPlugin>),
    /// TCP sockets only (`NET/Socket`): no RDMA; for fabrics without verbs or for A/B runs.
    Sockets,
}

/// An NCCL net plugin: the library, where it comes from, its environment and versions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetPlugin {
    /// Project name, also what version pins are recognised by (`aws-ofi-nccl`).
    pub name: String,
    /// File NCCL loads (`libnccl-net-ofi.so`, `libnccl-net.so`).
    pub library: String,
    /// Directory of `library` inside the container; added to `LD_LIBRARY_PATH`.
    pub library_dir: String,
    /// `image`: the Dockerfile installs it (`install` steps); `host`: a node installer puts it
    /// on the node and a `pod.host_paths` mount brings it into the container.
    #[serde(default)]
    pub source: PluginSource,
    /// Environment the plugin needs on every NCCL container (`FI_PROVIDER: efa`).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Keys of `env` whose absence breaks the plugin (`FI_PROVIDER`); linted in manifests.
    #[serde(default)]
    pub required_env: Vec<String>,
    /// apt packages the install steps need (`libhwloc-dev`).
    #[serde(default)]
    pub packages: Vec<String>,
    /// Dockerfile `RUN` steps (shell, joined with `&&`) that put the library into the image;
    /// `${VERSION}` is replaced by `version`.
    #[serde(default)]
    pub install: Vec<String>,
    /// Plugin version the install steps put in the image.
    #[serde(default)]
    pub version: Option<String>,
    /// Plugin versions known to fail.
    #[serde(default)]
    pub known_bad: Vec<String>,
    /// Why the known-bad versions fail.
    #[serde(default)]
    pub bad_reason: Option<String>,
    /// Plugin versions known to work.
    #[serde(default)]
    pub known_good: Vec<String>,
    /// Text after which a plugin version follows in Dockerfiles and manifests
    /// (`AWS_OFI_NCCL_VERSION`, `nccl-plugin-gib:`); `name` is always one.
    #[serde(default)]
    pub version_markers: Vec<String>,
    /// What NCCL's INFO log prints when the plugin carries the traffic (`NET/OFI`).
    #[serde(default)]
    pub log_marker: Option<String>,
}

/// Where a net plugin's library comes from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PluginSource {
    /// Installed into the image by the Dockerfile.
    #[default]
    Image,
    /// Installed on the node; mounted into the pod with a hostPath.
    Host,
}

fn default_nccl_package() -> String {
    "nvidia-nccl-cu13".to_owned()
}

/// Userspace RDMA libraries for the image.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Userspace {
    /// apt packages (`libibverbs1`, `ibverbs-providers`, ...).
    #[serde(default)]
    pub packages: Vec<String>,
    /// Vendor apt source; `None` uses the base image's distribution.
    #[serde(default)]
    pub apt_source: Option<AptSource>,
}

/// A vendor apt repository.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AptSource {
    /// File name stem under `/etc/apt/sources.list.d/` and of the keyring.
    pub name: String,
    /// URL of the repository's signing key (ASCII-armoured).
    pub key_url: String,
    /// URI, suite and components of the `deb` line (the renderer adds `deb [signed-by=…]`).
    /// `${VERSION_CODENAME}` is expanded from the image's `/etc/os-release` at build time.
    pub repo: String,
    /// Why the build must run where it runs (e.g. the mirror is reachable only inside the VPC).
    #[serde(default)]
    pub note: Option<String>,
}

/// Device naming and traffic counters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceSpec {
    /// Glob over `/sys/class/infiniband/` names (`erdma_*`, `mlx5_*`, `rdmap*`).
    pub name_pattern: String,
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

/// A profile field that is present but wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("profile field `{field}`: {message}")]
pub struct ProfileInvalid {
    /// Dotted path of the field (`nccl.pin`).
    pub field: String,
    /// What is wrong and what is expected.
    pub message: String,
}

fn invalid(field: impl Into<String>, message: impl Into<String>) -> ProfileInvalid {
    ProfileInvalid {
        field: field.into(),
        message: message.into(),
    }
}

/// `Ok(())` when `ok`, else the field's error: one line per validation rule.
fn ensure(
    ok: bool,
    field: impl Into<String>,
    message: impl Into<String>,
) -> Result<(), ProfileInvalid> {
    if ok {
        Ok(())
    } else {
        Err(invalid(field, message))
    }
}

const DNS_POLICIES: &[&str] = &["ClusterFirst", "ClusterFirstWithHostNet", "Default", "None"];

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

    /// Checks what serde cannot: names, resource names, DNS policy, NCCL pin against its own bad list.
    pub fn check(&self) -> Result<(), ProfileInvalid> {
        if !is_dns_label(&self.name) {
            return Err(invalid(
                "name",
                format!("`{}` must be lowercase letters, digits and '-'", self.name),
            ));
        }
        if !is_dns_label(&self.short_name) {
            return Err(invalid(
                "short_name",
                format!(
                    "`{}` must be lowercase letters, digits and '-'",
                    self.short_name
                ),
            ));
        }
        if self.fabric.trim().is_empty() {
            return Err(invalid("fabric", "must not be empty (e.g. \"eRDMA\")"));
        }
        check_resource_name("gpu_resource", &self.gpu_resource)?;
        match &self.rdma {
            RdmaAttachment::DevicePlugin { resources } => {
                if resources.is_empty() {
                    return Err(invalid(
                        "rdma.resources",
                        "a device-plugin profile needs at least one resource (e.g. \"aliyun/erdma\": 1)",
                    ));
                }
                for (name, count) in resources {
                    check_resource_name(&format!("rdma.resources.{name}"), name)?;
                    if *count == 0 {
                        return Err(invalid(
                            format!("rdma.resources.{name}"),
                            "count must be at least 1",
                        ));
                    }
                }
            }
            RdmaAttachment::Dra(dra) => {
                if !is_dns_subdomain(&dra.device_class) {
                    return Err(invalid("rdma.device_class", "must be a DNS subdomain"));
                }
                if !is_dns_label(&dra.claim_template) {
                    return Err(invalid("rdma.claim_template", "must be a DNS label"));
                }
                if !is_dns_label(&dra.request_name) {
                    return Err(invalid("rdma.request_name", "must be a DNS label"));
                }
                if dra.selectors.is_empty() {
                    return Err(invalid(
                        "rdma.selectors",
                        "needs at least one CEL expression",
                    ));
                }
                if dra.count == 0 {
                    return Err(invalid("rdma.count", "must be at least 1"));
                }
            }
        }
        if let Some(policy) = &self.pod.dns_policy
            && !DNS_POLICIES.contains(&policy.as_str())
        {
            return Err(invalid(
                "pod.dns_policy",
                format!("`{policy}` is not one of {}", DNS_POLICIES.join(", ")),
            ));
        }
        for (i, cap) in self.pod.capabilities.iter().enumerate() {
            if cap.is_empty() || !cap.chars().all(|c| c.is_ascii_uppercase() || c == '_') {
                return Err(invalid(
                    format!("pod.capabilities[{i}]"),
                    format!("`{cap}` is not a capability name such as IPC_LOCK"),
                ));
            }
        }
        for (i, m) in self.pod.host_paths.iter().enumerate() {
            if !m.host_path.starts_with('/') || !m.mount_path.starts_with('/') {
                return Err(invalid(
                    format!("pod.host_paths[{i}]"),
                    "host_path and mount_path must be absolute",
                ));
            }
            if !is_dns_label(&m.name) {
                return Err(invalid(
                    format!("pod.host_paths[{i}].name"),
                    "must be a DNS label",
                ));
            }
        }
        if let Some(shm) = &self.pod.shm
            && !is_dns_label(&shm.volume_name)
        {
            return Err(invalid("pod.shm.volume_name", "must be a DNS label"));
        }
        for (key, values) in &self.node_label_values {
            if let Some(v) = self.node_labels.get(key)
                && !values.contains(v)
            {
                return Err(invalid(
                    format!("node_label_values.{key}"),
                    format!("must include the node_labels value `{v}`"),
                ));
            }
        }
        for (i, e) in self.node_label_exceptions.iter().enumerate() {
            if e.instance_type.trim().is_empty() || e.label.trim().is_empty() {
                return Err(invalid(
                    format!("node_label_exceptions[{i}]"),
                    "instance_type and label must not be empty",
                ));
            }
        }
        self.check_transport()?;
        self.check_instance_types()?;
        if let Some(pin) = &self.nccl.pin {
            check_version("nccl.pin", pin)?;
            if self.nccl.known_bad.contains(pin) {
                return Err(invalid(
                    "nccl.pin",
                    format!("{pin} is in the profile's own known_bad list"),
                ));
            }
        }
        for (i, v) in self.nccl.known_bad.iter().enumerate() {
            check_version(&format!("nccl.known_bad[{i}]"), v)?;
        }
        for (i, v) in self.nccl.known_good.iter().enumerate() {
            check_version(&format!("nccl.known_good[{i}]"), v)?;
        }
        if self.devices.name_pattern.is_empty() || self.devices.name_pattern.contains('/') {
            return Err(invalid(
                "devices.name_pattern",
                "must be a device-name glob such as erdma_*",
            ));
        }
        if self.devices.tx_counter.starts_with('/') || self.devices.tx_counter.is_empty() {
            return Err(invalid(
                "devices.tx_counter",
                "must be relative to /sys/class/infiniband/<dev>/ (e.g. ports/1/hw_counters/hw_tx_bytes_cnt)",
            ));
        }
        if self.devices.counter_multiplier == 0 {
            return Err(invalid("devices.counter_multiplier", "must be at least 1"));
        }
        for (i, p) in self.userspace.packages.iter().enumerate() {
            if p.is_empty() || p.contains(char::is_whitespace) {
                return Err(invalid(
                    format!("userspace.packages[{i}]"),
                    "must be one apt package name",
                ));
            }
        }
        let mut probe = crate::Values::default();
        for (key, setting) in &self.values {
            let field = format!("values.{key}");
            let Some(text) = crate::values::setting_text(setting) else {
                return Err(invalid(
                    field,
                    format!("`{setting}` must be a string, number or boolean"),
                ));
            };
            probe
                .set(key, &text)
                .map_err(|e| invalid(field, e.to_string()))?;
        }
        probe
            .check()
            .map_err(|e| invalid("values", e.to_string()))?;
        Ok(())
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
                    if self.instance_types.is_empty() {
                        "none (add an `instance_types` table to the profile)".to_owned()
                    } else {
                        self.instance_types
                            .keys()
                            .cloned()
                            .collect::<Vec<_>>()
                            .join(", ")
                    }
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
                    if self.instance_types.is_empty() {
                        "the profile has no `instance_types` table".to_owned()
                    } else {
                        self.instance_types
                            .keys()
                            .cloned()
                            .collect::<Vec<_>>()
                            .join(", ")
                    }
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

    fn check_transport(&self) -> Result<(), ProfileInvalid> {
        let hca = self.nccl.ib_hca.as_deref().map(str::trim);
        match &self.nccl.transport {
            NcclTransport::IbVerbs => {
                if hca.is_none_or(str::is_empty) {
                    return Err(invalid(
                        "nccl.ib_hca",
                        "must name the device or prefix (e.g. erdma_0) for the ib-verbs transport; \
                         a fabric NCCL reaches through a net plugin sets nccl.transport: #{ kind: \"net-plugin\", ... } instead",
                    ));
                }
            }
            NcclTransport::Sockets => {
                ensure(
                    hca.is_none(),
                    "nccl.ib_hca",
                    "the sockets transport does not read NCCL_IB_HCA: remove it",
                )?;
            }
            NcclTransport::NetPlugin(p) => {
                let f = |k: &str| format!("nccl.transport.{k}");
                ensure(
                    !p.name.trim().is_empty(),
                    f("name"),
                    "must name the plugin (e.g. aws-ofi-nccl)",
                )?;
                if p.library.contains('/') || !p.library.contains(".so") {
                    return Err(invalid(
                        f("library"),
                        format!(
                            "`{}` must be the library's file name (e.g. libnccl-net-ofi.so); its directory goes in library_dir",
                            p.library
                        ),
                    ));
                }
                ensure(
                    p.library_dir.starts_with('/'),
                    f("library_dir"),
                    "must be an absolute directory inside the container (e.g. /opt/aws-ofi-nccl/install/lib)",
                )?;
                for (i, k) in p.required_env.iter().enumerate() {
                    ensure(
                        p.env.contains_key(k),
                        format!("nccl.transport.required_env[{i}]"),
                        format!("`{k}` is required but not set in nccl.transport.env"),
                    )?;
                }
                for k in p.env.keys() {
                    ensure(
                        !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
                        format!("nccl.transport.env.{k}"),
                        "must be an environment variable name",
                    )?;
                }
                for (i, v) in p.known_bad.iter().enumerate() {
                    check_version(&format!("nccl.transport.known_bad[{i}]"), v)?;
                }
                for (i, v) in p.known_good.iter().enumerate() {
                    check_version(&format!("nccl.transport.known_good[{i}]"), v)?;
                }
                if let Some(v) = &p.version {
                    check_version(&f("version"), v)?;
                    ensure(
                        !p.known_bad.contains(v),
                        f("version"),
                        format!("{v} is in the plugin's own known_bad list"),
                    )?;
                }
                for (i, pkg) in p.packages.iter().enumerate() {
                    ensure(
                        !pkg.is_empty() && !pkg.contains(char::is_whitespace),
                        format!("nccl.transport.packages[{i}]"),
                        "must be one apt package name",
                    )?;
                }
                match p.source {
                    PluginSource::Image => {
                        ensure(
                            !p.install.is_empty(),
                            f("install"),
                            "a plugin with source \"image\" needs the Dockerfile steps that install it \
                                 (or source: \"host\" with a pod.host_paths mount when a node installer provides it)",
                        )?;
                    }
                    PluginSource::Host => {
                        let mounted = self.pod.host_paths.iter().any(|m| {
                            let mp = m.mount_path.trim_end_matches('/');
                            p.library_dir == mp || p.library_dir.starts_with(&format!("{mp}/"))
                        });
                        ensure(
                            mounted,
                            f("library_dir"),
                            format!(
                                "{} comes from the host but no pod.host_paths entry is mounted at or above it",
                                p.library_dir
                            ),
                        )?;
                    }
                }
            }
        }
        Ok(())
    }

    fn check_instance_types(&self) -> Result<(), ProfileInvalid> {
        for (name, it) in &self.instance_types {
            let f = |k: &str| format!("instance_types.{name}.{k}");
            ensure(
                !name.trim().is_empty() && !name.contains(char::is_whitespace),
                "instance_types",
                format!("`{name}` is not an instance type name"),
            )?;
            ensure(it.gpus != 0, f("gpus"), "must be at least 1")?;
            ensure(
                it.rdma_devices != 0,
                f("rdma_devices"),
                "must be at least 1",
            )?;
            ensure(it.nics != Some(0), f("nics"), "must be at least 1")?;
            if let Some(g) = it.nic_gbps
                && !(g.is_finite() && g > 0.0)
            {
                return Err(invalid(
                    f("nic_gbps"),
                    format!("{g} must be a positive line rate in Gb/s (e.g. 400)"),
                ));
            }
            ensure(
                (3..=6).contains(&it.pcie_gen),
                f("pcie_gen"),
                format!("{} is not a PCIe generation from 3 to 6", it.pcie_gen),
            )?;
            ensure(it.pcie_lanes != 0, f("pcie_lanes"), "must be at least 1")?;
            for (r, n) in &it.resources {
                check_resource_name(&f(&format!("resources.{r}")), r)?;
                ensure(
                    *n != 0,
                    f(&format!("resources.{r}")),
                    "count must be at least 1",
                )?;
                match &self.rdma {
                    RdmaAttachment::DevicePlugin { resources } if !resources.contains_key(r) => {
                        return Err(invalid(
                            f(&format!("resources.{r}")),
                            format!(
                                "`{r}` is not one of rdma.resources ({})",
                                resources.keys().cloned().collect::<Vec<_>>().join(", ")
                            ),
                        ));
                    }
                    RdmaAttachment::Dra(_) => {
                        return Err(invalid(
                            f("resources"),
                            "a DRA profile has no device-plugin resources: leave it out (the claim's count is rdma.count)",
                        ));
                    }
                    RdmaAttachment::DevicePlugin { .. } => {}
                }
            }
        }
        if self.values.contains_key("instance_type") {
            self.instance_type(None)
                .map_err(|e| invalid("values.instance_type", e.message))?;
        }
        Ok(())
    }

    /// The first device name that matches the pattern (`erdma_*` → `erdma_0`), for examples and commands.
    pub fn example_device(&self) -> String {
        match self.devices.name_pattern.strip_suffix('*') {
            Some(prefix) => format!("{prefix}0"),
            None => self.devices.name_pattern.clone(),
        }
    }

    /// Whether NCCL `version` is on the profile's known-bad list.
    pub fn nccl_version_is_bad(&self, version: &str) -> bool {
        self.nccl.known_bad.iter().any(|v| v == version)
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

fn check_version(field: &str, v: &str) -> Result<(), ProfileInvalid> {
    let ok = !v.is_empty()
        && v.split('.')
            .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()));
    if ok {
        Ok(())
    } else {
        Err(invalid(
            field,
            format!("`{v}` is not a version like 2.30.7"),
        ))
    }
}

/// `[prefix/]name` as Kubernetes accepts for extended resources.
fn check_resource_name(field: &str, name: &str) -> Result<(), ProfileInvalid> {
    let (prefix, base) = match name.split_once('/') {
        Some((p, b)) => (Some(p), b),
        None => (None, name),
    };
    let base_ok = !base.is_empty()
        && base.len() <= 63
        && base
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && base.starts_with(|c: char| c.is_ascii_alphanumeric())
        && base.ends_with(|c: char| c.is_ascii_alphanumeric());
    let prefix_ok = prefix.is_none_or(is_dns_subdomain);
    if base_ok && prefix_ok {
        Ok(())
    } else {
        Err(invalid(
            field,
            format!("`{name}` is not a resource name like vendor.com/device"),
        ))
    }
}

pub(crate) fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

pub(crate) fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns_label)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_names() {
        assert!(check_resource_name("f", "aliyun/erdma").is_ok());
        assert!(check_resource_name("f", "rdma/rdma_shared_device_a").is_ok());
        assert!(check_resource_name("f", "vke.volcengine.com/infiniband-rdma").is_ok());
        assert!(check_resource_name("f", "nvidia.com/gpu-h800").is_ok());
        let e = check_resource_name("gpu_resource", "Nvidia.com/gpu").unwrap_err();
        assert_eq!(e.field, "gpu_resource");
        assert!(check_resource_name("f", "a/").is_err());
    }

    #[test]
    fn hca_selects_nics() {
        assert_eq!(hca_nic_count("erdma_0", 2), 1);
        assert_eq!(hca_nic_count("erdma", 2), 2);
        assert_eq!(hca_nic_count("mlx5", 8), 8);
        assert_eq!(hca_nic_count("=mlx5_0,mlx5_1", 8), 2);
        assert_eq!(hca_nic_count("mlx5_0:1", 8), 1);
        assert_eq!(hca_nic_count("^mlx5_2", 8), 8);
    }

    fn minimal(transport: serde_json::Value, ib_hca: Option<&str>) -> serde_json::Value {
        serde_json::json!({
            "name": "t", "fabric": "T", "short_name": "t",
            "rdma": {"kind": "device-plugin", "resources": {"example.com/rdma": 1}},
            "nccl": {"transport": transport, "ib_hca": ib_hca},
            "devices": {"name_pattern": "x_*", "tx_counter": "ports/1/counters/port_xmit_data"},
        })
    }

    #[test]
    fn transport_checks_name_the_field() {
        let ok = Profile::from_json(minimal(serde_json::json!({"kind": "ib-verbs"}), Some("x")))
            .unwrap();
        assert!(ok.check().is_ok() && ok.uses_ib_verbs());
        let e = Profile::from_json(minimal(serde_json::json!({"kind": "ib-verbs"}), None))
            .unwrap()
            .check()
            .unwrap_err();
        assert_eq!(e.field, "nccl.ib_hca");
        let e = Profile::from_json(minimal(serde_json::json!({"kind": "sockets"}), Some("x")))
            .unwrap()
            .check()
            .unwrap_err();
        assert_eq!(e.field, "nccl.ib_hca");
        let plugin = serde_json::json!({
            "kind": "net-plugin", "name": "p", "library": "libnccl-net-p.so",
            "library_dir": "/opt/p/lib", "env": {"P_PROVIDER": "x"},
            "required_env": ["P_PROVIDER", "P_OTHER"], "install": ["true"],
        });
        let e = Profile::from_json(minimal(plugin, None))
            .unwrap()
            .check()
            .unwrap_err();
        assert_eq!(e.field, "nccl.transport.required_env[1]");
        let host = serde_json::json!({
            "kind": "net-plugin", "name": "p", "library": "libnccl-net.so",
            "library_dir": "/usr/local/p/lib", "source": "host",
        });
        let e = Profile::from_json(minimal(host, None))
            .unwrap()
            .check()
            .unwrap_err();
        assert_eq!(e.field, "nccl.transport.library_dir");
        assert!(e.message.contains("host_paths"), "{e}");
    }

    #[test]
    fn instance_types_are_checked() {
        let mut v = minimal(serde_json::json!({"kind": "ib-verbs"}), Some("x"));
        v["instance_types"] = serde_json::json!({
            "big": {"gpus": 8, "rdma_devices": 4, "nic_gbps": 200.0, "gpudirect": true, "pcie_gen": 9}
        });
        let e = Profile::from_json(v.clone()).unwrap().check().unwrap_err();
        assert_eq!(e.field, "instance_types.big.pcie_gen");
        v["instance_types"]["big"]["pcie_gen"] = serde_json::json!(5);
        v["values"] = serde_json::json!({"instance_type": "small"});
        let e = Profile::from_json(v.clone()).unwrap().check().unwrap_err();
        assert_eq!(e.field, "values.instance_type");
        assert!(e.message.contains("big"), "{e}");
        v["values"] = serde_json::json!({"instance_type": "big"});
        let p = Profile::from_json(v).unwrap();
        p.check().unwrap();
        let f = p.expectation_facts(None).unwrap();
        assert_eq!(
            (f.nics_per_node, f.nics_used, f.nic_line_gbps),
            (4, 4, 200.0)
        );
    }

    #[test]
    fn versions() {
        assert!(check_version("v", "2.30.7").is_ok());
        assert!(check_version("v", "2.30.x").is_err());
        assert!(check_version("v", "").is_err());
    }
}
