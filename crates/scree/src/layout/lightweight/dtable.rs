//! The DTable file format (`NNNNNN.dtb`, table format code 2; bytes in docs/format.md,
//! "DTable"): appended segments, each a complete sorted table (data blocks, Bloom filter,
//! index block, footer — written by [`TableBuilder`] at the segment's offset and read by
//! [`TableReader`]), an optional aggregation block (the tails of the next level's DTables this
//! one overlaps), and the tail: the directory of the live segments and the aggregation block's
//! place, with a checksummed footer. The manifest names the tail (`AppendMeta::meta_offset` up
//! to `TableMeta::size`); an append writes a new segment and a new tail after the old end and
//! switches to it, never writing a byte before the end the manifest names.

use std::path::Path;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::coding::{crc, get_u32, get_u64, put_slice, put_u32, put_u64, put_varint, Reader};
use crate::error::{Error, Result};
use crate::fs::{CountedReader, CountedWriter, Env};
use crate::iter::{InternalIter, MergingIter};
use crate::key::{self, cmp_ikey};
use crate::memtable::Lookup;
use crate::stats::ReadKind;
use crate::table::{
    AppendMeta, TableAux, TableBuilder, TableFile, TableIter, TableMeta, TableReader,
};
use crate::table_format::{Description, EntryVisitor, TableFormat, Verified};

/// [`AddedTable::format`](crate::manifest::edit::AddedTable::format) code of a DTable.
pub const FORMAT_DTABLE: u8 = 3;
/// File name extension of a DTable.
pub const EXT: &str = "dtb";
/// Magic number at the end of every DTable tail.
pub const TAIL_MAGIC: u64 = 0x5354_4445_4552_4353; // "SCREEDTS" little-endian
/// Version of the tail format.
pub const TAIL_VERSION: u32 = 1;
/// Bytes of the tail's footer: body length u32, version u32, crc u32, magic u64.
pub const TAIL_FOOTER: usize = 20;

/// The DTable in the format registry.
pub const DTABLE: TableFormat = TableFormat {
    name: "dtable",
    code: Some(FORMAT_DTABLE),
    ext: EXT,
    verify: verify_table,
    for_each: Some(for_each_entry),
    describe: describe_table,
    fuzz_target: Some("dtable_open"),
};

/// One segment as the tail's directory names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentEntry {
    /// Segment sequence number: a larger one holds newer versions of any key both hold
    /// (numbers come from the file-number allocator, so they grow across the keyspace).
    pub seq: u64,
    /// Offset of its first data block.
    pub start: u64,
    /// Offset just past its footer.
    pub end: u64,
    /// Entries in it.
    pub entries: u64,
    /// Smallest and largest sequence numbers of the writes in it.
    pub min_seq: u64,
    /// See `min_seq`.
    pub max_seq: u64,
    /// Smallest internal key.
    pub smallest: Vec<u8>,
    /// Largest internal key.
    pub largest: Vec<u8>,
    /// The user key halfway through its entries (where workload balance splits a range).
    pub mid: Vec<u8>,
}

impl SegmentEntry {
    /// Its bytes in the file.
    pub fn bytes(&self) -> u64 {
        self.end - self.start
    }
}

/// A DTable's tail: its live segments, oldest first, and where its aggregation block is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tail {
    /// Live segments, oldest first (increasing `seq`).
    pub segments: Vec<SegmentEntry>,
    /// Offset and length of the aggregation block, if the table has one.
    pub agg: Option<(u64, u64)>,
}

impl Tail {
    /// Bytes of live segment data.
    pub fn live_bytes(&self) -> u64 {
        self.segments.iter().map(SegmentEntry::bytes).sum()
    }

    /// Encodes the tail (body and footer).
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::new();
        put_varint(&mut b, self.segments.len() as u64);
        for s in &self.segments {
            put_varint(&mut b, s.seq);
            put_varint(&mut b, s.start);
            put_varint(&mut b, s.end);
            put_varint(&mut b, s.entries);
            put_varint(&mut b, s.min_seq);
            put_varint(&mut b, s.max_seq);
            put_slice(&mut b, &s.smallest);
            put_slice(&mut b, &s.largest);
            put_slice(&mut b, &s.mid);
        }
        match self.agg {
            Some((off, len)) => {
                b.push(1);
                put_varint(&mut b, off);
                put_varint(&mut b, len);
            }
            None => b.push(0),
        }
        let body_len = b.len() as u32;
        put_u32(&mut b, body_len);
        put_u32(&mut b, TAIL_VERSION);
        let c = crc(&b);
        put_u32(&mut b, c);
        put_u64(&mut b, TAIL_MAGIC);
        b
    }

    /// Decodes the tail `raw`, which starts at offset `at` of `path`: checksum, magic and
    /// version, and every segment and the aggregation block before `at`, segments in file
    /// order without overlap, with increasing sequence numbers and well-formed keys.
    pub fn decode(raw: &[u8], path: &Path, at: u64) -> Result<Tail> {
        let bad = |o: usize, d: &str| Error::corruption(path, at + o as u64, d.to_string());
        if raw.len() < TAIL_FOOTER {
            return Err(bad(0, "DTable tail shorter than its footer"));
        }
        let foot = raw.len() - TAIL_FOOTER;
        if get_u64(raw, foot + 12) != Some(TAIL_MAGIC) {
            return Err(bad(foot + 12, "bad DTable tail magic"));
        }
        if get_u32(raw, foot + 8) != Some(crc(raw.get(..foot + 8).unwrap_or_default())) {
            return Err(bad(foot, "DTable tail checksum mismatch"));
        }
        if get_u32(raw, foot + 4) != Some(TAIL_VERSION) {
            return Err(bad(foot + 4, "unsupported DTable tail version"));
        }
        if get_u32(raw, foot) != Some(foot as u32) {
            return Err(bad(foot, "DTable tail length mismatch"));
        }
        let mut r = Reader::new(raw.get(..foot).unwrap_or_default());
        let n = r.varint().ok_or_else(|| bad(0, "segment count"))?;
        let mut segments = Vec::new();
        let mut prev_end = 0u64;
        let mut prev_seq = 0u64;
        for i in 0..n {
            let p = r.pos();
            let e = (|| {
                Some(SegmentEntry {
                    seq: r.varint()?,
                    start: r.varint()?,
                    end: r.varint()?,
                    entries: r.varint()?,
                    min_seq: r.varint()?,
                    max_seq: r.varint()?,
                    smallest: r.slice()?.to_vec(),
                    largest: r.slice()?.to_vec(),
                    mid: r.slice()?.to_vec(),
                })
            })()
            .ok_or_else(|| bad(p, "truncated segment entry"))?;
            if e.start < prev_end || e.end <= e.start || e.end > at {
                return Err(bad(p, "segment out of place"));
            }
            if i > 0 && e.seq <= prev_seq {
                return Err(bad(p, "segment sequence numbers not increasing"));
            }
            if !key::valid_ikey(&e.smallest)
                || !key::valid_ikey(&e.largest)
                || cmp_ikey(&e.smallest, &e.largest).is_gt()
                || e.entries == 0
                || e.min_seq > e.max_seq
            {
                return Err(bad(p, "bad segment key range or counts"));
            }
            prev_end = e.end;
            prev_seq = e.seq;
            segments.push(e);
        }
        let p = r.pos();
        let agg = match r.u8() {
            Some(0) => None,
            Some(1) => {
                let (off, len) = (r.varint(), r.varint());
                match (off, len) {
                    (Some(o), Some(l)) if o.checked_add(l).is_some_and(|e| e <= at) => Some((o, l)),
                    _ => return Err(bad(p, "bad aggregation block handle")),
                }
            }
            _ => return Err(bad(p, "bad aggregation flag")),
        };
        if !r.is_empty() {
            return Err(bad(r.pos(), "trailing bytes in DTable tail"));
        }
        Ok(Tail { segments, agg })
    }
}

/// The copy of one next-level DTable's tail that a DTable carries (metadata aggregation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AggCopy {
    /// The table it copies.
    pub file_no: u64,
    /// Where that table's tail started when copied: a copy whose offset is not the table's
    /// current `meta_offset` is stale.
    pub meta_offset: u64,
    /// The tail's bytes as the table holds them.
    pub tail: Vec<u8>,
}

/// Encodes an aggregation block: `n ‖ n × (file_no ‖ meta_offset ‖ tail) ‖ crc`.
pub fn encode_agg(copies: &[AggCopy]) -> Vec<u8> {
    let mut b = Vec::new();
    put_varint(&mut b, copies.len() as u64);
    for c in copies {
        put_varint(&mut b, c.file_no);
        put_varint(&mut b, c.meta_offset);
        put_slice(&mut b, &c.tail);
    }
    let c = crc(&b);
    put_u32(&mut b, c);
    b
}

/// Decodes the aggregation block `raw` at offset `at` of `path` (each copied tail checked as
/// a tail).
pub fn decode_agg(raw: &[u8], path: &Path, at: u64) -> Result<Vec<AggCopy>> {
    let bad = |d: &str| Error::corruption(path, at, d.to_string());
    let split = raw
        .len()
        .checked_sub(4)
        .ok_or_else(|| bad("aggregation block too short"))?;
    let body = raw.get(..split).unwrap_or_default();
    if get_u32(raw, split) != Some(crc(body)) {
        return Err(bad("aggregation block checksum mismatch"));
    }
    let mut r = Reader::new(body);
    let n = r.varint().ok_or_else(|| bad("aggregation count"))?;
    let mut out = Vec::new();
    for _ in 0..n {
        let (f, m, t) = (r.varint(), r.varint(), r.slice());
        let (Some(file_no), Some(meta_offset), Some(tail)) = (f, m, t) else {
            return Err(bad("truncated aggregation entry"));
        };
        Tail::decode(tail, path, meta_offset)?;
        out.push(AggCopy {
            file_no,
            meta_offset,
            tail: tail.to_vec(),
        });
    }
    if !r.is_empty() {
        return Err(bad("trailing bytes in aggregation block"));
    }
    Ok(out)
}

/// An open DTable at the length one version names: the file, its tail, and a sorted-table
/// reader per live segment (index and filter held as a sorted table's are).
pub struct DtReader {
    /// The file, read up to the named length.
    pub file: CountedReader,
    /// The tail.
    pub tail: Tail,
    /// A reader per segment, in the tail's order (oldest first).
    pub segs: Vec<Arc<TableReader>>,
    /// Counts the file once in `Stats::open_table_files` (its segments' readers do not).
    _open: crate::stats::Pinned,
}

impl DtReader {
    /// Opens the DTable of `file` whose tail starts at `meta_offset` and ends at the file's
    /// (named) length.
    pub fn open(
        env: &Env,
        file: CountedReader,
        file_no: u64,
        cache: crate::cache::BlockCache,
        meta_offset: u64,
    ) -> Result<DtReader> {
        let len = file.len();
        if meta_offset > len {
            return Err(Error::corruption(
                file.path(),
                len,
                "DTable tail past the end",
            ));
        }
        let raw = file.read(
            meta_offset,
            (len - meta_offset) as usize,
            ReadKind::Metadata,
        )?;
        let tail = Tail::decode(&raw, file.path(), meta_offset)?;
        let mut segs = Vec::new();
        for s in &tail.segments {
            segs.push(Arc::new(TableReader::from_file_at(
                env,
                file.clone(),
                file_no,
                cache.clone(),
                s.end,
                false,
            )?));
        }
        let _open = crate::stats::Pinned::new(env.stats.clone(), raw.len());
        Ok(DtReader {
            file,
            tail,
            segs,
            _open,
        })
    }

    /// The aggregation block's copies (read now; empty without one).
    pub fn agg(&self) -> Result<Vec<AggCopy>> {
        match self.tail.agg {
            None => Ok(Vec::new()),
            Some((off, len)) => {
                let raw = self.file.read(off, len as usize, ReadKind::Metadata)?;
                decode_agg(&raw, self.file.path(), off)
            }
        }
    }

    /// An iterator over one segment.
    pub fn seg_iter(&self, i: usize, fill_cache: bool) -> Result<TableIter> {
        match self.segs.get(i) {
            Some(r) => TableIter::new(r.clone(), fill_cache),
            None => Err(Error::InvalidArgument(format!("no segment {i}"))),
        }
    }

    /// Iterators over every segment.
    pub fn iters(&self, fill_cache: bool, out: &mut Vec<Box<dyn InternalIter>>) -> Result<()> {
        for i in 0..self.segs.len() {
            out.push(Box::new(self.seg_iter(i, fill_cache)?));
        }
        Ok(())
    }

    /// The newest version of `user_key` visible at `seq` in segment `i` (filter, index, at
    /// most one data block), skipped by its key and sequence range first.
    pub fn get_in(&self, i: usize, user_key: &[u8], seq: u64) -> Result<Lookup> {
        let (Some(s), Some(r)) = (self.tail.segments.get(i), self.segs.get(i)) else {
            return Ok(Lookup::Absent);
        };
        if s.min_seq > seq
            || user_key < key::user_key(&s.smallest)
            || user_key > key::user_key(&s.largest)
        {
            return Ok(Lookup::Absent);
        }
        r.get(user_key, seq)
    }

    /// Newest first through the segments.
    pub fn get(&self, user_key: &[u8], seq: u64) -> Result<Lookup> {
        for i in (0..self.segs.len()).rev() {
            match self.get_in(i, user_key, seq)? {
                Lookup::Absent => {}
                found => return Ok(found),
            }
        }
        Ok(Lookup::Absent)
    }
}

/// The open state of a DTable handle, as the open-table bound closes and reopens it.
#[derive(Default)]
struct DtAux {
    open: Mutex<Option<Arc<DtReader>>>,
}

impl TableAux for DtAux {
    fn close(&self) {
        if let Some(r) = self.open.lock().take() {
            for s in &r.segs {
                s.evict_mapped_blocks(false);
            }
        }
    }
}

impl Drop for DtAux {
    fn drop(&mut self) {
        // Cached blocks decoded from the map hold it (and the file's space) until evicted.
        self.close();
    }
}

/// The reader of DTable `t` at the length its version names (opened on first use).
pub fn reader(t: &TableFile) -> Result<Arc<DtReader>> {
    let _ = t.aux.get_or_init(|| Arc::new(DtAux::default()));
    let aux = t
        .aux_as::<DtAux>()
        .ok_or_else(|| Error::InvalidArgument("not a DTable".into()))?;
    if let Some(r) = &*aux.open.lock() {
        t.touch();
        return Ok(r.clone());
    }
    let ap = t
        .meta
        .append
        .ok_or_else(|| Error::corruption(t.path(), 0, "a DTable must be appendable"))?;
    let ctx = t.ctx();
    let r = Arc::new(DtReader::open(
        &ctx.env,
        t.open_file()?,
        t.meta.file_no,
        ctx.cache.clone(),
        ap.meta_offset,
    )?);
    {
        let mut slot = aux.open.lock();
        if let Some(other) = &*slot {
            return Ok(other.clone());
        }
        *slot = Some(r.clone());
    }
    t.opened();
    Ok(r)
}

/// Reads the tail of `t` straight from its file (a repair of a stale aggregated copy, or a
/// target no copy covers), without opening its segments.
pub fn read_tail_bytes(t: &TableFile) -> Result<Vec<u8>> {
    let ap = t
        .meta
        .append
        .ok_or_else(|| Error::corruption(t.path(), 0, "a DTable must be appendable"))?;
    let f = t.open_file()?;
    let raw = f.read(
        ap.meta_offset,
        (t.meta.size - ap.meta_offset) as usize,
        ReadKind::Metadata,
    )?;
    Tail::decode(&raw, f.path(), ap.meta_offset)?;
    Ok(raw)
}

/// Writes one segment into a DTable file (new or reopened to append) and keeps what its
/// directory entry needs.
pub struct SegmentWriter {
    b: TableBuilder,
    seq: u64,
    start: u64,
    /// Every 32nd user key, to find the middle one.
    samples: Vec<Vec<u8>>,
    n: u64,
    last_user: Vec<u8>,
    /// The longest internal key added (bounds the directory entry's keys).
    max_ikey: usize,
}

impl SegmentWriter {
    /// A segment of sequence number `seq` starting at `w`'s end.
    pub fn new(
        w: CountedWriter,
        file_no: u64,
        seq: u64,
        block_size: usize,
        bloom_bits: u32,
    ) -> Self {
        let start = w.len();
        SegmentWriter {
            b: TableBuilder::at(w, file_no, start, block_size, bloom_bits),
            seq,
            start,
            samples: Vec::new(),
            n: 0,
            last_user: Vec::new(),
            max_ikey: 0,
        }
    }

    /// Adds an entry (internal keys in increasing order).
    pub fn add(&mut self, ikey: &[u8], value: &[u8], note_seq: Option<u64>) -> Result<()> {
        let u = key::user_key(ikey);
        if self.n == 0 || u != self.last_user.as_slice() {
            if self.n.is_multiple_of(32) {
                self.samples.push(u.to_vec());
            }
            self.last_user.clear();
            self.last_user.extend_from_slice(u);
        }
        self.n += 1;
        self.max_ikey = self.max_ikey.max(ikey.len());
        self.b.add(ikey, value)?;
        if let Some(s) = note_seq {
            self.b.note_seq(s);
        }
        Ok(())
    }

    /// Bytes so far.
    pub fn bytes(&self) -> u64 {
        self.b.estimated_size() - self.start
    }

    /// Entries so far.
    pub fn entries(&self) -> u64 {
        self.b.entries()
    }

    /// An upper bound on the file's length once an entry of `ikey_len` + `value_len` bytes is
    /// added and the segment finished, followed by a tail `old_tail` bytes long before this
    /// segment's directory entry joins it (no aggregation block).
    pub fn end_bound_with(&self, ikey_len: usize, value_len: usize, old_tail: u64) -> u64 {
        let key = self.max_ikey.max(ikey_len) as u64;
        // The entry: six varints (and the count growing a byte) and three keys (smallest,
        // largest, middle), each with its length.
        let entry = 7 * 10 + 3 * (key + 5);
        self.b.finished_bound_with(ikey_len, value_len) + old_tail + entry
    }

    /// Writes the segment's filter, index and footer (not synced) and returns its entry and
    /// the writer.
    pub fn finish(self) -> Result<(SegmentEntry, CountedWriter)> {
        let mid = self
            .samples
            .get(self.samples.len() / 2)
            .cloned()
            .unwrap_or_default();
        let (m, w) = self.b.finish_unsynced()?;
        Ok((
            SegmentEntry {
                seq: self.seq,
                start: self.start,
                end: m.size,
                entries: m.entries,
                min_seq: m.min_seq,
                max_seq: m.max_seq,
                smallest: m.smallest,
                largest: m.largest,
                mid,
            },
            w,
        ))
    }
}

/// Ends a DTable write: appends the aggregation block (if any) and the tail after what `w`
/// holds, syncs, and returns the table's metadata. `old` is the table before the append (None
/// for a new file): its segments stay, its old tail (and agg block, when replaced) and any
/// bytes between its named end and `start` (an unfinished switch's) become dead.
pub fn finish_table(
    mut w: CountedWriter,
    file_no: u64,
    old: Option<(&TableMeta, &Tail)>,
    start: u64,
    new_seg: Option<SegmentEntry>,
    agg: Option<&[AggCopy]>,
) -> Result<(TableMeta, Tail)> {
    let mut tail = old.map(|(_, t)| t.clone()).unwrap_or_default();
    let mut dead = 0;
    if let Some((m, t)) = old {
        let ap = m.append.unwrap_or(AppendMeta {
            meta_offset: m.size,
            dead_bytes: 0,
        });
        dead = ap.dead_bytes + (m.size - ap.meta_offset) + (start - m.size);
        if agg.is_some() {
            dead += t.agg.map_or(0, |a| a.1);
        }
    }
    if let Some(s) = new_seg {
        tail.segments.push(s);
    }
    if let Some(copies) = agg {
        let off = w.len();
        let b = encode_agg(copies);
        w.append(&b)?;
        tail.agg = Some((off, b.len() as u64));
    }
    let meta_offset = w.len();
    w.append(&tail.encode())?;
    // Durable before a manifest edit names the new end.
    w.sync()?;
    Ok((
        meta_from_tail(file_no, w.len(), meta_offset, dead, &tail),
        tail,
    ))
}

/// The manifest's record of a DTable with `tail`.
pub fn meta_from_tail(
    file_no: u64,
    size: u64,
    meta_offset: u64,
    dead: u64,
    tail: &Tail,
) -> TableMeta {
    let mut m = TableMeta {
        file_no,
        size,
        smallest: Vec::new(),
        largest: Vec::new(),
        entries: 0,
        min_seq: 0,
        max_seq: 0,
        append: Some(AppendMeta {
            meta_offset,
            dead_bytes: dead,
        }),
    };
    for (i, s) in tail.segments.iter().enumerate() {
        if i == 0 || cmp_ikey(&s.smallest, &m.smallest).is_lt() {
            m.smallest = s.smallest.clone();
        }
        if i == 0 || cmp_ikey(&s.largest, &m.largest).is_gt() {
            m.largest = s.largest.clone();
        }
        m.min_seq = if i == 0 {
            s.min_seq
        } else {
            m.min_seq.min(s.min_seq)
        };
        m.max_seq = m.max_seq.max(s.max_seq);
        m.entries += s.entries;
    }
    m
}

/// Reads every segment (each block's checksum), checks entry counts, order and key ranges
/// against the directory, and decodes the aggregation block.
fn verify_table(t: &TableFile, out: &mut Verified) -> Result<()> {
    let r = reader(t)?;
    r.agg()?;
    for (i, s) in r.tail.segments.iter().enumerate() {
        let mut it = r.seg_iter(i, false)?;
        it.seek_to_first()?;
        let mut n = 0u64;
        let mut prev: Option<Vec<u8>> = None;
        while it.valid() {
            let k = it.key();
            if prev.as_deref().is_some_and(|p| cmp_ikey(p, k).is_ge())
                || cmp_ikey(k, &s.smallest).is_lt()
                || cmp_ikey(k, &s.largest).is_gt()
            {
                out.problems.push(Error::corruption(
                    t.path(),
                    s.start,
                    format!(
                        "segment {} entries out of order or outside its range",
                        s.seq
                    ),
                ));
                break;
            }
            prev = Some(k.to_vec());
            n += 1;
            it.next()?;
        }
        if n != s.entries {
            out.problems.push(Error::corruption(
                t.path(),
                s.start,
                format!(
                    "segment {} holds {n} entries, its directory says {}",
                    s.seq, s.entries
                ),
            ));
        }
        out.entries += n;
        out.blocks += r.segs.get(i).map_or(Ok(0), |x| x.blocks())? as u64;
    }
    Ok(())
}

/// Every entry of every live segment, oldest segment first.
fn for_each_entry(t: &TableFile, visit: EntryVisitor<'_>) -> Result<()> {
    let r = reader(t)?;
    for i in 0..r.segs.len() {
        let mut it = r.seg_iter(i, false)?;
        it.seek_to_first()?;
        while it.valid() {
            visit(it.key(), it.value())?;
            it.next()?;
        }
    }
    Ok(())
}

/// Finds the tail that ends at the file's end (the last completed append; the manifest may
/// name an earlier one) and describes it.
fn describe_table(env: &Env, path: &Path) -> Result<Description> {
    let f = env.open(path, false)?;
    let (tail, at) = tail_at_end(&f)?;
    Ok(Description {
        format: DTABLE.name,
        version: TAIL_VERSION,
        size: f.len(),
        facts: vec![
            ("segments", tail.segments.len() as u64),
            ("entries", tail.segments.iter().map(|s| s.entries).sum()),
            ("live_segment_bytes", tail.live_bytes()),
            ("tail_offset", at),
            ("aggregation_bytes", tail.agg.map_or(0, |a| a.1)),
        ],
    })
}

/// The tail ending at the end of `f`, found by its footer's body length, and its offset.
pub fn tail_at_end(f: &CountedReader) -> Result<(Tail, u64)> {
    let len = f.len();
    if len < TAIL_FOOTER as u64 {
        return Err(Error::corruption(
            f.path(),
            0,
            "file shorter than a DTable tail",
        ));
    }
    let foot = f.read(len - TAIL_FOOTER as u64, TAIL_FOOTER, ReadKind::Metadata)?;
    let body = u64::from(get_u32(&foot, 0).unwrap_or(u32::MAX));
    let at = (len - TAIL_FOOTER as u64)
        .checked_sub(body)
        .ok_or_else(|| {
            Error::corruption(
                f.path(),
                len - TAIL_FOOTER as u64,
                "DTable tail length past the start",
            )
        })?;
    let raw = f.read(at, (len - at) as usize, ReadKind::Metadata)?;
    Ok((Tail::decode(&raw, f.path(), at)?, at))
}

/// Opens the DTable whose tail ends at the end of the file at `path` and reads it as the
/// engine does: every segment forward and backward, lookups of its keys, the aggregation
/// block. For the `dtable_open` fuzz target and the decoder's cross-check: errors are
/// expected on bad bytes, panics never. Returns the entries read.
#[doc(hidden)]
pub fn open_and_read(env: &Env, path: &Path, cache: crate::cache::BlockCache) -> Result<u64> {
    let f = env.open(path, env.direct_reads)?;
    let (_, at) = tail_at_end(&f)?;
    let r = DtReader::open(env, f, 1, cache, at)?;
    r.agg()?;
    let mut children = Vec::new();
    r.iters(true, &mut children)?;
    let mut it = MergingIter::new(children);
    it.seek_to_first()?;
    let mut keys = Vec::new();
    while it.valid() && keys.len() < 10_000 {
        keys.push(it.key().to_vec());
        it.next()?;
    }
    it.seek_to_last()?;
    let mut n = 0;
    while it.valid() && n < 10_000 {
        it.prev()?;
        n += 1;
    }
    for k in keys.iter().take(16) {
        r.get(key::user_key(k), key::parse(k).seq)?;
    }
    Ok(keys.len() as u64)
}
