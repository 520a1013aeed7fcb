//! Public-API edge cases (review).
#![allow(clippy::unwrap_used)]
mod common;
use std::collections::BTreeMap;
use std::ops::Bound;

use common::*;
use scree::{Db, Error, Layout, WriteBatch, WriteOptions, MAX_KEY_BYTES, MAX_VALUE_BYTES};

const SORTED: [Layout; 2] = [Layout::Leveled, Layout::Fragmented];
/// Every layout this build implements.
fn all() -> Vec<Layout> {
    Layout::implemented()
}

#[test]
fn open_on_a_regular_file_is_an_error() {
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("file");
    std::fs::write(&f, b"hello").unwrap();
    for create in [true, false] {
        let mut o = small_db();
        o.create_if_missing = create;
        let r = Db::open(&f, o);
        assert!(r.is_err(), "create={create}");
        eprintln!("{}", r.unwrap_err());
    }
    assert_eq!(std::fs::read(&f).unwrap(), b"hello");
}

#[test]
fn open_below_a_regular_file_is_an_error() {
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("file");
    std::fs::write(&f, b"hello").unwrap();
    let r = Db::open(f.join("db"), small_db());
    eprintln!("{:?}", r.as_ref().err());
    assert!(r.is_err());
}

/// `create_if_missing: false` on an existing directory that holds no database (an unmounted
/// mount point, a mistyped path to a parent directory) created a fresh, empty database there.
#[test]
fn create_if_missing_false_refuses_a_directory_without_a_database() {
    let d = tempfile::tempdir().unwrap();
    let mut o = small_db();
    o.create_if_missing = false;
    let r = Db::open(d.path(), o.clone());
    assert!(
        matches!(r, Err(Error::InvalidArgument(_))),
        "{:?}",
        r.map(|_| ())
    );
    assert_eq!(
        std::fs::read_dir(d.path()).unwrap().count(),
        0,
        "nothing created"
    );
    // Nor a directory of other files.
    std::fs::write(d.path().join("notes.txt"), b"x").unwrap();
    let r = Db::open(d.path(), o);
    let e = r.map(|_| ()).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
    assert!(
        e.to_string().contains(&d.path().display().to_string()),
        "{e}"
    );
    assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1);
}

#[test]
fn create_if_missing_false_on_existing_db() {
    let d = tempfile::tempdir().unwrap();
    {
        let db = Db::open(d.path(), small_db()).unwrap();
        db.keyspace("k", small_ks(Layout::Leveled))
            .unwrap()
            .put("a", "b")
            .unwrap();
    }
    let mut o = small_db();
    o.create_if_missing = false;
    let db = Db::open(d.path(), o).unwrap();
    let ks = db.keyspace("k", small_ks(Layout::Leveled)).unwrap();
    assert_eq!(ks.get("a").unwrap(), Some(b"b".to_vec()));
}

#[test]
fn keyspace_names() {
    let d = tempfile::tempdir().unwrap();
    let names: Vec<String> = vec![
        "/".into(),
        "..".into(),
        ".".into(),
        "a/../b".into(),
        "nul\0byte".into(),
        "ü".repeat(127),
        "x".repeat(255),
        " ".into(),
        "LOCK".into(),
        "CURRENT".into(),
    ];
    {
        let db = Db::open(d.path(), small_db()).unwrap();
        assert!(matches!(
            db.keyspace("", small_ks(Layout::Leveled)),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            db.keyspace(&"x".repeat(256), small_ks(Layout::Leveled)),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            db.keyspace(&"ü".repeat(128), small_ks(Layout::Leveled)),
            Err(Error::InvalidArgument(_))
        ));
        for (i, n) in names.iter().enumerate() {
            let ks = db.keyspace(n, small_ks(all()[i % all().len()])).unwrap();
            ks.put(n, n).unwrap();
        }
        db.flush().unwrap();
    }
    let db = Db::open(d.path(), small_db()).unwrap();
    let mut want = names.clone();
    want.sort();
    assert_eq!(db.keyspace_names(), want);
    for (i, n) in names.iter().enumerate() {
        let ks = db.keyspace(n, small_ks(all()[i % all().len()])).unwrap();
        assert_eq!(ks.get(n).unwrap(), Some(n.as_bytes().to_vec()));
    }
    assert!(scree::check::check_db(d.path()).unwrap().is_empty());
}

#[test]
fn layout_mismatch_after_reopen() {
    let d = tempfile::tempdir().unwrap();
    {
        let db = Db::open(d.path(), small_db()).unwrap();
        db.keyspace("k", small_ks(Layout::Fragmented))
            .unwrap()
            .put("a", "b")
            .unwrap();
    }
    let db = Db::open(d.path(), small_db()).unwrap();
    for l in [
        Layout::Leveled,
        Layout::Trie,
        Layout::SemiSorted { prefix_len: 4 },
        Layout::Lightweight,
    ] {
        let r = db.keyspace("k", small_ks(l));
        assert!(
            matches!(r, Err(Error::InvalidArgument(_))),
            "{l}: {:?}",
            r.err()
        );
    }
    // A layout this build does not implement is refused by name.
    let missing = [Layout::Lightweight]
        .into_iter()
        .find(|l| !Layout::implemented().iter().any(|i| i.name() == l.name()));
    if let Some(l) = missing {
        match db.keyspace("new", small_ks(l)) {
            Err(Error::Unsupported(m)) => assert!(m.contains(l.name()), "{m}"),
            other => panic!("{l}: {:?}", other.err()),
        }
    }
    assert_eq!(db.keyspace_names(), vec!["k".to_string()]);
    let ks = db.keyspace("k", small_ks(Layout::Fragmented)).unwrap();
    assert_eq!(ks.get("a").unwrap(), Some(b"b".to_vec()));
}

#[test]
fn size_limits() {
    for l in all() {
        let d = tempfile::tempdir().unwrap();
        let big_key = vec![0xabu8; MAX_KEY_BYTES];
        let big_val = vec![0x5au8; MAX_VALUE_BYTES];
        {
            let db = Db::open(d.path(), small_db()).unwrap();
            let ks = db.keyspace("k", small_ks(l)).unwrap();
            ks.put(&big_key, b"v").unwrap();
            ks.put(b"bigv", &big_val).unwrap();
            if common::min_key_len(l) == 0 {
                ks.put(b"", b"").unwrap();
            } else {
                assert!(matches!(ks.put(b"", b""), Err(Error::InvalidArgument(_))));
            }
            ks.put(b"e", b"").unwrap();
            assert!(matches!(
                ks.put(vec![1u8; MAX_KEY_BYTES + 1], b"v"),
                Err(Error::InvalidArgument(_))
            ));
            assert!(matches!(
                ks.put(b"x", vec![1u8; MAX_VALUE_BYTES + 1]),
                Err(Error::InvalidArgument(_))
            ));
            assert!(matches!(
                ks.delete(vec![1u8; MAX_KEY_BYTES + 1]),
                Err(Error::InvalidArgument(_))
            ));
            let mut b = WriteBatch::new();
            b.put(&ks, b"ok", b"ok");
            b.put(&ks, vec![1u8; MAX_KEY_BYTES + 1], b"v");
            assert!(matches!(
                db.write(b, &WriteOptions::default()),
                Err(Error::InvalidArgument(_))
            ));
            assert_eq!(ks.get(b"ok").unwrap(), None);
            for i in 0..2000u32 {
                ks.put(format!("k{i:05}"), vec![1u8; 100]).unwrap();
            }
            db.flush().unwrap();
            db.compact().unwrap();
            assert_eq!(ks.get(&big_key).unwrap().as_deref(), Some(&b"v"[..]));
            assert!(ks.get(b"bigv").unwrap() == Some(big_val.clone()), "{l}");
            let empty = (common::min_key_len(l) == 0).then(Vec::new);
            assert_eq!(ks.get(b"").unwrap(), empty);
            assert_eq!(ks.get(b"e").unwrap(), Some(vec![]));
        }
        let db = Db::open(d.path(), small_db()).unwrap();
        let ks = db.keyspace("k", small_ks(l)).unwrap();
        assert_eq!(ks.get(&big_key).unwrap().as_deref(), Some(&b"v"[..]));
        assert!(ks.get(b"bigv").unwrap() == Some(big_val.clone()), "{l}");
        let empty = (common::min_key_len(l) == 0).then(Vec::new);
        assert_eq!(ks.get(b"").unwrap(), empty);
        if l.order().serves_range() {
            let first = ks.range::<&[u8], _>(..).next().unwrap().unwrap();
            assert_eq!(first, (vec![], vec![]));
            let last = ks.range::<&[u8], _>(..).next_back().unwrap().unwrap();
            assert_eq!(last.0, big_key);
        }
        drop((ks, db));
        assert!(scree::check::check_db(d.path()).unwrap().is_empty(), "{l}");
    }
}

#[test]
fn batch_over_many_keyspaces() {
    let d = tempfile::tempdir().unwrap();
    let n = 150;
    {
        let db = Db::open(d.path(), small_db()).unwrap();
        let kss: Vec<_> = (0..n)
            .map(|i| {
                db.keyspace(&format!("ks{i}"), small_ks(all()[i % all().len()]))
                    .unwrap()
            })
            .collect();
        let mut b = WriteBatch::new();
        for (i, ks) in kss.iter().enumerate() {
            b.put(ks, format!("key{i}"), format!("v{i}"));
            if common::min_key_len(all()[i % all().len()]) == 0 {
                b.put(ks, b"", format!("e{i}"));
            }
            b.delete(ks, b"gone");
        }
        db.write(b, &WriteOptions { sync: true }).unwrap();
        for (i, ks) in kss.iter().enumerate() {
            assert_eq!(
                ks.get(format!("key{i}")).unwrap(),
                Some(format!("v{i}").into_bytes())
            );
        }
    }
    // Recovery from the WAL.
    let db = Db::open(d.path(), small_db()).unwrap();
    for i in 0..n {
        let ks = db
            .keyspace(&format!("ks{i}"), small_ks(all()[i % all().len()]))
            .unwrap();
        assert_eq!(
            ks.get(format!("key{i}")).unwrap(),
            Some(format!("v{i}").into_bytes())
        );
        let empty = (common::min_key_len(all()[i % all().len()]) == 0)
            .then(|| format!("e{i}").into_bytes());
        assert_eq!(ks.get(b"").unwrap(), empty);
    }
    db.flush().unwrap();
    drop(db);
    let db = Db::open(d.path(), small_db()).unwrap();
    for i in 0..n {
        let ks = db
            .keyspace(&format!("ks{i}"), small_ks(all()[i % all().len()]))
            .unwrap();
        assert_eq!(
            ks.get(format!("key{i}")).unwrap(),
            Some(format!("v{i}").into_bytes())
        );
    }
}

#[test]
fn snapshots_out_of_order_across_compactions() {
    for l in all() {
        let d = tempfile::tempdir().unwrap();
        let db = Db::open(d.path(), small_db()).unwrap();
        let ks = db.keyspace("k", small_ks(l)).unwrap();
        let mut snaps = Vec::new();
        for round in 0..6u32 {
            for i in 0..600u32 {
                if (i + round) % 5 == 0 {
                    ks.delete(format!("k{i:04}")).unwrap();
                } else {
                    ks.put(format!("k{i:04}"), format!("r{round}-{i}")).unwrap();
                }
            }
            snaps.push((round, db.snapshot()));
            let s2 = db.snapshot(); // same seq twice
            drop(s2);
        }
        let expect = |round: u32, i: u32| -> Option<Vec<u8>> {
            if (i + round).is_multiple_of(5) {
                None
            } else {
                Some(format!("r{round}-{i}").into_bytes())
            }
        };
        // Release 1, 3, 5 (out of order), then compact.
        for r in [1u32, 3, 5] {
            let at = snaps.iter().position(|(x, _)| *x == r).unwrap();
            snaps.remove(at);
        }
        db.compact().unwrap();
        db.wait_for_compactions().unwrap();
        for (round, s) in &snaps {
            for i in (0..600u32).step_by(7) {
                assert_eq!(
                    s.get(&ks, format!("k{i:04}")).unwrap(),
                    expect(*round, i),
                    "{l} r{round} k{i}"
                );
            }
            if l.order().serves_range() {
                let got: Vec<_> = s.range::<&[u8], _>(&ks, ..).map(|r| r.unwrap()).collect();
                let want: Vec<_> = (0..600u32)
                    .filter_map(|i| expect(*round, i).map(|v| (format!("k{i:04}").into_bytes(), v)))
                    .collect();
                assert_eq!(got, want, "{l} r{round}");
            }
        }
        // Drop the oldest last.
        let first = snaps.remove(0);
        for i in 0..600u32 {
            ks.put(format!("k{i:04}"), b"new").unwrap();
        }
        db.compact().unwrap();
        for i in (0..600u32).step_by(11) {
            assert_eq!(
                first.1.get(&ks, format!("k{i:04}")).unwrap(),
                expect(0, i),
                "{l} k{i}"
            );
        }
        drop(snaps);
        drop(first);
    }
}

fn model_range(
    m: &BTreeMap<Vec<u8>, Vec<u8>>,
    lo: &Bound<Vec<u8>>,
    hi: &Bound<Vec<u8>>,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    m.iter()
        .filter(|(k, _)| match lo {
            Bound::Included(l) => *k >= l,
            Bound::Excluded(l) => *k > l,
            Bound::Unbounded => true,
        })
        .filter(|(k, _)| match hi {
            Bound::Included(h) => *k <= h,
            Bound::Excluded(h) => *k < h,
            Bound::Unbounded => true,
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

#[test]
fn ranges_and_prefixes_match_a_model() {
    let keys: Vec<Vec<u8>> = vec![
        vec![],
        vec![0],
        vec![0, 0],
        vec![1],
        vec![0x7f],
        vec![0xfe],
        vec![0xfe, 0xff],
        vec![0xff],
        vec![0xff, 0],
        vec![0xff, 0xff],
        vec![0xff, 0xff, 0xff],
        vec![0xff, 0xff, 0xff, 0xff],
        b"a".to_vec(),
        b"ab".to_vec(),
        b"abc".to_vec(),
        b"b".to_vec(),
    ];
    for l in SORTED {
        for phase in 0..3 {
            let d = tempfile::tempdir().unwrap();
            let db = Db::open(d.path(), small_db()).unwrap();
            let ks = db.keyspace("k", small_ks(l)).unwrap();
            let mut m = BTreeMap::new();
            for (i, k) in keys.iter().enumerate() {
                ks.put(k, format!("v{i}")).unwrap();
                m.insert(k.clone(), format!("v{i}").into_bytes());
            }
            // Older versions / deletes under newer.
            ks.delete(b"ab").unwrap();
            m.remove(&b"ab"[..]);
            if phase >= 1 {
                db.flush().unwrap();
            }
            ks.put(b"ab", b"again").unwrap();
            m.insert(b"ab".to_vec(), b"again".to_vec());
            ks.delete([0xff, 0xff]).unwrap();
            m.remove(&[0xffu8, 0xff][..]);
            if phase >= 2 {
                db.compact().unwrap();
            }
            let mut bounds = vec![Bound::Unbounded];
            for k in keys
                .iter()
                .chain([vec![0xff, 0xff, 0xff, 0xff, 0xff], b"aa".to_vec()].iter())
            {
                bounds.push(Bound::Included(k.clone()));
                bounds.push(Bound::Excluded(k.clone()));
            }
            for lo in &bounds {
                for hi in &bounds {
                    let want = model_range(&m, lo, hi);
                    let got: Vec<_> = ks
                        .range((lo.clone(), hi.clone()))
                        .map(|r| r.unwrap())
                        .collect();
                    assert_eq!(got, want, "{l} phase {phase} fwd {lo:?} {hi:?}");
                    let mut got: Vec<_> = ks
                        .range((lo.clone(), hi.clone()))
                        .rev()
                        .map(|r| r.unwrap())
                        .collect();
                    got.reverse();
                    assert_eq!(got, want, "{l} phase {phase} rev {lo:?} {hi:?}");
                    // Alternating.
                    let mut it = ks.range((lo.clone(), hi.clone()));
                    let (mut f, mut b) = (Vec::new(), Vec::new());
                    let mut front = true;
                    loop {
                        let x = if front { it.next() } else { it.next_back() };
                        match x {
                            Some(r) => {
                                if front {
                                    f.push(r.unwrap())
                                } else {
                                    b.push(r.unwrap())
                                }
                            }
                            None => break,
                        }
                        front = !front;
                    }
                    b.reverse();
                    f.extend(b);
                    assert_eq!(f, want, "{l} phase {phase} alt {lo:?} {hi:?}");
                }
            }
            let mut prefixes: Vec<Vec<u8>> = keys.clone();
            prefixes.push(vec![0xff, 0xff, 0xff, 0xff, 0xff]);
            for p in &prefixes {
                let want: Vec<_> = m
                    .iter()
                    .filter(|(k, _)| k.starts_with(p))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                let got: Vec<_> = ks.prefix(p).map(|r| r.unwrap()).collect();
                assert_eq!(got, want, "{l} prefix {p:?}");
                let mut got: Vec<_> = ks.prefix(p).rev().map(|r| r.unwrap()).collect();
                got.reverse();
                assert_eq!(got, want, "{l} rev prefix {p:?}");
            }
        }
    }
}

#[test]
fn trie_scans_are_unsupported_not_panics() {
    let d = tempfile::tempdir().unwrap();
    let db = Db::open(d.path(), small_db()).unwrap();
    let ks = db.keyspace("k", small_ks(Layout::Trie)).unwrap();
    ks.put("a", "b").unwrap();
    let r = ks.range::<&[u8], _>(..).next();
    assert!(matches!(r, Some(Err(Error::Unsupported(_)))), "{r:?}");
    let r = ks.prefix("a").next_back();
    assert!(matches!(r, Some(Err(Error::Unsupported(_)))), "{r:?}");
    db.flush().unwrap();
    let s = db.snapshot();
    let r = s.range::<&[u8], _>(&ks, ..).next();
    assert!(matches!(r, Some(Err(Error::Unsupported(_)))), "{r:?}");
}

#[test]
fn float_options_reject_nan_and_infinities() {
    let d = tempfile::tempdir().unwrap();
    let db = Db::open(d.path(), small_db()).unwrap();
    for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -1.0, 1.5] {
        let mut o = small_ks(Layout::Fragmented);
        o.fragmented.aggressive_ratio = bad;
        assert!(db.keyspace("f", o).is_err(), "aggressive {bad}");
        let mut o = small_ks(Layout::Trie);
        o.trie.target_fill = bad;
        assert!(db.keyspace("t", o).is_err(), "target_fill {bad}");
        let mut o = small_ks(Layout::Trie);
        o.trie.bucket_fill_cap = bad;
        assert!(db.keyspace("t", o).is_err(), "bucket_fill_cap {bad}");
        let mut o = small_ks(Layout::Trie);
        o.trie.gc_garbage_ratio = bad;
        assert!(db.keyspace("t", o).is_err(), "gc {bad}");
    }
    let mut o = small_ks(Layout::Trie);
    o.trie.gc_garbage_ratio = -0.0;
    o.trie.target_fill = 1.0;
    o.fragmented.aggressive_ratio = -0.0;
    let ks = db.keyspace("t", o).unwrap();
    for i in 0..3000u32 {
        ks.put(format!("{i}"), [0u8; 50]).unwrap();
    }
    db.compact().unwrap();
    assert_eq!(ks.get("77").unwrap(), Some(vec![0u8; 50]));
}

#[test]
fn huge_options_do_not_panic() {
    let d = tempfile::tempdir().unwrap();
    let mut o = small_db();
    o.block_cache_bytes = usize::MAX;
    o.max_manifest_bytes = u64::MAX;
    let db = Db::open(d.path(), o).unwrap();
    for l in all() {
        let mut o = small_ks(l);
        o.write_buffer_bytes = 64 * 1024;
        o.bloom_bits_per_key = 64;
        o.block_size = 1 << 20;
        o.leveled.level_base_bytes = u64::MAX;
        o.leveled.level_size_ratio = u64::MAX;
        o.leveled.target_table_bytes = u64::MAX;
        o.leveled.max_levels = 16;
        o.leveled.l0_stop_trigger = usize::MAX;
        o.leveled.l0_slowdown_trigger = usize::MAX;
        o.fragmented.level_base_bytes = u64::MAX;
        o.fragmented.level_size_ratio = u64::MAX;
        o.fragmented.expected_keys = u64::MAX;
        o.fragmented.level1_guards = u64::MAX;
        o.fragmented.rewrite_factor = u64::MAX;
        o.fragmented.guard_skew_ratio = u64::MAX;
        o.fragmented.seek_compaction_threshold = u64::MAX;
        o.fragmented.max_sstables_per_guard = usize::MAX;
        o.fragmented.bit_decrement = 16;
        o.fragmented.max_levels = 16;
        o.fragmented.top_level_bits = 0;
        o.fragmented.l0_stop_trigger = usize::MAX;
        o.fragmented.l0_slowdown_trigger = usize::MAX;
        o.trie.filter_memory_bytes = usize::MAX;
        o.trie.cluster_cache_bytes = usize::MAX;
        o.trie.gc_sample_columns = u32::MAX;
        o.trie.bloom_bits_per_key = 64;
        // (last_level_depth 9 is valid but makes a compaction of a few thousand keys write
        // thousands of one-item HTables: slow, not wrong.)
        o.trie.pile_size = 1000;
        o.trie.slowdown_sublevels = usize::MAX;
        o.trie.stop_sublevels = usize::MAX;
        let ks = db.keyspace(l.name(), o).unwrap();
        for i in 0..5000u32 {
            ks.put(format!("{i}"), [0u8; 50]).unwrap();
        }
        db.compact().unwrap();
        assert_eq!(ks.get("77").unwrap(), Some(vec![0u8; 50]));
    }
}

/// `target_table_bytes` is only bounded below; a value above u64::MAX / 10 overflowed the
/// compaction's grandparent limit (`10 * target`) and panicked the background thread.
#[test]
fn leveled_huge_target_table_bytes_compacts() {
    let d = tempfile::tempdir().unwrap();
    let db = Db::open(d.path(), small_db()).unwrap();
    let mut o = small_ks(Layout::Leveled);
    o.leveled.target_table_bytes = u64::MAX;
    let ks = db.keyspace("k", o).unwrap();
    for i in 0..3000u32 {
        ks.put(format!("{i:05}"), [7u8; 50]).unwrap();
    }
    db.compact().unwrap();
    db.wait_for_compactions().unwrap();
    assert_eq!(ks.get("00077").unwrap(), Some(vec![7u8; 50]));
}

#[test]
fn batch_duplicates_and_iterators_made_before_a_compaction() {
    for l in all() {
        let d = tempfile::tempdir().unwrap();
        let db = Db::open(d.path(), small_db()).unwrap();
        let mut o = small_ks(l);
        o.block_size = 256;
        o.bloom_bits_per_key = 0;
        let ks = db.keyspace("k", o).unwrap();
        // Same key several times in one batch: the last wins.
        let mut b = WriteBatch::new();
        b.put(&ks, b"dup", b"1");
        b.delete(&ks, b"dup");
        b.put(&ks, b"dup", b"3");
        b.put(&ks, b"gone", b"1");
        b.delete(&ks, b"gone");
        db.write(b, &WriteOptions::default()).unwrap();
        assert_eq!(ks.get(b"dup").unwrap(), Some(b"3".to_vec()), "{l}");
        assert_eq!(ks.get(b"gone").unwrap(), None, "{l}");
        ks.put(vec![9u8; MAX_KEY_BYTES], b"big").unwrap();
        for i in 0..1500u32 {
            ks.put(format!("k{i:05}"), vec![1u8; 60]).unwrap();
        }
        // An iterator made before a compaction, first stepped after it.
        let it = if l.order().serves_range() {
            Some((ks.range::<&[u8], _>(..), ks.range::<&[u8], _>(..)))
        } else {
            None
        };
        let snap = db.snapshot();
        db.flush().unwrap();
        assert_eq!(ks.get(b"dup").unwrap(), Some(b"3".to_vec()), "{l}");
        assert_eq!(ks.get(b"gone").unwrap(), None, "{l}");
        for i in 0..1500u32 {
            ks.put(format!("k{i:05}"), vec![2u8; 60]).unwrap();
        }
        db.compact().unwrap();
        db.wait_for_compactions().unwrap();
        assert_eq!(ks.get(b"dup").unwrap(), Some(b"3".to_vec()), "{l}");
        assert_eq!(
            ks.get(vec![9u8; MAX_KEY_BYTES]).unwrap(),
            Some(b"big".to_vec()),
            "{l}"
        );
        assert_eq!(snap.get(&ks, "k00010").unwrap(), Some(vec![1u8; 60]));
        if let Some((f, b)) = it {
            let v: Vec<_> = f.map(|r| r.unwrap()).collect();
            assert_eq!(v.len(), 1502, "{l}");
            assert!(v
                .iter()
                .filter(|(k, _)| k.starts_with(b"k"))
                .all(|(_, v)| v == &vec![1u8; 60]));
            let v: Vec<_> = b.rev().map(|r| r.unwrap()).collect();
            assert_eq!(v.len(), 1502, "{l}");
        }
        drop(snap);
        drop((ks, db));
        assert!(scree::check::check_db(d.path()).unwrap().is_empty(), "{l}");
    }
}

#[test]
fn reopen_with_changed_options() {
    for l in all() {
        let d = tempfile::tempdir().unwrap();
        let mut model = BTreeMap::new();
        let mut o1 = small_ks(l);
        o1.leveled.max_levels = 7;
        o1.leveled.level_base_bytes = 4096;
        o1.leveled.target_table_bytes = 4096;
        o1.leveled.level_size_ratio = 2;
        o1.fragmented.max_levels = 6;
        o1.trie.last_level_depth = 3;
        let mut o2 = small_ks(l);
        o2.leveled.max_levels = 2;
        o2.leveled.level_size_ratio = 100;
        o2.fragmented.max_levels = 3;
        o2.fragmented.top_level_bits = 2;
        o2.fragmented.bit_decrement = 0;
        o2.fragmented.max_sstables_per_guard = 1;
        o2.trie.last_level_depth = 1;
        o2.trie.pile_size = 3;
        o2.write_buffer_bytes = 1 << 20;
        for (round, o) in [o1.clone(), o2.clone(), o1.clone(), o2.clone()]
            .into_iter()
            .enumerate()
        {
            let db = Db::open(d.path(), small_db()).unwrap();
            let ks = db.keyspace("k", o.clone()).unwrap();
            for (k, v) in &model {
                assert_eq!(ks.get(k).unwrap().as_ref(), Some(v), "{l} round {round}");
            }
            for i in 0..3000u32 {
                let k = format!("k{:05}", (i * 7919 + round as u32 * 13) % 5000).into_bytes();
                let v = format!("r{round}-{i}").into_bytes();
                ks.put(&k, &v).unwrap();
                model.insert(k, v);
            }
            // Changing options in the same session.
            let ks = db
                .keyspace(
                    "k",
                    if round % 2 == 0 {
                        o2.clone()
                    } else {
                        o1.clone()
                    },
                )
                .unwrap();
            db.compact().unwrap();
            db.wait_for_compactions().unwrap();
            db.check_invariants().unwrap();
            for (k, v) in &model {
                assert_eq!(ks.get(k).unwrap().as_ref(), Some(v), "{l} round {round}");
            }
            if l.order().serves_range() {
                let got: Vec<_> = ks.range::<&[u8], _>(..).map(|r| r.unwrap()).collect();
                let want: Vec<_> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
                assert!(got == want, "{l} round {round}");
            }
        }
        assert!(scree::check::check_db(d.path()).unwrap().is_empty(), "{l}");
    }
}

#[test]
fn check_on_odd_paths_reports_instead_of_panicking() {
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("file");
    std::fs::write(&f, b"x").unwrap();
    assert!(matches!(scree::check::check_db(&f), Err(Error::Io { .. })));
    assert!(matches!(
        scree::check::check_db(d.path().join("nope")),
        Err(Error::Io { .. })
    ));
    std::fs::remove_file(&f).unwrap();
    assert!(scree::check::check_db(d.path()).unwrap().is_empty());
    std::fs::write(d.path().join("CURRENT"), b"").unwrap();
    assert!(!scree::check::check_db(d.path()).unwrap().is_empty());
    std::fs::create_dir(d.path().join("000005.log")).unwrap();
    std::fs::create_dir(d.path().join("MANIFEST-000001")).unwrap();
    assert!(!scree::check::check_db(d.path()).unwrap().is_empty());
    assert!(matches!(
        Db::open(d.path(), small_db()),
        Err(Error::Corruption { .. })
    ));
}

#[test]
fn direct_reads_with_large_items() {
    for mmap in [false, true] {
        for l in all() {
            let d = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
            let mut dbo = small_db();
            dbo.direct_reads = true;
            dbo.mmap_reads = mmap;
            dbo.block_cache_bytes = 0;
            let db = Db::open(d.path(), dbo).unwrap();
            let ks = db.keyspace("k", small_ks(l)).unwrap();
            ks.put(vec![3u8; MAX_KEY_BYTES], vec![4u8; 5 << 20])
                .unwrap();
            for i in 0..2000u32 {
                ks.put(format!("k{i:05}"), vec![1u8; 60 + (i as usize % 300)])
                    .unwrap();
            }
            db.compact().unwrap();
            assert_eq!(
                ks.get(vec![3u8; MAX_KEY_BYTES]).unwrap(),
                Some(vec![4u8; 5 << 20]),
                "{l}"
            );
            for i in (0..2000u32).step_by(37) {
                assert_eq!(
                    ks.get(format!("k{i:05}")).unwrap(),
                    Some(vec![1u8; 60 + (i as usize % 300)]),
                    "{l}"
                );
            }
            if l.order().serves_range() {
                let fwd: Vec<_> = ks.range::<&[u8], _>(..).collect();
                let first_err = fwd
                    .iter()
                    .find_map(|r| r.as_ref().err().map(|e| e.to_string()));
                assert_eq!(fwd.len(), 2001, "{l} mmap {mmap}: {first_err:?}");
                assert_eq!(
                    ks.range::<&[u8], _>(..).rev().count(),
                    2001,
                    "{l} mmap {mmap}"
                );
            }
        }
    }
}

#[test]
fn parallel_search_at_snapshots() {
    for l in all() {
        let d = tempfile::tempdir().unwrap();
        let mut dbo = small_db();
        dbo.parallel_search = true;
        dbo.flush_threads = 2;
        let db = Db::open(d.path(), dbo).unwrap();
        let mut o = small_ks(l);
        o.fragmented.parallel_seeks = true;
        o.fragmented.parallel_seek_threads = 3;
        let ks = db.keyspace("k", o).unwrap();
        let mut snaps = Vec::new();
        for round in 0..4u32 {
            for i in 0..1500u32 {
                if (i + round) % 4 == 0 {
                    ks.delete(format!("k{i:05}")).unwrap();
                } else {
                    ks.put(format!("k{i:05}"), format!("{round}")).unwrap();
                }
            }
            snaps.push(db.snapshot());
            db.flush().unwrap();
        }
        db.compact().unwrap();
        for (round, s) in snaps.iter().enumerate() {
            let round = round as u32;
            for i in 0..1500u32 {
                let want = if (i + round).is_multiple_of(4) {
                    None
                } else {
                    Some(format!("{round}").into_bytes())
                };
                assert_eq!(
                    s.get(&ks, format!("k{i:05}")).unwrap(),
                    want,
                    "{l} {round} {i}"
                );
                if round == 3 {
                    assert_eq!(ks.get(format!("k{i:05}")).unwrap(), want, "{l} {round} {i}");
                }
            }
            if l.order().serves_range() {
                let n = s.range(&ks, b"k00100".to_vec()..b"k01100".to_vec()).count();
                assert_eq!(n, 750, "{l}");
                let n = s
                    .range(&ks, b"k00100".to_vec()..b"k01100".to_vec())
                    .rev()
                    .count();
                assert_eq!(n, 750, "{l}");
            }
        }
    }
}

/// A keyspace is checked against its own layout's options only: settings of other layouts are
/// not used, so they never refuse it; its own bad settings do, naming the layout.
#[test]
fn a_keyspace_is_refused_only_for_its_own_layouts_options() {
    let d = tempfile::tempdir().unwrap();
    let db = Db::open(d.path(), small_db()).unwrap();
    // One invalid setting per layout's options, and the layout it belongs to.
    type Spoil = fn(&mut scree::KeyspaceOptions);
    let spoilers: [(Layout, Spoil); 3] = [
        (Layout::Leveled, |o| o.leveled.l0_compaction_trigger = 0),
        (Layout::Fragmented, |o| {
            o.fragmented.max_sstables_per_guard = 0
        }),
        (Layout::Trie, |o| o.trie.pile_size = 0),
    ];
    for l in all() {
        let mut others = small_ks(l);
        for (owner, spoil) in &spoilers {
            if *owner != l {
                spoil(&mut others);
            }
        }
        let ks = db.keyspace(&format!("ok-{l}"), others).unwrap();
        ks.put(b"k", b"v").unwrap();
        assert_eq!(ks.get(b"k").unwrap().as_deref(), Some(&b"v"[..]), "{l}");
        let Some((_, spoil)) = spoilers.iter().find(|(owner, _)| *owner == l) else {
            continue;
        };
        let mut own = small_ks(l);
        spoil(&mut own);
        match db.keyspace(&format!("bad-{l}"), own) {
            Err(Error::InvalidArgument(m)) => assert!(m.starts_with(l.name()), "{l}: {m}"),
            other => panic!("{l}: its own bad option was accepted: {other:?}"),
        }
    }
}

/// What a layout's key order serves: `Total` layouts scan ranges and prefixes; others refuse
/// with an `Unsupported` error that names the keyspace and the layout, from the first item.
#[test]
fn scans_follow_the_layouts_key_order() {
    let d = tempfile::tempdir().unwrap();
    let db = Db::open(d.path(), small_db()).unwrap();
    for l in all() {
        let ks = db.keyspace(&format!("k-{l}"), small_ks(l)).unwrap();
        ks.put(b"ab1", b"1").unwrap();
        ks.put(b"ab2", b"2").unwrap();
        ks.put(b"b", b"3").unwrap();
        let snap = db.snapshot();
        let scans = [
            (
                "range",
                ks.range::<&[u8], _>(..).collect::<scree::Result<Vec<_>>>(),
                l.order().serves_range(),
            ),
            (
                "prefix",
                ks.prefix(b"ab").collect::<scree::Result<Vec<_>>>(),
                l.order().serves_prefix(2),
            ),
            (
                "snapshot range",
                snap.range::<&[u8], _>(&ks, ..)
                    .collect::<scree::Result<Vec<_>>>(),
                l.order().serves_range(),
            ),
            (
                "snapshot prefix",
                snap.prefix(&ks, b"ab").collect::<scree::Result<Vec<_>>>(),
                l.order().serves_prefix(2),
            ),
        ];
        for (what, got, served) in scans {
            match got {
                Ok(items) => {
                    assert!(served, "{l}: {what} was served");
                    let want = if what.ends_with("prefix") { 2 } else { 3 };
                    assert_eq!(items.len(), want, "{l}: {what}");
                }
                Err(Error::Unsupported(m)) => {
                    assert!(!served, "{l}: {what} refused: {m}");
                    assert!(
                        m.contains(&format!("k-{l}")) && m.contains(l.name()),
                        "{l}: {m}"
                    );
                }
                Err(e) => panic!("{l}: {what}: {e}"),
            }
        }
    }
}
