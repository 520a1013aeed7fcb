//! Recovery after a process dies without closing: a child process (this test binary re-run)
//! writes and aborts; the parent reopens and checks every write (a process crash loses no
//! acknowledged write, synced or not).

mod common;

use scree::{Db, Error, KeyspaceOptions, Layout, Options, WriteBatch, WriteOptions};

const N: u32 = 3000;

fn key(i: u32) -> Vec<u8> {
    format!("key{i:08}").into_bytes()
}

fn child(dir: &str, layout: Layout) {
    let db = Db::open(dir, common::small_db()).expect("open");
    let ks = db
        .keyspace("r", common::small_ks(layout))
        .expect("keyspace");
    for i in 0..N {
        let sync = i % 100 == 0;
        ks.put_opt(
            key(i),
            format!("value-{i}").repeat(10),
            &WriteOptions { sync },
        )
        .expect("put");
        if i % 7 == 0 {
            ks.delete(key(i)).expect("delete");
        }
        if i % 500 == 0 {
            let mut b = WriteBatch::new();
            b.put(&ks, b"batch-a", i.to_le_bytes());
            b.put(&ks, b"batch-b", i.to_le_bytes());
            db.write(b, &WriteOptions::default()).expect("batch");
        }
    }
    // Die without closing anything.
    std::process::abort();
}

#[test]
fn recovery_child() {
    if let (Ok(dir), Ok(layout)) = (
        std::env::var("SCREE_RECOVERY_DIR"),
        std::env::var("SCREE_RECOVERY_LAYOUT"),
    ) {
        child(&dir, layout.parse().expect("layout"));
    }
}

#[test]
fn abort_without_close_loses_no_acknowledged_write() {
    for layout in Layout::implemented() {
        let dir = tempfile::tempdir().expect("tempdir");
        let status = std::process::Command::new(std::env::current_exe().expect("exe"))
            .args([
                "--exact",
                "recovery_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("SCREE_RECOVERY_DIR", dir.path())
            .env("SCREE_RECOVERY_LAYOUT", layout.to_string())
            .output()
            .expect("spawn child");
        assert!(!status.status.success(), "child should have aborted");
        let db = Db::open(dir.path(), common::small_db()).expect("reopen");
        let ks = db
            .keyspace("r", common::small_ks(layout))
            .expect("keyspace");
        for i in 0..N {
            let got = ks.get(key(i)).expect("get");
            if i % 7 == 0 {
                assert_eq!(got, None, "{layout}: key {i} should be deleted");
            } else {
                assert_eq!(
                    got,
                    Some(format!("value-{i}").repeat(10).into_bytes()),
                    "{layout}: key {i}"
                );
            }
        }
        let a = ks.get(b"batch-a").expect("get");
        let b = ks.get(b"batch-b").expect("get");
        assert_eq!(a, b, "{layout}: batch must be all or nothing");
        assert_eq!(a, Some(2500u32.to_le_bytes().to_vec()));
        db.check_invariants().expect("invariants");
    }
}

#[test]
fn reopen_with_other_layout_is_invalid_argument() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let db = Db::open(dir.path(), common::small_db()).expect("open");
        db.keyspace("x", common::small_ks(Layout::Leveled))
            .expect("create");
    }
    let db = Db::open(dir.path(), common::small_db()).expect("reopen");
    let err = db
        .keyspace("x", common::small_ks(Layout::Fragmented))
        .expect_err("must refuse");
    assert!(matches!(err, scree::Error::InvalidArgument(_)), "{err}");
    assert!(db.keyspace("x", common::small_ks(Layout::Leveled)).is_ok());
}

#[test]
fn second_open_is_locked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let _db = Db::open(dir.path(), common::small_db()).expect("open");
    let err = Db::open(dir.path(), common::small_db()).expect_err("second open");
    assert!(matches!(err, scree::Error::Locked(_)), "{err}");
}

#[test]
fn oversized_keys_and_values_are_invalid_argument() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path(), common::small_db()).expect("open");
    let ks = db
        .keyspace("x", common::small_ks(Layout::Leveled))
        .expect("create");
    let big_key = vec![0u8; scree::MAX_KEY_BYTES + 1];
    assert!(matches!(
        ks.put(&big_key, b"v"),
        Err(scree::Error::InvalidArgument(_))
    ));
    assert!(matches!(
        ks.delete(&big_key),
        Err(scree::Error::InvalidArgument(_))
    ));
    let big_val = vec![0u8; scree::MAX_VALUE_BYTES + 1];
    assert!(matches!(
        ks.put(b"k", &big_val),
        Err(scree::Error::InvalidArgument(_))
    ));
    let mut b = WriteBatch::new();
    b.put(&ks, b"ok", b"v");
    b.put(&ks, &big_key, b"v");
    assert!(matches!(
        db.write(b, &WriteOptions::default()),
        Err(scree::Error::InvalidArgument(_))
    ));
    assert_eq!(
        ks.get(b"ok").expect("get"),
        None,
        "a rejected batch writes nothing"
    );
}

#[test]
fn write_amplification_counts_every_byte_written() {
    // The stats' byte counts must equal the bytes in files created (WAL + tables + metadata),
    // since nothing bypasses the counted file layer.
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path(), common::small_db()).expect("open");
    let ks = db
        .keyspace("x", common::small_ks(Layout::Leveled))
        .expect("create");
    for i in 0..20_000u32 {
        ks.put(format!("{:016}", i.wrapping_mul(2654435761)), [7u8; 100])
            .expect("put");
    }
    db.flush().expect("flush");
    db.wait_for_compactions().expect("wait");
    let s = db.stats();
    assert_eq!(s.user_bytes, 20_000 * 116);
    assert!(s.bytes_written.wal >= s.user_bytes);
    assert!(s.bytes_written.flush > 0 && s.bytes_written.metadata > 0);
    assert!(s.write_amplification > s.write_amplification_without_wal);
}

/// A range iterator keeps its database open, as a snapshot does: dropping every other handle
/// does not close it, a second open is `Locked` meanwhile, and the iterator reads all it saw.
/// Otherwise the database could close under the iterator, a reopen compact and delete the
/// tables it had not opened yet, and its next step be an I/O error.
#[test]
fn a_live_iterator_keeps_its_database_open() {
    for layout in [Layout::Leveled, Layout::Fragmented] {
        let dir = tempfile::tempdir().expect("tempdir");
        let o = common::small_db();
        let db = Db::open(dir.path(), o.clone()).expect("open");
        let ks = db.keyspace("k", common::small_ks(layout)).expect("ks");
        for i in 0..5000u64 {
            ks.put(format!("{i:08}"), format!("old{i}")).expect("put");
        }
        db.compact().expect("compact");
        let it = ks.range::<&[u8], _>(..);
        drop((ks, db));
        match Db::open(dir.path(), o.clone()) {
            Err(scree::Error::Locked(_)) => {}
            other => panic!("{layout}: expected Locked while an iterator lives, got {other:?}"),
        }
        let mut n = 0u64;
        for r in it {
            let (k, v) = r.expect("scan");
            assert_eq!(k, format!("{n:08}").into_bytes(), "{layout}");
            assert_eq!(v, format!("old{n}").into_bytes(), "{layout}");
            n += 1;
        }
        assert_eq!(n, 5000, "{layout}");
        // The iterator is gone: the database opens again with the same data.
        let db = Db::open(dir.path(), o).expect("reopen");
        let ks = db.keyspace("k", common::small_ks(layout)).expect("ks");
        assert_eq!(ks.get(b"00004999").expect("get"), Some(b"old4999".to_vec()));
    }
}

fn listing(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().into_string().expect("utf8"))
        .collect();
    v.sort();
    v
}

/// Opening a directory that holds other files creates a database beside them and deletes none
/// of them: only files of the kinds Scree writes are ever removed (not `2023.csv` or `1.jpg`).
#[test]
fn open_never_deletes_files_it_did_not_write() {
    let d = tempfile::tempdir().expect("dir");
    for f in [
        "2023.csv",
        "1.jpg",
        "7.txt",
        "notes.txt",
        "000007.bak",
        "MANIFEST-backup",
    ] {
        std::fs::write(d.path().join(f), b"user data").expect("write");
    }
    {
        let db = Db::open(d.path(), common::small_db()).expect("open");
        let ks = db
            .keyspace("k", common::small_ks(Layout::Leveled))
            .expect("ks");
        ks.put(b"a", b"1").expect("put");
        db.flush().expect("flush");
    }
    let _db = Db::open(d.path(), common::small_db()).expect("reopen");
    let after = listing(d.path());
    for f in [
        "2023.csv",
        "1.jpg",
        "7.txt",
        "notes.txt",
        "000007.bak",
        "MANIFEST-backup",
    ] {
        assert!(after.iter().any(|n| n == f), "{f} was deleted: {after:?}");
    }
}

/// A directory whose CURRENT and manifest are gone but whose tables remain is corruption, for
/// `Db::open` and for `scree::check`: opening it as a new empty database would delete every
/// table.
#[test]
fn tables_without_current_are_corruption_not_a_new_database() {
    for layout in [Layout::Leveled, Layout::Trie] {
        let d = tempfile::tempdir().expect("dir");
        {
            let db = Db::open(d.path(), common::small_db()).expect("open");
            let ks = db.keyspace("k", common::small_ks(layout)).expect("ks");
            for i in 0..3000u32 {
                ks.put(i.to_be_bytes(), vec![1u8; 100]).expect("put");
            }
            db.flush().expect("flush");
        }
        for f in listing(d.path()) {
            if f == "CURRENT" || f.starts_with("MANIFEST") {
                std::fs::remove_file(d.path().join(&f)).expect("rm");
            }
        }
        let before = listing(d.path());
        match Db::open(d.path(), common::small_db()) {
            Err(e @ scree::Error::Corruption { .. }) => {
                assert!(e.to_string().contains("CURRENT is missing"), "{e}")
            }
            other => panic!("{layout}: expected Corruption, got {other:?}"),
        }
        assert_eq!(
            listing(d.path()),
            before,
            "{layout}: open changed the directory"
        );
        let rep = scree::check::check_dir(d.path(), std::sync::Arc::new(scree::fs::std_fs::StdFs))
            .expect("check");
        assert!(!rep.problems.is_empty(), "{layout}: check found no problem");
    }
}

/// A batch records the database it was built for, not its address: one built for a database
/// that has closed is refused by the next database opened (which may reuse the address), and a
/// cleared batch can be refilled for another database.
#[test]
fn a_batch_belongs_to_one_database_until_cleared() {
    let d1 = tempfile::tempdir().expect("dir");
    let d2 = tempfile::tempdir().expect("dir");
    let mut b = WriteBatch::new();
    {
        let db1 = Db::open(d1.path(), common::small_db()).expect("open");
        let k1 = db1
            .keyspace("users", common::small_ks(Layout::Leveled))
            .expect("ks");
        b.put(&k1, b"user:1", b"from-db1");
    }
    for _ in 0..20 {
        let db2 = Db::open(d2.path(), common::small_db()).expect("open");
        let k2 = db2
            .keyspace("other", common::small_ks(Layout::Leveled))
            .expect("ks");
        match db2.write(b.clone(), &WriteOptions::default()) {
            Err(scree::Error::InvalidArgument(_)) => {}
            other => panic!("a batch of a closed database: {other:?}"),
        }
        assert_eq!(k2.get(b"user:1").expect("get"), None);
    }
    let db1 = Db::open(d1.path(), common::small_db()).expect("open");
    let db2 = Db::open(d2.path(), common::small_db()).expect("open");
    let k1 = db1
        .keyspace("users", common::small_ks(Layout::Leveled))
        .expect("ks");
    let k2 = db2
        .keyspace("other", common::small_ks(Layout::Leveled))
        .expect("ks");
    let mut b = WriteBatch::new();
    b.put(&k1, b"a", b"1");
    db1.write(b.clone(), &WriteOptions::default())
        .expect("write");
    b.clear();
    b.put(&k2, b"a", b"2");
    db2.write(b, &WriteOptions::default())
        .expect("a cleared batch on another database");
    assert_eq!(k2.get(b"a").expect("get").as_deref(), Some(&b"2"[..]));
    assert_eq!(k1.get(b"a").expect("get").as_deref(), Some(&b"1"[..]));
}

/// A process killed while creating a database, after the first WAL was created and before
/// `CURRENT` was written, leaves that WAL as it was preallocated: a window of zeros (the
/// memory-mapped writer cuts it only when dropped). No write was ever acknowledged, so the
/// next open must create the database afresh. (Were any WAL of non-zero size counted as data,
/// the directory could never be opened again.)
#[test]
fn a_creation_killed_before_current_leaves_an_openable_directory() {
    use scree::fs::{std_fs::StdFs, FileSystem};
    let dir = tempfile::tempdir().expect("tempdir");
    // What the killed open left: the first WAL as preallocated (its writer never dropped).
    let log = StdFs
        .create_log(&dir.path().join("000002.log"))
        .expect("create log");
    std::mem::forget(log);
    let size = std::fs::metadata(dir.path().join("000002.log"))
        .expect("stat")
        .len();
    assert!(
        size > 0,
        "the WAL is preallocated (this file system has fallocate)"
    );
    let db = Db::open(dir.path(), common::small_db()).expect("open after the killed creation");
    let ks = db
        .keyspace("r", common::small_ks(Layout::Leveled))
        .expect("keyspace");
    ks.put(b"k", b"v").expect("put");
    drop(ks);
    drop(db);
    let db = Db::open(dir.path(), common::small_db()).expect("reopen");
    let ks = db
        .keyspace("r", common::small_ks(Layout::Leveled))
        .expect("keyspace");
    assert_eq!(ks.get(b"k").expect("get").as_deref(), Some(&b"v"[..]));
}

/// Reopening a database whose memtables were never flushed must not keep every WAL the earlier
/// opens created, empty ones included (a log per open, each replayed by every later open,
/// until a memtable fills). Only logs holding unflushed writes remain.
#[test]
fn reopening_without_a_flush_does_not_pile_up_wal_files() {
    for layout in Layout::implemented() {
        let d = tempfile::tempdir().expect("dir");
        let logs = || {
            listing(d.path())
                .into_iter()
                .filter(|n| n.ends_with(".log"))
                .count()
        };
        for round in 0..10u32 {
            let db = Db::open(d.path(), common::small_db()).expect("open");
            let ks = db.keyspace("k", common::small_ks(layout)).expect("ks");
            let other = db.keyspace("idle", common::small_ks(layout)).expect("ks");
            if round == 0 {
                ks.put(b"a", b"1").expect("put");
            }
            assert_eq!(ks.get(b"a").expect("get"), Some(b"1".to_vec()), "{layout}");
            assert_eq!(other.get(b"a").expect("get"), None, "{layout}");
            // The log holding the write, and the one this open writes to.
            assert!(
                logs() <= 2,
                "{layout} round {round}: {:?}",
                listing(d.path())
            );
        }
        let db = Db::open(d.path(), common::small_db()).expect("open");
        let ks = db.keyspace("k", common::small_ks(layout)).expect("ks");
        db.flush().expect("flush");
        assert_eq!(logs(), 1, "{layout}: {:?}", listing(d.path()));
        assert_eq!(ks.get(b"a").expect("get"), Some(b"1".to_vec()), "{layout}");
    }
}

/// The database in `d` with its manifest replaced by a copy of its snapshot changed by
/// `change` (a valid manifest, as a bug or a bad build could write).
fn rewrite_manifest(d: &std::path::Path, change: impl FnOnce(&mut scree::manifest::edit::Edit)) {
    use scree::manifest;
    // Reopened, the manifest is one snapshot record.
    drop(Db::open(d, common::small_db()).expect("reopen"));
    let env = scree::fs::Env {
        fs: std::sync::Arc::new(scree::fs::std_fs::StdFs),
        stats: std::sync::Arc::new(scree::stats::IoStats::default()),
        direct_reads: false,
        mmap_reads: false,
    };
    let n = manifest::read_current(&env, d).expect("CURRENT");
    let mut edits =
        manifest::read_manifest(&env, &manifest::manifest_path(d, n)).expect("manifest");
    assert_eq!(edits.len(), 1);
    let mut snap = edits.remove(0);
    change(&mut snap);
    let next = snap.next_file_no.expect("next file number");
    snap.next_file_no = Some(next + 1);
    drop(manifest::ManifestWriter::create(&env, d, next, &snap).expect("write"));
}

/// Opening `d` is `Corruption` saying `what`, leaves the directory as it was, and `scree
/// check` reports it.
fn assert_refused(d: &std::path::Path, what: &str) {
    let before = listing(d);
    match Db::open(d, common::small_db()) {
        Err(e @ scree::Error::Corruption { .. }) => assert!(e.to_string().contains(what), "{e}"),
        other => panic!("expected Corruption, got {other:?}"),
    }
    assert_eq!(listing(d), before, "open changed the directory");
    let problems = scree::check::check_db(d).expect("check");
    assert!(
        problems.iter().any(|p| p.detail.contains(what)),
        "{problems:?}"
    );
}

/// Two keyspaces `a` (with 100 keys, flushed) and `b`.
fn two_keyspaces(d: &std::path::Path) {
    let db = Db::open(d, common::small_db()).expect("open");
    let a = db
        .keyspace("a", common::small_ks(Layout::Leveled))
        .expect("ks");
    db.keyspace("b", common::small_ks(Layout::Leveled))
        .expect("ks");
    for i in 0..100u32 {
        a.put(format!("k{i:04}"), "v").expect("put");
    }
    db.flush().expect("flush");
}

/// A manifest naming one table in two keyspaces is `Corruption` at open, and a problem for
/// `scree check`: opened, the first compaction of one keyspace would delete the file the other
/// still reads (an I/O error, its data gone).
#[test]
fn a_manifest_naming_one_table_twice_is_corruption() {
    let d = tempfile::tempdir().expect("dir");
    two_keyspaces(d.path());
    rewrite_manifest(d.path(), |snap| {
        let tables = snap
            .keyspaces
            .iter()
            .find(|k| !k.added.is_empty())
            .expect("a's tables")
            .added
            .clone();
        for k in &mut snap.keyspaces {
            if k.added.is_empty() {
                k.added = tables.clone();
            }
        }
    });
    assert_refused(d.path(), "named twice");
}

/// A manifest defining two keyspaces of one name is `Corruption` at open and a problem for
/// `scree check`: opened, `Db::keyspace` would return whichever of the two a hash map met
/// first, and writes made through one could be read through the other on a later open.
#[test]
fn a_manifest_with_two_keyspaces_of_one_name_is_corruption() {
    let d = tempfile::tempdir().expect("dir");
    two_keyspaces(d.path());
    rewrite_manifest(d.path(), |snap| {
        for k in &mut snap.new_keyspaces {
            k.name = "a".into();
        }
    });
    assert_refused(d.path(), "two keyspaces named");
}

/// A manifest that defines keyspaces but lost its placement-hash key is `Corruption`: opened
/// with a new random key, every lookup of a `trie` keyspace would probe the wrong containers
/// and its data read as absent, silently.
#[test]
fn a_manifest_without_its_placement_hash_key_is_corruption() {
    let d = tempfile::tempdir().expect("dir");
    {
        let db = Db::open(d.path(), common::small_db()).expect("open");
        let t = db
            .keyspace("t", common::small_ks(Layout::Trie))
            .expect("ks");
        for i in 0..100u32 {
            t.put(format!("k{i:04}"), "v").expect("put");
        }
        db.flush().expect("flush");
    }
    rewrite_manifest(d.path(), |snap| snap.hash_key = None);
    assert_refused(d.path(), "no placement-hash key");
}

/// A manifest edit removing a table its keyspace did not hold was ignored by every layout, so
/// a damaged manifest (or a bug writing one) opened as if nothing were wrong. RocksDB refuses
/// such an edit; so does Scree now, at open and in `scree check`.
#[test]
fn a_manifest_removing_a_table_the_keyspace_does_not_hold_is_corruption() {
    for layout in Layout::implemented() {
        let d = tempfile::tempdir().expect("dir");
        {
            let db = Db::open(d.path(), common::small_db()).expect("open");
            let ks = db.keyspace("k", common::small_ks(layout)).expect("ks");
            for i in 0..100u32 {
                ks.put(format!("k{i:04}"), "v").expect("put");
            }
            db.flush().expect("flush");
        }
        rewrite_manifest(d.path(), |snap| {
            let k = snap
                .keyspaces
                .iter_mut()
                .find(|k| !k.added.is_empty())
                .expect("the keyspace's tables");
            k.removed.push(999_999);
        });
        assert_refused(
            d.path(),
            "removes table 999999, which the keyspace does not hold",
        );
    }
}

/// A sorted layout's manifest naming a table of another format (an HTable) opened, and the
/// table only failed at its first read. It is `Corruption` at open now.
#[test]
fn a_sorted_keyspace_naming_a_table_of_another_format_is_corruption() {
    let d = tempfile::tempdir().expect("dir");
    two_keyspaces(d.path());
    rewrite_manifest(d.path(), |snap| {
        for k in &mut snap.keyspaces {
            for a in &mut k.added {
                a.format = 1;
            }
        }
    });
    assert_refused(d.path(), "of format 1; this layout's tables have format 0");
}

/// Two trie tables of one depth that trade containers in the manifest: every checksum is
/// right and `Db::open` cannot tell (it reads no table), but gets probe the container a key
/// hashes to, so both tables' keys read as absent. `scree check` looks every entry up through
/// the layout and reports them.
#[test]
fn check_finds_trie_tables_filed_under_other_containers() {
    let d = tempfile::tempdir().expect("dir");
    {
        // Two flushes fill the root's pile of 2; its compaction files tables in the eight
        // containers of depth 1, above the last level (no BloomClusters there).
        let mut o = common::small_ks(Layout::Trie);
        o.trie.last_level_depth = 3;
        let db = Db::open(d.path(), common::small_db()).expect("open");
        let t = db.keyspace("t", o).expect("ks");
        for i in 0..1000u32 {
            t.put(format!("k{i:05}"), format!("value {i}"))
                .expect("put");
            if i % 500 == 499 {
                db.flush().expect("flush");
            }
        }
        db.wait_for_compactions().expect("wait");
    }
    assert!(scree::check::check_db(d.path()).expect("check").is_empty());
    rewrite_manifest(d.path(), |snap| {
        let k = snap
            .keyspaces
            .iter_mut()
            .find(|k| !k.added.is_empty())
            .expect("the trie's tables");
        let deepest = k.added.iter().map(|a| a.level).max().expect("tables");
        let at: Vec<usize> = (0..k.added.len())
            .filter(|&i| k.added[i].level == deepest)
            .collect();
        let (i, j) = (at[0], at[1]);
        assert_eq!(deepest, 1);
        assert_ne!(k.added[i].slot, k.added[j].slot, "two containers");
        let slot = k.added[i].slot;
        k.added[i].slot = k.added[j].slot;
        k.added[j].slot = slot;
    });
    let problems = scree::check::check_db(d.path()).expect("check");
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(
        problems.iter().all(|p| p
            .detail
            .contains("a read at their sequence number does not find")),
        "{problems:?}"
    );
}

/// The trie writes versions every snapshot sees with sequence number 0 at any depth, so an
/// overwritten key can hold two versions numbered 0, the newer one above. A lookup at the older
/// one's sequence number rightly finds the newer: the check's first lookup pass, run by the
/// 60-cycle torture, reported 80 such entries as unreadable.
#[test]
fn check_accepts_a_newer_zeroed_version_above_an_older_one() {
    let d = tempfile::tempdir().expect("dir");
    {
        let mut o = common::small_ks(Layout::Trie);
        o.trie.last_level_depth = 3;
        o.trie.pile_size = 3;
        let db = Db::open(d.path(), common::small_db()).expect("open");
        let t = db.keyspace("t", o).expect("ks");
        // Each round: three flushes fill the root's pile and push the keys to depth 1, where
        // the second round's versions land above the first's, both numbered 0 (two sub-levels,
        // below the pile size: they stay there).
        for round in 0..2u32 {
            for third in 0..3u32 {
                for i in 0..334u32 {
                    let k = format!("k{:05}", third * 334 + i);
                    if round == 1 && i % 5 == 0 {
                        t.delete(k).expect("delete");
                    } else {
                        t.put(k, format!("round {round}")).expect("put");
                    }
                }
                db.flush().expect("flush");
            }
            db.wait_for_compactions().expect("wait");
        }
        assert_eq!(
            t.get("k00001").expect("get").as_deref(),
            Some(&b"round 1"[..])
        );
        assert_eq!(t.get("k00005").expect("get"), None);
    }
    let rep = scree::check::check_dir(d.path(), std::sync::Arc::new(scree::fs::std_fs::StdFs))
        .expect("check");
    assert!(rep.problems.is_empty(), "{:?}", rep.problems);
    assert_eq!(rep.lookups, 2 * 1002);
}

/// A manifest holding keyspace id `u32::MAX`: creating one more keyspace would overflow the id
/// (a panic in debug builds, id 0 reused in release). It is refused; the database stays
/// usable.
#[test]
fn a_new_keyspace_after_the_largest_id_is_refused() {
    let d = tempfile::tempdir().expect("dir");
    two_keyspaces(d.path());
    rewrite_manifest(d.path(), |snap| {
        let last = snap.new_keyspaces.len() - 1;
        let old = snap.new_keyspaces[last].id;
        snap.new_keyspaces[last].id = u32::MAX;
        for k in &mut snap.keyspaces {
            if k.id == old {
                k.id = u32::MAX;
            }
        }
    });
    let db = Db::open(d.path(), common::small_db()).expect("open");
    match db.keyspace("c", common::small_ks(Layout::Leveled)) {
        Err(scree::Error::Unsupported(m)) => assert!(m.contains("ids are used up"), "{m}"),
        other => panic!("expected Unsupported, got {other:?}"),
    }
    let a = db
        .keyspace("a", common::small_ks(Layout::Leveled))
        .expect("ks");
    assert_eq!(a.get("k0001").expect("get").as_deref(), Some(&b"v"[..]));
}

/// Size of the newest manifest file.
fn manifest_len(d: &std::path::Path) -> u64 {
    let name = listing(d)
        .into_iter()
        .filter(|n| n.starts_with("MANIFEST-"))
        .max()
        .expect("a manifest");
    std::fs::metadata(d.join(name)).expect("manifest").len()
}

/// A manifest is rolled over at twice its snapshot: once the snapshot alone is larger than
/// `max_manifest_bytes` (a store of many tables), rolling over at that size would write the
/// whole snapshot again at every flush and compaction.
#[test]
fn a_snapshot_larger_than_max_manifest_bytes_is_not_rewritten_per_edit() {
    let d = tempfile::tempdir().expect("dir");
    let mut o = common::small_db();
    o.max_manifest_bytes = 4096;
    let mut ko = common::small_ks(Layout::Leveled);
    // Many small tables: no compaction merges them away while the test runs.
    ko.leveled.l0_compaction_trigger = 1000;
    ko.leveled.l0_slowdown_trigger = 1000;
    ko.leveled.l0_stop_trigger = 1000;
    {
        let db = Db::open(d.path(), o.clone()).expect("open");
        let ks = db.keyspace("k", ko.clone()).expect("ks");
        for i in 0..200u32 {
            ks.put(format!("k{i:05}"), "v").expect("put");
            db.flush().expect("flush");
        }
    }
    let db = Db::open(d.path(), o).expect("reopen");
    let ks = db.keyspace("k", ko).expect("ks");
    let snapshot = manifest_len(d.path());
    assert!(snapshot > 4096, "snapshot of {snapshot} bytes");
    let before = db.stats().bytes_written.metadata;
    let flushes = 20u32;
    for i in 0..flushes {
        ks.put(format!("n{i:05}"), "v").expect("put");
        db.flush().expect("flush");
    }
    let written = db.stats().bytes_written.metadata - before;
    // Each edit is far smaller than the snapshot; at most one roll-over (at 2× the snapshot).
    assert!(
        written < 3 * snapshot,
        "{written} metadata bytes for {flushes} flushes with a {snapshot}-byte snapshot"
    );
    for i in 0..flushes {
        assert!(ks.get(format!("n{i:05}")).expect("get").is_some());
    }
}

/// A flush of the oldest of three or more immutable memtables must persist, as the
/// keyspace's log number, the WAL of the oldest memtable still unflushed (the second oldest),
/// not that of a newer one: recovery skips every WAL below that number. Here the first
/// flush completes while two newer memtables wait, the next flush fails (the database turns
/// read-only), and a reopen must still find every acknowledged write in the WALs.
#[test]
fn a_flush_behind_several_frozen_memtables_keeps_their_wals_replayable() {
    use scree::fs::FileSystem;
    use scree::testing::fault::{Fault, OpKind};
    use std::time::{Duration, Instant};
    for layout in Layout::implemented() {
        let table_ext = &format!(".{}", common::data_ext(layout));
        let fs = scree::testing::fault::FaultFs::new(3);
        let mut o = common::small_db();
        o.fs = Some(fs.as_dyn());
        o.max_immutable_memtables = 8;
        let db = Db::open("/db", o.clone()).expect("open");
        let ks = db.keyspace("k", common::small_ks(layout)).expect("ks");
        let logs = || {
            fs.list(std::path::Path::new("/db"))
                .expect("list")
                .iter()
                .filter(|n| n.ends_with(".log"))
                .count()
        };
        // Hold the first flush at its first table write.
        let gate = fs.pause(OpKind::Write, table_ext);
        let value = |i: u32| format!("{i:05}").repeat(200).into_bytes();
        let mut n = 0u32;
        // Three frozen memtables (each with its own WAL) and a non-empty active one.
        while logs() < 4 {
            ks.put(key(n), value(n)).expect("put");
            n += 1;
            assert!(n < 2000, "{layout}: memtables never froze");
        }
        for _ in 0..5 {
            ks.put(key(n), value(n)).expect("put");
            n += 1;
        }
        let t = Instant::now();
        while gate.waiting() == 0 {
            assert!(t.elapsed() < Duration::from_secs(10), "{layout}: no flush");
            std::thread::sleep(Duration::from_millis(1));
        }
        // The held flush has created its table; every later table creation fails.
        let mut f = Fault::nth(Some(OpKind::Create), 1).persistent();
        f.path_contains = Some(table_ext.to_string());
        fs.inject(f);
        gate.open();
        assert!(
            db.wait_for_compactions().is_err(),
            "{layout}: the second flush should fail"
        );
        assert!(
            db.stats().flushes >= 1,
            "{layout}: the first flush installed"
        );
        drop(ks);
        drop(db);
        fs.clear_faults();
        let db = Db::open("/db", o).expect("reopen");
        let ks = db.keyspace("k", common::small_ks(layout)).expect("ks");
        for i in 0..n {
            assert_eq!(
                ks.get(key(i)).expect("get"),
                Some(value(i)),
                "{layout}: key {i} of {n} lost"
            );
        }
        db.check_invariants().expect("invariants");
    }
}

/// An application that opens, writes a little and closes, again and again (as `scree put`
/// does), must not keep every WAL: the writes never fill a memtable, so without a flush each
/// open would add one more WAL that every later open replays. Recovery flushes what it
/// replayed when it spans several WALs.
#[test]
fn reopening_after_small_writes_keeps_at_most_two_wals() {
    for layout in Layout::implemented() {
        let dir = tempfile::tempdir().expect("tempdir");
        for round in 0..12u32 {
            let db = Db::open(dir.path(), common::small_db()).expect("open");
            let ks = db
                .keyspace("ks", common::small_ks(layout))
                .expect("keyspace");
            for i in 0..=round {
                assert_eq!(
                    ks.get(key(i)).expect("get").as_deref(),
                    (i < round).then_some(format!("round {i}").as_bytes()),
                    "{layout}: key {i} before round {round}'s put"
                );
            }
            // No wait: a process that exits right after its write must not leave the flush
            // of what its open recovered to the next open (it used to, and the WALs piled up
            // all the same; the open now returns once that flush is done).
            ks.put(key(round), format!("round {round}")).expect("put");
            drop(ks);
            drop(db);
            let wals = std::fs::read_dir(dir.path())
                .expect("read_dir")
                .filter(|e| {
                    e.as_ref()
                        .is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".log"))
                })
                .count();
            assert!(wals <= 2, "{layout}: {wals} WALs after {} opens", round + 1);
        }
    }
}

/// `Options::keyspace_options` (RocksDB's column family descriptors): the flush of what the open
/// recovered runs before `Db::keyspace` can name the keyspace, so it used the layout's defaults.
/// Given at open, the application's options apply to it: here no Bloom filter, so the flushed
/// table is smaller than with the default 10 bits per key. A layout other than the keyspace's
/// is refused.
#[test]
fn keyspace_options_given_at_open_apply_to_the_flush_of_what_it_recovered() {
    let mut ks_opts = KeyspaceOptions::new(Layout::Leveled);
    ks_opts.write_buffer_bytes = 8 << 20;
    let build = || {
        let dir = tempfile::tempdir().expect("tempdir");
        for round in 0..2u32 {
            let db = Db::open(dir.path(), common::small_db()).expect("open");
            let ks = db.keyspace("ks", ks_opts.clone()).expect("keyspace");
            for i in 0..2000u32 {
                ks.put(key(round * 2000 + i), b"v").expect("put");
            }
        }
        dir
    };
    let l0_bytes = |dir: &std::path::Path, o: Options| -> u64 {
        let db = Db::open(dir, o).expect("open");
        let ks = db.existing_keyspace("ks").expect("keyspace");
        assert_eq!(ks.get(key(3999)).expect("get").as_deref(), Some(&b"v"[..]));
        let t = ks.tables();
        assert_eq!(t.len(), 1, "one flushed table: {t:?}");
        t.iter().map(|t| t.size).sum()
    };
    let plain = build();
    let default_bytes = l0_bytes(plain.path(), common::small_db());
    let given = build();
    let mut o = common::small_db();
    let mut no_filter = ks_opts.clone();
    no_filter.bloom_bits_per_key = 0;
    o.keyspace_options = vec![("ks".to_string(), no_filter)];
    let given_bytes = l0_bytes(given.path(), o);
    assert!(
        given_bytes + 4000 <= default_bytes,
        "without a filter {given_bytes} bytes, with the default {default_bytes}"
    );

    let wrong = build();
    let mut o = common::small_db();
    o.keyspace_options = vec![("ks".to_string(), KeyspaceOptions::new(Layout::Trie))];
    match Db::open(wrong.path(), o) {
        Err(Error::InvalidArgument(m)) => assert!(m.contains("created with `leveled`"), "{m}"),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}
