//! Small copies without the pipeline: one staging buffer (page-locked for CUDA), one stream, and
//! blocking gather/scatter between device memory and that buffer.
//!
//! Why: an object of a few KiB staged through the pipeline pays its threads, its ring slots and an
//! end-of-transfer round trip (~0.5 ms for a 4 KiB CUDA tensor); one copy into a page-locked
//! buffer and one socket write cost tens of microseconds. Every call waits for its copies before it
//! returns, so the buffer and the memory it copies from or into are never touched by a copy after
//! the borrow that named them has ended.

use std::ptr::NonNull;

use super::sealed::Token;
use super::{Device, DeviceMemory, RecvTarget};
use crate::error::StageError;
use crate::ring::HostBuffer;

/// A staging buffer of a fixed capacity and a stream of one device, for blocking small copies.
pub struct Bounce<D: Device> {
    dev: D,
    stream: D::Stream,
    /// `None` once a copy failed to complete: the buffer may still be written by it, so it was
    /// leaked, and this bounce refuses further use.
    buf: Option<HostBuffer>,
    capacity: usize,
}

impl<D: Device> std::fmt::Debug for Bounce<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bounce")
            .field("device", &self.dev.describe())
            .field("capacity", &self.capacity)
            .field("usable", &self.buf.is_some())
            .finish()
    }
}

impl<D: Device> Bounce<D> {
    /// A bounce of `capacity` bytes on `dev` (page-locked memory for CUDA: `cuMemHostAlloc`, so
    /// make it once and keep it).
    pub fn new(dev: &D, capacity: usize) -> Result<Self, StageError> {
        let buf = dev.alloc_staging(capacity.max(1))?;
        let stream = dev.new_stream()?;
        Ok(Bounce {
            dev: dev.clone(),
            stream,
            buf: Some(buf),
            capacity,
        })
    }

    /// Bytes it can hold.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    fn buffer(&self, len: usize, what: &'static str) -> Result<NonNull<u8>, StageError> {
        let buf = self.buf.as_ref().ok_or_else(|| StageError::Copy {
            op: what,
            detail: "an earlier copy through this bounce buffer failed; make a new one".into(),
        })?;
        super::check_range(what, 0, len, self.capacity)?;
        // HostBuffer's pointer is never null.
        NonNull::new(buf.as_ptr()).ok_or_else(|| StageError::Copy {
            op: what,
            detail: "null staging buffer".into(),
        })
    }

    /// Waits for the copies queued so far; if that fails they may still be running (CUDA: the
    /// context hit an error), so the buffer is leaked (never freed or handed out again) and the
    /// error returned. The host backend reports a failed copy only once it has ended.
    fn finish(&mut self) -> Result<(), StageError> {
        match self.dev.wait_stream(&self.stream) {
            Ok(()) => Ok(()),
            Err(e) => {
                std::mem::forget(self.buf.take());
                Err(e)
            }
        }
    }

    /// Copies `sources` back to back into the buffer, waits, and returns the bytes copied.
    pub fn gather(&mut self, sources: &[&D::Memory]) -> Result<&[u8], StageError> {
        let total = sources
            .iter()
            .try_fold(0usize, |acc, s| acc.checked_add(s.len_bytes()))
            .unwrap_or(usize::MAX);
        let base = self.buffer(total, "bounce gather (device→host)")?;
        self.dev.bind()?;
        let mut queued = Ok(());
        let mut at = 0usize;
        for src in sources.iter().filter(|s| s.len_bytes() > 0) {
            let len = src.len_bytes();
            // SAFETY: `at + len <= total <= capacity` (checked by `buffer`), so the destination lies
            // inside the buffer, which only this bounce owns and nobody reads before `finish`
            // returns. `src` is borrowed, so alive and unwritten by safe code, until this call
            // returns, and `finish` below waits for every queued copy first, also when queueing
            // one failed; if the wait fails the buffer is leaked, so nothing later meets a copy
            // still running into it.
            queued = unsafe {
                self.dev
                    .copy_d2h(&self.stream, src, 0, base.as_ptr().add(at), len)
            };
            if queued.is_err() {
                break;
            }
            at += len;
        }
        let waited = self.finish();
        queued.and(waited)?;
        // SAFETY: the first `total` bytes of the buffer were just written (or zeroed at
        // allocation) and no copy is pending; `&self` keeps `fill`/`scatter` away meanwhile.
        Ok(unsafe { std::slice::from_raw_parts(base.as_ptr(), total) })
    }

    /// The buffer's first `len` bytes, to be filled before [`Bounce::scatter`].
    pub fn fill(&mut self, len: usize) -> Result<&mut [u8], StageError> {
        let base = self.buffer(len, "bounce fill")?;
        // SAFETY: inside the buffer (checked), owned by this bounce alone, no copy pending
        // (every call waits for its copies); `&mut self` makes the slice the only view.
        Ok(unsafe { std::slice::from_raw_parts_mut(base.as_ptr(), len) })
    }

    /// Copies the buffer's first bytes into `targets` back to back (as many bytes as they hold
    /// together) and waits.
    pub fn scatter<X: RecvTarget<D::Memory>>(
        &mut self,
        targets: &mut [&mut X],
    ) -> Result<(), StageError> {
        let total = targets
            .iter_mut()
            .try_fold(0usize, |acc, t| {
                acc.checked_add(t.target(Token(())).len_bytes())
            })
            .unwrap_or(usize::MAX);
        let base = self.buffer(total, "bounce scatter (host→device)")?;
        self.dev.bind()?;
        let mut queued = Ok(());
        let mut at = 0usize;
        for t in targets.iter_mut() {
            let dst = t.target(Token(()));
            let len = dst.len_bytes();
            if len == 0 {
                continue;
            }
            // SAFETY: `at + len <= total <= capacity`: the source lies inside the buffer, which
            // nobody writes until `finish` returned (`&mut self`). `dst` is mutably borrowed until
            // this call returns and `finish` waits for every queued copy first, also when queueing
            // one failed (or leaks the buffer).
            queued = unsafe {
                self.dev
                    .copy_h2d(&self.stream, base.as_ptr().add(at), len, dst, 0)
            };
            if queued.is_err() {
                break;
            }
            at += len;
        }
        let waited = self.finish();
        queued.and(waited)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::{HostDevice, HostMemory};

    #[test]
    fn gathers_and_scatters_back_to_back() {
        let dev = HostDevice::new();
        let a = dev.upload(&[1, 2, 3]).expect("upload");
        let b = dev.upload(&[]).expect("upload");
        let c = dev.upload(&[4, 5]).expect("upload");
        let mut bounce = Bounce::new(&dev, 8).expect("bounce");
        assert_eq!(
            bounce.gather(&[&a, &b, &c]).expect("gather"),
            &[1, 2, 3, 4, 5]
        );

        bounce
            .fill(5)
            .expect("fill")
            .copy_from_slice(&[9, 8, 7, 6, 5]);
        let mut x = dev.alloc_zeroed(2).expect("alloc");
        let mut y = dev.alloc_zeroed(3).expect("alloc");
        let mut targets: Vec<&mut HostMemory> = vec![&mut x, &mut y];
        bounce.scatter(&mut targets).expect("scatter");
        assert_eq!(x.as_slice(), &[9, 8]);
        assert_eq!(y.as_slice(), &[7, 6, 5]);
    }

    #[test]
    fn more_than_its_capacity_is_refused_before_any_copy() {
        let dev = HostDevice::new();
        let a = dev.upload(&[0; 6]).expect("upload");
        let mut bounce = Bounce::new(&dev, 4).expect("bounce");
        assert!(matches!(
            bounce.gather(&[&a]),
            Err(StageError::OutOfBounds { .. })
        ));
        assert!(bounce.fill(5).is_err());
        let mut big = dev.alloc_zeroed(5).expect("alloc");
        assert!(bounce.scatter(&mut [&mut big]).is_err());
        // Still usable: nothing was queued.
        let ok = dev.upload(&[3; 4]).expect("upload");
        assert_eq!(bounce.gather(&[&ok]).expect("gather"), &[3; 4]);
    }
}
