//! The check pods: the profile's rendered NCCL check pod (the workload's shape: resources or claims,
//! hostNetwork, capabilities, mounts, NCCL environment) pinned to each node, with the DRA objects it needs;
//! and the record of what was created, so that everything is deleted whatever happens.

use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use rdmakit::check::{LivePod, Rails};
use rdmakit::error::ExecError;
use rdmakit::exec::fanout::Fanout;
use rdmakit::exec::kube::KubeExecutor;
use rdmakit::exec::{Executor, ListSpec, Manifest, WaitFor, WaitSpec};
use serde_json::{Value, json};

use super::super::Failure;

/// The label every check pod of one run carries (its value: the run id).
pub const RUN_LABEL: &str = "rdmakit.io/check";

/// What every check pod is made from.
#[derive(Debug, Clone)]
pub struct Shape {
    /// The rendered pod (the profile's first NCCL check pod).
    pod: Value,
    /// The other objects it refers to (DeviceClass, ResourceClaimTemplate for DRA profiles).
    extra: Vec<Value>,
    /// The container the facts are read in.
    pub container: String,
    /// The profile's rails.
    pub devices: Rails,
}

impl Shape {
    /// Renders the profile's NCCL check pods and keeps the first as the template.
    pub fn render(
        profile: &k8s_render::Profile,
        values: &k8s_render::Values,
    ) -> Result<Shape, Failure> {
        let bundle =
            k8s_render::render(k8s_render::System::NcclCheck, profile, values).map_err(|e| {
                Failure::input(anyhow::anyhow!(
                    "rendering the check pods for {}: {e}",
                    profile.name
                ))
            })?;
        let mut pod = None;
        let mut extra = Vec::new();
        for (_, _, doc) in bundle.documents() {
            if doc["kind"] == "Pod" {
                pod.get_or_insert_with(|| doc.clone());
            } else {
                extra.push(doc.clone());
            }
        }
        let pod = pod.ok_or_else(|| {
            Failure::input(anyhow::anyhow!(
                "profile {}: the NCCL check renders no pod",
                profile.name
            ))
        })?;
        let container = pod["spec"]["containers"][0]["name"]
            .as_str()
            .unwrap_or("nccl-check")
            .to_owned();
        Ok(Shape {
            pod,
            extra,
            container,
            devices: Rails::new(
                profile.devices.name_pattern.clone(),
                profile.devices.exclude.clone(),
            ),
        })
    }

    /// The pod for `node`: the template renamed, labelled with the run, pinned by hostname (through the
    /// scheduler, so DRA claims are allocated), the spread-across-nodes affinity dropped.
    pub fn pod_for(&self, node: &str, index: usize, run_id: &str, namespace: &str) -> Value {
        let mut p = self.pod.clone();
        let name = format!("rdmakit-check-{run_id}-{index}");
        p["metadata"]["name"] = json!(name);
        p["metadata"]["namespace"] = json!(namespace);
        p["metadata"]["labels"] = json!({
            "app.kubernetes.io/name": "rdmakit-check",
            "app.kubernetes.io/managed-by": "rdmakit",
            RUN_LABEL: run_id,
        });
        if let Some(spec) = p["spec"].as_object_mut() {
            spec.remove("affinity");
            spec.insert("restartPolicy".into(), json!("Never"));
            let sel = spec.entry("nodeSelector").or_insert_with(|| json!({}));
            sel["kubernetes.io/hostname"] = json!(node);
        }
        p
    }

    /// Applies the DRA objects and one pod per node, waits until all are Ready, and reads them back.
    pub fn create(
        &self,
        exec: &KubeExecutor,
        nodes: &[String],
        run_id: &str,
        namespace: &str,
        created: &Created,
        limits: Limits,
    ) -> Result<(Vec<LivePod>, Vec<Stuck>), ExecError> {
        let Limits { ready, fanout } = limits;
        let t = Duration::from_secs(60);
        for o in &self.extra {
            let mut o = o.clone();
            let cluster_scoped = o["kind"] == "DeviceClass";
            if !cluster_scoped {
                o["metadata"]["namespace"] = json!(namespace);
            }
            let m = Manifest {
                display_path: format!("check {}", o["kind"].as_str().unwrap_or("object")),
                objects: vec![o],
            };
            // A DeviceClass someone else made stays; what we made goes at the end.
            let (applied, _present) = exec.apply_if_absent(&m, t)?;
            if !applied.is_empty() {
                created.push(m);
            }
        }
        // Recorded before they are applied (an interrupted create still deletes them); applied side by side.
        let manifests: Vec<Manifest> = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| Manifest {
                display_path: format!("check pod on {n}"),
                objects: vec![self.pod_for(n, i, run_id, namespace)],
            })
            .collect();
        for m in &manifests {
            created.push(m.clone());
        }
        let applied = fanout.run("create check pods", &manifests, |m| exec.apply(m, t));
        for (m, r) in manifests.iter().zip(applied) {
            match r {
                Some(r) => {
                    r?;
                }
                None => {
                    return Err(ExecError::Failed {
                        action: format!("apply {}", m.display_path),
                        message: "not applied: the overall deadline (--deadline) passed first"
                            .into(),
                    });
                }
            }
        }
        let selector = format!("{RUN_LABEL}={run_id}");
        let waited = exec.wait(&WaitSpec {
            what: WaitFor::PodsReady,
            kind: "Pod".into(),
            name: None,
            selector: Some(selector.clone()),
            expect: nodes.len(),
            namespace: Some(namespace.to_owned()),
            timeout: ready,
        });
        let listed = exec.list(&ListSpec {
            api_version: "v1".into(),
            kind: "Pod".into(),
            selector: Some(selector),
            namespace: Some(namespace.to_owned()),
            capture_var: None,
            expect: 0,
            columns: Vec::new(),
            timeout: t,
        })?;
        let ready = |p: &Value| {
            p["status"]["conditions"].as_array().is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            })
        };
        let (up, down): (Vec<&Value>, Vec<&Value>) = listed.iter().partition(|p| ready(p));
        // A pod that never became Ready is a finding about its node (the workload would not start there
        // either), not a reason to drop the nodes that worked; only a wait that failed with every pod fine
        // (the cluster itself) is an error.
        if let Err(e) = waited
            && down.is_empty()
        {
            return Err(e);
        }
        let stuck = down.into_iter().map(stuck).collect();
        let mut live: Vec<LivePod> = up.into_iter().map(|p| self.live(p)).collect();
        live.sort_by_key(|p| {
            nodes
                .iter()
                .position(|n| *n == p.node)
                .unwrap_or(usize::MAX)
        });
        Ok((live, stuck))
    }

    fn live(&self, p: &Value) -> LivePod {
        let s = |v: &Value| v.as_str().map(str::to_owned);
        let mut sidecars: Vec<String> = p["spec"]["containers"]
            .as_array()
            .into_iter()
            .flatten()
            .chain(
                p["spec"]["initContainers"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|c| c["restartPolicy"] == "Always"),
            )
            .filter_map(|c| c["name"].as_str())
            .filter(|n| *n != self.container)
            .map(str::to_owned)
            .collect();
        for key in ["sidecar.istio.io/status", "linkerd.io/proxy-version"] {
            if p["metadata"]["annotations"][key].is_string() {
                sidecars.push(format!("annotation {key}"));
            }
        }
        LivePod {
            name: s(&p["metadata"]["name"]).unwrap_or_default(),
            node: s(&p["spec"]["nodeName"]).unwrap_or_default(),
            ip: s(&p["status"]["podIP"]),
            sidecars,
        }
    }
}

/// How long the pods may take to become Ready, and how many are created at once.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub ready: Duration,
    pub fanout: Fanout,
}

/// A check pod that did not become Ready in time, and why (the scheduler's message, or its phase).
#[derive(Debug, Clone)]
pub struct Stuck {
    pub pod: String,
    pub node: String,
    pub why: String,
}

fn stuck(p: &Value) -> Stuck {
    let conds = p["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let unscheduled = conds
        .iter()
        .find(|c| c["type"] == "PodScheduled" && c["status"] == "False");
    let why = match unscheduled {
        Some(c) => format!(
            "not scheduled ({}): {}",
            c["reason"].as_str().unwrap_or("?"),
            c["message"].as_str().unwrap_or("")
        ),
        None => format!(
            "phase {}, not Ready",
            p["status"]["phase"].as_str().unwrap_or("unknown")
        ),
    };
    Stuck {
        pod: p["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        node: p["spec"]["nodeName"]
            .as_str()
            .or_else(|| p["spec"]["nodeSelector"]["kubernetes.io/hostname"].as_str())
            .unwrap_or("?")
            .to_owned(),
        why,
    }
}

/// The names of the nodes `selector` matches.
pub fn nodes_matching(exec: &KubeExecutor, selector: &str) -> Result<Vec<String>, ExecError> {
    Ok(exec
        .list(&ListSpec {
            api_version: "v1".into(),
            kind: "Node".into(),
            selector: Some(selector.to_owned()),
            namespace: None,
            capture_var: None,
            expect: 0,
            columns: Vec::new(),
            timeout: Duration::from_secs(60),
        })?
        .iter()
        .filter_map(|n| n["metadata"]["name"].as_str().map(str::to_owned))
        .collect())
}

/// A short id for this run's pods: time and process, base 36.
pub fn run_id() -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let mut n = t ^ (u64::from(std::process::id()) << 40);
    let mut s = String::new();
    for _ in 0..6 {
        let d = (n % 36) as u32;
        s.push(char::from_digit(d, 36).unwrap_or('0'));
        n /= 36;
    }
    s
}

/// What this run created, deleted newest first by [`Created::delete_all`].
#[derive(Debug)]
pub struct Created {
    exec: Arc<KubeExecutor>,
    cancel: rdmakit::cancel::Cancel,
    namespace: String,
    /// The label selector every check pod of this run matches.
    selector: String,
    made: Mutex<Vec<Manifest>>,
}

impl Created {
    pub fn new(
        exec: Arc<KubeExecutor>,
        cancel: rdmakit::cancel::Cancel,
        namespace: String,
        run_id: &str,
    ) -> Created {
        Created {
            exec,
            cancel,
            namespace,
            selector: format!("{RUN_LABEL}={run_id}"),
            made: Mutex::new(Vec::new()),
        }
    }

    fn push(&self, m: Manifest) {
        self.made.lock().unwrap_or_else(|p| p.into_inner()).push(m);
    }

    /// `Kind/name` of every object created.
    pub fn names(&self) -> Vec<String> {
        self.made
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .flat_map(|m| m.objects.iter())
            .map(|o| {
                format!(
                    "{}/{}",
                    o["kind"].as_str().unwrap_or("?"),
                    o["metadata"]["name"].as_str().unwrap_or("?")
                )
            })
            .collect()
    }

    /// Deletes everything (also after Ctrl-C: the executor's cancel is cleared for it); what could not be
    /// deleted is named with the command that deletes it.
    pub fn delete_all(&self) {
        self.cancel.clear();
        let made = std::mem::take(&mut *self.made.lock().unwrap_or_else(|p| p.into_inner()));
        // The pods side by side (one per node), then what they used (a DeviceClass), newest first.
        let (pods, rest): (Vec<&Manifest>, Vec<&Manifest>) = made
            .iter()
            .partition(|m| m.objects.iter().all(|o| o["kind"] == "Pod"));
        let t = Duration::from_secs(90);
        // The pods in one request (a DELETE on the collection by the run's label) and one watch until they
        // are gone; a user without `deletecollection` on pods gets them deleted one by one.
        let mut results: Vec<(&Manifest, Result<(), ExecError>)> = Vec::new();
        let together = if pods.is_empty() {
            Ok(0)
        } else {
            self.exec
                .delete_selected("v1", "Pod", &self.namespace, &self.selector, t)
        };
        match together {
            Ok(n) => tracing::info!(pods = n, "check pods deleted"),
            Err(ExecError::Rejected {
                code: 403 | 405, ..
            }) => {
                let fanout = Fanout::sized(pods.len(), None, None);
                let deleted = fanout.run("delete check pods", &pods, |m| self.exec.delete(m, t));
                results.extend(
                    pods.iter()
                        .zip(deleted)
                        .map(|(m, r)| (*m, r.unwrap_or(Ok(Vec::new())).map(drop))),
                );
            }
            Err(e) => eprintln!(
                "warning: could not delete the check pods in namespace {}: {e}; delete them with kubectl delete pods -n {} -l {}",
                self.namespace, self.namespace, self.selector
            ),
        }
        for m in rest.into_iter().rev() {
            results.push((m, self.exec.delete(m, t).map(drop)));
        }
        for (m, r) in results {
            if let Err(e) = r {
                eprintln!(
                    "warning: could not delete {} in namespace {}: {e}; delete it with kubectl delete -n {} {}",
                    m.display_path,
                    self.namespace,
                    self.namespace,
                    Created::kubectl_names(m)
                );
            }
        }
    }

    fn kubectl_names(m: &Manifest) -> String {
        m.objects
            .iter()
            .map(|o| {
                format!(
                    "{}/{}",
                    o["kind"].as_str().unwrap_or("?").to_lowercase(),
                    o["metadata"]["name"].as_str().unwrap_or("?")
                )
            })
            .collect::<Vec<_>>()
            .join(" ")
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// Every built-in profile's check pod keeps the workload's RDMA request, pinned to its node through the
    /// scheduler and labelled with the run; nothing of the two-pod spread survives.
    #[test]
    fn every_builtin_profile_makes_a_workload_shaped_check_pod() {
        for name in rdmakit::profiles::builtin_names() {
            let profile = rdmakit::profiles::load_builtin(name).unwrap();
            let mut values = k8s_render::Values::default();
            values.set("image", "registry.example.com/rdma:1").unwrap();
            let shape = Shape::render(&profile, &values)
                .unwrap_or_else(|e| panic!("{name}: {:#}", e.error));
            let p = shape.pod_for("node-7", 3, "abc123", "ns1");
            assert_eq!(p["metadata"]["name"], "rdmakit-check-abc123-3", "{name}");
            assert_eq!(p["metadata"]["namespace"], "ns1");
            assert_eq!(p["metadata"]["labels"][RUN_LABEL], "abc123");
            assert_eq!(
                p["spec"]["nodeSelector"]["kubernetes.io/hostname"], "node-7",
                "{name}"
            );
            assert!(p["spec"].get("affinity").is_none(), "{name}");
            assert!(
                p["spec"].get("nodeName").is_none(),
                "{name}: the scheduler must place it (DRA claims)"
            );
            let c = &p["spec"]["containers"][0];
            assert_eq!(c["name"].as_str(), Some(shape.container.as_str()));
            let res = &c["resources"];
            let asks_rdma = match &profile.rdma {
                k8s_render::profile::RdmaAttachment::DevicePlugin { resources } => {
                    resources.keys().all(|r| res["limits"].get(r).is_some())
                }
                k8s_render::profile::RdmaAttachment::Dra(_) => {
                    res["claims"].as_array().is_some_and(|a| !a.is_empty())
                        && shape
                            .extra
                            .iter()
                            .any(|o| o["kind"] == "ResourceClaimTemplate")
                }
            };
            assert!(
                asks_rdma,
                "{name}: the check pod lost the RDMA request: {c}"
            );
            assert!(
                shape
                    .devices
                    .selects(&profile.devices.name_pattern.example()),
                "{name}"
            );
        }
    }

    #[test]
    fn run_ids_are_label_values() {
        let id = run_id();
        assert_eq!(id.len(), 6);
        assert!(
            id.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit()),
            "{id}"
        );
    }
}
