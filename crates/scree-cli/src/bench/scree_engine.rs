//! Scree behind the benchmark's engine interface: one database per run with one keyspace,
//! `bench`, of the layout under test.

use std::path::Path;

use scree::{Db, Error, KeyspaceOptions, Layout, Options, WriteOptions};

use super::engine::{BenchEngine, Counters, EResult, EngineConfig, EngineError, WrittenByCause};

/// Name of the keyspace the benchmark writes.
pub const KEYSPACE: &str = "bench";

/// A Scree database and its benchmark keyspace.
pub struct ScreeEngine {
    db: Db,
    ks: scree::Keyspace,
    layout: Layout,
    sync: bool,
    settings: Vec<(String, String)>,
}

fn err(e: Error) -> EngineError {
    match e {
        Error::Unsupported(m) => EngineError::Unsupported(m),
        other => EngineError::Failed(other.to_string()),
    }
}

/// The layouts `--layout` may name: every implemented one for `all`. A `semisorted` layout
/// named without a length (`semisorted`, or through `all`) gets `prefix_len` bytes of prefix
/// (`--prefix-len`); `semisorted:N` keeps its own `N`.
pub fn resolve_layouts(spec: &str, prefix_len: usize) -> anyhow::Result<Vec<Layout>> {
    let with_len = |l: Layout| match l {
        Layout::SemiSorted { .. } => Layout::SemiSorted { prefix_len },
        other => other,
    };
    let implemented = Layout::implemented();
    let names = || {
        implemented
            .iter()
            .map(|l| l.name())
            .collect::<Vec<_>>()
            .join(", ")
    };
    match spec.trim() {
        "all" => Ok(implemented.iter().copied().map(with_len).collect()),
        "none" | "" => Ok(Vec::new()),
        list => list
            .split(',')
            .map(|name| {
                let name = name.trim();
                let mut layout: Layout = name
                    .parse()
                    .map_err(|e| anyhow::anyhow!("--layout {name}: {e}"))?;
                if name == "semisorted" {
                    layout = with_len(layout);
                }
                if !implemented.iter().any(|l| l.name() == layout.name()) {
                    anyhow::bail!(
                        "layout `{}` is not implemented in this build (implemented: {})",
                        layout.name(),
                        names()
                    );
                }
                Ok(layout)
            })
            .collect(),
    }
}

impl ScreeEngine {
    /// Opens (or creates) the database at `dir` with keyspace `bench` of `layout`.
    pub fn open(dir: &Path, layout: Layout, cfg: &EngineConfig) -> anyhow::Result<ScreeEngine> {
        let mut opts = Options {
            direct_reads: cfg.direct_reads,
            ..Options::default()
        };
        if let Some(n) = cfg.block_cache_bytes {
            opts.block_cache_bytes = n;
        }
        let mut ko = KeyspaceOptions::new(layout);
        ko.write_buffer_bytes = cfg.write_buffer_bytes;
        ko.bloom_bits_per_key = cfg.bloom_bits;
        let t = &cfg.scree;
        if let Some(n) = t.background_threads {
            opts.background_threads = n;
        }
        if let Some(n) = t.flush_threads {
            opts.flush_threads = n;
        }
        opts.flush_in_compactions = t.flush_in_compactions;
        opts.parallel_search = t.parallel_search;
        opts.mmap_reads = t.mmap_reads;
        opts.max_open_files = t.max_open_files;
        opts.cache_index_and_filter_blocks = t.cache_index_and_filter_blocks;
        let opts = opts.device(t.device)?;
        if let Some(n) = t.trie_pile_size {
            ko.trie.pile_size = n;
        }
        if let Some(d) = t.trie_last_level_depth {
            ko.trie.last_level_depth = d;
        }
        if let Some(n) = t.leveled_subcompactions {
            ko.leveled.max_subcompactions = n;
        }
        if let Some(mb) = t.leveled_base_mb {
            ko.leveled.level_base_bytes = mb.saturating_mul(1 << 20);
        }
        if let Some(on) = t.leveled_seek_compaction {
            ko.leveled.seek_compaction = on;
        }
        if let Some(n) = t.frag_tables_per_guard {
            ko.fragmented.max_sstables_per_guard = n;
        }
        ko.fragmented.parallel_seeks = t.frag_parallel_seeks;
        ko.semisorted.plan = t
            .semisorted_plan
            .iter()
            .map(|&r| {
                scree::LevelPlan::from_row(r)
                    .ok_or_else(|| anyhow::anyhow!("--semisorted-plan: row {r} is not 0..=7"))
            })
            .collect::<anyhow::Result<_>>()?;
        if let Some(n) = t.lwc_division_count {
            ko.lightweight.division_count = n;
        }
        if let Some(mb) = t.lwc_dtable_mb {
            ko.lightweight.dtable_max_bytes = mb.saturating_mul(1 << 20);
        }
        if let Some(mb) = t.lwc_base_mb {
            ko.lightweight.level_base_bytes = mb.saturating_mul(1 << 20);
            ko.lightweight.level_base_follows_l0 = false;
        }
        if let Some(r) = t.lwc_level_ratio {
            ko.lightweight.level_size_ratio = r;
        }
        ko.lightweight.concurrent_jobs = t.lwc_concurrent_jobs;
        let mut settings = vec![
            (
                "write_buffer_bytes".into(),
                ko.write_buffer_bytes.to_string(),
            ),
            (
                "bloom_bits_per_key".into(),
                ko.bloom_bits_per_key.to_string(),
            ),
            (
                "block_cache_bytes".into(),
                opts.block_cache_bytes.to_string(),
            ),
            (
                "background_threads".into(),
                opts.background_threads.to_string(),
            ),
            ("flush_threads".into(), opts.flush_threads.to_string()),
            (
                "flush_in_compactions".into(),
                opts.flush_in_compactions.to_string(),
            ),
            ("direct_reads".into(), opts.direct_reads.to_string()),
            ("device".into(), device_setting(t.device)),
            ("mmap_reads".into(), opts.mmap_reads.to_string()),
            ("parallel_search".into(), opts.parallel_search.to_string()),
            ("max_open_files".into(), opts.max_open_files.to_string()),
            (
                "cache_index_and_filter_blocks".into(),
                opts.cache_index_and_filter_blocks.to_string(),
            ),
            (
                "compression".into(),
                "none (Scree does not compress)".into(),
            ),
            ("wal".into(), "on".into()),
            ("sync".into(), cfg.sync.to_string()),
        ];
        match layout {
            Layout::Leveled => {
                settings.push((
                    "leveled.max_subcompactions".into(),
                    ko.leveled.max_subcompactions.to_string(),
                ));
                settings.push((
                    "leveled.level_base_bytes".into(),
                    ko.leveled.level_base_bytes.to_string(),
                ));
                settings.push((
                    "leveled.seek_compaction".into(),
                    ko.leveled.seek_compaction.to_string(),
                ));
            }
            Layout::Trie => {
                settings.push(("trie.pile_size".into(), ko.trie.pile_size.to_string()));
                settings.push((
                    "trie.last_level_depth".into(),
                    ko.trie.last_level_depth.to_string(),
                ));
            }
            Layout::SemiSorted { prefix_len } => {
                let o = &ko.semisorted;
                settings.push(("semisorted.prefix_len".into(), prefix_len.to_string()));
                settings.push(("semisorted.sub_levels".into(), o.sub_levels.to_string()));
                settings.push(("semisorted.max_levels".into(), o.max_levels.to_string()));
                settings.push((
                    "semisorted.target_table_bytes".into(),
                    o.target_table_bytes.to_string(),
                ));
                let plan: Vec<String> = (0..o.max_levels).map(|l| o.level_plan(l).name()).collect();
                settings.push(("semisorted.plan".into(), plan.join(",")));
            }
            Layout::Fragmented => {
                settings.push((
                    "fragmented.max_sstables_per_guard".into(),
                    ko.fragmented.max_sstables_per_guard.to_string(),
                ));
                settings.push((
                    "fragmented.parallel_seeks".into(),
                    ko.fragmented.parallel_seeks.to_string(),
                ));
            }
            Layout::Lightweight => {
                let l = &ko.lightweight;
                settings.push((
                    "lightweight.division_count".into(),
                    l.division_count.to_string(),
                ));
                settings.push((
                    "lightweight.dtable_max_bytes".into(),
                    l.dtable_max_bytes.to_string(),
                ));
                settings.push((
                    "lightweight.level_base_bytes".into(),
                    l.level_base_bytes.to_string(),
                ));
                settings.push((
                    "lightweight.level_base_follows_l0".into(),
                    l.level_base_follows_l0.to_string(),
                ));
                settings.push((
                    "lightweight.level_size_ratio".into(),
                    l.level_size_ratio.to_string(),
                ));
                settings.push((
                    "lightweight.concurrent_jobs".into(),
                    l.concurrent_jobs.to_string(),
                ));
            }
            _ => {}
        }
        let db = Db::open(dir, opts)
            .map_err(|e| anyhow::anyhow!("opening Scree at {}: {e}", dir.display()))?;
        let ks = db
            .keyspace(KEYSPACE, ko)
            .map_err(|e| anyhow::anyhow!("opening keyspace {KEYSPACE} ({layout}): {e}"))?;
        Ok(ScreeEngine {
            db,
            ks,
            layout,
            sync: cfg.sync,
            settings,
        })
    }
}

impl BenchEngine for ScreeEngine {
    fn engine(&self) -> &'static str {
        "scree"
    }

    fn layout(&self) -> Option<String> {
        Some(self.layout.name().to_string())
    }

    fn put(&self, key: &[u8], value: &[u8]) -> EResult<()> {
        if self.sync {
            self.ks
                .put_opt(key, value, &WriteOptions { sync: true })
                .map_err(err)
        } else {
            self.ks.put(key, value).map_err(err)
        }
    }

    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> EResult<bool> {
        match self.ks.get(key).map_err(err)? {
            Some(v) => {
                *out = v;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn delete(&self, key: &[u8]) -> EResult<()> {
        if self.sync {
            self.ks
                .delete_opt(key, &WriteOptions { sync: true })
                .map_err(err)
        } else {
            self.ks.delete(key).map_err(err)
        }
    }

    fn scan(
        &self,
        start: &[u8],
        limit: usize,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> EResult<usize> {
        let mut n = 0;
        for item in self.ks.range(start.to_vec()..).take(limit) {
            let (k, v) = item.map_err(err)?;
            visit(&k, &v);
            n += 1;
        }
        Ok(n)
    }

    fn scan_prefix(&self, prefix: &[u8], visit: &mut dyn FnMut(&[u8], &[u8])) -> EResult<usize> {
        let mut n = 0;
        for item in self.ks.prefix(prefix) {
            let (k, v) = item.map_err(err)?;
            visit(&k, &v);
            n += 1;
        }
        Ok(n)
    }

    fn put_if_absent(&self, key: &[u8], value: &[u8]) -> EResult<bool> {
        self.ks
            .put_if_absent_opt(key, value, &WriteOptions { sync: self.sync })
            .map_err(err)
    }

    fn put_if_absent_method(&self) -> &'static str {
        "Keyspace::put_if_absent (atomic check and put)"
    }

    fn wait_for_compactions(&self) -> EResult<()> {
        self.db.wait_for_compactions().map_err(err)
    }

    fn counters(&self) -> Counters {
        let s = self.db.stats();
        let w = &s.bytes_written;
        Counters {
            user_bytes: Some(s.user_bytes),
            written: Some(WrittenByCause {
                wal: w.wal,
                flush: w.flush,
                compaction: w.compaction,
                metadata: w.metadata,
                gc: w.gc,
            }),
            // A slowdown sleep delays a writer like RocksDB's delayed write, which its
            // `stall.micros` counts: count it too, and report it apart.
            stall_seconds: Some(s.stall_seconds + s.slowdown_seconds),
            slowdown_seconds: Some(s.slowdown_seconds),
            memtable_stall_seconds: Some(s.memtable_stall_seconds),
            flush_seconds: Some(s.flush_seconds),
            compaction_seconds: Some(s.compaction_seconds),
            max_flush_seconds: Some(s.max_flush_seconds),
            data_block_reads: Some(s.data_block_reads),
            metadata_block_reads: Some(s.metadata_block_reads),
            data_block_cache_hits: Some(s.cache_hits),
            mapped_bytes: Some(s.bytes_mapped),
            level_bytes: Some(level_bytes(&s)),
            device: s.device.as_ref().map(|d| super::engine::DeviceCounters {
                host_written: d.host_bytes_written,
                device_written: d.device_bytes_written,
                host_read: d.host_bytes_read,
                device_read: d.device_bytes_read,
                rmws: d.read_modify_writes,
            }),
            // Table readers' indexes and filters, and filters kept per level (semisorted).
            pinned_metadata_bytes: Some(
                s.table_reader_bytes
                    + s.keyspaces
                        .iter()
                        .flat_map(|k| &k.levels)
                        .map(|l| l.filter_bytes)
                        .sum::<u64>(),
            ),
            layout_counters: match self.layout {
                Layout::Lightweight => serde_json::to_value(&s.lightweight).ok(),
                Layout::SemiSorted { .. } => Some(pinned_breakdown(&s)),
                // Seek compactions (`LeveledOptions::seek_compaction`) beside all compactions.
                Layout::Leveled => Some(serde_json::json!({
                    "compactions": s.compactions,
                    "trivial_moves": s.trivial_moves,
                    "seek_compactions": s.seek_compactions,
                    "seek_compaction_bytes": s.seek_compaction_bytes,
                })),
                _ => None,
            },
        }
    }

    fn settings(&self) -> Vec<(String, String)> {
        self.settings.clone()
    }

    fn wait_method(&self) -> &'static str {
        "Db::wait_for_compactions()"
    }
}

/// `semisorted`'s pinned memory by level and kind (`LevelMemory`, measured from the
/// structures' heap bytes), with what `Stats::table_reader_bytes` holds beyond the live
/// tables' readers (`other_reader_bytes`: readers of tables no longer in a version, if any
/// are still held). Summed over the keyspaces; the levels' totals and the other readers add
/// up to the pinned metadata bytes.
fn pinned_breakdown(s: &scree::Stats) -> serde_json::Value {
    let mut levels: Vec<scree::LevelMemory> = Vec::new();
    for l in s.keyspaces.iter().flat_map(|k| &k.levels) {
        let Some(m) = &l.memory else { continue };
        let i = l.level as usize;
        if levels.len() <= i {
            levels.resize(i + 1, scree::LevelMemory::default());
        }
        if let Some(x) = levels.get_mut(i) {
            x.entries += m.entries;
            x.open_readers += m.open_readers;
            x.pinned_indexes += m.pinned_indexes;
            x.pinned_index_entries += m.pinned_index_entries;
            x.reader_bytes += m.reader_bytes;
            x.index_bytes += m.index_bytes;
            x.index_level1_bytes += m.index_level1_bytes;
            x.index_dir_bytes += m.index_dir_bytes;
            x.index_level2_bytes += m.index_level2_bytes;
            x.index_level3_bytes += m.index_level3_bytes;
            x.filter_primary_bytes += m.filter_primary_bytes;
            x.filter_secondary_bytes += m.filter_secondary_bytes;
            x.filter_slots += m.filter_slots;
            x.filter_entries += m.filter_entries;
            x.filter_secondary_keys += m.filter_secondary_keys;
            x.filter_segments = x.filter_segments.max(m.filter_segments);
            x.filter_tag_bits = x.filter_tag_bits.max(m.filter_tag_bits);
            x.filter_id_bits = x.filter_id_bits.max(m.filter_id_bits);
        }
    }
    let live: u64 = levels.iter().map(|m| m.reader_bytes).sum();
    serde_json::json!({
        "pinned_levels": levels,
        "other_reader_bytes": s.table_reader_bytes.saturating_sub(live),
        "table_reader_bytes": s.table_reader_bytes,
    })
}

/// Bytes flushed and compacted into each level, summed over the keyspaces (index = level).
/// How `settings` names the device.
fn device_setting(d: scree::Device) -> String {
    match d {
        scree::Device::Files => "files".into(),
        scree::Device::SmrHost { band_mb } => format!("smr-host, {band_mb} MiB bands"),
        scree::Device::SmrDrive { band_mb } => format!("smr-drive, {band_mb} MiB bands"),
    }
}

fn level_bytes(s: &scree::Stats) -> Vec<u64> {
    let mut v: Vec<u64> = Vec::new();
    for w in s.keyspaces.iter().flat_map(|k| k.level_writes.iter()) {
        let level = w.level as usize;
        if v.len() <= level {
            v.resize(level + 1, 0);
        }
        if let Some(x) = v.get_mut(level) {
            *x += w.flush_bytes + w.compaction_bytes;
        }
    }
    v
}
