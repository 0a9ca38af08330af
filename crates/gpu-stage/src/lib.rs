//! # gpu-stage
//!
//! A GPU ↔ host staging pipeline for machines where GPUDirect RDMA is off (Alibaba eRDMA
//! instances, for one): every byte crosses host memory, and this crate makes that crossing run at
//! copy-engine speed instead of the < 1 GiB/s a naive stage gets.
//!
//! - A [`StagingRing`] of page-locked host buffers (default 4 MiB × 8, never below 1 MiB per
//!   buffer), one event per buffer, device→host and host→device copies on their own streams.
//! - A [`Sender`] slices device memory into chunks and hands each filled buffer to a
//!   [`SendTransport`] while the next copy runs; a [`Receiver`] does the mirror image through a
//!   [`RecvTransport`]. The last, short chunk is copied exactly; nothing reads or writes past an
//!   allocation.
//! - Transports: [`transport::inproc`] (GPU A → host ring → GPU B in one process, zero CPU
//!   copies), [`transport::tcp`] (N parallel connections, framed, backpressured) and, with the
//!   `rdma` feature, `transport::rdma` (WRITE_WITH_IMM straight into the peer's registered ring,
//!   credit-based flow control, several QPs and NICs; see the crate README).
//! - Backends: [`CudaDevice`] (cudarc, loaded at run time: without a CUDA driver every GPU entry
//!   point returns [`StageError::NoCudaDriver`]) and [`HostDevice`] (RAM plus worker-thread
//!   "streams"), which runs the very same pipeline in CI.
//! - [`bench`](mod@bench): the measurements behind `rdmakit bench` and the `stage_bench` example,
//!   verified by checksum on every run.
//!
//! ## Example (host backend, runs anywhere)
//!
//! ```
//! use gpu_stage::{Device, HostDevice, InProcessStage, RingConfig, MIB};
//!
//! # fn main() -> Result<(), gpu_stage::StageError> {
//! let dev = HostDevice::new();
//! let data: Vec<u8> = (0..3 * MIB + 5).map(|i| (i % 251) as u8).collect();
//! let src = dev.upload(&data)?;
//! let mut dst = dev.alloc_zeroed(data.len())?;
//!
//! // Two 1 MiB buffers: 4 chunks, the last one 5 bytes long.
//! let mut stage = InProcessStage::new(&dev, &dev, RingConfig::new(MIB, 2)?)?;
//! let stats = stage.transfer(&src, &mut dst)?;
//! assert_eq!(stats.chunks, 4);
//! assert_eq!(dev.download(&dst)?, data);
//! # Ok(())
//! # }
//! ```
//!
//! With GPUs, swap `HostDevice::new()` for `CudaDevice::new(0)?` / `CudaDevice::new(1)?`; device
//! memory is then a `cudarc::driver::CudaSlice<u8>`.

pub mod bench;
pub mod checksum;
pub mod config;
pub mod device;
pub mod error;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod pipeline;
pub mod ring;
pub mod transport;

pub use config::{
    DEFAULT_CHUNK_BYTES, DEFAULT_SLOTS, MIB, MIN_CHUNK_BYTES, RingConfig, parse_size,
};
pub use device::{
    BorrowedCudaMemory, Bounce, CudaDevice, Device, DeviceMemory, HostDevice, HostFaults,
    HostMemory, RecvTarget, cuda_driver_present,
};
pub use error::{StageError, TransportError};
pub use pipeline::{InProcessStage, Receiver, Sender, TransferStats, new_ring};
pub use ring::{RawRegion, SlotGate, SlotToken, StagingRing};
pub use transport::inproc::{InProcReceiver, InProcSender, in_process_pair};
#[cfg(feature = "rdma")]
pub use transport::rdma::{ConnectMode, RdmaConfig, RdmaReceiver, RdmaSender};
pub use transport::tcp::{TcpOptions, TcpReceiver, TcpSender, TcpShutdown};
pub use transport::{Chunk, RecvTransport, SendTransport, TransferSummary};

/// The README's code blocks, compiled by `cargo test --doc` so that they cannot drift from the API.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
