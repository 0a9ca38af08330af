//! Ring geometry: chunk size and buffer count, with their limits and defaults.

use serde::{Deserialize, Serialize};

use crate::error::StageError;

/// One mebibyte.
pub const MIB: usize = 1 << 20;
/// Smallest chunk the ring accepts. Below this, per-copy and per-message overheads dominate
/// (the SPEC forbids smaller chunks).
pub const MIN_CHUNK_BYTES: usize = MIB;
/// Largest chunk the ring accepts (keeps the 64-bit frame lengths and pinned allocations sane).
pub const MAX_CHUNK_BYTES: usize = 1 << 30;
/// Default chunk size (see the crate README for the sweep that chose it).
pub const DEFAULT_CHUNK_BYTES: usize = 4 * MIB;
/// Default number of host buffers per direction (see the crate README for the sweep).
pub const DEFAULT_SLOTS: usize = 8;
/// Fewest buffers: with one buffer copy and transport cannot overlap.
pub const MIN_SLOTS: usize = 2;
/// Most buffers in one ring.
pub const MAX_SLOTS: usize = 1024;

/// Geometry of a staging ring: `slots` host buffers of `chunk_bytes` each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RingConfig {
    /// Bytes per host buffer, and therefore the largest chunk one copy moves.
    pub chunk_bytes: usize,
    /// Number of host buffers.
    pub slots: usize,
}

impl Default for RingConfig {
    fn default() -> Self {
        RingConfig {
            chunk_bytes: DEFAULT_CHUNK_BYTES,
            slots: DEFAULT_SLOTS,
        }
    }
}

impl RingConfig {
    /// Builds and validates a ring geometry.
    pub fn new(chunk_bytes: usize, slots: usize) -> Result<Self, StageError> {
        let cfg = RingConfig { chunk_bytes, slots };
        cfg.validate()?;
        Ok(cfg)
    }

    /// Checks the limits; the error names the field and the allowed range.
    pub fn validate(&self) -> Result<(), StageError> {
        if self.chunk_bytes < MIN_CHUNK_BYTES {
            return Err(StageError::config(
                "chunk_bytes",
                self.chunk_bytes,
                format!(
                    "chunks must be at least {MIN_CHUNK_BYTES} bytes (1 MiB); use 4 MiB unless a sweep says otherwise"
                ),
            ));
        }
        if self.chunk_bytes > MAX_CHUNK_BYTES {
            return Err(StageError::config(
                "chunk_bytes",
                self.chunk_bytes,
                format!("chunks must be at most {MAX_CHUNK_BYTES} bytes (1 GiB)"),
            ));
        }
        if !(MIN_SLOTS..=MAX_SLOTS).contains(&self.slots) {
            return Err(StageError::config(
                "slots",
                self.slots,
                format!(
                    "a ring needs {MIN_SLOTS}..={MAX_SLOTS} buffers so that copies and the transport overlap"
                ),
            ));
        }
        if self.chunk_bytes.checked_mul(self.slots).is_none() {
            return Err(StageError::config(
                "slots",
                self.slots,
                "chunk_bytes * slots overflows the address space",
            ));
        }
        Ok(())
    }

    /// Host memory the ring pins, in bytes.
    pub fn ring_bytes(&self) -> usize {
        self.chunk_bytes.saturating_mul(self.slots)
    }

    /// Number of chunks a transfer of `len` bytes is cut into (the last one may be short).
    pub fn chunks_for(&self, len: usize) -> usize {
        len.div_ceil(self.chunk_bytes)
    }
}

/// Parses sizes such as `4MiB`, `512M`, `1GiB`, `4096`, `1k` (binary units).
pub fn parse_size(text: &str) -> Result<usize, StageError> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: usize = num.parse().map_err(|_| {
        StageError::config(
            "size",
            text,
            "expected a number with an optional unit (B, KiB, MiB, GiB)",
        )
    })?;
    let mult = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        other => {
            return Err(StageError::config(
                "size",
                text,
                format!("unknown unit `{other}`; use B, KiB, MiB or GiB"),
            ));
        }
    };
    n.checked_mul(mult)
        .ok_or_else(|| StageError::config("size", text, "size overflows"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        let cfg = RingConfig::default();
        cfg.validate().unwrap();
        assert_eq!(cfg.chunk_bytes, 4 * MIB);
        assert_eq!(cfg.slots, 8);
        assert_eq!(cfg.ring_bytes(), 32 * MIB);
    }

    #[test]
    fn chunk_below_one_mib_is_rejected_with_field_name() {
        let err = RingConfig::new(MIB - 1, 8).unwrap_err().to_string();
        assert!(err.contains("chunk_bytes"), "{err}");
        assert!(err.contains("1 MiB"), "{err}");
        RingConfig::new(MIB, 8).unwrap();
    }

    #[test]
    fn slot_limits() {
        assert!(
            RingConfig::new(MIB, 1)
                .unwrap_err()
                .to_string()
                .contains("slots")
        );
        assert!(RingConfig::new(MIB, MAX_SLOTS + 1).is_err());
        RingConfig::new(MIB, 2).unwrap();
    }

    #[test]
    fn chunk_counts() {
        let cfg = RingConfig::new(MIB, 2).unwrap();
        assert_eq!(cfg.chunks_for(0), 0);
        assert_eq!(cfg.chunks_for(1), 1);
        assert_eq!(cfg.chunks_for(MIB), 1);
        assert_eq!(cfg.chunks_for(MIB + 1), 2);
    }

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("4MiB").unwrap(), 4 * MIB);
        assert_eq!(parse_size("512M").unwrap(), 512 * MIB);
        assert_eq!(parse_size("1GiB").unwrap(), 1 << 30);
        assert_eq!(parse_size("17").unwrap(), 17);
        assert!(
            parse_size("4XB")
                .unwrap_err()
                .to_string()
                .contains("unknown unit")
        );
        assert!(parse_size("MiB").is_err());
    }
}
