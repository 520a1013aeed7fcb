//! I/O accounting and the public [`Stats`] report (definitions in DESIGN.md, "I/O accounting").

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// Why bytes were written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteCause {
    /// Write-ahead log records.
    Wal,
    /// Tables written by memtable flushes.
    Flush,
    /// Tables written by compactions.
    Compaction,
    /// Manifest, CURRENT, and filters/indexes written on their own.
    Metadata,
    /// Garbage collection and division rewrites.
    Gc,
}

/// What kind of block a read fetched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadKind {
    /// A block holding keys and values.
    Data,
    /// Index, filter, footer, manifest and other metadata.
    Metadata,
    /// Any block read by a compaction or flush (kept apart from lookup costs).
    Compaction,
}

/// Live counters, shared by every file of a database.
#[derive(Debug, Default)]
pub struct IoStats {
    written: [AtomicU64; 5],
    data_reads: AtomicU64,
    meta_reads: AtomicU64,
    compaction_reads: AtomicU64,
    bytes_read: AtomicU64,
    pub(crate) cache_hits: AtomicU64,
    pub(crate) cache_misses: AtomicU64,
    index_filter_hits: AtomicU64,
    index_filter_misses: AtomicU64,
    pub(crate) user_bytes: AtomicU64,
    pub(crate) gets: AtomicU64,
    pub(crate) stall_micros: AtomicU64,
    pub(crate) memtable_stall_micros: AtomicU64,
    pub(crate) slowdown_micros: AtomicU64,
    pub(crate) compactions: AtomicU64,
    pub(crate) flushes: AtomicU64,
    pub(crate) trivial_moves: AtomicU64,
    pub(crate) subcompactions: AtomicU64,
    pub(crate) seek_compactions: AtomicU64,
    pub(crate) seek_compaction_bytes: AtomicU64,
    pub(crate) flushes_in_compactions: AtomicU64,
    pub(crate) flush_micros: AtomicU64,
    pub(crate) max_flush_micros: AtomicU64,
    pub(crate) compaction_micros: AtomicU64,
    mapped: AtomicU64,
    open_table_files: AtomicU64,
    table_reader_bytes: AtomicU64,
    /// Counters of the `lightweight` layout's jobs.
    pub(crate) lwc: LwcCounters,
}

/// Live counters of the `lightweight` layout (reported as [`LightweightStats`]).
#[derive(Debug, Default)]
pub(crate) struct LwcCounters {
    pub(crate) compactions: AtomicU64,
    pub(crate) victim_bytes: AtomicU64,
    pub(crate) appended_segments: AtomicU64,
    pub(crate) copies_used: AtomicU64,
    pub(crate) stale_repairs: AtomicU64,
    pub(crate) uncopied_reads: AtomicU64,
    pub(crate) aggregation_writes: AtomicU64,
    pub(crate) balance_shifts: AtomicU64,
    pub(crate) divisions: AtomicU64,
    pub(crate) full_rewrites: AtomicU64,
    pub(crate) spills: AtomicU64,
    pub(crate) aggregation_skips: AtomicU64,
    pub(crate) concurrent_jobs: AtomicU64,
    pub(crate) shared_level_jobs: AtomicU64,
    pub(crate) resets: AtomicU64,
    pub(crate) room_compactions: AtomicU64,
    pub(crate) rewrite_bytes: AtomicU64,
    pub(crate) division_bytes: AtomicU64,
    pub(crate) copies_carried: AtomicU64,
    pub(crate) copies_gone: AtomicU64,
    pub(crate) tail_read_bytes: AtomicU64,
    pub(crate) early_rewrites: AtomicU64,
    pub(crate) rewrite_held_bytes: AtomicU64,
}

/// What the `lightweight` layout's jobs did (all keyspaces of the database).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct LightweightStats {
    /// Light-weight compactions run.
    pub compactions: u64,
    /// Bytes of the victim DTables those compactions took (file bytes named by the version).
    pub victim_bytes: u64,
    /// Segments appended to next-level DTables.
    pub appended_segments: u64,
    /// Target tails taken from a fresh aggregated copy the victim carried (no read).
    pub copies_used: u64,
    /// Aggregated copies found stale (the target's tail offset had moved: another victim
    /// appended to it) and repaired by reading the target's tail.
    pub stale_repairs: u64,
    /// Target tails read because the victim carried no copy of them (level-0 victims, tables
    /// new since the copy was made).
    pub uncopied_reads: u64,
    /// Aggregation blocks written (the targets' new tails stored in the victim's level).
    pub aggregation_writes: u64,
    /// Workload-balance boundary shifts.
    pub balance_shifts: u64,
    /// Equal divisions of oversized DTables.
    pub divisions: u64,
    /// Next-level groups a compaction rewrote together with their arrival (a division
    /// merged with it) because an append could have carried a table past its size limit.
    #[serde(default)]
    pub full_rewrites: u64,
    /// Pieces whose target ran out of room while being appended (the plan's bound fell
    /// short): the rest went to a new DTable.
    #[serde(default)]
    pub spills: u64,
    /// Aggregation writes skipped because the absorbing DTable had no room for them.
    #[serde(default)]
    pub aggregation_skips: u64,
    /// Jobs (compactions and divisions) that started while another job of the same keyspace
    /// ran, on disjoint key ranges of their levels.
    #[serde(default)]
    pub concurrent_jobs: u64,
    /// Of those, jobs holding a range of a level another running job also holds a range of
    /// (disjoint ones): two jobs into the same level, or one appending to a level while the
    /// other compacts or divides elsewhere in it.
    #[serde(default)]
    pub shared_level_jobs: u64,
    /// Victim DTables of levels ≥ 1 left as an empty DTable holding the aggregated metadata
    /// (the band reset: the range and the level's table count stay).
    #[serde(default)]
    pub resets: u64,
    /// Compactions of a DTable taken down because the arrival due next would have carried
    /// it past the size limit (made room instead of rewriting it with the arrival).
    #[serde(default)]
    pub room_compactions: u64,
    /// Bytes written by rewrites of full targets with their arrival (`full_rewrites`;
    /// counted as the `gc` cause).
    #[serde(default)]
    pub rewrite_bytes: u64,
    /// Bytes written by equal divisions (`divisions`; counted as the `gc` cause).
    #[serde(default)]
    pub division_bytes: u64,
    /// Aggregated copies the victims of light-weight compactions carried.
    #[serde(default)]
    pub copies_carried: u64,
    /// Of those, copies naming a table no longer in the next level when the compaction ran
    /// (compacted down, divided or rewritten since the copy was made): never usable.
    #[serde(default)]
    pub copies_gone: u64,
    /// Bytes of next-level tails read from their files by light-weight compactions (stale
    /// copies repaired and tables no copy covered): what the aggregated copies did not save.
    #[serde(default)]
    pub tail_read_bytes: u64,
    /// Of `full_rewrites`, groups of the deepest level rewritten with an arrival that was
    /// larger than what they held and than two tables a compaction makes: cut now, while
    /// small, instead of appended to and rewritten when full.
    #[serde(default)]
    pub early_rewrites: u64,
    /// Live bytes the rewritten groups held before their arrival (of `rewrite_bytes`, the
    /// rest is the arrival's own first write there).
    #[serde(default)]
    pub rewrite_held_bytes: u64,
}

/// What one open table file pins outside the caches: counted in [`Stats::open_table_files`]
/// and [`Stats::table_reader_bytes`] while it lives.
#[derive(Debug)]
pub(crate) struct Pinned {
    stats: Arc<IoStats>,
    bytes: AtomicU64,
    /// Whether it counts an open file too.
    file: bool,
}

impl Pinned {
    /// One open file holding `bytes` of heap.
    pub(crate) fn new(stats: Arc<IoStats>, bytes: usize) -> Pinned {
        stats.open_table_files.fetch_add(1, Relaxed);
        Self::bytes(stats, bytes, true)
    }
    /// `bytes` of heap a table keeps whether its file is open or not (the `trie` layout's
    /// in-memory filters).
    pub(crate) fn heap(stats: Arc<IoStats>, bytes: usize) -> Pinned {
        Self::bytes(stats, bytes, false)
    }
    fn bytes(stats: Arc<IoStats>, bytes: usize, file: bool) -> Pinned {
        stats.table_reader_bytes.fetch_add(bytes as u64, Relaxed);
        Pinned {
            stats,
            bytes: AtomicU64::new(bytes as u64),
            file,
        }
    }
    /// `bytes` more held by the same file.
    pub(crate) fn add(&self, bytes: usize) {
        self.bytes.fetch_add(bytes as u64, Relaxed);
        self.stats
            .table_reader_bytes
            .fetch_add(bytes as u64, Relaxed);
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        if self.file {
            self.stats.open_table_files.fetch_sub(1, Relaxed);
        }
        self.stats
            .table_reader_bytes
            .fetch_sub(self.bytes.load(Relaxed), Relaxed);
    }
}

fn cause_index(c: WriteCause) -> usize {
    match c {
        WriteCause::Wal => 0,
        WriteCause::Flush => 1,
        WriteCause::Compaction => 2,
        WriteCause::Metadata => 3,
        WriteCause::Gc => 4,
    }
}

impl IoStats {
    pub(crate) fn count_write(&self, cause: WriteCause, n: u64) {
        if let Some(c) = self.written.get(cause_index(cause)) {
            c.fetch_add(n, Relaxed);
        }
    }
    /// A cached index block or filter found in the block cache.
    pub(crate) fn index_filter_hit(&self) {
        self.index_filter_hits.fetch_add(1, Relaxed);
    }
    /// A cached index block or filter read again after an eviction.
    pub(crate) fn index_filter_miss(&self) {
        self.index_filter_misses.fetch_add(1, Relaxed);
    }
    pub(crate) fn count_mapped(&self, n: u64) {
        self.mapped.fetch_add(n, Relaxed);
    }
    pub(crate) fn count_read(&self, kind: ReadKind, n: u64) {
        match kind {
            ReadKind::Data => self.data_reads.fetch_add(1, Relaxed),
            ReadKind::Metadata => self.meta_reads.fetch_add(1, Relaxed),
            ReadKind::Compaction => self.compaction_reads.fetch_add(1, Relaxed),
        };
        self.bytes_read.fetch_add(n, Relaxed);
    }
    pub(crate) fn written(&self, cause: WriteCause) -> u64 {
        self.written
            .get(cause_index(cause))
            .map_or(0, |c| c.load(Relaxed))
    }

    /// A consistent-enough copy of the counters (each counter read once).
    pub(crate) fn snapshot(&self) -> Stats {
        let bytes_written = BytesWritten {
            wal: self.written(WriteCause::Wal),
            flush: self.written(WriteCause::Flush),
            compaction: self.written(WriteCause::Compaction),
            metadata: self.written(WriteCause::Metadata),
            gc: self.written(WriteCause::Gc),
        };
        let user_bytes = self.user_bytes.load(Relaxed);
        let total = bytes_written.total();
        let ratio = |n: u64| {
            if user_bytes == 0 {
                0.0
            } else {
                n as f64 / user_bytes as f64
            }
        };
        let gets = self.gets.load(Relaxed);
        let data_block_reads = self.data_reads.load(Relaxed);
        let metadata_block_reads = self.meta_reads.load(Relaxed);
        let per_get = |n: u64| {
            if gets == 0 {
                0.0
            } else {
                n as f64 / gets as f64
            }
        };
        Stats {
            user_bytes,
            write_amplification: ratio(total),
            write_amplification_without_wal: ratio(total - bytes_written.wal),
            bytes_written,
            bytes_read: self.bytes_read.load(Relaxed),
            data_block_reads,
            metadata_block_reads,
            compaction_block_reads: self.compaction_reads.load(Relaxed),
            cache_hits: self.cache_hits.load(Relaxed),
            cache_misses: self.cache_misses.load(Relaxed),
            index_filter_cache_hits: self.index_filter_hits.load(Relaxed),
            index_filter_cache_misses: self.index_filter_misses.load(Relaxed),
            block_cache_usage_bytes: 0,
            gets,
            data_block_reads_per_get: per_get(data_block_reads),
            metadata_block_reads_per_get: per_get(metadata_block_reads),
            stall_seconds: self.stall_micros.load(Relaxed) as f64 / 1e6,
            memtable_stall_seconds: self.memtable_stall_micros.load(Relaxed) as f64 / 1e6,
            slowdown_seconds: self.slowdown_micros.load(Relaxed) as f64 / 1e6,
            compactions: self.compactions.load(Relaxed),
            flushes: self.flushes.load(Relaxed),
            flush_seconds: self.flush_micros.load(Relaxed) as f64 / 1e6,
            max_flush_seconds: self.max_flush_micros.load(Relaxed) as f64 / 1e6,
            compaction_seconds: self.compaction_micros.load(Relaxed) as f64 / 1e6,
            trivial_moves: self.trivial_moves.load(Relaxed),
            subcompactions: self.subcompactions.load(Relaxed),
            seek_compactions: self.seek_compactions.load(Relaxed),
            seek_compaction_bytes: self.seek_compaction_bytes.load(Relaxed),
            flushes_in_compactions: self.flushes_in_compactions.load(Relaxed),
            bytes_mapped: self.mapped.load(Relaxed),
            open_table_files: self.open_table_files.load(Relaxed),
            table_reader_bytes: self.table_reader_bytes.load(Relaxed),
            dead_bytes: 0,
            device: None,
            lightweight: LightweightStats {
                compactions: self.lwc.compactions.load(Relaxed),
                victim_bytes: self.lwc.victim_bytes.load(Relaxed),
                appended_segments: self.lwc.appended_segments.load(Relaxed),
                copies_used: self.lwc.copies_used.load(Relaxed),
                stale_repairs: self.lwc.stale_repairs.load(Relaxed),
                uncopied_reads: self.lwc.uncopied_reads.load(Relaxed),
                aggregation_writes: self.lwc.aggregation_writes.load(Relaxed),
                balance_shifts: self.lwc.balance_shifts.load(Relaxed),
                divisions: self.lwc.divisions.load(Relaxed),
                full_rewrites: self.lwc.full_rewrites.load(Relaxed),
                spills: self.lwc.spills.load(Relaxed),
                aggregation_skips: self.lwc.aggregation_skips.load(Relaxed),
                concurrent_jobs: self.lwc.concurrent_jobs.load(Relaxed),
                shared_level_jobs: self.lwc.shared_level_jobs.load(Relaxed),
                resets: self.lwc.resets.load(Relaxed),
                room_compactions: self.lwc.room_compactions.load(Relaxed),
                rewrite_bytes: self.lwc.rewrite_bytes.load(Relaxed),
                division_bytes: self.lwc.division_bytes.load(Relaxed),
                copies_carried: self.lwc.copies_carried.load(Relaxed),
                copies_gone: self.lwc.copies_gone.load(Relaxed),
                tail_read_bytes: self.lwc.tail_read_bytes.load(Relaxed),
                early_rewrites: self.lwc.early_rewrites.load(Relaxed),
                rewrite_held_bytes: self.lwc.rewrite_held_bytes.load(Relaxed),
            },
            keyspaces: Vec::new(),
        }
    }
}

/// Bytes written, by cause.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct BytesWritten {
    /// Write-ahead log.
    pub wal: u64,
    /// Memtable flushes.
    pub flush: u64,
    /// Compactions.
    pub compaction: u64,
    /// Manifest, CURRENT and separately written metadata.
    pub metadata: u64,
    /// Garbage collection.
    pub gc: u64,
}

impl BytesWritten {
    /// Sum over all causes.
    pub fn total(&self) -> u64 {
        self.wal + self.flush + self.compaction + self.metadata + self.gc
    }
}

/// One live file of a keyspace and where its layout keeps it (`Keyspace::tables`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct TableInfo {
    /// File name in the database directory (`000123.sst`; `.ht` HTables and `.bc`
    /// BloomClusters of `trie`).
    pub file: String,
    /// Level (for `trie`, the depth of the container).
    pub level: u32,
    /// Where in the level, in the layout's words: `sentinel` or `guard` (fragmented levels
    /// ≥ 1), `container <id>` or `container <id>, BloomCluster` (trie), empty otherwise.
    pub place: String,
    /// The guard's key, for a table in a fragmented guard.
    pub guard: Option<Vec<u8>>,
    /// File size in bytes.
    pub size: u64,
    /// Entries (versions and tombstones) in it.
    pub entries: u64,
    /// Smallest user key (empty for a BloomCluster, which holds no entries).
    pub smallest_key: Vec<u8>,
    /// Largest user key.
    pub largest_key: Vec<u8>,
    /// Smallest sequence number inside.
    pub min_seq: u64,
    /// Largest sequence number of the writes inside (for `trie`, the order the manifest
    /// keeps its tables in, which is at least that).
    pub max_seq: u64,
    /// Bytes of an appendable table that its current metadata no longer references
    /// (superseded metadata, an unfinished switch's bytes), reclaimed when it is next
    /// rewritten; 0 for other tables. Counted in `size`.
    #[serde(default)]
    pub dead_bytes: u64,
}

/// One level (or sub-level group) of a keyspace's layout.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct LevelStats {
    /// Level number (0 = newest).
    pub level: u32,
    /// Number of tables in the level.
    pub tables: u64,
    /// Bytes of those tables.
    pub bytes: u64,
    /// Layout-specific detail (guards, containers, sub-levels), free text.
    pub detail: String,
    /// Heap bytes of the level's own in-memory filter, when the layout keeps one per level
    /// rather than per table (`semisorted`'s multi-level cuckoo filter); filters tables hold
    /// are in [`Stats::table_reader_bytes`]. 0 otherwise.
    #[serde(default)]
    pub filter_bytes: u64,
    /// What the level pins in memory, by kind, measured from the structures' heap bytes
    /// (`semisorted`; `None` for layouts that do not break it down).
    #[serde(default)]
    pub memory: Option<LevelMemory>,
}

/// The heap a `semisorted` level pins outside the caches, by kind, each measured from the
/// allocations of the structures its live tables' open readers and its filter hold (never a
/// formula). `reader_bytes` is what [`Stats::table_reader_bytes`] counts for these tables
/// (so that total minus the levels' `reader_bytes` is held by readers of tables no version
/// of this keyspace lists now, or by other keyspaces); the filter is `filter_*`, which
/// [`LevelStats::filter_bytes`] sums.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct LevelMemory {
    /// Entries of the level's tables.
    pub entries: u64,
    /// Of the level's tables, those with an open reader.
    pub open_readers: u64,
    /// Of those, readers holding their index pinned.
    pub pinned_indexes: u64,
    /// Entries of the tables whose index is pinned.
    pub pinned_index_entries: u64,
    /// Heap the open readers were counted with in `Stats::table_reader_bytes`: their pinned
    /// indexes and the readers themselves.
    pub reader_bytes: u64,
    /// Of `reader_bytes`: the pinned indexes (all their levels).
    pub index_bytes: u64,
    /// Of `index_bytes`: level 1, the entropy-coded trie's codes and its bucket directory.
    pub index_level1_bytes: u64,
    /// Of `index_level1_bytes`: the bucket directory built at load (not in the file).
    pub index_dir_bytes: u64,
    /// Of `index_bytes`: level 2 (group ends and continuations with rank/select support).
    pub index_level2_bytes: u64,
    /// Of `index_bytes`: level 3 (separators and their starts).
    pub index_level3_bytes: u64,
    /// The filter's primary cuckoo table (its bit array).
    pub filter_primary_bytes: u64,
    /// The filter's secondary table: its hash table's allocation and its key arena.
    pub filter_secondary_bytes: u64,
    /// Slots of the primary table.
    pub filter_slots: u64,
    /// Entries in the primary table.
    pub filter_entries: u64,
    /// Keys in the secondary table.
    pub filter_secondary_keys: u64,
    /// Segments of the primary table.
    pub filter_segments: u32,
    /// Bits of a slot's tag (the stored part of a fingerprint).
    pub filter_tag_bits: u32,
    /// Bits of a slot's sub-level id.
    pub filter_id_bits: u32,
}

impl LevelMemory {
    /// Everything the level pins: its readers (indexes included) and its filter.
    pub fn total(&self) -> u64 {
        self.reader_bytes + self.filter_primary_bytes + self.filter_secondary_bytes
    }
}

/// Block reads of point lookups at one level of a keyspace (layouts that count them).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct LevelReads {
    /// Level number (0 = newest; for `trie`, the trie depth).
    pub level: u32,
    /// Data blocks read at this level by point lookups.
    pub data_block_reads: u64,
    /// Metadata blocks (filters, BloomCluster blocks, table footers) read at this level by
    /// point lookups.
    pub metadata_block_reads: u64,
    /// `data_block_reads / gets` (all gets of the database since open).
    #[serde(default)]
    pub data_block_reads_per_get: f64,
    /// `metadata_block_reads / gets`.
    #[serde(default)]
    pub metadata_block_reads_per_get: f64,
}

/// What a keyspace's flushes and compactions put into one level since the database was opened
/// (RocksDB's per-level compaction statistics). Counted from the tables each installed edit
/// adds and removes, so it is exact: a table's bytes are the bytes its writer wrote.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct LevelWrites {
    /// Level number (0 = newest; for `trie`, the trie depth).
    pub level: u32,
    /// Bytes of the tables memtable flushes wrote into this level.
    pub flush_bytes: u64,
    /// Bytes of the tables compactions (and the trie's garbage collection) wrote into this
    /// level.
    pub compaction_bytes: u64,
    /// Bytes of the tables moved into this level without being rewritten.
    pub moved_bytes: u64,
    /// The part of `flush_bytes` and `compaction_bytes` appended to appendable tables that
    /// stayed in place (append-then-switch, docs/format.md, "Appendable tables"): written
    /// bytes, never moves.
    #[serde(default)]
    pub appended_bytes: u64,
    /// Bytes of the tables that the jobs writing into this level merged away (what they read;
    /// a job is counted at the deepest level it wrote to, and a job whose output is empty is not
    /// counted).
    pub input_bytes: u64,
    /// Tables written into this level (flushes and compactions; moves and appends to a table
    /// that stays not counted).
    pub tables_written: u64,
    /// `(flush_bytes + compaction_bytes) / user_bytes` of the whole database: this level's
    /// share of the write amplification without WAL.
    #[serde(default)]
    pub bytes_per_user_byte: f64,
}

/// Per-keyspace part of [`Stats`].
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct KeyspaceStats {
    /// Keyspace name.
    pub name: String,
    /// Layout name.
    pub layout: String,
    /// Levels of the layout.
    pub levels: Vec<LevelStats>,
    /// Bytes in the active and immutable memtables.
    pub memtable_bytes: u64,
    /// Block reads of point lookups per level (empty for layouts that do not count them).
    #[serde(default)]
    pub level_reads: Vec<LevelReads>,
    /// Bytes flushed, compacted and moved into each level since open (levels never written
    /// are left out).
    #[serde(default)]
    pub level_writes: Vec<LevelWrites>,
    /// Dead bytes of the keyspace's live appendable tables ([`TableInfo::dead_bytes`]).
    #[serde(default)]
    pub dead_bytes: u64,
}

/// Statistics of a database since it was opened. Serializable with serde.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Stats {
    /// Σ key+value length of puts + key length of deletes.
    pub user_bytes: u64,
    /// Bytes written by cause.
    pub bytes_written: BytesWritten,
    /// All bytes written / user bytes.
    pub write_amplification: f64,
    /// (All bytes written − WAL bytes) / user bytes.
    pub write_amplification_without_wal: f64,
    /// Bytes read from files.
    pub bytes_read: u64,
    /// Data blocks read from files (cache misses).
    pub data_block_reads: u64,
    /// Metadata blocks read from files (index, filter, footer, manifest).
    pub metadata_block_reads: u64,
    /// Blocks read by compactions and flushes.
    pub compaction_block_reads: u64,
    /// Block cache hits of lookups and scans (a compaction's cache accesses are not counted,
    /// like its block reads).
    pub cache_hits: u64,
    /// Block cache misses of lookups and scans (each is a data block read).
    pub cache_misses: u64,
    /// With `Options::cache_index_and_filter_blocks`: sorted tables' index blocks and Bloom
    /// filters found in the block cache (every use: lookups, scans and compactions). 0 when
    /// they are pinned.
    #[serde(default)]
    pub index_filter_cache_hits: u64,
    /// With `Options::cache_index_and_filter_blocks`: index blocks and filters the cache had
    /// evicted, read again from their files (each is also a metadata block read).
    #[serde(default)]
    pub index_filter_cache_misses: u64,
    /// Bytes the block cache holds (data blocks, and index blocks and filters when cached).
    #[serde(default)]
    pub block_cache_usage_bytes: u64,
    /// Point lookups served.
    pub gets: u64,
    /// `data_block_reads / gets` (includes reads by scans and compactions, so measure a read
    /// phase on its own to get per-lookup costs).
    pub data_block_reads_per_get: f64,
    /// `metadata_block_reads / gets`.
    pub metadata_block_reads_per_get: f64,
    /// Seconds writers waited because flushes or compactions fell behind.
    pub stall_seconds: f64,
    /// The part of `stall_seconds` spent waiting for a flush (`max_immutable_memtables`
    /// memtables were waiting); the rest waited for the layout's stop trigger.
    pub memtable_stall_seconds: f64,
    /// Bytes of `bytes_written` copied into memory-mapped files (the WAL, `fs/mmap_log.rs`)
    /// instead of passed to `write(2)`: the process's `wchar` does not see them.
    pub bytes_mapped: u64,
    /// Seconds writers were delayed (a layout's slowdown trigger, or immutable memtables
    /// waiting for a flush; `Options` docs, "Delayed writes").
    pub slowdown_seconds: f64,
    /// Compactions run.
    pub compactions: u64,
    /// Memtable flushes run.
    pub flushes: u64,
    /// Wall-clock seconds spent flushing memtables: writing the tables and installing the
    /// edit (manifest record and sync), summed over flushes (RocksDB's flush time).
    #[serde(default)]
    pub flush_seconds: f64,
    /// The longest single flush, in seconds, since the database was opened: the least a
    /// writer waits when it stalls on a full set of immutable memtables.
    #[serde(default)]
    pub max_flush_seconds: f64,
    /// Wall-clock seconds compaction jobs ran (merging, writing and installing), summed over
    /// jobs, without the flushes they ran at their flush points (those are in
    /// `flush_seconds`). With several background threads it can exceed the elapsed time.
    #[serde(default)]
    pub compaction_seconds: f64,
    /// Compactions that moved a table without rewriting it.
    pub trivial_moves: u64,
    /// Parts beyond the first that compactions were split into by key and merged in
    /// parallel (`LeveledOptions::max_subcompactions`): a compaction of three parts adds 2.
    #[serde(default)]
    pub subcompactions: u64,
    /// Compactions a table's used-up seek allowance started (`LeveledOptions::seek_compaction`),
    /// trivial moves among them; also counted in `compactions` (or `trivial_moves`).
    #[serde(default)]
    pub seek_compactions: u64,
    /// Table bytes those compactions wrote (also in the `Compaction` cause of the bytes
    /// written).
    #[serde(default)]
    pub seek_compaction_bytes: u64,
    /// Flushes run by a compaction's thread between its output tables, because every
    /// background thread was busy (`JobCtx::flush_point`); also counted in `flushes`.
    pub flushes_in_compactions: u64,
    /// Table files held open for reading (sorted tables, HTables, BloomClusters): each holds a
    /// file descriptor and, with `Options::mmap_reads`, a memory map until it is deleted or
    /// the database closes. No option bounds it: every table a read or compaction has touched
    /// stays open (docs/architecture.md, "Memory").
    #[serde(default)]
    pub open_table_files: u64,
    /// Heap bytes the open table files pin outside the block cache and the BloomCluster cache:
    /// sorted tables' decoded index blocks and Bloom filters (no option bounds them), HTables'
    /// migration records and overflow indexes (none either) and the per-bucket filters the
    /// `trie` keeps in memory (`TrieOptions::filter_memory_bytes`, per keyspace).
    #[serde(default)]
    pub table_reader_bytes: u64,
    /// Dead bytes of every live appendable table: bytes on disk no version's metadata
    /// references until the table is rewritten (the sum of [`KeyspaceStats::dead_bytes`]).
    #[serde(default)]
    pub dead_bytes: u64,
    /// The emulated device's counters when the database runs on the band emulator
    /// (`Options::device`, docs/smr.md): host and device bytes, AWA. They count from the
    /// emulator's creation, not from this open. `None` on ordinary files.
    #[serde(default)]
    pub device: Option<crate::fs::band::DeviceStats>,
    /// What the `lightweight` layout's jobs did.
    #[serde(default)]
    pub lightweight: LightweightStats,
    /// Per-keyspace level shapes.
    pub keyspaces: Vec<KeyspaceStats>,
}
