//! The `leveled` layout, the baseline: L0 holds overlapping tables (newest first), L1.. hold
//! non-overlapping tables sorted by key, each level `level_size_ratio` times the previous.
//! Compaction merges one table (or all of L0) with the overlapping tables of the next level;
//! a table with nothing to merge with is moved down without rewriting (trivial move). A merge
//! out of L0 may be split by key into parts merged in parallel (sub-compactions,
//! `LeveledOptions::max_subcompactions`), installed together by the job's one edit.
//!
//! Seek compaction (LevelDB's, `LeveledOptions::seek_compaction`): a lookup that probes two
//! or more tables charges a seek to the first one it probed ([`TableFile::charge_seek`]); the
//! first table of a version to use up its allowance becomes that version's `seek_due`, and
//! the picker compacts it into the next level when no level is over its size.

use std::any::Any;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

use crate::error::{Error, Result};
use crate::iter::{BoundedIter, InternalIter, MergingIter};
use crate::key::cmp_ikey;
use crate::layout::reserve::{self, Claim, Reservations};
use crate::layout::sorted::{
    flush_to_table, key_ranges, merge_into_tables, run_parts, split_keys, zeroed_bound, Cutter,
    KeyRange, SizeCutter,
};
use crate::layout::{
    check_edit_tables, Job, JobCtx, Layout, LayoutVersion, LevelSplit, ManualScope, ManualStep,
    Pressure, TablePlace,
};
use crate::manifest::edit::{AddedTable, KsEdit};
use crate::memtable::{Lookup, Memtable};
use crate::options::{KeyspaceOptions, Layout as LayoutKind, LeveledOptions};
use crate::stats::{LevelStats, WriteCause};
use crate::table::{
    get_in_tables, get_in_tables_probed, ConcatIter, Probes, TableCtx, TableFile, TableMeta,
    FORMAT_SORTED,
};

/// One version: `levels[0]` newest first, deeper levels sorted by smallest key.
pub struct LeveledVersion {
    levels: Vec<Vec<Arc<TableFile>>>,
    /// The largest user key of each table of levels 1.. (`fences[l - 1]`), side by side, for
    /// a get's search of each level (derived from `levels` in `new`).
    fences: Vec<Fences>,
    /// Levels 1.. as shared runs for iterators (derived from `levels` in `new`).
    runs: Vec<Arc<[Arc<TableFile>]>>,
    /// Bytes of each level, summed once per version: every pick and every
    /// `needs_compaction` scores the levels (3 ms per pick at 100k tables when summed per
    /// call).
    bytes: Vec<u64>,
    /// Whether lookups charge seeks (`LeveledOptions::seek_compaction`, shared with the
    /// policy, which sets it from the options the keyspace is opened with).
    charging: Arc<AtomicBool>,
    /// The first table of this version whose seek allowance a lookup used up, with its level
    /// (LevelDB's `file_to_compact_`): set once, by the lookup, and compacted down by the
    /// picker. A new version starts without one; the table's next charged lookup sets it
    /// there again (its allowance stays used up: it lives on the table's handle).
    seek_due: OnceLock<(usize, Arc<TableFile>)>,
}

/// The largest user keys of one level's tables, in table order, in one buffer: a get's
/// search of a level reads these few contiguous bytes, which stay cached from get to get,
/// instead of following each table's handle to its metadata and its key's heap buffer (two
/// to three cache misses per step; at 6.3M keys, 400 tables in four levels, the search was
/// ~15 % of a `scree serve` GET's CPU).
#[derive(Default)]
struct Fences {
    bytes: Vec<u8>,
    /// End of each table's key in `bytes`.
    ends: Vec<usize>,
}

impl Fences {
    fn new(files: &[Arc<TableFile>]) -> Fences {
        let mut f = Fences {
            bytes: Vec::with_capacity(files.iter().map(|t| t.meta.largest_user().len()).sum()),
            ends: Vec::with_capacity(files.len()),
        };
        for t in files {
            f.bytes.extend_from_slice(t.meta.largest_user());
            f.ends.push(f.bytes.len());
        }
        f
    }

    /// The key of table `i`.
    fn key(&self, i: usize) -> &[u8] {
        let start = match i.checked_sub(1) {
            Some(p) => self.ends.get(p).copied().unwrap_or(0),
            None => 0,
        };
        let end = self.ends.get(i).copied().unwrap_or(start);
        self.bytes.get(start..end).unwrap_or_default()
    }

    /// The first table whose largest key is ≥ `user_key` (the number of tables if none).
    fn first_at_or_after(&self, user_key: &[u8]) -> usize {
        let (mut lo, mut hi) = (0, self.ends.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.key(mid) < user_key {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }
}

fn level_bytes(files: &[Arc<TableFile>]) -> u64 {
    files.iter().map(|f| f.meta.size).sum()
}

fn overlapping(files: &[Arc<TableFile>], lo: &[u8], hi: &[u8]) -> Vec<Arc<TableFile>> {
    files
        .iter()
        .filter(|f| f.meta.overlaps(Some(lo), Some(hi)))
        .cloned()
        .collect()
}

fn user_range(files: &[Arc<TableFile>]) -> Option<(Vec<u8>, Vec<u8>)> {
    let lo = files.iter().map(|f| f.meta.smallest_user()).min()?;
    let hi = files.iter().map(|f| f.meta.largest_user()).max()?;
    Some((lo.to_vec(), hi.to_vec()))
}

/// Whether no level below `out_level` holds keys in `[lo, hi]`: a merge writing there is
/// bottommost (it may drop tombstones and write sequence number 0). The range must cover every
/// key the merge writes, i.e. all its input tables, including those of the output level.
fn nothing_below(v: &LeveledVersion, out_level: usize, lo: &[u8], hi: &[u8]) -> bool {
    v.levels
        .iter()
        .skip(out_level + 1)
        .all(|files| overlapping(files, lo, hi).is_empty())
}

/// L0 tables that overlap `f` and, in turn, each other (LevelDB's `GetOverlappingInputs` of
/// level 0, whose range grows with each table taken), newest first: the L0 tables a merge of
/// `f` must take along so that no L0 table left behind holds a newer version of a key it
/// moves down.
fn l0_closure(l0: &[Arc<TableFile>], f: &Arc<TableFile>) -> Vec<Arc<TableFile>> {
    let mut lo = f.meta.smallest_user().to_vec();
    let mut hi = f.meta.largest_user().to_vec();
    loop {
        let picked = overlapping(l0, &lo, &hi);
        match user_range(&picked) {
            Some((l, h)) if l < lo || h > hi => (lo, hi) = (l.min(lo), h.max(hi)),
            _ => return picked,
        }
    }
}

impl LeveledVersion {
    fn new(levels: Vec<Vec<Arc<TableFile>>>, charging: Arc<AtomicBool>) -> Self {
        let runs = levels
            .iter()
            .skip(1)
            .map(|l| Arc::from(l.as_slice()))
            .collect();
        let bytes = levels.iter().map(|l| level_bytes(l)).collect();
        let fences = levels.iter().skip(1).map(|l| Fences::new(l)).collect();
        LeveledVersion {
            levels,
            fences,
            runs,
            bytes,
            charging,
            seek_due: OnceLock::new(),
        }
    }

    /// The lookup of [`LevelSplit::lookup_levels`], charging a seek the way LevelDB 1.23's
    /// `Version::Get` does: when it probed a second table, the first table it probed is
    /// charged, found or not (a table is probed when the key lies in its range, even when its
    /// filter then rules the key out: [`Probes`]). With `last_after` the deepest level is
    /// searched apart (parallel search): the lookup then also counts as having gone on to it
    /// when it found nothing here and the deepest level has a table whose range holds the
    /// key, as the sequential lookup would have probed that table next.
    fn lookup_charged(
        &self,
        user_key: &[u8],
        seq: u64,
        with_l0: bool,
        levels: std::ops::Range<usize>,
        last_after: bool,
    ) -> Result<Lookup> {
        let l0 = if with_l0 { self.level(0) } else { &[] };
        let below = levels.filter_map(|l| self.table_for(l, user_key).map(|f| (l, f)));
        if !self.charging.load(Ordering::Relaxed) {
            return get_in_tables(l0.iter().chain(below.map(|(_, f)| f)), user_key, seq);
        }
        let below: smallvec::SmallVec<[(usize, &Arc<TableFile>); 8]> = below.collect();
        let mut probes = Probes::default();
        let found = get_in_tables_probed(
            l0.iter().chain(below.iter().map(|(_, f)| *f)),
            user_key,
            seq,
            &mut probes,
        )?;
        if let Some((i, f)) = probes.first {
            let went_on = probes.count >= 2
                || (last_after
                    && matches!(found, Lookup::Absent)
                    && self.last_holds(user_key, seq));
            let level = match i.checked_sub(l0.len()) {
                None => Some(0),
                Some(j) => below.get(j).map(|(l, _)| *l),
            };
            if let (true, Some(level)) = (went_on, level) {
                self.charge(level, f);
            }
        }
        Ok(found)
    }

    /// Whether the deepest level has a table whose range holds `user_key` at `seq`.
    fn last_holds(&self, user_key: &[u8], seq: u64) -> bool {
        self.table_for(self.deepest_level(), user_key)
            .is_some_and(|f| f.may_hold(user_key, seq))
    }

    /// The one table of level `l` ≥ 1 whose range can hold `user_key`: the first whose
    /// largest key is ≥ it, found in the level's fences.
    fn table_for(&self, l: usize, user_key: &[u8]) -> Option<&Arc<TableFile>> {
        let files = self.level(l);
        let i = match l.checked_sub(1).and_then(|j| self.fences.get(j)) {
            Some(f) => f.first_at_or_after(user_key),
            None => files.partition_point(|f| f.meta.largest_user() < user_key),
        };
        files.get(i)
    }

    /// Charges a seek to `f` of `level`; the first table of this version to use up its
    /// allowance becomes due, and the background threads are asked to look (LevelDB's
    /// `UpdateStats` and `MaybeScheduleCompaction`).
    fn charge(&self, level: usize, f: &Arc<TableFile>) {
        if f.charge_seek()
            && self.seek_due.get().is_none()
            && self.seek_due.set((level, f.clone())).is_ok()
        {
            f.ctx().want_compaction();
        }
    }

    fn bytes_of(&self, l: usize) -> u64 {
        self.bytes.get(l).copied().unwrap_or(0)
    }

    fn level(&self, l: usize) -> &[Arc<TableFile>] {
        self.levels.get(l).map_or(&[], |v| v.as_slice())
    }
}

impl LevelSplit for LeveledVersion {
    fn deepest_level(&self) -> usize {
        (1..self.levels.len())
            .rev()
            .find(|&l| !self.level(l).is_empty())
            .unwrap_or(0)
    }

    fn holds_tables(&self, l: usize) -> bool {
        !self.level(l).is_empty()
    }

    /// L0 newest first, then the one table of each level whose range can hold the key.
    fn lookup_levels(
        &self,
        user_key: &[u8],
        seq: u64,
        with_l0: bool,
        levels: std::ops::Range<usize>,
    ) -> Result<Lookup> {
        self.lookup_charged(user_key, seq, with_l0, levels, false)
    }

    /// The levels above the deepest (parallel search), charging a seek also when the lookup
    /// goes on to the deepest level ([`LeveledVersion::lookup_charged`]).
    fn get_above_last(&self, user_key: &[u8], seq: u64) -> Result<Lookup> {
        self.lookup_charged(user_key, seq, true, 1..self.deepest_level(), true)
    }
}

impl LayoutVersion for LeveledVersion {
    fn get(&self, user_key: &[u8], seq: u64) -> Result<Lookup> {
        self.lookup_levels(user_key, seq, true, 1..self.levels.len())
    }

    /// The deepest non-empty level is the last level (it holds most of the data once the tree
    /// has settled), when some table lies above it.
    fn level_split(&self) -> Option<&dyn LevelSplit> {
        Some(self)
    }

    fn add_iters(&self, out: &mut Vec<Box<dyn InternalIter>>) -> Result<()> {
        for f in self.level(0) {
            out.push(Box::new(f.iter(true)?));
        }
        for run in &self.runs {
            if !run.is_empty() {
                out.push(Box::new(ConcatIter::new(run.clone(), true)));
            }
        }
        Ok(())
    }

    fn apply(&self, edit: &KsEdit, tables: &Arc<TableCtx>) -> Result<Arc<dyn LayoutVersion>> {
        let mut levels = self.levels.clone();
        let removed: HashSet<u64> = edit.removed.iter().copied().collect();
        let mut moved: HashMap<u64, Arc<TableFile>> = HashMap::new();
        for lvl in levels.iter_mut() {
            lvl.retain(|f| {
                if removed.contains(&f.meta.file_no) {
                    moved.insert(f.meta.file_no, f.clone());
                    false
                } else {
                    true
                }
            });
        }
        check_edit_tables(edit, FORMAT_SORTED, |no| moved.contains_key(&no))?;
        // Levels that receive tables; only they need sorting again (removal keeps the order).
        let mut grown = vec![false; levels.len()];
        for a in &edit.added {
            let l = a.level as usize;
            if l >= 64 {
                return Err(Error::InvalidArgument(format!("level {l} out of range")));
            }
            if levels.len() <= l {
                levels.resize(l + 1, Vec::new());
            }
            // A trivial move re-adds a removed file: keep its open handle. LevelDB makes the
            // moved table a new file record with a new seek allowance; so does this.
            let f = match moved.get(&a.meta.file_no) {
                Some(f) => {
                    f.reset_seeks();
                    f.clone()
                }
                None => TableFile::new(a.meta.clone(), tables.clone()),
            };
            if let Some(lv) = levels.get_mut(l) {
                lv.push(f);
            }
            if grown.len() <= l {
                grown.resize(l + 1, false);
            }
            if let Some(g) = grown.get_mut(l) {
                *g = true;
            }
        }
        if let Some(l0) = levels.get_mut(0) {
            l0.sort_by(|a, b| {
                b.meta
                    .max_seq
                    .cmp(&a.meta.max_seq)
                    .then(b.meta.file_no.cmp(&a.meta.file_no))
            });
        }
        // Sorting every level per edit cost O(n log n) comparisons of keys for a store of n
        // tables; untouched levels are sorted already.
        for (lvl, _) in levels
            .iter_mut()
            .zip(grown.iter())
            .skip(1)
            .filter(|(_, &g)| g)
        {
            lvl.sort_by(|a, b| cmp_ikey(&a.meta.smallest, &b.meta.smallest));
        }
        Ok(Arc::new(LeveledVersion::new(levels, self.charging.clone())))
    }

    fn snapshot(&self, out: &mut KsEdit) {
        for (l, files) in self.levels.iter().enumerate() {
            for f in files {
                out.added.push(AddedTable {
                    level: l as u32,
                    slot: 0,
                    format: 0,
                    meta: f.meta.clone(),
                });
            }
        }
    }

    fn files(&self) -> Vec<Arc<TableFile>> {
        self.levels.iter().flatten().cloned().collect()
    }

    fn table_places(&self) -> Vec<TablePlace> {
        let mut out = Vec::new();
        for (l, files) in self.levels.iter().enumerate() {
            for f in files {
                out.push(TablePlace {
                    level: l as u32,
                    place: String::new(),
                    guard: None,
                    file: f.clone(),
                });
            }
        }
        out
    }

    fn level_stats(&self) -> Vec<LevelStats> {
        self.levels
            .iter()
            .enumerate()
            .map(|(l, files)| LevelStats {
                filter_bytes: 0,
                memory: None,
                level: l as u32,
                tables: files.len() as u64,
                bytes: self.bytes_of(l),
                detail: String::new(),
            })
            .collect()
    }

    fn check_invariants(&self) -> std::result::Result<(), String> {
        for (l, files) in self.levels.iter().enumerate().skip(1) {
            for w in files.windows(2) {
                if let [a, b] = w {
                    if a.meta.largest_user() >= b.meta.smallest_user() {
                        return Err(format!(
                            "L{l}: tables {} and {} overlap",
                            a.meta.file_no, b.meta.file_no
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// The leveled policy.
pub struct Leveled {
    busy: Reservations<LevClaim, LeveledVersion>,
    /// Round-robin compaction pointer per level (largest user key compacted last).
    pointers: Mutex<Vec<Vec<u8>>>,
    /// Whether lookups in its versions charge seeks (`LeveledOptions::seek_compaction`).
    charging: Arc<AtomicBool>,
}

impl Leveled {
    /// A policy with `opts`.
    pub fn new() -> Self {
        Leveled {
            busy: Reservations::default(),
            pointers: Mutex::new(Vec::new()),
            charging: Arc::new(AtomicBool::new(LeveledOptions::default().seek_compaction)),
        }
    }

    fn v<'a>(&self, version: &'a Arc<dyn LayoutVersion>) -> Option<&'a LeveledVersion> {
        version.as_any().downcast_ref::<LeveledVersion>()
    }

    /// Levels in order of urgency with score >= 1.
    fn scores(&self, v: &LeveledVersion, o: &LeveledOptions) -> Vec<(f64, usize)> {
        let mut s = Vec::new();
        let l0 = v.level(0).len();
        if l0 >= o.l0_compaction_trigger {
            s.push((l0 as f64 / o.l0_compaction_trigger as f64, 0));
        }
        let levels = o.max_levels.max(v.levels.len());
        for l in 1..levels.saturating_sub(1) {
            let score = v.bytes_of(l) as f64 / max_bytes(o, l) as f64;
            if score >= 1.0 {
                s.push((score, l));
            }
        }
        s.sort_by(|a, b| b.0.total_cmp(&a.0));
        s
    }

    /// The table `v` has due for a seek compaction and its level, when seek compaction is on
    /// and the table is above the last level (a lookup charges only a table it probed before
    /// another, deeper or newer, so this holds but for a version past `max_levels`).
    fn seek_due<'a>(
        &self,
        v: &'a LeveledVersion,
        o: &LeveledOptions,
    ) -> Option<&'a (usize, Arc<TableFile>)> {
        let due = v.seek_due.get().filter(|_| o.seek_compaction)?;
        let levels = o.max_levels.max(v.levels.len());
        (due.0 + 1 < levels).then_some(due)
    }

    /// The seek compaction `v` has due: its table merged into the next level (from L0, with
    /// the L0 tables it overlaps, [`l0_closure`]), as LevelDB's `PickCompaction` does with
    /// `file_to_compact_`. `None` when none is due or its tables are busy.
    fn plan_seek_job(&self, v: &LeveledVersion, o: &LeveledOptions) -> Option<LeveledJob> {
        let (level, f) = self.seek_due(v, o)?;
        let runs = if *level == 0 {
            l0_closure(v.level(0), f)
                .into_iter()
                .map(|t| vec![t])
                .collect()
        } else {
            vec![vec![f.clone()]]
        };
        let mut job = self.plan_job(v, o, *level, runs, None)?;
        job.seek = true;
        Some(job)
    }

    /// Reserves `files` and the output range `[lo, hi]` of `out_level`; `None` when a file is
    /// busy or a running job writes an overlapping range into the same level.
    fn reserve(
        &self,
        files: &[Arc<TableFile>],
        out_level: usize,
        lo: &[u8],
        hi: &[u8],
    ) -> Option<Reservation> {
        let mut t = self.busy.lock();
        let job = t.new_job();
        let mut claims: Vec<LevClaim> = files
            .iter()
            .map(|f| LevClaim::File(f.meta.file_no))
            .collect();
        claims.push(LevClaim::Output {
            level: out_level,
            lo: lo.to_vec(),
            hi: hi.to_vec(),
        });
        if !t.take_all(job, claims) {
            return None;
        }
        drop(t);
        Some(self.busy.hold(job))
    }

    /// The job merging the tables of `runs` from `level` with what they overlap in the next
    /// level (or, with `bottom_level`, into that level alone); `None` when a file is busy.
    /// Each run is sorted and non-overlapping (an L0 table alone, or a deeper level's tables),
    /// and the merge reads it as one source.
    fn plan_job(
        &self,
        v: &LeveledVersion,
        o: &LeveledOptions,
        level: usize,
        runs: Vec<Vec<Arc<TableFile>>>,
        bottom_level: Option<usize>,
    ) -> Option<LeveledJob> {
        let out_level = bottom_level.unwrap_or(level + 1);
        let inputs: Vec<Arc<TableFile>> = runs.iter().flatten().cloned().collect();
        let (lo, hi) = user_range(&inputs)?;
        let next: Vec<Arc<TableFile>> = if bottom_level.is_some() {
            Vec::new()
        } else {
            overlapping(v.level(out_level), &lo, &hi)
        };
        let all: Vec<Arc<TableFile>> = inputs.iter().chain(next.iter()).cloned().collect();
        // The output covers the keys of `next` too, which can reach past the inputs' range.
        let (all_lo, all_hi) = user_range(&all)?;
        let reservation = self.reserve(&all, out_level, &all_lo, &all_hi)?;
        let bottommost = nothing_below(v, out_level, &all_lo, &all_hi);
        let grandparents = overlapping(v.level(out_level + 1), &all_lo, &all_hi);
        if bottom_level.is_none() {
            let mut p = self.pointers.lock();
            if p.len() <= level {
                p.resize(level + 1, Vec::new());
            }
            if let Some(slot) = p.get_mut(level) {
                *slot = hi.clone();
            }
        }
        let mut runs = runs;
        if !next.is_empty() {
            runs.push(next.clone());
        }
        Some(LeveledJob {
            level,
            out_level,
            inputs,
            next,
            runs,
            bottommost,
            grandparents,
            target: o.target_table_bytes,
            subcompactions: o.max_subcompactions,
            seek: false,
            _reservation: reservation,
        })
    }
}

/// What a running job holds: an input file, or the key range it writes into its output level.
/// A job's output tables may span gaps between its inputs (a manual compaction's output spans
/// the whole keyspace); another job must not place a table in such a gap of the same level
/// meanwhile, or the level would hold overlapping tables once both are installed.
enum LevClaim {
    File(u64),
    /// Output level, smallest and largest user key.
    Output {
        level: usize,
        lo: Vec<u8>,
        hi: Vec<u8>,
    },
}

impl Claim for LevClaim {
    fn conflicts(&self, other: &Self) -> bool {
        match (self, other) {
            (LevClaim::File(a), LevClaim::File(b)) => a == b,
            (
                LevClaim::Output { level, lo, hi },
                LevClaim::Output {
                    level: l2,
                    lo: lo2,
                    hi: hi2,
                },
            ) => level == l2 && lo <= hi2 && lo2 <= hi,
            _ => false,
        }
    }
}

/// A leveled job's claims, released when the job is dropped (after its edit is installed, under
/// the engine's pick lock).
type Reservation = reserve::Reservation<LevClaim, LeveledVersion>;

impl Layout for Leveled {
    fn kind(&self) -> LayoutKind {
        LayoutKind::Leveled
    }

    fn table_format(&self) -> u8 {
        FORMAT_SORTED
    }

    fn empty_version(&self, _tables: &Arc<TableCtx>) -> Arc<dyn LayoutVersion> {
        Arc::new(LeveledVersion::new(
            vec![Vec::new(); 2],
            self.charging.clone(),
        ))
    }

    fn flush(
        &self,
        ctx: &JobCtx<'_>,
        _version: &Arc<dyn LayoutVersion>,
        mem: &Memtable,
    ) -> Result<KsEdit> {
        let meta = flush_to_table(ctx, mem)?;
        let mut e = KsEdit::default();
        if let Some(meta) = meta {
            e.added.push(AddedTable {
                level: 0,
                slot: 0,
                format: 0,
                meta,
            });
        }
        Ok(e)
    }

    fn pick(&self, version: &Arc<dyn LayoutVersion>, ctx: &JobCtx<'_>) -> Option<Box<dyn Job>> {
        let v = self.v(version)?;
        let o = &ctx.opts.leveled;
        for (_, level) in self.scores(v, o) {
            if level == 0 {
                // All of L0 at once: taking only some L0 tables could put newer data below
                // older data.
                let runs = v.level(0).iter().map(|f| vec![f.clone()]).collect();
                if let Some(j) = self.plan_job(v, o, 0, runs, None) {
                    return Some(Box::new(j));
                }
                continue;
            }
            let files = v.level(level);
            let ptr = self.pointers.lock().get(level).cloned().unwrap_or_default();
            let start = files.partition_point(|f| f.meta.largest_user() <= ptr.as_slice());
            let order = (start..files.len()).chain(0..start);
            for i in order {
                if let Some(f) = files.get(i) {
                    if let Some(j) = self.plan_job(v, o, level, vec![vec![f.clone()]], None) {
                        return Some(Box::new(j));
                    }
                }
            }
        }
        // Size before seeks, as in LevelDB's `PickCompaction`.
        self.plan_seek_job(v, o)
            .map(|j| Box::new(j) as Box<dyn Job>)
    }

    fn configure(&self, opts: &KeyspaceOptions) {
        self.charging
            .store(opts.leveled.seek_compaction, Ordering::Relaxed);
    }

    fn needs_compaction(&self, version: &Arc<dyn LayoutVersion>, opts: &KeyspaceOptions) -> bool {
        self.v(version).is_some_and(|v| {
            !self.scores(v, &opts.leveled).is_empty() || self.seek_due(v, &opts.leveled).is_some()
        })
    }

    fn manual(
        &self,
        version: &Arc<dyn LayoutVersion>,
        ctx: &JobCtx<'_>,
        scope: &ManualScope,
    ) -> ManualStep {
        let Some(v) = self.v(version) else {
            return ManualStep::Done;
        };
        let Some(deepest) = (0..v.levels.len()).rev().find(|&l| !v.level(l).is_empty()) else {
            return ManualStep::Done;
        };
        // Done once every table in scope sits in one sorted level at the bottom: a single
        // level is "as far as it goes" (a rewrite would not find its garbage cheaply).
        let above = (0..deepest).any(|l| v.level(l).iter().any(|t| scope.contains(t.meta.file_no)));
        let in_deepest = v
            .level(deepest)
            .iter()
            .any(|t| scope.contains(t.meta.file_no));
        if !above && (deepest >= 1 || !in_deepest) {
            return ManualStep::Done;
        }
        // Everything goes into the deepest level in one merge (later data with it: it overlaps):
        // each L0 table a source of its own, each deeper level one sorted source.
        let runs: Vec<Vec<Arc<TableFile>>> = v
            .level(0)
            .iter()
            .map(|f| vec![f.clone()])
            .chain(v.levels.iter().skip(1).filter(|l| !l.is_empty()).cloned())
            .collect();
        match self.plan_job(v, &ctx.opts.leveled, 0, runs, Some(deepest.max(1))) {
            Some(j) => ManualStep::Run(Box::new(j)),
            None => ManualStep::Wait,
        }
    }

    fn pressure(&self, version: &Arc<dyn LayoutVersion>, opts: &KeyspaceOptions) -> Pressure {
        let n = self.v(version).map_or(0, |v| v.level(0).len());
        Pressure::of_backlog(
            n,
            opts.leveled.l0_slowdown_trigger,
            opts.leveled.l0_stop_trigger,
        )
    }
}

impl Default for Leveled {
    fn default() -> Self {
        Self::new()
    }
}

fn max_bytes(o: &LeveledOptions, level: usize) -> u64 {
    let mut b = o.level_base_bytes;
    for _ in 1..level {
        b = b.saturating_mul(o.level_size_ratio);
    }
    b
}

/// Stops an output table at the target size or when it would overlap too much of the level
/// below the output (LevelDB's grandparent rule: 10 × target).
struct LeveledCutter {
    size: SizeCutter,
    grandparents: Vec<Arc<TableFile>>,
    gp_index: usize,
    overlap: u64,
    limit: u64,
    started: bool,
}

impl Cutter for LeveledCutter {
    fn cut_before(&mut self, user_key: &[u8], current_bytes: u64) -> bool {
        while let Some(g) = self.grandparents.get(self.gp_index) {
            if g.meta.largest_user() >= user_key {
                break;
            }
            if self.started {
                self.overlap += g.meta.size;
            }
            self.gp_index += 1;
        }
        self.started = true;
        if self.size.cut_before(user_key, current_bytes) || self.overlap > self.limit {
            self.overlap = 0;
            return true;
        }
        false
    }
}

struct LeveledJob {
    level: usize,
    out_level: usize,
    inputs: Vec<Arc<TableFile>>,
    next: Vec<Arc<TableFile>>,
    /// `inputs` and `next` as the sorted runs the merge reads, one source each: a merge over
    /// one source per table compared every L1 table's key at each entry.
    runs: Vec<Vec<Arc<TableFile>>>,
    bottommost: bool,
    grandparents: Vec<Arc<TableFile>>,
    target: u64,
    /// Most key ranges a merge out of L0 is split into (`LeveledOptions::max_subcompactions`).
    subcompactions: usize,
    /// Started by a table's used-up seek allowance (counted in the stats' seek compactions).
    seek: bool,
    _reservation: Reservation,
}

impl LeveledJob {
    /// The key ranges the merge is split into: one (all keys) unless it comes out of L0 and
    /// sub-compactions are allowed, then up to `subcompactions` of about equal input bytes,
    /// each worth at least four output tables.
    fn ranges(&self) -> Result<Vec<KeyRange>> {
        if self.level != 0 || self.subcompactions <= 1 {
            return Ok(key_ranges(&[]));
        }
        let all: Vec<Arc<TableFile>> = self
            .inputs
            .iter()
            .chain(self.next.iter())
            .cloned()
            .collect();
        let bounds = split_keys(&all, self.subcompactions, self.target.saturating_mul(4))?;
        Ok(key_ranges(&bounds))
    }
}

/// What each part of a job's merge reads (the job itself holds its reservation, which
/// parts on other threads must not share).
struct MergeSpec<'a> {
    runs: &'a [Vec<Arc<TableFile>>],
    grandparents: &'a [Arc<TableFile>],
    target: u64,
    bottommost: bool,
    zeroed_max: u64,
}

impl MergeSpec<'_> {
    /// The merge of the inputs' keys in `range` into output tables.
    fn merge_range(&self, ctx: &JobCtx<'_>, range: &KeyRange) -> Result<Vec<TableMeta>> {
        let mut children: Vec<Box<dyn InternalIter>> = Vec::with_capacity(self.runs.len());
        for run in self.runs {
            match run.as_slice() {
                [one] => children.push(Box::new(one.iter(false)?)),
                _ => children.push(Box::new(ConcatIter::new(run.clone(), false))),
            }
        }
        let mut it = BoundedIter::new(MergingIter::new(children), range.0.clone(), range.1.clone());
        let mut cutter = LeveledCutter {
            size: SizeCutter(self.target),
            grandparents: self.grandparents.to_vec(),
            gp_index: 0,
            overlap: 0,
            limit: self.target.saturating_mul(10),
            started: false,
        };
        merge_into_tables(
            ctx,
            &mut it,
            self.bottommost,
            self.zeroed_max,
            &mut cutter,
            WriteCause::Compaction,
        )
    }
}

impl Job for LeveledJob {
    fn is_trivial(&self) -> bool {
        self.inputs.len() == 1
            && self.next.is_empty()
            && self.level + 1 == self.out_level
            && level_bytes(&self.grandparents) <= self.target.saturating_mul(10)
    }

    fn run(&mut self, ctx: &JobCtx<'_>) -> Result<KsEdit> {
        let e = self.run_job(ctx)?;
        if self.seek {
            let written: u64 = if self.is_trivial() {
                0
            } else {
                e.added.iter().map(|a| a.meta.size).sum()
            };
            ctx.stats.seek_compactions.fetch_add(1, Ordering::Relaxed);
            ctx.stats
                .seek_compaction_bytes
                .fetch_add(written, Ordering::Relaxed);
        }
        Ok(e)
    }
}

impl LeveledJob {
    /// The merge (or move) itself, and the edit installing it.
    fn run_job(&mut self, ctx: &JobCtx<'_>) -> Result<KsEdit> {
        let mut e = KsEdit::default();
        if self.is_trivial() {
            for f in &self.inputs {
                e.removed.push(f.meta.file_no);
                e.added.push(AddedTable {
                    level: self.out_level as u32,
                    slot: 0,
                    format: 0,
                    meta: f.meta.clone(),
                });
            }
            return Ok(e);
        }
        let ranges = self.ranges()?;
        let spec = MergeSpec {
            runs: &self.runs,
            grandparents: &self.grandparents,
            target: self.target,
            bottommost: self.bottommost,
            zeroed_max: zeroed_bound(self.inputs.iter().chain(self.next.iter())),
        };
        let parts = run_parts(&ranges, &|r: &KeyRange| spec.merge_range(ctx, r))?;
        ctx.stats
            .subcompactions
            .fetch_add(ranges.len().saturating_sub(1) as u64, Ordering::Relaxed);
        let outs: Vec<TableMeta> = parts.into_iter().flatten().collect();
        for f in self.inputs.iter().chain(self.next.iter()) {
            e.removed.push(f.meta.file_no);
        }
        for meta in outs {
            e.added.push(AddedTable {
                level: self.out_level as u32,
                slot: 0,
                format: 0,
                meta,
            });
        }
        Ok(e)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use std::sync::atomic::AtomicU64;

    use super::{Leveled, LeveledVersion};
    use crate::layout::{JobCtx, Layout, LayoutVersion, ManualScope, ManualStep};
    use crate::manifest::edit::{AddedTable, KsEdit};
    use crate::options::LeveledOptions;
    use crate::options::{KeyspaceOptions, Layout as LayoutKind};
    use crate::table::test_support::{metadata_only_ctx as ctx, metadata_only_table};

    fn table(level: u32, no: u64, lo: &str, hi: &str, seq: u64) -> AddedTable {
        metadata_only_table(level, no, lo, hi, (seq, seq), 100)
    }

    fn version(tables: Vec<AddedTable>) -> Arc<dyn LayoutVersion> {
        let t = ctx();
        let e = KsEdit {
            added: tables,
            ..KsEdit::default()
        };
        Leveled::new()
            .empty_version(&t)
            .apply(&e, &t)
            .expect("apply")
    }

    /// A level's fences find the table a get searches, as a search of the tables' own
    /// largest keys does (the model), for keys before, between, equal to and after them,
    /// with keys of different lengths and prefixes of one another.
    #[test]
    fn fences_find_the_table_the_largest_keys_find() {
        // xorshift64: a fixed seed, so a failure repeats.
        let mut state = 0x5eed_f3c5_u64;
        let mut below = |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % n
        };
        for n in [0usize, 1, 2, 3, 7, 64, 257] {
            // n tables over sorted, distinct, non-overlapping ranges.
            let mut keys: Vec<Vec<u8>> = (0..2 * n)
                .map(|_| {
                    let len = 1 + below(6) as usize;
                    (0..len).map(|_| b'a' + below(4) as u8).collect()
                })
                .collect();
            keys.sort();
            keys.dedup();
            let tables: Vec<AddedTable> = keys
                .chunks_exact(2)
                .enumerate()
                .map(|(i, r)| {
                    let (lo, hi) = (
                        String::from_utf8_lossy(&r[0]),
                        String::from_utf8_lossy(&r[1]),
                    );
                    table(1, i as u64 + 1, &lo, &hi, 5)
                })
                .collect();
            let t = ctx();
            let v = Leveled::new()
                .empty_version(&t)
                .apply(
                    &KsEdit {
                        added: tables,
                        ..KsEdit::default()
                    },
                    &t,
                )
                .expect("apply");
            let v = v
                .as_any()
                .downcast_ref::<LeveledVersion>()
                .expect("a leveled version");
            let files = v.level(1);
            let fences = v.fences.first().expect("level 1 fences");
            let mut probes: Vec<Vec<u8>> = keys.clone();
            for _ in 0..200 {
                let len = below(7) as usize;
                probes.push((0..len).map(|_| b'a' + below(5) as u8).collect());
            }
            for p in &probes {
                let model = files.partition_point(|f| f.meta.largest_user() < p.as_slice());
                assert_eq!(fences.first_at_or_after(p), model, "{n} tables, key {p:?}");
            }
        }
    }

    /// Parallel search probes the deepest non-empty level beside the levels above it, and
    /// only when some table lies above it.
    #[test]
    fn the_last_level_is_distinct_only_below_other_tables() {
        let distinct = |tables: Vec<AddedTable>| version(tables).has_distinct_last_level();
        assert!(!distinct(vec![]));
        assert!(!distinct(vec![table(0, 1, "a", "z", 5)]));
        assert!(!distinct(vec![table(3, 1, "a", "z", 5)]));
        assert!(distinct(vec![
            table(0, 2, "a", "c", 9),
            table(3, 1, "a", "z", 5)
        ]));
        assert!(distinct(vec![
            table(1, 2, "a", "c", 9),
            table(3, 1, "a", "z", 5)
        ]));
        assert!(!distinct(vec![
            table(3, 2, "a", "c", 9),
            table(3, 1, "d", "z", 5)
        ]));
    }

    /// Found by the concurrency test (a snapshot read twice differed, scans lost money): an
    /// L0 table [m, n] merged with the L1 table [a, z] it overlaps was called bottommost because
    /// nothing below overlapped [m, n], yet L2 held an older "b". The output's "b" was written
    /// with sequence number 0 above it (and a tombstone of "b" would have been dropped), so scans
    /// and later merges took the older value.
    #[test]
    fn a_merge_is_bottommost_only_if_nothing_lies_below_any_of_its_tables() {
        let v = version(vec![
            table(2, 1, "b", "c", 5),
            table(1, 2, "a", "z", 10),
            table(0, 3, "m", "n", 20),
        ]);
        let lv: &LeveledVersion = v.as_any().downcast_ref().expect("leveled");
        let policy = Leveled::new();
        let o = LeveledOptions::default();
        let l0 = lv.level(0).iter().map(|f| vec![f.clone()]).collect();
        let job = policy.plan_job(lv, &o, 0, l0, None).expect("job");
        assert_eq!(job.next.len(), 1, "L1's [a, z] is merged");
        assert!(
            !job.bottommost,
            "L2 holds an older b inside the output's range"
        );
        assert_eq!(job.grandparents.len(), 1);
        drop(job);
        // Without the L2 table the same merge is bottommost.
        let v = version(vec![table(1, 2, "a", "z", 10), table(0, 3, "m", "n", 20)]);
        let lv: &LeveledVersion = v.as_any().downcast_ref().expect("leveled");
        let l0 = lv.level(0).iter().map(|f| vec![f.clone()]).collect();
        let job = policy.plan_job(lv, &o, 0, l0, None).expect("job");
        assert!(job.bottommost);
    }

    /// LevelDB's seek compaction as a function of the version: the first table to use up its
    /// allowance (100 seeks for a small table) is due; the picker takes size work first, then
    /// merges the due table into the next level (from L0 with the L0 tables it overlaps, in
    /// turn), never out of the last level and not with the option off; a move gives the table
    /// a new allowance, and a new version starts with nothing due.
    #[test]
    fn a_table_that_used_up_its_seeks_is_compacted_into_the_next_level() {
        let t = ctx();
        let next = AtomicU64::new(100);
        let mut opts = KeyspaceOptions::new(LayoutKind::Leveled);
        opts.leveled.max_levels = 4;
        let stats = Arc::default();
        let policy = Leveled::new();
        // Four L0 tables (the size trigger) away from an L1 table above an L2 table.
        let v = policy
            .empty_version(&t)
            .apply(
                &KsEdit {
                    added: vec![
                        table(2, 1, "a", "z", 1),
                        table(1, 2, "a", "c", 5),
                        table(0, 3, "m", "n", 20),
                        table(0, 4, "n", "p", 21),
                        table(0, 5, "o", "q", 22),
                        table(0, 6, "x", "y", 23),
                    ],
                    ..KsEdit::default()
                },
                &t,
            )
            .expect("apply");
        let l: &LeveledVersion = v.as_any().downcast_ref().expect("leveled");
        let l1 = l.level(1)[0].clone();
        assert_eq!(l1.seeks_left(), 100, "max(100, 100 bytes / 16 KiB)");
        for _ in 0..99 {
            l.charge(1, &l1);
        }
        assert!(l.seek_due.get().is_none(), "one seek left");
        assert!(policy.seek_due(l, &opts.leveled).is_none());
        l.charge(1, &l1);
        assert_eq!(l1.seeks_left(), 0);
        assert!(
            t.take_compaction_wanted(),
            "the background is asked to look"
        );
        assert!(!t.take_compaction_wanted(), "once");
        let due = policy.seek_due(l, &opts.leveled).expect("due");
        assert_eq!((due.0, due.1.meta.file_no), (1, 2));
        // Size first: the pick is the L0 merge (its files are not the seek job's), after
        // which the seek job can still be planned; it merges L1's table into L2's.
        let jc = JobCtx {
            tables: &t,
            next_file: &next,
            smallest_snapshot: 0,
            opts: &opts,
            stats: &stats,
            hash_key: [0; 16],
            flush_point: None,
        };
        let size_job = policy.pick(&v, &jc).expect("the L0 merge");
        let job = policy.plan_seek_job(l, &opts.leveled).expect("seek job");
        assert!(job.seek);
        assert_eq!((job.level, job.out_level), (1, 2));
        let nos = |fs: &[Arc<crate::table::TableFile>]| -> Vec<u64> {
            fs.iter().map(|f| f.meta.file_no).collect()
        };
        assert_eq!((nos(&job.inputs), nos(&job.next)), (vec![2], vec![1]));
        drop((size_job, job));
        assert!(policy.needs_compaction(&v, &opts));
        // Off: nothing due, nothing picked for it.
        let mut off = opts.clone();
        off.leveled.seek_compaction = false;
        off.leveled.l0_compaction_trigger = 10;
        assert!(!policy.needs_compaction(&v, &off));
        assert!(policy.plan_seek_job(l, &off.leveled).is_none());
        // A move of the table (into L3) starts its allowance again; the new version has
        // nothing due.
        let moved = v
            .apply(
                &KsEdit {
                    removed: vec![2],
                    added: vec![table(3, 2, "a", "c", 5)],
                    ..KsEdit::default()
                },
                &t,
            )
            .expect("apply");
        let m: &LeveledVersion = moved.as_any().downcast_ref().expect("leveled");
        assert!(Arc::ptr_eq(&m.level(3)[0], &l1), "the same handle");
        assert_eq!(l1.seeks_left(), 100);
        assert!(m.seek_due.get().is_none());
        // In the last level (L3 of 4) a used-up table is never due.
        for _ in 0..100 {
            m.charge(3, &l1);
        }
        assert!(m.seek_due.get().is_some());
        assert!(policy.seek_due(m, &opts.leveled).is_none());
        let mut no_l0 = opts.clone();
        no_l0.leveled.l0_compaction_trigger = 10;
        assert!(!policy.needs_compaction(&moved, &no_l0));

        // From L0: the due table takes along the L0 tables it overlaps, in turn ([a, c]
        // overlaps [b, e], which overlaps [d, f]), not [x, z]; L1's [e, g] joins the merge.
        let v = policy
            .empty_version(&t)
            .apply(
                &KsEdit {
                    added: vec![
                        table(1, 7, "e", "g", 1),
                        table(0, 8, "a", "c", 20),
                        table(0, 9, "b", "e", 21),
                        table(0, 10, "d", "f", 22),
                        table(0, 11, "x", "z", 23),
                    ],
                    ..KsEdit::default()
                },
                &t,
            )
            .expect("apply");
        let l: &LeveledVersion = v.as_any().downcast_ref().expect("leveled");
        let first = l
            .level(0)
            .iter()
            .find(|f| f.meta.file_no == 8)
            .cloned()
            .expect("table 8");
        for _ in 0..100 {
            l.charge(0, &first);
        }
        let job = policy.plan_seek_job(l, &no_l0.leveled).expect("seek job");
        let mut inputs = nos(&job.inputs);
        inputs.sort_unstable();
        assert_eq!(
            (job.level, inputs, nos(&job.next)),
            (0, vec![8, 9, 10], vec![7])
        );
    }

    /// A table's user keys, each with its sequence number and whether it is a tombstone.
    type Entries = Vec<(String, u64, bool)>;
    /// Internal keys and values.
    type Written = Vec<(Vec<u8>, Vec<u8>)>;

    /// Real tables for the sub-compaction tests: each of `tables` is (level, entries),
    /// written with 256-byte blocks.
    fn real_version(
        ctx: &Arc<crate::table::TableCtx>,
        tables: &[(u32, Entries)],
    ) -> Arc<dyn LayoutVersion> {
        use crate::key::{make_ikey, ValueKind};
        use crate::stats::WriteCause;
        use crate::table::{table_path, TableBuilder};
        let mut added = Vec::new();
        for (i, (level, entries)) in tables.iter().enumerate() {
            let no = i as u64 + 1;
            let w = ctx
                .env
                .create(&table_path(&ctx.dir, no), WriteCause::Flush)
                .expect("create");
            let mut b = TableBuilder::new(w, no, 256, 10);
            let mut sorted = entries.clone();
            sorted.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
            for (k, seq, del) in &sorted {
                let kind = if *del {
                    ValueKind::Delete
                } else {
                    ValueKind::Put
                };
                let v = if *del {
                    String::new()
                } else {
                    format!("{k}@{seq}:{}", "v".repeat(40))
                };
                b.add(&make_ikey(k.as_bytes(), *seq, kind), v.as_bytes())
                    .expect("add");
            }
            added.push(AddedTable {
                level: *level,
                slot: 0,
                format: 0,
                meta: b.finish().expect("finish"),
            });
        }
        let e = KsEdit {
            added,
            ..KsEdit::default()
        };
        Leveled::new()
            .empty_version(ctx)
            .apply(&e, ctx)
            .expect("apply")
    }

    /// Every entry of `v`'s level `level`, in order, as (internal key, value).
    fn level_entries(v: &Arc<dyn LayoutVersion>, level: usize) -> Written {
        use crate::iter::InternalIter;
        let lv: &LeveledVersion = v.as_any().downcast_ref().expect("leveled");
        let mut out = Vec::new();
        for f in lv.level(level) {
            let mut it = f.iter(false).expect("iter");
            it.seek_to_first().expect("seek");
            while it.valid() {
                out.push((it.key().to_vec(), it.value().to_vec()));
                it.next().expect("next");
            }
        }
        out
    }

    /// The L0→L1 merge of `v` with at most `parts` sub-compactions, as the version after its
    /// edit, the number of parts beyond the first, and the merged level's entries.
    fn merge_l0(
        ctx: &Arc<crate::table::TableCtx>,
        v: &Arc<dyn LayoutVersion>,
        next: &AtomicU64,
        parts: usize,
        smallest_snapshot: u64,
    ) -> (Arc<dyn LayoutVersion>, u64, Written) {
        use crate::layout::Job;
        let mut opts = KeyspaceOptions::new(LayoutKind::Leveled);
        opts.leveled.target_table_bytes = 4096;
        opts.leveled.max_subcompactions = parts;
        opts.block_size = 256;
        let stats: Arc<crate::stats::IoStats> = Arc::default();
        let jc = JobCtx {
            tables: ctx,
            next_file: next,
            smallest_snapshot,
            opts: &opts,
            stats: &stats,
            hash_key: [0; 16],
            flush_point: None,
        };
        let lv: &LeveledVersion = v.as_any().downcast_ref().expect("leveled");
        let policy = Leveled::new();
        let l0 = lv.level(0).iter().map(|f| vec![f.clone()]).collect();
        let mut job = policy
            .plan_job(lv, &opts.leveled, 0, l0, None)
            .expect("job");
        let edit = job.run(&jc).expect("run");
        drop(job);
        let after = v.apply(&edit, ctx).expect("apply");
        after.check_invariants().expect("L1 sorted, no overlap");
        let split = stats
            .subcompactions
            .load(std::sync::atomic::Ordering::Relaxed);
        let entries = level_entries(&after, 1);
        (after, split, entries)
    }

    /// Three L0 tables over the whole key space (overwrites and tombstones, some newer than
    /// the snapshot) and an L1 of three tables: the merge split in up to four parts writes
    /// exactly the entries of the merge in one part, in order, into L1 tables that do not
    /// overlap (every key in exactly one part), for any snapshot.
    #[test]
    fn a_merge_split_into_parts_writes_what_the_whole_merge_writes() {
        let dir = tempfile::tempdir().expect("dir");
        let t = crate::table::test_support::std_ctx(dir.path(), 0);
        let key = |i: u32| format!("k{i:05}");
        let mut tables: Vec<(u32, Entries)> = Vec::new();
        // L1: three sorted tables of every third key, sequence numbers 1..
        for part in 0..3u32 {
            let entries = (part * 1000..(part + 1) * 1000)
                .filter(|i| i % 3 == 0)
                .map(|i| (key(i), u64::from(i) + 1, false))
                .collect();
            tables.push((1, entries));
        }
        // L0: overwrites of every 5th, 7th and 11th key, tombstones among them.
        for (n, step) in [5u32, 7, 11].into_iter().enumerate() {
            let entries = (0..3000)
                .filter(|i| i % step == 0)
                .map(|i| {
                    let seq = 10_000 * (n as u64 + 1) + u64::from(i);
                    (key(i), seq, i % 4 == 0)
                })
                .collect();
            tables.push((0, entries));
        }
        let v = real_version(&t, &tables);
        let next = AtomicU64::new(100);
        for snapshot in [u64::MAX >> 8, 15_000, 0] {
            let (_, split, whole) = merge_l0(&t, &v, &next, 1, snapshot);
            assert_eq!(split, 0);
            assert!(!whole.is_empty());
            for parts in [2, 4] {
                let (after, split, got) = merge_l0(&t, &v, &next, parts, snapshot);
                assert_eq!(
                    split,
                    parts as u64 - 1,
                    "{parts} parts at snapshot {snapshot}"
                );
                assert!(
                    got == whole,
                    "{parts} parts at snapshot {snapshot}: {} entries, the whole merge {}",
                    got.len(),
                    whole.len()
                );
                let lv: &LeveledVersion = after.as_any().downcast_ref().expect("leveled");
                assert!(lv.level(0).is_empty());
                assert!(lv.level(1).len() >= parts);
            }
        }
    }

    /// `Db::compact` answers for the tables present at its call (and what is made from
    /// them): later tables above them never make it due, so writes that go on cannot keep it
    /// from returning (otherwise it would loop for as long as writes kept coming).
    #[test]
    fn a_manual_compaction_is_due_only_for_tables_in_its_scope() {
        let t = ctx();
        let next = AtomicU64::new(100);
        let opts = KeyspaceOptions::new(LayoutKind::Leveled);
        let stats = Arc::default();
        let jc = JobCtx {
            tables: &t,
            next_file: &next,
            smallest_snapshot: 0,
            opts: &opts,
            stats: &stats,
            hash_key: [0; 16],
            flush_point: None,
        };
        let policy = Leveled::new();
        let due = |v: &Arc<dyn LayoutVersion>, scope: &[u64]| {
            matches!(
                policy.manual(v, &jc, &ManualScope::new(scope.iter().copied())),
                ManualStep::Run(_)
            )
        };
        // Compacted data at the bottom, a later table in L0.
        let v = version(vec![
            table(2, 1, "a", "m", 5),
            table(2, 2, "n", "z", 5),
            table(0, 3, "c", "d", 20),
        ]);
        assert!(!due(&v, &[1, 2]), "the later L0 table is not its work");
        assert!(due(&v, &[1, 2, 3]), "present at the call, it goes down");
        assert!(!due(&v, &[]));
        // A table in scope above the bottom makes it due, whatever else lies there.
        let v = version(vec![table(2, 1, "a", "m", 5), table(1, 2, "n", "z", 9)]);
        assert!(due(&v, &[2]));
        assert!(!due(&v, &[1]));
        // A single level 0 in scope still goes to level 1.
        let v = version(vec![table(0, 1, "a", "m", 5)]);
        assert!(due(&v, &[1]));
    }
}
