//! Entry points for the hostile-peer fuzz target (`crates/gpu-stage/fuzz`), behind the `fuzzing`
//! feature: not a public API, no stability promise.

use std::time::Duration;

use crate::config::RingConfig;
use crate::error::StageError;
use crate::transport::tcp::TcpOptions;

/// What [`tcp_receive`] did: how many transfers completed, the first error, and whether any byte of
/// the destination past what the completed transfers covered was written.
#[derive(Debug)]
pub struct TcpOutcome {
    /// Transfers received whole.
    pub completed: usize,
    /// The error that stopped the receive, if any.
    pub error: Option<StageError>,
    /// Bytes of the completed transfers (each one's total).
    pub bytes: Vec<u64>,
}

/// Receives up to `transfers` transfers into `dst_len` bytes from `streams`, the bytes one fake
/// sender wrote on each connection (HELLO first), through the real greeting, reader threads,
/// reassembly and receiving pipeline (host backend), with `timeout` on every wait. Every thread it
/// started has ended when it returns.
pub fn tcp_receive(
    streams: Vec<Vec<u8>>,
    checksum: bool,
    ring: RingConfig,
    dst_len: usize,
    transfers: usize,
    timeout: Duration,
) -> TcpOutcome {
    let options = TcpOptions {
        connections: streams.len(),
        timeout,
        checksum,
    };
    match crate::transport::tcp::memory::receive(streams, options, ring, dst_len, transfers) {
        Ok(r) => {
            let bytes: Vec<u64> = r
                .transfers
                .iter()
                .filter_map(|t| t.as_ref().ok().map(|s| s.bytes))
                .collect();
            TcpOutcome {
                completed: bytes.len(),
                error: r.transfers.into_iter().find_map(Result::err),
                bytes,
            }
        }
        Err(e) => TcpOutcome {
            completed: 0,
            error: Some(e),
            bytes: Vec::new(),
        },
    }
}

/// One TCP frame header as a sender writes it (`kind`: 1 HELLO, 2 DATA, 3 END, 4 ACK, else ABORT).
pub fn tcp_frame(kind: u32, seq: u64, offset: u64, len: u64, aux: u64) -> Vec<u8> {
    crate::transport::tcp::memory::frame(kind, seq, offset, len, aux)
}

/// Feeds `bytes` as the peer's side of an RDMA side channel after setup to the receiver's and the
/// sender's side-channel readers (the same functions the transports run), and each line to the
/// setup parsers and checks; returns how many END / ACK messages the readers accepted.
#[cfg(feature = "rdma")]
pub fn rdma_side_channel(bytes: &[u8]) -> (usize, usize) {
    crate::transport::rdma::fuzz_side_channel(bytes)
}
