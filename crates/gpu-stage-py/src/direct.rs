//! The direct lane: one plain TCP connection of a channel beside gpu-stage's data connections
//! (opened and authenticated with them, see [`crate::handshake`]).
//!
//! Every object starts there: an 8-byte mode and the 96-byte [`Header`](crate::buffer::Header),
//! in one write. Mode `RDKTSTG1` (staged): the buffers follow through gpu-stage's pipeline on the
//! data connections, as before, but the header no longer costs a staged transfer of its own (an
//! END on every connection and an ACK round trip). Mode `RDKTINL1` (inline): an object of at
//! most [`SMALL_OBJECT`] bytes on one device (see below) follows right behind the
//! header on the same connection, and the receiver answers `RDKT-GOT` once every byte is in its
//! buffers: no ring, no pipeline thread, one round trip.
//!
//! Inline means at most [`SMALL_OBJECT`] bytes whose non-empty buffers share one place: host
//! memory (copied straight from and into the buffers) or one GPU (through a page-locked bounce
//! buffer and one blocking copy each way, see [`gpu_stage::Bounce`]). Either end may hold the
//! bytes in the other kind of memory: the wire carries only bytes.
//!
//! In a pull session (see [`crate::server`]) the consumer asks first: `RDKTPULL`, the tag's length
//! (u32) and bytes, and the object's token. The producer's server answers with the object as
//! above, or with `RDKTNONE`, a length (u32) and a message saying why not (no such object
//! registered: never produced there, or garbage-collected; a wrong token).
//!
//! The receiver checks the header against what it expects before it reads a byte of the payload
//! into a buffer. Reads and writes are bounded by the channel's timeout; an abort shuts the
//! lane down, which ends a blocked read or write at once.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::buffer::{BufferSpec, HEADER_LEN, Place, one_place};
use crate::error::BindError;
use crate::handshake::{SMALL_OBJECT, TOKEN_LEN, Token};

const STAGED: &[u8; 8] = b"RDKTSTG1";
const INLINE: &[u8; 8] = b"RDKTINL1";
const GOT: &[u8; 8] = b"RDKT-GOT";
const PULL: &[u8; 8] = b"RDKTPULL";
const NONE: &[u8; 8] = b"RDKTNONE";
/// Longest tag a pull request may name (Ray's object ids are 56 hex digits).
pub const MAX_TAG: usize = 256;
/// Longest refusal message.
const MAX_WHY: usize = 1024;

/// Whether an object travels inline: at most [`SMALL_OBJECT`] bytes, its non-empty buffers in
/// one place (host memory, or one GPU).
pub fn is_inline(buffers: &[BufferSpec]) -> bool {
    let total: u64 = buffers.iter().map(|b| b.len() as u64).sum();
    total <= SMALL_OBJECT && (total == 0 || one_place(buffers).is_some())
}

/// The bytes of host buffers, in order, as slices of them (no copy).
pub fn host_parts(buffers: &[BufferSpec]) -> Result<Vec<&[u8]>, BindError> {
    buffers
        .iter()
        .enumerate()
        .filter(|(_, b)| !b.is_empty())
        .map(|(i, b)| {
            if b.place() != Place::Cpu {
                return Err(BindError::buffer(
                    i,
                    "this CUDA buffer is in an object sent as host memory: keep an object's \
                     buffers on one device",
                ));
            }
            // SAFETY: `b` is host memory (checked) that BufferSpec's contract keeps allocated and
            // unwritten for the whole send, which outlives the slices; the range was checked not
            // to wrap and to fit isize.
            Ok(unsafe { std::slice::from_raw_parts(b.addr() as *const u8, b.len()) })
        })
        .collect()
}

fn io_error(what: &str, timeout: Duration) -> impl FnOnce(std::io::Error) -> BindError + '_ {
    move |e| match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
            BindError::Transport(gpu_stage::TransportError::Timeout {
                after: timeout,
                waiting_for: what.to_string(),
            })
        }
        std::io::ErrorKind::UnexpectedEof => BindError::Transport(
            gpu_stage::TransportError::Closed(format!("the peer closed the connection ({what})")),
        ),
        _ => BindError::Transport(gpu_stage::TransportError::Io {
            context: what.to_string(),
            source: e,
        }),
    }
}

/// Sender: the mode and `header`, then an inline object's bytes (`inline`, its parts in order),
/// in one write; an inline object then waits for the receiver's confirmation.
pub fn send_object(
    lane: &mut TcpStream,
    header: &[u8; HEADER_LEN],
    inline: Option<&[&[u8]]>,
    timeout: Duration,
) -> Result<(), BindError> {
    let parts = inline.unwrap_or_default();
    let payload: usize = parts.iter().map(|p| p.len()).sum();
    let mut frame = Vec::with_capacity(8 + HEADER_LEN + payload);
    frame.extend_from_slice(if inline.is_some() { INLINE } else { STAGED });
    frame.extend_from_slice(header);
    for p in parts {
        frame.extend_from_slice(p);
    }
    lane.write_all(&frame)
        .map_err(io_error("writing the object on the direct lane", timeout))?;
    if inline.is_some() {
        let mut got = [0u8; 8];
        lane.read_exact(&mut got).map_err(io_error(
            "the receiver's confirmation of an inline object",
            timeout,
        ))?;
        if &got != GOT {
            return Err(BindError::Transport(gpu_stage::TransportError::Protocol(
                "the receiver answered an inline object with something other than RDKT-GOT".into(),
            )));
        }
    }
    Ok(())
}

/// Receiver: the mode and the header bytes of the next object (the caller checks the header). A
/// server's refusal of a pull is [`BindError::Refused`] with its message.
pub fn recv_header(
    lane: &mut TcpStream,
    timeout: Duration,
) -> Result<(bool, [u8; HEADER_LEN]), BindError> {
    let mut mode = [0u8; 8];
    lane.read_exact(&mut mode).map_err(io_error(
        "the next object's header on the direct lane",
        timeout,
    ))?;
    let inline = match &mode {
        m if m == INLINE => true,
        m if m == STAGED => false,
        m if m == NONE => {
            let why = read_str(lane, MAX_WHY, "the server's refusal", timeout)?;
            return Err(BindError::Refused(why));
        }
        _ => {
            return Err(BindError::Transport(gpu_stage::TransportError::Protocol(
                "the direct lane carried something other than an object header".into(),
            )));
        }
    };
    let mut header = [0u8; HEADER_LEN];
    lane.read_exact(&mut header).map_err(io_error(
        "the next object's header on the direct lane",
        timeout,
    ))?;
    Ok((inline, header))
}

fn protocol(what: String) -> BindError {
    BindError::Transport(gpu_stage::TransportError::Protocol(what))
}

/// A length (u32, at most `max`) and that many bytes of UTF-8 (lossy).
fn read_str(
    lane: &mut TcpStream,
    max: usize,
    what: &str,
    timeout: Duration,
) -> Result<String, BindError> {
    let mut len = [0u8; 4];
    lane.read_exact(&mut len).map_err(io_error(what, timeout))?;
    let n = u32::from_le_bytes(len) as usize;
    if n > max {
        return Err(protocol(format!(
            "{what}: {n} bytes, at most {max} allowed"
        )));
    }
    let mut b = vec![0u8; n];
    lane.read_exact(&mut b).map_err(io_error(what, timeout))?;
    Ok(String::from_utf8_lossy(&b).into_owned())
}

fn with_str(frame: &mut Vec<u8>, s: &[u8]) {
    frame.extend_from_slice(&(s.len() as u32).to_le_bytes());
    frame.extend_from_slice(s);
}

/// Consumer: asks the server for the object `tag`, presenting its `token`.
pub fn send_request(
    lane: &mut TcpStream,
    tag: &str,
    token: &Token,
    timeout: Duration,
) -> Result<(), BindError> {
    if tag.len() > MAX_TAG {
        return Err(BindError::env(
            "object tag",
            tag,
            &format!("at most {MAX_TAG} bytes"),
        ));
    }
    let mut frame = Vec::with_capacity(8 + 4 + tag.len() + TOKEN_LEN);
    frame.extend_from_slice(PULL);
    with_str(&mut frame, tag.as_bytes());
    frame.extend_from_slice(token.bytes());
    lane.write_all(&frame)
        .map_err(io_error("asking the producer for an object", timeout))
}

/// Server: the next request on `lane` (the caller saw it readable): the tag and the token.
pub fn read_request(lane: &mut TcpStream, timeout: Duration) -> Result<(String, Token), BindError> {
    let mut mode = [0u8; 8];
    lane.read_exact(&mut mode)
        .map_err(io_error("the consumer's request", timeout))?;
    if &mode != PULL {
        return Err(protocol(
            "the consumer sent something other than a pull request".into(),
        ));
    }
    let tag = read_str(lane, MAX_TAG, "the requested object's tag", timeout)?;
    let mut token = [0u8; TOKEN_LEN];
    lane.read_exact(&mut token)
        .map_err(io_error("the requested object's token", timeout))?;
    Ok((tag, Token::from_bytes(&token)?))
}

/// Server: refuses a request, saying why (the message must not contain a secret).
pub fn refuse_request(lane: &mut TcpStream, why: &str, timeout: Duration) -> Result<(), BindError> {
    let why = &why.as_bytes()[..why.len().min(MAX_WHY)];
    let mut frame = Vec::with_capacity(8 + 4 + why.len());
    frame.extend_from_slice(NONE);
    with_str(&mut frame, why);
    lane.write_all(&frame)
        .map_err(io_error("refusing a request", timeout))
}

/// Receiver: the inline payload, straight into host `buffers` (checked by the header to have
/// the sender's sizes). Returns the bytes received; [`confirm`] follows once they are in place.
pub fn recv_inline(
    lane: &mut TcpStream,
    buffers: &[BufferSpec],
    timeout: Duration,
) -> Result<u64, BindError> {
    let mut total = 0u64;
    for (i, b) in buffers.iter().enumerate().filter(|(_, b)| !b.is_empty()) {
        if b.place() != Place::Cpu {
            return Err(BindError::buffer(
                i,
                "this CUDA buffer is in an object received as host memory: keep an object's \
                 buffers on one device",
            ));
        }
        // SAFETY: `b` is host memory (checked above) that BufferSpec's contract keeps allocated,
        // writable and untouched by anyone else for the whole receive; the range was checked not
        // to wrap and to fit isize.
        let dst = unsafe { std::slice::from_raw_parts_mut(b.addr() as *mut u8, b.len()) };
        read_payload(lane, dst, timeout)?;
        total += b.len() as u64;
    }
    Ok(total)
}

/// Receiver: the next `dst.len()` bytes of an inline payload.
pub fn read_payload(
    lane: &mut TcpStream,
    dst: &mut [u8],
    timeout: Duration,
) -> Result<(), BindError> {
    lane.read_exact(dst)
        .map_err(io_error("an inline object's bytes", timeout))
}

/// Receiver: tells the sender an inline object is in its buffers.
pub fn confirm(lane: &mut TcpStream, timeout: Duration) -> Result<(), BindError> {
    lane.write_all(GOT)
        .map_err(io_error("confirming an inline object", timeout))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_small_objects_on_one_device_go_inline() {
        let at = |place, len| {
            // SAFETY: only classified by is_inline, never read or written.
            unsafe { BufferSpec::from_raw(place, 0x1000, len) }.expect("valid")
        };
        assert!(is_inline(&[]));
        assert!(is_inline(&[
            at(Place::Cpu, 32 << 10),
            at(Place::Cpu, 32 << 10)
        ]));
        assert!(!is_inline(&[
            at(Place::Cpu, 32 << 10),
            at(Place::Cpu, (32 << 10) + 1)
        ]));
        assert!(is_inline(&[
            at(Place::Cuda(0), 4),
            at(Place::Cuda(0), (64 << 10) - 4)
        ]));
        assert!(!is_inline(&[at(Place::Cuda(0), 4), at(Place::Cpu, 4)]));
        assert!(!is_inline(&[at(Place::Cuda(0), 4), at(Place::Cuda(1), 4)]));
        assert!(!is_inline(&[at(Place::Cuda(0), (64 << 10) + 1)]));
    }
}
