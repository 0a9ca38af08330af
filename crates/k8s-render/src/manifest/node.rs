//! The position-keeping YAML parse: every node with its line and column, converted to JSON while
//! recording each field's position and every key given twice in one mapping.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};
use serde_saphyr::{Location, Spanned};

use super::DuplicateKey;
use super::positions::{Step, Table};

/// A parsed YAML node with its position, before conversion to JSON.
pub(super) struct Node {
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
pub(super) struct Sink<'a> {
    pub(super) positions: &'a mut Table,
    pub(super) duplicates: &'a mut Vec<DuplicateKey>,
    /// Added to every line (the chunk's first line in the file, less one).
    pub(super) line_offset: u64,
}

impl Sink<'_> {
    /// Records a node's position (`loc`; line 0 is none) and returns its index in the table.
    pub(super) fn record(&mut self, parent: Option<usize>, step: Step<'_>, loc: Location) -> usize {
        self.record_at(parent, step, loc.line(), loc.column())
    }

    /// [`Sink::record`] with the chunk's line and column (line 0: none).
    pub(super) fn record_at(
        &mut self,
        parent: Option<usize>,
        step: Step<'_>,
        line: u64,
        column: u64,
    ) -> usize {
        let (line, column) = if line > 0 {
            (line + self.line_offset, column)
        } else {
            (0, 0)
        };
        self.positions.push(parent, step, line, column)
    }

    /// Before the value of a key that `parent` (a mapping, being filled) already holds is recorded: the
    /// duplicate, with the line recorded last for that key's path. Push it once the value is recorded
    /// ([`Sink::push_duplicate`]).
    pub(super) fn duplicate(&self, parent: usize, key: &str, key_line: u64) -> DuplicateKey {
        let path = self.positions.path_of(parent).key(key);
        let first_line = self.positions.exact(&path).map_or(0, |p| p.line);
        DuplicateKey {
            path,
            first_line,
            line: key_line + self.line_offset,
        }
    }

    /// Records a duplicate found by [`Sink::duplicate`].
    pub(super) fn push_duplicate(&mut self, d: DuplicateKey) {
        self.duplicates.push(d);
    }
}

impl Node {
    /// Converts the node to JSON, recording its position (`key_loc` for a mapping value, its own
    /// otherwise) and those of its children under `parent`.
    pub(super) fn into_value(
        self,
        parent: Option<usize>,
        step: Step<'_>,
        key_loc: Option<Location>,
        sink: &mut Sink<'_>,
    ) -> Value {
        let me = sink.record(parent, step, key_loc.unwrap_or(self.loc));
        match self.kind {
            NodeKind::Null => Value::Null,
            NodeKind::Bool(b) => Value::Bool(b),
            NodeKind::Int(i) => Value::Number(i.into()),
            NodeKind::UInt(u) => Value::Number(u.into()),
            NodeKind::Float(f) => float_value(f),
            NodeKind::Str(s) => Value::String(s),
            NodeKind::Seq(items) => Value::Array(
                items
                    .into_iter()
                    .enumerate()
                    .map(|(i, n)| n.into_value(Some(me), Step::Index(i), None, sink))
                    .collect(),
            ),
            NodeKind::Map(entries) => {
                let mut map = Map::new();
                for (k, kloc, n) in entries {
                    let dup = map
                        .contains_key(&k)
                        .then(|| sink.duplicate(me, &k, kloc.line()));
                    let v = n.into_value(Some(me), Step::Key(&k), Some(kloc), sink);
                    if let Some(d) = dup {
                        sink.push_duplicate(d);
                    }
                    map.insert(k, v);
                }
                Value::Object(map)
            }
        }
    }
}

/// A YAML float as JSON: NaN/inf have no JSON form; Kubernetes rejects them too, so keep them as text.
pub(super) fn float_value(f: f64) -> Value {
    Number::from_f64(f)
        .map(Value::Number)
        .unwrap_or_else(|| Value::String(f.to_string()))
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

/// The options every parse of a manifest uses.
fn options() -> serde_saphyr::Options {
    // Duplicate keys reach the visitor, which records them: a duplicate is a finding on the
    // document (the API server rejects it), not unreadable input.
    serde_saphyr::options! {
        legacy_octal_numbers: true,
        with_snippet: false,
        duplicate_keys: serde_saphyr::DuplicateKeyPolicy::PassThrough,
    }
}

/// Parses one document's text into nodes (`None` for an empty document).
pub(super) fn parse_chunk(text: &str) -> Result<Option<Node>, serde_saphyr::Error> {
    serde_saphyr::from_str_with_options::<Option<Spanned<NodeKind>>>(text, options())
        .map(|n| n.map(Node::from))
}

/// The JSON value the parse gives a plain scalar whose text is `text`, by parsing that text alone
/// (`None` when it is not a scalar by itself, or does not parse). The caller makes sure that the
/// text means the same alone as where it was (no marker, indicator or whitespace in it).
pub(super) fn plain_scalar(text: &str) -> Option<Value> {
    match serde_saphyr::from_str_with_options::<NodeKind>(text, options()).ok()? {
        NodeKind::Null => Some(Value::Null),
        NodeKind::Bool(b) => Some(Value::Bool(b)),
        NodeKind::Int(i) => Some(Value::Number(i.into())),
        NodeKind::UInt(u) => Some(Value::Number(u.into())),
        NodeKind::Float(f) => Some(float_value(f)),
        NodeKind::Str(s) => Some(Value::String(s)),
        NodeKind::Seq(_) | NodeKind::Map(_) => None,
    }
}
