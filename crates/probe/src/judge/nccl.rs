//! The NCCL judgements of a pod's output: the version NCCL reports against a profile's pin and known-bad
//! list, the network it picked from its log (and whether that was the profile's device), and whether a
//! net plugin carried the traffic.

use serde::Serialize;

use crate::facts::nccl::NcclVersion;
use crate::nccl_ib_hca::{IbHca, UsedPort, net_ib_using};
use crate::verdict::{Check, Verdict, wire};

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

/// Judges that NCCL ran over NET/IB on the devices `ib_hca` (an `NCCL_IB_HCA` value: `mlx5`,
/// `=mlx5_0,mlx5_1`, `^mlx5_2`) selects, from its log ([`nccl_transport`]): every device port of its
/// `NET/IB : Using [0]mlx5_0:1/RoCE …` lines must be one the value selects, as NCCL parses and matches it
/// ([`IbHca`]). `ok` with the ports; `fail` naming a port outside the value (the variable did not reach
/// NCCL, or another one was set), a fallback to sockets, NET/IB without a `Using` line, or no transport
/// line, each with the fix.
pub fn nccl_uses_device(log: &str, ib_hca: &str) -> crate::Result<Check> {
    let t = nccl_transport(log)?;
    let c = |verdict, summary: String| Check::new("nccl-transport", ib_hca, verdict, summary);
    let with_fix = |c: Check, fix: Option<String>| match fix {
        Some(f) => c.with_fix(f),
        None => c,
    };
    Ok(match t.transport {
        NcclNet::Ib => {
            let hca = IbHca::parse(ib_hca);
            let used = net_ib_using(log);
            let shown = |u: &[&UsedPort]| {
                u.iter()
                    .map(|u| format!("{}:{}", u.device, u.port))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let (inside, outside): (Vec<&UsedPort>, Vec<&UsedPort>) =
                used.iter().partition(|u| hca.selects(&u.device, u.port));
            if used.is_empty() {
                c(
                    Verdict::Fail,
                    format!(
                        "NCCL used NET/IB but printed no `NET/IB : Using [0]dev:port` line naming its devices ({})",
                        t.evidence
                    ),
                )
                .with_fix("run with NCCL_DEBUG=INFO (the line is printed at init) and keep the whole log")
            } else if !outside.is_empty() {
                c(
                    Verdict::Fail,
                    format!(
                        "NCCL used {}, outside NCCL_IB_HCA={ib_hca}: {}",
                        shown(&outside),
                        t.evidence
                    ),
                )
                .with_fix(format!(
                    "check that NCCL_IB_HCA={ib_hca} reaches NCCL (the pod's env, mpirun -x) and that nothing else sets it"
                ))
            } else {
                c(
                    Verdict::Ok,
                    format!(
                        "NCCL used NET/IB on {}, inside NCCL_IB_HCA={ib_hca}",
                        shown(&inside)
                    ),
                )
            }
        }
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
    fn serialised_results_keep_the_status_scripts_read() -> Result<(), Box<dyn std::error::Error>> {
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
        assert_eq!(
            on.summary,
            "NCCL used NET/IB on erdma_0:1, inside NCCL_IB_HCA=erdma"
        );
        let other = nccl_uses_device(ib, "mlx5")?;
        assert_eq!(other.verdict, Verdict::Fail);
        assert!(
            other
                .summary
                .starts_with("NCCL used erdma_0:1, outside NCCL_IB_HCA=mlx5: "),
            "{}",
            other.summary
        );
        assert!(other.fix.unwrap_or_default().contains("NCCL_IB_HCA=mlx5"));
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

    /// Issue 25: a list value never appears in NCCL's line, so a text search failed every working run.
    #[test]
    fn list_values_of_nccl_ib_hca_pass_a_working_run() -> crate::Result<()> {
        let two = "w0:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE [RO]; OOB eth0:10.0.5.76<0>\n\
                   w1:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE [RO]; OOB eth0:10.0.5.77<0>\n";
        for hca in [
            "=mlx5_0,mlx5_1",
            "^mlx5_2",
            "mlx5",
            "=mlx5_0:1,mlx5_1:1",
            "^=mlx5_2,mlx5_3",
        ] {
            let c = nccl_uses_device(two, hca)?;
            assert_eq!(c.verdict, Verdict::Ok, "{hca}: {}", c.summary);
            assert!(c.summary.contains("mlx5_0:1, mlx5_1:1"), "{}", c.summary);
        }
        // A device outside the filter fails, named.
        for (hca, outside) in [
            ("=mlx5_0", "mlx5_1:1"),
            ("^mlx5_1", "mlx5_1:1"),
            ("=mlx5_0:1,mlx5_1:2", "mlx5_1:1"),
        ] {
            let c = nccl_uses_device(two, hca)?;
            assert_eq!(c.verdict, Verdict::Fail, "{hca}");
            assert!(
                c.summary
                    .starts_with(&format!("NCCL used {outside}, outside NCCL_IB_HCA={hca}")),
                "{}",
                c.summary
            );
        }
        // NET/IB without the line that names devices proves nothing about them.
        let bare = "w0:1:1 [0] NCCL INFO Using network IB\n";
        let c = nccl_uses_device(bare, "mlx5")?;
        assert_eq!(c.verdict, Verdict::Fail, "{}", c.summary);
        assert!(c.summary.contains("no `NET/IB : Using"), "{}", c.summary);
        Ok(())
    }
}
