//! `rdmakit check`'s live half that is not about one cluster API: the data-path matrix run through any
//! [`crate::exec::Executor`] ([`matrix`]), and the two things it needs to know about the check pods. The
//! judgement is `probe::check`'s; creating the pods and the report is the CLI's (`cli/check.rs`).

pub mod matrix;

use k8s_render::DevicePattern;

/// The devices of the profile that are rails: the name pattern minus `devices.exclude`.
#[derive(Debug, Clone)]
pub struct Rails {
    include: DevicePattern,
    exclude: Vec<DevicePattern>,
}

impl Rails {
    /// The rails of a profile's `devices`.
    pub fn new(include: DevicePattern, exclude: Vec<DevicePattern>) -> Rails {
        Rails { include, exclude }
    }

    /// Whether `device` is a rail.
    pub fn selects(&self, device: &str) -> bool {
        self.include.matches(device) && !self.exclude.iter().any(|e| e.matches(device))
    }
}

/// A check pod once Ready (on a cluster), or whatever plays one (a network namespace in the VM test).
#[derive(Debug, Clone)]
pub struct LivePod {
    /// What an exec names (`ExecSpec::pod`).
    pub name: String,
    /// Its node.
    pub node: String,
    /// The address peers connect to (`status.podIP`; the node's under hostNetwork).
    pub ip: Option<String>,
    /// Containers beside the probed one (admission may inject sidecars) and sidecar-injection annotations.
    pub sidecars: Vec<String>,
}
