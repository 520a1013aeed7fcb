//! When old versions and tombstones may be dropped, in every layout: a version stays while a
//! snapshot can read it, a tombstone stays while an older value of its key lies below it, and
//! sequence numbers zeroed at the bottom never let an older version win. Each test compares
//! every live snapshot (and the latest state) with a `BTreeMap` model after flushes, background
//! compactions and full compactions.

mod common;

use std::collections::BTreeMap;

use scree::{Db, Keyspace, KeyspaceOptions, Layout, Snapshot};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn key(i: u64) -> Vec<u8> {
    format!("key{i:05}").into_bytes()
}

fn value(i: u64, gen: u64) -> Vec<u8> {
    let mut v = format!("v{i}-{gen}-").into_bytes();
    v.resize(
        v.len() + 40 + (i * 7 + gen * 13) as usize % 120,
        b'a' + (gen % 26) as u8,
    );
    v
}

/// Gets (and, for sorted layouts, a full scan) at `snap` (or the latest state) match `m`.
fn check(ks: &Keyspace, snap: Option<&Snapshot>, m: &Model, n: u64, layout: Layout, at: &str) {
    for i in 0..n {
        let k = key(i);
        let got = match snap {
            Some(s) => s.get(ks, &k).unwrap(),
            None => ks.get(&k).unwrap(),
        };
        assert_eq!(
            got.as_deref(),
            m.get(&k).map(Vec::as_slice),
            "{layout:?} {at}: key {i} at {:?}",
            snap.map(Snapshot::sequence)
        );
    }
    if common::has_scans(layout) {
        let got: Vec<(Vec<u8>, Vec<u8>)> = match snap {
            Some(s) => s.range::<Vec<u8>, _>(ks, ..).collect::<scree::Result<_>>(),
            None => ks.range::<Vec<u8>, _>(..).collect::<scree::Result<_>>(),
        }
        .unwrap();
        let want: Vec<(Vec<u8>, Vec<u8>)> = m.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        assert!(
            got == want,
            "{layout:?} {at}: scan at {:?} has {} entries, model {}",
            snap.map(Snapshot::sequence),
            got.len(),
            want.len()
        );
    }
}

fn opts(layout: Layout) -> KeyspaceOptions {
    let mut o = common::small_ks(layout);
    // Shallow trees so that data reaches the bottom (and is merged there) within a few flushes.
    o.leveled.max_levels = 3;
    o.fragmented.max_levels = 3;
    o.fragmented.l0_compaction_trigger = 1;
    o.trie.last_level_depth = 1;
    o.trie.gc_garbage_ratio = 0.01;
    o
}

/// Generations of puts and deletes over the same keys, a snapshot per generation (some
/// released, new ones taken), a full compaction after each: every snapshot keeps reading its
/// generation, deleted keys stay deleted at the snapshots that saw the delete and keep their
/// value at older ones, and after a reopen the latest state is intact.
#[test]
fn snapshots_keep_their_versions_through_every_merge_to_the_bottom() {
    let n = 1200;
    for layout in Layout::implemented() {
        let dir = tempfile::tempdir().unwrap();
        let mut dbo = common::small_db();
        dbo.background_threads = 1;
        let db = Db::open(dir.path(), dbo.clone()).unwrap();
        let ks = db.keyspace("t", opts(layout)).unwrap();
        let mut model = Model::new();
        let mut snaps: Vec<(Snapshot, Model)> = Vec::new();
        for gen in 0..8u64 {
            for i in 0..n {
                // Each generation rewrites about half the keys and deletes a sixth.
                match (i + gen) % 6 {
                    0 => {
                        ks.delete(key(i)).unwrap();
                        model.remove(&key(i));
                    }
                    1 | 3 | 4 => {
                        ks.put(key(i), value(i, gen)).unwrap();
                        model.insert(key(i), value(i, gen));
                    }
                    _ => {}
                }
            }
            match gen % 3 {
                // A flush only: the background merges what it picks.
                0 => db.flush().unwrap(),
                // Everything down to the bottom, where versions no snapshot reads are dropped
                // and the others' sequence numbers may be zeroed.
                1 => db.compact().unwrap(),
                _ => db.wait_for_compactions().unwrap(),
            }
            snaps.push((db.snapshot(), model.clone()));
            // Release the second-oldest snapshot now and then: the oldest one stays, so
            // versions between two live snapshots become droppable while older ones do not.
            if gen % 2 == 1 && snaps.len() > 2 {
                snaps.remove(1);
            }
            for (s, m) in &snaps {
                check(&ks, Some(s), m, n, layout, &format!("generation {gen}"));
            }
            check(&ks, None, &model, n, layout, &format!("generation {gen}"));
        }
        // Release every snapshot: the next full compaction drops all hidden versions and
        // tombstones and zeroes what is left.
        db.compact().unwrap();
        for (s, m) in &snaps {
            check(&ks, Some(s), m, n, layout, "before release");
        }
        snaps.clear();
        db.compact().unwrap();
        check(&ks, None, &model, n, layout, "all released");
        db.check_invariants().unwrap();
        drop(ks);
        drop(db);
        let db = Db::open(dir.path(), dbo).unwrap();
        let ks = db.keyspace("t", opts(layout)).unwrap();
        check(&ks, None, &model, n, layout, "reopened");
        db.compact().unwrap();
        check(&ks, None, &model, n, layout, "reopened and compacted");
    }
}

/// A key written once long ago (so its value sits at the bottom) and deleted much later: the
/// tombstone passes through every level above the value and must not be dropped on the way,
/// whatever merges in between (flush-only rounds, background merges, full compactions, a
/// reopen that replays the delete from the WAL).
#[test]
fn a_tombstone_above_a_bottom_value_is_never_dropped_early() {
    let n = 1500;
    for layout in Layout::implemented() {
        for replay in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let mut dbo = common::small_db();
            dbo.background_threads = 1;
            let db = Db::open(dir.path(), dbo.clone()).unwrap();
            let ks = db.keyspace("t", opts(layout)).unwrap();
            let mut model = Model::new();
            for i in 0..n {
                ks.put(key(i), value(i, 0)).unwrap();
                model.insert(key(i), value(i, 0));
            }
            db.compact().unwrap();
            // Delete every fourth key, then bury the tombstones under newer writes of the
            // other keys, flushed one memtable at a time.
            for i in (0..n).step_by(4) {
                ks.delete(key(i)).unwrap();
                model.remove(&key(i));
            }
            let (db, ks) = if replay {
                // The deletes come back from the WAL.
                drop(ks);
                drop(db);
                let db = Db::open(dir.path(), dbo.clone()).unwrap();
                let ks = db.keyspace("t", opts(layout)).unwrap();
                (db, ks)
            } else {
                (db, ks)
            };
            check(&ks, None, &model, n, layout, "deleted");
            for gen in 1..5u64 {
                for i in (0..n).filter(|i| i % 4 != 0 && (i + gen) % 3 == 0) {
                    ks.put(key(i), value(i, gen)).unwrap();
                    model.insert(key(i), value(i, gen));
                }
                db.flush().unwrap();
                db.wait_for_compactions().unwrap();
                check(&ks, None, &model, n, layout, &format!("buried {gen}"));
            }
            db.compact().unwrap();
            check(&ks, None, &model, n, layout, "compacted");
            db.check_invariants().unwrap();
        }
    }
}
