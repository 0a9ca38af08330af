//! Every rendered bundle of every built-in profile validates in strict mode against the vendored CRD
//! schemas and the Kubernetes types (unknown fields rejected, defaults applied before `required`).

use k8s_render::manifest::parse_str;
use k8s_render::validate::{ValidateOptions, validate};
use k8s_render::{FileKind, Values, render_all};
use rdmakit::profiles::{builtin_names, load_builtin};

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
fn every_rendered_bundle_validates_strictly() {
    let options = ValidateOptions {
        strict: true,
        allow_unknown_kinds: false,
    };
    let mut checked = 0;
    for name in builtin_names() {
        let profile = load_builtin(name).unwrap();
        // nccl_tests_image has no default (no vendor's registry suits every profile): name one.
        let mut values = Values::default();
        values
            .set("nccl_tests_image", "registry.example.com/nccl-tests:2.19")
            .unwrap();
        let bundle = render_all(&profile, &values).unwrap();
        for file in bundle
            .files()
            .iter()
            .filter(|f| f.kind == FileKind::Manifest)
        {
            let docs = parse_str(&file.path, &file.contents)
                .unwrap_or_else(|e| panic!("{name}: {} does not parse back: {e}", file.path));
            assert_eq!(docs.len(), file.documents.len(), "{name}: {}", file.path);
            // The YAML text says exactly what the typed objects say (quoting, blocks, no loss).
            for (parsed, typed) in docs.iter().zip(&file.documents) {
                assert_eq!(
                    &parsed.value, typed,
                    "{name}: {} doc {}",
                    file.path, parsed.index
                );
            }
            let violations = validate(&docs, &options);
            let listed: Vec<String> = violations.iter().map(ToString::to_string).collect();
            assert!(
                violations.is_empty(),
                "{name}: {}:\n{}",
                file.path,
                listed.join("\n")
            );
            checked += docs.len();
        }
    }
    assert!(checked >= 5 * 6, "only {checked} documents checked");
}

#[test]
fn the_stream_validates_as_one_input() {
    let profile = load_builtin("aliyun-erdma-dra").unwrap();
    let bundle = render_all(&profile, &named_image(&profile)).unwrap();
    let docs = parse_str("stream", &bundle.to_stream()).unwrap();
    assert_eq!(docs.len(), bundle.documents().count());
    let violations = validate(&docs, &ValidateOptions::default());
    assert!(violations.is_empty(), "{violations:?}");
}
