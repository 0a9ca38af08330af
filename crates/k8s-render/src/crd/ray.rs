//! `ray.io/v1` RayCluster (KubeRay).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

/// A KubeRay RayCluster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RayCluster {
    /// Always `ray.io/v1`.
    pub api_version: String,
    /// Always `RayCluster`.
    pub kind: String,
    /// Object metadata.
    pub metadata: ObjectMeta,
    /// Desired state.
    pub spec: RayClusterSpec,
}

impl RayCluster {
    /// API version written by [`RayCluster::new`].
    pub const API_VERSION: &'static str = "ray.io/v1";
    /// Kind written by [`RayCluster::new`].
    pub const KIND: &'static str = "RayCluster";

    /// A RayCluster with the right apiVersion and kind.
    pub fn new(metadata: ObjectMeta, spec: RayClusterSpec) -> Self {
        RayCluster {
            api_version: Self::API_VERSION.to_owned(),
            kind: Self::KIND.to_owned(),
            metadata,
            spec,
        }
    }
}

/// `spec` of a RayCluster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RayClusterSpec {
    /// Ray version of the image (`2.57.0`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ray_version: Option<String>,
    /// The head group.
    pub head_group_spec: HeadGroupSpec,
    /// Worker groups.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub worker_group_specs: Vec<WorkerGroupSpec>,
}

/// `spec.headGroupSpec`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HeadGroupSpec {
    /// `ray start` parameters; values are strings in the schema (`num-gpus: "0"`).
    pub ray_start_params: BTreeMap<String, String>,
    /// Head pod template.
    pub template: PodTemplateSpec,
}

/// One entry of `spec.workerGroupSpecs`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkerGroupSpec {
    /// Group name; pods are named `<cluster>-<group>-worker-<suffix>`.
    pub group_name: String,
    /// Desired pods.
    pub replicas: i32,
    /// Lower bound (required by the schema; rendered equal to `replicas`).
    pub min_replicas: i32,
    /// Upper bound (required by the schema; rendered equal to `replicas`).
    pub max_replicas: i32,
    /// `ray start` parameters (strings).
    pub ray_start_params: BTreeMap<String, String>,
    /// Worker pod template.
    pub template: PodTemplateSpec,
}
