//! Write batches: puts and deletes across keyspaces applied atomically, and their WAL payloads:
//! the compact one written now (record type 2: `varint seq | varint count | entries`, an entry
//! being `varint tag | key | value` with `tag = keyspace << 1 | is_put`) and the fixed-header one
//! of older WALs (record type 1: `seq: u64 | count: u32 | entries`), still replayed. See
//! docs/format.md.

use smallvec::SmallVec;

use crate::coding::{put_slice, put_varint, Reader};
use crate::error::{Error, Result};
use crate::key::{ValueKind, MAX_SEQ};
use crate::log;
use crate::options::{MAX_BATCH_BYTES, MAX_KEY_BYTES, MAX_VALUE_BYTES};

/// Options of one write.
#[derive(Debug, Clone, Copy, Default)]
pub struct WriteOptions {
    /// fsync the WAL before acknowledging (survives power loss). Default false: survives a
    /// process crash, and a power loss may drop a suffix of recent writes.
    pub sync: bool,
}

/// The keyspaces a batch writes to (one or two almost always: no allocation).
pub(crate) type KsIds = SmallVec<[u32; 2]>;

/// Bytes of the fixed batch header of a type-1 WAL record (`seq: u64 | count: u32`).
const FIXED_HEADER: usize = 12;

/// Most bytes of a compact batch header (`varint seq | varint count`).
/// Largest compact header: a synced length (type 3 only), a sequence number and a count.
const MAX_COMPACT_HEADER: usize = 10 + 10 + 5;

/// One decoded operation (recovery, tools).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BatchEntry {
    pub ks: u32,
    pub kind: ValueKind,
    pub key: Vec<u8>,
    pub value: Vec<u8>,
}

/// One operation borrowed from an encoded batch (the write path decodes without copying).
#[derive(Debug, Clone, Copy)]
pub(crate) struct EntryRef<'a> {
    pub ks: u32,
    pub kind: ValueKind,
    pub key: &'a [u8],
    pub value: &'a [u8],
}

/// Puts and deletes, possibly in several keyspaces, applied all or nothing by `Db::write`.
///
/// Held encoded as the entries of a compact WAL payload (docs/format.md): a write appends the
/// bytes to the WAL as they are, after a header of a few bytes built on the stack.
#[derive(Debug, Clone, Default)]
pub struct WriteBatch {
    /// The entries in the compact encoding, without a header (`count` is kept beside them and
    /// the sequence number is assigned by the write path).
    pub(crate) rep: Vec<u8>,
    pub(crate) count: u32,
    /// Keyspaces named by the entries, each once (the write path needs them before it logs).
    pub(crate) ks_ids: KsIds,
    pub(crate) user_bytes: u64,
    pub(crate) db_id: Option<u64>,
    pub(crate) error: Option<String>,
}

/// The tag of a compact entry: keyspace id and kind in one varint (one byte for ids < 64).
fn tag(ks: u32, kind: ValueKind) -> u64 {
    (u64::from(ks) << 1) | u64::from(kind == ValueKind::Put)
}

/// Appends one entry in the compact encoding.
fn put_entry(out: &mut Vec<u8>, ks: u32, kind: ValueKind, key: &[u8], value: &[u8]) {
    put_varint(out, tag(ks, kind));
    put_slice(out, key);
    if kind == ValueKind::Put {
        put_slice(out, value);
    }
}

/// The entries of a batch of one operation (the `put`/`delete` fast path: one allocation).
pub(crate) fn single(ks: u32, kind: ValueKind, key: &[u8], value: &[u8]) -> Vec<u8> {
    let mut rep = Vec::with_capacity(5 + 10 + key.len() + 10 + value.len());
    put_entry(&mut rep, ks, kind, key, value);
    rep
}

/// The header of a compact WAL payload (`varint seq | varint count`), built on the stack: the
/// WAL writer appends it and the batch's entries as one record without copying the batch.
pub(crate) struct CompactHeader {
    buf: [u8; MAX_COMPACT_HEADER],
    len: usize,
}

impl CompactHeader {
    /// The header of a batch of `count` entries whose first has sequence number `seq`.
    #[cfg(test)]
    pub(crate) fn new(seq: u64, count: u32) -> Self {
        Self::with_synced(None, seq, count)
    }

    /// The same, after the synced length a type-3 record starts with (`Some`).
    pub(crate) fn with_synced(synced: Option<u64>, seq: u64, count: u32) -> Self {
        let mut h = CompactHeader {
            buf: [0; MAX_COMPACT_HEADER],
            len: 0,
        };
        if let Some(n) = synced {
            h.push_varint(n);
        }
        h.push_varint(seq);
        h.push_varint(u64::from(count));
        h
    }

    fn push_varint(&mut self, mut v: u64) {
        loop {
            let low = (v & 0x7f) as u8;
            v >>= 7;
            if let Some(b) = self.buf.get_mut(self.len) {
                *b = if v == 0 { low } else { low | 0x80 };
            }
            self.len += 1;
            if v == 0 {
                return;
            }
        }
    }

    /// The encoded header.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        self.buf.get(..self.len).unwrap_or_default()
    }
}

pub(crate) fn check_key(key: &[u8]) -> Result<()> {
    if key.len() > MAX_KEY_BYTES {
        return Err(Error::InvalidArgument(format!(
            "key of {} bytes exceeds the limit of {MAX_KEY_BYTES}",
            key.len()
        )));
    }
    Ok(())
}

pub(crate) fn check_value(v: &[u8]) -> Result<()> {
    if v.len() > MAX_VALUE_BYTES {
        return Err(Error::InvalidArgument(format!(
            "value of {} bytes exceeds the limit of {MAX_VALUE_BYTES}",
            v.len()
        )));
    }
    Ok(())
}

impl WriteBatch {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }

    fn push(&mut self, ks: &crate::Keyspace, kind: ValueKind, key: &[u8], value: &[u8]) {
        if self.error.is_some() {
            return;
        }
        let id = ks.db_id();
        if *self.db_id.get_or_insert(id) != id {
            self.error = Some("a batch cannot span databases".into());
            return;
        }
        if let Err(e) = ks.check_key(key).and_then(|_| check_value(value)) {
            self.error = Some(e.to_string());
            return;
        }
        put_entry(&mut self.rep, ks.id(), kind, key, value);
        if self.rep.len() > MAX_BATCH_BYTES {
            self.error = Some(format!("batch exceeds {MAX_BATCH_BYTES} bytes"));
            self.rep = Vec::new();
            self.count = 0;
            return;
        }
        self.count += 1;
        if !self.ks_ids.contains(&ks.id()) {
            self.ks_ids.push(ks.id());
        }
        self.user_bytes += (key.len() + value.len()) as u64;
    }

    /// Adds a put of `key` → `value` in `ks`. Invalid sizes make the whole batch fail at write.
    pub fn put(&mut self, ks: &crate::Keyspace, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) {
        self.push(ks, ValueKind::Put, key.as_ref(), value.as_ref());
    }

    /// Adds a delete of `key` in `ks`.
    pub fn delete(&mut self, ks: &crate::Keyspace, key: impl AsRef<[u8]>) {
        self.push(ks, ValueKind::Delete, key.as_ref(), &[]);
    }

    /// Number of operations.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// Whether the batch is empty.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Removes every operation.
    pub fn clear(&mut self) {
        self.rep.clear();
        self.count = 0;
        self.ks_ids.clear();
        self.user_bytes = 0;
        self.error = None;
        // A cleared batch may be filled for another database, so it forgets this one.
        self.db_id = None;
    }

    /// Σ key+value bytes of puts + key bytes of deletes.
    pub(crate) fn user_bytes(&self) -> u64 {
        self.user_bytes
    }
}

/// How the entries of a WAL payload are encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Encoding {
    /// Record type 1: `kind: u8 | keyspace: varint | key | (puts) value`.
    Fixed,
    /// Record type 2 and in-memory batches: `tag: varint | key | (puts) value`.
    Compact,
}

/// The `count` operations of an in-memory batch (`WriteBatch::rep`, compact entries), borrowed.
pub(crate) fn entries(rep: &[u8], count: u32) -> Entries<'_> {
    Entries {
        r: Reader::new(rep),
        left: count,
        read: 0,
        encoding: Encoding::Compact,
    }
}

/// Iterator of [`entries`]: `Err((offset, detail))` on malformed bytes, then nothing.
pub(crate) struct Entries<'a> {
    r: Reader<'a>,
    left: u32,
    read: u32,
    encoding: Encoding,
}

impl<'a> Entries<'a> {
    fn next_entry(&mut self) -> std::result::Result<EntryRef<'a>, (usize, String)> {
        let at = self.r.pos();
        let bad = |d: &str| (at, d.to_string());
        if self.r.is_empty() {
            return Err((
                at,
                format!(
                    "batch ends after {} entries of the {} its count says",
                    self.read,
                    self.read + self.left + 1
                ),
            ));
        }
        let (ks, kind) = match self.encoding {
            Encoding::Fixed => {
                let kind = self
                    .r
                    .u8()
                    .and_then(ValueKind::from_u8)
                    .ok_or_else(|| bad("bad entry kind"))?;
                let ks = self
                    .r
                    .varint()
                    .and_then(|v| u32::try_from(v).ok())
                    .ok_or_else(|| bad("bad keyspace id"))?;
                (ks, kind)
            }
            Encoding::Compact => {
                let tag = self.r.varint().ok_or_else(|| bad("bad entry tag varint"))?;
                let ks = u32::try_from(tag >> 1).map_err(|_| bad("keyspace id overflow"))?;
                let kind = if tag & 1 == 1 {
                    ValueKind::Put
                } else {
                    ValueKind::Delete
                };
                (ks, kind)
            }
        };
        let key = self.r.slice().ok_or_else(|| bad("truncated key"))?;
        let value = if kind == ValueKind::Put {
            self.r.slice().ok_or_else(|| bad("truncated value"))?
        } else {
            &[]
        };
        Ok(EntryRef {
            ks,
            kind,
            key,
            value,
        })
    }
}

impl<'a> Iterator for Entries<'a> {
    type Item = std::result::Result<EntryRef<'a>, (usize, String)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let e = self.next_entry();
        if e.is_err() {
            self.left = 0;
        } else {
            self.read += 1;
        }
        Some(e)
    }
}

/// [`decode`] for fuzzing and tools: the first sequence number and every entry as
/// (keyspace id, kind byte, key, value) of a WAL record of type `ty`.
#[doc(hidden)]
#[allow(clippy::type_complexity)]
pub fn decode_public(
    ty: u8,
    buf: &[u8],
) -> std::result::Result<(u64, Vec<(u32, u8, Vec<u8>, Vec<u8>)>), (usize, String)> {
    decode(ty, buf).map(|(seq, entries)| {
        let out = entries
            .into_iter()
            .map(|e| (e.ks, e.kind as u8, e.key, e.value))
            .collect();
        (seq, out)
    })
}

/// Decodes the payload of a WAL record of type `ty` ([`log::FULL`], [`log::COMPACT_BATCH`] or
/// [`log::SYNCED_BATCH`])
/// into (first seq, entries); `Err` carries the offset in the payload and the detail.
pub(crate) fn decode(
    ty: u8,
    buf: &[u8],
) -> std::result::Result<(u64, Vec<BatchEntry>), (usize, String)> {
    let mut r = Reader::new(buf);
    let truncated = |at: usize| (at, "truncated batch header".to_string());
    let (seq_at, seq, count, encoding) = match ty {
        log::FULL => {
            let seq = r.u64().ok_or_else(|| truncated(0))?;
            let count = r.u32().ok_or_else(|| truncated(FIXED_HEADER - 4))?;
            (0, seq, count, Encoding::Fixed)
        }
        log::COMPACT_BATCH | log::SYNCED_BATCH => {
            if ty == log::SYNCED_BATCH {
                // The synced length the writer announced (read by the log reader, not here).
                r.varint()
                    .ok_or_else(|| (0, "bad synced-length varint".to_string()))?;
            }
            let seq_at = r.pos();
            let seq = r
                .varint()
                .ok_or_else(|| (seq_at, "bad sequence number varint".to_string()))?;
            let at = r.pos();
            let count = r
                .varint()
                .and_then(|c| u32::try_from(c).ok())
                .ok_or_else(|| (at, "bad entry count varint".to_string()))?;
            (seq_at, seq, count, Encoding::Compact)
        }
        _ => return Err((0, format!("WAL record type {ty} is not a batch"))),
    };
    // Entry i has sequence number seq + i: the last must not pass the largest one.
    let fits = seq
        .checked_add(u64::from(count))
        .is_some_and(|end| end <= MAX_SEQ + 1);
    if !fits {
        return Err((
            seq_at,
            format!("sequence numbers {seq} + {count} entries overflow the largest ({MAX_SEQ})"),
        ));
    }
    let mut it = Entries {
        r,
        left: count,
        read: 0,
        encoding,
    };
    let mut out = Vec::with_capacity((count as usize).min(1 << 16));
    for e in it.by_ref() {
        let e = e?;
        out.push(BatchEntry {
            ks: e.ks,
            kind: e.kind,
            key: e.key.to_vec(),
            value: e.value.to_vec(),
        });
    }
    if !it.r.is_empty() {
        return Err((it.r.pos(), "trailing bytes after batch".into()));
    }
    Ok((seq, out))
}

/// Appends one WAL batch of `count` entries (`entries`, as encoded) whose first has sequence
/// number `seq` to `log`: type [`log::COMPACT_BATCH`] until the log's first completed sync,
/// then [`log::SYNCED_BATCH`] with the length that sync and any later one covered.
pub(crate) fn append_to_log(
    log: &mut log::LogWriter,
    seq: u64,
    count: u32,
    entries: &[u8],
) -> Result<()> {
    let synced = Some(log.synced()).filter(|&n| n > 0);
    let head = CompactHeader::with_synced(synced, seq, count);
    let ty = if synced.is_some() {
        log::SYNCED_BATCH
    } else {
        log::COMPACT_BATCH
    };
    log.add_record_parts(ty, head.as_bytes(), entries)
}

/// The type-1 payload of a batch (`seq: u64 | count: u32 | fixed entries`), as builds before
/// the compact payload wrote it: kept to test that such WALs still replay.
#[cfg(test)]
pub(crate) fn encode_fixed(seq: u64, entries: &[BatchEntry]) -> Vec<u8> {
    let mut out = Vec::with_capacity(FIXED_HEADER);
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&(entries.len() as u32).to_le_bytes());
    for e in entries {
        out.push(e.kind as u8);
        put_varint(&mut out, u64::from(e.ks));
        put_slice(&mut out, &e.key);
        if e.kind == ValueKind::Put {
            put_slice(&mut out, &e.value);
        }
    }
    out
}

/// The type-2 payload of a batch, as the WAL writer appends it (`CompactHeader ‖ entries`).
#[cfg(test)]
pub(crate) fn encode_compact(seq: u64, entries: &[BatchEntry]) -> Vec<u8> {
    let mut rep = Vec::new();
    for e in entries {
        put_entry(&mut rep, e.ks, e.kind, &e.key, &e.value);
    }
    let mut out = CompactHeader::new(seq, entries.len() as u32)
        .as_bytes()
        .to_vec();
    out.extend_from_slice(&rep);
    out
}

#[cfg(test)]
#[allow(clippy::indexing_slicing)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::log::{COMPACT_BATCH, FULL};

    fn e(ks: u32, kind: ValueKind, key: &[u8], value: &[u8]) -> BatchEntry {
        BatchEntry {
            ks,
            kind,
            key: key.to_vec(),
            value: if kind == ValueKind::Put {
                value.to_vec()
            } else {
                Vec::new()
            },
        }
    }

    /// The entries as the write path reads them from an in-memory rep.
    fn borrowed(rep: &[u8], count: u32) -> Vec<BatchEntry> {
        entries(rep, count)
            .map(|r| {
                let r = r.expect("decodes");
                e(r.ks, r.kind, r.key, r.value)
            })
            .collect()
    }

    fn rep_of(es: &[BatchEntry]) -> Vec<u8> {
        let mut rep = Vec::new();
        for x in es {
            put_entry(&mut rep, x.ks, x.kind, &x.key, &x.value);
        }
        rep
    }

    #[test]
    fn single_entries_decode_and_truncation_is_an_error() {
        let mut rep = single(3, ValueKind::Put, b"key", b"value");
        rep.extend_from_slice(&single(9, ValueKind::Delete, b"gone", b"ignored"));
        let want = vec![
            e(3, ValueKind::Put, b"key", b"value"),
            e(9, ValueKind::Delete, b"gone", b""),
        ];
        assert_eq!(borrowed(&rep, 2), want);
        let mut payload = CompactHeader::new(7, 2).as_bytes().to_vec();
        let header = payload.len();
        payload.extend_from_slice(&rep);
        assert_eq!(decode(COMPACT_BATCH, &payload), Ok((7, want)));
        for cut in 0..payload.len() {
            let short = &payload[..cut];
            assert!(decode(COMPACT_BATCH, short).is_err(), "cut at {cut}");
            if cut >= header {
                assert!(
                    entries(&short[header..], 2).any(|e| e.is_err()),
                    "cut at {cut}"
                );
            }
        }
        payload.push(0);
        assert!(decode(COMPACT_BATCH, &payload).is_err(), "trailing byte");
    }

    #[test]
    fn compact_round_trip_of_mixed_batches() {
        let big = vec![0xabu8; 3 << 20];
        let es = vec![
            e(1, ValueKind::Put, b"k1", b"v1"),
            e(1, ValueKind::Delete, b"k1", b""),
            e(0, ValueKind::Put, b"", b""),
            e(2, ValueKind::Put, b"empty value", b""),
            e(63, ValueKind::Put, b"last one-byte tag", b"x"),
            e(64, ValueKind::Put, b"first two-byte tag", b"y"),
            e(64, ValueKind::Delete, b"first two-byte tag", b""),
            e(127, ValueKind::Delete, b"d", b""),
            e(8191, ValueKind::Put, b"two-byte tag", b"z"),
            e(8192, ValueKind::Put, b"three-byte tag", b"z"),
            e(u32::MAX, ValueKind::Put, b"largest id", &big),
            e(u32::MAX, ValueKind::Delete, b"largest id", b""),
            e(5, ValueKind::Put, &[0xff; 300], &big[..200]),
        ];
        let rep = rep_of(&es);
        let n = es.len() as u32;
        assert_eq!(borrowed(&rep, n), es);
        for seq in [0, 1, 127, 128, 1 << 40, MAX_SEQ + 1 - u64::from(n)] {
            let payload = encode_compact(seq, &es);
            let header = CompactHeader::new(seq, n);
            let h = header.as_bytes().len();
            assert_eq!(&payload[..h], header.as_bytes());
            assert_eq!(&payload[h..], &rep[..]);
            assert_eq!(decode(COMPACT_BATCH, &payload), Ok((seq, es.clone())));
            // The same batch in the old encoding decodes to the same entries.
            assert_eq!(decode(FULL, &encode_fixed(seq, &es)), Ok((seq, es.clone())));
        }
        // Tags: one byte for keyspaces below 64, the put bit lowest.
        assert_eq!(single(63, ValueKind::Put, b"", b"")[0], 0x7f);
        assert_eq!(single(63, ValueKind::Delete, b"", b"")[0], 0x7e);
        assert_eq!(single(64, ValueKind::Put, b"", b"")[..2], [0x81, 0x01]);
        // An empty batch is a header alone.
        assert_eq!(decode(COMPACT_BATCH, &[5, 0]), Ok((5, Vec::new())));
    }

    #[test]
    fn a_put_of_16_and_100_bytes_costs_132_bytes_of_wal() {
        let rep = single(1, ValueKind::Put, &[7; 16], &[9; 100]);
        assert_eq!(rep.len(), 1 + 1 + 16 + 1 + 100);
        for (seq, header) in [(1u64, 2usize), (2_000_000, 4), (1 << 28, 6)] {
            let h = CompactHeader::new(seq, 1);
            assert_eq!(h.as_bytes().len(), header, "seq {seq}");
            assert_eq!(
                log::HEADER + h.as_bytes().len() + rep.len(),
                9 + header + 119
            );
        }
        // The type-1 record of the same put: 141 bytes.
        let old = encode_fixed(1, &[e(1, ValueKind::Put, &[7; 16], &[9; 100])]);
        assert_eq!(log::HEADER + old.len(), 141);
    }

    /// Payloads written out byte by byte from docs/format.md.
    #[test]
    fn documented_bytes_decode() {
        #[rustfmt::skip]
        let fixed: &[u8] = &[
            0x2a, 0, 0, 0, 0, 0, 0, 0, // seq 42
            2, 0, 0, 0, // count 2
            1, 3, 1, b'a', 2, b'v', b'w', // put, ks 3, "a" -> "vw"
            0, 0x80, 0x01, 1, b'b', // delete, ks 128, "b"
        ];
        #[rustfmt::skip]
        let compact: &[u8] = &[
            0x2a, // seq 42
            2, // count 2
            7, 1, b'a', 2, b'v', b'w', // tag 3 << 1 | 1, "a" -> "vw"
            0x80, 0x02, 1, b'b', // tag 128 << 1 | 0, "b"
        ];
        let want = vec![
            e(3, ValueKind::Put, b"a", b"vw"),
            e(128, ValueKind::Delete, b"b", b""),
        ];
        assert_eq!(decode(FULL, fixed), Ok((42, want.clone())));
        assert_eq!(decode(COMPACT_BATCH, compact), Ok((42, want.clone())));
        assert_eq!(encode_fixed(42, &want), fixed);
        assert_eq!(encode_compact(42, &want), compact);
    }

    /// Every kind of malformed compact payload is an error at its offset, never a panic.
    #[test]
    fn malformed_compact_payloads_are_errors() {
        let over = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02];
        let mut overflowing_seq = over.to_vec();
        overflowing_seq.push(0);
        let mut big_count = vec![1];
        put_varint(&mut big_count, u64::from(u32::MAX) + 1);
        let mut ks_overflow = vec![1, 1];
        put_varint(&mut ks_overflow, ((u64::from(u32::MAX) + 1) << 1) | 1);
        ks_overflow.extend_from_slice(&[1, b'k', 1, b'v']);
        let mut max_seq = Vec::new();
        put_varint(&mut max_seq, MAX_SEQ);
        let mut past_max_seq = max_seq.clone();
        past_max_seq.extend_from_slice(&[2, 0, 0, 0, 0]); // two deletes of "" from MAX_SEQ
        max_seq.extend_from_slice(&[1, 0, 0]); // one delete at MAX_SEQ: fine
        let mut u64_max_seq = Vec::new();
        put_varint(&mut u64_max_seq, u64::MAX);
        u64_max_seq.extend_from_slice(&[1, 0, 0]);
        let tag_over = [&[1u8, 1][..], &over[..]].concat();
        #[rustfmt::skip]
        let cases: Vec<(&str, Vec<u8>, usize, &str)> = vec![
            ("empty", vec![], 0, "bad sequence number varint"),
            ("seq varint unterminated", vec![0x80, 0x80], 0, "bad sequence number varint"),
            ("seq varint overflows u64", overflowing_seq, 0, "bad sequence number varint"),
            ("seq varint of 11 bytes", vec![0xff; 11], 0, "bad sequence number varint"),
            ("count missing", vec![1], 1, "bad entry count varint"),
            ("count unterminated", vec![1, 0x81], 1, "bad entry count varint"),
            ("count above u32", big_count, 1, "bad entry count varint"),
            ("count above entries", vec![1, 2, 1, 1, b'k', 1, b'v'], 7, "ends after 1 entries of the 2"),
            ("count without entries", vec![1, 1], 2, "ends after 0 entries of the 1"),
            ("count below entries", vec![1, 1, 0, 1, b'k', 0, 1, b'j'], 5, "trailing bytes"),
            ("trailing byte", vec![1, 0, 0], 2, "trailing bytes"),
            ("tag varint unterminated", vec![1, 1, 0x81], 2, "bad entry tag varint"),
            ("tag varint overflows u64", tag_over, 2, "bad entry tag varint"),
            ("keyspace id overflow", ks_overflow, 2, "keyspace id overflow"),
            ("key length past end", vec![1, 1, 1, 5, b'k'], 2, "truncated key"),
            ("key length unterminated", vec![1, 1, 1, 0x80], 2, "truncated key"),
            ("value missing", vec![1, 1, 1, 1, b'k'], 2, "truncated value"),
            ("value length past end", vec![1, 1, 1, 1, b'k', 3, b'v'], 2, "truncated value"),
            ("seq + count past MAX_SEQ", past_max_seq, 0, "overflow the largest"),
            ("seq + count past u64", u64_max_seq, 0, "overflow the largest"),
        ];
        for (what, payload, offset, detail) in cases {
            match decode(COMPACT_BATCH, &payload) {
                Err((o, d)) => {
                    assert_eq!(o, offset, "{what}: {d}");
                    assert!(d.contains(detail), "{what}: {d}");
                }
                Ok(x) => panic!("{what}: decoded {x:?}"),
            }
            // The same payload after a two-byte synced length (type 3): offsets move by two.
            let synced = [[0x80, 0x01].as_slice(), &payload].concat();
            match decode(log::SYNCED_BATCH, &synced) {
                Err((o, d)) => {
                    assert_eq!(o, offset + 2, "type 3, {what}: {d}");
                    assert!(d.contains(detail), "type 3, {what}: {d}");
                }
                Ok(x) => panic!("type 3, {what}: decoded {x:?}"),
            }
        }
        let err = decode(log::SYNCED_BATCH, &[0x80]).expect_err("synced length unterminated");
        assert_eq!(err, (0, "bad synced-length varint".to_string()));
        assert_eq!(
            decode(COMPACT_BATCH, &max_seq),
            Ok((MAX_SEQ, vec![e(0, ValueKind::Delete, b"", b"")]))
        );
        let err = decode(4, &[1, 0]).expect_err("not a batch type");
        assert!(err.1.contains("type 4"), "{err:?}");
    }

    fn arb_entry() -> impl Strategy<Value = BatchEntry> {
        let ks = prop_oneof![0u32..70, 60u32..200, any::<u32>()];
        let key = prop::collection::vec(any::<u8>(), 0..40);
        let value = prop_oneof![
            prop::collection::vec(any::<u8>(), 0..8),
            prop::collection::vec(any::<u8>(), 100..400),
        ];
        (ks, any::<bool>(), key, value).prop_map(|(ks, put, key, value)| {
            let kind = if put {
                ValueKind::Put
            } else {
                ValueKind::Delete
            };
            e(ks, kind, &key, &value)
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// Model: what was encoded is what decodes, in both encodings, and the write path's
        /// borrowed view agrees; cuts of a compact payload are errors.
        #[test]
        fn decoded_entries_are_the_input(
            es in prop::collection::vec(arb_entry(), 0..24),
            seq in prop_oneof![0u64..1000, (MAX_SEQ - 1000)..=(MAX_SEQ - 23)],
        ) {
            let n = es.len() as u32;
            let rep = rep_of(&es);
            prop_assert_eq!(&borrowed(&rep, n), &es);
            let payload = encode_compact(seq, &es);
            prop_assert_eq!(decode(COMPACT_BATCH, &payload), Ok((seq, es.clone())));
            prop_assert_eq!(decode(FULL, &encode_fixed(seq, &es)), Ok((seq, es.clone())));
            prop_assert_eq!(
                decode_public(COMPACT_BATCH, &payload).map(|(_, v)| v.len()),
                Ok(es.len())
            );
            if !es.is_empty() {
                for cut in [0, payload.len() / 3, payload.len() / 2, payload.len() - 1] {
                    prop_assert!(decode(COMPACT_BATCH, &payload[..cut]).is_err());
                }
            }
        }

        /// Arbitrary bytes never panic, in either encoding, and what decodes lies in the input.
        #[test]
        fn arbitrary_payloads_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
            for ty in [FULL, COMPACT_BATCH] {
                if let Ok((_, es)) = decode(ty, &bytes) {
                    let n: usize = es.iter().map(|e| e.key.len() + e.value.len()).sum();
                    prop_assert!(n <= bytes.len());
                }
            }
        }
    }

    /// The writer announces the length its last completed sync covered in every batch after
    /// it, and a batch decodes the same under either type.
    #[test]
    fn batches_after_a_sync_announce_what_it_covered() {
        let (dir, mut w) = log::temp_log();
        let path = dir.path().join("000001.log");
        let entries = vec![BatchEntry {
            ks: 3,
            kind: ValueKind::Put,
            key: b"k".to_vec(),
            value: b"v".to_vec(),
        }];
        let payload = encode_compact(7, &entries);
        let rest = payload.get(2..).expect("entries after the 2-byte header");
        append_to_log(&mut w, 7, 1, rest).expect("append");
        w.sync().expect("sync");
        let synced = w.len();
        append_to_log(&mut w, 7, 1, rest).expect("append");
        append_to_log(&mut w, 7, 1, rest).expect("append");
        w.finish().expect("finish");
        drop(w);
        let data = std::fs::read(&path).expect("read");
        let (recs, end) = log::read_wal_records(&data);
        assert_eq!(end, log::LogEnd::Clean);
        let types: Vec<u8> = recs.iter().map(|(t, _)| *t).collect();
        assert_eq!(types, [COMPACT_BATCH, log::SYNCED_BATCH, log::SYNCED_BATCH]);
        for (ty, p) in &recs {
            assert_eq!(decode(*ty, p), Ok((7, entries.clone())));
        }
        let mut r = crate::coding::Reader::new(recs[1].1);
        assert_eq!(r.varint(), Some(synced));
    }
}
