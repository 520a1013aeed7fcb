//! One version of a `semisorted` keyspace: stepped levels of sub-levels (newest first), each
//! sub-level a run of semi-sorted tables partitioned by prefix-hash range, and each level's
//! multi-level cuckoo filter (SlimDB §3.2) saying which sub-level holds a key's newest version.
//! Also the open-table handle kept in a [`TableFile`]'s `aux` slot, and the state the policy
//! and every version share (filters jobs built, waiting for the version that installs them).
//!
//! **Filter ids.** Within a level, a sub-level's filter id is its position counted from the
//! oldest (0). When sub-levels retire or merge, [`MultiLevelCuckoo::remap`] renumbers them.
//! A level's filter is rebuilt from its tables when it is missing (after a reopen, or when a
//! change arrived without one); until then lookups probe every sub-level of that level.

use std::any::Any;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::{Mutex, RwLock};

use super::table::{hashes, SemiReader, EXT, FORMAT_SEMISORTED};
use crate::error::{Error, Result};
use crate::filter::cuckoo::{split_hash, Answer, MultiLevelCuckoo};
use crate::iter::{InternalIter, VecIter};
use crate::key::cmp_ikey;
use crate::layout::{check_edit_tables, LayoutVersion, TablePlace};
use crate::manifest::edit::KsEdit;
use crate::memtable::{FirstLevel, Lookup};
use crate::options::LevelPlan;
use crate::stats::{LevelMemory, LevelReads, LevelStats, Pinned, ReadKind};
use crate::table::{TableAux, TableCtx, TableFile};

/// Deepest level counted.
pub const MAX_LEVELS: usize = 16;

/// The open state of a table: its reader (footer and decoded index), which the open-table
/// bound may close.
#[derive(Default)]
pub struct SemiHandle {
    open: RwLock<Option<Arc<OpenSemi>>>,
}

/// An open table, counted in `Stats::open_table_files` and `table_reader_bytes` while it lives.
pub struct OpenSemi {
    /// The reader.
    pub reader: SemiReader,
    /// The heap bytes `_pinned` counts (the reader's `memory_bytes` at its open).
    bytes: usize,
    _pinned: Pinned,
}

impl TableAux for SemiHandle {
    fn close(&self) {
        self.open.write().take();
    }
}

/// `f`'s open reader, if it has one.
fn open_reader(f: &TableFile) -> Option<Arc<OpenSemi>> {
    let h = f.aux.get()?;
    let h = (h.as_ref() as &dyn Any).downcast_ref::<SemiHandle>()?;
    let open = h.open.read().clone();
    open
}

/// Adds what the live table `f`'s open reader (if any) pins to `m`: the bytes it was counted
/// with in `Stats::table_reader_bytes`, and its index's by level.
fn add_reader_memory(m: &mut LevelMemory, f: &TableFile) {
    let Some(open) = open_reader(f) else {
        return;
    };
    m.open_readers += 1;
    m.reader_bytes += open.bytes as u64;
    if let Some(i) = open.reader.pinned_index() {
        let h = i.heap_bytes();
        m.pinned_indexes += 1;
        m.pinned_index_entries += f.meta.entries;
        m.index_bytes += h.total() as u64;
        m.index_level1_bytes += h.level1 as u64;
        m.index_dir_bytes += h.level1_dir as u64;
        m.index_level2_bytes += h.level2 as u64;
        m.index_level3_bytes += h.level3 as u64;
    }
}

/// The open reader of `f` (opened on first use and after the bound closed it), its index
/// pinned when `pin_index` (the level's plan) at that open.
pub fn reader_of(f: &TableFile, pin_index: bool) -> Result<Arc<OpenSemi>> {
    let h = f.aux.get_or_init(|| Arc::new(SemiHandle::default()));
    let h = (h.as_ref() as &dyn Any)
        .downcast_ref::<SemiHandle>()
        .ok_or_else(|| {
            Error::InvalidArgument(format!("table {:06} is not semi-sorted", f.meta.file_no))
        })?;
    if let Some(r) = h.open.read().clone() {
        // A reader opened without its index (by a compaction) serves a lookup that wants it
        // pinned only until replaced below.
        if !pin_index || r.reader.pinned_index().is_some() {
            f.touch();
            return Ok(r);
        }
    }
    let file = f.open_file()?;
    let stats = file.io_stats().clone();
    let reader = SemiReader::open(file, ReadKind::Metadata, pin_index)?
        .cached(f.ctx().cache.clone(), f.meta.file_no);
    let bytes = reader.memory_bytes();
    let open = Arc::new(OpenSemi {
        reader,
        bytes,
        _pinned: Pinned::new(stats, bytes),
    });
    {
        let mut slot = h.open.write();
        if let Some(other) = &*slot {
            if !pin_index || other.reader.pinned_index().is_some() {
                return Ok(other.clone());
            }
        }
        *slot = Some(open.clone());
    }
    f.opened();
    Ok(open)
}

/// A filter a job built for a level: for the sub-levels `base` (slots, oldest first) and the
/// new sub-level `added` as the newest.
pub struct PendingFilter {
    /// Level.
    pub level: u32,
    /// Slots the filter's ids `0..base.len()` name.
    pub base: Vec<u64>,
    /// The new sub-level (id `base.len()`).
    pub added: u64,
    /// The filter.
    pub filter: MultiLevelCuckoo,
}

/// State shared by the policy and every version of one keyspace.
pub struct Shared {
    /// Bytes of each key's prefix.
    pub prefix_len: usize,
    /// The database's hash key.
    pub hash_key: [u8; 16],
    /// Filters built by jobs, by the slot of the sub-level they add (or, for a rebuild, by a
    /// key the record names), adopted by the version that installs the edit.
    pub pending: Mutex<HashMap<u64, PendingFilter>>,
    /// Data blocks read by point lookups, per level.
    pub reads: [AtomicU64; MAX_LEVELS],
    /// Filter rebuilds finished, per level (a level's filter is rebuilt only when a change
    /// arrived without it: after a reopen, or when it was lost).
    pub rebuilds: [AtomicU64; MAX_LEVELS],
    /// Each level's structure (the keyspace's options, taken at every `configure`).
    pub plan: RwLock<Vec<LevelPlan>>,
    /// Levels whose filter rebuild met a damaged table, with their newest sub-level's slot
    /// then: not rebuilt again until that changes.
    pub rebuild_failed: Mutex<HashMap<usize, u64>>,
}

impl Shared {
    /// Fresh state.
    pub fn new(prefix_len: usize, hash_key: [u8; 16]) -> Arc<Shared> {
        Arc::new(Shared {
            prefix_len,
            hash_key,
            pending: Mutex::new(HashMap::new()),
            reads: Default::default(),
            rebuilds: Default::default(),
            plan: RwLock::new(Vec::new()),
            rebuild_failed: Mutex::new(HashMap::new()),
        })
    }

    /// Whether level `l`'s missing filter may be rebuilt: its structure has one, and no
    /// rebuild failed on a damaged table since its newest sub-level (`newest`) arrived.
    pub fn may_rebuild(&self, l: usize, newest: u64) -> bool {
        self.plan_of(l).filter && self.rebuild_failed.lock().get(&l) != Some(&newest)
    }

    /// The structure of level `l`.
    pub fn plan_of(&self, l: usize) -> LevelPlan {
        let p = self.plan.read();
        p.get(l).or(p.last()).copied().unwrap_or(LevelPlan::FULL)
    }
}

/// A key's (prefix hash, suffix hash).
pub type Hashes = (u64, u64);

/// One sub-level: tables sorted by prefix-hash range, not overlapping.
pub struct Sub {
    /// Its number in the manifest (the file number of its first table when written).
    pub slot: u64,
    /// Its tables.
    pub tables: Vec<Arc<TableFile>>,
    /// Each table's first and last entry's (prefix hash, suffix hash). A prefix group may
    /// continue from one table into the next (a group larger than a table).
    pub bounds: Vec<(Hashes, Hashes)>,
    /// Largest sequence number inside.
    pub max_seq: u64,
}

impl Sub {
    /// Bytes of its tables.
    pub fn bytes(&self) -> u64 {
        self.tables.iter().map(|t| t.meta.size).sum()
    }
    /// Entries in its tables.
    pub fn entries(&self) -> u64 {
        self.tables.iter().map(|t| t.meta.entries).sum()
    }
    /// The tables that may hold keys of hashes `h` (one, unless entries of those hashes
    /// continue across a table boundary).
    pub fn tables_for(&self, h: (u64, u64)) -> impl Iterator<Item = &Arc<TableFile>> {
        let i = self.bounds.partition_point(|b| b.1 < h);
        self.bounds
            .iter()
            .zip(&self.tables)
            .skip(i)
            .take_while(move |(b, _)| b.0 <= h)
            .map(|(_, t)| t)
    }

    /// The tables that may hold keys of prefix hash `ph`.
    pub fn tables_of_group(&self, ph: u64) -> impl Iterator<Item = &Arc<TableFile>> {
        let i = self.bounds.partition_point(|b| b.1 .0 < ph);
        self.bounds
            .iter()
            .zip(&self.tables)
            .skip(i)
            .take_while(move |(b, _)| b.0 .0 <= ph)
            .map(|(_, t)| t)
    }
}

/// One stepped level.
#[derive(Clone, Default)]
pub struct Level {
    /// Sub-levels, newest first.
    pub subs: Vec<Arc<Sub>>,
    /// The filter installed with the level's last change, `None` when that change came
    /// without one (then [`Level::rebuilt`] may hold it).
    pub filter: Option<Arc<MultiLevelCuckoo>>,
    /// The filter a rebuild made for exactly these sub-levels, shared by every version in
    /// which the level is unchanged: a rebuild changes nothing the manifest records, so it
    /// sets this instead of installing an edit. A change of the level starts a new slot.
    pub rebuilt: Arc<OnceLock<Arc<MultiLevelCuckoo>>>,
}

impl Level {
    /// Slots oldest first (the filter's id order).
    pub fn slots(&self) -> Vec<u64> {
        self.subs.iter().rev().map(|s| s.slot).collect()
    }
    /// The level's filter: installed, or rebuilt since; `None` while missing (lookups probe
    /// every sub-level).
    pub fn filter(&self) -> Option<&Arc<MultiLevelCuckoo>> {
        self.filter.as_ref().or(self.rebuilt.get())
    }

    /// Entries in the level.
    pub fn entries(&self) -> u64 {
        self.subs.iter().map(|s| s.entries()).sum()
    }
}

/// A version of a `semisorted` keyspace.
pub struct SemiVersion {
    /// Shared state.
    pub shared: Arc<Shared>,
    /// Levels, 0 newest.
    pub levels: Vec<Level>,
    /// Every live table: (level, slot).
    pub files: HashMap<u64, (u32, u64)>,
    /// Counts versions (a job planned on an older one is refused).
    pub gen: u64,
}

fn bad(msg: String) -> Error {
    Error::InvalidArgument(format!("semisorted edit: {msg}"))
}

impl SemiVersion {
    /// An empty version.
    pub fn empty(shared: Arc<Shared>) -> SemiVersion {
        SemiVersion {
            shared,
            levels: Vec::new(),
            files: HashMap::new(),
            gen: 0,
        }
    }

    /// Whether `file_no` is live.
    pub fn has_file(&self, file_no: u64) -> bool {
        self.files.contains_key(&file_no)
    }

    /// The deepest level holding a sub-level (None when empty).
    pub fn deepest(&self) -> Option<usize> {
        self.levels.iter().rposition(|l| !l.subs.is_empty())
    }

    fn new_sub(&self, slot: u64, tables: Vec<Arc<TableFile>>) -> Sub {
        let sk = &self.shared;
        let bounds = tables
            .iter()
            .map(|t| {
                let lo = hashes(&sk.hash_key, sk.prefix_len, t.meta.smallest_user());
                let hi = hashes(&sk.hash_key, sk.prefix_len, t.meta.largest_user());
                (lo, hi)
            })
            .collect();
        Sub {
            slot,
            max_seq: tables.iter().map(|t| t.meta.max_seq).max().unwrap_or(0),
            tables,
            bounds,
        }
    }

    /// Looks `user_key` up in sub-level `sub` of level `level` (whose indexes are pinned when
    /// `pin`).
    fn get_in_sub(
        &self,
        (level, pin): (usize, bool),
        sub: &Sub,
        user_key: &[u8],
        h: (u64, u64),
        seq: u64,
    ) -> Result<Lookup> {
        for t in sub.tables_for(h) {
            let r = reader_of(t, pin)?;
            let mut blocks = 0;
            let found = r
                .reader
                .get(&self.shared.hash_key, user_key, h, seq, &mut blocks)?;
            if let Some(c) = self.shared.reads.get(level) {
                c.fetch_add(blocks, Ordering::Relaxed);
            }
            if !matches!(found, Lookup::Absent) {
                return Ok(found);
            }
        }
        Ok(Lookup::Absent)
    }

    /// Every entry of the prefix group `prefix` in sub-level `sub`, sorted by internal key.
    fn group_in_sub(
        &self,
        level: usize,
        sub: &Sub,
        prefix: &[u8],
        ph: u64,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let pin = self.shared.plan_of(level).index;
        let mut v: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        for t in sub.tables_of_group(ph) {
            let r = reader_of(t, pin)?;
            v.extend(
                r.reader
                    .group(ph, prefix, ReadKind::Data)?
                    .into_iter()
                    .map(|e| (e.ikey, e.value)),
            );
        }
        v.sort_by(|a, b| cmp_ikey(&a.0, &b.0));
        Ok(v)
    }

    /// Heap bytes of the levels' filters.
    pub fn filter_bytes(&self) -> usize {
        self.levels
            .iter()
            .filter_map(|l| l.filter())
            .map(|f| f.heap_bytes())
            .sum()
    }
}

/// The id map from the sub-levels `from` (slots oldest first) to `to`: `Some(new id)` for a
/// slot in both, `merged_into` for slots gone into a merged sub-level, else `None`.
fn id_map(from: &[u64], to: &[u64], merged: &HashMap<u64, u64>) -> Vec<Option<u8>> {
    from.iter()
        .map(|s| {
            let target = merged.get(s).copied().unwrap_or(*s);
            to.iter()
                .position(|t| *t == target)
                .and_then(|p| u8::try_from(p).ok())
        })
        .collect()
}

/// Whether `map` renames no id (a remap would scan the whole table for nothing).
fn is_identity(map: &[Option<u8>]) -> bool {
    map.iter()
        .enumerate()
        .all(|(i, m)| *m == u8::try_from(i).ok())
}

/// Applies a pending filter to a level whose sub-levels are now `now` (oldest first): remaps
/// its ids to the current positions; `None` when the level gained a sub-level the filter does
/// not know.
fn adopt_pending(
    p: PendingFilter,
    now: &[u64],
    merged: &HashMap<u64, u64>,
) -> Option<MultiLevelCuckoo> {
    let mut known = p.base.clone();
    known.push(p.added);
    if now
        .iter()
        .any(|s| !known.contains(s) && !merged.values().any(|m| m == s))
    {
        return None;
    }
    let map = id_map(&known, now, merged);
    let mut f = p.filter;
    // The ids name the sub-levels the filter knows; a level that holds more by now (none of
    // them new to the filter: merged ones) needs ids for them all.
    f.ensure_ids(now.len()).ok()?;
    if !is_identity(&map) {
        f.remap(&map).ok()?;
    }
    Some(f)
}

impl SemiVersion {
    /// The newest version of `user_key` visible at `seq`; when `first` is given, it is set to
    /// where the key's newest version is in level 0 (the level flushes add sub-levels to).
    fn lookup(
        &self,
        user_key: &[u8],
        seq: u64,
        mut first: Option<&mut FirstLevel>,
    ) -> Result<Lookup> {
        let sk = &self.shared;
        let h = hashes(&sk.hash_key, sk.prefix_len, user_key);
        let kh = split_hash(h.0, h.1);
        // Each level's structure (one read of the plan for the whole lookup), and its filter,
        // whose buckets are loaded now: the levels' probes are cache misses into tables of
        // megabytes, waited for together instead of one after the other.
        let mut levels: [(Option<&MultiLevelCuckoo>, bool); MAX_LEVELS] =
            [(None, true); MAX_LEVELS];
        {
            let plans = sk.plan.read();
            for ((li, level), slot) in self.levels.iter().enumerate().zip(levels.iter_mut()) {
                let plan = plans
                    .get(li)
                    .or(plans.last())
                    .copied()
                    .unwrap_or(LevelPlan::FULL);
                let filter = match plan.filter && !level.subs.is_empty() {
                    true => level.filter().map(|f| &**f),
                    false => None,
                };
                if let Some(f) = filter {
                    f.prefetch_hashed(kh);
                }
                *slot = (filter, plan.index);
            }
        }
        for ((li, level), &(filter, pin)) in self.levels.iter().enumerate().zip(levels.iter()) {
            if level.subs.is_empty() {
                continue;
            }
            let n = level.subs.len();
            // The sub-level (index, newest first) to start at, and whether older ones must be
            // probed after it.
            let (start, all) = match filter.map(|f| f.lookup_hashed(kh, user_key)) {
                Some(Answer::Absent) => continue,
                Some(Answer::SubLevel(id)) if usize::from(id) < n => {
                    // The newest version in the level is there; a read at an older snapshot
                    // may need an older version from an older sub-level.
                    let idx = n - 1 - usize::from(id);
                    let visible = level.subs.iter().all(|s| s.max_seq <= seq);
                    (idx, !visible)
                }
                // Ambiguous, or no filter (missing, or none in the plan): every sub-level.
                Some(_) | None => (0, true),
            };
            for sub in level.subs.iter().skip(start) {
                match self.get_in_sub((li, pin), sub, user_key, h, seq)? {
                    Lookup::Absent => {}
                    found => {
                        if let (0, Some(place)) = (li, first.as_deref_mut()) {
                            *place = FirstLevel::SubLevel(sub.slot);
                        }
                        return Ok(found);
                    }
                }
                if !all {
                    break;
                }
            }
        }
        Ok(Lookup::Absent)
    }
}

impl LayoutVersion for SemiVersion {
    fn get(&self, user_key: &[u8], seq: u64) -> Result<Lookup> {
        self.lookup(user_key, seq, None)
    }

    fn get_placed(&self, user_key: &[u8], seq: u64) -> Result<(Lookup, Option<FirstLevel>)> {
        let mut place = FirstLevel::Absent;
        let found = self.lookup(user_key, seq, Some(&mut place))?;
        Ok((found, Some(place)))
    }

    fn add_iters(&self, _out: &mut Vec<Box<dyn InternalIter>>) -> Result<()> {
        Err(Error::Unsupported(format!(
            "layout `semisorted` orders keys by the hash of their {}-byte prefix, then of their \
             suffix: it serves prefix scans of exactly {} bytes, not ranges",
            self.shared.prefix_len, self.shared.prefix_len
        )))
    }

    fn add_prefix_iters(&self, prefix: &[u8], out: &mut Vec<Box<dyn InternalIter>>) -> Result<()> {
        let sk = &self.shared;
        if prefix.len() != sk.prefix_len {
            return self.add_iters(out);
        }
        let ph = hashes(&sk.hash_key, sk.prefix_len, prefix).0;
        for (l, level) in self.levels.iter().enumerate() {
            for sub in &level.subs {
                let entries = self.group_in_sub(l, sub, prefix, ph)?;
                if !entries.is_empty() {
                    out.push(Box::new(VecIter::new(entries)));
                }
            }
        }
        Ok(())
    }

    fn apply(&self, edit: &KsEdit, tables: &Arc<TableCtx>) -> Result<Arc<dyn LayoutVersion>> {
        check_edit_tables(edit, FORMAT_SEMISORTED, |no| self.files.contains_key(&no))?;
        let mut v = SemiVersion {
            shared: self.shared.clone(),
            levels: self.levels.clone(),
            files: self.files.clone(),
            gen: self.gen + 1,
        };
        let mut touched: Vec<usize> = Vec::new();
        let before: Vec<Vec<u64>> = self.levels.iter().map(Level::slots).collect();
        // Removals: a sub-level keeps its remaining tables; one left without any retires.
        let mut removed_from: HashMap<usize, Vec<u64>> = HashMap::new();
        // Removals, by sub-level: one whose every table goes retires; one that keeps some
        // tables loses the level's filter (it no longer says which keys left).
        let mut by_sub: Vec<((u32, u64), Vec<u64>)> = Vec::new();
        for no in &edit.removed {
            // Named twice in one edit: gone already.
            let Some(at) = v.files.remove(no) else {
                continue;
            };
            match by_sub.iter_mut().find(|g| g.0 == at) {
                Some(g) => g.1.push(*no),
                None => by_sub.push((at, vec![*no])),
            }
        }
        for ((level, slot), gone) in by_sub {
            let l = level as usize;
            if !touched.contains(&l) {
                touched.push(l);
            }
            let Some(lv) = v.levels.get_mut(l) else {
                continue;
            };
            let Some(i) = lv.subs.iter().position(|s| s.slot == slot) else {
                continue;
            };
            let kept: Vec<Arc<TableFile>> = lv.subs.get(i).map_or_else(Vec::new, |old| {
                old.tables
                    .iter()
                    .filter(|t| !gone.contains(&t.meta.file_no))
                    .cloned()
                    .collect()
            });
            if kept.is_empty() {
                lv.subs.remove(i);
                removed_from.entry(l).or_default().push(slot);
            } else {
                let sub = Arc::new(v.new_sub(slot, kept));
                if let Some(lv) = v.levels.get_mut(l) {
                    if let Some(x) = lv.subs.get_mut(i) {
                        *x = sub;
                    }
                    lv.filter = None;
                    lv.rebuilt = Arc::default();
                }
            }
        }
        // Additions, grouped by (level, slot) in the order they come.
        // Tables added, by (level, slot): each group is one new sub-level.
        type Added = ((u32, u64), Vec<Arc<TableFile>>);
        let mut groups: Vec<Added> = Vec::new();
        for a in &edit.added {
            if a.level as usize >= MAX_LEVELS {
                return Err(bad(format!(
                    "table {:06} at level {}",
                    a.meta.file_no, a.level
                )));
            }
            if v.files.contains_key(&a.meta.file_no) {
                return Err(bad(format!("table {:06} added twice", a.meta.file_no)));
            }
            let f = TableFile::with_ext(a.meta.clone(), tables.clone(), EXT);
            v.files.insert(a.meta.file_no, (a.level, a.slot));
            match groups.iter_mut().find(|g| g.0 == (a.level, a.slot)) {
                Some(g) => g.1.push(f),
                None => groups.push(((a.level, a.slot), vec![f])),
            }
        }
        let mut merged: HashMap<usize, HashMap<u64, u64>> = HashMap::new();
        let mut added_newest: HashMap<usize, u64> = HashMap::new();
        let mut added_at: HashMap<usize, u64> = HashMap::new();
        for ((level, slot), mut files) in groups {
            let l = level as usize;
            if v.levels.len() <= l {
                v.levels.resize_with(l + 1, Level::default);
            }
            if v.levels
                .get(l)
                .is_some_and(|lv| lv.subs.iter().any(|s| s.slot == slot))
            {
                return Err(bad(format!("sub-level {slot} of level {l} added twice")));
            }
            files.sort_by_cached_key(|f| {
                let uk = f.meta.smallest_user();
                (
                    hashes(&self.shared.hash_key, self.shared.prefix_len, uk),
                    uk.to_vec(),
                )
            });
            let sub = Arc::new(v.new_sub(slot, files));
            added_at.insert(l, slot);
            let Some(lv) = v.levels.get_mut(l) else {
                continue;
            };
            match removed_from.get(&l) {
                // An in-place merge: the output holds the oldest data of the level.
                Some(gone) => {
                    lv.subs.push(sub);
                    let m = merged.entry(l).or_default();
                    for s in gone {
                        m.insert(*s, slot);
                    }
                }
                None => {
                    lv.subs.insert(0, sub);
                    added_newest.insert(l, slot);
                }
            }
            if !touched.contains(&l) {
                touched.push(l);
            }
        }
        // Filters: remap the ids of every touched level, adopting what jobs built.
        let mut pending = self.shared.pending.lock();
        for &l in &touched {
            let m = merged.remove(&l).unwrap_or_default();
            let Some(lv) = v.levels.get_mut(l) else {
                continue;
            };
            let now = lv.slots();
            let old_filter = lv.filter().cloned();
            lv.rebuilt = Arc::default();
            lv.filter = old_filter;
            if now.is_empty() {
                lv.filter = None;
                continue;
            }
            let adopted = added_at
                .get(&l)
                .and_then(|slot| pending.remove(slot))
                .filter(|p| p.level as usize == l)
                .and_then(|p| adopt_pending(p, &now, &m));
            // Keys new to the level arrived: a sub-level pushed as the newest, or a merge
            // that also took tables of another level (into an LSM level).
            let new_keys = added_newest.contains_key(&l)
                || (added_at.contains_key(&l) && removed_from.keys().any(|&o| o != l));
            lv.filter = match (adopted, new_keys, lv.filter.take()) {
                (Some(f), _, _) => Some(Arc::new(f)),
                // Keys arrived without the filter that holds them: missing until rebuilt.
                (None, true, _) => None,
                // More sub-levels than ids (writes stop long before): no filter.
                (None, false, Some(f)) if now.len() > usize::from(f.id_capacity()) => None,
                (None, false, Some(f)) => {
                    let old = before.get(l).cloned().unwrap_or_default();
                    let map = id_map(&old, &now, &m);
                    if is_identity(&map) {
                        Some(f)
                    } else {
                        let mut f = MultiLevelCuckoo::clone(&f);
                        match f.remap(&map) {
                            Ok(()) => Some(Arc::new(f)),
                            Err(_) => None,
                        }
                    }
                }
                (None, false, None) => None,
            };
        }
        drop(pending);
        while v.levels.last().is_some_and(|l| l.subs.is_empty()) {
            v.levels.pop();
        }
        Ok(Arc::new(v))
    }

    fn snapshot(&self, out: &mut KsEdit) {
        for (l, level) in self.levels.iter().enumerate() {
            // Oldest first: each added sub-level is the newest of its level when applied.
            for sub in level.subs.iter().rev() {
                for t in &sub.tables {
                    out.added.push(crate::manifest::edit::AddedTable {
                        level: l as u32,
                        slot: sub.slot,
                        format: FORMAT_SEMISORTED,
                        meta: t.meta.clone(),
                    });
                }
            }
        }
    }

    fn files(&self) -> Vec<Arc<TableFile>> {
        self.levels
            .iter()
            .flat_map(|l| l.subs.iter().flat_map(|s| s.tables.iter().cloned()))
            .collect()
    }

    fn level_stats(&self) -> Vec<LevelStats> {
        self.levels
            .iter()
            .enumerate()
            .map(|(i, l)| {
                let entries = l.entries();
                let filter = match l.filter() {
                    _ if l.subs.is_empty() => "no filter (empty)".to_string(),
                    Some(f) => {
                        let fm = f.memory();
                        format!(
                            "filter {:.1} bits/key ({} segments, {}+{}-bit slots at {:.1} % load; \
                             secondary table {:.2} bits/key, {} keys)",
                            (f.heap_bytes() * 8) as f64 / entries.max(1) as f64,
                            fm.segments,
                            fm.tag_bits,
                            fm.id_bits,
                            100.0 * fm.primary_entries as f64 / fm.primary_slots.max(1) as f64,
                            (fm.secondary_bytes * 8) as f64 / entries.max(1) as f64,
                            fm.secondary_entries
                        )
                    }
                    None => "filter missing".to_string(),
                };
                let mut m = LevelMemory {
                    entries,
                    ..LevelMemory::default()
                };
                for t in l.subs.iter().flat_map(|s| s.tables.iter()) {
                    add_reader_memory(&mut m, t);
                }
                if let Some(f) = l.filter() {
                    let fm = f.memory();
                    m.filter_primary_bytes = fm.primary_bytes as u64;
                    m.filter_secondary_bytes = fm.secondary_bytes as u64;
                    m.filter_slots = fm.primary_slots as u64;
                    m.filter_entries = fm.primary_entries as u64;
                    m.filter_secondary_keys = fm.secondary_entries as u64;
                    m.filter_segments = fm.segments;
                    m.filter_tag_bits = fm.tag_bits;
                    m.filter_id_bits = fm.id_bits;
                }
                // Bits per key of the indexes pinned now, over the entries of their tables.
                let index = if m.pinned_index_entries == 0 {
                    "no index pinned".to_string()
                } else {
                    let bits = |b: u64| (b * 8) as f64 / m.pinned_index_entries as f64;
                    format!(
                        "index {:.2} bits/key ({:.2} of them its directory)",
                        bits(m.index_bytes),
                        bits(m.index_dir_bytes)
                    )
                };
                LevelStats {
                    memory: Some(m),
                    filter_bytes: m.filter_primary_bytes + m.filter_secondary_bytes,
                    level: i as u32,
                    tables: l.subs.iter().map(|s| s.tables.len() as u64).sum(),
                    bytes: l.subs.iter().map(|s| s.bytes()).sum(),
                    detail: format!(
                        "{} sub-levels ({}), {filter} (rebuilt {}×), {index}",
                        l.subs.len(),
                        self.shared.plan_of(i).name(),
                        self.shared
                            .rebuilds
                            .get(i)
                            .map_or(0, |c| c.load(Ordering::Relaxed))
                    ),
                }
            })
            .collect()
    }

    fn table_places(&self) -> Vec<TablePlace> {
        let mut out = Vec::new();
        for (l, level) in self.levels.iter().enumerate() {
            for (i, sub) in level.subs.iter().enumerate() {
                for t in &sub.tables {
                    out.push(TablePlace {
                        level: l as u32,
                        place: format!("sub-level {i} (slot {})", sub.slot),
                        guard: None,
                        file: t.clone(),
                    });
                }
            }
        }
        out
    }

    fn level_reads(&self) -> Vec<LevelReads> {
        (0..self.levels.len().min(MAX_LEVELS))
            .map(|l| LevelReads {
                level: l as u32,
                data_block_reads: self
                    .shared
                    .reads
                    .get(l)
                    .map_or(0, |c| c.load(Ordering::Relaxed)),
                ..Default::default()
            })
            .collect()
    }

    fn check_invariants(&self) -> std::result::Result<(), String> {
        for (l, level) in self.levels.iter().enumerate() {
            for sub in &level.subs {
                let sk = &self.shared;
                let first = |t: &TableFile| {
                    (
                        hashes(&sk.hash_key, sk.prefix_len, t.meta.smallest_user()),
                        t.meta.smallest_user().to_vec(),
                    )
                };
                let last = |t: &TableFile| {
                    (
                        hashes(&sk.hash_key, sk.prefix_len, t.meta.largest_user()),
                        t.meta.largest_user().to_vec(),
                    )
                };
                for (a, b) in sub.tables.iter().zip(sub.tables.iter().skip(1)) {
                    if last(a) >= first(b) {
                        return Err(format!(
                            "level {l} sub-level {}: tables {:06} and {:06} overlap",
                            sub.slot, a.meta.file_no, b.meta.file_no
                        ));
                    }
                }
                for t in &sub.tables {
                    if self.files.get(&t.meta.file_no) != Some(&(l as u32, sub.slot)) {
                        return Err(format!("table {:06} misplaced", t.meta.file_no));
                    }
                }
            }
            if let Some(f) = level.filter() {
                if level.subs.len() > usize::from(f.id_capacity()) {
                    return Err(format!("level {l}: more sub-levels than filter ids"));
                }
            }
        }
        Ok(())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
