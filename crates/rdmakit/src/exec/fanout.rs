//! Bounded fan-out: one blocking call per item (an exec, an apply), at most `parallel` at a time, under an
//! overall deadline, with a progress bar on stderr (hidden when stderr is not a terminal). What `preflight
//! --pods` and `check` do per pod on a cluster of hundreds or thousands of nodes: all at once would open
//! that many exec streams against one API server; one at a time would take an exec's latency per node.
//!
//! Workers pull the next item from a shared counter, so one slow item holds up one worker, not a batch.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How much to run at once and for how long.
#[derive(Debug, Clone, Copy)]
pub struct Fanout {
    /// Items in flight at most (at least 1).
    pub parallel: usize,
    /// No item starts after this; the ones left come back as `None`.
    pub deadline: Option<Instant>,
}

impl Fanout {
    /// `parallel` from the user, else from the item count: an eighth of the items, between 8 and 64 (exec
    /// streams are cheap for the API server next to the kubelets' work, but each costs a thread here).
    pub fn sized(items: usize, parallel: Option<usize>, deadline: Option<Duration>) -> Self {
        Fanout {
            parallel: parallel.unwrap_or((items / 8).clamp(8, 64)).max(1),
            deadline: deadline.map(|d| Instant::now() + d),
        }
    }

    /// `f` over `items`; results in item order, `None` for an item the deadline left unstarted. `label`
    /// names the work on the progress bar ("probe pods").
    pub fn run<T: Sync, R: Send>(
        &self,
        label: &str,
        items: &[T],
        f: impl Fn(&T) -> R + Sync,
    ) -> Vec<Option<R>> {
        self.run_streamed(label, items, f, |_| None)
    }

    /// [`Fanout::run`], and each result's `line` (if any) printed on stderr as it arrives, above the
    /// progress bar: a long run shows what it found while it goes, not only at the end.
    pub fn run_streamed<T: Sync, R: Send>(
        &self,
        label: &str,
        items: &[T],
        f: impl Fn(&T) -> R + Sync,
        line: impl Fn(&R) -> Option<String> + Sync,
    ) -> Vec<Option<R>> {
        let bar = progress(label, items.len());
        let next = AtomicUsize::new(0);
        let out: Mutex<Vec<Option<R>>> = Mutex::new(items.iter().map(|_| None).collect());
        let workers = self.parallel.max(1).min(items.len());
        std::thread::scope(|s| {
            for _ in 0..workers {
                s.spawn(|| {
                    loop {
                        if self.deadline.is_some_and(|d| Instant::now() >= d) {
                            return;
                        }
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(item) = items.get(i) else { return };
                        let r = f(item);
                        if let Some(l) = line(&r) {
                            // A hidden bar (stderr not a terminal) prints nothing of its own.
                            if bar.is_hidden() {
                                eprintln!("{l}");
                            } else {
                                bar.println(l);
                            }
                        }
                        if let Ok(mut o) = out.lock() {
                            o[i] = Some(r);
                        }
                        bar.inc(1);
                    }
                });
            }
        });
        bar.finish_and_clear();
        out.into_inner().unwrap_or_else(|p| p.into_inner())
    }
}

fn progress(label: &str, len: usize) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(len as u64), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template("{elapsed:>4} {msg} {bar:30} {pos}/{len}") {
        bar.set_style(style);
    }
    bar.set_message(label.to_owned());
    bar
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn results_keep_item_order_and_no_more_than_parallel_run_at_once() {
        let running = AtomicUsize::new(0);
        let peak = AtomicUsize::new(0);
        let items: Vec<u32> = (0..40).collect();
        let out = Fanout {
            parallel: 4,
            deadline: None,
        }
        .run("t", &items, |i| {
            let now = running.fetch_add(1, Ordering::SeqCst) + 1;
            peak.fetch_max(now, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(u64::from(i % 3) * 5));
            running.fetch_sub(1, Ordering::SeqCst);
            i * 2
        });
        let got: Vec<u32> = out.into_iter().map(Option::unwrap).collect();
        assert_eq!(got, items.iter().map(|i| i * 2).collect::<Vec<_>>());
        assert!(peak.load(Ordering::SeqCst) <= 4, "{peak:?}");
        assert!(peak.load(Ordering::SeqCst) >= 2, "{peak:?}");
    }

    #[test]
    fn items_the_deadline_leaves_unstarted_come_back_as_none() {
        let items: Vec<u32> = (0..20).collect();
        let out = Fanout {
            parallel: 2,
            deadline: Some(Instant::now() + Duration::from_millis(150)),
        }
        .run("t", &items, |_| {
            std::thread::sleep(Duration::from_millis(100))
        });
        let done = out.iter().filter(|r| r.is_some()).count();
        // Two workers start at 0 ms and at 100 ms; nothing starts at 200 ms.
        assert_eq!(done, 4, "{out:?}");
        assert!(out[..done].iter().all(Option::is_some));
    }

    #[test]
    fn the_default_width_follows_the_cluster() {
        assert_eq!(Fanout::sized(10, None, None).parallel, 8);
        assert_eq!(Fanout::sized(200, None, None).parallel, 25);
        assert_eq!(Fanout::sized(5000, None, None).parallel, 64);
        assert_eq!(Fanout::sized(5000, Some(3), None).parallel, 3);
        assert_eq!(Fanout::sized(5000, Some(0), None).parallel, 1);
    }
}
