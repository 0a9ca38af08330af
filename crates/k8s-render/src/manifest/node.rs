//! The position-keeping YAML parse: every node with its line and column, converted to JSON while
//! recording each field's position and every key given twice in one mapping.

use std::collections::HashMap;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};
use serde_saphyr::{Location, Spanned};

use super::{DuplicateKey, FieldPath, Position};

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
    pub(super) positions: &'a mut HashMap<FieldPath, Position>,
    pub(super) duplicates: &'a mut Vec<DuplicateKey>,
}

impl Node {
    pub(super) fn into_value(
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

/// Parses one document's text into nodes (`None` for an empty document).
pub(super) fn parse_chunk(text: &str) -> Result<Option<Node>, serde_saphyr::Error> {
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
