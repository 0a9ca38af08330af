//! The RDMA-steering environment judged against what the check pods really have: each variable read with
//! its own library's grammar (NCCL's `^` exclude and `=` exact prefix lists; Gloo's exact names, no `^`),
//! the RoCE v2 GID index on every device of every pod, sidecar proxies, `/dev/shm`, locked memory. Every
//! finding names the pod, the cause and the fix.

use super::facts::PodFacts;
use crate::facts::LimitValue;
use crate::facts::limits::MEMLOCK_FIX;
use crate::nccl_ib_hca::IbHca;
use crate::verdict::{Check, Verdict};

/// `/dev/shm` below this fails: Docker's and containerd's 64 MiB default ends NCCL's shared-memory
/// transport in "unhandled system error" (NVIDIA/nccl#525).
pub const SHM_FAIL_BYTES: u64 = 256 << 20;
/// Below this warns: several NCCL communicators with their default buffers fill it.
pub const SHM_WARN_BYTES: u64 = 1 << 30;
/// Containers that proxy the pod's traffic and stall NCCL's sockets (NVIDIA/nccl#1638).
pub const SIDECAR_PROXIES: [&str; 4] = ["istio-proxy", "linkerd-proxy", "envoy", "cilium-envoy"];

/// `NCCL_SOCKET_IFNAME` as NCCL's `parseStringList`/`matchIfList` read it: optional `^` (exclude), then
/// optional `=` (exact names, else prefixes), comma-separated; nothing trimmed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NcclIfList {
    /// Leading `^`.
    pub exclude: bool,
    /// `=` after any `^`.
    pub exact: bool,
    /// The names or prefixes, empty ones dropped.
    pub entries: Vec<String>,
}

impl NcclIfList {
    /// Parses a value (never fails: NCCL accepts any string).
    pub fn parse(v: &str) -> NcclIfList {
        let (exclude, rest) = v.strip_prefix('^').map_or((false, v), |r| (true, r));
        let (exact, rest) = rest.strip_prefix('=').map_or((false, rest), |r| (true, r));
        NcclIfList {
            exclude,
            exact,
            entries: rest
                .split(',')
                .map(|e| e.split(':').next().unwrap_or(e))
                .filter(|e| !e.is_empty())
                .map(str::to_owned)
                .collect(),
        }
    }

    /// Whether NCCL may bind interface `name`.
    pub fn selects(&self, name: &str) -> bool {
        let listed = self.entries.iter().any(|e| {
            if self.exact {
                name == e
            } else {
                name.starts_with(e.as_str())
            }
        });
        listed != self.exclude
    }
}

/// The findings for `pods` (one per node), in a stable order: per pod, then across pods.
pub fn lint(pods: &[PodFacts]) -> Vec<Check> {
    let mut out = Vec::new();
    for p in pods {
        pod_findings(p, &mut out);
    }
    gid_index_across_pods(pods, &mut out);
    out
}

fn subject(p: &PodFacts, what: &str) -> String {
    format!("{what} in {} on {}", p.pod, p.node)
}

fn pod_findings(p: &PodFacts, out: &mut Vec<Check>) {
    let names: Vec<&str> = p.interfaces.iter().map(|i| i.name.as_str()).collect();
    let have = names.join(", ");
    if p.devices.is_empty() {
        out.push(
            Check::new("rdma-devices", subject(p, "RDMA devices"), Verdict::Fail, format!(
                "the pod sees no RDMA device (/dev/infiniband: {})",
                if p.dev_infiniband.present { p.dev_infiniband.entries.join(", ") } else { "absent".into() }
            ))
            .with_fix("request the profile's RDMA resource (resources.limits) or its ResourceClaim in the workload's container; check the device plugin / DRANET on that node (rdmakit preflight)"),
        );
    }
    for d in &p.devices {
        for port in d.ports.iter().filter(|x| !x.is_active()) {
            out.push(
                Check::new("port-state", subject(p, &format!("{} port {}", d.name, port.port)), Verdict::Fail, format!("port state {}", port.state))
                    .with_fix("bring the link up on the node (cable, switch port, `ip link set <netdev> up`); NCCL skips inactive ports"),
            );
        }
    }
    if let Some(v) = p.env.get("NCCL_SOCKET_IFNAME") {
        let list = NcclIfList::parse(v);
        let picked: Vec<&str> = names
            .iter()
            .copied()
            .filter(|n| list.selects(n) && (*n != "lo" || !list.exclude))
            .collect();
        out.push(if picked.is_empty() {
            Check::new("nccl-socket-ifname", subject(p, "NCCL_SOCKET_IFNAME"), Verdict::Fail, format!(
                "NCCL_SOCKET_IFNAME={v} matches none of the pod's interfaces ({have}): NCCL stops with \"Bootstrap : no socket interface found\""
            ))
            .with_fix(format!("set nccl.socket_ifname in the profile (or the manifest's env) to one of: {have}; NCCL reads a prefix unless the list starts with `=`"))
        } else {
            Check::new("nccl-socket-ifname", subject(p, "NCCL_SOCKET_IFNAME"), Verdict::Ok, format!("NCCL_SOCKET_IFNAME={v} selects {}", picked.join(", ")))
        });
    }
    if let Some(v) = p.env.get("GLOO_SOCKET_IFNAME") {
        let missing: Vec<&str> = v.split(',').filter(|n| !names.contains(n)).collect();
        out.push(if v.starts_with('^') || v.starts_with('=') {
            Check::new("gloo-socket-ifname", subject(p, "GLOO_SOCKET_IFNAME"), Verdict::Fail, format!(
                "GLOO_SOCKET_IFNAME={v} uses NCCL's `{}` syntax, which Gloo does not have: it looks for an interface of that name and fails",
                &v[..1]
            ))
            .with_fix(format!("give Gloo exact interface names, comma-separated (one of: {have}); keep `^`/`=` for NCCL_SOCKET_IFNAME only"))
        } else if !missing.is_empty() {
            Check::new("gloo-socket-ifname", subject(p, "GLOO_SOCKET_IFNAME"), Verdict::Fail, format!(
                "GLOO_SOCKET_IFNAME names {} which the pod does not have ({have})", missing.join(", ")
            ))
            .with_fix(format!("set GLOO_SOCKET_IFNAME to exact names among: {have}"))
        } else {
            Check::new("gloo-socket-ifname", subject(p, "GLOO_SOCKET_IFNAME"), Verdict::Ok, format!("GLOO_SOCKET_IFNAME={v} names existing interfaces"))
        });
    }
    if let Some(v) = p.env.get("NCCL_IB_HCA") {
        let hca = IbHca::parse(v);
        let devs: Vec<&str> = p.devices.iter().map(|d| d.name.as_str()).collect();
        let picked = hca.select(devs.iter().copied());
        out.push(if picked.is_empty() && !devs.is_empty() {
            Check::new("nccl-ib-hca", subject(p, "NCCL_IB_HCA"), Verdict::Fail, format!(
                "NCCL_IB_HCA={v} selects none of the pod's devices ({}): NCCL reports `NET/IB : No device found` and falls back to sockets",
                devs.join(", ")
            ))
            .with_fix(format!("set nccl.ib_hca in the profile to the devices the pod has ({}); `=` makes names exact, else they are prefixes", devs.join(", ")))
        } else if !hca.whitespace().is_empty() {
            Check::new("nccl-ib-hca", subject(p, "NCCL_IB_HCA"), Verdict::Warn, format!(
                "NCCL_IB_HCA={v} has entries with spaces ({}), which NCCL matches literally", hca.whitespace().join("|")
            ))
            .with_fix("remove the spaces after the commas")
        } else {
            Check::new("nccl-ib-hca", subject(p, "NCCL_IB_HCA"), Verdict::Ok, format!("NCCL_IB_HCA={v} selects {}", picked.join(", ")))
        });
    }
    if p.env
        .get("NCCL_IB_DISABLE")
        .is_some_and(|v| v.trim() == "1")
        && !p.devices.is_empty()
    {
        out.push(
            Check::new("nccl-ib-disable", subject(p, "NCCL_IB_DISABLE"), Verdict::Fail, "NCCL_IB_DISABLE=1 with RDMA devices present: NCCL uses sockets")
                .with_fix("remove NCCL_IB_DISABLE from the workload (it belongs only in the TCP half of an A/B)"),
        );
    }
    let proxies: Vec<&String> = p
        .sidecars
        .iter()
        .filter(|s| SIDECAR_PROXIES.iter().any(|x| s.contains(x)) || s.starts_with("annotation "))
        .collect();
    if !proxies.is_empty() {
        out.push(
            Check::new("sidecar-proxy", subject(p, "sidecars"), Verdict::Fail, format!(
                "the pod has a traffic-intercepting sidecar ({}): NCCL's bootstrap and socket transport stall behind the proxy",
                proxies.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
            ))
            .with_fix("exclude the workload from injection (pod annotation sidecar.istio.io/inject: \"false\", linkerd.io/inject: disabled) or use hostNetwork"),
        );
    }
    match p.shm_bytes {
        Some(b) if b < SHM_FAIL_BYTES => out.push(
            Check::new("dev-shm", subject(p, "/dev/shm"), Verdict::Fail, format!(
                "/dev/shm is {}: NCCL's shared-memory transport fails with \"unhandled system error\"", crate::units::human_bytes(b)
            ))
            .with_fix("mount an emptyDir with medium: Memory at /dev/shm (the profile's pod.shm_size)"),
        ),
        Some(b) if b < SHM_WARN_BYTES => out.push(
            Check::new("dev-shm", subject(p, "/dev/shm"), Verdict::Warn, format!("/dev/shm is {}: tight for several NCCL communicators", crate::units::human_bytes(b)))
                .with_fix("raise the /dev/shm emptyDir's sizeLimit to at least 1 GiB"),
        ),
        _ => {}
    }
    match (p.memlock, p.cap_ipc_lock) {
        (Some(LimitValue::Bytes(b)), ipc) if b < (1 << 30) => out.push(
            Check::new(
                "memlock",
                subject(p, "RLIMIT_MEMLOCK"),
                Verdict::Fail,
                format!(
                    "locked memory is limited to {}{}: ibv_reg_mr / ibv_create_qp fail with ENOMEM",
                    crate::units::human_bytes(b),
                    if ipc == Some(false) {
                        " and CAP_IPC_LOCK is missing"
                    } else {
                        ""
                    }
                ),
            )
            .with_fix(MEMLOCK_FIX),
        ),
        _ => {}
    }
    if p.cap_ipc_lock == Some(false) && !p.devices.is_empty() {
        out.push(
            Check::new(
                "cap-ipc-lock",
                subject(p, "CAP_IPC_LOCK"),
                Verdict::Warn,
                format!(
                    "CAP_IPC_LOCK is not in CapEff ({})",
                    p.cap_eff.as_deref().unwrap_or("?")
                ),
            )
            .with_fix("add IPC_LOCK to the container's securityContext.capabilities.add"),
        );
    }
}

/// A RoCE port of a pod: device, port, the GID index it wants, its table as `(index, "type gid")`.
type RocePort = (String, u32, Option<u32>, Vec<(u32, String)>);

/// `NCCL_IB_GID_INDEX` on RoCE: the index must hold a RoCE v2 GID with an address on every Ethernet-link
/// device of every pod (under macvlan the index differs per pod: NVIDIA/nccl#1573, #1587); unset, the
/// indexes the pods would need are compared.
fn gid_index_across_pods(pods: &[PodFacts], out: &mut Vec<Check>) {
    let roce = |p: &PodFacts| -> Vec<RocePort> {
        p.devices
            .iter()
            .flat_map(|d| {
                d.ports
                    .iter()
                    .filter(|x| {
                        x.link_layer.as_deref() == Some("Ethernet")
                            && x.gids.iter().any(|g| g.gid_type.is_some())
                    })
                    .map(|x| {
                        let table = x
                            .gids
                            .iter()
                            .map(|g| {
                                (
                                    g.index,
                                    format!("{} {}", g.gid_type.as_deref().unwrap_or("?"), g.gid),
                                )
                            })
                            .collect();
                        (d.name.clone(), x.port, x.suggested_gid_index(), table)
                    })
                    .collect::<Vec<_>>()
            })
            .collect()
    };
    let mut suggested = std::collections::BTreeMap::<u32, Vec<String>>::new();
    for p in pods {
        let Some(v) = p.env.get("NCCL_IB_GID_INDEX") else {
            for (dev, _, s, _) in roce(p) {
                if let Some(s) = s {
                    suggested
                        .entry(s)
                        .or_default()
                        .push(format!("{}/{dev}", p.node));
                }
            }
            continue;
        };
        let Ok(idx) = v.trim().parse::<u32>() else {
            out.push(
                Check::new(
                    "nccl-ib-gid-index",
                    subject(p, "NCCL_IB_GID_INDEX"),
                    Verdict::Fail,
                    format!("NCCL_IB_GID_INDEX={v} is not a number"),
                )
                .with_fix(
                    "set it to the RoCE v2 GID index (rdmakit check lists each device's table)",
                ),
            );
            continue;
        };
        let device_port = |d: &crate::facts::RdmaDevice, port: u32| {
            d.ports
                .iter()
                .find(|x| x.port == port)
                .and_then(|x| x.gids.iter().find(|g| g.index == idx))
                .cloned()
        };
        for (dev, port, best, table) in roce(p) {
            let d = p.devices.iter().find(|d| d.name == dev);
            let entry = d.and_then(|d| device_port(d, port));
            // RoCE v2 with an IP address: the link-local fe80 entry is a v2 GID too, but not routable
            // between nodes.
            let good = entry.as_ref().is_some_and(|g| {
                g.gid_type
                    .as_deref()
                    .is_some_and(|t| t.to_ascii_lowercase().contains("v2"))
                    && g.netdev.is_some()
                    && !g.gid.to_ascii_lowercase().starts_with("fe80")
            });
            if !good {
                let what = match &entry {
                    None => format!("index {idx} is empty"),
                    Some(g) => format!(
                        "index {idx} is {} {}",
                        g.gid_type.as_deref().unwrap_or("untyped"),
                        g.gid
                    ),
                };
                out.push(
                    Check::new("nccl-ib-gid-index", subject(p, &format!("NCCL_IB_GID_INDEX on {dev} port {port}")), Verdict::Fail, format!(
                        "{what}, not a RoCE v2 GID with an address (table: {})",
                        table.iter().map(|(i, t)| format!("{i}={t}")).collect::<Vec<_>>().join("; ")
                    ))
                    .with_fix(match best {
                        Some(b) => format!("set nccl.gid_index to {b} (the IPv4-mapped RoCE v2 entry), or leave it unset so NCCL picks per device"),
                        None => "give the device's netdev an IP address (RoCE v2 needs one), then set NCCL_IB_GID_INDEX to its RoCE v2 entry".into(),
                    }),
                );
            }
        }
    }
    if suggested.len() > 1 {
        out.push(
            Check::new("nccl-ib-gid-index", "NCCL_IB_GID_INDEX across pods", Verdict::Warn, format!(
                "the RoCE v2 GID index differs between pods: {}",
                suggested.iter().map(|(i, at)| format!("{i} on {}", at.join(", "))).collect::<Vec<_>>().join("; ")
            ))
            .with_fix("do not pin one NCCL_IB_GID_INDEX for all pods; let NCCL ≥ 2.21 choose (NCCL_IB_ROCE_VERSION_NUM=2, NCCL_IB_ADDR_FAMILY=AF_INET)"),
        );
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::check::facts::PodInterface;
    use crate::facts::{DevInfiniband, DeviceKind, GidEntry, RdmaDevice, RdmaPort};

    fn port(gids: &[(u32, &str, &str)]) -> RdmaPort {
        RdmaPort {
            port: 1,
            state: "4: ACTIVE".into(),
            phys_state: None,
            link_layer: Some("Ethernet".into()),
            rate: Some("100 Gb/sec (4X EDR)".into()),
            gids: gids
                .iter()
                .map(|(i, t, g)| GidEntry {
                    index: *i,
                    gid: (*g).into(),
                    gid_type: Some((*t).into()),
                    netdev: Some("eth1".into()),
                })
                .collect(),
            hw_counters: Vec::new(),
            counters: Vec::new(),
        }
    }

    const V4: &str = "0000:0000:0000:0000:0000:ffff:0a00:0105";
    const LL: &str = "fe80:0000:0000:0000:0000:0000:0000:0001";

    fn pod(name: &str, env: &[(&str, &str)], gids: &[(u32, &str, &str)]) -> PodFacts {
        PodFacts {
            pod: name.into(),
            node: format!("node-{name}"),
            devices: vec![RdmaDevice {
                name: "mlx5_0".into(),
                kind: DeviceKind::classify("mlx5_0", None, None),
                node_guid: None,
                node_type: None,
                fw_ver: None,
                vendor_id: None,
                device_id: None,
                parent_netdev: None,
                ports: vec![port(gids)],
            }],
            dev_infiniband: DevInfiniband::default(),
            interfaces: ["lo", "eth0", "net1"]
                .map(|n| PodInterface {
                    name: n.into(),
                    operstate: Some("up".into()),
                    addresses: Vec::new(),
                })
                .to_vec(),
            memlock: Some(LimitValue::Unlimited),
            cap_ipc_lock: Some(true),
            cap_eff: Some("00000000a80445fb".into()),
            shm_bytes: Some(8 << 30),
            env: env
                .iter()
                .map(|(k, v)| ((*k).into(), (*v).into()))
                .collect::<BTreeMap<_, _>>(),
            gpus: Vec::new(),
            topo: None,
            libraries: Vec::new(),
            sidecars: Vec::new(),
            unreadable: Vec::new(),
        }
    }

    fn failing(c: &[Check]) -> Vec<&str> {
        c.iter()
            .filter(|c| c.verdict == Verdict::Fail)
            .map(|c| c.id.as_str())
            .collect()
    }

    const GOOD: [(u32, &str, &str); 4] = [
        (0, "IB/RoCE v1", LL),
        (1, "RoCE v2", LL),
        (2, "IB/RoCE v1", V4),
        (3, "RoCE v2", V4),
    ];

    #[test]
    fn a_healthy_pod_has_no_failure() {
        let p = pod(
            "a",
            &[
                ("NCCL_SOCKET_IFNAME", "eth0"),
                ("NCCL_IB_HCA", "=mlx5_0"),
                ("NCCL_IB_GID_INDEX", "3"),
                ("GLOO_SOCKET_IFNAME", "eth0"),
            ],
            &GOOD,
        );
        let c = lint(&[p]);
        assert!(failing(&c).is_empty(), "{c:#?}");
        assert!(
            c.iter()
                .any(|c| c.id == "nccl-socket-ifname" && c.summary.contains("selects eth0"))
        );
    }

    #[test]
    fn interface_grammars_are_each_librarys_own() {
        // NCCL: prefix, `^` exclude, `=` exact.
        assert!(NcclIfList::parse("eth").selects("eth0"));
        assert!(!NcclIfList::parse("=eth").selects("eth0"));
        assert!(
            !NcclIfList::parse("^eth,lo").selects("eth0")
                && NcclIfList::parse("^eth,lo").selects("net1")
        );
        let c = lint(&[pod("a", &[("NCCL_SOCKET_IFNAME", "ens5")], &GOOD)]);
        let f = c.iter().find(|c| c.id == "nccl-socket-ifname").unwrap();
        assert_eq!(f.verdict, Verdict::Fail);
        assert!(
            f.summary.contains("lo, eth0, net1")
                && f.fix.as_deref().unwrap().contains("socket_ifname"),
            "{f:?}"
        );
        // Gloo has no `^`: NCCL's exclusion syntax there is a failure, a missing name too.
        let c = lint(&[pod("a", &[("GLOO_SOCKET_IFNAME", "^lo,docker")], &GOOD)]);
        let f = c.iter().find(|c| c.id == "gloo-socket-ifname").unwrap();
        assert!(
            f.verdict == Verdict::Fail && f.summary.contains("`^`"),
            "{f:?}"
        );
        let c = lint(&[pod("a", &[("GLOO_SOCKET_IFNAME", "eth0,bond0")], &GOOD)]);
        assert!(c.iter().any(|c| c.id == "gloo-socket-ifname"
            && c.verdict == Verdict::Fail
            && c.summary.contains("bond0")));
    }

    #[test]
    fn ib_hca_and_ib_disable_name_the_devices() {
        let c = lint(&[pod("a", &[("NCCL_IB_HCA", "=mlx5_1")], &GOOD)]);
        let f = c.iter().find(|c| c.id == "nccl-ib-hca").unwrap();
        assert!(
            f.verdict == Verdict::Fail && f.summary.contains("mlx5_0"),
            "{f:?}"
        );
        assert_eq!(
            failing(&lint(&[pod("a", &[("NCCL_IB_DISABLE", "1")], &GOOD)])),
            ["nccl-ib-disable"]
        );
    }

    #[test]
    fn a_wrong_gid_index_fails_with_the_table_and_the_right_index() {
        // The link-local RoCE v2 entry has no IP address: not routable between nodes.
        let ll = lint(&[pod("a", &[("NCCL_IB_GID_INDEX", "1")], &GOOD)]);
        assert!(
            ll.iter()
                .any(|c| c.id == "nccl-ib-gid-index" && c.verdict == Verdict::Fail),
            "{ll:#?}"
        );
        let c = lint(&[pod("a", &[("NCCL_IB_GID_INDEX", "2")], &GOOD)]);
        let f = c.iter().find(|c| c.id == "nccl-ib-gid-index").unwrap();
        assert_eq!(f.verdict, Verdict::Fail, "{f:?}");
        assert!(
            f.summary.contains("index 2 is IB/RoCE v1")
                && f.fix.as_deref().unwrap().contains("to 3"),
            "{f:?}"
        );
        // Unset, and the right index differs per pod (macvlan): a warning naming both.
        let shifted = [
            (0, "IB/RoCE v1", LL),
            (1, "RoCE v2", LL),
            (2, "IB/RoCE v1", V4),
            (5, "RoCE v2", V4),
        ];
        let c = lint(&[pod("a", &[], &GOOD), pod("b", &[], &shifted)]);
        let f = c.iter().find(|c| c.id == "nccl-ib-gid-index").unwrap();
        assert!(
            f.verdict == Verdict::Warn
                && f.summary.contains("3 on node-a")
                && f.summary.contains("5 on node-b"),
            "{f:?}"
        );
    }

    #[test]
    fn shm_sidecars_memlock_and_missing_devices() {
        let mut p = pod("a", &[], &GOOD);
        p.shm_bytes = Some(64 << 20);
        p.sidecars = vec!["istio-proxy".into()];
        p.memlock = Some(LimitValue::Bytes(64 << 10));
        p.cap_ipc_lock = Some(false);
        let c = lint(&[p.clone()]);
        assert_eq!(
            failing(&c),
            ["sidecar-proxy", "dev-shm", "memlock"],
            "{c:#?}"
        );
        assert!(
            c.iter()
                .any(|c| c.id == "cap-ipc-lock" && c.verdict == Verdict::Warn)
        );
        p.devices.clear();
        assert!(failing(&lint(&[p])).contains(&"rdma-devices"));
    }
}
