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

use std::fmt;
use std::marker::PhantomData;
use std::ptr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use rdma_sys as sys;
use serde::{Deserialize, Serialize};

use crate::caps::{Caps, Feature, Transport};
use crate::cq::{CompletionQueue, Pending};
use crate::device::{Gid, mtu_enum};
use crate::error::{Error, Result, check, check_returned};
use crate::mr::{Access, Exclusive, Local, RemoteBuf};
use crate::pd::ProtectionDomain;
use crate::wr::{Chain, RawWr};

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
        // SAFETY: plain C struct.
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
        // SAFETY: ptr is live.
        unsafe { (*self.ptr).qp_num }
    }

    fn device(&self) -> &str {
        self.pd.context().name()
    }

    /// Checks, records and posts `wrs` (drained on success and on a refused batch alike).
    fn post_staged_sends(&mut self, wrs: &mut Vec<SendWr>) -> Result<()> {
        let n = wrs.len();
        if n == 0 {
            return Ok(());
        }
        let dev = self.pd.context().name();
        let c = self.caps;
        let outstanding = self.send_outstanding.load(Ordering::Acquire);
        Caps::limit(
            dev,
            "outstanding send work requests (poll completions first)",
            (outstanding + n) as u64,
            c.max_send_wr as u64,
        )?;
        for wr in wrs.iter() {
            check_send(dev, &c, self.pd.context().caps(), wr)?;
        }
        let chain = &mut self.send_chain;
        for wr in wrs.iter() {
            let r = chain.push(
                wr.src
                    .iter()
                    .map(Local::sge)
                    .chain(wr.dst.iter().map(Exclusive::sge)),
            );
            let mut flags = sys::ibv_send_flags::IBV_SEND_SIGNALED.0;
            if wr.inline {
                flags |= sys::ibv_send_flags::IBV_SEND_INLINE.0;
            }
            r.send_flags = flags;
            let (opcode, remote, imm) = match wr.op {
                Op::Write(d) => (sys::ibv_wr_opcode::IBV_WR_RDMA_WRITE, Some(d), None),
                Op::WriteImm(d, imm) => (
                    sys::ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM,
                    Some(d),
                    Some(imm),
                ),
                Op::Read(s) => (sys::ibv_wr_opcode::IBV_WR_RDMA_READ, Some(s), None),
                Op::Send => (sys::ibv_wr_opcode::IBV_WR_SEND, None, None),
                Op::SendImm(imm) => (sys::ibv_wr_opcode::IBV_WR_SEND_WITH_IMM, None, Some(imm)),
            };
            r.opcode = opcode;
            if let Some(rm) = remote {
                r.wr.rdma = sys::rdma_t {
                    remote_addr: rm.addr,
                    rkey: rm.rkey,
                };
            }
            if let Some(imm) = imm {
                r.imm_data_invalidated_rkey_union.imm_data = imm.to_be();
            }
        }
        // SAFETY: ptr is live.
        let qpn = unsafe { (*self.ptr).qp_num };
        let counter = &self.send_outstanding;
        let qp = self.ptr;
        record_and_post(
            dev,
            &self.builder.send_cq,
            counter,
            chain,
            wrs.drain(..).map(|wr| Pending {
                tag: wr.tag,
                qpn,
                keep: wr.src,
                give_back: wr.dst.map(|d| d.mr),
                outstanding: Arc::clone(counter),
            }),
            ("ibv_post_send", "send"),
            // SAFETY: `qp` is live and in RTS (only QueuePair<Rts> posts sends); the chain and its
            // SGEs stay untouched until the call returns, and the buffers are held by the CQ's table
            // until their completions are polled.
            |head, bad| unsafe {
                match (*(*qp).context).ops.post_send {
                    Some(f) => f(qp, head, bad),
                    None => libc::ENOSYS,
                }
            },
        )
    }

    /// Records and posts receive requests `wrs` (drained on success and on a refused batch alike).
    fn post_staged_recvs(&mut self, wrs: &mut Vec<RecvWr>) -> Result<()> {
        let n = wrs.len();
        if n == 0 {
            return Ok(());
        }
        let dev = self.pd.context().name();
        let outstanding = self.recv_outstanding.load(Ordering::Acquire);
        Caps::limit(
            dev,
            "outstanding receive work requests (poll completions first)",
            (outstanding + n) as u64,
            self.caps.max_recv_wr as u64,
        )?;
        let chain = &mut self.recv_chain;
        for wr in wrs.iter() {
            chain.push(wr.dst.as_ref().map(Exclusive::sge));
        }
        // SAFETY: ptr is live.
        let qpn = unsafe { (*self.ptr).qp_num };
        let counter = &self.recv_outstanding;
        let qp = self.ptr;
        record_and_post(
            dev,
            &self.builder.recv_cq,
            counter,
            chain,
            wrs.drain(..).map(|wr| Pending {
                tag: wr.tag,
                qpn,
                keep: Sources::default(),
                give_back: wr.dst.map(|d| d.mr),
                outstanding: Arc::clone(counter),
            }),
            ("ibv_post_recv", "recv"),
            // SAFETY: `qp` is live (receives may be posted in every state); the chain and its SGEs
            // stay untouched until the call returns; the buffers are held by the CQ's table.
            |head, bad| unsafe {
                match (*(*qp).context).ops.post_recv {
                    Some(f) => f(qp, head, bad),
                    None => libc::ENOSYS,
                }
            },
        )
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

    /// Posts receive work requests as one chain (`ibv_post_recv`, one doorbell). Allowed in every state.
    /// Each WR's destination (if any) comes back in its [`crate::Completion`]. Fails with
    /// [`Error::ExceedsCaps`] when the receive queue would overflow. Takes any iterator (a `Vec`, an
    /// array): posting allocates nothing once the QP has posted a batch this large before.
    pub fn post_recv_batch(&mut self, wrs: impl IntoIterator<Item = RecvWr>) -> Result<()> {
        let mut staged = std::mem::take(&mut self.inner.recv_staged);
        staged.extend(wrs);
        let r = self.inner.post_staged_recvs(&mut staged);
        staged.clear();
        self.inner.recv_chain.clear();
        self.inner.recv_staged = staged;
        r
    }

    /// Posts one receive into `dst` (its handle comes back in the completion).
    pub fn post_recv(&mut self, dst: Exclusive, tag: u64) -> Result<()> {
        self.post_recv_batch([RecvWr {
            dst: Some(dst),
            tag,
        }])
    }

    /// Posts one receive without a buffer: enough for an incoming WRITE_WITH_IMM (its immediate arrives in
    /// the completion, its data in the memory it addressed).
    pub fn post_recv_empty(&mut self, tag: u64) -> Result<()> {
        self.post_recv_batch([RecvWr { dst: None, tag }])
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
        // SAFETY: plain C struct.
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
        // SAFETY: plain C struct.
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

/// A receive work request for [`QueuePair::post_recv_batch`].
#[derive(Debug)]
pub struct RecvWr {
    /// Destination, or `None` for a buffer-less receive (WRITE_WITH_IMM notifications).
    pub dst: Option<Exclusive>,
    /// Caller tag returned in the completion.
    pub tag: u64,
}

#[derive(Debug)]
enum Op {
    Write(RemoteBuf),
    WriteImm(RemoteBuf, u32),
    Read(RemoteBuf),
    Send,
    SendImm(u32),
}

/// A send-queue work request for [`QueuePair::post_send_batch`], built by [`SendWr::write`],
/// [`SendWr::write_imm`], [`SendWr::send`], [`SendWr::send_imm`] (a [`SourceWr`]) or [`SendWr::read`]
/// (a [`ReadWr`]); both convert into it. Every WR is signalled, so each one yields a completion that
/// releases its buffers.
///
/// The two builders keep sources and destinations apart: only WRs whose local buffers the NIC *reads*
/// can [`gather`](SourceWr::gather) more [`Local`] slices. A READ writes into its local buffer, so it
/// takes exactly one [`Exclusive`] destination and has no `gather` to add a shared one:
///
/// ```compile_fail,E0599
/// # fn f(dst: erdma_verbs::Exclusive, shared: erdma_verbs::Local, r: erdma_verbs::RemoteBuf) {
/// // The NIC would write into `shared` while other handles may read it.
/// let _ = erdma_verbs::SendWr::read(dst, r).gather(shared); // no method `gather` on ReadWr
/// # }
/// ```
#[derive(Debug)]
pub struct SendWr {
    op: Op,
    src: Sources,
    dst: Option<Exclusive>,
    tag: u64,
    inline: bool,
}

/// A WRITE, WRITE_WITH_IMM, SEND or SEND_WITH_IMM: the NIC reads the local [`Local`] sources.
#[derive(Debug)]
pub struct SourceWr {
    op: Op,
    src: Sources,
    tag: u64,
    inline: bool,
}

/// An RDMA READ: the NIC writes the peer's bytes into the one local [`Exclusive`] destination, which
/// comes back in the completion.
#[derive(Debug)]
pub struct ReadWr {
    dst: Exclusive,
    src: RemoteBuf,
    tag: u64,
}

/// The source slices of a WR: the first inline, further (gathered) ones in a `Vec` that stays empty,
/// and unallocated, for the common one-SGE request.
#[derive(Debug, Default)]
pub(crate) struct Sources {
    first: Option<Local>,
    more: Vec<Local>,
}

impl Sources {
    fn one(l: Local) -> Sources {
        Sources {
            first: Some(l),
            more: Vec::new(),
        }
    }

    fn push(&mut self, l: Local) {
        if self.first.is_none() {
            self.first = Some(l);
        } else {
            self.more.push(l);
        }
    }

    fn len(&self) -> usize {
        usize::from(self.first.is_some()) + self.more.len()
    }

    fn iter(&self) -> impl Iterator<Item = &Local> {
        self.first.iter().chain(&self.more)
    }

    fn bytes(&self) -> u64 {
        self.iter().map(|l| l.len() as u64).sum()
    }
}

impl SendWr {
    fn source(op: Op, src: Local) -> SourceWr {
        SourceWr {
            op,
            src: Sources::one(src),
            tag: 0,
            inline: false,
        }
    }
    /// RDMA WRITE of `src` to `dst` (the peer's memory).
    pub fn write(src: Local, dst: RemoteBuf) -> SourceWr {
        Self::source(Op::Write(dst), src)
    }
    /// RDMA WRITE_WITH_IMM: like WRITE, and consumes a receive at the peer that carries `imm`.
    pub fn write_imm(src: Local, dst: RemoteBuf, imm: u32) -> SourceWr {
        Self::source(Op::WriteImm(dst, imm), src)
    }
    /// RDMA READ of the peer's `src` into the local `dst` (returned in the completion).
    pub fn read(dst: Exclusive, src: RemoteBuf) -> ReadWr {
        ReadWr { dst, src, tag: 0 }
    }
    /// SEND of `src` into the peer's next posted receive.
    pub fn send(src: Local) -> SourceWr {
        Self::source(Op::Send, src)
    }
    /// SEND_WITH_IMM.
    pub fn send_imm(src: Local, imm: u32) -> SourceWr {
        Self::source(Op::SendImm(imm), src)
    }

    fn src_len(&self) -> u64 {
        self.src.bytes()
    }
}

impl SourceWr {
    /// Tag returned in the completion.
    pub fn tag(mut self, tag: u64) -> SourceWr {
        self.tag = tag;
        self
    }
    /// Appends another source SGE (gather). The total SGE count is checked against the QP's limit.
    pub fn gather(mut self, more: Local) -> SourceWr {
        self.src.push(more);
        self
    }
    /// Sends the data inline (copied into the WQE; size checked against the QP's inline limit).
    pub fn inline(mut self) -> SourceWr {
        self.inline = true;
        self
    }
}

impl ReadWr {
    /// Tag returned in the completion.
    pub fn tag(mut self, tag: u64) -> ReadWr {
        self.tag = tag;
        self
    }
}

impl From<SourceWr> for SendWr {
    fn from(w: SourceWr) -> SendWr {
        SendWr {
            op: w.op,
            src: w.src,
            dst: None,
            tag: w.tag,
            inline: w.inline,
        }
    }
}

impl From<ReadWr> for SendWr {
    fn from(w: ReadWr) -> SendWr {
        SendWr {
            op: Op::Read(w.src),
            src: Sources::default(),
            dst: Some(w.dst),
            tag: w.tag,
            inline: false,
        }
    }
}

/// Records `entries` (one per WR of `chain`, in order) in `cq`'s in-flight table, writing their ids
/// into the chain, counts them on the QP's `counter`, links the chain and hands its head to `post`
/// (`ibv_post_send` or `ibv_post_recv`). When the driver refuses WR *k*, the entries from *k* on are
/// removed again and [`Error::Post`] says `posted: k`.
fn record_and_post<W: RawWr>(
    dev: &str,
    cq: &CompletionQueue,
    counter: &AtomicUsize,
    chain: &mut Chain<W>,
    entries: impl ExactSizeIterator<Item = Pending>,
    (call, kind): (&'static str, &'static str),
    post: impl FnOnce(*mut W, *mut *mut W) -> libc::c_int,
) -> Result<()> {
    let n = entries.len();
    cq.insert_batch(dev, entries, |i, id| {
        if let Some(r) = chain.get_mut(i) {
            r.set_wr_id(id);
        }
    })?;
    counter.fetch_add(n, Ordering::AcqRel);
    let head = chain.link();
    let mut bad: *mut W = ptr::null_mut();
    let rc = post(head, &mut bad);
    if rc != 0 {
        let posted = chain.index_of(bad).unwrap_or(0);
        cq.remove((posted..n).filter_map(|i| chain.get(i).map(RawWr::wr_id)));
        let source = check_returned(call, rc)
            .err()
            .unwrap_or(Error::verbs(call, libc::EIO));
        return Err(Error::Post {
            kind,
            posted,
            source: Box::new(source),
        });
    }
    Ok(())
}

/// Checks one send WR against the QP's limits (SGEs, remote range, inline size, 4 GiB).
/// What an endpoint advertises as its responder resources: the device limit, 1..=16.
fn rd_atomic_limit(device: u32) -> u8 {
    device.clamp(1, 16) as u8
}

/// READs this end may have in flight towards a peer that serves `peer` at once (0: unknown).
fn initiator_depth(device: u32, peer: u8) -> u8 {
    let local = rd_atomic_limit(device);
    if peer == 0 { local } else { local.min(peer) }
}

/// On iWARP a READ response is a tagged write into the initiator's buffer, so the destination must
/// be registered with [`Access::REMOTE_WRITE`] (rxe and mlx5 do not need it; eRDMA and siw do).
fn check_read_destination(dev: &str, transport: Transport, access: Access) -> Result<()> {
    if transport == Transport::Iwarp && !access.contains(Access::REMOTE_WRITE) {
        return Err(Error::InvalidArgument(format!(
            "{dev} is iWARP: an RDMA READ's destination must be registered with Access::REMOTE_WRITE \
             (the read response is written into it like a remote write); register it with \
             Access::LOCAL_WRITE | Access::REMOTE_WRITE, and read it back with read_into"
        )));
    }
    Ok(())
}

fn check_send(dev: &str, c: &QpCaps, caps: &Caps, wr: &SendWr) -> Result<()> {
    let sges = wr.src.len() + usize::from(wr.dst.is_some());
    Caps::limit(
        dev,
        "send SGEs per work request",
        sges as u64,
        c.max_send_sge as u64,
    )?;
    if matches!(wr.op, Op::WriteImm(..)) {
        caps.require(dev, Feature::WriteWithImm)?;
    }
    if let (Op::Read(_), Some(d)) = (&wr.op, &wr.dst) {
        check_read_destination(dev, caps.transport, d.mr.access())?;
    }
    match &wr.op {
        Op::Write(r) | Op::WriteImm(r, _) => {
            if wr.src_len() > r.len {
                return Err(Error::OutOfBounds {
                    which: "remote",
                    start: 0,
                    end: wr.src_len(),
                    len: r.len,
                });
            }
        }
        Op::Read(r) => {
            let want = wr.dst.as_ref().map_or(0, |d| d.len as u64);
            if want > r.len {
                return Err(Error::OutOfBounds {
                    which: "remote",
                    start: 0,
                    end: want,
                    len: r.len,
                });
            }
        }
        Op::Send | Op::SendImm(_) => {}
    }
    if wr.inline {
        Caps::limit(
            dev,
            "inline bytes per work request",
            wr.src_len(),
            c.max_inline as u64,
        )?;
    }
    if wr.src_len() > u32::MAX as u64 {
        return Err(Error::InvalidArgument(format!(
            "work request of {} bytes exceeds 4 GiB",
            wr.src_len()
        )));
    }
    Ok(())
}

impl QueuePair<Rts> {
    /// Posts send work requests as one chain (`ibv_post_send`, one doorbell), after checking each against
    /// the QP's limits: SGE count, inline size, queue depth ([`Error::ExceedsCaps`]), range sizes
    /// ([`Error::OutOfBounds`]). Buffers stay held until each completion is polled from the send CQ.
    /// If the driver refuses WR *k*, WRs before it are posted and [`Error::Post`] says `posted: k`.
    /// A batch that does not fit the completion queue (every QP sharing it included) is refused with
    /// [`Error::ExceedsCaps`] before anything is posted.
    ///
    /// Takes [`SourceWr`]s, [`ReadWr`]s or, for a batch that mixes them, [`SendWr`]s, from any iterator
    /// (a `Vec`, an array). Posting allocates nothing once the QP has posted a batch this large before
    /// (and a WR gathers more than one source only at the cost of that `Vec`).
    pub fn post_send_batch<W: Into<SendWr>>(
        &mut self,
        wrs: impl IntoIterator<Item = W>,
    ) -> Result<()> {
        let mut staged = std::mem::take(&mut self.inner.send_staged);
        staged.extend(wrs.into_iter().map(Into::into));
        let r = self.inner.post_staged_sends(&mut staged);
        staged.clear();
        self.inner.send_chain.clear();
        self.inner.send_staged = staged;
        r
    }

    /// One RDMA WRITE (see [`QueuePair::post_send_batch`] for the checks).
    pub fn post_write(&mut self, src: Local, dst: RemoteBuf, tag: u64) -> Result<()> {
        self.post_send_batch([SendWr::write(src, dst).tag(tag)])
    }

    /// One RDMA WRITE_WITH_IMM (the peer needs a posted receive).
    pub fn post_write_imm(&mut self, src: Local, dst: RemoteBuf, imm: u32, tag: u64) -> Result<()> {
        self.post_send_batch([SendWr::write_imm(src, dst, imm).tag(tag)])
    }

    /// One RDMA READ into `dst` (returned in the completion).
    pub fn post_read(&mut self, dst: Exclusive, src: RemoteBuf, tag: u64) -> Result<()> {
        self.post_send_batch([SendWr::read(dst, src).tag(tag)])
    }

    /// One SEND (the peer needs a posted receive large enough).
    pub fn post_send(&mut self, src: Local, tag: u64) -> Result<()> {
        self.post_send_batch([SendWr::send(src).tag(tag)])
    }
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

    #[test]
    fn iwarp_read_destinations_must_be_remotely_writable() {
        let e = check_read_destination("erdma_0", Transport::Iwarp, Access::LOCAL_WRITE)
            .unwrap_err()
            .to_string();
        assert!(e.contains("REMOTE_WRITE") && e.contains("erdma_0"), "{e}");
        check_read_destination(
            "erdma_0",
            Transport::Iwarp,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        )
        .unwrap();
        check_read_destination("rxe0", Transport::Ib, Access::LOCAL_WRITE).unwrap();
    }
}
