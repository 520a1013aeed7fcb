//! Write-ahead log files written through a shared memory map ([`MmapLog`]).
//!
//! A WAL record must survive a process crash once its write is acknowledged (docs/reliability.md),
//! which a user-space buffer cannot promise: every record used to be handed to the kernel with
//! one `write(2)`, about 40% of a put on the writer thread. Here the file is preallocated in
//! windows of [`WINDOW`] bytes (`fallocate`, so later page faults never need a new block and a
//! full disk is an `ENOSPC` error from `append`, not a `SIGBUS`) and mapped shared: an append is a
//! `memcpy` into the page cache, which the kernel keeps when the process dies. `sync` is
//! an unmap of the current window (syncing pages that are still mapped costs a TLB shootdown per
//! page) and `fdatasync`, as durable as `fsync` after `write(2)`; the next append maps it again.
//! Each full window is unmapped and its write-back started (`sync_file_range`) as the log moves on.
//!
//! Preparing a window (preallocating and mapping it) and retiring one (unmapping it, starting
//! its write-back) run, while a log has never been synced, on one background thread of the
//! process (`scree-wal-windows`): once the current window is half full the next one is
//! prepared, and the writer only swaps it in. Page faults are taken there too: the thread
//! faults in ([`POPULATE_CHUNK`]) chunks of the writer's mapping a little ahead of the appends
//! ([`POPULATE_AHEAD`]), so the writer's copies find their pages. Chunks, not a whole window
//! at once (on the writer, for a log's first window): with 4 MiB memtables a log is a little
//! over one window, so much of a window faulted in whole is never written (and is then cut
//! off). Faulting in chunks off the writer cut the writer's CPU per put by 3–13 % on 4 MiB
//! `trie` and `leveled` fills (docs/benchmarks.md, "How the headline figures moved"). Each job
//! is best effort: if the thread is gone, or preparing failed (a full disk), the writer does
//! the work itself, so errors reach `append` exactly as without the thread. A synced log
//! faults nothing in ahead: a faulted-in page is dirty, and the next `fdatasync` would write
//! its zeros back.
//!
//! Until the file is dropped its tail past the appended bytes is zero-filled preallocation;
//! the log reader treats an all-zero tail as the end of the log (docs/format.md). Dropping the
//! writer cuts the file to the appended length.

use std::fs::File;
use std::io;
use std::sync::{mpsc, Arc, OnceLock};

use memmap2::{MmapMut, MmapOptions};

use super::WritableFile;

/// Bytes preallocated and mapped at a time (a multiple of the page size).
pub const WINDOW: u64 = 4 << 20;

/// Bytes of the writer's mapping the background thread faults in per job (a multiple of the
/// page size that divides [`WINDOW`]).
const POPULATE_CHUNK: u64 = 256 << 10;

/// How far past the appended length the faulted-in part of an unsynced log's window reaches
/// before the writer asks for the next chunk. The writer appends a chunk in a few
/// milliseconds at most and faulting one in takes a fraction of one, so the writer takes a
/// page fault itself only when the background thread lags (then the kernel serves both).
const POPULATE_AHEAD: u64 = 2 * POPULATE_CHUNK;

/// A log file appended through a memory map.
pub struct MmapLog {
    file: Arc<File>,
    /// The mapped window `[start, start + WINDOW)`, if any.
    map: Option<MmapMut>,
    start: u64,
    /// Bytes appended.
    len: u64,
    /// File offset up to which the current window's faulting-in has been asked for (at most
    /// its end).
    populated_to: u64,
    /// Completion of the latest faulting-in job on the writer's mapping. Jobs run in order, so
    /// when it has completed every earlier one has: the mapping may be unmapped only then.
    populating: Option<mpsc::Receiver<()>>,
    /// Whether `sync` was ever called (then no window is prepared ahead).
    synced: bool,
    /// The next window, being prepared on the background thread.
    prepared: Option<Prepared>,
    /// Windows that came prepared from the background thread.
    windows_prepared_ahead: u64,
    /// Whether `finish` was called (appends are then errors).
    finished: bool,
}

/// A window being prepared in the background: its start and where the mapping will arrive.
struct Prepared {
    start: u64,
    rx: mpsc::Receiver<io::Result<MmapMut>>,
}

/// Work for the background thread.
type Job = Box<dyn FnOnce() + Send>;

/// Runs `job` on the process's window thread (started on first use); gives it back if there
/// is no such thread (it could not be started, or a job panicked and ended it).
fn in_background(job: Job) -> Result<(), Job> {
    static THREAD: OnceLock<Option<mpsc::Sender<Job>>> = OnceLock::new();
    let tx = THREAD.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("scree-wal-windows".into())
            .spawn(move || {
                while let Ok(job) = rx.recv() {
                    job();
                }
            })
            .ok()
            .map(|_| tx)
    });
    match tx {
        Some(tx) => tx.send(job).map_err(|e| e.0),
        None => Err(job),
    }
}

/// Preallocates and maps the window of `file` starting at `start`, faulting its first
/// `populate` bytes in writable.
fn map_at(file: &File, start: u64, populate: u64) -> io::Result<MmapMut> {
    fs4::FileExt::allocate(file, start + WINDOW)?;
    // SAFETY: a mapping is unsound if the file changes under it (another writer, or a
    // truncation, which turns accesses into SIGBUS). This file was created (truncated) by
    // this process inside a database directory it holds the exclusive lock of; the engine
    // only appends to it through its `MmapLog` and truncates it only in `Drop`, after the
    // log's mappings are gone and after any window being prepared has arrived (a retired
    // window may still be mapped then, but nothing accesses it again: the background thread
    // only unmaps it). The window lies inside the preallocated length (the allocate call above
    // succeeded). Readers (recovery) open the file only after the writer is dropped or the
    // process is gone.
    let map = unsafe {
        MmapOptions::new()
            .offset(start)
            .len(WINDOW as usize)
            .map_mut(file)?
    };
    // Faulted in, writable, in one call instead of one page fault per 4 KiB page as appends
    // reach it. Only a hint: kernels before 5.14 refuse it and appends fault the pages in.
    #[cfg(target_os = "linux")]
    if populate > 0 {
        let len = usize::try_from(populate.min(WINDOW)).unwrap_or(0);
        let _ = map.advise_range(memmap2::Advice::PopulateWrite, 0, len);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = populate;
    Ok(map)
}

/// Faults in, writable, `len` bytes of a mapping at address `addr` (Linux; a hint elsewhere
/// ignored).
///
/// # Safety
///
/// `[addr, addr + len)` must stay mapped until the call returns. `MADV_POPULATE_WRITE` reads
/// and writes no byte of the range (it faults pages in as a write would, without storing), so
/// it may run while another thread copies into the same pages.
unsafe fn populate_range(addr: usize, len: usize) {
    #[cfg(target_os = "linux")]
    // SAFETY: the caller keeps the range mapped (above); madvise takes no reference to it.
    unsafe {
        libc::madvise(addr as *mut libc::c_void, len, libc::MADV_POPULATE_WRITE);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (addr, len);
}

/// Starts writing back the full window at `start` without waiting (RocksDB's
/// `wal_bytes_per_sync`), so that the `fdatasync` when the log is retired or synced finds
/// little left to write: one 64 MiB sync at memtable rotation stalled the writer ~130 ms.
/// Only a hint: its failure changes nothing (a later sync reports real I/O errors).
#[cfg(target_os = "linux")]
fn start_writeback(file: &File, start: u64) {
    use std::os::fd::AsRawFd;
    let (Ok(off), Ok(len)) = (i64::try_from(start), i64::try_from(WINDOW)) else {
        return;
    };
    // SAFETY: sync_file_range only reads its integer arguments; the descriptor is open
    // (owned by `file`) for the duration of the call.
    unsafe {
        libc::sync_file_range(file.as_raw_fd(), off, len, libc::SYNC_FILE_RANGE_WRITE);
    }
}
#[cfg(not(target_os = "linux"))]
fn start_writeback(_file: &File, _start: u64) {}

impl MmapLog {
    /// Wraps a new, empty file opened for reading and writing. Fails (and the caller falls back
    /// to `write(2)`) where the file system cannot preallocate.
    pub fn new(file: File) -> io::Result<Self> {
        let mut log = MmapLog {
            file: Arc::new(file),
            map: None,
            start: 0,
            len: 0,
            populated_to: 0,
            populating: None,
            synced: false,
            prepared: None,
            windows_prepared_ahead: 0,
            finished: false,
        };
        log.map_window(0)?;
        Ok(log)
    }

    /// Preallocates and maps the window starting at `start` (again, after a sync unmapped it),
    /// on the writer, faulting nothing in: an unsynced log asks the background thread for
    /// chunks as appends go (`populate_ahead`).
    fn map_window(&mut self, start: u64) -> io::Result<()> {
        self.wait_populating();
        self.map = None;
        let map = map_at(&self.file, start, 0)?;
        self.map = Some(map);
        self.start = start;
        self.populated_to = self.len.max(start);
        self.populate_ahead();
        Ok(())
    }

    /// Waits until no faulting-in job uses the writer's mapping (before unmapping it here).
    fn wait_populating(&mut self) {
        if let Some(rx) = self.populating.take() {
            // An error means the job is gone (dropped unrun, or its thread ended): same.
            let _ = rx.recv();
        }
    }

    /// Asks the background thread to fault in the next chunk of the current window once the
    /// faulted-in part reaches less than [`POPULATE_AHEAD`] past the appended length (unsynced
    /// logs only).
    fn populate_ahead(&mut self) {
        let end = self.start + WINDOW;
        if self.synced || self.populated_to >= end || self.populated_to >= self.len + POPULATE_AHEAD
        {
            return;
        }
        let Some(map) = &self.map else { return };
        let from = self.populated_to;
        let to = (from + POPULATE_CHUNK).min(end);
        let (Ok(off), Ok(len)) = (
            usize::try_from(from - self.start),
            usize::try_from(to - from),
        ) else {
            return;
        };
        if off.checked_add(len).is_none_or(|e| e > map.len()) {
            return;
        }
        let addr = map.as_ptr() as usize + off;
        let (tx, rx) = mpsc::sync_channel(1);
        let job: Job = Box::new(move || {
            // SAFETY: the writer's mapping stays mapped until this job has run: the writer
            // unmaps it on its own thread only after `wait_populating` saw this job's (or a
            // later one's) completion, and a full window it hands to this thread to unmap is
            // queued after this job (the thread runs jobs in order).
            unsafe { populate_range(addr, len) };
            let _ = tx.send(());
        });
        if in_background(job).is_ok() {
            self.populating = Some(rx);
            self.populated_to = to;
        } else {
            // No thread: the writer's copies fault the window's pages in, as a synced log's
            // do; asking again at every append would only cost a job each time.
            self.populated_to = end;
        }
    }

    /// Starts preparing the window after the current one on the background thread.
    fn prepare_next(&mut self) {
        let start = self.start + WINDOW;
        let (tx, rx) = mpsc::sync_channel(1);
        let file = Arc::clone(&self.file);
        let job: Job = Box::new(move || {
            // The log may be gone (its receiver dropped): the mapping is then dropped here.
            let _ = tx.send(map_at(&file, start, POPULATE_AHEAD));
        });
        if in_background(job).is_ok() {
            self.prepared = Some(Prepared { start, rx });
        }
    }

    /// Moves to the next window; the full one is unmapped and its write-back started (in the
    /// background where possible).
    fn next_window(&mut self) -> io::Result<()> {
        if let Some(old) = self.map.take() {
            let file = Arc::clone(&self.file);
            let start = self.start;
            let job: Job = Box::new(move || {
                drop(old);
                start_writeback(&file, start);
            });
            // Queued after every faulting-in job on this window (jobs run in order).
            if let Err(job) = in_background(job) {
                self.wait_populating();
                job();
            }
            // That thread now owns the window's end: nothing queued later touches it.
            self.populating = None;
        }
        let start = self.start + WINDOW;
        match self.prepared.take() {
            Some(p) if p.start == start => match p.rx.recv() {
                Ok(Ok(map)) => {
                    self.windows_prepared_ahead += 1;
                    self.map = Some(map);
                    self.start = start;
                    self.populated_to = start + POPULATE_AHEAD;
                    Ok(())
                }
                // Failed (e.g. a full disk) or lost: try here, which reports the error.
                _ => self.map_window(start),
            },
            _ => self.map_window(start),
        }
    }

    /// Unmaps the current window and the one prepared ahead, if any. Waits for a window in
    /// preparation: it extends the file, so a cut of the tail must come after it.
    fn unmap_all(&mut self) {
        self.wait_populating();
        self.map = None;
        if let Some(p) = self.prepared.take() {
            let _ = p.rx.recv();
        }
    }

    /// Windows that came prepared from the background thread (tests).
    #[cfg(test)]
    fn windows_prepared_ahead(&self) -> u64 {
        self.windows_prepared_ahead
    }
}

impl WritableFile for MmapLog {
    fn append(&mut self, mut data: &[u8]) -> io::Result<()> {
        if self.finished && !data.is_empty() {
            return Err(io::Error::other("append to a finished log"));
        }
        while !data.is_empty() {
            if self.map.is_none() {
                self.map_window(self.start)?;
            }
            let off = (self.len - self.start) as usize;
            let room = (WINDOW as usize).saturating_sub(off);
            if room == 0 {
                self.next_window()?;
                continue;
            }
            let n = room.min(data.len());
            let (head, rest) = data.split_at(n);
            let dst = self
                .map
                .as_mut()
                .and_then(|m| m.get_mut(off..off + n))
                .ok_or_else(|| io::Error::other("log window out of range"))?;
            dst.copy_from_slice(head);
            self.len += n as u64;
            data = rest;
            if off + n >= WINDOW as usize / 2 && self.prepared.is_none() && !self.synced {
                self.prepare_next();
            }
            self.populate_ahead();
        }
        Ok(())
    }
    fn flush(&mut self) -> io::Result<()> {
        // Appended bytes are already in the page cache.
        Ok(())
    }
    fn sync(&mut self) -> io::Result<()> {
        // Unmap first: writing back pages that are still mapped write-protects them one by one,
        // each with a TLB shootdown on every core running this process (at a 4 MiB memtable
        // rotation that was 13 % of all CPU time). That includes a window prepared ahead: all
        // of its pages are dirty. The next append maps the current window again.
        self.unmap_all();
        self.synced = true;
        self.file.sync_data()
    }
    fn finish(&mut self) -> io::Result<()> {
        // Cut the preallocated tail before syncing: a window prepared ahead is 4 MiB of dirty
        // zero pages, which the sync would otherwise write to the device (and, while mapped,
        // write-protect one TLB shootdown at a time: 24 % of the writer thread at every 4 MiB
        // memtable rotation, whose log sync runs on the writer).
        self.unmap_all();
        self.synced = true;
        self.finished = true;
        self.file.set_len(self.len)?;
        self.file.sync_data()
    }
    fn len(&self) -> u64 {
        self.len
    }
    fn mapped(&self) -> bool {
        true
    }
}

impl Drop for MmapLog {
    fn drop(&mut self) {
        self.unmap_all();
        // Best effort: a log left with its zero tail reads the same.
        let _ = self.file.set_len(self.len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A new log file `000001.log` in `dir`, and its writer.
    fn fresh_log(dir: &std::path::Path) -> (std::path::PathBuf, MmapLog) {
        fresh_log_named(dir, "000001.log")
    }

    /// A new log file `name` in `dir`, and its writer.
    fn fresh_log_named(dir: &std::path::Path, name: &str) -> (std::path::PathBuf, MmapLog) {
        let path = dir.join(name);
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .expect("open");
        (path, MmapLog::new(f).expect("mmap log"))
    }

    /// Appends records `record(0), record(1), …` until at least `bytes` are in the log;
    /// returns what was appended.
    fn append_until(log: &mut MmapLog, bytes: u64, record: impl Fn(u32) -> Vec<u8>) -> Vec<u8> {
        let mut want = Vec::new();
        let mut i = 0u32;
        while (want.len() as u64) < bytes {
            let rec = record(i);
            log.append(&rec).expect("append");
            want.extend_from_slice(&rec);
            i += 1;
        }
        want
    }

    #[test]
    fn appends_across_windows_and_syncs_read_back_and_the_tail_is_cut_on_drop() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (path, mut log) = fresh_log(dir.path());
        let mut want = Vec::new();
        let mut i = 0u32;
        while (want.len() as u64) < 2 * WINDOW + 777 {
            let rec: Vec<u8> = (0..(i % 5000) + 1).map(|j| (i ^ j) as u8).collect();
            log.append(&rec).expect("append");
            want.extend_from_slice(&rec);
            if i.is_multiple_of(700) {
                // A sync unmaps the window; the next append maps it again.
                log.sync().expect("sync");
            }
            i += 1;
        }
        assert_eq!(log.len(), want.len() as u64);
        // Before the drop the file holds the bytes and then zeros up to a window boundary.
        let raw = std::fs::read(&path).expect("read");
        assert_eq!(raw.len() as u64 % WINDOW, 0);
        assert_eq!(raw.get(..want.len()), Some(&want[..]));
        assert!(raw
            .get(want.len()..)
            .unwrap_or_default()
            .iter()
            .all(|&b| b == 0));
        log.sync().expect("sync");
        drop(log);
        assert_eq!(std::fs::read(&path).expect("read"), want);
    }

    #[test]
    fn an_unsynced_log_gets_its_windows_prepared_ahead_and_reads_back_exactly() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (path, mut log) = fresh_log(dir.path());
        let want = append_until(&mut log, 3 * WINDOW + WINDOW / 2 + 13, |i| {
            (0..(i % 3000) + 1).map(|j| (i ^ j ^ 0x5a) as u8).collect()
        });
        // Three window switches, each to a window prepared in the background (a window more
        // is being prepared now: the last one is past half full).
        assert_eq!(log.windows_prepared_ahead(), 3);
        let raw = std::fs::read(&path).expect("read");
        assert_eq!(raw.get(..want.len()), Some(&want[..]));
        // Dropping waits for the window being prepared, then cuts the zero tail.
        drop(log);
        assert_eq!(std::fs::read(&path).expect("read"), want);
    }

    /// Faulting-in jobs run on the background thread against the writer's mapping: a log
    /// dropped, synced or moved to its next window while they are queued must not unmap a
    /// range a job has yet to touch (that would fault in pages of whatever is mapped there
    /// next, or fail), and every byte must read back. Many short logs, each dropped at once.
    #[test]
    fn logs_dropped_or_synced_while_chunks_are_being_faulted_in_read_back_exactly() {
        let dir = tempfile::tempdir().expect("tempdir");
        for round in 0..64u32 {
            let (path, mut log) = fresh_log_named(dir.path(), &format!("{round:06}.log"));
            // 0 to ~1.3 windows, so some logs end before their first chunk is in and some
            // right after a window switch.
            let bytes = u64::from(round) * WINDOW / 48;
            let want = append_until(&mut log, bytes, |i| {
                (0..(i % 700) + 1).map(|j| (i ^ j ^ round) as u8).collect()
            });
            assert!(
                log.populated_to >= log.len.min(log.start + WINDOW),
                "round {round}: faulting-in was asked for up to {} of {} appended bytes",
                log.populated_to,
                log.len
            );
            if round % 3 == 1 {
                log.sync().expect("sync");
                // A synced log asks for nothing ahead; appends still work.
                let more = append_until(&mut log, 9000, |i| vec![i as u8; 300]);
                let mut all = want.clone();
                all.extend_from_slice(&more);
                drop(log);
                assert_eq!(std::fs::read(&path).expect("read"), all, "round {round}");
            } else {
                drop(log);
                assert_eq!(std::fs::read(&path).expect("read"), want, "round {round}");
            }
        }
    }

    /// Found by profiling a 4 MiB-memtable fill: the rotation's sync of the retired log ran
    /// while the window prepared ahead was mapped, so its 4 MiB of dirty zero pages were
    /// write-protected one TLB shootdown at a time (24 % of the writer thread) and written to
    /// the device. `finish` drops that window and cuts the tail before it syncs.
    #[cfg(unix)]
    #[test]
    fn finish_releases_the_window_prepared_ahead_and_refuses_appends() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let (path, mut log) = fresh_log(dir.path());
        // Past half of the second window: the third is being prepared.
        let want = append_until(&mut log, WINDOW + WINDOW * 3 / 4, |i| {
            i.to_le_bytes().repeat(50)
        });
        assert!(log.prepared.is_some(), "a window is being prepared ahead");
        log.finish().expect("finish");
        assert!(log.prepared.is_none() && log.map.is_none());
        let meta = std::fs::metadata(&path).expect("metadata");
        assert_eq!(
            meta.len(),
            want.len() as u64,
            "the preallocated tail is cut"
        );
        assert!(
            meta.blocks() * 512 < want.len() as u64 + WINDOW / 2,
            "{} bytes allocated for {} appended",
            meta.blocks() * 512,
            want.len()
        );
        assert!(
            log.append(b"more").is_err(),
            "a finished log takes no appends"
        );
        assert!(log.append(b"").is_ok());
        log.sync().expect("a sync after finish is harmless");
        drop(log);
        assert_eq!(std::fs::read(&path).expect("read"), want);
    }

    /// Bytes the calling thread has dirtied for write-back (`write_bytes` of
    /// `/proc/thread-self/io`). Per thread, not per process: tests run in parallel in one
    /// process, and another test's writes counted here failed this one in CI (133 MB).
    #[cfg(target_os = "linux")]
    fn dirtied_bytes() -> Option<u64> {
        let io = std::fs::read_to_string("/proc/thread-self/io").ok()?;
        io.lines()
            .find_map(|l| l.strip_prefix("write_bytes: "))
            .and_then(|v| v.trim().parse().ok())
    }

    /// Found by the sync benchmark: faulting a window in writable again after every sync
    /// dirtied all of its pages, so each synced write wrote the whole 4 MiB window back
    /// (256 synced puts/s instead of 6,000).
    #[cfg(target_os = "linux")]
    #[test]
    fn a_sync_writes_back_the_new_bytes_not_the_whole_window() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (_, mut log) = fresh_log(dir.path());
        log.sync().expect("sync");
        let Some(before) = dirtied_bytes() else {
            return;
        };
        for i in 0..200u32 {
            log.append(&i.to_le_bytes().repeat(25)).expect("append");
            log.sync().expect("sync");
        }
        let dirtied = dirtied_bytes().unwrap_or(before) - before;
        // 200 syncs of a 4 KiB page each is 0.8 MiB; re-dirtying the window was 800 MiB. No
        // window is prepared ahead for a synced log, so all of it is this thread's work.
        assert!(
            dirtied < 16 << 20,
            "200 synced appends dirtied {dirtied} bytes"
        );
    }
}
