//! The sorted table (SST): ≈4 KiB data blocks with prefix compression and restart points, an
//! index block, a whole-table Bloom filter over user keys, and a fixed footer. Byte layout in
//! docs/format.md. Also the shared handle ([`TableFile`]) that owns a table file's lifetime.

pub mod block;
pub mod purge;
mod verify;

use std::cmp::Ordering;
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering as AtOrd};
use std::sync::{Arc, OnceLock, Weak};

use parking_lot::{Mutex, RwLock};

use crate::cache::{BlockCache, MetaItem};
use crate::coding::{crc, get_u32, get_u64, put_u32, put_u64, put_varint, Reader};
use crate::error::{Error, Result};
use crate::filter::bloom;
use crate::fs::{CountedReader, CountedWriter, Env};
use crate::iter::{Concat, InternalIter, RunParts};
use crate::key::{self, cmp_ikey, ValueKind};
use crate::memtable::Lookup;
use crate::stats::ReadKind;
use crate::table_format::TableFormat;
use block::{Block, BlockBuilder, BlockCursor, DataBlock};

/// Footer size in bytes.
pub const FOOTER: usize = 48;
/// Magic number at the end of every sorted table.
pub const MAGIC: u64 = 0x5343_5245_4553_5354; // "SCREESST"
/// Format version written in the footer.
pub const VERSION: u32 = 1;

/// [`AddedTable::format`](crate::manifest::edit::AddedTable::format) code of a sorted table.
pub const FORMAT_SORTED: u8 = 0;
/// File name extension of sorted tables.
pub const SORTED_EXT: &str = "sst";

/// The sorted table in the format registry ([`crate::table_format`]).
pub const SORTED: TableFormat = TableFormat {
    name: "sorted table",
    code: Some(FORMAT_SORTED),
    ext: SORTED_EXT,
    verify: verify::verify,
    for_each: Some(verify::for_each),
    describe: verify::describe,
    fuzz_target: Some("table_open"),
};

/// What the manifest records about a table file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableMeta {
    /// File number (names the file).
    pub file_no: u64,
    /// File size in bytes.
    pub size: u64,
    /// Smallest internal key.
    pub smallest: Vec<u8>,
    /// Largest internal key.
    pub largest: Vec<u8>,
    /// Number of entries.
    pub entries: u64,
    /// Smallest sequence number inside.
    pub min_seq: u64,
    /// Largest sequence number of the writes inside (a version written with sequence number
    /// 0 at the bottom counts with its own number).
    pub max_seq: u64,
    /// For an appendable table, where its current metadata starts and how many of its bytes
    /// no longer count; `None` for a table written once and never again (every format but
    /// the appendable ones). See docs/format.md, "Appendable tables".
    pub append: Option<AppendMeta>,
}

/// What the manifest records of an appendable table beyond [`TableMeta`]: the table is the
/// first [`TableMeta::size`] bytes of its file, and its metadata (the index naming its live
/// segments) runs from `meta_offset` to that end. A table grows by append-then-switch: new
/// segments and new metadata are appended after its end and synced, then a manifest edit
/// names the new end and metadata offset. Bytes before the end a version names are never
/// written again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendMeta {
    /// Offset of the table's current metadata; it ends at [`TableMeta::size`].
    pub meta_offset: u64,
    /// Bytes before `meta_offset` that the current metadata does not reference: metadata
    /// tails a later switch superseded, bytes an unfinished switch appended before a crash,
    /// segments the layout dropped. Reclaimed when the table is next rewritten.
    pub dead_bytes: u64,
}

impl TableMeta {
    /// Bytes the table's current metadata does not reference ([`AppendMeta::dead_bytes`]; 0 for
    /// a table that is not appendable).
    pub fn dead_bytes(&self) -> u64 {
        self.append.map_or(0, |a| a.dead_bytes)
    }
    /// Smallest user key.
    pub fn smallest_user(&self) -> &[u8] {
        key::user_key(&self.smallest)
    }
    /// Largest user key.
    pub fn largest_user(&self) -> &[u8] {
        key::user_key(&self.largest)
    }
    /// Whether the table's user-key range intersects `[lo, hi]` (None = unbounded).
    pub fn overlaps(&self, lo: Option<&[u8]>, hi: Option<&[u8]>) -> bool {
        !(lo.is_some_and(|l| self.largest_user() < l)
            || hi.is_some_and(|h| self.smallest_user() > h))
    }
}

/// File name of a sorted table.
pub fn table_path(dir: &Path, file_no: u64) -> PathBuf {
    dir.join(format!("{file_no:06}.sst"))
}

/// Writes one sorted table.
pub struct TableBuilder {
    w: CountedWriter,
    file_no: u64,
    block: BlockBuilder,
    index: BlockBuilder,
    block_size: usize,
    bloom_bits: u32,
    hashes: Vec<u64>,
    last_user: Vec<u8>,
    smallest: Vec<u8>,
    largest: Vec<u8>,
    entries: u64,
    min_seq: u64,
    max_seq: u64,
    offset: u64,
}

impl TableBuilder {
    /// Starts a table in `w`.
    pub fn new(w: CountedWriter, file_no: u64, block_size: usize, bloom_bits: u32) -> Self {
        TableBuilder {
            w,
            file_no,
            block: BlockBuilder::for_internal_keys(16),
            index: BlockBuilder::for_internal_keys(1),
            block_size,
            bloom_bits,
            hashes: Vec::new(),
            last_user: Vec::new(),
            smallest: Vec::new(),
            largest: Vec::new(),
            entries: 0,
            min_seq: u64::MAX,
            max_seq: 0,
            offset: 0,
        }
    }

    /// Counts `seq` in the table's largest sequence number ([`TableMeta::max_seq`]) for an
    /// entry added with sequence number 0 (a version every snapshot sees, written at the
    /// bottom): the table still holds that write, and `max_seq` bounds the writes it holds.
    pub fn note_seq(&mut self, seq: u64) {
        self.max_seq = self.max_seq.max(seq);
    }

    /// Adds an entry; internal keys must arrive in increasing order.
    pub fn add(&mut self, ikey: &[u8], value: &[u8]) -> Result<()> {
        if !key::valid_ikey(ikey) {
            return Err(Error::InvalidArgument(
                "sorted table entry with a malformed internal key".into(),
            ));
        }
        let p = key::parse(ikey);
        if self.entries == 0 {
            self.smallest = ikey.to_vec();
        }
        if self.entries == 0 || p.user_key != self.last_user.as_slice() {
            self.hashes.push(bloom::bloom_hash(p.user_key));
            self.last_user.clear();
            self.last_user.extend_from_slice(p.user_key);
        }
        self.min_seq = self.min_seq.min(p.seq);
        self.max_seq = self.max_seq.max(p.seq);
        self.block.add(ikey, value);
        self.largest.clear();
        self.largest.extend_from_slice(ikey);
        self.entries += 1;
        if self.block.estimated_size() >= self.block_size {
            self.flush_block()?;
        }
        Ok(())
    }

    fn flush_block(&mut self) -> Result<()> {
        if self.block.is_empty() {
            return Ok(());
        }
        let last = self.block.last_key().to_vec();
        let raw = self.block.finish();
        let mut handle = Vec::with_capacity(16);
        put_varint(&mut handle, self.offset);
        put_varint(&mut handle, raw.len() as u64);
        self.index.add(&last, &handle);
        self.w.append(&raw)?;
        self.offset += raw.len() as u64;
        Ok(())
    }

    /// Bytes written so far (approximate final size).
    pub fn estimated_size(&self) -> u64 {
        self.offset + self.block.estimated_size() as u64
    }
    /// Entries added.
    pub fn entries(&self) -> u64 {
        self.entries
    }
    /// The last internal key added.
    pub fn last_key(&self) -> &[u8] {
        &self.largest
    }

    /// Writes filter, index and footer, syncs, and returns the table's metadata.
    pub fn finish(mut self) -> Result<TableMeta> {
        self.flush_block()?;
        let mut filter = if self.bloom_bits > 0 {
            bloom::encode_local(&self.hashes, self.bloom_bits)
        } else {
            Vec::new()
        };
        let filter_off = self.offset;
        let fc = crc(&filter);
        put_u32(&mut filter, fc);
        self.w.append(&filter)?;
        self.offset += filter.len() as u64;
        let index_raw = self.index.finish();
        let index_off = self.offset;
        self.w.append(&index_raw)?;
        self.offset += index_raw.len() as u64;
        let mut footer = Vec::with_capacity(FOOTER);
        put_u64(&mut footer, index_off);
        put_u64(&mut footer, index_raw.len() as u64);
        put_u64(&mut footer, filter_off);
        put_u64(&mut footer, filter.len() as u64);
        put_u32(&mut footer, VERSION);
        let c = crc(&footer);
        put_u32(&mut footer, c);
        put_u64(&mut footer, MAGIC);
        self.w.append(&footer)?;
        self.offset += footer.len() as u64;
        self.w.sync()?;
        Ok(TableMeta {
            file_no: self.file_no,
            size: self.offset,
            smallest: self.smallest,
            largest: self.largest,
            entries: self.entries,
            min_seq: if self.entries == 0 { 0 } else { self.min_seq },
            max_seq: self.max_seq,
            append: None,
        })
    }
}

/// Where an open sorted table keeps its index block or its Bloom filter (`P`: how a pinned
/// one is held; both inline, as before the option existed, so that a get on the default path
/// follows no extra pointer).
enum Slot<P> {
    /// Decoded at open and held while the reader lives: the default, and an item too large
    /// for the cache to take ([`BlockCache::max_item_bytes`]).
    Pinned(P),
    /// In the block cache at this (offset, size) of the file, charged to its budget
    /// (`Options::cache_index_and_filter_blocks`): loaded at open, and read and checked again
    /// whenever the cache has evicted it.
    Cached(u64, usize),
}

/// A table's index block or Bloom filter: how it is read from the file (it is kept in the
/// cache as a [`MetaItem`]).
trait MetaBlock: MetaItem {
    /// Reads, checks and decodes it at `(offset, size)` of the table.
    fn load(file: &CountedReader, at: (u64, usize)) -> Result<Self>;
    /// Heap bytes held, as the cache weighs it.
    fn weight(&self) -> usize;
}

impl MetaBlock for Block {
    fn load(file: &CountedReader, at: (u64, usize)) -> Result<Self> {
        load_index(file, at)
    }
    fn weight(&self) -> usize {
        Block::weight(self)
    }
}

impl MetaBlock for bloom::LoadedFilter {
    fn load(file: &CountedReader, at: (u64, usize)) -> Result<Self> {
        load_filter(file, at)
    }
    fn weight(&self) -> usize {
        crate::cache::filter_weight(self)
    }
}

impl<P> Slot<P> {
    /// The offset of a cached item.
    fn cached_at(&self) -> Option<u64> {
        match self {
            Slot::Cached(off, _) => Some(*off),
            Slot::Pinned(_) => None,
        }
    }

    /// Opens the slot of the item (a `T`) at `at`: pinned unless the cache holds index and
    /// filter and can take an item of its size; a cached item found still cached (a reopen
    /// under `max_open_files`) is not read again. Returns the slot and the bytes it pins.
    fn open<T: MetaBlock>(
        file: &CountedReader,
        file_no: u64,
        cache: &BlockCache,
        at: (u64, usize),
    ) -> Result<(Slot<P>, usize)>
    where
        P: From<T>,
    {
        if cache.holds_index_and_filter() {
            if cache.get_meta::<T>(file_no, at.0).is_some() {
                return Ok((Slot::Cached(at.0, at.1), 0));
            }
            // Loaded and checked now, as when pinned, so that a damaged table fails at open.
            let item = T::load(file, at)?;
            let w = item.weight();
            if w <= cache.max_item_bytes() {
                cache.insert_meta(file_no, at.0, Arc::new(item));
                return Ok((Slot::Cached(at.0, at.1), 0));
            }
            return Ok((Slot::Pinned(P::from(item)), w));
        }
        let item = T::load(file, at)?;
        let w = item.weight();
        Ok((Slot::Pinned(P::from(item)), w))
    }
}

/// An index block or filter held by the reader (borrowed: a get on the default path takes
/// no reference count) or taken from the cache.
enum Held<'a, T> {
    Pinned(&'a T),
    Cached(Arc<T>),
}

impl<T> std::ops::Deref for Held<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        match self {
            Held::Pinned(t) => t,
            Held::Cached(t) => t,
        }
    }
}

/// A sorted table's footer: where its index block and filter sit.
pub(crate) struct Footer {
    /// Offset and size of the index block.
    pub(crate) index: (u64, usize),
    /// Offset and size of the filter (its checksum included).
    pub(crate) filter: (u64, usize),
}

impl Footer {
    /// Reads and checks the footer of `file`: magic, checksum, version, and block handles
    /// inside the file.
    pub(crate) fn read(file: &CountedReader) -> Result<Footer> {
        let path = file.path();
        let len = file.len();
        let corrupt = |off: u64, d: &str| Error::corruption(path, off, d.to_string());
        if len < FOOTER as u64 {
            return Err(corrupt(0, "file shorter than a table footer"));
        }
        let foot_off = len - FOOTER as u64;
        let f = file.read(foot_off, FOOTER, ReadKind::Metadata)?;
        if get_u64(&f, 40) != Some(MAGIC) {
            return Err(corrupt(foot_off + 40, "bad table magic"));
        }
        if get_u32(&f, 36) != Some(crc(f.get(..36).unwrap_or_default())) {
            return Err(corrupt(foot_off, "footer checksum mismatch"));
        }
        let version = get_u32(&f, 32).unwrap_or(0);
        if version != VERSION {
            return Err(corrupt(
                foot_off + 32,
                &format!("unsupported table version {version}"),
            ));
        }
        let (io, is, fo, fs) = (
            get_u64(&f, 0).unwrap_or(0),
            get_u64(&f, 8).unwrap_or(0),
            get_u64(&f, 16).unwrap_or(0),
            get_u64(&f, 24).unwrap_or(0),
        );
        let in_file = |o: u64, s: u64| o.checked_add(s).is_some_and(|e| e <= foot_off);
        if !in_file(io, is) || !in_file(fo, fs) || fs < 4 || is > 1 << 30 || fs > 1 << 30 {
            return Err(corrupt(foot_off, "footer block handles out of range"));
        }
        Ok(Footer {
            index: (io, is as usize),
            filter: (fo, fs as usize),
        })
    }
}

/// An open sorted table: index and filter pinned in memory (or in the block cache), data
/// blocks through the cache.
pub struct TableReader {
    file: CountedReader,
    file_no: u64,
    index: Slot<Block>,
    filter: Slot<bloom::LoadedFilter>,
    cache: BlockCache,
    stats: Arc<crate::stats::IoStats>,
    /// Counts the file and its pinned index and filter in `Stats::table_reader_bytes`.
    _pinned: crate::stats::Pinned,
}

impl TableReader {
    /// Opens a table and verifies footer, index and filter checksums.
    pub fn open(env: &Env, path: &Path, file_no: u64, cache: BlockCache) -> Result<TableReader> {
        Self::from_file(env, env.open(path, env.direct_reads)?, file_no, cache)
    }

    /// [`TableReader::open`] of a file already opened.
    fn from_file(
        env: &Env,
        file: CountedReader,
        file_no: u64,
        cache: BlockCache,
    ) -> Result<TableReader> {
        let Footer { index, filter } = Footer::read(&file)?;
        let (index, index_bytes) = Slot::open::<Block>(&file, file_no, &cache, index)?;
        let (filter, filter_bytes) =
            Slot::open::<bloom::LoadedFilter>(&file, file_no, &cache, filter)?;
        let pinned = crate::stats::Pinned::new(
            env.stats.clone(),
            index_bytes + filter_bytes + std::mem::size_of::<TableReader>(),
        );
        Ok(TableReader {
            stats: env.stats.clone(),
            file,
            file_no,
            index,
            filter,
            cache,
            _pinned: pinned,
        })
    }

    /// The item of `slot`: pinned, cached, or read again (and cached) after an eviction.
    fn held<'a, T: MetaBlock, P: AsRef<T>>(&self, slot: &'a Slot<P>) -> Result<Held<'a, T>> {
        Ok(match slot {
            Slot::Pinned(t) => Held::Pinned(t.as_ref()),
            Slot::Cached(off, size) => Held::Cached(self.cached(*off, *size)?),
        })
    }

    /// The cached item at (`off`, `size`), or read again and cached.
    fn cached<T: MetaBlock>(&self, off: u64, size: usize) -> Result<Arc<T>> {
        self.cached_or_read(off, size, true)
    }

    /// The cached item at (`off`, `size`), or read again; put back in the cache only when
    /// `fill_cache` (a compaction reads a table's index once, just before the table is
    /// deleted, and must not evict what readers use to hold it: RocksDB's `fill_cache`).
    /// Readers that miss it together read it once (the others wait for that read).
    fn cached_or_read<T: MetaBlock>(
        &self,
        off: u64,
        size: usize,
        fill_cache: bool,
    ) -> Result<Arc<T>> {
        let load = || T::load(&self.file, (off, size)).map(Arc::new);
        let (t, loaded) = if fill_cache {
            self.cache.meta_or_load(self.file_no, off, load)?
        } else {
            match self.cache.get_meta::<T>(self.file_no, off) {
                Some(t) => (t, false),
                None => (load()?, true),
            }
        };
        if loaded {
            self.stats.index_filter_miss();
        } else {
            self.stats.index_filter_hit();
        }
        Ok(t)
    }

    /// The index block.
    fn index(&self) -> Result<Held<'_, Block>> {
        self.held(&self.index)
    }

    /// The index an iterator keeps: `None` when the reader pins it (the iterator holds the
    /// reader), else the cached index, held for the iterator's life; an evicted one is read
    /// again and cached only when `fill_cache` (not for compactions).
    fn iter_index(&self, fill_cache: bool) -> Result<Option<Arc<Block>>> {
        match &self.index {
            Slot::Pinned(_) => Ok(None),
            Slot::Cached(off, size) => self.cached_or_read(*off, *size, fill_cache).map(Some),
        }
    }

    /// The pinned index ([`TableReader::iter_index`] gave `None`); empty for a cached one,
    /// which an iterator never asks for here.
    fn pinned_index(&self) -> &Block {
        match &self.index {
            Slot::Pinned(b) => b,
            Slot::Cached(..) => &block::EMPTY_INDEX,
        }
    }

    /// The Bloom filter.
    fn filter(&self) -> Result<Held<'_, bloom::LoadedFilter>> {
        self.held(&self.filter)
    }

    /// The (offset, size) of data block `i` of `index`.
    fn handle(&self, index: &Block, i: usize) -> Result<(u64, usize)> {
        let mut r = Reader::new(index.value(i));
        match (r.varint(), r.len()) {
            (Some(o), Some(s)) if s <= 1 << 30 => Ok((o, s)),
            _ => Err(Error::corruption(
                self.file.path(),
                0,
                "bad block handle in index",
            )),
        }
    }

    /// Drops this table's blocks from the block cache when they were decoded from its memory
    /// map: each such block holds the whole file's map, so a table deleted with blocks still
    /// cached would keep its inode, and all of its disk space, until they were evicted (found
    /// in review: after a read phase, a write-only phase kept every compacted-away table).
    /// A deleted table's cached index and filter are dropped too (`deleted`), to free their
    /// share of the budget at once; a table closed by the open-table bound keeps them for its
    /// reopen.
    fn evict_mapped_blocks(&self, deleted: bool) {
        if !self.cache.enabled() {
            return;
        }
        if self.file.map().is_some() {
            // The index from wherever it is, an evicted one read without going back into the
            // cache (this runs under the open-table lock, for a table leaving it). Best
            // effort: if it cannot be read, its blocks leave the cache by eviction instead.
            let loaded;
            let index = match &self.index {
                Slot::Pinned(b) => Some(b),
                Slot::Cached(off, size) => {
                    loaded = self
                        .cache
                        .get_meta::<Block>(self.file_no, *off)
                        .or_else(|| load_index(&self.file, (*off, *size)).ok().map(Arc::new));
                    loaded.as_deref()
                }
            };
            if let Some(index) = index {
                for i in 0..index.len() {
                    if let Ok((off, _)) = self.handle(index, i) {
                        self.cache.remove(self.file_no, off);
                    }
                }
            }
        }
        if deleted {
            for off in self.cached_offsets().into_iter().flatten() {
                self.cache.remove(self.file_no, off);
            }
        }
    }

    /// The cache offsets of its index and filter, when they are kept there.
    fn cached_offsets(&self) -> [Option<u64>; 2] {
        [self.index.cached_at(), self.filter.cached_at()]
    }

    /// Reads data block `i` of `index`; `fill_cache` false for compaction reads.
    fn block(&self, index: &Block, i: usize, fill_cache: bool) -> Result<Arc<DataBlock>> {
        let (off, size) = self.handle(index, i)?;
        if let Some(b) = self.cache.get(self.file_no, off) {
            // Counted like the miss below: only for lookups and scans (a compaction's reads are
            // kept apart from lookup costs, and its misses are not cache misses either).
            if fill_cache {
                self.stats.cache_hits.fetch_add(1, AtOrd::Relaxed);
            }
            return Ok(b);
        }
        let kind = if fill_cache {
            self.stats.cache_misses.fetch_add(1, AtOrd::Relaxed);
            ReadKind::Data
        } else {
            ReadKind::Compaction
        };
        let corrupt =
            |(o, d): (usize, String)| Error::corruption(self.file.path(), off + o as u64, d);
        let b = Arc::new(match self.file.map() {
            Some(map) => {
                // Checks the range and counts the read; the block keeps the map alive.
                self.file.mapped(off, size, kind)?;
                let start = usize::try_from(off).unwrap_or(usize::MAX);
                DataBlock::decode_mapped(map.clone(), start..start.saturating_add(size))
                    .map_err(corrupt)?
            }
            None => DataBlock::decode(self.file.read(off, size, kind)?).map_err(corrupt)?,
        });
        if fill_cache {
            self.cache.insert(self.file_no, off, b.clone());
        }
        Ok(b)
    }

    /// A cursor over data block `i` of `index`, with errors naming this file.
    fn cursor(&self, index: &Block, i: usize, fill_cache: bool) -> Result<(BlockCursor, u64)> {
        let (off, _) = self.handle(index, i)?;
        Ok((BlockCursor::new(self.block(index, i, fill_cache)?), off))
    }

    fn cursor_err(&self, block_off: u64, (o, d): block::CursorError) -> Error {
        Error::corruption(self.file.path(), block_off + o as u64, d)
    }

    /// Whether the Bloom filter admits `user_key` (an error only when the filter, evicted
    /// from the block cache, cannot be read again).
    pub fn may_contain(&self, user_key: &[u8]) -> Result<bool> {
        self.admits(bloom::bloom_hash(user_key))
    }

    /// Whether the Bloom filter admits the key whose `bloom::bloom_hash` is `h`.
    pub fn admits(&self, h: u64) -> Result<bool> {
        Ok(self.filter()?.may_contain(h))
    }

    /// Loads the cache line of a pinned filter that `admits(h)` will read, without waiting
    /// for it (a cached filter is found when tested).
    fn prefetch_filter(&self, h: u64) {
        if let Slot::Pinned(filter) = &self.filter {
            filter.touch(h);
        }
    }

    /// Newest version of `user_key` visible at `seq`.
    pub fn get(&self, user_key: &[u8], seq: u64) -> Result<Lookup> {
        if !self.may_contain(user_key)? {
            return Ok(Lookup::Absent);
        }
        self.get_admitted(user_key, seq)
    }

    /// [`TableReader::get`] once the filter admitted the key.
    fn get_admitted(&self, user_key: &[u8], seq: u64) -> Result<Lookup> {
        let lk = key::lookup_key(user_key, seq);
        let index = self.index()?;
        let bi = index.lower_bound_ikey(&lk);
        if bi >= index.len() {
            return Ok(Lookup::Absent);
        }
        let (mut c, off) = self.cursor(&index, bi, true)?;
        c.seek(&lk, cmp_ikey).map_err(|e| self.cursor_err(off, e))?;
        if !c.valid() {
            return Ok(Lookup::Absent);
        }
        let p = key::parse(c.key());
        if p.user_key != user_key {
            return Ok(Lookup::Absent);
        }
        Ok(match ValueKind::from_u8(p.kind) {
            Some(ValueKind::Put) => Lookup::Value(c.value().to_vec()),
            Some(ValueKind::Delete) => Lookup::Deleted,
            None => {
                return Err(Error::corruption(
                    self.file.path(),
                    off,
                    "entry key is not an internal key",
                ))
            }
        })
    }

    /// Number of data blocks.
    pub fn blocks(&self) -> Result<usize> {
        Ok(self.index()?.len())
    }
}

/// Reads, checks and decodes the index block at `(offset, size)` of a table.
fn load_index(file: &CountedReader, (off, size): (u64, usize)) -> Result<Block> {
    let corrupt = |o: u64, d: &str| Error::corruption(file.path(), o, d.to_string());
    let raw = file.read(off, size, ReadKind::Metadata)?;
    let index = Block::decode(raw).map_err(|(o, d)| corrupt(off + o as u64, &d))?;
    for i in 0..index.len() {
        if !key::valid_ikey(index.key(i)) {
            return Err(corrupt(off, "index key is not an internal key"));
        }
    }
    Ok(index)
}

/// Reads and checks the Bloom filter at `(offset, size)` of a table (size ≥ 4, its checksum
/// included).
fn load_filter(file: &CountedReader, (off, size): (u64, usize)) -> Result<bloom::LoadedFilter> {
    let mut filter = file.read(off, size, ReadKind::Metadata)?;
    let split = filter.len().saturating_sub(4);
    if get_u32(&filter, split) != Some(crc(filter.get(..split).unwrap_or_default())) {
        return Err(Error::corruption(
            file.path(),
            off,
            "filter checksum mismatch".to_string(),
        ));
    }
    filter.truncate(split);
    Ok(bloom::LoadedFilter::new(filter))
}

/// A cursor over one table.
pub struct TableIter {
    t: Arc<TableReader>,
    /// The table's cached index, held for the iterator's life (the cache cannot evict it
    /// from under it); `None` when the reader pins it.
    index: Option<Arc<Block>>,
    fill_cache: bool,
    bi: usize,
    cur: Option<(BlockCursor, u64)>,
}

impl TableIter {
    /// An unpositioned cursor; `fill_cache` false for compactions.
    pub fn new(t: Arc<TableReader>, fill_cache: bool) -> Result<Self> {
        Ok(TableIter {
            index: t.iter_index(fill_cache)?,
            t,
            fill_cache,
            bi: 0,
            cur: None,
        })
    }
    /// The table's index.
    fn index(&self) -> &Block {
        match &self.index {
            Some(b) => b,
            None => self.t.pinned_index(),
        }
    }
    /// Opens block `bi` (or clears the cursor past the end).
    fn load(&mut self, bi: usize) -> Result<bool> {
        if bi >= self.index().len() {
            self.cur = None;
            return Ok(false);
        }
        self.bi = bi;
        self.cur = Some(self.t.cursor(self.index(), bi, self.fill_cache)?);
        Ok(true)
    }
    fn step(
        &mut self,
        f: impl FnOnce(&mut BlockCursor) -> std::result::Result<(), block::CursorError>,
    ) -> Result<()> {
        if let Some((c, off)) = self.cur.as_mut() {
            let off = *off;
            if let Err(e) = f(c) {
                return Err(self.t.cursor_err(off, e));
            }
        }
        Ok(())
    }
    fn cur_valid(&self) -> bool {
        self.cur.as_ref().is_some_and(|(c, _)| c.valid())
    }
    fn skip_empty_forward(&mut self) -> Result<()> {
        while self.cur.is_some() && !self.cur_valid() {
            if !self.load(self.bi + 1)? {
                return Ok(());
            }
            self.step(|c| c.seek_to_first())?;
        }
        Ok(())
    }
    fn skip_empty_backward(&mut self) -> Result<()> {
        while self.cur.is_some() && !self.cur_valid() {
            if self.bi == 0 {
                self.cur = None;
                return Ok(());
            }
            self.load(self.bi - 1)?;
            self.step(|c| c.seek_to_last())?;
        }
        Ok(())
    }
}

impl InternalIter for TableIter {
    fn valid(&self) -> bool {
        self.cur_valid()
    }
    fn key(&self) -> &[u8] {
        self.cur.as_ref().map(|(c, _)| c.key()).unwrap_or_default()
    }
    fn value(&self) -> &[u8] {
        self.cur
            .as_ref()
            .map(|(c, _)| c.value())
            .unwrap_or_default()
    }
    fn seek_to_first(&mut self) -> Result<()> {
        if self.load(0)? {
            self.step(|c| c.seek_to_first())?;
        }
        self.skip_empty_forward()
    }
    fn seek_to_last(&mut self) -> Result<()> {
        let n = self.index().len();
        if n == 0 {
            self.cur = None;
            return Ok(());
        }
        self.load(n - 1)?;
        self.step(|c| c.seek_to_last())?;
        self.skip_empty_backward()
    }
    fn seek(&mut self, ikey: &[u8]) -> Result<()> {
        let bi = self.index().lower_bound_ikey(ikey);
        if !self.load(bi)? {
            return Ok(());
        }
        self.step(|c| c.seek(ikey, cmp_ikey))?;
        self.skip_empty_forward()
    }
    fn seek_for_prev(&mut self, ikey: &[u8]) -> Result<()> {
        self.seek(ikey)?;
        if !self.valid() {
            return self.seek_to_last();
        }
        if cmp_ikey(self.key(), ikey) == Ordering::Greater {
            self.prev()?;
        }
        Ok(())
    }
    fn next(&mut self) -> Result<()> {
        if !self.valid() {
            return Ok(());
        }
        self.step(|c| c.next())?;
        self.skip_empty_forward()
    }
    fn prev(&mut self) -> Result<()> {
        if !self.valid() {
            return Ok(());
        }
        self.step(|c| c.prev())?;
        self.skip_empty_backward()
    }
}

/// Shared context for opening tables of one database.
pub struct TableCtx {
    /// The file layer.
    pub env: Env,
    /// The block cache.
    pub cache: BlockCache,
    /// The database directory.
    pub dir: PathBuf,
    /// The open sorted tables, when their number is bounded (`Options::max_open_files`).
    pub open: OpenTables,
    /// Where obsolete tables are torn down and deleted.
    pub purge: purge::Purger,
}

/// The bound on open table files (`Options::max_open_files`; 0: none): sorted-table readers,
/// and the `trie` layout's HTables and BloomClusters through [`TableAux`]. An open sorted
/// table holds a file descriptor, the decoded index and the Bloom filter (≈ 3.4 bytes per
/// key), an open HTable a descriptor and its migration records and bucket index: without a
/// bound they grow with the store. Past the bound the file opened longest ago and not used
/// since its last chance is closed (CLOCK: a use sets a bit, the sweep clears it once before
/// closing); the next use opens the file again and reads its metadata again. A closed
/// reader's memory is freed when the last iterator or lookup holding it ends.
#[derive(Default)]
pub struct OpenTables {
    cap: usize,
    ring: Mutex<VecDeque<Weak<TableFile>>>,
}

impl OpenTables {
    /// Whether open files may be closed (a bound is set).
    pub fn bounded(&self) -> bool {
        self.cap > 0
    }
    /// At most `cap` open readers (0: no bound).
    pub fn new(cap: usize) -> Self {
        OpenTables {
            cap,
            ring: Mutex::new(VecDeque::new()),
        }
    }

    /// Records that `t` was just opened and closes readers past the bound.
    fn opened(&self, t: Weak<TableFile>) {
        if self.cap == 0 {
            return;
        }
        let mut ring = self.ring.lock();
        ring.push_back(t);
        // Each reader gets at most one second chance per sweep, so this ends.
        let mut budget = 2 * ring.len();
        while ring.len() > self.cap && budget > 0 {
            budget -= 1;
            let Some(w) = ring.pop_front() else { break };
            let Some(f) = w.upgrade() else { continue };
            if f.used.swap(false, AtOrd::Relaxed) {
                ring.push_back(w);
            } else {
                f.close();
            }
        }
    }
}

/// The open state of a file of a layout-specific format, kept in [`TableFile::aux`]: what it
/// holds open (descriptor, map, per-file metadata) can be closed by the open-table bound and
/// reopened on the next use, like a sorted table's reader.
pub trait TableAux: std::any::Any + Send + Sync {
    /// Closes the open file; a use already holding it keeps it until done.
    fn close(&self);
    /// The table is obsolete and unreferenced, and its teardown is about to be queued on the
    /// purge thread: give back what budgets it holds now, so tables opened meanwhile are not
    /// refused for memory about to be freed. Runs on the thread that dropped the table.
    fn retire(&self) {}
}

/// A live table file. When it is marked obsolete (no version names it any more) the file is
/// deleted as soon as the last reader drops its handle. An appendable table has one handle per
/// length a version names ([`TableFile::readded`]): they share the file's [`FileLife`], and the
/// file goes only when every one of them is gone.
pub struct TableFile {
    /// What the manifest knows of it.
    pub meta: TableMeta,
    /// File name extension: its format's [`TableFormat::ext`] ([`crate::table_format::by_ext`]
    /// finds the format).
    pub ext: &'static str,
    /// The handle of a layout-specific format, set by the layout that owns the file. A layout
    /// that opens the file through it calls [`TableFile::opened`] and, on each use,
    /// [`TableFile::touch`], so the open-table bound covers it too.
    pub aux: OnceLock<Arc<dyn TableAux>>,
    ctx: Arc<TableCtx>,
    /// The open reader; `None` until first used, and again after [`OpenTables`] closed it.
    reader: RwLock<Option<Arc<TableReader>>>,
    /// Used since the open-table sweep last passed it.
    used: AtomicBool,
    /// Where its index and filter sit in the block cache, once a reader has put them there
    /// (`cache_index_and_filter_blocks`), so that deleting the table drops them even when the
    /// open-table bound has closed its reader.
    cached_meta: OnceLock<[Option<u64>; 2]>,
    me: Weak<TableFile>,
    /// The file's life, shared with the handles of its other lengths; taken by the drop.
    life: Option<Arc<FileLife>>,
}

/// What every handle of one file shares: whether the file is obsolete. The handle that drops
/// the last reference to it deletes the file (on the purge thread) if it is; handles of an
/// appendable table's older lengths, which old versions still read, keep it until then.
#[derive(Default)]
struct FileLife {
    obsolete: AtomicBool,
}

impl std::fmt::Debug for TableFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TableFile({})", self.meta.file_no)
    }
}

impl TableFile {
    /// A handle for a sorted table named by the manifest (opened lazily).
    pub fn new(meta: TableMeta, ctx: Arc<TableCtx>) -> Arc<TableFile> {
        Self::with_ext(meta, ctx, SORTED_EXT)
    }
    /// A handle for a file of another format (`ext`, a registered extension, names it).
    pub fn with_ext(meta: TableMeta, ctx: Arc<TableCtx>, ext: &'static str) -> Arc<TableFile> {
        Self::with_life(meta, ctx, ext, Arc::default())
    }
    fn with_life(
        meta: TableMeta,
        ctx: Arc<TableCtx>,
        ext: &'static str,
        life: Arc<FileLife>,
    ) -> Arc<TableFile> {
        Arc::new_cyclic(|me| TableFile {
            meta,
            ext,
            aux: OnceLock::new(),
            ctx,
            reader: RwLock::new(None),
            used: AtomicBool::new(false),
            cached_meta: OnceLock::new(),
            me: me.clone(),
            life: Some(life),
        })
    }
    /// The handle of this table once an edit removed it and added it back with `meta`: this
    /// handle when nothing changed (a move), or, for an append switch (an appendable table at
    /// a new end), a new handle of the same file at the new length, sharing the file's life
    /// (this one keeps the old length for the versions that hold it). Anything else is not an
    /// append of this table: the new end must lie past the old one, with the new metadata
    /// after the old end (bytes before it are never written again) and at least the dead
    /// bytes before.
    pub fn readded(&self, meta: &TableMeta) -> Result<Arc<TableFile>> {
        let (old, me) = (&self.meta, self.me.upgrade());
        if meta == old {
            if let Some(me) = me {
                return Ok(me);
            }
        }
        let fits = match (old.append, meta.append) {
            (Some(o), Some(n)) => {
                meta.file_no == old.file_no
                    && meta.size > old.size
                    && n.meta_offset >= old.size
                    && n.dead_bytes >= o.dead_bytes
            }
            _ => false,
        };
        if !fits {
            return Err(Error::InvalidArgument(format!(
                "table {:06} re-added as {meta:?}, which is neither it ({old:?}) nor an append to it",
                old.file_no
            )));
        }
        let life = self.life.clone().unwrap_or_default();
        Ok(Self::with_life(
            meta.clone(),
            self.ctx.clone(),
            self.ext,
            life,
        ))
    }
    /// The file's path.
    pub fn path(&self) -> PathBuf {
        self.ctx
            .dir
            .join(format!("{:06}.{}", self.meta.file_no, self.ext))
    }
    /// The shared table context.
    pub fn ctx(&self) -> &Arc<TableCtx> {
        &self.ctx
    }
    /// Whether `user_key` at `seq` can be in this table by its metadata: inside its key range,
    /// and not all of its versions newer than `seq`.
    pub fn may_hold(&self, user_key: &[u8], seq: u64) -> bool {
        user_key >= self.meta.smallest_user()
            && user_key <= self.meta.largest_user()
            && self.meta.min_seq <= seq
    }
    /// The layout-specific handle as a `T`, if set and of that type.
    pub fn aux_as<T: TableAux>(&self) -> Option<&T> {
        let a: &dyn std::any::Any = &**self.aux.get()?;
        a.downcast_ref::<T>()
    }
    /// Records a use of the file's open state (the open-table sweep spares it once).
    pub fn touch(&self) {
        if !self.used.load(AtOrd::Relaxed) {
            self.used.store(true, AtOrd::Relaxed);
        }
    }
    /// Records that the file was just opened (by its reader or its [`TableFile::aux`]
    /// handle), closing files past the open-table bound.
    pub fn opened(&self) {
        self.ctx.open.opened(self.me.clone());
    }
    /// Closes what the file holds open (reader and `aux`); the next use opens it again.
    fn close(&self) {
        if let Some(r) = self.reader.write().take() {
            // Its cached mapped blocks hold the file's map; once closed, nothing would
            // remove them when the table is deleted (see `evict_mapped_blocks`).
            r.evict_mapped_blocks(false);
        }
        if let Some(a) = self.aux.get() {
            a.close();
        }
    }
    /// The open reader, if the file is open.
    fn open_reader(&self) -> Option<Arc<TableReader>> {
        let r = self.reader.read().clone();
        if r.is_some() {
            self.touch();
        }
        r
    }
    /// The open reader (opens the file on first use, and after the open-table bound closed it).
    pub fn reader(&self) -> Result<Arc<TableReader>> {
        if let Some(r) = self.open_reader() {
            return Ok(r);
        }
        let r = Arc::new(TableReader::from_file(
            &self.ctx.env,
            self.open_file()?,
            self.meta.file_no,
            self.ctx.cache.clone(),
        )?);
        {
            let mut slot = self.reader.write();
            if let Some(other) = &*slot {
                // Another thread opened it meanwhile: one reader per file.
                return Ok(other.clone());
            }
            *slot = Some(r.clone());
        }
        self.cached_meta.get_or_init(|| r.cached_offsets());
        self.opened();
        Ok(r)
    }
    /// Opens the file for reading (mapped when the options say so). Its length must be the
    /// size the manifest records (0: not recorded): a file of another length is not the file
    /// the manifest names, even when its own footer and checksums are sound (a table of
    /// another number or database put in its place), and reading it as that file would answer
    /// from the wrong keys (gets of the real table's keys would say "absent"). An appendable
    /// table is read up to the size its version names and no further (a map covers only
    /// that); its file may be longer, by bytes a later switch appended (the next version's,
    /// or an unfinished switch's before a crash), never shorter.
    pub fn open_file(&self) -> Result<CountedReader> {
        let env = &self.ctx.env;
        let path = self.path();
        if self.meta.append.is_some() {
            return env.open_prefix(&path, env.direct_reads, self.meta.size);
        }
        let file = env.open(&path, env.direct_reads)?;
        let (len, size) = (file.len(), self.meta.size);
        if size != 0 && len != size {
            return Err(Error::corruption(
                &path,
                len.min(size),
                format!("file is {len} bytes, the manifest says {size}"),
            ));
        }
        Ok(file)
    }
    /// Marks the file for deletion once unreferenced (by every handle of it).
    pub fn mark_obsolete(&self) {
        if let Some(l) = &self.life {
            l.obsolete.store(true, AtOrd::SeqCst);
        }
    }

    /// A cursor over the table.
    pub fn iter(&self, fill_cache: bool) -> Result<TableIter> {
        TableIter::new(self.reader()?, fill_cache)
    }
}

/// Looks `user_key` up at `seq` in `tables`, given newest data first: the first table holding a
/// version of the key answers. The key is hashed once, and the filter blocks of every table
/// that may hold it (an open one: the others open when reached) are loaded before any is
/// tested, so their cache misses overlap instead of coming one table after another (a get in
/// a sorted layout tests 5–10 filters, each a miss).
pub fn get_in_tables<'a>(
    tables: impl IntoIterator<Item = &'a Arc<TableFile>>,
    user_key: &[u8],
    seq: u64,
) -> Result<Lookup> {
    let h = bloom::bloom_hash(user_key);
    type Candidate<'t> = (&'t TableFile, Option<Arc<TableReader>>);
    let mut todo: smallvec::SmallVec<[Candidate<'a>; 16]> = smallvec::SmallVec::new();
    for f in tables {
        if f.may_hold(user_key, seq) {
            let r = f.open_reader();
            if let Some(r) = &r {
                r.prefetch_filter(h);
            }
            todo.push((f, r));
        }
    }
    for (f, r) in todo {
        let r = match r {
            Some(r) => r,
            None => f.reader()?,
        };
        if !r.admits(h)? {
            continue;
        }
        match r.get_admitted(user_key, seq)? {
            Lookup::Absent => {}
            found => return Ok(found),
        }
    }
    Ok(Lookup::Absent)
}

impl Drop for TableFile {
    fn drop(&mut self) {
        let life = self.life.take();
        if life
            .as_ref()
            .is_some_and(|l| l.obsolete.load(AtOrd::SeqCst))
        {
            // Torn down on the purge thread, not on whichever writer or reader dropped the
            // last reference (table/purge.rs).
            let reader = self.reader.get_mut().take();
            let aux = self.aux.take();
            if let Some(a) = &aux {
                a.retire();
            }
            let cached = self.cached_meta.get().copied();
            let (ctx, file_no, path) = (self.ctx.clone(), self.meta.file_no, self.path());
            self.ctx.purge.run(Box::new(move || {
                if let Some(r) = &reader {
                    r.evict_mapped_blocks(true);
                }
                for off in cached.into_iter().flatten().flatten() {
                    ctx.cache.remove(file_no, off);
                }
                drop(reader);
                drop(aux);
                // The last handle of the file deletes it; a handle of another length of an
                // appendable table still held by an old version keeps it until it goes too.
                if life.and_then(Arc::into_inner).is_some() {
                    let _ = ctx.env.fs.remove(&path);
                }
            }));
        } else if let Some(last) = life.and_then(Arc::into_inner) {
            // The last handle of the file, and no version that named it is left to mark it
            // obsolete after this check: deleted only if a newer handle already was.
            if last.obsolete.load(AtOrd::SeqCst) {
                let (ctx, path) = (self.ctx.clone(), self.path());
                self.ctx.purge.run(Box::new(move || {
                    let _ = ctx.env.fs.remove(&path);
                }));
            }
        }
    }
}

/// A sorted run of non-overlapping tables (one level), as [`Concat`] parts.
pub struct TableRun {
    tables: Arc<[Arc<TableFile>]>,
    fill_cache: bool,
}

impl RunParts for TableRun {
    type Iter = TableIter;
    fn count(&self) -> usize {
        self.tables.len()
    }
    fn open(&self, idx: usize) -> Result<TableIter> {
        match self.tables.get(idx) {
            Some(t) => t.iter(self.fill_cache),
            None => Err(Error::InvalidArgument(format!("no table {idx} in the run"))),
        }
    }
    fn seek_part(&self, ikey: &[u8]) -> usize {
        self.tables
            .partition_point(|t| cmp_ikey(&t.meta.largest, ikey) == Ordering::Less)
    }
    fn seek_for_prev_part(&self, ikey: &[u8]) -> Option<usize> {
        self.tables
            .partition_point(|t| cmp_ikey(&t.meta.smallest, ikey) != Ordering::Greater)
            .checked_sub(1)
    }
}

/// Iterates a sorted run of non-overlapping tables, each opened only when reached.
pub type ConcatIter = Concat<TableRun>;

impl ConcatIter {
    /// Iterates `tables`, which must be sorted and non-overlapping. Versions share the run
    /// (`Arc<[_]>`), so starting a scan does not copy a level's file list.
    pub fn new(tables: impl Into<Arc<[Arc<TableFile>]>>, fill_cache: bool) -> Self {
        Concat::over(TableRun {
            tables: tables.into(),
            fill_cache,
        })
    }
}

/// Tables that exist only as metadata, for unit tests of layout versions and policies.
#[cfg(test)]
pub(crate) mod test_support {
    use std::sync::Arc;

    use super::{TableCtx, TableMeta};
    use crate::cache::BlockCache;
    use crate::fs::{std_fs::StdFs, Env};
    use crate::key::{make_ikey, ValueKind};
    use crate::manifest::edit::AddedTable;

    /// Table files in `dir` on the real file system (`pread`), with a block cache of
    /// `cache_bytes`.
    pub(crate) fn std_ctx(dir: &std::path::Path, cache_bytes: usize) -> Arc<TableCtx> {
        std_ctx_with(dir, BlockCache::new(cache_bytes))
    }

    /// [`std_ctx`] with a given block cache.
    pub(crate) fn std_ctx_with(dir: &std::path::Path, cache: BlockCache) -> Arc<TableCtx> {
        ctx_with(dir, cache, super::purge::Purger::inline())
    }

    /// [`std_ctx`] (no block cache) whose obsolete tables are torn down on a purge thread.
    pub(crate) fn std_ctx_purged(dir: &std::path::Path) -> Arc<TableCtx> {
        let purge = super::purge::Purger::spawn("scree-purge-test");
        ctx_with(dir, BlockCache::new(0), purge)
    }

    fn ctx_with(
        dir: &std::path::Path,
        cache: BlockCache,
        purge: super::purge::Purger,
    ) -> Arc<TableCtx> {
        Arc::new(TableCtx {
            env: Env {
                fs: Arc::new(StdFs),
                stats: Arc::default(),
                direct_reads: false,
                mmap_reads: false,
            },
            cache,
            dir: dir.to_path_buf(),
            open: super::OpenTables::default(),
            purge,
        })
    }

    /// A context whose directory holds no files (tables are never opened).
    pub(crate) fn metadata_only_ctx() -> Arc<TableCtx> {
        std_ctx(&std::env::temp_dir().join("scree-unit-no-files"), 0)
    }

    /// A table of `level` holding user keys `lo..=hi` with sequence numbers `seqs` (min, max).
    pub(crate) fn metadata_only_table(
        level: u32,
        no: u64,
        lo: &str,
        hi: &str,
        seqs: (u64, u64),
        size: u64,
    ) -> AddedTable {
        AddedTable {
            level,
            slot: 0,
            format: 0,
            meta: TableMeta {
                file_no: no,
                size,
                smallest: make_ikey(lo.as_bytes(), seqs.1, ValueKind::Put),
                largest: make_ikey(hi.as_bytes(), seqs.0, ValueKind::Put),
                entries: 2,
                min_seq: seqs.0,
                max_seq: seqs.1,
                append: None,
            },
        }
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing)]
mod concat_tests {
    use super::test_support::std_ctx;
    use super::{table_path, ConcatIter, TableBuilder, TableFile};
    use crate::iter::InternalIter;
    use crate::key::{cmp_ikey, make_ikey, ValueKind};
    use crate::stats::WriteCause;

    /// `ConcatIter::seek` and `seek_for_prev` keep the `InternalIter` contract (first entry
    /// >= target, last entry <= target) when the target is exactly a table's smallest or
    /// > largest internal key, or falls in the gap between two tables: a table whose smallest
    /// > key equals the target must be the one searched, not skipped for its predecessor.
    #[test]
    fn seeks_on_table_boundaries_find_the_exact_entry() {
        let dir = tempfile::tempdir().expect("dir");
        let ctx = std_ctx(dir.path(), 1 << 20);
        // Three tables of a sorted run; zeroed and ordinary sequence numbers, a tombstone.
        let runs: [&[(&str, u64, ValueKind)]; 3] = [
            &[("b", 0, ValueKind::Put), ("d", 7, ValueKind::Put)],
            &[
                ("f", 9, ValueKind::Delete),
                ("f", 3, ValueKind::Put),
                ("h", 0, ValueKind::Put),
            ],
            &[("k", 4, ValueKind::Put), ("m", 0, ValueKind::Put)],
        ];
        let mut all: Vec<Vec<u8>> = Vec::new();
        let mut files = Vec::new();
        for (no, run) in runs.iter().enumerate() {
            let no = no as u64 + 1;
            let w = ctx
                .env
                .create(&table_path(&ctx.dir, no), WriteCause::Flush)
                .expect("create");
            let mut b = TableBuilder::new(w, no, 4096, 10);
            for &(k, seq, kind) in run.iter() {
                let ik = make_ikey(k.as_bytes(), seq, kind);
                b.add(&ik, k.as_bytes()).expect("add");
                all.push(ik);
            }
            files.push(TableFile::new(b.finish().expect("finish"), ctx.clone()));
        }
        let mut it = ConcatIter::new(files, true);
        let mut targets = all.clone();
        for k in ["a", "c", "e", "g", "j", "l", "n"] {
            targets.push(make_ikey(k.as_bytes(), 5, ValueKind::Put));
        }
        for t in &targets {
            let want_next = all.iter().find(|k| cmp_ikey(k, t).is_ge());
            it.seek(t).expect("seek");
            assert_eq!(it.valid().then(|| it.key().to_vec()).as_ref(), want_next);
            let want_prev = all.iter().rev().find(|k| cmp_ikey(k, t).is_le());
            it.seek_for_prev(t).expect("seek_for_prev");
            assert_eq!(
                it.valid().then(|| it.key().to_vec()).as_ref(),
                want_prev,
                "seek_for_prev({:?})",
                String::from_utf8_lossy(t)
            );
        }
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing)]
mod cached_meta_tests {
    use std::sync::Arc;

    use super::block::Block;
    use super::test_support::std_ctx_with as ctx_with;
    use super::{get_in_tables, table_path, TableBuilder, TableCtx, TableFile, FOOTER};
    use crate::cache::BlockCache;
    use crate::coding::get_u64;
    use crate::error::Error;
    use crate::filter::bloom::LoadedFilter;
    use crate::iter::InternalIter;
    use crate::key::{make_ikey, ValueKind, MAX_SEQ};
    use crate::memtable::Lookup;
    use crate::stats::WriteCause;

    fn ctx(dir: &std::path::Path, cached: bool) -> Arc<TableCtx> {
        ctx_with(
            dir,
            BlockCache::new(1 << 20).holding_index_and_filter(cached),
        )
    }

    fn key(i: u32) -> String {
        format!("key{i:05}")
    }

    /// A table of 400 keys in 256-byte blocks; its (index, filter) offsets from the footer.
    fn table(ctx: &Arc<TableCtx>) -> (Arc<TableFile>, u64, u64) {
        table_of(ctx, 400)
    }

    fn table_of(ctx: &Arc<TableCtx>, n: u32) -> (Arc<TableFile>, u64, u64) {
        let w = ctx
            .env
            .create(&table_path(&ctx.dir, 1), WriteCause::Flush)
            .expect("create");
        let mut b = TableBuilder::new(w, 1, 256, 10);
        for i in 0..n {
            let k = key(i);
            b.add(&make_ikey(k.as_bytes(), 1, ValueKind::Put), k.as_bytes())
                .expect("add");
        }
        let t = TableFile::new(b.finish().expect("finish"), ctx.clone());
        let bytes = ctx.env.fs.read_all(&t.path()).expect("read");
        let foot = &bytes[bytes.len() - FOOTER..];
        let (io, fo) = (get_u64(foot, 0), get_u64(foot, 16));
        (t, io.expect("index offset"), fo.expect("filter offset"))
    }

    fn get(t: &Arc<TableFile>, k: &str) -> crate::Result<Lookup> {
        get_in_tables([t], k.as_bytes(), MAX_SEQ)
    }

    /// Asserts that `t` reads key `i` as its value (`what` names the moment).
    fn reads(t: &Arc<TableFile>, i: u32, what: &str) {
        let want = Lookup::Value(key(i).into_bytes());
        assert_eq!(get(t, &key(i)).expect(what), want, "{what}");
    }

    /// Index and filter in the cache: lookups and scans answer as from pinned ones, an
    /// evicted one is read again, and one damaged on disk after it was first loaded is a
    /// `Corruption` naming the file and what failed once the cache has let it go — never a
    /// wrong answer or a panic.
    #[test]
    fn an_evicted_index_or_filter_is_read_again_and_checked() {
        let dir = tempfile::tempdir().expect("dir");
        let ctx = ctx(dir.path(), true);
        let (t, io, fo) = table(&ctx);
        for i in (0..400).step_by(7) {
            let want = Lookup::Value(key(i).into_bytes());
            assert_eq!(get(&t, &key(i)).expect("get"), want);
        }
        assert_eq!(get(&t, "key99999").expect("get"), Lookup::Absent);
        let s = ctx.env.stats.snapshot();
        let reader_size = std::mem::size_of::<super::TableReader>() as u64;
        assert_eq!(s.table_reader_bytes, reader_size, "nothing pinned");
        assert!(s.index_filter_cache_hits > 0);
        assert_eq!(s.index_filter_cache_misses, 0, "loaded at open");

        // Evicted: read again, same answers, counted as misses.
        ctx.cache.remove(1, io);
        ctx.cache.remove(1, fo);
        reads(&t, 5, "get");
        let mut it = t.iter(true).expect("iter");
        it.seek_to_first().expect("seek");
        let mut n = 0;
        while it.valid() {
            n += 1;
            it.next().expect("next");
        }
        assert_eq!(n, 400);
        assert_eq!(ctx.env.stats.snapshot().index_filter_cache_misses, 2);

        // Damaged on disk after loading: found when the cache no longer has it.
        let path = t.path();
        let mut bytes = std::fs::read(&path).expect("read");
        bytes[fo as usize + 3] ^= 0x40;
        bytes[io as usize + 5] ^= 0x01;
        std::fs::write(&path, &bytes).expect("write");
        reads(&t, 5, "still cached");
        ctx.cache.remove(1, fo);
        match get(&t, &key(5)) {
            Err(Error::Corruption { detail, offset, .. }) => {
                assert!(detail.contains("filter checksum"), "{detail}");
                assert_eq!(offset, fo);
            }
            other => panic!("damaged filter read as {other:?}"),
        }
        let mut good = std::fs::read(&path).expect("read");
        good[fo as usize + 3] ^= 0x40;
        std::fs::write(&path, &good).expect("write");
        ctx.cache.remove(1, fo);
        ctx.cache.remove(1, io);
        assert!(
            matches!(get(&t, &key(5)), Err(Error::Corruption { .. })),
            "a damaged index is an error"
        );
        assert!(t.iter(true).is_err(), "an iterator needs the index");
    }

    /// Pinned (the default), the reader holds its index and filter and the cache holds
    /// neither.
    #[test]
    fn pinned_index_and_filter_stay_out_of_the_cache() {
        let dir = tempfile::tempdir().expect("dir");
        let ctx = ctx(dir.path(), false);
        let (t, io, fo) = table(&ctx);
        reads(&t, 9, "get");
        assert!(ctx.cache.get_meta::<Block>(1, io).is_none());
        assert!(ctx.cache.get_meta::<LoadedFilter>(1, fo).is_none());
        let pinned = ctx.env.stats.snapshot().table_reader_bytes;
        assert!(pinned > 1000 + std::mem::size_of::<super::TableReader>() as u64);
    }

    /// A compaction's iterator reads an evicted index again without putting it back in the
    /// cache (it reads the table once, just before deleting it, and must not evict what
    /// readers use); a reader's iterator caches it again.
    #[test]
    fn a_compaction_iterator_does_not_cache_an_evicted_index_again() {
        let dir = tempfile::tempdir().expect("dir");
        let ctx = ctx(dir.path(), true);
        let (t, io, _) = table(&ctx);
        reads(&t, 1, "get");
        ctx.cache.remove(1, io);
        let count = |mut it: super::TableIter| {
            it.seek_to_first().expect("seek");
            let mut n = 0;
            while it.valid() {
                n += 1;
                it.next().expect("next");
            }
            n
        };
        assert_eq!(count(t.iter(false).expect("iter")), 400);
        assert!(
            ctx.cache.get_meta::<Block>(1, io).is_none(),
            "compaction re-cached it"
        );
        assert_eq!(ctx.env.stats.snapshot().index_filter_cache_misses, 1);
        assert_eq!(count(t.iter(true).expect("iter")), 400);
        assert!(
            ctx.cache.get_meta::<Block>(1, io).is_some(),
            "a reader caches it"
        );
        assert_eq!(ctx.env.stats.snapshot().index_filter_cache_misses, 2);
        assert_eq!(count(t.iter(false).expect("iter")), 400);
        assert_eq!(
            ctx.env.stats.snapshot().index_filter_cache_misses,
            2,
            "a hit"
        );
    }

    /// Readers that miss the same evicted index together read it once: the others wait for
    /// that read instead of each reading and decoding it (held at a paused read, a reader
    /// without this made every thread read).
    #[test]
    fn readers_that_miss_an_index_together_read_it_once() {
        use crate::fs::fault::{FaultFs, OpKind};
        use crate::fs::{Env, FileSystem};
        let fault = FaultFs::new(7);
        fault
            .create_dir_all(std::path::Path::new("/db"))
            .expect("dir");
        let ctx = Arc::new(TableCtx {
            env: Env {
                fs: fault.as_dyn(),
                stats: Arc::default(),
                direct_reads: false,
                mmap_reads: false,
            },
            cache: BlockCache::new(1 << 20).holding_index_and_filter(true),
            dir: "/db".into(),
            open: super::OpenTables::default(),
            purge: super::purge::Purger::inline(),
        });
        let (t, io, _) = table(&ctx);
        // Opened (footer, index and filter read) before the readers start.
        reads(&t, 1, "get");
        ctx.cache.remove(1, io);
        let name = t
            .path()
            .file_name()
            .expect("name")
            .to_string_lossy()
            .to_string();
        let gate = fault.pause(OpKind::Read, &name);
        let readers: Vec<_> = (0..4u32)
            .map(|i| {
                let t = t.clone();
                std::thread::spawn(move || get(&t, &key(i * 50)))
            })
            .collect();
        gate.wait_until_held(std::time::Duration::from_secs(120));
        // Give the other readers time to reach the read too, were they to read.
        std::thread::sleep(std::time::Duration::from_millis(200));
        let held = gate.waiting();
        gate.open();
        for (i, r) in readers.into_iter().enumerate() {
            let got = r.join().expect("reader");
            let want = Lookup::Value(key(i as u32 * 50).into_bytes());
            assert_eq!(got.expect("get"), want);
        }
        assert_eq!(held, 1, "readers held at the index read");
        assert_eq!(ctx.env.stats.snapshot().index_filter_cache_misses, 1);
    }

    /// An index larger than the cache would admit stays pinned by its table instead of being
    /// refused by the cache and read again on every use.
    #[test]
    fn an_index_too_large_for_the_cache_stays_pinned() {
        let dir = tempfile::tempdir().expect("dir");
        let ctx = ctx_with(
            dir.path(),
            BlockCache::new(16 << 10).holding_index_and_filter(true),
        );
        // 16 KiB: one shard on any machine (too few items for more), so ≈ 14.7 KB at most;
        // this index weighs ≈ 40 KB, the filter ≈ 10 KB.
        let (t, io, fo) = table_of(&ctx, 8000);
        for i in (0..8000).step_by(11) {
            let want = Lookup::Value(key(i).into_bytes());
            assert_eq!(get(&t, &key(i)).expect("get"), want);
        }
        assert!(
            ctx.cache.get_meta::<Block>(1, io).is_none(),
            "too large to cache"
        );
        assert!(
            ctx.cache.get_meta::<LoadedFilter>(1, fo).is_some(),
            "the filter fits"
        );
        let s = ctx.env.stats.snapshot();
        assert_eq!(s.index_filter_cache_misses, 0, "never read again");
        let reader_size = std::mem::size_of::<super::TableReader>() as u64;
        let max = ctx.cache.max_item_bytes() as u64;
        assert!(
            s.table_reader_bytes > reader_size + max,
            "{}",
            s.table_reader_bytes
        );
    }

    /// A table deleted after the open-table bound closed its reader still takes its index
    /// and filter out of the cache (rather than leaving them there until evicted).
    #[test]
    fn a_deleted_table_leaves_the_cache_even_when_closed() {
        let dir = tempfile::tempdir().expect("dir");
        let ctx = ctx(dir.path(), true);
        let (t, io, fo) = table(&ctx);
        reads(&t, 3, "get");
        t.close();
        assert!(
            ctx.cache.get_meta::<Block>(1, io).is_some(),
            "kept for a reopen"
        );
        reads(&t, 4, "reopened");
        assert_eq!(ctx.env.stats.snapshot().index_filter_cache_misses, 0);
        t.close();
        let path = t.path();
        t.mark_obsolete();
        drop(t);
        assert!(!path.exists(), "deleted");
        assert!(ctx.cache.get_meta::<Block>(1, io).is_none());
        assert!(ctx.cache.get_meta::<LoadedFilter>(1, fo).is_none());
    }
}
