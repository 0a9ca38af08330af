//! # gpu-stage-py
//!
//! The Python binding of [gpu-stage](gpu_stage) behind the `rdmakit-rdt` package (Ray Direct
//! Transport backend `RDMAKIT`). The extension module is `rdmakit_rdt._native` (feature
//! `python`); everything it does is plain Rust in this crate, tested without Python:
//!
//! - [`buffer`]: `(device type, device index, address, length)` descriptions, checked, and the
//!   96-byte object header both ends compare before any byte lands in a buffer.
//! - [`handshake`], [`direct`]: the authenticated greeting of every connection, and the direct
//!   lane that carries each object's header (and small host objects whole).
//! - [`config`]: settings from the environment a RayCluster sets (`RDMAKIT_*`, `NCCL_IB_HCA`).
//! - [`channel`]: one direction of one actor pair (ring + TCP or RDMA session + pipelines), set
//!   up once and reused; [`channel::AbortHandle`] ends a running transfer from another thread.
//! - [`server`]: the producer's side of a receiver pull (what Ray's one-sided contract runs): one
//!   server per process holds the objects produced there and serves every consumer's session on
//!   its own thread.
//!
//! ## Example (host memory, TCP loopback)
//!
//! ```
//! use std::sync::Arc;
//! use _native::buffer::{BufferSpec, Place};
//! use _native::channel::{AbortHandle, PairListener, SendChannel};
//! use _native::config::{ChannelConfig, RingBackend};
//! use _native::handshake::Token;
//!
//! # fn main() -> Result<(), _native::error::BindError> {
//! let cfg = ChannelConfig { backend: RingBackend::Host, ..ChannelConfig::default() };
//! let listener = PairListener::bind("127.0.0.1:0")?;
//! let addr = listener.local_addr()?.to_string();
//! let src: Vec<u8> = (0..100_000u32).map(|i| i as u8).collect();
//! let mut dst = vec![0u8; src.len()];
//! // SAFETY: `src` and `dst` outlive both transfers and nothing else touches them meanwhile.
//! let spec = |p: *const u8, len| unsafe { BufferSpec::from_raw(Place::Cpu, p as u64, len) };
//! let (s, d) = (spec(src.as_ptr(), src.len())?, spec(dst.as_mut_ptr(), dst.len())?);
//! let c2 = cfg.clone();
//! let sender = std::thread::spawn(move || -> Result<u64, _native::error::BindError> {
//!     SendChannel::connect(&addr, &c2, AbortHandle::new(), Token::NONE)?.send("obj", &[s], None)
//! });
//! let mut rx = listener.accept(&cfg, AbortHandle::new(), Token::NONE)?;
//! assert_eq!(rx.recv("obj", &[d], None)?, 100_000);
//! sender.join().expect("sender thread")?;
//! assert_eq!(dst, src);
//! # Ok(())
//! # }
//! ```

pub mod buffer;
pub mod channel;
pub mod config;
pub mod direct;
pub mod error;
pub mod handshake;
pub mod pool;
#[cfg(feature = "python")]
mod python;
pub mod server;
