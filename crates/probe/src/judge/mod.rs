//! Judgements of what a command printed inside a pod, as workflows make them: text in, a [`Verdict`]
//! out. RLIMIT_MEMLOCK from `ulimit -l`, the NCCL version against a profile's pins, the transport NCCL
//! picked from its log (and whether it was the profile's device), an active port in `ibv_devinfo`'s
//! output, whether a net plugin carried the traffic, and our figure beside a peer's. The NCCL ones
//! (version, transport, device, net plugin) are in `judge/nccl.rs`; memlock, ports, counters and
//! comparisons here.
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
use crate::nccl_ib_hca::{IbHca, device_names};
use crate::parse::{IbvDevice, IbvPort, parse_ibv_devinfo};
use crate::verdict::{Check, Verdict, wire};

mod nccl;
pub use nccl::{
    NcclNet, NcclPolicy, NcclTransport, NcclVersionVerdict, NetPluginFacts, NetPluginPath,
    find_nccl_version, nccl_net_plugin_path, nccl_transport, nccl_uses_device, nccl_version,
};

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

/// Judges that `ibv_devinfo` output (every device, each queried by its exact name) has a device port
/// that `ib_hca` (an `NCCL_IB_HCA` value: `mlx5`, `=mlx5_0,mlx5_1`, `^mlx5_2`) selects, as NCCL matches
/// it ([`IbHca`]), in PORT_ACTIVE: `ok` naming the active selected ports, their link layer and transport;
/// `fail` with the selected ports' states, or with the devices listed when the value selects none of them
/// (output that is no `ibv_devinfo` lists none; the caller adds the command's stderr and its own fix).
pub fn ibv_port_active(text: &str, ib_hca: &str) -> Check {
    let devices = parse_ibv_devinfo(text).unwrap_or_default();
    let hca = IbHca::parse(ib_hca);
    let text_of = |v: &Option<String>| v.clone().unwrap_or_default();
    let selected: Vec<(&IbvDevice, &IbvPort)> = devices
        .iter()
        .flat_map(|d| d.ports.iter().map(move |p| (d, p)))
        .filter(|(d, p)| hca.selects(&d.hca_id, p.port))
        .collect();
    let names: Vec<&str> = devices.iter().map(|d| d.hca_id.as_str()).collect();
    if selected.is_empty() {
        return Check::new(
            "ibv-port-active",
            ib_hca,
            Verdict::Fail,
            format!(
                "NCCL_IB_HCA={ib_hca} selects no device port in the ibv_devinfo output (devices: {names:?})"
            ),
        );
    }
    let active: Vec<String> = selected
        .iter()
        .filter(|(_, p)| p.is_active())
        .map(|(d, p)| {
            format!(
                "{} port {} {}, link_layer {}, transport {}",
                d.hca_id,
                p.port,
                text_of(&p.state),
                text_of(&p.link_layer),
                text_of(&d.transport)
            )
        })
        .collect();
    let subject = selected
        .iter()
        .map(|(d, _)| d.hca_id.as_str())
        .fold(Vec::<&str>::new(), |mut acc, n| {
            if !acc.contains(&n) {
                acc.push(n);
            }
            acc
        })
        .join(",");
    if !active.is_empty() {
        return Check::new("ibv-port-active", subject, Verdict::Ok, active.join("; "));
    }
    let states: Vec<String> = selected
        .iter()
        .map(|(d, p)| format!("{} port {} {}", d.hca_id, p.port, text_of(&p.state)))
        .collect();
    Check::new(
        "ibv-port-active",
        subject,
        Verdict::Fail,
        format!("no port NCCL_IB_HCA={ib_hca} selects is active ({states:?})"),
    )
    .with_fix("check the link and the RDMA agent on that node")
}

/// The RDMA devices of a listing (`ibv_devinfo -l`, `ls /sys/class/infiniband`) that `ib_hca` selects
/// as NCCL would ([`IbHca::select`]): `ok` naming them beside the listed ones; `fail` when it selects
/// none, naming what is there (the caller adds why a device can be missing).
pub fn ib_hca_listed(listing: &str, ib_hca: &str) -> Check {
    let names = device_names(listing);
    let hca = IbHca::parse(ib_hca);
    let picked = hca.select(names.iter().map(String::as_str));
    let spaced = hca.whitespace();
    let note = if spaced.is_empty() {
        String::new()
    } else {
        format!("; NCCL keeps the spaces in {spaced:?} as part of the name")
    };
    if picked.is_empty() {
        return Check::new(
            "ib-hca-devices",
            ib_hca,
            Verdict::Fail,
            format!(
                "NCCL_IB_HCA={ib_hca} selects none of the RDMA devices in the pod ({}){note}",
                if names.is_empty() {
                    "none listed".to_owned()
                } else {
                    names.join(", ")
                }
            ),
        );
    }
    Check::new(
        "ib-hca-devices",
        ib_hca,
        Verdict::Ok,
        format!(
            "NCCL_IB_HCA={ib_hca} selects {} of {}{note}",
            picked.join(", "),
            names.join(", ")
        ),
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
    fn serialised_results_keep_the_flags_scripts_read() -> serde_json::Result<()> {
        let m = serde_json::to_value(memlock("64\n"))?;
        assert_eq!((&m["verdict"], &m["ok"]), (&"fail".into(), &false.into()));
        assert_eq!(m["value"], "64 KiB");
        // Without a target a comparison is information, and `ok` as it always was.
        let c = serde_json::to_value(compare("x", 1.0, 2.0, "GiB/s", "p", None))?;
        assert_eq!((&c["verdict"], &c["ok"]), (&"info".into(), &true.into()));
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
            r#"no port NCCL_IB_HCA=erdma_0 selects is active (["erdma_0 port 1 PORT_DOWN (1)"])"#
        );
        let missing = ibv_port_active(out, "mlx5");
        assert_eq!(
            missing.summary,
            r#"NCCL_IB_HCA=mlx5 selects no device port in the ibv_devinfo output (devices: ["erdma_0"])"#
        );
        assert_eq!(
            ibv_port_active("bash: ibv_devinfo: not found", "mlx5").summary,
            "NCCL_IB_HCA=mlx5 selects no device port in the ibv_devinfo output (devices: [])"
        );
    }

    fn mlx5_devinfo() -> String {
        let dev = |name: &str, state: &str| {
            format!(
                "hca_id:\t{name}\n\ttransport:\t\t\tInfiniBand (0)\n\t\tport:\t1\n\t\t\tstate:\t\t\t{state}\n\t\t\tlink_layer:\t\tEthernet\n\n"
            )
        };
        [
            dev("mlx5_0", "PORT_ACTIVE (4)"),
            dev("mlx5_1", "PORT_ACTIVE (4)"),
            dev("mlx5_bond_0", "PORT_DOWN (1)"),
        ]
        .concat()
    }

    /// Issue 25: the ib_hca values of mlx5 profiles (a prefix, lists) judged as NCCL matches them.
    #[test]
    fn nccl_ib_hca_values_over_every_device() {
        let out = mlx5_devinfo();
        for hca in ["mlx5", "=mlx5_0,mlx5_1", "^mlx5_bond", "mlx5_0:1"] {
            let c = ibv_port_active(&out, hca);
            assert_eq!(c.verdict, Verdict::Ok, "{hca}: {}", c.summary);
            assert!(
                c.summary.starts_with("mlx5_0 port 1 PORT_ACTIVE"),
                "{}",
                c.summary
            );
        }
        let down = ibv_port_active(&out, "=mlx5_bond_0");
        assert_eq!(down.verdict, Verdict::Fail);
        assert!(
            down.summary.contains("mlx5_bond_0 port 1 PORT_DOWN"),
            "{}",
            down.summary
        );
        assert_eq!(ibv_port_active(&out, "=mlx5").verdict, Verdict::Fail);
    }

    #[test]
    fn devices_listed_in_the_pod_against_nccl_ib_hca() {
        let ls = "unlimited\nrdma_cm\nuverbs0\nuverbs1\n2 HCAs found:\n\tmlx5_0\n\tmlx5_1\n";
        let ok = ib_hca_listed(ls, "=mlx5_0,mlx5_1");
        assert_eq!(ok.verdict, Verdict::Ok);
        assert_eq!(
            ok.summary,
            "NCCL_IB_HCA==mlx5_0,mlx5_1 selects mlx5_0, mlx5_1 of mlx5_0, mlx5_1"
        );
        let none = ib_hca_listed(ls, "erdma");
        assert_eq!(none.verdict, Verdict::Fail);
        assert_eq!(
            none.summary,
            "NCCL_IB_HCA=erdma selects none of the RDMA devices in the pod (mlx5_0, mlx5_1)"
        );
        let spaced = ib_hca_listed(ls, "=mlx5_0, mlx5_1");
        assert!(
            spaced
                .summary
                .ends_with(r#"NCCL keeps the spaces in [" mlx5_1"] as part of the name"#),
            "{}",
            spaced.summary
        );
        assert!(
            ib_hca_listed("0 HCAs found:\n", "mlx5")
                .summary
                .contains("none listed")
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
