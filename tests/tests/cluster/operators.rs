//! The operators for real: KubeRay reconciles the RayCluster rendered from each Ray profile into pods that carry
//! what rdmakit's waits and selectors expect, and the MPI Operator creates the MPIJob's launcher and workers
//! whose ResourceClaims the real scheduler allocates from DRANET's ResourceSlices.

use std::time::Duration;

use serde_json::Value;

use super::harness::{Kind, Ns, eventually, get_json, kubectl_ok, output_ok, rdmakit};

fn render(ns: &Ns, system: &str, profile: &str) -> std::path::PathBuf {
    let dir = ns.out.join(format!("render-{profile}-{system}"));
    output_ok(
        rdmakit()
            .args(["render", system, "--profile", profile, "--out"])
            .arg(&dir),
    );
    dir
}

fn yaml_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    v.sort();
    v
}

fn pods(ns: &str, selector: &str) -> Vec<Value> {
    get_json(&["pods", "-n", ns, "-l", selector])["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn container<'a>(pod: &'a Value, name_prefix: &str) -> &'a Value {
    pod["spec"]["containers"]
        .as_array()
        .and_then(|cs| {
            cs.iter().find(|c| {
                c["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with(name_prefix))
            })
        })
        .unwrap_or_else(|| panic!("no {name_prefix}* container in {}", pod["metadata"]["name"]))
}

fn env_of(c: &Value, key: &str) -> Option<String> {
    c["env"].as_array()?.iter().find(|e| e["name"] == key)?["value"]
        .as_str()
        .map(str::to_owned)
}

#[test]
#[ignore = "control-plane tier: make cluster-test"]
fn kuberay_reconciles_each_ray_profiles_raycluster_into_pods_rdmakit_can_select() {
    // (profile, RDMA resource on workers, NCCL_IB_HCA, host network (seed 000: yes; seed 001: no), node kind)
    for (profile, rdma, hca, host_net, kind) in [
        ("aliyun-erdma", "aliyun/erdma", "erdma_0", true, Kind::Erdma),
        (
            "rdma-shared-device",
            "rdma/rdma_shared_device_a",
            "mlx5",
            false,
            Kind::Mlx5,
        ),
    ] {
        let ns = Ns::new("kuberay", kind);
        let dir = render(&ns, "raycluster", profile);
        let files = yaml_files(&dir);
        assert_eq!(files.len(), 1, "{files:?}");
        ns.apply_file(&files[0]);
        let rc = get_json(&["rayclusters", "-n", &ns.name]);
        let cluster = rc["items"][0]["metadata"]["name"]
            .as_str()
            .unwrap()
            .to_owned();
        let workers_want = rc["items"][0]["spec"]["workerGroupSpecs"][0]["replicas"]
            .as_u64()
            .unwrap() as usize;
        let sel_workers = format!("ray.io/cluster={cluster},ray.io/node-type=worker");
        let sel_head = format!("ray.io/cluster={cluster},ray.io/node-type=head");
        let workers = eventually(
            "KubeRay creates the worker pods",
            Duration::from_secs(60),
            || {
                let p = pods(&ns.name, &sel_workers);
                (p.len() == workers_want).then_some(p)
            },
        );
        let heads = eventually(
            "KubeRay creates the head pod",
            Duration::from_secs(60),
            || {
                let p = pods(&ns.name, &sel_head);
                (p.len() == 1).then_some(p)
            },
        );
        for w in &workers {
            let c = container(w, "ray-worker");
            assert_eq!(
                w["spec"]["hostNetwork"].as_bool().unwrap_or(false),
                host_net,
                "{profile}: hostNetwork"
            );
            if host_net {
                assert_eq!(
                    w["spec"]["dnsPolicy"], "ClusterFirstWithHostNet",
                    "{profile}"
                );
            }
            let caps = c["securityContext"]["capabilities"]["add"].to_string();
            assert!(
                caps.contains("IPC_LOCK"),
                "{profile}: no IPC_LOCK in {caps}"
            );
            assert!(
                c["resources"]["limits"][rdma].is_string(),
                "{profile}: worker limits lack {rdma}: {}",
                c["resources"]
            );
            assert_eq!(env_of(c, "NCCL_IB_HCA").as_deref(), Some(hca), "{profile}");
        }
        // Seed 000's head is CPU-only (no eRDMA); seed 001's head asks for the shared devices like its workers.
        let head_rdma = &container(&heads[0], "ray-head")["resources"]["limits"][rdma];
        assert_eq!(
            head_rdma.is_string(),
            !host_net,
            "{profile}: head {rdma} = {head_rdma}"
        );
        // The RayCluster reaches ready once KWOK runs the pods: rdmakit's wait_raycluster condition.
        eventually(
            "RayCluster status.state=ready",
            Duration::from_secs(90),
            || {
                let rc = get_json(&["raycluster", cluster.as_str(), "-n", &ns.name]);
                (rc["status"]["state"] == "ready").then_some(())
            },
        );
        ns.delete_file(&files[0], "--wait=true");
    }
}

#[test]
#[ignore = "control-plane tier: make cluster-test"]
fn mpi_operator_runs_the_mpijob_with_claims_the_scheduler_allocates_and_reserves() {
    let ns = Ns::new("mpijob", Kind::Erdma);
    let dra = render(&ns, "dra", "aliyun-erdma-dra");
    let mpi = render(&ns, "mpijob", "aliyun-erdma-dra");
    for f in yaml_files(&dra) {
        ns.apply_file(&f);
    }
    let job_file = yaml_files(&mpi)
        .into_iter()
        .find(|f| std::fs::read_to_string(f).unwrap().contains("kind: MPIJob"))
        .expect("an MPIJob manifest");
    ns.apply_file(&job_file);
    let job = get_json(&["mpijobs", "-n", &ns.name]);
    let name = job["items"][0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_owned();
    let want = job["items"][0]["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"]
        .as_u64()
        .unwrap() as usize;
    let workers =
        format!("training.kubeflow.org/job-name={name},training.kubeflow.org/job-role=worker");
    eventually(
        "the MPI Operator creates the workers",
        Duration::from_secs(60),
        || (pods(&ns.name, &workers).len() == want).then_some(()),
    );
    // The claims made from the ResourceClaimTemplate: allocated on a DRANET node and reserved for the pod.
    let claims = eventually(
        "every worker's claim allocated and reserved",
        Duration::from_secs(60),
        || {
            let c = get_json(&["resourceclaims", "-n", &ns.name]);
            let items = c["items"].as_array().cloned().unwrap_or_default();
            let done = items.iter().filter(|c| {
                c["status"]["allocation"].is_object()
                    && c["status"]["reservedFor"]
                        .as_array()
                        .is_some_and(|r| !r.is_empty())
            });
            (done.count() >= want).then_some(items)
        },
    );
    for c in &claims {
        let results = c["status"]["allocation"]["devices"]["results"].to_string();
        assert!(
            results.contains("dra.net") && results.contains("erdma-0"),
            "{results}"
        );
    }
    let table = kubectl_ok(&["get", "resourceclaims", "-n", &ns.name]);
    assert!(table.contains("allocated,reserved"), "{table}");
    let launcher =
        format!("training.kubeflow.org/job-name={name},training.kubeflow.org/job-role=launcher");
    eventually(
        "the MPI Operator creates the launcher",
        Duration::from_secs(90),
        || (pods(&ns.name, &launcher).len() == 1).then_some(()),
    );
    eventually(
        "the MPIJob Succeeded (the launcher's script ran mpirun over both workers and exited 0)",
        Duration::from_secs(120),
        || {
            let j = get_json(&["mpijob", name.as_str(), "-n", &ns.name]);
            j["status"]["conditions"]
                .as_array()
                .is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c["type"] == "Succeeded" && c["status"] == "True")
                })
                .then_some(())
        },
    );
    ns.delete_file(&job_file, "--wait=true");
    for f in yaml_files(&dra) {
        ns.delete_file(&f, "--ignore-not-found");
    }
}
