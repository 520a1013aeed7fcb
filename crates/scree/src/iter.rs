//! Internal iterators over internal keys: the trait every source implements, the memtable
//! iterator, the merging iterator that combines sources in internal-key order in either
//! direction, the lazy concatenation of a sorted run's parts (a level's tables, a
//! fragmented level's guards), and the bound of a source to a range of user keys (one part of
//! a compaction split by key).

use std::ops::Bound;
use std::sync::Arc;

use crate::error::Result;
use crate::key::{cmp_ikey, make_ikey, InternalKey, ValueKind, MAX_SEQ};
use crate::memtable::Memtable;

/// A bidirectional cursor over internal keys in [`cmp_ikey`] order.
pub trait InternalIter: Send {
    /// Whether the cursor is on an entry.
    fn valid(&self) -> bool;
    /// Internal key of the current entry (only when valid).
    fn key(&self) -> &[u8];
    /// Value of the current entry (only when valid).
    fn value(&self) -> &[u8];
    /// Moves to the first entry.
    fn seek_to_first(&mut self) -> Result<()>;
    /// Moves to the last entry.
    fn seek_to_last(&mut self) -> Result<()>;
    /// Moves to the first entry >= `ikey`.
    fn seek(&mut self, ikey: &[u8]) -> Result<()>;
    /// Moves to the last entry <= `ikey`.
    fn seek_for_prev(&mut self, ikey: &[u8]) -> Result<()>;
    /// Advances.
    fn next(&mut self) -> Result<()>;
    /// Steps back.
    fn prev(&mut self) -> Result<()>;
    /// Whether the cursor stands before an entry it has not read yet: it is valid, its `key`
    /// is only a lower bound of that entry's key (nothing it holds sorts before it) and its
    /// `value` is not an entry's. Only a lazy [`Concat`] that moved forward onto a part it has
    /// not opened is left so; a [`MergingIter`] settles such a child before it makes it
    /// current, so a child whose next entry sorts after another child's is never read.
    fn is_bound(&self) -> bool {
        false
    }
    /// Reads what a bound stands for ([`InternalIter::is_bound`]): afterwards the cursor is on
    /// an entry, invalid, or a bound again further on (the part it opened was empty).
    fn settle(&mut self) -> Result<()> {
        Ok(())
    }
}

/// Iterates a memtable. The iterator owns its position without borrowing the map: each
/// search copies the next entries in the current direction into one reusable buffer (no
/// allocation per entry), so `next` and `prev` cost one search per batch instead of one per
/// step.
pub struct MemIter {
    mem: Arc<Memtable>,
    /// Keys and values of the batch, back to back.
    bytes: Vec<u8>,
    /// The batch in the direction of travel: (key offset, key length, value length) into
    /// `bytes`, the value right after its key.
    entries: Vec<(usize, usize, usize)>,
    /// The current entry's index in `entries` (invalid when past the end).
    pos: usize,
    forward: bool,
    /// Entries to copy at the next search: a few after a seek (short scans are common),
    /// doubling while the scan goes on.
    batch: usize,
}

/// Entries copied by the first search after a seek, and the most copied at once. Each entry's
/// value is a cache miss in the arena, and a memtable holds only part of the keys a scan
/// visits, so the first batch is small (16 measured slower than 4 for seek + 10 nexts).
const MEM_BATCH: (usize, usize) = (4, 64);

impl MemIter {
    /// An unpositioned iterator.
    pub fn new(mem: Arc<Memtable>) -> Self {
        MemIter {
            mem,
            bytes: Vec::new(),
            entries: Vec::new(),
            pos: 0,
            forward: true,
            batch: MEM_BATCH.0,
        }
    }

    fn fill(&mut self, bound: Bound<&InternalKey>, forward: bool) {
        self.bytes.clear();
        self.entries.clear();
        let (bytes, entries) = (&mut self.bytes, &mut self.entries);
        self.mem.visit_run(bound, forward, self.batch, |k, v| {
            entries.push((bytes.len(), k.len(), v.len()));
            bytes.extend_from_slice(k);
            bytes.extend_from_slice(v);
        });
        self.pos = 0;
        self.forward = forward;
        self.batch = (self.batch * 2).min(MEM_BATCH.1);
    }

    /// The current entry: (key, value).
    fn entry(&self) -> Option<(&[u8], &[u8])> {
        let &(at, klen, vlen) = self.entries.get(self.pos)?;
        let key = self.bytes.get(at..at + klen)?;
        let value = self.bytes.get(at + klen..at + klen + vlen)?;
        Some((key, value))
    }

    /// Moves one entry in direction `forward`, searching again past the current key when the
    /// batch is used up or was copied in the other direction.
    fn step(&mut self, forward: bool) {
        let Some((k, _)) = self.entry() else {
            return;
        };
        if self.forward == forward && self.pos + 1 < self.entries.len() {
            self.pos += 1;
            return;
        }
        let k = InternalKey::from_slice(k);
        self.fill(Bound::Excluded(&k), forward);
    }
}

impl InternalIter for MemIter {
    fn valid(&self) -> bool {
        self.pos < self.entries.len()
    }
    fn key(&self) -> &[u8] {
        self.entry().map(|e| e.0).unwrap_or_default()
    }
    fn value(&self) -> &[u8] {
        self.entry().map(|e| e.1).unwrap_or_default()
    }
    fn seek_to_first(&mut self) -> Result<()> {
        self.batch = MEM_BATCH.0;
        self.fill(Bound::Unbounded, true);
        Ok(())
    }
    fn seek_to_last(&mut self) -> Result<()> {
        self.batch = MEM_BATCH.0;
        self.fill(Bound::Unbounded, false);
        Ok(())
    }
    fn seek(&mut self, ikey: &[u8]) -> Result<()> {
        let k = InternalKey::from_slice(ikey);
        self.batch = MEM_BATCH.0;
        self.fill(Bound::Included(&k), true);
        Ok(())
    }
    fn seek_for_prev(&mut self, ikey: &[u8]) -> Result<()> {
        let k = InternalKey::from_slice(ikey);
        self.batch = MEM_BATCH.0;
        self.fill(Bound::Included(&k), false);
        Ok(())
    }
    fn next(&mut self) -> Result<()> {
        self.step(true);
        Ok(())
    }
    fn prev(&mut self) -> Result<()> {
        self.step(false);
        Ok(())
    }
}

/// Iterates entries held in memory, sorted by [`cmp_ikey`] (a `semisorted` prefix group of
/// one sub-level, whose table holds it in hash order).
pub struct VecIter {
    entries: Vec<(Vec<u8>, Vec<u8>)>,
    /// Position; `entries.len()` when not valid.
    pos: usize,
}

impl VecIter {
    /// Iterates `entries`, which must be sorted by [`cmp_ikey`].
    pub fn new(entries: Vec<(Vec<u8>, Vec<u8>)>) -> Self {
        let pos = entries.len();
        VecIter { entries, pos }
    }
}

impl InternalIter for VecIter {
    fn valid(&self) -> bool {
        self.pos < self.entries.len()
    }
    fn key(&self) -> &[u8] {
        self.entries.get(self.pos).map_or(&[], |e| &e.0)
    }
    fn value(&self) -> &[u8] {
        self.entries.get(self.pos).map_or(&[], |e| &e.1)
    }
    fn seek_to_first(&mut self) -> Result<()> {
        self.pos = 0;
        Ok(())
    }
    fn seek_to_last(&mut self) -> Result<()> {
        self.pos = self
            .entries
            .len()
            .checked_sub(1)
            .unwrap_or(self.entries.len());
        Ok(())
    }
    fn seek(&mut self, ikey: &[u8]) -> Result<()> {
        self.pos = self
            .entries
            .partition_point(|e| cmp_ikey(&e.0, ikey) == std::cmp::Ordering::Less);
        Ok(())
    }
    fn seek_for_prev(&mut self, ikey: &[u8]) -> Result<()> {
        let n = self
            .entries
            .partition_point(|e| cmp_ikey(&e.0, ikey) != std::cmp::Ordering::Greater);
        self.pos = n.checked_sub(1).unwrap_or(self.entries.len());
        Ok(())
    }
    fn next(&mut self) -> Result<()> {
        if self.valid() {
            self.pos += 1;
        }
        Ok(())
    }
    fn prev(&mut self) -> Result<()> {
        self.pos = if self.valid() && self.pos > 0 {
            self.pos - 1
        } else {
            self.entries.len()
        };
        Ok(())
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    Forward,
    Reverse,
}

/// Merges several sources; with equal keys (which cannot happen for distinct sequence numbers)
/// the earlier child wins. Going forward, a child that is only a bound
/// ([`InternalIter::is_bound`]) is settled when it would become the current child, so its part
/// is read only when its first entry may be the next one out.
pub struct MergingIter {
    children: Vec<Box<dyn InternalIter>>,
    current: Option<usize>,
    dir: Direction,
}

impl MergingIter {
    /// Merges `children` (unpositioned).
    pub fn new(children: Vec<Box<dyn InternalIter>>) -> Self {
        MergingIter {
            children,
            current: None,
            dir: Direction::Forward,
        }
    }

    /// Makes the child with the smallest key current, settling it first while it is only a
    /// bound (a bound is ≤ every key behind it, so a child whose bound is not the smallest
    /// cannot hold the next entry).
    fn find_smallest(&mut self) -> Result<()> {
        loop {
            // The best child so far is kept as a reference (no indexing).
            let mut best: Option<(usize, &dyn InternalIter)> = None;
            for (i, c) in self.children.iter().enumerate() {
                if !c.valid() {
                    continue;
                }
                best = match best {
                    Some((b, bc)) if cmp_ikey(bc.key(), c.key()).is_le() => Some((b, bc)),
                    _ => Some((i, c.as_ref())),
                };
            }
            self.current = best.map(|(i, _)| i);
            match best {
                Some((i, c)) if c.is_bound() => {
                    if let Some(c) = self.children.get_mut(i) {
                        c.settle()?;
                    }
                }
                _ => return Ok(()),
            }
        }
    }

    fn find_largest(&mut self) {
        let mut best: Option<(usize, &dyn InternalIter)> = None;
        for (i, c) in self.children.iter().enumerate() {
            if !c.valid() {
                continue;
            }
            best = match best {
                Some((b, bc)) if cmp_ikey(bc.key(), c.key()).is_ge() => Some((b, bc)),
                _ => Some((i, c.as_ref())),
            };
        }
        self.current = best.map(|(i, _)| i);
    }

    fn cur(&self) -> Option<&dyn InternalIter> {
        self.current
            .and_then(|i| self.children.get(i))
            .map(|b| b.as_ref())
    }
}

#[allow(clippy::indexing_slicing)] // indices come from enumerate over the same vector
impl InternalIter for MergingIter {
    fn valid(&self) -> bool {
        self.cur().is_some_and(|c| c.valid())
    }
    fn key(&self) -> &[u8] {
        self.cur().map(|c| c.key()).unwrap_or_default()
    }
    fn value(&self) -> &[u8] {
        self.cur().map(|c| c.value()).unwrap_or_default()
    }
    fn seek_to_first(&mut self) -> Result<()> {
        for c in &mut self.children {
            c.seek_to_first()?;
        }
        self.dir = Direction::Forward;
        self.find_smallest()
    }
    fn seek_to_last(&mut self) -> Result<()> {
        for c in &mut self.children {
            c.seek_to_last()?;
        }
        self.dir = Direction::Reverse;
        self.find_largest();
        Ok(())
    }
    fn seek(&mut self, ikey: &[u8]) -> Result<()> {
        for c in &mut self.children {
            c.seek(ikey)?;
        }
        self.dir = Direction::Forward;
        self.find_smallest()
    }
    fn seek_for_prev(&mut self, ikey: &[u8]) -> Result<()> {
        for c in &mut self.children {
            c.seek_for_prev(ikey)?;
        }
        self.dir = Direction::Reverse;
        self.find_largest();
        Ok(())
    }
    fn next(&mut self) -> Result<()> {
        let Some(cur) = self.current else {
            return Ok(());
        };
        if self.dir == Direction::Reverse {
            // Put every other child just after the current key.
            let k = self.children[cur].key().to_vec();
            for (i, c) in self.children.iter_mut().enumerate() {
                if i == cur {
                    continue;
                }
                c.seek(&k)?;
                if c.valid() && cmp_ikey(c.key(), &k).is_eq() {
                    c.next()?;
                }
            }
            self.dir = Direction::Forward;
        }
        self.children[cur].next()?;
        self.find_smallest()
    }
    fn prev(&mut self) -> Result<()> {
        let Some(cur) = self.current else {
            return Ok(());
        };
        if self.dir == Direction::Forward {
            let k = self.children[cur].key().to_vec();
            for (i, c) in self.children.iter_mut().enumerate() {
                if i == cur {
                    continue;
                }
                c.seek_for_prev(&k)?;
                if c.valid() && cmp_ikey(c.key(), &k).is_eq() {
                    c.prev()?;
                }
            }
            self.dir = Direction::Reverse;
        }
        self.children[cur].prev()?;
        self.find_largest();
        Ok(())
    }
}

/// Limits an iterator to the user keys `[lo, hi)` (a bound of `None` is open): the inputs of
/// one part of a compaction split by key (a `fragmented` child guard, a `leveled`
/// sub-compaction). Every version of a user key falls in the same part.
pub struct BoundedIter<I> {
    inner: I,
    lo: Option<Arc<[u8]>>,
    hi: Option<Arc<[u8]>>,
}

impl<I: InternalIter> BoundedIter<I> {
    /// `inner` limited to `[lo, hi)`.
    pub fn new(inner: I, lo: Option<Arc<[u8]>>, hi: Option<Arc<[u8]>>) -> Self {
        BoundedIter { inner, lo, hi }
    }
    fn lo_ikey(&self) -> Option<Vec<u8>> {
        self.lo
            .as_deref()
            .map(|l| make_ikey(l, MAX_SEQ, ValueKind::Put))
    }
}

impl<I: InternalIter> InternalIter for BoundedIter<I> {
    fn valid(&self) -> bool {
        if !self.inner.valid() {
            return false;
        }
        let uk = crate::key::user_key(self.inner.key());
        self.lo.as_deref().is_none_or(|l| uk >= l) && self.hi.as_deref().is_none_or(|h| uk < h)
    }
    fn key(&self) -> &[u8] {
        self.inner.key()
    }
    fn value(&self) -> &[u8] {
        self.inner.value()
    }
    fn seek_to_first(&mut self) -> Result<()> {
        match self.lo_ikey() {
            Some(k) => self.inner.seek(&k),
            None => self.inner.seek_to_first(),
        }
    }
    fn seek_to_last(&mut self) -> Result<()> {
        match self.hi.as_deref() {
            Some(h) => {
                self.inner.seek(&make_ikey(h, MAX_SEQ, ValueKind::Put))?;
                if self.inner.valid() {
                    self.inner.prev()
                } else {
                    self.inner.seek_to_last()
                }
            }
            None => self.inner.seek_to_last(),
        }
    }
    fn seek(&mut self, ikey: &[u8]) -> Result<()> {
        match self.lo_ikey() {
            Some(l) if cmp_ikey(ikey, &l).is_lt() => self.inner.seek(&l),
            _ => self.inner.seek(ikey),
        }
    }
    fn seek_for_prev(&mut self, ikey: &[u8]) -> Result<()> {
        self.inner.seek_for_prev(ikey)
    }
    fn next(&mut self) -> Result<()> {
        self.inner.next()
    }
    fn prev(&mut self) -> Result<()> {
        self.inner.prev()
    }
}

/// The parts of a sorted run, in key order and not overlapping: what [`Concat`] walks.
pub trait RunParts: Send {
    /// A part's cursor.
    type Iter: InternalIter;
    /// Number of parts.
    fn count(&self) -> usize;
    /// Opens part `idx` (< `count`), unpositioned.
    fn open(&self, idx: usize) -> Result<Self::Iter>;
    /// The part a forward seek to `ikey` starts in (`count` when past the last).
    fn seek_part(&self, ikey: &[u8]) -> usize;
    /// The part a backward seek to `ikey` starts in (`None` when before the first).
    fn seek_for_prev_part(&self, ikey: &[u8]) -> Option<usize>;
    /// An internal key ≤ every entry of part `idx`, known without reading it (its smallest
    /// key from metadata), for a lazy [`Concat`]; `None` (the default) when there is none,
    /// and the part is opened when the cursor reaches it.
    fn first_key(&self, _idx: usize) -> Option<&[u8]> {
        None
    }
}

/// Iterates a sorted run one part at a time, each part opened only when the cursor reaches
/// it; an exhausted part hands over to its neighbour in the direction of travel. A lazy one
/// ([`Concat::lazy`]), moving forward past the end of a part, does not open the next: it
/// stands before it as a bound, the part's first key from [`RunParts::first_key`]
/// ([`InternalIter::is_bound`]), and opens it when a [`MergingIter`] settles it. A seek that
/// lands in a key range no part holds (a `lightweight` level's emptied routing ranges) then
/// reads nothing from this run unless the scan reaches the next part.
pub struct Concat<P: RunParts> {
    parts: P,
    idx: usize,
    cur: Option<P::Iter>,
    /// Whether to stand before the next part as a bound instead of opening it.
    lazy: bool,
    /// Standing before part `idx`, not opened (`cur` is `None`); its key is the part's
    /// `first_key`.
    bound: bool,
}

impl<P: RunParts> Concat<P> {
    /// A cursor over `parts`, not positioned.
    pub fn over(parts: P) -> Self {
        Concat {
            parts,
            idx: 0,
            cur: None,
            lazy: false,
            bound: false,
        }
    }

    /// [`Concat::over`], lazy: only for a child of a [`MergingIter`], which settles it (a
    /// consumer that does not know bounds would take a bound's key for an entry's).
    pub fn lazy(parts: P) -> Self {
        Concat {
            lazy: true,
            ..Self::over(parts)
        }
    }

    /// The run's parts.
    pub fn parts(&self) -> &P {
        &self.parts
    }

    /// Makes `iter`, already positioned, the cursor of part `idx`, then moves forward past
    /// exhausted parts (a seek prepared elsewhere, e.g. on a pool).
    pub fn install(&mut self, idx: usize, iter: P::Iter) -> Result<()> {
        self.idx = idx;
        self.cur = Some(iter);
        self.bound = false;
        self.forward_fix()
    }

    /// Opens part `idx` and positions it with `position`; `false` when there is no such part.
    fn enter(
        &mut self,
        idx: usize,
        position: impl FnOnce(&mut P::Iter) -> Result<()>,
    ) -> Result<bool> {
        if idx >= self.parts.count() {
            self.cur = None;
            return Ok(false);
        }
        let mut it = self.parts.open(idx)?;
        position(&mut it)?;
        self.idx = idx;
        self.cur = Some(it);
        Ok(true)
    }

    fn forward_fix(&mut self) -> Result<()> {
        while self.cur.as_ref().is_some_and(|c| !c.valid()) {
            let next = self.idx + 1;
            if self.lazy && next < self.parts.count() && self.parts.first_key(next).is_some() {
                self.cur = None;
                self.idx = next;
                self.bound = true;
                return Ok(());
            }
            if !self.enter(next, |c| c.seek_to_first())? {
                return Ok(());
            }
        }
        Ok(())
    }

    /// Opens the part it stands before as a bound, at its first entry; past an empty part it
    /// stands before the next as a bound again, unless `fully` (then it ends on an entry or
    /// past the last part).
    fn settle_bound(&mut self, fully: bool) -> Result<()> {
        while self.bound {
            self.bound = false;
            self.enter(self.idx, |c| c.seek_to_first())?;
            self.forward_fix()?;
            if !fully {
                break;
            }
        }
        Ok(())
    }

    fn backward_fix(&mut self) -> Result<()> {
        while self.cur.as_ref().is_some_and(|c| !c.valid()) {
            if self.idx == 0 {
                self.cur = None;
                return Ok(());
            }
            self.enter(self.idx - 1, |c| c.seek_to_last())?;
        }
        Ok(())
    }
}

impl<P: RunParts> InternalIter for Concat<P> {
    fn valid(&self) -> bool {
        self.bound || self.cur.as_ref().is_some_and(|c| c.valid())
    }
    fn key(&self) -> &[u8] {
        if self.bound {
            return self.parts.first_key(self.idx).unwrap_or_default();
        }
        self.cur.as_ref().map(|c| c.key()).unwrap_or_default()
    }
    fn value(&self) -> &[u8] {
        self.cur.as_ref().map(|c| c.value()).unwrap_or_default()
    }
    fn is_bound(&self) -> bool {
        self.bound
    }
    fn settle(&mut self) -> Result<()> {
        self.settle_bound(false)
    }
    fn seek_to_first(&mut self) -> Result<()> {
        self.bound = false;
        self.enter(0, |c| c.seek_to_first())?;
        self.forward_fix()
    }
    fn seek_to_last(&mut self) -> Result<()> {
        self.bound = false;
        match self.parts.count().checked_sub(1) {
            Some(last) => {
                self.enter(last, |c| c.seek_to_last())?;
                self.backward_fix()
            }
            None => {
                self.cur = None;
                Ok(())
            }
        }
    }
    fn seek(&mut self, ikey: &[u8]) -> Result<()> {
        self.bound = false;
        let idx = self.parts.seek_part(ikey);
        self.enter(idx, |c| c.seek(ikey))?;
        self.forward_fix()
    }
    fn seek_for_prev(&mut self, ikey: &[u8]) -> Result<()> {
        self.bound = false;
        match self.parts.seek_for_prev_part(ikey) {
            Some(idx) => {
                self.enter(idx, |c| c.seek_for_prev(ikey))?;
                self.backward_fix()
            }
            None => {
                self.cur = None;
                Ok(())
            }
        }
    }
    fn next(&mut self) -> Result<()> {
        // A bound's entry is the part's first: read it, then step past it.
        self.settle_bound(true)?;
        if let Some(c) = self.cur.as_mut() {
            c.next()?;
        }
        self.forward_fix()
    }
    fn prev(&mut self) -> Result<()> {
        self.settle_bound(true)?;
        if let Some(c) = self.cur.as_mut() {
            c.prev()?;
        }
        self.backward_fix()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::{make_ikey, ValueKind};
    use std::sync::atomic::{AtomicUsize, Ordering as AtOrd};

    /// Parts of a run held in memory, counting the parts opened.
    struct VecParts {
        parts: Vec<Entries>,
        opened: Arc<AtomicUsize>,
    }

    impl RunParts for VecParts {
        type Iter = VecIter;
        fn count(&self) -> usize {
            self.parts.len()
        }
        fn open(&self, idx: usize) -> Result<VecIter> {
            self.opened.fetch_add(1, AtOrd::Relaxed);
            Ok(VecIter::new(
                self.parts.get(idx).cloned().unwrap_or_default(),
            ))
        }
        fn seek_part(&self, ikey: &[u8]) -> usize {
            // The last part starting at or before the key (empty parts start nowhere).
            let u = crate::key::user_key(ikey);
            let mut at = 0;
            for (i, p) in self.parts.iter().enumerate() {
                if p.first().is_some_and(|e| crate::key::user_key(&e.0) <= u) {
                    at = i;
                }
            }
            at
        }
        fn seek_for_prev_part(&self, ikey: &[u8]) -> Option<usize> {
            Some(self.seek_part(ikey))
        }
        fn first_key(&self, idx: usize) -> Option<&[u8]> {
            self.parts.get(idx)?.first().map(|e| e.0.as_slice())
        }
    }

    /// Entries (internal key, value) in key order.
    type Entries = Vec<(Vec<u8>, Vec<u8>)>;

    fn entry(k: u32, seq: u64) -> (Vec<u8>, Vec<u8>) {
        (
            make_ikey(format!("{k:05}").as_bytes(), seq, ValueKind::Put),
            format!("v{k}.{seq}").into_bytes(),
        )
    }

    /// A run of parts with wide gaps between them (keys 0..2000: a part every 400 keys, some
    /// empty) under a merge with a dense source, as a `lightweight` level under level 0.
    fn sources(lazy: bool) -> (MergingIter, Entries, Arc<AtomicUsize>) {
        let mut model = Vec::new();
        let mut parts = Vec::new();
        for p in 0..5u32 {
            let mut part = Vec::new();
            if p != 2 {
                for k in (p * 400..p * 400 + 60).step_by(3) {
                    part.push(entry(k, 1));
                }
            }
            model.extend(part.iter().cloned());
            parts.push(part);
            // An empty part between two.
            parts.push(Vec::new());
        }
        let dense: Vec<_> = (0..2000u32).step_by(7).map(|k| entry(k, 2)).collect();
        model.extend(dense.iter().cloned());
        model.sort_by(|a, b| cmp_ikey(&a.0, &b.0));
        let opened = Arc::new(AtomicUsize::new(0));
        let run = VecParts {
            parts,
            opened: opened.clone(),
        };
        let concat: Box<dyn InternalIter> = if lazy {
            Box::new(Concat::lazy(run))
        } else {
            Box::new(Concat::over(run))
        };
        let it = MergingIter::new(vec![Box::new(VecIter::new(dense)), concat]);
        (it, model, opened)
    }

    /// The position of a cursor: its entry, or `None` when invalid.
    fn at(it: &MergingIter) -> Option<(Vec<u8>, Vec<u8>)> {
        it.valid().then(|| (it.key().to_vec(), it.value().to_vec()))
    }

    /// A lazy run under a merge walks exactly as an eager one (and as the sorted model) for
    /// random seeks in both directions followed by random `next`/`prev` steps, and opens
    /// fewer parts: a seek into a gap followed by a few steps opens no part beyond the one
    /// it lands in.
    #[test]
    fn a_lazy_run_walks_as_an_eager_one_and_opens_only_the_parts_it_reaches() {
        let (mut lazy, model, lazy_opened) = sources(true);
        let (mut eager, _, eager_opened) = sources(false);
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        for round in 0..2000 {
            let target = make_ikey(
                format!("{:05}", next(2100)).as_bytes(),
                next(4),
                ValueKind::Put,
            );
            let mut pos = match next(4) {
                0 => {
                    lazy.seek(&target).unwrap();
                    eager.seek(&target).unwrap();
                    model.partition_point(|e| cmp_ikey(&e.0, &target).is_lt())
                }
                1 => {
                    lazy.seek_for_prev(&target).unwrap();
                    eager.seek_for_prev(&target).unwrap();
                    model
                        .partition_point(|e| cmp_ikey(&e.0, &target).is_le())
                        .wrapping_sub(1)
                }
                2 => {
                    lazy.seek_to_first().unwrap();
                    eager.seek_to_first().unwrap();
                    0
                }
                _ => {
                    lazy.seek_to_last().unwrap();
                    eager.seek_to_last().unwrap();
                    model.len() - 1
                }
            };
            for step in 0..next(30) {
                let want = model.get(pos).cloned();
                assert_eq!(at(&lazy), want, "round {round} step {step}: lazy");
                assert_eq!(at(&eager), want, "round {round} step {step}: eager");
                if want.is_none() {
                    break;
                }
                if next(3) == 0 {
                    lazy.prev().unwrap();
                    eager.prev().unwrap();
                    pos = pos.wrapping_sub(1);
                } else {
                    lazy.next().unwrap();
                    eager.next().unwrap();
                    pos += 1;
                }
            }
        }
        let (l, e) = (
            lazy_opened.load(AtOrd::Relaxed),
            eager_opened.load(AtOrd::Relaxed),
        );
        assert!(l < e, "lazy opened {l} parts, eager {e}");
        // A seek into the gap after part 0 and ten steps: only the part it lands in and the
        // empty one after it (no first key to stand before) are opened.
        let (mut it, _, opened) = sources(true);
        it.seek(&make_ikey(b"00100", MAX_SEQ, ValueKind::Put))
            .unwrap();
        for _ in 0..10 {
            it.next().unwrap();
        }
        assert_eq!(crate::key::user_key(it.key()), b"00175");
        assert_eq!(opened.load(AtOrd::Relaxed), 2);
        // Reaching the next part opens it.
        while crate::key::user_key(it.key()) < b"00400".as_slice() {
            it.next().unwrap();
        }
        assert_eq!(it.value(), b"v400.1");
        assert_eq!(opened.load(AtOrd::Relaxed), 3);
    }

    #[test]
    fn merging_both_directions() {
        let a = Arc::new(Memtable::new(0, 0));
        let b = Arc::new(Memtable::new(0, 0));
        for i in 0..20u32 {
            let m = if i % 2 == 0 { &a } else { &b };
            m.insert(
                format!("{i:02}").as_bytes(),
                u64::from(i) + 1,
                ValueKind::Put,
                b"v",
            );
        }
        let mut it = MergingIter::new(vec![
            Box::new(MemIter::new(a.clone())),
            Box::new(MemIter::new(b.clone())),
        ]);
        it.seek_to_first().unwrap();
        let mut n = 0;
        while it.valid() {
            n += 1;
            it.next().unwrap();
        }
        assert_eq!(n, 20);
        it.seek(&make_ikey(b"10", u64::MAX >> 8, ValueKind::Put))
            .unwrap();
        assert_eq!(crate::key::user_key(it.key()), b"10");
        it.prev().unwrap();
        assert_eq!(crate::key::user_key(it.key()), b"09");
        it.next().unwrap();
        assert_eq!(crate::key::user_key(it.key()), b"10");
        it.next().unwrap();
        assert_eq!(crate::key::user_key(it.key()), b"11");
    }
}
