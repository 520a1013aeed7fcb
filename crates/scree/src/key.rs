//! Internal keys: a user key followed by an 8-byte little-endian trailer `(seq << 8) | kind`.
//! Internal order is user key ascending, then sequence number descending, so the newest version
//! of a key comes first.

use std::cmp::Ordering;

/// Largest sequence number (56 bits).
pub const MAX_SEQ: u64 = (1 << 56) - 1;

/// What an internal entry records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueKind {
    /// A tombstone.
    Delete = 0,
    /// A value.
    Put = 1,
}

impl ValueKind {
    /// Decodes a kind byte.
    pub fn from_u8(b: u8) -> Option<Self> {
        match b {
            0 => Some(ValueKind::Delete),
            1 => Some(ValueKind::Put),
            _ => None,
        }
    }
}

/// Packs a sequence number and kind into a trailer.
pub fn trailer(seq: u64, kind: ValueKind) -> u64 {
    (seq << 8) | kind as u64
}

/// Builds an internal key.
pub fn make_ikey(user_key: &[u8], seq: u64, kind: ValueKind) -> Vec<u8> {
    let mut k = Vec::with_capacity(user_key.len() + 8);
    k.extend_from_slice(user_key);
    k.extend_from_slice(&trailer(seq, kind).to_le_bytes());
    k
}

/// The internal key `user_key ‖ trailer` (the trailer as `(seq << 8) | kind`).
pub fn ikey_with_trailer(user_key: &[u8], trailer: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(user_key.len() + 8);
    k.extend_from_slice(user_key);
    k.extend_from_slice(&trailer.to_le_bytes());
    k
}

/// Internal-key order of `(user key, trailer)` pairs, as [`cmp_ikey`] orders the assembled
/// keys: user key ascending, then trailer descending.
pub fn cmp_split(a: (&[u8], u64), b: (&[u8], u64)) -> Ordering {
    a.0.cmp(b.0).then_with(|| b.1.cmp(&a.1))
}

/// The key to seek to for "newest version of `user_key` visible at `seq`".
pub fn lookup_key(user_key: &[u8], seq: u64) -> Vec<u8> {
    make_ikey(user_key, seq, ValueKind::Put)
}

/// A decoded view of an internal key. Keys shorter than 8 bytes are treated as having seq 0
/// and an invalid kind; decoders validate with [`valid_ikey`] before trusting them.
#[derive(Debug, Clone, Copy)]
pub struct ParsedKey<'a> {
    /// The user key.
    pub user_key: &'a [u8],
    /// Sequence number.
    pub seq: u64,
    /// Kind byte (decode with [`ValueKind::from_u8`]).
    pub kind: u8,
}

impl ParsedKey<'_> {
    /// The trailer `(seq << 8) | kind` the key was parsed from.
    pub fn trailer(&self) -> u64 {
        (self.seq << 8) | u64::from(self.kind)
    }
}

/// Splits an internal key.
pub fn parse(ikey: &[u8]) -> ParsedKey<'_> {
    if ikey.len() < 8 {
        return ParsedKey {
            user_key: ikey,
            seq: 0,
            kind: 0xff,
        };
    }
    let (u, t) = ikey.split_at(ikey.len() - 8);
    let t = u64::from_le_bytes(t.try_into().unwrap_or([0; 8]));
    ParsedKey {
        user_key: u,
        seq: t >> 8,
        kind: (t & 0xff) as u8,
    }
}

/// Whether a byte string is a well-formed internal key.
pub fn valid_ikey(ikey: &[u8]) -> bool {
    ikey.len() >= 8 && ValueKind::from_u8(parse(ikey).kind).is_some()
}

/// The first `N` bytes of `key`, zero-padded when it is shorter: integers made from them
/// (big-endian) order keys as their bytes do wherever those integers differ. A fixed-size
/// read where the key is long enough: a copy of a variable length is a call to `memcpy`, 2 %
/// of a compaction's CPU in merge comparisons.
#[inline]
pub fn padded_head<const N: usize>(key: &[u8]) -> [u8; N] {
    if let Some(head) = key.first_chunk::<N>() {
        return *head;
    }
    let mut b = [0u8; N];
    let n = key.len().min(N);
    if let (Some(dst), Some(src)) = (b.get_mut(..n), key.get(..n)) {
        dst.copy_from_slice(src);
    }
    b
}

/// The first 8 bytes of a user key as a big-endian integer, zero-padded. If
/// `user_prefix(a) < user_prefix(b)` then `a < b` (the first differing byte, or a's padding
/// against a byte of b, decides), so a search can order keys by these integers and compare whole
/// keys only where the prefixes are equal.
#[inline]
pub fn user_prefix(user_key: &[u8]) -> u64 {
    u64::from_be_bytes(padded_head(user_key))
}

/// The user key part of an internal key.
pub fn user_key(ikey: &[u8]) -> &[u8] {
    parse(ikey).user_key
}

/// Compares two internal keys: user key ascending, then trailer descending. The first 8 bytes
/// of the user keys are compared as integers ([`user_prefix`]) before the rest: most
/// comparisons end there without a call to `memcmp` (the sorted memtable's B-tree search makes
/// ~30 comparisons per insert).
#[inline]
pub fn cmp_ikey(a: &[u8], b: &[u8]) -> Ordering {
    if a.len() < 8 || b.len() < 8 {
        return a.cmp(b);
    }
    let (ua, ta) = a.split_at(a.len() - 8);
    let (ub, tb) = b.split_at(b.len() - 8);
    let user = match user_prefix(ua).cmp(&user_prefix(ub)) {
        Ordering::Equal => ua.cmp(ub),
        o => o,
    };
    match user {
        Ordering::Equal => {
            let ta = u64::from_le_bytes(ta.try_into().unwrap_or([0; 8]));
            let tb = u64::from_le_bytes(tb.try_into().unwrap_or([0; 8]));
            tb.cmp(&ta)
        }
        o => o,
    }
}

/// Bytes of an internal key stored inline (no heap allocation) in a memtable node; covers the
/// common 16-byte user key plus its 8-byte trailer, so skiplist comparisons touch one node.
pub const INLINE_KEY: usize = 32;

/// An owned internal key ordered by [`cmp_ikey`] (used as the memtable key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InternalKey(pub smallvec::SmallVec<[u8; INLINE_KEY]>);

impl InternalKey {
    /// Builds `user_key ‖ trailer(seq, kind)` without a heap allocation for short keys.
    pub fn new(user_key: &[u8], seq: u64, kind: ValueKind) -> Self {
        let mut k = smallvec::SmallVec::with_capacity(user_key.len() + 8);
        k.extend_from_slice(user_key);
        k.extend_from_slice(&trailer(seq, kind).to_le_bytes());
        InternalKey(k)
    }
    /// Copies an encoded internal key.
    pub fn from_slice(ikey: &[u8]) -> Self {
        InternalKey(smallvec::SmallVec::from_slice(ikey))
    }
    /// The encoded bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.0
    }
}

impl Ord for InternalKey {
    fn cmp(&self, other: &Self) -> Ordering {
        cmp_ikey(&self.0, &other.0)
    }
}
impl PartialOrd for InternalKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_is_user_key_then_newest_first() {
        let a1 = make_ikey(b"a", 1, ValueKind::Put);
        let a2 = make_ikey(b"a", 2, ValueKind::Put);
        let ab = make_ikey(b"ab", 0, ValueKind::Put);
        assert_eq!(cmp_ikey(&a2, &a1), Ordering::Less);
        assert_eq!(cmp_ikey(&a1, &ab), Ordering::Less);
        let p = parse(&a2);
        assert_eq!((p.user_key, p.seq, p.kind), (&b"a"[..], 2, 1));
    }

    #[test]
    fn cmp_ikey_matches_user_key_then_trailer_descending() {
        // Keys of 0 to 12 bytes over a 3-letter alphabet with a zero byte (a shorter key
        // against its zero-padded longer self, long shared prefixes), every pair.
        let mut keys: Vec<Vec<u8>> = Vec::new();
        let mut x = 5u64;
        for _ in 0..400 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let len = (x >> 59) as usize % 13;
            let key: Vec<u8> = (0..len)
                .map(|i| [0u8, 1, 0xff][(x >> (i * 3 % 50)) as usize % 3])
                .collect();
            keys.push(make_ikey(&key, (x >> 20) % 4, ValueKind::Put));
        }
        for a in &keys {
            for b in &keys {
                let (pa, pb) = (parse(a), parse(b));
                let want = pa
                    .user_key
                    .cmp(pb.user_key)
                    .then(pb.trailer().cmp(&pa.trailer()));
                assert_eq!(cmp_ikey(a, b), want, "{a:?} {b:?}");
            }
        }
    }
}
