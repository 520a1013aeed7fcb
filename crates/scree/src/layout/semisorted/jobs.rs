//! The `semisorted` layout's jobs: the stepped merge (every sub-level of a level merged into one
//! new sub-level of the next level, or in place at the last level) and the rebuild of a level's
//! missing filter; and what both use: writing tables cut at prefix-group boundaries
//! ([`Output`]) and the merged scan of several sub-levels ([`Merged`]).

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::Arc;

use super::table::{self, hashes, Entry, SemiKey, SemiTableBuilder};
use super::version::{reader_of, OpenSemi, PendingFilter, Shared, Sub};
use super::{FilterBuild, KeyRun, Reservation};
use crate::compaction_filter::{decide, Filtered};
use crate::error::{Error, Result};
use crate::filter::cuckoo::{key_hash, split_hash, MultiLevelCuckoo, Prior};
use crate::key::{self, ValueKind};
use crate::layout::{Job, JobCtx};
use crate::manifest::edit::{AddedTable, KsEdit};
use crate::stats::{ReadKind, WriteCause};
use crate::table::TableMeta;

use super::table::FORMAT_SEMISORTED;

/// Writes entries in [`SemiKey`] order into tables, closing a table at the first prefix group
/// that starts after it reached the target size.
pub struct Output<'a> {
    ctx: &'a JobCtx<'a>,
    cause: WriteCause,
    target: u64,
    builder: Option<SemiTableBuilder>,
    last_ph: Option<u64>,
    last_key: Option<Vec<u8>>,
    done: Vec<TableMeta>,
}

impl<'a> Output<'a> {
    /// An output of tables written for `cause`, cut at `target` bytes.
    pub fn new(ctx: &'a JobCtx<'a>, cause: WriteCause, target: u64) -> Self {
        Output {
            ctx,
            cause,
            target,
            builder: None,
            last_ph: None,
            last_key: None,
            done: Vec::new(),
        }
    }

    /// Adds the next entry. A table is closed at the first prefix group that starts once it
    /// reached the target size, or inside a group (between two keys) at twice the target, so
    /// that one huge group does not make one huge table.
    pub fn add(&mut self, ph: u64, sh: u64, ikey: &[u8], value: &[u8]) -> Result<()> {
        let target = self.target;
        let uk = key::user_key(ikey);
        let new_group = self.last_ph != Some(ph);
        let new_key = new_group || self.last_key.as_deref() != Some(uk);
        if new_key {
            if let Some(b) = &self.builder {
                let size = b.estimated_size();
                if (new_group && size >= target) || size >= target.saturating_mul(2) {
                    if let Some(b) = self.builder.take() {
                        self.done.push(b.finish()?);
                    }
                    self.ctx.flush_point()?;
                }
            }
            self.last_ph = Some(ph);
            let last = self.last_key.get_or_insert_with(Vec::new);
            last.clear();
            last.extend_from_slice(uk);
        }
        if self.builder.is_none() {
            let no = self.ctx.new_file_no();
            let w = self
                .ctx
                .tables
                .env
                .create(&table::path(&self.ctx.tables.dir, no), self.cause)?;
            self.builder = Some(SemiTableBuilder::new(
                w,
                no,
                self.ctx.opts.block_size,
                self.ctx.hash_key,
            ));
        }
        if let Some(b) = self.builder.as_mut() {
            b.add(ph, sh, ikey, value)?;
        }
        Ok(())
    }

    /// Finishes the last table; the tables written, in order.
    pub fn finish(mut self) -> Result<Vec<TableMeta>> {
        if let Some(b) = self.builder.take() {
            if b.entries() > 0 {
                self.done.push(b.finish()?);
            }
        }
        Ok(self.done)
    }
}

/// A cursor over one sub-level's entries in table order, a block at a time.
struct Cursor {
    sub: Arc<Sub>,
    /// Index of the sub-level among the merged ones (0: newest).
    rank: usize,
    table: usize,
    reader: Option<Arc<OpenSemi>>,
    block: u32,
    entries: Vec<Entry>,
    pos: usize,
    /// Hashes of the current entry.
    h: (u64, u64),
    /// The prefix whose hash is `h.0`: a sub-level holds a group's keys together, so the next
    /// entry's prefix hash is mostly this one, found by a compare instead of a SipHash.
    prefix: Vec<u8>,
}

impl Cursor {
    fn current(&self) -> Option<&Entry> {
        self.entries.get(self.pos)
    }

    /// Moves to the next entry (loading blocks and tables as needed).
    fn advance(&mut self, shared: &Shared) -> Result<()> {
        self.pos += 1;
        while self.pos >= self.entries.len() {
            self.entries.clear();
            self.pos = 0;
            if let Some(r) = &self.reader {
                if self.block < r.reader.footer().blocks {
                    self.entries = r.reader.block_entries(self.block, ReadKind::Compaction)?;
                    self.block += 1;
                    continue;
                }
                self.reader = None;
                self.table += 1;
            }
            let Some(t) = self.sub.tables.get(self.table) else {
                return Ok(());
            };
            self.reader = Some(reader_of(t, false)?);
            self.block = 0;
        }
        if let Some(e) = self.entries.get(self.pos) {
            let uk = key::user_key(&e.ikey);
            let (p, s) = uk.split_at(shared.prefix_len.min(uk.len()));
            if p != self.prefix.as_slice() || self.prefix.is_empty() {
                self.h.0 = key_hash(&shared.hash_key, p);
                self.prefix.clear();
                self.prefix.extend_from_slice(p);
            }
            self.h.1 = key_hash(&shared.hash_key, s);
            debug_assert_eq!(
                self.h,
                hashes(&shared.hash_key, shared.prefix_len, uk),
                "a reused prefix hash is the prefix's"
            );
        }
        Ok(())
    }

    fn key(&self) -> Option<SemiKey<'_>> {
        let e = self.current()?;
        let p = key::parse(&e.ikey);
        Some(SemiKey {
            ph: self.h.0,
            sh: self.h.1,
            user_key: p.user_key,
            trailer: p.trailer(),
        })
    }
}

/// Heap entry: the cursor with the smallest key on top (ties: the newer sub-level).
struct Top(Cursor);

impl PartialEq for Top {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Top {}
impl PartialOrd for Top {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Top {
    fn cmp(&self, o: &Self) -> Ordering {
        match (self.0.key(), o.0.key()) {
            (Some(a), Some(b)) => b.order(&a).then_with(|| o.0.rank.cmp(&self.0.rank)),
            _ => Ordering::Equal,
        }
    }
}

/// The merged scan of sub-levels (given newest first), in [`SemiKey`] order.
pub struct Merged<'s> {
    heap: BinaryHeap<Top>,
    shared: &'s Shared,
}

impl<'s> Merged<'s> {
    /// Opens a cursor on each of `subs`.
    pub fn new(subs: &[Arc<Sub>], shared: &'s Shared) -> Result<Self> {
        let mut heap = BinaryHeap::new();
        for (rank, sub) in subs.iter().enumerate() {
            let mut c = Cursor {
                sub: sub.clone(),
                rank,
                table: 0,
                reader: None,
                block: 0,
                entries: Vec::new(),
                pos: 0,
                h: (0, 0),
                prefix: Vec::new(),
            };
            // Starts before the first entry: `advance` loads it.
            c.pos = 0;
            c.advance(shared)?;
            if c.current().is_some() {
                heap.push(Top(c));
            }
        }
        Ok(Merged { heap, shared })
    }

    /// Calls `f(hashes, entry, rank of its sub-level)` for each entry in order.
    pub fn for_each(
        mut self,
        mut f: impl FnMut((u64, u64), &Entry, usize) -> Result<()>,
    ) -> Result<()> {
        // The top cursor is advanced in place and sifted down once (a pop and a push sifted
        // it twice, each a few key compares).
        while let Some(mut top) = self.heap.peek_mut() {
            let c = &mut top.0;
            if let Some(e) = c.current() {
                f(c.h, e, c.rank)?;
            }
            c.advance(self.shared)?;
            if c.current().is_none() {
                std::collections::binary_heap::PeekMut::pop(top);
            }
        }
        Ok(())
    }
}

/// Merges every sub-level of level `src` into one new sub-level of `dst` (`src + 1`, or `src`
/// for a merge in place).
pub struct MergeJob {
    pub(super) src: usize,
    pub(super) dst: usize,
    /// The sub-levels merged, newest first.
    pub(super) inputs: Vec<Arc<Sub>>,
    /// No older data of these keys exists below the output: tombstones no snapshot needs go.
    pub(super) bottommost: bool,
    /// For a merge down: `dst`'s sub-levels (oldest first) and filter (None: empty level).
    /// `None` when `dst`'s filter is missing (the output then waits for a rebuild).
    pub(super) base: Option<(Vec<u64>, Option<Arc<MultiLevelCuckoo>>)>,
    /// Whether `dst` is a stepped level (else an LSM level, whose new filter holds its run).
    pub(super) stepped: bool,
    pub(super) shared: Arc<Shared>,
    pub(super) res: Reservation,
}

impl Job for MergeJob {
    fn run(&mut self, ctx: &JobCtx<'_>) -> Result<KsEdit> {
        let merged = Merged::new(&self.inputs, &self.shared)?;
        let mut out = Output::new(
            ctx,
            WriteCause::Compaction,
            ctx.opts.semisorted.target_table_bytes,
        );
        let snap = ctx.smallest_snapshot;
        let mut last: Option<Vec<u8>> = None;
        let mut last_seq = u64::MAX;
        // The next level's filter, taking the distinct user keys written in runs, sized for
        // the inputs' entries (the keys written, unless versions or tombstones drop out).
        // `None` when it cannot be made (no id left): it goes missing and is rebuilt after
        // the level's next merge.
        let mut build = match (&self.base, self.src != self.dst) {
            (Some((slots, f)), true) => {
                let expected: u64 = self.inputs.iter().map(|s| s.entries()).sum();
                FilterBuild::new(
                    ctx,
                    self.shared.prefix_len,
                    f.as_deref(),
                    self.stepped,
                    slots.len(),
                    usize::try_from(expected).unwrap_or(usize::MAX),
                )
                .ok()
            }
            _ => None,
        };
        let mut run = KeyRun::default();
        merged.for_each(|(ph, sh), e, _| {
            let p = key::parse(&e.ikey);
            let same = last.as_deref() == Some(p.user_key);
            if !same {
                let l = last.get_or_insert_with(Vec::new);
                l.clear();
                l.extend_from_slice(p.user_key);
                last_seq = u64::MAX;
            }
            // A newer version every snapshot sees hides this one; a tombstone every snapshot
            // sees goes at the bottom.
            let hidden = last_seq <= snap;
            let dead = self.bottommost && p.kind == ValueKind::Delete as u8 && p.seq <= snap;
            last_seq = p.seq;
            if hidden || dead {
                return Ok(());
            }
            // The compaction filter: nothing at the bottom, else a tombstone in its place
            // (`compaction_filter`).
            let filtered = decide(ctx, p.user_key, p.kind, p.seq, &e.value, self.bottommost);
            if filtered == Filtered::Remove {
                return Ok(());
            }
            // A key's first version is never hidden; when it is a dropped tombstone (or a
            // put the filter removed) every older one is hidden: a key is in the output iff
            // its first version is.
            if let (Some(b), false) = (build.as_mut(), same) {
                if run.push(split_hash(ph, sh), p.user_key) && run.drain_into(b).is_err() {
                    build = None;
                }
            }
            if filtered == Filtered::Tombstone {
                let tomb = key::make_ikey(p.user_key, p.seq, ValueKind::Delete);
                return out.add(ph, sh, &tomb, &[]);
            }
            out.add(ph, sh, &e.ikey, &e.value)
        })?;
        let metas = out.finish()?;
        let mut edit = KsEdit::default();
        edit.removed = self
            .inputs
            .iter()
            .flat_map(|s| s.tables.iter().map(|t| t.meta.file_no))
            .collect();
        if let Some(slot) = metas.first().map(|m| m.file_no) {
            if let (Some(mut b), Some((slots, _))) = (build, &self.base) {
                if run.drain_into(&mut b).is_ok() {
                    self.shared.pending.lock().insert(
                        slot,
                        PendingFilter {
                            level: self.dst as u32,
                            base: slots.clone(),
                            added: slot,
                            filter: b.finish(),
                        },
                    );
                }
            }
            for meta in metas {
                edit.added.push(AddedTable {
                    level: self.dst as u32,
                    slot,
                    format: FORMAT_SEMISORTED,
                    meta,
                });
            }
        }
        let gone = edit.removed.first().copied();
        self.res
            .keep_until(move |v| gone.is_some_and(|f| !v.has_file(f)) || gone.is_none());
        Ok(edit)
    }
}

/// Rebuilds the missing filter of level `level` from its sub-levels' keys.
pub struct RebuildJob {
    pub(super) level: usize,
    /// The level's sub-levels, newest first.
    pub(super) subs: Vec<Arc<Sub>>,
    /// Where the versions holding exactly these sub-levels look for a rebuilt filter.
    pub(super) target: Arc<std::sync::OnceLock<Arc<MultiLevelCuckoo>>>,
    pub(super) shared: Arc<Shared>,
    pub(super) _res: Reservation,
}

impl Job for RebuildJob {
    fn run(&mut self, ctx: &JobCtx<'_>) -> Result<KsEdit> {
        let n = self.subs.len();
        let keys: u64 = self.subs.iter().map(|s| s.entries()).sum();
        let stepped = self.shared.plan_of(self.level).stepped;
        // Segments of the incremental shape: `SEGMENTS_PER_SUBLEVEL` per sub-level (up to the
        // fingerprints' reserve), all the level's entries spread over them.
        let segments = u32::try_from(n)
            .unwrap_or(u32::MAX)
            .saturating_mul(super::SEGMENTS_PER_SUBLEVEL);
        let mut f = super::new_filter(
            ctx,
            self.shared.prefix_len,
            super::filter_params(ctx.opts, keys as usize, stepped, segments),
        )?;
        if n <= super::max_ids(&ctx.opts.semisorted, stepped) {
            f.ensure_ids(n)?;
        }
        let mut last: Vec<u8> = Vec::new();
        let mut first = true;
        // The first version of a key in the merged scan is its newest: its sub-level's id.
        let scan = Merged::new(&self.subs, &self.shared).and_then(|m| {
            m.for_each(|(ph, sh), e, rank| {
                let uk = key::user_key(&e.ikey);
                if !first && last.as_slice() == uk {
                    return Ok(());
                }
                first = false;
                last.clear();
                last.extend_from_slice(uk);
                match u8::try_from(n - 1 - rank) {
                    Ok(id) if id < f.id_capacity() => {
                        f.insert_hashed(split_hash(ph, sh), uk, id, Prior::Absent)
                    }
                    _ => Err(Error::InvalidArgument(format!(
                        "level {} has {n} sub-levels, more than its filter has ids",
                        self.level
                    ))),
                }
            })
        });
        // A level past its filter's ids (the plan changed, or merges outran the stop) keeps
        // no filter until its next merge.
        // A damaged table: the filter stays missing (lookups probe every sub-level, and the
        // damaged block is `Corruption` to the read that needs it, as on other layouts) rather
        // than the database turning read-only for an optional structure. Too many sub-levels
        // for the filter's ids: missing until the level's next merge. Neither is retried
        // until the level changes.
        if let Err(Error::Corruption { .. } | Error::InvalidArgument(_)) = scan {
            if let Some(newest) = self.subs.first() {
                self.shared
                    .rebuild_failed
                    .lock()
                    .insert(self.level, newest.slot);
            }
            return Ok(KsEdit::default());
        }
        scan?;
        // Every version in which the level still has exactly these sub-levels shares the
        // slot: they all see the filter now; a version that changed the level has its own.
        let _ = self.target.set(Arc::new(f));
        if let Some(c) = self.shared.rebuilds.get(self.level) {
            c.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(KsEdit::default())
    }
}
