//! A test-only layout of appendable tables ([`LayoutKind::TestSegments`], in test builds
//! only): it runs append-then-switch (docs/format.md, "Appendable tables") through real
//! flushes, compactions, manifest edits and recoveries, which no layout a user can pick does
//! yet (LWC-tree's `lightweight` will grow its tables by appended segments).
//!
//! A keyspace holds level-0 tables (one per flush, newest first) and at most one level-1
//! table. A compaction takes every level-0 table and appends their entries to the level-1
//! table as one new segment, then new metadata naming all its segments: the file grows, the
//! bytes before its old end are not touched, and the edit removes the table and adds it back
//! at its new end (an append switch). Once the level-1 table's dead bytes (superseded
//! metadata, bytes of a switch that never got installed) reach its live bytes, the compaction
//! rewrites it into a new file instead, which reclaims them.
//!
//! The file (`NNNNNN.seg`, table format byte 0xff) is a sequence of segments, each followed by
//! the metadata written with it:
//!
//! ```text
//! segment  := count: varint ‖ count × (ikey_len: varint ‖ ikey ‖ value_len: varint ‖ value) ‖ crc: u32
//! metadata := n: varint ‖ n × (offset: varint ‖ len: varint) ‖ crc: u32
//! ```
//!
//! `crc` is the masked CRC32C of the bytes before it in its segment or metadata. A segment's
//! entries are in internal-key order; the metadata names the live segments oldest first, and a
//! later one holds newer writes. The manifest names the current metadata: it starts at
//! `AppendMeta::meta_offset` and ends at the table's size. Scans are not served.

use std::any::Any;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::coding::{crc, get_u32, put_u32, put_varint, Reader};
use crate::error::{Error, Result};
use crate::fs::CountedReader;
use crate::iter::InternalIter;
use crate::key::{self, cmp_ikey, ValueKind};
use crate::layout::{
    check_edit_tables, Job, JobCtx, Layout, LayoutVersion, ManualScope, ManualStep, Pressure,
    TablePlace,
};
use crate::manifest::edit::{AddedTable, KsEdit, FORMAT_TEST_SEGMENTS};
use crate::memtable::{Lookup, Memtable};
use crate::options::{KeyspaceOptions, Layout as LayoutKind};
use crate::stats::{LevelStats, ReadKind, WriteCause};
use crate::table::{AppendMeta, TableAux, TableCtx, TableFile, TableMeta};
use crate::table_format::{Description, EntryVisitor, TableFormat, Verified};

/// File name extension of a segment table.
pub(crate) const EXT: &str = "seg";

/// The segment table in the format registry (test builds only).
pub(crate) const SEGMENTS: TableFormat = TableFormat {
    name: "segment table (tests)",
    code: Some(FORMAT_TEST_SEGMENTS),
    ext: EXT,
    verify: verify_table,
    for_each: Some(for_each_entry),
    describe: describe_table,
    fuzz_target: None,
};

/// Reads every live segment and the metadata naming them, checking each checksum.
fn verify_table(t: &TableFile, out: &mut Verified) -> Result<()> {
    for seg in contents(t)? {
        out.blocks += 1;
        out.entries += seg.len() as u64;
    }
    Ok(())
}

/// Every entry of every live segment, oldest segment first.
fn for_each_entry(t: &TableFile, visit: EntryVisitor<'_>) -> Result<()> {
    for seg in contents(t)? {
        for (k, v) in &seg {
            visit(k, v)?;
        }
    }
    Ok(())
}

/// The file's size (the metadata's place is the manifest's, not the file's).
fn describe_table(env: &crate::fs::Env, path: &std::path::Path) -> Result<Description> {
    let size = env.fs.file_size(path).map_err(|e| Error::io(path, e))?;
    Ok(Description {
        format: SEGMENTS.name,
        version: 1,
        size,
        facts: Vec::new(),
    })
}

/// Internal key → value, in internal-key order.
type Entries = Vec<(Vec<u8>, Vec<u8>)>;

fn encode_segment(entries: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    put_varint(&mut out, entries.len() as u64);
    for (k, v) in entries {
        put_varint(&mut out, k.len() as u64);
        out.extend_from_slice(k);
        put_varint(&mut out, v.len() as u64);
        out.extend_from_slice(v);
    }
    let c = crc(&out);
    put_u32(&mut out, c);
    out
}

fn encode_metadata(segments: &[(u64, u64)]) -> Vec<u8> {
    let mut out = Vec::new();
    put_varint(&mut out, segments.len() as u64);
    for &(off, len) in segments {
        put_varint(&mut out, off);
        put_varint(&mut out, len);
    }
    let c = crc(&out);
    put_u32(&mut out, c);
    out
}

/// The bytes before a trailing crc, if it matches.
fn checked(b: &[u8]) -> Option<&[u8]> {
    let body = b.get(..b.len().checked_sub(4)?)?;
    (get_u32(b, body.len())? == crc(body)).then_some(body)
}

/// The open file of a segment table, as the open-table bound closes and reopens it.
#[derive(Default)]
struct SegAux {
    file: Mutex<Option<CountedReader>>,
}

impl TableAux for SegAux {
    fn close(&self) {
        self.file.lock().take();
    }
}

/// A table's file, opened once (at the length its version names) and kept.
fn file(t: &TableFile) -> Result<CountedReader> {
    let _ = t.aux.get_or_init(|| Arc::new(SegAux::default()));
    let aux = t
        .aux_as::<SegAux>()
        .ok_or_else(|| Error::InvalidArgument("not a segment table".into()))?;
    if let Some(f) = &*aux.file.lock() {
        t.touch();
        return Ok(f.clone());
    }
    let f = t.open_file()?;
    *aux.file.lock() = Some(f.clone());
    t.opened();
    Ok(f)
}

/// `len` bytes at `off`, from the map when there is one.
fn bytes(f: &CountedReader, off: u64, len: u64) -> Result<Vec<u8>> {
    let len = usize::try_from(len).map_err(|_| Error::corruption(f.path(), off, "length"))?;
    match f.mapped(off, len, ReadKind::Data)? {
        Some(b) => Ok(b.to_vec()),
        None => f.read(off, len, ReadKind::Data),
    }
}

/// Where the live segments of `t` are, from its current metadata.
fn segments(t: &TableFile) -> Result<Vec<(u64, u64)>> {
    let f = file(t)?;
    let path = f.path().to_path_buf();
    let Some(ap) = t.meta.append else {
        return Err(Error::corruption(
            &path,
            0,
            "a segment table must be appendable",
        ));
    };
    let at = ap.meta_offset;
    let raw = bytes(&f, at, t.meta.size.saturating_sub(at))?;
    let body = checked(&raw).ok_or_else(|| Error::corruption(&path, at, "metadata crc"))?;
    let mut r = Reader::new(body);
    let bad = || Error::corruption(&path, at, "metadata");
    let n = r.varint().ok_or_else(bad)?;
    let mut out = Vec::new();
    for _ in 0..n {
        let (off, len) = (r.varint().ok_or_else(bad)?, r.varint().ok_or_else(bad)?);
        if off.checked_add(len).is_none_or(|e| e > at) {
            return Err(Error::corruption(&path, at, "segment past the metadata"));
        }
        out.push((off, len));
    }
    if !r.is_empty() {
        return Err(bad());
    }
    Ok(out)
}

/// The entries of every live segment of `t`, oldest segment first.
pub(crate) fn contents(t: &TableFile) -> Result<Vec<Entries>> {
    let f = file(t)?;
    let mut out = Vec::new();
    for (off, len) in segments(t)? {
        let raw = bytes(&f, off, len)?;
        let bad = |d: &str| Error::corruption(f.path(), off, d.to_string());
        let body = checked(&raw).ok_or_else(|| bad("segment crc"))?;
        let mut r = Reader::new(body);
        let n = r.varint().ok_or_else(|| bad("segment count"))?;
        let mut seg = Vec::new();
        for _ in 0..n {
            let k = r.slice().ok_or_else(|| bad("segment key"))?.to_vec();
            let v = r.slice().ok_or_else(|| bad("segment value"))?.to_vec();
            seg.push((k, v));
        }
        if !r.is_empty() || seg.windows(2).any(|w| cmp_ikey(&w[0].0, &w[1].0).is_ge()) {
            return Err(bad("segment entries"));
        }
        out.push(seg);
    }
    Ok(out)
}

/// The newest version of `user_key` visible at `seq` in `seg`.
fn lookup(seg: &Entries, user_key: &[u8], seq: u64) -> Lookup {
    let lk = key::lookup_key(user_key, seq);
    let i = seg.partition_point(|(k, _)| cmp_ikey(k, &lk).is_lt());
    match seg.get(i) {
        Some((k, v)) if key::user_key(k) == user_key => {
            match ValueKind::from_u8(key::parse(k).kind) {
                Some(ValueKind::Put) => Lookup::Value(v.clone()),
                _ => Lookup::Deleted,
            }
        }
        _ => Lookup::Absent,
    }
}

/// Writes `entries` (in internal-key order, not empty) as a new table of one segment.
fn write_table(
    ctx: &JobCtx<'_>,
    entries: &[(Vec<u8>, Vec<u8>)],
    cause: WriteCause,
) -> Result<TableMeta> {
    let no = ctx.new_file_no();
    let path = ctx.tables.dir.join(format!("{no:06}.{EXT}"));
    let mut w = ctx.tables.env.create(&path, cause)?;
    let seg = encode_segment(entries);
    w.append(&seg)?;
    let meta_offset = w.len();
    w.append(&encode_metadata(&[(0, seg.len() as u64)]))?;
    w.sync()?;
    let mut meta = TableMeta {
        file_no: no,
        size: w.len(),
        smallest: Vec::new(),
        largest: Vec::new(),
        entries: 0,
        min_seq: u64::MAX,
        max_seq: 0,
        append: Some(AppendMeta {
            meta_offset,
            dead_bytes: 0,
        }),
    };
    widen(&mut meta, entries);
    Ok(meta)
}

/// Widens `meta`'s key and sequence ranges and entry count over `entries`.
fn widen(meta: &mut TableMeta, entries: &[(Vec<u8>, Vec<u8>)]) {
    for (k, _) in entries {
        if meta.entries == 0 || cmp_ikey(k, &meta.smallest).is_lt() {
            meta.smallest = k.clone();
        }
        if meta.entries == 0 || cmp_ikey(k, &meta.largest).is_gt() {
            meta.largest = k.clone();
        }
        let seq = key::parse(k).seq;
        meta.min_seq = meta.min_seq.min(seq);
        meta.max_seq = meta.max_seq.max(seq);
        meta.entries += 1;
    }
}

/// Level-0 tables, newest first, and the level-1 table.
#[derive(Default)]
pub(crate) struct SegVersion {
    pub(crate) l0: Vec<Arc<TableFile>>,
    pub(crate) l1: Option<Arc<TableFile>>,
}

impl SegVersion {
    fn tables(&self) -> impl Iterator<Item = &Arc<TableFile>> {
        self.l0.iter().chain(self.l1.iter())
    }
}

impl LayoutVersion for SegVersion {
    fn get(&self, user_key: &[u8], seq: u64) -> Result<Lookup> {
        for t in self.tables() {
            if !t.may_hold(user_key, seq) {
                continue;
            }
            for seg in contents(t)?.iter().rev() {
                match lookup(seg, user_key, seq) {
                    Lookup::Absent => {}
                    found => return Ok(found),
                }
            }
        }
        Ok(Lookup::Absent)
    }

    fn add_iters(&self, _out: &mut Vec<Box<dyn InternalIter>>) -> Result<()> {
        Err(Error::Unsupported(
            "test-segments keyspaces serve no scans".into(),
        ))
    }

    fn apply(&self, edit: &KsEdit, tables: &Arc<TableCtx>) -> Result<Arc<dyn LayoutVersion>> {
        let mut gone: HashMap<u64, Arc<TableFile>> = HashMap::new();
        let mut l0 = Vec::new();
        for t in &self.l0 {
            if edit.removed.contains(&t.meta.file_no) {
                gone.insert(t.meta.file_no, t.clone());
            } else {
                l0.push(t.clone());
            }
        }
        let mut l1 = None;
        if let Some(t) = &self.l1 {
            if edit.removed.contains(&t.meta.file_no) {
                gone.insert(t.meta.file_no, t.clone());
            } else {
                l1 = Some(t.clone());
            }
        }
        check_edit_tables(edit, FORMAT_TEST_SEGMENTS, |no| gone.contains_key(&no))?;
        for a in &edit.added {
            if a.meta.append.is_none() {
                return Err(Error::InvalidArgument(format!(
                    "segment table {:06} added as not appendable",
                    a.meta.file_no
                )));
            }
            // A table removed and added back in one edit: moved, or switched to a new end.
            let t = match gone.get(&a.meta.file_no) {
                Some(old) => old.readded(&a.meta)?,
                None => TableFile::with_ext(a.meta.clone(), tables.clone(), EXT),
            };
            match a.level {
                0 => l0.push(t),
                1 if l1.is_none() => l1 = Some(t),
                l => {
                    return Err(Error::InvalidArgument(format!(
                        "segment table {:06} at level {l}: one table at level 1 at most",
                        a.meta.file_no
                    )))
                }
            }
        }
        l0.sort_by_key(|t| std::cmp::Reverse((t.meta.max_seq, t.meta.file_no)));
        Ok(Arc::new(SegVersion { l0, l1 }))
    }

    fn snapshot(&self, out: &mut KsEdit) {
        for (level, t) in self
            .l0
            .iter()
            .map(|t| (0, t))
            .chain(self.l1.iter().map(|t| (1, t)))
        {
            out.added.push(AddedTable {
                level,
                slot: 0,
                format: FORMAT_TEST_SEGMENTS,
                meta: t.meta.clone(),
            });
        }
    }

    fn files(&self) -> Vec<Arc<TableFile>> {
        self.tables().cloned().collect()
    }

    fn level_stats(&self) -> Vec<LevelStats> {
        [(0, &self.l0[..]), (1, self.l1.as_slice())]
            .into_iter()
            .map(|(level, ts)| LevelStats {
                filter_bytes: 0,
                memory: None,
                level,
                tables: ts.len() as u64,
                bytes: ts.iter().map(|t| t.meta.size).sum(),
                detail: String::new(),
            })
            .collect()
    }

    fn table_places(&self) -> Vec<TablePlace> {
        let l0 = self.l0.iter().map(|t| (0, t));
        l0.chain(self.l1.iter().map(|t| (1, t)))
            .map(|(level, t)| TablePlace {
                level,
                place: String::new(),
                guard: None,
                file: t.clone(),
            })
            .collect()
    }

    fn check_invariants(&self) -> std::result::Result<(), String> {
        if self.tables().any(|t| t.meta.append.is_none()) {
            return Err("a segment table that is not appendable".into());
        }
        if self
            .l0
            .windows(2)
            .any(|w| w[0].meta.max_seq < w[1].meta.max_seq)
        {
            return Err("level 0 not newest first".into());
        }
        Ok(())
    }

    fn verify_metadata_files(&self) -> Vec<Error> {
        self.tables().filter_map(|t| contents(t).err()).collect()
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// The policy: a compaction when level 0 holds `leveled.l0_compaction_trigger` tables.
#[derive(Default)]
pub(crate) struct Segments {
    busy: Arc<AtomicBool>,
}

impl Segments {
    fn v(version: &Arc<dyn LayoutVersion>) -> Option<&SegVersion> {
        version.as_any().downcast_ref::<SegVersion>()
    }

    /// The job merging all of level 0 into level 1, unless one is running.
    fn job(&self, v: &SegVersion) -> Option<Box<dyn Job>> {
        if v.l0.is_empty() || self.busy.swap(true, Ordering::SeqCst) {
            return None;
        }
        Some(Box::new(SegJob {
            busy: self.busy.clone(),
            inputs: v.l0.clone(),
            target: v.l1.clone(),
        }))
    }
}

impl Layout for Segments {
    fn kind(&self) -> LayoutKind {
        LayoutKind::TestSegments
    }

    fn table_format(&self) -> u8 {
        FORMAT_TEST_SEGMENTS
    }

    fn empty_version(&self, _tables: &Arc<TableCtx>) -> Arc<dyn LayoutVersion> {
        Arc::new(SegVersion::default())
    }

    fn flush(
        &self,
        ctx: &JobCtx<'_>,
        _version: &Arc<dyn LayoutVersion>,
        mem: &Memtable,
    ) -> Result<KsEdit> {
        let mut e = KsEdit::default();
        if mem.is_empty() {
            return Ok(e);
        }
        let mut entries = Vec::new();
        mem.for_each_in_order(|k, v| {
            entries.push((k.to_vec(), v.to_vec()));
            Ok(())
        })?;
        e.added.push(AddedTable {
            level: 0,
            slot: 0,
            format: FORMAT_TEST_SEGMENTS,
            meta: write_table(ctx, &entries, WriteCause::Flush)?,
        });
        Ok(e)
    }

    fn pick(&self, version: &Arc<dyn LayoutVersion>, ctx: &JobCtx<'_>) -> Option<Box<dyn Job>> {
        let v = Self::v(version)?;
        if v.l0.len() < ctx.opts.leveled.l0_compaction_trigger {
            return None;
        }
        self.job(v)
    }

    fn needs_compaction(&self, version: &Arc<dyn LayoutVersion>, opts: &KeyspaceOptions) -> bool {
        Self::v(version).is_some_and(|v| v.l0.len() >= opts.leveled.l0_compaction_trigger)
    }

    fn manual(
        &self,
        version: &Arc<dyn LayoutVersion>,
        _ctx: &JobCtx<'_>,
        scope: &ManualScope,
    ) -> ManualStep {
        let Some(v) = Self::v(version) else {
            return ManualStep::Done;
        };
        if !v.l0.iter().any(|t| scope.contains(t.meta.file_no)) {
            return ManualStep::Done;
        }
        match self.job(v) {
            Some(j) => ManualStep::Run(j),
            None => ManualStep::Wait,
        }
    }

    fn pressure(&self, _version: &Arc<dyn LayoutVersion>, _opts: &KeyspaceOptions) -> Pressure {
        Pressure::None
    }
}

/// Merges every level-0 table into the level-1 table: appended to it (an append switch), or,
/// when it has as many dead bytes as live ones, rewritten with it into a new file.
struct SegJob {
    busy: Arc<AtomicBool>,
    inputs: Vec<Arc<TableFile>>,
    target: Option<Arc<TableFile>>,
}

impl Drop for SegJob {
    fn drop(&mut self) {
        self.busy.store(false, Ordering::SeqCst);
    }
}

impl SegJob {
    /// Appends `entries` to `t` as a new segment with new metadata, synced: what the edit
    /// switching `t` to its new end records.
    fn append(
        ctx: &JobCtx<'_>,
        t: &TableFile,
        entries: &[(Vec<u8>, Vec<u8>)],
    ) -> Result<TableMeta> {
        let old = &t.meta;
        let ap = old
            .append
            .ok_or_else(|| Error::corruption(t.path(), 0, "a segment table must be appendable"))?;
        let mut segs = segments(t)?;
        let mut w = ctx
            .tables
            .env
            .reopen_for_append(&t.path(), WriteCause::Compaction)?;
        // The file may hold bytes past the end the version names: those of a switch whose
        // edit a crash lost. They stay, dead; the new segment starts after them.
        let start = w.len();
        if start < old.size {
            return Err(Error::corruption(
                t.path(),
                start,
                format!("file is {start} bytes, the manifest says {}", old.size),
            ));
        }
        let seg = encode_segment(entries);
        w.append(&seg)?;
        segs.push((start, seg.len() as u64));
        let meta_offset = w.len();
        w.append(&encode_metadata(&segs))?;
        // Durable before the manifest edit names the new end.
        w.sync()?;
        let mut meta = old.clone();
        meta.size = w.len();
        meta.append = Some(AppendMeta {
            meta_offset,
            // The superseded metadata, and whatever lay between the old end and the new
            // segment.
            dead_bytes: ap.dead_bytes + (old.size - ap.meta_offset) + (start - old.size),
        });
        widen(&mut meta, entries);
        Ok(meta)
    }
}

impl Job for SegJob {
    fn run(&mut self, ctx: &JobCtx<'_>) -> Result<KsEdit> {
        let mut entries: Entries = Vec::new();
        for t in &self.inputs {
            entries.extend(contents(t)?.into_iter().flatten());
        }
        entries.sort_by(|a, b| cmp_ikey(&a.0, &b.0));
        let mut e = KsEdit::default();
        e.removed = self.inputs.iter().map(|t| t.meta.file_no).collect();
        let meta = match &self.target {
            Some(t) if t.meta.dead_bytes() < t.meta.size - t.meta.dead_bytes() => {
                e.removed.push(t.meta.file_no);
                Self::append(ctx, t, &entries)?
            }
            target => {
                if let Some(t) = target {
                    // Rewritten with its dead bytes left behind.
                    e.removed.push(t.meta.file_no);
                    let mut all: Entries = contents(t)?.into_iter().flatten().collect();
                    all.append(&mut entries);
                    all.sort_by(|a, b| cmp_ikey(&a.0, &b.0));
                    entries = all;
                }
                write_table(ctx, &entries, WriteCause::Compaction)?
            }
        };
        e.added.push(AddedTable {
            level: 1,
            slot: 0,
            format: FORMAT_TEST_SEGMENTS,
            meta,
        });
        Ok(e)
    }
}

#[cfg(test)]
mod tests;
