//! Each seed runbook reproduced from a built-in profile plus a few values: snapshot of every rendered
//! file, and explicit checks of every field the seed names.

use k8s_render::{Bundle, System, Values, render_systems};
use rdmakit::profiles::load_builtin;
use serde_json::{Value, json};

/// Every file of the bundle, headed by its path (what the snapshot holds).
fn listing(b: &Bundle) -> String {
    let mut out = String::new();
    for f in b.files() {
        out.push_str(&format!("==> {} <==\n{}", f.path, f.contents));
    }
    out
}

fn doc<'a>(b: &'a Bundle, file: &str, index: usize) -> &'a Value {
    let f = b
        .get(file)
        .unwrap_or_else(|| panic!("bundle has no {file}: {:?}", b.paths()));
    &f.documents[index]
}

fn at<'a>(v: &'a Value, pointer: &str) -> &'a Value {
    v.pointer(pointer).unwrap_or_else(|| {
        panic!(
            "no {pointer} in {}",
            serde_json::to_string_pretty(v).unwrap_or_default()
        )
    })
}

fn env_of(container: &Value) -> Vec<(String, String)> {
    container["env"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|e| {
                    (
                        e["name"].as_str().unwrap_or_default().to_owned(),
                        e["value"].as_str().unwrap_or_default().to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn has_env(container: &Value, name: &str, value: &str) -> bool {
    env_of(container)
        .iter()
        .any(|(n, v)| n == name && v == value)
}

fn text<'a>(b: &'a Bundle, file: &str) -> &'a str {
    &b.get(file).unwrap_or_else(|| panic!("no {file}")).contents
}

/// Seed 000: Ray Direct Transport over eRDMA on ACK (device plugin `aliyun/erdma`).
#[test]
fn seed_000_ray_rdt_over_erdma() {
    let profile = load_builtin("aliyun-erdma").unwrap();
    let values = Values::default();
    let b = render_systems(
        &[
            System::Image,
            System::Buildkit,
            System::RayCluster,
            System::RdtDemo,
            System::NcclCheck,
        ],
        &profile,
        &values,
    )
    .unwrap();
    assert_eq!(
        b.paths(),
        [
            "Dockerfile",
            "buildkitd.yaml",
            "ray-cluster-erdma.yaml",
            "rdt_nccl_demo.py",
            "erdma-nccl-check-pods.yaml",
            "nccl_allreduce_check.py"
        ]
    );

    // 1. Image: Ray 2.57.0 base, eRDMA apt source (VPC-only mirror), userspace, NCCL pinned to 2.30.7.
    let d = text(&b, "Dockerfile");
    assert!(
        d.contains("FROM rayproject/ray-llm:2.57.0-py312-cu130\n"),
        "{d}"
    );
    assert!(
        d.contains("RUN apt-get update -qq \\\n && apt-get install -y -qq"),
        "{d}"
    );
    assert!(d.contains("mirrors.cloud.aliyuncs.com/erdma"), "{d}");
    assert!(
        d.contains("libibverbs1 ibverbs-providers ibverbs-utils librdmacm1"),
        "{d}"
    );
    assert!(
        d.contains("RUN pip install --no-cache-dir --upgrade nvidia-nccl-cu13==2.30.7"),
        "{d}"
    );
    assert!(
        d.contains("2.28.7 and 2.28.9") && d.contains("ncclNetInit()"),
        "{d}"
    );
    assert!(
        !d.contains("AS rdmakit"),
        "optional stage is off by default"
    );

    // 1.1 BuildKit: PVC 200Gi, Deployment + Service on 1234 (app=buildkitd), client pod with creds.
    let kinds: Vec<&str> = b
        .get("buildkitd.yaml")
        .unwrap()
        .documents
        .iter()
        .map(|d| d["kind"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        kinds,
        ["PersistentVolumeClaim", "Deployment", "Service", "Pod"]
    );
    let pvc = doc(&b, "buildkitd.yaml", 0);
    assert_eq!(at(pvc, "/spec/resources/requests/storage"), "200Gi");
    assert_eq!(at(pvc, "/spec/storageClassName"), "alicloud-disk-essd");
    let dep = doc(&b, "buildkitd.yaml", 1);
    assert_eq!(at(dep, "/metadata/name"), "buildkitd");
    assert_eq!(at(dep, "/spec/template/metadata/labels/app"), "buildkitd");
    assert_eq!(
        at(
            dep,
            "/spec/template/spec/containers/0/volumeMounts/0/mountPath"
        ),
        "/var/lib/buildkit"
    );
    assert_eq!(
        at(
            dep,
            "/spec/template/spec/volumes/0/persistentVolumeClaim/claimName"
        ),
        "buildkit-cache"
    );
    assert!(at(dep, "/spec/template/spec/containers/0/readinessProbe").is_object());
    let svc = doc(&b, "buildkitd.yaml", 2);
    assert_eq!(at(svc, "/metadata/name"), "buildkitd");
    assert_eq!(at(svc, "/spec/ports/0/port"), 1234);
    let client = doc(&b, "buildkitd.yaml", 3);
    assert_eq!(at(client, "/metadata/name"), "buildkit-client");
    assert_eq!(
        at(client, "/spec/volumes/0/secret/secretName"),
        "buildkit-push-creds"
    );
    assert_eq!(
        at(client, "/spec/volumes/0/secret/items/0/key"),
        "config.json"
    );
    assert!(has_env(
        at(client, "/spec/containers/0"),
        "BUILDKIT_HOST",
        "tcp://buildkitd:1234"
    ));

    // 2. RayCluster: CPU-only head with num-cpus/num-gpus "0", 2 GPU workers with eRDMA settings.
    let rc = doc(&b, "ray-cluster-erdma.yaml", 0);
    assert_eq!(at(rc, "/apiVersion"), "ray.io/v1");
    assert_eq!(at(rc, "/metadata/name"), "ray-erdma-cluster");
    assert_eq!(at(rc, "/spec/rayVersion"), "2.57.0");
    assert_eq!(
        at(rc, "/spec/headGroupSpec/rayStartParams"),
        &json!({"num-cpus": "0", "num-gpus": "0"})
    );
    let head = at(rc, "/spec/headGroupSpec/template/spec/containers/0");
    assert_eq!(head["name"], "ray-head");
    assert!(
        head.pointer("/resources/limits/nvidia.com~1gpu").is_none(),
        "head has no GPU"
    );
    let raw = text(&b, "ray-cluster-erdma.yaml");
    assert!(
        raw.contains("num-gpus: '0'") || raw.contains("num-gpus: \"0\""),
        "{raw}"
    );
    let wg = at(rc, "/spec/workerGroupSpecs/0");
    assert_eq!(wg["groupName"], "gpu-erdma");
    assert_eq!(wg["replicas"], 2);
    assert_eq!(wg["minReplicas"], 2);
    assert_eq!(wg["maxReplicas"], 2);
    let pod = at(wg, "/template/spec");
    assert_eq!(pod["hostNetwork"], true);
    assert_eq!(pod["hostIPC"], true);
    assert_eq!(pod["dnsPolicy"], "ClusterFirstWithHostNet");
    assert_eq!(
        at(pod, "/nodeSelector/aliyun.accelerator~1nvidia_name"),
        "NVIDIA-RTX-PRO-5000-72GB-Blackwell"
    );
    assert_eq!(
        at(
            pod,
            "/affinity/podAntiAffinity/requiredDuringSchedulingIgnoredDuringExecution/0/topologyKey"
        ),
        "kubernetes.io/hostname"
    );
    let w = at(pod, "/containers/0");
    assert_eq!(w["name"], "ray-worker");
    assert_eq!(
        w["image"],
        "registry.example.com/your-namespace/ray-llm:2.57.0-py312-cu130-erdma"
    );
    for side in ["limits", "requests"] {
        assert_eq!(at(w, &format!("/resources/{side}/nvidia.com~1gpu")), "1");
        assert_eq!(at(w, &format!("/resources/{side}/aliyun~1erdma")), "1");
    }
    assert_eq!(
        at(w, "/securityContext/capabilities/add"),
        &json!(["IPC_LOCK"])
    );
    for (k, v) in [
        ("NCCL_IB_DISABLE", "0"),
        ("NCCL_IB_HCA", "erdma_0"),
        ("NCCL_SOCKET_IFNAME", "eth0"),
        ("NCCL_DEBUG", "INFO"),
        ("NCCL_DEBUG_FILE", "/tmp/nccl-%h-%p.log"),
    ] {
        assert!(has_env(w, k, v), "worker lacks {k}={v}: {:?}", env_of(w));
    }

    // 3. RDT demo.
    let demo = text(&b, "rdt_nccl_demo.py");
    for needle in [
        "@ray.method(tensor_transport=\"nccl\")",
        "@ray.remote(num_gpus=1, num_cpus=1, enable_tensor_transport=True)",
        "strategy=\"STRICT_SPREAD\"",
        "create_collective_group([producer, consumer], backend=\"nccl\")",
        "DEFAULT_SIZE_MIB = 512",
        "DEFAULT_ITERS = 3",
        "FABRIC = \"eRDMA\"",
        "f\"iter {i}: {args.size_mib} MiB -> {device} in {elapsed * 1000:.1f} ms ({rate:.2f} GiB/s), {check}\"",
        "\"checksum OK\"",
        "print(f\"RDT over {transport}: {'OK' if all_ok else 'FAILED'}\"",
        "producer node=",
        "NCCL_IB_DISABLE",
        "not found in RDT object store after 60.0s",
        "ray.io/cluster=ray-erdma-cluster",
    ] {
        assert!(demo.contains(needle), "demo lacks {needle}");
    }

    // NCCL-only check: two pods on two nodes, program with usage in its docstring.
    let pods = &b.get("erdma-nccl-check-pods.yaml").unwrap().documents;
    assert_eq!(pods.len(), 2);
    assert_eq!(at(&pods[0], "/metadata/name"), "erdma-nccl-check-0");
    assert_eq!(at(&pods[1], "/metadata/name"), "erdma-nccl-check-1");
    assert_eq!(at(&pods[0], "/spec/hostNetwork"), true);
    assert_eq!(
        at(
            &pods[0],
            "/spec/containers/0/resources/limits/aliyun~1erdma"
        ),
        "1"
    );
    let check = text(&b, "nccl_allreduce_check.py");
    assert!(check.contains("--rank 0 --master-addr $MASTER"), "{check}");
    assert!(check.contains("TX_COUNTER = \"ports/1/hw_counters/hw_tx_bytes_cnt\""));
    assert!(check.contains("DEVICE_GLOB = \"erdma_*\""));
    assert!(check.contains("default=512"));
    assert!(check.contains("dist.all_reduce(x)"));

    insta::assert_snapshot!("seed_000_erdma_ray_rdt", listing(&b));
}

/// Seed 001: RayCluster with the RDMA shared device plugin and H800 GPUs on head and workers.
#[test]
fn seed_001_shared_device_raycluster() {
    let profile = load_builtin("rdma-shared-device").unwrap();
    // The profile's value defaults are the seed's names and sizes; its prebuilt image is a --set
    // (the profile explains why it is not a default).
    let mut values = Values::default();
    values
        .set_all([
            "ray_version=2.40.0",
            "image=registry.hd-01.alayanew.com:8443/vc-app_market/ray-ml-vllm:0.7.1",
        ])
        .unwrap();
    let b = render_systems(&[System::RayCluster], &profile, &values).unwrap();
    assert_eq!(b.paths(), ["ray-cluster-rdma.yaml"]);
    let rc = doc(&b, "ray-cluster-rdma.yaml", 0);
    assert_eq!(at(rc, "/metadata/name"), "raycluster-kuberay");
    assert_eq!(at(rc, "/spec/rayVersion"), "2.40.0");
    assert_eq!(at(rc, "/spec/headGroupSpec/rayStartParams"), &json!({}));
    assert_eq!(
        at(rc, "/spec/workerGroupSpecs/0/rayStartParams"),
        &json!({})
    );
    assert_eq!(at(rc, "/spec/workerGroupSpecs/0/groupName"), "workergroup");
    let expected = json!({
        "memory": "1600G",
        "cpu": "144",
        "nvidia.com/gpu-h800": "8",
        "rdma/rdma_shared_device_a": "1",
        "rdma/rdma_shared_device_b": "1",
    });
    for (path, name) in [
        ("/spec/headGroupSpec/template/spec/containers/0", "ray-head"),
        (
            "/spec/workerGroupSpecs/0/template/spec/containers/0",
            "ray-worker",
        ),
    ] {
        let c = at(rc, path);
        assert_eq!(c["name"], name);
        assert_eq!(
            c["image"],
            "registry.hd-01.alayanew.com:8443/vc-app_market/ray-ml-vllm:0.7.1"
        );
        assert_eq!(at(c, "/resources/requests"), &expected, "{name}");
        assert_eq!(at(c, "/resources/limits"), &expected, "{name}");
        assert!(has_env(c, "NCCL_IB_HCA", "mlx5"));
    }
    insta::assert_snapshot!("seed_001_shared_device_raycluster", listing(&b));
}

/// Seed 002: DRANET DeviceClass + ResourceClaimTemplate and an MPIJob running nccl-tests.
#[test]
fn seed_002_dranet_mpijob() {
    let profile = load_builtin("aliyun-erdma-dra").unwrap();
    // ecs.gn8is-2x.8xlarge: 2 GPUs per worker come from the profile's value defaults.
    let values = Values::default();
    let b = render_systems(&[System::Dra, System::MpiJob], &profile, &values).unwrap();
    assert_eq!(
        b.paths(),
        [
            "device-class.yaml",
            "resource-claim-template.yaml",
            "mpi-job.yaml"
        ]
    );

    let dc = doc(&b, "device-class.yaml", 0);
    assert_eq!(at(dc, "/apiVersion"), "resource.k8s.io/v1");
    assert_eq!(at(dc, "/kind"), "DeviceClass");
    assert_eq!(at(dc, "/metadata/name"), "erdma.alibaba.dra.net");
    // The seed's second selector, with the erdma key tested first: without it, a device that has the
    // alibaba.dra.net domain but no erdma key makes CEL fail and the real scheduler refuse the pod
    // (the control-plane tier's dranet slice test).
    assert_eq!(
        at(dc, "/spec/selectors"),
        &json!([
            {"cel": {"expression": "device.driver == \"dra.net\" && device.attributes[\"dra.net\"].rdma == true"}},
            {"cel": {"expression": "\"alibaba.dra.net\" in device.attributes && \"erdma\" in device.attributes[\"alibaba.dra.net\"] && device.attributes[\"alibaba.dra.net\"][\"erdma\"] == true"}},
        ])
    );
    let rct = doc(&b, "resource-claim-template.yaml", 0);
    assert_eq!(at(rct, "/kind"), "ResourceClaimTemplate");
    assert_eq!(at(rct, "/metadata/name"), "erdma");
    assert_eq!(
        at(rct, "/spec/spec/devices/requests"),
        &json!([{"name": "erdma", "exactly": {"deviceClassName": "erdma.alibaba.dra.net", "count": 1}}])
    );

    let job = doc(&b, "mpi-job.yaml", 0);
    assert_eq!(at(job, "/apiVersion"), "kubeflow.org/v2beta1");
    assert_eq!(at(job, "/kind"), "MPIJob");
    assert_eq!(at(job, "/metadata/name"), "nccl-test-erdma");
    assert_eq!(at(job, "/spec/slotsPerWorker"), 2);
    let launcher = at(job, "/spec/mpiReplicaSpecs/Launcher");
    assert_eq!(launcher["replicas"], 1);
    let lc = at(launcher, "/template/spec/containers/0");
    assert_eq!(lc["name"], "nccl");
    assert_eq!(
        lc["image"],
        "dsw-registry.cn-hangzhou.cr.aliyuncs.com/pai/nccl-tests:12.2.2-cudnn8-devel-ubuntu22.04-nccl2.19.3-1-85f9143"
    );
    assert_eq!(lc["command"], json!(["/bin/bash", "-c"]));
    let script = lc["args"][0].as_str().unwrap();
    let expected_script = "sleep 10
mpirun -np 4 \\
  --allow-run-as-root \\
  -bind-to none \\
  --mca pml ob1 \\
  --mca btl tcp,self \\
  --mca btl_tcp_if_include eth0 \\
  --mca coll_hcoll_enable 0 \\
  --mca coll_ucc_enable 0 \\
  -x LD_LIBRARY_PATH \\
  -x NCCL_DEBUG=INFO \\
  -x NCCL_SOCKET_IFNAME=eth0 \\
  -x NCCL_IB_HCA=erdma \\
  -x NCCL_SHM_DISABLE=1 \\
  /opt/nccl_tests/build/all_reduce_perf -b 512M -e 8G -f 2 -g 1 -c 0
";
    assert_eq!(script, expected_script);
    assert!(
        text(&b, "mpi-job.yaml").contains("- |"),
        "launcher script is a literal block"
    );

    let worker = at(job, "/spec/mpiReplicaSpecs/Worker");
    assert_eq!(worker["replicas"], 2);
    let ws = at(worker, "/template/spec");
    assert_eq!(
        at(
            ws,
            "/affinity/podAntiAffinity/requiredDuringSchedulingIgnoredDuringExecution/0"
        ),
        &json!({
            "labelSelector": {"matchLabels": {
                "training.kubeflow.org/job-name": "nccl-test-erdma",
                "training.kubeflow.org/job-role": "worker"
            }},
            "topologyKey": "kubernetes.io/hostname"
        })
    );
    assert_eq!(ws["automountServiceAccountToken"], false);
    assert_eq!(
        ws["resourceClaims"],
        json!([{"name": "erdma", "resourceClaimTemplateName": "erdma"}])
    );
    assert!(
        ws.get("hostNetwork").is_none(),
        "DRANET moves the device into the pod netns"
    );
    let wc = at(ws, "/containers/0");
    assert_eq!(wc["name"], "nccl");
    assert_eq!(at(wc, "/resources/limits"), &json!({"nvidia.com/gpu": "2"}));
    assert_eq!(at(wc, "/resources/claims"), &json!([{"name": "erdma"}]));
    assert_eq!(
        at(wc, "/volumeMounts"),
        &json!([{"name": "shm", "mountPath": "/dev/shm"}])
    );
    assert_eq!(
        at(wc, "/securityContext/capabilities/add"),
        &json!(["IPC_LOCK"])
    );
    assert_eq!(
        at(ws, "/volumes"),
        &json!([{"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}}])
    );
    assert_eq!(
        at(ws, "/tolerations"),
        &json!([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}])
    );
    insta::assert_snapshot!("seed_002_dranet_mpijob", listing(&b));
}

/// Seed 004: a plain pod with a Volcengine VKE InfiniBand device.
#[test]
fn seed_004_vke_ib_pod() {
    let profile = load_builtin("volcengine-ib").unwrap();
    let b = render_systems(&[System::RdmaTestPod], &profile, &Values::default()).unwrap();
    assert_eq!(b.paths(), ["rdma-test-pod.yaml"]);
    let pod = doc(&b, "rdma-test-pod.yaml", 0);
    assert_eq!(at(pod, "/apiVersion"), "v1");
    assert_eq!(at(pod, "/kind"), "Pod");
    assert_eq!(at(pod, "/metadata/name"), "rdma-test");
    let c = at(pod, "/spec/containers/0");
    assert_eq!(c["name"], "rdma-test");
    assert_eq!(c["image"], "busybox");
    assert_eq!(c["command"], json!(["/bin/sh", "-c", "sleep 10000"]));
    assert_eq!(
        at(c, "/resources/limits"),
        &json!({"vke.volcengine.com/infiniband-rdma": "1"})
    );
    assert!(c.pointer("/resources/requests").is_none());
    assert_eq!(
        at(c, "/securityContext/capabilities/add"),
        &json!(["IPC_LOCK"])
    );
    assert_eq!(
        at(c, "/volumeMounts"),
        &json!([
            {"name": "cache-volume", "mountPath": "/dev/shm"},
            {"name": "nvidia-topology", "mountPath": "/var/run/nvidia-topologyd", "readOnly": true}
        ])
    );
    assert_eq!(
        at(pod, "/spec/volumes"),
        &json!([
            {"name": "cache-volume", "emptyDir": {"medium": "Memory"}},
            {"name": "nvidia-topology", "hostPath": {"path": "/var/run/nvidia-topologyd", "type": "DirectoryOrCreate"}}
        ])
    );
    // Seed 004's pod has no node selector; the node check accepts ib-shared and ib-shared-multi, and
    // the infiniband-rdma resource alone keeps the pod on RDMA nodes.
    assert_eq!(
        pod.pointer("/spec/nodeSelector"),
        None,
        "a node selector on one RDMA mode leaves the pod Pending on nodes of the other"
    );
    insta::assert_snapshot!("seed_004_vke_ib_pod", listing(&b));
}
