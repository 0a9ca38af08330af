//! The real components as judges of rdmakit's own reading of the cluster (issue 24, item 4): the scheduler's
//! DRA allocator against `probe::dra_selection` on every fixture ResourceSlice (a differential, like
//! validate.rs), the API server's PodSecurity admission refusing a workflow's pod with rdmakit naming the
//! refused fields, and the scheduler's `Unschedulable` for a taken host port named in the report.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::harness::{
    BareNs, Kind, Ns, apply_yaml, eventually, get_json, kubectl, kubectl_ok, output_ok, rdmakit,
};
use super::vendors::Nodes;

/// The CEL selectors to judge: every built-in DRA profile's DeviceClass (what rdmakit renders and its
/// preflight reads), and variants that select other devices (a string attribute, RDMA off, another driver).
fn selector_cases() -> Vec<(String, Vec<String>)> {
    let o = output_ok(rdmakit().args(["profiles", "--json"]));
    let list: Vec<serde_json::Value> = serde_json::from_slice(&o.stdout).unwrap();
    let mut cases: Vec<(String, Vec<String>)> = list
        .iter()
        .filter(|p| p["origin"] == "built-in" && p["rdma"]["kind"] == "dra")
        .map(|p| {
            let sel = p["rdma"]["selectors"]
                .as_array()
                .unwrap_or_else(|| panic!("{p}: no rdma.selectors"))
                .iter()
                .map(|s| s.as_str().unwrap().to_owned())
                .collect();
            (p["name"].as_str().unwrap().to_owned(), sel)
        })
        .collect();
    assert!(cases.len() >= 2, "DRA profiles: {cases:?}");
    for (name, sel) in [
        (
            "one-named-rdma-device",
            // Guarded as the profiles' selectors are: CEL fails on a device without the attribute (the
            // seed's eth0 has no rdmaDevice), and the scheduler then refuses the pod with that error.
            r#"device.driver == "dra.net" && "rdmaDevice" in device.attributes["dra.net"] && device.attributes["dra.net"].rdmaDevice == "mlx5_0""#,
        ),
        (
            "not-rdma",
            r#"device.driver == "dra.net" && device.attributes["dra.net"].rdma == false"#,
        ),
        ("another-driver", r#"device.driver == "gpu.nvidia.com""#),
    ] {
        cases.push((name.to_owned(), vec![sel.to_owned()]));
    }
    cases
}

/// probe's selection on the cluster's slices: node -> device names (DRANET's `name (rdma device)` cut to the
/// slice's device name, what the allocation names).
fn probe_selection(selectors: &[String]) -> BTreeMap<String, BTreeSet<String>> {
    let slices = kubectl_ok(&["get", "resourceslices", "-o", "json"]);
    let devices = probe::preflight::parse_resource_slices(&slices).unwrap();
    probe::preflight::select_devices(selectors, &devices)
        .selected
        .into_iter()
        .map(|(node, devs)| {
            let names = devs
                .iter()
                .map(|d| d.split(" (").next().unwrap_or(d).to_owned())
                .collect();
            (node, names)
        })
        .collect()
}

/// The nodes that publish a ResourceSlice.
fn slice_nodes() -> BTreeSet<String> {
    let v = get_json(&["resourceslices"]);
    v["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["spec"]["nodeName"].as_str().map(str::to_owned))
        .collect()
}

/// What the scheduler did for a pod pinned to `node` with a claim for *all* devices of `class` there:
/// `Some(devices)` allocated, `None` unschedulable (no device matches).
fn scheduler_allocation(ns: &str, i: usize, node: &str, class: &str) -> Option<BTreeSet<String>> {
    let (claim, pod) = (format!("all-{i}"), format!("judge-{i}"));
    apply_yaml(&format!(
        "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {{name: {claim}, namespace: {ns}}}\nspec:\n  devices:\n    requests:\n    - name: r\n      exactly: {{deviceClassName: {class}, allocationMode: All}}\n---\napiVersion: v1\nkind: Pod\nmetadata: {{name: {pod}, namespace: {ns}}}\nspec:\n  tolerations: [{{operator: Exists}}]\n  affinity:\n    nodeAffinity:\n      requiredDuringSchedulingIgnoredDuringExecution:\n        nodeSelectorTerms:\n        - matchFields: [{{key: metadata.name, operator: In, values: [\"{node}\"]}}]\n  resourceClaims: [{{name: r, resourceClaimName: {claim}}}]\n  containers:\n  - name: c\n    image: busybox\n    resources: {{claims: [{{name: r}}]}}\n"
    ));
    eventually(
        &format!("the scheduler decides {pod} on {node} ({class})"),
        Duration::from_secs(90),
        || {
            let c = get_json(&["-n", ns, "resourceclaim", &claim]);
            if let Some(results) = c.pointer("/status/allocation/devices/results") {
                let devs = results
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|r| r["device"].as_str().unwrap().to_owned())
                    .collect();
                return Some(Some(devs));
            }
            let p = get_json(&["-n", ns, "pod", &pod]);
            let scheduled = p["status"]["conditions"]
                .as_array()
                .and_then(|cs| cs.iter().find(|c| c["type"] == "PodScheduled"))?;
            match scheduled["reason"].as_str() {
                Some("Unschedulable") => Some(None),
                // A selector the scheduler cannot evaluate: no allocation, said at once.
                Some("SchedulerError") => panic!(
                    "{class} on {node}: the scheduler could not evaluate the selectors: {}",
                    scheduled["message"]
                ),
                _ => None,
            }
        },
    )
}

/// Differential DRA selection: for every selector case and every node with a fixture ResourceSlice (the
/// seed's two DRANET nodes, and the GKE A4 nodes' eight RDMA NICs each), the devices the real scheduler
/// allocates to a claim for all of them are exactly the devices `probe::dra_selection` (what rdmakit's
/// preflight and dranet workflows judge by) says the DeviceClass selects there; no device, unschedulable.
#[test]
#[ignore = "control-plane tier: make cluster-test"]
fn the_schedulers_dra_allocation_agrees_with_probe_on_every_fixture_slice() {
    let _gke = Nodes::apply("gke-a4-nodes.yaml", "gke");
    let ns = BareNs::new("judge-dra");
    let nodes = slice_nodes();
    assert!(nodes.len() >= 4, "nodes with slices: {nodes:?}");
    let mut disagree = Vec::new();
    let (mut allocated, mut refused) = (0, 0);
    for (case, selectors) in selector_cases() {
        let class = format!("judge-{case}-{}", std::process::id() % 10000);
        let cel: String = selectors
            .iter()
            .map(|s| {
                format!(
                    "  - cel: {{expression: {}}}\n",
                    serde_json::to_string(s).unwrap()
                )
            })
            .collect();
        apply_yaml(&format!(
            "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {{name: {class}}}\nspec:\n  selectors:\n{cel}"
        ));
        let probe = probe_selection(&selectors);
        for (i, node) in nodes.iter().enumerate() {
            let ours = probe.get(node).cloned().unwrap_or_default();
            let theirs = scheduler_allocation(&ns.0, i, node, &class);
            match &theirs {
                Some(_) => allocated += 1,
                None => refused += 1,
            }
            if theirs.clone().unwrap_or_default() != ours {
                disagree.push(format!(
                    "{case} on {node}:\n  scheduler: {}\n  probe:     {ours:?}",
                    theirs.map_or("unschedulable".to_owned(), |d| format!("{d:?}"))
                ));
            }
        }
        // Free the devices before the next case claims all of them again.
        kubectl_ok(&[
            "-n",
            &ns.0,
            "delete",
            "pods,resourceclaims",
            "--all",
            "--wait=true",
            "--timeout=90s",
        ]);
        let _ = kubectl(&["delete", "deviceclass", &class]);
    }
    println!("DRA differential: {allocated} allocations, {refused} unschedulable");
    assert!(
        allocated >= 4 && refused >= 2,
        "cases without teeth: {allocated} allocated, {refused} refused"
    );
    assert!(
        disagree.is_empty(),
        "{} disagreement(s):\n{}",
        disagree.len(),
        disagree.join("\n")
    );
}

/// A namespace that enforces PodSecurity `baseline` refuses vke-ib-pod's test pod (a hostPath mount and
/// IPC_LOCK are what RDMA needs and what baseline forbids): the run ends as a cluster error whose message
/// names the refused fields and the fix, and nothing of the run is left.
#[test]
#[ignore = "control-plane tier: make cluster-test"]
fn pod_security_baseline_refuses_the_rdma_pod_and_rdmakit_names_the_fields() {
    let ns = Ns::new("judge-psa", Kind::Mlx5);
    kubectl_ok(&[
        "label",
        "namespace",
        &ns.name,
        "pod-security.kubernetes.io/enforce=baseline",
    ]);
    let r = ns.run("vke-ib-pod", &[]);
    let all = format!("{}{}", r.stdout, r.stderr);
    assert_eq!(r.code, 3, "expected a cluster error:\n{}", r.text());
    for needle in [
        "violates PodSecurity \"baseline:latest\"",
        "hostPath volumes",
        "IPC_LOCK",
        "pod-security.kubernetes.io/enforce=privileged",
    ] {
        assert!(all.contains(needle), "{needle:?} not in:\n{all}");
    }
    assert!(ns.leftovers().is_empty(), "{:?}", ns.leftovers());
}

/// Every node's host port 18515 held by a pod the scheduler knows: a workflow whose pod needs that port
/// stays Pending, and the run's error and report name the scheduler's `Unschedulable` and its message (the
/// wait does not time out silently). A small workflow of the test's own: the built-ins wait 300 s or more.
/// (CI once saw the wait end on its first list's Pending: the watcher skipped a change that was in its own
/// listing, fixed in crates/rdmakit/src/exec/kube/wait.rs.)
#[test]
#[ignore = "control-plane tier: make cluster-test"]
fn a_taken_host_port_is_a_real_unschedulable_named_in_the_report() {
    let ns = Ns::new("judge-port", Kind::Mlx5);
    let holders = hold_port_on_every_node(&ns.name, 18515);
    let dir = ns.out.join("wf");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("pod.yaml"),
        "apiVersion: v1\nkind: Pod\nmetadata: {name: wants-port}\nspec:\n  tolerations: [{operator: Exists}]\n  containers:\n  - name: c\n    image: busybox\n    ports: [{containerPort: 18515, hostPort: 18515}]\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("port.rhai"),
        "step(\"Create a pod that needs host port 18515\");\nkube::apply(\"pod.yaml\");\nkube::wait_pods(\"wants-port\", #{ timeout: 30 });\nreport::pass(\"scheduled\", \"\");\nprint(report::finish());\n",
    )
    .unwrap();
    let r = ns.run(dir.join("port.rhai").to_str().unwrap(), &[]);
    // What the scheduler said, for a failure below (read before the holders go).
    let seen = kubectl(&["-n", &ns.name, "get", "events", "-o", "wide"]);
    let seen = String::from_utf8_lossy(&seen.stdout).into_owned();
    drop(holders);
    assert_eq!(r.code, 3, "expected a cluster error:\n{}", r.text());
    let md = ns.report_md();
    for text in [&r.stderr, &md] {
        assert!(
            text.contains("wants-port Unschedulable") && text.contains("didn't have free ports"),
            "the taken port is not named:\n{text}\n{}\nevents:\n{seen}",
            r.text()
        );
    }
    assert!(
        ns.leftovers().iter().all(|l| !l.contains("wants-port")),
        "{:?}",
        ns.leftovers()
    );
}

/// One pod per node holding `hostPort: port` (bound by name: the scheduler counts them all the same);
/// deleted on drop.
struct PortHolders(String);

impl Drop for PortHolders {
    fn drop(&mut self) {
        let _ = kubectl(&[
            "-n",
            &self.0,
            "delete",
            "pods",
            "-l",
            "rdmakit.test/port-holder",
            "--wait=false",
        ]);
    }
}

fn hold_port_on_every_node(ns: &str, port: u16) -> PortHolders {
    let nodes = kubectl_ok(&["get", "nodes", "-o", "jsonpath={.items[*].metadata.name}"]);
    for (i, node) in nodes.split_whitespace().enumerate() {
        apply_yaml(&format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: port-holder-{i}, namespace: {ns}, labels: {{rdmakit.test/port-holder: \"1\"}}}}\nspec:\n  nodeName: {node}\n  tolerations: [{{operator: Exists}}]\n  containers:\n  - name: c\n    image: busybox\n    ports: [{{containerPort: {port}, hostPort: {port}}}]\n"
        ));
    }
    PortHolders(ns.to_owned())
}
