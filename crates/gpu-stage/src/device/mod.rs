//! Backends: where the "device" memory lives and how copies to and from the ring are issued.
//!
//! [`CudaDevice`] drives a GPU through the CUDA driver (copy engines, streams, events).
//! [`HostDevice`] keeps "device" memory in ordinary RAM and runs each stream on a worker thread,
//! so the same pipeline logic (ordering, overlap, backpressure, errors) is exercised in CI.

mod bounce;
mod cuda;
mod host;

pub use bounce::Bounce;
pub use cuda::{BorrowedCudaMemory, CudaDevice, cuda_driver_present};
pub use host::{HostDevice, HostFaults, HostMemory};

use crate::error::StageError;
use crate::ring::HostBuffer;

pub(crate) mod sealed {
    pub trait Sealed {}

    /// Proof of being inside this crate: only it can construct one, so only it can call [`Target::target`].
    #[derive(Debug)]
    pub struct Token(pub(crate) ());

    /// The memory a receive writes. The token keeps `&mut M` inside the crate: a `&mut CudaSlice` over
    /// borrowed memory would let safe code swap in another slice and have cudarc free memory it does
    /// not own (issue 26, F2).
    pub trait Target<M> {
        fn target(&mut self, token: Token) -> &mut M;
    }
}

/// What [`crate::Receiver::recv`] can write into: the device's own memory (`CudaSlice<u8>`,
/// [`HostMemory`]) or CUDA memory borrowed from another owner ([`BorrowedCudaMemory`]).
pub trait RecvTarget<M>: sealed::Target<M> {}

impl<M: DeviceMemory> sealed::Target<M> for M {
    fn target(&mut self, _: sealed::Token) -> &mut M {
        self
    }
}

impl<M: DeviceMemory> RecvTarget<M> for M {}

/// Device memory the pipeline can copy from or into.
pub trait DeviceMemory: Send + Sync {
    /// Length in bytes.
    fn len_bytes(&self) -> usize;
}

/// A backend for the staging pipeline. Implemented by [`CudaDevice`] and [`HostDevice`]; sealed
/// because the copy methods carry memory-safety obligations the pipeline upholds.
pub trait Device: sealed::Sealed + Clone + Send + Sync + 'static {
    /// Device memory.
    type Memory: DeviceMemory + std::fmt::Debug;
    /// An in-order queue of copies.
    type Stream: Send + Sync + std::fmt::Debug;
    /// A marker recorded on a stream; waiting on it waits for the copies queued before it.
    type Event: Send + Sync + std::fmt::Debug;

    /// Human-readable name, e.g. `cuda:0 (NVIDIA H200)` or `host`.
    fn describe(&self) -> String;
    /// Allocates one staging buffer (page-locked for CUDA).
    fn alloc_staging(&self, len: usize) -> Result<HostBuffer, StageError>;
    /// Creates a copy stream.
    fn new_stream(&self) -> Result<Self::Stream, StageError>;
    /// Creates an event.
    fn new_event(&self) -> Result<Self::Event, StageError>;
    /// Makes this device current on the calling thread.
    fn bind(&self) -> Result<(), StageError>;

    /// Queues a copy of `src[offset..offset+len]` into `dst..dst+len` on `stream`. The copy runs
    /// after the call returns: only an event recorded on `stream` after it, and observed complete
    /// ([`Device::wait_event`] or [`Device::wait_stream`] returning `Ok`), says it is over.
    ///
    /// # Safety
    /// Until that completion has been observed, the caller must keep:
    /// - `dst..dst+len` allocated, valid for writes, and neither read nor written by anyone else
    ///   (the CPU, another copy, a NIC);
    /// - `src` alive and in place: the device memory must not be dropped or freed (with the host
    ///   backend, dropping a [`HostMemory`] frees the RAM the queued copy reads: a use after free),
    ///   and must not be written by anyone.
    ///
    /// If the wait fails (a copy error), the copy may still be running: keep both alive for good
    /// (leak them) rather than reuse them.
    unsafe fn copy_d2h(
        &self,
        stream: &Self::Stream,
        src: &Self::Memory,
        offset: usize,
        dst: *mut u8,
        len: usize,
    ) -> Result<(), StageError>;

    /// Queues a copy of `len` bytes at `src` into `dst[offset..offset+len]` on `stream`; it is over
    /// only once an event recorded on `stream` after this call is observed complete (as for
    /// [`Device::copy_d2h`]).
    ///
    /// # Safety
    /// Until that completion has been observed, the caller must keep:
    /// - `src..src+len` allocated, initialised, valid for reads and unmodified by anyone;
    /// - `dst` alive and in place (not dropped or freed: the `&mut` borrow ends when this call
    ///   returns, long before the copy does) and neither read nor written by anyone else.
    ///
    /// If the wait fails, keep both alive for good, as for [`Device::copy_d2h`].
    unsafe fn copy_h2d(
        &self,
        stream: &Self::Stream,
        src: *const u8,
        len: usize,
        dst: &mut Self::Memory,
        offset: usize,
    ) -> Result<(), StageError>;

    /// Records `event` after everything queued on `stream` so far.
    fn record(&self, event: &Self::Event, stream: &Self::Stream) -> Result<(), StageError>;
    /// Makes `stream` wait, without blocking the calling thread, until the work recorded in
    /// `event` so far is done (`cuStreamWaitEvent`). The event may belong to another device of
    /// the same backend; recording it again later does not affect this wait. A failure of the
    /// awaited work surfaces at the next wait on `stream`.
    fn stream_wait(&self, stream: &Self::Stream, event: &Self::Event) -> Result<(), StageError>;
    /// Blocks until `event`'s work is done.
    fn wait_event(&self, event: &Self::Event) -> Result<(), StageError>;
    /// Blocks until everything queued on `stream` is done.
    fn wait_stream(&self, stream: &Self::Stream) -> Result<(), StageError>;

    /// Allocates zeroed device memory.
    fn alloc_zeroed(&self, len: usize) -> Result<Self::Memory, StageError>;
    /// Allocates device memory holding a copy of `data` (blocking).
    fn upload(&self, data: &[u8]) -> Result<Self::Memory, StageError>;
    /// Copies device memory back into a new `Vec` (blocking).
    fn download(&self, mem: &Self::Memory) -> Result<Vec<u8>, StageError>;
    /// Overwrites device memory with zeros (blocking).
    fn zero(&self, mem: &mut Self::Memory) -> Result<(), StageError>;
}

/// Checks that `offset..offset+len` lies inside an allocation of `size` bytes.
pub(crate) fn check_range(
    what: &'static str,
    offset: usize,
    len: usize,
    size: usize,
) -> Result<(), StageError> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        end => Err(StageError::OutOfBounds {
            what,
            offset: offset as u64,
            end: end.map_or(u64::MAX, |e| e as u64),
            size: size as u64,
        }),
    }
}
