//! The harness of the one-process benchmarks: open the two devices of the configured backend, run
//! verified, timed rounds between them.

use std::cell::RefCell;
use std::time::Instant;

use super::config::{Backend, BenchConfig, check_cfg};
use super::result::BenchResult;
use crate::checksum::{checksum, pattern};
use crate::device::{CudaDevice, Device, HostDevice};
use crate::error::StageError;

/// A measurement on a source and a destination device of one backend (the same type, so one
/// generic body serves CUDA and the host backend).
pub(super) trait PairBench {
    /// Measures transfers from `src` to `dst` as `cfg` says.
    fn run<D: Device>(self, src: &D, dst: &D, cfg: &BenchConfig)
    -> Result<BenchResult, StageError>;
}

/// Checks `cfg`, opens `src_device` and `dst_device` on its backend and runs `bench` on them.
pub(super) fn on_pair(cfg: &BenchConfig, bench: impl PairBench) -> Result<BenchResult, StageError> {
    check_cfg(cfg)?;
    match cfg.backend {
        Backend::Cuda => {
            let a = CudaDevice::new(cfg.src_device)?;
            let b = CudaDevice::new(cfg.dst_device)?;
            bench.run(&a, &b, cfg)
        }
        Backend::Host => bench.run(&HostDevice::new(), &HostDevice::new(), cfg),
    }
}

/// The timing loop every local benchmark shares: `warmup + iterations` rounds of `reset` (untimed),
/// `body` (timed) and `check(i)` (untimed: does the destination hold the source's bytes?).
/// Returns the timed seconds of the measured rounds and how many rounds verified.
pub(super) fn timed_rounds(
    cfg: &BenchConfig,
    mut reset: impl FnMut() -> Result<(), StageError>,
    mut body: impl FnMut() -> Result<(), StageError>,
    mut check: impl FnMut(usize) -> Result<bool, StageError>,
) -> Result<(Vec<f64>, usize), StageError> {
    let mut seconds = Vec::with_capacity(cfg.iterations);
    let mut verified = 0;
    for i in 0..cfg.warmup + cfg.iterations {
        reset()?;
        let t = Instant::now();
        body()?;
        let secs = t.elapsed().as_secs_f64();
        verified += usize::from(check(i)?);
        if i >= cfg.warmup {
            seconds.push(secs);
        }
    }
    Ok((seconds, verified))
}

/// What a device-to-device benchmark moves: the source pattern uploaded, a zeroed destination (in a
/// `RefCell`: the reset, transfer and check closures of [`timed_rounds`] each borrow it in turn), and
/// the pattern's checksum.
pub(super) struct Endpoints<M> {
    pub(super) src: M,
    pub(super) dst: RefCell<M>,
    pub(super) want: u64,
}

/// The [`Endpoints`] of a run from `src_dev` to `dst_dev`.
pub(super) fn endpoints<D: Device>(
    src_dev: &D,
    dst_dev: &D,
    cfg: &BenchConfig,
) -> Result<Endpoints<D::Memory>, StageError> {
    let data = pattern(cfg.bytes, cfg.seed);
    let want = checksum(&data);
    let src = src_dev.upload(&data)?;
    drop(data);
    Ok(Endpoints {
        src,
        dst: RefCell::new(dst_dev.alloc_zeroed(cfg.bytes)?),
        want,
    })
}
