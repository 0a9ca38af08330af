//! Pod specs inside any object: a Pod's `spec`, a Deployment's `spec.template.spec`, a RayCluster's
//! head and worker groups, an MPIJob's replica specs, any CRD embedding `template.spec`. Shared by
//! `validate` (cross-references the API server checks) and `lint` (RDMA pitfalls).

use serde_json::{Map, Value};

use crate::manifest::{FieldPath, PathSeg};

/// A pod spec found in a document.
pub(crate) struct PodSpecAt<'d> {
    /// Path of the pod spec (the object holding `containers`).
    pub(crate) path: FieldPath,
    /// The pod spec.
    pub(crate) spec: &'d Map<String, Value>,
    /// The object holding `replicas` and `template` (a worker group, a replica spec), when the
    /// spec sits at `<holder>.template.spec`.
    pub(crate) holder: Option<(FieldPath, &'d Map<String, Value>)>,
}

/// Every object with a `containers` list in `root`, outermost first (a pod spec is not searched
/// for further pod specs).
pub(crate) fn pod_specs(root: &Value) -> Vec<PodSpecAt<'_>> {
    fn walk<'d>(v: &'d Value, path: FieldPath, root: &'d Value, out: &mut Vec<PodSpecAt<'d>>) {
        match v {
            Value::Object(m) if m.get("containers").is_some_and(Value::is_array) => {
                let segs = path.segments();
                let holder = if segs.len() >= 2
                    && matches!(&segs[segs.len() - 1], PathSeg::Key(k) if k == "spec")
                    && matches!(&segs[segs.len() - 2], PathSeg::Key(k) if k == "template")
                {
                    let hp = FieldPath::from_segments(segs[..segs.len() - 2].to_vec());
                    hp.lookup(root).and_then(Value::as_object).map(|h| (hp, h))
                } else {
                    None
                };
                out.push(PodSpecAt {
                    path,
                    spec: m,
                    holder,
                });
            }
            Value::Object(m) => {
                for (k, child) in m {
                    walk(child, path.key(k), root, out);
                }
            }
            Value::Array(a) => {
                for (i, child) in a.iter().enumerate() {
                    walk(child, path.index(i), root, out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(root, FieldPath::root(), root, &mut out);
    out
}

/// `(index, name)` of each named entry of the list `key` in `obj` (containers, volumes, claims).
pub(crate) fn named_entries<'d>(obj: &'d Map<String, Value>, key: &str) -> Vec<(usize, &'d str)> {
    obj.get(key)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .enumerate()
                .filter_map(|(i, e)| Some((i, e.get("name")?.as_str()?)))
                .collect()
        })
        .unwrap_or_default()
}
