//! Reading manifests: multi-document streams, positions, and clear errors for bad input.

use k8s_render::manifest::{self, FieldPath, ManifestError};

#[test]
fn malformed_yaml_names_file_document_and_line() {
    let path = format!(
        "{}/tests/fixtures/check/malformed.yaml",
        env!("CARGO_MANIFEST_DIR")
    );
    let err = manifest::read_path(&path).expect_err("malformed");
    match &err {
        ManifestError::Yaml { doc, line, .. } => {
            assert_eq!(*doc, 1);
            assert!((14..=16).contains(line), "line {line}");
        }
        other => panic!("unexpected error {other:?}"),
    }
    let text = err.to_string();
    assert!(text.contains("malformed.yaml doc 1, line"), "{text}");
    assert!(text.contains("invalid YAML"), "{text}");
}

#[test]
fn missing_kind_and_non_objects_are_clear_errors() {
    let err = manifest::parse_str("x.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\n---\napiVersion: v1\nmetadata: {name: b}\n")
        .expect_err("no kind");
    let text = err.to_string();
    assert!(
        text.starts_with("x.yaml doc 1 (line 5): kind is missing"),
        "{text}"
    );

    let err =
        manifest::parse_str("x.yaml", "kind: Pod\napiVersion: 1\n").expect_err("bad apiVersion");
    assert!(
        err.to_string()
            .contains("apiVersion must be a non-empty string, found integer 1"),
        "{err}"
    );

    let err = manifest::parse_str("x.yaml", "- a\n- b\n").expect_err("a list");
    assert!(
        matches!(err, ManifestError::NotAMapping { doc: 0, .. }),
        "{err:?}"
    );

    let err = manifest::read_path("/nonexistent/dir/ray.yaml").expect_err("no file");
    assert!(
        err.to_string()
            .starts_with("/nonexistent/dir/ray.yaml: cannot read"),
        "{err}"
    );
}

#[test]
fn documents_keep_index_start_line_and_field_positions() {
    let text = "# header comment\n---\n# empty document\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: one\n---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: two\nspec:\n  containers:\n    - name: c\n      image: busybox\n      resources:\n        limits:\n          aliyun/erdma: 1\n...\n";
    let docs = manifest::parse_str("stream.yaml", text).expect("parses");
    assert_eq!(docs.len(), 2);
    assert_eq!((docs[0].index, docs[0].line), (0, Some(5)));
    assert_eq!((docs[1].index, docs[1].line), (1, Some(10)));
    assert_eq!(docs[1].describe(), "stream.yaml doc 1 (Pod two)");
    assert_eq!(docs[1].api_version, "v1");
    let limit = FieldPath::root()
        .key("spec")
        .key("containers")
        .index(0)
        .key("resources")
        .key("limits")
        .key("aliyun/erdma");
    assert_eq!(
        limit.to_string(),
        "spec.containers[0].resources.limits[\"aliyun/erdma\"]"
    );
    assert_eq!(docs[1].line_of(&limit), Some(20));
    assert_eq!(
        docs[1].line_of(&FieldPath::root().key("spec").key("containers").index(0)),
        Some(16)
    );
    // A missing field is placed at its nearest present ancestor.
    assert_eq!(
        docs[1].line_of(&FieldPath::root().key("spec").key("hostNetwork")),
        Some(14)
    );
}

#[test]
fn yaml_is_read_like_kubernetes_reads_it() {
    let docs = manifest::parse_str(
        "k.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: k}\nmode: 0644\nflag: yes\nquoted: \"0\"\nnum: 0\n",
    )
    .expect("parses");
    let v = &docs[0].value;
    assert_eq!(v["mode"], serde_json::json!(420));
    assert_eq!(v["flag"], serde_json::json!(true));
    assert_eq!(v["quoted"], serde_json::json!("0"));
    assert_eq!(v["num"], serde_json::json!(0));
}

#[test]
fn duplicate_keys_are_a_violation_with_both_lines_not_unreadable_input() {
    let text = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\n  name: b\nspec:\n  containers:\n  - {name: c, image: busybox}\n";
    let docs = manifest::parse_str("d.yaml", text).expect("a duplicate key still parses");
    assert_eq!(
        docs[0].duplicate_keys,
        [manifest::DuplicateKey {
            path: FieldPath::root().key("metadata").key("name"),
            first_line: 4,
            line: 5,
        }]
    );
    let v = k8s_render::validate::validate(&docs, &Default::default());
    assert_eq!(v.len(), 1, "{v:#?}");
    // An error under --strict: kubectl 1.36 applies such a document (the control-plane tier shows it),
    // keeping the later value, while other readers keep the first.
    assert_eq!(v[0].severity, manifest::Severity::Error);
    assert_eq!(v[0].location.line, Some(5));
    assert_eq!(
        v[0].to_string(),
        "d.yaml doc 0 (Pod b) line 5: metadata.name: key \"name\" appears twice in one mapping (first at line 4, again at line 5): kubectl applies the later value and drops the first without a word (the API server accepts it), other tools keep the first; delete one"
    );
    // A warning without --strict, naming both lines all the same.
    let lax = k8s_render::validate::validate(
        &docs,
        &k8s_render::validate::ValidateOptions {
            strict: false,
            ..Default::default()
        },
    );
    assert_eq!(lax.len(), 1, "{lax:#?}");
    assert_eq!(lax[0].severity, manifest::Severity::Warning);
    assert!(lax[0].message.contains("first at line 4, again at line 5"));

    // Inside a `kind: List` the path is the item's own.
    let list = "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Namespace\n  metadata: {name: x}\n  kind: Namespace\n";
    let docs = manifest::parse_str("l.yaml", list).expect("parses");
    assert_eq!(
        docs[0].duplicate_keys[0].path,
        FieldPath::root().key("kind")
    );
    assert_eq!(docs[0].duplicate_keys[0].line, 7);
}

#[test]
fn streams_are_read_from_any_reader() {
    let input = b"apiVersion: v1\nkind: Namespace\nmetadata: {name: rdma}\n";
    let docs = manifest::read_from("<stdin>", &input[..]).expect("parses");
    assert_eq!(docs[0].describe(), "<stdin> doc 0 (Namespace rdma)");
    let err = manifest::read_from("<stdin>", &b"\xff\xfe"[..]).expect_err("not UTF-8");
    assert!(err.to_string().starts_with("<stdin>: not UTF-8"), "{err}");
}

#[test]
fn kubectl_lists_are_expanded_into_their_items() {
    let text = "apiVersion: v1\nkind: List\nmetadata: {resourceVersion: \"\"}\nitems:\n- apiVersion: v1\n  kind: Pod\n  metadata: {name: a}\n  spec:\n    hostNetwork: true\n- apiVersion: v1\n  kind: Service\n  metadata: {name: b}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n";
    let docs = manifest::parse_str("get.yaml", text).expect("parses");
    let labels: Vec<String> = docs
        .iter()
        .map(|d| format!("{} {}", d.index, d.label()))
        .collect();
    assert_eq!(labels, ["0 Pod a", "1 Service b", "2 ConfigMap c"]);
    assert_eq!(docs[0].line, Some(5));
    assert_eq!(docs[1].line, Some(10));
    assert_eq!(
        docs[0].line_of(&FieldPath::root().key("spec").key("hostNetwork")),
        Some(9)
    );
}
