//! GPU presence (`/proc/driver/nvidia`, `/dev/nvidia*`) and GPUDirect RDMA possibility.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::sysfs::{list_dir, read_opt, under};

/// One GPU from `/proc/driver/nvidia/gpus/<bus>/information`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gpu {
    /// PCI bus id (the directory name, e.g. `0000:3b:00.0`).
    pub bus_id: String,
    /// `Model:` line, e.g. `NVIDIA H200`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// GPUs visible to this process.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuFacts {
    /// GPUs the driver reports.
    pub gpus: Vec<Gpu>,
    /// `/dev/nvidia0`, `/dev/nvidia1`, ... (the ones a container was given).
    pub dev_nodes: Vec<String>,
    /// First line of `/proc/driver/nvidia/version`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver: Option<String>,
    /// Whether the driver is the open kernel module (needed for dma-buf GDR).
    pub open_kernel_module: bool,
}

/// Whether GPUDirect RDMA is possible on this host.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GdrFacts {
    /// `nvidia_peermem` loaded (in `/proc/modules` or `/sys/module`).
    pub nvidia_peermem: bool,
    /// dma-buf path possible (open kernel module + kernel ≥ 5.12 assumed on GPU hosts).
    pub dmabuf: bool,
}

/// Read GPU facts under `root`.
pub fn read_gpus(root: &Path) -> Result<GpuFacts> {
    let base = under(root, "/proc/driver/nvidia/gpus");
    let mut gpus = Vec::new();
    for bus in list_dir(&base)? {
        let info = read_opt(&base.join(&bus).join("information"))?.unwrap_or_default();
        let model = info
            .lines()
            .find_map(|l| l.strip_prefix("Model:"))
            .map(|m| m.trim().to_string());
        gpus.push(Gpu { bus_id: bus, model });
    }
    let dev_nodes = list_dir(&under(root, "/dev"))?
        .into_iter()
        .filter(|n| {
            n.strip_prefix("nvidia")
                .is_some_and(|r| !r.is_empty() && r.chars().all(|c| c.is_ascii_digit()))
        })
        .map(|n| format!("/dev/{n}"))
        .collect();
    let version = read_opt(&under(root, "/proc/driver/nvidia/version"))?;
    Ok(GpuFacts {
        gpus,
        dev_nodes,
        driver: version
            .as_deref()
            .and_then(|v| v.lines().next())
            .map(|l| l.trim().to_string()),
        open_kernel_module: version
            .as_deref()
            .is_some_and(|v| v.contains("Open Kernel Module")),
    })
}

/// Read GDR facts under `root`.
pub fn read_gdr(root: &Path, gpus: &GpuFacts) -> Result<GdrFacts> {
    let in_modules = read_opt(&under(root, "/proc/modules"))?
        .unwrap_or_default()
        .lines()
        .any(|l| l.split_whitespace().next() == Some("nvidia_peermem"));
    let in_sys = under(root, "/sys/module/nvidia_peermem").is_dir();
    Ok(GdrFacts {
        nvidia_peermem: in_modules || in_sys,
        dmabuf: gpus.open_kernel_module,
    })
}
