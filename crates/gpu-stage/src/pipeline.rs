//! The two pipelines. Each runs two threads per transfer so that the copy engine and the
//! transport never wait on each other more than the ring forces them to:
//!
//! ```text
//! Sender:   issuer    acquire slot ─► D2H chunk into slot ─► record event ─► queue ─┐
//!           submitter ◄──────────────────────────────────────────────────────────────┘
//!                     wait event ─► transport.submit (transport releases the slot later)
//! Receiver: issuer    transport.next_chunk ─► H2D slot into device ─► record event ─► queue ─┐
//!           releaser  ◄──────────────────────────────────────────────────────────────────────┘
//!                     wait event ─► release slot (the transport may refill it)
//! ```
//!
//! Chunk `i` always uses slot `i % slots`, so both ends agree on the order without negotiation.
//! Any failure is written to the ring's gate, which wakes every blocked party; the pipeline then
//! waits for its copy stream to drain before returning, so no DMA outlives the call. A slot whose
//! token is stranded by a failure while a queued copy may still use it (the copy was queued, its
//! event never waited for) is kept busy until that drain, and for good if the drain fails.

use std::ops::Range;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::config::RingConfig;
use crate::device::sealed::Token;
use crate::device::{Device, DeviceMemory, RecvTarget, check_range};
use crate::error::StageError;
use crate::ring::{HeldSlots, Queued, SlotToken, StagingRing};
use crate::transport::{Chunk, RecvTransport, SendTransport, TransferSummary};

/// What one transfer did.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct TransferStats {
    /// Bytes moved.
    pub bytes: u64,
    /// Chunks moved.
    pub chunks: u64,
    /// Wall-clock time of the call.
    pub elapsed: Duration,
}

impl TransferStats {
    /// Throughput in GiB/s (0 for an empty or instantaneous transfer).
    pub fn gib_per_s(&self) -> f64 {
        let s = self.elapsed.as_secs_f64();
        if s > 0.0 {
            self.bytes as f64 / s / (1u64 << 30) as f64
        } else {
            0.0
        }
    }
}

fn allocate_ring<D: Device>(
    device: &D,
    config: RingConfig,
) -> Result<Arc<StagingRing>, StageError> {
    config.validate()?;
    let buffers = (0..config.slots)
        .map(|_| device.alloc_staging(config.chunk_bytes))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(StagingRing::from_buffers(config, buffers))
}

/// Allocates a staging ring through `device` (page-locked for CUDA, usable by every GPU of
/// the process).
pub fn new_ring<D: Device>(device: &D, config: RingConfig) -> Result<Arc<StagingRing>, StageError> {
    allocate_ring(device, config)
}

fn join<T>(
    handle: std::thread::ScopedJoinHandle<'_, Result<T, StageError>>,
    name: &'static str,
) -> Result<T, StageError> {
    handle
        .join()
        .unwrap_or(Err(StageError::ThreadPanicked(name)))
}

/// Picks the root cause: a real error beats an `Aborted` echo of it.
fn first_cause(a: Result<(), StageError>, b: Result<(), StageError>) -> Result<(), StageError> {
    match (a, b) {
        (Ok(()), Ok(())) => Ok(()),
        (Err(e), Ok(())) | (Ok(()), Err(e)) => Err(e),
        (Err(StageError::Aborted(_)), Err(e)) => Err(e),
        (Err(e), Err(_)) => Err(e),
    }
}

/// What each end of a pipeline holds: its device, the ring, one copy stream and one event per slot.
#[derive(Debug)]
struct Lane<D: Device> {
    device: D,
    ring: Arc<StagingRing>,
    stream: D::Stream,
    events: Vec<D::Event>,
}

impl<D: Device> Lane<D> {
    fn new(device: &D, ring: Arc<StagingRing>) -> Result<Self, StageError> {
        device.bind()?;
        let stream = device.new_stream()?;
        let events = (0..ring.slots())
            .map(|_| device.new_event())
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Lane {
            device: device.clone(),
            ring,
            stream,
            events,
        })
    }
}

/// Device → ring → transport.
#[derive(Debug)]
pub struct Sender<D: Device> {
    lane: Lane<D>,
}

impl<D: Device> Sender<D> {
    /// A sender with its own ring of `config` geometry.
    pub fn new(device: &D, config: RingConfig) -> Result<Self, StageError> {
        let ring = allocate_ring(device, config)?;
        Self::with_ring(device, ring)
    }

    /// A sender on an existing ring (in-process transfers share one ring between both ends).
    pub fn with_ring(device: &D, ring: Arc<StagingRing>) -> Result<Self, StageError> {
        Ok(Sender {
            lane: Lane::new(device, ring)?,
        })
    }

    /// The ring (for transports that register its buffers).
    pub fn ring(&self) -> &Arc<StagingRing> {
        &self.lane.ring
    }

    /// Sends all of `src`.
    pub fn send<T: SendTransport + ?Sized>(
        &mut self,
        src: &D::Memory,
        transport: &mut T,
    ) -> Result<TransferStats, StageError> {
        self.send_range(src, 0..src.len_bytes(), transport)
    }

    /// Sends `src[range]`; chunk offsets are relative to `range.start`.
    pub fn send_range<T: SendTransport + ?Sized>(
        &mut self,
        src: &D::Memory,
        range: Range<usize>,
        transport: &mut T,
    ) -> Result<TransferStats, StageError> {
        let len = range
            .end
            .checked_sub(range.start)
            .ok_or(StageError::OutOfBounds {
                what: "send range",
                offset: range.start as u64,
                end: range.end as u64,
                size: src.len_bytes() as u64,
            })?;
        check_range("send range", range.start, len, src.len_bytes())?;
        self.send_segments(&[(src, range.start, len)], transport)
    }

    /// Sends the concatenation of `srcs` as one transfer: chunks cross buffer boundaries, so N
    /// small buffers cost one transfer (one pair of pipeline threads, one end-of-transfer
    /// round trip) instead of N. [`Receiver::recv_scatter`] splits it again.
    pub fn send_gather<T: SendTransport + ?Sized>(
        &mut self,
        srcs: &[&D::Memory],
        transport: &mut T,
    ) -> Result<TransferStats, StageError> {
        let segs: Vec<(&D::Memory, usize, usize)> =
            srcs.iter().map(|m| (*m, 0, m.len_bytes())).collect();
        self.send_segments(&segs, transport)
    }

    /// One transfer of `segs` (memory, start, length; each checked in range) back to back.
    fn send_segments<T: SendTransport + ?Sized>(
        &mut self,
        segs: &[(&D::Memory, usize, usize)],
        transport: &mut T,
    ) -> Result<TransferStats, StageError> {
        let start = Instant::now();
        let len = segs
            .iter()
            .try_fold(0usize, |acc, s| acc.checked_add(s.2))
            .ok_or(StageError::OutOfBounds {
                what: "gathered send",
                offset: 0,
                end: u64::MAX,
                size: u64::MAX,
            })?;
        self.lane.ring.gate().check()?;
        transport.attach(&self.lane.ring)?;

        let chunk_bytes = self.lane.ring.chunk_bytes();
        let slots = self.lane.ring.slots();
        let chunks = len.div_ceil(chunk_bytes) as u64;
        let summary = TransferSummary {
            chunks,
            bytes: len as u64,
        };
        let Lane {
            device,
            ring,
            stream,
            events,
        } = &self.lane;

        let held = HeldSlots::default();
        let result = std::thread::scope(|scope| {
            let held = &held;
            // Queued slots: if the transport panics, unwinding drops this queue while their copies
            // may still run; each then goes to `held`, never back to the ring (issue 26, F3).
            let (tx, rx) = mpsc::channel::<(Chunk, Queued<'_>)>();
            let submitter = std::thread::Builder::new()
                .name("gpu-stage-submit".into())
                .spawn_scoped(scope, move || -> Result<(), StageError> {
                    let mut run =
                        |rx: &mpsc::Receiver<(Chunk, Queued<'_>)>| -> Result<(), StageError> {
                            device.bind()?;
                            let mut sent = 0u64;
                            for (chunk, queued) in rx.iter() {
                                // On an error `queued` drops here and is held.
                                device.wait_event(&events[chunk.slot])?;
                                let Some(slot) = queued.into_token() else {
                                    continue;
                                };
                                // The copy into the slot finished: the transport may read it now.
                                transport.submit(ring, chunk, slot)?;
                                sent += 1;
                            }
                            if sent != chunks {
                                // The issuer stopped early; its error is reported by the caller.
                                return Err(StageError::Aborted(
                                    ring.gate()
                                        .failure()
                                        .unwrap_or_else(|| "issuer stopped".into()),
                                ));
                            }
                            transport.finish(summary)?;
                            Ok(())
                        };
                    let r = run(&rx);
                    if let Err(e) = &r {
                        ring.gate().fail(format!("sender: {e}"));
                        transport.abort(&e.to_string());
                        // Chunks still queued have copies in flight: keep their slots until the
                        // stream drained (the issuer stops at its next acquire, the gate failed).
                        // (dropped, each is held).
                        rx.iter().for_each(drop);
                    }
                    r
                })
                .map_err(|_| StageError::ThreadPanicked("gpu-stage-submit"))?;

            let issue = || -> Result<(), StageError> {
                device.bind()?;
                let lens: Vec<usize> = segs.iter().map(|s| s.2).collect();
                let mut walk = Walk::new(&lens);
                for seq in 0..chunks {
                    let slot = (seq % slots as u64) as usize;
                    let offset = seq as usize * chunk_bytes;
                    let n = chunk_bytes.min(len - offset);
                    let token = ring.acquire(slot)?;
                    let queued = (|| {
                        let dst = token.ptr(n)?;
                        let mut done = 0;
                        while let Some((i, at, take)) = walk.next_piece(n - done) {
                            let (src, from, _) = segs[i];
                            // SAFETY: `token` owns the slot; it goes to the submitter, which hands
                            // it to the transport only after waiting for the event recorded below,
                            // and every error path keeps it until the stream drained. The pieces
                            // of one chunk fill `dst..dst+n` without overlap (`done + take <= n`,
                            // so `dst + done` stays inside the slot), and each lies inside its
                            // segment, which the caller checked lies inside its memory.
                            unsafe {
                                device.copy_d2h(stream, src, from + at, dst.add(done), take)?;
                            }
                            done += take;
                            if done == n {
                                break;
                            }
                        }
                        if done != n {
                            return Err(StageError::Verify(format!(
                                "chunk {seq}: the gathered buffers end {} bytes early",
                                n - done
                            )));
                        }
                        device.record(&events[slot], stream)
                    })();
                    if let Err(e) = queued {
                        held.keep(token);
                        return Err(e);
                    }
                    let chunk = Chunk {
                        seq,
                        slot,
                        offset: offset as u64,
                        len: n,
                    };
                    if tx.send((chunk, held.queue(token))).is_err() {
                        // Submitter gone (the queued token went to `held` with the failed send): its
                        // error explains why.
                        return ring.gate().check();
                    }
                }
                Ok(())
            };
            let issued = issue();
            if let Err(e) = &issued {
                ring.gate().fail(format!("sender: {e}"));
            }
            drop(tx);
            let submitted = join(submitter, "gpu-stage-submit");
            Ok::<_, StageError>(first_cause(submitted, issued))
        });
        // Never return while a copy into the ring or out of `src` is still queued.
        let drained = device.wait_stream(stream);
        held.settle(drained.is_ok());
        result??;
        drained?;
        Ok(TransferStats {
            bytes: len as u64,
            chunks,
            elapsed: start.elapsed(),
        })
    }
}

/// Transport → ring → device.
#[derive(Debug)]
pub struct Receiver<D: Device> {
    lane: Lane<D>,
}

impl<D: Device> Receiver<D> {
    /// A receiver with its own ring of `config` geometry.
    pub fn new(device: &D, config: RingConfig) -> Result<Self, StageError> {
        let ring = allocate_ring(device, config)?;
        Self::with_ring(device, ring)
    }

    /// A receiver on an existing ring.
    pub fn with_ring(device: &D, ring: Arc<StagingRing>) -> Result<Self, StageError> {
        Ok(Receiver {
            lane: Lane::new(device, ring)?,
        })
    }

    /// The ring (for transports that register its buffers).
    pub fn ring(&self) -> &Arc<StagingRing> {
        &self.lane.ring
    }

    /// Receives one transfer into `dst`; each chunk lands at its offset. Chunks that would reach
    /// past `dst` are an error, never a write.
    pub fn recv<T: RecvTransport + ?Sized, X: RecvTarget<D::Memory> + ?Sized>(
        &mut self,
        dst: &mut X,
        transport: &mut T,
    ) -> Result<TransferStats, StageError> {
        self.recv_scatter(&mut [dst], transport)
    }

    /// Receives one transfer into the concatenation of `dsts` (what [`Sender::send_gather`]
    /// sent): bytes land in the first buffer, then the next, a chunk split where a buffer ends.
    /// Chunks past the last buffer are an error, never a write; the transfer may end short of it.
    pub fn recv_scatter<T: RecvTransport + ?Sized, X: RecvTarget<D::Memory> + ?Sized>(
        &mut self,
        dsts: &mut [&mut X],
        transport: &mut T,
    ) -> Result<TransferStats, StageError> {
        let mut dsts: Vec<&mut D::Memory> = dsts.iter_mut().map(|d| d.target(Token(()))).collect();
        let lens: Vec<usize> = dsts.iter().map(|d| d.len_bytes()).collect();
        let start = Instant::now();
        self.lane.ring.gate().check()?;
        transport.attach(&self.lane.ring)?;
        let Lane {
            device,
            ring,
            stream,
            events,
        } = &self.lane;
        let dst_len = lens
            .iter()
            .try_fold(0usize, |acc, l| acc.checked_add(*l))
            .ok_or(StageError::OutOfBounds {
                what: "scattered receive",
                offset: 0,
                end: u64::MAX,
                size: u64::MAX,
            })?;
        let mut walk = Walk::new(&lens);

        let held = HeldSlots::default();
        let result = std::thread::scope(|scope| {
            let held = &held;
            let (tx, rx) = mpsc::channel::<SlotToken>();
            let releaser = std::thread::Builder::new()
                .name("gpu-stage-release".into())
                .spawn_scoped(scope, move || -> Result<(), StageError> {
                    let run = |rx: &mpsc::Receiver<SlotToken>| -> Result<(), StageError> {
                        device.bind()?;
                        for slot in rx.iter() {
                            if let Err(e) = device.wait_event(&events[slot.slot()]) {
                                held.keep(slot);
                                return Err(e);
                            }
                            // The copy out of the slot finished: the transport may refill it.
                            drop(slot);
                        }
                        Ok(())
                    };
                    let r = run(&rx);
                    if let Err(e) = &r {
                        ring.gate().fail(format!("receiver: {e}"));
                        // Slots still queued have copies in flight: keep them until the drain.
                        held.keep_all(rx.iter());
                    }
                    r
                })
                .map_err(|_| StageError::ThreadPanicked("gpu-stage-release"))?;

            let mut summary = TransferSummary::default();
            let (mut first_len, mut short): (Option<usize>, Option<u64>) = (None, None);
            let mut issue = || -> Result<(), StageError> {
                device.bind()?;
                while let Some((c, slot)) = transport.next_chunk(ring)? {
                    if c.slot >= ring.slots()
                        || slot.slot() != c.slot
                        || !Arc::ptr_eq(slot.ring(), ring)
                    {
                        return Err(StageError::Verify(format!(
                            "transport returned chunk {} in slot {} with the token of slot {} of {} ring",
                            c.seq,
                            c.slot,
                            slot.slot(),
                            if Arc::ptr_eq(slot.ring(), ring) {
                                "this"
                            } else {
                                "another"
                            }
                        )));
                    }
                    if c.len == 0 {
                        // Tiles nothing: endless empty chunks would keep a transfer open for ever.
                        return Err(StageError::Verify(format!(
                            "chunk {} is empty (a broken or hostile peer)",
                            c.seq
                        )));
                    }
                    if c.len > ring.chunk_bytes() {
                        return Err(StageError::Verify(format!(
                            "chunk {} is {} bytes, larger than the ring's {}-byte buffers",
                            c.seq,
                            c.len,
                            ring.chunk_bytes()
                        )));
                    }
                    let offset =
                        usize::try_from(c.offset).map_err(|_| StageError::OutOfBounds {
                            what: "received chunk",
                            offset: c.offset,
                            end: c.offset.saturating_add(c.len as u64),
                            size: dst_len as u64,
                        })?;
                    check_range("received chunk", offset, c.len, dst_len)?;
                    // A peer names the offsets: they must tile `dst` from 0, every chunk as long as
                    // the first (the sender's chunk size) but the last, or a chunk could overwrite
                    // another and leave bytes of `dst` never written while every total still matches
                    // (issue 26, F8).
                    let first = *first_len.get_or_insert(c.len);
                    if c.offset != summary.bytes || short.is_some() || c.len > first {
                        let why = match short {
                            _ if c.offset != summary.bytes => {
                                format!("expected offset {}", summary.bytes)
                            }
                            Some(s) => format!("chunk {s} was short, so it had to be the last"),
                            None => format!("longer than the first chunk ({first} bytes)"),
                        };
                        return Err(StageError::Verify(format!(
                            "chunk {} at offset {} ({} bytes): {why}; chunks must tile the \
                             destination in order (a broken or hostile peer)",
                            c.seq, c.offset, c.len
                        )));
                    }
                    if c.len < first {
                        short = Some(c.seq);
                    }
                    let queued = (|| {
                        let src = slot.ptr(c.len)?;
                        let mut done = 0;
                        while done < c.len {
                            let Some((i, at, take)) = walk.next_piece(c.len - done) else {
                                break;
                            };
                            // SAFETY: `slot` owns the slot; it goes to the releaser, which drops
                            // it only after the event below, and every error path keeps it until
                            // the stream drained; every `dsts[i]` is exclusively borrowed for the
                            // whole call. `src + done` stays inside the slot (`done + take <=
                            // c.len`, which `ptr` checked against the slot) and `at + take`
                            // inside `dsts[i]` (the walk never passes a buffer's end).
                            unsafe {
                                device.copy_h2d(stream, src.add(done), take, &mut *dsts[i], at)?;
                            }
                            done += take;
                        }
                        if done != c.len {
                            return Err(StageError::Verify(format!(
                                "chunk {}: the destination buffers end {} bytes early",
                                c.seq,
                                c.len - done
                            )));
                        }
                        device.record(&events[c.slot], stream)
                    })();
                    if let Err(e) = queued {
                        held.keep(slot);
                        return Err(e);
                    }
                    summary.chunks += 1;
                    summary.bytes += c.len as u64;
                    if let Err(mpsc::SendError(slot)) = tx.send(slot) {
                        held.keep(slot);
                        return ring.gate().check();
                    }
                }
                Ok(())
            };
            let issued = issue();
            if let Err(e) = &issued {
                ring.gate().fail(format!("receiver: {e}"));
                transport.abort(&e.to_string());
            }
            drop(tx);
            let released = join(releaser, "gpu-stage-release");
            let r = first_cause(issued, released);
            Ok::<_, StageError>(r.map(|()| summary))
        });
        let drained = device.wait_stream(stream);
        held.settle(drained.is_ok());
        let summary = result??;
        drained?;
        transport.complete(summary)?;
        Ok(TransferStats {
            bytes: summary.bytes,
            chunks: summary.chunks,
            elapsed: start.elapsed(),
        })
    }
}

/// GPU A → host ring → GPU B inside one process, with no CPU thread between the two copies.
///
/// Every copy of a transfer is queued up front and the devices order them with events:
///
/// ```text
/// A's stream:  [wait H2D(i-slots)] D2H chunk i → slot ─ record d2h[slot]
/// B's stream:                                 wait d2h[slot] ─ H2D slot → chunk i ─ record h2d[slot]
/// ```
///
/// A slot is refilled only after B's copy out of it finished, and B copies a slot only after A
/// filled it, so the copy engines of both GPUs run back to back without waiting for a CPU thread
/// to notice a completion (the hand-off the [`Sender`]/[`Receiver`] pair pays per chunk, which
/// matters at ~50 GiB/s where a 4 MiB chunk takes 80 µs). Both ends must use the same backend.
#[derive(Debug)]
pub struct InProcessStage<D: Device> {
    src: Lane<D>,
    dst: Lane<D>,
}

impl<D: Device> InProcessStage<D> {
    /// Builds both ends on one ring allocated through `src_device`.
    pub fn new(src_device: &D, dst_device: &D, config: RingConfig) -> Result<Self, StageError> {
        let ring = allocate_ring(src_device, config)?;
        Ok(InProcessStage {
            src: Lane::new(src_device, Arc::clone(&ring))?,
            dst: Lane::new(dst_device, ring)?,
        })
    }

    /// The shared ring.
    pub fn ring(&self) -> &Arc<StagingRing> {
        &self.src.ring
    }

    /// Copies all of `src` into the start of `dst`. Returns only after both devices finished
    /// every queued copy, whether the transfer succeeded or not.
    pub fn transfer(
        &mut self,
        src: &D::Memory,
        dst: &mut D::Memory,
    ) -> Result<TransferStats, StageError> {
        let len = src.len_bytes();
        check_range("in-process destination", 0, len, dst.len_bytes())?;
        let start = Instant::now();
        let ring = Arc::clone(&self.src.ring);
        ring.gate().check()?;
        // The devices use the slots with no CPU in between: own all of them for the whole call.
        let held = HeldSlots::default();
        let acquired = (0..ring.slots()).try_for_each(|slot| {
            held.keep(ring.acquire(slot)?);
            Ok::<_, StageError>(())
        });
        let piece = piece_bytes(len, ring.chunk_bytes(), ring.slots());
        let chunks = len.div_ceil(piece) as u64;
        let issued = acquired.and_then(|()| self.issue(src, dst, len, piece));
        // Never return while a copy into or out of the ring is still queued.
        let drained_src = self.src.device.wait_stream(&self.src.stream);
        let drained_dst = self.dst.device.wait_stream(&self.dst.stream);
        held.settle(drained_src.is_ok() && drained_dst.is_ok());
        issued?;
        drained_src?;
        drained_dst?;
        Ok(TransferStats {
            bytes: len as u64,
            chunks,
            elapsed: start.elapsed(),
        })
    }

    /// Queues every copy, `piece` bytes at a time, and the events that order them.
    fn issue(
        &self,
        src: &D::Memory,
        dst: &mut D::Memory,
        len: usize,
        piece: usize,
    ) -> Result<(), StageError> {
        let (a, b) = (&self.src, &self.dst);
        let slots = a.ring.slots();
        for (seq, offset) in (0..len).step_by(piece).enumerate() {
            let slot = seq % slots;
            let n = piece.min(len - offset);
            let (buf, _) = a.ring.checked(slot, n)?;
            if seq >= slots {
                // The slot's previous chunk must have left for B before A overwrites it.
                a.device.stream_wait(&a.stream, &b.events[slot])?;
            }
            // SAFETY: this call holds every slot's token (`transfer`); A's stream writes the slot only
            // after B's last read of it (wait above), and the call drains both streams before
            // releasing the tokens.
            unsafe { a.device.copy_d2h(&a.stream, src, offset, buf, n)? };
            a.device.record(&a.events[slot], &a.stream)?;
            b.device.stream_wait(&b.stream, &a.events[slot])?;
            // SAFETY: B's stream reads the slot only after A's copy into it (wait above); `dst`
            // is exclusively borrowed for the whole call.
            unsafe { b.device.copy_h2d(&b.stream, buf, n, dst, offset)? };
            b.device.record(&b.events[slot], &b.stream)?;
        }
        Ok(())
    }
}
/// Where a transfer's byte stream is in the buffers it is made of (a gathered send or a
/// scattered receive): both walk the stream in order, chunk by chunk.
#[derive(Debug)]
struct Walk<'a> {
    lens: &'a [usize],
    /// The buffer the next byte belongs to.
    i: usize,
    /// Bytes of buffer `i` already walked.
    at: usize,
}

impl<'a> Walk<'a> {
    fn new(lens: &'a [usize]) -> Self {
        Walk { lens, i: 0, at: 0 }
    }

    /// The next piece of at most `max` (> 0) bytes: (buffer, offset in it, length), or `None`
    /// past the last buffer. Empty buffers are skipped; a piece never crosses a buffer's end.
    fn next_piece(&mut self, max: usize) -> Option<(usize, usize, usize)> {
        while self.i < self.lens.len() && self.at == self.lens[self.i] {
            self.i += 1;
            self.at = 0;
        }
        let len = *self.lens.get(self.i)?;
        let take = max.min(len - self.at);
        let piece = (self.i, self.at, take);
        self.at += take;
        Some(piece)
    }
}

/// Smallest piece a short in-process transfer is cut into (below it, the per-copy overhead costs
/// more than the overlap gains).
const MIN_PIECE: usize = 256 << 10;

/// How many bytes each copy of an in-process transfer of `len` moves. A transfer that fills the ring
/// moves whole chunks; a shorter one is cut into up to `slots` pieces (each at least [`MIN_PIECE`]),
/// so that the H2D of one piece overlaps the D2H of the next instead of waiting for all of it: a
/// 1 MiB transfer in one 4 MiB chunk costs a D2H plus an H2D of 1 MiB back to back, in four pieces
/// about a D2H of 1 MiB plus an H2D of 256 KiB.
fn piece_bytes(len: usize, chunk_bytes: usize, slots: usize) -> usize {
    let chunk_bytes = chunk_bytes.max(1);
    if len >= chunk_bytes.saturating_mul(slots) {
        chunk_bytes
    } else {
        len.div_ceil(slots.max(1)).max(MIN_PIECE).min(chunk_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::MIB;
    use crate::device::{HostDevice, HostFaults};
    use crate::error::TransportError;
    use std::sync::Mutex;

    /// Panics in its first `submit`, after starting a thread that waits for the last slot.
    struct PanickingTransport {
        last_slot: usize,
        got_last_slot: Arc<Mutex<Option<Instant>>>,
        competitor: Option<std::thread::JoinHandle<()>>,
    }

    impl SendTransport for PanickingTransport {
        fn submit(
            &mut self,
            ring: &Arc<StagingRing>,
            _chunk: Chunk,
            _slot: SlotToken,
        ) -> Result<(), TransportError> {
            let (ring, last, got) = (
                Arc::clone(ring),
                self.last_slot,
                Arc::clone(&self.got_last_slot),
            );
            self.competitor = Some(std::thread::spawn(move || {
                if let Ok(t) = ring.acquire(last) {
                    *got.lock().unwrap() = Some(Instant::now());
                    drop(t);
                }
            }));
            panic!("a transport bug");
        }

        fn finish(&mut self, _: TransferSummary) -> Result<(), TransportError> {
            Ok(())
        }
    }

    /// Issue 26, F3: before, the panic dropped the queue of (chunk, slot) pairs, releasing slots whose
    /// device→host copies were still queued; another thread then acquired (and could read) a slot that
    /// a copy was still writing. Now they are held until the stream drained.
    #[test]
    fn a_panicking_transport_never_hands_out_a_slot_a_copy_still_writes() {
        let delay = Duration::from_millis(150);
        let slots = 4;
        let dev = HostDevice::with_faults(HostFaults {
            copy_delay: delay,
            ..HostFaults::default()
        });
        let mut tx = Sender::new(&dev, RingConfig::new(MIB, slots).unwrap()).unwrap();
        let src = dev.upload(&vec![7u8; slots * MIB]).unwrap();
        let got = Arc::new(Mutex::new(None));
        let mut transport = PanickingTransport {
            last_slot: slots - 1,
            got_last_slot: Arc::clone(&got),
            competitor: None,
        };
        let start = Instant::now();
        let r = tx.send(&src, &mut transport);
        assert!(matches!(r, Err(StageError::ThreadPanicked(_))), "{r:?}");
        transport.competitor.take().unwrap().join().unwrap();
        let at = got
            .lock()
            .unwrap()
            .expect("the slot is released once the stream drained");
        // The last slot's copy is the 4th on one stream, each sleeping `delay` first: it ends no earlier
        // than 4 × delay after the start. Before the fix the slot was handed out about 1 × delay in.
        assert!(
            at.duration_since(start) >= delay * slots as u32,
            "slot {} acquired {:?} after the start, while its copy was still queued",
            slots - 1,
            at.duration_since(start)
        );
    }

    /// Hands out chunks at the offsets and lengths it was given, as a peer names them.
    struct Replay(Vec<(u64, usize)>, usize);

    impl RecvTransport for Replay {
        fn next_chunk(
            &mut self,
            ring: &Arc<StagingRing>,
        ) -> Result<Option<(Chunk, SlotToken)>, TransportError> {
            let Some(&(offset, len)) = self.0.get(self.1) else {
                return Ok(None);
            };
            let slot = self.1 % ring.slots();
            let token = ring
                .acquire(slot)
                .map_err(|e| TransportError::Protocol(e.to_string()))?;
            self.1 += 1;
            let seq = self.1 as u64 - 1;
            Ok(Some((
                Chunk {
                    seq,
                    slot,
                    offset,
                    len,
                },
                token,
            )))
        }
    }

    #[test]
    fn chunks_that_do_not_tile_the_destination_are_refused() {
        let dev = HostDevice::new();
        let mut rx = Receiver::new(&dev, RingConfig::new(MIB, 2).unwrap()).unwrap();
        let mut dst = dev.alloc_zeroed(3 * MIB).unwrap();
        // Before: three chunks at offset 0 passed (the totals match) and left 2 MiB never written.
        for (plan, needle) in [
            (vec![(0, MIB), (0, MIB), (0, MIB)], "chunk 1 at offset 0"),
            (
                vec![(0, MIB), (2 * MIB as u64, MIB)],
                "expected offset 1048576",
            ),
            (
                vec![(0, MIB), (MIB as u64, 4096), (MIB as u64 + 4096, 4096)],
                "chunk 1 was short, so it had to be the last",
            ),
            (
                vec![(0, 4096), (4096, MIB)],
                "longer than the first chunk (4096 bytes)",
            ),
            // Before: empty chunks passed every check, as many as the peer liked.
            (vec![(0, 0), (0, 0)], "chunk 0 is empty"),
        ] {
            let e = rx
                .recv(&mut dst, &mut Replay(plan, 0))
                .unwrap_err()
                .to_string();
            assert!(e.contains(needle), "{e}");
            rx = Receiver::new(&dev, RingConfig::new(MIB, 2).unwrap()).unwrap();
        }
        let ok = rx
            .recv(
                &mut dst,
                &mut Replay(vec![(0, MIB), (MIB as u64, MIB), (2 * MIB as u64, 5)], 0),
            )
            .unwrap();
        assert_eq!(ok.bytes, 2 * MIB as u64 + 5);
    }

    #[test]
    fn held_slots_dropped_unsettled_leak_rather_than_release() {
        let ring = StagingRing::heap(RingConfig::new(MIB, 2).unwrap()).unwrap();
        if cfg!(miri) {
            return; // the slot is leaked on purpose, which Miri reports
        }
        {
            let held = HeldSlots::default();
            held.keep(ring.acquire(0).unwrap());
            let _queued = held.queue(ring.acquire(1).unwrap());
        }
        assert!(ring.gate().is_busy(0) && ring.gate().is_busy(1));
    }

    #[test]
    fn short_in_process_transfers_are_cut_into_overlapping_pieces() {
        let (chunk, slots) = (4 * MIB, 8);
        // A transfer that fills the ring keeps whole chunks.
        assert_eq!(piece_bytes(512 * MIB, chunk, slots), chunk);
        assert_eq!(piece_bytes(32 * MIB, chunk, slots), chunk);
        // Shorter ones use every slot, down to the minimum piece.
        assert_eq!(piece_bytes(16 * MIB, chunk, slots), 2 * MIB);
        assert_eq!(piece_bytes(4 * MIB, chunk, slots), 512 << 10);
        assert_eq!(
            piece_bytes(MIB, chunk, slots),
            MIN_PIECE,
            "1 MiB in 4 pieces"
        );
        assert_eq!(piece_bytes(4096, chunk, slots), MIN_PIECE, "one piece");
        assert_eq!(piece_bytes(0, chunk, slots), MIN_PIECE);
        // Never more than a slot holds, whatever the geometry.
        assert_eq!(piece_bytes(3 * MIB, MIB, 2), MIB);
        assert_eq!(piece_bytes(5, 100, 1), 100);
    }
}
