//! NCCL's topology file: `NCCL_TOPO_FILE` tells NCCL where GPUs and NICs sit on virtualised
//! hosts whose PCIe tree it cannot read (Azure ND VMs ship `/opt/microsoft/ndv5-topo.xml` and
//! point `/etc/nccl.conf` at it). A pod that sets the variable without the file loses that.
//!
//! Strings: NCCL `src/graph/topo.cc` (`NCCL_TOPO_FILE set by environment to %s`) and
//! `src/graph/xml.cc` (`Could not open XML topology file %s : %s`, a WARN up to 2.2x, INFO in
//! 2.28). Without the variable NCCL tries `/var/run/nvidia-topologyd/virtualTopology.xml`
//! silently (VKE's topology mount), so that case leaves no line.

use super::*;

pub(super) const TOPO_FILE_ENV: Signature = sig(
    "nccl-topo-file-env",
    Info,
    Nccl,
    r"NCCL_TOPO_FILE set by environment to (\S+)",
    "NCCL_TOPO_FILE={1}",
    "",
);

pub(super) const TOPO_FILE_MISSING: Signature = sig(
    "nccl-topo-file-missing",
    Warn,
    Nccl,
    r"Could not open XML topology file (\S+) : (.+?)\s*$",
    "NCCL_TOPO_FILE names {1}, which the container cannot open ({2}): NCCL detects the topology itself, which on \
virtualised GPU hosts (Azure ND, VKE) pairs GPUs with the wrong NICs and costs bandwidth",
    "Mount the host's topology file into the pod at that path (Azure HPC images: /opt/microsoft/ndv5-topo.xml for \
ND H100 v5, through a hostPath or a ConfigMap on AKS), or unset NCCL_TOPO_FILE where the host has none. On VKE \
mount /var/run/nvidia-topologyd, where NCCL looks by default.",
);
