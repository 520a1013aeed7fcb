//! The layout seam. A layout owns its part of a keyspace's version and answers four questions:
//! where a flushed memtable goes ([`Layout::flush`]), which compaction is next
//! ([`Layout::pick`]), how it runs ([`Job::run`]), and which tables may hold a key or a range
//! ([`LayoutVersion::get`], [`LayoutVersion::add_iters`]). Layout-specific metadata travels in
//! [`crate::manifest::edit::LayoutRecord`]s.

pub mod fragmented;
pub mod leveled;
pub mod lightweight;
pub mod parallel;
pub mod reserve;
#[cfg(test)]
pub(crate) mod segments;
pub mod semisorted;
pub mod sorted;
pub mod trie;

use std::any::Any;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::iter::InternalIter;
use crate::manifest::edit::{format_is_appendable, KsEdit};
use crate::memtable::{FirstLevel, Lookup, Memtable};
use crate::options::{KeyspaceOptions, Layout as LayoutKind};
use crate::stats::{IoStats, LevelReads, LevelStats};
use crate::table::{TableCtx, TableFile};

/// The layouts this build implements.
pub fn implemented() -> Vec<LayoutKind> {
    vec![
        LayoutKind::Leveled,
        LayoutKind::Fragmented,
        LayoutKind::Trie,
        LayoutKind::SemiSorted { prefix_len: 1 },
        LayoutKind::Lightweight,
    ]
}

/// Checks an edit before a layout applies it: every table it removes must be one the version
/// holds (`holds`), every table it adds must have the file format `format`, and only tables of
/// an appendable format may be added as appendable. A manifest saying
/// otherwise is damaged, or was written by a bug: ignoring the removal hid that (RocksDB refuses
/// it too), and a table of the wrong format would only fail at its first read. At replay the
/// error becomes `Corruption` naming the manifest.
pub(crate) fn check_edit_tables(
    edit: &KsEdit,
    format: u8,
    holds: impl Fn(u64) -> bool,
) -> Result<()> {
    if let Some(no) = edit.removed.iter().find(|&&no| !holds(no)) {
        return Err(Error::InvalidArgument(format!(
            "edit removes table {no:06}, which the keyspace does not hold"
        )));
    }
    if let Some(a) = edit.added.iter().find(|a| a.format != format) {
        return Err(Error::InvalidArgument(format!(
            "edit adds table {:06} of format {}; this layout's tables have format {format}",
            a.meta.file_no, a.format
        )));
    }
    if let Some(a) = edit
        .added
        .iter()
        .find(|a| a.meta.append.is_some() && !format_is_appendable(a.format))
    {
        return Err(Error::InvalidArgument(format!(
            "edit adds table {:06} as appendable; tables of format {} are not",
            a.meta.file_no, a.format
        )));
    }
    Ok(())
}

/// What a background job needs from the engine.
pub struct JobCtx<'a> {
    /// Table files, cache and directory.
    pub tables: &'a Arc<TableCtx>,
    /// File number allocator.
    pub next_file: &'a AtomicU64,
    /// Versions at or below this sequence number are visible to no snapshot but the newest.
    pub smallest_snapshot: u64,
    /// The keyspace's options.
    pub opts: &'a KeyspaceOptions,
    /// I/O counters.
    pub stats: &'a Arc<IoStats>,
    /// The database's random placement-hash key (layouts that place by hash).
    pub hash_key: [u8; 16],
    /// Set for compactions: runs a memtable flush that is waiting while every background
    /// thread is busy, on this thread (see [`JobCtx::flush_point`]).
    pub flush_point: Option<&'a (dyn Fn() -> Result<()> + Sync)>,
}

impl JobCtx<'_> {
    /// Allocates a file number.
    pub fn new_file_no(&self) -> u64 {
        self.next_file
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
    }

    /// A point between the output tables of a long job where it may run a waiting flush
    /// itself: when every background thread is inside a compaction, a full memtable would
    /// otherwise wait for one of them to finish, and writers with it (multi-second stalls
    /// under `trie` pile compactions at 50M keys). Jobs call it holding no engine lock; a
    /// flush only adds a table where flushes land, which compactions already allow beside
    /// them. An error is the flush's, and fails the job as well.
    pub fn flush_point(&self) -> Result<()> {
        self.flush_point.map_or(Ok(()), |f| f())
    }
}

/// Whether writers must wait for compaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pressure {
    /// Write freely.
    None,
    /// Delay writes (`db/delay.rs`); the grade is how many steps (tables, sub-levels) the
    /// backlog is past the point where slowing starts: the delayed rate falls as it grows.
    Slowdown(u32),
    /// Wait until compaction catches up.
    Stop,
}

impl Pressure {
    /// The pressure of a backlog of `n` (tables, sub-levels) against its triggers: slowing
    /// from `slowdown` on, stopping from `stop` on.
    pub fn of_backlog(n: usize, slowdown: usize, stop: usize) -> Pressure {
        if n >= stop {
            Pressure::Stop
        } else if n >= slowdown {
            Pressure::Slowdown(u32::try_from(n - slowdown).unwrap_or(u32::MAX))
        } else {
            Pressure::None
        }
    }
}

/// Where a live file sits in a version: see [`LayoutVersion::table_places`].
pub struct TablePlace {
    /// Level (for `trie`, the depth of its container).
    pub level: u32,
    /// Where in the level, in the layout's words (empty when the level says it all).
    pub place: String,
    /// The key of the guard holding it (`fragmented`, levels ≥ 1, not the sentinel).
    pub guard: Option<Vec<u8>>,
    /// The file.
    pub file: Arc<TableFile>,
}

/// One immutable state of a keyspace's layout.
pub trait LayoutVersion: Send + Sync {
    /// Newest version of `user_key` visible at `seq`.
    fn get(&self, user_key: &[u8], seq: u64) -> Result<Lookup>;
    /// [`LayoutVersion::get`] for a non-blind write, which also says where the key's newest
    /// version is in the first level, when the layout's flushes use that (`semisorted`: its
    /// filter then updates the key's own entry instead of taking a conflict, SlimDB's
    /// Algorithm 2). Default: `None`.
    fn get_placed(&self, user_key: &[u8], seq: u64) -> Result<(Lookup, Option<FirstLevel>)> {
        Ok((self.get(user_key, seq)?, None))
    }
    /// Pushes iterators covering every table (sorted layouts); `Unsupported` otherwise.
    fn add_iters(&self, out: &mut Vec<Box<dyn InternalIter>>) -> Result<()>;
    /// Pushes iterators covering every entry whose user key starts with `prefix` (they may
    /// hold other keys too; the caller bounds the scan). Default: [`LayoutVersion::add_iters`].
    /// A `PrefixGroups` layout serves only this.
    fn add_prefix_iters(&self, _prefix: &[u8], out: &mut Vec<Box<dyn InternalIter>>) -> Result<()> {
        self.add_iters(out)
    }
    /// A new version with `edit` applied. Files are looked up or opened through `tables`.
    fn apply(&self, edit: &KsEdit, tables: &Arc<TableCtx>) -> Result<Arc<dyn LayoutVersion>>;
    /// Records that recreate this version from nothing (manifest roll-over).
    fn snapshot(&self, out: &mut KsEdit);
    /// Every live file.
    fn files(&self) -> Vec<Arc<TableFile>>;
    /// Shape, for `stats()`.
    fn level_stats(&self) -> Vec<LevelStats>;
    /// Every live file with the level and the place in it that hold it, in the layout's
    /// order (for `Keyspace::tables`).
    fn table_places(&self) -> Vec<TablePlace>;
    /// The version as levels below L0 with one place per level for a key, when it is one
    /// (`leveled`, `fragmented`): the parallel-search methods below then split it.
    fn level_split(&self) -> Option<&dyn LevelSplit> {
        None
    }
    /// Parallel search: whether this version has a distinct last level that a lookup may probe
    /// concurrently with the levels above it ([`LayoutVersion::get_upper`] then
    /// [`LayoutVersion::get_last`]). Default: [`LevelSplit::last_is_distinct`], or none.
    fn has_distinct_last_level(&self) -> bool {
        self.level_split().is_some_and(|s| s.last_is_distinct())
    }
    /// Newest version of `user_key` visible at `seq` in the levels above the last one
    /// (`Absent` when none holds it). Default: [`LevelSplit::get_above_last`], or the whole
    /// lookup.
    fn get_upper(&self, user_key: &[u8], seq: u64) -> Result<Lookup> {
        match self.level_split() {
            Some(s) => s.get_above_last(user_key, seq),
            None => self.get(user_key, seq),
        }
    }
    /// Newest version of `user_key` visible at `seq` in the last level only; used only when
    /// [`LayoutVersion::has_distinct_last_level`]. An upper-level result always wins.
    fn get_last(&self, user_key: &[u8], seq: u64) -> Result<Lookup> {
        match self.level_split() {
            Some(s) => s.get_in_last(user_key, seq),
            None => Ok(Lookup::Absent),
        }
    }
    /// Block reads of point lookups per level, for layouts that count them.
    fn level_reads(&self) -> Vec<LevelReads> {
        Vec::new()
    }
    /// Checks the layout's invariants (tests and `scree check`).
    fn check_invariants(&self) -> std::result::Result<(), String>;
    /// Compares the layout's own metadata files with the records that name them, as reads
    /// would (`scree check`): one error per file that does not match. Default: none.
    fn verify_metadata_files(&self) -> Vec<crate::error::Error> {
        Vec::new()
    }
    /// Downcasting support.
    fn as_any(&self) -> &dyn Any;
}

/// A version that looks a key up in L0, then in one place per level below it (`leveled`,
/// `fragmented`). Parallel search splits that lookup into the levels above the deepest level
/// holding a table, and that level alone.
pub trait LevelSplit {
    /// The deepest level below L0 that holds a table (0 when none does).
    fn deepest_level(&self) -> usize;
    /// Whether level `l` (0: L0) holds a table.
    fn holds_tables(&self, l: usize) -> bool;
    /// Newest version of `user_key` visible at `seq` in L0 (when `with_l0`), then in `levels`.
    fn lookup_levels(
        &self,
        user_key: &[u8],
        seq: u64,
        with_l0: bool,
        levels: std::ops::Range<usize>,
    ) -> Result<Lookup>;

    /// Whether the deepest level is a distinct last level: some table lies above it.
    fn last_is_distinct(&self) -> bool {
        let last = self.deepest_level();
        last >= 1 && (0..last).any(|l| self.holds_tables(l))
    }
    /// The lookup in L0 and the levels above the deepest one.
    fn get_above_last(&self, user_key: &[u8], seq: u64) -> Result<Lookup> {
        self.lookup_levels(user_key, seq, true, 1..self.deepest_level())
    }
    /// The lookup in the deepest level alone.
    fn get_in_last(&self, user_key: &[u8], seq: u64) -> Result<Lookup> {
        match self.deepest_level() {
            0 => Ok(Lookup::Absent),
            last => self.lookup_levels(user_key, seq, false, last..last + 1),
        }
    }
}

/// A background job (a compaction). Dropping it releases whatever it reserved; the engine
/// drops it only after the job's edit is installed, so no other job can pick the same inputs
/// in between.
pub trait Job: Send {
    /// Runs the job and returns the edit to install.
    fn run(&mut self, ctx: &JobCtx<'_>) -> Result<KsEdit>;
    /// Whether this was a trivial move (no data rewritten).
    fn is_trivial(&self) -> bool {
        false
    }
}

/// A layout's policy for one keyspace.
pub trait Layout: Send + Sync {
    /// The layout's kind.
    fn kind(&self) -> LayoutKind;
    /// The format code of the tables its edits add ([`crate::table_format`]).
    fn table_format(&self) -> u8;
    /// An empty version.
    fn empty_version(&self, tables: &Arc<TableCtx>) -> Arc<dyn LayoutVersion>;
    /// An empty version of a database whose placement-hash key is `hash_key`; layouts that
    /// place by hash override this. Default: [`Layout::empty_version`].
    fn empty_version_with_key(
        &self,
        tables: &Arc<TableCtx>,
        _hash_key: [u8; 16],
    ) -> Arc<dyn LayoutVersion> {
        self.empty_version(tables)
    }
    /// Takes the options a keyspace is opened with (its memory budgets) at once, before any
    /// lookup: a reopened keyspace's policy starts from the defaults, and flushes and picks
    /// (which also pass the options) may not come before the first reads.
    fn configure(&self, _opts: &KeyspaceOptions) {}
    /// Records written when the keyspace is created (persistent layout parameters).
    fn init_records(&self, _opts: &KeyspaceOptions, _out: &mut KsEdit) {}
    /// Writes the tables for a frozen memtable and returns the edit adding them.
    fn flush(
        &self,
        ctx: &JobCtx<'_>,
        version: &Arc<dyn LayoutVersion>,
        mem: &Memtable,
    ) -> Result<KsEdit>;
    /// The next background compaction, with its inputs reserved.
    fn pick(&self, version: &Arc<dyn LayoutVersion>, ctx: &JobCtx<'_>) -> Option<Box<dyn Job>>;
    /// Whether a background compaction is due (no reservation).
    fn needs_compaction(&self, version: &Arc<dyn LayoutVersion>, opts: &KeyspaceOptions) -> bool;
    /// The next step of a full compaction (`Db::compact`) of the tables in `scope`: `Done`
    /// once none of them lies above where the layout puts fully compacted data, `Wait` while
    /// the tables it needs are busy with background work. Tables outside `scope` (data
    /// written after the call) may join a job but never make one due.
    fn manual(
        &self,
        version: &Arc<dyn LayoutVersion>,
        ctx: &JobCtx<'_>,
        scope: &ManualScope,
    ) -> ManualStep;
    /// Write back-pressure.
    fn pressure(&self, version: &Arc<dyn LayoutVersion>, opts: &KeyspaceOptions) -> Pressure;
    /// Loads, on the background thread that installed an edit, what the first lookups of the
    /// tables it added (`added`, file numbers; `version` at or after the install) would
    /// otherwise load on the read path (`semisorted`: each table's reader with its pinned
    /// index). Between tables it runs `ctx`'s flush points, so a long warm-up never holds up
    /// a flush the writers wait for. Default: nothing (those layouts' readers open cheaply on
    /// first use).
    fn warm(
        &self,
        _ctx: &JobCtx<'_>,
        _version: &Arc<dyn LayoutVersion>,
        _added: &[u64],
    ) -> Result<()> {
        Ok(())
    }
}

/// The tables a manual compaction (`Db::compact`) answers for: those live when it was called,
/// and every table a compaction (manual or background) has since made from any of them. A
/// table that only moved keeps its file number and stays in scope. Data written after the call
/// is in scope only where a job merged it with data from before, so writes that go on while a
/// manual compaction runs never give it new work of their own, and it ends (RocksDB's
/// `CompactRange` likewise compacts the files present when it reaches each level).
#[derive(Debug, Clone, Default)]
pub struct ManualScope {
    files: std::collections::HashSet<u64>,
}

impl ManualScope {
    /// A scope of the given tables.
    pub fn new(files: impl IntoIterator<Item = u64>) -> Self {
        ManualScope {
            files: files.into_iter().collect(),
        }
    }
    /// Whether table `file_no` is in scope.
    pub fn contains(&self, file_no: u64) -> bool {
        self.files.contains(&file_no)
    }
    /// Follows an installed edit: if it merged away a table in scope, the tables it added hold
    /// that table's data and join the scope. `merged` are the edit's removed tables that it
    /// does not add back (a table both removed and added is a move).
    pub fn follow(
        &mut self,
        added: impl IntoIterator<Item = u64>,
        merged: &std::collections::HashSet<u64>,
    ) {
        let inherits = merged.iter().any(|f| self.files.contains(f));
        for f in merged {
            self.files.remove(f);
        }
        if inherits {
            self.files.extend(added);
        }
    }
    /// Number of tables in scope.
    pub fn len(&self) -> usize {
        self.files.len()
    }
    /// Whether no table is in scope.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }
}

/// The next step of a full compaction.
pub enum ManualStep {
    /// Run this job.
    Run(Box<dyn Job>),
    /// Inputs are busy with background work; wait and ask again.
    Wait,
    /// Every table in scope is compacted as far as the layout goes.
    Done,
}

/// Builds the policy object for a keyspace. Policies hold only run-time state (reservations,
/// pointers); options are passed on every call so they can change on reopen. Every layout is
/// implemented (the `Result` stays for a build that leaves one out).
pub fn new_layout(kind: LayoutKind) -> Result<Arc<dyn Layout>> {
    match kind {
        LayoutKind::Leveled => Ok(Arc::new(leveled::Leveled::new())),
        LayoutKind::Fragmented => Ok(Arc::new(fragmented::Fragmented::new())),
        LayoutKind::Trie => Ok(Arc::new(trie::Trie::new())),
        LayoutKind::SemiSorted { prefix_len } => {
            Ok(Arc::new(semisorted::SemiSorted::new(prefix_len)))
        }
        LayoutKind::Lightweight => Ok(Arc::new(lightweight::Lightweight::new())),
        #[cfg(test)]
        LayoutKind::TestSegments => Ok(Arc::new(segments::Segments::default())),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::ManualScope;

    #[test]
    fn a_manual_scope_follows_the_data_of_its_tables() {
        let mut s = ManualScope::new([1, 2]);
        // A merge of a table in scope with a later one: the outputs hold data in scope.
        s.follow([10, 11], &HashSet::from([1, 5]));
        assert!(!s.contains(1) && s.contains(10) && s.contains(11) && s.contains(2));
        // A merge of later tables only stays out.
        s.follow([12], &HashSet::from([6, 7]));
        assert!(!s.contains(12));
        // A move (removed and added again, so not merged) keeps its number in scope.
        s.follow([2], &HashSet::new());
        assert!(s.contains(2));
        // A flush adds without merging: out of scope.
        s.follow([13], &HashSet::new());
        assert!(!s.contains(13));
        assert_eq!(s.len(), 3);
    }
}
