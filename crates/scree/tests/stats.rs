//! Statistics that must agree with the engine's own I/O accounting.

mod common;

use scree::{Db, Layout, Stats};

fn value(i: u64) -> Vec<u8> {
    let mut v = format!("value-{i}-").into_bytes();
    v.resize(100, b'v');
    v
}

fn level_writes(s: &Stats) -> Vec<scree::LevelWrites> {
    s.keyspaces
        .first()
        .map(|k| k.level_writes.clone())
        .unwrap_or_default()
}

/// A forward scan returns the model's entries and a reverse scan its keys backwards.
fn scans_match_the_model(
    ks: &scree::Keyspace,
    model: &std::collections::BTreeMap<Vec<u8>, Vec<u8>>,
    layout: Layout,
) {
    let fwd: Vec<(Vec<u8>, Vec<u8>)> = ks
        .range::<&[u8], _>(..)
        .map(|r| r.map(|(k, v)| (k.to_vec(), v.to_vec())))
        .collect::<scree::Result<_>>()
        .unwrap();
    let want: Vec<(Vec<u8>, Vec<u8>)> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    assert_eq!(fwd, want, "{layout}: forward scan");
    let rev: Vec<Vec<u8>> = ks
        .range::<&[u8], _>(..)
        .rev()
        .map(|r| r.map(|(k, _)| k.to_vec()))
        .collect::<scree::Result<_>>()
        .unwrap();
    assert_eq!(rev.len(), want.len(), "{layout}: reverse scan");
    assert!(rev.iter().rev().eq(want.iter().map(|(k, _)| k)), "{layout}");
}

/// Per-level writes are counted from the tables each edit adds, the I/O accounting from the
/// bytes each file writer wrote: over flushes, compactions, moves and (trie) garbage
/// collection they must name the same bytes.
#[test]
fn level_writes_add_up_to_the_bytes_written_by_cause() {
    for layout in Layout::implemented() {
        let layout = &layout;
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), common::small_db()).unwrap();
        let ks = db.keyspace("k", common::small_ks(*layout)).unwrap();
        // Random order with overwrites and deletes, so merges drop versions.
        for round in 0..3u64 {
            for i in 0..6000u64 {
                let k = (i * 7919 + round * 13) % 6000;
                ks.put(format!("key{k:06}"), value(k + round)).unwrap();
                if i % 10 == 0 {
                    ks.delete(format!("key{:06}", (k * 31) % 6000)).unwrap();
                }
            }
        }
        db.flush().unwrap();
        db.wait_for_compactions().unwrap();
        let s = db.stats();
        let lw = level_writes(&s);
        let name = layout.name();
        let flushed: u64 = lw.iter().map(|w| w.flush_bytes).sum();
        let compacted: u64 = lw.iter().map(|w| w.compaction_bytes).sum();
        assert_eq!(flushed, s.bytes_written.flush, "{name}: {lw:?}");
        assert_eq!(
            compacted,
            s.bytes_written.compaction + s.bytes_written.gc,
            "{name}: {lw:?}"
        );
        assert!(compacted > 0, "{name}: no compaction ran: {lw:?}");
        // Time spent: flushes and compactions each took some; the longest flush is one of
        // them.
        assert!(s.flushes > 0 && s.flush_seconds > 0.0, "{name}: {s:?}");
        assert!(
            s.max_flush_seconds > 0.0 && s.max_flush_seconds <= s.flush_seconds,
            "{name}: {s:?}"
        );
        assert!(s.compaction_seconds > 0.0, "{name}: {s:?}");
        // Flushes land at level 0 only; every written level read what it merged.
        for w in &lw {
            assert!(w.level == 0 || w.flush_bytes == 0, "{name}: {w:?}");
            assert!(
                w.compaction_bytes == 0 || w.input_bytes > 0,
                "{name}: {w:?}"
            );
            let share = (w.flush_bytes + w.compaction_bytes) as f64 / s.user_bytes as f64;
            assert!(
                (w.bytes_per_user_byte - share).abs() < 1e-9,
                "{name}: {w:?}"
            );
        }
        // Levels are listed in order, each once.
        assert!(
            lw.windows(2).all(|p| p[0].level < p[1].level),
            "{name}: {lw:?}"
        );
        // The deepest written level holds data now.
        let shape = &s.keyspaces[0].levels;
        let deepest = lw
            .iter()
            .filter(|w| w.compaction_bytes > 0)
            .map(|w| w.level)
            .max();
        assert!(
            shape
                .iter()
                .any(|l| Some(l.level) == deepest && l.tables > 0),
            "{name}: {lw:?} {shape:?}"
        );
    }
}

/// A scan at an old snapshot stops at its upper bound, rather than skipping every later key
/// whose versions are all newer than the snapshot and reading to the end of the keyspace
/// (4,035 data blocks for a 10-key range). Counted, for both sorted layouts.
#[test]
fn a_snapshot_scan_stops_at_its_upper_bound() {
    for layout in [Layout::Leveled, Layout::Fragmented] {
        let dir = tempfile::tempdir().expect("dir");
        let mut o = common::small_db();
        o.block_cache_bytes = 0;
        let db = Db::open(dir.path(), o).expect("open");
        let ks = db.keyspace("t", common::small_ks(layout)).expect("ks");
        for i in 0..10 {
            ks.put(format!("a{i}"), b"v").expect("put");
        }
        let snap = db.snapshot();
        for i in 0..20_000u64 {
            ks.put(format!("z{i:06}"), value(i)).expect("put");
        }
        db.flush().expect("flush");
        db.wait_for_compactions().expect("wait");
        let reads = |f: &dyn Fn() -> usize| {
            let before = db.stats().data_block_reads;
            let n = f();
            (n, db.stats().data_block_reads - before)
        };
        let (n, at_snapshot) = reads(&|| {
            snap.range(&ks, b"a".to_vec()..b"b".to_vec())
                .collect::<scree::Result<Vec<_>>>()
                .expect("scan")
                .len()
        });
        assert_eq!(n, 10);
        let (n, latest) = reads(&|| {
            ks.range(b"a".to_vec()..b"b".to_vec())
                .collect::<scree::Result<Vec<_>>>()
                .expect("scan")
                .len()
        });
        assert_eq!(n, 10);
        assert!(
            at_snapshot <= latest + 4,
            "{layout:?}: {at_snapshot} data blocks at the snapshot, {latest} at the latest"
        );
    }
}

/// A compaction's lookup of a cached block is no cache hit, as its misses count nowhere (they
/// are compaction block reads, kept apart from lookup costs): counted, `cache_hits` would grow
/// without a single read by the user and the hit ratio be overstated.
#[test]
fn compactions_do_not_count_as_cache_hits() {
    let dir = tempfile::tempdir().expect("dir");
    let mut o = common::small_db();
    o.block_cache_bytes = 8 << 20;
    let db = Db::open(dir.path(), o).expect("open");
    let ks = db
        .keyspace("t", common::small_ks(Layout::Leveled))
        .expect("ks");
    for i in 0..3000u64 {
        ks.put(format!("k{i:06}"), value(i)).expect("put");
    }
    db.flush().expect("flush");
    db.wait_for_compactions().expect("wait");
    // Every block in the cache.
    for i in 0..3000u64 {
        assert!(ks.get(format!("k{i:06}")).expect("get").is_some());
    }
    let before = db.stats();
    // Only writes from here on: the compactions read the cached tables.
    for i in 0..3000u64 {
        ks.put(format!("k{i:06}"), value(i + 1)).expect("put");
    }
    db.flush().expect("flush");
    db.compact().expect("compact");
    db.wait_for_compactions().expect("wait");
    let after = db.stats();
    assert!(after.compaction_block_reads > before.compaction_block_reads);
    assert_eq!(
        (after.cache_hits, after.cache_misses),
        (before.cache_hits, before.cache_misses),
        "no lookup ran"
    );
}

/// `open_table_files` and `table_reader_bytes` count what the open tables pin (file
/// descriptors, maps, index blocks and filters) and give it back when the tables are merged
/// away; a reopened database starts from what it opens again.
#[test]
fn table_reader_memory_is_counted_and_released() {
    for layout in [Layout::Leveled, Layout::Fragmented] {
        let dir = tempfile::tempdir().unwrap();
        let tables = |db: &Db| -> u64 {
            db.stats().keyspaces[0]
                .levels
                .iter()
                .map(|l| l.tables)
                .sum()
        };
        let n = 6000u64;
        let key = |i: u64| format!("key{:08}", i.wrapping_mul(7919) % n).into_bytes();
        {
            let db = Db::open(dir.path(), common::small_db()).unwrap();
            let ks = db.keyspace("k", common::small_ks(layout)).unwrap();
            for i in 0..n {
                ks.put(key(i), value(i)).unwrap();
            }
            db.flush().unwrap();
            db.wait_for_compactions().unwrap();
            for i in 0..n {
                assert!(ks.get(key(i)).unwrap().is_some());
            }
            let s = db.stats();
            let t = tables(&db);
            assert!(t > 4, "{layout}: {t} tables");
            // Every table holds keys, so reading every key opened every table.
            assert_eq!(s.open_table_files, t, "{layout}");
            assert!(s.table_reader_bytes > 0, "{layout}");
            // Overwrite everything and merge it down: the old tables' pins are released.
            for i in 0..n {
                ks.put(key(i), value(i + 1)).unwrap();
            }
            db.compact().unwrap();
            db.wait_for_compactions().unwrap();
            for i in 0..n {
                assert!(ks.get(key(i)).unwrap().is_some());
            }
            let s = db.stats();
            assert_eq!(s.open_table_files, tables(&db), "{layout}");
        }
        let db = Db::open(dir.path(), common::small_db()).unwrap();
        let ks = db.keyspace("k", common::small_ks(layout)).unwrap();
        assert_eq!(
            db.stats().open_table_files,
            0,
            "{layout}: tables open lazily"
        );
        assert!(ks.get(key(1)).unwrap().is_some());
        let s = db.stats();
        assert!(s.open_table_files >= 1 && s.open_table_files <= tables(&db));
    }
}

/// `Options::max_open_files` (without a bound every sorted table stays open with its index and
/// filter, ≈ 3.4 bytes per key, and a descriptor): with a bound of 3 and many more tables,
/// every key still reads back, through gets, forward and reverse scans and after overwrites,
/// and no more than 3 readers stay open once reads and compactions end.
/// The `trie` layout's HTables and BloomClusters are under the same bound (without it, every
/// HTable stays open with a descriptor), and its gets hold too.
#[test]
fn a_bound_on_open_tables_holds_and_every_key_still_reads() {
    for layout in Layout::implemented() {
        let dir = tempfile::tempdir().unwrap();
        let mut o = common::small_db();
        o.max_open_files = 3;
        let n = 6000u64;
        let key = |i: u64| format!("key{:08}", i.wrapping_mul(7919) % n).into_bytes();
        let db = Db::open(dir.path(), o.clone()).unwrap();
        let ks = db.keyspace("k", common::small_ks(layout)).unwrap();
        let mut model = std::collections::BTreeMap::new();
        for round in 0..2u64 {
            for i in 0..n {
                if round == 1 && i % 5 == 0 {
                    ks.delete(key(i)).unwrap();
                    model.remove(&key(i));
                } else {
                    ks.put(key(i), value(i + round)).unwrap();
                    model.insert(key(i), value(i + round));
                }
            }
            db.flush().unwrap();
            db.wait_for_compactions().unwrap();
            let tables: u64 = db.stats().keyspaces[0]
                .levels
                .iter()
                .map(|l| l.tables)
                .sum();
            assert!(tables > 6, "{layout}: only {tables} tables");
            for i in 0..n {
                assert_eq!(
                    ks.get(key(i)).unwrap(),
                    model.get(&key(i)).cloned(),
                    "{layout}: key {i}"
                );
            }
            // Gets may start compactions (`leveled`'s seek compaction), which hold their
            // inputs' readers open while they run.
            db.wait_for_compactions().unwrap();
            let open = db.stats().open_table_files;
            assert!(
                open <= 3,
                "{layout}: {open} readers open of {tables} tables"
            );
            if !layout.order().serves_range() {
                continue;
            }
            scans_match_the_model(&ks, &model, layout);
            let open = db.stats().open_table_files;
            assert!(
                open <= 3,
                "{layout}: {open} readers open of {tables} tables"
            );
        }
        drop(ks);
        drop(db);
        // The same store without a bound keeps every table it reads open.
        let db = Db::open(dir.path(), common::small_db()).unwrap();
        let ks = db.keyspace("k", common::small_ks(layout)).unwrap();
        for i in 0..n {
            assert_eq!(ks.get(key(i)).unwrap(), model.get(&key(i)).cloned());
        }
        assert!(db.stats().open_table_files > 3, "{layout}");
    }
}

/// Three threads read 20,000 keys each from a 3,000-key keyspace under `o` while the main
/// thread overwrites every key three times and flushes; every get finds its key's value
/// (each value names its key). Returns the database, compactions done.
fn reads_beside_rewrites_stay_correct(
    layout: Layout,
    o: scree::Options,
) -> (Db, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), o).unwrap();
    let ks = db.keyspace("k", common::small_ks(layout)).unwrap();
    let n = 3000u64;
    let key = |i: u64| format!("key{i:08}").into_bytes();
    let val = |i: u64, r: u64| {
        let mut v = format!("{i}:{r}:").into_bytes();
        v.resize(80, b'v');
        v
    };
    for i in 0..n {
        ks.put(key(i), val(i, 0)).unwrap();
    }
    db.flush().unwrap();
    std::thread::scope(|s| {
        for t in 0..3u64 {
            let ks = ks.clone();
            s.spawn(move || {
                for j in 0..20_000u64 {
                    let i = (j * 7 + t * 1013) % n;
                    let v = ks.get(key(i)).unwrap().expect("every key was written");
                    let head = format!("{i}:");
                    assert!(v.starts_with(head.as_bytes()), "{layout}: key {i}");
                }
            });
        }
        for r in 1..4u64 {
            for i in 0..n {
                ks.put(key(i), val(i, r)).unwrap();
            }
            db.flush().unwrap();
        }
    });
    db.wait_for_compactions().unwrap();
    (db, dir)
}

/// Readers closed and reopened under the bound while other threads read through them and
/// compactions replace them: every get finds the key's value (each value names its key).
#[test]
fn concurrent_reads_under_a_tight_open_table_bound_stay_correct() {
    for layout in Layout::implemented() {
        let mut o = common::small_db();
        o.max_open_files = 2;
        let (db, _dir) = reads_beside_rewrites_stay_correct(layout, o);
        assert!(db.stats().open_table_files <= 2, "{layout}");
    }
}

/// `Options::cache_index_and_filter_blocks`: with a block cache far smaller than the store's
/// index blocks and filters, no sorted table pins them, the cache stays within its budget,
/// the ones it evicted are read again when used, and every key reads back through gets and
/// both scan directions, under deletes and overwrites. The same store reopened with them
/// pinned holds more than twice the cache's budget outside the cache (so the bound is real).
#[test]
fn cached_index_and_filter_blocks_stay_within_the_cache_and_every_key_still_reads() {
    for layout in [Layout::Leveled, Layout::Fragmented] {
        let dir = tempfile::tempdir().unwrap();
        let budget = 64usize << 10;
        let mut o = common::small_db();
        o.block_cache_bytes = budget;
        o.cache_index_and_filter_blocks = true;
        let n = 12_000u64;
        let key = |i: u64| format!("key{:08}", i.wrapping_mul(7919) % n).into_bytes();
        let db = Db::open(dir.path(), o).unwrap();
        let ks = db.keyspace("k", common::small_ks(layout)).unwrap();
        let mut model = std::collections::BTreeMap::new();
        for round in 0..2u64 {
            for i in 0..n {
                if round == 1 && i % 5 == 0 {
                    ks.delete(key(i)).unwrap();
                    model.remove(&key(i));
                } else {
                    ks.put(key(i), value(i + round)).unwrap();
                    model.insert(key(i), value(i + round));
                }
            }
            db.flush().unwrap();
            db.wait_for_compactions().unwrap();
            for i in 0..n {
                assert_eq!(
                    ks.get(key(i)).unwrap(),
                    model.get(&key(i)).cloned(),
                    "{layout}: key {i}"
                );
            }
            for i in 0..2000u64 {
                let k = format!("absent{i}");
                assert_eq!(ks.get(k.as_bytes()).unwrap(), None, "{layout}: {k}");
            }
            scans_match_the_model(&ks, &model, layout);
            let s = db.stats();
            assert!(
                s.block_cache_usage_bytes <= budget as u64,
                "{layout}: cache holds {} of {budget}",
                s.block_cache_usage_bytes
            );
            // An open reader without its index and filter holds a few hundred bytes.
            assert!(
                s.table_reader_bytes <= 512 * s.open_table_files,
                "{layout}: {} bytes pinned by {} open tables",
                s.table_reader_bytes,
                s.open_table_files
            );
            assert!(s.index_filter_cache_hits > 0, "{layout}");
            assert!(
                s.index_filter_cache_misses > 0,
                "{layout}: nothing was evicted and read again"
            );
        }
        drop(ks);
        drop(db);
        let db = Db::open(dir.path(), common::small_db()).unwrap();
        let ks = db.keyspace("k", common::small_ks(layout)).unwrap();
        for i in 0..n {
            assert_eq!(ks.get(key(i)).unwrap(), model.get(&key(i)).cloned());
        }
        let s = db.stats();
        assert_eq!(
            (s.index_filter_cache_hits, s.index_filter_cache_misses),
            (0, 0),
            "{layout}: pinned"
        );
        assert!(
            s.table_reader_bytes > 2 * budget as u64,
            "{layout}: pinned index and filters hold only {} bytes",
            s.table_reader_bytes
        );
    }
}

/// Readers whose index blocks and filters live in a cache too small to keep them, read by
/// several threads while flushes and compactions replace the tables: every get finds its
/// key's value (each value names its key), and the evicted ones are read again.
#[test]
fn concurrent_reads_with_cached_index_and_filter_blocks_stay_correct() {
    for layout in [Layout::Leveled, Layout::Fragmented] {
        let mut o = common::small_db();
        o.block_cache_bytes = 32 << 10;
        o.cache_index_and_filter_blocks = true;
        o.max_open_files = 4;
        let (db, _dir) = reads_beside_rewrites_stay_correct(layout, o);
        let s = db.stats();
        assert!(s.index_filter_cache_misses > 0, "{layout}");
        assert!(s.block_cache_usage_bytes <= 32 << 10, "{layout}");
    }
}

/// A block cache is required to hold index blocks and filters.
#[test]
fn cached_index_and_filter_blocks_without_a_cache_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = common::small_db();
    o.block_cache_bytes = 0;
    o.cache_index_and_filter_blocks = true;
    match Db::open(dir.path(), o) {
        Err(scree::Error::InvalidArgument(m)) => {
            assert!(m.contains("cache_index_and_filter_blocks"), "{m}")
        }
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("opened without a cache"),
    }
}

/// With the slowdown trigger at the compaction trigger and no stop, a backlog forms at every
/// compaction: writers are delayed (the delayed write rate) and never stopped, and every
/// write is there afterwards.
#[test]
fn a_backlog_delays_writers_without_stopping_them() {
    for layout in Layout::implemented() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), common::small_db()).unwrap();
        let mut o = common::small_ks(layout);
        o.leveled.l0_compaction_trigger = 2;
        o.leveled.l0_slowdown_trigger = 2;
        o.leveled.l0_stop_trigger = 1000;
        o.fragmented.l0_slowdown_trigger = 2;
        o.fragmented.l0_stop_trigger = 1000;
        o.trie.slowdown_sublevels = o.trie.pile_size;
        o.trie.stop_sublevels = 1000;
        o.semisorted.slowdown_sublevels = o.semisorted.sub_levels;
        o.semisorted.stop_sublevels = 200;
        o.lightweight.l0_slowdown_trigger = 2;
        o.lightweight.l0_stop_trigger = 1000;
        let ks = db.keyspace("k", o).unwrap();
        let mut model = std::collections::BTreeMap::new();
        for i in 0..30_000u64 {
            let k = format!("key{:08}", (i * 7919) % 30_000).into_bytes();
            ks.put(&k, value(i)).unwrap();
            model.insert(k, value(i));
        }
        let s = db.stats();
        assert!(s.slowdown_seconds > 0.0, "{layout}: never delayed: {s:?}");
        let stopped = s.stall_seconds - s.memtable_stall_seconds;
        assert!(
            stopped < 1e-9,
            "{layout}: stopped {stopped} s without a stop trigger"
        );
        for (k, v) in &model {
            assert_eq!(ks.get(k).unwrap().as_deref(), Some(&v[..]), "{layout}");
        }
    }
}
