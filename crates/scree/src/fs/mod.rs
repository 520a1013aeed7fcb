//! The file layer: every byte Scree reads or writes goes through [`FileSystem`].
//!
//! Real files live in [`std_fs`]; fault injection and band emulation implement the same trait.
//! The engine wraps files in [`CountedWriter`] / [`CountedReader`] so that bytes and block reads
//! are accounted by cause (see `stats`).

pub mod band;
#[doc(hidden)]
pub mod mmap_log;
pub mod std_fs;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::stats::{IoStats, ReadKind, WriteCause};

/// A file opened for appending: created ([`FileSystem::create`]) or reopened at its end
/// ([`FileSystem::reopen_for_append`]). Bytes are durable only after [`WritableFile::sync`].
pub trait WritableFile: Send {
    /// Appends `data` at the end of the file (may be buffered in user space).
    fn append(&mut self, data: &[u8]) -> io::Result<()>;
    /// Hands buffered bytes to the operating system (survives a process crash, not a power loss).
    fn flush(&mut self) -> io::Result<()>;
    /// Makes every appended byte durable (flush + fdatasync).
    fn sync(&mut self) -> io::Result<()>;
    /// Makes every appended byte durable for the last time: the caller appends nothing after
    /// it (a memory-mapped log refuses). A writer that reserved space ahead releases it first,
    /// so the sync writes back only appended bytes. Defaults to [`WritableFile::sync`].
    fn finish(&mut self) -> io::Result<()> {
        self.sync()
    }
    /// The file's length as this writer sees it: the length it had when reopened (0 for a
    /// created file) plus the bytes appended since. The next append lands at this offset.
    fn len(&self) -> u64;
    /// Whether the file is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Whether appends are copies into a memory map rather than `write(2)` calls (they then do
    /// not show in the process's `wchar`; `Stats::bytes_mapped` counts them).
    fn mapped(&self) -> bool {
        false
    }
}

/// A file opened for positional reads.
pub trait ReadableFile: Send + Sync {
    /// Reads exactly `len` bytes at `offset`; a short file is an `UnexpectedEof` error.
    fn read_at(&self, offset: u64, len: usize) -> io::Result<Vec<u8>>;
    /// Reads exactly `buf.len()` bytes at `offset` into `buf` (a reader that reuses its
    /// buffer saves an allocation per block); a short file is an `UnexpectedEof` error.
    fn read_into(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        copy_read(&self.read_at(offset, buf.len())?, buf)
    }
    /// The file's length in bytes.
    fn len(&self) -> u64;
    /// Whether the file is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// A read-only memory map of the file's first `len` bytes (at most its length), if this
    /// file layer can make one (none by default; never for O_DIRECT files). Only for bytes
    /// nothing writes any more: a table's whole file, or the prefix of an appendable table
    /// that its version names (appends land after it and never change it).
    fn map(&self, _len: u64) -> Option<Arc<memmap2::Mmap>> {
        None
    }
}

/// Copies the bytes of a read into `buf`; a read shorter than `buf` is an `UnexpectedEof`
/// error (never a length-mismatch panic).
pub(crate) fn copy_read(data: &[u8], buf: &mut [u8]) -> io::Result<()> {
    let src = data
        .get(..buf.len())
        .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "short read"))?;
    buf.copy_from_slice(src);
    Ok(())
}

/// A held exclusive lock on a database directory; released on drop.
pub trait FileLock: Send + Sync {}

/// The operations Scree needs from a file system.
pub trait FileSystem: Send + Sync + 'static {
    /// Creates (or truncates) a file for appending.
    fn create(&self, path: &Path) -> io::Result<Box<dyn WritableFile>>;
    /// Creates (or truncates) a write-ahead log. Its appends may reach the OS at once (then
    /// `flush` does nothing), and until the writer is dropped the file may extend past the
    /// appended bytes with zeros, which log readers take as the end of the log.
    fn create_log(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        self.create(path)
    }
    /// Reopens an existing file to append to it: the writer starts at the file's current end
    /// ([`WritableFile::len`] is its length) and never writes before it. The appended bytes
    /// are durable only after [`WritableFile::sync`], like those of a created file; the bytes
    /// already there are not touched. For appendable tables (docs/format.md, "Appendable
    /// tables"). Default: `Unsupported` (a file layer without appendable tables).
    fn reopen_for_append(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!(
                "{}: this file system cannot reopen a file to append",
                path.display()
            ),
        ))
    }
    /// Reopens an existing file to write from byte `len` on: the bytes from `len` to its end
    /// are discarded first (the file is cut to `len`), then appends land at `len`. Only the
    /// band emulator's bands offer it (an LWC-tree's tail overwrite at a band's write pointer,
    /// docs/smr.md); ordinary files never overwrite live bytes. `len` past the end is
    /// `InvalidInput`. Default: `Unsupported`.
    fn reopen_truncated(&self, path: &Path, len: u64) -> io::Result<Box<dyn WritableFile>> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!(
                "{}: this file system cannot cut a file to {len} bytes to write over its tail",
                path.display()
            ),
        ))
    }
    /// The counters of an emulated device ([`band::BandFs`]); `None` for other file layers.
    fn device_stats(&self) -> Option<band::DeviceStats> {
        None
    }
    /// The most bytes a table file can hold here: a host-managed shingled band's size
    /// ([`band::BandFs`], one table file per band); `None` (no limit) for other file layers.
    fn max_table_file_bytes(&self) -> Option<u64> {
        None
    }
    /// Opens a file for reading; `direct` asks for O_DIRECT reads that bypass the page cache.
    fn open(&self, path: &Path, direct: bool) -> io::Result<Arc<dyn ReadableFile>>;
    /// Reads a whole (small) file.
    fn read_all(&self, path: &Path) -> io::Result<Vec<u8>> {
        let f = self.open(path, false)?;
        let len = usize::try_from(f.len()).map_err(|_| io::Error::other("file too large"))?;
        f.read_at(0, len)
    }
    /// Atomically renames `from` to `to` (not durable until the directory is synced).
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Removes a file.
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// Names of the entries of a directory.
    fn list(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// Creates a directory and its parents.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Makes creates, renames and removes in `dir` durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Makes every byte of an existing file durable (fsync of a file this process did not
    /// write, e.g. a WAL replayed at open whose tail may still be only in the page cache).
    fn sync_file(&self, path: &Path) -> io::Result<()>;
    /// Whether a file exists.
    fn exists(&self, path: &Path) -> bool;
    /// Size of a file in bytes.
    fn file_size(&self, path: &Path) -> io::Result<u64>;
    /// Takes an exclusive lock; `Err(WouldBlock)` when someone else holds it.
    fn lock(&self, path: &Path) -> io::Result<Box<dyn FileLock>>;
    /// The same lock for a read-only open, which must create and write nothing: taken through
    /// a read-only handle, so that a database the process may only read can be opened.
    /// `Ok(None)` when there is no lock file (no writer has the database open: one creates
    /// it first). Default: [`FileSystem::lock`].
    fn lock_existing(&self, path: &Path) -> io::Result<Option<Box<dyn FileLock>>> {
        self.lock(path).map(Some)
    }
}

/// The file system plus the counters every I/O is accounted to.
#[derive(Clone)]
#[doc(hidden)]
pub struct Env {
    /// The file layer.
    pub fs: Arc<dyn FileSystem>,
    /// The engine's I/O counters.
    pub stats: Arc<IoStats>,
    /// Whether table reads use O_DIRECT.
    pub direct_reads: bool,
    /// Whether sorted tables are read through a memory map (`Options::mmap_reads`; not with
    /// `direct_reads`).
    pub mmap_reads: bool,
}

impl Env {
    /// An environment over `fs` with counters of its own and plain reads (no O_DIRECT, no
    /// memory map): what tools and tests that read files outside an open database use.
    pub fn plain(fs: Arc<dyn FileSystem>) -> Env {
        Env {
            fs,
            stats: Arc::new(IoStats::default()),
            direct_reads: false,
            mmap_reads: false,
        }
    }

    /// Creates a file whose written bytes are counted under `cause`.
    pub fn create(&self, path: &Path, cause: WriteCause) -> Result<CountedWriter> {
        let inner = self.fs.create(path).map_err(|e| Error::io(path, e))?;
        Ok(CountedWriter {
            inner,
            path: path.to_path_buf(),
            cause,
            stats: self.stats.clone(),
        })
    }

    /// Creates a write-ahead log (see [`FileSystem::create_log`]), bytes counted under `cause`.
    pub fn create_log(&self, path: &Path, cause: WriteCause) -> Result<CountedWriter> {
        let inner = self.fs.create_log(path).map_err(|e| Error::io(path, e))?;
        Ok(CountedWriter {
            inner,
            path: path.to_path_buf(),
            cause,
            stats: self.stats.clone(),
        })
    }

    /// Reopens an existing file at its end to append to it ([`FileSystem::reopen_for_append`]);
    /// the bytes appended (not those already there) are counted under `cause`.
    pub fn reopen_for_append(&self, path: &Path, cause: WriteCause) -> Result<CountedWriter> {
        let inner = self
            .fs
            .reopen_for_append(path)
            .map_err(|e| Error::io(path, e))?;
        Ok(CountedWriter {
            inner,
            path: path.to_path_buf(),
            cause,
            stats: self.stats.clone(),
        })
    }

    /// A writer that refuses every append, standing in for the WAL and the manifest of a
    /// database opened read-only: a write that got past the `Error::ReadOnly` checks fails
    /// here instead of creating a file. Syncs succeed, as nothing was appended.
    pub fn refusing_writer(&self, path: &Path, cause: WriteCause) -> CountedWriter {
        CountedWriter {
            inner: Box::new(RefusingFile),
            path: path.to_path_buf(),
            cause,
            stats: self.stats.clone(),
        }
    }

    /// Opens a file for counted reads of the whole file.
    pub fn open(&self, path: &Path, direct: bool) -> Result<CountedReader> {
        let inner = self.fs.open(path, direct).map_err(|e| Error::io(path, e))?;
        let len = inner.len();
        Ok(self.reader(inner, path, direct, len))
    }

    /// Opens a file for counted reads of its first `len` bytes: reads past them are refused
    /// as reads past the end, and a memory map covers only them. The file may be longer (an
    /// appendable table whose later bytes no version names yet); a shorter one is
    /// `Corruption` (what a version names was synced before the manifest named it).
    pub fn open_prefix(&self, path: &Path, direct: bool, len: u64) -> Result<CountedReader> {
        let inner = self.fs.open(path, direct).map_err(|e| Error::io(path, e))?;
        let on_disk = inner.len();
        if on_disk < len {
            return Err(Error::corruption(
                path,
                on_disk,
                format!("file is {on_disk} bytes, the manifest says it holds {len}"),
            ));
        }
        Ok(self.reader(inner, path, direct, len))
    }

    /// A counted reader of the first `len` bytes of `inner`, mapped when the options say so.
    fn reader(
        &self,
        inner: Arc<dyn ReadableFile>,
        path: &Path,
        direct: bool,
        len: u64,
    ) -> CountedReader {
        let map = if self.mmap_reads && !direct {
            inner.map(len).filter(|m| m.len() as u64 == len)
        } else {
            None
        };
        CountedReader {
            inner,
            map,
            len,
            path: path.to_path_buf(),
            stats: self.stats.clone(),
        }
    }

    /// Reads a whole small file (counted as metadata).
    pub fn read_all(&self, path: &Path) -> Result<Vec<u8>> {
        let data = self.fs.read_all(path).map_err(|e| Error::io(path, e))?;
        self.stats.count_read(ReadKind::Metadata, data.len() as u64);
        Ok(data)
    }

    /// Renames a file.
    pub fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        self.fs.rename(from, to).map_err(|e| Error::io(to, e))
    }

    /// Removes a file.
    pub fn remove(&self, path: &Path) -> Result<()> {
        self.fs.remove(path).map_err(|e| Error::io(path, e))
    }

    /// Syncs a directory.
    pub fn sync_dir(&self, dir: &Path) -> Result<()> {
        self.fs.sync_dir(dir).map_err(|e| Error::io(dir, e))
    }

    /// Syncs an existing file.
    pub fn sync_file(&self, path: &Path) -> Result<()> {
        self.fs.sync_file(path).map_err(|e| Error::io(path, e))
    }

    /// Lists a directory.
    pub fn list(&self, dir: &Path) -> Result<Vec<String>> {
        self.fs.list(dir).map_err(|e| Error::io(dir, e))
    }
}

/// See [`Env::refusing_writer`].
struct RefusingFile;

impl WritableFile for RefusingFile {
    fn append(&mut self, _data: &[u8]) -> io::Result<()> {
        Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            "the database is open read-only",
        ))
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
    fn sync(&mut self) -> io::Result<()> {
        Ok(())
    }
    fn len(&self) -> u64 {
        0
    }
}

/// A writable file whose bytes are counted under one [`WriteCause`].
#[doc(hidden)]
pub struct CountedWriter {
    inner: Box<dyn WritableFile>,
    path: PathBuf,
    cause: WriteCause,
    stats: Arc<IoStats>,
}

impl CountedWriter {
    /// Appends bytes.
    pub fn append(&mut self, data: &[u8]) -> Result<()> {
        self.append_parts(&[data])
    }
    /// Appends `parts` one after the other, counted once (a log record's header and payload).
    /// Bytes that reached the file before a failure are counted too: whole parts appended
    /// before a failing one, and whatever part of the failing one the file took (a short write,
    /// or a mapped log's copy cut off where its next window could not be allocated), as the
    /// growth of the file's length.
    pub fn append_parts(&mut self, parts: &[&[u8]]) -> Result<()> {
        let before = self.inner.len();
        let mut res = Ok(());
        for p in parts {
            if let Err(e) = self.inner.append(p) {
                res = Err(Error::io(&self.path, e));
                break;
            }
        }
        let n = self.inner.len().saturating_sub(before);
        self.stats.count_write(self.cause, n);
        if self.inner.mapped() {
            self.stats.count_mapped(n);
        }
        res
    }
    /// Hands buffered bytes to the OS.
    pub fn flush(&mut self) -> Result<()> {
        self.inner.flush().map_err(|e| Error::io(&self.path, e))
    }
    /// Makes the file durable.
    pub fn sync(&mut self) -> Result<()> {
        self.inner.sync().map_err(|e| Error::io(&self.path, e))
    }
    /// Syncs for the last time ([`WritableFile::finish`]).
    pub fn finish(&mut self) -> Result<()> {
        self.inner.finish().map_err(|e| Error::io(&self.path, e))
    }
    /// The file's length as written: its length when reopened (0 when created) plus the bytes
    /// appended since ([`WritableFile::len`]); the next append lands here.
    pub fn len(&self) -> u64 {
        self.inner.len()
    }
    /// Whether the file is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
    /// Changes the cause later bytes are counted under.
    pub fn set_cause(&mut self, cause: WriteCause) {
        self.cause = cause;
    }
}

/// A readable file whose block reads are counted by kind. It reads the first
/// [`CountedReader::len`] bytes of the file only (all of it, or the prefix
/// [`Env::open_prefix`] names).
#[derive(Clone)]
#[doc(hidden)]
pub struct CountedReader {
    inner: Arc<dyn ReadableFile>,
    /// The file's memory map (`Env::mmap_reads`), which reads are served from: exactly the
    /// `len` bytes readers may see.
    map: Option<Arc<memmap2::Mmap>>,
    /// The bytes readers may see: the file's length at open, or the prefix a version names.
    len: u64,
    path: PathBuf,
    stats: Arc<IoStats>,
}

impl CountedReader {
    /// A read of `len` bytes at `offset` must lie inside the readable bytes.
    fn check_range(&self, offset: u64, len: usize) -> Result<()> {
        let end = offset.checked_add(len as u64);
        if end.is_none_or(|e| e > self.len) {
            return Err(Error::corruption(
                &self.path,
                offset,
                format!("read of {len} bytes past end of file ({} bytes)", self.len),
            ));
        }
        Ok(())
    }

    /// Reads `len` bytes at `offset`, counted as one block read of `kind`.
    pub fn read(&self, offset: u64, len: usize, kind: ReadKind) -> Result<Vec<u8>> {
        self.check_range(offset, len)?;
        let data = self
            .inner
            .read_at(offset, len)
            .map_err(|e| Error::io(&self.path, e))?;
        self.stats.count_read(kind, len as u64);
        Ok(data)
    }
    /// Reads `buf.len()` bytes at `offset` into `buf`, counted as one block read of `kind`.
    pub fn read_into(&self, offset: u64, buf: &mut [u8], kind: ReadKind) -> Result<()> {
        let len = buf.len();
        self.check_range(offset, len)?;
        self.inner
            .read_into(offset, buf)
            .map_err(|e| Error::io(&self.path, e))?;
        self.stats.count_read(kind, len as u64);
        Ok(())
    }
    /// The database's counters this file counts its reads in.
    pub(crate) fn io_stats(&self) -> &Arc<IoStats> {
        &self.stats
    }
    /// The file's memory map, when reads are served from one (`Env::mmap_reads` and a file
    /// layer that maps, [`ReadableFile::map`]).
    pub fn map(&self) -> Option<&Arc<memmap2::Mmap>> {
        self.map.as_ref()
    }
    /// The `len` bytes at `offset` in the file's map, counted as one block read of `kind`;
    /// `None` when the file is not mapped.
    pub fn mapped(&self, offset: u64, len: usize, kind: ReadKind) -> Result<Option<&[u8]>> {
        let Some(m) = &self.map else {
            return Ok(None);
        };
        self.check_range(offset, len)?;
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        let bytes = m
            .get(start..start.saturating_add(len))
            .ok_or_else(|| Error::corruption(&self.path, offset, "read past the mapped file"))?;
        self.stats.count_read(kind, len as u64);
        Ok(Some(bytes))
    }
    /// The bytes it reads: the file's length at open, or the prefix [`Env::open_prefix`]
    /// named.
    pub fn len(&self) -> u64 {
        self.len
    }
    /// Whether the file is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::fault::{Fault, FaultError, FaultFs, OpKind};

    /// A part whose append failed after some of its bytes reached the file (a short write; a
    /// memory-mapped log that copied part of a record before the next window could not be
    /// allocated) is counted: else `bytes_written` would fall short of the bytes the file holds.
    #[test]
    fn bytes_of_a_short_write_are_counted() {
        let fs = FaultFs::new(7);
        let dir = Path::new("/db");
        fs.create_dir_all(dir).expect("mkdir");
        let stats = Arc::new(IoStats::default());
        let env = Env {
            fs: fs.as_dyn(),
            stats: stats.clone(),
            direct_reads: false,
            mmap_reads: false,
        };
        let path = dir.join("000003.log");
        let mut w = env.create_log(&path, WriteCause::Wal).expect("create");
        w.append_parts(&[b"header", b"payload-1"]).expect("append");
        // The next part lands half, then fails with ENOSPC.
        fs.inject(
            Fault::nth(Some(OpKind::Write), 2)
                .error(FaultError::Enospc)
                .short(),
        );
        let res = w.append_parts(&[b"head", b"0123456789abcdef"]);
        assert!(matches!(res, Err(Error::Io { .. })), "{res:?}");
        let on_file = fs.file_bytes(&path).map_or(0, |b| b.len() as u64);
        assert_eq!(w.len(), on_file);
        assert_eq!(stats.written(WriteCause::Wal), on_file);
    }
}
