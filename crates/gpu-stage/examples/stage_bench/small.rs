//! `stage_bench small`: small transfers (4 KiB .. 64 MiB by default) through the in-process stage,
//! each size beside its floor measured in the same run: one pinned D2H plus one pinned H2D of the same
//! size, back to back (`bench::run_pinned_floor`). Ours and the floor alternate size by size, and the
//! JSON is rewritten after every size.

use std::path::Path;

use gpu_stage::MIB;
use gpu_stage::bench::{self, BenchConfig, BenchResult};
use serde::Serialize;

use super::{AnyResult, write_json};

const KIB: usize = 1 << 10;

/// One size: our figure, the floor's, both in microseconds per transfer.
#[derive(Debug, Serialize)]
struct Point {
    bytes: usize,
    label: String,
    ours_us_median: f64,
    ours_us_best: f64,
    floor_us_median: f64,
    floor_us_best: f64,
    /// Ours over the floor, by medians (≤ 1.3 at 1 MiB is the target).
    ratio_median: f64,
    verified: bool,
    ours: BenchResult,
    floor: BenchResult,
}

#[derive(Debug, Serialize)]
struct Run {
    what: &'static str,
    src_device: usize,
    dst_device: usize,
    chunk_bytes: usize,
    slots: usize,
    warmup: usize,
    iterations: usize,
    points: Vec<Point>,
    /// Sizes that failed, with why.
    errors: Vec<String>,
}

/// "4 KiB", "1 MiB", or bytes.
fn label(bytes: usize) -> String {
    if bytes >= MIB && bytes.is_multiple_of(MIB) {
        format!("{} MiB", bytes / MIB)
    } else if bytes >= KIB && bytes.is_multiple_of(KIB) {
        format!("{} KiB", bytes / KIB)
    } else {
        format!("{bytes} B")
    }
}

/// Median and best of a result's per-iteration times, in microseconds.
fn micros(r: &BenchResult) -> (f64, f64) {
    let mut s: Vec<f64> = r.seconds.iter().map(|x| x * 1e6).collect();
    s.sort_by(f64::total_cmp);
    (
        s.get(s.len() / 2).copied().unwrap_or(0.0),
        s.first().copied().unwrap_or(0.0),
    )
}

fn point(cfg: &BenchConfig) -> AnyResult<Point> {
    let ours = bench::run_inprocess(cfg)?;
    let floor = bench::run_pinned_floor(cfg)?;
    let (om, ob) = micros(&ours);
    let (fm, fb) = micros(&floor);
    Ok(Point {
        bytes: cfg.bytes,
        label: label(cfg.bytes),
        ours_us_median: om,
        ours_us_best: ob,
        floor_us_median: fm,
        floor_us_best: fb,
        ratio_median: if fm > 0.0 { om / fm } else { 0.0 },
        verified: ours.verified && floor.verified,
        ours,
        floor,
    })
}

/// Runs every size of `sizes` with `base`'s ring, devices and iteration counts; writes
/// `out/gpu-stage-small.json` after each.
pub(super) fn run(base: &BenchConfig, sizes: &[usize], out: &Path) -> AnyResult<()> {
    std::fs::create_dir_all(out)?;
    let path = out.join("gpu-stage-small.json");
    let mut run = Run {
        what: "in-process stage vs one pinned D2H + one pinned H2D of the same size, back to back",
        src_device: base.src_device,
        dst_device: base.dst_device,
        chunk_bytes: base.ring.chunk_bytes,
        slots: base.ring.slots,
        warmup: base.warmup,
        iterations: base.iterations,
        points: Vec::new(),
        errors: Vec::new(),
    };
    println!(
        "{:>8} {:>12} {:>12} {:>8}  verified",
        "size", "ours µs", "floor µs", "ratio"
    );
    for &bytes in sizes {
        let cfg = BenchConfig {
            bytes,
            ..base.clone()
        };
        match point(&cfg) {
            Ok(p) => {
                let mark = if bytes == MIB {
                    if p.ratio_median <= 1.3 {
                        "  (target ≤ 1.3×: met)"
                    } else {
                        "  (target ≤ 1.3×: missed)"
                    }
                } else {
                    ""
                };
                println!(
                    "{:>8} {:>12.1} {:>12.1} {:>7.2}×  {}{mark}",
                    p.label, p.ours_us_median, p.floor_us_median, p.ratio_median, p.verified
                );
                run.points.push(p);
            }
            Err(e) => {
                println!("{:>8} FAILED: {e}", label(bytes));
                run.errors.push(format!("{}: {e}", label(bytes)));
            }
        }
        write_json(&path, &run)?;
    }
    if run.points.iter().any(|p| !p.verified) || !run.errors.is_empty() {
        return Err("a size failed or did not verify (see gpu-stage-small.json)".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpu_stage::RingConfig;
    use gpu_stage::bench::Backend;

    #[test]
    fn labels() {
        assert_eq!(label(4 * KIB), "4 KiB");
        assert_eq!(label(64 * MIB), "64 MiB");
        assert_eq!(label(1000), "1000 B");
    }

    #[test]
    fn a_host_sweep_writes_every_size_verified() {
        let dir = std::env::temp_dir().join(format!("stage-small-{}", std::process::id()));
        let base = BenchConfig {
            ring: RingConfig::new(MIB, 4).unwrap(),
            warmup: 1,
            iterations: 3,
            backend: Backend::Host,
            ..BenchConfig::default()
        };
        run(&base, &[4 * KIB, MIB, 3 * MIB + 1], &dir).unwrap();
        let v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("gpu-stage-small.json")).unwrap())
                .unwrap();
        let points = v["points"].as_array().unwrap();
        assert_eq!(points.len(), 3);
        assert!(
            points
                .iter()
                .all(|p| p["verified"] == true && p["floor_us_median"].as_f64().unwrap() > 0.0)
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
