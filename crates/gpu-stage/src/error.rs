//! Error types: [`StageError`] for the pipeline, [`TransportError`] for transports.

use std::io;

/// Everything that can go wrong while staging data between a device and host memory.
#[derive(Debug, thiserror::Error)]
pub enum StageError {
    /// No CUDA driver library could be loaded on this machine.
    #[error(
        "no CUDA driver found: libcuda.so could not be loaded. GPU entry points need an NVIDIA \
         driver; on machines without one use the host backend (HostDevice)"
    )]
    NoCudaDriver,

    /// A CUDA driver call failed.
    #[error("CUDA {op} failed: {source}")]
    Cuda {
        /// What the pipeline was doing.
        op: &'static str,
        /// The driver's error.
        #[source]
        source: cudarc::driver::DriverError,
    },

    /// A configuration value is out of range.
    #[error("invalid {field} = {value}: {reason}")]
    Config {
        /// The field name, as the user spells it (e.g. `chunk_bytes`).
        field: &'static str,
        /// The rejected value.
        value: String,
        /// What was expected instead.
        reason: String,
    },

    /// A copy would reach past the end of an allocation.
    #[error("{what}: range {offset}..{end} is outside the {size}-byte allocation")]
    OutOfBounds {
        /// Which buffer.
        what: &'static str,
        /// First byte of the range.
        offset: u64,
        /// One past the last byte of the range.
        end: u64,
        /// Size of the allocation.
        size: u64,
    },

    /// A copy on the host backend failed (fault injection in tests) or its worker died.
    #[error("device copy failed ({op}): {detail}")]
    Copy {
        /// Which copy direction or step.
        op: &'static str,
        /// What happened.
        detail: String,
    },

    /// The transport failed.
    #[error("transport: {0}")]
    Transport(#[from] TransportError),

    /// Another part of the pipeline failed first; this is the message it left on the ring.
    /// A ring that saw a failure stays failed: build a new sender/receiver to retry.
    #[error("pipeline stopped: {0}")]
    Aborted(String),

    /// A received chunk or a verification step disagreed with what was sent.
    #[error("data verification failed: {0}")]
    Verify(String),

    /// A pipeline worker thread panicked (a bug; please report it).
    #[error("pipeline worker thread `{0}` panicked")]
    ThreadPanicked(&'static str),

    /// Safe byte access to a slot of a ring registered for remote writes: the peer's NIC can write
    /// the memory at any time, so a `&[u8]` over it could change under its holder (issue 26, F4).
    #[error(
        "slot {slot} belongs to a ring registered for remote writes (an RDMA receiver's): a peer can \
         write it at any time, so no safe slice over it is handed out; use the unsafe `*_unchecked` \
         accessors if the peer is trusted to write only with a credit"
    )]
    RemotelyWritable {
        /// The slot asked for.
        slot: usize,
    },
}

impl StageError {
    pub(crate) fn cuda(op: &'static str) -> impl FnOnce(cudarc::driver::DriverError) -> Self {
        move |source| StageError::Cuda { op, source }
    }

    pub(crate) fn config(
        field: &'static str,
        value: impl ToString,
        reason: impl Into<String>,
    ) -> Self {
        StageError::Config {
            field,
            value: value.to_string(),
            reason: reason.into(),
        }
    }
}

/// Errors raised by a [`crate::transport::SendTransport`] or [`crate::transport::RecvTransport`].
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// A socket or file operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What the transport was doing (includes the peer address where known).
        context: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The peer sent something the protocol does not allow.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The other end went away before the transfer finished.
    #[error("closed: {0}")]
    Closed(String),
    /// The pipeline that feeds this transport stopped with an error.
    #[error("aborted: {0}")]
    Aborted(String),
    /// An RDMA verb failed (feature `rdma`); `context` says which step and which peer.
    #[cfg(feature = "rdma")]
    #[error("{context}: {source}")]
    Rdma {
        /// What the transport was doing.
        context: String,
        /// The verbs error.
        #[source]
        source: erdma_verbs::Error,
    },
    /// The per-transfer checksum did not match: the bytes changed between the sender's staging
    /// buffer and ours (or the peer computes it wrongly).
    #[error(
        "checksum mismatch {context}: the sender's digest is {sent:#018x}, the bytes received give \
         {computed:#018x} (data corrupted in transit, or a broken peer)"
    )]
    Checksum {
        /// Where (connection, transfer, peer).
        context: String,
        /// The digest the peer sent.
        sent: u64,
        /// The digest of what arrived.
        computed: u64,
    },
    /// A wait on the peer exceeded the transport's timeout.
    #[error("timed out after {after:?} {waiting_for}")]
    Timeout {
        /// How long it waited.
        after: std::time::Duration,
        /// What it was waiting for (names the peer).
        waiting_for: String,
    },
    /// A transport setting is out of range.
    #[error("invalid {field} = {value}: {reason}")]
    Config {
        /// The setting.
        field: &'static str,
        /// The rejected value.
        value: String,
        /// What was expected.
        reason: String,
    },
}

impl TransportError {
    pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(io::Error) -> Self {
        let context = context.into();
        move |source| TransportError::Io { context, source }
    }

    #[cfg(feature = "rdma")]
    pub(crate) fn rdma(context: impl Into<String>) -> impl FnOnce(erdma_verbs::Error) -> Self {
        let context = context.into();
        move |source| TransportError::Rdma { context, source }
    }
}
