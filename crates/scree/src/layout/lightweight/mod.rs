//! The `lightweight` layout: LWC-tree (lwc-tree.txt; decisions in
//! docs/architecture-lightweight.md). Flushes write one-segment DTables to level 0; a
//! light-weight compaction reads one victim (all of level 0, or one group of level i), merges
//! it once and appends the pieces, cut by the routing ranges of level i+1, to those DTables as
//! new segments (append-then-switch), never reading or rewriting next-level data. The
//! neighbour that takes over the victim's range stores the targets' new tails (metadata
//! aggregation); an overly full target hands part of its range to its next neighbour
//! (workload balance); a DTable past the band size is divided into n equal ones (equal
//! division). Every job claims the key ranges it holds on its levels ([`LwcClaim`]); with
//! `LightweightOptions::concurrent_jobs` (off by default: it wrote more) jobs whose ranges
//! are disjoint run at the same time, otherwise one runs at a time.
//!
//! `dtable` owns the file format, `version` the version (lookups, scans, the range records),
//! `jobs` the compaction and division; this module the policy.

pub mod dtable;
mod jobs;
#[cfg(test)]
mod tests;
pub mod version;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::error::Result;
use crate::layout::reserve::{self, Claim, Reservations};
use crate::layout::{Job, JobCtx, Layout, LayoutVersion, ManualScope, ManualStep, Pressure};
use crate::manifest::edit::{AddedTable, KsEdit};
use crate::memtable::Memtable;
use crate::options::{KeyspaceOptions, Layout as LayoutKind, LightweightOptions};
use crate::stats::WriteCause;
use crate::table::{TableCtx, TableFile};

use dtable::FORMAT_DTABLE;
use jobs::{size_limit, CompactJob, DivideJob, NewTable};
use version::{Level, LwcVersion};

/// The LWC-tree policy of one keyspace.
#[derive(Default)]
pub struct Lightweight {
    /// The key ranges running jobs hold, per level (several jobs only with
    /// `concurrent_jobs`, on disjoint ranges).
    claims: Reservations<LwcClaim, LwcVersion>,
    /// When a manual compaction last found its ranges held: background picks defer to it
    /// for a moment, so that a stream of background jobs does not starve it.
    manual_waiting: Mutex<Option<Instant>>,
    /// Round-robin victim pointer per level: the routing bound of the last victim group.
    pointers: Mutex<Vec<Vec<u8>>>,
}

/// A key range `[lo, hi)` of one level (`hi` `None`: to the end of the key space) that a
/// running job reads or writes: its victims and the neighbour taking over their range, or
/// the next-level tables it appends to, rewrites, moves a bound of or reads the tail of.
/// Every change a job makes to its levels (data, routing bounds, aggregated copies) lies in
/// the ranges it holds, so two jobs holding disjoint ones never see each other's tables
/// change under them (docs/architecture-lightweight.md, "Concurrent jobs").
#[derive(Clone)]
pub(crate) struct LwcClaim {
    level: usize,
    lo: Vec<u8>,
    hi: Option<Vec<u8>>,
}

impl Claim for LwcClaim {
    fn conflicts(&self, other: &Self) -> bool {
        self.level == other.level
            && other.hi.as_ref().is_none_or(|h| self.lo < *h)
            && self.hi.as_ref().is_none_or(|h| other.lo < *h)
    }
}

/// What a job holds, released when it is dropped (after its edit is installed, under the
/// engine's pick lock, so the next pick sees the edit).
pub(crate) type Reservation = reserve::Reservation<LwcClaim, LwcVersion>;

impl LwcClaim {
    /// All of level `level`.
    fn whole(level: usize) -> LwcClaim {
        LwcClaim {
            level,
            lo: Vec::new(),
            hi: None,
        }
    }

    /// The tables `first..end` of `lv` (level `level`): from the first's bound to the bound
    /// after the last.
    fn tables(level: usize, lv: &Level, first: usize, end: usize) -> LwcClaim {
        LwcClaim {
            level,
            lo: lv.los.get(first).cloned().unwrap_or_default(),
            hi: lv.los.get(end).cloned(),
        }
    }

    /// The tables of level `level` that a compaction of the keys `[lo, hi)` from the level
    /// above may touch: those whose routing range meets it (targets, and the tables whose
    /// tails the absorbing neighbour stores), widened to whole groups (a full target is
    /// rewritten with its group) and one table past the last (balance moves its bound).
    fn below(v: &LwcVersion, level: usize, lo: &[u8], hi: Option<&[u8]>) -> LwcClaim {
        let Some(lv) = v.level(level).filter(|lv| !lv.tables.is_empty()) else {
            return LwcClaim::whole(level);
        };
        let a = lv.owner(lo).unwrap_or(0);
        let b = match hi {
            Some(h) => lv
                .los
                .partition_point(|l| l.as_slice() < h)
                .saturating_sub(1),
            None => lv.tables.len().saturating_sub(1),
        }
        .max(a);
        let first = lv.groups.iter().find(|g| g.1 > a).map_or(a, |g| g.0);
        let end = lv.groups.iter().find(|g| g.1 > b).map_or(b + 1, |g| g.1);
        LwcClaim::tables(level, lv, first, end + 1)
    }
}

/// One way to run a due job: the victim group (for a level) and the claims it needs.
type Candidate = (Option<(usize, usize)>, Vec<LwcClaim>);

/// The smallest key after `k` (an exclusive bound just past it).
fn after(k: &[u8]) -> Vec<u8> {
    let mut a = k.to_vec();
    a.push(0);
    a
}

/// How long background picks defer to a manual compaction that found the busy flag taken
/// (it asks again within 20 ms while it waits).
const MANUAL_DEFERRAL: Duration = Duration::from_millis(200);

fn max_bytes(o: &LightweightOptions, level: usize) -> u64 {
    let mut b = o.level_base_bytes;
    for _ in 1..level {
        b = b.saturating_mul(o.level_size_ratio);
    }
    b
}

/// Whether table `t` is due for an equal division: past the size limit, and appended to
/// since it was written (it has dead bytes: every append supersedes a tail). A table just
/// written by a division is not divided again until it grows: a single entry larger than the
/// limit (or a key beside one) would otherwise be rewritten over and over.
fn oversized(o: &LightweightOptions, t: &TableFile) -> bool {
    t.meta.size > o.dtable_max_bytes && t.meta.dead_bytes() > 0
}

/// Whether table `t` is within a quarter of the size limit `limit`: a compaction into it
/// would likely have to rewrite it rather than append.
fn nearly_full(limit: u64, t: &TableFile) -> bool {
    t.meta.size > limit - limit / 4
}

/// What is due, most urgent first.
enum Due {
    Divide(usize, (usize, usize)),
    L0,
    Level(usize),
    /// Every table of a level at once (a manual compaction: the level is left empty).
    WholeLevel(usize),
}

impl Lightweight {
    /// A policy.
    pub fn new() -> Self {
        Self::default()
    }

    fn v(version: &Arc<dyn LayoutVersion>) -> Option<&LwcVersion> {
        version.as_any().downcast_ref::<LwcVersion>()
    }

    fn due(v: &LwcVersion, o: &LightweightOptions) -> Vec<Due> {
        let mut out = Vec::new();
        let deepest = v.deepest();
        for (i, lv) in v.levels.iter().enumerate() {
            let l = i + 1;
            // A level above the deepest that is over its budget empties its oversized tables
            // by compacting them down (which their data must do anyway) instead of rewriting
            // them in place first: a division there was half of all writes at 10M keys.
            if l < deepest && l + 1 < o.max_levels && lv.bytes > max_bytes(o, l) {
                continue;
            }
            if let Some(&g) = lv.groups.iter().find(|g| {
                lv.tables
                    .get(g.0..g.1)
                    .unwrap_or_default()
                    .iter()
                    .any(|t| oversized(o, t))
            }) {
                out.push(Due::Divide(i + 1, g));
            }
        }
        if v.l0.len() >= o.l0_compaction_trigger {
            out.push(Due::L0);
        }
        let mut scored: Vec<(f64, usize)> = (1..o.max_levels.saturating_sub(1))
            .filter_map(|l| {
                let b = v.level(l)?.bytes;
                let s = b as f64 / max_bytes(o, l) as f64;
                (s >= 1.0).then_some((s, l))
            })
            .collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0));
        out.extend(scored.into_iter().map(|(_, l)| Due::Level(l)));
        out
    }

    /// Takes `claims` for a new job, or `None` when a running job holds a conflicting range;
    /// counts a job that starts while another runs, and one that shares a level with it.
    fn reserve(&self, ctx: &JobCtx<'_>, claims: Vec<LwcClaim>) -> Option<Reservation> {
        let mut t = self.claims.lock();
        let others = !t.is_empty();
        if others && !ctx.opts.lightweight.concurrent_jobs {
            return None;
        }
        let shared = t.any_held(|h| claims.iter().any(|c| c.level == h.level));
        let job = t.new_job();
        if !t.take_all(job, claims) {
            return None;
        }
        drop(t);
        let c = &ctx.stats.lwc;
        if others {
            c.concurrent_jobs.fetch_add(1, Ordering::Relaxed);
        }
        if shared {
            c.shared_level_jobs.fetch_add(1, Ordering::Relaxed);
        }
        Some(self.claims.hold(job))
    }

    /// The ways to run `due`, preferred first: for a level, one per victim group (with the
    /// claims of the group, the neighbour taking over its range, and the next-level tables
    /// the compaction may touch); otherwise one.
    fn candidates(
        &self,
        v: &LwcVersion,
        o: &LightweightOptions,
        limit: u64,
        due: &Due,
    ) -> Vec<Candidate> {
        match *due {
            Due::Divide(level, g) => {
                let Some(lv) = v.level(level) else {
                    return Vec::new();
                };
                // A group first in its level that keeps nothing gives its empty bound to
                // the table after it.
                let end = if g.0 == 0 { g.1 + 1 } else { g.1 };
                vec![(None, vec![LwcClaim::tables(level, lv, g.0, end)])]
            }
            Due::L0 => {
                let lo = v.l0.iter().map(|t| t.meta.smallest_user()).min();
                let hi = v.l0.iter().map(|t| t.meta.largest_user()).max();
                let below = match (lo, hi) {
                    (Some(lo), Some(hi)) => LwcClaim::below(v, 1, lo, Some(&after(hi))),
                    _ => LwcClaim::whole(1),
                };
                vec![(None, vec![LwcClaim::whole(0), below])]
            }
            Due::WholeLevel(level) => vec![(
                None,
                vec![LwcClaim::whole(level), LwcClaim::whole(level + 1)],
            )],
            Due::Level(level) => {
                let Some(lv) = v.level(level) else {
                    return Vec::new();
                };
                let mut order: Vec<(usize, usize)> = lv.groups.clone();
                if lv.groups.iter().any(|g| {
                    lv.tables
                        .get(g.0..g.1)
                        .unwrap_or_default()
                        .iter()
                        .any(|t| oversized(o, t) || nearly_full(limit, t))
                }) {
                    // The group holding the most data first, when a table is past the limit
                    // or near it: compacting it down empties it, where the next arrival
                    // would have to rewrite it (the limit is never crossed).
                    order.sort_by_key(|g| std::cmp::Reverse(lv.live_bytes(*g)));
                } else {
                    // Round robin over the level's groups.
                    let ptr = self.pointers.lock().get(level).cloned().unwrap_or_default();
                    let i = lv
                        .groups
                        .iter()
                        .position(|&(f, _)| lv.los.get(f).is_some_and(|lo| *lo > ptr))
                        .unwrap_or(0);
                    order.rotate_left(i);
                }
                order
                    .into_iter()
                    .map(|g| {
                        // The victims and the neighbour taking over their range: the left
                        // one, else the right one.
                        let (first, end) = if g.0 > 0 {
                            (g.0 - 1, g.1)
                        } else {
                            (g.0, g.1 + 1)
                        };
                        let here = LwcClaim::tables(level, lv, first, end);
                        let below = LwcClaim::below(v, level + 1, &here.lo, here.hi.as_deref());
                        (Some(g), vec![here, below])
                    })
                    .collect()
            }
        }
    }

    /// The job for `due` (victim group `group` for a level), holding `claims`; `limit` is
    /// the DTable size limit ([`size_limit`]).
    fn job(
        &self,
        v: &LwcVersion,
        o: &LightweightOptions,
        limit: u64,
        due: &Due,
        group: Option<(usize, usize)>,
        claims: Reservation,
    ) -> Option<Box<dyn Job>> {
        match *due {
            Due::Divide(level, g) => {
                let lv = v.level(level)?;
                let group: Vec<_> = lv.tables.get(g.0..g.1)?.to_vec();
                let lo = lv.los.get(g.0)?.clone();
                // Bottommost: no deeper level holds a table (the division's data is all of
                // its keys' versions at this level and above nothing).
                let bottommost = v.deepest() <= level;
                Some(Box::new(DivideJob {
                    level,
                    group,
                    lo,
                    next_after: lv.tables.get(g.1).cloned(),
                    bottommost,
                    n: o.division_count,
                    cap: limit / 2,
                    _claims: claims,
                }))
            }
            Due::L0 => Some(Box::new(compact_job(v, o, limit, 0, v.l0.clone(), claims))),
            Due::WholeLevel(level) => {
                let lv = v.level(level)?;
                Some(Box::new(compact_job(
                    v,
                    o,
                    limit,
                    level,
                    lv.tables.clone(),
                    claims,
                )))
            }
            Due::Level(level) => {
                let lv = v.level(level)?;
                let g = group?;
                {
                    let mut p = self.pointers.lock();
                    if p.len() <= level {
                        p.resize(level + 1, Vec::new());
                    }
                    if let (Some(slot), Some(lo)) = (p.get_mut(level), lv.los.get(g.0)) {
                        *slot = lo.clone();
                    }
                }
                let victims = lv.tables.get(g.0..g.1)?.to_vec();
                let group_first = g.0 == 0;
                let hi = lv.los.get(g.1).cloned();
                // The neighbour taking over the range: the left one, else the right one.
                let absorber = if g.0 > 0 {
                    let a = lv.tables.get(g.0 - 1)?.clone();
                    let lo = lv.los.get(g.0 - 1)?.clone();
                    Some((a, lo, hi))
                } else {
                    let a = lv.tables.get(g.1).cloned();
                    let hi2 = lv.los.get(g.1 + 1).cloned();
                    a.map(|a| (a, Vec::new(), hi2))
                };
                Some(Box::new(CompactJob {
                    next_after: lv.tables.get(g.1).cloned(),
                    group_first,
                    absorber,
                    ..compact_job(v, o, limit, level, victims, claims)
                }))
            }
        }
    }

    /// The first due job whose claims are free. A level-0 compaction or a division that is
    /// due but blocked keeps its ranges from lesser jobs meanwhile (they would only run
    /// after it): otherwise jobs of level 1 taking turns on two threads could hold level 1
    /// for as long as it is over its budget while level 0 fills up.
    fn first_free(&self, v: &LwcVersion, ctx: &JobCtx<'_>, due: &[Due]) -> Option<Box<dyn Job>> {
        let o = &ctx.opts.lightweight;
        let limit = size_limit(ctx, o.dtable_max_bytes);
        let mut wanted: Vec<LwcClaim> = Vec::new();
        for d in due {
            let cands = self.candidates(v, o, limit, d);
            for (group, claims) in &cands {
                if claims.iter().any(|c| wanted.iter().any(|w| w.conflicts(c))) {
                    continue;
                }
                if let Some(r) = self.reserve(ctx, claims.clone()) {
                    return self.job(v, o, limit, d, *group, r);
                }
            }
            if matches!(d, Due::L0 | Due::Divide(..)) {
                if let Some((_, claims)) = cands.into_iter().next() {
                    wanted.extend(claims);
                }
            }
        }
        None
    }
}

/// A light-weight compaction of `victims`, the whole of what `level` holds in their range,
/// into the next level; a compaction of one group sets its neighbour's fields after.
fn compact_job(
    v: &LwcVersion,
    o: &LightweightOptions,
    limit: u64,
    level: usize,
    victims: Vec<Arc<TableFile>>,
    claims: Reservation,
) -> CompactJob {
    CompactJob {
        level,
        victims,
        next_after: None,
        group_first: false,
        absorber: None,
        targets: targets(v, level + 1),
        target_groups: groups(v, level + 1),
        deeper_empty: v.deepest() <= level + 1,
        balance_factor: o.balance_factor,
        limit,
        division_count: o.division_count,
        _claims: claims,
    }
}

fn targets(v: &LwcVersion, l: usize) -> Vec<(Vec<u8>, Arc<TableFile>)> {
    v.level(l).map_or_else(Vec::new, |lv| {
        lv.los
            .iter()
            .cloned()
            .zip(lv.tables.iter().cloned())
            .collect()
    })
}

/// Level `l`'s groups.
fn groups(v: &LwcVersion, l: usize) -> Vec<(usize, usize)> {
    v.level(l).map_or_else(Vec::new, |lv| lv.groups.clone())
}

impl Layout for Lightweight {
    fn kind(&self) -> LayoutKind {
        LayoutKind::Lightweight
    }

    fn table_format(&self) -> u8 {
        FORMAT_DTABLE
    }

    fn empty_version(&self, _tables: &Arc<TableCtx>) -> Arc<dyn LayoutVersion> {
        Arc::new(LwcVersion::default())
    }

    fn flush(
        &self,
        ctx: &JobCtx<'_>,
        _version: &Arc<dyn LayoutVersion>,
        mem: &Memtable,
    ) -> Result<KsEdit> {
        let mut e = KsEdit::default();
        if mem.is_empty() {
            return Ok(e);
        }
        let mut t = NewTable::create(ctx, WriteCause::Flush, None)?;
        mem.for_each_in_order(|k, v| t.add(k, v, None))?;
        e.added.push(AddedTable {
            level: 0,
            slot: 0,
            format: FORMAT_DTABLE,
            meta: t.finish()?,
        });
        Ok(e)
    }

    fn pick(&self, version: &Arc<dyn LayoutVersion>, ctx: &JobCtx<'_>) -> Option<Box<dyn Job>> {
        let v = Self::v(version)?;
        let due = Self::due(v, &ctx.opts.lightweight);
        if due.is_empty()
            || self
                .manual_waiting
                .lock()
                .is_some_and(|t| t.elapsed() < MANUAL_DEFERRAL)
        {
            return None;
        }
        self.first_free(v, ctx, &due)
    }

    fn needs_compaction(&self, version: &Arc<dyn LayoutVersion>, opts: &KeyspaceOptions) -> bool {
        Self::v(version).is_some_and(|v| !Self::due(v, &opts.lightweight).is_empty())
    }

    fn manual(
        &self,
        version: &Arc<dyn LayoutVersion>,
        ctx: &JobCtx<'_>,
        scope: &ManualScope,
    ) -> ManualStep {
        let Some(v) = Self::v(version) else {
            return ManualStep::Done;
        };
        let o = &ctx.opts.lightweight;
        let in_scope = |t: &Arc<TableFile>| scope.contains(t.meta.file_no);
        // Done once no table in scope lies above the deepest level (level 1 at least).
        let deepest = v.deepest().max(1);
        // An oversized DTable in scope is divided first (at its level).
        let divide = v.levels.iter().enumerate().find_map(|(i, lv)| {
            lv.groups
                .iter()
                .find(|g| {
                    lv.tables
                        .get(g.0..g.1)
                        .unwrap_or_default()
                        .iter()
                        .any(|t| in_scope(t) && oversized(o, t))
                })
                .map(|g| Due::Divide(i + 1, *g))
        });
        // Then level by level from the top, each level holding a table in scope compacted
        // whole into the next in one job, which leaves it empty. Tables made since the call
        // join the scope only below a level that held scope tables (a job's outputs lie at
        // or below its inputs), so once a level is emptied no table in scope appears at it
        // or above it again, however long writes go on: at most one job per level (and the
        // divisions). Compacting group by group instead could chase background divisions
        // and rewrites that keep making tables in scope at the level being worked on.
        let step = if divide.is_some() {
            divide
        } else if v.l0.iter().any(in_scope) {
            Some(Due::L0)
        } else {
            (1..deepest)
                .find(|&l| v.level(l).is_some_and(|lv| lv.tables.iter().any(in_scope)))
                .map(Due::WholeLevel)
        };
        let Some(due) = step else {
            return ManualStep::Done;
        };
        let limit = size_limit(ctx, o.dtable_max_bytes);
        let claims = self
            .candidates(v, o, limit, &due)
            .into_iter()
            .next()
            .and_then(|(_, c)| self.reserve(ctx, c));
        let Some(claims) = claims else {
            *self.manual_waiting.lock() = Some(Instant::now());
            return ManualStep::Wait;
        };
        *self.manual_waiting.lock() = None;
        match self.job(v, o, limit, &due, None, claims) {
            Some(j) => ManualStep::Run(j),
            None => ManualStep::Wait,
        }
    }

    fn pressure(&self, version: &Arc<dyn LayoutVersion>, opts: &KeyspaceOptions) -> Pressure {
        let n = Self::v(version).map_or(0, |v| v.l0.len());
        let o = &opts.lightweight;
        Pressure::of_backlog(n, o.l0_slowdown_trigger, o.l0_stop_trigger)
    }
}
