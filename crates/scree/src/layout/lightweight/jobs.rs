//! The `lightweight` layout's jobs: the light-weight compaction (a victim group of level i,
//! or all of level 0, merged once and appended as one segment to each overlapped DTable of
//! level i+1, with the metadata aggregation and the workload balance that follow it) and the
//! equal division of an oversized DTable group.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::iter::MergingIter;
use crate::key;
use crate::layout::sorted::{merge_visible, MergeRules};
use crate::layout::{Job, JobCtx};
use crate::manifest::edit::{AddedTable, KsEdit};
use crate::stats::WriteCause;
use crate::table::{TableFile, TableMeta};

use super::dtable::{self, finish_table, AggCopy, SegmentWriter, Tail, EXT, FORMAT_DTABLE};
use super::version::range_record;
use super::Reservation;

fn added(level: usize, meta: TableMeta) -> AddedTable {
    AddedTable {
        level: level as u32,
        slot: 0,
        format: FORMAT_DTABLE,
        meta,
    }
}

fn path_of(ctx: &JobCtx<'_>, no: u64) -> std::path::PathBuf {
    ctx.tables.dir.join(format!("{no:06}.{EXT}"))
}

/// Writes a one-segment DTable (a flush, a new level's first table, a division part).
pub(crate) struct NewTable {
    no: u64,
    seg: SegmentWriter,
}

impl NewTable {
    /// A new DTable; its segment's sequence number is `seq`, or its file number.
    pub(crate) fn create(
        ctx: &JobCtx<'_>,
        cause: WriteCause,
        seq: Option<u64>,
    ) -> Result<NewTable> {
        let no = ctx.new_file_no();
        let w = ctx.tables.env.create(&path_of(ctx, no), cause)?;
        Ok(NewTable {
            no,
            seg: SegmentWriter::new(
                w,
                no,
                seq.unwrap_or(no),
                ctx.opts.block_size,
                ctx.opts.bloom_bits_per_key,
            ),
        })
    }
    pub(crate) fn add(&mut self, ikey: &[u8], value: &[u8], note: Option<u64>) -> Result<()> {
        self.seg.add(ikey, value, note)
    }
    pub(crate) fn bytes(&self) -> u64 {
        self.seg.bytes()
    }
    pub(crate) fn finish(self) -> Result<TableMeta> {
        Ok(self.finish_with_tail()?.0)
    }
    /// [`NewTable::finish`], with the bytes of the tail it wrote (for aggregated copies).
    pub(crate) fn finish_with_tail(self) -> Result<(TableMeta, Vec<u8>)> {
        let (entry, w) = self.seg.finish()?;
        let (meta, tail) = finish_table(w, self.no, None, 0, Some(entry), None)?;
        Ok((meta, tail.encode()))
    }
}

/// A table of the next level as a compaction leaves it, for the aggregated copies of the
/// victims' empty DTables: its routing bound and where its current tail comes from.
enum NextTable {
    /// Target `idx`: its new tail if the compaction appended to it, else its tail as the
    /// version names it (a fresh copy the victims carried, or read).
    Target(usize),
    /// A table the compaction made (a rewrite's part or a spill): its tail as written.
    Made(u64, u64, Vec<u8>),
}

/// The tables of `next` (sorted by routing bound) whose ranges meet `[lo, hi)`.
fn meeting<'a>(
    next: &'a [(Vec<u8>, NextTable)],
    lo: &'a [u8],
    hi: Option<&'a [u8]>,
) -> impl Iterator<Item = &'a NextTable> + 'a {
    next.iter().enumerate().filter_map(move |(i, (tlo, t))| {
        let thi = next.get(i + 1).map(|n| n.0.as_slice());
        let starts_before_hi = hi.is_none_or(|h| tlo.as_slice() < h);
        let ends_after_lo = thi.is_none_or(|h| h > lo);
        (starts_before_hi && ends_after_lo).then_some(t)
    })
}

/// The current tail of `t`: from a fresh aggregated copy in `copies` (no read), else read from
/// its file and counted (a stale copy repaired, or a table no copy covered).
fn target_tail(
    ctx: &JobCtx<'_>,
    t: &TableFile,
    copies: &HashMap<u64, AggCopy>,
) -> Result<(Tail, Vec<u8>)> {
    let at = t.meta.append.map_or(0, |a| a.meta_offset);
    let c = &ctx.stats.lwc;
    let raw = match copies.get(&t.meta.file_no) {
        Some(copy) if copy.meta_offset == at => {
            c.copies_used.fetch_add(1, Ordering::Relaxed);
            copy.tail.clone()
        }
        Some(_) => {
            c.stale_repairs.fetch_add(1, Ordering::Relaxed);
            let raw = dtable::read_tail_bytes(t)?;
            c.tail_read_bytes
                .fetch_add(raw.len() as u64, Ordering::Relaxed);
            raw
        }
        None => {
            c.uncopied_reads.fetch_add(1, Ordering::Relaxed);
            let raw = dtable::read_tail_bytes(t)?;
            c.tail_read_bytes
                .fetch_add(raw.len() as u64, Ordering::Relaxed);
            raw
        }
    };
    Ok((Tail::decode(&raw, &t.path(), at)?, raw))
}

/// Appends to `t` one segment (from `seg`, already written after `start`) and/or a new
/// aggregation block, then its new tail: an append switch.
fn switch(
    t: &TableFile,
    tail: &Tail,
    start: u64,
    w: crate::fs::CountedWriter,
    seg: Option<dtable::SegmentEntry>,
    agg: Option<&[AggCopy]>,
) -> Result<(TableMeta, Tail)> {
    if start < t.meta.size {
        return Err(Error::corruption(
            t.path(),
            start,
            format!("file is {start} bytes, the manifest says {}", t.meta.size),
        ));
    }
    finish_table(w, t.meta.file_no, Some((&t.meta, tail)), start, seg, agg)
}

/// A routing range `[lo, hi)` of the victims' level (`hi` `None`: to the end of the key
/// space).
pub(crate) type Range = (Vec<u8>, Option<Vec<u8>>);

/// A light-weight compaction of `victims` (a group of level `level` ≥ 1, or all of L0) into
/// level `level + 1`, whose tables (sorted by routing bound) are `targets`.
pub(crate) struct CompactJob {
    pub(crate) level: usize,
    pub(crate) victims: Vec<Arc<TableFile>>,
    /// The victims' routing ranges (a group of level ≥ 1; empty for level 0 and a whole
    /// level): each is left to a new DTable holding no data, only the aggregated metadata —
    /// the new tails of the next-level tables its range overlaps. The victim's band is
    /// reset, its range and the level's table count stay, and later arrivals fill it again
    /// (docs/architecture-lightweight.md, "What happens to the victim").
    pub(crate) resets: Vec<Range>,
    pub(crate) targets: Vec<(Vec<u8>, Arc<TableFile>)>,
    /// The groups of `targets` (`(first, end)` index ranges, in key order).
    pub(crate) target_groups: Vec<(usize, usize)>,
    /// Nothing lies below the output level.
    pub(crate) deeper_empty: bool,
    pub(crate) balance_factor: f64,
    /// The most bytes a DTable file may reach ([`size_limit`]): no append crosses it.
    pub(crate) limit: u64,
    /// DTables a rewrite of a full target group makes (equal division), at least.
    pub(crate) division_count: usize,
    /// The paper's fan-out AF (`level_size_ratio`): the tables this compaction makes are cut
    /// so that an arrival like its own spreads over about this many of them ([`part_cap`]).
    pub(crate) fan_out: u64,
    /// The key ranges of both levels this job reads and writes, held until its edit is
    /// installed (docs/architecture-lightweight.md, "Concurrent jobs").
    pub(crate) _claims: Reservation,
}

/// The most bytes a DTable file may hold: `dtable_max_bytes`, or the band of a host-managed
/// shingled device when smaller (one DTable per band; a write past it is refused).
pub(crate) fn size_limit(ctx: &JobCtx<'_>, dtable_max_bytes: u64) -> u64 {
    ctx.tables
        .env
        .fs
        .max_table_file_bytes()
        .map_or(dtable_max_bytes, |b| b.min(dtable_max_bytes))
}

/// The most data a table made by a compaction of `victims` (their file sizes; reset tables,
/// which hold no data, left out) gets: an average victim's data over the fan-out `fan_out`,
/// within `[limit / division_floor, limit / 2]`. A new level's first tables and the parts of
/// a full target rewritten with its arrival are cut this fine, so that the next victim like
/// these, whose range they split, spreads over about `fan_out` tables and appends a piece to
/// each instead of filling one or two (which then are rewritten with the arrival after it:
/// the deepest level's remaining rewrites, docs/architecture-lightweight.md, "Parts cut by
/// the fan-out"). The floor (`division_floor`, the division count) keeps tables from being
/// cut finer than an equal division would cut a full one.
pub(crate) fn part_cap(victims: &[u64], fan_out: u64, limit: u64, division_floor: u64) -> u64 {
    let data: Vec<u64> = victims.iter().copied().filter(|&b| b > 0).collect();
    let avg = data.iter().sum::<u64>() / (data.len().max(1) as u64);
    let lo = (limit / division_floor.max(1)).max(1);
    let hi = (limit / 2).max(lo);
    (avg / fan_out.max(1)).clamp(lo, hi)
}

/// Whether a target group of the deepest level (`deepest`: nothing lies below the
/// compaction's output level) holding `held` bytes is rewritten with its arrival of
/// `arrival` bytes although the arrival would fit: when the arrival is more than it holds
/// and more than two tables a compaction makes (`cap`, [`part_cap`]). Such a group owns a
/// range far wider than its data (a young level's first and last tables own everything
/// beyond the keys they were cut from); appended to, it would take this arrival and the
/// next ones whole and be rewritten with all of them once full. Rewritten now, it costs
/// what it holds (at most the arrival again) and the arrival is cut into tables of its own
/// range, which later arrivals append to. Not above the deepest level: there a full table
/// goes down before an arrival instead (room before an arrival).
pub(crate) fn cut_early(deepest: bool, held: u64, arrival: u64, cap: u64) -> bool {
    deepest && arrival >= cap.saturating_mul(2) && held <= arrival
}

/// What the compaction appended to one target.
struct Appended {
    idx: usize,
    meta: TableMeta,
    tail: Tail,
    raw: Vec<u8>,
}

/// Where the compaction is writing the keys of the current target's range.
enum Out {
    /// Appending a segment to target `idx` (its file was `start` bytes long, its tail
    /// `old_tail` bytes).
    Append {
        idx: usize,
        start: u64,
        old_tail: u64,
        seg: SegmentWriter,
    },
    /// A new DTable from routing bound `lo` taking the rest of target `idx`'s piece, which
    /// the target had no room for (the plan's bound fell short).
    Spill {
        idx: usize,
        lo: Vec<u8>,
        t: NewTable,
    },
    /// Part of the rewrite of target group `gi` together with its arrival.
    Rewrite { gi: usize, lo: Vec<u8>, t: NewTable },
}

/// Slack the plan adds to a target's estimated arrival (beyond a quarter of it) for the new
/// tail, the segment's footer and block boundaries.
pub(crate) const PLAN_SLACK: u64 = 8 * 1024;

#[cfg(test)]
thread_local! {
    /// Test hook: the plan underestimates every arrival eightfold, so that overflows reach
    /// the guard in the append.
    pub(crate) static SHORT_PLAN: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The estimate as the plan uses it (cut short by the test hook).
fn planned(estimate: u64) -> u64 {
    #[cfg(test)]
    if SHORT_PLAN.with(std::cell::Cell::get) {
        return estimate / 8;
    }
    estimate
}

impl CompactJob {
    /// [`part_cap`] for this compaction's victims (a victim holding no entry counts nothing).
    fn cap(&self) -> u64 {
        let sizes: Vec<u64> = self
            .victims
            .iter()
            .map(|v| if v.meta.entries > 0 { v.meta.size } else { 0 })
            .collect();
        part_cap(&sizes, self.fan_out, self.limit, self.division_count as u64)
    }

    /// The target whose routing range holds `user_key`.
    fn owner(&self, user_key: &[u8]) -> usize {
        self.targets
            .partition_point(|(lo, _)| lo.as_slice() <= user_key)
            .saturating_sub(1)
    }

    /// The target whose routing range holds `user_key`, searching forward from target
    /// `cursor` (the owner of an earlier key): one or two comparisons per key of a merge
    /// instead of a binary search (which was a sixth of a compaction's CPU at 10M keys).
    fn owner_from(&self, cursor: usize, user_key: &[u8]) -> usize {
        if self
            .targets
            .get(cursor)
            .is_none_or(|(lo, _)| lo.as_slice() > user_key)
        {
            return self.owner(user_key);
        }
        let mut i = cursor;
        while self
            .targets
            .get(i + 1)
            .is_some_and(|(lo, _)| lo.as_slice() <= user_key)
        {
            i += 1;
        }
        i
    }

    /// An upper estimate of the bytes the victims send to each target, from their block
    /// indexes alone: every data block whose keys reach a target's range counts whole for
    /// it, scaled by its segment's bytes per data byte (the filter and index a segment adds).
    fn arrivals(&self, readers: &[Arc<dtable::DtReader>]) -> Result<Vec<u64>> {
        let mut est = vec![0u64; self.targets.len()];
        for r in readers {
            for (s, seg) in r.tail.segments.iter().zip(&r.segs) {
                let blocks = seg.block_sizes()?;
                let data: u64 = blocks.iter().map(|b| b.1).sum();
                let scale = s.bytes() as f64 / data.max(1) as f64;
                let mut first = key::user_key(&s.smallest).to_vec();
                for (last, size) in blocks {
                    let add = (size as f64 * scale).ceil() as u64;
                    for i in self.owner(&first)..=self.owner(&last) {
                        if let Some(e) = est.get_mut(i) {
                            *e += add;
                        }
                    }
                    first = last;
                }
            }
        }
        Ok(est)
    }

    /// Whether target `t`, `len` bytes long, could pass the limit by appending an arrival
    /// estimated at `arrival` bytes: then its group is rewritten with the arrival instead.
    fn would_overflow(&self, t: &TableFile, len: u64, arrival: u64) -> bool {
        let tail = t.meta.size - t.meta.append.map_or(t.meta.size, |a| a.meta_offset);
        arrival > 0
            && len
                .saturating_add(arrival + arrival / 4)
                .saturating_add(tail + PLAN_SLACK)
                > self.limit
    }
}

impl CompactJob {
    /// Writes the new DTable that takes over victim range `r`: no segment, the aggregated
    /// copies `agg` (skipped, and counted, if they would not fit under the limit), a tail.
    fn reset(
        &self,
        ctx: &JobCtx<'_>,
        e: &mut KsEdit,
        r: &Range,
        agg: Option<&[AggCopy]>,
    ) -> Result<()> {
        let c = &ctx.stats.lwc;
        let agg = agg.filter(|a| {
            let fits =
                (dtable::encode_agg(a).len() as u64).saturating_add(PLAN_SLACK) <= self.limit;
            if !fits {
                c.aggregation_skips.fetch_add(1, Ordering::Relaxed);
            }
            fits
        });
        let no = ctx.new_file_no();
        let w = ctx
            .tables
            .env
            .create(&path_of(ctx, no), WriteCause::Compaction)?;
        let (meta, _) = finish_table(w, no, None, 0, None, agg)?;
        if agg.is_some() {
            c.aggregation_writes.fetch_add(1, Ordering::Relaxed);
        }
        c.resets.fetch_add(1, Ordering::Relaxed);
        e.records.push(range_record(no, &r.0));
        e.added.push(added(self.level, meta));
        Ok(())
    }
}

impl Job for CompactJob {
    fn run(&mut self, ctx: &JobCtx<'_>) -> Result<KsEdit> {
        let c = &ctx.stats.lwc;
        c.compactions.fetch_add(1, Ordering::Relaxed);
        let mut e = KsEdit::default();
        // (1) Read the victims once: their segments and the aggregated copies they carry.
        let mut copies: HashMap<u64, AggCopy> = HashMap::new();
        let mut children = Vec::new();
        let mut readers = Vec::new();
        for v in &self.victims {
            c.victim_bytes.fetch_add(v.meta.size, Ordering::Relaxed);
            let r = dtable::reader(v)?;
            for copy in r.agg()? {
                copies.insert(copy.file_no, copy);
            }
            r.iters(false, &mut children)?;
            e.removed.push(v.meta.file_no);
            readers.push(r);
        }
        let out_level = self.level + 1;
        let new_table_bytes = self.cap();
        c.copies_carried
            .fetch_add(copies.len() as u64, Ordering::Relaxed);
        let gone = copies
            .keys()
            .filter(|no| !self.targets.iter().any(|(_, t)| t.meta.file_no == **no))
            .count();
        c.copies_gone.fetch_add(gone as u64, Ordering::Relaxed);
        if self.targets.is_empty() {
            let mut input = MergingIter::new(children);
            let rules = MergeRules {
                bottommost: self.deeper_empty,
                zero_seqs: false,
                zeroed_max: 0,
            };
            // The next level is empty: new DTables of at most [`part_cap`] bytes take
            // everything, the first from the empty key, each next from its first key.
            let mut out: Option<(Vec<u8>, NewTable)> = None;
            let mut made: Vec<(Vec<u8>, TableMeta, Vec<u8>)> = Vec::new();
            merge_visible(ctx, &mut input, rules, &mut |k| {
                if k.first_of_key && out.as_ref().is_some_and(|o| o.1.bytes() >= new_table_bytes) {
                    if let Some((lo, o)) = out.take() {
                        let (meta, raw) = o.finish_with_tail()?;
                        made.push((lo, meta, raw));
                    }
                    ctx.flush_point()?;
                }
                if out.is_none() {
                    let lo = if made.is_empty() {
                        Vec::new()
                    } else {
                        key::user_key(k.ikey).to_vec()
                    };
                    out = Some((lo, NewTable::create(ctx, WriteCause::Compaction, None)?));
                }
                match out.as_mut() {
                    Some((_, o)) => o.add(k.ikey, k.value, k.note_seq),
                    None => Ok(()),
                }
            })?;
            if let Some((lo, o)) = out {
                let (meta, raw) = o.finish_with_tail()?;
                made.push((lo, meta, raw));
            }
            // The next level's tables are all new: each victim's empty DTable carries the
            // tails just written of those its range meets.
            let next: Vec<(Vec<u8>, NextTable)> = made
                .iter()
                .map(|(lo, m, raw)| {
                    let at = m.append.map_or(0, |a| a.meta_offset);
                    (lo.clone(), NextTable::Made(m.file_no, at, raw.clone()))
                })
                .collect();
            for r in &self.resets {
                let agg: Vec<AggCopy> = meeting(&next, &r.0, r.1.as_deref())
                    .filter_map(|t| match t {
                        NextTable::Made(no, at, raw) => Some(AggCopy {
                            file_no: *no,
                            meta_offset: *at,
                            tail: raw.clone(),
                        }),
                        NextTable::Target(_) => None,
                    })
                    .collect();
                self.reset(ctx, &mut e, r, Some(&agg))?;
            }
            for (lo, meta, _) in made {
                e.records.push(range_record(meta.file_no, &lo));
                e.added.push(added(out_level, meta));
            }
        } else {
            self.append_to_targets(ctx, &mut e, children, &readers, copies)?;
        }
        Ok(e)
    }
}

impl CompactJob {
    /// (2)-(6): plans which target groups an append could carry past the limit (those are
    /// rewritten with their arrival: a division merged with it), merges, cuts the result by
    /// the targets' routing ranges and appends each piece, then the aggregation write and
    /// the workload balance.
    fn append_to_targets(
        &self,
        ctx: &JobCtx<'_>,
        e: &mut KsEdit,
        mut children: Vec<Box<dyn crate::iter::InternalIter>>,
        readers: &[Arc<dtable::DtReader>],
        copies: HashMap<u64, AggCopy>,
    ) -> Result<()> {
        let c = &ctx.stats.lwc;
        let out_level = self.level + 1;
        let targets = &self.targets;
        let new_table_bytes = (self.limit / 2).max(1);
        // The plan, from the victims' block indexes and the targets' file lengths (which
        // count bytes an unfinished append left past the end the version names).
        let arrival = self.arrivals(readers)?;
        let mut group_of = vec![0usize; targets.len()];
        let mut rewrite = vec![false; self.target_groups.len()];
        let mut part = vec![1u64; self.target_groups.len()];
        for (gi, &(f, end)) in self.target_groups.iter().enumerate() {
            let mut full = false;
            for i in f..end {
                if let Some(g) = group_of.get_mut(i) {
                    *g = gi;
                }
                let (Some((_, t)), Some(&a)) = (targets.get(i), arrival.get(i)) else {
                    continue;
                };
                let len = ctx
                    .tables
                    .env
                    .fs
                    .file_size(&t.path())
                    .unwrap_or(t.meta.size)
                    .max(t.meta.size);
                full |= self.would_overflow(t, len, planned(a));
            }
            let arrived: u64 = arrival.get(f..end).unwrap_or_default().iter().sum();
            let held: u64 = targets
                .get(f..end)
                .unwrap_or_default()
                .iter()
                .map(|(_, t)| t.meta.size - t.meta.dead_bytes())
                .sum();
            let early = !full && cut_early(self.deeper_empty, held, planned(arrived), self.cap());
            if !full && !early {
                continue;
            }
            // Rewritten: the group's segments join the merge, and its span is written as
            // `division_count` DTables of equal data, or more when those would be larger
            // than [`part_cap`].
            let mut live = 0;
            for (_, t) in targets.get(f..end).unwrap_or_default() {
                let r = dtable::reader(t)?;
                live += r.tail.live_bytes();
                r.iters(false, &mut children)?;
                e.removed.push(t.meta.file_no);
            }
            if let (Some(r), Some(p)) = (rewrite.get_mut(gi), part.get_mut(gi)) {
                *r = true;
                *p = ((live + arrived) / self.division_count.max(1) as u64).clamp(1, self.cap());
            }
            c.full_rewrites.fetch_add(1, Ordering::Relaxed);
            c.rewrite_held_bytes.fetch_add(live, Ordering::Relaxed);
            if early {
                c.early_rewrites.fetch_add(1, Ordering::Relaxed);
            }
        }
        let mut input = MergingIter::new(children);
        let rules = MergeRules {
            // Appended segments sit above the targets' older segments, which a dropped
            // tombstone would uncover: tombstones go only where nothing lies below.
            bottommost: false,
            // Sequence numbers stay: segments appended later must sort as newer.
            zero_seqs: false,
            zeroed_max: 0,
        };
        let mut appended: Vec<Appended> = Vec::new();
        let mut made: Vec<(Vec<u8>, TableMeta, Vec<u8>)> = Vec::new();
        let mut spilled: Vec<usize> = Vec::new();
        let mut cur: Option<Out> = None;
        // Segment sequence numbers: spill tables sort after every older segment of their
        // level and before the segments this compaction appends (a spill may hold older
        // versions of the key where its target's segment stopped).
        let spill_seq = ctx.new_file_no();
        let seg_seq = ctx.new_file_no();
        let finish_out = |cur: Option<Out>,
                          appended: &mut Vec<Appended>,
                          made: &mut Vec<(Vec<u8>, TableMeta, Vec<u8>)>|
         -> Result<()> {
            match cur {
                None => Ok(()),
                Some(Out::Spill { lo, t, .. }) => {
                    let (meta, raw) = t.finish_with_tail()?;
                    made.push((lo, meta, raw));
                    Ok(())
                }
                Some(Out::Rewrite { lo, t, .. }) => {
                    let (meta, raw) = t.finish_with_tail()?;
                    c.rewrite_bytes.fetch_add(meta.size, Ordering::Relaxed);
                    made.push((lo, meta, raw));
                    Ok(())
                }
                Some(Out::Append {
                    idx, start, seg, ..
                }) => {
                    let Some((_, t)) = targets.get(idx) else {
                        return Ok(());
                    };
                    let (old, _) = target_tail(ctx, t, &copies)?;
                    let (entry, w) = seg.finish()?;
                    let (meta, tail) = switch(t, &old, start, w, Some(entry), None)?;
                    let raw = tail.encode();
                    c.appended_segments.fetch_add(1, Ordering::Relaxed);
                    appended.push(Appended {
                        idx,
                        meta,
                        tail,
                        raw,
                    });
                    Ok(())
                }
            }
        };
        // The merge yields user keys in ascending order: the owner moves forward.
        let mut cursor = 0usize;
        merge_visible(ctx, &mut input, rules, &mut |k| {
            let u = key::user_key(k.ikey);
            cursor = self.owner_from(cursor, u);
            let owner = cursor;
            let gi = group_of.get(owner).copied().unwrap_or(0);
            if rewrite.get(gi).copied().unwrap_or(false) {
                let limit = part.get(gi).copied().unwrap_or(new_table_bytes);
                let (open, cut) = match &cur {
                    Some(Out::Rewrite { gi: g, t, .. }) if *g == gi => {
                        (false, k.first_of_key && t.bytes() >= limit)
                    }
                    _ => (true, false),
                };
                if open || cut {
                    finish_out(cur.take(), &mut appended, &mut made)?;
                    ctx.flush_point()?;
                    let lo = if open {
                        let f = self.target_groups.get(gi).map_or(owner, |g| g.0);
                        targets.get(f).map(|x| x.0.clone()).unwrap_or_default()
                    } else {
                        u.to_vec()
                    };
                    cur = Some(Out::Rewrite {
                        gi,
                        lo,
                        t: NewTable::create(ctx, WriteCause::Gc, None)?,
                    });
                }
            } else {
                let same = matches!(&cur,
                    Some(Out::Append { idx, .. } | Out::Spill { idx, .. }) if *idx == owner);
                if !same {
                    finish_out(cur.take(), &mut appended, &mut made)?;
                    ctx.flush_point()?;
                    let Some((_, t)) = targets.get(owner) else {
                        return Err(Error::InvalidArgument("no target".into()));
                    };
                    let w = ctx
                        .tables
                        .env
                        .reopen_for_append(&t.path(), WriteCause::Compaction)?;
                    let start = w.len();
                    let old_tail =
                        t.meta.size - t.meta.append.map_or(t.meta.size, |a| a.meta_offset);
                    cur = Some(Out::Append {
                        idx: owner,
                        start,
                        old_tail,
                        seg: SegmentWriter::new(
                            w,
                            t.meta.file_no,
                            seg_seq,
                            ctx.opts.block_size,
                            ctx.opts.bloom_bits_per_key,
                        ),
                    });
                }
                // The guard: an entry the target has no room for (segment, its metadata
                // and the new tail) ends the target's segment; the rest of its piece goes
                // to a new DTable from this key.
                let full = matches!(&cur, Some(Out::Append { seg, old_tail, .. })
                    if seg.end_bound_with(k.ikey.len(), k.value.len(), *old_tail) > self.limit);
                let cut = matches!(&cur, Some(Out::Spill { t, .. })
                    if k.first_of_key && t.bytes() >= new_table_bytes);
                if full || cut {
                    let lo = u.to_vec();
                    if full {
                        let first_entry = matches!(&cur,
                            Some(Out::Append { seg, .. }) if seg.entries() == 0);
                        let bound = targets.get(owner).map(|x| x.0.as_slice());
                        if bound == Some(u) {
                            // A new table cannot start at the target's own bound.
                            return Err(Error::InvalidArgument(format!(
                                "lightweight: DTable {:06} has no room under its {} byte \
                                 limit for an entry at its routing bound ({} bytes); \
                                 entries this large need a larger band or dtable_max_bytes",
                                targets.get(owner).map_or(0, |x| x.1.meta.file_no),
                                self.limit,
                                k.ikey.len() + k.value.len()
                            )));
                        }
                        if first_entry {
                            // Nothing written: the writer is dropped with no byte appended.
                            cur = None;
                        }
                        c.spills.fetch_add(1, Ordering::Relaxed);
                        spilled.push(owner);
                    }
                    finish_out(cur.take(), &mut appended, &mut made)?;
                    ctx.flush_point()?;
                    cur = Some(Out::Spill {
                        idx: owner,
                        lo,
                        t: NewTable::create(ctx, WriteCause::Compaction, Some(spill_seq))?,
                    });
                }
            }
            match cur.as_mut() {
                Some(Out::Append { seg, .. }) => seg.add(k.ikey, k.value, k.note_seq),
                Some(Out::Spill { t, .. } | Out::Rewrite { t, .. }) => {
                    t.add(k.ikey, k.value, k.note_seq)
                }
                None => Ok(()),
            }
        })?;
        finish_out(cur.take(), &mut appended, &mut made)?;
        let removed = |i: usize| {
            group_of
                .get(i)
                .and_then(|g| rewrite.get(*g))
                .copied()
                .unwrap_or(false)
        };
        // Workload balance: a target left overly full hands the upper part of its range
        // to its next neighbour; no data moves, later appends follow the new bounds. Not
        // across a target that spilled (a new table owns part of its range now) or into a
        // rewritten neighbour (gone).
        let mut shifted: HashMap<usize, Vec<u8>> = HashMap::new();
        if self.balance_factor > 0.0 && targets.len() > 1 {
            let live = |i: usize| -> u64 {
                match appended.iter().find(|x| x.idx == i) {
                    Some(x) => x.tail.live_bytes(),
                    None => targets
                        .get(i)
                        .map_or(0, |(_, t)| t.meta.size - t.meta.dead_bytes()),
                }
            };
            let total: u64 = (0..targets.len()).map(live).sum();
            let mean = total as f64 / targets.len() as f64;
            for x in &appended {
                if spilled.contains(&x.idx) || removed(x.idx + 1) {
                    continue;
                }
                let (Some((lo, _)), Some((next_lo, n))) =
                    (targets.get(x.idx), targets.get(x.idx + 1))
                else {
                    continue;
                };
                if (live(x.idx) as f64) <= self.balance_factor * mean {
                    continue;
                }
                if let Some(b) = split_point(&x.tail) {
                    if b.as_slice() > lo.as_slice() && b.as_slice() < next_lo.as_slice() {
                        e.records.push(range_record(n.meta.file_no, &b));
                        shifted.insert(x.idx + 1, b);
                        c.balance_shifts.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
        // (6) Metadata aggregation: each victim's range is left to a new DTable holding
        // only the current tails of the next-level tables that range meets as this
        // compaction leaves the level — the targets it appended to (their new tails), the
        // tables it made (rewrites, spills) and the others (the paper's "extra write"; the
        // victim's band reset).
        let mut next: Vec<(Vec<u8>, NextTable)> = Vec::new();
        for (i, (lo, _)) in targets.iter().enumerate() {
            if !removed(i) {
                let lo = shifted.get(&i).unwrap_or(lo);
                next.push((lo.clone(), NextTable::Target(i)));
            }
        }
        for (lo, m, raw) in &made {
            let at = m.append.map_or(0, |a| a.meta_offset);
            next.push((lo.clone(), NextTable::Made(m.file_no, at, raw.clone())));
        }
        next.sort_by(|a, b| a.0.cmp(&b.0));
        for r in &self.resets {
            let mut agg = Vec::new();
            for t in meeting(&next, &r.0, r.1.as_deref()) {
                agg.push(match t {
                    NextTable::Made(no, at, raw) => AggCopy {
                        file_no: *no,
                        meta_offset: *at,
                        tail: raw.clone(),
                    },
                    NextTable::Target(i) => {
                        let Some((_, t)) = targets.get(*i) else {
                            continue;
                        };
                        match appended.iter().find(|x| x.idx == *i) {
                            Some(x) => AggCopy {
                                file_no: t.meta.file_no,
                                meta_offset: x.meta.append.map_or(0, |m| m.meta_offset),
                                tail: x.raw.clone(),
                            },
                            None => AggCopy {
                                file_no: t.meta.file_no,
                                meta_offset: t.meta.append.map_or(0, |m| m.meta_offset),
                                tail: target_tail(ctx, t, &copies)?.1,
                            },
                        }
                    }
                });
            }
            self.reset(ctx, e, r, Some(&agg))?;
        }
        for x in appended {
            if let Some((_, t)) = targets.get(x.idx) {
                e.removed.push(t.meta.file_no);
                e.added.push(added(out_level, x.meta));
            }
        }
        // A rewritten group that kept nothing (every version dropped) leaves its range to
        // the table before it, or, first in the level, to the first table after it.
        for (gi, &(f, end)) in self.target_groups.iter().enumerate() {
            let first_lo = targets.get(f).map(|x| x.0.as_slice());
            let kept = made.iter().any(|m| Some(m.0.as_slice()) == first_lo);
            if rewrite.get(gi).copied().unwrap_or(false) && !kept && f == 0 {
                // The next table in key order: another rewrite's first part, or a target.
                let next_lo = targets.get(end).map(|x| x.0.clone());
                if let Some(nl) = next_lo {
                    match made.iter_mut().find(|m| m.0 == nl) {
                        Some(m) => m.0.clear(),
                        None => {
                            if let Some((_, t)) = targets.get(end) {
                                e.records.push(range_record(t.meta.file_no, b""));
                            }
                        }
                    }
                }
            }
        }
        for (lo, meta, _) in made {
            e.records.push(range_record(meta.file_no, &lo));
            e.added.push(added(out_level, meta));
        }
        Ok(())
    }
}

/// The user key that splits a DTable's data in two by its segments' middle keys, weighted
/// by their entries (the key distribution the paper splits by).
pub(crate) fn split_point(tail: &Tail) -> Option<Vec<u8>> {
    let mut mids: Vec<(&[u8], u64)> = tail
        .segments
        .iter()
        .filter(|s| !s.mid.is_empty())
        .map(|s| (s.mid.as_slice(), s.entries))
        .collect();
    mids.sort();
    let total: u64 = mids.iter().map(|m| m.1).sum();
    let mut acc = 0;
    for (k, n) in mids {
        acc += n;
        if acc * 2 >= total {
            return Some(k.to_vec());
        }
    }
    None
}

/// Equal division of a group of level `level` ≥ 1 (a DTable past `dtable_max_bytes` and the
/// tables its data reaches): merged once and written as up to `n` DTables of equal data at the
/// same level, which drops the versions no snapshot needs and reclaims dead bytes.
pub(crate) struct DivideJob {
    pub(crate) level: usize,
    pub(crate) group: Vec<Arc<TableFile>>,
    pub(crate) lo: Vec<u8>,
    pub(crate) next_after: Option<Arc<TableFile>>,
    pub(crate) bottommost: bool,
    pub(crate) n: usize,
    /// No part grows past this (half the size limit): a group far past the limit makes
    /// more than `n` parts.
    pub(crate) cap: u64,
    /// The key range of its level this division rewrites, held until its edit is installed.
    pub(crate) _claims: Reservation,
}

impl Job for DivideJob {
    fn run(&mut self, ctx: &JobCtx<'_>) -> Result<KsEdit> {
        ctx.stats.lwc.divisions.fetch_add(1, Ordering::Relaxed);
        let mut e = KsEdit::default();
        let mut children = Vec::new();
        let mut live = 0;
        for t in &self.group {
            let r = dtable::reader(t)?;
            live += r.tail.live_bytes();
            r.iters(false, &mut children)?;
            e.removed.push(t.meta.file_no);
        }
        let part = (live / self.n as u64).max(1);
        let mut input = MergingIter::new(children);
        let rules = MergeRules {
            bottommost: self.bottommost,
            zero_seqs: false,
            zeroed_max: 0,
        };
        let mut parts: Vec<(Vec<u8>, TableMeta)> = Vec::new();
        let mut cur: Option<(Vec<u8>, NewTable)> = None;
        let n = self.n;
        let cap = self.cap.max(1);
        merge_visible(ctx, &mut input, rules, &mut |k| {
            if k.first_of_key {
                if let Some((_, t)) = &cur {
                    if (parts.len() + 1 < n && t.bytes() >= part) || t.bytes() >= cap {
                        if let Some((lo, t)) = cur.take() {
                            parts.push((lo, t.finish()?));
                        }
                        ctx.flush_point()?;
                    }
                }
            }
            if cur.is_none() {
                let lo = if parts.is_empty() {
                    self.lo.clone()
                } else {
                    key::user_key(k.ikey).to_vec()
                };
                cur = Some((lo, NewTable::create(ctx, WriteCause::Gc, None)?));
            }
            match cur.as_mut() {
                Some((_, t)) => t.add(k.ikey, k.value, k.note_seq),
                None => Ok(()),
            }
        })?;
        if let Some((lo, t)) = cur.take() {
            parts.push((lo, t.finish()?));
        }
        if parts.is_empty() && self.lo.is_empty() {
            if let Some(n) = &self.next_after {
                e.records.push(range_record(n.meta.file_no, b""));
            }
        }
        for (lo, meta) in parts {
            ctx.stats
                .lwc
                .division_bytes
                .fetch_add(meta.size, Ordering::Relaxed);
            e.records.push(range_record(meta.file_no, &lo));
            e.added.push(added(self.level, meta));
        }
        Ok(e)
    }
}
