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

/// Counter files (relative to `ports/<n>/`) that count bytes, with their unit in bytes.
/// mlx5's PMA `port_*_data` counters count 4-byte words.
pub fn byte_counter_names(kind: DeviceKind) -> &'static [(&'static str, Direction, u64)] {
    const ERDMA: &[(&str, Direction, u64)] = &[
        ("hw_counters/hw_tx_bytes_cnt", Direction::Tx, 1),
        ("hw_counters/hw_rx_bytes_cnt", Direction::Rx, 1),
    ];
    const PMA: &[(&str, Direction, u64)] = &[
        ("counters/port_xmit_data", Direction::Tx, 4),
        ("counters/port_rcv_data", Direction::Rx, 4),
    ];
    const NONE: &[(&str, Direction, u64)] = &[];
    match kind {
        DeviceKind::Erdma => ERDMA,
        DeviceKind::Mlx5 | DeviceKind::Irdma | DeviceKind::Other => PMA,
        DeviceKind::Rxe | DeviceKind::Siw => NONE,
    }
}

/// Counter files that count packets.
pub fn packet_counter_names(kind: DeviceKind) -> &'static [(&'static str, Direction)] {
    const ERDMA: &[(&str, Direction)] = &[
        ("hw_counters/hw_tx_packets_cnt", Direction::Tx),
        ("hw_counters/hw_rx_packets_cnt", Direction::Rx),
    ];
    const RXE: &[(&str, Direction)] = &[
        ("hw_counters/sent_pkts", Direction::Tx),
        ("hw_counters/rcvd_pkts", Direction::Rx),
    ];
    const PMA: &[(&str, Direction)] = &[
        ("counters/port_xmit_packets", Direction::Tx),
        ("counters/port_rcv_packets", Direction::Rx),
    ];
    match kind {
        DeviceKind::Erdma => ERDMA,
        DeviceKind::Rxe | DeviceKind::Siw => RXE,
        _ => PMA,
    }
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
        let bytes = |dir: Direction| {
            byte_counter_names(after.kind)
                .iter()
                .filter(|(_, d, _)| *d == dir)
                .find_map(|(name, _, mult)| deltas.get(*name).map(|v| v.saturating_mul(*mult)))
        };
        let pkts = |dir: Direction| {
            packet_counter_names(after.kind)
                .iter()
                .filter(|(_, d)| *d == dir)
                .find_map(|(name, _)| deltas.get(*name).copied())
        };
        Ok(Self {
            device: after.device.clone(),
            port: after.port,
            kind: after.kind,
            tx_bytes: bytes(Direction::Tx),
            rx_bytes: bytes(Direction::Rx),
            tx_packets: pkts(Direction::Tx),
            rx_packets: pkts(Direction::Rx),
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

/// Whether a run of `expected_bytes` went over RDMA.
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
    /// `ok` when the device carried the run, `fail` when it did not.
    pub verdict: Verdict,
    /// One line, in the runbook's terms (`eRDMA tx during run: 1.53 GiB`).
    pub summary: String,
}

/// Decide whether a run of `expected_bytes` went over the device of `delta`.
pub fn prove(delta: &CounterDelta, expected_bytes: u64, min_fraction: f64) -> TrafficProof {
    let min = (expected_bytes as f64 * min_fraction) as u64;
    let (basis, verdict, summary) = if let Some(b) = delta.moved_bytes() {
        let v = if b >= min { Verdict::Ok } else { Verdict::Fail };
        let s = format!(
            "{} moved {} ({} bytes) on {} port {} for a run of {}; {}",
            kind_label(delta.kind),
            gib3(b),
            b,
            delta.device,
            delta.port,
            human_bytes(expected_bytes),
            if v == Verdict::Ok {
                "the transfer went over RDMA"
            } else {
                "the transfer did not (fully) go over RDMA: suspect a silent TCP fallback"
            }
        );
        (Basis::Bytes, v, s)
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
        (Basis::PacketEstimate, v, s)
    } else {
        (
            Basis::None,
            Verdict::Warn,
            format!(
                "{} port {} has no byte or packet counter: cannot prove the path",
                delta.device, delta.port
            ),
        )
    };
    TrafficProof {
        device: delta.device.clone(),
        expected_bytes,
        measured_bytes: delta.moved_bytes(),
        measured_packets: delta.moved_packets(),
        basis,
        verdict,
        summary,
    }
}

fn kind_label(kind: DeviceKind) -> &'static str {
    match kind {
        DeviceKind::Erdma => "eRDMA",
        DeviceKind::Mlx5 => "mlx5",
        DeviceKind::Rxe => "rxe",
        DeviceKind::Siw => "siw",
        DeviceKind::Irdma => "irdma",
        DeviceKind::Other => "RDMA device",
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
    let label = kind_label(rdma.kind);
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
        (Verdict::Ok, true) => (Verdict::Ok, None),
        (Verdict::Ok, false) => (
            Verdict::Warn,
            Some("The device also moved data during the NCCL_IB_DISABLE=1 run: another job shares the device, or the variable did not reach the workers (check `NCCL_IB_DISABLE set by environment to 1` in the NCCL log).".to_string()),
        ),
        (Verdict::Warn, _) => (Verdict::Warn, Some("No usable counters on this device; compare NCCL logs (`NET/IB : Using` vs `NET/Socket`).".to_string())),
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
