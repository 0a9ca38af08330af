//! Userspace RDMA packages for the image and the vendor APT repository they come from.

use serde::{Deserialize, Serialize};

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
