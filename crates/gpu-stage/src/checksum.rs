//! Test data and a fast order-sensitive checksum, so every benchmark run verifies what arrived.

/// Fills `buf` with a deterministic pseudo-random pattern derived from `seed` (xorshift64*).
/// Both ends of a two-process benchmark regenerate the same bytes from the same seed.
pub fn fill_pattern(buf: &mut [u8], seed: u64) {
    let mut x = seed ^ 0x9E37_79B9_7F4A_7C15;
    if x == 0 {
        x = 1;
    }
    let mut next = || {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    };
    let mut words = buf.chunks_exact_mut(8);
    for w in &mut words {
        w.copy_from_slice(&next().to_le_bytes());
    }
    let tail = words.into_remainder();
    let last = next().to_le_bytes();
    let n = tail.len();
    tail.copy_from_slice(&last[..n]);
}

/// A pattern of `len` bytes (see [`fill_pattern`]).
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; len];
    fill_pattern(&mut v, seed);
    v
}

/// Fletcher-style checksum over little-endian 64-bit words: position-sensitive (a swapped or
/// shifted chunk changes it), runs near memory speed, and includes the length.
pub fn checksum(data: &[u8]) -> u64 {
    let mut a: u64 = 0x243F_6A88_85A3_08D3;
    let mut b: u64 = 0;
    let mut words = data.chunks_exact(8);
    for w in &mut words {
        let mut arr = [0u8; 8];
        arr.copy_from_slice(w);
        a = a.wrapping_add(u64::from_le_bytes(arr));
        b = b.wrapping_add(a);
    }
    let rem = words.remainder();
    if !rem.is_empty() {
        let mut arr = [0u8; 8];
        arr[..rem.len()].copy_from_slice(rem);
        a = a.wrapping_add(u64::from_le_bytes(arr));
        b = b.wrapping_add(a);
    }
    b ^ a.rotate_left(29) ^ (data.len() as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// Digest of one chunk of a transfer at `offset`, for per-transfer checksums (the TCP transport's
/// [`TcpOptions::checksum`](crate::transport::tcp::TcpOptions::checksum)): chunk digests are
/// combined with `wrapping_add`, in any order (each connection sums its own in parallel), and the
/// offset is mixed in so that the same bytes delivered at another place count differently. Not a
/// MAC: it detects corruption, and anyone can compute it.
pub fn chunk_digest(offset: u64, data: &[u8]) -> u64 {
    mix(checksum(data) ^ mix(offset ^ 0xD6E8_FEB8_6659_FD93))
}

/// splitmix64's finaliser: every input bit affects every output bit.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_and_checksum_match_values_computed_elsewhere() {
        // Both ends of a two-process run regenerate the data from the seed, possibly from different
        // builds: the bytes and the checksum are fixed values (computed by an independent
        // implementation of the documented xorshift64* and Fletcher-style sums), not just equal to
        // themselves within one process.
        assert_eq!(
            pattern(12, 7),
            [
                0xb4, 0x02, 0xfb, 0xa2, 0xed, 0xa8, 0xb7, 0x65, 0xa1, 0x2f, 0x45, 0x24
            ]
        );
        assert_eq!(checksum(&pattern(1001, 7)), 0xfde2_39e5_6682_f87f);
        assert_eq!(checksum(&[]), 0x10b4_611a_6487_ed51);
        assert_eq!(checksum(&[1, 2, 3]), 0xee2d_c6fe_7cfe_93ba);
    }

    #[test]
    fn chunk_digests_depend_on_bytes_and_place() {
        let data = pattern(4096, 9);
        let d = chunk_digest(0, &data);
        assert_ne!(chunk_digest(4096, &data), d, "same bytes at another offset");
        let mut flipped = data.clone();
        flipped[100] ^= 0x10;
        assert_ne!(chunk_digest(0, &flipped), d);
        // Two chunks swapped between their places change the sum.
        let (a, b) = (pattern(64, 1), pattern(64, 2));
        let right = chunk_digest(0, &a).wrapping_add(chunk_digest(64, &b));
        let swapped = chunk_digest(0, &b).wrapping_add(chunk_digest(64, &a));
        assert_ne!(right, swapped);
    }

    #[test]
    fn pattern_is_seed_dependent() {
        assert_ne!(pattern(1001, 7), pattern(1001, 8));
        // A prefix of a longer pattern equals the shorter pattern (except the partial last word).
        assert_eq!(pattern(1000, 3)[..992], pattern(2000, 3)[..992]);
    }

    #[test]
    fn checksum_detects_swaps_truncation_and_flips() {
        let data = pattern(64 * 1024 + 5, 1);
        let c = checksum(&data);
        let mut swapped = data.clone();
        let (x, y) = swapped.split_at_mut(32 * 1024);
        x[..8192].swap_with_slice(&mut y[..8192]);
        assert_ne!(checksum(&swapped), c);
        assert_ne!(checksum(&data[..data.len() - 1]), c);
        let mut flipped = data.clone();
        flipped[12345] ^= 1;
        assert_ne!(checksum(&flipped), c);
        assert_ne!(checksum(&[0u8; 3]), checksum(&[0u8; 4]));
    }
}
