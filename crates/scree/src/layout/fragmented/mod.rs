//! The `fragmented` layout: PebblesDB's Fragmented LSM (FLSM). Owns guard selection, the
//! compaction policy and jobs of this layout; the version (guards, lookups, invariants) is in
//! [`version`], iterators and parallel seeks in [`iter`], reservations in [`locks`].
//!
//! Levels 1.. are divided by **guards** (keys picked from inserted keys); each level has a
//! **sentinel** guard for keys below its first guard, and a guard of level i is a guard of every
//! deeper level. Tables inside a guard may overlap; none crosses a guard boundary. Compaction
//! merges one guard's tables and appends the result, cut at the next level's guards, as one new
//! table (**fragment**) per child guard — without rewriting the child's tables. The last level
//! has nowhere to append and rewrites (merges the guard's tables in place).
//!
//! Guard selection: a key whose hash (xxh3 seeded with the database's random key) ends in at
//! least `b(i)` one-bits is a guard of level i, with `b(i) = top_level_bits − (i−1)·bit_decrement`
//! (at least 1). When `top_level_bits` is 0 (default) it scales with the key count `n`
//! (`expected_keys`, or the entries observed in the tables and the memtable being flushed):
//! `top = round(log2(n / level1_guards))`, at least `(last−1)·bit_decrement + 1` so that the
//! last level still needs one bit. With the defaults (8 level-1 guards, decrement 2) a
//! 5-million-key store gets ≈ 20–40 level-1 guards (thresholds rise as it grows), ≈ 4× more per
//! level below. Guards are picked at flush time from the flushed keys — only for the levels down
//! to one below the deepest level holding data, so deep levels get guards sized for the store
//! they will see — and recorded as **uncommitted** (pending); they become real, deepest level
//! first, at the next compaction that holds their key range at that level and finds no table
//! straddling them. Guards are persisted as layout records (pending, commit, delete) and
//! recovered with the manifest. Empty child guards, and child guards holding less than
//! 1/`guard_skew_ratio` of their level's average (when the neighbour can take their tables),
//! are deleted at compaction (their tables join the neighbouring guard; no data moves).
//!
//! Compaction triggers, most urgent first: L0 over its trigger (all of L0 is merged and
//! fragmented into level 1); a guard over `max_sstables_per_guard` tables (default 3); a level
//! over its byte budget; two adjacent levels within `aggressive_ratio` (25 %) of each other's
//! bytes (the upper one is pushed down); a guard that received `seek_compaction_threshold` seeks
//! (at least one per 16 KiB it holds) while it held several tables — seek-based compaction
//! treats the deepest non-empty level as the bottom, so it flattens the tree. The
//! second-to-last level rewrites a guard in place instead of merging it into the last level
//! when the merge would rewrite more than `rewrite_factor` (25) times the guard's bytes. With
//! `max_sstables_per_guard` = 1 a child that already holds a table is merged, not appended, so
//! every guard keeps one table as in leveled. Rules and measurements:
//! docs/architecture-fragmented.md.

mod iter;
mod locks;
#[cfg(test)]
mod tests;
mod version;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::ops::Bound;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use xxhash_rust::xxh3::xxh3_64_with_seed;

use crate::error::Result;
use crate::iter::{BoundedIter, InternalIter, MergingIter};
use crate::key;
use crate::layout::sorted::{flush_to_table, merge_into_tables, zeroed_bound, SizeCutter};
use crate::layout::{Job, JobCtx, Layout, LayoutVersion, ManualScope, ManualStep, Pressure};
use crate::manifest::edit::{AddedTable, KsEdit, LayoutRecord};
use crate::memtable::Memtable;
use crate::options::{FragmentedOptions, KeyspaceOptions, Layout as LayoutKind};
use crate::stats::WriteCause;
use crate::table::{TableCtx, TableFile};

use crate::layout::reserve::Reservations;
use locks::{retire_on, Mode, RangeLock, Reservation};
pub use version::FragmentedVersion;
use version::{guard_record, intersects, GKey, Shared, TAG_COMMIT, TAG_DELETE, TAG_PENDING};

/// The seed of the guard hash: the database's random placement-hash key (persisted in the
/// manifest), folded to 64 bits, so crafted keys cannot steer guard selection.
pub(crate) fn guard_seed(hash_key: &[u8; 16]) -> u64 {
    let (a, b) = hash_key.split_at(8);
    let a = u64::from_le_bytes(a.try_into().unwrap_or([0; 8]));
    let b = u64::from_le_bytes(b.try_into().unwrap_or([0; 8]));
    a ^ b.rotate_left(32) ^ 0x6775_6172_6473_0001
}

/// The hash that decides whether a key is a guard (xxh3, independent of the Bloom hash).
pub(crate) fn guard_hash(seed: u64, k: &[u8]) -> u64 {
    xxh3_64_with_seed(k, seed)
}

/// The deepest level (the last level rewrites): fixed when the keyspace is created
/// (`max_levels` is persisted), never below a level the version already has.
fn last_level(v: &FragmentedVersion, o: &FragmentedOptions) -> usize {
    let n = v.max_levels.unwrap_or(o.max_levels);
    n.saturating_sub(1)
        .max(v.levels.len().saturating_sub(1))
        .max(1)
}

/// Guard bits of level 1 for `observed` keys with `last` levels below L0 (module comment).
pub(crate) fn top_bits(o: &FragmentedOptions, last: usize, observed: u64) -> u32 {
    if o.top_level_bits > 0 {
        return o.top_level_bits;
    }
    let last = last as u32;
    let floor = last.saturating_sub(1) * o.bit_decrement + 1;
    let n = o.expected_keys.max(observed).max(1);
    let per = (n as f64 / o.level1_guards as f64).max(1.0);
    (per.log2().round() as u32).clamp(floor.min(60), 60)
}

/// Low one-bits a key's hash needs to be a guard of `level`.
pub(crate) fn level_bits(top: u32, dec: u32, level: usize) -> u32 {
    top.saturating_sub((level as u32).saturating_sub(1) * dec)
        .max(1)
}

/// The shallowest level (1..=last) where a key with hash `h` is a guard.
pub(crate) fn guard_level(h: u64, top: u32, dec: u32, last: usize) -> Option<usize> {
    let t = h.trailing_ones();
    (1..=last).find(|&l| t >= level_bits(top, dec, l))
}

/// Budget of level `j` (0 = none).
fn level_budget(o: &FragmentedOptions, j: usize) -> u64 {
    if o.level_base_bytes == 0 {
        return 0;
    }
    let mut b = o.level_base_bytes;
    for _ in 1..j {
        b = b.saturating_mul(o.level_size_ratio);
    }
    b
}

/// Why a guard is compacted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Why {
    /// Too many tables.
    Count,
    /// Its level is over budget, or aggressive compaction.
    Size,
    /// Seek-based compaction.
    Seek,
    /// `Db::compact`.
    Manual,
}

#[derive(Debug, Clone)]
enum Cand {
    L0,
    Guard { level: usize, idx: usize, why: Why },
}

/// What a job does: merge `inputs` (from `src`) and write them into the guards of `out` inside
/// `[lo, hi)`; in place when `out == src`.
struct Spec {
    src: usize,
    out: usize,
    lo: Option<GKey>,
    hi: Option<GKey>,
    inputs: Vec<Arc<TableFile>>,
    /// `out` is treated as the last level: children that cannot take another table are
    /// merged (seek-based compaction into the deepest level, so it flattens the tree).
    bottom: bool,
}

/// The fragmented policy: reservations and the state shared with its versions.
pub struct Fragmented {
    shared: Arc<Shared>,
    locks: Reservations<RangeLock, FragmentedVersion>,
}

impl Default for Fragmented {
    fn default() -> Self {
        Self::new()
    }
}

impl Fragmented {
    /// A policy with no state.
    pub fn new() -> Self {
        Fragmented {
            shared: Arc::new(Shared::new()),
            locks: Reservations::default(),
        }
    }

    fn v<'a>(&self, version: &'a Arc<dyn LayoutVersion>) -> Option<&'a FragmentedVersion> {
        version.as_any().downcast_ref::<FragmentedVersion>()
    }

    /// Hands the options the read path needs to the versions.
    fn sync_opts(&self, o: &FragmentedOptions) {
        let s = &self.shared;
        s.seek_threshold
            .store(o.seek_compaction_threshold, Ordering::Relaxed);
        s.parallel_seeks.store(o.parallel_seeks, Ordering::Relaxed);
        s.pool_threads
            .store(o.parallel_seek_threads, Ordering::Relaxed);
    }

    /// Compaction candidates, most urgent first.
    fn candidates(&self, v: &FragmentedVersion, o: &FragmentedOptions, hot: bool) -> Vec<Cand> {
        let mut c: Vec<(f64, Cand)> = Vec::new();
        let last = last_level(v, o);
        let max = o.max_sstables_per_guard;
        if v.l0.len() >= o.l0_compaction_trigger {
            c.push((v.l0.len() as f64 / o.l0_compaction_trigger as f64, Cand::L0));
        }
        for j in 1..=last {
            let Some(lvl) = v.level(j) else { continue };
            if lvl.tables == 0 {
                continue;
            }
            if lvl.max_guard_tables > max {
                for (idx, g) in lvl.guards.iter().enumerate() {
                    if g.tables.len() > max {
                        let why = Why::Count;
                        c.push((
                            g.tables.len() as f64 / max as f64,
                            Cand::Guard { level: j, idx, why },
                        ));
                    }
                }
            }
            if j == last {
                continue;
            }
            let budget = level_budget(o, j);
            let over_budget = budget > 0 && lvl.bytes > budget;
            // Aggressive compaction: two adjacent levels of about the same size (within
            // `aggressive_ratio` of each other) cost a read each for no write saving; merging
            // the upper one down removes a level. A level far larger than a barely started
            // next level is left alone (moving it would remove no level).
            let next = v.level_bytes(j + 1) as f64;
            let here = lvl.bytes as f64;
            let aggressive = o.aggressive_ratio > 0.0
                && next > 0.0
                && (here - next).abs() <= o.aggressive_ratio * next;
            if over_budget || aggressive {
                let score = if over_budget {
                    lvl.bytes as f64 / budget as f64
                } else {
                    1.0
                };
                let mut order: Vec<usize> = (0..lvl.guards.len())
                    .filter(|&i| lvl.guards.get(i).is_some_and(|g| !g.tables.is_empty()))
                    .collect();
                order.sort_by_key(|&i| std::cmp::Reverse(lvl.guards.get(i).map_or(0, |g| g.bytes)));
                for idx in order {
                    c.push((
                        score,
                        Cand::Guard {
                            level: j,
                            idx,
                            why: Why::Size,
                        },
                    ));
                }
            }
        }
        if hot {
            let hints: Vec<(usize, Option<GKey>)> = std::mem::take(&mut *self.shared.hot.lock());
            for (level, key) in hints {
                let Some(lvl) = v.level(level) else { continue };
                let idx = match &key {
                    None => 0,
                    Some(k) => {
                        let i = lvl.guard_index(k);
                        if lvl.guards.get(i).and_then(|g| g.key.as_ref()) != Some(k) {
                            continue;
                        }
                        i
                    }
                };
                let hot_enough = lvl.guards.get(idx).is_some_and(|g| {
                    let need = o
                        .seek_compaction_threshold
                        .max(g.bytes / iter::SEEK_COST_BYTES);
                    g.tables.len() >= 2 && g.seeks.load(Ordering::Relaxed) >= need
                });
                if hot_enough {
                    c.push((
                        1.0,
                        Cand::Guard {
                            level,
                            idx,
                            why: Why::Seek,
                        },
                    ));
                }
            }
        }
        c.sort_by(|a, b| b.0.total_cmp(&a.0));
        c.into_iter().map(|(_, c)| c).collect()
    }

    /// The job for a candidate (None if its inputs are busy).
    fn job_for(
        &self,
        v: &FragmentedVersion,
        o: &FragmentedOptions,
        cand: &Cand,
    ) -> Option<Box<dyn Job>> {
        match cand {
            Cand::L0 => self.build(
                v,
                o,
                Spec {
                    src: 0,
                    out: 1,
                    lo: None,
                    hi: None,
                    inputs: v.l0.to_vec(),
                    bottom: false,
                },
            ),
            Cand::Guard { level, idx, why } => self.guard_job(v, o, *level, *idx, *why),
        }
    }

    /// Compacts guard `idx` of `level`: into the next level, or in place at the last level
    /// (and at the second-to-last when merging into the last would cost > 25× its bytes).
    fn guard_job(
        &self,
        v: &FragmentedVersion,
        o: &FragmentedOptions,
        level: usize,
        idx: usize,
        why: Why,
    ) -> Option<Box<dyn Job>> {
        let out = target_level(v, o, level, idx, why)?;
        let bottom = why == Why::Seek && out > level && out >= v.deepest_nonempty();
        let lvl = v.level(level)?;
        let g = lvl.guards.get(idx)?;
        let (lo, hi) = lvl.range(idx);
        self.build(
            v,
            o,
            Spec {
                src: level,
                out,
                lo,
                hi,
                inputs: g.tables.clone(),
                bottom,
            },
        )
    }

    /// Plans a job under the lock table: reservations, guard commits and deletions, child
    /// guards, merges and moves.
    fn build(
        &self,
        v: &FragmentedVersion,
        o: &FragmentedOptions,
        spec: Spec,
    ) -> Option<Box<dyn Job>> {
        spec.inputs.first()?;
        let last = last_level(v, o);
        let Spec {
            src,
            out,
            lo,
            hi,
            inputs,
            bottom,
        } = spec;
        let in_place = out == src;
        let (rlo, rhi) = (lo.as_deref(), hi.as_deref());
        let mut lt = self.locks.lock();
        lt.gc(v);
        let job = lt.new_job();
        if !lt.free_range(job, src, rlo, rhi, Mode::Source)
            || !lt.free_range(job, out, rlo, rhi, Mode::Shared)
        {
            return None;
        }
        lt.take_range(job, src, &lo, &hi, Mode::Source);
        lt.take_range(job, out, &lo, &hi, Mode::Shared);
        let input_nos: HashSet<u64> = inputs.iter().map(|t| t.meta.file_no).collect();

        // Commit pending guards of the range, deepest level first.
        let mut excl: HashMap<usize, bool> = HashMap::new();
        let mut commits: BTreeMap<usize, Vec<GKey>> = BTreeMap::new();
        let lower = match lo.clone() {
            Some(k) => Bound::Included(k),
            None => Bound::Unbounded,
        };
        let upper = match hi.clone() {
            Some(k) => Bound::Excluded(k),
            None => Bound::Unbounded,
        };
        let pend: Vec<(GKey, usize)> = v
            .pending
            .range::<GKey, _>((lower, upper))
            .map(|(k, &t)| (k.clone(), t))
            .collect();
        let min_level = src.max(1);
        for (k, top) in pend {
            let mut deeper_ok = true;
            for j in (top.max(min_level)..=last).rev() {
                if v.is_guard(j, &k) {
                    deeper_ok = true;
                    continue;
                }
                if !deeper_ok {
                    break;
                }
                let locked = *excl
                    .entry(j)
                    .or_insert_with(|| lt.take_range(job, j, &lo, &hi, Mode::Exclusive));
                let removed: &HashSet<u64> = &input_nos;
                if !locked || straddles(v, j, &k, if j == src { Some(removed) } else { None }) {
                    break;
                }
                commits.entry(j).or_default().push(k.clone());
            }
        }
        let committing =
            |j: usize, k: &GKey| commits.get(&j).is_some_and(|ks| ks.iter().any(|c| c == k));

        let max = o.max_sstables_per_guard;
        // Consolidate empty and skewed child guards (their tables join the left neighbour).
        let empty_level = version::Level::empty();
        let out_lvl = v.level(out).unwrap_or(&empty_level);
        let mut dels: Vec<GKey> = Vec::new();
        if !in_place {
            let locked = *excl
                .entry(out)
                .or_insert_with(|| lt.take_range(job, out, &lo, &hi, Mode::Exclusive));
            if locked {
                let avg = out_lvl.bytes / out_lvl.guards.len().max(1) as u64;
                let receives = |g: &version::Guard| {
                    let gi = g.key.as_deref().map_or(0, |k| out_lvl.guard_index(k));
                    let (glo, ghi) = out_lvl.range(gi);
                    inputs
                        .iter()
                        .any(|t| intersects(t, glo.as_deref(), ghi.as_deref()))
                };
                // The surviving guard to the left: its tables, and whether it gets a fragment.
                let (mut left, mut left_in) = (0usize, false);
                for g in out_lvl
                    .guards
                    .get(out_lvl.guards_in(rlo, rhi))
                    .unwrap_or_default()
                {
                    let incoming = receives(g);
                    let here = g.tables.len();
                    let deletable = g.key.as_ref().is_some_and(|k| {
                        Some(k) != lo.as_ref() && !v.is_guard(src, k) && !committing(src, k)
                    });
                    let empty = here == 0 && !incoming;
                    // A small guard joins its neighbour only if the neighbour then still
                    // holds no more tables than allowed (no extra compaction follows).
                    let skewed = o.guard_skew_ratio > 0
                        && here > 0
                        && g.bytes.saturating_mul(o.guard_skew_ratio) < avg
                        && left + here + usize::from(left_in || incoming) <= max;
                    match g.key.clone() {
                        Some(k) if deletable && (empty || skewed) => {
                            left += here;
                            left_in |= incoming;
                            dels.push(k);
                        }
                        _ => (left, left_in) = (here, incoming),
                    }
                }
            }
        }

        // Child guards of the output level inside the range.
        let mut keys: BTreeSet<GKey> = out_lvl.keys_between(rlo, rhi).into_iter().collect();
        keys.extend(commits.get(&out).cloned().unwrap_or_default());
        for d in &dels {
            keys.remove(d);
        }
        let mut bounds: Vec<Option<GKey>> = vec![lo.clone()];
        bounds.extend(keys.into_iter().map(Some));
        let existing: Vec<Arc<TableFile>> = if in_place {
            Vec::new()
        } else {
            out_lvl
                .guards
                .get(out_lvl.guards_in(rlo, rhi))
                .unwrap_or_default()
                .iter()
                .flat_map(|g| g.tables.iter())
                .filter(|t| !input_nos.contains(&t.meta.file_no))
                .cloned()
                .collect()
        };
        let mut children: Vec<Child> = Vec::with_capacity(bounds.len());
        for (i, clo) in bounds.iter().enumerate() {
            let chi = bounds.get(i + 1).cloned().unwrap_or_else(|| hi.clone());
            let (a, b) = (clo.as_deref(), chi.as_deref());
            let inside = |t: &Arc<TableFile>| {
                a.is_none_or(|a| t.meta.smallest_user() >= a)
                    && b.is_none_or(|b| t.meta.smallest_user() < b)
            };
            children.push(Child {
                lo: clo.clone(),
                hi: chi.clone(),
                inputs: inputs
                    .iter()
                    .filter(|t| intersects(t, a, b))
                    .cloned()
                    .collect(),
                existing: existing.iter().filter(|t| inside(t)).cloned().collect(),
                merge: false,
                bottommost: false,
            });
        }

        // Merge children that cannot take another table: the last level has nowhere to push
        // them, and with one table per guard the layout behaves like leveled.
        // A child also merges when its fragment would interleave with an older table it
        // overlaps: a get stops at the first table of a guard holding the key, which is only
        // right if, wherever two tables overlap, the newer holds only newer entries. Arrivals
        // keep that order until guards are consolidated at two levels; then a fragment can
        // carry entries older than a table the child already holds (test
        // `consolidation_never_lands_an_interleaving_fragment`).
        // The fragment spans from its inputs' smallest to their largest key (one merged table).
        let interleaves = |c: &Child| {
            let in_min = c.inputs.iter().map(|t| t.meta.min_seq).min();
            let lo = c.inputs.iter().map(|t| t.meta.smallest_user()).min();
            let hi = c.inputs.iter().map(|t| t.meta.largest_user()).max();
            let (Some(in_min), Some(lo), Some(hi)) = (in_min, lo, hi) else {
                return false;
            };
            !in_place
                && c.existing.iter().any(|t| {
                    t.meta.max_seq >= in_min
                        && lo <= t.meta.largest_user()
                        && t.meta.smallest_user() <= hi
                })
        };
        let wants = |c: &Child| {
            let full = !in_place
                && (out == last || max == 1 || bottom)
                && !c.inputs.is_empty()
                && !c.existing.is_empty()
                && c.existing.len() + 1 > max;
            full || interleaves(c)
        };
        if children.iter().any(wants) {
            if lt.take_range(job, out, &lo, &hi, Mode::Source) {
                for c in &mut children {
                    c.merge = wants(c);
                }
            } else if children.iter().any(interleaves) {
                // Appending would break that order: plan this guard again later.
                lt.release(job);
                return None;
            }
        }
        for c in &mut children {
            let nothing_older_here = c.existing.is_empty() || c.merge;
            c.bottommost =
                nothing_older_here && !v.data_below(out, c.lo.as_deref(), c.hi.as_deref());
        }

        // A table that falls inside one child guard, alone, moves without being rewritten.
        let mut moves: Vec<Arc<TableFile>> = Vec::new();
        if !in_place {
            for c in &mut children {
                if c.merge || c.inputs.len() != 1 {
                    continue;
                }
                let Some(t) = c.inputs.first().cloned() else {
                    continue;
                };
                let (a, b) = (c.lo.as_deref(), c.hi.as_deref());
                let within = a.is_none_or(|a| t.meta.smallest_user() >= a)
                    && b.is_none_or(|b| t.meta.largest_user() < b);
                if within {
                    moves.push(t);
                    c.inputs.clear();
                }
            }
        }

        // `Exclusive` was taken wherever the plan might commit or delete guards. Where it does
        // neither, it would only keep other jobs out: a push that changes no guard of its
        // output level must not stop that level's guards from being compacted meanwhile
        // (`Source` beside this job's `Shared`), which is the parallelism fragments allow.
        for (&j, &locked) in &excl {
            let changes = commits.contains_key(&j) || (j == out && !dels.is_empty());
            if locked && !changes {
                lt.release_mode(job, j, Mode::Exclusive);
            }
        }

        let mut records: Vec<LayoutRecord> = Vec::new();
        if v.max_levels.is_none() {
            // Keyspaces created before the record existed: fix the level count now.
            records.push(version::levels_record(last + 1));
        }
        for (j, ks) in commits.iter().rev() {
            records.push(guard_record(TAG_COMMIT, *j, ks));
        }
        if !dels.is_empty() {
            records.push(guard_record(TAG_DELETE, out, &dels));
        }
        drop(lt);
        children.retain(|c| !c.inputs.is_empty() || c.merge);
        Some(Box::new(FragJob {
            out,
            inputs,
            children,
            moves,
            records,
            res: self.locks.hold(job),
            src,
        }))
    }
}

/// Where guard `idx` of `level` is compacted to: the next level, or `level` itself (merged in
/// place) at the last level, at the deepest level for manual compaction, and at the
/// second-to-last level when merging into the last would rewrite more than `rewrite_factor` ×
/// its bytes (the paper's 25× rule). None when there is nothing to do.
fn target_level(
    v: &FragmentedVersion,
    o: &FragmentedOptions,
    level: usize,
    idx: usize,
    why: Why,
) -> Option<usize> {
    let lvl = v.level(level)?;
    let g = lvl.guards.get(idx)?;
    if g.tables.is_empty() {
        return None;
    }
    let (lo, hi) = lvl.range(idx);
    let last = last_level(v, o);
    // Manual and seek-based compaction stop at the deepest non-empty level: they reduce the
    // tables a read meets and should not open a new level.
    let bottom = match why {
        Why::Manual | Why::Seek => v.deepest_nonempty().max(1).min(last),
        _ => last,
    };
    let in_place = level >= bottom;
    let mut out = if in_place { level } else { level + 1 };
    if !in_place && out == bottom && why != Why::Manual && g.tables.len() > 1 {
        let max = o.max_sstables_per_guard;
        let cost: u64 = v.level(bottom).map_or(0, |l| {
            l.guards
                .get(l.guards_in(lo.as_deref(), hi.as_deref()))
                .unwrap_or_default()
                .iter()
                .filter(|c| !c.tables.is_empty() && c.tables.len() + 1 > max)
                .map(|c| c.bytes)
                .sum()
        });
        if cost > o.rewrite_factor.saturating_mul(g.bytes) {
            out = level;
        }
    }
    if out == level && g.tables.len() < 2 && !v.pending_in(lo.as_deref(), hi.as_deref()) {
        return None;
    }
    Some(out)
}

/// Whether a table of level `j` (not among `removed`) straddles guard key `k`.
fn straddles(v: &FragmentedVersion, j: usize, k: &[u8], removed: Option<&HashSet<u64>>) -> bool {
    let Some(lvl) = v.level(j) else {
        return false;
    };
    lvl.guards.get(lvl.guard_index(k)).is_some_and(|g| {
        g.tables.iter().any(|t| {
            !removed.is_some_and(|r| r.contains(&t.meta.file_no))
                && t.meta.smallest_user() < k
                && t.meta.largest_user() >= k
        })
    })
}

impl FragmentedVersion {
    /// Whether any uncommitted guard lies in `[lo, hi)`.
    fn pending_in(&self, lo: Option<&[u8]>, hi: Option<&[u8]>) -> bool {
        let lower = lo.map_or(Bound::Unbounded, Bound::Included);
        self.pending
            .range::<[u8], _>((lower, Bound::Unbounded))
            .next()
            .is_some_and(|(k, _)| hi.is_none_or(|h| &k[..] < h))
    }
}

/// One output guard of a job.
struct Child {
    lo: Option<GKey>,
    hi: Option<GKey>,
    /// Source tables intersecting the child.
    inputs: Vec<Arc<TableFile>>,
    /// Tables the child holds (merged only when `merge`).
    existing: Vec<Arc<TableFile>>,
    merge: bool,
    /// No older data for the child's keys remains outside this merge.
    bottommost: bool,
}

struct FragJob {
    out: usize,
    inputs: Vec<Arc<TableFile>>,
    children: Vec<Child>,
    moves: Vec<Arc<TableFile>>,
    records: Vec<LayoutRecord>,
    /// Held until the edit is seen installed (see `locks`).
    res: Reservation,
    src: usize,
}

impl Job for FragJob {
    fn is_trivial(&self) -> bool {
        self.children.is_empty() && !self.moves.is_empty()
    }

    fn run(&mut self, ctx: &JobCtx<'_>) -> Result<KsEdit> {
        let this = &mut *self;
        let mut e = KsEdit::default();
        for t in &this.inputs {
            e.removed.push(t.meta.file_no);
        }
        for t in &this.moves {
            e.added.push(AddedTable {
                level: this.out as u32,
                slot: 0,
                format: 0,
                meta: t.meta.clone(),
            });
        }
        for c in &this.children {
            // Between fragments: a flush waiting for a free thread runs here.
            ctx.flush_point()?;
            let mut srcs: Vec<Box<dyn InternalIter>> = Vec::new();
            for t in &c.inputs {
                srcs.push(Box::new(t.iter(false)?));
            }
            if c.merge {
                for t in &c.existing {
                    srcs.push(Box::new(t.iter(false)?));
                    e.removed.push(t.meta.file_no);
                }
            }
            let mut it = BoundedIter::new(MergingIter::new(srcs), c.lo.clone(), c.hi.clone());
            // One fragment per child guard.
            let merged: &[Arc<TableFile>] = if c.merge { &c.existing } else { &[] };
            let outs = merge_into_tables(
                ctx,
                &mut it,
                c.bottommost,
                zeroed_bound(c.inputs.iter().chain(merged)),
                &mut SizeCutter(u64::MAX),
                WriteCause::Compaction,
            )?;
            for meta in outs {
                e.added.push(AddedTable {
                    level: this.out as u32,
                    slot: 0,
                    format: 0,
                    meta,
                });
            }
        }
        e.records = std::mem::take(&mut this.records);
        if let Some(t) = this.inputs.first() {
            retire_on(&mut this.res, this.src, t.meta.file_no);
        }
        Ok(e)
    }
}

/// Guards picked from a memtable's keys, as pending-guard records.
fn pick_guards(
    v: &FragmentedVersion,
    o: &FragmentedOptions,
    seed: u64,
    mem: &Memtable,
) -> Vec<LayoutRecord> {
    // Guards are picked only for levels data can reach soon (down to one below the deepest
    // level holding tables): deeper levels get theirs later, from a larger key count, so
    // early flushes do not cover the deep levels with guards sized for a small store.
    let bottom = last_level(v, o);
    let last = bottom.min(v.deepest_nonempty() + 1).max(1);
    let top = top_bits(o, bottom, v.entries + mem.len() as u64);
    let need = level_bits(top, o.bit_decrement, last);
    let mut by_level: BTreeMap<usize, Vec<GKey>> = BTreeMap::new();
    let mut prev: Option<Vec<u8>> = None;
    // A fragmented keyspace's memtables are sorted; a hashed one would yield no guards here and
    // fail in the flush below.
    let _ = mem.for_each_in_order(|ikey, _| {
        let uk = key::user_key(ikey);
        if uk.is_empty() || prev.as_deref() == Some(uk) {
            return Ok(());
        }
        prev = Some(uk.to_vec());
        let h = guard_hash(seed, uk);
        if h.trailing_ones() < need {
            return Ok(());
        }
        let Some(l) = guard_level(h, top, o.bit_decrement, last) else {
            return Ok(());
        };
        if v.is_guard(l, uk) || v.pending.get(uk).is_some_and(|&t| t <= l) {
            return Ok(());
        }
        by_level.entry(l).or_default().push(GKey::from(uk));
        Ok(())
    });
    by_level
        .into_iter()
        .map(|(l, ks)| guard_record(TAG_PENDING, l, &ks))
        .collect()
}

impl Layout for Fragmented {
    fn kind(&self) -> LayoutKind {
        LayoutKind::Fragmented
    }

    fn table_format(&self) -> u8 {
        crate::table::FORMAT_SORTED
    }

    fn empty_version(&self, _tables: &Arc<TableCtx>) -> Arc<dyn LayoutVersion> {
        Arc::new(FragmentedVersion::empty(self.shared.clone()))
    }

    fn init_records(&self, opts: &KeyspaceOptions, out: &mut KsEdit) {
        out.records
            .push(version::levels_record(opts.fragmented.max_levels));
    }

    fn flush(
        &self,
        ctx: &JobCtx<'_>,
        version: &Arc<dyn LayoutVersion>,
        mem: &Memtable,
    ) -> Result<KsEdit> {
        let o = &ctx.opts.fragmented;
        self.sync_opts(o);
        let mut e = KsEdit::default();
        if let Some(meta) = flush_to_table(ctx, mem)? {
            e.added.push(AddedTable {
                level: 0,
                slot: 0,
                format: 0,
                meta,
            });
        }
        if let Some(v) = self.v(version) {
            e.records = pick_guards(v, o, guard_seed(&ctx.hash_key), mem);
        }
        Ok(e)
    }

    fn pick(&self, version: &Arc<dyn LayoutVersion>, ctx: &JobCtx<'_>) -> Option<Box<dyn Job>> {
        let v = self.v(version)?;
        let o = &ctx.opts.fragmented;
        self.sync_opts(o);
        self.locks.lock().gc(v);
        for cand in self.candidates(v, o, true) {
            if let Some(j) = self.job_for(v, o, &cand) {
                return Some(j);
            }
        }
        None
    }

    fn needs_compaction(&self, version: &Arc<dyn LayoutVersion>, opts: &KeyspaceOptions) -> bool {
        self.v(version)
            .is_some_and(|v| !self.candidates(v, &opts.fragmented, false).is_empty())
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
        let o = &ctx.opts.fragmented;
        self.locks.lock().gc(v);
        let in_scope =
            |ts: &[Arc<TableFile>]| ts.iter().filter(|t| scope.contains(t.meta.file_no)).count();
        if in_scope(&v.l0) > 0 {
            return match self.job_for(v, o, &Cand::L0) {
                Some(j) => ManualStep::Run(j),
                None => ManualStep::Wait,
            };
        }
        // Every guard holding a table in scope down to the deepest non-empty level, then the
        // deepest level's guards down to one table in scope each (later fragments may stay).
        let deepest = v.deepest_nonempty();
        let mut busy = false;
        for level in 1..=deepest {
            let Some(lvl) = v.level(level) else { continue };
            for (idx, g) in lvl.guards.iter().enumerate() {
                let n = in_scope(&g.tables);
                let todo = if level < deepest { n > 0 } else { n > 1 };
                if !todo {
                    continue;
                }
                match self.guard_job(v, o, level, idx, Why::Manual) {
                    Some(j) => return ManualStep::Run(j),
                    None => busy = true,
                }
            }
            if busy {
                return ManualStep::Wait;
            }
        }
        ManualStep::Done
    }

    fn pressure(&self, version: &Arc<dyn LayoutVersion>, opts: &KeyspaceOptions) -> Pressure {
        let n = self.v(version).map_or(0, |v| v.l0.len());
        let o = &opts.fragmented;
        Pressure::of_backlog(n, o.l0_slowdown_trigger, o.l0_stop_trigger)
    }
}
