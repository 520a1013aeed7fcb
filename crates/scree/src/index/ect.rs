//! Level 1: the table's distinct prefix hashes in an entropy-coded trie (ECT, SILT's design),
//! which maps a prefix hash to its rank among them.
//!
//! The trie is a binary radix trie over the hashes' bits, most significant first, that stops
//! splitting a node once it holds at most one key: a key ends at the shortest prefix of its bits
//! that no other key shares. A node of `n ≥ 2` keys is stored as the count of keys whose next
//! bit is 0 (coded as `codes.rs` says), then its left subtree, then its right subtree (pre-order).
//!
//! The keys are first split into `2^bucket_bits` buckets by their top bits; each bucket's trie
//! starts at depth `bucket_bits`, and a directory (`dir.rs`, built at load) gives each bucket's
//! first rank and first bit in one read. A lookup decodes one bucket only, and within it only the nodes on the key's path
//! plus the left subtrees it passes (which must be skipped by decoding them).
//!
//! Predecessor queries: a walk that ends in an empty subtree proves the hash absent, and the
//! count of keys to its left is its exact predecessor rank. A walk that ends at a one-key node
//! names the one key that shares every bit the trie keeps with the query; whether the query *is*
//! that key, or sorts just before or after it, the trie cannot tell (that would take the rest of
//! the key's 64 bits). [`Found`] says which case a walk ended in.

use super::bits::{BitReader, BitWriter};
use super::codes::{get_left, put_left};
use super::dir::SampledDir;
use super::LookupCost;

/// Where a walk for a prefix hash ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Found {
    /// At the one key sharing every bit the trie keeps of the query: its rank.
    Leaf(u32),
    /// In an empty subtree: the hash is absent, and this many keys sort before it.
    Absent(u32),
}

/// The bucket bits for `n` keys and an average of at most `target` keys per bucket.
pub(crate) fn bucket_bits_for(n: usize, target: usize) -> u8 {
    let mut bb = 0u8;
    while bb < 32 && (n as u64) > (target.max(1) as u64) << bb {
        bb += 1;
    }
    bb
}

/// The top `bb` bits of `key` (0 when `bb` is 0).
fn bucket_of(key: u64, bb: u8) -> u64 {
    if bb == 0 {
        0
    } else {
        key >> (64 - u32::from(bb))
    }
}

fn bit_at(key: u64, depth: u32) -> bool {
    (key >> (63 - depth)) & 1 == 1
}

/// The encoded tries of sorted distinct `keys`: per bucket its key count and its trie's length in
/// bits, and the concatenated code stream.
pub(crate) struct Encoded {
    pub(crate) counts: Vec<u64>,
    pub(crate) bit_lens: Vec<u64>,
    pub(crate) words: Vec<u64>,
    pub(crate) len: u64,
}

pub(crate) fn encode(keys: &[u64], bb: u8) -> Encoded {
    let buckets = 1u64 << bb;
    let mut counts = Vec::new();
    let mut bit_lens = Vec::new();
    let mut w = BitWriter::default();
    let mut rest = keys;
    for b in 0..buckets {
        let here = rest.partition_point(|&k| bucket_of(k, bb) == b);
        let (mine, after) = rest.split_at(here);
        let start = w.len();
        encode_node(&mut w, mine, u32::from(bb));
        counts.push(mine.len() as u64);
        bit_lens.push(w.len() - start);
        rest = after;
    }
    let (words, len) = w.finish();
    Encoded {
        counts,
        bit_lens,
        words,
        len,
    }
}

fn encode_node(w: &mut BitWriter, keys: &[u64], depth: u32) {
    if keys.len() <= 1 || depth >= 64 {
        return;
    }
    let left = keys.partition_point(|&k| !bit_at(k, depth));
    put_left(w, keys.len(), left);
    let (l, r) = keys.split_at(left);
    encode_node(w, l, depth + 1);
    encode_node(w, r, depth + 1);
}

/// Decodes and discards a subtree of `n` keys at `depth`; `None` if its codes are invalid.
fn skip(r: &mut BitReader<'_>, n: usize, depth: u32, codes: &mut u64) -> Option<()> {
    if n <= 1 {
        return Some(());
    }
    if depth >= 64 {
        return None;
    }
    let left = get_left(r, n)?;
    *codes += 1;
    skip(r, left, depth + 1, codes)?;
    skip(r, n - left, depth + 1, codes)
}

/// Where a walk ended, with what the directory said of the walk's bucket: the rank of its
/// first key and the value the caller's `extra` gave for that rank (level 2's hint).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Walk {
    /// Where the walk ended.
    pub(crate) found: Found,
    /// Rank of the bucket's first key.
    pub(crate) bucket_rank: u64,
    /// `extra(bucket_rank)`.
    pub(crate) extra: u64,
}

/// The loaded level 1.
#[derive(Debug)]
pub(crate) struct Ect {
    bucket_bits: u8,
    /// `2^bucket_bits + 1` entries: the rank of each bucket's first key (then the key count),
    /// its first bit in `words` (then the stream's length), and the caller's value for that
    /// rank.
    dir: SampledDir<3>,
    words: Vec<u64>,
}

impl Ect {
    /// Loads and checks level 1: every bucket's codes must decode to a trie of exactly its key
    /// count that ends where the next bucket begins. The error says what is wrong. `extra`
    /// gives, for each bucket's first rank (non-decreasing), a value lookups get back with
    /// their walk (`None`: the rank is refused).
    pub(crate) fn new(
        bucket_bits: u8,
        counts: &[u64],
        bit_lens: &[u64],
        mut words: Vec<u64>,
        len: u64,
        extra: impl Fn(u64) -> Option<u64>,
    ) -> Result<Ect, String> {
        let buckets = 1u64.checked_shl(u32::from(bucket_bits)).unwrap_or(0);
        if counts.len() as u64 != buckets || bit_lens.len() as u64 != buckets {
            return Err("bucket directory size does not match the bucket bits".into());
        }
        let mut ranks = Vec::with_capacity(counts.len() + 1);
        let mut starts = Vec::with_capacity(counts.len() + 1);
        let (mut rank, mut bit) = (0u64, 0u64);
        for (&c, &l) in counts.iter().zip(bit_lens) {
            ranks.push(rank);
            starts.push(bit);
            rank = rank.checked_add(c).ok_or("bucket key counts overflow")?;
            bit = bit.checked_add(l).ok_or("bucket trie lengths overflow")?;
        }
        ranks.push(rank);
        starts.push(bit);
        if bit != len {
            return Err(format!(
                "bucket tries hold {bit} bits, the code stream {len}"
            ));
        }
        let mut codes = 0u64;
        for (i, (&c, &s)) in counts.iter().zip(&starts).enumerate() {
            let end = s + bit_lens.get(i).copied().unwrap_or(0);
            let mut r = BitReader::new(&words, s, end);
            let n = usize::try_from(c).map_err(|_| "bucket key count too large")?;
            if skip(&mut r, n, u32::from(bucket_bits), &mut codes).is_none() || r.pos() != end {
                return Err(format!("bucket {i}: trie codes do not decode to {c} keys"));
            }
        }
        words.shrink_to_fit();
        let mut entries = Vec::with_capacity(ranks.len());
        for (&r, &s) in ranks.iter().zip(&starts) {
            let x = extra(r).ok_or_else(|| format!("no level-2 position for rank {r}"))?;
            entries.push([r, s, x]);
        }
        Ok(Ect {
            bucket_bits,
            dir: SampledDir::new(&entries)?,
            words,
        })
    }

    /// Walks the trie for `key`. `None` only if the structure is inconsistent (it was checked
    /// when loaded, so this does not happen).
    pub(crate) fn find(&self, key: u64, cost: &mut LookupCost) -> Option<Walk> {
        let b = usize::try_from(bucket_of(key, self.bucket_bits)).ok()?;
        let [lo, start, extra] = self.dir.get(b)?;
        let [hi, end, _] = self.dir.get(b + 1)?;
        cost.rank_select += 2;
        let mut r = BitReader::new(&self.words, start, end);
        let mut rank = lo;
        let mut n = usize::try_from(hi.checked_sub(lo)?).ok()?;
        let mut depth = u32::from(self.bucket_bits);
        let found = loop {
            match n {
                0 => break Found::Absent(u32::try_from(rank).ok()?),
                1 => break Found::Leaf(u32::try_from(rank).ok()?),
                _ => {}
            }
            if depth >= 64 {
                return None;
            }
            let left = get_left(&mut r, n)?;
            cost.trie_codes += 1;
            if bit_at(key, depth) {
                skip(&mut r, left, depth + 1, &mut cost.trie_codes)?;
                rank += left as u64;
                n -= left;
            } else {
                n = left;
            }
            depth += 1;
        };
        cost.trie_bits += r.pos() - start;
        Some(Walk {
            found,
            bucket_rank: lo,
            extra,
        })
    }

    /// Number of buckets.
    pub(crate) fn buckets(&self) -> u64 {
        1 << self.bucket_bits
    }

    /// Bytes of the heap this level holds.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.words.capacity() * 8 + self.dir.heap_bytes()
    }

    /// The part of [`Ect::heap_bytes`] held by the bucket directory (built at load).
    pub(crate) fn dir_heap_bytes(&self) -> usize {
        self.dir.heap_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(keys: &[u64], bb: u8) -> Ect {
        let e = encode(keys, bb);
        Ect::new(bb, &e.counts, &e.bit_lens, e.words, e.len, |r| Some(r * 3)).unwrap()
    }

    /// The model: members are found at their rank; any other hash either is proven absent with
    /// its exact predecessor count, or lands on the one member that shares every bit the trie
    /// keeps of it (at least `max(bucket_bits, distinguishing length)` leading bits).
    fn check(keys: &[u64], bb: u8, queries: &[u64]) {
        let ect = load(keys, bb);
        let mut cost = LookupCost::default();
        for (i, &k) in keys.iter().enumerate() {
            let w = ect.find(k, &mut cost).unwrap();
            assert_eq!(w.found, Found::Leaf(i as u32));
            assert!(w.bucket_rank <= i as u64);
            assert_eq!(w.extra, w.bucket_rank * 3);
        }
        for &q in queries {
            let pred = keys.partition_point(|&k| k < q) as u32;
            match ect.find(q, &mut cost).unwrap().found {
                Found::Absent(r) => {
                    assert!(keys.binary_search(&q).is_err());
                    assert_eq!(r, pred, "query {q:#x}");
                }
                Found::Leaf(r) => {
                    let k = keys[r as usize];
                    let lcp = (k ^ q).leading_zeros();
                    let i = r as usize;
                    let mut dist = 0;
                    if i > 0 {
                        dist = dist.max((keys[i - 1] ^ k).leading_zeros() + 1);
                    }
                    if i + 1 < keys.len() {
                        dist = dist.max((keys[i + 1] ^ k).leading_zeros() + 1);
                    }
                    assert!(lcp >= dist.max(u32::from(bb)), "query {q:#x} key {k:#x}");
                }
            }
        }
    }

    #[test]
    fn members_rank_and_absent_hashes_find_their_predecessor() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for n in [0usize, 1, 2, 3, 17, 100, 1000] {
            let mut keys: Vec<u64> = (0..n).map(|_| next()).collect();
            keys.sort_unstable();
            keys.dedup();
            let mut queries: Vec<u64> = (0..2000).map(|_| next()).collect();
            for &k in &keys {
                queries.extend([k.wrapping_add(1), k.wrapping_sub(1), k ^ (1 << 40)]);
            }
            for bb in [0u8, 1, 3, bucket_bits_for(keys.len(), 64)] {
                check(&keys, bb, &queries);
            }
        }
        // Keys that differ only in their last bits, and the extremes.
        let keys = [0u64, 1, 2, 3, 1 << 63, u64::MAX - 1, u64::MAX];
        check(&keys, 2, &[4, 5, (1 << 63) + 1, u64::MAX - 2, 1 << 62]);
    }

    #[test]
    fn damaged_codes_are_refused() {
        let keys: Vec<u64> = (0..50u64)
            .map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15))
            .collect();
        let mut keys = keys;
        keys.sort_unstable();
        let e = encode(&keys, 2);
        // A stream one bit longer than the tries, or a bucket whose codes outlast its keys.
        assert!(Ect::new(2, &e.counts, &e.bit_lens, e.words.clone(), e.len + 1, Some).is_err());
        assert!(e.bit_lens[0] > 0);
        let mut counts = e.counts.clone();
        counts[0] = 0;
        assert!(Ect::new(2, &counts, &e.bit_lens, e.words.clone(), e.len, Some).is_err());
        assert!(Ect::new(3, &e.counts, &e.bit_lens, e.words, e.len, Some).is_err());
    }
}
