//! [`PyWriteBatch`]: `with db.write_batch() as wb:` — puts and deletes across keyspaces,
//! written atomically when the block ends, and not at all if it raises.

use std::sync::Arc;

use parking_lot::Mutex;
use pyo3::prelude::*;
use scree::{WriteBatch, WriteOptions};

use crate::errors::{detached, to_py, Fail, Result};
use crate::keyspace::{same_db, PyKeyspace};
use crate::shared::{ks_at, Shared};

/// Puts and deletes, in one or several keyspaces of one database, applied all or nothing when
/// the `with` block ends without an exception. If the block raises, nothing is written. A key
/// or value the engine refuses (too long, shorter than a `semisorted` prefix) makes the write
/// at the block's end raise `InvalidArgumentError`, and nothing is written. `len(wb)` is the
/// number of operations. A batch is written once; using it afterwards raises `Error`.
#[pyclass(frozen, name = "WriteBatch", module = "scree")]
pub(crate) struct PyWriteBatch {
    shared: Arc<Shared>,
    sync: bool,
    /// None once written or discarded.
    batch: Mutex<Option<WriteBatch>>,
}

impl PyWriteBatch {
    pub(crate) fn new(shared: Arc<Shared>, sync: bool) -> Self {
        PyWriteBatch {
            shared,
            sync,
            batch: Mutex::new(Some(WriteBatch::new())),
        }
    }

    fn add(
        &self,
        py: Python<'_>,
        ks: &PyKeyspace,
        f: impl FnOnce(&mut WriteBatch, &scree::Keyspace),
    ) -> PyResult<()> {
        // In memory only: no disk, so the GIL is kept (no lock taken here waits on a thread
        // that needs it).
        self.shared
            .with(|open| {
                let idx = same_db(&self.shared, ks)?;
                let mut g = self.batch.lock();
                let b = g.as_mut().ok_or_else(spent)?;
                f(b, ks_at(open, idx)?);
                Ok(())
            })
            .map_err(|e| to_py(py, e))
    }
}

fn spent() -> Fail {
    Fail::Closed("the write batch was already written or discarded".into())
}

#[pymethods]
impl PyWriteBatch {
    /// Adds a put of `key` → `value` in `ks`.
    fn put(
        &self,
        py: Python<'_>,
        ks: &Bound<'_, PyKeyspace>,
        key: &[u8],
        value: &[u8],
    ) -> PyResult<()> {
        self.add(py, ks.get(), |b, ks| b.put(ks, key, value))
    }

    /// Adds a delete of `key` in `ks`.
    fn delete(&self, py: Python<'_>, ks: &Bound<'_, PyKeyspace>, key: &[u8]) -> PyResult<()> {
        self.add(py, ks.get(), |b, ks| b.delete(ks, key))
    }

    /// Removes every operation added so far.
    fn clear(&self, py: Python<'_>) -> PyResult<()> {
        // The lock is released before any Python object is made (making one may run Python
        // code, which may let a thread that waits for this lock take the GIL).
        let cleared = self.batch.lock().as_mut().map(WriteBatch::clear);
        cleared.ok_or_else(|| to_py(py, spent()))
    }

    /// Number of operations added.
    fn __len__(&self) -> usize {
        self.batch.lock().as_ref().map_or(0, WriteBatch::len)
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    /// Writes the batch if the block ended normally; discards it if it raised.
    #[pyo3(signature = (exc_type, _exc=None, _tb=None))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let batch = self.batch.lock().take();
        let Some(batch) = batch else {
            return Err(to_py(py, spent()));
        };
        if exc_type.is_some() {
            return Ok(false);
        }
        let opts = WriteOptions { sync: self.sync };
        detached(py, || -> Result<()> {
            self.shared.with(|open| Ok(open.db.write(batch, &opts)?))
        })?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        format!("<scree.WriteBatch of {} operations>", self.__len__())
    }
}
