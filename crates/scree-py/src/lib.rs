//! `scree._scree`: the native part of the `scree` Python package (PyO3). The classes are
//! [`db::PyDb`], [`keyspace::PyKeyspace`], [`iter::PyIter`], [`batch::PyWriteBatch`] and
//! [`snapshot::PySnapshot`]; [`shared::Shared`] is what they share; [`errors`] maps engine
//! errors to the exceptions of `python/scree/_errors.py`; [`options`] reads keyword options.
//! The pure-Python part (`python/scree/`) re-exports them with `open()`, the exceptions and
//! the type stubs.
#![deny(clippy::unwrap_used, clippy::indexing_slicing)]

mod batch;
mod db;
mod errors;
mod iter;
mod keyspace;
mod options;
mod shared;
mod snapshot;

use pyo3::prelude::*;

#[pymodule]
mod _scree {
    #[pymodule_export]
    use crate::batch::PyWriteBatch;
    #[pymodule_export]
    use crate::db::PyDb;
    #[pymodule_export]
    use crate::iter::PyIter;
    #[pymodule_export]
    use crate::keyspace::PyKeyspace;
    #[pymodule_export]
    use crate::snapshot::PySnapshot;

    use pyo3::prelude::*;

    #[pymodule_init]
    fn init(m: &Bound<'_, PyModule>) -> PyResult<()> {
        m.add("MAX_KEY_BYTES", scree::MAX_KEY_BYTES)?;
        m.add("MAX_VALUE_BYTES", scree::MAX_VALUE_BYTES)?;
        let layouts: Vec<String> = scree::Layout::implemented()
            .iter()
            .map(|l| match l {
                // The engine's default prefix length: `semisorted` alone parses to it.
                scree::Layout::SemiSorted { .. } => "semisorted:N".to_string(),
                l => l.to_string(),
            })
            .collect();
        m.add("LAYOUTS", layouts)?;
        m.add("__version__", env!("CARGO_PKG_VERSION"))?;
        Ok(())
    }
}
