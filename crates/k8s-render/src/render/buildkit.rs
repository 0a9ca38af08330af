//! `buildkitd.yaml`: an in-cluster BuildKit daemon with a large cache volume and a client pod.
//!
//! Built in the cluster because vendor apt mirrors can be VPC-only and pushing gigabytes of Ray layers
//! from a node is much faster than from a laptop. The cache volume must be large: unpacking the Ray base
//! image needs more than 100 GiB, and without the volume the pod is evicted for ephemeral storage.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStrategy};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, ExecAction, KeyToPath, PersistentVolumeClaim,
    PersistentVolumeClaimSpec, PersistentVolumeClaimVolumeSource, Pod, PodSpec, PodTemplateSpec,
    Probe, SecretVolumeSource, SecurityContext, Service, ServicePort, ServiceSpec, Volume,
    VolumeMount, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::Serialize;

use super::pod::{env_var, strings};
use super::{Ctx, RenderError};
use crate::bundle::Bundle;

pub(crate) const FILE: &str = "buildkitd.yaml";
const PORT: i32 = 1234;
const CACHE_PVC: &str = "buildkit-cache";

/// Documents of the file, in apply order.
#[derive(Serialize)]
#[serde(untagged)]
enum Doc {
    Pvc(Box<PersistentVolumeClaim>),
    Deployment(Box<Deployment>),
    Service(Box<Service>),
    Pod(Box<Pod>),
}

pub(crate) fn render(ctx: &Ctx<'_>, bundle: &mut Bundle) -> Result<(), RenderError> {
    let v = ctx.values;
    let storage_class = v
        .storage_class
        .clone()
        .or_else(|| ctx.profile.storage_class.clone());
    let pvc = PersistentVolumeClaim {
        metadata: ctx.meta(CACHE_PVC, &[("app", "buildkitd")]),
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(strings(&["ReadWriteOnce"])),
            storage_class_name: storage_class,
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "storage".to_owned(),
                    Quantity(v.buildkit_cache_size.clone()),
                )])),
                limits: None,
            }),
            ..PersistentVolumeClaimSpec::default()
        }),
        status: None,
    };

    let labels = BTreeMap::from([("app".to_owned(), "buildkitd".to_owned())]);
    let daemon = Container {
        name: "buildkitd".to_owned(),
        image: Some(v.buildkit_image.clone()),
        args: Some(vec![
            "--addr".to_owned(),
            "unix:///run/buildkit/buildkitd.sock".to_owned(),
            "--addr".to_owned(),
            format!("tcp://0.0.0.0:{PORT}"),
        ]),
        ports: Some(vec![ContainerPort {
            name: Some("buildkitd".to_owned()),
            container_port: PORT,
            ..ContainerPort::default()
        }]),
        readiness_probe: Some(probe()),
        liveness_probe: Some(Probe {
            initial_delay_seconds: Some(30),
            ..probe()
        }),
        // buildkitd runs rootful: it needs to mount overlay filesystems for the build steps.
        security_context: Some(SecurityContext {
            privileged: Some(true),
            ..SecurityContext::default()
        }),
        volume_mounts: Some(vec![VolumeMount {
            name: "cache".to_owned(),
            mount_path: "/var/lib/buildkit".to_owned(),
            ..VolumeMount::default()
        }]),
        ..Container::default()
    };
    let deployment = Deployment {
        metadata: ctx.meta("buildkitd", &[("app", "buildkitd")]),
        spec: Some(DeploymentSpec {
            replicas: Some(1),
            selector: LabelSelector {
                match_labels: Some(labels.clone()),
                match_expressions: None,
            },
            // The cache volume is ReadWriteOnce: the old pod must go before the new one starts.
            strategy: Some(DeploymentStrategy {
                type_: Some("Recreate".to_owned()),
                rolling_update: None,
            }),
            template: PodTemplateSpec {
                metadata: Some(ctx.meta("buildkitd", &[("app", "buildkitd")])).map(|mut m| {
                    m.name = None;
                    m.namespace = None;
                    m
                }),
                spec: Some(PodSpec {
                    containers: vec![daemon],
                    volumes: Some(vec![Volume {
                        name: "cache".to_owned(),
                        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                            claim_name: CACHE_PVC.to_owned(),
                            read_only: None,
                        }),
                        ..Volume::default()
                    }]),
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        }),
        status: None,
    };
    let service = Service {
        metadata: ctx.meta("buildkitd", &[("app", "buildkitd")]),
        spec: Some(ServiceSpec {
            selector: Some(labels),
            ports: Some(vec![ServicePort {
                name: Some("buildkitd".to_owned()),
                port: PORT,
                target_port: Some(IntOrString::Int(PORT)),
                protocol: Some("TCP".to_owned()),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        status: None,
    };
    // The client holds buildctl and the merged registry credentials (pull from the base registry, push to
    // ours). The Secret is created by the user from docker configs and is never rendered here.
    let client = Pod {
        metadata: ctx.meta("buildkit-client", &[("app", "buildkit-client")]),
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "buildkit-client".to_owned(),
                image: Some(v.buildkit_image.clone()),
                command: Some(strings(&["sleep", "infinity"])),
                env: Some(vec![
                    env_var("BUILDKIT_HOST", &format!("tcp://buildkitd:{PORT}")),
                    env_var("DOCKER_CONFIG", "/root/.docker"),
                ]),
                volume_mounts: Some(vec![VolumeMount {
                    name: "registry-creds".to_owned(),
                    mount_path: "/root/.docker".to_owned(),
                    read_only: Some(true),
                    ..VolumeMount::default()
                }]),
                ..Container::default()
            }],
            volumes: Some(vec![Volume {
                name: "registry-creds".to_owned(),
                secret: Some(SecretVolumeSource {
                    secret_name: Some(v.push_secret.clone()),
                    items: Some(vec![KeyToPath {
                        key: "config.json".to_owned(),
                        path: "config.json".to_owned(),
                        mode: None,
                    }]),
                    ..SecretVolumeSource::default()
                }),
                ..Volume::default()
            }]),
            ..PodSpec::default()
        }),
        status: None,
    };
    bundle.add_manifests(
        FILE,
        &[
            Doc::Pvc(Box::new(pvc)),
            Doc::Deployment(Box::new(deployment)),
            Doc::Service(Box::new(service)),
            Doc::Pod(Box::new(client)),
        ],
    )?;
    Ok(())
}

fn probe() -> Probe {
    Probe {
        exec: Some(ExecAction {
            command: Some(strings(&["buildctl", "debug", "workers"])),
        }),
        initial_delay_seconds: Some(5),
        period_seconds: Some(10),
        ..Probe::default()
    }
}
