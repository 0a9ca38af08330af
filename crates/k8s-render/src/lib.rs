//! k8s-render — typed Kubernetes manifests for RDMA workloads. See README.md.
//!
//! Module ownership while the crate is being built: `manifest`, `validate` and `lint` read and check
//! manifests (any YAML a user hands us); everything else renders them from a vendor `Profile`.

pub mod lint;
pub mod manifest;
pub mod validate;
