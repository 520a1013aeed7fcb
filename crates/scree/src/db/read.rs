//! The read path: a lookup or an iterator at a sequence number over the memtables, then the
//! layout's version (with parallel search when enabled).

use std::ops::Bound;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::error::Result;
use crate::iterator::{self, prefix_end, RangeIter, Value};
use crate::key::ValueKind;
use crate::memtable::{FirstLevel, Lookup, Memtable};

use super::{DbInner, Keyspace, KsCore};

impl Keyspace {
    /// Reads at `seq`, or (None) at the latest sequence number. The latest one is loaded after
    /// the super-version: a flush or compaction may drop a version that a newer version
    /// shadows once both are older than every snapshot, so a read at a sequence number loaded
    /// before the super-version could find only the newer version (invisible to it) and miss
    /// the key. Loaded after, every output in the super-version was made with a smallest
    /// snapshot at or below it (tests/concurrency.rs found this on `fragmented`).
    pub(super) fn get_at(&self, key: &[u8], seq: Option<u64>) -> Result<Option<Value>> {
        get_in(&self.h.inner, &self.core, key, seq)
    }

    /// Iterates at `seq`, or (None) at the latest sequence number, loaded after the
    /// super-version for the reason given at [`Keyspace::get_at`].
    /// A range scan at `seq` (or the latest), if the layout's key order serves one.
    pub(super) fn range_scan(
        &self,
        lo: Bound<Vec<u8>>,
        hi: Bound<Vec<u8>>,
        seq: Option<u64>,
    ) -> RangeIter {
        let (name, kind) = (&self.core.name, &self.core.kind);
        match kind.order().check_range(name, kind) {
            Ok(()) => self.range_at(lo, hi, None, seq),
            Err(e) => iterator::failed(e),
        }
    }

    /// A scan of the keys starting with `prefix` at `seq` (or the latest), if the layout's key
    /// order serves one of that length.
    pub(super) fn prefix_scan(&self, prefix: &[u8], seq: Option<u64>) -> RangeIter {
        let (name, kind) = (&self.core.name, &self.core.kind);
        match kind.order().check_prefix(name, kind, prefix) {
            Ok(()) => {
                let hi = prefix_end(prefix).map_or(Bound::Unbounded, Bound::Excluded);
                self.range_at(
                    Bound::Included(prefix.to_vec()),
                    hi,
                    Some(prefix.to_vec()),
                    seq,
                )
            }
            Err(e) => iterator::failed(e),
        }
    }

    /// A scan of `lo..hi`; `prefix`, for a prefix scan, lets the layout open only that group.
    fn range_at(
        &self,
        lo: Bound<Vec<u8>>,
        hi: Bound<Vec<u8>>,
        prefix: Option<Vec<u8>>,
        seq: Option<u64>,
    ) -> RangeIter {
        let sv = self.core.sv();
        let seq = seq.unwrap_or_else(|| self.h.inner.last_seq.load(Ordering::Acquire));
        let mems: Vec<Arc<Memtable>> = std::iter::once(sv.mem.clone())
            .chain(sv.imms.iter().cloned())
            .collect();
        RangeIter::new(
            iterator::sources_for(mems, sv.version.clone(), prefix),
            seq,
            lo,
            hi,
        )
        .holding(self.h.clone())
    }
}

/// [`Keyspace::get_at`] on the shared state alone (also what a [`super::WeakKeyspace`] reads
/// through, which holds no `DbHandle`).
pub(super) fn get_in(
    inner: &DbInner,
    core: &KsCore,
    key: &[u8],
    seq: Option<u64>,
) -> Result<Option<Value>> {
    Ok(lookup(inner, core, key, seq, false)?.0)
}

/// Where a non-blind write's key was found: the memtable the write will go to and what the
/// read learned about the key in the first level (see [`FirstLevel`]).
pub(super) type Placed = (Arc<Memtable>, FirstLevel);

/// The latest value of `key` for a non-blind write, with [`Placed`] when no memtable held the
/// key and the layout uses it.
pub(super) fn get_placed_in(
    inner: &DbInner,
    core: &KsCore,
    key: &[u8],
) -> Result<(Option<Value>, Option<Placed>)> {
    lookup(inner, core, key, None, true)
}

/// A point read at `seq` (or the latest): memtables newest first, then the layout's version
/// (through the parallel search pool when there is one and `placed` is not asked for).
fn lookup(
    inner: &DbInner,
    core: &KsCore,
    key: &[u8],
    seq: Option<u64>,
    placed: bool,
) -> Result<(Option<Value>, Option<Placed>)> {
    inner.stats.gets.fetch_add(1, Ordering::Relaxed);
    let sv = core.sv();
    let seq = seq.unwrap_or_else(|| inner.last_seq.load(Ordering::Acquire));
    let lk = crate::key::InternalKey::new(key, seq, ValueKind::Put);
    for m in std::iter::once(&sv.mem).chain(sv.imms.iter()) {
        match m.get_key(key, &lk) {
            Lookup::Value(v) => return Ok((Some(v), None)),
            Lookup::Deleted => return Ok((None, None)),
            Lookup::Absent => {}
        }
    }
    let (found, place) = match &inner.search_pool {
        _ if placed => sv.version.get_placed(key, seq)?,
        // Parallel search: the last level on a search thread, the levels above it here.
        Some(pool) => (pool.get(&sv.version, key, seq)?, None),
        None => (sv.version.get(key, seq)?, None),
    };
    // The lookup made a table due for a seek compaction (`leveled`): wake the background
    // threads now rather than at their next timed wake-up.
    if inner.tables.take_compaction_wanted() {
        inner.bg_cv.notify_all();
    }
    let place = place.map(|p| (sv.mem.clone(), p));
    match found {
        Lookup::Value(v) => Ok((Some(v), place)),
        _ => Ok((None, place)),
    }
}
