//! The live executor: kube-rs with server-side apply, discovery, exec/cp over the API, polling waits with
//! a progress spinner, retries with backoff on transient API errors, and deadlines enforced in Rust.
//!
//! Split the way kube-client splits its `client/`: [`connect`] (kubeconfig or in-cluster config, the
//! client), [`retry`](RetryPolicy) (transient errors, backoff), `api` (discovery, dynamic objects),
//! `wait`, `remote_exec` (the websocket exec and the ranks of `exec_many`), `registry` (the docker-config
//! merge, Secrets) and `executor` (the [`Executor`](crate::exec::Executor) impl that ties them together).

mod api;
mod connect;
mod delete_collection;
mod executor;
mod registry;
mod remote_exec;
mod retry;
mod wait;

pub use connect::{ClusterOptions, Connection, connect};
pub use registry::merge_docker_configs;
pub use remote_exec::{RANK_KILL, RANK_WRAPPER};
pub(crate) use remote_exec::{rank_kill, wrapped_rank};
pub use retry::RetryPolicy;

use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use kube::Client;
use kube::api::ApiResource;
use kube::discovery::ApiCapabilities;

use crate::cancel::Cancel;
use crate::error::ExecError;

/// The kube-rs executor.
pub struct KubeExecutor {
    client: Client,
    handle: tokio::runtime::Handle,
    namespace: String,
    cancel: Cancel,
    retry: RetryPolicy,
    poll: Duration,
    discovered: Mutex<HashMap<(String, String), (ApiResource, ApiCapabilities)>>,
}

impl std::fmt::Debug for KubeExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeExecutor")
            .field("namespace", &self.namespace)
            .field("retry", &self.retry)
            .field("poll", &self.poll)
            .finish_non_exhaustive()
    }
}

/// A spinner showing `msg` and the time elapsed, for waits and long execs.
pub(super) fn spinner(msg: &str) -> ProgressBar {
    let pb = ProgressBar::new_spinner();
    if let Ok(style) = ProgressStyle::with_template("{spinner} {elapsed:>4} {msg}") {
        pb.set_style(style);
    }
    pb.set_message(msg.to_owned());
    pb.enable_steady_tick(Duration::from_millis(150));
    pb
}

impl KubeExecutor {
    /// An executor over `client`. `handle` must belong to a runtime that is not driving the calling thread
    /// (calls block on it); the CLI runs scripts on their own thread for that reason.
    pub fn new(client: Client, handle: tokio::runtime::Handle, cancel: Cancel) -> Self {
        let namespace = client.default_namespace().to_owned();
        Self {
            client,
            handle,
            namespace,
            cancel,
            retry: RetryPolicy::default(),
            poll: Duration::from_secs(2),
            discovered: Mutex::new(HashMap::new()),
        }
    }

    /// Sets the retry policy (tests use a short one).
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Sets the poll interval of waits.
    pub fn with_poll_interval(mut self, poll: Duration) -> Self {
        self.poll = poll;
        self
    }

    /// Runs `fut` on the runtime with a deadline and Ctrl-C cancellation.
    pub(super) fn block<T>(
        &self,
        action: &str,
        timeout: Duration,
        fut: impl Future<Output = Result<T, ExecError>>,
    ) -> Result<T, ExecError> {
        let cancel = self.cancel.clone();
        self.handle.block_on(async move {
            tokio::select! {
                r = tokio::time::timeout(timeout, fut) => r.unwrap_or_else(|_| Err(ExecError::Timeout {
                    action: action.to_owned(), limit: timeout, hint: String::new(),
                })),
                _ = cancel.cancelled() => Err(ExecError::Cancelled { action: action.to_owned() }),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spinner_shows_the_action_until_finished() {
        // What a user reads while a step waits is the spinner's message: it must be the action itself.
        let pb = spinner("wait for RayCluster ray-erdma-cluster");
        assert_eq!(pb.message(), "wait for RayCluster ray-erdma-cluster");
        assert!(!pb.is_finished());
        pb.finish_and_clear();
        assert!(pb.is_finished(), "a cleared spinner must stop ticking");
    }
}
