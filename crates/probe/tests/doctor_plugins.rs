//! NCCL net plugins (issue 18): each plugin's "used", "not found", "did not load" and "fell back"
//! lines, from fixtures in the shape NCCL, aws-ofi-nccl and gIB print them (sources in each
//! fixture's first line and in `src/doctor/signatures/plugins.rs`).

use probe::Verdict;
use probe::doctor;

mod logs_common;
use logs_common::{diag, find, fix};

fn one(line: &str) -> doctor::Diagnosis {
    doctor::diagnose(line).expect("builtin knowledge base compiles")
}

#[test]
fn efa_pod_without_its_devices() {
    let d = diag("efa-ofi-no-device.log");
    assert_eq!(d.verdict, Verdict::Fail);
    let g = find(&d, "nccl-ofi-getinfo-failed");
    assert_eq!((g.line, g.severity), (11, Verdict::Fail));
    assert!(g.cause.contains("No data available"), "{}", g.cause);
    assert!(fix(g).contains("vpc.amazonaws.com/efa"), "{}", fix(g));
    assert!(fix(g).contains("fi_info -p efa -t FI_EP_RDM"), "{}", fix(g));
    assert_eq!(find(&d, "nccl-ofi-init-failed").line, 12);
    let fb = find(&d, "nccl-tcp-fallback");
    assert!(
        fb.cause.contains("line 11") && fb.cause.contains("nccl-ofi-getinfo-failed"),
        "{}",
        fb.cause
    );
    assert!(
        find(&d, "nccl-ofi-plugin")
            .cause
            .contains("aws-ofi-nccl 1.14.0")
    );
}

#[test]
fn efa_healthy_is_not_a_fallback() {
    let d = diag("efa-ofi-ok.log");
    assert!(d.verdict <= Verdict::Info, "{:?}", d.findings);
    assert!(d.has("nccl-ofi-provider-efa"));
    assert!(
        find(&d, "nccl-using-network-plugin")
            .cause
            .contains("Libfabric")
    );
    assert!(
        find(&d, "nccl-channel-net-plugin")
            .cause
            .contains("/GDRDMA")
    );
    assert!(find(&d, "nccl-net-plugin-env").cause.ends_with("ofi"));
    assert!(!d.has("nccl-tcp-fallback"));
    // aws-ofi-nccl up to 1.13 wrote `Selected Provider is efa (found 4 nics)`; 1.3 only the name.
    for old in [
        "h:1:1 [0] NCCL INFO NET/OFI Selected Provider is efa (found 4 nics)",
        "algo-1:462:462 [0] NCCL INFO NET/OFI Selected Provider is efa",
    ] {
        assert!(one(old).has("nccl-ofi-provider-efa"), "{old}");
    }
    let d = one("algo-1:462:462 [0] NCCL INFO Using network AWS Libfabric");
    assert!(d.has("nccl-using-network-plugin"));
}

#[test]
fn ofi_over_libfabric_tcp_is_a_failure_although_nccl_says_libfabric() {
    let d = diag("efa-ofi-provider-tcp.log");
    let f = find(&d, "nccl-ofi-provider-tcp");
    assert_eq!((f.line, f.severity), (7, Verdict::Fail));
    assert!(f.cause.contains("tcp;ofi_rxm"), "{}", f.cause);
    assert!(fix(f).contains("FI_PROVIDER=efa"), "{}", fix(f));
    assert!(d.has("nccl-using-network-plugin"));
    assert_eq!(d.verdict, Verdict::Fail);
}

#[test]
fn libfabric_too_old_for_efa() {
    let d = diag("efa-ofi-libfabric-old.log");
    let f = find(&d, "nccl-ofi-libfabric-too-old");
    assert_eq!(f.line, 9);
    assert!(f.cause.contains("1.22.0"), "{}", f.cause);
    let i = find(&d, "nccl-net-plugin-init-failed");
    assert_eq!((i.line, i.severity), (12, Verdict::Warn));
    assert!(i.cause.contains("Libfabric"), "{}", i.cause);
    // NCCL's own IB plugin failure on the same kind of line is not also an external-plugin one.
    let ib = one("h:1:1 [0] NCCL INFO Failed to initialize NET plugin IB");
    assert!(ib.has("nccl-net-plugin-ib-failed"));
    assert!(!ib.has("nccl-net-plugin-init-failed"));
    let fb = find(&d, "nccl-tcp-fallback");
    assert!(fb.cause.contains("line 9"), "{}", fb.cause);
}

#[test]
fn named_plugin_not_in_the_image_in_every_nccl_wording() {
    let d = diag("nccl-net-plugin-not-found.log");
    let f = find(&d, "nccl-net-plugin-not-found");
    assert_eq!((f.line, f.severity), (5, Verdict::Warn));
    assert!(f.cause.contains("ofi libnccl-net-ofi.so"), "{}", f.cause);
    assert!(fix(f).contains("/opt/amazon/ofi-nccl/lib"), "{}", fix(f));
    assert!(fix(f).contains("/usr/local/gib/lib64"), "{}", fix(f));
    assert!(
        find(&d, "nccl-tcp-fallback")
            .cause
            .contains("nccl-net-plugin-not-found")
    );
    for (version, line) in [
        (
            "2.19",
            "w:1:1 [0] NCCL INFO NET/Plugin : dlerror=libnccl-net-ofi.so: cannot open shared object file: No such file or directory No plugin found (libnccl-net-ofi.so), using internal implementation",
        ),
        (
            "2.21",
            "w:1:1 [0] NCCL INFO NET/Plugin: No plugin found (libnccl-net-ofi.so)",
        ),
        (
            "2.26",
            "w:1:1 [0] NCCL INFO NET/Plugin: Could not find: ofi libnccl-net-ofi.so. Using internal net plugin.",
        ),
        (
            "path",
            "w:1:1 [0] NCCL INFO NET/Plugin: Could not find: /opt/x/libnccl-net.so",
        ),
    ] {
        let d = one(line);
        assert!(
            d.has("nccl-net-plugin-not-found"),
            "{version}: {:?}",
            d.findings
        );
        assert!(!d.has("nccl-net-plugin-absent"), "{version}");
    }
    // The default libnccl-net.so missing is information, in every wording.
    for line in [
        "w:1:1 [0] NCCL INFO NET/Plugin : dlerror=libnccl-net.so: cannot open shared object file: No such file or directory No plugin found (libnccl-net.so), using internal implementation",
        "w:1:1 [0] NCCL INFO NET/Plugin: No plugin found (libnccl-net.so)",
        "w:1:1 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.",
        "w:1:1 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so. ",
        "w:1:1 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so",
    ] {
        let d = one(line);
        assert_eq!(
            find(&d, "nccl-net-plugin-absent").severity,
            Verdict::Info,
            "{line}"
        );
        assert!(!d.has("nccl-net-plugin-not-found"), "{line}");
    }
}

#[test]
fn absent_plugin_on_a_fabric_that_needs_one_is_a_warning() {
    let efa = "h:1:1 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so\n\
               h:1:1 [0] NCCL INFO NET/IB : Using [0]rdmap16s27:1/IB [RO]; OOB eth0:10.0.0.1<0>\n";
    let f = find(&one(efa), "nccl-net-plugin-absent").clone();
    assert_eq!(f.severity, Verdict::Warn);
    assert!(f.cause.contains("EFA"), "{}", f.cause);
    assert!(fix(&f).contains("/opt/amazon/ofi-nccl/lib"));
    let gib = "h:1:1 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so\n\
               h:1:1 [0] NCCL INFO NCCL_TUNER_CONFIG_PATH set by environment to /usr/local/gib/configs/tuner_config_a3u.txtpb\n";
    let f = find(&one(gib), "nccl-net-plugin-absent").clone();
    assert_eq!(f.severity, Verdict::Warn);
    assert!(f.cause.contains("gIB"), "{}", f.cause);
}

#[test]
fn plugin_found_but_its_dependencies_missing() {
    let d = diag("nccl-ofi-libfabric-missing.log");
    let f = find(&d, "nccl-net-plugin-dlopen-failed");
    assert_eq!((f.line, f.severity), (4, Verdict::Warn));
    assert!(
        f.cause
            .contains("plugin libnccl-net.so but could not load it: libfabric.so.1"),
        "{}",
        f.cause
    );
    assert!(fix(f).contains("ldd"));
    for (version, line, want) in [
        (
            "2.21",
            "w:1:1 [0] NCCL INFO NET/Plugin: Plugin load returned 2 : libfabric.so.1: cannot open shared object file: No such file or directory when loading libnccl-net-ofi.so",
            "plugin libnccl-net-ofi.so but",
        ),
        (
            "2.23",
            "w:1:1 [0] NCCL INFO NET/Plugin: libfabric.so.1: cannot open shared object file: No such file or directory",
            "plugin but could not load it: libfabric.so.1",
        ),
        (
            "2.19",
            "w:1:1 [0] NCCL INFO NET/Plugin : Plugin load returned 2 : libfabric.so.1: cannot open shared object file: No such file or directory.",
            "load it: libfabric.so.1",
        ),
    ] {
        let d = one(line);
        let f = find(&d, "nccl-net-plugin-dlopen-failed");
        assert!(f.cause.contains(want), "{version}: {}", f.cause);
    }
    // ≤ 2.18's wording keeps its own id.
    let d = diag("nccl-ofi-plugin-missing.log");
    assert!(
        find(&d, "nccl-net-plugin-load-failed")
            .cause
            .contains("libnccl-net-ofi.so")
    );
    assert!(
        find(&d, "nccl-net-plugin-env")
            .cause
            .contains("libnccl-net-ofi.so")
    );
}

#[test]
fn forced_network_without_a_fallback() {
    let d = diag("nccl-net-none-initialized.log");
    let f = find(&d, "nccl-net-none-initialized");
    assert_eq!((f.line, f.severity), (5, Verdict::Fail));
    assert!(fix(f).contains("NCCL_NET"), "{}", fix(f));
    assert!(f.cause.contains("ncclInvalidUsage"));
}

#[test]
fn plugin_built_for_another_nccl() {
    let d = diag("nccl-net-plugin-unsupported.log");
    let f = find(&d, "nccl-net-plugin-unsupported");
    assert_eq!((f.line, f.severity), (4, Verdict::Warn));
    assert!(f.cause.contains("/usr/local/lib/libnccl-net.so"));
    assert_eq!(d.verdict, Verdict::Warn, "IB still works: {:?}", d.findings);
}

#[test]
fn gib_used_and_its_config_checker() {
    let d = diag("gib-ok.log");
    assert!(d.verdict <= Verdict::Info, "{:?}", d.findings);
    assert_eq!(
        find(&d, "nccl-gib-plugin").line,
        4,
        "the header is not a log line"
    );
    assert!(find(&d, "nccl-gib-plugin").cause.contains("v1.0.5"));
    assert!(
        find(&d, "nccl-channel-net-plugin")
            .cause
            .contains("gIB plugin, device 6/GDRDMA")
    );
    assert!(!d.has("nccl-tcp-fallback"));

    let d = diag("gib-env-enforced.log");
    let f = find(&d, "nccl-gib-env-enforced");
    assert_eq!((f.line, f.severity), (5, Verdict::Fail));
    assert!(
        f.cause.contains("NCCL_P2P_NVL_CHUNKSIZE=524288") && f.cause.contains("expects 262144")
    );
    assert!(fix(f).contains("set_nccl_env.sh"));
    // The spacing of Google's page is accepted too.
    let spaced = "... NCCL WARN NCCL/NET ( shim ) mismatch enforced: NCCL_P2P_NVL_CHUNKSIZE = 524288 ( expected 262144 )";
    assert!(one(spaced).has("nccl-gib-env-enforced"));

    let d = diag("gib-env-recommended.log");
    let f = find(&d, "nccl-gib-env-recommended");
    assert_eq!((f.line, f.severity), (5, Verdict::Warn));
    assert!(f.cause.contains("expected unset"), "{}", f.cause);
    assert_eq!(d.verdict, Verdict::Warn);

    let d = diag("gib-config-missing.log");
    let f = find(&d, "nccl-gib-config-missing");
    assert!(fix(f).contains("/usr/local/gib/configs/guest_config.txtpb"));
}

#[test]
fn gib_libibverbs_without_its_directory_falls_back_to_tcp() {
    let d = diag("ibverbs-gib-config-dir.log");
    let f = find(&d, "ibverbs-config-dir-missing");
    assert_eq!((f.line, f.severity), (2, Verdict::Warn));
    assert!(
        f.cause
            .contains("/usr/local/gib/rdma-core/build/etc/libibverbs.d")
    );
    assert!(fix(f).contains("/home/kubernetes/bin/gib"));
    assert_eq!(find(&d, "nccl-tcp-fallback").severity, Verdict::Fail);
}

#[test]
fn sharp_plugin_ibext_counts_as_rdma() {
    // HPC-X's nccl-rdma-sharp-plugins (Azure ND images) names its network IBext / IBext_v8.
    let log = "\
vm-0:81:96 [0] NCCL INFO NET/Plugin: Loaded net plugin IBext_v8 (v8)
vm-0:81:96 [0] NCCL INFO NET/IB : Using [0]mlx5_ib0:1/IB [1]mlx5_ib1:1/IB ; OOB eth0:10.1.0.4<0>
vm-0:81:96 [0] NCCL INFO Using network IBext_v8
vm-0:81:96 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IBext_v8/0/GDRDMA
";
    let d = one(log);
    assert!(
        find(&d, "nccl-net-plugin-loaded")
            .cause
            .contains("IBext_v8")
    );
    assert!(find(&d, "nccl-using-network-ib").cause.contains("IBext_v8"));
    assert!(find(&d, "nccl-channel-net-ib").cause.contains("0/GDRDMA"));
    assert!(d.verdict <= Verdict::Info, "{:?}", d.findings);
}

#[test]
fn topology_file_named_but_missing() {
    let d = diag("nccl-topo-file-missing.log");
    let f = find(&d, "nccl-topo-file-missing");
    assert_eq!((f.line, f.severity), (9, Verdict::Warn));
    assert!(
        f.cause.contains("/opt/microsoft/ndv5-topo.xml")
            && f.cause.contains("No such file or directory"),
        "{}",
        f.cause
    );
    assert!(fix(f).contains("ConfigMap"), "{}", fix(f));
    assert!(
        find(&d, "nccl-topo-file-env")
            .cause
            .ends_with("ndv5-topo.xml")
    );
    assert_eq!(
        d.verdict,
        Verdict::Warn,
        "IB itself works: {:?}",
        d.findings
    );
    // Up to 2.2x the same text was a WARN line with the file and line in front.
    let old = "nd-0:91:110 [0] graph/xml.cc:375 NCCL WARN Could not open XML topology file /opt/microsoft/ndv5-topo.xml : No such file or directory";
    assert!(one(old).has("nccl-topo-file-missing"));
}

/// The net-plugin path of the nccl-tests workflow, judged in probe: aws-ofi-nccl on EFA and gIB pass with
/// their own lines; libfabric's tcp provider, a fallback to sockets and a plugin NCCL never loaded fail,
/// each naming why.
#[test]
fn net_plugin_path_from_launcher_logs() {
    use probe::judge::{NetPluginFacts, nccl_net_plugin_path};
    let efa = NetPluginFacts {
        plugin: "aws-ofi-nccl".into(),
        library: "libnccl-net.so".into(),
        fabric: "AWS EFA".into(),
        marker: "NET/OFI".into(),
    };
    let ok = nccl_net_plugin_path(&logs_common::log("efa-ofi-ok.log"), &efa).unwrap();
    assert_eq!(ok.verdict, probe::Verdict::Ok, "{}", ok.detail);
    assert!(
        ok.detail.starts_with(
            "ip-10-0-71-18:88:107 [0] NCCL INFO NET/OFI Initializing aws-ofi-nccl 1.16.2; "
        ),
        "{}",
        ok.detail
    );
    let tcp = nccl_net_plugin_path(&logs_common::log("efa-ofi-provider-tcp.log"), &efa).unwrap();
    assert_eq!(tcp.verdict, probe::Verdict::Fail);
    assert!(
        tcp.detail
            .contains("does not carry the traffic over AWS EFA")
            || tcp.detail.contains("NCCL used TCP sockets"),
        "{}",
        tcp.detail
    );
    let gone = nccl_net_plugin_path(&logs_common::log("efa-ofi-no-device.log"), &efa).unwrap();
    assert_eq!(gone.verdict, probe::Verdict::Fail);
    assert!(
        gone.detail
            .contains("NCCL used TCP sockets, not aws-ofi-nccl over AWS EFA")
            && gone
                .detail
                .contains("cause (nccl-ofi-getinfo-failed, line 11)"),
        "{}",
        gone.detail
    );
    let gib = NetPluginFacts {
        plugin: "gIB".into(),
        library: "libnccl-net_gib.so".into(),
        fabric: "GPUDirect RDMA (RoCE)".into(),
        marker: "NET/gIB".into(),
    };
    let g = nccl_net_plugin_path(&logs_common::log("gib-ok.log"), &gib).unwrap();
    assert_eq!(g.verdict, probe::Verdict::Ok, "{}", g.detail);
    assert!(g.detail.contains("NET/gIB"), "{}", g.detail);
    // Not a plugin log at all: the marker is missing.
    let none = nccl_net_plugin_path("x NCCL INFO NET/IB : Using [0]mlx5_0:1/IB\n", &gib).unwrap();
    assert_eq!(none.verdict, probe::Verdict::Fail);
    assert!(none.detail.starts_with("no 'NET/gIB' line in the launcher log: NCCL did not load gIB (is libnccl-net_gib.so on LD_LIBRARY_PATH"), "{}", none.detail);
}
