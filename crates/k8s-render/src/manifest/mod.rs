//! Reading manifests a user hands us: one file, a multi-document stream, or stdin.
//!
//! Each YAML document becomes a [`Document`]: where it came from (source name, document index,
//! first line), its `apiVersion`/`kind`/`metadata.name`, and the content as a
//! [`serde_json::Value`]. While parsing we also record the line and column of every node so that
//! checkers can point at `spec.workerGroupSpecs[0].template.spec.hostNetwork` *and* say which line
//! of the file that is ([`Document::position`]).
//!
//! YAML is read the way Kubernetes reads it (sigs.k8s.io/yaml follows YAML 1.1): `yes`/`no`/`on`/
//! `off` are booleans and `0644` is an octal number, so what we check is what the API server sees.
//!
//! Documents are split at `---` / `...` marker lines before parsing, so that an error in one
//! document names that document's index, and empty documents (comments only) are skipped without
//! taking an index, as `kubectl` does. A `List` document (what `kubectl get -o yaml` prints) is
//! expanded into one document per item, with the items' own line numbers.

//!
//! Files: [`path`](FieldPath) (field paths), `stream` (splitting a stream into documents), `fast` (the
//! event-level parse most documents take), `node` (the serde-saphyr parse, for the rest and for every
//! error message), `positions` (the line table: each node's position against its parent's index),
//! `parallel` (parsing a stream on every core, in order), [`Location`] and [`Severity`] (what every
//! finding and violation says about where it is and how bad it is).

use std::io::Read;
use std::path::Path;

use serde::Serialize;
use serde_json::Value;

mod fast;
mod location;
mod node;
pub(crate) mod parallel;
mod path;
mod positions;
mod severity;
mod stream;

pub use location::Location;
pub use path::{FieldPath, PathSeg};
pub use severity::Severity;
pub use stream::{Documents, documents};

/// A line/column position in the source (both 1-based).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Position {
    /// 1-based line.
    pub line: u64,
    /// 1-based column (in characters).
    pub column: u64,
}

/// One YAML document of a manifest stream.
#[derive(Clone, Debug, Serialize)]
pub struct Document {
    /// File name the document came from (`<stdin>` for standard input, or whatever the caller
    /// named an in-memory stream).
    pub source: String,
    /// 0-based index among the non-empty documents of the stream.
    pub index: usize,
    /// 1-based line of the document's first content (after its `---` marker and comments), when
    /// the document was parsed from text.
    pub line: Option<u64>,
    /// `apiVersion`, e.g. `ray.io/v1`.
    pub api_version: String,
    /// `kind`, e.g. `RayCluster`.
    pub kind: String,
    /// `metadata.name` (or `metadata.generateName`), when set.
    pub name: Option<String>,
    /// The document's content.
    pub value: Value,
    #[serde(skip)]
    positions: positions::Positions,
    /// Mapping keys that appear twice in one mapping (the last value is kept in `value`).
    pub duplicate_keys: Vec<DuplicateKey>,
}

/// A key given twice in one YAML mapping. `kubectl apply` refuses such a document
/// (`mapping key "x" already defined`); other YAML readers silently keep one of the values.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DuplicateKey {
    /// Path of the repeated key.
    pub path: FieldPath,
    /// Line of the first occurrence.
    pub first_line: u64,
    /// Line of the repetition.
    pub line: u64,
}

impl Document {
    /// Wraps an in-memory object (for example a rendered one) as a document. It has no source
    /// positions, so checkers report paths only.
    pub fn from_value(
        source: impl Into<String>,
        index: usize,
        value: Value,
    ) -> Result<Self, ManifestError> {
        Self::build(
            source.into(),
            index,
            None,
            value,
            positions::Positions::default(),
            Vec::new(),
        )
    }

    fn build(
        source: String,
        index: usize,
        line: Option<u64>,
        value: Value,
        positions: positions::Positions,
        duplicate_keys: Vec<DuplicateKey>,
    ) -> Result<Self, ManifestError> {
        let Some(obj) = value.as_object() else {
            return Err(ManifestError::NotAMapping {
                source_name: source,
                doc: index,
                line,
                found: json_type_name(&value).to_owned(),
            });
        };
        let field = |name: &'static str| -> Result<String, ManifestError> {
            match obj.get(name) {
                Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.clone()),
                other => Err(ManifestError::MissingTypeField {
                    source_name: source.clone(),
                    doc: index,
                    line,
                    field: name,
                    found: other.map(describe_value),
                }),
            }
        };
        let api_version = field("apiVersion")?;
        let kind = field("kind")?;
        let meta = obj.get("metadata");
        let name = meta
            .and_then(|m| m.get("name"))
            .and_then(Value::as_str)
            .or_else(|| {
                meta.and_then(|m| m.get("generateName"))
                    .and_then(Value::as_str)
            })
            .map(str::to_owned);
        Ok(Self {
            source,
            index,
            line,
            api_version,
            kind,
            name,
            value,
            positions,
            duplicate_keys,
        })
    }

    /// `Kind name`, e.g. `RayCluster ray-erdma-cluster` (just the kind when unnamed).
    pub fn label(&self) -> String {
        match &self.name {
            Some(n) => format!("{} {n}", self.kind),
            None => self.kind.clone(),
        }
    }

    /// `file doc N (Kind name)`, the prefix used by every message about this document.
    pub fn describe(&self) -> String {
        format!("{} doc {} ({})", self.source, self.index, self.label())
    }

    /// The API group of `apiVersion` (empty for the core group).
    pub fn group(&self) -> &str {
        match self.api_version.split_once('/') {
            Some((g, _)) => g,
            None => "",
        }
    }

    /// The source position of a field, falling back to its nearest ancestor that has one
    /// (a missing field is reported where its parent is). Mapping values point at their key.
    pub fn position(&self, path: &FieldPath) -> Option<Position> {
        self.positions.get(path)
    }

    /// The source line of a field (see [`Document::position`]).
    pub fn line_of(&self, path: &FieldPath) -> Option<u64> {
        self.position(path).map(|p| p.line)
    }

    /// The value at `path`, if present.
    pub fn get(&self, path: &FieldPath) -> Option<&Value> {
        path.lookup(&self.value)
    }
}

/// Errors reading manifests. Every variant names the source and, where it applies, the
/// document index and line.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// The file could not be read.
    #[error("{source_name}: cannot read: {error}")]
    Io {
        /// File name.
        source_name: String,
        /// Underlying error.
        #[source]
        error: std::io::Error,
    },
    /// The input is not valid UTF-8.
    #[error("{source_name}: not UTF-8 text: {error}")]
    NotUtf8 {
        /// File name.
        source_name: String,
        /// Underlying error.
        #[source]
        error: std::str::Utf8Error,
    },
    /// The YAML of one document does not parse.
    #[error("{source_name} doc {doc}, line {line} column {column}: invalid YAML: {message}")]
    Yaml {
        /// File name.
        source_name: String,
        /// Document index.
        doc: usize,
        /// 1-based line in the file.
        line: u64,
        /// 1-based column.
        column: u64,
        /// The parser's explanation.
        message: String,
    },
    /// A document is not a mapping (a bare list or scalar).
    #[error(
        "{source_name} doc {doc}{}: expected a Kubernetes object (a mapping with apiVersion and kind), found {found}",
        fmt_line(*line)
    )]
    NotAMapping {
        /// File name.
        source_name: String,
        /// Document index.
        doc: usize,
        /// First line of the document.
        line: Option<u64>,
        /// What was found instead.
        found: String,
    },
    /// `apiVersion` or `kind` is missing or not a string.
    #[error(
        "{source_name} doc {doc}{}: {field} {} (every Kubernetes object needs apiVersion and kind, e.g. `apiVersion: ray.io/v1` and `kind: RayCluster`)",
        fmt_line(*line),
        match found { Some(v) => format!("must be a non-empty string, found {v}"), None => "is missing".to_owned() }
    )]
    MissingTypeField {
        /// File name.
        source_name: String,
        /// Document index.
        doc: usize,
        /// First line of the document.
        line: Option<u64>,
        /// `apiVersion` or `kind`.
        field: &'static str,
        /// The value found, if any.
        found: Option<String>,
    },
}

fn fmt_line(line: Option<u64>) -> String {
    match line {
        Some(l) => format!(" (line {l})"),
        None => String::new(),
    }
}

/// `integer 0`, `string "x"`, `mapping`, ... for messages.
pub(crate) fn describe_value(v: &Value) -> String {
    match v {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => format!("boolean {b}"),
        Value::Number(n) if n.is_f64() => format!("number {n}"),
        Value::Number(n) => format!("integer {n}"),
        Value::String(s) => {
            let shown: String = s.chars().take(60).collect();
            let ell = if s.chars().count() > 60 { "..." } else { "" };
            format!("string {}{ell}", Value::String(shown))
        }
        Value::Array(_) => "a list".to_owned(),
        Value::Object(_) => "a mapping".to_owned(),
    }
}

/// JSON type name of a value (`string`, `integer`, `number`, `boolean`, `array`, `object`, `null`).
pub(crate) fn json_type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Reads one file (`-` means standard input).
pub fn read_path(path: impl AsRef<Path>) -> Result<Vec<Document>, ManifestError> {
    let path = path.as_ref();
    if path.as_os_str() == "-" {
        return read_from("<stdin>", std::io::stdin().lock());
    }
    let name = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|error| ManifestError::Io {
        source_name: name.clone(),
        error,
    })?;
    parse_bytes(&name, &bytes)
}

/// Reads a whole stream (e.g. stdin) named `source` in messages.
pub fn read_from(source: &str, mut reader: impl Read) -> Result<Vec<Document>, ManifestError> {
    let mut bytes = Vec::new();
    reader
        .read_to_end(&mut bytes)
        .map_err(|error| ManifestError::Io {
            source_name: source.to_owned(),
            error,
        })?;
    parse_bytes(source, &bytes)
}

fn parse_bytes(source: &str, bytes: &[u8]) -> Result<Vec<Document>, ManifestError> {
    let text = std::str::from_utf8(bytes).map_err(|error| ManifestError::NotUtf8 {
        source_name: source.to_owned(),
        error,
    })?;
    parse_str(source, text)
}

/// Parses a YAML stream held in memory; `source` names it in messages.
///
/// ```
/// let docs = k8s_render::manifest::parse_str(
///     "pod.yaml",
///     "apiVersion: v1\nkind: Pod\nmetadata:\n  name: rdma-test\nspec:\n  hostNetwork: true\n",
/// )?;
/// let path = k8s_render::manifest::FieldPath::root().key("spec").key("hostNetwork");
/// assert_eq!(docs[0].label(), "Pod rdma-test");
/// assert_eq!(docs[0].line_of(&path), Some(6));
/// # Ok::<(), k8s_render::manifest::ManifestError>(())
/// ```
pub fn parse_str(source: &str, text: &str) -> Result<Vec<Document>, ManifestError> {
    documents(source, text).collect()
}
