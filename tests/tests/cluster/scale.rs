//! At scale: `rdmakit preflight --pods` on 200 simulated eRDMA nodes, the scale benchmark's fixture
//! (bench/scale/fixture.py) at the size `make test` affords. Every planted fault is named and nothing else is
//! (no RDMA capacity, NotReady, a 64 KiB memlock), the lists are paged rather than a GET per object, and each
//! Running pod gets exactly one exec. Then node-level preflight of the pool's 50 DRANET (ResourceSlices, one
//! without dra.net/rdma), 50 EFA and 50 shared-device nodes by their profiles. bench/scale/run.py measures the
//! same at 100, 300 and 1,000 nodes. And the workflows at that width: the nccl-tests MPIJob and the eRDMA RayCluster
//! with 64 workers each on 70 of the pool's nodes.

use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use super::harness::{
    BareNs, ERDMA_SECRETS, Kind, Ns, OutputWithin, assert_clean, assert_contains_all, eventually,
    kubeconfig, kubectl, kubectl_in, rdmakit, repo,
};

const NODES: usize = 200;
const POOL: &str = "rdmakit.test/pool=scale";

/// The pool's nodes; dropping it deletes them (after the namespace, so KWOK finalizes the pods first).
struct ScalePool {
    ns: BareNs,
}

impl Drop for ScalePool {
    fn drop(&mut self) {
        let _ = kubectl(&[
            "delete",
            "namespace",
            &self.ns.0,
            "--wait=true",
            "--timeout=300s",
        ]);
        // DRANET's slices are owned by their node on a real cluster; the fixture's carry only the label.
        let _ = kubectl(&["delete", "resourceslices", "-l", POOL, "--wait=true"]);
        let _ = kubectl(&[
            "delete",
            "nodes",
            "-l",
            POOL,
            "--wait=true",
            "--timeout=300s",
        ]);
    }
}

fn fixture(args: &[&str]) -> String {
    let o = Command::new("python3")
        .arg(repo().join("bench/scale/fixture.py"))
        .args(args)
        .output_within()
        .unwrap();
    assert!(
        o.status.success(),
        "fixture.py {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

/// `apiserver_request_total` for one verb on one resource (subresource "" or "exec"), summed over codes.
fn requests(verb: &str, resource: &str, subresource: &str) -> f64 {
    let o = kubectl(&["get", "--raw", "/metrics"]);
    assert!(
        o.status.success(),
        "metrics: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let text = String::from_utf8_lossy(&o.stdout);
    text.lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
        .filter(|l| {
            l.contains(&format!("verb=\"{verb}\""))
                && l.contains(&format!("resource=\"{resource}\""))
                && l.contains(&format!("subresource=\"{subresource}\""))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn names(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap().to_owned())
        .collect()
}

#[test]
#[ignore = "control-plane tier: make cluster-test"]
fn preflight_on_200_nodes_names_every_planted_fault_with_paged_lists_and_one_exec_per_pod() {
    let pool = ScalePool {
        ns: BareNs::new("scale"),
    };
    let ns = pool.ns.0.clone();
    let want: Value = serde_json::from_str(&fixture(&["--expected", &NODES.to_string()])).unwrap();
    let (no_rdma, not_ready, memlock) = (
        names(&want["no_rdma"]),
        names(&want["not_ready"]),
        names(&want["memlock"]),
    );
    assert!(
        !no_rdma.is_empty() && !not_ready.is_empty() && !memlock.is_empty(),
        "{want}"
    );
    let yaml = fixture(&[&NODES.to_string(), &ns]);
    let o = kubectl_in(&["apply", "--server-side", "-f", "-"], Some(&yaml));
    assert!(
        o.status.success(),
        "apply: {}",
        String::from_utf8_lossy(&o.stderr)
    );

    // The DaemonSet's pods run on every Ready node with RDMA capacity; the others stay Pending.
    let unhealthy: BTreeSet<&String> = no_rdma.iter().chain(&not_ready).collect();
    let healthy = NODES - unhealthy.len();
    eventually("the probe pods Running", Duration::from_secs(600), || {
        let out = kubectl(&[
            "-n",
            &ns,
            "get",
            "pods",
            "-l",
            "app=scale-probe",
            "-o",
            "jsonpath={range .items[*]}{.status.phase}{\"\\n\"}{end}",
        ]);
        let running = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| *l == "Running")
            .count();
        (running >= healthy).then_some(())
    });

    let (lists0, pod_lists0, execs0) = (
        requests("LIST", "nodes", ""),
        requests("LIST", "pods", ""),
        requests("CONNECT", "pods", "exec"),
    );
    let o = rdmakit()
        .args([
            "preflight",
            "--profile",
            "aliyun-erdma",
            "--pods",
            "app=scale-probe",
        ])
        .args(["--pods-namespace", &ns, "--json"])
        .env("KUBECONFIG", kubeconfig())
        .output_within()
        .unwrap();
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "preflight --json: {e}: {}",
            String::from_utf8_lossy(&o.stderr)
        )
    });
    assert_eq!(
        o.status.code(),
        Some(1),
        "the planted faults fail the preflight: {v:#}"
    );

    // Node faults: without RDMA capacity or not Ready, a node is not eligible; every other pool node is.
    let nodes = v["nodes"].as_array().unwrap();
    let pool_nodes: Vec<&Value> = nodes
        .iter()
        .filter(|n| n["name"].as_str().unwrap().starts_with("scale-erdma-"))
        .collect();
    for n in &pool_nodes {
        let name = n["name"].as_str().unwrap().to_owned();
        let planted = unhealthy.contains(&name);
        assert_eq!(
            n["eligible"] == false,
            planted,
            "{name}: eligible={} planted={planted}",
            n["eligible"]
        );
    }
    for name in &no_rdma {
        assert!(
            pool_nodes.iter().any(|n| n["name"] == name.as_str()),
            "{name} not reported"
        );
    }

    // Pod faults: exactly the memlock nodes' pods fail pod-memlock, each named with its node.
    // A NotReady node's pod cannot be exec'd into: reported unreadable with why, never guessed; only those.
    let pods = v["pods"].as_array().unwrap();
    let unreadable = |p: &Value| p["unreadable"].as_array().is_some_and(|u| !u.is_empty());
    let (failed, probed): (Vec<&Value>, Vec<&Value>) = pods.iter().partition(|p| unreadable(p));
    assert_eq!(
        probed.len(),
        healthy,
        "one probe per Running pod on a healthy node"
    );
    for p in &failed {
        let node = p["node"].as_str().unwrap_or_default();
        assert!(
            not_ready.iter().any(|n| n == node),
            "an unreadable pod on {node}: {p}"
        );
    }
    let failed: BTreeSet<String> = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["id"] == "pod-memlock" && c["verdict"] == "fail")
        .map(|c| {
            let fix = c["fix"].as_str().unwrap();
            memlock
                .iter()
                .find(|m| fix.contains(m.as_str()))
                .unwrap_or_else(|| panic!("a memlock failure on no planted node: {c}"))
                .clone()
        })
        .collect();
    assert_eq!(
        failed,
        memlock.iter().cloned().collect::<BTreeSet<_>>(),
        "{v:#}"
    );

    // The cost: one page per 500 objects (200 nodes and 200 pods: one LIST each; a controller's relist
    // may add one), and one exec per Running pod.
    let lists = requests("LIST", "nodes", "") - lists0;
    let pod_lists = requests("LIST", "pods", "") - pod_lists0;
    let execs = requests("CONNECT", "pods", "exec") - execs0;
    assert!(
        lists <= 2.0 && pod_lists <= 2.0,
        "LIST nodes {lists}, LIST pods {pod_lists}: not paged"
    );
    assert!(
        lists >= 1.0 && pod_lists >= 1.0,
        "no LIST at all (nodes {lists}, pods {pod_lists})"
    );
    assert_eq!(execs as usize, pods.len(), "one exec per Running pod");

    // The hyperscaler shapes in the same pool, node-level preflight by each one's profile: every healthy
    // node of the shape eligible, each planted node (no RDMA capacity; for DRA a slice without
    // dra.net/rdma; NotReady) not, the capacity ones named as GPU nodes without RDMA; slices paged too.
    for (shape, e) in want["shapes"].as_object().unwrap() {
        let profile = e["profile"].as_str().unwrap();
        let slice_lists0 = requests("LIST", "resourceslices", "");
        let o = rdmakit()
            .args(["preflight", "--profile", profile, "--json"])
            .env("KUBECONFIG", kubeconfig())
            .output_within()
            .unwrap();
        let v: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|err| {
            panic!(
                "preflight --profile {profile} --json: {err}: {}",
                String::from_utf8_lossy(&o.stderr)
            )
        });
        let prefix = format!("scale-{shape}-");
        let mine: Vec<&Value> = v["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|n| n["name"].as_str().unwrap().starts_with(&prefix))
            .collect();
        let eligible: BTreeSet<String> = mine
            .iter()
            .filter(|n| n["eligible"] == true)
            .map(|n| n["name"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(
            eligible,
            names(&e["healthy"]).into_iter().collect::<BTreeSet<_>>(),
            "{profile}: the eligible {shape} nodes are the healthy ones"
        );
        for name in names(&e["no_rdma"]) {
            let named = v["checks"].as_array().unwrap().iter().any(|c| {
                c["id"] == "node-capacity"
                    && c["subject"] == name.as_str()
                    && c["summary"]
                        .as_str()
                        .unwrap()
                        .contains("GPU node without RDMA capacity")
            });
            assert!(named, "{profile}: {name} (planted) not named: {v:#}");
        }
        for name in names(&e["not_ready"]) {
            assert!(
                !eligible.contains(&name),
                "{profile}: {name} is NotReady yet eligible"
            );
        }
        if shape == "dra" {
            let slice_lists = requests("LIST", "resourceslices", "") - slice_lists0;
            assert!(
                (1.0..=2.0).contains(&slice_lists),
                "{profile}: LIST resourceslices {slice_lists}: not one paged list"
            );
        }
    }
}

/// 70 of the pool's eRDMA nodes for the 64-worker runs; the namespace goes first (KWOK finalizes its pods),
/// then the nodes.
struct Pool64 {
    ns: Option<Ns>,
}

impl Drop for Pool64 {
    fn drop(&mut self) {
        if let Some(ns) = self.ns.take() {
            let name = ns.name.clone();
            drop(ns);
            let _ = kubectl(&[
                "delete",
                "namespace",
                &name,
                "--wait=true",
                "--timeout=300s",
            ]);
        }
        let _ = kubectl(&[
            "delete",
            "nodes",
            "-l",
            POOL,
            "--wait=true",
            "--timeout=300s",
        ]);
    }
}

/// The workflows at the width of a real job: the nccl-tests MPIJob with 64 workers (the MPI Operator's
/// hostfile of 64 hosts, `-np 64`, the launcher's stand-in mpirun starting a rank in each worker, the
/// counter proof summed over the 64 workers' devices) and erdma-ray-rdt with a RayCluster of 64 workers
/// (memlock, devices and NCCL_IB_HCA read in each; the demo's two actors on two of them, the other 62 idle
/// without that being a finding), both PASS and leave nothing behind.
#[test]
#[ignore = "control-plane tier: make cluster-test"]
fn the_mpijob_and_the_raycluster_with_64_workers_pass_on_the_scale_pool() {
    let yaml = fixture(&["--nodes", "70"]);
    let mut pool = Pool64 {
        ns: Some(Ns::new("scale64", Kind::Erdma)),
    };
    let o = kubectl_in(&["apply", "--server-side", "-f", "-"], Some(&yaml));
    assert!(
        o.status.success(),
        "apply: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let ns = pool.ns.as_ref().unwrap();
    let on_pool = ["--set", "node_selector.rdmakit.test/pool=scale"];

    let mpi = ns.run(
        "nccl-tests",
        &[
            &["--set", "profile=aliyun-erdma", "--set", "mpi_workers=64"][..],
            &on_pool,
        ]
        .concat(),
    );
    mpi.assert_pass();
    let report = ns.report_md();
    assert_contains_all(
        &report,
        &[
            "PASS at least 64 nodes with nvidia.com/gpu=1, aliyun/erdma=1",
            "rdmakit.test/pool=scale: 70 node(s)",
            "PASS NCCL uses eRDMA (NET/IB : Using) on erdma_0",
            "on 64 pod(s) port 1",
            "PASS all_reduce_perf ran every size without errors",
        ],
    );
    let job = std::fs::read_to_string(ns.out.join("bundle/mpi-job.yaml")).unwrap();
    assert!(job.contains("-np 64"), "the launcher runs 64 ranks:\n{job}");
    assert_clean(ns);

    let mut args: Vec<&str> = ERDMA_SECRETS.to_vec();
    args.extend(["--set", "worker_replicas=64", "--set", "min_nodes=64"]);
    args.extend(on_pool);
    let ray = ns.run("erdma-ray-rdt", &args);
    ray.assert_pass();
    let report = ns.report_md();
    assert_contains_all(
        &report,
        &[
            "PASS worker 63: RLIMIT_MEMLOCK unlimited",
            "PASS worker 63: NCCL_IB_HCA=erdma_0 selects RDMA devices in the pod",
            "on 64 pod(s) port 1",
            "PASS the RDT demo's two actors ran NCCL: NCCL transport lines in the logs of 2 worker(s)",
            "no NCCL on 62 worker(s)",
        ],
    );
    assert_clean(ns);
    drop(pool.ns.take());
}
