//! The receiving end: accepts the sender, grants a credit for every ring slot the pipeline freed,
//! and hands each chunk to the pipeline in order once its WRITE_WITH_IMM arrived.

use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use erdma_verbs::cm::Listener;
use erdma_verbs::{Access, CompletionQueue, Context, MemoryRegion, RemoteBuf, WcOpcode};

use super::config::RdmaConfig;
use super::plumbing::{
    CREDIT_TAG, IDLE_WAIT, InFlight, RECV_TAG, Shared, SharedQp, SideWriter, Workers, lock_qp,
    poll_some, post_recvs, read_msg,
};
use super::setup::{
    CmGroups, Links, ManualQps, Plan, SideChannel, listen_ip, register_ring, start,
};
use super::wire::{ReceiverWelcome, Wire, Wiring, check_hello, decode_imm, encode_imm, unexpected};
use crate::error::TransportError;
use crate::ring::{SlotToken, StagingRing};
use crate::transport::{Chunk, RecvTransport, TransferSummary, accept_within};

/// What the pollers and the side-channel reader tell `next_chunk`.
#[derive(Debug)]
enum Event {
    Data { imm: u32, len: u32, qp: usize },
    End(TransferSummary),
    Failed(TransportError),
}

/// How often `next_chunk` looks for a recorded failure while it waits for an event.
const FAILURE_CHECK: Duration = Duration::from_millis(100);

/// The sending side of the event channel. It never blocks: a worker must not hang on a transport
/// that stopped reading (its Drop joins the workers). A full channel means the peer broke the credit
/// protocol (or a worker kept reporting failures); the caller decides.
#[derive(Clone, Debug)]
struct EventTx(mpsc::SyncSender<Event>);

/// What became of an event.
enum Sent {
    Queued,
    /// The transport is gone: the worker ends.
    Gone,
    Full,
}

impl EventTx {
    fn send(&self, ev: Event) -> Sent {
        match self.0.try_send(ev) {
            Ok(()) => Sent::Queued,
            Err(mpsc::TrySendError::Disconnected(_)) => Sent::Gone,
            Err(mpsc::TrySendError::Full(_)) => Sent::Full,
        }
    }
}

/// Receiving half of the RDMA transport (the server: it accepts one [`RdmaSender`](super::RdmaSender)).
#[derive(Debug)]
pub struct RdmaReceiver {
    cfg: RdmaConfig,
    ring: Arc<StagingRing>,
    shared: Arc<Shared>,
    side: Arc<SideWriter>,
    events: mpsc::Receiver<Event>,
    links: Links,
    _mrs: Vec<Vec<Arc<MemoryRegion>>>,
    workers: Workers,
    /// Arrived chunks, handed out in session order; knows the next chunk to deliver.
    order: Reorder,
    end: Option<TransferSummary>,
    /// Session-wide number of this transfer's first chunk.
    base: u64,
    bytes: u64,
    peer: String,
}

/// Chunks arriving over several QPs, handed out in session order: one that arrives ahead of an
/// earlier one waits in a fixed table (at `g % window`) until its turn. At most `window` (= ring
/// slots) chunks are in flight, which the immediate decoding enforces.
#[derive(Debug)]
struct Reorder {
    window: u64,
    chunk_bytes: usize,
    pending: InFlight<usize>,
    /// Session-wide number of the next chunk to hand out.
    next: u64,
    /// Chunks that arrived before an earlier one (session-wide).
    reordered: u64,
}

impl Reorder {
    fn new(window: usize, chunk_bytes: usize) -> Reorder {
        Reorder {
            window: window as u64,
            chunk_bytes,
            pending: InFlight::new(window),
            next: 0,
            reordered: 0,
        }
    }

    /// Records the chunk whose WRITE_WITH_IMM carried `imm` and `len` bytes on QP `qp`. Fails for
    /// a chunk outside the credit window, a bad length, or a chunk that arrived twice.
    fn arrive(&mut self, imm: u32, len: u32, qp: usize) -> Result<(), TransportError> {
        let g = decode_imm(imm, self.next, self.window)?;
        let len = len as usize;
        let chunk_bytes = self.chunk_bytes;
        if len == 0 || len > chunk_bytes {
            return Err(TransportError::Protocol(format!(
                "chunk #{g} on QP {qp} reports {len} bytes; expected 1..={chunk_bytes} \
                 (does this RDMA provider fill byte_len for WRITE_WITH_IMM?)"
            )));
        }
        if self
            .pending
            .put((g % self.window) as usize, g, len)
            .is_err()
        {
            return Err(TransportError::Protocol(format!(
                "chunk #{g} arrived twice"
            )));
        }
        if g != self.next {
            self.reordered += 1;
        }
        Ok(())
    }

    /// The next chunk in order, once it arrived: its number and length.
    fn take_next(&mut self) -> Option<(u64, usize)> {
        let g = self.next;
        let len = self.pending.take((g % self.window) as usize, g)?;
        self.next = g + 1;
        Some((g, len))
    }
}

/// What the receiver's setup leaves behind.
#[derive(Debug)]
struct ReceiverSetup {
    links: Links,
    /// Every ring slot registered (remote-writable) on every device, per device.
    mrs: Vec<Vec<Arc<MemoryRegion>>>,
    /// The sender's credit word.
    credit_target: RemoteBuf,
}

impl RdmaReceiver {
    /// Accepts one [`RdmaSender`](super::RdmaSender) on `listener` (the side channel), registers every slot of
    /// `ring` on every device, connects `cfg.qps` queue pairs and starts granting credits.
    /// Fails with [`TransportError::Config`] naming the field when the two ends disagree (the
    /// sender is told why before the connection closes), with [`TransportError::Rdma`] when a
    /// verb fails, and after `cfg.timeout` if the sender stalls during setup.
    pub fn accept(
        listener: &TcpListener,
        cfg: &RdmaConfig,
        ring: &Arc<StagingRing>,
    ) -> Result<Self, TransportError> {
        cfg.validate()?;
        let (stream, addr) = accept_within(listener, cfg.timeout, "an RDMA sender")?;
        Self::over_stream(stream, format!("sender {addr}"), cfg, ring)
    }

    /// The receiving end over a side-channel connection someone else opened (e.g. one this end
    /// connected to the sender, as a consumer pulling from a producer does): the same set-up as
    /// [`RdmaReceiver::accept`] from there on; `peer` names the sender in errors.
    pub fn over_stream(
        stream: std::net::TcpStream,
        peer: String,
        cfg: &RdmaConfig,
        ring: &Arc<StagingRing>,
    ) -> Result<Self, TransportError> {
        cfg.validate()?;
        let mut side = SideChannel::open(stream, &peer, cfg.timeout)?;
        let setup = Self::setup(cfg, ring, &mut side, &peer);
        let ReceiverSetup {
            links,
            mrs,
            credit_target,
        } = side.or_abort(setup)?;
        let writer = Arc::clone(&side.writer);
        let reader = side.into_reader()?;
        let (shared, mut workers) = start(ring, &writer);
        // Bounded and preallocated (no allocation per chunk): a sender that keeps to its credits has
        // at most `slots` chunks undelivered, and each worker reports at most a few failures.
        let (tx, events) = mpsc::sync_channel(ring.slots() + 8 * (links.devs.len() + 3));
        let tx = EventTx(tx);
        {
            let shared = Arc::clone(&shared);
            let tx = tx.clone();
            let peer = peer.clone();
            let stall = cfg.timeout;
            workers.spawn("gpu-stage-rdma-side", move || {
                receiver_side_reader(reader, &shared, &tx, &peer, stall)
            })?;
        }
        workers.spawn_pollers("gpu-stage-rdma-rcq", &links, |cq, my_qps| {
            let shared = Arc::clone(&shared);
            let tx = tx.clone();
            let peer = peer.clone();
            move || receiver_poller(&cq, &my_qps, &shared, &tx, &peer)
        })?;
        {
            let d0 = links.dev_of(0);
            let src = MemoryRegion::new(&d0.pd, 8, Access::LOCAL_WRITE).map_err(
                TransportError::rdma(format!("{}: registering the credit source", d0.ctx.name())),
            )?;
            let qp0 = Arc::clone(&links.qps[0]);
            let shared = Arc::clone(&shared);
            let ring = Arc::clone(ring);
            let peer = peer.clone();
            workers.spawn("gpu-stage-rdma-credit", move || {
                credit_loop(&ring, &qp0, &src, credit_target, &shared, &tx, &peer)
            })?;
        }
        Ok(RdmaReceiver {
            cfg: cfg.clone(),
            ring: Arc::clone(ring),
            shared,
            side: writer,
            events,
            links,
            _mrs: mrs,
            workers,
            order: Reorder::new(ring.slots(), ring.chunk_bytes()),
            end: None,
            base: 0,
            bytes: 0,
            peer,
        })
    }

    /// Hello → (rdma_cm: Listening, accept) → Welcome → Ready: connects every QP and publishes the
    /// slot table.
    fn setup(
        cfg: &RdmaConfig,
        ring: &Arc<StagingRing>,
        side: &mut SideChannel,
        peer: &str,
    ) -> Result<ReceiverSetup, TransportError> {
        let plan = Plan::new(cfg, ring.config())?;
        let hello = match read_msg(&mut side.reader, peer, "waiting for Hello")? {
            Wire::Hello(h) => h,
            m => return Err(unexpected(peer, "Hello", &m)),
        };
        check_hello(&hello, &plan.ring, cfg.qps, plan.wiring)?;
        let (links, endpoints) = match plan.wiring {
            Wiring::Manual => {
                let inits = ManualQps::create(cfg, &plan, peer)?;
                let endpoints = inits.endpoints.clone();
                (inits.connect(&hello.endpoints, peer)?, endpoints)
            }
            Wiring::RdmaCm => (accept_cm(cfg, &plan, side, peer)?, Vec::new()),
        };
        let mrs = links
            .devs
            .iter()
            .map(|d| register_ring(&d.pd, ring, Access::LOCAL_WRITE | Access::REMOTE_WRITE))
            .collect::<Result<Vec<_>, _>>()?;
        let slots = mrs
            .iter()
            .map(|v| v.iter().map(|m| m.remote()).collect())
            .collect();
        side.writer.send(&Wire::Welcome(ReceiverWelcome {
            ring: plan.ring,
            devices: links.device_names(),
            endpoints,
            slots,
        }))?;
        let credit = match read_msg(&mut side.reader, peer, "waiting for Ready")? {
            Wire::Ready { credit } => credit,
            m => return Err(unexpected(peer, "Ready", &m)),
        };
        if credit.len < 8 {
            return Err(TransportError::Protocol(format!(
                "the {peer}'s credit word is {} bytes; 8 expected",
                credit.len
            )));
        }
        Ok(ReceiverSetup {
            links,
            mrs,
            credit_target: credit,
        })
    }

    /// Queue pairs in use.
    pub fn qps(&self) -> usize {
        self.links.qps.len()
    }

    /// Names of the local devices in use.
    pub fn devices(&self) -> Vec<String> {
        self.links.device_names()
    }

    /// Chunks of this session that arrived before an earlier chunk (on another QP) and were held
    /// back until their turn: how much the receiver had to reorder.
    pub fn reordered(&self) -> u64 {
        self.order.reordered
    }

    /// Hands chunk `g` to the pipeline with the slot the credit thread granted for it. Fails if
    /// the sender wrote it without holding a credit.
    fn deliver(&mut self, g: u64, len: usize) -> Result<(Chunk, SlotToken), TransportError> {
        let slots = self.ring.slots() as u64;
        let slot = (g % slots) as usize;
        let token = self.shared.lock().credits.pop_front();
        let token = match token {
            Some(t) if t.slot() == slot => t,
            other => {
                return Err(TransportError::Protocol(format!(
                    "the {} wrote chunk #{g} into slot {slot} without a credit for it (next credited slot: {:?})",
                    self.peer,
                    other.as_ref().map(SlotToken::slot)
                )));
            }
        };
        let seq = g - self.base;
        self.bytes += len as u64;
        let chunk = Chunk {
            seq,
            slot,
            offset: seq * self.ring.chunk_bytes() as u64,
            len,
        };
        Ok((chunk, token))
    }
}

/// rdma_cm: listens on one address per device, tells the sender where, and accepts its `cfg.qps`
/// connections in QP order.
fn accept_cm(
    cfg: &RdmaConfig,
    plan: &Plan,
    side: &SideChannel,
    peer: &str,
) -> Result<Links, TransportError> {
    let ips = if cfg.cm_addrs.is_empty() {
        cfg.devices
            .iter()
            .map(|name| {
                let ctx = Context::open(name)
                    .map_err(TransportError::rdma(format!("opening RDMA device {name}")))?;
                listen_ip(&ctx, cfg)
            })
            .collect::<Result<Vec<_>, _>>()?
    } else {
        cfg.cm_addrs.clone()
    };
    let listeners = ips
        .iter()
        .map(|ip| {
            Listener::bind(SocketAddr::new(*ip, 0))
                .map_err(TransportError::rdma(format!("rdma_cm: listening on {ip}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let addrs: Vec<SocketAddr> = ips
        .iter()
        .zip(&listeners)
        .map(|(ip, l)| SocketAddr::new(*ip, l.port()))
        .collect();
    side.writer.send(&Wire::Listening {
        addrs: addrs.clone(),
    })?;
    let mut groups = CmGroups::new(listeners.len().min(cfg.qps), cfg.qps);
    for q in 0..cfg.qps {
        let g = q % groups.groups();
        let req = listeners[g]
            .get_request(cfg.timeout)
            .map_err(TransportError::rdma(format!(
                "rdma_cm: waiting on {} for QP {q}",
                addrs[g]
            )))?;
        let idx = req
            .private_data()
            .get(..4)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_le_bytes);
        if idx != Some(q as u32) {
            let _ = req.reject();
            return Err(TransportError::Protocol(format!(
                "rdma_cm: expected the connection of QP {q}, got {idx:?}"
            )));
        }
        let d = groups.device(q, req.context(), addrs[g], cfg, plan)?;
        let qp = req
            .accept(&d.pd, &d.builder(cfg, plan.depth), &[], cfg.timeout)
            .map_err(TransportError::rdma(format!(
                "rdma_cm: accepting QP {q} from the {peer}"
            )))?;
        groups.push(q, qp, plan, peer)?;
    }
    groups.finish()
}

/// Runs [`receiver_side_reader`] over `bytes` as the sender's side of the channel, with the event
/// queue of a 4-slot ring; the number of ENDs it queued (the fuzz target and the tests: it must end,
/// with a failure event, on any input, and queue no more than the channel holds).
#[cfg(any(test, feature = "fuzzing"))]
pub(super) fn fuzz_side_reader(bytes: &[u8]) -> usize {
    let shared = Shared::default();
    let (tx, events) = mpsc::sync_channel(4 + 8);
    receiver_side_reader(
        std::io::BufReader::new(bytes),
        &shared,
        &EventTx(tx),
        "fake sender",
        Duration::from_millis(20),
    );
    events
        .try_iter()
        .filter(|e| matches!(e, Event::End(_)))
        .count()
}

fn receiver_side_reader(
    mut reader: impl std::io::BufRead,
    shared: &Shared,
    tx: &EventTx,
    peer: &str,
    stall: Duration,
) {
    let mut line = String::new();
    loop {
        line.clear();
        let read = super::wire::read_line_after_setup(&mut reader, &mut line, stall, || {
            !shared.lock().stop
        });
        let err = match read {
            Ok(None) => return,
            Ok(Some(0)) => TransportError::Closed(format!(
                "the {peer} closed the side channel (process exited or connection lost)"
            )),
            Err(e) => TransportError::Io {
                context: format!("side channel to the {peer}"),
                source: e,
            },
            Ok(Some(_)) => match Wire::from_line(&line) {
                Ok(Wire::End { chunks, bytes }) => {
                    match tx.send(Event::End(TransferSummary { chunks, bytes })) {
                        Sent::Queued => continue,
                        Sent::Gone => return,
                        Sent::Full => TransportError::Protocol(format!(
                            "the {peer} ended a transfer while the last one's chunks were still queued"
                        )),
                    }
                }
                Ok(Wire::Abort { reason }) => {
                    TransportError::Aborted(format!("the {peer} aborted: {reason}"))
                }
                Ok(m) => unexpected(peer, "End", &m),
                Err(e) => e,
            },
        };
        if shared.lock().stop {
            return;
        }
        shared.fail(err.to_string());
        let _ = tx.send(Event::Failed(err));
        return;
    }
}

fn receiver_poller(
    cq: &CompletionQueue,
    qps: &[(usize, SharedQp)],
    shared: &Shared,
    tx: &EventTx,
    peer: &str,
) {
    let mut out = Vec::new();
    let fail = |msg: String| {
        shared.fail(msg.clone());
        let _ = tx.send(Event::Failed(TransportError::Closed(msg)));
    };
    loop {
        if shared.lock().stop {
            return;
        }
        out.clear();
        if let Err(e) = poll_some(cq, &mut out) {
            fail(format!("polling completions: {e}"));
            return;
        }
        for c in out.drain(..) {
            if c.tag & RECV_TAG != 0 {
                let q = (c.tag & !RECV_TAG) as usize;
                if !c.is_ok() {
                    if !shared.stopping() {
                        fail(format!(
                            "receive on QP {q} from the {peer} failed: {} (the peer went away or broke the protocol)",
                            c.status
                        ));
                    }
                    continue;
                }
                match (c.opcode, c.imm) {
                    (WcOpcode::RecvWriteImm, Some(imm)) => {
                        match tx.send(Event::Data {
                            imm,
                            len: c.byte_len,
                            qp: q,
                        }) {
                            Sent::Queued => {}
                            Sent::Gone => return,
                            Sent::Full => {
                                fail(format!(
                                    "the {peer} wrote more chunks than it holds credits for"
                                ));
                                continue;
                            }
                        }
                    }
                    (op, _) => {
                        fail(format!(
                            "the {peer} sent {op:?} on QP {q}; only WRITE_WITH_IMM is expected"
                        ));
                        continue;
                    }
                }
                if let Some((_, qp)) = qps.iter().find(|(i, _)| *i == q)
                    && let Err(e) = post_recvs(&mut lock_qp(qp), q, 1, peer)
                {
                    fail(e.to_string());
                }
            } else if !c.is_ok() && !shared.stopping() {
                fail(format!(
                    "credit WRITE to the {peer} failed: {} (vendor error {:#x}); the peer process or its NIC went away",
                    c.status, c.vendor_err
                ));
            }
        }
    }
}

/// Acquires ring slots in session-wide chunk order and grants one credit per acquired slot
/// (several at once when the pipeline freed several).
fn credit_loop(
    ring: &Arc<StagingRing>,
    qp0: &SharedQp,
    src: &Arc<MemoryRegion>,
    target: RemoteBuf,
    shared: &Shared,
    tx: &EventTx,
    peer: &str,
) {
    let slots = ring.slots() as u64;
    let mut g = 0u64;
    let fail = |msg: String| {
        shared.fail(msg.clone());
        let _ = tx.send(Event::Failed(TransportError::Closed(msg)));
    };
    let (Ok(local), Ok(remote)) = (src.slice(0..8), target.slice(0..8)) else {
        fail("credit buffers are smaller than 8 bytes".into());
        return;
    };
    // Reused between grants: the loop allocates nothing once it held a full ring's worth.
    let mut got = Vec::with_capacity(slots as usize);
    loop {
        if shared.stopping() {
            return;
        }
        let mut wait = IDLE_WAIT;
        // Take every slot that is free now (the first may wait a little).
        while (got.len() as u64) < slots {
            let slot = ((g + got.len() as u64) % slots) as usize;
            match ring.acquire_timeout(slot, wait) {
                Ok(Some(token)) => got.push(token),
                Ok(None) => break,
                Err(e) => {
                    fail(format!("the receiving pipeline stopped: {e}"));
                    return;
                }
            }
            wait = Duration::ZERO;
        }
        if got.is_empty() {
            continue;
        }
        g += got.len() as u64;
        // Recorded before the credit goes out: the sender may write into these slots from then on.
        shared.lock().credits.extend(got.drain(..));
        let posted = lock_qp(qp0).post_write_imm(local.clone(), remote, encode_imm(g), CREDIT_TAG);
        if let Err(e) = posted {
            fail(format!("granting credit {g} to the {peer}: {e}"));
            return;
        }
    }
}

impl RecvTransport for RdmaReceiver {
    fn attach(&mut self, ring: &Arc<StagingRing>) -> Result<(), TransportError> {
        if let Some(f) = self.shared.failure() {
            return Err(TransportError::Aborted(f));
        }
        if !Arc::ptr_eq(ring, &self.ring) {
            return Err(TransportError::Protocol(
                "an RdmaReceiver is bound to the ring it was accepted with (its slots are registered with the \
                 sender); accept a new transport for a different ring"
                    .into(),
            ));
        }
        self.base = self.order.next;
        self.bytes = 0;
        self.end = None;
        self.shared.lock().busy = true;
        Ok(())
    }

    fn next_chunk(
        &mut self,
        _ring: &Arc<StagingRing>,
    ) -> Result<Option<(Chunk, SlotToken)>, TransportError> {
        let deadline = Instant::now() + self.cfg.timeout;
        loop {
            if let Some((g, len)) = self.order.take_next() {
                return self.deliver(g, len).map(Some);
            }
            if let Some(end) = self.end {
                let got = self.order.next - self.base;
                if got >= end.chunks {
                    self.end = None;
                    let summary = TransferSummary {
                        chunks: got,
                        bytes: self.bytes,
                    };
                    self.base = self.order.next;
                    self.bytes = 0;
                    self.shared.lock().busy = false;
                    if summary != end {
                        return Err(TransportError::Protocol(format!(
                            "the {} reported {} bytes in {} chunks but {} bytes in {} chunks arrived",
                            self.peer, end.bytes, end.chunks, summary.bytes, summary.chunks
                        )));
                    }
                    return Ok(None);
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let ev = match self.events.recv_timeout(left.min(FAILURE_CHECK)) {
                Ok(ev) => ev,
                Err(mpsc::RecvTimeoutError::Timeout) if left > FAILURE_CHECK => {
                    // A failure whose event found the channel full is still recorded here.
                    if let Some(f) = self.shared.failure() {
                        return Err(TransportError::Aborted(f));
                    }
                    continue;
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    return Err(TransportError::Timeout {
                        after: self.cfg.timeout,
                        waiting_for: format!(
                            "for chunk {} from the {}",
                            self.order.next - self.base,
                            self.peer
                        ),
                    });
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(TransportError::Closed(format!(
                        "every worker of the transport to the {} exited",
                        self.peer
                    )));
                }
            };
            match ev {
                Event::Data { imm, len, qp } => self.order.arrive(imm, len, qp)?,
                Event::End(s) => {
                    if self.end.is_some() {
                        return Err(TransportError::Protocol(format!(
                            "the {} ended a transfer twice",
                            self.peer
                        )));
                    }
                    self.end = Some(s);
                }
                Event::Failed(e) => return Err(e),
            }
        }
    }

    fn complete(&mut self, summary: TransferSummary) -> Result<(), TransportError> {
        self.side.send(&Wire::Ack {
            chunks: summary.chunks,
            bytes: summary.bytes,
        })
    }

    fn abort(&mut self, reason: &str) {
        self.side.send_abort(reason);
        self.shared.fail(format!("aborted locally: {reason}"));
    }
}

impl Drop for RdmaReceiver {
    fn drop(&mut self) {
        self.workers.stop();
        self.links.qps.clear();
        // Slots granted as credits for chunks never handed to the pipeline go back, now that no QP
        // can let the peer write into them.
        let credits = std::mem::take(&mut self.shared.lock().credits);
        drop(credits);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{MIB, RingConfig};

    fn ring(slots: usize) -> RingConfig {
        RingConfig::new(MIB, slots).unwrap()
    }

    #[test]
    fn receiver_without_sender_times_out_clearly() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let ring = StagingRing::heap(ring(2)).unwrap();
        let mut cfg = RdmaConfig::new(["rxe0"]);
        cfg.timeout = Duration::from_millis(200);
        let t = Instant::now();
        let e = RdmaReceiver::accept(&l, &cfg, &ring)
            .unwrap_err()
            .to_string();
        assert!(e.contains("timed out") && e.contains("RDMA sender"), "{e}");
        assert!(t.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn chunks_arriving_out_of_order_are_handed_out_in_sequence() {
        let mut r = Reorder::new(4, MIB);
        assert_eq!(r.take_next(), None);
        r.arrive(encode_imm(1), 10, 1).unwrap();
        r.arrive(encode_imm(3), 30, 3).unwrap();
        assert_eq!(r.take_next(), None, "chunk 0 has not arrived");
        r.arrive(encode_imm(0), 5, 0).unwrap();
        assert_eq!(r.take_next(), Some((0, 5)));
        assert_eq!(r.take_next(), Some((1, 10)));
        assert_eq!(r.take_next(), None, "chunk 2 is missing");
        r.arrive(encode_imm(2), 20, 2).unwrap();
        assert_eq!(
            (r.take_next(), r.take_next()),
            (Some((2, 20)), Some((3, 30)))
        );
        assert_eq!(r.reordered, 2, "chunks 1 and 3 came early");
        let e = r.arrive(encode_imm(4 + 4), 1, 0).unwrap_err().to_string();
        assert!(e.contains("without a credit"), "{e}");
        r.arrive(encode_imm(5), 1, 1).unwrap();
        let e = r.arrive(encode_imm(5), 1, 1).unwrap_err().to_string();
        assert!(e.contains("arrived twice"), "{e}");
        let e = r.arrive(encode_imm(4), 0, 0).unwrap_err().to_string();
        assert!(e.contains("byte_len"), "{e}");
        let e = r
            .arrive(encode_imm(4), MIB as u32 + 1, 0)
            .unwrap_err()
            .to_string();
        assert!(e.contains("expected 1..=1048576"), "{e}");
    }
}
