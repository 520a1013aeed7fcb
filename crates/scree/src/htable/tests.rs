//! HTable tests: round trips through real files, balancing under skew and crafted collisions,
//! version visibility, byte-flip robustness, reads per lookup, and BloomCluster round trips.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use proptest::prelude::*;

use super::*;
use crate::error::Error;
use crate::fs::std_fs::StdFs;
use crate::fs::{CountedReader, Env};
use crate::key::{make_ikey, ValueKind, MAX_SEQ};
use crate::stats::{IoStats, WriteCause};

const HK: [u8; 16] = *b"0123456789abcdef";

fn env() -> Env {
    Env {
        fs: Arc::new(StdFs),
        stats: Arc::new(IoStats::default()),
        direct_reads: false,
        mmap_reads: false,
    }
}

/// (user key, seq, kind, value)
type Version = (Vec<u8>, u64, ValueKind, Vec<u8>);

fn builder_for(versions: &[Version], opts: HTableOptions) -> HTableBuilder {
    let mut b = HTableBuilder::new(HK, opts);
    for (k, s, kind, v) in versions {
        b.add(placement_hash(&HK, k), make_ikey(k, *s, *kind), v.clone())
            .unwrap();
    }
    b
}

fn write_table(env: &Env, path: &Path, versions: &[Version], opts: HTableOptions) -> HTableSummary {
    let mut w = env.create(path, WriteCause::Flush).unwrap();
    let s = builder_for(versions, opts).finish(&mut w).unwrap();
    w.sync().unwrap();
    assert_eq!(w.len(), s.file_size);
    s
}

fn open(env: &Env, path: &Path, load_filters: bool) -> crate::Result<HTableReader> {
    HTableReader::open(env.open(path, false)?, load_filters)
}

/// The newest version of `k` visible at `snap` according to the model.
fn expected(versions: &[Version], k: &[u8], snap: u64) -> Option<(u64, ValueKind, Vec<u8>)> {
    versions
        .iter()
        .filter(|(uk, s, _, _)| uk == k && *s <= snap)
        .max_by_key(|(_, s, _, _)| *s)
        .map(|(_, s, kind, v)| (*s, *kind, v.clone()))
}

fn sorted_items(versions: &[Version]) -> Vec<HItem> {
    let mut v: Vec<HItem> = versions
        .iter()
        .map(|(k, s, kind, val)| HItem {
            hash: placement_hash(&HK, k),
            ikey: make_ikey(k, *s, *kind),
            value: val.clone(),
        })
        .collect();
    v.sort_by(|a, b| {
        a.hash
            .cmp(&b.hash)
            .then_with(|| crate::key::cmp_ikey(&a.ikey, &b.ikey))
    });
    v
}

fn check_all(r: &HTableReader, versions: &[Version]) {
    let keys: BTreeMap<&[u8], Vec<u64>> = versions.iter().fold(BTreeMap::new(), |mut m, v| {
        m.entry(&v.0[..]).or_insert_with(Vec::new).push(v.1);
        m
    });
    for (k, seqs) in &keys {
        let h = placement_hash(&HK, k);
        let mut snaps = vec![MAX_SEQ, 0];
        for s in seqs {
            snaps.push(*s);
            snaps.push(s.saturating_sub(1));
        }
        for snap in snaps {
            assert_eq!(
                r.get(h, k, snap).unwrap(),
                expected(versions, k, snap),
                "key {k:?} snap {snap}"
            );
        }
    }
    for i in 0..50u32 {
        let k = format!("absent-{i}").into_bytes();
        assert_eq!(r.get(placement_hash(&HK, &k), &k, MAX_SEQ).unwrap(), None);
    }
    assert_eq!(r.items().unwrap(), sorted_items(versions));
}

fn value(len: usize, seed: u64) -> Vec<u8> {
    (0..len)
        .map(|i| (seed as usize).wrapping_mul(31).wrapping_add(i) as u8)
        .collect()
}

#[test]
fn readers_are_shareable_across_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<HTableReader>();
    assert_send_sync::<BloomClusterReader>();
}

#[test]
fn hash_bit_layout() {
    let h: u128 = 0b101 << 125 | (0b011 << 122) | (1 << 121) | 0xdead_beef;
    assert_eq!(trie_child(h, 0), Some(0b101));
    assert_eq!(trie_child(h, 1), Some(0b011));
    assert_eq!(trie_child(h, 2), Some(0b100));
    assert_eq!(trie_child(h, 41), Some(((0xdead_beefu32 >> 2) & 7) as u8));
    assert_eq!(trie_child(h, 42), None);
    assert_eq!(hash_mark_infix(h), 0xdead_beef);
    assert_eq!(rank_in_bucket(h, 4), 0xdead_beefu32.rotate_left(4));
    // The bucket window is the 64 bits below the shift, scaled to the bucket count:
    // 0b101_011_1 / 2^7 of 1000 buckets at shift 0, 0b011_1 / 2^4 at shift 3, 1/2 at shift 6.
    assert_eq!(bucket_of(h, 1000, 0), 0b101_0111 * 1000 / 128);
    assert_eq!(bucket_of(h, 1000, 3), 0b0111 * 1000 / 16);
    assert_eq!(bucket_of(h, 1000, 6), 500);
    assert_eq!(bucket_of(h, 0, 6), 0);
    assert_eq!(bucket_of(u128::MAX, 7, 0), 6);
    assert_eq!(bucket_of(u128::MAX, 7, 127), 3);
    assert_eq!(bucket_shift_for_depth(2), 6);
    // The placement hash is keyed and stable.
    assert_ne!(placement_hash(&HK, b"a"), placement_hash(&[0; 16], b"a"));
    assert_eq!(placement_hash(&HK, b"a"), placement_hash(&HK, b"a"));
}

#[test]
fn buckets_follow_hash_order_inside_a_container() {
    // Keys of the depth-1 container under root child 5: they share the top 3 hash bits.
    let shift = bucket_shift_for_depth(1);
    let n = 1000u32;
    let mut hashes: Vec<u128> = (0..40_000u64)
        .map(|i| placement_hash(&HK, format!("k{i}").as_bytes()))
        .filter(|&h| trie_child(h, 0) == Some(5))
        .collect();
    assert!(hashes.len() > 4000);
    hashes.sort_unstable();
    let buckets: Vec<u32> = hashes.iter().map(|&h| bucket_of(h, n, shift)).collect();
    assert!(buckets.windows(2).all(|w| w[0] <= w[1]), "not monotone");
    assert_eq!(
        (buckets[0] < 10, *buckets.last().unwrap() > n - 10),
        (true, true)
    );
    // The items of child c (next three bits) have their homes in the c-th eighth of the table.
    for (&h, &b) in hashes.iter().zip(&buckets) {
        let c = u32::from(trie_child(h, 1).unwrap());
        assert!(
            b >= c * n / 8 && b < (c + 1) * n / 8,
            "child {c} bucket {b}"
        );
    }
}

#[test]
fn a_footer_of_another_version_or_a_bad_shift_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let env = env();
    let (mut bytes, _) = builder_for(&small_table_versions(), HTableOptions::default())
        .finish_to_vec()
        .unwrap();
    // Rewrite the footer as format version 1 with a valid checksum: the version check, not
    // the checksum, must refuse it (version 1 placed items by `hash mod n`).
    let f = bytes.len() - 112;
    let reseal = |bytes: &mut Vec<u8>| {
        let crc = super::format::region_crc(f as u64, &bytes[f..f + 100]);
        bytes[f + 100..f + 104].copy_from_slice(&crc.to_le_bytes());
    };
    let original = bytes.clone();
    bytes[f..f + 4].copy_from_slice(&1u32.to_le_bytes());
    reseal(&mut bytes);
    let p = dir.path().join("v1");
    std::fs::write(&p, &bytes).unwrap();
    match open(&env, &p, true) {
        Err(Error::Unsupported(m)) => assert!(m.contains("format version 1"), "{m}"),
        other => panic!("expected Unsupported, got {other:?}"),
    }
    // A table of format version 2 (a 104-byte footer without base_seq) is refused by its
    // version too, not reported as a checksum mismatch.
    let mut v2 = original[..f].to_vec();
    let g = v2.len();
    v2.extend_from_slice(&2u32.to_le_bytes());
    v2.extend_from_slice(&original[f + 4..f + 92]);
    let crc = super::format::region_crc(g as u64, &v2[g..g + 92]);
    v2.extend_from_slice(&crc.to_le_bytes());
    v2.extend_from_slice(&original[f + 104..]);
    assert_eq!(v2.len(), g + 104);
    let p2 = dir.path().join("v2");
    std::fs::write(&p2, &v2).unwrap();
    match open(&env, &p2, true) {
        Err(Error::Unsupported(m)) => assert!(m.contains("format version 2"), "{m}"),
        other => panic!("expected Unsupported, got {other:?}"),
    }
    // A bucket shift above 127 under a valid checksum is corruption, not a panic.
    bytes.copy_from_slice(&original);
    bytes[f + 12..f + 16].copy_from_slice(&200u32.to_le_bytes());
    reseal(&mut bytes);
    std::fs::write(&p, &bytes).unwrap();
    match open(&env, &p, true) {
        Err(e @ Error::Corruption { .. }) => assert!(e.to_string().contains("shift"), "{e}"),
        other => panic!("expected Corruption, got {other:?}"),
    }
    // So is an item count the entries' regions cannot hold (it sizes a scan's reservation,
    // and unchecked it would overflow a multiplication there).
    for count in [u64::MAX, 1 << 40] {
        bytes.copy_from_slice(&original);
        bytes[f + 16..f + 24].copy_from_slice(&count.to_le_bytes());
        reseal(&mut bytes);
        std::fs::write(&p, &bytes).unwrap();
        match open(&env, &p, true) {
            Err(e @ Error::Corruption { .. }) => {
                assert!(e.to_string().contains("item count"), "{e}")
            }
            other => panic!("expected Corruption, got {other:?}"),
        }
    }
    // So is a base sequence number above the largest sequence number.
    bytes.copy_from_slice(&original);
    bytes[f + 92..f + 100].copy_from_slice(&u64::MAX.to_le_bytes());
    reseal(&mut bytes);
    std::fs::write(&p, &bytes).unwrap();
    match open(&env, &p, true) {
        Err(e @ Error::Corruption { .. }) => assert!(e.to_string().contains("base"), "{e}"),
        other => panic!("expected Corruption, got {other:?}"),
    }
}

/// Also with the file mapped, where the scans refer to the map instead of copying the
/// buckets: the same items, the same bytes counted, and no copy on the heap.
#[test]
fn child_scans_add_up_to_the_full_scan_and_read_each_bucket_about_once() {
    for mapped in [false, true] {
        child_scans_add_up(mapped);
    }
}

fn child_scans_add_up(mapped: bool) {
    let dir = tempfile::tempdir().unwrap();
    let env = Env {
        mmap_reads: mapped,
        ..env()
    };
    // Keys of the depth-1 container under root child 2, every 500th with a value too large
    // for a bucket (overflow region).
    let mut versions: Vec<Version> = Vec::new();
    let mut i = 0u64;
    while versions.len() < 30_000 {
        let k = format!("key{i}").into_bytes();
        if trie_child(placement_hash(&HK, &k), 0) == Some(2) {
            let len = if versions.len() % 500 == 7 { 6000 } else { 100 };
            versions.push((k, i + 1, ValueKind::Put, value(len, i)));
        }
        i += 1;
    }
    let depth = 1;
    for (segments, shift) in [(8, 3), (1, 3), (8, 0)] {
        let p = dir.path().join(format!("t{segments}-{shift}"));
        let opts = HTableOptions {
            bucket_shift: shift,
            balance_segments: segments,
            ..Default::default()
        };
        let s = write_table(&env, &p, &versions, opts);
        assert!(s.n_buckets >= 8 * MIN_BUCKETS_PER_SEGMENT, "{s:?}");
        assert!(s.migrated_items > 0 && s.overflow_items >= 60, "{s:?}");
        let r = open(&env, &p, true).unwrap();
        let full = r.items().unwrap();
        let before = env.stats.snapshot();
        let mut parts = Vec::new();
        for c in 0..8u8 {
            let scan = r.scan_child(depth, c).unwrap();
            assert_eq!(
                scan.copied_bytes() == 0,
                mapped,
                "mapped {mapped}: {} bytes copied",
                scan.copied_bytes()
            );
            for i in 0..scan.len() {
                let (hash, ukey, trailer, value) = scan.get(i).unwrap();
                assert_eq!(trie_child(hash, depth), Some(c));
                let mut ikey = ukey.to_vec();
                ikey.extend_from_slice(&trailer.to_le_bytes());
                parts.push(HItem {
                    hash,
                    ikey,
                    value: value.to_vec(),
                });
            }
        }
        let read = env.stats.snapshot().bytes_read - before.bytes_read;
        assert_eq!(
            parts, full,
            "mapped {mapped} segments {segments} shift {shift}"
        );
        let table = u64::from(s.n_buckets) * BUCKET_SIZE as u64 + s.overflow_len;
        let extra_buckets = (read as f64 - table as f64) / BUCKET_SIZE as f64;
        println!("segments {segments} shift {shift}: {extra_buckets:.0} buckets read twice");
        match (segments, shift) {
            // Eight balancing segments: only the buckets shared by two children's ranges and
            // their migrations are read twice.
            (8, 3) => assert!(read <= table + 32 * BUCKET_SIZE as u64, "{read} vs {table}"),
            // Global balancing: migrations cross the children's ranges.
            (1, 3) => assert!(read > table + 100 * BUCKET_SIZE as u64, "{read} vs {table}"),
            // Not a table of this depth: every child reads all the buckets.
            _ => assert!(
                read >= 8 * u64::from(s.n_buckets) * BUCKET_SIZE as u64,
                "{read} vs {table}"
            ),
        }
    }
}

#[test]
fn sequence_numbers_round_trip_through_entry_tags() {
    // Entry tags count from the table's oldest sequence number: seqs from 1 to the largest
    // one, deletes among them, tags of 1 to 9 bytes.
    let dir = tempfile::tempdir().unwrap();
    let env = env();
    let mut versions: Vec<Version> = Vec::new();
    for (i, seq) in [1u64, 2, 127, 128, 1 << 20, 1 << 40, MAX_SEQ - 1, MAX_SEQ]
        .into_iter()
        .enumerate()
    {
        let kind = if i % 3 == 2 {
            ValueKind::Delete
        } else {
            ValueKind::Put
        };
        let v = if kind == ValueKind::Put {
            value(40, i as u64)
        } else {
            vec![]
        };
        versions.push((b"one key".to_vec(), seq, kind, v.clone()));
        versions.push((format!("key{i}").into_bytes(), seq, kind, v));
    }
    for base in [0usize, 4] {
        let vs = versions[base..].to_vec();
        let p = dir.path().join(format!("t{base}"));
        let s = write_table(&env, &p, &vs, HTableOptions::default());
        assert_eq!(s.min_seq, vs.iter().map(|v| v.1).min().unwrap());
        let r = open(&env, &p, true).unwrap();
        check_all(&r, &vs);
    }
}

#[test]
fn empty_and_tiny_tables() {
    let dir = tempfile::tempdir().unwrap();
    let env = env();
    for (name, versions) in [
        ("empty", vec![]),
        (
            "one",
            vec![(b"k".to_vec(), 5, ValueKind::Put, b"v".to_vec())],
        ),
        ("tomb", vec![(b"".to_vec(), 7, ValueKind::Delete, vec![])]),
    ] {
        let p = dir.path().join(name);
        let s = write_table(&env, &p, &versions, HTableOptions::default());
        assert_eq!(s.n_buckets, 1);
        let r = open(&env, &p, true).unwrap();
        check_all(&r, &versions);
    }
}

#[test]
fn builder_rejects_bad_input() {
    let mut b = HTableBuilder::new(HK, HTableOptions::default());
    assert!(matches!(
        b.add(0, make_ikey(b"k", 1, ValueKind::Put), vec![]),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        b.add(placement_hash(&HK, b"k"), b"short".to_vec(), vec![]),
        Err(Error::InvalidArgument(_))
    ));
    let v = vec![
        (b"k".to_vec(), 1, ValueKind::Put, vec![]),
        (b"k".to_vec(), 1, ValueKind::Put, vec![1]),
    ];
    assert!(matches!(
        builder_for(&v, HTableOptions::default()).finish_to_vec(),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn crafted_collisions_many_versions_and_large_values() {
    let dir = tempfile::tempdir().unwrap();
    let env = env();
    let n = 16;
    let mut versions: Vec<Version> = Vec::new();
    // 400 keys that all hash to bucket 3 of 16: about 13 buckets' worth of data in one bucket.
    let mut i = 0u64;
    while versions.len() < 400 {
        let k = format!("crafted-{i}").into_bytes();
        if bucket_of(placement_hash(&HK, &k), n, 0) == 3 {
            versions.push((k, i + 1, ValueKind::Put, value(100, i)));
        }
        i += 1;
    }
    // One key with 300 versions (one 30 KiB group: goes to the overflow region together).
    for s in 0..300u64 {
        let kind = if s % 7 == 3 {
            ValueKind::Delete
        } else {
            ValueKind::Put
        };
        versions.push((b"hot".to_vec(), 10_000 + s * 2, kind, value(90, s)));
    }
    // Large values, one with an older small version.
    versions.push((b"big".to_vec(), 50_000, ValueKind::Put, value(20_000, 1)));
    versions.push((b"big".to_vec(), 40_000, ValueKind::Put, value(10, 2)));
    versions.push((b"big2".to_vec(), 50_001, ValueKind::Put, value(4_095, 3)));
    let p = dir.path().join("t");
    let s = write_table(
        &env,
        &p,
        &versions,
        HTableOptions {
            n_buckets: Some(n),
            ..Default::default()
        },
    );
    assert!(s.migrated_items > 0, "{s:?}");
    assert!(s.overflow_items >= 303, "{s:?}");
    let r = open(&env, &p, true).unwrap();
    check_all(&r, &versions);
}

fn arb_versions() -> impl Strategy<Value = Vec<Version>> {
    let size = prop_oneof![
        8 => 0usize..200,
        2 => 200usize..1500,
        1 => 3000usize..9000,
    ];
    let ver = (0u64..1000, any::<bool>(), size);
    let key = prop::collection::vec(0u8..4, 0..6);
    prop::collection::btree_map(
        key,
        prop::collection::btree_map(0u64..1000, ver, 1..5),
        0..120,
    )
    .prop_map(|m| {
        let mut out = Vec::new();
        for (k, vs) in m {
            for (seq, (seed, put, len)) in vs {
                let kind = if put {
                    ValueKind::Put
                } else {
                    ValueKind::Delete
                };
                let v = if put { value(len, seed) } else { vec![] };
                out.push((k.clone(), seq + 1, kind, v));
            }
        }
        out
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn every_item_found_after_balancing(
        versions in arb_versions(),
        n_buckets in prop::option::of(1u32..12),
        cap in prop_oneof![Just(0.95f64), Just(1.0), Just(0.6)],
        load_filters in any::<bool>(),
        bucket_shift in prop_oneof![Just(0u32), Just(3), Just(30), Just(127)],
    ) {
        let dir = tempfile::tempdir().unwrap();
        let env = env();
        let p = dir.path().join("t");
        let opts = HTableOptions {
            n_buckets,
            bucket_fill_cap: cap,
            bucket_shift,
            ..Default::default()
        };
        let s = write_table(&env, &p, &versions, opts);
        prop_assert_eq!(s.items, versions.len() as u64);
        prop_assert!(s.max_fill <= cap + 1e-9);
        let r = open(&env, &p, load_filters).unwrap();
        check_all(&r, &versions);
    }
}

fn small_table_versions() -> Vec<Version> {
    let mut v: Vec<Version> = Vec::new();
    for i in 0..60u64 {
        let k = format!("key{i}").into_bytes();
        v.push((
            k.clone(),
            100 + i,
            ValueKind::Put,
            value(60 + (i as usize % 5) * 20, i),
        ));
        if i % 10 == 0 {
            v.push((k, 10 + i, ValueKind::Delete, vec![]));
        }
    }
    v.push((b"large".to_vec(), 500, ValueKind::Put, value(5000, 9)));
    v
}

/// Overwrites one byte of a file in place and restores it on drop.
struct Flip {
    file: std::fs::File,
    pos: u64,
    orig: u8,
}

impl Flip {
    fn new(path: &Path, pos: usize, new: u8, orig: u8) -> Self {
        use std::os::unix::fs::FileExt;
        let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
        file.write_all_at(&[new], pos as u64).unwrap();
        Flip {
            file,
            pos: pos as u64,
            orig,
        }
    }
}

impl Drop for Flip {
    fn drop(&mut self) {
        use std::os::unix::fs::FileExt;
        self.file.write_all_at(&[self.orig], self.pos).unwrap();
    }
}

#[test]
fn every_byte_flip_is_detected_or_harmless() {
    let dir = tempfile::tempdir().unwrap();
    let env = env();
    let versions = small_table_versions();
    let (bytes, s) = builder_for(
        &versions,
        HTableOptions {
            n_buckets: Some(2),
            bucket_fill_cap: 0.8,
            ..Default::default()
        },
    )
    .finish_to_vec()
    .unwrap();
    assert!(s.migrated_items > 0 && s.overflow_items > 0, "{s:?}");
    let mut keys: Vec<Vec<u8>> = versions.iter().map(|v| v.0.clone()).collect();
    keys.dedup();
    keys.push(b"absent".to_vec());
    let p = dir.path().join("flip");
    std::fs::write(&p, &bytes).unwrap();
    let want_items = sorted_items(&versions);
    let is_corruption = |e: &Error| matches!(e, Error::Corruption { .. });
    let mut detected = 0usize;
    for (pos, &orig) in bytes.iter().enumerate() {
        for x in [0x01u8, 0xff] {
            let _flip = Flip::new(&p, pos, orig ^ x, orig);
            for load_filters in [true, false] {
                let r = match open(&env, &p, load_filters) {
                    Ok(r) => r,
                    Err(e) => {
                        assert!(is_corruption(&e), "pos {pos}: {e}");
                        detected += 1;
                        continue;
                    }
                };
                for k in &keys {
                    match r.get(placement_hash(&HK, k), k, MAX_SEQ) {
                        Ok(got) => {
                            assert_eq!(got, expected(&versions, k, MAX_SEQ), "pos {pos} key {k:?}")
                        }
                        Err(e) => {
                            assert!(is_corruption(&e), "pos {pos}: {e}");
                            detected += 1;
                        }
                    }
                }
                if load_filters {
                    match r.items() {
                        Ok(items) => assert_eq!(items, want_items, "pos {pos}"),
                        Err(e) => assert!(is_corruption(&e), "pos {pos}: {e}"),
                    }
                }
            }
        }
    }
    assert!(detected > bytes.len());
}

fn reads_per_lookup(
    n_items: u64,
    value_len: impl Fn(u64) -> usize,
    label: &str,
    opts: HTableOptions,
) -> f64 {
    let dir = tempfile::tempdir().unwrap();
    let env = env();
    let key = |i: u64| format!("{:016x}", i.wrapping_mul(0x9e37_79b9_7f4a_7c15)).into_bytes();
    let versions: Vec<Version> = (0..n_items)
        .map(|i| (key(i), i + 1, ValueKind::Put, value(value_len(i), i)))
        .collect();
    let p = dir.path().join("t");
    let s = write_table(&env, &p, &versions, opts);
    let r = open(&env, &p, true).unwrap();
    let before = env.stats.snapshot();
    for (k, s, _, v) in &versions {
        let got = r.get(placement_hash(&HK, k), k, MAX_SEQ).unwrap().unwrap();
        assert_eq!((got.0, &got.2), (*s, v));
    }
    let mid = env.stats.snapshot();
    let absent = 100_000u64;
    for i in 0..absent {
        let k = format!("absent{i:010}").into_bytes();
        assert!(r
            .get(placement_hash(&HK, &k), &k, MAX_SEQ)
            .unwrap()
            .is_none());
    }
    let after = env.stats.snapshot();
    let per = (mid.data_block_reads - before.data_block_reads) as f64 / n_items as f64;
    let fp = (after.data_block_reads - mid.data_block_reads) as f64 / absent as f64;
    assert_eq!(mid.metadata_block_reads, before.metadata_block_reads);
    println!(
        "{label}: {n_items} items, {} buckets, migrated {} ({:.2}%), overflow {}, sources {} ({:.1}%), \
         records {} ({} B pinned), filters {} B, meta {} B, file {} B ({:.1}% of entry bytes), \
         max fill {:.3}, data reads per positive lookup {per:.4}, per absent lookup {fp:.5}",
        s.n_buckets,
        s.migrated_items,
        100.0 * s.migrated_items as f64 / n_items as f64,
        s.overflow_items,
        s.source_buckets,
        100.0 * f64::from(s.source_buckets) / f64::from(s.n_buckets),
        s.migration_records,
        s.migration_records * 12,
        s.filter_len,
        s.meta_len,
        s.file_size,
        100.0 * s.file_size as f64 / s.entry_bytes as f64,
        s.max_fill,
    );
    per
}

#[test]
fn about_one_data_read_per_lookup() {
    let opts = HTableOptions::default();
    let per = reads_per_lookup(100_000, |_| 100, "16B keys / 100B values", opts);
    assert!(per < 1.05, "{per}");
    let uniform = |i: u64| 1 + (i.wrapping_mul(2_654_435_761) % 200) as usize;
    let per = reads_per_lookup(100_000, uniform, "16B keys / 1..200B values", opts);
    assert!(per < 1.05, "{per}");
}

/// Parameter sweep behind the defaults in docs/format-htable.md (run with `--ignored`).
#[test]
#[ignore]
fn sweep_fill_parameters() {
    let uniform = |i: u64| 1 + (i.wrapping_mul(2_654_435_761) % 200) as usize;
    let large = |i: u64| 1 + (i.wrapping_mul(2_654_435_761) % 800) as usize;
    for (target_fill, bucket_fill_cap) in [
        (0.90, 0.95),
        (0.90, 1.0),
        (0.95, 1.0),
        (0.85, 0.95),
        (0.80, 0.90),
    ] {
        let opts = HTableOptions {
            target_fill,
            bucket_fill_cap,
            ..Default::default()
        };
        let label = format!("fill {target_fill} cap {bucket_fill_cap} 1..200B");
        reads_per_lookup(100_000, uniform, &label, opts);
        let label = format!("fill {target_fill} cap {bucket_fill_cap} 1..800B");
        reads_per_lookup(30_000, large, &label, opts);
    }
}

// ---- BloomCluster ----

fn cluster_fixture(
    dir: &Path,
    env: &Env,
    n: u32,
    sublevels: u64,
    per_level: u64,
) -> (Vec<Vec<Version>>, Vec<HTableReader>) {
    let mut all = Vec::new();
    let mut readers = Vec::new();
    for lvl in 0..sublevels {
        let versions: Vec<Version> = (0..per_level)
            .map(|i| {
                let k = format!("L{lvl}-k{i}").into_bytes();
                (k, lvl * 1_000_000 + i + 1, ValueKind::Put, value(50, i))
            })
            .collect();
        let p = dir.join(format!("sub{lvl}"));
        write_table(
            env,
            &p,
            &versions,
            HTableOptions {
                n_buckets: Some(n),
                ..Default::default()
            },
        );
        readers.push(open(env, &p, false).unwrap());
        all.push(versions);
    }
    (all, readers)
}

#[test]
fn bloom_cluster_round_trip_and_lookup() {
    let dir = tempfile::tempdir().unwrap();
    let env = env();
    let n = 8;
    let (all, readers) = cluster_fixture(dir.path(), &env, n, 6, 300);
    let mut b = BloomClusterBuilder::new(n);
    for (i, r) in readers.iter().take(5).enumerate() {
        b.add_sublevel(100 + i as u64, r.read_filters().unwrap())
            .unwrap();
    }
    assert_eq!(b.overflowing_column(), None);
    let cp = dir.path().join("cluster");
    let mut w = env.create(&cp, WriteCause::Metadata).unwrap();
    b.finish(&mut w).unwrap();
    w.sync().unwrap();

    // Adding the sixth sub-level rebuilds from the old cluster, same bytes as from scratch.
    let c = BloomClusterReader::open(env.open(&cp, false).unwrap()).unwrap();
    assert_eq!(c.table_ids(), &[100, 101, 102, 103, 104]);
    let mut b2 = BloomClusterBuilder::from_reader(&c).unwrap();
    b2.add_sublevel(105, readers[5].read_filters().unwrap())
        .unwrap();
    b.add_sublevel(105, readers[5].read_filters().unwrap())
        .unwrap();
    assert_eq!(b2.finish_to_vec().unwrap(), b.finish_to_vec().unwrap());
    std::fs::write(&cp, b2.finish_to_vec().unwrap()).unwrap();
    let c = BloomClusterReader::open(env.open(&cp, false).unwrap()).unwrap();
    assert_eq!(c.n_sublevels(), 6);

    // Lookup: one metadata read (the column), then about one data read.
    let before = env.stats.snapshot();
    let mut lookups = 0u64;
    let mut false_candidates = 0usize;
    for (lvl, versions) in all.iter().enumerate() {
        for (k, s, _, v) in versions {
            let h = placement_hash(&HK, k);
            let col = c.column(bucket_of(h, n, 0)).unwrap();
            let cands = col.candidates(k);
            assert!(cands.contains(&lvl));
            false_candidates += cands.len() - 1;
            let got = readers[lvl].get_unfiltered(h, k, MAX_SEQ).unwrap().unwrap();
            assert_eq!((got.0, &got.2), (*s, v));
            lookups += 1;
        }
    }
    let after = env.stats.snapshot();
    assert_eq!(
        after.metadata_block_reads - before.metadata_block_reads,
        lookups
    );
    assert_eq!(after.data_block_reads - before.data_block_reads, lookups);
    assert!(
        false_candidates < lookups as usize / 20,
        "{false_candidates}"
    );
    let k = b"absent";
    let col = c.column(bucket_of(placement_hash(&HK, k), n, 0)).unwrap();
    assert!(col.candidates(k).len() <= 1);
    assert!(matches!(c.column(n), Err(Error::InvalidArgument(_))));

    // retain drops a sub-level.
    b.retain(|id| id != 102);
    assert_eq!(b.table_ids(), &[100, 101, 103, 104, 105]);
}

#[test]
fn bloom_cluster_too_large_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let env = env();
    // 2 buckets of ~60 keys: ~120 B filters per column per sub-level; 40 sub-levels do not fit.
    let (_, readers) = cluster_fixture(dir.path(), &env, 2, 1, 120);
    let f = readers[0].read_filters().unwrap();
    let mut b = BloomClusterBuilder::new(2);
    for i in 0..40 {
        b.add_sublevel(i, f.clone()).unwrap();
    }
    let (col, need) = b.overflowing_column().unwrap();
    assert!(need > CLUSTER_BLOCK_SIZE);
    match b.finish_to_vec() {
        Err(Error::InvalidArgument(m)) => assert!(m.contains(&format!("column {col}")), "{m}"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        b.add_sublevel(99, FilterSet::from_filters([vec![1u8]])),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn bloom_cluster_byte_flips_are_detected_or_harmless() {
    let dir = tempfile::tempdir().unwrap();
    let env = env();
    let n = 2;
    let (_, readers) = cluster_fixture(dir.path(), &env, n, 3, 30);
    let mut b = BloomClusterBuilder::new(n);
    for (i, r) in readers.iter().enumerate() {
        b.add_sublevel(i as u64 + 7, r.read_filters().unwrap())
            .unwrap();
    }
    let bytes = b.finish_to_vec().unwrap();
    let cp = dir.path().join("c");
    std::fs::write(&cp, &bytes).unwrap();
    let good = BloomClusterReader::open(env.open(&cp, false).unwrap()).unwrap();
    let good_cols: Vec<BloomColumn> = (0..n).map(|c| good.column(c).unwrap()).collect();
    for (pos, &orig) in bytes.iter().enumerate() {
        let _flip = Flip::new(&cp, pos, orig ^ 0x10, orig);
        let r = match BloomClusterReader::open(env.open(&cp, false).unwrap()) {
            Ok(r) => r,
            Err(e) => {
                assert!(matches!(e, Error::Corruption { .. }), "pos {pos}: {e}");
                continue;
            }
        };
        assert_eq!(r.table_ids(), good.table_ids());
        for c in 0..n {
            match r.column(c) {
                Ok(col) => assert_eq!(col, good_cols[c as usize], "pos {pos}"),
                Err(e) => assert!(matches!(e, Error::Corruption { .. }), "pos {pos}: {e}"),
            }
        }
    }
}

/// A cluster trailer (valid checksum) whose column count its blocks cannot hold is refused at
/// open. Without the check, u32::MAX columns would open and a rebuild reserve ~96 GB.
#[test]
fn bloom_cluster_with_more_columns_than_its_blocks_hold_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let env = env();
    let (_, readers) = cluster_fixture(dir.path(), &env, 2, 2, 30);
    let mut b = BloomClusterBuilder::new(2);
    for (i, r) in readers.iter().enumerate() {
        b.add_sublevel(i as u64, r.read_filters().unwrap()).unwrap();
    }
    let good = b.finish_to_vec().unwrap();
    let cp = dir.path().join("c");
    for n_columns in [u64::from(u32::MAX), 2 + u64::from(u16::MAX)] {
        let mut bytes = good.clone();
        let len = bytes.len();
        // Trailer: ids (2 × 8), directory (1 block × 4), then the 36-byte fixed end whose
        // first field is n_columns; the checksum (at len − 12) covers the trailer before it.
        let trailer_off = len - (2 * 8 + 4 + 36);
        bytes[len - 36..len - 28].copy_from_slice(&n_columns.to_le_bytes());
        let crc = super::format::region_crc(trailer_off as u64, &bytes[trailer_off..len - 12]);
        bytes[len - 12..len - 8].copy_from_slice(&crc.to_le_bytes());
        std::fs::write(&cp, &bytes).unwrap();
        match BloomClusterReader::open(env.open(&cp, false).unwrap()) {
            Err(e @ Error::Corruption { .. }) => {
                assert!(e.to_string().contains("block directory"), "{e}")
            }
            other => panic!(
                "{n_columns} columns: expected Corruption, got {:?}",
                other.map(|r| r.n_columns())
            ),
        }
    }
    // The unmodified file opens (the edit above is the only difference).
    std::fs::write(&cp, &good).unwrap();
    assert_eq!(
        BloomClusterReader::open(env.open(&cp, false).unwrap())
            .unwrap()
            .n_columns(),
        2
    );
}

#[test]
fn reader_rejects_non_tables() {
    let dir = tempfile::tempdir().unwrap();
    let env = env();
    let p = dir.path().join("x");
    for bytes in [vec![], vec![0u8; 50], vec![7u8; 9000]] {
        std::fs::write(&p, &bytes).unwrap();
        let e = open(&env, &p, true).unwrap_err();
        assert!(matches!(e, Error::Corruption { .. }), "{e}");
    }
    let _: Option<CountedReader> = None;
}

#[test]
fn bloom_cluster_packs_several_columns_per_block() {
    let dir = tempfile::tempdir().unwrap();
    let env = env();
    let n = 300;
    let (all, readers) = cluster_fixture(dir.path(), &env, n, 3, 3000);
    let mut b = BloomClusterBuilder::new(n);
    for (i, r) in readers.iter().enumerate() {
        b.add_sublevel(10 + i as u64, r.read_filters().unwrap())
            .unwrap();
    }
    let bytes = b.finish_to_vec().unwrap();
    let cp = dir.path().join("cluster");
    std::fs::write(&cp, &bytes).unwrap();
    let c = BloomClusterReader::open(env.open(&cp, false).unwrap()).unwrap();
    // ~10 keys per column per sub-level: 3 × ~21 B per column, ~60 columns per block.
    assert!(
        c.n_blocks() > 1 && c.n_blocks() < n as usize / 20,
        "{}",
        c.n_blocks()
    );
    assert!(bytes.len() < n as usize * CLUSTER_BLOCK_SIZE / 20);
    let before = env.stats.snapshot();
    let mut lookups = 0;
    for (lvl, versions) in all.iter().enumerate() {
        for (k, _, _, _) in versions {
            let h = placement_hash(&HK, k);
            let col = c.column(bucket_of(h, n, 0)).unwrap();
            assert!(col.candidates(k).contains(&lvl));
            lookups += 1;
        }
    }
    let after = env.stats.snapshot();
    assert_eq!(
        after.metadata_block_reads - before.metadata_block_reads,
        lookups
    );
    // Rebuilding from the file gives the same bytes.
    let b2 = BloomClusterBuilder::from_reader(&c).unwrap();
    assert_eq!(b2.finish_to_vec().unwrap(), bytes);
}

/// Versions with skewed value sizes (a few larger than a bucket) and several per key.
fn skewed_versions(n: u64, seed: u64) -> Vec<Version> {
    let mut x = seed | 1;
    let mut rnd = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut vs: Vec<Version> = Vec::new();
    for i in 0..n {
        let k = format!("key{:012}", rnd() % (n * 3 / 4)).into_bytes();
        let r = rnd();
        let vlen = match r % 100 {
            0 => 5000,
            1..=5 => 900,
            _ => 100,
        };
        let kind = if r % 17 == 0 {
            ValueKind::Delete
        } else {
            ValueKind::Put
        };
        vs.push((k, 1000 + i, kind, vec![(r & 0xff) as u8; vlen]));
    }
    vs
}

/// A table written segment by segment (`HTableStream`, as a garbage collection writes one) is
/// byte for byte the table written at once, when given the same bucket count and base; each
/// segment's items are what `scan_window` returns for its windows, and a `TableSizer` pass
/// over the items chooses the bucket count the one-shot writer chose.
#[test]
fn a_table_streamed_by_segment_equals_the_table_written_at_once() {
    let vs = skewed_versions(40_000, 12345);
    let env = env();
    let dir = tempfile::tempdir().unwrap();
    for (i, opts) in [
        HTableOptions {
            balance_segments: 8,
            target_fill: 0.95,
            bucket_fill_cap: 1.0,
            ..Default::default()
        },
        HTableOptions {
            balance_segments: 8,
            bucket_fill_cap: 0.9,
            ..Default::default()
        },
        HTableOptions::default(),
    ]
    .into_iter()
    .enumerate()
    {
        let (want, s) = builder_for(&vs, opts).finish_to_vec().unwrap();
        assert!(s.overflow_items > 0 && s.migrated_items > 0);
        let items = sorted_items(&vs);
        let base = items
            .iter()
            .map(|it| crate::key::parse(&it.ikey).seq)
            .min()
            .unwrap();
        let mut sizer = TableSizer::new(&opts, base).unwrap();
        for it in &items {
            let p = crate::key::parse(&it.ikey);
            sizer.add(it.hash, p.user_key.len(), it.value.len(), p.trailer());
        }
        assert_eq!(sizer.items(), items.len() as u64);
        assert_eq!(sizer.oldest_seq(), base);
        assert_eq!(sizer.n_buckets(), s.n_buckets);

        // The one-shot table, to scan by window.
        let one = dir.path().join(format!("one{i}"));
        std::fs::write(&one, &want).unwrap();
        let r = open(&env, &one, false).unwrap();

        let path = dir.path().join(format!("t{i}"));
        let mut w = env.create(&path, WriteCause::Gc).unwrap();
        let mut st = HTableStream::new(HK, opts, s.n_buckets, base, &mut w).unwrap();
        assert_eq!(st.segments(), if i < 2 { 8 } else { 1 });
        let mut seen = 0;
        for k in 0..st.segments() {
            let (lo, hi) = st.segment_windows(k).unwrap();
            let scan = r.scan_window(0, lo, hi).unwrap();
            let refs: Vec<ItemRef<'_>> = (0..scan.len())
                .map(|j| {
                    let (hash, ukey, trailer, value) = scan.get(j).unwrap();
                    ItemRef {
                        hash,
                        ukey,
                        trailer,
                        value,
                        bloom: crate::filter::bloom::bloom_hash(ukey),
                    }
                })
                .collect();
            seen += refs.len();
            st.write_segment(refs).unwrap();
        }
        assert_eq!(seen, items.len());
        let (s2, _) = st.finish().unwrap();
        w.sync().unwrap();
        drop(w);
        assert_eq!(s2, s);
        assert!(std::fs::read(&path).unwrap() == want, "options {i}");
    }
}

/// A streamed table refuses an item outside the segment being written and one older than
/// the base it was given, with the reason.
#[test]
fn a_streamed_table_refuses_items_outside_its_segment_or_base() {
    let env = env();
    let dir = tempfile::tempdir().unwrap();
    let opts = HTableOptions {
        balance_segments: 8,
        ..Default::default()
    };
    let ukey = b"k".as_slice();
    let hash = placement_hash(&HK, ukey);
    let item = |seq: u64| ItemRef {
        hash,
        ukey,
        trailer: (seq << 8) | 1,
        value: b"v",
        bloom: crate::filter::bloom::bloom_hash(ukey),
    };
    let n = 1024;
    let seg = (bucket_of(hash, n, 0) as usize * 8 / n as usize) as u32;
    let mut w = env.create(&dir.path().join("a"), WriteCause::Gc).unwrap();
    let mut st = HTableStream::new(HK, opts, n, 10, &mut w).unwrap();
    match st.write_segment(vec![item(5)]) {
        Err(Error::InvalidArgument(m)) => assert!(m.contains("below the table's base 10"), "{m}"),
        other => panic!("{other:?}"),
    }
    let mut w = env.create(&dir.path().join("b"), WriteCause::Gc).unwrap();
    let mut st = HTableStream::new(HK, opts, n, 10, &mut w).unwrap();
    for _ in 0..(seg + 1) % 8 {
        st.write_segment(Vec::new()).unwrap();
    }
    match st.write_segment(vec![item(20)]) {
        Err(Error::InvalidArgument(m)) => assert!(m.contains("given with segment"), "{m}"),
        other => panic!("{other:?}"),
    }
}

fn item_ref(it: &HItem) -> ItemRef<'_> {
    let p = crate::key::parse(&it.ikey);
    ItemRef {
        hash: it.hash,
        ukey: p.user_key,
        trailer: p.trailer(),
        value: &it.value,
        bloom: crate::filter::bloom::bloom_hash(p.user_key),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Any items, bucket count (one segment or eight, many empty), shift and cap: the table
    /// streamed segment by segment, each segment given the items whose bucket windows lie in
    /// `segment_windows`, is the one-shot table byte for byte, and `scan_window` of that table
    /// returns each segment's items.
    #[test]
    fn a_streamed_table_equals_the_one_shot_table(
        versions in arb_versions(),
        n_buckets in prop_oneof![1u32..12, 500u32..1100],
        segments in prop_oneof![Just(1u32), Just(8)],
        bucket_shift in prop_oneof![Just(0u32), Just(3), Just(127)],
        cap in prop_oneof![Just(0.95f64), Just(1.0)],
    ) {
        let opts = HTableOptions {
            n_buckets: Some(n_buckets),
            balance_segments: segments,
            bucket_fill_cap: cap,
            bucket_shift,
            ..Default::default()
        };
        let (want, s) = builder_for(&versions, opts).finish_to_vec().unwrap();
        let items = sorted_items(&versions);
        let base = items
            .iter()
            .map(|it| crate::key::parse(&it.ikey).seq)
            .min()
            .unwrap_or(0);
        let dir = tempfile::tempdir().unwrap();
        let env = env();
        let one = dir.path().join("one");
        std::fs::write(&one, &want).unwrap();
        let r = open(&env, &one, false).unwrap();
        let path = dir.path().join("t");
        let mut w = env.create(&path, WriteCause::Gc).unwrap();
        let mut st = HTableStream::new(HK, opts, n_buckets, base, &mut w).unwrap();
        let mut given = 0;
        for k in 0..st.segments() {
            let (lo, hi) = st.segment_windows(k).unwrap();
            let seg: Vec<ItemRef<'_>> = items
                .iter()
                .filter(|it| (lo..=hi).contains(&bucket_window(it.hash, bucket_shift)))
                .map(item_ref)
                .collect();
            prop_assert_eq!(r.scan_window(bucket_shift, lo, hi).unwrap().len(), seg.len());
            given += seg.len();
            st.write_segment(seg).unwrap();
        }
        prop_assert_eq!(given, items.len());
        let (s2, _) = st.finish().unwrap();
        w.sync().unwrap();
        drop(w);
        prop_assert_eq!(s2, s);
        prop_assert!(std::fs::read(&path).unwrap() == want);
    }
}
