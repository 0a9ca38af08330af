//! `kubeflow.org/v2beta1` MPIJob (mpi-operator).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

/// An mpi-operator MPIJob.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MpiJob {
    /// Always `kubeflow.org/v2beta1`.
    pub api_version: String,
    /// Always `MPIJob`.
    pub kind: String,
    /// Object metadata.
    pub metadata: ObjectMeta,
    /// Desired state.
    pub spec: MpiJobSpec,
}

impl MpiJob {
    /// API version written by [`MpiJob::new`].
    pub const API_VERSION: &'static str = "kubeflow.org/v2beta1";
    /// Kind written by [`MpiJob::new`].
    pub const KIND: &'static str = "MPIJob";

    /// An MPIJob with the right apiVersion and kind.
    pub fn new(metadata: ObjectMeta, spec: MpiJobSpec) -> Self {
        MpiJob {
            api_version: Self::API_VERSION.to_owned(),
            kind: Self::KIND.to_owned(),
            metadata,
            spec,
        }
    }
}

/// `spec` of an MPIJob.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MpiJobSpec {
    /// MPI slots (ranks) per worker pod.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slots_per_worker: Option<i32>,
    /// How the operator runs the job (`backoffLimit`: how often a failed launcher is retried).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_policy: Option<RunPolicy>,
    /// `Launcher` and `Worker` replica specs (a BTreeMap keeps that order).
    pub mpi_replica_specs: BTreeMap<String, MpiReplicaSpec>,
}

/// `spec.runPolicy` of an MPIJob.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunPolicy {
    /// Retries of the launcher's Job before the MPIJob is `Failed` (the Job's own default is 6).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backoff_limit: Option<i32>,
}

/// A replica spec (`Launcher` or `Worker`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MpiReplicaSpec {
    /// Pods of this role.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// `Never`, `OnFailure`, `Always` or `ExitCode`; the operator sets the pods' restartPolicy from it
    /// (the launcher's default is `OnFailure`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restart_policy: Option<String>,
    /// Pod template.
    pub template: PodTemplateSpec,
}
