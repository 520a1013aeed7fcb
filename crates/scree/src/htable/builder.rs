//! HTable builder: owns choosing the bucket count, grouping items by home bucket and rank,
//! running the load balancer, and writing buckets, the overflow region, the metadata block,
//! the filter block and the footer (docs/format-htable.md).

use std::cmp::Ordering;

use crate::error::{Error, Result};
use crate::filter::bloom;
use crate::fs::CountedWriter;
use crate::key;

use super::balance::{self, OVERFLOW};
use super::format::{
    encode_bucket, encode_filters, encode_meta, encode_overflow_record, entry_size, FilterSet,
    Footer, OverflowEntry, FOOTER_SIZE,
};
use super::{bucket_of, placement_hash, rank_in_bucket, BUCKET_CAPACITY, BUCKET_SIZE};

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
}

impl Default for HTableOptions {
    fn default() -> Self {
        HTableOptions {
            bits_per_key: 16,
            target_fill: 0.90,
            bucket_fill_cap: 0.95,
            n_buckets: None,
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
}

/// An item: its hash, where its internal key and value are in the builder's arena, and the
/// Bloom hash of its user key (computed while the key is in cache: the filters are built in
/// bucket order, which visits the arena at random).
struct Item {
    hash: u128,
    off: usize,
    klen: u32,
    vlen: u32,
    bloom: u64,
}

/// An item as the writer sees it.
struct Ent<'a> {
    hash: u128,
    ikey: &'a [u8],
    value: &'a [u8],
    bloom: u64,
}

fn ent<'a>(data: &'a [u8], it: &Item) -> Ent<'a> {
    let k = it.off + it.klen as usize;
    let v = k + it.vlen as usize;
    Ent {
        hash: it.hash,
        ikey: data.get(it.off..k).unwrap_or_default(),
        value: data.get(k..v).unwrap_or_default(),
        bloom: it.bloom,
    }
}

/// Collects items, then writes one immutable HTable. Items may come in any order; several
/// versions of one user key (different sequence numbers) may be added.
pub struct HTableBuilder {
    hash_key: [u8; 16],
    opts: HTableOptions,
    /// Internal keys and values, back to back (one allocation for the whole table).
    data: Vec<u8>,
    items: Vec<Item>,
    entry_bytes: u64,
}

/// Where the encoded bytes go.
trait Sink {
    fn put(&mut self, b: &[u8]) -> Result<()>;
}
impl Sink for Vec<u8> {
    fn put(&mut self, b: &[u8]) -> Result<()> {
        self.extend_from_slice(b);
        Ok(())
    }
}
struct BufferedWriter<'a> {
    w: &'a mut CountedWriter,
    buf: Vec<u8>,
}
impl Sink for BufferedWriter<'_> {
    fn put(&mut self, b: &[u8]) -> Result<()> {
        self.buf.extend_from_slice(b);
        if self.buf.len() >= 256 * 1024 {
            self.w.append(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }
}

fn cmp_ent(a: &Ent<'_>, b: &Ent<'_>) -> Ordering {
    a.hash
        .cmp(&b.hash)
        .then_with(|| key::cmp_ikey(a.ikey, b.ikey))
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
        self.push(hash, &ikey, &value);
        Ok(())
    }

    fn push(&mut self, hash: u128, ikey: &[u8], value: &[u8]) -> u64 {
        self.entry_bytes = self
            .entry_bytes
            .saturating_add(entry_size(ikey.len(), value.len()) as u64);
        let off = self.data.len();
        self.data.extend_from_slice(ikey);
        self.data.extend_from_slice(value);
        let bloom = bloom::bloom_hash(key::user_key(ikey));
        self.items.push(Item {
            hash,
            off,
            klen: ikey.len() as u32,
            vlen: value.len() as u32,
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
        debug_assert_eq!(placement_hash(&self.hash_key, key::user_key(ikey)), hash);
        self.push(hash, ikey, value)
    }

    /// Whether the last item added has placement hash `hash` and user key `user_key` (a
    /// different hash means a different key: the bytes are compared only on equal hashes).
    pub fn last_is_version_of(&self, hash: u128, user_key: &[u8]) -> bool {
        self.items.last().is_some_and(|it| {
            it.hash == hash
                && self
                    .data
                    .get(it.off..it.off + it.klen as usize)
                    .is_some_and(|ik| key::user_key(ik) == user_key)
        })
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
        let mut sink = BufferedWriter {
            w,
            buf: Vec::with_capacity(256 * 1024 + BUCKET_SIZE),
        };
        let out = self.write(&mut sink)?;
        if !sink.buf.is_empty() {
            sink.w.append(&sink.buf)?;
        }
        Ok(out)
    }

    /// Encodes the table into memory.
    pub fn finish_to_vec(self) -> Result<(Vec<u8>, HTableSummary)> {
        let mut out = Vec::new();
        let (s, _) = self.write(&mut out)?;
        Ok((out, s))
    }

    fn write(mut self, sink: &mut dyn Sink) -> Result<(HTableSummary, FilterSet)> {
        let opts = self.opts;
        if !(opts.bucket_fill_cap > 0.0 && opts.bucket_fill_cap <= 1.0) {
            return Err(Error::InvalidArgument(
                "bucket_fill_cap must be in (0, 1]".into(),
            ));
        }
        if !(opts.target_fill > 0.0 && opts.target_fill <= 1.0) {
            return Err(Error::InvalidArgument(
                "target_fill must be in (0, 1]".into(),
            ));
        }
        let cap =
            ((opts.bucket_fill_cap * BUCKET_CAPACITY as f64) as usize).clamp(1, BUCKET_CAPACITY);
        let data = std::mem::take(&mut self.data);
        let mut items: Vec<Ent<'_>> = self.items.iter().map(|it| ent(&data, it)).collect();
        self.items = Vec::new();
        // Compaction feeds items already in (hash, internal key) order.
        if !items.is_sorted_by(|a, b| cmp_ent(a, b).is_le()) {
            items.sort_by(cmp_ent);
        }
        if items
            .windows(2)
            .any(|w| matches!(w, [a, b] if a.hash == b.hash && a.ikey == b.ikey))
        {
            return Err(Error::InvalidArgument(
                "HTable items contain the same internal key twice".into(),
            ));
        }
        let sizes: Vec<usize> = items
            .iter()
            .map(|it| entry_size(it.ikey.len(), it.value.len()))
            .collect();

        // Bucket count from the bytes that can live in buckets (hash groups up to the cap).
        let n_buckets = match opts.n_buckets {
            Some(n) if (1..u32::MAX).contains(&n) => n,
            Some(_) => {
                return Err(Error::InvalidArgument("n_buckets out of range".into()));
            }
            None => {
                let mut bucket_bytes = 0u64;
                let mut i = 0;
                while i < items.len() {
                    let h = items.get(i).map_or(0, |it| it.hash);
                    let mut j = i;
                    let mut g = 0usize;
                    while let Some(it) = items.get(j).filter(|it| it.hash == h) {
                        let _ = it;
                        g = g.saturating_add(sizes.get(j).copied().unwrap_or(0));
                        j += 1;
                    }
                    if g <= cap {
                        bucket_bytes += g as u64;
                    }
                    i = j;
                }
                buckets_for_bytes(bucket_bytes, opts.target_fill)
            }
        };
        let n = n_buckets as usize;

        // Per home bucket: item indices ordered by (rank, hash, ikey); then rank groups.
        // Sized up front: growing ~n small vectors by pushes cost several allocations each.
        let homes: Vec<u32> = items
            .iter()
            .map(|it| bucket_of(it.hash, n_buckets))
            .collect();
        let mut counts = vec![0usize; n];
        for &b in &homes {
            if let Some(c) = counts.get_mut(b as usize) {
                *c += 1;
            }
        }
        let mut per_bucket: Vec<Vec<usize>> =
            counts.iter().map(|&c| Vec::with_capacity(c)).collect();
        for (i, &b) in homes.iter().enumerate() {
            if let Some(v) = per_bucket.get_mut(b as usize) {
                v.push(i);
            }
        }
        let mut groups: Vec<Vec<(u32, usize)>> = Vec::with_capacity(n);
        // For each bucket, the item-index range of each group inside per_bucket[b].
        let mut group_ranges: Vec<Vec<(usize, usize)>> = Vec::with_capacity(n);
        for (b, idx) in per_bucket.iter_mut().enumerate() {
            let rank = |i: &usize| {
                items
                    .get(*i)
                    .map_or(0, |it| rank_in_bucket(it.hash, b as u32))
            };
            // Items are already in (hash, ikey) order; a stable sort by rank keeps that.
            idx.sort_by_key(rank);
            let mut gs = Vec::new();
            let mut rs = Vec::new();
            let mut start = 0;
            while start < idx.len() {
                let r = idx.get(start).map_or(0, rank);
                let mut end = start;
                let mut size = 0usize;
                while let Some(i) = idx.get(end).filter(|i| rank(i) == r) {
                    size = size.saturating_add(sizes.get(*i).copied().unwrap_or(0));
                    end += 1;
                }
                gs.push((r, size));
                rs.push((start, end));
                start = end;
            }
            groups.push(gs);
            group_ranges.push(rs);
        }
        let source_buckets = groups
            .iter()
            .filter(|gs| gs.iter().map(|g| g.1).filter(|&s| s <= cap).sum::<usize>() > cap)
            .count() as u32;
        let dest = balance::plan(&groups, cap);
        let migrations = balance::records(&groups, &dest);

        // Physical placement.
        let mut physical: Vec<Vec<usize>> = vec![Vec::new(); n];
        let mut overflow_items: Vec<usize> = Vec::new();
        let mut migrated = 0u64;
        for (b, ((ranges, ds), idx)) in group_ranges.iter().zip(&dest).zip(&per_bucket).enumerate()
        {
            for (&(s, e), &d) in ranges.iter().zip(ds) {
                let members = idx.get(s..e).unwrap_or_default();
                if d == OVERFLOW {
                    overflow_items.extend_from_slice(members);
                } else {
                    if d as usize != b {
                        migrated += members.len() as u64;
                    }
                    if let Some(p) = physical.get_mut(d as usize) {
                        p.extend_from_slice(members);
                    }
                }
            }
        }

        // Filters over the user keys whose home is each bucket (migrated ones included: they
        // still logically belong to their home bucket, §2.4.2).
        let mut filters: Vec<Vec<u8>> = Vec::with_capacity(n);
        let mut hashes: Vec<u64> = Vec::new();
        for idx in &per_bucket {
            hashes.clear();
            // The versions of a key share its rank group, so they are adjacent here (the rank
            // sort is stable over (hash, internal key) order): dropping consecutive repeats
            // keeps each key once.
            // Keys are not read here: two items with the same placement and Bloom hashes set
            // the same filter bits whether or not they are one key.
            let mut last: Option<(u128, u64)> = None;
            for it in idx.iter().filter_map(|&i| items.get(i)) {
                if last != Some((it.hash, it.bloom)) {
                    hashes.push(it.bloom);
                    last = Some((it.hash, it.bloom));
                }
            }
            filters.push(if hashes.is_empty() {
                Vec::new()
            } else {
                bloom::encode(&hashes, opts.bits_per_key)
            });
        }

        // Buckets.
        // Entries of a bucket in (hash, internal key) order — the order of `items` — so the
        // versions of a key are adjacent, newest first.
        let mut max_fill = 0usize;
        let mut entries: Vec<(&[u8], &[u8])> = Vec::new();
        for (b, p) in physical.iter_mut().enumerate() {
            p.sort_unstable();
            entries.clear();
            entries.extend(
                p.iter()
                    .filter_map(|&i| items.get(i).map(|it| (it.ikey, it.value))),
            );
            max_fill = max_fill.max(p.iter().map(|&i| sizes.get(i).copied().unwrap_or(0)).sum());
            sink.put(&encode_bucket((b * BUCKET_SIZE) as u64, &entries)?)?;
        }

        // Overflow region: one record per hash, in hash order (items are in (hash, ikey) order).
        overflow_items.sort_unstable();
        let overflow_offset = (n as u64) * BUCKET_SIZE as u64;
        let mut overflow_index: Vec<OverflowEntry> = Vec::new();
        let mut pos = 0u64;
        let mut k = 0;
        while k < overflow_items.len() {
            let h = overflow_items
                .get(k)
                .and_then(|&i| items.get(i))
                .map_or(0, |it| it.hash);
            let mut entries: Vec<(&[u8], &[u8])> = Vec::new();
            while let Some(it) = overflow_items
                .get(k)
                .and_then(|&i| items.get(i))
                .filter(|it| it.hash == h)
            {
                entries.push((it.ikey, it.value));
                k += 1;
            }
            let rec = encode_overflow_record(overflow_offset + pos, &entries);
            overflow_index.push(OverflowEntry {
                hash: h,
                offset: pos,
                len: rec.len() as u64,
            });
            pos += rec.len() as u64;
            sink.put(&rec)?;
        }
        let overflow_len = pos;

        let meta_offset = overflow_offset + overflow_len;
        let meta = encode_meta(meta_offset, &migrations, &overflow_index);
        sink.put(&meta)?;
        let filter_offset = meta_offset + meta.len() as u64;
        let fblock = encode_filters(filter_offset, &filters);
        sink.put(&fblock)?;
        let footer = Footer {
            n_buckets,
            item_count: items.len() as u64,
            overflow_offset,
            overflow_len,
            meta_offset,
            meta_len: meta.len() as u64,
            filter_offset,
            filter_len: fblock.len() as u64,
            hash_key: self.hash_key,
            bits_per_key: opts.bits_per_key,
        };
        let fb = footer.encode();
        debug_assert_eq!(fb.len(), FOOTER_SIZE);
        sink.put(&fb)?;
        let summary = HTableSummary {
            n_buckets,
            items: items.len() as u64,
            file_size: filter_offset + fblock.len() as u64 + fb.len() as u64,
            entry_bytes: sizes.iter().map(|&s| s as u64).sum(),
            migrated_items: migrated,
            overflow_items: overflow_items.len() as u64,
            source_buckets,
            migration_records: migrations.len() as u64,
            meta_len: meta.len() as u64,
            filter_len: fblock.len() as u64,
            overflow_len,
            max_fill: max_fill as f64 / BUCKET_CAPACITY as f64,
        };
        Ok((summary, FilterSet::from_filters(filters)))
    }
}
