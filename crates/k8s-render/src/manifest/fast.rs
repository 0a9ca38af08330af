//! The parse most manifests take: the YAML parser's events (the same parser, with the same options,
//! that serde-saphyr drives) turned straight into JSON and the line table, without serde's per-node
//! machinery (a `Spanned` wrapper per node, an intermediate tree).
//!
//! It covers what rendered and hand-written manifests use: block and flow mappings and sequences,
//! scalars of every style, comments. Anything else (anchors, aliases, tags, merge keys, complex or
//! non-string keys, a parse error, a document near serde-saphyr's budget) makes it give up, and the
//! caller parses the chunk the full way ([`super::node::parse_chunk`]); so whatever this returns is
//! what the full parse gives, and every error message is the full parse's.

use std::borrow::Cow;

use serde_json::{Map, Value};
use serde_saphyr::granit_parser::{Event, Options, Parser, ScalarStyle, Span};

use super::DuplicateKey;
use super::node::{Sink, plain_scalar};
use super::positions::Step;

/// Under serde-saphyr's default budget (250 000 nodes, 1 000 000 events, depth 64, 64 MiB of
/// scalars and of comments) with a margin: a chunk past any of these is left to the full parse,
/// which enforces the budget and says so.
const MAX_NODES: usize = 200_000;
const MAX_EVENTS: usize = 800_000;
const MAX_DEPTH: usize = 60;
const MAX_BYTES: usize = 16 * 1024 * 1024;

/// The parser options serde-saphyr derives from its default options and budget.
fn parser_options() -> Options {
    let mut o = Options::default();
    o.simple_key_max_lookahead = 1024;
    o.flow_nesting_limit = 255;
    o.block_nesting_limit = o.block_nesting_limit.max(64 + 1);
    o.emit_comments = true;
    o.max_buffered_comment_events = 32;
    o.strict_indentation = false;
    o.bom_inside_document_as_content = false;
    o
}

/// What the full parse would give for a chunk: `Some(None)` for no document (empty, or a null
/// root), `Some(Some(value))`, or `None` when this parse gives up (see the module docs).
pub(super) fn parse(text: &str, sink: &mut Sink<'_>) -> Option<Option<Value>> {
    if text.len() > MAX_BYTES {
        return None;
    }
    let mut b = Builder {
        stack: Vec::new(),
        root: None,
        nodes: 0,
    };
    let mut documents = 0usize;
    for (events, item) in Parser::new_from_str_with_options(text, parser_options()).enumerate() {
        let (event, span) = item.ok()?;
        if events > MAX_EVENTS || b.nodes > MAX_NODES || b.stack.len() > MAX_DEPTH {
            return None;
        }
        match event {
            Event::StreamStart | Event::StreamEnd | Event::DocumentEnd | Event::Comment(..) => {}
            Event::DocumentStart(_, version) => {
                documents += 1;
                if documents > 1 || version.is_some() {
                    return None;
                }
            }
            Event::Scalar(v, style, anchor, tag) => {
                if anchor != 0 || tag.is_some() {
                    return None;
                }
                b.scalar(v, style, &span, sink)?;
            }
            Event::SequenceStart(_, anchor, tag) => {
                if anchor != 0 || tag.is_some() {
                    return None;
                }
                b.start(Open::Seq(Vec::new()), &span, sink)?;
            }
            Event::MappingStart(_, anchor, tag) => {
                if anchor != 0 || tag.is_some() {
                    return None;
                }
                b.start(Open::Map(Map::new(), None), &span, sink)?;
            }
            Event::SequenceEnd | Event::MappingEnd => b.end(sink)?,
            _ => return None,
        }
    }
    if !b.stack.is_empty() {
        return None;
    }
    Some(b.root.filter(|v| !v.is_null()))
}

/// A collection being filled.
enum Open {
    Seq(Vec<Value>),
    /// The mapping and, between a key and its value, the key (with its line and column).
    Map(Map<String, Value>, Option<(String, u64, u64)>),
}

struct Frame {
    open: Open,
    /// The collection's index in the line table.
    node: usize,
    /// Where the collection goes when it is complete.
    slot: Slot,
}

/// Where a value goes: the root, the next item of the enclosing sequence, or the enclosing
/// mapping under a key (with the duplicate to record once the value is, if the key repeats).
enum Slot {
    Root,
    Item,
    Key(String, Option<DuplicateKey>),
}

struct Builder {
    stack: Vec<Frame>,
    root: Option<Value>,
    nodes: usize,
}

fn line_col(span: &Span) -> (u64, u64) {
    let start = &span.start;
    (start.line() as u64, start.col() as u64 + 1)
}

impl Builder {
    /// Records a value that starts at `span` in the line table and says where it goes. `None` when
    /// it is a mapping key (or gives up on a key that is not a plain string).
    fn place(&mut self, span: &Span, sink: &mut Sink<'_>) -> Option<(usize, Slot)> {
        self.nodes += 1;
        let Some(top) = self.stack.last_mut() else {
            if self.root.is_some() {
                return None;
            }
            let (line, col) = line_col(span);
            return Some((sink.record_at(None, Step::Root, line, col), Slot::Root));
        };
        let parent = top.node;
        match &mut top.open {
            Open::Seq(items) => {
                let (line, col) = line_col(span);
                let i = items.len();
                Some((
                    sink.record_at(Some(parent), Step::Index(i), line, col),
                    Slot::Item,
                ))
            }
            Open::Map(map, key) => {
                // A mapping value points at its key.
                let (k, kline, kcol) = key.take()?;
                let dup = map
                    .contains_key(&k)
                    .then(|| sink.duplicate(parent, &k, kline));
                let node = sink.record_at(Some(parent), Step::Key(&k), kline, kcol);
                Some((node, Slot::Key(k, dup)))
            }
        }
    }

    /// True when the next scalar is a mapping key.
    fn expects_key(&self) -> bool {
        matches!(
            self.stack.last(),
            Some(Frame {
                open: Open::Map(_, None),
                ..
            })
        )
    }

    fn scalar(
        &mut self,
        v: Cow<'_, str>,
        style: ScalarStyle,
        span: &Span,
        sink: &mut Sink<'_>,
    ) -> Option<()> {
        if self.expects_key() {
            let key = key_text(v, style)?;
            let (line, col) = line_col(span);
            self.nodes += 1;
            if let Some(Frame {
                open: Open::Map(_, slot),
                ..
            }) = self.stack.last_mut()
            {
                *slot = Some((key, line, col));
            }
            return Some(());
        }
        let value = scalar_value(v, style)?;
        let (_, slot) = self.place(span, sink)?;
        self.put(slot, value, sink)
    }

    fn start(&mut self, open: Open, span: &Span, sink: &mut Sink<'_>) -> Option<()> {
        if self.expects_key() {
            // A collection as a mapping key.
            return None;
        }
        let (node, slot) = self.place(span, sink)?;
        self.stack.push(Frame { open, node, slot });
        Some(())
    }

    fn end(&mut self, sink: &mut Sink<'_>) -> Option<()> {
        let frame = self.stack.pop()?;
        let value = match frame.open {
            Open::Seq(items) => Value::Array(items),
            Open::Map(map, None) => Value::Object(map),
            // A key without a value: the parser always gives one, so this is not a mapping we know.
            Open::Map(_, Some(_)) => return None,
        };
        self.put(frame.slot, value, sink)
    }

    /// Puts a complete value where it goes.
    fn put(&mut self, slot: Slot, value: Value, sink: &mut Sink<'_>) -> Option<()> {
        match slot {
            Slot::Root => {
                self.root = Some(value);
                Some(())
            }
            Slot::Item => match self.stack.last_mut()?.open {
                Open::Seq(ref mut items) => {
                    items.push(value);
                    Some(())
                }
                Open::Map(..) => None,
            },
            Slot::Key(k, dup) => {
                if let Some(d) = dup {
                    sink.push_duplicate(d);
                }
                match self.stack.last_mut()?.open {
                    Open::Map(ref mut map, None) => {
                        map.insert(k, value);
                        Some(())
                    }
                    _ => None,
                }
            }
        }
    }
}

fn own(v: Cow<'_, str>) -> String {
    v.into_owned()
}

/// A key as the full parse reads it, when it is a string by its form: quoted or block, or plain and
/// not a null, boolean or number spelling (`None` otherwise: those keys take the full parse).
fn key_text(v: Cow<'_, str>, style: ScalarStyle) -> Option<String> {
    if style != ScalarStyle::Plain {
        return Some(own(v));
    }
    if v.as_ref() == "<<" || !plain_is_string(&v) {
        return None;
    }
    Some(own(v))
}

/// A scalar value as the full parse types it (see `deserialize_any` in serde-saphyr): quoted and
/// block scalars are strings; a plain one is null, a YAML 1.1 boolean, an integer (octal with a
/// leading zero), a float, or a string.
fn scalar_value(v: Cow<'_, str>, style: ScalarStyle) -> Option<Value> {
    if style != ScalarStyle::Plain {
        return Some(Value::String(own(v)));
    }
    let t = v.as_ref();
    if is_null_word(t) {
        return Some(Value::Null);
    }
    if let Some(b) = yaml11_bool(t) {
        return Some(Value::Bool(b));
    }
    if plain_is_string(t) {
        return Some(Value::String(own(v)));
    }
    // Plain decimal digits without a leading zero that fit: an unsigned integer.
    if t.len() <= 19
        && t.bytes().all(|c| c.is_ascii_digit())
        && (t.len() == 1 || !t.starts_with('0'))
        && let Ok(u) = t.parse::<u64>()
    {
        return Some(Value::Number(u.into()));
    }
    // Anything else that might be a number: typed by the full parse of the text alone, which means the
    // same there as here (no whitespace, indicator or document marker in it).
    if t.starts_with("---") || t.starts_with("...") {
        return None;
    }
    plain_scalar(t)
}

/// `""`, `~`, `null`, `Null`, `NULL`: a plain null.
fn is_null_word(t: &str) -> bool {
    matches!(t, "" | "~" | "null" | "Null" | "NULL")
}

/// The YAML 1.1 booleans (case-insensitive): y, yes, true, on / n, no, false, off.
fn yaml11_bool(s: &str) -> Option<bool> {
    let t = s.trim_matches([' ', '\t', '\r', '\n']);
    let is = |w: &str| t.eq_ignore_ascii_case(w);
    if is("true") || is("yes") || is("y") || is("on") {
        Some(true)
    } else if is("false") || is("no") || is("n") || is("off") {
        Some(false)
    } else {
        None
    }
}

/// True when a plain scalar can only be a string: it is no null or boolean word, and it is not shaped
/// like a number. Every integer (`12`, `0x1F`, `0644`, `1_000`) and float (`1.5`, `1e3`, `.5`, `.inf`,
/// `.nan`) spelling the full parse reads starts, after at most one sign, with a digit or a `.`; Rust's
/// `inf`/`nan` words it keeps as strings.
fn plain_is_string(t: &str) -> bool {
    if is_null_word(t) || yaml11_bool(t).is_some() {
        return false;
    }
    let unsigned = t.strip_prefix(['+', '-']).unwrap_or(t);
    !unsigned
        .bytes()
        .next()
        .is_some_and(|c| c.is_ascii_digit() || c == b'.')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_forms() {
        for s in [
            "rdma",
            "ray:2.57.0/x",
            "IfNotPresent",
            "a b",
            "add",
            "INFO",
            "-c",
            "inf",
            "nan",
            "infinity",
            "_1",
        ] {
            assert!(plain_is_string(s), "{s}");
        }
        // Typed the full way (or numbers).
        for s in [
            "", "~", "yes", "OFF", "12", "0x1F", "-.inf", ".NaN", "1e5", "1_000", "0o17", "+1",
            "2.57.0", "8Gi",
        ] {
            assert!(!plain_is_string(s), "{s}");
        }
    }
}
