//! Options of a database ([`Options`]) and of a keyspace ([`KeyspaceOptions`]), and the
//! [`Layout`] a keyspace chooses.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::fs::FileSystem;

/// Largest key accepted (bytes).
pub const MAX_KEY_BYTES: usize = 64 * 1024;
/// Largest value accepted (bytes).
pub const MAX_VALUE_BYTES: usize = 64 * 1024 * 1024;
/// Largest encoded write batch accepted (bytes).
pub const MAX_BATCH_BYTES: usize = 512 * 1024 * 1024;

/// What recovery does with a WAL record that fails its checksum in the middle of a log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WalRecovery {
    /// A torn tail (a bad record with nothing valid after it) is dropped; corruption in the
    /// middle of a log is an `Error::Corruption`.
    #[default]
    TolerateTornTail,
    /// Recover up to the first bad record and discard everything after it (RocksDB's
    /// point-in-time recovery).
    PointInTime,
}

/// Database-wide options.
///
/// # Delayed writes
///
/// When a keyspace's background work falls behind — its layout's backlog (level-0 tables,
/// sub-levels) reaches the slowdown trigger, or all `max_immutable_memtables` memtables wait
/// for a flush — writers are not stopped but held to
/// a rate, as RocksDB's delayed write rate does: 4/5 of the rate they reached just before,
/// lowered by 4/5 for each further step of backlog (each table, sub-level or eighth of the
/// memtable) and raised by 5/4 for each step it shrinks. Only the stop trigger, or a full
/// memtable with every immutable one still waiting, stops them. The time spent delayed is
/// `Stats::slowdown_seconds`, the time stopped the rest of `Stats::stall_seconds`.
#[derive(Clone)]
pub struct Options {
    /// Byte budget of the block cache (0 disables it). Default 32 MiB.
    pub block_cache_bytes: usize,
    /// Table files kept open at once, over all keyspaces; 0 (the default, like RocksDB's −1)
    /// keeps every table open. Each open sorted table (`leveled`, `fragmented`) holds a file
    /// descriptor, its index and its Bloom filter (≈ 1.65 bytes per key at 10 bits per
    /// key): a store of a billion keys holds ≈ 1.65 GB and thousands of descriptors open. An
    /// open `trie` HTable or BloomCluster holds a descriptor and its migration records and
    /// bucket index (≈ 0.4 bytes per key); the trie's in-memory filters stay while their table
    /// lives, under `TrieOptions::filter_memory_bytes`. With a bound, the least recently used
    /// files are closed and reopened when needed (reading their metadata again). The bound
    /// should cover the tables reads touch: a reopen costs tens of microseconds.
    pub max_open_files: usize,
    /// Keep sorted tables' (`leveled`, `fragmented`) index blocks and Bloom filters in the
    /// block cache, charged to `block_cache_bytes`, instead of pinning them while the table
    /// is open (RocksDB's `cache_index_and_filter_blocks`). Memory for them is then bounded
    /// by the cache budget instead of growing with the store (≈ 1.65 bytes per key pinned);
    /// a lookup pays two cache probes per table it tests, and an index or filter the cache
    /// evicted is read and checked again on its next use (counted in
    /// `Stats::index_filter_cache_misses`). They are loaded when a table is opened, so a
    /// damaged one fails there as when pinned. The `trie` layout has its own budgets
    /// (`TrieOptions::filter_memory_bytes`, `cluster_cache_bytes`) and ignores this. Needs a
    /// block cache: true with `block_cache_bytes` 0 is `InvalidArgument`. Default false.
    pub cache_index_and_filter_blocks: bool,
    /// Threads running flushes and compactions (flushes first). Default: number of cores.
    pub background_threads: usize,
    /// Extra threads that run only flushes (0..=16), so a full memtable is not stuck behind
    /// long compactions holding every background thread. Default 0: on a 2-core machine one
    /// such thread turned a 50M-key `trie` fill's 13 s of write stalls (longest put 3.5 s) into
    /// 0.3 s (longest 0.47 s), but filled 11 % slower (docs/architecture.md).
    pub flush_threads: usize,
    /// Whether a compaction flushes a waiting memtable itself, between its output tables, when
    /// every background thread is busy (`JobCtx::flush_point`). Default true: on a 50M-key
    /// `trie` fill it cut the longest put from 2.6–3.7 s to 0.49 s, but filled 6–13 % slower
    /// in two paired runs on 2 cores (docs/architecture.md).
    pub flush_in_compactions: bool,
    /// Read table blocks with O_DIRECT (cold reads on a machine whose page cache holds the data).
    pub direct_reads: bool,
    /// Read table files (sorted tables' data blocks, HTable buckets) through a memory map
    /// instead of `pread`: a block read from the page cache costs no system call and no copy
    /// (docs/architecture.md, "Memory-mapped reads": readrandom +30 %, seekrandom +25–35 % on
    /// the sorted layouts). Ignored with `direct_reads`. A table file truncated by another
    /// process while the database is open then raises SIGBUS on the lost pages instead of an
    /// I/O error. Default true.
    pub mmap_reads: bool,
    /// Manifest size at which it is rolled over to a fresh snapshot, once it is also twice
    /// the snapshot it started with (else a snapshot larger than this, from a store of many
    /// tables, would be rewritten after every flush and compaction) or holds
    /// `manifest::MAX_EDITS_PER_LARGE_MANIFEST` edits after it (so recovery replays a bounded
    /// number of edits). Default 4 MiB.
    pub max_manifest_bytes: u64,
    /// Immutable memtables per keyspace waiting for flush before writers stall (they are
    /// delayed before that: "Delayed writes" above). Default 2.
    pub max_immutable_memtables: usize,
    /// WAL recovery mode.
    pub wal_recovery: WalRecovery,
    /// Create the database if it does not exist. Default true. When false, opening a path
    /// that is missing, or a directory without a database (no `CURRENT`), is
    /// `Error::InvalidArgument`.
    pub create_if_missing: bool,
    /// Open without changing anything on disk (RocksDB's `OpenForReadOnly`), for inspection
    /// and for copies that must stay as they are. The WALs are replayed into memtables but
    /// neither cut nor synced, no new WAL or manifest is written, no file is removed and no
    /// flush or compaction runs. Writes, `flush`, `compact` and creating a keyspace return
    /// `Error::ReadOnly`. The directory lock is still taken, through a read-only handle, so a
    /// read-only open cannot run beside a writer, yet works on files the process may only read;
    /// without a `LOCK` file (a copy) it goes on without the lock and creates none. A path
    /// without a database is `Error::InvalidArgument` whatever `create_if_missing` says.
    /// Default false.
    pub read_only: bool,
    /// Options of existing keyspaces by name, used from the open on (RocksDB's column family
    /// descriptors): the flush of what recovery replayed and the compactions that start before
    /// `Db::keyspace` names a keyspace otherwise run with its layout's defaults. A layout other
    /// than the keyspace's is `Error::InvalidArgument` at open; names of no keyspace are
    /// ignored. `Db::keyspace` may still change them later. Default empty.
    pub keyspace_options: Vec<(String, KeyspaceOptions)>,
    /// Probe the last level in parallel with the upper levels on point lookups (layouts with a
    /// distinct last level). Default false: it pays only for cold reads (see docs).
    pub parallel_search: bool,
    /// The file layer (default: real files). [`Options::device`] sets it to the band emulator.
    pub fs: Option<Arc<dyn FileSystem>>,
    /// Test-only: the order in which background compactions run their phases
    /// (`db::script`).
    #[cfg(test)]
    pub(crate) job_script: Option<Arc<crate::db::script::JobScript>>,
}

/// The storage device a database runs on ([`Options::device`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Device {
    /// Ordinary files (the default).
    Files,
    /// The emulated host-managed shingled device: one table file per band of `band_mb` MiB
    /// (docs/smr.md).
    SmrHost {
        /// Band size in MiB (the paper measures 20–60; default 40).
        band_mb: u64,
    },
    /// The emulated drive-managed shingled device: files placed anywhere, writes before valid
    /// data of a band of `band_mb` MiB pay a read-modify-write (docs/smr.md).
    SmrDrive {
        /// Band size in MiB.
        band_mb: u64,
    },
}

impl Options {
    /// Runs the database on `device`: for a shingled device, sets [`Options::fs`] to a new
    /// band emulator ([`crate::fs::band::BandFs`]) over real files, its band bytes in the file
    /// `SMR-DEVICE` of the database directory and its placement in memory: clones of these
    /// options share the emulator, so the database can be closed and reopened with them in
    /// this process (not by another). `Stats::device` reports its counters. A band size of
    /// 0 or over 1024 MiB is `InvalidArgument`.
    pub fn device(mut self, device: Device) -> Result<Options> {
        use crate::fs::band::{BandConfig, BandFs, BandMode};
        let (mode, band_mb) = match device {
            Device::Files => {
                self.fs = None;
                return Ok(self);
            }
            Device::SmrHost { band_mb } => (BandMode::HostManaged, band_mb),
            Device::SmrDrive { band_mb } => (BandMode::DriveManaged, band_mb),
        };
        if !(1..=1024).contains(&band_mb) {
            return Err(Error::InvalidArgument(format!(
                "SMR band size must be 1..=1024 MiB, got {band_mb}"
            )));
        }
        let inner: Arc<dyn FileSystem> = Arc::new(crate::fs::std_fs::StdFs);
        let fs = BandFs::new(inner, BandConfig::new(mode, band_mb << 20))
            .map_err(|e| Error::InvalidArgument(e.to_string()))?;
        self.fs = Some(Arc::new(fs));
        Ok(self)
    }
}

impl fmt::Debug for Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Options")
            .field("block_cache_bytes", &self.block_cache_bytes)
            .field("max_open_files", &self.max_open_files)
            .field(
                "cache_index_and_filter_blocks",
                &self.cache_index_and_filter_blocks,
            )
            .field("background_threads", &self.background_threads)
            .field("flush_threads", &self.flush_threads)
            .field("flush_in_compactions", &self.flush_in_compactions)
            .field("direct_reads", &self.direct_reads)
            .field("mmap_reads", &self.mmap_reads)
            .field("max_manifest_bytes", &self.max_manifest_bytes)
            .field("max_immutable_memtables", &self.max_immutable_memtables)
            .field("wal_recovery", &self.wal_recovery)
            .field("read_only", &self.read_only)
            .field("keyspace_options", &self.keyspace_options)
            .field("parallel_search", &self.parallel_search)
            .finish()
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            block_cache_bytes: 32 << 20,
            max_open_files: 0,
            cache_index_and_filter_blocks: false,
            background_threads: std::thread::available_parallelism().map_or(2, |n| n.get()),
            flush_threads: 0,
            flush_in_compactions: true,
            direct_reads: false,
            mmap_reads: true,
            max_manifest_bytes: 4 << 20,
            max_immutable_memtables: 2,
            wal_recovery: WalRecovery::default(),
            create_if_missing: true,
            read_only: false,
            keyspace_options: Vec::new(),
            parallel_search: false,
            fs: None,
            #[cfg(test)]
            job_script: None,
        }
    }
}

impl Options {
    pub(crate) fn validate(&self) -> Result<()> {
        if self.background_threads == 0 || self.background_threads > 256 {
            return Err(Error::InvalidArgument(format!(
                "background_threads must be 1..=256, got {}",
                self.background_threads
            )));
        }
        if self.flush_threads > 16 {
            return Err(Error::InvalidArgument(format!(
                "flush_threads must be 0..=16, got {}",
                self.flush_threads
            )));
        }
        if self.max_immutable_memtables == 0 {
            return Err(Error::InvalidArgument(
                "max_immutable_memtables must be at least 1".into(),
            ));
        }
        if self.cache_index_and_filter_blocks && self.block_cache_bytes == 0 {
            return Err(Error::InvalidArgument(
                "cache_index_and_filter_blocks needs a block cache, but block_cache_bytes is 0"
                    .into(),
            ));
        }
        for (_, o) in &self.keyspace_options {
            o.validate()?;
        }
        if self.max_manifest_bytes < 4096 {
            return Err(Error::InvalidArgument(
                "max_manifest_bytes must be at least 4096".into(),
            ));
        }
        Ok(())
    }
}

/// The layout byte of [`Layout::TestSegments`] (docs/format.md, "Appendable tables"): read
/// only by test builds, an unknown layout to every other.
#[cfg(test)]
const TEST_SEGMENTS_LAYOUT_BYTE: u8 = 0xff;

/// The design a keyspace stores its data with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Layout {
    /// LevelDB/RocksDB-style leveled LSM (the baseline).
    Leveled,
    /// PebblesDB's fragmented LSM with guards.
    Fragmented,
    /// LSM-trie: hash-addressed containers of HTables.
    Trie,
    /// SlimDB's semi-sorted layout: keys grouped by a `prefix_len`-byte prefix, stepped merges,
    /// multi-level cuckoo filters, the compact three-level index (docs/architecture-semisorted.md).
    SemiSorted {
        /// Bytes of the key prefix naming a key's group (keys are ordered by its hash, then by
        /// the suffix's hash); shorter keys are refused.
        prefix_len: usize,
    },
    /// LWC-tree's light-weight compaction: DTables grown by appended segments
    /// (docs/architecture-lightweight.md).
    Lightweight,
    /// The appendable segment tables of the engine's own unit tests (`layout::segments`):
    /// exercises append-then-switch through real manifest edits. Only in test builds; its
    /// layout byte is refused by every other build.
    #[cfg(test)]
    #[doc(hidden)]
    TestSegments,
}

/// How a layout orders keys, which decides the scans it serves and its memtable's index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Order {
    /// Keys in byte order: `range()` and `prefix()` of any length, forward and reverse.
    Total,
    /// Keys grouped by their first `n` bytes (the prefix): `prefix(p)` with `p.len() == n`
    /// returns the group's keys in the layout's own order (not byte order); `range()` and other
    /// prefix lengths are not served.
    PrefixGroups(usize),
    /// Keys placed by a hash of the whole key: point lookups only, no scans.
    Hash,
}

impl Order {
    /// Whether `range()` is served.
    pub fn serves_range(&self) -> bool {
        matches!(self, Order::Total)
    }

    /// Whether `prefix(p)` is served for a prefix of `len` bytes.
    pub fn serves_prefix(&self, len: usize) -> bool {
        match self {
            Order::Total => true,
            Order::PrefixGroups(n) => len == *n,
            Order::Hash => false,
        }
    }

    /// `Unsupported` naming why a range scan of keyspace `ks` (of layout `layout`) is refused.
    pub(crate) fn check_range(&self, ks: &str, layout: &Layout) -> Result<()> {
        match self {
            Order::Total => Ok(()),
            Order::PrefixGroups(n) => Err(Error::Unsupported(format!(
                "range scan of keyspace {ks:?}: layout `{layout}` keeps keys sorted only within \
                 groups of a {n}-byte prefix (use prefix() with a {n}-byte prefix)"
            ))),
            Order::Hash => Err(Error::Unsupported(format!(
                "range scan of keyspace {ks:?}: layout `{layout}` places keys by hash and has no \
                 key order (point lookups only)"
            ))),
        }
    }

    /// `InvalidArgument` for a key the order cannot place: under `PrefixGroups(n)` a key
    /// shorter than its `n`-byte prefix.
    pub(crate) fn check_key(&self, ks: &str, layout: &Layout, key: &[u8]) -> Result<()> {
        match self {
            Order::PrefixGroups(n) if key.len() < *n => Err(Error::InvalidArgument(format!(
                "key of {} bytes in keyspace {ks:?}: layout `{layout}` needs keys of at least \
                 their {n}-byte prefix",
                key.len()
            ))),
            _ => Ok(()),
        }
    }

    /// `Unsupported` naming why a scan of `prefix` in keyspace `ks` is refused.
    pub(crate) fn check_prefix(&self, ks: &str, layout: &Layout, prefix: &[u8]) -> Result<()> {
        match self {
            Order::Total => Ok(()),
            Order::PrefixGroups(n) if prefix.len() == *n => Ok(()),
            Order::PrefixGroups(n) => Err(Error::Unsupported(format!(
                "prefix scan of keyspace {ks:?}: layout `{layout}` groups keys by their first {n} \
                 bytes, so it serves prefixes of exactly {n} bytes, not {}",
                prefix.len()
            ))),
            Order::Hash => Err(Error::Unsupported(format!(
                "prefix scan of keyspace {ks:?}: layout `{layout}` places keys by hash and has no \
                 key order (point lookups only)"
            ))),
        }
    }
}

impl Layout {
    /// How the layout orders keys: which scans it serves.
    pub fn order(&self) -> Order {
        match self {
            Layout::Leveled | Layout::Fragmented | Layout::Lightweight => Order::Total,
            #[cfg(test)]
            Layout::TestSegments => Order::Total,
            Layout::SemiSorted { prefix_len } => Order::PrefixGroups(*prefix_len),
            Layout::Trie => Order::Hash,
        }
    }

    /// The layout's name.
    pub fn name(&self) -> &'static str {
        match self {
            Layout::Leveled => "leveled",
            Layout::Fragmented => "fragmented",
            Layout::Trie => "trie",
            Layout::SemiSorted { .. } => "semisorted",
            Layout::Lightweight => "lightweight",
            #[cfg(test)]
            Layout::TestSegments => "test-segments",
        }
    }

    /// The layouts this build implements.
    pub fn implemented() -> Vec<Layout> {
        crate::layout::implemented()
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        match self {
            Layout::Leveled => vec![1],
            Layout::Fragmented => vec![2],
            Layout::Trie => vec![3],
            Layout::SemiSorted { prefix_len } => {
                let mut v = vec![4];
                crate::coding::put_varint(&mut v, *prefix_len as u64);
                v
            }
            Layout::Lightweight => vec![5],
            #[cfg(test)]
            Layout::TestSegments => vec![TEST_SEGMENTS_LAYOUT_BYTE],
        }
    }

    pub(crate) fn decode(b: &[u8]) -> Option<Layout> {
        let mut r = crate::coding::Reader::new(b);
        match r.u8()? {
            1 => Some(Layout::Leveled),
            2 => Some(Layout::Fragmented),
            3 => Some(Layout::Trie),
            4 => Some(Layout::SemiSorted {
                prefix_len: r.len()?,
            }),
            5 => Some(Layout::Lightweight),
            #[cfg(test)]
            TEST_SEGMENTS_LAYOUT_BYTE => Some(Layout::TestSegments),
            _ => None,
        }
    }
}

/// The name, with a `semisorted` layout's prefix length (`semisorted:8`): what
/// [`Layout::from_str`] parses back.
impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Layout::SemiSorted { prefix_len } => write!(f, "semisorted:{prefix_len}"),
            other => f.write_str(other.name()),
        }
    }
}

impl FromStr for Layout {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "leveled" => Ok(Layout::Leveled),
            "fragmented" => Ok(Layout::Fragmented),
            "trie" => Ok(Layout::Trie),
            "lightweight" => Ok(Layout::Lightweight),
            _ => {
                if let Some(n) = s.strip_prefix("semisorted") {
                    let n = n.trim_start_matches(':');
                    let prefix_len = if n.is_empty() {
                        4
                    } else {
                        n.parse().map_err(|_| {
                            Error::InvalidArgument(format!("bad prefix length in {s:?}"))
                        })?
                    };
                    return Ok(Layout::SemiSorted { prefix_len });
                }
                Err(Error::InvalidArgument(format!(
                    "unknown layout {s:?} (expected leveled, fragmented, trie, semisorted[:N], lightweight)"
                )))
            }
        }
    }
}

/// Options of the `leveled` layout (LevelDB-like defaults).
#[derive(Debug, Clone)]
pub struct LeveledOptions {
    /// L0 tables that trigger an L0→L1 compaction. Default 4.
    pub l0_compaction_trigger: usize,
    /// L0 tables at which writes are delayed (`Options` docs, "Delayed writes"); each table
    /// past it lowers the delayed rate. Default 8.
    pub l0_slowdown_trigger: usize,
    /// L0 tables at which writes stop until compaction catches up. Default 20 (RocksDB's
    /// margin of slowing before stopping; LevelDB's 12 left too few steps to slow down in).
    pub l0_stop_trigger: usize,
    /// Target bytes of L1. Default 10 MiB.
    pub level_base_bytes: u64,
    /// Size ratio between adjacent levels. Default 10.
    pub level_size_ratio: u64,
    /// Target size of a compaction output table. Default 2 MiB.
    pub target_table_bytes: u64,
    /// Number of levels. Default 7.
    pub max_levels: usize,
    /// Most parts a compaction out of L0 is split into, by key, merged in parallel (RocksDB's
    /// `max_subcompactions`): each part on a thread of its own within the job, the outputs
    /// installed together by the job's one edit. An L0→L1 merge takes every L0 table and,
    /// with random keys, all of L1; run on one thread it let L0 grow to the slowdown trigger
    /// while it ran. Parts are cut at data-block boundaries of the inputs for about equal
    /// input bytes, each worth at least four output tables (`target_table_bytes`), so small
    /// merges stay whole. 1 disables the split. 1..=64. Default 2, the cores of the machine
    /// it was measured on: the L0 merge ran 1.3-1.5× faster where a core was free, at no more
    /// CPU per byte (docs/benchmarks.md, "leveled sub-compactions").
    pub max_subcompactions: usize,
    /// LevelDB's seek compaction: a point lookup that probes two or more tables charges a
    /// "seek" to the first one it probed, each table may take `max(100, size / 16 KiB)` of
    /// them, and a table that has used them up is compacted into the next level when no
    /// size-triggered compaction is due (docs/architecture.md, "Seek compaction"). Reads then
    /// flatten the tree they read from, at the cost of rewriting data during a read-only
    /// workload. Default true, like LevelDB (which has no switch).
    pub seek_compaction: bool,
}

impl Default for LeveledOptions {
    fn default() -> Self {
        LeveledOptions {
            l0_compaction_trigger: 4,
            l0_slowdown_trigger: 8,
            l0_stop_trigger: 20,
            level_base_bytes: 10 << 20,
            level_size_ratio: 10,
            target_table_bytes: 2 << 20,
            max_levels: 7,
            max_subcompactions: 2,
            seek_compaction: true,
        }
    }
}

/// Options of the `fragmented` layout (PebblesDB's fragmented LSM with guards; rules and
/// measured defaults in docs/architecture-fragmented.md).
#[derive(Debug, Clone)]
pub struct FragmentedOptions {
    /// Tables a guard may hold before it is compacted into the next level (the paper's
    /// `max_sstables_per_guard`; 1 keeps one table per guard, like leveled). Default 3.
    pub max_sstables_per_guard: usize,
    /// L0 tables that trigger the compaction of L0 into the level-1 guards. Default 4.
    pub l0_compaction_trigger: usize,
    /// L0 tables at which writes are delayed (`Options` docs, "Delayed writes"); each table
    /// past it lowers the delayed rate. Default 8.
    pub l0_slowdown_trigger: usize,
    /// L0 tables at which writes stop until compaction catches up. Default 20 (RocksDB's
    /// margin of slowing before stopping; LevelDB's 12 left too few steps to slow down in).
    pub l0_stop_trigger: usize,
    /// Number of levels including L0; the deepest is the last level, which rewrites. Default 7.
    pub max_levels: usize,
    /// Consecutive low hash bits set that make a key a level-1 guard; 0 scales them with the
    /// key count (see `expected_keys`). Default 0.
    pub top_level_bits: u32,
    /// Bits by which the guard condition relaxes at each deeper level. Default 2.
    pub bit_decrement: u32,
    /// Keys the store is expected to hold; 0 uses the observed count. Default 0.
    pub expected_keys: u64,
    /// Level-1 guards aimed at when the guard bits scale with the key count. Default 8.
    pub level1_guards: u64,
    /// Byte budget of level 1; a level over its budget pushes its largest guards down (a
    /// safety bound: guards normally move on their table count). 0 disables. Default 1 GiB.
    pub level_base_bytes: u64,
    /// Budget ratio between adjacent levels. Default 10.
    pub level_size_ratio: u64,
    /// Aggressive compaction: level i is compacted into level i+1 when their sizes are within
    /// `ratio` of level i+1's bytes of each other (|bytes(i) − bytes(i+1)| ≤ ratio ·
    /// bytes(i+1)), the paper's "within 25 %" (0 disables). Default 0.25.
    pub aggressive_ratio: f64,
    /// The second-to-last level rewrites a guard in place when merging it into the last level
    /// would rewrite more than this many times its bytes (the paper's 25×). Default 25.
    pub rewrite_factor: u64,
    /// Seeks landing on a guard of several tables that make it a compaction candidate, at
    /// least one per 16 KiB of the guard (0 disables seek-based compaction). Default 10.
    pub seek_compaction_threshold: u64,
    /// A guard holding less than 1/ratio of its level's average guard bytes is merged into
    /// its left neighbour at compaction (0 disables; empty guards are always removed). Default 16.
    pub guard_skew_ratio: u64,
    /// Position the last level's tables in parallel on seeks (pays only for cold reads).
    /// Default false.
    pub parallel_seeks: bool,
    /// Threads of the parallel-seek pool. Default 2.
    pub parallel_seek_threads: usize,
}

impl Default for FragmentedOptions {
    fn default() -> Self {
        FragmentedOptions {
            max_sstables_per_guard: 3,
            l0_compaction_trigger: 4,
            l0_slowdown_trigger: 8,
            l0_stop_trigger: 20,
            max_levels: 7,
            top_level_bits: 0,
            bit_decrement: 2,
            expected_keys: 0,
            level1_guards: 8,
            level_base_bytes: 1 << 30,
            level_size_ratio: 10,
            aggressive_ratio: 0.25,
            rewrite_factor: 25,
            seek_compaction_threshold: 10,
            guard_skew_ratio: 16,
            parallel_seeks: false,
            parallel_seek_threads: 2,
        }
    }
}

/// Options of the `lightweight` layout (LWC-tree; rules and measured defaults in
/// docs/architecture-lightweight.md).
#[derive(Debug, Clone)]
pub struct LightweightOptions {
    /// L0 DTables that trigger the light-weight compaction of L0 into level 1. Default 4.
    pub l0_compaction_trigger: usize,
    /// L0 DTables at which writes are delayed (`Options` docs, "Delayed writes"); each table
    /// past it lowers the delayed rate. Default 8.
    pub l0_slowdown_trigger: usize,
    /// L0 DTables at which writes stop until compaction catches up. Default 20.
    pub l0_stop_trigger: usize,
    /// Target bytes of level 1 (raised to the level-0 backlog with
    /// `level_base_follows_l0`); level i holds `level_size_ratio`^(i-1) times more (the
    /// paper's amplification factor AF). Default 10 MiB.
    pub level_base_bytes: u64,
    /// Whether level 1's target is at least the level-0 backlog, `l0_compaction_trigger` ×
    /// `write_buffer_bytes` (what one level-0 compaction appends to level 1: 256 MiB with the
    /// default 64 MiB buffers). Default true: at 4 KiB values and 2 GB, 6.14 bytes written
    /// per user byte without, 4.5 with (docs/benchmarks.md, "Issue 32: the victim's band
    /// reset and room before an arrival").
    pub level_base_follows_l0: bool,
    /// Size ratio between adjacent levels. Default 10.
    pub level_size_ratio: u64,
    /// Number of levels including L0; the deepest never compacts down. Default 7.
    pub max_levels: usize,
    /// Size limit of a DTable (the band size of the paper's SMR drives): a DTable past it is
    /// divided into `division_count` DTables of equal data. Default 40 MiB.
    pub dtable_max_bytes: u64,
    /// Number of DTables an equal division makes (the paper's n). Default 12.
    pub division_count: usize,
    /// A DTable that a compaction leaves holding more than this many times its level's mean
    /// live bytes hands the upper part of its key range to its next neighbour (workload
    /// balance; 0 disables). Default 2.0.
    pub balance_factor: f64,
    /// Whether light-weight compactions on disjoint key ranges of their levels may run at the
    /// same time (each claims its victims' and targets' ranges). Default false, one job at a
    /// time per keyspace: at 50M keys with 64 MiB buffers, concurrent jobs made more, smaller
    /// appends (each rewriting a DTable's metadata tail) and wrote 5.58× the user bytes at
    /// 675k puts/s against 4.53× at 790k (docs/benchmarks.md, "Issue 32: concurrent jobs at
    /// 50M").
    pub concurrent_jobs: bool,
}

impl Default for LightweightOptions {
    fn default() -> Self {
        LightweightOptions {
            l0_compaction_trigger: 4,
            l0_slowdown_trigger: 8,
            l0_stop_trigger: 20,
            level_base_bytes: 10 << 20,
            level_base_follows_l0: true,
            level_size_ratio: 10,
            max_levels: 7,
            dtable_max_bytes: 40 << 20,
            division_count: 12,
            balance_factor: 2.0,
            concurrent_jobs: false,
        }
    }
}

impl LightweightOptions {
    fn validate(&self) -> Result<()> {
        let bad = |m: &str| Err(Error::InvalidArgument(format!("lightweight: {m}")));
        if self.l0_compaction_trigger == 0
            || self.l0_slowdown_trigger < self.l0_compaction_trigger
            || self.l0_stop_trigger < self.l0_slowdown_trigger
        {
            return bad("need 0 < l0_compaction_trigger <= l0_slowdown_trigger <= l0_stop_trigger");
        }
        if self.level_size_ratio < 2 || self.max_levels < 2 || self.max_levels > 16 {
            return bad("need level_size_ratio >= 2 and 2 <= max_levels <= 16");
        }
        if self.level_base_bytes < 4096 || self.dtable_max_bytes < 4096 {
            return bad("level_base_bytes and dtable_max_bytes must be at least 4096");
        }
        if !(2..=64).contains(&self.division_count) {
            return bad("division_count must be 2..=64");
        }
        if !(self.balance_factor == 0.0
            || (self.balance_factor >= 1.0 && self.balance_factor.is_finite()))
        {
            return bad("balance_factor must be 0 (off) or a finite number >= 1");
        }
        Ok(())
    }
}

/// Options of one keyspace.
#[derive(Debug, Clone)]
pub struct KeyspaceOptions {
    /// The layout (persisted; reopening with another is an error).
    pub layout: Layout,
    /// Memtable budget before it is frozen and flushed. Default 64 MiB.
    pub write_buffer_bytes: usize,
    /// Bloom filter bits per key (0 = no filter). Default 10.
    pub bloom_bits_per_key: u32,
    /// Target data block size of sorted tables. Default 4096.
    pub block_size: usize,
    /// Options of the `leveled` layout.
    pub leveled: LeveledOptions,
    /// Options of the `fragmented` layout.
    pub fragmented: FragmentedOptions,
    /// Options of the `trie` layout.
    pub trie: TrieOptions,
    /// Options of the `semisorted` layout.
    pub semisorted: SemiSortedOptions,
    /// Options of the `lightweight` layout.
    pub lightweight: LightweightOptions,
    /// Drops values while compactions merge them (not persisted: set it each time the
    /// keyspace is opened). Default none. See [`CompactionFilter`](crate::CompactionFilter).
    pub compaction_filter: Option<std::sync::Arc<dyn crate::CompactionFilter>>,
}

impl KeyspaceOptions {
    /// Defaults for `layout`.
    pub fn new(layout: Layout) -> Self {
        KeyspaceOptions {
            layout,
            write_buffer_bytes: 64 << 20,
            bloom_bits_per_key: 10,
            block_size: 4096,
            leveled: LeveledOptions::default(),
            fragmented: FragmentedOptions::default(),
            trie: TrieOptions::default(),
            semisorted: SemiSortedOptions::default(),
            lightweight: LightweightOptions::default(),
            compaction_filter: None,
        }
    }

    pub(crate) fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidArgument(m));
        if self.write_buffer_bytes < 64 * 1024 {
            return bad(format!(
                "write_buffer_bytes must be at least 64 KiB, got {}",
                self.write_buffer_bytes
            ));
        }
        if self.bloom_bits_per_key > 64 {
            return bad(format!(
                "bloom_bits_per_key must be 0..=64, got {}",
                self.bloom_bits_per_key
            ));
        }
        if !(256..=1 << 20).contains(&self.block_size) {
            return bad(format!(
                "block_size must be 256..=1048576, got {}",
                self.block_size
            ));
        }
        // Only the chosen layout's own options are checked: the others are not used, and a
        // `trie` keyspace is never refused for a `leveled` setting.
        match self.layout {
            Layout::Leveled => self.leveled.validate(),
            Layout::Fragmented => self.fragmented.validate(),
            Layout::Trie => self.trie.validate(),
            Layout::SemiSorted { prefix_len } => self.semisorted.validate(prefix_len),
            Layout::Lightweight => self.lightweight.validate(),
            #[cfg(test)]
            Layout::TestSegments => Ok(()),
        }
    }
}

/// Options of the `semisorted` layout (SlimDB: stepped levels of sub-levels, fixed-size blocks
/// with the compact three-level index, one multi-level cuckoo filter per level; settings in
/// docs/architecture-semisorted.md). Data blocks are `KeyspaceOptions::block_size` bytes.
#[derive(Debug, Clone)]
pub struct SemiSortedOptions {
    /// Sub-levels a stepped level holds before they are merged into one new sub-level of the
    /// next level (the paper's r). Default 8.
    pub sub_levels: usize,
    /// Number of stepped levels; the last one merges its sub-levels in place. 2..=16. Default 6.
    pub max_levels: usize,
    /// Size at which a merge's output table is closed (at the next prefix group). Default
    /// 32 MiB (the paper's).
    pub target_table_bytes: u64,
    /// Sub-levels of a level at which writes are delayed; each sub-level past it lowers the
    /// delayed rate. Default 12.
    pub slowdown_sublevels: usize,
    /// Sub-levels of a level at which writes wait. Default 24. A level's filter has ids for
    /// `stop_sublevels + 2` sub-levels.
    pub stop_sublevels: usize,
    /// Bytes the secondary table (full keys whose fingerprints conflict) of one level's filter
    /// may hold, as a fraction: bits per key of the level's capacity. Default 1.
    pub secondary_bits_per_key: f64,
    /// Each level's structure, level 0 first (SlimDB's Table 1; `scree advise` chooses one for
    /// a memory budget); levels past the end take the last entry. Empty (the default): every
    /// level stepped, with its filter and pinned index. Not persisted: a reopen may change it.
    pub plan: Vec<LevelPlan>,
}

/// One level's structure in a `semisorted` keyspace: a row of SlimDB's Table 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LevelPlan {
    /// Stepped merge (`true`: up to `sub_levels` sub-levels, merged into the next level) or
    /// LSM (one sorted run, merged with whatever arrives, moved down whole once it holds
    /// `sub_levels` times the level above's share).
    pub stepped: bool,
    /// The level's cuckoo filter in memory (multi-level for a stepped level).
    pub filter: bool,
    /// The tables' three-level indexes pinned in memory; otherwise a lookup reads its table's
    /// index (one metadata read) before the data block.
    pub index: bool,
}

impl LevelPlan {
    /// Stepped, filtered, indexed: SlimDB's choice for its upper levels.
    pub const FULL: LevelPlan = LevelPlan {
        stepped: true,
        filter: true,
        index: true,
    };

    /// The row of Table 1 (0 LSM, 1 LSM+CF, 2 LSM+CF+TL, 3 LSM+TL, 4 SM, 5 SM+MLCF,
    /// 6 SM+MLCF+TL, 7 SM+TL).
    pub fn from_row(t: u8) -> Option<LevelPlan> {
        let (stepped, filter, index) = match t {
            0 => (false, false, false),
            1 => (false, true, false),
            2 => (false, true, true),
            3 => (false, false, true),
            4 => (true, false, false),
            5 => (true, true, false),
            6 => (true, true, true),
            7 => (true, false, true),
            _ => return None,
        };
        Some(LevelPlan {
            stepped,
            filter,
            index,
        })
    }

    /// Its row of Table 1.
    pub fn row(&self) -> u8 {
        (0..8)
            .find(|&t| LevelPlan::from_row(t) == Some(*self))
            .unwrap_or(6)
    }

    /// Table 1's name of the row: `SM+MLCF+TL`, `LSM+TL`, …
    pub fn name(&self) -> String {
        let mut s = String::from(if self.stepped { "SM" } else { "LSM" });
        if self.filter {
            s.push_str(if self.stepped { "+MLCF" } else { "+CF" });
        }
        if self.index {
            s.push_str("+TL");
        }
        s
    }
}

impl SemiSortedOptions {
    /// The structure of level `l`.
    pub fn level_plan(&self, l: usize) -> LevelPlan {
        self.plan
            .get(l)
            .or(self.plan.last())
            .copied()
            .unwrap_or(LevelPlan::FULL)
    }
}

impl Default for SemiSortedOptions {
    fn default() -> Self {
        SemiSortedOptions {
            sub_levels: 8,
            max_levels: 6,
            target_table_bytes: 32 << 20,
            slowdown_sublevels: 12,
            stop_sublevels: 24,
            secondary_bits_per_key: 1.0,
            plan: Vec::new(),
        }
    }
}

impl SemiSortedOptions {
    fn validate(&self, prefix_len: usize) -> Result<()> {
        let bad = |m: &str| Err(Error::InvalidArgument(format!("semisorted: {m}")));
        if prefix_len == 0 || prefix_len > MAX_KEY_BYTES {
            return bad("prefix_len must be 1..=65536");
        }
        if !(2..=64).contains(&self.sub_levels) {
            return bad("sub_levels must be 2..=64");
        }
        if !(2..=16).contains(&self.max_levels) {
            return bad("max_levels must be 2..=16");
        }
        if self.target_table_bytes < 4096 {
            return bad("target_table_bytes must be at least 4096");
        }
        if self.slowdown_sublevels < self.sub_levels
            || self.stop_sublevels < self.slowdown_sublevels
            || self.stop_sublevels > 200
        {
            return bad("need sub_levels <= slowdown_sublevels <= stop_sublevels <= 200");
        }
        if !(0.0..=64.0).contains(&self.secondary_bits_per_key) {
            return bad("secondary_bits_per_key must be within 0..=64");
        }
        Ok(())
    }
}

impl LeveledOptions {
    fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidArgument(m));
        let l = self;
        if l.l0_compaction_trigger == 0
            || l.l0_slowdown_trigger < l.l0_compaction_trigger
            || l.l0_stop_trigger < l.l0_slowdown_trigger
        {
            return bad(
                "leveled: need 0 < l0_compaction_trigger <= l0_slowdown_trigger <= l0_stop_trigger"
                    .into(),
            );
        }
        if l.level_size_ratio < 2
            || l.max_levels < 2
            || l.max_levels > 16
            || l.target_table_bytes < 4096
            || l.level_base_bytes < 4096
        {
            return bad("leveled: need level_size_ratio >= 2, 2 <= max_levels <= 16, target_table_bytes and level_base_bytes >= 4096".into());
        }
        if !(1..=64).contains(&l.max_subcompactions) {
            return bad(format!(
                "leveled: max_subcompactions must be 1..=64, got {}",
                l.max_subcompactions
            ));
        }
        Ok(())
    }
}

impl FragmentedOptions {
    fn validate(&self) -> Result<()> {
        let bad = |m: &str| Err(Error::InvalidArgument(format!("fragmented: {m}")));
        if self.max_sstables_per_guard == 0 {
            return bad("max_sstables_per_guard must be at least 1");
        }
        if self.l0_compaction_trigger == 0
            || self.l0_slowdown_trigger < self.l0_compaction_trigger
            || self.l0_stop_trigger < self.l0_slowdown_trigger
        {
            return bad("need 0 < l0_compaction_trigger <= l0_slowdown_trigger <= l0_stop_trigger");
        }
        if !(3..=16).contains(&self.max_levels) {
            return bad("max_levels must be 3..=16");
        }
        if self.top_level_bits > 60 || self.bit_decrement > 16 {
            return bad("need top_level_bits <= 60 and bit_decrement <= 16");
        }
        if self.level_size_ratio < 2 {
            return bad("level_size_ratio must be at least 2");
        }
        if self.level1_guards == 0 {
            return bad("level1_guards must be at least 1");
        }
        if !(0.0..=1.0).contains(&self.aggressive_ratio) {
            return bad("aggressive_ratio must be within 0..=1");
        }
        if self.rewrite_factor == 0 {
            return bad("rewrite_factor must be at least 1");
        }
        if !(1..=64).contains(&self.parallel_seek_threads) {
            return bad("parallel_seek_threads must be 1..=64");
        }
        Ok(())
    }
}

/// Options of the `trie` layout (LSM-trie: a trie of containers, each a pile of HTables; rules
/// and measured settings in docs/architecture-trie.md).
#[derive(Debug, Clone)]
pub struct TrieOptions {
    /// Sub-levels (HTables) an upper-level container holds before its pile is compacted into
    /// its eight children (the paper's linear growth within a level). Default 8.
    pub pile_size: usize,
    /// Depth of the last level (the root is depth 0), 1..=9. The last level grows linearly and
    /// is never compacted further, only garbage-collected. Persisted when the keyspace is
    /// created; later values are ignored. Default 3 (the paper's prototype has 4, sized for
    /// terabytes; see docs/architecture-trie.md).
    pub last_level_depth: u32,
    /// Bloom filter bits per key of every bucket filter. Default 16 (the paper's setting for
    /// about a hundred sub-levels on a lookup's path).
    pub bloom_bits_per_key: u32,
    /// Average bucket fill an HTable's bucket count is chosen for. Default 0.95.
    pub target_fill: f64,
    /// Most a bucket is filled to before items migrate (the HashMark watermark). Default 1.0.
    pub bucket_fill_cap: f64,
    /// Byte budget of the per-bucket filters kept in memory for upper-level tables (and for
    /// last-level tables no BloomCluster covers). Tables opened over the budget keep no filter
    /// in memory and each probe reads the bucket. Default 512 MiB.
    pub filter_memory_bytes: usize,
    /// Byte budget of a cache of BloomCluster blocks (0 disables it): lookups that hit it
    /// skip the last level's metadata read. Default 16 MiB.
    pub cluster_cache_bytes: usize,
    /// Estimated garbage fraction of a last-level container above which its pile is merged in
    /// place (garbage collection). 0 disables garbage-driven collection (the pile cap below
    /// still applies). Default 0.35.
    pub gc_garbage_ratio: f64,
    /// Generations (sub-levels of distinct age) a last-level container's pile may reach before
    /// it is merged in place into one table whatever its garbage estimate, even with
    /// `gc_garbage_ratio` 0. The last level grows linearly: a store that outgrows its depth
    /// (an insert-only load leaves no garbage) would otherwise pile up sub-levels without end,
    /// each a filter probe per lookup, until the BloomCluster's limit of 65,535 sub-levels
    /// stopped every compaction into the container. 2..=4096. Default 128 (the paper's largest
    /// store, 10 TB, has 112 sub-levels on a lookup's path).
    pub max_last_level_sublevels: usize,
    /// Bucket columns read (one block per sub-level each) to estimate a last-level container's
    /// garbage after a sub-level is added. Default 4.
    pub gc_sample_columns: u32,
    /// Bytes of a last-level pile that a garbage collection merges in one pass, holding about
    /// 0.8× of them on the heap (more without mapped reads). A larger pile is merged twice, one
    /// eighth of its buckets at a time (the first pass sizes the new table, the second writes
    /// it), holding about an eighth as much: twice the reads, bounded memory. 0 always takes
    /// two passes. Default 64 MiB.
    pub gc_single_pass_bytes: u64,
    /// Sub-levels in one upper-level container at which writes are delayed; each sub-level
    /// past it lowers the delayed rate.
    /// Default 16.
    pub slowdown_sublevels: usize,
    /// Sub-levels in one upper-level container at which writes stop until compaction catches
    /// up. Default 24.
    pub stop_sublevels: usize,
}

impl Default for TrieOptions {
    fn default() -> Self {
        TrieOptions {
            pile_size: 8,
            last_level_depth: 3,
            bloom_bits_per_key: 16,
            target_fill: 0.95,
            bucket_fill_cap: 1.0,
            filter_memory_bytes: 512 << 20,
            cluster_cache_bytes: 16 << 20,
            gc_garbage_ratio: 0.35,
            max_last_level_sublevels: 128,
            gc_sample_columns: 4,
            gc_single_pass_bytes: 64 << 20,
            slowdown_sublevels: 16,
            stop_sublevels: 24,
        }
    }
}

impl TrieOptions {
    fn validate(&self) -> Result<()> {
        let bad = |m: &str| Err(Error::InvalidArgument(format!("trie: {m}")));
        if !(2..=1000).contains(&self.pile_size) {
            return bad("pile_size must be 2..=1000");
        }
        if !(1..=9).contains(&self.last_level_depth) {
            return bad("last_level_depth must be 1..=9");
        }
        if !(1..=64).contains(&self.bloom_bits_per_key) {
            return bad("bloom_bits_per_key must be 1..=64");
        }
        if !(0.3..=1.0).contains(&self.target_fill) || !(0.3..=1.0).contains(&self.bucket_fill_cap)
        {
            return bad("target_fill and bucket_fill_cap must be within 0.3..=1.0");
        }
        if !(0.0..1.0).contains(&self.gc_garbage_ratio) {
            return bad("gc_garbage_ratio must be within 0..1");
        }
        if !(2..=4096).contains(&self.max_last_level_sublevels) {
            return bad("max_last_level_sublevels must be 2..=4096");
        }
        if self.gc_sample_columns == 0 {
            return bad("gc_sample_columns must be at least 1");
        }
        if self.slowdown_sublevels < self.pile_size || self.stop_sublevels < self.slowdown_sublevels
        {
            return bad("need pile_size <= slowdown_sublevels <= stop_sublevels");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every layout's order, and what a `PrefixGroups` order serves: prefixes of exactly the
    /// group length, with an error naming the length it needs otherwise.
    #[test]
    fn key_order_decides_the_scans_served() {
        assert_eq!(Layout::Leveled.order(), Order::Total);
        assert_eq!(Layout::Fragmented.order(), Order::Total);
        assert_eq!(Layout::Lightweight.order(), Order::Total);
        assert_eq!(Layout::Trie.order(), Order::Hash);
        let semi = Layout::SemiSorted { prefix_len: 4 };
        let order = semi.order();
        assert_eq!(order, Order::PrefixGroups(4));
        assert!(!order.serves_range() && order.serves_prefix(4) && !order.serves_prefix(3));
        assert!(order.check_prefix("ks", &semi, b"abcd").is_ok());
        match order.check_prefix("ks", &semi, b"abc") {
            Err(Error::Unsupported(m)) => {
                assert!(
                    m.contains("exactly 4 bytes, not 3") && m.contains("semisorted"),
                    "{m}"
                )
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            order.check_range("ks", &semi),
            Err(Error::Unsupported(m)) if m.contains("4-byte prefix")
        ));
        assert!(Order::Total
            .check_prefix("ks", &Layout::Leveled, b"")
            .is_ok());
        assert!(Order::Hash.check_prefix("ks", &Layout::Trie, b"a").is_err());
    }
}
