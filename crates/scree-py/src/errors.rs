//! How engine errors become Python exceptions: one class per [`scree::Error`] variant, all
//! defined in `python/scree/_errors.py` (where they can also derive from `ValueError`,
//! `OSError`, …), looked up once and cached.

use pyo3::exceptions::PyKeyError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyType};

/// Why a call failed: an engine error, or a handle of this package that is closed.
#[derive(Debug)]
pub(crate) enum Fail {
    /// An error of the engine, mapped variant by variant.
    Engine(scree::Error),
    /// The database (or the snapshot, the batch) the call went through was closed: the text
    /// says which.
    Closed(String),
    /// A key or argument refused by this package before it reached the engine.
    Invalid(String),
    /// A combination of arguments the keyspace's layout cannot serve, refused by this package.
    Unsupported(String),
}

impl From<scree::Error> for Fail {
    fn from(e: scree::Error) -> Self {
        Fail::Engine(e)
    }
}

pub(crate) type Result<T, E = Fail> = std::result::Result<T, E>;

static ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static IO: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static CORRUPTION: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static INVALID: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static UNSUPPORTED: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static LOCKED: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static BACKGROUND: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static READ_ONLY: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static CLOSED: PyOnceLock<Py<PyType>> = PyOnceLock::new();

const MODULE: &str = "scree._errors";

/// The exception class `name` of `scree._errors`.
fn class<'py>(
    py: Python<'py>,
    cell: &'static PyOnceLock<Py<PyType>>,
    name: &str,
) -> PyResult<&'py Bound<'py, PyType>> {
    cell.import(py, MODULE, name)
}

/// An instance of class `name` built from `args`, with the keyword attributes `attrs` set.
fn raise<'py, A>(
    py: Python<'py>,
    cell: &'static PyOnceLock<Py<PyType>>,
    name: &str,
    args: A,
    attrs: &[(&str, Bound<'py, PyAny>)],
) -> PyErr
where
    A: pyo3::call::PyCallArgs<'py>,
{
    let made = class(py, cell, name).and_then(|c| {
        let e = c.call1(args)?;
        for (k, v) in attrs {
            e.setattr(*k, v)?;
        }
        Ok(e)
    });
    match made {
        Ok(e) => PyErr::from_value(e),
        // The package's Python part is missing or broken: say so rather than hide the error.
        Err(e) => e,
    }
}

/// The Python exception for `f`.
pub(crate) fn to_py(py: Python<'_>, f: Fail) -> PyErr {
    let msg = match &f {
        Fail::Engine(e) => e.to_string(),
        Fail::Closed(m) | Fail::Invalid(m) | Fail::Unsupported(m) => m.clone(),
    };
    let none = || py.None().into_bound(py);
    let path = |p: &std::path::Path| {
        p.to_string_lossy()
            .into_owned()
            .into_pyobject(py)
            .map_or_else(|_| none(), |s| s.into_any())
    };
    let int = |n: u64| {
        n.into_pyobject(py)
            .map_or_else(|_| none(), |s| s.into_any())
    };
    let text = |s: &str| {
        s.into_pyobject(py)
            .map_or_else(|_| none(), |s| s.into_any())
    };
    match f {
        Fail::Engine(scree::Error::Io { path: p, source }) => {
            let errno = source.raw_os_error().map_or_else(none, |n| int(n as u64));
            let fp = path(&p);
            raise(
                py,
                &IO,
                "IoError",
                (msg,),
                &[("errno", errno), ("filename", fp.clone()), ("path", fp)],
            )
        }
        Fail::Engine(scree::Error::Corruption {
            file,
            offset,
            detail,
        }) => raise(
            py,
            &CORRUPTION,
            "CorruptionError",
            (msg,),
            &[
                ("file", path(&file)),
                ("offset", int(offset)),
                ("detail", text(&detail)),
            ],
        ),
        Fail::Engine(scree::Error::InvalidArgument(_)) | Fail::Invalid(_) => {
            raise(py, &INVALID, "InvalidArgumentError", (msg,), &[])
        }
        Fail::Engine(scree::Error::Unsupported(_)) | Fail::Unsupported(_) => {
            raise(py, &UNSUPPORTED, "UnsupportedError", (msg,), &[])
        }
        Fail::Engine(scree::Error::Locked(p)) => {
            raise(py, &LOCKED, "LockedError", (msg,), &[("path", path(&p))])
        }
        Fail::Engine(scree::Error::BackgroundError(_)) => {
            raise(py, &BACKGROUND, "BackgroundError", (msg,), &[])
        }
        Fail::Engine(scree::Error::ReadOnly { path: p, op }) => raise(
            py,
            &READ_ONLY,
            "ReadOnlyError",
            (msg,),
            &[("path", path(&p)), ("op", text(op))],
        ),
        Fail::Engine(scree::Error::Closed) | Fail::Closed(_) => {
            raise(py, &CLOSED, "ClosedError", (msg,), &[])
        }
        // A variant added to the engine later: still a `scree.Error`, with its message.
        Fail::Engine(_) => raise(py, &ERROR, "Error", (msg,), &[]),
    }
}

/// Python's `KeyError(key)` for a missing key.
pub(crate) fn key_error(py: Python<'_>, key: &[u8]) -> PyErr {
    PyKeyError::new_err((PyBytes::new(py, key).unbind(),))
}

/// Runs `f` with the GIL released (it must touch no Python object), then turns its error into
/// the Python exception.
pub(crate) fn detached<T, F>(py: Python<'_>, f: F) -> PyResult<T>
where
    F: FnOnce() -> Result<T> + Send,
    T: Send,
{
    py.detach(f).map_err(|e| to_py(py, e))
}
