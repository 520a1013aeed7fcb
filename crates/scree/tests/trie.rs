//! Tests of the `trie` layout: placement through every level, lookups, deletes, snapshots,
//! recovery of data and containers, BloomCluster read costs at the last level, garbage
//! collection, and parallel search agreeing with serial search under concurrent writes.

mod common;

use scree::{Db, Error, KeyspaceOptions, Layout, Options};

fn ks_opts(depth: u32, pile: usize) -> KeyspaceOptions {
    let mut o = common::small_ks(Layout::Trie);
    o.trie.last_level_depth = depth;
    o.trie.pile_size = pile;
    o.trie.slowdown_sublevels = pile * 4;
    o.trie.stop_sublevels = pile * 8;
    o
}

fn key(i: u64) -> Vec<u8> {
    format!("key{i:08}").into_bytes()
}

fn value(i: u64, gen: u64) -> Vec<u8> {
    let mut v = format!("v{i}-{gen}-").into_bytes();
    v.resize(100, b'x');
    v
}

#[test]
fn basic_put_get_flush_compact() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), common::small_db()).unwrap();
    let ks = db.keyspace("t", ks_opts(3, 2)).unwrap();
    for i in 0..3000 {
        ks.put(key(i), value(i, 0)).unwrap();
    }
    db.flush().unwrap();
    db.wait_for_compactions().unwrap();
    for i in 0..3000 {
        assert_eq!(ks.get(key(i)).unwrap(), Some(value(i, 0)), "{i}");
    }
    db.compact().unwrap();
    db.check_invariants().unwrap();
    for i in 0..3000 {
        assert_eq!(ks.get(key(i)).unwrap(), Some(value(i, 0)), "{i}");
    }
    assert!(ks.get(b"nope").unwrap().is_none());
    assert!(matches!(
        ks.range(key(0)..key(5)).next(),
        Some(Err(Error::Unsupported(_)))
    ));
    let s = db.stats();
    eprintln!("{:#?}", s.keyspaces);
}
