//! redb (a pure-Rust copy-on-write B-tree with transactions, the `redb` crate) behind the
//! benchmark's engine interface.
//!
//! redb has no write-ahead log: a write is durable when its transaction commits, and each
//! commit costs a tree-path copy and, with `Durability::Immediate`, an fsync. As redb's docs
//! recommend for bulk loads, puts and deletes therefore go into one open write transaction
//! that is committed when the key and value bytes written into it reach the write buffer size
//! (`--write-buffer-mb`, the memtable size the other engines get), when a phase ends
//! ([`BenchEngine::finish_writes`]), and when the engine is dropped. Every commit is
//! `Durability::Immediate` (redb's default; its `Durability::None` keeps a commit only in the
//! process's memory, which is weaker than the others' unsynced WAL). So redb fsyncs once per
//! batch where the others do not fsync at all, and a crash loses the open batch — acknowledged
//! puts the other engines' WAL would keep; the settings line says so. `--sync` commits
//! after every write.
//!
//! Reads see the open batch: while one is open they read through the write transaction
//! (under its lock), otherwise through a read-only table of the last commit shared by all
//! readers.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use anyhow::{Context, Result};
use redb::{
    Database, Durability, ReadOnlyTable, ReadableDatabase, ReadableTable, TableDefinition,
    WriteTransaction,
};

use crate::bench::engine::{BenchEngine, Counters, EResult, EngineConfig, EngineError};

/// The table every workload uses.
const TABLE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("bench");

type ReadTable = ReadOnlyTable<&'static [u8], &'static [u8]>;

/// The open write transaction and the key+value bytes written into it.
#[derive(Default)]
struct Batch {
    txn: Option<WriteTransaction>,
    bytes: usize,
}

/// An open redb database.
pub struct Redb {
    db: Database,
    batch: Mutex<Batch>,
    /// Whether `batch` holds an open transaction (readers then read through it).
    open_batch: AtomicBool,
    /// The table as of the last commit.
    committed: RwLock<Arc<ReadTable>>,
    /// Commit when a batch holds this many key+value bytes (0: after every write).
    batch_bytes: usize,
    settings: Vec<(String, String)>,
}

fn failed(e: impl std::fmt::Display) -> EngineError {
    EngineError::Failed(format!("redb: {e}"))
}

fn poisoned() -> EngineError {
    EngineError::Failed("redb: a thread panicked while holding the engine's lock".into())
}

/// Visits up to `limit` entries from the first key ≥ `start`.
fn scan_table<T: ReadableTable<&'static [u8], &'static [u8]>>(
    table: &T,
    start: &[u8],
    limit: usize,
    visit: &mut dyn FnMut(&[u8], &[u8]),
) -> EResult<usize> {
    let mut n = 0;
    if limit == 0 {
        return Ok(0);
    }
    for item in table.range::<&[u8]>(start..).map_err(failed)? {
        let (k, v) = item.map_err(failed)?;
        visit(k.value(), v.value());
        n += 1;
        if n == limit {
            break;
        }
    }
    Ok(n)
}

/// Visits every entry whose key starts with `prefix`.
fn scan_prefix_table<T: ReadableTable<&'static [u8], &'static [u8]>>(
    table: &T,
    prefix: &[u8],
    visit: &mut dyn FnMut(&[u8], &[u8]),
) -> EResult<usize> {
    let mut n = 0;
    for item in table.range::<&[u8]>(prefix..).map_err(failed)? {
        let (k, v) = item.map_err(failed)?;
        if !k.value().starts_with(prefix) {
            break;
        }
        visit(k.value(), v.value());
        n += 1;
    }
    Ok(n)
}

fn get_table<T: ReadableTable<&'static [u8], &'static [u8]>>(
    table: &T,
    key: &[u8],
    out: &mut Vec<u8>,
) -> EResult<bool> {
    match table.get(key).map_err(failed)? {
        Some(v) => {
            out.clear();
            out.extend_from_slice(v.value());
            Ok(true)
        }
        None => Ok(false),
    }
}

impl Redb {
    /// Opens (or creates) a database in the file `dir/redb`.
    pub fn open(dir: &Path, cfg: &EngineConfig) -> Result<Redb> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let path = dir.join("redb");
        let mut builder = Database::builder();
        if let Some(n) = cfg.block_cache_bytes {
            builder.set_cache_size(n);
        }
        let db = builder
            .create(&path)
            .with_context(|| format!("opening redb at {}", path.display()))?;
        // Create the table, so that readers always find it.
        let txn = db.begin_write().context("redb: first transaction")?;
        txn.open_table(TABLE).context("redb: creating the table")?;
        txn.commit().context("redb: first commit")?;
        let committed = Arc::new(
            db.begin_read()
                .context("redb: read transaction")?
                .open_table(TABLE)
                .context("redb: opening the table")?,
        );
        let batch_bytes = if cfg.sync { 0 } else { cfg.write_buffer_bytes };
        let settings = vec![
            ("version".into(), "4.6.0 (crate redb)".into()),
            (
                "transactions".into(),
                if cfg.sync {
                    "one per write, Durability::Immediate (fsync per write)".into()
                } else {
                    format!(
                        "one write transaction per batch of {batch_bytes} key+value bytes \
                         (the write buffer size), committed with Durability::Immediate \
                         (an fsync per batch) and at each phase's end"
                    )
                },
            ),
            (
                "cache_size".into(),
                cfg.block_cache_bytes
                    .map_or("default (1 GiB)".into(), |n| n.to_string()),
            ),
            (
                "differs".into(),
                "a B-tree: no WAL, no Bloom filter, no compression; a crash loses the open \
                 batch (acknowledged puts); no write-amplification or stall counters (WA \
                 from wchar)"
                    .into(),
            ),
        ];
        Ok(Redb {
            db,
            batch: Mutex::new(Batch::default()),
            open_batch: AtomicBool::new(false),
            committed: RwLock::new(committed),
            batch_bytes,
            settings,
        })
    }

    fn lock(&self) -> EResult<MutexGuard<'_, Batch>> {
        self.batch.lock().map_err(|_| poisoned())
    }

    /// Commits the open batch, if any, and shows it to readers. Called with the batch lock.
    fn commit(&self, batch: &mut Batch) -> EResult<()> {
        let Some(txn) = batch.txn.take() else {
            return Ok(());
        };
        batch.bytes = 0;
        txn.commit().map_err(failed)?;
        let table = self
            .db
            .begin_read()
            .map_err(failed)?
            .open_table(TABLE)
            .map_err(failed)?;
        *self.committed.write().map_err(|_| poisoned())? = Arc::new(table);
        self.open_batch.store(false, Ordering::Release);
        Ok(())
    }

    /// Runs `write` on the table of the open batch (opening one if needed), then commits if
    /// the batch is full.
    fn write(
        &self,
        bytes: usize,
        write: impl FnOnce(&mut redb::Table<'_, &'static [u8], &'static [u8]>) -> EResult<()>,
    ) -> EResult<()> {
        let mut batch = self.lock()?;
        if batch.txn.is_none() {
            let mut txn = self.db.begin_write().map_err(failed)?;
            txn.set_durability(Durability::Immediate).map_err(failed)?;
            batch.txn = Some(txn);
            self.open_batch.store(true, Ordering::Release);
        }
        if let Some(txn) = &batch.txn {
            let mut table = txn.open_table(TABLE).map_err(failed)?;
            write(&mut table)?;
        }
        batch.bytes += bytes;
        if batch.bytes >= self.batch_bytes {
            self.commit(&mut batch)?;
        }
        Ok(())
    }

    /// Runs `read` on the open batch if there is one, else on the last commit.
    fn read<R>(
        &self,
        read_batch: impl FnOnce(&redb::Table<'_, &'static [u8], &'static [u8]>) -> EResult<R>,
        read_committed: impl FnOnce(&ReadTable) -> EResult<R>,
    ) -> EResult<R> {
        if self.open_batch.load(Ordering::Acquire) {
            let batch = self.lock()?;
            if let Some(txn) = &batch.txn {
                let table = txn.open_table(TABLE).map_err(failed)?;
                return read_batch(&table);
            }
        }
        let table = Arc::clone(&*self.committed.read().map_err(|_| poisoned())?);
        read_committed(&table)
    }
}

impl Drop for Redb {
    fn drop(&mut self) {
        // Acknowledged puts stay in the database (`--db` keeps it for a later run).
        if let Err(e) = self.finish_writes() {
            eprintln!("redb: committing the last batch on close: {e}");
        }
    }
}

impl BenchEngine for Redb {
    fn engine(&self) -> &'static str {
        "redb"
    }

    fn layout(&self) -> Option<String> {
        None
    }

    fn put(&self, key: &[u8], value: &[u8]) -> EResult<()> {
        self.write(key.len() + value.len(), |t| {
            t.insert(key, value).map_err(failed)?;
            Ok(())
        })
    }

    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> EResult<bool> {
        // Both closures need `out`; only one runs.
        let out = std::cell::RefCell::new(out);
        self.read(
            |t| get_table(t, key, &mut out.borrow_mut()),
            |t| get_table(t, key, &mut out.borrow_mut()),
        )
    }

    fn delete(&self, key: &[u8]) -> EResult<()> {
        self.write(key.len(), |t| {
            t.remove(key).map_err(failed)?;
            Ok(())
        })
    }

    fn scan(
        &self,
        start: &[u8],
        limit: usize,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> EResult<usize> {
        // Both closures need `visit`; only one runs.
        let visit = std::cell::RefCell::new(visit);
        self.read(
            |t| scan_table(t, start, limit, &mut *visit.borrow_mut()),
            |t| scan_table(t, start, limit, &mut *visit.borrow_mut()),
        )
    }

    fn scan_prefix(&self, prefix: &[u8], visit: &mut dyn FnMut(&[u8], &[u8])) -> EResult<usize> {
        let visit = std::cell::RefCell::new(visit);
        self.read(
            |t| scan_prefix_table(t, prefix, &mut *visit.borrow_mut()),
            |t| scan_prefix_table(t, prefix, &mut *visit.borrow_mut()),
        )
    }

    fn finish_writes(&self) -> EResult<()> {
        let mut batch = self.lock()?;
        self.commit(&mut batch)
    }

    fn wait_for_compactions(&self) -> EResult<()> {
        // No background work: the open batch is committed at the phase's end.
        Ok(())
    }

    fn counters(&self) -> Counters {
        Counters::default()
    }

    fn settings(&self) -> Vec<(String, String)> {
        self.settings.clone()
    }

    fn wait_method(&self) -> &'static str {
        "nothing runs in the background (the phase's open batch is committed when it ends)"
    }
}
