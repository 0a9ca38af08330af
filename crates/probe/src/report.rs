//! Reports: one shape for facts, doctor findings, counter proofs and preflight, serialisable to
//! JSON and renderable as a human table (comfy-table).

use comfy_table::{ContentArrangement, Table, presets};
use serde::{Deserialize, Serialize};

use crate::counters::{AbComparison, CounterDelta, TrafficProof};
use crate::doctor::Diagnosis;
use crate::expect::Judgement;
use crate::facts::HostFacts;
use crate::parse::{NcclTestsRun, PerftestRun, RdtRun};
use crate::preflight::PreflightResult;
use crate::throughput::ThroughputVerdict;
use crate::verdict::{Check, Verdict};

/// The expectation model in one line, printed under throughput tables.
pub const MODEL_NOTE: &str = "Expected bandwidth (probe::expect): GPUDirect = NIC line rate × NICs used × 0.9; \
staged = min(host copy: pinned D2H measured, else PCIe × 0.85; NIC: WRITE measured, else line × 0.9, × NICs used; \
staging stream, when measured); perftest = one NIC's line × 0.9. ok from the threshold (80 % unless the caller sets another), warn from 40 %, fail below.";

/// Default table width when the output is not a terminal.
pub const DEFAULT_WIDTH: u16 = 140;

/// One line of a report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReportItem {
    /// Check or signature id.
    pub id: String,
    /// What it is about.
    pub subject: String,
    /// Outcome.
    pub verdict: Verdict,
    /// What was found.
    pub detail: String,
    /// What to do.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
    /// A throughput figure against the expected bandwidth: the fractions, the model and its inputs
    /// (throughput verdicts only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expectation: Option<Judgement>,
}

/// A report: title, overall verdict, items.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Title.
    pub title: String,
    /// Worst verdict of the items.
    pub verdict: Verdict,
    /// Items in order.
    pub items: Vec<ReportItem>,
    /// Free-form notes shown under the table.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl Report {
    /// Build from checks.
    pub fn from_checks(title: impl Into<String>, checks: &[Check]) -> Self {
        let items: Vec<ReportItem> = checks
            .iter()
            .map(|c| ReportItem {
                id: c.id.clone(),
                subject: c.subject.clone(),
                verdict: c.verdict,
                detail: c.summary.clone(),
                fix: c.fix.clone(),
                expectation: None,
            })
            .collect();
        Self {
            title: title.into(),
            verdict: Verdict::worst(items.iter().map(|i| i.verdict)),
            items,
            notes: Vec::new(),
        }
    }

    /// Build from throughput verdicts: each item carries its judgement against the expectation (JSON
    /// `expectation`: fractions, expected rate, path, bound, inputs), and the table's detail reads
    /// "… is 58 % of the expected …; 58 % of one NIC, 27 % of the node … Model inputs: …", with the
    /// model's formula as a note.
    pub fn from_throughput(title: impl Into<String>, verdicts: &[ThroughputVerdict]) -> Self {
        let items: Vec<ReportItem> = verdicts
            .iter()
            .map(|v| {
                let c = v.check();
                ReportItem {
                    id: c.id,
                    subject: c.subject,
                    verdict: c.verdict,
                    detail: c.summary,
                    fix: c.fix,
                    expectation: v.expectation.clone(),
                }
            })
            .collect();
        let mut r = Self {
            title: title.into(),
            verdict: Verdict::worst(items.iter().map(|i| i.verdict)),
            items,
            notes: Vec::new(),
        };
        if r.items.iter().any(|i| i.expectation.is_some()) {
            r.notes.push(MODEL_NOTE.into());
        }
        r
    }

    /// Add a note.
    pub fn with_note(mut self, note: impl Into<String>) -> Self {
        self.notes.push(note.into());
        self
    }

    /// Pretty JSON.
    pub fn to_json(&self) -> crate::Result<String> {
        Ok(serde_json::to_string_pretty(self)?)
    }

    /// Rows as plain strings: verdict, id, subject, detail, fix.
    pub fn rows(&self) -> Vec<[String; 5]> {
        self.items
            .iter()
            .map(|i| {
                [
                    i.verdict.as_str().to_uppercase(),
                    i.id.clone(),
                    i.subject.clone(),
                    i.detail.clone(),
                    i.fix.clone().unwrap_or_default(),
                ]
            })
            .collect()
    }

    /// Human table at [`DEFAULT_WIDTH`] columns.
    pub fn render_table(&self) -> String {
        self.render_table_width(DEFAULT_WIDTH)
    }

    /// Human table at a given width.
    pub fn render_table_width(&self, width: u16) -> String {
        let mut t = new_table(width);
        t.set_header(vec!["", "check", "subject", "detail", "fix"]);
        for r in self.rows() {
            t.add_row(r.to_vec());
        }
        let mut out = format!(
            "{} — {}\n{t}\n",
            self.title,
            self.verdict.as_str().to_uppercase()
        );
        for n in &self.notes {
            out.push_str(n);
            out.push('\n');
        }
        out
    }
}

fn new_table(width: u16) -> Table {
    let mut t = Table::new();
    t.load_style(presets::UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_width(width);
    t
}

impl From<&HostFacts> for Report {
    fn from(f: &HostFacts) -> Self {
        Report::from_checks(format!("rdmakit probe ({})", f.root.display()), &f.checks)
    }
}

impl From<&Diagnosis> for Report {
    fn from(d: &Diagnosis) -> Self {
        let items: Vec<ReportItem> = d
            .findings
            .iter()
            .map(|f| ReportItem {
                id: f.id.clone(),
                subject: if f.occurrences > 1 {
                    format!("line {} (+{} more)", f.line, f.occurrences - 1)
                } else {
                    format!("line {}", f.line)
                },
                verdict: f.severity,
                detail: format!("{}\n> {}", f.cause, f.evidence),
                fix: f.fix.clone(),
                expectation: None,
            })
            .collect();
        let mut r = Report {
            title: format!("rdmakit doctor ({} lines)", d.lines_read),
            verdict: d.verdict,
            items,
            notes: Vec::new(),
        };
        if d.findings.is_empty() {
            r.notes.push("No known signature found. For NCCL, rerun with NCCL_DEBUG=INFO so the transport lines are logged.".into());
        }
        r
    }
}

impl From<&PreflightResult> for Report {
    fn from(p: &PreflightResult) -> Self {
        Report::from_checks("rdmakit preflight", &p.checks)
    }
}

impl From<&TrafficProof> for Report {
    fn from(p: &TrafficProof) -> Self {
        let mut c = Check::new("counters", p.device.clone(), p.verdict, p.summary.clone());
        c.fix = p.fix.clone();
        Report::from_checks("RDMA traffic proof", &[c])
    }
}

impl From<&Judgement> for Report {
    fn from(j: &Judgement) -> Self {
        let mut r = Report::from_checks("Bandwidth against the expectation", &[j.check("GPU→GPU")]);
        if let Some(i) = r.items.first_mut() {
            i.expectation = Some(j.clone());
        }
        r.with_note(MODEL_NOTE)
    }
}

impl From<&ThroughputVerdict> for Report {
    fn from(v: &ThroughputVerdict) -> Self {
        Report::from_throughput("Benchmark", std::slice::from_ref(v))
    }
}

impl From<&AbComparison> for Report {
    fn from(a: &AbComparison) -> Self {
        let mut c = Check::new(
            "ab-comparison",
            a.rdma_run.device.clone(),
            a.verdict,
            a.lines.join("; "),
        );
        c.fix = a.fix.clone();
        Report::from_checks(
            "RDMA vs NCCL_IB_DISABLE=1",
            &[
                Check::new(
                    "counters",
                    a.rdma_run.device.clone(),
                    a.rdma_run.verdict,
                    a.rdma_run.summary.clone(),
                ),
                c,
            ],
        )
    }
}

/// The node table of a preflight, like the runbook's
/// `kubectl get nodes -o custom-columns=NAME:...,GPU:...,ERDMA:...,GPU_NAME:...`.
pub fn nodes_table(p: &PreflightResult) -> String {
    let mut t = new_table(DEFAULT_WIDTH);
    t.set_header(vec![
        "NAME",
        "GPU",
        "RDMA",
        "RDMA RESOURCE",
        "GPU_NAME",
        "ELIGIBLE",
    ]);
    for n in &p.nodes {
        t.add_row(vec![
            n.name.clone(),
            n.gpus.to_string(),
            n.rdma.to_string(),
            n.rdma_resources.join(", "),
            n.gpu_model.clone().unwrap_or_default(),
            if n.eligible {
                "yes".into()
            } else {
                "no".into()
            },
        ]);
    }
    t.to_string()
}

/// The expectation and the inputs it came from, one row each (for a workflow report next to the
/// throughput verdicts): path, expected rate and bound, one NIC, the node's line rate, host copy, then
/// every input, measured or not.
pub fn expectation_table(e: &crate::expect::Expectation) -> String {
    let mut t = new_table(DEFAULT_WIDTH);
    t.set_header(vec!["model", "value"]);
    let gib = |v: f64| format!("{v:.1} GiB/s");
    let i = &e.inputs;
    let measured = |v: Option<f64>| v.map_or("not measured".to_string(), gib);
    let rows: Vec<(&str, String)> = vec![
        ("path", e.path.describe().to_string()),
        (
            "expected",
            format!("{} (limited by the {})", gib(e.gib_s), e.limited_by),
        ),
        ("one NIC", gib(e.one_nic_gib_s)),
        ("node line rate", gib(e.node_line_gib_s)),
        (
            "host copy",
            e.host_copy_gib_s.map_or("- (GPUDirect)".to_string(), gib),
        ),
        (
            "NICs",
            format!(
                "{} × {} Gb/s, {} used",
                i.nics_per_node, i.nic_line_gbps, i.nics_used
            ),
        ),
        (
            "GPUDirect",
            if i.gpudirect { "on" } else { "off" }.to_string(),
        ),
        ("PCIe", format!("Gen{} x{}", i.pcie_gen, i.pcie_lanes)),
        ("NIC WRITE", measured(i.nic_write_gib_s)),
        ("pinned D2H", measured(i.host_copy_gib_s)),
        ("staging stream", measured(i.stream_gib_s)),
    ];
    for (k, v) in rows {
        t.add_row(vec![k.to_string(), v]);
    }
    t.to_string()
}

/// Table of a counter delta (non-zero counters).
pub fn counters_table(d: &CounterDelta) -> String {
    let mut t = new_table(DEFAULT_WIDTH);
    t.set_header(vec!["counter", "delta"]);
    for (k, v) in d.deltas.iter().filter(|(_, v)| **v > 0) {
        t.add_row(vec![k.clone(), v.to_string()]);
    }
    format!("{} port {}\n{t}", d.device, d.port)
}

/// Table of an nccl-tests run.
pub fn nccl_tests_table(r: &NcclTestsRun) -> String {
    let mut t = new_table(DEFAULT_WIDTH);
    t.set_header(vec![
        "size (B)",
        "count",
        "type",
        "redop",
        "root",
        "oop time (us)",
        "oop algbw",
        "oop busbw",
        "oop #wrong",
        "ip time (us)",
        "ip algbw",
        "ip busbw",
        "ip #wrong",
    ]);
    let w = |m: Option<u64>| m.map_or("N/A".to_string(), |v| v.to_string());
    for row in &r.rows {
        let mut cells = vec![
            row.size.to_string(),
            row.count.to_string(),
            row.dtype.clone(),
            row.redop.clone(),
            row.root.map_or("-".into(), |x| x.to_string()),
        ];
        for m in [&row.out_of_place, &row.in_place] {
            match m {
                Some(m) => cells.extend([
                    format!("{:.1}", m.time_us),
                    format!("{:.2}", m.algbw_gbps),
                    format!("{:.2}", m.busbw_gbps),
                    w(m.wrong),
                ]),
                None => cells.extend(["-".into(), "-".into(), "-".into(), "-".into()]),
            }
        }
        t.add_row(cells);
    }
    let mut out = t.to_string();
    if let Some(avg) = r.avg_busbw_gbps {
        out.push_str(&format!("\nAvg bus bandwidth: {avg} GB/s"));
    }
    out
}

/// Table of an RDT demo run.
pub fn rdt_table(r: &RdtRun) -> String {
    let mut t = new_table(DEFAULT_WIDTH);
    t.set_header(vec![
        "iter",
        "size",
        "device",
        "time (ms)",
        "GiB/s",
        "checksum",
    ]);
    for i in &r.iterations {
        t.add_row(vec![
            i.iter.to_string(),
            i.size.clone(),
            i.device.clone(),
            format!("{:.1}", i.time_ms),
            format!("{:.2}", i.gib_per_s),
            if i.checksum_ok {
                "OK".into()
            } else {
                "BAD".into()
            },
        ]);
    }
    let mut out = t.to_string();
    if let Some(s) = r.steady_state_gib_per_s() {
        out.push_str(&format!("\nsteady state: {s:.2} GiB/s"));
    }
    if let Some((tr, ok)) = &r.final_status {
        out.push_str(&format!(
            "\nRDT over {tr}: {}",
            if *ok { "OK" } else { "FAILED" }
        ));
    }
    out
}

/// Table of a perftest run.
pub fn perftest_table(r: &PerftestRun) -> String {
    let mut t = new_table(DEFAULT_WIDTH);
    if let Some(unit) = r.unit {
        let u = match unit {
            crate::parse::BwUnit::Gbps => "Gb/s",
            crate::parse::BwUnit::MBps => "MB/s",
            crate::parse::BwUnit::MiBps => "MiB/s",
        };
        t.set_header(vec![
            "#bytes".to_string(),
            "#iterations".to_string(),
            format!("BW peak [{u}]"),
            format!("BW average [{u}]"),
            "MsgRate [Mpps]".to_string(),
        ]);
        for row in &r.bw {
            t.add_row(vec![
                row.bytes.to_string(),
                row.iterations.to_string(),
                format!("{:.2}", row.bw_peak),
                format!("{:.2}", row.bw_average),
                format!("{:.6}", row.msg_rate_mpps),
            ]);
        }
    } else {
        let mut header = vec!["#bytes".to_string(), "#iterations".to_string()];
        if let Some(first) = r.lat.first() {
            header.extend(first.values.keys().cloned());
        }
        t.set_header(header);
        for row in &r.lat {
            let mut cells = vec![row.bytes.to_string(), row.iterations.to_string()];
            cells.extend(row.values.values().map(|v| format!("{v:.2}")));
            t.add_row(cells);
        }
    }
    format!(
        "{}{}\n{t}",
        r.test.as_deref().unwrap_or("perftest"),
        r.device().map(|d| format!(" on {d}")).unwrap_or_default()
    )
}
