//! Pod facts for the preflight: what one `exec` of [`POD_PROBE_SCRIPT`] prints inside a worker
//! pod (memlock, CAP_IPC_LOCK, `/dev/infiniband`, the RDMA devices, NCCL), parsed into
//! [`PodFacts`], and the per-pod checks.
//!
//! The script needs only `sh`, `cat`, `grep` and `ls` (every base image has them) and, for the
//! NCCL line, `python3`; what a container lacks comes back as an unreadable section, never as a
//! guess. The CLI runs `sh -c POD_PROBE_SCRIPT` once per pod (one round trip) and passes the
//! stdout to [`PodFacts::from_pod_probe`] with what the pod spec requests.

use serde::{Deserialize, Serialize};

use super::PodFacts;
use crate::facts::nccl::{KNOWN_BAD_NCCL, NcclVersion};
use crate::facts::rdma::DeviceKind;
use crate::facts::{LimitValue, limits};
use crate::verdict::{Check, Verdict};

/// The script the CLI runs in each pod (`sh -c`): one section per fact, each headed by a
/// `### <name>` line; stderr is folded in so a missing file or tool says why.
pub const POD_PROBE_SCRIPT: &str = "\
echo '### limits'; cat /proc/self/limits 2>&1; \
echo '### ulimit-l'; ulimit -l 2>&1; \
echo '### status'; grep -E '^Cap(Eff|Prm):' /proc/self/status 2>&1; \
echo '### dev-infiniband'; ls -1 /dev/infiniband 2>&1; \
echo '### sys-infiniband'; ls -1 /sys/class/infiniband 2>&1; \
echo '### nccl'; python3 -c 'import importlib.metadata as m
for d in m.distributions():
    n = d.metadata[\"Name\"] or \"\"
    if n.startswith(\"nvidia-nccl\"): print(n, d.version)' 2>&1; \
echo '### end'";

/// The argv of the exec: `["sh", "-c", POD_PROBE_SCRIPT]`.
pub const POD_PROBE_COMMAND: [&str; 3] = ["sh", "-c", POD_PROBE_SCRIPT];

/// The sections of one run of [`POD_PROBE_SCRIPT`], each the text under its `### name` line.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodProbeOutput {
    /// `cat /proc/self/limits`.
    pub limits: Option<String>,
    /// `ulimit -l` (KiB or `unlimited`).
    pub ulimit_l: Option<String>,
    /// `CapEff:` / `CapPrm:` of `/proc/self/status`.
    pub status: Option<String>,
    /// `ls -1 /dev/infiniband`.
    pub dev_infiniband: Option<String>,
    /// `ls -1 /sys/class/infiniband`.
    pub sys_infiniband: Option<String>,
    /// `nvidia-nccl-cu12 2.27.5` lines from the Python packages.
    pub nccl: Option<String>,
    /// Whether the `### end` marker arrived (false: the script was cut short).
    pub complete: bool,
}

/// Split the script's stdout into its sections; text before the first marker is ignored (a
/// login banner), unknown sections too.
pub fn parse_pod_probe(stdout: &str) -> PodProbeOutput {
    let mut out = PodProbeOutput::default();
    let mut current: Option<&str> = None;
    let mut body = String::new();
    let flush = |name: Option<&str>, body: &mut String, out: &mut PodProbeOutput| {
        let text = std::mem::take(body);
        let slot = match name {
            Some("limits") => &mut out.limits,
            Some("ulimit-l") => &mut out.ulimit_l,
            Some("status") => &mut out.status,
            Some("dev-infiniband") => &mut out.dev_infiniband,
            Some("sys-infiniband") => &mut out.sys_infiniband,
            Some("nccl") => &mut out.nccl,
            _ => return,
        };
        *slot = Some(text);
    };
    for line in stdout.lines() {
        let line = line.trim_end_matches('\r');
        if let Some(name) = line.strip_prefix("### ") {
            flush(current, &mut body, &mut out);
            let name = name.trim();
            if name == "end" {
                out.complete = true;
                current = None;
            } else {
                current = Some(name);
            }
            continue;
        }
        if current.is_some() {
            body.push_str(line);
            body.push('\n');
        }
    }
    flush(current, &mut body, &mut out);
    out
}

/// A line an `ls`, `cat` or `grep` printed instead of data (`No such file`, `not found`, ...).
fn error_line(text: &str) -> Option<&str> {
    text.lines().map(str::trim).find(|l| {
        l.contains("No such file or directory")
            || l.contains("not found")
            || l.contains("Permission denied")
            || l.contains("cannot access")
            || l.contains("Traceback")
    })
}

fn entries(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.contains(": ") && !l.contains(' '))
        .map(str::to_string)
        .collect()
}

impl PodFacts {
    /// Facts of one pod from the stdout of [`POD_PROBE_SCRIPT`]. `requested_rdma` is what the
    /// pod spec asks for (`aliyun/erdma=1`, `claim:rdma-net`), so a missing device can be told
    /// apart from a missing request.
    pub fn from_pod_probe(
        namespace: &str,
        name: &str,
        node: Option<&str>,
        requested_rdma: &[String],
        stdout: &str,
    ) -> Self {
        let out = parse_pod_probe(stdout);
        let mut unreadable = Vec::new();
        if !out.complete {
            unreadable
                .push("the probe script stopped before its end marker (exec cut short?)".into());
        }
        let memlock = out
            .limits
            .as_deref()
            .and_then(limits::parse_limits)
            .map(|m| m.soft)
            .or_else(|| {
                // `ulimit -l` prints KiB.
                let u = out.ulimit_l.as_deref()?.trim();
                match LimitValue::parse(u)? {
                    LimitValue::Bytes(kib) => Some(LimitValue::Bytes(kib.saturating_mul(1024))),
                    v => Some(v),
                }
            });
        if memlock.is_none() {
            unreadable.push(format!(
                "memlock: {}",
                out.limits
                    .as_deref()
                    .and_then(error_line)
                    .unwrap_or("neither /proc/self/limits nor `ulimit -l` gave a value")
            ));
        }
        let cap_ipc_lock = out
            .status
            .as_deref()
            .and_then(limits::parse_status_caps)
            .map(|c| c.ipc_lock());
        if cap_ipc_lock.is_none() {
            unreadable.push("CAP_IPC_LOCK: no CapEff line in /proc/self/status".into());
        }
        if out.dev_infiniband.is_none() {
            // Nothing was listed (a failed exec, a script cut short): not a fact about the devices.
            unreadable.push(format!(
                "{DEV_UNREAD}: its section is missing from the probe's output"
            ));
        }
        let dev_text = out.dev_infiniband.as_deref().unwrap_or_default();
        let dev_infiniband = entries(dev_text);
        if dev_infiniband.is_empty()
            && let Some(e) = error_line(dev_text)
            && !e.contains("No such file or directory")
        {
            // Absent is a fact (no device injected); anything else is a failure to look.
            unreadable.push(format!("/dev/infiniband: {e}"));
        }
        let rdma_devices = entries(out.sys_infiniband.as_deref().unwrap_or_default());
        let nccl_version = out.nccl.as_deref().and_then(|t| {
            t.lines().find_map(|l| {
                let mut it = l.split_whitespace();
                let dist = it.next()?;
                let v = it.next()?;
                (dist.starts_with("nvidia-nccl") && NcclVersion::parse(v).is_some())
                    .then(|| v.to_string())
            })
        });
        Self {
            namespace: namespace.to_string(),
            name: name.to_string(),
            node: node.map(str::to_string),
            memlock,
            cap_ipc_lock,
            dev_infiniband,
            rdma_devices,
            nccl_version,
            requested_rdma: requested_rdma.to_vec(),
            unreadable,
        }
    }

    fn subject(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// How an unreadable-list entry about /dev/infiniband starts.
const DEV_UNREAD: &str = "/dev/infiniband";

/// The checks of one pod: memlock, CAP_IPC_LOCK, the RDMA device files (with the request the
/// pod made), NCCL against the per-vendor known-bad table, and what could not be read.
pub(super) fn pod_checks(p: &PodFacts) -> Vec<Check> {
    let subject = p.subject();
    let node = p.node.as_deref().unwrap_or("?");
    let mut checks = Vec::new();
    checks.push(match p.memlock {
        Some(LimitValue::Unlimited) => Check::new(
            "pod-memlock",
            subject.clone(),
            Verdict::Ok,
            "ulimit -l: unlimited",
        ),
        Some(LimitValue::Bytes(b)) => Check::new(
            "pod-memlock",
            subject.clone(),
            Verdict::Fail,
            format!(
                "ulimit -l: {}: ibv_create_qp and memory registration will fail with ENOMEM",
                crate::units::human_bytes(b)
            ),
        )
        .with_fix(format!("On node {node}: {}", limits::MEMLOCK_FIX)),
        None => Check::new(
            "pod-memlock",
            subject.clone(),
            Verdict::Warn,
            "memlock unknown",
        )
        .with_fix("Run `ulimit -l` in the pod: it must print `unlimited`."),
    });
    if p.cap_ipc_lock == Some(false) {
        checks.push(
            Check::new(
                "pod-ipc-lock",
                subject.clone(),
                Verdict::Warn,
                "CAP_IPC_LOCK missing: memory registration beyond the memlock limit fails",
            )
            .with_fix("Add `securityContext.capabilities.add: [IPC_LOCK]` to the container."),
        );
    }
    let uverbs: Vec<&String> = p
        .dev_infiniband
        .iter()
        .filter(|d| d.starts_with("uverbs"))
        .collect();
    let devices_unread = p.unreadable.iter().any(|u| u.starts_with(DEV_UNREAD));
    if uverbs.is_empty() && devices_unread {
        checks.push(
            Check::new(
                "pod-devices",
                subject.clone(),
                Verdict::Warn,
                "RDMA device files not read (see pod-probe)",
            )
            .with_fix("Fix what pod-probe names, then run preflight again to judge the devices."),
        );
    } else if uverbs.is_empty() {
        let seen = if p.rdma_devices.is_empty() {
            String::new()
        } else {
            format!(
                " (sysfs lists {}, but without a uverbs file the container cannot open it)",
                p.rdma_devices.join(", ")
            )
        };
        let fix = if p.requested_rdma.is_empty() {
            "The pod requests no RDMA resource: add the profile's resource to the container's \
             limits (`aliyun/erdma: 1`, `rdma/rdma_shared_device_a: 1`, `vpc.amazonaws.com/efa: <n>`) \
             or a DRA resource claim; the device plugin then mounts /dev/infiniband/uverbs*."
                .to_string()
        } else {
            format!(
                "The pod requests {} but got no device file: the device plugin (or DRA driver) on node \
                 {node} did not inject it. Check that plugin's pod and logs (`rdmakit doctor` on them), \
                 then recreate this pod.",
                p.requested_rdma.join(", ")
            )
        };
        checks.push(
            Check::new(
                "pod-devices",
                subject.clone(),
                Verdict::Fail,
                format!("no /dev/infiniband/uverbs* in the pod{seen}"),
            )
            .with_fix(fix),
        );
    } else {
        let names = if p.rdma_devices.is_empty() {
            uverbs
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(" ")
        } else {
            p.rdma_devices.join(", ")
        };
        checks.push(Check::new(
            "pod-devices",
            subject.clone(),
            Verdict::Ok,
            format!("devices: {names}"),
        ));
    }
    if let Some(v) = p.nccl_version.as_deref().and_then(NcclVersion::parse) {
        let kinds: Vec<DeviceKind> = p
            .rdma_devices
            .iter()
            .map(|d| DeviceKind::classify(d, None, None))
            .collect();
        for bad in KNOWN_BAD_NCCL.iter().filter(|b| b.version == v) {
            let here = kinds.contains(&bad.kind);
            checks.push(
                Check::new(
                    "pod-nccl",
                    subject.clone(),
                    if here { Verdict::Fail } else { Verdict::Warn },
                    format!(
                        "NCCL {v} {}{}",
                        bad.symptom,
                        if here {
                            String::new()
                        } else {
                            format!(" (no {} device in this pod)", bad.kind.label())
                        }
                    ),
                )
                .with_fix(bad.fix),
            );
        }
    }
    if !p.unreadable.is_empty() {
        checks.push(
            Check::new(
                "pod-probe",
                subject,
                Verdict::Warn,
                format!("could not read: {}", p.unreadable.join("; ")),
            )
            .with_fix(
                "The container needs `sh`, `cat`, `grep`, `ls` (and `python3` for the NCCL line); \
                 or run `rdmakit probe --json` inside it.",
            ),
        );
    }
    checks
}
