//! Append-then-switch through the engine: crashes at every I/O of a switch, what the switch
//! counts, readers of old versions while the file grows, and the format cross-check.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{contents, file, Entries, SegVersion, EXT};
use crate::fs::std_fs::StdFs;
use crate::fs::{Env, FileSystem};
use crate::layout::LayoutVersion;
use crate::manifest::edit::{FEATURE_APPENDABLE_TABLES, KNOWN_FEATURES};
use crate::memtable::Lookup;
use crate::options::{KeyspaceOptions, Layout as LayoutKind, Options};
use crate::stats::{LevelWrites, ReadKind, Stats};
use crate::table::{AppendMeta, TableFile, TableMeta};
use crate::testing::fault::{CrashMode, FaultFs};
use crate::{Db, Error, Keyspace, Result};

const KS: &str = "s";

fn ks_opts() -> KeyspaceOptions {
    let mut o = KeyspaceOptions::new(LayoutKind::TestSegments);
    // Compactions only when a test asks for one (`Db::compact`).
    o.leveled.l0_compaction_trigger = 1000;
    o
}

fn options() -> Options {
    let mut o = Options::default();
    o.background_threads = 1;
    o.keyspace_options = vec![(KS.to_string(), ks_opts())];
    o
}

fn open_fault(fs: &FaultFs) -> Result<(Db, Keyspace)> {
    let mut o = options();
    o.fs = Some(fs.as_dyn());
    let db = Db::open("/db", o)?;
    let ks = db.keyspace(KS, ks_opts())?;
    Ok((db, ks))
}

fn open_dir(dir: &Path) -> Result<(Db, Keyspace)> {
    let db = Db::open(dir, options())?;
    let ks = db.keyspace(KS, ks_opts())?;
    Ok((db, ks))
}

/// Key → value (`None`: deleted).
type Model = BTreeMap<Vec<u8>, Option<Vec<u8>>>;

/// Puts keys `range` with values of `round`; every seventh key of the round is deleted again.
fn write(ks: &Keyspace, model: &mut Model, round: u32, range: std::ops::Range<u32>) {
    for i in range {
        let k = format!("key{i:05}").into_bytes();
        let mut v = format!("round {round} key {i} ").into_bytes();
        v.resize(100, b'.');
        ks.put(&k, &v).expect("put");
        model.insert(k.clone(), Some(v));
        if (i + round).is_multiple_of(7) {
            ks.delete(&k).expect("delete");
            model.insert(k, None);
        }
    }
}

fn check_model(ks: &Keyspace, model: &Model, what: &str) {
    for (k, v) in model {
        let got = ks.get(k).unwrap_or_else(|e| panic!("{what}: get: {e}"));
        assert_eq!(&got, v, "{what}: key {}", String::from_utf8_lossy(k));
    }
}

fn seg_version(v: &Arc<dyn LayoutVersion>) -> &SegVersion {
    v.as_any()
        .downcast_ref::<SegVersion>()
        .expect("a segment version")
}

/// The level-1 table: what the manifest records, and the entries of its live segments.
fn l1(ks: &Keyspace) -> Option<(TableMeta, Vec<Entries>)> {
    let v = ks.version();
    let t = seg_version(&v).l1.clone()?;
    let c = contents(&t).expect("the level-1 table reads");
    Some((t.meta.clone(), c))
}

fn l0_files(ks: &Keyspace) -> Vec<u64> {
    let v = ks.version();
    seg_version(&v).l0.iter().map(|t| t.meta.file_no).collect()
}

fn append_meta(m: &TableMeta) -> AppendMeta {
    m.append.expect("appendable")
}

fn seg_path(dir: &Path, no: u64) -> PathBuf {
    dir.join(format!("{no:06}.{EXT}"))
}

fn level_writes(s: &Stats, level: u32) -> LevelWrites {
    s.keyspaces[0]
        .level_writes
        .iter()
        .find(|w| w.level == level)
        .cloned()
        .unwrap_or_default()
}

/// A database whose level-1 table has one segment, and a level-0 table the next compaction
/// appends to it; closed cleanly.
fn image() -> (FaultFs, Model) {
    let fs = FaultFs::new(5);
    let mut model = Model::new();
    let (db, ks) = open_fault(&fs).expect("open");
    write(&ks, &mut model, 1, 0..40);
    db.flush().expect("flush");
    db.compact().expect("compact");
    write(&ks, &mut model, 2, 20..60);
    db.flush().expect("flush");
    assert_eq!(l0_files(&ks).len(), 1);
    assert_eq!(l1(&ks).expect("a level-1 table").1.len(), 1);
    (fs, model)
}

/// Loses power at every I/O operation of an append switch (the compaction appending the
/// level-0 table to the level-1 table, its manifest edit, the removal, the close), in every
/// crash mode. Recovery must find the level-1 table exactly as before the switch (with the
/// level-0 table still there) or exactly as after it (without), never a mix, and a switch
/// whose `compact` returned must be there. Then a second switch, from whatever the crash left
/// past the named end: it appends after those bytes and counts them as dead.
fn crash_at_every_io_of_a_switch(out_of_order: bool) {
    let (base, model) = image();
    let old = {
        let fs = base.deep_clone();
        let (_db, ks) = open_fault(&fs).expect("open");
        l1(&ks).expect("level 1")
    };
    // The switch without a crash, opened as the loop opens it: its operations and its table.
    let (new, ops) = {
        let fs = base.deep_clone();
        let (db, ks) = open_fault(&fs).expect("open");
        let start = fs.ops();
        db.compact().expect("compact");
        drop(ks);
        drop(db);
        let ops = fs.ops() - start;
        let (_db, ks) = open_fault(&fs).expect("reopen");
        (l1(&ks).expect("level 1"), ops)
    };
    assert_eq!(new.0.file_no, old.0.file_no, "switched in place");
    assert!(new.0.size > old.0.size);
    assert_eq!(new.1.len(), 2, "one segment appended");
    assert_eq!(new.1[0], old.1[0], "the old segment unchanged");
    let mut seen = [0u32; 2];
    for n in 1..=ops + 1 {
        for (i, mode) in CrashMode::ALL.into_iter().enumerate() {
            let what = format!("crash at operation {n} of {ops}, {mode:?}");
            let fs = base.deep_clone();
            fs.set_dir_entries_out_of_order(out_of_order);
            fs.reseed(n * 8 + i as u64);
            let (db, ks) = open_fault(&fs).expect("open");
            fs.freeze_at_op(fs.ops() + n);
            let done = db.compact().is_ok();
            drop(ks);
            drop(db);
            fs.crash(mode);
            let (db, ks) = open_fault(&fs).unwrap_or_else(|e| panic!("{what}: reopen: {e}"));
            let got = l1(&ks).unwrap_or_else(|| panic!("{what}: no level-1 table"));
            let is_new = got == new;
            assert!(
                is_new || got == old,
                "{what}: a table that is neither: {got:?}"
            );
            assert!(
                !done || is_new,
                "{what}: compact returned, the switch is not there"
            );
            assert_eq!(l0_files(&ks).is_empty(), is_new, "{what}: level 0");
            seen[usize::from(is_new)] += 1;
            check_model(&ks, &model, &what);
            db.check_invariants().expect("invariants");

            // The next switch appends after what the crash left past the named end.
            let path = seg_path(Path::new("/db"), got.0.file_no);
            let on_disk = fs.file_bytes(&path).expect("the table file").len() as u64;
            assert!(on_disk >= got.0.size, "{what}: file shorter than named");
            let mut m = model.clone();
            write(&ks, &mut m, 3, 50..70);
            db.flush().expect("flush");
            db.compact().expect("compact");
            let after = l1(&ks).expect("level 1");
            let (a, b) = (append_meta(&got.0), append_meta(&after.0));
            assert_eq!(after.0.file_no, got.0.file_no);
            assert_eq!(
                b.dead_bytes,
                a.dead_bytes + (got.0.size - a.meta_offset) + (on_disk - got.0.size),
                "{what}: dead bytes: the superseded metadata and the unfinished switch's bytes"
            );
            assert_eq!(after.1.len(), got.1.len() + 1, "{what}");
            assert_eq!(
                after.1[..got.1.len()],
                got.1[..],
                "{what}: old segments changed"
            );
            check_model(&ks, &m, &what);
        }
    }
    assert!(
        seen[0] > 0 && seen[1] > 0,
        "old and new both recovered: {seen:?}"
    );
    eprintln!(
        "{} crash points ({ops} operations, {} modes): the old table recovered {} times, the new {}",
        seen[0] + seen[1],
        CrashMode::ALL.len(),
        seen[0],
        seen[1]
    );
}

#[test]
fn every_crash_of_an_append_switch_recovers_the_old_or_the_new_table() {
    crash_at_every_io_of_a_switch(false);
}

#[test]
fn every_crash_of_an_append_switch_with_directory_entries_out_of_order() {
    crash_at_every_io_of_a_switch(true);
}

/// The bytes a switch appends are compaction writes (in `Stats` and in the level's writes),
/// never moves; the metadata it supersedes is dead, in the table's `TableInfo` and `Stats`.
/// The manifest names the appendable-table feature from the first edit adding one, and every
/// snapshot while one is live.
#[test]
fn an_append_switch_counts_its_bytes_as_compaction_writes_not_moves() {
    let fs = FaultFs::new(9);
    let mut model = Model::new();
    let (db, ks) = open_fault(&fs).expect("open");
    write(&ks, &mut model, 1, 0..50);
    db.flush().expect("flush");
    db.compact().expect("compact");
    let (m1, _) = l1(&ks).expect("level 1");
    write(&ks, &mut model, 2, 30..80);
    db.flush().expect("flush");
    let l0_size: u64 = ks
        .tables()
        .iter()
        .filter(|t| t.level == 0)
        .map(|t| t.size)
        .sum();
    let s1 = db.stats();
    db.compact().expect("compact");
    let s2 = db.stats();
    let (m2, _) = l1(&ks).expect("level 1");
    let appended = m2.size - m1.size;
    assert!(appended > 0);
    assert_eq!(
        s2.bytes_written.compaction - s1.bytes_written.compaction,
        appended
    );
    let (w1, w2) = (level_writes(&s1, 1), level_writes(&s2, 1));
    assert_eq!(w2.compaction_bytes - w1.compaction_bytes, appended);
    assert_eq!(w2.appended_bytes - w1.appended_bytes, appended);
    assert_eq!(w2.moved_bytes, 0);
    assert_eq!(w2.tables_written, w1.tables_written, "no new table");
    assert_eq!(w2.input_bytes - w1.input_bytes, l0_size);
    // Flush and compaction bytes of the levels add up to what was written under those causes.
    let by_levels: u64 = s2.keyspaces[0]
        .level_writes
        .iter()
        .map(|w| w.flush_bytes + w.compaction_bytes)
        .sum();
    assert_eq!(
        by_levels,
        s2.bytes_written.flush + s2.bytes_written.compaction
    );
    // Dead: the metadata the switch superseded.
    let dead = m1.size - append_meta(&m1).meta_offset;
    assert_eq!(append_meta(&m2).dead_bytes, dead);
    assert_eq!(s2.dead_bytes, dead);
    assert_eq!(s2.keyspaces[0].dead_bytes, dead);
    let info = ks
        .tables()
        .into_iter()
        .find(|t| t.level == 1)
        .expect("level 1");
    assert_eq!((info.size, info.dead_bytes), (m2.size, dead));
    check_model(&ks, &model, "after the switch");
    drop(ks);
    drop(db);

    // The feature bit: in the first edit adding an appendable table, and in the snapshot of
    // the next open.
    let env = Env {
        fs: fs.as_dyn(),
        stats: Arc::default(),
        direct_reads: false,
        mmap_reads: false,
    };
    let manifest = || {
        fs.files()
            .into_iter()
            .find(|p| p.to_string_lossy().contains("MANIFEST-"))
            .expect("a manifest")
    };
    let edits = crate::manifest::read_manifest(&env, &manifest()).expect("manifest");
    let first_add = edits
        .iter()
        .position(|e| e.adds_appendable_tables())
        .expect("an edit adds a table");
    assert_eq!(edits[first_add].features, Some(KNOWN_FEATURES));
    assert_eq!(
        edits[0].features.map(|f| f & FEATURE_APPENDABLE_TABLES),
        Some(0)
    );
    let (db, ks) = open_fault(&fs).expect("reopen");
    let edits = crate::manifest::read_manifest(&env, &manifest()).expect("manifest");
    assert_eq!(edits[0].features, Some(KNOWN_FEATURES));
    check_model(&ks, &model, "after a reopen");
    assert_eq!(db.stats().dead_bytes, dead);
}

/// On real files with mapped reads: a version's reader of the level-1 table maps and reads
/// exactly the length that version names while switches grow the file; a file longer than
/// its named end (an unfinished switch) opens and checks clean; and a table rewritten away is
/// deleted only once the old versions holding its shorter lengths are gone.
#[test]
fn old_versions_read_the_old_length_while_the_file_grows() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut model = Model::new();
    let (db, ks) = open_dir(dir.path()).expect("open");
    write(&ks, &mut model, 1, 0..300);
    db.flush().expect("flush");
    db.compact().expect("compact");
    write(&ks, &mut model, 2, 200..400);
    db.flush().expect("flush");
    let v1 = ks.version();
    let t1: Arc<TableFile> = seg_version(&v1).l1.clone().expect("level 1");
    let x1 = t1.meta.size;
    let r1 = file(&t1).expect("open");
    assert_eq!(r1.len(), x1);
    assert_eq!(
        r1.map().map(|m| m.len() as u64),
        Some(x1),
        "mapped, its named length"
    );
    let k = b"key00010".to_vec();
    let want = model[&k].clone();
    let at_v1 = |k: &[u8]| match v1.get(k, crate::key::MAX_SEQ).expect("get") {
        Lookup::Value(v) => Some(v),
        _ => None,
    };
    assert_eq!(at_v1(&k), want);

    db.compact().expect("compact");
    let v2 = ks.version();
    let t2 = seg_version(&v2).l1.clone().expect("level 1");
    let path = t2.path();
    assert_eq!(t2.meta.file_no, t1.meta.file_no);
    assert!(t2.meta.size > x1);
    assert_eq!(std::fs::metadata(&path).expect("file").len(), t2.meta.size);
    // The old version's reader: the same map, the old length, nothing past it.
    let r1 = file(&t1).expect("open");
    assert_eq!((r1.len(), r1.map().map(|m| m.len() as u64)), (x1, Some(x1)));
    assert!(matches!(
        r1.read(x1 - 4, 8, ReadKind::Data),
        Err(Error::Corruption { .. })
    ));
    assert_eq!(contents(&t1).expect("old contents").len(), 1);
    assert_eq!(at_v1(&k), want);
    assert_eq!(file(&t2).expect("open").len(), t2.meta.size);
    assert_eq!(contents(&t2).expect("new contents").len(), 2);
    drop((r1, v1, t1, v2, t2));

    // An unfinished switch: bytes past the named end (as a crash between the append and the
    // manifest edit leaves them), larger than the table, so the next switch leaves as many
    // dead bytes as live ones.
    let mut w = StdFs.reopen_for_append(&path).expect("reopen");
    w.append(&vec![0xab; 200_000]).expect("append");
    w.sync().expect("sync");
    drop(w);
    drop(ks);
    drop(db);
    assert!(crate::check::check_db(dir.path())
        .expect("check")
        .is_empty());
    let (db, ks) = open_dir(dir.path()).expect("reopen past the unfinished switch");
    check_model(&ks, &model, "reopened");
    write(&ks, &mut model, 3, 350..450);
    db.flush().expect("flush");
    let va = ks.version();
    db.compact().expect("compact");
    let (mb, _) = l1(&ks).expect("level 1");
    assert_eq!(seg_path(dir.path(), mb.file_no), path, "switched in place");
    assert!(mb.dead_bytes() >= mb.size - mb.dead_bytes(), "{mb:?}");
    check_model(&ks, &model, "after the switch past the unfinished one");

    // The next compaction rewrites the table into a new file; the old one stays while `va`
    // holds its shorter length.
    write(&ks, &mut model, 4, 0..20);
    db.flush().expect("flush");
    db.compact().expect("compact");
    let (mc, segs) = l1(&ks).expect("level 1");
    assert_ne!(mc.file_no, mb.file_no, "rewritten");
    assert_eq!((mc.dead_bytes(), segs.len()), (0, 1));
    db.wait_for_compactions().expect("wait");
    assert!(path.exists(), "deleted while an old version holds it");
    let t = seg_version(&va).l1.clone().expect("level 1");
    assert_eq!(contents(&t).expect("old version reads").len(), 2);
    drop(t);
    drop(va);
    db.wait_for_compactions().expect("wait");
    assert!(!path.exists(), "kept after the last version holding it");
    check_model(&ks, &model, "after the rewrite");
    drop(ks);
    drop(db);
    assert!(crate::check::check_db(dir.path())
        .expect("check")
        .is_empty());
}

/// A re-added table must be itself (a move) or an append to it.
#[test]
fn a_readded_table_is_itself_or_an_append() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ctx = crate::table::test_support::std_ctx(dir.path(), 0);
    let meta = TableMeta {
        file_no: 7,
        size: 100,
        smallest: crate::key::make_ikey(b"a", 1, crate::key::ValueKind::Put),
        largest: crate::key::make_ikey(b"b", 1, crate::key::ValueKind::Put),
        entries: 2,
        min_seq: 1,
        max_seq: 1,
        append: Some(AppendMeta {
            meta_offset: 90,
            dead_bytes: 0,
        }),
    };
    let t = TableFile::with_ext(meta.clone(), ctx, EXT);
    assert!(Arc::ptr_eq(&t.readded(&meta).expect("a move"), &t));
    let with = |size, meta_offset, dead_bytes| TableMeta {
        size,
        append: Some(AppendMeta {
            meta_offset,
            dead_bytes,
        }),
        ..meta.clone()
    };
    let grown = t.readded(&with(150, 140, 10)).expect("an append");
    assert_eq!(grown.meta.size, 150);
    for bad in [
        with(90, 80, 0),   // shorter
        with(150, 95, 10), // metadata before the old end
        with(100, 90, 5),  // the same end, other metadata
        TableMeta {
            append: None,
            ..with(150, 140, 10)
        },
    ] {
        assert!(t.readded(&bad).is_err(), "{bad:?}");
    }
}

/// The second decoder (scripts/decode_format.py, written from docs/format.md) reads a
/// database holding appendable tables: the manifest's tag-6 records and their switches, the
/// feature bit, a table file longer than its named end, and the segments the named metadata
/// points at; it must replay exactly the keys written.
#[test]
fn the_format_decoder_replays_a_database_of_appendable_tables() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db_dir = dir.path().join("db");
    let mut model = Model::new();
    {
        let (db, ks) = open_dir(&db_dir).expect("open");
        write(&ks, &mut model, 1, 0..200);
        db.flush().expect("flush");
        db.compact().expect("compact");
        for round in 2..5 {
            write(&ks, &mut model, round, round * 40..round * 40 + 120);
            db.flush().expect("flush");
            db.compact().expect("compact");
        }
        let (m, segs) = l1(&ks).expect("level 1");
        assert_eq!(segs.len(), 4);
        // An unfinished switch, and writes left in a level-0 table and in the WAL.
        let mut w = StdFs
            .reopen_for_append(&seg_path(&db_dir, m.file_no))
            .expect("reopen");
        w.append(b"bytes of a switch a crash cut short")
            .expect("append");
        w.sync().expect("sync");
        write(&ks, &mut model, 5, 100..150);
        db.flush().expect("flush");
        write(&ks, &mut model, 6, 140..160);
    }
    let expected: String = model
        .iter()
        .filter_map(|(k, v)| {
            let v = v.as_ref()?;
            Some(format!("{KS}\t{}\t{}\n", hex(k), hex(v)))
        })
        .collect();
    let decoded = dir.path().join("decoded.tsv");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/decode_format.py");
    let out = std::process::Command::new("python3")
        .arg(&script)
        .arg(&db_dir)
        .arg("--dump-keys")
        .arg(&decoded)
        .output()
        .expect("python3 runs (the format cross-check needs it)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.lines().last() == Some("OK"),
        "decode_format.py: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains(": segment table"), "{stdout}");
    let got = std::fs::read_to_string(&decoded).expect("decoded keys");
    assert_eq!(got, expected);
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
