//! Which nodes can take a worker that asks for GPUs, device-plugin resources and node labels: the check a
//! workflow makes before it deploys workers no scheduler could place.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::NodeInfo;

/// What one worker pod asks of its node. Every field may be left out of the JSON (a worker that asks
/// for one RDMA device and nothing else is `{"resources": {"aliyun/erdma": 1}}`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct WorkerNeeds {
    /// The GPU resource (`nvidia.com/gpu`); empty when the worker asks for no GPU.
    pub gpu_resource: String,
    /// GPUs per worker.
    pub gpus: u64,
    /// Device-plugin resources and counts (`vpc.amazonaws.com/efa: 32`).
    pub resources: BTreeMap<String, u64>,
    /// The node selector the workers carry.
    pub labels: BTreeMap<String, String>,
}

/// Nodes that can take a worker, and the GPU/RDMA nodes that cannot, with why.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerFit {
    /// `node (gpu=8, res=32)` for each node that has everything.
    pub fit: Vec<String>,
    /// The names of the nodes in `fit`, in the same order.
    #[serde(default)]
    pub fit_names: Vec<String>,
    /// `node: res 0 < 32; label k=v, want w` for each node of the workers' pool, or with any of the RDMA
    /// resources, that lacks something (a device plugin not running there, another instance type, fewer
    /// GPUs). Nodes with none of it (CPU nodes outside the pool) are not listed.
    pub unfit: Vec<String>,
}

/// A capacity as a count; 0 when absent or not a plain integer.
fn count(n: &NodeInfo, resource: &str) -> u64 {
    n.capacity
        .get(resource)
        .and_then(|q| q.trim().parse::<u64>().ok())
        .unwrap_or(0)
}

/// Judges every node against what a worker needs.
///
/// ```
/// use std::collections::BTreeMap;
/// use probe::preflight::{NodeInfo, WorkerNeeds, worker_fit};
/// let node = |name: &str, efa: &str| NodeInfo {
///     name: name.into(),
///     capacity: BTreeMap::from([("nvidia.com/gpu".into(), "8".into()), ("vpc.amazonaws.com/efa".into(), efa.into())]),
///     ..NodeInfo::default()
/// };
/// let needs = WorkerNeeds {
///     gpu_resource: "nvidia.com/gpu".into(),
///     gpus: 8,
///     resources: BTreeMap::from([("vpc.amazonaws.com/efa".into(), 32)]),
///     ..WorkerNeeds::default()
/// };
/// let f = worker_fit(&[node("a", "32"), node("b", "0")], &needs);
/// assert_eq!(f.fit, ["a (nvidia.com/gpu=8, vpc.amazonaws.com/efa=32)"]);
/// assert_eq!(f.unfit, ["b: vpc.amazonaws.com/efa 0 < 32"]);
/// ```
pub fn worker_fit(nodes: &[NodeInfo], needs: &WorkerNeeds) -> WorkerFit {
    let mut out = WorkerFit::default();
    for n in nodes {
        let g = count(n, &needs.gpu_resource);
        let mut why: Vec<String> = Vec::new();
        let mut have: Vec<String> = Vec::new();
        if !needs.gpu_resource.is_empty() {
            have.push(format!("{}={g}", needs.gpu_resource));
        }
        let mut rdma_any = false;
        for (r, want) in &needs.resources {
            let c = count(n, r);
            have.push(format!("{r}={c}"));
            rdma_any |= c > 0;
            if c < *want {
                why.push(format!("{r} {c} < {want}"));
            }
        }
        let mut labelled = true;
        for (k, want) in &needs.labels {
            let v = n.labels.get(k).map(String::as_str).unwrap_or("");
            if v != want {
                labelled = false;
                why.push(format!("label {k}={v}, want {want}"));
            }
        }
        if g < needs.gpus {
            why.push(format!("{} {g} < {}", needs.gpu_resource, needs.gpus));
        }
        if why.is_empty() {
            out.fit.push(format!("{} ({})", n.name, have.join(", ")));
            out.fit_names.push(n.name.clone());
        } else if rdma_any || (labelled && (!needs.labels.is_empty() || g > 0)) {
            out.unfit.push(format!("{}: {}", n.name, why.join("; ")));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, cap: &[(&str, &str)], labels: &[(&str, &str)]) -> NodeInfo {
        let m = |v: &[(&str, &str)]| {
            v.iter()
                .map(|(k, x)| ((*k).to_owned(), (*x).to_owned()))
                .collect()
        };
        NodeInfo {
            name: name.into(),
            capacity: m(cap),
            labels: m(labels),
            ..NodeInfo::default()
        }
    }

    #[test]
    fn fit_unfit_and_nodes_outside_the_pool() {
        let needs = WorkerNeeds {
            gpu_resource: "nvidia.com/gpu".into(),
            gpus: 8,
            resources: BTreeMap::from([("vpc.amazonaws.com/efa".into(), 32)]),
            labels: BTreeMap::from([(
                "node.kubernetes.io/instance-type".into(),
                "p5.48xlarge".into(),
            )]),
        };
        let it = ("node.kubernetes.io/instance-type", "p5.48xlarge");
        let f = worker_fit(
            &[
                node(
                    "ok",
                    &[("nvidia.com/gpu", "8"), ("vpc.amazonaws.com/efa", "32")],
                    &[it],
                ),
                // In the pool, the EFA plugin does not run there.
                node("no-efa", &[("nvidia.com/gpu", "8")], &[it]),
                // EFA devices but another instance type and fewer GPUs.
                node(
                    "other",
                    &[("nvidia.com/gpu", "4"), ("vpc.amazonaws.com/efa", "4")],
                    &[("node.kubernetes.io/instance-type", "p4d.24xlarge")],
                ),
                // A CPU node outside the pool: not the workers' business.
                node("cpu", &[("cpu", "16")], &[]),
                // A capacity that is no count counts as none.
                node(
                    "odd",
                    &[("nvidia.com/gpu", "8"), ("vpc.amazonaws.com/efa", "lots")],
                    &[it],
                ),
            ],
            &needs,
        );
        assert_eq!(f.fit, ["ok (nvidia.com/gpu=8, vpc.amazonaws.com/efa=32)"]);
        assert_eq!(f.fit_names, ["ok"]);
        assert_eq!(
            f.unfit,
            [
                "no-efa: vpc.amazonaws.com/efa 0 < 32",
                "other: vpc.amazonaws.com/efa 4 < 32; label node.kubernetes.io/instance-type=p4d.24xlarge, want p5.48xlarge; nvidia.com/gpu 4 < 8",
                "odd: vpc.amazonaws.com/efa 0 < 32",
            ]
        );
    }

    /// A worker that asks for one RDMA device and no GPU: the JSON names only that (what the workflows'
    /// capacity checks send), and the fit lists only what was asked for.
    #[test]
    fn needs_may_name_only_the_resources() -> serde_json::Result<()> {
        let needs: WorkerNeeds = serde_json::from_str(r#"{"resources": {"aliyun/erdma": 1}}"#)?;
        assert!(needs.gpu_resource.is_empty() && needs.gpus == 0 && needs.labels.is_empty());
        let f = worker_fit(
            &[
                node("rdma", &[("aliyun/erdma", "400")], &[]),
                node("gpu-only", &[("nvidia.com/gpu", "8")], &[]),
            ],
            &needs,
        );
        assert_eq!(f.fit, ["rdma (aliyun/erdma=400)"]);
        assert_eq!(f.fit_names, ["rdma"]);
        assert!(f.unfit.is_empty(), "{:?}", f.unfit);
        Ok(())
    }
}
