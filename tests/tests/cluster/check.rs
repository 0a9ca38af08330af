//! `rdmakit check` against the tier: for every built-in profile (mellanox-ib on nodes the test applies), the
//! check pods are made from the profile's workload shape, placed by the real scheduler (DRA claims allocated by it), read by exec, the
//! matrix run through the emulator's `ib_write_bw` (which moves counter bytes on the devices of both pods),
//! the JSON valid against the committed schema, the HTML written, and nothing left behind. Then planted
//! faults — flat counters on one node, a wrong RoCE GID index, a missing interface, a small `/dev/shm`, 64 KiB
//! memlock — each FAIL naming its cause — and a mesh's proxy injected by a real mutating webhook (Istio's
//! injector, tests/cluster/webhooks/), which check finds in the live pods it never asked for.

use std::path::Path;

use serde_json::Value;

use super::harness::OutputWithin;
use super::harness::{
    BareNs, NodeKnob, kubeconfig, kubectl_ok, rdmakit, repo, sigint_once_present,
};
use super::vendors::Nodes;

/// `rdmakit check --profile P --json - --html DIR/check.html -n NS` with a small matrix; (exit, report, text).
fn check(ns: &str, profile: &str, extra: &[&str], html: &Path) -> (i32, Value, String) {
    let o = rdmakit()
        .args([
            "check",
            "--profile",
            profile,
            "-n",
            ns,
            "--size",
            "65536",
            "--iterations",
            "200",
        ])
        .args(["--json", "-", "--html"])
        .arg(html)
        .args(extra)
        .env("KUBECONFIG", kubeconfig())
        .output_within()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stderr).into_owned();
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "check --json -: {e}\nstdout: {}\nstderr: {text}",
            String::from_utf8_lossy(&o.stdout)
        )
    });
    (o.status.code().unwrap_or(-1), v, text)
}

fn eligible(profile: &str) -> Vec<String> {
    let o = rdmakit()
        .args(["preflight", "--profile", profile, "--nodes", "1", "--json"])
        .env("KUBECONFIG", kubeconfig())
        .output_within()
        .unwrap();
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    v["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["eligible"] == true)
        .map(|n| n["name"].as_str().unwrap().to_owned())
        .collect()
}

fn validate(report: &Value) {
    let schema = repo().join("crates/probe/schemas/check-report.v1.schema.json");
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("r.json");
    std::fs::write(&f, report.to_string()).unwrap();
    let script = "import json,sys,jsonschema\nv=jsonschema.Draft202012Validator(json.load(open(sys.argv[1])))\nerrs=[f'{list(e.absolute_path)}: {e.message}' for e in v.iter_errors(json.load(open(sys.argv[2])))]\nprint('\\n'.join(errs)); sys.exit(1 if errs else 0)";
    let o = std::process::Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(&schema)
        .arg(&f)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "report violates the schema:\n{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

fn no_pods_left(ns: &str) {
    let left = kubectl_ok(&[
        "get",
        "pods",
        "-n",
        ns,
        "-l",
        "rdmakit.io/check",
        "-o",
        "name",
    ]);
    assert!(left.trim().is_empty(), "check pods left behind: {left}");
}

fn failing<'a>(v: &'a Value, id: &str) -> Vec<&'a Value> {
    v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["id"] == id && c["verdict"] == "fail")
        .collect()
}

/// One profile: its eligible nodes each got a pod that sees its RDMA devices, the ring's cells pass with both
/// ends' counters, and the report is valid and written.
fn passes(profile: &str, min_nodes: usize, extra: &[&str]) {
    // One namespace per profile: the previous one may still be terminating.
    let ns = BareNs::new(&format!("chk-{profile}"));
    let mut nodes = eligible(profile);
    if let Some(pool) = extra
        .iter()
        .find_map(|a| a.strip_prefix("rdmakit.test/pool="))
    {
        let picked = kubectl_ok(&[
            "get",
            "nodes",
            "-l",
            &format!("rdmakit.test/pool={pool}"),
            "-o",
            "name",
        ]);
        nodes.retain(|n| picked.lines().any(|l| l.trim_start_matches("node/") == n));
    }
    assert!(nodes.len() >= min_nodes, "{profile}: eligible {nodes:?}");
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("check.html");
    let mut args = vec!["--rails", "2"];
    args.extend_from_slice(extra);
    let (code, v, text) = check(&ns.0, profile, &args, &html);
    assert_eq!(code, 0, "{profile}: exit {code}\n{text}\n{v:#}");
    validate(&v);
    let got: Vec<&str> = v["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["facts"]["node"].as_str().unwrap())
        .collect();
    assert_eq!(got.len(), nodes.len(), "{profile}: {got:?} vs {nodes:?}");
    for n in v["nodes"].as_array().unwrap() {
        let f = &n["facts"];
        assert!(
            !f["devices"].as_array().unwrap().is_empty(),
            "{profile}: {} sees no RDMA device: {f:#}",
            f["node"]
        );
        assert!(
            f["unreadable"].as_array().unwrap().is_empty(),
            "{profile}: {f:#}"
        );
    }
    let cells = v["matrix"].as_array().unwrap();
    if nodes.len() >= 2 {
        assert!(
            !cells.is_empty(),
            "{profile}: no matrix: {:#}",
            v["skipped"]
        );
        for c in cells {
            assert_eq!(c["verdict"], "ok", "{profile}: {c:#}");
            assert_eq!(c["sender"]["verdict"], "ok", "{profile}: {c:#}");
            assert_eq!(c["receiver"]["verdict"], "ok", "{profile}: {c:#}");
        }
    }
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(
        page.contains("id=\"verdict\">PASS<") || page.contains("id=\"verdict\">WARN<"),
        "{profile}"
    );
    no_pods_left(&ns.0);
}

// Every built-in profile with nodes in the tier passes `rdmakit check`, in three tests by node pool (run.sh
// runs each beside the other tests of its pools): eRDMA, the DRA pools (DRANET's and GKE's), and the rest.

#[test]
#[ignore = "control-plane tier: make cluster-test"]
fn check_passes_for_the_erdma_profile_and_leaves_nothing() {
    passes("aliyun-erdma", 2, &[]);
}

#[test]
#[ignore = "control-plane tier: make cluster-test"]
fn check_passes_for_the_dra_profiles_and_leaves_nothing() {
    passes("aliyun-erdma-dra", 2, &[]);
    let _gke = Nodes::apply("gke-a4-nodes.yaml", "gke");
    // The DRA nodes of seed 002 carry one device, the A4 claim wants 8: a user checks the pool.
    passes("gke-rdma-dranet", 2, &["--nodes", "rdmakit.test/pool=gke"]);
}

#[test]
#[ignore = "control-plane tier: make cluster-test"]
fn check_passes_for_every_other_builtin_profile_with_nodes_and_leaves_nothing() {
    for (profile, min) in [
        ("rdma-shared-device", 2),
        ("aws-efa-eks", 2),
        ("volcengine-ib", 1),
    ] {
        passes(profile, min, &[]);
    }
    {
        let _mlx5 = Nodes::apply("mlx5-ib-nodes.yaml", "mlx5ib");
        passes("mellanox-ib", 2, &["--nodes", "rdmakit.test/pool=mlx5ib"]);
    }
    let _azure = Nodes::apply("azure-nd-h100-nodes.yaml", "azure");
    passes("azure-ib-aks", 2, &["--nodes", "rdmakit.test/pool=azure"]);
}

#[test]
#[ignore = "control-plane tier: make cluster-test"]
fn flat_counters_on_one_node_fail_its_cells_and_64k_memlock_fails_the_pod() {
    let ns = BareNs::new("check-flat");
    let nodes = eligible("aliyun-erdma");
    let dir = tempfile::tempdir().unwrap();
    {
        let _frozen = NodeKnob::set(&nodes[1..2], "counters", "frozen");
        let (code, v, text) = check(&ns.0, "aliyun-erdma", &[], &dir.path().join("a.html"));
        assert_eq!(code, 1, "{text}");
        validate(&v);
        for c in v["matrix"].as_array().unwrap() {
            let touches = c["from"] == nodes[1].as_str() || c["to"] == nodes[1].as_str();
            assert_eq!(c["verdict"], if touches { "fail" } else { "ok" }, "{c:#}");
            if c["from"] == nodes[1].as_str() {
                assert_eq!(c["sender"]["verdict"], "fail", "{c:#}");
                assert!(c["fix"].as_str().unwrap().contains("sender"), "{c:#}");
            }
            if c["to"] == nodes[1].as_str() {
                assert_eq!(c["receiver"]["verdict"], "fail", "{c:#}");
            }
        }
        assert!(text.contains("FAIL  matrix"), "{text}");
    }
    let _memlock = NodeKnob::set(&nodes[..1], "containerd-memlock", "65536");
    let (code, v, text) = check(&ns.0, "aliyun-erdma", &[], &dir.path().join("b.html"));
    assert_eq!(code, 1, "{text}");
    let m = failing(&v, "memlock");
    assert_eq!(m.len(), 1, "{:#}", v["findings"]);
    assert!(
        m[0]["subject"]
            .as_str()
            .unwrap()
            .contains(nodes[0].as_str())
            && m[0]["fix"]
                .as_str()
                .unwrap()
                .contains("LimitMEMLOCK=infinity"),
        "{m:#?}"
    );
    // perftest itself cannot register memory there (its last words: "Failed to create MR").
    let c = v["matrix"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["from"] == nodes[0].as_str())
        .unwrap();
    assert!(
        c["verdict"] == "fail" && c["summary"].as_str().unwrap().contains("create MR"),
        "{c:#}"
    );
    no_pods_left(&ns.0);
}

/// A copy of the shared-device profile with `edit` applied to its source (a user's own profile file).
fn profile_with(dir: &Path, name: &str, edit: impl Fn(String) -> String) -> String {
    let src =
        std::fs::read_to_string(repo().join("scripts/vendors/rdma-shared-device.rhai")).unwrap();
    let src = edit(src.replacen(
        "name: \"rdma-shared-device\"",
        &format!("name: \"{name}\""),
        1,
    ));
    let p = dir.join(format!("{name}.rhai"));
    std::fs::write(&p, src).unwrap();
    // The profile's `import "base/..."` resolves beside it.
    let base = dir.join("base");
    if !base.exists() {
        std::os::unix::fs::symlink(repo().join("scripts/vendors/base"), &base).unwrap();
    }
    p.to_str().unwrap().to_owned()
}

#[test]
#[ignore = "control-plane tier: make cluster-test"]
fn a_missing_interface_a_small_dev_shm_and_a_wrong_gid_index_each_fail_naming_the_cause() {
    let ns = BareNs::new("check-env");
    let dir = tempfile::tempdir().unwrap();
    let nodes = eligible("rdma-shared-device");
    // NCCL_SOCKET_IFNAME naming an interface the pods do not have (nccl #1837).
    let p = profile_with(dir.path(), "shared-ens5", |s| {
        s.replace("socket_ifname: \"eth0\"", "socket_ifname: \"ens5\"")
    });
    let (code, v, text) = check(&ns.0, &p, &["--no-matrix"], &dir.path().join("a.html"));
    assert_eq!(code, 1, "{text}");
    let f = failing(&v, "nccl-socket-ifname");
    assert_eq!(f.len(), nodes.len(), "{:#}", v["findings"]);
    assert!(
        f[0]["summary"].as_str().unwrap().contains("ens5")
            && f[0]["summary"].as_str().unwrap().contains("eth0"),
        "{f:#?}"
    );
    // No /dev/shm volume: the container runtime's 64 MiB (nccl #525).
    let p = profile_with(dir.path(), "shared-noshm", |s| {
        s.lines()
            .filter(|l| !l.trim_start().starts_with("shm:"))
            .collect::<Vec<_>>()
            .join("\n")
    });
    let (code, v, text) = check(&ns.0, &p, &["--no-matrix"], &dir.path().join("b.html"));
    assert_eq!(code, 1, "{text}");
    let f = failing(&v, "dev-shm");
    assert_eq!(f.len(), nodes.len(), "{:#}", v["findings"]);
    assert!(
        f[0]["summary"].as_str().unwrap().contains("64.0 MiB")
            || f[0]["summary"].as_str().unwrap().contains("64 MiB"),
        "{f:#?}"
    );
    // RoCE with NCCL_IB_GID_INDEX=3, and one node whose IPv4 RoCE v2 entry sits at 5 (macvlan; nccl #1573).
    let p = profile_with(dir.path(), "shared-gid3", |s| {
        s.replacen(
            "socket_ifname: \"eth0\",",
            "socket_ifname: \"eth0\",\n        gid_index: 3,",
            1,
        )
    });
    let _roce = NodeKnob::set(&nodes, "link-layer", "Ethernet");
    let _shifted = NodeKnob::set(&nodes[1..2], "roce-v2-index", "5");
    let (code, v, text) = check(&ns.0, &p, &["--no-matrix"], &dir.path().join("c.html"));
    assert_eq!(code, 1, "{text}");
    let f = failing(&v, "nccl-ib-gid-index");
    assert!(!f.is_empty(), "{:#}", v["findings"]);
    for x in &f {
        assert!(
            x["subject"].as_str().unwrap().contains(nodes[1].as_str()),
            "only the shifted node fails: {x:#}"
        );
        assert!(x["fix"].as_str().unwrap().contains("to 5"), "{x:#}");
    }
    no_pods_left(&ns.0);
}

/// Istio's injector (a mutating webhook the API server calls, started by up.sh) adds istio-proxy to every pod
/// created in a namespace labelled `istio-injection=enabled`: the check pods there carry a proxy check never
/// put in their spec, and every one FAILs naming it and the opt-out. The same profile in an unlabelled
/// namespace passes (`check_passes_for_every_other_builtin_profile_with_nodes_and_leaves_nothing`).
#[test]
#[ignore = "control-plane tier: make cluster-test"]
fn a_proxy_injected_by_admission_fails_every_check_pod_naming_it_and_the_opt_out() {
    let ns = BareNs::new("check-mesh");
    kubectl_ok(&["label", "namespace", &ns.0, "istio-injection=enabled"]);
    let dir = tempfile::tempdir().unwrap();
    let nodes = eligible("rdma-shared-device");
    let (code, v, text) = check(
        &ns.0,
        "rdma-shared-device",
        &["--no-matrix"],
        &dir.path().join("mesh.html"),
    );
    assert_eq!(code, 1, "{text}");
    validate(&v);
    let f = failing(&v, "sidecar-proxy");
    assert_eq!(f.len(), nodes.len(), "{:#}", v["findings"]);
    for x in &f {
        let summary = x["summary"].as_str().unwrap();
        assert!(
            summary.contains("istio-proxy") && summary.contains("sidecar.istio.io/status"),
            "{x:#}"
        );
        assert!(
            x["fix"]
                .as_str()
                .unwrap()
                .contains("sidecar.istio.io/inject"),
            "{x:#}"
        );
    }
    for n in v["nodes"].as_array().unwrap() {
        let sidecars = n["facts"]["sidecars"].as_array().unwrap();
        assert!(
            sidecars.iter().any(|s| s == "istio-proxy"),
            "{:#}",
            n["facts"]
        );
    }
    no_pods_left(&ns.0);
}

/// Ctrl-C while the check pods run: check deletes what it created before it exits 130, and writes its report
/// (interrupted, with the pods it made); nothing with its label is left in the namespace.
#[test]
#[ignore = "control-plane tier: make cluster-test"]
fn an_interrupted_check_exits_130_and_leaves_no_check_pod() {
    use std::process::Stdio;
    let ns = BareNs::new("check-int");
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let spawn = || {
        rdmakit()
            .args([
                "check",
                "--profile",
                "rdma-shared-device",
                "-n",
                &ns.0,
                "--json",
            ])
            .arg(&json)
            .env("KUBECONFIG", kubeconfig())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (code, stderr) =
        sigint_once_present(spawn, &ns.0, &["pods", "-l", "rdmakit.io/check"], "check");
    assert_eq!(code, Some(130), "{stderr}");
    assert!(
        stderr.contains("interrupt: deleting the check pods"),
        "{stderr}"
    );
    no_pods_left(&ns.0);
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    validate(&v);
    assert_eq!(
        failing(&v, "check-interrupted").len(),
        1,
        "{:#}",
        v["findings"]
    );
}
