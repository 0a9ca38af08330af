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
    /// `NCCL_IB_HCA`: a device name (`erdma_0`) or prefix (`erdma`, `mlx5`).
    pub ib_hca: String,
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
    /// Glob over `/sys/class/infiniband/` names (`erdma_*`, `mlx5_*`).
    pub name_pattern: String,
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
        if self.nccl.ib_hca.trim().is_empty() {
            return Err(invalid(
                "nccl.ib_hca",
                "must name the device or prefix (e.g. erdma_0)",
            ));
        }
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
    fn versions() {
        assert!(check_version("v", "2.30.7").is_ok());
        assert!(check_version("v", "2.30.x").is_err());
        assert!(check_version("v", "").is_err());
    }
}
