//! A sorted table's index as a reader holds it ([`TableIndex`]): for each data block a
//! *separator* (an internal key ≥ every key of the block and < every key of the next) and the
//! block's place in the file, packed so that a binary search reads one 8-byte integer per
//! step and the index costs ≈ 13 bytes per data block (the prefix every separator shares is
//! held once, so keys with a long common prefix are told apart by that integer too). Also the
//! separators the builder writes ([`shortest_separator`]) and the decoding of both index block
//! formats (docs/format.md, "Index block").

use std::cmp::Ordering;

use super::block::{trailer_of, Block, TYPE_IKEY, TYPE_PLAIN, TYPE_SEPARATORS};
use crate::coding::Reader;
use crate::key;

/// [`TableIndex`]'s length of a separator longer than 8 bytes (its bytes are in `long_bytes`).
const LONG: u8 = u8::MAX;

/// The shortest user key `s` with `a <= s < b` (for `a < b`): `a`'s bytes up to the first one
/// where they differ from `b`, that byte incremented when it stays below `b`'s, else (it is
/// one below `b`'s) `a` kept to a later byte that can be incremented. When no shorter key
/// exists (`a` is a prefix of `b`, or the bytes after the difference are all `0xff`), `a`.
/// LevelDB's `FindShortestSeparator`, plus the second case (RocksDB's).
pub fn shortest_separator(a: &[u8], b: &[u8]) -> Vec<u8> {
    let common = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let (Some(&da), Some(&db)) = (a.get(common), b.get(common)) else {
        return a.to_vec();
    };
    if common + 1 == a.len() {
        return a.to_vec();
    }
    if da < 0xff && da + 1 < db {
        let mut s = a.get(..=common).unwrap_or_default().to_vec();
        if let Some(last) = s.last_mut() {
            *last = da + 1;
        }
        return s;
    }
    // `a[..=common]` < `b`: any key extending it that is ≥ `a` separates; the shortest one
    // increments `a`'s first byte after the difference that is not 0xff.
    for (k, &byte) in a.iter().enumerate().skip(common + 1) {
        if byte < 0xff {
            if k + 1 == a.len() {
                return a.to_vec();
            }
            let mut s = a.get(..=k).unwrap_or_default().to_vec();
            if let Some(last) = s.last_mut() {
                *last = byte + 1;
            }
            return s;
        }
    }
    a.to_vec()
}

/// The index entry between data blocks ending with internal key `last` and starting with
/// `next`: a user key and, when it must carry one, the trailer of the internal key it stands
/// for. Different user keys give [`shortest_separator`] with no trailer (it then orders after
/// every version of that user key, as trailer 0 does); a user key whose versions span the two
/// blocks gives `last` itself.
pub fn separator(last: &[u8], next: &[u8]) -> (Vec<u8>, Option<u64>) {
    let (a, b) = (key::parse(last), key::parse(next));
    if a.user_key == b.user_key {
        (a.user_key.to_vec(), Some(a.trailer()))
    } else {
        (shortest_separator(a.user_key, b.user_key), None)
    }
}

/// Block starts relative to [`TableIndex::base`]: 4 bytes each when the table's data fits in
/// 4 GiB, else 8.
#[derive(Debug)]
enum Starts {
    Narrow(Vec<u32>),
    Wide(Vec<u64>),
}

/// A table's index held in memory. Entry `i` names data block `i`: its separator (a user key
/// with trailer 0, or an exact internal key listed in `exact`) and its bytes
/// `base + starts[i] .. base + starts[i + 1]`. Separators increase strictly in internal-key
/// order. The bytes every separator begins with (`common`, their longest common prefix) are
/// held once, and each separator as the rest of its user key (its *suffix*), so that keys which
/// share a long prefix (`user:0000…`) still differ in their packed 8-byte prefixes.
#[derive(Debug)]
pub struct TableIndex {
    base: u64,
    /// n + 1 entries: where each block starts, then where the last one ends.
    starts: Starts,
    /// The longest common prefix of every separator's user key.
    common: Vec<u8>,
    /// [`key::user_prefix`] of each separator's suffix (its user key after `common`).
    prefixes: Vec<u64>,
    /// Each suffix's length, [`LONG`] past 8 bytes.
    lens: Vec<u8>,
    /// Suffixes longer than 8 bytes: (entry, start in `long_bytes`), by entry; each runs to
    /// the next one's start (the last to the end).
    long: Vec<(u32, u32)>,
    long_bytes: Vec<u8>,
    /// Separators that are internal keys with their own trailer: (entry, trailer), by entry.
    /// Every other separator orders after every version of its user key.
    exact: Vec<(u32, u64)>,
}

/// Builds a [`TableIndex`] entry by entry, checking what a search relies on; the separators
/// are packed at [`Builder::finish`], once their common prefix is known.
struct Builder {
    starts: Vec<u64>,
    /// Every separator's user key, concatenated; `ends[i]` is where entry `i`'s ends.
    users: Vec<u8>,
    ends: Vec<usize>,
    exact: Vec<(u32, u64)>,
    prev_trailer: u64,
}

impl Builder {
    fn new(first: u64) -> Self {
        Builder {
            starts: vec![first],
            users: Vec::new(),
            ends: Vec::new(),
            exact: Vec::new(),
            prev_trailer: 0,
        }
    }

    fn user(&self, i: usize) -> &[u8] {
        let start = match i {
            0 => 0,
            _ => self.ends.get(i - 1).copied().unwrap_or(0),
        };
        let end = self.ends.get(i).copied().unwrap_or(0);
        self.users.get(start..end).unwrap_or_default()
    }

    /// Adds the entry of a block of `size` bytes (right after the previous one) whose
    /// separator is `user` with `trailer` (`None`: orders after every version of `user`).
    fn push(&mut self, user: &[u8], trailer: Option<u64>, size: u64) -> Result<(), String> {
        let i = self.ends.len();
        let t = trailer.unwrap_or(0);
        if let Some(last) = i.checked_sub(1) {
            let ordered = match self.user(last).cmp(user) {
                Ordering::Less => true,
                Ordering::Equal => self.prev_trailer > t,
                Ordering::Greater => false,
            };
            if !ordered {
                return Err(format!("index entry {i} does not follow the one before"));
            }
        }
        let end = self
            .starts
            .last()
            .and_then(|s| s.checked_add(size))
            .ok_or_else(|| format!("index entry {i}: block ends past 2^64"))?;
        let idx = u32::try_from(i).map_err(|_| "more than 2^32 index entries".to_string())?;
        if self.users.len() + user.len() > u32::MAX as usize {
            return Err("more than 4 GiB of separators".to_string());
        }
        self.starts.push(end);
        self.users.extend_from_slice(user);
        self.ends.push(self.users.len());
        if let Some(t) = trailer {
            self.exact.push((idx, t));
        }
        self.prev_trailer = t;
        Ok(())
    }

    fn finish(self) -> TableIndex {
        let n = self.ends.len();
        // Sorted keys share with each other the prefix the first and the last share.
        let (first, last) = (self.user(0), self.user(n.saturating_sub(1)));
        let c = first.iter().zip(last).take_while(|(a, b)| a == b).count();
        let mut ix = TableIndex::EMPTY;
        ix.common = first.get(..c).unwrap_or_default().to_vec();
        ix.prefixes.reserve_exact(n);
        ix.lens.reserve_exact(n);
        for i in 0..n {
            let suffix = self.user(i).get(c..).unwrap_or_default();
            ix.prefixes.push(key::user_prefix(suffix));
            if suffix.len() <= 8 {
                ix.lens.push(suffix.len() as u8);
            } else {
                // Both fit in u32: `push` bounds the entries and the separators' bytes.
                ix.lens.push(LONG);
                ix.long.push((i as u32, ix.long_bytes.len() as u32));
                ix.long_bytes.extend_from_slice(suffix);
            }
        }
        let base = self.starts.first().copied().unwrap_or(0);
        let end = self.starts.last().copied().unwrap_or(0);
        ix.base = base;
        ix.starts = match u32::try_from(end - base) {
            Ok(_) => Starts::Narrow(self.starts.iter().map(|s| (s - base) as u32).collect()),
            Err(_) => Starts::Wide(self.starts.iter().map(|s| s - base).collect()),
        };
        ix.exact = self.exact;
        ix.long.shrink_to_fit();
        ix.long_bytes.shrink_to_fit();
        ix.exact.shrink_to_fit();
        ix
    }
}

impl TableIndex {
    /// An index with no entries.
    pub const EMPTY: TableIndex = TableIndex {
        base: 0,
        starts: Starts::Narrow(Vec::new()),
        common: Vec::new(),
        prefixes: Vec::new(),
        lens: Vec::new(),
        long: Vec::new(),
        long_bytes: Vec::new(),
        exact: Vec::new(),
    };

    /// The index of a decoded index block: type [`TYPE_SEPARATORS`] (separators, block sizes)
    /// or, from version-1 tables, type [`TYPE_PLAIN`] / [`TYPE_IKEY`] (each block's last
    /// internal key, block offsets and sizes). Errors are `(offset within block, detail)`.
    pub fn from_block(b: &Block) -> Result<TableIndex, (usize, String)> {
        let mut builder: Option<Builder> = None;
        for i in 0..b.len() {
            let at = b.value_offset(i);
            let bad = |d: &str| (at, format!("index entry {i}: {d}"));
            let mut r = Reader::new(b.value(i));
            let (user, trailer, start, size) = match b.block_type() {
                TYPE_SEPARATORS => {
                    let start = match i {
                        0 => Some(r.varint().ok_or_else(|| bad("bad first block offset"))?),
                        _ => None,
                    };
                    let s2 = r.varint().ok_or_else(|| bad("bad block size"))?;
                    let trailer = match s2 & 1 {
                        1 => Some(
                            r.varint()
                                .and_then(trailer_of)
                                .ok_or_else(|| bad("bad separator tag"))?,
                        ),
                        _ => None,
                    };
                    (b.key(i), trailer, start, s2 >> 1)
                }
                TYPE_PLAIN | TYPE_IKEY => {
                    let k = b.key(i);
                    if !key::valid_ikey(k) {
                        return Err(bad("key is not an internal key"));
                    }
                    let p = key::parse(k);
                    let off = r.varint().ok_or_else(|| bad("bad block offset"))?;
                    let size = r.varint().ok_or_else(|| bad("bad block size"))?;
                    (p.user_key, Some(p.trailer()), Some(off), size)
                }
                ty => return Err((0, format!("index block of type {ty}"))),
            };
            if !r.is_empty() {
                return Err(bad("bytes after the block handle"));
            }
            if size > 1 << 30 {
                return Err(bad("block larger than 1 GiB"));
            }
            let bu = builder.get_or_insert_with(|| Builder::new(start.unwrap_or(0)));
            if let Some(s) = start {
                if bu.starts.last() != Some(&s) {
                    return Err(bad("data block does not follow the one before"));
                }
            }
            bu.push(user, trailer, size).map_err(|d| (at, d))?;
        }
        Ok(builder.map_or(TableIndex::EMPTY, Builder::finish))
    }

    /// Number of entries (data blocks).
    pub fn len(&self) -> usize {
        self.prefixes.len()
    }
    /// Whether the index has no entries.
    pub fn is_empty(&self) -> bool {
        self.prefixes.is_empty()
    }

    fn start(&self, i: usize) -> Option<u64> {
        let rel = match &self.starts {
            Starts::Narrow(v) => u64::from(*v.get(i)?),
            Starts::Wide(v) => *v.get(i)?,
        };
        Some(self.base + rel)
    }

    /// (offset in the file, size) of data block `i`.
    pub fn handle(&self, i: usize) -> Option<(u64, usize)> {
        let (s, e) = (self.start(i)?, self.start(i + 1)?);
        Some((s, usize::try_from(e - s).ok()?))
    }

    /// The suffix of separator `i` (its user key after `common`) handed to `f` (empty when
    /// out of range).
    fn with_suffix<R>(&self, i: usize, f: impl FnOnce(&[u8]) -> R) -> R {
        let (Some(&p), Some(&len)) = (self.prefixes.get(i), self.lens.get(i)) else {
            return f(&[]);
        };
        if len != LONG {
            let b = p.to_be_bytes();
            return f(b.get(..usize::from(len)).unwrap_or_default());
        }
        let j = self.long.partition_point(|&(e, _)| (e as usize) < i);
        let start = self.long.get(j).map_or(0, |&(_, s)| s as usize);
        let end = self
            .long
            .get(j + 1)
            .map_or(self.long_bytes.len(), |&(_, s)| s as usize);
        f(self.long_bytes.get(start..end).unwrap_or_default())
    }

    /// The trailer of separator `i`: its own, or 0 (after every version of its user key).
    fn trailer(&self, i: usize) -> u64 {
        if self.exact.is_empty() {
            return 0;
        }
        match self.exact.binary_search_by_key(&(i as u32), |&(e, _)| e) {
            Ok(j) => self.exact.get(j).map_or(0, |&(_, t)| t),
            Err(_) => 0,
        }
    }

    /// Separator `i` as an internal key (empty when out of range).
    pub fn key(&self, i: usize) -> Vec<u8> {
        if i >= self.len() {
            return Vec::new();
        }
        let mut k = self.common.clone();
        self.with_suffix(i, |s| k.extend_from_slice(s));
        k.extend_from_slice(&self.trailer(i).to_le_bytes());
        k
    }

    /// The first entry whose separator's user key is ≥ `user` (== len if none).
    fn lower_bound_user(&self, user: &[u8]) -> usize {
        // Every separator begins with `common`: a key that does not is before or after all.
        let c = self.common.len().min(user.len());
        match user.get(..c).cmp(&self.common.get(..c)) {
            Ordering::Less => return 0,
            Ordering::Greater => return self.len(),
            // A key that is a proper prefix of `common` is before every separator.
            Ordering::Equal if user.len() < self.common.len() => return 0,
            Ordering::Equal => {}
        }
        let suffix = user.get(c..).unwrap_or_default();
        let tp = key::user_prefix(suffix);
        let (mut lo, mut hi) = (0usize, self.prefixes.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            let p = self.prefixes.get(mid).copied().unwrap_or(u64::MAX);
            let less = match p.cmp(&tp) {
                Ordering::Less => true,
                Ordering::Greater => false,
                Ordering::Equal => self.with_suffix(mid, |s| s < suffix),
            };
            if less {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// The first block whose separator is ≥ the internal key `target` (== len if none): the
    /// only block that can hold `target` or the first key after it.
    pub fn lower_bound_ikey(&self, target: &[u8]) -> usize {
        let p = key::parse(target);
        let mut i = self.lower_bound_user(p.user_key);
        if target.len() < 8 || self.exact.is_empty() {
            return i;
        }
        let Some(suffix) = p.user_key.strip_prefix(self.common.as_slice()) else {
            return i;
        };
        // Separators of this same user key with their own trailer that order before the target.
        let t = p.trailer();
        while i < self.len() && self.trailer(i) > t && self.with_suffix(i, |s| s == suffix) {
            i += 1;
        }
        i
    }

    /// Heap bytes held, plus the struct itself: what the index pins, and weighs in the cache.
    pub fn weight(&self) -> usize {
        let starts = match &self.starts {
            Starts::Narrow(v) => v.capacity() * 4,
            Starts::Wide(v) => v.capacity() * 8,
        };
        std::mem::size_of::<Self>()
            + starts
            + self.common.capacity()
            + self.prefixes.capacity() * 8
            + self.lens.capacity()
            + self.long.capacity() * std::mem::size_of::<(u32, u32)>()
            + self.long_bytes.capacity()
            + self.exact.capacity() * std::mem::size_of::<(u32, u64)>()
    }
}

impl AsRef<TableIndex> for TableIndex {
    fn as_ref(&self) -> &TableIndex {
        self
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing)]
mod tests {
    use super::*;
    use crate::key::{cmp_ikey, make_ikey, ValueKind};
    use crate::table::block::BlockBuilder;
    use proptest::prelude::*;

    #[test]
    fn shortest_separators() {
        let cases: [(&[u8], &[u8], &[u8]); 10] = [
            (b"abc", b"abe", b"abc"),
            (b"abc1234", b"abe", b"abd"),
            (b"abc", b"abd", b"abc"),
            (b"abc12", b"abd", b"abc2"),
            (b"ab\xff\xff1", b"ac", b"ab\xff\xff1"),
            (b"ab\xff\xff1x", b"ac", b"ab\xff\xff2"),
            (b"ab\xff\xff", b"ac", b"ab\xff\xff"),
            (b"ab", b"abc", b"ab"),
            (b"a", b"b", b"a"),
            (b"", b"a", b""),
        ];
        for (a, b, want) in cases {
            assert_eq!(shortest_separator(a, b), want, "{a:?} {b:?}");
        }
    }

    fn ikey_strategy() -> impl Strategy<Value = Vec<u8>> {
        (
            prop::collection::vec(prop::sample::select(vec![0u8, 1, 0x7f, 0xfe, 0xff]), 0..12),
            0u64..6,
            any::<bool>(),
        )
            .prop_map(|(u, s, put)| {
                let kind = if put {
                    ValueKind::Put
                } else {
                    ValueKind::Delete
                };
                make_ikey(&u, s, kind)
            })
    }

    /// Writes `blocks` (their last and first keys are what matters) as a type-2 index the way
    /// the table builder does, and decodes it.
    fn index_of(bounds: &[(Vec<u8>, Vec<u8>)], last: &[u8]) -> TableIndex {
        let mut b = BlockBuilder::for_separators();
        for (i, (a, next)) in bounds.iter().enumerate() {
            let (s, t) = separator(a, next);
            b.add(&s, &crate::table::builder::index_value(i, 100, 10, t));
        }
        let (s, t) = (key::user_key(last).to_vec(), None);
        b.add(
            &s,
            &crate::table::builder::index_value(bounds.len(), 100, 10, t),
        );
        let blk = Block::decode(b.finish()).expect("decodes");
        TableIndex::from_block(&blk).expect("index")
    }

    proptest! {
        /// A separator is ≥ the last key of its block and < the first of the next, in internal
        /// key order, and a search for any key finds the block that holds it or the next key.
        #[test]
        fn separators_separate_and_searches_find_the_block(
            shared in prop::sample::select(vec![&b""[..], b"\x7f", b"key:0000\x01", b"\xfe\xfe\xfe"]),
            keys in prop::collection::vec(ikey_strategy(), 2..60),
            cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..10),
            targets in prop::collection::vec((ikey_strategy(), any::<bool>()), 0..20),
        ) {
            // Every key begins with `shared` (an internal key is its user key, then the
            // trailer), so the separators have a common prefix; targets with and without it
            // fall inside, before and after the table's keys.
            let with_shared = |k: &Vec<u8>| [shared, k.as_slice()].concat();
            let mut keys: Vec<Vec<u8>> = keys.iter().map(with_shared).collect();
            let targets: Vec<Vec<u8>> = targets
                .iter()
                .map(|(t, inside)| if *inside { with_shared(t) } else { t.clone() })
                .collect();
            keys.sort_by(|a, b| cmp_ikey(a, b));
            keys.dedup();
            prop_assume!(keys.len() >= 2);
            let mut cut: Vec<usize> = cuts.iter().map(|c| 1 + c.index(keys.len() - 1)).collect();
            cut.sort_unstable();
            cut.dedup();
            cut.retain(|&c| c < keys.len());
            // Blocks: keys[0..cut0], keys[cut0..cut1], ...
            let mut bounds = Vec::new();
            for &c in &cut {
                let (a, b) = (&keys[c - 1], &keys[c]);
                let (s, t) = separator(a, b);
                let mut sk = s.clone();
                sk.extend_from_slice(&t.unwrap_or(0).to_le_bytes());
                prop_assert!(cmp_ikey(&sk, a).is_ge(), "separator below the block's last key");
                prop_assert!(cmp_ikey(&sk, b).is_lt(), "separator not below the next block's first key");
                prop_assert!(s.len() <= key::user_key(a).len());
                bounds.push((a.clone(), b.clone()));
            }
            let last = keys.last().expect("keys").clone();
            let ix = index_of(&bounds, &last);
            prop_assert_eq!(ix.len(), cut.len() + 1);
            let block_of = |k: &[u8]| cut.partition_point(|&c| cmp_ikey(&keys[c], k).is_le());
            for (i, k) in keys.iter().enumerate() {
                prop_assert_eq!(ix.lower_bound_ikey(k), block_of(k), "key {}", i);
            }
            for t in &targets {
                let got = ix.lower_bound_ikey(t);
                // The first key ≥ t is in block `got` (or none is, and got == len).
                match keys.iter().position(|k| cmp_ikey(k, t).is_ge()) {
                    Some(p) => {
                        let b = block_of(&keys[p]);
                        // A target between a block's last key and its separator lands on that
                        // block, whose cursor then moves on to the next: never past the key.
                        prop_assert!(got == b || got + 1 == b, "{} vs {}", got, b);
                        if got + 1 == b {
                            prop_assert!(cmp_ikey(&keys[p - 1], t).is_lt());
                        }
                    }
                    None => prop_assert!(got == ix.len() || got + 1 == ix.len()),
                }
                // And the search agrees with a plain one over the separators.
                let plain = (0..ix.len()).position(|i| cmp_ikey(&ix.key(i), t).is_ge());
                prop_assert_eq!(got, plain.unwrap_or(ix.len()));
            }
            for i in 0..ix.len() {
                prop_assert_eq!(ix.handle(i), Some((10 + 100 * i as u64, 100)));
            }
        }
    }

    proptest! {
        /// A version-1 index (each block's last internal key, offset and size, in a type-1
        /// block) searches as the plain binary search over its keys does: user keys shorter
        /// than, equal to and longer than the 8-byte prefix, with zero bytes (which pad like a
        /// missing byte), several versions per key; targets present, absent, at other sequence
        /// numbers.
        #[test]
        fn a_version_1_index_searches_as_the_plain_search(
            users in prop::collection::vec(
                prop::collection::vec(prop::sample::select(vec![0u8, 1, b'a', 0xff]), 0..12),
                1..60),
            seqs in prop::collection::vec(0u64..1000, 1..4),
            targets in prop::collection::vec(
                (prop::collection::vec(prop::sample::select(vec![0u8, 1, b'a', 0xff]), 0..12), 0u64..1100),
                1..40),
        ) {
            let mut keys: Vec<Vec<u8>> = users
                .iter()
                .flat_map(|u| seqs.iter().map(move |&s| make_ikey(u, s, ValueKind::Put)))
                .collect();
            keys.sort_by(|a, b| cmp_ikey(a, b));
            keys.dedup();
            let mut b = BlockBuilder::for_internal_keys(1);
            for (i, k) in keys.iter().enumerate() {
                let mut v = Vec::new();
                crate::coding::put_varint(&mut v, 7 + 50 * i as u64);
                crate::coding::put_varint(&mut v, 50);
                b.add(k, &v);
            }
            let blk = Block::decode(b.finish()).expect("decodes");
            let ix = TableIndex::from_block(&blk).expect("index");
            prop_assert_eq!(ix.len(), keys.len());
            let present = users.iter().map(|u| (u.clone(), 5u64));
            for (u, s) in targets.iter().cloned().chain(present) {
                let t = make_ikey(&u, s, ValueKind::Put);
                prop_assert_eq!(ix.lower_bound_ikey(&t), blk.lower_bound(&t, cmp_ikey));
            }
            for (i, k) in keys.iter().enumerate() {
                prop_assert_eq!(&ix.key(i), k);
                prop_assert_eq!(ix.handle(i), Some((7 + 50 * i as u64, 50)));
            }
        }
    }

    #[test]
    fn a_version_1_index_with_a_gap_between_blocks_is_refused() {
        let mut b = BlockBuilder::for_internal_keys(1);
        for (i, off) in [0u64, 60].into_iter().enumerate() {
            let mut v = Vec::new();
            crate::coding::put_varint(&mut v, off);
            crate::coding::put_varint(&mut v, 50);
            b.add(
                &make_ikey(format!("k{i}").as_bytes(), 1, ValueKind::Put),
                &v,
            );
        }
        let blk = Block::decode(b.finish()).expect("decodes");
        let e = TableIndex::from_block(&blk).expect_err("gap");
        assert!(e.1.contains("does not follow"), "{e:?}");
    }
}
