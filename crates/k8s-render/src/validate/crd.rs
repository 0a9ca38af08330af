//! The vendored CRD schemas (`schemas/`: KubeRay's RayCluster, the MPI Operator's MPIJob) and the
//! served versions of any CRD: parsed once per process, descriptions dropped.

use std::sync::OnceLock;

use serde_json::Value;

use super::ValidateError;

/// A vendored CRD file (see `schemas/README.md` for source, version and licence).
pub(super) struct BuiltinCrd {
    pub(super) file: &'static str,
    pub(super) group: &'static str,
    pub(super) kind: &'static str,
    /// Served versions, listed here so that naming the supported kinds needs no parsing; a test
    /// checks them against the file.
    pub(super) versions: &'static [&'static str],
    pub(super) text: &'static str,
}

pub(super) const BUILTIN_CRDS: [BuiltinCrd; 2] = [
    BuiltinCrd {
        file: "ray.io_rayclusters.yaml",
        group: "ray.io",
        kind: "RayCluster",
        versions: &["v1", "v1alpha1"],
        text: include_str!("../../schemas/ray.io_rayclusters.yaml"),
    },
    BuiltinCrd {
        file: "kubeflow.org_mpijobs.yaml",
        group: "kubeflow.org",
        kind: "MPIJob",
        versions: &["v2beta1"],
        text: include_str!("../../schemas/kubeflow.org_mpijobs.yaml"),
    },
];

/// One served version of a custom resource.
#[derive(Debug, Clone)]
pub(super) struct CrdVersion {
    pub(super) api_version: String,
    pub(super) kind: String,
    pub(super) schema: Value,
}

pub(super) fn crd_versions(crd: &Value) -> Result<Vec<CrdVersion>, String> {
    let spec = crd.get("spec").ok_or("no spec")?;
    let group = spec
        .get("group")
        .and_then(Value::as_str)
        .ok_or("no spec.group")?;
    let kind = spec
        .pointer("/names/kind")
        .and_then(Value::as_str)
        .ok_or("no spec.names.kind")?;
    let versions = spec
        .get("versions")
        .and_then(Value::as_array)
        .ok_or("no spec.versions")?;
    let mut out = Vec::new();
    for v in versions {
        if v.get("served").and_then(Value::as_bool) != Some(true) {
            continue;
        }
        let name = v
            .get("name")
            .and_then(Value::as_str)
            .ok_or("a version without name")?;
        let schema = v
            .pointer("/schema/openAPIV3Schema")
            .ok_or_else(|| format!("version {name} has no schema.openAPIV3Schema"))?;
        out.push(CrdVersion {
            api_version: format!("{group}/{name}"),
            kind: kind.to_owned(),
            schema: schema.clone(),
        });
    }
    if out.is_empty() {
        return Err("no served version".to_owned());
    }
    Ok(out)
}

/// Drops `description:` texts from a controller-gen CRD before parsing: they are most of the
/// file and the validator never reads them. A description is a key with a scalar on its line
/// (`description: text`, `description: |-`) plus every deeper-indented line after it; a property
/// *named* `description` has nothing after the colon and is kept.
fn strip_descriptions(text: &str) -> String {
    let mut out = String::with_capacity(text.len() / 3);
    let mut skip_deeper_than: Option<usize> = None;
    for line in text.lines() {
        let body = line.trim_start_matches(' ');
        let indent = line.len() - body.len();
        if let Some(limit) = skip_deeper_than {
            if body.is_empty() || indent > limit {
                continue;
            }
            skip_deeper_than = None;
        }
        if let Some(rest) = body.strip_prefix("description:") {
            let rest = rest.trim();
            if !rest.is_empty() && !rest.starts_with(['{', '[', '&', '*', '#']) {
                skip_deeper_than = Some(indent);
                continue;
            }
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Parses one vendored CRD, once per process, on first use.
pub(super) fn load_builtin(index: usize) -> Result<&'static [CrdVersion], ValidateError> {
    static LOADED: [OnceLock<Result<Vec<CrdVersion>, String>>; 2] =
        [OnceLock::new(), OnceLock::new()];
    let crd = &BUILTIN_CRDS[index];
    let loaded = LOADED[index].get_or_init(|| {
        let value: Value =
            serde_saphyr::from_str(&strip_descriptions(crd.text)).map_err(|e| e.to_string())?;
        crd_versions(&value)
    });
    match loaded {
        Ok(v) => Ok(v),
        Err(message) => Err(ValidateError::BuiltinSchema {
            file: crd.file,
            message: message.clone(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn without_descriptions(v: &mut Value) {
        match v {
            Value::Object(m) => {
                m.retain(|k, x| !(k == "description" && x.is_string()));
                m.values_mut().for_each(without_descriptions);
            }
            Value::Array(a) => a.iter_mut().for_each(without_descriptions),
            _ => {}
        }
    }

    #[test]
    fn stripping_descriptions_keeps_every_schema_field() {
        for crd in &BUILTIN_CRDS {
            let mut full: Value = serde_saphyr::from_str(crd.text).expect("vendored CRD parses");
            without_descriptions(&mut full);
            let stripped: Value =
                serde_saphyr::from_str(&strip_descriptions(crd.text)).expect("stripped parses");
            assert!(
                full == stripped,
                "{}: stripping changed the schema",
                crd.file
            );
            let served: Vec<String> = crd_versions(&stripped)
                .expect("served versions")
                .iter()
                .map(|v| v.api_version.clone())
                .collect();
            let listed: Vec<String> = crd
                .versions
                .iter()
                .map(|v| format!("{}/{v}", crd.group))
                .collect();
            assert_eq!(served, listed, "{}", crd.file);
        }
    }
}
