//! A cancellation flag shared by the script thread (checked between Rhai operations) and async cluster
//! actions (awaited in `select!`), set by Ctrl-C.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::Notify;

/// Cloneable cancellation token.
#[derive(Debug, Clone, Default)]
pub struct Cancel(Arc<Inner>);

#[derive(Debug, Default)]
struct Inner {
    flag: AtomicBool,
    notify: Notify,
}

impl Cancel {
    /// A token that is not cancelled.
    pub fn new() -> Self {
        Self::default()
    }

    /// Cancels: wakes every waiting action and makes the script stop at its next operation.
    pub fn cancel(&self) {
        self.0.flag.store(true, Ordering::SeqCst);
        self.0.notify.notify_waiters();
    }

    /// Clears a cancellation so that cleanup after Ctrl-C can still talk to the cluster.
    pub fn clear(&self) {
        self.0.flag.store(false, Ordering::SeqCst);
    }

    /// True once cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.0.flag.load(Ordering::SeqCst)
    }

    /// Resolves when cancelled.
    pub async fn cancelled(&self) {
        loop {
            // Create the waiter before checking the flag so a cancel in between is not missed.
            let notified = self.0.notify.notified();
            if self.is_cancelled() {
                return;
            }
            notified.await;
        }
    }
}
