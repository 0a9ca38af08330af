//! What the channel and server tests share: the settings and the byte patterns.

use std::time::Duration;

use _native::config::{ChannelConfig, RingBackend};

pub const MIB: usize = 1 << 20;

/// Host ring of 4 x 1 MiB, 3 TCP connections, 5 s timeout.
pub fn cfg() -> ChannelConfig {
    ChannelConfig {
        backend: RingBackend::Host,
        ring: gpu_stage::RingConfig::new(MIB, 4).expect("valid ring"),
        connections: 3,
        timeout: Duration::from_secs(5),
        ..ChannelConfig::default()
    }
}

/// `len` bytes that differ by `seed` and by position.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u64 * 31 + u64::from(seed)) as u8)
        .collect()
}
