//! RLIMIT_MEMLOCK from `/proc/self/limits` and CAP_IPC_LOCK from `/proc/self/status`.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{ProbeError, Result};
use crate::sysfs::{read_opt, under};

/// Bit of CAP_IPC_LOCK in the capability sets (`linux/capability.h`).
pub const CAP_IPC_LOCK_BIT: u32 = 14;

/// One side (soft or hard) of a resource limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", tag = "kind", content = "bytes")]
pub enum LimitValue {
    /// No limit.
    Unlimited,
    /// A limit in bytes.
    Bytes(u64),
}

impl LimitValue {
    /// Parse `unlimited` or a decimal byte count.
    pub fn parse(s: &str) -> Option<Self> {
        let s = s.trim();
        if s.eq_ignore_ascii_case("unlimited") || s.eq_ignore_ascii_case("infinity") {
            Some(LimitValue::Unlimited)
        } else {
            s.parse().ok().map(LimitValue::Bytes)
        }
    }

    /// Human form: `unlimited` or `64 KiB`.
    pub fn human(self) -> String {
        match self {
            LimitValue::Unlimited => "unlimited".into(),
            LimitValue::Bytes(b) => crate::units::human_bytes(b),
        }
    }
}

/// RLIMIT_MEMLOCK of the probing process (which inherits the container's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Memlock {
    /// Soft limit (what `ulimit -l` shows, in bytes here).
    pub soft: LimitValue,
    /// Hard limit.
    pub hard: LimitValue,
}

impl Memlock {
    /// True when the soft limit is unlimited, which RDMA queue pairs need.
    pub fn is_unlimited(&self) -> bool {
        self.soft == LimitValue::Unlimited
    }
}

/// Parse the text of `/proc/<pid>/limits`.
pub fn parse_limits(text: &str) -> Option<Memlock> {
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("Max locked memory") else {
            continue;
        };
        let mut it = rest.split_whitespace();
        let soft = LimitValue::parse(it.next()?)?;
        let hard = LimitValue::parse(it.next()?)?;
        return Some(Memlock { soft, hard });
    }
    None
}

/// Read `<root>/proc/self/limits`; `Ok(None)` when the file is absent.
pub fn read_memlock(root: &Path) -> Result<Option<Memlock>> {
    let path = under(root, "/proc/self/limits");
    let Some(text) = read_opt(&path)? else {
        return Ok(None);
    };
    parse_limits(&text)
        .map(Some)
        .ok_or_else(|| ProbeError::Invalid {
            path,
            message: "no parsable `Max locked memory <soft> <hard> bytes` line".into(),
        })
}

/// Effective capability set from `/proc/<pid>/status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capabilities {
    /// `CapEff` as a bit mask.
    pub effective: u64,
}

impl Capabilities {
    /// Whether CAP_IPC_LOCK is effective.
    pub fn ipc_lock(&self) -> bool {
        self.effective & (1u64 << CAP_IPC_LOCK_BIT) != 0
    }
}

/// Parse the `CapEff:` line of `/proc/<pid>/status`.
pub fn parse_status_caps(text: &str) -> Option<Capabilities> {
    text.lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .map(|effective| Capabilities { effective })
}

/// Read `<root>/proc/self/status`; `Ok(None)` when absent.
pub fn read_capabilities(root: &Path) -> Result<Option<Capabilities>> {
    let path = under(root, "/proc/self/status");
    let Some(text) = read_opt(&path)? else {
        return Ok(None);
    };
    parse_status_caps(&text)
        .map(Some)
        .ok_or_else(|| ProbeError::Invalid {
            path,
            message: "no parsable `CapEff:\\t<hex>` line".into(),
        })
}

/// The fix for a limited memlock, as the eRDMA runbook applies it on every node.
pub const MEMLOCK_FIX: &str = "Pods inherit RLIMIT_MEMLOCK from containerd (Kubernetes has no pod-level \
setting); systemd's default is 64 KiB, which makes every ibv_create_qp fail with ENOMEM. On each RDMA node: \
`mkdir -p /etc/systemd/system/containerd.service.d && printf '[Service]\\nLimitMEMLOCK=infinity\\n' > \
/etc/systemd/system/containerd.service.d/10-memlock.conf && systemctl daemon-reload && systemctl restart \
containerd` (check with `systemctl show containerd -p LimitMEMLOCK`; running containers keep the old limit, \
recreate the pods), then `ulimit -l` in the pod must print `unlimited`.";
