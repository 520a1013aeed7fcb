//! A Bloom filter over 64-bit key hashes with double hashing (Kirsch–Mitzenmacher).
//!
//! Encoding: `bits[ceil(m/8)] | k: u8`. The number of probes `k` is stored so readers do not
//! depend on the writer's bits-per-key option.

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
    let k = ((f64::from(bits_per_key) * 0.69) as u32).clamp(1, 30) as u8;
    let bits = (hashes.len() * bits_per_key as usize).max(64);
    let bytes = bits.div_ceil(8);
    let bits = bytes * 8;
    let mut out = vec![0u8; bytes + 1];
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
    out
}

/// Whether `filter` may contain the key with hash `h`. A malformed filter answers `true`
/// (never a false negative).
pub fn may_contain(filter: &[u8], h: u64) -> bool {
    let Some((&k, bitmap)) = filter.split_last() else {
        return true;
    };
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
    fn malformed_filter_never_denies() {
        assert!(may_contain(&[], 7));
        assert!(may_contain(&[0, 0, 0, 99], 7));
    }
}
