//! The staging ring: host buffers plus the gate that says who owns each one.
//!
//! Ownership protocol (the whole crate relies on it): a slot is *free* or *busy*. Whoever fills a
//! slot first [`SlotGate::acquire`]s it (the sending pipeline before its device→host copy; a
//! receiving transport before it writes network data into it); whoever finishes reading it
//! [`SlotGate::release`]s it (a sending transport once the bytes left; the receiving pipeline once
//! its host→device copy completed). Between acquire and release exactly one party touches the
//! bytes, so no lock is held while data moves.

use std::alloc::Layout;
use std::ptr::NonNull;
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
        Ok(HostBuffer {
            ptr,
            len,
            owner: Owner::Pinned(slice),
        })
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
        // Pinned: PinnedHostSlice's own Drop frees it.
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

/// Per-slot busy flags with blocking acquire and a sticky failure.
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

    /// Blocks until `slot` is free, then marks it busy. Fails at once if the gate has failed.
    pub fn acquire(&self, slot: usize) -> Result<(), StageError> {
        self.acquire_until(slot, None).map(|_| ())
    }

    /// Like [`SlotGate::acquire`], but gives up after `timeout`: `Ok(true)` when the slot was
    /// acquired, `Ok(false)` when it stayed busy (a zero timeout only tries once). Fails at once if
    /// the gate has failed or `slot` is out of range. Lets a transport thread that acquires slots
    /// ahead of the pipeline notice a stop request instead of blocking forever.
    pub fn acquire_timeout(&self, slot: usize, timeout: Duration) -> Result<bool, StageError> {
        self.acquire_until(slot, Some(Instant::now() + timeout))
    }

    /// The wait behind both: `deadline` `None` waits for as long as it takes.
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

    /// Marks `slot` free again and wakes waiters. Releasing a free or unknown slot is ignored.
    pub fn release(&self, slot: usize) {
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
}

impl StagingRing {
    pub(crate) fn from_buffers(config: RingConfig, buffers: Vec<HostBuffer>) -> Arc<Self> {
        Arc::new(StagingRing {
            gate: SlotGate::new(buffers.len()),
            buffers,
            config,
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

    /// The ownership gate.
    pub fn gate(&self) -> &SlotGate {
        &self.gate
    }

    /// Address and length of buffer `slot`, for registering it once with a NIC; `None` past the end.
    ///
    /// # Safety
    /// The pointer stays valid for as long as this ring lives (keep an `Arc` to it). Reading or
    /// writing through it is only sound while the caller owns `slot` under the [`SlotGate`]
    /// protocol (module docs); a NIC may DMA into it only between acquire and release.
    pub unsafe fn raw_region(&self, slot: usize) -> Option<RawRegion> {
        self.buffers.get(slot).map(|b| RawRegion {
            addr: b.as_ptr(),
            len: b.len(),
        })
    }

    /// The first `len` bytes of buffer `slot`.
    ///
    /// # Safety
    /// The caller must own `slot` under the gate protocol and nobody may write it meanwhile.
    pub unsafe fn slot_bytes(&self, slot: usize, len: usize) -> Result<&[u8], StageError> {
        let (ptr, len) = self.checked(slot, len)?;
        // SAFETY: in bounds (checked); aliasing guaranteed by the caller.
        Ok(unsafe { std::slice::from_raw_parts(ptr, len) })
    }

    /// The first `len` bytes of buffer `slot`, writable.
    ///
    /// # Safety
    /// The caller must own `slot` under the gate protocol; no other reference to it may exist.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn slot_bytes_mut(&self, slot: usize, len: usize) -> Result<&mut [u8], StageError> {
        let (ptr, len) = self.checked(slot, len)?;
        // SAFETY: in bounds (checked); exclusivity guaranteed by the caller.
        Ok(unsafe { std::slice::from_raw_parts_mut(ptr, len) })
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
            let r = unsafe { ring.raw_region(s) }.unwrap();
            assert_eq!(r.len, MIB);
            assert_eq!(r.addr as usize % PAGE, 0);
        }
        assert!(unsafe { ring.raw_region(3) }.is_none());
        assert!(unsafe { ring.slot_bytes(0, MIB + 1) }.is_err());
        assert!(unsafe { ring.slot_bytes(9, 1) }.is_err());
    }

    #[test]
    fn gate_blocks_until_release() {
        let ring = StagingRing::heap(RingConfig::new(MIB, 2).unwrap()).unwrap();
        ring.gate().acquire(1).unwrap();
        assert!(ring.gate().is_busy(1));
        let r2 = Arc::clone(&ring);
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            r2.gate().release(1);
        });
        let start = std::time::Instant::now();
        ring.gate().acquire(1).unwrap();
        assert!(start.elapsed() >= Duration::from_millis(40));
        t.join().unwrap();
    }

    #[test]
    fn gate_failure_wakes_waiters_and_sticks() {
        let ring = StagingRing::heap(RingConfig::new(MIB, 2).unwrap()).unwrap();
        ring.gate().acquire(0).unwrap();
        let r2 = Arc::clone(&ring);
        let t = std::thread::spawn(move || r2.gate().acquire(0));
        std::thread::sleep(Duration::from_millis(20));
        ring.gate().fail("peer vanished");
        let err = t.join().unwrap().unwrap_err();
        assert!(err.to_string().contains("peer vanished"));
        assert!(ring.gate().acquire(1).is_err());
        ring.gate().fail("second");
        assert_eq!(ring.gate().failure().unwrap(), "peer vanished");
    }
}
