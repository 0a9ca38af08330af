//! Splitting a YAML stream into documents: `---` / `...` markers, empty documents, `List` expansion,
//! and parse errors numbered in the file's lines.

use std::collections::HashMap;

use serde_json::Value;

use super::node::{Sink, parse_chunk};
use super::{Document, DuplicateKey, FieldPath, ManifestError, PathSeg, Position};

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
    let Some(node) = node else { return Ok(docs) };
    let mut positions = HashMap::new();
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
        // One pass over the positions and duplicates, bucketed by item: filtering them once per item
        // was quadratic in the size of a long `List`.
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
        let mut subs: Vec<HashMap<FieldPath, Position>> = vec![HashMap::new(); items.len()];
        for (p, pos) in &positions {
            if let Some((i, rest)) = item_of(p)
                && let Some(sub) = subs.get_mut(i)
            {
                sub.insert(rest, *pos);
            }
        }
        let mut item_dups: Vec<Vec<DuplicateKey>> = vec![Vec::new(); items.len()];
        for d in &dups {
            if let Some((i, path)) = item_of(&d.path)
                && let Some(list) = item_dups.get_mut(i)
            {
                list.push(DuplicateKey { path, ..d.clone() });
            }
        }
        for ((item, sub), item_dups) in items.iter().zip(subs).zip(item_dups) {
            let line = sub.get(&FieldPath::root()).map(|p| p.line);
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

/// Splits a stream at `---` (start) and `...` (end) marker lines, one chunk at a time. YAML forbids
/// these markers at column 0 inside content, so a line-based split is exact.
#[derive(Debug)]
struct Splitter<'a> {
    rest: &'a str,
    /// Line number of the first line of `rest`.
    line: u64,
    /// The chunk being gathered; `None` once the last was returned.
    cur: Option<Chunk>,
}

impl<'a> Splitter<'a> {
    fn new(text: &'a str) -> Self {
        Self {
            rest: text,
            line: 1,
            cur: Some(Chunk {
                first_line: 1,
                text: String::new(),
            }),
        }
    }
}

impl Iterator for Splitter<'_> {
    type Item = Chunk;

    fn next(&mut self) -> Option<Chunk> {
        while !self.rest.is_empty() {
            let end = self.rest.find('\n').map_or(self.rest.len(), |i| i + 1);
            let (line, rest) = self.rest.split_at(end);
            self.rest = rest;
            let lineno = self.line;
            self.line += 1;
            let cur = self.cur.as_mut()?;
            let next = if is_marker(line, "---") {
                Chunk {
                    first_line: lineno,
                    text: line.to_owned(),
                }
            } else if is_marker(line, "...") {
                Chunk {
                    first_line: lineno + 1,
                    text: String::new(),
                }
            } else {
                cur.text.push_str(line);
                continue;
            };
            return Some(std::mem::replace(cur, next));
        }
        self.cur.take()
    }
}

#[cfg(test)]
fn split_documents(text: &str) -> Vec<Chunk> {
    Splitter::new(text).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

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
