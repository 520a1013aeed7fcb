//! HTable reader: owns opening a table (footer, metadata block, optional filter block), point
//! lookups that read about one bucket, and the full scan in (hash, internal key) order that
//! compaction consumes (referring to the file's map when it is mapped, else to a copy).
//!
//! Memory: the reader keeps every migration record (12 bytes each; about one per overloaded
//! bucket, ~0.4 per bucket at the default fill), a 4-byte start index per bucket, and the
//! overflow index (32 bytes per overflowing hash) in memory. The paper keeps records only for
//! the most overloaded 20% of buckets; here all of them cost ~15% of the table's 16-bit Bloom
//! filters (28 KB per 100k 116-byte items), and buy exactly one bucket read per positive
//! lookup, so all are kept.

use crate::error::{Error, Result};
use crate::filter::bloom;
use crate::fs::CountedReader;
use crate::key::ValueKind;
use crate::stats::ReadKind;

use super::balance;
use super::format::{
    decode_bucket, decode_filters, decode_meta, decode_overflow_record, filter_may_contain,
    find_in_bucket, find_visible, Entry, FilterSet, Footer, Migration, OverflowEntry, FOOTER_SIZE,
};
use super::{bucket_of, placement_hash, rank_in_bucket, BUCKET_SIZE};

/// The start of each bucket's records in `migrations` (sorted by `(src, mark)`, every `src`
/// below `n_buckets`: `decode_meta` checks both), `n_buckets + 1` entries.
fn record_index(migrations: &[Migration], n_buckets: u32) -> Vec<u32> {
    let mut start = Vec::with_capacity(n_buckets as usize + 1);
    let mut i = 0usize;
    for b in 0..=n_buckets {
        while migrations.get(i).is_some_and(|m| m.src < b) {
            i += 1;
        }
        start.push(u32::try_from(i).unwrap_or(u32::MAX));
    }
    start
}

/// One item of a table, as returned by a scan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HItem {
    /// The placement hash of the user key.
    pub hash: u128,
    /// The internal key (user key + trailer).
    pub ikey: Vec<u8>,
    /// The value (empty for tombstones).
    pub value: Vec<u8>,
}

/// A version found by a lookup: `(seq, kind, value)`.
pub type Found = (u64, ValueKind, Vec<u8>);

/// One item of a [`TableScan`].
#[derive(Debug, Clone, Copy)]
struct ScanItem {
    hash: u128,
    /// Offset of the user key in its region (the value follows it); [`IN_OVERFLOW`] set:
    /// the overflow region, else the bucket region.
    at: u64,
    klen: u32,
    vlen: u32,
    /// The version's trailer `(seq << 8) | kind` and the user key's Bloom hash, read
    /// while the bytes are scanned in order: a merge in hash order visits the items at random
    /// places in the table's bytes, and with these it touches a key only to tell apart two
    /// items of equal hash, and an output table's filters need no key either.
    trailer: u64,
    bloom: u64,
}

/// The bit of [`ScanItem::at`] that says "in the overflow region".
const IN_OVERFLOW: u64 = 1 << 63;

/// The bytes a scan's items refer to: read from the file, or, when the file is mapped, the
/// map itself (offsets are then file offsets). A compaction of mapped inputs then holds their
/// pages in the page cache instead of a heap copy of each: a garbage collection of a
/// last-level container held ≈ 1.6× its bytes of heap, of which a copy of the whole pile.
enum ScanBytes {
    Read(Vec<u8>),
    Mapped(std::sync::Arc<memmap2::Mmap>),
}

impl ScanBytes {
    fn as_slice(&self) -> &[u8] {
        match self {
            ScanBytes::Read(v) => v,
            ScanBytes::Mapped(m) => m,
        }
    }
}

/// All items of a table in (hash, internal key) order, referring to the table's bytes (user
/// keys and values; each item's trailer is kept beside them).
pub struct TableScan {
    buckets: ScanBytes,
    overflow: ScanBytes,
    items: Vec<ScanItem>,
}

impl TableScan {
    /// The region holding `it` and the offset of its internal key there.
    fn region(&self, it: &ScanItem) -> (&[u8], usize) {
        let off = usize::try_from(it.at & !IN_OVERFLOW).unwrap_or(usize::MAX);
        if it.at & IN_OVERFLOW == 0 {
            (self.buckets.as_slice(), off)
        } else {
            (self.overflow.as_slice(), off)
        }
    }
    /// Bytes of the file the scan copied to the heap (0 when it refers to the file's map).
    pub fn copied_bytes(&self) -> usize {
        let own = |b: &ScanBytes| match b {
            ScanBytes::Read(v) => v.len(),
            ScanBytes::Mapped(_) => 0,
        };
        own(&self.buckets) + own(&self.overflow)
    }
    fn ukey(&self, it: &ScanItem) -> &[u8] {
        let (r, off) = self.region(it);
        r.get(off..off.saturating_add(it.klen as usize))
            .unwrap_or_default()
    }
    /// Number of items.
    pub fn len(&self) -> usize {
        self.items.len()
    }
    /// Whether the table has no item.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
    /// Item `i`: `(hash, user key, trailer, value)`, the trailer being `(seq << 8) | kind`.
    pub fn get(&self, i: usize) -> Option<(u128, &[u8], u64, &[u8])> {
        let it = self.items.get(i)?;
        let (r, off) = self.region(it);
        let k = off.checked_add(it.klen as usize)?;
        let v = k.checked_add(it.vlen as usize)?;
        Some((it.hash, r.get(off..k)?, it.trailer, r.get(k..v)?))
    }
    /// The Bloom hash (`bloom::bloom_hash`) of item `i`'s user key.
    pub fn bloom(&self, i: usize) -> Option<u64> {
        self.items.get(i).map(|it| it.bloom)
    }
    /// The hash of item `i`.
    pub fn hash(&self, i: usize) -> Option<u128> {
        self.items.get(i).map(|it| it.hash)
    }
    /// The trailer `(seq << 8) | kind` of item `i`.
    pub fn trailer(&self, i: usize) -> Option<u64> {
        self.items.get(i).map(|it| it.trailer)
    }
    /// Item `i`'s user key.
    pub fn ukey_at(&self, i: usize) -> Option<&[u8]> {
        self.items.get(i).map(|it| self.ukey(it))
    }
}

/// Where an item with a given hash is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Location {
    Bucket(u32),
    Overflow,
}

/// An open HTable.
pub struct HTableReader {
    file: CountedReader,
    footer: Footer,
    migrations: Vec<Migration>,
    /// Bucket `b`'s records are `migrations[record_start[b]..record_start[b + 1]]`: a lookup
    /// finds its home's records with one index read instead of two binary searches over all
    /// records (≈ 9 % of a `trie` point lookup's time before).
    record_start: Vec<u32>,
    overflow: Vec<OverflowEntry>,
    filters: Option<FilterSet>,
}

impl std::fmt::Debug for HTableReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HTableReader")
            .field("path", &self.file.path())
            .field("n_buckets", &self.footer.n_buckets)
            .field("items", &self.footer.item_count)
            .finish()
    }
}

thread_local! {
    /// A bucket-sized buffer per thread for point lookups, so a lookup allocates nothing but
    /// its answer (alternating runs showed no throughput change above the noise).
    static BUCKET_BUFFER: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(vec![0; BUCKET_SIZE]);
}

/// Runs `f` on this thread's bucket buffer (on a fresh one if it is in use).
fn with_bucket_buffer<T>(f: impl FnOnce(&mut [u8]) -> Result<T>) -> Result<T> {
    BUCKET_BUFFER.with(|b| match b.try_borrow_mut() {
        Ok(mut buf) => f(&mut buf),
        Err(_) => f(&mut vec![0; BUCKET_SIZE]),
    })
}

impl HTableReader {
    /// Opens a table: reads and checks the footer and the metadata block (Metadata reads), and
    /// the filter block too when `load_filters` (tables whose filters are served by a
    /// BloomCluster skip it).
    pub fn open(file: CountedReader, load_filters: bool) -> Result<Self> {
        Self::open_kind(file, load_filters, ReadKind::Metadata)
    }

    /// [`HTableReader::open`] with the reads of the open counted as `kind` (a compaction that
    /// opens a table counts its reads as [`ReadKind::Compaction`], apart from lookup costs).
    pub fn open_kind(file: CountedReader, load_filters: bool, kind: ReadKind) -> Result<Self> {
        let len = file.len();
        if len < FOOTER_SIZE as u64 {
            return Err(Error::corruption(
                file.path(),
                0,
                format!("file of {len} bytes is too short for an HTable"),
            ));
        }
        let fb = file.read(len - FOOTER_SIZE as u64, FOOTER_SIZE, kind)?;
        let footer = Footer::decode(file.path(), len, &fb)?;
        let meta_len = usize::try_from(footer.meta_len).map_err(|_| {
            Error::corruption(file.path(), footer.meta_offset, "metadata too large")
        })?;
        let meta = file.read(footer.meta_offset, meta_len, kind)?;
        let (migrations, overflow) = decode_meta(
            file.path(),
            footer.meta_offset,
            &meta,
            footer.n_buckets,
            footer.overflow_len,
        )?;
        let record_start = record_index(&migrations, footer.n_buckets);
        let mut r = HTableReader {
            file,
            footer,
            migrations,
            record_start,
            overflow,
            filters: None,
        };
        if load_filters {
            r.filters = Some(r.read_filters_kind(kind)?);
        }
        Ok(r)
    }

    /// Reads `len` bytes at `offset` as one counted block read. Every read of the table goes
    /// through here or [`HTableReader::read_block_into`], so a block cache can be inserted in
    /// one place.
    fn read_block(&self, offset: u64, len: usize, kind: ReadKind) -> Result<Vec<u8>> {
        self.file.read(offset, len, kind)
    }

    /// [`HTableReader::read_block`] into a caller's buffer (`buf.len()` bytes).
    fn read_block_into(&self, offset: u64, buf: &mut [u8], kind: ReadKind) -> Result<()> {
        self.file.read_into(offset, buf, kind)
    }

    /// Reads the filter block (one Metadata read), whether or not filters are held in memory.
    pub fn read_filters(&self) -> Result<FilterSet> {
        self.read_filters_kind(ReadKind::Metadata)
    }

    /// [`HTableReader::read_filters`] counted as a read of `kind`.
    pub fn read_filters_kind(&self, kind: ReadKind) -> Result<FilterSet> {
        let f = &self.footer;
        let len = usize::try_from(f.filter_len).map_err(|_| {
            Error::corruption(self.file.path(), f.filter_offset, "filters too large")
        })?;
        let block = self.read_block(f.filter_offset, len, kind)?;
        decode_filters(self.file.path(), f.filter_offset, &block, f.n_buckets)
    }

    /// Number of buckets (tables of one BloomCluster share it).
    pub fn n_buckets(&self) -> u32 {
        self.footer.n_buckets
    }
    /// The hash bits above this table's bucket window (see [`bucket_of`]).
    pub fn bucket_shift(&self) -> u32 {
        self.footer.bucket_shift
    }
    /// Number of items (versions) in the table.
    pub fn item_count(&self) -> u64 {
        self.footer.item_count
    }
    /// The placement-hash key the table was built with.
    pub fn hash_key(&self) -> [u8; 16] {
        self.footer.hash_key
    }
    /// Bloom bits per key the filters were built with.
    pub fn bits_per_key(&self) -> u32 {
        self.footer.bits_per_key
    }
    /// Bytes of the table file.
    pub fn file_size(&self) -> u64 {
        self.file.len()
    }
    /// The table's file.
    pub fn path(&self) -> &std::path::Path {
        self.file.path()
    }
    /// Home bucket (and BloomCluster column) of `hash`.
    pub fn bucket_of(&self, hash: u128) -> u32 {
        bucket_of(hash, self.footer.n_buckets, self.footer.bucket_shift)
    }
    /// The in-memory filter of bucket `i`, if filters were loaded at open (empty = no key).
    pub fn bucket_filter(&self, i: u32) -> Option<&[u8]> {
        self.filters.as_ref()?.get(i as usize)
    }
    /// The in-memory filters, if loaded.
    pub fn filters(&self) -> Option<&FilterSet> {
        self.filters.as_ref()
    }
    /// Number of migration records held in memory.
    pub fn migration_records(&self) -> usize {
        self.migrations.len()
    }
    /// Number of hashes stored in the overflow region.
    pub fn overflow_keys(&self) -> usize {
        self.overflow.len()
    }
    /// The database's counters the file counts its reads in.
    pub(crate) fn io_stats(&self) -> &std::sync::Arc<crate::stats::IoStats> {
        self.file.io_stats()
    }
    /// Bytes of metadata pinned in memory: migration records, overflow index and filters.
    pub fn memory_bytes(&self) -> usize {
        self.migrations.len() * std::mem::size_of::<Migration>()
            + self.record_start.len() * std::mem::size_of::<u32>()
            + self.overflow.len() * std::mem::size_of::<OverflowEntry>()
            + self.filters.as_ref().map_or(0, FilterSet::memory_bytes)
    }

    /// Whether the in-memory filter of `hash`'s bucket may contain `user_key` (`true` when
    /// filters were not loaded).
    pub fn may_contain(&self, hash: u128, user_key: &[u8]) -> bool {
        self.may_contain_hashed(hash, bloom::bloom_hash(user_key))
    }

    /// [`HTableReader::may_contain`] with the key's Bloom hash
    /// (`crate::filter::bloom::bloom_hash(user_key)`) computed once by the caller.
    pub fn may_contain_hashed(&self, hash: u128, bloom_hash: u64) -> bool {
        match &self.filters {
            Some(fs) => fs
                .get(self.bucket_of(hash) as usize)
                .is_some_and(|f| filter_may_contain(f, bloom_hash)),
            None => true,
        }
    }

    /// The migration records of home buckets `lo..=hi` (through the per-bucket index).
    fn records_of(&self, lo: u32, hi: u32) -> &[Migration] {
        let at = |b: u32| self.record_start.get(b as usize).copied().unwrap_or(0) as usize;
        self.migrations
            .get(at(lo)..at(hi.saturating_add(1)))
            .unwrap_or_default()
    }

    fn locate(&self, hash: u128) -> Location {
        let home = self.bucket_of(hash);
        let records = self.records_of(home, home);
        let d = balance::locate(records, home, rank_in_bucket(hash, home));
        if d >= self.footer.n_buckets {
            Location::Overflow
        } else {
            Location::Bucket(d)
        }
    }

    /// The newest version of `user_key` with `seq <= snapshot_seq`: `(seq, kind, value)`
    /// (tombstones included). `hash` must be the key's placement hash. Checks the bucket's
    /// filter when filters are loaded, then reads one bucket or one overflow record (one Data
    /// read).
    pub fn get(
        &self,
        hash: u128,
        user_key: &[u8],
        snapshot_seq: u64,
    ) -> Result<Option<(u64, ValueKind, Vec<u8>)>> {
        self.get_prehashed(hash, bloom::bloom_hash(user_key), user_key, snapshot_seq)
    }

    /// [`HTableReader::get`] with the key's Bloom hash computed once by the caller (a lookup
    /// probes many tables).
    pub fn get_prehashed(
        &self,
        hash: u128,
        bloom_hash: u64,
        user_key: &[u8],
        snapshot_seq: u64,
    ) -> Result<Option<(u64, ValueKind, Vec<u8>)>> {
        if !self.may_contain_hashed(hash, bloom_hash) {
            return Ok(None);
        }
        self.get_unfiltered(hash, user_key, snapshot_seq)
    }

    /// [`HTableReader::get`] without consulting the table's own filters (the caller already
    /// asked a BloomCluster): reads one bucket or one overflow record.
    pub fn get_unfiltered(
        &self,
        hash: u128,
        user_key: &[u8],
        snapshot_seq: u64,
    ) -> Result<Option<(u64, ValueKind, Vec<u8>)>> {
        Ok(self.probe(hash, user_key, snapshot_seq)?.0)
    }

    /// [`HTableReader::get_unfiltered`] that also says how many Data blocks it read (1, or 0
    /// when the overflow index shows the hash is not in the table), for per-level statistics.
    pub fn probe(
        &self,
        hash: u128,
        user_key: &[u8],
        snapshot_seq: u64,
    ) -> Result<(Option<Found>, u32)> {
        match self.locate(hash) {
            Location::Bucket(b) => {
                let offset = u64::from(b) * BUCKET_SIZE as u64;
                if let Some(block) = self.file.mapped(offset, BUCKET_SIZE, ReadKind::Data)? {
                    let found = find_in_bucket(
                        self.file.path(),
                        offset,
                        block,
                        self.footer.base_seq,
                        user_key,
                        snapshot_seq,
                    )?;
                    return Ok((found, 1));
                }
                let found = with_bucket_buffer(|buf| {
                    self.read_block_into(offset, buf, ReadKind::Data)?;
                    find_in_bucket(
                        self.file.path(),
                        offset,
                        buf,
                        self.footer.base_seq,
                        user_key,
                        snapshot_seq,
                    )
                })?;
                Ok((found, 1))
            }
            Location::Overflow => {
                let Ok(i) = self.overflow.binary_search_by(|o| o.hash.cmp(&hash)) else {
                    return Ok((None, 0));
                };
                let Some(&o) = self.overflow.get(i) else {
                    return Ok((None, 0));
                };
                let offset = self.footer.overflow_offset + o.offset;
                let len = usize::try_from(o.len).map_err(|_| {
                    Error::corruption(self.file.path(), offset, "overflow record too large")
                })?;
                let rec = self.read_block(offset, len, ReadKind::Data)?;
                let entries =
                    decode_overflow_record(self.file.path(), offset, &rec, self.footer.base_seq)?;
                Ok((find_visible(&entries, user_key, snapshot_seq), 1))
            }
        }
    }

    /// The entries `(internal key, value)` stored in bucket `b` (home items and items migrated
    /// into it), read as one block of `kind`; used to sample a container for garbage.
    pub fn bucket_entries(&self, b: u32, kind: ReadKind) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        if b >= self.footer.n_buckets {
            return Err(Error::InvalidArgument(format!(
                "bucket {b} of a table of {} buckets",
                self.footer.n_buckets
            )));
        }
        let offset = u64::from(b) * BUCKET_SIZE as u64;
        let block = self.read_block(offset, BUCKET_SIZE, kind)?;
        Ok(
            decode_bucket(self.file.path(), offset, &block, self.footer.base_seq)?
                .iter()
                .map(|e| (e.ikey(), e.value.to_vec()))
                .collect(),
        )
    }

    /// Every item of the table in (hash, internal key) order, for compaction and GC (see
    /// [`HTableReader::scan`]), each copied into its own [`HItem`].
    pub fn items(&self) -> Result<Vec<HItem>> {
        let scan = self.scan()?;
        Ok((0..scan.len())
            .filter_map(|i| scan.get(i))
            .map(|(hash, ukey, trailer, value)| HItem {
                hash,
                ikey: Entry {
                    ukey,
                    trailer,
                    value,
                }
                .ikey(),
                value: value.to_vec(),
            })
            .collect())
    }

    /// Every item of the table in (hash, internal key) order, for compaction and GC. Reads the
    /// bucket region and the overflow region in one Compaction read each, checks that each item
    /// sits where a lookup would look for it (and passes its bucket's filter, if loaded), and
    /// that the item count matches the footer. Holds the whole table in memory; items refer to
    /// the read bytes (no allocation per item).
    pub fn scan(&self) -> Result<TableScan> {
        let n = self.footer.n_buckets;
        let scan = self.scan_part(0, n.saturating_sub(1), &|_| true)?;
        if scan.items.len() as u64 != self.footer.item_count {
            return Err(Error::corruption(
                self.file.path(),
                self.footer.overflow_offset,
                format!(
                    "table holds {} items, footer says {}",
                    scan.items.len(),
                    self.footer.item_count
                ),
            ));
        }
        Ok(scan)
    }

    /// The items of the table that a trie node at `depth` routes to `child` (see
    /// [`super::trie_child`]), in (hash, internal key) order, checked as [`HTableReader::scan`]
    /// checks them but for the item count (the caller adds up the children's counts and
    /// compares the sum with [`HTableReader::item_count`]).
    ///
    /// When the table's bucket shift is `3 × depth` (a table of a depth-`depth` container) the
    /// child's homes are one contiguous eighth of the buckets: this reads that range in one
    /// Compaction read, each bucket outside it that a migration record of the range points to
    /// (none when the table was balanced in eight segments, but at the range's edges), and the
    /// overflow records of the child. Otherwise it reads the whole table and filters.
    pub fn scan_child(&self, depth: u32, child: u8) -> Result<TableScan> {
        let n = self.footer.n_buckets;
        let of_child = move |h: u128| super::trie_child(h, depth) == Some(child);
        let below = 125u32.checked_sub(depth.saturating_mul(3));
        let (lo, hi) = match below {
            Some(b) if self.footer.bucket_shift == depth.saturating_mul(3) => {
                let first = u128::from(child & 7) << b;
                let last = first | ((1u128 << b) - 1);
                (self.bucket_of(first), self.bucket_of(last))
            }
            _ => (0, n.saturating_sub(1)),
        };
        self.scan_part(lo, hi, &of_child)
    }

    /// The items whose bucket windows ([`super::bucket_window`] with bucket shift `shift`) lie
    /// in `lo..=hi`, in (hash, internal key) order, checked as [`HTableReader::scan_child`]
    /// checks them. When the table's bucket shift is `shift` they are the homes of one
    /// contiguous range of its buckets, read as `scan_child` reads a child's; otherwise the
    /// whole table is read and filtered. A garbage collection reads its pile this way, one
    /// balancing segment of the table it writes at a time.
    pub fn scan_window(&self, shift: u32, lo: u64, hi: u64) -> Result<TableScan> {
        let keep = move |h: u128| (lo..=hi).contains(&super::bucket_window(h, shift));
        if lo > hi {
            return self.scan_part(0, 0, &|_| false);
        }
        let n = self.footer.n_buckets;
        let (first, last) = if self.footer.bucket_shift == shift.min(127) {
            (
                super::bucket_of_window(lo, n),
                super::bucket_of_window(hi, n),
            )
        } else {
            (0, n.saturating_sub(1))
        };
        self.scan_part(first, last, &keep)
    }

    /// The items `keep(hash)` of home buckets `lo..=hi` (stored there, in buckets their
    /// migration records point to, or in the overflow region), sorted.
    fn scan_part(&self, lo: u32, hi: u32, keep: &dyn Fn(u128) -> bool) -> Result<TableScan> {
        let path = self.file.path();
        let n = self.footer.n_buckets;
        let hi = hi.min(n.saturating_sub(1));
        let lo = lo.min(hi);
        let range_len = usize::try_from(u64::from(hi - lo + 1) * BUCKET_SIZE as u64)
            .map_err(|_| Error::corruption(path, 0, "bucket region too large"))?;
        let map = self.file.map().cloned();
        let lo_off = u64::from(lo) * BUCKET_SIZE as u64;
        // Read: the range's buckets back to back, then the extra ones; mapped: the whole file,
        // each read only counted (and checked to lie inside the file).
        let mut buckets = match &map {
            Some(_) => {
                self.file.mapped(lo_off, range_len, ReadKind::Compaction)?;
                Vec::new()
            }
            None => self.read_block(lo_off, range_len, ReadKind::Compaction)?,
        };
        // Buckets outside the range that hold items migrated from inside it.
        let mut extra: Vec<u32> = self
            .records_of(lo, hi)
            .iter()
            .filter(|m| m.dest < n && !(lo..=hi).contains(&m.dest))
            .map(|m| m.dest)
            .collect();
        extra.sort_unstable();
        extra.dedup();
        let mut ids: Vec<u32> = (lo..=hi).collect();
        for &b in &extra {
            let off = u64::from(b) * BUCKET_SIZE as u64;
            if map.is_some() {
                self.file.mapped(off, BUCKET_SIZE, ReadKind::Compaction)?;
            } else {
                let at = buckets.len();
                buckets.resize(at + BUCKET_SIZE, 0);
                if let Some(dst) = buckets.get_mut(at..) {
                    self.read_block_into(off, dst, ReadKind::Compaction)?;
                }
            }
            ids.push(b);
        }
        let buckets = match &map {
            Some(m) => ScanBytes::Mapped(m.clone()),
            None => ScanBytes::Read(buckets),
        };
        // The overflow records of kept hashes (sorted by hash: one contiguous run for a child).
        let wanted: Vec<&OverflowEntry> = self.overflow.iter().filter(|o| keep(o.hash)).collect();
        let span = match (wanted.first(), wanted.last()) {
            (Some(a), Some(z)) => Some((a.offset, z.offset.saturating_add(z.len))),
            _ => None,
        };
        let (overflow, overflow_base) = match span {
            Some((start, end)) => {
                let len = usize::try_from(end.saturating_sub(start)).map_err(|_| {
                    Error::corruption(
                        path,
                        self.footer.overflow_offset,
                        "overflow region too large",
                    )
                })?;
                let at = self.footer.overflow_offset.saturating_add(start);
                match &map {
                    Some(m) => {
                        self.file.mapped(at, len, ReadKind::Compaction)?;
                        // Records are found at their file offset in the map.
                        let base = start.wrapping_sub(at);
                        (ScanBytes::Mapped(m.clone()), base)
                    }
                    None => (
                        ScanBytes::Read(self.read_block(at, len, ReadKind::Compaction)?),
                        start,
                    ),
                }
            }
            None => (ScanBytes::Read(Vec::new()), 0),
        };
        // About the share of the footer's items that the range holds.
        let share =
            u64::from(hi - lo + 1).saturating_mul(self.footer.item_count) / u64::from(n.max(1));
        let mut items: Vec<ScanItem> =
            Vec::with_capacity(usize::try_from(share).unwrap_or(0).min(1 << 26));
        let hash_key = self.footer.hash_key;
        let mut push = |e: &Entry<'_>,
                        at: Location,
                        base: &[u8],
                        in_overflow: bool,
                        offset: u64,
                        hash: u128|
         -> Result<()> {
            let bloom = bloom::bloom_hash(e.ukey);
            if self.locate(hash) != at || !self.may_contain_hashed(hash, bloom) {
                return Err(Error::corruption(
                    path,
                    offset,
                    "item stored where lookups would not find it",
                ));
            }
            let off = (e.ukey.as_ptr() as usize).wrapping_sub(base.as_ptr() as usize) as u64;
            items.push(ScanItem {
                hash,
                at: if in_overflow { off | IN_OVERFLOW } else { off },
                klen: e.ukey.len() as u32,
                vlen: e.value.len() as u32,
                trailer: e.trailer,
                bloom,
            });
            Ok(())
        };
        let region = buckets.as_slice();
        for (k, &id) in ids.iter().enumerate() {
            let off = u64::from(id) * BUCKET_SIZE as u64;
            let at = match &buckets {
                ScanBytes::Mapped(_) => usize::try_from(off).unwrap_or(usize::MAX),
                ScanBytes::Read(_) => k * BUCKET_SIZE,
            };
            let block = region
                .get(at..at.saturating_add(BUCKET_SIZE))
                .ok_or_else(|| Error::corruption(path, off, "bucket past the end of the file"))?;
            // Versions of one key are adjacent (internal key order): hash each key once.
            let mut prev: Option<(&[u8], u128)> = None;
            for e in decode_bucket(path, off, block, self.footer.base_seq)? {
                let uk = e.ukey;
                let h = match prev {
                    Some((k, h)) if k == uk => h,
                    _ => placement_hash(&hash_key, uk),
                };
                prev = Some((uk, h));
                if keep(h) {
                    push(&e, Location::Bucket(id), region, false, off, h)?;
                }
            }
        }
        for o in wanted {
            let offset = self.footer.overflow_offset + o.offset;
            let rec = usize::try_from(o.offset.wrapping_sub(overflow_base))
                .ok()
                .zip(usize::try_from(o.len).ok())
                .and_then(|(s, l)| overflow.as_slice().get(s..s.checked_add(l)?))
                .ok_or_else(|| Error::corruption(path, offset, "overflow record out of range"))?;
            for e in decode_overflow_record(path, offset, rec, self.footer.base_seq)? {
                if placement_hash(&hash_key, e.ukey) != o.hash {
                    return Err(Error::corruption(
                        path,
                        offset,
                        "overflow item under a wrong hash",
                    ));
                }
                push(
                    &e,
                    Location::Overflow,
                    overflow.as_slice(),
                    true,
                    offset,
                    o.hash,
                )?;
            }
        }
        let mut scan = TableScan {
            buckets,
            overflow,
            items,
        };
        let mut items = std::mem::take(&mut scan.items);
        // Internal keys are unique in a table: (hash, internal key) is a total order. The
        // buckets hold their items in about this order already (hash-ordered bucket map), which
        // the run-adaptive stable sort turns into a near-linear merge.
        items.sort_by(|a, b| {
            a.hash.cmp(&b.hash).then_with(|| {
                crate::key::cmp_split((scan.ukey(a), a.trailer), (scan.ukey(b), b.trailer))
            })
        });
        scan.items = items;
        Ok(scan)
    }

    /// Calls `f(hash, ikey, value)` for every item in (hash, internal key) order (see
    /// [`HTableReader::items`]); stops at the first error `f` returns.
    pub fn for_each(&self, mut f: impl FnMut(u128, &[u8], &[u8]) -> Result<()>) -> Result<()> {
        for it in self.items()? {
            f(it.hash, &it.ikey, &it.value)?;
        }
        Ok(())
    }
}
