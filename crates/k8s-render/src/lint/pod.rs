//! What the rules read: each pod template of a document (wherever it sits), its containers, and
//! every environment variable a container sees, from `env` and from shell text in `command`/`args`.

use std::collections::BTreeSet;
use std::sync::OnceLock;

use regex::Regex;
use serde_json::{Map, Value};

use super::LintOptions;
use crate::manifest::{Document, FieldPath, PathSeg};

/// An environment variable as the container sees it.
#[derive(Clone, Debug)]
pub(super) struct EnvVar {
    pub(super) name: String,
    /// `None` for `valueFrom`.
    pub(super) value: Option<String>,
    pub(super) path: FieldPath,
    /// Exported to MPI ranks with `mpirun -x`.
    pub(super) mpi_export: bool,
}

pub(super) fn shell_env_re() -> Option<&'static Regex> {
    static RE: OnceLock<Option<Regex>> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(
            r#"(?:^|[\s;'"(])(-x\s+)?((?:NCCL|UCX|FI|OFI_NCCL)_[A-Z0-9_]+|LD_LIBRARY_PATH)=("[^"]*"|'[^']*'|[^\s;&|'"\\)]*)"#,
        )
        .ok()
    })
    .as_ref()
}

pub(super) fn container_env(c: &Map<String, Value>, cpath: &FieldPath) -> Vec<EnvVar> {
    let mut env = Vec::new();
    if let Some(list) = c.get("env").and_then(Value::as_array) {
        for (i, e) in list.iter().enumerate() {
            let Some(name) = e.get("name").and_then(Value::as_str) else {
                continue;
            };
            let value = match e.get("value") {
                Some(Value::String(s)) => Some(s.clone()),
                Some(Value::Null) | None => None,
                Some(other) => Some(other.to_string()),
            };
            env.push(EnvVar {
                name: name.to_owned(),
                value,
                path: cpath.key("env").index(i).key("value"),
                mpi_export: false,
            });
        }
    }
    for field in ["command", "args"] {
        let Some(list) = c.get(field).and_then(Value::as_array) else {
            continue;
        };
        for (i, s) in list.iter().enumerate() {
            let Some(s) = s.as_str() else { continue };
            let Some(re) = shell_env_re() else { continue };
            for cap in re.captures_iter(s) {
                let name = cap.get(2).map_or("", |m| m.as_str()).to_owned();
                let raw = cap.get(3).map_or("", |m| m.as_str());
                let value = raw.trim_matches(|ch| ch == '"' || ch == '\'').to_owned();
                env.push(EnvVar {
                    name,
                    value: Some(value),
                    path: cpath.key(field).index(i),
                    mpi_export: cap.get(1).is_some(),
                });
            }
        }
    }
    env
}

/// A container inside a pod template.
pub(super) struct Container<'d> {
    pub(super) path: FieldPath,
    pub(super) name: String,
    pub(super) obj: &'d Map<String, Value>,
    pub(super) env: Vec<EnvVar>,
}

impl Container<'_> {
    pub(super) fn resources(&self, which: &str) -> Vec<(&str, &Value)> {
        self.obj
            .get("resources")
            .and_then(|r| r.get(which))
            .and_then(Value::as_object)
            .map(|m| m.iter().map(|(k, v)| (k.as_str(), v)).collect())
            .unwrap_or_default()
    }

    pub(super) fn resource_names(&self) -> BTreeSet<&str> {
        self.resources("limits")
            .into_iter()
            .chain(self.resources("requests"))
            .map(|(k, _)| k)
            .collect()
    }

    pub(super) fn claims(&self) -> Vec<(usize, &str)> {
        self.obj
            .get("resources")
            .and_then(|r| r.get("claims"))
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .enumerate()
                    .filter_map(|(i, c)| c.get("name").and_then(Value::as_str).map(|n| (i, n)))
                    .collect()
            })
            .unwrap_or_default()
    }

    pub(super) fn security(&self) -> Option<&Map<String, Value>> {
        self.obj.get("securityContext").and_then(Value::as_object)
    }

    pub(super) fn privileged(&self) -> bool {
        self.security()
            .and_then(|s| s.get("privileged"))
            .and_then(Value::as_bool)
            == Some(true)
    }

    /// The capabilities `securityContext.capabilities.add` lists.
    fn added_capabilities(&self) -> impl Iterator<Item = &str> {
        self.security()
            .and_then(|s| s.get("capabilities"))
            .and_then(|c| c.get("add"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
    }

    pub(super) fn has_ipc_lock(&self) -> bool {
        self.names_ipc_lock() || self.added_capabilities().any(|c| c == "ALL")
    }

    /// Names IPC_LOCK itself (not `ALL`, which a debug container may add for anything).
    pub(super) fn names_ipc_lock(&self) -> bool {
        self.added_capabilities()
            .any(|c| c.eq_ignore_ascii_case("IPC_LOCK") || c.eq_ignore_ascii_case("CAP_IPC_LOCK"))
    }

    /// Requests a device or huge pages the linter has no name for: an extended resource that is not
    /// a GPU, or `hugepages-*` (DPDK and mlock users add IPC_LOCK too).
    pub(super) fn requests_other_device(&self) -> bool {
        self.resource_names().iter().any(|r| {
            let plain = matches!(*r, "cpu" | "memory" | "ephemeral-storage");
            !plain && !is_gpu_resource(r)
        })
    }

    pub(super) fn mounts(&self) -> Vec<(&str, &str)> {
        self.obj
            .get("volumeMounts")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|m| {
                        Some((
                            m.get("mountPath")?.as_str()?.trim_end_matches('/'),
                            m.get("name")?.as_str()?,
                        ))
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    pub(super) fn env_value(&self, name: &str) -> Option<&EnvVar> {
        // The last definition wins, as in a shell and in Kubernetes env lists.
        self.env.iter().rev().find(|e| e.name == name)
    }

    pub(super) fn has_nccl_env(&self) -> bool {
        self.env.iter().any(|e| e.name.starts_with("NCCL_"))
    }
}

/// A pod template found in a document.
pub(super) struct PodSite<'d> {
    pub(super) path: FieldPath,
    pub(super) spec: &'d Map<String, Value>,
    /// Path of the object that holds `replicas` and `template` (a worker group, a replica spec).
    pub(super) holder: Option<(FieldPath, &'d Map<String, Value>)>,
    pub(super) containers: Vec<Container<'d>>,
}

impl<'d> PodSite<'d> {
    pub(super) fn new(
        path: FieldPath,
        spec: &'d Map<String, Value>,
        holder: Option<(FieldPath, &'d Map<String, Value>)>,
    ) -> Self {
        let containers = spec
            .get("containers")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .enumerate()
                    .filter_map(|(i, c)| {
                        let obj = c.as_object()?;
                        let cpath = path.key("containers").index(i);
                        Some(Container {
                            name: obj
                                .get("name")
                                .and_then(Value::as_str)
                                .unwrap_or("?")
                                .to_owned(),
                            env: container_env(obj, &cpath),
                            path: cpath,
                            obj,
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        Self {
            path,
            spec,
            holder,
            containers,
        }
    }

    pub(super) fn flag(&self, key: &str) -> bool {
        self.spec.get(key).and_then(Value::as_bool) == Some(true)
    }

    pub(super) fn pod_claims(&self) -> Vec<(usize, &str, Option<&str>)> {
        self.spec
            .get("resourceClaims")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .enumerate()
                    .filter_map(|(i, c)| {
                        let name = c.get("name")?.as_str()?;
                        let tmpl = c
                            .get("resourceClaimTemplateName")
                            .or_else(|| c.get("resourceClaimName"))
                            .and_then(Value::as_str);
                        Some((i, name, tmpl))
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    pub(super) fn is_ray_head(&self) -> bool {
        self.path.contains_key("headGroupSpec")
    }

    pub(super) fn role(&self) -> String {
        if let Some((_, h)) = &self.holder
            && let Some(g) = h.get("groupName").and_then(Value::as_str)
        {
            return format!("worker group {g:?}");
        }
        if self.is_ray_head() {
            return "Ray head".to_owned();
        }
        let segs = self.path.segments();
        // mpiReplicaSpecs.Worker.template.spec → "Worker"
        if segs.len() >= 3
            && let PathSeg::Key(k) = &segs[segs.len() - 3]
            && segs.len() >= 4
            && matches!(&segs[segs.len() - 4], PathSeg::Key(p) if p.ends_with("ReplicaSpecs"))
        {
            return format!("{k} replicas");
        }
        "pod".to_owned()
    }

    /// `(replicas, maxReplicas)` as declared (or defaulted for single pods / Deployments).
    pub(super) fn replicas(&self, doc_kind: &str) -> (Option<i64>, Option<i64>) {
        match &self.holder {
            Some((_, h)) => (
                h.get("replicas").and_then(Value::as_i64),
                h.get("maxReplicas").and_then(Value::as_i64),
            ),
            None if doc_kind == "Pod" => (Some(1), None),
            None => (None, None),
        }
    }
}

/// Finds every pod spec (an object with a `containers` list) in a document.
pub(super) fn find_pods<'d>(doc: &'d Document) -> Vec<PodSite<'d>> {
    crate::pods::pod_specs(&doc.value)
        .into_iter()
        .map(|p| PodSite::new(p.path, p.spec, p.holder))
        .collect()
}

pub(super) fn is_rdma_resource(name: &str, options: &LintOptions) -> bool {
    let lower = name.to_ascii_lowercase();
    lower.contains("rdma")
        || lower.contains("infiniband")
        || lower.starts_with("mellanox.com/")
        || lower == "vpc.amazonaws.com/efa"
        || options.extra_rdma_resources.iter().any(|r| r == name)
}

pub(super) fn is_rdma_claim(name: &str, template: Option<&str>) -> bool {
    [Some(name), template].into_iter().flatten().any(|n| {
        let l = n.to_ascii_lowercase();
        l.contains("rdma") || l.contains("infiniband") || l.contains("roce") || l.contains("hca")
    })
}

pub(super) fn is_gpu_resource(name: &str) -> bool {
    let l = name.to_ascii_lowercase();
    l.starts_with("nvidia.com/gpu") || l.starts_with("amd.com/gpu") || l.contains("mgpu")
}
