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

use crate::fs::FileSystem;

mod files;
mod ops;
#[cfg(test)]
mod tests;

pub use ops::{CrashMode, Fault, FaultError, FaultStats, OpKind};

#[derive(Clone)]
struct DirChange {
    /// For reports: `create /d/a`, `rename /d/a -> /d/b`, `remove /d/a`.
    what: String,
    /// What the change did to each name, applied in order when it survives: the inode the name
    /// points at afterwards, or `None` when the name is gone.
    names: Vec<(PathBuf, Option<u64>)>,
}

/// Counters of what the fault layer did (for the figures in docs/reliability.md).

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
