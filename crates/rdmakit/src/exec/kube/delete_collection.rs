//! Deleting every object a label selector matches: one DELETE on the collection, then one watch until none
//! is left. `check` makes a pod per node; a delete and a watch per pod cost 2 × nodes requests and as many
//! open watches, this costs three requests whatever the count.

use std::time::Duration;

use futures::StreamExt as _;
use kube::api::{DeleteParams, ListParams};
use kube::runtime::WatchStreamExt as _;

use super::KubeExecutor;
use super::wait::Mirror;
use crate::error::ExecError;

impl KubeExecutor {
    /// Deletes every `kind` in `namespace` that `selector` matches and waits, within `timeout`, until the
    /// API server has none left (graceful deletion finished). Returns how many the delete matched.
    ///
    /// A caller without the `deletecollection` verb gets the API server's 403 back as
    /// [`ExecError::Rejected`] and can delete one by one instead.
    pub fn delete_selected(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        selector: &str,
        timeout: Duration,
    ) -> Result<usize, ExecError> {
        let action = format!("delete {kind} -l {selector} in namespace {namespace}");
        // The outer limit is a backstop; the wait below ends first, naming what is left.
        self.block(&action, timeout + Duration::from_secs(5), async {
            let api = self.dyn_api(api_version, kind, Some(namespace)).await?;
            let lp = ListParams::default().labels(selector);
            let dp = DeleteParams::background();
            let answer = self
                .retrying(&action, || api.delete_collection(&dp, &lp))
                .await?;
            // A list of what is going (graceful deletion, finalizers), or a Status when nothing matched.
            let matched = answer.left().map_or(0, |list| list.items.len());
            let cfg = kube::runtime::watcher::Config::default().labels(selector);
            let mut events = kube::runtime::watcher(api, cfg).default_backoff().boxed();
            let mut mirror = Mirror::default();
            let gone = async {
                loop {
                    if mirror.synced && mirror.keys().next().is_none() {
                        return Ok(());
                    }
                    match events.next().await {
                        Some(Ok(e)) => {
                            mirror.apply(e);
                        }
                        // The watcher lists again after its backoff; the deadline bounds the retries.
                        Some(Err(e)) => tracing::info!(%action, error = %e, "watch interrupted"),
                        None => {
                            return Err(ExecError::Transport {
                                action: format!("watch {kind} -l {selector}"),
                                message: "the watch ended".into(),
                            });
                        }
                    }
                }
            };
            match tokio::time::timeout(timeout, gone).await {
                Ok(r) => r.map(|()| matched),
                Err(_) => {
                    let left: Vec<&str> = mirror.keys().collect();
                    let shown = left.iter().take(5).copied().collect::<Vec<_>>().join(", ");
                    Err(ExecError::Timeout {
                        action: action.clone(),
                        limit: timeout,
                        hint: if mirror.synced {
                            format!(
                                " ({} still there: {shown}{})",
                                left.len(),
                                if left.len() > 5 { ", ..." } else { "" }
                            )
                        } else {
                            " (the watch never listed)".into()
                        },
                    })
                }
            }
        })
    }
}
