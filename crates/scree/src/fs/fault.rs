//! An in-memory, fault-injecting [`FileSystem`] for crash and I/O-error tests.
//!
//! [`FaultFs`] keeps every file in memory and models what survives a power loss:
//!
//! * each file (an *inode*) has its written bytes and the length that was last made durable by
//!   [`WritableFile::sync`];
//! * the namespace (path → inode) exists twice: the *live* one every operation sees, and the
//!   *durable* one, updated for a directory's entries only by [`FileSystem::sync_dir`]. Creates,
//!   renames and removes not covered by a directory sync are forgotten by a crash (directories
//!   themselves are durable as soon as they are created);
//! * [`FaultFs::crash`] replaces the live state by the durable one, cutting every file back to its
//!   synced length and then treating the unsynced bytes as [`CrashMode`] says (dropped, a random
//!   prefix kept, zero-filled, or garbage). Bytes appended to a file reopened with
//!   [`FileSystem::reopen_for_append`] are unsynced bytes like any others: a crash before the
//!   writer's sync treats them so, and never touches the bytes before them.
//!
//! Directory entries: by default a crash loses *all* of a directory's namespace changes since
//! its last [`FileSystem::sync_dir`] together, as if the directory were written back in one
//! piece. [`FaultFs::with_dir_entries_out_of_order`] (or
//! [`FaultFs::set_dir_entries_out_of_order`]) models file systems that write directory-entry
//! changes back independently and out of order before the directory's fsync: each unsynced
//! namespace change then survives a crash on its own with probability 1/2, drawn from the
//! fs's seeded generator (deterministic; [`FaultFs::reseed`] sets it). A change is one
//! operation: a `create` (the name now points at the new file), a `remove` (the name is gone),
//! or a `rename`, which is atomic (both the source removed and the target pointing at the
//! file, or neither). The surviving changes are applied in their original order on top of the
//! durable namespace, so every name ends in one of the states it had since the last sync (the
//! state the last surviving change touching it left, or its durable one). A surviving rename
//! whose source's `create` did not survive still puts the file at the target; one whose source
//! was renamed there by a change that did not survive leaves the file under both names (like a
//! hard link). A `sync_dir` makes durable the part of each change that is in that directory
//! (the other half of a rename across directories stays pending). Only changes made while the
//! setting is on are recorded; [`FaultFs::dir_changes_at_last_crash`] lists what the last crash
//! kept and lost.
//!
//! Faults: [`FaultFs::inject`] makes the Nth operation of a kind (or of any kind) fail with `EIO`
//! or `ENOSPC`, once or persistently, optionally as a short write (half the bytes land, then the
//! error). [`FaultFs::freeze_at_op`] makes the fs "lose power" just before operation N: that
//! operation and every later one fail and change nothing, so a following [`FaultFs::crash`] sees
//! the state exactly as it was before operation N.
//!
//! The lock is honoured: a second [`FileSystem::lock`] of the same path fails with `WouldBlock`
//! until the first guard is dropped, so two `Db`s cannot open the same fake directory.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use super::{FileLock, FileSystem, ReadableFile, WritableFile};

/// The kinds of operation the fault layer counts and can fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OpKind {
    /// `create` (a new or truncated file).
    Create,
    /// `open` for reading (also the open inside `read_all`), and `reopen_for_append`.
    Open,
    /// `read_at`.
    Read,
    /// `append` or `flush` of a writable file.
    Write,
    /// `sync` of a writable file.
    Sync,
    /// `sync_dir`.
    SyncDir,
    /// `rename`.
    Rename,
    /// `remove`.
    Remove,
    /// `list`.
    List,
    /// `create_dir_all`.
    Mkdir,
}

impl OpKind {
    /// Every kind.
    pub const ALL: [OpKind; 10] = [
        OpKind::Create,
        OpKind::Open,
        OpKind::Read,
        OpKind::Write,
        OpKind::Sync,
        OpKind::SyncDir,
        OpKind::Rename,
        OpKind::Remove,
        OpKind::List,
        OpKind::Mkdir,
    ];
    /// Whether the operation changes state (reads, opens and lists do not).
    pub fn is_mutation(self) -> bool {
        !matches!(self, OpKind::Open | OpKind::Read | OpKind::List)
    }
}

/// The error an injected fault returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultError {
    /// `EIO`.
    Eio,
    /// `ENOSPC`.
    Enospc,
}

impl FaultError {
    fn to_io(self, what: &str) -> io::Error {
        let errno = match self {
            FaultError::Eio => libc::EIO,
            FaultError::Enospc => libc::ENOSPC,
        };
        let os = io::Error::from_raw_os_error(errno);
        io::Error::new(os.kind(), format!("injected fault on {what}: {os}"))
    }
}

/// One fault to inject.
#[derive(Debug, Clone)]
pub struct Fault {
    /// Which operations count (`None`: every kind).
    pub kind: Option<OpKind>,
    /// Only operations on paths containing this string count (`None`: every path).
    pub path_contains: Option<String>,
    /// The first failing operation is the `nth` matching one from now (1-based).
    pub nth: u64,
    /// The error returned.
    pub error: FaultError,
    /// Keep failing every later matching operation (until [`FaultFs::clear_faults`]).
    pub persistent: bool,
    /// A failing `append` first writes the first half of its bytes (a short write).
    pub short_write: bool,
}

impl Fault {
    /// Fails the `nth` operation of `kind` (`None`: of any kind) once with `EIO`.
    pub fn nth(kind: Option<OpKind>, nth: u64) -> Fault {
        Fault {
            kind,
            path_contains: None,
            nth,
            error: FaultError::Eio,
            persistent: false,
            short_write: false,
        }
    }
    /// The same fault, persistent.
    pub fn persistent(mut self) -> Fault {
        self.persistent = true;
        self
    }
    /// The same fault with another error.
    pub fn error(mut self, e: FaultError) -> Fault {
        self.error = e;
        self
    }
    /// The same fault, as a short write on appends.
    pub fn short(mut self) -> Fault {
        self.short_write = true;
        self
    }
}

/// What a crash does with the bytes of a file beyond its synced length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashMode {
    /// Unsynced bytes are lost.
    Drop,
    /// A random prefix of the unsynced bytes survives.
    KeepPartial,
    /// The file keeps a random part of its unsynced length, but those bytes read as zeros.
    ZeroTail,
    /// The file keeps a random part of its unsynced length, filled with random bytes.
    GarbageTail,
    /// A random number of whole unsynced appends survives (the file size persisted at a write
    /// boundary, as when `i_size` reached the disk with the data of earlier writes only).
    KeepWholeWrites,
    /// The unsynced bytes survive except in one stale page: from a random unsynced offset to
    /// the next 4 KiB boundary they read as zeros. That page reached the disk before later
    /// appends filled it, and later pages reached it whole (write-back out of order).
    PagesOutOfOrder,
}

impl CrashMode {
    /// Every mode.
    pub const ALL: [CrashMode; 6] = [
        CrashMode::Drop,
        CrashMode::KeepPartial,
        CrashMode::ZeroTail,
        CrashMode::GarbageTail,
        CrashMode::KeepWholeWrites,
        CrashMode::PagesOutOfOrder,
    ];
}

/// One namespace change not yet covered by a directory sync (out-of-order mode only).
#[derive(Clone)]
struct DirChange {
    /// For reports: `create /d/a`, `rename /d/a -> /d/b`, `remove /d/a`.
    what: String,
    /// What the change did to each name, applied in order when it survives: the inode the name
    /// points at afterwards, or `None` when the name is gone.
    names: Vec<(PathBuf, Option<u64>)>,
}

/// Counters of what the fault layer did (for the figures in docs/reliability.md).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultStats {
    /// Operations counted.
    pub ops: u64,
    /// Faults injected (operations failed by a rule).
    pub faults: u64,
    /// Crashes simulated.
    pub crashes: u64,
}

#[derive(Default)]
struct Inode {
    data: Vec<u8>,
    synced: usize,
    /// File lengths after each append since the last sync.
    boundaries: Vec<usize>,
}

type InodeRef = Arc<RwLock<Inode>>;

struct Rule {
    fault: Fault,
    seen: u64,
    fired: bool,
}

#[derive(Default)]
struct State {
    /// Bumped by every crash; handles of an older epoch fail.
    epoch: u64,
    next_ino: u64,
    inodes: HashMap<u64, InodeRef>,
    live: BTreeMap<PathBuf, u64>,
    durable: BTreeMap<PathBuf, u64>,
    dirs: BTreeSet<PathBuf>,
    rules: Vec<Rule>,
    /// Power is lost at this operation count (1-based) and stays lost until the next crash.
    freeze_at: Option<u64>,
    frozen: bool,
    ops: u64,
    faults: u64,
    crashes: u64,
    per_kind: BTreeMap<OpKind, u64>,
    /// Every path ever created (for tests checking that a scenario reached a code path).
    created: BTreeSet<PathBuf>,
    /// Operation log, when tracing.
    trace: Option<Vec<String>>,
    rng: u64,
    /// Whether unsynced namespace changes survive a crash independently (see the module docs).
    dir_out_of_order: bool,
    /// The unsynced namespace changes, oldest first (recorded only when `dir_out_of_order`).
    pending: Vec<DirChange>,
    /// What the last crash did with each pending change: (description, survived).
    last_crash_dir: Vec<(String, bool)>,
}

impl State {
    fn rand(&mut self) -> u64 {
        // splitmix64 (every output bit is well mixed, low bits included)
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Counts one operation and decides whether it fails. `Ok(false)` = proceed normally,
    /// `Ok(true)` = fail as a short write, `Err` = fail.
    fn check(&mut self, kind: OpKind, path: &Path) -> Result<bool, io::Error> {
        if self.frozen {
            return Err(io::Error::other(format!(
                "power lost ({kind:?} on {})",
                path.display()
            )));
        }
        self.ops += 1;
        *self.per_kind.entry(kind).or_insert(0) += 1;
        if self.freeze_at.is_some_and(|n| self.ops >= n) {
            self.frozen = true;
            return Err(io::Error::other(format!(
                "power lost ({kind:?} on {})",
                path.display()
            )));
        }
        let p = path.to_string_lossy();
        let mut fail = None;
        for r in &mut self.rules {
            let f = &r.fault;
            if f.kind.is_some_and(|k| k != kind) {
                continue;
            }
            if f.path_contains.as_deref().is_some_and(|s| !p.contains(s)) {
                continue;
            }
            r.seen += 1;
            let hit = if f.persistent {
                r.seen >= f.nth
            } else {
                r.seen == f.nth && !r.fired
            };
            if hit && fail.is_none() {
                r.fired = true;
                fail = Some((f.error, f.short_write));
            }
        }
        if let Some(t) = self.trace.as_mut() {
            let what = if fail.is_some() { " FAIL" } else { "" };
            t.push(format!("{} {kind:?} {p}{what}", self.ops));
        }
        match fail {
            None => Ok(false),
            Some((e, short)) => {
                self.faults += 1;
                if short && kind == OpKind::Write {
                    return Ok(true);
                }
                Err(e.to_io(&format!("{kind:?} {}", path.display())))
            }
        }
    }

    fn fault_error(&self, path: &Path) -> io::Error {
        // The error of a short write (the rule that fired is the last fired one).
        let e = self
            .rules
            .iter()
            .rev()
            .find(|r| r.fired)
            .map_or(FaultError::Eio, |r| r.fault.error);
        e.to_io(&format!("short write {}", path.display()))
    }

    fn new_inode(&mut self) -> (u64, InodeRef) {
        self.next_ino += 1;
        let ino = self.next_ino;
        let r: InodeRef = Arc::new(RwLock::new(Inode::default()));
        self.inodes.insert(ino, r.clone());
        (ino, r)
    }

    fn gc(&mut self) {
        let pending = self
            .pending
            .iter()
            .flat_map(|c| c.names.iter().filter_map(|(_, i)| *i));
        let used: HashSet<u64> = self
            .live
            .values()
            .chain(self.durable.values())
            .copied()
            .chain(pending)
            .collect();
        self.inodes.retain(|k, _| used.contains(k));
    }

    /// Records a namespace change for an out-of-order crash (nothing in the default mode).
    fn record(&mut self, what: String, names: Vec<(PathBuf, Option<u64>)>) {
        if self.dir_out_of_order {
            self.pending.push(DirChange { what, names });
        }
    }

    /// Forgets the pending changes of the names `made_durable` selects: they are durable now.
    fn settle(&mut self, made_durable: impl Fn(&Path) -> bool) {
        for c in &mut self.pending {
            c.names.retain(|(p, _)| !made_durable(p));
        }
        self.pending.retain(|c| !c.names.is_empty());
    }

    /// The namespace a crash leaves: the durable one, plus (out of order) each pending change
    /// that survives a coin flip, applied in order.
    fn surviving_namespace(&mut self) -> BTreeMap<PathBuf, u64> {
        let mut ns = self.durable.clone();
        let pending = std::mem::take(&mut self.pending);
        self.last_crash_dir.clear();
        for c in pending {
            let keep = self.rand() & 1 == 1;
            if keep {
                for (p, ino) in &c.names {
                    match ino {
                        Some(i) => ns.insert(p.clone(), *i),
                        None => ns.remove(p),
                    };
                }
            }
            if let Some(t) = self.trace.as_mut() {
                let verdict = if keep { "kept" } else { "lost" };
                t.push(format!("crash: {verdict} {}", c.what));
            }
            self.last_crash_dir.push((c.what, keep));
        }
        ns
    }
}

/// A gate that holds matching operations until it is opened (see [`FaultFs::pause`]).
#[derive(Clone)]
pub struct Gate {
    open: Arc<(Mutex<bool>, parking_lot::Condvar)>,
    kind: OpKind,
    path_contains: String,
    waiting: Arc<AtomicU64>,
}

impl Gate {
    /// Lets every held and future matching operation go on.
    pub fn open(&self) {
        let (m, cv) = &*self.open;
        *m.lock() = true;
        cv.notify_all();
    }
    /// Operations currently held.
    pub fn waiting(&self) -> u64 {
        self.waiting.load(Ordering::SeqCst)
    }
    /// Waits up to `limit` for an operation to be held; the number held then (0: none came).
    pub fn wait_until_held(&self, limit: std::time::Duration) -> u64 {
        let start = std::time::Instant::now();
        while self.waiting() == 0 && start.elapsed() < limit {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        self.waiting()
    }
    fn wait(&self) {
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let (m, cv) = &*self.open;
        let mut g = m.lock();
        while !*g {
            cv.wait(&mut g);
        }
        drop(g);
        self.waiting.fetch_sub(1, Ordering::SeqCst);
    }
}

struct Shared {
    gates: Mutex<Vec<Gate>>,
    state: Mutex<State>,
    locks: Mutex<HashSet<PathBuf>>,
    epoch: AtomicU64,
}

/// The in-memory fault-injecting file system. Cheap to clone (clones share the state).
#[derive(Clone)]
pub struct FaultFs {
    sh: Arc<Shared>,
}

impl std::fmt::Debug for FaultFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.sh.state.lock();
        write!(f, "FaultFs({} files, {} ops)", s.live.len(), s.ops)
    }
}

impl Default for FaultFs {
    fn default() -> Self {
        Self::new(0x5eed)
    }
}

impl FaultFs {
    /// An empty file system; `seed` drives the random parts of crashes.
    pub fn new(seed: u64) -> Self {
        let st = State {
            rng: seed ^ 0x9E37_79B9_7F4A_7C15,
            ..Default::default()
        };
        let mut dirs = st.dirs.clone();
        dirs.insert(PathBuf::from("/"));
        FaultFs {
            sh: Arc::new(Shared {
                gates: Mutex::new(Vec::new()),
                state: Mutex::new(State { dirs, ..st }),
                locks: Mutex::new(HashSet::new()),
                epoch: AtomicU64::new(0),
            }),
        }
    }

    /// This file system as the `Arc<dyn FileSystem>` that `Options::fs` takes.
    pub fn as_dyn(&self) -> Arc<dyn FileSystem> {
        Arc::new(self.clone())
    }

    /// A deep copy of the whole state (live and durable), sharing nothing with `self`.
    /// Faults, freeze point and locks are not copied; the out-of-order directory setting and
    /// the pending namespace changes are.
    pub fn deep_clone(&self) -> FaultFs {
        let s = self.sh.state.lock();
        let mut inodes = HashMap::new();
        for (k, v) in &s.inodes {
            let i = v.read();
            inodes.insert(
                *k,
                Arc::new(RwLock::new(Inode {
                    data: i.data.clone(),
                    synced: i.synced,
                    boundaries: i.boundaries.clone(),
                })),
            );
        }
        let st = State {
            epoch: 0,
            next_ino: s.next_ino,
            inodes,
            live: s.live.clone(),
            durable: s.durable.clone(),
            dirs: s.dirs.clone(),
            rng: s.rng,
            dir_out_of_order: s.dir_out_of_order,
            pending: s.pending.clone(),
            ..Default::default()
        };
        FaultFs {
            sh: Arc::new(Shared {
                gates: Mutex::new(Vec::new()),
                state: Mutex::new(st),
                locks: Mutex::new(HashSet::new()),
                epoch: AtomicU64::new(0),
            }),
        }
    }

    /// This file system with out-of-order directory-entry write-back on (see the module docs).
    pub fn with_dir_entries_out_of_order(self) -> Self {
        self.set_dir_entries_out_of_order(true);
        self
    }

    /// Turns out-of-order directory-entry write-back on or off (see the module docs). Only
    /// namespace changes made while it is on can survive a crash without a directory sync;
    /// turning it off forgets the recorded ones (a crash then loses them all, the default).
    pub fn set_dir_entries_out_of_order(&self, on: bool) {
        let mut s = self.sh.state.lock();
        s.dir_out_of_order = on;
        if !on {
            s.pending.clear();
            s.gc();
        }
    }

    /// Whether out-of-order directory-entry write-back is on.
    pub fn dir_entries_out_of_order(&self) -> bool {
        self.sh.state.lock().dir_out_of_order
    }

    /// Restarts the generator behind every random choice of a crash as [`FaultFs::new`] with
    /// `seed` would (for loops that crash deep copies of one image and want each crash to
    /// draw differently).
    pub fn reseed(&self, seed: u64) {
        self.sh.state.lock().rng = seed ^ 0x9E37_79B9_7F4A_7C15;
    }

    /// The namespace changes not yet covered by a directory sync, oldest first, as
    /// `create /d/a`, `rename /d/a -> /d/b` or `remove /d/a` (recorded only in the
    /// out-of-order mode).
    pub fn pending_dir_changes(&self) -> Vec<String> {
        let s = self.sh.state.lock();
        s.pending.iter().map(|c| c.what.clone()).collect()
    }

    /// What the last [`FaultFs::crash`] did with each pending namespace change, oldest first:
    /// (description as in [`FaultFs::pending_dir_changes`], whether it survived). Empty
    /// outside the out-of-order mode.
    pub fn dir_changes_at_last_crash(&self) -> Vec<(String, bool)> {
        self.sh.state.lock().last_crash_dir.clone()
    }

    /// Adds a fault rule (counting starts now).
    pub fn inject(&self, fault: Fault) {
        self.sh.state.lock().rules.push(Rule {
            fault,
            seen: 0,
            fired: false,
        });
    }

    /// Removes every fault rule (a frozen fs stays frozen until [`FaultFs::crash`]).
    pub fn clear_faults(&self) {
        self.sh.state.lock().rules.clear();
    }

    /// Whether any rule fired since it was added.
    pub fn fault_fired(&self) -> bool {
        self.sh.state.lock().rules.iter().any(|r| r.fired)
    }

    /// Power is lost just before operation number `n` counted from the fs's creation
    /// (see [`FaultFs::ops`]): it and every later operation fail without effect.
    pub fn freeze_at_op(&self, n: u64) {
        let mut s = self.sh.state.lock();
        s.freeze_at = Some(n);
        if s.ops >= n {
            s.frozen = true;
        }
    }

    /// Loses power now (every later operation fails until [`FaultFs::crash`]).
    pub fn freeze(&self) {
        self.sh.state.lock().frozen = true;
    }

    /// Whether power was lost.
    pub fn is_frozen(&self) -> bool {
        self.sh.state.lock().frozen
    }

    /// Operations counted so far.
    pub fn ops(&self) -> u64 {
        self.sh.state.lock().ops
    }

    /// Operations counted so far by kind.
    pub fn ops_by_kind(&self) -> BTreeMap<OpKind, u64> {
        self.sh.state.lock().per_kind.clone()
    }

    /// Counters.
    pub fn stats(&self) -> FaultStats {
        let s = self.sh.state.lock();
        FaultStats {
            ops: s.ops,
            faults: s.faults,
            crashes: s.crashes,
        }
    }

    /// Simulates a process crash (SIGKILL) followed by a restart: nothing is lost (the kernel
    /// keeps written bytes and directory entries), but nothing becomes durable either; open
    /// handles become dead and fault rules are cleared. Call [`FaultFs::freeze`] first to stop
    /// the dying process's threads from doing I/O while it is torn down.
    pub fn restart_after_kill(&self) {
        for g in self.sh.gates.lock().drain(..) {
            g.open();
        }
        let mut s = self.sh.state.lock();
        s.rules.clear();
        s.freeze_at = None;
        s.frozen = false;
        s.epoch += 1;
        self.sh.epoch.store(s.epoch, Ordering::SeqCst);
    }

    /// Simulates a power loss: the durable state becomes the live state (see the module docs;
    /// out of order, each unsynced namespace change survives or not first).
    /// Open handles become dead: their operations fail. Fault rules and the freeze point are
    /// cleared; the operation counter keeps counting. Held locks stay held until their guards
    /// are dropped.
    pub fn crash(&self, mode: CrashMode) {
        for g in self.sh.gates.lock().drain(..) {
            g.open();
        }
        let mut s = self.sh.state.lock();
        let mut inodes = HashMap::new();
        let durable = s.surviving_namespace();
        for ino in durable.values() {
            if inodes.contains_key(ino) {
                continue;
            }
            let Some(old) = s.inodes.get(ino).cloned() else {
                continue;
            };
            let old = old.read();
            let synced = old.synced.min(old.data.len());
            let extra = old.data.len() - synced;
            let mut data = old.data.get(..synced).unwrap_or_default().to_vec();
            if extra > 0 {
                let keep = (s.rand() % (extra as u64 + 1)) as usize;
                match mode {
                    CrashMode::Drop => {}
                    CrashMode::KeepPartial => {
                        data.extend_from_slice(
                            old.data.get(synced..synced + keep).unwrap_or_default(),
                        );
                    }
                    CrashMode::ZeroTail => data.resize(synced + keep, 0),
                    CrashMode::GarbageTail => {
                        for _ in 0..keep {
                            let b = s.rand() as u8;
                            data.push(b);
                        }
                    }
                    CrashMode::KeepWholeWrites => {
                        let n = old.boundaries.len() as u64;
                        let i = (s.rand() % (n + 1)) as usize;
                        let end = match i {
                            0 => synced,
                            i => old.boundaries.get(i - 1).copied().unwrap_or(synced),
                        };
                        data.extend_from_slice(old.data.get(synced..end).unwrap_or_default());
                    }
                    CrashMode::PagesOutOfOrder => {
                        data.extend_from_slice(old.data.get(synced..).unwrap_or_default());
                        let from = synced + keep.min(extra - 1);
                        let to = ((from / 4096) + 1) * 4096;
                        for b in data.iter_mut().take(to).skip(from) {
                            *b = 0;
                        }
                    }
                }
            }
            let len = data.len();
            inodes.insert(
                *ino,
                Arc::new(RwLock::new(Inode {
                    data,
                    synced: len,
                    boundaries: Vec::new(),
                })),
            );
        }
        s.inodes = inodes;
        s.live = durable.clone();
        s.durable = durable;
        s.rules.clear();
        s.freeze_at = None;
        s.frozen = false;
        s.crashes += 1;
        s.epoch += 1;
        self.sh.epoch.store(s.epoch, Ordering::SeqCst);
    }

    /// Starts recording every operation (see [`FaultFs::trace`]).
    pub fn start_trace(&self) {
        self.sh.state.lock().trace = Some(Vec::new());
    }

    /// The operations recorded since [`FaultFs::start_trace`]: `index kind path [FAIL]`.
    pub fn trace(&self) -> Vec<String> {
        self.sh.state.lock().trace.clone().unwrap_or_default()
    }

    /// Every path ever created with [`FileSystem::create`] (crashes do not forget them).
    pub fn created_paths(&self) -> BTreeSet<PathBuf> {
        self.sh.state.lock().created.clone()
    }

    /// Paths of every live file, sorted.
    pub fn files(&self) -> Vec<PathBuf> {
        self.sh.state.lock().live.keys().cloned().collect()
    }

    /// The live bytes of a file.
    pub fn file_bytes(&self, path: &Path) -> Option<Vec<u8>> {
        let s = self.sh.state.lock();
        let ino = s.live.get(path)?;
        let data = s.inodes.get(ino)?.read().data.clone();
        Some(data)
    }

    /// Replaces a file's bytes (creating it), durably: data synced and directory entry synced.
    /// For corruption tests; no fault rule applies.
    pub fn set_file_bytes(&self, path: &Path, data: Vec<u8>) {
        let mut s = self.sh.state.lock();
        let (ino, r) = s.new_inode();
        {
            let mut i = r.write();
            i.synced = data.len();
            i.data = data;
        }
        s.live.insert(path.to_path_buf(), ino);
        s.durable.insert(path.to_path_buf(), ino);
        s.settle(|p| p == path);
        s.gc();
    }

    /// Removes a file durably (for corruption tests).
    pub fn delete_file(&self, path: &Path) {
        let mut s = self.sh.state.lock();
        s.live.remove(path);
        s.durable.remove(path);
        s.settle(|p| p == path);
        s.gc();
    }

    /// Holds every later `append`/`flush` (Write), `sync` (Sync), `read_at` (Read) or `remove`
    /// (Remove) whose path contains `path_contains` until the returned gate is opened (other
    /// kinds are not held).
    /// For tests that need one thread's I/O to wait while another goes on.
    pub fn pause(&self, kind: OpKind, path_contains: &str) -> Gate {
        let g = Gate {
            open: Arc::new((Mutex::new(false), parking_lot::Condvar::new())),
            kind,
            path_contains: path_contains.to_string(),
            waiting: Arc::new(AtomicU64::new(0)),
        };
        self.sh.gates.lock().push(g.clone());
        g
    }

    fn check(&self, kind: OpKind, path: &Path) -> io::Result<bool> {
        self.hold_at_gate(kind, path);
        self.sh.state.lock().check(kind, path)
    }

    /// Waits at the first gate matching the operation, if any.
    fn hold_at_gate(&self, kind: OpKind, path: &Path) {
        let gate = {
            let gates = self.sh.gates.lock();
            let p = path.to_string_lossy();
            gates
                .iter()
                .find(|g| g.kind == kind && p.contains(&g.path_contains))
                .cloned()
        };
        if let Some(g) = gate {
            g.wait();
        }
    }
}

fn parent(path: &Path) -> PathBuf {
    path.parent().map(Path::to_path_buf).unwrap_or_default()
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{}: no such file", path.display()),
    )
}

fn dead() -> io::Error {
    io::Error::other("file handle from before a crash")
}

struct FaultWritable {
    fs: FaultFs,
    epoch: u64,
    path: PathBuf,
    ino: InodeRef,
    len: u64,
}

impl FaultWritable {
    fn alive(&self) -> io::Result<()> {
        if self.fs.sh.epoch.load(Ordering::SeqCst) != self.epoch {
            return Err(dead());
        }
        Ok(())
    }
}

impl WritableFile for FaultWritable {
    fn append(&mut self, data: &[u8]) -> io::Result<()> {
        self.alive()?;
        let short = self.fs.check(OpKind::Write, &self.path)?;
        let mut i = self.ino.write();
        if short {
            let half = data.get(..data.len() / 2).unwrap_or_default();
            i.data.extend_from_slice(half);
            let end = i.data.len();
            i.boundaries.push(end);
            self.len += half.len() as u64;
            drop(i);
            return Err(self.fs.sh.state.lock().fault_error(&self.path));
        }
        i.data.extend_from_slice(data);
        let end = i.data.len();
        i.boundaries.push(end);
        self.len += data.len() as u64;
        Ok(())
    }
    fn flush(&mut self) -> io::Result<()> {
        self.alive()?;
        if self.fs.check(OpKind::Write, &self.path)? {
            return Err(self.fs.sh.state.lock().fault_error(&self.path));
        }
        Ok(())
    }
    fn sync(&mut self) -> io::Result<()> {
        self.alive()?;
        self.fs.check(OpKind::Sync, &self.path)?;
        let mut i = self.ino.write();
        i.synced = i.data.len();
        i.boundaries.clear();
        Ok(())
    }
    fn len(&self) -> u64 {
        self.len
    }
}

struct FaultReadable {
    fs: FaultFs,
    epoch: u64,
    path: PathBuf,
    ino: InodeRef,
    len: u64,
}

impl ReadableFile for FaultReadable {
    fn read_at(&self, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        if self.fs.sh.epoch.load(Ordering::SeqCst) != self.epoch {
            return Err(dead());
        }
        self.fs.check(OpKind::Read, &self.path)?;
        let i = self.ino.read();
        let start = usize::try_from(offset).map_err(|_| io::Error::other("offset"))?;
        let end = start
            .checked_add(len)
            .ok_or_else(|| io::Error::other("length"))?;
        match i.data.get(start..end) {
            Some(b) => Ok(b.to_vec()),
            None => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("read past end of {}", self.path.display()),
            )),
        }
    }
    fn len(&self) -> u64 {
        self.len
    }
}

struct FaultLock {
    fs: FaultFs,
    path: PathBuf,
}

impl FileLock for FaultLock {}

impl Drop for FaultLock {
    fn drop(&mut self) {
        self.fs.sh.locks.lock().remove(&self.path);
    }
}

impl FileSystem for FaultFs {
    fn create(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        let mut s = self.sh.state.lock();
        s.check(OpKind::Create, path)?;
        if !s.dirs.contains(&parent(path)) {
            return Err(not_found(&parent(path)));
        }
        let (ino, r) = s.new_inode();
        s.live.insert(path.to_path_buf(), ino);
        s.created.insert(path.to_path_buf());
        s.record(
            format!("create {}", path.display()),
            vec![(path.to_path_buf(), Some(ino))],
        );
        s.gc();
        Ok(Box::new(FaultWritable {
            fs: self.clone(),
            epoch: s.epoch,
            path: path.to_path_buf(),
            ino: r,
            len: 0,
        }))
    }

    fn reopen_for_append(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        let mut s = self.sh.state.lock();
        s.check(OpKind::Open, path)?;
        let ino = *s.live.get(path).ok_or_else(|| not_found(path))?;
        let r = s.inodes.get(&ino).cloned().ok_or_else(|| not_found(path))?;
        // The inode's synced length stays where it is: what this writer appends is unsynced
        // until its sync, as on a created file.
        let len = r.read().data.len() as u64;
        Ok(Box::new(FaultWritable {
            fs: self.clone(),
            epoch: s.epoch,
            path: path.to_path_buf(),
            ino: r,
            len,
        }))
    }

    fn open(&self, path: &Path, _direct: bool) -> io::Result<Arc<dyn ReadableFile>> {
        let mut s = self.sh.state.lock();
        s.check(OpKind::Open, path)?;
        let ino = *s.live.get(path).ok_or_else(|| not_found(path))?;
        let r = s.inodes.get(&ino).cloned().ok_or_else(|| not_found(path))?;
        let len = r.read().data.len() as u64;
        Ok(Arc::new(FaultReadable {
            fs: self.clone(),
            epoch: s.epoch,
            path: path.to_path_buf(),
            ino: r,
            len,
        }))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut s = self.sh.state.lock();
        s.check(OpKind::Rename, to)?;
        let ino = s.live.remove(from).ok_or_else(|| not_found(from))?;
        s.live.insert(to.to_path_buf(), ino);
        s.record(
            format!("rename {} -> {}", from.display(), to.display()),
            vec![(from.to_path_buf(), None), (to.to_path_buf(), Some(ino))],
        );
        s.gc();
        Ok(())
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        self.hold_at_gate(OpKind::Remove, path);
        let mut s = self.sh.state.lock();
        s.check(OpKind::Remove, path)?;
        s.live.remove(path).ok_or_else(|| not_found(path))?;
        s.record(
            format!("remove {}", path.display()),
            vec![(path.to_path_buf(), None)],
        );
        s.gc();
        Ok(())
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut s = self.sh.state.lock();
        s.check(OpKind::List, dir)?;
        if !s.dirs.contains(dir) {
            return Err(not_found(dir));
        }
        let mut out: Vec<String> = s
            .live
            .keys()
            .filter(|p| p.parent() == Some(dir))
            .filter_map(|p| p.file_name()?.to_str().map(str::to_string))
            .collect();
        for d in &s.dirs {
            if d.parent() == Some(dir) {
                if let Some(n) = d.file_name().and_then(|n| n.to_str()) {
                    out.push(n.to_string());
                }
            }
        }
        Ok(out)
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut s = self.sh.state.lock();
        s.check(OpKind::Mkdir, dir)?;
        let mut d = Some(dir);
        while let Some(p) = d {
            if p.as_os_str().is_empty() {
                break;
            }
            s.dirs.insert(p.to_path_buf());
            d = p.parent();
        }
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut s = self.sh.state.lock();
        s.check(OpKind::SyncDir, dir)?;
        let in_dir = |p: &PathBuf| p.parent() == Some(dir);
        s.durable.retain(|p, _| !in_dir(p));
        let entries: Vec<(PathBuf, u64)> = s
            .live
            .iter()
            .filter(|(p, _)| in_dir(p))
            .map(|(p, i)| (p.clone(), *i))
            .collect();
        s.durable.extend(entries);
        s.settle(|p| p.parent() == Some(dir));
        s.gc();
        Ok(())
    }

    fn sync_file(&self, path: &Path) -> io::Result<()> {
        let r = {
            let mut s = self.sh.state.lock();
            s.check(OpKind::Sync, path)?;
            let ino = *s.live.get(path).ok_or_else(|| not_found(path))?;
            s.inodes.get(&ino).cloned().ok_or_else(|| not_found(path))?
        };
        let mut i = r.write();
        i.synced = i.data.len();
        i.boundaries.clear();
        Ok(())
    }

    fn exists(&self, path: &Path) -> bool {
        let s = self.sh.state.lock();
        s.live.contains_key(path) || s.dirs.contains(path)
    }

    fn file_size(&self, path: &Path) -> io::Result<u64> {
        let s = self.sh.state.lock();
        let ino = s.live.get(path).ok_or_else(|| not_found(path))?;
        let r = s.inodes.get(ino).ok_or_else(|| not_found(path))?;
        let len = r.read().data.len() as u64;
        Ok(len)
    }

    fn lock(&self, path: &Path) -> io::Result<Box<dyn FileLock>> {
        let mut locks = self.sh.locks.lock();
        if !locks.insert(path.to_path_buf()) {
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                "lock held by another Db on this FaultFs",
            ));
        }
        Ok(Box::new(FaultLock {
            fs: self.clone(),
            path: path.to_path_buf(),
        }))
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::field_reassign_with_default)]
mod tests {
    use super::*;

    fn p(s: &str) -> PathBuf {
        PathBuf::from(s)
    }

    #[test]
    fn unsynced_bytes_and_entries_are_lost() {
        let fs = FaultFs::new(1);
        fs.create_dir_all(&p("/d")).expect("mkdir");
        let mut a = fs.create(&p("/d/a")).expect("create");
        a.append(b"hello").expect("append");
        a.sync().expect("sync");
        a.append(b" world").expect("append");
        // Not dir-synced: the file vanishes.
        fs.crash(CrashMode::Drop);
        assert!(!fs.exists(&p("/d/a")));

        let mut a = fs.create(&p("/d/a")).expect("create");
        a.append(b"hello").expect("append");
        a.sync().expect("sync");
        fs.sync_dir(&p("/d")).expect("sync dir");
        a.append(b" world").expect("append");
        fs.rename(&p("/d/a"), &p("/d/b")).expect("rename");
        fs.crash(CrashMode::Drop);
        assert_eq!(fs.file_bytes(&p("/d/a")).as_deref(), Some(&b"hello"[..]));
        assert!(!fs.exists(&p("/d/b")));
        // The old handle is dead.
        assert!(a.append(b"x").is_err());
    }

    #[test]
    fn crash_modes_shape_the_tail() {
        for mode in CrashMode::ALL {
            let fs = FaultFs::new(7);
            fs.create_dir_all(&p("/d")).expect("mkdir");
            let mut a = fs.create(&p("/d/a")).expect("create");
            fs.sync_dir(&p("/d")).expect("sync dir");
            a.append(b"0123").expect("append");
            a.sync().expect("sync");
            a.append(&[7u8; 100]).expect("append");
            fs.crash(mode);
            let b = fs.file_bytes(&p("/d/a")).expect("file");
            assert_eq!(&b[..4], b"0123");
            assert!(b.len() <= 104);
            match mode {
                CrashMode::Drop => assert_eq!(b.len(), 4),
                CrashMode::KeepPartial => assert!(b[4..].iter().all(|&x| x == 7)),
                CrashMode::ZeroTail => assert!(b[4..].iter().all(|&x| x == 0)),
                CrashMode::GarbageTail => {}
                CrashMode::KeepWholeWrites => {
                    assert!(b.len() == 4 || b.len() == 104, "{}", b.len())
                }
                CrashMode::PagesOutOfOrder => {
                    // One page here: everything kept, then zeros from some point on.
                    assert_eq!(b.len(), 104);
                    let z = b[4..].iter().position(|&x| x == 0).expect("a stale part");
                    assert!(b[4 + z..].iter().all(|&x| x == 0));
                }
            }
        }
    }

    #[test]
    fn faults_fire_once_or_persistently() {
        let fs = FaultFs::new(1);
        fs.create_dir_all(&p("/d")).expect("mkdir");
        let mut a = fs.create(&p("/d/a")).expect("create");
        fs.inject(Fault::nth(Some(OpKind::Write), 2).error(FaultError::Enospc));
        a.append(b"1").expect("first append");
        let e = a.append(b"2").expect_err("second append fails");
        assert_eq!(e.raw_os_error(), None);
        assert!(e.to_string().contains("No space"), "{e}");
        a.append(b"3").expect("third append");
        fs.inject(Fault::nth(Some(OpKind::Sync), 1).persistent());
        assert!(a.sync().is_err());
        assert!(a.sync().is_err());
        fs.clear_faults();
        a.sync().expect("sync after clearing");
        fs.inject(Fault::nth(Some(OpKind::Write), 1).short());
        assert!(a.append(b"abcd").is_err());
        assert_eq!(fs.file_bytes(&p("/d/a")).as_deref(), Some(&b"13ab"[..]));
    }

    #[test]
    fn freeze_stops_everything() {
        let fs = FaultFs::new(1);
        fs.create_dir_all(&p("/d")).expect("mkdir");
        let n = fs.ops();
        fs.freeze_at_op(n + 2);
        let mut a = fs.create(&p("/d/a")).expect("op n+1 works");
        assert!(a.append(b"x").is_err());
        assert!(fs.sync_dir(&p("/d")).is_err());
        assert!(fs.is_frozen());
        fs.crash(CrashMode::Drop);
        assert!(!fs.exists(&p("/d/a")));
        fs.create(&p("/d/a")).expect("works after the crash");
    }

    /// A durable file `/d/name` holding `data`.
    fn durable_file(fs: &FaultFs, name: &str, data: &[u8]) {
        let mut w = fs.create(&p(name)).expect("create");
        w.append(data).expect("append");
        w.sync().expect("sync");
        fs.sync_dir(&p("/d")).expect("sync dir");
    }

    /// What a writer appends to a reopened file is unsynced until its sync: a crash treats
    /// those bytes as it treats a new file's (dropped, partly kept, zeros, garbage, …) and
    /// never the bytes the file held before. A synced append survives every crash mode.
    #[test]
    fn bytes_appended_to_a_reopened_file_are_unsynced_until_its_sync() {
        for mode in CrashMode::ALL {
            let fs = FaultFs::new(11).with_dir_entries_out_of_order();
            fs.create_dir_all(&p("/d")).expect("mkdir");
            durable_file(&fs, "/d/t", b"table");
            let mut w = fs.reopen_for_append(&p("/d/t")).expect("reopen");
            assert!(fs.pending_dir_changes().is_empty(), "a reopen is no create");
            assert_eq!(w.len(), 5);
            w.append(&[9u8; 100]).expect("append");
            w.append(&[8u8; 50]).expect("append");
            assert_eq!(w.len(), 155);
            assert_eq!(fs.file_bytes(&p("/d/t")).map(|b| b.len()), Some(155));
            fs.crash(mode);
            let b = fs.file_bytes(&p("/d/t")).expect("the file stays");
            assert_eq!(&b[..5], b"table", "{mode:?}");
            assert!(b.len() <= 155, "{mode:?}");
            match mode {
                CrashMode::Drop => assert_eq!(b.len(), 5),
                CrashMode::KeepWholeWrites => assert!([5, 105, 155].contains(&b.len())),
                CrashMode::KeepPartial => {
                    assert!(b[5..].iter().take(100).all(|&x| x == 9), "{mode:?}")
                }
                _ => {}
            }
            assert!(
                w.append(b"x").is_err(),
                "a handle from before the crash is dead"
            );
            let mut w = fs.reopen_for_append(&p("/d/t")).expect("reopen");
            assert_eq!(w.len(), b.len() as u64);
            w.append(b"more").expect("append");
            w.sync().expect("sync");
            fs.crash(mode);
            let after = fs.file_bytes(&p("/d/t")).expect("file");
            assert_eq!(&after[..b.len()], &b[..], "{mode:?}");
            assert_eq!(&after[b.len()..], b"more", "{mode:?}");
        }
        let fs = FaultFs::new(1);
        fs.create_dir_all(&p("/d")).expect("mkdir");
        assert!(fs.reopen_for_append(&p("/d/none")).is_err());
    }

    #[test]
    fn out_of_order_creates_survive_independently_and_deterministically() {
        // (a survived, b survived) for each seed.
        let run = |seed: u64| {
            let fs = FaultFs::new(seed).with_dir_entries_out_of_order();
            fs.create_dir_all(&p("/d")).expect("mkdir");
            for name in ["/d/a", "/d/b"] {
                let mut w = fs.create(&p(name)).expect("create");
                w.append(name.as_bytes()).expect("append");
                w.sync().expect("sync");
            }
            assert_eq!(fs.pending_dir_changes(), ["create /d/a", "create /d/b"]);
            fs.crash(CrashMode::Drop);
            let got = (fs.exists(&p("/d/a")), fs.exists(&p("/d/b")));
            // A surviving entry points at the file's synced bytes.
            for (name, there) in [("/d/a", got.0), ("/d/b", got.1)] {
                let want = there.then(|| name.as_bytes().to_vec());
                assert_eq!(fs.file_bytes(&p(name)), want, "seed {seed}");
            }
            assert_eq!(
                fs.dir_changes_at_last_crash(),
                [
                    ("create /d/a".to_string(), got.0),
                    ("create /d/b".to_string(), got.1)
                ]
            );
            assert!(fs.pending_dir_changes().is_empty());
            got
        };
        let mut seen = BTreeSet::new();
        for seed in 0..64 {
            let got = run(seed);
            assert_eq!(run(seed), got, "seed {seed} is not deterministic");
            seen.insert(got);
        }
        // A create that survives, one that does not, and every combination of the two.
        assert_eq!(seen.len(), 4, "{seen:?}");
    }

    #[test]
    fn out_of_order_renames_are_atomic_and_removes_all_or_nothing() {
        let mut seen = BTreeSet::new();
        for seed in 0..64 {
            let fs = FaultFs::new(seed);
            fs.set_dir_entries_out_of_order(true);
            assert!(fs.dir_entries_out_of_order());
            fs.create_dir_all(&p("/d")).expect("mkdir");
            durable_file(&fs, "/d/CURRENT", b"v1");
            durable_file(&fs, "/d/x", b"x");
            durable_file(&fs, "/d/r", b"r");
            // The CURRENT pattern: temp file, sync, rename over the old one.
            let mut w = fs.create(&p("/d/tmp")).expect("create");
            w.append(b"v2").expect("append");
            w.sync().expect("sync");
            fs.rename(&p("/d/tmp"), &p("/d/CURRENT")).expect("rename");
            fs.rename(&p("/d/x"), &p("/d/y")).expect("rename");
            fs.remove(&p("/d/r")).expect("remove");
            // Created and removed before any sync: it can come back.
            let mut w = fs.create(&p("/d/gone")).expect("create");
            w.append(b"g").expect("append");
            w.sync().expect("sync");
            fs.remove(&p("/d/gone")).expect("remove");
            fs.crash(CrashMode::Drop);
            let bytes = |n: &str| fs.file_bytes(&p(n));
            let renamed = bytes("/d/CURRENT") == Some(b"v2".to_vec());
            if renamed {
                assert_eq!(bytes("/d/tmp"), None, "seed {seed}");
            } else {
                assert_eq!(bytes("/d/CURRENT").as_deref(), Some(&b"v1"[..]));
                // The temp file's create may have survived without the rename.
                assert!(matches!(bytes("/d/tmp").as_deref(), None | Some(b"v2")));
            }
            // A rename is never half done: the file is under exactly one of its names.
            let moved = match (bytes("/d/x"), bytes("/d/y")) {
                (Some(a), None) if a == b"x" => false,
                (None, Some(b)) if b == b"x" => true,
                other => panic!("seed {seed}: rename half applied: {other:?}"),
            };
            let removed = match bytes("/d/r") {
                None => true,
                Some(r) if r == b"r" => false,
                Some(r) => panic!("seed {seed}: {r:?}"),
            };
            let back = match bytes("/d/gone") {
                None => false,
                Some(g) if g == b"g" => true,
                Some(g) => panic!("seed {seed}: {g:?}"),
            };
            seen.insert((renamed, moved, removed, back));
            // The survivors are durable now: a second crash keeps exactly them.
            let files = fs.files();
            fs.crash(CrashMode::Drop);
            assert_eq!(fs.files(), files);
        }
        for i in 0..4 {
            let values: BTreeSet<bool> = seen.iter().map(|t| [t.0, t.1, t.2, t.3][i]).collect();
            assert_eq!(
                values.len(),
                2,
                "change {i} always or never survived: {seen:?}"
            );
        }
    }

    #[test]
    fn out_of_order_changes_a_dir_sync_covered_all_survive() {
        for seed in 0..16 {
            let fs = FaultFs::new(seed).with_dir_entries_out_of_order();
            fs.create_dir_all(&p("/d")).expect("mkdir");
            fs.create_dir_all(&p("/e")).expect("mkdir");
            durable_file(&fs, "/d/a", b"a");
            fs.create(&p("/d/b")).expect("create");
            fs.rename(&p("/d/a"), &p("/d/c")).expect("rename");
            fs.create(&p("/e/f")).expect("create");
            fs.sync_dir(&p("/d")).expect("sync dir");
            // Only the change in the other directory is still pending.
            assert_eq!(fs.pending_dir_changes(), ["create /e/f"]);
            let copy = fs.deep_clone();
            assert!(copy.dir_entries_out_of_order());
            assert_eq!(copy.pending_dir_changes(), ["create /e/f"]);
            fs.crash(CrashMode::Drop);
            assert!(fs.exists(&p("/d/b")) && fs.exists(&p("/d/c")) && !fs.exists(&p("/d/a")));
        }
        // Off again: nothing is recorded and a crash loses every unsynced change.
        let fs = FaultFs::new(3).with_dir_entries_out_of_order();
        fs.set_dir_entries_out_of_order(false);
        fs.create_dir_all(&p("/d")).expect("mkdir");
        fs.create(&p("/d/a")).expect("create");
        assert!(fs.pending_dir_changes().is_empty());
        fs.crash(CrashMode::Drop);
        assert!(fs.files().is_empty() && fs.dir_changes_at_last_crash().is_empty());
    }

    #[test]
    fn lock_excludes_a_second_holder() {
        let fs = FaultFs::new(1);
        let l = fs.lock(&p("/d/LOCK")).expect("lock");
        assert_eq!(
            fs.lock(&p("/d/LOCK")).err().map(|e| e.kind()),
            Some(io::ErrorKind::WouldBlock)
        );
        drop(l);
        fs.lock(&p("/d/LOCK")).expect("lock again");
    }
}
