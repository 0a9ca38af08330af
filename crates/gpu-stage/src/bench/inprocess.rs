//! The in-process pipeline: GPU → host ring → GPU in one process.

use super::config::BenchConfig;
use super::local::{Endpoints, PairBench, endpoints, on_pair, timed_rounds};
use super::result::{BenchResult, summarise, verify};
use crate::device::Device;
use crate::error::StageError;
use crate::pipeline::InProcessStage;

/// GPU `src_device` → host ring → GPU `dst_device` in one process (or host → host with
/// [`Backend::Host`](super::Backend::Host)).
pub fn run_inprocess(cfg: &BenchConfig) -> Result<BenchResult, StageError> {
    on_pair(cfg, InProcessBench)
}

pub(super) struct InProcessBench;

impl PairBench for InProcessBench {
    fn run<D: Device>(
        self,
        src_dev: &D,
        dst_dev: &D,
        cfg: &BenchConfig,
    ) -> Result<BenchResult, StageError> {
        let Endpoints { src, dst, want } = endpoints(src_dev, dst_dev, cfg)?;
        let mut stage = InProcessStage::new(src_dev, dst_dev, cfg.ring)?;
        let (seconds, verified) = timed_rounds(
            cfg,
            || dst_dev.zero(&mut dst.borrow_mut()),
            || stage.transfer(&src, &mut dst.borrow_mut()).map(drop),
            |i| {
                verify(
                    dst_dev,
                    &dst.borrow(),
                    want,
                    &format!("in-process iteration {i}"),
                )
            },
        )?;
        let mut r = summarise(
            "inprocess",
            cfg,
            vec![src_dev.describe(), dst_dev.describe()],
            seconds,
            want,
            verified,
        );
        r.chunk_bytes = Some(cfg.ring.chunk_bytes);
        r.slots = Some(cfg.ring.slots);
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::test_cfg::{corrupting, host_cfg};
    use crate::config::MIB;
    use crate::device::HostDevice;

    #[test]
    fn inprocess_host_bench_verifies_and_reports() {
        let r = run_inprocess(&host_cfg(3 * MIB + 17)).unwrap();
        assert_eq!(r.name, "inprocess");
        assert!(r.verified);
        assert_eq!(r.seconds.len(), 2);
        assert!(r.gib_s_best >= r.gib_s_median && r.gib_s_median > 0.0);
        let json = serde_json::to_string(&r).unwrap();
        let back: BenchResult = serde_json::from_str(&json).unwrap();
        // serde_json may round floats by one ulp; compare the exact fields exactly.
        assert_eq!(
            (back.bytes, back.slots, back.checksum.clone()),
            (r.bytes, r.slots, r.checksum.clone())
        );
        assert!((back.gib_s_best - r.gib_s_best).abs() < 1e-9);
    }

    #[test]
    fn a_corrupted_chunk_makes_the_inprocess_run_unverified() {
        let cfg = host_cfg(3 * MIB + 17);
        let clean = InProcessBench
            .run(&HostDevice::new(), &HostDevice::new(), &cfg)
            .unwrap();
        assert!(clean.verified);
        assert_eq!(clean.verified_iterations, 3);
        // The 6th host→device copy is chunk 1 of the second iteration (4 chunks per iteration).
        let dev = corrupting(5);
        let r = InProcessBench.run(&dev, &dev, &cfg).unwrap();
        assert!(!r.verified, "a corrupted chunk must not verify");
        assert_eq!(r.verified_iterations, 2);
    }

    #[test]
    fn zero_iterations_is_rejected() {
        let mut cfg = host_cfg(MIB);
        cfg.iterations = 0;
        assert!(
            run_inprocess(&cfg)
                .unwrap_err()
                .to_string()
                .contains("iterations")
        );
    }
}
