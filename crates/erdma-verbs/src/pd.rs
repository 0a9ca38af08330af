//! Protection domains (`ibv_alloc_pd`).

use std::fmt;
use std::sync::Arc;

use rdma_sys as sys;

use crate::device::Context;
use crate::error::{Error, Result};

/// A protection domain. Memory regions and queue pairs belong to one; it holds its [`Context`] open.
pub struct ProtectionDomain {
    pub(crate) ptr: *mut sys::ibv_pd,
    ctx: Arc<Context>,
}

// SAFETY: a PD is an opaque handle; libibverbs synchronises its use.
unsafe impl Send for ProtectionDomain {}
// SAFETY: shared use only passes the handle to libibverbs calls, which synchronise on it; nothing in
// the Rust value is mutated after allocation.
unsafe impl Sync for ProtectionDomain {}

impl fmt::Debug for ProtectionDomain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProtectionDomain")
            .field("device", &self.ctx.name())
            .finish()
    }
}

impl ProtectionDomain {
    /// Allocates a protection domain (`ibv_alloc_pd`). Fails with [`Error::Verbs`] (typically `ENOMEM`
    /// when the device's PD limit is reached).
    pub fn new(ctx: &Arc<Context>) -> Result<Arc<ProtectionDomain>> {
        // SAFETY: ctx.ptr is a live context.
        let ptr = unsafe { sys::ibv_alloc_pd(ctx.ptr) };
        if ptr.is_null() {
            return Err(Error::last("ibv_alloc_pd"));
        }
        Ok(Arc::new(ProtectionDomain {
            ptr,
            ctx: ctx.clone(),
        }))
    }

    /// The device this PD belongs to.
    pub fn context(&self) -> &Arc<Context> {
        &self.ctx
    }
}

impl Drop for ProtectionDomain {
    fn drop(&mut self) {
        // SAFETY: MRs and QPs hold an Arc to us, so none remains.
        let rc = unsafe { sys::ibv_dealloc_pd(self.ptr) };
        if rc != 0 {
            tracing::warn!(device = %self.ctx.name(), rc, "ibv_dealloc_pd failed; leaking the PD");
        }
    }
}
