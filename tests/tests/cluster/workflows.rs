//! The four workflows live: PASS on the healthy cluster, FAIL naming the cause on each fault, a second run on
//! the used cluster passes, and nothing of a run's own is left behind.

use super::harness::{
    ERDMA_SECRETS, Kind, NodeKnob, NodePatch, Ns, SeedDeviceClass, SliceFault, assert_clean,
    assert_contains_all, erdma_pods, interrupt_once_applied, kubectl, push_image, repo,
};

#[test]
#[ignore = "control-plane tier: make cluster-test"]
fn erdma_ray_rdt_passes_live_then_again_on_the_used_cluster_and_cleans_up() {
    let ns = Ns::new("erdma", Kind::Erdma);
    let r = ns.run("erdma-ray-rdt", ERDMA_SECRETS);
    r.assert_pass();
    // Seed 000's checks, each on what came back through the real API server from the emulated pods.
    let md = ns.report_md();
    assert_contains_all(
        &md,
        &[
            "PASS NCCL 2.30.7 (23007) in the image",
            "PASS worker 0: RLIMIT_MEMLOCK unlimited",
            "PASS worker 1: a device port NCCL_IB_HCA=erdma_0 selects is PORT_ACTIVE: erdma_0 port 1 PORT_ACTIVE (4), link_layer Ethernet, transport eRDMA (0)",
            "PASS NCCL all_reduce over eRDMA moved its bytes on the device (rank 0): eRDMA tx during check: 2.5 GiB (want >= 1.25 GiB)",
            "PASS NCCL all_reduce with NCCL_IB_DISABLE=1 left the device idle (rank 0): eRDMA tx during check: 0.0 GiB",
            "PASS RDT traffic crossed eRDMA (device counters)",
            "TCP-run eRDMA tx delta: 0.000 GiB",
            "PASS worker 0: NCCL log shows NET/IB on erdma_0",
            "PASS worker 1: NCCL log shows NET/IB on erdma_0",
            // The rates are what the demo timed against the node fixtures' transfer rates (ib-gib-s 11.8,
            // socket-gib-s 1.18), less the interpreter's own time: the exact figure varies from run to run.
            "INFO RDT steady-state throughput, eRDMA vs NCCL_IB_DISABLE=1: ours ",
            // Beside what the profile's instance type should reach (issue 15's model), with its inputs: under
            // 60 % of the expected is probe's `warn`, recorded as WARN.
            "WARN RDT demo over eRDMA: steady-state rate vs the expected: RDT over eRDMA: ",
            "% of the expected 19.9 GiB/s (staged through host memory, limited by the NIC)",
            "RDT demo over eRDMA: steady-state rate vs the expected: expected rate (model)",
            "PASS no leftover NCCLUniqueIDStore actors",
            "PASS image built and pushed",
        ],
    );
    // The registry credentials the harness put in the Secrets never reach the report or the output.
    for text in [&md, &r.report.to_string(), &r.stdout, &r.stderr] {
        assert!(!text.contains("not-a-real-password"), "a credential leaked");
    }
    assert_clean(&ns);
    let again = ns.run("erdma-ray-rdt", ERDMA_SECRETS);
    again.assert_pass();
    assert_clean(&ns);
}

/// `--set rdt_transport=rdmakit` (issue 14): the image installs the rdmakit_rdt wheel given on the command line
/// (BuildKit finds it in the build context), the demo moves the tensors with `tensor_transport="RDMAKIT"`,
/// the device counters prove the path and the A/B run is RDMAKIT_TRANSPORT=tcp. Without the wheel the run
/// stops before it touches the cluster, naming the option and how to build the wheel.
#[test]
#[ignore = "control-plane tier: make cluster-test"]
fn erdma_ray_rdt_through_rdmakit_rdt_passes_live_with_the_wheel_in_the_image() {
    let ns = Ns::new("erdma-rdmakit", Kind::Erdma);
    let dir = repo()
        .join("target/cluster/runs")
        .join(format!("{}-wheel", ns.name));
    std::fs::create_dir_all(&dir).unwrap();
    let wheel = dir.join("rdmakit_rdt-0.1.0-cp310-abi3-manylinux_2_34_x86_64.whl");
    std::fs::write(
        &wheel,
        b"PK\x03\x04 not a real wheel: the emulated BuildKit only checks it is there",
    )
    .unwrap();
    let set_wheel = format!("rdt_wheel={}", wheel.display());
    let mut args = ERDMA_SECRETS.to_vec();
    args.extend(["--set", "rdt_transport=rdmakit", "--set", &set_wheel]);
    let r = ns.run("erdma-ray-rdt", &args);
    r.assert_pass();
    let md = ns.report_md();
    assert_contains_all(
        &md,
        &[
            "PASS image built and pushed",
            "PASS RDT demo: every transfer checksum OK",
            "PASS RDT traffic crossed eRDMA (device counters)",
            "PASS RDT demo over TCP (RDMAKIT_TRANSPORT=tcp) succeeds",
            "PASS A/B: eRDMA run moved the bytes, the RDMAKIT_TRANSPORT=tcp run left the counters flat",
            "INFO NCCL logs of the RDT run",
        ],
    );
    assert!(
        !md.contains("NCCL log shows NET/IB"),
        "NCCL logs judged on an rdmakit run:\n{md}"
    );
    assert_clean(&ns);

    let bare = ns.run(
        "erdma-ray-rdt",
        &[ERDMA_SECRETS, &["--set", "rdt_transport=rdmakit"]].concat(),
    );
    assert_ne!(bare.code, 0, "ran without the wheel:\n{}", bare.stdout);
    let all = format!("{}{}", bare.stdout, bare.stderr);
    assert!(
        all.contains("--set rdt_wheel=PATH")
            && all.contains("maturin build --release --features python,rdma --compatibility linux"),
        "{all}"
    );
    assert_clean(&ns);
}

/// Each node fault (a field of the eRDMA nodes' fixture) fails the workflow with its cause named, and the
/// failed run still deletes what it created (the next test's hostNetwork workers need the ports).
#[test]
#[ignore = "control-plane tier: make cluster-test"]
fn erdma_ray_rdt_fails_naming_each_node_fault_and_cleans_up() {
    for (knob, value, needles) in [
        // containerd without LimitMEMLOCK=infinity: 64 KiB; NCCL's ibv_create_qp then fails with ENOMEM.
        (
            "containerd-memlock",
            "65536",
            &["RLIMIT_MEMLOCK", "LimitMEMLOCK"][..],
        ),
        // The eRDMA device has no usable GID: NCCL's IB plugin finds no device and runs over sockets.
        ("rdma-gid", "none", &["NET/Socket"][..]),
        ("port-state", "PORT_DOWN", &["PORT_DOWN"][..]),
        ("counters", "frozen", &["counters"][..]),
    ] {
        let _fault = NodeKnob::on_pool("erdma", knob, value);
        let ns = Ns::new("erdma-fault", Kind::Erdma);
        let r = ns.run("erdma-ray-rdt", ERDMA_SECRETS);
        r.assert_fail_naming(needles);
        assert_clean(&ns);
    }
}

/// The image's NCCL is what the image carries, not what the profile pins: a prebuilt image with torch 2.11's
/// NCCL 2.28.9 (in the emulated registry; the render itself refuses to pin a known-bad NCCL), run with
/// skip_build, has the stand-in NCCL at 2.28.9 in the workers, and the run names it and the pin that fixes it.
#[test]
#[ignore = "control-plane tier: make cluster-test"]
fn erdma_ray_rdt_fails_on_a_prebuilt_image_with_the_known_bad_nccl() {
    let image = "registry.example.com/rdt:torch-2.11";
    push_image(image, Some("2.28.9"));
    let ns = Ns::new("erdma-nccl", Kind::Erdma);
    let set_image = format!("image={image}");
    let r = ns.run(
        "erdma-ray-rdt",
        &[
            ERDMA_SECRETS,
            &["--set", "skip_build=true", "--set", &set_image],
        ]
        .concat(),
    );
    r.assert_fail_naming(&["2.28.9", "2.30.7"]);
    assert_clean(&ns);
}

#[test]
#[ignore = "control-plane tier: make cluster-test"]
fn erdma_ray_rdt_fails_when_a_gpu_node_lacks_the_erdma_resource() {
    let _patch = NodePatch::remove_resource("cn-beijing.10.0.5.76", "aliyun/erdma");
    let ns = Ns::new("erdma-node", Kind::Erdma);
    let r = ns.run("erdma-ray-rdt", ERDMA_SECRETS);
    r.assert_fail_naming(&["cn-beijing.10.0.5.76", "aliyun/erdma"]);
    assert_clean(&ns);
}

#[test]
#[ignore = "control-plane tier: make cluster-test"]
fn dranet_nccl_tests_passes_live_with_claims_allocated_by_the_scheduler() {
    let ns = Ns::new("dranet", Kind::Erdma);
    let r = ns.run("dranet-nccl-tests", &[]);
    r.assert_pass();
    assert_clean(&ns);
    let again = ns.run("dranet-nccl-tests", &[]);
    again.assert_pass();
    assert_clean(&ns);
}

#[test]
#[ignore = "control-plane tier: make cluster-test"]
fn shared_device_raycluster_passes_live_then_fails_without_device_b() {
    let ns = Ns::new("shared", Kind::Mlx5);
    // cleanup=true: by default the workflow leaves the RayCluster running for the user.
    ns.run("shared-device-raycluster", &["--set", "cleanup=true"])
        .assert_pass();
    assert_clean(&ns);
    let _patches: Vec<NodePatch> = ["gpu-node-0", "gpu-node-1", "gpu-node-2"]
        .iter()
        .map(|n| NodePatch::remove_resource(n, "rdma/rdma_shared_device_b"))
        .collect();
    let r = ns.run("shared-device-raycluster", &["--set", "cleanup=true"]);
    r.assert_fail_naming(&["rdma/rdma_shared_device_b"]);
    assert_clean(&ns);
}

#[test]
#[ignore = "control-plane tier: make cluster-test"]
fn vke_ib_pod_passes_live_then_fails_on_a_node_without_limit_memlock() {
    let ns = Ns::new("vke", Kind::Mlx5);
    ns.run("vke-ib-pod", &[]).assert_pass();
    assert_clean(&ns);
    // The topology mount, IPC_LOCK and the RDMA request are the pod spec's: dropping one is a mutation of the
    // bundle (`rdmakit run --bundle DIR`), not a fault of the node.
    let _fault = NodeKnob::on_pool("vke", "containerd-memlock", "65536");
    ns.run("vke-ib-pod", &[])
        .assert_fail_naming(&["RLIMIT_MEMLOCK"]);
    assert_clean(&ns);
}

#[test]
#[ignore = "control-plane tier: make cluster-test"]
fn dranet_nccl_tests_fails_when_nccl_falls_back_to_sockets() {
    // The eRDMA ports have no usable GID: NCCL's IB transport finds no device in the ranks' pods and the
    // launcher's all_reduce_perf runs over NET/Socket (the ranks' own NCCL lines, in the launcher's log).
    let _fault = NodeKnob::on_pool("dranet", "rdma-gid", "none");
    let ns = Ns::new("dranet-fault", Kind::Erdma);
    ns.run("dranet-nccl-tests", &[])
        .assert_fail_naming(&["NET/Socket"]);
    assert_clean(&ns);
}

/// Seed 002's DeviceClass may belong to DRANET or the cloud's add-on: when it is already there the run uses
/// it, applies only what is missing, and leaves it in place at the end.
#[test]
#[ignore = "control-plane tier: make cluster-test"]
fn dranet_nccl_tests_leaves_a_device_class_it_did_not_create() {
    let _class = SeedDeviceClass::apply();
    let ns = Ns::new("dranet-class", Kind::Erdma);
    ns.run("dranet-nccl-tests", &[]).assert_pass();
    let o = kubectl(&["get", "deviceclass", "erdma.alibaba.dra.net", "-o", "name"]);
    assert!(
        o.status.success(),
        "the run deleted a DeviceClass it did not create: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_clean(&ns);
}

#[test]
#[ignore = "control-plane tier: make cluster-test"]
fn dranet_nccl_tests_fails_when_a_slice_lacks_the_attribute_the_device_class_selects() {
    let _fault = SliceFault::without_erdma_attribute();
    let ns = Ns::new("dranet-slice", Kind::Erdma);
    ns.run("dranet-nccl-tests", &[]).assert_fail_naming(&[
        "cn-hangzhou.172.16.0.22/erdma-0 (erdma_0) lacks",
        "alibaba.dra.net/erdma",
    ]);
    assert_clean(&ns);
}

/// Ctrl-C in the middle of a run (the RayCluster is up, the checks are running): exit 130, and the cleanup
/// deletes everything the run applied, so the namespace holds nothing of its own afterwards.
#[test]
#[ignore = "control-plane tier: make cluster-test"]
fn an_interrupted_erdma_run_exits_130_and_leaves_nothing_of_its_own() {
    let ns = Ns::new("erdma-int", Kind::Erdma);
    let report = interrupt_once_applied(&ns, "erdma-ray-rdt", ERDMA_SECRETS, "rayclusters.ray.io");
    assert!(
        report.contains("cleanup: bundle/ray-cluster"),
        "the report lists the cleanup: {report}"
    );
}

/// PIDs of the processes on this machine (the emulated pods' processes run here) whose argv is `argv`.
fn processes_running(argv: &[&str]) -> Vec<u32> {
    let want: Vec<u8> = argv.iter().flat_map(|a| a.bytes().chain([0])).collect();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == want))
        .collect()
}

/// kube::exec_many on the real API server: when one rank fails, the rank still running is not only cut off
/// but killed in its pod (closing an exec stream does not stop the process it started), and its result says
/// so; nothing of it is left running.
#[test]
#[ignore = "control-plane tier: make cluster-test"]
fn exec_many_kills_the_rank_it_stops_in_its_pod() {
    let ns = Ns::new("exec-many", Kind::Erdma);
    erdma_pods(&ns.name, &["rank-0", "rank-1"]);
    // A duration no other process here sleeps for.
    let nap = format!("{}", 600 + std::process::id() % 97);
    let dir = repo()
        .join("target/cluster/runs")
        .join(format!("{}-script", ns.name));
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("exec-many.rhai");
    std::fs::write(
        &script,
        format!(
            "let r = kube::exec_many([\n\
             \x20   #{{ pod: \"rank-0\", container: \"worker\", command: [\"sleep\", \"{nap}\"], timeout: 300 }},\n\
             \x20   #{{ pod: \"rank-1\", container: \"worker\", command: [\"sh\", \"-c\", \"sleep 3; echo boom >&2; exit 3\"], timeout: 300 }},\n\
             ]);\n\
             report::check(\"rank 1 failed\", r[1].code == 3 && !r[1].cancelled && r[1].stderr.contains(\"boom\"), `${{r[1].code}} ${{r[1].stderr}}`);\n\
             report::check(\"rank 0 stopped in its pod\", r[0].cancelled == true, `${{r[0].error}}`);\n\
             print(report::finish());\n"
        ),
    )
    .unwrap();
    let t0 = std::time::Instant::now();
    let r = ns.run(script.to_str().unwrap(), &[]);
    assert!(
        t0.elapsed() < std::time::Duration::from_secs(120),
        "{:?}",
        t0.elapsed()
    );
    let md = ns.report_md();
    // The command's own exit status (3) comes back through exec (the patched KWOK; upstream gave -1).
    assert!(md.contains("PASS rank 1 failed: 3 "), "{md}\n{}", r.stderr);
    assert!(
        md.contains(
            "PASS rank 0 stopped in its pod: exec in rank-0: stopped because rank 1 (rank-1: "
        ) && md.contains("failed first; in the pod: stopped pid "),
        "{md}\n{}",
        r.stderr
    );
    let left = processes_running(&["sleep", &nap]);
    assert!(
        left.is_empty(),
        "the stopped rank still runs: pids {left:?}"
    );
}
