//! How NCCL reaches the fabric (IB verbs, a net plugin, sockets), its environment, and the NCCL and
//! plugin versions known to work or fail.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

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
