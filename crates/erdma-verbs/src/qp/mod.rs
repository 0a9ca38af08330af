//! Reliable-connected queue pairs as a typestate: [`QueuePair<Init>`] → [`QueuePair<Rtr>`] →
//! [`QueuePair<Rts>`]. Send-side posts exist only on `QueuePair<Rts>`, so posting on a QP that is not
//! ready to send does not compile:
//!
//! ```compile_fail,E0599
//! # fn f(qp: &mut erdma_verbs::QueuePair<erdma_verbs::Init>, src: erdma_verbs::Local, dst: erdma_verbs::RemoteBuf) {
//! qp.post_write(src, dst, 0).unwrap(); // no method `post_write` on QueuePair<Init>
//! # }
//! ```
//!
//! A QP that hit an error is not reset (eRDMA cannot move an RTS QP back to RESET): call
//! [`QueuePair::recreate`] and connect the new one.
//!
//! This module is the QP's lifecycle (builder, endpoint, state transitions); the work requests and
//! their posting are `qp/post.rs`'s.

use std::fmt;
use std::marker::PhantomData;
use std::ptr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use rdma_sys as sys;
use serde::{Deserialize, Serialize};

use crate::caps::{Caps, Feature};
use crate::cq::CompletionQueue;
use crate::device::{Gid, mtu_enum};
use crate::error::{Error, Result, check};
use crate::mr::Access;
use crate::pd::ProtectionDomain;
use crate::wr::Chain;

mod post;
pub(crate) use post::Sources;
pub use post::{ReadWr, RecvWr, SendWr, SourceWr};

/// Typestate: created and in INIT (receives may be posted).
#[derive(Debug)]
pub struct Init;
/// Typestate: ready to receive.
#[derive(Debug)]
pub struct Rtr;
/// Typestate: ready to send.
#[derive(Debug)]
pub struct Rts;

/// What the peer needs to connect to this QP, exchanged out of band (JSON over TCP, a Kubernetes
/// annotation...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoint {
    /// QP number.
    pub qpn: u32,
    /// Initial packet sequence number (24 bits).
    pub psn: u32,
    /// GID at `gid_index`.
    pub gid: Gid,
    /// GID table index used (often 1 on eRDMA and rxe: the RoCE v2 IPv4 entry).
    pub gid_index: u32,
    /// LID (0 on Ethernet).
    pub lid: u16,
    /// Active MTU of the port, in bytes. The path MTU is the smaller of both ends.
    pub mtu: u32,
    /// RDMA READs this end serves at once (its responder resources). The peer's READ depth is
    /// the smaller of its own limit and this; 0 (an endpoint from an older build) means unknown,
    /// and the peer then uses its own limit.
    #[serde(default)]
    pub rd_atomic: u8,
}

impl Endpoint {
    /// Path MTU for a connection between `self` and `peer`: the smaller of both.
    pub fn path_mtu(&self, peer: &Endpoint) -> u32 {
        self.mtu.min(peer.mtu)
    }
}

/// Limits the driver granted a QP (`ibv_qp_init_attr.cap` after creation); posts are checked against them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct QpCaps {
    /// Send queue depth.
    pub max_send_wr: u32,
    /// Receive queue depth.
    pub max_recv_wr: u32,
    /// SGEs per send WR.
    pub max_send_sge: u32,
    /// SGEs per receive WR.
    pub max_recv_sge: u32,
    /// Inline bytes per send WR.
    pub max_inline: u32,
}

/// Builds an RC queue pair. Defaults: 128 send and receive WRs, 1 SGE each way, no inline, port 1,
/// GID index 0, access local write + remote read + remote write.
#[derive(Debug, Clone)]
pub struct QpBuilder {
    send_cq: Arc<CompletionQueue>,
    recv_cq: Arc<CompletionQueue>,
    caps: QpCaps,
    port: u8,
    gid_index: u32,
    access: Access,
    timeout: u8,
    retry_cnt: u8,
    rnr_retry: u8,
}

impl QpBuilder {
    /// A builder whose send and receive completions go to `send_cq` and `recv_cq` (may be the same CQ).
    pub fn new(send_cq: &Arc<CompletionQueue>, recv_cq: &Arc<CompletionQueue>) -> QpBuilder {
        QpBuilder {
            send_cq: send_cq.clone(),
            recv_cq: recv_cq.clone(),
            caps: QpCaps {
                max_send_wr: 128,
                max_recv_wr: 128,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline: 0,
            },
            port: 1,
            gid_index: 0,
            access: Access::ALL_RDMA,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
        }
    }

    /// Send queue depth (eRDMA: at most 8192).
    pub fn max_send_wr(mut self, n: u32) -> Self {
        self.caps.max_send_wr = n;
        self
    }
    /// Receive queue depth.
    pub fn max_recv_wr(mut self, n: u32) -> Self {
        self.caps.max_recv_wr = n;
        self
    }
    /// SGEs per send WR (eRDMA: at most 6).
    pub fn max_send_sge(mut self, n: u32) -> Self {
        self.caps.max_send_sge = n;
        self
    }
    /// SGEs per receive WR (eRDMA: 1).
    pub fn max_recv_sge(mut self, n: u32) -> Self {
        self.caps.max_recv_sge = n;
        self
    }
    /// Inline bytes per send WR (eRDMA: at most 96).
    pub fn max_inline(mut self, n: u32) -> Self {
        self.caps.max_inline = n;
        self
    }
    /// Port number (1-based).
    pub fn port(mut self, port: u8) -> Self {
        self.port = port;
        self
    }
    /// GID index used for addressing (1 for RoCE v2 IPv4 on rxe and usually on eRDMA).
    pub fn gid_index(mut self, idx: u32) -> Self {
        self.gid_index = idx;
        self
    }
    /// Remote access rights granted on this QP.
    pub fn access(mut self, access: Access) -> Self {
        self.access = access;
        self
    }

    fn check(&self, pd: &ProtectionDomain) -> Result<()> {
        let ctx = pd.context();
        let (d, c): (&str, &Caps) = (ctx.name(), ctx.caps());
        Caps::limit(
            d,
            "send work requests per QP",
            self.caps.max_send_wr as u64,
            c.max_send_wr as u64,
        )?;
        Caps::limit(
            d,
            "receive work requests per QP",
            self.caps.max_recv_wr as u64,
            c.max_recv_wr as u64,
        )?;
        Caps::limit(
            d,
            "send SGEs per work request",
            self.caps.max_send_sge as u64,
            c.max_send_sge as u64,
        )?;
        Caps::limit(
            d,
            "receive SGEs per work request",
            self.caps.max_recv_sge as u64,
            c.max_recv_sge as u64,
        )?;
        Caps::limit(
            d,
            "inline bytes per work request",
            self.caps.max_inline as u64,
            c.max_inline as u64,
        )?;
        if !Arc::ptr_eq(self.send_cq.context(), ctx) || !Arc::ptr_eq(self.recv_cq.context(), ctx) {
            return Err(Error::InvalidArgument(
                "the completion queues and the protection domain belong to different device contexts".into(),
            ));
        }
        Ok(())
    }

    fn init_attr(&self) -> sys::ibv_qp_init_attr {
        // SAFETY: plain C struct; zero is its documented default.
        let mut init: sys::ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        init.send_cq = self.send_cq.ptr;
        init.recv_cq = self.recv_cq.ptr;
        init.qp_type = sys::ibv_qp_type::IBV_QPT_RC;
        init.sq_sig_all = 0;
        init.cap.max_send_wr = self.caps.max_send_wr;
        init.cap.max_recv_wr = self.caps.max_recv_wr;
        init.cap.max_send_sge = self.caps.max_send_sge;
        init.cap.max_recv_sge = self.caps.max_recv_sge;
        init.cap.max_inline_data = self.caps.max_inline;
        init
    }

    pub(crate) fn cm_init_attr(&self, pd: &ProtectionDomain) -> Result<sys::ibv_qp_init_attr> {
        self.check(pd)?;
        Ok(self.init_attr())
    }

    /// Creates the QP (`ibv_create_qp`, RC) and moves it to INIT (`ibv_modify_qp`). Requests are checked
    /// against the device caps first ([`Error::ExceedsCaps`]); `ENOMEM` from the driver usually means
    /// RLIMIT_MEMLOCK is too low.
    pub fn build(&self, pd: &Arc<ProtectionDomain>) -> Result<QueuePair<Init>> {
        self.check(pd)?;
        let mut init = self.init_attr();
        // SAFETY: pd and CQs are live and belong to one context (checked above).
        let ptr = unsafe { sys::ibv_create_qp(pd.ptr, &mut init) };
        if ptr.is_null() {
            return Err(Error::last("ibv_create_qp"));
        }
        let qp = QueuePair::<Init>::wrap(ptr, pd.clone(), self.clone(), &init, None);
        // SAFETY: ibv_qp_attr holds integers, enums whose zero is a variant and pointers; all-zero is valid.
        let mut attr: sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
        attr.qp_state = sys::ibv_qp_state::IBV_QPS_INIT;
        attr.pkey_index = 0;
        attr.port_num = self.port;
        attr.qp_access_flags = self.access.bits();
        use sys::ibv_qp_attr_mask as m;
        let mask = m::IBV_QP_STATE | m::IBV_QP_PKEY_INDEX | m::IBV_QP_PORT | m::IBV_QP_ACCESS_FLAGS;
        qp.inner.modify(&mut attr, mask, "ibv_modify_qp(INIT)")?;
        Ok(qp)
    }
}

/// Kept by a QP created through rdma_cm: the id must outlive the QP and destroys it.
pub(crate) type CmHold = Arc<crate::cm::CmId>;

struct QpInner {
    ptr: *mut sys::ibv_qp,
    pd: Arc<ProtectionDomain>,
    builder: QpBuilder,
    caps: QpCaps,
    psn: u32,
    /// The peer's responder resources from its endpoint (0: unknown), set on the way to RTR.
    peer_rd_atomic: u8,
    send_outstanding: Arc<AtomicUsize>,
    recv_outstanding: Arc<AtomicUsize>,
    cm: Option<CmHold>,
    /// Scratch of the posting fast path, kept between posts so that a post allocates nothing once
    /// they reached the largest batch size: the requests being posted, and their raw chains.
    send_staged: Vec<SendWr>,
    send_chain: Chain<sys::ibv_send_wr>,
    recv_staged: Vec<RecvWr>,
    recv_chain: Chain<sys::ibv_recv_wr>,
}

impl QpInner {
    fn modify(
        &self,
        attr: &mut sys::ibv_qp_attr,
        mask: sys::ibv_qp_attr_mask,
        call: &'static str,
    ) -> Result<()> {
        // SAFETY: ptr is a live QP; attr is valid for the call.
        check(call, unsafe {
            sys::ibv_modify_qp(self.ptr, attr, mask.0 as libc::c_int)
        })
    }

    fn qpn(&self) -> u32 {
        // SAFETY: `ptr` is the QP this value owns, live until Drop destroys it (Drop reads the number first).
        unsafe { (*self.ptr).qp_num }
    }

    fn device(&self) -> &str {
        self.pd.context().name()
    }
}

impl Drop for QpInner {
    fn drop(&mut self) {
        let qpn = self.qpn();
        let destroyed = match &self.cm {
            Some(id) => id.destroy_qp(),
            None => {
                // SAFETY: we own the QP; destroying it with WRs in flight is allowed (they are flushed).
                let rc = unsafe { sys::ibv_destroy_qp(self.ptr) };
                if rc != 0 {
                    tracing::warn!(
                        qpn,
                        rc,
                        "ibv_destroy_qp failed; keeping its in-flight buffers alive"
                    );
                }
                rc == 0
            }
        };
        if destroyed {
            // The NIC no longer touches this QP's buffers: release them.
            self.builder.send_cq.forget_qp(qpn);
            self.builder.recv_cq.forget_qp(qpn);
        }
        self.ptr = ptr::null_mut();
    }
}

/// An RC queue pair in state `S` ([`Init`], [`Rtr`] or [`Rts`]). Holds its PD and CQs.
pub struct QueuePair<S> {
    inner: QpInner,
    _state: PhantomData<S>,
}

// SAFETY: a QP may move between threads; posting needs &mut self, so there is one poster at a time.
unsafe impl<S> Send for QueuePair<S> {}

impl<S> fmt::Debug for QueuePair<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueuePair")
            .field(
                "state",
                &std::any::type_name::<S>()
                    .rsplit("::")
                    .next()
                    .unwrap_or("?"),
            )
            .field("qpn", &self.inner.qpn())
            .field("device", &self.inner.device())
            .finish()
    }
}

/// QP state as the driver reports it (`ibv_query_qp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum QpState {
    /// RESET.
    Reset,
    /// INIT.
    Init,
    /// RTR.
    Rtr,
    /// RTS.
    Rts,
    /// SQD.
    Sqd,
    /// SQE.
    Sqe,
    /// ERR: recreate the QP.
    Error,
    /// Unknown value.
    Unknown,
}

fn random_psn() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64),
    );
    (h.finish() as u32) & 0x00ff_ffff
}

impl<S> QueuePair<S> {
    fn wrap(
        ptr: *mut sys::ibv_qp,
        pd: Arc<ProtectionDomain>,
        builder: QpBuilder,
        init: &sys::ibv_qp_init_attr,
        cm: Option<CmHold>,
    ) -> QueuePair<S> {
        let granted = QpCaps {
            max_send_wr: init.cap.max_send_wr.max(builder.caps.max_send_wr),
            max_recv_wr: init.cap.max_recv_wr.max(builder.caps.max_recv_wr),
            max_send_sge: init.cap.max_send_sge.max(builder.caps.max_send_sge),
            max_recv_sge: init.cap.max_recv_sge.max(builder.caps.max_recv_sge),
            max_inline: init.cap.max_inline_data.max(builder.caps.max_inline),
        };
        // Posts are checked against what was asked for, which the driver guarantees; the device-level caps
        // still bound it (eRDMA may report a larger queue than its 8192-WR limit honours).
        let caps = QpCaps {
            max_send_wr: builder.caps.max_send_wr.min(granted.max_send_wr),
            max_recv_wr: builder.caps.max_recv_wr.min(granted.max_recv_wr),
            max_send_sge: builder.caps.max_send_sge.min(granted.max_send_sge),
            max_recv_sge: builder.caps.max_recv_sge.min(granted.max_recv_sge),
            max_inline: builder.caps.max_inline.min(granted.max_inline),
        };
        QueuePair {
            inner: QpInner {
                ptr,
                pd,
                builder,
                caps,
                psn: random_psn(),
                peer_rd_atomic: 0,
                send_outstanding: Arc::new(AtomicUsize::new(0)),
                recv_outstanding: Arc::new(AtomicUsize::new(0)),
                cm,
                send_staged: Vec::new(),
                send_chain: Chain::new(),
                recv_staged: Vec::new(),
                recv_chain: Chain::new(),
            },
            _state: PhantomData,
        }
    }

    pub(crate) fn wrap_cm(
        ptr: *mut sys::ibv_qp,
        pd: Arc<ProtectionDomain>,
        builder: QpBuilder,
        init: &sys::ibv_qp_init_attr,
        cm: CmHold,
    ) -> QueuePair<S> {
        Self::wrap(ptr, pd, builder, init, Some(cm))
    }

    fn retype<T>(self) -> QueuePair<T> {
        // Move the inner value out without running Drop on the old wrapper.
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: `this` is never used or dropped again, so `inner` is moved exactly once.
        let inner = unsafe { ptr::read(&this.inner) };
        QueuePair {
            inner,
            _state: PhantomData,
        }
    }

    /// QP number.
    pub fn qpn(&self) -> u32 {
        self.inner.qpn()
    }

    /// Limits posts are checked against.
    pub fn caps(&self) -> QpCaps {
        self.inner.caps
    }

    /// The protection domain.
    pub fn pd(&self) -> &Arc<ProtectionDomain> {
        &self.inner.pd
    }

    /// The send completion queue.
    pub fn send_cq(&self) -> &Arc<CompletionQueue> {
        &self.inner.builder.send_cq
    }

    /// The receive completion queue.
    pub fn recv_cq(&self) -> &Arc<CompletionQueue> {
        &self.inner.builder.recv_cq
    }

    /// Send WRs posted whose completion has not been polled.
    pub fn send_outstanding(&self) -> usize {
        self.inner.send_outstanding.load(Ordering::Acquire)
    }

    /// Receive WRs posted whose completion has not been polled.
    pub fn recv_outstanding(&self) -> usize {
        self.inner.recv_outstanding.load(Ordering::Acquire)
    }

    /// Asks the driver for the QP's current state (`ibv_query_qp`); [`QpState::Error`] after a failed
    /// completion.
    pub fn state(&self) -> Result<QpState> {
        // SAFETY: plain C out-structs; ptr is live.
        let state = unsafe {
            let mut attr: sys::ibv_qp_attr = std::mem::zeroed();
            let mut init: sys::ibv_qp_init_attr = std::mem::zeroed();
            check(
                "ibv_query_qp",
                sys::ibv_query_qp(
                    self.inner.ptr,
                    &mut attr,
                    sys::ibv_qp_attr_mask::IBV_QP_STATE.0 as libc::c_int,
                    &mut init,
                ),
            )?;
            attr.qp_state
        };
        use sys::ibv_qp_state as s;
        Ok(match state {
            s::IBV_QPS_RESET => QpState::Reset,
            s::IBV_QPS_INIT => QpState::Init,
            s::IBV_QPS_RTR => QpState::Rtr,
            s::IBV_QPS_RTS => QpState::Rts,
            s::IBV_QPS_SQD => QpState::Sqd,
            s::IBV_QPS_SQE => QpState::Sqe,
            s::IBV_QPS_ERR => QpState::Error,
            _ => QpState::Unknown,
        })
    }

    /// Destroys this QP and creates a fresh one with the same PD, CQs and limits, in INIT. This is how a
    /// QP that hit an error comes back (eRDMA cannot reset an RTS QP); the new QP has a new QP number, so
    /// exchange endpoints again. Buffers of the old QP's unpolled work requests are released. Not available
    /// for QPs made by rdma_cm (connect again instead).
    pub fn recreate(self) -> Result<QueuePair<Init>> {
        if self.inner.cm.is_some() {
            return Err(Error::InvalidArgument(
                "QP was created by rdma_cm: reconnect with cm::connect/accept instead of recreate()".into(),
            ));
        }
        let pd = self.inner.pd.clone();
        let builder = self.inner.builder.clone();
        drop(self);
        builder.build(&pd)
    }
}

impl QueuePair<Init> {
    /// This QP's endpoint for the peer: QP number, PSN, the GID at the builder's GID index, LID and the
    /// port's active MTU. Fails with [`Error::Verbs`] if the port or GID cannot be read, and
    /// [`Error::InvalidArgument`] if that GID slot is empty (pick another index, e.g. 1 for RoCE v2).
    pub fn endpoint(&self) -> Result<Endpoint> {
        let b = &self.inner.builder;
        let ctx = self.inner.pd.context();
        let port = ctx.query_port(b.port)?;
        let gid = ctx.query_gid(b.port, b.gid_index)?;
        if gid.is_zero() && port.lid == 0 {
            return Err(Error::InvalidArgument(format!(
                "{}: GID index {} on port {} is empty; list the table with the `devices` example and pick a populated index",
                ctx.name(),
                b.gid_index,
                b.port
            )));
        }
        Ok(Endpoint {
            qpn: self.qpn(),
            psn: self.inner.psn,
            gid,
            gid_index: b.gid_index,
            lid: port.lid,
            mtu: port.active_mtu,
            rd_atomic: rd_atomic_limit(ctx.caps().max_rd_atomic),
        })
    }

    /// Moves to RTR towards `remote` (`ibv_modify_qp`): path MTU = min(local, remote). Fails with
    /// [`Error::Unsupported`] on iWARP devices (connect through [`crate::cm`] there) and [`Error::Verbs`]
    /// if the driver refuses the attributes. On failure the QP is destroyed; build a new one.
    pub fn into_rtr(mut self, remote: &Endpoint) -> Result<QueuePair<Rtr>> {
        self.inner.peer_rd_atomic = remote.rd_atomic;
        let ctx = self.inner.pd.context();
        ctx.caps().require(ctx.name(), Feature::ManualConnect)?;
        let local_mtu = ctx.query_port(self.inner.builder.port)?.active_mtu;
        let mtu = mtu_enum(local_mtu.min(remote.mtu))?;
        if remote.psn > 0x00ff_ffff {
            return Err(Error::InvalidArgument(format!(
                "endpoint psn {:#x}: expected 24 bits",
                remote.psn
            )));
        }
        let b = &self.inner.builder;
        let rd_atomic = rd_atomic_limit(ctx.caps().max_rd_atomic);
        // SAFETY: ibv_qp_attr holds integers, enums whose zero is a variant and pointers; all-zero is valid.
        let mut attr: sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
        attr.qp_state = sys::ibv_qp_state::IBV_QPS_RTR;
        attr.path_mtu = mtu;
        attr.dest_qp_num = remote.qpn;
        attr.rq_psn = remote.psn;
        attr.max_dest_rd_atomic = rd_atomic;
        attr.min_rnr_timer = 12;
        attr.ah_attr.dlid = remote.lid;
        attr.ah_attr.sl = 0;
        attr.ah_attr.src_path_bits = 0;
        attr.ah_attr.port_num = b.port;
        if !remote.gid.is_zero() {
            attr.ah_attr.is_global = 1;
            attr.ah_attr.grh.dgid = remote.gid.to_sys();
            attr.ah_attr.grh.sgid_index = u8::try_from(b.gid_index).map_err(|_| {
                Error::InvalidArgument(format!("gid index {} exceeds 255", b.gid_index))
            })?;
            attr.ah_attr.grh.hop_limit = 64;
        }
        use sys::ibv_qp_attr_mask as m;
        let mask = m::IBV_QP_STATE
            | m::IBV_QP_AV
            | m::IBV_QP_PATH_MTU
            | m::IBV_QP_DEST_QPN
            | m::IBV_QP_RQ_PSN
            | m::IBV_QP_MAX_DEST_RD_ATOMIC
            | m::IBV_QP_MIN_RNR_TIMER;
        self.inner.modify(&mut attr, mask, "ibv_modify_qp(RTR)")?;
        Ok(self.retype())
    }

    /// RTR then RTS in one call.
    pub fn connect(self, remote: &Endpoint) -> Result<QueuePair<Rts>> {
        self.into_rtr(remote)?.into_rts()
    }
}

impl QueuePair<Rtr> {
    /// Moves to RTS (`ibv_modify_qp`) with the builder's timeout and retry counts.
    pub fn into_rts(self) -> Result<QueuePair<Rts>> {
        let b = &self.inner.builder;
        let ctx = self.inner.pd.context();
        // SAFETY: ibv_qp_attr holds integers, enums whose zero is a variant and pointers; all-zero is valid.
        let mut attr: sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
        attr.qp_state = sys::ibv_qp_state::IBV_QPS_RTS;
        attr.timeout = b.timeout;
        attr.retry_cnt = b.retry_cnt;
        attr.rnr_retry = b.rnr_retry;
        attr.sq_psn = self.inner.psn;
        // Never more READs in flight than the peer serves: a responder that runs out of resources
        // fails them (IBV_WC_REM_INV_REQ_ERR) and takes the QP down.
        attr.max_rd_atomic = initiator_depth(ctx.caps().max_rd_atomic, self.inner.peer_rd_atomic);
        use sys::ibv_qp_attr_mask as m;
        let mask = m::IBV_QP_STATE
            | m::IBV_QP_TIMEOUT
            | m::IBV_QP_RETRY_CNT
            | m::IBV_QP_RNR_RETRY
            | m::IBV_QP_SQ_PSN
            | m::IBV_QP_MAX_QP_RD_ATOMIC;
        self.inner.modify(&mut attr, mask, "ibv_modify_qp(RTS)")?;
        Ok(self.retype())
    }
}

/// What an endpoint advertises as its responder resources: the device limit, 1..=16.
fn rd_atomic_limit(device: u32) -> u8 {
    device.clamp(1, 16) as u8
}

/// READs this end may have in flight towards a peer that serves `peer` at once (0: unknown).
fn initiator_depth(device: u32, peer: u8) -> u8 {
    let local = rd_atomic_limit(device);
    if peer == 0 { local } else { local.min(peer) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_mtu_is_min_of_both_ends() {
        let a = Endpoint {
            qpn: 1,
            psn: 2,
            gid: Gid::default(),
            gid_index: 1,
            lid: 0,
            mtu: 4096,
            rd_atomic: 16,
        };
        let b = Endpoint { mtu: 1024, ..a };
        assert_eq!(a.path_mtu(&b), 1024);
        assert_eq!(b.path_mtu(&a), 1024);
    }

    #[test]
    fn endpoint_json_roundtrip() {
        let e = Endpoint {
            qpn: 17,
            psn: 0xabcdef,
            gid: "::ffff:10.99.0.1".parse().unwrap(),
            gid_index: 1,
            lid: 0,
            mtu: 1024,
            rd_atomic: 8,
        };
        let j = serde_json::to_string(&e).unwrap();
        assert_eq!(
            j,
            r#"{"qpn":17,"psn":11259375,"gid":"::ffff:10.99.0.1","gid_index":1,"lid":0,"mtu":1024,"rd_atomic":8}"#
        );
        assert_eq!(serde_json::from_str::<Endpoint>(&j).unwrap(), e);
        // An endpoint from a build without `rd_atomic` still parses (0: unknown).
        let old: Endpoint = serde_json::from_str(
            r#"{"qpn":17,"psn":11259375,"gid":"::ffff:10.99.0.1","gid_index":1,"lid":0,"mtu":1024}"#,
        )
        .unwrap();
        assert_eq!(old.rd_atomic, 0);
        let bad = serde_json::from_str::<Endpoint>(
            r#"{"qpn":1,"psn":1,"gid":"x","gid_index":1,"lid":0,"mtu":1024}"#,
        );
        assert!(bad.unwrap_err().to_string().contains("gid 'x'"));
    }

    #[test]
    fn psns_are_24_bits_and_differ_between_qps() {
        let psns: std::collections::HashSet<u32> = (0..100).map(|_| random_psn()).collect();
        assert!(psns.iter().all(|p| *p <= 0x00ff_ffff), "{psns:?}");
        // A constant PSN would let a stale packet of an earlier QP with the same number be accepted.
        assert!(psns.len() > 90, "only {} distinct PSNs of 100", psns.len());
    }

    #[test]
    fn read_depth_is_the_smaller_of_ours_and_the_peers_responder_resources() {
        assert_eq!(initiator_depth(16, 4), 4, "the peer serves 4 READs at once");
        assert_eq!(initiator_depth(2, 16), 2);
        assert_eq!(
            initiator_depth(128, 0),
            16,
            "unknown peer: our limit, capped at 16"
        );
        assert_eq!(initiator_depth(0, 0), 1);
        assert_eq!(rd_atomic_limit(0), 1);
    }
}
