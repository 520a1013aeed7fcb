//! A `lightweight` version: level 0 (one-segment DTables from flushes, newest first) and
//! levels 1.. of DTables that partition the key space by routing ranges (each table owns
//! `[lo, next table's lo)`; the first table's `lo` is empty). The routing ranges are the
//! layout's manifest record (tag [`TAG_RANGE`]). Workload balance moves a boundary without
//! moving data, so a table's data may reach into the ranges after it; tables whose data
//! reaches into each other's ranges form a *group*, which lookups, scans and jobs treat as
//! one unit (docs/architecture-lightweight.md). Point lookups, iterators, apply and the
//! invariants live here.

use std::any::Any;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::coding::{put_slice, put_varint, Reader};
use crate::error::{Error, Result};
use crate::iter::{Concat, InternalIter, MergingIter, RunParts};
use crate::key::{self, cmp_ikey};
use crate::layout::{check_edit_tables, LayoutVersion, TablePlace};
use crate::manifest::edit::{AddedTable, KsEdit, LayoutRecord};
use crate::memtable::Lookup;
use crate::stats::LevelStats;
use crate::table::{TableCtx, TableFile};

use super::dtable::{self, FORMAT_DTABLE};

/// Layout record: the routing lower bound of a table of level ≥ 1 (`file_no ‖ lo`).
pub const TAG_RANGE: u8 = 1;

/// Encodes a [`TAG_RANGE`] record.
pub fn range_record(file_no: u64, lo: &[u8]) -> LayoutRecord {
    let mut data = Vec::new();
    put_varint(&mut data, file_no);
    put_slice(&mut data, lo);
    LayoutRecord {
        tag: TAG_RANGE,
        data,
    }
}

/// Tables of one level with their shared groups.
#[derive(Default)]
pub struct Level {
    /// Tables sorted by routing lower bound.
    pub tables: Vec<Arc<TableFile>>,
    /// Their routing lower bounds (same order; the first is empty).
    pub los: Vec<Vec<u8>>,
    /// Groups: `(first, end)` index ranges of `tables`, in key order.
    pub groups: Vec<(usize, usize)>,
    /// Bytes of the level's files.
    pub bytes: u64,
}

impl Level {
    fn new(mut pairs: Vec<(Vec<u8>, Arc<TableFile>)>) -> Level {
        pairs.sort_by(|a, b| a.0.cmp(&b.0));
        let (los, tables): (Vec<_>, Vec<_>) = pairs.into_iter().unzip();
        let mut groups = Vec::new();
        let mut i = 0;
        while let Some(first) = tables.get(i) {
            let mut end = i + 1;
            let mut reach: Vec<u8> = first.meta.largest_user().to_vec();
            // The next table joins while data of the group reaches its range.
            while let (Some(next_lo), Some(t)) = (los.get(end), tables.get(end)) {
                if reach.as_slice() < next_lo.as_slice() {
                    break;
                }
                if t.meta.largest_user() > reach.as_slice() {
                    reach = t.meta.largest_user().to_vec();
                }
                end += 1;
            }
            groups.push((i, end));
            i = end;
        }
        let bytes = tables.iter().map(|t| t.meta.size).sum();
        Level {
            tables,
            los,
            groups,
            bytes,
        }
    }

    /// The group whose key span holds `user_key`.
    pub fn group_of(&self, user_key: &[u8]) -> Option<(usize, usize)> {
        let i = self
            .groups
            .partition_point(|&(f, _)| self.los.get(f).is_some_and(|lo| lo.as_slice() <= user_key));
        i.checked_sub(1).and_then(|i| self.groups.get(i).copied())
    }

    /// The index of the table whose routing range holds `user_key`.
    pub fn owner(&self, user_key: &[u8]) -> Option<usize> {
        self.los
            .partition_point(|lo| lo.as_slice() <= user_key)
            .checked_sub(1)
    }

    /// The first and last table (inclusive, first ≤ last) whose ranges meet `lo..hi` (`hi`
    /// exclusive; `None`: to the end); the first table when the level starts above `lo`.
    pub fn owners(&self, lo: &[u8], hi: Option<&[u8]>) -> (usize, usize) {
        let a = self.owner(lo).unwrap_or(0);
        let b = match hi {
            Some(h) => self
                .los
                .partition_point(|l| l.as_slice() < h)
                .saturating_sub(1),
            None => self.tables.len().saturating_sub(1),
        }
        .max(a);
        (a, b)
    }

    /// Live bytes of the tables `g` (file bytes less dead bytes).
    pub fn live_bytes(&self, g: (usize, usize)) -> u64 {
        self.tables
            .get(g.0..g.1)
            .unwrap_or_default()
            .iter()
            .map(|t| t.meta.size - t.meta.dead_bytes())
            .sum()
    }
}

/// One version of a `lightweight` keyspace.
#[derive(Default)]
pub struct LwcVersion {
    /// Level 0, newest first.
    pub l0: Vec<Arc<TableFile>>,
    /// Levels 1.. (`levels[0]` is level 1).
    pub levels: Vec<Arc<Level>>,
}

impl LwcVersion {
    /// Level `l` ≥ 1, if it exists.
    pub fn level(&self, l: usize) -> Option<&Level> {
        l.checked_sub(1)
            .and_then(|i| self.levels.get(i))
            .map(|l| &**l)
    }

    /// The deepest level ≥ 1 holding a table (0 when none does).
    pub fn deepest(&self) -> usize {
        (1..=self.levels.len())
            .rev()
            .find(|&l| self.level(l).is_some_and(|v| !v.tables.is_empty()))
            .unwrap_or(0)
    }

    /// Looks `user_key` up in the group `g` of level `lv`: every segment of its tables,
    /// newest segment first (one table: its segments newest first).
    fn get_in_group(
        &self,
        lv: &Level,
        g: (usize, usize),
        user_key: &[u8],
        seq: u64,
    ) -> Result<Lookup> {
        let tables = lv.tables.get(g.0..g.1).unwrap_or_default();
        if let [t] = tables {
            if !t.may_hold(user_key, seq) {
                return Ok(Lookup::Absent);
            }
            return dtable::reader(t)?.get(user_key, seq);
        }
        let mut segs = Vec::new();
        for t in tables.iter().filter(|t| t.may_hold(user_key, seq)) {
            let r = dtable::reader(t)?;
            for (i, s) in r.tail.segments.iter().enumerate() {
                segs.push((s.seq, r.clone(), i));
            }
        }
        segs.sort_by_key(|s| std::cmp::Reverse(s.0));
        for (_, r, i) in segs {
            match r.get_in(i, user_key, seq)? {
                Lookup::Absent => {}
                found => return Ok(found),
            }
        }
        Ok(Lookup::Absent)
    }
}

/// A level's groups as [`Concat`] parts: each a merge of its tables' segments.
struct GroupRun {
    level: Arc<Level>,
}

impl RunParts for GroupRun {
    type Iter = MergingIter;
    fn count(&self) -> usize {
        self.level.groups.len()
    }
    fn open(&self, idx: usize) -> Result<MergingIter> {
        let (f, e) = self
            .level
            .groups
            .get(idx)
            .copied()
            .ok_or_else(|| Error::InvalidArgument(format!("no group {idx}")))?;
        let mut children = Vec::new();
        for t in self.level.tables.get(f..e).unwrap_or_default() {
            dtable::reader(t)?.iters(true, &mut children)?;
        }
        Ok(MergingIter::new(children))
    }
    fn seek_part(&self, ikey: &[u8]) -> usize {
        // The first group whose span reaches the key: a group ends where the next begins.
        let u = key::user_key(ikey);
        self.level
            .groups
            .partition_point(|&(f, _)| self.level.los.get(f).is_some_and(|lo| lo.as_slice() <= u))
            .saturating_sub(1)
    }
    fn seek_for_prev_part(&self, ikey: &[u8]) -> Option<usize> {
        let u = key::user_key(ikey);
        self.level
            .groups
            .partition_point(|&(f, _)| self.level.los.get(f).is_some_and(|lo| lo.as_slice() <= u))
            .checked_sub(1)
    }
    /// The smallest internal key of the group's tables that hold entries (the manifest's, no
    /// read): a scan that moves past a group stands before the next as a bound and reads it
    /// only if the merge reaches that key. A seek into a routing range whose table holds no
    /// segment (its data went down a level) would otherwise read the first block of every
    /// segment of the next group: 0.78 segment blocks per seek at level 1 of the 5M-key
    /// bench's state, mostly block-cache hits
    /// (docs/benchmarks.md, "Issue 32: what a lightweight seek costs, and lazy groups").
    fn first_key(&self, idx: usize) -> Option<&[u8]> {
        let &(f, e) = self.level.groups.get(idx)?;
        self.level
            .tables
            .get(f..e)?
            .iter()
            .filter(|t| t.meta.entries > 0)
            .map(|t| t.meta.smallest.as_slice())
            .min_by(|a, b| cmp_ikey(a, b))
    }
}

impl LayoutVersion for LwcVersion {
    fn get(&self, user_key: &[u8], seq: u64) -> Result<Lookup> {
        for t in &self.l0 {
            if t.may_hold(user_key, seq) {
                match dtable::reader(t)?.get(user_key, seq)? {
                    Lookup::Absent => {}
                    found => return Ok(found),
                }
            }
        }
        for lv in &self.levels {
            if let Some(g) = lv.group_of(user_key) {
                match self.get_in_group(lv, g, user_key, seq)? {
                    Lookup::Absent => {}
                    found => return Ok(found),
                }
            }
        }
        Ok(Lookup::Absent)
    }

    fn add_iters(&self, out: &mut Vec<Box<dyn InternalIter>>) -> Result<()> {
        for t in &self.l0 {
            dtable::reader(t)?.iters(true, out)?;
        }
        for lv in &self.levels {
            if !lv.tables.is_empty() {
                out.push(Box::new(Concat::lazy(GroupRun { level: lv.clone() })));
            }
        }
        Ok(())
    }

    fn apply(&self, edit: &KsEdit, tables: &Arc<TableCtx>) -> Result<Arc<dyn LayoutVersion>> {
        let removed: HashSet<u64> = edit.removed.iter().copied().collect();
        let mut gone: HashMap<u64, (Arc<TableFile>, Option<Vec<u8>>)> = HashMap::new();
        let mut l0 = Vec::new();
        for t in &self.l0 {
            if removed.contains(&t.meta.file_no) {
                gone.insert(t.meta.file_no, (t.clone(), None));
            } else {
                l0.push(t.clone());
            }
        }
        let mut levels: Vec<Vec<(Vec<u8>, Arc<TableFile>)>> = Vec::new();
        for lv in &self.levels {
            let mut keep = Vec::new();
            for (lo, t) in lv.los.iter().zip(&lv.tables) {
                if removed.contains(&t.meta.file_no) {
                    gone.insert(t.meta.file_no, (t.clone(), Some(lo.clone())));
                } else {
                    keep.push((lo.clone(), t.clone()));
                }
            }
            levels.push(keep);
        }
        check_edit_tables(edit, FORMAT_DTABLE, |no| gone.contains_key(&no))?;
        let mut ranges: HashMap<u64, Vec<u8>> = HashMap::new();
        for r in &edit.records {
            if r.tag != TAG_RANGE {
                return Err(Error::InvalidArgument(format!(
                    "lightweight: unknown layout record tag {}",
                    r.tag
                )));
            }
            let mut rd = Reader::new(&r.data);
            let (no, lo) = (rd.varint(), rd.slice());
            match (no, lo) {
                (Some(no), Some(lo)) if rd.is_empty() => {
                    ranges.insert(no, lo.to_vec());
                }
                _ => {
                    return Err(Error::InvalidArgument(
                        "lightweight: bad range record".into(),
                    ))
                }
            }
        }
        for a in &edit.added {
            if a.meta.append.is_none() {
                return Err(Error::InvalidArgument(format!(
                    "DTable {:06} added as not appendable",
                    a.meta.file_no
                )));
            }
            let (t, old_lo) = match gone.get(&a.meta.file_no) {
                Some((old, lo)) => (old.readded(&a.meta)?, lo.clone()),
                None => (
                    TableFile::with_ext(a.meta.clone(), tables.clone(), dtable::EXT),
                    None,
                ),
            };
            let l = a.level as usize;
            if l == 0 {
                l0.push(t);
                continue;
            }
            if l > 64 {
                return Err(Error::InvalidArgument(format!("level {l} out of range")));
            }
            let lo = ranges.remove(&a.meta.file_no).or(old_lo).ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "DTable {:06} added to level {l} without a key range",
                    a.meta.file_no
                ))
            })?;
            if levels.len() < l {
                levels.resize(l, Vec::new());
            }
            if let Some(v) = levels.get_mut(l - 1) {
                v.push((lo, t));
            }
        }
        // Range records for tables the edit does not add: a boundary moved.
        for (no, lo) in ranges {
            let slot = levels
                .iter_mut()
                .flatten()
                .find(|(_, t)| t.meta.file_no == no)
                .ok_or_else(|| {
                    Error::InvalidArgument(format!(
                        "range record for table {no:06}, which is not in levels 1.."
                    ))
                })?;
            slot.0 = lo;
        }
        while levels.last().is_some_and(|l| l.is_empty()) {
            levels.pop();
        }
        l0.sort_by(|a, b| {
            b.meta
                .max_seq
                .cmp(&a.meta.max_seq)
                .then(b.meta.file_no.cmp(&a.meta.file_no))
        });
        let v = LwcVersion {
            l0,
            levels: levels
                .into_iter()
                .map(|l| Arc::new(Level::new(l)))
                .collect(),
        };
        v.check_invariants().map_err(Error::InvalidArgument)?;
        Ok(Arc::new(v))
    }

    fn snapshot(&self, out: &mut KsEdit) {
        for t in &self.l0 {
            out.added.push(AddedTable {
                level: 0,
                slot: 0,
                format: FORMAT_DTABLE,
                meta: t.meta.clone(),
            });
        }
        for (i, lv) in self.levels.iter().enumerate() {
            for (lo, t) in lv.los.iter().zip(&lv.tables) {
                out.added.push(AddedTable {
                    level: i as u32 + 1,
                    slot: 0,
                    format: FORMAT_DTABLE,
                    meta: t.meta.clone(),
                });
                out.records.push(range_record(t.meta.file_no, lo));
            }
        }
    }

    fn files(&self) -> Vec<Arc<TableFile>> {
        self.l0
            .iter()
            .chain(self.levels.iter().flat_map(|l| l.tables.iter()))
            .cloned()
            .collect()
    }

    fn level_stats(&self) -> Vec<LevelStats> {
        let mut out = vec![LevelStats {
            filter_bytes: 0,
            memory: None,
            level: 0,
            tables: self.l0.len() as u64,
            bytes: self.l0.iter().map(|t| t.meta.size).sum(),
            detail: String::new(),
        }];
        for (i, lv) in self.levels.iter().enumerate() {
            out.push(LevelStats {
                filter_bytes: 0,
                memory: None,
                level: i as u32 + 1,
                tables: lv.tables.len() as u64,
                bytes: lv.bytes,
                detail: format!("{} groups", lv.groups.len()),
            });
        }
        out
    }

    fn table_places(&self) -> Vec<TablePlace> {
        let mut out: Vec<TablePlace> = self
            .l0
            .iter()
            .map(|t| TablePlace {
                level: 0,
                place: String::new(),
                guard: None,
                file: t.clone(),
            })
            .collect();
        for (i, lv) in self.levels.iter().enumerate() {
            for (lo, t) in lv.los.iter().zip(&lv.tables) {
                out.push(TablePlace {
                    level: i as u32 + 1,
                    place: format!("from {}", String::from_utf8_lossy(lo)),
                    guard: None,
                    file: t.clone(),
                });
            }
        }
        out
    }

    fn check_invariants(&self) -> std::result::Result<(), String> {
        for (i, lv) in self.levels.iter().enumerate() {
            let l = i + 1;
            if lv.tables.is_empty() {
                continue;
            }
            if lv.los.first().is_some_and(|lo| !lo.is_empty()) {
                return Err(format!(
                    "L{l}: the first table's range does not start at the empty key"
                ));
            }
            if lv.los.windows(2).any(|w| matches!(w, [a, b] if a >= b)) {
                return Err(format!("L{l}: routing ranges not strictly increasing"));
            }
            for (lo, t) in lv.los.iter().zip(&lv.tables) {
                if t.meta.entries > 0 && t.meta.smallest_user() < lo.as_slice() {
                    return Err(format!(
                        "L{l}: table {:06} holds data below its range",
                        t.meta.file_no
                    ));
                }
            }
        }
        if self
            .l0
            .windows(2)
            .any(|w| matches!(w, [a, b] if a.meta.max_seq < b.meta.max_seq))
        {
            return Err("L0 not newest first".into());
        }
        if self.files().iter().any(|t| t.meta.append.is_none()) {
            return Err("a DTable that is not appendable".into());
        }
        Ok(())
    }

    fn verify_metadata_files(&self) -> Vec<Error> {
        self.files()
            .iter()
            .filter_map(|t| dtable::reader(t).and_then(|r| r.agg().map(|_| ())).err())
            .collect()
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Whether `a` sorts before `b` as internal keys (re-exported for the jobs).
pub fn ikey_lt(a: &[u8], b: &[u8]) -> bool {
    cmp_ikey(a, b).is_lt()
}
