//! Plumbing both ends share once connected: the state their workers see, the worker set, the side
//! channel's writer, the per-device verbs objects, and receive posting and completion polling.

use std::collections::VecDeque;
use std::io::{BufReader, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use erdma_verbs::{
    Completion, CompletionChannel, CompletionQueue, Context, ProtectionDomain, QpBuilder,
    QueuePair, Rts,
};

use super::config::RdmaConfig;
use super::setup::Links;
use super::wire::Wire;
use crate::error::TransportError;
use crate::ring::{SlotToken, StagingRing};
use crate::transport::TransferSummary;

/// Work-request tag bit marking a receive (credits on the sender, chunks on the receiver).
pub(super) const RECV_TAG: u64 = 1 << 63;
/// Tag of the receiver's credit writes.
pub(super) const CREDIT_TAG: u64 = 1 << 62;
/// Bits of a WRITE tag that hold the local slot (slots ≤ 1024 < 2^11).
pub(super) const SLOT_BITS: u32 = 11;
/// Bytes of the sender's credit scratch region (the receiver writes 8 of them).
pub(super) const CREDIT_BYTES: usize = 64;
/// How long a completion poller sleeps on its channel before re-checking for a stop request.
pub(super) const IDLE_WAIT: Duration = Duration::from_millis(20);
/// How long a poller busy-polls after its last completion before it sleeps on the channel: long
/// enough to catch back-to-back completions on a fast NIC without a system call, short enough not
/// to steal a core from soft RDMA (rxe, siw), whose "NIC" is kernel work on the same CPUs.
pub(super) const SPIN_FOR: Duration = Duration::from_micros(20);

/// State shared by the transport, its completion pollers and its side-channel reader.
#[derive(Debug, Default)]
pub(super) struct Shared {
    pub(super) st: Mutex<State>,
    pub(super) cv: Condvar,
}

#[derive(Debug, Default)]
pub(super) struct State {
    pub(super) failure: Option<String>,
    pub(super) stop: bool,
    /// Sender: credits received (chunks `g < granted` may be written).
    pub(super) granted: u64,
    /// Sender: WRITEs posted and not yet completed.
    pub(super) outstanding: u64,
    /// Sender: the slots of the WRITEs in flight, at their ring slot, with their session-wide chunk
    /// number; a slot is released when its WRITE completed, and kept busy after a failed one until
    /// the QPs are destroyed.
    pub(super) in_flight: InFlight<SlotToken>,
    /// Sender: the receiver's ACK, once it came.
    pub(super) ack: Option<TransferSummary>,
    /// The ring the transport works on (failures are written to its gate).
    pub(super) ring: Option<Arc<StagingRing>>,
    /// Receiver: the slots the credit thread acquired and granted to the sender, in chunk order,
    /// not yet handed to the pipeline. The peer may write into them, so they are released only
    /// after the QPs are destroyed.
    pub(super) credits: VecDeque<SlotToken>,
    /// A transfer is in progress (between attach and its end): only then does a failure also
    /// fail the ring's gate. A peer that leaves between transfers ends the session, not the ring.
    pub(super) busy: bool,
}

/// What chunks in flight hold, each at a place it owns alone (the sender: its local ring slot, whose
/// token only one chunk holds; the receiver: `g % slots`, since at most `slots` consecutive chunk
/// numbers are in flight). A fixed table sized once, so storing and taking never allocate.
#[derive(Debug)]
pub(super) struct InFlight<T> {
    places: Vec<Option<(u64, T)>>,
}

impl<T> Default for InFlight<T> {
    fn default() -> Self {
        InFlight { places: Vec::new() }
    }
}

impl<T> InFlight<T> {
    pub(super) fn new(places: usize) -> InFlight<T> {
        InFlight {
            places: (0..places).map(|_| None).collect(),
        }
    }

    /// Stores chunk `g`'s `v` at `place`; hands `v` back if the place is taken or does not exist.
    pub(super) fn put(&mut self, place: usize, g: u64, v: T) -> Result<(), T> {
        match self.places.get_mut(place) {
            Some(p @ None) => {
                *p = Some((g, v));
                Ok(())
            }
            _ => Err(v),
        }
    }

    /// Takes what chunk `g` stored at `place`; `None`, taking nothing, if the place holds another
    /// chunk's entry or none.
    pub(super) fn take(&mut self, place: usize, g: u64) -> Option<T> {
        let p = self.places.get_mut(place)?;
        if p.as_ref().is_some_and(|(held, _)| *held == g) {
            p.take().map(|(_, v)| v)
        } else {
            None
        }
    }

    /// The chunk whose entry sits at `place`.
    pub(super) fn chunk_at(&self, place: usize) -> Option<u64> {
        self.places.get(place)?.as_ref().map(|(g, _)| *g)
    }
}

impl Shared {
    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records the first failure, fails the ring's gate and wakes every waiter.
    pub(super) fn fail(&self, why: impl Into<String>) {
        let why = why.into();
        let ring = {
            let mut g = self.lock();
            if g.failure.is_some() || g.stop {
                return;
            }
            tracing::debug!(%why, "RDMA transport failed");
            g.failure = Some(why.clone());
            if g.busy { g.ring.clone() } else { None }
        };
        self.cv.notify_all();
        if let Some(r) = ring {
            r.gate().fail(format!("RDMA transport: {why}"));
        }
    }

    pub(super) fn failure(&self) -> Option<String> {
        self.lock().failure.clone()
    }

    pub(super) fn stopping(&self) -> bool {
        let g = self.lock();
        g.stop || g.failure.is_some()
    }

    /// Waits until `ready(state)` holds; fails on a recorded failure or after `timeout`.
    pub(super) fn wait_until(
        &self,
        timeout: Duration,
        what: impl Fn() -> String,
        mut ready: impl FnMut(&mut State) -> bool,
    ) -> Result<(), TransportError> {
        let deadline = Instant::now() + timeout;
        let mut g = self.lock();
        loop {
            // Readiness first: a peer that sends its ACK and exits right away leaves both the ACK
            // and the EOF failure behind, and the ACK is what counts.
            if ready(&mut g) {
                return Ok(());
            }
            if let Some(f) = &g.failure {
                return Err(TransportError::Aborted(f.clone()));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(TransportError::Timeout {
                    after: timeout,
                    waiting_for: what(),
                });
            }
            g = self
                .cv
                .wait_timeout(g, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

/// The transport's worker threads (side-channel reader, completion pollers, credit granter). They
/// are stopped and joined when this is dropped, so a setup step that fails after the first spawn
/// cannot leave them polling forever; the transport's own Drop calls [`Workers::stop`] first so
/// that the QPs are destroyed only once no worker uses them.
#[derive(Debug)]
pub(super) struct Workers {
    shared: Arc<Shared>,
    side: Arc<SideWriter>,
    handles: Vec<JoinHandle<()>>,
}

impl Workers {
    pub(super) fn new(shared: &Arc<Shared>, side: &Arc<SideWriter>) -> Self {
        Workers {
            shared: Arc::clone(shared),
            side: Arc::clone(side),
            handles: Vec::new(),
        }
    }

    pub(super) fn spawn(
        &mut self,
        name: &str,
        f: impl FnOnce() + Send + 'static,
    ) -> Result<(), TransportError> {
        let h = std::thread::Builder::new()
            .name(name.to_string())
            .spawn(f)
            .map_err(TransportError::io(format!("spawning thread {name}")))?;
        self.handles.push(h);
        Ok(())
    }

    /// Spawns one completion poller per device of `links` (named `{prefix}{device}`); `poller`
    /// builds each one's body from the device's CQ and the QPs on it.
    pub(super) fn spawn_pollers<F: FnOnce() + Send + 'static>(
        &mut self,
        prefix: &str,
        links: &Links,
        mut poller: impl FnMut(Arc<CompletionQueue>, Vec<(usize, SharedQp)>) -> F,
    ) -> Result<(), TransportError> {
        for (d, dev) in links.devs.iter().enumerate() {
            let body = poller(Arc::clone(&dev.cq), links.qps_on(d));
            self.spawn(&format!("{prefix}{d}"), body)?;
        }
        Ok(())
    }

    /// Asks every worker to stop (flag, condvar, side channel shut down) and joins them.
    pub(super) fn stop(&mut self) {
        self.shared.lock().stop = true;
        self.shared.cv.notify_all();
        self.side.shutdown();
        for t in self.handles.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The write half of the side channel (several threads send on it).
#[derive(Debug)]
pub(super) struct SideWriter {
    stream: Mutex<TcpStream>,
    peer: String,
}

impl SideWriter {
    pub(super) fn new(stream: TcpStream, peer: &str) -> SideWriter {
        SideWriter {
            stream: Mutex::new(stream),
            peer: peer.to_string(),
        }
    }

    pub(super) fn send(&self, msg: &Wire) -> Result<(), TransportError> {
        let line = msg.to_line()?;
        let mut s = self.stream.lock().unwrap_or_else(PoisonError::into_inner);
        s.write_all(line.as_bytes())
            .and_then(|()| s.flush())
            .map_err(TransportError::io(format!("side channel to {}", self.peer)))
    }

    /// Best effort, bounded: used on the failure path.
    pub(super) fn send_abort(&self, reason: &str) {
        let s = self.stream.lock().unwrap_or_else(PoisonError::into_inner);
        let _ = s.set_write_timeout(Some(Duration::from_secs(1)));
        drop(s);
        let _ = self.send(&Wire::Abort {
            reason: reason.to_string(),
        });
    }

    pub(super) fn shutdown(&self) {
        let s = self.stream.lock().unwrap_or_else(PoisonError::into_inner);
        let _ = s.shutdown(Shutdown::Both);
    }
}

/// Reads one message during setup (the stream has a read timeout then).
pub(super) fn read_msg(
    r: &mut BufReader<TcpStream>,
    peer: &str,
    step: &str,
) -> Result<Wire, TransportError> {
    let mut line = String::new();
    let n = super::wire::read_line_capped(r, &mut line).map_err(|e| {
        if matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ) {
            TransportError::Io {
                context: format!("timed out waiting for {peer} during setup ({step})"),
                source: e,
            }
        } else {
            TransportError::Io {
                context: format!("reading from {peer} during setup ({step})"),
                source: e,
            }
        }
    })?;
    if n == 0 {
        return Err(TransportError::Closed(format!(
            "{peer} closed the side channel during setup ({step}); see its log for why"
        )));
    }
    match Wire::from_line(&line)? {
        Wire::Abort { reason } => Err(TransportError::Aborted(format!(
            "{peer} refused ({step}): {reason}"
        ))),
        m => Ok(m),
    }
}

/// Per-device verbs objects.
#[derive(Debug)]
pub(super) struct Dev {
    pub(super) ctx: Arc<Context>,
    pub(super) pd: Arc<ProtectionDomain>,
    pub(super) cq: Arc<CompletionQueue>,
}

impl Dev {
    pub(super) fn new(ctx: Arc<Context>, cqe: u32) -> Result<Dev, TransportError> {
        let name = ctx.name().to_string();
        let pd = ProtectionDomain::new(&ctx).map_err(TransportError::rdma(format!(
            "{name}: allocating a protection domain"
        )))?;
        let ch = CompletionChannel::new(&ctx).map_err(TransportError::rdma(format!(
            "{name}: creating a completion channel"
        )))?;
        let cqe = cqe.min(ctx.caps().max_cqe.max(1));
        let cq = CompletionQueue::new(&ctx, cqe, Some(&ch)).map_err(TransportError::rdma(
            format!("{name}: creating a completion queue"),
        ))?;
        Ok(Dev { ctx, pd, cq })
    }

    pub(super) fn builder(&self, cfg: &RdmaConfig, depth: u32) -> QpBuilder {
        let caps = self.ctx.caps();
        QpBuilder::new(&self.cq, &self.cq)
            .gid_index(cfg.gid_index)
            .port(cfg.port)
            .max_send_wr(depth.min(caps.max_send_wr.max(1)))
            .max_recv_wr(depth.min(caps.max_recv_wr.max(1)))
            .max_send_sge(1)
            .max_recv_sge(1)
    }
}

pub(super) type SharedQp = Arc<Mutex<QueuePair<Rts>>>;

pub(super) fn lock_qp(qp: &SharedQp) -> MutexGuard<'_, QueuePair<Rts>> {
    qp.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Posts `n` zero-length receives on QP `index` (in any state: the first ones go in before the QP
/// is connected, so that nothing the peer sends right after connecting finds no receive).
pub(super) fn post_recvs<S>(
    qp: &mut QueuePair<S>,
    index: usize,
    n: u32,
    peer: &str,
) -> Result<(), TransportError> {
    for _ in 0..n {
        qp.post_recv_empty(RECV_TAG | index as u64)
            .map_err(TransportError::rdma(format!(
                "posting receives on QP {index} to the {peer}"
            )))?;
    }
    Ok(())
}

/// Polls `cq` for up to [`SPIN_FOR`], then sleeps on its channel for up to [`IDLE_WAIT`]. Appends
/// to `out`, which keeps its capacity: the pollers allocate nothing per completion.
pub(super) fn poll_some(
    cq: &CompletionQueue,
    out: &mut Vec<Completion>,
) -> Result<(), erdma_verbs::Error> {
    let start = Instant::now();
    while start.elapsed() < SPIN_FOR {
        if cq.poll_into(out, 64)? > 0 {
            return Ok(());
        }
        std::hint::spin_loop();
    }
    match cq.wait_into(out, Some(IDLE_WAIT)) {
        Ok(_) | Err(erdma_verbs::Error::Timeout(..)) => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use std::net::TcpListener;

    use super::*;
    use crate::config::{MIB, RingConfig};

    fn ring(slots: usize) -> RingConfig {
        RingConfig::new(MIB, slots).unwrap()
    }

    #[test]
    fn a_failure_between_transfers_leaves_the_ring_usable() {
        let r = StagingRing::heap(ring(2)).unwrap();
        let idle = Shared::default();
        idle.lock().ring = Some(Arc::clone(&r));
        idle.fail("the sender closed the side channel");
        assert!(r.gate().failure().is_none(), "idle: the ring stays usable");
        assert!(idle.failure().unwrap().contains("closed"));
        let busy = Shared::default();
        {
            let mut st = busy.lock();
            st.ring = Some(Arc::clone(&r));
            st.busy = true;
        }
        busy.fail("peer died mid-transfer");
        busy.fail("a later echo");
        assert!(
            r.gate()
                .failure()
                .unwrap()
                .contains("peer died mid-transfer")
        );
        let e = busy
            .wait_until(Duration::from_secs(5), || "x".into(), |_| false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("peer died"), "{e}");
    }

    #[test]
    fn an_ack_followed_by_eof_still_counts() {
        let s = Shared::default();
        s.lock().ack = Some(TransferSummary {
            chunks: 1,
            bytes: 1,
        });
        s.fail("the receiver closed the side channel");
        let mut ack = None;
        s.wait_until(
            Duration::from_secs(1),
            || "ack".into(),
            |st| {
                ack = st.ack.take();
                ack.is_some()
            },
        )
        .unwrap();
        assert_eq!(ack.unwrap().bytes, 1);
    }

    #[test]
    fn waits_are_bounded() {
        let s = Shared::default();
        let t = Instant::now();
        let e = s
            .wait_until(
                Duration::from_millis(50),
                || "for a credit from the receiver 10.0.0.2:1".into(),
                |_| false,
            )
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("timed out") && e.contains("receiver 10.0.0.2:1"),
            "{e}"
        );
        assert!(t.elapsed() < Duration::from_secs(2));
    }

    /// A setup that fails after starting a worker (as `RdmaReceiver::accept` can, when registering
    /// the credit source fails after the pollers started).
    fn setup_failing_after_spawn(
        shared: &Arc<Shared>,
        side: &Arc<SideWriter>,
        exited: &Arc<std::sync::atomic::AtomicBool>,
    ) -> Result<Workers, TransportError> {
        let mut workers = Workers::new(shared, side);
        let (sh, ex) = (Arc::clone(shared), Arc::clone(exited));
        workers.spawn("test-poller", move || {
            while !sh.lock().stop {
                std::thread::sleep(Duration::from_millis(5));
            }
            ex.store(true, std::sync::atomic::Ordering::SeqCst);
        })?;
        Err(TransportError::Protocol("a later setup step failed".into()))
    }

    #[test]
    #[cfg_attr(miri, ignore = "sockets: a TcpListener for the side channel")]
    fn workers_started_before_a_failing_setup_step_are_stopped_and_joined() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let stream = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let side = Arc::new(SideWriter {
            stream: Mutex::new(stream),
            peer: "test".into(),
        });
        let shared = Arc::new(Shared::default());
        let exited = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let t = Instant::now();
        let e = setup_failing_after_spawn(&shared, &side, &exited).unwrap_err();
        assert!(e.to_string().contains("later setup step"), "{e}");
        // Joined before the error came back: the worker saw `stop` and ended.
        assert!(exited.load(std::sync::atomic::Ordering::SeqCst));
        assert!(shared.lock().stop);
        assert!(t.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn slot_tags_round_trip() {
        let g = (1u64 << 40) + 5;
        let tag = (g << SLOT_BITS) | 1023;
        assert_eq!(tag & RECV_TAG, 0);
        assert_eq!(tag >> SLOT_BITS, g);
        assert_eq!(tag & ((1 << SLOT_BITS) - 1), 1023);
        const { assert!(crate::config::MAX_SLOTS < 1 << SLOT_BITS) };
    }

    #[test]
    fn in_flight_places_hold_one_chunk_each() {
        let mut t: InFlight<&str> = InFlight::new(2);
        assert_eq!(t.put(0, 8, "a"), Ok(()));
        assert_eq!(t.put(0, 10, "b"), Err("b"), "the place is taken");
        assert_eq!(t.put(2, 11, "c"), Err("c"), "no such place");
        assert_eq!(t.take(0, 10), None, "another chunk's entry stays");
        assert_eq!(t.chunk_at(0), Some(8));
        assert_eq!(t.take(0, 8), Some("a"));
        assert_eq!((t.take(0, 8), t.chunk_at(0)), (None, None));
        assert_eq!(InFlight::<u8>::default().put(0, 0, 1), Err(1));
    }
}
