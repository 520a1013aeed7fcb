//! Internal iterators over internal keys: the trait every source implements, the memtable
//! iterator, and the merging iterator that combines sources in internal-key order in either
//! direction.

use std::ops::Bound;
use std::sync::Arc;

use crate::error::Result;
use crate::key::{cmp_ikey, InternalKey};
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

#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    Forward,
    Reverse,
}

/// Merges several sources; with equal keys (which cannot happen for distinct sequence numbers)
/// the earlier child wins.
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

    fn find_smallest(&mut self) {
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
        self.find_smallest();
        Ok(())
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
        self.find_smallest();
        Ok(())
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
        self.find_smallest();
        Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::{make_ikey, ValueKind};

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
