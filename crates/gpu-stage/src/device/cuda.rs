//! CUDA backend over cudarc's driver API (dynamically loaded, so the crate builds and its tests run
//! on machines without CUDA; every entry point checks for the driver first and returns
//! [`StageError::NoCudaDriver`] instead of panicking).
//!
//! Pitfalls of cudarc 0.19 handled here:
//! - `alloc_pinned` asks for write-combined memory, which is very slow for CPU (and NIC) reads;
//!   the ring uses `alloc_pinned_with_flags` with `CU_MEMHOSTALLOC_PORTABLE` only (cacheable, and
//!   usable by every context in the process, which the in-process GPU A → GPU B path needs).
//! - `CudaStream::memcpy_dtoh` copies the *destination's* full length and asserts on mismatch; the
//!   pipeline calls the driver-level async copy with a destination slice of exactly the chunk.
//! - copies into plain (pageable) slices are not synchronised by cudarc; `download` waits on the
//!   stream before handing the `Vec` back.

use std::mem::ManuallyDrop;
use std::ops::Deref;
use std::sync::Arc;

use cudarc::driver::result;
use cudarc::driver::sys;
use cudarc::driver::{CudaContext, CudaEvent, CudaSlice, CudaStream, DevicePtr, DevicePtrMut};

use super::{Device, DeviceMemory, check_range, sealed};
use crate::error::StageError;
use crate::ring::HostBuffer;

/// True when the CUDA driver library (libcuda) can be loaded on this machine.
pub fn cuda_driver_present() -> bool {
    // SAFETY: only tries to dlopen the library; no symbol is called.
    unsafe { sys::is_culib_present() }
}

fn ensure_driver() -> Result<(), StageError> {
    if cuda_driver_present() {
        Ok(())
    } else {
        Err(StageError::NoCudaDriver)
    }
}

/// One GPU, driven through its primary context, with a utility stream for allocations.
#[derive(Clone)]
pub struct CudaDevice {
    ctx: Arc<CudaContext>,
    util: Arc<CudaStream>,
}

impl std::fmt::Debug for CudaDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaDevice")
            .field("ordinal", &self.ctx.ordinal())
            .finish()
    }
}

impl CudaDevice {
    /// Opens GPU `ordinal`. Fails with [`StageError::NoCudaDriver`] when no driver is installed.
    pub fn new(ordinal: usize) -> Result<Self, StageError> {
        ensure_driver()?;
        let count = Self::count()?;
        if ordinal >= count {
            return Err(StageError::config(
                "device",
                ordinal,
                format!("this machine has {count} CUDA device(s), numbered from 0"),
            ));
        }
        let ctx = CudaContext::new(ordinal).map_err(StageError::cuda("context creation"))?;
        let util = ctx
            .new_stream()
            .map_err(StageError::cuda("stream creation"))?;
        Ok(CudaDevice { ctx, util })
    }

    /// Number of CUDA devices. Fails with [`StageError::NoCudaDriver`] when no driver is installed.
    pub fn count() -> Result<usize, StageError> {
        ensure_driver()?;
        result::init().map_err(StageError::cuda("driver init"))?;
        let n = CudaContext::device_count().map_err(StageError::cuda("device count"))?;
        Ok(usize::try_from(n).unwrap_or(0))
    }

    /// The cudarc context (to allocate or launch with cudarc directly).
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// The device ordinal.
    pub fn ordinal(&self) -> usize {
        self.ctx.ordinal()
    }

    /// A stream for the caller's own work (allocations, memsets).
    pub fn util_stream(&self) -> &Arc<CudaStream> {
        &self.util
    }

    /// Device memory over `len` bytes at device address `ptr` that somebody else allocated (a
    /// torch CUDA tensor's `data_ptr()`), usable as the source of a send or the destination of a
    /// receive. Dropping it does not free the memory.
    ///
    /// Checked through `cuPointerGetAttribute`: the address is not null, is device memory (not
    /// host, managed or array memory), belongs to this device, and `ptr..ptr+len` lies inside
    /// the allocation that holds `ptr`.
    ///
    /// # Safety
    /// The caller must guarantee that:
    /// - the allocation stays alive (is not freed, nor returned to a caching allocator that may
    ///   reuse it) for as long as the returned value lives;
    /// - no other work writes it (or, for a receive, reads or writes it) meanwhile, on any stream or
    ///   from the CPU;
    /// - work queued on other streams before the call is complete (synchronise the producer's
    ///   stream first), and the memory is initialised if it is the source of a send;
    /// - no other `BorrowedCudaMemory` over an overlapping range is used for a receive at the same
    ///   time.
    pub unsafe fn borrow_raw(
        &self,
        ptr: u64,
        len: usize,
    ) -> Result<BorrowedCudaMemory, StageError> {
        ensure_driver()?;
        if ptr == 0 {
            return Err(StageError::config(
                "pointer",
                0,
                "a null pointer is not device memory",
            ));
        }
        self.bind()?;
        let mut mem_type: u32 = 0;
        // SAFETY: MEMORY_TYPE writes one `unsigned int` into `mem_type`.
        unsafe {
            pointer_attribute(
                &mut mem_type,
                sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                ptr,
            )
        }?;
        if mem_type != sys::CUmemorytype::CU_MEMORYTYPE_DEVICE as u32 {
            return Err(StageError::config(
                "pointer",
                format!("{ptr:#x}"),
                format!(
                    "not CUDA device memory (CUmemorytype {mem_type}); pass host memory as a cpu buffer"
                ),
            ));
        }
        // Managed (unified) memory reports CU_MEMORYTYPE_DEVICE too, but the CPU may touch and migrate
        // its pages while a copy runs: refuse it rather than claim a check that is not made.
        let mut managed: u32 = 0;
        // SAFETY: IS_MANAGED writes one boolean (documented as `unsigned int`-sized or smaller; a
        // zeroed `u32` holds either width).
        unsafe {
            pointer_attribute(
                &mut managed,
                sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_IS_MANAGED,
                ptr,
            )
        }?;
        if managed != 0 {
            return Err(StageError::config(
                "pointer",
                format!("{ptr:#x}"),
                "it is CUDA managed (unified) memory; pass memory from cudaMalloc (a torch CUDA tensor)",
            ));
        }
        let mut ordinal: i32 = -1;
        // SAFETY: DEVICE_ORDINAL writes one `int`.
        unsafe {
            pointer_attribute(
                &mut ordinal,
                sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                ptr,
            )
        }?;
        if usize::try_from(ordinal).ok() != Some(self.ordinal()) {
            return Err(StageError::config(
                "pointer",
                format!("{ptr:#x}"),
                format!(
                    "it is memory of cuda:{ordinal}, not of cuda:{}",
                    self.ordinal()
                ),
            ));
        }
        let mut start: sys::CUdeviceptr = 0;
        let mut size: usize = 0;
        // SAFETY: RANGE_START_ADDR writes one CUdeviceptr, RANGE_SIZE one size_t.
        unsafe {
            pointer_attribute(
                &mut start,
                sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                ptr,
            )?;
            pointer_attribute(
                &mut size,
                sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_RANGE_SIZE,
                ptr,
            )?;
        }
        let offset = ptr.saturating_sub(start);
        check_range(
            "borrowed CUDA memory",
            usize::try_from(offset).unwrap_or(usize::MAX),
            len,
            size,
        )?;
        // SAFETY: `ptr..ptr+len` is inside a live device allocation of this context (checked
        // above; liveness is the caller's promise). The slice is never freed: Drop leaks it.
        let slice = unsafe { self.util.upgrade_device_ptr::<u8>(ptr, len) };
        Ok(BorrowedCudaMemory {
            slice: ManuallyDrop::new(slice),
        })
    }
}

/// Reads one pointer attribute into `out`.
///
/// # Safety
/// `T` must be the type the driver writes for `attribute`.
unsafe fn pointer_attribute<T>(
    out: &mut T,
    attribute: sys::CUpointer_attribute,
    ptr: sys::CUdeviceptr,
) -> Result<(), StageError> {
    // SAFETY: `out` is a valid, exclusive location of the attribute's type (caller's promise).
    unsafe { sys::cuPointerGetAttribute((out as *mut T).cast(), attribute, ptr) }
        .result()
        .map_err(StageError::cuda("pointer query (cuPointerGetAttribute)"))
}

/// CUDA device memory that somebody else owns ([`CudaDevice::borrow_raw`]): dereferences to a
/// `&CudaSlice<u8>` for [`crate::Sender::send`], is a [`super::RecvTarget`] for [`crate::Receiver::recv`],
/// and dropping it never frees the memory. It never gives out a `&mut CudaSlice<u8>`:
///
/// ```compile_fail,E0596
/// fn steal(b: &mut gpu_stage::BorrowedCudaMemory) -> &mut cudarc::driver::CudaSlice<u8> {
///     &mut *b // before (issue 26, F2): DerefMut, then `std::mem::replace(&mut *b, owned)` freed it
/// }
/// ```
pub struct BorrowedCudaMemory {
    slice: ManuallyDrop<CudaSlice<u8>>,
}

impl std::fmt::Debug for BorrowedCudaMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BorrowedCudaMemory")
            .field("len", &self.slice.len())
            .finish()
    }
}

impl Deref for BorrowedCudaMemory {
    type Target = CudaSlice<u8>;
    fn deref(&self) -> &CudaSlice<u8> {
        &self.slice
    }
}

// No `DerefMut`: with a `&mut CudaSlice<u8>`, safe code could `mem::replace` the slice and drop the
// borrowed one, and cudarc would free memory its owner (torch's caching allocator) still holds. Receives
// reach the slice through the crate-private `Target` instead.
impl super::sealed::Target<CudaSlice<u8>> for BorrowedCudaMemory {
    fn target(&mut self, _: super::sealed::Token) -> &mut CudaSlice<u8> {
        &mut self.slice
    }
}

impl super::RecvTarget<CudaSlice<u8>> for BorrowedCudaMemory {}

impl Drop for BorrowedCudaMemory {
    fn drop(&mut self) {
        // SAFETY: `slice` is taken exactly once, here, and never used again.
        let slice = unsafe { ManuallyDrop::take(&mut self.slice) };
        // Queues the wait for pending reads/writes and forgets the pointer instead of freeing it.
        let _ = slice.leak();
    }
}

impl DeviceMemory for CudaSlice<u8> {
    fn len_bytes(&self) -> usize {
        self.len()
    }
}

impl sealed::Sealed for CudaDevice {}

impl Device for CudaDevice {
    type Memory = CudaSlice<u8>;
    type Stream = Arc<CudaStream>;
    type Event = CudaEvent;

    fn describe(&self) -> String {
        match self.ctx.name() {
            Ok(name) => format!("cuda:{} ({name})", self.ctx.ordinal()),
            Err(_) => format!("cuda:{}", self.ctx.ordinal()),
        }
    }

    fn alloc_staging(&self, len: usize) -> Result<HostBuffer, StageError> {
        // SAFETY: the memory is uninitialised until `HostBuffer::pinned` zeroes it, which it does before
        // returning it, so no slice over it is made first.
        let slice = unsafe {
            self.ctx
                .alloc_pinned_with_flags::<u8>(len, sys::CU_MEMHOSTALLOC_PORTABLE)
        }
        .map_err(StageError::cuda(
            "page-locked host allocation (cuMemHostAlloc)",
        ))?;
        HostBuffer::pinned(slice)
    }

    fn new_stream(&self) -> Result<Arc<CudaStream>, StageError> {
        self.ctx
            .new_stream()
            .map_err(StageError::cuda("stream creation"))
    }

    fn new_event(&self) -> Result<CudaEvent, StageError> {
        // Default flags (timing disabled): cheapest to record, spin-waited for low latency.
        self.ctx
            .new_event(None)
            .map_err(StageError::cuda("event creation"))
    }

    fn bind(&self) -> Result<(), StageError> {
        self.ctx
            .bind_to_thread()
            .map_err(StageError::cuda("binding the context to this thread"))
    }

    unsafe fn copy_d2h(
        &self,
        stream: &Arc<CudaStream>,
        src: &CudaSlice<u8>,
        offset: usize,
        dst: *mut u8,
        len: usize,
    ) -> Result<(), StageError> {
        check_range("device→host source", offset, len, src.len())?;
        let view = src
            .try_slice(offset..offset + len)
            .ok_or(StageError::OutOfBounds {
                what: "device→host source",
                offset: offset as u64,
                end: (offset + len) as u64,
                size: src.len() as u64,
            })?;
        self.bind()?;
        let (src_ptr, _read_guard) = view.device_ptr(stream);
        // SAFETY: src_ptr..src_ptr+len lies inside `src` (checked above); the caller guarantees that
        // `dst..dst+len` stays valid, and `src` alive, until the stream passes the next event. The
        // pointer goes to the driver as it is: no `&mut [u8]` is made over host memory that may be a
        // slot of a remotely writable ring (issue 26, F4).
        unsafe { sys::cuMemcpyDtoHAsync_v2(dst.cast(), src_ptr, len, stream.cu_stream()) }
            .result()
            .map_err(StageError::cuda("device→host copy (cuMemcpyDtoHAsync)"))
    }

    unsafe fn copy_h2d(
        &self,
        stream: &Arc<CudaStream>,
        src: *const u8,
        len: usize,
        dst: &mut CudaSlice<u8>,
        offset: usize,
    ) -> Result<(), StageError> {
        let size = dst.len();
        check_range("host→device destination", offset, len, size)?;
        let mut view = dst
            .try_slice_mut(offset..offset + len)
            .ok_or(StageError::OutOfBounds {
                what: "host→device destination",
                offset: offset as u64,
                end: (offset + len) as u64,
                size: size as u64,
            })?;
        self.bind()?;
        let (dst_ptr, _write_guard) = view.device_ptr_mut(stream);
        // SAFETY: dst_ptr..dst_ptr+len lies inside `dst` (checked above); the caller guarantees that
        // `src..src+len` stays valid and unmodified, and `dst` alive, until the stream passes the next
        // event. A raw pointer, not a `&[u8]`: the source is a ring slot a peer may be able to write
        // (issue 26, F4).
        unsafe { sys::cuMemcpyHtoDAsync_v2(dst_ptr, src.cast(), len, stream.cu_stream()) }
            .result()
            .map_err(StageError::cuda("host→device copy (cuMemcpyHtoDAsync)"))
    }

    fn record(&self, event: &CudaEvent, stream: &Arc<CudaStream>) -> Result<(), StageError> {
        event
            .record(stream)
            .map_err(StageError::cuda("event record"))
    }

    fn stream_wait(&self, stream: &Arc<CudaStream>, event: &CudaEvent) -> Result<(), StageError> {
        // cuStreamWaitEvent accepts an event of another context or device.
        stream
            .wait(event)
            .map_err(StageError::cuda("stream wait on event (cuStreamWaitEvent)"))
    }

    fn wait_event(&self, event: &CudaEvent) -> Result<(), StageError> {
        event
            .synchronize()
            .map_err(StageError::cuda("event synchronize"))
    }

    fn wait_stream(&self, stream: &Arc<CudaStream>) -> Result<(), StageError> {
        stream
            .synchronize()
            .map_err(StageError::cuda("stream synchronize"))
    }

    fn alloc_zeroed(&self, len: usize) -> Result<CudaSlice<u8>, StageError> {
        let mem = self
            .util
            .alloc_zeros::<u8>(len)
            .map_err(StageError::cuda("device allocation"))?;
        self.wait_stream(&self.util)?;
        Ok(mem)
    }

    fn upload(&self, data: &[u8]) -> Result<CudaSlice<u8>, StageError> {
        let mem = self
            .util
            .clone_htod(data)
            .map_err(StageError::cuda("upload (host→device)"))?;
        self.wait_stream(&self.util)?;
        Ok(mem)
    }

    fn download(&self, mem: &CudaSlice<u8>) -> Result<Vec<u8>, StageError> {
        let out = self
            .util
            .clone_dtoh(mem)
            .map_err(StageError::cuda("download (device→host)"))?;
        // cudarc does not synchronise copies into plain Vecs: wait before anyone reads it.
        self.wait_stream(&self.util)?;
        Ok(out)
    }

    fn zero(&self, mem: &mut CudaSlice<u8>) -> Result<(), StageError> {
        self.util
            .memset_zeros(mem)
            .map_err(StageError::cuda("memset"))?;
        self.wait_stream(&self.util)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_driver_is_an_error_not_a_panic() {
        if cuda_driver_present() {
            // A real driver: opening an absurd ordinal must still be an error.
            assert!(CudaDevice::new(10_000).is_err());
        } else {
            assert!(matches!(CudaDevice::new(0), Err(StageError::NoCudaDriver)));
            assert!(matches!(CudaDevice::count(), Err(StageError::NoCudaDriver)));
        }
    }
}
