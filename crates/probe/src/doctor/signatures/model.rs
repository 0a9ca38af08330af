//! What a log signature is: the line it matches, who writes it, how bad it is, its cause and fix, and
//! the `const` constructors the catalogue is written with.

use serde::Serialize;

use crate::verdict::Verdict;

/// Which component writes the line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// NCCL (`NCCL INFO` / `NCCL WARN`).
    Nccl,
    /// UCX (and NIXL's UCX backend).
    Ucx,
    /// Ray / Ray Direct Transport.
    Ray,
    /// libibverbs and verbs tools (`ibv_devinfo`).
    Ibverbs,
    /// BuildKit / image builds.
    Buildkit,
    /// Container registries.
    Registry,
    /// Kubernetes events and kubelet.
    Kubernetes,
    /// nccl-tests.
    NcclTests,
    /// Shell tools (`ulimit -a`).
    Shell,
}

/// One known log line and what it means.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Signature {
    /// Stable id (`memlock-create-qp-enomem`).
    pub id: &'static str,
    /// What a match means.
    pub severity: Verdict,
    /// Who writes the line.
    pub source: Source,
    /// Regular expression matched against each line.
    pub pattern: &'static str,
    /// Why it happens.
    pub cause: &'static str,
    /// What to do (empty for positive findings).
    pub fix: &'static str,
    /// A second pattern that must match within this many lines (before or after).
    pub context: Option<(&'static str, usize)>,
    /// Reported only when no other (non-fallback) signature matched the same line.
    pub fallback: bool,
}

pub(super) const fn sig(
    id: &'static str,
    severity: Verdict,
    source: Source,
    pattern: &'static str,
    cause: &'static str,
    fix: &'static str,
) -> Signature {
    Signature {
        id,
        severity,
        source,
        pattern,
        cause,
        fix,
        context: None,
        fallback: false,
    }
}

pub(super) const fn fallback(mut s: Signature) -> Signature {
    s.fallback = true;
    s
}

pub(super) const fn with_context(
    mut s: Signature,
    pattern: &'static str,
    window: usize,
) -> Signature {
    s.context = Some((pattern, window));
    s
}
