//! Tests of the `fragmented` layout on small settings: several levels and guards are reached,
//! guards survive a crash, sequential keys (the paper's weak case) stay correct, invariants
//! hold after compactions, one table per guard behaves like leveled, seek-based compaction
//! fires, and parallel seeks return the same results.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use scree::testing::fault::{CrashMode, FaultFs};
use scree::{Db, Keyspace, KeyspaceOptions, Layout, LevelStats, Options};

fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

fn rkey(i: u64) -> Vec<u8> {
    format!("{:012x}", mix(i) >> 16).into_bytes()
}

fn val(i: u64, gen: u64) -> Vec<u8> {
    let mut v = format!("v{i}-{gen}-").into_bytes();
    v.resize(100, b'a' + (i % 26) as u8);
    v
}

fn ks_opts() -> KeyspaceOptions {
    common::small_ks(Layout::Fragmented)
}

fn levels(db: &Db) -> Vec<LevelStats> {
    db.stats()
        .keyspaces
        .first()
        .map(|k| k.levels.clone())
        .unwrap_or_default()
}

/// Guards (incl. sentinel) of a level, parsed from its detail.
fn guards(l: &LevelStats) -> u64 {
    l.detail
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

fn max_tables_per_guard(l: &LevelStats) -> u64 {
    l.detail
        .split("max ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Waits for background work, then checks the layout invariants.
fn settle(db: &Db) {
    db.wait_for_compactions().expect("wait");
    db.check_invariants().expect("invariants");
}

/// Puts `val(i, gen)` under `rkey(i)` (or deletes it for `None`), in the model too.
fn write(ks: &Keyspace, model: &mut BTreeMap<Vec<u8>, Vec<u8>>, i: u64, gen: Option<u64>) {
    match gen {
        Some(g) => {
            ks.put(rkey(i), val(i, g)).expect("put");
            model.insert(rkey(i), val(i, g));
        }
        None => {
            ks.delete(rkey(i)).expect("delete");
            model.remove(&rkey(i));
        }
    }
}

fn check_all(ks: &Keyspace, model: &BTreeMap<Vec<u8>, Vec<u8>>) {
    for (k, v) in model {
        assert_eq!(ks.get(k).expect("get").as_ref(), Some(v), "key {k:?}");
    }
    let got: Vec<(Vec<u8>, Vec<u8>)> = ks
        .range::<Vec<u8>, _>(..)
        .collect::<scree::Result<_>>()
        .expect("scan");
    let want: Vec<(Vec<u8>, Vec<u8>)> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    assert_eq!(got.len(), want.len());
    assert!(got == want, "forward scan differs");
    let mut rev: Vec<(Vec<u8>, Vec<u8>)> = ks
        .range::<Vec<u8>, _>(..)
        .rev()
        .collect::<scree::Result<_>>()
        .expect("reverse scan");
    rev.reverse();
    assert!(rev == want, "reverse scan differs");
    // Bounded ranges and prefixes that cut through guards.
    for p in [b"0".as_slice(), b"3a", b"7", b"c4", b"ff"] {
        let got: Vec<Vec<u8>> = ks
            .prefix(p)
            .map(|r| r.map(|(k, _)| k))
            .collect::<scree::Result<_>>()
            .expect("prefix");
        let want: Vec<Vec<u8>> = model.keys().filter(|k| k.starts_with(p)).cloned().collect();
        assert_eq!(got, want, "prefix {p:?}");
    }
    let (lo, hi) = (b"4".to_vec(), b"9c".to_vec());
    let got: Vec<Vec<u8>> = ks
        .range(lo.clone()..hi.clone())
        .rev()
        .map(|r| r.map(|(k, _)| k))
        .collect::<scree::Result<_>>()
        .expect("range");
    let mut want: Vec<Vec<u8>> = model.range(lo..hi).map(|(k, _)| k.clone()).collect();
    want.reverse();
    assert_eq!(got, want);
}

#[test]
fn several_levels_and_guards_are_exercised() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path(), common::small_db()).expect("open");
    let ks = db.keyspace("f", ks_opts()).expect("keyspace");
    let mut model = BTreeMap::new();
    let mut deepest_seen = 0;
    for round in 0..6u64 {
        for i in 0..1500u64 {
            let i = (i * 7 + round * 311) % 4000;
            if (i + round) % 13 == 0 {
                write(&ks, &mut model, i, None);
            } else {
                write(&ks, &mut model, i, Some(round));
            }
        }
        settle(&db);
        let ls = levels(&db);
        if let Some(d) = ls
            .iter()
            .filter(|l| l.level > 0 && l.tables > 0)
            .map(|l| l.level)
            .max()
        {
            deepest_seen = deepest_seen.max(d);
        }
        check_all(&ks, &model);
    }
    let ls = levels(&db);
    assert!(
        deepest_seen >= 2,
        "data should reach level 2 or deeper: {ls:?}"
    );
    assert!(
        ls.iter().filter(|l| l.level > 0).all(|l| guards(l) >= 2),
        "every level should have guards: {ls:?}"
    );
    assert!(
        ls.windows(2)
            .skip(1)
            .all(|w| guards(&w[0]) <= guards(&w[1])),
        "guards grow with depth: {ls:?}"
    );
    db.compact().expect("compact");
    db.check_invariants().expect("invariants after compact");
    let ls = levels(&db);
    assert_eq!(
        ls.first().map(|l| l.tables),
        Some(0),
        "compact empties L0: {ls:?}"
    );
    let nonempty: Vec<&LevelStats> = ls.iter().filter(|l| l.level > 0 && l.tables > 0).collect();
    assert_eq!(nonempty.len(), 1, "compact leaves one level: {ls:?}");
    assert!(
        nonempty.iter().all(|l| max_tables_per_guard(l) == 1),
        "{ls:?}"
    );
    check_all(&ks, &model);
}

#[test]
fn guards_survive_a_crash() {
    let fs = FaultFs::new(11);
    let mut opts = Options::default();
    opts.background_threads = 2;
    opts.block_cache_bytes = 64 * 1024;
    opts.fs = Some(fs.as_dyn());
    let mut model = BTreeMap::new();
    let before;
    {
        let db = Db::open("/db", opts.clone()).expect("open");
        let ks = db.keyspace("f", ks_opts()).expect("keyspace");
        for i in 0..5000u64 {
            write(&ks, &mut model, i, Some(0));
        }
        db.wait_for_compactions().expect("wait");
        for i in (0..5000u64).step_by(9) {
            write(&ks, &mut model, i, None);
        }
        ks.put_opt(b"last", b"synced", &scree::WriteOptions { sync: true })
            .expect("sync put");
        model.insert(b"last".to_vec(), b"synced".to_vec());
        db.flush().expect("flush");
        db.wait_for_compactions().expect("wait");
        before = levels(&db);
        assert!(
            before.iter().any(|l| l.level >= 2 && l.tables > 0),
            "{before:?}"
        );
        // Power loss without closing anything.
        fs.freeze();
        drop(ks);
        drop(db);
    }
    fs.crash(CrashMode::Drop);
    let db = Db::open("/db", opts.clone()).expect("reopen");
    let ks = db.keyspace("f", ks_opts()).expect("keyspace");
    db.check_invariants().expect("invariants after recovery");
    let after = levels(&db);
    let shape = |ls: &[LevelStats]| -> Vec<(u32, u64, u64, String)> {
        ls.iter()
            .map(|l| (l.level, l.tables, l.bytes, l.detail.clone()))
            .collect()
    };
    assert_eq!(shape(&before), shape(&after), "guards and tables recovered");
    check_all(&ks, &model);
    // Compactions keep working on the recovered guards.
    for i in 5000..8000u64 {
        write(&ks, &mut model, i, Some(1));
    }
    settle(&db);
    check_all(&ks, &model);
}

#[test]
fn crash_during_compactions_recovers_a_consistent_state() {
    for freeze_after in [200u64, 900, 2500] {
        let fs = FaultFs::new(freeze_after);
        let mut opts = Options::default();
        opts.background_threads = 2;
        opts.block_cache_bytes = 64 * 1024;
        opts.fs = Some(fs.as_dyn());
        {
            let db = Db::open("/db", opts.clone()).expect("open");
            let ks = db.keyspace("f", ks_opts()).expect("keyspace");
            for i in 0..3000u64 {
                ks.put_opt(rkey(i), val(i, 0), &scree::WriteOptions { sync: i < 100 })
                    .expect("put");
            }
            db.wait_for_compactions().expect("wait");
            let ops = fs.ops();
            fs.freeze_at_op(ops + freeze_after);
            for i in 3000..6000u64 {
                if ks.put(rkey(i), val(i, 0)).is_err() {
                    break;
                }
            }
            fs.freeze();
        }
        fs.crash(CrashMode::KeepPartial);
        let db = Db::open("/db", opts.clone()).expect("reopen");
        let ks = db.keyspace("f", ks_opts()).expect("keyspace");
        db.check_invariants().expect("invariants after recovery");
        for i in 0..100u64 {
            assert_eq!(
                ks.get(rkey(i)).expect("get"),
                Some(val(i, 0)),
                "synced key {i}"
            );
        }
        // Whatever survived is a prefix of the writes.
        let mut missing = false;
        for i in 0..6000u64 {
            match ks.get(rkey(i)).expect("get") {
                Some(v) => {
                    assert!(!missing, "key {i} survived after a lost key");
                    assert_eq!(v, val(i, 0));
                }
                None => missing = true,
            }
        }
        db.compact().expect("compact");
        db.check_invariants().expect("invariants");
    }
}

#[test]
fn sequential_keys_stay_correct() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path(), common::small_db()).expect("open");
    let ks = db.keyspace("f", ks_opts()).expect("keyspace");
    let mut model = BTreeMap::new();
    let key = |i: u64| format!("{i:010}").into_bytes();
    for i in 0..8000u64 {
        ks.put(key(i), val(i, 0)).expect("put");
        model.insert(key(i), val(i, 0));
        if i % 1000 == 999 {
            // Revisit an old range now and then.
            for j in (i - 999..i).step_by(50) {
                ks.delete(key(j)).expect("delete");
                model.remove(&key(j));
            }
            db.check_invariants().expect("invariants");
        }
    }
    settle(&db);
    let ls = levels(&db);
    assert!(
        ls.iter().any(|l| l.level >= 1 && guards(l) > 2),
        "guards follow the keys: {ls:?}"
    );
    for (k, v) in &model {
        assert_eq!(ks.get(k).expect("get").as_ref(), Some(v));
    }
    let got: Vec<Vec<u8>> = ks
        .range::<Vec<u8>, _>(..)
        .map(|r| r.map(|(k, _)| k))
        .collect::<scree::Result<_>>()
        .expect("scan");
    assert_eq!(got, model.keys().cloned().collect::<Vec<_>>());
    db.compact().expect("compact");
    db.check_invariants().expect("invariants");
    let got: Vec<Vec<u8>> = ks
        .range::<Vec<u8>, _>(..)
        .rev()
        .map(|r| r.map(|(k, _)| k))
        .collect::<scree::Result<_>>()
        .expect("scan");
    assert_eq!(got.len(), model.len());
}

#[test]
fn one_table_per_guard_behaves_like_leveled() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path(), common::small_db()).expect("open");
    let mut o = ks_opts();
    o.fragmented.max_sstables_per_guard = 1;
    let ks = db.keyspace("f", o).expect("keyspace");
    let mut model = BTreeMap::new();
    for round in 0..3u64 {
        for i in 0..3000u64 {
            let i = mix(i + round * 3000) % 5000;
            write(&ks, &mut model, i, Some(round));
        }
        settle(&db);
        let ls = levels(&db);
        for l in ls.iter().filter(|l| l.level > 0) {
            assert!(max_tables_per_guard(l) <= 1, "one table per guard: {ls:?}");
        }
    }
    check_all(&ks, &model);
}

#[test]
fn seeks_trigger_compaction_of_fragmented_guards() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path(), common::small_db()).expect("open");
    let mut o = ks_opts();
    o.fragmented.max_sstables_per_guard = 4;
    o.fragmented.level_base_bytes = 0;
    o.fragmented.aggressive_ratio = 0.0;
    o.fragmented.seek_compaction_threshold = 3;
    // One flush per round, each compacted into level 1 on its own: three fragments per guard.
    o.write_buffer_bytes = 1 << 20;
    o.fragmented.l0_compaction_trigger = 1;
    let ks = db.keyspace("f", o).expect("keyspace");
    for round in 0..3u64 {
        for i in 0..1200u64 {
            ks.put(rkey(i), val(i, round)).expect("put");
        }
        db.flush().expect("flush");
        db.wait_for_compactions().expect("wait");
    }
    db.wait_for_compactions().expect("wait");
    let before = levels(&db);
    let multi = before
        .iter()
        .filter(|l| l.level > 0)
        .map(max_tables_per_guard)
        .max()
        .unwrap_or(0);
    assert!(multi >= 2, "guards should hold several tables: {before:?}");
    let c0 = db.stats().compactions;
    let deadline = Instant::now() + Duration::from_secs(20);
    while db.stats().compactions == c0 && Instant::now() < deadline {
        for i in 0..200u64 {
            let mut it = ks.range(rkey(i)..);
            let _ = it.next();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        db.stats().compactions > c0,
        "seeks should trigger a compaction"
    );
    settle(&db);
    for i in 0..1200u64 {
        assert_eq!(ks.get(rkey(i)).expect("get"), Some(val(i, 2)));
    }
}

#[test]
fn parallel_seeks_return_the_same_entries() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path(), common::small_db()).expect("open");
    let mut o = ks_opts();
    o.fragmented.parallel_seeks = true;
    o.fragmented.max_sstables_per_guard = 4;
    o.fragmented.seek_compaction_threshold = 0;
    let ks = db.keyspace("f", o).expect("keyspace");
    let mut model = BTreeMap::new();
    for round in 0..5u64 {
        for i in 0..1500u64 {
            let i = mix(i ^ round) % 3000;
            write(&ks, &mut model, i, Some(round));
        }
        db.flush().expect("flush");
    }
    db.wait_for_compactions().expect("wait");
    check_all(&ks, &model);
    for i in 0..300u64 {
        let start = rkey(mix(i) % 4000);
        let got: Vec<Vec<u8>> = ks
            .range(start.clone()..)
            .take(5)
            .map(|r| r.map(|(k, _)| k))
            .collect::<scree::Result<_>>()
            .expect("seek");
        let want: Vec<Vec<u8>> = model
            .range(start..)
            .take(5)
            .map(|(k, _)| k.clone())
            .collect();
        assert_eq!(got, want);
    }
}

#[test]
fn snapshots_see_their_versions_across_compactions() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path(), common::small_db()).expect("open");
    let ks = db.keyspace("f", ks_opts()).expect("keyspace");
    for i in 0..2000u64 {
        ks.put(rkey(i), val(i, 0)).expect("put");
    }
    let snap = db.snapshot();
    for i in 0..2000u64 {
        if i % 3 == 0 {
            ks.delete(rkey(i)).expect("delete");
        } else {
            ks.put(rkey(i), val(i, 1)).expect("put");
        }
    }
    db.compact().expect("compact");
    db.check_invariants().expect("invariants");
    for i in 0..2000u64 {
        assert_eq!(snap.get(&ks, rkey(i)).expect("get"), Some(val(i, 0)));
        let now = ks.get(rkey(i)).expect("get");
        assert_eq!(now, if i % 3 == 0 { None } else { Some(val(i, 1)) });
    }
    let n = snap.range::<Vec<u8>, _>(&ks, ..).count();
    assert_eq!(n, 2000);
    drop(snap);
    db.compact().expect("compact");
    let n = ks.range::<Vec<u8>, _>(..).count();
    assert_eq!(n, 2000 - 667);
}

#[test]
fn the_last_level_merges_in_place() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path(), common::small_db()).expect("open");
    let mut o = ks_opts();
    o.fragmented.max_levels = 3;
    o.fragmented.level_base_bytes = 0;
    let ks = db.keyspace("f", o).expect("keyspace");
    let mut model = BTreeMap::new();
    for round in 0..8u64 {
        for i in 0..1500u64 {
            let i = mix(i + round * 1500) % 3000;
            if i % 11 == round % 11 {
                write(&ks, &mut model, i, None);
            } else {
                write(&ks, &mut model, i, Some(round));
            }
        }
        settle(&db);
    }
    let ls = levels(&db);
    let last = ls.iter().find(|l| l.level == 2).expect("level 2");
    assert!(last.tables > 0, "data reaches the last level: {ls:?}");
    assert!(
        max_tables_per_guard(last) <= 2,
        "last level merged in place: {ls:?}"
    );
    assert!(
        ls.iter().all(|l| l.level <= 2),
        "no level below the last: {ls:?}"
    );
    check_all(&ks, &model);
}

#[test]
fn the_level_count_is_fixed_when_the_keyspace_is_created() {
    // Recovery opens keyspaces with default options until the application names them again:
    // compactions in between must not change the number of levels (it once broke the guard
    // nesting after a crash).
    let dir = tempfile::tempdir().expect("tempdir");
    let mut model = BTreeMap::new();
    {
        let db = Db::open(dir.path(), common::small_db()).expect("open");
        let ks = db.keyspace("f", ks_opts()).expect("keyspace");
        for i in 0..3000u64 {
            write(&ks, &mut model, i, Some(0));
        }
        db.wait_for_compactions().expect("wait");
    }
    let db = Db::open(dir.path(), common::small_db()).expect("reopen");
    let mut o = ks_opts();
    o.fragmented.max_levels = 7;
    let ks = db.keyspace("f", o).expect("keyspace");
    for round in 1..4u64 {
        for i in 0..3000u64 {
            let i = mix(i + round) % 6000;
            write(&ks, &mut model, i, Some(round));
        }
        settle(&db);
    }
    db.compact().expect("compact");
    db.check_invariants().expect("invariants");
    let ls = levels(&db);
    assert!(ls.iter().all(|l| l.level <= 3), "still 4 levels: {ls:?}");
    check_all(&ks, &model);
}
