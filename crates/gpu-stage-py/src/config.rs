//! Channel settings, read from the environment a RayCluster sets, with explicit overrides.
//!
//! | variable | meaning | default |
//! | --- | --- | --- |
//! | `RDMAKIT_TRANSPORT` | `tcp` or `rdma` | `tcp` |
//! | `RDMAKIT_BACKEND` | `auto`, `cuda` or `host` (ring memory: page-locked via CUDA, or heap) | `auto` |
//! | `RDMAKIT_CHUNK` | ring buffer size (`4MiB`, `8388608`, ≥ 1 MiB) | 4 MiB |
//! | `RDMAKIT_SLOTS` | ring buffers per direction (2–1024) | 8 |
//! | `RDMAKIT_TCP_CONNECTIONS` | parallel TCP connections per actor pair (1–64; the sender's count is used) | half the CPUs, 2–8 |
//! | `RDMAKIT_TIMEOUT_S` | bound on every blocking step (connect, accept, each chunk, the ACK) | 30 |
//! | `RDMAKIT_PINNED_POOL` | staging rings of all this process's sessions together (`1GiB`); a session that would pass it waits for a ring to come back | 1 GiB |
//! | `RDMAKIT_RDMA_DEVICES` | verbs devices to stripe over (`erdma_0,erdma_1`) | from `NCCL_IB_HCA` |
//! | `RDMAKIT_QPS` | RDMA queue pairs per actor pair | 2 per device |
//! | `RDMAKIT_GID_INDEX` | GID index for manual QP connection | `NCCL_IB_GID_INDEX`, else 1 |
//!
//! `NCCL_IB_HCA` is read in NCCL's own syntax (`mlx5_0:1,mlx5_1:1`, `=erdma_0`); an exclusion list
//! (`^mlx5_2`) names no devices to use and is refused with a message saying so.

use std::time::Duration;

use gpu_stage::{DEFAULT_CHUNK_BYTES, DEFAULT_SLOTS, RingConfig, parse_size};

use crate::error::BindError;

/// Which transport moves the chunks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransportKind {
    /// gpu-stage's TCP transport (N connections).
    Tcp,
    /// gpu-stage's RDMA transport (needs the `rdma` feature and verbs devices).
    Rdma,
}

/// Where the staging ring lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RingBackend {
    /// Page-locked through CUDA when a driver and a GPU are present, heap memory otherwise.
    Auto,
    /// Page-locked through CUDA (an error without a driver).
    Cuda,
    /// Page-aligned heap memory (CPU-only actors, CI).
    Host,
}

/// Everything a channel (one direction of one actor pair) needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChannelConfig {
    /// TCP or RDMA.
    pub transport: TransportKind,
    /// Ring memory.
    pub backend: RingBackend,
    /// Ring geometry.
    pub ring: RingConfig,
    /// TCP connections per pair.
    pub connections: usize,
    /// Bound on every blocking step.
    pub timeout: Duration,
    /// RDMA devices.
    pub rdma_devices: Vec<String>,
    /// RDMA queue pairs.
    pub qps: usize,
    /// GID index (manual connection).
    pub gid_index: u32,
    /// Bound on the bytes of every staging ring of the process (see [`crate::pool`]).
    pub pool_bytes: u64,
}

/// Default bound on the process's staging rings: 32 rings of the default 32 MiB.
pub const DEFAULT_POOL_BYTES: u64 = 1 << 30;

/// Default bound on a blocking step: under Ray's own RDT fetch timeout (60 s), so the
/// transport's error, which names the cause, arrives before Ray's generic one.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

impl Default for ChannelConfig {
    fn default() -> Self {
        ChannelConfig {
            transport: TransportKind::Tcp,
            backend: RingBackend::Auto,
            ring: RingConfig {
                chunk_bytes: DEFAULT_CHUNK_BYTES,
                slots: DEFAULT_SLOTS,
            },
            connections: machine_connections(),
            timeout: DEFAULT_TIMEOUT,
            rdma_devices: Vec::new(),
            qps: 0,
            gid_index: 1,
            pool_bytes: DEFAULT_POOL_BYTES,
        }
    }
}

/// The TCP connection count when `RDMAKIT_TCP_CONNECTIONS` is unset: half the CPUs this process
/// may run on, between 2 and 8 (each connection costs a writer or reader thread on each end, and
/// gpu-stage's loopback sweep on the 16-core H200 machine has 8 ahead of 4). The sender's count
/// is the one used: the receiver adopts it in the handshake.
pub fn machine_connections() -> usize {
    let cpus = std::thread::available_parallelism().map_or(4, std::num::NonZeroUsize::get);
    (cpus / 2).clamp(2, 8)
}

impl ChannelConfig {
    /// Bytes of one staging ring.
    pub fn ring_bytes(&self) -> u64 {
        (self.ring.chunk_bytes as u64).saturating_mul(self.ring.slots as u64)
    }

    /// Refuses a pool smaller than one ring (it could never lend one).
    pub fn check_pool(&self) -> Result<(), BindError> {
        if self.ring_bytes() > self.pool_bytes {
            return Err(BindError::env(
                "RDMAKIT_PINNED_POOL",
                &self.pool_bytes.to_string(),
                &format!(
                    "smaller than one ring (RDMAKIT_CHUNK × RDMAKIT_SLOTS = {} bytes): raise \
                     it, or make the ring smaller",
                    self.ring_bytes()
                ),
            ));
        }
        Ok(())
    }

    /// Reads the settings through `get` (the environment, or a test's map). Explicit overrides
    /// are applied by passing a `get` that consults them first.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, BindError> {
        let mut c = ChannelConfig::default();
        let get = |k: &str| {
            get(k)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        if let Some(v) = get("RDMAKIT_TRANSPORT") {
            c.transport = match v.to_ascii_lowercase().as_str() {
                "tcp" => TransportKind::Tcp,
                "rdma" => TransportKind::Rdma,
                _ => {
                    return Err(BindError::env(
                        "RDMAKIT_TRANSPORT",
                        &v,
                        "expected tcp or rdma",
                    ));
                }
            };
        }
        if let Some(v) = get("RDMAKIT_BACKEND") {
            c.backend = match v.to_ascii_lowercase().as_str() {
                "auto" => RingBackend::Auto,
                "cuda" => RingBackend::Cuda,
                "host" => RingBackend::Host,
                _ => {
                    return Err(BindError::env(
                        "RDMAKIT_BACKEND",
                        &v,
                        "expected auto, cuda or host",
                    ));
                }
            };
        }
        if let Some(v) = get("RDMAKIT_CHUNK") {
            c.ring.chunk_bytes =
                parse_size(&v).map_err(|e| BindError::env("RDMAKIT_CHUNK", &v, &e.to_string()))?;
        }
        if let Some(v) = get("RDMAKIT_SLOTS") {
            c.ring.slots = parse_count("RDMAKIT_SLOTS", &v)?;
        }
        c.ring.validate().map_err(|e| {
            BindError::env(
                "RDMAKIT_CHUNK / RDMAKIT_SLOTS",
                &format!("{} / {}", c.ring.chunk_bytes, c.ring.slots),
                &e.to_string(),
            )
        })?;
        if let Some(v) = get("RDMAKIT_PINNED_POOL") {
            c.pool_bytes = parse_size(&v)
                .map_err(|e| BindError::env("RDMAKIT_PINNED_POOL", &v, &e.to_string()))?
                as u64;
        }
        c.check_pool()?;
        if let Some(v) = get("RDMAKIT_TCP_CONNECTIONS") {
            c.connections = parse_count("RDMAKIT_TCP_CONNECTIONS", &v)?;
            if c.connections == 0 || c.connections > gpu_stage::transport::tcp::MAX_CONNECTIONS {
                return Err(BindError::env(
                    "RDMAKIT_TCP_CONNECTIONS",
                    &v,
                    &format!(
                        "expected 1 to {}",
                        gpu_stage::transport::tcp::MAX_CONNECTIONS
                    ),
                ));
            }
        }
        if let Some(v) = get("RDMAKIT_TIMEOUT_S") {
            let secs: f64 = v.parse().map_err(|_| {
                BindError::env("RDMAKIT_TIMEOUT_S", &v, "expected a number of seconds")
            })?;
            if !(secs.is_finite() && secs > 0.0 && secs <= 86_400.0) {
                return Err(BindError::env(
                    "RDMAKIT_TIMEOUT_S",
                    &v,
                    "expected more than 0 and at most 86400 seconds",
                ));
            }
            c.timeout = Duration::from_secs_f64(secs);
        }
        c.rdma_devices = match get("RDMAKIT_RDMA_DEVICES") {
            Some(v) => split_devices("RDMAKIT_RDMA_DEVICES", &v)?,
            None => match get("NCCL_IB_HCA") {
                Some(v) => split_devices("NCCL_IB_HCA", &v)?,
                None => Vec::new(),
            },
        };
        c.qps = match get("RDMAKIT_QPS") {
            Some(v) => {
                let n = parse_count("RDMAKIT_QPS", &v)?;
                if n == 0 || n < c.rdma_devices.len() {
                    return Err(BindError::env(
                        "RDMAKIT_QPS",
                        &v,
                        &format!(
                            "expected at least one QP per device ({} devices)",
                            c.rdma_devices.len()
                        ),
                    ));
                }
                n
            }
            // Two QPs per NIC: gpu-stage's measured default (one QP per NIC leaves bandwidth).
            None => (2 * c.rdma_devices.len()).max(2),
        };
        if let Some((k, v)) = get("RDMAKIT_GID_INDEX")
            .map(|v| ("RDMAKIT_GID_INDEX", v))
            .or_else(|| get("NCCL_IB_GID_INDEX").map(|v| ("NCCL_IB_GID_INDEX", v)))
        {
            c.gid_index = v
                .parse()
                .map_err(|_| BindError::env(k, &v, "expected a GID index (0, 1, 3, ...)"))?;
        }
        if c.transport == TransportKind::Rdma && c.rdma_devices.is_empty() {
            return Err(BindError::env(
                "RDMAKIT_RDMA_DEVICES",
                "",
                "RDMAKIT_TRANSPORT=rdma needs devices: set RDMAKIT_RDMA_DEVICES=erdma_0,erdma_1 \
                 (or NCCL_IB_HCA, as the RayCluster's profile does)",
            ));
        }
        Ok(c)
    }

    /// Reads the process environment.
    pub fn from_env() -> Result<Self, BindError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }
}

fn parse_count(var: &'static str, v: &str) -> Result<usize, BindError> {
    v.parse()
        .map_err(|_| BindError::env(var, v, "expected a whole number"))
}

/// Splits a device list in NCCL_IB_HCA syntax: comma-separated names, each optionally followed by
/// `:port`, the whole list optionally prefixed by `=` (exact match).
fn split_devices(var: &'static str, v: &str) -> Result<Vec<String>, BindError> {
    if v.starts_with('^') {
        return Err(BindError::env(
            var,
            v,
            "an exclusion list names no device to use; set RDMAKIT_RDMA_DEVICES to the devices",
        ));
    }
    let v = v.strip_prefix('=').unwrap_or(v);
    let devices: Vec<String> = v
        .split(',')
        .map(|d| d.trim())
        .filter(|d| !d.is_empty())
        .map(|d| d.split(':').next().unwrap_or(d).to_string())
        .collect();
    if devices.is_empty() {
        return Err(BindError::env(var, v, "no device names in the list"));
    }
    Ok(devices)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn cfg(pairs: &[(&str, &str)]) -> Result<ChannelConfig, BindError> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        ChannelConfig::from_lookup(|k| m.get(k).cloned())
    }

    #[test]
    fn defaults_without_environment() {
        let c = cfg(&[]).expect("defaults are valid");
        assert_eq!(c.transport, TransportKind::Tcp);
        assert_eq!(c.backend, RingBackend::Auto);
        assert_eq!(c.ring.chunk_bytes, 4 << 20);
        assert_eq!(c.ring.slots, 8);
        assert_eq!(c.connections, machine_connections());
        assert!((2..=8).contains(&c.connections));
        assert_eq!(c.timeout, Duration::from_secs(30));
        assert!(c.rdma_devices.is_empty());
        assert_eq!(c.gid_index, 1);
    }

    #[test]
    fn nccl_ib_hca_gives_the_devices_and_two_qps_each() {
        let c = cfg(&[
            ("NCCL_IB_HCA", "=erdma_0:1,erdma_1:1"),
            ("NCCL_IB_GID_INDEX", "3"),
            ("RDMAKIT_TRANSPORT", "RDMA"),
        ])
        .expect("valid");
        assert_eq!(c.transport, TransportKind::Rdma);
        assert_eq!(c.rdma_devices, vec!["erdma_0", "erdma_1"]);
        assert_eq!(c.qps, 4);
        assert_eq!(c.gid_index, 3);
    }

    #[test]
    fn explicit_variables_override_the_nccl_ones() {
        let c = cfg(&[
            ("NCCL_IB_HCA", "mlx5_0"),
            ("RDMAKIT_RDMA_DEVICES", "erdma_1"),
            ("NCCL_IB_GID_INDEX", "3"),
            ("RDMAKIT_GID_INDEX", "1"),
            ("RDMAKIT_QPS", "3"),
            ("RDMAKIT_CHUNK", "8MiB"),
            ("RDMAKIT_SLOTS", "16"),
            ("RDMAKIT_TCP_CONNECTIONS", "8"),
            ("RDMAKIT_TIMEOUT_S", "2.5"),
            ("RDMAKIT_BACKEND", "host"),
        ])
        .expect("valid");
        assert_eq!(c.rdma_devices, vec!["erdma_1"]);
        assert_eq!(c.gid_index, 1);
        assert_eq!(c.qps, 3);
        assert_eq!(c.ring.chunk_bytes, 8 << 20);
        assert_eq!(c.ring.slots, 16);
        assert_eq!(c.connections, 8);
        assert_eq!(c.timeout, Duration::from_millis(2500));
        assert_eq!(c.backend, RingBackend::Host);
    }

    #[test]
    fn bad_values_name_the_variable_and_the_expectation() {
        let cases: &[(&[(&str, &str)], &str)] = &[
            (&[("RDMAKIT_TRANSPORT", "nccl")], "RDMAKIT_TRANSPORT"),
            (&[("RDMAKIT_BACKEND", "gpu")], "expected auto, cuda or host"),
            (&[("RDMAKIT_CHUNK", "4KiB")], "RDMAKIT_CHUNK"),
            (&[("RDMAKIT_SLOTS", "1")], "RDMAKIT_SLOTS"),
            (&[("RDMAKIT_SLOTS", "many")], "whole number"),
            (&[("RDMAKIT_TCP_CONNECTIONS", "0")], "expected 1 to 64"),
            (&[("RDMAKIT_TIMEOUT_S", "-1")], "RDMAKIT_TIMEOUT_S"),
            (&[("RDMAKIT_TIMEOUT_S", "inf")], "at most 86400"),
            (&[("NCCL_IB_HCA", "^mlx5_2")], "exclusion list"),
            (&[("RDMAKIT_TRANSPORT", "rdma")], "needs devices"),
            (
                &[("RDMAKIT_RDMA_DEVICES", "a,b,c"), ("RDMAKIT_QPS", "2")],
                "at least one QP per device",
            ),
            (&[("RDMAKIT_GID_INDEX", "x")], "RDMAKIT_GID_INDEX"),
        ];
        for (pairs, needle) in cases {
            let err = cfg(pairs).expect_err("must be refused").to_string();
            assert!(err.contains(needle), "{pairs:?}: {err:?} lacks {needle:?}");
        }
    }
}
