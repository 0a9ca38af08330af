//! The log doctor: reads a whole log (NCCL, UCX/NIXL, Ray, ibverbs, BuildKit, registry,
//! `kubectl logs`/events output) and reports every known signature in order of first
//! appearance, with the evidence line, the cause and the fix — including the positive ones.

mod rules;
pub mod signatures;

use std::io::BufRead;
use std::sync::LazyLock;

use regex::{Regex, RegexSet};
use serde::Serialize;

use crate::error::{ProbeError, Result};
use crate::verdict::Verdict;

pub use signatures::{SIGNATURES, Signature, Source};

/// Longest evidence line kept (characters).
pub(crate) const MAX_EVIDENCE: usize = 400;
/// Line numbers kept per finding.
const MAX_LINES: usize = 50;

/// One diagnosed signature.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    /// Signature id.
    pub id: String,
    /// Severity.
    pub severity: Verdict,
    /// Who writes the line.
    pub source: Source,
    /// 1-based line number of the first occurrence.
    pub line: usize,
    /// That line (ANSI colours stripped, truncated to 400 characters).
    pub evidence: String,
    /// Why it happens (captures filled in).
    pub cause: String,
    /// What to do.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
    /// How many lines matched (same id and cause).
    pub occurrences: usize,
    /// Line numbers of the occurrences (first 50).
    pub lines: Vec<usize>,
}

/// The result of reading one log.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Diagnosis {
    /// Lines read.
    pub lines_read: usize,
    /// Findings, in order of first appearance.
    pub findings: Vec<Finding>,
    /// Worst severity (`ok` when only positive findings or none).
    pub verdict: Verdict,
}

impl Diagnosis {
    /// Findings at or above a severity.
    pub fn at_least(&self, v: Verdict) -> impl Iterator<Item = &Finding> {
        self.findings.iter().filter(move |f| f.severity >= v)
    }

    /// Whether a signature id was found.
    pub fn has(&self, id: &str) -> bool {
        self.findings.iter().any(|f| f.id == id)
    }
}

struct Compiled {
    sig: &'static Signature,
    re: Regex,
    context: Option<(Regex, usize)>,
}

/// The compiled knowledge base.
pub struct KnowledgeBase {
    compiled: Vec<Compiled>,
    set: RegexSet,
    ansi: Regex,
}

impl std::fmt::Debug for KnowledgeBase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KnowledgeBase")
            .field("signatures", &self.compiled.len())
            .finish()
    }
}

static BUILTIN: LazyLock<std::result::Result<KnowledgeBase, String>> =
    LazyLock::new(|| KnowledgeBase::compile(SIGNATURES));

impl KnowledgeBase {
    /// The built-in knowledge base (compiled once).
    pub fn builtin() -> Result<&'static KnowledgeBase> {
        BUILTIN.as_ref().map_err(|e| ProbeError::Invalid {
            path: "probe::doctor::SIGNATURES".into(),
            message: e.clone(),
        })
    }

    /// Compile a set of signatures; the error names the signature whose pattern is invalid.
    pub fn compile(sigs: &'static [Signature]) -> std::result::Result<Self, String> {
        let mut compiled = Vec::new();
        for s in sigs {
            let re = Regex::new(s.pattern).map_err(|e| format!("signature {}: {e}", s.id))?;
            let context = match s.context {
                Some((p, w)) => Some((
                    Regex::new(p).map_err(|e| format!("signature {} context: {e}", s.id))?,
                    w,
                )),
                None => None,
            };
            compiled.push(Compiled {
                sig: s,
                re,
                context,
            });
        }
        let set = RegexSet::new(sigs.iter().map(|s| s.pattern)).map_err(|e| e.to_string())?;
        let ansi = Regex::new(r"\x1b\[[0-9;?]*[ -/]*[@-~]").map_err(|e| e.to_string())?;
        Ok(Self {
            compiled,
            set,
            ansi,
        })
    }

    /// The signatures in this knowledge base.
    pub fn signatures(&self) -> impl Iterator<Item = &'static Signature> + '_ {
        self.compiled.iter().map(|c| c.sig)
    }

    /// Diagnose a whole log held in memory.
    pub fn diagnose_str(&self, text: &str) -> Diagnosis {
        if text.is_empty() {
            return self.diagnose_lines(&[]);
        }
        let lines: Vec<String> = text.split('\n').map(|l| self.clean(l)).collect();
        // A trailing newline does not make an extra line.
        let n = if text.ends_with('\n') {
            lines.len().saturating_sub(1)
        } else {
            lines.len()
        };
        self.diagnose_lines(&lines[..n])
    }

    /// Diagnose a log from a reader (file, stdin, `kubectl logs` pipe). Invalid UTF-8 is
    /// replaced, not rejected: logs often carry binary noise.
    pub fn diagnose_reader<R: BufRead>(&self, mut r: R) -> Result<Diagnosis> {
        let mut lines = Vec::new();
        let mut buf = Vec::new();
        loop {
            buf.clear();
            let n = r
                .read_until(b'\n', &mut buf)
                .map_err(|e| ProbeError::io("<log input>", e))?;
            if n == 0 {
                break;
            }
            lines.push(self.clean(&String::from_utf8_lossy(&buf)));
        }
        Ok(self.diagnose_lines(&lines))
    }

    fn clean(&self, line: &str) -> String {
        let l = line.trim_end_matches(['\n', '\r']);
        // Progress bars overwrite with \r: keep the last segment.
        let l = l.rsplit('\r').next().unwrap_or(l);
        if l.contains('\x1b') {
            self.ansi.replace_all(l, "").into_owned()
        } else {
            l.to_string()
        }
    }

    fn diagnose_lines(&self, lines: &[String]) -> Diagnosis {
        let mut findings: Vec<Finding> = Vec::new();
        // Context patterns are checked lazily per signature.
        for (idx, line) in lines.iter().enumerate() {
            let hits: Vec<usize> = self.set.matches(line).into_iter().collect();
            if hits.is_empty() {
                continue;
            }
            let mut matched_primary = false;
            let mut pending_fallbacks = Vec::new();
            for &i in &hits {
                let c = &self.compiled[i];
                if c.sig.fallback {
                    pending_fallbacks.push(i);
                    continue;
                }
                if self.record(c, lines, idx, &mut findings) {
                    matched_primary = true;
                }
            }
            if !matched_primary {
                for i in pending_fallbacks {
                    self.record(&self.compiled[i], lines, idx, &mut findings);
                }
            }
        }
        rules::post_pass(lines, &mut findings);
        let verdict = Verdict::worst(findings.iter().map(|f| f.severity));
        Diagnosis {
            lines_read: lines.len(),
            findings,
            verdict,
        }
    }

    fn record(&self, c: &Compiled, lines: &[String], idx: usize, out: &mut Vec<Finding>) -> bool {
        let line = &lines[idx];
        let Some(caps) = c.re.captures(line) else {
            return false;
        };
        if let Some((ctx, window)) = &c.context {
            let lo = idx.saturating_sub(*window);
            let hi = (idx + window + 1).min(lines.len());
            if !lines[lo..hi].iter().any(|l| ctx.is_match(l)) {
                return false;
            }
        }
        let fill = |t: &str| {
            let mut s = t.to_string();
            for g in 1..caps.len() {
                let v = caps.get(g).map(|m| m.as_str()).unwrap_or("");
                s = s.replace(&format!("{{{g}}}"), v);
            }
            s
        };
        let cause = fill(c.sig.cause);
        let fix = (!c.sig.fix.is_empty()).then(|| fill(c.sig.fix));
        if let Some(f) = out
            .iter_mut()
            .find(|f| f.id == c.sig.id && f.cause == cause)
        {
            f.occurrences += 1;
            if f.lines.len() < MAX_LINES {
                f.lines.push(idx + 1);
            }
            return true;
        }
        out.push(Finding {
            id: c.sig.id.to_string(),
            severity: c.sig.severity,
            source: c.sig.source,
            line: idx + 1,
            evidence: truncate(line.trim(), MAX_EVIDENCE),
            cause,
            fix,
            occurrences: 1,
            lines: vec![idx + 1],
        });
        true
    }
}

pub(crate) fn truncate(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

/// Diagnose text with the built-in knowledge base.
pub fn diagnose(text: &str) -> Result<Diagnosis> {
    Ok(KnowledgeBase::builtin()?.diagnose_str(text))
}

/// Diagnose a reader with the built-in knowledge base.
pub fn diagnose_reader<R: BufRead>(r: R) -> Result<Diagnosis> {
    KnowledgeBase::builtin()?.diagnose_reader(r)
}
