//! Debian's RocksDB 7.8.3 (the distribution's `librocksdb`, via `rocksdb/c.h`) behind the
//! benchmark's engine interface: peer `rocksdb-debian`. It is kept to compare with the numbers
//! measured against it before the current release became the `rocksdb` peer
//! (`super::rocksdb`); Debian builds it with its assertions compiled in, which slows its writes.
//! Both export the same C symbols, so a binary links only one of them: this module is left out
//! when the `rocksdb-current` feature is on.
//!
//! Settings equivalent to Scree's: the same write buffer, a Bloom filter of the same bits per
//! key, no compression, WAL on with the same sync policy, optional direct reads; everything
//! else is RocksDB's default. Statistics are enabled so that WAL, flush and compaction bytes
//! and stall time come from RocksDB's own tickers (this costs RocksDB a few percent).

use std::ffi::{c_char, c_int, c_uchar, c_void, CString};
use std::path::Path;
use std::ptr;
use std::time::Duration;

use anyhow::{bail, Result};

use super::cffi::{path_cstring, take_error, take_string};
use super::parse_rocksdb_ticker;
use crate::bench::engine::{
    BenchEngine, Counters, EResult, EngineConfig, EngineError, WrittenByCause,
};

/// Opaque C types.
#[repr(C)]
pub struct rocksdb_t {
    _p: [u8; 0],
}
#[repr(C)]
pub struct rocksdb_options_t {
    _p: [u8; 0],
}
#[repr(C)]
pub struct rocksdb_readoptions_t {
    _p: [u8; 0],
}
#[repr(C)]
pub struct rocksdb_writeoptions_t {
    _p: [u8; 0],
}
#[repr(C)]
pub struct rocksdb_block_based_table_options_t {
    _p: [u8; 0],
}
#[repr(C)]
pub struct rocksdb_filterpolicy_t {
    _p: [u8; 0],
}
#[repr(C)]
pub struct rocksdb_cache_t {
    _p: [u8; 0],
}
#[repr(C)]
pub struct rocksdb_iterator_t {
    _p: [u8; 0],
}
#[repr(C)]
pub struct rocksdb_slicetransform_t {
    _p: [u8; 0],
}

use super::ROCKSDB_MEMTABLE_PREFIX_BLOOM_RATIO as MEMTABLE_PREFIX_BLOOM_RATIO;

#[allow(non_camel_case_types)]
const ROCKSDB_NO_COMPRESSION: c_int = 0;

extern "C" {
    fn rocksdb_open(
        options: *const rocksdb_options_t,
        name: *const c_char,
        errptr: *mut *mut c_char,
    ) -> *mut rocksdb_t;
    fn rocksdb_close(db: *mut rocksdb_t);
    fn rocksdb_put(
        db: *mut rocksdb_t,
        options: *const rocksdb_writeoptions_t,
        key: *const c_char,
        keylen: usize,
        val: *const c_char,
        vallen: usize,
        errptr: *mut *mut c_char,
    );
    fn rocksdb_delete(
        db: *mut rocksdb_t,
        options: *const rocksdb_writeoptions_t,
        key: *const c_char,
        keylen: usize,
        errptr: *mut *mut c_char,
    );
    fn rocksdb_get(
        db: *mut rocksdb_t,
        options: *const rocksdb_readoptions_t,
        key: *const c_char,
        keylen: usize,
        vallen: *mut usize,
        errptr: *mut *mut c_char,
    ) -> *mut c_char;
    fn rocksdb_create_iterator(
        db: *mut rocksdb_t,
        options: *const rocksdb_readoptions_t,
    ) -> *mut rocksdb_iterator_t;
    fn rocksdb_iter_destroy(it: *mut rocksdb_iterator_t);
    fn rocksdb_iter_valid(it: *const rocksdb_iterator_t) -> c_uchar;
    fn rocksdb_iter_seek(it: *mut rocksdb_iterator_t, k: *const c_char, klen: usize);
    fn rocksdb_iter_next(it: *mut rocksdb_iterator_t);
    fn rocksdb_iter_key(it: *const rocksdb_iterator_t, klen: *mut usize) -> *const c_char;
    fn rocksdb_iter_value(it: *const rocksdb_iterator_t, vlen: *mut usize) -> *const c_char;
    fn rocksdb_iter_get_error(it: *const rocksdb_iterator_t, errptr: *mut *mut c_char);
    fn rocksdb_property_value(db: *mut rocksdb_t, propname: *const c_char) -> *mut c_char;
    fn rocksdb_property_int(
        db: *mut rocksdb_t,
        propname: *const c_char,
        out_val: *mut u64,
    ) -> c_int;

    fn rocksdb_options_create() -> *mut rocksdb_options_t;
    fn rocksdb_options_destroy(o: *mut rocksdb_options_t);
    fn rocksdb_options_set_create_if_missing(o: *mut rocksdb_options_t, v: c_uchar);
    fn rocksdb_options_set_write_buffer_size(o: *mut rocksdb_options_t, v: usize);
    fn rocksdb_options_set_compression(o: *mut rocksdb_options_t, v: c_int);
    fn rocksdb_options_set_use_direct_reads(o: *mut rocksdb_options_t, v: c_uchar);
    fn rocksdb_options_set_block_based_table_factory(
        o: *mut rocksdb_options_t,
        t: *mut rocksdb_block_based_table_options_t,
    );
    fn rocksdb_options_enable_statistics(o: *mut rocksdb_options_t);
    fn rocksdb_options_set_prefix_extractor(
        o: *mut rocksdb_options_t,
        t: *mut rocksdb_slicetransform_t,
    );
    fn rocksdb_options_set_memtable_prefix_bloom_size_ratio(o: *mut rocksdb_options_t, v: f64);
    fn rocksdb_slicetransform_create_fixed_prefix(len: usize) -> *mut rocksdb_slicetransform_t;
    fn rocksdb_options_statistics_get_string(o: *mut rocksdb_options_t) -> *mut c_char;

    fn rocksdb_block_based_options_create() -> *mut rocksdb_block_based_table_options_t;
    fn rocksdb_block_based_options_destroy(t: *mut rocksdb_block_based_table_options_t);
    fn rocksdb_block_based_options_set_filter_policy(
        t: *mut rocksdb_block_based_table_options_t,
        p: *mut rocksdb_filterpolicy_t,
    );
    fn rocksdb_filterpolicy_create_bloom(bits_per_key: f64) -> *mut rocksdb_filterpolicy_t;
    fn rocksdb_block_based_options_set_block_cache(
        t: *mut rocksdb_block_based_table_options_t,
        c: *mut rocksdb_cache_t,
    );
    fn rocksdb_cache_create_lru(capacity: usize) -> *mut rocksdb_cache_t;
    fn rocksdb_cache_destroy(c: *mut rocksdb_cache_t);

    fn rocksdb_readoptions_create() -> *mut rocksdb_readoptions_t;
    fn rocksdb_readoptions_destroy(o: *mut rocksdb_readoptions_t);
    fn rocksdb_readoptions_set_total_order_seek(o: *mut rocksdb_readoptions_t, v: c_uchar);
    fn rocksdb_readoptions_set_prefix_same_as_start(o: *mut rocksdb_readoptions_t, v: c_uchar);
    fn rocksdb_writeoptions_create() -> *mut rocksdb_writeoptions_t;
    fn rocksdb_writeoptions_destroy(o: *mut rocksdb_writeoptions_t);
    fn rocksdb_writeoptions_set_sync(o: *mut rocksdb_writeoptions_t, v: c_uchar);

    fn rocksdb_free(ptr: *mut c_void);
}

/// An open RocksDB database with its options.
pub struct RocksDb {
    db: *mut rocksdb_t,
    options: *mut rocksdb_options_t,
    read: *mut rocksdb_readoptions_t,
    /// Read options of `scan`: with a prefix extractor, a total-order seek (a seek + nexts
    /// that leave the prefix must not use the prefix Bloom filter); else the same as `read`.
    scan_read: *mut rocksdb_readoptions_t,
    /// Read options of `scan_prefix`: `prefix_same_as_start` with a prefix extractor.
    prefix_read: *mut rocksdb_readoptions_t,
    write: *mut rocksdb_writeoptions_t,
    settings: Vec<(String, String)>,
}

// SAFETY: a RocksDB `DB` is documented thread-safe for concurrent reads and writes without
// external synchronization. The options objects are only read after `open` (RocksDB copies
// what it needs; the read/write options are passed by const pointer and never mutated), and
// the statistics object behind `options` is internally synchronized. Nothing is freed before
// `Drop`, which has exclusive access.
unsafe impl Send for RocksDb {}
// SAFETY: see `Send`: every method takes `&self` and only makes thread-safe RocksDB calls.
unsafe impl Sync for RocksDb {}

fn cstr(s: &str) -> CString {
    // Only called with literal property names, which contain no NUL.
    CString::new(s).unwrap_or_default()
}

impl RocksDb {
    /// Opens (or creates) a database at `dir`.
    pub fn open(dir: &Path, cfg: &EngineConfig) -> Result<RocksDb> {
        let name = path_cstring(dir)?;
        // SAFETY: each *_create returns a fresh object we own; setters take the object we just
        // created. `set_filter_policy` transfers ownership of the policy to the table options
        // (a shared_ptr inside), and `set_block_based_table_factory` copies the table options,
        // so destroying them afterwards is correct. `rocksdb_open` reads the options and a
        // NUL-terminated name that outlives the call; on failure it returns null and an error
        // string we free in `take_error`.
        unsafe {
            let options = rocksdb_options_create();
            rocksdb_options_set_create_if_missing(options, 1);
            rocksdb_options_set_write_buffer_size(options, cfg.write_buffer_bytes);
            rocksdb_options_set_compression(options, ROCKSDB_NO_COMPRESSION);
            rocksdb_options_set_use_direct_reads(options, cfg.direct_reads as c_uchar);
            rocksdb_options_enable_statistics(options);
            if let Some(len) = cfg.key_prefix_len {
                // The options take ownership of the transform (a shared_ptr inside).
                rocksdb_options_set_prefix_extractor(
                    options,
                    rocksdb_slicetransform_create_fixed_prefix(len),
                );
                rocksdb_options_set_memtable_prefix_bloom_size_ratio(
                    options,
                    MEMTABLE_PREFIX_BLOOM_RATIO,
                );
            }
            let table = rocksdb_block_based_options_create();
            rocksdb_block_based_options_set_filter_policy(
                table,
                rocksdb_filterpolicy_create_bloom(cfg.bloom_bits as f64),
            );
            if let Some(n) = cfg.block_cache_bytes {
                // The table options keep their own reference (a shared_ptr copy) to the cache.
                let cache = rocksdb_cache_create_lru(n);
                rocksdb_block_based_options_set_block_cache(table, cache);
                rocksdb_cache_destroy(cache);
            }
            rocksdb_options_set_block_based_table_factory(options, table);
            rocksdb_block_based_options_destroy(table);

            let mut err: *mut c_char = ptr::null_mut();
            let db = rocksdb_open(options, name.as_ptr(), &mut err);
            if let Some(msg) = take_error(err, rocksdb_free) {
                rocksdb_options_destroy(options);
                bail!("opening RocksDB at {}: {msg}", dir.display());
            }
            if db.is_null() {
                rocksdb_options_destroy(options);
                bail!(
                    "opening RocksDB at {}: no database and no error",
                    dir.display()
                );
            }
            let read = rocksdb_readoptions_create();
            let scan_read = rocksdb_readoptions_create();
            let prefix_read = rocksdb_readoptions_create();
            if cfg.key_prefix_len.is_some() {
                rocksdb_readoptions_set_total_order_seek(scan_read, 1);
                rocksdb_readoptions_set_prefix_same_as_start(prefix_read, 1);
            }
            let write = rocksdb_writeoptions_create();
            rocksdb_writeoptions_set_sync(write, cfg.sync as c_uchar);
            let mut settings = vec![
                (
                    "version".into(),
                    option_env!("SCREE_ROCKSDB_HEADER_VERSION")
                        .map_or("unknown (Debian's librocksdb)".into(), |v| {
                            format!("{v} (Debian's librocksdb, assertions compiled in)")
                        }),
                ),
                (
                    "write_buffer_size".into(),
                    cfg.write_buffer_bytes.to_string(),
                ),
                ("bloom_bits_per_key".into(), cfg.bloom_bits.to_string()),
                ("compression".into(), "none".into()),
                ("wal".into(), "on".into()),
                ("sync".into(), cfg.sync.to_string()),
                ("use_direct_reads".into(), cfg.direct_reads.to_string()),
                (
                    "block_cache".into(),
                    cfg.block_cache_bytes
                        .map_or("default (8 MiB LRU)".into(), |n| format!("{n} (LRU)")),
                ),
            ];
            settings.extend(super::rocksdb_shared_settings(cfg.key_prefix_len));
            Ok(RocksDb {
                db,
                options,
                read,
                scan_read,
                prefix_read,
                write,
                settings,
            })
        }
    }

    fn property_int(&self, name: &str) -> Option<u64> {
        let name = cstr(name);
        let mut v = 0u64;
        // SAFETY: `db` is open; `name` is NUL-terminated and outlives the call; `v` is a valid
        // out-pointer. Returns 0 on success.
        let rc = unsafe { rocksdb_property_int(self.db, name.as_ptr(), &mut v) };
        (rc == 0).then_some(v)
    }

    /// A string property (e.g. `rocksdb.stats`).
    pub fn property(&self, name: &str) -> Option<String> {
        let name = cstr(name);
        // SAFETY: `db` is open; the returned string is malloc()ed (or null) and freed by
        // `take_string`.
        unsafe { take_string(rocksdb_property_value(self.db, name.as_ptr()), rocksdb_free) }
    }

    fn statistics(&self) -> Option<String> {
        // SAFETY: statistics were enabled on `options` before open; the returned string is
        // malloc()ed (or null) and freed by `take_string`.
        unsafe {
            take_string(
                rocksdb_options_statistics_get_string(self.options),
                rocksdb_free,
            )
        }
    }
}

impl Drop for RocksDb {
    fn drop(&mut self) {
        // SAFETY: we own all six objects, nobody else holds them (threads using `&self` have
        // been joined), and each is destroyed exactly once; the DB is closed before the
        // options it was opened with.
        unsafe {
            rocksdb_close(self.db);
            rocksdb_readoptions_destroy(self.read);
            rocksdb_readoptions_destroy(self.scan_read);
            rocksdb_readoptions_destroy(self.prefix_read);
            rocksdb_writeoptions_destroy(self.write);
            rocksdb_options_destroy(self.options);
        }
    }
}

/// Seconds of `Cumulative stall: 00:00:1.234 H:M:S, …` in the `rocksdb.stats` text.
fn parse_cumulative_stall(stats: &str) -> Option<f64> {
    let line = stats
        .lines()
        .find_map(|l| l.strip_prefix("Cumulative stall:"))?;
    let hms = line.split_whitespace().next()?;
    let mut parts = hms.split(':');
    let (h, m, s) = (parts.next()?, parts.next()?, parts.next()?);
    Some(h.parse::<f64>().ok()? * 3600.0 + m.parse::<f64>().ok()? * 60.0 + s.parse::<f64>().ok()?)
}

fn failed(msg: String) -> EngineError {
    EngineError::Failed(format!("rocksdb-debian: {msg}"))
}

impl BenchEngine for RocksDb {
    fn engine(&self) -> &'static str {
        "rocksdb-debian"
    }

    fn layout(&self) -> Option<String> {
        None
    }

    fn put(&self, key: &[u8], value: &[u8]) -> EResult<()> {
        let mut err = ptr::null_mut();
        // SAFETY: `db` and `write` are live; key/value pointers and lengths describe valid
        // slices for the duration of the call (RocksDB copies them); `err` is a valid
        // out-pointer whose string is freed by `take_error`.
        unsafe {
            rocksdb_put(
                self.db,
                self.write,
                key.as_ptr().cast(),
                key.len(),
                value.as_ptr().cast(),
                value.len(),
                &mut err,
            );
            take_error(err, rocksdb_free).map_or(Ok(()), |m| Err(failed(m)))
        }
    }

    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> EResult<bool> {
        let mut err = ptr::null_mut();
        let mut len = 0usize;
        // SAFETY: as for `put`. A non-null result is a malloc()ed buffer of `len` bytes, which
        // we copy and then free exactly once.
        unsafe {
            let v = rocksdb_get(
                self.db,
                self.read,
                key.as_ptr().cast(),
                key.len(),
                &mut len,
                &mut err,
            );
            if let Some(m) = take_error(err, rocksdb_free) {
                if !v.is_null() {
                    rocksdb_free(v.cast());
                }
                return Err(failed(m));
            }
            if v.is_null() {
                return Ok(false);
            }
            out.clear();
            out.extend_from_slice(std::slice::from_raw_parts(v.cast::<u8>(), len));
            rocksdb_free(v.cast());
            Ok(true)
        }
    }

    fn delete(&self, key: &[u8]) -> EResult<()> {
        let mut err = ptr::null_mut();
        // SAFETY: as for `put`.
        unsafe {
            rocksdb_delete(
                self.db,
                self.write,
                key.as_ptr().cast(),
                key.len(),
                &mut err,
            );
            take_error(err, rocksdb_free).map_or(Ok(()), |m| Err(failed(m)))
        }
    }

    fn scan(
        &self,
        start: &[u8],
        limit: usize,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> EResult<usize> {
        // SAFETY: the iterator is created from the live `db` and destroyed before returning on
        // every path. Key/value pointers returned while the iterator is valid stay valid until
        // the next call that moves it, and we only use them (through `visit`) before `next`.
        unsafe {
            let it = rocksdb_create_iterator(self.db, self.scan_read);
            rocksdb_iter_seek(it, start.as_ptr().cast(), start.len());
            let mut n = 0;
            while n < limit && rocksdb_iter_valid(it) != 0 {
                let (mut kl, mut vl) = (0usize, 0usize);
                let k = rocksdb_iter_key(it, &mut kl);
                let v = rocksdb_iter_value(it, &mut vl);
                visit(
                    std::slice::from_raw_parts(k.cast::<u8>(), kl),
                    std::slice::from_raw_parts(v.cast::<u8>(), vl),
                );
                n += 1;
                if n < limit {
                    rocksdb_iter_next(it);
                }
            }
            let mut err = ptr::null_mut();
            rocksdb_iter_get_error(it, &mut err);
            rocksdb_iter_destroy(it);
            take_error(err, rocksdb_free).map_or(Ok(n), |m| Err(failed(m)))
        }
    }

    fn scan_prefix(&self, prefix: &[u8], visit: &mut dyn FnMut(&[u8], &[u8])) -> EResult<usize> {
        // SAFETY: as for `scan`.
        unsafe {
            let it = rocksdb_create_iterator(self.db, self.prefix_read);
            rocksdb_iter_seek(it, prefix.as_ptr().cast(), prefix.len());
            let mut n = 0;
            while rocksdb_iter_valid(it) != 0 {
                let (mut kl, mut vl) = (0usize, 0usize);
                let k = std::slice::from_raw_parts(rocksdb_iter_key(it, &mut kl).cast::<u8>(), kl);
                if !k.starts_with(prefix) {
                    break;
                }
                let v = rocksdb_iter_value(it, &mut vl);
                visit(k, std::slice::from_raw_parts(v.cast::<u8>(), vl));
                n += 1;
                rocksdb_iter_next(it);
            }
            let mut err = ptr::null_mut();
            rocksdb_iter_get_error(it, &mut err);
            rocksdb_iter_destroy(it);
            take_error(err, rocksdb_free).map_or(Ok(n), |m| Err(failed(m)))
        }
    }

    fn wait_for_compactions(&self) -> EResult<()> {
        let busy = [
            "rocksdb.mem-table-flush-pending",
            "rocksdb.num-running-flushes",
            "rocksdb.compaction-pending",
            "rocksdb.num-running-compactions",
        ];
        loop {
            let mut idle = true;
            for p in busy {
                match self.property_int(p) {
                    Some(0) => {}
                    Some(_) => idle = false,
                    None => return Err(failed(format!("property {p} unavailable"))),
                }
            }
            if idle {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn counters(&self) -> Counters {
        let stats = self.statistics().unwrap_or_default();
        let t = |name: &str| parse_rocksdb_ticker(&stats, name);
        let written = match (
            t("rocksdb.wal.bytes"),
            t("rocksdb.flush.write.bytes"),
            t("rocksdb.compact.write.bytes"),
        ) {
            (Some(wal), Some(flush), Some(compaction)) => Some(WrittenByCause {
                wal,
                flush,
                compaction,
                ..Default::default()
            }),
            _ => None,
        };
        let meta = match (
            t("rocksdb.block.cache.index.miss"),
            t("rocksdb.block.cache.filter.miss"),
        ) {
            (Some(a), Some(b)) => Some(a + b),
            _ => None,
        };
        Counters {
            user_bytes: None,
            written,
            stall_seconds: t("rocksdb.stall.micros")
                .map(|us| us as f64 / 1e6)
                .or_else(|| parse_cumulative_stall(&self.property("rocksdb.stats")?)),
            data_block_reads: t("rocksdb.block.cache.data.miss"),
            metadata_block_reads: meta,
            mapped_bytes: None,
            level_bytes: None,
            memtable_stall_seconds: None,
            flush_seconds: None,
            compaction_seconds: None,
            max_flush_seconds: None,
            slowdown_seconds: None,
            device: None,
            data_block_cache_hits: None,
            pinned_metadata_bytes: self.property_int("rocksdb.estimate-table-readers-mem"),
            layout_counters: None,
        }
    }

    fn settings(&self) -> Vec<(String, String)> {
        self.settings.clone()
    }

    fn wait_method(&self) -> &'static str {
        "poll rocksdb.{mem-table-flush-pending,num-running-flushes,compaction-pending,num-running-compactions} until all 0"
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn parses_cumulative_stall() {
        let s = "** DB Stats **\nCumulative stall: 00:01:2.500 H:M:S, 1.2 percent\n";
        assert_eq!(super::parse_cumulative_stall(s), Some(62.5));
    }
}
