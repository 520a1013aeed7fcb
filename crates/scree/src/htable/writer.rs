//! Writing an HTable's bytes: buckets, the overflow region, metadata, filters and footer, for a
//! table written at once or streamed by segment ([`HTableStream`]).

use std::borrow::Cow;

use crate::error::{Error, Result};
use crate::filter::bloom;
use crate::fs::CountedWriter;
use crate::key;

use super::balance::{self, OVERFLOW};
use super::format::{
    encode_bucket_into, encode_filters, encode_meta, encode_overflow_record, entry_size, entry_tag,
    EncEntry, FilterSet, Footer, Migration, OverflowEntry, FOOTER_SIZE,
};
use super::{bucket_of, placement_hash, rank_in_bucket, BUCKET_CAPACITY, BUCKET_SIZE};

use super::builder::*;
use key::cmp_split as cmp_key;

/// An overflow entry held until the end of the table: user key, tag, value; borrowed from
/// the caller's items when they outlive the writer (a table written at once), else copied
/// (a streamed table, whose segments' items are gone by the end).
pub(super) type HeldEntry<'a> = (Cow<'a, [u8]>, u64, Cow<'a, [u8]>);

/// Writes one table a balancing segment at a time: the bucket count and the oldest sequence
/// number are fixed first, then each segment's items are balanced and its buckets written
/// before the next segment's items are needed. What it keeps for the whole table is what the
/// file holds after the buckets: the filters, the migration records and the overflow records
/// (items no bucket can take).
pub(super) struct TableWriter<'a> {
    hash_key: [u8; 16],
    opts: HTableOptions,
    cap: usize,
    n_buckets: u32,
    base_seq: u64,
    /// Balancing segments ([`balance::segment_range`]).
    pub(super) segments: u32,
    /// The next segment to write.
    next: u32,
    filters: FilterSet,
    migrations: Vec<Migration>,
    /// The overflow region's records so far, one per hash: the hash and its entries (user
    /// key, tag, value), encoded at the end in hash order.
    overflow: Vec<(u128, Vec<HeldEntry<'a>>)>,
    smallest: Option<(Vec<u8>, u64)>,
    largest: Option<(Vec<u8>, u64)>,
    items: u64,
    entry_bytes: u64,
    migrated: u64,
    overflow_items: u64,
    source_buckets: u32,
    max_fill: usize,
}

impl<'a> TableWriter<'a> {
    /// A writer of a table of `n_buckets` buckets whose entry tags count from `base_seq`;
    /// `expected_items` sizes the filter buffer.
    pub(super) fn new(
        hash_key: [u8; 16],
        opts: HTableOptions,
        n_buckets: u32,
        base_seq: u64,
        expected_items: usize,
    ) -> Result<Self> {
        let cap = checked_cap(&opts)?;
        if !(1..u32::MAX).contains(&n_buckets) {
            return Err(Error::InvalidArgument("n_buckets out of range".into()));
        }
        if base_seq > key::MAX_SEQ {
            return Err(Error::InvalidArgument(
                "an HTable's base sequence number is above the largest sequence number".into(),
            ));
        }
        let segments = segments_for(n_buckets, opts.balance_segments);
        let n = n_buckets as usize;
        Ok(TableWriter {
            hash_key,
            opts,
            cap,
            n_buckets,
            base_seq,
            segments,
            next: 0,
            filters: FilterSet::with_capacity(
                n,
                (expected_items.saturating_mul(opts.bits_per_key as usize)).div_ceil(8) + 9 * n,
            ),
            migrations: Vec::new(),
            overflow: Vec::new(),
            smallest: None,
            largest: None,
            items: 0,
            entry_bytes: 0,
            migrated: 0,
            overflow_items: 0,
            source_buckets: 0,
            max_fill: 0,
        })
    }

    /// The buckets of segment `k`.
    pub(super) fn segment_buckets(&self, k: u32) -> std::ops::Range<usize> {
        balance::segment_range(self.n_buckets as usize, self.segments as usize, k as usize)
    }

    /// The bucket windows ([`super::bucket_window`]) of segment `k`'s buckets, inclusive;
    /// `None` for a segment without buckets.
    fn segment_windows(&self, k: u32) -> Option<(u64, u64)> {
        let r = self.segment_buckets(k);
        if r.is_empty() {
            return None;
        }
        // Bucket b's first window is ⌈b × 2^64 / n⌉ (bucket_of is ⌊w × n / 2^64⌋).
        let n = u128::from(self.n_buckets);
        let first = |b: usize| ((b as u128) << 64).div_ceil(n);
        let lo = u64::try_from(first(r.start)).unwrap_or(u64::MAX);
        let hi = u64::try_from(first(r.end).saturating_sub(1)).unwrap_or(u64::MAX);
        Some((lo, hi))
    }

    /// Balances and writes the next segment: `items` are the items whose home buckets lie in
    /// it (any order).
    pub(super) fn write_segment(
        &mut self,
        items: &mut [ItemRef<'a>],
        sink: &mut dyn Sink,
    ) -> Result<()> {
        self.segment(items, sink, Cow::Borrowed)
    }

    /// [`TableWriter::write_segment`] of items that do not outlive the writer: the overflow
    /// entries among them are copied.
    fn write_segment_copied(
        &mut self,
        items: &mut [ItemRef<'_>],
        sink: &mut dyn Sink,
    ) -> Result<()> {
        self.segment(items, sink, |b| Cow::Owned(b.to_vec()))
    }

    /// Balances and writes the next segment; `hold` keeps an overflow entry's bytes.
    fn segment<'x>(
        &mut self,
        items: &mut [ItemRef<'x>],
        sink: &mut dyn Sink,
        hold: impl Fn(&'x [u8]) -> Cow<'a, [u8]>,
    ) -> Result<()> {
        if self.next >= self.segments {
            return Err(Error::InvalidArgument(
                "every segment of the HTable is already written".into(),
            ));
        }
        let seg = self.segment_buckets(self.next);
        let first = seg.start;
        let n = seg.len();
        let (cap, base_seq, shift) = (self.cap, self.base_seq, self.opts.bucket_shift);
        if !items.is_sorted_by(|a, b| cmp_ent(a, b).is_le()) {
            // Unstable suffices: see `write_items`.
            items.sort_unstable_by(cmp_ent);
        }
        check_items(items)?;
        if items.iter().any(|it| it.trailer >> 8 < base_seq) {
            return Err(Error::InvalidArgument(format!(
                "HTable item with a sequence number below the table's base {base_seq}"
            )));
        }
        if self.items.saturating_add(items.len() as u64) > u64::from(u32::MAX) {
            return Err(Error::InvalidArgument(
                "too many items for one HTable".into(),
            ));
        }
        // Home buckets, counted from the segment's first.
        let mut homes: Vec<u32> = Vec::with_capacity(items.len());
        for it in items.iter() {
            let b = bucket_of(it.hash, self.n_buckets, shift) as usize;
            if !seg.contains(&b) {
                return Err(Error::InvalidArgument(format!(
                    "HTable item of home bucket {b} given with segment {} (buckets {}..{})",
                    self.next, seg.start, seg.end
                )));
            }
            homes.push((b - first) as u32);
        }
        let size_of = |i: usize| {
            items.get(i).map_or(0, |it| {
                entry_size(
                    it.ukey.len(),
                    it.value.len(),
                    entry_tag(it.trailer, base_seq),
                )
            })
        };

        // Items by home bucket, each bucket's in (rank, index) order: a counting sort by home,
        // then a sort of each bucket's packed `rank << 32 | index` words. Index order is
        // (hash, internal key) order, so the versions of a key (one hash, one rank) stay
        // adjacent, newest first. Flat arrays: one allocation each, not one per bucket.
        let home_start = csr_starts(n, homes.iter().copied());
        let mut by_home = vec![0u64; items.len()];
        {
            let mut next = home_start.clone();
            for (i, (&b, it)) in homes.iter().zip(items.iter()).enumerate() {
                if let Some(p) = next.get_mut(b as usize) {
                    if let Some(slot) = by_home.get_mut(*p) {
                        let global = b + first as u32;
                        *slot = (u64::from(rank_in_bucket(it.hash, global)) << 32) | i as u64;
                    }
                    *p += 1;
                }
            }
        }
        drop(homes);
        let range = |starts: &[usize], b: usize| {
            let s = starts.get(b).copied().unwrap_or(0);
            s..starts.get(b + 1).copied().unwrap_or(s)
        };
        for b in 0..n {
            if let Some(words) = by_home.get_mut(range(&home_start, b)) {
                words.sort_unstable();
            }
        }
        let index_of = |w: u64| (w & u64::from(u32::MAX)) as usize;
        let rank_of = |w: u64| (w >> 32) as u32;

        // Rank groups: per bucket, runs of equal rank in `by_home`; `group_end[g]` is where
        // group g's run ends (it starts where the previous group of its bucket ended).
        let mut groups = balance::Groups {
            rank_size: Vec::with_capacity(items.len()),
            start: Vec::with_capacity(n + 1),
        };
        let mut group_end: Vec<usize> = Vec::with_capacity(items.len());
        groups.start.push(0);
        for b in 0..n {
            let r = range(&home_start, b);
            let mut p = r.start;
            while p < r.end {
                let rank = by_home.get(p).map_or(0, |&w| rank_of(w));
                let mut size = 0usize;
                while let Some(&w) = by_home.get(p).filter(|&&w| p < r.end && rank_of(w) == rank) {
                    size = size.saturating_add(size_of(index_of(w)));
                    p += 1;
                }
                groups.rank_size.push((rank, size));
                group_end.push(p);
            }
            groups.start.push(groups.rank_size.len());
        }
        self.source_buckets += (0..n)
            .filter(|&b| {
                groups
                    .of(b)
                    .filter_map(|g| groups.rank_size.get(g))
                    .map(|g| g.1)
                    .filter(|&s| s <= cap)
                    .sum::<usize>()
                    > cap
            })
            .count() as u32;
        // The segment's buckets balance among themselves: its plan is the one a whole-table
        // plan makes inside this segment (the greedy orders buckets by (load, id), and every
        // id here is shifted by the same `first`).
        let dest = balance::plan(&groups, cap, 1);
        for m in balance::records(&groups, &dest) {
            self.migrations.push(Migration {
                src: m.src + first as u32,
                mark: m.mark,
                dest: if m.dest as usize == n {
                    self.n_buckets
                } else {
                    m.dest + first as u32
                },
            });
        }

        // Physical placement: each item's destination, then a counting sort by destination in
        // index order, so every bucket's entries come out in (hash, internal key) order.
        let mut dest_of = vec![OVERFLOW; items.len()];
        for b in 0..n {
            let gs = groups.of(b);
            let mut p = range(&home_start, b).start;
            for g in gs {
                let end = group_end.get(g).copied().unwrap_or(p);
                let d = dest.get(g).copied().unwrap_or(OVERFLOW);
                for &w in by_home.get(p..end).unwrap_or_default() {
                    if let Some(slot) = dest_of.get_mut(index_of(w)) {
                        *slot = d;
                    }
                }
                if d != OVERFLOW && d as usize != b {
                    self.migrated += (end - p) as u64;
                }
                p = end;
            }
        }
        let phys_start = csr_starts(n, dest_of.iter().copied().filter(|&d| d != OVERFLOW));
        let mut physical = vec![0u32; phys_start.last().copied().unwrap_or(0)];
        let mut overflow_items: Vec<usize> = Vec::new();
        {
            let mut next = phys_start.clone();
            for (i, &d) in dest_of.iter().enumerate() {
                if d == OVERFLOW {
                    overflow_items.push(i);
                } else if let Some(p) = next.get_mut(d as usize) {
                    if let Some(slot) = physical.get_mut(*p) {
                        *slot = i as u32;
                    }
                    *p += 1;
                }
            }
        }
        drop(dest_of);

        // Filters over the user keys whose home is each bucket (migrated ones included: they
        // still logically belong to their home bucket, §2.4.2).
        let mut hashes: Vec<u64> = Vec::new();
        for b in 0..n {
            hashes.clear();
            // The versions of a key share its rank group, so they are adjacent here: dropping
            // consecutive repeats keeps each key once. Keys are not read here: two items with
            // the same placement and Bloom hashes set the same filter bits whether or not they
            // are one key.
            let mut last: Option<(u128, u64)> = None;
            for &w in by_home.get(range(&home_start, b)).unwrap_or_default() {
                if let Some(it) = items.get(index_of(w)) {
                    if last != Some((it.hash, it.bloom)) {
                        hashes.push(it.bloom);
                        last = Some((it.hash, it.bloom));
                    }
                }
            }
            self.filters.push_encoded(&hashes, self.opts.bits_per_key);
        }

        // Buckets, encoded straight into the sink's buffer. The key range is noted here, where
        // each item's bytes are read anyway: a compaction's items lie at random places in its
        // inputs, and one more pass over them cost a cache miss per item.
        let mut range_of = KeyRange::default();
        let mut entries: Vec<EncEntry<'_>> = Vec::new();
        for b in 0..n {
            let members = physical.get(range(&phys_start, b)).unwrap_or_default();
            self.max_fill = self
                .max_fill
                .max(members.iter().map(|&i| size_of(i as usize)).sum());
            entries.clear();
            entries.extend(members.iter().filter_map(|&i| {
                items.get(i as usize).map(|it| {
                    range_of.note((it.ukey, it.trailer));
                    (it.ukey, entry_tag(it.trailer, base_seq), it.value)
                })
            }));
            encode_bucket_into(
                sink.buf(),
                ((first + b) * BUCKET_SIZE) as u64,
                entries.iter().copied(),
            )?;
            sink.drain()?;
        }

        // Overflow records, one per hash (items are in (hash, ikey) order), kept until every
        // bucket is written.
        overflow_items.sort_unstable();
        let mut k = 0;
        while k < overflow_items.len() {
            let h = overflow_items
                .get(k)
                .and_then(|&i| items.get(i))
                .map_or(0, |it| it.hash);
            let mut rec: Vec<HeldEntry<'a>> = Vec::new();
            while let Some(it) = overflow_items
                .get(k)
                .and_then(|&i| items.get(i))
                .filter(|it| it.hash == h)
            {
                range_of.note((it.ukey, it.trailer));
                rec.push((
                    hold(it.ukey),
                    entry_tag(it.trailer, base_seq),
                    hold(it.value),
                ));
                k += 1;
            }
            self.overflow.push((h, rec));
        }
        self.overflow_items += overflow_items.len() as u64;

        if let Some((k, t)) = range_of.smallest {
            if self
                .smallest
                .as_ref()
                .is_none_or(|(s, st)| cmp_key((k, t), (s, *st)).is_lt())
            {
                self.smallest = Some((k.to_vec(), t));
            }
        }
        if let Some((k, t)) = range_of.largest {
            if self
                .largest
                .as_ref()
                .is_none_or(|(l, lt)| cmp_key((k, t), (l, *lt)).is_gt())
            {
                self.largest = Some((k.to_vec(), t));
            }
        }
        self.items += items.len() as u64;
        self.entry_bytes += (0..items.len()).map(|i| size_of(i) as u64).sum::<u64>();
        self.next += 1;
        Ok(())
    }

    /// Writes the segments not written yet (empty), the overflow region, the metadata block,
    /// the filter block and the footer.
    pub(super) fn finish(mut self, sink: &mut dyn Sink) -> Result<(HTableSummary, FilterSet)> {
        while self.next < self.segments {
            self.write_segment(&mut [], sink)?;
        }
        let n_buckets = self.n_buckets;
        let overflow_offset = u64::from(n_buckets) * BUCKET_SIZE as u64;
        // Records in hash order: segments come in bucket order, which is hash order only when
        // the items share the bits above the bucket window (every table the engine writes).
        let mut records = std::mem::take(&mut self.overflow);
        records.sort_by_key(|r| r.0);
        let mut overflow_index: Vec<OverflowEntry> = Vec::with_capacity(records.len());
        let mut pos = 0u64;
        for (hash, entries) in records {
            let enc: Vec<EncEntry<'_>> = entries
                .iter()
                .map(|(k, t, v)| (k.as_ref(), *t, v.as_ref()))
                .collect();
            let rec = encode_overflow_record(overflow_offset + pos, &enc);
            overflow_index.push(OverflowEntry {
                hash,
                offset: pos,
                len: rec.len() as u64,
            });
            pos += rec.len() as u64;
            sink.put(&rec)?;
        }
        let overflow_len = pos;
        let meta_offset = overflow_offset + overflow_len;
        let meta = encode_meta(meta_offset, &self.migrations, &overflow_index);
        sink.put(&meta)?;
        let filter_offset = meta_offset + meta.len() as u64;
        let fblock = encode_filters(filter_offset, &self.filters);
        sink.put(&fblock)?;
        let footer = Footer {
            n_buckets,
            bucket_shift: self.opts.bucket_shift,
            item_count: self.items,
            overflow_offset,
            overflow_len,
            meta_offset,
            meta_len: meta.len() as u64,
            filter_offset,
            filter_len: fblock.len() as u64,
            hash_key: self.hash_key,
            bits_per_key: self.opts.bits_per_key,
            base_seq: self.base_seq,
        };
        let fb = footer.encode();
        debug_assert_eq!(fb.len(), FOOTER_SIZE);
        sink.put(&fb)?;
        let summary = HTableSummary {
            n_buckets,
            items: self.items,
            file_size: filter_offset + fblock.len() as u64 + fb.len() as u64,
            entry_bytes: self.entry_bytes,
            migrated_items: self.migrated,
            overflow_items: self.overflow_items,
            source_buckets: self.source_buckets,
            migration_records: self.migrations.len() as u64,
            meta_len: meta.len() as u64,
            filter_len: fblock.len() as u64,
            overflow_len,
            max_fill: self.max_fill as f64 / BUCKET_CAPACITY as f64,
            smallest: self
                .smallest
                .map(|(k, t)| key::ikey_with_trailer(&k, t))
                .unwrap_or_default(),
            largest: self
                .largest
                .map(|(k, t)| key::ikey_with_trailer(&k, t))
                .unwrap_or_default(),
            min_seq: if self.items == 0 {
                u64::MAX
            } else {
                self.base_seq
            },
        };
        Ok((summary, self.filters))
    }
}

/// Writes one table into a file segment by segment, for a caller that cannot hold all of its
/// items at once (a `trie` garbage collection of a large pile). The bucket count and the
/// oldest sequence number come first (a [`TableSizer`] pass over the items finds both); then
/// each balancing segment's items, in segment order; then [`HTableStream::finish`]. It holds
/// one segment's items and what follows the buckets in the file: filters, migration records
/// and overflow records. The file is the one [`finish_borrowed`] writes for the same items,
/// bucket count and base.
pub struct HTableStream<'w> {
    t: TableWriter<'static>,
    sink: BufferedWriter<'w>,
}

impl<'w> HTableStream<'w> {
    /// A table of `n_buckets` buckets (`opts.n_buckets` is ignored) whose items' sequence
    /// numbers are all at least `base_seq`, written to `w`.
    pub fn new(
        hash_key: [u8; 16],
        opts: HTableOptions,
        n_buckets: u32,
        base_seq: u64,
        w: &'w mut CountedWriter,
    ) -> Result<Self> {
        Ok(HTableStream {
            t: TableWriter::new(hash_key, opts, n_buckets, base_seq, 0)?,
            sink: BufferedWriter::new(w),
        })
    }

    /// Balancing segments of the table (1 or `opts.balance_segments`).
    pub fn segments(&self) -> u32 {
        self.t.segments
    }

    /// The bucket windows ([`super::bucket_window`] with the table's bucket shift) of segment
    /// `k`'s home buckets, inclusive; `None` for a segment without buckets.
    pub fn segment_windows(&self, k: u32) -> Option<(u64, u64)> {
        self.t.segment_windows(k)
    }

    /// Balances and writes the next segment: the items whose home buckets lie in it (in any
    /// order; each with its Bloom hash, as [`ItemRef`] says).
    pub fn write_segment(&mut self, mut items: Vec<ItemRef<'_>>) -> Result<()> {
        debug_assert!(items
            .iter()
            .all(|it| placement_hash(&self.t.hash_key, it.ukey) == it.hash
                && bloom::bloom_hash(it.ukey) == it.bloom));
        self.t.write_segment_copied(&mut items, &mut self.sink)?;
        self.sink.drain()
    }

    /// Writes the rest of the table (segments not given are empty).
    pub fn finish(mut self) -> Result<(HTableSummary, FilterSet)> {
        let out = self.t.finish(&mut self.sink)?;
        self.sink.flush_out()?;
        Ok(out)
    }
}
