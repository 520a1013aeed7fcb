//! The hashed memtable index (`trie` and `semisorted` keyspaces): user key → its versions,
//! newest first.
//!
//! Keys and values live in per-shard [`Arena`]s. Each shard is a
//! `hashbrown::HashTable` of [`Slot`]s under a `parking_lot::RwLock`: the one writer (the
//! group-commit leader) takes a shard's write lock per insert; readers and the flush take read
//! locks. The hash is SipHash keyed randomly per memtable (`RandomState`), so crafted keys
//! cannot pile into one bucket chain.
//!
//! With *groups* (`semisorted`, whose scans read one group of keys sharing a fixed-length
//! prefix), a key's shard is chosen by its prefix, and each shard also keeps a table from
//! prefix to the group's newest key; each key record links to the group's previous key, so a
//! group is read by one probe and a walk instead of a scan of the memtable.
//!
//! With an insertion *log* (the key-ordered layouts' memtables), each shard also lists its
//! versions in the order they were inserted, so the memtable can bring its key order up to
//! date with only what arrived since it last looked ([`HashIndex::log_since`]).
//!
//! Arena records (little-endian, never moved once written):
//! - key: the user key's bytes (length in the slot); with groups, preceded by
//!   `previous key of the group: chunk u32 | offset u32 | key length u32`;
//! - version: `trailer: u64 | prev chunk: u32 | prev offset: u32 | value length: u32 | value`,
//!   `prev` naming the next older version (`u32::MAX` chunk: none).

use std::hash::{BuildHasher, RandomState};

use hashbrown::HashTable;
use parking_lot::RwLock;

use super::arena::{Arena, Loc};
use crate::coding::{get_u32, get_u64};
use crate::key::ValueKind;

/// Shards (a power of two); the top bits of a key's hash choose one.
const SHARDS: usize = 16;
/// Most inserts of a batch made under one take of a shard's write lock (a reader of the shard
/// waits for at most this many).
const LOCKED_RUN: usize = 64;
/// Bytes of a version record before its value.
const VERSION_HEADER: usize = 20;
/// Bytes of a grouped key record before the key.
const GROUP_LINK: u32 = 12;

/// One user key in a shard's table.
#[derive(Clone, Copy, Debug)]
struct Slot {
    hash: u64,
    key: Loc,
    key_len: u32,
    newest: Loc,
}

/// Longest group prefix a [`Group`] holds in place.
const INLINE_PREFIX: usize = 8;

/// One group (keys sharing a prefix) in a shard's group table.
#[derive(Clone, Copy, Debug)]
struct Group {
    hash: u64,
    /// The key record (its link header) of the group's newest key.
    newest_key: Loc,
    /// The prefix's bytes when it has at most [`INLINE_PREFIX`] (`inline_len` of them;
    /// `u8::MAX` for a longer one, compared in the arena): finding a new key's group then
    /// reads no arena record, which was a cache miss on most puts of a random fill.
    inline: [u8; INLINE_PREFIX],
    inline_len: u8,
}

impl Group {
    fn new(hash: u64, newest_key: Loc, prefix: &[u8]) -> Group {
        let mut inline = [0; INLINE_PREFIX];
        let inline_len = match inline.get_mut(..prefix.len()) {
            Some(dst) => {
                dst.copy_from_slice(prefix);
                prefix.len() as u8
            }
            None => u8::MAX,
        };
        Group {
            hash,
            newest_key,
            inline,
            inline_len,
        }
    }

    /// Whether the group's prefix is `prefix` (a key's first `n` bytes, or all of a shorter
    /// key), the group's hash already matched.
    fn is(&self, arena: &Arena, prefix: &[u8], n: usize) -> bool {
        match self.inline.get(..usize::from(self.inline_len)) {
            Some(inline) => inline == prefix,
            None => {
                grouped_key(arena, self.newest_key).is_some_and(|(_, k)| prefix_of(k, n) == prefix)
            }
        }
    }
}

#[derive(Default)]
pub(super) struct Shard {
    table: HashTable<Slot>,
    arena: Arena,
    /// Groups by prefix (empty without groups).
    groups: HashTable<Group>,
    /// Every version in insertion order (empty without a log).
    log: Vec<Logged>,
}

/// One version in a shard's insertion log.
#[derive(Clone, Copy, Debug)]
struct Logged {
    key: Loc,
    key_len: u32,
    version: Loc,
}

/// Where one version is: its shard and its record in that shard's arena.
#[derive(Clone, Copy, Debug)]
pub(super) struct VersionRef {
    shard: u32,
    at: Loc,
}

impl Default for VersionRef {
    /// A reference to no version.
    fn default() -> Self {
        VersionRef {
            shard: u32::MAX,
            at: Loc::NONE,
        }
    }
}

/// A grouped key record at `at`: (the group's previous key record, the key).
fn grouped_key(arena: &Arena, at: Loc) -> Option<(Loc, &[u8])> {
    let (c, o) = arena.chunk_of(at)?;
    let prev = Loc {
        chunk: get_u32(c, o)?,
        off: get_u32(c, o + 4)?,
    };
    let len = get_u32(c, o + 8)? as usize;
    let start = o + GROUP_LINK as usize;
    Some((prev, c.get(start..start.checked_add(len)?)?))
}

/// One version of a group's key, copied out: (user key, trailer, value).
pub(super) type GroupEntry = (Vec<u8>, u64, Vec<u8>);

/// The group prefix of `key`: its first `len` bytes (all of a shorter key).
fn prefix_of(key: &[u8], len: usize) -> &[u8] {
    key.get(..len).unwrap_or(key)
}

/// A version read from the arena.
struct Version<'a> {
    trailer: u64,
    prev: Loc,
    value: &'a [u8],
}

fn version(arena: &Arena, at: Loc) -> Option<Version<'_>> {
    let (c, o) = arena.chunk_of(at)?;
    let trailer = get_u64(c, o)?;
    let prev = Loc {
        chunk: get_u32(c, o + 8)?,
        off: get_u32(c, o + 12)?,
    };
    let len = get_u32(c, o + 16)? as usize;
    let value = c.get(o + VERSION_HEADER..(o + VERSION_HEADER).checked_add(len)?)?;
    Some(Version {
        trailer,
        prev,
        value,
    })
}

/// Points the version record at `at` to `prev` (its next older version).
fn set_prev(arena: &mut Arena, at: Loc, prev: Loc) {
    let mut link = [0u8; 8];
    let (c, f) = link.split_at_mut(4);
    c.copy_from_slice(&prev.chunk.to_le_bytes());
    f.copy_from_slice(&prev.off.to_le_bytes());
    if let Some(h) = arena.bytes_mut(
        Loc {
            chunk: at.chunk,
            off: at.off + 8,
        },
        8,
    ) {
        h.copy_from_slice(&link);
    }
}

impl Shard {
    fn append_version(&mut self, trailer: u64, prev: Loc, value: &[u8]) -> Loc {
        let len = value.len() as u32;
        let t = trailer.to_le_bytes();
        let (c, o, l) = (
            prev.chunk.to_le_bytes(),
            prev.off.to_le_bytes(),
            len.to_le_bytes(),
        );
        let h: [u8; VERSION_HEADER] = [
            t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], c[0], c[1], c[2], c[3], o[0], o[1],
            o[2], o[3], l[0], l[1], l[2], l[3],
        ];
        self.arena.append(&[&h, value])
    }
}

/// The sharded hash index of a hashed memtable.
pub(super) struct HashIndex {
    shards: Box<[RwLock<Shard>]>,
    hasher: RandomState,
    /// Prefix length of the groups, if the index keeps them.
    group_prefix: Option<usize>,
    /// Whether each shard keeps its insertion log.
    logged: bool,
}

impl HashIndex {
    /// An empty index sized for about `entries` keys.
    /// With `group_prefix`, the index also keeps the groups of keys sharing their first
    /// `group_prefix` bytes ([`HashIndex::group`]).
    /// With `logged`, each shard keeps its insertion log ([`HashIndex::log_since`]).
    pub(super) fn with_capacity(entries: usize, group_prefix: Option<usize>, logged: bool) -> Self {
        let per = entries / SHARDS;
        HashIndex {
            shards: (0..SHARDS)
                .map(|_| {
                    RwLock::new(Shard {
                        table: HashTable::with_capacity(per),
                        arena: Arena::default(),
                        groups: HashTable::new(),
                        log: if logged {
                            Vec::with_capacity(per)
                        } else {
                            Vec::new()
                        },
                    })
                })
                .collect(),
            hasher: RandomState::new(),
            group_prefix,
            logged,
        }
    }

    /// The hash of `key`'s group prefix, when the index keeps groups.
    fn group_hash(&self, key: &[u8]) -> Option<u64> {
        self.group_prefix
            .map(|n| self.hasher.hash_one(prefix_of(key, n)))
    }

    /// The shard of a key of hash `hash` and group hash `group_hash`: chosen by the group's
    /// hash when there are groups (a group lives in one shard), by `hash` otherwise.
    fn shard(&self, hash: u64, group_hash: Option<u64>) -> Option<&RwLock<Shard>> {
        self.shards.get(Self::shard_of(hash, group_hash))
    }

    /// The index of the shard of [`HashIndex::shard`].
    fn shard_of(hash: u64, group_hash: Option<u64>) -> usize {
        (group_hash.unwrap_or(hash) >> 60) as usize % SHARDS
    }

    /// Appends the record of a new key: with groups (`group_hash` set), linked to its group's
    /// newest key and made the group's newest.
    fn append_key(&self, s: &mut Shard, key: &[u8], group_hash: Option<u64>) -> Loc {
        let (Some(n), Some(gh)) = (self.group_prefix, group_hash) else {
            return s.arena.append(&[key]);
        };
        let prefix = prefix_of(key, n);
        let arena = &s.arena;
        let group = s
            .groups
            .find_mut(gh, |g| g.hash == gh && g.is(arena, prefix, n));
        let prev = group.as_ref().map_or(Loc::NONE, |g| g.newest_key);
        let (c, o, l) = (
            prev.chunk.to_le_bytes(),
            prev.off.to_le_bytes(),
            (key.len() as u32).to_le_bytes(),
        );
        let link: [u8; GROUP_LINK as usize] = [
            c[0], c[1], c[2], c[3], o[0], o[1], o[2], o[3], l[0], l[1], l[2], l[3],
        ];
        let at = s.arena.append(&[&link, key]);
        match group {
            Some(g) => g.newest_key = at,
            None => {
                s.groups
                    .insert_unique(gh, Group::new(gh, at, prefix), |g| g.hash);
            }
        }
        Loc {
            chunk: at.chunk,
            off: at.off + GROUP_LINK,
        }
    }

    /// Adds a version (`trailer` = sequence number and kind) of `key`.
    pub(super) fn insert(&self, key: &[u8], trailer: u64, value: &[u8]) {
        let hash = self.hasher.hash_one(key);
        let group_hash = self.group_hash(key);
        let Some(shard) = self.shard(hash, group_hash) else {
            return;
        };
        self.insert_locked(&mut shard.write(), key, hash, group_hash, trailer, value);
    }

    /// Adds the versions `(key, sequence number, kind, value)` of one write batch. The hashes are computed
    /// first, then each shard's entries are inserted in batch order under one write lock per
    /// run of at most [`LOCKED_RUN`] entries. Taking and releasing a shard's lock per insert
    /// (a locked instruction each way, which waits for the insert's stores, cache misses into
    /// a table of tens of MiB, to complete) was most of a `trie` batch fill's insert time;
    /// without it the misses of neighbouring inserts overlap.
    pub(super) fn insert_batch(&self, entries: &[(&[u8], u64, ValueKind, &[u8])]) {
        // (shard, hash, group hash) of each entry, in batch order.
        let placed: Vec<(usize, u64, Option<u64>)> = entries
            .iter()
            .map(|&(key, _, _, _)| {
                let hash = self.hasher.hash_one(key);
                let gh = self.group_hash(key);
                (Self::shard_of(hash, gh), hash, gh)
            })
            .collect();
        // Entry indexes by shard, each shard's in batch order (a counting sort): a key's
        // versions are in one shard, so they arrive in sequence order as before.
        let mut starts = [0usize; SHARDS + 1];
        for &(s, _, _) in &placed {
            if let Some(n) = starts.get_mut(s + 1) {
                *n += 1;
            }
        }
        for i in 0..SHARDS {
            let before = starts.get(i).copied().unwrap_or(0);
            if let Some(n) = starts.get_mut(i + 1) {
                *n += before;
            }
        }
        let mut next = starts;
        let mut order = vec![0usize; entries.len()];
        for (i, &(s, _, _)) in placed.iter().enumerate() {
            if let Some(at) = next.get_mut(s) {
                if let Some(o) = order.get_mut(*at) {
                    *o = i;
                }
                *at += 1;
            }
        }
        for (s, shard) in self.shards.iter().enumerate() {
            let (from, to) = (
                starts.get(s).copied().unwrap_or(0),
                starts.get(s + 1).copied().unwrap_or(0),
            );
            for run in order.get(from..to).unwrap_or_default().chunks(LOCKED_RUN) {
                let mut g = shard.write();
                for &i in run {
                    if let (Some(&(key, seq, kind, value)), Some(&(_, hash, gh))) =
                        (entries.get(i), placed.get(i))
                    {
                        let trailer = crate::key::trailer(seq, kind);
                        self.insert_locked(&mut g, key, hash, gh, trailer, value);
                    }
                }
            }
        }
    }

    /// Adds a version of `key` (of hash `hash` and group hash `group_hash`) to its shard `s`,
    /// write-locked by the caller.
    fn insert_locked(
        &self,
        s: &mut Shard,
        key: &[u8],
        hash: u64,
        group_hash: Option<u64>,
        trailer: u64,
        value: &[u8],
    ) {
        let found = s
            .table
            .find(hash, |e| {
                // The stored hash first: a table tag match with another key then costs no
                // arena read (a cache miss).
                e.hash == hash
                    && e.key_len as usize == key.len()
                    && s.arena.bytes(e.key, key.len()) == Some(key)
            })
            .copied();
        let Some(slot) = found else {
            let key_at = self.append_key(s, key, group_hash);
            let newest = s.append_version(trailer, Loc::NONE, value);
            if self.logged {
                s.log.push(Logged {
                    key: key_at,
                    key_len: key.len() as u32,
                    version: newest,
                });
            }
            s.table.insert_unique(
                hash,
                Slot {
                    hash,
                    key: key_at,
                    key_len: key.len() as u32,
                    newest,
                },
                |e| e.hash,
            );
            return;
        };
        // Versions arrive in sequence order, so the new one is normally the newest; an older
        // one is linked in where it belongs.
        let mut newer = Loc::NONE;
        let mut at = slot.newest;
        while let Some(v) = version(&s.arena, at) {
            if v.trailer < trailer {
                break;
            }
            newer = at;
            at = v.prev;
        }
        let rec = s.append_version(trailer, at, value);
        if self.logged {
            s.log.push(Logged {
                key: slot.key,
                key_len: slot.key_len,
                version: rec,
            });
        }
        if newer == Loc::NONE {
            if let Some(e) = s.table.find_mut(hash, |e| e.key == slot.key) {
                e.newest = rec;
            }
        } else {
            set_prev(&mut s.arena, newer, rec);
        }
    }

    /// The newest version of `key` with sequence number ≤ `seq`: `(trailer, value)`.
    pub(super) fn get(&self, key: &[u8], seq: u64) -> Option<(u64, Vec<u8>)> {
        let hash = self.hasher.hash_one(key);
        let g = self.shard(hash, self.group_hash(key))?.read();
        let slot = g.table.find(hash, |e| {
            e.hash == hash
                && e.key_len as usize == key.len()
                && g.arena.bytes(e.key, key.len()) == Some(key)
        })?;
        let mut at = slot.newest;
        while let Some(v) = version(&g.arena, at) {
            if v.trailer >> 8 <= seq {
                return Some((v.trailer, v.value.to_vec()));
            }
            at = v.prev;
        }
        None
    }

    /// Every version of every key of the group of `prefix` (which must be as long as the
    /// group prefix; `None` without groups or for another length), as `(user key, trailer,
    /// value)` copies, in no order.
    pub(super) fn group(&self, prefix: &[u8]) -> Option<Vec<GroupEntry>> {
        if self.group_prefix != Some(prefix.len()) {
            return None;
        }
        let gh = self.hasher.hash_one(prefix);
        let g = self.shard(gh, Some(gh))?.read();
        let mut out = Vec::new();
        let Some(group) = g
            .groups
            .find(gh, |e| e.hash == gh && e.is(&g.arena, prefix, prefix.len()))
        else {
            return Some(out);
        };
        let mut at = group.newest_key;
        while let Some((prev, key)) = grouped_key(&g.arena, at) {
            let hash = self.hasher.hash_one(key);
            let slot = g.table.find(hash, |e| {
                e.hash == hash
                    && e.key_len as usize == key.len()
                    && g.arena.bytes(e.key, key.len()) == Some(key)
            });
            let mut v = slot.map_or(Loc::NONE, |s| s.newest);
            while let Some(ver) = version(&g.arena, v) {
                out.push((key.to_vec(), ver.trailer, ver.value.to_vec()));
                v = ver.prev;
            }
            at = prev;
        }
        Some(out)
    }

    /// Visits the versions each shard logged since `covered` said (one count per shard,
    /// advanced here) as (user key, trailer, where the version is), one shard read-locked at a
    /// time so that an insert waits for at most one shard's share of the news.
    pub(super) fn log_since(
        &self,
        covered: &mut Vec<usize>,
        mut f: impl FnMut(&[u8], u64, VersionRef),
    ) {
        covered.resize(self.shards.len(), 0);
        for ((s, shard), seen) in self.shards.iter().enumerate().zip(covered.iter_mut()) {
            let g = shard.read();
            for e in g.log.get(*seen..).unwrap_or_default() {
                let (Some(key), Some(v)) = (
                    g.arena.bytes(e.key, e.key_len as usize),
                    version(&g.arena, e.version),
                ) else {
                    continue;
                };
                f(
                    key,
                    v.trailer,
                    VersionRef {
                        shard: s as u32,
                        at: e.version,
                    },
                );
            }
            *seen = g.log.len();
        }
    }

    /// A reader of versions by [`VersionRef`] that read-locks each shard at its first use
    /// and holds it until dropped.
    pub(super) fn values(&self) -> Values<'_> {
        Values {
            index: self,
            held: [const { None }; SHARDS],
        }
    }

    /// Every shard read-locked, for [`HashIndex::visit_held`] (a flush of a memtable nothing
    /// writes any more: the guards block only inserts).
    pub(super) fn read_all(&self) -> Vec<parking_lot::RwLockReadGuard<'_, Shard>> {
        self.shards.iter().map(|s| s.read()).collect()
    }

    /// Visits every entry of `guards` (from [`HashIndex::read_all`]) as (user key, trailer,
    /// value) borrowed from the arenas for as long as the guards are held; a key's versions
    /// together, newest first. Keys are visited in the order they were appended to their
    /// shard's arena, not in hash-table order: a key's record and its first version sit side by
    /// side there, so the walk reads the arena front to back and the hardware prefetches it.
    /// Walked in table order, each key was a cache miss into a memtable of tens of MiB: with
    /// the first compare of each key, a sixth of a `trie` fill's background samples.
    pub(super) fn visit_held<'a>(
        guards: &'a [parking_lot::RwLockReadGuard<'_, Shard>],
        mut f: impl FnMut(&'a [u8], u64, &'a [u8]),
    ) {
        let mut slots: Vec<&'a Slot> = Vec::new();
        for g in guards {
            let g: &'a Shard = g;
            slots.clear();
            slots.extend(g.table.iter());
            slots.sort_unstable_by_key(|s| (s.key.chunk, s.key.off));
            for slot in slots.iter().copied() {
                let key = g
                    .arena
                    .bytes(slot.key, slot.key_len as usize)
                    .unwrap_or_default();
                let mut at = slot.newest;
                while let Some(v) = version(&g.arena, at) {
                    f(key, v.trailer, v.value);
                    at = v.prev;
                }
            }
        }
    }
}

/// Versions read by [`VersionRef`] ([`HashIndex::values`]).
pub(super) struct Values<'a> {
    index: &'a HashIndex,
    held: [Option<parking_lot::RwLockReadGuard<'a, Shard>>; SHARDS],
}

impl Values<'_> {
    /// The value of the version `r` names.
    pub(super) fn value(&mut self, r: VersionRef) -> Option<&[u8]> {
        let s = r.shard as usize;
        let slot = self.held.get_mut(s)?;
        if slot.is_none() {
            *slot = Some(self.index.shards.get(s)?.read());
        }
        let g = slot.as_ref()?;
        Some(version(&g.arena, r.at)?.value)
    }
}

#[cfg(test)]
mod tests {
    use super::super::arena::CHUNK;
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn groups_are_found_by_prefixes_held_in_place_and_in_the_arena() {
        // 8 bytes: the longest prefix a group holds in place; 9 and 12: compared in the arena.
        for n in [1usize, 8, 9, 12] {
            let idx = HashIndex::with_capacity(64, Some(n), false);
            let mut model: BTreeMap<Vec<u8>, std::collections::BTreeSet<Vec<u8>>> = BTreeMap::new();
            for i in 0..2_000u32 {
                // 37 prefixes that differ in their last byte only; every 50th key is shorter
                // than the prefix (its own group, of its whole bytes).
                let mut key = vec![b'p'; n];
                if let Some(last) = key.last_mut() {
                    *last = b'A' + (i % 37) as u8;
                }
                if i % 50 == 0 {
                    key.pop();
                } else {
                    key.extend_from_slice(format!("{}", i % 300).as_bytes());
                }
                idx.insert(&key, u64::from(i + 1) << 8 | 1, b"v");
                let prefix = key.get(..n).unwrap_or(&key).to_vec();
                model.entry(prefix).or_default().insert(key);
            }
            for (prefix, keys) in &model {
                let got = idx.group(prefix);
                if prefix.len() < n {
                    assert!(got.is_none(), "a shorter prefix is not asked for");
                    continue;
                }
                let got: std::collections::BTreeSet<Vec<u8>> =
                    got.expect("grouped").into_iter().map(|e| e.0).collect();
                assert_eq!(&got, keys, "prefix length {n}");
            }
            let mut absent = vec![b'p'; n];
            absent[0] = b'q';
            assert_eq!(idx.group(&absent).map(|g| g.len()), Some(0));
        }
    }

    #[test]
    fn matches_a_model_with_large_values_and_out_of_order_versions() {
        let idx = HashIndex::with_capacity(64, None, true);
        let mut model: BTreeMap<Vec<u8>, BTreeMap<u64, Vec<u8>>> = BTreeMap::new();
        let mut trailer = 10u64 << 8;
        for i in 0..3000u32 {
            // Two hot keys first (a late version lands between two older ones), then 700 keys.
            let key = format!("k{}", if i < 600 { i % 2 } else { i % 700 }).into_bytes();
            // Every 97th value is larger than a chunk; every 13th version arrives late.
            let len = if i % 97 == 0 {
                CHUNK + 5
            } else {
                (i % 40) as usize
            };
            let value: Vec<u8> = (0..len).map(|j| (i as usize + j) as u8).collect();
            let t = if i % 13 == 0 {
                trailer - (3 << 8)
            } else {
                trailer
            } | 1;
            trailer += 1 << 8;
            if model.get(&key).is_some_and(|m| m.contains_key(&t)) {
                continue;
            }
            idx.insert(&key, t, &value);
            model.entry(key).or_default().insert(t, value);
        }
        for (k, versions) in &model {
            for seq in [0u64, 500, 1500, 2999, u64::MAX >> 8] {
                let want = versions.range(..=(seq << 8 | 0xff)).next_back();
                let got = idx.get(k, seq);
                assert_eq!(got.as_ref().map(|(t, v)| (t, v)), want);
            }
        }
        assert_eq!(idx.get(b"absent", u64::MAX >> 8), None);
        // The flush's visitor (arena order), and the insertion log, read in two parts.
        type Visit = (Vec<u8>, u64, Vec<u8>);
        let mut visited: Vec<Visit> = Vec::new();
        let guards = idx.read_all();
        HashIndex::visit_held(&guards, |k, t, v| visited.push((k.to_vec(), t, v.to_vec())));
        drop(guards);
        let mut logged: Vec<Visit> = Vec::new();
        let mut covered = Vec::new();
        let read_log = |logged: &mut Vec<Visit>, covered: &mut Vec<usize>| {
            let mut refs = Vec::new();
            idx.log_since(covered, |k, t, r| refs.push((k.to_vec(), t, r)));
            let mut values = idx.values();
            for (k, t, r) in refs {
                let v = values.value(r).expect("a logged version").to_vec();
                logged.push((k, t, v));
            }
        };
        read_log(&mut logged, &mut covered);
        read_log(&mut logged, &mut covered);
        assert_eq!(logged.len(), visited.len(), "each version logged once");
        idx.insert(b"late", u64::MAX >> 1, b"x");
        read_log(&mut logged, &mut covered);
        assert_eq!(logged.len(), visited.len() + 1, "only the news read again");
        assert_eq!(logged.last().map(|e| e.0.as_slice()), Some(&b"late"[..]));
        logged.pop();
        logged.sort();
        let mut sorted = visited.clone();
        sorted.sort();
        assert_eq!(logged, sorted);
        for entries in [&visited] {
            let mut seen: BTreeMap<Vec<u8>, Vec<u64>> = BTreeMap::new();
            let mut last: Option<&[u8]> = None;
            let mut keys_started = 0;
            for (k, t, v) in entries {
                if last != Some(k.as_slice()) {
                    keys_started += 1;
                    last = Some(k);
                }
                assert_eq!(
                    model.get(k).and_then(|m| m.get(t)).map(Vec::as_slice),
                    Some(v.as_slice())
                );
                seen.entry(k.clone()).or_default().push(*t);
            }
            // Each key's versions come together (one run per key), newest first.
            assert_eq!(keys_started, model.len());
            for (k, ts) in &seen {
                let mut want: Vec<u64> = model
                    .get(k)
                    .map(|m| m.keys().copied().collect())
                    .unwrap_or_default();
                want.reverse();
                assert_eq!(ts, &want);
            }
        }
    }
}
