//! `Db::open` (directory, lock, recovery, background threads) and the close: dropping the last
//! handle stops the threads, syncs the WAL and waits for queued deletions.

use std::path::Path;
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::Mutex;

use crate::cache::BlockCache;
use crate::error::{Error, Result};
use crate::fs::{std_fs::StdFs, Env, FileLock};
use crate::manifest;
use crate::options::Options;
use crate::stats::IoStats;
use crate::table::TableCtx;

use super::{recover, Db, DbInner};

/// The owner of the background threads; dropping the last handle closes the database.
pub(crate) struct DbHandle {
    pub(super) inner: Arc<DbInner>,
    pub(super) workers: Mutex<Vec<JoinHandle<()>>>,
    /// `None` for a read-only open of a directory without a lock file.
    pub(super) _lock: Option<Box<dyn FileLock>>,
}

impl Drop for DbHandle {
    fn drop(&mut self) {
        {
            let mut bg = self.inner.bg.lock();
            bg.closing = true;
            self.inner.bg_cv.notify_all();
        }
        #[cfg(test)]
        if let Some(s) = &self.inner.opts.job_script {
            s.abort("the database closed");
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
            // (rather than silently opening a fresh, empty database).
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
            compaction_wanted: Default::default(),
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
}
