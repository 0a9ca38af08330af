//! Where a lint finding or a validation violation is: the same five facts for both, so reports,
//! SARIF and the CLI point at manifests one way.

use std::fmt;

use serde::Serialize;

use super::{Document, FieldPath};

/// A place in a manifest stream (or a text file): file, document, object, field and line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Location {
    /// Source file name.
    pub source: String,
    /// Document index in the source (0 for text files).
    pub doc: usize,
    /// `Kind name` of the document (`text`, `Dockerfile` for files that are not manifests).
    pub object: String,
    /// Field path inside the document.
    pub path: FieldPath,
    /// Source line of the field (or its nearest present ancestor), when known.
    pub line: Option<u64>,
}

impl Location {
    /// The field `path` of `doc`, with the line the document recorded for it.
    pub fn in_document(doc: &Document, path: FieldPath) -> Self {
        Self {
            source: doc.source.clone(),
            doc: doc.index,
            object: doc.label(),
            line: doc.line_of(&path),
            path,
        }
    }

    /// Line `line` of a file that is not a manifest (a Dockerfile, a script): document 0, `object`
    /// naming what the file is, `path` the instruction or the root.
    pub fn in_file(source: &str, object: &str, path: FieldPath, line: u64) -> Self {
        Self {
            source: source.to_owned(),
            doc: 0,
            object: object.to_owned(),
            path,
            line: Some(line),
        }
    }
}

/// `file doc N (Kind name) line L`: the prefix every finding and violation prints before its path.
impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} doc {} ({})", self.source, self.doc, self.object)?;
        if let Some(l) = self.line {
            write!(f, " line {l}")?;
        }
        Ok(())
    }
}
