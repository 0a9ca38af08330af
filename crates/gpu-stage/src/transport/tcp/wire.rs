//! The TCP transport's wire format: the 40-byte frame header (its fields are listed in the
//! [transport's doc](super)), reading and writing frames on a socket.

use std::io::{self, IoSlice, Read, Write};

use crate::error::TransportError;

const MAGIC: u32 = 0x4753_5447; // "GTSG" little-endian: gpu-stage
const HEADER_LEN: usize = 40;
/// HELLO flag (in `offset`): per-transfer checksums in END and ACK.
pub(super) const FLAG_CHECKSUM: u64 = 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub(super) enum Kind {
    Hello = 1,
    Data = 2,
    End = 3,
    Ack = 4,
    Abort = 5,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Frame {
    pub(super) kind: Kind,
    pub(super) seq: u64,
    pub(super) offset: u64,
    pub(super) len: u64,
    pub(super) aux: u64,
}

impl Frame {
    pub(super) fn new(kind: Kind, seq: u64, offset: u64, len: u64, aux: u64) -> Self {
        Frame {
            kind,
            seq,
            offset,
            len,
            aux,
        }
    }

    pub(super) fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4..8].copy_from_slice(&(self.kind as u32).to_le_bytes());
        b[8..16].copy_from_slice(&self.seq.to_le_bytes());
        b[16..24].copy_from_slice(&self.offset.to_le_bytes());
        b[24..32].copy_from_slice(&self.len.to_le_bytes());
        b[32..40].copy_from_slice(&self.aux.to_le_bytes());
        b
    }

    fn decode(b: &[u8; HEADER_LEN]) -> Result<Self, TransportError> {
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(a)
        };
        let magic = u32_at(0);
        if magic != MAGIC {
            return Err(TransportError::Protocol(format!(
                "bad frame magic {magic:#010x} (expected {MAGIC:#010x}): the peer is not a gpu-stage TCP transport or the stream lost sync"
            )));
        }
        let kind = match u32_at(4) {
            1 => Kind::Hello,
            2 => Kind::Data,
            3 => Kind::End,
            4 => Kind::Ack,
            5 => Kind::Abort,
            k => return Err(TransportError::Protocol(format!("unknown frame kind {k}"))),
        };
        Ok(Frame {
            kind,
            seq: u64_at(8),
            offset: u64_at(16),
            len: u64_at(24),
            aux: u64_at(32),
        })
    }
}

/// Reads one header. `Ok(None)` on a clean EOF before the first byte.
pub(super) fn read_frame(stream: &mut impl Read) -> io::Result<Option<Frame>> {
    let mut b = [0u8; HEADER_LEN];
    let mut got = 0;
    while got < HEADER_LEN {
        match stream.read(&mut b[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(io::Error::from(io::ErrorKind::UnexpectedEof)),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Frame::decode(&b)
        .map(Some)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))
}

pub(super) fn write_all_vectored(stream: &mut impl Write, parts: &[&[u8]]) -> io::Result<()> {
    let mut slices: Vec<IoSlice<'_>> = parts.iter().map(|p| IoSlice::new(p)).collect();
    let mut bufs: &mut [IoSlice<'_>] = &mut slices;
    while !bufs.is_empty() {
        match stream.write_vectored(bufs) {
            Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
            Ok(n) => IoSlice::advance_slices(&mut bufs, n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The longest ABORT reason read; the peer names the length, so it is capped, not allocated as sent.
const MAX_REASON: u64 = 4096;

pub(super) fn read_reason(stream: &mut impl Read, len: u64) -> String {
    let mut buf = vec![0u8; len.min(MAX_REASON) as usize];
    match stream.read_exact(&mut buf) {
        Ok(()) => String::from_utf8_lossy(&buf).into_owned(),
        Err(_) => "peer aborted (reason unreadable)".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_reject_garbage() {
        let f = Frame::new(Kind::Data, 7, 1 << 40, 4 << 20, 3);
        assert_eq!(Frame::decode(&f.encode()).unwrap(), f);
        let mut bad = f.encode();
        bad[0] ^= 0xff;
        assert!(
            Frame::decode(&bad)
                .unwrap_err()
                .to_string()
                .contains("magic")
        );
        let mut bad = f.encode();
        bad[4] = 99;
        assert!(
            Frame::decode(&bad)
                .unwrap_err()
                .to_string()
                .contains("kind 99")
        );
    }
}
