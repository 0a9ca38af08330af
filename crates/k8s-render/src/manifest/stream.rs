//! Splitting a YAML stream into documents: `---` / `...` markers, empty documents, `List` expansion,
//! and parse errors numbered in the file's lines.

use serde_json::Value;

use super::fast;
use super::node::{Sink, parse_chunk};
use super::positions::{Positions, Step, Table};
use super::{Document, DuplicateKey, FieldPath, ManifestError, PathSeg};

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
pub fn documents<'a>(source: &str, text: &'a str) -> Documents<'a> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    Documents {
        source: source.to_owned(),
        chunks: Splitter::new(text),
        emitted: 0,
        pending: std::collections::VecDeque::new(),
        failed: false,
    }
}

/// Iterator over the documents of a stream; see [`documents`]. It splits the text as it goes, so
/// it holds one document's text and tree at a time, not a copy of the stream.
#[derive(Debug)]
pub struct Documents<'a> {
    source: String,
    chunks: Splitter<'a>,
    emitted: usize,
    pending: std::collections::VecDeque<Document>,
    failed: bool,
}

impl Iterator for Documents<'_> {
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
pub(super) fn chunk_documents(
    source: &str,
    chunk: &Chunk<'_>,
    first: usize,
) -> Result<Vec<Document>, ManifestError> {
    let mut docs: Vec<Document> = Vec::new();
    if !chunk.has_content() {
        return Ok(docs);
    }
    let index = first;
    let line_offset = chunk.first_line - 1;
    let mut table = Table::default();
    let mut dups = Vec::new();
    let mut sink = Sink {
        positions: &mut table,
        duplicates: &mut dups,
        line_offset,
    };
    let value = match fast::parse(chunk.text, &mut sink) {
        Some(v) => v,
        None => {
            // The full parse: what the fast one gave up on, and every error message.
            *sink.positions = Table::default();
            sink.duplicates.clear();
            full_parse(source, chunk, index, &mut sink)?
        }
    };
    let Some(value) = value else { return Ok(docs) };
    let positions = Positions::new(table);
    // `kubectl get -o yaml` prints a `List` whose items are the objects: check each item.
    if let Some(items) = list_items(&value) {
        // Each item sees the list's table below `items[i]`; the duplicates are bucketed by item in one
        // pass (filtering them once per item was quadratic in the size of a long `List`).
        let items_path = FieldPath::root().key("items");
        let item_of = |p: &FieldPath| -> Option<(usize, FieldPath)> {
            let rest = p.strip_prefix(&items_path)?;
            match rest.segments().first()? {
                PathSeg::Index(i) => {
                    Some((*i, FieldPath::from_segments(rest.segments()[1..].to_vec())))
                }
                PathSeg::Key(_) => None,
            }
        };
        let mut item_dups: Vec<Vec<DuplicateKey>> = vec![Vec::new(); items.len()];
        for d in &dups {
            if let Some((i, path)) = item_of(&d.path)
                && let Some(list) = item_dups.get_mut(i)
            {
                list.push(DuplicateKey { path, ..d.clone() });
            }
        }
        for (i, (item, item_dups)) in items.iter().zip(item_dups).enumerate() {
            let root = items_path.index(i);
            let line = positions.table().exact(&root).map(|p| p.line);
            let sub = Positions::subtree(positions.table(), root.segments().to_vec());
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

/// A chunk through serde-saphyr: its value (`None` for no document), or the parse error numbered in the
/// file's lines.
fn full_parse(
    source: &str,
    chunk: &Chunk<'_>,
    index: usize,
    sink: &mut Sink<'_>,
) -> Result<Option<Value>, ManifestError> {
    let line_offset = sink.line_offset;
    let node = parse_chunk(chunk.text).map_err(|e| {
        let loc = e.location().unwrap_or(serde_saphyr::Location::UNKNOWN);
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
    Ok(node
        .map(|node| node.into_value(None, Step::Root, None, sink))
        .filter(|v| !v.is_null()))
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

#[derive(Debug)]
pub(super) struct Chunk<'a> {
    first_line: u64,
    text: &'a str,
}

impl Chunk<'_> {
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

/// Splits a stream at `---` (start) and `...` (end) marker lines, one chunk at a time. YAML forbids
/// these markers at column 0 inside content, so a line-based split is exact. Chunks are slices of the
/// stream (a chunk's lines are contiguous in it).
#[derive(Debug)]
pub(super) struct Splitter<'a> {
    text: &'a str,
    /// Byte offset of the next line to read.
    at: usize,
    /// Line number of the line at `at`.
    line: u64,
    /// The chunk being gathered (its start offset and first line); `None` once the last was returned.
    cur: Option<(usize, u64)>,
}

impl<'a> Splitter<'a> {
    pub(super) fn new(text: &'a str) -> Self {
        Self {
            text,
            at: 0,
            line: 1,
            cur: Some((0, 1)),
        }
    }
}

impl<'a> Iterator for Splitter<'a> {
    type Item = Chunk<'a>;

    fn next(&mut self) -> Option<Chunk<'a>> {
        let text = self.text;
        while let Some(rest) = text.get(self.at..).filter(|r| !r.is_empty()) {
            let len = rest.find('\n').map_or(rest.len(), |i| i + 1);
            let line = &rest[..len];
            let line_start = self.at;
            self.at += len;
            let lineno = self.line;
            self.line += 1;
            let (start, first_line) = self.cur?;
            // A `---` line starts the next chunk (and belongs to it); a `...` line ends this one (and
            // belongs to neither).
            let next = if is_marker(line, "---") {
                (line_start, lineno)
            } else if is_marker(line, "...") {
                (self.at, lineno + 1)
            } else {
                continue;
            };
            self.cur = Some(next);
            return Some(Chunk {
                first_line,
                text: text.get(start..line_start).unwrap_or_default(),
            });
        }
        let (start, first_line) = self.cur.take()?;
        Some(Chunk {
            first_line,
            text: text.get(start..).unwrap_or_default(),
        })
    }
}

#[cfg(test)]
fn split_documents(text: &str) -> Vec<Chunk<'_>> {
    Splitter::new(text).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both parses of every chunk of `text`: the fast one, when it does not give up, must give what the
    /// full one gives (value, line table, duplicates). Returns how many chunks the fast one took.
    fn same_as_full(text: &str) -> usize {
        let mut took = 0;
        for chunk in split_documents(text) {
            let (mut t1, mut d1) = (Table::default(), Vec::new());
            let mut s1 = Sink {
                positions: &mut t1,
                duplicates: &mut d1,
                line_offset: chunk.first_line - 1,
            };
            let Some(fast) = fast::parse(chunk.text, &mut s1) else {
                continue;
            };
            took += 1;
            let (mut t2, mut d2) = (Table::default(), Vec::new());
            let mut s2 = Sink {
                positions: &mut t2,
                duplicates: &mut d2,
                line_offset: chunk.first_line - 1,
            };
            let full = full_parse("t", &chunk, 0, &mut s2);
            let full = full.unwrap_or_else(|e| {
                panic!(
                    "fast parse took a chunk the full one refuses: {e}\n{}",
                    chunk.text
                )
            });
            assert_eq!(fast, full, "value of\n{}", chunk.text);
            if full.is_some() {
                assert_eq!(t1, t2, "line table of\n{}", chunk.text);
            }
            assert_eq!(d1, d2, "duplicates of\n{}", chunk.text);
        }
        took
    }

    #[test]
    fn fast_parse_agrees_with_the_full_parse() {
        let snippets = [
            "a: 1\nb: -2\nc: 3.5\nd: 1e3\ne: 0644\nf: 0x1F\ng: .inf\nh: -.nan\ni: +7\nj: 1_000\n",
            "a: yes\nb: No\nc: ON\nd: ~\ne:\nf: null\ng: NULL\nh: 'yes'\ni: \"1\"\nj: y\nk: n\n",
            "a: INFO\nb: -c\nc: 2.57.0\nd: fe80::1\ne: ::1\nf: 12:30\ng: 99999999999999999999\nh: 1234567890123456789\n",
            "a: inf\nb: -inf\nc: nan\nd: Infinity\ne: _1\nf: 0b101\ng: 0B1\nh: 0X1F\ni: +.5\nj: -0\nk: 1e999\nl: 0o_7\nm: 0_7\nn: 09\n",
            "add: [IPC_LOCK]\nnode: x\nid: 1\nca: d\n-c: x\n.5: half\n+1: one\n",
            "a: -\n",
            "a: x:\n",
            "a: ---\n",
            "a: ...x\n",
            "list: [1, two, {k: v}, [x, y], \"q\"]\nmap: {a: 1, b: [2]}\n",
            "a: |\n  line one\n  line two\nb: >-\n  folded\n  text\n",
            "a: plain\n  continued\n\n  after blank\n",
            "a: 1\na: 2\nb: {x: 1}\nb: {y: 2}\nb: {x: 3}\n",
            "k: {a: 1, a: 2}\nl:\n- {a: 1, a: [1, 2], a: 3}\n",
            "? complex\n: value\n",
            "? [a, b]\n: value\n",
            "1: one\ntrue: t\nnull: n\n~: x\n",
            "a: &x 1\nb: *x\n",
            "a: !!str 1\n",
            "<<: {a: 1}\nb: 2\n",
            "# only a comment\n",
            "---\n",
            "--- 5\n",
            "--- |\n  text\n",
            "- a\n- b\n",
            "a: [\n",
            "a: b: c\n",
            "\ta: 1\n",
            "a:\n  - b: 1\n    c: 2\n  -   - x\n      - y\n",
            "a: 'it''s'\nb: \"tab\\there \\u00e9\"\nc: \"line\\nbreak\"\n",
            "key with spaces: v\n\"quoted key\": v\n'single': v\n",
            "a: b # comment\nc: d#not\n",
            "%YAML 1.2\n---\na: 1\n",
            "a: 1\n...\nb: 2\n",
            "\u{feff}a: 1\n",
            "a: é ü 😀\nb: [é]\n",
        ];
        for s in snippets {
            same_as_full(s);
        }
        // Deep nesting, past the budget's depth: the fast parse leaves it to the full one.
        let deep = format!("{}1{}\n", "[".repeat(70), "]".repeat(70));
        assert_eq!(same_as_full(&deep), 0);
        let mut took = 0;
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");
        let mut stack = vec![std::path::PathBuf::from(dir)];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                let p = e.path();
                if p.is_dir() {
                    stack.push(p);
                } else if let Ok(text) = std::fs::read_to_string(&p) {
                    took += same_as_full(&text);
                }
            }
        }
        for f in [
            "schemas/ray.io_rayclusters.yaml",
            "schemas/kubeflow.org_mpijobs.yaml",
        ] {
            let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(f);
            took += std::fs::read_to_string(p).map_or(0, |t| same_as_full(&t));
        }
        assert!(took > 10, "the fast parse took only {took} chunks");
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
