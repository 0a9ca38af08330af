//! Verdicts and checks: the common currency of facts, counters, doctor findings and preflight.

use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize, Serializer};

/// How a check came out. Ordered by severity, so `max()` of a set is the overall verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Fine; nothing to do.
    Ok,
    /// Worth knowing, not a problem by itself.
    Info,
    /// Likely to hurt (slow path, fragile setup); a fix is suggested.
    Warn,
    /// Will break RDMA (or already did); the fix is required.
    Fail,
}

impl Verdict {
    /// Lower-case name, as used in JSON and tables.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Ok => "ok",
            Verdict::Info => "info",
            Verdict::Warn => "warn",
            Verdict::Fail => "fail",
        }
    }

    /// `Ok` when a yes/no condition holds, `Fail` when it does not.
    pub fn ok_if(holds: bool) -> Verdict {
        if holds { Verdict::Ok } else { Verdict::Fail }
    }

    /// Nothing to fix: `ok` or `info`. What the `ok` flag of a script-facing result means.
    pub fn passes(self) -> bool {
        self <= Verdict::Info
    }

    /// The worst verdict of a set (`Ok` for an empty set).
    pub fn worst<I: IntoIterator<Item = Verdict>>(it: I) -> Verdict {
        it.into_iter().max().unwrap_or(Verdict::Ok)
    }
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One evaluated check: what was looked at, how it came out, and what to do about it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Check {
    /// Stable identifier (`memlock`, `nccl-version`, `device-port-state`, ...).
    pub id: String,
    /// What the check is about (`erdma_0 port 1`, `/proc/self/limits`, a node name...).
    pub subject: String,
    /// Outcome.
    pub verdict: Verdict,
    /// One line saying what was found.
    pub summary: String,
    /// What to do, when the verdict is not `ok`/`info` (sometimes also for `info`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl Check {
    /// A check with no fix.
    pub fn new(
        id: impl Into<String>,
        subject: impl Into<String>,
        verdict: Verdict,
        summary: impl Into<String>,
    ) -> Self {
        Self {
            id: id.into(),
            subject: subject.into(),
            verdict,
            summary: summary.into(),
            fix: None,
        }
    }

    /// Attach a fix.
    pub fn with_fix(mut self, fix: impl Into<String>) -> Self {
        self.fix = Some(fix.into());
        self
    }
}

/// Serialisers for results that scripts read: the [`Verdict`] under `verdict` beside the flag or word the
/// Rhai API has always returned (`ok: bool`, `status: "pass"`), both derived from the one verdict. Used as
/// `#[serde(flatten, serialize_with = "...")]` on a `verdict` field.
pub(crate) mod wire {
    use super::*;

    /// `verdict` and `ok` ([`Verdict::passes`]).
    pub(crate) fn with_ok<S: Serializer>(v: &Verdict, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(2))?;
        m.serialize_entry("verdict", v)?;
        m.serialize_entry("ok", &v.passes())?;
        m.end()
    }

    /// `verdict` and `status`: `pass` (`ok`/`info`), `warn` or `fail`.
    pub(crate) fn with_status<S: Serializer>(v: &Verdict, s: S) -> Result<S::Ok, S::Error> {
        let status = match v {
            Verdict::Ok | Verdict::Info => "pass",
            Verdict::Warn => "warn",
            Verdict::Fail => "fail",
        };
        let mut m = s.serialize_map(Some(2))?;
        m.serialize_entry("verdict", v)?;
        m.serialize_entry("status", status)?;
        m.end()
    }
}
