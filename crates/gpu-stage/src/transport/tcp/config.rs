//! The TCP transport's settings and their checks: how many parallel connections, and the bound on
//! every blocking step.

use std::time::Duration;

use crate::error::TransportError;

/// Most parallel connections one transport opens.
pub const MAX_CONNECTIONS: usize = 64;
/// Default number of parallel connections (see the crate README for the measurement).
pub const DEFAULT_CONNECTIONS: usize = 4;
/// Default bound on every blocking step (connect, accept, one write, the next chunk, the ACK).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// Settings of one end of a TCP transport. `connections` and `checksum` must be the same on both
/// ends (the receiver checks the sender's greeting and refuses a mismatch).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpOptions {
    /// Parallel connections (1..=[`MAX_CONNECTIONS`]).
    pub connections: usize,
    /// Bound on every blocking step (connect, accept, a greeting, one write, the next chunk, the ACK).
    pub timeout: Duration,
    /// Per-transfer checksum: each connection's END carries a digest of the bytes it sent
    /// ([`crate::checksum::chunk_digest`] over the staged host bytes), the receiver recomputes it
    /// over what it read and fails the transfer with
    /// [`TransportError::Checksum`](crate::TransportError::Checksum) on a mismatch; the ACK carries
    /// the sum back, which the sender checks. Off by default: it costs a CPU pass over every byte on
    /// both ends (measure with `stage_bench tcp --checksum`). It catches corruption, not a hostile
    /// peer: the digest is not a MAC.
    pub checksum: bool,
}

impl Default for TcpOptions {
    fn default() -> Self {
        TcpOptions {
            connections: DEFAULT_CONNECTIONS,
            timeout: DEFAULT_TIMEOUT,
            checksum: false,
        }
    }
}

impl TcpOptions {
    /// [`TcpOptions::default`] with `connections` connections.
    pub fn with_connections(connections: usize) -> Self {
        TcpOptions {
            connections,
            ..TcpOptions::default()
        }
    }

    pub(super) fn check(&self) -> Result<(), TransportError> {
        check_connections(self.connections)?;
        check_timeout(self.timeout)
    }
}

pub(super) fn check_timeout(timeout: Duration) -> Result<(), TransportError> {
    if timeout.is_zero() {
        return Err(TransportError::Config {
            field: "timeout",
            value: format!("{timeout:?}"),
            reason: "use a timeout above zero".into(),
        });
    }
    Ok(())
}

/// `from_streams`' check: exactly the configured number of streams was handed over.
pub(super) fn check_handed_over(streams: usize, connections: usize) -> Result<(), TransportError> {
    if streams == connections {
        return Ok(());
    }
    Err(TransportError::Config {
        field: "connections",
        value: connections.to_string(),
        reason: format!("{streams} streams were handed over"),
    })
}

pub(super) fn check_connections(connections: usize) -> Result<(), TransportError> {
    if (1..=MAX_CONNECTIONS).contains(&connections) {
        Ok(())
    } else {
        Err(TransportError::Config {
            field: "connections",
            value: connections.to_string(),
            reason: format!("use 1..={MAX_CONNECTIONS} parallel TCP connections"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_count_is_checked() {
        assert!(check_connections(0).is_err());
        assert!(check_connections(MAX_CONNECTIONS + 1).is_err());
        check_connections(1).unwrap();
    }

    #[test]
    fn a_zero_timeout_is_refused() {
        assert!(check_timeout(Duration::ZERO).is_err());
        check_timeout(Duration::from_millis(1)).unwrap();
    }
}
