//! Reading a sorted table: the footer, the index and filter (held or cached), point lookups
//! and the table iterator.

use std::cmp::Ordering;
use std::path::Path;
use std::sync::atomic::Ordering as AtOrd;
use std::sync::Arc;

use crate::cache::{BlockCache, MetaItem};
use crate::coding::{crc, get_u32, get_u64};
use crate::error::{Error, Result};
use crate::filter::bloom;
use crate::fs::{CountedReader, Env};
use crate::iter::InternalIter;
use crate::key::{self, cmp_ikey, ValueKind};
use crate::memtable::Lookup;
use crate::stats::ReadKind;
use block::{Block, BlockCursor, DataBlock};
use sep_index::TableIndex;

use super::*;

/// Where an open sorted table keeps its index block or its Bloom filter (`P`: how a pinned
/// one is held; both inline, as before the option existed, so that a get on the default path
/// follows no extra pointer).
pub(crate) enum Slot<P> {
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
pub(crate) trait MetaBlock: MetaItem {
    /// Reads, checks and decodes it at `(offset, size)` of the table.
    fn load(file: &CountedReader, at: (u64, usize)) -> Result<Self>;
    /// Heap bytes held, as the cache weighs it.
    fn weight(&self) -> usize;
}

impl MetaBlock for TableIndex {
    fn load(file: &CountedReader, at: (u64, usize)) -> Result<Self> {
        load_index(file, at)
    }
    fn weight(&self) -> usize {
        TableIndex::weight(self)
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
pub(crate) enum Held<'a, T> {
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
    /// Format version ([`MIN_VERSION`]..=[`VERSION`]).
    pub(crate) version: u32,
}

impl Footer {
    /// Reads and checks the footer of `file`: magic, checksum, version, and block handles
    /// inside the file.
    pub(crate) fn read(file: &CountedReader) -> Result<Footer> {
        Self::read_at(file, file.len())
    }

    /// [`Footer::read`] of a table embedded in `file` that ends at offset `len` (a
    /// `lightweight` DTable's segment).
    pub(crate) fn read_at(file: &CountedReader, len: u64) -> Result<Footer> {
        let path = file.path();
        if len > file.len() {
            return Err(Error::corruption(
                path,
                file.len(),
                format!("table ends at {len}, past the end of the file"),
            ));
        }
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
        if !(MIN_VERSION..=VERSION).contains(&version) {
            return Err(corrupt(
                foot_off + 32,
                &format!(
                    "unsupported table version {version} (this build reads {MIN_VERSION} to {VERSION})"
                ),
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
            version,
        })
    }
}

/// An open sorted table: index and filter pinned in memory (or in the block cache), data
/// blocks through the cache.
pub struct TableReader {
    file: CountedReader,
    file_no: u64,
    index: Slot<TableIndex>,
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
    pub(crate) fn from_file(
        env: &Env,
        file: CountedReader,
        file_no: u64,
        cache: BlockCache,
    ) -> Result<TableReader> {
        let end = file.len();
        Self::from_file_at(env, file, file_no, cache, end, true)
    }

    /// [`TableReader::from_file`] of a table embedded in `file` ending at offset `end`;
    /// `own_file`: whether it counts as an open file in `Stats::open_table_files` (the
    /// segments of one `lightweight` DTable share their file, which counts once).
    pub(crate) fn from_file_at(
        env: &Env,
        file: CountedReader,
        file_no: u64,
        cache: BlockCache,
        end: u64,
        own_file: bool,
    ) -> Result<TableReader> {
        let Footer { index, filter, .. } = Footer::read_at(&file, end)?;
        let (index, index_bytes) = Slot::open::<TableIndex>(&file, file_no, &cache, index)?;
        let (filter, filter_bytes) =
            Slot::open::<bloom::LoadedFilter>(&file, file_no, &cache, filter)?;
        let bytes = index_bytes + filter_bytes + std::mem::size_of::<TableReader>();
        let pinned = if own_file {
            crate::stats::Pinned::new(env.stats.clone(), bytes)
        } else {
            crate::stats::Pinned::heap(env.stats.clone(), bytes)
        };
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

    /// The index.
    fn index(&self) -> Result<Held<'_, TableIndex>> {
        self.held(&self.index)
    }

    /// The index an iterator keeps: `None` when the reader pins it (the iterator holds the
    /// reader), else the cached index, held for the iterator's life; an evicted one is read
    /// again and cached only when `fill_cache` (not for compactions).
    fn iter_index(&self, fill_cache: bool) -> Result<Option<Arc<TableIndex>>> {
        match &self.index {
            Slot::Pinned(_) => Ok(None),
            Slot::Cached(off, size) => self.cached_or_read(*off, *size, fill_cache).map(Some),
        }
    }

    /// The pinned index ([`TableReader::iter_index`] gave `None`); empty for a cached one,
    /// which an iterator never asks for here.
    fn pinned_index(&self) -> &TableIndex {
        /// What an iterator gets in the case that cannot arise, instead of a panic.
        static EMPTY_INDEX: TableIndex = TableIndex::EMPTY;
        match &self.index {
            Slot::Pinned(b) => b,
            Slot::Cached(..) => &EMPTY_INDEX,
        }
    }

    /// The Bloom filter.
    fn filter(&self) -> Result<Held<'_, bloom::LoadedFilter>> {
        self.held(&self.filter)
    }

    /// The (offset, size) of data block `i` of `index`.
    fn handle(&self, index: &TableIndex, i: usize) -> Result<(u64, usize)> {
        index.handle(i).ok_or_else(|| {
            Error::corruption(
                self.file.path(),
                0,
                format!("no data block {i} in the index"),
            )
        })
    }

    /// Drops this table's blocks from the block cache when they were decoded from its memory
    /// map: each such block holds the whole file's map, so a table deleted with blocks still
    /// cached would keep its inode, and all of its disk space, until they were evicted (found
    /// in review: after a read phase, a write-only phase kept every compacted-away table).
    /// A deleted table's cached index and filter are dropped too (`deleted`), to free their
    /// share of the budget at once; a table closed by the open-table bound keeps them for its
    /// reopen.
    pub(crate) fn evict_mapped_blocks(&self, deleted: bool) {
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
                        .get_meta::<TableIndex>(self.file_no, *off)
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
    pub(crate) fn cached_offsets(&self) -> [Option<u64>; 2] {
        [self.index.cached_at(), self.filter.cached_at()]
    }

    /// Reads data block `i` of `index`; `fill_cache` false for compaction reads.
    fn block(&self, index: &TableIndex, i: usize, fill_cache: bool) -> Result<Arc<DataBlock>> {
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
    fn cursor(&self, index: &TableIndex, i: usize, fill_cache: bool) -> Result<(BlockCursor, u64)> {
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
    pub(crate) fn prefetch_filter(&self, h: u64) {
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
    pub(crate) fn get_admitted(&self, user_key: &[u8], seq: u64) -> Result<Lookup> {
        // Inline for short keys: no heap allocation per table probed.
        let lk = key::InternalKey::new(user_key, seq, ValueKind::Put);
        let lk = lk.as_slice();
        let index = self.index()?;
        let bi = index.lower_bound_ikey(lk);
        if bi >= index.len() {
            return Ok(Lookup::Absent);
        }
        let (mut c, off) = self.cursor(&index, bi, true)?;
        c.seek(lk, cmp_ikey).map_err(|e| self.cursor_err(off, e))?;
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

    /// Every data block's size with the user key of its index separator (≥ its last entry's
    /// user key, < the next block's first; the last block's is its last entry's), in order,
    /// from the index alone (no data block read): how a `lightweight` compaction bounds the
    /// bytes a victim sends to each target before writing any (a block's keys lie between
    /// the previous block's separator and its own).
    pub fn block_sizes(&self) -> Result<Vec<(Vec<u8>, u64)>> {
        let index = self.index()?;
        let mut out = Vec::with_capacity(index.len());
        for i in 0..index.len() {
            let (_, size) = self.handle(&index, i)?;
            out.push((key::user_key(&index.key(i)).to_vec(), size as u64));
        }
        Ok(out)
    }
}

/// Reads, checks and decodes the index block at `(offset, size)` of a table (either
/// version's, told apart by its block type).
pub(crate) fn load_index(file: &CountedReader, (off, size): (u64, usize)) -> Result<TableIndex> {
    let corrupt = |(o, d): (usize, String)| Error::corruption(file.path(), off + o as u64, d);
    let raw = file.read(off, size, ReadKind::Metadata)?;
    let block = Block::decode(raw).map_err(corrupt)?;
    TableIndex::from_block(&block).map_err(corrupt)
}

/// Reads and checks the Bloom filter at `(offset, size)` of a table (size ≥ 4, its checksum
/// included).
pub(crate) fn load_filter(
    file: &CountedReader,
    (off, size): (u64, usize),
) -> Result<bloom::LoadedFilter> {
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
    index: Option<Arc<TableIndex>>,
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
    fn index(&self) -> &TableIndex {
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
