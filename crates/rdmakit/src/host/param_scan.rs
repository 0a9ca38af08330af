//! Which `--set` keys a workflow knows, decided before it runs: render values, `keep` (read by the host's
//! cleanup), and every `params::get("key", ...)` / `params::secret("key")` in the workflow and in the modules it imports (resolved as
//! `import` resolves them). Comments and string contents are skipped, so a commented-out read or a string that
//! mentions one does not count. A script that reads a key it computes (`params::get(name, ...)`) or all of them
//! (`params::all()`) cannot be judged from its text: then the keys it actually read are checked after the run.

use std::collections::BTreeSet;

use k8s_render::Values;
use rhai::Position;

use super::modules::is_value_key;
use super::resolver::LibResolver;

/// The parameters a workflow reads, from its text.
#[derive(Debug, Default, Clone)]
pub struct ParamUse {
    /// Keys read with a literal name.
    pub keys: BTreeSet<String>,
    /// Some read names its key at run time (or `params::all()`): the text alone does not tell.
    pub dynamic: bool,
}

/// Keys every workflow knows besides render values: `keep` (the host's cleanup reads it).
const HOST_KEYS: &[&str] = &["keep"];

impl ParamUse {
    /// Scans `source` and, transitively, every module it imports through `lib_dirs`.
    pub fn scan(source: &str, lib_dirs: &[std::path::PathBuf]) -> Self {
        let resolver = LibResolver {
            dirs: lib_dirs.to_vec(),
        };
        let mut out = Self::default();
        let mut seen = BTreeSet::new();
        let mut todo = vec![strip(source)];
        while let Some(code) = todo.pop() {
            out.read(&code);
            for module in literal_args(&code, "import") {
                if seen.insert(module.clone()) {
                    // A module that does not resolve fails the run itself, with its own error.
                    if let Ok((_, text)) = resolver.source(&module, Position::NONE) {
                        todo.push(strip(&text));
                    }
                }
            }
        }
        out
    }

    fn read(&mut self, code: &str) {
        if code.contains("params::all") {
            self.dynamic = true;
        }
        for call in ["params::get", "params::secret"] {
            let mut rest = code;
            while let Some(i) = rest.find(call) {
                rest = &rest[i + call.len()..];
                let args = rest.trim_start().strip_prefix('(').map(str::trim_start);
                match args
                    .and_then(|a| a.strip_prefix('"'))
                    .and_then(|a| a.split_once('"'))
                {
                    Some((key, _)) => {
                        self.keys.insert(key.to_owned());
                    }
                    None => self.dynamic = true,
                }
            }
        }
    }

    /// Whether `--set key=...` means something to this workflow (or may, when the reads are dynamic).
    pub fn knows(&self, key: &str) -> bool {
        is_value_key(key) || HOST_KEYS.contains(&key) || self.keys.contains(key)
    }

    /// The `--set` keys this workflow does not know, each with the nearest known key when one is close.
    pub fn unknown<'k>(&self, keys: impl IntoIterator<Item = &'k String>) -> Vec<String> {
        let known: Vec<&str> = Values::KEYS
            .iter()
            .map(|(k, _, _)| *k)
            .chain(HOST_KEYS.iter().copied())
            .chain(self.keys.iter().map(String::as_str))
            .collect();
        keys.into_iter()
            .filter(|k| !self.knows(k))
            .map(
                |k| match k8s_render::validate::suggest(k, known.iter().copied()) {
                    Some(s) => format!("{k:?} (did you mean {s:?}?)"),
                    None => format!("{k:?}"),
                },
            )
            .collect()
    }

    /// The workflow's own parameters, for error messages.
    pub fn listed(&self) -> String {
        let mut all: BTreeSet<&str> = self.keys.iter().map(String::as_str).collect();
        all.extend(HOST_KEYS);
        all.into_iter().collect::<Vec<_>>().join(", ")
    }
}

/// The literal first arguments of `word "..."` (used for `import "name"`).
fn literal_args(code: &str, word: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find(word) {
        let before_ok = rest[..i]
            .chars()
            .next_back()
            .is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
        rest = &rest[i + word.len()..];
        if before_ok
            && let Some(a) = rest.trim_start().strip_prefix('"')
            && let Some((name, _)) = a.split_once('"')
        {
            out.push(name.to_owned());
        }
    }
    out
}

/// The code with comments removed and the contents of strings blanked, except the string that follows
/// `params::get(` or `import` (kept, so its literal can be read).
fn strip(src: &str) -> String {
    let b: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < b.len() && b[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            i += 2;
            while i < b.len() && !(b[i] == '*' && b.get(i + 1) == Some(&'/')) {
                i += 1;
            }
            i += 2;
        } else if c == '"' || c == '`' {
            let keep = {
                let t = out.trim_end();
                t.ends_with("params::get(")
                    || t.ends_with("params::secret(")
                    || t.ends_with("import")
            };
            out.push(c);
            i += 1;
            while i < b.len() && b[i] != c {
                if b[i] == '\\' {
                    if keep {
                        out.push(b[i]);
                    }
                    i += 1;
                }
                if keep && i < b.len() {
                    out.push(b[i]);
                }
                i += 1;
            }
            if i < b.len() {
                out.push(c);
            }
            i += 1;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_literal_keys_not_comments_or_strings() {
        let u = ParamUse::scan(
            "let a = params::get(\"alpha\", 1);\n// params::get(\"commented\", 1)\n\
             let s = \"params::get(\\\"in_string\\\", 1)\";\nlet b = params::get( \"beta\" , false);",
            &[],
        );
        assert_eq!(u.keys.iter().collect::<Vec<_>>(), ["alpha", "beta"]);
        assert!(!u.dynamic);
    }

    #[test]
    fn computed_keys_and_all_are_dynamic() {
        assert!(ParamUse::scan("let k = \"x\"; params::get(k, 1);", &[]).dynamic);
        assert!(ParamUse::scan("let m = params::all();", &[]).dynamic);
    }

    #[test]
    fn imported_modules_are_scanned() {
        // The embedded scripts/lib modules resolve without a lib dir.
        let u = ParamUse::scan("import \"verify\" as verify;", &[]);
        assert!(!u.dynamic);
        let unknown = u.unknown(&["worker_replica".to_owned(), "keep".to_owned()]);
        assert_eq!(
            unknown,
            ["\"worker_replica\" (did you mean \"worker_replicas\"?)"]
        );
    }
}
