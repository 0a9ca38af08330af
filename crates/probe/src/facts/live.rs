//! Live device capabilities through `erdma-verbs` (libibverbs): what the installed providers see,
//! which sysfs cannot tell — e.g. that an image lacks the eRDMA provider, or that a device has no
//! UD/SRQ. Only meaningful when probing the live root `/`. Built with the `live` feature only: it is
//! the one part of probe that links libibverbs.

use serde::{Deserialize, Serialize};

use super::RdmaDevice;
use crate::verdict::{Check, Verdict};

/// One device as libibverbs sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveDevice {
    /// Device name.
    pub name: String,
    /// Probed capabilities, when the device could be opened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caps: Option<erdma_verbs::Caps>,
    /// Why it could not be opened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The result of asking libibverbs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveVerbs {
    /// Devices listed by `ibv_get_device_list`.
    pub devices: Vec<LiveDevice>,
    /// Why listing failed, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// List and open every device the providers see, collecting caps (errors are kept, not raised:
/// a probe reports them).
pub fn query_live() -> LiveVerbs {
    let list = match erdma_verbs::devices() {
        Ok(l) => l,
        Err(e) => {
            return LiveVerbs {
                devices: Vec::new(),
                error: Some(e.to_string()),
            };
        }
    };
    let devices = list
        .into_iter()
        .map(|d| match erdma_verbs::Context::open(&d.name) {
            Ok(ctx) => LiveDevice {
                name: d.name,
                caps: Some(ctx.caps().clone()),
                error: None,
            },
            Err(e) => LiveDevice {
                name: d.name,
                caps: None,
                error: Some(e.to_string()),
            },
        })
        .collect();
    LiveVerbs {
        devices,
        error: None,
    }
}

/// One line describing caps, e.g. `RC, no UD, no SRQ, no extended verbs, send SGE 6, ...`.
pub fn describe(c: &erdma_verbs::Caps) -> String {
    let yes_no = |b: bool, what: &str| {
        if b {
            what.to_string()
        } else {
            format!("no {what}")
        }
    };
    let mut parts = vec![
        yes_no(c.rc, "RC"),
        yes_no(c.ud, "UD"),
        yes_no(c.srq, "SRQ"),
        yes_no(c.extended_verbs, "extended verbs"),
        format!("send SGE {}", c.max_send_sge),
        format!("recv SGE {}", c.max_recv_sge),
        format!("inline {} B", c.max_inline),
        format!("send WR {}", c.max_send_wr),
    ];
    if let Some(t) = c.max_total_mr_bytes {
        parts.push(format!("total MR {}", crate::units::human_bytes(t)));
    }
    if c.needs_rdma_cm {
        parts.push("connect through rdma_cm".into());
    }
    parts.join(", ")
}

/// The checks of what libibverbs sees beside sysfs's `devices`: listing failed (`warn`), a device sysfs
/// has and no provider lists (`fail`), and each listed device's caps (`info`) or why it did not open
/// (`warn`).
pub(crate) fn judge(lv: &LiveVerbs, devices: &[RdmaDevice], out: &mut Vec<Check>) {
    if let Some(e) = &lv.error {
        out.push(Check::new(
            "verbs-devices",
            "libibverbs",
            Verdict::Warn,
            format!("ibv_get_device_list failed: {e}"),
        ));
    }
    for d in devices {
        if !lv.devices.iter().any(|l| l.name == d.name) {
            out.push(
                Check::new("verbs-devices", d.name.clone(), Verdict::Fail, "in sysfs but not listed by libibverbs: no userspace provider for it in this image")
                    .with_fix("Install the device's provider (rdma-core ibverbs-providers; eRDMA: from the Alibaba Cloud eRDMA APT source) — stock Ray images lack the erdma provider."),
            );
        }
    }
    for l in &lv.devices {
        match (&l.caps, &l.error) {
            (Some(c), _) => out.push(Check::new(
                "verbs-caps",
                l.name.clone(),
                Verdict::Info,
                describe(c),
            )),
            (None, Some(e)) => out.push(
                Check::new(
                    "verbs-caps",
                    l.name.clone(),
                    Verdict::Warn,
                    format!("cannot open: {e}"),
                )
                .with_fix(
                    "Check /dev/infiniband permissions and that the pod requested the device.",
                ),
            ),
            (None, None) => {}
        }
    }
}
