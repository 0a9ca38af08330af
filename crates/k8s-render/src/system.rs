//! The systems a bundle can contain.

use std::fmt;
use std::str::FromStr;

use crate::profile::{Profile, RdmaAttachment};

/// One renderable system. Names (for the CLI) are kebab-case: see [`System::name`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum System {
    /// `Dockerfile`: base image + vendor userspace + NCCL pin (+ optional rdmakit stage).
    Image,
    /// `buildkitd.yaml`: buildkitd Deployment + Service + cache PVC + buildkit-client Pod.
    Buildkit,
    /// `ray-cluster-<short>.yaml`: CPU-only head + RDMA GPU workers.
    RayCluster,
    /// `rdt_nccl_demo.py` (or `rdt_rdmakit_demo.py` with `rdt_transport=rdmakit`): the Ray Direct Transport demo.
    RdtDemo,
    /// `<short>-nccl-check-pods.yaml` + `nccl_allreduce_check.py`: NCCL without Ray.
    NcclCheck,
    /// `device-class.yaml` + `resource-claim-template.yaml` (DRA profiles only).
    Dra,
    /// `mpi-job.yaml`: MPIJob running nccl-tests `all_reduce_perf`.
    MpiJob,
    /// `rdma-test-pod.yaml`: a plain pod holding one RDMA device.
    RdmaTestPod,
}

impl System {
    /// Every system, in bundle order.
    pub fn all() -> &'static [System] {
        &[
            System::Image,
            System::Buildkit,
            System::Dra,
            System::RayCluster,
            System::RdtDemo,
            System::NcclCheck,
            System::MpiJob,
            System::RdmaTestPod,
        ]
    }

    /// CLI name.
    pub fn name(self) -> &'static str {
        match self {
            System::Image => "image",
            System::Buildkit => "buildkit",
            System::RayCluster => "raycluster",
            System::RdtDemo => "rdt-demo",
            System::NcclCheck => "nccl-check",
            System::Dra => "dra",
            System::MpiJob => "mpijob",
            System::RdmaTestPod => "rdma-test-pod",
        }
    }

    /// One line for help output.
    pub fn description(self) -> &'static str {
        match self {
            System::Image => "Dockerfile: base image, vendor RDMA userspace, NCCL pin",
            System::Buildkit => {
                "in-cluster BuildKit: buildkitd Deployment/Service, cache PVC, client Pod"
            }
            System::RayCluster => {
                "RayCluster: CPU-only head, GPU workers with RDMA and NCCL settings"
            }
            System::RdtDemo => {
                "rdt_nccl_demo.py: Ray Direct Transport of GPU tensors over NCCL (rdt_rdmakit_demo.py over gpu-stage with rdt_transport=rdmakit)"
            }
            System::NcclCheck => {
                "two NCCL check pods and nccl_allreduce_check.py (NCCL without Ray)"
            }
            System::Dra => "DRA DeviceClass and ResourceClaimTemplate (DRA profiles)",
            System::MpiJob => "MPIJob running nccl-tests all_reduce_perf",
            System::RdmaTestPod => "a plain pod holding one RDMA device",
        }
    }

    /// Whether the system makes sense for `profile` (`Dra` needs a DRA profile).
    pub fn applies_to(self, profile: &Profile) -> bool {
        match self {
            System::Dra => matches!(profile.rdma, RdmaAttachment::Dra(_)),
            _ => true,
        }
    }
}

impl fmt::Display for System {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An unknown system name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown system `{name}`; known systems: {known}")]
pub struct UnknownSystem {
    /// The name given.
    pub name: String,
    /// Comma-separated known names.
    pub known: String,
}

impl FromStr for System {
    type Err = UnknownSystem;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let wanted = s.trim().to_ascii_lowercase();
        System::all()
            .iter()
            .copied()
            .find(|sys| {
                sys.name() == wanted
                    || sys.name().replace('-', "") == wanted.replace(['-', '_'], "")
            })
            .ok_or_else(|| UnknownSystem {
                name: s.to_owned(),
                known: System::all()
                    .iter()
                    .map(|s| s.name())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for s in System::all() {
            assert_eq!(s.name().parse::<System>().unwrap(), *s);
        }
        assert_eq!("RayCluster".parse::<System>().unwrap(), System::RayCluster);
        assert_eq!("rdt_demo".parse::<System>().unwrap(), System::RdtDemo);
        let e = "ray".parse::<System>().unwrap_err();
        assert!(e.to_string().contains("raycluster"), "{e}");
    }
}
