//! Sealed WAL rotation (src/wal_chain.rs, docs/format.md "WAL seals"): the writer seals the
//! retired WAL and goes on without waiting for its sync, and recovery goes from one WAL to the
//! next only when the first ends with its seal naming the second. Each test builds the WALs a
//! crash could leave (bytes cut or files lost) and checks what recovery and `scree check` make
//! of them.

mod common;

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use scree::fs::Env;
use scree::testing::fault::{Fault, FaultError, FaultFs, OpKind};
use scree::{Db, Error, Keyspace, Layout, Options, WalRecovery, WriteOptions};

const DIR: &str = "/db";

fn opts(fs: &FaultFs) -> Options {
    let mut o = common::small_db();
    o.fs = Some(fs.as_dyn());
    o
}

fn open(o: Options) -> scree::Result<(Db, Keyspace)> {
    let db = Db::open(DIR, o)?;
    let ks = db.keyspace("k", common::small_ks(Layout::Leveled))?;
    Ok((db, ks))
}

/// A database on `fs` with leveled keyspaces `a` and `b`.
fn two_keyspaces(fs: &FaultFs) -> (Db, Keyspace, Keyspace) {
    let db = Db::open(DIR, opts(fs)).expect("open");
    let a = db
        .keyspace("a", common::small_ks(Layout::Leveled))
        .expect("a");
    let b = db
        .keyspace("b", common::small_ks(Layout::Leveled))
        .expect("b");
    (db, a, b)
}

/// Holds every sync of the file at `path` until the gate opens.
fn hold_syncs_of(fs: &FaultFs, path: &Path) -> scree::testing::fault::Gate {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .expect("file name");
    fs.pause(OpKind::Sync, name)
}

/// The WAL files, oldest first.
fn wals(fs: &FaultFs) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs
        .files()
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    v.sort();
    v
}

fn key(tag: &str, i: usize) -> Vec<u8> {
    format!("{tag}{i:03}").into_bytes()
}

/// Puts 4 KB values until there are `n` WAL files (the 64 KiB memtable rotates).
fn fill_until_wals(fs: &FaultFs, ks: &Keyspace, n: usize, tag: &str) -> usize {
    let mut i = 0;
    while wals(fs).len() < n {
        ks.put(key(tag, i), vec![7u8; 4000]).expect("fill");
        i += 1;
        assert!(i < 200, "the WAL never rotated");
    }
    i
}

/// Writes `a000..a004`, fills until the WAL rotates (`rotations` times, with `c…` keys after
/// the second), then `b000..b004` in the second WAL (`b000` synced when `sync_b`). Flushes
/// are held at their table's first write (after they synced the retired WALs), so every WAL
/// stays. Then the process is killed (the files keep every byte written).
fn build(fs: &FaultFs, rotations: usize, sync_b: bool) {
    let gate = fs.pause(OpKind::Write, ".sst");
    {
        let (_db, ks) = open(opts(fs)).expect("open");
        for i in 0..5 {
            ks.put(key("a", i), b"before").expect("put");
        }
        fill_until_wals(fs, &ks, 2, "fill");
        for i in 0..5 {
            let sync = sync_b && i == 0;
            ks.put_opt(key("b", i), b"after", &WriteOptions { sync })
                .expect("put");
        }
        if rotations > 1 {
            fill_until_wals(fs, &ks, 3, "more");
            for i in 0..5 {
                ks.put(key("c", i), b"third").expect("put");
            }
        }
        let held = gate.wait_until_held(Duration::from_secs(20));
        fs.freeze();
        gate.open();
        assert!(held > 0, "no flush was held");
    }
    fs.restart_after_kill();
}

/// Offset of WAL `path`'s seal record.
fn seal_offset(fs: &FaultFs, path: &Path) -> usize {
    let data = fs.file_bytes(path).expect("wal");
    let (recs, _) = scree::log::read_wal_records(&data);
    let mut pos = 0;
    for (ty, payload) in recs {
        if ty == scree::log::SEAL {
            return pos;
        }
        pos += scree::log::HEADER + payload.len();
    }
    panic!("{} has no seal", path.display());
}

/// Cuts WAL `path` just before its seal: what a power loss leaves when the retired WAL's last
/// bytes had not reached the disk while the next WAL's had.
fn cut_seal(fs: &FaultFs, path: &Path) {
    let at = seal_offset(fs, path);
    let mut data = fs.file_bytes(path).expect("wal");
    data.truncate(at);
    fs.set_file_bytes(path, data);
}

fn check(fs: &FaultFs) -> scree::check::Report {
    scree::check::check_dir(Path::new(DIR), fs.as_dyn()).expect("check")
}

/// `scree check` reports a problem in `file` whose detail contains `what`.
fn assert_check_reports(fs: &FaultFs, file: &Path, what: &str) {
    let rep = check(fs);
    assert!(
        rep.problems
            .iter()
            .any(|p| p.file == file && p.detail.contains(what)),
        "{:?}",
        rep.problems
    );
}

fn present(ks: &Keyspace, tag: &str) -> Vec<bool> {
    (0..5)
        .map(|i| ks.get(key(tag, i)).expect("get").is_some())
        .collect()
}

/// The writer does not sync the retired WAL at a rotation (doing so took 2.8 s of a 6.5 s fill
/// with 4 MiB memtables). With every WAL sync held, writes across a rotation must still
/// complete, while the retired WAL's sync waits on a background thread.
#[test]
fn the_writer_does_not_wait_for_the_retired_wals_sync() {
    let fs = FaultFs::new(1);
    let (db, ks) = open(opts(&fs)).expect("open");
    let gate = fs.pause(OpKind::Sync, ".log");
    let (tx, rx) = mpsc::channel();
    let writer = {
        let fs = fs.clone();
        let ks = ks.clone();
        std::thread::spawn(move || {
            fill_until_wals(&fs, &ks, 2, "fill");
            for i in 0..5 {
                ks.put(key("b", i), b"after").expect("put");
            }
            let _ = tx.send(());
        })
    };
    let done = rx.recv_timeout(Duration::from_secs(20));
    let held = gate.wait_until_held(Duration::from_secs(20));
    gate.open();
    writer.join().expect("writer");
    assert!(
        done.is_ok(),
        "the writes across a rotation waited for a WAL sync"
    );
    assert!(held > 0, "no WAL sync was pending on another thread");
    drop((ks, db));
}

/// The retired WAL lost its seal (and nothing else) while the next WAL's writes survived: the
/// history ends at the cut, the next WAL's writes (acknowledged without a sync) are dropped.
/// Replaying them would leave a hole if the cut had also taken writes before the seal.
#[test]
fn a_retired_wal_that_lost_its_seal_ends_the_history() {
    let fs = FaultFs::new(2);
    build(&fs, 1, false);
    let w = wals(&fs);
    assert_eq!(w.len(), 2, "{w:?}");
    cut_seal(&fs, &w[0]);
    let rep = check(&fs);
    assert!(rep.problems.is_empty(), "{:?}", rep.problems);
    assert!(
        rep.notes.iter().any(|n| n.contains("the history ends")
            && n.contains("no seal")
            && n.contains(&w[0].display().to_string())),
        "{:?}",
        rep.notes
    );
    let (_db, ks) = open(opts(&fs)).expect("reopen");
    assert_eq!(present(&ks, "a"), [true; 5]);
    assert_eq!(present(&ks, "b"), [false; 5], "writes after the hole");
    assert!(!fs.files().contains(&w[1]), "the dropped WAL is removed");
}

/// The same lost seal, but the next WAL records a completed sync: that sync synced the retired
/// WAL first, so its end was durable and is now missing. That is damage, not a crash: the
/// default recovery refuses; point-in-time recovery ends the history at the cut.
#[test]
fn a_completed_sync_after_a_lost_seal_is_corruption() {
    let fs = FaultFs::new(3);
    build(&fs, 1, true);
    let w = wals(&fs);
    cut_seal(&fs, &w[0]);
    let what = "records a completed sync";
    let rep = check(&fs);
    assert!(
        rep.problems.iter().any(|p| p.detail.contains(what)),
        "{:?}",
        rep.problems
    );
    match open(opts(&fs)) {
        Err(e @ Error::Corruption { .. }) => assert!(e.to_string().contains(what), "{e}"),
        Err(e) => panic!("expected Corruption, got {e}"),
        Ok(_) => panic!("opened with durable writes missing"),
    }
    assert_eq!(wals(&fs), w, "the refused open changed nothing");
    let mut pit = opts(&fs);
    pit.wal_recovery = WalRecovery::PointInTime;
    let (_db, ks) = open(pit).expect("point-in-time reopen");
    assert_eq!(present(&ks, "a"), [true; 5]);
    assert_eq!(present(&ks, "b"), [false; 5]);
}

/// Three WALs, the middle one lost (its directory entry had not reached the disk): the first
/// WAL's seal names it, so the history ends after the first, and the third WAL's writes are
/// dropped.
#[test]
fn a_seal_naming_a_lost_wal_ends_the_history_after_it() {
    let fs = FaultFs::new(4);
    build(&fs, 2, false);
    let w = wals(&fs);
    assert_eq!(w.len(), 3, "{w:?}");
    fs.as_dyn().remove(&w[1]).expect("remove");
    let rep = check(&fs);
    assert!(rep.problems.is_empty(), "{:?}", rep.problems);
    assert!(
        rep.notes.iter().any(|n| n.contains("which is missing")),
        "{:?}",
        rep.notes
    );
    let (_db, ks) = open(opts(&fs)).expect("reopen");
    assert_eq!(present(&ks, "a"), [true; 5]);
    assert_eq!(present(&ks, "b"), [false; 5]);
    assert_eq!(present(&ks, "c"), [false; 5], "writes after the lost WAL");
}

/// A manifest written before seals (no `sealed_logs_from`): its WALs were synced whole before
/// the next held writes, so one without a seal leads on to the next as before. The same files
/// under a manifest naming them sealed end the history at the missing seal.
#[test]
fn wals_before_the_first_sealed_one_need_no_seal() {
    for (sealed, b_kept) in [(false, true), (true, false)] {
        let fs = FaultFs::new(5);
        build(&fs, 1, false);
        let w = wals(&fs);
        cut_seal(&fs, &w[0]);
        rewrite_sealed_from(&fs, sealed);
        let (_db, ks) = open(opts(&fs)).expect("reopen");
        assert_eq!(present(&ks, "a"), [true; 5]);
        assert_eq!(present(&ks, "b"), [b_kept; 5], "sealed regime: {sealed}");
    }
}

/// Rewrites the current manifest with every edit's first sealed WAL removed (`sealed`: set to
/// the oldest WAL), as a valid new manifest named by `CURRENT`.
fn rewrite_sealed_from(fs: &FaultFs, sealed: bool) {
    use scree::manifest;
    let env = Env {
        fs: fs.as_dyn(),
        stats: std::sync::Arc::new(scree::stats::IoStats::default()),
        direct_reads: false,
        mmap_reads: false,
    };
    let dir = Path::new(DIR);
    let oldest: u64 = wals(fs)
        .first()
        .and_then(|p| p.file_stem()?.to_str()?.parse().ok())
        .expect("a WAL");
    let n = manifest::read_current(&env, dir).expect("CURRENT");
    let mut edits = manifest::read_manifest(&env, &manifest::manifest_path(dir, n)).expect("read");
    for e in &mut edits {
        e.sealed_logs_from = sealed.then_some(oldest);
    }
    let next = edits
        .iter()
        .filter_map(|e| e.next_file_no)
        .max()
        .expect("next file number");
    let mut first = edits.remove(0);
    first.next_file_no = Some(next + 1);
    let mut m = manifest::ManifestWriter::create(&env, dir, next, &first).expect("create");
    for e in &edits {
        let mut e = e.clone();
        e.next_file_no = e.next_file_no.map(|_| next + 1);
        m.append(&e).expect("append");
    }
}

/// A WAL's removal fails and leaves it on disk while later WALs are removed (a case the
/// `io_errors` tests reach). Were the removal decided from the memtables (an empty one moves
/// to the newest WAL at every rotation) while the manifest still names the old WAL as the
/// oldest a keyspace needs, recovery would replay the leftover, find its seal naming a removed
/// WAL, and refuse to open. A WAL the manifest still needs is kept, and a flush records the
/// newer log number of a keyspace without writes.
#[test]
fn a_wal_left_by_a_failed_removal_does_not_end_the_history() {
    let fs = FaultFs::new(6);
    {
        let (db, a, b) = two_keyspaces(&fs);
        b.put(b"b", b"1").expect("put");
        db.flush().expect("flush");
        // The first WAL removal fails; later ones succeed.
        let mut f = Fault::nth(Some(OpKind::Remove), 1).error(FaultError::Enospc);
        f.path_contains = Some(".log".into());
        fs.inject(f);
        // Each round rotates the 64 KiB memtable at least twice.
        for round in 0..4 {
            for i in 0..40 {
                a.put(key(&format!("r{round}-"), i), vec![7u8; 4000])
                    .expect("put");
            }
            db.flush().expect("flush");
        }
        a.put(b"last", b"1").expect("put");
        assert!(
            wals(&fs).len() <= 3,
            "a keyspace without writes keeps old WALs: {:?}",
            wals(&fs)
        );
    }
    let rep = check(&fs);
    assert!(rep.problems.is_empty(), "{:?}", rep.problems);
    let (_db, a, b) = two_keyspaces(&fs);
    assert_eq!(a.get(b"last").expect("get"), Some(b"1".to_vec()));
    assert_eq!(b.get(b"b").expect("get"), Some(b"1".to_vec()));
}

/// Two keyspaces: B's flush syncs the retired WAL W1 when it starts; while it writes its
/// table, A fills W2 (unsynced) and rotates to W3, and B's empty memtable moves to W3. B's
/// install then records B at W3 and A at W2: were W2 still unsynced, a power loss that took
/// W2's bytes (allowed: acknowledged without a sync) would leave recovery ending the history
/// at W2 below B's table, and it would refuse to open in every mode. So a flush's install
/// first syncs the WALs retired meanwhile.
#[test]
fn a_flush_installs_only_after_the_wals_retired_while_it_ran_are_synced() {
    let fs = FaultFs::new(11);
    let (db, a, b) = two_keyspaces(&fs);
    let w1 = wals(&fs)[0].clone();
    let sst = fs.pause(OpKind::Write, ".sst");
    for i in 0..5 {
        b.put(key("b", i), vec![1u8; 4000]).expect("put b");
    }
    let flusher = {
        let db = db.clone();
        std::thread::spawn(move || db.flush())
    };
    assert!(
        sst.wait_until_held(Duration::from_secs(20)) > 0,
        "B's flush held"
    );
    let w2 = wals(&fs)[1].clone();
    // Every sync of W2 is held: A's flush, and B's install if it waits for W2.
    let w2_sync = hold_syncs_of(&fs, &w2);
    fill_until_wals(&fs, &a, 3, "a");
    sst.open();
    // With the bug, B's install went through here and removed W1.
    let t = std::time::Instant::now();
    while fs.files().contains(&w1) && t.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(10));
    }
    fs.freeze();
    w2_sync.open();
    let _ = flusher.join();
    drop((a, b, db));
    fs.crash(scree::testing::fault::CrashMode::Drop);
    let rep = check(&fs);
    assert!(rep.problems.is_empty(), "{:?}", rep.problems);
    let db = Db::open(DIR, opts(&fs)).expect("reopen after a power loss");
    let b = db
        .keyspace("b", common::small_ks(Layout::Leveled))
        .expect("b");
    assert_eq!(present(&b, "b"), [true; 5]);
}

/// A file system that holds the first directory sync after `arm` until `release`.
struct DirGate {
    inner: FaultFs,
    armed: std::sync::atomic::AtomicBool,
    held: std::sync::atomic::AtomicU64,
    open: std::sync::Mutex<bool>,
    cv: std::sync::Condvar,
}

impl DirGate {
    fn release(&self) {
        *self.open.lock().expect("lock") = true;
        self.cv.notify_all();
    }
}

struct DirGated(std::sync::Arc<DirGate>);

impl scree::fs::FileSystem for DirGated {
    fn create(&self, path: &Path) -> std::io::Result<Box<dyn scree::fs::WritableFile>> {
        self.0.inner.create(path)
    }
    fn create_log(&self, path: &Path) -> std::io::Result<Box<dyn scree::fs::WritableFile>> {
        self.0.inner.create_log(path)
    }
    fn open(
        &self,
        path: &Path,
        direct: bool,
    ) -> std::io::Result<std::sync::Arc<dyn scree::fs::ReadableFile>> {
        self.0.inner.open(path, direct)
    }
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        self.0.inner.rename(from, to)
    }
    fn remove(&self, path: &Path) -> std::io::Result<()> {
        self.0.inner.remove(path)
    }
    fn list(&self, dir: &Path) -> std::io::Result<Vec<String>> {
        self.0.inner.list(dir)
    }
    fn create_dir_all(&self, dir: &Path) -> std::io::Result<()> {
        self.0.inner.create_dir_all(dir)
    }
    fn sync_dir(&self, dir: &Path) -> std::io::Result<()> {
        use std::sync::atomic::Ordering;
        if self.0.armed.swap(false, Ordering::SeqCst) {
            self.0.held.fetch_add(1, Ordering::SeqCst);
            let mut g = self.0.open.lock().expect("lock");
            while !*g {
                g = self.0.cv.wait(g).expect("wait");
            }
        }
        self.0.inner.sync_dir(dir)
    }
    fn sync_file(&self, path: &Path) -> std::io::Result<()> {
        self.0.inner.sync_file(path)
    }
    fn exists(&self, path: &Path) -> bool {
        self.0.inner.exists(path)
    }
    fn file_size(&self, path: &Path) -> std::io::Result<u64> {
        self.0.inner.file_size(path)
    }
    fn lock(&self, path: &Path) -> std::io::Result<Box<dyn scree::fs::FileLock>> {
        self.0.inner.lock(path)
    }
}

/// A synced write waits for a directory sync that another thread has started. Were the flag
/// saying a new WAL's directory entry is not durable cleared before the directory sync ran, a
/// synced write made meanwhile (its WAL's entry still not durable) would be acknowledged, and
/// a power loss before that sync completed would lose it silently.
#[test]
fn a_synced_write_waits_for_the_directory_sync_another_thread_started() {
    use std::sync::atomic::Ordering;
    let fs = FaultFs::new(12);
    let gate = std::sync::Arc::new(DirGate {
        inner: fs.clone(),
        armed: std::sync::atomic::AtomicBool::new(false),
        held: std::sync::atomic::AtomicU64::new(0),
        open: std::sync::Mutex::new(false),
        cv: std::sync::Condvar::new(),
    });
    let mut o = common::small_db();
    o.fs = Some(std::sync::Arc::new(DirGated(gate.clone())));
    let (db, k) = open(o).expect("open");
    let w1 = wals(&fs)[0].clone();
    // The first flush is held at the retired W1's sync, before its directory sync.
    let w1_sync = hold_syncs_of(&fs, &w1);
    fill_until_wals(&fs, &k, 2, "k");
    assert!(w1_sync.wait_until_held(Duration::from_secs(20)) > 0);
    // A keyspace creation's manifest edit starts the directory sync, which is held.
    gate.armed.store(true, Ordering::SeqCst);
    let creator = {
        let db = db.clone();
        std::thread::spawn(move || {
            db.keyspace("new", common::small_ks(Layout::Leveled))
                .map(|_| ())
        })
    };
    let t = std::time::Instant::now();
    while gate.held.load(Ordering::SeqCst) == 0 {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "no directory sync held"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    w1_sync.open();
    let (tx, rx) = mpsc::channel();
    let writer = {
        let k = k.clone();
        std::thread::spawn(move || {
            let r = k.put_opt("synced", b"yes", &WriteOptions { sync: true });
            let _ = tx.send(());
            r
        })
    };
    let acked_early = rx.recv_timeout(Duration::from_millis(500)).is_ok();
    gate.release();
    creator.join().expect("creator").expect("keyspace");
    writer.join().expect("writer").expect("synced put");
    assert!(
        !acked_early,
        "a synced write was acknowledged while its WAL's directory entry was not durable"
    );
    fs.freeze();
    drop((k, db));
    fs.crash(scree::testing::fault::CrashMode::Drop);
    let (_db, k) = open(opts(&fs)).expect("reopen");
    assert_eq!(k.get("synced").expect("get"), Some(b"yes".to_vec()));
}

/// Where the history ends below a table that holds later writes, recovery refuses to open (no
/// point in time is consistent) and `scree check` reports it as a problem, not only a note
/// (the review found check silent there).
#[test]
fn check_reports_a_table_ahead_of_the_end_of_the_history() {
    let fs = FaultFs::new(13);
    {
        let (db, a, b) = two_keyspaces(&fs);
        a.put(b"a0", b"1").expect("put");
        // B fills past its buffer: it alone rotates the WAL and is flushed, while A's write
        // stays in the first WAL.
        fill_until_wals(&fs, &b, 2, "b");
        db.wait_for_compactions().expect("wait");
        fs.freeze();
    }
    fs.restart_after_kill();
    let w = wals(&fs);
    assert_eq!(w.len(), 2, "{w:?}");
    // The first WAL keeps only its first record (A's write): a crash's cut, below B's table.
    let data = fs.file_bytes(&w[0]).expect("wal");
    let (recs, _) = scree::log::read_wal_records(&data);
    let first = scree::log::HEADER + recs[0].1.len();
    fs.set_file_bytes(&w[0], data[..first].to_vec());
    let what = "already holds later writes";
    let rep = check(&fs);
    assert!(
        rep.problems.iter().any(|p| p.detail.contains(what)),
        "{:?} / {:?}",
        rep.problems,
        rep.notes
    );
    match Db::open(DIR, opts(&fs)) {
        Err(e @ Error::Corruption { .. }) => assert!(e.to_string().contains(what), "{e}"),
        Err(e) => panic!("expected Corruption, got {e}"),
        Ok(_) => panic!("opened with a table ahead of the history"),
    }
}

/// The newest WAL the manifest names (here the open's first, as no flush finished) is gone, as
/// when a database directory is copied without its WAL files: recovery used to open without its
/// writes and say nothing. Now it is `Corruption` naming that WAL (read-only opens and
/// `scree check` too); point-in-time recovery opens with the history ending before it, and
/// drops the later WAL rather than replaying it after the gap.
#[test]
fn a_database_without_the_newest_wal_its_manifest_names_is_corruption() {
    let fs = FaultFs::new(6);
    build(&fs, 1, false);
    let w = wals(&fs);
    assert_eq!(w.len(), 2, "{w:?}");
    fs.as_dyn().remove(&w[0]).expect("remove");
    let what = "is missing, but the manifest names it";
    assert_check_reports(&fs, &w[0], what);
    let mut read_only = opts(&fs);
    read_only.read_only = true;
    for o in [opts(&fs), read_only] {
        match open(o) {
            Err(Error::Corruption {
                file,
                offset,
                detail,
            }) => {
                assert_eq!((file, offset), (w[0].clone(), 0));
                assert!(detail.contains(what), "{detail}");
            }
            Err(e) => panic!("expected Corruption, got {e}"),
            Ok(_) => panic!("opened without the WAL holding the newest writes"),
        }
    }
    assert_eq!(
        wals(&fs),
        vec![w[1].clone()],
        "the refused opens changed nothing"
    );
    let mut pit = opts(&fs);
    pit.wal_recovery = WalRecovery::PointInTime;
    {
        let mut o = pit.clone();
        o.read_only = true;
        let (_db, ks) = open(o).expect("point-in-time read-only open");
        assert_eq!(
            present(&ks, "b"),
            [false; 5],
            "read-only: after the lost WAL"
        );
    }
    {
        let (_db, ks) = open(pit).expect("point-in-time reopen");
        assert_eq!(present(&ks, "a"), [false; 5], "in the lost WAL");
        assert_eq!(present(&ks, "b"), [false; 5], "after the lost WAL");
        ks.put(b"new", b"1").expect("put");
    }
    assert!(
        !fs.files().contains(&w[1]),
        "the WAL after the gap is removed"
    );
    let (_db, ks) = open(opts(&fs)).expect("a default open afterwards");
    assert_eq!(ks.get(b"new").expect("get").as_deref(), Some(&b"1"[..]));
    assert_eq!(present(&ks, "b"), [false; 5]);
}

/// An open whose recovered writes span two WALs flushes them before it returns. On a full disk
/// that flush fails: the open returns the error, a read-only open still reads everything, and
/// once space is back a normal open recovers every write.
#[test]
fn an_open_whose_recovered_flush_fails_returns_the_error_and_loses_nothing() {
    let fs = FaultFs::new(7);
    for round in 0..2 {
        let (_db, ks) = open(opts(&fs)).expect("open");
        for i in 0..5 {
            ks.put(key(if round == 0 { "a" } else { "b" }, i), b"v")
                .expect("put");
        }
    }
    assert_eq!(wals(&fs).len(), 2, "one WAL per open, each with writes");
    fs.inject(Fault {
        path_contains: Some(".sst".into()),
        ..Fault::nth(Some(OpKind::Create), 1)
            .persistent()
            .error(FaultError::Enospc)
    });
    match open(opts(&fs)) {
        Err(Error::BackgroundError(m)) => assert!(m.contains("flush"), "{m}"),
        Err(e) => panic!("expected the flush's error, got {e}"),
        Ok(_) => panic!("the open's flush cannot have succeeded"),
    }
    let mut ro = opts(&fs);
    ro.read_only = true;
    {
        let (_db, ks) = open(ro).expect("read-only open on a full disk");
        assert_eq!(present(&ks, "a"), [true; 5]);
        assert_eq!(present(&ks, "b"), [true; 5]);
    }
    fs.clear_faults();
    let (_db, ks) = open(opts(&fs)).expect("open with space again");
    assert_eq!(present(&ks, "a"), [true; 5]);
    assert_eq!(present(&ks, "b"), [true; 5]);
    drop(ks);
    drop(_db);
    assert!(wals(&fs).len() <= 2, "{:?}", wals(&fs));
}

/// Keyspace `a` wrote into the first WAL and went idle; `b` filled later WALs and flushed, so
/// the first WAL is not the newest the manifest names, but `a`'s log number still names it.
/// Removed by hand (as the removal trials of `scripts/wal_damage_crosscheck.py` do), its
/// writes would be lost with no error unless recovery knew `a` still needs it. Since every open
/// records each keyspace's first still-needed WAL (feature bit 4), recovery refuses;
/// point-in-time recovery refuses too, as `b`'s table holds writes from after the end of the
/// history.
#[test]
fn a_wal_an_idle_keyspace_still_needs_removed_is_corruption() {
    let fs = FaultFs::new(8);
    {
        let (db, a, b) = two_keyspaces(&fs);
        for i in 0..5 {
            a.put(key("a", i), b"idle").expect("put");
        }
        fill_until_wals(&fs, &b, 2, "b");
        db.wait_for_compactions().expect("wait");
        b.put(b"after", b"1").expect("put");
    }
    let w = wals(&fs);
    assert!(w.len() >= 2, "{w:?}");
    let rep = check(&fs);
    assert!(rep.problems.is_empty(), "{:?}", rep.problems);
    fs.as_dyn().remove(&w[0]).expect("remove");
    let what = "keyspace \"a\" needs it";
    assert_check_reports(&fs, &w[0], what);
    match Db::open(DIR, opts(&fs)) {
        Err(Error::Corruption { file, detail, .. }) => {
            assert_eq!(file, w[0]);
            assert!(detail.contains(what), "{detail}");
        }
        Err(e) => panic!("expected Corruption, got {e}"),
        Ok(_) => panic!("opened without the WAL keyspace a needs"),
    }
    let mut pit = opts(&fs);
    pit.wal_recovery = WalRecovery::PointInTime;
    let before: Vec<Option<Vec<u8>>> = w.iter().map(|p| fs.file_bytes(p)).collect();
    match Db::open(DIR, pit) {
        Err(Error::Corruption { detail, .. }) => {
            assert!(detail.contains("no consistent point in time"), "{detail}")
        }
        Err(e) => panic!("expected Corruption, got {e}"),
        Ok(_) => panic!("a point in time without a's writes but with b's later table"),
    }
    // The refused open changed nothing (it must not empty the later WALs first).
    let after: Vec<Option<Vec<u8>>> = w.iter().map(|p| fs.file_bytes(p)).collect();
    assert!(
        before == after,
        "a refused point-in-time open changed a WAL"
    );
}

/// A database copied without any WAL: point-in-time recovery opens it with what its tables
/// hold (were every table counted as holding later writes when nothing is replayed, it would
/// refuse, although its message says it opens).
#[test]
fn point_in_time_opens_a_database_copied_without_its_wals() {
    let fs = FaultFs::new(9);
    {
        let (db, ks) = open(opts(&fs)).expect("open");
        for i in 0..5 {
            ks.put(key("a", i), b"flushed").expect("put");
        }
        db.flush().expect("flush");
        for i in 0..5 {
            ks.put(key("b", i), b"in the WAL").expect("put");
        }
    }
    for w in wals(&fs) {
        fs.as_dyn().remove(&w).expect("remove");
    }
    assert!(matches!(open(opts(&fs)), Err(Error::Corruption { .. })));
    let mut pit = opts(&fs);
    pit.wal_recovery = WalRecovery::PointInTime;
    let (_db, ks) = open(pit).expect("point-in-time open without WALs");
    assert_eq!(present(&ks, "a"), [true; 5]);
    assert_eq!(present(&ks, "b"), [false; 5]);
}
