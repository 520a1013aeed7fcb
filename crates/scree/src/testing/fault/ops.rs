//! What the fault file system counts and injects: operation kinds, faults, crash modes.

use std::io;

/// The kinds of operation the fault layer counts and can fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OpKind {
    /// `create` (a new or truncated file).
    Create,
    /// `open` for reading (also the open inside `read_all`), and `reopen_for_append`.
    Open,
    /// `read_at`.
    Read,
    /// `append` or `flush` of a writable file.
    Write,
    /// `sync` of a writable file.
    Sync,
    /// `sync_dir`.
    SyncDir,
    /// `rename`.
    Rename,
    /// `remove`.
    Remove,
    /// `list`.
    List,
    /// `create_dir_all`.
    Mkdir,
}

impl OpKind {
    /// Every kind.
    pub const ALL: [OpKind; 10] = [
        OpKind::Create,
        OpKind::Open,
        OpKind::Read,
        OpKind::Write,
        OpKind::Sync,
        OpKind::SyncDir,
        OpKind::Rename,
        OpKind::Remove,
        OpKind::List,
        OpKind::Mkdir,
    ];
    /// Whether the operation changes state (reads, opens and lists do not).
    pub fn is_mutation(self) -> bool {
        !matches!(self, OpKind::Open | OpKind::Read | OpKind::List)
    }
}

/// The error an injected fault returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultError {
    /// `EIO`.
    Eio,
    /// `ENOSPC`.
    Enospc,
}

impl FaultError {
    pub(super) fn to_io(self, what: &str) -> io::Error {
        let errno = match self {
            FaultError::Eio => libc::EIO,
            FaultError::Enospc => libc::ENOSPC,
        };
        let os = io::Error::from_raw_os_error(errno);
        io::Error::new(os.kind(), format!("injected fault on {what}: {os}"))
    }
}

/// One fault to inject.
#[derive(Debug, Clone)]
pub struct Fault {
    /// Which operations count (`None`: every kind).
    pub kind: Option<OpKind>,
    /// Only operations on paths containing this string count (`None`: every path).
    pub path_contains: Option<String>,
    /// The first failing operation is the `nth` matching one from now (1-based).
    pub nth: u64,
    /// The error returned.
    pub error: FaultError,
    /// Keep failing every later matching operation (until [`FaultFs::clear_faults`]).
    pub persistent: bool,
    /// A failing `append` first writes the first half of its bytes (a short write).
    pub short_write: bool,
}

impl Fault {
    /// Fails the `nth` operation of `kind` (`None`: of any kind) once with `EIO`.
    pub fn nth(kind: Option<OpKind>, nth: u64) -> Fault {
        Fault {
            kind,
            path_contains: None,
            nth,
            error: FaultError::Eio,
            persistent: false,
            short_write: false,
        }
    }
    /// The same fault, persistent.
    pub fn persistent(mut self) -> Fault {
        self.persistent = true;
        self
    }
    /// The same fault with another error.
    pub fn error(mut self, e: FaultError) -> Fault {
        self.error = e;
        self
    }
    /// The same fault, as a short write on appends.
    pub fn short(mut self) -> Fault {
        self.short_write = true;
        self
    }
}

/// What a crash does with the bytes of a file beyond its synced length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashMode {
    /// Unsynced bytes are lost.
    Drop,
    /// A random prefix of the unsynced bytes survives.
    KeepPartial,
    /// The file keeps a random part of its unsynced length, but those bytes read as zeros.
    ZeroTail,
    /// The file keeps a random part of its unsynced length, filled with random bytes.
    GarbageTail,
    /// A random number of whole unsynced appends survives (the file size persisted at a write
    /// boundary, as when `i_size` reached the disk with the data of earlier writes only).
    KeepWholeWrites,
    /// The unsynced bytes survive except in one stale page: from a random unsynced offset to
    /// the next 4 KiB boundary they read as zeros. That page reached the disk before later
    /// appends filled it, and later pages reached it whole (write-back out of order).
    PagesOutOfOrder,
}

impl CrashMode {
    /// Every mode.
    pub const ALL: [CrashMode; 6] = [
        CrashMode::Drop,
        CrashMode::KeepPartial,
        CrashMode::ZeroTail,
        CrashMode::GarbageTail,
        CrashMode::KeepWholeWrites,
        CrashMode::PagesOutOfOrder,
    ];
}

/// One namespace change not yet covered by a directory sync (out-of-order mode only).

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultStats {
    /// Operations counted.
    pub ops: u64,
    /// Faults injected (operations failed by a rule).
    pub faults: u64,
    /// Crashes simulated.
    pub crashes: u64,
}
