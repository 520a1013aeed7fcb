//! Real files: [`StdFs`] implements the file layer on `std::fs`, with optional O_DIRECT reads.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
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

struct StdWritable {
    w: BufWriter<File>,
    len: u64,
}

impl WritableFile for StdWritable {
    fn append(&mut self, data: &[u8]) -> io::Result<()> {
        self.w.write_all(data)?;
        self.len += data.len() as u64;
        Ok(())
    }
    fn flush(&mut self) -> io::Result<()> {
        self.w.flush()
    }
    fn sync(&mut self) -> io::Result<()> {
        self.w.flush()?;
        self.w.get_ref().sync_data()
    }
    fn len(&self) -> u64 {
        self.len
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

    fn map(&self) -> Option<Arc<memmap2::Mmap>> {
        if self.direct || self.len == 0 {
            return None;
        }
        // SAFETY: the mapped bytes must not change or disappear while mapped. Scree maps only
        // table files, which it writes once, syncs and never opens for writing again (a
        // compaction writes new files; deleting an old one leaves its inode, and so the map,
        // intact until the map is dropped). A process outside Scree that truncates a table file
        // of an open database would make a read of the lost pages raise SIGBUS, as with
        // LevelDB's memory-mapped tables; `Options::mmap_reads = false` reads with pread
        // instead. Checksums are verified on mapped blocks as on read ones.
        unsafe { memmap2::Mmap::map(&self.file) }.ok().map(Arc::new)
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
        while done < span {
            let buf = window.get_mut(done..).unwrap_or_default();
            let n = self.file.read_at(buf, start + done as u64)?;
            if n == 0 {
                break;
            }
            done += n;
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
        Ok(Box::new(StdWritable {
            w: BufWriter::with_capacity(256 * 1024, f),
            len: 0,
        }))
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
        let f = open_read_write(path, false)?;
        match f.try_lock() {
            Ok(()) => Ok(Box::new(StdLock { _file: f })),
            Err(std::fs::TryLockError::WouldBlock) => Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                "lock held by another process",
            )),
            Err(std::fs::TryLockError::Error(e)) => Err(e),
        }
    }
}
