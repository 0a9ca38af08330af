//! TCP transport: N parallel connections, chunk `seq` travels on connection `seq % N`, each
//! connection has its own writer (sender) or reader (receiver) thread so the connections really
//! run in parallel, and the receiver puts chunks back in order.
//!
//! Framing: every frame starts with a 40-byte little-endian header
//! `magic u32 | kind u32 | seq u64 | offset u64 | len u64 | aux u64`.
//! - `HELLO` (once per connection): `seq` = connection index, `aux` = number of connections,
//!   `offset` = flags (bit 0: per-transfer checksums on; other bits must be 0).
//! - `DATA`: `len` payload bytes follow, destined for `offset`.
//! - `END` (on every connection after the last chunk): `len` = total bytes, `aux` = total chunks,
//!   `offset` = with checksums, the wrapping sum of [`chunk_digest`](crate::checksum::chunk_digest)
//!   over the chunks this connection carried (else 0).
//! - `ACK` (receiver → sender on connection 0, after the data is on the device): same totals,
//!   `offset` = with checksums, the sum of the digests the receiver computed on every connection.
//! - `ABORT`: `len` bytes of UTF-8 reason follow.
//!
//! Backpressure is TCP's own: a receiver reader that finds no free ring slot stops reading, the
//! socket buffers fill, the sender's writer blocks, its slots stay busy and the sender's copy
//! issuer waits for them.
//!
//! Every blocking step is bounded by the transport's timeout (default [`DEFAULT_TIMEOUT`], like the
//! RDMA transport): connecting, accepting, the greeting, each write (a peer that stops reading for
//! that long fails the transfer), the wait for the next chunk and for the ACK. A stall fails with
//! [`TransportError::Timeout`](crate::TransportError::Timeout) naming the step and the peer.
//! Dropping either end shuts its sockets down, so no worker thread stays blocked on a stalled peer.
//!
//! Files: `config.rs` (connection count, timeout), `wire.rs` (the frame header), `sender.rs`,
//! `receiver.rs` (with `acquire.rs`: its readers take ring slots in chunk order) and `shutdown.rs`
//! ([`TcpShutdown`], for either end).

mod acquire;
mod config;
mod receiver;
mod sender;
mod shutdown;
mod wire;

pub use config::{DEFAULT_CONNECTIONS, DEFAULT_TIMEOUT, MAX_CONNECTIONS, TcpOptions};
pub use receiver::TcpReceiver;
#[cfg(feature = "fuzzing")]
pub(crate) use receiver::memory;
pub use sender::TcpSender;
pub use shutdown::TcpShutdown;
