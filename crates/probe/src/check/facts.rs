//! One check pod's facts: its [`Dump`] read back through the host readers ([`crate::facts`]), plus what
//! only the dump's commands tell (interface addresses, `/dev/shm`, the RDMA-steering environment, GPUs,
//! libraries) and what only the pod spec tells (the containers beside the workload's: sidecars).

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::dump::Dump;
use crate::error::Result;
use crate::facts::{DevInfiniband, LimitValue, RdmaDevice, limits, rdma};

/// One interface in the pod's network namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodInterface {
    /// Name (`eth0`, `net1`, `lo`).
    pub name: String,
    /// `operstate` (`up`, `down`, `unknown`), when sysfs had it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operstate: Option<String>,
    /// Addresses with prefix length (`10.0.0.5/24`), from `ip -o addr`.
    pub addresses: Vec<String>,
}

/// What one check pod showed. Every field is what the pod printed; `unreadable` says what it did not.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PodFacts {
    /// The check pod.
    pub pod: String,
    /// Its node.
    pub node: String,
    /// RDMA devices with ports, link rates, GID tables (types, netdevs).
    pub devices: Vec<RdmaDevice>,
    /// `/dev/infiniband`.
    pub dev_infiniband: DevInfiniband,
    /// Interfaces in the pod's netns.
    pub interfaces: Vec<PodInterface>,
    /// Soft RLIMIT_MEMLOCK.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memlock: Option<LimitValue>,
    /// CAP_IPC_LOCK in CapEff.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cap_ipc_lock: Option<bool>,
    /// CapEff as printed (hex).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cap_eff: Option<String>,
    /// Size of `/dev/shm` in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shm_bytes: Option<u64>,
    /// `NCCL_*`, `GLOO_*`, `UCX_*`, `FI_*`, `TORCH_NCCL_*` in the container.
    pub env: BTreeMap<String, String>,
    /// `nvidia-smi -L` lines.
    pub gpus: Vec<String>,
    /// `nvidia-smi topo -m`, when it ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topo: Option<String>,
    /// NCCL, verbs, EFA/libfabric libraries found.
    pub libraries: Vec<String>,
    /// Containers of the pod other than the probed one, and sidecar-injection annotations.
    pub sidecars: Vec<String>,
    /// What could not be read, and why.
    pub unreadable: Vec<String>,
}

impl PodFacts {
    /// Reads `dump` (laid out under the empty directory `scratch`) for pod `pod` on `node`.
    pub fn from_dump(pod: &str, node: &str, dump: &Dump, scratch: &Path) -> Result<PodFacts> {
        dump.write_tree(scratch)?;
        let mut unreadable = Vec::new();
        if dump.format.is_none() {
            unreadable.push(
                "the dump script printed no format line (not run, or no sh in the image)".into(),
            );
        }
        if !dump.complete {
            unreadable.push("the dump was cut short (no `### end`)".into());
        }
        let devices = rdma::read_devices(scratch)?;
        let dev_infiniband = rdma::read_dev_infiniband(scratch)?;
        let memlock = limits::read_memlock(scratch)?.map(|m| m.soft).or_else(|| {
            dump.cmd("ulimit-l").and_then(|s| {
                let s = s.trim();
                if s == "unlimited" {
                    Some(LimitValue::Unlimited)
                } else {
                    s.parse::<u64>().ok().map(|k| LimitValue::Bytes(k * 1024))
                }
            })
        });
        let caps = limits::read_capabilities(scratch)?;
        let cap_eff = dump
            .files
            .get("/proc/self/status")
            .and_then(|s| s.lines().find_map(|l| l.strip_prefix("CapEff:")))
            .map(|v| v.trim().to_owned());
        if caps.is_none() {
            unreadable.push("/proc/self/status (CapEff)".into());
        }
        let shm_bytes = dump.cmd("shm").and_then(parse_df_kib).map(|k| k * 1024);
        if shm_bytes.is_none() {
            unreadable.push("/dev/shm size (df -k /dev/shm)".into());
        }
        let interfaces = interfaces(dump);
        let env = dump
            .cmd("env")
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        let gpus = dump
            .cmd("gpus")
            .unwrap_or_default()
            .lines()
            .filter(|l| l.starts_with("GPU "))
            .map(str::to_owned)
            .collect();
        let topo = dump
            .cmd("topo")
            .filter(|t| t.contains("GPU0") || t.contains("NIC0"))
            .map(str::to_owned);
        let libraries = dump
            .cmd("libraries")
            .unwrap_or_default()
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect();
        Ok(PodFacts {
            pod: pod.to_owned(),
            node: node.to_owned(),
            devices,
            dev_infiniband,
            interfaces,
            memlock,
            cap_ipc_lock: caps.map(|c| c.ipc_lock()),
            cap_eff,
            shm_bytes,
            env,
            gpus,
            topo,
            libraries,
            sidecars: Vec::new(),
            unreadable,
        })
    }

    /// The first IPv4 address of `iface`, without its prefix length.
    pub fn ipv4_of(&self, iface: &str) -> Option<&str> {
        self.interfaces
            .iter()
            .find(|i| i.name == iface)?
            .addresses
            .iter()
            .map(|a| a.split('/').next().unwrap_or(a))
            .find(|a| a.parse::<std::net::Ipv4Addr>().is_ok())
    }
}

/// The size column of `df -k` (GNU: `Filesystem 1K-blocks Used Available Use% Mounted on`; busybox
/// alike), for the one mount it was asked about.
fn parse_df_kib(text: &str) -> Option<u64> {
    text.lines()
        .skip_while(|l| !l.contains("blocks"))
        .skip(1)
        .find_map(|l| l.split_whitespace().nth(1)?.parse().ok())
}

/// Interfaces from `/sys/class/net` (with operstate) and `ip -o addr` (with addresses), in sysfs order,
/// then any only `ip` listed.
fn interfaces(dump: &Dump) -> Vec<PodInterface> {
    let mut out: Vec<PodInterface> = dump
        .dirs
        .get("/sys/class/net")
        .into_iter()
        .flatten()
        .map(|n| PodInterface {
            name: n.clone(),
            operstate: dump
                .files
                .get(&format!("/sys/class/net/{n}/operstate"))
                .cloned(),
            addresses: Vec::new(),
        })
        .collect();
    // `2: eth0    inet 10.0.0.5/24 brd ... scope global eth0` (the name may carry `@if7`).
    for l in dump.cmd("addresses").unwrap_or_default().lines() {
        let w: Vec<&str> = l.split_whitespace().collect();
        let (Some(name), Some(fam)) = (
            w.get(1),
            w.iter().position(|x| *x == "inet" || *x == "inet6"),
        ) else {
            continue;
        };
        let name = name.trim_end_matches(':').split('@').next().unwrap_or(name);
        let Some(addr) = w.get(fam + 1) else { continue };
        match out.iter_mut().find(|i| i.name == name) {
            Some(i) => i.addresses.push((*addr).to_owned()),
            None => out.push(PodInterface {
                name: name.to_owned(),
                operstate: None,
                addresses: vec![(*addr).to_owned()],
            }),
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_script_runs_under_sh_and_reads_back() {
        let out = std::process::Command::new("sh")
            .args(["-c", super::super::dump::DUMP_SCRIPT])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let d = Dump::parse(&text);
        assert!(d.complete && d.format.is_some(), "{text}");
        let tmp = tempfile::tempdir().unwrap();
        let f = PodFacts::from_dump("p", "n", &d, tmp.path()).unwrap();
        // This machine: no RDMA, but a status file, limits and interfaces.
        assert!(f.cap_eff.is_some(), "{f:?}");
        assert!(f.memlock.is_some(), "{f:?}");
        assert!(f.interfaces.iter().any(|i| i.name == "lo"), "{f:?}");
        assert!(f.shm_bytes.is_some_and(|b| b > 0), "{f:?}");
    }

    #[test]
    fn df_and_ip_output_parse() {
        let df = "Filesystem     1K-blocks  Used Available Use% Mounted on\nshm                65536     0     65536   0% /dev/shm";
        assert_eq!(parse_df_kib(df), Some(65536));
        let d = Dump::parse(
            "### rdmakit-check-dump 1\n### dir /sys/class/net\neth0\n### file /sys/class/net/eth0/operstate\nup\n\
             ### cmd addresses\n1: lo    inet 127.0.0.1/8 scope host lo\n2: eth0@if9    inet 10.0.1.5/24 brd 10.0.1.255 scope global eth0\n\
             3: net1    inet6 fe80::1/64 scope link\n### end\n",
        );
        let i = interfaces(&d);
        assert_eq!(i[0].name, "eth0");
        assert_eq!(i[0].addresses, ["10.0.1.5/24"]);
        assert_eq!(i[0].operstate.as_deref(), Some("up"));
        assert!(
            i.iter()
                .any(|x| x.name == "net1" && x.addresses == ["fe80::1/64"])
        );
    }
}
