//! BloomCluster (LSM-trie §2.4.3): owns the file that packs, for a last-level container whose
//! sub-levels are HTables with the same bucket count, the Bloom filters of one bucket column
//! across all sub-levels into one 4 KiB block. A lookup reads the one block holding its column
//! (one Metadata read) to learn which sub-levels may hold the key, then about one data bucket.
//!
//! Format version 2 packs *several* consecutive columns into a block when they fit (a small
//! directory of each block's first column is kept in memory), so a cluster file is about as large
//! as the filters it holds rather than one 4 KiB block per bucket: rewriting it when a sub-level
//! is added costs a few percent of the sub-level's bytes, not as much as the sub-level itself.
//!
//! When a column's filters do not fit one block, building fails with a clear
//! `InvalidArgument` error ([`BloomClusterBuilder::overflowing_column`] tells in advance); the
//! container then keeps per-table filters (open its tables with `load_filters = true`, or read
//! each table's filter block) until a garbage collection shrinks the pile. The cluster is
//! rebuilt, and written as metadata, whenever the pile of sub-levels changes.

use std::path::Path;

use crate::coding::{get_u32, get_u64, put_u32, put_u64, put_varint, Reader};
use crate::error::{Error, Result};
use crate::filter::bloom;
use crate::fs::{CountedReader, CountedWriter};
use crate::stats::ReadKind;

use super::format::{filter_may_contain, region_crc, varint_len, FilterSet};

/// Size of one cluster block.
pub const CLUSTER_BLOCK_SIZE: usize = 4096;
/// Bytes of a cluster block taken by its header (masked CRC32C u32, first column u32, column
/// count u16, sub-level count u16).
pub const CLUSTER_HEADER: usize = 12;
/// Format version of cluster files (3: a key's column is `bucket_of(hash, n_columns, 3 ×
/// depth)`, the hash-ordered bucket map of HTable version 2; the bytes are laid out as in 2).
pub const CLUSTER_FORMAT_VERSION: u32 = 3;
const CLUSTER_MAGIC: [u8; 8] = *b"SCREE-BC";
/// File name extension of BloomCluster files.
pub const CLUSTER_EXT: &str = "bc";

/// The BloomCluster in the format registry ([`crate::table_format`]). It has no manifest
/// format code: the `trie` layout names its clusters in its own layout records.
pub const BLOOM_CLUSTER: crate::table_format::TableFormat = crate::table_format::TableFormat {
    name: "BloomCluster",
    code: None,
    ext: CLUSTER_EXT,
    verify: super::verify::verify_cluster,
    for_each: None,
    describe: super::verify::describe_cluster,
    fuzz_target: None,
};
/// Fixed end of the trailer: n_columns u64, S u32, B u32, version u32, block size u32,
/// checksum u32, magic 8.
const TAIL_SIZE: usize = 36;

/// Collects the filter sets of a container's sub-levels and writes a cluster file.
#[derive(Debug, Clone)]
pub struct BloomClusterBuilder {
    n_columns: u32,
    table_ids: Vec<u64>,
    sublevels: Vec<FilterSet>,
}

impl BloomClusterBuilder {
    /// A cluster for tables of `n_columns` buckets.
    pub fn new(n_columns: u32) -> Self {
        BloomClusterBuilder {
            n_columns,
            table_ids: Vec::new(),
            sublevels: Vec::new(),
        }
    }

    /// Starts from an existing cluster (reads every block in one Metadata read), e.g. to add
    /// the sub-level a compaction just produced.
    pub fn from_reader(r: &BloomClusterReader) -> Result<Self> {
        Self::from_reader_kind(r, ReadKind::Metadata)
    }

    /// [`BloomClusterBuilder::from_reader`] with the read counted as `kind`.
    pub fn from_reader_kind(r: &BloomClusterReader, kind: ReadKind) -> Result<Self> {
        let n = r.n_columns as usize;
        let len = r
            .dir
            .len()
            .checked_mul(CLUSTER_BLOCK_SIZE)
            .ok_or_else(|| Error::corruption(r.file.path(), 0, "cluster too large"))?;
        let all = r.file.read(0, len, kind)?;
        let s = r.table_ids.len();
        // Grown as columns decode (a crafted trailer's column count reserves nothing).
        let mut per_level: Vec<Vec<Vec<u8>>> = vec![Vec::new(); s];
        for (i, block) in all.chunks(CLUSTER_BLOCK_SIZE).enumerate() {
            for col in decode_block(r.file.path(), i, block, r.block_range(i), s, None, true)? {
                for (lvl, f) in per_level.iter_mut().zip(col.filters) {
                    lvl.push(f);
                }
            }
        }
        if per_level.iter().any(|l| l.len() != n) {
            return Err(Error::corruption(
                r.file.path(),
                0,
                "bloom cluster: blocks do not cover every column",
            ));
        }
        Ok(BloomClusterBuilder {
            n_columns: r.n_columns,
            table_ids: r.table_ids.clone(),
            sublevels: per_level.into_iter().map(FilterSet::from_filters).collect(),
        })
    }

    /// Appends a sub-level: the table's id and its per-bucket filters (one per column).
    pub fn add_sublevel(&mut self, table_id: u64, filters: FilterSet) -> Result<()> {
        if filters.len() != self.n_columns as usize {
            return Err(Error::InvalidArgument(format!(
                "table {table_id} has {} buckets, the BloomCluster {}",
                filters.len(),
                self.n_columns
            )));
        }
        if self.sublevels.len() >= usize::from(u16::MAX) {
            return Err(Error::InvalidArgument(
                "too many sub-levels for a BloomCluster".into(),
            ));
        }
        self.table_ids.push(table_id);
        self.sublevels.push(filters);
        Ok(())
    }

    /// Keeps only the sub-levels whose table id satisfies `keep` (order preserved).
    pub fn retain(&mut self, mut keep: impl FnMut(u64) -> bool) {
        let mut ids = Vec::new();
        let mut sets = Vec::new();
        for (id, set) in self.table_ids.drain(..).zip(self.sublevels.drain(..)) {
            if keep(id) {
                ids.push(id);
                sets.push(set);
            }
        }
        self.table_ids = ids;
        self.sublevels = sets;
    }

    /// Table ids of the sub-levels, in the order they were added (sub-level index order).
    pub fn table_ids(&self) -> &[u64] {
        &self.table_ids
    }

    /// Number of sub-levels.
    pub fn n_sublevels(&self) -> usize {
        self.sublevels.len()
    }

    /// Whether sub-level `i`'s filter of column `c` may hold the key of Bloom hash `h`.
    pub fn may_contain(&self, i: usize, c: u32, h: u64) -> bool {
        self.sublevels
            .get(i)
            .is_some_and(|s| s.may_contain(c as usize, h))
    }

    /// Number of columns.
    pub fn n_columns(&self) -> u32 {
        self.n_columns
    }

    /// Bytes column `c`'s filters take in a block (length-prefixed, every sub-level).
    pub fn column_bytes(&self, c: u32) -> usize {
        self.sublevels
            .iter()
            .map(|s| {
                let f = s.get(c as usize).unwrap_or_default();
                varint_len(f.len() as u64) + f.len()
            })
            .sum::<usize>()
    }

    /// The first column whose filters do not fit one block on their own, with the bytes it
    /// needs (including the block header); `None` when the cluster can be built.
    pub fn overflowing_column(&self) -> Option<(u32, usize)> {
        (0..self.n_columns).find_map(|c| {
            let need = self.column_bytes(c) + CLUSTER_HEADER;
            (need > CLUSTER_BLOCK_SIZE).then_some((c, need))
        })
    }

    /// Encodes the cluster file. Fails with `InvalidArgument` naming the column when the
    /// filters of one column do not fit a block (keep per-table filters then).
    pub fn finish_to_vec(&self) -> Result<Vec<u8>> {
        if let Some((c, need)) = self.overflowing_column() {
            return Err(Error::InvalidArgument(format!(
                "BloomCluster column {c} needs {need} bytes for {} sub-levels but a cluster \
                 block holds {CLUSTER_BLOCK_SIZE}; keep per-table filters for this container",
                self.sublevels.len()
            )));
        }
        let n = self.n_columns;
        let s = self.sublevels.len();
        let mut out = Vec::new();
        let mut dir: Vec<u32> = Vec::new();
        let mut c = 0u32;
        while c < n {
            let offset = out.len() as u64;
            let first = c;
            let mut body = Vec::with_capacity(CLUSTER_BLOCK_SIZE);
            let mut count = 0u16;
            while c < n && count < u16::MAX {
                let need = self.column_bytes(c);
                if CLUSTER_HEADER + body.len() + need > CLUSTER_BLOCK_SIZE {
                    break;
                }
                for set in &self.sublevels {
                    let f = set.get(c as usize).unwrap_or_default();
                    put_varint(&mut body, f.len() as u64);
                    body.extend_from_slice(f);
                }
                count += 1;
                c += 1;
            }
            let mut b = vec![0u8; 4];
            put_u32(&mut b, first);
            b.extend_from_slice(&count.to_le_bytes());
            b.extend_from_slice(&(s as u16).to_le_bytes());
            b.extend_from_slice(&body);
            b.resize(CLUSTER_BLOCK_SIZE, 0);
            let crc = region_crc(offset, b.get(4..).unwrap_or_default());
            if let Some(h) = b.get_mut(0..4) {
                h.copy_from_slice(&crc.to_le_bytes());
            }
            out.extend_from_slice(&b);
            dir.push(first);
        }
        let trailer_offset = out.len() as u64;
        let start = out.len();
        for id in &self.table_ids {
            put_u64(&mut out, *id);
        }
        for d in &dir {
            put_u32(&mut out, *d);
        }
        put_u64(&mut out, u64::from(self.n_columns));
        put_u32(&mut out, s as u32);
        put_u32(&mut out, dir.len() as u32);
        put_u32(&mut out, CLUSTER_FORMAT_VERSION);
        put_u32(&mut out, CLUSTER_BLOCK_SIZE as u32);
        let crc = region_crc(trailer_offset, out.get(start..).unwrap_or_default());
        put_u32(&mut out, crc);
        out.extend_from_slice(&CLUSTER_MAGIC);
        Ok(out)
    }

    /// Writes the cluster file to `w` (create it with `WriteCause::Metadata`); returns its size.
    pub fn finish(&self, w: &mut CountedWriter) -> Result<u64> {
        let b = self.finish_to_vec()?;
        w.append(&b)?;
        Ok(b.len() as u64)
    }
}

/// A checked cluster block with the offset of each of its columns, as kept in a cache.
#[derive(Debug, Clone)]
pub struct ClusterBlock {
    bytes: Vec<u8>,
    first: u32,
    offsets: Vec<u32>,
}

impl ClusterBlock {
    /// Bytes held in memory.
    pub fn memory_bytes(&self) -> usize {
        self.bytes.len() + self.offsets.len() * 4 + 48
    }
    /// Whether sub-level `i`'s filter of column `c` (which must be in this block) may hold the
    /// key of Bloom hash `h`, read in place.
    pub fn may_contain(&self, c: u32, i: usize, h: u64) -> bool {
        let Some(k) = c.checked_sub(self.first) else {
            return true;
        };
        let Some(&off) = self.offsets.get(k as usize) else {
            return true;
        };
        let mut r = Reader::new(self.bytes.get(off as usize..).unwrap_or_default());
        for _ in 0..i {
            if r.slice().is_none() {
                return true;
            }
        }
        r.slice().is_none_or(|f| filter_may_contain(f, h))
    }
}

/// The filters of one bucket column across the sub-levels of a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BloomColumn {
    filters: Vec<Vec<u8>>,
}

impl BloomColumn {
    /// Number of sub-levels.
    pub fn len(&self) -> usize {
        self.filters.len()
    }
    /// Whether the container has no sub-level.
    pub fn is_empty(&self) -> bool {
        self.filters.is_empty()
    }
    /// Whether sub-level `i` may hold the key whose Bloom hash is `h`
    /// (`crate::filter::bloom::bloom_hash(user_key)`).
    pub fn may_contain(&self, i: usize, h: u64) -> bool {
        self.filters
            .get(i)
            .is_some_and(|f| filter_may_contain(f, h))
    }
    /// The sub-levels (ascending index) that may hold `user_key`.
    pub fn candidates(&self, user_key: &[u8]) -> Vec<usize> {
        let h = bloom::bloom_hash(user_key);
        (0..self.filters.len())
            .filter(|&i| self.may_contain(i, h))
            .collect()
    }
    /// The filter of sub-level `i` (empty = no key in this column).
    pub fn filter(&self, i: usize) -> Option<&[u8]> {
        self.filters.get(i).map(Vec::as_slice)
    }
}

/// Decodes block `i` (at offset `i × 4096`), which must hold columns `first .. first + count`
/// of `n_sublevels` filters each; with `only = Some(k)`, returns just the `k`-th column of the
/// block (the lookup path), skipping the others.
fn decode_block(
    file: &Path,
    i: usize,
    block: &[u8],
    (first, count): (u32, u32),
    n_sublevels: usize,
    only: Option<u32>,
    verify: bool,
) -> Result<Vec<BloomColumn>> {
    let offset = (i * CLUSTER_BLOCK_SIZE) as u64;
    let bad = |d: &str| Error::corruption(file, offset, format!("bloom cluster block {i}: {d}"));
    if block.len() != CLUSTER_BLOCK_SIZE {
        return Err(bad("short block"));
    }
    if verify && get_u32(block, 0) != Some(region_crc(offset, block.get(4..).unwrap_or_default())) {
        return Err(bad("checksum mismatch"));
    }
    let mut r = Reader::new(block.get(4..).unwrap_or_default());
    let f = r.u32().ok_or_else(|| bad("truncated"))?;
    let lo = r.u8().ok_or_else(|| bad("truncated"))?;
    let hi = r.u8().ok_or_else(|| bad("truncated"))?;
    let k = u32::from(u16::from_le_bytes([lo, hi]));
    let lo = r.u8().ok_or_else(|| bad("truncated"))?;
    let hi = r.u8().ok_or_else(|| bad("truncated"))?;
    if f != first || k != count {
        return Err(bad("columns differ from the directory"));
    }
    if usize::from(u16::from_le_bytes([lo, hi])) != n_sublevels {
        return Err(bad("sub-level count differs from the trailer"));
    }
    let mut cols = Vec::with_capacity(if only.is_some() { 1 } else { count as usize });
    for k in 0..count {
        if only.is_some_and(|o| o != k) {
            for _ in 0..n_sublevels {
                r.slice().ok_or_else(|| bad("truncated filter"))?;
            }
            continue;
        }
        let mut filters = Vec::with_capacity(n_sublevels);
        for _ in 0..n_sublevels {
            filters.push(r.slice().ok_or_else(|| bad("truncated filter"))?.to_vec());
        }
        cols.push(BloomColumn { filters });
        if only.is_some() {
            break;
        }
    }
    Ok(cols)
}

/// An open cluster file: the trailer (table ids, block directory) in memory, blocks read on
/// demand.
#[derive(Clone)]
pub struct BloomClusterReader {
    file: CountedReader,
    n_columns: u32,
    table_ids: Vec<u64>,
    /// First column of each block.
    dir: Vec<u32>,
    /// Counts the open file and its directory in `Stats::table_reader_bytes`.
    _pinned: std::sync::Arc<crate::stats::Pinned>,
}

impl std::fmt::Debug for BloomClusterReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BloomClusterReader")
            .field("path", &self.file.path())
            .field("n_columns", &self.n_columns)
            .field("blocks", &self.dir.len())
            .field("table_ids", &self.table_ids)
            .finish()
    }
}

impl BloomClusterReader {
    /// Opens a cluster file: reads and checks its trailer (two Metadata reads).
    pub fn open(file: CountedReader) -> Result<Self> {
        Self::open_kind(file, ReadKind::Metadata)
    }

    /// [`BloomClusterReader::open`] with the reads counted as `kind`.
    pub fn open_kind(file: CountedReader, kind: ReadKind) -> Result<Self> {
        let len = file.len();
        let bad =
            |off: u64, d: &str| Error::corruption(file.path(), off, format!("bloom cluster: {d}"));
        if len < TAIL_SIZE as u64 {
            return Err(bad(0, "file too short"));
        }
        let tail_off = len - TAIL_SIZE as u64;
        let tail = file.read(tail_off, TAIL_SIZE, kind)?;
        if tail.get(28..36) != Some(&CLUSTER_MAGIC[..]) {
            return Err(bad(tail_off, "bad magic (not a BloomCluster file)"));
        }
        let n_columns = get_u64(&tail, 0).ok_or_else(|| bad(tail_off, "short trailer"))?;
        let s = get_u32(&tail, 8).ok_or_else(|| bad(tail_off, "short trailer"))?;
        let blocks = get_u32(&tail, 12).ok_or_else(|| bad(tail_off, "short trailer"))?;
        let data_len = u64::from(blocks) * CLUSTER_BLOCK_SIZE as u64;
        let trailer_len = u64::from(s) * 8 + u64::from(blocks) * 4 + TAIL_SIZE as u64;
        if data_len.checked_add(trailer_len) != Some(len)
            || n_columns > u64::from(u32::MAX)
            || n_columns == 0
            || blocks == 0
            || u64::from(blocks) > n_columns
        {
            return Err(bad(tail_off, "sizes do not match the file length"));
        }
        let trailer_off = len - trailer_len;
        let trailer = file.read(trailer_off, trailer_len as usize, kind)?;
        let body_len = trailer_len as usize - 12;
        let body = trailer.get(..body_len).unwrap_or_default();
        if get_u32(&trailer, body_len) != Some(region_crc(trailer_off, body)) {
            return Err(bad(trailer_off, "trailer checksum mismatch"));
        }
        // Re-read the fields from the checksummed copy.
        let ids_len = s as usize * 8;
        let fixed = ids_len + blocks as usize * 4;
        let version = get_u32(&trailer, fixed + 16).ok_or_else(|| bad(trailer_off, "short"))?;
        if version != CLUSTER_FORMAT_VERSION {
            return Err(Error::Unsupported(format!(
                "BloomCluster format version {version} in {}",
                file.path().display()
            )));
        }
        if get_u32(&trailer, fixed + 20) != Some(CLUSTER_BLOCK_SIZE as u32)
            || get_u64(&trailer, fixed) != Some(n_columns)
            || get_u32(&trailer, fixed + 8) != Some(s)
            || get_u32(&trailer, fixed + 12) != Some(blocks)
        {
            return Err(bad(trailer_off, "inconsistent trailer"));
        }
        let table_ids = (0..s as usize)
            .map(|i| get_u64(&trailer, i * 8).ok_or_else(|| bad(trailer_off, "short ids")))
            .collect::<Result<Vec<_>>>()?;
        let dir = (0..blocks as usize)
            .map(|i| {
                get_u32(&trailer, ids_len + i * 4).ok_or_else(|| bad(trailer_off, "short dir"))
            })
            .collect::<Result<Vec<_>>>()?;
        // The directory starts at column 0 and strictly increases below n_columns, and no
        // block holds more columns than its 16-bit column count can say (so n_columns is
        // bounded by the file's length, not by the trailer's word).
        let max_cols = u64::from(u16::MAX);
        if dir.first() != Some(&0)
            || dir
                .windows(2)
                .any(|w| matches!(w, [a, b] if a >= b || u64::from(b - a) > max_cols))
            || dir
                .last()
                .is_none_or(|&l| u64::from(l) >= n_columns || n_columns - u64::from(l) > max_cols)
        {
            return Err(bad(trailer_off, "bad block directory"));
        }
        let pinned = std::sync::Arc::new(crate::stats::Pinned::new(
            file.io_stats().clone(),
            table_ids.capacity() * 8 + dir.capacity() * 4 + std::mem::size_of::<Self>(),
        ));
        Ok(BloomClusterReader {
            file,
            n_columns: n_columns as u32,
            table_ids,
            dir,
            _pinned: pinned,
        })
    }

    /// Number of columns (the bucket count of every table of the container).
    pub fn n_columns(&self) -> u32 {
        self.n_columns
    }
    /// Number of sub-levels.
    pub fn n_sublevels(&self) -> usize {
        self.table_ids.len()
    }
    /// Number of 4 KiB blocks.
    pub fn n_blocks(&self) -> usize {
        self.dir.len()
    }
    /// Table ids of the sub-levels, in sub-level index order.
    pub fn table_ids(&self) -> &[u64] {
        &self.table_ids
    }
    /// Bytes held in memory (ids and directory).
    pub fn memory_bytes(&self) -> usize {
        self.table_ids.len() * 8 + self.dir.len() * 4
    }

    /// First column and column count of block `i`.
    fn block_range(&self, i: usize) -> (u32, u32) {
        let first = self.dir.get(i).copied().unwrap_or(self.n_columns);
        let end = self.dir.get(i + 1).copied().unwrap_or(self.n_columns);
        (first, end.saturating_sub(first))
    }

    /// Reads column `c` (one Metadata read of the block holding it). The column of a key is
    /// its bucket: `bucket_of(hash, n_columns, bucket_shift_for_depth(container depth))`.
    pub fn column(&self, c: u32) -> Result<BloomColumn> {
        let i = self.block_of(c)?;
        let range = self.block_range(i);
        let offset = (i * CLUSTER_BLOCK_SIZE) as u64;
        let block = self.read_block(offset)?;
        let Some(k) = c.checked_sub(range.0).filter(|&k| k < range.1) else {
            return Err(Error::corruption(
                self.file.path(),
                offset,
                "column not in its block",
            ));
        };
        decode_block(
            self.file.path(),
            i,
            &block,
            range,
            self.table_ids.len(),
            Some(k),
            true,
        )?
        .into_iter()
        .next()
        .ok_or_else(|| Error::corruption(self.file.path(), offset, "column not in its block"))
    }

    /// The index of the block holding column `c`.
    pub fn block_of(&self, c: u32) -> Result<usize> {
        if c >= self.n_columns {
            return Err(Error::InvalidArgument(format!(
                "column {c} of a BloomCluster of {} columns",
                self.n_columns
            )));
        }
        Ok(self.dir.partition_point(|&f| f <= c).saturating_sub(1))
    }

    /// Reads block `i` (one Metadata read), checks it and indexes its columns, for callers
    /// that cache blocks.
    pub fn load_block(&self, i: usize) -> Result<ClusterBlock> {
        let offset = (i * CLUSTER_BLOCK_SIZE) as u64;
        let block = self.read_block(offset)?;
        let (first, count) = self.block_range(i);
        let s = self.table_ids.len();
        let bad = |d: &str| {
            Error::corruption(
                self.file.path(),
                offset,
                format!("bloom cluster block {i}: {d}"),
            )
        };
        // Full check (checksum, header, every filter), then the column offsets.
        decode_block(
            self.file.path(),
            i,
            &block,
            (first, count),
            s,
            Some(0),
            true,
        )?;
        let mut offsets = Vec::with_capacity(count as usize);
        let mut r = Reader::new(block.get(CLUSTER_HEADER..).unwrap_or_default());
        for _ in 0..count {
            offsets.push((CLUSTER_HEADER + r.pos()) as u32);
            for _ in 0..s {
                r.slice().ok_or_else(|| bad("truncated filter"))?;
            }
        }
        Ok(ClusterBlock {
            bytes: block,
            first,
            offsets,
        })
    }

    /// The one place cluster blocks are read (a cache can be inserted here).
    fn read_block(&self, offset: u64) -> Result<Vec<u8>> {
        self.file
            .read(offset, CLUSTER_BLOCK_SIZE, ReadKind::Metadata)
    }
}
