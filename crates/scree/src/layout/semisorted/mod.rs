//! The `semisorted` layout (SlimDB, papers/slimdb.txt): keys are a `prefix_len`-byte prefix
//! and a suffix, ordered by the keyed hash of the prefix, then of the suffix, then the key;
//! `prefix(p)` returns one group, and there are no range scans. Data lives in *stepped levels*
//! (§2.2, §3.3): a flush writes a new sub-level of level 0; a level holding `sub_levels`
//! sub-levels is merged r-way into one new sub-level of the next level, partitioned into tables
//! by prefix-hash range, without reading the next level's data; the last level merges its
//! sub-levels in place. Tables ([`table`]) have fixed-size blocks and the compact three-level
//! index; each level has one multi-level cuckoo filter naming the sub-level of a key's newest
//! version ([`version`]). Design notes: docs/architecture-semisorted.md.
//!
//! This file is the policy: flushes, which merge is next, reservations, back-pressure and full
//! compaction; [`jobs`] runs merges and filter rebuilds.

pub mod cost;
pub mod jobs;
pub mod table;
pub mod version;

use std::sync::{Arc, OnceLock};

use crate::error::{Error, Result};
use crate::filter::cuckoo::{split_hash, CuckooParams, KeyHashing, MultiLevelCuckoo, Prior};
use crate::hint::{prefetch, prefetch_lines};
use crate::layout::reserve::{self, Claim, Reservations};
use crate::layout::{Job, JobCtx, Layout, LayoutVersion, ManualScope, ManualStep, Pressure};
use crate::manifest::edit::{AddedTable, KsEdit};
use crate::memtable::{FirstLevel, Memtable};
use crate::options::{KeyspaceOptions, Layout as LayoutKind};
use crate::stats::WriteCause;
use crate::table::TableCtx;

use jobs::{MergeJob, Output, RebuildJob};
use table::{hashes, FORMAT_SEMISORTED};
use version::{reader_of, PendingFilter, SemiVersion, Shared};

/// What a job holds: a level it reads (or whose filter it rebuilds, or into whose filter it
/// must be the only writer).
#[derive(PartialEq, Eq)]
struct LevelClaim(u32);

impl Claim for LevelClaim {
    fn conflicts(&self, other: &Self) -> bool {
        self == other
    }
}

type Reservation = reserve::Reservation<LevelClaim, SemiVersion>;

/// The `semisorted` policy.
pub struct SemiSorted {
    prefix_len: usize,
    /// The plan of the options last configured (also kept in [`Shared`] once it exists).
    plan: parking_lot::Mutex<Vec<crate::options::LevelPlan>>,
    shared: OnceLock<Arc<Shared>>,
    busy: Reservations<LevelClaim, SemiVersion>,
}

impl SemiSorted {
    /// The policy for keys of `prefix_len`-byte prefixes.
    pub fn new(prefix_len: usize) -> SemiSorted {
        SemiSorted {
            prefix_len,
            plan: parking_lot::Mutex::new(Vec::new()),
            shared: OnceLock::new(),
            busy: Reservations::default(),
        }
    }

    fn v<'a>(&self, version: &'a Arc<dyn LayoutVersion>) -> Option<&'a SemiVersion> {
        version.as_any().downcast_ref::<SemiVersion>()
    }

    /// Takes `claims` for a new job planned on `v`, unless `v` is stale or one is held.
    fn reserve(&self, v: &SemiVersion, claims: Vec<LevelClaim>) -> Option<Reservation> {
        self.busy.reserve(v, v.gen, claims)
    }

    /// A merge of level `src` (all its sub-levels) into `src + 1` (with that level's run, when
    /// it is an LSM level), or in place (the last level, an LSM level's run with what arrived,
    /// the deepest level of a full compaction).
    fn merge_job(
        &self,
        v: &SemiVersion,
        src: usize,
        in_place: bool,
        opts: &KeyspaceOptions,
    ) -> Option<Box<dyn Job>> {
        let last = opts.semisorted.max_levels - 1;
        let dst = if in_place { src } else { src + 1 };
        let dst_plan = v.shared.plan_of(dst);
        let into_run = !in_place && !dst_plan.stepped;
        let mut claims = vec![LevelClaim(src as u32)];
        if !in_place && (dst == last || into_run) {
            claims.push(LevelClaim(dst as u32));
        }
        let res = self.reserve(v, claims)?;
        let mut inputs = v.levels.get(src)?.subs.clone();
        if inputs.is_empty() {
            return None;
        }
        if into_run {
            inputs.extend(
                v.levels
                    .get(dst)
                    .map(|l| l.subs.clone())
                    .unwrap_or_default(),
            );
        }
        let bottommost = if in_place {
            v.deepest() == Some(src)
        } else if into_run {
            v.levels.iter().skip(dst + 1).all(|l| l.subs.is_empty())
        } else {
            v.levels.iter().skip(dst).all(|l| l.subs.is_empty())
        };
        // The filter the output's keys go into (merges down only): the next level's, or a new
        // one for an empty level or a new run; none when that level keeps no filter or its
        // filter is missing.
        let base = match v.levels.get(dst) {
            _ if in_place || !dst_plan.filter => None,
            _ if into_run => Some((Vec::new(), None)),
            Some(l) if !l.subs.is_empty() => l.filter().cloned().map(|f| (l.slots(), Some(f))),
            _ => Some((Vec::new(), None)),
        };
        Some(Box::new(MergeJob {
            src,
            dst,
            inputs,
            bottommost,
            base,
            stepped: dst_plan.stepped,
            shared: v.shared.clone(),
            res,
        }))
    }
}

/// A distinct key of a memtable being flushed: its hashes, its bytes, and where its versions
/// are (`entries[first..first + n]`, newest first).
struct FlushKey<'a> {
    ph: u64,
    sh: u64,
    key: &'a [u8],
    first: usize,
    n: usize,
}

/// Keys a flush looks ahead to start loading their memtable records.
const FLUSH_PREFETCH_AHEAD: usize = 8;
/// Cache lines a flush prefetches from a key's bytes on: its version record usually follows.
const FLUSH_PREFETCH_LINES: usize = 3;

/// Sub-levels a level's filter may have ids for (past them the level keeps no filter until
/// its next merge).
fn max_ids(o: &crate::options::SemiSortedOptions, stepped: bool) -> usize {
    if stepped {
        o.stop_sublevels + 2
    } else {
        2
    }
}

/// Tag bits of a level filter's slots once the level holds the `sub_levels − 1` sub-levels it
/// keeps at rest (or `sub_levels`, just before its merge): a false-positive rate of about
/// `2 × 4 × 0.94 / 2^13 ≈ 0.0009` per probed level (0.0002 at 2–3 sub-levels, 15-bit tags).
/// A table of fewer segments stores wider tags (the fingerprint range is made for the full
/// level), one of more stores narrower ones. 13 bits cost a level of 2–3 sub-levels (most of
/// a 50M fill's keys) 15 + 3-bit slots, ≥ 18.8 bits per key at the 96 % load growth plans
/// for, which leaves index + filter at 20.1–21.1 bits per key; 12 bits measured 19.2–19.7
/// but 1.0104 data blocks per present get in a 50M run (0.998–0.999 with 13) and 2–3× the
/// missing-key block reads, so 13 is kept (docs/benchmarks.md, "Issue 31: semisorted pinned
/// memory").
pub const LEVEL_TAG_BITS: u32 = 13;

/// Segments of a stepped level's filter per sub-level of the size of its first: a later
/// sub-level of another size (a merge that took more flushes) rounds up to an eighth of a
/// first sub-level's slots. With two, a second sub-level 4.3 % larger than the first took a
/// fifth segment (2.5 sub-levels' slots, 23.4 bits per key instead of 19.0 for a level of 2,
/// most of a 50M fill's keys); segments narrow no tag (the fingerprint range is made for the
/// full level) and a lookup computes its segment in constant time whatever their number.
pub const SEGMENTS_PER_SUBLEVEL: u32 = 8;

/// Filter parameters for a level whose first sub-level (a stepped level) or whose run (an LSM
/// level) has `keys` keys, in `segments` segments of `keys / segments` each. A stepped level's
/// table starts with [`SEGMENTS_PER_SUBLEVEL`] segments for what it holds and takes as many
/// more per sub-level of that size ([`MultiLevelCuckoo::reserve`] before each arrival), its
/// fingerprints made for the segments of `r − 1` sub-levels with [`LEVEL_TAG_BITS`]-bit tags, its ids for the `r − 1` sub-levels it holds at rest
/// (widened when more arrive: [`MultiLevelCuckoo::ensure_ids`]). An LSM level's filter (Table
/// 1's CF) is made anew at each merge for its run and one arrival's id.
pub(crate) fn filter_params(
    opts: &KeyspaceOptions,
    keys: usize,
    stepped: bool,
    segments: u32,
) -> CuckooParams {
    let o = &opts.semisorted;
    let r = o.sub_levels as u32;
    let (reserve, ids) = if stepped {
        (SEGMENTS_PER_SUBLEVEL * (r - 1).max(1), (r - 1).max(1))
    } else {
        (1, max_ids(o, false) as u32)
    };
    let mut p = CuckooParams::for_level(keys.max(1024), ids);
    p.fingerprint_bits = LEVEL_TAG_BITS;
    p.reserve_segments = reserve;
    p.segments = segments.clamp(1, reserve);
    p.secondary_budget_bytes = secondary_budget(opts, keys);
    p
}

/// The secondary-table budget of a level filter holding `keys` keys.
fn secondary_budget(opts: &KeyspaceOptions, keys: usize) -> usize {
    ((keys as f64 * opts.semisorted.secondary_bits_per_key / 8.0) as usize).max(4096)
}

/// An empty level filter for keys of `prefix_len`-byte prefixes: it hashes a key as
/// [`split_hash`] of the two hashes the layout orders it by, which flushes, merges and lookups
/// have computed already.
pub(crate) fn new_filter(
    ctx: &JobCtx<'_>,
    prefix_len: usize,
    params: CuckooParams,
) -> Result<MultiLevelCuckoo> {
    let n = u32::try_from(prefix_len)
        .map_err(|_| Error::InvalidArgument("semisorted: prefix length over 2^32".into()))?;
    MultiLevelCuckoo::with_hashing(ctx.hash_key, KeyHashing::Split(n), params)
}

/// A run of the distinct keys a merge writes, with their filter hashes (`split_hash`), on
/// their way into the next level's filter: the key bytes back to back and one `(end, hash)`
/// per key. A merge hands the filter [`KeyRun::LEN`] keys at a time, so it holds no list of
/// every key it writes (with one, a 50M fill's anonymous memory peaked at 2.0 GB, without at
/// 1.1 GB).
#[derive(Default)]
pub(crate) struct KeyRun {
    bytes: Vec<u8>,
    ends: Vec<(usize, u64)>,
}

impl KeyRun {
    /// Keys handed to the filter at once: enough for its look-ahead prefetch to stay ahead.
    pub(crate) const LEN: usize = 4096;

    /// Appends `key` with its filter hash `h`; true when the run is full.
    pub(crate) fn push(&mut self, h: u64, key: &[u8]) -> bool {
        self.bytes.extend_from_slice(key);
        self.ends.push((self.bytes.len(), h));
        self.ends.len() >= Self::LEN
    }

    /// Inserts the run into `build` and empties it.
    pub(crate) fn drain_into(&mut self, build: &mut FilterBuild) -> Result<()> {
        let mut start = 0;
        let pairs: Vec<(u64, &[u8])> = self
            .ends
            .iter()
            .map(|&(end, h)| {
                let key = self.bytes.get(start..end).unwrap_or_default();
                start = end;
                (h, key)
            })
            .collect();
        let r = build.insert(&pairs, Prior::Unknown);
        self.bytes.clear();
        self.ends.clear();
        r
    }
}

/// A level's filter being made for an arriving sub-level: a flush inserts its keys at once
/// ([`FilterBuild::insert_with_priors`]), a merge in runs as it writes them.
pub(crate) struct FilterBuild {
    f: MultiLevelCuckoo,
    id: u8,
}

impl FilterBuild {
    /// A new filter of `base` (a clone, or an empty one of [`filter_params`]) for about
    /// `expected` more keys as the newest sub-level (id `base_len`): the ids widened if
    /// needed, segments added for the new keys, and the secondary budget raised with the
    /// level's keys.
    pub(crate) fn new(
        ctx: &JobCtx<'_>,
        prefix_len: usize,
        base: Option<&MultiLevelCuckoo>,
        stepped: bool,
        base_len: usize,
        expected: usize,
    ) -> Result<FilterBuild> {
        if base_len >= max_ids(&ctx.opts.semisorted, stepped) {
            return Err(Error::InvalidArgument(
                "semisorted: no filter id left".into(),
            ));
        }
        // The ids widened and the segments added in one re-filing, made from the base's table.
        let mut f = match base {
            Some(f) => f.for_arrival(base_len + 1, expected)?,
            None => {
                let mut f = new_filter(
                    ctx,
                    prefix_len,
                    filter_params(ctx.opts, expected, stepped, SEGMENTS_PER_SUBLEVEL),
                )?;
                f.ensure_ids(base_len + 1)?;
                f.reserve(expected);
                f
            }
        };
        let id = u8::try_from(base_len)
            .ok()
            .filter(|id| *id < f.id_capacity())
            .ok_or_else(|| Error::InvalidArgument("semisorted: no filter id left".into()))?;
        f.raise_secondary_budget(secondary_budget(ctx.opts, f.len() + expected));
        Ok(FilterBuild { f, id })
    }

    /// Inserts `keys` (each `(split_hash, user key)`, distinct), each with `prior`.
    pub(crate) fn insert(&mut self, keys: &[(u64, &[u8])], prior: Prior) -> Result<()> {
        self.f.insert_all(keys, self.id, prior)
    }

    /// Inserts `keys`, each with its [`Prior`] from `priors` (empty: every key's is
    /// `Unknown`, a blind insert), in runs of keys with the same prior (the inserts of a run
    /// prefetch ahead).
    pub(crate) fn insert_with_priors(
        &mut self,
        keys: &[(u64, &[u8])],
        priors: &[Prior],
    ) -> Result<()> {
        if priors.is_empty() {
            return self.insert(keys, Prior::Unknown);
        }
        let mut start = 0;
        while let Some(&prior) = priors.get(start) {
            let len = priors
                .iter()
                .skip(start)
                .take_while(|p| **p == prior)
                .count();
            self.insert(keys.get(start..start + len).unwrap_or_default(), prior)?;
            start += len;
        }
        Ok(())
    }

    /// The filter.
    pub(crate) fn finish(self) -> MultiLevelCuckoo {
        self.f
    }
}

/// Each flushed key's [`Prior`] for level 0's filter, from what non-blind writes' reads
/// recorded in the memtable (empty when none did): `Present(id)` for a key whose newest
/// version was in a sub-level still in level 0 (`slots`, oldest first, the filter's id
/// order), `Absent` for a key level 0 did not hold, `Unknown` otherwise (a blind write, or a
/// sub-level merged away since the read).
fn flush_priors(mem: &Memtable, keys: &[FlushKey<'_>], slots: &[u64]) -> Vec<Prior> {
    mem.with_first_levels(|places| {
        if places.is_empty() {
            return Vec::new();
        }
        keys.iter()
            .map(|k| match places.get(k.key) {
                Some(FirstLevel::Absent) => Prior::Absent,
                Some(FirstLevel::SubLevel(slot)) => slots
                    .iter()
                    .position(|s| s == slot)
                    .and_then(|p| u8::try_from(p).ok())
                    .map_or(Prior::Unknown, Prior::Present),
                None => Prior::Unknown,
            })
            .collect()
    })
}

/// The merges due, as (level, in place, sub-levels): a stepped level with `sub_levels`
/// sub-levels (in place at the last level), an LSM level with a run and an arrival (merged in
/// place), or an LSM level that holds its share (moved down whole).
fn due_merges(v: &SemiVersion, opts: &KeyspaceOptions) -> Vec<(usize, bool, usize)> {
    let o = &opts.semisorted;
    let last = o.max_levels - 1;
    let mut due = Vec::new();
    for (l, level) in v.levels.iter().enumerate() {
        let n = level.subs.len();
        if v.shared.plan_of(l).stepped {
            if n >= o.sub_levels {
                due.push((l, l >= last, n));
            }
        } else if n >= 2 {
            due.push((l, true, n));
        } else if l < last && n == 1 && lsm_full(level, l, opts) {
            due.push((l, false, n));
        }
    }
    due
}

/// Whether level `l`'s missing filter is to be rebuilt: its plan has one, no rebuild failed
/// since its newest sub-level arrived, and it has ids for all its sub-levels (a level past
/// them waits for its merge instead).
fn rebuild_due(v: &SemiVersion, l: usize, o: &crate::options::SemiSortedOptions) -> bool {
    v.levels.get(l).is_some_and(|level| {
        level.filter().is_none()
            && level
                .subs
                .first()
                .is_some_and(|s| v.shared.may_rebuild(l, s.slot))
            && level.subs.len() <= max_ids(o, v.shared.plan_of(l).stepped)
    })
}

/// Whether LSM level `l` holds its share, `write_buffer_bytes × r^(l+1)` (level 0 of a store
/// with stepped levels holds `r` memtables, and each level `r` times the one above): it then
/// moves down whole.
fn lsm_full(level: &version::Level, l: usize, opts: &KeyspaceOptions) -> bool {
    let r = opts.semisorted.sub_levels as f64;
    let cap = opts.write_buffer_bytes as f64 * r.powi(l as i32 + 1);
    level.subs.iter().map(|s| s.bytes()).sum::<u64>() as f64 >= cap
}

impl Layout for SemiSorted {
    fn kind(&self) -> LayoutKind {
        LayoutKind::SemiSorted {
            prefix_len: self.prefix_len,
        }
    }

    fn table_format(&self) -> u8 {
        FORMAT_SEMISORTED
    }

    fn configure(&self, opts: &KeyspaceOptions) {
        *self.plan.lock() = opts.semisorted.plan.clone();
        if let Some(s) = self.shared.get() {
            *s.plan.write() = opts.semisorted.plan.clone();
        }
    }

    fn empty_version(&self, tables: &Arc<TableCtx>) -> Arc<dyn LayoutVersion> {
        self.empty_version_with_key(tables, [0; 16])
    }

    fn empty_version_with_key(
        &self,
        _tables: &Arc<TableCtx>,
        hash_key: [u8; 16],
    ) -> Arc<dyn LayoutVersion> {
        let shared = self
            .shared
            .get_or_init(|| {
                let s = Shared::new(self.prefix_len, hash_key);
                // The options `configure` took before the first version existed.
                *s.plan.write() = self.plan.lock().clone();
                s
            })
            .clone();
        Arc::new(SemiVersion::empty(shared))
    }

    fn flush(
        &self,
        ctx: &JobCtx<'_>,
        version: &Arc<dyn LayoutVersion>,
        mem: &Memtable,
    ) -> Result<KsEdit> {
        let mut edit = KsEdit::default();
        if mem.is_empty() {
            return Ok(edit);
        }
        let v = self
            .v(version)
            .ok_or_else(|| Error::InvalidArgument("semisorted flush: not its version".into()))?;
        let pl = self.prefix_len;
        // The memtable's entries borrowed in place (a read-locked view: nothing writes a
        // memtable being flushed), and its distinct user keys — each a run of versions,
        // newest first, as the memtable visits them — sorted in the layout's order.
        let view = mem.flush_view();
        // Each version as (trailer, value); each distinct key with its hashes, its bytes
        // and its versions' run in `entries` (the sort compares keys without going through
        // `entries`, and the filter's hashes come from the two hashes computed here).
        let mut entries: Vec<(u64, &[u8])> = Vec::with_capacity(mem.len());
        let mut keys: Vec<FlushKey<'_>> = Vec::new();
        view.for_each(|uk, trailer, val| {
            match keys.last_mut() {
                Some(k) if k.key == uk => k.n += 1,
                _ => {
                    let (ph, sh) = hashes(&ctx.hash_key, pl, uk);
                    keys.push(FlushKey {
                        ph,
                        sh,
                        key: uk,
                        first: entries.len(),
                        n: 1,
                    });
                }
            }
            entries.push((trailer, val));
        });
        keys.sort_unstable_by(|a, b| (a.ph, a.sh, a.key).cmp(&(b.ph, b.sh, b.key)));
        // One table per flush: a memtable is a bounded size, and merges take whole levels.
        // In this order the memtable's records are read at random: each key's are started
        // loading a few keys ahead.
        let mut out = Output::new(ctx, WriteCause::Flush, u64::MAX);
        let mut ikey: Vec<u8> = Vec::new();
        for (i, k) in keys.iter().enumerate() {
            // The key's record and, when it has one version (most do), its version record
            // right after it; and its run's start in `entries` (the address alone: loading
            // the value's address to prefetch it would wait for that miss).
            if let Some(a) = keys.get(i + FLUSH_PREFETCH_AHEAD) {
                prefetch_lines(a.key, FLUSH_PREFETCH_LINES);
                if let Some(e) = entries.get(a.first) {
                    prefetch(e);
                }
            }
            for &(trailer, val) in entries.iter().skip(k.first).take(k.n) {
                ikey.clear();
                ikey.extend_from_slice(k.key);
                ikey.extend_from_slice(&trailer.to_le_bytes());
                out.add(k.ph, k.sh, &ikey, val)?;
            }
        }
        let metas = out.finish()?;
        let Some(slot) = metas.first().map(|m| m.file_no) else {
            return Ok(edit);
        };
        // Level 0's filter with this sub-level's keys, when level 0 has one (or is empty).
        let l0 = v.levels.first();
        let plan0 = v.shared.plan_of(0);
        let base = match l0 {
            _ if !plan0.filter => None,
            Some(l) if !l.subs.is_empty() => l.filter().cloned().map(|f| (l.slots(), Some(f))),
            _ => Some((Vec::new(), None)),
        };
        if let Some((slots, f)) = base {
            let items: Vec<(u64, &[u8])> = keys
                .iter()
                .map(|k| (split_hash(k.ph, k.sh), k.key))
                .collect();
            let priors = flush_priors(mem, &keys, &slots);
            let filter = FilterBuild::new(
                ctx,
                pl,
                f.as_deref(),
                plan0.stepped,
                slots.len(),
                items.len(),
            )
            .and_then(|mut b| b.insert_with_priors(&items, &priors).map(|()| b.finish()));
            // No id left (the level is past its stop point): the filter goes missing, and is
            // rebuilt after the level's next merge.
            if let Ok(filter) = filter {
                v.shared.pending.lock().insert(
                    slot,
                    PendingFilter {
                        level: 0,
                        base: slots,
                        added: slot,
                        filter,
                    },
                );
            }
        }
        for meta in metas {
            edit.added.push(AddedTable {
                level: 0,
                slot,
                format: FORMAT_SEMISORTED,
                meta,
            });
        }
        Ok(edit)
    }

    fn pick(&self, version: &Arc<dyn LayoutVersion>, ctx: &JobCtx<'_>) -> Option<Box<dyn Job>> {
        let v = self.v(version)?;
        let o = &ctx.opts.semisorted;
        self.configure(ctx.opts);
        // Merges first, the fullest level first; then filters to rebuild.
        let mut due = due_merges(v, ctx.opts);
        due.sort_by_key(|d| std::cmp::Reverse(d.2));
        for (l, in_place, _) in due {
            if let Some(j) = self.merge_job(v, l, in_place, ctx.opts) {
                return Some(j);
            }
        }
        for (l, level) in v.levels.iter().enumerate() {
            if rebuild_due(v, l, o) {
                let Some(res) = self.reserve(v, vec![LevelClaim(l as u32)]) else {
                    continue;
                };
                return Some(Box::new(RebuildJob {
                    level: l,
                    subs: level.subs.clone(),
                    target: level.rebuilt.clone(),
                    shared: v.shared.clone(),
                    _res: res,
                }));
            }
        }
        None
    }

    fn needs_compaction(&self, version: &Arc<dyn LayoutVersion>, opts: &KeyspaceOptions) -> bool {
        self.v(version).is_some_and(|v| {
            !due_merges(v, opts).is_empty()
                || (0..v.levels.len()).any(|l| rebuild_due(v, l, &opts.semisorted))
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
        let Some(deepest) = v.deepest() else {
            return ManualStep::Done;
        };
        let subs = |l: usize| v.levels.get(l).map_or(&[][..], |x| &x.subs[..]);
        let in_scope = |l: usize| {
            subs(l)
                .iter()
                .any(|s| s.tables.iter().any(|t| scope.contains(t.meta.file_no)))
        };
        for l in 0..deepest {
            if !subs(l).is_empty() && in_scope(l) {
                return match self.merge_job(v, l, false, ctx.opts) {
                    Some(j) => ManualStep::Run(j),
                    None => ManualStep::Wait,
                };
            }
        }
        if subs(deepest).len() > 1 && in_scope(deepest) {
            return match self.merge_job(v, deepest, true, ctx.opts) {
                Some(j) => ManualStep::Run(j),
                None => ManualStep::Wait,
            };
        }
        ManualStep::Done
    }

    /// Opens the added tables' readers with their indexes pinned (as their level's plan
    /// says): decoding a large table's index and directory takes milliseconds, which the first
    /// gets of each new table paid on the read path (the first seconds of reads after a 50M
    /// fill ran at ~1k gets/s). A table that fails to open is left for the read path, which
    /// reports the error with its file and offset; a flush point runs before each table.
    fn warm(
        &self,
        ctx: &JobCtx<'_>,
        version: &Arc<dyn LayoutVersion>,
        added: &[u64],
    ) -> Result<()> {
        let Some(v) = self.v(version) else {
            return Ok(());
        };
        for no in added {
            ctx.flush_point()?;
            let Some(&(l, slot)) = v.files.get(no) else {
                continue;
            };
            let table = v
                .levels
                .get(l as usize)
                .and_then(|level| level.subs.iter().find(|s| s.slot == slot))
                .and_then(|sub| sub.tables.iter().find(|t| t.meta.file_no == *no));
            if let Some(t) = table {
                let pin = v.shared.plan_of(l as usize).index;
                // An error is the read path's to report (with the table's file and offset).
                let _ = reader_of(t, pin);
            }
        }
        Ok(())
    }

    fn pressure(&self, version: &Arc<dyn LayoutVersion>, opts: &KeyspaceOptions) -> Pressure {
        let Some(v) = self.v(version) else {
            return Pressure::None;
        };
        let o = &opts.semisorted;
        let most = v.levels.iter().map(|l| l.subs.len()).max().unwrap_or(0);
        Pressure::of_backlog(most, o.slowdown_sublevels, o.stop_sublevels)
    }
}
