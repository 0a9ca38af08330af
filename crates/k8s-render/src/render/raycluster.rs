//! `ray-cluster-<short>.yaml`: a RayCluster with a CPU-only head and RDMA GPU workers.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::pod::{ContainerSpec, spread_by_hostname};
use super::{Ctx, RenderError};
use crate::bundle::Bundle;
use crate::crd::{HeadGroupSpec, RayCluster, RayClusterSpec, WorkerGroupSpec};

pub(crate) fn file_name(ctx: &Ctx<'_>) -> String {
    format!("ray-cluster-{}.yaml", ctx.profile.short_name)
}

pub(crate) fn render(ctx: &Ctx<'_>, bundle: &mut Bundle) -> Result<(), RenderError> {
    bundle.add_manifests(&file_name(ctx), &[ray_cluster(ctx)])?;
    Ok(())
}

fn to_i32(n: u32) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

pub(crate) fn ray_cluster(ctx: &Ctx<'_>) -> RayCluster {
    let v = ctx.values;
    let name = v.cluster_name_for(ctx.profile);
    let group = v.worker_group_for(ctx.profile);
    let head_has_gpus = v.head_gpus > 0;

    // A head without a GPU limit still sees every GPU of its node; unless num-gpus is "0", Ray advertises
    // them and may place GPU actors on the head, which has no RDMA device. num-cpus "0" keeps tasks off it.
    let mut head_params = BTreeMap::new();
    if !head_has_gpus {
        head_params.insert("num-cpus".to_owned(), "0".to_owned());
        head_params.insert("num-gpus".to_owned(), "0".to_owned());
    }
    let head = ctx.container(ContainerSpec {
        name: "ray-head",
        image: ctx.image(),
        command: None,
        args: None,
        gpus: v.head_gpus,
        cpu: Some(&v.head_cpu),
        memory: Some(&v.head_memory),
        rdma: head_has_gpus,
        nccl: true,
        requests: true,
        extra_env: Vec::new(),
    });
    let head_spec = ctx.pod_spec(vec![head], head_has_gpus, true);

    let worker = ctx.container(ContainerSpec {
        name: "ray-worker",
        image: ctx.image(),
        command: None,
        args: None,
        gpus: v.gpus_per_worker,
        cpu: Some(&v.worker_cpu),
        memory: Some(&v.worker_memory),
        rdma: true,
        nccl: true,
        requests: true,
        extra_env: Vec::new(),
    });
    let mut worker_spec = ctx.pod_spec(vec![worker], true, true);
    if ctx.profile.pod.host_network {
        // hostNetwork pods of one group would fight over ports on one node: one worker per node.
        worker_spec.affinity = Some(spread_by_hostname(&[
            ("ray.io/cluster", name.as_str()),
            ("ray.io/group", group.as_str()),
        ]));
    }
    let replicas = to_i32(v.worker_replicas);
    RayCluster::new(
        ctx.meta(&name, &[]),
        RayClusterSpec {
            ray_version: Some(v.ray_version.clone()),
            head_group_spec: HeadGroupSpec {
                ray_start_params: head_params,
                template: template(ctx, head_spec, head_has_gpus),
            },
            worker_group_specs: vec![WorkerGroupSpec {
                group_name: group.clone(),
                replicas,
                min_replicas: replicas,
                max_replicas: replicas,
                ray_start_params: BTreeMap::new(),
                template: template(ctx, worker_spec, true),
            }],
        },
    )
}

fn template(
    ctx: &Ctx<'_>,
    spec: k8s_openapi::api::core::v1::PodSpec,
    rdma: bool,
) -> PodTemplateSpec {
    let labels = ctx.meta("", &[]).labels;
    PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels,
            annotations: if rdma { ctx.pod_annotations() } else { None },
            ..ObjectMeta::default()
        }),
        spec: Some(spec),
    }
}
