//! One bounded pool of staging rings per process, shared by every channel and server session.
//!
//! Why: each session needs a ring (`RDMAKIT_CHUNK` × `RDMAKIT_SLOTS`, 32 MiB by default, page-locked
//! where there is a GPU). Allocating one per session costs a `cuMemHostAlloc` (tens of ms, and it
//! synchronises the device) and, with one session per peer, page-locked memory grows with the
//! number of peers. Here a closed session's ring goes back to the pool and the next session takes
//! it; all rings together stay under `RDMAKIT_PINNED_POOL`. A session that would pass the bound
//! waits (up to the channel's timeout, cut short by an abort) for another to give its ring back.
//!
//! A ring is handed out again only when nothing else holds it (`Arc::strong_count == 1`: no stale
//! abort handle can fail it under its next user), it never failed, no slot is busy, and it was
//! never exposed to remote (RDMA) writes; all checked when it is taken, since a session's abort
//! handle may fail it after the session gave it back.

use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use gpu_stage::{CudaDevice, StagingRing};

use crate::channel::AbortHandle;
use crate::config::{ChannelConfig, RingBackend};
use crate::error::BindError;

/// How often a waiting session looks again (rings come back when their last holder drops them,
/// which sends no signal).
const POLL: Duration = Duration::from_millis(10);

/// What a ring is: page-locked or heap, and its geometry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Kind {
    pinned: bool,
    chunk: usize,
    slots: usize,
}

impl Kind {
    fn bytes(self) -> u64 {
        (self.chunk as u64).saturating_mul(self.slots as u64)
    }
}

#[derive(Default)]
struct State {
    /// Bytes of every ring the pool made that is still counted (lent or idle).
    live: u64,
    idle: Vec<(Kind, Arc<StagingRing>)>,
    stats: PoolStats,
}

/// Counters of the process's pool.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Rings allocated.
    pub allocated: u64,
    /// Rings handed out again instead of allocated.
    pub reused: u64,
    /// Sessions that waited for room.
    pub waited: u64,
    /// Sessions refused after waiting a whole timeout.
    pub refused: u64,
    /// Bytes of the rings counted now (lent and idle).
    pub live_bytes: u64,
    /// Rings idle in the pool now.
    pub idle: u64,
}

fn state() -> MutexGuard<'static, State> {
    static POOL: OnceLock<Mutex<State>> = OnceLock::new();
    POOL.get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
}

/// This process's pool counters.
pub fn stats() -> PoolStats {
    let st = state();
    PoolStats {
        live_bytes: st.live,
        idle: st.idle.len() as u64,
        ..st.stats
    }
}

/// A ring lent to one session; dropping it gives the ring back (or forgets it if it cannot be
/// used again).
#[derive(Debug)]
pub struct Lease {
    ring: Arc<StagingRing>,
    kind: Kind,
}

impl Lease {
    /// The ring (clones go to the session's pipelines and its abort handle).
    pub fn ring(&self) -> &Arc<StagingRing> {
        &self.ring
    }
}

/// Whether `ring` can serve another session: it never failed (an abort or a transport error
/// fails a ring for good), no slot is held, and no NIC was ever allowed to write it.
fn reusable(ring: &StagingRing) -> bool {
    let gate = ring.gate();
    gate.failure().is_none() && gate.busy_count() == 0 && !ring.is_remote_writable()
}

impl Drop for Lease {
    fn drop(&mut self) {
        let mut st = state();
        if reusable(&self.ring) {
            st.idle.push((self.kind, Arc::clone(&self.ring)));
        } else {
            st.live = st.live.saturating_sub(self.kind.bytes());
        }
    }
}

fn wants_pinned(cfg: &ChannelConfig) -> bool {
    match cfg.backend {
        RingBackend::Host => false,
        RingBackend::Cuda => true,
        RingBackend::Auto => {
            gpu_stage::cuda_driver_present() && CudaDevice::count().is_ok_and(|n| n > 0)
        }
    }
}

/// A ring for a session configured by `cfg`: an idle one of the same kind, or a new one if the
/// pool has room (idle rings of other kinds are freed to make it), else waits for room.
pub fn take(cfg: &ChannelConfig, abort: &AbortHandle) -> Result<Lease, BindError> {
    let kind = Kind {
        pinned: wants_pinned(cfg),
        chunk: cfg.ring.chunk_bytes,
        slots: cfg.ring.slots,
    };
    let limit = cfg.pool_bytes;
    cfg.check_pool()?;
    let start = Instant::now();
    let mut waited = false;
    loop {
        {
            let mut st = state();
            // A ring failed after it came back (a holder that outlived its session fired an
            // abort) leaves the pool once nothing holds it.
            let State { idle, live, .. } = &mut *st;
            idle.retain(|(k, r)| {
                let dead = Arc::strong_count(r) == 1 && !reusable(r);
                if dead {
                    *live = live.saturating_sub(k.bytes());
                }
                !dead
            });
            // Nothing else holds it: no session, no stale abort handle.
            let free = |(k, r): &(Kind, Arc<StagingRing>)| *k == kind && Arc::strong_count(r) == 1;
            if let Some(pos) = st.idle.iter().position(free) {
                let (_, ring) = st.idle.swap_remove(pos);
                st.stats.reused += 1;
                return Ok(Lease { ring, kind });
            }
            // Room by freeing idle rings nobody holds, other kinds first.
            while st.live.saturating_add(kind.bytes()) > limit {
                let victim = st
                    .idle
                    .iter()
                    .position(|(k, r)| *k != kind && Arc::strong_count(r) == 1)
                    .or_else(|| st.idle.iter().position(|(_, r)| Arc::strong_count(r) == 1));
                let Some(pos) = victim else { break };
                let (k, _) = st.idle.swap_remove(pos);
                st.live = st.live.saturating_sub(k.bytes());
            }
            if st.live.saturating_add(kind.bytes()) <= limit {
                // Counted before the allocation, so parallel sessions cannot pass the bound.
                st.live += kind.bytes();
                st.stats.allocated += 1;
                drop(st);
                return match allocate(cfg, kind) {
                    Ok(ring) => Ok(Lease { ring, kind }),
                    Err(e) => {
                        let mut st = state();
                        st.live = st.live.saturating_sub(kind.bytes());
                        Err(e)
                    }
                };
            }
            if !waited {
                waited = true;
                st.stats.waited += 1;
            }
            if start.elapsed() >= cfg.timeout {
                st.stats.refused += 1;
                let lent = st.live / kind.bytes().max(1);
                return Err(BindError::Transport(gpu_stage::TransportError::Timeout {
                    after: cfg.timeout,
                    waiting_for: format!(
                        "room in the staging pool: {} MiB of rings in use by this process's \
                         sessions (about {lent} rings), RDMAKIT_PINNED_POOL is {} MiB; raise \
                         it, or let idle sessions close sooner (RDMAKIT_IDLE_S)",
                        st.live >> 20,
                        limit >> 20
                    ),
                }));
            }
        }
        abort.check()?;
        std::thread::sleep(POLL);
    }
}

fn allocate(cfg: &ChannelConfig, kind: Kind) -> Result<Arc<StagingRing>, BindError> {
    if kind.pinned {
        // Page-locked and PORTABLE: usable by every device's context in this process. Device 0 is
        // the actor's first visible GPU (Ray sets CUDA_VISIBLE_DEVICES).
        let dev = CudaDevice::new(0)?;
        Ok(gpu_stage::new_ring(&dev, cfg.ring)?)
    } else {
        Ok(StagingRing::heap(cfg.ring)?)
    }
}
