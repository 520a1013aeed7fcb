//! The sorted table (SST): ≈4 KiB data blocks with prefix compression and restart points, an
//! index block of separators, a whole-table Bloom filter over user keys, and a fixed footer.
//! Byte layout in docs/format.md. Also the shared handle ([`TableFile`]) that owns a table
//! file's lifetime.

pub mod block;
pub mod purge;
pub mod sep_index;
mod verify;

use std::cmp::Ordering;
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering as AtOrd};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use crate::cache::BlockCache;
use crate::error::{Error, Result};
use crate::fs::Env;
use crate::iter::{Concat, RunParts};
use crate::key::{self, cmp_ikey};
use crate::table_format::TableFormat;

/// Footer size in bytes.
pub const FOOTER: usize = 48;
/// Magic number at the end of every sorted table.
pub const MAGIC: u64 = 0x5343_5245_4553_5354; // "SCREESST"
/// Format version written in the footer: 2, an index of separators (block type
/// [`block::TYPE_SEPARATORS`]). Version 1 (each block's last internal key, offset and size) is
/// still read.
pub const VERSION: u32 = 2;
/// The oldest footer version read.
pub const MIN_VERSION: u32 = 1;

/// [`AddedTable::format`](crate::manifest::edit::AddedTable::format) code of a sorted table.
pub const FORMAT_SORTED: u8 = 0;
/// File name extension of sorted tables.
pub const SORTED_EXT: &str = "sst";

/// The sorted table in the format registry ([`crate::table_format`]).
pub const SORTED: TableFormat = TableFormat {
    name: "sorted table",
    code: Some(FORMAT_SORTED),
    ext: SORTED_EXT,
    verify: verify::verify,
    for_each: Some(verify::for_each),
    describe: verify::describe,
    fuzz_target: Some("table_open"),
};

/// What the manifest records about a table file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableMeta {
    /// File number (names the file).
    pub file_no: u64,
    /// File size in bytes.
    pub size: u64,
    /// Smallest internal key.
    pub smallest: Vec<u8>,
    /// Largest internal key.
    pub largest: Vec<u8>,
    /// Number of entries.
    pub entries: u64,
    /// Smallest sequence number inside.
    pub min_seq: u64,
    /// Largest sequence number of the writes inside (a version written with sequence number
    /// 0 at the bottom counts with its own number).
    pub max_seq: u64,
    /// For an appendable table, where its current metadata starts and how many of its bytes
    /// no longer count; `None` for a table written once and never again (every format but
    /// the appendable ones). See docs/format.md, "Appendable tables".
    pub append: Option<AppendMeta>,
}

/// What the manifest records of an appendable table beyond [`TableMeta`]: the table is the
/// first [`TableMeta::size`] bytes of its file, and its metadata (the index naming its live
/// segments) runs from `meta_offset` to that end. A table grows by append-then-switch: new
/// segments and new metadata are appended after its end and synced, then a manifest edit
/// names the new end and metadata offset. Bytes before the end a version names are never
/// written again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendMeta {
    /// Offset of the table's current metadata; it ends at [`TableMeta::size`].
    pub meta_offset: u64,
    /// Bytes before `meta_offset` that the current metadata does not reference: metadata
    /// tails a later switch superseded, bytes an unfinished switch appended before a crash,
    /// segments the layout dropped. Reclaimed when the table is next rewritten.
    pub dead_bytes: u64,
}

impl TableMeta {
    /// Bytes the table's current metadata does not reference ([`AppendMeta::dead_bytes`]; 0 for
    /// a table that is not appendable).
    pub fn dead_bytes(&self) -> u64 {
        self.append.map_or(0, |a| a.dead_bytes)
    }
    /// Smallest user key.
    pub fn smallest_user(&self) -> &[u8] {
        key::user_key(&self.smallest)
    }
    /// Largest user key.
    pub fn largest_user(&self) -> &[u8] {
        key::user_key(&self.largest)
    }
    /// Whether the table's user-key range intersects `[lo, hi]` (None = unbounded).
    pub fn overlaps(&self, lo: Option<&[u8]>, hi: Option<&[u8]>) -> bool {
        !(lo.is_some_and(|l| self.largest_user() < l)
            || hi.is_some_and(|h| self.smallest_user() > h))
    }
}

/// File name of a sorted table.
pub fn table_path(dir: &Path, file_no: u64) -> PathBuf {
    dir.join(format!("{file_no:06}.sst"))
}

mod builder;
mod file;
mod reader;
#[cfg(test)]
pub(crate) mod test_support;
#[cfg(test)]
mod tests;

pub use builder::TableBuilder;
pub use file::{allowed_seeks, get_in_tables, get_in_tables_probed, Probes, TableAux, TableFile};
pub(crate) use reader::Footer;
pub use reader::{TableIter, TableReader};

/// Shared context for opening tables of one database.
pub struct TableCtx {
    /// The file layer.
    pub env: Env,
    /// The block cache.
    pub cache: BlockCache,
    /// The database directory.
    pub dir: PathBuf,
    /// The open sorted tables, when their number is bounded (`Options::max_open_files`).
    pub open: OpenTables,
    /// Where obsolete tables are torn down and deleted.
    pub purge: purge::Purger,
    /// Set by a lookup that made a table due for compaction (`leveled`'s seek compaction,
    /// [`TableCtx::want_compaction`]); the read path takes it and wakes the background
    /// threads, which otherwise would look again only at their next timed wake-up.
    pub compaction_wanted: AtomicBool,
}

impl TableCtx {
    /// Asks for the background threads to be woken (a lookup made compaction due).
    pub fn want_compaction(&self) {
        self.compaction_wanted.store(true, AtOrd::Release);
    }
    /// Whether compaction was asked for since the last call (clears the request).
    pub fn take_compaction_wanted(&self) -> bool {
        self.compaction_wanted.load(AtOrd::Relaxed)
            && self.compaction_wanted.swap(false, AtOrd::AcqRel)
    }
}

/// The bound on open table files (`Options::max_open_files`; 0: none): sorted-table readers,
/// and the `trie` layout's HTables and BloomClusters through [`TableAux`]. An open sorted
/// table holds a file descriptor, the decoded index and the Bloom filter (≈ 1.6 bytes per
/// key at 10 filter bits per key and ≈ 120-byte entries), an open HTable a descriptor and its migration records and bucket index: without a
/// bound they grow with the store. Past the bound the file opened longest ago and not used
/// since its last chance is closed (CLOCK: a use sets a bit, the sweep clears it once before
/// closing); the next use opens the file again and reads its metadata again. A closed
/// reader's memory is freed when the last iterator or lookup holding it ends.
#[derive(Default)]
pub struct OpenTables {
    cap: usize,
    ring: Mutex<VecDeque<Weak<TableFile>>>,
}

impl OpenTables {
    /// Whether open files may be closed (a bound is set).
    pub fn bounded(&self) -> bool {
        self.cap > 0
    }
    /// At most `cap` open readers (0: no bound).
    pub fn new(cap: usize) -> Self {
        OpenTables {
            cap,
            ring: Mutex::new(VecDeque::new()),
        }
    }

    /// Records that `t` was just opened and closes readers past the bound.
    fn opened(&self, t: Weak<TableFile>) {
        if self.cap == 0 {
            return;
        }
        let mut ring = self.ring.lock();
        ring.push_back(t);
        // Each reader gets at most one second chance per sweep, so this ends.
        let mut budget = 2 * ring.len();
        while ring.len() > self.cap && budget > 0 {
            budget -= 1;
            let Some(w) = ring.pop_front() else { break };
            let Some(f) = w.upgrade() else { continue };
            if f.used.swap(false, AtOrd::Relaxed) {
                ring.push_back(w);
            } else {
                f.close();
            }
        }
    }
}

/// A sorted run of non-overlapping tables (one level), as [`Concat`] parts.
pub struct TableRun {
    tables: Arc<[Arc<TableFile>]>,
    fill_cache: bool,
}

impl RunParts for TableRun {
    type Iter = TableIter;
    fn count(&self) -> usize {
        self.tables.len()
    }
    fn open(&self, idx: usize) -> Result<TableIter> {
        match self.tables.get(idx) {
            Some(t) => t.iter(self.fill_cache),
            None => Err(Error::InvalidArgument(format!("no table {idx} in the run"))),
        }
    }
    fn seek_part(&self, ikey: &[u8]) -> usize {
        self.tables
            .partition_point(|t| cmp_ikey(&t.meta.largest, ikey) == Ordering::Less)
    }
    fn seek_for_prev_part(&self, ikey: &[u8]) -> Option<usize> {
        self.tables
            .partition_point(|t| cmp_ikey(&t.meta.smallest, ikey) != Ordering::Greater)
            .checked_sub(1)
    }
}

/// Iterates a sorted run of non-overlapping tables, each opened only when reached.
pub type ConcatIter = Concat<TableRun>;

impl ConcatIter {
    /// Iterates `tables`, which must be sorted and non-overlapping. Versions share the run
    /// (`Arc<[_]>`), so starting a scan does not copy a level's file list.
    pub fn new(tables: impl Into<Arc<[Arc<TableFile>]>>, fill_cache: bool) -> Self {
        Concat::over(TableRun {
            tables: tables.into(),
            fill_cache,
        })
    }
}
