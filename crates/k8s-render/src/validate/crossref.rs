//! Checks the API server and the operators make beyond the OpenAPI schema: references between
//! fields of one object (a volume mount names a volume, a container claim names a pod claim),
//! required fields the schema leaves optional (a container's `image`), enums the schema types as
//! plain strings (`hostPath.type`), and what KubeRay and the MPI Operator do with the spec
//! (unknown MPIJob replica types are ignored, worker replicas are clamped to min..max). The API
//! server accepts the last two; rdmakit refuses them because the job that runs is not the one written.

use serde_json::{Map, Value};

use crate::manifest::{Document, FieldPath, Severity};
use crate::pods::{PodSpecAt, named_entries, pod_specs};
use crate::validate::{ViolationKind, suggest};

/// One cross-reference problem.
pub(crate) struct Problem {
    pub(crate) path: FieldPath,
    pub(crate) kind: ViolationKind,
    pub(crate) severity: Severity,
    pub(crate) message: String,
}

fn error(path: FieldPath, kind: ViolationKind, message: String) -> Problem {
    Problem {
        path,
        kind,
        severity: Severity::Error,
        message,
    }
}

/// `HostPathType` values (`k8s.io/api/core/v1`); `""` means no check.
const HOST_PATH_TYPES: &[&str] = &[
    "",
    "DirectoryOrCreate",
    "Directory",
    "FileOrCreate",
    "File",
    "Socket",
    "CharDevice",
    "BlockDevice",
];

/// Replica types the MPI Operator v2beta1 acts on (`kubeflow.org/v2beta1` `MPIReplicaTypeLauncher`,
/// `MPIReplicaTypeWorker`); any other key is ignored by the controller.
const MPI_REPLICA_TYPES: &[&str] = &["Launcher", "Worker"];

/// Every cross-reference problem of one document; `strict` makes KubeRay's silent clamping an error.
pub(crate) fn check(doc: &Document, strict: bool) -> Vec<Problem> {
    let mut out = Vec::new();
    for pod in pod_specs(&doc.value) {
        check_pod(&pod, &mut out);
    }
    if doc.kind == "MPIJob" && doc.group() == "kubeflow.org" {
        check_mpijob(doc, &mut out);
    }
    if doc.kind == "RayCluster" && doc.group() == "ray.io" {
        check_ray_replicas(doc, strict, &mut out);
    }
    out
}

fn check_pod(pod: &PodSpecAt<'_>, out: &mut Vec<Problem>) {
    let volumes = named_entries(pod.spec, "volumes");
    let volume_names: Vec<&str> = volumes.iter().map(|(_, n)| *n).collect();
    let claims: Vec<&str> = named_entries(pod.spec, "resourceClaims")
        .into_iter()
        .map(|(_, n)| n)
        .collect();
    duplicates(pod.spec, "volumes", &pod.path, "volume", out);
    let mut container_names: Vec<(FieldPath, &str)> = Vec::new();
    for list in ["initContainers", "containers"] {
        let Some(items) = pod.spec.get(list).and_then(Value::as_array) else {
            continue;
        };
        for (i, c) in items.iter().enumerate() {
            let Some(c) = c.as_object() else { continue };
            let cpath = pod.path.key(list).index(i);
            let name = c.get("name").and_then(Value::as_str).unwrap_or("?");
            if let Some(prev) = container_names.iter().find(|(_, n)| *n == name) {
                out.push(error(
                    cpath.key("name"),
                    ViolationKind::InvalidValue,
                    format!(
                        "container name {name:?} is already used by {}: the API server rejects the pod (Duplicate value); give each container its own name",
                        prev.0
                    ),
                ));
            } else {
                container_names.push((cpath.clone(), name));
            }
            check_container(c, &cpath, name, &volume_names, &claims, out);
        }
    }
    let listed = pod.spec.get("volumes").and_then(Value::as_array);
    for (i, volume) in listed.into_iter().flatten().enumerate() {
        let vpath = pod.path.key("volumes").index(i);
        let Some(t) = volume.pointer("/hostPath/type").and_then(Value::as_str) else {
            continue;
        };
        if !HOST_PATH_TYPES.contains(&t) {
            let hint = closest(t, &HOST_PATH_TYPES[1..])
                .map(|c| format!("did you mean {c:?}? "))
                .unwrap_or_default();
            out.push(error(
                vpath.key("hostPath").key("type"),
                ViolationKind::InvalidValue,
                format!(
                    "{t:?} is not a HostPathType: {hint}use one of {} (or leave it empty for no check); the API server rejects the pod (Unsupported value)",
                    HOST_PATH_TYPES[1..].join(", ")
                ),
            ));
        }
    }
}

fn check_container(
    c: &Map<String, Value>,
    cpath: &FieldPath,
    name: &str,
    volumes: &[&str],
    claims: &[&str],
    out: &mut Vec<Problem>,
) {
    let image_set = c
        .get("image")
        .and_then(Value::as_str)
        .is_some_and(|s| !s.trim().is_empty());
    if !image_set {
        out.push(error(
            cpath.key("image"),
            ViolationKind::MissingRequired,
            format!(
                "container {name:?} has no image: the API server rejects the pod (Required value) and operators cannot create it; set image (e.g. rayproject/ray:2.57.0)"
            ),
        ));
    }
    for (i, mount) in named_entries(c, "volumeMounts") {
        if !volumes.contains(&mount) {
            let declared = if volumes.is_empty() {
                "the pod declares no volumes".to_owned()
            } else {
                let hint = suggest(mount, volumes.iter().copied())
                    .map(|v| format!("; did you mean {v:?}?"))
                    .unwrap_or_default();
                format!("declared: {}{hint}", volumes.join(", "))
            };
            out.push(error(
                cpath.key("volumeMounts").index(i).key("name"),
                ViolationKind::InvalidValue,
                format!(
                    "volumeMount {mount:?} names no volume of the pod ({declared}): the API server rejects the pod (Not found) and the pods an operator creates fail; add a volume named {mount:?} to the pod's volumes or fix the name"
                ),
            ));
        }
    }
    let Some(resources) = c.get("resources").and_then(Value::as_object) else {
        return;
    };
    for (i, claim) in named_entries(resources, "claims") {
        if !claims.contains(&claim) {
            out.push(error(
                cpath.key("resources").key("claims").index(i).key("name"),
                ViolationKind::InvalidValue,
                format!(
                    "container claim {claim:?} names no entry of the pod's resourceClaims: the API server rejects the pod (Not found); add `resourceClaims: [{{name: {claim}, resourceClaimTemplateName: <template>}}]` to the pod spec"
                ),
            ));
        }
    }
}

fn duplicates(
    obj: &Map<String, Value>,
    key: &str,
    base: &FieldPath,
    what: &str,
    out: &mut Vec<Problem>,
) {
    let entries = named_entries(obj, key);
    for (pos, (i, name)) in entries.iter().enumerate() {
        if let Some((first, _)) = entries[..pos].iter().find(|(_, n)| n == name) {
            out.push(error(
                base.key(key).index(*i).key("name"),
                ViolationKind::InvalidValue,
                format!(
                    "{what} name {name:?} is already used by {}: the API server rejects the pod (Duplicate value); rename or remove one",
                    base.key(key).index(*first)
                ),
            ));
        }
    }
}

fn check_mpijob(doc: &Document, out: &mut Vec<Problem>) {
    let specs = FieldPath::root().key("spec").key("mpiReplicaSpecs");
    let Some(map) = doc.get(&specs).and_then(Value::as_object) else {
        return;
    };
    for key in map.keys() {
        if MPI_REPLICA_TYPES.contains(&key.as_str()) {
            continue;
        }
        let hint = MPI_REPLICA_TYPES
            .iter()
            .copied()
            .find(|t| t.eq_ignore_ascii_case(key))
            .or_else(|| closest(key, MPI_REPLICA_TYPES))
            .map(|t| format!("did you mean {t:?}? "))
            .unwrap_or_default();
        // The API server accepts the key (the CRD's map is open); the operator ignores it, so the job is
        // not the one written: refused.
        out.push(error(
            specs.key(key),
            ViolationKind::InvalidValue,
            format!(
                "{key:?} is not an MPI replica type: {hint}the API server accepts it (the CRD's mpiReplicaSpecs is an open map), but the MPI Operator v0.7.0 acts only on Launcher and Worker (keys are case-sensitive) and ignores this one, so the job runs without these pods"
            ),
        ));
    }
}

fn check_ray_replicas(doc: &Document, strict: bool, out: &mut Vec<Problem>) {
    let groups = FieldPath::root().key("spec").key("workerGroupSpecs");
    let Some(list) = doc.get(&groups).and_then(Value::as_array) else {
        return;
    };
    for (i, g) in list.iter().enumerate() {
        let gpath = groups.index(i);
        let get = |k: &str| g.get(k).and_then(Value::as_i64);
        let (min, max) = (get("minReplicas").unwrap_or(0), get("maxReplicas"));
        if let Some(max) = max
            && min > max
        {
            out.push(error(
                gpath.key("minReplicas"),
                ViolationKind::InvalidValue,
                format!(
                    "minReplicas {min} is greater than maxReplicas {max}: the API server accepts the RayCluster, and KubeRay v1.5.1 logs \"minReplicas is greater than maxReplicas, using maxReplicas as desired replicas\" and runs {max} worker pod(s) whatever replicas says; make minReplicas <= maxReplicas"
                ),
            ));
            continue;
        }
        let Some(replicas) = get("replicas") else {
            continue;
        };
        let out_of_range = replicas < min || max.is_some_and(|m| replicas > m);
        if out_of_range {
            let max_text = max.map_or_else(|| "unbounded".to_owned(), |m| m.to_string());
            let clamped = replicas.max(min).min(max.unwrap_or(i64::MAX));
            out.push(Problem {
                path: gpath.key("replicas"),
                kind: ViolationKind::InvalidValue,
                severity: if strict {
                    Severity::Error
                } else {
                    Severity::Warning
                },
                message: format!(
                    "replicas {replicas} is outside minReplicas..maxReplicas ({min}..{max_text}): the API server accepts it, KubeRay v1.5.1 clamps it and runs {clamped} worker pod(s), not {replicas}; set replicas within the range or widen it"
                ),
            });
        }
    }
}

/// The known name closest to `word` ([`suggest`]), else the one `word` abbreviates (`Dir` for
/// `Directory`).
fn closest<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    suggest(word, candidates.iter().copied()).or_else(|| {
        let w = word.to_ascii_lowercase();
        candidates
            .iter()
            .copied()
            .filter(|c| w.len() >= 3 && c.to_ascii_lowercase().starts_with(&w))
            .min_by_key(|c| c.len())
    })
}
