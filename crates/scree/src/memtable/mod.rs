//! The memtable: the newest writes of one keyspace, with a byte budget. Every memtable
//! indexes its entries in a sharded concurrent hash index ([`hashed`]) from user key to its
//! versions: an insert costs one hash probe, where a B-tree insert into a memtable of
//! hundreds of thousands of keys cost ~log2(n) comparisons and the cache misses of a search
//! (≈ 0.7 µs at 500k entries; a lock-free crossbeam skiplist's ≈ 1.5 µs), which bounded the
//! sorted layouts' fill rate and `scree serve`'s `SET`. Point lookups probe the hash index.
//! What differs by layout is the order served:
//! - **ordered** (leveled, fragmented, lightweight: key-ordered layouts): the index also keeps
//!   each shard's insertion log, and key order is built only when someone asks for it. A range
//!   iterator brings a B-tree of internal keys up to date with the versions logged since it
//!   was last brought up to date (sorted first, then merged in), so writes that no iterator
//!   ever sees are never ordered one by one; a flush sorts the whole memtable at once on the
//!   background thread, comparing the first 16 key bytes as integers before the bytes behind
//!   them;
//! - **hashed** (trie, whose keyspaces are hash-ordered and have no scans; semisorted, whose
//!   scans read one prefix group, kept as groups of keys sharing a prefix): no order; a
//!   flush visits each key's versions together, newest first, in no key order (the trie's
//!   and semisorted's flushes order entries by hash themselves).

use std::cmp::Ordering as CmpOrdering;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use std::collections::{BTreeMap, HashMap};

use parking_lot::{Mutex, RwLock};

mod arena;
pub mod hashed;
use hashed::{HashIndex, VersionRef};

use crate::error::{Error, Result};
use crate::hint::{prefetch, prefetch_lines};
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
    /// The hash index of every version.
    index: HashIndex,
    /// Whether the memtable serves key order (range iteration, flushes in key order).
    ordered: bool,
    /// The key order built so far (empty and unused unless `ordered`).
    order: RwLock<Order>,
    /// Entries (versions) inserted.
    entries: AtomicUsize,
    bytes: AtomicUsize,
    /// Number of the WAL file that was current when this memtable was created.
    pub log_number: u64,
    max_seq: AtomicU64,
    /// [`FirstLevel`] of the keys non-blind writes put here, the first recorded per key.
    places: Mutex<HashMap<Box<[u8]>, FirstLevel>>,
}

/// The key order of an ordered memtable: internal keys (inline for short keys) to their
/// versions in the hash index, holding what the shards' insertion logs held up to `covered`.
#[derive(Default)]
struct Order {
    map: BTreeMap<InternalKey, VersionRef>,
    /// Versions of each shard's log already in `map`.
    covered: Vec<usize>,
}

/// Approximate per-entry overhead of the hash index and its log, counted against the budget.
const ENTRY_OVERHEAD: usize = 64;

/// Approximate bytes an entry of the key order costs (B-tree slot, inline key, reference),
/// counted against the budget when an iterator makes the memtable build its order.
const ORDER_OVERHEAD: usize = 72;

/// Bytes a [`FirstLevel`] record costs besides its key (map slot, box header, allocation).
const PLACE_OVERHEAD: usize = 48;

/// Budget bytes per entry assumed when a memtable's hash table is sized: a 16-byte key and
/// a 100-byte value count 188 bytes (with [`ENTRY_OVERHEAD`] and the trailer).
const HASHED_ENTRY_GUESS: usize = 192;

/// A version borrowed from a read-locked memtable: (order prefix, user key, trailer, value).
type Borrowed<'a> = (u128, &'a [u8], u64, &'a [u8]);

/// Entries an ordered flush looks ahead to start loading their keys and values.
const FLUSH_PREFETCH_AHEAD: usize = 8;
/// Most cache lines of a value an ordered flush prefetches (a large value streams anyway).
const FLUSH_PREFETCH_VALUE_LINES: usize = 4;

/// The first 16 bytes of `user_key` as a big-endian integer, zero-padded: ordered like the
/// keys wherever two differ (equal ones compare the bytes).
fn order_prefix(user_key: &[u8]) -> u128 {
    u128::from_be_bytes(key::padded_head(user_key))
}

/// Internal-key order of borrowed versions: user key ascending (its order prefix first),
/// then trailer (sequence number) descending.
fn cmp_borrowed(a: &Borrowed<'_>, b: &Borrowed<'_>) -> CmpOrdering {
    a.0.cmp(&b.0)
        .then_with(|| a.1.cmp(b.1))
        .then_with(|| b.2.cmp(&a.2))
}

impl Memtable {
    /// An empty key-ordered memtable whose data is logged from `log_number` on, its hash table
    /// sized for a budget of `budget_bytes` of small entries.
    pub fn new(log_number: u64, budget_bytes: usize) -> Self {
        Self::with_index(log_number, budget_bytes, None, true)
    }

    /// An empty hashed memtable (point lookups and flushes only; no ordered iteration), its
    /// table sized for `budget_bytes` of small entries so that filling it does not rehash.
    pub fn hashed(log_number: u64, budget_bytes: usize) -> Self {
        Self::with_index(log_number, budget_bytes, None, false)
    }

    /// A hashed memtable that also keeps the groups of keys sharing their first
    /// `prefix_len` bytes, for [`Memtable::prefix_group`].
    pub fn hashed_groups(log_number: u64, budget_bytes: usize, prefix_len: usize) -> Self {
        Self::with_index(log_number, budget_bytes, Some(prefix_len), false)
    }

    fn with_index(
        log_number: u64,
        budget_bytes: usize,
        groups: Option<usize>,
        ordered: bool,
    ) -> Self {
        let capacity = (budget_bytes / HASHED_ENTRY_GUESS).min(1 << 22);
        Memtable {
            index: HashIndex::with_capacity(capacity, groups, ordered),
            ordered,
            order: RwLock::new(Order::default()),
            entries: AtomicUsize::new(0),
            bytes: AtomicUsize::new(0),
            log_number,
            max_seq: AtomicU64::new(0),
            places: Mutex::new(HashMap::new()),
        }
    }

    /// An empty memtable of the order `layout` reads: key-ordered for key-ordered layouts,
    /// hashed for hash-ordered ones (`trie`), hashed with prefix groups for `semisorted`.
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

    /// Whether entries are served in internal-key order (range iteration works).
    pub fn is_sorted(&self) -> bool {
        self.ordered
    }

    fn unordered() -> Error {
        Error::Unsupported(
            "ordered iteration of a hashed memtable (hash-ordered layouts have no scans)".into(),
        )
    }

    /// Inserts one entry.
    pub fn insert(&self, user_key: &[u8], seq: u64, kind: ValueKind, value: &[u8]) {
        self.count(user_key.len() + value.len(), 1, seq);
        self.index.insert(user_key, key::trailer(seq, kind), value);
    }

    /// Inserts the entries of one write batch, `(user key, sequence number, kind, value)`:
    /// what [`Memtable::insert`] of each does, with the counters updated once and each shard
    /// of the index locked once per run of entries instead of per entry (see
    /// [`hashed::HashIndex::insert_batch`]).
    pub fn insert_batch(&self, entries: &[(&[u8], u64, ValueKind, &[u8])]) {
        let Some(max_seq) = entries.iter().map(|e| e.1).max() else {
            return;
        };
        let bytes = entries.iter().map(|e| e.0.len() + e.3.len()).sum();
        self.count(bytes, entries.len(), max_seq);
        self.index.insert_batch(entries);
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
        match self.index.get(user_key, key::parse(&lk.0).seq) {
            None => Lookup::Absent,
            Some((t, v)) if (t & 0xff) as u8 == ValueKind::Put as u8 => Lookup::Value(v),
            Some(_) => Lookup::Deleted,
        }
    }

    /// Visits every entry in internal-key order (ordered memtables; `Unsupported` for hashed,
    /// before visiting anything). Stops at the first error `f` returns.
    pub fn for_each_in_order(&self, f: impl FnMut(&[u8], &[u8]) -> Result<()>) -> Result<()> {
        if !self.is_sorted() {
            return Err(Self::unordered());
        }
        self.for_each(f)
    }

    /// Visits every entry as `(internal key, value)`; the versions of one user key are visited
    /// together, newest first (internal-key order in an ordered memtable, no key order in a
    /// hashed one). Stops at the first error `f` returns.
    pub fn for_each(&self, mut f: impl FnMut(&[u8], &[u8]) -> Result<()>) -> Result<()> {
        let view = self.flush_view();
        let mut ik: Vec<u8> = Vec::new();
        let mut result = Ok(());
        view.for_each(|key, trailer, value| {
            if result.is_ok() {
                ik.clear();
                ik.extend_from_slice(key);
                ik.extend_from_slice(&trailer.to_le_bytes());
                result = f(&ik, value);
            }
        });
        result
    }

    /// The entries of the keys whose first `prefix.len()` bytes are `prefix`, as (internal
    /// key, value) sorted in internal-key order: `Some` in a memtable with prefix groups of
    /// exactly that length ([`Memtable::hashed_groups`]), `None` otherwise.
    pub fn prefix_group(&self, prefix: &[u8]) -> Option<Vec<(Vec<u8>, Vec<u8>)>> {
        let group = self.index.group(prefix)?;
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
        FlushView {
            guards: self.index.read_all(),
            ordered: self.ordered,
        }
    }

    /// Brings the key order up to date with every version inserted so far: the versions the
    /// shards logged since the last call are sorted, then merged in (one merge of two
    /// B-trees when they are many against the order's size, one insert each otherwise).
    /// The sort moves 16-byte (first 8 key bytes, index) pairs rather than the 52-byte
    /// entries, and compares the keys only when their first 8 bytes are equal.
    fn catch_up(&self, o: &mut Order) {
        let Order { map, covered } = o;
        let mut news: Vec<(InternalKey, VersionRef)> = Vec::new();
        let mut rank: Vec<(u64, u32)> = Vec::new();
        self.index.log_since(covered, |k, trailer, r| {
            let mut ik = smallvec::SmallVec::with_capacity(k.len() + 8);
            ik.extend_from_slice(k);
            ik.extend_from_slice(&trailer.to_le_bytes());
            rank.push((key::user_prefix(k), news.len() as u32));
            news.push((InternalKey(ik), r));
        });
        if news.is_empty() {
            return;
        }
        self.bytes
            .fetch_add(news.len() * ORDER_OVERHEAD, Ordering::Relaxed);
        let key_of = |i: u32| news.get(i as usize).map(|e| &e.0);
        rank.sort_unstable_by(|a, b| a.0.cmp(&b.0).then_with(|| key_of(a.1).cmp(&key_of(b.1))));
        let empty = || {
            (
                InternalKey(smallvec::SmallVec::new()),
                VersionRef::default(),
            )
        };
        let mut take = |i: u32| {
            news.get_mut(i as usize)
                .map(|e| std::mem::replace(e, empty()))
        };
        if rank.len() * 8 >= map.len() {
            let mut more: BTreeMap<InternalKey, VersionRef> =
                rank.iter().filter_map(|&(_, i)| take(i)).collect();
            map.append(&mut more);
        } else {
            for &(_, i) in &rank {
                if let Some((k, r)) = take(i) {
                    map.insert(k, r);
                }
            }
        }
    }

    /// Visits up to `n` entries nearest first: from `bound` on (`forward`), or up to `bound`
    /// walking back, as `f(internal key, value)`, after bringing the key order up to date.
    /// Ordered memtables; a hashed one visits nothing, and [`crate::iterator`] refuses to
    /// build a range iterator over it.
    pub fn visit_run(
        &self,
        bound: Bound<&InternalKey>,
        forward: bool,
        n: usize,
        mut f: impl FnMut(&[u8], &[u8]),
    ) {
        if !self.ordered {
            return;
        }
        let mut o = self.order.read();
        if o.map.len() < self.len() {
            drop(o);
            self.catch_up(&mut self.order.write());
            o = self.order.read();
        }
        let mut values = self.index.values();
        let mut visit = |(k, r): (&InternalKey, &VersionRef)| {
            if let Some(v) = values.value(*r) {
                f(&k.0, v);
            }
        };
        if forward {
            o.map
                .range((bound, Bound::Unbounded))
                .take(n)
                .for_each(&mut visit);
        } else {
            o.map
                .range((Bound::Unbounded, bound))
                .rev()
                .take(n)
                .for_each(&mut visit);
        }
    }
}

/// A read-locked memtable whose entries a flush borrows ([`Memtable::flush_view`]).
pub struct FlushView<'m> {
    guards: Vec<parking_lot::RwLockReadGuard<'m, hashed::Shard>>,
    ordered: bool,
}

impl FlushView<'_> {
    /// Visits every entry as (user key, trailer, value), borrowed for as long as the view
    /// lives; the versions of one user key together, newest first (internal-key order in an
    /// ordered memtable, sorted here; no key order in a hashed one).
    pub fn for_each<'a>(&'a self, mut f: impl FnMut(&'a [u8], u64, &'a [u8])) {
        if !self.ordered {
            HashIndex::visit_held(&self.guards, f);
            return;
        }
        let mut all: Vec<Borrowed<'a>> = Vec::new();
        HashIndex::visit_held(&self.guards, |k, t, v| all.push((order_prefix(k), k, t, v)));
        all.sort_unstable_by(cmp_borrowed);
        // In key order the records are visited at random places of the memtable: each key and
        // value read would wait for its cache misses, so the records a few entries ahead start
        // loading first.
        for (i, &(_, k, t, v)) in all.iter().enumerate() {
            if let Some(&(_, ak, _, av)) = all.get(i + FLUSH_PREFETCH_AHEAD) {
                prefetch(ak);
                prefetch_lines(av, av.len().div_ceil(64).min(FLUSH_PREFETCH_VALUE_LINES));
            }
            f(k, t, v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// A seeded linear congruential generator: each call steps the state and returns it.
    fn lcg(mut x: u64) -> impl FnMut() -> u64 {
        move || {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            x
        }
    }

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
        let m = Memtable::hashed_groups(1, 1 << 20, 3);
        // 40 groups (some of one key, one of a key shorter than the prefix), 3,000 writes of
        // puts and deletes, several versions per key; the model: every version by user key.
        let mut model: BTreeMap<Vec<u8>, Vec<(u64, Vec<u8>)>> = BTreeMap::new();
        let mut step = lcg(7);
        for seq in 1..=3_000u64 {
            let x = step();
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

    /// Keys that stress the order: shorter than the 16-byte prefix, ending in zero bytes,
    /// sharing 16 or more leading bytes, and random.
    fn tricky_key(x: u64) -> Vec<u8> {
        match x % 5 {
            0 => format!("{}", x % 97).into_bytes(),
            1 => {
                let mut k = vec![b'a'; (x % 4) as usize];
                k.extend(std::iter::repeat_n(0u8, ((x >> 8) % 3) as usize));
                k
            }
            2 => format!("shared-prefix-16-bytes/{}", x % 211).into_bytes(),
            3 => format!("key:{:012}", x % 499).into_bytes(),
            _ => (x % 1_000).to_le_bytes().to_vec(),
        }
    }

    /// A put of a value naming its sequence number `s`, or a delete (no value).
    fn version_of(s: u64, delete: bool) -> (ValueKind, Vec<u8>) {
        if delete {
            (ValueKind::Delete, Vec::new())
        } else {
            (ValueKind::Put, format!("v{s}").into_bytes())
        }
    }

    /// Owned batch entries as [`Memtable::insert_batch`] takes them.
    type Owned = (Vec<u8>, u64, ValueKind, Vec<u8>);
    fn as_entries(owned: &[Owned]) -> Vec<(&[u8], u64, ValueKind, &[u8])> {
        owned
            .iter()
            .map(|(k, s, kind, v)| (k.as_slice(), *s, *kind, v.as_slice()))
            .collect()
    }

    #[test]
    fn the_order_prefix_orders_like_the_internal_key() {
        let mut step = lcg(3);
        let mut next = || step() >> 11;
        for _ in 0..20_000 {
            let (ka, kb) = (tricky_key(next()), tricky_key(next()));
            let (ta, tb) = (next() % 4, next() % 4);
            let a: Borrowed<'_> = (order_prefix(&ka), &ka, ta, b"");
            let b: Borrowed<'_> = (order_prefix(&kb), &kb, tb, b"");
            let (mut ia, mut ib) = (ka.clone(), kb.clone());
            ia.extend_from_slice(&ta.to_le_bytes());
            ib.extend_from_slice(&tb.to_le_bytes());
            assert_eq!(
                cmp_borrowed(&a, &b),
                key::cmp_ikey(&ia, &ib),
                "{ka:?}/{ta} {kb:?}/{tb}"
            );
        }
    }

    #[test]
    fn ordered_memtable_iterates_like_a_model_while_writes_go_on() {
        // 6,000 writes (puts and deletes, several versions per key, some batched, one batch
        // with its sequence numbers going down) with range visits in between, forward and
        // back from random bounds: each visit sees exactly the model's entries at that point.
        let m = Memtable::new(1, 1 << 20);
        let mut model: BTreeMap<InternalKey, Vec<u8>> = BTreeMap::new();
        let mut step = lcg(5);
        let mut next = || step() >> 11;
        let mut seq = 100_000u64;
        let mut visits = 0;
        for round in 0..300u64 {
            let n = 1 + next() % 40;
            let mut owned = Vec::new();
            for _ in 0..n {
                seq += 1;
                let s = if round == 7 { 300_000 - seq } else { seq };
                let key = tricky_key(next());
                let (kind, value) = version_of(s, next() % 5 == 0);
                model.insert(InternalKey::new(&key, s, kind), value.clone());
                owned.push((key, s, kind, value));
            }
            if round % 3 == 0 {
                m.insert_batch(&as_entries(&owned));
            } else {
                for (k, s, kind, v) in &owned {
                    m.insert(k, *s, *kind, v);
                }
            }
            if next() % 4 == 0 {
                visits += 1;
                let at = InternalKey::new(&tricky_key(next()), next() % 400_000, ValueKind::Put);
                let take = 1 + (next() % 70) as usize;
                for forward in [true, false] {
                    let mut got = Vec::new();
                    m.visit_run(Bound::Included(&at), forward, take, |k, v| {
                        got.push((k.to_vec(), v.to_vec()));
                    });
                    let want: Vec<(Vec<u8>, Vec<u8>)> = if forward {
                        model
                            .range(&at..)
                            .take(take)
                            .map(|(k, v)| (k.0.to_vec(), v.clone()))
                            .collect()
                    } else {
                        model
                            .range(..=&at)
                            .rev()
                            .take(take)
                            .map(|(k, v)| (k.0.to_vec(), v.clone()))
                            .collect()
                    };
                    assert_eq!(got, want, "round {round}, forward {forward}");
                }
            }
        }
        assert!(visits > 50);
        // A whole forward walk, and the flush's order.
        let mut walked = Vec::new();
        m.visit_run(Bound::Unbounded, true, usize::MAX, |k, v| {
            walked.push((k.to_vec(), v.to_vec()));
        });
        let want: Vec<(Vec<u8>, Vec<u8>)> = model
            .iter()
            .map(|(k, v)| (k.0.to_vec(), v.clone()))
            .collect();
        assert_eq!(walked, want);
        let mut flushed = Vec::new();
        m.for_each_in_order(|k, v| {
            flushed.push((k.to_vec(), v.to_vec()));
            Ok(())
        })
        .expect("in order");
        assert_eq!(flushed, want);
        for (k, v) in &model {
            let p = key::parse(&k.0);
            let got = m.get(p.user_key, u64::MAX >> 8);
            let newest = model
                .range(InternalKey::new(p.user_key, u64::MAX >> 8, ValueKind::Put)..)
                .next()
                .filter(|(nk, _)| key::parse(&nk.0).user_key == p.user_key);
            if let Some((nk, nv)) = newest {
                let want = match ValueKind::from_u8(key::parse(&nk.0).kind) {
                    Some(ValueKind::Put) => Lookup::Value(nv.clone()),
                    _ => Lookup::Deleted,
                };
                assert_eq!(got, want, "{:?}", p.user_key);
            }
            let _ = v;
        }
        // A flush visitor that fails stops at once and reports the error.
        let mut calls = 0;
        let r = m.for_each_in_order(|_, _| {
            calls += 1;
            Err(Error::InvalidArgument("stop".into()))
        });
        assert!(matches!(r, Err(Error::InvalidArgument(_))));
        assert_eq!(calls, 1);
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
        let mut step = lcg(11);
        let mut seq = 0u64;
        for b in 0..3u64 {
            let mut owned = Vec::new();
            for _ in 0..700 {
                let x = step();
                seq += 1;
                let s = if b == 1 { 10_000 - seq } else { seq };
                let (kind, value) = version_of(s, (x >> 40).is_multiple_of(6));
                owned.push((format!("k{}", (x >> 33) % 300).into_bytes(), s, kind, value));
            }
            let entries = as_entries(&owned);
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
