//! The work of the `trie` layout: the flush (one HTable from a memtable into the root), the
//! compaction of an upper-level container (its whole pile merged and split by the next three
//! hash bits into one new sub-level per child: only the upper level's data is read and
//! written), the garbage collection of a last-level container (its pile merged in place), the
//! BloomCluster rebuild of a last-level container, and the sampling that estimates a last-level
//! container's garbage.
//!
//! A last-level container's BloomCluster has a fixed number of columns `C` (the bucket count of
//! its first sub-level); a key's column is `bucket_of(hash, C)`, whatever the bucket count of
//! the table holding it. Each table is sized for its own data, and the filters a cluster holds
//! for it are grouped by column when the table is written (or, for a table written while
//! another job held the cluster, computed from a scan of the table).

use std::collections::HashSet;
use std::sync::Arc;

use crate::compaction_filter::{decide, Filtered};
use crate::error::{Error, Result};
use crate::filter::bloom::bloom_hash;
use crate::fs::CountedWriter;
use crate::htable::cluster::CLUSTER_EXT;
use crate::htable::{
    bucket_of, bucket_shift_for_depth, buckets_for_bytes, finish_borrowed, placement_hash,
    segments_for, trie_child, BloomClusterBuilder, FilterSet, HTableBuilder, HTableOptions,
    HTableReader, HTableStream, HTableSummary, ItemRef, TableScan, TableSizer, FORMAT_HTABLE,
    HTABLE_EXT,
};
use crate::key::{self, ValueKind};
use crate::layout::JobCtx;
use crate::manifest::edit::{AddedTable, KsEdit};
use crate::memtable::Memtable;
use crate::options::TrieOptions;
use crate::stats::{ReadKind, WriteCause};
use crate::table::{TableFile, TableMeta};

use super::handle::{adopt, cluster_reader, table_handle, HHandle, Shared};
use super::version::{cluster_meta, cluster_record, depth_of, gc_record, ClusterRef, GcEstimate};

/// A table a job wrote.
pub struct Written {
    /// Its manifest metadata (`max_seq` = order key).
    pub meta: TableMeta,
    /// Its per-bucket filters.
    pub filters: FilterSet,
    /// Its bucket count.
    pub n: u32,
    /// Its keys' filters grouped by BloomCluster column (last-level tables).
    pub column_filters: Option<FilterSet>,
}

/// Options of a table for a container at `depth`.
fn htable_opts(o: &TrieOptions, depth: u32) -> HTableOptions {
    HTableOptions {
        bits_per_key: o.bloom_bits_per_key,
        target_fill: o.target_fill,
        bucket_fill_cap: o.bucket_fill_cap,
        n_buckets: None,
        bucket_shift: bucket_shift_for_depth(depth),
        balance_segments: 8,
    }
}

/// Encoded size of an item in a bucket (about: the two length varints take 2 bytes here).
fn item_bytes(ukey: &[u8], value: &[u8]) -> u64 {
    (ukey.len() + value.len() + 5) as u64
}

/// What a BloomCluster needs of a table being written, noted key by key (the manifest's key
/// range and oldest sequence number come from the builder's summary).
struct TableStats {
    /// For last-level tables: the cluster's column count and (column, Bloom hash) of each key.
    columns: Option<(u32, Vec<(u32, u64)>)>,
    /// The bucket shift of the table's container (columns are its buckets).
    shift: u32,
    bits: u32,
}

impl TableStats {
    fn new(ctx: &JobCtx<'_>, columns: Option<u32>, depth: u32) -> Self {
        TableStats {
            columns: columns.map(|c| (c.max(1), Vec::new())),
            shift: bucket_shift_for_depth(depth),
            bits: ctx.opts.trie.bloom_bits_per_key,
        }
    }

    /// Notes the key of an item with placement hash `hash` and Bloom hash `bloom` (call once
    /// per key).
    fn note_key(&mut self, hash: u128, bloom: u64) {
        if let Some((c, keys)) = &mut self.columns {
            keys.push((bucket_of(hash, *c, self.shift), bloom));
        }
    }

    /// Creates the table file with order key `order_key`, has `build` write it, syncs it, and
    /// leaves an open handle for the version that will name it (keeping the filters in memory
    /// when `keep_filters`).
    fn finish(
        self,
        ctx: &JobCtx<'_>,
        shared: &Arc<Shared>,
        order_key: u64,
        cause: WriteCause,
        keep_filters: bool,
        build: impl FnOnce(&mut CountedWriter) -> Result<(HTableSummary, FilterSet)>,
    ) -> Result<Written> {
        let no = ctx.new_file_no();
        let path = ctx.tables.dir.join(format!("{no:06}.{HTABLE_EXT}"));
        let mut w = ctx.tables.env.create(&path, cause)?;
        let (summary, filters) = build(&mut w)?;
        w.sync()?;
        drop(w);
        let column_filters = match self.columns {
            Some((c, _)) if c == summary.n_buckets => Some(filters.clone()),
            Some((c, keys)) => Some(group_filters(c, keys, self.bits)?),
            None => None,
        };
        let env = &ctx.tables.env;
        let reader = HTableReader::open_kind(
            env.open(&path, env.direct_reads)?,
            false,
            ReadKind::Compaction,
        )?;
        let handle = HHandle::new(
            reader,
            keep_filters.then(|| filters.clone()),
            shared.clone(),
            ctx.tables.open.bounded(),
        );
        shared.pending.lock().insert(no, Arc::new(handle));
        Ok(Written {
            meta: TableMeta {
                file_no: no,
                size: summary.file_size,
                entries: summary.items,
                min_seq: if summary.min_seq == u64::MAX {
                    0
                } else {
                    summary.min_seq
                },
                smallest: summary.smallest,
                largest: summary.largest,
                max_seq: order_key,
                append: None,
            },
            filters,
            n: summary.n_buckets,
            column_filters,
        })
    }
}

/// Filters of `keys` (column, Bloom hash; each key once) grouped into `c` columns.
fn group_filters(c: u32, mut keys: Vec<(u32, u64)>, bits: u32) -> Result<FilterSet> {
    keys.sort_unstable();
    let mut g = ColumnGrouper::new(c, 0, bits, keys.len());
    for (col, h) in keys {
        g.note_column(col, h);
    }
    g.finish()
}

/// The filters of a table's keys grouped into the `c` BloomCluster columns of its last-level
/// container, built as the keys arrive in column order (hash order: the column follows the
/// hash), so only one column's keys are held at a time.
struct ColumnGrouper {
    c: u32,
    shift: u32,
    bits: u32,
    /// The column being collected.
    col: u32,
    hashes: Vec<u64>,
    out: FilterSet,
    out_of_order: bool,
}

impl ColumnGrouper {
    /// A grouper into `c` columns of a container whose bucket shift is `shift`, for about
    /// `keys` keys.
    fn new(c: u32, shift: u32, bits: u32, keys: usize) -> Self {
        let c = c.max(1);
        ColumnGrouper {
            c,
            shift,
            bits,
            col: 0,
            hashes: Vec::new(),
            out: FilterSet::with_capacity(c as usize, (keys * bits as usize).div_ceil(8)),
            out_of_order: false,
        }
    }
    /// Notes a key by placement hash and Bloom hash (each key once, in hash order).
    fn note(&mut self, hash: u128, bloom: u64) {
        self.note_column(bucket_of(hash, self.c, self.shift), bloom);
    }
    /// Notes a key of column `col` (in column order).
    fn note_column(&mut self, col: u32, bloom: u64) {
        if col < self.col || col >= self.c {
            self.out_of_order = true;
            return;
        }
        while self.col < col {
            self.out.push_encoded(&self.hashes, self.bits);
            self.hashes.clear();
            self.col += 1;
        }
        self.hashes.push(bloom);
    }
    /// The `c` column filters.
    fn finish(mut self) -> Result<FilterSet> {
        if self.out_of_order {
            return Err(Error::InvalidArgument(
                "trie: BloomCluster column keys arrived out of hash order (a bug)".into(),
            ));
        }
        while self.col < self.c {
            self.out.push_encoded(&self.hashes, self.bits);
            self.hashes.clear();
            self.col += 1;
        }
        Ok(self.out)
    }
}

/// The filters of a table's keys grouped into `c` BloomCluster columns of a container whose
/// bucket shift is `shift`: its own per-bucket filters when it has `c` buckets placed with that
/// shift, else computed from a scan (Compaction reads).
pub fn column_filters_of(
    reader: &HTableReader,
    c: u32,
    shift: u32,
    bits: u32,
) -> Result<FilterSet> {
    if reader.n_buckets() == c && reader.bucket_shift() == shift {
        return reader.read_filters_kind(ReadKind::Compaction);
    }
    let scan = reader.scan()?;
    let mut keys = Vec::with_capacity(scan.len());
    let mut last: Option<&[u8]> = None;
    for i in 0..scan.len() {
        let Some((h, uk, _, _)) = scan.get(i) else {
            break;
        };
        if last != Some(uk) {
            keys.push((bucket_of(h, c.max(1), shift), bloom_hash(uk)));
            last = Some(uk);
        }
    }
    group_filters(c.max(1), keys, bits)
}

/// Drops versions no snapshot can see: a version is hidden when a newer version of its key
/// is at or below `smallest_snapshot`; a tombstone at or below it is dropped when `tombstones`
/// says nothing older can exist below the output.
struct DropRule {
    smallest: u64,
    last_seq: u64,
}

impl DropRule {
    fn new(smallest: u64) -> Self {
        DropRule {
            smallest,
            last_seq: u64::MAX,
        }
    }
    /// Whether the next item, with internal-key trailer `trailer`, is dropped; `same_key`:
    /// it is a version of the previous item's user key.
    fn next(&mut self, trailer: u64, same_key: bool, tombstones: bool) -> bool {
        let (seq, kind) = (trailer >> 8, (trailer & 0xff) as u8);
        if !same_key {
            self.last_seq = u64::MAX;
        }
        let hidden = self.last_seq <= self.smallest;
        let dead_tombstone = tombstones && kind == ValueKind::Delete as u8 && seq <= self.smallest;
        self.last_seq = seq;
        hidden || dead_tombstone
    }
}

/// The trailer an item that `DropRule` kept is written with: sequence number 0 when every
/// snapshot, present and future, sees the version (its sequence number is at or below the
/// smallest snapshot), else its own. Such a version is the oldest its key keeps in the
/// output (`DropRule` drops the older ones), so an HTable still holds each key's versions in
/// internal-key order; between tables, a trie's structure (memtable, then containers root
/// first, each pile newest first) says which version is newer, never the sequence numbers.
/// The tag of a zeroed entry is one byte instead of three or four (docs/format-htable.md), as
/// RocksDB zeroes the sequence numbers of its bottommost level.
fn written_trailer(trailer: u64, smallest_snapshot: u64) -> u64 {
    if trailer >> 8 <= smallest_snapshot {
        trailer & 0xff
    } else {
        trailer
    }
}

/// The merged items of a pile: the scans of its tables and the surviving items in (hash,
/// internal key) order as (table, item) references into them.
pub struct Merged {
    scans: Vec<TableScan>,
    /// Surviving items.
    pub refs: Vec<(u32, u32)>,
    /// Surviving puts the compaction filter turned into tombstones (`compaction_filter`):
    /// [`Merged::get`] and [`Merged::item`] return them as tombstones with no value.
    tombstoned: HashSet<(u32, u32)>,
}

impl Merged {
    /// Item `r`: `(hash, user key, trailer, value)`.
    pub fn get(&self, r: (u32, u32)) -> Option<(u128, &[u8], u64, &[u8])> {
        let (hash, ukey, trailer, value) = self.scans.get(r.0 as usize)?.get(r.1 as usize)?;
        let (trailer, value) = self.filtered(r, trailer, value);
        Some((hash, ukey, trailer, value))
    }
    /// Item `r` with its Bloom hash.
    pub fn item(&self, r: (u32, u32)) -> Option<ItemRef<'_>> {
        let scan = self.scans.get(r.0 as usize)?;
        let (hash, ukey, trailer, value) = scan.get(r.1 as usize)?;
        let (trailer, value) = self.filtered(r, trailer, value);
        Some(ItemRef {
            hash,
            ukey,
            trailer,
            value,
            bloom: scan.bloom(r.1 as usize)?,
        })
    }
    /// The trailer and value item `r` is written with: a tombstone at its sequence number
    /// when the filter dropped it.
    fn filtered<'v>(&self, r: (u32, u32), trailer: u64, value: &'v [u8]) -> (u64, &'v [u8]) {
        if !self.tombstoned.is_empty() && self.tombstoned.contains(&r) {
            (key::trailer(trailer >> 8, ValueKind::Delete), &[])
        } else {
            (trailer, value)
        }
    }
    /// About the encoded bytes of items `refs`.
    pub fn bytes(&self, refs: &[(u32, u32)]) -> u64 {
        refs.iter()
            .filter_map(|&r| self.get(r))
            .map(|(_, k, _, v)| item_bytes(k, v))
            .sum()
    }
}

/// Reads the items `scan` returns of each of `tables` and merges them in (hash, internal key)
/// order, dropping what no snapshot can see (tombstones too where `tombstones(hash)`).
pub fn merge_tables(
    ctx: &JobCtx<'_>,
    shared: &Arc<Shared>,
    tables: &[Arc<TableFile>],
    tombstones: &dyn Fn(u128) -> bool,
    scan: &dyn Fn(&HTableReader) -> Result<TableScan>,
) -> Result<Merged> {
    let mut scans: Vec<TableScan> = Vec::with_capacity(tables.len());
    for t in tables {
        let mut m = 0;
        let (_, h) = table_handle(t, shared, &ctx.hash_key, ReadKind::Compaction, &mut m)?;
        scans.push(scan(&h)?);
    }
    let total: usize = scans.iter().map(TableScan::len).sum();
    let mut pos: Vec<usize> = vec![0; scans.len()];
    // The hash of each input's next item (`None`: exhausted). Keys are read only when hashes
    // are equal: the items are in hash order with their keys scattered over the tables' bytes,
    // so reading every key cost a cache miss per item (the key's trailer, all the drop rule
    // needs, was kept by the scan).
    let mut heads: Vec<Option<u128>> = scans.iter().map(|s| s.hash(0)).collect();
    // The user key of item `p` of input `i`.
    let key_at = |i: usize, p: usize| -> &[u8] {
        scans
            .get(i)
            .map_or(&[][..], |s| s.ukey_at(p).unwrap_or_default())
    };
    let mut rule = DropRule::new(ctx.smallest_snapshot);
    let mut refs = Vec::with_capacity(total);
    let mut tombstoned = HashSet::new();
    // The previous item: (input, position, hash).
    let mut prev: Option<(usize, usize, u128)> = None;
    loop {
        // The user key of input `i`'s next item (read only to break a tie of hashes).
        let head = |i: usize| key_at(i, pos.get(i).copied().unwrap_or(0));
        // Versions of one user key are taken newest input first, each input's in its own
        // (newest-first) order: the inputs' order, not their sequence numbers, says which
        // version is newer, since a version every snapshot saw was written with sequence
        // number 0 (`written_trailer`).
        let mut best: Option<(usize, u128)> = None;
        for (i, h) in heads.iter().enumerate() {
            let Some(h) = *h else { continue };
            let better = match best {
                None => true,
                Some((b, bh)) => h < bh || (h == bh && head(i) < head(b)),
            };
            if better {
                best = Some((i, h));
            }
        }
        let Some((i, h)) = best else { break };
        let Some(p) = pos.get_mut(i) else { break };
        let at = *p;
        let same_key = prev.is_some_and(|(pi, pp, ph)| ph == h && key_at(pi, pp) == key_at(i, at));
        let trailer = scans.get(i).and_then(|s| s.trailer(at)).unwrap_or(0);
        let bottom = tombstones(h);
        if !rule.next(trailer, same_key, bottom) {
            // The compaction filter, asked only when there is one (it reads the key and
            // value): nothing at the bottom, else a tombstone (`compaction_filter`).
            let filtered = match (
                &ctx.opts.compaction_filter,
                scans.get(i).and_then(|s| s.get(at)),
            ) {
                (Some(_), Some((_, ukey, t, value))) => {
                    decide(ctx, ukey, (t & 0xff) as u8, t >> 8, value, bottom)
                }
                _ => Filtered::Keep,
            };
            match filtered {
                Filtered::Keep => refs.push((i as u32, at as u32)),
                Filtered::Remove => {}
                Filtered::Tombstone => {
                    refs.push((i as u32, at as u32));
                    tombstoned.insert((i as u32, at as u32));
                }
            }
        }
        prev = Some((i, at, h));
        *p += 1;
        if let Some(slot) = heads.get_mut(i) {
            *slot = scans.get(i).and_then(|s| s.hash(*p));
        }
    }
    Ok(Merged {
        scans,
        refs,
        tombstoned,
    })
}

/// Writes items `refs` of `m` as one table of a container at `depth`.
#[allow(clippy::too_many_arguments)]
fn write_refs(
    ctx: &JobCtx<'_>,
    shared: &Arc<Shared>,
    m: &Merged,
    refs: &[(u32, u32)],
    depth: u32,
    columns: Option<u32>,
    order_key: u64,
    cause: WriteCause,
    keep_filters: bool,
) -> Result<Option<Written>> {
    // The items stay in the inputs' buffers (one child's eighth of each, or a whole pile for
    // a garbage collection): copying each into a builder's arena cost as much as encoding the
    // buckets.
    let mut stats = TableStats::new(ctx, columns, depth);
    let mut items: Vec<ItemRef<'_>> = Vec::with_capacity(refs.len());
    // The scans kept each item's Bloom hash, so no key is read here but to tell apart two
    // items of equal hash.
    for &r in refs {
        let Some(it) = m.item(r) else {
            continue;
        };
        // Versions of a key arrive together, newest first.
        let new_key = items
            .last()
            .is_none_or(|p| p.hash != it.hash || p.ukey != it.ukey);
        if new_key {
            stats.note_key(it.hash, it.bloom);
        }
        items.push(ItemRef {
            trailer: written_trailer(it.trailer, ctx.smallest_snapshot),
            ..it
        });
    }
    if items.is_empty() {
        return Ok(None);
    }
    let opts = htable_opts(&ctx.opts.trie, depth);
    stats
        .finish(ctx, shared, order_key, cause, keep_filters, |w| {
            finish_borrowed(ctx.hash_key, opts, items, w)
        })
        .map(Some)
}

/// The BloomCluster column count of a last-level container: its cluster's, else the bucket
/// count of its oldest table, else one chosen for `bytes` (its first sub-level).
pub fn container_columns(
    ctx: &JobCtx<'_>,
    shared: &Arc<Shared>,
    pile: &[Arc<TableFile>],
    cluster: Option<&ClusterRef>,
    bytes: u64,
) -> Result<u32> {
    if let Some(c) = cluster {
        return Ok(c.n);
    }
    if let Some(t) = pile.last() {
        let mut m = 0;
        let (_, h) = table_handle(t, shared, &ctx.hash_key, ReadKind::Compaction, &mut m)?;
        return Ok(h.n_buckets());
    }
    Ok(buckets_for_bytes(bytes, ctx.opts.trie.target_fill))
}

/// A new BloomCluster of `c` columns for a last-level container. Starts from `old` (keeping
/// the sub-levels still in `pile`), covers the tables of `pile` it does not cover yet (oldest
/// first) and then `new` (whose column filters were computed when they were written). Puts the
/// record and the old file's removal in `edit` and returns the builder (for sampling; `None`
/// when it covers nothing). When a column does not fit a block no cluster is written
/// (per-table filters then serve the container), but the builder is returned all the same.
#[allow(clippy::too_many_arguments)]
pub fn rebuild_cluster(
    ctx: &JobCtx<'_>,
    shared: &Arc<Shared>,
    cid: u64,
    c: u32,
    old: Option<&ClusterRef>,
    pile: &[Arc<TableFile>],
    new: &[&Written],
    edit: &mut KsEdit,
) -> Result<Option<BloomClusterBuilder>> {
    let bits = ctx.opts.trie.bloom_bits_per_key;
    let shift = bucket_shift_for_depth(depth_of(cid));
    let mut b = match old {
        Some(o) if o.n == c => {
            let mut m = 0;
            let r = cluster_reader(o, ReadKind::Compaction, &mut m)?;
            let mut b = BloomClusterBuilder::from_reader_kind(&r, ReadKind::Compaction)?;
            b.retain(|id| pile.iter().any(|t| t.meta.file_no == id));
            b
        }
        _ => BloomClusterBuilder::new(c),
    };
    for t in pile.iter().rev() {
        if b.table_ids().contains(&t.meta.file_no) {
            continue;
        }
        let mut m = 0;
        let (_, h) = table_handle(t, shared, &ctx.hash_key, ReadKind::Compaction, &mut m)?;
        b.add_sublevel(t.meta.file_no, column_filters_of(&h, c, shift, bits)?)?;
    }
    for w in new {
        let f = match &w.column_filters {
            Some(f) if f.len() == c as usize => f.clone(),
            _ => {
                let mut m = 0;
                let f = TableFile::with_ext(w.meta.clone(), ctx.tables.clone(), HTABLE_EXT);
                if let Some(h) = shared.pending.lock().get(&w.meta.file_no) {
                    adopt(&f, h.clone(), false);
                }
                let (_, h) = table_handle(&f, shared, &ctx.hash_key, ReadKind::Compaction, &mut m)?;
                column_filters_of(&h, c, shift, bits)?
            }
        };
        b.add_sublevel(w.meta.file_no, f)?;
    }
    if let Some(o) = old {
        // Removing the old file clears it from the container (a new record replaces it).
        if !edit.removed.contains(&o.file.meta.file_no) {
            edit.removed.push(o.file.meta.file_no);
        }
    }
    if b.n_sublevels() == 0 {
        return Ok(None);
    }
    if b.overflowing_column().is_some() {
        let newest = new
            .iter()
            .map(|w| w.meta.file_no)
            .chain(pile.iter().map(|t| t.meta.file_no))
            .max()
            .unwrap_or(0);
        shared.cluster_failed.lock().insert(cid, newest);
        // No file: per-table filters serve the container. The filters are still returned for
        // sampling: garbage collection is what shrinks the pile until a cluster fits again
        // (without an estimate, such a container was never collected and grew forever).
        return Ok(Some(b));
    }
    let no = ctx.new_file_no();
    let path = ctx.tables.dir.join(format!("{no:06}.{CLUSTER_EXT}"));
    let mut w = ctx.tables.env.create(&path, WriteCause::Metadata)?;
    let size = b.finish(&mut w)?;
    w.sync()?;
    edit.records.push(cluster_record(
        cid,
        &cluster_meta(no, size),
        c,
        b.table_ids(),
    ));
    Ok(Some(b))
}

/// Estimates the garbage fraction of last-level container `cid` from its new BloomCluster `b`
/// (covering `pile`, newest first): reads `gc_sample_columns` buckets of every sub-level but
/// the newest and counts the bytes of versions that a newer version in the same sub-level hides
/// from every snapshot, that a newer sub-level's filter says it holds a version of, and of
/// tombstones no snapshot needs. Filter false positives (≈0.05% per sub-level at 16 bits per
/// key) make it overestimate very slightly; each sub-level's estimate is weighted by its bytes.
pub fn sample_garbage(
    ctx: &JobCtx<'_>,
    shared: &Arc<Shared>,
    cid: u64,
    pile: &[Arc<TableFile>],
    b: &BloomClusterBuilder,
    seed: u64,
) -> Result<f64> {
    if pile.len() < 2 {
        return Ok(0.0);
    }
    let c = b.n_columns();
    let shift = bucket_shift_for_depth(depth_of(cid));
    let index_of = |id: u64| b.table_ids().iter().position(|&x| x == id);
    let (mut total, mut garbage) = (0f64, 0f64);
    for (age, t) in pile.iter().enumerate() {
        let bytes = t.meta.size as f64;
        total += bytes;
        if age == 0 {
            // The newest sub-level hides nothing newer; its own tombstones are counted by the
            // next sample (they stay until the pile is merged).
            continue;
        }
        let mut m = 0;
        let (_, h) = table_handle(t, shared, &ctx.hash_key, ReadKind::Compaction, &mut m)?;
        let n = h.n_buckets();
        let newer: Vec<usize> = pile
            .iter()
            .take(age)
            .filter_map(|x| index_of(x.meta.file_no))
            .collect();
        let (mut seen, mut dead) = (0u64, 0u64);
        let cols = ctx.opts.trie.gc_sample_columns.min(n);
        for i in 0..cols {
            let bucket = (seed
                .wrapping_add(t.meta.file_no)
                .wrapping_add(u64::from(i).wrapping_mul(0x9E37_79B9_7F4A_7C15))
                % u64::from(n)) as u32;
            let mut last: Option<Vec<u8>> = None;
            let mut last_seq = u64::MAX;
            for (ik, v) in h.bucket_entries(bucket, ReadKind::Compaction)? {
                let p = key::parse(&ik);
                let size = (ik.len() + v.len()) as u64;
                seen += size;
                if last.as_deref() != Some(p.user_key) {
                    last = Some(p.user_key.to_vec());
                    last_seq = u64::MAX;
                }
                let hidden_here = last_seq <= ctx.smallest_snapshot;
                last_seq = p.seq;
                let dead_tombstone =
                    p.kind == ValueKind::Delete as u8 && p.seq <= ctx.smallest_snapshot;
                let hk = placement_hash(&ctx.hash_key, p.user_key);
                let col = bucket_of(hk, c, shift);
                let bh = bloom_hash(p.user_key);
                let newer_version = newer.iter().any(|&s| b.may_contain(s, col, bh));
                if hidden_here || dead_tombstone || newer_version {
                    dead += size;
                }
            }
        }
        if seen > 0 {
            garbage += bytes * dead as f64 / seen as f64;
        }
    }
    Ok(if total > 0.0 { garbage / total } else { 0.0 })
}

/// Records a garbage estimate in the edit that adds the sub-level it was taken with.
fn note_estimate(e: &mut KsEdit, cid: u64, signature: u64, ratio: f64) {
    e.records
        .push(gc_record(cid, GcEstimate { signature, ratio }));
}

/// Flush: one HTable in the root from a frozen memtable.
pub fn flush(ctx: &JobCtx<'_>, shared: &Arc<Shared>, mem: &Memtable) -> Result<KsEdit> {
    let mut e = KsEdit::default();
    if mem.is_empty() {
        return Ok(e);
    }
    let snap = ctx.smallest_snapshot;
    let mut rule = DropRule::new(snap);
    // The items are borrowed from the memtable's arenas (read-locked for the flush; nothing
    // writes a memtable being flushed): copying them into a builder first held a second copy
    // of the memtable for the length of the flush.
    let view = mem.flush_view();
    let mut items: Vec<ItemRef<'_>> = Vec::with_capacity(mem.len());
    // The current user key, its placement hash and its Bloom hash.
    let mut last: Option<(&[u8], u128, u64)> = None;
    let mut order_key = 0u64;
    view.for_each(|ukey, trailer, value| {
        order_key = order_key.max(trailer >> 8);
        let (hash, bloom, same_key) = match last {
            Some((k, h, b)) if k == ukey => (h, b, true),
            _ => {
                let (h, b) = (placement_hash(&ctx.hash_key, ukey), bloom_hash(ukey));
                last = Some((ukey, h, b));
                (h, b, false)
            }
        };
        if rule.next(trailer, same_key, false) {
            return;
        }
        items.push(ItemRef {
            hash,
            ukey,
            trailer: written_trailer(trailer, snap),
            value,
            bloom,
        });
    });
    if !items.is_empty() {
        // A root table: no BloomCluster columns.
        let stats = TableStats::new(ctx, None, 0);
        let opts = htable_opts(&ctx.opts.trie, 0);
        let w = stats.finish(ctx, shared, order_key, WriteCause::Flush, true, |out| {
            finish_borrowed(ctx.hash_key, opts, items, out)
        })?;
        e.added.push(AddedTable {
            level: 0,
            slot: 0,
            format: FORMAT_HTABLE,
            meta: w.meta,
        });
    }
    drop(view);
    Ok(e)
}

/// What a compaction knows about one child of its container.
pub struct ChildInfo {
    /// Child container id.
    pub id: u64,
    /// Its pile when the job was picked (newest first).
    pub pile: Vec<Arc<TableFile>>,
    /// Its cluster when picked.
    pub cluster: Option<Arc<ClusterRef>>,
    /// The job holds the child's cluster and rebuilds it.
    pub rebuild_cluster: bool,
    /// Nothing is stored in the child's subtree: tombstones can be dropped.
    pub subtree_empty: bool,
}

/// Compacts container `cid`'s pile `inputs` (newest first) into its children.
pub fn compact_container(
    ctx: &JobCtx<'_>,
    shared: &Arc<Shared>,
    cid: u64,
    inputs: &[Arc<TableFile>],
    children: &[ChildInfo],
    last_depth: u32,
) -> Result<KsEdit> {
    let depth = depth_of(cid);
    let child_depth = depth + 1;
    let order_key = inputs.iter().map(|t| t.meta.max_seq).max().unwrap_or(0);
    let child_of = |h: u128| trie_child(h, depth).unwrap_or(0);
    let empty_below: Vec<bool> = (0..8u8)
        .map(|c| children.get(c as usize).is_some_and(|ch| ch.subtree_empty))
        .collect();
    let tombstones = |h: u128| empty_below.get(child_of(h) as usize) == Some(&true);
    let mut e = KsEdit::default();
    for t in inputs {
        e.removed.push(t.meta.file_no);
    }
    // One child at a time: only that child's eighth of each input is in memory (its buckets
    // are one contiguous range, `HTableReader::scan_child`). The items read per input are
    // added up and checked against each table's count at the end.
    let mut counted = vec![0u64; inputs.len()];
    for c in 0..8u8 {
        let m = merge_tables(ctx, shared, inputs, &tombstones, &|r| {
            r.scan_child(depth, c)
        })?;
        for (n, scan) in counted.iter_mut().zip(&m.scans) {
            *n += scan.len() as u64;
        }
        let group = &m.refs;
        let Some(ch) = children.get(c as usize) else {
            continue;
        };
        if group.is_empty() {
            continue;
        }
        // Between children: a flush waiting for a free thread runs here.
        ctx.flush_point()?;
        if child_depth < last_depth {
            let w = write_refs(
                ctx,
                shared,
                &m,
                group,
                child_depth,
                None,
                order_key,
                WriteCause::Compaction,
                true,
            )?;
            if let Some(w) = w {
                e.added.push(AddedTable {
                    level: child_depth,
                    slot: ch.id,
                    format: FORMAT_HTABLE,
                    meta: w.meta,
                });
            }
            continue;
        }
        let bytes = m.bytes(group);
        let c = container_columns(ctx, shared, &ch.pile, ch.cluster.as_deref(), bytes)?;
        let w = write_refs(
            ctx,
            shared,
            &m,
            group,
            child_depth,
            Some(c),
            order_key,
            WriteCause::Compaction,
            false,
        )?;
        let Some(w) = w else { continue };
        e.added.push(AddedTable {
            level: child_depth,
            slot: ch.id,
            format: FORMAT_HTABLE,
            meta: w.meta.clone(),
        });
        if !ch.rebuild_cluster {
            continue;
        }
        let cluster = rebuild_cluster(
            ctx,
            shared,
            ch.id,
            c,
            ch.cluster.as_deref(),
            &ch.pile,
            &[&w],
            &mut e,
        )?;
        // Estimate the child's garbage now that it has a new sub-level.
        if let (Some(b), true) = (cluster, ctx.opts.trie.gc_garbage_ratio > 0.0) {
            let f = TableFile::with_ext(w.meta.clone(), ctx.tables.clone(), HTABLE_EXT);
            if let Some(h) = shared.pending.lock().get(&w.meta.file_no) {
                adopt(&f, h.clone(), false);
            }
            let mut pile = vec![f];
            pile.extend(ch.pile.iter().cloned());
            let ratio = sample_garbage(ctx, shared, ch.id, &pile, &b, order_key)?;
            note_estimate(&mut e, ch.id, order_key, ratio);
        }
    }
    check_counts(ctx, shared, inputs, &counted)?;
    Ok(e)
}

/// Checks that the items read from each of `tables` one child's eighth at a time, `counted`,
/// add up to the item count of its footer.
fn check_counts(
    ctx: &JobCtx<'_>,
    shared: &Arc<Shared>,
    tables: &[Arc<TableFile>],
    counted: &[u64],
) -> Result<()> {
    for (t, &n) in tables.iter().zip(counted) {
        let mut m = 0;
        let (_, h) = table_handle(t, shared, &ctx.hash_key, ReadKind::Compaction, &mut m)?;
        if n != h.item_count() {
            return Err(Error::corruption(
                h.path(),
                0,
                format!(
                    "the children of the table hold {n} items, its footer says {}",
                    h.item_count()
                ),
            ));
        }
    }
    Ok(())
}

/// Garbage-collects last-level container `cid`: merges its pile (newest first) in place,
/// dropping hidden versions and tombstones, into one table and a new BloomCluster (same column
/// count). Bytes are counted as `WriteCause::Gc`.
pub fn gc_container(
    ctx: &JobCtx<'_>,
    shared: &Arc<Shared>,
    cid: u64,
    pile: &[Arc<TableFile>],
    cluster: Option<&ClusterRef>,
) -> Result<KsEdit> {
    let order_key = pile.iter().map(|t| t.meta.max_seq).max().unwrap_or(0);
    // The column count comes from the cluster or the pile's oldest table (a pile is never
    // empty here; an empty one would get one column).
    let c = container_columns(ctx, shared, pile, cluster, 0)?;
    let mut e = KsEdit::default();
    for t in pile {
        e.removed.push(t.meta.file_no);
    }
    let pile_bytes: u64 = pile.iter().map(|t| t.meta.size).sum();
    let w = if pile_bytes <= ctx.opts.trie.gc_single_pass_bytes {
        let m = merge_tables(ctx, shared, pile, &|_| true, &|r| r.scan())?;
        write_refs(
            ctx,
            shared,
            &m,
            &m.refs,
            depth_of(cid),
            Some(c),
            order_key,
            WriteCause::Gc,
            false,
        )?
    } else {
        gc_two_pass(ctx, shared, depth_of(cid), pile, c, order_key)?
    };
    // The old cluster covers only tables being removed: start afresh (removing its file
    // clears it from the container).
    if let Some(o) = cluster {
        e.removed.push(o.file.meta.file_no);
    }
    if let Some(w) = w {
        e.added.push(AddedTable {
            level: depth_of(cid),
            slot: cid,
            format: FORMAT_HTABLE,
            meta: w.meta.clone(),
        });
        rebuild_cluster(ctx, shared, cid, c, None, &[], &[&w], &mut e)?;
    }
    note_estimate(&mut e, cid, order_key, 0.0);
    Ok(e)
}

/// The table a garbage collection of `pile` (a last-level container at `depth` whose cluster
/// has `c` columns) writes, merged twice one eighth at a time so that its heap is about an
/// eighth of a one-pass merge's (`TrieOptions::gc_single_pass_bytes`). The first pass counts
/// the surviving items: the new table's bucket count and oldest sequence number, which its
/// first bucket needs. The second merges the items of each balancing segment of the new
/// table and writes that segment (`HTableStream`); the table equals the one-pass table but
/// for entry tags counted against 0 when sizing (a byte or two more per item that a live
/// snapshot keeps a sequence number for). A new table of one balancing segment (under 512
/// buckets) balances over all its buckets and so needs its items at once: the second pass
/// then copies the survivors (≈ 2 MB at most) into a builder one eighth at a time.
fn gc_two_pass(
    ctx: &JobCtx<'_>,
    shared: &Arc<Shared>,
    depth: u32,
    pile: &[Arc<TableFile>],
    c: u32,
    order_key: u64,
) -> Result<Option<Written>> {
    let opts = htable_opts(&ctx.opts.trie, depth);
    let shift = bucket_shift_for_depth(depth);
    let snap = ctx.smallest_snapshot;
    let mut sizer = TableSizer::new(&opts, 0)?;
    let mut counted = vec![0u64; pile.len()];
    for child in 0..8u8 {
        let m = merge_tables(ctx, shared, pile, &|_| true, &|r| {
            r.scan_child(depth, child)
        })?;
        for (n, scan) in counted.iter_mut().zip(&m.scans) {
            *n += scan.len() as u64;
        }
        for &r in &m.refs {
            if let Some((hash, ukey, trailer, value)) = m.get(r) {
                sizer.add(
                    hash,
                    ukey.len(),
                    value.len(),
                    written_trailer(trailer, snap),
                );
            }
        }
        drop(m);
        // Between eighths: a flush waiting for a free thread runs here.
        ctx.flush_point()?;
    }
    check_counts(ctx, shared, pile, &counted)?;
    if sizer.items() == 0 {
        return Ok(None);
    }
    let base_seq = sizer.oldest_seq();
    let n = sizer.n_buckets();
    if segments_for(n, opts.balance_segments) == 1 {
        // A table of one balancing segment balances over all its buckets, so it needs its
        // items at once. They are few (fewer than `MIN_BUCKETS_PER_SEGMENT ×
        // balance_segments` buckets, ≈ 2 MB): copied into a builder one eighth at a time.
        let mut b = HTableBuilder::new(ctx.hash_key, opts);
        let mut stats = TableStats::new(ctx, Some(c), depth);
        for child in 0..8u8 {
            let m = merge_tables(ctx, shared, pile, &|_| true, &|r| {
                r.scan_child(depth, child)
            })?;
            let mut last: Option<(u128, &[u8])> = None;
            for &r in &m.refs {
                let Some(it) = m.item(r) else {
                    continue;
                };
                // Versions of a key arrive together, newest first.
                if last != Some((it.hash, it.ukey)) {
                    stats.note_key(it.hash, it.bloom);
                    last = Some((it.hash, it.ukey));
                }
                b.add_parts(
                    it.hash,
                    it.ukey,
                    written_trailer(it.trailer, snap),
                    it.value,
                );
            }
            drop(m);
            ctx.flush_point()?;
        }
        return stats
            .finish(ctx, shared, order_key, WriteCause::Gc, false, |out| {
                b.finish_with_filters(out)
            })
            .map(Some);
    }
    let bits = ctx.opts.trie.bloom_bits_per_key;
    // The cluster's column filters: the table's own when it has the cluster's column count.
    let mut grouper = (n != c).then(|| ColumnGrouper::new(c, shift, bits, 0));
    let stats = TableStats::new(ctx, None, depth);
    let mut w = stats.finish(ctx, shared, order_key, WriteCause::Gc, false, |out| {
        let mut table = HTableStream::new(ctx.hash_key, opts, n, base_seq, out)?;
        for k in 0..table.segments() {
            let Some((lo, hi)) = table.segment_windows(k) else {
                table.write_segment(Vec::new())?;
                continue;
            };
            let m = merge_tables(ctx, shared, pile, &|_| true, &|r| {
                r.scan_window(shift, lo, hi)
            })?;
            let mut items: Vec<ItemRef<'_>> = Vec::with_capacity(m.refs.len());
            for &r in &m.refs {
                let Some(it) = m.item(r) else {
                    continue;
                };
                // Versions of a key arrive together, newest first.
                let new_key = items
                    .last()
                    .is_none_or(|p| p.hash != it.hash || p.ukey != it.ukey);
                if let (true, Some(g)) = (new_key, grouper.as_mut()) {
                    g.note(it.hash, it.bloom);
                }
                items.push(ItemRef {
                    trailer: written_trailer(it.trailer, snap),
                    ..it
                });
            }
            table.write_segment(items)?;
            drop(m);
            ctx.flush_point()?;
        }
        table.finish()
    })?;
    w.column_filters = Some(match grouper {
        Some(g) => g.finish()?,
        None => w.filters.clone(),
    });
    Ok(Some(w))
}

/// Rebuilds the BloomCluster of last-level container `cid` to cover its whole pile.
pub fn cluster_container(
    ctx: &JobCtx<'_>,
    shared: &Arc<Shared>,
    cid: u64,
    pile: &[Arc<TableFile>],
    cluster: Option<&ClusterRef>,
) -> Result<KsEdit> {
    let mut e = KsEdit::default();
    let c = container_columns(ctx, shared, pile, cluster, 0)?;
    rebuild_cluster(ctx, shared, cid, c, cluster, pile, &[], &mut e)?;
    ctx.tables.env.sync_dir(&ctx.tables.dir)?;
    Ok(e)
}
