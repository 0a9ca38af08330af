//! The inline-size probe run at open: `ibv_query_device` has no inline limit, so a throwaway RC QP is
//! created with decreasing `max_inline_data` until the driver accepts one, and the value it reports back
//! is kept. A failed probe (e.g. memlock too low to create a QP) leaves the vendor default in place.

use std::ptr;

use rdma_sys as sys;

use crate::caps::{ERDMA_MAX_INLINE, Vendor};
use crate::device::Context;

const CANDIDATES: [u32; 6] = [256, 220, 128, 96, 64, 32];

pub(crate) fn probe_inline(ctx: &Context, vendor: Vendor) -> Option<u32> {
    // SAFETY: every object created here is destroyed before returning, in child-first order.
    unsafe {
        let pd = sys::ibv_alloc_pd(ctx.ptr);
        if pd.is_null() {
            return None;
        }
        let cq = sys::ibv_create_cq(ctx.ptr, 2, ptr::null_mut(), ptr::null_mut(), 0);
        let mut found = None;
        if !cq.is_null() {
            for want in CANDIDATES {
                if vendor == Vendor::Erdma && want > ERDMA_MAX_INLINE {
                    continue;
                }
                let mut init: sys::ibv_qp_init_attr = std::mem::zeroed();
                init.send_cq = cq;
                init.recv_cq = cq;
                init.qp_type = sys::ibv_qp_type::IBV_QPT_RC;
                init.cap.max_send_wr = 1;
                init.cap.max_recv_wr = 1;
                init.cap.max_send_sge = 1;
                init.cap.max_recv_sge = 1;
                init.cap.max_inline_data = want;
                let qp = sys::ibv_create_qp(pd, &mut init);
                if !qp.is_null() {
                    found = Some(init.cap.max_inline_data.max(want));
                    sys::ibv_destroy_qp(qp);
                    break;
                }
            }
            sys::ibv_destroy_cq(cq);
        }
        sys::ibv_dealloc_pd(pd);
        if found.is_none() {
            tracing::debug!(device = %ctx.name(), "inline probe failed; using the vendor default");
        }
        found
    }
}
