//! `doctor::` — probe's diagnosis of a log (NCCL, RDMA, container runtime): each known failure with its
//! evidence line, cause and fix.

use rhai::{Dynamic, Module};

use super::super::runtime_error;
use super::{RResult, ser};

/// The `doctor::` module.
pub(super) fn create_module() -> Module {
    let mut m = Module::new();
    regp!(&mut m, "scan",
        "scan(text) -> [#{id, severity, line, evidence, cause, fix}]: probe's known failure \
        signatures (NCCL, UCX, Ray, ibverbs) found in a log.",
        |text: &str| -> RResult<Dynamic> {
        let d = probe::doctor::diagnose(text).map_err(|e| runtime_error(format!("doctor: {e}")))?;
        ser(&d.findings)
    }, text: &str);
    m
}
