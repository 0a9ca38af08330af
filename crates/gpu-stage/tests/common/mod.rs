//! Test transports written against the public traits only (as an external RDMA transport would be).
#![allow(dead_code, clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use gpu_stage::{
    Chunk, RecvTransport, SendTransport, SlotToken, StagingRing, TransferSummary, TransportError,
};

/// Sender-side transport that copies each chunk into a Vec, checking order and ownership.
#[derive(Debug, Default)]
pub struct Collect {
    pub data: Vec<u8>,
    pub seen: Vec<Chunk>,
    pub fail_at: Option<u64>,
    pub delay: Duration,
    pub finished: Option<TransferSummary>,
    pub aborted: Option<String>,
}

impl Collect {
    pub fn new(len: usize) -> Self {
        Collect {
            data: vec![0; len],
            ..Collect::default()
        }
    }
}

impl SendTransport for Collect {
    fn submit(
        &mut self,
        ring: &Arc<StagingRing>,
        chunk: Chunk,
        slot: SlotToken,
    ) -> Result<(), TransportError> {
        if self.fail_at == Some(chunk.seq) {
            // Dropping the token on the way out frees the slot.
            return Err(TransportError::Closed(format!(
                "injected failure at chunk {}",
                chunk.seq
            )));
        }
        assert!(
            ring.gate().is_busy(chunk.slot) && slot.slot() == chunk.slot,
            "submitted slot must be owned"
        );
        assert_eq!(chunk.seq, self.seen.len() as u64, "chunks arrive in order");
        assert_eq!(chunk.slot as u64, chunk.seq % ring.slots() as u64);
        if !self.delay.is_zero() {
            std::thread::sleep(self.delay);
        }
        let bytes = slot.bytes(chunk.len).unwrap();
        let off = chunk.offset as usize;
        self.data[off..off + chunk.len].copy_from_slice(bytes);
        self.seen.push(chunk);
        drop(slot);
        Ok(())
    }

    fn finish(&mut self, summary: TransferSummary) -> Result<(), TransportError> {
        self.finished = Some(summary);
        Ok(())
    }

    fn abort(&mut self, reason: &str) {
        self.aborted = Some(reason.to_string());
    }
}

/// Receiver-side transport that feeds `data` in chunks of `chunk` bytes.
#[derive(Debug)]
pub struct Feed {
    pub data: Vec<u8>,
    pub chunk: usize,
    pub next: u64,
    /// Replace the offset of this chunk with a bogus one.
    pub bad_offset_at: Option<(u64, u64)>,
    pub fail_at: Option<u64>,
    pub completed: Option<TransferSummary>,
}

impl Feed {
    pub fn new(data: Vec<u8>, chunk: usize) -> Self {
        Feed {
            data,
            chunk,
            next: 0,
            bad_offset_at: None,
            fail_at: None,
            completed: None,
        }
    }
}

impl RecvTransport for Feed {
    fn next_chunk(
        &mut self,
        ring: &Arc<StagingRing>,
    ) -> Result<Option<(Chunk, SlotToken)>, TransportError> {
        let off = self.next as usize * self.chunk;
        if off >= self.data.len() {
            return Ok(None);
        }
        if self.fail_at == Some(self.next) {
            return Err(TransportError::Closed("injected receive failure".into()));
        }
        let len = self.chunk.min(self.data.len() - off);
        let slot = (self.next % ring.slots() as u64) as usize;
        let mut token = ring
            .acquire(slot)
            .map_err(|e| TransportError::Aborted(e.to_string()))?;
        token
            .bytes_mut(len)
            .unwrap()
            .copy_from_slice(&self.data[off..off + len]);
        let mut offset = off as u64;
        if let Some((seq, bogus)) = self.bad_offset_at
            && seq == self.next
        {
            offset = bogus;
        }
        let c = Chunk {
            seq: self.next,
            slot,
            offset,
            len,
        };
        self.next += 1;
        Ok(Some((c, token)))
    }

    fn complete(&mut self, summary: TransferSummary) -> Result<(), TransportError> {
        self.completed = Some(summary);
        Ok(())
    }
}

/// Sender-side transport that keeps every slot it is given until the test lets it go: shows
/// whether the pipeline stops when all slots are held and resumes when one comes back.
#[derive(Debug, Default, Clone)]
pub struct Hold {
    pub shared: Arc<std::sync::Mutex<Held>>,
}

/// What [`Hold`] keeps: the tokens in submission order, and what was submitted.
#[derive(Debug, Default)]
pub struct Held {
    pub tokens: std::collections::VecDeque<SlotToken>,
    pub submitted: u64,
    pub data: Vec<u8>,
    /// Keep new slots (until `release_all`).
    pub holding: bool,
}

impl Hold {
    pub fn new(len: usize) -> Self {
        let h = Hold::default();
        {
            let mut g = h.lock();
            g.data = vec![0; len];
            g.holding = true;
        }
        h
    }

    pub fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        self.shared.lock().unwrap()
    }

    pub fn submitted(&self) -> u64 {
        self.lock().submitted
    }

    /// Gives back the oldest held slot; returns its number.
    pub fn release_oldest(&self) -> Option<usize> {
        let t = self.lock().tokens.pop_front()?;
        Some(t.slot())
    }

    /// Stops holding: every held slot goes back and later ones are released at once.
    pub fn release_all(&self) {
        let mut g = self.lock();
        g.tokens.clear();
        g.holding = false;
    }
}

impl SendTransport for Hold {
    fn submit(
        &mut self,
        _ring: &Arc<StagingRing>,
        chunk: Chunk,
        slot: SlotToken,
    ) -> Result<(), TransportError> {
        let mut g = self.lock();
        let off = chunk.offset as usize;
        let bytes = slot.bytes(chunk.len).unwrap();
        g.data[off..off + chunk.len].copy_from_slice(bytes);
        g.submitted += 1;
        if g.holding {
            g.tokens.push_back(slot);
        }
        Ok(())
    }

    fn finish(&mut self, _summary: TransferSummary) -> Result<(), TransportError> {
        Ok(())
    }
}

/// Polls `f` until it returns true or `within` passes; returns whether it did.
pub fn eventually(within: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + within;
    while std::time::Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    f()
}

/// True if `f` keeps returning `value` for all of `during`.
pub fn stays<T: PartialEq + Copy>(during: Duration, value: T, mut f: impl FnMut() -> T) -> bool {
    let deadline = std::time::Instant::now() + during;
    while std::time::Instant::now() < deadline {
        if f() != value {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    f() == value
}

/// Wraps a transport and counts chunks going through it (so a test knows the transfer runs).
pub struct Counting<T> {
    pub inner: T,
    pub n: Arc<AtomicU64>,
}

impl<T: SendTransport> SendTransport for Counting<T> {
    fn attach(&mut self, ring: &Arc<StagingRing>) -> Result<(), TransportError> {
        self.inner.attach(ring)
    }
    fn submit(
        &mut self,
        ring: &Arc<StagingRing>,
        chunk: Chunk,
        slot: SlotToken,
    ) -> Result<(), TransportError> {
        self.inner.submit(ring, chunk, slot)?;
        self.n.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
    fn finish(&mut self, summary: TransferSummary) -> Result<(), TransportError> {
        self.inner.finish(summary)
    }
    fn abort(&mut self, reason: &str) {
        self.inner.abort(reason)
    }
}

impl<T: RecvTransport> RecvTransport for Counting<T> {
    fn attach(&mut self, ring: &Arc<StagingRing>) -> Result<(), TransportError> {
        self.inner.attach(ring)
    }
    fn next_chunk(
        &mut self,
        ring: &Arc<StagingRing>,
    ) -> Result<Option<(Chunk, SlotToken)>, TransportError> {
        let c = self.inner.next_chunk(ring)?;
        if c.is_some() {
            self.n.fetch_add(1, Ordering::SeqCst);
        }
        Ok(c)
    }
    fn complete(&mut self, summary: TransferSummary) -> Result<(), TransportError> {
        self.inner.complete(summary)
    }
    fn abort(&mut self, reason: &str) {
        self.inner.abort(reason)
    }
}
