//! The database: open and recovery, the write path (group commit into the WAL, then the
//! memtables), the read path (memtables, then the layout), snapshots, background flushes and
//! compactions, and keyspace handles.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::ops::{Bound, RangeBounds};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, RwLock};

use crate::batch::{self, check_key, check_value, KsIds, WriteBatch, WriteOptions};
use crate::cache::BlockCache;
use crate::error::{Error, Result};
use crate::fs::{std_fs::StdFs, Env, FileLock, FileSystem};
use crate::iterator::{self, prefix_end, RangeIter, Value};
use crate::key::{self, ValueKind};
use crate::layout::{self, Job, JobCtx, Layout, LayoutVersion, ManualScope, ManualStep, Pressure};
use crate::log::{self, LogWriter};
use crate::manifest::edit::{Edit, KeyspaceDef, KsEdit};
use crate::manifest::{self, ManifestWriter};
use crate::memtable::{Lookup, Memtable};
use crate::options::{KeyspaceOptions, Layout as LayoutKind, Options, WalRecovery};
use crate::stats::{IoStats, KeyspaceStats, LevelWrites, Stats, WriteCause};
use crate::table::{TableCtx, TableFile};
use crate::wal_chain;

/// Path of WAL file `n`.
fn wal_path(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("{n:06}.log"))
}

/// What readers of a keyspace see: memtables and the layout's version, swapped atomically.
pub(crate) struct SuperVersion {
    pub mem: Arc<Memtable>,
    /// Frozen memtables, newest first.
    pub imms: Vec<Arc<Memtable>>,
    pub version: Arc<dyn LayoutVersion>,
}

pub(crate) struct KsCore {
    pub id: u32,
    pub name: String,
    pub kind: LayoutKind,
    pub opts: RwLock<Arc<KeyspaceOptions>>,
    pub layout: Arc<dyn Layout>,
    pub sv: RwLock<Arc<SuperVersion>>,
    /// Oldest WAL that may hold unflushed data of this keyspace, as persisted.
    pub log_number: AtomicU64,
    /// What flushes and compactions put into each level since open (index = level).
    pub level_writes: Mutex<Vec<LevelWrites>>,
    /// The scopes of the manual compactions running on this keyspace, by token; every
    /// installed edit updates them ([`ManualScope::follow`]).
    pub manual: Mutex<ManualScopes>,
}

/// Scopes of the running manual compactions of one keyspace.
#[derive(Default)]
pub(crate) struct ManualScopes {
    next_token: u64,
    running: Vec<(u64, ManualScope)>,
}

impl ManualScopes {
    fn register(&mut self, scope: ManualScope) -> u64 {
        self.next_token += 1;
        self.running.push((self.next_token, scope));
        self.next_token
    }
    fn get(&self, token: u64) -> ManualScope {
        self.running
            .iter()
            .find(|(t, _)| *t == token)
            .map(|(_, s)| s.clone())
            .unwrap_or_default()
    }
    fn remove(&mut self, token: u64) {
        self.running.retain(|(t, _)| *t != token);
    }
}

/// Ends a manual compaction's scope however the call returns.
struct ScopeToken<'a> {
    ks: &'a KsCore,
    token: u64,
}

impl Drop for ScopeToken<'_> {
    fn drop(&mut self) {
        self.ks.manual.lock().remove(self.token);
    }
}

impl KsCore {
    fn sv(&self) -> Arc<SuperVersion> {
        self.sv.read().clone()
    }
    fn opts(&self) -> Arc<KeyspaceOptions> {
        self.opts.read().clone()
    }

    /// Counts what an edit about to be installed writes into each level: its added tables (a
    /// table also named as removed is a move), and the tables it merges away (`merged`: removed
    /// and not re-added), at the deepest level it writes to. `old` holds the tables of the
    /// version the edit applies to.
    fn count_level_writes(
        &self,
        edit: &KsEdit,
        old: &[Arc<TableFile>],
        merged: &HashSet<u64>,
        flush: bool,
    ) {
        let mut w = self.level_writes.lock();
        let mut deepest: Option<usize> = None;
        for a in &edit.added {
            let level = a.level as usize;
            if w.len() <= level {
                w.resize_with(level + 1, LevelWrites::default);
            }
            let Some(lw) = w.get_mut(level) else { continue };
            let bytes = a.meta.size;
            if edit.removed.contains(&a.meta.file_no) {
                lw.moved_bytes += bytes;
                continue;
            }
            if flush {
                lw.flush_bytes += bytes;
            } else {
                lw.compaction_bytes += bytes;
            }
            lw.tables_written += 1;
            deepest = deepest.max(Some(level));
        }
        let merged: u64 = old
            .iter()
            .filter(|t| merged.contains(&t.meta.file_no))
            .map(|t| t.meta.size)
            .sum();
        if let Some(lw) = deepest.and_then(|d| w.get_mut(d)) {
            lw.input_bytes += merged;
        }
    }
}

struct Pending {
    /// The batch's entries, compact-encoded (batch::WriteBatch::rep): the WAL record's payload
    /// after its header.
    rep: Vec<u8>,
    count: u32,
    ks_ids: KsIds,
    user_bytes: u64,
    sync: bool,
    result: Mutex<Option<Result<()>>>,
}

#[derive(Default)]
struct Queue {
    pending: VecDeque<Arc<Pending>>,
    leader: bool,
}

struct WalState {
    log: LogWriter,
    number: u64,
}

#[derive(Default)]
struct BgState {
    running: usize,
    flushing: HashSet<u32>,
    closing: bool,
}

/// The largest file number a database uses: a manifest, table or WAL naming a larger one is
/// corruption (the next number, and the two recovery takes, must not overflow).
const MAX_FILE_NO: u64 = u64::MAX >> 1;

/// Source of [`DbInner::instance`].
static NEXT_INSTANCE: AtomicU64 = AtomicU64::new(1);

pub(crate) struct DbInner {
    /// Unique among the databases this process opens: what a `WriteBatch` records to refuse
    /// being written to another database. (The `DbInner` address was used before, and a
    /// database opened after another closed often got the same one: a batch of the closed
    /// database was accepted by the new one, into whichever keyspace had the same id. Found
    /// in review, 2026-11-23.)
    instance: u64,
    dir: PathBuf,
    env: Env,
    opts: Options,
    tables: Arc<TableCtx>,
    next_file: AtomicU64,
    last_seq: AtomicU64,
    hash_key: [u8; 16],
    /// Threads probing the last level during point lookups (`Options::parallel_search`).
    search_pool: Option<Arc<layout::parallel::SearchPool>>,
    keyspaces: RwLock<HashMap<u32, Arc<KsCore>>>,
    queue: Mutex<Queue>,
    queue_cv: Condvar,
    wal: Mutex<WalState>,
    /// Retired (sealed) WAL writers not yet synced (lock order: `wal` before `old_logs`; held
    /// only to push or take, never across a sync).
    old_logs: Mutex<Vec<LogWriter>>,
    /// Held while retired WALs are synced: when `sync_old_logs` returns, every log retired
    /// before it was called is durable, whichever thread synced it.
    log_sync: Mutex<()>,
    /// A WAL was created since the directory was last synced: its entry is not durable yet.
    wal_dir_unsynced: AtomicBool,
    /// Held across the check of `wal_dir_unsynced` and the directory sync, so that no caller
    /// returns while another's sync covering its WAL is still running (found in review).
    wal_dir_sync: Mutex<()>,
    /// A retired WAL failed to sync: no later sync may succeed in its place (a retried
    /// `fdatasync` can report success for pages the failed one dropped).
    wal_sync_failed: AtomicBool,
    /// The first WAL of this open (`Edit::sealed_logs_from`): every older WAL was synced whole
    /// by the recovery; this one and later ones are sealed when retired (`wal_chain`).
    sealed_from: u64,
    /// Number of the WAL being written (readable without the WAL lock).
    wal_number: AtomicU64,
    live_logs: Mutex<Vec<u64>>,
    manifest: Mutex<ManifestWriter>,
    bg: Mutex<BgState>,
    bg_cv: Condvar,
    bg_error: Mutex<Option<String>>,
    /// Held while a compaction is picked (version read + inputs reserved) and while a
    /// compaction's edit is installed and its reservation released: a pick then sees either
    /// the inputs reserved or the version without them, never stale inputs already replaced.
    pick_lock: Mutex<()>,
    snapshots: Mutex<BTreeMap<u64, usize>>,
    stats: Arc<IoStats>,
}

/// The owner of the background threads; dropping the last handle closes the database.
pub(crate) struct DbHandle {
    inner: Arc<DbInner>,
    workers: Mutex<Vec<JoinHandle<()>>>,
    /// `None` for a read-only open of a directory without a lock file.
    _lock: Option<Box<dyn FileLock>>,
}

impl Drop for DbHandle {
    fn drop(&mut self) {
        {
            let mut bg = self.inner.bg.lock();
            bg.closing = true;
            self.inner.bg_cv.notify_all();
        }
        for w in self.workers.lock().drain(..) {
            let _ = w.join();
        }
        // A clean close makes every acknowledged write durable.
        let mut wal = self.inner.wal.lock();
        let _ = self.inner.sync_old_logs();
        let _ = wal.log.sync();
        drop(wal);
        // Obsolete tables queued for deletion are deleted before the close returns; any
        // dropped later (with the last version) are deleted inline.
        self.inner.tables.purge.close();
    }
}

/// An open database. Cheap to clone; the database closes when the last `Db`, `Keyspace`,
/// `Snapshot` and range iterator is dropped (background work is stopped, the WAL synced).
#[derive(Clone)]
pub struct Db {
    h: Arc<DbHandle>,
}

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Db({})", self.h.inner.dir.display())
    }
}

/// A named keyspace of a database. Cheap to clone, `Send + Sync`.
#[derive(Clone)]
pub struct Keyspace {
    h: Arc<DbHandle>,
    core: Arc<KsCore>,
}

impl std::fmt::Debug for Keyspace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Keyspace({}, {})", self.core.name, self.core.kind)
    }
}

/// A consistent read view of the whole database at one moment.
pub struct Snapshot {
    h: Arc<DbHandle>,
    seq: u64,
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Snapshot({})", self.seq)
    }
}

impl Drop for Snapshot {
    fn drop(&mut self) {
        let mut s = self.h.inner.snapshots.lock();
        if let Some(c) = s.get_mut(&self.seq) {
            *c -= 1;
            if *c == 0 {
                s.remove(&self.seq);
            }
        }
    }
}

/// Whether `ext` names a table file a layout writes (sorted tables, HTables, BloomClusters).
pub(crate) fn is_table_ext(ext: &str) -> bool {
    crate::table_format::is_table_ext(ext)
}

/// Whether the WAL at `path` may hold a write: a byte that is not zero (or it cannot be read).
/// A memory-mapped WAL is preallocated with zeros, and a process killed before its writer was
/// dropped leaves them (found in review, 2026-11-24: a database whose creation was killed after
/// its first WAL existed could never be opened, the zeros counted as data).
pub(crate) fn log_may_hold_data(fs: &dyn FileSystem, path: &Path) -> bool {
    fs.read_all(path)
        .map_or(true, |data| data.iter().any(|&b| b != 0))
}

fn parse_file_name(name: &str) -> Option<(u64, &str)> {
    let (num, ext) = name.split_once('.')?;
    Some((num.parse().ok()?, ext))
}

impl Db {
    /// Opens (or creates) the database at `path`.
    pub fn open(path: impl AsRef<Path>, opts: Options) -> Result<Db> {
        opts.validate()?;
        let dir = path.as_ref().to_path_buf();
        let fs = opts.fs.clone().unwrap_or_else(|| Arc::new(StdFs));
        if opts.read_only && !fs.exists(&dir) {
            // A read-only open creates nothing, whatever `create_if_missing` says (a directory
            // without CURRENT is refused by the recovery, which tells damage from no database).
            return Err(Error::InvalidArgument(format!(
                "{} does not exist: a read-only open does not create a database",
                dir.display()
            )));
        }
        if !fs.exists(&dir) {
            if !opts.create_if_missing {
                return Err(Error::InvalidArgument(format!(
                    "{} does not exist and create_if_missing is false",
                    dir.display()
                )));
            }
            fs.create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        } else if !opts.create_if_missing && !fs.exists(&dir.join(manifest::CURRENT)) {
            // An existing directory without CURRENT holds no database (say, an unmounted
            // mount point): creating one there is what `create_if_missing: false` forbids
            // (found in review: it silently opened a fresh, empty database).
            return Err(Error::InvalidArgument(format!(
                "{} holds no database (no {}) and create_if_missing is false",
                dir.display(),
                manifest::CURRENT
            )));
        }
        let lock_path = dir.join("LOCK");
        let lock = if opts.read_only {
            fs.lock_existing(&lock_path)
        } else {
            fs.lock(&lock_path).map(Some)
        };
        let lock = lock.map_err(|e| {
            if e.kind() == std::io::ErrorKind::WouldBlock {
                Error::Locked(dir.clone())
            } else {
                Error::io(&lock_path, e)
            }
        })?;
        let stats = Arc::new(IoStats::default());
        let env = Env {
            fs: fs.clone(),
            stats: stats.clone(),
            direct_reads: opts.direct_reads,
            mmap_reads: opts.mmap_reads,
        };
        let tables = Arc::new(TableCtx {
            env: env.clone(),
            cache: BlockCache::new(opts.block_cache_bytes)
                .holding_index_and_filter(opts.cache_index_and_filter_blocks),
            dir: dir.clone(),
            open: crate::table::OpenTables::new(opts.max_open_files),
            purge: crate::table::purge::Purger::spawn("scree-purge"),
        });
        let inner = recover(dir, env, opts, tables, stats)?;
        let inner = Arc::new(inner);
        // The handle comes first: if a thread cannot be started, dropping it stops the ones
        // already started, closes the purge thread and releases the lock.
        let db = Db {
            h: Arc::new(DbHandle {
                inner: inner.clone(),
                workers: Mutex::new(Vec::new()),
                _lock: lock,
            }),
        };
        // A read-only database runs no flush or compaction.
        let general = if inner.opts.read_only {
            0
        } else {
            inner.opts.background_threads
        };
        let flush_only_threads = if inner.opts.read_only {
            0
        } else {
            inner.opts.flush_threads
        };
        for i in 0..general + flush_only_threads {
            let w = inner.clone();
            let flush_only = i >= general;
            let name = if flush_only {
                format!("scree-flush-{}", i - general)
            } else {
                format!("scree-bg-{i}")
            };
            let h = std::thread::Builder::new()
                .name(name)
                .spawn(move || w.worker(flush_only))
                .map_err(|e| Error::io("thread", e))?;
            db.h.workers.lock().push(h);
        }
        // Recovered memtables may already be over budget, and compactions may be due.
        inner.bg_cv.notify_all();
        if !inner.opts.read_only {
            // The only immutable memtables now are what the WALs gave (when they spanned
            // several: `recover`). The open returns once they are flushed, as LevelDB's and
            // RocksDB's do: a process that exits right after (a tool, a short-lived job) would
            // otherwise leave them to the next open, and the WALs would pile up again.
            inner.wait_for_immutable_memtables()?;
        }
        Ok(db)
    }

    fn inner(&self) -> &Arc<DbInner> {
        &self.h.inner
    }

    /// Opens the keyspace `name`, creating it with `opts` if it does not exist. The layout is
    /// persisted: reopening with another layout is `InvalidArgument`. Other options may change.
    pub fn keyspace(&self, name: &str, opts: KeyspaceOptions) -> Result<Keyspace> {
        opts.validate()?;
        if name.is_empty() || name.len() > 255 {
            return Err(Error::InvalidArgument(
                "keyspace names are 1..=255 bytes".into(),
            ));
        }
        let inner = self.inner();
        let mut m = inner.manifest.lock();
        let existing = inner
            .keyspaces
            .read()
            .values()
            .find(|k| k.name == name)
            .cloned();
        if let Some(core) = existing {
            if core.kind != opts.layout {
                return Err(Error::InvalidArgument(format!(
                    "keyspace {name:?} was created with layout `{}`, not `{}`",
                    core.kind, opts.layout
                )));
            }
            core.layout.configure(&opts);
            *core.opts.write() = Arc::new(opts);
            return Ok(Keyspace {
                h: self.h.clone(),
                core,
            });
        }
        inner.check_writable("creating a keyspace")?;
        let policy = layout::new_layout(opts.layout)?;
        policy.configure(&opts);
        // A manifest may hold the largest id (crafted, or 2^32 keyspaces): no id is reused.
        let Some(id) = inner
            .keyspaces
            .read()
            .keys()
            .max()
            .map_or(Some(1), |m| m.checked_add(1))
        else {
            return Err(Error::Unsupported(format!(
                "cannot create keyspace {name:?}: keyspace ids are used up to {}",
                u32::MAX
            )));
        };
        let mut ks_edit = KsEdit::new(id);
        policy.init_records(&opts, &mut ks_edit);
        let wal_no = inner.wal_number.load(Ordering::SeqCst);
        ks_edit.log_number = Some(wal_no);
        let empty = policy.empty_version_with_key(&inner.tables, inner.hash_key);
        let version = empty.apply(&ks_edit, &inner.tables)?;
        let edit = Edit {
            new_keyspaces: vec![KeyspaceDef {
                id,
                name: name.to_string(),
                layout: opts.layout.encode(),
            }],
            keyspaces: vec![ks_edit],
            ..Default::default()
        };
        inner.log_edit(&mut m, &edit)?;
        let (wb, kind) = (opts.write_buffer_bytes, opts.layout);
        let core = Arc::new(KsCore {
            id,
            name: name.to_string(),
            kind: opts.layout,
            opts: RwLock::new(Arc::new(opts)),
            layout: policy,
            sv: RwLock::new(Arc::new(SuperVersion {
                mem: Arc::new(Memtable::for_layout(&kind, wal_no, wb)),
                imms: Vec::new(),
                version,
            })),
            log_number: AtomicU64::new(wal_no),
            level_writes: Mutex::new(Vec::new()),
            manual: Mutex::new(ManualScopes::default()),
        });
        inner.keyspaces.write().insert(id, core.clone());
        Ok(Keyspace {
            h: self.h.clone(),
            core,
        })
    }

    /// Opens the existing keyspace `name` with the options it has now: its layout's defaults
    /// after a reopen, until `Db::keyspace` names it with the application's options. For
    /// tools that do not know how a keyspace was created; `InvalidArgument` if there is none
    /// of that name.
    pub fn existing_keyspace(&self, name: &str) -> Result<Keyspace> {
        let core = self
            .inner()
            .keyspaces
            .read()
            .values()
            .find(|k| k.name == name)
            .cloned();
        match core {
            Some(core) => Ok(Keyspace {
                h: self.h.clone(),
                core,
            }),
            None => Err(Error::InvalidArgument(format!(
                "no keyspace named {name:?} (the database has {:?})",
                self.keyspace_names()
            ))),
        }
    }

    /// Names of the keyspaces in the database.
    pub fn keyspace_names(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .inner()
            .keyspaces
            .read()
            .values()
            .map(|k| k.name.clone())
            .collect();
        v.sort();
        v
    }

    /// Applies a batch atomically.
    pub fn write(&self, batch: WriteBatch, opts: &WriteOptions) -> Result<()> {
        if let Some(e) = batch.error {
            return Err(Error::InvalidArgument(e));
        }
        if batch.count == 0 {
            return Ok(());
        }
        if batch.db_id.is_some_and(|id| id != self.id()) {
            return Err(Error::InvalidArgument(
                "the batch names keyspaces of another database".into(),
            ));
        }
        let ub = batch.user_bytes();
        self.inner()
            .write(batch.rep, batch.count, batch.ks_ids, ub, opts.sync)
    }

    fn id(&self) -> u64 {
        self.h.inner.instance
    }

    /// A snapshot of the current state.
    pub fn snapshot(&self) -> Snapshot {
        let inner = self.inner();
        let mut s = inner.snapshots.lock();
        let seq = inner.last_seq.load(Ordering::Acquire);
        *s.entry(seq).or_insert(0) += 1;
        Snapshot {
            h: self.h.clone(),
            seq,
        }
    }

    /// Freezes every non-empty memtable and waits until all are flushed.
    pub fn flush(&self) -> Result<()> {
        let inner = self.inner();
        inner.check_writable("flush")?;
        {
            let mut wal = inner.wal.lock();
            inner.check_bg_error()?;
            let all: Vec<Arc<KsCore>> = inner.keyspaces.read().values().cloned().collect();
            if all.iter().any(|k| !k.sv().mem.is_empty()) {
                inner.rotate(&mut wal, &all)?;
            }
        }
        inner.wait_for_immutable_memtables()
    }

    /// Flushes, then compacts every keyspace as far as its layout goes: the tables present
    /// at the call, and every table made from them while it runs, end where the layout puts
    /// fully compacted data (one sorted level at the bottom for `leveled`, one table per
    /// guard of the deepest level for `fragmented`, one generation per last-level container
    /// for `trie`). Data written meanwhile is compacted only where a job merges it with
    /// older data, so writes that go on do not keep the call from returning.
    pub fn compact(&self) -> Result<()> {
        self.inner().check_writable("compact")?;
        self.flush()?;
        let inner = self.inner();
        let all: Vec<Arc<KsCore>> = inner.keyspaces.read().values().cloned().collect();
        for ks in all {
            // Under the pick lock, no compaction installs between listing the tables and
            // registering the scope that later installs update.
            let token = {
                let _pick = inner.pick_lock.lock();
                let files = ks.sv().version.files();
                let scope = ManualScope::new(files.iter().map(|f| f.meta.file_no));
                ks.manual.lock().register(scope)
            };
            let _token = ScopeToken { ks: &ks, token };
            loop {
                inner.check_bg_error()?;
                let opts = ks.opts();
                let smallest = inner.smallest_snapshot();
                let step = {
                    let ctx = inner.job_ctx(&opts, smallest);
                    let _pick = inner.pick_lock.lock();
                    let scope = ks.manual.lock().get(token);
                    ks.layout.manual(&ks.sv().version, &ctx, &scope)
                };
                match step {
                    ManualStep::Done => break,
                    ManualStep::Wait => {
                        let mut bg = inner.bg.lock();
                        inner.bg_cv.wait_for(&mut bg, Duration::from_millis(20));
                    }
                    ManualStep::Run(job) => {
                        // As in the background: a failed compaction stops writes.
                        if let Err(e) = guard_panic("compaction", || inner.run_compaction(&ks, job))
                        {
                            inner
                                .set_bg_error(&format!("compaction of keyspace {:?}", ks.name), &e);
                            return Err(e);
                        }
                    }
                }
            }
        }
        inner.bg_cv.notify_all();
        // The tables it made obsolete are deleted when it returns.
        inner.tables.purge.wait_idle();
        Ok(())
    }

    /// Waits until no flush or compaction is running or due, and the tables they made
    /// obsolete are deleted. Returns at once on a database opened read-only, where none runs.
    pub fn wait_for_compactions(&self) -> Result<()> {
        let inner = self.inner();
        if inner.opts.read_only {
            return Ok(());
        }
        let mut bg = inner.bg.lock();
        loop {
            inner.check_bg_error()?;
            let busy = bg.running > 0
                || inner.keyspaces.read().values().any(|k| {
                    let sv = k.sv();
                    !sv.imms.is_empty() || k.layout.needs_compaction(&sv.version, &k.opts())
                });
            if !busy {
                drop(bg);
                // The tables those jobs made obsolete are deleted too.
                inner.tables.purge.wait_idle();
                return Ok(());
            }
            inner.bg_cv.notify_all();
            inner.bg_cv.wait_for(&mut bg, Duration::from_millis(20));
        }
    }

    /// Statistics since open.
    pub fn stats(&self) -> Stats {
        let inner = self.inner();
        let mut s = inner.stats.snapshot();
        s.block_cache_usage_bytes = inner.tables.cache.usage_bytes();
        let mut ks: Vec<Arc<KsCore>> = inner.keyspaces.read().values().cloned().collect();
        ks.sort_by_key(|k| k.id);
        for k in ks {
            let sv = k.sv();
            s.keyspaces.push(KeyspaceStats {
                name: k.name.clone(),
                layout: k.kind.name().to_string(),
                levels: sv.version.level_stats(),
                memtable_bytes: std::iter::once(&sv.mem)
                    .chain(sv.imms.iter())
                    .map(|m| m.approximate_bytes() as u64)
                    .sum(),
                level_reads: sv
                    .version
                    .level_reads()
                    .into_iter()
                    .map(|mut r| {
                        let g = s.gets.max(1) as f64;
                        r.data_block_reads_per_get = r.data_block_reads as f64 / g;
                        r.metadata_block_reads_per_get = r.metadata_block_reads as f64 / g;
                        r
                    })
                    .collect(),
                level_writes: k
                    .level_writes
                    .lock()
                    .iter()
                    .enumerate()
                    .filter(|(_, w)| w.flush_bytes + w.compaction_bytes + w.moved_bytes > 0)
                    .map(|(level, w)| {
                        let written = (w.flush_bytes + w.compaction_bytes) as f64;
                        LevelWrites {
                            level: level as u32,
                            bytes_per_user_byte: written / s.user_bytes.max(1) as f64,
                            ..w.clone()
                        }
                    })
                    .collect(),
            });
        }
        s
    }

    /// Checks every keyspace's layout invariants (used by tests and `scree check`).
    pub fn check_invariants(&self) -> Result<()> {
        for k in self.inner().keyspaces.read().values() {
            k.sv().version.check_invariants().map_err(|d| {
                Error::corruption(&self.inner().dir, 0, format!("keyspace {}: {d}", k.name))
            })?;
        }
        Ok(())
    }

    /// The database directory.
    pub fn path(&self) -> &Path {
        &self.inner().dir
    }
}

impl Keyspace {
    /// The keyspace's id: how its WAL records and manifest edits name it (`scree wal`).
    pub fn id(&self) -> u32 {
        self.core.id
    }
    pub(crate) fn db_id(&self) -> u64 {
        self.h.inner.instance
    }

    /// The keyspace's name.
    pub fn name(&self) -> &str {
        &self.core.name
    }

    /// The keyspace's layout.
    pub fn layout(&self) -> LayoutKind {
        self.core.kind
    }

    /// Stores `value` under `key`.
    pub fn put(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        self.put_opt(key, value, &WriteOptions::default())
    }

    /// Every live file of the keyspace, level by level in its layout's order, with where the
    /// layout keeps it (`ldb manifest_dump`'s view; `scree dump` prints it).
    pub fn tables(&self) -> Vec<crate::stats::TableInfo> {
        self.core
            .sv()
            .version
            .table_places()
            .into_iter()
            .map(|p| {
                let m = &p.file.meta;
                crate::stats::TableInfo {
                    file: format!("{:06}.{}", m.file_no, p.file.ext),
                    level: p.level,
                    place: p.place,
                    guard: p.guard,
                    size: m.size,
                    entries: m.entries,
                    smallest_key: m.smallest_user().to_vec(),
                    largest_key: m.largest_user().to_vec(),
                    min_seq: m.min_seq,
                    max_seq: m.max_seq,
                }
            })
            .collect()
    }

    /// Stores `value` under `key` with write options.
    pub fn put_opt(
        &self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        opts: &WriteOptions,
    ) -> Result<()> {
        let (k, v) = (key.as_ref(), value.as_ref());
        check_key(k)?;
        check_value(v)?;
        let rep = batch::single(self.core.id, ValueKind::Put, k, v);
        self.h.inner.write(
            rep,
            1,
            KsIds::from_elem(self.core.id, 1),
            (k.len() + v.len()) as u64,
            opts.sync,
        )
    }

    /// Deletes `key`.
    pub fn delete(&self, key: impl AsRef<[u8]>) -> Result<()> {
        self.delete_opt(key, &WriteOptions::default())
    }

    /// Deletes `key` with write options.
    pub fn delete_opt(&self, key: impl AsRef<[u8]>, opts: &WriteOptions) -> Result<()> {
        let k = key.as_ref();
        check_key(k)?;
        let rep = batch::single(self.core.id, ValueKind::Delete, k, &[]);
        self.h.inner.write(
            rep,
            1,
            KsIds::from_elem(self.core.id, 1),
            k.len() as u64,
            opts.sync,
        )
    }

    /// The current value of `key`.
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Value>> {
        self.get_at(key.as_ref(), None)
    }

    /// Reads at `seq`, or (None) at the latest sequence number. The latest one is loaded after
    /// the super-version: a flush or compaction may drop a version that a newer version
    /// shadows once both are older than every snapshot, so a read at a sequence number loaded
    /// before the super-version could find only the newer version (invisible to it) and miss
    /// the key. Loaded after, every output in the super-version was made with a smallest
    /// snapshot at or below it (tests/concurrency.rs found this on `fragmented`).
    fn get_at(&self, key: &[u8], seq: Option<u64>) -> Result<Option<Value>> {
        self.h.inner.stats.gets.fetch_add(1, Ordering::Relaxed);
        let sv = self.core.sv();
        let seq = seq.unwrap_or_else(|| self.h.inner.last_seq.load(Ordering::Acquire));
        let lk = crate::key::InternalKey::new(key, seq, ValueKind::Put);
        for m in std::iter::once(&sv.mem).chain(sv.imms.iter()) {
            match m.get_key(key, &lk) {
                Lookup::Value(v) => return Ok(Some(v)),
                Lookup::Deleted => return Ok(None),
                Lookup::Absent => {}
            }
        }
        // Parallel search: the last level on a search thread, the levels above it here.
        let found = match &self.h.inner.search_pool {
            Some(pool) => pool.get(&sv.version, key, seq)?,
            None => sv.version.get(key, seq)?,
        };
        match found {
            Lookup::Value(v) => Ok(Some(v)),
            _ => Ok(None),
        }
    }

    /// Iterates at `seq`, or (None) at the latest sequence number, loaded after the
    /// super-version for the reason given at [`Keyspace::get_at`].
    fn range_at(&self, lo: Bound<Vec<u8>>, hi: Bound<Vec<u8>>, seq: Option<u64>) -> RangeIter {
        let sv = self.core.sv();
        let seq = seq.unwrap_or_else(|| self.h.inner.last_seq.load(Ordering::Acquire));
        let mems: Vec<Arc<Memtable>> = std::iter::once(sv.mem.clone())
            .chain(sv.imms.iter().cloned())
            .collect();
        RangeIter::new(iterator::sources_for(mems, sv.version.clone()), seq, lo, hi)
            .holding(self.h.clone())
    }

    /// Iterates `range` in key order (reverse with `.rev()` / `next_back`).
    pub fn range<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> RangeIter {
        self.range_at(own(range.start_bound()), own(range.end_bound()), None)
    }

    /// Iterates every key starting with `prefix`.
    pub fn prefix(&self, prefix: impl AsRef<[u8]>) -> RangeIter {
        let (lo, hi) = prefix_bounds(prefix.as_ref());
        self.range_at(lo, hi, None)
    }
}

fn own<K: AsRef<[u8]>>(b: Bound<&K>) -> Bound<Vec<u8>> {
    match b {
        Bound::Included(k) => Bound::Included(k.as_ref().to_vec()),
        Bound::Excluded(k) => Bound::Excluded(k.as_ref().to_vec()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

fn prefix_bounds(p: &[u8]) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    let hi = prefix_end(p).map_or(Bound::Unbounded, Bound::Excluded);
    (Bound::Included(p.to_vec()), hi)
}

impl Snapshot {
    fn check(&self, ks: &Keyspace) -> Result<()> {
        if !Arc::ptr_eq(&self.h.inner, &ks.h.inner) {
            return Err(Error::InvalidArgument(
                "snapshot and keyspace belong to different databases".into(),
            ));
        }
        Ok(())
    }

    /// The value of `key` in `ks` at the snapshot.
    pub fn get(&self, ks: &Keyspace, key: impl AsRef<[u8]>) -> Result<Option<Value>> {
        self.check(ks)?;
        ks.get_at(key.as_ref(), Some(self.seq))
    }

    /// Iterates `range` of `ks` at the snapshot.
    pub fn range<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, ks: &Keyspace, range: R) -> RangeIter {
        if let Err(e) = self.check(ks) {
            return iterator::failed(e);
        }
        ks.range_at(
            own(range.start_bound()),
            own(range.end_bound()),
            Some(self.seq),
        )
    }

    /// Iterates the keys of `ks` starting with `prefix` at the snapshot.
    pub fn prefix(&self, ks: &Keyspace, prefix: impl AsRef<[u8]>) -> RangeIter {
        if let Err(e) = self.check(ks) {
            return iterator::failed(e);
        }
        let (lo, hi) = prefix_bounds(prefix.as_ref());
        ks.range_at(lo, hi, Some(self.seq))
    }

    /// The snapshot's sequence number.
    pub fn sequence(&self) -> u64 {
        self.seq
    }
}

impl DbInner {
    /// Waits until no keyspace has an immutable memtable (all flushed).
    fn wait_for_immutable_memtables(&self) -> Result<()> {
        self.bg_cv.notify_all();
        let mut bg = self.bg.lock();
        loop {
            self.check_bg_error()?;
            let pending = self
                .keyspaces
                .read()
                .values()
                .any(|k| !k.sv().imms.is_empty());
            if !pending {
                return Ok(());
            }
            self.bg_cv.wait_for(&mut bg, Duration::from_millis(50));
        }
    }

    /// `Error::ReadOnly` naming `op` if the database was opened read-only.
    fn check_writable(&self, op: &'static str) -> Result<()> {
        if self.opts.read_only {
            return Err(Error::ReadOnly {
                path: self.dir.clone(),
                op,
            });
        }
        Ok(())
    }

    fn check_bg_error(&self) -> Result<()> {
        match &*self.bg_error.lock() {
            Some(e) => Err(Error::BackgroundError(e.clone())),
            None => Ok(()),
        }
    }

    /// Records the first background error: what failed (`what`: the operation) and why.
    fn set_bg_error(&self, what: &str, e: &Error) {
        let mut g = self.bg_error.lock();
        if g.is_none() {
            *g = Some(match e {
                // A panic turned into an error already reads as a background error.
                Error::BackgroundError(m) => format!("{what}: {m}"),
                e => format!("{what}: {e}"),
            });
        }
        drop(g);
        self.bg_cv.notify_all();
    }

    fn smallest_snapshot(&self) -> u64 {
        let s = self.snapshots.lock();
        let last = self.last_seq.load(Ordering::Acquire);
        s.keys().next().copied().unwrap_or(last).min(last)
    }

    fn job_ctx<'a>(&'a self, opts: &'a KeyspaceOptions, smallest_snapshot: u64) -> JobCtx<'a> {
        JobCtx {
            tables: &self.tables,
            next_file: &self.next_file,
            smallest_snapshot,
            opts,
            stats: &self.stats,
            hash_key: self.hash_key,
            flush_point: None,
        }
    }

    fn keyspace(&self, id: u32) -> Option<Arc<KsCore>> {
        self.keyspaces.read().get(&id).cloned()
    }

    // ---- write path ----

    fn write(
        &self,
        rep: Vec<u8>,
        count: u32,
        ks_ids: KsIds,
        user_bytes: u64,
        sync: bool,
    ) -> Result<()> {
        self.check_writable("write")?;
        let me = Pending {
            rep,
            count,
            ks_ids,
            user_bytes,
            sync,
            result: Mutex::new(None),
        };
        let mut q = self.queue.lock();
        if !q.leader && q.pending.is_empty() {
            // Nobody is writing or waiting: lead a group of one without queueing (no shared
            // allocation, no hand-off). Writers arriving meanwhile queue behind the leader.
            q.leader = true;
            drop(q);
            let res = self.write_group_guarded(&[&me], &mut 0);
            let mut q = self.queue.lock();
            q.leader = false;
            if !q.pending.is_empty() {
                self.queue_cv.notify_all();
            }
            return res;
        }
        let me = Arc::new(me);
        q.pending.push_back(me.clone());
        loop {
            if let Some(r) = me.result.lock().take() {
                return r;
            }
            if !q.leader && q.pending.front().is_some_and(|f| Arc::ptr_eq(f, &me)) {
                break;
            }
            self.queue_cv.wait(&mut q);
        }
        q.leader = true;
        let mut group = Vec::new();
        let mut bytes = 0u64;
        while let Some(p) = q.pending.front() {
            if !group.is_empty() && bytes + p.user_bytes > 4 << 20 {
                break;
            }
            bytes += p.user_bytes;
            if let Some(p) = q.pending.pop_front() {
                group.push(p);
            }
        }
        drop(q);
        let refs: Vec<&Pending> = group.iter().map(|p| &**p).collect();
        let mut applied = 0;
        let res = self.write_group_guarded(&refs, &mut applied);
        for (i, p) in group.iter().enumerate() {
            let r = match &res {
                Ok(()) => Ok(()),
                Err(_) if i < applied => Ok(()),
                Err(e) => Err(e.duplicate()),
            };
            *p.result.lock() = Some(r);
        }
        let mut q = self.queue.lock();
        q.leader = false;
        self.queue_cv.notify_all();
        drop(q);
        let r = me.result.lock().take();
        r.unwrap_or(Ok(()))
    }

    /// [`DbInner::write_group`], with a panic (a bug) turned into a background error: the
    /// leader flag is then still cleared, so later writers get the error instead of waiting
    /// for a leader that is gone.
    fn write_group_guarded(&self, group: &[&Pending], applied: &mut usize) -> Result<()> {
        let res = guard_panic("write", || self.write_group(group, applied));
        if let Err(e @ Error::BackgroundError(_)) = &res {
            self.set_bg_error("write", e);
        }
        res
    }

    /// Writes a group's batches to the WAL and the memtables. On an error, `applied` is the
    /// number of leading batches that were applied all the same (and are acknowledged).
    fn write_group(&self, group: &[&Pending], applied: &mut usize) -> Result<()> {
        self.check_bg_error()?;
        let mut wal = self.wal.lock();
        let mut ids: KsIds = group
            .iter()
            .flat_map(|p| p.ks_ids.iter().copied())
            .collect();
        ids.sort_unstable();
        ids.dedup();
        let mut cores = Vec::with_capacity(ids.len());
        for id in ids {
            let ks = self
                .keyspace(id)
                .ok_or_else(|| Error::InvalidArgument(format!("no keyspace with id {id}")))?;
            cores.push(ks);
        }
        for ks in &cores {
            self.make_room(&mut wal, ks)?;
        }
        let mut seq = self.last_seq.load(Ordering::Acquire);
        // Refused before anything is logged: a record past the largest sequence number would
        // be acknowledged and then refuse to replay.
        let count: u64 = group.iter().map(|p| u64::from(p.count)).sum();
        if seq.saturating_add(count) > key::MAX_SEQ {
            return Err(Error::Unsupported(format!(
                "sequence numbers exhausted: {seq} used, {count} more needed, the largest is {}",
                key::MAX_SEQ
            )));
        }
        let mut sync = false;
        let first_seq = seq + 1;
        for (i, p) in group.iter().enumerate() {
            // One record per batch: the compact header (a few bytes on the stack), then the
            // batch's entries as they are.
            if let Err(e) = wal.log.add_batch(seq + 1, p.count, &p.rep) {
                self.set_bg_error("WAL append", &e);
                // The batches before this one are whole records in the log and replay after a
                // reopen: failing them too would make a write that returned an error appear
                // later (found in review, 2026-11-24). Those that asked for no sync, up to the
                // first that did, are applied and acknowledged; a synced one cannot be (its
                // sync will not come) and may reappear, as after a failed sync.
                let done = group.get(..i).unwrap_or_default();
                *applied = done.iter().take_while(|p| !p.sync).count();
                self.apply_group(&cores, done.get(..*applied).unwrap_or_default(), first_seq);
                return Err(e);
            }
            seq += u64::from(p.count);
            sync |= p.sync;
        }
        let r = if sync {
            self.sync_old_logs().and_then(|_| wal.log.sync())
        } else {
            wal.log.flush()
        };
        if let Err(e) = r {
            self.set_bg_error(if sync { "WAL sync" } else { "WAL write" }, &e);
            return Err(e);
        }
        self.apply_group(&cores, group, first_seq);
        Ok(())
    }

    /// Inserts the logged batches of `group` (sequence numbers from `first_seq` on) into the
    /// memtables of `cores` and publishes the last sequence number (must hold the WAL lock).
    fn apply_group(&self, cores: &[Arc<KsCore>], group: &[&Pending], first_seq: u64) {
        if group.is_empty() {
            return;
        }
        // The memtables stay current while the WAL lock is held (only `rotate` swaps them).
        let mems: Vec<(u32, Arc<Memtable>)> =
            cores.iter().map(|k| (k.id, k.sv().mem.clone())).collect();
        let mut s = first_seq;
        let mut user_bytes = 0;
        for p in group {
            // `rep` was encoded by this crate (WriteBatch or batch::single): every entry decodes.
            for e in batch::entries(&p.rep, p.count).flatten() {
                if let Some((_, mem)) = mems.iter().find(|(id, _)| *id == e.ks) {
                    mem.insert(e.key, s, e.kind, e.value);
                }
                s += 1;
            }
            user_bytes += p.user_bytes;
        }
        self.stats
            .user_bytes
            .fetch_add(user_bytes, Ordering::Relaxed);
        let last: u64 = group.iter().map(|p| u64::from(p.count)).sum();
        self.last_seq.store(first_seq - 1 + last, Ordering::Release);
    }

    /// Makes sure `ks` can take a write: applies back-pressure and freezes a full memtable.
    fn make_room(&self, wal: &mut WalState, ks: &Arc<KsCore>) -> Result<()> {
        let mut slowed = false;
        loop {
            self.check_bg_error()?;
            let sv = ks.sv();
            let opts = ks.opts();
            match ks.layout.pressure(&sv.version, &opts) {
                Pressure::Stop => {
                    self.stall(false);
                    continue;
                }
                Pressure::Slowdown if !slowed => {
                    slowed = true;
                    let t = Instant::now();
                    std::thread::sleep(Duration::from_millis(1));
                    self.stats
                        .slowdown_micros
                        .fetch_add(t.elapsed().as_micros() as u64, Ordering::Relaxed);
                    continue;
                }
                _ => {}
            }
            if sv.mem.approximate_bytes() < opts.write_buffer_bytes {
                return Ok(());
            }
            if sv.imms.len() >= self.opts.max_immutable_memtables {
                self.stall(true);
                continue;
            }
            self.rotate(wal, std::slice::from_ref(ks))?;
            self.bg_cv.notify_all();
            return Ok(());
        }
    }

    /// Waits up to 10 ms for background work; `memtable`: the wait is for a flush.
    fn stall(&self, memtable: bool) {
        let t = Instant::now();
        let mut bg = self.bg.lock();
        self.bg_cv.notify_all();
        self.bg_cv.wait_for(&mut bg, Duration::from_millis(10));
        drop(bg);
        let us = t.elapsed().as_micros() as u64;
        self.stats.stall_micros.fetch_add(us, Ordering::Relaxed);
        if memtable {
            self.stats
                .memtable_stall_micros
                .fetch_add(us, Ordering::Relaxed);
        }
    }

    /// Starts a new WAL and freezes the memtables of `freeze` (must hold the WAL lock).
    fn rotate(&self, wal: &mut WalState, freeze: &[Arc<KsCore>]) -> Result<()> {
        // The old log is sealed, naming the new one, and not synced here: its sync (and the
        // directory entry of the new one) wait for the flush of its memtable or the next synced
        // write, both of which sync every retired log first (`sync_old_logs`). A power loss
        // before that can keep writes of the new log while losing the old log's tail; the
        // missing seal tells recovery that the history ends there (`wal_chain`; until
        // 2026-11-25 the writer synced the old log here: 2.8 s of a 6.5 s fill with 4 MiB
        // memtables).
        let n = self.next_file.fetch_add(1, Ordering::SeqCst);
        if let Err(e) = wal.log.seal(n).and_then(|()| wal.log.flush()) {
            self.set_bg_error("WAL seal at rotation", &e);
            return Err(e);
        }
        let w = match self
            .env
            .create_log(&wal_path(&self.dir, n), WriteCause::Wal)
        {
            Ok(w) => w,
            Err(e) => {
                self.set_bg_error("WAL creation", &e);
                return Err(e);
            }
        };
        self.wal_dir_unsynced.store(true, Ordering::SeqCst);
        self.live_logs.lock().push(n);
        let old = std::mem::replace(&mut wal.log, LogWriter::new(w));
        self.old_logs.lock().push(old);
        wal.number = n;
        self.wal_number.store(n, Ordering::SeqCst);
        let all: Vec<Arc<KsCore>> = self.keyspaces.read().values().cloned().collect();
        for ks in all {
            let mut g = ks.sv.write();
            let frozen = freeze.iter().any(|f| f.id == ks.id) && !g.mem.is_empty();
            if frozen {
                let mut imms = vec![g.mem.clone()];
                imms.extend(g.imms.iter().cloned());
                *g = Arc::new(SuperVersion {
                    mem: Arc::new(Memtable::for_layout(
                        &ks.kind,
                        n,
                        ks.opts().write_buffer_bytes,
                    )),
                    imms,
                    version: g.version.clone(),
                });
            } else if g.mem.is_empty() {
                // An empty memtable needs no old log.
                *g = Arc::new(SuperVersion {
                    mem: Arc::new(Memtable::for_layout(
                        &ks.kind,
                        n,
                        ks.opts().write_buffer_bytes,
                    )),
                    imms: g.imms.clone(),
                    version: g.version.clone(),
                });
            }
        }
        Ok(())
    }

    // ---- background work ----

    /// A background thread: flushes first, then compactions (none if `flush_only`).
    fn worker(self: Arc<Self>, flush_only: bool) {
        loop {
            let work = {
                let mut bg = self.bg.lock();
                loop {
                    if bg.closing {
                        return;
                    }
                    if self.bg_error.lock().is_none() {
                        // A panic while picking (a bug) stops background work with an error
                        // writers see, instead of ending this thread silently.
                        let mut picked = None;
                        let r = guard_panic("picking background work", || {
                            picked = self.pick_work(&mut bg, flush_only);
                            Ok(())
                        });
                        if let Err(e) = r {
                            self.set_bg_error("picking background work", &e);
                        }
                        if let Some(w) = picked {
                            bg.running += 1;
                            break w;
                        }
                    }
                    self.bg_cv.wait_for(&mut bg, Duration::from_millis(200));
                }
            };
            let (what, res) = match work {
                Work::Flush(ks) => ("flush", self.run_claimed_flush(&ks).map_err(|e| (ks, e))),
                Work::Compact(ks, job) => (
                    "compaction",
                    guard_panic("compaction", || self.run_compaction(&ks, job))
                        .map_err(|e| (ks, e)),
                ),
            };
            if let Err((ks, e)) = res {
                self.set_bg_error(&format!("{what} of keyspace {:?}", ks.name), &e);
            }
            let mut bg = self.bg.lock();
            bg.running -= 1;
            self.bg_cv.notify_all();
        }
    }

    /// A keyspace with an immutable memtable nobody is flushing, now marked as being flushed
    /// (by the caller, who then runs [`DbInner::run_claimed_flush`]).
    fn claim_flush(&self, bg: &mut BgState) -> Option<Arc<KsCore>> {
        let all: Vec<Arc<KsCore>> = self.keyspaces.read().values().cloned().collect();
        let ks = all
            .into_iter()
            .find(|ks| !bg.flushing.contains(&ks.id) && !ks.sv().imms.is_empty())?;
        bg.flushing.insert(ks.id);
        Some(ks)
    }

    /// Flushes a keyspace [`DbInner::claim_flush`] returned, and releases the claim.
    fn run_claimed_flush(&self, ks: &Arc<KsCore>) -> Result<()> {
        let res = guard_panic("flush", || self.run_flush(ks));
        self.bg.lock().flushing.remove(&ks.id);
        res
    }

    fn pick_work(&self, bg: &mut BgState, flush_only: bool) -> Option<Work> {
        if let Some(ks) = self.claim_flush(bg) {
            return Some(Work::Flush(ks));
        }
        if flush_only {
            return None;
        }
        let all: Vec<Arc<KsCore>> = self.keyspaces.read().values().cloned().collect();
        let smallest = self.smallest_snapshot();
        let _pick = self.pick_lock.lock();
        for ks in &all {
            let opts = ks.opts();
            let ctx = self.job_ctx(&opts, smallest);
            if let Some(job) = ks.layout.pick(&ks.sv().version, &ctx) {
                return Some(Work::Compact(ks.clone(), job));
            }
        }
        None
    }

    /// Syncs every retired WAL, and the directory entries of the WALs created since the last
    /// directory sync (so a newer log can hold synced writes, or a flush can make a log
    /// obsolete, without a hole in the history).
    fn sync_old_logs(&self) -> Result<()> {
        let _one = self.log_sync.lock();
        if self.wal_sync_failed.load(Ordering::SeqCst) {
            // A writer that waited here while another thread's sync failed must not retry
            // it and acknowledge a synced write on top (found in review, 2026-11-25).
            self.check_bg_error()?;
            return Err(Error::BackgroundError(
                "sync of a retired WAL failed earlier".into(),
            ));
        }
        let old = std::mem::take(&mut *self.old_logs.lock());
        for mut log in old {
            // A retired log takes no more records: only its appended bytes are written.
            if let Err(e) = log.finish() {
                self.wal_sync_failed.store(true, Ordering::SeqCst);
                self.set_bg_error("sync of a retired WAL", &e);
                return Err(e);
            }
        }
        self.sync_wal_dir()
    }

    /// Makes the directory entries of new WALs durable, if any was created since the last
    /// time. Called before every manifest edit too: an edit can make older logs obsolete
    /// (`log_number`), and the next log must then be found after a power loss.
    fn sync_wal_dir(&self) -> Result<()> {
        let _one = self.wal_dir_sync.lock();
        if self.wal_dir_unsynced.swap(false, Ordering::SeqCst) {
            if let Err(e) = self.env.sync_dir(&self.dir) {
                self.wal_dir_unsynced.store(true, Ordering::SeqCst);
                self.set_bg_error("directory sync after WAL creation", &e);
                return Err(e);
            }
        }
        Ok(())
    }

    /// A compaction's [`JobCtx::flush_point`]: when every background thread is busy and a
    /// keyspace has an immutable memtable nobody is flushing, flushes it on this thread.
    fn flush_if_waiting(&self) -> Result<()> {
        let ks = {
            let mut bg = self.bg.lock();
            let threads = self.opts.background_threads + self.opts.flush_threads;
            if bg.closing || bg.running < threads {
                return Ok(());
            }
            let Some(ks) = self.claim_flush(&mut bg) else {
                return Ok(());
            };
            ks
        };
        let res = self.run_claimed_flush(&ks);
        self.bg_cv.notify_all();
        self.stats
            .flushes_in_compactions
            .fetch_add(1, Ordering::Relaxed);
        res
    }

    fn run_flush(&self, ks: &Arc<KsCore>) -> Result<()> {
        let start = std::time::Instant::now();
        let res = self.flush_oldest(ks);
        let us = u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.stats.flush_micros.fetch_add(us, Ordering::Relaxed);
        self.stats.max_flush_micros.fetch_max(us, Ordering::Relaxed);
        res
    }

    fn flush_oldest(&self, ks: &Arc<KsCore>) -> Result<()> {
        self.sync_old_logs()?;
        let sv = ks.sv();
        let Some(imm) = sv.imms.last().cloned() else {
            return Ok(());
        };
        let opts = ks.opts();
        let ctx = self.job_ctx(&opts, self.smallest_snapshot());
        let mut edit = ks.layout.flush(&ctx, &sv.version, &imm)?;
        self.stats.flushes.fetch_add(1, Ordering::Relaxed);
        self.install(ks, &mut edit, Some(&imm))
    }

    fn run_compaction(&self, ks: &Arc<KsCore>, job: Box<dyn Job>) -> Result<()> {
        let opts = ks.opts();
        let trivial = job.is_trivial();
        let start = std::time::Instant::now();
        // Microseconds of flushes run at this job's flush points (counted as flush time).
        let flushed_us = AtomicU64::new(0);
        let flush_point = || {
            let t = std::time::Instant::now();
            let r = self.flush_if_waiting();
            let us = u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX);
            flushed_us.fetch_add(us, Ordering::Relaxed);
            r
        };
        let mut ctx = self.job_ctx(&opts, self.smallest_snapshot());
        if self.opts.flush_in_compactions {
            ctx.flush_point = Some(&flush_point);
        }
        let res = self.run_job(ks, job, &ctx, trivial);
        let us = u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX);
        let job_us = us.saturating_sub(flushed_us.load(Ordering::Relaxed));
        self.stats
            .compaction_micros
            .fetch_add(job_us, Ordering::Relaxed);
        res
    }

    fn run_job(
        &self,
        ks: &Arc<KsCore>,
        mut job: Box<dyn Job>,
        ctx: &JobCtx<'_>,
        trivial: bool,
    ) -> Result<()> {
        let mut edit = job.run(ctx)?;
        if trivial {
            self.stats.trivial_moves.fetch_add(1, Ordering::Relaxed);
        } else {
            self.stats.compactions.fetch_add(1, Ordering::Relaxed);
        }
        let pick = self.pick_lock.lock();
        let r = self.install(ks, &mut edit, None);
        // The job's input reservation ends only now that its edit is installed.
        drop(job);
        drop(pick);
        r
    }

    /// Logs `edit` to the manifest and publishes the new version; `flushed` is the memtable the
    /// edit replaces.
    fn install(
        &self,
        ks: &Arc<KsCore>,
        edit: &mut KsEdit,
        flushed: Option<&Arc<Memtable>>,
    ) -> Result<()> {
        edit.id = ks.id;
        let mut m = self.manifest.lock();
        let sv = ks.sv();
        if let Some(imm) = flushed {
            // After this flush, the oldest memtable still holding data decides the log number.
            let oldest = sv
                .imms
                .iter()
                .rev()
                .find(|x| !Arc::ptr_eq(x, imm))
                .unwrap_or(&sv.mem);
            edit.log_number = Some(oldest.log_number);
        }
        let new_version = sv.version.apply(edit, &self.tables)?;
        let added: HashSet<u64> = edit.added.iter().map(|a| a.meta.file_no).collect();
        let merged: HashSet<u64> = edit
            .removed
            .iter()
            .copied()
            .filter(|f| !added.contains(f))
            .collect();
        // Only the merged tables are needed (their bytes, and marking them obsolete): a flush
        // or a move merges none and skips listing every live table, which costs milliseconds
        // under the manifest lock in a store of 100k tables (scale review, 2026-11-24).
        let old_files = if merged.is_empty() {
            Vec::new()
        } else {
            sv.version.files()
        };
        if !edit.added.is_empty() {
            // The new files' directory entries must be durable before a manifest edit names
            // them, or a power loss leaves the manifest pointing at missing files.
            if let Err(err) = self.env.sync_dir(&self.dir) {
                self.set_bg_error("directory sync before a manifest edit", &err);
                return Err(err);
            }
        }
        let mut e = Edit {
            next_file_no: Some(self.next_file.load(Ordering::SeqCst)),
            last_seq: Some(self.last_seq.load(Ordering::Acquire)),
            keyspaces: vec![edit.clone()],
            ..Default::default()
        };
        if flushed.is_some() {
            // The flush synced the retired WALs when it started; a rotation since then
            // retired another, unsynced, which the log numbers recorded here can move past.
            // A power loss could then lose its tail while the manifest says it is not needed
            // below tables holding older writes: recovery would end the history there and
            // refuse to open ("already holds later writes"). Found in review, 2026-11-25. The
            // log numbers are read first: every WAL below them was retired before this sync.
            e.keyspaces.extend(self.advanced_log_numbers(ks.id));
            self.sync_old_logs()?;
        }
        self.log_edit(&mut m, &e)?;
        for k in &e.keyspaces {
            if let (Some(n), Some(core)) = (k.log_number, self.keyspaces.read().get(&k.id)) {
                core.log_number.store(n, Ordering::SeqCst);
            }
        }
        ks.count_level_writes(edit, &old_files, &merged, flushed.is_some());
        for (_, scope) in ks.manual.lock().running.iter_mut() {
            scope.follow(edit.added.iter().map(|a| a.meta.file_no), &merged);
        }
        {
            let mut g = ks.sv.write();
            let imms = match flushed {
                Some(imm) => g
                    .imms
                    .iter()
                    .filter(|x| !Arc::ptr_eq(x, imm))
                    .cloned()
                    .collect(),
                None => g.imms.clone(),
            };
            *g = Arc::new(SuperVersion {
                mem: g.mem.clone(),
                imms,
                version: new_version,
            });
        }
        for f in old_files {
            if merged.contains(&f.meta.file_no) {
                f.mark_obsolete();
            }
        }
        self.maybe_roll_manifest(&mut m)?;
        drop(m);
        if flushed.is_some() {
            self.delete_obsolete_logs();
        }
        Ok(())
    }

    /// Log-number edits for the keyspaces other than `except` whose oldest memtable is on a
    /// newer WAL than the manifest records for them (an empty memtable moves to the new WAL at
    /// every rotation): recorded with a flush, so that a keyspace without writes does not keep
    /// every WAL alive. Must hold the manifest lock.
    fn advanced_log_numbers(&self, except: u32) -> Vec<KsEdit> {
        let mut out = Vec::new();
        for k in self.keyspaces.read().values() {
            if k.id == except {
                continue;
            }
            let sv = k.sv();
            let oldest = sv.imms.last().unwrap_or(&sv.mem).log_number;
            if oldest > k.log_number.load(Ordering::SeqCst) {
                let mut e = KsEdit::new(k.id);
                e.log_number = Some(oldest);
                out.push(e);
            }
        }
        out
    }

    fn log_edit(&self, m: &mut ManifestWriter, e: &Edit) -> Result<()> {
        // Nothing is logged after a failure: a failed append may have left part of a record
        // (a later record behind it would be dropped with the torn tail), and a failed roll-over
        // may already have pointed CURRENT at another manifest.
        self.check_bg_error()?;
        self.sync_wal_dir()?;
        if let Err(err) = m.append(e) {
            self.set_bg_error("manifest append", &err);
            return Err(err);
        }
        Ok(())
    }

    /// The whole state as one edit (must hold the manifest lock).
    fn snapshot_edit(&self) -> Edit {
        let mut e = Edit {
            next_file_no: Some(self.next_file.load(Ordering::SeqCst)),
            last_seq: Some(self.last_seq.load(Ordering::Acquire)),
            hash_key: Some(self.hash_key),
            features: Some(manifest::KNOWN_FEATURES),
            sealed_logs_from: Some(self.sealed_from),
            ..Default::default()
        };
        let mut all: Vec<Arc<KsCore>> = self.keyspaces.read().values().cloned().collect();
        all.sort_by_key(|k| k.id);
        for ks in all {
            e.new_keyspaces.push(KeyspaceDef {
                id: ks.id,
                name: ks.name.clone(),
                layout: ks.kind.encode(),
            });
            let mut k = KsEdit::new(ks.id);
            k.log_number = Some(ks.log_number.load(Ordering::SeqCst));
            ks.sv().version.snapshot(&mut k);
            e.keyspaces.push(k);
        }
        e
    }

    fn maybe_roll_manifest(&self, m: &mut ManifestWriter) -> Result<()> {
        if !m.due_for_roll_over(self.opts.max_manifest_bytes) {
            return Ok(());
        }
        let n = self.next_file.fetch_add(1, Ordering::SeqCst);
        let snap = self.snapshot_edit();
        let new = match ManifestWriter::create(&self.env, &self.dir, n, &snap) {
            Ok(w) => w,
            Err(e) => {
                self.set_bg_error("manifest roll-over", &e);
                return Err(e);
            }
        };
        let old = std::mem::replace(m, new);
        let _ = self
            .env
            .remove(&manifest::manifest_path(&self.dir, old.number));
        Ok(())
    }

    fn delete_obsolete_logs(&self) {
        let all: Vec<Arc<KsCore>> = self.keyspaces.read().values().cloned().collect();
        // Never take the WAL lock here: a stalled writer holds it while waiting for this flush.
        let current = self.wal_number.load(Ordering::SeqCst);
        let mut min_log = current;
        for ks in &all {
            // The log numbers the manifest records, not the memtables' (which can be ahead):
            // a log recovery would replay is never deleted, so the WALs it replays are the
            // whole chain since the oldest, and a missing one is a loss (`wal_chain`).
            let sv = ks.sv();
            let oldest = sv.imms.last().unwrap_or(&sv.mem).log_number;
            min_log = min_log
                .min(oldest)
                .min(ks.log_number.load(Ordering::SeqCst));
        }
        let doomed: Vec<u64> = {
            let mut logs = self.live_logs.lock();
            let d = logs.iter().copied().filter(|&n| n < min_log).collect();
            logs.retain(|&n| n >= min_log);
            d
        };
        if !doomed.is_empty() {
            // A retired log whose data is all in tables never needs its sync.
            let paths: Vec<PathBuf> = doomed.iter().map(|&n| wal_path(&self.dir, n)).collect();
            self.old_logs
                .lock()
                .retain(|l| !paths.iter().any(|p| p == l.path()));
            for p in paths {
                let _ = self.env.remove(&p);
            }
        }
    }
}

/// Replaces WAL `n` by its first `valid` bytes and removes the logs `later`, durably
/// (temp file, sync, rename, directory sync), so that a cut log never precedes a newer one.
fn truncate_log(
    env: &Env,
    dir: &Path,
    n: u64,
    data: &[u8],
    valid: u64,
    later: &[u64],
) -> Result<()> {
    // The later logs go first, durably: if the cut log were replaced first and only the
    // rename reached the disk, the next recovery would replay the later logs after the cut (a
    // hole in the history). Emptied first, a crash leaves the damaged log the last one with
    // records, and the next recovery cuts it at the same place. They are emptied, not removed:
    // one may be the newest WAL the manifest names, which must exist
    // (`wal_chain::newest_named`); the open removes them once its new manifest is durable.
    empty_logs(env, dir, later)?;
    if usize::try_from(valid).is_ok_and(|v| v >= data.len()) {
        // Nothing to cut: only the later logs go.
        return Ok(());
    }
    let path = wal_path(dir, n);
    let tmp = dir.join(format!("{n:06}.dbtmp"));
    let mut w = env.create(&tmp, WriteCause::Wal)?;
    let keep = usize::try_from(valid).unwrap_or(usize::MAX).min(data.len());
    w.append(data.get(..keep).unwrap_or_default())?;
    w.sync()?;
    drop(w);
    env.rename(&tmp, &path)?;
    env.sync_dir(dir)
}

/// A keyspace whose log number is above WAL `n` and which holds a table with writes after
/// `replayed_max` (the largest sequence number replayed up to the end of the history in `n`):
/// ending the history there is no point in time. Says which, for an error.
fn table_ahead(cores: &HashMap<u32, Arc<KsCore>>, n: u64, replayed_max: u64) -> Option<String> {
    for ks in cores.values() {
        if ks.log_number.load(Ordering::SeqCst) <= n {
            continue;
        }
        if let Some(f) = ks
            .sv()
            .version
            .files()
            .iter()
            .find(|f| f.meta.max_seq > replayed_max)
        {
            return Some(format!(
                "keyspace {:?} already holds later writes (table {:06}, sequence {} > {}): \
                 no consistent point in time",
                ks.name, f.meta.file_no, f.meta.max_seq, replayed_max
            ));
        }
    }
    None
}

/// Empties the WALs `logs` durably (they stay, empty, until the open's new manifest is durable
/// and removes them).
fn empty_logs(env: &Env, dir: &Path, logs: &[u64]) -> Result<()> {
    for &l in logs {
        let mut w = env.create(&wal_path(dir, l), WriteCause::Wal)?;
        w.sync()?;
    }
    if !logs.is_empty() {
        env.sync_dir(dir)?;
    }
    Ok(())
}

/// The first of the WALs `logs` holding a record that shows a completed sync of it.
fn first_synced_log(env: &Env, dir: &Path, logs: &[u64]) -> Result<Option<u64>> {
    for &m in logs {
        if wal_chain::read(&env.read_all(&wal_path(dir, m))?).synced {
            return Ok(Some(m));
        }
    }
    Ok(None)
}

enum Work {
    Flush(Arc<KsCore>),
    Compact(Arc<KsCore>, Box<dyn Job>),
}

/// Opens or creates the database state: manifest, keyspaces, WAL replay, cleanup.
fn recover(
    dir: PathBuf,
    env: Env,
    opts: Options,
    tables: Arc<TableCtx>,
    stats: Arc<IoStats>,
) -> Result<DbInner> {
    let current = dir.join(manifest::CURRENT);
    let names = env.list(&dir)?;
    let mut next_file = 2u64;
    let mut last_seq = 0u64;
    let mut hash_key = None;
    // No WAL is sealed unless the manifest says so (one written before seals: every WAL was
    // synced before the next held writes).
    let mut sealed_from = u64::MAX;
    // The features of the manifest's last snapshot.
    let mut features = 0u64;
    let mut cores: HashMap<u32, Arc<KsCore>> = HashMap::new();
    let mut old_manifest = None;
    if env.fs.exists(&current) {
        let n = manifest::read_current(&env, &dir)?;
        old_manifest = Some(n);
        let path = manifest::manifest_path(&dir, n);
        let edits = manifest::read_manifest(&env, &path)?;
        // Hash-placed layouts need the key before their first version exists.
        hash_key = edits.iter().find_map(|e| e.hash_key);
        // Every manifest Scree writes records the key in its snapshot record. Without it a new
        // random key would place every lookup of a hash layout in the wrong containers: its
        // data would read as absent (found in review, 2026-11-24).
        if hash_key.is_none() && edits.iter().any(|e| !e.new_keyspaces.is_empty()) {
            return Err(Error::corruption(
                &path,
                0,
                "manifest defines keyspaces but records no placement-hash key",
            ));
        }
        for e in edits {
            if let Some(f) = e.features.filter(|f| f & !manifest::KNOWN_FEATURES != 0) {
                return Err(Error::Unsupported(format!(
                    "{} needs format features {:#x} this build does not read (written by a newer build)",
                    path.display(),
                    f & !manifest::KNOWN_FEATURES
                )));
            }
            if let Some(n) = e.next_file_no {
                if n > MAX_FILE_NO {
                    return Err(Error::corruption(
                        &path,
                        0,
                        format!("next file number {n} out of range"),
                    ));
                }
                next_file = next_file.max(n);
            }
            if let Some(s) = e.last_seq {
                if s > key::MAX_SEQ {
                    return Err(Error::corruption(
                        &path,
                        0,
                        format!(
                            "last sequence number {s} above the largest ({})",
                            key::MAX_SEQ
                        ),
                    ));
                }
                last_seq = last_seq.max(s);
            }
            if e.hash_key.is_some() {
                hash_key = e.hash_key;
            }
            if let Some(n) = e.sealed_logs_from {
                sealed_from = n;
            }
            if let Some(f) = e.features {
                features = f;
            }
            for d in &e.new_keyspaces {
                if cores.contains_key(&d.id) {
                    continue;
                }
                // Two keyspaces of one name: `Db::keyspace` would open either (whichever a
                // hash map met first), so writes could land in one and be read from the other
                // on the next open (found in review, 2026-11-24).
                if cores.values().any(|k| k.name == d.name) {
                    return Err(Error::corruption(
                        &path,
                        0,
                        format!("two keyspaces named {:?}", d.name),
                    ));
                }
                let kind = LayoutKind::decode(&d.layout).ok_or_else(|| {
                    Error::corruption(&path, 0, format!("keyspace {:?}: unknown layout", d.name))
                })?;
                let policy = layout::new_layout(kind)?;
                // The application's options for it, if given at open: what the recovered
                // memtables' flush and the first compactions run with.
                let kopts = match opts.keyspace_options.iter().find(|(n, _)| *n == d.name) {
                    Some((_, o)) if o.layout != kind => {
                        return Err(Error::InvalidArgument(format!(
                            "Options::keyspace_options gives keyspace {:?} layout `{}`, but it was created with `{kind}`",
                            d.name, o.layout
                        )))
                    }
                    Some((_, o)) => {
                        policy.configure(o);
                        o.clone()
                    }
                    None => KeyspaceOptions::new(kind),
                };
                let version = policy.empty_version_with_key(&tables, hash_key.unwrap_or_default());
                cores.insert(
                    d.id,
                    Arc::new(KsCore {
                        id: d.id,
                        name: d.name.clone(),
                        kind,
                        opts: RwLock::new(Arc::new(kopts)),
                        layout: policy,
                        sv: RwLock::new(Arc::new(SuperVersion {
                            mem: Arc::new(Memtable::for_layout(&kind, 0, 0)),
                            imms: Vec::new(),
                            version,
                        })),
                        log_number: AtomicU64::new(0),
                        level_writes: Mutex::new(Vec::new()),
                        manual: Mutex::new(ManualScopes::default()),
                    }),
                );
            }
            for k in &e.keyspaces {
                let ks = cores.get(&k.id).ok_or_else(|| {
                    Error::corruption(&path, 0, format!("edit for unknown keyspace {}", k.id))
                })?;
                let mut g = ks.sv.write();
                let v = g
                    .version
                    .apply(k, &tables)
                    .map_err(|err| Error::corruption(&path, 0, err.to_string()))?;
                *g = Arc::new(SuperVersion {
                    mem: g.mem.clone(),
                    imms: Vec::new(),
                    version: v,
                });
                if let Some(n) = k.log_number {
                    ks.log_number.store(n, Ordering::SeqCst);
                }
            }
        }
    } else if let Some(found) = names.iter().find(|n| match parse_file_name(n) {
        // CURRENT is written last when a database is created: without it, manifests and
        // empty logs are the leftovers of a creation that did not finish (no write was ever
        // acknowledged), and the database starts afresh. Any data means CURRENT was lost, and
        // starting afresh would delete it (found in review: a directory whose CURRENT and
        // manifest were gone reopened empty, its tables deleted).
        Some((num, "log")) => log_may_hold_data(env.fs.as_ref(), &wal_path(&dir, num)),
        Some((_, ext)) => is_table_ext(ext),
        None => false,
    }) {
        return Err(Error::corruption(
            &current,
            0,
            format!("CURRENT is missing but the directory holds database data ({found})"),
        ));
    } else if opts.read_only {
        return Err(Error::InvalidArgument(format!(
            "{} holds no database (no {}): a read-only open does not create one",
            dir.display(),
            manifest::CURRENT
        )));
    }
    // Every file the manifest names must exist, and be named once: a table named by two
    // keyspaces (or twice by one) was accepted, and the first compaction of one deleted the
    // file the other still read (found in review, 2026-11-24).
    let present: HashSet<&str> = names.iter().map(String::as_str).collect();
    let mut named: HashSet<(u64, &str)> = HashSet::new();
    for ks in cores.values() {
        for f in ks.sv().version.files() {
            let name = format!("{:06}.{}", f.meta.file_no, f.ext);
            if !named.insert((f.meta.file_no, f.ext)) {
                return Err(Error::corruption(
                    dir.join(&name),
                    0,
                    format!("named twice by the manifest (keyspace {:?})", ks.name),
                ));
            }
            if !present.contains(name.as_str()) {
                return Err(Error::corruption(
                    dir.join(&name),
                    0,
                    "table named by the manifest is missing",
                ));
            }
            if f.meta.file_no > MAX_FILE_NO {
                return Err(Error::corruption(
                    dir.join(&name),
                    0,
                    "table file number out of range",
                ));
            }
            next_file = next_file.max(f.meta.file_no + 1);
        }
    }
    // Replay WAL files.
    let min_log = cores
        .values()
        .map(|k| k.log_number.load(Ordering::SeqCst))
        .min()
        .unwrap_or(0);
    let mut logs: Vec<u64> = names
        .iter()
        .filter_map(|n| parse_file_name(n))
        .filter(|(_, ext)| *ext == "log")
        .map(|(n, _)| n)
        .collect();
    logs.sort_unstable();
    for &n in &logs {
        if n > MAX_FILE_NO {
            return Err(Error::corruption(
                wal_path(&dir, n),
                0,
                "WAL file number out of range",
            ));
        }
        next_file = next_file.max(n + 1);
    }
    // The WALs the manifest says exist must be there: without one, writes it held would be
    // lost with no sign (a WAL removed by hand, or the directory copied without WALs).
    let log_numbers: Vec<(String, u64)> = cores
        .values()
        .map(|k| (k.name.clone(), k.log_number.load(Ordering::SeqCst)))
        .collect();
    let missing = wal_chain::missing_required(&logs, &log_numbers, sealed_from, features);
    let mut replay: Vec<u64> = logs.iter().copied().filter(|&n| n >= min_log).collect();
    // Point in time with a required WAL missing: the history ends before it.
    let mut ends_before_missing = None;
    if let Some((w, detail)) = missing {
        if opts.wal_recovery != WalRecovery::PointInTime {
            return Err(Error::corruption(wal_path(&dir, w), 0, detail));
        }
        // Later WALs are emptied durably before anything newer exists, as when a WAL is cut
        // (`truncate_log`), but only once the check below has accepted this point in time
        // (a refused open changes nothing: found in review, it had emptied WALs holding
        // synced writes).
        let later: Vec<u64> = replay.iter().copied().filter(|&n| n > w).collect();
        replay.retain(|&n| n < w);
        ends_before_missing = Some((w, detail, later));
    }
    let mut live_logs = Vec::new();
    // Replayed logs that put at least one entry into a memtable: the others hold nothing a
    // keyspace still needs (empty, or only writes already in tables) and are removed below,
    // once the new manifest is durable. Kept, they piled up: a log per open while nothing
    // was flushed, every one replayed by every later open (found in review, 2026-11-24).
    let mut needed_logs: HashSet<u64> = HashSet::new();
    // The largest sequence number replayed so far (entries of flushed keyspaces included).
    let mut replayed_max = 0u64;
    'logs: for (i, &n) in replay.iter().enumerate() {
        let path = wal_path(&dir, n);
        let data = env.read_all(&path)?;
        let file = wal_chain::read(&data);
        live_logs.push(n);
        for &(ty, r, offset) in &file.batches {
            // Type 1 (fixed header, older builds), 2 (compact) and 3 all replay.
            let (seq, entries) = batch::decode(ty, r).map_err(|(o, d)| {
                Error::corruption(
                    &path,
                    offset + log::HEADER as u64 + o as u64,
                    format!("WAL batch: {d}"),
                )
            })?;
            for (j, e) in entries.iter().enumerate() {
                let s = seq + j as u64;
                last_seq = last_seq.max(s);
                replayed_max = replayed_max.max(s);
                let Some(ks) = cores.get(&e.ks) else {
                    // A keyspace created after its manifest edit was lost cannot be: keyspace
                    // creation is logged before any write to it.
                    return Err(Error::corruption(
                        &path,
                        offset,
                        format!("WAL names unknown keyspace {}", e.ks),
                    ));
                };
                if n < ks.log_number.load(Ordering::SeqCst) {
                    continue;
                }
                let mut g = ks.sv.write();
                if g.mem.is_empty() && g.mem.log_number != n {
                    *g = Arc::new(SuperVersion {
                        mem: Arc::new(Memtable::for_layout(
                            &ks.kind,
                            n,
                            ks.opts().write_buffer_bytes,
                        )),
                        imms: Vec::new(),
                        version: g.version.clone(),
                    });
                }
                g.mem.insert(&e.key, s, e.kind, &e.value);
                needed_logs.insert(n);
            }
        }
        let later = replay.get(i + 1..).unwrap_or_default();
        let strict = opts.wal_recovery != WalRecovery::PointInTime;
        let cut = match wal_chain::judge(n, &file, later.first().copied(), sealed_from) {
            Ok(wal_chain::Next::Continue) => None,
            Ok(wal_chain::Next::EndsAt { offset, why }) => {
                // The later logs can hold only writes acknowledged without a sync: a synced
                // write syncs every retired log first. One that records a completed sync says
                // this log was durable whole, so its missing end is damage, not a crash.
                if strict {
                    if let Some(m) = first_synced_log(&env, &dir, later)? {
                        return Err(Error::corruption(
                            &path,
                            offset,
                            format!(
                                "{why}; but WAL {m:06} records a completed sync, which syncs \
                                 every older WAL first: durable writes are missing"
                            ),
                        ));
                    }
                }
                Some(offset)
            }
            Err((offset, detail)) => {
                if strict {
                    return Err(Error::corruption(&path, offset, detail));
                }
                Some(offset)
            }
        };
        if let Some(offset) = cut {
            // A keyspace flushed past this log may already hold, in its tables, writes made
            // after the cut; keeping them while the WAL loses the rest of their batches (and
            // the other keyspaces' writes in between) is no point in time. Refuse, as RocksDB
            // does ("SST file is ahead of WALs"), before anything is changed on disk.
            if let Some(ahead) = table_ahead(&cores, n, replayed_max) {
                return Err(Error::corruption(
                    &path,
                    offset,
                    format!("point-in-time recovery would cut the WAL here, but {ahead}"),
                ));
            }
            // The log ends here. Cut it durably to its valid prefix (and drop any later log)
            // before a newer WAL exists: otherwise the next recovery would find a torn record
            // in a log that is no longer the newest, or replay discarded records.
            // (A read-only open leaves the files as they are: it only stops replaying here.)
            if !opts.read_only {
                truncate_log(&env, &dir, n, &data, offset, later)?;
            }
            break 'logs;
        }
    }
    if let Some((w, detail, later)) = ends_before_missing {
        // As at a cut: a keyspace whose log number is above the missing WAL may hold, in its
        // tables, writes from after it. The writes before the end are those replayed and those
        // in the tables of keyspaces flushed only up to the missing WAL (found in review: with
        // nothing replayed, every table counted as later, and a copy without its WALs never
        // opened).
        let before_end = cores
            .values()
            .filter(|k| k.log_number.load(Ordering::SeqCst) <= w)
            .flat_map(|k| k.sv().version.files())
            .map(|f| f.meta.max_seq)
            .fold(replayed_max, u64::max);
        if let Some(ahead) = table_ahead(&cores, w, before_end) {
            return Err(Error::corruption(
                wal_path(&dir, w),
                0,
                format!(
                    "{detail}; point-in-time recovery would end the history before it, but {ahead}"
                ),
            ));
        }
        if !opts.read_only {
            empty_logs(&env, &dir, &later)?;
        }
    }
    // The replayed logs may hold writes that reached only the page cache before a process
    // crash: make them durable before a new WAL can hold synced writes, or a later power loss
    // could keep those and lose these (a hole in the history).
    if !opts.read_only {
        for &n in &live_logs {
            env.sync_file(&wal_path(&dir, n))?;
        }
    }
    let flush_recovered = !opts.read_only && needed_logs.len() > 1;
    live_logs.retain(|n| needed_logs.contains(n));
    let hash_key = hash_key.unwrap_or_else(rand::random);
    // New WAL and a fresh manifest holding the whole recovered state.
    let wal_no = next_file;
    let manifest_no = next_file + 1;
    next_file += 2;
    let wal_w = if opts.read_only {
        env.refusing_writer(&wal_path(&dir, wal_no), WriteCause::Wal)
    } else {
        env.create_log(&wal_path(&dir, wal_no), WriteCause::Wal)?
    };
    live_logs.push(wal_no);
    for ks in cores.values() {
        let mut g = ks.sv.write();
        // When the writes to replay span several WALs, what they gave a keyspace is flushed by
        // the background threads (LevelDB and RocksDB flush at every open). Left in the
        // memtable, it kept every replayed WAL alive, and an application that opened, wrote
        // a little and closed again piled up one more WAL per open, each replayed by every
        // later open (found in session 22 with `scree put`). One WAL's worth stays in the
        // memtable, as any unflushed memtable does; a read-only open runs no flush.
        let recovered = !g.mem.is_empty() && flush_recovered;
        if g.mem.is_empty() || recovered {
            *g = Arc::new(SuperVersion {
                mem: Arc::new(Memtable::for_layout(
                    &ks.kind,
                    wal_no,
                    ks.opts().write_buffer_bytes,
                )),
                imms: if recovered {
                    vec![g.mem.clone()]
                } else {
                    Vec::new()
                },
                version: g.version.clone(),
            });
        }
    }
    let search_pool = if opts.parallel_search {
        Some(Arc::new(layout::parallel::SearchPool::new(2)?))
    } else {
        None
    };
    let inner_partial = |manifest: ManifestWriter, wal: LogWriter| DbInner {
        instance: NEXT_INSTANCE.fetch_add(1, Ordering::Relaxed),
        dir: dir.clone(),
        env: env.clone(),
        opts: opts.clone(),
        tables: tables.clone(),
        next_file: AtomicU64::new(next_file),
        last_seq: AtomicU64::new(last_seq),
        hash_key,
        search_pool: search_pool.clone(),
        keyspaces: RwLock::new(cores.clone()),
        queue: Mutex::new(Queue::default()),
        queue_cv: Condvar::new(),
        wal: Mutex::new(WalState {
            log: wal,
            number: wal_no,
        }),
        wal_number: AtomicU64::new(wal_no),
        old_logs: Mutex::new(Vec::new()),
        log_sync: Mutex::new(()),
        wal_dir_unsynced: AtomicBool::new(false),
        wal_dir_sync: Mutex::new(()),
        wal_sync_failed: AtomicBool::new(false),
        sealed_from: wal_no,
        live_logs: Mutex::new(live_logs.clone()),
        manifest: Mutex::new(manifest),
        bg: Mutex::new(BgState::default()),
        bg_cv: Condvar::new(),
        bg_error: Mutex::new(None),
        pick_lock: Mutex::new(()),
        snapshots: Mutex::new(BTreeMap::new()),
        stats: stats.clone(),
    };
    // Build the snapshot edit with a temporary view of the state.
    let mut snap = Edit {
        next_file_no: Some(next_file),
        last_seq: Some(last_seq),
        hash_key: Some(hash_key),
        features: Some(manifest::KNOWN_FEATURES),
        sealed_logs_from: Some(wal_no),
        ..Default::default()
    };
    let mut ids: Vec<u32> = cores.keys().copied().collect();
    ids.sort_unstable();
    for id in ids {
        if let Some(ks) = cores.get(&id) {
            snap.new_keyspaces.push(KeyspaceDef {
                id,
                name: ks.name.clone(),
                layout: ks.kind.encode(),
            });
            let mut k = KsEdit::new(id);
            // The first WAL the keyspace still needs: its oldest memtable's (the WAL where
            // replay first gave it an entry; the new WAL when it got none). No older WAL holds
            // a write of it that is not in a table, and this one is kept by this open, so the
            // log number names a WAL that exists (`FEATURE_LOG_NUMBERS_EXIST`).
            let sv = ks.sv();
            let needed = sv.imms.last().unwrap_or(&sv.mem).log_number;
            let needed = needed.max(ks.log_number.load(Ordering::SeqCst));
            if !opts.read_only {
                ks.log_number.store(needed, Ordering::SeqCst);
            }
            k.log_number = Some(needed);
            sv.version.snapshot(&mut k);
            snap.keyspaces.push(k);
        }
    }
    if opts.read_only {
        // Nothing below runs: no manifest is written and no file removed.
        let number = old_manifest.unwrap_or_default();
        let manifest = ManifestWriter::refusing(&env, &dir, number);
        return Ok(inner_partial(manifest, LogWriter::new(wal_w)));
    }
    let manifest = ManifestWriter::create(&env, &dir, manifest_no, &snap)?;
    let inner = inner_partial(manifest, LogWriter::new(wal_w));
    // Remove files no one needs: old manifests, temp files, unreferenced tables, dead logs.
    let live_tables: HashSet<String> = cores
        .values()
        .flat_map(|k| k.sv().version.files())
        .map(|f| format!("{:06}.{}", f.meta.file_no, f.ext))
        .collect();
    let live_log_set: HashSet<u64> = live_logs.iter().copied().collect();
    for name in &names {
        let remove = if let Some(n) = name.strip_prefix("MANIFEST-") {
            // Only manifests Scree wrote (`MANIFEST-` and a number), not a user's
            // `MANIFEST-backup` (found in review, 2026-11-24).
            n.parse::<u64>().is_ok_and(|n| n != manifest_no)
        } else if name == "LOCK" || name == manifest::CURRENT {
            false
        } else if let Some((n, ext)) = parse_file_name(name) {
            // Only the kinds of file Scree writes: anything else in the directory is not ours
            // (found in review: opening a directory that was not a database deleted files
            // such as `2023.csv`).
            match ext {
                "log" => !live_log_set.contains(&n),
                "dbtmp" => true,
                ext if is_table_ext(ext) => !live_tables.contains(name),
                _ => false,
            }
        } else {
            false
        };
        if remove {
            let _ = env.remove(&dir.join(name));
        }
    }
    let _ = old_manifest;
    Ok(inner)
}

/// Runs one flush or compaction, turning a panic (a bug) into a background error: the
/// database then refuses writes with a message naming the bug, instead of a worker dying with
/// its job counted as running forever (`wait_for_compactions` and writers would wait for it).
fn guard_panic(what: &str, f: impl FnOnce() -> Result<()>) -> Result<()> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => {
            let msg = p
                .downcast_ref::<&str>()
                .map(|s| (*s).to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            Err(Error::BackgroundError(format!(
                "{what} panicked (a bug): {msg}"
            )))
        }
    }
}

#[cfg(test)]
mod panic_tests {
    use super::*;

    #[test]
    fn a_panicking_job_becomes_a_background_error() {
        let r = guard_panic("compaction", || panic!("guard nesting broken"));
        match r {
            Err(Error::BackgroundError(m)) => {
                assert!(m.contains("compaction panicked") && m.contains("guard nesting broken"))
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(guard_panic("flush", || Ok(())).is_ok());
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::field_reassign_with_default)]
mod wal_tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::batch::{encode_fixed, BatchEntry};
    use crate::fs::fault::{CrashMode, FaultFs};
    use crate::log::{frame, LogEnd};

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
        // Every snapshot names the features this build writes.
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
        assert_eq!(edits[0].features, Some(crate::manifest::KNOWN_FEATURES));
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

    /// Found by review (2026-11-24): a power loss that writes back a page before the appends
    /// filled it (`CrashMode::PagesOutOfOrder`) leaves zeros from the stale point to the page
    /// end. When that point lies fewer than 8 bytes before the page end, the reader called the
    /// gap corruption and the default recovery refused to open, although the damage is only a
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

    /// Found by review (2026-11-24): a value may hold bytes that frame a valid WAL record (here
    /// an empty type-2 record, as in a copy of a WAL). When a power loss cuts the unsynced
    /// record holding such a value after those bytes, the reader finds them as "a valid record
    /// after the bad one", calls the torn tail corruption, and the default recovery refuses to
    /// open, although only unsynced bytes were lost.
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
}
