//! Memory regions (`ibv_reg_mr`) over owned buffers or externally allocated memory, and the slice types
//! that posts take.
//!
//! Ownership rules that make posting safe without `unsafe` at the call site:
//! - A source slice ([`Local`], for WRITE, WRITE_WITH_IMM, SEND) holds an `Arc` of its region until the
//!   completion is polled. While any post is in flight, [`MemoryRegion::get_mut`] returns
//!   [`Error::BufferShared`], so the CPU cannot modify memory the NIC is reading.
//! - A destination slice ([`Exclusive`], for READ and RECV) can only be made from the *only* handle to a
//!   region; the handle moves into the post and comes back in [`crate::Completion::buffer`].

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::fmt;
use std::ops::{BitOr, Range};
use std::sync::Arc;
use std::sync::atomic::Ordering;

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
    /// - `addr..addr+len` must be valid, writable memory for as long as the region (and any post using it)
    ///   lives, and must not be freed or unmapped before `owner` is dropped.
    /// - Nothing else may create Rust references to that memory that conflict with the region's accessors
    ///   ([`MemoryRegion::as_slice`], [`MemoryRegion::get_mut`]) or with the NIC's DMA while posts are in flight.
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
        if let Some(total) = caps.max_total_mr_bytes {
            let now = ctx.registered.load(Ordering::Relaxed);
            Caps::limit(
                ctx.name(),
                "total registered memory (split or reuse registrations)",
                now + len as u64,
                total,
            )?;
        }
        // Remote write needs local write on every provider.
        let mut flags = access.bits();
        if access.contains(Access::REMOTE_WRITE) {
            flags |= Access::LOCAL_WRITE.bits();
        }
        // SAFETY: pd is live; addr/len is valid memory per the callers' contracts.
        let mr = unsafe { sys::ibv_reg_mr(pd.ptr, addr.cast(), len, flags as libc::c_int) };
        if mr.is_null() {
            return Err(Error::last("ibv_reg_mr"));
        }
        this.mr = mr;
        ctx.registered.fetch_add(len as u64, Ordering::Relaxed);
        Ok(Arc::new(this))
    }

    /// Local key.
    pub fn lkey(&self) -> u32 {
        // SAFETY: mr is registered (constructors only hand out registered regions).
        unsafe { (*self.mr).lkey }
    }

    /// Remote key.
    pub fn rkey(&self) -> u32 {
        // SAFETY: as above.
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

    /// The contents. If the region grants [`Access::REMOTE_WRITE`], the peer may change them at any time;
    /// read after the peer signals completion (WRITE_WITH_IMM or a SEND).
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: addr/len is valid for the region's lifetime; no &mut exists while &self is borrowed.
        unsafe { std::slice::from_raw_parts(self.addr, self.len) }
    }

    /// Mutable contents, only through the sole handle: fails with [`Error::BufferShared`] while a post
    /// holds the region (or any other clone exists).
    pub fn get_mut(this: &mut Arc<MemoryRegion>) -> Result<&mut [u8]> {
        let count = Arc::strong_count(this);
        match Arc::get_mut(this) {
            // SAFETY: unique access to the region; addr/len is valid.
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
        if !self.mr.is_null() {
            // SAFETY: registered by us; in-flight posts hold an Arc, so none uses it any more.
            let rc = unsafe { sys::ibv_dereg_mr(self.mr) };
            if rc != 0 {
                // The NIC may still reference the memory: leak it rather than free it under the device.
                tracing::warn!(rc, "ibv_dereg_mr failed; leaking the buffer");
                return;
            }
            self.pd
                .context()
                .registered
                .fetch_sub(self.len as u64, Ordering::Relaxed);
        }
        if let Backing::Owned(layout) = self.backing {
            // SAFETY: allocated in `new` with this layout.
            unsafe { dealloc(self.addr, layout) };
        }
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
/// let _ = mr.as_slice();
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

    #[test]
    fn local_range_check() {
        assert!(check_range(10, &(0..10)).is_ok());
        assert!(check_range(10, &(5..11)).is_err());
        #[allow(clippy::reversed_empty_ranges)]
        let r = 6..5;
        assert!(check_range(10, &r).is_err());
    }
}
