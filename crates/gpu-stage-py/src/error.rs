//! The binding's error type. Each variant says what failed and why; the Python layer maps
//! [`BindError::kind`] to an exception class (timeouts also subclass `TimeoutError`).

use gpu_stage::{StageError, TransportError};

/// Everything the binding can report.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    /// An environment variable or explicit setting is invalid.
    #[error("invalid {var}={value:?}: {reason}")]
    Env {
        /// The variable (or setting) name.
        var: &'static str,
        /// Its value.
        value: String,
        /// What was expected.
        reason: String,
    },
    /// A buffer description from Python is unusable.
    #[error("buffer {index}: {reason}")]
    Buffer {
        /// Position in the list.
        index: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// The peer's object does not match what this end expected (a different object, count or
    /// sizes): nothing was written into the buffers.
    #[error("object mismatch: {0}")]
    Mismatch(String),
    /// The staging pipeline failed.
    #[error("{0}")]
    Stage(#[from] StageError),
    /// Setting up or using the transport failed.
    #[error("{0}")]
    Transport(#[from] TransportError),
    /// `abort()` was called; the channel is closed.
    #[error("aborted: {0}")]
    Aborted(String),
    /// The peer's handshake was refused (a wrong or absent object token, a different protocol, or
    /// settings the two ends cannot agree on): no channel was made. A sender that sees this from
    /// a receiver retries the rendezvous (the address it used may belong to another process now).
    #[error("handshake refused: {0}")]
    Refused(String),
    /// The channel failed or was closed earlier; open a new one.
    #[error("channel is closed: {0}")]
    Closed(String),
    /// Something this build cannot do (a feature compiled out, no CUDA driver).
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// A bug: a panic was caught at the binding boundary (the channel is closed).
    #[error("internal error (panic caught at the binding boundary, please report): {0}")]
    Panic(String),
}

/// Coarse classes for the Python exception hierarchy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// A wait exceeded its bound.
    Timeout,
    /// Aborted by `abort()`.
    Aborted,
    /// Bad input (settings, buffers, mismatched objects).
    Invalid,
    /// The handshake was refused (wrong token or protocol).
    Refused,
    /// Anything else (peer gone, I/O, CUDA).
    Other,
}

impl BindError {
    pub(crate) fn env(var: &'static str, value: &str, reason: &str) -> Self {
        BindError::Env {
            var,
            value: value.to_string(),
            reason: reason.to_string(),
        }
    }

    pub(crate) fn buffer(index: usize, reason: impl Into<String>) -> Self {
        BindError::Buffer {
            index,
            reason: reason.into(),
        }
    }

    /// The class of this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            BindError::Env { .. } | BindError::Buffer { .. } | BindError::Mismatch(_) => {
                ErrorKind::Invalid
            }
            BindError::Aborted(_) => ErrorKind::Aborted,
            BindError::Refused(_) => ErrorKind::Refused,
            BindError::Transport(TransportError::Timeout { .. })
            | BindError::Stage(StageError::Transport(TransportError::Timeout { .. })) => {
                ErrorKind::Timeout
            }
            BindError::Stage(StageError::Aborted(m)) if m.contains("timed out") => {
                ErrorKind::Timeout
            }
            _ => ErrorKind::Other,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn kinds() {
        let t = BindError::Transport(TransportError::Timeout {
            after: Duration::from_secs(1),
            waiting_for: "for the ACK from 1.2.3.4:5".into(),
        });
        assert_eq!(t.kind(), ErrorKind::Timeout);
        assert!(t.to_string().contains("for the ACK from 1.2.3.4:5"));
        assert_eq!(
            BindError::Stage(StageError::Transport(TransportError::Timeout {
                after: Duration::from_secs(1),
                waiting_for: "x".into()
            }))
            .kind(),
            ErrorKind::Timeout
        );
        assert_eq!(
            BindError::Aborted("by Ray".into()).kind(),
            ErrorKind::Aborted
        );
        assert_eq!(BindError::buffer(2, "null").kind(), ErrorKind::Invalid);
        assert_eq!(
            BindError::Refused("wrong token".into()).kind(),
            ErrorKind::Refused
        );
        assert_eq!(
            BindError::Transport(TransportError::Closed("peer".into())).kind(),
            ErrorKind::Other
        );
    }
}
