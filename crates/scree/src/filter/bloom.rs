//! Bloom filters over 64-bit key hashes, in two encodings told apart by their last byte:
//!
//! - **standard** (`bits[ceil(m/8)] | k: u8`, k ≤ 30): double hashing (Kirsch–Mitzenmacher)
//!   over the whole bit array. Used where filters are small (HTable buckets, BloomClusters).
//! - **cache-local** (`blocks[n × 64] | 0x80 | k`): the key's upper hash bits pick one 64-byte
//!   block and all `k` probes fall inside it, so a probe costs one cache miss instead of `k`.
//!   Used for the whole-table filters of sorted tables, which are large (megabytes) and probed
//!   on every level of every get.
//!
//! The number of probes `k` is stored so readers do not depend on the writer's bits-per-key.

use xxhash_rust::xxh3::xxh3_64;

/// The hash a Bloom filter is built from.
pub fn bloom_hash(key: &[u8]) -> u64 {
    xxh3_64(key)
}

/// Builds a filter.
#[derive(Debug, Default)]
pub struct BloomBuilder {
    hashes: Vec<u64>,
}

impl BloomBuilder {
    /// An empty builder.
    pub fn new() -> Self {
        Self::default()
    }
    /// Adds a key's hash (see [`bloom_hash`]).
    pub fn add_hash(&mut self, h: u64) {
        self.hashes.push(h);
    }
    /// Number of keys added.
    pub fn len(&self) -> usize {
        self.hashes.len()
    }
    /// Whether no key was added.
    pub fn is_empty(&self) -> bool {
        self.hashes.is_empty()
    }
    /// Encodes the filter with `bits_per_key` bits per key.
    pub fn finish(&self, bits_per_key: u32) -> Vec<u8> {
        encode(&self.hashes, bits_per_key)
    }
    /// Forgets all keys.
    pub fn clear(&mut self) {
        self.hashes.clear();
    }
}

/// Encodes a filter for `hashes` with `bits_per_key` bits per key.
pub fn encode(hashes: &[u64], bits_per_key: u32) -> Vec<u8> {
    let mut out = Vec::new();
    encode_into(&mut out, hashes, bits_per_key);
    out
}

/// [`encode`] appending the filter to `buf` (a table's filters packed in one buffer).
pub fn encode_into(buf: &mut Vec<u8>, hashes: &[u64], bits_per_key: u32) {
    let k = ((f64::from(bits_per_key) * 0.69) as u32).clamp(1, 30) as u8;
    let bits = (hashes.len() * bits_per_key as usize).max(64);
    let bytes = bits.div_ceil(8);
    let bits = bytes * 8;
    let start = buf.len();
    buf.resize(start + bytes + 1, 0);
    let Some(out) = buf.get_mut(start..) else {
        return;
    };
    for &h in hashes {
        let mut a = h as u32;
        let delta = (h >> 32) as u32 | 1;
        for _ in 0..k {
            let pos = a as usize % bits;
            if let Some(b) = out.get_mut(pos / 8) {
                *b |= 1 << (pos % 8);
            }
            a = a.wrapping_add(delta);
        }
    }
    if let Some(last) = out.last_mut() {
        *last = k;
    }
}

/// Bits of one cache-local block.
const BLOCK_BITS: u32 = 512;
/// Marker bit of the cache-local encoding in the last byte.
const LOCAL: u8 = 0x80;
/// Multiplier that re-mixes the probe hash between probes (golden ratio, as in RocksDB's
/// cache-local Bloom filter).
const REMIX: u32 = 0x9E37_79B9;

/// Block of a cache-local filter with `blocks` blocks that hash `h` maps to (multiply-shift of
/// the upper 32 bits: no modulo, no bias worth counting).
fn local_block(h: u64, blocks: usize) -> usize {
    (((h >> 32) * blocks as u64) >> 32) as usize
}

/// Encodes a cache-local filter for `hashes` with about `bits_per_key` bits per key.
/// Bytes [`encode_local`] writes for `keys` keys.
pub fn encoded_local_len(keys: u64, bits_per_key: u32) -> u64 {
    let bits = (keys * u64::from(bits_per_key)).max(u64::from(BLOCK_BITS));
    bits.div_ceil(u64::from(BLOCK_BITS)) * 64 + 1
}

pub fn encode_local(hashes: &[u64], bits_per_key: u32) -> Vec<u8> {
    let k = ((f64::from(bits_per_key) * 0.69).round() as u32).clamp(1, 24) as u8;
    let bits = (hashes.len() as u64 * u64::from(bits_per_key)).max(u64::from(BLOCK_BITS));
    let blocks = bits.div_ceil(u64::from(BLOCK_BITS)) as usize;
    let mut out = vec![0u8; blocks * 64 + 1];
    for &h in hashes {
        let base = local_block(h, blocks) * 64;
        let mut a = h as u32;
        for _ in 0..k {
            let bit = (a >> 23) as usize;
            if let Some(b) = out.get_mut(base + bit / 8) {
                *b |= 1 << (bit % 8);
            }
            a = a.wrapping_mul(REMIX);
        }
    }
    if let Some(last) = out.last_mut() {
        *last = LOCAL | k;
    }
    out
}

/// Loads the cache line that [`may_contain_parts`] reads first (the block of a cache-local
/// filter), so that several filters' misses can overlap; does nothing for a standard filter.
fn touch_parts(trailer: u8, bitmap: &[u8], h: u64) {
    if trailer & LOCAL != 0 && bitmap.len() >= 64 {
        let i = local_block(h, bitmap.len() / 64) * 64;
        std::hint::black_box(bitmap.get(i).copied());
    }
}

/// One 64-byte block of a cache-local filter, aligned to 64 bytes so that a block is exactly one
/// cache line (a block at a 64-byte offset of a heap buffer with malloc's 16-byte alignment
/// straddles two lines three times out of four, and a probe then misses twice).
#[derive(Debug, Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

/// A filter held in memory whose trailing byte (encoding and probe count) was read once, when
/// it was loaded. A probe then reads only the bitmap's cache line. Reading the trailer on every
/// probe cost a second cache miss per table, since the trailer sits at the far end of a filter
/// of kilobytes to megabytes. A cache-local filter's blocks are copied onto cache lines of their
/// own ([`Line`]) when it is loaded.
#[derive(Debug, Clone, Default)]
pub struct LoadedFilter {
    /// The encoded filter, except a well-formed cache-local filter's blocks (then empty).
    bytes: Vec<u8>,
    /// A well-formed cache-local filter's blocks (else empty).
    lines: Vec<Line>,
    trailer: Option<u8>,
}

impl AsRef<LoadedFilter> for LoadedFilter {
    fn as_ref(&self) -> &LoadedFilter {
        self
    }
}

impl LoadedFilter {
    /// Holds an encoded filter (either encoding; empty = no filter, which admits every key).
    pub fn new(bytes: Vec<u8>) -> LoadedFilter {
        let trailer = bytes.last().copied();
        if let Some(t) = trailer.filter(|t| t & LOCAL != 0) {
            let bitmap = bytes.get(..bytes.len() - 1).unwrap_or_default();
            let k = t & !LOCAL;
            if !bitmap.is_empty() && bitmap.len().is_multiple_of(64) && (1..=24).contains(&k) {
                let lines = bitmap
                    .chunks_exact(64)
                    .map(|c| Line(c.try_into().unwrap_or([0xff; 64])))
                    .collect();
                return LoadedFilter {
                    bytes: Vec::new(),
                    lines,
                    trailer,
                };
            }
        }
        LoadedFilter {
            bytes,
            lines: Vec::new(),
            trailer,
        }
    }
    /// Heap bytes held.
    pub fn memory_bytes(&self) -> usize {
        self.bytes.capacity() + self.lines.capacity() * std::mem::size_of::<Line>()
    }
    /// The bitmap without the trailing byte (computing it reads no filter memory).
    fn bitmap(&self) -> &[u8] {
        self.bytes
            .get(..self.bytes.len().saturating_sub(1))
            .unwrap_or_default()
    }
    /// The cache-local block `h` maps to, when the filter is held as lines.
    fn line(&self, h: u64) -> Option<&Line> {
        self.lines.get(local_block(h, self.lines.len()))
    }
    /// Whether the filter may contain the key with hash `h` ([`may_contain`]); an empty filter
    /// admits every key.
    pub fn may_contain(&self, h: u64) -> bool {
        match self.trailer {
            None => true,
            Some(t) if !self.lines.is_empty() => self
                .line(h)
                .is_none_or(|l| block_may_contain(&l.0, t & !LOCAL, h)),
            Some(t) => may_contain_parts(t, self.bitmap(), h),
        }
    }
    /// Loads the cache line `may_contain(h)` will read, without waiting for it.
    pub fn touch(&self, h: u64) {
        if let Some(l) = self.line(h) {
            std::hint::black_box(l.0.first().copied());
        } else if let Some(t) = self.trailer {
            touch_parts(t, self.bitmap(), h);
        }
    }
}

fn local_may_contain(blocks: &[u8], k: u8, h: u64) -> bool {
    let n = blocks.len() / 64;
    if n == 0 || !blocks.len().is_multiple_of(64) || k == 0 || k > 24 {
        return true;
    }
    let Some(block) = blocks
        .get(local_block(h, n) * 64..)
        .and_then(|b| b.get(..64))
    else {
        return true;
    };
    block_may_contain(block, k, h)
}

/// The `k` probes of a cache-local filter inside the 64-byte `block` that `h` maps to.
#[inline]
fn block_may_contain(block: &[u8], k: u8, h: u64) -> bool {
    let mut a = h as u32;
    for _ in 0..k {
        let bit = (a >> 23) as usize;
        match block.get(bit / 8) {
            Some(b) if b & (1 << (bit % 8)) != 0 => {}
            _ => return false,
        }
        a = a.wrapping_mul(REMIX);
    }
    true
}

/// Whether `filter` (either encoding) may contain the key with hash `h`. A malformed filter
/// answers `true` (never a false negative).
pub fn may_contain(filter: &[u8], h: u64) -> bool {
    match filter.split_last() {
        Some((&trailer, bitmap)) => may_contain_parts(trailer, bitmap, h),
        None => true,
    }
}

/// [`may_contain`] of a filter split into its trailing byte `k` and its bitmap.
fn may_contain_parts(k: u8, bitmap: &[u8], h: u64) -> bool {
    if k & LOCAL != 0 {
        return local_may_contain(bitmap, k & !LOCAL, h);
    }
    if bitmap.is_empty() || k == 0 || k > 30 {
        return true;
    }
    let bits = bitmap.len() * 8;
    let mut a = h as u32;
    let delta = (h >> 32) as u32 | 1;
    for _ in 0..k {
        let pos = a as usize % bits;
        match bitmap.get(pos / 8) {
            Some(b) if b & (1 << (pos % 8)) != 0 => {}
            _ => return false,
        }
        a = a.wrapping_add(delta);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loaded_filter_answers_as_the_encoded_bytes_do() {
        let keys: Vec<u64> = (0..5_000u64)
            .map(|i| bloom_hash(&i.to_le_bytes()))
            .collect();
        let local = encode_local(&keys, 10);
        // Malformed cache-local filters (admit every key): a bitmap that is not whole blocks,
        // zero probes, too many probes.
        let mut ragged = local.clone();
        ragged.insert(0, 0);
        let mut no_probes = local.clone();
        if let Some(t) = no_probes.last_mut() {
            *t = LOCAL;
        }
        let mut many_probes = local.clone();
        if let Some(t) = many_probes.last_mut() {
            *t = LOCAL | 25;
        }
        for bytes in [
            encode(&keys, 10),
            local.clone(),
            ragged,
            no_probes,
            many_probes,
            vec![LOCAL | 7],
            Vec::new(),
            vec![7u8],
        ] {
            let loaded = LoadedFilter::new(bytes.clone());
            // Blocks held as lines start on a cache line.
            assert_eq!(loaded.lines.as_ptr() as usize % 64, 0);
            for i in 0..20_000u64 {
                let h = bloom_hash(&i.to_le_bytes());
                loaded.touch(h);
                assert_eq!(
                    loaded.may_contain(h),
                    bytes.is_empty() || may_contain(&bytes, h)
                );
            }
        }
        // Members are found; an empty filter admits everything.
        let loaded = LoadedFilter::new(encode_local(&keys, 10));
        assert!(
            !loaded.lines.is_empty(),
            "a well-formed local filter is held as lines"
        );
        assert!(keys.iter().all(|&h| loaded.may_contain(h)));
        assert!(LoadedFilter::new(Vec::new()).may_contain(42));
    }

    #[test]
    fn no_false_negatives_and_low_false_positives() {
        let keys: Vec<u64> = (0..10_000u64)
            .map(|i| bloom_hash(&i.to_le_bytes()))
            .collect();
        let f = encode(&keys, 10);
        assert!(keys.iter().all(|&h| may_contain(&f, h)));
        let fp = (10_000..110_000u64)
            .filter(|i| may_contain(&f, bloom_hash(&i.to_le_bytes())))
            .count();
        let rate = fp as f64 / 100_000.0;
        assert!(rate < 0.02, "false positive rate {rate}");
    }

    #[test]
    fn cache_local_no_false_negatives_and_low_false_positives() {
        for n in [0u64, 1, 10, 1_000, 100_000] {
            let keys: Vec<u64> = (0..n).map(|i| bloom_hash(&i.to_le_bytes())).collect();
            let f = encode_local(&keys, 10);
            assert_eq!((f.len() - 1) % 64, 0);
            assert!(keys.iter().all(|&h| may_contain(&f, h)), "{n} keys");
            if n >= 1_000 {
                let probes = 200_000u64;
                let fp = (n..n + probes)
                    .filter(|i| may_contain(&f, bloom_hash(&i.to_le_bytes())))
                    .count();
                let rate = fp as f64 / probes as f64;
                // Theory for 10 bits/key in 512-bit blocks, k = 7: about 1 %.
                assert!(rate < 0.015, "{n} keys: false positive rate {rate}");
            }
        }
    }

    #[test]
    fn malformed_cache_local_filter_never_denies() {
        // A block count that is not whole, a zero or oversized k.
        assert!(may_contain(&[0u8; 10], 7));
        let mut f = vec![0u8; 64];
        f.push(LOCAL);
        assert!(may_contain(&f, 7));
        f.pop();
        f.push(LOCAL | 25);
        assert!(may_contain(&f, 7));
        f.pop();
        f.push(LOCAL | 7);
        assert!(!may_contain(&f, 7), "an empty block denies");
    }

    #[test]
    fn malformed_filter_never_denies() {
        assert!(may_contain(&[], 7));
        assert!(may_contain(&[0, 0, 0, 99], 7));
    }
}
