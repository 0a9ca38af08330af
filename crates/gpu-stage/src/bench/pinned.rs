//! The copy engine alone, the peers every staged figure is held against: one pinned copy of the
//! whole size in one direction, and one pinned D2H then one pinned H2D back to back (the floor).

use std::cell::RefCell;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::config::BenchConfig;
use super::local::{Endpoints, PairBench, endpoints, on_pair, timed_rounds};
use super::result::{BenchResult, matches_checksum, summarise, verify};
use crate::checksum::{checksum, pattern};
use crate::config::RingConfig;
use crate::device::Device;
use crate::error::StageError;
use crate::ring::StagingRing;

/// Direction of a single large pinned copy (the "copy engine alone" peer).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Device to host.
    D2h,
    /// Host to device.
    H2d,
}

/// A ring of one slot of the whole transfer size, on `dev`: the page-locked buffer the pinned peers
/// copy through.
fn one_slot_ring<D: Device>(dev: &D, cfg: &BenchConfig) -> Result<Arc<StagingRing>, StageError> {
    Ok(StagingRing::from_buffers(
        RingConfig {
            chunk_bytes: cfg.bytes,
            slots: 1,
        },
        vec![dev.alloc_staging(cfg.bytes)?],
    ))
}

/// One `cudaMemcpyAsync`-equivalent of `bytes` between GPU `src_device` and one page-locked
/// (not write-combined) host buffer: the ceiling the in-process pipeline is held against.
pub fn run_pinned_copy(cfg: &BenchConfig, direction: Direction) -> Result<BenchResult, StageError> {
    on_pair(cfg, PinnedBench(direction))
}

struct PinnedBench(Direction);

impl PairBench for PinnedBench {
    /// On `src_device` alone (the destination device is not used).
    fn run<D: Device>(self, dev: &D, _: &D, cfg: &BenchConfig) -> Result<BenchResult, StageError> {
        let data = pattern(cfg.bytes, cfg.seed);
        let want = checksum(&data);
        let ring = one_slot_ring(dev, cfg)?;
        // This function is the ring's only user: it owns the one slot for the whole measurement.
        let mut slot = ring.acquire(0)?;
        let (ptr, len) = (slot.ptr(cfg.bytes)?, cfg.bytes);
        let stream = dev.new_stream()?;
        let (name, (seconds, verified)) = match self.0 {
            Direction::D2h => {
                let src = dev.upload(&data)?;
                let rounds = timed_rounds(
                    cfg,
                    || {
                        // SAFETY: the ring (and its one buffer) outlives the copy; no copy is in
                        // flight here (each round drains the stream).
                        unsafe { std::ptr::write_bytes(ptr, 0, len) };
                        Ok(())
                    },
                    || {
                        // SAFETY: exclusive use of the buffer; the stream is drained before reading it.
                        unsafe { dev.copy_d2h(&stream, &src, 0, ptr, len)? };
                        dev.wait_stream(&stream)
                    },
                    |i| {
                        Ok(matches_checksum(
                            slot.bytes(len)?,
                            want,
                            &format!("pinned D2H iteration {i}"),
                        ))
                    },
                )?;
                ("pinned_d2h", rounds)
            }
            Direction::H2d => {
                // Before any copy is queued: nothing else touches the slot.
                slot.bytes_mut(len)?.copy_from_slice(&data);
                let dst = RefCell::new(dev.alloc_zeroed(cfg.bytes)?);
                let rounds = timed_rounds(
                    cfg,
                    || dev.zero(&mut dst.borrow_mut()),
                    || {
                        // SAFETY: the buffer is not modified while the copy runs; we wait below.
                        unsafe { dev.copy_h2d(&stream, ptr, len, &mut dst.borrow_mut(), 0)? };
                        dev.wait_stream(&stream)
                    },
                    |i| {
                        verify(
                            dev,
                            &dst.borrow(),
                            want,
                            &format!("pinned H2D iteration {i}"),
                        )
                    },
                )?;
                ("pinned_h2d", rounds)
            }
        };
        Ok(summarise(
            name,
            cfg,
            vec![dev.describe()],
            seconds,
            want,
            verified,
        ))
    }
}

/// The floor a staged transfer of `bytes` is held against: one pinned D2H of the whole size from GPU
/// `src_device` into one page-locked host buffer, then one pinned H2D of it into GPU `dst_device`,
/// back to back, timed together (no overlap is possible: the H2D needs the D2H's bytes). Small
/// transfers cannot pipeline, so this is what the copy engines alone take for them.
pub fn run_pinned_floor(cfg: &BenchConfig) -> Result<BenchResult, StageError> {
    on_pair(cfg, FloorBench)
}

struct FloorBench;

impl PairBench for FloorBench {
    fn run<D: Device>(
        self,
        src_dev: &D,
        dst_dev: &D,
        cfg: &BenchConfig,
    ) -> Result<BenchResult, StageError> {
        let Endpoints { src, dst, want } = endpoints(src_dev, dst_dev, cfg)?;
        let ring = one_slot_ring(src_dev, cfg)?;
        // This function is the ring's only user: it owns the one slot for the whole measurement.
        let slot = ring.acquire(0)?;
        let (ptr, len) = (slot.ptr(cfg.bytes)?, cfg.bytes);
        let (d2h, h2d) = (src_dev.new_stream()?, dst_dev.new_stream()?);
        let (seconds, verified) = timed_rounds(
            cfg,
            || dst_dev.zero(&mut dst.borrow_mut()),
            || {
                // SAFETY: the slot's buffer is ours alone and outlives both copies; the D2H stream is
                // drained before the H2D reads the buffer, and the H2D stream before the next D2H
                // writes it.
                unsafe { src_dev.copy_d2h(&d2h, &src, 0, ptr, len)? };
                src_dev.wait_stream(&d2h)?;
                // SAFETY: as above.
                unsafe { dst_dev.copy_h2d(&h2d, ptr, len, &mut dst.borrow_mut(), 0)? };
                dst_dev.wait_stream(&h2d)
            },
            |i| {
                verify(
                    dst_dev,
                    &dst.borrow(),
                    want,
                    &format!("pinned D2H + H2D iteration {i}"),
                )
            },
        )?;
        Ok(summarise(
            "pinned_d2h_then_h2d",
            cfg,
            vec![src_dev.describe(), dst_dev.describe()],
            seconds,
            want,
            verified,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::test_cfg::host_cfg;
    use crate::config::MIB;

    #[test]
    fn pinned_host_bench_runs_both_directions() {
        let cfg = host_cfg(2 * MIB + 1);
        assert!(run_pinned_copy(&cfg, Direction::D2h).unwrap().verified);
        assert!(run_pinned_copy(&cfg, Direction::H2d).unwrap().verified);
    }

    #[test]
    fn the_pinned_floor_verifies_small_and_odd_sizes() {
        for bytes in [1, 4096, MIB + 3] {
            let r = run_pinned_floor(&host_cfg(bytes)).unwrap();
            assert_eq!(r.name, "pinned_d2h_then_h2d");
            assert!(r.verified, "{bytes} bytes: {r:?}");
            assert_eq!(r.seconds.len(), 2);
        }
    }
}
