//! Test transports written against the public traits only (as an external RDMA transport would be).
#![allow(dead_code, clippy::unwrap_used)]

use std::sync::Arc;
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
    pub max_busy: usize,
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
        self.max_busy = self.max_busy.max(ring.gate().busy_count());
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
