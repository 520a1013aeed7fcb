//! Unit tests of the WAL paths of recovery and the write path that need the engine's
//! internals (crafted WAL records, fault file system crashes).
#![allow(clippy::indexing_slicing)]

use std::collections::BTreeMap;

use super::*;
use crate::batch::{self, WriteBatch, WriteOptions};
use crate::batch::{encode_fixed, BatchEntry};
use crate::log;
use crate::log::{frame, LogEnd};
use crate::manifest::edit::Edit;
use crate::options::{Layout as LayoutKind, Options};
use crate::testing::fault::{CrashMode, FaultFs};
use crate::Keyspace;

/// (keyspace index, key) → value; `None` for a deleted key.
type Model = BTreeMap<(usize, Vec<u8>), Option<Vec<u8>>>;

const KEYSPACES: usize = 70;

fn opts(fs: &FaultFs) -> Options {
    let mut o = Options::default();
    o.fs = Some(fs.as_dyn());
    o.background_threads = 1;
    o
}

fn open(fs: &FaultFs) -> Result<(Db, Vec<Keyspace>)> {
    let db = Db::open("/db", opts(fs))?;
    let layouts = LayoutKind::implemented();
    let mut kss = Vec::new();
    for i in 0..KEYSPACES {
        let layout = layouts[i % layouts.len()];
        kss.push(db.keyspace(&format!("ks{i}"), KeyspaceOptions::new(layout))?);
    }
    Ok((db, kss))
}

fn wal_files(fs: &FaultFs) -> Vec<PathBuf> {
    fs.files()
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .filter(|p| fs.file_bytes(p).is_some_and(|d| !d.is_empty()))
        .collect()
}

#[test]
fn a_manifest_needing_an_unknown_feature_is_refused() {
    let fs = FaultFs::new(3);
    {
        let (db, kss) = open(&fs).expect("open");
        kss[0].put(b"k", b"v").expect("put");
        drop(db);
    }
    let manifests: Vec<PathBuf> = fs
        .files()
        .into_iter()
        .filter(|p| p.to_string_lossy().contains("MANIFEST-"))
        .collect();
    assert_eq!(manifests.len(), 1, "{manifests:?}");
    let m = &manifests[0];
    let bytes = fs.file_bytes(m).expect("manifest");
    // Every snapshot names the features this build always writes (no appendable table here).
    let edits = crate::manifest::read_manifest(
        &Env {
            fs: fs.as_dyn(),
            stats: Arc::new(IoStats::default()),
            direct_reads: false,
            mmap_reads: false,
        },
        m,
    )
    .expect("read");
    assert_eq!(
        edits[0].features,
        Some(crate::manifest::edit::ALWAYS_WRITTEN_FEATURES)
    );
    // A newer build's feature bit: this build must refuse the database, not misread it.
    let unknown = Edit {
        features: Some(1 << 40 | crate::manifest::KNOWN_FEATURES),
        ..Default::default()
    };
    let mut grown = bytes.clone();
    grown.extend_from_slice(&frame(1, &unknown.encode()));
    fs.set_file_bytes(m, grown);
    match Db::open("/db", opts(&fs)) {
        Err(Error::Unsupported(msg)) => assert!(msg.contains("0x10000000000"), "{msg}"),
        Err(e) => panic!("expected Unsupported, got {e}"),
        Ok(_) => panic!("expected Unsupported, the database opened"),
    }
    // Untouched, it opens and keeps its data.
    fs.set_file_bytes(m, bytes);
    let (_db, kss) = open(&fs).expect("reopen");
    assert_eq!(kss[0].get(b"k").expect("get").as_deref(), Some(&b"v"[..]));
}

/// Puts (empty and large values too), deletes and multi-keyspace batches, into keyspaces
/// with ids on both sides of 64; the first write is a put of a 16-byte key and a 100-byte
/// value into keyspace index 0. Returns the model.
fn write_some(db: &Db, kss: &[Keyspace], model: &mut Model, round: u8) {
    kss[0].put([round; 16], [7u8; 100]).expect("put");
    model.insert((0, vec![round; 16]), Some(vec![7; 100]));
    for (i, ks) in kss.iter().enumerate() {
        let k = format!("key-{round}-{i}").into_bytes();
        let v = format!("value-{round}-{i}").into_bytes();
        ks.put(&k, &v).expect("put");
        model.insert((i, k.clone()), Some(v));
        if i % 3 == 0 {
            ks.delete(&k).expect("delete");
            model.insert((i, k), None);
        }
    }
    kss[5].put(b"empty", b"").expect("put");
    model.insert((5, b"empty".to_vec()), Some(Vec::new()));
    let big = vec![round; 1 << 20];
    kss[66].put(b"big", &big).expect("put");
    model.insert((66, b"big".to_vec()), Some(big));
    let mut b = WriteBatch::new();
    for &i in &[0usize, 1, 62, 63, 64, 65, 69] {
        let k = format!("batch-{round}-{i}").into_bytes();
        b.put(&kss[i], &k, b"in a batch");
        b.put(&kss[i], b"batch-gone", b"x");
        b.delete(&kss[i], b"batch-gone");
        model.insert((i, k), Some(b"in a batch".to_vec()));
        model.insert((i, b"batch-gone".to_vec()), None);
    }
    db.write(b, &WriteOptions::default()).expect("batch");
}

fn verify(kss: &[Keyspace], model: &Model, what: &str) {
    for ((i, k), v) in model {
        let got = kss[*i].get(k).expect("get");
        assert_eq!(got.as_ref(), v.as_ref(), "{what}: keyspace {i} key {k:?}");
    }
}

#[test]
fn compact_wal_replays_after_drop_without_flush() {
    let fs = FaultFs::new(7);
    let mut model = Model::new();
    {
        let (db, kss) = open(&fs).expect("open");
        assert_eq!((kss[62].core.id, kss[63].core.id), (63, 64));
        write_some(&db, &kss, &mut model, 1);
        verify(&kss, &model, "before reopen");
    }
    let wals = wal_files(&fs);
    assert_eq!(wals.len(), 1, "{wals:?}");
    let data = fs.file_bytes(&wals[0]).expect("wal");
    let (records, end) = log::read_wal_records(&data);
    assert_eq!(end, LogEnd::Clean);
    assert!(records.iter().all(|(ty, _)| *ty == log::COMPACT_BATCH));
    // The first write, seq 1: 9 framing + 2 header + 1 tag + 1 + 16 + 1 + 100 bytes.
    assert_eq!(log::HEADER + records[0].1.len(), 130);
    reopen_write_reopen(&fs, &mut model, "after reopen", "after second reopen");
}

/// A WAL written by a build before the compact payload (every record of type 1) reopens
/// with every write, and the database goes on from it.
#[test]
fn type_1_wal_of_an_older_build_replays() {
    let fs = FaultFs::new(8);
    let mut model = Model::new();
    {
        let (db, kss) = open(&fs).expect("open");
        write_some(&db, &kss, &mut model, 1);
    }
    let mut converted = 0;
    for wal in wal_files(&fs) {
        let data = fs.file_bytes(&wal).expect("wal");
        let (records, end) = log::read_wal_records(&data);
        assert_eq!(end, LogEnd::Clean);
        let mut old = Vec::new();
        for (ty, r) in records {
            assert_eq!(ty, log::COMPACT_BATCH);
            let (seq, entries): (u64, Vec<BatchEntry>) = batch::decode(ty, r).expect("decodes");
            old.extend_from_slice(&frame(log::FULL, &encode_fixed(seq, &entries)));
            converted += 1;
        }
        assert!(old.len() > data.len(), "the old encoding is larger");
        fs.set_file_bytes(&wal, old);
    }
    assert!(converted > KEYSPACES);
    let report = crate::check::check_dir(Path::new("/db"), fs.as_dyn()).expect("check");
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert!(report.entries > 0);
    reopen_write_reopen(
        &fs,
        &mut model,
        "type-1 WAL replayed",
        "after writes on top of a replayed type-1 WAL",
    );
}

/// Reopens and checks the model (`first`), writes round 2, then reopens and checks again
/// (`second`).
fn reopen_write_reopen(fs: &FaultFs, model: &mut Model, first: &str, second: &str) {
    {
        let (db, kss) = open(fs).expect(first);
        verify(&kss, model, first);
        write_some(&db, &kss, model, 2);
    }
    let (_db, kss) = open(fs).expect(second);
    verify(&kss, model, second);
}

/// For each seed: a leveled keyspace gets `synced` → `value` with sync, then `unsynced`
/// without; power is lost with `mode`; the reopen must keep the synced write. Returns the
/// seeds whose reopen failed, with the error.
fn crash_after_synced_write(
    seeds: std::ops::Range<u64>,
    value: &[u8],
    unsynced: &[(Vec<u8>, Vec<u8>)],
    mode: CrashMode,
) -> Vec<String> {
    let ko = || KeyspaceOptions::new(LayoutKind::Leveled);
    let mut refused = Vec::new();
    for seed in seeds {
        let fs = FaultFs::new(seed);
        {
            let db = Db::open("/db", opts(&fs)).expect("open");
            let ks = db.keyspace("k", ko()).expect("ks");
            ks.put_opt(b"synced", value, &WriteOptions { sync: true })
                .expect("put");
            for (k, v) in unsynced {
                ks.put(k, v).expect("put");
            }
            fs.freeze();
        }
        fs.crash(mode);
        match Db::open("/db", opts(&fs)) {
            Ok(db) => {
                let ks = db.keyspace("k", ko()).expect("ks");
                let got = ks.get(b"synced").expect("get");
                assert_eq!(got.as_deref(), Some(value), "seed {seed}");
            }
            Err(e) => refused.push(format!("seed {seed}: {e}")),
        }
    }
    refused
}

/// A power loss that writes back a page before the appends filled it
/// (`CrashMode::PagesOutOfOrder`) leaves zeros from the stale point to the page end. When that
/// point lies fewer than 8 bytes before the page end, the reader must not call the gap
/// corruption: the default recovery would refuse to open, although the damage is only a
/// crash's to unsynced appends. Here the WAL is synced up to a known length; every stale
/// point the crash can pick must reopen with the synced write.
#[test]
fn a_stale_page_with_fewer_than_8_zeros_still_reopens() {
    // Synced up to a few hundred bytes before the 4 KiB page end, so that the crash picks
    // stale points near it often.
    let unsynced: Vec<_> = (0..4u8).map(|i| (vec![b'u', i], vec![0xCD; 150])).collect();
    let refused =
        crash_after_synced_write(0..300, &[0xAB; 3700], &unsynced, CrashMode::PagesOutOfOrder);
    assert!(refused.is_empty(), "{}", refused.join("\n"));
}

/// A value may hold bytes that frame a valid WAL record (here an empty type-2 record, as in a
/// copy of a WAL). When a power loss cuts the unsynced record holding such a value after those
/// bytes, the reader must not take them for "a valid record after the bad one" and call the
/// torn tail corruption: the default recovery would refuse to open, although only unsynced
/// bytes were lost.
#[test]
fn a_value_framing_a_record_does_not_turn_a_torn_tail_into_corruption() {
    let mut value = frame(log::COMPACT_BATCH, b"");
    value.resize(6000, 0xEE);
    let unsynced = [(b"blob".to_vec(), value)];
    let refused = crash_after_synced_write(0..20, b"v", &unsynced, CrashMode::KeepPartial);
    assert!(refused.is_empty(), "{}", refused.join("\n"));
}

/// A type-2 record with a valid checksum but a malformed payload stops recovery with
/// `Error::Corruption` naming the WAL and the offset of the bad bytes.
#[test]
fn a_malformed_compact_record_is_corruption_naming_file_and_offset() {
    let fs = FaultFs::new(9);
    {
        let (db, kss) = open(&fs).expect("open");
        write_some(&db, &kss, &mut Model::new(), 1);
    }
    let wal = wal_files(&fs).pop().expect("a WAL");
    let data = fs.file_bytes(&wal).expect("wal");
    let (records, _) = log::read_wal_records(&data);
    // After the first record, so that the bad one is in the middle of the log.
    let at = log::HEADER + records[0].1.len();
    let mut ks_overflow = vec![0x90, 0x4e, 1]; // seq 10000, one entry
    crate::coding::put_varint(&mut ks_overflow, (1 << 40) | 1);
    ks_overflow.extend_from_slice(&[1, b'k', 1, b'v']);
    let cases: Vec<(&str, Vec<u8>, usize)> = vec![
        ("bad seq varint", vec![0x80; 11], 0),
        ("bad count varint", vec![1, 0xff], 1),
        (
            "count above the entries",
            vec![0x90, 0x4e, 2, 3, 1, b'k', 1, b'v'],
            8,
        ),
        (
            "count below the entries",
            vec![0x90, 0x4e, 1, 2, 1, b'k', 2, 1, b'j'],
            6,
        ),
        ("keyspace id overflow", ks_overflow, 3),
        (
            "truncated value",
            vec![0x90, 0x4e, 1, 3, 1, b'k', 9, b'v'],
            3,
        ),
        (
            "sequence overflow",
            vec![
                0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 1, 0, 0,
            ],
            0,
        ),
    ];
    for (what, payload, o) in cases {
        let mut bad = data[..at].to_vec();
        bad.extend_from_slice(&frame(log::COMPACT_BATCH, &payload));
        bad.extend_from_slice(&data[at..]);
        let fs = fs.deep_clone();
        fs.set_file_bytes(&wal, bad);
        match open(&fs) {
            Err(Error::Corruption {
                file,
                offset,
                detail,
            }) => {
                assert_eq!(file, wal, "{what}");
                assert_eq!(offset, (at + log::HEADER + o) as u64, "{what}: {detail}");
                assert!(detail.starts_with("WAL batch: "), "{what}: {detail}");
            }
            Err(e) => panic!("{what}: {e}"),
            Ok(_) => panic!("{what}: opened"),
        }
    }
}

/// A manual compaction of a `lightweight` keyspace runs at most one job per level however
/// many writes, flushes and background compactions (appends, balance shifts, rewrites of
/// full targets) happen between its jobs: a level is compacted whole, and no table in scope
/// appears again at or above a level it emptied. Every key keeps its last value.
#[test]
fn a_lightweight_manual_compaction_ends_while_writes_go_on_between_its_jobs() {
    let fs = FaultFs::new(11);
    let mut ko = KeyspaceOptions::new(LayoutKind::Lightweight);
    ko.write_buffer_bytes = 64 * 1024;
    ko.block_size = 512;
    {
        let l = &mut ko.lightweight;
        l.max_levels = 5;
        l.l0_compaction_trigger = 2;
        l.l0_slowdown_trigger = 1000;
        l.l0_stop_trigger = 1000;
        l.level_base_bytes = 24 * 1024;
        l.level_size_ratio = 4;
        l.dtable_max_bytes = 40 * 1024;
        l.division_count = 4;
        l.balance_factor = 1.5;
    }
    let db = Db::open("/db", opts(&fs)).expect("open");
    let ks = db.keyspace("l", ko.clone()).expect("keyspace");
    let model = std::cell::RefCell::new(BTreeMap::<Vec<u8>, Vec<u8>>::new());
    let next = std::cell::Cell::new(0u64);
    let round = || -> Result<()> {
        for _ in 0..1500 {
            let i = next.get();
            next.set(i + 1);
            let k = format!("key{:06}", (i * 7919) % 100_000).into_bytes();
            let v = format!("value {i}").into_bytes();
            ks.put(&k, &v)?;
            model.borrow_mut().insert(k, v);
        }
        db.flush()?;
        db.wait_for_compactions()
    };
    for _ in 0..12 {
        round().expect("load");
    }
    let inner = db.inner();
    let core = inner
        .keyspaces
        .read()
        .values()
        .find(|k| k.name == "l")
        .cloned()
        .expect("core");
    db.flush().expect("flush");
    // Writes after every job; a manual compaction still running after 40 jobs is chasing
    // them (one that took a group per job did, for as long as the writes went on).
    let between = std::cell::Cell::new(0u32);
    let jobs = db
        .compact_keyspace(&core, &mut || {
            between.set(between.get() + 1);
            if between.get() > 40 {
                return Err(crate::Error::InvalidArgument(
                    "the manual compaction is still running after 40 jobs".into(),
                ));
            }
            round()
        })
        .expect("compact");
    assert!(
        (1..=4).contains(&jobs),
        "{jobs} manual jobs for levels 0-3 above the deepest"
    );
    for (k, v) in model.borrow().iter() {
        assert_eq!(ks.get(k).expect("get").as_deref(), Some(&v[..]));
    }
}
