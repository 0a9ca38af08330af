//! `rdt_nccl_demo.py` / `rdt_rdmakit_demo.py`: Ray Direct Transport of a GPU tensor between two nodes over
//! NCCL (seed 000) or over gpu-stage (`rdt_transport=rdmakit`), from one template.

use super::template::fill;
use super::{Ctx, RenderError};
use crate::bundle::{Bundle, FileKind};
use crate::quote::python::{doc_text, str_lit as py_str};

pub(crate) const FILE: &str = "rdt_nccl_demo.py";
/// The demo's name with `rdt_transport=rdmakit`.
pub(crate) const RDMAKIT_FILE: &str = "rdt_rdmakit_demo.py";
const TEMPLATE: &str = include_str!("../../templates/rdt_nccl_demo.py");

pub(crate) fn render(ctx: &Ctx<'_>, bundle: &mut Bundle) -> Result<(), RenderError> {
    let p = ctx.profile;
    let v = ctx.values;
    // rdmakit's A/B: gpu-stage over TCP instead of RDMA (NCCL is not in the path).
    let rdmakit = v.rdt_transport == "rdmakit";
    let (file, name, tcp) = if rdmakit {
        (
            RDMAKIT_FILE,
            "gpu-stage (rdmakit_rdt)",
            ("RDMAKIT_TRANSPORT", "tcp"),
        )
    } else {
        (FILE, "NCCL", ctx.tcp_switch())
    };
    let text = fill(
        file,
        TEMPLATE,
        &[
            ("FILE", doc_text(file)),
            ("TRANSPORT", doc_text(&v.rdt_transport)),
            ("TRANSPORT_PY", py_str(&v.rdt_transport)),
            ("TRANSPORT_NAME", name.to_owned()),
            // rdmakit_rdt.register()'s default name.
            (
                "TENSOR_TRANSPORT_PY",
                py_str(if rdmakit { "RDMAKIT" } else { "nccl" }),
            ),
            ("TCP_KEY_PY", py_str(tcp.0)),
            ("TCP_VALUE_PY", py_str(tcp.1)),
            ("FABRIC", doc_text(&p.fabric)),
            ("FABRIC_PY", py_str(&p.fabric)),
            ("PROFILE", doc_text(&p.name)),
            ("CLUSTER", doc_text(&v.cluster_name_for(p))),
            ("SIZE_MIB", v.size_mib.to_string()),
            ("ITERATIONS", v.iterations.to_string()),
            ("TX_COUNTER", doc_text(&p.devices.tx_counter)),
            ("DEVICE_GLOB", doc_text(p.devices.name_pattern.as_str())),
            ("TCP_KEY", tcp.0.to_owned()),
            ("TCP_VALUE", tcp.1.to_owned()),
        ],
    )?;
    bundle.add_text(file, FileKind::Python, text)?;
    Ok(())
}
