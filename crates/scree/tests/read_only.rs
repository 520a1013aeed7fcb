//! `Options::read_only`: a database opened read-only reads what a normal open would, and
//! changes nothing on disk — no new WAL or manifest, no cut of a torn WAL, no removal — and
//! refuses every operation that would write, with `Error::ReadOnly` naming it.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use scree::{Db, Error, Layout, Options, WriteBatch, WriteOptions};

/// Every file of the directory with its bytes.
fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| {
            let e = e.expect("entry");
            let name = e.file_name().to_string_lossy().into_owned();
            (name, std::fs::read(e.path()).expect("read"))
        })
        .collect()
}

fn read_only() -> Options {
    let mut o = common::small_db();
    o.read_only = true;
    o
}

/// Writes enough to flush and compact, leaves the last writes in the WAL only, and closes:
/// returns what the keyspace "ks" must hold.
fn fill(dir: &Path, layout: Layout) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let db = Db::open(dir, common::small_db()).expect("open");
    let ks = db
        .keyspace("ks", common::small_ks(layout))
        .expect("keyspace");
    let mut model = BTreeMap::new();
    for i in 0..4000u32 {
        let k = format!("key{:06}", (i * 7919) % 3000).into_bytes();
        if i % 11 == 0 {
            ks.delete(&k).expect("delete");
            model.remove(&k);
        } else {
            let v = format!("value-{i}-").repeat(8).into_bytes();
            ks.put(&k, &v).expect("put");
            model.insert(k, v);
        }
    }
    db.wait_for_compactions().expect("wait");
    // These stay in the WAL: the memtable is not flushed at close.
    for i in 0..50u32 {
        let k = format!("wal-only{i:03}").into_bytes();
        ks.put(&k, b"in the log").expect("put");
        model.insert(k, b"in the log".to_vec());
    }
    model
}

fn assert_holds(db: &Db, layout: Layout, model: &BTreeMap<Vec<u8>, Vec<u8>>) {
    let ks = db.existing_keyspace("ks").expect("existing keyspace");
    assert_eq!(ks.layout(), layout);
    for (k, v) in model {
        let got = ks.get(k).expect("get");
        assert_eq!(got.as_deref(), Some(v.as_slice()), "key {k:?}");
    }
    for i in 0..3000u32 {
        let k = format!("key{i:06}").into_bytes();
        if !model.contains_key(&k) {
            assert_eq!(ks.get(&k).expect("get"), None, "key {k:?} was deleted");
        }
    }
    if common::has_scans(layout) {
        let scanned: Vec<(Vec<u8>, Vec<u8>)> = ks
            .range::<&[u8], _>(..)
            .map(|r| r.map(|(k, v)| (k.to_vec(), v.to_vec())))
            .collect::<Result<_, _>>()
            .expect("scan");
        let want: Vec<(Vec<u8>, Vec<u8>)> =
            model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        assert_eq!(scanned, want);
    }
}

#[test]
fn a_read_only_open_reads_everything_and_changes_no_file() {
    for layout in Layout::implemented() {
        let dir = tempfile::tempdir().expect("tempdir");
        let model = fill(dir.path(), layout);
        let before = files(dir.path());
        {
            let db = Db::open(dir.path(), read_only()).expect("read-only open");
            assert_holds(&db, layout, &model);
            db.wait_for_compactions().expect("nothing runs");
        }
        let after = files(dir.path());
        assert_eq!(
            before.keys().collect::<Vec<_>>(),
            after.keys().collect::<Vec<_>>(),
            "{layout}: the file names changed"
        );
        for (name, bytes) in &before {
            assert!(after.get(name) == Some(bytes), "{layout}: {name} changed");
        }
        // A normal open afterwards finds the same data.
        let db = Db::open(dir.path(), common::small_db()).expect("open");
        assert_holds(&db, layout, &model);
    }
}

#[test]
fn every_write_is_refused_read_only_with_the_operation_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    fill(dir.path(), Layout::Leveled);
    let db = Db::open(dir.path(), read_only()).expect("read-only open");
    let ks = db.existing_keyspace("ks").expect("keyspace");
    let refused = |r: scree::Result<()>, what: &str| match r {
        Err(Error::ReadOnly { op, path }) => {
            assert_eq!(op, what);
            assert_eq!(path, dir.path());
        }
        other => panic!("{what}: expected ReadOnly, got {other:?}"),
    };
    refused(ks.put(b"k", b"v"), "write");
    refused(ks.delete(b"k"), "write");
    refused(
        ks.put_opt(b"k", b"v", &WriteOptions { sync: true }),
        "write",
    );
    let mut b = WriteBatch::new();
    b.put(&ks, b"a", b"1");
    refused(db.write(b, &WriteOptions::default()), "write");
    refused(db.flush(), "flush");
    refused(db.compact(), "compact");
    refused(
        db.keyspace("new", common::small_ks(Layout::Leveled))
            .map(|_| ()),
        "creating a keyspace",
    );
    // An existing keyspace can be named with options (they change nothing on disk).
    db.keyspace("ks", common::small_ks(Layout::Leveled))
        .expect("existing keyspace");
    let e = db
        .keyspace("ks", common::small_ks(Layout::Trie))
        .expect_err("wrong layout");
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    assert_eq!(ks.get(b"k").expect("get"), None);
    assert_eq!(db.keyspace_names(), vec!["ks".to_string()]);
    let e = db.existing_keyspace("nope").expect_err("no such keyspace");
    assert!(
        matches!(&e, Error::InvalidArgument(m) if m.contains("\"nope\"") && m.contains("\"ks\"")),
        "{e}"
    );
    assert_eq!(
        e.to_string(),
        "invalid argument: no keyspace named \"nope\" (the database has [\"ks\"])"
    );
}

#[test]
fn a_read_only_open_of_a_path_without_a_database_creates_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("missing");
    let e = Db::open(&missing, read_only()).expect_err("missing path");
    assert!(
        matches!(&e, Error::InvalidArgument(m) if m.contains("read-only")),
        "{e}"
    );
    assert!(!missing.exists(), "the directory was created");
    // An empty directory: not even a LOCK file appears.
    let e = Db::open(dir.path(), read_only()).expect_err("empty directory");
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    assert!(files(dir.path()).is_empty());
}

#[test]
fn a_read_only_open_is_refused_while_the_database_is_open() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path(), common::small_db()).expect("open");
    db.keyspace("ks", common::small_ks(Layout::Leveled))
        .expect("keyspace");
    let e = Db::open(dir.path(), read_only()).expect_err("locked");
    assert!(matches!(e, Error::Locked(_)), "{e}");
}

/// The newest WAL of `dir`.
fn newest_wal(dir: &Path) -> std::path::PathBuf {
    let wals: BTreeSet<String> = files(dir)
        .into_keys()
        .filter(|n| n.ends_with(".log"))
        .collect();
    dir.join(wals.last().expect("a WAL"))
}

#[test]
fn a_read_only_open_stops_at_a_torn_wal_tail_without_cutting_it() {
    for layout in Layout::implemented() {
        let dir = tempfile::tempdir().expect("tempdir");
        let model = fill(dir.path(), layout);
        // A record header claiming 1000 bytes, then 10: an append torn by a crash.
        let wal = newest_wal(dir.path());
        let mut bytes = std::fs::read(&wal).expect("read wal");
        let clean_len = bytes.len();
        bytes.extend_from_slice(&[0xab, 0xcd, 0xef, 0x01]);
        bytes.extend_from_slice(&1000u32.to_le_bytes());
        bytes.push(2);
        bytes.extend_from_slice(&[7u8; 10]);
        std::fs::write(&wal, &bytes).expect("write wal");
        let before = files(dir.path());
        {
            let db = Db::open(dir.path(), read_only()).expect("read-only open");
            assert_holds(&db, layout, &model);
        }
        assert!(files(dir.path()) == before, "{layout}: a file changed");
        // A normal open cuts the tail and reads the same.
        let db = Db::open(dir.path(), common::small_db()).expect("open");
        assert_holds(&db, layout, &model);
        drop(db);
        let cut = std::fs::read(&wal).map(|b| b.len()).unwrap_or(0);
        assert!(cut <= clean_len, "{layout}: the torn tail is still there");
    }
}

/// A copy of a database the process may only read has no `LOCK` it could create: the read-only
/// open takes the lock through a read-only handle when the file is there, and goes without it
/// when it is not (opening `LOCK` for writing, a read-only copy could not be inspected).
/// Nothing is created either way.
#[test]
fn a_read_only_open_needs_no_writable_lock_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = fill(dir.path(), Layout::Leveled);
    std::fs::remove_file(dir.path().join("LOCK")).expect("remove LOCK");
    let before = files(dir.path());
    {
        let db = Db::open(dir.path(), read_only()).expect("read-only open without LOCK");
        assert_holds(&db, Layout::Leveled, &model);
    }
    assert!(files(dir.path()) == before, "a file changed or appeared");
    // With a read-only LOCK file (the open must not ask for write access to it).
    std::fs::write(dir.path().join("LOCK"), b"").expect("LOCK");
    let mut perms = std::fs::metadata(dir.path().join("LOCK"))
        .expect("meta")
        .permissions();
    perms.set_readonly(true);
    std::fs::set_permissions(dir.path().join("LOCK"), perms).expect("chmod");
    let db = Db::open(dir.path(), read_only()).expect("read-only open with a read-only LOCK");
    assert_holds(&db, Layout::Leveled, &model);
    // It is still a lock: a writer cannot open beside it.
    let e = Db::open(dir.path(), common::small_db()).expect_err("locked");
    assert!(matches!(e, Error::Locked(_) | Error::Io { .. }), "{e}");
}

/// A directory whose CURRENT is gone but whose tables remain is damage, not an empty directory:
/// the read-only open says so as the normal one does (rather than "no database").
#[test]
fn a_read_only_open_reports_a_lost_current_as_corruption() {
    let dir = tempfile::tempdir().expect("tempdir");
    fill(dir.path(), Layout::Leveled);
    std::fs::remove_file(dir.path().join("CURRENT")).expect("remove CURRENT");
    for o in [read_only(), common::small_db()] {
        match Db::open(dir.path(), o) {
            Err(Error::Corruption { detail, .. }) => {
                assert!(detail.contains("CURRENT is missing"), "{detail}")
            }
            other => panic!("expected Corruption, got {other:?}"),
        }
    }
}
