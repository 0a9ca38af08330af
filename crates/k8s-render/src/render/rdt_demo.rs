//! `rdt_nccl_demo.py`: Ray Direct Transport of a GPU tensor between two nodes over NCCL.

use super::template::{fill, py_str};
use super::{Ctx, RenderError};
use crate::bundle::{Bundle, FileKind};

pub(crate) const FILE: &str = "rdt_nccl_demo.py";
const TEMPLATE: &str = include_str!("../../templates/rdt_nccl_demo.py");

pub(crate) fn render(ctx: &Ctx<'_>, bundle: &mut Bundle) -> Result<(), RenderError> {
    let p = ctx.profile;
    let v = ctx.values;
    let text = fill(
        FILE,
        TEMPLATE,
        &[
            ("FABRIC", p.fabric.clone()),
            ("FABRIC_PY", py_str(&p.fabric)),
            ("PROFILE", p.name.clone()),
            ("CLUSTER", v.cluster_name_for(p)),
            ("SIZE_MIB", v.size_mib.to_string()),
            ("ITERATIONS", v.iterations.to_string()),
            ("TX_COUNTER", p.devices.tx_counter.clone()),
            ("DEVICE_GLOB", p.devices.name_pattern.clone()),
            ("TCP_KEY", ctx.tcp_switch().0.to_owned()),
            ("TCP_VALUE", ctx.tcp_switch().1.to_owned()),
        ],
    )?;
    bundle.add_text(FILE, FileKind::Python, text)?;
    Ok(())
}
