//! `rdmakit preflight`: is this cluster ready for RDMA GPU jobs? Nodes with GPU and RDMA capacity for the
//! profile (device-plugin resources or DRA devices from ResourceSlices), the DRANET pods, and the APIs the
//! workflows need, judged by `probe::preflight` and printed as a table or JSON.

use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use probe::preflight::{
    ClusterSnapshot, NodeInfo, PreflightPolicy, evaluate, parse_resource_slices,
};
use probe::{Check, Verdict};
use rdmakit::cancel::Cancel;
use rdmakit::error::ExecError;
use rdmakit::exec::kube::{Connection, KubeExecutor};
use rdmakit::exec::{Executor, ListSpec};
use serde_json::Value;

use super::{CmdResult, Failure, Global, code};

/// `rdmakit preflight` arguments.
#[derive(Debug, Args)]
pub struct PreflightArgs {
    /// Vendor profile whose GPU and RDMA resources count (default: every known resource name).
    #[arg(short, long)]
    pub profile: Option<String>,
    /// Nodes that must have both GPU and RDMA.
    #[arg(long, default_value_t = 2)]
    pub nodes: usize,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// The APIs the shipped workflows use, and how to get each.
const APIS: [(&str, &str, &str); 3] = [
    ("ray.io/v1", "RayCluster", "install the KubeRay operator"),
    (
        "kubeflow.org/v2beta1",
        "MPIJob",
        "install the MPI Operator v0.7.0",
    ),
    (
        "resource.k8s.io/v1",
        "DeviceClass",
        "Kubernetes 1.34+ with DRA (resource.k8s.io/v1)",
    ),
];

fn policy_for(a: &PreflightArgs) -> Result<(PreflightPolicy, bool), Failure> {
    let mut policy = PreflightPolicy {
        min_nodes: a.nodes,
        ..PreflightPolicy::default()
    };
    let Some(name) = &a.profile else {
        return Ok((policy, false));
    };
    let p = rdmakit::profiles::load(name).map_err(|e| Failure::input(anyhow::anyhow!("{e}")))?;
    policy.gpu_resources = vec![p.gpu_resource.clone()];
    policy.host_network = p.pod.host_network;
    if let Some(label) = p.node_selector.keys().next() {
        policy.gpu_model_label = label.clone();
    }
    let dra = match &p.rdma {
        k8s_render::profile::RdmaAttachment::DevicePlugin { resources } => {
            policy.rdma_resources = resources.keys().cloned().collect();
            false
        }
        k8s_render::profile::RdmaAttachment::Dra(_) => {
            policy.rdma_resources = Vec::new();
            true
        }
    };
    Ok((policy, dra))
}

fn node_info(n: &Value) -> NodeInfo {
    let map = |v: &Value| {
        v.as_object()
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                    .collect()
            })
            .unwrap_or_default()
    };
    let ready = n["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    });
    NodeInfo {
        name: n["metadata"]["name"].as_str().unwrap_or("?").to_owned(),
        capacity: map(&n["status"]["capacity"]),
        allocatable: map(&n["status"]["allocatable"]),
        labels: map(&n["metadata"]["labels"]),
        ready,
        unschedulable: n["spec"]["unschedulable"].as_bool().unwrap_or(false),
        dra_rdma_devices: Vec::new(),
    }
}

fn list(
    exec: &KubeExecutor,
    api_version: &str,
    kind: &str,
    selector: Option<&str>,
    ns: Option<&str>,
) -> Result<Vec<Value>, ExecError> {
    exec.list(&ListSpec {
        api_version: api_version.into(),
        kind: kind.into(),
        selector: selector.map(str::to_owned),
        namespace: ns.map(str::to_owned),
        capture_var: None,
        expect: 0,
        columns: Vec::new(),
        timeout: Duration::from_secs(60),
    })
}

/// A cluster error, naming the server and context it came from.
fn at(conn: &Connection) -> impl Fn(ExecError) -> Failure + '_ {
    move |e| Failure::cluster(anyhow::Error::new(e).context(format!("cluster {conn}")))
}

/// Runs the preflight against the cluster of the kubeconfig/context.
pub fn preflight(global: &Global, a: PreflightArgs) -> CmdResult {
    let (policy, dra) = policy_for(&a)?;
    let runtime = super::runtime()?;
    let conn = super::connect_client(global, &runtime, "check --kubeconfig and --context")?;
    let exec = Arc::new(KubeExecutor::new(
        conn.client.clone(),
        runtime.handle().clone(),
        Cancel::new(),
    ));

    let mut apis = Vec::new();
    for (gv, kind, fix) in APIS {
        let served = exec
            .has_api(gv, kind, Duration::from_secs(30))
            .map_err(at(&conn))?;
        apis.push(Check {
            id: "api-served".into(),
            subject: format!("{gv} {kind}"),
            verdict: if served { Verdict::Ok } else { Verdict::Info },
            summary: if served {
                "served".into()
            } else {
                "not served".into()
            },
            fix: (!served).then(|| fix.to_owned()),
        });
    }

    let mut nodes: Vec<NodeInfo> = list(&exec, "v1", "Node", None, None)
        .map_err(at(&conn))?
        .iter()
        .map(node_info)
        .collect();
    let mut extra = Vec::new();
    if dra {
        let slices =
            list(&exec, "resource.k8s.io/v1", "ResourceSlice", None, None).map_err(at(&conn))?;
        let text = serde_json::json!({ "items": slices }).to_string();
        let devices =
            parse_resource_slices(&text).map_err(|e| Failure::cluster(anyhow::anyhow!("{e}")))?;
        for d in devices.iter().filter(|d| {
            d.attributes
                .get("dra.net/rdma")
                .is_some_and(|v| v == "true")
        }) {
            if let Some(n) = nodes.iter_mut().find(|n| n.name == d.node) {
                n.dra_rdma_devices.push(d.name.clone());
            }
        }
        let pods = list(
            &exec,
            "v1",
            "Pod",
            Some("k8s-app=dranet"),
            Some("kube-system"),
        )
        .map_err(at(&conn))?;
        let ready = pods
            .iter()
            .filter(|p| {
                p["status"]["conditions"].as_array().is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
                })
            })
            .count();
        extra.push(Check {
            id: "dranet-pods".into(),
            subject: "kube-system pods k8s-app=dranet".into(),
            verdict: if !pods.is_empty() && ready == pods.len() { Verdict::Ok } else { Verdict::Fail },
            summary: format!("{ready}/{} Ready", pods.len()),
            fix: (pods.is_empty() || ready < pods.len()).then(|| {
                "install or repair DRANET: kubectl apply -f https://raw.githubusercontent.com/kubernetes-sigs/dranet/refs/heads/main/install.yaml".to_owned()
            }),
        });
    }
    let mut result = evaluate(
        &ClusterSnapshot {
            nodes,
            pods: Vec::new(),
        },
        &policy,
    );
    result.checks.extend(extra);
    result.checks.extend(apis);
    result.verdict = result
        .checks
        .iter()
        .map(|c| c.verdict)
        .max()
        .unwrap_or(Verdict::Ok);

    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&result).unwrap_or_default()
        );
    } else {
        println!(
            "{:<28} {:>5} {:>6}  {:<32} {:<36} eligible",
            "NODE", "GPUS", "RDMA", "RDMA RESOURCES", "MODEL"
        );
        for n in &result.nodes {
            println!(
                "{:<28} {:>5} {:>6}  {:<32} {:<36} {}",
                n.name,
                n.gpus,
                n.rdma,
                n.rdma_resources.join(","),
                n.gpu_model.as_deref().unwrap_or("-"),
                if n.eligible { "yes" } else { "no" }
            );
        }
        println!();
        for c in &result.checks {
            let fix = c
                .fix
                .as_deref()
                .map(|f| format!(" — {f}"))
                .unwrap_or_default();
            println!(
                "{:<5} {} ({}): {}{fix}",
                format!("{:?}", c.verdict).to_uppercase(),
                c.id,
                c.subject,
                c.summary
            );
        }
    }
    Ok(if result.verdict == Verdict::Fail {
        code::FINDINGS
    } else {
        code::OK
    })
}
