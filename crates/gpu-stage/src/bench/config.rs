//! What a benchmark measures ([`BenchConfig`]) and on which backend.

use serde::{Deserialize, Serialize};

use crate::config::RingConfig;
use crate::error::StageError;
use crate::transport::tcp::DEFAULT_CONNECTIONS;

/// Which backend a benchmark runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// GPUs through the CUDA driver.
    Cuda,
    /// The host-memory backend (no GPU needed; measures the pipeline's own overhead).
    Host,
}

/// What to measure.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BenchConfig {
    /// Bytes per transfer.
    pub bytes: usize,
    /// Ring geometry.
    pub ring: RingConfig,
    /// Untimed (but verified) transfers first.
    pub warmup: usize,
    /// Timed transfers.
    pub iterations: usize,
    /// Source GPU ordinal.
    pub src_device: usize,
    /// Destination GPU ordinal.
    pub dst_device: usize,
    /// Parallel TCP connections.
    pub connections: usize,
    /// Backend.
    pub backend: Backend,
    /// Seed of the test pattern.
    pub seed: u64,
    /// TCP: per-transfer checksums in END/ACK ([`crate::TcpOptions::checksum`]), to measure their cost.
    #[serde(default)]
    pub tcp_checksum: bool,
}

impl Default for BenchConfig {
    fn default() -> Self {
        BenchConfig {
            bytes: 512 << 20,
            ring: RingConfig::default(),
            warmup: 1,
            iterations: 5,
            src_device: 0,
            dst_device: 1,
            connections: DEFAULT_CONNECTIONS,
            backend: Backend::Cuda,
            seed: 0x5EED,
            tcp_checksum: false,
        }
    }
}

pub(super) fn check_cfg(cfg: &BenchConfig) -> Result<(), StageError> {
    cfg.ring.validate()?;
    if cfg.iterations == 0 {
        return Err(StageError::config(
            "iterations",
            0,
            "measure at least one iteration",
        ));
    }
    Ok(())
}
