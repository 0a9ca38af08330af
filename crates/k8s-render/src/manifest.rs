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

use std::collections::BTreeMap;
use std::fmt;
use std::io::Read;
use std::path::Path;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Serialize, Serializer};
use serde_json::{Map, Number, Value};
use serde_saphyr::{Location, Spanned};

/// How serious a validation violation or lint finding is.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Worth knowing; nothing breaks.
    Info,
    /// Likely to hurt (slow path, fragile setup) but can work.
    Warning,
    /// Breaks the workload or the RDMA path.
    Error,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Error => "error",
        })
    }
}

/// One step of a [`FieldPath`]: a mapping key or a sequence index.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PathSeg {
    /// A mapping key.
    Key(String),
    /// A sequence index (0-based).
    Index(usize),
}

/// A path to a field inside a document, displayed as `spec.workerGroupSpecs[0].template.spec`.
///
/// Keys that are not plain identifiers (`nvidia.com/gpu`, `ray.io/node-type`) are displayed
/// quoted in brackets: `resources.limits["nvidia.com/gpu"]`. The empty path is the document root
/// and displays as `(root)`.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FieldPath(Vec<PathSeg>);

impl FieldPath {
    /// The document root.
    pub fn root() -> Self {
        Self(Vec::new())
    }

    /// Builds a path from dotted keys only (`"spec.template.spec"`), for callers that need no
    /// indexes or special keys.
    pub fn from_dotted(dotted: &str) -> Self {
        Self(
            dotted
                .split('.')
                .filter(|s| !s.is_empty())
                .map(|s| PathSeg::Key(s.to_owned()))
                .collect(),
        )
    }

    /// Builds a path from segments.
    pub fn from_segments(segments: Vec<PathSeg>) -> Self {
        Self(segments)
    }

    /// The rest of this path below `prefix`, or `None` when `prefix` is not a prefix of it.
    pub fn strip_prefix(&self, prefix: &FieldPath) -> Option<FieldPath> {
        self.0
            .strip_prefix(prefix.0.as_slice())
            .map(|rest| Self(rest.to_vec()))
    }

    /// This path extended by a mapping key.
    #[must_use]
    pub fn key(&self, key: &str) -> Self {
        let mut segs = self.0.clone();
        segs.push(PathSeg::Key(key.to_owned()));
        Self(segs)
    }

    /// This path extended by a sequence index.
    #[must_use]
    pub fn index(&self, index: usize) -> Self {
        let mut segs = self.0.clone();
        segs.push(PathSeg::Index(index));
        Self(segs)
    }

    /// The segments, outermost first.
    pub fn segments(&self) -> &[PathSeg] {
        &self.0
    }

    /// The enclosing path, or `None` at the root.
    pub fn parent(&self) -> Option<Self> {
        if self.0.is_empty() {
            None
        } else {
            Some(Self(self.0[..self.0.len() - 1].to_vec()))
        }
    }

    /// True for the document root.
    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }

    /// The last mapping key of the path, if the path ends in one.
    pub fn last_key(&self) -> Option<&str> {
        match self.0.last() {
            Some(PathSeg::Key(k)) => Some(k),
            _ => None,
        }
    }

    /// True when any key segment equals `key`.
    pub fn contains_key(&self, key: &str) -> bool {
        self.0
            .iter()
            .any(|s| matches!(s, PathSeg::Key(k) if k == key))
    }

    /// Looks the path up in a value.
    pub fn lookup<'v>(&self, value: &'v Value) -> Option<&'v Value> {
        let mut cur = value;
        for seg in &self.0 {
            cur = match seg {
                PathSeg::Key(k) => cur.as_object()?.get(k)?,
                PathSeg::Index(i) => cur.as_array()?.get(*i)?,
            };
        }
        Some(cur)
    }
}

fn is_plain_key(key: &str) -> bool {
    !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("(root)");
        }
        for (i, seg) in self.0.iter().enumerate() {
            match seg {
                PathSeg::Key(k) if is_plain_key(k) => {
                    if i > 0 {
                        f.write_str(".")?;
                    }
                    f.write_str(k)?;
                }
                PathSeg::Key(k) => write!(f, "[{}]", Value::String(k.clone()))?,
                PathSeg::Index(n) => write!(f, "[{n}]")?,
            }
        }
        Ok(())
    }
}

impl Serialize for FieldPath {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

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
    positions: BTreeMap<FieldPath, Position>,
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
            BTreeMap::new(),
            Vec::new(),
        )
    }

    fn build(
        source: String,
        index: usize,
        line: Option<u64>,
        value: Value,
        positions: BTreeMap<FieldPath, Position>,
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
        let mut p = Some(path.clone());
        while let Some(cur) = p {
            if let Some(pos) = self.positions.get(&cur) {
                return Some(*pos);
            }
            p = cur.parent();
        }
        None
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

/// The documents of a YAML stream one at a time, so a caller that validates or lints each and
/// drops it holds one document's tree at a time (`parse_str` collects them all). After an
/// error the iterator ends.
///
/// ```
/// let text = "apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: b}\n";
/// let names: Vec<String> = k8s_render::manifest::documents("ns.yaml", text)
///     .map(|d| d.map(|d| d.label()))
///     .collect::<Result<_, _>>()?;
/// assert_eq!(names, ["Namespace a", "Namespace b"]);
/// # Ok::<(), k8s_render::manifest::ManifestError>(())
/// ```
pub fn documents(source: &str, text: &str) -> Documents {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    Documents {
        source: source.to_owned(),
        chunks: split_documents(text).into_iter(),
        emitted: 0,
        pending: std::collections::VecDeque::new(),
        failed: false,
    }
}

/// Iterator over the documents of a stream; see [`documents`].
#[derive(Debug)]
pub struct Documents {
    source: String,
    chunks: std::vec::IntoIter<Chunk>,
    emitted: usize,
    pending: std::collections::VecDeque<Document>,
    failed: bool,
}

impl Iterator for Documents {
    type Item = Result<Document, ManifestError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(d) = self.pending.pop_front() {
                self.emitted += 1;
                return Some(Ok(d));
            }
            if self.failed {
                return None;
            }
            let chunk = self.chunks.next()?;
            match chunk_documents(&self.source, &chunk, self.emitted) {
                Ok(docs) => self.pending.extend(docs),
                Err(e) => {
                    self.failed = true;
                    return Some(Err(e));
                }
            }
        }
    }
}

/// The documents of one `---` chunk: none (empty or null), one, or the items of a `List`.
/// `first` is the index the first of them gets.
fn chunk_documents(
    source: &str,
    chunk: &Chunk,
    first: usize,
) -> Result<Vec<Document>, ManifestError> {
    let mut docs: Vec<Document> = Vec::new();
    if !chunk.has_content() {
        return Ok(docs);
    }
    let index = first;
    let line_offset = chunk.first_line - 1;
    let node = parse_chunk(&chunk.text).map_err(|e| {
        let loc = e.location().unwrap_or(Location::UNKNOWN);
        let message = e.render_with_options(serde_saphyr::render_options! {
            snippets: serde_saphyr::SnippetMode::Off,
        });
        ManifestError::Yaml {
            source_name: source.to_owned(),
            doc: index,
            line: if loc.line() > 0 {
                loc.line() + line_offset
            } else {
                chunk.first_line
            },
            column: loc.column().max(1),
            message: strip_location_suffix(&message),
        }
    })?;
    let Some(node) = node else { return Ok(docs) };
    let mut positions = BTreeMap::new();
    let mut dups = Vec::new();
    let value = node.into_value(
        FieldPath::root(),
        None,
        line_offset,
        &mut Sink {
            positions: &mut positions,
            duplicates: &mut dups,
        },
    );
    if value.is_null() {
        return Ok(docs);
    }
    // `kubectl get -o yaml` prints a `List` whose items are the objects: check each item.
    if let Some(items) = list_items(&value) {
        for (i, item) in items.iter().enumerate() {
            let prefix = FieldPath::root().key("items").index(i);
            let sub: BTreeMap<FieldPath, Position> = positions
                .iter()
                .filter_map(|(p, pos)| p.strip_prefix(&prefix).map(|rest| (rest, *pos)))
                .collect();
            let line = sub.get(&FieldPath::root()).map(|p| p.line);
            let item_dups = dups
                .iter()
                .filter_map(|d| {
                    d.path
                        .strip_prefix(&prefix)
                        .map(|path| DuplicateKey { path, ..d.clone() })
                })
                .collect();
            docs.push(Document::build(
                source.to_owned(),
                first + docs.len(),
                line,
                item.clone(),
                sub,
                item_dups,
            )?);
        }
        return Ok(docs);
    }
    let start = chunk.first_content_line();
    docs.push(Document::build(
        source.to_owned(),
        index,
        Some(start),
        value,
        positions,
        dups,
    )?);
    Ok(docs)
}

/// The items of a `kind: List` (or `RayClusterList`, ...) document.
fn list_items(value: &Value) -> Option<&Vec<Value>> {
    let kind = value.get("kind")?.as_str()?;
    if !kind.ends_with("List") || value.get("apiVersion").is_none() {
        return None;
    }
    value.get("items")?.as_array()
}

/// The parser appends ` at line L column C` with chunk-local numbers; we report our own.
fn strip_location_suffix(message: &str) -> String {
    let first = message.lines().next().unwrap_or(message);
    let mut text = match first.rfind(" at line ") {
        Some(i) => first[..i].to_owned(),
        None => first.to_owned(),
    };
    // The parser's advice about its own options means nothing to someone editing a manifest.
    if let Some(i) = text.find(", set DuplicateKeyPolicy") {
        text.truncate(i);
        text.push_str(" (each key may appear only once in a mapping)");
    }
    text
}

fn parse_chunk(text: &str) -> Result<Option<Node>, serde_saphyr::Error> {
    // Duplicate keys reach the visitor, which records them: a duplicate is a finding on the
    // document (the API server rejects it), not unreadable input.
    let options = serde_saphyr::options! {
        legacy_octal_numbers: true,
        with_snippet: false,
        duplicate_keys: serde_saphyr::DuplicateKeyPolicy::PassThrough,
    };
    serde_saphyr::from_str_with_options::<Option<Spanned<NodeKind>>>(text, options)
        .map(|n| n.map(Node::from))
}

#[derive(Debug)]
struct Chunk {
    first_line: u64,
    text: String,
}

impl Chunk {
    fn content_lines(&self) -> impl Iterator<Item = (u64, &str)> {
        self.text.lines().enumerate().filter_map(|(i, l)| {
            let rest = if is_marker(l, "---") { &l[3..] } else { l };
            let t = rest.trim();
            (!t.is_empty() && !t.starts_with('#')).then_some((self.first_line + i as u64, t))
        })
    }

    fn has_content(&self) -> bool {
        self.content_lines().next().is_some()
    }

    fn first_content_line(&self) -> u64 {
        self.content_lines()
            .next()
            .map(|(l, _)| l)
            .unwrap_or(self.first_line)
    }
}

fn is_marker(line: &str, marker: &str) -> bool {
    line.strip_prefix(marker)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t', '\r', '\n']))
}

/// Splits a stream at `---` (start) and `...` (end) marker lines. YAML forbids these markers at
/// column 0 inside content, so a line-based split is exact.
fn split_documents(text: &str) -> Vec<Chunk> {
    let mut chunks = Vec::new();
    let mut cur = Chunk {
        first_line: 1,
        text: String::new(),
    };
    for (i, line) in text.split_inclusive('\n').enumerate() {
        let lineno = i as u64 + 1;
        if is_marker(line, "---") {
            chunks.push(std::mem::replace(
                &mut cur,
                Chunk {
                    first_line: lineno,
                    text: line.to_owned(),
                },
            ));
        } else if is_marker(line, "...") {
            chunks.push(std::mem::replace(
                &mut cur,
                Chunk {
                    first_line: lineno + 1,
                    text: String::new(),
                },
            ));
        } else {
            cur.text.push_str(line);
        }
    }
    chunks.push(cur);
    chunks
}

/// A parsed YAML node with its position, before conversion to JSON.
struct Node {
    loc: Location,
    kind: NodeKind,
}

impl From<Spanned<NodeKind>> for Node {
    fn from(s: Spanned<NodeKind>) -> Self {
        Node {
            loc: s.referenced,
            kind: s.value,
        }
    }
}

enum NodeKind {
    Null,
    Bool(bool),
    Int(i64),
    UInt(u64),
    Float(f64),
    Str(String),
    Seq(Vec<Node>),
    Map(Vec<(String, Location, Node)>),
}

/// Where [`Node::into_value`] records positions and duplicate keys.
struct Sink<'a> {
    positions: &'a mut BTreeMap<FieldPath, Position>,
    duplicates: &'a mut Vec<DuplicateKey>,
}

impl Node {
    fn into_value(
        self,
        path: FieldPath,
        key_loc: Option<Location>,
        line_offset: u64,
        sink: &mut Sink<'_>,
    ) -> Value {
        let loc = key_loc.unwrap_or(self.loc);
        if loc.line() > 0 {
            sink.positions.insert(
                path.clone(),
                Position {
                    line: loc.line() + line_offset,
                    column: loc.column(),
                },
            );
        }
        match self.kind {
            NodeKind::Null => Value::Null,
            NodeKind::Bool(b) => Value::Bool(b),
            NodeKind::Int(i) => Value::Number(i.into()),
            NodeKind::UInt(u) => Value::Number(u.into()),
            // NaN/inf have no JSON form; Kubernetes rejects them too, so keep them as text.
            NodeKind::Float(f) => Number::from_f64(f)
                .map(Value::Number)
                .unwrap_or_else(|| Value::String(f.to_string())),
            NodeKind::Str(s) => Value::String(s),
            NodeKind::Seq(items) => Value::Array(
                items
                    .into_iter()
                    .enumerate()
                    .map(|(i, n)| n.into_value(path.index(i), None, line_offset, sink))
                    .collect(),
            ),
            NodeKind::Map(entries) => {
                let mut map = Map::new();
                for (k, kloc, n) in entries {
                    let child = path.key(&k);
                    let first_line = map
                        .contains_key(&k)
                        .then(|| sink.positions.get(&child).map_or(0, |p| p.line));
                    let v = n.into_value(child.clone(), Some(kloc), line_offset, sink);
                    if let Some(first_line) = first_line {
                        sink.duplicates.push(DuplicateKey {
                            path: child,
                            first_line,
                            line: kloc.line() + line_offset,
                        });
                    }
                    map.insert(k, v);
                }
                Value::Object(map)
            }
        }
    }
}

impl<'de> Deserialize<'de> for NodeKind {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = NodeKind;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML value")
    }
    fn visit_unit<E: de::Error>(self) -> Result<NodeKind, E> {
        Ok(NodeKind::Null)
    }
    fn visit_none<E: de::Error>(self) -> Result<NodeKind, E> {
        Ok(NodeKind::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<NodeKind, D::Error> {
        d.deserialize_any(self)
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<NodeKind, E> {
        Ok(NodeKind::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<NodeKind, E> {
        Ok(NodeKind::Int(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<NodeKind, E> {
        Ok(NodeKind::UInt(v))
    }
    fn visit_i128<E: de::Error>(self, v: i128) -> Result<NodeKind, E> {
        Ok(NodeKind::Str(v.to_string()))
    }
    fn visit_u128<E: de::Error>(self, v: u128) -> Result<NodeKind, E> {
        Ok(NodeKind::Str(v.to_string()))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<NodeKind, E> {
        Ok(NodeKind::Float(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<NodeKind, E> {
        Ok(NodeKind::Str(v.to_owned()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<NodeKind, E> {
        Ok(NodeKind::Str(v))
    }
    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<NodeKind, E> {
        Ok(NodeKind::Str(String::from_utf8_lossy(v).into_owned()))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<NodeKind, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Spanned<NodeKind>>()? {
            items.push(Node::from(item));
        }
        Ok(NodeKind::Seq(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<NodeKind, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = map.next_key::<Spanned<KeyText>>()? {
            let value = map.next_value::<Spanned<NodeKind>>()?;
            entries.push((key.value.0, key.referenced, Node::from(value)));
        }
        Ok(NodeKind::Map(entries))
    }
}

/// A mapping key as text. Kubernetes keys are strings; scalar keys of other types (`8080:`) are
/// kept as their text, and complex keys are rejected.
struct KeyText(String);

impl<'de> Deserialize<'de> for KeyText {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = KeyText;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a scalar mapping key")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<KeyText, E> {
                Ok(KeyText(v.to_owned()))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<KeyText, E> {
                Ok(KeyText(v))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<KeyText, E> {
                Ok(KeyText(v.to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<KeyText, E> {
                Ok(KeyText(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<KeyText, E> {
                Ok(KeyText(v.to_string()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<KeyText, E> {
                Ok(KeyText(v.to_string()))
            }
            fn visit_unit<E: de::Error>(self) -> Result<KeyText, E> {
                Ok(KeyText("null".to_owned()))
            }
        }
        deserializer.deserialize_any(KeyVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_display_quotes_special_keys() {
        let p = FieldPath::root()
            .key("spec")
            .key("containers")
            .index(0)
            .key("resources")
            .key("limits")
            .key("nvidia.com/gpu");
        assert_eq!(
            p.to_string(),
            r#"spec.containers[0].resources.limits["nvidia.com/gpu"]"#
        );
        assert_eq!(FieldPath::root().to_string(), "(root)");
    }

    #[test]
    fn split_keeps_marker_lines_and_counts_lines() {
        let chunks = split_documents("# c\n---\na: 1\n---\nb: 2\n...\n");
        let starts: Vec<u64> = chunks.iter().map(|c| c.first_line).collect();
        assert_eq!(starts, vec![1, 2, 4, 7]);
        assert!(!chunks[0].has_content());
        assert!(chunks[1].has_content());
        assert!(!chunks[3].has_content());
    }
}
