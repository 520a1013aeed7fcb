//! Write batches: puts and deletes across keyspaces applied atomically, and their WAL encoding
//! (`seq: u64 | count: u32 | entries`, see docs/format.md).

use smallvec::SmallVec;

use crate::coding::{put_slice, put_varint, Reader};
use crate::error::{Error, Result};
use crate::key::ValueKind;
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

/// Bytes of the batch header (`seq: u64 | count: u32`) before the entries.
pub(crate) const BATCH_HEADER: usize = 12;

/// One decoded operation (recovery, tools).
#[derive(Debug, Clone)]
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
/// Held encoded, in the WAL payload format (docs/format.md) with a zero sequence number that
/// the write path fills in: a write appends the bytes to the WAL as they are.
#[derive(Debug, Clone, Default)]
pub struct WriteBatch {
    /// `seq: u64 (0 until written) | count: u32 | entries`, or empty while the batch is empty.
    pub(crate) rep: Vec<u8>,
    pub(crate) count: u32,
    /// Keyspaces named by the entries, each once (the write path needs them before it logs).
    pub(crate) ks_ids: KsIds,
    pub(crate) user_bytes: u64,
    pub(crate) db_id: Option<usize>,
    pub(crate) error: Option<String>,
}

/// Appends one entry in the batch encoding.
fn put_entry(out: &mut Vec<u8>, ks: u32, kind: ValueKind, key: &[u8], value: &[u8]) {
    out.push(kind as u8);
    put_varint(out, u64::from(ks));
    put_slice(out, key);
    if kind == ValueKind::Put {
        put_slice(out, value);
    }
}

/// Writes `count` into an encoded batch's header.
fn set_count(rep: &mut [u8], count: u32) {
    if let Some(c) = rep.get_mut(8..BATCH_HEADER) {
        c.copy_from_slice(&count.to_le_bytes());
    }
}

/// The encoding of a batch of one operation (the `put`/`delete` fast path: one allocation).
pub(crate) fn single(ks: u32, kind: ValueKind, key: &[u8], value: &[u8]) -> Vec<u8> {
    let mut rep = Vec::with_capacity(BATCH_HEADER + 1 + 5 + 10 + key.len() + 10 + value.len());
    rep.resize(BATCH_HEADER, 0);
    set_count(&mut rep, 1);
    put_entry(&mut rep, ks, kind, key, value);
    rep
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
        if let Err(e) = check_key(key).and_then(|_| check_value(value)) {
            self.error = Some(e.to_string());
            return;
        }
        if self.rep.is_empty() {
            self.rep.resize(BATCH_HEADER, 0);
        }
        put_entry(&mut self.rep, ks.id(), kind, key, value);
        if self.rep.len() > MAX_BATCH_BYTES {
            self.error = Some(format!("batch exceeds {MAX_BATCH_BYTES} bytes"));
            self.rep = Vec::new();
            self.count = 0;
            return;
        }
        self.count += 1;
        set_count(&mut self.rep, self.count);
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
    }

    /// Σ key+value bytes of puts + key bytes of deletes.
    pub(crate) fn user_bytes(&self) -> u64 {
        self.user_bytes
    }
}

/// The operations of an encoded batch (`rep`, header included), borrowed.
pub(crate) fn entries(rep: &[u8]) -> Entries<'_> {
    let mut r = Reader::new(rep);
    let left = match r.u64() {
        Some(_) => r.u32().unwrap_or(0),
        None => 0,
    };
    Entries { r, left }
}

/// Iterator of [`entries`]: `Err((offset, detail))` on malformed bytes, then nothing.
pub(crate) struct Entries<'a> {
    r: Reader<'a>,
    left: u32,
}

impl<'a> Entries<'a> {
    fn next_entry(&mut self) -> std::result::Result<EntryRef<'a>, (usize, String)> {
        let at = self.r.pos();
        let bad = |d: &str| (at, d.to_string());
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
        }
        Some(e)
    }
}

/// [`decode`] for fuzzing and tools: the first sequence number and every entry as
/// (keyspace id, kind byte, key, value).
#[doc(hidden)]
#[allow(clippy::type_complexity)]
pub fn decode_public(
    buf: &[u8],
) -> std::result::Result<(u64, Vec<(u32, u8, Vec<u8>, Vec<u8>)>), (usize, String)> {
    decode(buf).map(|(seq, entries)| {
        let out = entries
            .into_iter()
            .map(|e| (e.ks, e.kind as u8, e.key, e.value))
            .collect();
        (seq, out)
    })
}

/// Decodes a WAL payload into (first seq, entries); `Err` carries the offset and detail.
pub(crate) fn decode(buf: &[u8]) -> std::result::Result<(u64, Vec<BatchEntry>), (usize, String)> {
    let mut r = Reader::new(buf);
    let seq = r.u64().ok_or((0, "truncated batch header".to_string()))?;
    let n = r.u32().ok_or((8, "truncated batch header".to_string()))?;
    let mut it = entries(buf);
    let mut out = Vec::with_capacity((n as usize).min(1 << 16));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_entries_decode_and_truncation_is_an_error() {
        let mut rep = single(3, ValueKind::Put, b"key", b"value");
        rep.extend_from_slice(&single(9, ValueKind::Delete, b"gone", b"ignored")[BATCH_HEADER..]);
        set_count(&mut rep, 2);
        let (seq, es) = decode(&rep).expect("decodes");
        assert_eq!(seq, 0);
        let got: Vec<(u32, ValueKind, &[u8], &[u8])> = es
            .iter()
            .map(|e| (e.ks, e.kind, &e.key[..], &e.value[..]))
            .collect();
        assert_eq!(
            got,
            vec![
                (3, ValueKind::Put, &b"key"[..], &b"value"[..]),
                (9, ValueKind::Delete, &b"gone"[..], &b""[..])
            ]
        );
        for cut in BATCH_HEADER..rep.len() {
            let short = rep.get(..cut).expect("in range");
            assert!(decode(short).is_err(), "cut at {cut}");
            assert!(entries(short).any(|e| e.is_err()), "cut at {cut}");
        }
        rep.push(0);
        assert!(decode(&rep).is_err(), "trailing byte");
    }
}
