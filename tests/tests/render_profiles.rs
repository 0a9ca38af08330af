//! Every built-in profile (loaded from its Rhai script through `rdmakit::profiles`) × every system:
//! one snapshot each, plus properties that must hold for all of them.

use k8s_render::{FileKind, RenderError, System, Values, render, render_all};
use rdmakit::profiles::{builtin_names, load_builtin};
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

#[test]
fn snapshot_every_profile_and_system() {
    let mut rendered = 0;
    for name in builtin_names() {
        let profile = load_builtin(name).unwrap();
        let values = named_image(&profile);
        for &system in System::all() {
            let result = render(system, &profile, &values);
            if !system.applies_to(&profile) {
                assert!(
                    matches!(result, Err(RenderError::NotApplicable { .. })),
                    "{name}/{system} should not apply"
                );
                continue;
            }
            let bundle = result.unwrap_or_else(|e| panic!("{name}/{system}: {e}"));
            assert!(!bundle.is_empty());
            insta::assert_snapshot!(format!("{name}__{system}"), listing(&bundle));
            rendered += 1;
        }
    }
    // 8 profiles × 8 systems, minus the DRA objects for the 6 device-plugin profiles (the two DRA profiles
    // render every system).
    assert_eq!(rendered, 58);
}

#[test]
fn rdma_pods_carry_the_profile_settings() {
    for name in builtin_names() {
        let profile = load_builtin(name).unwrap();
        let values = named_image(&profile);
        let bundle = render_all(&profile, &values).unwrap();
        for (file, index, doc) in bundle.documents() {
            // Every pod spec that sets NCCL_IB_HCA must also hold an RDMA resource or claim and IPC_LOCK.
            let text = doc.to_string();
            if !text.contains("NCCL_IB_HCA") {
                continue;
            }
            let has_resource = match &profile.rdma {
                k8s_render::RdmaAttachment::DevicePlugin { resources } => {
                    resources.keys().all(|r| text.contains(&format!("\"{r}\"")))
                }
                k8s_render::RdmaAttachment::Dra(d) => text.contains(&format!(
                    "\"resourceClaimTemplateName\":\"{}\"",
                    d.claim_template
                )),
            };
            assert!(
                has_resource,
                "{name}: {file}[{index}] sets NCCL_IB_HCA without the RDMA device"
            );
            assert!(
                text.contains("IPC_LOCK"),
                "{name}: {file}[{index}] lacks IPC_LOCK"
            );
            assert!(
                text.contains("/dev/shm"),
                "{name}: {file}[{index}] lacks /dev/shm"
            );
        }
        // The demo and the check program speak of this profile's fabric and counters.
        let demo = &bundle.get("rdt_nccl_demo.py").unwrap().contents;
        assert!(demo.contains(&format!("FABRIC = \"{}\"", profile.fabric)));
        let check = &bundle.get("nccl_allreduce_check.py").unwrap().contents;
        assert!(check.contains(&profile.devices.tx_counter));
        assert!(check.contains(&format!(
            "COUNTER_MULTIPLIER = {}",
            profile.devices.counter_multiplier
        )));
    }
}

#[test]
fn rendering_is_byte_stable_and_writes_atomically() {
    let profile = load_builtin("aliyun-erdma").unwrap();
    let values = named_image(&profile);
    let a = render_all(&profile, &values).unwrap();
    let b = render_all(&profile, &values).unwrap();
    assert_eq!(a, b);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("bundle");
    a.write_to(&out).unwrap();
    let first: Vec<(String, Vec<u8>)> = a
        .files()
        .iter()
        .map(|f| (f.path.clone(), std::fs::read(out.join(&f.path)).unwrap()))
        .collect();
    b.write_to(&out).unwrap();
    for (path, bytes) in &first {
        assert_eq!(
            &std::fs::read(out.join(path)).unwrap(),
            bytes,
            "{path} changed between writes"
        );
        assert_eq!(bytes, a.get(path).unwrap().contents.as_bytes());
    }
    // The stream holds every manifest document and no Dockerfile or program.
    let stream = a.to_stream();
    let manifests: usize = a
        .files()
        .iter()
        .filter(|f| f.kind == FileKind::Manifest)
        .map(|f| f.documents.len())
        .sum();
    assert_eq!(
        stream.matches("\napiVersion: ").count() + usize::from(stream.starts_with("apiVersion: ")),
        manifests
    );
    assert!(!stream.contains("FROM rayproject"));
}

#[test]
fn bad_nccl_pin_fails_before_anything_is_written() {
    let profile = load_builtin("aliyun-erdma").unwrap();
    let mut values = Values::default();
    values.set("nccl_version", "2.28.9").unwrap();
    let err = render_all(&profile, &values).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, RenderError::BadNcclVersion { .. }), "{msg}");
    assert!(
        msg.contains("2.28.9") && msg.contains("2.30.7") && msg.contains("ncclNetInit"),
        "{msg}"
    );
    // A version outside the bad list is accepted and lands in the Dockerfile.
    values.set("nccl_version", "2.29.7").unwrap();
    let b = render(System::Image, &profile, &values).unwrap();
    assert!(
        b.get("Dockerfile")
            .unwrap()
            .contents
            .contains("nvidia-nccl-cu13==2.29.7")
    );
}

#[test]
fn workload_systems_of_a_dra_profile_include_the_dra_objects() {
    let profile = load_builtin("aliyun-erdma-dra").unwrap();
    let b = render(System::RayCluster, &profile, &Values::default()).unwrap();
    assert_eq!(
        b.paths(),
        [
            "device-class.yaml",
            "resource-claim-template.yaml",
            "ray-cluster-erdma.yaml"
        ]
    );
    let all = render_all(&profile, &named_image(&profile)).unwrap();
    assert_eq!(
        all.paths()
            .iter()
            .filter(|p| **p == "device-class.yaml")
            .count(),
        1
    );
}

#[test]
fn optional_rdmakit_stage() {
    let profile = load_builtin("mellanox-ib").unwrap();
    let mut values = Values::default();
    values.set("with_rdmakit", "true").unwrap();
    let d = render(System::Image, &profile, &values)
        .unwrap()
        .get("Dockerfile")
        .unwrap()
        .contents
        .clone();
    assert!(
        d.contains("FROM scratch AS rdmakit\nCOPY rdmakit /rdmakit\n"),
        "{d}"
    );
    assert!(
        d.ends_with("COPY --from=rdmakit --chmod=0755 /rdmakit /usr/local/bin/rdmakit\n"),
        "{d}"
    );
    // No pin and no vendor apt source for mlx5: packages come from the distribution.
    assert!(!d.contains("pip install"), "{d}");
    assert!(!d.contains("sources.list.d"), "{d}");
}
