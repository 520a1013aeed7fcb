//! [`PyWriteBatch`]: `with db.write_batch() as wb:` — puts and deletes across keyspaces,
//! written atomically when the block ends, and not at all if it raises.

use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use pyo3::prelude::*;
use scree::{Keyspace, WriteBatch, WriteOptions};

use crate::errors::{detached, to_py, Fail, Result};
use crate::keyspace::{same_db, PyKeyspace};
use crate::shared::{ks_at, Closable, Shared};

/// What a batch holds, which `close()` of its database ends ([`Closable`]).
enum State {
    /// Being filled: the operations, and the engine handles of the keyspaces they name, by
    /// the index a Python `Keyspace` keeps. With a keyspace's handle here, adding an operation
    /// takes this lock only, not the database's too (two locked instructions fewer per put).
    Filling {
        batch: WriteBatch,
        keyspaces: Vec<(usize, Keyspace)>,
    },
    /// Written, or discarded by a block that raised.
    Spent,
    /// Its database was closed (the handles above were dropped with it).
    Closed,
}

/// The slot `close()` empties.
pub(crate) struct BatchSlot(Mutex<State>);

impl Closable for BatchSlot {
    fn close(&self) {
        let was = std::mem::replace(&mut *self.0.lock(), State::Closed);
        // Dropped after the lock is released: the keyspace handles go before the database's.
        drop(was);
    }
}

/// Puts and deletes, in one or several keyspaces of one database, applied all or nothing when
/// the `with` block ends without an exception. If the block raises, nothing is written. A key
/// or value the engine refuses (too long, shorter than a `semisorted` prefix) makes the write
/// at the block's end raise `InvalidArgumentError`, and nothing is written. `len(wb)` is the
/// number of operations. A batch is written once; using it afterwards raises `Error`.
#[pyclass(frozen, name = "WriteBatch", module = "scree")]
pub(crate) struct PyWriteBatch {
    // Declared (so dropped) before `shared`: if this batch holds the last reference to the
    // database, its keyspace handles must go before `Shared`'s drop closes the engine.
    slot: Arc<BatchSlot>,
    shared: Arc<Shared>,
    sync: bool,
}

impl PyWriteBatch {
    pub(crate) fn new(shared: Arc<Shared>, sync: bool) -> Self {
        let slot = Arc::new(BatchSlot(Mutex::new(State::Filling {
            batch: WriteBatch::new(),
            keyspaces: Vec::new(),
        })));
        let weak: Weak<dyn Closable> = Arc::downgrade(&slot) as _;
        shared.register(weak);
        PyWriteBatch { slot, shared, sync }
    }

    /// The error of a call on a batch in state `st` (not `Filling`).
    fn unusable(&self, st: &State) -> Fail {
        match st {
            State::Closed => self.shared.closed(),
            _ => spent(),
        }
    }

    fn add(
        &self,
        py: Python<'_>,
        ks: &PyKeyspace,
        f: impl Fn(&mut WriteBatch, &Keyspace),
    ) -> PyResult<()> {
        // In memory only: no disk, so the GIL is kept (no lock taken here waits on a thread
        // that needs it).
        let idx = same_db(&self.shared, ks).map_err(|e| to_py(py, e))?;
        {
            let mut g = self.slot.0.lock();
            match &mut *g {
                State::Filling { batch, keyspaces } => {
                    if let Some((_, k)) = keyspaces.iter().find(|(i, _)| *i == idx) {
                        f(batch, k);
                        return Ok(());
                    }
                }
                st => {
                    let e = self.unusable(st);
                    drop(g);
                    return Err(to_py(py, e));
                }
            }
        }
        // The first operation on this keyspace: its handle is cloned under the database's
        // lock (taken before the batch's, as everywhere), so `close()`, which waits for that
        // lock, then finds the clone in the slot and drops it before the database.
        self.shared
            .with(|open| {
                let k = ks_at(open, idx)?;
                let mut g = self.slot.0.lock();
                match &mut *g {
                    State::Filling { batch, keyspaces } => {
                        f(batch, k);
                        keyspaces.push((idx, k.clone()));
                        Ok(())
                    }
                    st => Err(self.unusable(st)),
                }
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
        let mut g = self.slot.0.lock();
        let e = match &mut *g {
            State::Filling { batch, .. } => {
                // Clearing makes the engine's batch forget its database too; the keyspace
                // handles stay (they are of this database).
                batch.clear();
                return Ok(());
            }
            st => self.unusable(st),
        };
        drop(g);
        Err(to_py(py, e))
    }

    /// Number of operations added.
    fn __len__(&self) -> usize {
        match &*self.slot.0.lock() {
            State::Filling { batch, .. } => batch.len(),
            _ => 0,
        }
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
        let was = std::mem::replace(&mut *self.slot.0.lock(), State::Spent);
        let (batch, keyspaces) = match was {
            State::Filling { batch, keyspaces } => (batch, keyspaces),
            // A block that raised after its database was closed: its exception goes on.
            State::Closed if exc_type.is_some() => return Ok(false),
            st => return Err(to_py(py, self.unusable(&st))),
        };
        let opts = WriteOptions { sync: self.sync };
        let discard = exc_type.is_some();
        detached(py, || -> Result<()> {
            self.shared.with(|open| {
                // The handles are dropped here, under the database's lock: never the last.
                drop(keyspaces);
                if discard {
                    return Ok(());
                }
                Ok(open.db.write(batch, &opts)?)
            })
        })
        .or_else(|e| if discard { Ok(()) } else { Err(e) })?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        format!("<scree.WriteBatch of {} operations>", self.__len__())
    }
}
