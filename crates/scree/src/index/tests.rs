//! The index against a model: a sorted list of (prefix hash, suffix hash, block) entries.
//! Present keys must be located to exactly the blocks holding them, absent keys to the block
//! they would sort into (or none), prefix groups to exactly their blocks; the bytes round-trip,
//! and damage to them is `Error::Corruption`, never a panic or a wrong block.

use std::ops::Range;
use std::path::Path;

use proptest::prelude::*;

use super::format;
use super::*;
use crate::coding::{crc, put_u32};
use crate::error::Error;

type Entry = (u64, u64, u32);

fn build(entries: &[Entry], bucket_keys: usize) -> (Vec<u8>, BlockIndex) {
    let mut b = IndexBuilder::with_bucket_keys(bucket_keys);
    for &(p, s, blk) in entries {
        b.add(p, s, blk).unwrap();
    }
    let bytes = b.finish().unwrap();
    let idx = BlockIndex::decode(&bytes, Path::new("t.sst"), 100).unwrap();
    (bytes, idx)
}

/// Blocks holding entries that match `f`, as a range (empty if none).
fn blocks_where(entries: &[Entry], f: impl Fn(&Entry) -> bool) -> Option<Range<u32>> {
    let mut it = entries.iter().filter(|e| f(e)).map(|e| e.2);
    let first = it.next()?;
    let last = it.last().unwrap_or(first);
    Some(first..last + 1)
}

/// The blocks a key absent from the table may be said to be in: those of the entries just
/// before and after its place in table order.
fn gap_blocks(entries: &[Entry], p: u64, s: u64) -> Vec<u32> {
    let i = entries.partition_point(|e| (e.0, e.1) < (p, s));
    let mut v = Vec::new();
    if i > 0 {
        v.push(entries[i - 1].2);
    }
    if let Some(e) = entries.get(i) {
        v.push(e.2);
    }
    v
}

/// The present prefix whose every bit level 1 keeps is shared by `p`, if any: the one `k`
/// with `lcp(p, k)` at least `k`'s distinguishing length (one more than its longest common
/// prefix with a neighbour).
fn leaf_prefix(prefixes: &[u64], p: u64) -> Option<u64> {
    prefixes.iter().enumerate().find_map(|(i, &k)| {
        let mut dist = 0;
        if i > 0 {
            dist = dist.max((prefixes[i - 1] ^ k).leading_zeros() + 1);
        }
        if i + 1 < prefixes.len() {
            dist = dist.max((prefixes[i + 1] ^ k).leading_zeros() + 1);
        }
        ((k ^ p).leading_zeros() >= dist).then_some(k)
    })
}

/// Checks every answer of `idx` against the model.
fn check(entries: &[Entry], idx: &BlockIndex, queries: &[(u64, u64)]) {
    let mut prefixes: Vec<u64> = entries.iter().map(|e| e.0).collect();
    prefixes.dedup();
    assert_eq!(idx.num_groups() as usize, prefixes.len());
    assert_eq!(idx.num_entries(), entries.len() as u64);
    // Present keys: exactly their blocks.
    for &(p, s, _) in entries {
        let want = blocks_where(entries, |e| e.0 == p && e.1 == s);
        assert_eq!(idx.locate(p, s), want, "present ({p:#x}, {s:#x})");
    }
    // Present groups: exactly their blocks.
    for &p in &prefixes {
        let want = blocks_where(entries, |e| e.0 == p).unwrap();
        assert_eq!(idx.prefix_blocks(p), want, "group {p:#x}");
    }
    for &(p, s) in queries {
        let present_key = entries.iter().any(|e| e.0 == p && e.1 == s);
        if present_key {
            continue;
        }
        let present_prefix = prefixes.binary_search(&p).is_ok();
        let got = idx.locate(p, s);
        let leaf = if present_prefix {
            None
        } else {
            leaf_prefix(&prefixes, p)
        };
        match &got {
            None => assert!(
                !present_prefix,
                "({p:#x}, {s:#x}) of a present prefix: none"
            ),
            Some(r) => {
                let ok_gap = r.len() == 1 && gap_blocks(entries, p, s).contains(&r.start);
                // Answered as the prefix it shares the kept bits with: what that key gets.
                let ok_leaf = leaf.is_some_and(|k| {
                    let exact = blocks_where(entries, |e| e.0 == k && e.1 == s);
                    match exact {
                        Some(x) => x == *r,
                        None => r.len() == 1 && gap_blocks(entries, k, s).contains(&r.start),
                    }
                });
                assert!(ok_gap || ok_leaf, "absent ({p:#x}, {s:#x}): {r:?}");
            }
        }
        if !present_prefix {
            let pb = idx.prefix_blocks(p);
            let ok = pb.is_empty()
                || leaf.is_some_and(|k| blocks_where(entries, |e| e.0 == k) == Some(pb.clone()));
            assert!(ok, "absent group {p:#x}: {pb:?}");
            if got.is_none() {
                assert!(pb.is_empty());
            }
        }
    }
}

/// A deterministic pseudo-random sequence from `seed` (≠ 0).
fn xorshift(mut x: u64) -> impl FnMut() -> u64 {
    move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    }
}

/// A table: groups of entries (prefix hash, suffix hashes), sorted, cut into blocks of the given
/// capacities (cycled).
fn table(groups: Vec<(u64, Vec<u64>)>, caps: &[u32]) -> Vec<Entry> {
    let mut kv: Vec<(u64, u64)> = groups
        .into_iter()
        .flat_map(|(p, ss)| ss.into_iter().map(move |s| (p, s)))
        .collect();
    kv.sort_unstable();
    let mut out = Vec::with_capacity(kv.len());
    let (mut block, mut used, mut c) = (0u32, 0u32, 0usize);
    for (p, s) in kv {
        if used == caps[c % caps.len()] {
            block += 1;
            used = 0;
            c += 1;
        }
        out.push((p, s, block));
        used += 1;
    }
    out
}

fn hash_strategy() -> impl Strategy<Value = u64> {
    prop_oneof![
        any::<u64>(),
        // Hashes sharing long prefixes, and the ends of the range.
        (0u64..64).prop_map(|x| x << 58),
        (0u64..512).prop_map(|x| 0x5555_0000_0000_0000 | x),
        Just(0u64),
        Just(u64::MAX),
    ]
}

fn suffix_strategy() -> impl Strategy<Value = u64> {
    prop_oneof![
        any::<u64>(),
        // Few distinct values: duplicates make ties across block boundaries.
        (0u64..6).prop_map(|x| x << 60),
        (0u64..4),
    ]
}

fn table_strategy() -> impl Strategy<Value = Vec<Entry>> {
    let group = (
        hash_strategy(),
        prop_oneof![
            4 => prop::collection::vec(suffix_strategy(), 1..20),
            1 => prop::collection::vec(suffix_strategy(), 20..200),
        ],
    );
    (
        prop::collection::vec(group, 1..60),
        prop::collection::vec(1u32..24, 1..8),
    )
        .prop_map(|(groups, caps)| table(groups, &caps))
}

fn queries_strategy() -> impl Strategy<Value = Vec<(u64, u64)>> {
    prop::collection::vec((hash_strategy(), suffix_strategy()), 0..40)
}

/// Queries next to the entries: one bit or one unit away in either hash.
fn near(entries: &[Entry]) -> Vec<(u64, u64)> {
    let mut q = Vec::new();
    for &(p, s, _) in entries.iter().step_by(3) {
        q.extend([
            (p, s.wrapping_add(1)),
            (p, s.wrapping_sub(1)),
            (p.wrapping_add(1), s),
            (p.wrapping_sub(1), s),
            (p ^ 1 << 20, s),
            (p ^ 1 << 62, s),
        ]);
    }
    q
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn answers_match_the_model(
        entries in table_strategy(),
        queries in queries_strategy(),
        bucket_keys in prop_oneof![Just(1usize), Just(4), Just(64)],
    ) {
        let (_, idx) = build(&entries, bucket_keys);
        let mut q = queries;
        q.extend(near(&entries));
        check(&entries, &idx, &q);
    }

    #[test]
    fn bytes_round_trip(entries in table_strategy()) {
        let mut b = IndexBuilder::new();
        for &(p, s, blk) in &entries {
            b.add(p, s, blk).unwrap();
        }
        let parts = b.into_parts().unwrap();
        let bytes = format::encode(&parts);
        let (back, _) = format::decode(&bytes, Path::new("t"), 0).unwrap();
        prop_assert_eq!(&back, &parts);
        let idx = BlockIndex::from_parts(back).unwrap();
        prop_assert_eq!(idx.num_blocks(), entries.last().unwrap().2 + 1);
        // The same input gives the same bytes.
        let mut b = IndexBuilder::new();
        for &(p, s, blk) in &entries {
            b.add(p, s, blk).unwrap();
        }
        prop_assert_eq!(b.finish().unwrap(), bytes);
    }

    #[test]
    fn a_flipped_byte_is_corruption(
        entries in table_strategy(),
        at in any::<prop::sample::Index>(),
        xor in 1u8..=255,
    ) {
        let (mut bytes, _) = build(&entries, 64);
        let i = at.index(bytes.len());
        bytes[i] ^= xor;
        match BlockIndex::decode(&bytes, Path::new("t.sst"), 1000) {
            Err(Error::Corruption { file, offset, .. }) => {
                prop_assert_eq!(file, Path::new("t.sst"));
                prop_assert!(offset >= 1000 && offset < 1000 + bytes.len() as u64);
            }
            other => prop_assert!(false, "byte {} ^ {:#x}: {:?}", i, xor, other.map(|_| ())),
        }
    }

    /// Damage that passes the checksum (as a wrong writer could make): never a panic, and an
    /// index that loads answers within its blocks.
    #[test]
    fn damage_behind_a_good_checksum_never_panics(
        entries in table_strategy(),
        at in any::<prop::sample::Index>(),
        xor in 1u8..=255,
        queries in queries_strategy(),
    ) {
        let (bytes, _) = build(&entries, 8);
        let mut body = bytes[..bytes.len() - 4].to_vec();
        let i = at.index(body.len());
        body[i] ^= xor;
        let c = crc(&body);
        put_u32(&mut body, c);
        if let Ok(idx) = BlockIndex::decode(&body, Path::new("t"), 0) {
            for (p, s) in queries.into_iter().chain(near(&entries)) {
                if let Some(r) = idx.locate(p, s) {
                    prop_assert!(r.end <= idx.num_blocks() && r.start < r.end);
                }
                prop_assert!(idx.prefix_blocks(p).end <= idx.num_blocks());
            }
        }
    }
}

#[test]
fn truncated_bytes_are_corruption() {
    let entries = table(
        (0..40u64)
            .map(|g| (g.wrapping_mul(0x9e37_79b9_7f4a_7c15), (0..9).collect()))
            .collect(),
        &[7],
    );
    let (bytes, _) = build(&entries, 64);
    for n in 0..bytes.len() {
        assert!(matches!(
            BlockIndex::decode(&bytes[..n], Path::new("t"), 0),
            Err(Error::Corruption { .. })
        ));
    }
    let mut longer = bytes.clone();
    longer.insert(0, 0);
    assert!(BlockIndex::decode(&longer, Path::new("t"), 0).is_err());
}

#[test]
fn an_empty_table_locates_nothing() {
    let bytes = IndexBuilder::new().finish().unwrap();
    let idx = BlockIndex::decode(&bytes, Path::new("t"), 0).unwrap();
    assert_eq!(idx.num_blocks(), 0);
    assert_eq!(idx.locate(1, 2), None);
    assert_eq!(idx.prefix_blocks(1), 0..0);
}

#[test]
fn the_builder_refuses_entries_out_of_order() {
    let mut b = IndexBuilder::new();
    assert!(b.add(5, 5, 1).is_err());
    b.add(5, 5, 0).unwrap();
    b.add(5, 5, 0).unwrap();
    assert!(b.add(5, 4, 0).is_err());
    assert!(b.add(4, 9, 0).is_err());
    assert!(b.add(6, 0, 2).is_err());
    b.add(6, 0, 1).unwrap();
    assert_eq!(b.num_entries(), 3);
}

#[test]
fn versions_straddling_a_boundary_need_both_blocks() {
    // Block 0: (1, 10) (1, 20); block 1: (1, 20) (1, 30); block 2: (2, 5).
    let entries = [(1, 10, 0), (1, 20, 0), (1, 20, 1), (1, 30, 1), (2, 5, 2)];
    let (_, idx) = build(&entries, 64);
    assert_eq!(idx.locate(1, 20), Some(0..2));
    assert_eq!(idx.locate(1, 10), Some(0..1));
    assert_eq!(idx.locate(1, 30), Some(1..2));
    assert_eq!(idx.locate(1, 25), Some(1..2));
    assert_eq!(idx.prefix_blocks(1), 0..2);
    assert_eq!(idx.prefix_blocks(2), 2..3);
}

/// A table shaped like the paper's Fix.16 (groups of 16, 17 entries per block): every key is
/// found in one block, and the index stays under 2.5 bits per key.
#[test]
fn a_fixed_group_table_is_exact_and_small() {
    let mut next = xorshift(0x2545_f491_4f6c_dd1d);
    let groups: Vec<(u64, Vec<u64>)> = (0..2000)
        .map(|_| (next(), (0..16).map(|_| next()).collect()))
        .collect();
    let entries = table(groups, &[17]);
    let (_, idx) = build(&entries, 64);
    let mut cost = LookupCost::default();
    for &(p, s, b) in &entries {
        assert_eq!(idx.locate_counted(p, s, &mut cost), Some(b..b + 1));
    }
    assert_eq!(cost.lookups, entries.len() as u64);
    let bits = idx.bits_per_key();
    assert!(bits > 0.1 && bits < 2.5, "{bits} bits per key");
}

#[test]
fn an_unknown_version_is_corruption() {
    let (bytes, _) = build(&[(1, 1, 0)], 64);
    let mut body = bytes[..bytes.len() - 4].to_vec();
    body[0] = 3;
    let c = crc(&body);
    put_u32(&mut body, c);
    let Err(Error::Corruption { detail, .. }) = BlockIndex::decode(&body, Path::new("t"), 0) else {
        panic!("accepted version 3");
    };
    assert!(detail.contains("version 3"), "{detail}");
}

/// 2000 groups in a 1/4096 slice of the hash space (a merge's output table): level 1 buckets
/// the bits past the shared ones, so every lookup decodes about as many codes as in a table
/// spread over the whole space (a bucket of all 2000 would take hundreds), and hashes outside
/// the slice are absent with the right rank.
#[test]
fn a_table_of_a_narrow_hash_range_buckets_its_own_bits() {
    let mut next = xorshift(0x2545_f491_4f6c_dd1d);
    let base = 0xa5a0_0000_0000_0000u64;
    let groups: Vec<(u64, Vec<u64>)> = (0..2000)
        .map(|_| (base | next() >> 12, (0..16).map(|_| next()).collect()))
        .collect();
    let entries = table(groups, &[17]);
    let (bytes, idx) = build(&entries, 32);
    let mut cost = LookupCost::default();
    for &(p, s, b) in &entries {
        assert_eq!(idx.locate_counted(p, s, &mut cost), Some(b..b + 1));
    }
    let per = cost.trie_codes as f64 / cost.lookups as f64;
    assert!(per < 40.0, "{per} codes per lookup");
    let last = entries.last().unwrap().2;
    assert_eq!(idx.locate(base - 1, 0), None);
    assert_eq!(idx.prefix_blocks(base - 1), 0..0);
    assert_eq!(idx.locate(u64::MAX, 0), None);
    assert_eq!(idx.prefix_blocks(u64::MAX), last..last);
    check(&entries, &idx, &near(&entries));
    // The shared bits are in the bytes; a flipped one is caught (checksum) or refused.
    assert_eq!(bytes[0], format::VERSION);
}

/// An index of format version 1 (no shared-bits field: level 1 keyed by the hashes' own top
/// bits) still loads and answers as it did.
#[test]
fn version_1_indexes_still_load() {
    let mut next = xorshift(0x1234_5678_9abc_def1);
    // Hashes over the whole space: the builder shares no leading bits (as version 1 wrote).
    let mut groups: Vec<(u64, Vec<u64>)> = (0..300)
        .map(|_| (next(), (0..5).map(|_| next()).collect()))
        .collect();
    groups.push((0, vec![1]));
    groups.push((u64::MAX, vec![1]));
    let entries = table(groups, &[9]);
    let mut b = IndexBuilder::with_bucket_keys(32);
    for &(p, s, blk) in &entries {
        b.add(p, s, blk).unwrap();
    }
    let parts = b.into_parts().unwrap();
    assert_eq!((parts.shared_bits, parts.shared_top), (0, 0));
    let v2 = format::encode(&parts);
    // Version 1: the same bytes without the shared-bits byte and word after `bucket_bits`.
    let mut head = vec![1u8];
    crate::coding::put_varint(&mut head, parts.num_entries);
    crate::coding::put_varint(&mut head, u64::from(parts.num_blocks));
    crate::coding::put_varint(&mut head, u64::from(parts.num_groups));
    head.push(parts.bucket_bits);
    let mut v1 = head.clone();
    v1.extend_from_slice(&v2[head.len() + 9..v2.len() - 4]);
    let c = crc(&v1);
    put_u32(&mut v1, c);
    let idx = BlockIndex::decode(&v1, Path::new("t"), 0).unwrap();
    check(&entries, &idx, &near(&entries));
}
