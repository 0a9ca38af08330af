//! Field paths inside a document (`spec.workerGroupSpecs[0].template.spec`): what every finding and
//! violation points at, and the key of the line table a parsed [`Document`](super::Document) keeps.

use std::fmt;

use serde::{Serialize, Serializer};
use serde_json::Value;

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
}
