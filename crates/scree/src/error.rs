//! The one error type of the engine: every fallible operation returns [`Result`].

use std::path::PathBuf;

/// Result alias used throughout Scree.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in Scree. Each variant says what and where.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An operating-system I/O error, with the file it happened on.
    #[error("I/O error on {path}: {source}")]
    Io {
        /// The file or directory the operation was on.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// Bytes on disk failed a checksum or structural check.
    #[error("corruption in {file} at offset {offset}: {detail}")]
    Corruption {
        /// The file holding the bad bytes.
        file: PathBuf,
        /// Byte offset of the bad record or block.
        offset: u64,
        /// What was wrong.
        detail: String,
    },
    /// An argument or option was out of range or inconsistent with stored state.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The operation is not offered by this keyspace's layout or this build.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// Another process (or another `Db` in this process) holds the database lock.
    #[error("database at {0} is locked by another process")]
    Locked(PathBuf),
    /// A previous write or sync failed; the database refuses writes until reopened.
    #[error("database is read-only after a background error: {0}")]
    BackgroundError(String),
    /// The database was opened with `Options::read_only`: it takes no writes, flushes,
    /// compactions or new keyspaces. The text names the refused operation.
    #[error("database at {path} is open read-only: {op} refused")]
    ReadOnly {
        /// The database directory.
        path: PathBuf,
        /// The operation refused.
        op: &'static str,
    },
    /// The database is shutting down.
    #[error("database is closed")]
    Closed,
}

impl Error {
    /// The error a panic in background work (a bug) becomes: `BackgroundError` naming `what`
    /// and the panic's message, so the database refuses writes with it instead of a thread
    /// dying silently.
    pub(crate) fn from_panic(what: &str, payload: &(dyn std::any::Any + Send)) -> Self {
        let msg = payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        Error::BackgroundError(format!("{what} panicked (a bug): {msg}"))
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    pub(crate) fn corruption(
        file: impl Into<PathBuf>,
        offset: u64,
        detail: impl Into<String>,
    ) -> Self {
        Error::Corruption {
            file: file.into(),
            offset,
            detail: detail.into(),
        }
    }

    /// A copy of this error suitable for reporting the same cause twice
    /// (I/O sources are not `Clone`).
    pub(crate) fn duplicate(&self) -> Self {
        match self {
            Error::Io { path, source } => Error::Io {
                path: path.clone(),
                // The OS error code survives (a caller tells a full disk by it).
                source: match source.raw_os_error() {
                    Some(code) => std::io::Error::from_raw_os_error(code),
                    None => std::io::Error::new(source.kind(), source.to_string()),
                },
            },
            Error::Corruption {
                file,
                offset,
                detail,
            } => Error::Corruption {
                file: file.clone(),
                offset: *offset,
                detail: detail.clone(),
            },
            Error::InvalidArgument(s) => Error::InvalidArgument(s.clone()),
            Error::Unsupported(s) => Error::Unsupported(s.clone()),
            Error::Locked(p) => Error::Locked(p.clone()),
            Error::BackgroundError(s) => Error::BackgroundError(s.clone()),
            Error::ReadOnly { path, op } => Error::ReadOnly {
                path: path.clone(),
                op,
            },
            Error::Closed => Error::Closed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writers that joined a failed group commit get a copy of the leader's error; the copy
    /// keeps the error's OS code, not only its kind.
    #[test]
    fn a_duplicated_io_error_keeps_its_os_code() {
        let e = Error::Io {
            path: "/db/000007.log".into(),
            source: std::io::Error::from_raw_os_error(libc::ENOSPC),
        };
        let Error::Io { path, source } = e.duplicate() else {
            panic!("not an I/O error");
        };
        assert_eq!(path, std::path::PathBuf::from("/db/000007.log"));
        assert_eq!(source.raw_os_error(), Some(libc::ENOSPC));
        assert_eq!(source.kind(), std::io::ErrorKind::StorageFull);
    }
}
