//! The bandwidth a cluster should reach: a small model of the GPU→GPU rate from what a profile
//! knows (NICs, line rate, GPUDirect, PCIe generation) and what was measured on the nodes
//! (NIC WRITE bandwidth, pinned host copies), and the judgement of a measured figure against it.
//!
//! Model, in GiB/s:
//! - GPUDirect RDMA on: `NIC line rate × NICs used × 0.9` (the NIC reads GPU memory directly;
//!   0.9 is what RDMA WRITE keeps of the line rate after headers and flow control).
//! - Staged through host memory (GPUDirect off, eRDMA): the lowest of the host copy rate (the
//!   measured pinned device-to-host copy, else the PCIe link × 0.85), the NIC rate (the measured
//!   NIC WRITE bandwidth per NIC, else line rate × 0.9, times the NICs used) and what one staging
//!   stream sustains (only when measured: it depends on the implementation, not the hardware).
//! - One NIC between host buffers (perftest, [`expect_nic`]): `line rate × 0.9`.
//!
//! "Of one NIC" compares with the effective rate of one NIC (measured WRITE, else 0.9 × line
//! rate); "of the node" with the raw line rate of all the node's NICs. Seed 000's figures are
//! the check: NCCL at 11.8 GiB/s over one of two 190 Gb/s eRDMA NICs whose WRITE reaches
//! 20.4 GiB/s is 58 % of one NIC and 27 % of the node.

use serde::{Deserialize, Serialize};

use crate::error::{ProbeError, Result};
use crate::units::GIB;
use crate::verdict::{Check, Verdict};

/// Fraction of the line rate RDMA WRITE keeps (headers, ACKs, flow control).
pub const WIRE_EFFICIENCY: f64 = 0.9;
/// Fraction of the PCIe link a pinned host copy keeps (TLP headers, DMA engine turnaround).
pub const PCIE_COPY_EFFICIENCY: f64 = 0.85;
/// Default fraction of the expectation a run must reach for `ok`.
pub const DEFAULT_OK_FRACTION: f64 = 0.8;
/// Below this fraction of the expectation a run is `fail` (between the two: `warn`).
pub const FAIL_FRACTION: f64 = 0.4;

/// What the model needs: the profile's hardware facts and, when known, measured rates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExpectationInputs {
    /// Line rate of one NIC in Gb/s (decimal, as vendors quote it: 190 for an eRDMA NIC of
    /// ecs.ebmgn9gc, 400 for a ConnectX-7 port).
    pub nic_line_gbps: f64,
    /// RDMA NICs on the node.
    pub nics_per_node: u32,
    /// NICs the transfer spreads over (1 when NCCL_IB_HCA names one device).
    pub nics_used: u32,
    /// Whether GPUDirect RDMA is on (nvidia_peermem or DMA-BUF; never on eRDMA).
    pub gpudirect: bool,
    /// PCIe generation of the GPU's link (3 to 6).
    pub pcie_gen: u8,
    /// PCIe lanes of the GPU's link (16 for data-center GPUs).
    pub pcie_lanes: u8,
    /// Measured RDMA WRITE bandwidth of one NIC, GiB/s (perftest `ib_write_bw`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nic_write_gib_s: Option<f64>,
    /// Measured pinned device-to-host copy, GiB/s (overrides the PCIe model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_copy_gib_s: Option<f64>,
    /// Measured rate of one staging stream, GiB/s (NCCL's proxy or gpu-stage's ring).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_gib_s: Option<f64>,
}

/// Which path the model assumed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Path {
    /// The NIC reads and writes GPU memory.
    GpuDirect,
    /// GPU → pinned host buffer → NIC, and back on the other side.
    Staged,
    /// Host buffer → NIC → host buffer on one NIC (perftest `ib_write_bw`): the NIC alone, no
    /// GPU and no staging; from [`expect_nic`].
    Nic,
}

impl Path {
    /// How reports name the path.
    pub fn describe(self) -> &'static str {
        match self {
            Path::GpuDirect => "GPUDirect",
            Path::Staged => "staged through host memory",
            Path::Nic => "one NIC's RDMA WRITE, host memory to host memory",
        }
    }
}

/// The expected GPU→GPU rate and the figures it came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Expectation {
    /// The inputs, for printing next to every verdict.
    pub inputs: ExpectationInputs,
    /// GPUDirect or staged.
    pub path: Path,
    /// Expected rate, GiB/s.
    pub gib_s: f64,
    /// What bounds it (`NIC`, `host copy`, `staging stream`).
    pub limited_by: String,
    /// Effective rate of one NIC, GiB/s (measured WRITE, else line rate × 0.9).
    pub one_nic_gib_s: f64,
    /// Raw line rate of all the node's NICs, GiB/s.
    pub node_line_gib_s: f64,
    /// Host copy rate used, GiB/s (measured, else PCIe × 0.85); `None` for GPUDirect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_copy_gib_s: Option<f64>,
}

/// Gb/s (decimal) to GiB/s.
pub fn gbps_to_gib_s(gbps: f64) -> f64 {
    gbps * 1e9 / 8.0 / GIB
}

/// Raw per-direction bandwidth of one PCIe lane in GB/s after line encoding.
fn pcie_lane_gb_s(generation: u8) -> Option<f64> {
    match generation {
        3 => Some(0.985),
        4 => Some(1.969),
        5 => Some(3.938),
        6 => Some(7.563),
        _ => None,
    }
}

fn invalid(message: String) -> ProbeError {
    ProbeError::Invalid {
        path: "expectation inputs".into(),
        message,
    }
}

fn positive(what: &str, v: Option<f64>) -> Result<()> {
    match v {
        Some(x) if !(x.is_finite() && x > 0.0) => Err(invalid(format!(
            "{what} must be a positive number, got {x}"
        ))),
        _ => Ok(()),
    }
}

impl ExpectationInputs {
    /// One line with every input, printed next to each verdict.
    pub fn describe(&self) -> String {
        let measured = |v: Option<f64>, what: &str| match v {
            Some(x) => format!("{what} {x:.1} GiB/s measured"),
            None => format!("{what} not measured"),
        };
        format!(
            "{} NIC(s) × {} Gb/s per node, {} used; GPUDirect {}; PCIe Gen{} x{}; {}; {}; {}",
            self.nics_per_node,
            self.nic_line_gbps,
            self.nics_used,
            if self.gpudirect { "on" } else { "off" },
            self.pcie_gen,
            self.pcie_lanes,
            measured(self.nic_write_gib_s, "NIC WRITE"),
            measured(self.host_copy_gib_s, "pinned D2H"),
            measured(self.stream_gib_s, "staging stream"),
        )
    }
}

/// Compute the expected GPU→GPU rate.
pub fn expect(inputs: &ExpectationInputs) -> Result<Expectation> {
    let lane = validate(inputs)?;
    expect_validated(inputs, lane)
}

/// The rate one NIC's RDMA WRITE should reach between host buffers (what perftest's
/// `ib_write_bw` measures): line rate × [`WIRE_EFFICIENCY`]. A measured `nic_write_gib_s` in
/// the inputs is dropped (it is the figure being judged), and `nics_used` is 1.
pub fn expect_nic(inputs: &ExpectationInputs) -> Result<Expectation> {
    validate(inputs)?;
    let line = gbps_to_gib_s(inputs.nic_line_gbps);
    let one_nic = line * WIRE_EFFICIENCY;
    Ok(Expectation {
        inputs: ExpectationInputs {
            nics_used: 1,
            nic_write_gib_s: None,
            ..inputs.clone()
        },
        path: Path::Nic,
        gib_s: one_nic,
        limited_by: "NIC".into(),
        one_nic_gib_s: one_nic,
        node_line_gib_s: line * f64::from(inputs.nics_per_node),
        host_copy_gib_s: None,
    })
}

/// Check the inputs; the PCIe lane rate of their generation.
fn validate(inputs: &ExpectationInputs) -> Result<f64> {
    positive("nic_line_gbps", Some(inputs.nic_line_gbps))?;
    positive("nic_write_gib_s", inputs.nic_write_gib_s)?;
    positive("host_copy_gib_s", inputs.host_copy_gib_s)?;
    positive("stream_gib_s", inputs.stream_gib_s)?;
    if inputs.nics_per_node == 0 || inputs.nics_used == 0 {
        return Err(invalid(
            "nics_per_node and nics_used must be at least 1".into(),
        ));
    }
    if inputs.nics_used > inputs.nics_per_node {
        return Err(invalid(format!(
            "nics_used ({}) is more than nics_per_node ({})",
            inputs.nics_used, inputs.nics_per_node
        )));
    }
    let lane = pcie_lane_gb_s(inputs.pcie_gen)
        .ok_or_else(|| invalid(format!("unknown PCIe generation {}", inputs.pcie_gen)))?;
    if inputs.pcie_lanes == 0 {
        return Err(invalid("pcie_lanes must be at least 1".into()));
    }
    Ok(lane)
}

fn expect_validated(inputs: &ExpectationInputs, lane: f64) -> Result<Expectation> {
    let line = gbps_to_gib_s(inputs.nic_line_gbps);
    let one_nic = inputs.nic_write_gib_s.unwrap_or(line * WIRE_EFFICIENCY);
    let node_line = line * f64::from(inputs.nics_per_node);
    let used = f64::from(inputs.nics_used);
    if inputs.gpudirect {
        return Ok(Expectation {
            inputs: inputs.clone(),
            path: Path::GpuDirect,
            gib_s: line * used * WIRE_EFFICIENCY,
            limited_by: "NIC".into(),
            one_nic_gib_s: one_nic,
            node_line_gib_s: node_line,
            host_copy_gib_s: None,
        });
    }
    let pcie = lane * f64::from(inputs.pcie_lanes) * 1e9 / GIB * PCIE_COPY_EFFICIENCY;
    let host = inputs.host_copy_gib_s.unwrap_or(pcie);
    let mut bounds = vec![("NIC", one_nic * used), ("host copy", host)];
    if let Some(s) = inputs.stream_gib_s {
        bounds.push(("staging stream", s));
    }
    let (limited_by, gib_s) = bounds
        .into_iter()
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .unwrap_or(("NIC", one_nic * used));
    Ok(Expectation {
        inputs: inputs.clone(),
        path: Path::Staged,
        gib_s,
        limited_by: limited_by.into(),
        one_nic_gib_s: one_nic,
        node_line_gib_s: node_line,
        host_copy_gib_s: Some(host),
    })
}

/// A measured rate against the expectation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Judgement {
    /// What was measured, GiB/s.
    pub measured_gib_s: f64,
    /// What the model expects, GiB/s.
    pub expected_gib_s: f64,
    /// measured / expected.
    pub fraction: f64,
    /// measured / effective rate of one NIC.
    pub of_one_nic: f64,
    /// measured / raw line rate of the node's NICs.
    pub of_node: f64,
    /// `ok` from `ok_fraction` of the expectation, `warn` from 40 %, `fail` below.
    pub verdict: Verdict,
    /// One line: the figure, its fractions, and the model's inputs.
    pub summary: String,
    /// What to look at when the verdict is not ok.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
    /// The expectation judged against, with the model's inputs (for JSON readers).
    pub expectation: Expectation,
}

impl Judgement {
    /// The fractions in words: `58 % of one NIC, 27 % of the node`.
    pub fn fractions(&self) -> String {
        format!(
            "{} of one NIC, {} of the node",
            pct(self.of_one_nic),
            pct(self.of_node)
        )
    }
}

fn pct(f: f64) -> String {
    format!("{:.0} %", f * 100.0)
}

/// Judge `measured_gib_s` against `e`; `ok_fraction` of the expectation is `ok`.
pub fn judge(measured_gib_s: f64, e: &Expectation, ok_fraction: f64) -> Judgement {
    let m = if measured_gib_s.is_finite() {
        measured_gib_s.max(0.0)
    } else {
        0.0
    };
    // Clamped: an absurdly small expectation must not turn the fraction into infinity.
    let frac = |d: f64| if d > 0.0 { (m / d).min(f64::MAX) } else { 0.0 };
    let fraction = frac(e.gib_s);
    let verdict = if fraction >= ok_fraction {
        Verdict::Ok
    } else if fraction >= FAIL_FRACTION {
        Verdict::Warn
    } else {
        Verdict::Fail
    };
    let path = e.path.describe();
    let summary = format!(
        "{m:.1} GiB/s is {} of the expected {:.1} GiB/s ({path}, limited by the {}); {} of one NIC, {} of the node's {:.1} GiB/s line rate. Model inputs: {}",
        pct(fraction),
        e.gib_s,
        e.limited_by,
        pct(frac(e.one_nic_gib_s)),
        pct(frac(e.node_line_gib_s)),
        e.node_line_gib_s,
        e.inputs.describe(),
    );
    let fix = (verdict != Verdict::Ok).then(|| {
        const RDMA: &str = "Check that the run used RDMA (the counter receipt and `rdmakit doctor` on the \
             NCCL log), then the NIC count it spread over (NCCL_IB_HCA lists one device: only one NIC \
             carries it)";
        match e.path {
            Path::GpuDirect => format!("{RDMA}."),
            Path::Staged => format!(
                "{RDMA}; staged transfers also need overlapped copies (NCCL does this; a naive \
                 staging loop stays under 1 GiB/s)."
            ),
            Path::Nic => "Check the NIC on its own: port state and active speed (`ibv_devinfo -v`), \
                 MTU, the GID index perftest used (`-x`), the message size (`-s`, 1 MiB or more) and \
                 the QP count (`-q`); a loaded host or a virtualised NIC also stays below line rate."
                .to_string(),
        }
    });
    Judgement {
        measured_gib_s: m,
        expected_gib_s: e.gib_s,
        fraction,
        of_one_nic: frac(e.one_nic_gib_s),
        of_node: frac(e.node_line_gib_s),
        verdict,
        summary,
        fix,
        expectation: e.clone(),
    }
}

impl Judgement {
    /// As a report check (`subject` names the run).
    pub fn check(&self, subject: impl Into<String>) -> Check {
        let c = Check::new(
            "expected-bandwidth",
            subject,
            self.verdict,
            self.summary.clone(),
        );
        match &self.fix {
            Some(f) => c.with_fix(f.clone()),
            None => c,
        }
    }
}
