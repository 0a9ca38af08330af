//! Completion channels and completion queues, with the in-flight table that keeps posted buffers alive
//! until their completion is polled.
//!
//! The table is a slab indexed by `wr_id` (generation-tagged, so a late completion of a destroyed QP
//! never matches): a post takes its lock once per batch and a poll once per batch of up to 32
//! completions, and neither allocates in steady state.
//! [`CompletionQueue::completions`] is a borrowed iterator over ready completions;
//! [`CompletionQueue::poll_into`] and [`CompletionQueue::wait_into`] fill a caller's `Vec`, which keeps
//! its capacity between calls.

use std::fmt;
use std::os::fd::RawFd;
use std::ptr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rdma_sys as sys;

use crate::device::Context;
use crate::error::{Error, Result, check};
use crate::mr::MemoryRegion;
use crate::qp::Sources;
use crate::wr::WrTable;

/// A completion channel (`ibv_create_comp_channel`): a file descriptor that becomes readable when an
/// armed CQ gets a completion. The descriptor is non-blocking, so it can be registered with an event loop
/// (tokio's `AsyncFd`, epoll) through [`CompletionChannel::fd`].
pub struct CompletionChannel {
    ptr: *mut sys::ibv_comp_channel,
    ctx: Arc<Context>,
}

// SAFETY: the channel is a kernel fd wrapper; libibverbs calls on it are thread-safe.
unsafe impl Send for CompletionChannel {}
// SAFETY: shared use only reads the fd: ibv_get_cq_event is a read(2) on it, which the kernel serialises,
// and acknowledging events locks the CQ inside libibverbs.
unsafe impl Sync for CompletionChannel {}

impl fmt::Debug for CompletionChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompletionChannel")
            .field("fd", &self.fd())
            .finish()
    }
}

impl CompletionChannel {
    /// Creates a channel on `ctx` and makes its fd non-blocking. Fails with [`Error::Verbs`].
    pub fn new(ctx: &Arc<Context>) -> Result<Arc<CompletionChannel>> {
        // SAFETY: `ctx` is an open context (an Arc keeps it alive); the result is checked for null.
        let ptr = unsafe { sys::ibv_create_comp_channel(ctx.ptr) };
        if ptr.is_null() {
            return Err(Error::last("ibv_create_comp_channel"));
        }
        let ch = CompletionChannel {
            ptr,
            ctx: ctx.clone(),
        };
        let fd = ch.fd();
        // SAFETY: fd is the channel's open descriptor.
        unsafe {
            let fl = libc::fcntl(fd, libc::F_GETFL);
            if fl < 0 || libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK) < 0 {
                return Err(Error::last("fcntl(O_NONBLOCK)"));
            }
        }
        Ok(Arc::new(ch))
    }

    /// The channel's file descriptor (readable when an event is pending).
    pub fn fd(&self) -> RawFd {
        // SAFETY: `ptr` is the channel this value owns; it is destroyed only in Drop.
        unsafe { (*self.ptr).fd }
    }
}

impl Drop for CompletionChannel {
    fn drop(&mut self) {
        // SAFETY: every CQ using the channel holds an Arc to it, so none remains.
        let rc = unsafe { sys::ibv_destroy_comp_channel(self.ptr) };
        if rc != 0 {
            tracing::warn!(device = %self.ctx.name(), rc, "ibv_destroy_comp_channel failed");
        }
    }
}

/// Work completion status (`ibv_wc_status`).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct WcStatus(pub u32);

impl WcStatus {
    /// `IBV_WC_SUCCESS`.
    pub const SUCCESS: WcStatus = WcStatus(sys::ibv_wc_status::IBV_WC_SUCCESS);
    /// `IBV_WC_WR_FLUSH_ERR`: the QP was in error when this WR was processed.
    pub const WR_FLUSH_ERR: WcStatus = WcStatus(sys::ibv_wc_status::IBV_WC_WR_FLUSH_ERR);
    /// `IBV_WC_REM_ACCESS_ERR`: wrong rkey or range at the peer.
    pub const REM_ACCESS_ERR: WcStatus = WcStatus(sys::ibv_wc_status::IBV_WC_REM_ACCESS_ERR);

    /// The `IBV_WC_*` name.
    pub fn name(self) -> &'static str {
        const NAMES: [&str; 23] = [
            "IBV_WC_SUCCESS",
            "IBV_WC_LOC_LEN_ERR",
            "IBV_WC_LOC_QP_OP_ERR",
            "IBV_WC_LOC_EEC_OP_ERR",
            "IBV_WC_LOC_PROT_ERR",
            "IBV_WC_WR_FLUSH_ERR",
            "IBV_WC_MW_BIND_ERR",
            "IBV_WC_BAD_RESP_ERR",
            "IBV_WC_LOC_ACCESS_ERR",
            "IBV_WC_REM_INV_REQ_ERR",
            "IBV_WC_REM_ACCESS_ERR",
            "IBV_WC_REM_OP_ERR",
            "IBV_WC_RETRY_EXC_ERR",
            "IBV_WC_RNR_RETRY_EXC_ERR",
            "IBV_WC_LOC_RDD_VIOL_ERR",
            "IBV_WC_REM_INV_RD_REQ_ERR",
            "IBV_WC_REM_ABORT_ERR",
            "IBV_WC_INV_EECN_ERR",
            "IBV_WC_INV_EEC_STATE_ERR",
            "IBV_WC_FATAL_ERR",
            "IBV_WC_RESP_TIMEOUT_ERR",
            "IBV_WC_GENERAL_ERR",
            "IBV_WC_TM_ERR",
        ];
        NAMES
            .get(self.0 as usize)
            .copied()
            .unwrap_or("IBV_WC_UNKNOWN")
    }
}

impl fmt::Display for WcStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl fmt::Debug for WcStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({})", self.name(), self.0)
    }
}

/// What a completion was for (`ibv_wc_opcode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WcOpcode {
    /// SEND or SEND_WITH_IMM finished.
    Send,
    /// WRITE or WRITE_WITH_IMM finished.
    Write,
    /// READ finished; the destination buffer holds the data.
    Read,
    /// A RECV consumed an incoming SEND.
    Recv,
    /// A RECV consumed an incoming WRITE_WITH_IMM (no data in the RECV buffer; `imm` is set).
    RecvWriteImm,
    /// Something else (atomics, memory windows), with the raw value.
    Other(u32),
}

impl WcOpcode {
    fn from_raw(op: u32) -> WcOpcode {
        use sys::ibv_wc_opcode as o;
        match op {
            o::IBV_WC_SEND => WcOpcode::Send,
            o::IBV_WC_RDMA_WRITE => WcOpcode::Write,
            o::IBV_WC_RDMA_READ => WcOpcode::Read,
            o::IBV_WC_RECV => WcOpcode::Recv,
            o::IBV_WC_RECV_RDMA_WITH_IMM => WcOpcode::RecvWriteImm,
            other => WcOpcode::Other(other),
        }
    }
}

/// A polled work completion.
#[derive(Debug)]
pub struct Completion {
    /// Library-assigned work request id.
    pub wr_id: u64,
    /// The caller's tag given at post time.
    pub tag: u64,
    /// Status; anything but [`WcStatus::SUCCESS`] means the QP is in error.
    pub status: WcStatus,
    /// What completed. Only valid on success for some providers.
    pub opcode: WcOpcode,
    /// Bytes received (RECV) or transferred.
    pub byte_len: u32,
    /// Immediate data (host byte order) for SEND_WITH_IMM / WRITE_WITH_IMM receives.
    pub imm: Option<u32>,
    /// The local QP number.
    pub qp_num: u32,
    /// Vendor error code.
    pub vendor_err: u32,
    /// The destination region of a READ or RECV, handed back now that the NIC is done with it.
    pub buffer: Option<Arc<MemoryRegion>>,
}

impl Completion {
    /// True for a successful completion.
    pub fn is_ok(&self) -> bool {
        self.status == WcStatus::SUCCESS
    }

    /// `Ok(self)` on success, [`Error::Completion`] otherwise.
    pub fn into_result(self) -> Result<Completion> {
        if self.is_ok() {
            Ok(self)
        } else {
            Err(Error::Completion {
                wr_id: self.wr_id,
                tag: self.tag,
                status: self.status,
                vendor_err: self.vendor_err,
            })
        }
    }
}

/// What the CQ keeps for a posted work request until its completion is polled.
pub(crate) struct Pending {
    pub(crate) tag: u64,
    pub(crate) qpn: u32,
    /// Source slices (read by the NIC); held, never read, and released on completion.
    #[allow(dead_code)]
    pub(crate) keep: Sources,
    /// Destination region; returned in the completion.
    pub(crate) give_back: Option<Arc<MemoryRegion>>,
    /// The QP's outstanding counter, decremented on completion.
    pub(crate) outstanding: Arc<AtomicUsize>,
}

/// A completion queue (`ibv_create_cq`), optionally tied to a [`CompletionChannel`] for event-driven
/// waiting. Shared (`Arc`) between the QPs that use it and the code that polls it.
pub struct CompletionQueue {
    pub(crate) ptr: *mut sys::ibv_cq,
    ctx: Arc<Context>,
    channel: Option<Arc<CompletionChannel>>,
    capacity: u32,
    pending: Mutex<WrTable<Pending>>,
}

// SAFETY: libibverbs CQ operations are thread-safe; the in-flight table is behind a mutex.
unsafe impl Send for CompletionQueue {}
// SAFETY: shared use polls and arms the CQ through libibverbs, which locks the CQ itself; the in-flight
// table is behind a mutex.
unsafe impl Sync for CompletionQueue {}

impl fmt::Debug for CompletionQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompletionQueue")
            .field("capacity", &self.capacity)
            .field("in_flight", &self.in_flight())
            .finish()
    }
}

const POLL_BATCH: usize = 32;

/// Fails unless `in_flight + n` completions fit a CQ of `capacity` entries.
fn cq_room(device: &str, in_flight: usize, n: usize, capacity: u32) -> Result<()> {
    crate::caps::Caps::limit(
        device,
        "completions in flight on the completion queue (poll first, or size the CQ for every QP sharing it)",
        in_flight.saturating_add(n) as u64,
        u64::from(capacity),
    )
}

impl CompletionQueue {
    /// Creates a CQ with room for at least `entries` completions (`ibv_create_cq`), tied to `channel` if
    /// given. Fails with [`Error::ExceedsCaps`] above the device's `max_cqe` and [`Error::Verbs`] otherwise.
    pub fn new(
        ctx: &Arc<Context>,
        entries: u32,
        channel: Option<&Arc<CompletionChannel>>,
    ) -> Result<Arc<CompletionQueue>> {
        crate::caps::Caps::limit(
            ctx.name(),
            "completion queue entries",
            entries as u64,
            ctx.caps().max_cqe as u64,
        )?;
        let entries = entries.max(1);
        let ch = channel.map_or(ptr::null_mut(), |c| c.ptr);
        // SAFETY: ctx (and channel, if any) are live.
        let ptr =
            unsafe { sys::ibv_create_cq(ctx.ptr, entries as libc::c_int, ptr::null_mut(), ch, 0) };
        if ptr.is_null() {
            return Err(Error::last("ibv_create_cq"));
        }
        // SAFETY: `ptr` was just returned non-null by ibv_create_cq, so it points to a live ibv_cq.
        let capacity = unsafe { (*ptr).cqe }.max(0) as u32;
        Ok(Arc::new(CompletionQueue {
            ptr,
            ctx: ctx.clone(),
            channel: channel.cloned(),
            capacity,
            // Room for a full CQ up to a bound (a huge CQ grows its table only if it fills).
            pending: Mutex::new(WrTable::with_capacity((capacity as usize).min(4096))),
        }))
    }

    /// Actual number of entries the driver allocated.
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// The device.
    pub fn context(&self) -> &Arc<Context> {
        &self.ctx
    }

    /// The completion channel, if the CQ has one.
    pub fn channel(&self) -> Option<&Arc<CompletionChannel>> {
        self.channel.as_ref()
    }

    /// Work requests posted to QPs using this CQ whose completion has not been polled yet.
    pub fn in_flight(&self) -> usize {
        self.table().len()
    }

    fn table(&self) -> MutexGuard<'_, WrTable<Pending>> {
        // A panic while holding the lock cannot leave the table inconsistent (single inserts/takes).
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records a batch of posted work requests, refusing it with [`Error::ExceedsCaps`] when the CQ
    /// could not hold a completion for each of them besides those already in flight (from every QP
    /// sharing it): an overflowing CQ loses completions and moves its QPs to the error state. Each
    /// entry's `wr_id` goes to `assign(i, wr_id)` (to be written into WR `i` before posting).
    pub(crate) fn insert_batch(
        &self,
        device: &str,
        entries: impl ExactSizeIterator<Item = Pending>,
        mut assign: impl FnMut(usize, u64),
    ) -> Result<()> {
        let mut t = self.table();
        cq_room(device, t.len(), entries.len(), self.capacity)?;
        for (i, p) in entries.enumerate() {
            // The room check bounds the table by the CQ's u32 capacity, so an id always exists.
            let id = t.insert(p).ok_or_else(|| {
                Error::InvalidArgument("more than 2^32 work requests in flight".into())
            })?;
            assign(i, id);
        }
        Ok(())
    }

    pub(crate) fn remove(&self, ids: impl IntoIterator<Item = u64>) {
        let mut t = self.table();
        for id in ids {
            if let Some(p) = t.take(id) {
                p.outstanding.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }

    /// Drops the entries of a destroyed QP (its buffers are no longer used by the NIC).
    pub(crate) fn forget_qp(&self, qpn: u32) {
        self.table().retain(|p| p.qpn != qpn);
    }

    /// Polls up to `max` ready completions from the driver into `wcs` (`ibv_poll_cq`, called through
    /// the context's ops table as the C header's inline does); returns how many it wrote.
    fn poll_raw(&self, wcs: &mut [std::mem::MaybeUninit<sys::ibv_wc>]) -> Result<usize> {
        let want = libc::c_int::try_from(wcs.len()).unwrap_or(libc::c_int::MAX);
        // SAFETY: ptr is a live CQ and wcs has room for `want` entries.
        let n = unsafe {
            let poll = (*(*self.ptr).context)
                .ops
                .poll_cq
                .ok_or_else(|| Error::verbs("ibv_poll_cq", libc::ENOSYS))?;
            poll(self.ptr, want, wcs.as_mut_ptr().cast())
        };
        if n < 0 {
            return Err(Error::verbs(
                "ibv_poll_cq",
                if n == -1 { libc::EIO } else { -n },
            ));
        }
        Ok(n as usize)
    }

    /// Polls up to `max` completions without blocking and appends them to `out`. Returns how many were
    /// appended. Allocates nothing once `out` has the capacity (keep one `Vec` and clear it).
    pub fn poll_into(&self, out: &mut Vec<Completion>, max: usize) -> Result<usize> {
        let mut total = 0;
        while total < max {
            let want = (max - total).min(POLL_BATCH);
            // Left uninitialised: the driver writes the first `n` entries and only those are read.
            let mut wcs: [std::mem::MaybeUninit<sys::ibv_wc>; POLL_BATCH] =
                [const { std::mem::MaybeUninit::uninit() }; POLL_BATCH];
            let n = self.poll_raw(&mut wcs[..want])?;
            let mut t = self.table();
            for wc in &wcs[..n] {
                // SAFETY: ibv_poll_cq initialised the first n entries.
                let wc = unsafe { wc.assume_init_ref() };
                if let Some(c) = complete(&mut t, wc) {
                    out.push(c);
                    total += 1;
                }
            }
            drop(t);
            if n < want {
                break;
            }
        }
        Ok(total)
    }

    /// The completions ready now, as a borrowed iterator that takes one entry from the CQ per item
    /// (so dropping it early leaves the rest in the CQ) and allocates nothing. An `Err` item (the
    /// driver failed to poll) ends it.
    ///
    /// ```no_run
    /// # fn f(cq: &erdma_verbs::CompletionQueue) -> erdma_verbs::Result<()> {
    /// for c in cq.completions() {
    ///     let c = c?.into_result()?;
    ///     println!("tag {} done, {} bytes", c.tag, c.byte_len);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn completions(&self) -> Completions<'_> {
        Completions {
            cq: self,
            done: false,
        }
    }

    /// Polls without blocking; returns whatever completions are ready (possibly none).
    pub fn poll(&self) -> Result<Vec<Completion>> {
        let mut v = Vec::new();
        self.poll_into(&mut v, POLL_BATCH)?;
        Ok(v)
    }

    /// Busy-polls until at least `min` completions arrived or `timeout` passed ([`Error::Timeout`]).
    pub fn poll_blocking(&self, min: usize, timeout: Duration) -> Result<Vec<Completion>> {
        let start = Instant::now();
        let mut v = Vec::new();
        loop {
            self.poll_into(&mut v, usize::MAX)?;
            if v.len() >= min {
                return Ok(v);
            }
            if start.elapsed() > timeout {
                return Err(Error::Timeout(timeout, "completions (busy poll)"));
            }
            std::hint::spin_loop();
        }
    }

    /// Arms the CQ (`ibv_req_notify_cq`): the channel fires on the next completion.
    pub fn req_notify(&self, solicited_only: bool) -> Result<()> {
        // SAFETY: `ptr` is the CQ this value owns (destroyed only in Drop), and its context outlives it.
        unsafe {
            let f = (*(*self.ptr).context)
                .ops
                .req_notify_cq
                .ok_or_else(|| Error::verbs("ibv_req_notify_cq", libc::ENOSYS))?;
            check(
                "ibv_req_notify_cq",
                f(self.ptr, solicited_only as libc::c_int),
            )
        }
    }

    fn channel_or_err(&self) -> Result<&Arc<CompletionChannel>> {
        self.channel.as_ref().ok_or_else(|| {
            Error::InvalidArgument(
                "this completion queue has no completion channel: create it with Some(&channel)"
                    .into(),
            )
        })
    }

    /// Consumes pending channel events (non-blocking). Returns true if one was read.
    fn drain_event(&self) -> Result<bool> {
        let ch = self.channel_or_err()?;
        let mut cq: *mut sys::ibv_cq = ptr::null_mut();
        let mut cq_ctx: *mut libc::c_void = ptr::null_mut();
        // SAFETY: out-pointers are valid; the channel fd is non-blocking.
        let rc = unsafe { sys::ibv_get_cq_event(ch.ptr, &mut cq, &mut cq_ctx) };
        if rc != 0 {
            let err = std::io::Error::last_os_error();
            return match err.raw_os_error() {
                Some(libc::EAGAIN) => Ok(false),
                e => Err(Error::verbs("ibv_get_cq_event", e.unwrap_or(libc::EIO))),
            };
        }
        // Ack at once so destroying the CQ never blocks on unacknowledged events.
        // SAFETY: cq is the CQ the event was for (ours or a sibling on the same channel).
        unsafe { sys::ibv_ack_cq_events(cq, 1) };
        Ok(true)
    }

    /// Event-driven wait: polls, arms the CQ, polls again (closing the race), then sleeps on the channel
    /// fd until a completion arrives or `timeout` passes. Needs a completion channel.
    pub fn wait(&self, timeout: Option<Duration>) -> Result<Vec<Completion>> {
        let mut v = Vec::new();
        self.wait_into(&mut v, timeout)?;
        Ok(v)
    }

    /// [`CompletionQueue::wait`] into a caller's `Vec` (appended; returns how many): allocation-free
    /// once `out` has the capacity.
    pub fn wait_into(&self, out: &mut Vec<Completion>, timeout: Option<Duration>) -> Result<usize> {
        let fd = self.channel_or_err()?.fd();
        let start = Instant::now();
        loop {
            let n = self.poll_into(out, POLL_BATCH)?;
            if n > 0 {
                return Ok(n);
            }
            self.req_notify(false)?;
            let n = self.poll_into(out, POLL_BATCH)?;
            if n > 0 {
                return Ok(n);
            }
            let ms = match timeout {
                None => -1,
                Some(t) => {
                    let left = t.saturating_sub(start.elapsed());
                    if left.is_zero() {
                        return Err(Error::Timeout(t, "completion channel event"));
                    }
                    left.as_millis().min(i32::MAX as u128) as i32
                }
            };
            let mut pfd = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: pfd is valid for the call.
            let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
            if rc < 0 {
                let e = std::io::Error::last_os_error();
                if e.raw_os_error() != Some(libc::EINTR) {
                    return Err(Error::verbs(
                        "poll(completion channel)",
                        e.raw_os_error().unwrap_or(libc::EIO),
                    ));
                }
            }
            while self.drain_event()? {}
        }
    }

    /// Async event-driven wait for tokio: like [`CompletionQueue::wait`] without blocking the runtime.
    /// Must be called inside a tokio runtime with IO enabled (tokio panics otherwise: no reactor).
    #[cfg(feature = "tokio")]
    pub async fn wait_async(&self) -> Result<Vec<Completion>> {
        use tokio::io::Interest;
        use tokio::io::unix::AsyncFd;
        struct Fd(RawFd);
        impl std::os::fd::AsRawFd for Fd {
            fn as_raw_fd(&self) -> RawFd {
                self.0
            }
        }
        let fd = self.channel_or_err()?.fd();
        // SAFETY: the fd belongs to this CQ's completion channel, which `self` keeps open (Arc) for the
        // whole life of `afd`, a local of this call; it always reports the same descriptor.
        let afd = unsafe { AsyncFd::register_with_interest(Fd(fd), Interest::READABLE) }.map_err(
            |e| {
                Error::verbs(
                    "AsyncFd::register(completion channel)",
                    e.into_parts().1.raw_os_error().unwrap_or(libc::EIO),
                )
            },
        )?;
        loop {
            let v = self.poll()?;
            if !v.is_empty() {
                return Ok(v);
            }
            self.req_notify(false)?;
            let v = self.poll()?;
            if !v.is_empty() {
                return Ok(v);
            }
            let mut guard = afd.readable().await.map_err(|e| {
                Error::verbs("AsyncFd::readable", e.raw_os_error().unwrap_or(libc::EIO))
            })?;
            while self.drain_event()? {}
            guard.clear_ready();
        }
    }
}

/// Turns a polled work completion into a [`Completion`], taking its entry out of the table; `None`
/// for a completion of a destroyed QP (its entry is gone, or its slot holds a newer request).
fn complete(t: &mut WrTable<Pending>, wc: &sys::ibv_wc) -> Option<Completion> {
    let Some(p) = t.take(wc.wr_id) else {
        tracing::debug!(
            wr_id = wc.wr_id,
            "completion for a work request of a destroyed QP"
        );
        return None;
    };
    p.outstanding.fetch_sub(1, Ordering::AcqRel);
    let with_imm = wc.wc_flags & sys::ibv_wc_flags::IBV_WC_WITH_IMM.0 != 0;
    // SAFETY: reading the union's imm member is always defined (plain u32).
    let imm =
        with_imm.then(|| u32::from_be(unsafe { wc.imm_data_invalidated_rkey_union.imm_data }));
    Some(Completion {
        wr_id: wc.wr_id,
        tag: p.tag,
        status: WcStatus(wc.status),
        opcode: WcOpcode::from_raw(wc.opcode),
        byte_len: wc.byte_len,
        imm,
        qp_num: wc.qp_num,
        vendor_err: wc.vendor_err,
        buffer: p.give_back,
    })
}

/// The completions ready on a CQ, polled one at a time ([`CompletionQueue::completions`]).
#[derive(Debug)]
pub struct Completions<'a> {
    cq: &'a CompletionQueue,
    done: bool,
}

impl Iterator for Completions<'_> {
    type Item = Result<Completion>;

    fn next(&mut self) -> Option<Result<Completion>> {
        while !self.done {
            let mut wc = [std::mem::MaybeUninit::<sys::ibv_wc>::uninit()];
            match self.cq.poll_raw(&mut wc) {
                Ok(0) => self.done = true,
                Ok(_) => {
                    // SAFETY: ibv_poll_cq returned 1, so it initialised the entry.
                    let wc = unsafe { wc[0].assume_init_ref() };
                    if let Some(c) = complete(&mut self.cq.table(), wc) {
                        return Some(Ok(c));
                    }
                }
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            }
        }
        None
    }
}

impl Drop for CompletionQueue {
    fn drop(&mut self) {
        // SAFETY: every QP using this CQ holds an Arc to it, so none remains.
        let rc = unsafe { sys::ibv_destroy_cq(self.ptr) };
        if rc != 0 {
            tracing::warn!(device = %self.ctx.name(), rc, "ibv_destroy_cq failed; leaking buffers still in flight");
            // The device may still write into pending buffers: never free them.
            let t = std::mem::replace(&mut *self.table(), WrTable::with_capacity(0));
            std::mem::forget(t);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_names() {
        assert_eq!(WcStatus::SUCCESS.to_string(), "IBV_WC_SUCCESS");
        assert_eq!(
            WcStatus::REM_ACCESS_ERR.to_string(),
            "IBV_WC_REM_ACCESS_ERR"
        );
        assert_eq!(WcStatus::WR_FLUSH_ERR.name(), "IBV_WC_WR_FLUSH_ERR");
        assert_eq!(WcStatus(999).name(), "IBV_WC_UNKNOWN");
    }

    #[test]
    fn opcode_mapping() {
        assert_eq!(
            WcOpcode::from_raw(sys::ibv_wc_opcode::IBV_WC_RDMA_WRITE),
            WcOpcode::Write
        );
        assert_eq!(
            WcOpcode::from_raw(sys::ibv_wc_opcode::IBV_WC_RECV_RDMA_WITH_IMM),
            WcOpcode::RecvWriteImm
        );
    }

    #[test]
    fn a_batch_that_would_overflow_the_cq_is_refused() {
        assert!(cq_room("rxe0", 0, 16, 16).is_ok());
        assert!(cq_room("rxe0", 10, 6, 16).is_ok());
        let e = cq_room("rxe0", 10, 7, 16).unwrap_err();
        assert!(
            matches!(
                e,
                Error::ExceedsCaps {
                    requested: 17,
                    limit: 16,
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("completion queue"), "{e}");
    }

    #[test]
    fn completion_error_is_typed() {
        let c = Completion {
            wr_id: 3,
            tag: 9,
            status: WcStatus::REM_ACCESS_ERR,
            opcode: WcOpcode::Write,
            byte_len: 0,
            imm: None,
            qp_num: 1,
            vendor_err: 0x81,
            buffer: None,
        };
        let e = c.into_result().unwrap_err();
        assert!(
            e.to_string().contains("IBV_WC_REM_ACCESS_ERR") && e.to_string().contains("tag 9"),
            "{e}"
        );
    }

    fn pending(tag: u64, qpn: u32, outstanding: &Arc<AtomicUsize>) -> Pending {
        Pending {
            tag,
            qpn,
            keep: Sources::default(),
            give_back: None,
            outstanding: Arc::clone(outstanding),
        }
    }

    fn wc(wr_id: u64, imm: Option<u32>) -> sys::ibv_wc {
        // SAFETY: plain C struct; zero is a successful completion of nothing.
        let mut wc: sys::ibv_wc = unsafe { std::mem::zeroed() };
        wc.wr_id = wr_id;
        wc.byte_len = 4096;
        if let Some(imm) = imm {
            wc.wc_flags = sys::ibv_wc_flags::IBV_WC_WITH_IMM.0;
            wc.imm_data_invalidated_rkey_union.imm_data = imm.to_be();
        }
        wc
    }

    #[test]
    fn completions_map_back_to_their_tags_and_stale_ones_are_dropped() {
        let out = Arc::new(AtomicUsize::new(2));
        let mut t = WrTable::with_capacity(4);
        let a = t.insert(pending(7, 1, &out)).unwrap();
        let b = t.insert(pending(8, 2, &out)).unwrap();
        let c = complete(&mut t, &wc(b, Some(0xdead_beef))).unwrap();
        assert_eq!(
            (c.tag, c.imm, c.byte_len, c.is_ok()),
            (8, Some(0xdead_beef), 4096, true)
        );
        assert_eq!(out.load(Ordering::Acquire), 1, "the QP's counter went down");
        // QP 1 destroyed: its entry goes, and a late completion for it is ignored even after the
        // slot was reused.
        t.retain(|p| p.qpn != 1);
        let reused = t.insert(pending(9, 3, &out)).unwrap();
        assert!(complete(&mut t, &wc(a, None)).is_none());
        assert_eq!(complete(&mut t, &wc(reused, None)).unwrap().tag, 9);
    }

    #[test]
    fn steady_state_polling_bookkeeping_allocates_nothing() {
        let out = Arc::new(AtomicUsize::new(0));
        let mut t = WrTable::with_capacity(64);
        let mut done = Vec::with_capacity(64);
        let round = |t: &mut WrTable<Pending>, done: &mut Vec<Completion>| {
            done.clear();
            for tag in 0..64 {
                let id = t.insert(pending(tag, 1, &out)).unwrap_or(0);
                done.extend(complete(t, &wc(id, Some(tag as u32))));
            }
        };
        round(&mut t, &mut done);
        let rounds = if cfg!(miri) { 10 } else { 1_000 };
        let (n, ()) = crate::counting_alloc::allocations(|| {
            for _ in 0..rounds {
                round(&mut t, &mut done);
            }
        });
        assert_eq!(n, 0, "allocations in {rounds} × 64 WR completions");
        assert_eq!(done.len(), 64);
    }
}
