//! HTable byte encodings shared by the builder and the reader: entries, buckets, overflow
//! records, the metadata block, the filter block and the footer (docs/format-htable.md).

use std::path::Path;

use crate::coding::{crc2, get_u32, get_u64, put_u32, put_u64, put_varint, Reader};
use crate::error::{Error, Result};
use crate::key::{self, ValueKind};

use super::{BUCKET_CAPACITY, BUCKET_HEADER, BUCKET_SIZE, FORMAT_VERSION};

/// Trailing magic of an HTable file.
pub(crate) const MAGIC: [u8; 8] = *b"SCREE-HT";
/// Size of the fixed footer at the end of the file.
pub(crate) const FOOTER_SIZE: usize = 112;
/// Size of the footer of format version 2 (no `base_seq`), recognized to refuse it by name.
const V2_FOOTER_SIZE: usize = 104;

/// Checksum of a region: masked CRC32C over the region's absolute file offset (8 bytes LE)
/// followed by its bytes, so a block copied to the wrong place fails too.
pub(crate) fn region_crc(offset: u64, bytes: &[u8]) -> u32 {
    crc2(&offset.to_le_bytes(), bytes)
}

/// Bytes a varint of `v` takes.
pub(crate) fn varint_len(mut v: u64) -> usize {
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

/// The tag of an entry with internal-key trailer `trailer` (`(seq << 8) | kind`, kind 0 or 1)
/// in a table whose oldest sequence number is `base_seq`: `((seq - base_seq) << 1) | kind`.
/// A tag takes 3 bytes for a table spanning fewer than 2^20 sequence numbers, where the
/// internal key's fixed trailer took 8.
pub(crate) fn entry_tag(trailer: u64, base_seq: u64) -> u64 {
    ((trailer >> 8).saturating_sub(base_seq) << 1) | (trailer & 1)
}

/// Encoded size of one entry: `varint ulen | varint vlen | varint tag | ukey | value`.
pub(crate) fn entry_size(ulen: usize, vlen: usize, tag: u64) -> usize {
    varint_len(ulen as u64)
        .saturating_add(varint_len(vlen as u64))
        .saturating_add(varint_len(tag))
        .saturating_add(ulen)
        .saturating_add(vlen)
}

/// Appends one entry (see [`entry_size`]).
pub(crate) fn put_entry(out: &mut Vec<u8>, ukey: &[u8], tag: u64, value: &[u8]) {
    put_varint(out, ukey.len() as u64);
    put_varint(out, value.len() as u64);
    put_varint(out, tag);
    out.extend_from_slice(ukey);
    out.extend_from_slice(value);
}

/// One entry to encode: user key, tag ([`entry_tag`]) and value.
pub(crate) type EncEntry<'a> = (&'a [u8], u64, &'a [u8]);

/// One decoded entry, borrowing the block it came from.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Entry<'a> {
    pub ukey: &'a [u8],
    /// `(seq << 8) | kind` of the version, as an internal key's trailer.
    pub trailer: u64,
    pub value: &'a [u8],
}

impl Entry<'_> {
    /// The internal key (user key ‖ trailer), assembled.
    pub(crate) fn ikey(&self) -> Vec<u8> {
        key::ikey_with_trailer(self.ukey, self.trailer)
    }
}

fn corrupt(file: &Path, offset: u64, detail: impl Into<String>) -> Error {
    Error::corruption(file, offset, detail)
}

/// Visits `count` entries in order, decoding each tag against the table's `base_seq`.
fn visit_entries<'a>(
    r: &mut Reader<'a>,
    count: usize,
    base_seq: u64,
    file: &Path,
    offset: u64,
    mut f: impl FnMut(Entry<'a>),
) -> Result<()> {
    for i in 0..count {
        let bad = || corrupt(file, offset, format!("truncated entry {i} of {count}"));
        let ulen = r.len().ok_or_else(bad)?;
        let vlen = r.len().ok_or_else(bad)?;
        let tag = r.varint().ok_or_else(bad)?;
        let ukey = r.bytes(ulen).ok_or_else(bad)?;
        let value = r.bytes(vlen).ok_or_else(bad)?;
        let seq = base_seq
            .checked_add(tag >> 1)
            .filter(|&s| s <= key::MAX_SEQ)
            .ok_or_else(|| {
                corrupt(
                    file,
                    offset,
                    format!("sequence number of entry {i} out of range"),
                )
            })?;
        f(Entry {
            ukey,
            trailer: (seq << 8) | (tag & 1),
            value,
        });
    }
    Ok(())
}

/// Reads `count` entries; every internal key must be well formed.
fn read_entries<'a>(
    r: &mut Reader<'a>,
    count: usize,
    base_seq: u64,
    file: &Path,
    offset: u64,
) -> Result<Vec<Entry<'a>>> {
    let mut out = Vec::with_capacity(count.min(BUCKET_SIZE));
    visit_entries(r, count, base_seq, file, offset, |e| out.push(e))?;
    Ok(out)
}

/// Appends to `out` the bucket at file offset `offset` holding `entries` (already sorted; their
/// encoded size must be at most [`BUCKET_CAPACITY`]): exactly [`BUCKET_SIZE`] bytes, encoded in
/// place (a writer appends thousands of buckets to one buffer). On error `out` is unchanged.
pub(crate) fn encode_bucket_into<'e>(
    out: &mut Vec<u8>,
    offset: u64,
    entries: impl ExactSizeIterator<Item = EncEntry<'e>>,
) -> Result<()> {
    let count = u16::try_from(entries.len())
        .map_err(|_| Error::InvalidArgument("too many entries for one bucket".into()))?;
    let start = out.len();
    out.reserve(BUCKET_SIZE);
    out.extend_from_slice(&[0u8; 4]);
    out.extend_from_slice(&count.to_le_bytes());
    for (k, t, v) in entries {
        put_entry(out, k, t, v);
    }
    let used = out.len() - start;
    if used > BUCKET_SIZE {
        out.truncate(start);
        return Err(Error::InvalidArgument(format!(
            "bucket overfilled: {} bytes of entries > {BUCKET_CAPACITY}",
            used - BUCKET_HEADER
        )));
    }
    out.resize(start + BUCKET_SIZE, 0);
    let c = region_crc(offset, out.get(start + 4..).unwrap_or_default());
    if let Some(h) = out.get_mut(start..start + 4) {
        h.copy_from_slice(&c.to_le_bytes());
    }
    Ok(())
}

/// Checks a bucket read from file offset `offset` (size, checksum) and returns a reader at
/// its first entry and the entry count.
fn bucket_body<'a>(file: &Path, offset: u64, block: &'a [u8]) -> Result<(Reader<'a>, usize)> {
    if block.len() != BUCKET_SIZE {
        return Err(corrupt(file, offset, "short bucket"));
    }
    let stored = get_u32(block, 0).ok_or_else(|| corrupt(file, offset, "short bucket"))?;
    if stored != region_crc(offset, block.get(4..).unwrap_or_default()) {
        return Err(corrupt(file, offset, "bucket checksum mismatch"));
    }
    let mut r = Reader::new(block.get(4..).unwrap_or_default());
    let lo = r
        .u8()
        .ok_or_else(|| corrupt(file, offset, "short bucket"))?;
    let hi = r
        .u8()
        .ok_or_else(|| corrupt(file, offset, "short bucket"))?;
    Ok((r, usize::from(u16::from_le_bytes([lo, hi]))))
}

/// Checks and decodes a bucket read from file offset `offset`.
pub(crate) fn decode_bucket<'a>(
    file: &Path,
    offset: u64,
    block: &'a [u8],
    base_seq: u64,
) -> Result<Vec<Entry<'a>>> {
    let (mut r, count) = bucket_body(file, offset, block)?;
    read_entries(&mut r, count, base_seq, file, offset)
}

/// The newest version of `user_key` with `seq <= snapshot_seq` in the bucket read from file
/// offset `offset` (see [`find_visible`]), checked as by [`decode_bucket`] but without
/// collecting its entries (a point lookup's path).
pub(crate) fn find_in_bucket(
    file: &Path,
    offset: u64,
    block: &[u8],
    base_seq: u64,
    user_key: &[u8],
    snapshot_seq: u64,
) -> Result<Option<(u64, ValueKind, Vec<u8>)>> {
    let (mut r, count) = bucket_body(file, offset, block)?;
    let mut best = Visible::default();
    visit_entries(&mut r, count, base_seq, file, offset, |e| {
        best.offer(e, user_key, snapshot_seq)
    })?;
    Ok(best.found())
}

/// Encodes an overflow record at file offset `offset`: `crc u32 | varint count | entries`.
pub(crate) fn encode_overflow_record(offset: u64, entries: &[EncEntry<'_>]) -> Vec<u8> {
    let mut b = vec![0u8; 4];
    put_varint(&mut b, entries.len() as u64);
    for &(k, t, v) in entries {
        put_entry(&mut b, k, t, v);
    }
    let c = region_crc(offset, b.get(4..).unwrap_or_default());
    if let Some(h) = b.get_mut(0..4) {
        h.copy_from_slice(&c.to_le_bytes());
    }
    b
}

/// Checks and decodes an overflow record read from file offset `offset`.
pub(crate) fn decode_overflow_record<'a>(
    file: &Path,
    offset: u64,
    rec: &'a [u8],
    base_seq: u64,
) -> Result<Vec<Entry<'a>>> {
    let stored = get_u32(rec, 0).ok_or_else(|| corrupt(file, offset, "short overflow record"))?;
    let body = rec.get(4..).unwrap_or_default();
    if stored != region_crc(offset, body) {
        return Err(corrupt(file, offset, "overflow record checksum mismatch"));
    }
    let mut r = Reader::new(body);
    let count = r
        .len()
        .ok_or_else(|| corrupt(file, offset, "short overflow record"))?;
    if count > body.len() {
        return Err(corrupt(file, offset, "overflow record count too large"));
    }
    let entries = read_entries(&mut r, count, base_seq, file, offset)?;
    if !r.is_empty() {
        return Err(corrupt(file, offset, "trailing bytes in overflow record"));
    }
    Ok(entries)
}

/// The newest version of `user_key` with `seq <= snapshot_seq` among `entries` (any order).
pub(crate) fn find_visible(
    entries: &[Entry<'_>],
    user_key: &[u8],
    snapshot_seq: u64,
) -> Option<(u64, ValueKind, Vec<u8>)> {
    let mut best = Visible::default();
    for &e in entries {
        best.offer(e, user_key, snapshot_seq);
    }
    best.found()
}

/// The newest version of one user key seen so far among entries in any order.
#[derive(Default)]
struct Visible<'a> {
    best: Option<(u64, ValueKind, &'a [u8])>,
}

impl<'a> Visible<'a> {
    fn offer(&mut self, e: Entry<'a>, user_key: &[u8], snapshot_seq: u64) {
        let seq = e.trailer >> 8;
        if e.ukey != user_key || seq > snapshot_seq {
            return;
        }
        let Some(kind) = ValueKind::from_u8((e.trailer & 0xff) as u8) else {
            return;
        };
        if self.best.is_none_or(|(s, _, _)| seq > s) {
            self.best = Some((seq, kind, e.value));
        }
    }

    fn found(self) -> Option<(u64, ValueKind, Vec<u8>)> {
        self.best.map(|(s, k, v)| (s, k, v.to_vec()))
    }
}

/// Where a migration record sends the ranks from its mark up to the next record's mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Migration {
    /// Home bucket the record belongs to.
    pub src: u32,
    /// First rank (see `rank_in_bucket`) the record covers.
    pub mark: u32,
    /// Destination: `src` = home, another bucket id, or `n_buckets` = the overflow region.
    pub dest: u32,
}

/// One entry of the overflow index: every item with this hash is in one record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OverflowEntry {
    pub hash: u128,
    /// Offset relative to the start of the overflow region.
    pub offset: u64,
    pub len: u64,
}

/// Encodes the metadata block placed at file offset `offset`.
pub(crate) fn encode_meta(
    offset: u64,
    migrations: &[Migration],
    overflow: &[OverflowEntry],
) -> Vec<u8> {
    let mut b = Vec::new();
    put_varint(&mut b, migrations.len() as u64);
    for m in migrations {
        put_varint(&mut b, u64::from(m.src));
        put_u32(&mut b, m.mark);
        put_varint(&mut b, u64::from(m.dest));
    }
    put_varint(&mut b, overflow.len() as u64);
    for o in overflow {
        b.extend_from_slice(&o.hash.to_le_bytes());
        put_varint(&mut b, o.offset);
        put_varint(&mut b, o.len);
    }
    let c = region_crc(offset, &b);
    put_u32(&mut b, c);
    b
}

/// Checks a block that ends with its region checksum and returns the body.
fn checked_body<'a>(file: &Path, offset: u64, block: &'a [u8], what: &str) -> Result<&'a [u8]> {
    let body_len = block
        .len()
        .checked_sub(4)
        .ok_or_else(|| corrupt(file, offset, format!("short {what}")))?;
    let body = block.get(..body_len).unwrap_or_default();
    if get_u32(block, body_len) != Some(region_crc(offset, body)) {
        return Err(corrupt(file, offset, format!("{what} checksum mismatch")));
    }
    Ok(body)
}

/// Checks and decodes the metadata block; validates every id, mark order and overflow extent.
pub(crate) fn decode_meta(
    file: &Path,
    offset: u64,
    block: &[u8],
    n_buckets: u32,
    overflow_len: u64,
) -> Result<(Vec<Migration>, Vec<OverflowEntry>)> {
    let body = checked_body(file, offset, block, "metadata block")?;
    let bad = |d: &str| corrupt(file, offset, format!("metadata block: {d}"));
    let mut r = Reader::new(body);
    let n_mig = r.len().ok_or_else(|| bad("truncated"))?;
    if n_mig > body.len() {
        return Err(bad("migration count too large"));
    }
    let mut migrations = Vec::with_capacity(n_mig);
    for _ in 0..n_mig {
        let src = r.varint().ok_or_else(|| bad("truncated migration"))?;
        let mark = r.u32().ok_or_else(|| bad("truncated migration"))?;
        let dest = r.varint().ok_or_else(|| bad("truncated migration"))?;
        let (Ok(src), Ok(dest)) = (u32::try_from(src), u32::try_from(dest)) else {
            return Err(bad("bucket id out of range"));
        };
        if src >= n_buckets || dest > n_buckets {
            return Err(bad("bucket id out of range"));
        }
        let m = Migration { src, mark, dest };
        if let Some(prev) = migrations.last() {
            let p: &Migration = prev;
            if (p.src, p.mark) >= (m.src, m.mark) {
                return Err(bad("migration records out of order"));
            }
        }
        migrations.push(m);
    }
    let n_ovf = r.len().ok_or_else(|| bad("truncated"))?;
    if n_ovf > body.len() {
        return Err(bad("overflow count too large"));
    }
    let mut overflow = Vec::with_capacity(n_ovf);
    let mut next_offset = 0u64;
    for _ in 0..n_ovf {
        let hb = r.bytes(16).ok_or_else(|| bad("truncated overflow index"))?;
        let hash = u128::from_le_bytes(hb.try_into().map_err(|_| bad("truncated overflow index"))?);
        let off = r.varint().ok_or_else(|| bad("truncated overflow index"))?;
        let len = r.varint().ok_or_else(|| bad("truncated overflow index"))?;
        if off != next_offset || len < 5 {
            return Err(bad("overflow records not contiguous"));
        }
        next_offset = off.checked_add(len).ok_or_else(|| bad("overflow extent"))?;
        if next_offset > overflow_len {
            return Err(bad("overflow record past the overflow region"));
        }
        if overflow
            .last()
            .is_some_and(|p: &OverflowEntry| p.hash >= hash)
        {
            return Err(bad("overflow index out of order"));
        }
        overflow.push(OverflowEntry {
            hash,
            offset: off,
            len,
        });
    }
    if next_offset != overflow_len {
        return Err(bad("overflow index does not cover the overflow region"));
    }
    if !r.is_empty() {
        return Err(bad("trailing bytes"));
    }
    Ok((migrations, overflow))
}

/// The Bloom filters of every bucket of a table, packed: filter `i` is
/// `data[offsets[i]..offsets[i+1]]`. An empty filter means the bucket holds no key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FilterSet {
    data: Vec<u8>,
    offsets: Vec<u32>,
}

impl FilterSet {
    /// An empty set with room for `n` filters.
    pub(crate) fn with_capacity(n: usize, bytes: usize) -> Self {
        let mut offsets = Vec::with_capacity(n + 1);
        offsets.push(0);
        FilterSet {
            data: Vec::with_capacity(bytes),
            offsets,
        }
    }
    /// Appends the next bucket's filter over the Bloom hashes `hashes` (none: an empty filter),
    /// encoded in place with `bits_per_key` bits per key.
    pub(crate) fn push_encoded(&mut self, hashes: &[u64], bits_per_key: u32) {
        if !hashes.is_empty() {
            crate::filter::bloom::encode_into(&mut self.data, hashes, bits_per_key);
        }
        self.offsets.push(self.data.len() as u32);
    }
    /// Packs one filter per bucket.
    pub fn from_filters<I, F>(filters: I) -> Self
    where
        I: IntoIterator<Item = F>,
        F: AsRef<[u8]>,
    {
        let mut s = FilterSet {
            data: Vec::new(),
            offsets: vec![0],
        };
        for f in filters {
            s.data.extend_from_slice(f.as_ref());
            s.offsets.push(s.data.len() as u32);
        }
        s
    }
    /// Number of filters (buckets).
    pub fn len(&self) -> usize {
        self.offsets.len().saturating_sub(1)
    }
    /// Whether there is no filter.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Filter of bucket `i`.
    pub fn get(&self, i: usize) -> Option<&[u8]> {
        let a = *self.offsets.get(i)? as usize;
        let b = *self.offsets.get(i.checked_add(1)?)? as usize;
        self.data.get(a..b)
    }
    /// Bytes held in memory.
    pub fn memory_bytes(&self) -> usize {
        self.data.len() + self.offsets.len() * 4
    }
    /// Whether the filter of bucket `i` may contain a key with Bloom hash `h`
    /// (`crate::filter::bloom::bloom_hash(user_key)`); an empty filter holds no key.
    pub fn may_contain(&self, i: usize, h: u64) -> bool {
        self.get(i).is_some_and(|f| filter_may_contain(f, h))
    }
    /// Iterates over the filters in bucket order.
    pub fn iter(&self) -> impl Iterator<Item = &[u8]> + '_ {
        (0..self.len()).map(|i| self.get(i).unwrap_or_default())
    }
}

/// Whether a bucket filter may contain a key with Bloom hash `h`. Empty = no key.
pub(crate) fn filter_may_contain(filter: &[u8], h: u64) -> bool {
    !filter.is_empty() && crate::filter::bloom::may_contain(filter, h)
}

/// Encodes the filter block placed at file offset `offset`.
pub(crate) fn encode_filters(offset: u64, filters: &FilterSet) -> Vec<u8> {
    let mut b = Vec::with_capacity(filters.memory_bytes() + 16);
    put_varint(&mut b, filters.len() as u64);
    for f in filters.iter() {
        put_varint(&mut b, f.len() as u64);
        b.extend_from_slice(f);
    }
    let c = region_crc(offset, &b);
    put_u32(&mut b, c);
    b
}

/// Checks and decodes the filter block.
pub(crate) fn decode_filters(
    file: &Path,
    offset: u64,
    block: &[u8],
    n_buckets: u32,
) -> Result<FilterSet> {
    let body = checked_body(file, offset, block, "filter block")?;
    let bad = |d: &str| corrupt(file, offset, format!("filter block: {d}"));
    let mut r = Reader::new(body);
    let n = r.varint().ok_or_else(|| bad("truncated"))?;
    if n != u64::from(n_buckets) {
        return Err(bad("filter count differs from bucket count"));
    }
    let mut set = FilterSet {
        data: Vec::with_capacity(body.len()),
        offsets: Vec::with_capacity(n_buckets as usize + 1),
    };
    set.offsets.push(0);
    for _ in 0..n {
        let f = r.slice().ok_or_else(|| bad("truncated filter"))?;
        set.data.extend_from_slice(f);
        set.offsets.push(set.data.len() as u32);
    }
    if !r.is_empty() {
        return Err(bad("trailing bytes"));
    }
    Ok(set)
}

/// The fixed footer at the end of an HTable file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Footer {
    pub n_buckets: u32,
    /// Hash bits above the bucket window (`bucket_of`).
    pub bucket_shift: u32,
    pub item_count: u64,
    pub overflow_offset: u64,
    pub overflow_len: u64,
    pub meta_offset: u64,
    pub meta_len: u64,
    pub filter_offset: u64,
    pub filter_len: u64,
    pub hash_key: [u8; 16],
    pub bits_per_key: u32,
    /// The oldest sequence number in the table (0 for an empty one): entry tags count from it.
    pub base_seq: u64,
}

impl Footer {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(FOOTER_SIZE);
        put_u32(&mut b, FORMAT_VERSION);
        put_u32(&mut b, BUCKET_SIZE as u32);
        put_u32(&mut b, self.n_buckets);
        put_u32(&mut b, self.bucket_shift);
        put_u64(&mut b, self.item_count);
        put_u64(&mut b, self.overflow_offset);
        put_u64(&mut b, self.overflow_len);
        put_u64(&mut b, self.meta_offset);
        put_u64(&mut b, self.meta_len);
        put_u64(&mut b, self.filter_offset);
        put_u64(&mut b, self.filter_len);
        b.extend_from_slice(&self.hash_key);
        put_u32(&mut b, self.bits_per_key);
        put_u64(&mut b, self.base_seq);
        let c = region_crc(self.filter_offset.saturating_add(self.filter_len), &b);
        put_u32(&mut b, c);
        b.extend_from_slice(&MAGIC);
        b
    }

    /// Decodes and validates the footer of a file of `file_len` bytes.
    pub(crate) fn decode(file: &Path, file_len: u64, b: &[u8]) -> Result<Self> {
        let off = file_len.saturating_sub(FOOTER_SIZE as u64);
        let bad = |d: &str| corrupt(file, off, format!("htable footer: {d}"));
        if b.len() != FOOTER_SIZE {
            return Err(bad("short footer"));
        }
        if b.get(104..112) != Some(&MAGIC[..]) {
            return Err(bad("bad magic (not an HTable file)"));
        }
        let body = b.get(..100).unwrap_or_default();
        if get_u32(b, 100) != Some(region_crc(off, body)) {
            // A footer of format version 2 is 8 bytes shorter (no base_seq): refuse such a
            // table by its version rather than as a checksum mismatch.
            let v2_at = FOOTER_SIZE - V2_FOOTER_SIZE;
            let v2 = b.get(v2_at..).unwrap_or_default();
            let v2_off = file_len.saturating_sub(V2_FOOTER_SIZE as u64);
            if let (Some(version), Some(crc)) = (get_u32(v2, 0), get_u32(v2, 92)) {
                if version != FORMAT_VERSION
                    && crc == region_crc(v2_off, v2.get(..92).unwrap_or_default())
                {
                    return Err(Error::Unsupported(format!(
                        "HTable format version {version} in {} (this build reads {FORMAT_VERSION})",
                        file.display()
                    )));
                }
            }
            return Err(bad("checksum mismatch"));
        }
        let u64_at = |p: usize| get_u64(b, p).ok_or_else(|| bad("short footer"));
        let version = get_u32(b, 0).ok_or_else(|| bad("short footer"))?;
        if version != FORMAT_VERSION {
            return Err(Error::Unsupported(format!(
                "HTable format version {version} in {} (this build reads {FORMAT_VERSION})",
                file.display()
            )));
        }
        if get_u32(b, 4) != Some(BUCKET_SIZE as u32) {
            return Err(bad("unsupported bucket size"));
        }
        let n_buckets = get_u32(b, 8).ok_or_else(|| bad("short footer"))?;
        let bucket_shift = get_u32(b, 12).ok_or_else(|| bad("short footer"))?;
        if bucket_shift > 127 {
            return Err(bad("bucket shift above 127"));
        }
        let mut hash_key = [0u8; 16];
        hash_key.copy_from_slice(b.get(72..88).ok_or_else(|| bad("short footer"))?);
        let f = Footer {
            n_buckets,
            bucket_shift,
            item_count: u64_at(16)?,
            overflow_offset: u64_at(24)?,
            overflow_len: u64_at(32)?,
            meta_offset: u64_at(40)?,
            meta_len: u64_at(48)?,
            filter_offset: u64_at(56)?,
            filter_len: u64_at(64)?,
            hash_key,
            bits_per_key: get_u32(b, 88).ok_or_else(|| bad("short footer"))?,
            base_seq: u64_at(92)?,
        };
        if f.base_seq > key::MAX_SEQ {
            return Err(bad("base sequence number out of range"));
        }
        // The regions must tile the file exactly: buckets, overflow, metadata, filters, footer.
        let data_len = u64::from(n_buckets).checked_mul(BUCKET_SIZE as u64);
        let ok = n_buckets >= 1
            && data_len == Some(f.overflow_offset)
            && f.overflow_offset.checked_add(f.overflow_len) == Some(f.meta_offset)
            && f.meta_offset.checked_add(f.meta_len) == Some(f.filter_offset)
            && f.filter_offset.checked_add(f.filter_len) == Some(off)
            && f.meta_len >= 4
            && f.filter_len >= 4;
        if !ok {
            return Err(bad("region offsets do not tile the file"));
        }
        // Every entry takes at least 3 bytes (three one-byte varints) of the buckets or the
        // overflow region: a larger count is corruption, not a size to reserve memory for.
        if f.item_count > f.meta_offset / 3 {
            return Err(bad("item count larger than the entries' regions can hold"));
        }
        Ok(f)
    }
}
