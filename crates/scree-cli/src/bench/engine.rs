//! The engine interface every workload is written against, and what an engine reports about
//! itself. Scree (`scree_engine.rs`) and the peers (`crate::peers`) implement it, so the
//! same workload code drives all of them.

use std::fmt;
use std::path::Path;

/// Why an engine operation failed.
#[derive(Debug, Clone)]
pub enum EngineError {
    /// The engine or layout does not offer this operation (e.g. range scans on `trie`): the
    /// workload is reported as unsupported, not as a failed run.
    Unsupported(String),
    /// Anything else: the run fails.
    Failed(String),
}

impl fmt::Display for EngineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EngineError::Unsupported(m) => write!(f, "unsupported: {m}"),
            EngineError::Failed(m) => write!(f, "{m}"),
        }
    }
}

impl std::error::Error for EngineError {}

/// Result of an engine operation.
pub type EResult<T> = Result<T, EngineError>;

/// Bytes an engine wrote, by cause (those it can tell apart).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WrittenByCause {
    /// Write-ahead log.
    pub wal: u64,
    /// Memtable flushes.
    pub flush: u64,
    /// Compactions.
    pub compaction: u64,
    /// Manifest and other metadata.
    pub metadata: u64,
    /// Garbage collection.
    pub gc: u64,
}

impl WrittenByCause {
    /// Sum of all causes.
    pub fn total(&self) -> u64 {
        self.wal + self.flush + self.compaction + self.metadata + self.gc
    }
    /// `self - earlier`, saturating (counters only grow, but a reopened engine restarts them).
    pub fn since(&self, earlier: &WrittenByCause) -> WrittenByCause {
        WrittenByCause {
            wal: self.wal.saturating_sub(earlier.wal),
            flush: self.flush.saturating_sub(earlier.flush),
            compaction: self.compaction.saturating_sub(earlier.compaction),
            metadata: self.metadata.saturating_sub(earlier.metadata),
            gc: self.gc.saturating_sub(earlier.gc),
        }
    }
    /// (cause, bytes) pairs, for reports and plots.
    pub fn parts(&self) -> [(&'static str, u64); 5] {
        [
            ("wal", self.wal),
            ("flush", self.flush),
            ("compaction", self.compaction),
            ("metadata", self.metadata),
            ("gc", self.gc),
        ]
    }
}

/// A snapshot of an engine's own cumulative counters; `None` where it has no such counter.
#[derive(Debug, Clone, Default)]
pub struct Counters {
    /// User bytes as the engine counts them (Scree only).
    pub user_bytes: Option<u64>,
    /// Bytes the engine says it wrote, by cause.
    pub written: Option<WrittenByCause>,
    /// Seconds writers were stopped or slowed down (RocksDB's `stall.micros` counts both).
    pub stall_seconds: Option<f64>,
    /// The part of `stall_seconds` spent in slowdown delays (Scree only).
    pub slowdown_seconds: Option<f64>,
    /// The part of `stall_seconds` spent waiting for a flush (Scree only).
    pub memtable_stall_seconds: Option<f64>,
    /// Seconds spent in flushes and in compaction jobs, summed over jobs (Scree only).
    pub flush_seconds: Option<f64>,
    pub compaction_seconds: Option<f64>,
    /// The longest single flush since the database was opened (Scree only).
    pub max_flush_seconds: Option<f64>,
    /// Data blocks read from files.
    pub data_block_reads: Option<u64>,
    /// Metadata (index, filter, …) blocks read from files.
    pub metadata_block_reads: Option<u64>,
    /// Data blocks found in the block cache by lookups and scans (Scree only): with
    /// `data_block_reads`, every data block a read visited.
    pub data_block_cache_hits: Option<u64>,
    /// Bytes the engine wrote by copying into memory-mapped files, which `wchar` misses
    /// (Scree's WAL); added to the `wchar` bytes.
    pub mapped_bytes: Option<u64>,
    /// Bytes flushes and compactions wrote into each level (index = level; Scree only, from
    /// `KeyspaceStats::level_writes`; moves not counted).
    pub level_bytes: Option<Vec<u64>>,
    /// The emulated shingled device's counters (Scree on `--device smr-*`).
    pub device: Option<DeviceCounters>,
    /// Heap bytes the open tables pin outside the block cache, now: index blocks and Bloom
    /// filters (Scree's `Stats::table_reader_bytes`, RocksDB's
    /// `rocksdb.estimate-table-readers-mem`). Not a cumulative counter.
    pub pinned_metadata_bytes: Option<u64>,
    /// The layout's own job counters, cumulative since the database was opened (Scree's
    /// `Stats::lightweight` when the layout is `lightweight`).
    pub layout_counters: Option<serde_json::Value>,
}

/// Cumulative counters of the band emulator (`scree::fs::band::DeviceStats`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeviceCounters {
    /// Bytes the engine handed to the device.
    pub host_written: u64,
    /// Bytes the device wrote (host bytes plus read-modify-writes).
    pub device_written: u64,
    /// Bytes the engine read.
    pub host_read: u64,
    /// Bytes the device read.
    pub device_read: u64,
    /// Read-modify-writes.
    pub rmws: u64,
}

impl DeviceCounters {
    /// The counts between `before` and `self`.
    pub fn since(&self, before: &DeviceCounters) -> DeviceCounters {
        DeviceCounters {
            host_written: self.host_written.saturating_sub(before.host_written),
            device_written: self.device_written.saturating_sub(before.device_written),
            host_read: self.host_read.saturating_sub(before.host_read),
            device_read: self.device_read.saturating_sub(before.device_read),
            rmws: self.rmws.saturating_sub(before.rmws),
        }
    }

    /// Auxiliary write amplification: device bytes written / host bytes written.
    pub fn awa(&self) -> Option<f64> {
        (self.host_written > 0).then(|| self.device_written as f64 / self.host_written as f64)
    }
}

/// One store under test: a Scree keyspace of some layout, RocksDB, or LevelDB.
pub trait BenchEngine: Send + Sync {
    /// `"scree"`, or the peer's name (`"rocksdb"`, `"leveldb"`, `"fjall"`, …).
    fn engine(&self) -> &'static str;
    /// The Scree layout, `None` for peers.
    fn layout(&self) -> Option<String>;
    /// Writes `key → value`.
    fn put(&self, key: &[u8], value: &[u8]) -> EResult<()>;
    /// Reads `key` into `out`; `Ok(false)` when absent.
    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> EResult<bool>;
    /// Deletes `key`.
    fn delete(&self, key: &[u8]) -> EResult<()>;
    /// Positions at the first key ≥ `start` and visits up to `limit` entries in key order (one
    /// seek and `limit - 1` nexts); returns how many were visited.
    fn scan(
        &self,
        start: &[u8],
        limit: usize,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> EResult<usize>;
    /// Visits every entry whose key starts with `prefix` (a group of semi-sorted keys), in the
    /// engine's order for such a scan; returns how many were visited. Layouts that cannot serve
    /// it return [`EngineError::Unsupported`].
    fn scan_prefix(&self, prefix: &[u8], visit: &mut dyn FnMut(&[u8], &[u8])) -> EResult<usize>;
    /// Writes `key → value` only if `key` has no value (a non-blind write: a create that must
    /// not overwrite); returns whether it wrote. The default is a get then a put, which is not
    /// atomic against another writer of the same key: engines with a native check override it,
    /// and [`BenchEngine::put_if_absent_method`] says which one runs.
    fn put_if_absent(&self, key: &[u8], value: &[u8]) -> EResult<bool> {
        let mut old = Vec::new();
        if self.get(key, &mut old)? {
            return Ok(false);
        }
        self.put(key, value)?;
        Ok(true)
    }
    /// How [`BenchEngine::put_if_absent`] works for this engine (for the settings line).
    fn put_if_absent_method(&self) -> &'static str {
        "get then put (two calls, not atomic)"
    }
    /// Makes the writes of a phase that has ended visible and as durable as the engine's
    /// settings promise, for engines that group writes into larger units than one call (redb
    /// commits its open transaction). Runs inside the phase's timed region. The default does
    /// nothing.
    fn finish_writes(&self) -> EResult<()> {
        Ok(())
    }
    /// Waits until background flushes and compactions are done.
    fn wait_for_compactions(&self) -> EResult<()>;
    /// The engine's cumulative counters.
    fn counters(&self) -> Counters;
    /// The settings the engine runs with, as (name, value), for the report.
    fn settings(&self) -> Vec<(String, String)>;
    /// How `wait_for_compactions` works for this engine (for the report).
    fn wait_method(&self) -> &'static str;
}

/// Settings every engine gets, from the command line.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Memtable size in bytes.
    pub write_buffer_bytes: usize,
    /// Bloom filter bits per key.
    pub bloom_bits: u32,
    /// fsync every write.
    pub sync: bool,
    /// Bypass the page cache for reads where the engine can.
    pub direct_reads: bool,
    /// Block cache bytes for every engine (`None`: each engine's default).
    pub block_cache_bytes: Option<usize>,
    /// Keys are semi-sorted with a group prefix of this many bytes (`--key-groups`): peers that
    /// can use it (RocksDB's fixed prefix extractor and prefix Bloom filter) are told.
    #[cfg_attr(
        not(any(feature = "peers", feature = "rocksdb-current")),
        allow(dead_code)
    )]
    pub key_prefix_len: Option<usize>,
    /// Scree-only settings (None = the engine's default).
    pub scree: ScreeTuning,
}

/// Scree options the bench can override (`--background-threads`, `--trie-*`, `--frag-*`).
#[derive(Debug, Clone)]
pub struct ScreeTuning {
    /// Background flush/compaction threads.
    pub background_threads: Option<usize>,
    /// Flush-only threads.
    pub flush_threads: Option<usize>,
    /// `Options::flush_in_compactions`.
    pub flush_in_compactions: bool,
    /// `TrieOptions::pile_size`.
    pub trie_pile_size: Option<usize>,
    /// `TrieOptions::last_level_depth`.
    pub trie_last_level_depth: Option<u32>,
    /// `LeveledOptions::max_subcompactions`.
    pub leveled_subcompactions: Option<usize>,
    /// `LeveledOptions::level_base_bytes`, in MiB.
    pub leveled_base_mb: Option<u64>,
    /// `LeveledOptions::seek_compaction`.
    pub leveled_seek_compaction: Option<bool>,
    /// `FragmentedOptions::max_sstables_per_guard`.
    pub frag_tables_per_guard: Option<usize>,
    /// `FragmentedOptions::parallel_seeks`.
    pub frag_parallel_seeks: bool,
    /// `LightweightOptions::division_count`.
    pub lwc_division_count: Option<usize>,
    /// `LightweightOptions::dtable_max_bytes`, in MiB.
    pub lwc_dtable_mb: Option<u64>,
    /// `LightweightOptions::level_base_bytes`, in MiB.
    pub lwc_base_mb: Option<u64>,
    /// `LightweightOptions::level_size_ratio` (the paper's AF).
    pub lwc_level_ratio: Option<u64>,
    /// `LightweightOptions::concurrent_jobs`.
    pub lwc_concurrent_jobs: bool,
    /// `Options::parallel_search` (search the last level on a search thread).
    pub parallel_search: bool,
    /// `Options::mmap_reads`.
    pub mmap_reads: bool,
    /// `Options::max_open_files` (0: no bound).
    pub max_open_files: usize,
    /// `Options::cache_index_and_filter_blocks`.
    pub cache_index_and_filter_blocks: bool,
    /// `SemiSortedOptions::plan`, as Table 1 rows (empty: the default).
    pub semisorted_plan: Vec<u8>,
    /// `Options::device`: ordinary files or the band emulator.
    pub device: scree::Device,
}

impl Default for ScreeTuning {
    /// The engine's defaults.
    fn default() -> Self {
        ScreeTuning {
            background_threads: None,
            flush_threads: None,
            flush_in_compactions: scree::Options::default().flush_in_compactions,
            trie_pile_size: None,
            trie_last_level_depth: None,
            leveled_subcompactions: None,
            leveled_base_mb: None,
            leveled_seek_compaction: None,
            frag_tables_per_guard: None,
            frag_parallel_seeks: scree::KeyspaceOptions::new(scree::Layout::Fragmented)
                .fragmented
                .parallel_seeks,
            lwc_division_count: None,
            lwc_dtable_mb: None,
            lwc_base_mb: None,
            lwc_level_ratio: None,
            lwc_concurrent_jobs: scree::KeyspaceOptions::new(scree::Layout::Lightweight)
                .lightweight
                .concurrent_jobs,
            parallel_search: scree::Options::default().parallel_search,
            mmap_reads: scree::Options::default().mmap_reads,
            max_open_files: scree::Options::default().max_open_files,
            cache_index_and_filter_blocks: scree::Options::default().cache_index_and_filter_blocks,
            semisorted_plan: Vec::new(),
            device: scree::Device::Files,
        }
    }
}

/// Whether `dir` is missing or empty (a fresh database).
pub fn dir_is_empty(dir: &Path) -> bool {
    std::fs::read_dir(dir).map_or(true, |mut d| d.next().is_none())
}

#[cfg(test)]
pub mod memory {
    //! An in-memory engine (a `BTreeMap` behind a lock) for testing the workload, report and
    //! plot code without a real store.
    use super::*;
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::RwLock;

    /// The in-memory engine.
    #[derive(Default)]
    pub struct MemEngine {
        map: RwLock<BTreeMap<Vec<u8>, Vec<u8>>>,
        written: AtomicU64,
        /// Refuse scans, like a `trie` keyspace.
        pub no_scans: bool,
        /// Lose every 1000th put (to test that verification catches it).
        pub lossy: bool,
        /// `put_if_absent` overwrites present keys (to test that verification catches it).
        pub clobber: bool,
    }

    impl BenchEngine for MemEngine {
        fn engine(&self) -> &'static str {
            "scree"
        }
        fn layout(&self) -> Option<String> {
            Some("memory".into())
        }
        fn put(&self, key: &[u8], value: &[u8]) -> EResult<()> {
            let n = self
                .written
                .fetch_add((key.len() + value.len()) as u64, Ordering::Relaxed);
            if self.lossy && n.is_multiple_of(1000) {
                return Ok(());
            }
            let mut m = self
                .map
                .write()
                .map_err(|_| EngineError::Failed("poisoned".into()))?;
            m.insert(key.to_vec(), value.to_vec());
            Ok(())
        }
        fn get(&self, key: &[u8], out: &mut Vec<u8>) -> EResult<bool> {
            let m = self
                .map
                .read()
                .map_err(|_| EngineError::Failed("poisoned".into()))?;
            Ok(m.get(key).map(|v| out.clone_from(v)).is_some())
        }
        fn delete(&self, key: &[u8]) -> EResult<()> {
            let mut m = self
                .map
                .write()
                .map_err(|_| EngineError::Failed("poisoned".into()))?;
            m.remove(key);
            Ok(())
        }
        fn scan(
            &self,
            start: &[u8],
            limit: usize,
            visit: &mut dyn FnMut(&[u8], &[u8]),
        ) -> EResult<usize> {
            if self.no_scans {
                return Err(EngineError::Unsupported("no scans here".into()));
            }
            let m = self
                .map
                .read()
                .map_err(|_| EngineError::Failed("poisoned".into()))?;
            let mut n = 0;
            for (k, v) in m.range(start.to_vec()..).take(limit) {
                visit(k, v);
                n += 1;
            }
            Ok(n)
        }
        fn scan_prefix(
            &self,
            prefix: &[u8],
            visit: &mut dyn FnMut(&[u8], &[u8]),
        ) -> EResult<usize> {
            if self.no_scans {
                return Err(EngineError::Unsupported("no scans here".into()));
            }
            let m = self
                .map
                .read()
                .map_err(|_| EngineError::Failed("poisoned".into()))?;
            let mut n = 0;
            for (k, v) in m
                .range(prefix.to_vec()..)
                .take_while(|(k, _)| k.starts_with(prefix))
            {
                visit(k, v);
                n += 1;
            }
            Ok(n)
        }
        fn put_if_absent(&self, key: &[u8], value: &[u8]) -> EResult<bool> {
            if self.clobber {
                self.put(key, value)?;
                return Ok(true);
            }
            let mut m = self
                .map
                .write()
                .map_err(|_| EngineError::Failed("poisoned".into()))?;
            if m.contains_key(key) {
                return Ok(false);
            }
            m.insert(key.to_vec(), value.to_vec());
            self.written
                .fetch_add((key.len() + value.len()) as u64, Ordering::Relaxed);
            Ok(true)
        }
        fn put_if_absent_method(&self) -> &'static str {
            "atomic under the map's lock"
        }
        fn wait_for_compactions(&self) -> EResult<()> {
            Ok(())
        }
        fn counters(&self) -> Counters {
            Counters {
                written: Some(WrittenByCause {
                    wal: self.written.load(Ordering::Relaxed),
                    ..Default::default()
                }),
                stall_seconds: Some(0.0),
                data_block_reads: Some(0),
                metadata_block_reads: Some(0),
                ..Default::default()
            }
        }
        fn settings(&self) -> Vec<(String, String)> {
            vec![("kind".into(), "in-memory test engine".into())]
        }
        fn wait_method(&self) -> &'static str {
            "nothing to wait for"
        }
    }
}
