//! Review scratch tests for the WAL seal change (311c381, 5cdbbc9). Each test demonstrates a
//! hole: it asserts the guarantee of docs/reliability.md and fails on the current code.

mod common;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use scree::fs::fault::{CrashMode, FaultFs, OpKind};
use scree::fs::{FileLock, FileSystem, ReadableFile, WritableFile};
use scree::{Db, Layout, Options, WriteOptions};

const DIR: &str = "/db";

fn opts_on(fs: Arc<dyn FileSystem>) -> Options {
    let mut o = common::small_db();
    o.fs = Some(fs);
    o
}

fn wals(fs: &FaultFs) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs
        .files()
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    v.sort();
    v
}

fn name(p: &Path) -> String {
    p.file_name().unwrap().to_string_lossy().into_owned()
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < Duration::from_secs(20), "timed out: {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Two keyspaces. B's flush (of its memtable in W1) synced the retired W1 and is slow to write
/// its table; meanwhile A fills W2 (unsynced) and rotates to W3, and B's memtable, empty, moves
/// to W3. B's flush then records B's log number W3 and (advanced_log_numbers) A's W2. A power
/// loss takes W2's unsynced bytes (acknowledged without sync: may be lost). Recovery ends the
/// history at W2 (no seal) and then refuses to open: keyspace B "already holds later writes"
/// (its table's sequence numbers are above `replayed_max`, which is 0 as W2 lost everything),
/// although B's table holds only writes older than everything in W2.
#[test]
fn review_idle_keyspace_log_number_then_power_loss_refuses_open() {
    let fs = FaultFs::new(11);
    let o = opts_on(fs.as_dyn());
    let db = Db::open(DIR, o.clone()).expect("open");
    let a = db.keyspace("a", common::small_ks(Layout::Leveled)).expect("a");
    let b = db.keyspace("b", common::small_ks(Layout::Leveled)).expect("b");
    assert_eq!(wals(&fs).len(), 1);
    let w1 = wals(&fs)[0].clone();
    let sst = fs.pause(OpKind::Write, ".sst");
    let mut i = 0;
    while wals(&fs).len() < 2 {
        b.put(format!("b{i:04}"), vec![1u8; 4000]).expect("put b");
        i += 1;
    }
    assert!(sst.wait_until_held(Duration::from_secs(20)) > 0, "B's flush held");
    let w2 = wals(&fs)[1].clone();
    // A's own flush (which would sync W2) is held at W2's sync.
    let w2_sync = fs.pause(OpKind::Sync, &name(&w2));
    let mut j = 0;
    while wals(&fs).len() < 3 {
        a.put(format!("a{j:04}"), vec![2u8; 4000]).expect("put a");
        j += 1;
    }
    assert!(w2_sync.wait_until_held(Duration::from_secs(20)) > 0, "A's flush held at W2 sync");
    sst.open();
    // B's flush installs: its edit removes W1.
    wait_for("B's flush installed", || !fs.files().contains(&w1));
    // Power loss.
    fs.freeze();
    w2_sync.open();
    drop((a, b, db));
    fs.crash(CrashMode::Drop);
    let rep = scree::check::check_dir(Path::new(DIR), fs.as_dyn()).expect("check");
    eprintln!("check problems: {:?}\ncheck notes: {:?}", rep.problems, rep.notes);
    let db = Db::open(DIR, o).expect("reopen after a mere power loss");
    let b = db.keyspace("b", common::small_ks(Layout::Leveled)).expect("b");
    assert!(b.get(format!("b{:04}", 0)).expect("get").is_some());
}

/// A file system that holds the first `sync_dir` after `arm()` until `release()`.
struct DirGate {
    inner: FaultFs,
    armed: AtomicBool,
    held: AtomicU64,
    open: Mutex<bool>,
    cv: Condvar,
}

impl DirGate {
    fn release(&self) {
        *self.open.lock().unwrap() = true;
        self.cv.notify_all();
    }
}

struct Gated(Arc<DirGate>);

impl FileSystem for Gated {
    fn create(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        self.0.inner.create(path)
    }
    fn create_log(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        self.0.inner.create_log(path)
    }
    fn open(&self, path: &Path, direct: bool) -> io::Result<Arc<dyn ReadableFile>> {
        self.0.inner.open(path, direct)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.0.inner.rename(from, to)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        self.0.inner.remove(path)
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        self.0.inner.list(dir)
    }
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.0.inner.create_dir_all(dir)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        if self.0.armed.swap(false, Ordering::SeqCst) {
            self.0.held.fetch_add(1, Ordering::SeqCst);
            let mut g = self.0.open.lock().unwrap();
            while !*g {
                g = self.0.cv.wait(g).unwrap();
            }
        }
        self.0.inner.sync_dir(dir)
    }
    fn sync_file(&self, path: &Path) -> io::Result<()> {
        self.0.inner.sync_file(path)
    }
    fn exists(&self, path: &Path) -> bool {
        self.0.inner.exists(path)
    }
    fn file_size(&self, path: &Path) -> io::Result<u64> {
        self.0.inner.file_size(path)
    }
    fn lock(&self, path: &Path) -> io::Result<Box<dyn FileLock>> {
        self.0.inner.lock(path)
    }
}

/// `sync_wal_dir` clears `wal_dir_unsynced` before its directory sync completes. A synced write
/// whose `sync_old_logs` runs meanwhile sees the flag clear and acknowledges, with the new WAL's
/// directory entry not durable. Here the in-flight directory sync is a keyspace creation's
/// `log_edit` (any flush or compaction install does the same); a power loss before it completes
/// loses the WAL holding the synced write, silently (the retired WAL's seal names a missing
/// WAL, which is the newest-WAL case).
#[test]
fn review_synced_write_acked_while_another_thread_syncs_the_directory() {
    let fs = FaultFs::new(12);
    let gate = Arc::new(DirGate {
        inner: fs.clone(),
        armed: AtomicBool::new(false),
        held: AtomicU64::new(0),
        open: Mutex::new(false),
        cv: Condvar::new(),
    });
    let o = opts_on(Arc::new(Gated(gate.clone())));
    let db = Db::open(DIR, o).expect("open");
    let k = db.keyspace("k", common::small_ks(Layout::Leveled)).expect("k");
    let w1 = wals(&fs)[0].clone();
    // The flush of the first memtable is held at the retired W1's sync (inside sync_old_logs,
    // before its sync_wal_dir).
    let w1_sync = fs.pause(OpKind::Sync, &name(&w1));
    let mut i = 0;
    while wals(&fs).len() < 2 {
        k.put(format!("k{i:04}"), vec![3u8; 4000]).expect("put");
        i += 1;
    }
    assert!(w1_sync.wait_until_held(Duration::from_secs(20)) > 0);
    // A keyspace creation: its log_edit clears the flag and its directory sync is held.
    gate.armed.store(true, Ordering::SeqCst);
    let creator = {
        let db = db.clone();
        std::thread::spawn(move || {
            db.keyspace("new", common::small_ks(Layout::Leveled))
                .map(|_| ())
        })
    };
    wait_for("the creation's directory sync held", || {
        gate.held.load(Ordering::SeqCst) == 1
    });
    w1_sync.open();
    // A synced write: acknowledged although no directory sync completed since W2 was created.
    k.put_opt("synced", b"yes", &WriteOptions { sync: true })
        .expect("synced put");
    // Power loss before the held directory sync completes.
    fs.freeze();
    gate.release();
    let _ = creator.join();
    drop((k, db));
    fs.crash(CrashMode::Drop);
    let db = Db::open(DIR, opts_on(fs.as_dyn())).expect("reopen");
    let k = db.keyspace("k", common::small_ks(Layout::Leveled)).expect("k");
    assert_eq!(
        k.get("synced").expect("get").map(|v| v.to_vec()),
        Some(b"yes".to_vec()),
        "a write acknowledged with sync=true was lost"
    );
}
