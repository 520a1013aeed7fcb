//! LevelDB (the C++ library, via `leveldb/c.h`) behind the benchmark's engine interface.
//!
//! Settings equivalent to Scree's: the same write buffer, a Bloom filter of the same bits per
//! key, no compression, WAL (always on in LevelDB) with the same sync policy; everything else
//! is LevelDB's default. LevelDB has no direct-read option, no stall counter and no WAL byte
//! counter: its WAL bytes are computed from the records it must have logged (exact for
//! single-threaded writers, whose batches are not merged), flush + compaction bytes come from
//! the `Write(MB)` column of `leveldb.stats` (whole MiB per level).

use std::ffi::{c_char, c_int, c_uchar, c_void, CString};
use std::path::{Path, PathBuf};
use std::ptr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{bail, Result};

use super::cffi::{path_cstring, take_error, take_string};
use super::{leveldb_files_busy, parse_leveldb_sstables, parse_leveldb_stats_write_mb};
use crate::bench::engine::{
    BenchEngine, Counters, EResult, EngineConfig, EngineError, WrittenByCause,
};

/// Opaque C types.
#[repr(C)]
pub struct leveldb_t {
    _p: [u8; 0],
}
#[repr(C)]
pub struct leveldb_options_t {
    _p: [u8; 0],
}
#[repr(C)]
pub struct leveldb_readoptions_t {
    _p: [u8; 0],
}
#[repr(C)]
pub struct leveldb_writeoptions_t {
    _p: [u8; 0],
}
#[repr(C)]
pub struct leveldb_filterpolicy_t {
    _p: [u8; 0],
}
#[repr(C)]
pub struct leveldb_cache_t {
    _p: [u8; 0],
}
#[repr(C)]
pub struct leveldb_iterator_t {
    _p: [u8; 0],
}

const LEVELDB_NO_COMPRESSION: c_int = 0;

extern "C" {
    fn leveldb_open(
        options: *const leveldb_options_t,
        name: *const c_char,
        errptr: *mut *mut c_char,
    ) -> *mut leveldb_t;
    fn leveldb_close(db: *mut leveldb_t);
    fn leveldb_put(
        db: *mut leveldb_t,
        options: *const leveldb_writeoptions_t,
        key: *const c_char,
        keylen: usize,
        val: *const c_char,
        vallen: usize,
        errptr: *mut *mut c_char,
    );
    fn leveldb_delete(
        db: *mut leveldb_t,
        options: *const leveldb_writeoptions_t,
        key: *const c_char,
        keylen: usize,
        errptr: *mut *mut c_char,
    );
    fn leveldb_get(
        db: *mut leveldb_t,
        options: *const leveldb_readoptions_t,
        key: *const c_char,
        keylen: usize,
        vallen: *mut usize,
        errptr: *mut *mut c_char,
    ) -> *mut c_char;
    fn leveldb_create_iterator(
        db: *mut leveldb_t,
        options: *const leveldb_readoptions_t,
    ) -> *mut leveldb_iterator_t;
    fn leveldb_property_value(db: *mut leveldb_t, propname: *const c_char) -> *mut c_char;

    fn leveldb_iter_destroy(it: *mut leveldb_iterator_t);
    fn leveldb_iter_valid(it: *const leveldb_iterator_t) -> c_uchar;
    fn leveldb_iter_seek(it: *mut leveldb_iterator_t, k: *const c_char, klen: usize);
    fn leveldb_iter_next(it: *mut leveldb_iterator_t);
    fn leveldb_iter_key(it: *const leveldb_iterator_t, klen: *mut usize) -> *const c_char;
    fn leveldb_iter_value(it: *const leveldb_iterator_t, vlen: *mut usize) -> *const c_char;
    fn leveldb_iter_get_error(it: *const leveldb_iterator_t, errptr: *mut *mut c_char);

    fn leveldb_options_create() -> *mut leveldb_options_t;
    fn leveldb_options_destroy(o: *mut leveldb_options_t);
    fn leveldb_options_set_create_if_missing(o: *mut leveldb_options_t, v: c_uchar);
    fn leveldb_options_set_write_buffer_size(o: *mut leveldb_options_t, v: usize);
    fn leveldb_options_set_compression(o: *mut leveldb_options_t, v: c_int);
    fn leveldb_options_set_filter_policy(o: *mut leveldb_options_t, p: *mut leveldb_filterpolicy_t);
    fn leveldb_filterpolicy_create_bloom(bits_per_key: c_int) -> *mut leveldb_filterpolicy_t;
    fn leveldb_filterpolicy_destroy(p: *mut leveldb_filterpolicy_t);
    fn leveldb_options_set_cache(o: *mut leveldb_options_t, c: *mut leveldb_cache_t);
    fn leveldb_cache_create_lru(capacity: usize) -> *mut leveldb_cache_t;
    fn leveldb_cache_destroy(c: *mut leveldb_cache_t);

    fn leveldb_readoptions_create() -> *mut leveldb_readoptions_t;
    fn leveldb_readoptions_destroy(o: *mut leveldb_readoptions_t);
    fn leveldb_writeoptions_create() -> *mut leveldb_writeoptions_t;
    fn leveldb_writeoptions_destroy(o: *mut leveldb_writeoptions_t);
    fn leveldb_writeoptions_set_sync(o: *mut leveldb_writeoptions_t, v: c_uchar);

    fn leveldb_free(ptr: *mut c_void);
    fn leveldb_major_version() -> c_int;
    fn leveldb_minor_version() -> c_int;
}

/// Bytes of a log record holding a one-operation write batch: 7-byte record header, 12-byte
/// batch header, 1-byte tag, varint-prefixed key (and value for puts).
fn wal_record_bytes(key: usize, value: Option<usize>) -> u64 {
    fn varint(n: usize) -> usize {
        let mut len = 1;
        let mut n = n >> 7;
        while n > 0 {
            len += 1;
            n >>= 7;
        }
        len
    }
    let body = 12 + 1 + varint(key) + key + value.map_or(0, |v| varint(v) + v);
    (7 + body) as u64
}

/// An open LevelDB database with its options.
pub struct LevelDb {
    db: *mut leveldb_t,
    options: *mut leveldb_options_t,
    filter: *mut leveldb_filterpolicy_t,
    /// The block cache given with `--block-cache-mb` (null: LevelDB's own 8 MiB one).
    cache: *mut leveldb_cache_t,
    read: *mut leveldb_readoptions_t,
    write: *mut leveldb_writeoptions_t,
    wal_bytes: AtomicU64,
    settings: Vec<(String, String)>,
    dir: PathBuf,
}

// SAFETY: a LevelDB `DB` is documented safe for concurrent access from multiple threads
// without external synchronization. The options, filter policy and read/write options are only
// read after `open` and freed in `Drop` (exclusive access), after the DB is closed.
unsafe impl Send for LevelDb {}
// SAFETY: see `Send`: every `&self` method only makes thread-safe LevelDB calls.
unsafe impl Sync for LevelDb {}

fn failed(msg: String) -> EngineError {
    EngineError::Failed(format!("leveldb: {msg}"))
}

impl LevelDb {
    /// Opens (or creates) a database at `dir`.
    pub fn open(dir: &Path, cfg: &EngineConfig) -> Result<LevelDb> {
        let name = path_cstring(dir)?;
        if cfg.direct_reads {
            eprintln!(
                "leveldb: --direct-reads has no LevelDB equivalent; LevelDB reads through mmap \
                 and the page cache"
            );
        }
        // SAFETY: each *_create returns a fresh object we own. LevelDB's options keep a raw
        // pointer to the filter policy (no ownership), so we keep the policy alive until after
        // `leveldb_close` and destroy it in `Drop`. `leveldb_open` reads the options and a
        // NUL-terminated name that outlives the call; on failure it returns null and an error
        // string we free in `take_error`.
        unsafe {
            let options = leveldb_options_create();
            let filter = leveldb_filterpolicy_create_bloom(cfg.bloom_bits as c_int);
            leveldb_options_set_create_if_missing(options, 1);
            leveldb_options_set_write_buffer_size(options, cfg.write_buffer_bytes);
            leveldb_options_set_compression(options, LEVELDB_NO_COMPRESSION);
            leveldb_options_set_filter_policy(options, filter);
            // LevelDB's options keep a raw pointer to the cache: it lives until `Drop`.
            let cache = match cfg.block_cache_bytes {
                Some(n) => {
                    let c = leveldb_cache_create_lru(n);
                    leveldb_options_set_cache(options, c);
                    c
                }
                None => ptr::null_mut(),
            };
            let mut err: *mut c_char = ptr::null_mut();
            let db = leveldb_open(options, name.as_ptr(), &mut err);
            let fail = |msg: String| {
                leveldb_options_destroy(options);
                leveldb_filterpolicy_destroy(filter);
                if !cache.is_null() {
                    leveldb_cache_destroy(cache);
                }
                msg
            };
            if let Some(msg) = take_error(err, leveldb_free) {
                bail!("opening LevelDB at {}: {}", dir.display(), fail(msg));
            }
            if db.is_null() {
                bail!(
                    "opening LevelDB at {}: {}",
                    dir.display(),
                    fail("no database and no error".into())
                );
            }
            let read = leveldb_readoptions_create();
            let write = leveldb_writeoptions_create();
            leveldb_writeoptions_set_sync(write, cfg.sync as c_uchar);
            let version = format!("{}.{}", leveldb_major_version(), leveldb_minor_version());
            let settings = vec![
                ("version".into(), version),
                (
                    "write_buffer_size".into(),
                    cfg.write_buffer_bytes.to_string(),
                ),
                ("bloom_bits_per_key".into(), cfg.bloom_bits.to_string()),
                ("compression".into(), "none".into()),
                ("wal".into(), "on (always)".into()),
                ("sync".into(), cfg.sync.to_string()),
                (
                    "direct_reads".into(),
                    if cfg.direct_reads {
                        "requested, but LevelDB has no such option (reads go through mmap/page cache)".into()
                    } else {
                        "n/a (LevelDB has no such option)".into()
                    },
                ),
                (
                    "block_cache".into(),
                    cfg.block_cache_bytes
                        .map_or("default (8 MiB LRU)".into(), |n| format!("{n} (LRU)")),
                ),
                ("max_open_files".into(), "default (1000)".into()),
            ];
            Ok(LevelDb {
                db,
                options,
                filter,
                cache,
                read,
                write,
                wal_bytes: AtomicU64::new(0),
                settings,
                dir: dir.to_path_buf(),
            })
        }
    }

    /// A string property (`leveldb.stats`, `leveldb.sstables`, …).
    pub fn property(&self, name: &str) -> Option<String> {
        let name = CString::new(name).ok()?;
        // SAFETY: `db` is open; the returned string is malloc()ed (or null) and freed by
        // `take_string`.
        unsafe { take_string(leveldb_property_value(self.db, name.as_ptr()), leveldb_free) }
    }

    /// Whether LevelDB would still compact: a flush or compaction in flight (its files, see
    /// [`leveldb_files_busy`]), ≥ 4 level-0 files, or a level above its size limit
    /// (10 MiB × 10^(level−1)), as in `VersionSet::Finalize`.
    fn needs_compaction(&self) -> bool {
        let sstables = self.property("leveldb.sstables").unwrap_or_default();
        // A memtable flush in flight shows in no property until it is installed (and a
        // 64 MiB flush takes longer than the 0.3 s of stable stats below), only in the files.
        let files: Vec<String> = std::fs::read_dir(&self.dir)
            .map(|d| {
                d.flatten()
                    .filter_map(|e| e.file_name().into_string().ok())
                    .collect()
            })
            .unwrap_or_default();
        if leveldb_files_busy(&files, &sstables) {
            return true;
        }
        let levels = parse_leveldb_sstables(&sstables);
        let l0_files = levels.first().map_or(0, |l| l.0);
        if l0_files >= 4 {
            return true;
        }
        let mut limit = 10.0 * 1048576.0;
        for (level, &(_, bytes)) in levels.iter().enumerate().skip(1) {
            if level + 1 < levels.len() && bytes as f64 > limit {
                return true;
            }
            limit *= 10.0;
        }
        false
    }
}

impl Drop for LevelDb {
    fn drop(&mut self) {
        // SAFETY: we own every object, worker threads have been joined, and each is destroyed
        // exactly once; the DB is closed before the options and the filter policy it uses.
        unsafe {
            leveldb_close(self.db);
            leveldb_readoptions_destroy(self.read);
            leveldb_writeoptions_destroy(self.write);
            leveldb_options_destroy(self.options);
            leveldb_filterpolicy_destroy(self.filter);
            if !self.cache.is_null() {
                leveldb_cache_destroy(self.cache);
            }
        }
    }
}

impl BenchEngine for LevelDb {
    fn engine(&self) -> &'static str {
        "leveldb"
    }

    fn layout(&self) -> Option<String> {
        None
    }

    fn put(&self, key: &[u8], value: &[u8]) -> EResult<()> {
        let mut err = ptr::null_mut();
        // SAFETY: `db` and `write` are live; key/value pointers and lengths describe valid
        // slices for the duration of the call (LevelDB copies them); `err` is a valid
        // out-pointer whose string is freed by `take_error`.
        unsafe {
            leveldb_put(
                self.db,
                self.write,
                key.as_ptr().cast(),
                key.len(),
                value.as_ptr().cast(),
                value.len(),
                &mut err,
            );
            if let Some(m) = take_error(err, leveldb_free) {
                return Err(failed(m));
            }
        }
        self.wal_bytes.fetch_add(
            wal_record_bytes(key.len(), Some(value.len())),
            Ordering::Relaxed,
        );
        Ok(())
    }

    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> EResult<bool> {
        let mut err = ptr::null_mut();
        let mut len = 0usize;
        // SAFETY: as for `put`. A non-null result is a malloc()ed buffer of `len` bytes, which
        // we copy and then free exactly once.
        unsafe {
            let v = leveldb_get(
                self.db,
                self.read,
                key.as_ptr().cast(),
                key.len(),
                &mut len,
                &mut err,
            );
            if let Some(m) = take_error(err, leveldb_free) {
                if !v.is_null() {
                    leveldb_free(v.cast());
                }
                return Err(failed(m));
            }
            if v.is_null() {
                return Ok(false);
            }
            out.clear();
            out.extend_from_slice(std::slice::from_raw_parts(v.cast::<u8>(), len));
            leveldb_free(v.cast());
            Ok(true)
        }
    }

    fn delete(&self, key: &[u8]) -> EResult<()> {
        let mut err = ptr::null_mut();
        // SAFETY: as for `put`.
        unsafe {
            leveldb_delete(
                self.db,
                self.write,
                key.as_ptr().cast(),
                key.len(),
                &mut err,
            );
            if let Some(m) = take_error(err, leveldb_free) {
                return Err(failed(m));
            }
        }
        self.wal_bytes
            .fetch_add(wal_record_bytes(key.len(), None), Ordering::Relaxed);
        Ok(())
    }

    fn scan(
        &self,
        start: &[u8],
        limit: usize,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> EResult<usize> {
        // SAFETY: the iterator is created from the live `db` and destroyed before returning on
        // every path. Key/value pointers returned while the iterator is valid stay valid until
        // the iterator moves, and we only use them (through `visit`) before `next`.
        unsafe {
            let it = leveldb_create_iterator(self.db, self.read);
            leveldb_iter_seek(it, start.as_ptr().cast(), start.len());
            let mut n = 0;
            while n < limit && leveldb_iter_valid(it) != 0 {
                let (mut kl, mut vl) = (0usize, 0usize);
                let k = leveldb_iter_key(it, &mut kl);
                let v = leveldb_iter_value(it, &mut vl);
                visit(
                    std::slice::from_raw_parts(k.cast::<u8>(), kl),
                    std::slice::from_raw_parts(v.cast::<u8>(), vl),
                );
                n += 1;
                if n < limit {
                    leveldb_iter_next(it);
                }
            }
            let mut err = ptr::null_mut();
            leveldb_iter_get_error(it, &mut err);
            leveldb_iter_destroy(it);
            take_error(err, leveldb_free).map_or(Ok(n), |m| Err(failed(m)))
        }
    }

    fn scan_prefix(&self, prefix: &[u8], visit: &mut dyn FnMut(&[u8], &[u8])) -> EResult<usize> {
        // SAFETY: as for `scan`.
        unsafe {
            let it = leveldb_create_iterator(self.db, self.read);
            leveldb_iter_seek(it, prefix.as_ptr().cast(), prefix.len());
            let mut n = 0;
            while leveldb_iter_valid(it) != 0 {
                let (mut kl, mut vl) = (0usize, 0usize);
                let k = std::slice::from_raw_parts(leveldb_iter_key(it, &mut kl).cast::<u8>(), kl);
                if !k.starts_with(prefix) {
                    break;
                }
                let v = leveldb_iter_value(it, &mut vl);
                visit(k, std::slice::from_raw_parts(v.cast::<u8>(), vl));
                n += 1;
                leveldb_iter_next(it);
            }
            let mut err = ptr::null_mut();
            leveldb_iter_get_error(it, &mut err);
            leveldb_iter_destroy(it);
            take_error(err, leveldb_free).map_or(Ok(n), |m| Err(failed(m)))
        }
    }

    fn wait_for_compactions(&self) -> EResult<()> {
        // LevelDB has no "compaction pending" API: wait until no level needs compacting by
        // LevelDB's own size rules and `leveldb.stats` has not changed for 3 polls 100 ms
        // apart (a flush or compaction in flight changes it when it finishes).
        let mut last = String::new();
        let mut stable = 0;
        loop {
            let now = self.property("leveldb.stats").unwrap_or_default();
            if now == last && !self.needs_compaction() {
                stable += 1;
                if stable >= 3 {
                    return Ok(());
                }
            } else {
                stable = 0;
            }
            last = now;
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn counters(&self) -> Counters {
        let stats = self.property("leveldb.stats").unwrap_or_default();
        let written = parse_leveldb_stats_write_mb(&stats).map(|mb| WrittenByCause {
            wal: self.wal_bytes.load(Ordering::Relaxed),
            // LevelDB's per-level Write(MB) mixes memtable flushes and compactions.
            compaction: (mb * 1048576.0) as u64,
            ..Default::default()
        });
        Counters {
            user_bytes: None,
            written,
            stall_seconds: None,
            memtable_stall_seconds: None,
            flush_seconds: None,
            compaction_seconds: None,
            max_flush_seconds: None,
            slowdown_seconds: None,
            device: None,
            data_block_cache_hits: None,
            // LevelDB reports no size of its table cache's index blocks and filters.
            pinned_metadata_bytes: None,
            layout_counters: None,
            data_block_reads: None,
            metadata_block_reads: None,
            mapped_bytes: None,
            level_bytes: None,
        }
    }

    fn settings(&self) -> Vec<(String, String)> {
        self.settings.clone()
    }

    fn wait_method(&self) -> &'static str {
        "no API: poll leveldb.sstables/leveldb.stats until no level is over its size limit and the stats are unchanged for 3 polls 100 ms apart"
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn wal_record_size_matches_the_anchor() {
        // 16-byte key, 100-byte value: 138 bytes logged per 116 user bytes ≈ 1.19.
        assert_eq!(super::wal_record_bytes(16, Some(100)), 138);
    }
}
