//! Blocks of a sorted table: prefix-compressed entries with restart points, a type byte and a
//! masked CRC32C trailer. A block is decoded once when it is read and kept decoded in the cache.
//! A block of internal keys ([`TYPE_IKEY`]) stores each key's trailer as a varint tag after the
//! entry header instead of 8 fixed bytes; readers rebuild the internal key. A version-2
//! table's index block ([`TYPE_SEPARATORS`]) is read as a [`Block`] and turned into a
//! [`super::sep_index::TableIndex`].

use std::cmp::Ordering;

use crate::coding::{crc, get_u32, put_u32, put_varint, Reader};

/// Bytes after a block's contents: type (1) + crc (4).
pub const TRAILER: usize = 5;
/// Block type byte: keys stored whole (prefix-compressed), values as they are.
pub const TYPE_PLAIN: u8 = 0;
/// Block type byte: internal keys, each stored as its user key (prefix-compressed against the
/// previous user key) plus a varint tag `(seq << 1) | kind` (every block current builds write;
/// type 0 blocks of internal keys come from older builds).
pub const TYPE_IKEY: u8 = 1;
/// Block type byte of a version-2 table's index block: keys are separators (user keys) stored
/// whole, values block sizes ([`super::sep_index`]; never a data block).
pub const TYPE_SEPARATORS: u8 = 2;

/// The tag of an internal-key trailer `(seq << 8) | kind` (kind 0 or 1).
pub(crate) fn tag_of(trailer: u64) -> u64 {
    ((trailer >> 8) << 1) | (trailer & 1)
}

/// The trailer of a tag, or `None` when its sequence number is out of range.
pub(crate) fn trailer_of(tag: u64) -> Option<u64> {
    let seq = tag >> 1;
    (seq <= crate::key::MAX_SEQ).then_some((seq << 8) | (tag & 1))
}

/// Builds one block.
pub struct BlockBuilder {
    buf: Vec<u8>,
    restarts: Vec<u32>,
    restart_interval: usize,
    counter: usize,
    last_key: Vec<u8>,
    entries: usize,
    /// Keys are internal keys, written as [`TYPE_IKEY`].
    ikeys: bool,
    /// The type byte written.
    ty: u8,
}

impl BlockBuilder {
    /// A builder of a [`TYPE_PLAIN`] block with a restart point every `restart_interval`
    /// entries.
    pub fn new(restart_interval: usize) -> Self {
        BlockBuilder {
            buf: Vec::with_capacity(4096 + 512),
            restarts: vec![0],
            restart_interval: restart_interval.max(1),
            counter: 0,
            last_key: Vec::new(),
            entries: 0,
            ikeys: false,
            ty: TYPE_PLAIN,
        }
    }
    /// A builder of a [`TYPE_IKEY`] block: every key added must be a well-formed internal
    /// key (`key::valid_ikey`; the table builder checks).
    pub fn for_internal_keys(restart_interval: usize) -> Self {
        BlockBuilder {
            ikeys: true,
            ty: TYPE_IKEY,
            ..Self::new(restart_interval)
        }
    }
    /// A builder of a [`TYPE_SEPARATORS`] index block: keys stored whole, a restart point at
    /// every entry (no prefix is shared, so decoding cannot grow past the block's bytes).
    pub fn for_separators() -> Self {
        BlockBuilder {
            ty: TYPE_SEPARATORS,
            ..Self::new(1)
        }
    }
    /// Appends an entry; keys must be added in increasing order.
    pub fn add(&mut self, key: &[u8], value: &[u8]) {
        // The part of the key stored with prefix compression, and the tag of an internal key.
        let (stored, tag) = if self.ikeys {
            debug_assert!(crate::key::valid_ikey(key));
            let p = crate::key::parse(key);
            (p.user_key, Some(tag_of(p.trailer())))
        } else {
            (key, None)
        };
        let last = match self.ikeys {
            true => self
                .last_key
                .get(..self.last_key.len().saturating_sub(8))
                .unwrap_or_default(),
            false => &self.last_key,
        };
        let mut shared = 0;
        if self.counter < self.restart_interval {
            shared = last.iter().zip(stored).take_while(|(a, b)| a == b).count();
        } else {
            self.restarts.push(self.buf.len() as u32);
            self.counter = 0;
        }
        put_varint(&mut self.buf, shared as u64);
        put_varint(&mut self.buf, (stored.len() - shared) as u64);
        put_varint(&mut self.buf, value.len() as u64);
        if let Some(t) = tag {
            put_varint(&mut self.buf, t);
        }
        self.buf
            .extend_from_slice(stored.get(shared..).unwrap_or_default());
        self.buf.extend_from_slice(value);
        self.last_key.clear();
        self.last_key.extend_from_slice(key);
        self.counter += 1;
        self.entries += 1;
    }
    /// Size of the block if finished now.
    pub fn estimated_size(&self) -> usize {
        self.buf.len() + self.restarts.len() * 4 + 4 + TRAILER
    }
    /// Whether no entry was added.
    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }
    /// The last key added.
    pub fn last_key(&self) -> &[u8] {
        &self.last_key
    }
    /// Finishes the block: contents + restart array + count + type + crc. Resets the builder.
    pub fn finish(&mut self) -> Vec<u8> {
        let mut out = std::mem::take(&mut self.buf);
        for r in &self.restarts {
            put_u32(&mut out, *r);
        }
        put_u32(&mut out, self.restarts.len() as u32);
        out.push(self.ty);
        let c = crc(&out);
        put_u32(&mut out, c);
        self.restarts = vec![0];
        self.counter = 0;
        self.last_key.clear();
        self.entries = 0;
        self.buf = Vec::with_capacity(4096 + 512);
        out
    }
}

/// Checks a block's crc, type byte and restart count; returns (end of the entries, number of
/// restart points, type byte).
fn verify_trailer(raw: &[u8]) -> Result<(usize, usize, u8), (usize, String)> {
    let n = raw.len();
    if n < TRAILER + 4 {
        return Err((0, format!("block of {n} bytes is too short")));
    }
    let body_end = n - 4;
    let stored = get_u32(raw, body_end).ok_or((body_end, "truncated crc".to_string()))?;
    if crc(raw.get(..body_end).unwrap_or_default()) != stored {
        return Err((body_end, "block checksum mismatch".into()));
    }
    let ty = raw.get(body_end - 1).copied().unwrap_or(0xff);
    if ty != TYPE_PLAIN && ty != TYPE_IKEY && ty != TYPE_SEPARATORS {
        return Err((body_end - 1, format!("unknown block type {ty}")));
    }
    let contents_end = body_end - 1;
    let nr = get_u32(raw, contents_end - 4).ok_or((0, "truncated".to_string()))? as usize;
    let restarts_bytes = nr
        .checked_mul(4)
        .and_then(|b| b.checked_add(4))
        .filter(|&b| b <= contents_end && nr >= 1)
        .ok_or((contents_end - 4, format!("bad restart count {nr}")))?;
    Ok((contents_end - restarts_bytes, nr, ty))
}

/// Reads an entry header at `r`: `(shared, non_shared, value length, trailer)`, the trailer
/// being present in a [`TYPE_IKEY`] block.
#[allow(clippy::type_complexity)]
fn entry_header(r: &mut Reader<'_>, ikeys: bool) -> Option<(usize, usize, usize, Option<u64>)> {
    let shared = r.len()?;
    let non_shared = r.len()?;
    let vlen = r.len()?;
    let trailer = match ikeys {
        true => Some(trailer_of(r.varint()?)?),
        false => None,
    };
    Some((shared, non_shared, vlen, trailer))
}

/// A block fully decoded: every key materialized, values referencing the raw contents (how an
/// index block is read before it becomes a [`super::sep_index::TableIndex`]).
#[derive(Debug)]
pub struct Block {
    data: Vec<u8>,
    keys: Vec<u8>,
    ents: Vec<[u32; 4]>,
    ty: u8,
}

impl Block {
    /// Verifies the trailer and decodes all entries. Errors are `(offset within block, detail)`.
    pub fn decode(raw: Vec<u8>) -> Result<Block, (usize, String)> {
        let (entries_end, _, ty) = verify_trailer(&raw)?;
        let ikeys = ty == TYPE_IKEY;
        let mut keys: Vec<u8> = Vec::with_capacity(entries_end);
        let mut ents = Vec::new();
        let mut r = Reader::new(raw.get(..entries_end).unwrap_or_default());
        let mut last: (usize, usize) = (0, 0);
        while !r.is_empty() {
            let at = r.pos();
            let bad = |d: &str| (at, d.to_string());
            let (shared, non_shared, vlen, trailer) =
                entry_header(&mut r, ikeys).ok_or_else(|| bad("bad entry header"))?;
            // The previous key's part that prefixes can share (its user key in a TYPE_IKEY block).
            let prev = last.1.saturating_sub(if ikeys { 8 } else { 0 });
            if shared > prev {
                return Err(bad("shared prefix longer than previous key"));
            }
            let delta = r
                .bytes(non_shared)
                .ok_or_else(|| bad("key runs past block"))?;
            let voff = r.pos();
            r.bytes(vlen).ok_or_else(|| bad("value runs past block"))?;
            // Shared prefixes let a few bytes repeat a long key: bound the decoded keys by the
            // block (index blocks are written without sharing, so they never come near), or a
            // crafted block of a megabyte could decode into gigabytes.
            let need = keys.len() + shared + non_shared + 8;
            if need > u32::MAX as usize || need > 16 * entries_end + 8 * (ents.len() + 1) {
                return Err(bad("decoded keys too large for the block"));
            }
            let koff = keys.len();
            keys.extend_from_within(last.0..last.0 + shared);
            keys.extend_from_slice(delta);
            if let Some(t) = trailer {
                keys.extend_from_slice(&t.to_le_bytes());
            }
            let klen = keys.len() - koff;
            ents.push([koff as u32, klen as u32, voff as u32, vlen as u32]);
            last = (koff, klen);
        }
        let mut data = raw;
        data.truncate(entries_end);
        Ok(Block {
            data,
            keys,
            ents,
            ty,
        })
    }

    /// The block's type byte ([`TYPE_PLAIN`], [`TYPE_IKEY`] or [`TYPE_SEPARATORS`]).
    pub fn block_type(&self) -> u8 {
        self.ty
    }
    /// Offset in the block of entry `i`'s value (0 if out of range), to name a bad entry.
    pub fn value_offset(&self, i: usize) -> usize {
        self.ents.get(i).map_or(0, |e| e[2] as usize)
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.ents.len()
    }
    /// Whether the block has no entries.
    pub fn is_empty(&self) -> bool {
        self.ents.is_empty()
    }
    /// Key of entry `i` (empty if out of range).
    pub fn key(&self, i: usize) -> &[u8] {
        self.ents
            .get(i)
            .and_then(|e| self.keys.get(e[0] as usize..(e[0] + e[1]) as usize))
            .unwrap_or_default()
    }
    /// Value of entry `i` (empty if out of range).
    pub fn value(&self, i: usize) -> &[u8] {
        self.ents
            .get(i)
            .and_then(|e| self.data.get(e[2] as usize..(e[2] + e[3]) as usize))
            .unwrap_or_default()
    }
    /// Index of the first entry whose key is >= `target` under `cmp` (== len if none).
    pub fn lower_bound(&self, target: &[u8], cmp: impl Fn(&[u8], &[u8]) -> Ordering) -> usize {
        let (mut lo, mut hi) = (0usize, self.ents.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            if cmp(self.key(mid), target) == Ordering::Less {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_with_restarts() {
        let mut b = BlockBuilder::new(4);
        let keys: Vec<Vec<u8>> = (0..50u32)
            .map(|i| format!("key{i:04}").into_bytes())
            .collect();
        for k in &keys {
            b.add(k, k);
        }
        let raw = b.finish();
        let blk = Block::decode(raw.clone()).expect("decodes");
        assert_eq!(blk.len(), 50);
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(blk.key(i), &k[..]);
            assert_eq!(blk.value(i), &k[..]);
        }
        assert_eq!(blk.lower_bound(b"key0010", |a, b| a.cmp(b)), 10);
        assert_eq!(blk.lower_bound(b"zzz", |a, b| a.cmp(b)), 50);
        // Every single-byte flip is detected.
        for i in 0..raw.len() {
            let mut bad = raw.clone();
            bad[i] ^= 0x40;
            assert!(Block::decode(bad).is_err(), "flip at {i} undetected");
        }
    }
}

/// A data block kept as read: entries are decoded on demand by a [`BlockCursor`], so a block
/// fetched for one lookup or one seek costs a checksum and a restart-array parse, not a decode
/// of every entry.
#[derive(Debug)]
pub struct DataBlock {
    data: BlockBytes,
    restarts: Vec<u32>,
    /// A [`TYPE_IKEY`] block.
    ikeys: bool,
}

/// The bytes of a data block: read into memory, or a range of a memory-mapped table file.
#[derive(Debug)]
enum BlockBytes {
    Owned(Vec<u8>),
    Mapped(std::sync::Arc<memmap2::Mmap>, std::ops::Range<usize>),
}

impl std::ops::Deref for BlockBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            BlockBytes::Owned(v) => v,
            BlockBytes::Mapped(m, r) => m.get(r.clone()).unwrap_or_default(),
        }
    }
}

impl DataBlock {
    /// Verifies the trailer and the restart array. Errors are `(offset within block, detail)`.
    pub fn decode(mut raw: Vec<u8>) -> Result<DataBlock, (usize, String)> {
        let (entries_end, restarts, ikeys) = Self::check(&raw)?;
        raw.truncate(entries_end);
        Ok(DataBlock {
            data: BlockBytes::Owned(raw),
            restarts,
            ikeys,
        })
    }

    /// [`DataBlock::decode`] of bytes `range` of a mapped file, without copying them.
    pub fn decode_mapped(
        map: std::sync::Arc<memmap2::Mmap>,
        range: std::ops::Range<usize>,
    ) -> Result<DataBlock, (usize, String)> {
        let raw = map
            .get(range.clone())
            .ok_or_else(|| (0, "block past the end of the mapped file".to_string()))?;
        let (entries_end, restarts, ikeys) = Self::check(raw)?;
        Ok(DataBlock {
            data: BlockBytes::Mapped(map, range.start..range.start + entries_end),
            restarts,
            ikeys,
        })
    }

    /// Verifies the trailer and the restart array: (end of the entries, restarts, block type
    /// is [`TYPE_IKEY`]).
    fn check(raw: &[u8]) -> Result<(usize, Vec<u32>, bool), (usize, String)> {
        let (entries_end, nr, ty) = verify_trailer(raw)?;
        if ty == TYPE_SEPARATORS {
            return Err((
                raw.len() - TRAILER,
                "an index block where a data block belongs".into(),
            ));
        }
        let ikeys = ty == TYPE_IKEY;
        let mut restarts = Vec::with_capacity(nr);
        for i in 0..nr {
            let r = get_u32(raw, entries_end + 4 * i).unwrap_or(u32::MAX);
            let ok = (r as usize) < entries_end.max(1)
                && restarts.last().is_none_or(|&p: &u32| p < r)
                && (i > 0 || r == 0);
            if !ok {
                return Err((entries_end + 4 * i, format!("bad restart offset {r}")));
            }
            restarts.push(r);
        }
        Ok((entries_end, restarts, ikeys))
    }

    /// Memory held, for the cache's weigher.
    pub fn weight(&self) -> usize {
        self.data.len() + self.restarts.len() * 4 + 64
    }

    /// Parses the entry at `off`, rebuilding its key in `key` from the previous key. Returns
    /// (value offset, value length, next entry offset).
    fn parse(
        &self,
        off: usize,
        key: &mut Vec<u8>,
    ) -> Result<(usize, usize, usize), (usize, String)> {
        let mut r = Reader::new(self.data.get(off..).unwrap_or_default());
        let bad = |d: &str| (off, d.to_string());
        let (shared, non_shared, vlen, trailer) =
            entry_header(&mut r, self.ikeys).ok_or_else(|| bad("bad entry header"))?;
        // `key` holds the previous key (empty at a restart point); prefixes share its user key
        // in a TYPE_IKEY block.
        let prev = key.len().saturating_sub(if self.ikeys { 8 } else { 0 });
        if shared > prev {
            return Err(bad("shared prefix longer than previous key"));
        }
        let delta = r
            .bytes(non_shared)
            .ok_or_else(|| bad("key runs past block"))?;
        let voff = off + r.pos();
        r.bytes(vlen).ok_or_else(|| bad("value runs past block"))?;
        key.truncate(shared);
        key.extend_from_slice(delta);
        if let Some(t) = trailer {
            key.extend_from_slice(&t.to_le_bytes());
        }
        if key.len() < 8 {
            return Err(bad("entry key is not an internal key"));
        }
        Ok((voff, vlen, off + r.pos()))
    }

    fn restart(&self, i: usize) -> usize {
        self.restarts.get(i).map_or(0, |&r| r as usize)
    }
}

/// A position inside a [`DataBlock`].
pub struct BlockCursor {
    block: std::sync::Arc<DataBlock>,
    /// Offset of the current entry (== data.len() when invalid).
    off: usize,
    next: usize,
    key: Vec<u8>,
    val: (usize, usize),
}

/// A cursor error: (offset within block, detail).
pub type CursorError = (usize, String);

impl BlockCursor {
    /// An unpositioned cursor.
    pub fn new(block: std::sync::Arc<DataBlock>) -> Self {
        let end = block.data.len();
        BlockCursor {
            block,
            off: end,
            next: end,
            key: Vec::new(),
            val: (0, 0),
        }
    }
    /// Whether the cursor is on an entry.
    pub fn valid(&self) -> bool {
        self.off < self.block.data.len()
    }
    /// Current key.
    pub fn key(&self) -> &[u8] {
        &self.key
    }
    /// Current value.
    pub fn value(&self) -> &[u8] {
        self.block
            .data
            .get(self.val.0..self.val.0 + self.val.1)
            .unwrap_or_default()
    }
    fn invalidate(&mut self) {
        self.off = self.block.data.len();
        self.next = self.off;
    }
    fn load(&mut self, off: usize) -> Result<(), CursorError> {
        if off >= self.block.data.len() {
            self.invalidate();
            return Ok(());
        }
        // A failed parse leaves `key` half rebuilt: the cursor is then invalid, never on a
        // wrong key.
        let (voff, vlen, next) = match self.block.parse(off, &mut self.key) {
            Ok(p) => p,
            Err(e) => {
                self.invalidate();
                return Err(e);
            }
        };
        self.off = off;
        self.next = next;
        self.val = (voff, vlen);
        Ok(())
    }
    fn load_restart(&mut self, i: usize) -> Result<(), CursorError> {
        self.key.clear();
        self.load(self.block.restart(i))
    }
    /// Moves to the first entry.
    pub fn seek_to_first(&mut self) -> Result<(), CursorError> {
        self.load_restart(0)
    }
    /// Moves to the last entry.
    pub fn seek_to_last(&mut self) -> Result<(), CursorError> {
        self.load_restart(self.block.restarts.len().saturating_sub(1))?;
        while self.valid() && self.next < self.block.data.len() {
            self.load(self.next)?;
        }
        Ok(())
    }
    /// Advances. (Not `Iterator::next`: a cursor moves in place and can fail.)
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<(), CursorError> {
        if self.valid() {
            let n = self.next;
            self.load(n)?;
        }
        Ok(())
    }
    /// Steps back (re-scans from the previous restart point).
    pub fn prev(&mut self) -> Result<(), CursorError> {
        if !self.valid() {
            return Ok(());
        }
        let target = self.off;
        if target == 0 {
            self.invalidate();
            return Ok(());
        }
        let ri = self
            .block
            .restarts
            .partition_point(|&r| (r as usize) < target)
            .saturating_sub(1);
        self.load_restart(ri)?;
        while self.valid() && self.next < target {
            self.load(self.next)?;
        }
        Ok(())
    }
    /// Moves to the first entry whose key is >= `target` under `cmp`.
    pub fn seek(
        &mut self,
        target: &[u8],
        cmp: impl Fn(&[u8], &[u8]) -> Ordering,
    ) -> Result<(), CursorError> {
        // Last restart point whose key is < target.
        // The probes rebuild their keys in the cursor's own buffer (no allocation per seek);
        // `load_restart` below overwrites it.
        let (mut lo, mut hi) = (0usize, self.block.restarts.len());
        while hi - lo > 1 {
            let mid = (lo + hi) / 2;
            self.key.clear();
            if let Err(e) = self.block.parse(self.block.restart(mid), &mut self.key) {
                self.invalidate();
                return Err(e);
            }
            if cmp(&self.key, target) == Ordering::Less {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        self.load_restart(lo)?;
        while self.valid() && cmp(&self.key, target) == Ordering::Less {
            self.load(self.next)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod amplification_tests {
    use super::*;

    /// A block whose entries each repeat the whole previous key (4 bytes each on disk) is
    /// refused instead of decoding into ~1,700 times its size.
    #[test]
    fn an_index_block_that_decodes_far_larger_than_itself_is_refused() {
        let l = 64 * 1024usize;
        let mut raw = Vec::new();
        put_varint(&mut raw, 0);
        put_varint(&mut raw, l as u64);
        put_varint(&mut raw, 0);
        put_varint(&mut raw, 2);
        raw.extend(std::iter::repeat_n(b'k', l));
        for _ in 1..2000 {
            put_varint(&mut raw, l as u64);
            put_varint(&mut raw, 0);
            put_varint(&mut raw, 0);
            put_varint(&mut raw, 2);
        }
        put_u32(&mut raw, 0);
        put_u32(&mut raw, 1);
        raw.push(TYPE_IKEY);
        let c = crc(&raw);
        put_u32(&mut raw, c);
        match Block::decode(raw) {
            Err((_, d)) => assert!(d.contains("too large"), "{d}"),
            Ok(b) => panic!("decoded {} entries", b.len()),
        }
    }
}

#[cfg(test)]
mod cursor_tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn cursor_walks_both_ways_and_seeks() {
        let mut b = BlockBuilder::new(4);
        let keys: Vec<Vec<u8>> = (0..50u32)
            .map(|i| format!("key{i:04}xxxxx").into_bytes())
            .collect();
        for k in &keys {
            b.add(k, k);
        }
        let blk = Arc::new(DataBlock::decode(b.finish()).expect("decodes"));
        let mut c = BlockCursor::new(blk.clone());
        c.seek_to_first().unwrap();
        for k in &keys {
            assert_eq!(c.key(), &k[..]);
            assert_eq!(c.value(), &k[..]);
            c.next().unwrap();
        }
        assert!(!c.valid());
        c.seek_to_last().unwrap();
        for k in keys.iter().rev() {
            assert_eq!(c.key(), &k[..]);
            c.prev().unwrap();
        }
        assert!(!c.valid());
        for (i, k) in keys.iter().enumerate() {
            c.seek(k, |a, b| a.cmp(b)).unwrap();
            assert_eq!(c.key(), &k[..], "seek {i}");
        }
        c.seek(b"zzz", |a, b| a.cmp(b)).unwrap();
        assert!(!c.valid());
        c.seek(b"a", |a, b| a.cmp(b)).unwrap();
        assert_eq!(c.key(), &keys[0][..]);
    }
}

#[cfg(test)]
mod ikey_tests {
    use super::*;
    use crate::key::{cmp_ikey, make_ikey, ValueKind, MAX_SEQ};
    use std::sync::Arc;

    /// Internal keys in order: several versions of some keys (puts and deletes), sequence
    /// numbers from 0 to the largest, user keys sharing prefixes.
    fn ikeys() -> Vec<Vec<u8>> {
        let mut v = Vec::new();
        for i in 0..60u64 {
            let uk = format!("user{:03}", i / 3).into_bytes();
            let seq = match i % 5 {
                0 => 0,
                1 => 127,
                2 => 1 << 20,
                3 => MAX_SEQ - i,
                _ => i * 1_000_003,
            };
            let kind = if i % 4 == 3 {
                ValueKind::Delete
            } else {
                ValueKind::Put
            };
            v.push(make_ikey(&uk, seq, kind));
        }
        v.sort_by(|a, b| cmp_ikey(a, b));
        v.dedup();
        v
    }

    #[test]
    fn internal_key_blocks_read_as_plain_blocks_do_and_are_smaller() {
        let keys = ikeys();
        for interval in [1, 4, 16] {
            let mut plain = BlockBuilder::new(interval);
            let mut compact = BlockBuilder::for_internal_keys(interval);
            for (i, k) in keys.iter().enumerate() {
                let v = format!("value{i}").into_bytes();
                plain.add(k, &v);
                compact.add(k, &v);
                assert_eq!(compact.last_key(), &k[..]);
            }
            let (p, c) = (plain.finish(), compact.finish());
            assert!(c.len() < p.len(), "{} vs {}", c.len(), p.len());
            for raw in [&p, &c] {
                let blk = Block::decode(raw.clone()).expect("decodes");
                assert_eq!(blk.len(), keys.len());
                for (i, k) in keys.iter().enumerate() {
                    assert_eq!(blk.key(i), &k[..]);
                    assert_eq!(blk.value(i), format!("value{i}").as_bytes());
                    assert_eq!(blk.lower_bound(k, cmp_ikey), i);
                }
                let data = Arc::new(DataBlock::decode(raw.clone()).expect("decodes"));
                let mut cur = BlockCursor::new(data);
                cur.seek_to_first().unwrap();
                for k in &keys {
                    assert_eq!(cur.key(), &k[..]);
                    cur.next().unwrap();
                }
                assert!(!cur.valid());
                cur.seek_to_last().unwrap();
                for k in keys.iter().rev() {
                    assert_eq!(cur.key(), &k[..]);
                    cur.prev().unwrap();
                }
                for k in &keys {
                    cur.seek(k, cmp_ikey).unwrap();
                    assert_eq!(cur.key(), &k[..]);
                }
            }
            // Every single-byte flip of the compact block is detected.
            for i in 0..c.len() {
                let mut bad = c.clone();
                bad[i] ^= 0x40;
                assert!(
                    Block::decode(bad.clone()).is_err(),
                    "flip at {i} undetected"
                );
                assert!(DataBlock::decode(bad).is_err(), "flip at {i} undetected");
            }
        }
    }

    #[test]
    fn a_tag_past_the_largest_sequence_number_is_an_error() {
        // One entry: shared 0, non_shared 1, value 0, tag with seq = MAX_SEQ + 1.
        let mut raw = vec![0u8, 1, 0];
        put_varint(&mut raw, (MAX_SEQ + 1) << 1);
        raw.push(b'k');
        put_u32(&mut raw, 0);
        put_u32(&mut raw, 1);
        raw.push(TYPE_IKEY);
        let c = crc(&raw);
        put_u32(&mut raw, c);
        assert!(Block::decode(raw.clone()).is_err());
        let data = Arc::new(DataBlock::decode(raw).expect("trailer is fine"));
        assert!(BlockCursor::new(data).seek_to_first().is_err());
    }
}
