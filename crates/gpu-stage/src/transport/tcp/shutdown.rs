//! [`TcpShutdown`]: closing either end's connections from another thread.

use std::net::{Shutdown, TcpStream};

use crate::error::TransportError;

/// Shuts a TCP transport's connections down from any thread: every blocked read, write or wait
/// of either end then fails at once (the peer sees the connections close), so an abort never waits
/// for a timeout. Made by [`TcpSender::shutdown_handle`](super::TcpSender::shutdown_handle) /
/// [`TcpReceiver::shutdown_handle`](super::TcpReceiver::shutdown_handle); the
/// transport stays unusable afterwards.
#[derive(Debug)]
pub struct TcpShutdown {
    sockets: Vec<TcpStream>,
}

impl TcpShutdown {
    pub(super) fn of(sockets: &[TcpStream]) -> Result<Self, TransportError> {
        let sockets = sockets
            .iter()
            .map(|s| s.try_clone())
            .collect::<Result<Vec<_>, _>>()
            .map_err(TransportError::io("cloning a socket handle"))?;
        Ok(TcpShutdown { sockets })
    }

    /// Shuts every connection down in both directions (idempotent).
    pub fn shutdown(&self) {
        for s in &self.sockets {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}
