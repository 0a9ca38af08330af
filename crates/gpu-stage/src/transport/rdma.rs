//! RDMA transport (feature `rdma`): the sender RDMA-WRITEs every chunk straight into a slot of the
//! receiver's staging ring, so the only CPU work per chunk is posting one work request.
//!
//! ```text
//!  sender (client)                                          receiver (server)
//!  ─────────────── TCP side channel (JSON lines, open for the whole session) ───────────────
//!  Hello {version, ring, qps, mode, endpoints}      ──►     validate (geometry, version, QPs)
//!  [rdma_cm: connect QP q to Listening[q % n]]      ◄──     [rdma_cm: Listening {addrs}]
//!                                                   ◄──     Welcome {endpoints, slot table}
//!  Ready {credit target}                            ──►     start granting credits
//!  ─────────────── RDMA (RC QPs, chunk g on QP g % qps) ────────────────────────────────────
//!                                                   ◄──     WRITE_WITH_IMM 8 B, imm = credits
//!  WRITE_WITH_IMM slot g % slots, imm = g           ──►     RECV completion → next_chunk
//!  ─────────────── TCP ─────────────────────────────────────────────────────────────────────
//!  End {chunks, bytes}  (after every WRITE completed) ──►   deliver the rest, check totals
//!                                                   ◄──     Ack {chunks, bytes} (data on device)
//!  Abort {reason} either way; EOF = the peer is gone.
//! ```
//!
//! - **Chunk numbering**: `g` counts chunks over the whole session (transfer after transfer), so
//!   credits can run ahead into the next transfer. Chunk `g` lands in receiver slot
//!   `g % slots` and travels on QP `g % qps`; QP `q` lives on device `q % devices`.
//! - **Immediate value**: the low 32 bits of `g` (the slot follows from it, and at most `slots`
//!   chunks are in flight, so the receiver rebuilds `g` from its next expected chunk). The length
//!   is the completion's `byte_len`, which rxe, mlx5 and erdma fill for WRITE_WITH_IMM receives
//!   (32 bits of immediate cannot carry a slot, an ordering key and a length up to 1 GiB). Every
//!   length is checked against the chunk size, and the totals in `End` are checked against what
//!   arrived, so a provider that misreported it would fail loudly, never silently.
//! - **Credits**: a receiver thread acquires slot `g % slots` (blocks until the pipeline released
//!   it after the previous occupant's host→device copy), then grants credit `g + 1` with an
//!   8-byte WRITE_WITH_IMM into a scratch word of the sender on QP 0 (the payload is ignored; the
//!   immediate carries the low 32 bits of the credit count). The sender writes chunk `g` only once credit `g + 1`
//!   arrived, and releases its own slot when the WRITE completes. Both sides only post
//!   zero-length receives (1 SGE max and no SRQ on eRDMA are respected trivially).
//! - **Verbs used**: RC QPs, WRITE_WITH_IMM and zero-length RECV only; no SRQ, no extended verbs,
//!   queue depths clamped to the device caps (eRDMA: ≤ 8192 send WRs).
//! - **Failure**: every wait (credits, completions, the ACK, the next chunk) is bounded by
//!   [`RdmaConfig::timeout`]; the TCP side channel stays open so a peer that exits is noticed at
//!   once (EOF), and the error names the peer.

use std::collections::{BTreeMap, VecDeque};
use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use erdma_verbs::cm::{Connector, Listener};
use erdma_verbs::{
    Access, Completion, CompletionChannel, CompletionQueue, Context, Endpoint, MemoryRegion,
    ProtectionDomain, QpBuilder, QueuePair, RemoteBuf, Rts, WcOpcode,
};
use serde::{Deserialize, Serialize};

use super::{Chunk, RecvTransport, SendTransport, TransferSummary, accept_within};
use crate::config::RingConfig;
use crate::error::TransportError;
use crate::ring::{SlotToken, StagingRing};

/// Version of the side-channel protocol; both ends must speak the same one.
pub const PROTOCOL_VERSION: u32 = 1;
/// Most queue pairs one transport opens to its peer.
pub const MAX_QPS: usize = 64;
/// Default bound on every wait for the peer.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// Default number of queue pairs.
pub const DEFAULT_QPS: usize = 2;

/// Work-request tag bit marking a receive (credits on the sender, chunks on the receiver).
const RECV_TAG: u64 = 1 << 63;
/// Tag of the receiver's credit writes.
const CREDIT_TAG: u64 = 1 << 62;
/// Bits of a WRITE tag that hold the local slot (slots ≤ 1024 < 2^11).
const SLOT_BITS: u32 = 11;
/// Bytes of the sender's credit scratch region (the receiver writes 8 of them).
const CREDIT_BYTES: usize = 64;
/// How long a completion poller sleeps on its channel before re-checking for a stop request.
const IDLE_WAIT: Duration = Duration::from_millis(20);
/// How long a poller busy-polls after its last completion before it sleeps on the channel: long
/// enough to catch back-to-back completions on a fast NIC without a system call, short enough not
/// to steal a core from soft RDMA (rxe, siw), whose "NIC" is kernel work on the same CPUs.
const SPIN_FOR: Duration = Duration::from_micros(20);

/// How the queue pairs are connected.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ConnectMode {
    /// rdma_cm when the first device needs it (`caps().needs_rdma_cm`: iWARP, eRDMA's default
    /// mode), otherwise endpoints exchanged over the side channel.
    #[default]
    Auto,
    /// Endpoints (QP number, PSN, GID) exchanged over the side channel; RoCE/IB devices only.
    Manual,
    /// librdmacm: the receiver listens on each device's IP address, the sender connects.
    RdmaCm,
}

/// Settings of an RDMA transport end. Both ends must agree on `qps`, the connect mode they
/// resolve to, and the ring geometry (checked during setup, with an error naming both values).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RdmaConfig {
    /// Verbs devices to stripe over, e.g. `["erdma_0", "erdma_1"]`; QP `q` uses device
    /// `q % devices.len()`. In rdma_cm mode the receiver listens on one address per device and
    /// the sender's devices are picked by the route to those addresses.
    pub devices: Vec<String>,
    /// Queue pairs to the peer in total (≥ the number of devices); chunk `g` uses QP `g % qps`.
    pub qps: usize,
    /// GID index for manual connection (1 = the RoCE v2 IPv4 GID on rxe and usually on eRDMA).
    pub gid_index: u32,
    /// Port number (1-based).
    pub port: u8,
    /// How QPs are connected.
    pub connect: ConnectMode,
    /// rdma_cm only, receiver side: the IP address to listen on for each device (same order as
    /// `devices`). Empty: the IPv4 address in each device's GID at `gid_index`.
    pub cm_addrs: Vec<IpAddr>,
    /// Bound on every wait for the peer (setup, credits, completions, the ACK, the next chunk).
    pub timeout: Duration,
}

impl Default for RdmaConfig {
    fn default() -> Self {
        RdmaConfig {
            devices: Vec::new(),
            qps: DEFAULT_QPS,
            gid_index: 1,
            port: 1,
            connect: ConnectMode::Auto,
            cm_addrs: Vec::new(),
            timeout: DEFAULT_TIMEOUT,
        }
    }
}

fn config_err(
    field: &'static str,
    value: impl ToString,
    reason: impl Into<String>,
) -> TransportError {
    TransportError::Config {
        field,
        value: value.to_string(),
        reason: reason.into(),
    }
}

impl RdmaConfig {
    /// A configuration for `devices` with the defaults (2 QPs, GID index 1, automatic connect).
    pub fn new<S: Into<String>>(devices: impl IntoIterator<Item = S>) -> Self {
        RdmaConfig {
            devices: devices.into_iter().map(Into::into).collect(),
            ..RdmaConfig::default()
        }
    }

    /// Checks the settings without touching a device; the error names the field and the fix.
    pub fn validate(&self) -> Result<(), TransportError> {
        if self.devices.is_empty() {
            return Err(config_err(
                "devices",
                "[]",
                "name at least one RDMA device (e.g. erdma_0, or rxe0 under soft-RoCE)",
            ));
        }
        for (i, d) in self.devices.iter().enumerate() {
            if d.trim().is_empty() {
                return Err(config_err(
                    "devices",
                    format!("{:?}", self.devices),
                    "device names must not be empty",
                ));
            }
            if self.devices[..i].contains(d) {
                return Err(config_err(
                    "devices",
                    format!("{:?}", self.devices),
                    format!(
                        "{d} is listed twice; stripe over distinct devices (raise `qps` for more QPs per device)"
                    ),
                ));
            }
        }
        if !(1..=MAX_QPS).contains(&self.qps) {
            return Err(config_err(
                "qps",
                self.qps,
                format!("use 1..={MAX_QPS} queue pairs"),
            ));
        }
        if self.qps < self.devices.len() {
            return Err(config_err(
                "qps",
                self.qps,
                format!(
                    "{} devices need at least {} queue pairs (one per device)",
                    self.devices.len(),
                    self.devices.len()
                ),
            ));
        }
        if self.port == 0 {
            return Err(config_err("port", 0, "ports are numbered from 1"));
        }
        if self.timeout.is_zero() {
            return Err(config_err(
                "timeout",
                "0s",
                "use a positive timeout (default 60 s)",
            ));
        }
        if !self.cm_addrs.is_empty() && self.cm_addrs.len() != self.devices.len() {
            return Err(config_err(
                "cm_addrs",
                format!("{:?}", self.cm_addrs),
                format!(
                    "give one address per device ({} devices) or none",
                    self.devices.len()
                ),
            ));
        }
        Ok(())
    }

    /// The striping map for this configuration.
    pub fn stripe(&self) -> Stripe {
        Stripe {
            qps: self.qps.max(1),
            devices: self.devices.len().max(1),
        }
    }
}

/// Which queue pair and device carry a chunk: chunk `g` → QP `g % qps` → device `qp % devices`.
/// Consecutive chunks therefore alternate between devices, so two NICs share the load evenly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stripe {
    /// Queue pairs in total.
    pub qps: usize,
    /// Devices striped over.
    pub devices: usize,
}

impl Stripe {
    /// The QP that carries session-wide chunk `global`.
    pub fn qp_of(&self, global: u64) -> usize {
        (global % self.qps as u64) as usize
    }

    /// The device (index into [`RdmaConfig::devices`]) that QP `qp` lives on.
    pub fn device_of(&self, qp: usize) -> usize {
        qp % self.devices
    }

    /// The QPs living on device `device`.
    pub fn qps_on(&self, device: usize) -> Vec<usize> {
        (0..self.qps)
            .filter(|q| self.device_of(*q) == device)
            .collect()
    }
}

/// The immediate value of chunk `global`'s WRITE_WITH_IMM: its low 32 bits.
pub fn encode_imm(global: u64) -> u32 {
    global as u32
}

/// Rebuilds the session-wide chunk number from an immediate value, given the next chunk the
/// receiver expects and how many chunks may be in flight (`window` = ring slots). Fails for an
/// immediate outside `next..next + window` (a peer that broke the credit protocol).
pub fn decode_imm(imm: u32, next: u64, window: u64) -> Result<u64, TransportError> {
    let delta = u64::from(imm.wrapping_sub(next as u32));
    if delta < window {
        Ok(next + delta)
    } else {
        Err(TransportError::Protocol(format!(
            "received chunk immediate {imm:#010x} while expecting chunks {next}..{} (at most {window} in flight): \
             the sender wrote without a credit",
            next + window
        )))
    }
}

/// Advances a credit count from the low 32 bits carried in a credit's immediate value. Credits
/// only grow, by less than 2^31 per message; anything else is a protocol error.
pub fn advance_credit(granted: u64, imm: u32) -> Result<u64, TransportError> {
    let delta = u64::from(imm.wrapping_sub(granted as u32));
    if delta < (1 << 31) {
        Ok(granted + delta)
    } else {
        Err(TransportError::Protocol(format!(
            "credit immediate {imm:#010x} would move the credit count backwards from {granted}"
        )))
    }
}

/// Connection mode both ends actually use (after resolving [`ConnectMode::Auto`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Wiring {
    /// Endpoints over the side channel.
    Manual,
    /// librdmacm.
    RdmaCm,
}

/// The sender's opening message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SenderHello {
    /// [`PROTOCOL_VERSION`] of the sender.
    pub version: u32,
    /// The sender's ring geometry.
    pub ring: RingConfig,
    /// Queue pairs the sender opens.
    pub qps: usize,
    /// The sender's devices (for messages).
    pub devices: Vec<String>,
    /// How the sender connects.
    pub wiring: Wiring,
    /// Manual wiring: one endpoint per QP, in QP order. Empty for rdma_cm.
    pub endpoints: Vec<Endpoint>,
}

/// The receiver's answer once its QPs are ready.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReceiverWelcome {
    /// The receiver's ring geometry.
    pub ring: RingConfig,
    /// The receiver's devices (for messages).
    pub devices: Vec<String>,
    /// Manual wiring: one endpoint per QP. Empty for rdma_cm.
    pub endpoints: Vec<Endpoint>,
    /// For each receiver device (QP `q` uses `slots[q % len]`), where each ring slot is
    /// registered: address, length, rkey.
    pub slots: Vec<Vec<RemoteBuf>>,
}

/// Side-channel messages, one JSON object per line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Wire {
    /// Sender → receiver, first.
    Hello(SenderHello),
    /// Receiver → sender (rdma_cm): where to connect QP `q` (`addrs[q % addrs.len()]`).
    Listening {
        /// One listener per receiver device.
        addrs: Vec<SocketAddr>,
    },
    /// Receiver → sender: QPs ready, slot table.
    Welcome(ReceiverWelcome),
    /// Sender → receiver: QPs ready; credits go into `credit` (on QP 0).
    Ready {
        /// The sender's credit scratch region.
        credit: RemoteBuf,
    },
    /// Sender → receiver: every WRITE of the transfer completed.
    End {
        /// Chunks in the transfer.
        chunks: u64,
        /// Bytes in the transfer.
        bytes: u64,
    },
    /// Receiver → sender: the transfer is on the device.
    Ack {
        /// Chunks received.
        chunks: u64,
        /// Bytes received.
        bytes: u64,
    },
    /// Either way: the pipeline failed.
    Abort {
        /// Why.
        reason: String,
    },
}

impl Wire {
    /// One line of JSON (with the newline).
    pub fn to_line(&self) -> Result<String, TransportError> {
        let mut s = serde_json::to_string(self).map_err(|e| {
            TransportError::Protocol(format!("encoding a side-channel message: {e}"))
        })?;
        s.push('\n');
        Ok(s)
    }

    /// Parses one line.
    pub fn from_line(line: &str) -> Result<Wire, TransportError> {
        serde_json::from_str(line.trim_end()).map_err(|e| {
            TransportError::Protocol(format!(
                "bad side-channel message {:?}: {e} (is the peer a gpu-stage RDMA transport of the same version?)",
                truncate(line, 120)
            ))
        })
    }
}

fn truncate(s: &str, n: usize) -> String {
    if s.len() <= n {
        s.to_string()
    } else {
        let mut end = n;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}…", &s[..end])
    }
}

fn describe_ring(r: &RingConfig) -> String {
    format!("{} B × {} slots", r.chunk_bytes, r.slots)
}

/// Receiver-side check of the sender's hello against our own settings.
pub fn check_hello(
    hello: &SenderHello,
    ring: &RingConfig,
    qps: usize,
    wiring: Wiring,
) -> Result<(), TransportError> {
    if hello.version != PROTOCOL_VERSION {
        return Err(TransportError::Protocol(format!(
            "the sender speaks protocol version {}, this receiver {PROTOCOL_VERSION}; run the same gpu-stage build on both ends",
            hello.version
        )));
    }
    check_ring("sender", &hello.ring, ring)?;
    if hello.qps != qps {
        return Err(config_err(
            "qps",
            qps,
            format!(
                "the sender opens {} queue pairs and this receiver expects {qps}; use the same --qps on both ends",
                hello.qps
            ),
        ));
    }
    if hello.wiring != wiring {
        return Err(config_err(
            "connect",
            format!("{wiring:?}"),
            format!(
                "the sender connects with {:?} and this receiver with {wiring:?}; choose the same connect mode on both ends",
                hello.wiring
            ),
        ));
    }
    if wiring == Wiring::Manual && hello.endpoints.len() != qps {
        return Err(TransportError::Protocol(format!(
            "the sender sent {} endpoints for {qps} queue pairs",
            hello.endpoints.len()
        )));
    }
    Ok(())
}

/// Both rings must have the same geometry: chunk `g` is written to the receiver's slot
/// `g % slots` at offset `seq * chunk_bytes`, and both ends count credits in slots.
pub fn check_ring(
    peer: &str,
    theirs: &RingConfig,
    ours: &RingConfig,
) -> Result<(), TransportError> {
    if theirs != ours {
        return Err(config_err(
            "ring",
            describe_ring(ours),
            format!(
                "the {peer}'s ring is {} but ours is {}; use the same --chunk and --slots on both ends",
                describe_ring(theirs),
                describe_ring(ours)
            ),
        ));
    }
    Ok(())
}

/// Sender-side check of the receiver's welcome.
pub fn check_welcome(
    w: &ReceiverWelcome,
    ring: &RingConfig,
    qps: usize,
    wiring: Wiring,
) -> Result<(), TransportError> {
    check_ring("receiver", &w.ring, ring)?;
    if wiring == Wiring::Manual && w.endpoints.len() != qps {
        return Err(TransportError::Protocol(format!(
            "the receiver sent {} endpoints for {qps} queue pairs",
            w.endpoints.len()
        )));
    }
    if w.slots.is_empty() {
        return Err(TransportError::Protocol(
            "the receiver sent no slot table".into(),
        ));
    }
    for (d, table) in w.slots.iter().enumerate() {
        if table.len() != ring.slots {
            return Err(TransportError::Protocol(format!(
                "the receiver's slot table for device {d} has {} entries for {} slots",
                table.len(),
                ring.slots
            )));
        }
        if let Some(s) = table.iter().find(|s| s.len < ring.chunk_bytes as u64) {
            return Err(TransportError::Protocol(format!(
                "the receiver registered a {}-byte slot, smaller than the {}-byte chunks",
                s.len, ring.chunk_bytes
            )));
        }
    }
    Ok(())
}

// ------------------------------------------------------------------------------------------------
// Shared plumbing

/// State shared by the transport, its completion pollers and its side-channel reader.
#[derive(Debug, Default)]
struct Shared {
    st: Mutex<State>,
    cv: Condvar,
}

#[derive(Debug, Default)]
struct State {
    failure: Option<String>,
    stop: bool,
    /// Sender: credits received (chunks `g < granted` may be written).
    granted: u64,
    /// Sender: WRITEs posted and not yet completed.
    outstanding: u64,
    /// Sender: the slots of the WRITEs in flight, by session-wide chunk number; a slot is released
    /// when its WRITE completed, and kept busy after a failed one until the QPs are destroyed.
    in_flight: BTreeMap<u64, SlotToken>,
    /// Sender: the receiver's ACK, once it came.
    ack: Option<TransferSummary>,
    /// The ring the transport works on (failures are written to its gate).
    ring: Option<Arc<StagingRing>>,
    /// Receiver: the slots the credit thread acquired and granted to the sender, in chunk order,
    /// not yet handed to the pipeline. The peer may write into them, so they are released only
    /// after the QPs are destroyed.
    credits: VecDeque<SlotToken>,
    /// A transfer is in progress (between attach and its end): only then does a failure also
    /// fail the ring's gate. A peer that leaves between transfers ends the session, not the ring.
    busy: bool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records the first failure, fails the ring's gate and wakes every waiter.
    fn fail(&self, why: impl Into<String>) {
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

    fn failure(&self) -> Option<String> {
        self.lock().failure.clone()
    }

    fn stopping(&self) -> bool {
        let g = self.lock();
        g.stop || g.failure.is_some()
    }

    /// Waits until `ready(state)` holds; fails on a recorded failure or after `timeout`.
    fn wait_until(
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
struct Workers {
    shared: Arc<Shared>,
    side: Arc<SideWriter>,
    handles: Vec<JoinHandle<()>>,
}

impl Workers {
    fn new(shared: &Arc<Shared>, side: &Arc<SideWriter>) -> Self {
        Workers {
            shared: Arc::clone(shared),
            side: Arc::clone(side),
            handles: Vec::new(),
        }
    }

    fn spawn(
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

    /// Asks every worker to stop (flag, condvar, side channel shut down) and joins them.
    fn stop(&mut self) {
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
struct SideWriter {
    stream: Mutex<TcpStream>,
    peer: String,
}

impl SideWriter {
    fn send(&self, msg: &Wire) -> Result<(), TransportError> {
        let line = msg.to_line()?;
        let mut s = self.stream.lock().unwrap_or_else(PoisonError::into_inner);
        s.write_all(line.as_bytes())
            .and_then(|()| s.flush())
            .map_err(TransportError::io(format!("side channel to {}", self.peer)))
    }

    /// Best effort, bounded: used on the failure path.
    fn send_abort(&self, reason: &str) {
        let s = self.stream.lock().unwrap_or_else(PoisonError::into_inner);
        let _ = s.set_write_timeout(Some(Duration::from_secs(1)));
        drop(s);
        let _ = self.send(&Wire::Abort {
            reason: reason.to_string(),
        });
    }

    fn shutdown(&self) {
        let s = self.stream.lock().unwrap_or_else(PoisonError::into_inner);
        let _ = s.shutdown(Shutdown::Both);
    }
}

/// Reads one message during setup (the stream has a read timeout then).
fn read_msg(r: &mut BufReader<TcpStream>, peer: &str, step: &str) -> Result<Wire, TransportError> {
    let mut line = String::new();
    let n = r.read_line(&mut line).map_err(|e| {
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
struct Dev {
    ctx: Arc<Context>,
    pd: Arc<ProtectionDomain>,
    cq: Arc<CompletionQueue>,
}

impl Dev {
    fn new(ctx: Arc<Context>, cqe: u32) -> Result<Dev, TransportError> {
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

    fn builder(&self, cfg: &RdmaConfig, depth: u32) -> QpBuilder {
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

/// Queue depth per QP: a full ring of writes or credits in flight, plus room for the stragglers.
fn qp_depth(ring: &RingConfig) -> u32 {
    (2 * ring.slots + 16).min(u32::MAX as usize) as u32
}

type SharedQp = Arc<Mutex<QueuePair<Rts>>>;

fn lock_qp(qp: &SharedQp) -> MutexGuard<'_, QueuePair<Rts>> {
    qp.lock().unwrap_or_else(PoisonError::into_inner)
}

fn post_recvs(
    qp: &mut QueuePair<Rts>,
    index: usize,
    n: u32,
    peer: &str,
) -> Result<(), TransportError> {
    for _ in 0..n {
        qp.post_recv_empty(RECV_TAG | index as u64)
            .map_err(TransportError::rdma(format!(
                "posting receives on QP {index} to {peer}"
            )))?;
    }
    Ok(())
}

fn post_recvs_init(
    qp: &mut QueuePair<erdma_verbs::Init>,
    index: usize,
    n: u32,
    peer: &str,
) -> Result<(), TransportError> {
    for _ in 0..n {
        qp.post_recv_empty(RECV_TAG | index as u64)
            .map_err(TransportError::rdma(format!(
                "posting receives on QP {index} to {peer}"
            )))?;
    }
    Ok(())
}

/// Polls `cq` for up to [`SPIN_FOR`], then sleeps on its channel for up to [`IDLE_WAIT`].
fn poll_some(cq: &CompletionQueue, out: &mut Vec<Completion>) -> Result<(), erdma_verbs::Error> {
    let start = Instant::now();
    while start.elapsed() < SPIN_FOR {
        if cq.poll_into(out, 64)? > 0 {
            return Ok(());
        }
        std::hint::spin_loop();
    }
    match cq.wait(Some(IDLE_WAIT)) {
        Ok(v) => {
            out.extend(v);
            Ok(())
        }
        Err(erdma_verbs::Error::Timeout(..)) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Resolves [`ConnectMode::Auto`] by opening the first device.
fn resolve_wiring(cfg: &RdmaConfig) -> Result<Wiring, TransportError> {
    match cfg.connect {
        ConnectMode::Manual => Ok(Wiring::Manual),
        ConnectMode::RdmaCm => Ok(Wiring::RdmaCm),
        ConnectMode::Auto => {
            let name = &cfg.devices[0];
            let ctx = Context::open(name)
                .map_err(TransportError::rdma(format!("opening RDMA device {name}")))?;
            Ok(if ctx.caps().needs_rdma_cm {
                Wiring::RdmaCm
            } else {
                Wiring::Manual
            })
        }
    }
}

fn open_devices(cfg: &RdmaConfig, cqe: u32) -> Result<Vec<Dev>, TransportError> {
    cfg.devices
        .iter()
        .map(|name| {
            let ctx = Context::open(name)
                .map_err(TransportError::rdma(format!("opening RDMA device {name}")))?;
            Dev::new(ctx, cqe)
        })
        .collect()
}

fn check_msg_size(dev: &Dev, cfg: &RdmaConfig, ring: &RingConfig) -> Result<(), TransportError> {
    let port = dev
        .ctx
        .query_port(cfg.port)
        .map_err(TransportError::rdma(format!(
            "{}: querying port {}",
            dev.ctx.name(),
            cfg.port
        )))?;
    if port.max_msg_sz > 0 && (ring.chunk_bytes as u64) > u64::from(port.max_msg_sz) {
        return Err(config_err(
            "chunk_bytes",
            ring.chunk_bytes,
            format!(
                "{} carries at most {} bytes per message; use a smaller --chunk",
                dev.ctx.name(),
                port.max_msg_sz
            ),
        ));
    }
    Ok(())
}

/// Registers every slot of `ring` on `pd`.
fn register_ring(
    pd: &Arc<ProtectionDomain>,
    ring: &Arc<StagingRing>,
    access: Access,
) -> Result<Vec<Arc<MemoryRegion>>, TransportError> {
    (0..ring.slots())
        .map(|slot| {
            // SAFETY: the region stays valid while the ring lives, and the MR keeps an Arc of the
            // ring as its owner, so the memory outlives the registration. The NIC touches a slot
            // only between acquire and release under the gate protocol (writes are posted for
            // slots the transport owns; the peer writes only into slots it holds a credit for).
            let region = unsafe { ring.raw_region(slot) }.ok_or_else(|| {
                TransportError::Protocol(format!("ring slot {slot} does not exist"))
            })?;
            // SAFETY: see above; nothing in this crate calls the region's slice accessors.
            unsafe {
                MemoryRegion::register_external(
                    pd,
                    region.addr,
                    region.len,
                    access,
                    Arc::clone(ring),
                )
            }
            .map_err(TransportError::rdma(format!(
                "{}: registering ring slot {slot} ({} bytes)",
                pd.context().name(),
                region.len
            )))
        })
        .collect()
}

fn ipv4_of_gid(ctx: &Context, cfg: &RdmaConfig) -> Result<IpAddr, TransportError> {
    let gid = ctx
        .query_gid(cfg.port, cfg.gid_index)
        .map_err(TransportError::rdma(format!(
            "{}: reading GID {}",
            ctx.name(),
            cfg.gid_index
        )))?;
    Ipv6Addr::from(gid.0)
        .to_ipv4_mapped()
        .map(IpAddr::V4)
        .ok_or_else(|| {
            config_err(
                "cm_addrs",
                "[]",
                format!(
                    "{}'s GID {} ({gid}) holds no IPv4 address; give the device's IP address for rdma_cm (--cm-addr)",
                    ctx.name(),
                    cfg.gid_index
                ),
            )
        })
}

// ------------------------------------------------------------------------------------------------
// Sender

/// Sending half of the RDMA transport (the client: it connects to an [`RdmaReceiver`]).
#[derive(Debug)]
pub struct RdmaSender {
    cfg: RdmaConfig,
    ring_cfg: RingConfig,
    shared: Arc<Shared>,
    side: Arc<SideWriter>,
    qps: Vec<SharedQp>,
    /// QP `q`'s local device index.
    qp_dev: Vec<usize>,
    devs: Vec<Dev>,
    /// Local registration of every ring slot, per device.
    mrs: Vec<Vec<Arc<MemoryRegion>>>,
    ring: Arc<StagingRing>,
    /// Receiver slot tables, per receiver device.
    remote: Vec<Vec<RemoteBuf>>,
    _credit_mrs: Vec<Arc<MemoryRegion>>,
    workers: Workers,
    /// Session-wide number of the next transfer's first chunk.
    base: u64,
    /// Session-wide number of the next chunk to post.
    next: u64,
    peer: String,
}

impl RdmaSender {
    /// Connects to the [`RdmaReceiver`] whose side channel listens at `addr`: exchanges settings
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
        let ring_cfg = ring.config();
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
        stream
            .set_nodelay(true)
            .map_err(TransportError::io("setting TCP_NODELAY"))?;
        stream
            .set_read_timeout(Some(cfg.timeout))
            .map_err(TransportError::io("setting a read timeout"))?;
        let side = Arc::new(SideWriter {
            stream: Mutex::new(
                stream
                    .try_clone()
                    .map_err(TransportError::io("cloning a socket"))?,
            ),
            peer: peer.clone(),
        });
        let mut reader = BufReader::new(stream);
        let r = Self::setup(cfg, ring, ring_cfg, &side, &mut reader, &peer);
        let (devs, qps, qp_dev, remote, credit_mrs) = match r {
            Ok(v) => v,
            Err(e) => {
                side.send_abort(&e.to_string());
                return Err(e);
            }
        };
        let mrs = devs
            .iter()
            .map(|d| register_ring(&d.pd, ring, Access::LOCAL_WRITE))
            .collect::<Result<Vec<_>, _>>()?;
        reader
            .get_ref()
            .set_read_timeout(None)
            .map_err(TransportError::io("clearing the read timeout"))?;
        let shared = Arc::new(Shared::default());
        shared.lock().ring = Some(Arc::clone(ring));
        let mut workers = Workers::new(&shared, &side);
        {
            let shared = Arc::clone(&shared);
            let peer = peer.clone();
            workers.spawn("gpu-stage-rdma-side", move || {
                sender_side_reader(reader, &shared, &peer)
            })?;
        }
        for (d, dev) in devs.iter().enumerate() {
            let shared = Arc::clone(&shared);
            let cq = Arc::clone(&dev.cq);
            let my_qps: Vec<(usize, SharedQp)> = qps
                .iter()
                .enumerate()
                .filter(|(q, _)| qp_dev[*q] == d)
                .map(|(q, qp)| (q, Arc::clone(qp)))
                .collect();
            let peer = peer.clone();
            workers.spawn(&format!("gpu-stage-rdma-scq{d}"), move || {
                sender_poller(&cq, &my_qps, &shared, &peer)
            })?;
        }
        Ok(RdmaSender {
            cfg: cfg.clone(),
            ring_cfg,
            shared,
            side,
            qps,
            qp_dev,
            devs,
            mrs,
            ring: Arc::clone(ring),
            remote,
            _credit_mrs: credit_mrs,
            workers,
            base: 0,
            next: 0,
            peer,
        })
    }

    #[allow(clippy::type_complexity)]
    fn setup(
        cfg: &RdmaConfig,
        _ring: &Arc<StagingRing>,
        ring_cfg: RingConfig,
        side: &SideWriter,
        reader: &mut BufReader<TcpStream>,
        peer: &str,
    ) -> Result<
        (
            Vec<Dev>,
            Vec<SharedQp>,
            Vec<usize>,
            Vec<Vec<RemoteBuf>>,
            Vec<Arc<MemoryRegion>>,
        ),
        TransportError,
    > {
        let wiring = resolve_wiring(cfg)?;
        let depth = qp_depth(&ring_cfg);
        let stripe = cfg.stripe();
        let cqe = depth.saturating_mul(2).saturating_mul(cfg.qps as u32);
        let mut hello = SenderHello {
            version: PROTOCOL_VERSION,
            ring: ring_cfg,
            qps: cfg.qps,
            devices: cfg.devices.clone(),
            wiring,
            endpoints: Vec::new(),
        };
        let (devs, qps, qp_dev, welcome) = match wiring {
            Wiring::Manual => {
                let devs = open_devices(cfg, cqe)?;
                for d in &devs {
                    check_msg_size(d, cfg, &ring_cfg)?;
                }
                let mut inits = Vec::with_capacity(cfg.qps);
                for q in 0..cfg.qps {
                    let d = &devs[stripe.device_of(q)];
                    let mut qp =
                        d.builder(cfg, depth)
                            .build(&d.pd)
                            .map_err(TransportError::rdma(format!(
                                "{}: creating QP {q}",
                                d.ctx.name()
                            )))?;
                    // Credits arrive on QP 0 before the first chunk is written: post first.
                    post_recvs_init(&mut qp, q, depth, peer)?;
                    hello
                        .endpoints
                        .push(qp.endpoint().map_err(TransportError::rdma(format!(
                            "{}: reading QP {q}'s endpoint",
                            d.ctx.name()
                        )))?);
                    inits.push(qp);
                }
                side.send(&Wire::Hello(hello))?;
                let welcome = match read_msg(reader, peer, "waiting for the slot table")? {
                    Wire::Welcome(w) => w,
                    m => return Err(unexpected(peer, "Welcome", &m)),
                };
                check_welcome(&welcome, &ring_cfg, cfg.qps, wiring)?;
                let mut qps = Vec::with_capacity(cfg.qps);
                for (q, (qp, ep)) in inits.into_iter().zip(&welcome.endpoints).enumerate() {
                    let qp = qp
                        .connect(ep)
                        .map_err(TransportError::rdma(format!("connecting QP {q} to {peer}")))?;
                    qps.push(Arc::new(Mutex::new(qp)));
                }
                let qp_dev = (0..cfg.qps).map(|q| stripe.device_of(q)).collect();
                (devs, qps, qp_dev, welcome)
            }
            Wiring::RdmaCm => {
                side.send(&Wire::Hello(hello))?;
                let addrs = match read_msg(reader, peer, "waiting for the rdma_cm addresses")? {
                    Wire::Listening { addrs } if !addrs.is_empty() => addrs,
                    m => return Err(unexpected(peer, "Listening", &m)),
                };
                // Our devices follow the route to the receiver's listeners: group g connects to
                // addrs[g], and its first connection decides the device.
                let groups = addrs.len().min(cfg.qps);
                let mut devs: Vec<Option<Dev>> = (0..groups).map(|_| None).collect();
                let mut qps = Vec::with_capacity(cfg.qps);
                let mut qp_dev = Vec::with_capacity(cfg.qps);
                for q in 0..cfg.qps {
                    let g = q % groups;
                    let to = addrs[g];
                    let conn = Connector::resolve(to, cfg.timeout).map_err(
                        TransportError::rdma(format!("rdma_cm: resolving {to} for QP {q}")),
                    )?;
                    if devs[g].is_none() {
                        let d = Dev::new(Arc::clone(conn.context()), cqe)?;
                        check_msg_size(&d, cfg, &ring_cfg)?;
                        devs[g] = Some(d);
                    }
                    let d = devs[g]
                        .as_ref()
                        .ok_or_else(|| TransportError::Protocol("device group vanished".into()))?;
                    if conn.context().name() != d.ctx.name() {
                        return Err(TransportError::Protocol(format!(
                            "rdma_cm routes QP {q} to {to} over {} but earlier QPs to it use {}",
                            conn.context().name(),
                            d.ctx.name()
                        )));
                    }
                    let (mut qp, _) = conn
                        .connect(
                            &d.pd,
                            &d.builder(cfg, depth),
                            &(q as u32).to_le_bytes(),
                            cfg.timeout,
                        )
                        .map_err(TransportError::rdma(format!(
                            "rdma_cm: connecting QP {q} to {to}"
                        )))?;
                    post_recvs(&mut qp, q, depth, peer)?;
                    qps.push(Arc::new(Mutex::new(qp)));
                    qp_dev.push(g);
                }
                let devs = devs
                    .into_iter()
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| TransportError::Protocol("a device group has no QP".into()))?;
                let welcome = match read_msg(reader, peer, "waiting for the slot table")? {
                    Wire::Welcome(w) => w,
                    m => return Err(unexpected(peer, "Welcome", &m)),
                };
                check_welcome(&welcome, &ring_cfg, cfg.qps, wiring)?;
                (devs, qps, qp_dev, welcome)
            }
        };
        // Credit scratch on QP 0's device; its contents are never read (the immediate counts).
        let d0 = &devs[qp_dev[0]];
        let credit = MemoryRegion::new(
            &d0.pd,
            CREDIT_BYTES,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        )
        .map_err(TransportError::rdma(format!(
            "{}: registering the credit word",
            d0.ctx.name()
        )))?;
        side.send(&Wire::Ready {
            credit: credit.remote(),
        })?;
        Ok((devs, qps, qp_dev, welcome.slots, vec![credit]))
    }

    /// Queue pairs in use.
    pub fn qps(&self) -> usize {
        self.qps.len()
    }

    /// Names of the local devices in use (in rdma_cm mode, the ones the routes picked).
    pub fn devices(&self) -> Vec<String> {
        self.devs.iter().map(|d| d.ctx.name().to_string()).collect()
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
        let peer = self.peer.clone();
        self.shared.wait_until(
            self.cfg.timeout,
            || {
                format!(
                    "for a credit to write chunk {} (the receiver {peer} stopped freeing slots)",
                    chunk.seq
                )
            },
            |s| s.granted > g,
        )?;
        let stripe = Stripe {
            qps: self.qps.len(),
            devices: self.devs.len(),
        };
        let q = stripe.qp_of(g);
        let local = self.mrs[self.qp_dev[q]][chunk.slot]
            .slice(0..chunk.len)
            .map_err(TransportError::rdma("slicing the local slot"))?;
        let table = &self.remote[q % self.remote.len()];
        let remote = table[(g % table.len() as u64) as usize]
            .slice(0..chunk.len as u64)
            .map_err(TransportError::rdma("slicing the remote slot"))?;
        {
            // Before posting: the completion may be polled before post_write_imm returns.
            let mut st = self.shared.lock();
            st.outstanding += 1;
            st.in_flight.insert(g, slot);
        }
        let posted = lock_qp(&self.qps[q]).post_write_imm(
            local,
            remote,
            encode_imm(g),
            (g << SLOT_BITS) | chunk.slot as u64,
        );
        if let Err(e) = posted {
            let never_posted = {
                let mut st = self.shared.lock();
                st.outstanding -= 1;
                st.in_flight.remove(&g)
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

fn unexpected(peer: &str, want: &str, got: &Wire) -> TransportError {
    let kind = match got {
        Wire::Hello(_) => "Hello",
        Wire::Listening { .. } => "Listening",
        Wire::Welcome(_) => "Welcome",
        Wire::Ready { .. } => "Ready",
        Wire::End { .. } => "End",
        Wire::Ack { .. } => "Ack",
        Wire::Abort { .. } => "Abort",
    };
    TransportError::Protocol(format!("{peer} sent {kind} where {want} was expected"))
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

fn sender_side_reader(mut reader: BufReader<TcpStream>, shared: &Shared, peer: &str) {
    let mut line = String::new();
    loop {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) => {
                shared.fail(format!(
                    "the {peer} closed the side channel (process exited or connection lost)"
                ));
                return;
            }
            Err(e) => {
                shared.fail(format!("side channel to the {peer} broke: {e}"));
                return;
            }
            Ok(_) => {}
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
                    let done = {
                        let mut s = shared.lock();
                        s.outstanding = s.outstanding.saturating_sub(1);
                        s.in_flight.remove(&g)
                    };
                    if done.as_ref().is_some_and(|t| t.slot() != slot) {
                        shared.fail(format!(
                            "the WRITE of chunk #{g} completed for slot {slot}, but it was posted from another slot"
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
        self.qps.clear();
        self.mrs.clear();
        let in_flight = std::mem::take(&mut self.shared.lock().in_flight);
        drop(in_flight);
    }
}

// ------------------------------------------------------------------------------------------------
// Receiver

/// What the pollers and the side-channel reader tell `next_chunk`.
#[derive(Debug)]
enum Event {
    Data { imm: u32, len: u32, qp: usize },
    End(TransferSummary),
    Failed(TransportError),
}

/// Receiving half of the RDMA transport (the server: it accepts one [`RdmaSender`]).
#[derive(Debug)]
pub struct RdmaReceiver {
    cfg: RdmaConfig,
    ring: Arc<StagingRing>,
    shared: Arc<Shared>,
    side: Arc<SideWriter>,
    events: mpsc::Receiver<Event>,
    qps: Vec<SharedQp>,
    devs: Vec<Dev>,
    _mrs: Vec<Vec<Arc<MemoryRegion>>>,
    workers: Workers,
    /// Chunks that arrived ahead of their turn: session-wide number → length.
    pending: BTreeMap<u64, usize>,
    end: Option<TransferSummary>,
    /// Session-wide number of this transfer's first chunk.
    base: u64,
    /// Session-wide number of the next chunk to deliver.
    next: u64,
    bytes: u64,
    peer: String,
}

impl RdmaReceiver {
    /// Accepts one [`RdmaSender`] on `listener` (the side channel), registers every slot of
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
        let peer = format!("sender {addr}");
        stream
            .set_nodelay(true)
            .map_err(TransportError::io("setting TCP_NODELAY"))?;
        stream
            .set_read_timeout(Some(cfg.timeout))
            .map_err(TransportError::io("setting a read timeout"))?;
        let side = Arc::new(SideWriter {
            stream: Mutex::new(
                stream
                    .try_clone()
                    .map_err(TransportError::io("cloning a socket"))?,
            ),
            peer: peer.clone(),
        });
        let mut reader = BufReader::new(stream);
        let setup = Self::setup(cfg, ring, &side, &mut reader, &peer);
        let (devs, qps, mrs, credit_target) = match setup {
            Ok(v) => v,
            Err(e) => {
                side.send_abort(&e.to_string());
                return Err(e);
            }
        };
        reader
            .get_ref()
            .set_read_timeout(None)
            .map_err(TransportError::io("clearing the read timeout"))?;
        let shared = Arc::new(Shared::default());
        shared.lock().ring = Some(Arc::clone(ring));
        let (tx, events) = mpsc::channel();
        let mut workers = Workers::new(&shared, &side);
        {
            let shared = Arc::clone(&shared);
            let tx = tx.clone();
            let peer = peer.clone();
            workers.spawn("gpu-stage-rdma-side", move || {
                receiver_side_reader(reader, &shared, &tx, &peer)
            })?;
        }
        let stripe = cfg.stripe();
        for (d, dev) in devs.iter().enumerate() {
            let shared = Arc::clone(&shared);
            let cq = Arc::clone(&dev.cq);
            let my_qps: Vec<(usize, SharedQp)> = qps
                .iter()
                .enumerate()
                .filter(|(q, _)| stripe.device_of(*q) % devs.len() == d)
                .map(|(q, qp)| (q, Arc::clone(qp)))
                .collect();
            let tx = tx.clone();
            let peer = peer.clone();
            workers.spawn(&format!("gpu-stage-rdma-rcq{d}"), move || {
                receiver_poller(&cq, &my_qps, &shared, &tx, &peer)
            })?;
        }
        {
            let d0 = &devs[stripe.device_of(0) % devs.len()];
            let src = MemoryRegion::new(&d0.pd, 8, Access::LOCAL_WRITE).map_err(
                TransportError::rdma(format!("{}: registering the credit source", d0.ctx.name())),
            )?;
            let qp0 = Arc::clone(&qps[0]);
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
            side,
            events,
            qps,
            devs,
            _mrs: mrs,
            workers,
            pending: BTreeMap::new(),
            end: None,
            base: 0,
            next: 0,
            bytes: 0,
            peer,
        })
    }

    #[allow(clippy::type_complexity)]
    fn setup(
        cfg: &RdmaConfig,
        ring: &Arc<StagingRing>,
        side: &SideWriter,
        reader: &mut BufReader<TcpStream>,
        peer: &str,
    ) -> Result<
        (
            Vec<Dev>,
            Vec<SharedQp>,
            Vec<Vec<Arc<MemoryRegion>>>,
            RemoteBuf,
        ),
        TransportError,
    > {
        let ring_cfg = ring.config();
        let wiring = resolve_wiring(cfg)?;
        let depth = qp_depth(&ring_cfg);
        let stripe = cfg.stripe();
        let cqe = depth.saturating_mul(2).saturating_mul(cfg.qps as u32);
        let hello = match read_msg(reader, peer, "waiting for Hello")? {
            Wire::Hello(h) => h,
            m => return Err(unexpected(peer, "Hello", &m)),
        };
        check_hello(&hello, &ring_cfg, cfg.qps, wiring)?;
        let remote_access = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
        let (devs, qps, endpoints) = match wiring {
            Wiring::Manual => {
                let devs = open_devices(cfg, cqe)?;
                for d in &devs {
                    check_msg_size(d, cfg, &ring_cfg)?;
                }
                let mut qps = Vec::with_capacity(cfg.qps);
                let mut endpoints = Vec::with_capacity(cfg.qps);
                for (q, ep) in hello.endpoints.iter().enumerate() {
                    let d = &devs[stripe.device_of(q)];
                    let mut qp =
                        d.builder(cfg, depth)
                            .build(&d.pd)
                            .map_err(TransportError::rdma(format!(
                                "{}: creating QP {q}",
                                d.ctx.name()
                            )))?;
                    post_recvs_init(&mut qp, q, depth, peer)?;
                    endpoints.push(qp.endpoint().map_err(TransportError::rdma(format!(
                        "{}: reading QP {q}'s endpoint",
                        d.ctx.name()
                    )))?);
                    let qp = qp.connect(ep).map_err(TransportError::rdma(format!(
                        "connecting QP {q} to the {peer}"
                    )))?;
                    qps.push(Arc::new(Mutex::new(qp)));
                }
                (devs, qps, endpoints)
            }
            Wiring::RdmaCm => {
                let ips = if cfg.cm_addrs.is_empty() {
                    cfg.devices
                        .iter()
                        .map(|name| {
                            let ctx = Context::open(name).map_err(TransportError::rdma(
                                format!("opening RDMA device {name}"),
                            ))?;
                            ipv4_of_gid(&ctx, cfg)
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
                side.send(&Wire::Listening {
                    addrs: addrs.clone(),
                })?;
                let groups = listeners.len().min(cfg.qps);
                let mut devs: Vec<Option<Dev>> = (0..groups).map(|_| None).collect();
                let mut qps = Vec::with_capacity(cfg.qps);
                for q in 0..cfg.qps {
                    let g = q % groups;
                    let req =
                        listeners[g]
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
                    if devs[g].is_none() {
                        let d = Dev::new(Arc::clone(req.context()), cqe)?;
                        check_msg_size(&d, cfg, &ring_cfg)?;
                        devs[g] = Some(d);
                    }
                    let d = devs[g]
                        .as_ref()
                        .ok_or_else(|| TransportError::Protocol("device group vanished".into()))?;
                    let mut qp = req
                        .accept(&d.pd, &d.builder(cfg, depth), &[], cfg.timeout)
                        .map_err(TransportError::rdma(format!(
                            "rdma_cm: accepting QP {q} from the {peer}"
                        )))?;
                    post_recvs(&mut qp, q, depth, peer)?;
                    qps.push(Arc::new(Mutex::new(qp)));
                }
                let devs = devs
                    .into_iter()
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| TransportError::Protocol("a device group has no QP".into()))?;
                (devs, qps, Vec::new())
            }
        };
        let mrs = devs
            .iter()
            .map(|d| register_ring(&d.pd, ring, remote_access))
            .collect::<Result<Vec<_>, _>>()?;
        let slots = mrs
            .iter()
            .map(|v| v.iter().map(|m| m.remote()).collect())
            .collect();
        side.send(&Wire::Welcome(ReceiverWelcome {
            ring: ring_cfg,
            devices: devs.iter().map(|d| d.ctx.name().to_string()).collect(),
            endpoints,
            slots,
        }))?;
        let credit = match read_msg(reader, peer, "waiting for Ready")? {
            Wire::Ready { credit } => credit,
            m => return Err(unexpected(peer, "Ready", &m)),
        };
        if credit.len < 8 {
            return Err(TransportError::Protocol(format!(
                "the {peer}'s credit word is {} bytes; 8 expected",
                credit.len
            )));
        }
        Ok((devs, qps, mrs, credit))
    }

    /// Queue pairs in use.
    pub fn qps(&self) -> usize {
        self.qps.len()
    }

    /// Names of the local devices in use.
    pub fn devices(&self) -> Vec<String> {
        self.devs.iter().map(|d| d.ctx.name().to_string()).collect()
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
        self.next = g + 1;
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

fn receiver_side_reader(
    mut reader: BufReader<TcpStream>,
    shared: &Shared,
    tx: &mpsc::Sender<Event>,
    peer: &str,
) {
    let mut line = String::new();
    loop {
        line.clear();
        let err = match reader.read_line(&mut line) {
            Ok(0) => TransportError::Closed(format!(
                "the {peer} closed the side channel (process exited or connection lost)"
            )),
            Err(e) => TransportError::Io {
                context: format!("side channel to the {peer}"),
                source: e,
            },
            Ok(_) => match Wire::from_line(&line) {
                Ok(Wire::End { chunks, bytes }) => {
                    if tx
                        .send(Event::End(TransferSummary { chunks, bytes }))
                        .is_err()
                    {
                        return;
                    }
                    continue;
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
    tx: &mpsc::Sender<Event>,
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
                        if tx
                            .send(Event::Data {
                                imm,
                                len: c.byte_len,
                                qp: q,
                            })
                            .is_err()
                        {
                            return;
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
    tx: &mpsc::Sender<Event>,
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
    loop {
        if shared.stopping() {
            return;
        }
        let mut got = Vec::new();
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
        shared.lock().credits.extend(got);
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
        self.base = self.next;
        self.bytes = 0;
        self.end = None;
        self.shared.lock().busy = true;
        Ok(())
    }

    fn next_chunk(
        &mut self,
        _ring: &Arc<StagingRing>,
    ) -> Result<Option<(Chunk, SlotToken)>, TransportError> {
        let slots = self.ring.slots() as u64;
        let chunk_bytes = self.ring.chunk_bytes();
        let deadline = Instant::now() + self.cfg.timeout;
        loop {
            if let Some(len) = self.pending.remove(&self.next) {
                let g = self.next;
                return self.deliver(g, len).map(Some);
            }
            if let Some(end) = self.end {
                let got = self.next - self.base;
                if got >= end.chunks {
                    self.end = None;
                    let summary = TransferSummary {
                        chunks: got,
                        bytes: self.bytes,
                    };
                    self.base = self.next;
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
            let ev = match self.events.recv_timeout(left) {
                Ok(ev) => ev,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    return Err(TransportError::Timeout {
                        after: self.cfg.timeout,
                        waiting_for: format!(
                            "for chunk {} from the {}",
                            self.next - self.base,
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
                Event::Data { imm, len, qp } => {
                    let g = decode_imm(imm, self.next, slots)?;
                    let len = len as usize;
                    if len == 0 || len > chunk_bytes {
                        return Err(TransportError::Protocol(format!(
                            "chunk #{g} on QP {qp} reports {len} bytes; expected 1..={chunk_bytes} \
                             (does this RDMA provider fill byte_len for WRITE_WITH_IMM?)"
                        )));
                    }
                    if self.pending.insert(g, len).is_some() {
                        return Err(TransportError::Protocol(format!(
                            "chunk #{g} arrived twice"
                        )));
                    }
                }
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
        self.qps.clear();
        // Slots granted as credits for chunks never handed to the pipeline go back, now that no QP
        // can let the peer write into them.
        let credits = std::mem::take(&mut self.shared.lock().credits);
        drop(credits);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::MIB;

    fn ring(slots: usize) -> RingConfig {
        RingConfig::new(MIB, slots).unwrap()
    }

    #[test]
    fn config_validation_names_the_field() {
        let e = RdmaConfig::default().validate().unwrap_err().to_string();
        assert!(e.contains("devices") && e.contains("erdma_0"), "{e}");
        let mut c = RdmaConfig::new(["erdma_0", "erdma_1"]);
        c.validate().unwrap();
        c.qps = 1;
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("qps") && e.contains("at least 2"), "{e}");
        c.qps = MAX_QPS + 1;
        assert!(c.validate().unwrap_err().to_string().contains("1..=64"));
        let c = RdmaConfig::new(["a", "a"]);
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("listed twice")
        );
        let mut c = RdmaConfig::new(["rxe0"]);
        c.timeout = Duration::ZERO;
        assert!(c.validate().unwrap_err().to_string().contains("timeout"));
        let mut c = RdmaConfig::new(["rxe0"]);
        c.cm_addrs = vec!["10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap()];
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("one address per device")
        );
        let mut c = RdmaConfig::new(["rxe0"]);
        c.port = 0;
        assert!(c.validate().is_err());
    }

    #[test]
    fn stripe_alternates_devices_and_covers_every_qp() {
        let mut c = RdmaConfig::new(["erdma_0", "erdma_1"]);
        c.qps = 4;
        let s = c.stripe();
        let qps: Vec<usize> = (0..8).map(|g| s.qp_of(g)).collect();
        assert_eq!(qps, [0, 1, 2, 3, 0, 1, 2, 3]);
        let devs: Vec<usize> = (0..8).map(|g| s.device_of(s.qp_of(g))).collect();
        assert_eq!(
            devs,
            [0, 1, 0, 1, 0, 1, 0, 1],
            "consecutive chunks alternate NICs"
        );
        assert_eq!(s.qps_on(0), [0, 2]);
        assert_eq!(s.qps_on(1), [1, 3]);
        let one = RdmaConfig::new(["rxe0"]).stripe();
        assert_eq!(one.qps_on(0), [0, 1]);
        assert_eq!(one.device_of(1), 0);
    }

    #[test]
    fn immediate_round_trips_across_wraparound() {
        for next in [
            0u64,
            5,
            (1 << 32) - 2,
            (1 << 32) + 7,
            u64::from(u32::MAX) * 3,
        ] {
            for ahead in 0..8u64 {
                let g = next + ahead;
                assert_eq!(
                    decode_imm(encode_imm(g), next, 8).unwrap(),
                    g,
                    "next {next} ahead {ahead}"
                );
            }
            // Outside the window (no credit for it, or a stale chunk): refused.
            assert!(decode_imm(encode_imm(next + 8), next, 8).is_err());
            if next > 0 {
                let e = decode_imm(encode_imm(next - 1), next, 8)
                    .unwrap_err()
                    .to_string();
                assert!(e.contains("without a credit"), "{e}");
            }
        }
    }

    #[test]
    fn credits_advance_monotonically_across_wraparound() {
        assert_eq!(advance_credit(0, 8).unwrap(), 8);
        assert_eq!(
            advance_credit(8, 8).unwrap(),
            8,
            "a repeated credit changes nothing"
        );
        let near = u64::from(u32::MAX) - 1;
        assert_eq!(advance_credit(near, 3).unwrap(), near + 5);
        assert!(advance_credit(100, 50).is_err(), "credits never go back");
    }

    #[test]
    fn wire_messages_round_trip_as_json_lines() {
        let ep = Endpoint {
            qpn: 17,
            psn: 0x123,
            gid: "::ffff:10.99.0.1".parse().unwrap(),
            gid_index: 1,
            lid: 0,
            mtu: 1024,
        };
        let buf = RemoteBuf {
            addr: 0x7f00_0000_1000,
            len: MIB as u64,
            rkey: 0xabc,
        };
        let msgs = vec![
            Wire::Hello(SenderHello {
                version: PROTOCOL_VERSION,
                ring: ring(4),
                qps: 2,
                devices: vec!["rxe0".into()],
                wiring: Wiring::Manual,
                endpoints: vec![ep, ep],
            }),
            Wire::Listening {
                addrs: vec!["10.99.0.1:4791".parse().unwrap()],
            },
            Wire::Welcome(ReceiverWelcome {
                ring: ring(4),
                devices: vec!["rxe0".into()],
                endpoints: vec![ep],
                slots: vec![vec![buf; 4]],
            }),
            Wire::Ready { credit: buf },
            Wire::End {
                chunks: 3,
                bytes: 2 * MIB as u64 + 1,
            },
            Wire::Ack {
                chunks: 3,
                bytes: 2 * MIB as u64 + 1,
            },
            Wire::Abort {
                reason: "line\nbreak".into(),
            },
        ];
        for m in msgs {
            let line = m.to_line().unwrap();
            assert!(
                line.ends_with('\n') && line.matches('\n').count() == 1,
                "{line}"
            );
            assert_eq!(Wire::from_line(&line).unwrap(), m);
        }
        let e = Wire::from_line("{\"type\":\"nonsense\"}")
            .unwrap_err()
            .to_string();
        assert!(e.contains("same version"), "{e}");
    }

    fn hello(ring_cfg: RingConfig) -> SenderHello {
        SenderHello {
            version: PROTOCOL_VERSION,
            ring: ring_cfg,
            qps: 2,
            devices: vec!["rxe0".into()],
            wiring: Wiring::Manual,
            endpoints: vec![
                Endpoint {
                    qpn: 1,
                    psn: 1,
                    gid: Default::default(),
                    gid_index: 1,
                    lid: 0,
                    mtu: 1024
                };
                2
            ],
        }
    }

    #[test]
    fn handshake_mismatches_are_reported_with_both_values() {
        check_hello(&hello(ring(4)), &ring(4), 2, Wiring::Manual).unwrap();
        let e = check_hello(
            &hello(RingConfig::new(4 * MIB, 4).unwrap()),
            &ring(4),
            2,
            Wiring::Manual,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("4194304 B × 4 slots")
                && e.contains("1048576 B × 4 slots")
                && e.contains("--chunk"),
            "{e}"
        );
        let e = check_hello(&hello(ring(8)), &ring(4), 2, Wiring::Manual)
            .unwrap_err()
            .to_string();
        assert!(e.contains("8 slots") && e.contains("--slots"), "{e}");
        let e = check_hello(&hello(ring(4)), &ring(4), 3, Wiring::Manual)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("opens 2 queue pairs") && e.contains("expects 3"),
            "{e}"
        );
        let e = check_hello(&hello(ring(4)), &ring(4), 2, Wiring::RdmaCm)
            .unwrap_err()
            .to_string();
        assert!(e.contains("Manual") && e.contains("RdmaCm"), "{e}");
        let mut h = hello(ring(4));
        h.version = PROTOCOL_VERSION + 1;
        assert!(
            check_hello(&h, &ring(4), 2, Wiring::Manual)
                .unwrap_err()
                .to_string()
                .contains("protocol version")
        );
        let mut h = hello(ring(4));
        h.endpoints.pop();
        assert!(
            check_hello(&h, &ring(4), 2, Wiring::Manual)
                .unwrap_err()
                .to_string()
                .contains("1 endpoints")
        );
    }

    #[test]
    fn welcome_is_checked() {
        let buf = RemoteBuf {
            addr: 0x1000,
            len: MIB as u64,
            rkey: 1,
        };
        let w = ReceiverWelcome {
            ring: ring(2),
            devices: vec!["rxe0".into()],
            endpoints: vec![],
            slots: vec![vec![buf; 2]],
        };
        check_welcome(&w, &ring(2), 2, Wiring::RdmaCm).unwrap();
        assert!(
            check_welcome(&w, &ring(2), 2, Wiring::Manual)
                .unwrap_err()
                .to_string()
                .contains("0 endpoints")
        );
        let mut short = w.clone();
        short.slots[0][1].len = 100;
        assert!(
            check_welcome(&short, &ring(2), 2, Wiring::RdmaCm)
                .unwrap_err()
                .to_string()
                .contains("100-byte slot")
        );
        let mut few = w.clone();
        few.slots[0].pop();
        assert!(
            check_welcome(&few, &ring(2), 2, Wiring::RdmaCm)
                .unwrap_err()
                .to_string()
                .contains("1 entries")
        );
        assert!(check_welcome(&w, &ring(3), 2, Wiring::RdmaCm).is_err());
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
