//! Tests of the `semisorted` layout: keys shorter than the prefix refused, every level used
//! by stepped merges, gets and prefix scans (forward and reverse, at snapshots) against a
//! model through flushes, merges, full compactions and reopens, ranges refused, and lookups
//! answered through the levels' filters with about one data-block read.

mod common;

use std::collections::BTreeMap;

use scree::{Db, Error, KeyspaceOptions, Layout, LevelPlan};

const PREFIX: usize = 8;

fn opts() -> KeyspaceOptions {
    common::small_ks(Layout::SemiSorted { prefix_len: PREFIX })
}

/// Key `i` of group `g`: an 8-byte prefix and an 8-byte suffix (§5.4's keys).
fn key(g: u64, i: u64) -> Vec<u8> {
    let mut k = g.to_be_bytes().to_vec();
    k.extend_from_slice(&i.to_be_bytes());
    k
}

fn value(g: u64, i: u64, gen: u64) -> Vec<u8> {
    let mut v = format!("{g}-{i}-{gen}-").into_bytes();
    v.resize(60, b'v');
    v
}

/// A deterministic pseudo-random sequence.
struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

fn group(model: &BTreeMap<Vec<u8>, Vec<u8>>, g: u64) -> Vec<(Vec<u8>, Vec<u8>)> {
    let p = g.to_be_bytes();
    model
        .range(p.to_vec()..)
        .take_while(|(k, _)| k.starts_with(&p))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn check(ks: &scree::Keyspace, model: &BTreeMap<Vec<u8>, Vec<u8>>, groups: u64, per: u64) {
    for g in 0..groups {
        for i in 0..per {
            let k = key(g, i);
            assert_eq!(ks.get(&k).unwrap(), model.get(&k).cloned(), "key {g}/{i}");
        }
        let want = group(model, g);
        let got: Vec<_> = ks
            .prefix(g.to_be_bytes())
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        assert_eq!(got, want, "group {g}");
        let mut rev: Vec<_> = ks
            .prefix(g.to_be_bytes())
            .rev()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        rev.reverse();
        assert_eq!(rev, want, "group {g} reversed");
    }
}

#[test]
fn short_keys_and_ranges_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), common::small_db()).unwrap();
    let ks = db.keyspace("s", opts()).unwrap();
    match ks.put(b"short", b"v") {
        Err(Error::InvalidArgument(m)) => assert!(m.contains("8-byte prefix"), "{m}"),
        other => panic!("{other:?}"),
    }
    let mut b = scree::WriteBatch::new();
    b.put(&ks, b"1234567", b"v");
    assert!(matches!(
        db.write(b, &Default::default()),
        Err(Error::InvalidArgument(_))
    ));
    ks.put(key(1, 1), b"v").unwrap();
    match ks.range::<&[u8], _>(..).next() {
        Some(Err(Error::Unsupported(m))) => assert!(m.contains("8-byte prefix"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        ks.prefix(b"123").next(),
        Some(Err(Error::Unsupported(_)))
    ));
}

#[test]
fn a_model_holds_through_stepped_merges_compactions_and_reopens() {
    model_run(opts(), 6);
}

/// Every structure of Table 1 holds the model: LSM levels (one run, merged with what
/// arrives), levels without filters, indexes read per lookup, and Figure 4's mix.
#[test]
fn every_level_structure_holds_the_model() {
    let rows: [&[u8]; 5] = [&[2], &[0], &[4], &[7, 5, 1, 3], &[6, 6, 2, 3]];
    for rows in rows {
        let mut o = opts();
        o.semisorted.max_levels = 4;
        o.semisorted.plan = rows
            .iter()
            .map(|&t| LevelPlan::from_row(t).unwrap())
            .collect();
        model_run(o, 2);
    }
}

fn model_run(o: KeyspaceOptions, rounds: u64) {
    let opts = || o.clone();
    let dir = tempfile::tempdir().unwrap();
    let mut model = BTreeMap::new();
    let (groups, per) = (40u64, 60u64);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut db = Db::open(dir.path(), common::small_db()).unwrap();
    for round in 0..rounds {
        {
            let ks = db.keyspace("s", opts()).unwrap();
            for n in 0..3000u64 {
                let (g, i) = (rng.below(groups), rng.below(per));
                let k = key(g, i);
                match rng.below(10) {
                    0 => {
                        ks.delete(&k).unwrap();
                        model.remove(&k);
                    }
                    1 => {
                        let v = value(g, i, round * 10_000 + n);
                        let put = ks.put_if_absent(&k, &v).unwrap();
                        assert_eq!(put, !model.contains_key(&k));
                        model.entry(k).or_insert(v);
                    }
                    2 => {
                        // A read-modify-write: a non-blind write whose read tells the flush
                        // where the key was (SlimDB's Algorithm 2); every fifth one deletes.
                        let v = value(g, i, round * 10_000 + n);
                        let new = (n % 5 != 0).then(|| v.clone());
                        let old = model.get(&k).cloned();
                        let got = ks
                            .update(&k, |cur| {
                                assert_eq!(cur.map(<[u8]>::to_vec), old);
                                new.clone()
                            })
                            .unwrap();
                        assert_eq!(got, new);
                        match new {
                            Some(v) => model.insert(k, v),
                            None => model.remove(&k),
                        };
                    }
                    _ => {
                        let v = value(g, i, round * 10_000 + n);
                        ks.put(&k, &v).unwrap();
                        model.insert(k, v);
                    }
                }
            }
            check(&ks, &model, groups, per);
            if round % 2 == 1 {
                db.compact().unwrap();
                check(&ks, &model, groups, per);
            }
            // The merges the round made due run in the background: the shape is theirs once
            // they are done (read earlier, a loaded machine could see level 0 only).
            db.wait_for_compactions().unwrap();
            let shape: Vec<u64> = db.stats().keyspaces[0]
                .levels
                .iter()
                .map(|l| l.tables)
                .collect();
            if o.semisorted.plan.is_empty() {
                assert!(
                    shape.len() >= 2,
                    "stepped merges reached level 1: {shape:?}"
                );
            }
        }
        drop(db);
        db = Db::open(dir.path(), common::small_db()).unwrap();
        let ks = db.keyspace("s", opts()).unwrap();
        check(&ks, &model, groups, per);
    }
    drop(db);
    let problems = scree::check::check_db(dir.path()).unwrap();
    assert!(problems.is_empty(), "{problems:?}");
}

#[test]
fn snapshots_see_their_moment_through_merges() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), common::small_db()).unwrap();
    let ks = db.keyspace("s", opts()).unwrap();
    for i in 0..500 {
        ks.put(key(i % 7, i), value(0, i, 0)).unwrap();
    }
    let snap = db.snapshot();
    let before: Vec<_> = (0..7u64)
        .map(|g| snap.prefix(&ks, g.to_be_bytes()).count())
        .collect();
    for i in 0..500 {
        if i % 3 == 0 {
            ks.delete(key(i % 7, i)).unwrap();
        } else {
            ks.put(key(i % 7, i), value(0, i, 1)).unwrap();
        }
    }
    db.compact().unwrap();
    for i in 0..500 {
        assert_eq!(snap.get(&ks, key(i % 7, i)).unwrap(), Some(value(0, i, 0)));
        let now = ks.get(key(i % 7, i)).unwrap();
        assert_eq!(now, (i % 3 != 0).then(|| value(0, i, 1)));
    }
    let after: Vec<_> = (0..7u64)
        .map(|g| snap.prefix(&ks, g.to_be_bytes()).count())
        .collect();
    assert_eq!(before, after);
}

/// With every filter present, a get of a present key reads one data block (two when its
/// versions straddle a block boundary) and a missing key almost none.
/// A database with a block cache of `cache_bytes` and a keyspace of `n` keys in 500 groups
/// (key `i` in group `i % 500`), flushed and compacted (filter rebuilds and merges done).
fn filled(cache_bytes: usize, n: u64) -> (tempfile::TempDir, Db, scree::Keyspace) {
    let dir = tempfile::tempdir().unwrap();
    let mut dbo = common::small_db();
    dbo.block_cache_bytes = cache_bytes;
    let db = Db::open(dir.path(), dbo).unwrap();
    let mut o = opts();
    o.write_buffer_bytes = 256 * 1024;
    let ks = db.keyspace("s", o).unwrap();
    for i in 0..n {
        ks.put(key(i % 500, i), value(0, i, 0)).unwrap();
    }
    db.flush().unwrap();
    db.compact().unwrap();
    (dir, db, ks)
}

#[test]
fn gets_read_about_one_block() {
    // No block cache: every block a lookup needs is read from its file.
    let n = 20_000u64;
    let (_dir, db, ks) = filled(0, n);
    let reads = |db: &Db| db.stats().data_block_reads;
    let before = reads(&db);
    for i in 0..n {
        assert!(ks.get(key(i % 500, i)).unwrap().is_some());
    }
    let present = (reads(&db) - before) as f64 / n as f64;
    let before = reads(&db);
    for i in n..2 * n {
        assert!(ks.get(key(i % 500, i)).unwrap().is_none());
    }
    let missing = (reads(&db) - before) as f64 / n as f64;
    assert!(present <= 1.05, "{present} data blocks per present get");
    assert!(missing <= 0.02, "{missing} data blocks per missing get");
    // The filters that answered are reported with the levels, as the heap they hold: at least
    // the fingerprint bits of every key (8 bits or more each).
    let filter_bytes: u64 = db.stats().keyspaces[0]
        .levels
        .iter()
        .map(|l| l.filter_bytes)
        .sum();
    assert!(
        filter_bytes >= n,
        "{filter_bytes} filter bytes for {n} keys"
    );
}

/// Lookups and prefix scans keep the blocks they read in the block cache: a second pass over
/// the same keys reads nothing from the files and counts hits, and returns the same values.
#[test]
fn lookups_keep_their_blocks_in_the_block_cache() {
    let n = 20_000u64;
    let (_dir, db, ks) = filled(64 << 20, n);
    let pass = || {
        let before = db.stats();
        for i in 0..n {
            assert_eq!(ks.get(key(i % 500, i)).unwrap(), Some(value(0, i, 0)));
        }
        for g in 0..500u64 {
            assert_eq!(ks.prefix(g.to_be_bytes()).count(), 40, "group {g}");
        }
        let after = db.stats();
        (
            after.data_block_reads - before.data_block_reads,
            after.cache_hits - before.cache_hits,
            after.cache_misses - before.cache_misses,
        )
    };
    let (reads, _, misses) = pass();
    assert!(
        reads > 0 && misses == reads,
        "first pass: {reads} reads, {misses} misses"
    );
    let (reads, hits, misses) = pass();
    assert_eq!((reads, misses), (0, 0), "second pass read from the files");
    assert!(hits >= n, "{hits} hits for {n} gets");
}

/// Flushes and stepped merges (merges down, in place at the last level, with sub-levels of
/// several tables) hand every level its filter: none is ever rebuilt while the database stays
/// open, and after a reopen each level is rebuilt once.
#[test]
fn filters_follow_merges_without_rebuilds() {
    let dir = tempfile::tempdir().unwrap();
    let rebuilt = |db: &Db| -> Vec<String> {
        db.stats().keyspaces[0]
            .levels
            .iter()
            .map(|l| l.detail.clone())
            .collect()
    };
    {
        let db = Db::open(dir.path(), common::small_db()).unwrap();
        let ks = db.keyspace("s", opts()).unwrap();
        for i in 0..40_000u64 {
            ks.put(key(i % 300, i), value(0, i, 0)).unwrap();
        }
        db.flush().unwrap();
        db.wait_for_compactions().unwrap();
        let d = rebuilt(&db);
        assert!(d.len() >= 3, "{d:?}");
        assert!(d.iter().all(|x| x.contains("(rebuilt 0×)")), "{d:?}");
        assert!(d.iter().all(|x| !x.contains("filter missing")), "{d:?}");
    }
    let db = Db::open(dir.path(), common::small_db()).unwrap();
    let ks = db.keyspace("s", opts()).unwrap();
    db.wait_for_compactions().unwrap();
    let d = rebuilt(&db);
    assert!(
        d.iter()
            .all(|x| x.contains("(rebuilt 1×)") || x.starts_with("0 sub-levels")),
        "{d:?}"
    );
    for i in (0..40_000u64).step_by(97) {
        assert_eq!(ks.get(key(i % 300, i)).unwrap(), Some(value(0, i, 0)));
    }
}

/// The secondary-table keys of each level's filter, from `stats()`.
fn secondary_keys(db: &Db) -> Vec<u64> {
    db.stats().keyspaces[0]
        .levels
        .iter()
        .map(|l| l.memory.map_or(u64::MAX, |m| m.filter_secondary_keys))
        .collect()
}

/// A non-blind rewrite of keys level 0 holds updates each key's own filter entry, as SlimDB's
/// Algorithm 2 does with the read the write made: level 0's secondary table gains no key (it
/// keeps the few fingerprint collisions of the first flush), where blind rewrites of the same
/// keys put conflicting ones there up to its budget. Gets still read about one data block and
/// see the newest values.
#[test]
fn non_blind_rewrites_update_their_own_filter_entries() {
    let n = 2_000u64;
    let run = |blind: bool| -> (Vec<u64>, Vec<u64>, f64) {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), common::small_db()).unwrap();
        // One table per flush: each memtable holds all `n` keys.
        let mut o = opts();
        o.write_buffer_bytes = 4 << 20;
        let ks = db.keyspace("s", o).unwrap();
        for i in 0..n {
            ks.put(key(i % 50, i), value(0, i, 0)).unwrap();
        }
        db.flush().unwrap();
        // Distinct keys whose fingerprint classes collide (a few of 2,000 with the random
        // hash key) are in the secondary table from the first flush on.
        let collided = secondary_keys(&db);
        for i in 0..n {
            let k = key(i % 50, i);
            if blind {
                ks.put(&k, value(0, i, 1)).unwrap();
            } else {
                ks.update(&k, |old| {
                    assert_eq!(old, Some(&value(0, i, 0)[..]));
                    Some(value(0, i, 1))
                })
                .unwrap();
            }
        }
        db.flush().unwrap();
        let shape: Vec<u64> = db.stats().keyspaces[0]
            .levels
            .iter()
            .map(|l| l.tables)
            .collect();
        assert_eq!(
            shape.first(),
            Some(&2),
            "both flushes in level 0: {shape:?}"
        );
        let before = db.stats().keyspaces[0].level_reads.clone();
        for i in 0..n {
            assert_eq!(ks.get(key(i % 50, i)).unwrap(), Some(value(0, i, 1)));
        }
        let after = db.stats().keyspaces[0].level_reads.clone();
        let blocks: u64 = after.iter().map(|r| r.data_block_reads).sum::<u64>()
            - before.iter().map(|r| r.data_block_reads).sum::<u64>();
        (collided, secondary_keys(&db), blocks as f64 / n as f64)
    };
    let (collided, non_blind, nb_blocks) = run(false);
    let (_, blind, b_blocks) = run(true);
    // Non-blind rewrites add no secondary key: the collisions of the first flush stay the
    // only ones (a few at most).
    assert!(
        collided.first().is_some_and(|&c| c <= 8),
        "first flush: {collided:?}"
    );
    assert_eq!(
        non_blind.first(),
        collided.first(),
        "non-blind: {non_blind:?}"
    );
    // Each blind rewrite conflicts with its key's own entry: the secondary table fills to
    // its budget (4 KiB here, 64 keys) and the other classes turn ambiguous.
    assert!(
        blind.first().is_some_and(|&k| k >= 32),
        "blind rewrites conflict with their own entries: {blind:?}"
    );
    assert!(nb_blocks <= 1.01, "{nb_blocks} data blocks per get");
    assert!(b_blocks <= 1.01, "{b_blocks} data blocks per get");
}

/// The tables flushes and merges add have their readers open with pinned indexes before any
/// read (`Layout::warm`, on the background thread): the first gets of a new table do not
/// decode its index on the read path.
#[test]
fn new_tables_have_their_indexes_pinned_before_any_read() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), common::small_db()).unwrap();
    let ks = db.keyspace("s", opts()).unwrap();
    for i in 0..20_000u64 {
        ks.put(key(i % 200, i), value(0, i, 0)).unwrap();
    }
    db.flush().unwrap();
    db.wait_for_compactions().unwrap();
    let levels = db.stats().keyspaces[0].levels.clone();
    let holding: Vec<_> = levels.iter().filter(|l| l.tables > 0).collect();
    assert!(!holding.is_empty(), "{levels:?}");
    for l in holding {
        assert!(
            l.detail.contains("index ") && !l.detail.contains("no index pinned"),
            "level {} before any get: {}",
            l.level,
            l.detail
        );
    }
    assert_eq!(ks.get(key(7, 7)).unwrap(), Some(value(0, 7, 0)));
}

/// A get's block goes into the block cache when read: from a mapped table as a mark that its
/// checksum was verified (the bytes stay in the map), from a table read with `pread` as a
/// copy. The next get of a key of that block is a cache hit that reads no block and returns
/// the same value, either way; keys of other blocks still read theirs.
#[test]
fn a_cached_block_serves_the_next_get_without_a_read_mapped_or_not() {
    for mmap in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let mut o = common::small_db();
        o.mmap_reads = mmap;
        o.block_cache_bytes = 1 << 20;
        let db = Db::open(dir.path(), o).unwrap();
        let ks = db.keyspace("s", opts()).unwrap();
        let mut model = BTreeMap::new();
        for i in 0..3_000u64 {
            let (k, v) = (key(i % 50, i), value(i % 50, i, 1));
            ks.put(&k, &v).unwrap();
            model.insert(k, v);
        }
        db.flush().unwrap();
        db.wait_for_compactions().unwrap();
        for (k, v) in model.iter().step_by(97) {
            let before = db.stats();
            assert_eq!(ks.get(k).unwrap().as_ref(), Some(v), "mmap {mmap}");
            let first = db.stats();
            assert_eq!(ks.get(k).unwrap().as_ref(), Some(v), "mmap {mmap}");
            let second = db.stats();
            // Blocks the first get looked in (read, or found cached): one, or more when a
            // level's filter sent it to a sub-level without the key.
            let looked = first.data_block_reads + first.cache_hits
                - before.data_block_reads
                - before.cache_hits;
            assert!(looked >= 1, "mmap {mmap}: {before:?} {first:?}");
            assert_eq!(
                second.data_block_reads, first.data_block_reads,
                "mmap {mmap}: the second get of {k:?} read a block"
            );
            assert_eq!(second.cache_hits, first.cache_hits + looked, "mmap {mmap}");
        }
        assert_eq!(ks.get(key(51, 0)).unwrap(), None);
    }
}

/// Checks that `db`'s one keyspace `ks` reports its pinned memory honestly, and returns the
/// pinned indexes' bytes: each level's open readers are what `table_reader_bytes` and
/// `open_table_files` count (the merges done, nothing else holds a reader), every table's
/// reader is open with its index pinned (the default plan pins them) after a get of every key,
/// the indexes' bytes are those of the same indexes decoded again from their files (as
/// `scree dump` does), their parts add up, and the filter's parts are its `filter_bytes`.
fn check_pinned_memory(db: &Db, ks: &scree::Keyspace, dir: &std::path::Path) -> u64 {
    let s = db.stats();
    let levels = &s.keyspaces[0].levels;
    let mut readers = (0u64, 0u64);
    let mut index_bytes = 0u64;
    for l in levels {
        let m = l.memory.expect("semisorted levels report their memory");
        readers.0 += m.reader_bytes;
        readers.1 += m.open_readers;
        index_bytes += m.index_bytes;
        assert_eq!(m.open_readers, l.tables, "level {}: {m:?}", l.level);
        assert_eq!(m.pinned_indexes, l.tables, "level {}: {m:?}", l.level);
        assert_eq!(m.pinned_index_entries, m.entries, "level {}", l.level);
        assert_eq!(
            m.filter_primary_bytes + m.filter_secondary_bytes,
            l.filter_bytes,
            "level {}",
            l.level
        );
        if l.tables > 0 {
            let parts = m.index_level1_bytes + m.index_level2_bytes + m.index_level3_bytes;
            assert!(
                parts > 0 && parts < m.index_bytes,
                "level {}: {m:?}",
                l.level
            );
            assert!(
                m.index_dir_bytes > 0 && m.index_dir_bytes <= m.index_level1_bytes,
                "level {}: {m:?}",
                l.level
            );
            assert!(m.index_bytes < m.reader_bytes, "level {}: {m:?}", l.level);
            assert!(m.filter_primary_bytes > 0 && m.filter_entries > 0);
            assert_eq!(m.total(), m.reader_bytes + l.filter_bytes);
        }
    }
    assert_eq!(
        readers.0, s.table_reader_bytes,
        "readers outside the levels"
    );
    assert_eq!(
        readers.1, s.open_table_files,
        "open tables outside the levels"
    );
    let fs: std::sync::Arc<dyn scree::fs::FileSystem> =
        std::sync::Arc::new(scree::fs::std_fs::StdFs);
    let decoded: u64 = ks
        .tables()
        .iter()
        .map(|t| {
            let d = scree::table_format::describe(fs.clone(), &dir.join(&t.file)).unwrap();
            let fact = d.facts.iter().find(|(name, _)| *name == "index_heap_bytes");
            fact.expect("index_heap_bytes").1
        })
        .sum();
    assert_eq!(
        index_bytes, decoded,
        "pinned indexes against the files' indexes"
    );
    index_bytes
}

/// The pinned memory by level and kind adds up to the totals and to the indexes in the files;
/// a full compaction, which replaces every table, takes the dropped tables' readers out of the
/// totals.
#[test]
fn pinned_memory_by_level_adds_up_and_dropped_tables_leave_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), common::small_db()).unwrap();
    let mut o = opts();
    o.write_buffer_bytes = 256 * 1024;
    let ks = db.keyspace("s", o).unwrap();
    let n = 30_000u64;
    let get_all = |ks: &scree::Keyspace, gen: u64| {
        for i in 0..n {
            assert_eq!(ks.get(key(i % 300, i)).unwrap(), Some(value(0, i, gen)));
        }
    };
    for i in 0..n {
        ks.put(key(i % 300, i), value(0, i, 0)).unwrap();
    }
    db.flush().unwrap();
    db.wait_for_compactions().unwrap();
    get_all(&ks, 0);
    let before: Vec<String> = ks.tables().into_iter().map(|t| t.file).collect();
    assert!(before.len() > 1, "{before:?}");
    assert!(check_pinned_memory(&db, &ks, dir.path()) > 0);

    // Every key rewritten, then one compaction of everything: the tables holding the first
    // versions are merged away and dropped.
    for i in 0..n {
        ks.put(key(i % 300, i), value(0, i, 1)).unwrap();
    }
    db.compact().unwrap();
    get_all(&ks, 1);
    let after: Vec<String> = ks.tables().into_iter().map(|t| t.file).collect();
    let dropped = before.iter().filter(|f| !after.contains(f)).count();
    assert!(dropped > 0, "{before:?} {after:?}");
    assert!(check_pinned_memory(&db, &ks, dir.path()) > 0);
}
