//! Iterators of the fragmented layout: a level iterator that concatenates guards (each guard a
//! merging iterator over its overlapping tables, opened only when reached), the seek counter
//! hook that feeds seek-based compaction, and the persistent pool that positions a guard's
//! tables in parallel.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::version::{Level, Shared};
use crate::error::{Error, Result};
use crate::iter::{Concat, InternalIter, MergingIter, RunParts};
use crate::key;
use crate::layout::parallel::WorkerPool;
use crate::table::TableIter;

/// Compaction bytes one seek is worth (seek-based compaction threshold per guard byte).
pub(crate) const SEEK_COST_BYTES: u64 = 16 * 1024;

/// A level's guards, in key order, as [`Concat`] parts: each part merges the guard's tables.
pub(crate) struct Guards(Arc<Level>);

impl RunParts for Guards {
    type Iter = MergingIter;
    fn count(&self) -> usize {
        self.0.guards.len()
    }
    fn open(&self, idx: usize) -> Result<MergingIter> {
        let g = self
            .0
            .guards
            .get(idx)
            .ok_or_else(|| Error::InvalidArgument(format!("no guard {idx} in the level")))?;
        let mut children: Vec<Box<dyn InternalIter>> = Vec::with_capacity(g.tables.len());
        for t in &g.tables {
            children.push(Box::new(t.iter(true)?));
        }
        Ok(MergingIter::new(children))
    }
    fn seek_part(&self, ikey: &[u8]) -> usize {
        self.0.guard_index(key::user_key(ikey))
    }
    fn seek_for_prev_part(&self, ikey: &[u8]) -> Option<usize> {
        // The sentinel guard covers every key below the first guard key.
        Some(self.0.guard_index(key::user_key(ikey)))
    }
}

/// Iterates one level: guards in key order, the tables of the current guard merged; seeks
/// count against their guard (seek-based compaction) and, with a pool, position a guard's
/// tables in parallel.
pub(crate) struct LevelIter {
    run: Concat<Guards>,
    level_no: usize,
    shared: Arc<Shared>,
    threshold: u64,
    pool: Option<Arc<WorkerPool>>,
}

impl LevelIter {
    pub(crate) fn new(
        level: Arc<Level>,
        level_no: usize,
        shared: Arc<Shared>,
        threshold: u64,
        pool: Option<Arc<WorkerPool>>,
    ) -> Self {
        LevelIter {
            run: Concat::over(Guards(level)),
            level_no,
            shared,
            threshold,
            pool,
        }
    }

    fn level(&self) -> &Level {
        &self.run.parts().0
    }

    /// The seek hook: a seek that has to merge several tables counts against the guard; at
    /// the threshold the guard is handed to the policy as a compaction candidate.
    fn count_seek(&self, idx: usize) {
        let Some(g) = self.level().guards.get(idx) else {
            return;
        };
        if self.threshold == 0 || g.tables.len() < 2 {
            return;
        }
        // A seek costs about as much as compacting 16 KiB (LevelDB's estimate), so a large
        // guard needs more seeks before rewriting it pays.
        let threshold = self.threshold.max(g.bytes / SEEK_COST_BYTES);
        let n = g.seeks.fetch_add(1, Ordering::Relaxed) + 1;
        if n % threshold == 0 {
            // Handed over again every `threshold` seeks until the guard is compacted (a busy
            // guard may be passed over once); the list is bounded.
            let mut hot = self.shared.hot.lock();
            if hot.len() < 1024 {
                hot.push((self.level_no, g.key.clone()));
            }
        }
    }

    /// Positions guard `idx`'s tables on the pool, then merges them; `None` when the guard
    /// has fewer than two tables (nothing to do in parallel).
    fn parallel_seek(
        &self,
        idx: usize,
        ikey: &[u8],
        pool: &WorkerPool,
    ) -> Result<Option<MergingIter>> {
        let Some(g) = self.level().guards.get(idx).filter(|g| g.tables.len() >= 2) else {
            return Ok(None);
        };
        let mut iters = Vec::with_capacity(g.tables.len());
        for t in &g.tables {
            iters.push(t.iter(true)?);
        }
        let positioned = pool.seek_all(iters, ikey)?;
        let children: Vec<Box<dyn InternalIter>> = positioned
            .into_iter()
            .map(|it| {
                Box::new(Preseeked {
                    inner: it,
                    at: Some(ikey.to_vec()),
                }) as Box<dyn InternalIter>
            })
            .collect();
        let mut m = MergingIter::new(children);
        // The children skip this seek: they are already there.
        m.seek(ikey)?;
        Ok(Some(m))
    }
}

impl InternalIter for LevelIter {
    fn valid(&self) -> bool {
        self.run.valid()
    }
    fn key(&self) -> &[u8] {
        self.run.key()
    }
    fn value(&self) -> &[u8] {
        self.run.value()
    }
    fn seek_to_first(&mut self) -> Result<()> {
        self.run.seek_to_first()
    }
    fn seek_to_last(&mut self) -> Result<()> {
        self.run.seek_to_last()
    }
    fn seek(&mut self, ikey: &[u8]) -> Result<()> {
        let idx = self.run.parts().seek_part(ikey);
        self.count_seek(idx);
        if let Some(pool) = self.pool.clone() {
            if let Some(m) = self.parallel_seek(idx, ikey, &pool)? {
                return self.run.install(idx, m);
            }
        }
        self.run.seek(ikey)
    }
    fn seek_for_prev(&mut self, ikey: &[u8]) -> Result<()> {
        self.run.seek_for_prev(ikey)
    }
    fn next(&mut self) -> Result<()> {
        self.run.next()
    }
    fn prev(&mut self) -> Result<()> {
        self.run.prev()
    }
}

/// A table cursor already positioned by the pool for one seek target: that seek is skipped.
struct Preseeked {
    inner: TableIter,
    at: Option<Vec<u8>>,
}

impl InternalIter for Preseeked {
    fn valid(&self) -> bool {
        self.inner.valid()
    }
    fn key(&self) -> &[u8] {
        self.inner.key()
    }
    fn value(&self) -> &[u8] {
        self.inner.value()
    }
    fn seek_to_first(&mut self) -> Result<()> {
        self.at = None;
        self.inner.seek_to_first()
    }
    fn seek_to_last(&mut self) -> Result<()> {
        self.at = None;
        self.inner.seek_to_last()
    }
    fn seek(&mut self, ikey: &[u8]) -> Result<()> {
        if self.at.take().as_deref() == Some(ikey) {
            return Ok(());
        }
        self.inner.seek(ikey)
    }
    fn seek_for_prev(&mut self, ikey: &[u8]) -> Result<()> {
        self.at = None;
        self.inner.seek_for_prev(ikey)
    }
    fn next(&mut self) -> Result<()> {
        self.at = None;
        self.inner.next()
    }
    fn prev(&mut self) -> Result<()> {
        self.at = None;
        self.inner.prev()
    }
}
