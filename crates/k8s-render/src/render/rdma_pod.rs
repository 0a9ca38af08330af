//! `rdma-test-pod.yaml`: a plain pod holding one RDMA device, to check the device plugin or claim.

use k8s_openapi::api::core::v1::Pod;

use super::pod::{ContainerSpec, strings};
use super::{Ctx, RenderError};
use crate::bundle::Bundle;

pub(crate) const FILE: &str = "rdma-test-pod.yaml";

pub(crate) fn render(ctx: &Ctx<'_>, bundle: &mut Bundle) -> Result<(), RenderError> {
    let v = ctx.values;
    let container = ctx.container(ContainerSpec {
        name: &v.test_pod_name,
        image: v.test_image.clone(),
        command: Some(strings(&["/bin/sh", "-c", v.test_command.as_str()])),
        args: None,
        gpus: v.test_pod_gpus,
        cpu: None,
        memory: None,
        rdma: true,
        nccl: false,
        requests: false,
        extra_env: Vec::new(),
    });
    let pod = Pod {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            annotations: ctx.pod_annotations(),
            ..ctx.meta(&v.test_pod_name, &[])
        },
        spec: Some(ctx.pod_spec(vec![container], true, false)),
        status: None,
    };
    bundle.add_manifests(FILE, &[pod])?;
    Ok(())
}
