//! Corruption sweeps: a small reference database (every layout) is damaged one way at a time —
//! one byte flipped, or the file truncated — in every file it has (WAL, sorted tables, the
//! manifest, CURRENT, and each layout's own files such as HTables and BloomClusters); then it is
//! opened and every key is read (gets of every key ever written, and a full scan on layouts with
//! scans).
//!
//! Oracle: the outcome is `Error::Corruption` (at open or at a read) or exactly the reference
//! data — never a panic, never a wrong value, never a missing or resurrected key. The WAL tail
//! policy is the one exception, and is checked exactly: damage in the last record of the newest
//! WAL may drop that record (a torn tail), and truncating the newest WAL keeps exactly the
//! records before the cut; damage anywhere else in a WAL is `Error::Corruption` unless
//! `WalRecovery::PointInTime`, which recovers the records before the damage. Whenever the
//! engine reports corruption, `scree::check` must report a problem too.
//!
//! Outside the guarantee, and only counted: truncating the manifest of the "session" image
//! (several edits) so that whole synced edits disappear. The log format cannot tell that from a
//! torn last append, so the edits are dropped and the database opens on an older state (data
//! lost since then is missing). The "reopened" image's one-record manifest is fully covered
//! (any damage to it is `Error::Corruption`).
//!
//! Two images: "session" (a manifest of several edits, the newest WAL holding the last writes)
//! and "reopened" (the same database opened and closed again: a one-record manifest, the WAL
//! with the unflushed writes no longer the newest).
//!
//! Sampling: files up to 2 KiB are swept at every byte; larger files at every byte of the first
//! and last 512 bytes and at about `SCREE_CORRUPTION_SAMPLES` (default 300) offsets spread over
//! the middle (a fixed stride with a deterministic jitter). `SCREE_CORRUPTION_FULL=1` sweeps
//! every byte of every file. Files: at most three of each kind (the first, a middle one and the
//! last by name; every WAL). `SCREE_CORRUPTION_LAYOUT=NAME` runs one layout. Truncations: every offset of files up to 2 KiB, else the same
//! sample. Figures: run with `-- --nocapture`.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use scree::testing::fault::FaultFs;
use scree::{Db, Error, Keyspace, KeyspaceOptions, Layout, Options, WalRecovery};

const DIR: &str = "/db";
type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn opts(fs: &FaultFs, mode: WalRecovery) -> Options {
    let mut o = Options::default();
    o.background_threads = 1;
    o.block_cache_bytes = 0;
    o.wal_recovery = mode;
    o.fs = Some(fs.as_dyn());
    o
}

fn ks_opts(layout: Layout) -> KeyspaceOptions {
    let mut o = common::small_ks(layout);
    o.block_size = 256;
    o
}

fn key(i: u32) -> Vec<u8> {
    format!("key{i:05}").into_bytes()
}

fn value(i: u32, round: u32) -> Vec<u8> {
    let mut v = format!("value-{i}-{round}-").into_bytes();
    v.resize(20 + (i as usize * 7) % 60, b'a' + (round % 26) as u8);
    v
}

/// The reference database and what reading it must give.
struct Reference {
    image: FaultFs,
    /// Every key ever written.
    keys: Vec<Vec<u8>>,
    /// The full state.
    model: Model,
    /// The state with the first `k` records of `data_wal` applied is `wal_prefix[k]`.
    wal_prefix: Vec<Model>,
    /// The WAL holding the last writes (one record per put).
    data_wal: Option<PathBuf>,
    /// Whether the database was opened again after those writes (so that WAL is not the
    /// newest any more).
    reopened: bool,
}

fn build(layout: Layout, reopen: bool) -> Reference {
    let fs = FaultFs::new(11);
    let mut model = Model::new();
    let mut keys = Vec::new();
    let mut wal_prefix = Vec::new();
    {
        let db = Db::open(DIR, opts(&fs, WalRecovery::default())).expect("open");
        let ks = db.keyspace("c", ks_opts(layout)).expect("keyspace");
        for round in 0..3u32 {
            for i in 0..120u32 {
                let k = (i * 7 + round * 13) % 150;
                if (i + round) % 9 == 0 {
                    ks.delete(key(k)).expect("delete");
                    model.remove(&key(k));
                } else {
                    ks.put(key(k), value(k, round)).expect("put");
                    model.insert(key(k), value(k, round));
                }
                keys.push(key(k));
            }
            db.flush().expect("flush");
        }
        db.compact().expect("compact");
        // The last writes stay in the WAL.
        wal_prefix.push(model.clone());
        for i in 0..12u32 {
            let k = 1000 + i;
            ks.put(key(k), value(k, 9)).expect("put");
            model.insert(key(k), value(k, 9));
            keys.push(key(k));
            wal_prefix.push(model.clone());
        }
    }
    // The WAL holding the last writes (before a reopen adds an empty newer one).
    let data_wal = logs(&fs)
        .into_iter()
        .filter(|p| fs.file_bytes(p).is_some_and(|b| !b.is_empty()))
        .max();
    if reopen {
        let db = Db::open(DIR, opts(&fs, WalRecovery::default())).expect("reopen");
        drop(db);
    }
    keys.sort();
    keys.dedup();
    Reference {
        image: fs,
        keys,
        model,
        wal_prefix,
        data_wal,
        reopened: reopen,
    }
}

/// What opening and reading a damaged image gave.
enum Outcome {
    /// `Error::Corruption` naming this file.
    Corruption(PathBuf),
    /// Every read succeeded with this state.
    Data(Model),
}

fn read_everything(
    fs: &FaultFs,
    layout: Layout,
    keys: &[Vec<u8>],
    mode: WalRecovery,
) -> Result<Outcome, String> {
    let classify = |e: Error| match e {
        Error::Corruption { file, .. } => Ok(Outcome::Corruption(file)),
        other => Err(format!("not a corruption error: {other}")),
    };
    let db = match Db::open(DIR, opts(fs, mode)) {
        Ok(db) => db,
        Err(e) => return classify(e),
    };
    let ks: Keyspace = match db.keyspace("c", ks_opts(layout)) {
        Ok(k) => k,
        Err(e) => return classify(e),
    };
    let mut got = Model::new();
    for k in keys {
        match ks.get(k) {
            Ok(Some(v)) => {
                got.insert(k.clone(), v);
            }
            Ok(None) => {}
            Err(e) => return classify(e),
        }
    }
    if common::has_scans(layout) {
        let mut scanned = Model::new();
        for r in ks.range::<Vec<u8>, _>(..) {
            match r {
                Ok((k, v)) => {
                    scanned.insert(k, v);
                }
                Err(e) => return classify(e),
            }
        }
        if scanned != got {
            return Err(format!(
                "scan and gets disagree ({} vs {} keys)",
                scanned.len(),
                got.len()
            ));
        }
    }
    Ok(Outcome::Data(got))
}

/// Offsets to damage in a file of `len` bytes.
fn sample(len: usize) -> Vec<usize> {
    let full = std::env::var("SCREE_CORRUPTION_FULL").is_ok_and(|v| v == "1");
    if full || len <= 2048 {
        return (0..len).collect();
    }
    let n: usize = std::env::var("SCREE_CORRUPTION_SAMPLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let mut out: Vec<usize> = (0..512).chain(len - 512..len).collect();
    let middle = len - 1024;
    let stride = (middle / n.max(1)).max(1);
    let mut x = 0x9E37_79B9u64;
    let mut o = 512;
    while o < len - 512 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.push((o + (x as usize % stride)).min(len - 513));
        o += stride;
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// At most three files of each kind (extension; MANIFEST; CURRENT): the first, one in the
/// middle and the last in name order, and always the WAL with data. (The trie layout writes
/// dozens of HTables of the same format.)
fn pick_files(all: &[PathBuf]) -> Vec<PathBuf> {
    let mut by_kind: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    for p in all {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if name == "LOCK" {
            continue;
        }
        let kind = match name.split_once('.') {
            Some((_, ext)) => ext.to_string(),
            None => name.split('-').next().unwrap_or(name).to_string(),
        };
        by_kind.entry(kind).or_default().push(p.clone());
    }
    let mut out = Vec::new();
    for (kind, mut v) in by_kind {
        v.sort();
        if kind == "log" || v.len() <= 3 {
            out.extend(v);
        } else {
            out.extend([v[0].clone(), v[v.len() / 2].clone(), v[v.len() - 1].clone()]);
        }
    }
    out
}

/// Record boundaries of a log file: (start, end) of each record.
fn records(data: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut p = 0;
    while p + 9 <= data.len() {
        let len = u32::from_le_bytes([data[p + 4], data[p + 5], data[p + 6], data[p + 7]]) as usize;
        let end = p + 9 + len;
        if end > data.len() {
            break;
        }
        out.push((p, end));
        p = end;
    }
    out
}

#[derive(Default)]
struct Figures {
    damaged: u64,
    corruption: u64,
    naming_the_file: u64,
    correct: u64,
    tail_dropped: u64,
    check_agrees: u64,
    manifest_cut_silent: u64,
}

enum Damage {
    Flip(usize),
    Truncate(usize),
}

fn sweep(
    layout: Layout,
    reopen: bool,
    truncate: bool,
    figures: &mut Figures,
    failures: &mut Vec<String>,
) {
    let r = build(layout, reopen);
    let files = pick_files(&r.image.files());
    for file in &files {
        let data = r.image.file_bytes(file).unwrap_or_default();
        let is_data_wal = r.data_wal.as_deref() == Some(file.as_path());
        let is_manifest = file
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("MANIFEST-"));
        let newest = is_data_wal && !r.reopened;
        let recs = if is_data_wal {
            records(&data)
        } else {
            Vec::new()
        };
        let offsets = sample(data.len());
        for &off in &offsets {
            let damage = if truncate {
                Damage::Truncate(off)
            } else {
                Damage::Flip(off)
            };
            let fs = r.image.deep_clone();
            let mut bytes = data.clone();
            match damage {
                Damage::Flip(o) => bytes[o] ^= 1 << (o % 8),
                Damage::Truncate(o) => bytes.truncate(o),
            }
            fs.set_file_bytes(file, bytes);
            // What may come back besides corruption and the reference: a prefix of the WAL's
            // records (`must_prefix`: only that prefix, not even corruption).
            let kept = recs.iter().filter(|&&(_, e)| e <= off).count();
            let at_boundary = off == 0 || recs.iter().any(|&(_, e)| e == off);
            let (allowed_prefix, must_prefix) = if !is_data_wal {
                (None, false)
            } else if truncate && newest {
                // A torn tail: exactly the records that end before the cut.
                (Some(kept), true)
            } else if truncate && at_boundary {
                // A clean cut of an older log between records is invisible to the format.
                (Some(kept), false)
            } else if !truncate && newest && kept + 1 == recs.len() {
                // A flip in the newest log's last record looks like a torn tail.
                (Some(kept), false)
            } else {
                (None, false)
            };
            // The records are the WAL puts after the reference's last flush: record j holds
            // put j (one put per record).
            let what = format!(
                "{layout} {} {} {} at {off} of {}",
                if reopen { "reopened" } else { "session" },
                file.display(),
                if truncate { "truncated" } else { "flipped" },
                data.len()
            );
            figures.damaged += 1;
            let out = read_everything(&fs, layout, &r.keys, WalRecovery::default());
            let engine_detected = match out {
                Err(e) => {
                    failures.push(format!("{what}: {e}"));
                    continue;
                }
                Ok(Outcome::Corruption(f)) => {
                    figures.corruption += 1;
                    if f == *file {
                        figures.naming_the_file += 1;
                    }
                    if must_prefix {
                        failures.push(format!(
                            "{what}: a truncated newest WAL is a torn tail, not corruption"
                        ));
                    }
                    true
                }
                Ok(Outcome::Data(got)) => {
                    let prefix = allowed_prefix.and_then(|k| r.wal_prefix.get(k));
                    if must_prefix {
                        if prefix == Some(&got) {
                            figures.tail_dropped += 1;
                        } else {
                            failures.push(format!(
                                "{what}: expected exactly the first {kept} WAL records, got {} keys",
                                got.len()
                            ));
                        }
                    } else if got == r.model {
                        figures.correct += 1;
                    } else if prefix == Some(&got) {
                        figures.tail_dropped += 1;
                    } else if truncate && !r.reopened && is_manifest {
                        // Outside the guarantee (see the module docs): cutting whole synced
                        // records off a manifest of several edits looks like a torn tail.
                        figures.manifest_cut_silent += 1;
                    } else {
                        let missing = r.model.keys().filter(|k| !got.contains_key(*k)).count();
                        let extra = got.keys().filter(|k| !r.model.contains_key(*k)).count();
                        let wrong = got
                            .iter()
                            .filter(|(k, v)| r.model.get(*k).is_some_and(|m| m != *v))
                            .count();
                        failures.push(format!(
                            "{what}: wrong data: {missing} keys missing, {extra} resurrected, \
                             {wrong} wrong values"
                        ));
                    }
                    false
                }
            };
            if engine_detected {
                match scree::check::check_dir(Path::new(DIR), fs.as_dyn()) {
                    Ok(rep) if !rep.problems.is_empty() => figures.check_agrees += 1,
                    Ok(_) => failures.push(format!(
                        "{what}: the engine reports corruption, scree::check finds nothing"
                    )),
                    Err(e) => failures.push(format!("{what}: check failed: {e}")),
                }
            }
        }
    }
}

fn run_sweep(reopen: bool, truncate: bool) {
    let mut failures = Vec::new();
    let only = std::env::var("SCREE_CORRUPTION_LAYOUT").ok();
    for layout in Layout::implemented() {
        if only.as_deref().is_some_and(|l| l != layout.name()) {
            continue;
        }
        let mut f = Figures::default();
        sweep(layout, reopen, truncate, &mut f, &mut failures);
        println!(
            "corruption {} {} {layout}: {} damaged images: {} corruption errors ({} naming the damaged file, \
             scree::check agreeing on {}), {} read back exactly, {} torn WAL tails dropped, \
             {} manifest truncations read back silently short (outside the guarantee)",
            if reopen { "reopened" } else { "session" },
            if truncate { "truncations" } else { "byte flips" },
            f.damaged,
            f.corruption,
            f.naming_the_file,
            f.check_agrees,
            f.correct,
            f.tail_dropped,
            f.manifest_cut_silent
        );
    }
    assert!(
        failures.is_empty(),
        "{} failures; first ones:\n{}",
        failures.len(),
        failures
            .iter()
            .take(12)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn byte_flips_after_a_session() {
    run_sweep(false, false);
}

#[test]
fn byte_flips_after_reopen() {
    run_sweep(true, false);
}

#[test]
fn truncations_after_a_session() {
    run_sweep(false, true);
}

#[test]
fn truncations_after_reopen() {
    run_sweep(true, true);
}

/// The WAL tail policy, exactly: a torn last record is dropped; a bad record followed by a
/// valid one is `Error::Corruption`; with `WalRecovery::PointInTime` recovery stops before it.
#[test]
fn wal_tail_policy() {
    for layout in Layout::implemented() {
        let r = build(layout, false);
        assert!(!r.reopened);
        let wal = r.data_wal.clone().expect("a WAL with data");
        let data = r.image.file_bytes(&wal).expect("wal");
        let recs = records(&data);
        assert_eq!(recs.len(), 12, "one record per put");
        // Torn last record: dropped, the rest recovered.
        let (s, e) = recs[11];
        for cut in [s + 1, s + 9, e - 1] {
            let fs = r.image.deep_clone();
            fs.set_file_bytes(&wal, data[..cut].to_vec());
            match read_everything(&fs, layout, &r.keys, WalRecovery::default()) {
                Ok(Outcome::Data(got)) => assert_eq!(got, r.wal_prefix[11], "{layout} cut {cut}"),
                _ => panic!("{layout}: a torn tail must be dropped"),
            }
        }
        // Middle corruption (record 5): an error by default, records 0..5 with PointInTime.
        let (s, _) = recs[5];
        let mut bad = data.clone();
        bad[s + 12] ^= 0x10;
        let fs = r.image.deep_clone();
        fs.set_file_bytes(&wal, bad.clone());
        match read_everything(&fs, layout, &r.keys, WalRecovery::default()) {
            Ok(Outcome::Corruption(f)) => assert_eq!(f, wal),
            _ => panic!("{layout}: middle corruption must be an error"),
        }
        let fs = r.image.deep_clone();
        fs.set_file_bytes(&wal, bad);
        match read_everything(&fs, layout, &r.keys, WalRecovery::PointInTime) {
            Ok(Outcome::Data(got)) => assert_eq!(got, r.wal_prefix[5], "{layout}"),
            _ => panic!("{layout}: point-in-time recovery must stop before the bad record"),
        }
        // ... and what it recovered stays recovered: the next open sees the cut log.
        match read_everything(&fs, layout, &r.keys, WalRecovery::default()) {
            Ok(Outcome::Data(got)) => assert_eq!(got, r.wal_prefix[5], "{layout} second open"),
            _ => panic!("{layout}: the open after a point-in-time recovery must succeed"),
        }
    }
}

/// Blocks read through a memory map (`Options::mmap_reads`, the default) are checked as
/// `pread` ones are: after a byte of a table's first block is flipped on disk, every get
/// returns the right value or a `Corruption` error, never a wrong value, and some get hits the
/// error. (The sweeps above run on `FaultFs`, which does not map files.) Both read paths, on a
/// sorted layout and on the trie.
#[test]
fn a_flipped_byte_is_caught_with_mapped_and_read_blocks() {
    for layout in [Layout::Leveled, Layout::Trie] {
        for mmap in [true, false] {
            let dir = tempfile::tempdir().unwrap();
            let mut o = common::small_db();
            o.mmap_reads = mmap;
            // No block cache hits: every get reads its block from the file.
            o.block_cache_bytes = 0;
            let n = 3000u32;
            {
                let db = Db::open(dir.path(), o.clone()).unwrap();
                let ks = db.keyspace("k", common::small_ks(layout)).unwrap();
                for i in 0..n {
                    ks.put(key(i), value(i, 0)).unwrap();
                }
                db.flush().unwrap();
                db.wait_for_compactions().unwrap();
            }
            let ext = common::data_ext(layout);
            let mut tables: Vec<PathBuf> = std::fs::read_dir(dir.path())
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.extension().is_some_and(|x| x == ext))
                .collect();
            tables.sort();
            assert!(!tables.is_empty(), "{layout:?}: no {ext} file");
            for t in &tables {
                let mut bytes = std::fs::read(t).unwrap();
                bytes[100] ^= 0x40;
                std::fs::write(t, bytes).unwrap();
            }
            let db = Db::open(dir.path(), o).unwrap();
            let ks = db.keyspace("k", common::small_ks(layout)).unwrap();
            let mut errors = 0;
            for i in 0..n {
                match ks.get(key(i)) {
                    Ok(v) => assert_eq!(v, Some(value(i, 0)), "{layout:?} mmap {mmap}: key {i}"),
                    Err(Error::Corruption { .. }) => errors += 1,
                    Err(e) => panic!("{layout:?} mmap {mmap}: key {i}: {e}"),
                }
            }
            assert!(
                errors > 0,
                "{layout:?} mmap {mmap}: no get saw the flipped byte"
            );
        }
    }
}

// ---- Crafted fields and a split batch ----

fn logs(fs: &FaultFs) -> Vec<PathBuf> {
    fs.files()
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect()
}

/// The WAL record holding a put of `key`: (its WAL, the offset of its payload).
fn find_record(fs: &FaultFs, key: &[u8]) -> Option<(PathBuf, usize)> {
    for wal in logs(fs) {
        let data = fs.file_bytes(&wal)?;
        let (recs, _) = scree::log::read_wal_records(&data);
        let mut pos = 0usize;
        for (ty, payload) in recs {
            if ty == scree::log::SEAL {
                // The seal of a retired WAL holds no batch.
                break;
            }
            let (_, entries) = scree::batch::decode_public(ty, payload).ok()?;
            if entries.iter().any(|e| e.2 == key) {
                return Some((wal, pos + scree::log::HEADER));
            }
            pos += scree::log::HEADER + payload.len();
        }
    }
    None
}

/// Point-in-time recovery must not keep one half of a batch: keyspace A, flushed past the
/// damaged WAL, holds in a table the A half of a batch written after the damage, while the cut
/// would drop the B half (and B's write before it). Such a state is no point in time: the
/// open is refused as corruption, with the WAL left as it was.
#[test]
fn point_in_time_recovery_refuses_a_table_ahead_of_the_cut() {
    let fs = FaultFs::new(11);
    {
        let db = Db::open(DIR, opts(&fs, WalRecovery::PointInTime)).expect("open");
        let a = db
            .keyspace("a", common::small_ks(Layout::Leveled))
            .expect("a");
        let b = db
            .keyspace("b", common::small_ks(Layout::Leveled))
            .expect("b");
        // B keeps data in the first WAL and is never flushed.
        b.put(b"b0", b"v").expect("put");
        let filler = vec![7u8; 1024];
        // A fills past its buffer: it alone rotates and is flushed.
        for i in 0..80u32 {
            a.put(format!("fill1-{i:04}"), &filler).expect("put");
        }
        db.wait_for_compactions().expect("wait");
        b.put(b"r1", b"v").expect("put");
        let mut batch = scree::WriteBatch::new();
        batch.put(&a, b"x", b"1");
        batch.put(&b, b"x", b"1");
        db.write(batch, &scree::WriteOptions { sync: true })
            .expect("batch");
        // A is flushed again: the batch's A half is in a table now.
        for i in 0..80u32 {
            a.put(format!("fill2-{i:04}"), &filler).expect("put");
        }
        db.wait_for_compactions().expect("wait");
    }
    let (wal, at) = find_record(&fs, b"r1").expect("r1 in a WAL");
    let mut data = fs.file_bytes(&wal).expect("wal");
    data[at + 3] ^= 0x40;
    fs.set_file_bytes(&wal, data.clone());
    let before: Vec<PathBuf> = logs(&fs);
    match Db::open(DIR, opts(&fs, WalRecovery::PointInTime)) {
        Err(e @ Error::Corruption { .. }) => {
            assert!(e.to_string().contains("no consistent point in time"), "{e}")
        }
        Err(e) => panic!("expected Corruption, got {e}"),
        Ok(_) => panic!("opened a state where a batch is split"),
    }
    // Nothing was cut or removed.
    assert_eq!(logs(&fs), before);
    assert_eq!(fs.file_bytes(&wal), Some(data));
    // The default mode refuses the damage as before.
    assert!(matches!(
        Db::open(DIR, opts(&fs, WalRecovery::default())),
        Err(Error::Corruption { .. })
    ));
}

/// The same split batch, with A's tables merged to the bottom before the damage is found: a
/// bottommost merge writes the versions every snapshot sees with sequence number 0, and a table
/// whose largest sequence number was read after zeroing (0 here) no longer showed that it held
/// writes from after the cut. The open must still be refused. (A `trie` table's largest
/// sequence number is its order key, which zeroing never lowered.)
#[test]
fn point_in_time_recovery_refuses_a_table_ahead_of_the_cut_after_a_bottommost_merge() {
    for layout in Layout::implemented() {
        let fs = FaultFs::new(11);
        {
            let db = Db::open(DIR, opts(&fs, WalRecovery::PointInTime)).expect("open");
            // A's flushes are merged at once with what lies below them (nothing deeper: the
            // merge is bottommost and zeroes the sequence numbers).
            let mut ao = common::small_ks(layout);
            ao.leveled.l0_compaction_trigger = 1;
            ao.fragmented.l0_compaction_trigger = 1;
            ao.fragmented.max_sstables_per_guard = 1;
            let a = db.keyspace("a", ao).expect("a");
            let b = db.keyspace("b", common::small_ks(layout)).expect("b");
            // B keeps data in the first WAL and is never flushed.
            b.put(b"b0", b"v").expect("put");
            let filler = vec![7u8; 1024];
            // A fills past its buffer: it alone rotates and is flushed.
            for i in 0..80u32 {
                a.put(format!("fill-{i:04}"), &filler).expect("put");
            }
            db.wait_for_compactions().expect("wait");
            b.put(b"r1", b"v").expect("put");
            let mut batch = scree::WriteBatch::new();
            batch.put(&a, b"x", b"1");
            batch.put(&b, b"x", b"1");
            db.write(batch, &scree::WriteOptions { sync: true })
                .expect("batch");
            // A is flushed again, over the same keys: the batch's A half is merged into the
            // tables below.
            for i in 0..80u32 {
                a.put(format!("fill-{i:04}"), &filler).expect("put");
            }
            db.wait_for_compactions().expect("wait");
            assert_eq!(a.get(b"x").expect("get"), Some(b"1".to_vec()));
        }
        let (wal, at) = find_record(&fs, b"r1").expect("r1 in a WAL");
        let mut data = fs.file_bytes(&wal).expect("wal");
        data[at + 3] ^= 0x40;
        fs.set_file_bytes(&wal, data.clone());
        match Db::open(DIR, opts(&fs, WalRecovery::PointInTime)) {
            Err(e @ Error::Corruption { .. }) => {
                assert!(e.to_string().contains("no consistent point in time"), "{e}")
            }
            Err(e) => panic!("{layout:?}: expected Corruption, got {e}"),
            Ok(db) => {
                let a = db.keyspace("a", common::small_ks(layout)).expect("a");
                let b = db.keyspace("b", common::small_ks(layout)).expect("b");
                panic!(
                    "{layout:?}: opened a state where a batch is split: a.x = {:?}, b.x = {:?}",
                    a.get(b"x").expect("get"),
                    b.get(b"x").expect("get")
                );
            }
        }
    }
}

/// An edit appended to the manifest with a valid checksum.
fn append_edit(fs: &FaultFs, edit: &scree::manifest::edit::Edit) {
    let m = fs
        .files()
        .into_iter()
        .find(|p| p.to_string_lossy().contains("MANIFEST-"))
        .expect("a manifest");
    let payload = edit.encode();
    let mut bytes = fs.file_bytes(&m).expect("manifest");
    scree::coding::put_u32(&mut bytes, scree::coding::crc2(&[1], &payload));
    scree::coding::put_u32(&mut bytes, payload.len() as u32);
    bytes.push(1);
    bytes.extend_from_slice(&payload);
    fs.set_file_bytes(&m, bytes);
}

fn small_database(seed: u64) -> FaultFs {
    let fs = FaultFs::new(seed);
    let db = Db::open(DIR, opts(&fs, WalRecovery::default())).expect("open");
    let ks = db
        .keyspace("k", common::small_ks(Layout::Leveled))
        .expect("ks");
    ks.put(b"k", b"v").expect("put");
    drop(ks);
    drop(db);
    fs
}

/// Manifest fields out of range are corruption at open, not an overflow: a next file number
/// or last sequence number at the top of its range (checked edits, valid checksums).
#[test]
fn manifest_numbers_out_of_range_are_corruption() {
    use scree::manifest::edit::Edit;
    for (what, edit) in [
        (
            "next file number",
            Edit {
                next_file_no: Some(u64::MAX),
                ..Default::default()
            },
        ),
        (
            "last sequence number",
            Edit {
                last_seq: Some(u64::MAX),
                ..Default::default()
            },
        ),
        (
            "last sequence number",
            Edit {
                last_seq: Some(scree::key::MAX_SEQ + 1),
                ..Default::default()
            },
        ),
    ] {
        let fs = small_database(3);
        append_edit(&fs, &edit);
        match Db::open(DIR, opts(&fs, WalRecovery::default())) {
            Err(e @ Error::Corruption { .. }) => assert!(e.to_string().contains(what), "{e}"),
            Err(e) => panic!("{what}: expected Corruption, got {e}"),
            Ok(_) => panic!("{what}: opened"),
        }
    }
}

/// When every sequence number is used, a write is refused before it is logged (it used to be
/// acknowledged and then make the WAL unreadable), and the database still opens with its data.
#[test]
fn a_write_past_the_last_sequence_number_is_refused_and_nothing_is_lost() {
    let fs = small_database(4);
    append_edit(
        &fs,
        &scree::manifest::edit::Edit {
            last_seq: Some(scree::key::MAX_SEQ),
            ..Default::default()
        },
    );
    {
        let db = Db::open(DIR, opts(&fs, WalRecovery::default())).expect("open");
        let ks = db
            .keyspace("k", common::small_ks(Layout::Leveled))
            .expect("ks");
        match ks.put(b"k2", b"v") {
            Err(e @ Error::Unsupported(_)) => assert!(e.to_string().contains("exhausted"), "{e}"),
            other => panic!("expected Unsupported, got {other:?}"),
        }
        // Not a background error: reads go on.
        assert_eq!(ks.get(b"k").expect("get").as_deref(), Some(&b"v"[..]));
    }
    let db = Db::open(DIR, opts(&fs, WalRecovery::default())).expect("reopen");
    let ks = db
        .keyspace("k", common::small_ks(Layout::Leveled))
        .expect("ks");
    assert_eq!(ks.get(b"k").expect("get").as_deref(), Some(&b"v"[..]));
    assert_eq!(ks.get(b"k2").expect("get"), None);
}

/// A WAL named with the largest file number is corruption at open (its successor number
/// overflowed).
#[test]
fn a_wal_file_number_out_of_range_is_corruption() {
    let fs = small_database(5);
    fs.set_file_bytes(Path::new("/db/18446744073709551615.log"), Vec::new());
    match Db::open(DIR, opts(&fs, WalRecovery::default())) {
        Err(e @ Error::Corruption { .. }) => assert!(e.to_string().contains("out of range"), "{e}"),
        Err(e) => panic!("expected Corruption, got {e}"),
        Ok(_) => panic!("opened"),
    }
}

// ---- Damage the read path must name ----

/// A table file whose length differs from the size the manifest records is `Corruption` when
/// it is opened, never read as if it were the table the manifest names. Here one table file
/// holds the bytes of another valid table of the same database (a file restored from the wrong
/// backup, or an inode relinked by `fsck`): its footer and checksums are sound, so before the
/// fix the read path believed it, and every get of a key the real table held answered "absent"
/// (the stranger's filter and keys), and scans returned the stranger's keys in its place. The
/// manifest had the size all along, and `scree check` reported the mismatch.
#[test]
fn a_table_file_of_another_size_is_corruption_not_missing_keys() {
    for layout in Layout::implemented() {
        let fs = FaultFs::new(23);
        let mut model = Model::new();
        {
            let db = Db::open(DIR, opts(&fs, WalRecovery::default())).expect("open");
            let ks = db.keyspace("c", ks_opts(layout)).expect("keyspace");
            // Rounds of different sizes and disjoint keys: one table per flush.
            for round in 0..3u32 {
                for i in 0..(40 + 60 * round) {
                    let k = round * 1000 + i;
                    ks.put(key(k), value(k, round)).expect("put");
                    model.insert(key(k), value(k, round));
                }
                db.flush().expect("flush");
            }
            db.wait_for_compactions().expect("compactions");
            // More flushed tables until two live tables differ in size: a layout may merge
            // every flush into one table (`lightweight` appends level 0 to the tables below
            // it instead of writing new ones).
            let ext = common::data_ext(layout);
            for extra in 0..4u32 {
                let sizes: std::collections::HashSet<u64> = ks
                    .tables()
                    .iter()
                    .filter(|t| t.file.ends_with(ext))
                    .map(|t| t.size)
                    .collect();
                if sizes.len() >= 2 {
                    break;
                }
                for i in 0..(100 + 50 * extra) {
                    let k = 3000 + extra * 1000 + i;
                    ks.put(key(k), value(k, 3)).expect("put");
                    model.insert(key(k), value(k, 3));
                }
                db.flush().expect("flush");
                db.wait_for_compactions().expect("compactions");
            }
        }
        let ext = common::data_ext(layout);
        let mut tables: Vec<(PathBuf, Vec<u8>)> = fs
            .files()
            .into_iter()
            .filter(|p| p.extension().is_some_and(|e| e == ext))
            .map(|p| {
                let b = fs.file_bytes(&p).expect("bytes");
                (p, b)
            })
            .collect();
        tables.sort_by_key(|(_, b)| b.len());
        let ((_, small), (victim, big)) = (
            tables.first().expect("a table").clone(),
            tables.last().expect("a table").clone(),
        );
        assert!(small.len() < big.len(), "{layout:?}: tables of one size");
        fs.set_file_bytes(&victim, small);
        let db = Db::open(DIR, opts(&fs, WalRecovery::default())).expect("reopen");
        let ks = db.keyspace("c", ks_opts(layout)).expect("keyspace");
        let mut errors = 0;
        for (k, v) in &model {
            match ks.get(k) {
                Ok(got) => assert_eq!(got.as_ref(), Some(v), "{layout:?}: get {k:?}"),
                Err(Error::Corruption { file, .. }) => {
                    assert_eq!(file, victim, "{layout:?}");
                    errors += 1;
                }
                Err(e) => panic!("{layout:?}: {e}"),
            }
        }
        assert!(errors > 0, "{layout:?}: no get met the replaced table");
        if common::has_scans(layout) {
            let r: Result<Vec<_>, Error> = ks.range::<Vec<u8>, _>(..).collect();
            assert!(
                matches!(&r, Err(Error::Corruption { file, .. }) if *file == victim),
                "{layout:?}: scan gave {:?}",
                r.map(|v| v.len())
            );
        }
    }
}

/// A BloomCluster file must cover the tables its manifest record names. Here one last-level
/// container's cluster file holds the bytes of another container's (same size: same columns,
/// as many sub-levels): before the fix a lookup took a table's filters by its position in the
/// record from the wrong file, and 31 of 3,000 keys answered "absent" with no error.
#[test]
fn a_bloom_cluster_of_another_container_is_corruption_not_missing_keys() {
    let fs = FaultFs::new(29);
    let mut model = Model::new();
    {
        let db = Db::open(DIR, opts(&fs, WalRecovery::default())).expect("open");
        let ks = db.keyspace("c", ks_opts(Layout::Trie)).expect("keyspace");
        for round in 0..12u32 {
            for i in 0..400u32 {
                let k = (i * 7 + round * 131) % 3000;
                ks.put(key(k), value(k, round)).expect("put");
                model.insert(key(k), value(k, round));
            }
            db.flush().expect("flush");
        }
        db.wait_for_compactions().expect("compactions");
    }
    let clusters: Vec<(PathBuf, Vec<u8>)> = fs
        .files()
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "bc"))
        .filter_map(|p| fs.file_bytes(&p).map(|b| (p, b)))
        .collect();
    let pair = clusters.iter().enumerate().find_map(|(i, (_, a))| {
        let (other, _) = clusters
            .iter()
            .skip(i + 1)
            .find(|(_, b)| b.len() == a.len())?;
        Some((a.clone(), other.clone()))
    });
    let (bytes, victim) = pair.expect("two BloomClusters of one size");
    fs.set_file_bytes(&victim, bytes);
    let db = Db::open(DIR, opts(&fs, WalRecovery::default())).expect("reopen");
    let ks = db.keyspace("c", ks_opts(Layout::Trie)).expect("keyspace");
    let mut errors = 0;
    for (k, v) in &model {
        match ks.get(k) {
            Ok(got) => assert_eq!(got.as_ref(), Some(v), "get {k:?}"),
            Err(Error::Corruption { file, .. }) => {
                assert_eq!(file, victim);
                errors += 1;
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert!(errors > 0, "no get met the replaced BloomCluster");
    drop(ks);
    drop(db);
    // `scree check` compares the file with its record as reads do.
    let rep = scree::check::check_dir(Path::new(DIR), fs.as_dyn()).expect("check");
    assert!(
        rep.problems
            .iter()
            .any(|p| p.file == victim && p.detail.contains("the manifest says")),
        "{:?}",
        rep.problems
    );
}
