//! Retry: which API errors are transient, how the executor retries them with backoff, and how kube's
//! errors become [`ExecError`]s.

use std::future::Future;
use std::time::Duration;

use super::KubeExecutor;
use crate::error::ExecError;

/// Retry policy for transient API errors.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    /// Total attempts (1 = no retry).
    pub attempts: u32,
    /// First backoff; doubles each retry.
    pub base: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            attempts: 4,
            base: Duration::from_millis(250),
        }
    }
}

/// Worth retrying: throttling, a server error behind a proxy, a connection that failed.
pub(super) fn is_transient(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => matches!(s.code, 429 | 500 | 502 | 503 | 504),
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        _ => false,
    }
}

/// kube's error as an [`ExecError`] naming `action`: an API answer is a rejection with its code and
/// reason, anything else a transport failure.
pub(super) fn map_kube_err(action: &str, e: kube::Error) -> ExecError {
    match e {
        kube::Error::Api(s) => ExecError::Rejected {
            action: action.to_owned(),
            code: s.code,
            reason: if s.reason.is_empty() {
                "Unknown".into()
            } else {
                s.reason.clone()
            },
            message: if s.message.is_empty() {
                "(no message)".into()
            } else {
                with_pod_security_fix(&s.message)
            },
        },
        other => ExecError::Transport {
            action: action.to_owned(),
            message: other.to_string(),
        },
    }
}

/// The server's message, and for a PodSecurity refusal (`violates PodSecurity "baseline:latest":
/// hostPath volumes (...), non-default capabilities (...)`) what to do: the refused fields are what RDMA
/// pods need (the device, IPC_LOCK, host paths, the host network), so the namespace must allow them.
fn with_pod_security_fix(message: &str) -> String {
    let Some(at) = message.find("violates PodSecurity \"") else {
        return message.to_owned();
    };
    let level = message[at + "violates PodSecurity \"".len()..]
        .split([':', '"'])
        .next()
        .unwrap_or("restricted");
    let refused = message[at..]
        .split_once("\": ")
        .map(|(_, fields)| fields.trim())
        .unwrap_or("");
    format!(
        "{message} — the namespace enforces PodSecurity {level:?}, which refuses what this RDMA pod \
         needs ({refused}): run it in a namespace that allows it (kubectl label namespace NS \
         pod-security.kubernetes.io/enforce=privileged --overwrite), or ask the cluster's admin for one"
    )
}

/// A rejection that no retry or wait changes: a 4xx other than 404 (not there yet), 409 (conflict) and 429
/// (throttled).
pub(super) fn is_permanent(e: &ExecError) -> bool {
    matches!(e, ExecError::Rejected { code, .. }
        if (400..500).contains(code) && !matches!(code, 404 | 409 | 429))
}

/// A 404: the object is not there (yet).
pub(super) fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

impl KubeExecutor {
    /// [`retrying_raw`](Self::retrying_raw) with the last error mapped to an [`ExecError`].
    pub(super) async fn retrying<T, F, Fut>(&self, action: &str, f: F) -> Result<T, ExecError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, kube::Error>>,
    {
        self.retrying_raw(action, f)
            .await
            .map_err(|e| map_kube_err(action, e))
    }

    /// Retries transient errors with backoff; the last error comes back as kube's own.
    pub(super) async fn retrying_raw<T, F, Fut>(
        &self,
        action: &str,
        mut f: F,
    ) -> Result<T, kube::Error>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, kube::Error>>,
    {
        let mut delay = self.retry.base;
        let mut attempt = 1;
        loop {
            match f().await {
                Ok(v) => return Ok(v),
                Err(e) if attempt < self.retry.attempts && is_transient(&e) => {
                    tracing::warn!(%action, attempt, error = %e, "transient API error, retrying");
                    tokio::time::sleep(delay).await;
                    delay = delay.saturating_mul(2);
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_throttling_server_errors_and_connection_failures_are_retried() {
        let api = |code: u16| {
            kube::Error::Api(kube::core::Status::failure("", "").with_code(code).boxed())
        };
        for code in [429, 500, 502, 503, 504] {
            assert!(is_transient(&api(code)), "{code}");
        }
        for code in [400, 403, 404, 409, 422] {
            assert!(!is_transient(&api(code)), "{code}");
        }
        let e = map_kube_err("apply Pod/x", api(422));
        assert_eq!(
            e.to_string(),
            "apply Pod/x: the API server rejected it (422 Unknown): (no message)"
        );
    }

    /// The API server's PodSecurity refusal keeps its text (the refused fields) and gains what to do.
    #[test]
    fn a_pod_security_refusal_names_the_fields_and_the_fix() {
        let msg = r#"pods "rdma-test" is forbidden: violates PodSecurity "baseline:latest": hostPath volumes (volume "nvidia-topologyd"), non-default capabilities (container "rdma-test" must not include "IPC_LOCK" in securityContext.capabilities.add)"#;
        let e = map_kube_err(
            "apply Pod/rdma-test",
            kube::Error::Api(
                kube::core::Status::failure(msg, "Forbidden")
                    .with_code(403)
                    .boxed(),
            ),
        )
        .to_string();
        assert!(
            e.starts_with("apply Pod/rdma-test: the API server rejected it (403 Forbidden): pods"),
            "{e}"
        );
        assert!(e.contains(r#"PodSecurity "baseline", which refuses what this RDMA pod needs (hostPath volumes (volume "nvidia-topologyd"), non-default capabilities"#), "{e}");
        assert!(
            e.contains("pod-security.kubernetes.io/enforce=privileged"),
            "{e}"
        );
        // Any other message is the server's, untouched.
        assert_eq!(with_pod_security_fix("quota exceeded"), "quota exceeded");
    }
}
