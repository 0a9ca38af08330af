//! Host facts: what a pod or node offers for RDMA, each judged with a verdict and a fix.
//!
//! Every reader takes the root of the filesystem to probe (`/` live, a fixture tree in tests).

pub mod gpu;
pub mod limits;
#[cfg(feature = "live")]
pub mod live;
pub mod nccl;
pub mod net;
pub mod rdma;

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::verdict::{Check, Verdict};

pub use gpu::{GdrFacts, Gpu, GpuFacts};
pub use limits::{Capabilities, LimitValue, Memlock};
pub use nccl::{NcclInstall, NcclSource, NcclVersion, SearchPaths, TorchInfo};
pub use net::NetInterface;
pub use rdma::{DevInfiniband, DeviceKind, GidEntry, RdmaDevice, RdmaPort};

/// What to probe and how.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeOptions {
    /// Root of the filesystem to read (`/` on a live host).
    pub root: PathBuf,
    /// Where to look for NCCL and torch.
    pub search: SearchPaths,
    /// Environment to judge (`NCCL_IB_HCA`, `NCCL_SOCKET_IFNAME`, `NCCL_IB_GID_INDEX`,
    /// `NCCL_IB_DISABLE`); pass `std::env::vars()` for the current process.
    pub env: BTreeMap<String, String>,
    /// Also ask libibverbs (through erdma-verbs) for the devices and their caps. Only meaningful
    /// for the live root `/`; off for fixture roots. Needs the `live` feature (on by default);
    /// without it the facts carry an `info` check saying libibverbs was not asked.
    #[serde(default)]
    pub live_verbs: bool,
}

impl ProbeOptions {
    /// Probe `root` with the default search paths and no environment.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self {
            root: root.into(),
            search: SearchPaths::default(),
            env: BTreeMap::new(),
            live_verbs: false,
        }
    }

    /// Probe the live host with the current process environment.
    pub fn live() -> Self {
        let mut o = Self::new("/");
        o.env = std::env::vars()
            .filter(|(k, _)| k.starts_with("NCCL_"))
            .collect();
        o.live_verbs = true;
        o
    }

    /// Set an environment variable to judge.
    pub fn with_env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(key.into(), value.into());
        self
    }
}

/// Everything probed on one host, with the judged checks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostFacts {
    /// The root that was probed.
    pub root: PathBuf,
    /// RDMA devices.
    pub rdma_devices: Vec<RdmaDevice>,
    /// `/dev/infiniband`.
    pub dev_infiniband: DevInfiniband,
    /// RLIMIT_MEMLOCK, when `/proc/self/limits` was readable.
    pub memlock: Option<Memlock>,
    /// Effective capabilities, when `/proc/self/status` was readable.
    pub capabilities: Option<Capabilities>,
    /// NCCL installs found.
    pub nccl: Vec<NcclInstall>,
    /// torch and the NCCL it declares.
    pub torch: Option<TorchInfo>,
    /// GPUs.
    pub gpu: GpuFacts,
    /// GPUDirect RDMA.
    pub gdr: GdrFacts,
    /// Candidate interfaces for `NCCL_SOCKET_IFNAME`.
    pub interfaces: Vec<NetInterface>,
    /// The environment that was judged.
    pub env: BTreeMap<String, String>,
    /// What libibverbs sees (when `live_verbs` was on; the `live` feature).
    #[cfg(feature = "live")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live: Option<live::LiveVerbs>,
    /// Judged checks, in a stable order.
    pub checks: Vec<Check>,
}

impl HostFacts {
    /// Read everything under `opts.root` and judge it.
    pub fn gather(opts: &ProbeOptions) -> Result<Self> {
        let root = opts.root.as_path();
        let rdma_devices = rdma::read_devices(root)?;
        let dev_infiniband = rdma::read_dev_infiniband(root)?;
        let memlock = limits::read_memlock(root)?;
        let capabilities = limits::read_capabilities(root)?;
        let (nccl, torch) = nccl::find_nccl(root, &opts.search)?;
        let gpu = gpu::read_gpus(root)?;
        let gdr = gpu::read_gdr(root, &gpu)?;
        let interfaces = net::read_interfaces(root)?;
        let mut facts = HostFacts {
            root: opts.root.clone(),
            rdma_devices,
            dev_infiniband,
            memlock,
            capabilities,
            nccl,
            torch,
            gpu,
            gdr,
            interfaces,
            env: opts.env.clone(),
            #[cfg(feature = "live")]
            live: opts.live_verbs.then(live::query_live),
            checks: Vec::new(),
        };
        facts.checks = judge(&facts);
        #[cfg(not(feature = "live"))]
        if opts.live_verbs {
            facts.checks.push(Check::new(
                "verbs-devices",
                "libibverbs",
                Verdict::Info,
                "not asked: rdmakit-probe was built without its `live` feature",
            ));
        }
        Ok(facts)
    }

    /// The worst verdict of all checks.
    pub fn verdict(&self) -> Verdict {
        Verdict::worst(self.checks.iter().map(|c| c.verdict))
    }

    /// Whether any device is eRDMA.
    pub fn has_erdma(&self) -> bool {
        self.rdma_devices
            .iter()
            .any(|d| d.kind == DeviceKind::Erdma)
    }

    /// The NCCL that Python (torch, cupy, Ray) loads: the `nvidia-nccl-*` package if present,
    /// otherwise the newest library file.
    pub fn effective_nccl(&self) -> Option<&NcclInstall> {
        self.nccl
            .iter()
            .find(|n| n.source == NcclSource::PythonPackage)
            .or_else(|| {
                self.nccl
                    .iter()
                    .filter(|n| n.source == NcclSource::Library)
                    .max_by_key(|n| n.version)
            })
    }
}

/// Devices selected by an `NCCL_IB_HCA` value (`erdma`, `=mlx5_0:1`, `^mlx5_3`, comma lists), as NCCL
/// selects them ([`crate::nccl_ib_hca::IbHca`]).
pub fn ib_hca_selects(spec: &str, devices: &[RdmaDevice]) -> Vec<String> {
    crate::nccl_ib_hca::IbHca::parse(spec).select(devices.iter().map(|d| d.name.as_str()))
}

fn judge(f: &HostFacts) -> Vec<Check> {
    let mut out = Vec::new();
    // Paths as the user would type them: `/proc/...` for the live root, `fixture/proc/...` otherwise.
    let shown = |abs: &str| crate::sysfs::under(&f.root, abs).display().to_string();
    let erdma = f.has_erdma();

    // RDMA devices and ports.
    if f.rdma_devices.is_empty() {
        out.push(
            Check::new(
                "rdma-devices",
                "/sys/class/infiniband",
                Verdict::Fail,
                format!(
                    "no RDMA devices under {}",
                    shown("/sys/class/infiniband")
                ),
            )
            .with_fix(
                "Request the RDMA resource in the pod (e.g. `aliyun/erdma: 1`, \
                 `rdma/rdma_shared_device_a: 1`, `vke.volcengine.com/infiniband-rdma: 1`, or a DRA claim) \
                 and check the node: for eRDMA the `alibabacloud-erdma-agent` pod and the `erdma` kernel \
                 module (it often fails to load after a kernel upgrade).",
            ),
        );
    } else {
        let names: Vec<String> = f
            .rdma_devices
            .iter()
            .map(|d| match d.pci_id() {
                Some(id) => format!("{} ({id})", d.name),
                None => d.name.clone(),
            })
            .collect();
        out.push(Check::new(
            "rdma-devices",
            "/sys/class/infiniband",
            Verdict::Ok,
            format!(
                "{} RDMA device(s): {}",
                f.rdma_devices.len(),
                names.join(", ")
            ),
        ));
    }
    for d in &f.rdma_devices {
        if d.ports.is_empty() {
            out.push(Check::new(
                "device-port-state",
                d.name.clone(),
                Verdict::Warn,
                "no ports listed under ports/",
            ));
        }
        for p in &d.ports {
            let subject = format!("{} port {}", d.name, p.port);
            let ll = p.link_layer.as_deref().unwrap_or("unknown link layer");
            if p.is_active() {
                out.push(Check::new(
                    "device-port-state",
                    subject.clone(),
                    Verdict::Ok,
                    format!("{} ({ll})", p.state),
                ));
            } else {
                out.push(
                    Check::new(
                        "device-port-state",
                        subject.clone(),
                        Verdict::Fail,
                        format!("port is {} ({ll}), not ACTIVE", p.state),
                    )
                    .with_fix("Bring the link up (check the cable/VF and `ip link`); for rxe, the netdev under it must be up."),
                );
            }
            // GID index.
            let suggested = p.suggested_gid_index();
            let env_gid = f.env.get("NCCL_IB_GID_INDEX");
            let is_ib = ll.eq_ignore_ascii_case("InfiniBand");
            match (env_gid, suggested) {
                (Some(g), _) if !is_ib => {
                    let ok = g
                        .parse::<u32>()
                        .ok()
                        .is_some_and(|g| p.gids.iter().any(|e| e.index == g));
                    let check = if ok {
                        Check::new("gid-index", subject.clone(), Verdict::Ok, format!("NCCL_IB_GID_INDEX={g} is a populated GID"))
                    } else {
                        Check::new(
                            "gid-index",
                            subject.clone(),
                            Verdict::Fail,
                            format!("NCCL_IB_GID_INDEX={g} is not a populated GID slot on this port"),
                        )
                        .with_fix(match suggested {
                            Some(s) => format!("Set NCCL_IB_GID_INDEX={s} (the IPv4-mapped RoCE v2 entry; `show_gids` lists them)."),
                            None => "Pick a populated index from `show_gids` / ports/1/gids.".into(),
                        })
                    };
                    out.push(check);
                }
                (None, Some(s)) if !is_ib => out.push(Check::new(
                    "gid-index",
                    subject.clone(),
                    Verdict::Info,
                    format!("RoCE GID index {s} carries the IPv4 address (NCCL_IB_GID_INDEX={s}, ib_write_bw -x {s})"),
                )),
                _ => {}
            }
            // Counters that prove traffic.
            let present = |file: &str| {
                file.strip_prefix("hw_counters/")
                    .map(|n| p.hw_counters.iter().any(|c| c == n))
                    .or_else(|| {
                        file.strip_prefix("counters/")
                            .map(|n| p.counters.iter().any(|c| c == n))
                    })
                    .unwrap_or(false)
            };
            let has_bytes = crate::counters::byte_sources(d.kind)
                .iter()
                .any(|s| s.files.iter().all(|f| present(f)));
            let has_pkts = !p.hw_counters.is_empty() || !p.counters.is_empty();
            let (v, s) = if has_bytes {
                (
                    Verdict::Ok,
                    "byte counters available: traffic over RDMA can be proven".to_string(),
                )
            } else if has_pkts {
                (
                    Verdict::Info,
                    "only packet counters: traffic proof is an estimate".to_string(),
                )
            } else {
                (
                    Verdict::Warn,
                    "no hw_counters/ or counters/: cannot prove traffic went over RDMA".to_string(),
                )
            };
            out.push(Check::new("counters", subject, v, s));
        }
        if d.kind == DeviceKind::Erdma {
            out.push(Check::new(
                "erdma-verbs",
                d.name.clone(),
                Verdict::Info,
                "eRDMA offers RC only: no UD, no SRQ, no extended verbs",
            ).with_fix("Use tensor_transport=\"nccl\" for Ray RDT; NIXL/UCX needs UD and SRQ (stock UCX fails with uct_iface_open(ud_verbs/...) and ibv_create_srq errors)."));
        }
    }

    // Device nodes.
    if !f.rdma_devices.is_empty() {
        if f.dev_infiniband.uverbs.is_empty() {
            out.push(
                Check::new(
                    "dev-infiniband",
                    "/dev/infiniband",
                    Verdict::Fail,
                    if f.dev_infiniband.present {
                        "no uverbs* device nodes: verbs cannot open the device".to_string()
                    } else {
                        "/dev/infiniband is missing: the container was not given RDMA devices".to_string()
                    },
                )
                .with_fix("Request the RDMA extended resource (or DRA claim) so the device plugin mounts /dev/infiniband; privileged: true is not needed."),
            );
        } else {
            out.push(Check::new(
                "dev-infiniband",
                "/dev/infiniband",
                Verdict::Ok,
                f.dev_infiniband.entries.join(" "),
            ));
            if !f.dev_infiniband.rdma_cm {
                out.push(
                    Check::new("rdma-cm", "/dev/infiniband/rdma_cm", Verdict::Warn, "rdma_cm is missing: librdmacm connections (iWARP, eRDMA default mode) will fail")
                        .with_fix("Use a device plugin that also mounts /dev/infiniband/rdma_cm."),
                );
            }
        }
    }

    // What libibverbs sees.
    #[cfg(feature = "live")]
    if let Some(lv) = &f.live {
        live::judge(lv, &f.rdma_devices, &mut out);
    }

    // memlock + CAP_IPC_LOCK.
    match f.memlock {
        Some(m) if m.is_unlimited() => out.push(Check::new("memlock", "RLIMIT_MEMLOCK", Verdict::Ok, "unlimited")),
        Some(m) => out.push(
            Check::new(
                "memlock",
                "RLIMIT_MEMLOCK",
                Verdict::Fail,
                format!("soft limit {} (hard {}): ibv_create_qp will fail with ENOMEM (NCCL: `Unknown error -12`)", m.soft.human(), m.hard.human()),
            )
            .with_fix(limits::MEMLOCK_FIX),
        ),
        None => out.push(Check::new("memlock", "RLIMIT_MEMLOCK", Verdict::Warn, format!("{} not readable", shown("/proc/self/limits")))),
    }
    let memlock_ok = f.memlock.is_some_and(|m| m.is_unlimited());
    match f.capabilities {
        Some(c) if c.ipc_lock() => out.push(Check::new(
            "cap-ipc-lock",
            "CAP_IPC_LOCK",
            Verdict::Ok,
            "effective",
        )),
        Some(_) => out.push(
            Check::new(
                "cap-ipc-lock",
                "CAP_IPC_LOCK",
                if memlock_ok {
                    Verdict::Warn
                } else {
                    Verdict::Fail
                },
                "not in the effective capability set (CapEff bit 14)",
            )
            .with_fix("Add `securityContext.capabilities.add: [IPC_LOCK]` to the RDMA container."),
        ),
        None => out.push(Check::new(
            "cap-ipc-lock",
            "CAP_IPC_LOCK",
            Verdict::Warn,
            format!("{} not readable", shown("/proc/self/status")),
        )),
    }

    // NCCL versions.
    if f.nccl.is_empty() {
        out.push(Check::new(
            "nccl-version",
            "NCCL",
            Verdict::Info,
            "no NCCL found in the search paths",
        ));
    }
    for n in &f.nccl {
        let subject = match &n.package {
            Some(p) => format!("{p} ({})", n.path),
            None => n.path.clone(),
        };
        // The per-vendor table: fatal when this host has that vendor's devices.
        let bad = n
            .version
            .known_bad()
            .max_by_key(|b| f.rdma_devices.iter().any(|d| d.kind == b.kind));
        let check = if let Some(b) = bad {
            let here = f.rdma_devices.iter().any(|d| d.kind == b.kind);
            Check::new(
                "nccl-version",
                subject,
                if here { Verdict::Fail } else { Verdict::Warn },
                format!(
                    "NCCL {} {}{}",
                    n.version,
                    b.symptom,
                    if here {
                        ""
                    } else {
                        " (not this host's devices)"
                    }
                ),
            )
            .with_fix(b.fix)
        } else if nccl::KNOWN_GOOD_ON_ERDMA.contains(&n.version) {
            Check::new(
                "nccl-version",
                subject,
                Verdict::Ok,
                format!("NCCL {} (known good on eRDMA)", n.version),
            )
        } else {
            Check::new(
                "nccl-version",
                subject,
                Verdict::Info,
                format!("NCCL {}", n.version),
            )
        };
        out.push(check);
    }
    if let Some(t) = &f.torch {
        let pkg = f
            .nccl
            .iter()
            .find(|n| n.source == NcclSource::PythonPackage);
        match (t.bundled_nccl, pkg) {
            (Some(b), Some(p)) if b != p.version => out.push(Check::new(
                "torch-nccl",
                format!("torch {}", t.version),
                if p.version.is_known_bad_on_erdma() && erdma { Verdict::Fail } else { Verdict::Info },
                format!("torch declares NCCL {b} ({}), installed package is {}; torch loads the installed one", t.nccl_requirement.as_deref().unwrap_or("?"), p.version),
            )),
            (Some(b), _) => {
                let c = Check::new(
                    "torch-nccl",
                    format!("torch {}", t.version),
                    if b.is_known_bad_on_erdma() && erdma { Verdict::Fail } else if b.is_known_bad_on_erdma() { Verdict::Warn } else { Verdict::Ok },
                    format!("torch's NCCL is {b}"),
                );
                out.push(if b.is_known_bad_on_erdma() { c.with_fix(format!("pip install {} after torch.", nccl::RECOMMENDED_PIN)) } else { c });
            }
            (None, _) => out.push(Check::new("torch-nccl", format!("torch {}", t.version), Verdict::Info, "torch declares no nvidia-nccl package (NCCL linked in or from the system)")),
        }
    }

    // GPUs.
    if f.gpu.gpus.is_empty() && f.gpu.dev_nodes.is_empty() {
        out.push(Check::new(
            "gpu",
            "GPU",
            Verdict::Info,
            "no NVIDIA GPU visible (expected in a CPU-only Ray head)",
        ));
    } else if f.gpu.dev_nodes.is_empty() {
        out.push(
            Check::new("gpu", "GPU", Verdict::Warn, format!("driver lists {} GPU(s) but no /dev/nvidiaN nodes are in this container", f.gpu.gpus.len()))
                .with_fix("Request `nvidia.com/gpu` (or the cluster's GPU resource name) in the container limits."),
        );
    } else {
        let models: Vec<&str> = f
            .gpu
            .gpus
            .iter()
            .filter_map(|g| g.model.as_deref())
            .collect();
        out.push(Check::new(
            "gpu",
            "GPU",
            Verdict::Ok,
            format!(
                "{} device node(s){}",
                f.gpu.dev_nodes.len(),
                if models.is_empty() {
                    String::new()
                } else {
                    format!("; {}", models.join(", "))
                }
            ),
        ));
    }
    if !f.gpu.gpus.is_empty() || !f.gpu.dev_nodes.is_empty() {
        let c = if erdma {
            Check::new(
                "gdr",
                "GPUDirect RDMA",
                Verdict::Info,
                "not available on eRDMA: NCCL stages GPU data through host memory (`GPU Direct RDMA Disabled for HCA`), ~11.8 GiB/s per NIC measured",
            )
        } else if f.gdr.nvidia_peermem || f.gdr.dmabuf {
            let how = match (f.gdr.nvidia_peermem, f.gdr.dmabuf) {
                (true, true) => "nvidia_peermem loaded and dma-buf capable driver",
                (true, false) => "nvidia_peermem loaded",
                _ => "dma-buf capable (open) driver",
            };
            Check::new(
                "gdr",
                "GPUDirect RDMA",
                Verdict::Ok,
                format!("possible: {how}"),
            )
        } else {
            Check::new("gdr", "GPUDirect RDMA", Verdict::Info, "no nvidia_peermem and no dma-buf capable driver: data is staged through host memory")
                .with_fix("For GDR load nvidia_peermem (`modprobe nvidia_peermem`) or use the open kernel module driver (dma-buf).")
        };
        out.push(c);
    }

    // Interfaces and NCCL env.
    let rdma_netdevs: Vec<String> = f.rdma_devices.iter().flat_map(|d| d.netdevs()).collect();
    let names: Vec<&str> = f.interfaces.iter().map(|i| i.name.as_str()).collect();
    match f.env.get("NCCL_SOCKET_IFNAME") {
        Some(v) => {
            let wanted: Vec<&str> = v
                .trim_start_matches(['^', '='])
                .split(',')
                .map(str::trim)
                .collect();
            let excl = v.starts_with('^');
            let hit = f
                .interfaces
                .iter()
                .any(|i| wanted.iter().any(|w| i.name.starts_with(w)) != excl && i.is_up());
            out.push(if hit {
                Check::new("socket-ifname", "NCCL_SOCKET_IFNAME", Verdict::Ok, format!("{v} matches an up interface"))
            } else {
                Check::new("socket-ifname", "NCCL_SOCKET_IFNAME", Verdict::Fail, format!("{v} matches no up interface (have: {})", names.join(", ")))
                    .with_fix(match net::suggest_socket_ifname(&f.interfaces, &rdma_netdevs) {
                        Some(s) => format!("Set NCCL_SOCKET_IFNAME={s}."),
                        None => "Set NCCL_SOCKET_IFNAME to the pod's (hostNetwork: node's) primary interface.".into(),
                    })
            });
        }
        None => {
            if let Some(s) = net::suggest_socket_ifname(&f.interfaces, &rdma_netdevs) {
                out.push(Check::new(
                    "socket-ifname",
                    "NCCL_SOCKET_IFNAME",
                    Verdict::Info,
                    format!(
                        "not set; suggest NCCL_SOCKET_IFNAME={s} (interfaces: {})",
                        names.join(", ")
                    ),
                ));
            }
        }
    }
    if let Some(spec) = f.env.get("NCCL_IB_HCA") {
        let sel = ib_hca_selects(spec, &f.rdma_devices);
        out.push(if sel.is_empty() {
            Check::new("ib-hca", "NCCL_IB_HCA", Verdict::Fail, format!("{spec} selects none of the devices ({})", f.rdma_devices.iter().map(|d| d.name.as_str()).collect::<Vec<_>>().join(", ")))
                .with_fix("Set NCCL_IB_HCA to a device name prefix that exists (erdma, mlx5_0, ...); NCCL otherwise reports `NET/IB : No device found` and falls back to TCP.")
        } else {
            Check::new("ib-hca", "NCCL_IB_HCA", Verdict::Ok, format!("{spec} selects {}", sel.join(", ")))
        });
    } else if let Some(d) = f.rdma_devices.first() {
        let prefix = match d.kind {
            DeviceKind::Erdma => "erdma".to_string(),
            _ => d.name.clone(),
        };
        out.push(Check::new(
            "ib-hca",
            "NCCL_IB_HCA",
            Verdict::Info,
            format!("not set; NCCL picks any device (suggest NCCL_IB_HCA={prefix})"),
        ));
    }
    if f.env.get("NCCL_IB_DISABLE").map(|v| v.trim()) == Some("1") {
        out.push(
            Check::new(
                "ib-disable",
                "NCCL_IB_DISABLE",
                Verdict::Warn,
                "NCCL_IB_DISABLE=1: NCCL will use TCP sockets, not RDMA",
            )
            .with_fix("Unset it or set NCCL_IB_DISABLE=0 (keep =1 only for the TCP A/B run)."),
        );
    }
    out
}
