//! Slot acquisition in chunk order, shared by the receiver's reader threads (one per connection).

use std::sync::{Arc, Condvar, Mutex, PoisonError};

use crate::error::TransportError;
use crate::ring::{SlotToken, StagingRing};

/// State shared by the reader threads: the ring to fill and the acquisition ticket.
///
/// Slots must be acquired in global chunk order: if reader A took slot `s` for chunk `k + N`
/// before reader B took it for chunk `k`, chunk `k` could never land and `k + N` could never be
/// delivered in order (deadlock). The ticket serialises acquisitions, not reads.
#[derive(Debug, Default)]
pub(super) struct Shared {
    state: Mutex<SharedState>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct SharedState {
    ring: Option<Arc<StagingRing>>,
    /// Global index (over all transfers of this transport) of the next chunk to acquire a slot.
    next_acquire: u64,
    /// The transfer `next_chunk` is receiving (transfers before it are complete). A reader never
    /// reads a frame of a later one: an honest sender waits for the ACK first, so this bounds what a
    /// peer can queue (one END per connection) without a reader ever waiting on it.
    current: u64,
    failed: Option<String>,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, SharedState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn ring(&self) -> Result<Arc<StagingRing>, TransportError> {
        let mut g = self.lock();
        loop {
            if let Some(f) = &g.failed {
                return Err(TransportError::Aborted(f.clone()));
            }
            if let Some(r) = g.ring.as_ref() {
                return Ok(Arc::clone(r));
            }
            g = self.changed.wait(g).unwrap_or_else(PoisonError::into_inner);
        }
    }

    pub(super) fn current_transfer(&self) -> u64 {
        self.lock().current
    }

    pub(super) fn set_current_transfer(&self, transfer: u64) {
        self.lock().current = transfer;
    }

    pub(super) fn put_ring(&self, ring: &Arc<StagingRing>) {
        self.lock().ring = Some(Arc::clone(ring));
        self.changed.notify_all();
    }

    /// Waits for chunk `global`'s turn, then acquires `slot` (which may block: backpressure).
    pub(super) fn acquire_in_order(
        &self,
        ring: &Arc<StagingRing>,
        global: u64,
        slot: usize,
    ) -> Result<SlotToken, TransportError> {
        let mut g = self.lock();
        loop {
            if let Some(f) = &g.failed {
                return Err(TransportError::Aborted(f.clone()));
            }
            if g.next_acquire == global {
                break;
            }
            g = self.changed.wait(g).unwrap_or_else(PoisonError::into_inner);
        }
        drop(g);
        let r = ring
            .acquire(slot)
            .map_err(|e| TransportError::Aborted(e.to_string()));
        self.lock().next_acquire += 1;
        self.changed.notify_all();
        r
    }

    pub(super) fn fail(&self, why: &str) {
        let ring = {
            let mut g = self.lock();
            if g.failed.is_some() {
                return;
            }
            g.failed = Some(why.to_string());
            g.ring.clone()
        };
        self.changed.notify_all();
        if let Some(r) = ring {
            r.gate().fail(format!("TCP transport: {why}"));
        }
    }

    /// The receiver is gone: wakes every reader waiting for a ring or its turn (they then fail),
    /// without failing the ring's gate (the ring may outlive this transport).
    pub(super) fn close(&self, why: &str) {
        {
            let mut g = self.lock();
            if g.failed.is_none() {
                g.failed = Some(why.to_string());
            }
        }
        self.changed.notify_all();
    }
}
