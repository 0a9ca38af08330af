#![no_main]
//! A hostile TCP sender against the real receiver: the bytes become up to three connections' worth
//! of frames (honest-looking DATA/END built from the input, and raw headers with arbitrary fields
//! and payloads), read by the real greeting, reader threads, reassembly and receiving pipeline (host
//! backend) over in-memory streams. Nothing may panic, memory stays bounded (run with
//! -rss_limit_mb), and every receive ends (an error or a result) within the transport timeout; a
//! transfer that completes must have the size its END frames announced and fit the destination.

use std::time::Duration;

use gpu_stage::checksum::chunk_digest;
use gpu_stage::fuzzing::{tcp_frame, tcp_receive};
use gpu_stage::{MIB, RingConfig};
use libfuzzer_sys::fuzz_target;

const DST_LEN: usize = 64 << 10;

struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> u8 {
        let (b, rest) = self.0.split_first().map_or((0, &[][..]), |(b, r)| (*b, r));
        self.0 = rest;
        b
    }
    fn u64(&mut self) -> u64 {
        // Small values most of the time (they are what reaches deep states), any value sometimes.
        match self.byte() % 4 {
            0 => u64::from(self.byte()),
            1 => u64::from(u16::from_le_bytes([self.byte(), self.byte()])),
            2 => (0..8).fold(0, |a, i| a | u64::from(self.byte()) << (8 * i)),
            _ => u64::MAX - u64::from(self.byte()),
        }
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        let n = n.min(self.0.len());
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        a.to_vec()
    }
}

/// What an honest-looking connection has sent in the current transfer.
#[derive(Default, Clone)]
struct Conn {
    bytes: Vec<u8>,
    seq: u64,
    digest: u64,
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input(data);
    let head = input.byte();
    let connections = usize::from(head % 3) + 1;
    let checksum = head & 0x10 != 0;
    let transfers = usize::from((head >> 5) % 4) + 1;
    // The chunk length the honest-looking frames use.
    let piece = usize::from(input.byte()) * 64 + 1;
    let mut conns = vec![Conn::default(); connections];
    for (i, c) in conns.iter_mut().enumerate() {
        c.seq = i as u64;
        let flags = if checksum { 1 } else { 0 };
        c.bytes = tcp_frame(1, i as u64, flags, 0, connections as u64);
    }
    let mut sent_in_transfer = 0u64;
    while !input.0.is_empty() {
        let op = input.byte();
        let c = usize::from(op >> 4) % connections;
        match op % 6 {
            // DATA in turn, at the offset an honest sender would use.
            0 | 1 => {
                let seq = conns[c].seq;
                let offset = seq * piece as u64;
                let payload = input.bytes(piece);
                let conn = &mut conns[c];
                conn.digest = conn.digest.wrapping_add(chunk_digest(offset, &payload));
                conn.bytes
                    .extend(tcp_frame(2, seq, offset, payload.len() as u64, c as u64));
                conn.bytes.extend(payload);
                conn.seq += connections as u64;
                sent_in_transfer = sent_in_transfer.max(seq + 1);
            }
            // END on every connection with the totals (and digests) of what went out.
            2 => {
                let total = sent_in_transfer * piece as u64;
                for (i, conn) in conns.iter_mut().enumerate() {
                    let digest = std::mem::take(&mut conn.digest);
                    conn.bytes
                        .extend(tcp_frame(3, 0, digest, total, sent_in_transfer));
                    conn.seq = i as u64;
                }
                sent_in_transfer = 0;
            }
            // A raw header with arbitrary fields.
            3 | 4 => {
                let kind = u32::from(input.byte() % 7);
                let (seq, offset, len, aux) = (input.u64(), input.u64(), input.u64(), input.u64());
                conns[c].bytes.extend(tcp_frame(kind, seq, offset, len, aux));
            }
            // Raw bytes (a payload, a torn frame, garbage).
            _ => {
                let n = usize::from(input.byte());
                let raw = input.bytes(n);
                conns[c].bytes.extend(raw);
            }
        }
    }
    let streams = conns.into_iter().map(|c| c.bytes).collect();
    let ring = RingConfig::new(MIB, 2).expect("a valid ring");
    let out = tcp_receive(
        streams,
        checksum,
        ring,
        DST_LEN,
        transfers,
        Duration::from_millis(20),
    );
    assert!(out.completed <= transfers);
    for b in &out.bytes {
        assert!(*b <= DST_LEN as u64, "a transfer of {b} bytes into {DST_LEN}");
    }
});
