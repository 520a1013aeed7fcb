//! `leveled` layout: scheduling of compactions against each other.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use scree::testing::fault::{FaultFs, OpKind};
use scree::{Db, Keyspace, KeyspaceOptions, Layout};

fn table_levels(db: &Db) -> Vec<(u32, u64)> {
    db.stats()
        .keyspaces
        .iter()
        .flat_map(|k| k.levels.iter().map(|l| (l.level, l.tables)))
        .filter(|(_, n)| *n > 0)
        .collect()
}

/// `Db::compact` merges every table into the deepest level, so its output covers the whole
/// key range of that level, gaps between its input tables included. While it ran, background
/// work could move a newly flushed table into such a gap of the same level (L0 → L1 → L2 by
/// trivial moves, since the table overlapped no reserved input); installing the manual output
/// then left two overlapping tables in L2 and the newly written key unreadable.
#[test]
fn a_background_move_into_the_level_a_manual_compaction_writes_cannot_overlap_its_output() {
    let fs = FaultFs::new(11);
    let mut o = common::small_db();
    o.fs = Some(fs.as_dyn());
    o.background_threads = 1;
    let db = Db::open("/db", o).expect("open");
    let mut ko = KeyspaceOptions::new(Layout::Leveled);
    ko.leveled.max_levels = 3;
    ko.leveled.l0_compaction_trigger = 1;
    ko.leveled.level_base_bytes = 4096;
    ko.leveled.target_table_bytes = 1 << 20;
    let ks: Keyspace = db.keyspace("ks", ko).expect("keyspace");
    let big = vec![b'v'; 10_000];

    // L2: [z] (L1 is over its size with it and moves it down); then L1: [a] (small).
    ks.put("z", &big).expect("put");
    db.flush().expect("flush");
    db.wait_for_compactions().expect("wait");
    ks.put("a", "1").expect("put");
    db.flush().expect("flush");
    db.wait_for_compactions().expect("wait");
    assert_eq!(table_levels(&db), vec![(1, 1), (2, 1)]);

    // The manual compaction (L1 [a] + L2 [z] → L2) is held while it reads its inputs.
    let gate = fs.pause(OpKind::Read, ".sst");
    std::thread::scope(|s| {
        let compact = s.spawn(|| db.compact());
        let t = Instant::now();
        while gate.waiting() == 0 {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "compaction never read"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        // A new key in the gap between a and z, flushed while the manual compaction runs.
        ks.put("m", &big).expect("put");
        db.flush().expect("flush");
        // Background work moves it to L1 (nothing there overlaps it); it may not move it on
        // into the L2 range the manual output will cover. Wait for the first move, then give
        // the second time to happen (it did, before the fix).
        let t = Instant::now();
        while table_levels(&db).first().is_some_and(|&(l, _)| l == 0) {
            assert!(t.elapsed() < Duration::from_secs(10), "L0 never compacted");
            std::thread::sleep(Duration::from_millis(1));
        }
        let t = Instant::now();
        while t.elapsed() < Duration::from_millis(300) && !table_levels(&db).contains(&(2, 2)) {
            std::thread::sleep(Duration::from_millis(1));
        }
        gate.open();
        compact.join().expect("join").expect("compact");
    });
    db.wait_for_compactions().expect("wait");
    let is = |k: &str, want: &[u8]| ks.get(k).expect("get").is_some_and(|v| v[..] == *want);
    assert!(
        is("m", &big),
        "the key written during the manual compaction is lost"
    );
    assert!(is("a", b"1"));
    assert!(is("z", &big));
    db.check_invariants().expect("invariants");
}

/// Parallel search on `leveled` probes the deepest non-empty level on the search pool beside
/// the levels above it; an answer from above wins. With every key's oldest value in the last
/// level and newer values and tombstones above it, every get must answer the newest write,
/// as a serial get does.
#[test]
fn parallel_search_answers_what_serial_search_answers_across_levels() {
    let dir = tempfile::tempdir().expect("tempdir");
    let n = 3000u32;
    let key = |i: u32| format!("k{i:05}");
    let mut want: BTreeMap<String, Option<String>> = BTreeMap::new();
    {
        let db = Db::open(dir.path(), common::small_db()).expect("open");
        let ks = db
            .keyspace("ks", common::small_ks(Layout::Leveled))
            .expect("keyspace");
        for i in 0..n {
            ks.put(key(i), format!("0-{i}")).expect("put");
            want.insert(key(i), Some(format!("0-{i}")));
        }
        db.compact().expect("compact");
        for (gen, step) in [(1u32, 3u32), (2, 7)] {
            for i in (0..n).step_by(step as usize) {
                if (i / step) % 2 == 0 {
                    ks.delete(key(i)).expect("delete");
                    want.insert(key(i), None);
                } else {
                    ks.put(key(i), format!("{gen}-{i}")).expect("put");
                    want.insert(key(i), Some(format!("{gen}-{i}")));
                }
            }
            db.flush().expect("flush");
        }
        db.wait_for_compactions().expect("wait");
        let levels = table_levels(&db);
        assert!(
            levels.len() >= 2,
            "a last level and tables above it: {levels:?}"
        );
    }
    for parallel in [false, true] {
        let mut o = common::small_db();
        o.parallel_search = parallel;
        let db = Db::open(dir.path(), o).expect("open");
        let ks = db
            .keyspace("ks", common::small_ks(Layout::Leveled))
            .expect("keyspace");
        for (k, v) in &want {
            let got = ks.get(k).expect("get");
            assert_eq!(
                got.as_deref(),
                v.as_deref().map(str::as_bytes),
                "{k} (parallel {parallel})"
            );
        }
    }
}

/// Every key and value of `ks` in order, now or at `snap`.
fn contents(ks: &Keyspace, snap: Option<&scree::Snapshot>) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let scan = |it: &mut dyn Iterator<Item = scree::Result<(Vec<u8>, Vec<u8>)>>| {
        it.map(|r| r.expect("scan")).collect()
    };
    match snap {
        Some(s) => scan(&mut s.range::<Vec<u8>, _>(ks, ..)),
        None => scan(&mut ks.range::<Vec<u8>, _>(..)),
    }
}

/// Merges out of L0 split into up to four parts merged in parallel (sub-compactions), with
/// overwrites, deletes and a snapshot held across them: the store reads back as a `BTreeMap`
/// says, now and at the snapshot (scans and gets), after a manual compaction and a reopen too;
/// no level below L0 holds overlapping tables; and merges were split.
#[test]
fn sub_compactions_keep_every_key_and_every_snapshot() {
    let dir = tempfile::tempdir().expect("dir");
    let o = common::small_db();
    let mut ko = KeyspaceOptions::new(Layout::Leveled);
    ko.write_buffer_bytes = 64 * 1024;
    ko.block_size = 512;
    ko.leveled.target_table_bytes = 4096;
    ko.leveled.level_base_bytes = 64 * 1024;
    ko.leveled.level_size_ratio = 4;
    ko.leveled.max_subcompactions = 4;
    let db = Db::open(dir.path(), o.clone()).expect("open");
    let ks = db.keyspace("ks", ko.clone()).expect("keyspace");
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let mut snap = None;
    let mut x: u64 = 0x5eed;
    for i in 0..20_000u32 {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let k = format!("key{:05}", (x >> 33) % 5000).into_bytes();
        if (x >> 20).is_multiple_of(10) {
            ks.delete(&k).expect("delete");
            model.remove(&k);
        } else {
            let v = format!("{i}-{}", "v".repeat(60)).into_bytes();
            ks.put(&k, &v).expect("put");
            model.insert(k, v);
        }
        if i == 8_000 {
            snap = Some((db.snapshot(), model.clone()));
        }
    }
    let (snapshot, at_snap) = snap.expect("snapshot taken");
    db.flush().expect("flush");
    db.wait_for_compactions().expect("wait");
    let check = |ks: &Keyspace, snapshot: Option<&scree::Snapshot>| {
        assert!(contents(ks, None) == model, "scan differs from the model");
        for (k, v) in model.iter().step_by(7) {
            assert_eq!(ks.get(k).expect("get").as_deref(), Some(v.as_slice()));
        }
        if let Some(s) = snapshot {
            assert!(
                contents(ks, Some(s)) == at_snap,
                "snapshot scan differs from the model at the snapshot"
            );
            for (k, v) in at_snap.iter().step_by(7) {
                assert_eq!(s.get(ks, k).expect("get").as_deref(), Some(v.as_slice()));
            }
        }
    };
    check(&ks, Some(&snapshot));
    db.check_invariants().expect("invariants");
    let split = db.stats().subcompactions;
    assert!(split > 0, "no merge was split");
    db.compact().expect("compact");
    check(&ks, Some(&snapshot));
    db.check_invariants().expect("invariants");
    drop(snapshot);
    drop(ks);
    drop(db);
    let db = Db::open(dir.path(), o).expect("reopen");
    let ks = db.keyspace("ks", ko).expect("keyspace");
    check(&ks, None);
    db.check_invariants().expect("invariants");
}

/// LevelDB's seek compaction: lookups of keys in the last level that first probe a table
/// above it in vain (its range holds the key, its filter rules it out) use up that table's
/// allowance, and it is compacted down until nothing lies above the last level, every key
/// reading back as written. The table above is in L0 (below the size trigger) or in L1
/// (below its size), and lookups run with and without parallel search (which probes the last
/// level apart). With the option off the same lookups leave the tree as it was.
#[test]
fn lookups_that_probe_a_table_in_vain_compact_it_down() {
    let key = |i: u32| format!("k{i:05}");
    for (l0_trigger, above) in [(4usize, 0u32), (1, 1)] {
        for parallel in [false, true] {
            for seek_compaction in [true, false] {
                let case = format!("table above in L{above}, parallel {parallel}, seek compaction {seek_compaction}");
                let dir = tempfile::tempdir().expect("tempdir");
                let mut o = common::small_db();
                o.parallel_search = parallel;
                let db = Db::open(dir.path(), o).expect("open");
                let mut ko = KeyspaceOptions::new(Layout::Leveled);
                ko.leveled.max_levels = 3;
                ko.leveled.level_base_bytes = 4096;
                ko.leveled.l0_compaction_trigger = l0_trigger;
                ko.leveled.seek_compaction = seek_compaction;
                let ks = db.keyspace("ks", ko).expect("keyspace");
                let mut model: BTreeMap<String, String> = BTreeMap::new();
                // The even keys, compacted into L1, are past its 4 KiB and go on into L2,
                // the last level.
                for i in (0..2000).step_by(2) {
                    ks.put(key(i), format!("v{i}")).expect("put");
                    model.insert(key(i), format!("v{i}"));
                }
                db.compact().expect("compact");
                db.wait_for_compactions().expect("wait");
                assert_eq!(table_levels(&db).first().map(|l| l.0), Some(2), "{case}");
                // Two odd keys at the ends: a small table whose range holds every even key.
                for i in [1, 1999] {
                    ks.put(key(i), format!("w{i}")).expect("put");
                    model.insert(key(i), format!("w{i}"));
                }
                db.flush().expect("flush");
                db.wait_for_compactions().expect("wait");
                let before = table_levels(&db);
                assert_eq!(before.first(), Some(&(above, 1)), "{case}: {before:?}");
                // Lookups of even keys probe that table, then the last level. A table moved
                // down (L0 → L1 has nothing to merge with) gets a new allowance and is due
                // again after as many lookups.
                for _round in 0..4 {
                    for i in (2..1000).step_by(2).take(150) {
                        assert_eq!(
                            ks.get(key(i)).expect("get"),
                            Some(format!("v{i}").into_bytes()),
                            "{case}"
                        );
                    }
                    db.wait_for_compactions().expect("wait");
                }
                let after = table_levels(&db);
                let stats = db.stats();
                if seek_compaction {
                    assert!(after.iter().all(|&(l, _)| l == 2), "{case}: {after:?}");
                    assert!(stats.seek_compactions >= 1, "{case}");
                    assert!(
                        stats.seek_compaction_bytes > 0,
                        "{case}: a merge into L2 wrote"
                    );
                } else {
                    assert_eq!(after, before, "{case}");
                    assert_eq!(stats.seek_compactions, 0, "{case}");
                }
                db.check_invariants().expect("invariants");
                for (k, v) in &model {
                    assert_eq!(
                        ks.get(k).expect("get").as_deref(),
                        Some(v.as_bytes()),
                        "{case}: {k}"
                    );
                }
                let absent = (0..2000).map(key).filter(|k| !model.contains_key(k));
                for k in absent {
                    assert_eq!(ks.get(&k).expect("get"), None, "{case}: {k}");
                }
            }
        }
    }
}
