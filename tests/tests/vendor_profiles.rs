//! The cloud vendor profiles (AWS EFA, Google Cloud gIB via DRANET, Azure InfiniBand) and a made-up
//! fourth vendor written from the README alone, loaded from their files as a user would load them:
//! a snapshot of every rendered system, strict validation, lint clean on what is rendered and
//! findings on planted mistakes, and the expectation inputs each instance type yields.

use std::path::{Path, PathBuf};

use k8s_render::lint::{LintOptions, lint, lint_dockerfile};
use k8s_render::manifest::{Severity, parse_str};
use k8s_render::validate::{ValidateOptions, validate};
use k8s_render::{FileKind, Profile, RenderError, System, Values, render, render_all};
use rdmakit_tests::bundle_listing as listing;

/// Default values, plus an nccl-tests image when the profile names none (rdmakit has no default: issue 25),
/// so `render_all` renders the MPIJob; a profile's own image stays in the snapshots.
fn named_image(profile: &k8s_render::Profile) -> Values {
    let mut v = Values::default();
    if !profile.values.contains_key("nccl_tests_image") {
        v.set("nccl_tests_image", "registry.example.com/nccl-tests:2.19")
            .expect("a valid image reference");
    }
    v
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace")
        .to_path_buf()
}

/// The three cloud profiles, then the made-up one.
const FILES: &[&str] = &[
    "scripts/vendors/aws-efa-eks.rhai",
    "scripts/vendors/gke-rdma-dranet.rhai",
    "scripts/vendors/azure-ib-aks.rhai",
    "tests/fixtures/profiles/contoso-roce.rhai",
];

fn load(file: &str) -> Profile {
    rdmakit::profiles::load_file(&root().join(file)).unwrap_or_else(|e| panic!("{file}: {e}"))
}

fn efa() -> Profile {
    load(FILES[0])
}

#[test]
fn every_profile_renders_every_system_snapshot() {
    for file in FILES {
        let profile = load(file);
        for &system in System::all() {
            let result = render(system, &profile, &named_image(&profile));
            if !system.applies_to(&profile) {
                assert!(matches!(result, Err(RenderError::NotApplicable { .. })));
                continue;
            }
            let bundle = result.unwrap_or_else(|e| panic!("{file}/{system}: {e}"));
            insta::assert_snapshot!(format!("{}__{system}", profile.name), listing(&bundle));
        }
    }
}

#[test]
fn every_profile_validates_strictly_and_lints_clean() {
    let options = ValidateOptions {
        strict: true,
        allow_unknown_kinds: false,
    };
    for file in FILES {
        let profile = load(file);
        // rdmakit has no default nccl-tests image (issue 25): the user names one.
        let mut values = Values::default();
        values.nccl_tests_image = "registry.example.com/contoso/nccl-tests:2.27.7".to_owned();
        let bundle = render_all(&profile, &values).unwrap();
        for f in bundle.files() {
            match f.kind {
                FileKind::Manifest => {
                    let docs = parse_str(&f.path, &f.contents).unwrap();
                    let v = validate(&docs, &options);
                    assert!(v.is_empty(), "{file}: {}: {v:#?}", f.path);
                    let lint_options =
                        LintOptions::for_profile(&profile, None, f.path == "mpi-job.yaml");
                    let errors: Vec<String> = lint(&docs, &lint_options)
                        .iter()
                        .filter(|x| x.severity == Severity::Error)
                        .map(ToString::to_string)
                        .collect();
                    assert!(
                        errors.is_empty(),
                        "{file}: {}:\n{}",
                        f.path,
                        errors.join("\n")
                    );
                }
                FileKind::Dockerfile => {
                    let findings = lint_dockerfile(
                        &f.path,
                        &f.contents,
                        &LintOptions::for_profile(&profile, None, false),
                    );
                    assert!(findings.is_empty(), "{file}: {findings:#?}");
                }
                _ => {}
            }
        }
    }
}

#[test]
fn efa_pods_get_the_plugin_and_no_ib_hca() {
    let profile = efa();
    let b = render(System::NcclCheck, &profile, &Values::default()).unwrap();
    let pods = &b.get("efa-nccl-check-pods.yaml").unwrap().contents;
    assert!(!pods.contains("NCCL_IB_HCA"), "{pods}");
    assert!(!pods.contains("NCCL_IB_DISABLE"), "{pods}");
    for want in [
        "FI_PROVIDER",
        "FI_EFA_USE_DEVICE_RDMA",
        "vpc.amazonaws.com/efa: \"32\"",
        "nvidia.com/gpu: \"8\"",
    ] {
        assert!(pods.contains(want), "`{want}` not in:\n{pods}");
    }
    // The A/B switch for a plugin is NCCL_NET=Socket, not NCCL_IB_DISABLE.
    let check = &b.get("nccl_allreduce_check.py").unwrap().contents;
    assert!(
        check.contains("NCCL_NET=Socket") && !check.contains("NCCL_IB_DISABLE"),
        "{check}"
    );
    // Another instance type: its EFA and GPU counts.
    let mut v = Values::default();
    v.set("instance_type", "p4d.24xlarge").unwrap();
    let b = render(System::MpiJob, &profile, &v).unwrap();
    let job = &b.get("mpi-job.yaml").unwrap().contents;
    assert!(job.contains("vpc.amazonaws.com/efa: \"4\""), "{job}");
    assert!(job.contains("slotsPerWorker: 8"), "{job}");
    assert!(job.contains("mpirun -np 16"), "{job}");
    assert!(job.contains("-x FI_PROVIDER=efa"), "{job}");
    assert!(
        job.contains("/opt/nccl-tests/build/all_reduce_perf"),
        "{job}"
    );
    // An unknown instance type names the known ones.
    v.set("instance_type", "p9.huge").unwrap();
    let e = render(System::MpiJob, &profile, &v)
        .unwrap_err()
        .to_string();
    assert!(e.contains("p9.huge") && e.contains("p5.48xlarge"), "{e}");
}

#[test]
fn efa_image_installs_the_plugin_and_refuses_a_bad_plugin_version() {
    let profile = efa();
    let d = render(System::Image, &profile, &Values::default())
        .unwrap()
        .get("Dockerfile")
        .unwrap()
        .contents
        .clone();
    assert!(d.contains("efa_installer.sh -y -g -d --skip-kmod --skip-limit-conf --no-verify"));
    assert!(d.contains("aws-ofi-nccl-1.16.3.tar.gz"), "{d}");
    assert!(d.contains("ENV LD_LIBRARY_PATH=/opt/aws-ofi-nccl/install/lib:"));
    assert!(d.contains("nvidia-nccl-cu13==2.27.7"));
    let mut v = Values::default();
    v.set("nccl_plugin_version", "1.12.0").unwrap();
    let e = render(System::Image, &profile, &v).unwrap_err();
    assert!(matches!(e, RenderError::BadPluginVersion { .. }), "{e}");
    let msg = e.to_string();
    assert!(msg.contains("1.12.0") && msg.contains("1.16.3"), "{msg}");
}

#[test]
fn planted_mistakes_on_plugin_profiles_are_found() {
    let profile = efa();
    let opts = LintOptions::for_profile(&profile, None, false);
    let pods = render(System::NcclCheck, &profile, &Values::default()).unwrap();
    let good = pods
        .get("efa-nccl-check-pods.yaml")
        .unwrap()
        .contents
        .clone();
    let rules = |text: &str| -> Vec<&'static str> {
        lint(&parse_str("pods.yaml", text).unwrap(), &opts)
            .iter()
            .map(|f| f.rule)
            .collect()
    };
    assert!(!rules(&good).contains(&"nccl-plugin-env-missing"));
    // The provider variable dropped from the env list.
    let no_provider = good.replace("    - name: FI_PROVIDER\n      value: efa\n", "");
    assert_ne!(no_provider, good, "the planted change must apply");
    assert!(rules(&no_provider).contains(&"nccl-plugin-env-missing"));
    // Another provider.
    let tcp = good.replace("value: efa", "value: tcp");
    assert!(rules(&tcp).contains(&"nccl-plugin-env-missing"));
    // The EFA request dropped (limits and requests): the plugin's settings stay, the device does not.
    assert!(!rules(&good).contains(&"nccl-plugin-env-without-rdma"));
    let no_efa: String = good
        .lines()
        .filter(|l| !l.trim_start().starts_with("vpc.amazonaws.com/efa:"))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_ne!(no_efa, good, "the planted change must apply");
    let hits = rules(&no_efa);
    assert!(hits.contains(&"nccl-plugin-env-without-rdma"), "{hits:?}");
    // Sockets forced.
    let sockets = good.replace(
        "    - name: FI_PROVIDER",
        "    - name: NCCL_NET\n      value: Socket\n    - name: FI_PROVIDER",
    );
    assert!(rules(&sockets).contains(&"nccl-net-socket-with-plugin"));
    // NCCL_IB_HCA rules do not apply to a plugin profile: an mlx5 value is no mismatch here.
    let hca = good.replace(
        "    - name: FI_PROVIDER",
        "    - name: NCCL_IB_HCA\n      value: mlx5\n    - name: FI_PROVIDER",
    );
    assert!(!rules(&hca).contains(&"nccl-ib-hca-mismatch"));
    // ... but do for an IB verbs profile.
    let azure = load(FILES[2]);
    let az_opts = LintOptions::for_profile(&azure, None, false);
    let az = render(System::NcclCheck, &azure, &Values::default()).unwrap();
    let az_pods = az
        .get("azib-nccl-check-pods.yaml")
        .unwrap()
        .contents
        .replace("value: mlx5", "value: erdma_0");
    let found: Vec<&str> = lint(&parse_str("az.yaml", &az_pods).unwrap(), &az_opts)
        .iter()
        .map(|f| f.rule)
        .collect();
    assert!(found.contains(&"nccl-ib-hca-mismatch"), "{found:?}");

    // Dockerfiles: the plugin missing, and a known-bad plugin version pinned.
    let bare =
        "FROM rayproject/ray-llm:2.57.0-py312-cu130\nRUN pip install nvidia-nccl-cu13==2.27.7\n";
    let f = lint_dockerfile("Dockerfile", bare, &opts);
    assert!(
        f.iter().any(|x| x.rule == "nccl-plugin-missing-from-image"),
        "{f:#?}"
    );
    let bad = "FROM nvcr.io/nvidia/cuda:12.8.1-devel-ubuntu22.04\nARG AWS_OFI_NCCL_VERSION=v1.12.0-aws\nRUN curl -OL https://github.com/aws/aws-ofi-nccl/releases/download/${AWS_OFI_NCCL_VERSION}/aws-ofi-nccl-1.12.0.tar.gz\n";
    let f = lint_dockerfile("Dockerfile", bad, &opts);
    let bad_hits: Vec<_> = f
        .iter()
        .filter(|x| x.rule == "nccl-plugin-known-bad-version")
        .collect();
    assert!(!bad_hits.is_empty(), "{f:#?}");
    assert!(
        bad_hits.iter().all(|x| x.fix.contains("1.16.3")),
        "{bad_hits:#?}"
    );
    assert!(
        bad_hits.iter().any(|x| x.location.line == Some(2)),
        "{bad_hits:#?}"
    );

    // gIB comes from the node: a pod without the mount is found.
    let gke = load(FILES[1]);
    let g_opts = LintOptions::for_profile(&gke, None, false);
    let g = render(System::NcclCheck, &gke, &Values::default()).unwrap();
    let g_pods = g.get("gib-nccl-check-pods.yaml").unwrap().contents.clone();
    let clean: Vec<&str> = lint(&parse_str("g.yaml", &g_pods).unwrap(), &g_opts)
        .iter()
        .map(|f| f.rule)
        .collect();
    assert!(
        !clean.contains(&"nccl-plugin-host-mount-missing"),
        "{clean:?}"
    );
    // LD_LIBRARY_PATH holding the plugin's directory among others is fine; without it, not.
    let longer = g_pods.replace(
        "value: /usr/local/nvidia/lib64",
        "value: /usr/local/nvidia/lib64:/opt/other/lib",
    );
    assert_ne!(longer, g_pods);
    let rules_of = |text: &str| -> Vec<&'static str> {
        lint(&parse_str("g.yaml", text).unwrap(), &g_opts)
            .iter()
            .map(|f| f.rule)
            .collect()
    };
    assert!(!rules_of(&longer).contains(&"nccl-plugin-env-missing"));
    let other = g_pods.replace("value: /usr/local/nvidia/lib64", "value: /opt/other/lib");
    assert!(rules_of(&other).contains(&"nccl-plugin-env-missing"));
    let unmounted = g_pods.replace("mountPath: /usr/local/nvidia", "mountPath: /opt/elsewhere");
    assert_ne!(unmounted, g_pods);
    let found: Vec<&str> = lint(&parse_str("g.yaml", &unmounted).unwrap(), &g_opts)
        .iter()
        .map(|f| f.rule)
        .collect();
    assert!(
        found.contains(&"nccl-plugin-host-mount-missing"),
        "{found:?}"
    );
    for rule in [
        "nccl-plugin-missing-from-image",
        "nccl-plugin-env-missing",
        "nccl-plugin-known-bad-version",
        "nccl-net-socket-with-plugin",
        "nccl-plugin-host-mount-missing",
    ] {
        assert!(k8s_render::lint::explain(rule).is_ok(), "{rule}");
    }
}

#[test]
fn dranet_gke_claims_eight_nics_and_mounts_the_plugin() {
    let gke = load(FILES[1]);
    let b = render(System::RayCluster, &gke, &Values::default()).unwrap();
    let rct = &b.get("resource-claim-template.yaml").unwrap().contents;
    assert!(rct.contains("count: 8"), "{rct}");
    let rc = &b.get("ray-cluster-gib.yaml").unwrap().contents;
    for want in [
        "NCCL_NET",
        "gIB",
        "/usr/local/nvidia/lib64",
        "/home/kubernetes/bin/gib",
        "nvidia.com/gpu: \"8\"",
    ] {
        assert!(rc.contains(want), "`{want}` not in:\n{rc}");
    }
    assert!(!rc.contains("NCCL_IB_HCA"), "{rc}");
}

#[test]
fn the_made_up_vendor_carries_its_annotations() {
    let p = load(FILES[3]);
    let b = render_all(&p, &named_image(&p)).unwrap();
    let rc = &b.get("ray-cluster-roce.yaml").unwrap().contents;
    assert!(
        rc.contains("k8s.v1.cni.cncf.io/networks: contoso-roce-net"),
        "{rc}"
    );
    assert!(rc.contains("contoso.example/roce: \"2\""), "{rc}");
    assert!(rc.contains("nvidia.com/gpu: \"4\""), "{rc}");
    let job = &b.get("mpi-job.yaml").unwrap().contents;
    assert!(job.contains("-x NCCL_IB_GID_INDEX=3"), "{job}");
}

#[test]
fn expectation_facts_per_instance_type() {
    let p = efa();
    let f = p.expectation_facts(None).unwrap();
    assert_eq!(
        (
            f.nic_line_gbps,
            f.nics_per_node,
            f.nics_used,
            f.gpudirect,
            f.pcie_gen
        ),
        (100.0, 32, 32, true, 5)
    );
    let f = p.expectation_facts(Some("p5en.48xlarge")).unwrap();
    assert_eq!((f.nic_line_gbps, f.nics_per_node), (200.0, 16));
    // Seed 000: NCCL_IB_HCA=erdma_0 uses one of the two eRDMA NICs, staged through host memory.
    let erdma = rdmakit::profiles::load_builtin("aliyun-erdma").unwrap();
    let f = erdma
        .expectation_facts(Some("ecs.ebmgn9gc.64xlarge"))
        .unwrap();
    assert_eq!(
        (f.nic_line_gbps, f.nics_per_node, f.nics_used, f.gpudirect),
        (190.0, 2, 1, false)
    );
    // No default instance type there, and no published NIC rate for seed 002's type.
    assert!(erdma.expectation_facts(None).is_err());
    let dra = rdmakit::profiles::load_builtin("aliyun-erdma-dra").unwrap();
    let e = dra.expectation_facts(None).unwrap_err();
    assert!(e.field.ends_with("nic_gbps"), "{e}");
    // The facts deserialise into probe's model inputs and give an expectation.
    let inputs: probe::expect::ExpectationInputs =
        serde_json::from_value(serde_json::to_value(p.expectation_facts(None).unwrap()).unwrap())
            .unwrap();
    let e = probe::expect::expect(&inputs).unwrap();
    assert!(e.gib_s > 300.0, "{e:?}");
}

#[test]
fn seed_002_gpu_count_comes_from_the_instance_type() {
    let dra = rdmakit::profiles::load_builtin("aliyun-erdma-dra").unwrap();
    let job = render(System::MpiJob, &dra, &named_image(&dra)).unwrap();
    let text = &job.get("mpi-job.yaml").unwrap().contents;
    assert!(text.contains("slotsPerWorker: 2"), "{text}");
    assert!(text.contains("mpirun -np 4"), "{text}");
    assert!(text.contains("nvidia.com/gpu: \"2\""), "{text}");
    let mut v = Values::default();
    v.set("gpus_per_worker", "1").unwrap();
    let text = render(System::MpiJob, &dra, &v).unwrap();
    assert!(
        text.get("mpi-job.yaml")
            .unwrap()
            .contents
            .contains("slotsPerWorker: 1")
    );
}

#[test]
fn seed_004_modes_and_the_instance_types_excepted_from_ib_shared() {
    let vke = rdmakit::profiles::load_builtin("volcengine-ib").unwrap();
    assert_eq!(
        vke.accepted_label_values("vke.node.rdma.mode"),
        ["ib-shared", "ib-shared-multi"]
    );
    let hpcg = vke.node_label_exceptions_for("ecs.hpcg1ve.21xlarge", None);
    assert_eq!(hpcg.len(), 1);
    assert_eq!(hpcg[0].not_recommended, "ib-shared");
    // ecs.hpcpni2.28xlarge only in North China.
    assert_eq!(
        vke.node_label_exceptions_for("ecs.hpcpni2.28xlarge", Some("North China"))
            .len(),
        1
    );
    assert!(
        vke.node_label_exceptions_for("ecs.hpcpni2.28xlarge", Some("South China"))
            .is_empty()
    );
    assert!(
        vke.node_label_exceptions_for("ecs.hpcpni3.45xlarge", None)
            .is_empty()
    );
    // The pod selects no mode, so it runs on nodes of either (what the node check accepts).
    let pod = render(System::RdmaTestPod, &vke, &Values::default()).unwrap();
    assert!(
        !pod.get("rdma-test-pod.yaml")
            .unwrap()
            .contents
            .contains("nodeSelector")
    );
}

/// The profile reference (scripts/vendors/README.md) documents every field any shipped profile uses,
/// and every field of the profile model (the made-up vendor and the serialised defaults included).
#[test]
fn the_profile_reference_documents_every_field() {
    // Fields whose keys are data (resource names, variables, instance types), not field names.
    const MAPS: &[&str] = &[
        "resources",
        "env",
        "extra_env",
        "node_selector",
        "node_labels",
        "node_label_values",
        "values",
        "instance_types",
        "annotations",
    ];
    fn walk(v: &serde_json::Value, data_keys: bool, out: &mut std::collections::BTreeSet<String>) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, x) in m {
                    if !data_keys {
                        out.insert(k.clone());
                    }
                    walk(x, MAPS.contains(&k.as_str()) && !data_keys, out);
                }
            }
            serde_json::Value::Array(a) => a.iter().for_each(|x| walk(x, false, out)),
            _ => {}
        }
    }
    let reference = std::fs::read_to_string(root().join("scripts/vendors/README.md"))
        .expect("scripts/vendors/README.md");
    let mut fields = std::collections::BTreeSet::new();
    let mut profiles: Vec<Profile> = rdmakit::profiles::builtin_names()
        .iter()
        .map(|n| rdmakit::profiles::load_builtin(n).expect("built-in loads"))
        .collect();
    profiles.extend(FILES.iter().map(|f| load(f)));
    for p in &profiles {
        walk(
            &serde_json::to_value(p).expect("serialises"),
            false,
            &mut fields,
        );
    }
    let missing: Vec<&String> = fields
        .iter()
        .filter(|f| !reference.contains(&format!("`{f}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "scripts/vendors/README.md does not document: {missing:?}"
    );
    assert!(fields.len() > 60, "only {} fields walked", fields.len());
}
