//! `rdmakit preflight`: is this cluster ready for RDMA GPU jobs? Nodes with GPU and RDMA capacity for the
//! profile (device-plugin resources or DRA devices from ResourceSlices), the DRANET pods, the profile's
//! DeviceClass against the published devices, facts from inside selected pods (`--pods`: memlock,
//! CAP_IPC_LOCK, device files, NCCL), and the APIs the workflows need, judged by `probe::preflight` and
//! printed as a table or JSON.

mod pods;

use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use probe::preflight::{
    ClusterSnapshot, DraDevice, NodeInfo, PreflightPolicy, device_class_checks, dra_selector_gaps,
    evaluate, parse_device_class, parse_resource_slices,
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
    /// Also probe the Running pods this label selector matches (one exec each, 30 s limit): locked
    /// memory, CAP_IPC_LOCK, /dev/infiniband, the RDMA devices and NCCL, beside what each pod requests.
    #[arg(long, value_name = "SELECTOR")]
    pub pods: Option<String>,
    /// Namespace of the --pods (default: -n, else the kubeconfig context's namespace).
    #[arg(long, value_name = "NAMESPACE", requires = "pods")]
    pub pods_namespace: Option<String>,
    /// Pods probed at once (default: an eighth of the pods, between 8 and 64).
    #[arg(long, value_name = "N", requires = "pods")]
    pub parallel: Option<usize>,
    /// Stop starting pod probes after this many seconds; the pods left are reported as not probed.
    #[arg(long, value_name = "SECONDS", default_value_t = 600)]
    pub deadline: u64,
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

/// What the profile says about how pods get RDMA.
enum Attachment {
    /// Device-plugin resources (or no profile: every known resource name).
    DevicePlugin,
    /// DRA: the DeviceClass the profile's claims use.
    Dra { device_class: String },
}

fn policy_for(a: &PreflightArgs) -> Result<(PreflightPolicy, Attachment), Failure> {
    let mut policy = PreflightPolicy {
        min_nodes: a.nodes,
        ..PreflightPolicy::default()
    };
    let Some(name) = &a.profile else {
        return Ok((policy, Attachment::DevicePlugin));
    };
    let p = rdmakit::profiles::load(name).map_err(|e| Failure::input(anyhow::anyhow!("{e}")))?;
    policy.gpu_resources = vec![p.gpu_resource.clone()];
    policy.host_network = p.pod.host_network;
    if let Some(label) = p.node_selector.keys().next() {
        policy.gpu_model_label = label.clone();
    }
    let attachment = match &p.rdma {
        k8s_render::profile::RdmaAttachment::DevicePlugin { resources } => {
            policy.rdma_resources = resources.keys().cloned().collect();
            Attachment::DevicePlugin
        }
        k8s_render::profile::RdmaAttachment::Dra(d) => {
            policy.rdma_resources = Vec::new();
            Attachment::Dra {
                device_class: d.device_class.clone(),
            }
        }
    };
    Ok((policy, attachment))
}

fn node_info(n: &Value) -> NodeInfo {
    NodeInfo::from_node(n)
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

/// The DRANET pods in kube-system: all Ready, or a fail naming how to install DRANET.
fn dranet_pods(exec: &KubeExecutor, conn: &Connection) -> Result<Check, Failure> {
    let pods = list(
        exec,
        "v1",
        "Pod",
        Some("k8s-app=dranet"),
        Some("kube-system"),
    )
    .map_err(at(conn))?;
    let ready = pods
        .iter()
        .filter(|p| {
            p["status"]["conditions"].as_array().is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            })
        })
        .count();
    Ok(Check {
        id: "dranet-pods".into(),
        subject: "kube-system pods k8s-app=dranet".into(),
        verdict: if !pods.is_empty() && ready == pods.len() { Verdict::Ok } else { Verdict::Fail },
        summary: format!("{ready}/{} Ready", pods.len()),
        fix: (pods.is_empty() || ready < pods.len()).then(|| {
            "install or repair DRANET: kubectl apply -f https://raw.githubusercontent.com/kubernetes-sigs/dranet/refs/heads/main/install.yaml".to_owned()
        }),
    })
}

/// The profile's DeviceClass against the devices the ResourceSlices publish. With the class in the cluster,
/// a node counts only the devices every selector of the class accepts (a device DRANET publishes but the
/// class rejects cannot be allocated), the class is judged against all devices (`dra-device-class`, naming
/// the attribute no device carries), and so is each node that publishes devices of which the class takes
/// none (subject `DeviceClass NAME on NODE`). Without it (the dranet-nccl-tests workflow applies it), nodes
/// count the devices with `dra.net/rdma`, and an info says the class is not there yet.
fn dra_checks(
    profile: &str,
    device_class: &str,
    class: Option<Value>,
    devices: &[DraDevice],
    nodes: &mut [NodeInfo],
) -> Result<Vec<Check>, Failure> {
    let Some(mut obj) = class else {
        let mut by_node = by_node(devices);
        for n in nodes.iter_mut() {
            n.dra_rdma_devices = by_node
                .remove(n.name.as_str())
                .unwrap_or_default()
                .into_iter()
                .filter(|d| {
                    d.attributes
                        .get("dra.net/rdma")
                        .is_some_and(|v| v == "true")
                })
                .map(|d| d.name.clone())
                .collect();
        }
        return Ok(vec![Check::new(
            "dra-device-class",
            format!("DeviceClass {device_class}"),
            Verdict::Info,
            "not in the cluster: RDMA devices counted by dra.net/rdma; the DeviceClass selectors are checked once it exists",
        )
        .with_fix(format!(
            "the dranet-nccl-tests workflow applies it; to check it now: rdmakit render dra --profile {profile} --stdout | kubectl apply -f -"
        ))]);
    };
    // A List's items carry no kind of their own.
    if let Some(m) = obj.as_object_mut() {
        m.entry("kind").or_insert_with(|| "DeviceClass".into());
        m.entry("apiVersion")
            .or_insert_with(|| "resource.k8s.io/v1".into());
    }
    let (name, selectors) = parse_device_class(&obj.to_string())
        .map_err(|e| Failure::cluster(anyhow::anyhow!("DeviceClass {device_class}: {e}")))?;
    let selected =
        |d: &DraDevice| dra_selector_gaps(&selectors, std::slice::from_ref(d)).is_empty();
    let mut checks = device_class_checks(&name, &selectors, devices);
    let mut by_node = by_node(devices);
    for n in nodes.iter_mut() {
        let own: Vec<DraDevice> = by_node
            .remove(n.name.as_str())
            .unwrap_or_default()
            .into_iter()
            .cloned()
            .collect();
        n.dra_rdma_devices = own
            .iter()
            .filter(|d| selected(d))
            .map(|d| d.name.clone())
            .collect();
        if !own.is_empty() && n.dra_rdma_devices.is_empty() {
            checks.extend(
                device_class_checks(&name, &selectors, &own)
                    .into_iter()
                    .filter(|c| c.verdict != Verdict::Ok)
                    .map(|mut c| {
                        c.subject = format!("DeviceClass {name} on {}", n.name);
                        c
                    }),
            );
        }
    }
    Ok(checks)
}

/// The devices of each node, in their order: one pass, so a thousand nodes with eight NICs each cost
/// eight thousand steps rather than eight million.
fn by_node(devices: &[DraDevice]) -> std::collections::HashMap<&str, Vec<&DraDevice>> {
    let mut m: std::collections::HashMap<&str, Vec<&DraDevice>> = std::collections::HashMap::new();
    for d in devices {
        m.entry(d.node.as_str()).or_default().push(d);
    }
    m
}

/// Runs the preflight against the cluster of the kubeconfig/context.
pub fn preflight(global: &Global, a: PreflightArgs) -> CmdResult {
    let runtime = super::runtime()?;
    let conn = super::connect_client(global, &runtime, "check --kubeconfig and --context")?;
    let exec = Arc::new(KubeExecutor::new(
        conn.client.clone(),
        runtime.handle().clone(),
        Cancel::new(),
    ));
    let (result, snapshot) = evaluate_cluster(global, &exec, &conn, &a)?;
    print_result(&a, &result, &snapshot);
    Ok(if result.verdict == Verdict::Fail {
        code::FINDINGS
    } else {
        code::OK
    })
}

/// The judged state of the cluster (nodes, DRA, DRANET, APIs, and the `--pods` facts), as `rdmakit
/// preflight` prints it and `rdmakit check` starts from it.
pub(super) fn evaluate_cluster(
    global: &Global,
    exec: &Arc<KubeExecutor>,
    conn: &Connection,
    a: &PreflightArgs,
) -> Result<(probe::preflight::PreflightResult, ClusterSnapshot), Failure> {
    let (policy, attachment) = policy_for(a)?;
    let exec = exec.clone();
    let mut apis = Vec::new();
    for (gv, kind, fix) in APIS {
        let served = exec
            .has_api(gv, kind, Duration::from_secs(30))
            .map_err(at(conn))?;
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
        .map_err(at(conn))?
        .iter()
        .map(node_info)
        .collect();
    let mut extra = Vec::new();
    if let Attachment::Dra { device_class } = &attachment {
        let slices =
            list(&exec, "resource.k8s.io/v1", "ResourceSlice", None, None).map_err(at(conn))?;
        let text = serde_json::json!({ "items": slices }).to_string();
        let devices =
            parse_resource_slices(&text).map_err(|e| Failure::cluster(anyhow::anyhow!("{e}")))?;
        let classes =
            list(&exec, "resource.k8s.io/v1", "DeviceClass", None, None).map_err(at(conn))?;
        let class = classes
            .into_iter()
            .find(|c| c["metadata"]["name"] == device_class.as_str());
        extra.extend(dra_checks(
            a.profile.as_deref().unwrap_or_default(),
            device_class,
            class,
            &devices,
            &mut nodes,
        )?);
        extra.push(dranet_pods(&exec, conn)?);
    }
    let mut pods = Vec::new();
    if let Some(selector) = &a.pods {
        let ns = a
            .pods_namespace
            .clone()
            .or_else(|| global.namespace.clone())
            .unwrap_or_else(|| conn.client.default_namespace().to_owned());
        let listed = list(&exec, "v1", "Pod", Some(selector), Some(&ns)).map_err(at(conn))?;
        extra.extend(pods::selection_checks(selector, &ns, &listed));
        let targets: Vec<pods::Target> = listed
            .iter()
            .filter(|p| p["status"]["phase"] == "Running")
            .filter_map(|p| pods::target(p, &policy.rdma_resources))
            .collect();
        let fanout = rdmakit::exec::fanout::Fanout::sized(
            targets.len(),
            a.parallel,
            Some(Duration::from_secs(a.deadline)),
        );
        pods = pods::probe_all(&*exec, &targets, &fanout);
    }
    let snapshot = ClusterSnapshot { nodes, pods };
    let mut result = evaluate(&snapshot, &policy);
    result.checks.extend(extra);
    result.checks.extend(apis);
    result.verdict = result
        .checks
        .iter()
        .map(|c| c.verdict)
        .max()
        .unwrap_or(Verdict::Ok);
    Ok((result, snapshot))
}

fn print_result(
    a: &PreflightArgs,
    result: &probe::preflight::PreflightResult,
    snapshot: &ClusterSnapshot,
) {
    if a.json {
        // The judged result, plus what was read inside each probed pod (`pods`, with --pods).
        let mut v = serde_json::to_value(result).unwrap_or_default();
        if a.pods.is_some()
            && let Some(m) = v.as_object_mut()
        {
            m.insert(
                "pods".into(),
                serde_json::to_value(&snapshot.pods).unwrap_or_default(),
            );
        }
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
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
        if a.pods.is_some() && !snapshot.pods.is_empty() {
            println!();
            println!(
                "{:<40} {:<28} {:>10} {:>8}  {:<20} {:<8} REQUESTS",
                "POD", "NODE", "MEMLOCK", "IPC_LOCK", "RDMA DEVICES", "NCCL"
            );
            for p in &snapshot.pods {
                let memlock = match p.memlock {
                    Some(probe::facts::LimitValue::Unlimited) => "unlimited".to_owned(),
                    Some(probe::facts::LimitValue::Bytes(b)) => probe::units::human_bytes(b),
                    None => "?".to_owned(),
                };
                println!(
                    "{:<40} {:<28} {:>10} {:>8}  {:<20} {:<8} {}",
                    format!("{}/{}", p.namespace, p.name),
                    p.node.as_deref().unwrap_or("-"),
                    memlock,
                    p.cap_ipc_lock.map_or("?", |c| if c { "yes" } else { "no" }),
                    if p.rdma_devices.is_empty() {
                        "-".to_owned()
                    } else {
                        p.rdma_devices.join(",")
                    },
                    p.nccl_version.as_deref().unwrap_or("-"),
                    if p.requested_rdma.is_empty() {
                        "-".to_owned()
                    } else {
                        p.requested_rdma.join(",")
                    },
                );
            }
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
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// Seed 002's DeviceClass as a List item (no `kind`), `kubectl get deviceclass -o json` shape.
    fn seed_class() -> Value {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../probe/tests/fixtures");
        let mut v: Value = serde_json::from_str(
            &std::fs::read_to_string(dir.join("deviceclass-erdma.json")).unwrap(),
        )
        .unwrap();
        let m = v.as_object_mut().unwrap();
        m.remove("kind");
        m.remove("apiVersion");
        v
    }

    /// DRANET's devices on a node (tests/cluster/fixtures/dranet.yaml); `erdma: false` drops
    /// `alibaba.dra.net/erdma` (fault-slice-without-erdma.yaml).
    fn devices(node: &str, erdma: bool) -> Vec<DraDevice> {
        let mut nic: std::collections::BTreeMap<String, String> = [
            ("dra.net/rdma", "true"),
            ("dra.net/rdmaDevice", "erdma_0"),
            ("alibaba.dra.net/instanceType", "ecs.gn8is-2x.8xlarge"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        if erdma {
            nic.insert("alibaba.dra.net/erdma".into(), "true".into());
        }
        vec![
            DraDevice {
                node: node.into(),
                driver: "dra.net".into(),
                name: "erdma-0".into(),
                attributes: nic,
            },
            DraDevice {
                node: node.into(),
                driver: "dra.net".into(),
                name: "eth0".into(),
                attributes: [("dra.net/rdma".to_owned(), "false".to_owned())].into(),
            },
        ]
    }

    fn nodes() -> Vec<NodeInfo> {
        ["a", "b"]
            .map(|n| NodeInfo {
                name: n.into(),
                ..NodeInfo::default()
            })
            .to_vec()
    }

    /// `dra_checks` on nodes a and b, b's device with or without `alibaba.dra.net/erdma`, with or without
    /// seed 002's class in the cluster.
    fn judged(class: bool, b_erdma: bool) -> (Vec<Check>, Vec<NodeInfo>) {
        let mut ns = nodes();
        let mut devs = devices("a", true);
        devs.extend(devices("b", b_erdma));
        let class = class.then(seed_class);
        let cs = dra_checks("p", "erdma.alibaba.dra.net", class, &devs, &mut ns).unwrap();
        (cs, ns)
    }

    #[test]
    fn without_the_device_class_devices_count_by_dra_net_rdma_and_an_info_says_so() {
        let (cs, ns) = judged(false, false);
        assert_eq!(cs.len(), 1);
        assert_eq!(
            (cs[0].id.as_str(), cs[0].verdict),
            ("dra-device-class", Verdict::Info)
        );
        assert!(
            cs[0]
                .fix
                .as_deref()
                .unwrap()
                .contains("render dra --profile p")
        );
        assert_eq!(ns[0].dra_rdma_devices, ["erdma-0"]);
        assert_eq!(ns[1].dra_rdma_devices, ["erdma-0"]);
    }

    #[test]
    fn a_node_whose_devices_the_class_rejects_counts_none_and_names_the_attribute() {
        let (cs, ns) = judged(true, false);
        assert_eq!(ns[0].dra_rdma_devices, ["erdma-0"]);
        assert!(ns[1].dra_rdma_devices.is_empty(), "{:?}", ns[1]);
        // Cluster-wide the class still finds a device (on a); node b gets its own fail.
        assert_eq!(cs[0].subject, "DeviceClass erdma.alibaba.dra.net");
        assert_eq!(cs[0].verdict, Verdict::Ok, "{cs:?}");
        assert!(cs[0].summary.contains("a/erdma-0"), "{}", cs[0].summary);
        let b: Vec<&Check> = cs
            .iter()
            .filter(|c| c.subject == "DeviceClass erdma.alibaba.dra.net on b")
            .collect();
        assert_eq!(b.len(), 1, "{cs:?}");
        assert_eq!(b[0].verdict, Verdict::Fail);
        assert!(
            b[0].summary.contains("alibaba.dra.net/erdma == true"),
            "{}",
            b[0].summary
        );
        // Both healthy: every node counts its eRDMA device, nothing fails.
        let (cs, ns) = judged(true, true);
        assert_eq!(cs.len(), 1, "{cs:?}");
        assert_eq!(cs[0].verdict, Verdict::Ok);
        assert_eq!(ns[1].dra_rdma_devices, ["erdma-0"]);
    }

    #[test]
    fn a_device_class_that_is_not_one_is_a_cluster_error() {
        let mut ns = nodes();
        let bad = serde_json::json!({"kind": "ResourceSlice", "metadata": {"name": "x"}});
        let e = dra_checks("p", "x", Some(bad), &[], &mut ns).unwrap_err();
        assert!(e.error.to_string().contains("DeviceClass x"), "{}", e.error);
    }
}
