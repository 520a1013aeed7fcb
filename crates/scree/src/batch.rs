//! Write batches: puts and deletes across keyspaces applied atomically, and their WAL encoding
//! (`seq: u64 | count: u32 | entries`, see docs/format.md).

use crate::coding::{put_slice, put_u32, put_u64, put_varint, Reader};
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

#[derive(Debug, Clone)]
pub(crate) struct BatchEntry {
    pub ks: u32,
    pub kind: ValueKind,
    pub key: Vec<u8>,
    pub value: Vec<u8>,
}

/// Puts and deletes, possibly in several keyspaces, applied all or nothing by `Db::write`.
#[derive(Debug, Clone, Default)]
pub struct WriteBatch {
    pub(crate) entries: Vec<BatchEntry>,
    pub(crate) db_id: Option<usize>,
    pub(crate) bytes: usize,
    pub(crate) error: Option<String>,
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
        self.bytes += key.len() + value.len() + 16;
        if self.bytes > MAX_BATCH_BYTES {
            self.error = Some(format!("batch exceeds {MAX_BATCH_BYTES} bytes"));
            return;
        }
        self.entries.push(BatchEntry {
            ks: ks.id(),
            kind,
            key: key.to_vec(),
            value: value.to_vec(),
        });
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
        self.entries.len()
    }

    /// Whether the batch is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Removes every operation.
    pub fn clear(&mut self) {
        self.entries.clear();
        self.bytes = 0;
        self.error = None;
    }

    /// Σ key+value bytes of puts + key bytes of deletes.
    pub(crate) fn user_bytes(&self) -> u64 {
        self.entries
            .iter()
            .map(|e| (e.key.len() + e.value.len()) as u64)
            .sum()
    }
}

/// Encodes a batch with its first sequence number as a WAL payload.
pub(crate) fn encode(entries: &[BatchEntry], seq: u64, out: &mut Vec<u8>) {
    put_u64(out, seq);
    put_u32(out, entries.len() as u32);
    for e in entries {
        out.push(e.kind as u8);
        put_varint(out, u64::from(e.ks));
        put_slice(out, &e.key);
        if e.kind == ValueKind::Put {
            put_slice(out, &e.value);
        }
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
    let mut entries = Vec::with_capacity((n as usize).min(1 << 16));
    for _ in 0..n {
        let at = r.pos();
        let bad = |d: &str| (at, d.to_string());
        let kind = r
            .u8()
            .and_then(ValueKind::from_u8)
            .ok_or_else(|| bad("bad entry kind"))?;
        let ks = r
            .varint()
            .and_then(|v| u32::try_from(v).ok())
            .ok_or_else(|| bad("bad keyspace id"))?;
        let key = r.slice().ok_or_else(|| bad("truncated key"))?.to_vec();
        let value = if kind == ValueKind::Put {
            r.slice().ok_or_else(|| bad("truncated value"))?.to_vec()
        } else {
            Vec::new()
        };
        entries.push(BatchEntry {
            ks,
            kind,
            key,
            value,
        });
    }
    if !r.is_empty() {
        return Err((r.pos(), "trailing bytes after batch".into()));
    }
    Ok((seq, entries))
}
