//! The current RocksDB release behind the benchmark's engine interface: peer `rocksdb`, through
//! the `rocksdb` crate (rust-rocksdb), whose `librocksdb-sys` compiles RocksDB's C++ source in
//! release mode with `NDEBUG` (no assertions). Built only with the `rocksdb-current` feature.
//!
//! Settings equivalent to Scree's, as for Debian's RocksDB (`super::rocksdb_debian`): the same
//! write buffer, a full Bloom filter of the same bits per key, no compression, an LRU block
//! cache of the same size, index and filter blocks held by the table readers (RocksDB's default
//! `cache_index_and_filter_blocks = false`, as Scree pins them; with
//! `--cache-index-and-filter-blocks` both put them in the block cache), WAL on with the same
//! sync policy, optional direct reads; everything else is RocksDB's default. Statistics are
//! enabled so that WAL, flush and compaction bytes and stall time come from RocksDB's own
//! tickers (this costs RocksDB a few percent).

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use rocksdb::statistics::Ticker;
use rocksdb::{
    BlockBasedOptions, Cache, DBCompressionType, Options, ReadOptions, SliceTransform,
    WriteOptions, DB,
};

use crate::bench::engine::{
    BenchEngine, Counters, EResult, EngineConfig, EngineError, WrittenByCause,
};

/// The RocksDB release `librocksdb-sys` bundles (its version's build metadata, `+11.8.1`).
pub const VERSION: &str = "11.8.1";

use super::ROCKSDB_MEMTABLE_PREFIX_BLOOM_RATIO as MEMTABLE_PREFIX_BLOOM_RATIO;

/// An open RocksDB database with its options.
pub struct RocksDb {
    db: DB,
    /// The options the database was opened with: their statistics object holds the tickers.
    options: Options,
    read: ReadOptions,
    /// Whether a prefix extractor is set: then the iterator of `scan` seeks in total order (a
    /// seek + nexts that leave the prefix must not use the prefix Bloom filter) and that of
    /// `scan_prefix` sets `prefix_same_as_start`.
    prefix_mode: bool,
    write: WriteOptions,
    settings: Vec<(String, String)>,
}

fn failed(e: impl std::fmt::Display) -> EngineError {
    EngineError::Failed(format!("rocksdb: {e}"))
}

impl RocksDb {
    /// Opens (or creates) a database at `dir`.
    pub fn open(dir: &Path, cfg: &EngineConfig) -> Result<RocksDb> {
        let mut options = Options::default();
        options.create_if_missing(true);
        options.set_write_buffer_size(cfg.write_buffer_bytes);
        options.set_compression_type(DBCompressionType::None);
        options.set_use_direct_reads(cfg.direct_reads);
        options.enable_statistics();
        if let Some(len) = cfg.key_prefix_len {
            options.set_prefix_extractor(SliceTransform::create_fixed_prefix(len));
            options.set_memtable_prefix_bloom_ratio(MEMTABLE_PREFIX_BLOOM_RATIO);
        }
        let mut table = BlockBasedOptions::default();
        table.set_bloom_filter(f64::from(cfg.bloom_bits), false);
        if let Some(n) = cfg.block_cache_bytes {
            table.set_block_cache(&Cache::new_lru_cache(n));
        }
        let cached_meta = cfg.scree.cache_index_and_filter_blocks;
        table.set_cache_index_and_filter_blocks(cached_meta);
        options.set_block_based_table_factory(&table);
        let db = DB::open(&options, dir)
            .with_context(|| format!("opening RocksDB at {}", dir.display()))?;

        let read = ReadOptions::default();
        let mut write = WriteOptions::default();
        write.set_sync(cfg.sync);
        let mut settings = vec![
            (
                "version".into(),
                format!("{VERSION} (built from source by librocksdb-sys, release, NDEBUG)"),
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
                    .map_or("default (32 MiB LRU)".into(), |n| format!("{n} (LRU)")),
            ),
            (
                "index_and_filter_blocks".into(),
                if cached_meta {
                    "in the block cache".into()
                } else {
                    "held by the table readers (not in the block cache)".into()
                },
            ),
        ];
        settings.extend(super::rocksdb_shared_settings(cfg.key_prefix_len));
        Ok(RocksDb {
            db,
            options,
            read,
            prefix_mode: cfg.key_prefix_len.is_some(),
            write,
            settings,
        })
    }

    fn property_int(&self, name: &str) -> EResult<u64> {
        self.db
            .property_int_value(name)
            .map_err(failed)?
            .ok_or_else(|| failed(format!("property {name} unavailable")))
    }

    fn ticker(&self, t: Ticker) -> u64 {
        self.options.get_ticker_count(t)
    }

    /// Seeks an iterator with `opts` to `start` and visits up to `limit` entries, stopping at
    /// the first key without `prefix` if one is given (one seek and at most `limit - 1` nexts,
    /// as `BenchEngine::scan` asks); returns how many it visited. (`raw_iterator_opt` takes the
    /// options by value, so each iterator gets its own.)
    fn iterate(
        &self,
        opts: ReadOptions,
        start: &[u8],
        limit: usize,
        prefix: Option<&[u8]>,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> EResult<usize> {
        let mut it = self.db.raw_iterator_opt(opts);
        it.seek(start);
        let mut n = 0;
        while n < limit && it.valid() {
            let (Some(k), Some(v)) = (it.key(), it.value()) else {
                break;
            };
            if prefix.is_some_and(|p| !k.starts_with(p)) {
                break;
            }
            visit(k, v);
            n += 1;
            if n < limit {
                it.next();
            }
        }
        it.status().map_err(failed)?;
        Ok(n)
    }
}

impl BenchEngine for RocksDb {
    fn engine(&self) -> &'static str {
        "rocksdb"
    }

    fn layout(&self) -> Option<String> {
        None
    }

    fn put(&self, key: &[u8], value: &[u8]) -> EResult<()> {
        self.db.put_opt(key, value, &self.write).map_err(failed)
    }

    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> EResult<bool> {
        match self.db.get_pinned_opt(key, &self.read).map_err(failed)? {
            Some(v) => {
                out.clear();
                out.extend_from_slice(&v);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn delete(&self, key: &[u8]) -> EResult<()> {
        self.db.delete_opt(key, &self.write).map_err(failed)
    }

    fn scan(
        &self,
        start: &[u8],
        limit: usize,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> EResult<usize> {
        let mut opts = ReadOptions::default();
        opts.set_total_order_seek(self.prefix_mode);
        self.iterate(opts, start, limit, None, visit)
    }

    fn scan_prefix(&self, prefix: &[u8], visit: &mut dyn FnMut(&[u8], &[u8])) -> EResult<usize> {
        let mut opts = ReadOptions::default();
        opts.set_prefix_same_as_start(self.prefix_mode);
        self.iterate(opts, prefix, usize::MAX, Some(prefix), visit)
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
                if self.property_int(p)? != 0 {
                    idle = false;
                }
            }
            if idle {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn counters(&self) -> Counters {
        Counters {
            written: Some(WrittenByCause {
                wal: self.ticker(Ticker::WalFileBytes),
                flush: self.ticker(Ticker::FlushWriteBytes),
                compaction: self.ticker(Ticker::CompactWriteBytes),
                ..Default::default()
            }),
            stall_seconds: Some(self.ticker(Ticker::StallMicros) as f64 / 1e6),
            data_block_reads: Some(self.ticker(Ticker::BlockCacheDataMiss)),
            metadata_block_reads: Some(
                self.ticker(Ticker::BlockCacheIndexMiss)
                    + self.ticker(Ticker::BlockCacheFilterMiss),
            ),
            pinned_metadata_bytes: self
                .db
                .property_int_value("rocksdb.estimate-table-readers-mem")
                .ok()
                .flatten(),
            ..Default::default()
        }
    }

    fn settings(&self) -> Vec<(String, String)> {
        self.settings.clone()
    }

    fn wait_method(&self) -> &'static str {
        "poll rocksdb.{mem-table-flush-pending,num-running-flushes,compaction-pending,num-running-compactions} until all 0"
    }
}
