//! Memory regions (`ibv_reg_mr`) over owned buffers or externally allocated memory, and the slice types
//! that posts take.
//!
//! Ownership rules that make posting safe without `unsafe` at the call site:
//! - A source slice ([`Local`], for WRITE, WRITE_WITH_IMM, SEND) holds an `Arc` of its region until the
//!   completion is polled. While any post is in flight, [`MemoryRegion::get_mut`] returns
//!   [`Error::BufferShared`], so the CPU cannot modify memory the NIC is reading.
//! - A destination slice ([`Exclusive`], for READ and RECV) can only be made from the *only* handle to a
//!   region; the handle moves into the post and comes back in [`crate::Completion::buffer`].
//! - A region registered with [`Access::REMOTE_WRITE`] or [`Access::REMOTE_ATOMIC`] can be changed by the
//!   peer at any moment, whatever this process holds: no Rust reference to its bytes is sound without
//!   knowing the peer's protocol. [`MemoryRegion::as_slice`] and [`MemoryRegion::get_mut`] refuse such a
//!   region with [`Error::RemotelyWritable`]; [`MemoryRegion::read_into`] copies bytes out with volatile
//!   reads (always sound, possibly torn while the peer writes), and
//!   [`MemoryRegion::as_slice_unchecked`] / [`MemoryRegion::get_mut_unchecked`] are the `unsafe` views
//!   for callers whose protocol keeps the peer out (read after its WRITE_WITH_IMM, before the next credit).
//!
//! What is guaranteed: safe code in this crate never yields a `&[u8]` or `&mut [u8]` that the NIC may
//! write while it lives, and never one that local code may write while a `&[u8]` to it lives. What is not:
//! the *contents* of a region a peer can write; check them after the peer says they are complete.

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::fmt;
use std::ops::{BitOr, Range};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rdma_sys as sys;
use serde::{Deserialize, Serialize};

use crate::caps::{Caps, Feature};
use crate::error::{Error, Result};
use crate::pd::ProtectionDomain;

/// Access rights of a memory region (`ibv_access_flags`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Access(u32);

impl Access {
    /// The NIC may write locally (needed for READ and RECV destinations, and implied by remote write).
    pub const LOCAL_WRITE: Access = Access(1);
    /// The peer may WRITE into the region.
    pub const REMOTE_WRITE: Access = Access(1 << 1);
    /// The peer may READ the region.
    pub const REMOTE_READ: Access = Access(1 << 2);
    /// The peer may run atomics on the region (checked against [`Caps::atomics`]).
    pub const REMOTE_ATOMIC: Access = Access(1 << 3);
    /// Everything a bulk-transfer buffer usually needs: local write, remote write, remote read.
    pub const ALL_RDMA: Access = Access(1 | 2 | 4);

    /// The raw flag bits.
    pub fn bits(self) -> u32 {
        self.0
    }

    /// True if every flag of `other` is set.
    pub fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }
}

impl BitOr for Access {
    type Output = Access;
    fn bitor(self, rhs: Access) -> Access {
        Access(self.0 | rhs.0)
    }
}

/// A remote buffer as the peer advertises it: address, length and rkey. Serialisable for out-of-band
/// exchange next to an [`crate::Endpoint`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RemoteBuf {
    /// Virtual address in the peer's address space.
    pub addr: u64,
    /// Length in bytes.
    pub len: u64,
    /// Remote key.
    pub rkey: u32,
}

impl RemoteBuf {
    /// A sub-range of this buffer. Fails with [`Error::OutOfBounds`] if it does not fit.
    pub fn slice(&self, range: Range<u64>) -> Result<RemoteBuf> {
        if range.start > range.end || range.end > self.len {
            return Err(Error::OutOfBounds {
                which: "remote",
                start: range.start,
                end: range.end,
                len: self.len,
            });
        }
        Ok(RemoteBuf {
            addr: self.addr + range.start,
            len: range.end - range.start,
            rkey: self.rkey,
        })
    }

    /// Wire form: 20 bytes, little endian (fits in rdma_cm private data).
    pub fn to_bytes(&self) -> [u8; 20] {
        let mut b = [0u8; 20];
        b[..8].copy_from_slice(&self.addr.to_le_bytes());
        b[8..16].copy_from_slice(&self.len.to_le_bytes());
        b[16..].copy_from_slice(&self.rkey.to_le_bytes());
        b
    }

    /// Parses [`RemoteBuf::to_bytes`]; `None` if fewer than 20 bytes are given.
    pub fn from_bytes(b: &[u8]) -> Option<RemoteBuf> {
        let addr = u64::from_le_bytes(b.get(..8)?.try_into().ok()?);
        let len = u64::from_le_bytes(b.get(8..16)?.try_into().ok()?);
        let rkey = u32::from_le_bytes(b.get(16..20)?.try_into().ok()?);
        Some(RemoteBuf { addr, len, rkey })
    }
}

enum Backing {
    /// Page-aligned allocation owned by the region.
    Owned(Layout),
    /// Caller's memory; the owner value is dropped after deregistration.
    External(#[allow(dead_code)] Box<dyn Send + Sync>),
    /// Already released or leaked by [`release_backing`].
    Gone,
}

/// Frees (owned) or releases (external) the memory behind a region once `ibv_dereg_mr` succeeded. If it
/// failed, the NIC may still write into the memory: leak it, owner included, so that neither this crate
/// nor the owner (gpu-stage's ring, a `cuMemHostAlloc` buffer) frees memory that is still registered.
fn release_backing(backing: Backing, addr: *mut u8, deregistered: bool) {
    match backing {
        Backing::Owned(layout) if deregistered => {
            // SAFETY: allocated in `MemoryRegion::new` with this layout, freed only here, once.
            unsafe { dealloc(addr, layout) }
        }
        Backing::External(owner) if !deregistered => std::mem::forget(owner),
        // Owned and still registered: leaked by not freeing. External and deregistered: dropped here.
        Backing::Owned(_) | Backing::External(_) | Backing::Gone => {}
    }
}

/// Adds `len` to `counter` unless that would pass `cap`; on refusal returns the total that was asked
/// for. One atomic update, so concurrent registrations cannot pass the cap together.
fn reserve(counter: &AtomicU64, len: u64, cap: Option<u64>) -> std::result::Result<(), u64> {
    let cap = cap.unwrap_or(u64::MAX);
    counter
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |now| {
            now.checked_add(len).filter(|t| *t <= cap)
        })
        .map(|_| ())
        .map_err(|now| now.saturating_add(len))
}

/// Fails with [`Error::RemotelyWritable`] unless references to a region with `access` are sound without
/// knowing the peer's protocol.
fn check_local_view(access: Access, len: usize) -> Result<()> {
    if access.contains(Access::REMOTE_WRITE) || access.contains(Access::REMOTE_ATOMIC) {
        return Err(Error::RemotelyWritable { len });
    }
    Ok(())
}

/// A registered memory region. Holds its [`ProtectionDomain`]; deregisters on drop, then frees (owned)
/// or releases (external) the memory.
pub struct MemoryRegion {
    mr: *mut sys::ibv_mr,
    addr: *mut u8,
    len: usize,
    access: Access,
    backing: Backing,
    pd: Arc<ProtectionDomain>,
}

// SAFETY: the region is plain memory plus an opaque handle; mutable access needs `&mut self`.
unsafe impl Send for MemoryRegion {}
// SAFETY: shared access only reads.
unsafe impl Sync for MemoryRegion {}

impl fmt::Debug for MemoryRegion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryRegion")
            .field("addr", &format_args!("{:#x}", self.addr as usize))
            .field("len", &self.len)
            .field("lkey", &self.lkey())
            .field("rkey", &self.rkey())
            .finish()
    }
}

const ALIGN: usize = 4096;

impl MemoryRegion {
    /// Allocates `len` zeroed, page-aligned bytes and registers them (`ibv_reg_mr`).
    ///
    /// Fails with [`Error::InvalidArgument`] for `len == 0`, [`Error::ExceedsCaps`] when `len` exceeds the
    /// device's MR size or its total-registration cap (eRDMA: 64 GiB; split large buffers),
    /// [`Error::Unsupported`] for [`Access::REMOTE_ATOMIC`] on a device without atomics, and
    /// [`Error::Verbs`] when registration fails (`ENOMEM`: raise RLIMIT_MEMLOCK).
    pub fn new(
        pd: &Arc<ProtectionDomain>,
        len: usize,
        access: Access,
    ) -> Result<Arc<MemoryRegion>> {
        if len == 0 {
            return Err(Error::InvalidArgument(
                "memory region length 0: expected at least 1 byte".into(),
            ));
        }
        let layout = Layout::from_size_align(len, ALIGN).map_err(|_| {
            Error::InvalidArgument(format!("memory region length {len} is too large"))
        })?;
        // SAFETY: layout has non-zero size.
        let addr = unsafe { alloc_zeroed(layout) };
        if addr.is_null() {
            return Err(Error::verbs("alloc", libc::ENOMEM));
        }
        // SAFETY: addr/len is our fresh allocation; on error the Backing::Owned drop path frees it.
        unsafe { Self::register(pd, addr, len, access, Backing::Owned(layout)) }
    }

    /// Registers memory this crate did not allocate, such as page-locked host buffers from gpu-stage
    /// (`cuMemHostAlloc`). `owner` is kept alive until after deregistration (pass the allocation's owner,
    /// or `()`).
    ///
    /// # Safety
    /// - `addr..addr+len` must be valid, writable, initialised memory for as long as the region (and any post
    ///   using it) lives, and must not be freed or unmapped before `owner` is dropped.
    /// - No other live registration may overlap it with conflicting access (two regions over one byte let
    ///   the NIC write through one while the other's accessors hand out references).
    /// - Nothing else may create Rust references to that memory that conflict with the region's accessors
    ///   ([`MemoryRegion::as_slice`], [`MemoryRegion::get_mut`]) or with the NIC's DMA. Local DMA happens
    ///   only while a post using the region is in flight (until its completion is polled); but with
    ///   [`Access::REMOTE_WRITE`] or [`Access::REMOTE_ATOMIC`] a peer holding the rkey may write at *any*
    ///   time from registration until the region is dropped, posts or not, and with
    ///   [`Access::REMOTE_READ`] it may read at any time: for such memory no outside `&mut` (and, for
    ///   remote writes, no outside `&`) may exist for the region's whole life unless the caller's protocol
    ///   keeps the peer out.
    pub unsafe fn register_external<O: Send + Sync + 'static>(
        pd: &Arc<ProtectionDomain>,
        addr: *mut u8,
        len: usize,
        access: Access,
        owner: O,
    ) -> Result<Arc<MemoryRegion>> {
        if addr.is_null() || len == 0 {
            return Err(Error::InvalidArgument(format!(
                "external memory region at {addr:p} with length {len}: expected a non-null address and length > 0"
            )));
        }
        // SAFETY: forwarded from the caller's contract.
        unsafe { Self::register(pd, addr, len, access, Backing::External(Box::new(owner))) }
    }

    unsafe fn register(
        pd: &Arc<ProtectionDomain>,
        addr: *mut u8,
        len: usize,
        access: Access,
        backing: Backing,
    ) -> Result<Arc<MemoryRegion>> {
        // The value owns the memory from here on, so early returns free it via Drop (mr null = not registered).
        let mut this = MemoryRegion {
            mr: std::ptr::null_mut(),
            addr,
            len,
            access,
            backing,
            pd: pd.clone(),
        };
        let ctx = pd.context();
        let caps: &Caps = ctx.caps();
        if access.contains(Access::REMOTE_ATOMIC) {
            caps.require(ctx.name(), Feature::Atomics)?;
        }
        Caps::limit(
            ctx.name(),
            "memory region size",
            len as u64,
            caps.max_mr_size,
        )?;
        // Reserved before registering (and given back if registration fails): a check followed by a
        // separate add would let two threads both pass the cap.
        reserve(&ctx.registered, len as u64, caps.max_total_mr_bytes).map_err(|requested| {
            Error::ExceedsCaps {
                device: ctx.name().to_owned(),
                what: "total registered memory (split or reuse registrations)",
                requested,
                limit: caps.max_total_mr_bytes.unwrap_or(u64::MAX),
            }
        })?;
        // Remote write needs local write on every provider.
        let mut flags = access.bits();
        if access.contains(Access::REMOTE_WRITE) {
            flags |= Access::LOCAL_WRITE.bits();
        }
        // SAFETY: pd is live; addr/len is valid memory per the callers' contracts.
        let mr = unsafe { sys::ibv_reg_mr(pd.ptr, addr.cast(), len, flags as libc::c_int) };
        if mr.is_null() {
            let e = Error::last("ibv_reg_mr");
            ctx.registered.fetch_sub(len as u64, Ordering::Relaxed);
            return Err(e);
        }
        this.mr = mr;
        Ok(Arc::new(this))
    }

    /// Local key.
    pub fn lkey(&self) -> u32 {
        // SAFETY: mr is registered (constructors only hand out registered regions).
        unsafe { (*self.mr).lkey }
    }

    /// Remote key.
    pub fn rkey(&self) -> u32 {
        // SAFETY: `mr` is the registration this value owns; it is deregistered only in Drop.
        unsafe { (*self.mr).rkey }
    }

    /// Start address.
    pub fn addr(&self) -> u64 {
        self.addr as u64
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false (regions have at least one byte); present for clippy's `len_without_is_empty`.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Access rights.
    pub fn access(&self) -> Access {
        self.access
    }

    /// The protection domain.
    pub fn pd(&self) -> &Arc<ProtectionDomain> {
        &self.pd
    }

    /// What the peer needs to WRITE into or READ from this region.
    pub fn remote(&self) -> RemoteBuf {
        RemoteBuf {
            addr: self.addr(),
            len: self.len as u64,
            rkey: self.rkey(),
        }
    }

    /// The contents, for a region the peer cannot write. Fails with [`Error::RemotelyWritable`] if the
    /// region grants [`Access::REMOTE_WRITE`] or [`Access::REMOTE_ATOMIC`]: use
    /// [`MemoryRegion::read_into`] or [`MemoryRegion::as_slice_unchecked`] there.
    pub fn as_slice(&self) -> Result<&[u8]> {
        check_local_view(self.access, self.len)?;
        // SAFETY: the peer cannot write this region (checked above); the NIC writes locally only into
        // an Exclusive destination, which owns the sole handle, so none exists while `&self` is
        // borrowed; local writes need `&mut` through `get_mut`, which needs the sole handle too.
        Ok(unsafe { self.as_slice_unchecked() })
    }

    /// The contents, whatever the access rights.
    ///
    /// # Safety
    /// For as long as the returned slice lives, the peer must not write into this region (RDMA WRITE,
    /// WRITE_WITH_IMM, atomics): the caller's protocol must keep it out, for example by reading only
    /// after the peer's WRITE_WITH_IMM or SEND said the data is complete and before granting it the
    /// next write. The bytes the peer wrote before are visible after its completion was polled.
    pub unsafe fn as_slice_unchecked(&self) -> &[u8] {
        // SAFETY: addr/len is valid for the region's lifetime; local aliasing as in `as_slice`; remote
        // writes excluded by the caller's contract.
        unsafe { std::slice::from_raw_parts(self.addr, self.len) }
    }

    /// Copies `out.len()` bytes starting at `offset` into `out` with volatile reads: sound for every
    /// region, also one the peer may be writing (the copy may then mix old and new bytes). Fails with
    /// [`Error::OutOfBounds`].
    pub fn read_into(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        let end = offset.saturating_add(out.len());
        check_range(self.len, &(offset..end))?;
        for (i, b) in out.iter_mut().enumerate() {
            // SAFETY: offset + i < len (checked above), so the pointer is in the live region; a
            // volatile read of a u8 creates no reference, so a concurrent DMA write cannot invalidate one.
            *b = unsafe { std::ptr::read_volatile(self.addr.add(offset + i)) };
        }
        Ok(())
    }

    /// Mutable contents, only through the sole handle: fails with [`Error::BufferShared`] while a post
    /// holds the region (or any other clone exists), and with [`Error::RemotelyWritable`] if the peer may
    /// write it (see [`MemoryRegion::get_mut_unchecked`]).
    pub fn get_mut(this: &mut Arc<MemoryRegion>) -> Result<&mut [u8]> {
        check_local_view(this.access, this.len)?;
        // SAFETY: the peer cannot write this region (checked above).
        unsafe { Self::get_mut_unchecked(this) }
    }

    /// Mutable contents through the sole handle, whatever the access rights: fails with
    /// [`Error::BufferShared`] while a post holds the region (or any other clone exists).
    ///
    /// # Safety
    /// For as long as the returned slice lives, the peer must not write into or read from this region
    /// (the caller's protocol keeps it out, e.g. it has not been told the region's [`RemoteBuf`] yet, or
    /// it holds no credit for it).
    pub unsafe fn get_mut_unchecked(this: &mut Arc<MemoryRegion>) -> Result<&mut [u8]> {
        let count = Arc::strong_count(this);
        match Arc::get_mut(this) {
            // SAFETY: unique handle, so no local reference or post uses the region; addr/len is valid;
            // the peer is kept out by the caller's contract.
            Some(mr) => Ok(unsafe { std::slice::from_raw_parts_mut(mr.addr, mr.len) }),
            None => Err(Error::BufferShared { count }),
        }
    }

    /// A source slice for WRITE / WRITE_WITH_IMM / SEND. Fails with [`Error::OutOfBounds`].
    pub fn slice(self: &Arc<Self>, range: Range<usize>) -> Result<Local> {
        check_range(self.len, &range)?;
        Ok(Local {
            mr: self.clone(),
            offset: range.start,
            len: range.end - range.start,
        })
    }

    /// The whole region as a source slice.
    pub fn full(self: &Arc<Self>) -> Local {
        Local {
            mr: self.clone(),
            offset: 0,
            len: self.len,
        }
    }
}

fn check_range(len: usize, range: &Range<usize>) -> Result<()> {
    if range.start > range.end || range.end > len {
        return Err(Error::OutOfBounds {
            which: "local",
            start: range.start as u64,
            end: range.end as u64,
            len: len as u64,
        });
    }
    Ok(())
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        let mut deregistered = true;
        if !self.mr.is_null() {
            // SAFETY: registered by us; in-flight posts hold an Arc, so none uses it any more.
            let rc = unsafe { sys::ibv_dereg_mr(self.mr) };
            if rc == 0 {
                self.pd
                    .context()
                    .registered
                    .fetch_sub(self.len as u64, Ordering::Relaxed);
            } else {
                tracing::warn!(
                    rc,
                    len = self.len,
                    "ibv_dereg_mr failed; leaking the buffer (and its owner) rather than freeing memory the NIC may still use"
                );
                deregistered = false;
            }
        }
        let backing = std::mem::replace(&mut self.backing, Backing::Gone);
        release_backing(backing, self.addr, deregistered);
    }
}

/// A source range of a memory region (WRITE, WRITE_WITH_IMM, SEND). Holds the region alive and
/// read-only until the completion is polled.
#[derive(Debug, Clone)]
pub struct Local {
    pub(crate) mr: Arc<MemoryRegion>,
    pub(crate) offset: usize,
    pub(crate) len: usize,
}

impl Local {
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for an empty slice.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(crate) fn sge(&self) -> sys::ibv_sge {
        sys::ibv_sge {
            addr: self.mr.addr() + self.offset as u64,
            length: self.len as u32,
            lkey: self.mr.lkey(),
        }
    }
}

/// A destination range (READ, RECV) made from the only handle to a region; the handle moves into the
/// post and comes back in the completion.
///
/// ```compile_fail,E0382
/// # use std::sync::Arc;
/// # fn f(qp: &mut erdma_verbs::QueuePair<erdma_verbs::Rts>, mr: Arc<erdma_verbs::MemoryRegion>) {
/// let dst = erdma_verbs::Exclusive::new(mr, 0..64).unwrap();
/// qp.post_recv(dst, 1).unwrap();
/// // The buffer is in flight: the handle moved into the post, so it cannot be read here.
/// let _ = mr.len();
/// # }
/// ```
#[derive(Debug)]
pub struct Exclusive {
    pub(crate) mr: Arc<MemoryRegion>,
    pub(crate) offset: usize,
    pub(crate) len: usize,
}

impl Exclusive {
    /// Takes the sole handle `mr` for the byte range `range`. Fails with [`Error::BufferShared`] if other
    /// handles exist (including posts still in flight) and [`Error::OutOfBounds`] for a bad range.
    pub fn new(mut mr: Arc<MemoryRegion>, range: Range<usize>) -> Result<Exclusive> {
        check_range(mr.len, &range)?;
        if Arc::get_mut(&mut mr).is_none() {
            return Err(Error::BufferShared {
                count: Arc::strong_count(&mr),
            });
        }
        if !mr.access.contains(Access::LOCAL_WRITE) && !mr.access.contains(Access::REMOTE_WRITE) {
            return Err(Error::InvalidArgument(
                "destination memory region lacks Access::LOCAL_WRITE: the NIC cannot write into it"
                    .into(),
            ));
        }
        Ok(Exclusive {
            mr,
            offset: range.start,
            len: range.end - range.start,
        })
    }

    /// The whole region as a destination.
    pub fn full(mr: Arc<MemoryRegion>) -> Result<Exclusive> {
        let len = mr.len;
        Exclusive::new(mr, 0..len)
    }

    /// Gives the handle back without posting.
    pub fn into_inner(self) -> Arc<MemoryRegion> {
        self.mr
    }

    pub(crate) fn sge(&self) -> sys::ibv_sge {
        sys::ibv_sge {
            addr: self.mr.addr() + self.offset as u64,
            length: self.len as u32,
            lkey: self.mr.lkey(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_slice_bounds() {
        let r = RemoteBuf {
            addr: 0x1000,
            len: 100,
            rkey: 7,
        };
        let s = r.slice(10..30).unwrap();
        assert_eq!(
            s,
            RemoteBuf {
                addr: 0x100a,
                len: 20,
                rkey: 7
            }
        );
        let e = r.slice(90..101).unwrap_err();
        assert!(matches!(
            e,
            Error::OutOfBounds {
                which: "remote",
                start: 90,
                end: 101,
                len: 100
            }
        ));
    }

    #[test]
    fn remote_wire_roundtrip() {
        let r = RemoteBuf {
            addr: 0xdead_beef_0000,
            len: 1 << 20,
            rkey: 0x1234,
        };
        assert_eq!(RemoteBuf::from_bytes(&r.to_bytes()), Some(r));
        assert_eq!(RemoteBuf::from_bytes(&[0; 19]), None);
        let j = serde_json::to_string(&r).unwrap();
        assert_eq!(serde_json::from_str::<RemoteBuf>(&j).unwrap(), r);
    }

    #[test]
    fn access_flags() {
        let a = Access::LOCAL_WRITE | Access::REMOTE_READ;
        assert!(a.contains(Access::LOCAL_WRITE));
        assert!(!a.contains(Access::REMOTE_WRITE));
        assert!(Access::ALL_RDMA.contains(a));
        // Same bit values as ibv_access_flags.
        assert_eq!(
            Access::REMOTE_ATOMIC.bits(),
            sys::ibv_access_flags::IBV_ACCESS_REMOTE_ATOMIC.0
        );
        assert_eq!(
            Access::REMOTE_WRITE.bits(),
            sys::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0
        );
    }

    /// An external owner that records when it is dropped (when its memory would be freed).
    struct Owner(Arc<std::sync::atomic::AtomicBool>);
    impl Drop for Owner {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "leaks the owner on purpose (the behaviour under test), which Miri reports"
    )]
    fn failed_deregistration_keeps_external_memory_alive() {
        let freed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let backing = Backing::External(Box::new(Owner(freed.clone())));
        release_backing(backing, std::ptr::null_mut(), false);
        assert!(
            !freed.load(Ordering::SeqCst),
            "a still-registered region's owner must not be dropped"
        );
        let backing = Backing::External(Box::new(Owner(freed.clone())));
        release_backing(backing, std::ptr::null_mut(), true);
        assert!(
            freed.load(Ordering::SeqCst),
            "a deregistered region's owner is released"
        );
    }

    #[test]
    fn the_registration_cap_holds_under_concurrent_registrations() {
        let counter = Arc::new(AtomicU64::new(0));
        let granted: usize = std::thread::scope(|s| {
            let hs: Vec<_> = (0..8)
                .map(|_| {
                    let c = &counter;
                    s.spawn(move || {
                        (0..1000)
                            .filter(|_| reserve(c, 1, Some(64)).is_ok())
                            .count()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(granted, 64, "exactly the cap is granted");
        assert_eq!(counter.load(Ordering::SeqCst), 64);
        assert_eq!(reserve(&counter, 8, Some(64)), Err(72));
        assert_eq!(reserve(&counter, 8, None), Ok(()));
    }

    #[test]
    fn every_context_of_a_device_shares_one_registration_count() {
        let a = crate::device::registered_counter("erdma_test_0");
        let b = crate::device::registered_counter("erdma_test_0");
        let other = crate::device::registered_counter("erdma_test_1");
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &other));
    }

    #[test]
    fn remotely_writable_regions_get_no_safe_references() {
        for a in [
            Access::ALL_RDMA,
            Access::REMOTE_WRITE,
            Access::LOCAL_WRITE | Access::REMOTE_ATOMIC,
        ] {
            let e = check_local_view(a, 64).unwrap_err();
            assert!(
                matches!(e, Error::RemotelyWritable { len: 64 }),
                "{a:?}: {e}"
            );
            assert!(e.to_string().contains("read_into"), "{e}");
        }
        for a in [
            Access::LOCAL_WRITE,
            Access::REMOTE_READ,
            Access::LOCAL_WRITE | Access::REMOTE_READ,
        ] {
            assert!(check_local_view(a, 64).is_ok(), "{a:?}");
        }
    }

    #[test]
    fn local_range_check() {
        assert!(check_range(10, &(0..10)).is_ok());
        assert!(check_range(10, &(5..11)).is_err());
        #[allow(clippy::reversed_empty_ranges)]
        let r = 6..5;
        assert!(check_range(10, &r).is_err());
    }
}
