//! The `lightweight` layout: LWC-tree (lwc-tree.txt; decisions in
//! docs/architecture-lightweight.md). Flushes write one-segment DTables to level 0; a
//! light-weight compaction reads one victim (all of level 0, or one group of level i), merges
//! it once and appends the pieces, cut by the routing ranges of level i+1, to those DTables as
//! new segments (append-then-switch), never reading or rewriting next-level data. The
//! neighbour that takes over the victim's range stores the targets' new tails (metadata
//! aggregation); an overly full target hands part of its range to its next neighbour
//! (workload balance); a DTable past the band size is divided into n equal ones (equal
//! division). One job runs at a time per keyspace.
//!
//! `dtable` owns the file format, `version` the version (lookups, scans, the range records),
//! `jobs` the compaction and division; this module the policy.

pub mod dtable;
mod jobs;
#[cfg(test)]
mod tests;
pub mod version;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::error::Result;
use crate::layout::{Job, JobCtx, Layout, LayoutVersion, ManualScope, ManualStep, Pressure};
use crate::manifest::edit::{AddedTable, KsEdit};
use crate::memtable::Memtable;
use crate::options::{KeyspaceOptions, Layout as LayoutKind, LightweightOptions};
use crate::stats::WriteCause;
use crate::table::{TableCtx, TableFile};

use dtable::FORMAT_DTABLE;
use jobs::{size_limit, Busy, CompactJob, DivideJob, NewTable};
use version::LwcVersion;

/// The LWC-tree policy of one keyspace.
#[derive(Default)]
pub struct Lightweight {
    busy: Arc<AtomicBool>,
    /// When a manual compaction last found the busy flag taken: background picks defer to
    /// it for a moment, so that a stream of background jobs does not starve it.
    manual_waiting: Mutex<Option<Instant>>,
    /// Round-robin victim pointer per level: the routing bound of the last victim group.
    pointers: Mutex<Vec<Vec<u8>>>,
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

    fn take(&self) -> Option<Busy> {
        (!self.busy.swap(true, Ordering::SeqCst)).then(|| Busy(self.busy.clone()))
    }

    /// The job for `due`, with the busy flag `busy` taken; `limit` is the DTable size limit
    /// ([`size_limit`]).
    fn job(
        &self,
        v: &LwcVersion,
        o: &LightweightOptions,
        limit: u64,
        due: &Due,
        pick_group: Option<(usize, usize)>,
        busy: Busy,
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
                    _busy: busy,
                }))
            }
            Due::L0 => Some(Box::new(compact_job(v, o, limit, 0, v.l0.clone(), busy))),
            Due::WholeLevel(level) => {
                let lv = v.level(level)?;
                Some(Box::new(compact_job(
                    v,
                    o,
                    limit,
                    level,
                    lv.tables.clone(),
                    busy,
                )))
            }
            Due::Level(level) => {
                let lv = v.level(level)?;
                let g = match pick_group {
                    Some(g) => g,
                    None if lv.groups.iter().any(|g| {
                        lv.tables
                            .get(g.0..g.1)
                            .unwrap_or_default()
                            .iter()
                            .any(|t| oversized(o, t) || nearly_full(limit, t))
                    }) =>
                    {
                        // The group holding the most data, when a table is past the limit or
                        // near it: compacting it down empties it, where the next arrival would
                        // have to rewrite it (the limit is never crossed).
                        *lv.groups.iter().max_by_key(|g| lv.live_bytes(**g))?
                    }
                    None => {
                        // Round robin over the level's groups.
                        let ptr = self.pointers.lock().get(level).cloned().unwrap_or_default();
                        let i = lv
                            .groups
                            .iter()
                            .position(|&(f, _)| lv.los.get(f).is_some_and(|lo| *lo > ptr))
                            .unwrap_or(0);
                        *lv.groups.get(i)?
                    }
                };
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
                    ..compact_job(v, o, limit, level, victims, busy)
                }))
            }
        }
    }
}

/// Level `l`'s tables with their routing bounds, in order.
/// A light-weight compaction of `victims`, the whole of what `level` holds in their range,
/// into the next level; a compaction of one group sets its neighbour's fields after.
fn compact_job(
    v: &LwcVersion,
    o: &LightweightOptions,
    limit: u64,
    level: usize,
    victims: Vec<Arc<TableFile>>,
    busy: Busy,
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
        _busy: busy,
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
        let o = &ctx.opts.lightweight;
        let due = Self::due(v, o);
        let first = due.first()?;
        if self
            .manual_waiting
            .lock()
            .is_some_and(|t| t.elapsed() < MANUAL_DEFERRAL)
        {
            return None;
        }
        let busy = self.take()?;
        self.job(v, o, size_limit(ctx, o.dtable_max_bytes), first, None, busy)
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
                .map(|g| (Due::Divide(i + 1, *g), None))
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
            Some((Due::L0, None))
        } else {
            (1..deepest)
                .find(|&l| v.level(l).is_some_and(|lv| lv.tables.iter().any(in_scope)))
                .map(|l| (Due::WholeLevel(l), None))
        };
        let Some((due, g)) = step else {
            return ManualStep::Done;
        };
        let Some(busy) = self.take() else {
            *self.manual_waiting.lock() = Some(Instant::now());
            return ManualStep::Wait;
        };
        *self.manual_waiting.lock() = None;
        match self.job(v, o, size_limit(ctx, o.dtable_max_bytes), &due, g, busy) {
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
