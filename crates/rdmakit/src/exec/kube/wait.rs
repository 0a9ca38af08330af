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
        let mut mirror = Mirror::default();
        let mut changed = false;
        let result = loop {
            // Judged on the watch's mirror after a change it reported; on a fresh list first, when the
            // watch was quiet, and without a watch.
            let seen = if changed && mirror.synced {
                Some(Ok(mirror.values()))
            } else {
                None
            };
            // A list that hangs past the deadline ends the wait with what was seen before it.
            let list = self.list_values(
                api_version,
                &spec.kind,
                spec.name.as_deref(),
                spec.selector.as_deref(),
                spec.namespace.as_deref(),
            );
            let objs = match seen {
                Some(objs) => Ok(objs),
                None => {
                    tokio::time::timeout(deadline.saturating_duration_since(Instant::now()), list)
                        .await
                }
            };
            let Ok(objs) = objs else {
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
                    match next_change(stream, &mut mirror, until).await {
                        Wake::Changed => changed = true,
                        Wake::Quiet => changed = false,
                        Wake::Failed => {
                            tracing::debug!("{action}: no watch; polling every {:?}", self.poll);
                            changes = None;
                            changed = false;
                        }
                    }
                }
                None => tokio::time::sleep(self.poll).await,
            }
        };
        pb.finish_and_clear();
        result
    }
}

/// What woke a wait.
#[derive(Debug, PartialEq, Eq)]
enum Wake {
    /// The watch reported a change (an object applied or deleted, or the end of its own listing).
    Changed,
    /// `until` came with nothing new.
    Quiet,
    /// The watch failed or ended: the caller polls by listing instead.
    Failed,
}

/// The objects as the watch last reported them. Judging each change on a fresh list costs a list of every
/// object per event: for a thousand check pods becoming Ready, a thousand lists of a thousand pods (seen at
/// 1,000 nodes, bench/scale). The mirror is judged instead; a list stays the fallback when the watch is
/// quiet for `poll` x 15.
#[derive(Debug, Default)]
pub(super) struct Mirror {
    objects: std::collections::BTreeMap<String, Value>,
    /// The watcher's own listing, until it ends (`InitDone`).
    listing: Option<std::collections::BTreeMap<String, Value>>,
    /// The watcher has listed once: `objects` is its view.
    pub(super) synced: bool,
}

impl Mirror {
    fn key(o: &DynamicObject) -> String {
        format!(
            "{}/{}",
            o.metadata.namespace.as_deref().unwrap_or(""),
            o.metadata.name.as_deref().unwrap_or("")
        )
    }

    /// Applies one event; true when it changed what a wait judges.
    pub(super) fn apply(&mut self, e: kube::runtime::watcher::Event<DynamicObject>) -> bool {
        use kube::runtime::watcher::Event;
        let value = |o: &DynamicObject| serde_json::to_value(o).unwrap_or(Value::Null);
        match e {
            Event::Init => {
                self.listing = Some(Default::default());
                false
            }
            Event::InitApply(o) => {
                if let Some(l) = self.listing.as_mut() {
                    l.insert(Self::key(&o), value(&o));
                }
                false
            }
            Event::InitDone => {
                self.objects = self.listing.take().unwrap_or_default();
                self.synced = true;
                true
            }
            Event::Apply(o) => {
                self.objects.insert(Self::key(&o), value(&o));
                true
            }
            Event::Delete(o) => {
                self.objects.remove(&Self::key(&o));
                true
            }
        }
    }

    fn values(&self) -> Vec<Value> {
        self.objects.values().cloned().collect()
    }

    /// `namespace/name` of every object the watch holds now.
    pub(super) fn keys(&self) -> impl Iterator<Item = &str> {
        self.objects.keys().map(String::as_str)
    }
}

/// Waits for the next change a watch reports, or for `until`, applying every event to `mirror`; once
/// something changed, the events already queued are taken too (one judgement for a burst, not one each).
///
/// The end of a listing counts: the watcher lists when first polled, after the wait's own first list, so
/// a change between the two is only in that listing (skipping it cost every such wait `poll` x 15).
async fn next_change<S>(stream: &mut S, mirror: &mut Mirror, until: tokio::time::Instant) -> Wake
where
    S: futures::Stream<
            Item = Result<
                kube::runtime::watcher::Event<DynamicObject>,
                kube::runtime::watcher::Error,
            >,
        > + Unpin,
{
    use futures::FutureExt as _;
    use futures::StreamExt as _;
    loop {
        match tokio::time::timeout_at(until, stream.next()).await {
            Err(_) => return Wake::Quiet,
            Ok(Some(Ok(e))) => {
                if mirror.apply(e) {
                    break;
                }
            }
            Ok(Some(Err(_)) | None) => return Wake::Failed,
        }
    }
    while let Some(next) = stream.next().now_or_never() {
        match next {
            Some(Ok(e)) => {
                mirror.apply(e);
            }
            Some(Err(_)) | None => return Wake::Failed,
        }
    }
    Wake::Changed
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
        let mut mirror = Mirror::default();
        let until = tokio::time::Instant::now() + Duration::from_secs(20);
        assert_eq!(
            next_change(&mut stream, &mut mirror, until).await,
            Wake::Changed
        );
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
        assert!(mirror.synced);
        assert_eq!(mirror.values().len(), 1, "the listing is the mirror");
        // With nothing more to report, the next call waits out `until`.
        let until = tokio::time::Instant::now() + Duration::from_millis(200);
        assert_eq!(
            next_change(&mut stream, &mut mirror, until).await,
            Wake::Quiet
        );
        assert!(t0.elapsed() >= Duration::from_millis(200));
    }

    /// A burst of changes (a thousand pods becoming Ready) is one wake, and the mirror holds each object's
    /// last state: nothing is listed again per event.
    #[tokio::test]
    async fn a_burst_of_changes_is_one_wake_and_the_mirror_keeps_the_last_state() {
        let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "Pod"));
        let pod = |name: &str, phase: &str| {
            let mut p = DynamicObject::new(name, &ar).within("ns");
            p.data = serde_json::json!({"status": {"phase": phase}});
            p
        };
        let mut events = vec![
            Ok(Event::Init),
            Ok(Event::InitApply(pod("a", "Pending"))),
            Ok(Event::InitDone),
        ];
        for i in 0..1000 {
            events.push(Ok(Event::Apply(pod(&format!("p{i:04}"), "Running"))));
        }
        events.push(Ok(Event::Delete(pod("a", "Pending"))));
        let mut stream = futures::stream::iter(events)
            .chain(futures::stream::pending())
            .boxed();
        let mut mirror = Mirror::default();
        let until = tokio::time::Instant::now() + Duration::from_secs(20);
        assert_eq!(
            next_change(&mut stream, &mut mirror, until).await,
            Wake::Changed
        );
        let v = mirror.values();
        assert_eq!(v.len(), 1000, "every apply kept, the deleted pod gone");
        assert!(v.iter().all(|p| p["status"]["phase"] == "Running"));
        assert_eq!(v[0]["metadata"]["name"], "p0000");
        // A watch that ends makes the wait poll.
        let mut ended = futures::stream::iter(Vec::new()).boxed();
        assert_eq!(
            next_change(&mut ended, &mut mirror, until).await,
            Wake::Failed
        );
    }
}
