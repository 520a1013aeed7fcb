//! Blocks served from a memory-mapped table and kept in the block cache must not keep a deleted
//! table's file (and its disk space) alive.

mod common;

use scree::{Db, Layout};

/// Mappings of this process that name a deleted `.sst` file inside `dir`.
#[cfg(target_os = "linux")]
fn deleted_tables_mapped(dir: &std::path::Path) -> Vec<String> {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    let dir = dir.to_string_lossy().to_string();
    let mut out: Vec<String> = maps
        .lines()
        .filter(|l| l.contains(&dir) && l.contains(".sst") && l.ends_with("(deleted)"))
        .filter_map(|l| l.split_whitespace().nth(5).map(str::to_string))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// A cached `DataBlock` decoded from a mapped table holds the whole file's map: guards against
/// a table deleted by a compaction keeping its inode (and every byte of disk it used) allocated
/// for as long as any of its blocks sits in the block cache — with a read phase followed by a
/// write-only phase, until the database is closed.
#[cfg(target_os = "linux")]
#[test]
fn cached_blocks_of_a_compacted_away_table_do_not_pin_the_deleted_file() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = common::small_db();
    o.block_cache_bytes = 8 << 20;
    o.mmap_reads = true;
    let db = Db::open(dir.path(), o).unwrap();
    let ks = db.keyspace("k", common::small_ks(Layout::Leveled)).unwrap();
    let value = |i: u64, round: u64| format!("value-{i}-{round}-").repeat(8);
    for i in 0..4000u64 {
        ks.put(format!("key{i:06}"), value(i, 0)).unwrap();
    }
    db.flush().unwrap();
    db.wait_for_compactions().unwrap();
    // A read phase: every data block goes through the (mapped) cache.
    for i in 0..4000u64 {
        assert_eq!(
            ks.get(format!("key{i:06}")).unwrap(),
            Some(value(i, 0).into_bytes())
        );
    }
    // A write-only phase replaces every table.
    for round in 1..4u64 {
        for i in 0..4000u64 {
            ks.put(format!("key{i:06}"), value(i, round)).unwrap();
        }
        db.flush().unwrap();
        db.compact().unwrap();
        db.wait_for_compactions().unwrap();
    }
    let pinned = deleted_tables_mapped(dir.path());
    assert!(
        pinned.is_empty(),
        "{} deleted tables still mapped (their disk space is not freed): {pinned:?}",
        pinned.len()
    );
    drop(ks);
    drop(db);
}
