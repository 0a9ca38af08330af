//! [`TcpShutdown`]: closing either end's connections from another thread.

use std::net::{Shutdown, TcpStream};
use std::os::fd::AsRawFd;

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

    /// Whether the peer has closed or reset any of the connections (`POLLRDHUP`, `POLLHUP` or
    /// `POLLERR` on a socket; a zero-timeout poll, so it never blocks). An idle channel whose peer
    /// process died answers true: its kernel sent FIN or RST when the process went away. Reader
    /// threads blocked on the same sockets are not disturbed (poll consumes nothing).
    pub fn peer_closed(&self) -> bool {
        let mut fds: Vec<libc::pollfd> = self
            .sockets
            .iter()
            .map(|s| libc::pollfd {
                fd: s.as_raw_fd(),
                events: libc::POLLRDHUP,
                revents: 0,
            })
            .collect();
        // SAFETY: `fds` is a valid array of `fds.len()` pollfd entries for descriptors `self`
        // keeps open for the duration of the call; a zero timeout returns at once.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 0) };
        n > 0
            && fds
                .iter()
                .any(|p| p.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0)
    }

    /// Shuts every connection down in both directions (idempotent).
    pub fn shutdown(&self) {
        for s in &self.sockets {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}
