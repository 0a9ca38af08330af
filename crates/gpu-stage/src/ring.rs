//! The staging ring: host buffers plus the gate that says who owns each one.
//!
//! Ownership protocol (the whole crate relies on it): a slot is *free* or *busy*. Whoever fills a
//! slot first acquires it ([`StagingRing::acquire`]: the sending pipeline before its device→host
//! copy; a receiving transport before it writes network data into it) and gets the slot's
//! [`SlotToken`]; the token travels with the chunk, and whoever finishes reading the slot drops it,
//! which releases the slot (a sending transport once the bytes left; the receiving pipeline once
//! its host→device copy completed). Between acquire and release exactly one party touches the
//! bytes, so no lock is held while data moves.
//!
//! A token is the only way to release a slot and the only safe way to reach its bytes
//! ([`SlotToken::bytes`], [`SlotToken::bytes_mut`]). It cannot be cloned or made outside this
//! crate, so code outside the crate cannot free a slot that a copy engine, a NIC or a transport
//! thread of this crate is still using:
//!
//! ```compile_fail,E0624
//! # fn f(ring: &std::sync::Arc<gpu_stage::StagingRing>) {
//! ring.gate().release(0); // private: only dropping the slot's token releases it
//! # }
//! ```
//!
//! Inside the crate, a token whose slot may still be the target or source of a queued device copy
//! is kept (not dropped) until the copy stream has drained; if draining fails, the token is leaked
//! and the slot stays busy rather than being handed out while a copy may still touch it.
//!
//! One thing a token cannot promise: a ring registered for remote writes (the RDMA receiver) trusts
//! its peer to write only into slots it was granted a credit for. Such a ring is marked
//! ([`StagingRing::expose_to_remote_writes`], before the registration) and from then on refuses the
//! safe slices ([`StageError::RemotelyWritable`]): a peer that writes without a credit could change
//! the bytes under a live `&[u8]`, which safe code must never see. The copy paths of this crate only
//! hand raw pointers to the driver; [`SlotToken::bytes_unchecked`] is the `unsafe` way in for callers
//! that trust their peer.

use std::alloc::Layout;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use cudarc::driver::PinnedHostSlice;

use crate::config::RingConfig;
use crate::error::StageError;

/// Alignment of heap-backed buffers: a page, so that they can be registered as RDMA memory regions.
const PAGE: usize = 4096;

/// One host buffer: page-locked (CUDA backend) or page-aligned heap memory (host backend).
#[derive(Debug)]
pub struct HostBuffer {
    ptr: NonNull<u8>,
    len: usize,
    owner: Owner,
}

#[derive(Debug)]
enum Owner {
    Heap(Layout),
    // Kept only for its Drop (cuMemFreeHost) and to keep the CUDA context alive.
    Pinned(#[allow(dead_code)] PinnedHostSlice<u8>),
    /// Memory owned by someone else (`HostMemory::borrowed`): never freed here.
    Borrowed,
}

// SAFETY: the buffer is plain memory with a single owner; concurrent access is governed by the
// SlotGate protocol described in the module docs.
unsafe impl Send for HostBuffer {}
// SAFETY: as above; `&HostBuffer` only hands out raw pointers.
unsafe impl Sync for HostBuffer {}

impl HostBuffer {
    /// Zeroed, page-aligned heap memory.
    pub(crate) fn heap(len: usize) -> Result<Self, StageError> {
        let layout = Layout::from_size_align(len.max(1), PAGE)
            .map_err(|e| StageError::config("chunk_bytes", len, e.to_string()))?;
        // SAFETY: layout has non-zero size.
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or_else(|| StageError::Copy {
            op: "host buffer allocation",
            detail: format!("out of memory allocating {len} bytes"),
        })?;
        Ok(HostBuffer {
            ptr,
            len,
            owner: Owner::Heap(layout),
        })
    }

    /// Takes over a pinned allocation made through cudarc.
    pub(crate) fn pinned(mut slice: PinnedHostSlice<u8>) -> Result<Self, StageError> {
        let len = slice.len();
        let raw = slice
            .as_mut_ptr()
            .map_err(StageError::cuda("pinned host buffer access"))?;
        let ptr = NonNull::new(raw).ok_or_else(|| StageError::Copy {
            op: "pinned host allocation",
            detail: "driver returned a null pointer".into(),
        })?;
        // cuMemHostAlloc returns uninitialised memory, and `SlotToken::bytes` gives safe code a slice
        // over a slot before any copy wrote it (issue 26, F9): zero it once, here, before anyone can.
        // SAFETY: `raw` is the start of the `len`-byte allocation `slice` owns; nothing else has it yet.
        unsafe { std::ptr::write_bytes(raw, 0, len) };
        Ok(HostBuffer {
            ptr,
            len,
            owner: Owner::Pinned(slice),
        })
    }

    /// Wraps memory that somebody else owns; dropping the buffer does not free it.
    ///
    /// # Safety
    /// `ptr..ptr+len` must be valid for reads and writes, and must stay allocated and untouched by
    /// anyone else for the whole life of the returned buffer.
    pub(crate) unsafe fn borrowed(ptr: NonNull<u8>, len: usize) -> Self {
        HostBuffer {
            ptr,
            len,
            owner: Owner::Borrowed,
        }
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a zero-length buffer (never produced by a valid ring).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// True when the memory is page-locked by the CUDA driver.
    pub fn is_page_locked(&self) -> bool {
        matches!(self.owner, Owner::Pinned(_))
    }

    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

impl Drop for HostBuffer {
    fn drop(&mut self) {
        if let Owner::Heap(layout) = self.owner {
            // SAFETY: allocated in `heap` with this layout and not freed elsewhere.
            unsafe { std::alloc::dealloc(self.ptr.as_ptr(), layout) };
        }
        // Pinned: PinnedHostSlice's own Drop frees it. Borrowed: the owner frees it.
    }
}

/// A raw view of one ring buffer, for registering it with a NIC (e.g. as an RDMA memory region).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawRegion {
    /// First byte of the buffer.
    pub addr: *mut u8,
    /// Length of the buffer in bytes (the ring's chunk size).
    pub len: usize,
}

/// Per-slot busy flags with blocking acquire and a sticky failure. Slots are acquired through
/// [`StagingRing::acquire`] and released by dropping their [`SlotToken`]; the gate itself only
/// reports and records failures.
#[derive(Debug)]
pub struct SlotGate {
    state: Mutex<GateState>,
    changed: Condvar,
}

#[derive(Debug)]
struct GateState {
    busy: Vec<bool>,
    failure: Option<String>,
}

impl SlotGate {
    fn new(slots: usize) -> Self {
        SlotGate {
            state: Mutex::new(GateState {
                busy: vec![false; slots],
                failure: None,
            }),
            changed: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, GateState> {
        // A panic while holding this lock cannot leave the flags half-updated (single stores).
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits until `slot` is free and marks it busy: `Ok(true)` when acquired, `Ok(false)` when it
    /// stayed busy until `deadline` (`None` waits for as long as it takes). Private: the only
    /// callers are [`StagingRing::acquire`] and [`StagingRing::acquire_timeout`], which wrap the
    /// result in a [`SlotToken`].
    fn acquire_until(&self, slot: usize, deadline: Option<Instant>) -> Result<bool, StageError> {
        let mut st = self.lock();
        if slot >= st.busy.len() {
            return Err(StageError::config(
                "slot",
                slot,
                format!("the ring has {} slots", st.busy.len()),
            ));
        }
        loop {
            if let Some(msg) = &st.failure {
                return Err(StageError::Aborted(msg.clone()));
            }
            if !st.busy[slot] {
                st.busy[slot] = true;
                return Ok(true);
            }
            st = match deadline {
                None => self
                    .changed
                    .wait(st)
                    .unwrap_or_else(PoisonError::into_inner),
                Some(deadline) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Ok(false);
                    }
                    self.changed
                        .wait_timeout(st, left)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
            };
        }
    }

    /// Marks `slot` free again and wakes waiters. Private: only [`SlotToken`]'s drop calls it, so
    /// only the owner of a slot can free it.
    fn release(&self, slot: usize) {
        let mut st = self.lock();
        if let Some(b) = st.busy.get_mut(slot) {
            *b = false;
        }
        drop(st);
        self.changed.notify_all();
    }

    /// Whether `slot` is currently owned by someone.
    pub fn is_busy(&self, slot: usize) -> bool {
        self.lock().busy.get(slot).copied().unwrap_or(false)
    }

    /// Number of busy slots.
    pub fn busy_count(&self) -> usize {
        self.lock().busy.iter().filter(|b| **b).count()
    }

    /// Records a failure (the first one wins) and wakes every waiter so it can bail out.
    pub fn fail(&self, message: impl Into<String>) {
        let mut st = self.lock();
        if st.failure.is_none() {
            st.failure = Some(message.into());
        }
        drop(st);
        self.changed.notify_all();
    }

    /// The recorded failure, if any.
    pub fn failure(&self) -> Option<String> {
        self.lock().failure.clone()
    }

    /// Returns an error if the gate has failed.
    pub fn check(&self) -> Result<(), StageError> {
        match self.failure() {
            Some(msg) => Err(StageError::Aborted(msg)),
            None => Ok(()),
        }
    }
}

/// `slots` host buffers of `chunk_bytes` each, plus the [`SlotGate`] that tracks their owners.
///
/// Shared through `Arc` by a pipeline and its transport, and in-process by both pipelines.
#[derive(Debug)]
pub struct StagingRing {
    buffers: Vec<HostBuffer>,
    config: RingConfig,
    gate: SlotGate,
    /// Set (for good) before the buffers are registered for remote writes: safe slices are refused.
    remote_writable: AtomicBool,
}

impl StagingRing {
    pub(crate) fn from_buffers(config: RingConfig, buffers: Vec<HostBuffer>) -> Arc<Self> {
        Arc::new(StagingRing {
            gate: SlotGate::new(buffers.len()),
            buffers,
            config,
            remote_writable: AtomicBool::new(false),
        })
    }

    /// A ring of page-aligned heap buffers (host backend, tests, transports without a GPU).
    pub fn heap(config: RingConfig) -> Result<Arc<Self>, StageError> {
        config.validate()?;
        let buffers = (0..config.slots)
            .map(|_| HostBuffer::heap(config.chunk_bytes))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self::from_buffers(config, buffers))
    }

    /// The ring's geometry.
    pub fn config(&self) -> RingConfig {
        self.config
    }

    /// Bytes per buffer.
    pub fn chunk_bytes(&self) -> usize {
        self.config.chunk_bytes
    }

    /// Number of buffers.
    pub fn slots(&self) -> usize {
        self.buffers.len()
    }

    /// True when every buffer is page-locked by the CUDA driver.
    pub fn is_page_locked(&self) -> bool {
        self.buffers.iter().all(HostBuffer::is_page_locked)
    }

    /// The ownership gate (busy flags and the sticky failure).
    pub fn gate(&self) -> &SlotGate {
        &self.gate
    }

    /// Blocks until `slot` is free, then takes it: the returned token owns the slot until it is
    /// dropped. Fails at once if the gate has failed or `slot` is out of range.
    pub fn acquire(self: &Arc<Self>, slot: usize) -> Result<SlotToken, StageError> {
        self.gate.acquire_until(slot, None)?;
        Ok(SlotToken::new(self, slot))
    }

    /// Like [`StagingRing::acquire`], but gives up after `timeout`: `Ok(None)` when the slot stayed
    /// busy (a zero timeout only tries once). Lets a transport thread that acquires slots ahead of
    /// the pipeline notice a stop request instead of blocking forever.
    pub fn acquire_timeout(
        self: &Arc<Self>,
        slot: usize,
        timeout: Duration,
    ) -> Result<Option<SlotToken>, StageError> {
        let got = self
            .gate
            .acquire_until(slot, Some(Instant::now() + timeout))?;
        Ok(got.then(|| SlotToken::new(self, slot)))
    }

    /// Marks the ring as registered for remote writes, for good: from now on [`SlotToken::bytes`]
    /// and [`SlotToken::bytes_mut`] fail with [`StageError::RemotelyWritable`]. Call it before the
    /// registration (the RDMA receiver does): once a peer holds a key, it can write any slot at any
    /// time, credit or not.
    pub fn expose_to_remote_writes(&self) {
        self.remote_writable.store(true, Ordering::SeqCst);
    }

    /// Whether [`StagingRing::expose_to_remote_writes`] was called.
    pub fn is_remote_writable(&self) -> bool {
        self.remote_writable.load(Ordering::SeqCst)
    }

    /// Address and length of buffer `slot`, for registering it once with a NIC; `None` past the end.
    ///
    /// # Safety
    /// The caller must:
    /// - keep this ring alive (an `Arc` to it) for as long as it uses the pointer, and for as long
    ///   as a registration over it exists (the NIC may still DMA until it is deregistered);
    /// - read, write or let a NIC DMA through it only while it owns `slot` under the [`SlotGate`]
    ///   protocol (module docs), i.e. between acquire and release;
    /// - call [`StagingRing::expose_to_remote_writes`] before registering the region for remote
    ///   writes (a peer could then write it outside that window, and the safe slices must be off);
    /// - not register the same region twice in ways whose uses overlap (two owners of one slot).
    pub unsafe fn raw_region(&self, slot: usize) -> Option<RawRegion> {
        self.buffers.get(slot).map(|b| RawRegion {
            addr: b.as_ptr(),
            len: b.len(),
        })
    }

    pub(crate) fn checked(&self, slot: usize, len: usize) -> Result<(*mut u8, usize), StageError> {
        let buf = self.buffers.get(slot).ok_or_else(|| {
            StageError::config("slot", slot, format!("the ring has {} slots", self.slots()))
        })?;
        if len > buf.len() {
            return Err(StageError::OutOfBounds {
                what: "staging buffer",
                offset: 0,
                end: len as u64,
                size: buf.len() as u64,
            });
        }
        Ok((buf.as_ptr(), len))
    }
}

/// Ownership of one ring slot, from [`StagingRing::acquire`] until drop (which releases the slot
/// and wakes whoever waits for it). See the module docs for who holds it when.
#[must_use = "dropping a SlotToken releases its slot at once"]
pub struct SlotToken {
    ring: Arc<StagingRing>,
    slot: usize,
}

impl std::fmt::Debug for SlotToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlotToken")
            .field("slot", &self.slot)
            .finish_non_exhaustive()
    }
}

impl SlotToken {
    fn new(ring: &Arc<StagingRing>, slot: usize) -> Self {
        SlotToken {
            ring: Arc::clone(ring),
            slot,
        }
    }

    /// The slot this token owns.
    pub fn slot(&self) -> usize {
        self.slot
    }

    /// The ring the slot belongs to.
    pub fn ring(&self) -> &Arc<StagingRing> {
        &self.ring
    }

    /// The first `len` bytes of the slot. Fails with [`StageError::OutOfBounds`] past the buffer, and
    /// with [`StageError::RemotelyWritable`] on a ring registered for remote writes (a peer could
    /// change the bytes under the slice).
    pub fn bytes(&self, len: usize) -> Result<&[u8], StageError> {
        self.refuse_remote()?;
        // SAFETY: no remote writer (checked above, and the flag is only ever set, before any
        // registration); the rest is `bytes_unchecked`'s contract, which the token upholds.
        unsafe { self.bytes_unchecked(len) }
    }

    /// The first `len` bytes of the slot, writable. Fails like [`SlotToken::bytes`].
    pub fn bytes_mut(&mut self, len: usize) -> Result<&mut [u8], StageError> {
        self.refuse_remote()?;
        // SAFETY: as in `bytes`.
        unsafe { self.bytes_mut_unchecked(len) }
    }

    /// [`SlotToken::bytes`] without the remote-write check: fails only past the buffer.
    ///
    /// # Safety
    /// Nothing may write the slot while the returned slice lives: on a ring registered for remote
    /// writes the caller must know that the peer writes this slot only with a credit this end granted
    /// for it, and that no such credit is outstanding (honest peers of this crate's RDMA transport
    /// keep to that; a broken or hostile one need not).
    pub unsafe fn bytes_unchecked(&self, len: usize) -> Result<&[u8], StageError> {
        let (ptr, len) = self.ring.checked(self.slot, len)?;
        // SAFETY: in bounds (checked) of a buffer the ring keeps alive (we hold an Arc), initialised
        // (zeroed at allocation). The token owns the slot: nobody else can acquire it, and this crate
        // queues device copies or NIC DMA into a slot only while its own code holds the slot's token
        // (never while the token is borrowed here, since that needs the token); remote writers are the
        // caller's promise. Writes through the token need `&mut self`.
        Ok(unsafe { std::slice::from_raw_parts(ptr, len) })
    }

    /// [`SlotToken::bytes_mut`] without the remote-write check: fails only past the buffer.
    ///
    /// # Safety
    /// As for [`SlotToken::bytes_unchecked`]: nothing else may read or write the slot while the
    /// returned slice lives.
    pub unsafe fn bytes_mut_unchecked(&mut self, len: usize) -> Result<&mut [u8], StageError> {
        let (ptr, len) = self.ring.checked(self.slot, len)?;
        // SAFETY: as in `bytes_unchecked`; `&mut self` excludes every other view through this token,
        // and the token is the slot's only owner.
        Ok(unsafe { std::slice::from_raw_parts_mut(ptr, len) })
    }

    fn refuse_remote(&self) -> Result<(), StageError> {
        if self.ring.is_remote_writable() {
            return Err(StageError::RemotelyWritable { slot: self.slot });
        }
        Ok(())
    }

    /// Start of the slot's first `len` bytes, for a device copy queued by this crate (which keeps
    /// the token until the copy finished).
    pub(crate) fn ptr(&self, len: usize) -> Result<*mut u8, StageError> {
        self.ring.checked(self.slot, len).map(|(p, _)| p)
    }

    /// Keeps the slot busy for good and the ring's memory allocated: for a slot that a copy which
    /// could not be waited for may still touch.
    pub(crate) fn leak(self) {
        std::mem::forget(self);
    }
}

impl Drop for SlotToken {
    fn drop(&mut self) {
        self.ring.gate.release(self.slot);
    }
}

/// Tokens whose slots queued device copies may still use: kept until the copy stream drained,
/// then released by [`HeldSlots::settle`], or leaked if draining failed. Dropped without being settled
/// (a panic unwinding past the pipeline), it leaks what it holds: a slot a copy may still write is never
/// handed to another acquirer.
#[derive(Debug, Default)]
pub(crate) struct HeldSlots(Mutex<Vec<SlotToken>>);

impl Drop for HeldSlots {
    fn drop(&mut self) {
        let tokens = std::mem::take(self.0.get_mut().unwrap_or_else(PoisonError::into_inner));
        tokens.into_iter().for_each(SlotToken::leak);
    }
}

/// A slot queued behind a device copy that may still run, on its way to the transport. Taken with
/// [`Queued::into_token`] once the copy is known to be done; dropped without that (a queue dropped by an
/// unwinding transport), the token goes to its [`HeldSlots`] rather than back to the ring.
#[derive(Debug)]
pub(crate) struct Queued<'h> {
    token: Option<SlotToken>,
    held: &'h HeldSlots,
}

impl Queued<'_> {
    /// The token: the caller has seen the copy that used the slot complete.
    pub(crate) fn into_token(mut self) -> Option<SlotToken> {
        self.token.take()
    }
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        if let Some(t) = self.token.take() {
            self.held.keep(t);
        }
    }
}

impl HeldSlots {
    /// `token` wrapped for a queue: held here if it is dropped before [`Queued::into_token`].
    pub(crate) fn queue(&self, token: SlotToken) -> Queued<'_> {
        Queued {
            token: Some(token),
            held: self,
        }
    }

    pub(crate) fn keep(&self, token: SlotToken) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(token);
    }

    pub(crate) fn keep_all(&self, tokens: impl IntoIterator<Item = SlotToken>) {
        for t in tokens {
            self.keep(t);
        }
    }

    /// Releases the held slots if `drained` (the copies that used them finished), else leaks them.
    pub(crate) fn settle(self, drained: bool) {
        let tokens = std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner));
        if !drained {
            tokens.into_iter().for_each(SlotToken::leak);
        }
        // `self` drops empty.
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::MIB;
    use std::time::Duration;

    #[test]
    fn heap_ring_is_aligned_and_sized() {
        let ring = StagingRing::heap(RingConfig::new(MIB, 3).unwrap()).unwrap();
        assert_eq!(ring.slots(), 3);
        assert!(!ring.is_page_locked());
        for s in 0..3 {
            // SAFETY: only the address and length are read; nothing goes through the pointer.
            let r = unsafe { ring.raw_region(s) }.unwrap();
            assert_eq!(r.len, MIB);
            assert_eq!(r.addr as usize % PAGE, 0);
        }
        // SAFETY: as above (and past the end there is no region at all).
        assert!(unsafe { ring.raw_region(3) }.is_none());
        let t = ring.acquire(0).unwrap();
        assert!(t.bytes(MIB + 1).is_err());
        assert_eq!(t.bytes(MIB).unwrap().len(), MIB);
        assert!(ring.acquire(9).is_err());
    }

    /// Issue 26, F4: before, `bytes`/`bytes_mut` were safe slices over a slot that a peer holding the
    /// ring's keys could write at any time (no check existed: both returned `Ok`).
    #[test]
    fn a_ring_exposed_to_remote_writes_refuses_safe_slices() {
        let ring = StagingRing::heap(RingConfig::new(MIB, 2).unwrap()).unwrap();
        let mut t = ring.acquire(1).unwrap();
        assert!(t.bytes(16).is_ok() && t.bytes_mut(16).is_ok());
        ring.expose_to_remote_writes();
        assert!(ring.is_remote_writable());
        let e = t.bytes(16).unwrap_err();
        assert!(matches!(e, StageError::RemotelyWritable { slot: 1 }), "{e}");
        assert!(
            e.to_string().contains("registered for remote writes"),
            "{e}"
        );
        assert!(matches!(
            t.bytes_mut(16),
            Err(StageError::RemotelyWritable { slot: 1 })
        ));
        // SAFETY: no registration exists (nothing can write the heap buffer but this token).
        assert_eq!(unsafe { t.bytes_unchecked(16) }.unwrap(), &[0u8; 16]);
        // SAFETY: as above.
        assert!(unsafe { t.bytes_mut_unchecked(MIB + 1) }.is_err());
    }

    #[test]
    fn gate_blocks_until_the_token_is_dropped() {
        let ring = StagingRing::heap(RingConfig::new(MIB, 2).unwrap()).unwrap();
        let held = ring.acquire(1).unwrap();
        assert!(ring.gate().is_busy(1));
        assert!(ring.acquire_timeout(1, Duration::ZERO).unwrap().is_none());
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            drop(held);
        });
        let start = std::time::Instant::now();
        let again = ring.acquire(1).unwrap();
        assert!(start.elapsed() >= Duration::from_millis(40));
        assert_eq!(again.slot(), 1);
        t.join().unwrap();
        drop(again);
        assert_eq!(ring.gate().busy_count(), 0);
    }

    #[test]
    fn held_slots_are_released_after_a_drain_and_leaked_without_one() {
        let ring = StagingRing::heap(RingConfig::new(MIB, 2).unwrap()).unwrap();
        let held = HeldSlots::default();
        held.keep(ring.acquire(0).unwrap());
        held.settle(true);
        assert!(!ring.gate().is_busy(0));
        if cfg!(miri) {
            // The rest leaks the ring on purpose (a slot the NIC may still use), which Miri reports.
            return;
        }
        let held = HeldSlots::default();
        held.keep_all([ring.acquire(1).unwrap()]);
        held.settle(false);
        assert!(ring.gate().is_busy(1), "a possibly in-use slot stays busy");
        assert!(ring.acquire_timeout(1, Duration::ZERO).unwrap().is_none());
    }

    #[test]
    fn gate_failure_wakes_waiters_and_sticks() {
        let ring = StagingRing::heap(RingConfig::new(MIB, 2).unwrap()).unwrap();
        let _held = ring.acquire(0).unwrap();
        let r2 = Arc::clone(&ring);
        let t = std::thread::spawn(move || r2.acquire(0).map(|_| ()));
        std::thread::sleep(Duration::from_millis(20));
        ring.gate().fail("peer vanished");
        let err = t.join().unwrap().unwrap_err();
        assert!(err.to_string().contains("peer vanished"));
        assert!(ring.acquire(1).is_err());
        ring.gate().fail("second");
        assert_eq!(ring.gate().failure().unwrap(), "peer vanished");
    }
}
