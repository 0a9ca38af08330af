//! RDMA transport (feature `rdma`): the sender RDMA-WRITEs every chunk straight into a slot of the
//! receiver's staging ring, so the only CPU work per chunk is posting one work request.
//!
//! ```text
//!  sender (client)                                          receiver (server)
//!  ─────────────── TCP side channel (JSON lines, open for the whole session) ───────────────
//!  Hello {version, ring, qps, mode, endpoints}      ──►     validate (geometry, version, QPs)
//!  [rdma_cm: connect QP q to Listening[q % n]]      ◄──     [rdma_cm: Listening {addrs}]
//!                                                   ◄──     Welcome {endpoints, slot table}
//!  Ready {credit target}                            ──►     start granting credits
//!  ─────────────── RDMA (RC QPs, chunk g on QP g % qps) ────────────────────────────────────
//!                                                   ◄──     WRITE_WITH_IMM 8 B, imm = credits
//!  WRITE_WITH_IMM slot g % slots, imm = g           ──►     RECV completion → next_chunk
//!  ─────────────── TCP ─────────────────────────────────────────────────────────────────────
//!  End {chunks, bytes}  (after every WRITE completed) ──►   deliver the rest, check totals
//!                                                   ◄──     Ack {chunks, bytes} (data on device)
//!  Abort {reason} either way; EOF = the peer is gone.
//! ```
//!
//! - **Chunk numbering**: `g` counts chunks over the whole session (transfer after transfer), so
//!   credits can run ahead into the next transfer. Chunk `g` lands in receiver slot
//!   `g % slots` and travels on QP `g % qps`; QP `q` lives on device `q % devices`.
//! - **Immediate value**: the low 32 bits of `g` (the slot follows from it, and at most `slots`
//!   chunks are in flight, so the receiver rebuilds `g` from its next expected chunk). The length
//!   is the completion's `byte_len`, which rxe, mlx5 and erdma fill for WRITE_WITH_IMM receives
//!   (32 bits of immediate cannot carry a slot, an ordering key and a length up to 1 GiB). Every
//!   length is checked against the chunk size, and the totals in `End` are checked against what
//!   arrived, so a provider that misreported it would fail loudly, never silently.
//! - **Credits**: a receiver thread acquires slot `g % slots` (blocks until the pipeline released
//!   it after the previous occupant's host→device copy), then grants credit `g + 1` with an
//!   8-byte WRITE_WITH_IMM into a scratch word of the sender on QP 0 (the payload is ignored; the
//!   immediate carries the low 32 bits of the credit count). The sender writes chunk `g` only once credit `g + 1`
//!   arrived, and releases its own slot when the WRITE completes. Both sides only post
//!   zero-length receives (1 SGE max and no SRQ on eRDMA are respected trivially).
//! - **Verbs used**: RC QPs, WRITE_WITH_IMM and zero-length RECV only; no SRQ, no extended verbs,
//!   queue depths clamped to the device caps (eRDMA: ≤ 8192 send WRs).
//! - **Failure**: every wait (credits, completions, the ACK, the next chunk) is bounded by
//!   [`RdmaConfig::timeout`]; the TCP side channel stays open so a peer that exits is noticed at
//!   once (EOF), and the error names the peer.

mod config;
mod plumbing;
mod receiver;
mod sender;
mod setup;
mod wire;

pub use config::{ConnectMode, DEFAULT_QPS, DEFAULT_TIMEOUT, MAX_QPS, RdmaConfig, Stripe};
pub use receiver::RdmaReceiver;

/// The fuzz target's side-channel entry (see [`crate::fuzzing::rdma_side_channel`]).
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) fn fuzz_side_channel(bytes: &[u8]) -> (usize, usize) {
    let ring = crate::RingConfig::new(crate::MIB, 4).unwrap_or_default();
    for line in bytes.split(|b| *b == b'\n') {
        let line = String::from_utf8_lossy(line);
        match Wire::from_line(&line) {
            Ok(Wire::Hello(h)) => {
                let _ = check_hello(&h, &ring, 2, Wiring::Manual);
                let _ = check_hello(&h, &ring, 1, Wiring::RdmaCm);
            }
            Ok(Wire::Welcome(w)) => {
                let _ = check_welcome(&w, &ring, 2, Wiring::Manual);
                let _ = check_welcome(&w, &ring, 1, Wiring::RdmaCm);
            }
            Ok(m) => {
                let _ = m.to_line();
            }
            Err(_) => {}
        }
    }
    (
        receiver::fuzz_side_reader(bytes),
        sender::fuzz_side_reader(bytes),
    )
}
pub use sender::RdmaSender;
pub use wire::{
    PROTOCOL_VERSION, ReceiverWelcome, SenderHello, Wire, Wiring, advance_credit, check_hello,
    check_ring, check_welcome, decode_imm, encode_imm,
};

#[cfg(test)]
mod tests {
    #[test]
    fn side_channel_readers_end_on_any_input_and_queue_boundedly() {
        let end = "{\"type\":\"end\",\"chunks\":1,\"bytes\":1}\n";
        let ack = "{\"type\":\"ack\",\"chunks\":1,\"bytes\":1}\n";
        // ENDs nobody takes: the reader stops at the event queue's bound with an error.
        assert_eq!(super::fuzz_side_channel(end.repeat(100).as_bytes()).0, 12);
        assert_eq!(super::fuzz_side_channel(ack.as_bytes()), (0, 1));
        assert_eq!(super::fuzz_side_channel(b"\xff\n{}\n"), (0, 0));
        assert_eq!(super::fuzz_side_channel(b""), (0, 0));
    }
}
