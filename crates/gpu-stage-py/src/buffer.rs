//! Buffer descriptions from Python, and the per-object header both ends compare.
//!
//! A buffer is `(device type, device index, address, byte length)`: `("cpu", 0, a.ctypes.data,
//! a.nbytes)` for a numpy array, `("cuda", 0, t.data_ptr(), t.nbytes)` for a torch tensor. The
//! address and length are the caller's promise (the Python layer takes them from a contiguous
//! array or tensor that it keeps alive for the whole call); what can be checked is checked here:
//! the device type, a non-null address for a non-empty buffer, and that the range fits in the
//! address space. CUDA addresses are further checked against the driver's view of the allocation
//! (`gpu_stage::CudaDevice::borrow_raw`).

use crate::error::BindError;
use crate::handshake::{TOKEN_LEN, Token, ct_eq};

/// Where a buffer lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Place {
    /// Host memory.
    Cpu,
    /// Memory of CUDA device `n` (the ordinal as this process sees it, after CUDA_VISIBLE_DEVICES).
    Cuda(usize),
}

/// One checked buffer description: what [`crate::channel::SendChannel::send`] reads and
/// [`crate::channel::RecvChannel::recv`] writes, both safe functions. So a description can only be made
/// by an `unsafe` constructor whose caller promises the memory ([`BufferSpec::from_raw`],
/// [`BufferSpec::parse`]); the fields are private.
///
/// ```compile_fail,E0451
/// use _native::buffer::{BufferSpec, Place};
/// // Before (issue 26, F1): a safe struct literal named any address for the host worker to write.
/// let s = BufferSpec { place: Place::Cpu, addr: 0x5555_0000_0000, len: 4096 };
/// ```
///
/// ```compile_fail,E0133
/// use _native::buffer::{BufferSpec, Place};
/// let s = BufferSpec::from_raw(Place::Cpu, 0x5555_0000_0000, 4096);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BufferSpec {
    place: Place,
    addr: u64,
    len: usize,
}

impl BufferSpec {
    /// A description of `len` bytes at `addr` in `place`, checked for what can be seen (non-null when
    /// non-empty, no wrap-around, a length that fits `isize`).
    ///
    /// # Safety
    ///
    /// For every [`SendChannel::send`](crate::channel::SendChannel::send) this description (or a copy)
    /// is passed to, `[addr, addr + len)` must be memory of `place` that stays allocated and is not
    /// written by anyone else until the call returns; for every
    /// [`RecvChannel::recv`](crate::channel::RecvChannel::recv), memory that stays allocated and is
    /// neither read nor written by anyone else until the call returns (the receiver writes all of it).
    /// For `Place::Cuda(n)` it must be device memory of GPU `n` (the driver's view is checked as well).
    pub unsafe fn from_raw(place: Place, addr: u64, len: usize) -> Result<Self, BindError> {
        Self::checked(0, place, addr, len as u64)
    }

    /// Where it lives.
    pub fn place(&self) -> Place {
        self.place
    }

    /// First byte (a host or device address).
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Checks one `(device type, index, address, length)` description (position `index` in the
    /// list, for the message).
    ///
    /// # Safety
    ///
    /// As for [`BufferSpec::from_raw`].
    pub unsafe fn parse(
        position: usize,
        device: &str,
        device_index: i64,
        addr: u64,
        len: u64,
    ) -> Result<Self, BindError> {
        let place = match device {
            "cpu" => Place::Cpu,
            "cuda" => Place::Cuda(usize::try_from(device_index).map_err(|_| {
                BindError::buffer(
                    position,
                    format!("cuda device index {device_index} is negative"),
                )
            })?),
            other => {
                return Err(BindError::buffer(
                    position,
                    format!(
                        "device type {other:?} is not supported (expected \"cpu\" or \"cuda\")"
                    ),
                ));
            }
        };
        Self::checked(position, place, addr, len)
    }

    fn checked(position: usize, place: Place, addr: u64, len: u64) -> Result<Self, BindError> {
        let len = usize::try_from(len)
            .ok()
            .filter(|l| isize::try_from(*l).is_ok())
            .ok_or_else(|| BindError::buffer(position, format!("length {len} is too large")))?;
        if len > 0 && addr == 0 {
            return Err(BindError::buffer(
                position,
                format!("null address for a {len}-byte buffer"),
            ));
        }
        if addr.checked_add(len as u64).is_none() {
            return Err(BindError::buffer(
                position,
                format!("range {addr:#x} + {len} wraps around the address space"),
            ));
        }
        Ok(BufferSpec { place, addr, len })
    }
}

/// Size of the header transfer that precedes every object.
pub const HEADER_LEN: usize = 96;
const MAGIC: &[u8; 8] = b"RDMAKIT3";
/// Bit 63 of the count word: the buffers follow as one gathered transfer (a buffer count never
/// reaches it).
const GATHERED: u64 = 1 << 63;
const TAG_LEN: usize = 32;
const TAG_AT: usize = 32;
const TOKEN_AT: usize = TAG_AT + TAG_LEN;

/// What both ends must agree on before any byte of an object moves: an identifier (Ray's object
/// id), the number of buffers, their lengths and the object's token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// The object's token (redacted in `Debug`; compared in constant time).
    pub token: Token,
    /// Up to 32 bytes of the object's tag (longer tags are cut).
    pub tag: Vec<u8>,
    /// Number of buffers.
    pub count: u64,
    /// Sum of the lengths.
    pub total: u64,
    /// FNV-1a over the lengths in order (catches a reordering or a size change at equal totals).
    pub lengths_hash: u64,
    /// Whether the buffers follow as one transfer (the sender's are all in one place, see
    /// [`one_place`]) rather than one transfer each. The sender's choice: not compared.
    pub gathered: bool,
}

/// The place every non-empty buffer is in, if they share one (`None` for none or several): such
/// an object travels as one gathered transfer.
pub fn one_place(buffers: &[BufferSpec]) -> Option<Place> {
    let mut places = buffers.iter().filter(|b| !b.is_empty()).map(|b| b.place);
    let first = places.next()?;
    places.all(|p| p == first).then_some(first)
}

impl Header {
    /// The header for `tag`, `buffers` and the object's `token`.
    pub fn new(tag: &str, buffers: &[BufferSpec], token: &Token) -> Self {
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for b in buffers {
            for byte in (b.len as u64).to_le_bytes() {
                hash ^= u64::from(byte);
                hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
            }
        }
        let bytes = tag.as_bytes();
        Header {
            token: *token,
            tag: bytes[..bytes.len().min(TAG_LEN)].to_vec(),
            count: buffers.len() as u64,
            total: buffers.iter().map(|b| b.len as u64).sum(),
            lengths_hash: hash,
            gathered: one_place(buffers).is_some(),
        }
    }

    /// The wire form ([`HEADER_LEN`] bytes).
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut out = [0u8; HEADER_LEN];
        out[..8].copy_from_slice(MAGIC);
        let flags = if self.gathered { GATHERED } else { 0 };
        out[8..16].copy_from_slice(&(self.count | flags).to_le_bytes());
        out[16..24].copy_from_slice(&self.total.to_le_bytes());
        out[24..32].copy_from_slice(&self.lengths_hash.to_le_bytes());
        out[TAG_AT..TAG_AT + self.tag.len()].copy_from_slice(&self.tag);
        out[TOKEN_AT..].copy_from_slice(self.token.bytes());
        out
    }

    /// Parses the wire form.
    pub fn decode(b: &[u8]) -> Result<Self, BindError> {
        if b.len() != HEADER_LEN || &b[..8] != MAGIC {
            return Err(BindError::Mismatch(
                "the peer's first transfer is not an rdmakit object header (is it an rdmakit \
                 sender of the same version?)"
                    .into(),
            ));
        }
        let word = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(w)
        };
        let tag = &b[TAG_AT..TOKEN_AT];
        let end = tag.iter().rposition(|&c| c != 0).map_or(0, |p| p + 1);
        Ok(Header {
            token: Token::from_bytes(&b[TOKEN_AT..TOKEN_AT + TOKEN_LEN])?,
            tag: tag[..end].to_vec(),
            count: word(8) & !GATHERED,
            total: word(16),
            lengths_hash: word(24),
            gathered: word(8) & GATHERED != 0,
        })
    }

    /// Compares what arrived (`self`) with what this end expected; the error names the difference.
    pub fn check_against(&self, expected: &Header) -> Result<(), BindError> {
        let show = |t: &[u8]| String::from_utf8_lossy(t).into_owned();
        if self.tag != expected.tag {
            return Err(BindError::Mismatch(format!(
                "the sender sent object {:?} but this receiver expected {:?} (transfers between \
                 this actor pair ran in a different order on the two ends)",
                show(&self.tag),
                show(&expected.tag)
            )));
        }
        if self.count != expected.count || self.total != expected.total {
            return Err(BindError::Mismatch(format!(
                "object {:?}: the sender has {} buffers, {} bytes; the receiver expected {} \
                 buffers, {} bytes",
                show(&self.tag),
                self.count,
                self.total,
                expected.count,
                expected.total
            )));
        }
        if !ct_eq(self.token.bytes(), expected.token.bytes()) {
            return Err(BindError::Mismatch(format!(
                "object {:?}: the sender's object token is not the one this receiver was given \
                 (a different producer, or a stale sender)",
                show(&self.tag)
            )));
        }
        if self.lengths_hash != expected.lengths_hash {
            return Err(BindError::Mismatch(format!(
                "object {:?}: same count and total, but the buffer sizes differ",
                show(&self.tag)
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Token = Token::NONE;

    /// The descriptions made here are compared, never passed to a transfer: no memory is promised.
    fn parse(
        pos: usize,
        dev: &str,
        idx: i64,
        addr: u64,
        len: u64,
    ) -> Result<BufferSpec, BindError> {
        // SAFETY: the result is only compared; no send/recv reads or writes its range.
        unsafe { BufferSpec::parse(pos, dev, idx, addr, len) }
    }

    fn spec(len: usize) -> BufferSpec {
        BufferSpec {
            place: Place::Cpu,
            addr: 0x1000,
            len,
        }
    }

    #[test]
    fn parse_accepts_cpu_and_cuda() {
        assert_eq!(parse(0, "cpu", 0, 0x1000, 10).expect("valid"), spec(10));
        assert_eq!(
            parse(0, "cuda", 3, 0x1000, 10).expect("valid").place,
            Place::Cuda(3)
        );
        // An empty buffer may have a null address (torch.empty(0).data_ptr() == 0).
        assert_eq!(parse(0, "cpu", 0, 0, 0).expect("valid").len, 0);
    }

    #[test]
    fn parse_refuses_what_it_can_see_is_wrong() {
        let cases = [
            (
                parse(4, "mps", 0, 0x1000, 1),
                "buffer 4: device type \"mps\"",
            ),
            (parse(0, "cuda", -1, 0x1000, 1), "negative"),
            (parse(1, "cpu", 0, 0, 8), "buffer 1: null address"),
            (parse(0, "cpu", 0, u64::MAX - 2, 8), "wraps"),
            (parse(0, "cpu", 0, 0x1000, u64::MAX), "too large"),
        ];
        for (r, needle) in cases {
            let e = r.expect_err("must be refused").to_string();
            assert!(e.contains(needle), "{e:?} lacks {needle:?}");
        }
    }

    #[test]
    fn header_round_trips_and_names_each_difference() {
        let a = Header::new("obj-1", &[spec(1), spec(2)], &T);
        let wire = a.encode();
        let back = Header::decode(&wire).expect("decodes");
        assert_eq!(back, a);
        back.check_against(&a).expect("same object");

        let other = Header::new("obj-2", &[spec(1), spec(2)], &T);
        let e = back
            .check_against(&other)
            .expect_err("tag differs")
            .to_string();
        assert!(e.contains("\"obj-1\"") && e.contains("\"obj-2\""), "{e}");

        let e = back
            .check_against(&Header::new("obj-1", &[spec(3)], &T))
            .expect_err("count differs")
            .to_string();
        assert!(
            e.contains("2 buffers, 3 bytes") && e.contains("expected 1 buffers"),
            "{e}"
        );

        let e = back
            .check_against(&Header::new("obj-1", &[spec(2), spec(1)], &T))
            .expect_err("order differs")
            .to_string();
        assert!(e.contains("sizes differ"), "{e}");

        let e = Header::decode(&[0u8; HEADER_LEN])
            .expect_err("no magic")
            .to_string();
        assert!(e.contains("not an rdmakit object header"), "{e}");
    }

    #[test]
    fn a_different_token_is_refused_without_showing_either() {
        let other = Token::from_bytes(&[0x42; TOKEN_LEN]).expect("32 bytes");
        let a = Header::new("obj-1", &[spec(1)], &T);
        let b = Header::new("obj-1", &[spec(1)], &other);
        let e = Header::decode(&a.encode())
            .expect("decodes")
            .check_against(&b)
            .expect_err("token differs")
            .to_string();
        assert!(
            e.contains("token") && !e.contains("66") && !e.contains("42"),
            "{e}"
        );
        assert!(!format!("{a:?}").contains("0x42"));
    }

    #[test]
    fn long_tags_are_cut_to_fit() {
        let long = "x".repeat(100);
        let h = Header::new(&long, &[], &T);
        assert_eq!(h.tag.len(), 32);
        assert_eq!(Header::decode(&h.encode()).expect("decodes"), h);
    }

    #[test]
    fn one_place_gathers_and_the_flag_round_trips_without_being_compared() {
        let cuda = |n: usize, len: u64| parse(0, "cuda", n as i64, 0x1000, len).expect("valid");
        let empty_cpu = parse(0, "cpu", 0, 0, 0).expect("valid");
        // Empty buffers have no place that matters; two GPUs are two places.
        assert_eq!(
            one_place(&[cuda(0, 8), empty_cpu, cuda(0, 4)]),
            Some(Place::Cuda(0))
        );
        assert_eq!(one_place(&[cuda(0, 8), cuda(1, 4)]), None);
        assert_eq!(one_place(&[spec(1), cuda(0, 4)]), None);
        assert_eq!(one_place(&[empty_cpu]), None);

        let mixed = Header::new("obj-1", &[spec(8), cuda(0, 4)], &T);
        assert!(!mixed.gathered);
        let one = Header::new("obj-1", &[cuda(0, 8), cuda(0, 4)], &T);
        assert!(one.gathered);
        let back = Header::decode(&one.encode()).expect("decodes");
        assert_eq!((back.gathered, back.count), (true, 2));
        // The receiver's own layout does not decide how the sender sends.
        back.check_against(&mixed)
            .expect("same count, sizes and token");
    }
}
