//! `<short>-nccl-check-pods.yaml` + `nccl_allreduce_check.py`: NCCL between two nodes without Ray.

use k8s_openapi::api::core::v1::Pod;

use super::pod::{ContainerSpec, spread_by_hostname, strings};
use super::template::fill;
use super::{Ctx, RenderError};
use crate::DevicePattern;
use crate::bundle::{Bundle, FileKind};
use crate::quote::python::{doc_text, str_lit as py_str};

pub(crate) const PROGRAM: &str = "nccl_allreduce_check.py";
const TEMPLATE: &str = include_str!("../../templates/nccl_allreduce_check.py");

pub(crate) fn pods_file(ctx: &Ctx<'_>) -> String {
    format!("{}-nccl-check-pods.yaml", ctx.profile.short_name)
}

pub(crate) fn pod_names(ctx: &Ctx<'_>) -> [String; 2] {
    let s = &ctx.profile.short_name;
    [format!("{s}-nccl-check-0"), format!("{s}-nccl-check-1")]
}

pub(crate) fn render(ctx: &Ctx<'_>, bundle: &mut Bundle) -> Result<(), RenderError> {
    let app = format!("{}-nccl-check", ctx.profile.short_name);
    let names = pod_names(ctx);
    let pods: Vec<Pod> = names
        .iter()
        .map(|name| {
            let container = ctx.container(ContainerSpec {
                name: "nccl-check",
                image: ctx.image(),
                command: Some(strings(&["sleep", "infinity"])),
                args: None,
                gpus: ctx.values.gpus_per_worker,
                cpu: Some(&ctx.values.worker_cpu),
                memory: Some(&ctx.values.worker_memory),
                rdma: true,
                nccl: true,
                requests: true,
                extra_env: Vec::new(),
            });
            let mut spec = ctx.pod_spec(vec![container], true, true);
            // The check is only meaningful across nodes.
            spec.affinity = Some(spread_by_hostname(&[("app", app.as_str())]));
            Pod {
                metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                    annotations: ctx.pod_annotations(),
                    ..ctx.meta(name, &[("app", app.as_str())])
                },
                spec: Some(spec),
                status: None,
            }
        })
        .collect();
    let file = pods_file(ctx);
    bundle.add_manifests(&file, &pods)?;

    let p = ctx.profile;
    let v = ctx.values;
    let debug_file = if v.nccl_debug_file.is_empty() {
        "stderr".to_owned()
    } else {
        v.nccl_debug_file.clone()
    };
    let text = fill(
        PROGRAM,
        TEMPLATE,
        &[
            ("FABRIC", doc_text(&p.fabric)),
            ("FABRIC_PY", py_str(&p.fabric)),
            ("PROFILE", doc_text(&p.name)),
            ("PODS_FILE", doc_text(&file)),
            ("POD0", doc_text(&names[0])),
            ("POD1", doc_text(&names[1])),
            ("DEVICE_GLOB", doc_text(p.devices.name_pattern.as_str())),
            ("DEVICE_GLOB_PY", py_str(p.devices.name_pattern.as_str())),
            (
                "DEVICE_EXCLUDE",
                doc_text(&exclude_text(&p.devices.exclude)),
            ),
            ("DEVICE_EXCLUDE_PY", py_list(&p.devices.exclude)),
            ("TX_COUNTER", doc_text(&p.devices.tx_counter)),
            ("TX_COUNTER_PY", py_str(&p.devices.tx_counter)),
            ("MULTIPLIER", p.devices.counter_multiplier.to_string()),
            ("SIZE_MIB", v.check_size_mib.to_string()),
            ("NCCL_DEBUG_FILE", doc_text(&debug_file)),
            ("TCP_KEY", ctx.tcp_switch().0.to_owned()),
            ("TCP_VALUE", ctx.tcp_switch().1.to_owned()),
            ("LOG_MARKER", doc_text(&ctx.log_marker())),
        ],
    )?;
    bundle.add_text(PROGRAM, FileKind::Python, text)?;
    Ok(())
}

/// The exclude globs as the docstring shows them (`none` for an empty list).
fn exclude_text(exclude: &[DevicePattern]) -> String {
    if exclude.is_empty() {
        return "none".to_owned();
    }
    exclude
        .iter()
        .map(DevicePattern::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

/// A Python list literal of the exclude globs, each a quoted string.
fn py_list(exclude: &[DevicePattern]) -> String {
    let items: Vec<String> = exclude.iter().map(|g| py_str(g.as_str())).collect();
    format!("[{}]", items.join(", "))
}
