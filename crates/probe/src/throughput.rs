//! Throughput verdicts: the figure a benchmark measured (nccl-tests, the RDT demo, perftest, any
//! GPU→GPU rate) judged on its own (wrong values, bad checksums, no result) and, when the cluster's
//! facts are known, as a fraction of [`expect`]'s expectation with the model's inputs
//! printed beside it. This module judges figures; [`parse`](crate::parse) reads the tools' output, and
//! running a benchmark is gpu-stage's `bench` (and `rdmakit bench`), not probe's.
//!
//! ```
//! use probe::{expect, throughput, Verdict};
//!
//! // Seed 000: the RDT demo over one of two 190 Gb/s eRDMA NICs whose WRITE reaches 20.4 GiB/s.
//! let inputs = expect::ExpectationInputs {
//!     nic_line_gbps: 190.0, nics_per_node: 2, nics_used: 1, gpudirect: false,
//!     pcie_gen: 5, pcie_lanes: 16, nic_write_gib_s: Some(20.4),
//!     host_copy_gib_s: None, stream_gib_s: None,
//! };
//! let e = expect::expect(&inputs)?;
//! let v = throughput::rate("rdt", "RDT demo", 11.8).against(&e, expect::DEFAULT_OK_FRACTION);
//! assert_eq!(v.verdict, Verdict::Warn);
//! assert!(v.check().summary.contains("58 % of one NIC, 27 % of the node"));
//! # Ok::<(), probe::ProbeError>(())
//! ```

use serde::{Deserialize, Serialize};

use crate::expect::{self, Expectation, Judgement, Path};
use crate::parse::{NcclTestsRun, Parsed, PerftestRun, RdtRun};
use crate::units::GIB;
use crate::verdict::{Check, Verdict};

/// Which benchmark a figure came from: it decides the unit conversion and which expectation
/// applies (perftest measures one NIC between host buffers, the others GPU to GPU).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ThroughputSource {
    /// nccl-tests: the peak bus bandwidth (GB/s, decimal), a per-rank figure.
    NcclTests,
    /// The RDT demo: the steady-state GiB/s (iterations after the first).
    Rdt,
    /// perftest `ib_write_bw` and friends: the best average bandwidth of one NIC.
    Perftest,
    /// Any other GPU→GPU rate in GiB/s (gpu-stage's bench, a workflow's own measurement).
    Rate,
}

/// One measured throughput's verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThroughputVerdict {
    /// Stable id: `nccl-tests-busbw`, `rdt-bandwidth`, `perftest-bandwidth`, or the caller's.
    pub id: String,
    /// What ran (`all_reduce_perf`, `RDT demo`, `ib_write_bw on erdma_0`, ...).
    pub subject: String,
    /// Which benchmark.
    pub kind: ThroughputSource,
    /// The figure judged, GiB/s (`None` when the run produced none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_gib_s: Option<f64>,
    /// The run judged on its own (wrong values, checksums, no result), before the expectation.
    pub run_verdict: Verdict,
    /// Overall: the expectation's verdict when the run itself is fine (`info`), else the worse
    /// of the two.
    pub verdict: Verdict,
    /// What the run showed, in the tool's own units.
    pub summary: String,
    /// What to do about the run itself (the expectation's fix is in `expectation`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
    /// The figure as a fraction of the expectation, with the model and its inputs; `None` when
    /// no expectation was given or the run produced no figure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expectation: Option<Judgement>,
}

impl ThroughputVerdict {
    fn new(id: &str, subject: String, kind: ThroughputSource, measured: Option<f64>) -> Self {
        Self {
            id: id.into(),
            subject,
            kind,
            measured_gib_s: measured,
            run_verdict: Verdict::Info,
            verdict: Verdict::Info,
            summary: String::new(),
            fix: None,
            expectation: None,
        }
    }

    fn judged(mut self, v: Verdict, summary: String, fix: Option<String>) -> Self {
        self.run_verdict = v;
        self.verdict = v;
        self.summary = summary;
        self.fix = fix;
        self
    }

    /// Judge the figure against `e` (`ok_fraction` of it is `ok`); replaces an earlier
    /// expectation. For perftest the NIC's own expectation is derived from `e`'s inputs
    /// ([`expect::expect_nic`]), so every bench of a cluster takes the same `Expectation`.
    pub fn against(mut self, e: &Expectation, ok_fraction: f64) -> Self {
        let Some(m) = self.measured_gib_s else {
            return self;
        };
        let nic;
        let e = if self.kind == ThroughputSource::Perftest && e.path != Path::Nic {
            match expect::expect_nic(&e.inputs) {
                Ok(n) => {
                    nic = n;
                    &nic
                }
                Err(_) => return self,
            }
        } else {
            e
        };
        let j = expect::judge(m, e, ok_fraction);
        // A run that is fine on its own (`info`: here is the figure) takes the expectation's
        // verdict; a warning or failure of the run itself stays.
        self.verdict = if self.run_verdict >= Verdict::Warn {
            self.run_verdict.max(j.verdict)
        } else {
            j.verdict
        };
        self.expectation = Some(j);
        self
    }

    /// [`against`](Self::against) when an expectation is known, unchanged otherwise.
    pub fn against_opt(self, e: Option<&Expectation>, ok_fraction: f64) -> Self {
        match e {
            Some(e) => self.against(e, ok_fraction),
            None => self,
        }
    }

    /// As a report check: the run's summary, then the figure against the expectation with the
    /// model's inputs; the fixes of both.
    pub fn check(&self) -> Check {
        let mut summary = self.summary.clone();
        let mut fixes: Vec<&str> = self.fix.iter().map(String::as_str).collect();
        if let Some(j) = &self.expectation {
            summary.push_str(". ");
            summary.push_str(&j.summary);
            fixes.extend(j.fix.as_deref());
        }
        let c = Check::new(self.id.clone(), self.subject.clone(), self.verdict, summary);
        if fixes.is_empty() {
            c
        } else {
            c.with_fix(fixes.join(" "))
        }
    }
}

/// nccl-tests GB/s are decimal (bytes / 1e9 per second).
fn gb_to_gib(gb_s: f64) -> f64 {
    gb_s * 1e9 / GIB
}

/// An nccl-tests run: wrong values or no rows fail; the figure is the peak bus bandwidth (the
/// large sizes; the average includes latency-bound small ones). busbw is per rank, so judge it
/// against an expectation whose `nics_used` is the NICs one rank uses (1 on a rail-per-GPU node).
pub fn nccl_tests(run: &NcclTestsRun) -> ThroughputVerdict {
    let subject = run
        .header
        .collective
        .clone()
        .unwrap_or_else(|| "nccl-tests".into());
    let peak = run.peak_busbw_gbps().filter(|v| v.is_finite() && *v >= 0.0);
    let v = ThroughputVerdict::new(
        "nccl-tests-busbw",
        subject,
        ThroughputSource::NcclTests,
        peak.map(gb_to_gib),
    );
    let wrong = run
        .total_wrong()
        .unwrap_or(0)
        .max(run.out_of_bounds.unwrap_or(0));
    let avg = run
        .avg_busbw_gbps
        .map(|a| format!(", average {a:.2} GB/s"))
        .unwrap_or_default();
    match peak {
        None => v.judged(
            Verdict::Fail,
            "nccl-tests printed no result rows".into(),
            Some(
                "Read the run's log with `rdmakit doctor`: the test stopped before its first size \
                 (a failed init, or a rank that never joined)."
                    .into(),
            ),
        ),
        Some(p) if wrong > 0 => v.judged(
            Verdict::Fail,
            format!(
                "{wrong} wrong values (peak bus bandwidth {p:.2} GB/s = {:.2} GiB/s{avg})",
                gb_to_gib(p)
            ),
            Some(
                "The collective corrupted data: rerun with NCCL_DEBUG=INFO and check the NICs' \
                 error counters; a bandwidth figure from such a run means nothing."
                    .into(),
            ),
        ),
        Some(p) => v.judged(
            Verdict::Info,
            format!(
                "peak bus bandwidth {p:.2} GB/s = {:.2} GiB/s{avg}",
                gb_to_gib(p)
            ),
            None,
        ),
    }
}

/// An RDT demo run: a bad checksum or a failed final line fails; the figure is the
/// steady-state rate (the first iteration includes communicator setup).
pub fn rdt(run: &RdtRun) -> ThroughputVerdict {
    let steady = run
        .steady_state_gib_per_s()
        .filter(|v| v.is_finite() && *v >= 0.0);
    let v = ThroughputVerdict::new(
        "rdt-bandwidth",
        "RDT demo".into(),
        ThroughputSource::Rdt,
        steady,
    );
    let transport = run
        .final_status
        .as_ref()
        .map(|(t, _)| format!(" over {t}"))
        .unwrap_or_default();
    if !run.ok() {
        let bad = run.iterations.iter().filter(|i| !i.checksum_ok).count();
        return v.judged(
            Verdict::Fail,
            format!(
                "RDT{transport} failed: {bad} of {} iterations with a bad checksum{}",
                run.iterations.len(),
                if run.final_status.as_ref().is_some_and(|(_, ok)| *ok) {
                    ""
                } else {
                    ", no `RDT over ...: OK` line"
                }
            ),
            Some(
                "Read the demo's log with `rdmakit doctor`; a bandwidth figure from a failed run \
                 means nothing."
                    .into(),
            ),
        );
    }
    match steady {
        Some(s) => v.judged(
            Verdict::Info,
            format!(
                "RDT{transport}: {s:.2} GiB/s steady state over {} iterations after the first",
                run.iterations.iter().filter(|i| i.iter > 0).count()
            ),
            None,
        ),
        None => v.judged(
            Verdict::Warn,
            format!("RDT{transport}: one iteration only, no steady-state figure"),
            Some("Run more than one iteration: the first includes NCCL's setup.".into()),
        ),
    }
}

/// A perftest bandwidth run: the best average bandwidth of one NIC (host buffers). A latency
/// run or a table without rows fails: it has no bandwidth to judge.
pub fn perftest(run: &PerftestRun) -> ThroughputVerdict {
    let test = run.test.clone().unwrap_or_else(|| "perftest".into());
    let subject = match run.device() {
        Some(d) => format!("{test} on {d}"),
        None => test,
    };
    let best = run
        .best_average_gib_per_s()
        .filter(|v| v.is_finite() && *v >= 0.0);
    let v = ThroughputVerdict::new(
        "perftest-bandwidth",
        subject,
        ThroughputSource::Perftest,
        best,
    );
    match best {
        Some(b) => v.judged(
            Verdict::Info,
            format!(
                "best average bandwidth {b:.2} GiB/s = {:.1} Gb/s over {} message sizes",
                b * GIB * 8.0 / 1e9,
                run.bw.len()
            ),
            None,
        ),
        None => v.judged(
            Verdict::Fail,
            "no bandwidth rows (a latency test, or the test stopped before its table)".into(),
            Some(
                "Run `ib_write_bw` (not a latency test) and read its output with `rdmakit doctor` \
                 if the table is missing."
                    .into(),
            ),
        ),
    }
}

/// Any GPU→GPU rate the caller measured itself (gpu-stage's bench, a workflow step), GiB/s.
/// A negative or non-finite figure is judged as no figure (`fail`).
pub fn rate(id: &str, subject: impl Into<String>, gib_s: f64) -> ThroughputVerdict {
    let ok = gib_s.is_finite() && gib_s >= 0.0;
    let v = ThroughputVerdict::new(
        id,
        subject.into(),
        ThroughputSource::Rate,
        ok.then_some(gib_s),
    );
    if ok {
        v.judged(Verdict::Info, format!("{gib_s:.2} GiB/s"), None)
    } else {
        v.judged(
            Verdict::Fail,
            format!("no usable figure ({gib_s})"),
            Some("The benchmark produced no rate: read its output.".into()),
        )
    }
}

/// The verdict of whatever [`parse_any`](crate::parse::parse_any) recognised; `None` for
/// `ibv_devinfo` (no bandwidth).
pub fn parsed(p: &Parsed) -> Option<ThroughputVerdict> {
    match p {
        Parsed::NcclTests(r) => Some(nccl_tests(r)),
        Parsed::Rdt(r) => Some(rdt(r)),
        Parsed::Perftest(r) => Some(perftest(r)),
        Parsed::IbvDevinfo(_) => None,
    }
}
