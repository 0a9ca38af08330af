//! Typed errors of the library half. The binary turns them into `anyhow` reports and exit codes.

use std::path::PathBuf;

/// An error from an executor action (dry-run or live cluster).
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// The API server rejected a request; `message` is the server's own text.
    #[error("{action}: the API server rejected it ({code} {reason}): {message}")]
    Rejected {
        /// What we tried, e.g. `apply RayCluster/ray-erdma-cluster`.
        action: String,
        /// HTTP status code.
        code: u16,
        /// Machine-readable reason (`Conflict`, `Invalid`, ...).
        reason: String,
        /// Human-readable message from the server.
        message: String,
    },
    /// An action ran past its deadline (enforced in Rust, not by the server).
    #[error("{action}: timed out after {}{hint}", seconds(limit))]
    Timeout {
        /// What we were doing.
        action: String,
        /// The limit that was hit.
        limit: std::time::Duration,
        /// Extra context (e.g. the last observed state).
        hint: String,
    },
    /// Ctrl-C (or another cancellation) stopped the action.
    #[error("{action}: interrupted")]
    Cancelled {
        /// What was running.
        action: String,
    },
    /// The cluster does not serve an API a workflow needs (CRD or DRA not installed).
    #[error("the cluster does not serve {api_version} {kind}: {fix}")]
    MissingApi {
        /// e.g. `ray.io/v1`.
        api_version: String,
        /// e.g. `RayCluster`.
        kind: String,
        /// How to install it.
        fix: String,
    },
    /// A wait finished in a failed state (MPIJob Failed, pod CrashLoopBackOff...).
    #[error("{action}: {message}")]
    Failed {
        /// What we waited for.
        action: String,
        /// What the cluster reported.
        message: String,
    },
    /// Bad input from a workflow or a manifest file.
    #[error("{0}")]
    Input(String),
    /// Reading or writing a local file failed.
    #[error("{path}: {source}")]
    Io {
        /// File involved.
        path: PathBuf,
        /// Underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A transport-level error talking to the API server (after retries).
    #[error("{action}: {message}")]
    Transport {
        /// What we tried.
        action: String,
        /// The client error.
        message: String,
    },
    /// The operation was refused by policy (e.g. `shell::` without `--allow-shell`).
    #[error("{0}")]
    Refused(String),
}

/// A local cluster-configuration problem: the kubeconfig or the context the user named, found before
/// anything is sent to a server. The CLI reports it as a usage error (exit 2), not as a cluster error.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The kubeconfig cannot be read or parsed, or names no usable cluster for the context.
    #[error("{source_name}: {message} (fix the file, or name another with --kubeconfig FILE)")]
    Kubeconfig {
        /// Where the kubeconfig came from (`--kubeconfig FILE`, `$KUBECONFIG (...)`, `~/.kube/config`).
        source_name: String,
        /// What is wrong with it.
        message: String,
    },
    /// `--context` (or the file's current-context) names a context the kubeconfig does not have.
    #[error(
        "context {context:?} is not in {source_name} (its contexts: {}); pass --context NAME",
        names(known)
    )]
    UnknownContext {
        /// The context asked for.
        context: String,
        /// Where the kubeconfig came from.
        source_name: String,
        /// The contexts it has.
        known: Vec<String>,
    },
    /// The kubeconfig sets no current-context and no `--context` was given.
    #[error(
        "{source_name} sets no current-context; pass --context NAME (its contexts: {})",
        names(known)
    )]
    NoContext {
        /// Where the kubeconfig came from.
        source_name: String,
        /// The contexts it has.
        known: Vec<String>,
    },
    /// No kubeconfig anywhere and not inside a pod.
    #[error(
        "no cluster configuration: $KUBECONFIG is unset, ~/.kube/config does not exist, and this is not a pod \
         with a service account ({in_cluster}); pass --kubeconfig FILE, set KUBECONFIG, or use --dry-run"
    )]
    NotFound {
        /// Why the in-cluster configuration did not load.
        in_cluster: String,
    },
    /// The configuration loaded but no client can be built from it (TLS material, proxy).
    #[error("a client for {server}: {message}")]
    Client {
        /// The API server URL.
        server: String,
        /// What failed.
        message: String,
    },
}

fn names(known: &[String]) -> String {
    if known.is_empty() {
        "none".into()
    } else {
        known.join(", ")
    }
}

impl ExecError {
    /// Shorthand for an I/O error on `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            source,
        }
    }

    /// True when the error came from the cluster side (rejection, timeout, transport, missing API).
    pub fn is_cluster_error(&self) -> bool {
        matches!(
            self,
            Self::Rejected { .. }
                | Self::Timeout { .. }
                | Self::MissingApi { .. }
                | Self::Transport { .. }
                | Self::Failed { .. }
        )
    }
}

/// `90s`, `2.5s`, `0.25s`: whole seconds stay whole; sub-second limits are not shown as `0s`.
fn seconds(d: &std::time::Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}s", (d.as_secs_f64() * 1000.0).round() / 1000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn timeouts_print_their_real_limit() {
        let t = |ms| {
            ExecError::Timeout {
                action: "wait pod/x Ready".into(),
                limit: Duration::from_millis(ms),
                hint: String::new(),
            }
            .to_string()
        };
        assert_eq!(t(90_000), "wait pod/x Ready: timed out after 90s");
        assert_eq!(t(250), "wait pod/x Ready: timed out after 0.25s");
        assert_eq!(t(2_500), "wait pod/x Ready: timed out after 2.5s");
    }
}
