//! One version of the fragmented layout: L0 (overlapping tables, newest first) and levels 1..
//! divided by guards. Owns the guard records (encoding and application), point lookups (one
//! guard per level, newest table first), the per-guard seek counters, and the invariants.

use std::any::Any;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

use super::iter::LevelIter;
use crate::coding::{put_slice, put_varint, Reader};
use crate::error::{Error, Result};
use crate::iter::InternalIter;
use crate::layout::parallel::WorkerPool;
use crate::layout::{check_edit_tables, LayoutVersion, LevelSplit, TablePlace};
use crate::manifest::edit::{AddedTable, KsEdit, LayoutRecord};
use crate::memtable::Lookup;
use crate::stats::LevelStats;
use crate::table::{get_in_tables, TableCtx, TableFile, FORMAT_SORTED};

/// A guard key (shared between versions).
pub(crate) type GKey = Arc<[u8]>;

/// Record: keys picked as guards at flush, not yet committed (`level` = shallowest level).
pub(crate) const TAG_PENDING: u8 = 1;
/// Record: keys that became guards of exactly `level`.
pub(crate) const TAG_COMMIT: u8 = 2;
/// Record: keys that stopped being guards of exactly `level` (consolidation).
pub(crate) const TAG_DELETE: u8 = 3;
/// Record: the number of levels including L0 (written when the keyspace is created; fixed
/// afterwards, whatever the options say on a later open).
pub(crate) const TAG_LEVELS: u8 = 4;

/// Encodes the number-of-levels record.
pub(crate) fn levels_record(max_levels: usize) -> LayoutRecord {
    let mut data = Vec::new();
    put_varint(&mut data, max_levels as u64);
    LayoutRecord {
        tag: TAG_LEVELS,
        data,
    }
}

/// Encodes a guard record: level, then length-prefixed keys.
pub(crate) fn guard_record(tag: u8, level: usize, keys: &[GKey]) -> LayoutRecord {
    let mut data = Vec::new();
    put_varint(&mut data, level as u64);
    for k in keys {
        put_slice(&mut data, k);
    }
    LayoutRecord { tag, data }
}

fn decode_guard_record(r: &LayoutRecord) -> Result<(usize, Vec<GKey>)> {
    let bad = || Error::InvalidArgument(format!("malformed fragmented guard record {}", r.tag));
    let mut rd = Reader::new(&r.data);
    let level = rd.varint().ok_or_else(bad)? as usize;
    if level == 0 || level >= 64 {
        return Err(bad());
    }
    let mut keys = Vec::new();
    while !rd.is_empty() {
        keys.push(GKey::from(rd.slice().ok_or_else(bad)?));
    }
    Ok((level, keys))
}

/// State shared by every version of one keyspace and its policy: seek-compaction hints,
/// the options the read path needs, and the parallel-seek pool.
pub(crate) struct Shared {
    /// Guards whose seek counter reached the threshold: (level, guard key; None = sentinel).
    pub hot: Mutex<Vec<(usize, Option<GKey>)>>,
    /// Seeks on a multi-table guard that make it a compaction candidate (0 = off).
    pub seek_threshold: AtomicU64,
    /// Whether the last level's tables are positioned in parallel.
    pub parallel_seeks: AtomicBool,
    /// Threads of the pool, read when it is first started.
    pub pool_threads: AtomicUsize,
    pool: OnceLock<Option<Arc<WorkerPool>>>,
}

impl Shared {
    pub(crate) fn new() -> Self {
        Shared {
            hot: Mutex::new(Vec::new()),
            seek_threshold: AtomicU64::new(0),
            parallel_seeks: AtomicBool::new(false),
            pool_threads: AtomicUsize::new(2),
            pool: OnceLock::new(),
        }
    }

    /// The persistent seek pool (started on first use; None if threads cannot be spawned).
    pub(crate) fn pool(&self) -> Option<Arc<WorkerPool>> {
        self.pool
            .get_or_init(|| {
                WorkerPool::new("scree-seek", self.pool_threads.load(Ordering::Relaxed))
                    .ok()
                    .map(Arc::new)
            })
            .clone()
    }
}

/// A guard: the tables of one key range of a level, newest first. Tables in a guard may
/// overlap each other but never cross the guard's boundaries.
pub(crate) struct Guard {
    /// The guard key; None for the sentinel (keys below the first guard).
    pub key: Option<GKey>,
    /// Tables ordered by max_seq descending (the order fragments arrived in).
    pub tables: Vec<Arc<TableFile>>,
    /// Bytes of the tables.
    pub bytes: u64,
    /// Seeks that landed here while the guard held several tables, since it last lost tables.
    pub seeks: Arc<AtomicU64>,
}

/// One level (≥ 1): the sentinel, then guards in key order.
pub(crate) struct Level {
    pub guards: Vec<Guard>,
    pub bytes: u64,
    pub tables: usize,
    pub max_guard_tables: usize,
}

impl Level {
    pub(crate) fn empty() -> Level {
        Level {
            guards: vec![Guard {
                key: None,
                tables: Vec::new(),
                bytes: 0,
                seeks: Arc::new(AtomicU64::new(0)),
            }],
            bytes: 0,
            tables: 0,
            max_guard_tables: 0,
        }
    }

    fn keyed(&self) -> &[Guard] {
        self.guards.get(1..).unwrap_or_default()
    }

    /// Index of the guard whose range holds `uk` (0 = sentinel).
    pub(crate) fn guard_index(&self, uk: &[u8]) -> usize {
        self.keyed()
            .partition_point(|g| g.key.as_deref().is_some_and(|k| k <= uk))
    }

    /// Whether `k` is a guard key of this level.
    pub(crate) fn has_guard(&self, k: &[u8]) -> bool {
        self.keyed()
            .binary_search_by(|g| g.key.as_deref().unwrap_or_default().cmp(k))
            .is_ok()
    }

    /// The half-open user-key range `[lo, hi)` of guard `idx` (None = unbounded).
    pub(crate) fn range(&self, idx: usize) -> (Option<GKey>, Option<GKey>) {
        let lo = self.guards.get(idx).and_then(|g| g.key.clone());
        let hi = self.guards.get(idx + 1).and_then(|g| g.key.clone());
        (lo, hi)
    }

    /// Indices of the guards whose ranges intersect `[lo, hi)`.
    pub(crate) fn guards_in(&self, lo: Option<&[u8]>, hi: Option<&[u8]>) -> std::ops::Range<usize> {
        let start = lo.map_or(0, |l| self.guard_index(l));
        let end = match hi {
            None => self.guards.len(),
            Some(h) => {
                1 + self
                    .keyed()
                    .partition_point(|g| g.key.as_deref().is_some_and(|k| k < h))
            }
        };
        start..end.max(start)
    }

    /// Guard keys strictly inside `(lo, hi)`.
    pub(crate) fn keys_between(&self, lo: Option<&[u8]>, hi: Option<&[u8]>) -> Vec<GKey> {
        self.guards
            .get(self.guards_in(lo, hi))
            .unwrap_or_default()
            .iter()
            .filter_map(|g| g.key.clone())
            .filter(|k| lo.is_none_or(|l| &k[..] > l))
            .collect()
    }

    /// Builds a level from guard keys (sorted, unique, non-empty) and tables.
    fn build(
        keys: Vec<GKey>,
        tables: Vec<Arc<TableFile>>,
        counters: &HashMap<Option<GKey>, Arc<AtomicU64>>,
    ) -> Level {
        let mut guards: Vec<Guard> = std::iter::once(None)
            .chain(keys.into_iter().map(Some))
            .map(|key| Guard {
                seeks: counters
                    .get(&key)
                    .cloned()
                    .unwrap_or_else(|| Arc::new(AtomicU64::new(0))),
                key,
                tables: Vec::new(),
                bytes: 0,
            })
            .collect();
        let mut lvl = Level::empty();
        for t in tables {
            let idx = guard_of(&guards, &t);
            if let Some(g) = guards.get_mut(idx) {
                g.bytes += t.meta.size;
                g.tables.push(t);
            }
        }
        for g in &mut guards {
            sort_newest_first(&mut g.tables);
            lvl.bytes += g.bytes;
            lvl.tables += g.tables.len();
            lvl.max_guard_tables = lvl.max_guard_tables.max(g.tables.len());
        }
        lvl.guards = guards;
        lvl
    }

    /// This level with the tables `removed` names taken out and `adds` placed, its guard keys
    /// unchanged: what [`Level::build`] would make of the same keys and tables, without
    /// re-placing and re-sorting every table of the level. Tables keep their guards (placement
    /// depends only on the keys), removal keeps each guard's newest-first order, and only the
    /// guards that receive tables are sorted again. Guards that lost tables get fresh seek
    /// counters; the others keep theirs.
    fn edited(&self, removed: impl Fn(u64) -> bool, adds: Vec<Arc<TableFile>>) -> Level {
        let mut guards: Vec<Guard> = self
            .guards
            .iter()
            .map(|g| {
                if !g.tables.iter().any(|t| removed(t.meta.file_no)) {
                    return Guard {
                        key: g.key.clone(),
                        tables: g.tables.clone(),
                        bytes: g.bytes,
                        seeks: g.seeks.clone(),
                    };
                }
                let tables: Vec<Arc<TableFile>> = g
                    .tables
                    .iter()
                    .filter(|t| !removed(t.meta.file_no))
                    .cloned()
                    .collect();
                Guard {
                    key: g.key.clone(),
                    bytes: tables.iter().map(|t| t.meta.size).sum(),
                    tables,
                    seeks: Arc::new(AtomicU64::new(0)),
                }
            })
            .collect();
        let mut dirty: Vec<usize> = Vec::new();
        for t in adds {
            let idx = guard_of(&guards, &t);
            if let Some(g) = guards.get_mut(idx) {
                g.bytes += t.meta.size;
                g.tables.push(t);
                dirty.push(idx);
            }
        }
        dirty.sort_unstable();
        dirty.dedup();
        for idx in dirty {
            if let Some(g) = guards.get_mut(idx) {
                sort_newest_first(&mut g.tables);
            }
        }
        let mut lvl = Level::empty();
        for g in &guards {
            lvl.bytes += g.bytes;
            lvl.tables += g.tables.len();
            lvl.max_guard_tables = lvl.max_guard_tables.max(g.tables.len());
        }
        lvl.guards = guards;
        lvl
    }

    fn all_tables(&self) -> impl Iterator<Item = &Arc<TableFile>> {
        self.guards.iter().flat_map(|g| g.tables.iter())
    }
}

/// Index of the guard (0: the sentinel) that holds table `t`: the last one whose key is at or
/// below the table's smallest key.
fn guard_of(guards: &[Guard], t: &TableFile) -> usize {
    guards.get(1..).unwrap_or_default().partition_point(|g| {
        g.key
            .as_deref()
            .is_some_and(|k| k <= t.meta.smallest_user())
    })
}

pub(crate) fn sort_newest_first(tables: &mut [Arc<TableFile>]) {
    tables.sort_by(|a, b| {
        b.meta
            .max_seq
            .cmp(&a.meta.max_seq)
            .then(b.meta.file_no.cmp(&a.meta.file_no))
    });
}

/// One immutable state of a fragmented keyspace.
pub struct FragmentedVersion {
    /// L0 tables, newest first.
    pub(crate) l0: Arc<Vec<Arc<TableFile>>>,
    /// `levels[j]` is level j for j ≥ 1 (`levels[0]` is an unused empty placeholder).
    pub(crate) levels: Vec<Arc<Level>>,
    /// Uncommitted guards: key → shallowest level it was picked for. It is pending at every
    /// level from there down where it is not yet a guard.
    pub(crate) pending: Arc<BTreeMap<GKey, usize>>,
    /// Entries in all tables (the observed key count for guard scaling).
    pub(crate) entries: u64,
    /// Levels including L0, as persisted (None in keyspaces created before the record).
    pub(crate) max_levels: Option<usize>,
    pub(crate) shared: Arc<Shared>,
}

impl FragmentedVersion {
    pub(crate) fn empty(shared: Arc<Shared>) -> Self {
        FragmentedVersion {
            l0: Arc::new(Vec::new()),
            levels: vec![Arc::new(Level::empty())],
            pending: Arc::new(BTreeMap::new()),
            entries: 0,
            max_levels: None,
            shared,
        }
    }

    /// Level `j` (≥ 1), if the version has it.
    pub(crate) fn level(&self, j: usize) -> Option<&Level> {
        if j == 0 {
            return None;
        }
        self.levels.get(j).map(|l| l.as_ref())
    }

    /// Whether `k` is a guard of level `j`.
    pub(crate) fn is_guard(&self, j: usize, k: &[u8]) -> bool {
        self.level(j).is_some_and(|l| l.has_guard(k))
    }

    /// The deepest level holding tables (0 if only L0 or nothing).
    pub(crate) fn deepest_nonempty(&self) -> usize {
        (1..self.levels.len())
            .rev()
            .find(|&j| self.level(j).is_some_and(|l| l.tables > 0))
            .unwrap_or(0)
    }

    /// Bytes of level `j` (L0 included).
    pub(crate) fn level_bytes(&self, j: usize) -> u64 {
        if j == 0 {
            return self.l0.iter().map(|t| t.meta.size).sum();
        }
        self.level(j).map_or(0, |l| l.bytes)
    }

    /// Whether any table below level `j` intersects `[lo, hi)`.
    pub(crate) fn data_below(&self, j: usize, lo: Option<&[u8]>, hi: Option<&[u8]>) -> bool {
        (j + 1..self.levels.len()).any(|d| {
            self.level(d).is_some_and(|l| {
                l.guards
                    .get(l.guards_in(lo, hi))
                    .unwrap_or_default()
                    .iter()
                    .flat_map(|g| g.tables.iter())
                    .any(|t| intersects(t, lo, hi))
            })
        })
    }
}

#[cfg(test)]
impl FragmentedVersion {
    /// A copy with one more table placed by its smallest key, without any checks (tests).
    pub(crate) fn with_extra_table(
        &self,
        level: usize,
        a: AddedTable,
        tables: &Arc<TableCtx>,
    ) -> FragmentedVersion {
        let mut levels = self.levels.clone();
        if let Some(old) = levels.get(level) {
            let keys: Vec<GKey> = old.keyed().iter().filter_map(|g| g.key.clone()).collect();
            let mut ts: Vec<Arc<TableFile>> = old.all_tables().cloned().collect();
            ts.push(TableFile::new(a.meta, tables.clone()));
            let lvl = Level::build(keys, ts, &HashMap::new());
            if let Some(slot) = levels.get_mut(level) {
                *slot = Arc::new(lvl);
            }
        }
        FragmentedVersion {
            l0: self.l0.clone(),
            levels,
            pending: self.pending.clone(),
            entries: self.entries,
            max_levels: self.max_levels,
            shared: self.shared.clone(),
        }
    }
}

/// Whether a table's user keys intersect `[lo, hi)`.
pub(crate) fn intersects(t: &TableFile, lo: Option<&[u8]>, hi: Option<&[u8]>) -> bool {
    lo.is_none_or(|l| t.meta.largest_user() >= l) && hi.is_none_or(|h| t.meta.smallest_user() < h)
}

impl LevelSplit for FragmentedVersion {
    fn deepest_level(&self) -> usize {
        self.deepest_nonempty()
    }

    fn holds_tables(&self, l: usize) -> bool {
        if l == 0 {
            !self.l0.is_empty()
        } else {
            self.level(l).is_some_and(|lvl| lvl.tables > 0)
        }
    }

    /// Looks `user_key` up in L0 (if `with_l0`) and `levels`: one guard per level, its tables
    /// newest first. Fragments arrive in sequence order, so the first table holding the key
    /// has its newest version (each table's Bloom filter is asked first, in `table_get`).
    fn lookup_levels(
        &self,
        user_key: &[u8],
        seq: u64,
        with_l0: bool,
        levels: std::ops::Range<usize>,
    ) -> Result<Lookup> {
        let l0 = if with_l0 { self.l0.as_slice() } else { &[] };
        // The one guard per level that can hold the key, its tables newest first.
        let guards = self
            .levels
            .get(levels)
            .unwrap_or_default()
            .iter()
            .filter(|lvl| lvl.tables > 0)
            .filter_map(|lvl| lvl.guards.get(lvl.guard_index(user_key)))
            .flat_map(|g| g.tables.iter());
        get_in_tables(l0.iter().chain(guards), user_key, seq)
    }
}

impl LayoutVersion for FragmentedVersion {
    fn get(&self, user_key: &[u8], seq: u64) -> Result<Lookup> {
        self.lookup_levels(user_key, seq, true, 1..self.levels.len())
    }

    fn level_split(&self) -> Option<&dyn LevelSplit> {
        Some(self)
    }

    fn add_iters(&self, out: &mut Vec<Box<dyn InternalIter>>) -> Result<()> {
        for t in self.l0.iter() {
            out.push(Box::new(t.iter(true)?));
        }
        // Parallel seeks go to the level holding the most data (normally the last one): its
        // data is the oldest and the least likely to be cached (the paper's heuristic).
        let last = (1..self.levels.len())
            .max_by_key(|&j| (self.level_bytes(j), j))
            .unwrap_or(0);
        let threshold = self.shared.seek_threshold.load(Ordering::Relaxed);
        let parallel = self.shared.parallel_seeks.load(Ordering::Relaxed);
        for (j, lvl) in self.levels.iter().enumerate().skip(1) {
            if lvl.tables == 0 {
                continue;
            }
            let pool = if parallel && j == last {
                self.shared.pool()
            } else {
                None
            };
            out.push(Box::new(LevelIter::new(
                lvl.clone(),
                j,
                self.shared.clone(),
                threshold,
                pool,
            )));
        }
        Ok(())
    }

    fn apply(&self, edit: &KsEdit, tables: &Arc<TableCtx>) -> Result<Arc<dyn LayoutVersion>> {
        // Sorted, searched by bisection: every table of every level is checked against it, and
        // SipHash per table cost more than the rest of a flush's apply at 100k tables.
        let mut removed: Vec<u64> = edit.removed.clone();
        removed.sort_unstable();
        removed.dedup();
        let mut moved: HashMap<u64, Arc<TableFile>> = HashMap::new();
        let mut touched: BTreeSet<usize> = BTreeSet::new();
        // Levels that lost tables; guards that lost tables get fresh seek counters.
        let mut lost_guards: HashSet<(usize, Option<GKey>)> = HashSet::new();
        let mut l0: Vec<Arc<TableFile>> = Vec::with_capacity(self.l0.len() + 1);
        for t in self.l0.iter() {
            if removed.binary_search(&t.meta.file_no).is_ok() {
                moved.insert(t.meta.file_no, t.clone());
            } else {
                l0.push(t.clone());
            }
        }
        if !removed.is_empty() {
            for (j, lvl) in self.levels.iter().enumerate().skip(1) {
                for g in &lvl.guards {
                    for t in &g.tables {
                        if removed.binary_search(&t.meta.file_no).is_ok() {
                            moved.insert(t.meta.file_no, t.clone());
                            touched.insert(j);
                            lost_guards.insert((j, g.key.clone()));
                        }
                    }
                }
            }
        }
        check_edit_tables(edit, FORMAT_SORTED, |no| moved.contains_key(&no))?;
        // Guard records.
        let mut pending: Option<BTreeMap<GKey, usize>> = None;
        let mut key_adds: BTreeMap<usize, Vec<GKey>> = BTreeMap::new();
        let mut key_dels: BTreeMap<usize, Vec<GKey>> = BTreeMap::new();
        let mut named: Vec<GKey> = Vec::new();
        let mut max_levels = self.max_levels;
        for r in &edit.records {
            if r.tag == TAG_LEVELS {
                let n = Reader::new(&r.data)
                    .varint()
                    .filter(|&n| (2..64).contains(&n))
                    .ok_or_else(|| Error::InvalidArgument("malformed levels record".into()))?;
                // The first one counts.
                max_levels.get_or_insert(n as usize);
                continue;
            }
            let (level, keys) = decode_guard_record(r)?;
            let p = pending.get_or_insert_with(|| (*self.pending).clone());
            match r.tag {
                TAG_PENDING => {
                    for k in keys {
                        if k.is_empty() {
                            continue;
                        }
                        let e = p.entry(k.clone()).or_insert(level);
                        *e = (*e).min(level);
                        named.push(k);
                    }
                }
                TAG_COMMIT => {
                    touched.insert(level);
                    for k in keys {
                        if k.is_empty() {
                            return Err(Error::InvalidArgument("empty guard key".into()));
                        }
                        if p.get(&k).is_some_and(|&top| top >= level) {
                            // Committed at its shallowest pending level: done.
                            p.remove(&k);
                        }
                        key_adds.entry(level).or_default().push(k);
                    }
                }
                TAG_DELETE => {
                    touched.insert(level);
                    for k in keys {
                        if let Some(top) = p.get_mut(&k) {
                            if *top <= level {
                                *top = level + 1;
                            }
                        }
                        named.push(k.clone());
                        key_dels.entry(level).or_default().push(k);
                    }
                }
                t => {
                    return Err(Error::InvalidArgument(format!(
                        "unknown fragmented record tag {t}"
                    )))
                }
            }
        }
        // Added tables.
        let mut adds: BTreeMap<usize, Vec<Arc<TableFile>>> = BTreeMap::new();
        for a in &edit.added {
            let l = a.level as usize;
            if l >= 64 {
                return Err(Error::InvalidArgument(format!("level {l} out of range")));
            }
            // A move re-adds a removed file: keep its open handle.
            let f = moved
                .get(&a.meta.file_no)
                .cloned()
                .unwrap_or_else(|| TableFile::new(a.meta.clone(), tables.clone()));
            if l == 0 {
                l0.push(f);
            } else {
                touched.insert(l);
                adds.entry(l).or_default().push(f);
            }
        }
        sort_newest_first(&mut l0);
        let mut levels = self.levels.clone();
        if let Some(&deepest) = touched.iter().next_back() {
            if levels.len() <= deepest {
                // A level that did not exist yet starts with the guards of the deepest existing
                // level: a guard of level i is a guard of every deeper level.
                let inherited: Vec<GKey> = levels
                    .last()
                    .map(|l| l.keyed().iter().filter_map(|g| g.key.clone()).collect())
                    .unwrap_or_default();
                let base = Arc::new(Level::build(inherited, Vec::new(), &HashMap::new()));
                levels.resize_with(deepest + 1, || base.clone());
            }
        }
        for &j in &touched {
            let Some(old) = levels.get(j) else { continue };
            if !key_adds.contains_key(&j) && !key_dels.contains_key(&j) {
                // Guard keys unchanged (most flushes and compactions): edit the level in place
                // of rebuilding it, which hashed and re-placed every table of the level (75 ms
                // per compaction at 100k tables; `examples/scale_probe.rs`).
                let lvl = old.edited(
                    |no| removed.binary_search(&no).is_ok(),
                    adds.remove(&j).unwrap_or_default(),
                );
                if let Some(slot) = levels.get_mut(j) {
                    *slot = Arc::new(lvl);
                }
                continue;
            }
            let dels: HashSet<GKey> = key_dels
                .remove(&j)
                .unwrap_or_default()
                .into_iter()
                .collect();
            let mut keys: BTreeSet<GKey> = old
                .keyed()
                .iter()
                .filter_map(|g| g.key.clone())
                .filter(|k| !dels.contains(k))
                .collect();
            keys.extend(key_adds.remove(&j).unwrap_or_default());
            let mut ts: Vec<Arc<TableFile>> = old
                .all_tables()
                .filter(|t| removed.binary_search(&t.meta.file_no).is_err())
                .cloned()
                .collect();
            ts.extend(adds.remove(&j).unwrap_or_default());
            let counters: HashMap<Option<GKey>, Arc<AtomicU64>> = old
                .guards
                .iter()
                .filter(|g| !lost_guards.contains(&(j, g.key.clone())))
                .map(|g| (g.key.clone(), g.seeks.clone()))
                .collect();
            let lvl = Level::build(keys.into_iter().collect(), ts, &counters);
            if let Some(slot) = levels.get_mut(j) {
                *slot = Arc::new(lvl);
            }
        }
        let pending = match pending {
            Some(mut p) => {
                // A key that is already a guard at its shallowest pending level is not pending.
                for k in named {
                    if let Some(&top) = p.get(&k) {
                        let done = levels.get(top).is_some_and(|l| top > 0 && l.has_guard(&k));
                        if done {
                            p.remove(&k);
                        }
                    }
                }
                Arc::new(p)
            }
            None => self.pending.clone(),
        };
        // Entries of all tables, kept up to date instead of summed over every table per edit:
        // the tables taken out (`moved`: every removed table, found above) and those put in
        // (a move is in both and cancels).
        let entries = self
            .entries
            .saturating_sub(moved.values().map(|t| t.meta.entries).sum::<u64>())
            .saturating_add(edit.added.iter().map(|a| a.meta.entries).sum::<u64>());
        let v = FragmentedVersion {
            l0: Arc::new(l0),
            levels,
            pending,
            entries,
            max_levels,
            shared: self.shared.clone(),
        };
        debug_assert!(
            v.check_invariants().is_ok(),
            "fragmented invariants broken after edit: {:?}\nedit: removed {:?} added {:?} records {:?}",
            v.check_invariants(),
            edit.removed,
            edit.added
                .iter()
                .map(|a| (a.level, a.meta.file_no, String::from_utf8_lossy(a.meta.smallest_user()).to_string(), String::from_utf8_lossy(a.meta.largest_user()).to_string()))
                .collect::<Vec<_>>(),
            edit.records
                .iter()
                .map(|r| decode_guard_record(r).map(|(l, ks)| (r.tag, l, ks.iter().map(|k| String::from_utf8_lossy(k).to_string()).collect::<Vec<_>>())))
                .collect::<Vec<_>>()
        );
        Ok(Arc::new(v))
    }

    fn snapshot(&self, out: &mut KsEdit) {
        if let Some(n) = self.max_levels {
            out.records.push(levels_record(n));
        }
        // Deepest level first, so that the nesting holds after every record.
        for (j, lvl) in self.levels.iter().enumerate().skip(1).rev() {
            let keys: Vec<GKey> = lvl.keyed().iter().filter_map(|g| g.key.clone()).collect();
            if !keys.is_empty() {
                out.records.push(guard_record(TAG_COMMIT, j, &keys));
            }
        }
        let mut by_top: BTreeMap<usize, Vec<GKey>> = BTreeMap::new();
        for (k, &top) in self.pending.iter() {
            by_top.entry(top).or_default().push(k.clone());
        }
        for (top, keys) in by_top {
            out.records.push(guard_record(TAG_PENDING, top, &keys));
        }
        for t in self.l0.iter() {
            out.added.push(AddedTable {
                level: 0,
                slot: 0,
                format: 0,
                meta: t.meta.clone(),
            });
        }
        for (j, lvl) in self.levels.iter().enumerate().skip(1) {
            for t in lvl.all_tables() {
                out.added.push(AddedTable {
                    level: j as u32,
                    slot: 0,
                    format: 0,
                    meta: t.meta.clone(),
                });
            }
        }
    }

    fn files(&self) -> Vec<Arc<TableFile>> {
        self.l0
            .iter()
            .chain(self.levels.iter().skip(1).flat_map(|l| l.all_tables()))
            .cloned()
            .collect()
    }

    fn table_places(&self) -> Vec<TablePlace> {
        let mut out: Vec<TablePlace> = self
            .l0
            .iter()
            .map(|f| TablePlace {
                level: 0,
                place: String::new(),
                guard: None,
                file: f.clone(),
            })
            .collect();
        for (j, lvl) in self.levels.iter().enumerate().skip(1) {
            for g in &lvl.guards {
                let place = if g.key.is_some() { "guard" } else { "sentinel" };
                for t in &g.tables {
                    out.push(TablePlace {
                        level: j as u32,
                        place: place.to_string(),
                        guard: g.key.as_ref().map(|k| k.to_vec()),
                        file: t.clone(),
                    });
                }
            }
        }
        out
    }

    fn level_stats(&self) -> Vec<LevelStats> {
        let mut pending_at: Vec<u64> = vec![0; self.levels.len()];
        for (k, &top) in self.pending.iter() {
            for (j, slot) in pending_at.iter_mut().enumerate().skip(top.max(1)) {
                if !self.is_guard(j, k) {
                    *slot += 1;
                }
            }
        }
        let mut out = vec![LevelStats {
            filter_bytes: 0,
            memory: None,
            level: 0,
            tables: self.l0.len() as u64,
            bytes: self.level_bytes(0),
            detail: format!("no guards; {} uncommitted guard keys", self.pending.len()),
        }];
        for (j, lvl) in self.levels.iter().enumerate().skip(1) {
            let nonempty = lvl.guards.iter().filter(|g| !g.tables.is_empty()).count();
            out.push(LevelStats {
                filter_bytes: 0,
                memory: None,
                level: j as u32,
                tables: lvl.tables as u64,
                bytes: lvl.bytes,
                detail: format!(
                    "{} guards incl. sentinel ({nonempty} with tables, {} uncommitted), max {} tables/guard",
                    lvl.guards.len(),
                    pending_at.get(j).copied().unwrap_or(0),
                    lvl.max_guard_tables
                ),
            });
        }
        out
    }

    fn check_invariants(&self) -> std::result::Result<(), String> {
        check_seq_order("L0", &self.l0)?;
        for (j, lvl) in self.levels.iter().enumerate().skip(1) {
            let Some(sentinel) = lvl.guards.first() else {
                return Err(format!("L{j}: no sentinel guard"));
            };
            if sentinel.key.is_some() {
                return Err(format!("L{j}: the first guard is not the sentinel"));
            }
            let mut prev: Option<&[u8]> = None;
            for g in lvl.keyed() {
                let Some(k) = g.key.as_deref() else {
                    return Err(format!("L{j}: a second sentinel"));
                };
                if k.is_empty() || prev.is_some_and(|p| p >= k) {
                    return Err(format!("L{j}: guard keys not strictly increasing at {k:?}"));
                }
                prev = Some(k);
            }
            for (i, g) in lvl.guards.iter().enumerate() {
                let (lo, hi) = lvl.range(i);
                for t in &g.tables {
                    let (s, l) = (t.meta.smallest_user(), t.meta.largest_user());
                    if lo.as_deref().is_some_and(|lo| s < lo)
                        || hi.as_deref().is_some_and(|hi| l >= hi)
                    {
                        return Err(format!(
                            "L{j}: table {} [{s:?}, {l:?}] crosses the bounds of guard {:?}..{:?}",
                            t.meta.file_no, lo, hi
                        ));
                    }
                }
                check_seq_order(&format!("L{j} guard {:?}", g.key), &g.tables)?;
            }
            if let Some(deeper) = self.level(j + 1) {
                for g in lvl.keyed() {
                    if let Some(k) = g.key.as_deref() {
                        if !deeper.has_guard(k) {
                            return Err(format!(
                                "guard {k:?} of L{j} is not a guard of L{}",
                                j + 1
                            ));
                        }
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

/// Tables newest first, and wherever two overlap, the newer holds only newer entries.
fn check_seq_order(what: &str, tables: &[Arc<TableFile>]) -> std::result::Result<(), String> {
    for (i, a) in tables.iter().enumerate() {
        for b in tables.iter().skip(i + 1) {
            if a.meta.max_seq < b.meta.max_seq {
                return Err(format!("{what}: tables not ordered newest first"));
            }
            let overlap = a.meta.smallest_user() <= b.meta.largest_user()
                && b.meta.smallest_user() <= a.meta.largest_user();
            if overlap && a.meta.min_seq <= b.meta.max_seq {
                return Err(format!(
                    "{what}: overlapping tables {} (seq {}..{}) and {} (seq {}..{}) interleave",
                    a.meta.file_no,
                    a.meta.min_seq,
                    a.meta.max_seq,
                    b.meta.file_no,
                    b.meta.min_seq,
                    b.meta.max_seq
                ));
            }
        }
    }
    Ok(())
}

/// `Level::edited` (the in-place edit, which spares a large level a rebuild) against
/// `Level::build`, which it replaces when an edit keeps a level's guard keys.
#[cfg(test)]
#[allow(clippy::indexing_slicing)]
mod edited_tests {
    use std::collections::HashMap;
    use std::sync::Arc;

    use proptest::prelude::*;

    use super::{GKey, Level};
    use crate::table::test_support::{metadata_only_ctx, metadata_only_table};
    use crate::table::TableFile;

    fn key(i: u32) -> String {
        format!("k{i:04}")
    }

    /// Tables `(lo, width, max_seq, size)` numbered from `first`, each inside one guard.
    fn tables(spec: &[(u32, u32, u64, u64)], first: u64) -> Vec<Arc<TableFile>> {
        let ctx = metadata_only_ctx();
        spec.iter()
            .enumerate()
            .map(|(i, &(lo, w, seq, size))| {
                let a = metadata_only_table(
                    1,
                    first + i as u64,
                    &key(lo),
                    &key(lo + w),
                    (seq / 2, seq),
                    size,
                );
                TableFile::new(a.meta, ctx.clone())
            })
            .collect()
    }

    fn shape(l: &Level) -> Vec<(Option<GKey>, Vec<u64>, u64)> {
        l.guards
            .iter()
            .map(|g| {
                (
                    g.key.clone(),
                    g.tables.iter().map(|t| t.meta.file_no).collect(),
                    g.bytes,
                )
            })
            .collect()
    }

    proptest! {
        #[test]
        fn editing_a_level_equals_building_it_anew(
            guard_keys in proptest::collection::btree_set(1u32..1000, 0..12),
            old in proptest::collection::vec((0u32..990, 0u32..10, 1u64..1000, 1u64..5000), 0..40),
            new in proptest::collection::vec((0u32..990, 0u32..10, 1000u64..2000, 1u64..5000), 0..10),
            drop_mask in any::<u64>(),
        ) {
            let keys: Vec<GKey> = guard_keys.iter().map(|&k| GKey::from(key(k).as_bytes())).collect();
            let old_t = tables(&old, 1);
            let new_t = tables(&new, 1000);
            let before = Level::build(keys.clone(), old_t.clone(), &HashMap::new());
            let removed = |no: u64| no < 64 && drop_mask & (1 << no) != 0;
            let edited = before.edited(removed, new_t.clone());
            let kept: Vec<Arc<TableFile>> = old_t
                .iter()
                .filter(|t| !removed(t.meta.file_no))
                .cloned()
                .chain(new_t)
                .collect();
            let built = Level::build(keys, kept, &HashMap::new());
            prop_assert_eq!(shape(&edited), shape(&built));
            prop_assert_eq!(
                (edited.bytes, edited.tables, edited.max_guard_tables),
                (built.bytes, built.tables, built.max_guard_tables)
            );
            // Seek counters: kept by guards that lost nothing, fresh where tables left.
            for (a, b) in before.guards.iter().zip(&edited.guards) {
                let lost = a.tables.iter().any(|t| removed(t.meta.file_no));
                prop_assert_eq!(Arc::ptr_eq(&a.seeks, &b.seeks), !lost);
            }
        }
    }
}
