//! # erdma-verbs
//!
//! A safe Rust layer over libibverbs and librdmacm (through `rdma-sys`) that runs on the restricted
//! verbs set of Alibaba Cloud eRDMA — RC only, no SRQ, no extended verbs, 6 send / 1 receive SGE, 96-byte
//! inline, ≤ 8192 send WRs — as well as on mlx5, rxe and siw. Only classic verbs are used
//! (`ibv_post_send`, `ibv_create_qp`, `ibv_create_cq`), called through the context ops table exactly as
//! the C header's inline functions do.
//!
//! * [`devices`], [`Context`]: enumerate and open devices; query device, port and GID table.
//! * [`Caps`]: what the device can do, probed at open with a vendor profile ([`Vendor`]); asking for
//!   what it lacks is a typed [`Error::Unsupported`], a post beyond a limit [`Error::ExceedsCaps`].
//! * [`ProtectionDomain`], [`MemoryRegion`] (owned or external memory), [`CompletionQueue`] with an
//!   optional [`CompletionChannel`] (busy, blocking or async polling).
//! * [`QueuePair`] as a typestate `Init → Rtr → Rts`, connected with an [`Endpoint`] exchanged out of
//!   band, or through [`cm`] (rdma_cm, required on iWARP).
//! * Posting WRITE, WRITE_WITH_IMM, READ, SEND and RECV needs no `unsafe`: posted buffers are held by the
//!   completion queue until their completion is polled; [`QueuePair::post_send_batch`] chains WRs behind one
//!   doorbell.
//!
//! Every object holds an `Arc` to its parent (QP → PD/CQ → context), so dropping in any order is sound,
//! and `Drop` never panics.
//!
//! ```
//! // Works with or without RDMA hardware: lists devices and their probed limits.
//! for dev in erdma_verbs::devices()? {
//!     let ctx = erdma_verbs::Context::open(&dev.name)?;
//!     let caps = ctx.caps();
//!     println!("{} ({}): {} send SGEs, {} B inline, SRQ: {}", dev.name, caps.vendor,
//!              caps.max_send_sge, caps.max_inline, caps.srq);
//! }
//! # Ok::<(), erdma_verbs::Error>(())
//! ```
//!
//! A loopback WRITE between two QPs of one process (needs a device; `no_run` here):
//!
//! ```no_run
//! use erdma_verbs::*;
//! let ctx = Context::open("rxe0")?;
//! let pd = ProtectionDomain::new(&ctx)?;
//! let cq = CompletionQueue::new(&ctx, 256, None)?;
//! let builder = QpBuilder::new(&cq, &cq).gid_index(1);
//! let (a, b) = (builder.build(&pd)?, builder.build(&pd)?);
//! let (ea, eb) = (a.endpoint()?, b.endpoint()?);
//! let mut a = a.connect(&eb)?;
//! let _b = b.connect(&ea)?;
//! let src = MemoryRegion::new(&pd, 4096, Access::ALL_RDMA)?;
//! let dst = MemoryRegion::new(&pd, 4096, Access::ALL_RDMA)?;
//! a.post_write(src.full(), dst.remote(), 7)?;
//! let done = cq.poll_blocking(1, std::time::Duration::from_secs(5))?;
//! assert!(done[0].is_ok() && done[0].tag == 7);
//! # Ok::<(), erdma_verbs::Error>(())
//! ```

pub mod caps;
pub mod cm;
pub mod cq;
pub mod device;
pub mod error;
mod inline_size;
pub mod mr;
pub mod pd;
pub mod qp;
mod wr;

pub use caps::{Caps, DeviceLimits, Feature, Transport, Vendor};
pub use cq::{Completion, CompletionChannel, CompletionQueue, Completions, WcOpcode, WcStatus};
pub use device::{
    Context, DeviceAttr, DeviceInfo, Gid, GidEntry, GidType, LinkLayer, PortAttr, PortState,
    devices,
};
pub use error::{Error, Result};
pub use mr::{Access, Exclusive, Local, MemoryRegion, RemoteBuf};
pub use pd::ProtectionDomain;
pub use qp::{
    Endpoint, Init, QpBuilder, QpCaps, QpState, QueuePair, ReadWr, RecvWr, Rtr, Rts, SendWr,
    SourceWr,
};

/// The README's examples, compiled as doc tests (they need a device, so they are `no_run`).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// A global allocator for the unit tests that counts allocations per thread, so that a test can
/// show a code path allocates nothing (other tests' threads do not disturb the count).
#[cfg(test)]
pub(crate) mod counting_alloc {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;

    struct Counting;

    thread_local! {
        static ALLOCS: Cell<usize> = const { Cell::new(0) };
    }

    fn count() {
        // try_with: a thread being torn down may still free (and in theory allocate).
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
    }

    // SAFETY: every call is forwarded to the system allocator unchanged; counting touches only a
    // const-initialised thread-local Cell, which never allocates.
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            count();
            // SAFETY: forwarded with the caller's contract.
            unsafe { System.alloc(layout) }
        }
        unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
            count();
            // SAFETY: forwarded with the caller's contract.
            unsafe { System.alloc_zeroed(layout) }
        }
        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            count();
            // SAFETY: forwarded with the caller's contract.
            unsafe { System.realloc(ptr, layout, new_size) }
        }
        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            // SAFETY: forwarded with the caller's contract.
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    #[global_allocator]
    static GLOBAL: Counting = Counting;

    /// Allocations (alloc, alloc_zeroed, realloc) this thread made while running `f`.
    pub(crate) fn allocations<R>(f: impl FnOnce() -> R) -> (usize, R) {
        let before = ALLOCS.with(Cell::get);
        let r = f();
        (ALLOCS.with(Cell::get) - before, r)
    }
}
