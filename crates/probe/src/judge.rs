//! Judgements of what a command printed inside a pod, as workflows make them: text in, a [`Verdict`]
//! out. RLIMIT_MEMLOCK from `ulimit -l`, the NCCL version against a profile's pins, the transport NCCL
//! picked from its log (and whether it was the profile's device), an active port in `ibv_devinfo`'s
//! output, whether a net plugin carried the traffic, and our figure beside a peer's.
//!
//! Each result carries its `verdict`; serialised (what rdmakit's Rhai `probe::` functions return) it also
//! carries the flag scripts have always read, derived from that verdict: `ok` (`ok` or `info`), or for
//! the NCCL version `status` (`pass` / `warn` / `fail`).
//!
//! ```
//! use probe::Verdict;
//! use probe::judge::{self, NcclPolicy};
//!
//! assert_eq!(judge::memlock("unlimited\n").verdict, Verdict::Ok);
//! let policy = NcclPolicy {
//!     profile: "aliyun-erdma".into(),
//!     fabric: "eRDMA".into(),
//!     pip_package: "nvidia-nccl-cu13".into(),
//!     pin: Some("2.30.7".into()),
//!     known_bad: vec!["2.28.9".into()],
//!     bad_reason: Some("segfaults in ncclNetInit()".into()),
//!     known_good: vec![],
//! };
//! let c = judge::nccl_version(&policy, "22809\n");
//! assert_eq!(c.verdict, Verdict::Fail);
//! assert!(c.fix.unwrap_or_default().contains("nvidia-nccl-cu13==2.30.7"));
//! ```

use serde::Serialize;

use crate::facts::limits::{LimitValue, MEMLOCK_FIX, parse_limits};
use crate::facts::nccl::NcclVersion;
use crate::parse::parse_ibv_devinfo;
use crate::verdict::{Check, Verdict, wire};

/// The memlock verdict of `ulimit -l` output (KiB or `unlimited`) or `/proc/self/limits` text.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MemlockVerdict {
    /// `ok` when the soft limit is unlimited, else `fail` (serialised with `ok`).
    #[serde(flatten, serialize_with = "wire::with_ok")]
    pub verdict: Verdict,
    /// What was read (`unlimited`, `64 KiB`), or `unreadable`.
    pub value: String,
    /// One line for the report.
    pub detail: String,
    /// The fix when not ok.
    pub fix: Option<String>,
}

/// Judges RLIMIT_MEMLOCK from `ulimit -l` (first non-empty line, KiB) or `/proc/self/limits`; a limit
/// gets the containerd `LimitMEMLOCK=infinity` fix ([`MEMLOCK_FIX`]).
pub fn memlock(text: &str) -> MemlockVerdict {
    let value = if let Some(m) = parse_limits(text) {
        Some(m.soft)
    } else {
        text.lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .and_then(|l| match LimitValue::parse(l)? {
                // `ulimit -l` counts KiB.
                LimitValue::Bytes(kib) => Some(LimitValue::Bytes(kib.saturating_mul(1024))),
                u => Some(u),
            })
    };
    match value {
        Some(LimitValue::Unlimited) => MemlockVerdict {
            verdict: Verdict::Ok,
            value: "unlimited".into(),
            detail: "RLIMIT_MEMLOCK is unlimited".into(),
            fix: None,
        },
        Some(v) => MemlockVerdict {
            verdict: Verdict::Fail,
            value: v.human(),
            detail: format!("RLIMIT_MEMLOCK is {} (RDMA needs unlimited)", v.human()),
            fix: Some(MEMLOCK_FIX.into()),
        },
        None => MemlockVerdict {
            verdict: Verdict::Fail,
            value: "unreadable".into(),
            detail: format!(
                "no memlock value in the output (expected `ulimit -l` output): {:?}",
                text.lines().next().unwrap_or("")
            ),
            fix: Some("run `ulimit -l` in the container; it must print unlimited".into()),
        },
    }
}

/// Finds an NCCL version in command output: `NCCL version 2.28.9+cuda13.0` (an NCCL log), a version code
/// on its own line (`23007`, what `cupy.cuda.nccl.get_version()` prints), or a bare `2.30.7`.
pub fn find_nccl_version(text: &str) -> Option<NcclVersion> {
    if let Some(i) = text.find("NCCL version ") {
        let rest = &text[i + "NCCL version ".len()..];
        if let Some(v) = rest.split_whitespace().next().and_then(NcclVersion::parse) {
            return Some(v);
        }
    }
    for line in text.lines().rev().map(str::trim) {
        if let Some(v) = line.parse::<u32>().ok().and_then(NcclVersion::from_code) {
            return Some(v);
        }
        if let Some(v) = NcclVersion::parse(line) {
            return Some(v);
        }
    }
    None
}

/// What a vendor profile says about NCCL versions (k8s-render's `Profile.nccl`, with the names the
/// verdict cites).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NcclPolicy {
    /// The profile's name, for the fix (`rdmakit render image --profile NAME`).
    pub profile: String,
    /// The fabric the versions were judged on (`eRDMA`).
    pub fabric: String,
    /// The pip package that carries NCCL (`nvidia-nccl-cu13`).
    pub pip_package: String,
    /// The version the image must have, if pinned.
    pub pin: Option<String>,
    /// Versions that fail on this fabric.
    pub known_bad: Vec<String>,
    /// Why they fail.
    pub bad_reason: Option<String>,
    /// Versions known to work.
    pub known_good: Vec<String>,
}

/// The NCCL version judged against a profile's pin and known-bad list.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NcclVersionVerdict {
    /// `ok` (the pin, known good, or no pin), `fail` (known bad or not found) or `warn` (neither the pin
    /// nor known good); serialised with `status` (`pass` / `fail` / `warn`).
    #[serde(flatten, serialize_with = "wire::with_status")]
    pub verdict: Verdict,
    /// The version found (`2.30.7`), if any.
    pub version: Option<String>,
    /// Its code (`23007`).
    pub code: Option<u32>,
    /// The profile's pin.
    pub pin: Option<String>,
    /// One line for the report.
    pub detail: String,
    /// The fix when not ok.
    pub fix: Option<String>,
}

/// Judges the NCCL version printed in `text` against `policy`: a known-bad version fails with the reason
/// and the pin that fixes it; the pin or a known-good one passes; another one warns.
pub fn nccl_version(policy: &NcclPolicy, text: &str) -> NcclVersionVerdict {
    let n = policy;
    let pin_fix = |pin: &str| {
        format!(
            "install {}=={pin} in the image (rdmakit render image --profile {} writes that Dockerfile) and rebuild it",
            n.pip_package, n.profile
        )
    };
    let Some(v) = find_nccl_version(text) else {
        return NcclVersionVerdict {
            verdict: Verdict::Fail,
            version: None,
            code: None,
            pin: n.pin.clone(),
            detail: format!(
                "no NCCL version in the output: {:?}",
                text.trim().lines().last().unwrap_or("")
            ),
            fix: Some("check that torch and cupy import in the worker image".into()),
        };
    };
    let vs = v.to_string();
    let code = v.major * 10000 + v.minor * 100 + v.patch;
    let listed = |l: &[String]| l.iter().any(|x| NcclVersion::parse(x) == Some(v));
    let (verdict, detail, fix) = if listed(&n.known_bad) {
        (
            Verdict::Fail,
            format!(
                "NCCL {vs} ({code}) is known bad on {}: {}",
                n.fabric,
                n.bad_reason
                    .as_deref()
                    .unwrap_or("listed in the profile's nccl.known_bad")
            ),
            Some(match &n.pin {
                Some(p) => pin_fix(p),
                None => format!("install a version outside {:?}", n.known_bad),
            }),
        )
    } else if n.pin.as_deref().and_then(NcclVersion::parse) == Some(v) {
        (
            Verdict::Ok,
            format!("NCCL {vs} ({code}), the profile's pin"),
            None,
        )
    } else if listed(&n.known_good) {
        (
            Verdict::Ok,
            format!("NCCL {vs} ({code}), known good on {}", n.fabric),
            None,
        )
    } else if let Some(p) = &n.pin {
        (
            Verdict::Warn,
            format!(
                "NCCL {vs} ({code}) is neither the pin {p} nor a known-good version on {}",
                n.fabric
            ),
            Some(pin_fix(p)),
        )
    } else {
        (
            Verdict::Ok,
            format!("NCCL {vs} ({code}); the profile pins no version"),
            None,
        )
    };
    NcclVersionVerdict {
        verdict,
        version: Some(vs),
        code: Some(code),
        pin: n.pin.clone(),
        detail,
        fix,
    }
}

/// The network NCCL ran over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum NcclNet {
    /// NET/IB: RDMA through NCCL's verbs transport.
    #[serde(rename = "IB")]
    Ib,
    /// NET/Socket: TCP.
    Socket,
    /// No NCCL_DEBUG=INFO transport line in the log.
    #[serde(rename = "unknown")]
    Unknown,
}

/// Which network NCCL used, from its log.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NcclTransport {
    /// `IB` (RDMA), `Socket` (TCP) or `unknown` (no NCCL_DEBUG=INFO lines).
    pub transport: NcclNet,
    /// The deciding log line.
    pub evidence: String,
    /// Its line number (1-based; 0 when none).
    pub line: usize,
    /// GPUDirect RDMA reported on.
    pub gdr: bool,
    /// What to do when NCCL did not use RDMA.
    pub fix: Option<String>,
}

/// Reads the transport NCCL picked out of a log through the doctor's signatures. The TCP-fallback finding
/// exists only when no NET/IB line does; channels over sockets next to NET/IB lines still count as IB.
pub fn nccl_transport(log: &str) -> crate::Result<NcclTransport> {
    let d = crate::doctor::diagnose(log)?;
    let find = |ids: &[&str]| d.findings.iter().find(|f| ids.contains(&f.id.as_str()));
    let gdr = log.contains("/GDRDMA") || log.contains("GPU Direct RDMA Enabled");
    let socket = |f: &crate::doctor::Finding| {
        NcclTransport {
        transport: NcclNet::Socket,
        evidence: f.evidence.clone(),
        line: f.line,
        gdr,
        fix: Some(f.fix.clone().unwrap_or_else(|| {
            "NCCL fell back to TCP sockets: check NCCL_IB_HCA, /dev/infiniband in the pod and the RDMA provider in the image".into()
        })),
    }
    };
    if let Some(f) = find(&["nccl-tcp-fallback"]) {
        return Ok(socket(f));
    }
    if let Some(f) = find(&[
        "nccl-net-ib-using",
        "nccl-using-network-ib",
        "nccl-channel-net-ib",
    ]) {
        return Ok(NcclTransport {
            transport: NcclNet::Ib,
            evidence: f.evidence.clone(),
            line: f.line,
            gdr,
            fix: None,
        });
    }
    if let Some(f) = find(&["nccl-channel-net-socket"]) {
        return Ok(socket(f));
    }
    Ok(NcclTransport {
        transport: NcclNet::Unknown,
        evidence: String::new(),
        line: 0,
        gdr,
        fix: Some("no NCCL transport line in the log: run with NCCL_DEBUG=INFO".into()),
    })
}

/// The profile facts a net-plugin path is judged with.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetPluginFacts {
    /// The plugin's name (`aws-ofi-nccl`, `gIB`).
    pub plugin: String,
    /// Its library (`libnccl-net.so`), for the fix when NCCL did not load it.
    pub library: String,
    /// The fabric it should carry the traffic over (`AWS EFA`).
    pub fabric: String,
    /// What NCCL's INFO log prints when the plugin carries the traffic (`NET/OFI`).
    pub marker: String,
}

/// Whether NCCL's traffic went over a net plugin, from its log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NetPluginPath {
    /// `ok` when the plugin carried the traffic, else `fail` (serialised with `ok`).
    #[serde(flatten, serialize_with = "wire::with_ok")]
    pub verdict: Verdict,
    /// One line: the evidence, or what went wrong with its cause and fix.
    pub detail: String,
}

/// Judges that NCCL ran over the profile's net plugin: its marker lines, NCCL running over the plugin's
/// network (doctor: `nccl-using-network-plugin`, `nccl-channel-net-plugin`), no TCP fallback and no failure
/// the doctor rates `fail`. A fallback is explained by the plugin's own failure (aws-ofi-nccl's
/// `nccl-ofi-*`, gIB's `nccl-gib-*`, NCCL's plugin loader `nccl-net-plugin-*`), not by NCCL's generic NET/IB
/// advice, which does not apply on a plugin fabric.
pub fn nccl_net_plugin_path(log: &str, p: &NetPluginFacts) -> crate::Result<NetPluginPath> {
    let d = crate::doctor::diagnose(log)?;
    let t = nccl_transport(log)?;
    let lines: Vec<&str> = log.lines().filter(|l| l.contains(&p.marker)).collect();
    let mut on_plugin: Option<&str> = None;
    let mut failed = Vec::new();
    let mut cause: Option<&crate::doctor::Finding> = None;
    for f in &d.findings {
        if on_plugin.is_none()
            && (f.id == "nccl-using-network-plugin" || f.id == "nccl-channel-net-plugin")
        {
            on_plugin = Some(&f.evidence);
        }
        if f.severity == Verdict::Fail {
            failed.push(format!("{} ({})", f.evidence, f.cause));
        }
        let own = f.id.starts_with("nccl-ofi")
            || f.id.starts_with("nccl-gib")
            || (f.id.starts_with("nccl-net-plugin") && f.id != "nccl-net-plugin-socket");
        if cause.is_none() && own && matches!(f.severity, Verdict::Fail | Verdict::Warn) {
            cause = Some(f);
        }
    }
    let fail = |detail: String| {
        Ok(NetPluginPath {
            verdict: Verdict::Fail,
            detail,
        })
    };
    let not_loaded = format!(
        "NCCL did not load {} (is {} on LD_LIBRARY_PATH",
        p.plugin, p.library
    );
    if t.transport == NcclNet::Socket {
        let why = match (cause, lines.last()) {
            (Some(c), _) => format!(
                "; cause ({}, line {}): {} — Fix: {}",
                c.id,
                c.line,
                c.cause,
                c.fix.as_deref().unwrap_or("")
            ),
            (None, Some(last)) => format!(
                "; the last {} line: {last} — {}",
                p.plugin,
                t.fix.as_deref().unwrap_or("")
            ),
            (None, None) => format!("; no '{}' line: {not_loaded}?)", p.marker),
        };
        return fail(format!(
            "NCCL used TCP sockets, not {} over {}: {}{why}",
            p.plugin, p.fabric, t.evidence
        ));
    }
    let (Some(first), Some(last)) = (lines.first(), lines.last()) else {
        return fail(format!(
            "no '{}' line in the launcher log: {not_loaded}, NCCL_DEBUG=INFO set?) — run rdmakit doctor on the log",
            p.marker
        ));
    };
    if !failed.is_empty() {
        return fail(format!(
            "{} is loaded but does not carry the traffic over {}: {}",
            p.plugin,
            p.fabric,
            failed.join("; ")
        ));
    }
    let Some(on) = on_plugin else {
        return fail(format!(
            "'{}' lines but no 'Using network' or 'via NET/' line for the plugin: NCCL may not have used it (last line: {last})",
            p.marker
        ));
    };
    Ok(NetPluginPath {
        verdict: Verdict::Ok,
        detail: if first == last {
            format!("{first}; {on}")
        } else {
            format!("{first}; {last}; {on}")
        },
    })
}

/// Judges that NCCL ran over NET/IB on device `hca` (the deciding NET/IB line names it, as in
/// `NET/IB : Using [0]erdma_0:1/RoCE`), from its log ([`nccl_transport`]): `ok` with that line; `fail` for
/// a fallback to sockets, NET/IB on other devices (`NCCL_IB_HCA`) or no transport line, each with the fix.
pub fn nccl_uses_device(log: &str, hca: &str) -> crate::Result<Check> {
    let t = nccl_transport(log)?;
    let c = |verdict, summary: String| Check::new("nccl-transport", hca, verdict, summary);
    let with_fix = |c: Check, fix: Option<String>| match fix {
        Some(f) => c.with_fix(f),
        None => c,
    };
    Ok(match t.transport {
        NcclNet::Ib if t.evidence.contains(hca) => c(Verdict::Ok, t.evidence),
        NcclNet::Ib => c(
            Verdict::Fail,
            format!("NCCL used NET/IB but not {hca}: {}", t.evidence),
        )
        .with_fix("check NCCL_IB_HCA"),
        NcclNet::Socket => with_fix(
            c(
                Verdict::Fail,
                format!(
                    "NCCL used TCP sockets (silent TCP fallback): {}",
                    t.evidence
                ),
            ),
            t.fix,
        ),
        NcclNet::Unknown => with_fix(c(Verdict::Fail, "no NET/IB line in the log".into()), t.fix),
    })
}

/// Judges that `ibv_devinfo` output lists device `hca` (that name, or one it begins: `erdma` matches
/// `erdma_0`) with a port in PORT_ACTIVE: `ok` naming the port, its link layer and the transport; `fail`
/// with the ports' states, or with the devices listed when none is `hca` (output that is no
/// `ibv_devinfo` lists none; the caller adds the command's stderr and its own fix).
pub fn ibv_port_active(text: &str, hca: &str) -> Check {
    let devices = parse_ibv_devinfo(text).unwrap_or_default();
    let text_of = |v: &Option<String>| v.clone().unwrap_or_default();
    if let Some(d) = devices
        .iter()
        .find(|d| d.hca_id == hca || d.hca_id.starts_with(hca))
    {
        if let Some(p) = d.ports.iter().find(|p| p.is_active()) {
            return Check::new(
                "ibv-port-active",
                d.hca_id.clone(),
                Verdict::Ok,
                format!(
                    "{} port {} {}, link_layer {}, transport {}",
                    d.hca_id,
                    p.port,
                    text_of(&p.state),
                    text_of(&p.link_layer),
                    text_of(&d.transport)
                ),
            );
        }
        let states: Vec<String> = d
            .ports
            .iter()
            .map(|p| format!("port {} {}", p.port, text_of(&p.state)))
            .collect();
        return Check::new(
            "ibv-port-active",
            d.hca_id.clone(),
            Verdict::Fail,
            format!("{} has no active port ({states:?})", d.hca_id),
        )
        .with_fix("check the link and the RDMA agent on that node");
    }
    let names: Vec<&str> = devices.iter().map(|d| d.hca_id.as_str()).collect();
    Check::new(
        "ibv-port-active",
        hca,
        Verdict::Fail,
        format!("no {hca} in the ibv_devinfo output (devices: {names:?})"),
    )
}

/// The device-counter reading the NCCL check script prints (k8s-render's `nccl_allreduce_check.py`):
/// the GiB figure of its `<fabric> tx during check: X GiB` line, or `None` when there is none (the counter
/// was unreadable, or the script died first).
pub fn tx_during_check(text: &str, fabric: &str) -> Option<f64> {
    let key = format!("{fabric} tx during check: ");
    let rest = &text[text.find(&key)? + key.len()..];
    let (figure, _) = rest.split_once(" GiB")?;
    figure.trim().parse::<f64>().ok().filter(|g| g.is_finite())
}

/// Ours beside the peer, the ratio, and whether it meets `min_ratio`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// What was compared.
    pub name: String,
    /// Our figure.
    pub ours: f64,
    /// The peer's figure, measured the same way.
    pub peer: f64,
    /// Unit of both.
    pub unit: String,
    /// ours / peer (None when the peer is 0).
    pub ratio: Option<f64>,
    /// The target ratio, if any.
    pub min_ratio: Option<f64>,
    /// `info` without a target (the figures side by side), else `ok` when the target is met and `fail`
    /// when it is not (serialised with `ok`, true unless `fail`).
    #[serde(flatten, serialize_with = "wire::with_ok")]
    pub verdict: Verdict,
    /// One line: `ours 11.67 GiB/s beside TCP run 1.20 GiB/s: 9.73x (want >= 2x)`.
    pub detail: String,
}

/// Compares our figure with the peer's.
pub fn compare(
    name: &str,
    ours: f64,
    peer: f64,
    unit: &str,
    peer_name: &str,
    min_ratio: Option<f64>,
) -> Comparison {
    let ratio = (peer > 0.0).then(|| ours / peer);
    let verdict = match (min_ratio, ratio) {
        (None, _) => Verdict::Info,
        (Some(m), Some(r)) => Verdict::ok_if(r >= m),
        (Some(_), None) => Verdict::ok_if(ours > 0.0),
    };
    let detail = format!(
        "ours {ours:.2} {unit} beside {peer_name} {peer:.2} {unit}: {}{}",
        ratio.map_or("peer is 0".to_owned(), |r| format!("{r:.2}x")),
        min_ratio.map_or(String::new(), |m| format!(" (want >= {m}x)"))
    );
    Comparison {
        name: name.to_owned(),
        ours,
        peer,
        unit: unit.to_owned(),
        ratio,
        min_ratio,
        verdict,
        detail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn erdma() -> NcclPolicy {
        NcclPolicy {
            profile: "aliyun-erdma".into(),
            fabric: "eRDMA".into(),
            pip_package: "nvidia-nccl-cu13".into(),
            pin: Some("2.30.7".into()),
            known_bad: vec!["2.28.7".into(), "2.28.9".into()],
            bad_reason: Some(
                "segfaults in ncclNetInit() while probing eRDMA devices (torch 2.11 bundles 2.28.9)"
                    .into(),
            ),
            known_good: vec!["2.28.3".into(), "2.29.7".into(), "2.30.7".into()],
        }
    }

    #[test]
    fn memlock_reads_ulimit_and_proc_limits() {
        assert_eq!(memlock("unlimited\nhca_id: erdma_0\n").verdict, Verdict::Ok);
        let limited = memlock("64\n");
        assert_eq!(limited.verdict, Verdict::Fail);
        assert_eq!(limited.value, "64 KiB");
        assert!(
            limited
                .fix
                .unwrap_or_default()
                .contains("LimitMEMLOCK=infinity")
        );
        let proc = "Max locked memory         65536                65536                bytes\n";
        assert_eq!(memlock(proc).value, "64 KiB");
        assert_eq!(memlock("").value, "unreadable");
    }

    #[test]
    fn nccl_versions_from_cupy_codes_logs_and_text() {
        let v = |t: &str| find_nccl_version(t).map(|v| v.to_string());
        assert_eq!(v("23007\n").as_deref(), Some("2.30.7"));
        assert_eq!(
            v("x NCCL INFO NCCL version 2.28.9+cuda13.0\n").as_deref(),
            Some("2.28.9")
        );
        assert_eq!(v("2.19.3\n").as_deref(), Some("2.19.3"));
        assert_eq!(v("ImportError: no module named cupy\n"), None);
    }

    #[test]
    fn nccl_version_names_the_known_bad_pin_and_the_fix() {
        let p = erdma();
        let bad = nccl_version(&p, "22809\n");
        assert_eq!(bad.verdict, Verdict::Fail);
        assert!(
            bad.detail.contains("2.28.9") && bad.detail.contains("ncclNetInit"),
            "{}",
            bad.detail
        );
        assert!(
            bad.fix
                .unwrap_or_default()
                .contains("nvidia-nccl-cu13==2.30.7")
        );
        assert_eq!(nccl_version(&p, "23007\n").verdict, Verdict::Ok);
        assert_eq!(nccl_version(&p, "22903\n").verdict, Verdict::Warn);
        assert_eq!(nccl_version(&p, "22907\n").verdict, Verdict::Ok); // 2.29.7 is known good
        assert_eq!(nccl_version(&p, "boom\n").verdict, Verdict::Fail);
        let unpinned = NcclPolicy {
            pin: None,
            ..erdma()
        };
        assert!(
            nccl_version(&unpinned, "22809\n")
                .fix
                .unwrap_or_default()
                .contains("outside")
        );
        assert_eq!(nccl_version(&unpinned, "22903\n").verdict, Verdict::Ok);
    }

    #[test]
    fn transport_from_nccl_logs() -> crate::Result<()> {
        let ib =
            "n0:1:1 [0] NCCL INFO NET/IB : Using [0]erdma_0:1/RoCE [RO]; OOB eth0:10.0.5.76<0>\n";
        assert_eq!(nccl_transport(ib)?.transport, NcclNet::Ib);
        let sock = "n0:1:1 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.5.76<0>\nn0:1:1 [0] NCCL INFO Using network Socket\n";
        let t = nccl_transport(sock)?;
        assert_eq!(t.transport, NcclNet::Socket);
        assert!(t.fix.is_some());
        assert_eq!(nccl_transport("hello\n")?.transport, NcclNet::Unknown);
        Ok(())
    }

    #[test]
    fn serialised_results_keep_the_flags_scripts_read() -> Result<(), Box<dyn std::error::Error>> {
        let m = serde_json::to_value(memlock("64\n"))?;
        assert_eq!((&m["verdict"], &m["ok"]), (&"fail".into(), &false.into()));
        assert_eq!(m["value"], "64 KiB");
        let v = serde_json::to_value(nccl_version(&erdma(), "22903\n"))?;
        assert_eq!(
            (&v["verdict"], &v["status"]),
            (&"warn".into(), &"warn".into())
        );
        let pass = serde_json::to_value(nccl_version(&erdma(), "23007\n"))?;
        assert_eq!(
            (&pass["verdict"], &pass["status"]),
            (&"ok".into(), &"pass".into())
        );
        // Without a target a comparison is information, and `ok` as it always was.
        let c = serde_json::to_value(compare("x", 1.0, 2.0, "GiB/s", "p", None))?;
        assert_eq!((&c["verdict"], &c["ok"]), (&"info".into(), &true.into()));
        let t = serde_json::to_value(nccl_transport("hello\n")?)?;
        assert_eq!(t["transport"], "unknown");
        Ok(())
    }

    #[test]
    fn nccl_on_the_profiles_device() -> crate::Result<()> {
        let ib =
            "n0:1:1 [0] NCCL INFO NET/IB : Using [0]erdma_0:1/RoCE [RO]; OOB eth0:10.0.5.76<0>\n";
        let on = nccl_uses_device(ib, "erdma")?;
        assert_eq!(on.verdict, Verdict::Ok);
        assert!(
            on.summary.contains("NET/IB : Using [0]erdma_0"),
            "{}",
            on.summary
        );
        let other = nccl_uses_device(ib, "mlx5")?;
        assert_eq!(other.verdict, Verdict::Fail);
        assert!(
            other.summary.starts_with("NCCL used NET/IB but not mlx5: "),
            "{}",
            other.summary
        );
        assert_eq!(other.fix.as_deref(), Some("check NCCL_IB_HCA"));
        let sock = "n0:1:1 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.5.76<0>\nn0:1:1 [0] NCCL INFO Using network Socket\n";
        let fell = nccl_uses_device(sock, "erdma")?;
        assert!(
            fell.summary
                .starts_with("NCCL used TCP sockets (silent TCP fallback): "),
            "{}",
            fell.summary
        );
        assert!(fell.fix.is_some());
        let none = nccl_uses_device("hello\n", "erdma")?;
        assert_eq!(none.summary, "no NET/IB line in the log");
        assert!(none.fix.unwrap_or_default().contains("NCCL_DEBUG=INFO"));
        Ok(())
    }

    #[test]
    fn an_active_port_from_ibv_devinfo() {
        let out = "hca_id:\terdma_0\n\ttransport:\t\t\teRDMA (0)\n\tphys_port_cnt:\t\t\t1\n\t\tport:\t1\n\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n\t\t\tlink_layer:\t\tEthernet\n";
        let ok = ibv_port_active(out, "erdma");
        assert_eq!(ok.verdict, Verdict::Ok, "{}", ok.summary);
        assert_eq!(
            ok.summary,
            "erdma_0 port 1 PORT_ACTIVE (4), link_layer Ethernet, transport eRDMA (0)"
        );
        let down = ibv_port_active(&out.replace("PORT_ACTIVE (4)", "PORT_DOWN (1)"), "erdma_0");
        assert_eq!(down.verdict, Verdict::Fail);
        assert_eq!(
            down.summary,
            r#"erdma_0 has no active port (["port 1 PORT_DOWN (1)"])"#
        );
        let missing = ibv_port_active(out, "mlx5");
        assert_eq!(
            missing.summary,
            r#"no mlx5 in the ibv_devinfo output (devices: ["erdma_0"])"#
        );
        assert_eq!(
            ibv_port_active("bash: ibv_devinfo: not found", "mlx5").summary,
            "no mlx5 in the ibv_devinfo output (devices: [])"
        );
    }

    #[test]
    fn the_nccl_checks_counter_line() {
        let out = "rank 0: result OK\neRDMA tx during check: 2.5 GiB (mlx5? no: erdma_0)\n";
        assert_eq!(tx_during_check(out, "eRDMA"), Some(2.5));
        assert_eq!(
            tx_during_check("InfiniBand tx during check: 0.0 GiB\n", "InfiniBand"),
            Some(0.0)
        );
        assert_eq!(
            tx_during_check(out, "InfiniBand"),
            None,
            "another fabric's line"
        );
        assert_eq!(
            tx_during_check("eRDMA tx during check: n/a GiB", "eRDMA"),
            None
        );
        assert_eq!(tx_during_check("eRDMA tx during check: 2.5", "eRDMA"), None);
    }

    #[test]
    fn comparisons_put_ours_beside_the_peer() {
        let c = compare("RDT", 11.6, 1.2, "GiB/s", "TCP run", Some(2.0));
        assert_eq!(c.verdict, Verdict::Ok);
        assert!(
            c.detail
                .contains("ours 11.60 GiB/s beside TCP run 1.20 GiB/s: 9.67x (want >= 2x)"),
            "{}",
            c.detail
        );
        assert_eq!(
            compare("x", 1.0, 2.0, "GiB/s", "p", Some(0.95)).verdict,
            Verdict::Fail
        );
        let untargeted = compare("x", 1.0, 0.0, "GiB/s", "p", None);
        assert_eq!(untargeted.ratio, None);
        assert_eq!(untargeted.verdict, Verdict::Info);
        assert_eq!(
            compare("x", 0.0, 0.0, "GiB/s", "p", Some(1.0)).verdict,
            Verdict::Fail
        );
    }
}
