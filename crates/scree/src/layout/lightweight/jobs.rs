//! The `lightweight` layout's jobs: the light-weight compaction (a victim group of level i,
//! or all of level 0, merged once and appended as one segment to each overlapped DTable of
//! level i+1, with the metadata aggregation and the workload balance that follow it) and the
//! equal division of an oversized DTable group.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
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

/// Clears the layout's busy flag when the job is dropped (after its edit is installed).
pub(crate) struct Busy(pub(crate) Arc<AtomicBool>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

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
    pub(crate) fn create(ctx: &JobCtx<'_>, cause: WriteCause) -> Result<NewTable> {
        let no = ctx.new_file_no();
        let w = ctx.tables.env.create(&path_of(ctx, no), cause)?;
        Ok(NewTable {
            no,
            seg: SegmentWriter::new(w, no, no, ctx.opts.block_size, ctx.opts.bloom_bits_per_key),
        })
    }
    pub(crate) fn add(&mut self, ikey: &[u8], value: &[u8], note: Option<u64>) -> Result<()> {
        self.seg.add(ikey, value, note)
    }
    pub(crate) fn bytes(&self) -> u64 {
        self.seg.bytes()
    }
    pub(crate) fn finish(self) -> Result<TableMeta> {
        let (entry, w) = self.seg.finish()?;
        Ok(finish_table(w, self.no, None, 0, Some(entry), None)?.0)
    }
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
            dtable::read_tail_bytes(t)?
        }
        None => {
            c.uncopied_reads.fetch_add(1, Ordering::Relaxed);
            dtable::read_tail_bytes(t)?
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

/// The neighbour taking over a victim's range, with its new routing range `[lo, hi)`.
pub(crate) type Absorber = (Arc<TableFile>, Vec<u8>, Option<Vec<u8>>);

/// A light-weight compaction of `victims` (a group of level `level` ≥ 1, or all of L0) into
/// level `level + 1`, whose tables (sorted by routing bound) are `targets`.
pub(crate) struct CompactJob {
    pub(crate) level: usize,
    pub(crate) victims: Vec<Arc<TableFile>>,
    /// The victims' group starts the level (its bound is the empty key): the table after it
    /// takes that bound.
    pub(crate) next_after: Option<Arc<TableFile>>,
    pub(crate) group_first: bool,
    /// The neighbour at the victims' level that takes over their range, and its new routing
    /// range `[lo, hi)`: it receives the targets' new tails (metadata aggregation).
    pub(crate) absorber: Option<Absorber>,
    pub(crate) targets: Vec<(Vec<u8>, Arc<TableFile>)>,
    /// Nothing lies below the output level.
    pub(crate) deeper_empty: bool,
    pub(crate) balance_factor: f64,
    /// When the next level is empty, the new DTables there are cut at this size.
    pub(crate) new_table_bytes: u64,
    pub(crate) _busy: Busy,
}

/// What the compaction appended to one target.
struct Appended {
    idx: usize,
    meta: TableMeta,
    tail: Tail,
    raw: Vec<u8>,
}

impl CompactJob {
    /// The next-level tables overlapping the routing range `[lo, hi)`.
    fn overlapping<'a>(
        &'a self,
        lo: &'a [u8],
        hi: Option<&'a [u8]>,
    ) -> impl Iterator<Item = (usize, &'a Arc<TableFile>)> + 'a {
        self.targets
            .iter()
            .enumerate()
            .filter_map(move |(i, (tlo, t))| {
                let thi = self.targets.get(i + 1).map(|n| n.0.as_slice());
                let starts_before_hi = hi.is_none_or(|h| tlo.as_slice() < h);
                let ends_after_lo = thi.is_none_or(|h| h > lo);
                (starts_before_hi && ends_after_lo).then_some((i, t))
            })
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
        for v in &self.victims {
            c.victim_bytes.fetch_add(v.meta.size, Ordering::Relaxed);
            let r = dtable::reader(v)?;
            for copy in r.agg()? {
                copies.insert(copy.file_no, copy);
            }
            r.iters(false, &mut children)?;
            e.removed.push(v.meta.file_no);
        }
        let mut input = MergingIter::new(children);
        let out_level = self.level + 1;
        let rules = MergeRules {
            // Appended segments sit above the targets' older segments, which a dropped
            // tombstone would uncover: tombstones go only where nothing lies below.
            bottommost: self.targets.is_empty() && self.deeper_empty,
            // Sequence numbers stay: segments appended later must sort as newer.
            zero_seqs: false,
            zeroed_max: 0,
        };
        if self.targets.is_empty() {
            // The next level is empty: new DTables of at most half the size limit take
            // everything, the first from the empty key, each next from its first key.
            let mut out: Option<(Vec<u8>, NewTable)> = None;
            let mut made: Vec<(Vec<u8>, TableMeta)> = Vec::new();
            let cut = self.new_table_bytes.max(1);
            merge_visible(ctx, &mut input, rules, &mut |k| {
                if k.first_of_key && out.as_ref().is_some_and(|o| o.1.bytes() >= cut) {
                    if let Some((lo, o)) = out.take() {
                        made.push((lo, o.finish()?));
                    }
                    ctx.flush_point()?;
                }
                if out.is_none() {
                    let lo = if made.is_empty() {
                        Vec::new()
                    } else {
                        key::user_key(k.ikey).to_vec()
                    };
                    out = Some((lo, NewTable::create(ctx, WriteCause::Compaction)?));
                }
                match out.as_mut() {
                    Some((_, o)) => o.add(k.ikey, k.value, k.note_seq),
                    None => Ok(()),
                }
            })?;
            if let Some((lo, o)) = out {
                made.push((lo, o.finish()?));
            }
            for (lo, meta) in made {
                e.records.push(range_record(meta.file_no, &lo));
                e.added.push(added(out_level, meta));
            }
        } else {
            // (2)-(5) Merge, cut by the targets' routing ranges, append each piece.
            let mut appended: Vec<Appended> = Vec::new();
            let mut cur: Option<(usize, u64, SegmentWriter)> = None;
            let targets = &self.targets;
            let finish_piece = |cur: Option<(usize, u64, SegmentWriter)>,
                                appended: &mut Vec<Appended>|
             -> Result<()> {
                let Some((idx, start, seg)) = cur else {
                    return Ok(());
                };
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
            };
            let seg_seq = ctx.new_file_no();
            merge_visible(ctx, &mut input, rules, &mut |k| {
                let u = key::user_key(k.ikey);
                let owner = targets
                    .partition_point(|(lo, _)| lo.as_slice() <= u)
                    .saturating_sub(1);
                if cur.as_ref().is_none_or(|c| c.0 != owner) {
                    finish_piece(cur.take(), &mut appended)?;
                    ctx.flush_point()?;
                    let Some((_, t)) = targets.get(owner) else {
                        return Err(Error::InvalidArgument("no target".into()));
                    };
                    let w = ctx
                        .tables
                        .env
                        .reopen_for_append(&t.path(), WriteCause::Compaction)?;
                    let start = w.len();
                    cur = Some((
                        owner,
                        start,
                        SegmentWriter::new(
                            w,
                            t.meta.file_no,
                            seg_seq,
                            ctx.opts.block_size,
                            ctx.opts.bloom_bits_per_key,
                        ),
                    ));
                }
                match cur.as_mut() {
                    Some((_, _, s)) => s.add(k.ikey, k.value, k.note_seq),
                    None => Ok(()),
                }
            })?;
            finish_piece(cur.take(), &mut appended)?;
            // (6) Metadata aggregation: the neighbour that now covers the victims' range
            // stores the new tails of the next-level tables its range overlaps.
            if let Some((a, lo, hi)) = &self.absorber {
                let ar = dtable::reader(a)?;
                for copy in ar.agg()? {
                    let fresher = copies
                        .get(&copy.file_no)
                        .is_some_and(|c| c.meta_offset >= copy.meta_offset);
                    if !fresher {
                        copies.insert(copy.file_no, copy);
                    }
                }
                let mut agg = Vec::new();
                for (i, t) in self.overlapping(lo, hi.as_deref()) {
                    match appended.iter().find(|x| x.idx == i) {
                        Some(x) => agg.push(AggCopy {
                            file_no: t.meta.file_no,
                            meta_offset: x.meta.append.map_or(0, |m| m.meta_offset),
                            tail: x.raw.clone(),
                        }),
                        None => {
                            let (_, raw) = target_tail(ctx, t, &copies)?;
                            agg.push(AggCopy {
                                file_no: t.meta.file_no,
                                meta_offset: t.meta.append.map_or(0, |m| m.meta_offset),
                                tail: raw,
                            });
                        }
                    }
                }
                let w = ctx
                    .tables
                    .env
                    .reopen_for_append(&a.path(), WriteCause::Compaction)?;
                let start = w.len();
                let (meta, _) = switch(a, &ar.tail, start, w, None, Some(&agg))?;
                c.aggregation_writes.fetch_add(1, Ordering::Relaxed);
                e.removed.push(a.meta.file_no);
                e.added.push(added(self.level, meta));
            }
            // Workload balance: a target left overly full hands the upper part of its range
            // to its next neighbour; no data moves, later appends follow the new bounds.
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
                            c.balance_shifts.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            }
            for x in appended {
                if let Some((_, t)) = targets.get(x.idx) {
                    e.removed.push(t.meta.file_no);
                    e.added.push(added(out_level, x.meta));
                }
            }
        }
        if self.group_first {
            if let Some(n) = &self.next_after {
                e.records.push(range_record(n.meta.file_no, b""));
            }
        }
        Ok(e)
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
    pub(crate) _busy: Busy,
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
        merge_visible(ctx, &mut input, rules, &mut |k| {
            if k.first_of_key && parts.len() + 1 < n {
                if let Some((_, t)) = &cur {
                    if t.bytes() >= part {
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
                cur = Some((lo, NewTable::create(ctx, WriteCause::Gc)?));
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
            e.records.push(range_record(meta.file_no, &lo));
            e.added.push(added(self.level, meta));
        }
        Ok(e)
    }
}
