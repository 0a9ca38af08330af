//! The report every workflow run ends with ([`RunReport`]): steps with their checks and measurements, a
//! verdict, written as `report.md` and `report.json` into the out dir.
//!
//! One outcome vocabulary: a check judged by probe (a [`probe::Verdict`]: ok, info, warn, fail) is
//! recorded as that verdict's [`Status`] (`From<probe::Verdict>`), so a warning stays a warning; the two
//! statuses probe has no word for are a dry-run's `planned` and a `skip`. probe's own `Report` is the
//! host-facts report of `rdmakit probe`; this one is a workflow run's.

use std::path::Path;

use serde::Serialize;

use crate::error::ExecError;

/// Outcome of one check: a judged one is a [`probe::Verdict`] (`Pass` is its `Ok`), or not judged yet.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Checked and fine ([`probe::Verdict::Ok`]).
    Pass,
    /// Checked and likely to hurt (a slow path, a rate below the ok fraction): not a failure, never
    /// mistaken for information ([`probe::Verdict::Warn`]).
    Warn,
    /// Checked and wrong ([`probe::Verdict::Fail`]).
    Fail,
    /// Would be checked against a cluster (dry-run).
    Planned,
    /// Not run (with a reason).
    Skip,
    /// Informational ([`probe::Verdict::Info`]).
    Info,
}

impl From<probe::Verdict> for Status {
    fn from(v: probe::Verdict) -> Self {
        match v {
            probe::Verdict::Ok => Self::Pass,
            probe::Verdict::Info => Self::Info,
            probe::Verdict::Warn => Self::Warn,
            probe::Verdict::Fail => Self::Fail,
        }
    }
}

impl Status {
    /// The judged verdict; `None` for a check not run (`Planned`, `Skip`).
    pub fn verdict(self) -> Option<probe::Verdict> {
        match self {
            Self::Pass => Some(probe::Verdict::Ok),
            Self::Info => Some(probe::Verdict::Info),
            Self::Warn => Some(probe::Verdict::Warn),
            Self::Fail => Some(probe::Verdict::Fail),
            Self::Planned | Self::Skip => None,
        }
    }

    fn mark(self) -> &'static str {
        match self {
            Self::Pass => "PASS",
            Self::Warn => "WARN",
            Self::Fail => "FAIL",
            Self::Planned => "PLANNED",
            Self::Skip => "SKIP",
            Self::Info => "INFO",
        }
    }
}

/// One check or observation.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Check {
    /// Step it belongs to.
    pub step: String,
    /// What was checked.
    pub name: String,
    /// Outcome.
    pub status: Status,
    /// Evidence or the reason.
    pub detail: String,
}

/// A number the workflow measured (never filled in dry-run).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Measurement {
    /// Step it belongs to.
    pub step: String,
    /// Name, e.g. `eRDMA tx during RDT run`.
    pub name: String,
    /// Value.
    pub value: f64,
    /// Unit, e.g. `GiB`.
    pub unit: String,
}

/// A preformatted table (nccl-tests busbw, RDT iterations, ours-beside-peer benchmark rows): kept
/// verbatim, because a table flattened into one check line is unreadable.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Table {
    /// Step it belongs to.
    pub step: String,
    /// Caption.
    pub title: String,
    /// The rendered table (monospace text).
    pub text: String,
}

/// The overall result of a workflow run (a check's outcome is a [`Status`]).
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum RunVerdict {
    /// Every check passed against a cluster.
    Pass,
    /// At least one check failed.
    Fail,
    /// Dry-run: the plan is complete, nothing was measured.
    Planned,
    /// The workflow stopped with an error.
    Error,
    /// Ctrl-C.
    Interrupted,
}

/// The name [`RunVerdict`] had before probe's [`probe::Verdict`] became the one word for a check's
/// outcome; kept so callers can move at their pace.
pub type Verdict = RunVerdict;

impl RunVerdict {
    /// Upper-case word for humans.
    pub fn word(self) -> &'static str {
        match self {
            Self::Pass => "PASS",
            Self::Fail => "FAIL",
            Self::Planned => "PLANNED",
            Self::Error => "ERROR",
            Self::Interrupted => "INTERRUPTED",
        }
    }
}

/// The report being built while a workflow runs.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RunReport {
    /// Workflow title.
    pub title: String,
    /// Workflow file name.
    pub workflow: String,
    /// True in dry-run.
    pub dry_run: bool,
    /// Steps in order.
    pub steps: Vec<String>,
    /// Checks in order.
    pub checks: Vec<Check>,
    /// Measurements in order.
    pub measurements: Vec<Measurement>,
    /// Tables in order (absent from the JSON when there are none, e.g. in dry-run).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tables: Vec<Table>,
    /// Final verdict (set by [`RunReport::finish`]).
    pub verdict: Option<RunVerdict>,
    /// Why the verdict is what it is.
    pub summary: String,
}

impl RunReport {
    /// A new report.
    pub fn new(workflow: &str, dry_run: bool) -> Self {
        Self {
            workflow: workflow.to_owned(),
            title: workflow.to_owned(),
            dry_run,
            ..Self::default()
        }
    }

    /// Every text of the report passed through `f` (secret redaction before it is shown or written).
    pub fn map_text(&mut self, f: &dyn Fn(&str) -> String) {
        for t in [&mut self.title, &mut self.summary] {
            *t = f(t);
        }
        self.steps.iter_mut().for_each(|s| *s = f(s));
        for c in &mut self.checks {
            for t in [&mut c.step, &mut c.name, &mut c.detail] {
                *t = f(t);
            }
        }
        for m in &mut self.measurements {
            for t in [&mut m.step, &mut m.name, &mut m.unit] {
                *t = f(t);
            }
        }
        for t in &mut self.tables {
            for x in [&mut t.step, &mut t.title, &mut t.text] {
                *x = f(x);
            }
        }
    }

    /// The step checks are attributed to.
    pub fn current_step(&self) -> String {
        self.steps
            .last()
            .cloned()
            .unwrap_or_else(|| "(before the first step)".into())
    }

    /// Starts a step.
    pub fn begin_step(&mut self, title: &str) {
        self.steps.push(title.to_owned());
    }

    /// Adds a check.
    pub fn check(&mut self, name: &str, status: Status, detail: &str) {
        let step = self.current_step();
        self.checks.push(Check {
            step,
            name: name.to_owned(),
            status,
            detail: detail.to_owned(),
        });
    }

    /// Adds a measurement.
    pub fn measure(&mut self, name: &str, value: f64, unit: &str) {
        let step = self.current_step();
        self.measurements.push(Measurement {
            step,
            name: name.to_owned(),
            value,
            unit: unit.to_owned(),
        });
    }

    /// Adds a preformatted table.
    pub fn table(&mut self, title: &str, text: &str) {
        let step = self.current_step();
        self.tables.push(Table {
            step,
            title: title.to_owned(),
            text: text.trim_end().to_owned(),
        });
    }

    /// Computes the verdict from the checks.
    pub fn finish(&mut self) -> RunVerdict {
        let fails = self
            .checks
            .iter()
            .filter(|c| c.status == Status::Fail)
            .count();
        let passes = self
            .checks
            .iter()
            .filter(|c| c.status == Status::Pass)
            .count();
        let warns = self
            .checks
            .iter()
            .filter(|c| c.status == Status::Warn)
            .count();
        let planned = self
            .checks
            .iter()
            .filter(|c| c.status == Status::Planned)
            .count();
        let v = if fails > 0 {
            RunVerdict::Fail
        } else if self.dry_run {
            RunVerdict::Planned
        } else {
            RunVerdict::Pass
        };
        let warned = if warns > 0 {
            format!(", {warns} warned")
        } else {
            String::new()
        };
        self.summary = match v {
            RunVerdict::Fail => format!("{fails} check(s) failed, {passes} passed{warned}"),
            RunVerdict::Planned => format!("dry-run: {planned} check(s) planned, nothing measured"),
            _ => format!("{passes} check(s) passed{warned}"),
        };
        self.verdict = Some(v);
        v
    }

    /// Ends the report with an error or interruption.
    pub fn abort(&mut self, verdict: RunVerdict, why: &str) {
        self.verdict = Some(verdict);
        self.summary = why.to_owned();
    }

    /// Markdown rendering.
    pub fn to_markdown(&self) -> String {
        let verdict = self.verdict.map(RunVerdict::word).unwrap_or("UNFINISHED");
        let mut md = format!("# {}\n\n", self.title);
        md.push_str(&format!("- workflow: `{}`\n", self.workflow));
        md.push_str(&format!(
            "- mode: {}\n",
            if self.dry_run {
                "dry-run (no cluster contacted)"
            } else {
                "live cluster"
            }
        ));
        md.push_str(&format!("- verdict: **{verdict}** — {}\n", self.summary));
        // Checks recorded before the first step() still belong in the report.
        let before = "(before the first step)".to_owned();
        let orphans = self.checks.iter().any(|c| c.step == before)
            || self.measurements.iter().any(|m| m.step == before)
            || self.tables.iter().any(|t| t.step == before);
        let steps = orphans
            .then_some(&before)
            .into_iter()
            .chain(self.steps.iter());
        for step in steps {
            let checks: Vec<&Check> = self.checks.iter().filter(|c| &c.step == step).collect();
            let ms: Vec<&Measurement> = self
                .measurements
                .iter()
                .filter(|m| &m.step == step)
                .collect();
            let tables: Vec<&Table> = self.tables.iter().filter(|t| &t.step == step).collect();
            md.push_str(&format!("\n## {step}\n\n"));
            if checks.is_empty() && ms.is_empty() && tables.is_empty() {
                md.push_str("(actions only)\n");
            }
            for c in checks {
                md.push_str(&format!("- {} {}", c.status.mark(), c.name));
                if !c.detail.is_empty() {
                    md.push_str(&format!(": {}", c.detail.replace('\n', " ")));
                }
                md.push('\n');
            }
            for m in ms {
                md.push_str(&format!(
                    "- measured {}: {} {}\n",
                    m.name,
                    format_value(m.value),
                    m.unit
                ));
            }
            for t in tables {
                md.push_str(&format!("\n{}:\n\n```text\n{}\n```\n", t.title, t.text));
            }
        }
        md
    }

    /// Writes `report.md` and `report.json` into `dir`.
    pub fn write_to(&self, dir: &Path) -> Result<(), ExecError> {
        std::fs::create_dir_all(dir).map_err(|e| ExecError::io(dir, e))?;
        let md = dir.join("report.md");
        std::fs::write(&md, self.to_markdown()).map_err(|e| ExecError::io(&md, e))?;
        let js = dir.join("report.json");
        let text =
            serde_json::to_string_pretty(self).map_err(|e| ExecError::Input(e.to_string()))?;
        std::fs::write(&js, text + "\n").map_err(|e| ExecError::io(&js, e))?;
        Ok(())
    }
}

fn format_value(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else {
        format!("{v:.3}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts() {
        let mut r = RunReport::new("w.rhai", false);
        r.begin_step("a");
        r.check("x", Status::Pass, "");
        assert_eq!(r.finish(), RunVerdict::Pass);
        r.check("y", Status::Fail, "bad");
        assert_eq!(r.finish(), RunVerdict::Fail);
        let md = r.to_markdown();
        assert!(md.contains("- FAIL y: bad"), "{md}");
        let mut early = RunReport::new("w.rhai", false);
        early.check("before any step", Status::Info, "still reported");
        assert!(
            early
                .to_markdown()
                .contains("## (before the first step)\n\n- INFO before any step: still reported")
        );
        let mut d = RunReport::new("w.rhai", true);
        d.begin_step("a");
        d.check("x", Status::Planned, "");
        assert_eq!(d.finish(), RunVerdict::Planned);
    }

    #[test]
    fn a_warning_is_recorded_as_a_warning_and_does_not_fail_the_run() {
        // probe's verdicts map one to one: a warn used to be recorded as info (issue 23).
        for v in [
            probe::Verdict::Ok,
            probe::Verdict::Info,
            probe::Verdict::Warn,
            probe::Verdict::Fail,
        ] {
            assert_eq!(Status::from(v).verdict(), Some(v));
        }
        assert_eq!(Status::from(probe::Verdict::Warn), Status::Warn);
        assert_eq!(Status::Planned.verdict(), None);
        let mut r = RunReport::new("w.rhai", false);
        r.begin_step("bench");
        r.check("busbw vs expected", Status::Warn, "42 % of one NIC");
        r.check("wrong values", Status::Pass, "");
        assert_eq!(r.finish(), RunVerdict::Pass);
        assert_eq!(r.summary, "1 check(s) passed, 1 warned");
        assert!(
            r.to_markdown()
                .contains("- WARN busbw vs expected: 42 % of one NIC"),
            "{}",
            r.to_markdown()
        );
        assert_eq!(
            serde_json::to_value(&r.checks[0]).unwrap()["status"],
            "warn"
        );
    }
}
