//! `rdmakit preflight` against the tier: the nodes with GPU and RDMA capacity per profile (device-plugin
//! resources, or DRANET's ResourceSlices), the DRANET pods and the served APIs, read through the real API server.

use std::process::Command;

use serde_json::Value;

use super::harness::{NodePatch, kubeconfig, kubectl, kubectl_ok, rdmakit_path};

fn preflight(args: &[&str]) -> (i32, Value) {
    let o = Command::new(rdmakit_path())
        .arg("preflight")
        .args(args)
        .arg("--json")
        .env("KUBECONFIG", kubeconfig())
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "preflight --json: {e}: {}",
            String::from_utf8_lossy(&o.stderr)
        )
    });
    (o.status.code().unwrap_or(-1), v)
}

fn eligible(v: &Value) -> Vec<String> {
    v["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["eligible"] == true)
        .map(|n| n["name"].as_str().unwrap().to_owned())
        .collect()
}

fn check<'a>(v: &'a Value, id: &str, subject: &str) -> &'a Value {
    v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == id && c["subject"].as_str().is_some_and(|s| s.contains(subject)))
        .unwrap_or_else(|| panic!("no {id} check on {subject}: {v:#}"))
}

#[test]
#[ignore = "control-plane tier: make cluster-test"]
fn preflight_finds_the_erdma_nodes_and_fails_when_one_loses_its_resource() {
    let (code, v) = preflight(&["--profile", "aliyun-erdma"]);
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(
        eligible(&v),
        ["cn-beijing.10.0.5.75", "cn-beijing.10.0.5.76"]
    );
    for api in [
        "ray.io/v1 RayCluster",
        "kubeflow.org/v2beta1 MPIJob",
        "resource.k8s.io/v1 DeviceClass",
    ] {
        assert_eq!(check(&v, "api-served", api)["verdict"], "ok");
    }
    let node = "cn-beijing.10.0.5.76";
    let (code, v) = {
        let _patch = NodePatch::remove_resource(node, "aliyun/erdma");
        preflight(&["--profile", "aliyun-erdma"])
    };
    assert_eq!(code, 1, "{v:#}");
    assert_eq!(v["verdict"], "fail");
    assert_eq!(check(&v, "rdma-gpu-nodes", "cluster")["verdict"], "fail");
    assert_eq!(check(&v, "node-capacity", node)["verdict"], "warn");
}

#[test]
#[ignore = "control-plane tier: make cluster-test"]
fn preflight_counts_dranet_devices_from_resource_slices_and_the_dranet_pods() {
    let (code, v) = preflight(&["--profile", "aliyun-erdma-dra"]);
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(
        eligible(&v),
        ["cn-hangzhou.172.16.0.21", "cn-hangzhou.172.16.0.22"]
    );
    let pods = check(&v, "dranet-pods", "k8s-app=dranet");
    assert_eq!(pods["verdict"], "ok");
    assert_eq!(pods["summary"], "2/2 Ready");
}

/// A third eRDMA node that never reports Ready (KWOK's node stages skip `rdmakit.test/not-ready=true`): counted
/// as not eligible and named.
#[test]
#[ignore = "control-plane tier: make cluster-test"]
fn preflight_names_a_not_ready_node_and_does_not_count_it() {
    let name = "cn-beijing.10.0.5.77";
    super::harness::apply_yaml(&format!(
        "apiVersion: v1\nkind: Node\nmetadata:\n  name: {name}\n  labels:\n    rdmakit.test/not-ready: \"true\"\n    aliyun.accelerator/nvidia_name: NVIDIA-RTX-PRO-5000-72GB-Blackwell\nstatus:\n  capacity: {{cpu: \"256\", memory: 1000Gi, pods: \"110\", nvidia.com/gpu: \"8\", aliyun/erdma: \"400\"}}\n  allocatable: {{cpu: \"256\", memory: 1000Gi, pods: \"110\", nvidia.com/gpu: \"8\", aliyun/erdma: \"400\"}}\n"
    ));
    std::thread::sleep(std::time::Duration::from_secs(2));
    let (code, v) = preflight(&["--profile", "aliyun-erdma"]);
    let _ = kubectl(&["delete", "node", name]);
    assert_eq!(code, 0, "the two Ready eRDMA nodes are enough: {v:#}");
    assert_eq!(
        eligible(&v),
        ["cn-beijing.10.0.5.75", "cn-beijing.10.0.5.76"]
    );
    let c = check(&v, "node-capacity", name);
    assert_eq!(c["verdict"], "warn", "{c}");
    assert!(
        c["summary"].as_str().unwrap().contains("node not Ready"),
        "{c}"
    );
}

/// DRANET's DaemonSet with a pod that runs but never becomes Ready (KWOK's pod-ready stage skips
/// `rdmakit.test/never-ready=true`): the preflight fails on the DRANET pods.
#[test]
#[ignore = "control-plane tier: make cluster-test"]
fn preflight_fails_while_a_dranet_pod_never_gets_ready() {
    let patch = |annotations: &str| {
        kubectl_ok(&[
            "-n",
            "kube-system",
            "patch",
            "daemonset",
            "dranet",
            "--type=merge",
            "-p",
            &format!(r#"{{"spec":{{"template":{{"metadata":{{"annotations":{annotations}}}}}}}}}"#),
        ]);
    };
    patch(r#"{"rdmakit.test/never-ready":"true"}"#);
    let v = super::harness::eventually(
        "a DRANET pod that is not Ready",
        std::time::Duration::from_secs(60),
        || {
            let (code, v) = preflight(&["--profile", "aliyun-erdma-dra"]);
            (code == 1).then_some(v)
        },
    );
    patch(r#"{"rdmakit.test/never-ready":null}"#);
    let pods = check(&v, "dranet-pods", "k8s-app=dranet");
    assert_eq!(pods["verdict"], "fail", "{pods}");
    assert!(pods["fix"].as_str().unwrap().contains("DRANET"), "{pods}");
    kubectl_ok(&[
        "-n",
        "kube-system",
        "rollout",
        "status",
        "daemonset/dranet",
        "--timeout=120s",
    ]);
}
