//! Every shipped workflow runs end to end in dry-run; its plan, plan.sh and report are snapshot-tested
//! (insta; `CI=true` makes a missing snapshot fail), and plan.sh is valid bash.
#![allow(clippy::unwrap_used)] // helpers outside #[test] fns unwrap too: a failure is a test failure

mod common;

use std::path::Path;

use rdmakit::report::Verdict;

/// The shipped workflows, each with the bundle files its dry run renders (nccl-tests with its default
/// profile, mellanox-ib; its other profiles are in [`nccl_tests`]).
const WORKFLOWS: &[(&str, &[&str])] = &[
    (
        "erdma-ray-rdt",
        &[
            "Dockerfile",
            "buildkitd.yaml",
            "ray-cluster-erdma.yaml",
            "rdt_nccl_demo.py",
            "nccl_allreduce_check.py",
        ],
    ),
    ("dranet-nccl-tests", &["mpi-job.yaml"]),
    ("shared-device-raycluster", &[]),
    ("vke-ib-pod", &["rdma-test-pod.yaml"]),
    ("nccl-tests", &["mpi-job.yaml"]),
];

/// An nccl-tests image for the profiles that name none (rdmakit has no default: issue 25).
const NCCL_TESTS_IMAGE: (&str, &str) = (
    "nccl_tests_image",
    "registry.example.com/your-namespace/nccl-tests:2.27.7",
);

/// The `--set` pairs a workflow's snapshot runs with: nccl-tests' default profile (mellanox-ib) names no
/// nccl-tests image, so the run names one.
fn workflow_set(name: &str) -> &'static [(&'static str, &'static str)] {
    if name == "nccl-tests" {
        std::slice::from_ref(&NCCL_TESTS_IMAGE)
    } else {
        &[]
    }
}

/// Runs `check` on plan.sh, which must pass: the failure names `case`, what failed and what it printed.
fn assert_passes(case: &str, what: &str, check: &mut std::process::Command) {
    let r = check.output().unwrap();
    assert!(
        r.status.success(),
        "{case}: {what}: {}{}",
        String::from_utf8_lossy(&r.stdout),
        String::from_utf8_lossy(&r.stderr)
    );
}

/// Writes `sh` as `dir/plan.sh` and checks that bash parses it; returns the path.
fn assert_bash_parses(case: &str, sh: &str, dir: &Path) -> std::path::PathBuf {
    let path = dir.join("plan.sh");
    std::fs::write(&path, sh).unwrap();
    assert_passes(
        case,
        "plan.sh is not valid bash",
        std::process::Command::new("bash").arg("-n").arg(&path),
    );
    path
}

/// Whether shellcheck is installed.
fn have_shellcheck() -> bool {
    std::process::Command::new("shellcheck")
        .arg("--version")
        .output()
        .is_ok()
}

/// shellcheck's warnings and errors on `plan` fail `case`; notes (SC2016: `$1` meant for the remote
/// shell's awk) are intended.
fn assert_shellcheck_clean(case: &str, plan: &Path) {
    assert_passes(
        case,
        "shellcheck",
        std::process::Command::new("shellcheck")
            .args(["-S", "warning", "-f", "gcc"])
            .arg(plan),
    );
}

fn check_workflow(name: &str, bundle_files: &[&str]) {
    let src = common::workflow_source(name);
    assert_eq!(
        rdmakit::workflows::builtin(name),
        Some(src.as_str()),
        "embedded copy of {name} is stale"
    );
    let out = tempfile::tempdir().unwrap();
    let (outcome, plan) = common::dry_run(name, &src, out.path(), workflow_set(name), None);
    assert!(
        outcome.error.is_none(),
        "{name}: {}",
        outcome.error.map(|e| e.to_string()).unwrap_or_default()
    );
    assert_eq!(outcome.verdict(), Verdict::Planned, "{name}");
    // Dry-run never claims a measurement.
    assert!(outcome.report.measurements.is_empty(), "{name}");
    assert!(
        outcome
            .report
            .checks
            .iter()
            .all(|c| c.status != rdmakit::report::Status::Pass || c.name.starts_with("bundle")),
        "{name}: a check passed in dry-run"
    );
    for f in bundle_files {
        assert!(
            out.path().join("bundle").join(f).is_file(),
            "{name}: bundle/{f} missing"
        );
    }
    assert!(
        out.path().join("report.md").is_file() && out.path().join("report.json").is_file(),
        "{name}: no report"
    );
    let sh = plan.to_shell();
    assert_bash_parses(name, &sh, out.path());
    insta::assert_snapshot!(format!("{name}__plan"), plan.to_text());
    insta::assert_snapshot!(format!("{name}__plan_sh"), sh);
    insta::assert_snapshot!(format!("{name}__report"), outcome.report.to_markdown());
}

/// Each of [`WORKFLOWS`]: every case runs, and the failure names each one that failed (its own message,
/// with its name, is printed above it).
#[test]
fn every_shipped_workflow_dry_runs_to_its_snapshots() {
    let failed: Vec<&str> = WORKFLOWS
        .iter()
        .filter(|(name, bundle)| std::panic::catch_unwind(|| check_workflow(name, bundle)).is_err())
        .map(|(name, _)| *name)
        .collect();
    assert!(failed.is_empty(), "failed: {failed:?}");
}

#[test]
fn set_overrides_reach_the_rendered_bundle_and_the_plan() {
    let src = rdmakit::workflows::builtin("erdma-ray-rdt").unwrap();
    let out = tempfile::tempdir().unwrap();
    let (outcome, plan) = common::dry_run(
        "erdma-ray-rdt",
        src,
        out.path(),
        &[("worker_replicas", "3"), ("cluster_name", "rdt-test")],
        None,
    );
    assert!(outcome.error.is_none(), "{:?}", outcome.error);
    let yaml = std::fs::read_to_string(out.path().join("bundle/ray-cluster-erdma.yaml")).unwrap();
    assert!(yaml.contains("name: rdt-test"), "{yaml}");
    assert!(yaml.contains("replicas: 3"), "{yaml}");
    let text = plan.to_text();
    assert!(text.contains("raycluster/rdt-test"), "{text}");
    let sh = plan.to_shell();
    assert!(
        sh.contains(
            "WORKERS_NAMES=$(kubectl get pods -l ray.io/cluster=rdt-test,ray.io/node-type=worker -o jsonpath"
        ) && sh.contains("read -r -a WORKERS <<<\"$WORKERS_NAMES\""),
        "{sh}"
    );
    // shellcheck SC2207: no array filled from an unquoted command substitution.
    assert!(!sh.contains("=($("), "{sh}");
}

#[test]
fn bad_set_value_names_the_key() {
    let src = rdmakit::workflows::builtin("erdma-ray-rdt").unwrap();
    let out = tempfile::tempdir().unwrap();
    let (outcome, _) = common::dry_run(
        "erdma-ray-rdt",
        src,
        out.path(),
        &[("worker_replicas", "many")],
        None,
    );
    let err = outcome.error.expect("a bad value fails the run");
    assert!(err.message.contains("worker_replicas"), "{err}");
    assert!(
        err.location
            .starts_with("scripts/workflows/erdma-ray-rdt.rhai:"),
        "{}",
        err.location
    );
    assert_eq!(outcome.report.verdict, Some(Verdict::Error));
}

#[test]
fn a_new_vendor_is_a_profile_file_not_new_rust() {
    // Copy the eRDMA profile, rename the device and the device-plugin resource, and point the
    // workflow at the file: the bundle and the plan follow it.
    let dir = tempfile::tempdir().unwrap();
    let base =
        std::fs::read_to_string(common::workspace().join("scripts/vendors/aliyun-erdma.rhai"))
            .unwrap();
    let mine = base
        .replace("name: \"aliyun-erdma\"", "name: \"acme-rdma\"")
        .replace("\"aliyun/erdma\": 1", "\"acme.example/rdma\": 1")
        .replace("ib_hca: \"erdma_0\"", "ib_hca: \"erdma_1\"");
    assert_ne!(mine, base);
    let path = dir.path().join("acme-rdma.rhai");
    std::fs::write(&path, mine).unwrap();
    let out = tempfile::tempdir().unwrap();
    let src = rdmakit::workflows::builtin("erdma-ray-rdt").unwrap();
    let (outcome, plan) = common::dry_run(
        "erdma-ray-rdt",
        src,
        out.path(),
        &[("profile", path.to_str().unwrap())],
        None,
    );
    assert!(outcome.error.is_none(), "{:?}", outcome.error);
    let yaml = std::fs::read_to_string(out.path().join("bundle/ray-cluster-erdma.yaml")).unwrap();
    assert!(yaml.contains("acme.example/rdma: \"1\""), "{yaml}");
    assert!(yaml.contains("value: erdma_1"), "{yaml}");
    assert!(!yaml.contains("aliyun/erdma"), "{yaml}");
    let sh = plan.to_shell();
    // The device checks match the listed devices against the profile's NCCL_IB_HCA (no `-d <value>`).
    let md = outcome.report.to_markdown();
    assert!(
        md.contains("worker 0: NCCL_IB_HCA=erdma_1 selects RDMA devices in the pod"),
        "{md}"
    );
    assert!(
        sh.contains("RDMA:.status.capacity.acme\\.example/rdma"),
        "{sh}"
    );
}

#[test]
fn dranet_nccl_tests_install_puts_the_seed_installers_before_the_checks() {
    let src = rdmakit::workflows::builtin("dranet-nccl-tests").unwrap();
    let out = tempfile::tempdir().unwrap();
    let (outcome, plan) = common::dry_run(
        "dranet-nccl-tests",
        src,
        out.path(),
        &[("install", "true")],
        None,
    );
    assert!(
        outcome.error.is_none(),
        "{:?}",
        outcome.error.map(|e| e.to_string())
    );
    let sh = plan.to_shell();
    // Seed 002's two installers, verbatim, then the wait for the MPIJob CRD, all before the API checks.
    let mpi = sh
        .find(r#"kubectl apply --server-side -k "https://github.com/kubeflow/mpi-operator/manifests/overlays/standalone?ref=v0.7.0""#)
        .expect("MPI Operator v0.7.0 install");
    let crd = sh
        .find("kubectl wait --for=condition=Established crd/mpijobs.kubeflow.org")
        .expect("wait for the MPIJob CRD");
    let dranet = sh
        .find("kubectl apply -f https://raw.githubusercontent.com/kubernetes-sigs/dranet/refs/heads/main/install.yaml")
        .expect("DRANET install");
    let checks = sh.find("kubectl api-resources").expect("API checks");
    assert!(mpi < crd && crd < dranet && dranet < checks, "{sh}");
    // Off by default: the plain plan installs nothing.
    let (_, plain) = common::dry_run("dranet-nccl-tests", src, out.path(), &[], None);
    assert!(!plain.to_shell().contains("mpi-operator/manifests"));
}

#[test]
fn every_seed_plan_is_shellcheck_clean() {
    if !have_shellcheck() {
        // make test installs it (test-deps) and sets RDMAKIT_NO_SKIP: there a missing shellcheck fails.
        assert!(
            std::env::var_os("RDMAKIT_NO_SKIP").is_none(),
            "shellcheck is not installed and RDMAKIT_NO_SKIP is set: apt-get install shellcheck"
        );
        eprintln!("SKIPPED: shellcheck is not installed (apt-get install shellcheck)");
        return;
    }
    for (name, _) in WORKFLOWS {
        let out = tempfile::tempdir().unwrap();
        let src = rdmakit::workflows::builtin(name).unwrap();
        let (_, plan) = common::dry_run(name, src, out.path(), workflow_set(name), None);
        let sh = out.path().join("plan.sh");
        std::fs::write(&sh, plan.to_shell()).unwrap();
        assert_shellcheck_clean(name, &sh);
    }
}

/// The vendor-neutral nccl-tests workflow (issue 18): its default (mellanox-ib) is snapshotted with the
/// seeds ([`WORKFLOWS`]); here a clean plan for each cloud profile — a valid, shellcheck-clean plan.sh that checks the profile's
/// own RDMA resource or DRA objects, greps the launcher log for the profile's transport marker, reads the
/// profile's counter files and deletes what it applied.
#[test]
fn nccl_tests() {
    let shellcheck = have_shellcheck();
    for (profile, needles) in [
        (
            "mellanox-ib",
            &[
                "rdma/hca_shared_devices_a",
                r#"grep -F "NET/IB : Using""#,
                "/sys/class/infiniband/mlx5_*/ports/1/counters/port_xmit_data",
                "kubectl delete --ignore-not-found -f bundle/mpi-job.yaml",
            ][..],
        ),
        (
            "aws-efa-eks",
            &[
                r"EFA:.status.capacity.vpc\.amazonaws\.com/efa",
                r"INSTANCE_TYPE:.metadata.labels.node\.kubernetes\.io/instance-type",
                r#"grep -F "NET/OFI""#,
                "/sys/class/infiniband/rdmap*/ports/1/hw_counters/tx_bytes",
                "kubectl delete --ignore-not-found -f bundle/mpi-job.yaml",
            ][..],
        ),
        (
            "gke-rdma-dranet",
            &[
                "kubectl api-resources --api-group=resource.k8s.io",
                "resourceslices",
                r#"grep -F "NET/gIB""#,
                "/sys/class/infiniband/mlx5_*/ports/1/counters/port_xmit_data",
                "kubectl delete --ignore-not-found -f bundle/device-class.yaml",
            ][..],
        ),
        (
            "azure-ib-aks",
            &[
                r"SHARED_IB:.status.capacity.rdma/shared_ib",
                r#"grep -F "NET/IB : Using""#,
                "/sys/class/infiniband/mlx5_*/ports/1/counters/port_xmit_data",
                "kubectl delete --ignore-not-found -f bundle/mpi-job.yaml",
            ][..],
        ),
    ] {
        let src = rdmakit::workflows::builtin("nccl-tests").unwrap();
        let out = tempfile::tempdir().unwrap();
        let (outcome, plan) = common::dry_run(
            "nccl-tests",
            src,
            out.path(),
            &[("profile", profile), NCCL_TESTS_IMAGE],
            None,
        );
        assert!(
            outcome.error.is_none(),
            "{profile}: {}",
            outcome.error.map(|e| e.to_string()).unwrap_or_default()
        );
        assert_eq!(outcome.verdict(), Verdict::Planned, "{profile}");
        assert!(outcome.report.measurements.is_empty(), "{profile}");
        // Validation and lint pass; everything else is planned, nothing fails in dry-run.
        for c in &outcome.report.checks {
            assert!(
                c.status == rdmakit::report::Status::Planned
                    || (c.status == rdmakit::report::Status::Pass && c.name.starts_with("bundle")),
                "{profile}: {} is {:?}: {}",
                c.name,
                c.status,
                c.detail
            );
        }
        let sh = plan.to_shell();
        for n in needles {
            assert!(sh.contains(n), "{profile}: plan.sh lacks {n:?}:\n{sh}");
        }
        let path = assert_bash_parses(profile, &sh, out.path());
        if shellcheck {
            assert_shellcheck_clean(profile, &path);
        }
    }
}

/// Dry-runs a built-in workflow with `--set` pairs into a fresh out dir (kept alive by the returned guard).
fn dry_run_builtin(
    name: &str,
    set: &[(&str, &str)],
) -> (
    rdmakit::host::RunOutcome,
    rdmakit::plan::Plan,
    tempfile::TempDir,
) {
    let out = tempfile::tempdir().unwrap();
    let src = rdmakit::workflows::builtin(name).unwrap();
    let (outcome, plan) = common::dry_run(name, src, out.path(), set, None);
    (outcome, plan, out)
}

/// Dry-runs a built-in workflow with `--set` pairs; everything it shows the user: the plan, plan.sh, the
/// report and the rendered bundle, as one text.
fn dry_run_text(name: &str, set: &[(&str, &str)]) -> String {
    let (outcome, plan, out) = dry_run_builtin(name, set);
    assert!(
        outcome.error.is_none(),
        "{name} {set:?}: {:?}",
        outcome.error
    );
    let mut all = format!(
        "{}\n{}\n{}\n",
        plan.to_text(),
        plan.to_shell(),
        outcome.report.to_markdown()
    );
    for e in std::fs::read_dir(out.path().join("bundle")).unwrap() {
        let p = e.unwrap().path();
        all.push_str(&p.display().to_string());
        all.push_str(&std::fs::read_to_string(&p).unwrap());
    }
    all
}

/// The nccl-tests image gke-rdma-dranet names (seed 002's, Alibaba PAI's).
const GKE_NCCL_TESTS_IMAGE: &str = "dsw-registry.cn-hangzhou.cr.aliyuncs.com/pai/nccl-tests:12.2.2-cudnn8-devel-ubuntu22.04-nccl2.19.3-1-85f9143";

/// Issue 25: rdmakit has no default nccl-tests image (it was Alibaba's Hangzhou registry for every
/// profile); a profile that names none stops nccl-tests and dranet-nccl-tests naming the key to set, and
/// the profile's or the user's image reaches the MPIJob.
#[test]
fn the_nccl_tests_image_comes_from_the_profile_or_the_user() {
    assert_eq!(k8s_render::Values::default().nccl_tests_image, "");
    let (outcome, _, _) = dry_run_builtin("nccl-tests", &[("profile", "mellanox-ib")]);
    let e = outcome.error.expect("no image: the run stops");
    assert!(
        e.message.contains("--set nccl_tests_image=IMAGE")
            && e.message
                .contains("values: #{ nccl_tests_image: \"IMAGE\" }")
            && e.message.contains("profile mellanox-ib names none"),
        "{e}"
    );
    let all = dry_run_text(
        "nccl-tests",
        &[("profile", "mellanox-ib"), NCCL_TESTS_IMAGE],
    );
    assert!(
        all.contains(&format!("image: {}", NCCL_TESTS_IMAGE.1)),
        "{all}"
    );
    assert!(!all.contains("aliyuncs"), "{all}");
    let efa = dry_run_text("nccl-tests", &[("profile", "aws-efa-eks")]);
    assert!(
        efa.contains("image: public.ecr.aws/hpc-cloud/nccl-tests:latest"),
        "{efa}"
    );
}

/// Issue 13: the seed workflows take every vendor string from the profile. erdma-ray-rdt with a Ray profile
/// that is not eRDMA names nothing of Alibaba or eRDMA (resource, device, notes, containerd fix, fix hints),
/// and shows that profile's resource, device and notes instead; dranet-nccl-tests on GKE's DRANET profile
/// lists and judges GKE's DeviceClass attributes, not seed 002's eRDMA ones.
#[test]
fn workflows_take_every_vendor_string_from_the_profile() {
    let vendor_words = |text: &str| -> Vec<String> {
        // The workflow's own name is not a vendor string, nor seed 002's nccl-tests image (on Alibaba's
        // registry), which gke-rdma-dranet names on purpose (its notes say why).
        let t = text
            .replace("erdma-ray-rdt", "")
            .replace(GKE_NCCL_TESTS_IMAGE, "")
            .to_lowercase();
        ["erdma", "aliyun", "alibaba"]
            .iter()
            .filter(|w| t.contains(*w))
            .map(|w| {
                let i = t.find(*w).unwrap_or(0);
                let ctx: String = t[i.saturating_sub(80)..].chars().take(160).collect();
                format!("{w}: ...{ctx}...")
            })
            .collect()
    };
    let all = dry_run_text("erdma-ray-rdt", &[("profile", "mellanox-ib")]);
    let found = vendor_words(&all);
    assert!(
        found.is_empty(),
        "eRDMA strings in a mellanox-ib run: {found:#?}"
    );
    for needle in [
        "Ray Direct Transport over InfiniBand (mellanox-ib, seed 000)",
        "GPU workers with rdma/hca_shared_devices_a",
        "at least 2 nodes report nvidia.com/gpu and rdma/hca_shared_devices_a",
        "Profile mellanox-ib (Generic mlx5 HCAs",
        "On RoCE fabrics set nccl.gid_index",
        // Issue 25: not `ibv_devinfo -d mlx5` (rdma-core takes exact names): every device by its name,
        // judged against NCCL_IB_HCA=mlx5 as NCCL matches it.
        r#"ibv_devinfo -d "${d##*/}""#,
        "a port that NCCL_IB_HCA=mlx5 selects in PORT_ACTIVE",
        "/sys/class/infiniband/mlx5_*/ports/1/counters/port_xmit_data",
    ] {
        assert!(all.contains(needle), "missing {needle:?} in\n{all}");
    }
    // The default profile keeps seed 000's strings, now from aliyun-erdma's fields and notes.
    let all = dry_run_text("erdma-ray-rdt", &[]);
    for needle in [
        "GPU workers with aliyun/erdma",
        "check the alibabacloud-erdma-agent pod",
        "printf '[Service]\\nLimitMEMLOCK=infinity\\n' > /etc/systemd/system/containerd.service.d/10-memlock.conf",
    ] {
        assert!(all.contains(needle), "missing {needle:?} in\n{all}");
    }

    let all = dry_run_text("dranet-nccl-tests", &[("profile", "gke-rdma-dranet")]);
    let found = vendor_words(&all);
    assert!(
        found.is_empty(),
        "eRDMA strings in a gke-rdma-dranet run: {found:#?}"
    );
    let gke = rdmakit::profiles::load_builtin("gke-rdma-dranet").unwrap();
    let k8s_render::RdmaAttachment::Dra(dra) = &gke.rdma else {
        panic!("gke-rdma-dranet is a DRA profile");
    };
    assert!(
        all.contains("the ResourceSlice devices that meet device.driver == \"dra.net\""),
        "{all}"
    );
    // Every attribute GKE's DeviceClass compares is a column of the slice listing.
    let terms: Vec<_> = dra
        .selectors
        .iter()
        .flat_map(|s| probe::preflight::parse_cel_selector(s))
        .collect();
    assert!(!terms.is_empty());
    for t in terms {
        if let probe::preflight::SelectorTerm::Attribute { key, .. } = t {
            let col = format!(
                ".spec.devices[*].attributes.{}.bool",
                key.replace('.', "\\.")
            );
            assert!(all.contains(&col), "no column {col} in\n{all}");
        }
    }
    assert!(all.contains("grep -A5 mlx5"), "{all}");
}

/// vke-ib-pod reads the nodes' RDMA mode label from the profile; a profile without one is refused by name.
#[test]
fn vke_ib_pod_needs_the_profiles_mode_label() {
    let (outcome, _, _out) = dry_run_builtin("vke-ib-pod", &[("profile", "mellanox-ib")]);
    let err = outcome.error.expect("mellanox-ib has no node_label_values");
    assert!(
        err.message.contains("node_label_values") && err.message.contains("mellanox-ib"),
        "{err}"
    );
}

/// plan.sh awaits side-by-side ranks with `wait -n` (bash 4.3+): such a plan checks the bash version before
/// anything runs and names what it needs; a plan without ranks has no such check.
#[test]
fn a_plan_with_parallel_ranks_refuses_a_bash_older_than_4_3() {
    let check = rdmakit::plan::BASH_FOR_WAIT_N;
    let out = tempfile::tempdir().unwrap();
    let src = rdmakit::workflows::builtin("erdma-ray-rdt").unwrap();
    let (_, plan) = common::dry_run("erdma-ray-rdt", src, out.path(), &[], None);
    let sh = plan.to_shell();
    let at = sh.find(check).expect("the bash check is in plan.sh");
    let first_wait = sh
        .find("wait -n ||")
        .expect("erdma-ray-rdt runs its NCCL ranks side by side");
    let first_kubectl = sh.find("\nkubectl ").unwrap();
    assert!(at < first_wait && at < first_kubectl, "{sh}");
    let run = |version: &str| {
        std::process::Command::new("bash")
            .arg("-c")
            .arg(format!("BASH_VERSION='{version}'\n{check}echo went on"))
            .output()
            .unwrap()
    };
    for old in ["3.2.57(1)-release", "4.2.46(2)-release", ""] {
        let o = run(old);
        assert_eq!(o.status.code(), Some(2), "{old}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("plan.sh needs bash 4.3 or later (wait -n)"),
            "{old}: {err}"
        );
        assert!(String::from_utf8_lossy(&o.stdout).is_empty());
    }
    for new in ["4.3.48(1)-release", "5.2.15(1)-release"] {
        let o = run(new);
        assert!(
            o.status.success(),
            "{new}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&o.stdout), "went on\n");
    }
    let (_, vke) = common::dry_run(
        "vke-ib-pod",
        rdmakit::workflows::builtin("vke-ib-pod").unwrap(),
        out.path(),
        &[],
        None,
    );
    assert!(!vke.to_shell().contains(check));
}

/// erdma-ray-rdt with a DRA profile: the node check is the profile's DeviceClass selection in the
/// ResourceSlices (not an empty capacity column), the DRA objects go before the RayCluster (the DeviceClass
/// only if absent) and the NCCL check applies and deletes only its own pods.
#[test]
fn erdma_ray_rdt_with_a_dra_profile_checks_and_applies_the_dra_objects() {
    let (outcome, plan, _out) =
        dry_run_builtin("erdma-ray-rdt", &[("profile", "aliyun-erdma-dra")]);
    assert!(outcome.error.is_none(), "{:?}", outcome.error);
    let sh = plan.to_shell();
    let report = outcome.report.to_markdown();
    assert!(
        !sh.contains(",:.status.capacity."),
        "an empty capacity column:\n{sh}"
    );
    assert!(
        report.contains("PLANNED selectable RDMA devices published: would count, per node, the ResourceSlice devices that meet device.driver == \"dra.net\""),
        "{report}"
    );
    assert!(!report.contains("report nvidia.com/gpu and :"), "{report}");
    let at = |needle: &str| {
        sh.find(needle)
            .unwrap_or_else(|| panic!("no {needle:?} in\n{sh}"))
    };
    let class = at("kubectl get -f bundle/device-class.yaml");
    let template = at("-f bundle/resource-claim-template.yaml\n");
    let cluster = at("-f bundle/ray-cluster-erdma.yaml\n");
    let check = at("-f bundle/erdma-nccl-check-pods.yaml\n");
    assert!(
        class < template && template < cluster && cluster < check,
        "{sh}"
    );
    // The check's own pods are deleted after the check; the DRA objects only with the RayCluster.
    // (the DeviceClass's delete is guarded: only when this run created it)
    let deletes: Vec<&str> = sh
        .lines()
        .filter(|l| {
            l.starts_with("kubectl delete")
                || l.starts_with(
                    "if [ -n \"${RDMAKIT_OWN_BUNDLE_DEVICE_CLASS_YAML:-}\" ]; then kubectl delete",
                )
        })
        .collect();
    let pos = |f: &str| deletes.iter().position(|l| l.contains(f));
    assert!(
        pos("erdma-nccl-check-pods.yaml") < pos("ray-cluster-erdma.yaml")
            && pos("ray-cluster-erdma.yaml") < pos("resource-claim-template.yaml")
            && pos("resource-claim-template.yaml") < pos("device-class.yaml"),
        "{deletes:#?}"
    );
    assert_eq!(
        deletes
            .iter()
            .filter(|l| l.contains("device-class.yaml"))
            .count(),
        1,
        "{deletes:#?}"
    );
}

/// plan.sh's side-by-side ranks, run by bash against a kubectl that runs `exec` commands here: when one
/// rank fails, the script exits with its code at once and the rank still running is killed where it runs
/// (through the PID its wrapper recorded), not only its local kubectl.
#[test]
fn plan_sh_kills_the_rank_still_running_when_another_fails() {
    use rdmakit::exec::{ExecSpec, Executor};
    let dry = rdmakit::exec::dry::DryRunExecutor::new("t.rhai", None, None);
    let nap = format!("{}", 700 + std::process::id() % 89);
    let spec = |pod: &str, argv: &[&str]| ExecSpec {
        pod: pod.into(),
        command: argv.iter().map(|s| (*s).to_owned()).collect(),
        timeout: std::time::Duration::from_secs(60),
        ..ExecSpec::default()
    };
    dry.exec_many(&[
        spec("rank-0", &["sleep", &nap]),
        spec("rank-1", &["sh", "-c", "sleep 1; exit 3"]),
    ])
    .unwrap();
    let sh = dry.plan().to_shell();
    let dir = tempfile::tempdir().unwrap();
    // `kubectl exec POD [-c C] -- ARGV...` runs ARGV here as a process of its own, as in a pod: killing this
    // kubectl leaves it running (what happens to a real exec's process when its stream closes).
    let bin = common::cli::fake_kubectl(
        dir.path(),
        "#!/bin/sh\n[ \"$1\" = exec ] || exit 64\nwhile [ \"$1\" != -- ]; do shift; done\nshift\n\"$@\" &\nwait $!\n",
    );
    let script = dir.path().join("plan.sh");
    std::fs::write(&script, &sh).unwrap();
    let t0 = std::time::Instant::now();
    let o = common::cli::run_plan(&script, &bin);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}\n{sh}");
    assert!(
        err.contains("a rank failed (exit 3): stopped the others"),
        "{err}"
    );
    assert!(
        t0.elapsed() < std::time::Duration::from_secs(30),
        "{:?}",
        t0.elapsed()
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("stopped pid "),
        "the kill ran for rank 0: {out}\n{err}"
    );
    // Nothing of rank 0 runs any more.
    let want: Vec<u8> = ["sleep", nap.as_str()]
        .iter()
        .flat_map(|a| a.bytes().chain([0]))
        .collect();
    let left: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().map(str::to_owned))
        .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == want))
        .collect();
    assert!(left.is_empty(), "rank 0 still runs: {left:?}");
}

/// dranet-nccl-tests needs a DRA profile; a device-plugin one is refused by name, pointing at nccl-tests.
#[test]
fn dranet_nccl_tests_refuses_a_device_plugin_profile() {
    let (outcome, _, _out) = dry_run_builtin("dranet-nccl-tests", &[("profile", "aws-efa-eks")]);
    let err = outcome
        .error
        .expect("aws-efa-eks is a device-plugin profile");
    assert!(
        err.message
            .contains("profile aws-efa-eks gives pods RDMA through device-plugin, not DRA")
            && err.message.contains("the nccl-tests workflow"),
        "{err}"
    );
}
