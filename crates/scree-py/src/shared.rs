//! The state every Python handle of one database shares ([`Shared`]): the engine's handles
//! while the database is open, and the live iterators, snapshots and write batches, which
//! `DB.close()` ends.
//!
//! The engine keeps a database open while any `Db`, `Keyspace`, `Snapshot` or `RangeIter`
//! lives. Python objects can outlive `close()` (an iterator kept in a variable), so no Python
//! object owns an engine handle directly: `Shared` owns the `Db` and the `Keyspace`s, and the
//! iterators, snapshots and batches (which keep the handles of the keyspaces they name) sit in
//! slots that `close()` empties. After it, every handle raises
//! `ClosedError` and the directory lock is free for the next open.
//!
//! Lock order: `state` (read by every call, written by `close`), then an iterator's or
//! snapshot's slot, a batch's lock, or `live`; `live` and a slot are never held together.
//! No thread holding one of these locks waits for the GIL or runs Python code (which could
//! hand the GIL to a thread waiting for the lock): disk calls take their locks inside
//! `Python::detach`; the in-memory ones (a buffered iterator item, adding to a batch) hold
//! them for a few instructions and make their Python results after releasing them.

use std::path::PathBuf;
use std::sync::{Arc, Weak};

use parking_lot::{Mutex, RwLock};
use scree::{Db, Keyspace};

use crate::errors::{Fail, Result};

/// The engine's handles of an open database.
pub(crate) struct Open {
    pub(crate) db: Db,
    /// The keyspaces opened through this database, by the index a Python `Keyspace` keeps.
    pub(crate) keyspaces: Vec<Keyspace>,
}

/// Something `close()` must end: an iterator's, a snapshot's or a write batch's slot.
pub(crate) trait Closable: Send + Sync {
    /// Drops the engine handle it holds; later calls raise `ClosedError`.
    fn close(&self);
}

/// Shared by a `DB` and every keyspace, iterator, snapshot and batch made from it.
pub(crate) struct Shared {
    /// The directory, for messages and `repr`.
    pub(crate) path: PathBuf,
    pub(crate) state: RwLock<Option<Open>>,
    /// Iterators, snapshots and batches not yet dropped (dead entries are pruned as new ones
    /// come).
    live: Mutex<Vec<Weak<dyn Closable>>>,
}

impl Shared {
    pub(crate) fn new(path: PathBuf, db: Db) -> Arc<Shared> {
        Arc::new(Shared {
            path,
            state: RwLock::new(Some(Open {
                db,
                keyspaces: Vec::new(),
            })),
            live: Mutex::new(Vec::new()),
        })
    }

    /// The `ClosedError` of a call on this database after `close()`.
    pub(crate) fn closed(&self) -> Fail {
        Fail::Closed(format!("database at {} is closed", self.path.display()))
    }

    /// Runs `f` on the open database; `ClosedError` after `close()`. Holds the state's read
    /// lock for the call, so `close()` waits for calls in flight.
    pub(crate) fn with<T>(&self, f: impl FnOnce(&Open) -> Result<T>) -> Result<T> {
        let g = self.state.read();
        match g.as_ref() {
            Some(open) => f(open),
            None => Err(self.closed()),
        }
    }

    /// Runs `f` on keyspace `idx`.
    pub(crate) fn with_ks<T>(
        &self,
        idx: usize,
        f: impl FnOnce(&Keyspace) -> Result<T>,
    ) -> Result<T> {
        self.with(|open| f(ks_at(open, idx)?))
    }

    /// Registers an iterator, snapshot or batch for `close()` to end.
    pub(crate) fn register(&self, c: Weak<dyn Closable>) {
        let mut live = self.live.lock();
        // Prune when the list doubles: dropping an iterator costs nothing, and the list stays
        // within twice the live handles.
        if live.len() >= 16 && live.len().is_power_of_two() {
            live.retain(|w| w.strong_count() > 0);
        }
        live.push(c);
    }

    /// Closes the database: waits for calls in flight, ends every iterator and snapshot,
    /// drops the engine's handles (the engine then stops its background work and syncs the
    /// WAL). Closing twice is harmless.
    pub(crate) fn close(&self) {
        let mut state = self.state.write();
        let open = state.take();
        let live = std::mem::take(&mut *self.live.lock());
        for c in live.iter().filter_map(Weak::upgrade) {
            c.close();
        }
        drop(open);
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.state.read().is_none()
    }
}

impl Drop for Shared {
    /// The last Python object of a database that was not closed is gone: the engine closes
    /// now (stopping background work, syncing the WAL), without the GIL when the interpreter
    /// is still there to release it.
    fn drop(&mut self) {
        let mut open = self.state.get_mut().take();
        if open.is_some() {
            pyo3::Python::try_attach(|py| py.detach(|| drop(open.take())));
        }
        drop(open);
    }
}

/// Keyspace `idx` of `open` (an index this package handed out).
pub(crate) fn ks_at(open: &Open, idx: usize) -> Result<&Keyspace> {
    open.keyspaces
        .get(idx)
        .ok_or_else(|| Fail::Invalid(format!("no keyspace of index {idx} in this database")))
}
