//! [`PySnapshot`]: reads of every keyspace at one moment (`with db.snapshot() as snap:`).

use std::sync::Arc;

use parking_lot::RwLock;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use scree::Snapshot;

use crate::errors::{detached, Fail, Result};
use crate::iter::{scan, Bounds, Mode, PyIter};
use crate::keyspace::{bounds, same_db, PyKeyspace};
use crate::shared::{ks_at, Closable, Shared};

fn released() -> Fail {
    Fail::Closed("the snapshot was released".into())
}

/// The slot `close()` (or `release()`) empties.
pub(crate) struct SnapSlot(RwLock<Option<Snapshot>>);

impl Closable for SnapSlot {
    fn close(&self) {
        *self.0.write() = None;
    }
}

/// A consistent read view of the whole database at the moment `db.snapshot()` was called:
/// `snap.get(ks, key)`, `snap.items(ks, ...)`. Released by `release()`, by the end of a
/// `with` block, or with the database; it then raises `ClosedError`. While it lives, the
/// versions it sees are kept from compaction.
#[pyclass(frozen, name = "Snapshot", module = "scree")]
pub(crate) struct PySnapshot {
    // Before `shared`, as in `PyIter`.
    slot: Arc<SnapSlot>,
    shared: Arc<Shared>,
}

impl PySnapshot {
    pub(crate) fn new(shared: &Arc<Shared>, snap: Snapshot) -> PySnapshot {
        let slot = Arc::new(SnapSlot(RwLock::new(Some(snap))));
        let weak: std::sync::Weak<dyn Closable> = Arc::downgrade(&slot) as _;
        shared.register(weak);
        PySnapshot {
            slot,
            shared: shared.clone(),
        }
    }

    /// `ClosedError` if the snapshot was released or its database closed.
    fn check_open(&self) -> Result<()> {
        self.shared.with(|_| match self.slot.0.read().as_ref() {
            Some(_) => Ok(()),
            None => Err(released()),
        })
    }

    /// Runs `f` on the snapshot and the engine keyspace `idx` (`ClosedError` first if the
    /// snapshot or its database is closed, whichever database `ks` belongs to).
    fn with<T>(
        &self,
        idx: usize,
        f: impl FnOnce(&Snapshot, &scree::Keyspace) -> Result<T>,
    ) -> Result<T> {
        self.shared.with(|open| {
            let g = self.slot.0.read();
            let snap = g.as_ref().ok_or_else(released)?;
            f(snap, ks_at(open, idx)?)
        })
    }

    fn iterate(&self, py: Python<'_>, ks: &PyKeyspace, mode: Mode, b: Bounds) -> PyResult<PyIter> {
        let it = detached(py, || {
            self.check_open()?;
            let idx = same_db(&self.shared, ks)?;
            self.with(idx, |snap, ks| scan(ks, Some(snap), &b))
        })?;
        Ok(PyIter::new(&self.shared, it, mode, b.reverse))
    }
}

#[pymethods]
impl PySnapshot {
    /// The value of `key` in `ks` at the snapshot, or `default`.
    #[pyo3(signature = (ks, key, default=None))]
    fn get(
        &self,
        py: Python<'_>,
        ks: &Bound<'_, PyKeyspace>,
        key: &[u8],
        default: Option<Py<PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let ks = ks.get();
        let v = detached(py, || {
            self.check_open()?;
            let idx = same_db(&self.shared, ks)?;
            self.with(idx, |snap, ks| Ok(snap.get(ks, key)?))
        })?;
        Ok(match v {
            Some(v) => PyBytes::new(py, &v).into_any().unbind(),
            None => default.unwrap_or_else(|| py.None()),
        })
    }

    /// `ks.items(...)` at the snapshot.
    #[pyo3(signature = (ks, start=None, stop=None, prefix=None, reverse=false))]
    fn items(
        &self,
        py: Python<'_>,
        ks: &Bound<'_, PyKeyspace>,
        start: Option<&[u8]>,
        stop: Option<&[u8]>,
        prefix: Option<&[u8]>,
        reverse: bool,
    ) -> PyResult<PyIter> {
        self.iterate(
            py,
            ks.get(),
            Mode::Items,
            bounds(start, stop, prefix, reverse),
        )
    }

    /// `ks.keys(...)` at the snapshot.
    #[pyo3(signature = (ks, start=None, stop=None, prefix=None, reverse=false))]
    fn keys(
        &self,
        py: Python<'_>,
        ks: &Bound<'_, PyKeyspace>,
        start: Option<&[u8]>,
        stop: Option<&[u8]>,
        prefix: Option<&[u8]>,
        reverse: bool,
    ) -> PyResult<PyIter> {
        self.iterate(
            py,
            ks.get(),
            Mode::Keys,
            bounds(start, stop, prefix, reverse),
        )
    }

    /// `ks.values(...)` at the snapshot.
    #[pyo3(signature = (ks, start=None, stop=None, prefix=None, reverse=false))]
    fn values(
        &self,
        py: Python<'_>,
        ks: &Bound<'_, PyKeyspace>,
        start: Option<&[u8]>,
        stop: Option<&[u8]>,
        prefix: Option<&[u8]>,
        reverse: bool,
    ) -> PyResult<PyIter> {
        self.iterate(
            py,
            ks.get(),
            Mode::Values,
            bounds(start, stop, prefix, reverse),
        )
    }

    /// The snapshot's sequence number (`ClosedError` once released).
    #[getter]
    fn sequence(&self, py: Python<'_>) -> PyResult<u64> {
        detached(py, || {
            self.slot
                .0
                .read()
                .as_ref()
                .map(Snapshot::sequence)
                .ok_or_else(released)
        })
    }

    /// Releases the snapshot (compactions may then drop the versions only it saw). Releasing
    /// twice is harmless.
    fn release(&self, py: Python<'_>) {
        py.detach(|| self.slot.close());
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.release(py);
        false
    }
}
