//! Waits: poll the objects a [`WaitSpec`] names, judged by [`crate::exec::wait::evaluate`], woken early by
//! a watch on the same objects; the deadline ends the wait with the last state seen.

use std::time::Instant;

use futures::StreamExt as _;
use kube::api::DynamicObject;
use serde_json::{Value, json};

use super::retry::is_permanent;
use super::{KubeExecutor, spinner};
use crate::error::ExecError;
use crate::exec::WaitSpec;
use crate::exec::api_version_for_kind;
use crate::exec::wait::{WaitState, evaluate};

impl KubeExecutor {
    /// Polls until the wait condition holds (async form; the trait method adds the deadline).
    pub async fn wait_async(&self, spec: &WaitSpec) -> Result<Value, ExecError> {
        let api_version = api_version_for_kind(&spec.kind)
            .ok_or_else(|| ExecError::Input(format!("wait: unknown kind {:?}", spec.kind)))?;
        let target = spec
            .name
            .clone()
            .or_else(|| spec.selector.clone().map(|s| format!("-l {s}")))
            .unwrap_or_default();
        let action = format!("wait for {} {target}", spec.kind);
        let pb = spinner(&action);
        let deadline = Instant::now() + spec.timeout;
        let mut last = String::from("no answer from the API server yet");
        // A watch on the same objects wakes the wait as soon as one changes (kube::runtime's watcher); the
        // state is judged on a fresh list each time. While the watch runs, a list is only the fallback
        // every `poll` x 15; a server (or proxy) that cannot watch falls back to a list every `poll`.
        let mut changes = match self
            .dyn_api(api_version, &spec.kind, spec.namespace.as_deref())
            .await
        {
            Ok(api) => {
                let mut cfg = kube::runtime::watcher::Config::default();
                if let Some(sel) = &spec.selector {
                    cfg = cfg.labels(sel);
                }
                if let Some(n) = &spec.name {
                    cfg = cfg.fields(&format!("metadata.name={n}"));
                }
                Some(kube::runtime::watcher(api, cfg).boxed())
            }
            Err(_) => None,
        };
        let result = loop {
            // A list that hangs past the deadline ends the wait with what was seen before it.
            let list = self.list_values(
                api_version,
                &spec.kind,
                spec.name.as_deref(),
                spec.selector.as_deref(),
                spec.namespace.as_deref(),
            );
            let Ok(objs) =
                tokio::time::timeout(deadline.saturating_duration_since(Instant::now()), list)
                    .await
            else {
                break Err(ExecError::Timeout {
                    action: action.clone(),
                    limit: spec.timeout,
                    hint: format!(" (last seen: {last})"),
                });
            };
            match objs {
                Ok(objs) => match evaluate(spec, &objs) {
                    WaitState::Done(msg) => {
                        let names: Vec<Value> = objs
                            .iter()
                            .filter_map(|o| o.pointer("/metadata/name").cloned())
                            .collect();
                        break Ok(json!({"state": msg, "names": names, "dry_run": false}));
                    }
                    WaitState::Failed(msg) => {
                        break Err(ExecError::Failed {
                            action: action.clone(),
                            message: msg,
                        });
                    }
                    WaitState::Pending(msg) => last = msg,
                },
                Err(e @ ExecError::MissingApi { .. }) => break Err(e),
                // Forbidden, Unauthorized, Invalid...: waiting does not change the answer.
                Err(e) if is_permanent(&e) => break Err(e),
                Err(e) => last = e.to_string(),
            }
            pb.set_message(format!("{action}: {last}"));
            if Instant::now() + self.poll > deadline {
                break Err(ExecError::Timeout {
                    action: action.clone(),
                    limit: spec.timeout,
                    hint: format!(" (last seen: {last})"),
                });
            }
            match changes.as_mut() {
                Some(stream) => {
                    let until = tokio::time::Instant::from_std(
                        (Instant::now() + self.poll * 15).min(deadline),
                    );
                    if !next_change(stream, until).await {
                        tracing::debug!("{action}: no watch; polling every {:?}", self.poll);
                        changes = None;
                    }
                }
                None => tokio::time::sleep(self.poll).await,
            }
        };
        pb.finish_and_clear();
        result
    }
}

/// Waits for the next change a watch reports (an object applied or deleted, or the end of the watcher's
/// own listing), or for `until`. False when the watch failed or ended: the caller polls instead.
///
/// The end of a listing counts: the watcher lists when first polled, after the wait's own first list, so
/// a change between the two is only in that listing (skipping it cost every such wait `poll` x 15).
async fn next_change<S>(stream: &mut S, until: tokio::time::Instant) -> bool
where
    S: futures::Stream<
            Item = Result<
                kube::runtime::watcher::Event<DynamicObject>,
                kube::runtime::watcher::Error,
            >,
        > + Unpin,
{
    use futures::StreamExt as _;
    use kube::runtime::watcher::Event;
    loop {
        match tokio::time::timeout_at(until, stream.next()).await {
            Err(_) => return true,
            Ok(Some(Ok(Event::Apply(_) | Event::Delete(_) | Event::InitDone))) => return true,
            Ok(Some(Ok(_))) => continue,
            Ok(Some(Err(_)) | None) => return false,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use kube::api::{ApiResource, GroupVersionKind};
    use kube::runtime::watcher::Event;
    use std::time::Duration;

    /// A watcher whose listing already holds the change (the pod became Ready between the wait's list and
    /// the watcher's): the wait wakes when the listing ends, not `poll` x 15 later.
    #[tokio::test]
    async fn the_end_of_the_watchers_listing_wakes_the_wait() {
        let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "Pod"));
        let pod = DynamicObject::new("p", &ar);
        let events = vec![
            Ok(Event::Init),
            Ok(Event::InitApply(pod)),
            Ok(Event::InitDone),
        ];
        let mut stream = futures::stream::iter(events)
            .chain(futures::stream::pending())
            .boxed();
        let t0 = std::time::Instant::now();
        let until = tokio::time::Instant::now() + Duration::from_secs(20);
        assert!(next_change(&mut stream, until).await);
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
        // With nothing more to report, the next call waits out `until`.
        let until = tokio::time::Instant::now() + Duration::from_millis(200);
        assert!(next_change(&mut stream, until).await);
        assert!(t0.elapsed() >= Duration::from_millis(200));
    }
}
