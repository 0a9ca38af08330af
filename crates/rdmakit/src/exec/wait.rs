//! Pure evaluation of wait conditions over listed objects, shared by the live executor and its tests.

use serde_json::Value;

use super::{WaitFor, WaitSpec};

/// The outcome of one poll.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WaitState {
    /// Condition holds.
    Done(String),
    /// Not yet; the string describes progress (`1/2 pods Ready`).
    Pending(String),
    /// Will never hold (MPIJob Failed, pod in CrashLoopBackOff ...).
    Failed(String),
}

fn name_of(o: &Value) -> &str {
    o.pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("?")
}

/// `status.conditions[type=cond].status == "True"`.
pub fn condition_true(o: &Value, cond: &str) -> bool {
    o.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.get("type")
                    .and_then(Value::as_str)
                    .is_some_and(|t| t.eq_ignore_ascii_case(cond))
                    && c.get("status").and_then(Value::as_str) == Some("True")
            })
        })
}

/// A waiting reason on a container that the kubelet has given up retrying quickly. `ErrImagePull` and
/// `CreateContainerConfigError` are not here: the kubelet retries them (a registry hiccup, a Secret created a
/// moment later), so they are shown as progress (see [`pod_pending_reason`]) and end the wait only at its
/// deadline, named in the timeout message.
fn pod_fatal_reason(pod: &Value) -> Option<String> {
    const FATAL: [&str; 3] = ["CrashLoopBackOff", "ImagePullBackOff", "InvalidImageName"];
    let statuses = pod
        .pointer("/status/containerStatuses")
        .and_then(Value::as_array)?;
    statuses.iter().find_map(|s| {
        let reason = s.pointer("/state/waiting/reason").and_then(Value::as_str)?;
        FATAL.contains(&reason).then(|| {
            let msg = s
                .pointer("/state/waiting/message")
                .and_then(Value::as_str)
                .unwrap_or("");
            format!(
                "pod {} container {}: {reason} {msg}",
                name_of(pod),
                s.get("name").and_then(Value::as_str).unwrap_or("?")
            )
            .trim_end()
            .to_owned()
        })
    })
}

/// Why a pod is not Ready yet, as the cluster says it: the scheduler's message for an unschedulable pod,
/// or a container's waiting reason (`ErrImagePull`, `ContainerCreating`...).
fn pod_pending_reason(pod: &Value) -> Option<String> {
    if condition_true(pod, "Ready") {
        return None;
    }
    let unschedulable = pod
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| {
            cs.iter().find(|c| {
                c.get("type").and_then(Value::as_str) == Some("PodScheduled")
                    && c.get("status").and_then(Value::as_str) == Some("False")
            })
        });
    if let Some(c) = unschedulable {
        let reason = c
            .get("reason")
            .and_then(Value::as_str)
            .unwrap_or("Unschedulable");
        let msg = c.get("message").and_then(Value::as_str).unwrap_or("");
        return Some(
            format!("{} {reason}: {msg}", name_of(pod))
                .trim_end()
                .to_owned(),
        );
    }
    let waiting = pod
        .pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .and_then(|ss| ss.iter().find_map(|s| s.pointer("/state/waiting")));
    if let Some(w) = waiting {
        let reason = w.get("reason").and_then(Value::as_str).unwrap_or("Waiting");
        let msg = w.get("message").and_then(Value::as_str).unwrap_or("");
        return Some(
            format!("{} {reason} {msg}", name_of(pod))
                .trim_end()
                .to_owned(),
        );
    }
    let phase = pod
        .pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or("Pending");
    Some(format!("{} {phase}", name_of(pod)))
}

/// Evaluates a wait condition over the objects currently matching the spec.
pub fn evaluate(spec: &WaitSpec, objects: &[Value]) -> WaitState {
    let expect = spec.expect.max(1);
    match &spec.what {
        WaitFor::PodsReady => {
            let ready = objects
                .iter()
                .filter(|p| condition_true(p, "Ready"))
                .count();
            if let Some(fatal) = objects.iter().find_map(pod_fatal_reason) {
                return WaitState::Failed(fatal);
            }
            let msg = format!("{ready}/{} pods Ready (want {expect})", objects.len());
            if ready >= expect && ready == objects.len() {
                WaitState::Done(msg)
            } else {
                let why: Vec<String> = objects
                    .iter()
                    .filter_map(pod_pending_reason)
                    .take(3)
                    .collect();
                WaitState::Pending(if why.is_empty() {
                    msg
                } else {
                    format!("{msg}; {}", why.join("; "))
                })
            }
        }
        WaitFor::RayClusterReady => match objects.first() {
            None => WaitState::Pending("RayCluster not found yet".into()),
            Some(rc) => {
                let state = rc
                    .pointer("/status/state")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                let ready_workers = rc
                    .pointer("/status/readyWorkerReplicas")
                    .and_then(Value::as_i64)
                    .unwrap_or(0);
                let msg = format!(
                    "state={} readyWorkerReplicas={ready_workers}",
                    if state.is_empty() { "<none>" } else { state }
                );
                if state.eq_ignore_ascii_case("ready")
                    || condition_true(rc, "RayClusterProvisioned")
                        && condition_true(rc, "HeadPodReady")
                {
                    WaitState::Done(msg)
                } else if state.eq_ignore_ascii_case("failed") {
                    let reason = rc
                        .pointer("/status/reason")
                        .and_then(Value::as_str)
                        .unwrap_or("");
                    WaitState::Failed(format!("RayCluster {} failed: {reason}", name_of(rc)))
                } else {
                    WaitState::Pending(msg)
                }
            }
        },
        WaitFor::MpiJobFinished => match objects.first() {
            None => WaitState::Pending("MPIJob not found yet".into()),
            Some(job) => {
                if condition_true(job, "Succeeded") {
                    WaitState::Done("Succeeded".into())
                } else if condition_true(job, "Failed") {
                    let msg = job
                        .pointer("/status/conditions")
                        .and_then(Value::as_array)
                        .and_then(|cs| {
                            cs.iter()
                                .find(|c| c.get("type").and_then(Value::as_str) == Some("Failed"))
                        })
                        .and_then(|c| c.get("message").and_then(Value::as_str))
                        .unwrap_or("");
                    WaitState::Failed(format!("MPIJob {} failed: {msg}", name_of(job)))
                } else {
                    let running = condition_true(job, "Running");
                    WaitState::Pending(if running {
                        "Running".into()
                    } else {
                        "Created".into()
                    })
                }
            }
        },
        WaitFor::ClaimsAllocated => {
            let allocated = objects
                .iter()
                .filter(|c| {
                    c.pointer("/status/allocation")
                        .is_some_and(|a| !a.is_null())
                })
                .count();
            let msg = format!(
                "{allocated}/{} ResourceClaims allocated (want {expect})",
                objects.len()
            );
            if allocated >= expect {
                WaitState::Done(msg)
            } else {
                WaitState::Pending(msg)
            }
        }
        WaitFor::Condition(cond) => {
            let ok = objects.iter().filter(|o| condition_true(o, cond)).count();
            let msg = format!("{ok}/{} with {cond}=True (want {expect})", objects.len());
            if ok >= expect && ok == objects.len() {
                WaitState::Done(msg)
            } else {
                WaitState::Pending(msg)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::time::Duration;

    fn spec(what: WaitFor, expect: usize) -> WaitSpec {
        WaitSpec {
            what,
            kind: "Pod".into(),
            name: None,
            selector: Some("a=b".into()),
            expect,
            namespace: None,
            timeout: Duration::from_secs(1),
        }
    }

    fn pod(name: &str, ready: bool) -> Value {
        json!({"metadata": {"name": name}, "status": {"conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]}})
    }

    #[test]
    fn pods_ready_needs_all_and_expect() {
        let s = spec(WaitFor::PodsReady, 2);
        assert!(matches!(
            evaluate(&s, &[pod("a", true)]),
            WaitState::Pending(_)
        ));
        assert!(matches!(
            evaluate(&s, &[pod("a", true), pod("b", false)]),
            WaitState::Pending(_)
        ));
        assert_eq!(
            evaluate(&s, &[pod("a", true), pod("b", true)]),
            WaitState::Done("2/2 pods Ready (want 2)".into())
        );
    }

    #[test]
    fn crashloop_fails_fast() {
        let p = json!({"metadata": {"name": "w"}, "status": {"containerStatuses": [{"name": "ray-worker", "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}});
        assert!(
            matches!(evaluate(&spec(WaitFor::PodsReady, 1), &[p]), WaitState::Failed(m) if m.contains("CrashLoopBackOff"))
        );
    }

    #[test]
    fn pending_pods_say_why_and_retried_errors_do_not_fail_the_wait() {
        let unsched = json!({"metadata": {"name": "w-0"}, "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/9 nodes are available: 2 node(s) didn't have free ports for the requested pod ports."}]}});
        let pulling = json!({"metadata": {"name": "w-1"}, "status": {"containerStatuses": [{"name": "ray-worker", "state": {"waiting": {"reason": "ErrImagePull", "message": "rpc error: 503"}}}]}});
        let s = spec(WaitFor::PodsReady, 2);
        match evaluate(&s, &[unsched, pulling]) {
            WaitState::Pending(m) => {
                assert!(m.starts_with("0/2 pods Ready (want 2); "), "{m}");
                assert!(m.contains("w-0 Unschedulable: 0/9 nodes are available: 2 node(s) didn't have free ports"), "{m}");
                assert!(m.contains("w-1 ErrImagePull rpc error: 503"), "{m}");
            }
            other => panic!("a retried pull must not end the wait: {other:?}"),
        }
        let backoff = json!({"metadata": {"name": "w-1"}, "status": {"containerStatuses": [{"name": "ray-worker", "state": {"waiting": {"reason": "ImagePullBackOff"}}}]}});
        assert!(
            matches!(evaluate(&s, &[backoff]), WaitState::Failed(m) if m.contains("ImagePullBackOff"))
        );
    }

    #[test]
    fn mpijob_states() {
        let s = spec(WaitFor::MpiJobFinished, 1);
        let ok = json!({"metadata": {"name": "j"}, "status": {"conditions": [{"type": "Succeeded", "status": "True"}]}});
        let bad = json!({"metadata": {"name": "j"}, "status": {"conditions": [{"type": "Failed", "status": "True", "message": "boom"}]}});
        assert!(matches!(evaluate(&s, &[ok]), WaitState::Done(_)));
        assert!(matches!(evaluate(&s, &[bad]), WaitState::Failed(m) if m.contains("boom")));
    }

    #[test]
    fn raycluster_ready_and_claims() {
        let rc = json!({"metadata": {"name": "r"}, "status": {"state": "ready", "readyWorkerReplicas": 2}});
        assert!(matches!(
            evaluate(&spec(WaitFor::RayClusterReady, 1), &[rc]),
            WaitState::Done(_)
        ));
        let c = json!({"metadata": {"name": "c"}, "status": {"allocation": {"devices": {}}}});
        assert!(matches!(
            evaluate(&spec(WaitFor::ClaimsAllocated, 2), std::slice::from_ref(&c)),
            WaitState::Pending(_)
        ));
        assert!(matches!(
            evaluate(&spec(WaitFor::ClaimsAllocated, 2), &[c.clone(), c]),
            WaitState::Done(_)
        ));
    }
}
