//! [`PyDb`]: an open database (`scree.DB(path, **options)` / `scree.open`), the keyspaces,
//! batches and snapshots made from it, flush, compact, stats and close.

use std::path::PathBuf;
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use scree::{Db, Keyspace};

use crate::batch::PyWriteBatch;
use crate::errors::{detached, to_py, Fail};
use crate::keyspace::PyKeyspace;
use crate::options::{db_options, keyspace_options};
use crate::shared::{Open, Shared};
use crate::snapshot::PySnapshot;

/// An open Scree database: `scree.DB(path, **options)` or `scree.open(path, **options)`.
///
/// Options are the engine's `Options` fields (`block_cache_bytes`, `background_threads`,
/// `read_only`, `create_if_missing`, `wal_recovery="point_in_time"`, …); values are checked by
/// the engine (`InvalidArgumentError`), names and types here (`TypeError`). `device="smr-host"`
/// or `"smr-drive"` with `band_mb=40` runs it on the engine's emulated shingled device
/// (`stats()["device"]` has its counters); such a database reopens only in this process, with
/// the same device. A context manager:
/// `with scree.open(path) as db:` closes it at the end of the block. After `close()` every
/// handle made from it (keyspaces, iterators, snapshots, batches) raises `ClosedError`, and
/// the directory can be opened again. Safe to use from several threads; the GIL is released
/// during every call that may touch the disk.
#[pyclass(frozen, name = "DB", module = "scree")]
pub(crate) struct PyDb {
    shared: Arc<Shared>,
}

/// Keeps `ks` at the index of the keyspace of its name (a repeated `keyspace()` call gets the
/// same index), or appends it.
fn index_of(open: &mut Open, ks: Keyspace) -> usize {
    match open.keyspaces.iter().position(|k| k.name() == ks.name()) {
        Some(i) => {
            if let Some(slot) = open.keyspaces.get_mut(i) {
                *slot = ks;
            }
            i
        }
        None => {
            open.keyspaces.push(ks);
            open.keyspaces.len() - 1
        }
    }
}

impl PyDb {
    /// Opens (or, with `existing`, only looks up) the keyspace and hands out its index.
    fn open_keyspace(
        &self,
        py: Python<'_>,
        get: impl FnOnce(&Db) -> scree::Result<Keyspace> + Send,
    ) -> PyResult<PyKeyspace> {
        let shared = &self.shared;
        let (idx, name, layout) = detached(py, || {
            let mut g = shared.state.write();
            let open = g.as_mut().ok_or_else(|| shared.closed())?;
            let ks = get(&open.db)?;
            let (name, layout) = (ks.name().to_string(), ks.layout());
            Ok((index_of(open, ks), name, layout))
        })?;
        Ok(PyKeyspace::new(shared.clone(), idx, name, layout))
    }
}

#[pymethods]
impl PyDb {
    /// Opens the database at `path` (created if missing, unless `create_if_missing=False`).
    #[new]
    #[pyo3(signature = (path, **options))]
    fn new(py: Python<'_>, path: PathBuf, options: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        let opts = db_options(py, &path, options)?;
        let db = detached(py, || Ok(Db::open(&path, opts)?))?;
        Ok(PyDb {
            shared: Shared::new(path, db),
        })
    }

    /// The keyspace `name`, created with `layout` (`"leveled"`, `"fragmented"`, `"trie"`,
    /// `"semisorted:N"`, `"lightweight"`) and `options` if it does not exist. The layout is
    /// persisted: naming another one for an existing keyspace raises `InvalidArgumentError`.
    /// Options are `write_buffer_bytes`, `bloom_bits_per_key`, `block_size` and the fields of
    /// the layout's own options (`pile_size=4` for `trie`, …).
    #[pyo3(signature = (name, layout="trie", **options))]
    fn keyspace(
        &self,
        py: Python<'_>,
        name: &str,
        layout: &str,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<PyKeyspace> {
        let opts = keyspace_options(py, layout, options)?;
        self.open_keyspace(py, |db| db.keyspace(name, opts))
    }

    /// The existing keyspace `name`, with the options it has now (`InvalidArgumentError` if
    /// there is none of that name).
    fn existing_keyspace(&self, py: Python<'_>, name: &str) -> PyResult<PyKeyspace> {
        self.open_keyspace(py, |db| db.existing_keyspace(name))
    }

    /// Names of the database's keyspaces, sorted.
    fn keyspace_names(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        detached(py, || self.shared.with(|open| Ok(open.db.keyspace_names())))
    }

    /// A write batch: `with db.write_batch() as wb: wb.put(ks, k, v)`; written atomically at
    /// the end of the block (synced first with `sync=True`), not at all if the block raises.
    #[pyo3(signature = (sync=false))]
    fn write_batch(&self, py: Python<'_>, sync: bool) -> PyResult<PyWriteBatch> {
        if self.shared.is_closed() {
            return Err(to_py(py, self.shared.closed()));
        }
        Ok(PyWriteBatch::new(self.shared.clone(), sync))
    }

    /// A snapshot of every keyspace now: `with db.snapshot() as snap: snap.get(ks, k)`.
    fn snapshot(&self, py: Python<'_>) -> PyResult<PySnapshot> {
        let snap = detached(py, || self.shared.with(|open| Ok(open.db.snapshot())))?;
        Ok(PySnapshot::new(&self.shared, snap))
    }

    /// Writes every memtable to tables and waits until they are written.
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        detached(py, || self.shared.with(|open| Ok(open.db.flush()?)))
    }

    /// Flushes, then compacts every keyspace as far as its layout goes.
    fn compact(&self, py: Python<'_>) -> PyResult<()> {
        detached(py, || self.shared.with(|open| Ok(open.db.compact()?)))
    }

    /// Waits until no flush or compaction is running or due.
    fn wait_for_compactions(&self, py: Python<'_>) -> PyResult<()> {
        detached(py, || {
            self.shared.with(|open| Ok(open.db.wait_for_compactions()?))
        })
    }

    /// The engine's statistics since open, as a dict (the fields of `scree::Stats`:
    /// `user_bytes`, `bytes_written`, `write_amplification`, `keyspaces`, …).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let json = detached(py, || {
            self.shared.with(|open| {
                serde_json::to_string(&open.db.stats())
                    .map_err(|e| Fail::Invalid(format!("stats could not be encoded: {e}")))
            })
        })?;
        py.import("json")?.call_method1("loads", (json,))
    }

    /// Closes the database: waits for calls in flight, ends every iterator and snapshot made
    /// from it, stops background work and syncs the write-ahead log. Closing twice is harmless.
    fn close(&self, py: Python<'_>) {
        py.detach(|| self.shared.close());
    }

    /// Whether `close()` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.shared.is_closed()
    }

    /// The database directory.
    #[getter]
    fn path(&self) -> PathBuf {
        self.shared.path.clone()
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) -> bool {
        self.close(py);
        false
    }

    fn __repr__(&self) -> String {
        format!(
            "<scree.DB {}{}>",
            self.shared.path.display(),
            if self.shared.is_closed() {
                ", closed"
            } else {
                ""
            }
        )
    }
}
