//! Lazy iteration over a keyspace (or a snapshot of it): [`PyIter`], fed by the engine's
//! [`RangeIter`] in chunks, each taken with the GIL released.
//!
//! The `RangeIter` keeps the database's files alive (it holds the engine's handle), so it sits
//! in a slot registered with [`Shared`]: `DB.close()` drops it, and the Python iterator then
//! raises `ClosedError` instead of holding the database open.

use std::collections::VecDeque;
use std::ops::Bound;
use std::sync::Arc;

use parking_lot::Mutex;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};
use scree::{Keyspace, RangeIter, Snapshot};

use crate::errors::{detached, to_py, Fail, Result};
use crate::shared::{Closable, Shared};

/// What an iterator yields.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Mode {
    Items,
    Keys,
    Values,
}

/// The arguments of `items()`, `keys()` and `values()`.
#[derive(Debug, Default)]
pub(crate) struct Bounds {
    pub(crate) start: Option<Vec<u8>>,
    pub(crate) stop: Option<Vec<u8>>,
    pub(crate) prefix: Option<Vec<u8>>,
    pub(crate) reverse: bool,
}

/// Most items a refill takes; a refill also stops past [`CHUNK_BYTES`].
const MAX_CHUNK: usize = 256;
/// Bytes after which a refill stops.
const CHUNK_BYTES: usize = 1 << 20;

/// The smallest key greater than every key starting with `prefix` (None if there is none).
/// The engine's own is internal; this is the same rule.
fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut p = prefix.to_vec();
    while let Some(last) = p.pop() {
        if last < 0xff {
            p.push(last + 1);
            return Some(p);
        }
    }
    None
}

/// The engine's iterator for `b` over `ks` (at `snap` if given). A scan the layout's key
/// order cannot serve fails here, with the engine's message, instead of at the first item.
pub(crate) fn scan(ks: &Keyspace, snap: Option<&Snapshot>, b: &Bounds) -> Result<RangeIter> {
    let order = ks.layout().order();
    let range = |lo: Bound<Vec<u8>>, hi: Bound<Vec<u8>>| match snap {
        Some(s) => s.range(ks, (lo, hi)),
        None => ks.range((lo, hi)),
    };
    let lo = b.start.clone().map_or(Bound::Unbounded, Bound::Included);
    let hi = b.stop.clone().map_or(Bound::Unbounded, Bound::Excluded);
    let prefix_alone = |p: &[u8]| match snap {
        Some(s) => s.prefix(ks, p),
        None => ks.prefix(p),
    };
    let (make, served): (Box<dyn Fn() -> RangeIter>, bool) = match &b.prefix {
        None => (
            Box::new(move || range(lo.clone(), hi.clone())),
            order.serves_range(),
        ),
        Some(p) if b.start.is_none() && b.stop.is_none() => (
            Box::new(move || prefix_alone(p)),
            order.serves_prefix(p.len()),
        ),
        Some(p) => {
            if !order.serves_range() {
                return Err(Fail::Unsupported(format!(
                    "start/stop with a prefix in keyspace {:?}: layout `{}` does not keep \
                     keys in byte order, so it cannot bound a scan by key (give the prefix alone)",
                    ks.name(),
                    ks.layout()
                )));
            }
            // Both bounds and the prefix: the tighter of each.
            let lo = match b.start.as_ref() {
                Some(s) if s.as_slice() > p.as_slice() => Bound::Included(s.clone()),
                _ => Bound::Included(p.clone()),
            };
            let hi = match (b.stop.as_ref(), prefix_end(p)) {
                (Some(s), Some(e)) => Bound::Excluded(if *s < e { s.clone() } else { e }),
                (Some(s), None) => Bound::Excluded(s.clone()),
                (None, Some(e)) => Bound::Excluded(e),
                (None, None) => Bound::Unbounded,
            };
            (Box::new(move || range(lo.clone(), hi.clone())), true)
        }
    };
    if !served {
        // The engine's iterator of a scan its layout does not serve yields one error saying
        // why: raise it now. (Had it yielded an item, a fresh iterator is returned below, so
        // that none is lost.)
        if let Some(Err(e)) = make().next() {
            return Err(Fail::Engine(e));
        }
    }
    Ok(make())
}

struct IterState {
    /// None once exhausted or closed (the engine's handle is then dropped).
    it: Option<RangeIter>,
    buf: VecDeque<(Vec<u8>, Vec<u8>)>,
    /// An error met after items already buffered: raised once they are taken.
    err: Option<scree::Error>,
    /// Items the next refill takes (doubles up to [`MAX_CHUNK`], so a first `next()` is cheap).
    chunk: usize,
    reverse: bool,
    closed: bool,
}

/// The slot `close()` empties.
pub(crate) struct IterSlot(Mutex<IterState>);

impl Closable for IterSlot {
    fn close(&self) {
        let mut s = self.0.lock();
        s.it = None;
        s.buf.clear();
        s.err = None;
        s.closed = true;
    }
}

/// A lazy iterator over a keyspace, in key order (reversed with `reverse=True`); for a
/// `semisorted` prefix, in the layout's own order. It reads the keyspace as it was when the
/// iterator was made (later writes are not seen). Safe to share between threads; closed with
/// the database.
#[pyclass(frozen, name = "Iterator", module = "scree")]
pub(crate) struct PyIter {
    // Before `shared`: fields drop in order, and the engine iterator must go before the last
    // `Shared` (whose drop closes the database without the GIL).
    slot: Arc<IterSlot>,
    shared: Arc<Shared>,
    mode: Mode,
}

impl PyIter {
    /// An iterator over `it`, registered for `close()`.
    pub(crate) fn new(shared: &Arc<Shared>, it: RangeIter, mode: Mode, reverse: bool) -> PyIter {
        let slot = Arc::new(IterSlot(Mutex::new(IterState {
            it: Some(it),
            buf: VecDeque::new(),
            err: None,
            chunk: 1,
            reverse,
            closed: false,
        })));
        let weak: std::sync::Weak<dyn Closable> = Arc::downgrade(&slot) as _;
        shared.register(weak);
        PyIter {
            slot,
            shared: shared.clone(),
            mode,
        }
    }

    /// Takes the next chunk from the engine (GIL released by the caller) and returns its first
    /// item.
    fn refill(&self) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        self.shared.with(|_| {
            let mut g = self.slot.0.lock();
            let s = &mut *g;
            if s.closed {
                return Err(self.shared.closed());
            }
            if let Some(e) = s.err.take() {
                return Err(Fail::Engine(e));
            }
            if let Some(item) = s.buf.pop_front() {
                // Another thread refilled meanwhile.
                return Ok(Some(item));
            }
            let Some(it) = s.it.as_mut() else {
                return Ok(None);
            };
            let mut bytes = 0;
            while s.buf.len() < s.chunk && bytes < CHUNK_BYTES {
                let step = if s.reverse { it.next_back() } else { it.next() };
                match step {
                    Some(Ok((k, v))) => {
                        bytes += k.len() + v.len();
                        s.buf.push_back((k, v));
                    }
                    Some(Err(e)) => {
                        s.it = None;
                        if s.buf.is_empty() {
                            return Err(Fail::Engine(e));
                        }
                        s.err = Some(e);
                        break;
                    }
                    None => {
                        s.it = None;
                        break;
                    }
                }
            }
            s.chunk = (s.chunk * 2).min(MAX_CHUNK);
            Ok(s.buf.pop_front())
        })
    }
}

#[pymethods]
impl PyIter {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        // The slot's lock is held only for the pop: never while Python code may run.
        let buffered = {
            let mut s = self.slot.0.lock();
            if s.closed {
                None
            } else {
                Some(s.buf.pop_front())
            }
        };
        let Some(buffered) = buffered else {
            return Err(to_py(py, self.shared.closed()));
        };
        let item = match buffered {
            Some(item) => Some(item),
            None => detached(py, || self.refill())?,
        };
        let Some((k, v)) = item else {
            return Ok(None);
        };
        Ok(Some(match self.mode {
            Mode::Keys => PyBytes::new(py, &k).into_any().unbind(),
            Mode::Values => PyBytes::new(py, &v).into_any().unbind(),
            Mode::Items => PyTuple::new(py, [PyBytes::new(py, &k), PyBytes::new(py, &v)])?
                .into_any()
                .unbind(),
        }))
    }

    fn __repr__(&self) -> String {
        let mode = match self.mode {
            Mode::Items => "items",
            Mode::Keys => "keys",
            Mode::Values => "values",
        };
        format!(
            "<scree.Iterator of {mode} in {}>",
            self.shared.path.display()
        )
    }
}
