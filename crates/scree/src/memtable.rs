//! The memtable: a concurrent skiplist (crossbeam-skiplist) of internal keys with a byte budget.

use std::ops::Bound;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

use crossbeam_skiplist::SkipMap;

use crate::key::{self, InternalKey, ValueKind};

/// Result of a point lookup in one source (memtable or table).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// The newest visible version is a value.
    Value(Vec<u8>),
    /// The newest visible version is a tombstone.
    Deleted,
    /// This source holds no visible version.
    Absent,
}

/// One memtable generation.
pub struct Memtable {
    map: SkipMap<InternalKey, Vec<u8>>,
    bytes: AtomicUsize,
    /// Number of the WAL file that was current when this memtable was created.
    pub log_number: u64,
    max_seq: AtomicU64,
    /// Bloom filter over the user keys inserted (RocksDB's memtable whole-key filter): a get
    /// for a key the memtable never saw skips the skiplist search. Allocated on first insert.
    filter: OnceLock<Box<[AtomicU64]>>,
    filter_words: usize,
}

/// Probes per key in the memtable filter.
const FILTER_PROBES: u32 = 6;

/// Approximate per-entry overhead of the skiplist, counted against the budget.
const ENTRY_OVERHEAD: usize = 64;

impl Memtable {
    /// An empty memtable whose data is logged from `log_number` on, sized for a budget of
    /// `budget_bytes` (0: no key filter).
    pub fn new(log_number: u64, budget_bytes: usize) -> Self {
        // About 10 bits per entry of at least ENTRY_OVERHEAD bytes, in whole 64-bit words.
        let filter_words = (budget_bytes / ENTRY_OVERHEAD * 10)
            .div_ceil(64)
            .min(1 << 24);
        Memtable {
            map: SkipMap::new(),
            bytes: AtomicUsize::new(0),
            log_number,
            max_seq: AtomicU64::new(0),
            filter: OnceLock::new(),
            filter_words,
        }
    }

    fn filter_positions(&self, user_key: &[u8]) -> impl Iterator<Item = (usize, u64)> {
        let h = crate::filter::bloom::bloom_hash(user_key);
        let bits = (self.filter_words * 64) as u64;
        let delta = (h >> 32) | 1;
        (0..u64::from(FILTER_PROBES)).map(move |i| {
            let pos = h.wrapping_add(i.wrapping_mul(delta)) % bits.max(1);
            ((pos / 64) as usize, 1u64 << (pos % 64))
        })
    }

    fn filter_add(&self, user_key: &[u8]) {
        if self.filter_words == 0 {
            return;
        }
        let f = self
            .filter
            .get_or_init(|| (0..self.filter_words).map(|_| AtomicU64::new(0)).collect());
        for (w, bit) in self.filter_positions(user_key) {
            if let Some(word) = f.get(w) {
                word.fetch_or(bit, Ordering::Relaxed);
            }
        }
    }

    /// False only if `user_key` was never inserted.
    fn may_contain(&self, user_key: &[u8]) -> bool {
        if self.filter_words == 0 {
            return !self.map.is_empty();
        }
        let Some(f) = self.filter.get() else {
            return false;
        };
        self.filter_positions(user_key).all(|(w, bit)| {
            f.get(w)
                .is_some_and(|x| x.load(Ordering::Relaxed) & bit != 0)
        })
    }

    /// Inserts one entry.
    pub fn insert(&self, user_key: &[u8], seq: u64, kind: ValueKind, value: &[u8]) {
        let ik = InternalKey::new(user_key, seq, kind);
        self.bytes.fetch_add(
            user_key.len() + 8 + value.len() + ENTRY_OVERHEAD,
            Ordering::Relaxed,
        );
        self.max_seq.fetch_max(seq, Ordering::Relaxed);
        // The filter bit is set before the entry becomes visible in the map, so a reader that
        // can see the entry (its sequence number is published after this insert) also passes
        // the filter.
        self.filter_add(user_key);
        self.map.insert(ik, value.to_vec());
    }

    /// Approximate memory used.
    pub fn approximate_bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Whether the memtable holds no entry.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Largest sequence number inserted.
    pub fn max_seq(&self) -> u64 {
        self.max_seq.load(Ordering::Relaxed)
    }

    /// Newest version of `user_key` with seq <= `seq`.
    pub fn get(&self, user_key: &[u8], seq: u64) -> Lookup {
        self.get_key(user_key, &InternalKey::new(user_key, seq, ValueKind::Put))
    }

    /// Like [`Memtable::get`] with the lookup key (`user_key` at the read's sequence number)
    /// built once by the caller for every memtable it probes.
    pub fn get_key(&self, user_key: &[u8], lk: &InternalKey) -> Lookup {
        if !self.may_contain(user_key) {
            return Lookup::Absent;
        }
        let Some(e) = self.map.lower_bound(Bound::Included(lk)) else {
            return Lookup::Absent;
        };
        let p = key::parse(&e.key().0);
        if p.user_key != user_key {
            return Lookup::Absent;
        }
        match ValueKind::from_u8(p.kind) {
            Some(ValueKind::Put) => Lookup::Value(e.value().clone()),
            _ => Lookup::Deleted,
        }
    }

    /// Iterates entries in internal-key order.
    pub fn iter(&self) -> crossbeam_skiplist::map::Iter<'_, InternalKey, Vec<u8>> {
        self.map.iter()
    }

    /// The first entry with internal key >= `ikey` (`Included`) or > (`Excluded`).
    pub fn lower_bound(
        &self,
        b: Bound<&InternalKey>,
    ) -> Option<crossbeam_skiplist::map::Entry<'_, InternalKey, Vec<u8>>> {
        self.map.lower_bound(b)
    }

    /// The last entry with internal key <= `ikey` (`Included`) or < (`Excluded`).
    pub fn upper_bound(
        &self,
        b: Bound<&InternalKey>,
    ) -> Option<crossbeam_skiplist::map::Entry<'_, InternalKey, Vec<u8>>> {
        self.map.upper_bound(b)
    }

    /// Entries from `from` on, in order.
    pub fn range_from<'a>(
        &'a self,
        from: Bound<&'a InternalKey>,
    ) -> crossbeam_skiplist::map::Range<
        'a,
        InternalKey,
        (Bound<&'a InternalKey>, Bound<&'a InternalKey>),
        InternalKey,
        Vec<u8>,
    > {
        self.map.range((from, Bound::Unbounded))
    }

    /// Entries up to `to`, in order (use `.rev()` to walk back).
    pub fn range_to<'a>(
        &'a self,
        to: Bound<&'a InternalKey>,
    ) -> crossbeam_skiplist::map::Range<
        'a,
        InternalKey,
        (Bound<&'a InternalKey>, Bound<&'a InternalKey>),
        InternalKey,
        Vec<u8>,
    > {
        self.map.range((Bound::Unbounded, to))
    }

    /// First entry.
    pub fn front(&self) -> Option<crossbeam_skiplist::map::Entry<'_, InternalKey, Vec<u8>>> {
        self.map.front()
    }

    /// Last entry.
    pub fn back(&self) -> Option<crossbeam_skiplist::map::Entry<'_, InternalKey, Vec<u8>>> {
        self.map.back()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn get_sees_newest_visible_version() {
        let m = Memtable::new(1, 1 << 20);
        m.insert(b"k", 1, ValueKind::Put, b"v1");
        m.insert(b"k", 3, ValueKind::Delete, b"");
        m.insert(b"k", 5, ValueKind::Put, b"v5");
        assert_eq!(m.get(b"k", 0), Lookup::Absent);
        assert_eq!(m.get(b"k", 2), Lookup::Value(b"v1".to_vec()));
        assert_eq!(m.get(b"k", 4), Lookup::Deleted);
        assert_eq!(m.get(b"k", 9), Lookup::Value(b"v5".to_vec()));
        assert_eq!(m.get(b"j", 9), Lookup::Absent);
        assert_eq!(m.get(b"kk", 9), Lookup::Absent);
    }
}
