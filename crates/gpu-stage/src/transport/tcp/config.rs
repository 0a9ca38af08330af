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
