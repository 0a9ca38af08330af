//! The log doctor: reads a log (NCCL, UCX/NIXL, Ray, ibverbs, BuildKit, registry,
//! `kubectl logs`/events output) a line at a time and reports every known signature in order of
//! first appearance, with the evidence line, the cause and the fix — including the positive ones.
//! Memory is bounded whatever the log's length (see [`Stream`]).

mod rules;
pub mod signatures;

use std::collections::VecDeque;
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
        let mut stream = self.stream();
        if !text.is_empty() {
            // A trailing newline does not make an extra line.
            let body = text.strip_suffix('\n').unwrap_or(text);
            for line in body.split('\n') {
                stream.push_line(line);
            }
        }
        stream.finish()
    }

    /// Diagnose a log from a reader (file, stdin, `kubectl logs` pipe), a line at a time in
    /// bounded memory. Invalid UTF-8 is replaced, not rejected: logs often carry binary noise.
    pub fn diagnose_reader<R: BufRead>(&self, mut r: R) -> Result<Diagnosis> {
        let mut stream = self.stream();
        let mut buf = Vec::new();
        loop {
            buf.clear();
            let n = r
                .read_until(b'\n', &mut buf)
                .map_err(|e| ProbeError::io("<log input>", e))?;
            if n == 0 {
                break;
            }
            stream.push_line(&String::from_utf8_lossy(&buf));
        }
        Ok(stream.finish())
    }

    /// A diagnosis fed a line at a time ([`Stream::push_line`]), for logs that never end
    /// (`kubectl logs -f`): it keeps only the lines a context pattern may still look at, the
    /// findings, and the few whole-log facts the rules need, so memory does not grow with the log.
    pub fn stream(&self) -> Stream<'_> {
        let window = self
            .compiled
            .iter()
            .filter_map(|c| c.context.as_ref().map(|(_, w)| *w))
            .max()
            .unwrap_or(0);
        Stream {
            kb: self,
            window,
            ring: VecDeque::new(),
            base: 0,
            next: 0,
            read: 0,
            findings: Vec::new(),
            facts: rules::LogFacts::default(),
        }
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
}

/// Most distinct findings (signature and cause) one diagnosis keeps; an endless log whose
/// captures vary (addresses, sizes) would otherwise grow without bound. Occurrences of those kept
/// are still counted.
const MAX_FINDINGS: usize = 1000;

/// A diagnosis in progress; see [`KnowledgeBase::stream`].
pub struct Stream<'k> {
    kb: &'k KnowledgeBase,
    /// The widest context window of any signature: a line is matched once this many lines after it
    /// were read (or the log ended).
    window: usize,
    /// Lines `base..read`: those a pending match or a context window may still read.
    ring: VecDeque<String>,
    base: usize,
    /// The next line (0-based) to match.
    next: usize,
    read: usize,
    findings: Vec<Finding>,
    facts: rules::LogFacts,
}

impl std::fmt::Debug for Stream<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stream")
            .field("lines_read", &self.read)
            .field("findings", &self.findings.len())
            .finish()
    }
}

impl Stream<'_> {
    /// Reads one line (its line end, if any, is ignored) and returns the findings it made new —
    /// findings of this line or of one up to the widest context window before it — in order.
    pub fn push_line(&mut self, raw: &str) -> Vec<Finding> {
        let line = self.kb.clean(raw);
        self.facts.see(self.read, &line);
        self.ring.push_back(line);
        self.read += 1;
        let before = self.findings.len();
        while self.next + self.window < self.read {
            self.match_line(self.next);
            self.next += 1;
        }
        // Keep what a context window of a line still to be matched can reach.
        while self.base + self.window < self.next {
            self.ring.pop_front();
            self.base += 1;
        }
        self.findings[before..].to_vec()
    }

    /// Lines read so far.
    pub fn lines_read(&self) -> usize {
        self.read
    }

    /// Matches the lines still pending, runs the whole-log rules, and returns the diagnosis.
    pub fn finish(mut self) -> Diagnosis {
        while self.next < self.read {
            self.match_line(self.next);
            self.next += 1;
        }
        rules::post_pass(&self.facts, &mut self.findings);
        let verdict = Verdict::worst(self.findings.iter().map(|f| f.severity));
        Diagnosis {
            lines_read: self.read,
            findings: self.findings,
            verdict,
        }
    }

    fn match_line(&mut self, idx: usize) {
        let kb = self.kb;
        let line = &self.ring[idx - self.base];
        let hits: Vec<usize> = kb.set.matches(line).into_iter().collect();
        if hits.is_empty() {
            return;
        }
        let mut matched_primary = false;
        let mut pending_fallbacks = Vec::new();
        for &i in &hits {
            let c = &kb.compiled[i];
            if c.sig.fallback {
                pending_fallbacks.push(i);
                continue;
            }
            if self.record(c, idx) {
                matched_primary = true;
            }
        }
        if !matched_primary {
            for i in pending_fallbacks {
                self.record(&kb.compiled[i], idx);
            }
        }
    }

    fn record(&mut self, c: &Compiled, idx: usize) -> bool {
        let line = &self.ring[idx - self.base];
        let Some(caps) = c.re.captures(line) else {
            return false;
        };
        if let Some((ctx, window)) = &c.context {
            let lo = idx.saturating_sub(*window).max(self.base);
            let hi = (idx + window + 1).min(self.read);
            if !self
                .ring
                .range(lo - self.base..hi - self.base)
                .any(|l| ctx.is_match(l))
            {
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
        if let Some(f) = self
            .findings
            .iter_mut()
            .find(|f| f.id == c.sig.id && f.cause == cause)
        {
            f.occurrences += 1;
            if f.lines.len() < MAX_LINES {
                f.lines.push(idx + 1);
            }
            return true;
        }
        if self.findings.len() >= MAX_FINDINGS {
            return true;
        }
        let fix = (!c.sig.fix.is_empty()).then(|| fill(c.sig.fix));
        self.findings.push(Finding {
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
