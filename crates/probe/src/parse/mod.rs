//! Parsers of tool output into structured, serde-serialisable results. None of them panics on
//! any input (property-tested and fuzzed); bad input is a [`ParseError`](crate::ParseError).

pub mod ibv_devinfo;
pub mod nccl_tests;
pub mod perftest;
pub mod rdt;

pub use ibv_devinfo::{IbvDevice, IbvPort, parse_ibv_devinfo};
pub use nccl_tests::{
    Measurement, NcclTestsHeader, NcclTestsRow, NcclTestsRun, RankDevice, parse_nccl_tests,
    parse_nccl_tests_json,
};
pub use perftest::{BwUnit, PerftestBwRow, PerftestLatRow, PerftestRun, parse_perftest};
pub use rdt::{ActorPlacement, RdtIteration, RdtRun, parse_rdt};

/// Any tool output this module understands, recognised by [`parse_any`].
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", content = "result", rename_all = "kebab-case")]
pub enum Parsed {
    /// nccl-tests text or JSON.
    NcclTests(NcclTestsRun),
    /// The RDT demo.
    Rdt(RdtRun),
    /// perftest.
    Perftest(PerftestRun),
    /// `ibv_devinfo`.
    IbvDevinfo(Vec<IbvDevice>),
}

/// Try every parser, most specific first: nccl-tests JSON (text starting with `{`), nccl-tests
/// text, the RDT demo, perftest, `ibv_devinfo`. `None` when nothing matches — a plain log, which
/// is what the doctor reads.
pub fn parse_any(text: &str) -> Option<Parsed> {
    if text.trim_start().starts_with('{') {
        return parse_nccl_tests_json(text).ok().map(Parsed::NcclTests);
    }
    if let Ok(r) = parse_nccl_tests(text)
        && !r.rows.is_empty()
    {
        return Some(Parsed::NcclTests(r));
    }
    if let Ok(r) = parse_rdt(text) {
        return Some(Parsed::Rdt(r));
    }
    if let Ok(r) = parse_perftest(text) {
        return Some(Parsed::Perftest(r));
    }
    parse_ibv_devinfo(text).ok().map(Parsed::IbvDevinfo)
}

/// Parse `512 MiB`, `1.5 GiB`, `64 KB`, `4096 B` into bytes (binary units for Ki/Mi/Gi,
/// decimal for k/M/G).
pub fn parse_size(value: &str, unit: &str) -> Option<u64> {
    let v: f64 = value.trim().parse().ok()?;
    if !v.is_finite() || v < 0.0 {
        return None;
    }
    let mult: f64 = match unit.trim() {
        "B" | "" => 1.0,
        "KiB" => 1024.0,
        "MiB" => 1024.0 * 1024.0,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        "TiB" => 1024.0f64.powi(4),
        "KB" | "kB" | "K" => 1e3,
        "MB" | "M" => 1e6,
        "GB" | "G" => 1e9,
        "TB" | "T" => 1e12,
        _ => return None,
    };
    let b = v * mult;
    (b <= u64::MAX as f64).then_some(b as u64)
}
