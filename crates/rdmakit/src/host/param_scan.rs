//! Which `--set` keys a workflow knows, decided before it runs: `keep` (read by the host's cleanup), every
//! `params::get("key", ...)` / `params::secret("key")` in the workflow and in the modules it imports
//! (resolved as `import` resolves them), and the render values it uses: those read by a system it renders
//! (`render::system("mpijob", ...)`, `render::stream`) or read as a field (`v.mpi_workers` of
//! `render::values`). Comments and string contents are skipped, so a commented-out read or a string that
//! mentions one does not count. A script that reads a key it computes (`params::get(name, ...)`) or all of
//! them (`params::all()`) cannot be judged from its text: then the keys it actually read are checked after
//! the run; one that renders a system it computes may use any render value.

use std::collections::BTreeSet;

use k8s_render::{System, Values, ValuesError};
use rhai::Position;

use super::resolver::LibResolver;

/// The parameters a workflow reads, from its text.
#[derive(Debug, Default, Clone)]
pub struct ParamUse {
    /// Keys read with a literal name.
    pub keys: BTreeSet<String>,
    /// Some read names its key at run time (or `params::all()`): the text alone does not tell.
    pub dynamic: bool,
    /// Systems rendered with a literal name (`render::system("mpijob", ...)`, `render::stream`).
    pub systems: BTreeSet<System>,
    /// Some render call names its system at run time: every render value may be read.
    pub render_dynamic: bool,
    /// Names read as fields (`v.mpi_workers`): a render value read from `render::values`' map.
    pub fields: BTreeSet<String>,
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
        for call in ["render::system", "render::stream"] {
            let mut rest = code;
            while let Some(i) = rest.find(call) {
                rest = &rest[i + call.len()..];
                let system = rest
                    .trim_start()
                    .strip_prefix('(')
                    .map(str::trim_start)
                    .and_then(|a| a.strip_prefix('"'))
                    .and_then(|a| a.split_once('"'))
                    .and_then(|(name, _)| name.parse::<System>().ok());
                match system {
                    Some(s) => {
                        self.systems.insert(s);
                    }
                    None => self.render_dynamic = true,
                }
            }
        }
        self.fields.extend(fields(code));
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
        HOST_KEYS.contains(&key) || self.keys.contains(key) || self.reads_value(key)
    }

    /// Whether `key` is a render value this workflow uses: a system it renders reads it, or it reads the
    /// field (`node_selector` for every `node_selector.` key).
    fn reads_value(&self, key: &str) -> bool {
        let Some(spec) = Values::key(key) else {
            return false;
        };
        let field = spec.name.split('.').next().unwrap_or(spec.name);
        self.render_dynamic
            || spec.systems.iter().any(|s| self.systems.contains(s))
            || self.fields.contains(field)
    }

    /// The render values this workflow uses.
    fn value_keys(&self) -> impl Iterator<Item = &'static str> + '_ {
        Values::KEYS
            .iter()
            .map(|k| k.name)
            .filter(|k| self.reads_value(k))
    }

    /// The `--set` keys this workflow does not know, each with the nearest known key when one is close:
    /// for a render value it does not use, the nearest one the systems it renders read.
    pub fn unknown<'k>(&self, keys: impl IntoIterator<Item = &'k String>) -> Vec<String> {
        let known: Vec<String> = self
            .value_keys()
            .chain(HOST_KEYS.iter().copied())
            .map(str::to_owned)
            .chain(self.keys.iter().cloned())
            .collect();
        let systems: Vec<System> = self.systems.iter().copied().collect();
        keys.into_iter()
            .filter(|k| !self.knows(k))
            .map(|k| {
                let hint = match Values::check_read_by(k, &systems) {
                    Err(ValuesError::NotRead { hint, .. }) => hint,
                    _ => k8s_render::validate::suggest(k, known.iter().map(String::as_str))
                        .map(str::to_owned),
                };
                let what = match Values::key(k) {
                    Some(spec) => format!(
                        " (a render value of {}, which this workflow does not render",
                        spec.systems
                            .iter()
                            .map(|s| s.name())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                    None => String::new(),
                };
                match (hint, what.is_empty()) {
                    (Some(h), true) => format!("{k:?} (did you mean {h:?}?)"),
                    (Some(h), false) => format!("{k:?}{what}; did you mean {h:?}?)"),
                    (None, true) => format!("{k:?}"),
                    (None, false) => format!("{k:?}{what})"),
                }
            })
            .collect()
    }

    /// The workflow's own parameters and the systems it renders, for error messages.
    pub fn listed(&self) -> String {
        let mut all: BTreeSet<&str> = self.keys.iter().map(String::as_str).collect();
        all.extend(HOST_KEYS);
        let params = all.into_iter().collect::<Vec<_>>().join(", ");
        if self.render_dynamic || self.systems.is_empty() {
            return params;
        }
        let systems: Vec<&str> = self.systems.iter().map(|s| s.name()).collect();
        format!("{params}; and the render values of {}", systems.join(", "))
    }
}

/// The names after a `.` that are not a number's digits: fields read (`v.mpi_workers`, `it.gpus`).
fn fields(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, _) in code.match_indices('.') {
        let name: String = code[i + 1..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        {
            out.push(name);
        }
    }
    out
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
                    || t.ends_with("render::system(")
                    || t.ends_with("render::stream(")
                    || t.ends_with("import")
            };
            out.push(c);
            i += 1;
            while i < b.len() && b[i] != c {
                // `${...}` in a backtick string is code (`${v.mpi_workers}` reads the field): kept, set
                // apart from the string by spaces.
                if c == '`' && !keep && b[i] == '$' && b.get(i + 1) == Some(&'{') {
                    let mut depth = 0;
                    out.push(' ');
                    while i < b.len() {
                        match b[i] {
                            '{' => depth += 1,
                            '}' => depth -= 1,
                            _ => {}
                        }
                        out.push(b[i]);
                        i += 1;
                        if depth == 0 && b[i - 1] == '}' {
                            break;
                        }
                    }
                    out.push(' ');
                    continue;
                }
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
        let u = ParamUse::scan(
            "import \"verify\" as verify;\nrender::system(\"raycluster\", \"p\", #{});",
            &[],
        );
        assert!(!u.dynamic);
        let unknown = u.unknown(&["worker_replica".to_owned(), "keep".to_owned()]);
        assert_eq!(
            unknown,
            ["\"worker_replica\" (did you mean \"worker_replicas\"?)"]
        );
    }

    #[test]
    fn render_values_count_only_for_the_systems_rendered_and_the_fields_read() {
        // The mpijob lib renders mpijob (and dra); the workflow reads `v.instance_type` itself.
        let u = ParamUse::scan(
            "import \"mpijob\" as mpijob;\nlet v = render::values(\"p\", #{});\nlet t = v.instance_type;",
            &[],
        );
        assert!(u.systems.contains(&System::MpiJob), "{u:?}");
        assert!(u.knows("mpi_workers") && u.knows("instance_type") && u.knows("node_selector.a/b"));
        assert!(!u.knows("worker_replicas") && !u.knows("size_mib"));
        let unknown = u.unknown(&["worker_replicas".to_owned()]);
        assert_eq!(unknown.len(), 1);
        assert!(
            unknown[0].contains("raycluster")
                && unknown[0].contains("did you mean \"mpi_workers\""),
            "{unknown:?}"
        );
        // A field read inside a template string's `${...}` counts too.
        let u = ParamUse::scan(
            "let v = render::values(\"p\", #{}); print(`n=${v.size_mib}`);",
            &[],
        );
        assert!(u.knows("size_mib") && !u.knows("iterations"));
        // A system named at run time may read anything.
        let u = ParamUse::scan("let s = \"image\"; render::system(s, \"p\", #{});", &[]);
        assert!(u.render_dynamic && u.knows("worker_replicas"));
    }
}
