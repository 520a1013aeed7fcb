//! The `semisorted` layout's table (SlimDB §3.1, §5.2): fixed-size data blocks in semi-sorted
//! order, values too large for a block in a blob area after them, and the compact three-level
//! index ([`crate::index`]) instead of an index block of keys and offsets: block `b` starts at
//! `b × block_size`, so no offset is stored. Byte layout: docs/format.md, "Semi-sorted table".
//!
//! Entries are ordered by the keyed hash of the key's prefix, then that of its suffix, then the
//! user key, then the trailer descending (newest version first): [`SemiKey`]. The hashes are
//! the database's ([`hashes`]); a table does not store its hash key, so only the layout (which
//! holds it) can check that order or look keys up.

use std::cmp::Ordering;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering as AtOrd;
use std::sync::Arc;

use crate::cache::{BlockCache, CheckedBytes, CheckedMapped};

use crate::coding::{crc, get_u32, get_u64, put_u32, put_u64, put_varint, Reader};
use crate::error::{Error, Result};
use crate::filter::cuckoo::{key_hash, split_hashes};
use crate::fs::{CountedReader, CountedWriter, Env};
use crate::hint::prefetch;
use crate::index::{BlockIndex, IndexBuilder};
use crate::key::{self, ValueKind};
use crate::memtable::Lookup;
use crate::stats::ReadKind;
use crate::table::{TableFile, TableMeta};
use crate::table_format::{Description, EntryVisitor, TableFormat, Verified};

/// The manifest's format code of a semi-sorted table.
pub const FORMAT_SEMISORTED: u8 = 2;
/// File name extension.
pub const EXT: &str = "sem";
/// The format version the footer records.
pub const FORMAT_VERSION: u32 = 1;
/// The footer's last eight bytes.
pub const MAGIC: u64 = 0x5345_4d49_5352_5431; // "SEMISRT1"
/// Footer length.
pub const FOOTER_SIZE: usize = 56;
/// Smallest and largest block sizes accepted.
pub const MIN_BLOCK_SIZE: usize = 256;
/// Largest block size (the entry count is a `u16`, blocks are addressed by `u32`).
pub const MAX_BLOCK_SIZE: usize = 1 << 20;
/// Bytes of a block that are not entries: the entry count and the checksum.
const BLOCK_OVERHEAD: usize = 2 + 4;

/// Entry tags (docs/format.md).
const TAG_INLINE: u8 = 0;
const TAG_BLOB_VALUE: u8 = 1;
const TAG_BLOB_ENTRY: u8 = 2;

/// The semi-sorted table in the format registry.
pub const SEMISORTED: TableFormat = TableFormat {
    name: "semi-sorted table",
    code: Some(FORMAT_SEMISORTED),
    ext: EXT,
    verify: verify_table,
    for_each: Some(for_each_entry),
    describe: describe_table,
    fuzz_target: Some("semisorted_table"),
};

/// The keyed hashes of a key's prefix (its first `prefix_len` bytes) and of its suffix: the
/// layout's order. Both are [`key_hash`] (SipHash-1-3 with the database's hash key); the
/// level filters hash a key as [`split_hash`](crate::filter::cuckoo::split_hash) of the two.
pub fn hashes(hash_key: &[u8; 16], prefix_len: usize, user_key: &[u8]) -> (u64, u64) {
    split_hashes(hash_key, prefix_len, user_key)
}

/// A position in the layout's order: (prefix hash, suffix hash, user key, trailer descending).
#[derive(Debug, Clone, Copy)]
pub struct SemiKey<'a> {
    /// Hash of the prefix.
    pub ph: u64,
    /// Hash of the suffix.
    pub sh: u64,
    /// The user key.
    pub user_key: &'a [u8],
    /// `(seq << 8) | kind`.
    pub trailer: u64,
}

impl SemiKey<'_> {
    /// The layout's order.
    pub fn order(&self, o: &SemiKey<'_>) -> Ordering {
        (self.ph, self.sh, self.user_key)
            .cmp(&(o.ph, o.sh, o.user_key))
            .then_with(|| o.trailer.cmp(&self.trailer))
    }
}

/// One decoded entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Internal key (user key ‖ trailer).
    pub ikey: Vec<u8>,
    /// Value (empty for a tombstone).
    pub value: Vec<u8>,
}

/// Where an entry's bytes are, as a block holds it.
enum Stored<'a> {
    /// Key and value in the block.
    Inline { ikey: &'a [u8], value: &'a [u8] },
    /// Key in the block, value in the blob area.
    BlobValue {
        ikey: &'a [u8],
        offset: u64,
        len: u64,
    },
    /// Key and value in the blob area; the block keeps the trailer and a hash of the user key.
    BlobEntry {
        trailer: u64,
        key_hash: u64,
        offset: u64,
        len: u64,
    },
}

/// A data block's bytes: borrowed from the file's memory map, read, or from the block cache.
enum BlockBytes<'a> {
    Mapped(&'a [u8]),
    Read(Vec<u8>),
    Cached(Arc<CheckedBytes>),
}

impl std::ops::Deref for BlockBytes<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            BlockBytes::Mapped(m) => m,
            BlockBytes::Read(v) => v,
            BlockBytes::Cached(c) => &c.0,
        }
    }
}

/// The entries of one data block in order, each decoded and checked when reached; a damaged
/// entry is `Corruption` naming the file and its offset, and ends the walk.
struct BlockEntries<'a> {
    path: &'a Path,
    /// The block's offset in the file.
    off: u64,
    b: u32,
    r: Reader<'a>,
    i: usize,
    count: usize,
}

impl<'a> BlockEntries<'a> {
    fn decode(&mut self) -> Option<Stored<'a>> {
        let r = &mut self.r;
        let s = match r.u8()? {
            TAG_INLINE => Stored::Inline {
                ikey: r.slice()?,
                value: r.slice()?,
            },
            TAG_BLOB_VALUE => Stored::BlobValue {
                ikey: r.slice()?,
                offset: r.varint()?,
                len: r.varint()?,
            },
            TAG_BLOB_ENTRY => Stored::BlobEntry {
                trailer: r.u64()?,
                key_hash: r.u64()?,
                offset: r.varint()?,
                len: r.varint()?,
            },
            _ => return None,
        };
        match &s {
            Stored::Inline { ikey, .. } | Stored::BlobValue { ikey, .. }
                if !key::valid_ikey(ikey) =>
            {
                None
            }
            _ => Some(s),
        }
    }
}

impl<'a> Iterator for BlockEntries<'a> {
    type Item = Result<Stored<'a>>;

    fn next(&mut self) -> Option<Result<Stored<'a>>> {
        if self.i >= self.count {
            return None;
        }
        let at = self.off + 2 + self.r.pos() as u64;
        let i = self.i;
        match self.decode() {
            Some(s) => {
                self.i += 1;
                Some(Ok(s))
            }
            None => {
                // The walk ends at the first damaged entry.
                self.i = self.count;
                Some(Err(Error::corruption(
                    self.path,
                    at,
                    format!("entry {i} of block {}", self.b),
                )))
            }
        }
    }
}

/// Writes one table.
pub struct SemiTableBuilder {
    w: CountedWriter,
    file_no: u64,
    block_size: usize,
    hash_key: [u8; 16],
    index: IndexBuilder,
    block: Vec<u8>,
    block_count: u16,
    blocks: u32,
    blobs: Vec<u8>,
    /// The entry being encoded (reused).
    scratch: Vec<u8>,
    prev: Option<(u64, u64, Vec<u8>, u64)>,
    smallest: Vec<u8>,
    largest: Vec<u8>,
    entries: u64,
    min_seq: u64,
    max_seq: u64,
}

impl SemiTableBuilder {
    /// A builder writing to `w` (file `file_no`), with `block_size`-byte blocks.
    pub fn new(w: CountedWriter, file_no: u64, block_size: usize, hash_key: [u8; 16]) -> Self {
        let mut block = Vec::with_capacity(block_size);
        block.extend_from_slice(&[0, 0]);
        SemiTableBuilder {
            w,
            file_no,
            block_size,
            hash_key,
            index: IndexBuilder::new(),
            block,
            block_count: 0,
            blocks: 0,
            blobs: Vec::new(),
            scratch: Vec::new(),
            prev: None,
            smallest: Vec::new(),
            largest: Vec::new(),
            entries: 0,
            min_seq: u64::MAX,
            max_seq: 0,
        }
    }

    /// Bytes written or buffered so far.
    pub fn estimated_size(&self) -> u64 {
        u64::from(self.blocks) * self.block_size as u64
            + self.block.len() as u64
            + self.blobs.len() as u64
    }

    /// Entries added.
    pub fn entries(&self) -> u64 {
        self.entries
    }

    /// Largest inline entry: a quarter of a block's room, so that blocks stay full of small
    /// entries and one large value never leaves most of a block empty.
    fn inline_limit(&self) -> usize {
        (self.block_size - BLOCK_OVERHEAD) / 4
    }

    /// Adds the next entry, whose prefix and suffix hashes are `ph` and `sh`; entries come in
    /// [`SemiKey`] order.
    pub fn add(&mut self, ph: u64, sh: u64, ikey: &[u8], value: &[u8]) -> Result<()> {
        let p = key::parse(ikey);
        let t = p.trailer();
        if let Some((pph, psh, puk, pt)) = &self.prev {
            let prev = SemiKey {
                ph: *pph,
                sh: *psh,
                user_key: puk,
                trailer: *pt,
            };
            let cur = SemiKey {
                ph,
                sh,
                user_key: p.user_key,
                trailer: t,
            };
            if prev.order(&cur) != Ordering::Less {
                return Err(Error::InvalidArgument(format!(
                    "semi-sorted table {:06}: entries out of order",
                    self.file_no
                )));
            }
        }
        let mut enc = std::mem::take(&mut self.scratch);
        enc.clear();
        let limit = self.inline_limit();
        enc.push(TAG_INLINE);
        put_varint(&mut enc, ikey.len() as u64);
        enc.extend_from_slice(ikey);
        put_varint(&mut enc, value.len() as u64);
        enc.extend_from_slice(value);
        if enc.len() > limit {
            enc.clear();
            let offset = self.blobs.len() as u64;
            if 1 + 10 + ikey.len() + 20 <= limit {
                enc.push(TAG_BLOB_VALUE);
                put_varint(&mut enc, ikey.len() as u64);
                enc.extend_from_slice(ikey);
                self.blobs.extend_from_slice(value);
                let c = crc(value);
                put_u32(&mut self.blobs, c);
                put_varint(&mut enc, offset);
                put_varint(&mut enc, value.len() as u64);
            } else {
                enc.push(TAG_BLOB_ENTRY);
                put_u64(&mut enc, t);
                put_u64(&mut enc, key_hash(&self.hash_key, p.user_key));
                let start = self.blobs.len();
                put_varint(&mut self.blobs, ikey.len() as u64);
                self.blobs.extend_from_slice(ikey);
                self.blobs.extend_from_slice(value);
                let c = crc(self.blobs.get(start..).unwrap_or_default());
                let len = (self.blobs.len() - start) as u64;
                put_u32(&mut self.blobs, c);
                put_varint(&mut enc, offset);
                put_varint(&mut enc, len);
            }
        }
        if self.block.len() + enc.len() + 4 > self.block_size || self.block_count == u16::MAX {
            self.finish_block()?;
        }
        self.block.extend_from_slice(&enc);
        self.scratch = enc;
        self.block_count += 1;
        self.index.add(ph, sh, self.blocks)?;
        if self.entries == 0 {
            self.smallest = ikey.to_vec();
        }
        self.largest.clear();
        self.largest.extend_from_slice(ikey);
        self.entries += 1;
        self.min_seq = self.min_seq.min(p.seq);
        self.max_seq = self.max_seq.max(p.seq);
        match &mut self.prev {
            Some((a, b, k, tr)) => {
                *a = ph;
                *b = sh;
                k.clear();
                k.extend_from_slice(p.user_key);
                *tr = t;
            }
            None => self.prev = Some((ph, sh, p.user_key.to_vec(), t)),
        }
        Ok(())
    }

    fn finish_block(&mut self) -> Result<()> {
        if self.block_count == 0 {
            return Ok(());
        }
        if let Some(head) = self.block.get_mut(..2) {
            head.copy_from_slice(&self.block_count.to_le_bytes());
        }
        self.block.resize(self.block_size - 4, 0);
        let c = crc(&self.block);
        put_u32(&mut self.block, c);
        self.w.append(&self.block)?;
        self.blocks = self.blocks.checked_add(1).ok_or_else(|| {
            Error::InvalidArgument("semi-sorted table: more than 2^32 − 1 blocks".into())
        })?;
        self.block.clear();
        self.block.extend_from_slice(&[0, 0]);
        self.block_count = 0;
        Ok(())
    }

    /// Writes the blob area, the index and the footer, syncs, and returns the table's record.
    pub fn finish(mut self) -> Result<TableMeta> {
        self.finish_block()?;
        let blob_offset = u64::from(self.blocks) * self.block_size as u64;
        self.w.append(&self.blobs)?;
        let index = std::mem::take(&mut self.index).finish()?;
        let index_offset = blob_offset + self.blobs.len() as u64;
        self.w.append(&index)?;
        let mut f = Vec::with_capacity(FOOTER_SIZE);
        put_u64(&mut f, index_offset);
        put_u64(&mut f, index.len() as u64);
        put_u64(&mut f, blob_offset);
        put_u32(&mut f, self.blocks);
        put_u32(&mut f, self.block_size as u32);
        put_u64(&mut f, self.entries);
        put_u32(&mut f, FORMAT_VERSION);
        let c = crc(&f);
        put_u32(&mut f, c);
        put_u64(&mut f, MAGIC);
        self.w.append(&f)?;
        self.w.finish()?;
        Ok(TableMeta {
            file_no: self.file_no,
            size: self.w.len(),
            smallest: self.smallest,
            largest: self.largest,
            entries: self.entries,
            min_seq: if self.entries == 0 { 0 } else { self.min_seq },
            max_seq: self.max_seq,
            append: None,
        })
    }
}

/// The footer's fields.
#[derive(Debug, Clone, Copy)]
pub struct Footer {
    /// Where the index starts.
    pub index_offset: u64,
    /// Its length.
    pub index_len: u64,
    /// Where the blob area starts (the end of the data blocks).
    pub blob_offset: u64,
    /// Number of data blocks.
    pub blocks: u32,
    /// Block size.
    pub block_size: u32,
    /// Entries.
    pub entries: u64,
}

impl Footer {
    fn decode(path: &Path, len: u64, b: &[u8]) -> Result<Footer> {
        let at = len - FOOTER_SIZE as u64;
        let bad = |off: u64, what: &str| Error::corruption(path, at + off, what.to_string());
        if get_u64(b, 48) != Some(MAGIC) {
            return Err(bad(48, "not a semi-sorted table (bad magic)"));
        }
        if get_u32(b, 44) != b.get(..44).map(crc) {
            return Err(bad(44, "footer checksum mismatch"));
        }
        let version = get_u32(b, 40).unwrap_or(0);
        if version != FORMAT_VERSION {
            return Err(Error::corruption(
                path,
                at + 40,
                format!(
                    "semi-sorted table version {version}; this build reads version {FORMAT_VERSION}"
                ),
            ));
        }
        let f = Footer {
            index_offset: get_u64(b, 0).unwrap_or(0),
            index_len: get_u64(b, 8).unwrap_or(0),
            blob_offset: get_u64(b, 16).unwrap_or(0),
            blocks: get_u32(b, 24).unwrap_or(0),
            block_size: get_u32(b, 28).unwrap_or(0),
            entries: get_u64(b, 32).unwrap_or(0),
        };
        let bs = f.block_size as usize;
        if !(MIN_BLOCK_SIZE..=MAX_BLOCK_SIZE).contains(&bs) {
            return Err(bad(28, "block size out of range"));
        }
        if u64::from(f.blocks) * u64::from(f.block_size) != f.blob_offset {
            return Err(bad(16, "blob area does not start after the data blocks"));
        }
        let index_end = f.index_offset.checked_add(f.index_len);
        if f.index_offset < f.blob_offset || index_end != Some(at) {
            return Err(bad(0, "index does not end at the footer"));
        }
        Ok(f)
    }
}

/// An open semi-sorted table: the file, its footer and its decoded index.
pub struct SemiReader {
    file: CountedReader,
    footer: Footer,
    index: Option<BlockIndex>,
    /// The block cache and this table's file number, when lookups and scans keep the blocks
    /// they read there ([`SemiReader::cached`]).
    cache: Option<(BlockCache, u64)>,
}

/// An index as a lookup holds it: pinned in the reader, or read for this lookup.
enum Held<'a> {
    Pinned(&'a BlockIndex),
    Read(Box<BlockIndex>),
}

impl std::ops::Deref for Held<'_> {
    type Target = BlockIndex;
    fn deref(&self) -> &BlockIndex {
        match self {
            Held::Pinned(i) => i,
            Held::Read(i) => i,
        }
    }
}

impl SemiReader {
    /// Opens a table: reads the footer and, when `pin_index`, the index (counted as `kind`),
    /// kept decoded; otherwise each lookup reads and decodes it (one metadata read).
    pub fn open(file: CountedReader, kind: ReadKind, pin_index: bool) -> Result<SemiReader> {
        let len = file.len();
        if len < FOOTER_SIZE as u64 {
            return Err(Error::corruption(
                file.path(),
                0,
                format!("file of {len} bytes is too short for a semi-sorted table"),
            ));
        }
        let fb = file.read(len - FOOTER_SIZE as u64, FOOTER_SIZE, kind)?;
        let footer = Footer::decode(file.path(), len, &fb)?;
        let mut r = SemiReader {
            file,
            footer,
            index: None,
            cache: None,
        };
        if pin_index {
            r.index = Some(r.read_index(kind)?);
        }
        Ok(r)
    }

    /// The reader with lookups' and scans' blocks (reads of [`ReadKind::Data`]) kept in
    /// `cache` under `file_no`, as sorted tables keep theirs: a hit costs no read and no
    /// checksum.
    pub fn cached(mut self, cache: BlockCache, file_no: u64) -> SemiReader {
        self.cache = cache.enabled().then_some((cache, file_no));
        self
    }

    /// Reads and decodes the index, checking it against the footer.
    fn read_index(&self, kind: ReadKind) -> Result<BlockIndex> {
        let (file, footer) = (&self.file, &self.footer);
        let index_len = usize::try_from(footer.index_len)
            .map_err(|_| Error::corruption(file.path(), footer.index_offset, "index too large"))?;
        let bytes = file.read(footer.index_offset, index_len, kind)?;
        let index = BlockIndex::decode(&bytes, file.path(), footer.index_offset)?;
        if index.num_blocks() != footer.blocks || index.num_entries() != footer.entries {
            return Err(Error::corruption(
                file.path(),
                footer.index_offset,
                format!(
                    "index covers {} blocks and {} entries, the footer says {} and {}",
                    index.num_blocks(),
                    index.num_entries(),
                    footer.blocks,
                    footer.entries
                ),
            ));
        }
        Ok(index)
    }

    /// The pinned index, or the index read now.
    fn index_for(&self, kind: ReadKind) -> Result<Held<'_>> {
        Ok(match &self.index {
            Some(i) => Held::Pinned(i),
            None => Held::Read(Box::new(self.read_index(kind)?)),
        })
    }

    /// The footer.
    pub fn footer(&self) -> &Footer {
        &self.footer
    }

    /// The index, when pinned.
    pub fn pinned_index(&self) -> Option<&BlockIndex> {
        self.index.as_ref()
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        self.file.path()
    }

    /// Heap bytes of what an open table pins: the decoded index.
    pub fn memory_bytes(&self) -> usize {
        self.index.as_ref().map_or(0, |i| i.heap_bytes().total())
            + std::mem::size_of::<SemiReader>()
    }

    /// Data block `b`, checksum checked, and whether it was read from the file (not found in
    /// the block cache): for a lookup or scan of a cached reader, a block found in the cache
    /// (a mapped block's mark, or the bytes of one read into a buffer); else a slice of the
    /// file's memory map when it has one (no copy), else read into a buffer. A block checked
    /// now goes into the cache: a mapped one as a [`CheckedMapped`] mark, a read one as its
    /// bytes.
    fn read_block(&self, b: u32, kind: ReadKind) -> Result<(BlockBytes<'_>, bool)> {
        let bs = self.footer.block_size as usize;
        let off = u64::from(b) * bs as u64;
        let cache = self.cache.as_ref().filter(|_| kind == ReadKind::Data);
        // The block in the file's map (bounds checked against the map, not counted as a read).
        let in_map = self.file.map().and_then(|m| {
            let at = usize::try_from(off).ok()?;
            m.get(at..at.checked_add(bs)?)
        });
        // Its first line and its checksum's (read first, then the body from the start) are
        // cache misses into gigabytes of tables: started now, they arrive while the block
        // cache is searched instead of one after the other after it.
        if let Some(m) = in_map {
            prefetch(m);
            if let Some(t) = m.get(bs - 4..) {
                prefetch(t);
            }
        }
        if let Some((c, file_no)) = cache {
            let hit = match in_map {
                Some(m) => c
                    .get_meta::<CheckedMapped>(*file_no, off)
                    .map(|_| BlockBytes::Mapped(m)),
                None => c
                    .get_meta::<CheckedBytes>(*file_no, off)
                    .map(BlockBytes::Cached),
            };
            if let Some(hit) = hit {
                self.file.io_stats().cache_hits.fetch_add(1, AtOrd::Relaxed);
                return Ok((hit, false));
            }
            self.file
                .io_stats()
                .cache_misses
                .fetch_add(1, AtOrd::Relaxed);
        }
        let block = match self.file.mapped(off, bs, kind)? {
            Some(m) => BlockBytes::Mapped(m),
            None => BlockBytes::Read(self.file.read(off, bs, kind)?),
        };
        let body = bs - 4;
        if get_u32(&block, body) != block.get(..body).map(crc) {
            return Err(Error::corruption(
                self.path(),
                off + body as u64,
                format!("data block {b} checksum mismatch"),
            ));
        }
        if let Some((c, file_no)) = cache {
            match &block {
                BlockBytes::Mapped(_) => {
                    c.insert_meta(*file_no, off, Arc::new(CheckedMapped(bs)));
                }
                _ => c.insert_meta(*file_no, off, Arc::new(CheckedBytes(Box::from(&*block)))),
            }
        }
        Ok((block, true))
    }

    /// The entries of block `b`, decoded one at a time as the caller walks them (a lookup
    /// stops at its key).
    fn entries_of<'a>(&'a self, block: &'a [u8], b: u32) -> BlockEntries<'a> {
        let body = block.len().saturating_sub(4);
        let head: [u8; 2] = block
            .get(..2)
            .and_then(|h| h.try_into().ok())
            .unwrap_or([0, 0]);
        BlockEntries {
            path: self.path(),
            off: u64::from(b) * u64::from(self.footer.block_size),
            b,
            r: Reader::new(block.get(2..body).unwrap_or_default()),
            i: 0,
            count: usize::from(u16::from_le_bytes(head)),
        }
    }

    /// Reads `len` bytes of the blob area at `offset` and checks their checksum.
    fn read_blob(&self, offset: u64, len: u64, kind: ReadKind) -> Result<Vec<u8>> {
        let f = &self.footer;
        let start = f.blob_offset.checked_add(offset);
        let end = start
            .and_then(|s| s.checked_add(len))
            .and_then(|e| e.checked_add(4));
        let (Some(start), Some(end)) = (start, end) else {
            return Err(Error::corruption(
                self.path(),
                f.blob_offset,
                "blob out of range",
            ));
        };
        if end > f.index_offset {
            return Err(Error::corruption(
                self.path(),
                start,
                "blob runs past the blob area",
            ));
        }
        let mut b = self.file.read(start, (len + 4) as usize, kind)?;
        let n = len as usize;
        if get_u32(&b, n) != b.get(..n).map(crc) {
            return Err(Error::corruption(
                self.path(),
                start + len,
                "blob checksum mismatch",
            ));
        }
        b.truncate(n);
        Ok(b)
    }

    /// The whole entry `s` (reading its blob if it has one).
    fn materialize(&self, s: &Stored<'_>, kind: ReadKind) -> Result<Entry> {
        Ok(match *s {
            Stored::Inline { ikey, value } => Entry {
                ikey: ikey.to_vec(),
                value: value.to_vec(),
            },
            Stored::BlobValue { ikey, offset, len } => Entry {
                ikey: ikey.to_vec(),
                value: self.read_blob(offset, len, kind)?,
            },
            Stored::BlobEntry {
                trailer,
                offset,
                len,
                ..
            } => {
                let blob = self.read_blob(offset, len, kind)?;
                let mut r = Reader::new(&blob);
                let at = self.footer.blob_offset + offset;
                let ikey = r
                    .slice()
                    .filter(|k| key::valid_ikey(k))
                    .ok_or_else(|| Error::corruption(self.path(), at, "blob entry key"))?;
                if key::parse(ikey).trailer() != trailer {
                    return Err(Error::corruption(
                        self.path(),
                        at,
                        "blob entry does not match its block entry",
                    ));
                }
                Entry {
                    ikey: ikey.to_vec(),
                    value: blob.get(r.pos()..).unwrap_or_default().to_vec(),
                }
            }
        })
    }

    /// The newest version of `user_key` (with hashes `ph`, `sh`) visible at `seq`, reading the
    /// blocks the index names (one, or two when versions straddle a boundary). `hash_key` is
    /// the database's, for keys stored out of line.
    pub fn get(
        &self,
        hash_key: &[u8; 16],
        user_key: &[u8],
        (ph, sh): (u64, u64),
        seq: u64,
        blocks_read: &mut u64,
    ) -> Result<Lookup> {
        let index = self.index_for(ReadKind::Metadata)?;
        let Some(blocks) = index.locate(ph, sh) else {
            return Ok(Lookup::Absent);
        };
        let mut khash = None;
        for b in blocks {
            let (block, read) = self.read_block(b, ReadKind::Data)?;
            *blocks_read += u64::from(read);
            for s in self.entries_of(&block, b) {
                let s = s?;
                let (matches, trailer) = match &s {
                    Stored::Inline { ikey, .. } | Stored::BlobValue { ikey, .. } => {
                        let p = key::parse(ikey);
                        (p.user_key == user_key, p.trailer())
                    }
                    Stored::BlobEntry {
                        trailer,
                        key_hash: h,
                        ..
                    } => {
                        let kh = *khash.get_or_insert_with(|| key_hash(hash_key, user_key));
                        (*h == kh, *trailer)
                    }
                };
                if !matches || trailer >> 8 > seq {
                    continue;
                }
                let e = self.materialize(&s, ReadKind::Data)?;
                let p = key::parse(&e.ikey);
                if p.user_key != user_key {
                    continue;
                }
                return Ok(if p.kind == ValueKind::Delete as u8 {
                    Lookup::Deleted
                } else {
                    Lookup::Value(e.value)
                });
            }
        }
        Ok(Lookup::Absent)
    }

    /// Every entry of the prefix group whose prefix hash is `ph` and whose user key starts with
    /// `prefix` (entries of another prefix with the same hash are skipped), in table order.
    pub fn group(&self, ph: u64, prefix: &[u8], kind: ReadKind) -> Result<Vec<Entry>> {
        let mut out = Vec::new();
        let index = self.index_for(ReadKind::Metadata)?;
        for b in index.prefix_blocks(ph) {
            let (block, _) = self.read_block(b, kind)?;
            for s in self.entries_of(&block, b) {
                let e = self.materialize(&s?, kind)?;
                if key::user_key(&e.ikey).starts_with(prefix) {
                    out.push(e);
                }
            }
        }
        Ok(out)
    }

    /// Calls `f` with every entry in table order, reading each block once (counted as `kind`).
    pub fn for_each(&self, kind: ReadKind, mut f: impl FnMut(Entry) -> Result<()>) -> Result<()> {
        for b in 0..self.footer.blocks {
            let (block, _) = self.read_block(b, kind)?;
            for s in self.entries_of(&block, b) {
                f(self.materialize(&s?, kind)?)?;
            }
        }
        Ok(())
    }

    /// Entries of block `b`, in table order.
    pub fn block_entries(&self, b: u32, kind: ReadKind) -> Result<Vec<Entry>> {
        let (block, _) = self.read_block(b, kind)?;
        self.entries_of(&block, b)
            .map(|s| self.materialize(&s?, kind))
            .collect()
    }
}

/// Opens the table `f` names for a tool (reads counted as compaction reads).
fn open_for_tool(f: &TableFile) -> Result<SemiReader> {
    SemiReader::open(f.open_file()?, ReadKind::Compaction, true)
}

/// Reads every block and blob of the table, checking checksums, and compares the entry count
/// with the manifest's.
fn verify_table(f: &TableFile, out: &mut Verified) -> Result<()> {
    let r = open_for_tool(f)?;
    out.blocks += u64::from(r.footer.blocks);
    let mut n = 0u64;
    r.for_each(ReadKind::Compaction, |_| {
        n += 1;
        Ok(())
    })?;
    out.entries += n;
    if n != r.footer.entries || (f.meta.entries != 0 && n != f.meta.entries) {
        out.problems.push(Error::corruption(
            f.path(),
            0,
            format!(
                "{n} entries, the footer says {} and the manifest {}",
                r.footer.entries, f.meta.entries
            ),
        ));
    }
    Ok(())
}

/// Every entry of the table in table order.
fn for_each_entry(f: &TableFile, visit: EntryVisitor<'_>) -> Result<()> {
    open_for_tool(f)?.for_each(ReadKind::Compaction, |e| visit(&e.ikey, &e.value))
}

/// The footer's counts and the index's.
fn describe_table(env: &Env, path: &Path) -> Result<Description> {
    let file = env.open(path, false)?;
    let size = file.len();
    let r = SemiReader::open(file, ReadKind::Metadata, true)?;
    let index = r.read_index(ReadKind::Metadata)?;
    let heap = index.heap_bytes();
    Ok(Description {
        format: SEMISORTED.name,
        version: FORMAT_VERSION,
        size,
        facts: vec![
            ("data_blocks", u64::from(r.footer.blocks)),
            ("block_size", u64::from(r.footer.block_size)),
            ("entries", r.footer.entries),
            ("prefix_groups", u64::from(index.num_groups())),
            ("blob_bytes", r.footer.index_offset - r.footer.blob_offset),
            ("index_bytes", r.footer.index_len),
            ("index_heap_bytes", heap.total() as u64),
        ],
    })
}

/// The path of table `file_no` in `dir`.
pub fn path(dir: &Path, file_no: u64) -> PathBuf {
    dir.join(format!("{file_no:06}.{EXT}"))
}
