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

mod cluster;
mod streamed;
