//! What the API server checks beyond the schema on labels, node selectors and data sizes: label keys
//! and values by `k8s.io/apimachinery/pkg/util/validation` (`IsQualifiedName`, `IsValidLabelValue`),
//! node selectors likewise (`ValidatePodSpec` runs label validation on them), and the 1 MiB limit on a
//! ConfigMap's or Secret's data (`corev1.MaxSecretSize`).
//!
//! The API server runs these checks on core kinds only; inside a custom resource (a RayCluster's or an
//! MPIJob's pod template) it accepts any string, and the operator's pod create is what fails, after
//! the object was accepted. The messages say which of the two refuses.

use serde_json::Value;

use super::ViolationKind;
use crate::manifest::{Document, FieldPath};
use crate::pods::pod_specs;
use crate::values::grammar;

/// `corev1.MaxSecretSize`: the most bytes a ConfigMap's `data` + `binaryData` or a Secret's `data`
/// (after `stringData` is merged) may hold.
pub(crate) const MAX_DATA_BYTES: usize = 1024 * 1024;

/// One problem found here (always an error: the object or its pods are refused).
pub(crate) struct LabelProblem {
    pub(crate) path: FieldPath,
    pub(crate) kind: ViolationKind,
    pub(crate) message: String,
}

/// Why `value` is not a label value, or `None` when it is one.
pub(crate) fn label_value_error(value: &str) -> Option<String> {
    if grammar::is_label_value(value) {
        return None;
    }
    Some(if value.len() > 63 {
        format!("must be no more than 63 characters (has {})", value.len())
    } else {
        "a label value must be empty or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue', 'my_value' or '12345')".to_owned()
    })
}

/// Why `key` is not a label key (`[prefix/]name`), or `None` when it is one.
pub(crate) fn label_key_error(key: &str) -> Option<String> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix
        && !grammar::is_dns_subdomain(p)
    {
        return Some(format!(
            "prefix {p:?} must be a DNS subdomain: lower-case letters, digits, '-' and '.', at most 253 characters (e.g. example.com)"
        ));
    }
    if grammar::is_label_name(name) {
        return None;
    }
    Some(format!(
        "name part {name:?} must be 1 to 63 characters of alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric character, with an optional DNS subdomain prefix and '/' (e.g. 'MyName' or 'example.com/MyName')"
    ))
}

/// Checks one `key: value` map of labels (or a node selector) at `path`.
fn check_map(map: &Value, path: &FieldPath, what: &str, who: &str, out: &mut Vec<LabelProblem>) {
    let Some(map) = map.as_object() else { return };
    for (k, v) in map {
        let at = path.key(k);
        if let Some(why) = label_key_error(k) {
            out.push(LabelProblem {
                path: at.clone(),
                kind: ViolationKind::InvalidValue,
                message: format!("{what} key {k:?} is not a label key: {why}; {who}"),
            });
        }
        if let Some(s) = v.as_str()
            && let Some(why) = label_value_error(s)
        {
            out.push(LabelProblem {
                path: at,
                kind: ViolationKind::InvalidValue,
                message: format!("{what} value {s:?} is not a label value: {why}; {who}"),
            });
        }
    }
}

/// Who refuses a bad label at `path` of `doc`: the API server itself, or (inside a custom resource's
/// pod template, which the API server does not look into) the operator's pod create.
fn refuser(doc: &Document, path: &FieldPath) -> &'static str {
    let core = !doc.api_version.contains('/')
        || [
            "apps/",
            "batch/",
            "resource.k8s.io/",
            "apiextensions.k8s.io/",
        ]
        .iter()
        .any(|g| doc.api_version.starts_with(g));
    if core || path == &FieldPath::root().key("metadata").key("labels") {
        "the API server rejects the object (Invalid value)"
    } else {
        "the API server accepts this custom resource (it does not validate embedded pod templates), but the pods the operator creates from it are rejected (Invalid value), so none starts"
    }
}

/// Label keys and values of the object and of every pod template in it, and node selectors.
pub(crate) fn check_labels(doc: &Document) -> Vec<LabelProblem> {
    let mut out = Vec::new();
    let labels = FieldPath::root().key("metadata").key("labels");
    if let Some(map) = doc.get(&labels) {
        check_map(map, &labels, "label", refuser(doc, &labels), &mut out);
    }
    for pod in pod_specs(&doc.value) {
        // `<template>.spec` holds the pod spec, `<template>.metadata.labels` its labels (a Pod's own
        // labels, at the root, were checked above).
        if let Some(template) = pod.path.parent().filter(|t| t != &FieldPath::root()) {
            let tl = template.key("metadata").key("labels");
            if let Some(map) = doc.get(&tl) {
                check_map(map, &tl, "pod label", refuser(doc, &tl), &mut out);
            }
        }
        if let Some(sel) = pod.spec.get("nodeSelector") {
            let sp = pod.path.key("nodeSelector");
            check_map(sel, &sp, "nodeSelector", refuser(doc, &sp), &mut out);
        }
    }
    out
}

/// Bytes a base64 string decodes to (the API server counts decoded bytes).
fn decoded_len(b64: &str) -> usize {
    let s = b64.trim_end();
    let pad = s.bytes().rev().take_while(|&b| b == b'=').count();
    (s.len() / 4) * 3 + [0, 0, 1, 2][s.len() % 4] - pad.min(2)
}

/// A ConfigMap's or Secret's data over [`MAX_DATA_BYTES`].
pub(crate) fn check_data_size(doc: &Document) -> Option<LabelProblem> {
    let obj = doc.value.as_object()?;
    let str_len = |k: &str, f: fn(&str) -> usize| -> Vec<(String, usize)> {
        obj.get(k)
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(key, v)| Some((key.clone(), f(v.as_str()?))))
                    .collect()
            })
            .unwrap_or_default()
    };
    let (fields, sizes): (&str, Vec<(String, usize)>) =
        match (doc.api_version.as_str(), doc.kind.as_str()) {
            ("v1", "ConfigMap") => (
                "data + binaryData",
                [
                    str_len("data", str::len),
                    str_len("binaryData", decoded_len),
                ]
                .concat(),
            ),
            ("v1", "Secret") => {
                // stringData is merged into data before validation; its keys replace data's.
                let mut merged: std::collections::BTreeMap<String, usize> =
                    str_len("data", decoded_len).into_iter().collect();
                merged.extend(str_len("stringData", str::len));
                ("data + stringData", merged.into_iter().collect())
            }
            _ => return None,
        };
    let total: usize = sizes.iter().map(|(_, n)| n).sum();
    let at = ["data", "binaryData", "stringData"]
        .into_iter()
        .find(|k| obj.contains_key(*k))
        .map_or_else(FieldPath::root, |k| FieldPath::root().key(k));
    if total <= MAX_DATA_BYTES {
        return None;
    }
    let mut largest = sizes;
    largest.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
    let named: Vec<String> = largest
        .iter()
        .take(3)
        .map(|(k, n)| format!("{k} {n} bytes"))
        .collect();
    Some(LabelProblem {
        path: at,
        kind: ViolationKind::InvalidValue,
        message: format!(
            "{} {fields} hold {total} bytes, over the API server's limit of {MAX_DATA_BYTES} bytes (1 MiB; largest: {}): the API server rejects it (Too long); mount large files from a volume or image instead",
            doc.kind,
            named.join(", ")
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_follow_the_api_servers_grammar() {
        for ok in ["", "a", "rdma", "My_value.1-2", &"x".repeat(63)] {
            assert_eq!(label_value_error(ok), None, "{ok:?}");
        }
        for bad in ["bar; baz", "-a", "a-", "a b", "é", &"x".repeat(64)] {
            assert!(label_value_error(bad).is_some(), "{bad:?}");
        }
        assert!(
            label_value_error(&"x".repeat(64))
                .unwrap()
                .contains("no more than 63")
        );
    }

    #[test]
    fn label_keys_have_an_optional_dns_prefix() {
        for ok in [
            "app",
            "rdma.alibaba.com/erdma",
            "kubernetes.io/hostname",
            "a_b.c",
        ] {
            assert_eq!(label_key_error(ok), None, "{ok:?}");
        }
        for bad in [
            "",
            "/a",
            "Example.com/a",
            "a/b/c",
            "a b",
            "x/-y",
            &"k".repeat(64),
        ] {
            assert!(label_key_error(bad).is_some(), "{bad:?}");
        }
    }

    #[test]
    fn base64_lengths_decode_like_the_api_server_counts() {
        assert_eq!(decoded_len(""), 0);
        assert_eq!(decoded_len("YQ=="), 1);
        assert_eq!(decoded_len("YWI="), 2);
        assert_eq!(decoded_len("YWJj"), 3);
        assert_eq!(decoded_len("YWJjZA"), 4);
    }
}
