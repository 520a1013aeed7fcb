//! The user-facing range iterator: merges memtables and the layout's tables, hides versions
//! newer than the read's sequence number and deleted keys, and walks forward and backward
//! (two independent cursors that stop where they meet).

use std::ops::Bound;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::iter::{InternalIter, MemIter, MergingIter};
use crate::key::{self, make_ikey, ValueKind, MAX_SEQ};

/// A user key.
pub type Key = Vec<u8>;
/// A value.
pub type Value = Vec<u8>;

/// Builds the merged internal iterator of a read view.
pub(crate) type SourceFn = Arc<dyn Fn() -> Result<MergingIter> + Send + Sync>;

/// Forward and reverse iterator over a key range at one sequence number.
pub struct RangeIter {
    sources: SourceFn,
    seq: u64,
    lo: Bound<Vec<u8>>,
    hi: Bound<Vec<u8>>,
    front: Option<MergingIter>,
    back: Option<MergingIter>,
    last_front: Option<Vec<u8>>,
    last_back: Option<Vec<u8>>,
    done: bool,
    /// The database handle: an iterator keeps the database open, as a snapshot does. Without
    /// it the database could close and be reopened while the iterator still had tables to
    /// open, and the reopened database could delete them.
    _db: Option<Arc<dyn std::any::Any + Send + Sync>>,
}

impl std::fmt::Debug for RangeIter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RangeIter").field("seq", &self.seq).finish()
    }
}

pub(crate) fn sources_for(
    mems: Vec<Arc<crate::memtable::Memtable>>,
    version: Arc<dyn crate::layout::LayoutVersion>,
    prefix: Option<Vec<u8>>,
) -> SourceFn {
    Arc::new(move || {
        // The layout refuses first when it has no scans (its message says why).
        let mut tables: Vec<Box<dyn InternalIter>> = Vec::new();
        match &prefix {
            Some(p) => version.add_prefix_iters(p, &mut tables)?,
            None => version.add_iters(&mut tables)?,
        }
        let mut children: Vec<Box<dyn InternalIter>> = Vec::new();
        for m in &mems {
            if m.is_sorted() {
                children.push(Box::new(MemIter::new(m.clone())));
            } else if let Some(group) = prefix.as_deref().and_then(|p| m.prefix_group(p)) {
                // A prefix group's few entries, copied at the iterator's first use.
                children.push(Box::new(crate::iter::VecIter::new(group)));
            } else {
                return Err(Error::Unsupported(
                    "range scan over a hash-ordered memtable (this layout has no scans)".into(),
                ));
            }
        }
        children.extend(tables);
        Ok(MergingIter::new(children))
    })
}

impl RangeIter {
    pub(crate) fn new(sources: SourceFn, seq: u64, lo: Bound<Vec<u8>>, hi: Bound<Vec<u8>>) -> Self {
        RangeIter {
            sources,
            seq,
            lo,
            hi,
            front: None,
            back: None,
            last_front: None,
            last_back: None,
            done: false,
            _db: None,
        }
    }

    /// Keeps `db` (the database handle) alive as long as the iterator.
    pub(crate) fn holding(mut self, db: Arc<dyn std::any::Any + Send + Sync>) -> Self {
        self._db = Some(db);
        self
    }

    fn below_hi(&self, uk: &[u8]) -> bool {
        below(&self.hi, uk)
    }

    fn above_lo(&self, uk: &[u8]) -> bool {
        match &self.lo {
            Bound::Included(l) => uk >= l.as_slice(),
            Bound::Excluded(l) => uk > l.as_slice(),
            Bound::Unbounded => true,
        }
    }

    fn step_front(&mut self) -> Result<Option<(Key, Value)>> {
        if self.front.is_none() {
            let mut it = (self.sources)()?;
            match &self.lo {
                Bound::Included(l) => it.seek(&make_ikey(l, MAX_SEQ, ValueKind::Put))?,
                Bound::Excluded(l) => it.seek(&make_ikey(l, 0, ValueKind::Delete))?,
                Bound::Unbounded => it.seek_to_first()?,
            }
            self.front = Some(it);
        }
        let seq = self.seq;
        loop {
            let Some(it) = self.front.as_mut() else {
                return Ok(None);
            };
            if !it.valid() {
                return Ok(None);
            }
            let p = key::parse(it.key());
            // The bound first: versions newer than the read are skipped below, and a scan at an
            // old snapshot would otherwise walk every later key whose versions are all newer
            // (4,035 blocks read instead of 6 for a 10-key range).
            if !below(&self.hi, p.user_key) {
                return Ok(None);
            }
            if matches!(&self.lo, Bound::Excluded(l) if p.user_key == l.as_slice()) || p.seq > seq {
                it.next()?;
                continue;
            }
            let uk = p.user_key.to_vec();
            // First visible entry of this user key: the newest visible version.
            let kind = p.kind;
            let value = it.value().to_vec();
            // Skip the remaining versions of this key.
            it.next()?;
            while it.valid() && key::user_key(it.key()) == uk.as_slice() {
                it.next()?;
            }
            if !self.below_hi(&uk) {
                return Ok(None);
            }
            if kind == ValueKind::Put as u8 {
                return Ok(Some((uk, value)));
            }
        }
    }

    fn step_back(&mut self) -> Result<Option<(Key, Value)>> {
        if self.back.is_none() {
            let mut it = (self.sources)()?;
            match &self.hi {
                Bound::Included(h) => it.seek_for_prev(&make_ikey(h, 0, ValueKind::Delete))?,
                Bound::Excluded(h) => it.seek_for_prev(&make_ikey(h, MAX_SEQ, ValueKind::Put))?,
                Bound::Unbounded => it.seek_to_last()?,
            }
            self.back = Some(it);
        }
        let seq = self.seq;
        loop {
            let Some(it) = self.back.as_mut() else {
                return Ok(None);
            };
            if !it.valid() {
                return Ok(None);
            }
            let uk = key::user_key(it.key()).to_vec();
            if matches!(&self.hi, Bound::Excluded(h) if uk == *h) {
                it.prev()?;
                continue;
            }
            // Walk back over every version of `uk` (oldest first); the last visible one seen
            // is the newest visible version.
            let mut cand: Option<(u8, Vec<u8>)> = None;
            while it.valid() {
                let p = key::parse(it.key());
                if p.user_key != uk.as_slice() {
                    break;
                }
                if p.seq <= seq {
                    cand = Some((p.kind, it.value().to_vec()));
                }
                it.prev()?;
            }
            if !self.above_lo(&uk) {
                return Ok(None);
            }
            if let Some((k, v)) = cand {
                if k == ValueKind::Put as u8 {
                    return Ok(Some((uk, v)));
                }
            }
        }
    }
}

impl RangeIter {
    /// Turns one cursor step into an item, stopping where the two cursors meet.
    fn emit(
        &mut self,
        step: Result<Option<(Key, Value)>>,
        front: bool,
    ) -> Option<Result<(Key, Value)>> {
        match step {
            Ok(Some((k, v))) => {
                let crossed = if front {
                    self.last_back.as_ref().is_some_and(|b| k >= *b)
                } else {
                    self.last_front.as_ref().is_some_and(|f| k <= *f)
                };
                if crossed {
                    self.done = true;
                    return None;
                }
                let last = if front {
                    &mut self.last_front
                } else {
                    &mut self.last_back
                };
                // The buffer is reused: one allocation per direction, not one per item.
                let buf = last.get_or_insert_with(Vec::new);
                buf.clear();
                buf.extend_from_slice(&k);
                Some(Ok((k, v)))
            }
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

impl Iterator for RangeIter {
    type Item = Result<(Key, Value)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let step = self.step_front();
        self.emit(step, true)
    }
}

impl DoubleEndedIterator for RangeIter {
    fn next_back(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let step = self.step_back();
        self.emit(step, false)
    }
}

/// The smallest key greater than every key starting with `prefix` (None if there is none).
pub(crate) fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut p = prefix.to_vec();
    while let Some(last) = p.pop() {
        if last < 0xff {
            p.push(last + 1);
            return Some(p);
        }
    }
    None
}

/// An iterator that yields one error.
pub(crate) fn failed(e: Error) -> RangeIter {
    let msg = std::sync::Mutex::new(Some(e));
    let f: SourceFn = Arc::new(move || {
        Err(msg
            .lock()
            .ok()
            .and_then(|mut m| m.take())
            .unwrap_or(Error::Closed))
    });
    RangeIter::new(f, 0, Bound::Unbounded, Bound::Unbounded)
}

/// Whether `uk` is inside the upper bound `hi`.
fn below(hi: &Bound<Vec<u8>>, uk: &[u8]) -> bool {
    match hi {
        Bound::Included(h) => uk <= h.as_slice(),
        Bound::Excluded(h) => uk < h.as_slice(),
        Bound::Unbounded => true,
    }
}
