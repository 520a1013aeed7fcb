//! Obsolete tables are torn down and deleted on the database's purge thread (table/purge.rs),
//! never by the writer or reader that happens to drop the last reference to them, and none
//! is left behind once `compact`, `wait_for_compactions` or the close returns.

mod common;

use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use scree::fs::FileSystem;
use scree::testing::fault::{FaultFs, OpKind};
use scree::{Db, Keyspace, Layout};

/// Table files (every registered table format's extension) in `/db`.
fn table_files(fs: &FaultFs) -> Vec<String> {
    let mut v: Vec<String> = fs
        .list(Path::new("/db"))
        .expect("list")
        .into_iter()
        .filter(|n| {
            n.rsplit_once('.')
                .is_some_and(|(_, ext)| scree::table_format::is_table_ext(ext))
        })
        .collect();
    v.sort();
    v
}

/// Writes keys 0..400 twice, with a flush after each round: two overlapping flushed tables
/// (or root sub-levels) that a full compaction must merge away.
fn two_overlapping_flushes(db: &Db, ks: &Keyspace) {
    for round in 0..2u32 {
        for i in 0..400u32 {
            ks.put(format!("key{i:05}"), format!("value{i}-{round}"))
                .expect("put");
        }
        db.flush().expect("flush");
    }
}

/// Writes keys 0..400 once, with values of `round`, and flushes.
fn one_flush(db: &Db, ks: &Keyspace, round: u32) {
    for i in 0..400u32 {
        ks.put(format!("key{i:05}"), format!("value{i}-{round}"))
            .expect("put");
    }
    db.flush().expect("flush");
}

fn open(fs: &FaultFs, layout: Layout) -> (Db, Keyspace) {
    let mut o = common::small_db();
    o.fs = Some(fs.as_dyn());
    let db = Db::open("/db", o).expect("open");
    let ks = db
        .keyspace("k", common::small_ks(layout))
        .expect("keyspace");
    (db, ks)
}

/// Found by timing the longest puts of a 50M-key `trie` fill: the writer dropped the last
/// reference to a superversion a compaction had just replaced, and with it tore down eight
/// 64 MiB HTables (175–365 ms, the run's longest puts). Here a range iterator holds the tables
/// a compaction merges away; dropping it must return while their deletion is held by a paused
/// `remove`, which the purge thread then finishes.
#[test]
fn dropping_the_last_reference_to_an_obsolete_table_leaves_its_deletion_to_the_purge_thread() {
    for layout in Layout::implemented() {
        if !common::has_scans(layout) {
            continue;
        }
        let fs = FaultFs::new(3);
        let (db, ks) = open(&fs, layout);
        two_overlapping_flushes(&db, &ks);
        db.wait_for_compactions().expect("wait");
        // One more flushed table, below any compaction trigger, so the iterator holds a table
        // the full compaction merges away in every layout (`lightweight` appends to the
        // tables below level 0 instead of replacing them: its level-0 tables are what a
        // compaction deletes).
        one_flush(&db, &ks, 0);
        let mut iter = ks.range::<&[u8], _>(..);
        let first = iter.next().expect("an entry").expect("no error");
        assert_eq!(first.0, b"key00000");
        // Every key again: the full compaction merges it with (and deletes) every table the
        // iterator holds.
        one_flush(&db, &ks, 1);
        db.compact().expect("compact");
        let with_iter = table_files(&fs);
        let gate = fs.pause(OpKind::Remove, ".");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            drop(iter);
            let _ = tx.send(());
        });
        let dropped = rx.recv_timeout(Duration::from_secs(10));
        // Let a held removal go before asserting, so a failure does not hang the test.
        let held = gate.wait_until_held(Duration::from_secs(10));
        gate.open();
        assert!(
            dropped.is_ok(),
            "{layout}: dropping the iterator waited for the file's removal"
        );
        assert!(held > 0, "{layout}: no removal reached the file system");
        db.wait_for_compactions().expect("wait");
        let left = table_files(&fs);
        assert!(
            left.len() < with_iter.len() && left.iter().all(|f| with_iter.contains(f)),
            "{layout}: the iterator's tables are deleted ({with_iter:?} → {left:?})"
        );
        // What is live still reads back.
        for i in 0..400u32 {
            assert_eq!(
                ks.get(format!("key{i:05}")).expect("get").as_deref(),
                Some(format!("value{i}-1").as_bytes()),
                "{layout}"
            );
        }
    }
}

/// On every layout, the tables a full compaction merges away are deleted when `compact`
/// returns, and a reopen finds nothing else to delete.
#[test]
fn compact_returns_with_the_merged_away_tables_deleted() {
    for layout in Layout::implemented() {
        let fs = FaultFs::new(4);
        let (db, ks) = open(&fs, layout);
        two_overlapping_flushes(&db, &ks);
        db.wait_for_compactions().expect("wait");
        // Taken after a flush below any compaction trigger: `lightweight` appends to the
        // tables below level 0 instead of replacing them, so what it merges away are the
        // flushed tables.
        one_flush(&db, &ks, 0);
        let before = table_files(&fs);
        one_flush(&db, &ks, 1);
        db.compact().expect("compact");
        let after = table_files(&fs);
        assert!(
            before.iter().any(|f| !after.contains(f)),
            "{layout}: the compaction merged tables away ({before:?} → {after:?})"
        );
        drop(ks);
        drop(db);
        // The reopen's sweep deletes any table file the manifest does not name: none is left
        // for it, so the set of files is the same after it.
        let (db, ks) = open(&fs, layout);
        assert_eq!(table_files(&fs), after, "{layout}");
        for i in 0..400u32 {
            assert_eq!(
                ks.get(format!("key{i:05}")).expect("get").as_deref(),
                Some(format!("value{i}-1").as_bytes()),
                "{layout}"
            );
        }
        drop(db);
    }
}

/// The close waits for queued deletions (without it a deletion of this instance could run
/// while another has the directory open). A deletion held at a paused `remove` keeps the close
/// from returning until the gate opens, and the file is gone when it has.
#[test]
fn the_close_waits_for_queued_deletions() {
    let fs = FaultFs::new(5);
    let (db, ks) = open(&fs, Layout::Leveled);
    two_overlapping_flushes(&db, &ks);
    db.wait_for_compactions().expect("wait");
    let held = table_files(&fs);
    let mut iter = ks.range::<&[u8], _>(..);
    assert!(iter.next().is_some());
    two_overlapping_flushes(&db, &ks);
    db.compact().expect("compact");
    let gate = fs.pause(OpKind::Remove, ".sst");
    drop(iter);
    gate.wait_until_held(Duration::from_secs(10));
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        drop(ks);
        drop(db);
        let _ = tx.send(());
    });
    let early = rx.recv_timeout(Duration::from_millis(300));
    let reached = gate.waiting();
    gate.open();
    assert!(reached > 0, "no removal reached the file system");
    assert!(early.is_err(), "the close returned with a deletion queued");
    rx.recv_timeout(Duration::from_secs(20))
        .expect("the close returns once the gate opens");
    let left = table_files(&fs);
    for f in &held {
        assert!(
            !left.contains(f),
            "{f} was not deleted by the close: {left:?}"
        );
    }
}
