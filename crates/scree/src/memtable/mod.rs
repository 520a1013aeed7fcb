//! The memtable: the newest writes of one keyspace, with a byte budget, in one of two
//! indexes chosen by the keyspace's layout:
//! - **sorted** (leveled, fragmented): a B-tree (`std::collections::BTreeMap`) of internal keys
//!   under a read-write lock, read by point lookups, range iterators (which copy short runs of
//!   entries under the read lock) and flushes in internal-key order. Only the group-commit
//!   leader writes, one insert per write lock (≈ 0.7 µs at 500k entries, where a lock-free
//!   crossbeam skiplist's insert took ≈ 1.5 µs of cache misses: the bound on a sorted layout's
//!   fill rate); readers wait at most one insert. Values live in an arena (`arena.rs`), so an insert
//!   allocates nothing per entry; a blocked whole-key Bloom filter answers most gets of keys
//!   the memtable never saw with one cache line;
//! - **hashed** (trie, whose keyspaces are hash-ordered and have no scans; semisorted, whose
//!   scans read one prefix group): a sharded concurrent hash index ([`hashed`]) from user key to
//!   its versions, for semisorted with its prefix groups. An insert costs one hash probe (two
//!   with groups) instead of a B-tree search of ~log2(n) cache misses, which bounded the fill
//!   rate (docs/architecture.md); a flush visits each key's versions together, newest first, in
//!   no key order (the trie's and semisorted's flushes order entries by hash themselves).

use std::ops::Bound;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

use std::collections::{BTreeMap, HashMap};

use parking_lot::{Mutex, RwLock};

mod arena;
pub mod hashed;
use arena::{Arena, Loc};
use hashed::HashIndex;

use crate::error::{Error, Result};
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

/// What a non-blind write's read learned about its key in the first level below the
/// memtables (SlimDB's Algorithm 2 uses it when the flush inserts the key into that level's
/// filter): recorded only when no memtable held the key, so it stays true until the level's
/// sub-levels are merged (the flush checks the sub-level is still there).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FirstLevel {
    /// The key had no version in the first level.
    Absent,
    /// The key's newest version in the first level was in the sub-level of this slot.
    SubLevel(u64),
}

/// One memtable generation.
pub struct Memtable {
    /// The sorted index (empty and unused in a hashed memtable).
    map: RwLock<Sorted>,
    /// The hashed index (None in a sorted memtable).
    hashed: Option<HashIndex>,
    /// Entries (versions) inserted.
    entries: AtomicUsize,
    bytes: AtomicUsize,
    /// Number of the WAL file that was current when this memtable was created.
    pub log_number: u64,
    max_seq: AtomicU64,
    /// Bloom filter over the user keys inserted (RocksDB's memtable whole-key filter): a get
    /// for a key the memtable never saw skips the skiplist search. Allocated on first insert.
    filter: OnceLock<Box<[AtomicU64]>>,
    filter_words: usize,
    /// [`FirstLevel`] of the keys non-blind writes put here, the first recorded per key.
    places: Mutex<HashMap<Box<[u8]>, FirstLevel>>,
}

/// The sorted index: internal keys (inline for short keys) to values in an arena.
#[derive(Default)]
struct Sorted {
    map: BTreeMap<InternalKey, ValueRef>,
    values: Arena,
}

/// Where a value is in [`Sorted::values`].
#[derive(Clone, Copy, Debug)]
struct ValueRef {
    at: Loc,
    len: u32,
}

impl Sorted {
    fn value(&self, r: ValueRef) -> &[u8] {
        // Every ValueRef in the map was returned by this arena's append.
        self.values.bytes(r.at, r.len as usize).unwrap_or_default()
    }
}

/// Probes per key in the memtable filter (9 hash bits each, 54 in all).
const FILTER_PROBES: u32 = 6;
/// 64-bit words per memtable filter block (one cache line).
const BLOCK_WORDS: usize = 8;

/// Most inserts of a batch made under one take of a sorted memtable's write lock.
const LOCKED_RUN: usize = 64;

/// Approximate per-entry overhead of the skiplist, counted against the budget.
const ENTRY_OVERHEAD: usize = 64;

/// Bytes a [`FirstLevel`] record costs besides its key (map slot, box header, allocation).
const PLACE_OVERHEAD: usize = 48;

/// Budget bytes per entry assumed when a hashed memtable's table is sized: a 16-byte key and
/// a 100-byte value count 188 bytes (with [`ENTRY_OVERHEAD`] and the trailer).
const HASHED_ENTRY_GUESS: usize = 192;

impl Memtable {
    /// An empty memtable whose data is logged from `log_number` on, sized for a budget of
    /// `budget_bytes` (0: no key filter).
    pub fn new(log_number: u64, budget_bytes: usize) -> Self {
        // About 10 bits per entry of at least ENTRY_OVERHEAD bytes, in whole 64-byte blocks.
        let filter_words = (budget_bytes / ENTRY_OVERHEAD * 10)
            .div_ceil(64)
            .next_multiple_of(BLOCK_WORDS)
            .min(1 << 24);
        Memtable {
            map: RwLock::new(Sorted::default()),
            hashed: None,
            entries: AtomicUsize::new(0),
            bytes: AtomicUsize::new(0),
            log_number,
            max_seq: AtomicU64::new(0),
            filter: OnceLock::new(),
            filter_words,
            places: Mutex::new(HashMap::new()),
        }
    }

    /// An empty hashed memtable (point lookups and flushes only; no ordered iteration), its
    /// table sized for `budget_bytes` of small entries so that filling it does not rehash.
    pub fn hashed(log_number: u64, budget_bytes: usize) -> Self {
        Self::hashed_index(log_number, budget_bytes, None)
    }

    /// A hashed memtable that also keeps the groups of keys sharing their first
    /// `prefix_len` bytes, for [`Memtable::prefix_group`].
    pub fn hashed_groups(log_number: u64, budget_bytes: usize, prefix_len: usize) -> Self {
        Self::hashed_index(log_number, budget_bytes, Some(prefix_len))
    }

    fn hashed_index(log_number: u64, budget_bytes: usize, groups: Option<usize>) -> Self {
        let capacity = (budget_bytes / HASHED_ENTRY_GUESS).min(1 << 22);
        Memtable {
            map: RwLock::new(Sorted::default()),
            hashed: Some(HashIndex::with_capacity(capacity, groups)),
            entries: AtomicUsize::new(0),
            bytes: AtomicUsize::new(0),
            log_number,
            max_seq: AtomicU64::new(0),
            filter: OnceLock::new(),
            filter_words: 0,
            places: Mutex::new(HashMap::new()),
        }
    }

    /// An empty memtable of the index `layout` reads: sorted for key-ordered layouts, hashed
    /// for hash-ordered ones (`trie`), hashed with prefix groups for `semisorted`.
    pub fn for_layout(
        layout: &crate::options::Layout,
        log_number: u64,
        budget_bytes: usize,
    ) -> Self {
        match layout.order() {
            crate::options::Order::Total => Memtable::new(log_number, budget_bytes),
            crate::options::Order::PrefixGroups(n) => {
                Memtable::hashed_groups(log_number, budget_bytes, n)
            }
            crate::options::Order::Hash => Memtable::hashed(log_number, budget_bytes),
        }
    }

    /// Whether entries are kept in internal-key order (range iteration works).
    pub fn is_sorted(&self) -> bool {
        self.hashed.is_none()
    }

    fn unordered() -> Error {
        Error::Unsupported(
            "ordered iteration of a hashed memtable (hash-ordered layouts have no scans)".into(),
        )
    }

    /// The filter bits of `user_key`: all in one 64-byte block (a blocked Bloom filter), so
    /// an insert or a lookup touches one cache line. Spreading six probes over the whole
    /// filter cost a sorted layout's writer six cache misses and six locked updates per put
    /// (9 % of its time). The block comes from the high bits of the key's hash
    /// (multiply-shift), each probe's 9-bit position inside it from a remix of the hash.
    fn filter_positions(&self, user_key: &[u8]) -> impl Iterator<Item = (usize, u64)> {
        let h = crate::filter::bloom::bloom_hash(user_key);
        let blocks = (self.filter_words / BLOCK_WORDS).max(1) as u128;
        let base = ((u128::from(h) * blocks) >> 64) as usize * BLOCK_WORDS;
        let probes = (h ^ (h >> 31)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        (0..FILTER_PROBES).map(move |i| {
            let pos = (probes >> (9 * i)) & 511;
            (base + (pos / 64) as usize, 1u64 << (pos % 64))
        })
    }

    /// Sets `user_key`'s filter bits. Called with the map's write lock held (`_writer`), which
    /// makes this the only writer of the filter: a bit is set by a plain load and store instead
    /// of a locked `fetch_or` (six locked instructions per put, each waiting for the insert's
    /// stores before it). Readers load the words without the lock; a reader that finds the
    /// entry in the map took the lock after this writer released it, so it sees the bits.
    fn filter_add(&self, _writer: &mut Sorted, user_key: &[u8]) {
        if self.filter_words == 0 {
            return;
        }
        let f = self
            .filter
            .get_or_init(|| (0..self.filter_words).map(|_| AtomicU64::new(0)).collect());
        for (w, bit) in self.filter_positions(user_key) {
            if let Some(word) = f.get(w) {
                word.store(word.load(Ordering::Relaxed) | bit, Ordering::Relaxed);
            }
        }
    }

    /// False only if `user_key` was never inserted.
    fn may_contain(&self, user_key: &[u8]) -> bool {
        if self.filter_words == 0 {
            return !self.is_empty();
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
        self.count(user_key.len() + value.len(), 1, seq);
        if let Some(h) = &self.hashed {
            h.insert(user_key, key::trailer(seq, kind), value);
            return;
        }
        let ik = InternalKey::new(user_key, seq, kind);
        let mut g = self.map.write();
        self.insert_locked(&mut g, ik, user_key, value);
    }

    /// Inserts one entry into the sorted index under its write lock. The filter bit is set
    /// before the entry becomes visible in the map, so a reader that can see the entry (its
    /// sequence number is published after this insert) also passes the filter.
    fn insert_locked(&self, g: &mut Sorted, ik: InternalKey, user_key: &[u8], value: &[u8]) {
        self.filter_add(g, user_key);
        let at = g.values.append(&[value]);
        g.map.insert(
            ik,
            ValueRef {
                at,
                len: value.len() as u32,
            },
        );
    }

    /// Inserts the entries of one write batch, `(user key, sequence number, kind, value)`:
    /// what [`Memtable::insert`] of each does, with the counters updated once and the index
    /// locked once per run of entries instead of per entry (see [`hashed::HashIndex::insert_batch`];
    /// a sorted memtable holds its write lock for at most [`LOCKED_RUN`] inserts, which a
    /// reader may wait for).
    pub fn insert_batch(&self, entries: &[(&[u8], u64, ValueKind, &[u8])]) {
        let Some(max_seq) = entries.iter().map(|e| e.1).max() else {
            return;
        };
        let bytes = entries.iter().map(|e| e.0.len() + e.3.len()).sum();
        self.count(bytes, entries.len(), max_seq);
        if let Some(h) = &self.hashed {
            h.insert_batch(entries);
            return;
        }
        for run in entries.chunks(LOCKED_RUN) {
            let keys: Vec<InternalKey> = run
                .iter()
                .map(|&(k, seq, kind, _)| InternalKey::new(k, seq, kind))
                .collect();
            let mut g = self.map.write();
            for (ik, &(k, _, _, v)) in keys.into_iter().zip(run) {
                self.insert_locked(&mut g, ik, k, v);
            }
        }
    }

    /// Counts `n` entries of `user_bytes` key and value bytes, the newest of sequence number
    /// `max_seq`, before they are inserted.
    fn count(&self, user_bytes: usize, n: usize, max_seq: u64) {
        self.bytes
            .fetch_add(user_bytes + n * (8 + ENTRY_OVERHEAD), Ordering::Relaxed);
        self.max_seq.fetch_max(max_seq, Ordering::Relaxed);
        self.entries.fetch_add(n, Ordering::Relaxed);
    }

    /// Approximate memory used.
    pub fn approximate_bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Records what a non-blind write's read learned about `key` in the first level (kept
    /// if the key has a record already: the first read's knowledge is the one about the
    /// level as this memtable's flush will find it). Counted in the memtable's bytes.
    pub fn note_first_level(&self, key: &[u8], place: FirstLevel) {
        let mut places = self.places.lock();
        if !places.contains_key(key) {
            places.insert(key.into(), place);
            self.bytes
                .fetch_add(key.len() + PLACE_OVERHEAD, Ordering::Relaxed);
        }
    }

    /// Runs `f` with the [`FirstLevel`] records of this memtable (a flush reads them).
    pub fn with_first_levels<R>(&self, f: impl FnOnce(&HashMap<Box<[u8]>, FirstLevel>) -> R) -> R {
        f(&self.places.lock())
    }

    /// Whether the memtable holds no entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of entries (versions).
    pub fn len(&self) -> usize {
        self.entries.load(Ordering::Acquire)
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
        if let Some(h) = &self.hashed {
            return match h.get(user_key, key::parse(&lk.0).seq) {
                None => Lookup::Absent,
                Some((t, v)) if (t & 0xff) as u8 == ValueKind::Put as u8 => Lookup::Value(v),
                Some(_) => Lookup::Deleted,
            };
        }
        if !self.may_contain(user_key) {
            return Lookup::Absent;
        }
        let g = self.map.read();
        let Some((k, &v)) = g.map.range((Bound::Included(lk), Bound::Unbounded)).next() else {
            return Lookup::Absent;
        };
        let p = key::parse(&k.0);
        if p.user_key != user_key {
            return Lookup::Absent;
        }
        match ValueKind::from_u8(p.kind) {
            Some(ValueKind::Put) => Lookup::Value(g.value(v).to_vec()),
            _ => Lookup::Deleted,
        }
    }

    /// Visits every entry in internal-key order (sorted memtables; `Unsupported` for hashed,
    /// before visiting anything). Stops at the first error `f` returns.
    pub fn for_each_in_order(&self, f: impl FnMut(&[u8], &[u8]) -> Result<()>) -> Result<()> {
        if !self.is_sorted() {
            return Err(Self::unordered());
        }
        self.for_each(f)
    }

    /// Visits every entry as `(internal key, value)`; the versions of one user key are visited
    /// together, newest first (internal-key order in a sorted memtable, no key order in a
    /// hashed one). Stops at the first error `f` returns.
    pub fn for_each(&self, mut f: impl FnMut(&[u8], &[u8]) -> Result<()>) -> Result<()> {
        let Some(h) = &self.hashed else {
            let g = self.map.read();
            for (k, &v) in g.map.iter() {
                f(&k.0, g.value(v))?;
            }
            return Ok(());
        };
        let mut ik: Vec<u8> = Vec::new();
        h.for_each(|key, trailer, value| {
            ik.clear();
            ik.extend_from_slice(key);
            ik.extend_from_slice(&trailer.to_le_bytes());
            f(&ik, value)
        })
    }

    /// The entries of the keys whose first `prefix.len()` bytes are `prefix`, as (internal
    /// key, value) sorted in internal-key order: `Some` in a memtable with prefix groups of
    /// exactly that length ([`Memtable::hashed_groups`]), `None` otherwise.
    pub fn prefix_group(&self, prefix: &[u8]) -> Option<Vec<(Vec<u8>, Vec<u8>)>> {
        let group = self.hashed.as_ref()?.group(prefix)?;
        let mut out: Vec<(Vec<u8>, Vec<u8>)> = group
            .into_iter()
            .map(|(mut k, trailer, v)| {
                k.extend_from_slice(&trailer.to_le_bytes());
                (k, v)
            })
            .collect();
        out.sort_unstable_by(|a, b| key::cmp_ikey(&a.0, &b.0));
        Some(out)
    }

    /// Read-locks the memtable for a flush that borrows its entries ([`FlushView::for_each`])
    /// instead of copying them: the `trie` flush writes its HTable straight from the arenas.
    /// Inserts wait until the view is dropped (a flushed memtable gets none).
    pub fn flush_view(&self) -> FlushView<'_> {
        match &self.hashed {
            Some(h) => FlushView(Held::Hashed(h.read_all())),
            None => FlushView(Held::Sorted(self.map.read())),
        }
    }

    /// Visits up to `n` entries nearest first: from `bound` on (`forward`), or up to `bound`
    /// walking back, as `f(internal key, value)` under the memtable's read lock. Sorted
    /// memtables; a hashed one has an empty tree, and [`crate::iterator`] refuses to build a
    /// range iterator over it.
    pub fn visit_run(
        &self,
        bound: Bound<&InternalKey>,
        forward: bool,
        n: usize,
        mut f: impl FnMut(&[u8], &[u8]),
    ) {
        let g = self.map.read();
        if forward {
            for (k, &v) in g.map.range((bound, Bound::Unbounded)).take(n) {
                f(&k.0, g.value(v));
            }
        } else {
            for (k, &v) in g.map.range((Bound::Unbounded, bound)).rev().take(n) {
                f(&k.0, g.value(v));
            }
        }
    }
}

/// A read-locked memtable whose entries a flush borrows ([`Memtable::flush_view`]).
pub struct FlushView<'m>(Held<'m>);

enum Held<'m> {
    /// A sorted memtable's map.
    Sorted(parking_lot::RwLockReadGuard<'m, Sorted>),
    /// A hashed memtable's shards.
    Hashed(Vec<parking_lot::RwLockReadGuard<'m, hashed::Shard>>),
}

impl FlushView<'_> {
    /// Visits every entry as (user key, trailer, value), borrowed for as long as the view
    /// lives; the versions of one user key together, newest first (internal-key order in a
    /// sorted memtable, no key order in a hashed one).
    pub fn for_each<'a>(&'a self, mut f: impl FnMut(&'a [u8], u64, &'a [u8])) {
        match &self.0 {
            Held::Sorted(g) => {
                let g: &'a Sorted = g;
                for (k, &v) in g.map.iter() {
                    let p = key::parse(&k.0);
                    f(p.user_key, p.trailer(), g.value(v));
                }
            }
            Held::Hashed(guards) => HashIndex::visit_held(guards, f),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn three_versions_of_k_and_one_of_j(m: &Memtable) {
        m.insert(b"k", 1, ValueKind::Put, b"v1");
        m.insert(b"j", 2, ValueKind::Put, b"j2");
        m.insert(b"k", 3, ValueKind::Delete, b"");
        m.insert(b"k", 5, ValueKind::Put, b"v5");
    }

    #[test]
    fn get_sees_newest_visible_version_in_both_indexes() {
        for m in [Memtable::new(1, 1 << 20), Memtable::hashed(1, 1 << 20)] {
            three_versions_of_k_and_one_of_j(&m);
            assert_eq!(m.get(b"k", 0), Lookup::Absent);
            assert_eq!(m.get(b"k", 2), Lookup::Value(b"v1".to_vec()));
            assert_eq!(m.get(b"k", 4), Lookup::Deleted);
            assert_eq!(m.get(b"k", 9), Lookup::Value(b"v5".to_vec()));
            assert_eq!(m.get(b"j", 1), Lookup::Absent);
            assert_eq!(m.get(b"j", 9), Lookup::Value(b"j2".to_vec()));
            assert_eq!(m.get(b"kk", 9), Lookup::Absent);
            assert_eq!(m.len(), 4);
        }
    }

    #[test]
    fn hashed_visits_versions_together_and_refuses_ordered_iteration() {
        let m = Memtable::hashed(1, 1 << 20);
        three_versions_of_k_and_one_of_j(&m);
        let mut seen = Vec::new();
        m.for_each(|ik, v| {
            let p = key::parse(ik);
            seen.push((p.user_key.to_vec(), p.seq, p.kind, v.to_vec()));
            Ok(())
        })
        .expect("visit");
        // Versions of one key together, newest first; keys in no particular order.
        let k: Vec<_> = seen.iter().filter(|e| e.0 == b"k").map(|e| e.1).collect();
        assert_eq!(k, vec![5, 3, 1]);
        let at = seen.iter().position(|e| e.0 == b"k").expect("k visited");
        assert!(seen
            .get(at..at + 3)
            .is_some_and(|w| w.iter().all(|e| e.0 == b"k")));
        assert_eq!(seen.len(), 4);
        assert!(matches!(
            m.for_each_in_order(|_, _| Ok(())),
            Err(Error::Unsupported(_))
        ));
    }

    #[test]
    fn prefix_groups_hold_every_version_of_their_keys_and_nothing_else() {
        use std::collections::BTreeMap;
        let m = Memtable::hashed_groups(1, 1 << 20, 3);
        // 40 groups (some of one key, one of a key shorter than the prefix), 3,000 writes of
        // puts and deletes, several versions per key; the model: every version by user key.
        let mut model: BTreeMap<Vec<u8>, Vec<(u64, Vec<u8>)>> = BTreeMap::new();
        let mut x = 7u64;
        for seq in 1..=3_000u64 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let g = (x >> 33) % 40;
            let key = if g == 39 {
                b"zz".to_vec()
            } else {
                format!("g{g:02}{}", (x >> 20) % (1 + g % 7)).into_bytes()
            };
            let kind = if (x >> 10).is_multiple_of(5) {
                ValueKind::Delete
            } else {
                ValueKind::Put
            };
            let value = format!("v{seq}").into_bytes();
            m.insert(&key, seq, kind, &value);
            model
                .entry(key)
                .or_default()
                .push((key::trailer(seq, kind), value));
        }
        for g in 0..41u64 {
            let prefix = format!("g{g:02}").into_bytes();
            let got = m.prefix_group(&prefix).expect("a grouped memtable");
            let mut want: Vec<(Vec<u8>, Vec<u8>)> = model
                .iter()
                .filter(|(k, _)| k.starts_with(&prefix))
                .flat_map(|(k, vs)| {
                    vs.iter().map(move |(t, v)| {
                        let mut ik = k.clone();
                        ik.extend_from_slice(&t.to_le_bytes());
                        (ik, v.clone())
                    })
                })
                .collect();
            want.sort_by(|a, b| key::cmp_ikey(&a.0, &b.0));
            assert_eq!(got, want, "group {g}");
        }
        // A key shorter than the prefix is its own group, found by nothing of prefix length.
        assert_eq!(m.prefix_group(b"zz").map(|g| g.len()), None);
        assert_ne!(m.get(b"zz", u64::MAX >> 8), Lookup::Absent);
        // Another length, or an ungrouped memtable: no answer.
        assert!(m.prefix_group(b"g0").is_none());
        assert!(Memtable::hashed(1, 1 << 20).prefix_group(b"g00").is_none());
        assert!(Memtable::new(1, 1 << 20).prefix_group(b"g00").is_none());
    }

    #[test]
    fn sorted_filter_has_no_false_negatives_and_few_false_positives() {
        let n = 50_000u32;
        let m = Memtable::new(1, n as usize * ENTRY_OVERHEAD);
        assert!(!m.may_contain(b"k0"), "an empty memtable contains nothing");
        for i in 0..n {
            m.insert(
                format!("k{i}").as_bytes(),
                u64::from(i) + 1,
                ValueKind::Put,
                b"v",
            );
        }
        assert!((0..n).all(|i| m.may_contain(format!("k{i}").as_bytes())));
        let fp = (0..n)
            .filter(|i| m.may_contain(format!("absent{i}").as_bytes()))
            .count();
        // 10 bits per key and 6 probes in one cache line: well under 2.5 %.
        assert!(fp < n as usize / 40, "{fp} false positives of {n}");
        assert_eq!(m.get(b"k7", 100), Lookup::Value(b"v".to_vec()));
    }

    #[test]
    fn batch_inserts_match_single_inserts_in_every_index() {
        // 3 batches of 700 entries over 300 keys (several versions of a key in one batch, some
        // of them deletes), larger than a locked run; one batch's sequence numbers go down.
        let make = || {
            [
                Memtable::new(1, 1 << 20),
                Memtable::hashed(1, 1 << 20),
                Memtable::hashed_groups(1, 1 << 20, 2),
            ]
        };
        let (one, batched) = (make(), make());
        let mut x = 11u64;
        let mut seq = 0u64;
        for b in 0..3u64 {
            let mut owned = Vec::new();
            for _ in 0..700 {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                seq += 1;
                let s = if b == 1 { 10_000 - seq } else { seq };
                let kind = if (x >> 40).is_multiple_of(6) {
                    ValueKind::Delete
                } else {
                    ValueKind::Put
                };
                let value = if kind == ValueKind::Put {
                    format!("v{s}").into_bytes()
                } else {
                    Vec::new()
                };
                owned.push((format!("k{}", (x >> 33) % 300).into_bytes(), s, kind, value));
            }
            let entries: Vec<(&[u8], u64, ValueKind, &[u8])> = owned
                .iter()
                .map(|(k, s, kind, v)| (k.as_slice(), *s, *kind, v.as_slice()))
                .collect();
            for (m, n) in one.iter().zip(&batched) {
                for &(k, s, kind, v) in &entries {
                    m.insert(k, s, kind, v);
                }
                n.insert_batch(&entries);
            }
        }
        for (m, n) in one.iter().zip(&batched) {
            assert_eq!(n.len(), 2100);
            assert_eq!(n.approximate_bytes(), m.approximate_bytes());
            assert_eq!(n.max_seq(), m.max_seq());
            let dump = |t: &Memtable| {
                let mut all = Vec::new();
                t.for_each(|ik, v| {
                    all.push((ik.to_vec(), v.to_vec()));
                    Ok(())
                })
                .expect("visit");
                all.sort();
                all
            };
            assert_eq!(dump(n), dump(m));
            for k in 0..301 {
                let key = format!("k{k}").into_bytes();
                for at in [5, 700, 9_000, 9_500, u64::MAX >> 8] {
                    assert_eq!(n.get(&key, at), m.get(&key, at), "k{k} at {at}");
                }
            }
        }
        make()[0].insert_batch(&[]);
    }

    #[test]
    fn hashed_insert_out_of_sequence_order_keeps_versions_ordered() {
        let m = Memtable::hashed(1, 0);
        m.insert(b"k", 5, ValueKind::Put, b"v5");
        m.insert(b"k", 2, ValueKind::Put, b"v2");
        assert_eq!(m.get(b"k", 3), Lookup::Value(b"v2".to_vec()));
        assert_eq!(m.get(b"k", 9), Lookup::Value(b"v5".to_vec()));
    }
}
