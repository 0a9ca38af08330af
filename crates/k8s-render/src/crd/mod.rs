//! Hand-written types for the custom resources we render, covering the fields we set.
//!
//! They follow the vendored CRD schemas (`schemas/` in this crate, the CRDs the operator releases ship: KubeRay
//! v1.5.1 `ray.io/v1`, mpi-operator v0.7.0 `kubeflow.org/v2beta1`). Pod templates reuse k8s-openapi's
//! `PodTemplateSpec`. Optional fields are skipped when unset so output stays minimal and byte-stable.

pub mod mpi;
pub mod ray;

pub use mpi::{MpiJob, MpiJobSpec, MpiReplicaSpec, RunPolicy};
pub use ray::{HeadGroupSpec, RayCluster, RayClusterSpec, WorkerGroupSpec};
