//! Work requests and posting: the send-side requests a [`QueuePair<Rts>`] posts (WRITE,
//! WRITE_WITH_IMM, READ, SEND, each checked against the QP's limits before the driver sees it), the
//! receives any QP may post, and the one path both take into `ibv_post_send` / `ibv_post_recv`: record
//! each request's buffers in the completion queue's in-flight table, link the chain, ring one doorbell.
//! The QP's lifecycle (builder, endpoint, INIT → RTR → RTS) is the parent module's.

use std::ptr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use rdma_sys as sys;

use super::{QpCaps, QpInner, QueuePair, Rts};
use crate::caps::{Caps, Feature, Transport};
use crate::cq::{CompletionQueue, Pending};
use crate::error::{Error, Result, check_returned};
use crate::mr::{Access, Exclusive, Local, RemoteBuf};
use crate::wr::{Chain, RawWr};

impl QpInner {
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
        // SAFETY: `ptr` is the QP this value owns; it is destroyed only when QpInner drops.
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
        for wr in wrs.iter() {
            check_recv(dev, &self.caps, wr)?;
        }
        let chain = &mut self.recv_chain;
        for wr in wrs.iter() {
            chain.push(wr.dst.as_ref().map(Exclusive::sge));
        }
        // SAFETY: `ptr` is the QP this value owns; it is destroyed only when QpInner drops.
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

impl<S> QueuePair<S> {
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

/// What a failed `ibv_post_*` left queued, from its `bad_wr` out-parameter.
#[derive(Debug, PartialEq, Eq)]
enum Refused {
    /// The driver refused WR *k*: the ones before it are queued, the rest are not.
    At(usize),
    /// `bad_wr` is NULL (rxe returns its doorbell write's error this way after queueing every WR) or
    /// names no WR of the chain: the WRs may be queued, so their buffers must stay held.
    Unknown,
}

fn refused(bad_is_null: bool, index: Option<usize>) -> Refused {
    match (bad_is_null, index) {
        (false, Some(k)) => Refused::At(k),
        _ => Refused::Unknown,
    }
}

/// Records `entries` (one per WR of `chain`, in order) in `cq`'s in-flight table, writing their ids
/// into the chain, counts them on the QP's `counter`, links the chain and hands its head to `post`
/// (`ibv_post_send` or `ibv_post_recv`). When the driver refuses WR *k*, the entries from *k* on are
/// removed again and [`Error::Post`] says `posted: k`; when it fails without naming a WR, nothing is
/// removed (the NIC may still use every buffer) and [`Error::PostUnknown`] says so.
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
        let source = Box::new(
            check_returned(call, rc)
                .err()
                .unwrap_or(Error::verbs(call, libc::EIO)),
        );
        return Err(match refused(bad.is_null(), chain.index_of(bad)) {
            Refused::At(posted) => {
                cq.remove((posted..n).filter_map(|i| chain.get(i).map(RawWr::wr_id)));
                Error::Post {
                    kind,
                    posted,
                    source,
                }
            }
            Refused::Unknown => Error::PostUnknown {
                kind,
                batch: n,
                source,
            },
        });
    }
    Ok(())
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

/// Checks one scatter/gather entry's length: a zero length means 2 GiB to mlx5 (and is refused or
/// ignored elsewhere), and `ibv_sge.length` is 32 bits, so a longer range would be truncated silently.
fn check_sge_len(which: &str, len: usize) -> Result<()> {
    if len == 0 {
        return Err(Error::InvalidArgument(format!(
            "{which} is 0 bytes long: a zero-length scatter/gather entry means 2 GiB to some providers \
             (mlx5); post at least 1 byte, or a buffer-less receive (post_recv_empty) for a notification"
        )));
    }
    if len as u64 > u32::MAX as u64 {
        return Err(Error::InvalidArgument(format!(
            "{which} is {len} bytes long: a scatter/gather entry holds at most 4 GiB - 1 (u32 length); \
             split it into several work requests"
        )));
    }
    Ok(())
}

/// Checks one receive WR against the QP's limits (SGE count, SGE length).
fn check_recv(dev: &str, c: &QpCaps, wr: &RecvWr) -> Result<()> {
    Caps::limit(
        dev,
        "receive SGEs per work request",
        u64::from(wr.dst.is_some()),
        c.max_recv_sge as u64,
    )?;
    if let Some(d) = &wr.dst {
        check_sge_len("receive destination", d.len)?;
    }
    Ok(())
}

/// Checks one send WR against the QP's limits (SGEs and their lengths, remote range, inline size, 4 GiB).
fn check_send(dev: &str, c: &QpCaps, caps: &Caps, wr: &SendWr) -> Result<()> {
    for l in wr.src.iter() {
        check_sge_len("send source", l.len)?;
    }
    if let Some(d) = &wr.dst {
        check_sge_len("read destination", d.len)?;
    }
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

    #[test]
    fn zero_and_over_4_gib_sges_are_refused() {
        let e = check_sge_len("receive destination", 0)
            .unwrap_err()
            .to_string();
        assert!(e.contains("0 bytes") && e.contains("2 GiB"), "{e}");
        let e = check_sge_len("read destination", 1 << 32)
            .unwrap_err()
            .to_string();
        assert!(e.contains("4294967296 bytes") && e.contains("split"), "{e}");
        check_sge_len("send source", 1).unwrap();
        check_sge_len("send source", u32::MAX as usize).unwrap();
    }

    #[test]
    fn a_failure_without_bad_wr_keeps_every_buffer_held() {
        // rxe: every WR queued, then the doorbell write failed and bad_wr stayed NULL.
        assert_eq!(refused(true, None), Refused::Unknown);
        // A pointer outside the chain says nothing about what was queued either.
        assert_eq!(refused(false, None), Refused::Unknown);
        assert_eq!(refused(false, Some(3)), Refused::At(3));
        let e = Error::PostUnknown {
            kind: "send",
            batch: 4,
            source: Box::new(Error::verbs("ibv_post_send", libc::EIO)),
        };
        assert_eq!(e.errno(), Some(libc::EIO));
        assert!(e.to_string().contains("stay held"), "{e}");
    }
}
