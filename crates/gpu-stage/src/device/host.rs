//! Host-memory backend: "device" memory is RAM, each stream is a worker thread that runs its
//! copies in order, events are generation counters. Copies are asynchronous exactly like CUDA's,
//! so the pipeline's overlap, ordering and error paths are exercised without a GPU. Optional
//! fault injection (a failing copy, slow copies) drives the error tests.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use super::{Device, DeviceMemory, check_range, sealed};
use crate::error::StageError;
use crate::ring::HostBuffer;

/// Faults to inject into a [`HostDevice`] (tests only need these; all off by default).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostFaults {
    /// Fail the n-th device→host copy (0-based, counted over the device's lifetime).
    pub fail_d2h_at: Option<usize>,
    /// Fail the n-th host→device copy (0-based).
    pub fail_h2d_at: Option<usize>,
    /// Sleep this long before every copy (a slow copy engine).
    pub copy_delay: Duration,
    /// Silently corrupt the n-th host→device copy (0-based): it succeeds, but the first byte it
    /// writes is inverted, as a flaky link or a protocol bug would leave it. Lets a test prove that
    /// verification catches bad data.
    pub corrupt_h2d_at: Option<usize>,
}

#[derive(Debug, Default)]
struct FaultState {
    cfg: HostFaults,
    d2h: AtomicUsize,
    h2d: AtomicUsize,
}

/// The host-memory backend. Cheap to clone; clones share fault counters.
#[derive(Clone, Debug, Default)]
pub struct HostDevice {
    faults: Arc<FaultState>,
}

impl HostDevice {
    /// A backend with no faults.
    pub fn new() -> Self {
        Self::default()
    }

    /// A backend that injects `faults`.
    pub fn with_faults(faults: HostFaults) -> Self {
        HostDevice {
            faults: Arc::new(FaultState {
                cfg: faults,
                ..FaultState::default()
            }),
        }
    }
}

/// "Device" memory of the host backend: a page-aligned heap allocation.
#[derive(Debug)]
pub struct HostMemory {
    buf: HostBuffer,
}

impl HostMemory {
    /// The bytes. Only call while no copy into this memory is in flight (the pipeline holds
    /// `&mut` during a receive, so safe code cannot observe a copy in progress).
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the buffer is owned, initialised (zeroed at allocation) and in bounds; writers
        // need `&mut self`.
        unsafe { std::slice::from_raw_parts(self.ptr(), self.buf.len()) }
    }

    /// "Device" memory over `len` bytes at `ptr` that somebody else owns (a numpy array, a CPU
    /// torch tensor): the pipeline copies straight from or into it, and dropping the value does not
    /// free it. A null pointer is an error; `len` may be 0.
    ///
    /// # Safety
    /// `ptr..ptr+len` must be one valid, initialised allocation (or part of one), readable and
    /// writable, that stays allocated and is neither read nor written by anyone else for as long as
    /// the returned value lives (a receive writes into it from a copy thread), and past that until
    /// every copy queued on it directly ([`Device::copy_d2h`]/[`Device::copy_h2d`]) is observed
    /// complete. Two values over overlapping ranges must not be used at the same time where either
    /// is written (the target of a receive).
    pub unsafe fn borrowed(ptr: *mut u8, len: usize) -> Result<Self, StageError> {
        let ptr = std::ptr::NonNull::new(ptr)
            .ok_or_else(|| StageError::config("pointer", 0, "a null pointer is not host memory"))?;
        if isize::try_from(len).is_err() || (ptr.as_ptr() as usize).checked_add(len).is_none() {
            return Err(StageError::config(
                "length",
                len,
                "the range does not fit in the address space",
            ));
        }
        // SAFETY: forwarded to the caller (see above).
        let buf = unsafe { HostBuffer::borrowed(ptr, len) };
        Ok(HostMemory { buf })
    }

    fn ptr(&self) -> *mut u8 {
        self.buf.as_ptr()
    }
}

impl DeviceMemory for HostMemory {
    fn len_bytes(&self) -> usize {
        self.buf.len()
    }
}

enum Job {
    Copy {
        src: *const u8,
        dst: *mut u8,
        len: usize,
        fail: Option<&'static str>,
        /// Invert the first byte written (`HostFaults::corrupt_h2d_at`).
        corrupt: bool,
    },
    Signal(Arc<EventInner>, u64),
    /// Block this stream until the event reaches the generation (a cross-stream wait).
    Wait(Arc<EventInner>, u64),
}

/// A stream of the host backend: a worker thread running copies in submission order.
#[derive(Debug)]
pub struct HostStream {
    tx: Option<mpsc::Sender<Job>>,
    worker: Option<JoinHandle<()>>,
}

// SAFETY: a `Job::Copy` carries the addresses of a copy queued through `Device::copy_d2h`/`copy_h2d`,
// whose callers promise that both ranges stay valid and untouched by anyone else until a later event
// completes; the worker thread is the only one that dereferences them. Raw pointers (not addresses)
// keep their provenance, so Miri checks the accesses.
unsafe impl Send for Job {}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Job::Copy { len, .. } => write!(f, "Copy({len} bytes)"),
            Job::Signal(_, g) => write!(f, "Signal({g})"),
            Job::Wait(_, g) => write!(f, "Wait({g})"),
        }
    }
}

impl HostStream {
    fn spawn(delay: Duration) -> Result<Self, StageError> {
        let (tx, rx) = mpsc::channel::<Job>();
        let worker = std::thread::Builder::new()
            .name("gpu-stage-host-stream".into())
            .spawn(move || {
                let mut broken: Option<String> = None;
                for job in rx {
                    match job {
                        Job::Copy {
                            src,
                            dst,
                            len,
                            fail,
                            corrupt,
                        } => {
                            if broken.is_some() {
                                continue;
                            }
                            if !delay.is_zero() {
                                std::thread::sleep(delay);
                            }
                            if let Some(op) = fail {
                                broken = Some(format!("injected fault in {op} copy"));
                                continue;
                            }
                            // SAFETY: the submitter guaranteed both ranges stay valid and
                            // unaliased until a later signal completes (Device contract).
                            unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
                            if corrupt && len > 0 {
                                // SAFETY: `dst` is the first byte of the range just written.
                                unsafe { *dst ^= 0xff };
                            }
                        }
                        Job::Signal(ev, generation) => ev.complete(generation, broken.clone()),
                        Job::Wait(ev, generation) => {
                            // Like CUDA, a failure upstream poisons this stream too.
                            if let Err(e) = ev.wait_for(generation)
                                && broken.is_none()
                            {
                                broken = Some(e);
                            }
                        }
                    }
                }
            })
            .map_err(|e| StageError::Copy {
                op: "stream creation",
                detail: e.to_string(),
            })?;
        Ok(HostStream {
            tx: Some(tx),
            worker: Some(worker),
        })
    }

    fn submit(&self, job: Job) -> Result<(), StageError> {
        self.tx
            .as_ref()
            .and_then(|tx| tx.send(job).ok())
            .ok_or_else(|| StageError::Copy {
                op: "stream",
                detail: "host stream worker has exited".into(),
            })
    }
}

impl Drop for HostStream {
    fn drop(&mut self) {
        drop(self.tx.take());
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }
}

#[derive(Debug, Default)]
struct EventState {
    recorded: u64,
    done: u64,
    error: Option<String>,
}

#[derive(Debug, Default)]
struct EventInner {
    state: Mutex<EventState>,
    cv: Condvar,
}

impl EventInner {
    fn complete(&self, generation: u64, error: Option<String>) {
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        st.done = st.done.max(generation);
        if error.is_some() {
            st.error = error;
        }
        drop(st);
        self.cv.notify_all();
    }

    /// Blocks until `generation` is done; the recorded error, if any.
    fn wait_for(&self, generation: u64) -> Result<(), String> {
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        while st.done < generation {
            st = self.cv.wait(st).unwrap_or_else(PoisonError::into_inner);
        }
        match &st.error {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }
}

/// An event of the host backend.
#[derive(Debug, Default)]
pub struct HostEvent {
    inner: Arc<EventInner>,
}

impl sealed::Sealed for HostDevice {}

impl Device for HostDevice {
    type Memory = HostMemory;
    type Stream = HostStream;
    type Event = HostEvent;

    fn describe(&self) -> String {
        "host".into()
    }

    fn alloc_staging(&self, len: usize) -> Result<HostBuffer, StageError> {
        HostBuffer::heap(len)
    }

    fn new_stream(&self) -> Result<HostStream, StageError> {
        HostStream::spawn(self.faults.cfg.copy_delay)
    }

    fn new_event(&self) -> Result<HostEvent, StageError> {
        Ok(HostEvent::default())
    }

    fn bind(&self) -> Result<(), StageError> {
        Ok(())
    }

    unsafe fn copy_d2h(
        &self,
        stream: &HostStream,
        src: &HostMemory,
        offset: usize,
        dst: *mut u8,
        len: usize,
    ) -> Result<(), StageError> {
        check_range("device→host source", offset, len, src.len_bytes())?;
        let n = self.faults.d2h.fetch_add(1, Ordering::Relaxed);
        let fail = (self.faults.cfg.fail_d2h_at == Some(n)).then_some("device→host");
        stream.submit(Job::Copy {
            // In bounds (checked above): `offset + len <= src.len_bytes()`.
            src: src.ptr().wrapping_add(offset),
            dst,
            len,
            fail,
            corrupt: false,
        })
    }

    unsafe fn copy_h2d(
        &self,
        stream: &HostStream,
        src: *const u8,
        len: usize,
        dst: &mut HostMemory,
        offset: usize,
    ) -> Result<(), StageError> {
        check_range("host→device destination", offset, len, dst.len_bytes())?;
        let n = self.faults.h2d.fetch_add(1, Ordering::Relaxed);
        let fail = (self.faults.cfg.fail_h2d_at == Some(n)).then_some("host→device");
        stream.submit(Job::Copy {
            src,
            // In bounds (checked above).
            dst: dst.ptr().wrapping_add(offset),
            len,
            fail,
            corrupt: self.faults.cfg.corrupt_h2d_at == Some(n),
        })
    }

    fn record(&self, event: &HostEvent, stream: &HostStream) -> Result<(), StageError> {
        let generation = {
            let mut st = event
                .inner
                .state
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            st.recorded += 1;
            st.recorded
        };
        stream.submit(Job::Signal(Arc::clone(&event.inner), generation))
    }

    fn stream_wait(&self, stream: &HostStream, event: &HostEvent) -> Result<(), StageError> {
        // The generation recorded so far: a later record must not extend this wait (CUDA semantics).
        let generation = event
            .inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .recorded;
        stream.submit(Job::Wait(Arc::clone(&event.inner), generation))
    }

    fn wait_event(&self, event: &HostEvent) -> Result<(), StageError> {
        let target = event
            .inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .recorded;
        event
            .inner
            .wait_for(target)
            .map_err(|detail| StageError::Copy {
                op: "event wait",
                detail,
            })
    }

    fn wait_stream(&self, stream: &HostStream) -> Result<(), StageError> {
        let ev = HostEvent::default();
        self.record(&ev, stream)?;
        self.wait_event(&ev)
    }

    fn alloc_zeroed(&self, len: usize) -> Result<HostMemory, StageError> {
        Ok(HostMemory {
            buf: HostBuffer::heap(len)?,
        })
    }

    fn upload(&self, data: &[u8]) -> Result<HostMemory, StageError> {
        let mem = self.alloc_zeroed(data.len())?;
        // SAFETY: fresh allocation of exactly data.len() bytes, no other users.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), mem.ptr(), data.len()) };
        Ok(mem)
    }

    fn download(&self, mem: &HostMemory) -> Result<Vec<u8>, StageError> {
        Ok(mem.as_slice().to_vec())
    }

    fn zero(&self, mem: &mut HostMemory) -> Result<(), StageError> {
        // SAFETY: `&mut` guarantees no copy is in flight and no other reference exists.
        unsafe { std::ptr::write_bytes(mem.ptr(), 0, mem.len_bytes()) };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_copies_in_order_and_events_wait() {
        let dev = HostDevice::with_faults(HostFaults {
            copy_delay: Duration::from_millis(5),
            ..HostFaults::default()
        });
        let src = dev.upload(&[1, 2, 3, 4, 5, 6, 7, 8]).unwrap();
        let mut dst = dev.alloc_zeroed(8).unwrap();
        let stream = dev.new_stream().unwrap();
        let ev = dev.new_event().unwrap();
        let mut tmp = [0u8; 8];
        // One raw pointer for both copies: taking `tmp.as_ptr()` after the D2H was queued would
        // reborrow `tmp` while the stream writes it (a data race Miri reports).
        let tmp = tmp.as_mut_ptr();
        // SAFETY: `tmp` outlives both copies and the CPU does not touch it before `wait_event`
        // below; on one stream the H2D reads it only after the D2H wrote it.
        unsafe {
            dev.copy_d2h(&stream, &src, 2, tmp, 6).unwrap();
            dev.copy_h2d(&stream, tmp, 6, &mut dst, 1).unwrap();
        }
        dev.record(&ev, &stream).unwrap();
        dev.wait_event(&ev).unwrap();
        assert_eq!(dst.as_slice(), &[0, 3, 4, 5, 6, 7, 8, 0]);
    }

    #[test]
    fn stream_wait_orders_two_streams_and_ignores_later_records() {
        let dev = HostDevice::with_faults(HostFaults {
            copy_delay: Duration::from_millis(20),
            ..HostFaults::default()
        });
        let src = dev.upload(&[9; 64]).unwrap();
        let mut dst = dev.alloc_zeroed(64).unwrap();
        let (a, b) = (dev.new_stream().unwrap(), dev.new_stream().unwrap());
        let filled = dev.new_event().unwrap();
        let mut tmp = [0u8; 64];
        let tmp = tmp.as_mut_ptr(); // one pointer: no reborrow while a copy writes it
        // SAFETY: `tmp` lives to the end of the test, which drains both streams first; the CPU
        // never touches it.
        unsafe { dev.copy_d2h(&a, &src, 0, tmp, 64).unwrap() };
        dev.record(&filled, &a).unwrap();
        // B must not read `tmp` before A's slow copy wrote it.
        dev.stream_wait(&b, &filled).unwrap();
        // SAFETY: B reads `tmp` only once `filled` (A's copy into it) completed, and nothing
        // writes `tmp` again.
        unsafe { dev.copy_h2d(&b, tmp, 64, &mut dst, 0).unwrap() };
        // Recording `filled` again after the wait was queued must not extend it: A has six
        // more slow copies (≥ 120 ms) before that record, B only its one copy.
        let mut scratch = [0u8; 64];
        let scratch = scratch.as_mut_ptr();
        for _ in 0..6 {
            // SAFETY: `scratch` lives to the end of the test, which drains stream A first; the
            // CPU never reads it.
            unsafe { dev.copy_d2h(&a, &src, 0, scratch, 64).unwrap() };
        }
        dev.record(&filled, &a).unwrap();
        dev.wait_stream(&b).unwrap();
        let done = filled.inner.state.lock().unwrap().done;
        assert_eq!(done, 1, "B waited for the first record only");
        assert_eq!(dst.as_slice(), &[9; 64]);
        dev.wait_stream(&a).unwrap();
    }

    #[test]
    fn stream_wait_propagates_an_upstream_fault() {
        let dev = HostDevice::with_faults(HostFaults {
            fail_d2h_at: Some(0),
            ..HostFaults::default()
        });
        let src = dev.upload(&[1; 8]).unwrap();
        let mut dst = dev.alloc_zeroed(8).unwrap();
        let (a, b) = (dev.new_stream().unwrap(), dev.new_stream().unwrap());
        let ev = dev.new_event().unwrap();
        let mut tmp = [0u8; 8];
        let tmp = tmp.as_mut_ptr(); // one pointer: no reborrow while a copy writes it
        // SAFETY: `tmp` outlives the copy (the test drains B, which waits for A) and the CPU
        // never touches it.
        unsafe { dev.copy_d2h(&a, &src, 0, tmp, 8).unwrap() };
        dev.record(&ev, &a).unwrap();
        dev.stream_wait(&b, &ev).unwrap();
        // SAFETY: B reads `tmp` only after `ev` (A's copy), and `wait_stream(&b)` below drains
        // it before `tmp` goes away.
        unsafe { dev.copy_h2d(&b, tmp, 8, &mut dst, 0).unwrap() };
        let err = dev.wait_stream(&b).unwrap_err();
        assert!(err.to_string().contains("injected fault"), "{err}");
        assert_eq!(
            dst.as_slice(),
            &[0; 8],
            "the poisoned stream copied nothing"
        );
    }

    #[test]
    fn out_of_range_copy_is_an_error() {
        let dev = HostDevice::new();
        let src = dev.upload(&[0; 16]).unwrap();
        let stream = dev.new_stream().unwrap();
        let mut tmp = [0u8; 16];
        // SAFETY: the range check refuses this copy before anything is queued (asserted below),
        // so nothing ever writes `tmp`.
        let err = unsafe { dev.copy_d2h(&stream, &src, 8, tmp.as_mut_ptr(), 9) }.unwrap_err();
        assert!(
            matches!(
                err,
                StageError::OutOfBounds {
                    end: 17,
                    size: 16,
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn injected_fault_surfaces_at_event_wait() {
        let dev = HostDevice::with_faults(HostFaults {
            fail_d2h_at: Some(1),
            ..HostFaults::default()
        });
        let src = dev.upload(&[7; 4]).unwrap();
        let stream = dev.new_stream().unwrap();
        let ev = dev.new_event().unwrap();
        let mut tmp = [0u8; 4];
        let tmp = tmp.as_mut_ptr(); // one pointer for both copies
        // SAFETY: `wait_event` below returns only once the stream has passed this copy; the CPU
        // does not touch `tmp` meanwhile.
        unsafe { dev.copy_d2h(&stream, &src, 0, tmp, 4).unwrap() };
        dev.record(&ev, &stream).unwrap();
        dev.wait_event(&ev).unwrap();
        // SAFETY: as above: the second `wait_event` covers this copy.
        unsafe { dev.copy_d2h(&stream, &src, 0, tmp, 4).unwrap() };
        dev.record(&ev, &stream).unwrap();
        assert!(
            dev.wait_event(&ev)
                .unwrap_err()
                .to_string()
                .contains("injected fault")
        );
    }
}
