//! [`PyKeyspace`]: a keyspace as a mapping of `bytes` to `bytes`, with plyvel's and rocksdict's
//! calls (`get`, `put`, `put_if_absent`, `delete`, `items`/`keys`/`values`).

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use scree::{Layout, WriteOptions};

use crate::errors::{detached, key_error, Fail};
use crate::iter::{scan, Bounds, Mode, PyIter};
use crate::shared::Shared;

/// A named keyspace of a database: a mapping of `bytes` keys to `bytes` values.
///
/// `ks[k]`, `ks[k] = v`, `del ks[k]`, `k in ks`, `ks.get(k, default)`, `ks.put(k, v, sync=False)`,
/// `ks.put_if_absent(k, v)`, `ks.delete(k)`; `ks.items()`, `ks.keys()`, `ks.values()` and
/// `iter(ks)` iterate lazily in key order on the layouts that keep one (`leveled`,
/// `fragmented`, `lightweight`; `semisorted` by prefix group only; `trie` none:
/// `UnsupportedError`).
///
/// There is no `len()`: the engine keeps no count of live keys (a put may overwrite, a delete
/// may delete nothing, and neither reads to find out), so the only honest answer would be a
/// full scan, which the hash-ordered layouts cannot even do.
#[pyclass(frozen, name = "Keyspace", module = "scree")]
pub(crate) struct PyKeyspace {
    pub(crate) shared: Arc<Shared>,
    pub(crate) idx: usize,
    name: String,
    layout: Layout,
}

impl PyKeyspace {
    pub(crate) fn new(shared: Arc<Shared>, idx: usize, name: String, layout: Layout) -> Self {
        PyKeyspace {
            shared,
            idx,
            name,
            layout,
        }
    }

    fn value(&self, py: Python<'_>, key: &[u8]) -> PyResult<Option<Vec<u8>>> {
        detached(py, || {
            self.shared
                .with_ks(self.idx, |ks| ks.get(key).map_err(Fail::Engine))
        })
    }

    fn write(&self, py: Python<'_>, key: &[u8], value: &[u8], sync: bool) -> PyResult<()> {
        let opts = WriteOptions { sync };
        detached(py, || {
            self.shared
                .with_ks(self.idx, |ks| Ok(ks.put_opt(key, value, &opts)?))
        })
    }

    fn iterate(&self, py: Python<'_>, mode: Mode, bounds: Bounds) -> PyResult<PyIter> {
        let shared = &self.shared;
        let it = detached(py, || {
            shared.with_ks(self.idx, |ks| scan(ks, None, &bounds))
        })?;
        Ok(PyIter::new(shared, it, mode, bounds.reverse))
    }
}

#[pymethods]
impl PyKeyspace {
    /// The keyspace's name.
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// The keyspace's layout, as the engine writes it (`"trie"`, `"semisorted:8"`, …).
    #[getter]
    fn layout(&self) -> String {
        self.layout.to_string()
    }

    /// The value of `key`; `KeyError` if it has none.
    fn __getitem__(&self, py: Python<'_>, key: &[u8]) -> PyResult<Py<PyBytes>> {
        match self.value(py, key)? {
            Some(v) => Ok(PyBytes::new(py, &v).unbind()),
            None => Err(key_error(py, key)),
        }
    }

    /// Stores `value` under `key` (not synced: see `put(..., sync=True)`).
    fn __setitem__(&self, py: Python<'_>, key: &[u8], value: &[u8]) -> PyResult<()> {
        self.write(py, key, value, false)
    }

    /// Deletes `key`. A blind write, as in plyvel and rocksdict: no `KeyError` for a key that
    /// has no value (finding out would cost a read).
    fn __delitem__(&self, py: Python<'_>, key: &[u8]) -> PyResult<()> {
        self.delete(py, key, false)
    }

    /// Whether `key` has a value.
    fn __contains__(&self, py: Python<'_>, key: &[u8]) -> PyResult<bool> {
        Ok(self.value(py, key)?.is_some())
    }

    /// The value of `key`, or `default` if it has none.
    #[pyo3(signature = (key, default=None))]
    fn get(&self, py: Python<'_>, key: &[u8], default: Option<Py<PyAny>>) -> PyResult<Py<PyAny>> {
        Ok(match self.value(py, key)? {
            Some(v) => PyBytes::new(py, &v).into_any().unbind(),
            None => default.unwrap_or_else(|| py.None()),
        })
    }

    /// Stores `value` under `key`. `sync=True` syncs the write-ahead log before returning
    /// (survives power loss); otherwise the write survives a crash of the process.
    #[pyo3(signature = (key, value, sync=false))]
    fn put(&self, py: Python<'_>, key: &[u8], value: &[u8], sync: bool) -> PyResult<()> {
        self.write(py, key, value, sync)
    }

    /// Stores `value` under `key` only if `key` has no value; returns whether it did. No other
    /// write lands between the check and the put.
    #[pyo3(signature = (key, value, sync=false))]
    fn put_if_absent(
        &self,
        py: Python<'_>,
        key: &[u8],
        value: &[u8],
        sync: bool,
    ) -> PyResult<bool> {
        let opts = WriteOptions { sync };
        detached(py, || {
            self.shared
                .with_ks(self.idx, |ks| Ok(ks.put_if_absent_opt(key, value, &opts)?))
        })
    }

    /// Deletes `key` (a blind write: nothing happens if it has no value).
    #[pyo3(signature = (key, sync=false))]
    fn delete(&self, py: Python<'_>, key: &[u8], sync: bool) -> PyResult<()> {
        let opts = WriteOptions { sync };
        detached(py, || {
            self.shared
                .with_ks(self.idx, |ks| Ok(ks.delete_opt(key, &opts)?))
        })
    }

    /// `(key, value)` pairs with `start <= key < stop` (either bound may be left out), or
    /// starting with `prefix`, in key order (`reverse=True`: descending). Lazy: it reads the
    /// keyspace as it was at this call. Layouts without key order raise `UnsupportedError`
    /// here: `trie` always, `semisorted:N` unless `prefix` is exactly N bytes (its group's
    /// keys then come in the layout's own order, not byte order).
    #[pyo3(signature = (start=None, stop=None, prefix=None, reverse=false))]
    fn items(
        &self,
        py: Python<'_>,
        start: Option<&[u8]>,
        stop: Option<&[u8]>,
        prefix: Option<&[u8]>,
        reverse: bool,
    ) -> PyResult<PyIter> {
        let b = bounds(start, stop, prefix, reverse);
        self.iterate(py, Mode::Items, b)
    }

    /// The keys of `items(...)`.
    #[pyo3(signature = (start=None, stop=None, prefix=None, reverse=false))]
    fn keys(
        &self,
        py: Python<'_>,
        start: Option<&[u8]>,
        stop: Option<&[u8]>,
        prefix: Option<&[u8]>,
        reverse: bool,
    ) -> PyResult<PyIter> {
        let b = bounds(start, stop, prefix, reverse);
        self.iterate(py, Mode::Keys, b)
    }

    /// The values of `items(...)`.
    #[pyo3(signature = (start=None, stop=None, prefix=None, reverse=false))]
    fn values(
        &self,
        py: Python<'_>,
        start: Option<&[u8]>,
        stop: Option<&[u8]>,
        prefix: Option<&[u8]>,
        reverse: bool,
    ) -> PyResult<PyIter> {
        let b = bounds(start, stop, prefix, reverse);
        self.iterate(py, Mode::Values, b)
    }

    /// `iter(ks)`: the keys, in key order.
    fn __iter__(&self, py: Python<'_>) -> PyResult<PyIter> {
        self.iterate(py, Mode::Keys, Bounds::default())
    }

    fn __repr__(&self) -> String {
        format!(
            "<scree.Keyspace {:?} ({}) of {}{}>",
            self.name,
            self.layout,
            self.shared.path.display(),
            if self.shared.is_closed() {
                ", closed"
            } else {
                ""
            }
        )
    }
}

pub(crate) fn bounds(
    start: Option<&[u8]>,
    stop: Option<&[u8]>,
    prefix: Option<&[u8]>,
    reverse: bool,
) -> Bounds {
    Bounds {
        start: start.map(<[u8]>::to_vec),
        stop: stop.map(<[u8]>::to_vec),
        prefix: prefix.map(<[u8]>::to_vec),
        reverse,
    }
}

/// The engine keyspace index of `ks`, checking it belongs to the database `shared`.
pub(crate) fn same_db(shared: &Arc<Shared>, ks: &PyKeyspace) -> Result<usize, Fail> {
    if Arc::ptr_eq(shared, &ks.shared) {
        Ok(ks.idx)
    } else {
        let other = if ks.shared.path == shared.path {
            format!(
                "another open of the database at {}",
                ks.shared.path.display()
            )
        } else {
            format!("the database at {}", ks.shared.path.display())
        };
        Err(Fail::Invalid(format!(
            "keyspace {:?} belongs to {other}, not to this one at {}",
            ks.name,
            shared.path.display()
        )))
    }
}
