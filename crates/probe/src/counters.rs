//! RDMA traffic counters: snapshot before and after a run, diff, and decide whether the bytes
//! of that run crossed the RDMA device — the only reliable proof, because NCCL silently falls
//! back to TCP when RDMA is unusable.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{ProbeError, Result};
use crate::facts::rdma::DeviceKind;
use crate::sysfs::{list_dir, parse_u64, read_opt, under};
use crate::units::{gib3, human_bytes};
use crate::verdict::Verdict;

/// Direction of a counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Sent.
    Tx,
    /// Received.
    Rx,
}

/// One way a driver counts traffic in one direction: the files (relative to `ports/<n>/`) are
/// summed and multiplied by `unit` (bytes per count; 1 for packet counters).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CounterSource {
    /// Direction.
    pub dir: Direction,
    /// Files summed (irdma splits IPv4 and IPv6).
    pub files: &'static [&'static str],
    /// Bytes per count (mlx5's PMA `port_*_data` counts 4-byte words).
    pub unit: u64,
}

const fn src(dir: Direction, files: &'static [&'static str], unit: u64) -> CounterSource {
    CounterSource { dir, files, unit }
}

use Direction::{Rx, Tx};

/// The IB PMA counters most drivers implement (mlx5, and others through `process_mad`).
const PMA_BYTES: [CounterSource; 2] = [
    src(Tx, &["counters/port_xmit_data"], 4),
    src(Rx, &["counters/port_rcv_data"], 4),
];

/// Byte counters per driver family, best first; per direction the first source whose files all
/// exist wins. Names differ between driver versions, hence the alternatives.
pub fn byte_sources(kind: DeviceKind) -> &'static [CounterSource] {
    const ERDMA: &[CounterSource] = &[
        src(Tx, &["hw_counters/hw_tx_bytes_cnt"], 1),
        src(Rx, &["hw_counters/hw_rx_bytes_cnt"], 1),
    ];
    // EFA (drivers/infiniband/hw/efa/efa_verbs.c): `tx_bytes`/`rx_bytes` since the first stats
    // (kernel 5.x; under ports/1 in every version, the device-level copy went away when port and
    // device stats were split); `rdma_write_bytes`/`rdma_write_recv_bytes` were added to the
    // port stats later and are used only when the basic ones are missing.
    const EFA: &[CounterSource] = &[
        src(Tx, &["hw_counters/tx_bytes"], 1),
        src(Rx, &["hw_counters/rx_bytes"], 1),
        src(Tx, &["hw_counters/rdma_write_bytes"], 1),
        src(Rx, &["hw_counters/rdma_write_recv_bytes"], 1),
    ];
    // bnxt_re (drivers/infiniband/hw/bnxt_re/hw_counters.c): `*_roce_only_bytes` (RoCE traffic
    // only, from the extended stats of newer chips and kernels), `tx_bytes`/`rx_bytes`
    // (function-level) otherwise; PMA last.
    const BNXT: &[CounterSource] = &[
        src(Tx, &["hw_counters/tx_roce_only_bytes"], 1),
        src(Rx, &["hw_counters/rx_roce_only_bytes"], 1),
        src(Tx, &["hw_counters/tx_bytes"], 1),
        src(Rx, &["hw_counters/rx_bytes"], 1),
        PMA_BYTES[0],
        PMA_BYTES[1],
    ];
    // irdma (RoCE v2 and iWARP over IP; i40iw used the same names): IP octets, headers
    // included, IPv4 and IPv6 summed.
    const IRDMA: &[CounterSource] = &[
        src(
            Tx,
            &["hw_counters/ip4OutOctets", "hw_counters/ip6OutOctets"],
            1,
        ),
        src(
            Rx,
            &["hw_counters/ip4InOctets", "hw_counters/ip6InOctets"],
            1,
        ),
        src(Tx, &["hw_counters/ip4OutOctets"], 1),
        src(Rx, &["hw_counters/ip4InOctets"], 1),
        PMA_BYTES[0],
        PMA_BYTES[1],
    ];
    // rxe: packet counters only in released kernels; the 2026 series "RDMA/rxe: support perf
    // mgmt GET method" (linux-rdma, v5) adds `hw_counters/sent_bytes` / `rcvd_bytes` and the
    // PMA counters (`port_xmit_data` = bytes >> 2). Used when present, else the packet estimate.
    const RXE: &[CounterSource] = &[
        src(Tx, &["hw_counters/sent_bytes"], 1),
        src(Rx, &["hw_counters/rcvd_bytes"], 1),
        PMA_BYTES[0],
        PMA_BYTES[1],
    ];
    const NONE: &[CounterSource] = &[];
    match kind {
        DeviceKind::Erdma => ERDMA,
        DeviceKind::Efa => EFA,
        DeviceKind::BnxtRe => BNXT,
        DeviceKind::Irdma => IRDMA,
        DeviceKind::Mlx5 | DeviceKind::Other => &PMA_BYTES,
        DeviceKind::Rxe => RXE,
        DeviceKind::Siw => NONE,
    }
}

/// Packet counters per driver family, best first (the same rule as [`byte_sources`]).
pub fn packet_sources(kind: DeviceKind) -> &'static [CounterSource] {
    const ERDMA: &[CounterSource] = &[
        src(Tx, &["hw_counters/hw_tx_packets_cnt"], 1),
        src(Rx, &["hw_counters/hw_rx_packets_cnt"], 1),
    ];
    const RXE: &[CounterSource] = &[
        src(Tx, &["hw_counters/sent_pkts"], 1),
        src(Rx, &["hw_counters/rcvd_pkts"], 1),
    ];
    const EFA: &[CounterSource] = &[
        src(Tx, &["hw_counters/tx_pkts"], 1),
        src(Rx, &["hw_counters/rx_pkts"], 1),
    ];
    const BNXT: &[CounterSource] = &[
        src(Tx, &["hw_counters/tx_roce_only_pkts"], 1),
        src(Rx, &["hw_counters/rx_roce_only_pkts"], 1),
        src(Tx, &["hw_counters/tx_pkts"], 1),
        src(Rx, &["hw_counters/rx_pkts"], 1),
    ];
    const IRDMA: &[CounterSource] = &[
        src(Tx, &["hw_counters/ip4OutPkts", "hw_counters/ip6OutPkts"], 1),
        src(Rx, &["hw_counters/ip4InPkts", "hw_counters/ip6InPkts"], 1),
        src(Tx, &["hw_counters/ip4OutPkts"], 1),
        src(Rx, &["hw_counters/ip4InPkts"], 1),
    ];
    const PMA: &[CounterSource] = &[
        src(Tx, &["counters/port_xmit_packets"], 1),
        src(Rx, &["counters/port_rcv_packets"], 1),
    ];
    match kind {
        DeviceKind::Erdma => ERDMA,
        // siw keeps no counters; the lookup simply finds none and the proof fails closed.
        DeviceKind::Rxe | DeviceKind::Siw => RXE,
        DeviceKind::Efa => EFA,
        DeviceKind::BnxtRe => BNXT,
        DeviceKind::Irdma => IRDMA,
        DeviceKind::Mlx5 | DeviceKind::Other => PMA,
    }
}

/// The first source of `dir` whose files all have a delta, summed and scaled.
fn measure(
    sources: &[CounterSource],
    dir: Direction,
    deltas: &BTreeMap<String, u64>,
) -> Option<u64> {
    sources.iter().filter(|s| s.dir == dir).find_map(|s| {
        let mut sum = 0u64;
        for f in s.files {
            sum = sum.saturating_add(*deltas.get(*f)?);
        }
        Some(sum.saturating_mul(s.unit))
    })
}

/// Largest RDMA payload per packet (4096-byte MTU); bounds a packet-count estimate from below.
pub const MAX_PAYLOAD_PER_PACKET: u64 = 4096;

/// All counters of one port at one moment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CounterSnapshot {
    /// Device name.
    pub device: String,
    /// Port number.
    pub port: u32,
    /// Driver family (decides which files count bytes).
    pub kind: DeviceKind,
    /// `hw_counters/<name>` and `counters/<name>` → raw value.
    pub values: BTreeMap<String, u64>,
}

/// Read every counter of `device` port `port` under `<root>/sys/class/infiniband`.
pub fn snapshot(root: &Path, device: &str, port: u32) -> Result<CounterSnapshot> {
    let class = under(root, "/sys/class/infiniband");
    let dev_dir = class.join(device);
    if !dev_dir.is_dir() {
        let found = list_dir(&class)?;
        return Err(ProbeError::NoSuchDevice {
            device: device.to_string(),
            root: class,
            found: if found.is_empty() {
                "none".into()
            } else {
                found.join(", ")
            },
        });
    }
    let vendor = read_opt(&dev_dir.join("device/vendor"))?
        .and_then(|s| parse_u64(&s))
        .and_then(|v| u32::try_from(v).ok());
    let dev_id = read_opt(&dev_dir.join("device/device"))?
        .and_then(|s| parse_u64(&s))
        .and_then(|v| u32::try_from(v).ok());
    let kind = DeviceKind::classify(device, vendor, dev_id);
    let port_dir = dev_dir.join("ports").join(port.to_string());
    let mut values = BTreeMap::new();
    for sub in ["hw_counters", "counters"] {
        let dir = port_dir.join(sub);
        for name in list_dir(&dir)? {
            if name == "lifespan" {
                continue;
            }
            if let Some(v) = read_opt(&dir.join(&name))?.as_deref().and_then(parse_u64) {
                values.insert(format!("{sub}/{name}"), v);
            }
        }
    }
    if values.is_empty() {
        return Err(ProbeError::NoCounters {
            device: device.to_string(),
            port,
            path: port_dir,
        });
    }
    Ok(CounterSnapshot {
        device: device.to_string(),
        port,
        kind,
        values,
    })
}

/// Snapshot every port of every device (for a before/after of a run whose device is unknown).
pub fn snapshot_all(root: &Path) -> Result<Vec<CounterSnapshot>> {
    let class = under(root, "/sys/class/infiniband");
    let mut out = Vec::new();
    for dev in list_dir(&class)? {
        for p in list_dir(&class.join(&dev).join("ports"))? {
            let Ok(port) = p.parse::<u32>() else { continue };
            match snapshot(root, &dev, port) {
                Ok(s) => out.push(s),
                Err(ProbeError::NoCounters { .. }) => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(out)
}

/// The difference between two snapshots of the same port.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CounterDelta {
    /// Device name.
    pub device: String,
    /// Port.
    pub port: u32,
    /// Driver family.
    pub kind: DeviceKind,
    /// Per-counter increase (counters that went backwards — reset or wrapped — are reported as 0
    /// and listed in `reset`).
    pub deltas: BTreeMap<String, u64>,
    /// Counters that decreased between the snapshots.
    pub reset: Vec<String>,
    /// Bytes sent, when the device has a byte counter.
    pub tx_bytes: Option<u64>,
    /// Bytes received, when the device has a byte counter.
    pub rx_bytes: Option<u64>,
    /// Packets sent.
    pub tx_packets: Option<u64>,
    /// Packets received.
    pub rx_packets: Option<u64>,
}

impl CounterDelta {
    /// Compute `after - before`.
    pub fn between(before: &CounterSnapshot, after: &CounterSnapshot) -> Result<Self> {
        if before.device != after.device || before.port != after.port {
            return Err(ProbeError::SnapshotMismatch(format!(
                "before is {} port {}, after is {} port {}",
                before.device, before.port, after.device, after.port
            )));
        }
        let mut deltas = BTreeMap::new();
        let mut reset = Vec::new();
        for (k, a) in &after.values {
            let Some(b) = before.values.get(k) else {
                continue;
            };
            if a < b {
                reset.push(k.clone());
                deltas.insert(k.clone(), 0);
            } else {
                deltas.insert(k.clone(), a - b);
            }
        }
        Ok(Self {
            device: after.device.clone(),
            port: after.port,
            kind: after.kind,
            tx_bytes: measure(byte_sources(after.kind), Tx, &deltas),
            rx_bytes: measure(byte_sources(after.kind), Rx, &deltas),
            tx_packets: measure(packet_sources(after.kind), Tx, &deltas),
            rx_packets: measure(packet_sources(after.kind), Rx, &deltas),
            deltas,
            reset,
        })
    }

    /// Bytes moved in the busier direction (a sender sees tx, a receiver rx).
    pub fn moved_bytes(&self) -> Option<u64> {
        match (self.tx_bytes, self.rx_bytes) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0).max(b.unwrap_or(0))),
        }
    }

    /// Packets moved in the busier direction.
    pub fn moved_packets(&self) -> Option<u64> {
        match (self.tx_packets, self.rx_packets) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0).max(b.unwrap_or(0))),
        }
    }
}

/// The transmit counter a vendor profile reads on every device of a glob (k8s-render's `Profile.devices`),
/// as workflows read it: `cat /sys/class/infiniband/<name_pattern>/<tx_counter>` summed per pod, without
/// the devices of `exclude` ([`CounterSpec::read_command`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CounterSpec {
    /// The device glob (`erdma_*`, `mlx5_*`; comma-separated globs are each read).
    pub name_pattern: String,
    /// Globs of devices the pattern matches but that carry no RDMA traffic of the run (a front-end NIC
    /// `mlx5_bond_*`): their counters are not read.
    pub exclude: Vec<String>,
    /// The counter file under the device (`ports/1/hw_counters/hw_tx_bytes_cnt`).
    pub tx_counter: String,
    /// What one unit of the counter is in bytes (4 for `port_xmit_data`'s 4-byte words).
    pub counter_multiplier: u64,
}

/// The delta of one summed counter over several pods (`before[i]` and `after[i]` read in pod `i`), as a
/// [`CounterDelta`] that [`prove`] and [`compare_ab`] judge. A pod whose counter went backwards (reset,
/// wrapped) adds nothing and is listed in `reset`.
pub fn summed_delta(spec: &CounterSpec, before: &[u64], after: &[u64]) -> Result<CounterDelta> {
    if before.len() != after.len() {
        return Err(ProbeError::SnapshotMismatch(format!(
            "{} reading(s) before but {} after: read the same pods both times",
            before.len(),
            after.len()
        )));
    }
    let kind = DeviceKind::classify(spec.name_pattern.trim_end_matches('*'), None, None);
    // `ports/1/hw_counters/hw_tx_bytes_cnt` -> `hw_counters/hw_tx_bytes_cnt`, the key of a snapshot.
    let key = spec
        .tx_counter
        .strip_prefix("ports/")
        .and_then(|r| r.split_once('/'))
        .map_or(spec.tx_counter.as_str(), |(_, rest)| rest)
        .to_owned();
    let mut raw = 0u64;
    let mut reset = Vec::new();
    for (i, (b, a)) in before.iter().zip(after).enumerate() {
        if a < b {
            reset.push(format!("{key} (pod {i})"));
        } else {
            raw = raw.saturating_add(a - b);
        }
    }
    let bytes = raw.saturating_mul(spec.counter_multiplier.max(1));
    let but = if spec.exclude.is_empty() {
        String::new()
    } else {
        format!(" but {}", spec.exclude.join(", "))
    };
    Ok(CounterDelta {
        device: format!("{}{but} on {} pod(s)", spec.name_pattern, before.len()),
        port: 1,
        kind,
        deltas: BTreeMap::from([(key, raw)]),
        reset,
        tx_bytes: Some(bytes),
        rx_bytes: None,
        tx_packets: None,
        rx_packets: None,
    })
}

/// How a traffic verdict was reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Basis {
    /// Byte counters (eRDMA `hw_*_bytes_cnt`, PMA `port_*_data` × 4).
    Bytes,
    /// Packet counters only (rxe): at most 4096 payload bytes per packet.
    PacketEstimate,
    /// No usable counter.
    None,
}

/// Default fraction of the expected bytes a run must show on the device to count as RDMA.
pub const DEFAULT_MIN_FRACTION: f64 = 0.9;

/// Whether a run of `expected_bytes` went over RDMA: the receipt. It fails closed: a device
/// without a usable counter, or a delta short of `min_fraction` of the bytes the application
/// says it moved, is a `fail` with the delta shown, never a pass.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrafficProof {
    /// Device name.
    pub device: String,
    /// Bytes the run moved between the two peers.
    pub expected_bytes: u64,
    /// Bytes the device counted (busier direction).
    pub measured_bytes: Option<u64>,
    /// Packets the device counted (busier direction).
    pub measured_packets: Option<u64>,
    /// How the decision was made.
    pub basis: Basis,
    /// Counted bytes over expected bytes (for the packet estimate: the most bytes the packets
    /// can carry over expected bytes). `None` without counters or for an empty run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fraction: Option<f64>,
    /// `ok` when the device carried the run, `fail` when it did not or cannot tell.
    pub verdict: Verdict,
    /// One line, in the runbook's terms (`eRDMA moved 1.530 GiB ...`).
    pub summary: String,
    /// What to do when the verdict is not ok.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

const FALLBACK_FIX: &str = "The counters did not see the run's bytes: NCCL (or UCX) most likely fell back to TCP. \
Run `rdmakit doctor` on the NCCL_DEBUG=INFO log and `rdmakit probe` in the worker (NCCL_IB_HCA, /dev/infiniband, \
memlock, the provider library), and make sure the counters are read on the node and device that carried the run.";

const NO_COUNTER_FIX: &str = "Prove the path another way: the NCCL log must show `NET/IB : Using` and no \
`NET/Socket`, and an `NCCL_IB_DISABLE=1` A/B run must be measurably slower; or read the counters of a device whose \
driver keeps them (see `rdmakit probe --counters`).";

fn percent(f: f64) -> String {
    format!("{:.0}%", f * 100.0)
}

/// Decide whether a run of `expected_bytes` went over the device of `delta`.
pub fn prove(delta: &CounterDelta, expected_bytes: u64, min_fraction: f64) -> TrafficProof {
    let min = (expected_bytes as f64 * min_fraction) as u64;
    let ratio = |got: u64| (expected_bytes > 0).then(|| got as f64 / expected_bytes as f64);
    let label = delta.kind.label();
    let (basis, verdict, fraction, summary) = if let Some(b) = delta.moved_bytes() {
        let v = if b >= min { Verdict::Ok } else { Verdict::Fail };
        let f = ratio(b);
        let s = format!(
            "{label} moved {} ({b} bytes) on {} port {} for a run of {}{}; {}",
            gib3(b),
            delta.device,
            delta.port,
            human_bytes(expected_bytes),
            f.map(|f| format!(" ({} of it, {} needed)", percent(f), percent(min_fraction)))
                .unwrap_or_default(),
            if v == Verdict::Ok {
                "the transfer went over RDMA"
            } else {
                "the transfer did not (fully) go over RDMA: suspect a silent TCP fallback"
            }
        );
        (Basis::Bytes, v, f, s)
    } else if let Some(p) = delta.moved_packets() {
        let min_pkts = min.div_ceil(MAX_PAYLOAD_PER_PACKET);
        let v = if p >= min_pkts {
            Verdict::Ok
        } else {
            Verdict::Fail
        };
        let s = format!(
            "{} port {} counted {p} packets (at least {min_pkts} needed for {} at ≤4096 B/packet); {}",
            delta.device,
            delta.port,
            human_bytes(expected_bytes),
            if v == Verdict::Ok {
                "consistent with the run going over RDMA"
            } else {
                "too few for the run: suspect a TCP fallback"
            }
        );
        let most = p.saturating_mul(MAX_PAYLOAD_PER_PACKET);
        (Basis::PacketEstimate, v, ratio(most), s)
    } else {
        let tried: Vec<&str> = byte_sources(delta.kind)
            .iter()
            .chain(packet_sources(delta.kind))
            .flat_map(|s| s.files.iter().copied())
            .collect();
        let tried = if tried.is_empty() {
            "none known for this driver".to_string()
        } else {
            tried.join(", ")
        };
        let s = format!(
            "{} port {} ({label}) has no byte or packet counter this probe can read (looked for: {tried}); \
             no receipt, so the run of {} is not proven to have gone over RDMA",
            delta.device,
            delta.port,
            human_bytes(expected_bytes),
        );
        (Basis::None, Verdict::Fail, None, s)
    };
    let fix = match (basis, verdict) {
        (_, Verdict::Ok) => None,
        (Basis::None, _) => Some(NO_COUNTER_FIX.to_string()),
        _ => Some(FALLBACK_FIX.to_string()),
    };
    TrafficProof {
        device: delta.device.clone(),
        expected_bytes,
        measured_bytes: delta.moved_bytes(),
        measured_packets: delta.moved_packets(),
        basis,
        fraction,
        verdict,
        summary,
        fix,
    }
}

/// The A/B comparison: the same run with RDMA and with `NCCL_IB_DISABLE=1`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AbComparison {
    /// Proof for the RDMA run.
    pub rdma_run: TrafficProof,
    /// Bytes the device counted during the TCP run.
    pub tcp_run_bytes: Option<u64>,
    /// Packets the device counted during the TCP run.
    pub tcp_run_packets: Option<u64>,
    /// `ok` when RDMA run moved the bytes and the TCP run left the device (nearly) idle.
    pub verdict: Verdict,
    /// Lines in the runbook's format.
    pub lines: Vec<String>,
    /// What to do when the verdict is not ok.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

/// Compare an RDMA run with a `NCCL_IB_DISABLE=1` run of the same size. The TCP run may leave
/// at most 1% of the expected bytes (and at most 64 MiB) on the device: other tenants of a
/// shared device and NCCL's own bootstrap make a tiny non-zero delta normal.
pub fn compare_ab(rdma: &CounterDelta, tcp: &CounterDelta, expected_bytes: u64) -> AbComparison {
    let proof = prove(rdma, expected_bytes, DEFAULT_MIN_FRACTION);
    let idle_limit = (expected_bytes / 100).min(64 << 20);
    let tcp_bytes = tcp.moved_bytes();
    let tcp_pkts = tcp.moved_packets();
    let tcp_idle = match (tcp_bytes, tcp_pkts) {
        (Some(b), _) => b <= idle_limit,
        (None, Some(p)) => p <= idle_limit.div_ceil(MAX_PAYLOAD_PER_PACKET),
        (None, None) => true,
    };
    let label = rdma.kind.label();
    let mut lines = Vec::new();
    match proof.measured_bytes {
        Some(b) => lines.push(format!("{label} tx during RDMA run: {}", gib3(b))),
        None => lines.push(format!(
            "{label} packets during RDMA run: {}",
            proof.measured_packets.unwrap_or(0)
        )),
    }
    match tcp_bytes {
        Some(b) => lines.push(format!("TCP-run {label} tx delta: {}", gib3(b))),
        None => lines.push(format!(
            "TCP-run {label} packet delta: {}",
            tcp_pkts.unwrap_or(0)
        )),
    }
    let (verdict, fix) = match (proof.verdict, tcp_idle) {
        _ if proof.basis == Basis::None => (Verdict::Fail, proof.fix.clone()),
        (Verdict::Ok, true) => (Verdict::Ok, None),
        (Verdict::Ok, false) => (
            Verdict::Warn,
            Some("The device also moved data during the NCCL_IB_DISABLE=1 run: another job shares the device, or the variable did not reach the workers (check `NCCL_IB_DISABLE set by environment to 1` in the NCCL log).".to_string()),
        ),
        _ => (
            Verdict::Fail,
            Some("The RDMA run did not move its bytes over the device: NCCL fell back to TCP. Run `rdmakit doctor` on the NCCL log (NCCL_DEBUG=INFO) and `rdmakit probe` in the worker: check NCCL_IB_HCA, /dev/infiniband, memlock and the provider library.".to_string()),
        ),
    };
    AbComparison {
        rdma_run: proof,
        tcp_run_bytes: tcp_bytes,
        tcp_run_packets: tcp_pkts,
        verdict,
        lines,
        fix,
    }
}
