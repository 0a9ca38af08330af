//! Host facts on fixture trees of /sys, /proc and /dev (eRDMA, mlx5, rxe, broken eRDMA, bare).

use std::path::PathBuf;

use probe::facts::{self, DeviceKind, LimitValue, NcclSource, NcclVersion};
use probe::{Check, HostFacts, ProbeOptions, Verdict};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn check<'a>(f: &'a HostFacts, id: &str) -> Vec<&'a Check> {
    let v: Vec<&Check> = f.checks.iter().filter(|c| c.id == id).collect();
    assert!(
        !v.is_empty(),
        "no `{id}` check; have {:?}",
        f.checks.iter().map(|c| &c.id).collect::<Vec<_>>()
    );
    v
}

#[test]
fn healthy_erdma_worker() {
    let opts = ProbeOptions::new(fixture("erdma"))
        .with_env("NCCL_IB_HCA", "erdma_0")
        .with_env("NCCL_SOCKET_IFNAME", "eth0");
    let f = HostFacts::gather(&opts).unwrap();
    assert_eq!(f.rdma_devices.len(), 1);
    let d = &f.rdma_devices[0];
    assert_eq!(d.name, "erdma_0");
    assert_eq!(d.kind, DeviceKind::Erdma);
    assert_eq!(d.pci_id().as_deref(), Some("1ded:107f"));
    assert_eq!(d.fw_ver.as_deref(), Some("0.2.0"));
    assert_eq!(d.node_guid.as_deref(), Some("0216:3eff:fe0a:054c"));
    let p = &d.ports[0];
    assert!(p.is_active());
    assert_eq!(p.link_layer.as_deref(), Some("Ethernet"));
    assert_eq!(p.gids.len(), 2, "all-zero GID slots are skipped");
    assert_eq!(p.suggested_gid_index(), Some(1));
    assert!(p.hw_counters.contains(&"hw_tx_bytes_cnt".to_string()));
    assert!(!p.hw_counters.contains(&"lifespan".to_string()));
    assert_eq!(d.netdevs(), vec!["eth0".to_string()]);

    assert_eq!(f.dev_infiniband.uverbs, vec!["uverbs0"]);
    assert!(f.dev_infiniband.rdma_cm);
    assert_eq!(f.memlock.unwrap().soft, LimitValue::Unlimited);
    assert!(f.capabilities.unwrap().ipc_lock());
    assert_eq!(f.gpu.dev_nodes, vec!["/dev/nvidia0"]);
    assert_eq!(
        f.gpu.gpus[0].model.as_deref(),
        Some("NVIDIA RTX PRO 5000 72GB Blackwell")
    );
    assert!(f.gpu.open_kernel_module);
    assert!(!f.gdr.nvidia_peermem);
    let names: Vec<&str> = f.interfaces.iter().map(|i| i.name.as_str()).collect();
    assert_eq!(names, vec!["eth0"], "lo, docker0 and veth* are skipped");

    // NCCL: the pinned package, and torch's declared (bad) one.
    let eff = f.effective_nccl().unwrap();
    assert_eq!(eff.version, NcclVersion::new(2, 30, 7));
    assert_eq!(eff.source, NcclSource::PythonPackage);
    assert_eq!(eff.package.as_deref(), Some("nvidia-nccl-cu13"));
    let t = f.torch.as_ref().unwrap();
    assert_eq!(t.version, "2.11.0");
    assert_eq!(t.bundled_nccl, Some(NcclVersion::new(2, 28, 9)));
    assert_eq!(
        t.nccl_requirement.as_deref(),
        Some("nvidia-nccl-cu13==2.28.9")
    );
    let tc = check(&f, "torch-nccl");
    assert_eq!(tc[0].verdict, Verdict::Info, "{tc:?}");

    assert_eq!(check(&f, "memlock")[0].verdict, Verdict::Ok);
    assert_eq!(check(&f, "cap-ipc-lock")[0].verdict, Verdict::Ok);
    assert_eq!(check(&f, "nccl-version")[0].verdict, Verdict::Ok);
    assert_eq!(check(&f, "ib-hca")[0].verdict, Verdict::Ok);
    assert_eq!(check(&f, "socket-ifname")[0].verdict, Verdict::Ok);
    assert_eq!(check(&f, "counters")[0].verdict, Verdict::Ok);
    let gdr = check(&f, "gdr");
    assert_eq!(gdr[0].verdict, Verdict::Info);
    assert!(gdr[0].summary.contains("eRDMA"));
    assert!(
        check(&f, "gid-index")[0]
            .summary
            .contains("NCCL_IB_GID_INDEX=1")
    );
    assert_eq!(f.verdict(), Verdict::Info, "{:#?}", f.checks);
    // JSON round trip.
    let json = serde_json::to_string(&f).unwrap();
    let back: HostFacts = serde_json::from_str(&json).unwrap();
    assert_eq!(back, f);
}

#[test]
fn broken_erdma_worker_names_every_fix() {
    let opts = ProbeOptions::new(fixture("erdma-broken"))
        .with_env("NCCL_IB_HCA", "mlx5")
        .with_env("NCCL_SOCKET_IFNAME", "bond0")
        .with_env("NCCL_IB_GID_INDEX", "3")
        .with_env("NCCL_IB_DISABLE", "1");
    let f = HostFacts::gather(&opts).unwrap();
    assert_eq!(f.verdict(), Verdict::Fail);
    let m = &check(&f, "memlock")[0];
    assert_eq!(m.verdict, Verdict::Fail);
    assert!(m.summary.contains("64 KiB"), "{}", m.summary);
    assert!(m.fix.as_deref().unwrap().contains("LimitMEMLOCK=infinity"));
    assert_eq!(check(&f, "cap-ipc-lock")[0].verdict, Verdict::Fail);
    let dev = &check(&f, "dev-infiniband")[0];
    assert_eq!(dev.verdict, Verdict::Fail);
    assert!(dev.summary.contains("missing"));
    let n = &check(&f, "nccl-version")[0];
    assert_eq!(n.verdict, Verdict::Fail);
    assert!(
        n.fix
            .as_deref()
            .unwrap()
            .contains("nvidia-nccl-cu13==2.30.7")
    );
    assert_eq!(check(&f, "torch-nccl")[0].verdict, Verdict::Fail);
    assert_eq!(check(&f, "ib-hca")[0].verdict, Verdict::Fail);
    let s = &check(&f, "socket-ifname")[0];
    assert_eq!(s.verdict, Verdict::Fail);
    assert_eq!(s.fix.as_deref(), Some("Set NCCL_SOCKET_IFNAME=eth0."));
    let g = &check(&f, "gid-index")[0];
    assert_eq!(g.verdict, Verdict::Fail);
    assert!(g.fix.as_deref().unwrap().contains("NCCL_IB_GID_INDEX=1"));
    assert_eq!(check(&f, "ib-disable")[0].verdict, Verdict::Warn);
    let gpu = &check(&f, "gpu")[0];
    assert_eq!(gpu.verdict, Verdict::Ok);
}

#[test]
fn mlx5_host_with_gdr_and_system_nccl() {
    let f = HostFacts::gather(&ProbeOptions::new(fixture("mlx5"))).unwrap();
    assert_eq!(f.rdma_devices.len(), 2);
    assert!(f.rdma_devices.iter().all(|d| d.kind == DeviceKind::Mlx5));
    let ib = &f.rdma_devices[0].ports[0];
    assert_eq!(ib.link_layer.as_deref(), Some("InfiniBand"));
    let roce = &f.rdma_devices[1].ports[0];
    assert_eq!(roce.suggested_gid_index(), Some(3), "IPv4-mapped RoCE v2");
    assert_eq!(roce.gids[1].gid_type.as_deref(), Some("RoCE v2"));
    assert!(f.gdr.nvidia_peermem);
    assert!(!f.gpu.open_kernel_module);
    assert_eq!(f.gpu.dev_nodes.len(), 8);
    assert_eq!(check(&f, "gdr")[0].verdict, Verdict::Ok);
    let libs: Vec<_> = f
        .nccl
        .iter()
        .map(|n| (n.source, n.version.to_string()))
        .collect();
    assert!(
        libs.contains(&(NcclSource::Library, "2.19.3".into())),
        "{libs:?}"
    );
    assert!(
        libs.contains(&(NcclSource::Header, "2.19.3".into())),
        "{libs:?}"
    );
    assert_eq!(
        f.effective_nccl().unwrap().path,
        "/usr/lib/x86_64-linux-gnu/libnccl.so.2.19.3"
    );
    assert!(f.torch.is_none());
    let names: Vec<&str> = f.interfaces.iter().map(|i| i.name.as_str()).collect();
    assert_eq!(names, vec!["bond0", "ens1f1np1", "ib0"]);
    assert!(
        check(&f, "socket-ifname")[0]
            .summary
            .contains("NCCL_SOCKET_IFNAME=ens1f1np1")
    );
    assert!(
        check(&f, "ib-hca")[0]
            .summary
            .contains("NCCL_IB_HCA=mlx5_0")
    );
    // No gid-index advice for the InfiniBand port, one for the RoCE port.
    let gid = check(&f, "gid-index");
    assert_eq!(gid.len(), 1);
    assert_eq!(gid[0].subject, "mlx5_1 port 1");
    assert_eq!(f.verdict(), Verdict::Info);
}

#[test]
fn rxe_vm_with_limited_memlock() {
    let f =
        HostFacts::gather(&ProbeOptions::new(fixture("rxe")).with_env("NCCL_IB_HCA", "=rxe0:1"))
            .unwrap();
    let d = &f.rdma_devices[0];
    assert_eq!(d.kind, DeviceKind::Rxe);
    assert_eq!(d.parent_netdev.as_deref(), Some("veth0"));
    assert_eq!(d.fw_ver, None, "empty fw_ver is none");
    assert_eq!(d.ports[0].suggested_gid_index(), Some(3));
    assert_eq!(
        check(&f, "counters")[0].verdict,
        Verdict::Info,
        "packet counters only"
    );
    assert_eq!(check(&f, "memlock")[0].verdict, Verdict::Fail);
    assert!(check(&f, "memlock")[0].summary.contains("8 MiB"));
    assert_eq!(check(&f, "ib-hca")[0].verdict, Verdict::Ok);
    assert_eq!(check(&f, "gpu")[0].verdict, Verdict::Info);
    assert!(
        f.checks.iter().all(|c| c.id != "gdr"),
        "no GDR check without GPUs"
    );
}

#[test]
fn bare_root_reports_missing_devices() {
    let dir = tempfile::tempdir().unwrap();
    let f = HostFacts::gather(&ProbeOptions::new(dir.path())).unwrap();
    assert!(f.rdma_devices.is_empty());
    let c = &check(&f, "rdma-devices")[0];
    assert_eq!(c.verdict, Verdict::Fail);
    assert!(c.fix.as_deref().unwrap().contains("aliyun/erdma"));
    assert_eq!(check(&f, "memlock")[0].verdict, Verdict::Warn);
}

#[test]
fn malformed_limits_file_is_a_named_error() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("proc/self")).unwrap();
    std::fs::write(
        dir.path().join("proc/self/limits"),
        "Max locked memory  lots  more bytes\n",
    )
    .unwrap();
    let e = HostFacts::gather(&ProbeOptions::new(dir.path()))
        .unwrap_err()
        .to_string();
    assert!(e.contains("proc/self/limits"), "{e}");
    assert!(e.contains("Max locked memory"), "{e}");
}

#[test]
fn ib_hca_selection_semantics() {
    let f = HostFacts::gather(&ProbeOptions::new(fixture("mlx5"))).unwrap();
    let sel = |s: &str| facts::ib_hca_selects(s, &f.rdma_devices);
    assert_eq!(sel("mlx5"), vec!["mlx5_0", "mlx5_1"]);
    assert_eq!(sel("=mlx5_1"), vec!["mlx5_1"]);
    assert_eq!(sel("^mlx5_0"), vec!["mlx5_1"]);
    assert_eq!(sel("mlx5_0:1,mlx5_1:1"), vec!["mlx5_0", "mlx5_1"]);
    assert!(sel("erdma").is_empty());
}

#[test]
fn nccl_version_helpers() {
    assert_eq!(
        NcclVersion::from_code(23007),
        Some(NcclVersion::new(2, 30, 7))
    );
    assert_eq!(
        NcclVersion::from_code(2708),
        Some(NcclVersion::new(2, 7, 8))
    );
    assert_eq!(
        NcclVersion::parse("2.19.3+cuda12.2"),
        Some(NcclVersion::new(2, 19, 3))
    );
    assert_eq!(
        NcclVersion::parse("2.28.9-1"),
        Some(NcclVersion::new(2, 28, 9))
    );
    assert!(NcclVersion::new(2, 28, 7).is_known_bad_on_erdma());
    assert!(!NcclVersion::new(2, 28, 3).is_known_bad_on_erdma());
    assert_eq!(NcclVersion::parse("x.y"), None);
    assert_eq!(
        facts::nccl::parse_nccl_h(
            "#define NCCL_MAJOR 2\n#define NCCL_MINOR 30\n#define NCCL_PATCH 7\n"
        ),
        Some(NcclVersion::new(2, 30, 7))
    );
}

#[test]
fn limits_and_caps_parsers() {
    let m = facts::limits::parse_limits(
        "Max locked memory         65536                65536                bytes\n",
    )
    .unwrap();
    assert_eq!(m.soft, LimitValue::Bytes(65536));
    assert!(!m.is_unlimited());
    assert_eq!(m.soft.human(), "64 KiB");
    let c = facts::limits::parse_status_caps("CapEff:\t00000000a80425fb\n").unwrap();
    assert!(!c.ipc_lock(), "docker default caps lack IPC_LOCK");
    let c = facts::limits::parse_status_caps("CapEff:\t00000000a80c75fb\n").unwrap();
    assert!(c.ipc_lock());
}
