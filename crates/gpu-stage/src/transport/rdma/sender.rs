//! The sending end: connects to the receiver, writes each chunk into the receiver slot its credit
//! names, and releases the local slot when the WRITE completed.

use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};

use erdma_verbs::cm::Connector;
use erdma_verbs::{Access, CompletionQueue, MemoryRegion, RemoteBuf};

use super::config::{RdmaConfig, Stripe, config_err};
use super::plumbing::{
    CREDIT_BYTES, InFlight, RECV_TAG, SLOT_BITS, Shared, SharedQp, SideWriter, Workers, lock_qp,
    poll_some, post_recvs, read_msg,
};
use super::setup::{CmGroups, Links, ManualQps, Plan, SideChannel, register_ring, start};
use super::wire::{
    PROTOCOL_VERSION, ReceiverWelcome, SenderHello, Wire, Wiring, advance_credit, check_ring,
    check_welcome, encode_imm, unexpected,
};
use crate::config::RingConfig;
use crate::error::TransportError;
use crate::ring::{SlotToken, StagingRing};
use crate::transport::{Chunk, SendTransport, TransferSummary};

/// Sending half of the RDMA transport (the client: it connects to an [`RdmaReceiver`](super::RdmaReceiver)).
#[derive(Debug)]
pub struct RdmaSender {
    cfg: RdmaConfig,
    ring_cfg: RingConfig,
    shared: Arc<Shared>,
    side: Arc<SideWriter>,
    links: Links,
    /// Local registration of every ring slot, per device.
    mrs: Vec<Vec<Arc<MemoryRegion>>>,
    ring: Arc<StagingRing>,
    /// Receiver slot tables, per receiver device.
    remote: Vec<Vec<RemoteBuf>>,
    _credit_mr: Arc<MemoryRegion>,
    workers: Workers,
    /// Session-wide number of the next transfer's first chunk.
    base: u64,
    /// Session-wide number of the next chunk to post.
    next: u64,
    peer: String,
}

/// What the sender's setup leaves behind.
#[derive(Debug)]
struct SenderSetup {
    links: Links,
    /// The receiver's slot tables, per receiver device.
    remote: Vec<Vec<RemoteBuf>>,
    /// Where the receiver writes credits (registered on QP 0's device).
    credit_mr: Arc<MemoryRegion>,
}

impl RdmaSender {
    /// Connects to the [`RdmaReceiver`](super::RdmaReceiver) whose side channel listens at `addr`: exchanges settings
    /// and the slot table over TCP, connects `cfg.qps` queue pairs (by endpoint exchange or
    /// rdma_cm), and registers every slot of `ring` on every device. Fails with a
    /// [`TransportError::Config`] naming the field when the two ends disagree (ring geometry,
    /// QP count, connect mode), with [`TransportError::Rdma`] when a verb fails, and after
    /// `cfg.timeout` if the receiver does not answer.
    pub fn connect(
        addr: impl ToSocketAddrs,
        cfg: &RdmaConfig,
        ring: &Arc<StagingRing>,
    ) -> Result<Self, TransportError> {
        cfg.validate()?;
        let addrs: Vec<_> = addr
            .to_socket_addrs()
            .map_err(TransportError::io(
                "resolving the receiver's side-channel address",
            ))?
            .collect();
        let peer = addrs
            .first()
            .map(|a| format!("receiver {a}"))
            .ok_or_else(|| config_err("address", "", "the address resolved to nothing"))?;
        let stream = connect_with_timeout(&addrs, cfg.timeout).map_err(TransportError::io(
            format!("connecting the side channel to {peer}"),
        ))?;
        Self::over_stream(stream, peer, cfg, ring)
    }

    /// The sending end over a side-channel connection someone else opened (e.g. one the receiver
    /// connected and an authenticating layer above accepted): the same set-up as
    /// [`RdmaSender::connect`] from there on. Which end opened the TCP connection does not matter
    /// to the protocol; `peer` names the receiver in errors.
    pub fn over_stream(
        stream: TcpStream,
        peer: String,
        cfg: &RdmaConfig,
        ring: &Arc<StagingRing>,
    ) -> Result<Self, TransportError> {
        cfg.validate()?;
        let ring_cfg = ring.config();
        let mut side = SideChannel::open(stream, &peer, cfg.timeout)?;
        let setup = Self::setup(cfg, ring_cfg, &mut side, &peer);
        let SenderSetup {
            links,
            remote,
            credit_mr,
        } = side.or_abort(setup)?;
        let mrs = links
            .devs
            .iter()
            .map(|d| register_ring(&d.pd, ring, Access::LOCAL_WRITE))
            .collect::<Result<Vec<_>, _>>()?;
        let writer = Arc::clone(&side.writer);
        let reader = side.into_reader()?;
        let (shared, mut workers) = start(ring, &writer);
        shared.lock().in_flight = InFlight::new(ring.slots());
        {
            let shared = Arc::clone(&shared);
            let peer = peer.clone();
            let stall = cfg.timeout;
            workers.spawn("gpu-stage-rdma-side", move || {
                sender_side_reader(reader, &shared, &peer, stall)
            })?;
        }
        workers.spawn_pollers("gpu-stage-rdma-scq", &links, |cq, my_qps| {
            let shared = Arc::clone(&shared);
            let peer = peer.clone();
            move || sender_poller(&cq, &my_qps, &shared, &peer)
        })?;
        Ok(RdmaSender {
            cfg: cfg.clone(),
            ring_cfg,
            shared,
            side: writer,
            links,
            mrs,
            ring: Arc::clone(ring),
            remote,
            _credit_mr: credit_mr,
            workers,
            base: 0,
            next: 0,
            peer,
        })
    }

    /// Hello → (rdma_cm: Listening, connect) → Welcome → Ready: connects every QP and learns the
    /// receiver's slot table.
    fn setup(
        cfg: &RdmaConfig,
        ring_cfg: RingConfig,
        side: &mut SideChannel,
        peer: &str,
    ) -> Result<SenderSetup, TransportError> {
        let plan = Plan::new(cfg, ring_cfg)?;
        let mut hello = SenderHello {
            version: PROTOCOL_VERSION,
            ring: ring_cfg,
            qps: cfg.qps,
            devices: cfg.devices.clone(),
            wiring: plan.wiring,
            endpoints: Vec::new(),
        };
        let (links, welcome) = match plan.wiring {
            Wiring::Manual => {
                let inits = ManualQps::create(cfg, &plan, peer)?;
                hello.endpoints.clone_from(&inits.endpoints);
                side.writer.send(&Wire::Hello(hello))?;
                let welcome = read_welcome(side, cfg, &plan, peer)?;
                (inits.connect(&welcome.endpoints, peer)?, welcome)
            }
            Wiring::RdmaCm => {
                side.writer.send(&Wire::Hello(hello))?;
                let addrs =
                    match read_msg(&mut side.reader, peer, "waiting for the rdma_cm addresses")? {
                        Wire::Listening { addrs } if !addrs.is_empty() => addrs,
                        m => return Err(unexpected(peer, "Listening", &m)),
                    };
                // Our devices follow the route to the receiver's listeners: group g connects to
                // addrs[g], and its first connection decides the device.
                let mut groups = CmGroups::new(addrs.len().min(cfg.qps), cfg.qps);
                for q in 0..cfg.qps {
                    let to = addrs[q % groups.groups()];
                    let conn = Connector::resolve(to, cfg.timeout).map_err(
                        TransportError::rdma(format!("rdma_cm: resolving {to} for QP {q}")),
                    )?;
                    let d = groups.device(q, conn.context(), to, cfg, &plan)?;
                    let (qp, _) = conn
                        .connect(
                            &d.pd,
                            &d.builder(cfg, plan.depth),
                            &(q as u32).to_le_bytes(),
                            cfg.timeout,
                        )
                        .map_err(TransportError::rdma(format!(
                            "rdma_cm: connecting QP {q} to {to}"
                        )))?;
                    groups.push(q, qp, &plan, peer)?;
                }
                let links = groups.finish()?;
                (links, read_welcome(side, cfg, &plan, peer)?)
            }
        };
        // Credit scratch on QP 0's device; its contents are never read (the immediate counts).
        let d0 = links.dev_of(0);
        let credit_mr = MemoryRegion::new(
            &d0.pd,
            CREDIT_BYTES,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        )
        .map_err(TransportError::rdma(format!(
            "{}: registering the credit word",
            d0.ctx.name()
        )))?;
        side.writer.send(&Wire::Ready {
            credit: credit_mr.remote(),
        })?;
        Ok(SenderSetup {
            links,
            remote: welcome.slots,
            credit_mr,
        })
    }

    /// Queue pairs in use.
    pub fn qps(&self) -> usize {
        self.links.qps.len()
    }

    /// Names of the local devices in use (in rdma_cm mode, the ones the routes picked).
    pub fn devices(&self) -> Vec<String> {
        self.links.device_names()
    }

    fn post_chunk(
        &mut self,
        ring: &Arc<StagingRing>,
        chunk: Chunk,
        slot: SlotToken,
    ) -> Result<(), TransportError> {
        let chunk_bytes = self.ring_cfg.chunk_bytes as u64;
        if chunk.offset != chunk.seq * chunk_bytes
            || chunk.len == 0
            || chunk.len > self.ring_cfg.chunk_bytes
        {
            return Err(TransportError::Protocol(format!(
                "chunk {} at offset {} with {} bytes does not follow the ring layout (offset = seq × {chunk_bytes}, 1..={chunk_bytes} bytes)",
                chunk.seq, chunk.offset, chunk.len
            )));
        }
        if !Arc::ptr_eq(ring, &self.ring)
            || !Arc::ptr_eq(slot.ring(), &self.ring)
            || slot.slot() != chunk.slot
        {
            return Err(TransportError::Protocol(
                "submit with a ring other than the attached one, or with another slot's token"
                    .into(),
            ));
        }
        let g = self.base + chunk.seq;
        if g != self.next {
            return Err(TransportError::Protocol(format!(
                "chunk {} submitted out of order (expected {})",
                chunk.seq,
                self.next - self.base
            )));
        }
        // Borrowed, not cloned: the message is only built on a timeout (no allocation per chunk).
        let peer = self.peer.as_str();
        self.shared.wait_until(
            self.cfg.timeout,
            || {
                format!(
                    "for a credit to write chunk {} (the {peer} stopped freeing slots)",
                    chunk.seq
                )
            },
            |s| s.granted > g,
        )?;
        let stripe = Stripe {
            qps: self.links.qps.len(),
            devices: self.links.devs.len(),
        };
        let q = stripe.qp_of(g);
        let local = self.mrs[self.links.qp_dev[q]][chunk.slot]
            .slice(0..chunk.len)
            .map_err(TransportError::rdma("slicing the local slot"))?;
        let table = &self.remote[q % self.remote.len()];
        let remote = table[(g % table.len() as u64) as usize]
            .slice(0..chunk.len as u64)
            .map_err(TransportError::rdma("slicing the remote slot"))?;
        {
            // Before posting: the completion may be polled before post_write_imm returns.
            let mut st = self.shared.lock();
            if let Err(token) = st.in_flight.put(chunk.slot, g, slot) {
                drop(st);
                // Never posted: the token goes back with the error.
                drop(token);
                return Err(TransportError::Protocol(format!(
                    "slot {} of chunk {} still has a WRITE in flight",
                    chunk.slot, chunk.seq
                )));
            }
            st.outstanding += 1;
        }
        let posted = lock_qp(&self.links.qps[q]).post_write_imm(
            local,
            remote,
            encode_imm(g),
            (g << SLOT_BITS) | chunk.slot as u64,
        );
        if let Err(e) = posted {
            let never_posted = {
                let mut st = self.shared.lock();
                st.outstanding -= 1;
                st.in_flight.take(chunk.slot, g)
            };
            drop(never_posted);
            return Err(TransportError::Rdma {
                context: format!(
                    "posting the WRITE of chunk {} on QP {q} to {}",
                    chunk.seq, self.peer
                ),
                source: e,
            });
        }
        self.next = g + 1;
        Ok(())
    }
}

/// Reads and checks the receiver's Welcome.
fn read_welcome(
    side: &mut SideChannel,
    cfg: &RdmaConfig,
    plan: &Plan,
    peer: &str,
) -> Result<ReceiverWelcome, TransportError> {
    let welcome = match read_msg(&mut side.reader, peer, "waiting for the slot table")? {
        Wire::Welcome(w) => w,
        m => return Err(unexpected(peer, "Welcome", &m)),
    };
    check_welcome(&welcome, &plan.ring, cfg.qps, plan.wiring)?;
    Ok(welcome)
}

fn connect_with_timeout(addrs: &[SocketAddr], timeout: Duration) -> std::io::Result<TcpStream> {
    let mut last = std::io::Error::from(std::io::ErrorKind::AddrNotAvailable);
    // The receiver may still be starting: retry refused connections until the timeout.
    let deadline = Instant::now() + timeout;
    loop {
        for a in addrs {
            match TcpStream::connect_timeout(a, timeout) {
                Ok(s) => return Ok(s),
                Err(e) => last = e,
            }
        }
        if Instant::now() >= deadline || last.kind() != std::io::ErrorKind::ConnectionRefused {
            return Err(last);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Runs [`sender_side_reader`] over `bytes` as the receiver's side of the channel: 1 if it recorded
/// an ACK (the fuzz target and the tests: it must end, with a recorded failure, on any input).
#[cfg(any(test, feature = "fuzzing"))]
pub(super) fn fuzz_side_reader(bytes: &[u8]) -> usize {
    let shared = Shared::default();
    sender_side_reader(
        std::io::BufReader::new(bytes),
        &shared,
        "fake receiver",
        Duration::from_millis(20),
    );
    let st = shared.lock();
    debug_assert!(st.failure.is_some(), "the reader ends only on a failure");
    usize::from(st.ack.is_some())
}

fn sender_side_reader(
    mut reader: impl std::io::BufRead,
    shared: &Shared,
    peer: &str,
    stall: Duration,
) {
    let mut line = String::new();
    loop {
        line.clear();
        let read = super::wire::read_line_after_setup(&mut reader, &mut line, stall, || {
            !shared.lock().stop
        });
        match read {
            Ok(None) => return,
            Ok(Some(0)) => {
                shared.fail(format!(
                    "the {peer} closed the side channel (process exited or connection lost)"
                ));
                return;
            }
            Err(e) => {
                shared.fail(format!("side channel to the {peer} broke: {e}"));
                return;
            }
            Ok(Some(_)) => {}
        }
        match Wire::from_line(&line) {
            Ok(Wire::Ack { chunks, bytes }) => {
                shared.lock().ack = Some(TransferSummary { chunks, bytes });
                shared.cv.notify_all();
            }
            Ok(Wire::Abort { reason }) => {
                shared.fail(format!("the {peer} aborted: {reason}"));
                return;
            }
            Ok(m) => {
                shared.fail(unexpected(peer, "Ack", &m).to_string());
                return;
            }
            Err(e) => {
                shared.fail(e.to_string());
                return;
            }
        }
    }
}

fn sender_poller(cq: &CompletionQueue, qps: &[(usize, SharedQp)], shared: &Shared, peer: &str) {
    let mut out = Vec::new();
    loop {
        if shared.lock().stop {
            return;
        }
        out.clear();
        if let Err(e) = poll_some(cq, &mut out) {
            shared.fail(format!("polling completions: {e}"));
            return;
        }
        for c in out.drain(..) {
            if c.tag & RECV_TAG != 0 {
                let q = (c.tag & !RECV_TAG) as usize;
                if !c.is_ok() {
                    shared.fail(format!(
                        "credit receive on QP {q} from the {peer} failed: {} (the peer went away or its QP failed)",
                        c.status
                    ));
                    continue;
                }
                let Some(imm) = c.imm else {
                    shared.fail(format!(
                        "the {peer} sent a credit without an immediate value"
                    ));
                    continue;
                };
                {
                    let mut s = shared.lock();
                    match advance_credit(s.granted, imm) {
                        Ok(g) => s.granted = g,
                        Err(e) => {
                            drop(s);
                            shared.fail(e.to_string());
                            continue;
                        }
                    }
                }
                shared.cv.notify_all();
                if let Some((_, qp)) = qps.iter().find(|(i, _)| *i == q)
                    && let Err(e) = post_recvs(&mut lock_qp(qp), q, 1, peer)
                {
                    shared.fail(e.to_string());
                }
            } else {
                let slot = (c.tag & ((1 << SLOT_BITS) - 1)) as usize;
                let g = c.tag >> SLOT_BITS;
                if c.is_ok() {
                    let (done, held) = {
                        let mut s = shared.lock();
                        s.outstanding = s.outstanding.saturating_sub(1);
                        let done = s.in_flight.take(slot, g);
                        (done, s.in_flight.chunk_at(slot))
                    };
                    if done.is_none() {
                        shared.fail(format!(
                            "the WRITE of chunk #{g} completed for slot {slot}, which holds {}",
                            held.map_or("no WRITE".to_string(), |h| format!("chunk #{h}"))
                        ));
                    }
                    // The NIC has read the slot: the pipeline may refill it.
                    drop(done);
                    shared.cv.notify_all();
                } else {
                    shared.fail(format!(
                        "RDMA WRITE of chunk #{g} (session-wide) to the {peer} failed: {} (vendor error {:#x}); \
                         the peer process or its NIC went away",
                        c.status, c.vendor_err
                    ));
                }
            }
        }
    }
}

impl SendTransport for RdmaSender {
    fn attach(&mut self, ring: &Arc<StagingRing>) -> Result<(), TransportError> {
        if let Some(f) = self.shared.failure() {
            return Err(TransportError::Aborted(f));
        }
        self.base = self.next;
        if Arc::ptr_eq(ring, &self.ring) {
            self.shared.lock().busy = true;
            return Ok(());
        }
        // A different ring: register it instead (only between transfers, same geometry).
        check_ring("newly attached", &ring.config(), &self.ring_cfg)?;
        if self.shared.lock().outstanding != 0 {
            return Err(TransportError::Protocol(
                "cannot switch rings while writes are in flight".into(),
            ));
        }
        self.mrs = self
            .links
            .devs
            .iter()
            .map(|d| register_ring(&d.pd, ring, Access::LOCAL_WRITE))
            .collect::<Result<Vec<_>, _>>()?;
        self.ring = Arc::clone(ring);
        let mut st = self.shared.lock();
        st.ring = Some(Arc::clone(ring));
        st.busy = true;
        Ok(())
    }

    fn submit(
        &mut self,
        ring: &Arc<StagingRing>,
        chunk: Chunk,
        slot: SlotToken,
    ) -> Result<(), TransportError> {
        // On an error the WRITE was never posted: the token is dropped, which gives the slot back
        // so the pipeline can unwind.
        self.post_chunk(ring, chunk, slot)
    }

    fn finish(&mut self, summary: TransferSummary) -> Result<(), TransportError> {
        let sent = self.next - self.base;
        if sent != summary.chunks {
            return Err(TransportError::Protocol(format!(
                "finishing after {sent} chunks but the transfer has {}",
                summary.chunks
            )));
        }
        let peer = self.peer.clone();
        self.shared.wait_until(
            self.cfg.timeout,
            || format!("for the last WRITEs to the {peer} to complete"),
            |s| s.outstanding == 0,
        )?;
        self.shared.lock().ack = None;
        self.side.send(&Wire::End {
            chunks: summary.chunks,
            bytes: summary.bytes,
        })?;
        let mut ack = None;
        self.shared.wait_until(
            self.cfg.timeout,
            || format!("for the {peer} to acknowledge the transfer"),
            |s| {
                ack = s.ack.take();
                ack.is_some()
            },
        )?;
        match ack {
            Some(a) if a == summary => {
                self.shared.lock().busy = false;
                Ok(())
            }
            Some(a) => Err(TransportError::Protocol(format!(
                "the {} acknowledged {} bytes in {} chunks, sent {} bytes in {} chunks",
                self.peer, a.bytes, a.chunks, summary.bytes, summary.chunks
            ))),
            None => Err(TransportError::Closed(format!(
                "no acknowledgement from the {}",
                self.peer
            ))),
        }
    }

    fn abort(&mut self, reason: &str) {
        self.side.send_abort(reason);
        self.shared.fail(format!("aborted locally: {reason}"));
    }
}

impl Drop for RdmaSender {
    fn drop(&mut self) {
        self.workers.stop();
        // QPs go first (destroying them stops all DMA), then the registrations, then the slots of
        // WRITEs that never completed.
        self.links.qps.clear();
        self.mrs.clear();
        let in_flight = std::mem::take(&mut self.shared.lock().in_flight);
        drop(in_flight);
    }
}

#[cfg(test)]
mod tests {
    use std::net::TcpListener;

    use super::*;
    use crate::config::MIB;

    fn ring(slots: usize) -> RingConfig {
        RingConfig::new(MIB, slots).unwrap()
    }
    #[test]
    fn sender_without_receiver_fails_clearly() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        drop(l);
        let ring = StagingRing::heap(ring(2)).unwrap();
        let mut cfg = RdmaConfig::new(["rxe0"]);
        cfg.timeout = Duration::from_millis(300);
        let e = RdmaSender::connect(addr, &cfg, &ring)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("side channel") && e.contains(&addr.to_string()),
            "{e}"
        );
    }
}
