//! Cuckoo filters over keyed 64-bit key hashes: the multi-level cuckoo filter of SlimDB §3.2
//! ([`MultiLevelCuckoo`], one per stepped level, answering *which sub-level* may hold a key), the
//! plain cuckoo filter it is measured against ([`CuckooFilter`]), the bucketed table both are
//! built on, and the multi-level filter's byte encoding (layout: `docs/format.md`, "Multi-level
//! cuckoo filter (semisorted)"). Decisions and measurements: `docs/architecture-semisorted.md`.
//!
//! # The table
//!
//! A key's hash `h` (SipHash-1-3 keyed with the database's 16-byte hash key, 64-bit output, of
//! the whole key; or, for the `semisorted` layout's filters, [`split_hash`] of the SipHashes of
//! its prefix and suffix, which the layout has computed already: [`KeyHashing`]) gives a
//! fingerprint `x = ⌊(h >> 32) × F / 2³²⌋` in `0..F` and a home bucket
//! `j = ⌊(h mod 2³²) × m / 2³²⌋` among the `m` buckets of a segment. The table has `s`
//! segments: `x` names its segment `⌊x·s / F⌋`, and a slot stores only the *tag*
//! `x − lb(seg) + 1` (`lb(i) = ⌈i·F / s⌉`; 0 is an empty slot), in the bits the widest
//! segment's tags need. The other bucket is `alt(j) = (H(x) − j) mod m` with `H(x)` a fixed mix
//! of the fingerprint scaled to `0..m`: an involution for any `m`, so a segment is sized to the
//! entries, not to a power of two. A bucket has `b` slots; a slot packs `tag | id << t` in
//! `t + v` bits of one bit array.
//!
//! The table *grows* when a kick walk fails: it takes one more segment, and every entry, whose
//! fingerprint its segment and tag give back, is re-filed into the same bucket pair of the
//! segment its fingerprint now names — so growth needs no keys, adds `1/s` to the memory, and
//! narrows the tags by the share of the fingerprint the segment index now holds (the
//! false-positive rate is about `2b·load·s / F`). `F = reserve × (2^f − 1)` keeps tags of `f`
//! bits up to `reserve` segments ([`CuckooParams::reserve_segments`]). A failed walk is undone
//! before growing, so the entry in hand is always the new key's.
//!
//! # The multi-level filter
//!
//! The *primary* table holds `(fp, sub-level id)` with the uniqueness invariant: a key's *class*
//! (its segment, bucket pair and fingerprint) has at most one entry. The *secondary* table holds
//! full keys with their id, for keys whose class already had an entry from another key. The id
//! value `2^v − 1` is reserved: an *ambiguous* entry, written when a conflict cannot go to the
//! secondary table (its byte budget is spent), answers [`Answer::ProbeAll`] — the per-level
//! probing of a Bloom-filtered store, for that class only. So `v` id bits serve `2^v − 1`
//! sub-levels.
//!
//! Invariants (for the keys *present* in the level, i.e. with a version in one of its
//! sub-levels; `newest(x)` is the newest sub-level holding `x`):
//! 1. a present key in the secondary table has its entry there with id `newest(x)`;
//! 2. a present key not in the secondary table has an entry in its class, and that entry is
//!    ambiguous or has id `newest(x)`; a non-ambiguous entry serves at most one such key (its
//!    *owner*);
//! 3. unless the filter overflowed, every key in the secondary table has an entry in its class
//!    (the class entry is a *gate*: a lookup that finds no entry answers [`Answer::Absent`]
//!    without reading the secondary table, which gives the same answers as Algorithm 1's
//!    secondary-first order).
//!
//! Lookups of present keys therefore answer `SubLevel(newest(x))` or `ProbeAll`, never
//! `Absent` and never an older sub-level. Insert (Algorithm 2) is told what the caller knows
//! about the key ([`Prior`]): a non-blind write knows whether the key is in the level, which
//! decides whether a class entry is the key's own (update it) or another key's (conflict);
//! a blind write does not, and a conflict of unknown owner is treated as another key's. Ids are
//! opaque labels: *newest* means "inserted last"; the caller keeps the order and renames ids
//! with [`MultiLevelCuckoo::remap`].
//!
//! If even a grown table cannot place an entry (its tags would fall below 2 bits), the
//! filter is *overflowed*: only the secondary table still answers exactly, every other lookup
//! answers `ProbeAll` until [`MultiLevelCuckoo::clear`] or a rebuild.

use std::hash::Hasher;
use std::path::Path;

use hashbrown::HashTable;
use siphasher::sip::SipHasher13;

use crate::coding::{self, Reader};
use crate::error::{Error, Result};
use crate::hint::prefetch;

/// The encoding version [`MultiLevelCuckoo::encode`] writes and `decode` reads: 3, tables of
/// any number of segments, either hashing. Versions 1 (whole-key hashing) and 2 (split hashing)
/// held tables grown by doubling; `decode` refuses them as `Error::Unsupported` (the layout
/// never wrote them to disk: it rebuilds its filters from the tables at open).
pub const FORMAT_VERSION: u8 = 3;
/// Smallest fingerprint width accepted.
pub const MIN_FINGERPRINT_BITS: u32 = 4;
/// Largest fingerprint width accepted.
pub const MAX_FINGERPRINT_BITS: u32 = 32;
/// Largest id width accepted (ids are `u8`).
pub const MAX_ID_BITS: u32 = 8;
/// Largest bucket size accepted.
pub const MAX_SLOTS_PER_BUCKET: u32 = 8;
/// Largest kick-walk length accepted (a decoded filter's inserts stay bounded).
pub const MAX_KICKS: u32 = 1 << 16;
/// Largest number of buckets a table may reach (bucket numbers and class ids use 32 bits).
pub const MAX_BUCKETS: u64 = 1 << 31;
/// Narrowest tag growth leaves: a table takes no more segments when its tags would be narrower.
pub const MIN_DISCRIMINATING_BITS: u32 = 2;
/// The load [`MultiLevelCuckoo::reserve`] plans for: about where 500-kick walks in 4-slot
/// buckets start to fail (95.8–96.7 %, measured), so that sub-levels a little larger than the
/// first one still fit in one segment each.
pub const RESERVE_LOAD: f64 = 0.96;
/// Longest key the secondary table holds (a longer key's conflicts degrade to ambiguous).
pub const MAX_SECONDARY_KEY: usize = (1 << 24) - 1;

/// The keyed 64-bit hash of a key the cuckoo filters are built from: SipHash-1-3 keyed with the
/// database's 16-byte hash key (as `htable::placement_hash`, with a 64-bit output).
pub fn key_hash(hash_key: &[u8; 16], key: &[u8]) -> u64 {
    let mut h = SipHasher13::new_with_key(hash_key);
    h.write(key);
    h.finish()
}

/// The hashes of a key's prefix (its first `prefix_len` bytes, all of a shorter key) and of
/// the rest, each [`key_hash`]: the `semisorted` layout's order, and the inputs of
/// [`split_hash`].
pub fn split_hashes(hash_key: &[u8; 16], prefix_len: usize, key: &[u8]) -> (u64, u64) {
    let (p, s) = key.split_at(prefix_len.min(key.len()));
    (key_hash(hash_key, p), key_hash(hash_key, s))
}

/// A key's filter hash from its prefix and suffix hashes ([`split_hashes`]): the `semisorted`
/// layout has both for every key it orders, so its filters need no third SipHash. Two rounds
/// of splitmix64's finalizer, so that keys sharing a prefix or a suffix hash get independent
/// fingerprints and buckets (`ph ^ sh` alone would give every key whose prefix and suffix are
/// the same bytes the hash 0).
pub fn split_hash(ph: u64, sh: u64) -> u64 {
    mix64(ph ^ mix64(sh))
}

/// How a filter turns a key into its 64-bit hash `h`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyHashing {
    /// [`key_hash`] of the whole key (encoding version 1).
    Whole,
    /// [`split_hash`] of [`split_hashes`] at this prefix length (encoding version 2): the
    /// `semisorted` layout's filters.
    Split(u32),
}

impl KeyHashing {
    /// The hash of `key` under `hash_key`.
    pub fn hash(self, hash_key: &[u8; 16], key: &[u8]) -> u64 {
        match self {
            KeyHashing::Whole => key_hash(hash_key, key),
            KeyHashing::Split(n) => {
                let (ph, sh) = split_hashes(hash_key, n as usize, key);
                split_hash(ph, sh)
            }
        }
    }
}

/// Entries [`MultiLevelCuckoo::insert_all`] looks ahead to start loading their buckets: enough
/// to cover a memory miss at the rate inserts run, few enough that the lines are still cached
/// when the insert comes.
const PREFETCH_AHEAD: usize = 8;

/// What a [`MultiLevelCuckoo`] says about a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// The key is in no sub-level of the level.
    Absent,
    /// If the key is in the level, its newest version is in this sub-level (and in no newer
    /// one). An absent key may get this answer (a false positive).
    SubLevel(u8),
    /// The filter cannot name the sub-level: probe the sub-levels newest first.
    ProbeAll,
}

/// What the caller of [`MultiLevelCuckoo::insert`] knows about the key's presence in the level
/// *at the time of the call* (Algorithm 2's "store has x in level l′?", answered by the read a
/// non-blind write already made).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prior {
    /// A blind write: nothing is known.
    Unknown,
    /// The key has no version in the level.
    Absent,
    /// The key's newest version in the level is in this sub-level.
    Present(u8),
}

/// Shape and limits of a [`MultiLevelCuckoo`] (the same fields shape a [`CuckooFilter`], which
/// has no ids and no secondary table).
#[derive(Clone, Debug, PartialEq)]
pub struct CuckooParams {
    /// Tag width `f` (4..=32) once the table has `reserve_segments` segments: fingerprints
    /// take `F = reserve_segments × (2^f − 1)` values, a table of `s` segments stores
    /// `⌈log2(⌈F/s⌉ + 1)⌉`-bit tags, and the false-positive rate is about `2b·load·s / F`.
    pub fingerprint_bits: u32,
    /// Segments the fingerprint range is made for (≥ 1): growth up to this many segments keeps
    /// the false-positive rate at or below `2b·load / (2^f − 1)`; past it each segment adds to it.
    pub reserve_segments: u32,
    /// Segments the table starts with (≥ 1), `capacity` spread over them.
    pub segments: u32,
    /// Sub-level id width `v` (1..=8): `2^v − 1` sub-levels, the last value marks ambiguous
    /// entries. A stepped level of `r` sub-levels needs `⌈log2(r + 1)⌉`; a filter widens its
    /// ids when asked for more ([`MultiLevelCuckoo::ensure_ids`]).
    pub id_bits: u32,
    /// Slots per bucket `b` (1..=8).
    pub slots_per_bucket: u32,
    /// Number of entries the table is sized for before it would grow.
    pub capacity: usize,
    /// Fraction of slots filled at `capacity` (0.5..=1.0).
    pub max_load: f64,
    /// Displacements tried before an insert gives up on the current table and grows it.
    pub max_kicks: u32,
    /// Bytes the secondary table may hold (its hash table and key arena, as allocated).
    pub secondary_budget_bytes: usize,
}

impl CuckooParams {
    /// Defaults for a level of up to `capacity` distinct keys and `sub_levels` sub-levels:
    /// 14-bit fingerprints (SlimDB's) without growth reserve, 4-slot buckets sized for 94 %
    /// load, 500 kicks, and a secondary-table budget of one bit per key of capacity (at least
    /// 4 KiB) — several times the `n × ε` entries blind-free writes put there.
    pub fn for_level(capacity: usize, sub_levels: u32) -> CuckooParams {
        CuckooParams {
            fingerprint_bits: 14,
            reserve_segments: 1,
            segments: 1,
            id_bits: id_bits_for(sub_levels),
            slots_per_bucket: 4,
            capacity,
            max_load: 0.94,
            max_kicks: 500,
            secondary_budget_bytes: (capacity / 8).max(4096),
        }
    }

    /// The fingerprint range `F`.
    fn fp_range(&self) -> u64 {
        u64::from(self.reserve_segments) * ((1u64 << self.fingerprint_bits) - 1)
    }

    /// Buckets of each of the `segments` initial segments.
    fn base_buckets(&self) -> u64 {
        let per_segment = self.capacity.div_ceil(self.segments.max(1) as usize);
        buckets_for(per_segment, self.slots_per_bucket, self.max_load)
    }

    fn validate(&self, ids: bool) -> Result<()> {
        let bad = |what: &str| Err(Error::InvalidArgument(format!("cuckoo filter: {what}")));
        if !(MIN_FINGERPRINT_BITS..=MAX_FINGERPRINT_BITS).contains(&self.fingerprint_bits) {
            return bad("fingerprint_bits must be 4..=32");
        }
        if self.reserve_segments == 0 || self.fp_range() > u64::from(u32::MAX) {
            return bad("reserve_segments must be >= 1 with (2^f - 1) × reserve_segments < 2^32");
        }
        if self.segments == 0
            || tag_bits_for(self.fp_range(), self.segments) < MIN_DISCRIMINATING_BITS
        {
            return bad("segments must be >= 1 and leave tags of 2 bits or more");
        }
        if ids && !(1..=MAX_ID_BITS).contains(&self.id_bits) {
            return bad("id_bits must be 1..=8");
        }
        if !(1..=MAX_SLOTS_PER_BUCKET).contains(&self.slots_per_bucket) {
            return bad("slots_per_bucket must be 1..=8");
        }
        if !(0.5..=1.0).contains(&self.max_load) {
            return bad("max_load must be 0.5..=1.0");
        }
        if self.max_kicks > MAX_KICKS {
            return bad("max_kicks must be at most 65536");
        }
        if self.base_buckets() * u64::from(self.segments) > MAX_BUCKETS {
            return bad("capacity needs more than 2^31 buckets");
        }
        Ok(())
    }
}

/// Id bits for `ids` sub-levels and the ambiguous mark: `⌈log2(ids + 1)⌉`, at least 1.
pub fn id_bits_for(ids: u32) -> u32 {
    (u32::BITS - ids.leading_zeros()).max(1)
}

/// Buckets of a table sized for `capacity` entries at `max_load` (at least one).
fn buckets_for(capacity: usize, slots: u32, max_load: f64) -> u64 {
    let per_bucket = f64::from(slots) * max_load;
    ((capacity as f64 / per_bucket).ceil() as u64).max(1)
}

/// splitmix64's finalizer: a fixed bijection on u64.
fn mix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// Where a key's entry may be: its fingerprint `x` (in `0..F`), its segment, its home bucket
/// within the segment, and the tag a slot stores for it there.
#[derive(Clone, Copy, Debug)]
struct Pos {
    x: u64,
    seg: u32,
    j: u32,
    tag: u64,
}

/// The bucketed cuckoo table: `segments` segments of `base` buckets of `slots` packed slots.
/// A fingerprint `x` in `0..fp_range` names its segment `⌊x·s / F⌋`; a slot stores the tag
/// `x − lb(seg) + 1` (1-based: 0 is an empty slot), `lb(seg) = ⌈seg·F / s⌉`, in `tag_bits`.
#[derive(Clone, Debug)]
struct Table {
    words: Vec<u64>,
    fp_range: u64,
    segments: u32,
    tag_bits: u32,
    val_bits: u32,
    slots: u32,
    base: u32,
    occupied: usize,
    /// `lb(0..=segments)`: the first fingerprint of each segment, and `fp_range` last.
    lb: Vec<u64>,
}

/// Bits a tag of a table of `segments` segments over fingerprints `0..fp_range` takes: tags
/// run from 1 to the largest segment's width, `⌈F / s⌉`.
fn tag_bits_for(fp_range: u64, segments: u32) -> u32 {
    let widest = fp_range.div_ceil(u64::from(segments.max(1)));
    u64::BITS - widest.leading_zeros()
}

impl Table {
    fn new(fp_range: u64, val_bits: u32, slots: u32, base: u32, segments: u32) -> Table {
        let s = u64::from(segments.max(1));
        let tag_bits = tag_bits_for(fp_range, segments);
        let total_slots = u64::from(base) * s * u64::from(slots);
        let bits = total_slots * u64::from(tag_bits + val_bits);
        Table {
            words: vec![0; bits.div_ceil(64) as usize],
            fp_range,
            segments: s as u32,
            tag_bits,
            val_bits,
            slots,
            base,
            occupied: 0,
            lb: (0..=s).map(|i| (i * fp_range).div_ceil(s)).collect(),
        }
    }

    fn slot_bits(&self) -> u32 {
        self.tag_bits + self.val_bits
    }
    fn slot_mask(&self) -> u64 {
        (1u64 << self.slot_bits()) - 1
    }
    fn tag_mask(&self) -> u64 {
        (1u64 << self.tag_bits) - 1
    }
    fn buckets(&self) -> u64 {
        u64::from(self.base) * u64::from(self.segments)
    }
    fn total_slots(&self) -> usize {
        (self.buckets() * u64::from(self.slots)) as usize
    }
    /// First fingerprint of segment `seg` (`fp_range` past the last).
    fn lb(&self, seg: u32) -> u64 {
        self.lb.get(seg as usize).copied().unwrap_or(self.fp_range)
    }
    /// Whether the table may take one more segment: its tags keep at least
    /// [`MIN_DISCRIMINATING_BITS`] bits and its buckets stay countable.
    fn can_grow(&self) -> bool {
        tag_bits_for(self.fp_range, self.segments + 1) >= MIN_DISCRIMINATING_BITS
            && self.buckets() + u64::from(self.base) <= MAX_BUCKETS
    }

    fn pos(&self, h: u64) -> Pos {
        let x = ((h >> 32) * self.fp_range) >> 32;
        self.pos_of(x, (((h & 0xFFFF_FFFF) * u64::from(self.base)) >> 32) as u32)
    }

    /// The place of fingerprint `x` with home bucket `j`.
    fn pos_of(&self, x: u64, j: u32) -> Pos {
        let seg = (x * u64::from(self.segments) / self.fp_range.max(1)) as u32;
        Pos {
            x,
            seg,
            j,
            tag: x + 1 - self.lb(seg),
        }
    }

    /// The fingerprint of the entry `content` in segment `seg`.
    fn x_of(&self, seg: u32, content: u64) -> u64 {
        (self.lb(seg) + (content & self.tag_mask())).saturating_sub(1)
    }

    /// The other bucket (within the segment) of an entry of fingerprint `x` in bucket `j`.
    fn alt(&self, j: u32, x: u64) -> u32 {
        let base = u64::from(self.base);
        let hf = ((u128::from(mix64(x)) * u128::from(base)) >> 64) as u64;
        // hf < base and j < base: one conditional subtraction instead of a division.
        let x = hf + base - u64::from(j);
        (if x >= base { x - base } else { x }) as u32
    }

    /// The class id of `(segment, bucket pair, fingerprint)`: the lower global bucket of the
    /// pair above the fingerprint.
    fn class(&self, p: Pos) -> u64 {
        self.class_with(p, self.alt(p.j, p.x))
    }

    /// [`Table::class`] with `p`'s other bucket `j2` computed by the caller.
    fn class_with(&self, p: Pos, j2: u32) -> u64 {
        let lo = p.j.min(j2);
        ((u64::from(p.seg) * u64::from(self.base) + u64::from(lo)) << 32) | p.x
    }

    fn bucket_start(&self, seg: u32, j: u32) -> usize {
        ((u64::from(seg) * u64::from(self.base) + u64::from(j)) * u64::from(self.slots)) as usize
    }

    /// (segment, bucket within it) of slot `idx`.
    fn place_of(&self, idx: usize) -> (u32, u32) {
        let b = (idx / self.slots as usize) as u64;
        let base = u64::from(self.base);
        ((b / base) as u32, (b % base) as u32)
    }

    fn get(&self, idx: usize) -> u64 {
        let w = self.slot_bits() as usize;
        let bit = idx * w;
        let (wi, off) = (bit / 64, bit % 64);
        let lo = self.words.get(wi).copied().unwrap_or(0) >> off;
        let v = if off + w > 64 {
            lo | (self.words.get(wi + 1).copied().unwrap_or(0) << (64 - off))
        } else {
            lo
        };
        v & self.slot_mask()
    }

    fn set(&mut self, idx: usize, v: u64) {
        let w = self.slot_bits() as usize;
        let mask = self.slot_mask();
        let v = v & mask;
        let bit = idx * w;
        let (wi, off) = (bit / 64, bit % 64);
        if let Some(word) = self.words.get_mut(wi) {
            *word = (*word & !(mask << off)) | (v << off);
        }
        if off + w > 64 {
            let sh = 64 - off;
            if let Some(word) = self.words.get_mut(wi + 1) {
                *word = (*word & !(mask >> sh)) | (v >> sh);
            }
        }
    }

    fn tag_of(&self, content: u64) -> u64 {
        content & self.tag_mask()
    }
    fn val_of(&self, content: u64) -> u64 {
        content >> self.tag_bits
    }
    fn content(&self, tag: u64, val: u64) -> u64 {
        tag | (val << self.tag_bits)
    }

    /// Starts loading both buckets of a key of hash `h` (see [`prefetch`]).
    fn prefetch(&self, h: u64) {
        let p = self.pos(h);
        let w = self.slot_bits() as usize;
        for j in [p.j, self.alt(p.j, p.x)] {
            let bit = self.bucket_start(p.seg, j) * w;
            if let Some(word) = self.words.get(bit / 64) {
                prefetch(word);
            }
        }
    }

    /// The slot holding an entry of `p`'s class (the home bucket is searched first).
    fn find(&self, p: Pos) -> Option<usize> {
        self.find_in(p.seg, p.j, p.tag).or_else(|| {
            let j2 = self.alt(p.j, p.x);
            if j2 == p.j {
                None
            } else {
                self.find_in(p.seg, j2, p.tag)
            }
        })
    }

    fn find_in(&self, seg: u32, j: u32, tag: u64) -> Option<usize> {
        let start = self.bucket_start(seg, j);
        (start..start + self.slots as usize).find(|&idx| {
            let c = self.get(idx);
            c != 0 && c & self.tag_mask() == tag
        })
    }

    /// Puts `content` in a free slot of bucket `j` of segment `seg`.
    fn place(&mut self, seg: u32, j: u32, content: u64) -> bool {
        let start = self.bucket_start(seg, j);
        for idx in start..start + self.slots as usize {
            if self.get(idx) == 0 {
                self.set(idx, content);
                self.occupied += 1;
                return true;
            }
        }
        false
    }

    /// Inserts a new entry (the caller checked its class has none), displacing entries along a
    /// random walk of at most `max_kicks` steps. On failure the walk is undone and the table is
    /// as before.
    fn insert_new(&mut self, p: Pos, val: u64, max_kicks: u32, rng: &mut u64) -> bool {
        let content = self.content(p.tag, val);
        let j2 = self.alt(p.j, p.x);
        if self.place(p.seg, p.j, content) || self.place(p.seg, j2, content) {
            return true;
        }
        self.kick_walk(p, j2, content, max_kicks, rng)
    }

    /// Looks in the bucket pair of `p` (the home bucket `p.j`, then `j2`, its other bucket)
    /// for an entry of `p`'s class and, while there is none, for the first free slot, in one
    /// pass over each bucket: `Ok(slot of the entry)` or `Err(first free slot)`.
    fn probe(&self, p: Pos, j2: u32) -> std::result::Result<usize, Option<usize>> {
        let mut free = None;
        let slots = self.slots as usize;
        let tag_mask = self.tag_mask();
        for j in [p.j, j2] {
            let start = self.bucket_start(p.seg, j);
            for idx in start..start + slots {
                let c = self.get(idx);
                if c == 0 {
                    free = free.or(Some(idx));
                } else if c & tag_mask == p.tag {
                    return Ok(idx);
                }
            }
            if j2 == p.j {
                break;
            }
        }
        Err(free)
    }

    /// Puts the new entry `content` of `p` (whose other bucket is `j2`) in slot `free` when
    /// there is one (found by [`Table::probe`]), else along a kick walk as
    /// [`Table::insert_new`] does.
    fn insert_probed(
        &mut self,
        p: Pos,
        j2: u32,
        free: Option<usize>,
        content: u64,
        max_kicks: u32,
        rng: &mut u64,
    ) -> bool {
        if let Some(idx) = free {
            self.set(idx, content);
            self.occupied += 1;
            return true;
        }
        self.kick_walk(p, j2, content, max_kicks, rng)
    }

    /// Looks one step ahead from the full bucket `j` of segment `seg`: when a resident can
    /// move to a free slot of its other bucket, it moves there and `content` takes its slot
    /// (true). The residents' other buckets are started loading together, so the step costs
    /// about one memory miss and finds room about as often as four random kicks: near the
    /// 96 % load a level's table is grown to, random walks of dozens of dependent misses were
    /// most of the filter's time in a `semisorted` fill. Changes nothing when it fails.
    fn relocate_one(&mut self, seg: u32, j: u32, content: u64) -> bool {
        let start = self.bucket_start(seg, j);
        let w = self.slot_bits() as usize;
        let mut alts = [u32::MAX; MAX_SLOTS_PER_BUCKET as usize];
        for (i, a) in alts.iter_mut().take(self.slots as usize).enumerate() {
            let c = self.get(start + i);
            let other = self.alt(j, self.x_of(seg, c));
            if other != j {
                *a = other;
                let bit = self.bucket_start(seg, other) * w;
                if let Some(word) = self.words.get(bit / 64) {
                    prefetch(word);
                }
            }
        }
        for (i, &a) in alts.iter().take(self.slots as usize).enumerate() {
            if a == u32::MAX {
                continue;
            }
            let c = self.get(start + i);
            if self.place(seg, a, c) {
                self.set(start + i, content);
                return true;
            }
        }
        false
    }

    /// Places `content` of `p` (other bucket `j2`; both buckets full) by displacing entries
    /// along a random walk of at most `max_kicks` steps; on failure the walk is undone.
    fn kick_walk(&mut self, p: Pos, j2: u32, content: u64, max_kicks: u32, rng: &mut u64) -> bool {
        *rng = mix64(*rng);
        let seed = *rng;
        // Slot choices come from (seed, step), so the undo can replay them without a log.
        let slots = u64::from(self.slots);
        let slot_at = |k: u32| (mix64(seed ^ u64::from(k)) % slots) as usize;
        let mut cur = content;
        let mut j = if seed >> 63 == 0 { p.j } else { j2 };
        for k in 0..max_kicks {
            if self.relocate_one(p.seg, j, cur) {
                return true;
            }
            let idx = self.bucket_start(p.seg, j) + slot_at(k);
            let victim = self.get(idx);
            self.set(idx, cur);
            cur = victim;
            j = self.alt(j, self.x_of(p.seg, cur));
            if self.place(p.seg, j, cur) {
                return true;
            }
        }
        for k in (0..max_kicks).rev() {
            j = self.alt(j, self.x_of(p.seg, cur));
            let idx = self.bucket_start(p.seg, j) + slot_at(k);
            let back = self.get(idx);
            self.set(idx, cur);
            cur = back;
        }
        debug_assert_eq!(cur, content, "an undone kick walk returns the new entry");
        false
    }

    /// The table with `segments` segments (more or fewer than now) and `val_bits`-bit values
    /// (at least as wide; an ambiguous value `2^v − 1` stays ambiguous), every entry re-filed
    /// under its fingerprint's new segment and tag, in its bucket pair. `None` if a kick walk of
    /// `max_kicks` fails (the caller asks for more segments).
    ///
    /// One pass reads the old table in order and puts each entry in the bucket it was in
    /// (one of its pair in every segment), in the segment its fingerprint now names: the new
    /// table is written nearly in order too. Entries whose bucket is full there are placed
    /// after the pass, by [`Table::insert_new`] (the other bucket, or a kick walk). Re-filing
    /// entry by entry with `insert_new` computed both buckets of every entry and walked at
    /// random through a table of megabytes (most of a semisorted fill's filter time: a level's
    /// table is re-filed at every arrival).
    fn regrown(
        &self,
        segments: u32,
        val_bits: u32,
        max_kicks: u32,
        rng: &mut u64,
    ) -> Option<Table> {
        let mut t = Table::new(self.fp_range, val_bits, self.slots, self.base, segments);
        let (old_amb, new_amb) = ((1u64 << self.val_bits) - 1, (1u64 << val_bits) - 1);
        let (tag_mask, slots) = (self.tag_mask(), self.slots as usize);
        let mut left: Vec<(u64, u32, u64)> = Vec::new();
        let mut idx = 0usize;
        for seg in 0..self.segments {
            let lb = self.lb(seg);
            // The new segment of this segment's first fingerprint; a larger one is found by
            // stepping over the new bounds (no division per entry).
            let first = t.pos_of(lb, 0).seg;
            for j in 0..self.base {
                for _ in 0..slots {
                    let c = self.get(idx);
                    idx += 1;
                    if c == 0 {
                        continue;
                    }
                    let x = (lb + (c & tag_mask)).saturating_sub(1);
                    let v = c >> self.tag_bits;
                    let v = if v == old_amb { new_amb } else { v };
                    let mut s = first;
                    while s + 1 < t.segments && x >= t.lb(s + 1) {
                        s += 1;
                    }
                    let content = (x + 1 - t.lb(s)) | (v << t.tag_bits);
                    if !t.place(s, j, content) {
                        left.push((x, j, v));
                    }
                }
            }
        }
        for (x, j, v) in left {
            if !t.insert_new(t.pos_of(x, j), v, max_kicks, rng) {
                return None;
            }
        }
        Some(t)
    }

    /// The class id of the entry in slot `idx`.
    fn class_of_slot(&self, idx: usize, content: u64) -> u64 {
        let (seg, j) = self.place_of(idx);
        self.class(self.pos_of(self.x_of(seg, content), j))
    }

    fn heap_bytes(&self) -> usize {
        self.words.capacity() * std::mem::size_of::<u64>()
    }
}

/// `table` re-filed into `segments` segments (more if a re-filing kick walk fails) with
/// `val_bits`-bit values; `None` when no table of that shape or larger holds its entries.
fn refiled(
    table: &Table,
    segments: u32,
    val_bits: u32,
    kicks: u32,
    rng: &mut u64,
) -> Option<Table> {
    let mut s = segments.max(1);
    loop {
        if let Some(t) = table.regrown(s, val_bits, kicks, rng) {
            return Some(t);
        }
        s += 1;
        if tag_bits_for(table.fp_range, s) < MIN_DISCRIMINATING_BITS
            || u64::from(table.base) * u64::from(s) > MAX_BUCKETS
        {
            return None;
        }
    }
}

/// A secondary-table entry: the key's class, its key bytes in the arena, its id.
#[derive(Clone, Copy, Debug)]
struct SecEntry {
    class: u64,
    off: u32,
    /// Key length in the upper 24 bits, id in the lower 8.
    len_id: u32,
}

impl SecEntry {
    fn len(&self) -> usize {
        (self.len_id >> 8) as usize
    }
    fn id(&self) -> u8 {
        self.len_id as u8
    }
    fn set_id(&mut self, id: u8) {
        self.len_id = (self.len_id & !0xFF) | u32::from(id);
    }
    fn key<'a>(&self, arena: &'a [u8]) -> &'a [u8] {
        let start = self.off as usize;
        arena.get(start..start + self.len()).unwrap_or(&[])
    }
}

/// The secondary table: full keys with their sub-level id, in a hash table keyed by the key's
/// class (so "has this class a key here?" is one probe) over one arena of key bytes.
#[derive(Clone, Debug, Default)]
struct Secondary {
    table: HashTable<SecEntry>,
    arena: Vec<u8>,
    /// Arena bytes of removed entries.
    garbage: usize,
    /// The allocation a table of twice the capacity takes, measured once per capacity: a full
    /// table is asked again on every conflict until something is removed.
    grown_bytes: Option<(usize, usize)>,
}

fn class_hash(class: u64) -> u64 {
    mix64(class)
}

impl Secondary {
    fn len(&self) -> usize {
        self.table.len()
    }
    fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    fn get(&self, class: u64, key: &[u8]) -> Option<u8> {
        let arena = &self.arena;
        self.table
            .find(class_hash(class), |e| {
                e.class == class && e.key(arena) == key
            })
            .map(SecEntry::id)
    }

    fn set_id(&mut self, class: u64, key: &[u8], id: u8) -> bool {
        let arena = &self.arena;
        match self.table.find_mut(class_hash(class), |e| {
            e.class == class && e.key(arena) == key
        }) {
            Some(e) => {
                e.set_id(id);
                true
            }
            None => false,
        }
    }

    fn has_class(&self, class: u64) -> bool {
        self.table
            .find(class_hash(class), |e| e.class == class)
            .is_some()
    }

    fn remove(&mut self, class: u64, key: &[u8]) -> bool {
        let arena = &self.arena;
        match self.table.find_entry(class_hash(class), |e| {
            e.class == class && e.key(arena) == key
        }) {
            Ok(entry) => {
                let (e, _) = entry.remove();
                self.garbage += e.len();
                self.maybe_compact();
                true
            }
            Err(_) => false,
        }
    }

    /// Adds a key (not present) if the table and arena, as they would be allocated, stay
    /// within `budget` bytes.
    fn try_insert(&mut self, class: u64, key: &[u8], id: u8, budget: usize) -> bool {
        if key.len() > MAX_SECONDARY_KEY {
            return false;
        }
        let grow_table = self.table.len() >= self.table.capacity();
        let new_cap = (self.table.capacity() * 2).max(4);
        let table_bytes = if grow_table {
            match self.grown_bytes {
                Some((cap, bytes)) if cap == new_cap => bytes,
                _ => {
                    let bytes = HashTable::<SecEntry>::with_capacity(new_cap).allocation_size();
                    self.grown_bytes = Some((new_cap, bytes));
                    bytes
                }
            }
        } else {
            self.table.allocation_size()
        };
        let needed = self.arena.len() + key.len();
        let grow_arena = needed > self.arena.capacity();
        let arena_cap = if grow_arena {
            needed.max(self.arena.capacity() * 2).max(64)
        } else {
            self.arena.capacity()
        };
        if table_bytes + arena_cap > budget || u32::try_from(needed).is_err() {
            return false;
        }
        if grow_table {
            self.table
                .reserve(new_cap - self.table.len(), |e| class_hash(e.class));
        }
        if grow_arena {
            self.arena.reserve_exact(arena_cap - self.arena.len());
        }
        // The table may have grown more than predicted (removed entries leave tombstones that
        // count against its capacity): measure, and give the memory back if it is too much.
        if self.heap_bytes() > budget {
            self.table.shrink_to_fit(|e| class_hash(e.class));
            self.arena.shrink_to_fit();
            return false;
        }
        self.push(class, key, id);
        true
    }

    /// Appends `key` to the arena and enters it under `class` with sub-level `id`.
    fn push(&mut self, class: u64, key: &[u8], id: u8) {
        let e = SecEntry {
            class,
            off: self.arena.len() as u32,
            len_id: ((key.len() as u32) << 8) | u32::from(id),
        };
        self.arena.extend_from_slice(key);
        self.table
            .insert_unique(class_hash(class), e, |e| class_hash(e.class));
    }

    /// Rewrites the arena without removed keys once they are most of it.
    fn maybe_compact(&mut self) {
        if self.garbage <= 256 || self.garbage * 2 <= self.arena.len() {
            return;
        }
        let mut arena = Vec::with_capacity(self.arena.len() - self.garbage);
        for e in self.table.iter_mut() {
            let start = e.off as usize;
            let key = self.arena.get(start..start + e.len()).unwrap_or(&[]);
            e.off = arena.len() as u32;
            arena.extend_from_slice(key);
        }
        self.arena = arena;
        self.garbage = 0;
    }

    fn clear(&mut self) {
        *self = Secondary::default();
    }

    /// A table of distinct keys (with their classes), allocated for exactly these keys.
    fn with_keys(keys: &[(u64, &[u8], u8)]) -> Secondary {
        let mut s = Secondary {
            table: HashTable::with_capacity(keys.len()),
            arena: Vec::with_capacity(keys.iter().map(|(_, key, _)| key.len()).sum()),
            garbage: 0,
            grown_bytes: None,
        };
        for &(class, key, id) in keys {
            s.push(class, key, id);
        }
        s
    }

    fn heap_bytes(&self) -> usize {
        self.table.allocation_size() + self.arena.capacity()
    }
}

/// Measured memory and state of a [`MultiLevelCuckoo`].
#[derive(Clone, Debug, PartialEq)]
pub struct CuckooStats {
    /// Entries in the primary table (ambiguous ones included).
    pub primary_entries: usize,
    /// Primary entries marked ambiguous.
    pub ambiguous_entries: usize,
    /// Slots of the primary table.
    pub primary_slots: usize,
    /// Keys in the secondary table.
    pub secondary_entries: usize,
    /// Bytes allocated by the primary table's bit array.
    pub primary_bytes: usize,
    /// Bytes allocated by the secondary table (hash table and key arena).
    pub secondary_bytes: usize,
    /// Segments of the primary table beyond the first (times a table made with one grew).
    pub growths: u32,
    /// Bits of a slot's tag (the stored part of the fingerprint) at the current segments.
    pub tag_bits: u32,
    /// Bits of a slot's sub-level id.
    pub id_bits: u32,
    /// Whether the filter overflowed (see the module documentation).
    pub overflowed: bool,
}

/// A [`MultiLevelCuckoo`]'s heap by part and its primary table's shape.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FilterMemory {
    /// Bytes allocated by the primary table's bit array.
    pub primary_bytes: usize,
    /// Bytes allocated by the secondary table (hash table and key arena).
    pub secondary_bytes: usize,
    /// Slots of the primary table.
    pub primary_slots: usize,
    /// Entries in the primary table.
    pub primary_entries: usize,
    /// Keys in the secondary table.
    pub secondary_entries: usize,
    /// Segments of the primary table.
    pub segments: u32,
    /// Bits of a slot's tag.
    pub tag_bits: u32,
    /// Bits of a slot's sub-level id.
    pub id_bits: u32,
}

/// The multi-level cuckoo filter of one stepped level (SlimDB §3.2): which sub-level holds the
/// newest version of a key. See the module documentation for the invariants.
#[derive(Clone, Debug)]
pub struct MultiLevelCuckoo {
    hash_key: [u8; 16],
    hashing: KeyHashing,
    params: CuckooParams,
    table: Table,
    secondary: Secondary,
    overflowed: bool,
    rng: u64,
}

impl MultiLevelCuckoo {
    /// An empty filter hashing whole keys with `hash_key` (random per database).
    pub fn new(hash_key: [u8; 16], params: CuckooParams) -> Result<MultiLevelCuckoo> {
        Self::with_hashing(hash_key, KeyHashing::Whole, params)
    }

    /// An empty filter hashing keys as `hashing` says, with `hash_key`.
    pub fn with_hashing(
        hash_key: [u8; 16],
        hashing: KeyHashing,
        params: CuckooParams,
    ) -> Result<MultiLevelCuckoo> {
        params.validate(true)?;
        let table = Table::new(
            params.fp_range(),
            params.id_bits,
            params.slots_per_bucket,
            params.base_buckets() as u32,
            params.segments,
        );
        Ok(MultiLevelCuckoo {
            rng: key_hash(&hash_key, b"multi-level cuckoo kicks"),
            hash_key,
            hashing,
            params,
            table,
            secondary: Secondary::default(),
            overflowed: false,
        })
    }

    /// A filter of the distinct `keys`, each with the sub-level of its newest version — the
    /// rebuild at open from a merged scan of the level's sub-levels.
    pub fn build<'a>(
        hash_key: [u8; 16],
        params: CuckooParams,
        keys: impl IntoIterator<Item = (&'a [u8], u8)>,
    ) -> Result<MultiLevelCuckoo> {
        let mut f = MultiLevelCuckoo::new(hash_key, params)?;
        for (key, id) in keys {
            f.insert(key, id, Prior::Absent)?;
        }
        Ok(f)
    }

    /// The parameters the filter was made with (the budget and kicks as decoded).
    pub fn params(&self) -> &CuckooParams {
        &self.params
    }

    /// Number of sub-level ids (`0..id_capacity()`).
    pub fn id_capacity(&self) -> u8 {
        self.ambiguous_value() as u8
    }

    fn ambiguous_value(&self) -> u64 {
        (1u64 << self.table.val_bits) - 1
    }

    /// How the filter hashes keys.
    pub fn hashing(&self) -> KeyHashing {
        self.hashing
    }

    /// The hash of `key` the filter files it under ([`KeyHashing::hash`] with its hash key).
    pub fn hash(&self, key: &[u8]) -> u64 {
        self.hashing.hash(&self.hash_key, key)
    }

    /// Algorithm 1: the newest sub-level that may hold `key`.
    pub fn lookup(&self, key: &[u8]) -> Answer {
        self.lookup_hashed(self.hash(key), key)
    }

    /// Starts loading the two buckets [`lookup_hashed`](Self::lookup_hashed) of `hash` will
    /// read, so that a lookup probing the filters of several levels waits for their cache
    /// misses once, together, instead of one after the other. Changes nothing.
    pub fn prefetch_hashed(&self, hash: u64) {
        self.table.prefetch(hash);
    }

    /// [`lookup`](Self::lookup) with the key's hash already computed (`hash` must be
    /// [`hash`](Self::hash) of `key`): the filters of several stepped levels of one database
    /// share one hash per lookup, and the `semisorted` layout derives it from the hashes it
    /// orders the key by.
    pub fn lookup_hashed(&self, hash: u64, key: &[u8]) -> Answer {
        let p = self.table.pos(hash);
        if self.overflowed {
            return match self.secondary.get(self.table.class(p), key) {
                Some(id) => Answer::SubLevel(id),
                None => Answer::ProbeAll,
            };
        }
        let Some(idx) = self.table.find(p) else {
            return Answer::Absent;
        };
        if !self.secondary.is_empty() {
            if let Some(id) = self.secondary.get(self.table.class(p), key) {
                return Answer::SubLevel(id);
            }
        }
        let v = self.table.val_of(self.table.get(idx));
        if v == self.ambiguous_value() {
            Answer::ProbeAll
        } else {
            Answer::SubLevel(v as u8)
        }
    }

    /// Algorithm 2: `key` now has its newest version in sub-level `sub_level`, newer than every
    /// sub-level it was in before. `prior` is what the caller knows of the key's presence in
    /// the level before this insert; it must be true at the time of the call (a read made
    /// before a compaction moved keys out of the level is stale: pass [`Prior::Unknown`]).
    pub fn insert(&mut self, key: &[u8], sub_level: u8, prior: Prior) -> Result<()> {
        self.insert_hashed(self.hash(key), key, sub_level, prior)
    }

    /// [`insert`](Self::insert) of every `(hash, key)` of `items` (each hash
    /// [`hash`](Self::hash) of its key, each key once) with the same sub-level and prior, in
    /// order. The same result as one insert after the other, faster: each insert's buckets
    /// are a cache miss into a table of megabytes, and these are started
    /// [`PREFETCH_AHEAD`] keys early.
    pub fn insert_all(
        &mut self,
        items: &[(u64, &[u8])],
        sub_level: u8,
        prior: Prior,
    ) -> Result<()> {
        for (i, &(h, key)) in items.iter().enumerate() {
            if let Some(&(ahead, _)) = items.get(i + PREFETCH_AHEAD) {
                self.table.prefetch(ahead);
            }
            self.insert_hashed(h, key, sub_level, prior)?;
        }
        Ok(())
    }

    /// [`insert`](Self::insert) with the key's hash already computed (`h` must be
    /// [`hash`](Self::hash) of `key`).
    pub fn insert_hashed(&mut self, h: u64, key: &[u8], sub_level: u8, prior: Prior) -> Result<()> {
        if sub_level >= self.id_capacity() {
            return Err(Error::InvalidArgument(format!(
                "sub-level id {sub_level} out of range 0..{}",
                self.id_capacity()
            )));
        }
        let p = self.table.pos(h);
        let j2 = self.table.alt(p.j, p.x);
        let class = self.table.class_with(p, j2);
        // A key in the secondary table is answered from there: update it.
        if !self.secondary.is_empty() && self.secondary.set_id(class, key, sub_level) {
            return Ok(());
        }
        let idx = match self.table.probe(p, j2) {
            Ok(idx) => idx,
            Err(free) => {
                // An empty class: the key owns a new entry.
                let content = self.table.content(p.tag, u64::from(sub_level));
                let kicks = self.params.max_kicks;
                if !self
                    .table
                    .insert_probed(p, j2, free, content, kicks, &mut self.rng)
                {
                    self.add_entry(h, key, sub_level);
                }
                return Ok(());
            }
        };
        let v = self.table.val_of(self.table.get(idx));
        if let Prior::Present(s) = prior {
            if v == u64::from(s) && v != self.ambiguous_value() {
                // The key is in the level and not in the secondary table, so this entry is
                // its own (invariant 2): a newer level number for the same key.
                let c = self.table.content(p.tag, u64::from(sub_level));
                self.table.set(idx, c);
                return Ok(());
            }
        }
        // A conflicting fingerprint from another key, or from a key of unknown identity.
        let budget = self.params.secondary_budget_bytes;
        if !self.secondary.try_insert(class, key, sub_level, budget) {
            let ambiguous = self.table.content(p.tag, self.ambiguous_value());
            self.table.set(idx, ambiguous);
        }
        Ok(())
    }

    /// Adds the entry of a key whose class has none and whose kick walk in the table as it is
    /// failed: the table grows until a walk succeeds.
    fn add_entry(&mut self, h: u64, key: &[u8], id: u8) {
        while self.table.can_grow() {
            if !self.grow(self.table.segments + 1, self.table.val_bits) {
                break;
            }
            let p = self.table.pos(h);
            if self
                .table
                .insert_new(p, u64::from(id), self.params.max_kicks, &mut self.rng)
            {
                return;
            }
        }
        // No room even after growing: only the secondary table can still be exact.
        self.overflowed = true;
        let class = self.table.class(self.table.pos(h));
        let budget = self.params.secondary_budget_bytes;
        self.secondary.try_insert(class, key, id, budget);
    }

    /// Re-files the table into `segments` segments (more if a re-filing kick walk fails; fewer
    /// than now when entries left) with `val_bits`-bit ids, and the secondary table under the
    /// keys' new classes. Returns false, changing nothing, when no table of that shape or
    /// larger holds the entries.
    fn grow(&mut self, segments: u32, val_bits: u32) -> bool {
        let kicks = self.params.max_kicks;
        let Some(table) = refiled(&self.table, segments, val_bits, kicks, &mut self.rng) else {
            return false;
        };
        self.table = table;
        self.rekey_secondary();
        true
    }

    /// Files the secondary table's keys under their classes in the primary table as it is
    /// now (after a re-filing changed the segments).
    fn rekey_secondary(&mut self) {
        if self.secondary.is_empty() {
            return;
        }
        let old = std::mem::take(&mut self.secondary.table);
        let mut table = HashTable::with_capacity(old.len());
        for mut e in old {
            let p = self.table.pos(self.hash(e.key(&self.secondary.arena)));
            e.class = self.table.class(p);
            table.insert_unique(class_hash(e.class), e, |e| class_hash(e.class));
        }
        self.secondary.table = table;
    }

    /// The segments [`reserve`](Self::reserve) of `additional` entries grows the table to
    /// (`None`: it does not grow it).
    fn reserve_target(&self, additional: usize) -> Option<u32> {
        let t = &self.table;
        let per_segment = f64::from(t.base) * f64::from(t.slots) * RESERVE_LOAD;
        let want = ((t.occupied + additional) as f64 / per_segment.max(1.0)).ceil() as u64;
        let want = u32::try_from(want).unwrap_or(u32::MAX);
        if want <= t.segments {
            return None;
        }
        let fits = |s: u32| {
            tag_bits_for(t.fp_range, s) >= MIN_DISCRIMINATING_BITS
                && u64::from(t.base) * u64::from(s) <= MAX_BUCKETS
        };
        // Grow by at least half the segments there are: each growth re-files every entry, so
        // growing to the bare need at every arrival re-filed a level of k sub-levels k − 1
        // times (its background CPU nearly doubled at 50M keys); this keeps the re-filings per
        // level logarithmic in its sub-levels. The bare need when that much does not fit.
        let ahead = want.max(t.segments.saturating_add(t.segments.div_ceil(2)));
        [ahead, want].into_iter().find(|&s| fits(s))
    }

    /// The id bits [`ensure_ids`](Self::ensure_ids) of `ids` widens the ids to (`None`: they
    /// are wide enough).
    fn id_bits_target(&self, ids: usize) -> Result<Option<u32>> {
        if ids <= usize::from(self.id_capacity()) {
            return Ok(None);
        }
        u32::try_from(ids)
            .ok()
            .map(id_bits_for)
            .filter(|b| *b <= MAX_ID_BITS)
            .map(Some)
            .ok_or_else(|| {
                Error::InvalidArgument(format!("cuckoo filter: {ids} sub-level ids (at most 255)"))
            })
    }

    /// Makes room for `additional` more entries: adds the segments a load of
    /// [`RESERVE_LOAD`] needs before the inserts, instead of one at a time after failed kick
    /// walks. A table that cannot grow that far is left as it is (inserts still grow it, or
    /// overflow).
    pub fn reserve(&mut self, additional: usize) {
        if let Some(want) = self.reserve_target(additional) {
            self.grow(want, self.table.val_bits);
        }
    }

    /// A copy of the filter made ready for an arrival of `additional` keys with ids `0..ids`:
    /// what a clone followed by [`ensure_ids`](Self::ensure_ids)`(ids)` and
    /// [`reserve`](Self::reserve)`(additional)` gives, with at most one re-filing, made
    /// straight from this filter's table (the clone's copy of the table, which the re-filing
    /// replaced at once, is not made).
    pub fn for_arrival(&self, ids: usize, additional: usize) -> Result<MultiLevelCuckoo> {
        let bits = self.id_bits_target(ids)?;
        let segments = self.reserve_target(additional);
        if bits.is_none() && segments.is_none() {
            return Ok(self.clone());
        }
        let t = &self.table;
        let val_bits = bits.unwrap_or(t.val_bits);
        let mut rng = self.rng;
        let table = match refiled(
            t,
            segments.unwrap_or(t.segments),
            val_bits,
            self.params.max_kicks,
            &mut rng,
        ) {
            Some(table) => table,
            // No room for the ids: as `ensure_ids` says.
            None if bits.is_some() => {
                return Err(Error::InvalidArgument(
                    "cuckoo filter: no room to widen the ids".into(),
                ))
            }
            // No room for the segments: the table as it is (as `reserve` leaves it).
            None => return Ok(self.clone()),
        };
        let mut params = self.params.clone();
        params.id_bits = val_bits;
        let mut f = MultiLevelCuckoo {
            hash_key: self.hash_key,
            hashing: self.hashing,
            params,
            table,
            secondary: self.secondary.clone(),
            overflowed: self.overflowed,
            rng,
        };
        f.rekey_secondary();
        Ok(f)
    }

    /// Gives back the segments the entries no longer need (after sub-levels retired): the
    /// table is re-filed into as few segments as hold its entries at [`RESERVE_LOAD`], when
    /// that is fewer than now. The tags widen with it (the fingerprints are whole).
    pub fn shrink_to_fit(&mut self) {
        let t = &self.table;
        let per_segment = f64::from(t.base) * f64::from(t.slots) * RESERVE_LOAD;
        let want = ((t.occupied as f64 / per_segment.max(1.0)).ceil() as u32).max(1);
        if want < t.segments {
            self.grow(want, t.val_bits);
        }
    }

    /// Widens the ids, if needed, so that sub-levels `0..ids` have one (at most 255; an
    /// ambiguous entry stays ambiguous). The table keeps its entries and segments.
    pub fn ensure_ids(&mut self, ids: usize) -> Result<()> {
        let Some(bits) = self.id_bits_target(ids)? else {
            return Ok(());
        };
        // The same segments: only the slots widen (a re-filing kick walk that fails asks for
        // one more segment).
        if !self.grow(self.table.segments, bits) {
            return Err(Error::InvalidArgument(
                "cuckoo filter: no room to widen the ids".into(),
            ));
        }
        self.params.id_bits = bits;
        Ok(())
    }

    /// Raises the secondary table's budget to `bytes` (a level that grew may keep more keys).
    pub fn raise_secondary_budget(&mut self, bytes: usize) {
        let b = &mut self.params.secondary_budget_bytes;
        *b = (*b).max(bytes);
    }

    /// Entries held: the primary table's (ambiguous ones included) and the secondary table's.
    pub fn len(&self) -> usize {
        self.table.occupied + self.secondary.len()
    }

    /// Whether the filter holds no entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Segments of the primary table.
    pub fn segments(&self) -> u32 {
        self.table.segments
    }

    /// `key` left the level (every version of it was moved out or dropped): its entry goes.
    /// The key must have been present in the level.
    pub fn remove(&mut self, key: &[u8]) {
        let p = self.table.pos(self.hash(key));
        let class = self.table.class(p);
        if !self.secondary.is_empty() && self.secondary.remove(class, key) {
            // The class entry belongs to another key (or to nobody): it stays.
            return;
        }
        let Some(idx) = self.table.find(p) else {
            return;
        };
        let v = self.table.val_of(self.table.get(idx));
        // An ambiguous entry may serve other keys; an entry gating secondary keys stays as
        // their gate (invariant 3), answering for nobody else.
        if v != self.ambiguous_value() && !self.secondary.has_class(class) {
            self.table.set(idx, 0);
            self.table.occupied -= 1;
        }
    }

    /// Renames sub-level ids after a stepped merge: `map[old]` is `Some(new)` when sub-level
    /// `old`'s contents are now in `new`, `None` when it was retired and every key whose newest
    /// version was there has left the level. Ids at or beyond `map.len()` are unchanged. The map
    /// must keep the order of the ids it keeps (merging neighbours into one is allowed). A map
    /// retiring every id clears the filter; one retiring some gives back the segments the
    /// remaining entries do not need ([`shrink_to_fit`](Self::shrink_to_fit)).
    pub fn remap(&mut self, map: &[Option<u8>]) -> Result<()> {
        let cap = self.id_capacity();
        if let Some(bad) = map.iter().flatten().find(|&&n| n >= cap) {
            return Err(Error::InvalidArgument(format!(
                "remap to sub-level id {bad} out of range 0..{cap}"
            )));
        }
        if map.len() >= usize::from(cap) && map.iter().all(Option::is_none) {
            self.clear();
            return Ok(());
        }
        let target = |id: u8| map.get(usize::from(id)).copied();
        let mut removed = 0;
        self.secondary.table.retain(|e| match target(e.id()) {
            Some(Some(n)) => {
                e.set_id(n);
                true
            }
            Some(None) => {
                removed += e.len();
                false
            }
            None => true,
        });
        self.secondary.garbage += removed;
        self.secondary.maybe_compact();
        let amb = self.ambiguous_value();
        let mut emptied = false;
        for idx in 0..self.table.total_slots() {
            let c = self.table.get(idx);
            let v = self.table.val_of(c);
            if c == 0 || v == amb {
                continue;
            }
            let tag = self.table.tag_of(c);
            match target(v as u8) {
                Some(Some(n)) => self.table.set(idx, self.table.content(tag, u64::from(n))),
                Some(None) => {
                    let class = self.table.class_of_slot(idx, c);
                    if self.secondary.has_class(class) {
                        // Still the gate of secondary keys; its id names nothing any more.
                        self.table.set(idx, self.table.content(tag, amb));
                    } else {
                        self.table.set(idx, 0);
                        self.table.occupied -= 1;
                        emptied = true;
                    }
                }
                None => {}
            }
        }
        if emptied {
            self.shrink_to_fit();
        }
        Ok(())
    }

    /// Empties the filter (the level is empty), back to one segment.
    pub fn clear(&mut self) {
        let t = &self.table;
        self.table = Table::new(t.fp_range, t.val_bits, t.slots, t.base, 1);
        self.secondary.clear();
        self.overflowed = false;
    }

    /// Whether the filter overflowed and answers `ProbeAll` for every key outside the
    /// secondary table: the caller should rebuild it with a larger capacity.
    pub fn overflowed(&self) -> bool {
        self.overflowed
    }

    /// Bytes allocated on the heap by the filter, measured from its buffers' capacities (the
    /// primary bit array, the secondary hash table's allocation and its key arena).
    pub fn heap_bytes(&self) -> usize {
        self.table.heap_bytes() + self.secondary.heap_bytes()
    }

    /// [`heap_bytes`](Self::heap_bytes) by part, with the shape that explains it (in constant
    /// time, unlike [`stats`](Self::stats), which counts the ambiguous entries).
    pub fn memory(&self) -> FilterMemory {
        let t = &self.table;
        FilterMemory {
            primary_bytes: t.heap_bytes(),
            secondary_bytes: self.secondary.heap_bytes(),
            primary_slots: t.total_slots(),
            primary_entries: t.occupied,
            secondary_entries: self.secondary.len(),
            segments: t.segments,
            tag_bits: t.tag_bits,
            id_bits: t.val_bits,
        }
    }

    /// Keys held in the secondary table (conflicting fingerprints, with their full keys).
    pub fn secondary_len(&self) -> usize {
        self.secondary.len()
    }

    /// [`heap_bytes`](Self::heap_bytes) in bits per key for a level of `keys` keys.
    pub fn bits_per_key(&self, keys: usize) -> f64 {
        (self.heap_bytes() * 8) as f64 / keys.max(1) as f64
    }

    /// Entry counts and measured sizes.
    pub fn stats(&self) -> CuckooStats {
        let amb = self.ambiguous_value();
        let ambiguous_entries = (0..self.table.total_slots())
            .filter(|&i| {
                let c = self.table.get(i);
                c != 0 && self.table.val_of(c) == amb
            })
            .count();
        CuckooStats {
            primary_entries: self.table.occupied,
            ambiguous_entries,
            primary_slots: self.table.total_slots(),
            secondary_entries: self.secondary.len(),
            primary_bytes: self.table.heap_bytes(),
            secondary_bytes: self.secondary.heap_bytes(),
            growths: self.table.segments - 1,
            tag_bits: self.table.tag_bits,
            id_bits: self.table.val_bits,
            overflowed: self.overflowed,
        }
    }

    /// The check [`decode`](Self::decode) leaves out because it reads the table at random
    /// (one probe per entry): every class has at most one entry. For offline verification of
    /// a filter decoded from `file` at `offset`; a failure is `Error::Corruption`.
    pub fn verify(&self, file: &Path, offset: u64) -> Result<()> {
        let t = &self.table;
        for idx in 0..t.total_slots() {
            let c = t.get(idx);
            if c == 0 {
                continue;
            }
            let (seg, j) = t.place_of(idx);
            let x = t.x_of(seg, c);
            // Searched from the pair's lower bucket, both entries of one class find the
            // same one first.
            let lo = j.min(t.alt(j, x));
            if t.find(t.pos_of(x, lo)) != Some(idx) {
                let at = offset + slot_offset(WORDS_AT, idx, t.slot_bits()) as u64;
                return Err(Error::corruption(
                    file,
                    at,
                    "multi-level cuckoo filter: two entries of one class",
                ));
            }
        }
        Ok(())
    }

    /// The filter's bytes (layout in `docs/format.md`): a header, the primary bit array, the
    /// secondary keys in key order, a masked CRC32C of everything before it.
    pub fn encode(&self) -> Vec<u8> {
        let t = &self.table;
        let mut out = Vec::with_capacity(64 + t.words.len() * 8 + self.secondary.arena.len() * 2);
        out.push(FORMAT_VERSION);
        let (kind, prefix) = match self.hashing {
            KeyHashing::Whole => (1, 0),
            KeyHashing::Split(n) => (2, n),
        };
        out.push(kind);
        out.push(t.val_bits as u8);
        out.push(t.slots as u8);
        out.push(u8::from(self.overflowed));
        coding::put_u32(&mut out, self.params.max_kicks);
        coding::put_u32(&mut out, t.fp_range as u32);
        coding::put_u32(&mut out, t.segments);
        coding::put_u32(&mut out, t.base);
        coding::put_u32(&mut out, prefix);
        coding::put_u64(&mut out, self.params.secondary_budget_bytes as u64);
        coding::put_u64(&mut out, hash_key_check(&self.hash_key));
        coding::put_u64(&mut out, t.occupied as u64);
        coding::put_u64(&mut out, t.words.len() as u64);
        debug_assert_eq!(out.len(), WORDS_AT);
        for w in &t.words {
            coding::put_u64(&mut out, *w);
        }
        let arena = &self.secondary.arena;
        let mut keys: Vec<(&[u8], u8)> = self
            .secondary
            .table
            .iter()
            .map(|e| (e.key(arena), e.id()))
            .collect();
        keys.sort_unstable();
        coding::put_varint(&mut out, keys.len() as u64);
        for (key, id) in keys {
            coding::put_slice(&mut out, key);
            out.push(id);
        }
        let crc = coding::crc(&out);
        coding::put_u32(&mut out, crc);
        out
    }

    /// Decodes [`encode`](Self::encode)'s bytes, which were read from `file` at `offset`.
    /// Damaged bytes (a checksum, size, range or structure check fails) are
    /// `Error::Corruption` naming `file` and the offset of the bad part; a filter encoded with
    /// another hash key is refused the same way (it would deny present keys).
    pub fn decode(
        file: &Path,
        offset: u64,
        hash_key: [u8; 16],
        bytes: &[u8],
    ) -> Result<MultiLevelCuckoo> {
        let bad = |at: usize, d: &str| {
            Error::corruption(
                file,
                offset + at as u64,
                format!("multi-level cuckoo filter: {d}"),
            )
        };
        let body_len = bytes
            .len()
            .checked_sub(4)
            .ok_or_else(|| bad(0, "shorter than its checksum"))?;
        let body = bytes.get(..body_len).unwrap_or(&[]);
        let stored =
            coding::get_u32(bytes, body_len).ok_or_else(|| bad(body_len, "no checksum"))?;
        if coding::crc(body) != stored {
            return Err(bad(body_len, "checksum mismatch"));
        }
        let mut r = Reader::new(body);
        let short = |r: &Reader| bad(r.pos(), "truncated");
        let version = r.u8().ok_or_else(|| short(&r))?;
        if version != FORMAT_VERSION {
            let why = if version < FORMAT_VERSION {
                " (a table grown by doubling, before segments of any count; the `semisorted` \
                 layout rebuilds its filters from the tables)"
            } else {
                ""
            };
            return Err(Error::Unsupported(format!(
                "multi-level cuckoo filter version {version} in {}: this build reads version \
                 {FORMAT_VERSION}{why}",
                file.display()
            )));
        }
        let mut head = [0u8; 4];
        for b in head.iter_mut() {
            *b = r.u8().ok_or_else(|| short(&r))?;
        }
        let [kind, id_bits, slots, flags] = head.map(u32::from);
        let mut nums = [0u32; 5];
        for n in nums.iter_mut() {
            *n = r.u32().ok_or_else(|| short(&r))?;
        }
        let [max_kicks, fp_range, segments, base, prefix] = nums;
        let budget = r.u64().ok_or_else(|| short(&r))?;
        let check = r.u64().ok_or_else(|| short(&r))?;
        let occupied = r.u64().ok_or_else(|| short(&r))?;
        let n_words = r.u64().ok_or_else(|| short(&r))?;
        let hashing = match (kind, prefix) {
            (1, 0) => KeyHashing::Whole,
            (2, n) => KeyHashing::Split(n),
            _ => return Err(bad(1, "unknown key hashing")),
        };
        let fp_range = u64::from(fp_range);
        if !(1..=MAX_ID_BITS).contains(&id_bits)
            || !(1..=MAX_SLOTS_PER_BUCKET).contains(&slots)
            || flags > 1
            || max_kicks > MAX_KICKS
            || base == 0
            || segments == 0
            || u64::from(base) * u64::from(segments) > MAX_BUCKETS
            || tag_bits_for(fp_range, segments) < MIN_DISCRIMINATING_BITS
        {
            return Err(bad(2, "parameters out of range"));
        }
        if check != hash_key_check(&hash_key) {
            return Err(bad(33, "built with a different hash key"));
        }
        debug_assert_eq!(r.pos(), WORDS_AT);
        let tag_bits = tag_bits_for(fp_range, segments);
        let total_bits =
            u64::from(base) * u64::from(segments) * u64::from(slots * (tag_bits + id_bits));
        if n_words != total_bits.div_ceil(64) {
            return Err(bad(49, "bit array size does not match the table's shape"));
        }
        if n_words > ((body.len() - WORDS_AT) / 8) as u64 {
            return Err(short(&r));
        }
        let mut table = Table::new(fp_range, id_bits, slots, base, segments);
        for w in table.words.iter_mut() {
            *w = r.u64().ok_or_else(|| short(&r))?;
        }
        let slot_at = |idx: usize| slot_offset(WORDS_AT, idx, tag_bits + id_bits);
        // Every entry's tag within its segment's width (one pass in memory order; the class
        // check, which reads at random, is `verify`'s).
        let mut seen = 0u64;
        for idx in 0..table.total_slots() {
            let c = table.get(idx);
            if c == 0 {
                continue;
            }
            seen += 1;
            let (seg, _) = table.place_of(idx);
            let tag = table.tag_of(c);
            if tag == 0 || tag > table.lb(seg + 1) - table.lb(seg) {
                return Err(bad(
                    slot_at(idx),
                    "entry outside its segment's fingerprints",
                ));
            }
        }
        if seen != occupied {
            return Err(bad(41, "entry count does not match the table"));
        }
        table.occupied = seen as usize;
        // The fingerprint range as parameters: `F` values, no reserve beyond it.
        let params = CuckooParams {
            fingerprint_bits: u64::BITS - fp_range.leading_zeros(),
            reserve_segments: 1,
            segments,
            id_bits,
            slots_per_bucket: slots,
            capacity: 0,
            max_load: 1.0,
            max_kicks,
            secondary_budget_bytes: usize::try_from(budget).unwrap_or(usize::MAX),
        };
        let mut f = MultiLevelCuckoo {
            rng: key_hash(&hash_key, b"multi-level cuckoo kicks"),
            hash_key,
            hashing,
            params,
            table,
            secondary: Secondary::default(),
            overflowed: flags == 1,
        };
        let n_keys = r.varint().ok_or_else(|| short(&r))?;
        // Each key takes at least two bytes (its length and its id).
        if n_keys > ((body.len() - r.pos()) / 2) as u64 {
            return Err(short(&r));
        }
        let mut keys = Vec::with_capacity(n_keys as usize);
        let mut prev: Option<&[u8]> = None;
        for _ in 0..n_keys {
            let at = r.pos();
            let key = r.slice().ok_or_else(|| short(&r))?;
            let id = r.u8().ok_or_else(|| short(&r))?;
            if id >= f.id_capacity() {
                return Err(bad(at, "secondary id out of range"));
            }
            if prev.is_some_and(|p| p >= key) {
                return Err(bad(at, "secondary keys out of order"));
            }
            if key.len() > MAX_SECONDARY_KEY {
                return Err(bad(at, "secondary key too long"));
            }
            prev = Some(key);
            let p = f.table.pos(f.hash(key));
            if !f.overflowed && f.table.find(p).is_none() {
                return Err(bad(at, "secondary key without a primary entry"));
            }
            keys.push((f.table.class(p), key, id));
        }
        if !r.is_empty() {
            return Err(bad(r.pos(), "bytes after the secondary table"));
        }
        f.secondary = Secondary::with_keys(&keys);
        Ok(f)
    }
}

/// Offset in the encoding of the byte holding the start of slot `idx`.
fn slot_offset(words_at: usize, idx: usize, slot_bits: u32) -> usize {
    words_at + idx * slot_bits as usize / 8
}

/// Offset of the primary bit array in the encoding.
const WORDS_AT: usize = 57;

/// A value derived from the hash key, stored to refuse a filter decoded with another key.
fn hash_key_check(hash_key: &[u8; 16]) -> u64 {
    key_hash(hash_key, b"scree multi-level cuckoo filter")
}

/// A plain cuckoo filter (Fan et al.): fingerprints only, one per inserted key. The baseline of
/// SlimDB's Tables 5–6 (one per sub-level); same table, hash and growth as the multi-level
/// filter.
#[derive(Clone, Debug)]
pub struct CuckooFilter {
    hash_key: [u8; 16],
    table: Table,
    max_kicks: u32,
    /// A kick walk failed with no growth left: the filter admits every key.
    overflowed: bool,
    rng: u64,
}

impl CuckooFilter {
    /// An empty filter (`params.id_bits` and the secondary budget are not used).
    pub fn new(hash_key: [u8; 16], params: &CuckooParams) -> Result<CuckooFilter> {
        params.validate(false)?;
        Ok(CuckooFilter {
            rng: key_hash(&hash_key, b"cuckoo kicks"),
            hash_key,
            table: Table::new(
                params.fp_range(),
                0,
                params.slots_per_bucket,
                params.base_buckets() as u32,
                params.segments,
            ),
            max_kicks: params.max_kicks,
            overflowed: false,
        })
    }

    /// Adds a key.
    pub fn insert(&mut self, key: &[u8]) {
        self.insert_hashed(key_hash(&self.hash_key, key));
    }

    /// Adds a key by its [`key_hash`] under this filter's hash key.
    pub fn insert_hashed(&mut self, h: u64) {
        loop {
            let p = self.table.pos(h);
            if self.table.insert_new(p, 0, self.max_kicks, &mut self.rng) {
                return;
            }
            let more = self.table.segments + 1;
            match self.table.regrown(more, 0, self.max_kicks, &mut self.rng) {
                Some(t) if self.table.can_grow() => self.table = t,
                _ => {
                    self.overflowed = true;
                    return;
                }
            }
        }
    }

    /// Whether `key` may have been added.
    pub fn contains(&self, key: &[u8]) -> bool {
        self.contains_hashed(key_hash(&self.hash_key, key))
    }

    /// Whether a key with this [`key_hash`] may have been added.
    pub fn contains_hashed(&self, h: u64) -> bool {
        self.overflowed || self.table.find(self.table.pos(h)).is_some()
    }

    /// Bytes allocated by the filter's bit array.
    pub fn heap_bytes(&self) -> usize {
        self.table.heap_bytes()
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.table.occupied
    }

    /// Whether no key was added.
    pub fn is_empty(&self) -> bool {
        self.table.occupied == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::{BTreeMap, BTreeSet};

    const HASH_KEY: [u8; 16] = *b"0123456789abcdef";

    fn params(f: u32, capacity: usize, budget: usize) -> CuckooParams {
        CuckooParams {
            fingerprint_bits: f,
            reserve_segments: 1,
            segments: 1,
            id_bits: 4,
            slots_per_bucket: 4,
            capacity,
            max_load: 0.94,
            max_kicks: 500,
            secondary_budget_bytes: budget,
        }
    }

    fn k(i: u64) -> Vec<u8> {
        format!("key{i:08}").into_bytes()
    }

    fn decode(bytes: &[u8]) -> Result<MultiLevelCuckoo> {
        MultiLevelCuckoo::decode(Path::new("level.mlcf"), 100, HASH_KEY, bytes)
    }

    #[test]
    fn lookups_name_the_newest_sub_level() {
        let mut f = MultiLevelCuckoo::new(HASH_KEY, params(14, 1000, 4096)).unwrap();
        assert_eq!(f.lookup(b"a"), Answer::Absent);
        for i in 0..300 {
            f.insert(&k(i), 0, Prior::Absent).unwrap();
        }
        for i in 0..100 {
            f.insert(&k(i), 1, Prior::Present(0)).unwrap();
        }
        for i in 300..400 {
            f.insert(&k(i), 1, Prior::Absent).unwrap();
        }
        for i in 0..400 {
            let want = if (100..300).contains(&i) { 0 } else { 1 };
            assert_eq!(f.lookup(&k(i)), Answer::SubLevel(want), "key {i}");
        }
        f.remove(&k(5));
        assert_eq!(f.lookup(&k(5)), Answer::Absent);
        // Sub-level 0 retired: keys 100..300 left; sub-level 1 becomes 0.
        for i in 100..300 {
            f.remove(&k(i));
        }
        f.remap(&[None, Some(0)]).unwrap();
        assert_eq!(f.lookup(&k(7)), Answer::SubLevel(0));
        assert!(
            f.insert(&k(1), 15, Prior::Unknown).is_err(),
            "15 is the ambiguous mark"
        );
        assert!(f.remap(&[Some(15)]).is_err());
    }

    #[test]
    fn exact_under_non_blind_writes_and_false_positives_as_the_theory_says() {
        let n = 20_000u64;
        let mut f = MultiLevelCuckoo::new(HASH_KEY, params(10, n as usize, usize::MAX)).unwrap();
        for i in 0..n {
            f.insert(&k(i), (i % 7) as u8, Prior::Absent).unwrap();
        }
        for i in 0..n {
            assert_eq!(f.lookup(&k(i)), Answer::SubLevel((i % 7) as u8));
        }
        let s = f.stats();
        assert_eq!(s.growths, 0);
        assert_eq!(s.ambiguous_entries, 0);
        assert!(s.secondary_entries > 0, "10-bit fingerprints conflict");
        assert_eq!(s.primary_entries + s.secondary_entries, n as usize);
        let probes = 200_000u64;
        let fp = (n..n + probes)
            .filter(|&i| f.lookup(&k(i)) != Answer::Absent)
            .count();
        let rate = fp as f64 / probes as f64;
        // 2b / 2^f at a load of 0.94 is 0.0073.
        assert!(rate < 0.0095 && rate > 0.005, "false positive rate {rate}");
    }

    #[test]
    fn the_secondary_table_keeps_its_budget_and_the_filter_degrades_per_class() {
        let n = 5_000u64;
        let budget = 2_000;
        let mut f = MultiLevelCuckoo::new(HASH_KEY, params(8, n as usize, budget)).unwrap();
        for i in 0..n {
            f.insert(&k(i), 0, Prior::Unknown).unwrap();
        }
        // Blind rewrites of every key: each conflicts with an entry of unknown owner.
        for i in 0..n / 2 {
            f.insert(&k(i), 1, Prior::Unknown).unwrap();
        }
        let s = f.stats();
        assert!(s.secondary_bytes <= budget, "{s:?}");
        assert!(s.ambiguous_entries > 0, "{s:?}");
        let mut exact = 0;
        for i in 0..n {
            let want = u8::from(i < n / 2);
            match f.lookup(&k(i)) {
                Answer::SubLevel(t) => {
                    assert_eq!(t, want, "key {i}");
                    exact += 1;
                }
                Answer::ProbeAll => {}
                Answer::Absent => panic!("key {i} denied"),
            }
        }
        // Keys not rewritten stay exact unless their class had a conflict after the budget
        // was spent.
        assert!(exact >= n as usize * 9 / 20, "{exact} exact answers");
    }

    #[test]
    fn a_full_table_grows_and_keeps_every_key() {
        // Sized for 100 keys, given 2,000: the table takes many more segments.
        let mut f = MultiLevelCuckoo::new(HASH_KEY, params(16, 100, usize::MAX)).unwrap();
        for i in 0..2_000 {
            f.insert(&k(i), (i % 3) as u8, Prior::Absent).unwrap();
        }
        let s = f.stats();
        assert!(s.growths >= 4, "{s:?}");
        assert!(!s.overflowed);
        for i in 0..2_000 {
            assert_eq!(f.lookup(&k(i)), Answer::SubLevel((i % 3) as u8));
        }
        let g = decode(&f.encode()).unwrap();
        for i in 0..2_000 {
            assert_eq!(g.lookup(&k(i)), Answer::SubLevel((i % 3) as u8));
        }
    }

    #[test]
    fn for_arrival_is_a_clone_with_ensure_ids_and_reserve() {
        // 10-bit fingerprints over 8 reserved segments: conflicts fill the secondary table,
        // whose keys must be found under their new classes after the re-filing.
        let mut p = params(10, 1_000, 16_384);
        p.reserve_segments = 8;
        p.id_bits = 2;
        let mut f = MultiLevelCuckoo::with_hashing(HASH_KEY, KeyHashing::Split(3), p).unwrap();
        for i in 0..1_000 {
            f.insert(&k(i), 0, Prior::Unknown).unwrap();
        }
        for i in 500..2_000 {
            f.insert(&k(i), 1, Prior::Unknown).unwrap();
        }
        f.reserve(1_500);
        assert!(f.secondary_len() > 0, "{:?}", f.stats());
        // (ids, additional): no change, more segments, wider ids, both; each then takes
        // 1,500 new keys.
        for (ids, additional) in [(3, 0), (3, 3_000), (4, 0), (5, 3_000)] {
            let mut want = f.clone();
            want.ensure_ids(ids).unwrap();
            want.reserve(additional);
            let mut got = f.for_arrival(ids, additional).unwrap();
            let (w, g) = (want.stats(), got.stats());
            assert_eq!(
                (g.primary_slots, g.tag_bits, g.id_bits, g.primary_entries),
                (w.primary_slots, w.tag_bits, w.id_bits, w.primary_entries),
                "ids {ids}, additional {additional}"
            );
            assert_eq!(got.params(), want.params());
            assert_eq!(got.secondary_len(), want.secondary_len());
            // The same classes hold the same entries: the same answers, present or absent.
            for i in 0..6_000 {
                assert_eq!(got.lookup(&k(i)), want.lookup(&k(i)), "key {i}");
            }
            let id = (ids - 1) as u8;
            for i in 1_800..3_300 {
                got.insert(&k(i), id, Prior::Unknown).unwrap();
            }
            for i in 0..3_300 {
                let newest = match i {
                    0..500 => 0,
                    500..1_800 => 1,
                    _ => id,
                };
                let a = got.lookup(&k(i));
                assert!(
                    a == Answer::SubLevel(newest) || a == Answer::ProbeAll,
                    "{i}: {a:?}"
                );
            }
        }
        assert!(matches!(
            f.for_arrival(256, 0),
            Err(Error::InvalidArgument(_))
        ));
    }

    #[test]
    fn an_overflowed_filter_probes_but_never_denies() {
        // 4-bit fingerprints (15 values) leave tags of 2 bits or more up to 14 segments: 14 ×
        // the initial 69 one-slot buckets hold 966 of the ~1,900 classes 2,000 keys fall in.
        let mut p = params(4, 64, 0);
        p.slots_per_bucket = 1;
        p.max_kicks = 8;
        let mut f = MultiLevelCuckoo::new(HASH_KEY, p).unwrap();
        for i in 0..2_000 {
            f.insert(&k(i), 2, Prior::Absent).unwrap();
        }
        assert!(f.overflowed(), "{:?}", f.stats());
        for i in 0..2_000 {
            assert_ne!(f.lookup(&k(i)), Answer::Absent);
        }
        let g = decode(&f.encode()).unwrap();
        assert!(g.overflowed());
        f.clear();
        assert!(!f.overflowed());
        assert_eq!(f.lookup(&k(1)), Answer::Absent);
    }

    #[test]
    fn undone_kick_walks_leave_the_table_as_it_was() {
        let mut t = Table::new(255, 4, 2, 4, 1);
        let mut rng = 7;
        let mut added = Vec::new();
        for i in 0..100u64 {
            let p = t.pos(key_hash(&HASH_KEY, &k(i)));
            if t.find(p).is_some() {
                continue;
            }
            let before = t.words.clone();
            if t.insert_new(p, i % 15, 20, &mut rng) {
                added.push((p, i % 15));
            } else {
                assert_eq!(t.words, before, "a failed insert changes nothing");
            }
        }
        assert_eq!(t.occupied, added.len());
        for (p, v) in added {
            let idx = t.find(p).unwrap();
            assert_eq!(t.val_of(t.get(idx)), v);
        }
    }

    fn sample_filter() -> MultiLevelCuckoo {
        sample_filter_with(KeyHashing::Whole)
    }

    fn sample_filter_with(hashing: KeyHashing) -> MultiLevelCuckoo {
        let mut f = MultiLevelCuckoo::with_hashing(HASH_KEY, hashing, params(6, 200, 600)).unwrap();
        for i in 0..200 {
            f.insert(&k(i), (i % 5) as u8, Prior::Absent).unwrap();
        }
        for i in 0..60 {
            f.insert(&k(i), 6, Prior::Unknown).unwrap();
        }
        let s = f.stats();
        assert!(s.secondary_entries > 0 && s.ambiguous_entries > 0, "{s:?}");
        f
    }

    fn assert_no_false_negatives(f: &MultiLevelCuckoo) {
        for i in 0..200 {
            let want = if i < 60 { 6 } else { (i % 5) as u8 };
            let got = f.lookup(&k(i));
            assert!(
                got == Answer::SubLevel(want) || got == Answer::ProbeAll,
                "key {i}: {got:?}"
            );
        }
    }

    #[test]
    fn encode_decode_round_trip() {
        let f = sample_filter();
        let bytes = f.encode();
        let g = decode(&bytes).unwrap();
        assert_eq!(g.encode(), bytes);
        // The decoded secondary table is allocated for exactly its keys.
        let (mut a, mut b) = (f.stats(), g.stats());
        assert!(b.secondary_bytes <= a.secondary_bytes);
        (a.secondary_bytes, b.secondary_bytes) = (0, 0);
        assert_eq!(a, b);
        for i in 0..1_000 {
            assert_eq!(f.lookup(&k(i)), g.lookup(&k(i)));
        }
        assert_no_false_negatives(&g);
    }

    fn is_corruption(r: Result<MultiLevelCuckoo>) -> bool {
        matches!(r, Err(Error::Corruption { .. }))
    }

    #[test]
    fn split_hashing_round_trips() {
        let f = sample_filter_with(KeyHashing::Split(4));
        let bytes = f.encode();
        assert_eq!((bytes[0], bytes[1]), (3, 2));
        assert_eq!(sample_filter().encode()[1], 1, "whole-key hashing");
        let g = decode(&bytes).unwrap();
        assert_eq!(g.hashing(), KeyHashing::Split(4));
        assert_eq!(g.encode(), bytes);
        for i in 0..1_000 {
            let key = k(i);
            assert_eq!(f.lookup(&key), g.lookup(&key));
            let (ph, sh) = split_hashes(&HASH_KEY, 4, &key);
            assert_eq!(g.hash(&key), split_hash(ph, sh));
            assert_eq!(g.lookup_hashed(split_hash(ph, sh), &key), g.lookup(&key));
        }
        assert_no_false_negatives(&g);
        assert!(g.verify(Path::new("v"), 0).is_ok());
        for i in 0..bytes.len() {
            for mask in [0x01u8, 0x80] {
                let mut b = bytes.clone();
                b[i] ^= mask;
                assert!(is_corruption(decode(&b)), "byte {i} ^ {mask:#x}");
            }
        }
        for len in 0..bytes.len() {
            assert!(is_corruption(decode(&bytes[..len])), "truncated to {len}");
        }
    }

    #[test]
    fn split_hashes_are_the_parts_hashes_and_the_whole_short_key() {
        let (ph, sh) = split_hashes(&HASH_KEY, 3, b"abcdef");
        assert_eq!(
            (ph, sh),
            (key_hash(&HASH_KEY, b"abc"), key_hash(&HASH_KEY, b"def"))
        );
        let (ph, sh) = split_hashes(&HASH_KEY, 8, b"abc");
        assert_eq!(
            (ph, sh),
            (key_hash(&HASH_KEY, b"abc"), key_hash(&HASH_KEY, b""))
        );
        // A key whose prefix and suffix are the same bytes, and a swapped key, differ.
        let same = split_hashes(&HASH_KEY, 2, b"xyxy");
        let (a, b) = (
            split_hashes(&HASH_KEY, 2, b"xyzw"),
            split_hashes(&HASH_KEY, 2, b"zwxy"),
        );
        assert_ne!(split_hash(same.0, same.1), 0);
        assert_ne!(split_hash(a.0, a.1), split_hash(b.0, b.1));
    }

    #[test]
    fn insert_all_matches_one_by_one_inserts() {
        for hashing in [KeyHashing::Whole, KeyHashing::Split(5)] {
            // Small enough to grow, narrow enough to conflict and use the secondary table.
            let p = params(8, 2_000, 4096);
            let mut one = MultiLevelCuckoo::with_hashing(HASH_KEY, hashing, p.clone()).unwrap();
            let mut all = MultiLevelCuckoo::with_hashing(HASH_KEY, hashing, p).unwrap();
            for (id, range) in [(0u8, 0..3_000u64), (1, 2_000..6_000), (2, 0..500)] {
                let keys: Vec<Vec<u8>> = range.map(k).collect();
                let items: Vec<(u64, &[u8])> = keys
                    .iter()
                    .map(|key| (all.hash(key), key.as_slice()))
                    .collect();
                for key in &keys {
                    one.insert(key, id, Prior::Unknown).unwrap();
                }
                all.insert_all(&items, id, Prior::Unknown).unwrap();
                assert_eq!(one.encode(), all.encode(), "{hashing:?} id {id}");
            }
            let s = all.stats();
            assert!(s.growths > 0 && s.secondary_entries > 0, "{s:?}");
            for i in 0..6_000 {
                let want = if i < 500 {
                    2
                } else if i >= 2_000 {
                    1
                } else {
                    0
                };
                let got = all.lookup(&k(i));
                assert!(
                    got == Answer::SubLevel(want) || got == Answer::ProbeAll,
                    "{i}: {got:?}"
                );
            }
        }
    }

    #[test]
    fn every_single_byte_flip_and_truncation_is_corruption() {
        let bytes = sample_filter().encode();
        for i in 0..bytes.len() {
            for mask in [0x01u8, 0x10, 0x80, 0xFF] {
                let mut b = bytes.clone();
                b[i] ^= mask;
                assert!(is_corruption(decode(&b)), "byte {i} ^ {mask:#x}");
            }
        }
        for len in 0..bytes.len() {
            assert!(is_corruption(decode(&bytes[..len])), "truncated to {len}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(is_corruption(decode(&longer)));
        let other_key = MultiLevelCuckoo::decode(Path::new("x"), 0, [9; 16], &bytes);
        assert!(is_corruption(other_key), "another hash key");
        match decode(&[]) {
            Err(Error::Corruption { file, offset, .. }) => {
                assert_eq!((file.as_path(), offset), (Path::new("level.mlcf"), 100));
            }
            other => panic!("{other:?}"),
        }
    }

    fn with_crc(mut body: Vec<u8>) -> Vec<u8> {
        let crc = coding::crc(&body);
        coding::put_u32(&mut body, crc);
        body
    }

    #[test]
    fn damage_behind_a_valid_checksum_is_refused_or_harmless() {
        let bytes = sample_filter().encode();
        let body = &bytes[..bytes.len() - 4];
        let mut refused = 0;
        for i in 0..body.len() {
            for mask in [0x01u8, 0x80, 0xFF] {
                let mut b = body.to_vec();
                b[i] ^= mask;
                // Never a panic; a decoded filter answers and takes writes.
                match decode(&with_crc(b)) {
                    Ok(mut g) => {
                        for j in 0..300 {
                            g.lookup(&k(j));
                        }
                        g.insert(&k(1), 2, Prior::Unknown).unwrap();
                        g.remove(&k(2));
                        g.remap(&[None, Some(0)]).unwrap();
                        let _ = g.encode();
                    }
                    Err(Error::Corruption { .. } | Error::Unsupported(_)) => refused += 1,
                    Err(e) => panic!("{e}"),
                }
            }
        }
        // The structural checks catch the damage in the header and the secondary table.
        assert!(refused > 0);
        for version in [1, 2, 4] {
            let mut other = body.to_vec();
            other[0] = version;
            assert!(matches!(
                decode(&with_crc(other)),
                Err(Error::Unsupported(_))
            ));
        }
    }

    #[test]
    fn decode_refuses_structural_damage() {
        let f = sample_filter();
        let refused = |g: &MultiLevelCuckoo, what: &str| match decode(&g.encode()) {
            Err(Error::Corruption { detail, .. }) => assert!(detail.contains(what), "{detail}"),
            other => panic!("{what}: {other:?}"),
        };
        // A second entry of a class, in the other bucket of its pair.
        let mut g = f.clone();
        let t = &g.table;
        let (idx, free) = (0..t.total_slots())
            .filter(|&i| t.get(i) != 0)
            .find_map(|i| {
                let x = t.x_of(0, t.get(i));
                let b = (i / t.slots as usize) as u32;
                let j2 = t.alt(b, x);
                let start = t.bucket_start(0, j2);
                let free = (start..start + t.slots as usize).find(|&s| t.get(s) == 0)?;
                (j2 != b).then_some((i, free))
            })
            .unwrap();
        let c = g.table.get(idx);
        g.table.set(free, c);
        g.table.occupied += 1;
        let h = decode(&g.encode()).unwrap();
        match h.verify(Path::new("v"), 7) {
            Err(Error::Corruption { detail, .. }) => assert!(detail.contains("two entries")),
            other => panic!("{other:?}"),
        }
        assert!(f.verify(Path::new("v"), 7).is_ok());
        // An entry count that does not match.
        let mut g = f.clone();
        g.table.occupied += 1;
        refused(&g, "entry count");
        // A secondary key whose class lost its entry.
        let mut g = f.clone();
        let e = *g.secondary.table.iter().next().unwrap();
        let key = e.key(&g.secondary.arena).to_vec();
        let idx = g
            .table
            .find(g.table.pos(key_hash(&HASH_KEY, &key)))
            .unwrap();
        g.table.set(idx, 0);
        g.table.occupied -= 1;
        refused(&g, "without a primary entry");
        // A tag past its segment's fingerprints (a table of 2 segments of 128 fingerprints
        // has 8-bit tags, 1..=128 used).
        let mut g = MultiLevelCuckoo::new(HASH_KEY, params(8, 4, 0)).unwrap();
        for i in 0..100 {
            g.insert(&k(i), 0, Prior::Absent).unwrap();
        }
        assert!(g.table.segments > 1);
        let t = &g.table;
        let idx = (0..t.total_slots()).find(|&i| t.get(i) != 0).unwrap();
        let c = g.table.get(idx) | g.table.tag_mask();
        g.table.set(idx, c);
        refused(&g, "outside its segment");
    }

    #[test]
    fn plain_cuckoo_filter_has_no_false_negatives() {
        let n = 50_000u64;
        let mut f = CuckooFilter::new(HASH_KEY, &params(16, n as usize, 0)).unwrap();
        for i in 0..n {
            f.insert(&k(i));
        }
        assert_eq!(f.len(), n as usize);
        assert!((0..n).all(|i| f.contains(&k(i))));
        let fp = (n..n + 100_000).filter(|&i| f.contains(&k(i))).count();
        assert!(fp < 25, "{fp} false positives in 100,000");
        let mut tiny = CuckooFilter::new(HASH_KEY, &params(6, 4, 0)).unwrap();
        for i in 0..1_000 {
            tiny.insert(&k(i));
        }
        assert!(
            (0..1_000).all(|i| tiny.contains(&k(i))),
            "grown or overflowed"
        );
    }

    #[test]
    fn heap_bytes_follow_the_buffers() {
        let f = MultiLevelCuckoo::new(HASH_KEY, params(14, 10_000, 4096)).unwrap();
        // 10,000 / (4 × 0.94) → 2,660 buckets of 4 slots of 18 bits.
        assert_eq!(f.stats().primary_slots, 2_660 * 4);
        assert_eq!(f.heap_bytes(), (2_660 * 4 * 18usize).div_ceil(64) * 8);
        let g = sample_filter();
        let s = g.stats();
        assert!(s.secondary_bytes > 0 && s.secondary_bytes <= 600);
        assert_eq!(g.heap_bytes(), s.primary_bytes + s.secondary_bytes);
    }

    // ---- The model-based property: never a false negative, never an older sub-level. ----

    const KEYS: u8 = 40;

    #[derive(Clone, Debug)]
    enum Op {
        /// A put or a delete (a tombstone is an entry like a put) into the memtable.
        Write { key: u8, blind: bool },
        /// `put_if_absent`: written only when the key is in neither the level nor the memtable.
        PutIfAbsent { key: u8 },
        /// The memtable becomes the newest sub-level.
        Flush,
        /// A stepped merge moves the whole level out.
        MergeAll,
        /// The oldest sub-levels leave; the others are renumbered from 0.
        RetireOldest(u8),
        /// The oldest sub-levels are merged into one that stays in the level.
        MergeOldest(u8),
        /// A hash-range compaction moves the keys of one range out.
        Leave(u8),
        /// Encode, decode.
        Reopen,
        /// Rebuild from the level's keys.
        Rebuild,
        /// Ids for one more sub-level than the filter has (the slots widen).
        Widen,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            8 => (0..KEYS, any::<bool>()).prop_map(|(key, blind)| Op::Write { key, blind }),
            2 => (0..KEYS).prop_map(|key| Op::PutIfAbsent { key }),
            3 => Just(Op::Flush),
            1 => Just(Op::MergeAll),
            1 => (1u8..4).prop_map(Op::RetireOldest),
            1 => (2u8..5).prop_map(Op::MergeOldest),
            1 => (0u8..4).prop_map(Op::Leave),
            1 => Just(Op::Reopen),
            1 => Just(Op::Rebuild),
            1 => Just(Op::Widen),
        ]
    }

    fn arb_params() -> impl Strategy<Value = CuckooParams> {
        (
            // Narrow fingerprints and small tables, so that 40 keys conflict, fill the
            // secondary table, grow the table and overflow it.
            prop_oneof![3 => 4u32..=6, 1 => 7u32..=10],
            (1u32..=3, 1u32..=2),
            3u32..=4,
            prop_oneof![Just(1u32), Just(2), Just(4)],
            1usize..=32,
            prop_oneof![Just(0.5f64), Just(0.9), Just(1.0)],
            prop_oneof![Just(0u32), Just(1), Just(16), Just(200)],
            prop_oneof![Just(0usize), Just(300), Just(1000), Just(usize::MAX)],
        )
            .prop_map(
                |(
                    fingerprint_bits,
                    (reserve_segments, segments),
                    id_bits,
                    slots_per_bucket,
                    capacity,
                    max_load,
                    max_kicks,
                    budget,
                )| {
                    CuckooParams {
                        fingerprint_bits,
                        reserve_segments,
                        segments,
                        id_bits,
                        slots_per_bucket,
                        capacity,
                        max_load,
                        max_kicks,
                        secondary_budget_bytes: budget,
                    }
                },
            )
    }

    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Kind {
        Blind,
        NonBlind,
        IfAbsent,
    }

    /// The level: sub-levels oldest first (the index is the id), and the memtable.
    #[derive(Default)]
    struct Model {
        subs: Vec<BTreeSet<u8>>,
        memtable: BTreeMap<u8, Kind>,
    }

    impl Model {
        fn newest(&self, key: u8) -> Option<u8> {
            self.subs
                .iter()
                .rposition(|s| s.contains(&key))
                .map(|i| i as u8)
        }
        fn present(&self) -> BTreeSet<u8> {
            self.subs.iter().flatten().copied().collect()
        }
    }

    fn key_of(key: u8) -> Vec<u8> {
        format!("user{key}").into_bytes()
    }

    fn merge_oldest(f: &mut MultiLevelCuckoo, m: &mut Model, n: usize) {
        let n = n.min(m.subs.len());
        if n < 2 {
            return;
        }
        let map: Vec<Option<u8>> = (0..m.subs.len())
            .map(|t| Some(if t < n { 0 } else { (t - n + 1) as u8 }))
            .collect();
        f.remap(&map).unwrap();
        let merged: BTreeSet<u8> = m.subs.drain(..n).flatten().collect();
        m.subs.insert(0, merged);
    }

    fn arb_hashing() -> impl Strategy<Value = KeyHashing> {
        // Keys are `user{n}`: a prefix of 4 puts them all in one group, 5 in groups of ten.
        prop_oneof![
            Just(KeyHashing::Whole),
            (0u32..=6).prop_map(KeyHashing::Split),
            Just(KeyHashing::Split(100)),
        ]
    }

    fn run(
        params: CuckooParams,
        hashing: KeyHashing,
        batched: bool,
        ops: Vec<Op>,
    ) -> std::result::Result<(), TestCaseError> {
        let exact_expected = params.secondary_budget_bytes == usize::MAX
            && !ops
                .iter()
                .any(|o| matches!(o, Op::Write { blind: true, .. }));
        let mut f = MultiLevelCuckoo::with_hashing(HASH_KEY, hashing, params.clone()).unwrap();
        let mut cap = usize::from(f.id_capacity());
        let mut m = Model::default();
        for op in ops {
            match op {
                Op::Write { key, blind } => {
                    let kind = if blind { Kind::Blind } else { Kind::NonBlind };
                    m.memtable.insert(key, kind);
                }
                Op::PutIfAbsent { key } => {
                    if m.newest(key).is_none() && !m.memtable.contains_key(&key) {
                        m.memtable.insert(key, Kind::IfAbsent);
                    }
                }
                Op::Flush => {
                    if m.memtable.is_empty() {
                        continue;
                    }
                    if m.subs.len() == cap {
                        merge_oldest(&mut f, &mut m, 2);
                    }
                    let id = m.subs.len() as u8;
                    // Batched: the keys of one prior together, through `insert_all`.
                    let mut batches: Vec<(Prior, Vec<Vec<u8>>)> = Vec::new();
                    for (&key, &kind) in &m.memtable {
                        let prior = match (kind, m.newest(key)) {
                            (Kind::Blind, _) => Prior::Unknown,
                            (_, Some(s)) => Prior::Present(s),
                            (_, None) => Prior::Absent,
                        };
                        if kind == Kind::IfAbsent {
                            prop_assert_eq!(prior, Prior::Absent);
                        }
                        if !batched {
                            f.insert(&key_of(key), id, prior).unwrap();
                        } else if let Some(b) = batches.iter_mut().find(|b| b.0 == prior) {
                            b.1.push(key_of(key));
                        } else {
                            batches.push((prior, vec![key_of(key)]));
                        }
                    }
                    // As the layout does: room for the new keys first.
                    if batched {
                        f.reserve(m.memtable.len());
                    }
                    for (prior, keys) in batches {
                        let items: Vec<(u64, &[u8])> = keys
                            .iter()
                            .map(|key| (f.hash(key), key.as_slice()))
                            .collect();
                        f.insert_all(&items, id, prior).unwrap();
                    }
                    m.subs
                        .push(std::mem::take(&mut m.memtable).into_keys().collect());
                }
                Op::MergeAll => {
                    f.remap(&vec![None; cap]).unwrap();
                    m.subs.clear();
                }
                Op::RetireOldest(n) => {
                    let n = usize::from(n).min(m.subs.len());
                    let map: Vec<Option<u8>> = (0..m.subs.len())
                        .map(|t| t.checked_sub(n).map(|x| x as u8))
                        .collect();
                    f.remap(&map).unwrap();
                    m.subs.drain(..n);
                }
                Op::MergeOldest(n) => merge_oldest(&mut f, &mut m, usize::from(n)),
                Op::Widen => {
                    if cap < 63 {
                        let before = f.stats();
                        f.ensure_ids(cap + 1).unwrap();
                        let widened = usize::from(f.id_capacity());
                        prop_assert!(widened > cap);
                        cap = widened;
                        let after = f.stats();
                        prop_assert_eq!(after.primary_entries, before.primary_entries);
                        prop_assert_eq!(after.ambiguous_entries, before.ambiguous_entries);
                        prop_assert_eq!(after.secondary_entries, before.secondary_entries);
                    }
                }
                Op::Leave(range) => {
                    for key in m.present() {
                        if key % 4 == range {
                            f.remove(&key_of(key));
                            for s in &mut m.subs {
                                s.remove(&key);
                            }
                        }
                    }
                }
                Op::Reopen => {
                    let bytes = f.encode();
                    let g = decode(&bytes).unwrap();
                    prop_assert_eq!(g.encode(), bytes);
                    f = g;
                }
                Op::Rebuild => {
                    let keys: Vec<(Vec<u8>, u8)> = m
                        .present()
                        .into_iter()
                        .filter_map(|key| Some((key_of(key), m.newest(key)?)))
                        .collect();
                    f = MultiLevelCuckoo::with_hashing(HASH_KEY, hashing, params.clone()).unwrap();
                    f.ensure_ids(cap).unwrap();
                    for (key, id) in &keys {
                        f.insert(key, *id, Prior::Absent).unwrap();
                    }
                }
            }
            for key in 0..KEYS {
                let Some(newest) = m.newest(key) else {
                    continue;
                };
                let got = f.lookup(&key_of(key));
                prop_assert!(
                    got == Answer::SubLevel(newest) || got == Answer::ProbeAll,
                    "key {} newest {} answered {:?}",
                    key,
                    newest,
                    got
                );
                if exact_expected && !f.overflowed() {
                    prop_assert_eq!(got, Answer::SubLevel(newest), "key {}", key);
                }
            }
            let s = f.stats();
            prop_assert!(s.secondary_bytes <= params.secondary_budget_bytes || s.overflowed);
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

        #[test]
        fn never_a_false_negative_nor_an_older_sub_level(
            params in arb_params(),
            hashing in arb_hashing(),
            batched in any::<bool>(),
            ops in prop::collection::vec(op(), 1..250),
        ) {
            run(params, hashing, batched, ops)?;
        }
    }
}
