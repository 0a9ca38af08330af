//! What a benchmark reports ([`BenchResult`]) and how its verdict is reached: every iteration's
//! received data against the checksum of what was sent.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::config::{Backend, BenchConfig};
use crate::checksum::checksum;
use crate::device::Device;
use crate::error::StageError;

/// One measured configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BenchResult {
    /// `inprocess`, `tcp`, `pinned_d2h` or `pinned_h2d`.
    pub name: String,
    /// Backend used.
    pub backend: Backend,
    /// Bytes per transfer.
    pub bytes: u64,
    /// Chunk size (pipelines only).
    pub chunk_bytes: Option<usize>,
    /// Ring buffers (pipelines only).
    pub slots: Option<usize>,
    /// TCP connections (TCP only).
    pub connections: Option<usize>,
    /// Devices involved, described.
    pub devices: Vec<String>,
    /// Seconds per timed iteration.
    pub seconds: Vec<f64>,
    /// Best throughput, GiB/s.
    pub gib_s_best: f64,
    /// Median throughput, GiB/s.
    pub gib_s_median: f64,
    /// Every iteration's data matched the source checksum (`verified_iterations` covers the warmup
    /// and the timed iterations).
    pub verified: bool,
    /// Iterations (warmup included) whose received data matched the source checksum.
    #[serde(default)]
    pub verified_iterations: usize,
    /// Checksum of the source data (hex).
    pub checksum: String,
    /// When the run ended (seconds since the Unix epoch).
    pub unix_time: u64,
}

fn gib_s(bytes: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        bytes as f64 / secs / (1u64 << 30) as f64
    } else {
        0.0
    }
}

pub(super) fn summarise(
    name: &str,
    cfg: &BenchConfig,
    devices: Vec<String>,
    seconds: Vec<f64>,
    sum: u64,
    verified_iterations: usize,
) -> BenchResult {
    let bytes = cfg.bytes as u64;
    let mut rates: Vec<f64> = seconds.iter().map(|s| gib_s(bytes, *s)).collect();
    rates.sort_by(|a, b| a.total_cmp(b));
    let best = rates.last().copied().unwrap_or(0.0);
    let median = if rates.is_empty() {
        0.0
    } else {
        rates[rates.len() / 2]
    };
    BenchResult {
        name: name.into(),
        backend: cfg.backend,
        bytes,
        chunk_bytes: None,
        slots: None,
        connections: None,
        devices,
        seconds,
        gib_s_best: best,
        gib_s_median: median,
        verified: verified_iterations == cfg.warmup + cfg.iterations,
        verified_iterations,
        checksum: format!("{sum:016x}"),
        unix_time: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
    }
}

/// Whether `mem` holds data with checksum `want`. A mismatch is not an error: the run goes on and
/// reports fewer verified iterations (and `verified: false`); it is logged with both checksums.
pub(super) fn verify<D: Device>(
    dev: &D,
    mem: &D::Memory,
    want: u64,
    what: &str,
) -> Result<bool, StageError> {
    Ok(matches_checksum(&dev.download(mem)?, want, what))
}

pub(super) fn matches_checksum(data: &[u8], want: u64, what: &str) -> bool {
    let got = checksum(data);
    if got != want {
        tracing::warn!(
            "{what}: checksum {got:016x} of the received data differs from the source's {want:016x}"
        );
    }
    got == want
}
