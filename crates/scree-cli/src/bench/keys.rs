//! Keys, values and randomness shared by every workload.
//!
//! Key `i` is the big-endian `u64` `2·i` in its first 8 bytes, padded with `'0'` up to
//! `--key-size` (db_bench pads the same way). Odd numbers are never written, so key `2·i+1` is
//! a *missing* key that sorts between two present ones — readmissing probes the filters, not the
//! ends of the key range.
//!
//! With `--key-groups G` (semi-sorted keys, SlimDB §5.4) key `i` is an 8-byte prefix naming its
//! group `i / G` and an 8-byte suffix `2·(i % G)`, both big-endian, then the padding: the `G`
//! keys of a group share their prefix, and fills write whole groups. The missing key of `i`
//! keeps the prefix and takes the odd suffix `2·(i % G) + 1`, so it falls inside an existing
//! group (and still sorts right after key `i`). A value starts with its key index (little-endian, when the value has
//! room for 8 bytes) so that reads can check they got the value of the key they asked for; the
//! rest is taken from a buffer of random bytes (incompressible, like db_bench's generator).

/// A small, fast, seedable PRNG (xoshiro256++ seeded through SplitMix64). Our own so that a
/// `--seed` gives the same keys on every build, whatever the `rand` crate version.
#[derive(Clone, Debug)]
pub struct Rng {
    s: [u64; 4],
}

/// SplitMix64's finalizer: a bijective 64-bit mixer.
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Rng {
    /// A generator for `seed`; `stream` separates threads and phases.
    pub fn new(seed: u64, stream: u64) -> Rng {
        let mut x = seed ^ mix64(stream.wrapping_add(0x9e37_79b9_7f4a_7c15));
        let mut next = || {
            x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
            mix64(x)
        };
        Rng {
            s: [next(), next(), next(), next()],
        }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.s;
        let result = s[0].wrapping_add(s[3]).rotate_left(23).wrapping_add(s[0]);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// Uniform in `[0, n)` (`n > 0`), by Lemire's multiply-shift (bias below 2⁻⁶⁴·n).
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    /// Uniform in `[0, 1)`.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// A keyed pseudo-random permutation of `[0, n)`: a balanced Feistel network over the smallest
/// even number of bits covering `n`, with cycle walking. fillrandom writes `permute(0..n)`, so
/// every key is written exactly once, in random order, with no memory for a shuffled array, and
/// threads can split the index range.
#[derive(Clone, Debug)]
pub struct Permutation {
    n: u64,
    half_bits: u32,
    keys: [u64; 4],
}

impl Permutation {
    /// The permutation of `[0, n)` chosen by `seed`.
    pub fn new(n: u64, seed: u64) -> Permutation {
        let bits = 64 - n.saturating_sub(1).leading_zeros();
        let half_bits = bits.div_ceil(2).max(1);
        let mut rng = Rng::new(seed, 0x0fe1_57e1);
        Permutation {
            n,
            half_bits,
            keys: [
                rng.next_u64(),
                rng.next_u64(),
                rng.next_u64(),
                rng.next_u64(),
            ],
        }
    }

    fn round(&self, x: u64) -> u64 {
        let mask = (1u64 << self.half_bits) - 1;
        let (mut l, mut r) = (x >> self.half_bits, x & mask);
        for k in self.keys {
            let f = mix64(r ^ k) & mask;
            (l, r) = (r, l ^ f);
        }
        (l << self.half_bits) | r
    }

    /// The image of `i` (`i < n`).
    pub fn get(&self, i: u64) -> u64 {
        debug_assert!(i < self.n);
        let mut x = self.round(i);
        while x >= self.n {
            x = self.round(x);
        }
        x
    }
}

/// Builds keys and values of the configured sizes.
#[derive(Clone, Debug)]
pub struct KeyCodec {
    /// Bytes per key (≥ 8; ≥ [`GROUPED_KEY_BYTES`] with groups).
    pub key_size: usize,
    /// Bytes per value.
    pub value_size: usize,
    /// Keys per prefix group (`--key-groups`); 0: plain keys, no groups.
    pub groups: u64,
    random: std::sync::Arc<Vec<u8>>,
}

/// Bytes of a group's prefix in semi-sorted keys.
pub const GROUP_PREFIX_BYTES: usize = 8;
/// Smallest key of the semi-sorted generator: the prefix and an 8-byte suffix.
pub const GROUPED_KEY_BYTES: usize = GROUP_PREFIX_BYTES + 8;

/// Why a key codec cannot be built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CodecError {
    /// The key cannot hold the key index.
    KeyTooShort { key_size: usize, needed: usize },
}

impl std::fmt::Display for CodecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CodecError::KeyTooShort { key_size, needed } if *needed == GROUPED_KEY_BYTES => {
                write!(
                    f,
                    "--key-size {key_size} is too small for --key-groups: a semi-sorted key is \
                     an 8-byte group prefix and an 8-byte suffix, so --key-size must be at least \
                     {needed}"
                )
            }
            CodecError::KeyTooShort { key_size, needed } => write!(
                f,
                "--key-size {key_size} is too small: it must be at least {needed} (the key \
                 index takes 8 bytes)"
            ),
        }
    }
}

impl std::error::Error for CodecError {}

/// Where the next value's random bytes start (see [`KeyCodec::value`]).
#[derive(Clone, Debug)]
pub struct ValueCursor {
    pos: usize,
}

impl KeyCodec {
    /// A codec; `seed` fills the random value buffer.
    pub fn new(key_size: usize, value_size: usize, seed: u64) -> KeyCodec {
        let len = (1 << 20).max(value_size * 4);
        let mut rng = Rng::new(seed, 0x7a1e);
        let mut random = Vec::with_capacity(len + 8);
        while random.len() < len {
            random.extend_from_slice(&rng.next_u64().to_le_bytes());
        }
        KeyCodec {
            key_size,
            value_size,
            groups: 0,
            random: std::sync::Arc::new(random),
        }
    }

    /// A codec of semi-sorted keys in groups of `groups` (0: plain keys), checking that the
    /// keys are long enough for the mode.
    pub fn with_groups(
        key_size: usize,
        value_size: usize,
        seed: u64,
        groups: u64,
    ) -> Result<KeyCodec, CodecError> {
        let needed = if groups > 0 { GROUPED_KEY_BYTES } else { 8 };
        if key_size < needed {
            return Err(CodecError::KeyTooShort { key_size, needed });
        }
        let mut c = KeyCodec::new(key_size, value_size, seed);
        c.groups = groups;
        Ok(c)
    }

    /// Index range `[first, end)` of group `g`'s keys (without groups: empty).
    pub fn group_range(&self, g: u64) -> (u64, u64) {
        let first = g.saturating_mul(self.groups);
        (first, first.saturating_add(self.groups))
    }

    /// The prefix every key of group `g` starts with.
    pub fn group_prefix(&self, g: u64) -> [u8; GROUP_PREFIX_BYTES] {
        g.to_be_bytes()
    }

    /// The key of `i` with the low "missing" bit `odd` of its number.
    fn fill_key(&self, i: u64, odd: bool, out: &mut Vec<u8>) {
        out.clear();
        match (i.checked_div(self.groups), i.checked_rem(self.groups)) {
            (Some(g), Some(r)) => {
                out.extend_from_slice(&g.to_be_bytes());
                out.extend_from_slice(&(r.wrapping_mul(2) | odd as u64).to_be_bytes());
            }
            _ => out.extend_from_slice(&(i.wrapping_mul(2) | odd as u64).to_be_bytes()),
        }
        out.resize(self.key_size, b'0');
    }

    /// The key of present index `i`.
    pub fn key(&self, i: u64, out: &mut Vec<u8>) {
        self.fill_key(i, false, out)
    }

    /// A key that is never written: it sorts right after key `i` (and, with groups, shares
    /// its group's prefix).
    pub fn missing_key(&self, i: u64, out: &mut Vec<u8>) {
        self.fill_key(i, true, out)
    }

    /// The index of a key built by [`KeyCodec::key`], `None` for anything else.
    pub fn index_of(&self, key: &[u8]) -> Option<u64> {
        if key.len() != self.key_size {
            return None;
        }
        let word = |at: usize| -> Option<u64> {
            let b: [u8; 8] = key.get(at..at + 8)?.try_into().ok()?;
            Some(u64::from_be_bytes(b))
        };
        let raw = word(if self.groups > 0 {
            GROUP_PREFIX_BYTES
        } else {
            0
        })?;
        if !raw.is_multiple_of(2) {
            return None;
        }
        if self.groups == 0 {
            return Some(raw / 2);
        }
        let r = raw / 2;
        if r >= self.groups {
            return None;
        }
        word(0)?.checked_mul(self.groups)?.checked_add(r)
    }

    /// A cursor into the random byte buffer for one worker, starting where `rng` says (so
    /// threads take different bytes).
    pub fn value_cursor(&self, rng: &mut Rng) -> ValueCursor {
        ValueCursor {
            pos: rng.below((self.random.len() - self.value_size) as u64) as usize,
        }
    }

    /// A value for index `i`: the index, then the next `value_size` bytes at `cursor`, which
    /// walks the random buffer sequentially and wraps (db_bench's `RandomGenerator` does the
    /// same). A random start per value would cost the writer a cache miss per put (measured:
    /// 13 % of the writer thread of a `trie` fill), which is the harness's time, not the
    /// engine's.
    pub fn value(&self, i: u64, cursor: &mut ValueCursor, out: &mut Vec<u8>) {
        out.clear();
        if cursor.pos + self.value_size > self.random.len() {
            cursor.pos = 0;
        }
        let start = cursor.pos;
        cursor.pos += self.value_size;
        out.extend_from_slice(
            self.random
                .get(start..start + self.value_size)
                .unwrap_or(&[]),
        );
        if let Some(head) = out.get_mut(..8) {
            head.copy_from_slice(&i.to_le_bytes());
        }
    }

    /// Whether `value` is a value this codec wrote for index `i`.
    pub fn value_matches(&self, i: u64, value: &[u8]) -> bool {
        value.len() == self.value_size
            && value
                .get(..8)
                .is_none_or(|head| head == i.to_le_bytes().as_slice())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn permutation_is_a_bijection_for_awkward_sizes() {
        for n in [1u64, 2, 3, 7, 1000, 4097, 65_537] {
            let p = Permutation::new(n, 42);
            let seen: HashSet<u64> = (0..n).map(|i| p.get(i)).collect();
            assert_eq!(seen.len() as u64, n, "n={n}");
            assert!(seen.iter().all(|&x| x < n));
        }
    }

    #[test]
    fn fillrandom_keys_are_unique_and_seeded() {
        let codec = KeyCodec::new(16, 100, 1);
        let n = 200_000;
        let p = Permutation::new(n, 7);
        let mut keys = HashSet::new();
        let mut k = Vec::new();
        for i in 0..n {
            codec.key(p.get(i), &mut k);
            assert_eq!(k.len(), 16);
            assert!(keys.insert(k.clone()));
        }
        // Same seed, same order; another seed, another order.
        let q = Permutation::new(n, 7);
        assert!((0..1000).all(|i| p.get(i) == q.get(i)));
        let r = Permutation::new(n, 8);
        assert!((0..1000).filter(|&i| p.get(i) == r.get(i)).count() < 10);
        // Random order: not the identity, and roughly half of the steps go down.
        let downs = (1..n).filter(|&i| p.get(i) < p.get(i - 1)).count() as f64;
        assert!((downs / n as f64 - 0.5).abs() < 0.02, "downs={downs}");
    }

    #[test]
    fn missing_keys_interleave_and_decode() {
        let codec = KeyCodec::new(16, 100, 1);
        let (mut a, mut m, mut b) = (Vec::new(), Vec::new(), Vec::new());
        codec.key(5, &mut a);
        codec.missing_key(5, &mut m);
        codec.key(6, &mut b);
        assert!(a < m && m < b);
        assert_eq!(codec.index_of(&a), Some(5));
        assert_eq!(codec.index_of(&m), None);
        let mut v = Vec::new();
        let mut cursor = codec.value_cursor(&mut Rng::new(1, 2));
        codec.value(5, &mut cursor, &mut v);
        assert_eq!(v.len(), 100);
        assert!(codec.value_matches(5, &v));
        assert!(!codec.value_matches(6, &v));
        // Consecutive values take different bytes, and the cursor wraps inside the buffer.
        let mut w = Vec::new();
        codec.value(5, &mut cursor, &mut w);
        assert_eq!(w.len(), 100);
        assert_ne!(v.get(8..), w.get(8..));
        for _ in 0..100_000 {
            codec.value(7, &mut cursor, &mut w);
            assert_eq!(w.len(), 100);
        }
    }

    #[test]
    fn grouped_keys_round_trip_and_share_their_group_prefix() {
        for g in [1u64, 3, 128] {
            let codec = KeyCodec::with_groups(24, 100, 1, g).expect("codec");
            let (mut k, mut m, mut next) = (Vec::new(), Vec::new(), Vec::new());
            let mut keys = HashSet::new();
            let n = 5 * g + 7;
            for i in 0..n {
                codec.key(i, &mut k);
                codec.missing_key(i, &mut m);
                assert_eq!((k.len(), m.len()), (24, 24));
                assert_eq!(codec.index_of(&k), Some(i), "g={g} i={i}");
                assert_eq!(codec.index_of(&m), None, "g={g} i={i}");
                assert!(keys.insert(k.clone()) && keys.insert(m.clone()));
                // Group membership: the prefix names i / g, for present and missing keys.
                let group = i / g;
                let (lo, hi) = codec.group_range(group);
                assert!((lo..hi).contains(&i));
                let prefix = codec.group_prefix(group);
                assert!(k.starts_with(&prefix) && m.starts_with(&prefix));
                assert_eq!(k.get(..8), m.get(..8));
                // Order: key i < missing i < key i+1 (readmissing probes between keys).
                codec.key(i + 1, &mut next);
                assert!(k < m && m < next, "g={g} i={i}");
            }
            // Exactly g keys carry each prefix.
            let prefix = codec.group_prefix(2);
            let members = (0..n)
                .filter(|&i| {
                    codec.key(i, &mut k);
                    k.starts_with(&prefix)
                })
                .count();
            assert_eq!(members as u64, g);
        }
    }

    #[test]
    fn grouped_index_of_refuses_foreign_keys() {
        let codec = KeyCodec::with_groups(16, 100, 1, 128).expect("codec");
        let mut k = Vec::new();
        codec.key(1000, &mut k);
        // A suffix past the group size is no key of ours.
        let mut bad = k.clone();
        bad[8..16].copy_from_slice(&(2 * 128u64).to_be_bytes());
        assert_eq!(codec.index_of(&bad), None);
        // Wrong length.
        assert_eq!(codec.index_of(&k[..15]), None);
        // A group number whose first index overflows u64.
        let mut huge = k.clone();
        huge[..8].copy_from_slice(&u64::MAX.to_be_bytes());
        assert_eq!(codec.index_of(&huge), None);
        // The plain codec reads the same bytes differently.
        let plain = KeyCodec::new(16, 100, 1);
        assert_ne!(plain.index_of(&k), Some(1000));
    }

    #[test]
    fn grouped_keys_need_sixteen_bytes() {
        let e = KeyCodec::with_groups(15, 100, 1, 128).expect_err("too short");
        assert_eq!(
            e,
            CodecError::KeyTooShort {
                key_size: 15,
                needed: 16
            }
        );
        assert!(e.to_string().contains("--key-groups"), "{e}");
        assert!(KeyCodec::with_groups(16, 100, 1, 128).is_ok());
        assert!(KeyCodec::with_groups(8, 100, 1, 0).is_ok());
        assert!(KeyCodec::with_groups(7, 100, 1, 0).is_err());
        // Without groups the key is the plain one.
        let (a, b) = (
            KeyCodec::with_groups(16, 100, 1, 0).expect("codec"),
            KeyCodec::new(16, 100, 1),
        );
        let (mut x, mut y) = (Vec::new(), Vec::new());
        a.key(77, &mut x);
        b.key(77, &mut y);
        assert_eq!(x, y);
        assert_eq!(a.group_range(5), (0, 0));
    }

    #[test]
    fn rng_below_is_uniform_enough() {
        let mut r = Rng::new(3, 0);
        let mut buckets = [0u32; 10];
        for _ in 0..100_000 {
            buckets[r.below(10) as usize] += 1;
        }
        assert!(buckets.iter().all(|&b| (9_000..11_000).contains(&b)));
    }
}
