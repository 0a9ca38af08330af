//! The parallel readers (`validate::Stream::push_text`, `lint::lint_stream`) give what the sequential
//! reader gives, document by document: same violations and findings (document numbers included), same
//! document count, the same first parse error, for streams long enough to be split among threads, with a
//! `List`, null and empty documents shifting the numbering, a CRD learnt mid-stream, and unknown kinds.

use k8s_render::lint::{self, LintOptions};
use k8s_render::manifest;
use k8s_render::validate::{Stream, ValidateOptions};

fn fixture(dir: &str, name: &str) -> String {
    let path = format!("{}/tests/fixtures/{dir}/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(path).expect("fixture reads")
}

/// The fixtures, each several times, with documents that shift the numbering between them.
fn long_stream(with_crd: bool, broken_at: Option<usize>) -> String {
    let mut parts: Vec<String> = Vec::new();
    for name in [
        "ray-cluster-erdma.yaml",
        "ray-cluster-typos.yaml",
        "raycluster-shared-device.yaml",
        "dranet-mpijob.yaml",
        "vke-rdma-pod.yaml",
    ] {
        parts.push(fixture("check", name));
    }
    for name in [
        "duplicate-key.yaml",
        "pod-unknown-field-typo.yaml",
        "nodeselector-bad-value.yaml",
        "ray-num-gpus-integer.yaml",
        "volume-mount-without-volume.yaml",
    ] {
        parts.push(fixture("broken", name));
    }
    let list = "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: a}\n  data: {x: \"1\"}\n- apiVersion: v1\n  kind: Namespace\n  metadata: {name: B}\n";
    let unknown =
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\nspec: {size: 3}\n";
    let crd = "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: widgets.example.com}\nspec:\n  group: example.com\n  names: {kind: Widget, plural: widgets}\n  scope: Namespaced\n  versions:\n  - name: v1\n    served: true\n    storage: true\n    schema:\n      openAPIV3Schema:\n        type: object\n        properties:\n          spec:\n            type: object\n            properties:\n              size: {type: string}\n";
    let mut out = String::new();
    for round in 0..12 {
        for (i, p) in parts.iter().enumerate() {
            out.push_str(p);
            if !p.ends_with('\n') {
                out.push('\n');
            }
            out.push_str("---\n");
            match (round + i) % 4 {
                0 => out.push_str(list),
                1 => out.push_str("# only a comment\n"),
                2 => out.push_str("~\n"),
                _ => out.push_str(unknown),
            }
            out.push_str("---\n");
        }
        if with_crd && round == 5 {
            out.push_str(crd);
            out.push_str("---\n");
        }
        if broken_at == Some(round) {
            out.push_str("apiVersion: v1\nkind: Pod\nmetadata: [unclosed\n---\n");
        }
    }
    out
}

fn sequential_validate(text: &str) -> (usize, Vec<String>, Option<String>) {
    let mut s = Stream::new(ValidateOptions::default());
    let mut err = None;
    for d in manifest::documents("s.yaml", text) {
        match d {
            Ok(d) => s.push(&d),
            Err(e) => err = Some(e.to_string()),
        }
    }
    let n = s.documents();
    (
        n,
        s.finish().iter().map(|v| format!("{v:?}")).collect(),
        err,
    )
}

fn parallel_validate(text: &str) -> (usize, Vec<String>, Option<String>) {
    let mut s = Stream::new(ValidateOptions::default());
    let err = s.push_text("s.yaml", text).map(|e| e.to_string());
    let n = s.documents();
    (
        n,
        s.finish().iter().map(|v| format!("{v:?}")).collect(),
        err,
    )
}

#[test]
fn push_text_validates_like_pushing_each_document() {
    for (crd, broken) in [
        (false, None),
        (true, None),
        (true, Some(7)),
        (false, Some(0)),
    ] {
        let text = long_stream(crd, broken);
        let seq = sequential_validate(&text);
        assert_eq!(seq.2.is_some(), broken.is_some());
        assert!(broken.is_some() || seq.0 > 100, "only {} documents", seq.0);
        assert_eq!(
            parallel_validate(&text),
            seq,
            "crd {crd}, broken {broken:?}"
        );
    }
}

#[test]
fn lint_stream_lints_like_linting_each_document() {
    let options = LintOptions::default();
    for broken in [None, Some(3)] {
        let text = long_stream(true, broken);
        let mut documents = 0;
        let mut findings = Vec::new();
        let mut err = None;
        for d in manifest::documents("s.yaml", &text) {
            match d {
                Ok(d) => {
                    documents += 1;
                    findings.extend(lint::lint(std::slice::from_ref(&d), &options));
                }
                Err(e) => err = Some(e.to_string()),
            }
        }
        let got = lint::lint_stream("s.yaml", &text, &options);
        assert_eq!(got.documents, documents);
        assert!(!findings.is_empty());
        assert_eq!(got.findings, findings);
        assert_eq!(got.error.map(|e| e.to_string()), err);
    }
}
