//! fjall (a pure-Rust LSM-tree, the `fjall` crate) behind the benchmark's engine interface.
//!
//! Settings equivalent to Scree's: one keyspace with the same memtable size, a Bloom filter of
//! the same bits per key on every level (fjall's default is a 0.01 % false-positive rate on
//! level 0), no compression, a block cache of the same size, index and filter blocks pinned
//! (as Scree pins them unless `--cache-index-and-filter-blocks`), and the journal (fjall's
//! WAL) written to the OS on every write without fsync (`manual_journal_persist = false`), or
//! fsynced after every write with `--sync`. Everything else is fjall's default (leveled
//! compaction, 4 KiB blocks, min(cores, 4) worker threads). fjall keeps no counters of bytes
//! written or stall time: its write amplification is the process's `wchar`.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use fjall::config::{
    BloomConstructionPolicy, CompressionPolicy, FilterPolicy, FilterPolicyEntry, PinningPolicy,
};
use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode};

use crate::bench::engine::{BenchEngine, Counters, EResult, EngineConfig, EngineError};

/// The keyspace every workload uses.
const KEYSPACE: &str = "bench";

/// Polls of `wait_for_compactions` in a row that must find no flush and no compaction: a
/// flush schedules its compaction only once it ends, so one idle poll can fall between them.
const IDLE_POLLS: u32 = 5;

/// An open fjall database and its one keyspace.
pub struct Fjall {
    db: Database,
    ks: Keyspace,
    sync: bool,
    settings: Vec<(String, String)>,
}

fn failed(e: impl std::fmt::Display) -> EngineError {
    EngineError::Failed(format!("fjall: {e}"))
}

impl Fjall {
    /// Opens (or creates) a database at `dir`.
    pub fn open(dir: &Path, cfg: &EngineConfig) -> Result<Fjall> {
        let mut builder = Database::builder(dir);
        if let Some(n) = cfg.block_cache_bytes {
            builder = builder.cache_size(n as u64);
        }
        let db = builder
            .open()
            .with_context(|| format!("opening fjall at {}", dir.display()))?;
        let pinned = !cfg.scree.cache_index_and_filter_blocks;
        let bits = cfg.bloom_bits as f32;
        let ks = db
            .keyspace(KEYSPACE, || {
                KeyspaceCreateOptions::default()
                    .max_memtable_size(cfg.write_buffer_bytes as u64)
                    .filter_policy(FilterPolicy::all(FilterPolicyEntry::Bloom(
                        BloomConstructionPolicy::BitsPerKey(bits),
                    )))
                    .data_block_compression_policy(CompressionPolicy::disabled())
                    .index_block_compression_policy(CompressionPolicy::disabled())
                    .index_block_pinning_policy(PinningPolicy::all(pinned))
                    .filter_block_pinning_policy(PinningPolicy::all(pinned))
            })
            .with_context(|| format!("opening fjall's keyspace at {}", dir.display()))?;
        let settings = vec![
            ("version".into(), "3.1.13 (crate fjall)".into()),
            (
                "max_memtable_size".into(),
                cfg.write_buffer_bytes.to_string(),
            ),
            (
                "filter".into(),
                format!("Bloom {} bits/key on every level", cfg.bloom_bits),
            ),
            ("compression".into(), "none".into()),
            (
                "wal".into(),
                if cfg.sync {
                    "journal, fsync (SyncData) after every write".into()
                } else {
                    "journal, written to the OS on every write, no fsync".into()
                },
            ),
            (
                "cache_size".into(),
                cfg.block_cache_bytes
                    .map_or("default (32 MiB)".into(), |n| n.to_string()),
            ),
            (
                "index_and_filter_blocks".into(),
                if pinned {
                    "pinned on every level".into()
                } else {
                    "in the block cache".into()
                },
            ),
            (
                "differs".into(),
                "no write-amplification or stall counters (WA from wchar); no O_DIRECT reads; \
                 index/filter partitioned from level 3 (fjall's default)"
                    .into(),
            ),
        ];
        Ok(Fjall {
            db,
            ks,
            sync: cfg.sync,
            settings,
        })
    }

    fn after_write(&self) -> EResult<()> {
        if self.sync {
            self.db.persist(PersistMode::SyncData).map_err(failed)?;
        }
        Ok(())
    }
}

impl BenchEngine for Fjall {
    fn engine(&self) -> &'static str {
        "fjall"
    }

    fn layout(&self) -> Option<String> {
        None
    }

    fn put(&self, key: &[u8], value: &[u8]) -> EResult<()> {
        self.ks.insert(key, value).map_err(failed)?;
        self.after_write()
    }

    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> EResult<bool> {
        match self.ks.get(key).map_err(failed)? {
            Some(v) => {
                out.clear();
                out.extend_from_slice(&v);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn delete(&self, key: &[u8]) -> EResult<()> {
        self.ks.remove(key).map_err(failed)?;
        self.after_write()
    }

    fn scan(
        &self,
        start: &[u8],
        limit: usize,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> EResult<usize> {
        let mut n = 0;
        if limit == 0 {
            return Ok(0);
        }
        for item in self.ks.range(start..) {
            let (k, v) = item.into_inner().map_err(failed)?;
            visit(&k, &v);
            n += 1;
            if n == limit {
                break;
            }
        }
        Ok(n)
    }

    fn scan_prefix(&self, prefix: &[u8], visit: &mut dyn FnMut(&[u8], &[u8])) -> EResult<usize> {
        let mut n = 0;
        for item in self.ks.prefix(prefix) {
            let (k, v) = item.into_inner().map_err(failed)?;
            visit(&k, &v);
            n += 1;
        }
        Ok(n)
    }

    fn wait_for_compactions(&self) -> EResult<()> {
        let mut idle = 0;
        while idle < IDLE_POLLS {
            let busy = self.db.outstanding_flushes() > 0
                || self.db.active_compactions() > 0
                || self.ks.sealed_memtable_count() > 0;
            idle = if busy { 0 } else { idle + 1 };
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    fn counters(&self) -> Counters {
        Counters::default()
    }

    fn settings(&self) -> Vec<(String, String)> {
        self.settings.clone()
    }

    fn wait_method(&self) -> &'static str {
        "poll outstanding_flushes, active_compactions and sealed memtables until all 0 \
         in 5 polls 20 ms apart"
    }
}
