//! Quoting by construction: one escaping function per target language that a rendered artifact splices
//! values into, so that no value (a `--set`, a profile field) can change the artifact's structure.
//!
//! - [`shell`]: POSIX shell words (single quotes) and `#` comment text, for plan.sh and the MPIJob
//!   launcher's `bash -c` script.
//! - [`dockerfile`]: a Dockerfile has no escape for a newline in a comment or an instruction, so a value
//!   that cannot be written safely is an [`Unsafe`] error naming the field.
//! - [`python`]: string literals and docstring text in the rendered `.py` programs.
//!
//! A program's own arguments are never spliced into its source: they go through argv (shell-quoted where
//! a script runs it).

pub mod dockerfile;
pub mod python;
pub mod shell;

/// A value that the target language cannot hold without changing the artifact's structure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field} = {shown}: {reason}; {fix}", shown = shell::escape_text(.value))]
pub struct Unsafe {
    /// The field or `--set` key the value came from.
    pub field: String,
    /// The value, as given.
    pub value: String,
    /// What in it cannot be written (`a newline would end the Dockerfile line`).
    pub reason: String,
    /// What to do instead.
    pub fix: String,
}

/// A character that ends or breaks a line in some reader of the file: ASCII control characters (newline,
/// CR, NUL, ESC...), DEL, the C1 controls and Unicode's line and paragraph separators.
pub(crate) fn breaks_line(c: char) -> bool {
    c.is_control() || c == '\u{2028}' || c == '\u{2029}'
}
