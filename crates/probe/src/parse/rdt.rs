//! Output of the Ray Direct Transport demo (`rdt_nccl_demo.py`):
//!
//! ```text
//! producer node=c59e... gpu=NVIDIA RTX PRO 5000 72GB Blackwell
//! iter 1: 512 MiB -> cuda:0 in 43.5 ms (11.51 GiB/s), checksum OK
//! RDT over eRDMA: OK
//! ```

use serde::{Deserialize, Serialize};

use crate::error::ParseError;

/// Where an actor ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActorPlacement {
    /// Ray node id.
    pub node: String,
    /// GPU name.
    pub gpu: String,
}

/// One transfer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RdtIteration {
    /// Iteration number.
    pub iter: u32,
    /// Bytes transferred.
    pub bytes: u64,
    /// Size as printed (`512 MiB`).
    pub size: String,
    /// Destination device (`cuda:0`).
    pub device: String,
    /// Duration in milliseconds.
    pub time_ms: f64,
    /// Throughput in GiB/s as printed.
    pub gib_per_s: f64,
    /// Whether the checksum matched.
    pub checksum_ok: bool,
}

/// A parsed demo run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RdtRun {
    /// Producer placement.
    pub producer: Option<ActorPlacement>,
    /// Consumer placement.
    pub consumer: Option<ActorPlacement>,
    /// Iterations in order.
    pub iterations: Vec<RdtIteration>,
    /// The final `RDT over <transport>: OK|FAILED` line: transport name and whether it said OK.
    pub final_status: Option<(String, bool)>,
}

impl RdtRun {
    /// Mean GiB/s of the iterations after the first (the first includes communicator setup).
    pub fn steady_state_gib_per_s(&self) -> Option<f64> {
        let rest: Vec<f64> = self
            .iterations
            .iter()
            .filter(|i| i.iter > 0)
            .map(|i| i.gib_per_s)
            .collect();
        (!rest.is_empty()).then(|| rest.iter().sum::<f64>() / rest.len() as f64)
    }

    /// Whether the producer and consumer ran on different nodes (the point of the demo).
    pub fn cross_node(&self) -> Option<bool> {
        Some(self.producer.as_ref()?.node != self.consumer.as_ref()?.node)
    }

    /// Every checksum OK and the final line said OK.
    pub fn ok(&self) -> bool {
        !self.iterations.is_empty()
            && self.iterations.iter().all(|i| i.checksum_ok)
            && self.final_status.as_ref().is_some_and(|(_, ok)| *ok)
    }

    /// Bytes moved by all iterations.
    pub fn total_bytes(&self) -> u64 {
        self.iterations
            .iter()
            .map(|i| i.bytes)
            .fold(0u64, u64::saturating_add)
    }
}

fn placement(rest: &str) -> Option<ActorPlacement> {
    let node_at = rest.find("node=")?;
    let gpu_at = rest.find("gpu=")?;
    let node = rest[node_at + 5..]
        .split_whitespace()
        .next()
        .unwrap_or("")
        .to_string();
    let gpu = rest[gpu_at + 4..].trim().to_string();
    Some(ActorPlacement { node, gpu })
}

fn parse_iter(line: &str) -> Option<RdtIteration> {
    // iter 1: 512 MiB -> cuda:0 in 43.5 ms (11.51 GiB/s), checksum OK
    let rest = line.strip_prefix("iter ")?;
    let (num, rest) = rest.split_once(':')?;
    let iter = num.trim().parse().ok()?;
    let (size, rest) = rest.split_once("->")?;
    let size = size.trim();
    let mut st = size.split_whitespace();
    let bytes = super::parse_size(st.next()?, st.next().unwrap_or("B"))?;
    let (device, rest) = rest.trim().split_once(" in ")?;
    let (time, rest) = rest.split_once("ms")?;
    let time_ms: f64 = time.trim().parse().ok()?;
    let open = rest.find('(')?;
    let close = rest.find("GiB/s")?;
    let gib_per_s: f64 = rest.get(open + 1..close)?.trim().parse().ok()?;
    let checksum_ok = rest
        .split_once("checksum")
        .map(|(_, s)| s.trim().starts_with("OK"))
        .unwrap_or(false);
    Some(RdtIteration {
        iter,
        bytes,
        size: size.to_string(),
        device: device.trim().to_string(),
        time_ms,
        gib_per_s,
        checksum_ok,
    })
}

/// Parse the demo's output; other lines (Ray logs, NCCL INFO) are ignored.
pub fn parse_rdt(text: &str) -> Result<RdtRun, ParseError> {
    let mut run = RdtRun::default();
    for raw in text.lines() {
        // Ray prefixes actor output with `(Producer pid=123, ip=...)`.
        let line = match raw.trim().strip_prefix('(') {
            Some(r) => r.split_once(") ").map(|(_, l)| l).unwrap_or(raw).trim(),
            None => raw.trim(),
        };
        if let Some(rest) = line.strip_prefix("producer ") {
            run.producer = placement(rest).or(run.producer);
        } else if let Some(rest) = line.strip_prefix("consumer ") {
            run.consumer = placement(rest).or(run.consumer);
        } else if line.starts_with("iter ") {
            if let Some(it) = parse_iter(line) {
                run.iterations.push(it);
            }
        } else if let Some(rest) = line.strip_prefix("RDT over ")
            && let Some((transport, status)) = rest.split_once(':')
        {
            run.final_status = Some((
                transport.trim().to_string(),
                status.trim().eq_ignore_ascii_case("OK"),
            ));
        }
    }
    if run.iterations.is_empty() && run.final_status.is_none() {
        return Err(ParseError::new(
            "rdt-demo",
            None,
            "no `iter N: <size> -> cuda:N in <t> ms (<x> GiB/s), checksum OK` lines and no \
             `RDT over <transport>: OK` line; pass the output of `python rdt_nccl_demo.py`",
        ));
    }
    Ok(run)
}
