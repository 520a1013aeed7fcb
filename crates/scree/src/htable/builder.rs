//! HTable builder: owns choosing the bucket count, grouping items by home bucket and rank,
//! running the load balancer, and writing buckets, the overflow region, the metadata block,
//! the filter block and the footer (docs/format-htable.md).

use std::cmp::Ordering;

use crate::error::{Error, Result};
use crate::filter::bloom;
use crate::fs::CountedWriter;
use crate::key;

use super::format::{entry_size, entry_tag, FilterSet};
use super::writer::TableWriter;
use super::{bucket_of, placement_hash, BUCKET_CAPACITY, BUCKET_SIZE};

/// Options of an HTable. Defaults: 16 Bloom bits per key (the paper's setting for ~100
/// sub-levels), 90% target fill, 95% per-bucket cap.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HTableOptions {
    /// Bloom filter bits per user key of each bucket's filter.
    pub bits_per_key: u32,
    /// Average bucket fill the bucket count is chosen for (fraction of [`BUCKET_CAPACITY`]).
    pub target_fill: f64,
    /// Most a bucket is filled to by home items and migrated items (fraction of
    /// [`BUCKET_CAPACITY`]); the watermark of an overloaded bucket.
    pub bucket_fill_cap: f64,
    /// A fixed bucket count (required for the tables of one BloomCluster); `None` chooses it
    /// from the item bytes with [`buckets_for_bytes`].
    pub n_buckets: Option<u32>,
    /// Hash bits every item of the table shares (`3 × depth` for a trie container), so the
    /// buckets follow the bits below them ([`bucket_of`]); recorded in the footer.
    pub bucket_shift: u32,
    /// Equal bucket ranges that balancing keeps migrations inside (1 = one global list, the
    /// paper's; the `trie` layout uses 8, one per child of the container, so a compaction can
    /// read one child's range of a table at a time). Tables of fewer than
    /// [`MIN_BUCKETS_PER_SEGMENT`] buckets per segment balance globally.
    pub balance_segments: u32,
}

/// The fewest buckets per balancing segment: below it a table balances over all its buckets.
pub const MIN_BUCKETS_PER_SEGMENT: u32 = 64;

impl Default for HTableOptions {
    fn default() -> Self {
        HTableOptions {
            bits_per_key: 16,
            target_fill: 0.90,
            bucket_fill_cap: 0.95,
            n_buckets: None,
            bucket_shift: 0,
            balance_segments: 1,
        }
    }
}

/// The bucket count for `entry_bytes` bytes of encoded entries at `target_fill` average fill:
/// `max(1, ceil(entry_bytes / (target_fill * BUCKET_CAPACITY)))`.
pub fn buckets_for_bytes(entry_bytes: u64, target_fill: f64) -> u32 {
    let per_bucket = (target_fill.clamp(0.05, 1.0) * BUCKET_CAPACITY as f64).max(1.0);
    let n = (entry_bytes as f64 / per_bucket).ceil();
    if n >= f64::from(u32::MAX - 1) {
        u32::MAX - 1
    } else {
        (n as u32).max(1)
    }
}

/// What a finished table looks like.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HTableSummary {
    /// Number of buckets.
    pub n_buckets: u32,
    /// Items (versions) stored.
    pub items: u64,
    /// Total file size in bytes.
    pub file_size: u64,
    /// Σ encoded entry sizes.
    pub entry_bytes: u64,
    /// Items stored in a bucket other than their home bucket.
    pub migrated_items: u64,
    /// Items stored in the overflow region.
    pub overflow_items: u64,
    /// Buckets that were over the cap before balancing (sources).
    pub source_buckets: u32,
    /// Migration records (kept in memory by readers, 12 bytes each).
    pub migration_records: u64,
    /// Bytes of the metadata block.
    pub meta_len: u64,
    /// Bytes of the filter block.
    pub filter_len: u64,
    /// Bytes of the overflow region.
    pub overflow_len: u64,
    /// Fill of the fullest bucket (fraction of [`BUCKET_CAPACITY`]).
    pub max_fill: f64,
    /// The smallest internal key (empty for an empty table).
    pub smallest: Vec<u8>,
    /// The largest internal key (empty for an empty table).
    pub largest: Vec<u8>,
    /// The smallest sequence number (`u64::MAX` for an empty table).
    pub min_seq: u64,
}

use key::cmp_split as cmp_key;

/// The internal-key range of the items written, as `(user key, trailer)`.
#[derive(Default)]
pub(super) struct KeyRange<'a> {
    pub(super) smallest: Option<(&'a [u8], u64)>,
    pub(super) largest: Option<(&'a [u8], u64)>,
}

impl<'a> KeyRange<'a> {
    pub(super) fn note(&mut self, k: (&'a [u8], u64)) {
        if self.smallest.is_none_or(|s| cmp_key(k, s).is_lt()) {
            self.smallest = Some(k);
        }
        if self.largest.is_none_or(|l| cmp_key(k, l).is_gt()) {
            self.largest = Some(k);
        }
    }
}

/// An item: its hash, where its user key and value are in the builder's arena, its internal
/// key's trailer, and the Bloom hash of its user key (computed while the key is in cache: the
/// filters are built in bucket order, which visits the arena at random).
pub(super) struct Item {
    hash: u128,
    off: usize,
    klen: u32,
    vlen: u32,
    trailer: u64,
    bloom: u64,
}

/// An item borrowed from its owner's buffers, as the writer sees it: the builder's arena, or
/// a compaction's input tables ([`finish_borrowed`]).
#[derive(Debug, Clone, Copy)]
pub struct ItemRef<'a> {
    /// Placement hash of the user key (`placement_hash` with the table's key).
    pub hash: u128,
    /// User key.
    pub ukey: &'a [u8],
    /// The internal key's trailer `(seq << 8) | kind`, kind 0 (delete) or 1 (put).
    pub trailer: u64,
    /// Value.
    pub value: &'a [u8],
    /// `bloom::bloom_hash` of the user key.
    pub bloom: u64,
}

pub(super) fn ent<'a>(data: &'a [u8], it: &Item) -> ItemRef<'a> {
    let k = it.off + it.klen as usize;
    let v = k + it.vlen as usize;
    ItemRef {
        hash: it.hash,
        ukey: data.get(it.off..k).unwrap_or_default(),
        trailer: it.trailer,
        value: data.get(k..v).unwrap_or_default(),
        bloom: it.bloom,
    }
}

/// Collects items, then writes one immutable HTable. Items may come in any order; several
/// versions of one user key (different sequence numbers) may be added.
pub struct HTableBuilder {
    hash_key: [u8; 16],
    opts: HTableOptions,
    /// User keys and values, back to back (one allocation for the whole table).
    data: Vec<u8>,
    items: Vec<Item>,
    entry_bytes: u64,
}

/// Where the encoded bytes go: a buffer the writer appends to, drained after each append.
pub(super) trait Sink {
    /// The buffer to append encoded bytes to.
    fn buf(&mut self) -> &mut Vec<u8>;
    /// Writes the buffer out if it has grown large (a file) or keeps it (memory).
    fn drain(&mut self) -> Result<()>;
    fn put(&mut self, b: &[u8]) -> Result<()> {
        self.buf().extend_from_slice(b);
        self.drain()
    }
}
impl Sink for Vec<u8> {
    fn buf(&mut self) -> &mut Vec<u8> {
        self
    }
    fn drain(&mut self) -> Result<()> {
        Ok(())
    }
}
pub(super) struct BufferedWriter<'a> {
    w: &'a mut CountedWriter,
    buf: Vec<u8>,
}
impl<'a> BufferedWriter<'a> {
    pub(super) fn new(w: &'a mut CountedWriter) -> Self {
        BufferedWriter {
            w,
            buf: Vec::with_capacity(256 * 1024 + BUCKET_SIZE),
        }
    }
    /// Writes out what is left in the buffer.
    pub(super) fn flush_out(&mut self) -> Result<()> {
        if !self.buf.is_empty() {
            self.w.append(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }
    /// Has `write` encode into a buffer over `w`, then writes out what is left in the buffer.
    fn run<T>(
        w: &'a mut CountedWriter,
        write: impl FnOnce(&mut dyn Sink) -> Result<T>,
    ) -> Result<T> {
        let mut sink = BufferedWriter::new(w);
        let out = write(&mut sink)?;
        sink.flush_out()?;
        Ok(out)
    }
}
impl Sink for BufferedWriter<'_> {
    fn buf(&mut self) -> &mut Vec<u8> {
        &mut self.buf
    }
    fn drain(&mut self) -> Result<()> {
        if self.buf.len() >= 256 * 1024 {
            self.w.append(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }
}

/// Start offsets of a flat array grouped by bucket (a counting sort's prefix sums): bucket
/// `b`'s elements are `[starts[b], starts[b + 1])`; `keys` yields each element's bucket
/// (`< n`).
pub(super) fn csr_starts(n: usize, keys: impl Iterator<Item = u32>) -> Vec<usize> {
    let mut starts = vec![0usize; n + 1];
    for k in keys {
        if let Some(c) = starts.get_mut(k as usize + 1) {
            *c += 1;
        }
    }
    for b in 1..starts.len() {
        let prev = starts.get(b - 1).copied().unwrap_or(0);
        if let Some(c) = starts.get_mut(b) {
            *c += prev;
        }
    }
    starts
}

pub(super) fn cmp_ent(a: &ItemRef<'_>, b: &ItemRef<'_>) -> Ordering {
    a.hash
        .cmp(&b.hash)
        .then_with(|| cmp_key((a.ukey, a.trailer), (b.ukey, b.trailer)))
}

impl HTableBuilder {
    /// A builder for a table placed with `hash_key` (the database's placement-hash key, stored
    /// in the footer so that readers can recompute item hashes for compaction).
    pub fn new(hash_key: [u8; 16], opts: HTableOptions) -> Self {
        HTableBuilder {
            hash_key,
            opts,
            data: Vec::new(),
            items: Vec::new(),
            entry_bytes: 0,
        }
    }

    /// Adds one item. `hash` must be `placement_hash(hash_key, user_key(ikey))` and `ikey` a
    /// well-formed internal key.
    pub fn add(&mut self, hash: u128, ikey: Vec<u8>, value: Vec<u8>) -> Result<()> {
        if !key::valid_ikey(&ikey) {
            return Err(Error::InvalidArgument(
                "HTable item with a malformed internal key".into(),
            ));
        }
        if placement_hash(&self.hash_key, key::user_key(&ikey)) != hash {
            return Err(Error::InvalidArgument(
                "HTable item hash is not the placement hash of its user key".into(),
            ));
        }
        let p = key::parse(&ikey);
        self.push(hash, p.user_key, p.trailer(), &value);
        Ok(())
    }

    fn push(&mut self, hash: u128, ukey: &[u8], trailer: u64, value: &[u8]) -> u64 {
        // About the entry's encoded size: its tag is not known before the table's oldest
        // sequence number, so count it at its largest for this sequence number.
        self.entry_bytes =
            self.entry_bytes
                .saturating_add(entry_size(ukey.len(), value.len(), trailer >> 7) as u64);
        let off = self.data.len();
        self.data.extend_from_slice(ukey);
        self.data.extend_from_slice(value);
        let bloom = bloom::bloom_hash(ukey);
        self.items.push(Item {
            hash,
            off,
            klen: ukey.len() as u32,
            vlen: value.len() as u32,
            trailer,
            bloom,
        });
        bloom
    }

    /// Reserves room for about `items` items of `bytes` key and value bytes in total.
    pub fn reserve(&mut self, items: usize, bytes: usize) {
        self.items.reserve(items);
        self.data.reserve(bytes);
    }

    /// [`HTableBuilder::add`] without recomputing the placement hash: for callers that computed
    /// `hash` from this builder's key themselves (flush, compaction). The internal key must be
    /// well formed; a wrong hash makes the item unfindable (checked in debug builds).
    /// Returns the Bloom hash of the item's user key (`bloom::bloom_hash`).
    pub fn add_unchecked(&mut self, hash: u128, ikey: &[u8], value: &[u8]) -> u64 {
        debug_assert!(key::valid_ikey(ikey));
        let p = key::parse(ikey);
        self.add_parts(hash, p.user_key, p.trailer(), value)
    }

    /// [`HTableBuilder::add_unchecked`] with the internal key given as its user key and
    /// trailer `(seq << 8) | kind` (kind 0 or 1).
    pub fn add_parts(&mut self, hash: u128, ukey: &[u8], trailer: u64, value: &[u8]) -> u64 {
        debug_assert!(trailer & 0xff <= 1 && trailer >> 8 <= key::MAX_SEQ);
        debug_assert_eq!(placement_hash(&self.hash_key, ukey), hash);
        self.push(hash, ukey, trailer, value)
    }

    /// Items added so far.
    pub fn len(&self) -> usize {
        self.items.len()
    }
    /// Whether nothing was added.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
    /// Σ encoded entry sizes added so far (about the data bytes of the table).
    pub fn entry_bytes(&self) -> u64 {
        self.entry_bytes
    }

    /// Writes the table to `w` (not synced: the caller syncs before naming it in the manifest).
    pub fn finish(self, w: &mut CountedWriter) -> Result<HTableSummary> {
        Ok(self.finish_with_filters(w)?.0)
    }

    /// [`HTableBuilder::finish`] that also returns the per-bucket filters it wrote, so a caller
    /// can keep them in memory or add them to a BloomCluster without reading them back.
    pub fn finish_with_filters(self, w: &mut CountedWriter) -> Result<(HTableSummary, FilterSet)> {
        BufferedWriter::run(w, |sink| self.write(sink))
    }

    /// Encodes the table into memory.
    pub fn finish_to_vec(self) -> Result<(Vec<u8>, HTableSummary)> {
        let mut out = Vec::new();
        let (s, _) = self.write(&mut out)?;
        Ok((out, s))
    }

    fn write(mut self, sink: &mut dyn Sink) -> Result<(HTableSummary, FilterSet)> {
        let data = std::mem::take(&mut self.data);
        let items: Vec<ItemRef<'_>> = self.items.iter().map(|it| ent(&data, it)).collect();
        self.items = Vec::new();
        write_items(self.hash_key, self.opts, items, sink)
    }
}

/// Writes `items` as one table to `w` without copying them first (a compaction's inputs are in
/// memory for the whole job): [`HTableBuilder::add_unchecked`] then
/// [`HTableBuilder::finish_with_filters`], minus the arena. Every item's `hash` and `bloom`
/// must be computed from its user key as [`ItemRef`] says (checked in debug builds); the items
/// may come in any order.
pub fn finish_borrowed(
    hash_key: [u8; 16],
    opts: HTableOptions,
    items: Vec<ItemRef<'_>>,
    w: &mut CountedWriter,
) -> Result<(HTableSummary, FilterSet)> {
    debug_assert!(items
        .iter()
        .all(|it| placement_hash(&hash_key, it.ukey) == it.hash
            && bloom::bloom_hash(it.ukey) == it.bloom));
    BufferedWriter::run(w, |sink| write_items(hash_key, opts, items, sink))
}

/// The per-bucket byte cap of `opts` (the HashMark watermark), after checking its fields.
pub(super) fn checked_cap(opts: &HTableOptions) -> Result<usize> {
    if !(opts.bucket_fill_cap > 0.0 && opts.bucket_fill_cap <= 1.0) {
        return Err(Error::InvalidArgument(
            "bucket_fill_cap must be in (0, 1]".into(),
        ));
    }
    if opts.bucket_shift > 127 {
        return Err(Error::InvalidArgument(
            "bucket_shift must be at most 127".into(),
        ));
    }
    if !(opts.target_fill > 0.0 && opts.target_fill <= 1.0) {
        return Err(Error::InvalidArgument(
            "target_fill must be in (0, 1]".into(),
        ));
    }
    Ok(((opts.bucket_fill_cap * BUCKET_CAPACITY as f64) as usize).clamp(1, BUCKET_CAPACITY))
}

/// Sizes a table from its items, given in (hash, internal key) order, without keeping them:
/// the bucket count a table of them gets when `n_buckets` is `None` (from the bytes of the
/// hash groups that fit a bucket, [`buckets_for_bytes`]) and their oldest sequence number.
/// Entry tags are counted against the `base_seq` given (the table's oldest sequence number
/// when it is known; a lower bound such as 0 counts some tags a byte or two too long).
pub struct TableSizer {
    cap: usize,
    target_fill: f64,
    base_seq: u64,
    /// The current hash group: its hash and bytes.
    group: Option<(u128, usize)>,
    bucket_bytes: u64,
    oldest: Option<u64>,
    items: u64,
}

impl TableSizer {
    /// A sizer for a table with options `opts` whose tags count from `base_seq`.
    pub fn new(opts: &HTableOptions, base_seq: u64) -> Result<Self> {
        Ok(TableSizer {
            cap: checked_cap(opts)?,
            target_fill: opts.target_fill,
            base_seq,
            group: None,
            bucket_bytes: 0,
            oldest: None,
            items: 0,
        })
    }

    /// Counts one item: its placement hash, user key and value lengths, and trailer.
    pub fn add(&mut self, hash: u128, ukey_len: usize, value_len: usize, trailer: u64) {
        let size = entry_size(ukey_len, value_len, entry_tag(trailer, self.base_seq));
        match &mut self.group {
            Some((h, g)) if *h == hash => *g = g.saturating_add(size),
            _ => {
                self.close_group();
                self.group = Some((hash, size));
            }
        }
        let seq = trailer >> 8;
        self.oldest = Some(self.oldest.map_or(seq, |o| o.min(seq)));
        self.items += 1;
    }

    fn close_group(&mut self) {
        if let Some((_, g)) = self.group.take() {
            if g <= self.cap {
                self.bucket_bytes += g as u64;
            }
        }
    }

    /// Items counted.
    pub fn items(&self) -> u64 {
        self.items
    }

    /// The oldest sequence number counted (0 when none was).
    pub fn oldest_seq(&self) -> u64 {
        self.oldest.unwrap_or(0)
    }

    /// The bucket count for the items counted.
    pub fn n_buckets(mut self) -> u32 {
        self.close_group();
        buckets_for_bytes(self.bucket_bytes, self.target_fill)
    }
}

/// Refuses items (in (hash, internal key) order) of a kind other than put or delete, or with
/// an internal key given twice.
pub(super) fn check_items(items: &[ItemRef<'_>]) -> Result<()> {
    if items.iter().any(|it| it.trailer & 0xff > 1) {
        return Err(Error::InvalidArgument(
            "HTable item with a kind other than put or delete".into(),
        ));
    }
    if items.windows(2).any(
        |w| matches!(w, [a, b] if a.hash == b.hash && a.ukey == b.ukey && a.trailer == b.trailer),
    ) {
        return Err(Error::InvalidArgument(
            "HTable items contain the same internal key twice".into(),
        ));
    }
    Ok(())
}

/// The balancing segments of a table of `n_buckets` buckets built with `balance_segments`:
/// that many when each gets at least [`MIN_BUCKETS_PER_SEGMENT`] buckets, else 1.
pub fn segments_for(n_buckets: u32, balance_segments: u32) -> u32 {
    match balance_segments.max(1) {
        s if n_buckets / s >= MIN_BUCKETS_PER_SEGMENT => s,
        _ => 1,
    }
}

/// Balances and writes `items` as one table (docs/format-htable.md, "Building"): sizes it,
/// then writes it one balancing segment at a time.
fn write_items(
    hash_key: [u8; 16],
    opts: HTableOptions,
    mut items: Vec<ItemRef<'_>>,
    sink: &mut dyn Sink,
) -> Result<(HTableSummary, FilterSet)> {
    checked_cap(&opts)?;
    // Compaction feeds items already in (hash, internal key) order; a flush's come in the
    // memtable's order. `cmp_ent` orders distinct internal keys totally (a repeated one is
    // refused below, and lands next to its twin either way), so an unstable sort gives the
    // same order as a stable one, in place: the stable sort's scratch buffer was half a
    // flush's item array (≈ 15 MB for a 64 MiB memtable), touched for the first time on
    // every flush.
    if !items.is_sorted_by(|a, b| cmp_ent(a, b).is_le()) {
        items.sort_unstable_by(cmp_ent);
    }
    if u32::try_from(items.len()).is_err() {
        return Err(Error::InvalidArgument(
            "too many items for one HTable".into(),
        ));
    }
    // Refused before anything is written (each segment checks its own items again).
    check_items(&items)?;
    // Entry tags count sequence numbers from the table's oldest (docs/format-htable.md).
    let base_seq = items.iter().map(|it| it.trailer >> 8).min().unwrap_or(0);
    let n_buckets = match opts.n_buckets {
        Some(n) => n,
        None => {
            let mut sizer = TableSizer::new(&opts, base_seq)?;
            for it in &items {
                sizer.add(it.hash, it.ukey.len(), it.value.len(), it.trailer);
            }
            sizer.n_buckets()
        }
    };
    let mut t = TableWriter::new(hash_key, opts, n_buckets, base_seq, items.len())?;
    // Home buckets follow the hash when the items share the bits above the bucket window
    // (every caller's do); otherwise a stable sort by home keeps (hash, internal key) order
    // inside each bucket.
    let home = |it: &ItemRef<'_>| bucket_of(it.hash, n_buckets, opts.bucket_shift) as usize;
    if !items.is_sorted_by_key(home) {
        items.sort_by_key(home);
    }
    let mut rest = items.as_mut_slice();
    for k in 0..t.segments {
        let end = t.segment_buckets(k).end;
        let cut = rest.partition_point(|it| home(it) < end);
        let (seg, tail) = std::mem::take(&mut rest).split_at_mut(cut);
        t.write_segment(seg, sink)?;
        rest = tail;
    }
    t.finish(sink)
}
