//! Secret values a run must never write out: `--set-secret KEY=VALUE` (and parameters a workflow declares
//! secret with `params::secret`), the registry credentials a merge read, the data of Secrets a script
//! listed.
//!
//! Two layers. Scripts never hold a secret's text: `params::get`/`params::secret` give them an opaque value
//! that prints as `<secret KEY>`, which only `kube::exec`'s `stdin` and `kube::apply_secret` accept, so it
//! cannot reach an argv, a report, a plan or a log by string building. And whatever comes back from the
//! cluster (exec output, logs, fields) and whatever the run writes (reports, plan.sh, plan.json) passes
//! through a [`Redactor`] holding every secret text the run has seen, so an exec that `cat`s a mounted
//! Secret cannot undo the redaction.

use std::sync::Mutex;

/// Text that must never be shown: its `Debug` is `<redacted>`.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct SecretText(String);

impl SecretText {
    /// Wraps a secret.
    pub fn new(text: impl Into<String>) -> Self {
        Self(text.into())
    }

    /// The secret itself, for the one place that sends it (a Secret's data, an exec's stdin).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for SecretText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// The environment variable plan.sh reads a secret parameter from (`RDMAKIT_SECRET_REGISTRY_PASSWORD`).
pub fn env_var(key: &str) -> String {
    crate::plan::shell_var("RDMAKIT_SECRET_", key)
}

/// Shorter values cannot be told from ordinary text; they are still never handed to scripts.
const MIN_REDACTED_LEN: usize = 4;

/// Every secret text a run has seen, and what replaces it in anything shown or written.
#[derive(Debug, Default)]
pub struct Redactor {
    values: Mutex<Vec<(String, SecretText)>>,
}

impl Redactor {
    /// Adds `value` (and its base64 form, as a Secret's `data` holds it) under `label`.
    pub fn add(&self, label: &str, value: &str) {
        let mut v = self.values.lock().unwrap_or_else(|e| e.into_inner());
        for text in [value.to_owned(), base64(value.as_bytes())] {
            if text.len() >= MIN_REDACTED_LEN && !v.iter().any(|(_, s)| s.expose() == text) {
                v.push((label.to_owned(), SecretText::new(text)));
            }
        }
        // Longest first, so a value that contains another is replaced whole.
        v.sort_by_key(|(_, s)| std::cmp::Reverse(s.expose().len()));
    }

    /// Adds the text a Secret's `data` value (base64) stands for, and the base64 itself.
    pub fn add_base64(&self, label: &str, data: &str) {
        match unbase64(data) {
            Some(plain) => self.add(label, &plain),
            None => self.add(label, data),
        }
    }

    /// `text` with every known secret replaced by `<redacted LABEL>`.
    pub fn redact(&self, text: &str) -> String {
        let v = self.values.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = text.to_owned();
        for (label, s) in v.iter() {
            if out.contains(s.expose()) {
                out = out.replace(s.expose(), &format!("<redacted {label}>"));
            }
        }
        out
    }

    /// True when nothing is known.
    pub fn is_empty(&self) -> bool {
        self.values
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
    }
}

/// Standard base64 with padding (what Kubernetes stores in a Secret's `data`).
fn base64(bytes: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(char::from(ABC[((n >> shift) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Decodes standard base64 (padding optional) into text; `None` when it is not base64 or not UTF-8.
fn unbase64(s: &str) -> Option<String> {
    let mut bits = 0u32;
    let mut n = 0;
    let mut out = Vec::with_capacity(s.len() / 4 * 3);
    for c in s.trim_end_matches('=').bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        };
        bits = (bits << 6) | u32::from(v);
        n += 6;
        if n >= 8 {
            n -= 8;
            out.push(((bits >> n) & 0xff) as u8);
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_standard_alphabet() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"hunter22"), "aHVudGVyMjI=");
        assert_eq!(unbase64("aHVudGVyMjI=").as_deref(), Some("hunter22"));
        assert_eq!(unbase64("Zm8").as_deref(), Some("fo"));
        assert_eq!(unbase64("not base64!"), None);
    }

    #[test]
    fn redaction_covers_plain_and_base64_forms_longest_first() {
        let r = Redactor::default();
        assert!(r.is_empty());
        r.add("pw", "hunter22");
        r.add("short", "ab");
        r.add("pw2", "hunter22-and-more");
        let shown = r.redact("a hunter22-and-more b hunter22 c aHVudGVyMjI= d ab");
        assert_eq!(
            shown,
            "a <redacted pw2> b <redacted pw> c <redacted pw> d ab"
        );
        assert_eq!(format!("{:?}", SecretText::new("x")), "<redacted>");
        assert_eq!(
            env_var("registry-password"),
            "RDMAKIT_SECRET_REGISTRY_PASSWORD"
        );
    }
}
