//! The side-channel protocol (JSON lines over TCP), the immediate-value and credit codecs, and the
//! checks each end makes of the other's settings.

use std::net::SocketAddr;

use erdma_verbs::{Endpoint, RemoteBuf};
use serde::{Deserialize, Serialize};

use super::config::config_err;
use crate::config::RingConfig;
use crate::error::TransportError;

/// Version of the side-channel protocol; both ends must speak the same one.
pub const PROTOCOL_VERSION: u32 = 1;

/// The immediate value of chunk `global`'s WRITE_WITH_IMM: its low 32 bits.
pub fn encode_imm(global: u64) -> u32 {
    global as u32
}

/// Rebuilds the session-wide chunk number from an immediate value, given the next chunk the
/// receiver expects and how many chunks may be in flight (`window` = ring slots). Fails for an
/// immediate outside `next..next + window` (a peer that broke the credit protocol).
pub fn decode_imm(imm: u32, next: u64, window: u64) -> Result<u64, TransportError> {
    let delta = u64::from(imm.wrapping_sub(next as u32));
    if delta < window {
        Ok(next + delta)
    } else {
        Err(TransportError::Protocol(format!(
            "received chunk immediate {imm:#010x} while expecting chunks {next}..{} (at most {window} in flight): \
             the sender wrote without a credit",
            next + window
        )))
    }
}

/// Advances a credit count from the low 32 bits carried in a credit's immediate value. Credits
/// only grow, by less than 2^31 per message; anything else is a protocol error.
pub fn advance_credit(granted: u64, imm: u32) -> Result<u64, TransportError> {
    let delta = u64::from(imm.wrapping_sub(granted as u32));
    if delta < (1 << 31) {
        Ok(granted + delta)
    } else {
        Err(TransportError::Protocol(format!(
            "credit immediate {imm:#010x} would move the credit count backwards from {granted}"
        )))
    }
}

/// Connection mode both ends actually use (after resolving [`ConnectMode::Auto`](super::ConnectMode::Auto)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Wiring {
    /// Endpoints over the side channel.
    Manual,
    /// librdmacm.
    RdmaCm,
}

/// The sender's opening message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SenderHello {
    /// [`PROTOCOL_VERSION`] of the sender.
    pub version: u32,
    /// The sender's ring geometry.
    pub ring: RingConfig,
    /// Queue pairs the sender opens.
    pub qps: usize,
    /// The sender's devices (for messages).
    pub devices: Vec<String>,
    /// How the sender connects.
    pub wiring: Wiring,
    /// Manual wiring: one endpoint per QP, in QP order. Empty for rdma_cm.
    pub endpoints: Vec<Endpoint>,
}

/// The receiver's answer once its QPs are ready.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReceiverWelcome {
    /// The receiver's ring geometry.
    pub ring: RingConfig,
    /// The receiver's devices (for messages).
    pub devices: Vec<String>,
    /// Manual wiring: one endpoint per QP. Empty for rdma_cm.
    pub endpoints: Vec<Endpoint>,
    /// For each receiver device (QP `q` uses `slots[q % len]`), where each ring slot is
    /// registered: address, length, rkey.
    pub slots: Vec<Vec<RemoteBuf>>,
}

/// Side-channel messages, one JSON object per line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Wire {
    /// Sender → receiver, first.
    Hello(SenderHello),
    /// Receiver → sender (rdma_cm): where to connect QP `q` (`addrs[q % addrs.len()]`).
    Listening {
        /// One listener per receiver device.
        addrs: Vec<SocketAddr>,
    },
    /// Receiver → sender: QPs ready, slot table.
    Welcome(ReceiverWelcome),
    /// Sender → receiver: QPs ready; credits go into `credit` (on QP 0).
    Ready {
        /// The sender's credit scratch region.
        credit: RemoteBuf,
    },
    /// Sender → receiver: every WRITE of the transfer completed.
    End {
        /// Chunks in the transfer.
        chunks: u64,
        /// Bytes in the transfer.
        bytes: u64,
    },
    /// Receiver → sender: the transfer is on the device.
    Ack {
        /// Chunks received.
        chunks: u64,
        /// Bytes received.
        bytes: u64,
    },
    /// Either way: the pipeline failed.
    Abort {
        /// Why.
        reason: String,
    },
}

impl Wire {
    /// One line of JSON (with the newline).
    pub fn to_line(&self) -> Result<String, TransportError> {
        let mut s = serde_json::to_string(self).map_err(|e| {
            TransportError::Protocol(format!("encoding a side-channel message: {e}"))
        })?;
        s.push('\n');
        Ok(s)
    }

    /// Parses one line.
    pub fn from_line(line: &str) -> Result<Wire, TransportError> {
        serde_json::from_str(line.trim_end()).map_err(|e| {
            TransportError::Protocol(format!(
                "bad side-channel message {:?}: {e} (is the peer a gpu-stage RDMA transport of the same version?)",
                truncate(line, 120)
            ))
        })
    }
}

fn truncate(s: &str, n: usize) -> String {
    if s.len() <= n {
        s.to_string()
    } else {
        let mut end = n;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}…", &s[..end])
    }
}

fn describe_ring(r: &RingConfig) -> String {
    format!("{} B × {} slots", r.chunk_bytes, r.slots)
}

/// Receiver-side check of the sender's hello against our own settings.
pub fn check_hello(
    hello: &SenderHello,
    ring: &RingConfig,
    qps: usize,
    wiring: Wiring,
) -> Result<(), TransportError> {
    if hello.version != PROTOCOL_VERSION {
        return Err(TransportError::Protocol(format!(
            "the sender speaks protocol version {}, this receiver {PROTOCOL_VERSION}; run the same gpu-stage build on both ends",
            hello.version
        )));
    }
    check_ring("sender", &hello.ring, ring)?;
    if hello.qps != qps {
        return Err(config_err(
            "qps",
            qps,
            format!(
                "the sender opens {} queue pairs and this receiver expects {qps}; use the same --qps on both ends",
                hello.qps
            ),
        ));
    }
    if hello.wiring != wiring {
        return Err(config_err(
            "connect",
            format!("{wiring:?}"),
            format!(
                "the sender connects with {:?} and this receiver with {wiring:?}; choose the same connect mode on both ends",
                hello.wiring
            ),
        ));
    }
    if wiring == Wiring::Manual && hello.endpoints.len() != qps {
        return Err(TransportError::Protocol(format!(
            "the sender sent {} endpoints for {qps} queue pairs",
            hello.endpoints.len()
        )));
    }
    Ok(())
}

/// Both rings must have the same geometry: chunk `g` is written to the receiver's slot
/// `g % slots` at offset `seq * chunk_bytes`, and both ends count credits in slots.
pub fn check_ring(
    peer: &str,
    theirs: &RingConfig,
    ours: &RingConfig,
) -> Result<(), TransportError> {
    if theirs != ours {
        return Err(config_err(
            "ring",
            describe_ring(ours),
            format!(
                "the {peer}'s ring is {} but ours is {}; use the same --chunk and --slots on both ends",
                describe_ring(theirs),
                describe_ring(ours)
            ),
        ));
    }
    Ok(())
}

/// Sender-side check of the receiver's welcome.
pub fn check_welcome(
    w: &ReceiverWelcome,
    ring: &RingConfig,
    qps: usize,
    wiring: Wiring,
) -> Result<(), TransportError> {
    check_ring("receiver", &w.ring, ring)?;
    if wiring == Wiring::Manual && w.endpoints.len() != qps {
        return Err(TransportError::Protocol(format!(
            "the receiver sent {} endpoints for {qps} queue pairs",
            w.endpoints.len()
        )));
    }
    if w.slots.is_empty() {
        return Err(TransportError::Protocol(
            "the receiver sent no slot table".into(),
        ));
    }
    for (d, table) in w.slots.iter().enumerate() {
        if table.len() != ring.slots {
            return Err(TransportError::Protocol(format!(
                "the receiver's slot table for device {d} has {} entries for {} slots",
                table.len(),
                ring.slots
            )));
        }
        if let Some(s) = table.iter().find(|s| s.len < ring.chunk_bytes as u64) {
            return Err(TransportError::Protocol(format!(
                "the receiver registered a {}-byte slot, smaller than the {}-byte chunks",
                s.len, ring.chunk_bytes
            )));
        }
    }
    Ok(())
}
pub(super) fn unexpected(peer: &str, want: &str, got: &Wire) -> TransportError {
    let kind = match got {
        Wire::Hello(_) => "Hello",
        Wire::Listening { .. } => "Listening",
        Wire::Welcome(_) => "Welcome",
        Wire::Ready { .. } => "Ready",
        Wire::End { .. } => "End",
        Wire::Ack { .. } => "Ack",
        Wire::Abort { .. } => "Abort",
    };
    TransportError::Protocol(format!("{peer} sent {kind} where {want} was expected"))
}

/// The longest side-channel line accepted: the largest legitimate message (the ring's keys at setup)
/// is a few KiB; a peer that sends more without a newline is refused, not buffered (issue 26, F7).
pub(super) const MAX_LINE: usize = 1 << 20;

/// `read_line` that stops at [`MAX_LINE`] bytes: a longer line is an `InvalidData` error naming the
/// cap, and at most `MAX_LINE + 1` bytes are ever buffered.
pub(super) fn read_line_capped(
    r: &mut impl std::io::BufRead,
    line: &mut String,
) -> std::io::Result<usize> {
    use std::io::{BufRead as _, Read as _};
    // `line` may hold the start of this line from an earlier, interrupted call: the cap is for all of it.
    let room = (MAX_LINE + 1).saturating_sub(line.len()) as u64;
    r.by_ref().take(room).read_line(line)?;
    let n = line.len();
    if n > MAX_LINE {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("a side-channel line longer than {MAX_LINE} bytes (a broken or hostile peer)"),
        ));
    }
    Ok(n)
}

/// How often a side-channel reader wakes up after setup to see whether its transport stopped, and
/// whether a started message stalled: the socket's read timeout then.
pub(super) const SIDE_POLL: std::time::Duration = std::time::Duration::from_millis(200);

/// One side-channel line after setup, read from a socket whose read timeout is [`SIDE_POLL`]: waiting
/// for a new line lasts as long as it must (transfers can be far apart) unless `keep_waiting` says
/// stop (`Ok(None)`), but a line that started must be complete within `stall`, else a `TimedOut`
/// error (a peer that sends half a message and stops, issue 26 F7). `line` starts empty; `Ok(Some(0))`
/// is EOF.
pub(super) fn read_line_after_setup(
    r: &mut impl std::io::BufRead,
    line: &mut String,
    stall: std::time::Duration,
    keep_waiting: impl Fn() -> bool,
) -> std::io::Result<Option<usize>> {
    let mut started: Option<std::time::Instant> = None;
    loop {
        match read_line_capped(r, line) {
            Ok(n) => return Ok(Some(n)),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                if !keep_waiting() {
                    return Ok(None);
                }
                if line.is_empty() {
                    continue;
                }
                let since = *started.get_or_insert_with(std::time::Instant::now);
                if since.elapsed() >= stall {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!(
                            "the peer sent {} bytes of a side-channel message and nothing more for {stall:?}",
                            line.len()
                        ),
                    ));
                }
            }
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    /// Yields `parts` one per read, then `WouldBlock` forever (a socket whose read timed out).
    struct Stalling(std::collections::VecDeque<&'static [u8]>);

    impl std::io::Read for Stalling {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            match self.0.pop_front() {
                Some(p) => {
                    buf[..p.len()].copy_from_slice(p);
                    Ok(p.len())
                }
                None => {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                    Err(std::io::ErrorKind::WouldBlock.into())
                }
            }
        }
    }

    /// Before, the readers blocked without a timeout after setup: half a message and silence held the
    /// thread (and the peer's place) until the transport was dropped.
    #[test]
    fn a_message_that_stalls_midway_is_an_error_and_idle_waits_until_stopped() {
        use std::time::Duration;
        let stall = Duration::from_millis(40);
        let mut r = std::io::BufReader::new(Stalling(
            [
                &b"{\"type\":"[..],
                &b"\"end\",\"chunks\":1,\"bytes\":1}\n"[..],
                &b"{\"ty"[..],
            ]
            .into(),
        ));
        let mut line = String::new();
        // A message split over two reads is one line.
        let n = super::read_line_after_setup(&mut r, &mut line, stall, || true).unwrap();
        assert_eq!(n, Some(line.len()));
        assert!(line.ends_with("1}\n"), "{line}");
        line.clear();
        let e = super::read_line_after_setup(&mut r, &mut line, stall, || true).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
        assert!(e.to_string().contains("sent 4 bytes"), "{e}");
        // Idle (nothing started): waits until told to stop.
        let polls = std::cell::Cell::new(0);
        let mut idle = std::io::BufReader::new(Stalling(Default::default()));
        line.clear();
        let got = super::read_line_after_setup(&mut idle, &mut line, stall, || {
            polls.set(polls.get() + 1);
            polls.get() < 30 // far longer than `stall`
        });
        assert_eq!(got.unwrap(), None);
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "reads 1 MiB through read_line: over 15 minutes under Miri"
    )]
    fn a_line_past_the_cap_is_an_error_and_is_not_buffered_whole() {
        let mut ok = std::io::Cursor::new(b"{\"end\":1}\nnext\n".to_vec());
        let mut line = String::new();
        assert_eq!(super::read_line_capped(&mut ok, &mut line).unwrap(), 10);
        // Before: read_line grew the String for as long as the peer sent bytes without a newline.
        let endless = std::io::repeat(b'x');
        let mut r = std::io::BufReader::new(endless);
        let mut line = String::new();
        let e = super::read_line_capped(&mut r, &mut line).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
        assert!(e.to_string().contains("longer than 1048576 bytes"), "{e}");
        assert!(line.len() <= super::MAX_LINE + 1);
    }

    use super::*;
    use crate::config::MIB;

    fn ring(slots: usize) -> RingConfig {
        RingConfig::new(MIB, slots).unwrap()
    }

    #[test]
    fn immediate_round_trips_across_wraparound() {
        for next in [
            0u64,
            5,
            (1 << 32) - 2,
            (1 << 32) + 7,
            u64::from(u32::MAX) * 3,
        ] {
            for ahead in 0..8u64 {
                let g = next + ahead;
                assert_eq!(
                    decode_imm(encode_imm(g), next, 8).unwrap(),
                    g,
                    "next {next} ahead {ahead}"
                );
            }
            // Outside the window (no credit for it, or a stale chunk): refused.
            assert!(decode_imm(encode_imm(next + 8), next, 8).is_err());
            if next > 0 {
                let e = decode_imm(encode_imm(next - 1), next, 8)
                    .unwrap_err()
                    .to_string();
                assert!(e.contains("without a credit"), "{e}");
            }
        }
    }

    #[test]
    fn credits_advance_monotonically_across_wraparound() {
        assert_eq!(advance_credit(0, 8).unwrap(), 8);
        assert_eq!(
            advance_credit(8, 8).unwrap(),
            8,
            "a repeated credit changes nothing"
        );
        let near = u64::from(u32::MAX) - 1;
        assert_eq!(advance_credit(near, 3).unwrap(), near + 5);
        assert!(advance_credit(100, 50).is_err(), "credits never go back");
    }

    #[test]
    fn wire_messages_round_trip_as_json_lines() {
        let ep = Endpoint {
            qpn: 17,
            psn: 0x123,
            gid: "::ffff:10.99.0.1".parse().unwrap(),
            gid_index: 1,
            lid: 0,
            mtu: 1024,
            rd_atomic: 16,
        };
        let buf = RemoteBuf {
            addr: 0x7f00_0000_1000,
            len: MIB as u64,
            rkey: 0xabc,
        };
        let msgs = vec![
            Wire::Hello(SenderHello {
                version: PROTOCOL_VERSION,
                ring: ring(4),
                qps: 2,
                devices: vec!["rxe0".into()],
                wiring: Wiring::Manual,
                endpoints: vec![ep, ep],
            }),
            Wire::Listening {
                addrs: vec!["10.99.0.1:4791".parse().unwrap()],
            },
            Wire::Welcome(ReceiverWelcome {
                ring: ring(4),
                devices: vec!["rxe0".into()],
                endpoints: vec![ep],
                slots: vec![vec![buf; 4]],
            }),
            Wire::Ready { credit: buf },
            Wire::End {
                chunks: 3,
                bytes: 2 * MIB as u64 + 1,
            },
            Wire::Ack {
                chunks: 3,
                bytes: 2 * MIB as u64 + 1,
            },
            Wire::Abort {
                reason: "line\nbreak".into(),
            },
        ];
        for m in msgs {
            let line = m.to_line().unwrap();
            assert!(
                line.ends_with('\n') && line.matches('\n').count() == 1,
                "{line}"
            );
            assert_eq!(Wire::from_line(&line).unwrap(), m);
        }
        let e = Wire::from_line("{\"type\":\"nonsense\"}")
            .unwrap_err()
            .to_string();
        assert!(e.contains("same version"), "{e}");
    }

    fn hello(ring_cfg: RingConfig) -> SenderHello {
        SenderHello {
            version: PROTOCOL_VERSION,
            ring: ring_cfg,
            qps: 2,
            devices: vec!["rxe0".into()],
            wiring: Wiring::Manual,
            endpoints: vec![
                Endpoint {
                    qpn: 1,
                    psn: 1,
                    gid: Default::default(),
                    gid_index: 1,
                    lid: 0,
                    mtu: 1024,
                    rd_atomic: 16
                };
                2
            ],
        }
    }

    #[test]
    fn handshake_mismatches_are_reported_with_both_values() {
        check_hello(&hello(ring(4)), &ring(4), 2, Wiring::Manual).unwrap();
        let e = check_hello(
            &hello(RingConfig::new(4 * MIB, 4).unwrap()),
            &ring(4),
            2,
            Wiring::Manual,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("4194304 B × 4 slots")
                && e.contains("1048576 B × 4 slots")
                && e.contains("--chunk"),
            "{e}"
        );
        let e = check_hello(&hello(ring(8)), &ring(4), 2, Wiring::Manual)
            .unwrap_err()
            .to_string();
        assert!(e.contains("8 slots") && e.contains("--slots"), "{e}");
        let e = check_hello(&hello(ring(4)), &ring(4), 3, Wiring::Manual)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("opens 2 queue pairs") && e.contains("expects 3"),
            "{e}"
        );
        let e = check_hello(&hello(ring(4)), &ring(4), 2, Wiring::RdmaCm)
            .unwrap_err()
            .to_string();
        assert!(e.contains("Manual") && e.contains("RdmaCm"), "{e}");
        let mut h = hello(ring(4));
        h.version = PROTOCOL_VERSION + 1;
        assert!(
            check_hello(&h, &ring(4), 2, Wiring::Manual)
                .unwrap_err()
                .to_string()
                .contains("protocol version")
        );
        let mut h = hello(ring(4));
        h.endpoints.pop();
        assert!(
            check_hello(&h, &ring(4), 2, Wiring::Manual)
                .unwrap_err()
                .to_string()
                .contains("1 endpoints")
        );
    }

    #[test]
    fn welcome_is_checked() {
        let buf = RemoteBuf {
            addr: 0x1000,
            len: MIB as u64,
            rkey: 1,
        };
        let w = ReceiverWelcome {
            ring: ring(2),
            devices: vec!["rxe0".into()],
            endpoints: vec![],
            slots: vec![vec![buf; 2]],
        };
        check_welcome(&w, &ring(2), 2, Wiring::RdmaCm).unwrap();
        assert!(
            check_welcome(&w, &ring(2), 2, Wiring::Manual)
                .unwrap_err()
                .to_string()
                .contains("0 endpoints")
        );
        let mut short = w.clone();
        short.slots[0][1].len = 100;
        assert!(
            check_welcome(&short, &ring(2), 2, Wiring::RdmaCm)
                .unwrap_err()
                .to_string()
                .contains("100-byte slot")
        );
        let mut few = w.clone();
        few.slots[0].pop();
        assert!(
            check_welcome(&few, &ring(2), 2, Wiring::RdmaCm)
                .unwrap_err()
                .to_string()
                .contains("1 entries")
        );
        assert!(check_welcome(&w, &ring(3), 2, Wiring::RdmaCm).is_err());
    }
}
