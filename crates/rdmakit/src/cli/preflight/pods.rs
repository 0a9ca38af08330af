//! `rdmakit preflight --pods`: facts from inside the selected pods. Each Running pod gets one exec of
//! `probe::preflight::POD_PROBE_COMMAND` in the container that requests RDMA, and its stdout, with what the
//! pod spec requests, becomes a `PodFacts` that `probe::preflight::evaluate` judges (memlock, CAP_IPC_LOCK,
//! device files, NCCL). An exec that fails is recorded as unreadable, never as a guess.

use std::time::Duration;

use probe::preflight::{POD_PROBE_COMMAND, PodFacts};
use probe::{Check, Verdict};
use rdmakit::error::ExecError;
use rdmakit::exec::fanout::Fanout;
use rdmakit::exec::{ExecOutput, ExecSpec, Executor};
use serde_json::Value;

/// How long one pod's probe may take (it reads a few files and imports Python's package metadata).
pub const EXEC_TIMEOUT: Duration = Duration::from_secs(30);

/// The pod to exec into: name, namespace, node, container and what that container requests for RDMA.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub namespace: String,
    pub name: String,
    pub node: Option<String>,
    pub container: Option<String>,
    pub requested: Vec<String>,
}

/// What one container requests for RDMA: its `resources.limits` whose key is one of `rdma_resources`
/// (`aliyun/erdma=1`), then its DRA claims (`claim:erdma`).
pub fn requested_rdma(container: &Value, rdma_resources: &[String]) -> Vec<String> {
    let res = &container["resources"];
    let mut out: Vec<String> = res["limits"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| rdma_resources.iter().any(|r| r == *k))
        .map(|(k, v)| {
            format!(
                "{k}={}",
                v.as_str().map_or_else(|| v.to_string(), str::to_owned)
            )
        })
        .collect();
    out.extend(
        res["claims"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["name"].as_str())
            .map(|n| format!("claim:{n}")),
    );
    out
}

/// The container to probe and its request: the first container that requests RDMA, else the one the
/// `kubectl.kubernetes.io/default-container` annotation names, else the first. `None` for a pod without
/// containers (not a pod the API server returns).
pub fn target(pod: &Value, rdma_resources: &[String]) -> Option<Target> {
    let containers = pod["spec"]["containers"].as_array()?;
    let first = containers.first()?;
    let annotated =
        pod["metadata"]["annotations"]["kubectl.kubernetes.io/default-container"].as_str();
    let (c, requested) = containers
        .iter()
        .map(|c| (c, requested_rdma(c, rdma_resources)))
        .find(|(_, r)| !r.is_empty())
        .or_else(|| {
            containers
                .iter()
                .find(|c| annotated.is_some() && c["name"].as_str() == annotated)
                .map(|c| (c, Vec::new()))
        })
        .unwrap_or((first, Vec::new()));
    Some(Target {
        namespace: pod["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        name: pod["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        node: pod["spec"]["nodeName"].as_str().map(str::to_owned),
        container: c["name"].as_str().map(str::to_owned),
        requested,
    })
}

/// A pod's facts from how its exec ended. A failed exec (or one that printed nothing and exited non-zero:
/// no `sh` in the image) is parsed as empty output with the reason among the unreadable facts.
pub fn facts(t: &Target, ended: Result<ExecOutput, ExecError>) -> PodFacts {
    let (stdout, failure) = match ended {
        Ok(o) if o.code == 0 => (o.stdout, None),
        Ok(o) => {
            let why = o
                .stderr
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("no message");
            let failure = format!("exec: the probe exited with {}: {}", o.code, why.trim());
            (o.stdout, Some(failure))
        }
        Err(e) => (String::new(), Some(format!("exec: {e}"))),
    };
    let mut f = PodFacts::from_pod_probe(
        &t.namespace,
        &t.name,
        t.node.as_deref(),
        &t.requested,
        &stdout,
    );
    f.unreadable.extend(failure);
    f
}

/// Probes every target through `fanout`, each under [`EXEC_TIMEOUT`]; results in target order. A target the
/// overall deadline left unprobed is recorded as unreadable, saying so.
pub fn probe_all(
    exec: &(impl Executor + ?Sized),
    targets: &[Target],
    fanout: &Fanout,
) -> Vec<PodFacts> {
    let probed = fanout.run("probe pods", targets, |t| {
        let spec = ExecSpec {
            pod: t.name.clone(),
            container: t.container.clone(),
            command: POD_PROBE_COMMAND.iter().map(|a| (*a).to_owned()).collect(),
            namespace: Some(t.namespace.clone()),
            timeout: EXEC_TIMEOUT,
            ..ExecSpec::default()
        };
        facts(t, exec.exec(&spec))
    });
    targets
        .iter()
        .zip(probed)
        .map(|(t, f)| {
            f.unwrap_or_else(|| {
                facts(
                    t,
                    Err(ExecError::Failed {
                        action: format!("exec in {}", t.name),
                        message: "not probed: the overall deadline (--deadline) passed first"
                            .into(),
                    }),
                )
            })
        })
        .collect()
}

/// The pods a selector matched that are not probed (not Running), and a selector that matched none: what
/// the user asked for and did not get.
pub fn selection_checks(selector: &str, namespace: &str, pods: &[Value]) -> Vec<Check> {
    if pods.is_empty() {
        return vec![
            Check::new(
                "pod-selection",
                format!("{namespace} pods {selector}"),
                Verdict::Warn,
                "no pod matches: nothing was probed",
            )
            .with_fix(
                "Check the selector and namespace (--pods, --pods-namespace, -n) against \
                 `kubectl get pods -n NAMESPACE -l SELECTOR`.",
            ),
        ];
    }
    pods.iter()
        .filter(|p| p["status"]["phase"] != "Running")
        .map(|p| {
            let phase = p["status"]["phase"].as_str().unwrap_or("Unknown");
            Check::new(
                "pod-selection",
                format!(
                    "{}/{}",
                    p["metadata"]["namespace"].as_str().unwrap_or(namespace),
                    p["metadata"]["name"].as_str().unwrap_or("?")
                ),
                Verdict::Warn,
                format!("{phase}: not probed (only Running pods can be exec'd into)"),
            )
            .with_fix("`kubectl describe pod` says why it is not running; rerun once it is.")
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn policy() -> Vec<String> {
        probe::preflight::PreflightPolicy::default().rdma_resources
    }

    fn worker() -> Value {
        json!({
            "metadata": {"name": "w-0", "namespace": "ml",
                         "annotations": {"kubectl.kubernetes.io/default-container": "sidecar"}},
            "spec": {"nodeName": "n1", "containers": [
                {"name": "sidecar", "resources": {}},
                {"name": "ray-worker", "resources": {
                    "limits": {"nvidia.com/gpu": "8", "aliyun/erdma": "1", "memory": "64Gi"},
                    "claims": [{"name": "erdma"}]}}
            ]},
            "status": {"phase": "Running"}
        })
    }

    #[test]
    fn the_container_that_requests_rdma_is_probed_with_its_request() {
        let t = target(&worker(), &policy()).unwrap();
        assert_eq!(t.container.as_deref(), Some("ray-worker"));
        assert_eq!(t.requested, ["aliyun/erdma=1", "claim:erdma"]);
        assert_eq!((t.namespace.as_str(), t.name.as_str()), ("ml", "w-0"));
        assert_eq!(t.node.as_deref(), Some("n1"));
        // GPU and memory limits are not RDMA requests.
        let mut p = worker();
        p["spec"]["containers"][1]["resources"] = json!({"limits": {"nvidia.com/gpu": "8"}});
        let t = target(&p, &policy()).unwrap();
        assert!(t.requested.is_empty());
        // Nothing requests RDMA: the annotated default container, else the first.
        assert_eq!(t.container.as_deref(), Some("sidecar"));
        p["metadata"]["annotations"] = json!({});
        p["spec"]["containers"][0]["name"] = json!("main");
        assert_eq!(
            target(&p, &policy()).unwrap().container.as_deref(),
            Some("main")
        );
        assert!(target(&json!({"spec": {"containers": []}}), &policy()).is_none());
    }

    #[test]
    fn a_failed_exec_is_unreadable_with_its_reason() {
        let t = target(&worker(), &policy()).unwrap();
        let f = facts(
            &t,
            Err(ExecError::Timeout {
                action: "exec in w-0".into(),
                limit: EXEC_TIMEOUT,
                hint: String::new(),
            }),
        );
        assert_eq!(f.memlock, None);
        assert_eq!(f.requested_rdma, ["aliyun/erdma=1", "claim:erdma"]);
        let last = f.unreadable.last().unwrap();
        assert!(
            last.starts_with("exec: ") && last.contains("exec in w-0"),
            "{f:?}"
        );
        // No shell in the image: a non-zero exit with nothing printed names the shell's message.
        let f = facts(
            &t,
            Ok(ExecOutput {
                stderr:
                    "OCI runtime exec failed: exec: \"sh\": executable file not found in $PATH\n"
                        .into(),
                code: 126,
                ..ExecOutput::default()
            }),
        );
        assert!(
            f.unreadable
                .last()
                .unwrap()
                .contains("exited with 126: OCI runtime exec failed"),
            "{f:?}"
        );
    }

    #[test]
    fn a_probe_that_ran_gives_the_pods_facts() {
        let t = target(&worker(), &policy()).unwrap();
        let stdout = "### limits\nLimit  Soft Limit  Hard Limit  Units\nMax locked memory         65536                65536                bytes\n\
                      ### ulimit-l\n64\n### status\nCapPrm:\t00000000a80425fb\nCapEff:\t00000000a80425fb\n\
                      ### dev-infiniband\nrdma_cm\nuverbs0\n### sys-infiniband\nerdma_0\n### nccl\nnvidia-nccl-cu13 2.30.7\n### end\n";
        let f = facts(
            &t,
            Ok(ExecOutput {
                stdout: stdout.into(),
                ..ExecOutput::default()
            }),
        );
        assert_eq!(f.memlock, Some(probe::facts::LimitValue::Bytes(65536)));
        assert_eq!(f.cap_ipc_lock, Some(false));
        assert_eq!(f.dev_infiniband, ["rdma_cm", "uverbs0"]);
        assert_eq!(f.rdma_devices, ["erdma_0"]);
        assert_eq!(f.nccl_version.as_deref(), Some("2.30.7"));
        assert!(f.unreadable.is_empty(), "{f:?}");
    }

    #[test]
    fn pods_not_running_and_an_empty_selection_are_named() {
        let cs = selection_checks("app=w", "ml", &[]);
        assert_eq!((cs.len(), cs[0].verdict), (1, Verdict::Warn));
        assert!(cs[0].summary.contains("no pod matches"));
        let mut pending = worker();
        pending["status"]["phase"] = json!("Pending");
        let cs = selection_checks("app=w", "ml", &[worker(), pending]);
        assert_eq!(cs.len(), 1);
        assert_eq!(cs[0].subject, "ml/w-0");
        assert!(
            cs[0].summary.starts_with("Pending: not probed"),
            "{}",
            cs[0].summary
        );
    }
}
