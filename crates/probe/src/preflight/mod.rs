//! Whole-cluster preflight: the data model the CLI fills from the Kubernetes API (nodes, and
//! facts from inside pods), and the verdict logic over it.

mod dra;
mod pods;
mod vke;
mod workers;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::facts::{HostFacts, LimitValue};
use crate::verdict::{Check, Verdict};

pub use dra::{
    DraDevice, DraSelection, LackingDevice, SelectorGap, SelectorTerm, device_class_checks,
    dra_selector_gaps, parse_cel_selector, parse_device_class, parse_resource_slices,
    select_devices,
};
pub use pods::{POD_PROBE_COMMAND, POD_PROBE_SCRIPT, PodProbeOutput, parse_pod_probe};
pub use vke::vke_rdma_kubelet_problem;
pub use workers::{WorkerFit, WorkerNeeds, worker_fit};

/// A node as the Kubernetes API reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    /// Node name.
    pub name: String,
    /// `status.capacity` (resource name → quantity string).
    pub capacity: BTreeMap<String, String>,
    /// `status.allocatable`.
    pub allocatable: BTreeMap<String, String>,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// `Ready` condition is True.
    pub ready: bool,
    /// `spec.unschedulable`.
    pub unschedulable: bool,
    /// RDMA devices published for this node through DRA ResourceSlices (dranet: `dra.net/rdma`).
    #[serde(default)]
    pub dra_rdma_devices: Vec<String>,
}

impl NodeInfo {
    /// A node from the Kubernetes API's JSON (a `v1.Node` as `kubectl get node -o json` or a list item
    /// gives it). DRA devices are not part of a Node; the caller adds them from ResourceSlices.
    pub fn from_node(node: &serde_json::Value) -> NodeInfo {
        let text_map = |v: &serde_json::Value| -> BTreeMap<String, String> {
            v.as_object()
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                        .collect()
                })
                .unwrap_or_default()
        };
        let ready = node["status"]["conditions"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        });
        NodeInfo {
            name: node["metadata"]["name"].as_str().unwrap_or("?").to_owned(),
            capacity: text_map(&node["status"]["capacity"]),
            allocatable: text_map(&node["status"]["allocatable"]),
            labels: text_map(&node["metadata"]["labels"]),
            ready,
            unschedulable: node["spec"]["unschedulable"].as_bool().unwrap_or(false),
            dra_rdma_devices: Vec::new(),
        }
    }
}

/// Facts gathered inside one pod: from one exec of [`POD_PROBE_SCRIPT`]
/// ([`PodFacts::from_pod_probe`]) or from `rdmakit probe --json` run inside it
/// ([`PodFacts::from_host_facts`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodFacts {
    /// Namespace.
    pub namespace: String,
    /// Pod name.
    pub name: String,
    /// Node it runs on.
    pub node: Option<String>,
    /// Soft RLIMIT_MEMLOCK inside the container.
    pub memlock: Option<LimitValue>,
    /// CAP_IPC_LOCK effective.
    pub cap_ipc_lock: Option<bool>,
    /// Entries of `/dev/infiniband`.
    pub dev_infiniband: Vec<String>,
    /// RDMA device names visible.
    pub rdma_devices: Vec<String>,
    /// The NCCL that Python loads.
    pub nccl_version: Option<String>,
    /// What the pod spec requests for RDMA (`aliyun/erdma=1`, `claim:rdma-net`); empty when
    /// nothing (or not known).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requested_rdma: Vec<String>,
    /// Facts the exec could not read, with the reason.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unreadable: Vec<String>,
}

impl PodFacts {
    /// Summarise probe results from inside a pod.
    pub fn from_host_facts(namespace: &str, name: &str, node: Option<&str>, f: &HostFacts) -> Self {
        Self {
            namespace: namespace.to_string(),
            name: name.to_string(),
            node: node.map(str::to_string),
            memlock: f.memlock.map(|m| m.soft),
            cap_ipc_lock: f.capabilities.map(|c| c.ipc_lock()),
            dev_infiniband: f.dev_infiniband.entries.clone(),
            rdma_devices: f.rdma_devices.iter().map(|d| d.name.clone()).collect(),
            nccl_version: f.effective_nccl().map(|n| n.version.to_string()),
            requested_rdma: Vec::new(),
            unreadable: Vec::new(),
        }
    }
}

/// Everything the CLI collected.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterSnapshot {
    /// Nodes.
    pub nodes: Vec<NodeInfo>,
    /// Pods probed.
    pub pods: Vec<PodFacts>,
}

/// What the workload needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreflightPolicy {
    /// GPU extended resources to count.
    pub gpu_resources: Vec<String>,
    /// RDMA extended resources to count.
    pub rdma_resources: Vec<String>,
    /// Nodes that must have both GPU and RDMA (2 for a cross-node transfer).
    pub min_nodes: usize,
    /// Worker replicas planned (hostNetwork allows one per node).
    pub workers: Option<usize>,
    /// Whether workers use hostNetwork.
    pub host_network: bool,
    /// Label that names the GPU model (shown; nodeSelectors often use it).
    pub gpu_model_label: String,
}

impl Default for PreflightPolicy {
    fn default() -> Self {
        Self {
            gpu_resources: vec!["nvidia.com/gpu".into(), "nvidia.com/gpu-h800".into()],
            rdma_resources: vec![
                "aliyun/erdma".into(),
                "rdma/rdma_shared_device_a".into(),
                "rdma/rdma_shared_device_b".into(),
                "rdma/hca_shared_devices_a".into(),
                "vke.volcengine.com/infiniband-rdma".into(),
                "vpc.amazonaws.com/efa".into(),
            ],
            min_nodes: 2,
            workers: None,
            host_network: true,
            gpu_model_label: "aliyun.accelerator/nvidia_name".into(),
        }
    }
}

/// One node's summary line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeSummary {
    /// Node name.
    pub name: String,
    /// GPUs (sum of the policy's GPU resources in capacity).
    pub gpus: u64,
    /// RDMA capacity (sum of RDMA resources, plus DRA devices).
    pub rdma: u64,
    /// Which RDMA resource names it has.
    pub rdma_resources: Vec<String>,
    /// GPU model label value.
    pub gpu_model: Option<String>,
    /// Ready, schedulable, with GPU and RDMA.
    pub eligible: bool,
}

/// Result of a preflight.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PreflightResult {
    /// Per-node summary (the table of the runbook's `kubectl get nodes -o custom-columns`).
    pub nodes: Vec<NodeSummary>,
    /// Judged checks.
    pub checks: Vec<Check>,
    /// Worst verdict.
    pub verdict: Verdict,
}

/// Parse a Kubernetes quantity as an integer count (`8`, `400`, `1k`, `2Ki`); `None` for
/// fractional or malformed values.
pub fn parse_quantity(q: &str) -> Option<u64> {
    let q = q.trim();
    let split = q.find(|c: char| !c.is_ascii_digit()).unwrap_or(q.len());
    let (num, suffix) = q.split_at(split);
    let n: u64 = num.parse().ok()?;
    let mult: u64 = match suffix {
        "" => 1,
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(mult)
}

/// Judge a cluster snapshot.
pub fn evaluate(snap: &ClusterSnapshot, policy: &PreflightPolicy) -> PreflightResult {
    let mut checks = Vec::new();
    let mut nodes = Vec::new();
    for n in &snap.nodes {
        let sum = |names: &[String]| -> (u64, Vec<String>) {
            let mut total = 0u64;
            let mut found = Vec::new();
            for r in names {
                if let Some(v) = n.capacity.get(r).and_then(|q| parse_quantity(q))
                    && v > 0
                {
                    total = total.saturating_add(v);
                    found.push(r.clone());
                }
            }
            (total, found)
        };
        let (gpus, _) = sum(&policy.gpu_resources);
        let (mut rdma, mut rdma_resources) = sum(&policy.rdma_resources);
        if !n.dra_rdma_devices.is_empty() {
            rdma = rdma.saturating_add(n.dra_rdma_devices.len() as u64);
            rdma_resources.push("dra:dra.net/rdma".into());
        }
        let eligible = gpus > 0 && rdma > 0 && n.ready && !n.unschedulable;
        let model = n.labels.get(&policy.gpu_model_label).cloned();
        let summary = format!(
            "GPU {gpus}, RDMA {rdma}{}",
            model
                .as_deref()
                .map(|m| format!(", {m}"))
                .unwrap_or_default()
        );
        let check = if eligible {
            Check::new("node-capacity", n.name.clone(), Verdict::Ok, summary)
        } else if gpus > 0 && rdma == 0 {
            Check::new("node-capacity", n.name.clone(), Verdict::Warn, format!("{summary}: GPU node without RDMA capacity"))
                .with_fix("Check the RDMA device plugin on this node (eRDMA: the alibabacloud-erdma-agent pod; the erdma kernel module often fails to load after a kernel upgrade) and that eRDMA is enabled on the instance.")
        } else if gpus > 0 && !n.ready {
            Check::new(
                "node-capacity",
                n.name.clone(),
                Verdict::Warn,
                format!("{summary}: node not Ready"),
            )
        } else if gpus > 0 && n.unschedulable {
            Check::new(
                "node-capacity",
                n.name.clone(),
                Verdict::Info,
                format!("{summary}: cordoned"),
            )
        } else {
            Check::new(
                "node-capacity",
                n.name.clone(),
                Verdict::Info,
                format!("{summary}: not a GPU+RDMA node"),
            )
        };
        if gpus > 0 || rdma > 0 {
            checks.push(check);
        }
        nodes.push(NodeSummary {
            name: n.name.clone(),
            gpus,
            rdma,
            rdma_resources,
            gpu_model: model,
            eligible,
        });
    }
    let eligible = nodes.iter().filter(|n| n.eligible).count();
    checks.push(if eligible >= policy.min_nodes {
        Check::new("rdma-gpu-nodes", "cluster", Verdict::Ok, format!("{eligible} node(s) report both GPU and RDMA capacity"))
    } else {
        Check::new(
            "rdma-gpu-nodes",
            "cluster",
            Verdict::Fail,
            format!("{eligible} node(s) report both GPU and RDMA capacity; {} needed for a cross-node transfer", policy.min_nodes),
        )
        .with_fix("Add RDMA-capable GPU nodes (eRDMA: ecs.ebmgn9gc.* / gn8is with eRDMA enabled) and install the RDMA device plugin (ack-erdma-controller reports aliyun/erdma).")
    });
    if let Some(w) = policy.workers
        && policy.host_network
        && w > eligible
    {
        checks.push(
            Check::new("worker-replicas", "cluster", Verdict::Fail, format!("{w} hostNetwork workers planned but only {eligible} eligible node(s): with hostNetwork each node runs at most one worker"))
                .with_fix(format!("Set the worker group's replicas to at most {eligible} (or add nodes).")),
        );
    }
    // Pods.
    let mut versions: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for p in &snap.pods {
        checks.extend(pods::pod_checks(p));
        if let Some(v) = &p.nccl_version {
            versions
                .entry(v.clone())
                .or_default()
                .push(format!("{}/{}", p.namespace, p.name));
        }
    }
    if versions.len() > 1 {
        let list: Vec<String> = versions
            .iter()
            .map(|(v, pods)| format!("{v} ({})", pods.join(", ")))
            .collect();
        checks.push(
            Check::new(
                "pod-nccl-mismatch",
                "cluster",
                Verdict::Warn,
                format!("pods load different NCCL versions: {}", list.join("; ")),
            )
            .with_fix("Run every rank from the same image."),
        );
    }
    let verdict = Verdict::worst(checks.iter().map(|c| c.verdict));
    PreflightResult {
        nodes,
        checks,
        verdict,
    }
}
