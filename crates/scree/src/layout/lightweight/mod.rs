//! The `lightweight` layout: LWC-tree (lwc-tree.txt; decisions in
//! docs/architecture-lightweight.md). Flushes write one-segment DTables to level 0; a
//! light-weight compaction reads one victim (all of level 0, or one group of level i), merges
//! it once and appends the pieces, cut by the routing ranges of level i+1, to those DTables as
//! new segments (append-then-switch), never reading or rewriting next-level data. Each
//! victim of level i ≥ 1 leaves its range to a new DTable holding no data, only the targets'
//! new tails (metadata aggregation; the victim's band reset); a table the next arrival would
//! overflow is compacted down first (room before an arrival); an overly full target hands part of its range to its next neighbour
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
}

/// A key range `[lo, hi)` of one level (`hi` `None`: to the end of the key space) that a
/// running job reads or writes: its victims (each left to an empty DTable on its range), or
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
    /// tails the victims' empty DTables store), widened to whole groups (a full target is
    /// rewritten with its group) and one table past the last (balance moves its bound).
    fn below(v: &LwcVersion, level: usize, lo: &[u8], hi: Option<&[u8]>) -> LwcClaim {
        let Some(lv) = v.level(level).filter(|lv| !lv.tables.is_empty()) else {
            return LwcClaim::whole(level);
        };
        let (a, b) = lv.owners(lo, hi);
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

/// The byte budget of level `level` ≥ 1: `level_base_bytes` for level 1, but at least
/// `l0_backlog` (the bytes one level-0 compaction brings, `l0_compaction_trigger` ×
/// `write_buffer_bytes`), times `level_size_ratio` per level below. Level 1 receives whole
/// level-0 compactions as appends: with a budget below one arrival it is over budget after
/// every one, and its tables are compacted down in a hurry, while the next arrival needs room
/// in them (docs/architecture-lightweight.md, "Level budgets").
fn max_bytes(o: &LightweightOptions, l0_backlog: u64, level: usize) -> u64 {
    let mut b = o.level_base_bytes.max(l0_backlog);
    for _ in 1..level {
        b = b.saturating_mul(o.level_size_ratio);
    }
    b
}

/// The bytes one level-0 compaction brings to level 1 (its trigger's worth of flushes), when
/// level 1's budget follows it (`level_base_follows_l0`), else 0.
fn l0_backlog(ko: &KeyspaceOptions) -> u64 {
    let o = &ko.lightweight;
    if !o.level_base_follows_l0 {
        return 0;
    }
    (o.l0_compaction_trigger as u64).saturating_mul(ko.write_buffer_bytes as u64)
}

/// Whether table `t` is due for an equal division: past the size limit, and appended to
/// since it was written (it has dead bytes: every append supersedes a tail). A table just
/// written by a division is not divided again until it grows: a single entry larger than the
/// limit (or a key beside one) would otherwise be rewritten over and over.
fn oversized(o: &LightweightOptions, t: &TableFile) -> bool {
    t.meta.size > o.dtable_max_bytes && t.meta.dead_bytes() > 0
}

/// Room a DTable keeps for its new tail and block boundaries beyond an arrival's estimate.
const TAIL_ROOM: u64 = 64 * 1024;

/// Bytes of the tables of `lv` that hold data: what a level's budget counts. A reset DTable
/// (no segment, only an aggregation block) counts nothing, so a level of only reset tables
/// is never over budget (compacting one down would only reset it again, for ever).
fn data_bytes(lv: &Level) -> u64 {
    lv.tables
        .iter()
        .filter(|t| t.meta.entries > 0)
        .map(|t| t.meta.size)
        .sum()
}

/// Whether group `g` of `lv` holds any data (a victim worth compacting down).
fn holds_data(lv: &Level, g: (usize, usize)) -> bool {
    lv.tables
        .get(g.0..g.1)
        .unwrap_or_default()
        .iter()
        .any(|t| t.meta.entries > 0)
}

/// The group of level `lv` holding the most live bytes: the victim when the level is over
/// its budget. Compacting the fullest group down moves the most data per compaction (each
/// compaction writes a metadata tail per target and an aggregation block), and it is the
/// group an arrival would carry past the size limit first.
fn fullest(lv: &Level) -> Option<(usize, usize)> {
    lv.groups
        .iter()
        .copied()
        .filter(|&g| holds_data(lv, g))
        .max_by_key(|&g| (lv.live_bytes(g), std::cmp::Reverse(g.0)))
}

/// Before an arrival of `arrival` bytes into the tables of level `level` whose routing
/// ranges meet `[lo, hi)`, the group to compact down first, if any: a group holding a table
/// that its even share of the arrival (plus a quarter, the slack the job's plan adds, and
/// room for a tail) would carry past `limit`. Compacting it down resets it (an empty
/// DTable keeps its range), so the arrival is appended instead of rewriting the table with
/// it. `None` when no level may lie below (`max_levels`); when the level is the deepest and
/// the arrival leaves it within its budget (`l0_backlog`, [`max_bytes`]: the deepest level
/// grows by dividing, and a room compaction would start a level its size does not call
/// for; past the budget the level's data goes down anyway, so sending the full table down
/// before the arrival saves rewriting it with the arrival); or when even an empty table
/// could not take its share (the job's plan then rewrites the target with its arrival as
/// `division_count` tables or more, which raises the level's table count so that later
/// arrivals spread thinner). The fullest such group first. The share assumes the arrival
/// spreads over the ranges evenly (random keys; workload balance evens the ranges by data).
fn room_for(
    at: &Room<'_>,
    level: usize,
    lo: &[u8],
    hi: Option<&[u8]>,
    arrival: u64,
) -> Option<(usize, usize)> {
    let &Room {
        v,
        o,
        limit,
        l0_backlog,
    } = at;
    if level == 0 || level + 1 >= o.max_levels {
        return None;
    }
    let lv = v.level(level)?;
    if level >= v.deepest()
        && data_bytes(lv).saturating_add(arrival) <= max_bytes(o, l0_backlog, level)
    {
        return None;
    }
    let (a, b) = lv.owners(lo, hi);
    let share = arrival / (b - a + 1) as u64;
    let need = share
        .saturating_add(share / 4)
        .saturating_add(jobs::PLAN_SLACK + TAIL_ROOM);
    if need >= limit {
        return None;
    }
    lv.groups
        .iter()
        .copied()
        .filter(|&(f, end)| {
            (f.max(a)..end.min(b + 1)).any(|i| {
                lv.tables
                    .get(i)
                    .is_some_and(|t| t.meta.entries > 0 && t.meta.size.saturating_add(need) > limit)
            })
        })
        .max_by_key(|&g| (lv.live_bytes(g), std::cmp::Reverse(g.0)))
}

/// What [`room_for`] and [`room_chain`] judge an arrival against: the version, the
/// options, the DTable size limit and level 0's backlog (which sizes the levels).
struct Room<'a> {
    v: &'a LwcVersion,
    o: &'a LightweightOptions,
    limit: u64,
    l0_backlog: u64,
}

/// The room-making compactions due before an arrival of `arrival` bytes into level
/// `level`'s ranges `[lo, hi)` ([`room_for`]), deepest first: a group compacted down to make
/// room is itself an arrival one level further down.
fn room_chain(at: &Room<'_>, level: usize, lo: &[u8], hi: Option<&[u8]>, arrival: u64) -> Vec<Due> {
    let Some(g) = room_for(at, level, lo, hi, arrival) else {
        return Vec::new();
    };
    let Some(lv) = at.v.level(level) else {
        return Vec::new();
    };
    let Some(glo) = lv.los.get(g.0) else {
        return Vec::new();
    };
    let ghi = lv.los.get(g.1).map(Vec::as_slice);
    let mut out = room_chain(at, level + 1, glo, ghi, lv.live_bytes(g));
    out.push(Due::Room(level, g));
    out
}

/// What is due, most urgent first.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Due {
    Divide(usize, (usize, usize)),
    /// Compact this group of a level down now: the arrival due next would carry a table of
    /// it past the size limit ([`room_for`]).
    Room(usize, (usize, usize)),
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

    /// What is due in `v`, most urgent first; `limit` is the DTable size limit, `l0_backlog`
    /// the bytes a level-0 compaction brings ([`max_bytes`]).
    fn due(v: &LwcVersion, o: &LightweightOptions, limit: u64, l0_backlog: u64) -> Vec<Due> {
        let room = Room {
            v,
            o,
            limit,
            l0_backlog,
        };
        let mut out = Vec::new();
        let deepest = v.deepest();
        for (i, lv) in v.levels.iter().enumerate() {
            let l = i + 1;
            // A level above the deepest that is over its budget empties its oversized tables
            // by compacting them down (which their data must do anyway) instead of rewriting
            // them in place first: a division there was half of all writes at 10M keys.
            if l < deepest && l + 1 < o.max_levels && data_bytes(lv) > max_bytes(o, l0_backlog, l) {
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
            // Level 1 makes room for level 0's arrival first, while level 0 is below the
            // slowdown trigger (past it, the arrival goes first and the job's plan rewrites
            // the targets it would overflow).
            if v.l0.len() < o.l0_slowdown_trigger {
                let lo = v.l0.iter().map(|t| t.meta.smallest_user()).min();
                let hi = v.l0.iter().map(|t| t.meta.largest_user()).max();
                if let (Some(lo), Some(hi)) = (lo, hi) {
                    let arrival = v.l0.iter().map(|t| t.meta.size).sum();
                    out.extend(room_chain(&room, 1, lo, Some(&after(hi)), arrival));
                }
            }
            out.push(Due::L0);
        }
        let mut scored: Vec<(f64, usize)> = (1..o.max_levels.saturating_sub(1))
            .filter_map(|l| {
                let b = data_bytes(v.level(l)?);
                let s = b as f64 / max_bytes(o, l0_backlog, l) as f64;
                (s >= 1.0).then_some((s, l))
            })
            .collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0));
        for (_, l) in scored {
            // The victim's targets make room first.
            if let Some((lv, g)) = v.level(l).and_then(|lv| Some((lv, fullest(lv)?))) {
                if let Some(lo) = lv.los.get(g.0) {
                    let hi = lv.los.get(g.1).map(Vec::as_slice);
                    out.extend(room_chain(&room, l + 1, lo, hi, lv.live_bytes(g)));
                }
            }
            out.push(Due::Level(l));
        }
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
    /// claims of the group and the next-level tables the compaction may touch); otherwise
    /// one.
    fn candidates(v: &LwcVersion, due: &Due) -> Vec<Candidate> {
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
            Due::Room(level, g) => v
                .level(level)
                .map(|lv| vec![group_candidate(v, level, lv, g)])
                .unwrap_or_default(),
            Due::Level(level) => {
                let Some(lv) = v.level(level) else {
                    return Vec::new();
                };
                // The fullest group first ([`fullest`]), then the others by live bytes.
                let mut order: Vec<(usize, usize)> = lv
                    .groups
                    .iter()
                    .copied()
                    .filter(|&g| holds_data(lv, g))
                    .collect();
                order.sort_by_key(|&g| (std::cmp::Reverse(lv.live_bytes(g)), g.0));
                order
                    .into_iter()
                    .map(|g| group_candidate(v, level, lv, g))
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
            Due::Level(level) | Due::Room(level, _) => {
                let lv = v.level(level)?;
                let g = group?;
                let victims = lv.tables.get(g.0..g.1)?.to_vec();
                // Each victim's range stays, with a new empty DTable (the band reset).
                let resets = (g.0..g.1)
                    .map(|i| Some((lv.los.get(i)?.clone(), lv.los.get(i + 1).cloned())))
                    .collect::<Option<Vec<_>>>()?;
                Some(Box::new(CompactJob {
                    resets,
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
            let cands = Self::candidates(v, d);
            for (group, claims) in &cands {
                if claims.iter().any(|c| wanted.iter().any(|w| w.conflicts(c))) {
                    continue;
                }
                if let Some(r) = self.reserve(ctx, claims.clone()) {
                    if matches!(d, Due::Room(..)) {
                        ctx.stats
                            .lwc
                            .room_compactions
                            .fetch_add(1, Ordering::Relaxed);
                    }
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

/// The way to compact group `g` of level `level` (`lv`) down: the group's claim (its own
/// range: each victim leaves an empty DTable on its range, no neighbour changes) and the
/// next-level tables the compaction may touch.
fn group_candidate(v: &LwcVersion, level: usize, lv: &Level, g: (usize, usize)) -> Candidate {
    let here = LwcClaim::tables(level, lv, g.0, g.1);
    let below = LwcClaim::below(v, level + 1, &here.lo, here.hi.as_deref());
    (Some(g), vec![here, below])
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
        resets: Vec::new(),
        targets: targets(v, level + 1),
        target_groups: groups(v, level + 1),
        deeper_empty: v.deepest() <= level + 1,
        balance_factor: o.balance_factor,
        limit,
        division_count: o.division_count,
        fan_out: o.level_size_ratio,
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
        let o = &ctx.opts.lightweight;
        let due = Self::due(
            v,
            o,
            size_limit(ctx, o.dtable_max_bytes),
            l0_backlog(ctx.opts),
        );
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
        let o = &opts.lightweight;
        Self::v(version)
            .is_some_and(|v| !Self::due(v, o, o.dtable_max_bytes, l0_backlog(opts)).is_empty())
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
        let claims = Self::candidates(v, &due)
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
