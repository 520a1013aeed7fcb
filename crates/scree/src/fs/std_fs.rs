//! Real files: [`StdFs`] implements the file layer on `std::fs`, with optional O_DIRECT reads.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::Arc;

use super::{FileLock, FileSystem, ReadableFile, WritableFile};

/// Opens (creating it if needed) a file for reading and writing.
fn open_read_write(path: &Path, truncate: bool) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(truncate)
        .open(path)
}

/// The operating system's file system.
#[derive(Debug, Default, Clone, Copy)]
pub struct StdFs;

/// Buffer of a [`StdWritable`]: appends smaller than this are gathered into one `write(2)`.
const WRITE_BUFFER: usize = 256 * 1024;

/// A file appended with `write(2)` through a user-space buffer. Unlike `std::io::BufWriter`,
/// a failed write drops the buffered bytes and poisons the writer: later appends, flushes and
/// syncs fail, and dropping it writes nothing. Otherwise the bytes of a write that returned an
/// error could reach the file later (at the drop, once space was freed) and replay after a
/// reopen; this is the WAL's writer where the memory-mapped log cannot be used.
struct StdWritable {
    file: File,
    buf: Vec<u8>,
    /// The file's length: what it held when opened plus the bytes that reached it since.
    written: u64,
    /// The error that poisoned the writer.
    failed: Option<io::ErrorKind>,
}

impl StdWritable {
    fn new(file: File) -> StdWritable {
        Self::at(file, 0)
    }

    /// A writer of `file`, which already holds `len` bytes (opened with `O_APPEND`).
    fn at(file: File, len: u64) -> StdWritable {
        StdWritable {
            file,
            buf: Vec::new(),
            written: len,
            failed: None,
        }
    }

    fn check(&self) -> io::Result<()> {
        match self.failed {
            None => Ok(()),
            Some(kind) => Err(io::Error::new(
                kind,
                "an earlier write to this file failed; its bytes were dropped",
            )),
        }
    }

    /// Writes `data` to the file, counting what reaches it; on an error the writer is poisoned.
    fn write_out(&mut self, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() {
            match self.file.write(data) {
                Ok(0) => {
                    let e = io::Error::new(io::ErrorKind::WriteZero, "write(2) wrote nothing");
                    self.failed = Some(e.kind());
                    return Err(e);
                }
                Ok(n) => {
                    self.written += n as u64;
                    data = data.get(n..).unwrap_or_default();
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.failed = Some(e.kind());
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    fn flush_buf(&mut self) -> io::Result<()> {
        let buf = std::mem::take(&mut self.buf);
        let r = self.write_out(&buf);
        // Keep the allocation; a failed write's bytes are dropped with it.
        self.buf = buf;
        self.buf.clear();
        r
    }
}

impl WritableFile for StdWritable {
    fn append(&mut self, data: &[u8]) -> io::Result<()> {
        self.check()?;
        if self.buf.len() + data.len() > WRITE_BUFFER {
            self.flush_buf()?;
        }
        if data.len() >= WRITE_BUFFER {
            return self.write_out(data);
        }
        if self.buf.capacity() == 0 {
            self.buf.reserve_exact(WRITE_BUFFER);
        }
        self.buf.extend_from_slice(data);
        Ok(())
    }
    fn flush(&mut self) -> io::Result<()> {
        self.check()?;
        self.flush_buf()
    }
    fn sync(&mut self) -> io::Result<()> {
        self.flush()?;
        self.file.sync_data()
    }
    fn len(&self) -> u64 {
        self.written + self.buf.len() as u64
    }
}

impl Drop for StdWritable {
    fn drop(&mut self) {
        // A writer dropped without a flush (a database closed without a sync) still hands its
        // bytes to the OS, as the memory-mapped log's copies already are; a poisoned one
        // writes nothing more.
        if self.failed.is_none() {
            let _ = self.flush_buf();
        }
    }
}

struct StdReadable {
    file: File,
    len: u64,
    direct: bool,
}

const DIRECT_ALIGN: usize = 4096;

impl ReadableFile for StdReadable {
    fn read_into(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        if self.direct {
            // O_DIRECT needs an aligned window: read_at builds one.
            return super::copy_read(&self.read_at(offset, buf.len())?, buf);
        }
        self.file.read_exact_at(buf, offset)
    }

    fn map(&self, len: u64) -> Option<Arc<memmap2::Mmap>> {
        if self.direct || len == 0 || len > self.len {
            return None;
        }
        let len = usize::try_from(len).ok()?;
        // SAFETY: the mapped bytes must not change or disappear while mapped. Scree maps only
        // bytes it never writes again: a whole table file, which it writes once, syncs and
        // never opens for writing again, or the prefix of an appendable table that a version
        // names. Such a table is only ever reopened to append (`O_APPEND`: every write lands
        // at the end, after the mapped prefix), so the file grows but the mapped bytes stay
        // as they are, and growing a file neither moves nor unmaps pages mapped before. The
        // map is exactly `len` bytes long: the rest of its last page, which later appends
        // fill, is outside every slice it hands out. A compaction writes new files; deleting
        // an old one leaves its inode, and so the map, intact until the map is dropped. A
        // process outside Scree that truncates a table file of an open database would make a
        // read of the lost pages raise SIGBUS, as with LevelDB's memory-mapped tables;
        // `Options::mmap_reads = false` reads with pread instead. Checksums are verified on
        // mapped blocks as on read ones.
        unsafe { memmap2::MmapOptions::new().len(len).map(&self.file) }
            .ok()
            .map(Arc::new)
    }

    fn read_at(&self, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        if !self.direct {
            let mut buf = vec![0u8; len];
            self.file.read_exact_at(&mut buf, offset)?;
            return Ok(buf);
        }
        // O_DIRECT needs an aligned buffer, offset and length. We over-allocate a plain Vec and
        // use the aligned window inside it, so no unsafe allocation is needed.
        let start = offset - offset % DIRECT_ALIGN as u64;
        let lead = (offset - start) as usize;
        let span = (lead + len).div_ceil(DIRECT_ALIGN) * DIRECT_ALIGN;
        let mut raw = vec![0u8; span + DIRECT_ALIGN];
        let shift = (DIRECT_ALIGN - (raw.as_ptr() as usize % DIRECT_ALIGN)) % DIRECT_ALIGN;
        let window = raw
            .get_mut(shift..shift + span)
            .ok_or_else(|| io::Error::other("direct read window"))?;
        let mut done = 0usize;
        while done < lead + len {
            let buf = window.get_mut(done..).unwrap_or_default();
            let n = self.file.read_at(buf, start + done as u64)?;
            if n == 0 {
                break;
            }
            done += n;
            if !done.is_multiple_of(DIRECT_ALIGN) {
                // A short read that ended at the end of the file as it was: the next read would
                // start at an unaligned offset, which O_DIRECT refuses with EINVAL once the
                // file has grown meanwhile (an appendable table appended to while a reader
                // reads the prefix its version names: found by direct_reads_with_large_items
                // on `lightweight`). Stop here; the check below says whether it was enough.
                break;
            }
        }
        if done < lead + len {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "short direct read",
            ));
        }
        Ok(window.get(lead..lead + len).unwrap_or_default().to_vec())
    }
    fn len(&self) -> u64 {
        self.len
    }
}

struct StdLock {
    _file: File,
}
impl FileLock for StdLock {}

impl FileSystem for StdFs {
    fn create(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        let f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)?;
        Ok(Box::new(StdWritable::new(f)))
    }
    fn create_log(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        match super::mmap_log::MmapLog::new(open_read_write(path, true)?) {
            Ok(log) => Ok(Box::new(log)),
            // No preallocation or no shared mapping on this file system (or no space for the
            // first window): append with write(2) instead, which reports a full disk on the
            // write that meets it.
            Err(_) => self.create(path),
        }
    }
    fn reopen_for_append(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        // O_APPEND: every write(2) lands at the end of the file, whatever its offset, so no
        // byte before the end at the reopen (which readers may have mapped) is written.
        let file = OpenOptions::new().append(true).open(path)?;
        let len = file.metadata()?.len();
        Ok(Box::new(StdWritable::at(file, len)))
    }
    fn open(&self, path: &Path, direct: bool) -> io::Result<Arc<dyn ReadableFile>> {
        let mut opts = OpenOptions::new();
        opts.read(true);
        if direct {
            opts.custom_flags(libc::O_DIRECT);
        }
        let file = opts.open(path)?;
        let len = file.metadata()?.len();
        Ok(Arc::new(StdReadable { file, len, direct }))
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(dir)? {
            let e = e?;
            if let Some(n) = e.file_name().to_str() {
                out.push(n.to_string());
            }
        }
        Ok(out)
    }
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
    fn sync_file(&self, path: &Path) -> io::Result<()> {
        File::open(path)?.sync_all()
    }
    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }
    fn file_size(&self, path: &Path) -> io::Result<u64> {
        Ok(std::fs::metadata(path)?.len())
    }
    fn lock(&self, path: &Path) -> io::Result<Box<dyn FileLock>> {
        lock_file(open_read_write(path, false)?)
    }

    fn lock_existing(&self, path: &Path) -> io::Result<Option<Box<dyn FileLock>>> {
        // flock(2) takes an exclusive lock through a read-only descriptor too.
        match File::open(path) {
            Ok(f) => lock_file(f).map(Some),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// Takes the exclusive lock of an open lock file without waiting.
fn lock_file(f: File) -> io::Result<Box<dyn FileLock>> {
    match f.try_lock() {
        Ok(()) => Ok(Box::new(StdLock { _file: f })),
        Err(std::fs::TryLockError::WouldBlock) => Err(io::Error::new(
            io::ErrorKind::WouldBlock,
            "lock held by another process",
        )),
        Err(std::fs::TryLockError::Error(e)) => Err(e),
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::unwrap_used)]
mod tests {
    use std::io::Read;
    use std::os::fd::{FromRawFd, OwnedFd};

    use super::*;

    /// A non-blocking pipe (read end, write end): a write to a full pipe fails (`WouldBlock`)
    /// until the reader drains it, like a disk that is full until space is freed.
    fn pipe() -> (File, File) {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: `fds` has room for the two descriptors pipe2 writes; on success each is a new
        // descriptor that nothing else owns, so wrapping it in an OwnedFd is sound.
        let (r, w) = unsafe {
            assert_eq!(libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK), 0);
            (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1]))
        };
        (File::from(r), File::from(w))
    }

    fn drain(r: &mut File) -> Vec<u8> {
        let mut out = Vec::new();
        let mut buf = [0u8; 65536];
        loop {
            match r.read(&mut buf) {
                Ok(0) => return out,
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return out,
                Err(e) => panic!("{e}"),
            }
        }
    }

    /// `std::io::BufWriter` keeps the bytes of a failed write and writes them when dropped:
    /// with it, a WAL record whose write returned an error (its writer told so) would reach the
    /// file at close once space was freed, and replay after a reopen.
    #[test]
    fn bytes_of_a_failed_write_never_reach_the_file_later() {
        let (mut r, mut fill) = pipe();
        let w_end = fill.try_clone().unwrap();
        // Fill the pipe until it takes nothing more.
        let chunk = [7u8; 4096];
        loop {
            match fill.write(&chunk) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("{e}"),
            }
        }
        let mut w = StdWritable::new(w_end);
        w.append(b"FAILED RECORD").unwrap();
        assert!(w.flush().is_err(), "a full pipe takes no bytes");
        assert!(w.append(b"later").is_err(), "a failed writer is poisoned");
        assert!(w.flush().is_err());
        // Space is freed, then the writer is dropped (the database closes).
        let before = drain(&mut r);
        assert!(!before.is_empty());
        drop(w);
        drop(fill);
        let after = drain(&mut r);
        assert!(
            !after.windows(6).any(|x| x == b"FAILED"),
            "a failed write's bytes reached the file at the drop"
        );
    }

    /// Buffered bytes of a writer that did not fail reach the file when it is dropped, and
    /// `len` counts what was appended.
    #[test]
    fn a_dropped_writer_hands_its_buffer_to_the_os() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let mut w = StdFs.create(&path).unwrap();
        w.append(b"abc").unwrap();
        let big = vec![1u8; WRITE_BUFFER + 10];
        w.append(&big).unwrap();
        w.append(b"def").unwrap();
        assert_eq!(w.len(), 3 + big.len() as u64 + 3);
        drop(w);
        let got = std::fs::read(&path).unwrap();
        assert_eq!(got.len(), 6 + big.len());
        assert_eq!(&got[..3], b"abc");
        assert_eq!(&got[got.len() - 3..], b"def");
    }

    /// A reopened file is appended to at its end, `len` counts from its length, and a map of
    /// its old length made before the appends still reads the old bytes, exactly that many.
    #[test]
    fn a_reopened_file_grows_at_its_end_under_a_map_of_its_prefix() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let mut w = StdFs.create(&path).unwrap();
        w.append(&[1u8; 5000]).unwrap();
        w.sync().unwrap();
        drop(w);
        let r = StdFs.open(&path, false).unwrap();
        let map = r.map(5000).unwrap();
        assert_eq!(map.len(), 5000);
        assert!(r.map(5001).is_none(), "a map past the end would fault");
        let mut w = StdFs.reopen_for_append(&path).unwrap();
        assert_eq!(w.len(), 5000);
        w.append(b"tail").unwrap();
        assert_eq!(w.len(), 5004);
        w.sync().unwrap();
        let got = std::fs::read(&path).unwrap();
        assert_eq!(got.len(), 5004);
        assert!(got[..5000].iter().all(|&b| b == 1));
        assert_eq!(&got[5000..], b"tail");
        assert_eq!(map.len(), 5000);
        assert!(map.iter().all(|&b| b == 1));
        assert!(StdFs
            .reopen_for_append(&dir.path().join("missing"))
            .is_err());
    }
}
