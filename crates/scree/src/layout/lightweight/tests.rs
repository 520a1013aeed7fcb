//! Tests of the `lightweight` layout: the DTable tail against damage, light-weight
//! compactions that only append (bytes read and written per compaction), aggregation,
//! balance and division against a model, and crashes at every I/O of a compaction, a balance
//! step and a division, and of two light-weight compactions in flight at once (`db::script`).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

use super::dtable::{self, SegmentEntry, Tail};
use super::version::LwcVersion;
use crate::db::script::{JobScript, Phase};
use crate::error::Error;
use crate::key::{make_ikey, ValueKind};
use crate::layout::LayoutVersion;
use crate::options::{KeyspaceOptions, Layout as LayoutKind, Options};
use crate::table::TableMeta;
use crate::testing::fault::{CrashMode, FaultFs};
use crate::{Db, Keyspace, Result};

const KS: &str = "l";

/// Small DTables and levels; background compactions only when `background` (else a test runs
/// them with `Db::compact`).
fn ks_opts(background: bool) -> KeyspaceOptions {
    let mut o = KeyspaceOptions::new(LayoutKind::Lightweight);
    o.write_buffer_bytes = 64 * 1024;
    o.block_size = 512;
    let l = &mut o.lightweight;
    l.max_levels = 4;
    l.l0_compaction_trigger = if background { 2 } else { 1000 };
    l.l0_slowdown_trigger = 1000;
    l.l0_stop_trigger = 1000;
    l.level_base_bytes = if background { 24 * 1024 } else { u64::MAX / 64 };
    // The budgets as given (the tests size their levels; `mod policy` tests the backlog rule).
    l.level_base_follows_l0 = false;
    l.level_size_ratio = 4;
    l.dtable_max_bytes = if background { 40 * 1024 } else { 32 * 1024 };
    l.division_count = 4;
    l.balance_factor = 1.5;
    o
}

fn open_fault(fs: &FaultFs, ko: &KeyspaceOptions) -> Result<(Db, Keyspace)> {
    open_threads(fs, ko, 1)
}

/// [`open_fault`] with `threads` background threads.
fn open_threads(fs: &FaultFs, ko: &KeyspaceOptions, threads: usize) -> Result<(Db, Keyspace)> {
    let mut o = Options::default();
    o.background_threads = threads;
    o.fs = Some(fs.as_dyn());
    o.keyspace_options = vec![(KS.to_string(), ko.clone())];
    let db = Db::open("/db", o)?;
    let ks = db.keyspace(KS, ko.clone())?;
    Ok((db, ks))
}

/// Key → value (`None`: deleted).
type Model = BTreeMap<Vec<u8>, Option<Vec<u8>>>;

/// Puts keys `range` (spread by a multiplier so rounds interleave) with values of `round`;
/// every seventh is deleted again.
fn write(ks: &Keyspace, model: &mut Model, round: u32, range: std::ops::Range<u32>) {
    for i in range {
        let k = format!("key{:06}", (i * 7919) % 100_000).into_bytes();
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

/// Every key of the model by `get`, and the whole keyspace by a forward and a backward scan.
fn check_model(ks: &Keyspace, model: &Model, what: &str) {
    for (k, v) in model {
        let got = ks.get(k).unwrap_or_else(|e| panic!("{what}: get: {e}"));
        assert_eq!(&got, v, "{what}: key {}", String::from_utf8_lossy(k));
    }
    let live: Vec<(Vec<u8>, Vec<u8>)> = model
        .iter()
        .filter_map(|(k, v)| v.clone().map(|v| (k.clone(), v)))
        .collect();
    let fwd: Vec<(Vec<u8>, Vec<u8>)> = ks
        .range::<&[u8], _>(..)
        .map(|r| {
            let (k, v) = r.unwrap_or_else(|e| panic!("{what}: scan: {e}"));
            (k.to_vec(), v.to_vec())
        })
        .collect();
    assert_eq!(fwd.len(), live.len(), "{what}: forward scan length");
    assert!(fwd == live, "{what}: forward scan differs");
    let mut back: Vec<(Vec<u8>, Vec<u8>)> = ks
        .range::<&[u8], _>(..)
        .rev()
        .map(|r| {
            let (k, v) = r.unwrap_or_else(|e| panic!("{what}: scan: {e}"));
            (k.to_vec(), v.to_vec())
        })
        .collect();
    back.reverse();
    assert!(back == live, "{what}: backward scan differs");
}

fn lwc(ks: &Keyspace) -> Arc<dyn LayoutVersion> {
    ks.version()
}

fn lv(v: &Arc<dyn LayoutVersion>) -> &LwcVersion {
    v.as_any()
        .downcast_ref::<LwcVersion>()
        .expect("a lightweight version")
}

fn segment(seq: u64, start: u64, end: u64) -> SegmentEntry {
    SegmentEntry {
        seq,
        start,
        end,
        entries: 3,
        min_seq: 5,
        max_seq: 9,
        smallest: make_ikey(b"a", 9, ValueKind::Put),
        largest: make_ikey(b"z", 5, ValueKind::Delete),
        mid: b"m".to_vec(),
    }
}

/// A tail decodes to what was encoded; every flipped byte and every truncation of it is a
/// `Corruption` naming the file and an offset inside the tail, never a panic or another tail.
#[test]
fn a_damaged_tail_is_corruption_never_another_tail() {
    let tail = Tail {
        segments: vec![segment(7, 0, 100), segment(9, 100, 250)],
        agg: Some((250, 40)),
    };
    let raw = tail.encode();
    let path = Path::new("/db/000001.dtb");
    assert_eq!(Tail::decode(&raw, path, 290).expect("decodes"), tail);
    for i in 0..raw.len() {
        for bit in [0x01u8, 0x80] {
            let mut bad = raw.clone();
            bad[i] ^= bit;
            match Tail::decode(&bad, path, 290) {
                Err(Error::Corruption { file, offset, .. }) => {
                    assert_eq!(file, path);
                    assert!(
                        (290..290 + raw.len() as u64).contains(&offset),
                        "offset {offset}"
                    );
                }
                other => panic!("byte {i} bit {bit:#x}: {other:?}"),
            }
        }
    }
    for n in 0..raw.len() {
        assert!(matches!(
            Tail::decode(&raw[..n], path, 290),
            Err(Error::Corruption { .. })
        ));
    }
    // Segments past the tail, out of order, or with sequence numbers going down.
    for bad in [
        Tail {
            segments: vec![segment(7, 0, 300)],
            agg: None,
        },
        Tail {
            segments: vec![segment(7, 100, 200), segment(8, 50, 90)],
            agg: None,
        },
        Tail {
            segments: vec![segment(9, 0, 100), segment(8, 100, 200)],
            agg: None,
        },
        Tail {
            segments: vec![],
            agg: Some((200, 100)),
        },
    ] {
        assert!(matches!(
            Tail::decode(&bad.encode(), path, 290),
            Err(Error::Corruption { .. })
        ));
    }
}

/// An aggregation block round-trips; a flipped byte is `Corruption`.
#[test]
fn a_damaged_aggregation_block_is_corruption() {
    let copies = vec![dtable::AggCopy {
        file_no: 12,
        meta_offset: 300,
        tail: Tail {
            segments: vec![segment(3, 0, 100)],
            agg: None,
        }
        .encode(),
    }];
    let raw = dtable::encode_agg(&copies);
    let path = Path::new("/db/000002.dtb");
    assert_eq!(dtable::decode_agg(&raw, path, 50).expect("decodes"), copies);
    for i in 0..raw.len() {
        let mut bad = raw.clone();
        bad[i] ^= 0x10;
        assert!(
            matches!(
                dtable::decode_agg(&bad, path, 50),
                Err(Error::Corruption { .. })
            ),
            "byte {i}"
        );
    }
}

/// A long run with background compactions: every mechanism runs (light-weight compactions
/// into levels 1–3, aggregated copies used and repaired, balance shifts, divisions), the
/// keyspace matches the model by gets and scans throughout and after a reopen, and no DTable
/// ever grows past its size limit (a target an append could carry past it is rewritten with
/// its arrival instead).
#[test]
fn every_mechanism_runs_and_the_keyspace_matches_a_model() {
    let fs = FaultFs::new(3);
    let ko = ks_opts(true);
    let mut model = Model::new();
    let (db, ks) = open_fault(&fs, &ko).expect("open");
    for round in 0..24 {
        write(&ks, &mut model, round, round * 600..round * 600 + 1500);
        db.flush().expect("flush");
        db.wait_for_compactions().expect("compactions");
        db.check_invariants().expect("invariants");
        all_within(
            &ks,
            ko.lightweight.dtable_max_bytes,
            &format!("round {round}"),
        );
        if round % 6 == 5 {
            check_model(&ks, &model, &format!("round {round}"));
        }
    }
    let s = db.stats().lightweight;
    eprintln!("{s:?}");
    assert!(s.compactions > 10, "{s:?}");
    assert!(s.appended_segments > s.compactions, "{s:?}");
    assert!(s.copies_used > 0, "{s:?}");
    assert!(s.uncopied_reads > 0, "{s:?}");
    assert!(s.aggregation_writes > 0, "{s:?}");
    assert!(s.balance_shifts > 0, "{s:?}");
    assert!(s.full_rewrites > 0, "{s:?}");
    let v = lwc(&ks);
    assert!(lv(&v).deepest() >= 2, "levels: {}", lv(&v).levels.len());
    check_model(&ks, &model, "after the run");
    let report = crate::check::check_dir(Path::new("/db"), fs.as_dyn());
    drop(ks);
    drop(db);
    let report = report.expect("check");
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    let (_db, ks) = open_fault(&fs, &ko).expect("reopen");
    check_model(&ks, &model, "after a reopen");
}

/// Every DTable of every level is at most `limit` bytes long.
fn all_within(ks: &Keyspace, limit: u64, what: &str) {
    let v = lwc(ks);
    for t in v.files() {
        assert!(
            t.meta.size <= limit,
            "{what}: DTable {:06} is {} bytes, past its limit of {limit}",
            t.meta.file_no,
            t.meta.size
        );
    }
}

/// Tables of level `l`: (file number, size, routing bound).
fn level_tables(ks: &Keyspace, l: usize) -> Vec<(TableMeta, Vec<u8>)> {
    let v = lwc(ks);
    lv(&v).level(l).map_or_else(Vec::new, |lv| {
        lv.tables
            .iter()
            .map(|t| t.meta.clone())
            .zip(lv.los.iter().cloned())
            .collect()
    })
}

/// A light-weight compaction of level 0 into level 1 appends to the level-1 DTables: no
/// new table, every old byte of every target unchanged, bytes written = the bytes appended
/// (≈ the victims' data plus the targets' new segment metadata and tails), bytes read = the
/// victims' bytes plus the targets' tails (level-0 victims carry no aggregated copies).
#[test]
fn a_light_weight_compaction_reads_the_victim_once_and_only_appends() {
    let fs = FaultFs::new(4);
    let mut ko = ks_opts(false);
    // Room in every target for its piece: none is rewritten.
    ko.lightweight.dtable_max_bytes = 64 * 1024;
    let mut model = Model::new();
    let (db, ks) = open_fault(&fs, &ko).expect("open");
    // Level 1 of several DTables: the first compaction into the empty level cuts its
    // output at half the size limit.
    write(&ks, &mut model, 0, 0..2000);
    db.flush().expect("flush");
    db.compact().expect("compact");
    let before = level_tables(&ks, 1);
    assert!(before.len() >= 3, "level 1 tables: {}", before.len());
    let files_before: Vec<Vec<u8>> = before
        .iter()
        .map(|(m, _)| {
            fs.file_bytes(&Path::new("/db").join(format!("{:06}.dtb", m.file_no)))
                .expect("file")
        })
        .collect();
    write(&ks, &mut model, 1, 0..600);
    db.flush().expect("flush");
    let l0: u64 = lv(&lwc(&ks)).l0.iter().map(|t| t.meta.size).sum();
    let s1 = db.stats();
    db.compact().expect("compact");
    let s2 = db.stats();
    let after = level_tables(&ks, 1);
    assert_eq!(
        after.iter().map(|t| t.0.file_no).collect::<Vec<_>>(),
        before.iter().map(|t| t.0.file_no).collect::<Vec<_>>(),
        "the same DTables, appended to"
    );
    let appended: u64 = after
        .iter()
        .zip(&before)
        .map(|(a, b)| a.0.size - b.0.size)
        .sum();
    for ((a, b), old) in after.iter().zip(&before).zip(&files_before) {
        assert!(a.0.size > b.0.size, "every target took a piece");
        let now = fs
            .file_bytes(&Path::new("/db").join(format!("{:06}.dtb", a.0.file_no)))
            .expect("file");
        assert_eq!(&now[..old.len()], &old[..], "old bytes unchanged");
    }
    let written = s2.bytes_written.compaction - s1.bytes_written.compaction;
    assert_eq!(written, appended);
    assert!(written < l0 + l0 / 2, "written {written}, victims {l0}");
    let read = s2.bytes_read - s1.bytes_read;
    let tails: u64 = before
        .iter()
        .map(|(m, _)| m.size - m.append.expect("appendable").meta_offset)
        .sum();
    assert!(
        read <= l0 + tails + 4096,
        "read {read}, victims {l0}, tails {tails}"
    );
    let lw = (s1.lightweight, s2.lightweight);
    assert_eq!(lw.1.compactions - lw.0.compactions, 1);
    assert_eq!(lw.1.victim_bytes - lw.0.victim_bytes, l0);
    assert_eq!(
        lw.1.appended_segments - lw.0.appended_segments,
        before.len() as u64
    );
    check_model(&ks, &model, "after the compaction");
}

/// Builds a database with levels 1 and 2 of several DTables each and a level-0 table, closed
/// cleanly; every write in the model was flushed.
fn image() -> (FaultFs, Model) {
    let fs = FaultFs::new(5);
    let mut model = Model::new();
    // Each round one memtable, flushed and compacted to quiescence before the next: the same
    // image every time (with several memtables a round, what an L0 compaction took depended
    // on how far the flushes had come, and a crash test's scenario now and then missed the
    // step it counts).
    let mut ko = ks_opts(true);
    ko.write_buffer_bytes = 8 << 20;
    let (db, ks) = open_fault(&fs, &ko).expect("open");
    for round in 0..10 {
        write(&ks, &mut model, round, round * 500..round * 500 + 1200);
        db.flush().expect("flush");
        db.wait_for_compactions().expect("compactions");
    }
    drop(ks);
    drop(db);
    let (db, ks) = open_fault(&fs, &ks_opts(false)).expect("open");
    write(&ks, &mut model, 99, 0..400);
    db.flush().expect("flush");
    let v = lwc(&ks);
    assert!(lv(&v).deepest() >= 2, "two levels");
    assert!(!lv(&v).l0.is_empty());
    drop(ks);
    drop(db);
    (fs, model)
}

/// How a crash test opens the database and runs the job it crashes.
struct Scenario<'a> {
    /// Opens the database for a run of the job (crashed or not).
    open: &'a dyn Fn(&FaultFs) -> Result<(Db, Keyspace)>,
    /// The job, on a database `open` opened.
    run: &'a dyn Fn(&Db) -> Result<()>,
    /// Opens the recovered database.
    reopen: &'a dyn Fn(&FaultFs) -> Result<(Db, Keyspace)>,
    /// The job again, on a database `reopen` opened, after more writes.
    rerun: &'a dyn Fn(&Db) -> Result<()>,
    /// The size limit no DTable may pass once the job ran.
    limit: u64,
}

/// Loses power at every `stride`-th I/O operation of `run` (opened with `ko`), the crash
/// mode and the order of directory entries rotating from one operation to the next: the
/// recovered keyspace matches the model (every write was flushed before), keeps its
/// invariants, checks clean, and takes more writes and the same job again.
fn crash_at_every_io(
    ko: &KeyspaceOptions,
    stride: u64,
    what_runs: &str,
    run: &dyn Fn(&Db) -> Result<()>,
) -> crate::LightweightStats {
    let open = |fs: &FaultFs| open_fault(fs, ko);
    let sc = Scenario {
        open: &open,
        run,
        reopen: &open,
        rerun: run,
        limit: ko.lightweight.dtable_max_bytes,
    };
    crash_scenario(&sc, 1, stride, what_runs)
}

/// One uncrashed run of the scenario on a copy of `base`: its operations from the first one
/// after the open to the end of the close (each as `index kind path`), and the lightweight
/// counters after it.
fn reference_run(
    base: &FaultFs,
    sc: &Scenario<'_>,
    what_runs: &str,
) -> (Vec<String>, crate::LightweightStats) {
    let fs = base.deep_clone();
    let (db, ks) = (sc.open)(&fs).expect("open");
    fs.start_trace();
    let s1 = db.stats().lightweight;
    (sc.run)(&db).expect("runs");
    let s2 = db.stats().lightweight;
    assert!(s2 != s1, "{what_runs}: something ran");
    all_within(&ks, sc.limit, what_runs);
    drop(ks);
    drop(db);
    (fs.trace(), s2)
}

/// Loses power at operations `first`, `first + stride`, … of the scenario's job (see
/// [`crash_at_every_io`]).
fn crash_scenario(
    sc: &Scenario<'_>,
    first: u64,
    stride: u64,
    what_runs: &str,
) -> crate::LightweightStats {
    let (base, model) = image();
    let (trace, ran) = reference_run(&base, sc, what_runs);
    let ops = trace.len() as u64;
    let modes = CrashMode::ALL;
    let mut points = 0;
    let mut n = first;
    while n <= ops + 1 {
        let mode = modes[(n as usize / stride as usize) % modes.len()];
        let out_of_order = (n / stride) % 3 == 1;
        let what = format!(
            "{what_runs}: crash at operation {n} of {ops}, {mode:?}, out of order {out_of_order}"
        );
        let fs = base.deep_clone();
        fs.set_dir_entries_out_of_order(out_of_order);
        fs.reseed(n);
        let (db, ks) = (sc.open)(&fs).expect("open");
        fs.freeze_at_op(fs.ops() + n);
        let _ = (sc.run)(&db);
        drop(ks);
        drop(db);
        fs.crash(mode);
        let (db, ks) = (sc.reopen)(&fs).unwrap_or_else(|e| panic!("{what}: reopen: {e}"));
        db.check_invariants()
            .unwrap_or_else(|e| panic!("{what}: invariants: {e}"));
        check_model(&ks, &model, &what);
        if n % (8 * stride) == first % (8 * stride) {
            // Now and then: more writes, the job again, and a clean `scree check`.
            let mut m = model.clone();
            write(&ks, &mut m, 7, 100..300);
            db.flush().expect("flush");
            (sc.rerun)(&db).unwrap_or_else(|e| panic!("{what}: run again: {e}"));
            check_model(&ks, &m, &format!("{what}, then more"));
            drop(ks);
            drop(db);
            let report = crate::check::check_dir(Path::new("/db"), fs.as_dyn())
                .unwrap_or_else(|e| panic!("{what}: check: {e}"));
            assert!(report.problems.is_empty(), "{what}: {:?}", report.problems);
        }
        points += 1;
        n += stride;
    }
    eprintln!("{what_runs}: {points} crash points over {ops} operations; {ran:?}");
    ran
}

/// A crash at every I/O of a manual compaction: the level-0 table appended to level 1, then
/// level-1 groups compacted into level 2 with the aggregation write and balance shifts.
#[test]
fn every_crash_of_a_light_weight_compaction_and_balance_recovers() {
    let mut ko = ks_opts(false);
    ko.lightweight.balance_factor = 1.0;
    ko.lightweight.dtable_max_bytes = 48 * 1024;
    let ran = crash_at_every_io(&ko, 1, "compaction", &|db| db.compact());
    assert!(ran.balance_shifts > 0, "{ran:?}");
}

/// A crash at every I/O of background light-weight compactions of level groups (the level
/// budgets cut small), each with the aggregation write to the neighbour that takes over the
/// victims' range, and the balance shifts after them.
#[test]
fn every_crash_of_a_group_compaction_with_its_aggregation_write_recovers() {
    let mut ko = ks_opts(true);
    ko.lightweight.level_base_bytes = 4096;
    ko.lightweight.balance_factor = 1.0;
    let ran = crash_at_every_io(&ko, 3, "group compaction", &|db| db.wait_for_compactions());
    assert!(ran.aggregation_writes > 0, "{ran:?}");
}

/// A crash at every I/O of compactions whose targets an append would carry past the size
/// limit: each such target group rewritten together with its arrival.
#[test]
fn every_crash_of_a_rewrite_with_its_arrival_recovers() {
    let mut ko = ks_opts(false);
    ko.lightweight.dtable_max_bytes = 40 * 1024;
    let ran = crash_at_every_io(&ko, 2, "rewrite", &|db| db.compact());
    assert!(ran.full_rewrites > 0, "{ran:?}");
}

/// A crash at every I/O of equal divisions (every DTable in scope past a small limit) and the
/// compactions after them.
#[test]
fn every_crash_of_an_equal_division_recovers() {
    let mut ko = ks_opts(false);
    ko.lightweight.dtable_max_bytes = 16 * 1024;
    let ran = crash_at_every_io(&ko, 2, "division", &|db| db.compact());
    assert!(ran.divisions > 0, "{ran:?}");
}

/// Options for two concurrent jobs on [`image`]: level 0 not due, levels 1 and 2 over their
/// budgets, so that the two background threads pick compactions of disjoint key ranges —
/// with `max_levels` 4, two groups of level 2 into level 3 (one level shared), with 5, a
/// group of level 3 into level 4 beside a group of level 2 appending to level 3
/// (neighbouring levels).
fn two_jobs_opts(max_levels: usize, dtable_kib: u64) -> KeyspaceOptions {
    let mut ko = ks_opts(true);
    ko.lightweight.l0_compaction_trigger = 1000;
    ko.lightweight.level_base_bytes = 4096;
    ko.lightweight.balance_factor = 1.0;
    ko.lightweight.max_levels = max_levels;
    ko.lightweight.dtable_max_bytes = dtable_kib * 1024;
    ko.lightweight.concurrent_jobs = true;
    ko
}

/// Opens [`image`] with two background threads whose compactions follow `steps` (jobs 0
/// and 1 in the order the threads picked them, both picked before either runs).
fn open_scripted(
    fs: &FaultFs,
    ko: &KeyspaceOptions,
    steps: &[(usize, Phase)],
) -> Result<(Db, Keyspace)> {
    let mut o = Options::default();
    o.background_threads = 2;
    o.fs = Some(fs.as_dyn());
    o.keyspace_options = vec![(KS.to_string(), ko.clone())];
    o.job_script = Some(Arc::new(JobScript::new(2, steps.to_vec())));
    let db = Db::open("/db", o)?;
    let ks = db.keyspace(KS, ko.clone())?;
    Ok((db, ks))
}

/// Lets a scripted database's jobs go and waits for the script to end.
fn run_script(db: &Db) -> Result<()> {
    let script = db.job_script().expect("a scripted database");
    script.arm();
    script
        .wait_done(std::time::Duration::from_secs(60))
        .map_err(|why| Error::BackgroundError(format!("job script: {why}")))
}

/// Job 0 writes its data, job 1 runs and installs while job 0's outputs are not yet in the
/// manifest, then job 0 installs.
const NESTED: [(usize, Phase); 4] = [
    (0, Phase::Run),
    (1, Phase::Run),
    (1, Phase::Install),
    (0, Phase::Install),
];

/// Both jobs write their data, then install in the order they were picked.
const OVERLAPPED: [(usize, Phase); 4] = [
    (0, Phase::Run),
    (1, Phase::Run),
    (0, Phase::Install),
    (1, Phase::Install),
];

/// Crashes every operation of two light-weight jobs in flight at once on disjoint key
/// ranges (options `ko`), in the order `steps`; the recovered database is reopened with two
/// free-running background threads (concurrent jobs on) for the rerun. Returns what the two
/// jobs did.
fn crash_two_jobs(
    ko: &KeyspaceOptions,
    steps: &[(usize, Phase)],
    what: &str,
) -> crate::LightweightStats {
    let open = |fs: &FaultFs| open_scripted(fs, ko, steps);
    let reopen = |fs: &FaultFs| open_threads(fs, ko, 2);
    let sc = Scenario {
        open: &open,
        run: &run_script,
        reopen: &reopen,
        rerun: &|db: &Db| db.wait_for_compactions(),
        limit: ko.lightweight.dtable_max_bytes,
    };
    // Deterministic: two runs do the same operations in the same order (else a crash point
    // would land on a different operation from one run to the next).
    let (base, _) = image();
    let (t1, s) = reference_run(&base, &sc, what);
    let (t2, _) = reference_run(&base, &sc, what);
    assert!(t1 == t2, "{what}: two runs differ:\n{t1:#?}\n{t2:#?}");
    assert_eq!(s.compactions, 2, "{what}: {s:?}");
    assert_eq!(s.concurrent_jobs, 1, "{what}: one job at a time: {s:?}");
    assert_eq!(s.shared_level_jobs, 1, "{what}: no level shared: {s:?}");
    crash_scenario(&sc, 1, 1, what)
}

/// A crash at every I/O of two concurrent light-weight compactions of one level into the
/// next (two background threads, `concurrent_jobs` on, disjoint key ranges of levels 2 and
/// 3): in one order the first job writes its appends and new tails, the second runs and
/// installs while the first's bytes are unsynced or not in the manifest, then the first
/// installs; in the other both write before either installs. Appends, the aggregation
/// writes, balance shifts and a rewrite of a full target with its arrival all run; the
/// recovered database holds every acknowledged (flushed) write.
#[test]
fn every_crash_of_two_concurrent_compactions_of_one_level_recovers() {
    let ko = two_jobs_opts(4, 40);
    for (steps, what) in [
        (NESTED, "one level, nested"),
        (OVERLAPPED, "one level, overlapped"),
    ] {
        let s = crash_two_jobs(&ko, &steps, what);
        assert!(
            s.appended_segments > 0
                && s.aggregation_writes > 0
                && s.balance_shifts > 0
                && s.full_rewrites > 0,
            "{what}: {s:?}"
        );
    }
}

/// The same for a compaction appending to level 3 while another compacts a group of level 3
/// into level 4 (neighbouring levels).
#[test]
fn every_crash_of_two_concurrent_compactions_of_neighbouring_levels_recovers() {
    let ko = two_jobs_opts(5, 48);
    for (steps, what) in [
        (NESTED, "neighbouring levels, nested"),
        (OVERLAPPED, "neighbouring levels, overlapped"),
    ] {
        let s = crash_two_jobs(&ko, &steps, what);
        assert!(
            s.appended_segments > 0 && s.aggregation_writes > 0 && s.balance_shifts > 0,
            "{what}: {s:?}"
        );
    }
}

/// Opens the test keyspace on the file system `fs` (a band emulator over a fault one).
fn open_on(fs: &Arc<dyn crate::fs::FileSystem>, ko: &KeyspaceOptions) -> Result<(Db, Keyspace)> {
    let mut o = Options::default();
    o.background_threads = 1;
    o.fs = Some(fs.clone());
    o.keyspace_options = vec![(KS.to_string(), ko.clone())];
    let db = Db::open("/db", o)?;
    let ks = db.keyspace(KS, ko.clone())?;
    Ok((db, ks))
}

/// A host-managed shingled device of 128 KiB bands (one DTable per band; the emulator refuses
/// a write past a band) under `dtable_max_bytes` far larger: the band is the limit.
fn small_bands() -> (Arc<dyn crate::fs::FileSystem>, KeyspaceOptions) {
    use crate::fs::band::{Backing, BandConfig, BandFs, BandMode};
    let band = BandFs::new(
        FaultFs::new(6).as_dyn(),
        BandConfig {
            mode: BandMode::HostManaged,
            band_bytes: 128 * 1024,
            bands: 1 << 14,
            backing: Backing::Memory,
        },
    )
    .expect("band emulator");
    let mut ko = ks_opts(true);
    ko.lightweight.dtable_max_bytes = 40 << 20;
    (Arc::new(band), ko)
}

/// Many keys with background compactions on 128 KiB host-managed bands: no append ever
/// crosses a band (a write past one is an I/O error that stops the database), targets that
/// would have are rewritten with their arrival, the keyspace matches the model by gets and
/// scans throughout, after a manual compaction and after a reopen, and the device counts
/// no read-modify-write.
#[test]
fn no_append_crosses_a_host_managed_band() {
    let (fs, ko) = small_bands();
    let limit = 128 * 1024;
    let mut model = Model::new();
    let (db, ks) = open_on(&fs, &ko).expect("open");
    for round in 0..30 {
        write(&ks, &mut model, round, round * 700..round * 700 + 1800);
        db.flush().expect("flush");
        db.wait_for_compactions().expect("compactions");
        db.check_invariants().expect("invariants");
        all_within(&ks, limit, &format!("round {round}"));
        if round % 10 == 9 {
            check_model(&ks, &model, &format!("round {round}"));
        }
    }
    db.compact().expect("compact");
    all_within(&ks, limit, "after compact");
    let s = db.stats();
    eprintln!("{:?}\n{:?}", s.lightweight, s.device);
    assert!(s.lightweight.full_rewrites > 0, "{:?}", s.lightweight);
    let d = s.device.expect("device stats");
    assert_eq!(d.rmw_bytes, 0);
    assert!(d.bands_in_use > 0);
    check_model(&ks, &model, "after the run");
    drop(ks);
    drop(db);
    let (db, ks) = open_on(&fs, &ko).expect("reopen");
    check_model(&ks, &model, "after a reopen");
    write(&ks, &mut model, 99, 0..3000);
    db.flush().expect("flush");
    db.wait_for_compactions().expect("compactions");
    all_within(&ks, limit, "after the reopen");
    check_model(&ks, &model, "after more writes");
}

/// With the plan's estimates cut eightfold, overflows reach the guard in the append itself: the target's segment ends before the entry it has no room
/// for, the rest of its piece goes to a new DTable, no band is crossed, and the keyspace
/// matches the model, also after a reopen.
#[test]
fn the_guard_spills_what_a_target_has_no_room_for() {
    let (fs, mut ko) = small_bands();
    // Manual compactions only: they run on this thread, which the hook switches.
    ko.lightweight.l0_compaction_trigger = 1000;
    ko.lightweight.l0_slowdown_trigger = 1000;
    ko.lightweight.l0_stop_trigger = 1000;
    ko.lightweight.level_base_bytes = u64::MAX / 64;
    let limit = 128 * 1024;
    let mut model = Model::new();
    let (db, ks) = open_on(&fs, &ko).expect("open");
    super::jobs::SHORT_PLAN.with(|p| p.set(true));
    for round in 0..16 {
        write(&ks, &mut model, round, round * 900..round * 900 + 2000);
        db.flush().expect("flush");
        db.compact().expect("compact");
        db.check_invariants().expect("invariants");
        all_within(&ks, limit, &format!("round {round}"));
    }
    super::jobs::SHORT_PLAN.with(|p| p.set(false));
    let s = db.stats().lightweight;
    eprintln!("{s:?}");
    assert!(s.spills > 0, "{s:?}");
    check_model(&ks, &model, "after the run");
    drop(ks);
    drop(db);
    let (_db, ks) = open_on(&fs, &ko).expect("reopen");
    check_model(&ks, &model, "after a reopen");
}

/// Four levels of many small tables, so that most jobs leave other ranges free.
fn many_levels_opts() -> KeyspaceOptions {
    let mut ko = ks_opts(true);
    ko.lightweight.max_levels = 5;
    ko.lightweight.level_base_bytes = 16 * 1024;
    ko
}

/// Jobs on disjoint key ranges run at the same time — two compactions into one level, a
/// compaction appending to a level while another compacts a different group of it down
/// (neighbouring levels), divisions beside both — and the keyspace stays the model's:
/// gets and scans while the jobs run and after, invariants after every round, stale
/// aggregated copies detected and repaired (counted), `scree check` clean, then a reopen, more writes with the jobs running again, and a second reopen.
#[test]
fn concurrent_jobs_on_disjoint_ranges_keep_the_model_across_reopens() {
    let fs = FaultFs::new(5);
    let mut ko = many_levels_opts();
    ko.lightweight.concurrent_jobs = true;
    let open = |fs: &FaultFs| open_threads(fs, &ko, 4);
    let mut model = Model::new();
    let (db, ks) = open(&fs).expect("open");
    for round in 0..30 {
        // No wait between rounds: flushes and compactions of earlier rounds still run.
        write(&ks, &mut model, round, round * 500..round * 500 + 1200);
        db.check_invariants().expect("invariants");
        if round % 5 == 4 {
            check_model(&ks, &model, &format!("round {round}, jobs running"));
        }
    }
    db.flush().expect("flush");
    db.wait_for_compactions().expect("compactions");
    db.check_invariants().expect("invariants");
    let s = db.stats().lightweight;
    eprintln!("{s:?}");
    assert!(s.concurrent_jobs > 0, "no two jobs ran at once: {s:?}");
    assert!(s.shared_level_jobs > 0, "no two jobs shared a level: {s:?}");
    assert!(
        s.stale_repairs > 0,
        "no stale aggregated copy was met: {s:?}"
    );
    assert!(
        s.aggregation_writes > 0 && s.divisions + s.full_rewrites > 0,
        "{s:?}"
    );
    let v = lwc(&ks);
    assert!(lv(&v).deepest() >= 3, "levels: {}", lv(&v).levels.len());
    check_model(&ks, &model, "after the run");
    let report = crate::check::check_dir(Path::new("/db"), fs.as_dyn());
    drop(v);
    drop(ks);
    drop(db);
    let report = report.expect("check");
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    let (db, ks) = open(&fs).expect("reopen");
    check_model(&ks, &model, "after a reopen");
    for round in 30..40 {
        write(&ks, &mut model, round, round * 500..round * 500 + 1200);
    }
    check_model(&ks, &model, "after the reopen, jobs running");
    db.flush().expect("flush");
    db.wait_for_compactions().expect("compactions");
    db.check_invariants().expect("invariants");
    drop(ks);
    drop(db);
    let (_db, ks) = open(&fs).expect("second reopen");
    check_model(&ks, &model, "after a second reopen");
}

/// By default (`concurrent_jobs` off) one light-weight job runs at a time per keyspace, even
/// with four background threads and work due on several levels.
#[test]
fn without_concurrent_jobs_one_job_runs_at_a_time() {
    let fs = FaultFs::new(5);
    let ko = many_levels_opts();
    assert!(!ko.lightweight.concurrent_jobs, "the default");
    let (db, ks) = open_threads(&fs, &ko, 4).expect("open");
    let mut model = Model::new();
    for round in 0..20 {
        write(&ks, &mut model, round, round * 500..round * 500 + 1200);
    }
    db.flush().expect("flush");
    db.wait_for_compactions().expect("compactions");
    let s = db.stats().lightweight;
    assert!(s.compactions > 10, "{s:?}");
    assert_eq!(s.concurrent_jobs, 0, "{s:?}");
    check_model(&ks, &model, "after the run");
}

/// The policy as a function of the version: state → due jobs (no files, no engine).
mod policy {
    use super::super::version::range_record;
    use super::super::{fullest, Due, Lightweight};
    use crate::layout::LayoutVersion;
    use crate::manifest::edit::{AddedTable, KsEdit};
    use crate::options::LightweightOptions;
    use crate::table::test_support::{metadata_only_ctx, metadata_only_table};
    use crate::table::AppendMeta;

    use super::super::dtable::FORMAT_DTABLE;
    use super::super::version::LwcVersion;

    const MIB: u64 = 1 << 20;

    /// A DTable of `level` from routing bound `lo`, holding keys `lo..=hi` in `size` bytes
    /// (0 entries when `size` is 0: a reset table).
    fn dt(level: u32, no: u64, lo: &str, hi: &str, size: u64) -> AddedTable {
        let mut t = metadata_only_table(level, no, lo, hi, (no, no), size.max(100));
        t.format = FORMAT_DTABLE;
        if size == 0 {
            t.meta.entries = 0;
            t.meta.smallest.clear();
            t.meta.largest.clear();
        }
        t.meta.append = Some(AppendMeta {
            meta_offset: t.meta.size - 50,
            dead_bytes: 0,
        });
        t
    }

    /// A version of level-0 tables `l0` (bytes each) and levels given as
    /// `(level, [(lo, size)])`, keys one letter wide.
    fn version(l0: &[u64], levels: &[(u32, &[(&str, u64)])]) -> LwcVersion {
        let mut e = KsEdit::default();
        let mut no = 1;
        for &size in l0 {
            e.added.push(dt(0, no, "a", "z", size));
            no += 1;
        }
        for &(l, tables) in levels {
            for (i, &(lo, size)) in tables.iter().enumerate() {
                let hi = tables.get(i + 1).map_or("zz", |n| n.0);
                // Data from the bound (or "a") to just below the next bound.
                let first = if lo.is_empty() { "a" } else { lo };
                let last = format!(
                    "{}",
                    hi.chars()
                        .next()
                        .map_or('z', |c| { char::from_u32(c as u32 - 1).unwrap_or(c) })
                );
                e.added.push(dt(l, no, first, &last, size));
                e.records.push(range_record(no, lo.as_bytes()));
                no += 1;
            }
        }
        let v = LwcVersion::default()
            .apply(&e, &metadata_only_ctx())
            .expect("apply");
        let v = v.as_any().downcast_ref::<LwcVersion>().expect("lwc");
        LwcVersion {
            l0: v.l0.clone(),
            levels: v.levels.clone(),
        }
    }

    fn opts() -> LightweightOptions {
        LightweightOptions {
            level_base_bytes: 1 << 40,
            ..LightweightOptions::default()
        }
    }

    const LIMIT: u64 = 40 * MIB;

    #[test]
    fn a_level_1_table_the_level_0_arrival_would_overflow_is_compacted_down_first() {
        // 4 × 8 MiB from level 0 over 4 tables: 8 MiB each (10 MiB with the plan's
        // quarter). Only the 32 MiB table has no room.
        let v = version(
            &[8 * MIB; 4],
            &[
                (
                    1,
                    &[
                        ("", 5 * MIB),
                        ("d", 32 * MIB),
                        ("h", 5 * MIB),
                        ("p", 29 * MIB),
                    ],
                ),
                (2, &[("", 30 * MIB)]),
            ],
        );
        let due = Lightweight::due(&v, &opts(), LIMIT, 0);
        assert_eq!(due, vec![Due::Room(1, (1, 2)), Due::L0]);
    }

    #[test]
    fn the_deepest_level_makes_no_room_and_an_arrival_too_large_for_an_empty_table_neither() {
        let l1: &[(&str, u64)] = &[("", 5 * MIB), ("d", 32 * MIB)];
        // Level 1 is the deepest: nothing below takes a room compaction (it divides).
        let v = version(&[8 * MIB; 4], &[(1, l1)]);
        assert_eq!(Lightweight::due(&v, &opts(), LIMIT, 0), vec![Due::L0]);
        // 4 × 64 MiB over 2 tables: even an empty table could not take 128 MiB, so
        // compacting one down would not help (the job rewrites and divides instead).
        let v = version(&[64 * MIB; 4], &[(1, l1), (2, &[("", 30 * MIB)])]);
        assert_eq!(Lightweight::due(&v, &opts(), LIMIT, 0), vec![Due::L0]);
        // A reset (empty) table is never a room victim, however its file size looks.
        let v = version(
            &[8 * MIB; 4],
            &[(1, &[("", 0), ("d", 0)]), (2, &[("", 30 * MIB)])],
        );
        assert_eq!(Lightweight::due(&v, &opts(), LIMIT, 0), vec![Due::L0]);
        // At the slowdown trigger level 0 goes first.
        let v = version(&[8 * MIB; 8], &[(1, l1), (2, &[("", 30 * MIB)])]);
        assert_eq!(Lightweight::due(&v, &opts(), LIMIT, 0), vec![Due::L0]);
    }

    #[test]
    fn the_deepest_level_makes_room_when_the_arrival_takes_it_past_its_budget() {
        let mut o = opts();
        o.level_base_bytes = 64 * MIB;
        // Level 1 is the deepest, 37 MiB against a 64 MiB budget. 4 × 8 MiB from level 0
        // (16 MiB a table, 20 with the quarter): "d" (32 MiB) has no room. 37 + 32 MiB is
        // past the budget, so level 1's data goes down anyway: "d" goes first, to a level 2
        // that does not exist yet, and the arrival is appended to its empty table.
        let l1: &[(&str, u64)] = &[("", 5 * MIB), ("d", 32 * MIB)];
        let v = version(&[8 * MIB; 4], &[(1, l1)]);
        assert_eq!(
            Lightweight::due(&v, &o, LIMIT, 0),
            vec![Due::Room(1, (1, 2)), Due::L0]
        );
        // Within the budget after the arrival, the deepest level takes it (and divides).
        o.level_base_bytes = 80 * MIB;
        assert_eq!(Lightweight::due(&v, &o, LIMIT, 0), vec![Due::L0]);
        // The budget follows the level-0 backlog: 4 × 32 MiB, so within it.
        o.level_base_bytes = 64 * MIB;
        assert_eq!(Lightweight::due(&v, &o, LIMIT, 128 * MIB), vec![Due::L0]);
        // No level may lie below level 1 (`max_levels` 2): no room compaction.
        o.max_levels = 2;
        assert_eq!(Lightweight::due(&v, &o, LIMIT, 0), vec![Due::L0]);
    }

    #[test]
    fn tables_a_compaction_makes_are_cut_by_the_fan_out() {
        use super::super::jobs::part_cap;
        // Level 0's 4 × 64 MiB over a fan-out of 10: 6.4 MiB tables (40 of them for the
        // arrival), not half the limit (13 of them, each filled by the next arrival).
        assert_eq!(part_cap(&[64 * MIB; 4], 10, LIMIT, 12), 64 * MIB / 10);
        // Reset victims (no data, counted as 0) do not lower the average.
        assert_eq!(part_cap(&[0, 40 * MIB, 0], 10, LIMIT, 12), 4 * MIB);
        // Never finer than an equal division of a full table, never past half the limit.
        assert_eq!(part_cap(&[8 * MIB], 10, LIMIT, 12), LIMIT / 12);
        assert_eq!(part_cap(&[1024 * MIB], 10, LIMIT, 12), LIMIT / 2);
        assert_eq!(part_cap(&[], 10, LIMIT, 12), LIMIT / 12);
        assert_eq!(part_cap(&[0], 0, 1, 0), 1);
    }

    #[test]
    fn a_deepest_group_holding_less_than_a_large_arrival_is_cut_now() {
        use super::super::jobs::cut_early;
        let cap = 4 * MIB;
        // A young deepest level's end table: 3 MiB held, 12 MiB arriving.
        assert!(cut_early(true, 3 * MIB, 12 * MIB, cap));
        // Not above the deepest level (room before an arrival handles it there).
        assert!(!cut_early(false, 3 * MIB, 12 * MIB, cap));
        // Holding more than the arrival: appended to (cut when full).
        assert!(!cut_early(true, 13 * MIB, 12 * MIB, cap));
        // An arrival of less than two tables: appended to.
        assert!(!cut_early(true, MIB, 8 * MIB - 1, cap));
        assert!(cut_early(true, MIB, 8 * MIB, cap));
    }

    #[test]
    fn level_1_has_room_for_one_level_0_compaction_before_it_is_over_budget() {
        let mut o = opts();
        o.level_base_bytes = 10 * MIB;
        let v = version(
            &[],
            &[
                (1, &[("", 30 * MIB), ("h", 30 * MIB), ("p", 30 * MIB)]),
                (2, &[("", 30 * MIB)]),
            ],
        );
        // 90 MiB against 10 MiB: due. Against a level-0 backlog of 4 × 64 MiB: not yet.
        assert_eq!(Lightweight::due(&v, &o, LIMIT, 0), vec![Due::Level(1)]);
        assert_eq!(Lightweight::due(&v, &o, LIMIT, 256 * MIB), vec![]);
        // Level 2's budget follows: 10 × 256 MiB.
        assert_eq!(super::super::max_bytes(&o, 256 * MIB, 2), 2560 * MIB);
        assert_eq!(super::super::max_bytes(&o, 0, 2), 100 * MIB);
    }

    #[test]
    fn reset_tables_count_nothing_toward_a_budget_and_are_never_victims() {
        let mut o = opts();
        o.level_base_bytes = 256;
        // Three reset tables whose aggregation blocks make 300 bytes of files: not due (a
        // victim holding no data would only be reset again, for ever).
        let v = version(&[], &[(1, &[("", 0), ("h", 0), ("p", 0)])]);
        assert!(v.level(1).is_some_and(|lv| lv.bytes >= 300));
        assert_eq!(Lightweight::due(&v, &o, LIMIT, 0), vec![]);
        // With data in one of them, that one is the victim.
        let v = version(&[], &[(1, &[("", 0), ("h", MIB), ("p", 0)])]);
        let lv1 = v.level(1).expect("level 1");
        assert_eq!(fullest(lv1), Some((1, 2)));
        assert_eq!(Lightweight::due(&v, &o, LIMIT, 0), vec![Due::Level(1)]);
    }

    #[test]
    fn a_level_over_budget_gives_its_fullest_group_and_its_targets_make_room_first() {
        let mut o = opts();
        o.level_base_bytes = 10 * MIB;
        // Level 1 (20 MiB) is over its 10 MiB budget; its fullest table ("h", 12 MiB) sends
        // its data to level 2's "g" and "k" tables: 6 MiB each (7.5 with the quarter), and
        // "k" holds 35 MiB, so it goes down to level 3 first.
        let v = version(
            &[],
            &[
                (1, &[("", 3 * MIB), ("h", 12 * MIB), ("p", 5 * MIB)]),
                (
                    2,
                    &[("", 35 * MIB), ("g", 20 * MIB), ("k", 35 * MIB), ("p", MIB)],
                ),
                (3, &[("", 100 * MIB)]),
            ],
        );
        let lv1 = v.level(1).expect("level 1");
        assert_eq!(fullest(lv1), Some((1, 2)));
        assert_eq!(
            Lightweight::due(&v, &o, LIMIT, 0),
            vec![Due::Room(2, (2, 3)), Due::Level(1)]
        );
        // The chain: level 1's room victim is itself an arrival into level 2.
        let v = version(
            &[8 * MIB; 4],
            &[
                // 16 MiB each from level 0: "" (24 MiB) has no room; compacted down, its
                // 24 MiB would carry level 2's "" (38 MiB) past the limit in turn.
                (1, &[("", 24 * MIB), ("p", 3 * MIB)]),
                (2, &[("", 38 * MIB), ("p", MIB)]),
                (3, &[("", 100 * MIB)]),
            ],
        );
        assert_eq!(
            Lightweight::due(&v, &opts(), LIMIT, 0),
            vec![Due::Room(2, (0, 1)), Due::Room(1, (0, 1)), Due::L0]
        );
    }
}

/// The benchmark's shape at 1/256 scale: level 1's budget follows the level-0 backlog, the
/// size limit is 0.625 of a write buffer, random keys of 100-byte values.
fn bench_shape() -> KeyspaceOptions {
    let mut o = KeyspaceOptions::new(LayoutKind::Lightweight);
    o.write_buffer_bytes = 256 * 1024;
    let l = &mut o.lightweight;
    l.dtable_max_bytes = 160 * 1024;
    // Level 1's budget is the level-0 backlog (4 × 256 KiB), as 256 MiB is at 64 MiB.
    l.level_base_bytes = 40 * 1024;
    o
}

/// Random puts of 100-byte values (keys by a multiplicative hash, so every flush spans the
/// key space, as the benchmark's fillrandom).
fn write_random(ks: &Keyspace, model: &mut Model, round: u32, n: u32) {
    for i in 0..n {
        let x = (u64::from(round) * 1_000_003 + u64::from(i)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let k = format!("{:016x}", x >> 8).into_bytes();
        let mut v = format!("round {round} key {i} ").into_bytes();
        v.resize(100, b'.');
        ks.put(&k, &v).expect("put");
        model.insert(k, Some(v));
    }
}

/// Every aggregated copy a DTable holds is either stale — its table gone from the next level
/// or its tail moved, which a compaction detects and repairs by a read (counted) — or
/// byte for byte its table's current tail; in the benchmark's shape (level 1 as large as a
/// level-0 compaction, random keys), with compactions into an empty level 2 (whose new
/// tables the victims' empty DTables now copy), full rewrites and balance shifts. Every
/// appended target's tail is counted as a copy used, a stale copy repaired or a table no
/// copy covered.
#[test]
fn aggregated_copies_match_their_tables_or_are_detected_stale() {
    let fs = FaultFs::new(7);
    let ko = bench_shape();
    let mut model = Model::new();
    let (db, ks) = open_fault(&fs, &ko).expect("open");
    let (mut fresh, mut stale) = (0, 0);
    for round in 0..10 {
        write_random(&ks, &mut model, round, 5000);
        db.wait_for_compactions().expect("compactions");
        let v = lwc(&ks);
        let levels = &lv(&v).levels;
        for (i, holders) in levels.iter().enumerate() {
            let below: HashMap<u64, &Arc<crate::table::TableFile>> = levels
                .get(i + 1)
                .map(|l| l.tables.iter().map(|t| (t.meta.file_no, t)).collect())
                .unwrap_or_default();
            for h in &holders.tables {
                for copy in dtable::reader(h).expect("reader").agg().expect("agg") {
                    let Some(t) = below.get(&copy.file_no) else {
                        stale += 1;
                        continue;
                    };
                    if t.meta.append.map(|a| a.meta_offset) != Some(copy.meta_offset) {
                        stale += 1;
                        continue;
                    }
                    let now = dtable::read_tail_bytes(t).expect("tail");
                    assert!(
                        now == copy.tail,
                        "round {round}: DTable {:06} holds a copy of {:06} at its tail offset \
                         that is not its tail",
                        h.meta.file_no,
                        t.meta.file_no
                    );
                    fresh += 1;
                }
            }
        }
    }
    let s = db.stats().lightweight;
    assert!(lv(&lwc(&ks)).deepest() >= 2, "{s:?}");
    assert!(fresh > 0 && stale > 0, "fresh {fresh}, stale {stale}");
    assert!(s.copies_gone <= s.copies_carried, "{s:?}");
    assert!(
        s.copies_used + s.stale_repairs + s.uncopied_reads >= s.appended_segments,
        "{s:?}"
    );
    assert!(s.tail_read_bytes > 0, "{s:?}");
    check_model(&ks, &model, "after the run");
}

/// The live entries of `model` from `from` on (forward) or up to it (backward), at most `n`.
fn model_scan(model: &Model, from: &[u8], forward: bool, n: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
    let live = |(k, v): (&Vec<u8>, &Option<Vec<u8>>)| v.clone().map(|v| (k.clone(), v));
    if forward {
        model
            .range(from.to_vec()..)
            .filter_map(live)
            .take(n)
            .collect()
    } else {
        model
            .range(..=from.to_vec())
            .rev()
            .filter_map(live)
            .take(n)
            .collect()
    }
}

/// Short scans from random keys (seek + `next`, and backward from a key) at the latest state
/// and at snapshots, against the model, in the benchmark's shape after random loads with
/// deletes: DTables of several segments, and routing ranges whose tables hold no segment
/// (their data went down a level), where a scan stands before the level's next group as a
/// bound (`Concat::lazy`) and must still find that group's keys when it reaches them.
#[test]
fn short_scans_across_segments_and_emptied_ranges_match_a_model_at_snapshots() {
    let fs = FaultFs::new(11);
    let ko = bench_shape();
    let mut model = Model::new();
    let (db, ks) = open_fault(&fs, &ko).expect("open");
    let mut snaps = Vec::new();
    for round in 0..10 {
        write_random(&ks, &mut model, round, 5000);
        // Tombstones over older versions: every 13th live key.
        let doomed: Vec<Vec<u8>> = model
            .iter()
            .filter(|(_, v)| v.is_some())
            .map(|(k, _)| k.clone())
            .step_by(13)
            .take(300)
            .collect();
        for k in doomed {
            ks.delete(&k).expect("delete");
            model.insert(k, None);
        }
        if round % 3 == 1 {
            snaps.push((db.snapshot(), model.clone()));
        }
    }
    db.wait_for_compactions().expect("compactions");
    let v = lwc(&ks);
    let (mut multi, mut emptied) = (0, 0);
    for level in &lv(&v).levels {
        for (i, t) in level.tables.iter().enumerate() {
            let segs = dtable::reader(t).expect("reader").tail.segments.len();
            multi += usize::from(segs > 1);
            let later_data = level.tables.iter().skip(i + 1).any(|n| n.meta.entries > 0);
            emptied += usize::from(t.meta.entries == 0 && later_data);
        }
    }
    assert!(
        multi > 0 && emptied > 0,
        "tables of several segments {multi}, emptied ranges {emptied}"
    );
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut rand = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    for i in 0..3000 {
        let from = format!("{:016x}", rand() >> 8).into_bytes();
        let n = 1 + (rand() % 24) as usize;
        let forward = rand() % 3 != 0;
        let which = (rand() % (snaps.len() as u64 + 1)) as usize;
        let (got, want): (Vec<(Vec<u8>, Vec<u8>)>, _) = match snaps.get(which) {
            Some((s, m)) => {
                let it = if forward {
                    s.range(&ks, from.clone()..)
                } else {
                    s.range(&ks, ..=from.clone())
                };
                let got = if forward {
                    it.take(n).map(|r| r.expect("scan")).collect()
                } else {
                    it.rev().take(n).map(|r| r.expect("scan")).collect()
                };
                (got, model_scan(m, &from, forward, n))
            }
            None => {
                let it = if forward {
                    ks.range(from.clone()..)
                } else {
                    ks.range(..=from.clone())
                };
                let got = if forward {
                    it.take(n).map(|r| r.expect("scan")).collect()
                } else {
                    it.rev().take(n).map(|r| r.expect("scan")).collect()
                };
                (got, model_scan(&model, &from, forward, n))
            }
        };
        assert!(
            got == want,
            "scan {i} from {} ({} {n}, snapshot {which} of {}): {} entries, model {}",
            String::from_utf8_lossy(&from),
            if forward { "forward" } else { "backward" },
            snaps.len(),
            got.len(),
            want.len()
        );
    }
    check_model(&ks, &model, "after the scans");
}
