//! Typed errors of the probe crate.

use std::path::PathBuf;

/// Everything that can go wrong while probing a host, reading counters or parsing a tool's output.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// A file or directory that had to be read could not be.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The path that failed.
        path: PathBuf,
        /// The operating-system error.
        source: std::io::Error,
    },
    /// A file was read but its content was not what the kernel (or tool) writes there.
    #[error("{path}: {message}")]
    Invalid {
        /// The file holding the bad value.
        path: PathBuf,
        /// What was expected and what was found.
        message: String,
    },
    /// The named RDMA device does not exist under the probed root.
    #[error(
        "RDMA device `{device}` not found under {root} (found: {found}); check the device name \
         (`ibv_devices`), that the pod requested the RDMA resource, and that the provider is installed"
    )]
    NoSuchDevice {
        /// The device asked for.
        device: String,
        /// The `class/infiniband` directory that was searched.
        root: PathBuf,
        /// The devices that do exist, comma separated (or `none`).
        found: String,
    },
    /// The device has no counter files that tell bytes or packets moved.
    #[error(
        "device `{device}` port {port} exposes no traffic counters under {path} \
         (expected hw_counters/ or counters/)"
    )]
    NoCounters {
        /// Device name.
        device: String,
        /// Port number.
        port: u32,
        /// The port directory searched.
        path: PathBuf,
    },
    /// Two counter snapshots that cannot be compared.
    #[error("cannot diff counter snapshots: {0}")]
    SnapshotMismatch(String),
    /// A profile's counter spec that no safe shell command can read (a glob or path with other characters).
    #[error("devices: {0}")]
    CounterSpec(String),
    /// A tool's output could not be parsed.
    #[error(transparent)]
    Parse(#[from] ParseError),
    /// JSON (de)serialisation failed.
    #[error("JSON: {0}")]
    Json(#[from] serde_json::Error),
}

impl ProbeError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            source,
        }
    }
}

/// A tool's output that could not be turned into a structured result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what}: {message}{}", .line.map(|l| format!(" (line {l})")).unwrap_or_default())]
pub struct ParseError {
    /// Which format was being parsed (`nccl-tests`, `ibv_devinfo`, ...).
    pub what: &'static str,
    /// 1-based line number of the offending line, if one line is at fault.
    pub line: Option<usize>,
    /// What was expected, and how to get the right input.
    pub message: String,
}

impl ParseError {
    pub(crate) fn new(what: &'static str, line: Option<usize>, message: impl Into<String>) -> Self {
        Self {
            what,
            line,
            message: message.into(),
        }
    }
}

/// Result alias of this crate.
pub type Result<T, E = ProbeError> = std::result::Result<T, E>;
