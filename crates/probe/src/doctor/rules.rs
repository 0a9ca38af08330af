//! Whole-log rules: findings that depend on more than one line (a silent TCP fallback is the
//! absence of a line), and findings whose cause is sharpened by another line of the same log
//! (the `NCCL_IB_HCA` value next to `No device found`, the vendor next to an NCCL version).
//! The rules read [`LogFacts`], gathered a line at a time, not the lines: a log that never ends
//! needs no line store.

use std::collections::BTreeSet;
use std::sync::LazyLock;

use regex::Regex;

use super::{Finding, MAX_EVIDENCE, Source, truncate};
use crate::facts::nccl::NcclVersion;
use crate::facts::rdma::DeviceKind;
use crate::units::human_bytes;
use crate::verdict::Verdict;

/// Most watchdog ranks kept (a job's rank count; a bound for an endless log).
const MAX_RANKS: usize = 100_000;

static WATCHDOG: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r"\[Rank (\d+)\] Watchdog caught collective operation timeout").ok()
});

/// What the whole-log rules need to know of the lines, gathered by [`LogFacts::see`].
#[derive(Debug, Default)]
pub(super) struct LogFacts {
    /// Device families the log mentions (`[0]erdma_0:1`, `hca mlx5_1`, ...).
    kinds: BTreeSet<&'static str>,
    /// A line shows GKE's gIB plugin (its paths, its shim, `NET/gIB`).
    gib: bool,
    /// The first line (0-based index, text) where NCCL says it uses sockets.
    socket_line: Option<(usize, String)>,
    /// Ranks whose collective watchdog fired.
    watchdog_ranks: BTreeSet<u32>,
}

impl LogFacts {
    /// Takes in line `idx` (0-based), already cleaned.
    pub(super) fn see(&mut self, idx: usize, l: &str) {
        for k in DeviceKind::ALL {
            if !self.kinds.contains(k.label())
                && k.name_prefixes().iter().any(|p| mentions_device(l, p))
            {
                self.kinds.insert(k.label());
            }
        }
        self.gib |=
            l.contains("/usr/local/gib") || l.contains("NCCL_SHIMNET") || l.contains("NET/gIB");
        if self.socket_line.is_none()
            && (l.contains("NET/Socket : Using")
                || l.contains("NET/Socket: Using")
                || l.contains("Using network Socket")
                || l.contains("Initialized NET plugin Socket")
                || l.contains("Assigned NET plugin Socket"))
        {
            self.socket_line = Some((idx, l.to_owned()));
        }
        if self.watchdog_ranks.len() < MAX_RANKS
            && l.contains("Watchdog caught collective operation timeout")
            && let Some(re) = WATCHDOG.as_ref()
            && let Some(rank) = re.captures(l).and_then(|c| c[1].parse().ok())
        {
            self.watchdog_ranks.insert(rank);
        }
    }
}

/// Run every whole-log rule over the per-line findings.
pub(super) fn post_pass(facts: &LogFacts, findings: &mut Vec<Finding>) {
    plugin_expected(facts, findings);
    tcp_fallback(facts, findings);
    known_bad_nccl(facts, findings);
    ib_hca_matches_nothing(findings);
    socket_ifname_value(findings);
    erdma_registration_cap(facts, findings);
    watchdog_ranks(facts, findings);
}

fn find<'a>(findings: &'a [Finding], id: &str) -> Option<&'a Finding> {
    findings.iter().find(|f| f.id == id)
}

/// The value an `*-env` finding recorded (`NCCL_IB_HCA=mlx5_0` → `mlx5_0`).
fn env_value(findings: &[Finding], id: &str) -> Option<String> {
    find(findings, id).and_then(|f| f.cause.split_once('=').map(|(_, v)| v.to_string()))
}

/// Insert a finding in order of first appearance.
fn insert_ordered(findings: &mut Vec<Finding>, f: Finding) {
    let pos = findings
        .iter()
        .position(|g| g.line > f.line)
        .unwrap_or(findings.len());
    findings.insert(pos, f);
}

fn whole_log_finding(
    id: &str,
    severity: Verdict,
    (idx, line): (usize, &str),
    cause: String,
    fix: Option<String>,
) -> Finding {
    Finding {
        id: id.into(),
        severity,
        source: Source::Nccl,
        line: idx + 1,
        evidence: truncate(line.trim(), MAX_EVIDENCE),
        cause,
        fix,
        occurrences: 1,
        lines: vec![idx + 1],
    }
}

/// Findings that say an external net plugin was not used, most specific first.
const PLUGIN_FAILURES: &[&str] = &[
    "nccl-ofi-getinfo-failed",
    "nccl-ofi-libfabric-too-old",
    "nccl-ofi-init-failed",
    "nccl-net-plugin-not-found",
    "nccl-net-plugin-dlopen-failed",
    "nccl-net-plugin-unsupported",
    "nccl-net-plugin-init-failed",
    "nccl-net-plugin-load-failed",
];

/// Which fabric of this log needs an external net plugin: EFA devices (aws-ofi-nccl) or GKE's
/// gIB (its paths and config checker in the log).
fn plugin_fabric(facts: &LogFacts) -> Option<&'static str> {
    if facts.kinds.contains(DeviceKind::Efa.label()) {
        return Some("EFA, which NCCL reaches only through aws-ofi-nccl");
    }
    facts
        .gib
        .then_some("GKE's RDMA NICs, which NCCL reaches through Google's gIB plugin")
}

/// `nccl-net-plugin-absent` is normal on most fabrics; where the log shows a fabric that needs a
/// plugin (EFA, gIB), the absent plugin is the failure and says so.
fn plugin_expected(facts: &LogFacts, findings: &mut [Finding]) {
    let Some(fabric) = plugin_fabric(facts) else {
        return;
    };
    if let Some(f) = findings
        .iter_mut()
        .find(|f| f.id == "nccl-net-plugin-absent")
    {
        f.severity = Verdict::Warn;
        f.cause = format!(
            "no external NCCL net plugin (libnccl-net.so) in the image, but this log shows {fabric}: NCCL is left \
             with its internal IB and socket transports"
        );
        f.fix = Some(crate::doctor::signatures::PLUGIN_PATH_FIX.to_string());
    }
}

/// NCCL on TCP with no NET/IB anywhere: every form NCCL prints it in (`NET/Socket : Using`,
/// `Using network Socket`, `Initialized NET plugin Socket`, `Assigned NET plugin Socket`).
fn tcp_fallback(facts: &LogFacts, findings: &mut Vec<Finding>) {
    let uses_ib = findings.iter().any(|f| {
        matches!(
            f.id.as_str(),
            "nccl-net-ib-using"
                | "nccl-using-network-ib"
                | "nccl-net-plugin-ib"
                | "nccl-using-network-plugin"
                | "nccl-channel-net-plugin"
        )
    });
    let ib_disabled = find(findings, "nccl-ib-disabled-env").is_some();
    let (Some((idx, line)), false) = (&facts.socket_line, uses_ib) else {
        return;
    };
    let (severity, cause, fix) = if ib_disabled {
        (
            Verdict::Info,
            "NCCL uses TCP sockets because NCCL_IB_DISABLE=1 (expected in the TCP A/B run)"
                .to_string(),
            None,
        )
    } else {
        (
            Verdict::Fail,
            "NCCL silently fell back to TCP sockets: no `NET/IB : Using` line anywhere in the log"
                .to_string(),
            Some(format!(
                "Find why NET/IB was not used (earlier findings: nccl-ib-no-device, nccl-net-plugin-ib-failed, ibverbs-no-provider, memlock). {}",
                "Prove the path with the device counters (`rdmakit probe --counters`) and check NCCL_IB_HCA, NCCL_IB_DISABLE=0, /dev/infiniband and the image's RDMA userspace."
            )),
        )
    };
    let mut cause = cause;
    let plugin_failed = PLUGIN_FAILURES.iter().find_map(|id| find(findings, id));
    if let (Verdict::Fail, Some(p)) = (severity, plugin_failed) {
        cause.push_str(&format!(
            "; the net plugin of line {} did not load or initialise ({}), so NCCL had only its internal transports",
            p.line, p.id
        ));
    }
    let f = whole_log_finding("nccl-tcp-fallback", severity, (*idx, line), cause, fix);
    insert_ordered(findings, f);
}

/// `prefix` followed by a digit or `_` (a device name), not inside a longer word.
fn mentions_device(line: &str, prefix: &str) -> bool {
    line.match_indices(prefix).any(|(i, _)| {
        let before_ok = line[..i]
            .chars()
            .next_back()
            .is_none_or(|c| !c.is_ascii_alphanumeric());
        let after = line[i + prefix.len()..].chars().next();
        before_ok && after.is_some_and(|c| c.is_ascii_digit() || c == '_')
    })
}

/// The log's `NCCL version` against the per-vendor known-bad table: `fail` when the log also
/// shows that vendor's devices, `warn` otherwise.
fn known_bad_nccl(facts: &LogFacts, findings: &mut Vec<Finding>) {
    let Some(v) = find(findings, "nccl-version").cloned() else {
        return;
    };
    let Some(version) = v.cause.strip_prefix("NCCL ").and_then(NcclVersion::parse) else {
        return;
    };
    if version.known_bad().next().is_none() {
        return;
    }
    let seen = &facts.kinds;
    for bad in version.known_bad() {
        let label = bad.kind.label();
        let (severity, cause) = if seen.contains(label) {
            (
                Verdict::Fail,
                format!(
                    "NCCL {version} {} — and this log shows {label} devices",
                    bad.symptom
                ),
            )
        } else {
            (
                Verdict::Warn,
                format!(
                    "NCCL {version} {} (fatal on {label}, harmless elsewhere)",
                    bad.symptom
                ),
            )
        };
        let mut f = v.clone();
        f.id = "nccl-version-known-bad".into();
        f.severity = severity;
        f.cause = cause;
        f.fix = Some(bad.fix.to_string());
        insert_ordered(findings, f);
    }
}

/// `NET/IB : No device found` in a log that also sets NCCL_IB_HCA: the filter matched nothing.
fn ib_hca_matches_nothing(findings: &mut [Finding]) {
    let Some(hca) = env_value(findings, "nccl-ib-hca-env") else {
        return;
    };
    if let Some(f) = findings.iter_mut().find(|f| f.id == "nccl-ib-no-device") {
        f.cause = format!(
            "NCCL_IB_HCA={hca} matches no RDMA device NCCL can open in this pod, so NCCL found none and falls back to TCP"
        );
        f.fix = Some(format!(
            "Set NCCL_IB_HCA to the profile's device (eRDMA: erdma_0; a leading `=` asks for an exact name, `^` excludes): \
             `ibv_devices` or `rdmakit probe` in the pod lists the names; `{hca}` is not among them, or its provider is missing."
        ));
    }
}

/// The interface filter that matched nothing, named in the finding.
fn socket_ifname_value(findings: &mut [Finding]) {
    let Some(ifname) = env_value(findings, "nccl-socket-ifname-env") else {
        return;
    };
    if let Some(f) = findings
        .iter_mut()
        .find(|f| f.id == "nccl-socket-ifname-no-match")
    {
        f.cause
            .push_str(&format!(" (this log sets NCCL_SOCKET_IFNAME={ifname})"));
    }
}

/// Memory registration ENOMEM on eRDMA: with unlimited memlock the device's ~64 GiB total MR cap
/// is the usual cause (vLLM/NIXL register the whole KV cache at once).
fn erdma_registration_cap(facts: &LogFacts, findings: &mut [Finding]) {
    if find(findings, "memlock-reg-mr-enomem").is_none()
        || !facts.kinds.contains(DeviceKind::Erdma.label())
    {
        return;
    }
    let Ok(len_re) = Regex::new(r"length[= ](\d+)") else {
        return;
    };
    for f in findings
        .iter_mut()
        .filter(|f| f.id == "memlock-reg-mr-enomem")
    {
        let size = len_re
            .captures(&f.evidence)
            .and_then(|c| c[1].parse::<u64>().ok());
        match size {
            Some(n) if n >= 64 << 30 => f.cause = format!(
                "a single registration of {} on eRDMA exceeds the device's total memory-registration cap (about 64 GiB), whatever the memlock limit",
                human_bytes(n)
            ),
            _ => f.cause.push_str(
                " — this log shows eRDMA: if memlock is already unlimited, the total registered size has reached the ~64 GiB cap",
            ),
        }
        f.fix = Some(
            "Keep each eRDMA registration well under 64 GiB in total: register the KV cache in chunks or lower its size \
             (vLLM --gpu-memory-utilization / --num-gpu-blocks-override); if memlock is limited, apply the containerd \
             LimitMEMLOCK=infinity drop-in first (see memlock-create-qp-enomem)."
                .to_string(),
        );
    }
}

/// Which ranks hit the collective watchdog, and which of the ranks up to the highest one did not
/// (the one to read first: it is stuck elsewhere or dead).
fn watchdog_ranks(facts: &LogFacts, findings: &mut [Finding]) {
    let Some(f) = findings
        .iter_mut()
        .find(|f| f.id == "torch-watchdog-timeout")
    else {
        return;
    };
    let ranks = &facts.watchdog_ranks;
    let Some(&max) = ranks.iter().next_back() else {
        return;
    };
    let list = |it: &mut dyn Iterator<Item = u32>| {
        it.map(|r| r.to_string()).collect::<Vec<_>>().join(", ")
    };
    f.cause.push_str(&format!(
        "; ranks that timed out in this log: {}",
        list(&mut ranks.iter().copied())
    ));
    let missing: Vec<u32> = (0..max).filter(|r| !ranks.contains(r)).collect();
    if !missing.is_empty() {
        f.cause.push_str(&format!(
            "; rank(s) {} did not time out here: the collective is waiting on them, so their logs come first",
            list(&mut missing.into_iter())
        ));
    }
}
