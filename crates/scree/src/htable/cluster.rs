//! BloomCluster (LSM-trie §2.4.3): owns the file that packs, for a last-level container whose
//! sub-levels are HTables with the same bucket count, the Bloom filters of one bucket column
//! across all sub-levels into one 4 KiB block. A lookup reads the one block of its column (one
//! Metadata read) to learn which sub-levels may hold the key, then about one data bucket.
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

/// Size of one cluster block (one column).
pub const CLUSTER_BLOCK_SIZE: usize = 4096;
/// Bytes of a cluster block taken by its header (masked CRC32C u32 + sub-level count u16).
pub const CLUSTER_HEADER: usize = 6;
/// Format version of cluster files.
pub const CLUSTER_FORMAT_VERSION: u32 = 1;
const CLUSTER_MAGIC: [u8; 8] = *b"SCREE-BC";
const TAIL_SIZE: usize = 32;

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

    /// Starts from an existing cluster (reads every column in one Metadata read), e.g. to add
    /// the sub-level a compaction just produced.
    pub fn from_reader(r: &BloomClusterReader) -> Result<Self> {
        let n = r.n_columns as usize;
        let len = n
            .checked_mul(CLUSTER_BLOCK_SIZE)
            .ok_or_else(|| Error::corruption(r.file.path(), 0, "cluster too large"))?;
        let all = r.file.read(0, len, ReadKind::Metadata)?;
        let s = r.table_ids.len();
        let mut per_level: Vec<Vec<Vec<u8>>> = vec![Vec::with_capacity(n); s];
        for (c, block) in all.chunks(CLUSTER_BLOCK_SIZE).enumerate() {
            let col = decode_column(r.file.path(), c as u32, block, s)?;
            for (lvl, f) in per_level.iter_mut().zip(col.filters) {
                lvl.push(f);
            }
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

    /// Bytes column `c` needs after the block's checksum (count + length-prefixed filters).
    pub fn column_bytes(&self, c: u32) -> usize {
        self.sublevels
            .iter()
            .map(|s| {
                let f = s.get(c as usize).unwrap_or_default();
                varint_len(f.len() as u64) + f.len()
            })
            .sum::<usize>()
            + 2
    }

    /// The first column whose filters do not fit one block, with the bytes it needs (including
    /// the header); `None` when the cluster can be built.
    pub fn overflowing_column(&self) -> Option<(u32, usize)> {
        (0..self.n_columns).find_map(|c| {
            let need = self.column_bytes(c) + 4;
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
        let n = self.n_columns as usize;
        let s = self.sublevels.len();
        let mut out = Vec::with_capacity(n * CLUSTER_BLOCK_SIZE + s * 8 + TAIL_SIZE);
        for c in 0..n {
            let offset = (c * CLUSTER_BLOCK_SIZE) as u64;
            let mut b = vec![0u8; 4];
            b.extend_from_slice(&(s as u16).to_le_bytes());
            for set in &self.sublevels {
                let f = set.get(c).unwrap_or_default();
                put_varint(&mut b, f.len() as u64);
                b.extend_from_slice(f);
            }
            b.resize(CLUSTER_BLOCK_SIZE, 0);
            let crc = region_crc(offset, b.get(4..).unwrap_or_default());
            if let Some(h) = b.get_mut(0..4) {
                h.copy_from_slice(&crc.to_le_bytes());
            }
            out.extend_from_slice(&b);
        }
        let trailer_offset = out.len() as u64;
        let start = out.len();
        for id in &self.table_ids {
            put_u64(&mut out, *id);
        }
        put_u64(&mut out, u64::from(self.n_columns));
        put_u32(&mut out, s as u32);
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

fn decode_column(file: &Path, c: u32, block: &[u8], n_sublevels: usize) -> Result<BloomColumn> {
    let offset = u64::from(c) * CLUSTER_BLOCK_SIZE as u64;
    let bad = |d: &str| Error::corruption(file, offset, format!("bloom cluster column {c}: {d}"));
    if block.len() != CLUSTER_BLOCK_SIZE {
        return Err(bad("short block"));
    }
    if get_u32(block, 0) != Some(region_crc(offset, block.get(4..).unwrap_or_default())) {
        return Err(bad("checksum mismatch"));
    }
    let mut r = Reader::new(block.get(4..).unwrap_or_default());
    let lo = r.u8().ok_or_else(|| bad("truncated"))?;
    let hi = r.u8().ok_or_else(|| bad("truncated"))?;
    if usize::from(u16::from_le_bytes([lo, hi])) != n_sublevels {
        return Err(bad("sub-level count differs from the trailer"));
    }
    let mut filters = Vec::with_capacity(n_sublevels);
    for _ in 0..n_sublevels {
        filters.push(r.slice().ok_or_else(|| bad("truncated filter"))?.to_vec());
    }
    Ok(BloomColumn { filters })
}

/// An open cluster file: the trailer (table ids) in memory, columns read on demand.
#[derive(Clone)]
pub struct BloomClusterReader {
    file: CountedReader,
    n_columns: u32,
    table_ids: Vec<u64>,
}

impl std::fmt::Debug for BloomClusterReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BloomClusterReader")
            .field("path", &self.file.path())
            .field("n_columns", &self.n_columns)
            .field("table_ids", &self.table_ids)
            .finish()
    }
}

impl BloomClusterReader {
    /// Opens a cluster file: reads and checks its trailer (two Metadata reads).
    pub fn open(file: CountedReader) -> Result<Self> {
        let len = file.len();
        let bad =
            |off: u64, d: &str| Error::corruption(file.path(), off, format!("bloom cluster: {d}"));
        if len < TAIL_SIZE as u64 {
            return Err(bad(0, "file too short"));
        }
        let tail_off = len - TAIL_SIZE as u64;
        let tail = file.read(tail_off, TAIL_SIZE, ReadKind::Metadata)?;
        if tail.get(24..32) != Some(&CLUSTER_MAGIC[..]) {
            return Err(bad(tail_off, "bad magic (not a BloomCluster file)"));
        }
        let n_columns = get_u64(&tail, 0).ok_or_else(|| bad(tail_off, "short trailer"))?;
        let s = get_u32(&tail, 8).ok_or_else(|| bad(tail_off, "short trailer"))?;
        let data_len = n_columns.checked_mul(CLUSTER_BLOCK_SIZE as u64);
        let trailer_len = u64::from(s) * 8 + TAIL_SIZE as u64;
        if data_len.and_then(|d| d.checked_add(trailer_len)) != Some(len)
            || n_columns > u64::from(u32::MAX)
        {
            return Err(bad(tail_off, "sizes do not match the file length"));
        }
        let trailer_off = len - trailer_len;
        let trailer = file.read(trailer_off, trailer_len as usize, ReadKind::Metadata)?;
        let body_len = trailer_len as usize - 12;
        let body = trailer.get(..body_len).unwrap_or_default();
        if get_u32(&trailer, body_len) != Some(region_crc(trailer_off, body)) {
            return Err(bad(trailer_off, "trailer checksum mismatch"));
        }
        // Re-read the fields from the checksummed copy.
        let ids_len = s as usize * 8;
        let version = get_u32(&trailer, ids_len + 12).ok_or_else(|| bad(trailer_off, "short"))?;
        if version != CLUSTER_FORMAT_VERSION {
            return Err(Error::Unsupported(format!(
                "BloomCluster format version {version} in {}",
                file.path().display()
            )));
        }
        if get_u32(&trailer, ids_len + 16) != Some(CLUSTER_BLOCK_SIZE as u32)
            || get_u64(&trailer, ids_len) != Some(n_columns)
            || get_u32(&trailer, ids_len + 8) != Some(s)
        {
            return Err(bad(trailer_off, "inconsistent trailer"));
        }
        let table_ids = (0..s as usize)
            .map(|i| get_u64(&trailer, i * 8).ok_or_else(|| bad(trailer_off, "short ids")))
            .collect::<Result<Vec<_>>>()?;
        Ok(BloomClusterReader {
            file,
            n_columns: n_columns as u32,
            table_ids,
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
    /// Table ids of the sub-levels, in sub-level index order.
    pub fn table_ids(&self) -> &[u64] {
        &self.table_ids
    }

    /// Reads column `c` (one Metadata read of one block). The column of a key is its bucket:
    /// `bucket_of(hash, n_columns)`.
    pub fn column(&self, c: u32) -> Result<BloomColumn> {
        if c >= self.n_columns {
            return Err(Error::InvalidArgument(format!(
                "column {c} of a BloomCluster of {} columns",
                self.n_columns
            )));
        }
        let offset = u64::from(c) * CLUSTER_BLOCK_SIZE as u64;
        let block = self.read_block(offset)?;
        decode_column(self.file.path(), c, &block, self.table_ids.len())
    }

    /// The one place cluster blocks are read (a cache can be inserted here).
    fn read_block(&self, offset: u64) -> Result<Vec<u8>> {
        self.file
            .read(offset, CLUSTER_BLOCK_SIZE, ReadKind::Metadata)
    }
}
