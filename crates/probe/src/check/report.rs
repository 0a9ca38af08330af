//! The evidence of one `rdmakit check`: a versioned JSON document (its JSON Schema is
//! `crates/probe/schemas/check-report.v1.schema.json`, and tests validate every report against it), the
//! terminal summary, and the exit code it maps to.

use serde::{Deserialize, Serialize};

use super::facts::PodFacts;
use super::matrix::{Cell, PairPlan};
use crate::verdict::{Check, Verdict};

/// The `schema` field of every report this version writes.
pub const SCHEMA: &str = "rdmakit.check/v1";

/// The report's JSON Schema, as committed.
pub const JSON_SCHEMA: &str = include_str!("../../schemas/check-report.v1.schema.json");

/// Exit codes of `rdmakit check` (documented in the README and `--help`).
pub mod exit {
    /// Everything passed (warnings allowed).
    pub const PASS: u8 = 0;
    /// A finding or a matrix cell failed.
    pub const FAIL: u8 = 1;
    /// Bad usage or input (unknown profile, bad flag).
    pub const INPUT: u8 = 2;
    /// The cluster failed us before a verdict (unreachable, a pod never started).
    pub const CLUSTER: u8 = 3;
    /// Interrupted (Ctrl-C); the pods were deleted.
    pub const INTERRUPTED: u8 = 130;
}

/// One node's part: the check pod's facts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeReport {
    /// The facts read inside the check pod on the node.
    pub facts: PodFacts,
}

/// One check run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckReport {
    /// Always [`SCHEMA`].
    pub schema: String,
    /// rdmakit's version.
    pub rdmakit_version: String,
    /// The vendor profile.
    pub profile: String,
    /// The namespace the check pods ran in.
    pub namespace: String,
    /// RFC 3339 start time (UTC).
    pub started: String,
    /// Seconds the check took.
    pub seconds: f64,
    /// The worst verdict of everything below.
    pub verdict: Verdict,
    /// The cluster's state (what `rdmakit preflight` checks).
    pub state: Vec<Check>,
    /// Per-node facts.
    pub nodes: Vec<NodeReport>,
    /// The environment and the pods' facts judged together.
    pub findings: Vec<Check>,
    /// The data-path matrix (empty with `--no-matrix` or fewer than two nodes).
    pub matrix: Vec<Cell>,
    /// Which pairs the matrix measured, what share of all ordered pairs that is, in how many rounds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pair_plan: Option<PairPlan>,
    /// What was skipped and why (`matrix: fewer than two nodes`).
    pub skipped: Vec<String>,
    /// The pods the check created (all deleted unless `--keep`).
    pub pods: Vec<String>,
    /// Whether they were kept.
    pub kept: bool,
}

impl CheckReport {
    /// The worst verdict of the state, the findings and the matrix.
    pub fn worst(&self) -> Verdict {
        Verdict::worst(
            self.state
                .iter()
                .map(|c| c.verdict)
                .chain(self.findings.iter().map(|c| c.verdict))
                .chain(self.matrix.iter().map(|c| c.verdict)),
        )
    }

    /// The exit code for this report: [`exit::FAIL`] when anything failed, else [`exit::PASS`].
    pub fn exit_code(&self) -> u8 {
        if self.worst() == Verdict::Fail {
            exit::FAIL
        } else {
            exit::PASS
        }
    }

    /// The one word for the whole run: PASS (nothing worse than info), WARN or FAIL.
    pub fn headline(&self) -> &'static str {
        match self.verdict {
            Verdict::Ok | Verdict::Info => "PASS",
            Verdict::Warn => "WARN",
            Verdict::Fail => "FAIL",
        }
    }

    /// Pretty JSON.
    pub fn to_json(&self) -> crate::Result<String> {
        Ok(serde_json::to_string_pretty(self)?)
    }

    /// The terminal summary: nodes, the matrix, then every finding that is not ok with its fix.
    pub fn render_text(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "rdmakit check --profile {} ({} node(s), {:.1} s): {}",
            self.profile,
            self.nodes.len(),
            self.seconds,
            self.headline()
        );
        let _ = writeln!(
            s,
            "\n{:<24} {:<28} {:>9} {:>9} {:>10}  INTERFACES",
            "NODE", "DEVICES", "MEMLOCK", "IPC_LOCK", "/DEV/SHM"
        );
        for n in &self.nodes {
            let f = &n.facts;
            let _ = writeln!(
                s,
                "{:<24} {:<28} {:>9} {:>9} {:>10}  {}",
                f.node,
                f.devices
                    .iter()
                    .map(|d| d.name.as_str())
                    .collect::<Vec<_>>()
                    .join(","),
                f.memlock.map_or("?".into(), |m| m.human()),
                f.cap_ipc_lock.map_or("?", |c| if c { "yes" } else { "no" }),
                f.shm_bytes.map_or("?".into(), crate::units::human_bytes),
                f.interfaces
                    .iter()
                    .map(|i| i.name.as_str())
                    .collect::<Vec<_>>()
                    .join(","),
            );
        }
        if let Some(p) = &self.pair_plan {
            let _ = writeln!(s, "\npairs: {}", p.describe());
        }
        if !self.matrix.is_empty() {
            let _ = writeln!(
                s,
                "\n{:<24} {:<24} {:<10} {:>8}  {:<5} SUMMARY",
                "FROM", "TO", "RAIL", "GiB/s", ""
            );
            for c in &self.matrix {
                let _ = writeln!(
                    s,
                    "{:<24} {:<24} {:<10} {:>8}  {:<5} {}",
                    c.from,
                    c.to,
                    c.device,
                    c.gib_s.map_or("-".into(), |r| format!("{r:.2}")),
                    c.verdict.as_str().to_uppercase(),
                    c.summary
                );
            }
        }
        for k in &self.skipped {
            let _ = writeln!(s, "skipped: {k}");
        }
        let _ = writeln!(s);
        for c in self
            .state
            .iter()
            .chain(&self.findings)
            .filter(|c| !matches!(c.verdict, Verdict::Ok | Verdict::Info))
        {
            let fix = c
                .fix
                .as_deref()
                .map(|f| format!("\n      fix: {f}"))
                .unwrap_or_default();
            let _ = writeln!(
                s,
                "{:<5} {} ({}): {}{fix}",
                c.verdict.as_str().to_uppercase(),
                c.id,
                c.subject,
                c.summary
            );
        }
        for c in self.matrix.iter().filter(|c| c.verdict != Verdict::Ok) {
            let fix = c
                .fix
                .as_deref()
                .map(|f| format!("\n      fix: {f}"))
                .unwrap_or_default();
            let _ = writeln!(
                s,
                "{:<5} matrix ({} -> {} on {}): {}{fix}",
                c.verdict.as_str().to_uppercase(),
                c.from,
                c.to,
                c.device,
                c.summary
            );
        }
        s
    }
}
