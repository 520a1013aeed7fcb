//! The database: the state every handle shares ([`DbInner`]), the keyspaces' cores, and the
//! map of the modules that work on it.
//!
//! - `handle`: the public handles `Db`, `Keyspace`, `Snapshot` and their calls;
//! - `open`: `Db::open` and the close ([`DbHandle`]'s drop);
//! - `write`: the write path: group commit into the WAL, then the memtables; WAL rotation;
//! - `read`: the read path: memtables, then the layout's version;
//! - `background`: the flush and compaction threads, picking and running jobs;
//! - `install`: logging an edit to the manifest and publishing the new version;
//! - `ks_core`: a keyspace's shared state ([`KsCore`], [`SuperVersion`]);
//! - `recovery`: manifest replay, WAL replay and cleanup at open.
//!
//! Lock order. A thread holding a lock takes only locks further down this list (a lock may be
//! skipped; none is taken twice):
//!
//! 1. `queue` — the writers' queue; released before the group is written (its `Pending::result`
//!    slots are leaves).
//! 2. `wal` — the WAL writer, held by the group's leader, `Db::flush` and the close.
//! 3. `bg` — background-thread state; the write path takes it (under `wal`) only to stall.
//! 4. `pick_lock` — held while a compaction is picked, a manual step chosen, or an edit installed.
//! 5. `manifest` — the manifest writer, held while an edit is logged and published.
//! 6. `keyspaces` — the keyspace map (read to list, written to add).
//! 7. a keyspace's `KsCore::sv`, `opts`, `manual`, `level_writes` — one at a time.
//! 8. leaves, never held while taking another lock: `log_sync` (then `old_logs`, then
//!    `wal_dir_sync`), `live_logs`, `snapshots`, `bg_error`.

mod background;
mod delay;
mod handle;
mod install;
mod ks_core;
mod open;
mod read;
mod recovery;
#[cfg(test)]
pub(crate) mod script;
#[cfg(test)]
mod tests;
mod write;

pub use handle::{Db, Keyspace, Snapshot, WeakKeyspace};
pub(crate) use ks_core::{KsCore, SuperVersion};

use background::guard_panic;
use ks_core::ScopeToken;
use open::DbHandle;
use recovery::recover;

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Condvar, Mutex, RwLock};

use crate::batch::KsIds;
use crate::error::{Error, Result};
use crate::fs::{Env, FileSystem};
use crate::layout::{self, JobCtx};
use crate::log::LogWriter;
use crate::manifest::ManifestWriter;
use crate::options::{KeyspaceOptions, Options};
use crate::stats::IoStats;
use crate::table::TableCtx;

/// Path of WAL file `n`.
fn wal_path(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("{n:06}.log"))
}

struct Pending {
    /// The batch's entries, compact-encoded (batch::WriteBatch::rep): the WAL record's payload
    /// after its header.
    rep: Vec<u8>,
    count: u32,
    ks_ids: KsIds,
    user_bytes: u64,
    sync: bool,
    /// A conditional write's place in the queue: it leads a group of its own, which no other
    /// leader takes it into (`DbInner::write_exclusive`).
    exclusive: bool,
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
    /// Delayed writes: held with the log, as every write group passes here.
    delay: delay::WriteDelay,
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
    /// being written to another database. (Not the `DbInner` address: a database opened after
    /// another closed often gets the same one, and a batch of the closed database would be
    /// accepted by the new one, into whichever keyspace had the same id.)
    instance: u64,
    dir: PathBuf,
    env: Env,
    opts: Options,
    tables: Arc<TableCtx>,
    next_file: AtomicU64,
    last_seq: AtomicU64,
    hash_key: [u8; 16],
    /// Threads probing the last level during point lookups (`Options::parallel_search`).
    search_pool: Option<Arc<layout::parallel::WorkerPool>>,
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
    /// returns while another's sync covering its WAL is still running.
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

/// Whether the WAL at `path` may hold a write: a byte that is not zero (or it cannot be read).
/// A memory-mapped WAL is preallocated with zeros, and a process killed before its writer was
/// dropped leaves them (without this, a database whose creation was killed after its first WAL
/// existed could never be opened: the zeros would count as data).
pub(crate) fn log_may_hold_data(fs: &dyn FileSystem, path: &Path) -> bool {
    fs.read_all(path)
        .map_or(true, |data| data.iter().any(|&b| b != 0))
}

fn parse_file_name(name: &str) -> Option<(u64, &str)> {
    let (num, ext) = name.split_once('.')?;
    Some((num.parse().ok()?, ext))
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
}
