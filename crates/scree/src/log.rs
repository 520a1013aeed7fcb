//! The record log format shared by the WAL and the manifest.
//!
//! A log is a sequence of records `crc: u32 | len: u32 | type: u8 | payload[len]`, all integers
//! little-endian; `crc` is the masked CRC32C of `type | payload`. The type says how to read the
//! payload: 1 ([`FULL`]) for manifest edits and old WAL batches, 2 ([`COMPACT_BATCH`]) for WAL
//! batches written before the log's first completed sync, 3 ([`SYNCED_BATCH`]) for WAL batches
//! written after it (they carry how far the last completed sync reached, so recovery can tell
//! bytes a crash tore from bytes a sync had made durable), 4 ([`SEAL`]) for the last record of a
//! retired WAL, naming the next one (`wal_chain`). This module frames records and reads them
//! back; what a payload holds is its writer's business (`batch`, `wal_chain`, `manifest`). See
//! docs/format.md.

use std::path::Path;

use crate::coding::{crc2, get_u32, mask};
use crate::error::{Error, Result};
use crate::fs::CountedWriter;

/// Header bytes before each payload.
pub const HEADER: usize = 9;
/// Record type 1: every manifest record, and a WAL batch with the fixed 12-byte header
/// (written by builds before the compact payload; still replayed, no longer written).
pub const FULL: u8 = 1;
/// Record type 2: a WAL batch in the compact payload (`varint seq ‖ varint count ‖ entries`,
/// see `batch`). The only type new WALs are written with; the manifest never uses it.
pub const COMPACT_BATCH: u8 = 2;
/// Record type 3: a WAL batch written after the log's first completed sync:
/// `varint synced ‖` a type-2 payload, where `synced` is the log length the last completed
/// sync covered when the record was appended.
pub const SYNCED_BATCH: u8 = 3;
/// Record type 4: the seal of a retired WAL, its last record: `varint next`, the file number
/// of the WAL started after it (see `wal_chain`).
pub const SEAL: u8 = 4;
/// Record types a WAL may hold.
const WAL_TYPES: &[u8] = &[FULL, COMPACT_BATCH, SYNCED_BATCH, SEAL];
/// Alignment of the sectors and pages a crash can leave stale (zeros where appends had not
/// reached them yet) while later ones reached the disk.
const TEAR_ALIGN: usize = 512;
/// Record types a manifest may hold.
const MANIFEST_TYPES: &[u8] = &[FULL];
/// Largest payload accepted (a larger length field is corruption).
pub const MAX_RECORD: usize = 1 << 30;

/// Appends records to a log file.
pub struct LogWriter {
    w: CountedWriter,
    /// Log length the last completed sync covered (0: none yet).
    synced: u64,
}

impl LogWriter {
    /// Wraps a fresh file.
    pub fn new(w: CountedWriter) -> Self {
        LogWriter { w, synced: 0 }
    }
    /// Appends one record of type [`FULL`] (buffered).
    pub fn add_record(&mut self, payload: &[u8]) -> Result<()> {
        self.add_record_parts(FULL, &[], payload)
    }
    /// Appends one record of type `ty` whose payload is `head ‖ rest` (the WAL writes a batch's
    /// header this way, without copying the batch).
    pub fn add_record_parts(&mut self, ty: u8, head: &[u8], rest: &[u8]) -> Result<()> {
        let len = head.len() + rest.len();
        let crc = crc32c::crc32c_append(crc32c::crc32c_append(crc32c::crc32c(&[ty]), head), rest);
        let (c, l) = (mask(crc).to_le_bytes(), (len as u32).to_le_bytes());
        let h: [u8; HEADER] = [c[0], c[1], c[2], c[3], l[0], l[1], l[2], l[3], ty];
        self.w.append_parts(&[&h, head, rest])
    }
    /// Log length the last completed sync covered (0: none yet).
    pub fn synced(&self) -> u64 {
        self.synced
    }
    /// Hands buffered records to the OS.
    pub fn flush(&mut self) -> Result<()> {
        self.w.flush()
    }
    /// Makes every record durable.
    pub fn sync(&mut self) -> Result<()> {
        self.w.sync()?;
        self.synced = self.w.len();
        Ok(())
    }
    /// Makes every record durable, for the last time: the log takes no more records (a log
    /// being retired; a memory-mapped log drops its prepared window and preallocated tail
    /// first, see `fs::mmap_log`).
    pub fn finish(&mut self) -> Result<()> {
        self.w.finish()
    }
    /// Bytes written.
    pub fn len(&self) -> u64 {
        self.w.len()
    }
    /// The log file's path.
    pub fn path(&self) -> &Path {
        self.w.path()
    }
    /// Whether nothing was written.
    pub fn is_empty(&self) -> bool {
        self.w.is_empty()
    }
}

/// A log writer on a real file `000001.log` in a fresh directory (tests of the log and of
/// what writes into one).
#[cfg(test)]
pub(crate) fn temp_log() -> (tempfile::TempDir, LogWriter) {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = crate::fs::Env::plain(std::sync::Arc::new(crate::fs::std_fs::StdFs));
    let w = env
        .create(
            &dir.path().join("000001.log"),
            crate::stats::WriteCause::Wal,
        )
        .expect("create");
    (dir, LogWriter::new(w))
}

/// How a log ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogEnd {
    /// Every byte belonged to a valid record.
    Clean,
    /// A torn tail at `offset`: a bad or partial record with no valid record after it, or (a
    /// WAL) a gap shaped as a crash leaves it, stale sectors ending in zeros, that no later
    /// record shows a completed sync had covered: unsynced appends that reached the disk out
    /// of order. Everything from `offset` on is dropped.
    TornTail {
        /// Where the torn record starts.
        offset: u64,
    },
    /// A bad record at `offset` followed by a valid one: real corruption.
    Corrupt {
        /// Where the bad record starts.
        offset: u64,
        /// What was wrong.
        detail: String,
    },
}

/// The record at `pos`: (type, payload start, payload length), or what is wrong with it.
fn check_record(
    data: &[u8],
    pos: usize,
    types: &[u8],
) -> std::result::Result<(u8, usize, usize), String> {
    let crc = get_u32(data, pos).ok_or("truncated record header")?;
    let len = get_u32(data, pos + 4).ok_or("truncated record header")? as usize;
    let ty = *data.get(pos + 8).ok_or("truncated record header")?;
    if len > MAX_RECORD {
        return Err(format!("record length {len} too large"));
    }
    if !types.contains(&ty) {
        return Err(format!("unknown record type {ty}"));
    }
    let start = pos + HEADER;
    let payload = data
        .get(start..start + len)
        .ok_or("record runs past end of file")?;
    if crc2(&[ty], payload) != crc {
        return Err("record checksum mismatch".into());
    }
    Ok((ty, start, len))
}

/// Where the first valid record after `pos` starts, if any (cheap header checks first, the
/// CRC only for plausible candidates). The search does not trust the bad record's length field.
fn first_valid_after(data: &[u8], pos: usize, types: &[u8]) -> Option<usize> {
    let mut p = pos + 1;
    while p + HEADER <= data.len() {
        let plausible = data.get(p + 8).is_some_and(|t| types.contains(t))
            && get_u32(data, p + 4).is_some_and(|l| (l as usize) <= data.len() - p - HEADER);
        if plausible && check_record(data, p, types).is_ok() {
            return Some(p);
        }
        p += 1;
    }
    None
}

/// The largest synced length announced by a valid [`SYNCED_BATCH`] record at or after `from`
/// (0 if none), walking record by record and searching past bad ones.
fn synced_announced_after(data: &[u8], from: usize) -> u64 {
    let mut most = 0;
    let mut pos = Some(from);
    while let Some(p) = pos {
        match check_record(data, p, WAL_TYPES) {
            Ok((ty, start, len)) => {
                if ty == SYNCED_BATCH {
                    let payload = data.get(start..start + len).unwrap_or_default();
                    if let Some(n) = crate::coding::Reader::new(payload).varint() {
                        most = most.max(n);
                    }
                }
                pos = Some(start + len).filter(|&n| n < data.len());
            }
            Err(_) => pos = first_valid_after(data, p, WAL_TYPES),
        }
    }
    most
}

/// One byte of CRC32C (Castagnoli, reflected) without initial value or final xor.
fn crc32c_raw_byte(reg: u32, byte: u8) -> u32 {
    let mut c = reg ^ u32::from(byte);
    for _ in 0..8 {
        c = if c & 1 == 1 {
            (c >> 1) ^ 0x82F6_3B78
        } else {
            c >> 1
        };
    }
    c
}

/// The byte of `body` and the bit in it whose flip gives CRC32C `want`, if one does. A CRC is
/// affine: for messages of one length, `crc(x ^ e) = crc(x) ^ raw(e)`, where `raw` has no
/// initial value or final xor, and `raw` of a single bit is that bit's register pushed through
/// the zero bytes after it. So every flip is tried with one pass over the bytes, from the last
/// to the first.
fn one_bit_gives(body: &[u8], want: u32) -> Option<(usize, u8)> {
    let target = crc32c::crc32c(body) ^ want;
    // raw(bit b of the byte at distance d from the end), for the current d.
    let mut regs: [u32; 8] = std::array::from_fn(|b| crc32c_raw_byte(0, 1 << b));
    for at in (0..body.len()).rev() {
        if let Some(bit) = regs.iter().position(|&r| r == target) {
            return Some((at, bit as u8));
        }
        for r in &mut regs {
            *r = crc32c_raw_byte(*r, 0);
        }
    }
    None
}

/// The file offsets of the bytes where one flipped bit makes the bad record at `pos` valid: a
/// bit of its checksum, of its length (the record with that length is valid), or of its type
/// or payload. Empty when none does; `None` when none does in its length and its payload runs
/// past the end, so the rest cannot be tried.
fn one_bit_flips(data: &[u8], pos: usize, types: &[u8]) -> Option<Vec<usize>> {
    let (Some(crc), Some(len)) = (get_u32(data, pos), get_u32(data, pos + 4)) else {
        return Some(Vec::new());
    };
    let Some(&ty) = data.get(pos + HEADER - 1) else {
        return Some(Vec::new());
    };
    let valid_with_len = |l: u32| {
        let payload = (pos + HEADER)
            .checked_add(l as usize)
            .and_then(|end| data.get(pos + HEADER..end));
        payload.is_some_and(|p| types.contains(&ty) && crc2(&[ty], p) == crc)
    };
    let mut flips: Vec<usize> = (0..32)
        .filter(|b| valid_with_len(len ^ (1 << b)))
        .map(|b| pos + 4 + b / 8)
        .collect();
    let Some(body) = data.get(pos + HEADER - 1..pos + HEADER + len as usize) else {
        return (!flips.is_empty()).then_some(flips);
    };
    // One bit of the stored (masked) checksum (little-endian at `pos`), or of the type and
    // payload; the type must then be one a record may have.
    let crc_diff = mask(crc32c::crc32c(body)) ^ crc;
    if crc_diff.count_ones() == 1 && types.contains(&ty) {
        flips.push(pos + crc_diff.trailing_zeros() as usize / 8);
    }
    if let Some((at, bit)) = one_bit_gives(body, crate::coding::unmask(crc)) {
        let t = if at == 0 { ty ^ (1 << bit) } else { ty };
        if types.contains(&t) {
            flips.push(pos + HEADER - 1 + at);
        }
    }
    Some(flips)
}

/// Whether the byte at `at` is zero in a run of zeros that ends at an aligned boundary no later
/// than `next`: what a stale sector leaves (zeros from the append point at write-back to the
/// sector's end). A flipped bit there is explained as well by a crash that kept the sector
/// before the append that set the bit: the original bytes from `at` to the boundary were zero
/// but for that one bit.
fn in_stale_zeros(data: &[u8], at: usize, next: usize) -> bool {
    let end = (at / TEAR_ALIGN + 1) * TEAR_ALIGN;
    end <= next && data.get(at..end).is_some_and(|z| z.iter().all(|&b| b == 0))
}

/// Whether the gap `[bad, next)` before a valid record has the shape a crash gives unsynced
/// appends written back out of order: a sector or page that reached the disk before the
/// appends filled it ends in zeros (the file was zeros past the append point), while a later
/// one is whole. It must hold an aligned boundary inside the gap preceded by a zero byte.
/// One is enough because this is asked only about a bad record lying whole before the end that
/// no one-bit flip explains but one inside such zeros (a record running past the end is a torn
/// tail before this, so no rule for that case is needed here). Garbage has no zero just before
/// a sector boundary unless the data itself held one there, so it stays corruption.
fn crash_shaped_gap(data: &[u8], bad: usize, next: usize) -> bool {
    let first = (bad + 1).div_ceil(TEAR_ALIGN) * TEAR_ALIGN;
    (first..=next)
        .step_by(TEAR_ALIGN)
        .any(|b| b.checked_sub(1).and_then(|z| data.get(z)) == Some(&0))
}

/// Whether the bad record at `pos` is a torn tail (true) or corruption (false), in a WAL
/// (`wal`) or a manifest; the rule in order is docs/format.md, "Stale sectors".
fn judge_bad_record(data: &[u8], pos: usize, types: &[u8], wal: bool) -> bool {
    let Some(next) = first_valid_after(data, pos, types) else {
        return true;
    };
    if !wal {
        return false;
    }
    // A completed sync covered the bad bytes: no crash tore them.
    if synced_announced_after(data, next) > pos as u64 {
        return false;
    }
    // One flipped bit explains it, and no stale sector explains that bit as well.
    let flips = one_bit_flips(data, pos, types);
    if let Some(f) = &flips {
        if f.iter().any(|&at| !in_stale_zeros(data, at, next)) {
            return false;
        }
    }
    // Valid-looking records inside the bad record's claimed extent may be frames inside its
    // payload (a value holding WAL bytes, torn by the crash): only records from the extent's
    // end on count. One flipped length bit was ruled out above.
    let extent_end = get_u32(data, pos + 4)
        .and_then(|l| (pos + HEADER).checked_add(l as usize))
        .unwrap_or(usize::MAX);
    let outside = if next >= extent_end {
        Some(next)
    } else if extent_end >= data.len() {
        None
    } else {
        first_valid_after(data, extent_end - 1, types)
    };
    match outside {
        None => true,
        // `flips` is `Some` here: `None` means the payload runs past the end, and then no
        // record is counted after it.
        Some(n) => crash_shaped_gap(data, pos, n),
    }
}

/// Splits a whole manifest into its payloads and says how it ended (records of type [`FULL`]
/// only: any other type is a bad record).
pub fn read_records(data: &[u8]) -> (Vec<&[u8]>, LogEnd) {
    let (records, end) = read_typed(data, MANIFEST_TYPES);
    (records.into_iter().map(|(_, p)| p).collect(), end)
}

/// Splits a whole WAL file into its records, each as (type, payload), and says how it ended.
/// [`FULL`], [`COMPACT_BATCH`], [`SYNCED_BATCH`] and [`SEAL`] records are valid; any other type
/// is a bad record.
pub fn read_wal_records(data: &[u8]) -> (Vec<(u8, &[u8])>, LogEnd) {
    read_typed(data, WAL_TYPES)
}

fn read_typed<'a>(data: &'a [u8], types: &[u8]) -> (Vec<(u8, &'a [u8])>, LogEnd) {
    let wal = types.contains(&SYNCED_BATCH);
    let mut out = Vec::new();
    let mut pos = 0usize;
    while pos < data.len() {
        match check_record(data, pos, types) {
            Ok((ty, start, len)) => {
                if let Some(p) = data.get(start..start + len) {
                    out.push((ty, p));
                }
                pos = start + len;
            }
            Err(_) if data.get(pos..).is_some_and(|t| t.iter().all(|&b| b == 0)) => {
                // Zeros to the end: the preallocated tail of a WAL written through a memory
                // map (fs::mmap_log) whose writer was not dropped. No record has a zero header
                // (type 0 does not exist), so this is where the log ends.
                return (out, LogEnd::Clean);
            }
            Err(detail) => {
                // A torn write leaves nothing valid after it: a valid record anywhere after the
                // bad one means the bad bytes are in the middle of the log. The search does not
                // trust the bad record's length field (a flipped length bit must not turn middle
                // corruption into a torn tail). One exception, in a WAL: a crash can keep later
                // unsynced appends and lose earlier ones (pages written back out of order).
                // Such a gap ends a stale sector in zeros, and no completed sync covered it: no
                // later record announces a synced length past it.
                let torn = judge_bad_record(data, pos, types, wal);
                let end = if torn {
                    LogEnd::TornTail { offset: pos as u64 }
                } else {
                    LogEnd::Corrupt {
                        offset: pos as u64,
                        detail,
                    }
                };
                return (out, end);
            }
        }
    }
    (out, LogEnd::Clean)
}

/// One record as a log holds it (tests build logs by hand with it).
#[cfg(test)]
pub(crate) fn frame(ty: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + payload.len());
    crate::coding::put_u32(&mut out, crate::coding::crc2(&[ty], payload));
    crate::coding::put_u32(&mut out, payload.len() as u32);
    out.push(ty);
    out.extend_from_slice(payload);
    out
}

/// Turns a [`LogEnd::Corrupt`] into an error naming the file.
pub fn corrupt_error(path: &Path, end: &LogEnd) -> Option<Error> {
    match end {
        LogEnd::Corrupt { offset, detail } => {
            Some(Error::corruption(path, *offset, detail.clone()))
        }
        _ => None,
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing)]
mod tests {
    use super::*;

    fn encode(records: &[&[u8]]) -> Vec<u8> {
        let typed: Vec<(u8, &[u8])> = records.iter().map(|r| (FULL, *r)).collect();
        encode_typed(&typed)
    }

    fn encode_typed(records: &[(u8, &[u8])]) -> Vec<u8> {
        records.iter().flat_map(|(ty, r)| frame(*ty, r)).collect()
    }

    #[test]
    fn wal_reader_takes_both_batch_types_and_the_manifest_reader_only_type_1() {
        let recs: [(u8, &[u8]); 3] = [
            (FULL, b"old"),
            (COMPACT_BATCH, b"new"),
            (COMPACT_BATCH, b""),
        ];
        let data = encode_typed(&recs);
        let (got, end) = read_wal_records(&data);
        assert_eq!(got, recs.to_vec());
        assert_eq!(end, LogEnd::Clean);
        // The manifest has no type 2: the record after the first is bad, and with valid-looking
        // type-2 records after it (not valid for a manifest) it is a torn tail, as any unknown type.
        let (got, end) = read_records(&data);
        assert_eq!(got, vec![&b"old"[..]]);
        assert_eq!(
            end,
            LogEnd::TornTail {
                offset: (HEADER + 3) as u64
            }
        );
        // The writer's framing is what the reader expects, for both types.
        let (dir, mut w) = super::temp_log();
        let path = dir.path().join("000001.log");
        w.add_record(b"old").expect("append");
        w.add_record_parts(COMPACT_BATCH, b"n", b"ew")
            .expect("append");
        w.add_record_parts(COMPACT_BATCH, b"", b"").expect("append");
        w.finish().expect("finish");
        drop(w);
        assert_eq!(std::fs::read(&path).expect("read"), data);
    }

    #[test]
    fn an_unknown_type_in_a_wal_is_a_bad_record() {
        let recs: [(u8, &[u8]); 3] = [
            (COMPACT_BATCH, b"one"),
            (5, b"two"),
            (COMPACT_BATCH, b"three"),
        ];
        let data = encode_typed(&recs);
        let (got, end) = read_wal_records(&data);
        assert_eq!(got, vec![(COMPACT_BATCH, &b"one"[..])]);
        assert!(matches!(end, LogEnd::Corrupt { offset, .. } if offset == (HEADER + 3) as u64));
        let (got, end) = read_wal_records(data.get(..2 * HEADER + 6).expect("in range"));
        assert_eq!(got.len(), 1);
        assert_eq!(
            end,
            LogEnd::TornTail {
                offset: (HEADER + 3) as u64
            }
        );
    }

    #[test]
    fn round_trip_and_torn_tail() {
        let data = encode(&[b"one", b"two", b"three"]);
        let (recs, end) = read_records(&data);
        assert_eq!(recs, vec![&b"one"[..], b"two", b"three"]);
        assert_eq!(end, LogEnd::Clean);
        for cut in 0..data.len() {
            let (recs, end) = read_records(&data[..cut]);
            assert!(recs.len() <= 3);
            assert!(matches!(end, LogEnd::Clean | LogEnd::TornTail { .. }));
        }
    }

    #[test]
    fn a_flipped_length_bit_is_middle_corruption() {
        let base = encode(&[b"one", b"two", b"three", b"four"]);
        for byte in 4..8 {
            for bit in 0..8 {
                let mut data = base.clone();
                data[HEADER + 3 + byte] ^= 1 << bit; // length field of the second record
                let (recs, end) = read_records(&data);
                assert_eq!(recs.len(), 1);
                assert!(
                    matches!(end, LogEnd::Corrupt { .. }),
                    "byte {byte} bit {bit}: {end:?}"
                );
            }
        }
    }

    #[test]
    fn middle_corruption_is_detected() {
        let mut data = encode(&[b"one", b"two", b"three"]);
        data[HEADER + 1] ^= 1; // inside the first payload
        let (recs, end) = read_records(&data);
        assert!(recs.is_empty());
        assert!(matches!(end, LogEnd::Corrupt { offset: 0, .. }));
    }

    /// Six WAL records of 300 nonzero payload bytes (309 bytes each); records from `synced_from`
    /// on are type 3 announcing `synced`.
    fn wal_of_six(synced_from: usize, synced: u64) -> Vec<u8> {
        let mut payloads = Vec::new();
        for i in 0..6u8 {
            let mut p = Vec::new();
            if i as usize >= synced_from {
                crate::coding::put_varint(&mut p, synced);
            }
            p.resize(p.len() + 300, 0xA0 + i);
            payloads.push(p);
        }
        let recs: Vec<(u8, &[u8])> = payloads
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let ty = if i >= synced_from {
                    SYNCED_BATCH
                } else {
                    COMPACT_BATCH
                };
                (ty, p.as_slice())
            })
            .collect();
        encode_typed(&recs)
    }

    /// After a power loss, unsynced appends can reach the disk out of order (a page written
    /// back before the appends filled it, a later page whole). The reader must not call the
    /// gap middle corruption: the default recovery would refuse to open the database, although
    /// no synced write was touched.
    #[test]
    fn a_stale_sector_before_later_unsynced_records_is_a_torn_tail() {
        let mut data = wal_of_six(6, 0);
        // Record 1 starts at 309; the stale sector ends at 512: zeros from 400 to 512.
        for b in &mut data[400..512] {
            *b = 0;
        }
        let (recs, end) = read_wal_records(&data);
        assert_eq!(recs.len(), 1);
        assert_eq!(end, LogEnd::TornTail { offset: 309 });
        // The same gap in a manifest (synced edit by edit) stays corruption.
        let mut m = encode(&[&[0xA0; 300][..], &[0xA1; 300], &[0xA2; 300]]);
        for b in &mut m[400..512] {
            *b = 0;
        }
        assert!(matches!(
            read_records(&m).1,
            LogEnd::Corrupt { offset: 309, .. }
        ));
    }

    #[test]
    fn a_gap_a_completed_sync_covered_is_corruption() {
        // Records 3.. were written after a sync that covered 4 records (1236 bytes): the gap
        // at 309 was durable, so the damage is not a crash's.
        let mut data = wal_of_six(3, 4 * 309);
        for b in &mut data[400..512] {
            *b = 0;
        }
        let (_, end) = read_wal_records(&data);
        assert!(
            matches!(end, LogEnd::Corrupt { offset: 309, .. }),
            "{end:?}"
        );
        // A sync that covered only record 0 (309 bytes) does not reach the gap.
        let mut data = wal_of_six(3, 309);
        for b in &mut data[400..512] {
            *b = 0;
        }
        assert_eq!(read_wal_records(&data).1, LogEnd::TornTail { offset: 309 });
    }

    #[test]
    fn damage_without_a_stale_sector_stays_corruption() {
        // A flipped bit, garbage, or too few zeros before a sector boundary from a single flip.
        for (from, to, byte) in [(400, 401, 0x55), (400, 512, 0x5A)] {
            let mut data = wal_of_six(6, 0);
            for b in &mut data[from..to] {
                *b = byte;
            }
            let (_, end) = read_wal_records(&data);
            assert!(
                matches!(end, LogEnd::Corrupt { offset: 309, .. }),
                "{from}..{to} = {byte}: {end:?}"
            );
        }
        // A payload of 0x01 bytes: one flipped bit makes a byte zero away from a sector
        // boundary. It is one bit, and no stale sector ends there: corruption.
        let payloads: Vec<Vec<u8>> = (0..4).map(|_| vec![1u8; 300]).collect();
        let recs: Vec<(u8, &[u8])> = payloads
            .iter()
            .map(|p| (COMPACT_BATCH, p.as_slice()))
            .collect();
        let mut data = encode_typed(&recs);
        data[400] ^= 1;
        assert!(matches!(
            read_wal_records(&data).1,
            LogEnd::Corrupt { offset: 309, .. }
        ));
        // One flipped bit that sets a bit before the boundary is not a stale sector's zero.
        let mut data = encode_typed(&recs);
        data[511] ^= 2;
        assert!(matches!(
            read_wal_records(&data).1,
            LogEnd::Corrupt { offset: 309, .. }
        ));
        // One flipped bit of the stored checksum is one bit, found in its byte; two are not.
        let mut data = encode_typed(&recs);
        data[309 + 2] ^= 0x40;
        assert_eq!(one_bit_flips(&data, 309, WAL_TYPES), Some(vec![309 + 2]));
        data[309 + 3] ^= 0x01;
        assert_eq!(one_bit_flips(&data, 309, WAL_TYPES), Some(vec![]));
        // Six zeros instead (no single flip gives them): a stale sector, a torn tail.
        let mut data = encode_typed(&recs);
        for b in &mut data[506..512] {
            *b = 0;
        }
        assert_eq!(read_wal_records(&data).1, LogEnd::TornTail { offset: 309 });
    }

    /// A power loss can keep a page whose append point was one byte before its end, with that
    /// byte having one bit set (0x40). The zero left there is also one flipped bit; judged
    /// corruption first, it would make the default recovery refuse a database no synced write
    /// of which was touched. A flip inside zeros that end at a sector boundary is the stale
    /// sector it equally is.
    #[test]
    fn a_stale_sector_whose_lost_bytes_held_one_set_bit_is_a_torn_tail() {
        // Record 1 starts at 309, its payload at 318: the bytes at 510 and 511 are its 192nd
        // and 193rd. The last byte lost, or the last two of which only the first held a bit.
        for (from, last) in [(511, 0x40u8), (510, 0x00)] {
            let mut payloads: Vec<Vec<u8>> = (0..4).map(|_| vec![0x40u8; 300]).collect();
            payloads[1][193] = last;
            let recs: Vec<(u8, &[u8])> = payloads
                .iter()
                .map(|p| (COMPACT_BATCH, p.as_slice()))
                .collect();
            let mut data = encode_typed(&recs);
            for b in &mut data[from..512] {
                *b = 0;
            }
            assert_eq!(one_bit_flips(&data, 309, WAL_TYPES), Some(vec![from]));
            let (read, end) = read_wal_records(&data);
            assert_eq!(read.len(), 1, "zeros from {from}");
            assert_eq!(end, LogEnd::TornTail { offset: 309 }, "zeros from {from}");
        }
        // A manifest is synced edit by edit: the same bytes there stay corruption.
        let mut m = encode(&[&[0x40; 300][..], &[0x40; 300], &[0x40; 300]]);
        m[511] = 0;
        assert!(matches!(
            read_records(&m).1,
            LogEnd::Corrupt { offset: 309, .. }
        ));
    }

    /// A torn record whose payload holds the bytes of a valid record (a value that is a copy
    /// of WAL bytes) must not make the search find "a valid record after the bad one":
    /// corruption, and the default recovery would refuse to open. Frames inside the bad
    /// record's claimed extent do not count, unless one flipped length bit explains it.
    #[test]
    fn a_frame_inside_a_torn_record_does_not_make_it_corruption() {
        let inner = encode_typed(&[(COMPACT_BATCH, b"inner".as_slice())]);
        let mut value = vec![0x33u8; 100];
        value.extend_from_slice(&inner);
        value.resize(700, 0x44);
        let data = encode_typed(&[(COMPACT_BATCH, &[0x22u8; 50][..]), (COMPACT_BATCH, &value)]);
        let cut = 59 + 9 + 100 + inner.len() + 20;
        let (recs, end) = read_wal_records(&data[..cut]);
        assert_eq!(recs.len(), 1);
        assert_eq!(end, LogEnd::TornTail { offset: 59 });
        // A flipped length bit pointing past the real next record stays corruption.
        let mut data = encode_typed(&[
            (COMPACT_BATCH, &[0x22u8; 50][..]),
            (COMPACT_BATCH, &[0x55u8; 50][..]),
            (COMPACT_BATCH, &[0x66u8; 50][..]),
        ]);
        data[4 + 1] ^= 0x10; // the first record's length: 50 + 4096
        assert!(matches!(
            read_wal_records(&data).1,
            LogEnd::Corrupt { offset: 0, .. }
        ));
    }

    /// The one-pass search finds exactly the one-bit flips a brute-force search finds.
    #[test]
    fn one_bit_flips_are_found_in_one_pass() {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for len in [1usize, 2, 9, 64, 300] {
            let body: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            let want = crc32c::crc32c(&body);
            assert_eq!(
                one_bit_gives(&body, want),
                None,
                "no flip needed is not one flip"
            );
            for _ in 0..20 {
                let (i, b) = ((next() as usize) % len, next() % 8);
                let mut bad = body.clone();
                bad[i] ^= 1 << b;
                assert_eq!(
                    one_bit_gives(&bad, want),
                    Some((i, b as u8)),
                    "len {len}, byte {i}, bit {b}"
                );
                // Two flipped bits are not one.
                let j = (i + 1 + (next() as usize) % len.max(2)) % len;
                if j != i {
                    bad[j] ^= 1;
                    let brute = (0..len * 8).any(|k| {
                        let mut t = bad.clone();
                        t[k / 8] ^= 1 << (k % 8);
                        crc32c::crc32c(&t) == want
                    });
                    assert_eq!(
                        one_bit_gives(&bad, want).is_some(),
                        brute,
                        "len {len}, two flips"
                    );
                }
            }
        }
    }
}
