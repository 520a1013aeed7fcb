//! Blocks of a sorted table: prefix-compressed entries with restart points, a type byte and a
//! masked CRC32C trailer. A block is decoded once when it is read and kept decoded in the cache.

use std::cmp::Ordering;

use crate::coding::{crc, get_u32, put_u32, put_varint, Reader};

/// Bytes after a block's contents: type (1) + crc (4).
pub const TRAILER: usize = 5;
/// Block type byte: no compression (the only type in format version 1).
pub const TYPE_PLAIN: u8 = 0;

/// Builds one block.
pub struct BlockBuilder {
    buf: Vec<u8>,
    restarts: Vec<u32>,
    restart_interval: usize,
    counter: usize,
    last_key: Vec<u8>,
    entries: usize,
}

impl BlockBuilder {
    /// A builder with a restart point every `restart_interval` entries.
    pub fn new(restart_interval: usize) -> Self {
        BlockBuilder {
            buf: Vec::with_capacity(4096 + 512),
            restarts: vec![0],
            restart_interval: restart_interval.max(1),
            counter: 0,
            last_key: Vec::new(),
            entries: 0,
        }
    }
    /// Appends an entry; keys must be added in increasing order.
    pub fn add(&mut self, key: &[u8], value: &[u8]) {
        let mut shared = 0;
        if self.counter < self.restart_interval {
            shared = self
                .last_key
                .iter()
                .zip(key)
                .take_while(|(a, b)| a == b)
                .count();
        } else {
            self.restarts.push(self.buf.len() as u32);
            self.counter = 0;
        }
        put_varint(&mut self.buf, shared as u64);
        put_varint(&mut self.buf, (key.len() - shared) as u64);
        put_varint(&mut self.buf, value.len() as u64);
        self.buf
            .extend_from_slice(key.get(shared..).unwrap_or_default());
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
        out.push(TYPE_PLAIN);
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

/// A decoded block: every key materialized, values referencing the raw contents.
#[derive(Debug)]
pub struct Block {
    data: Vec<u8>,
    keys: Vec<u8>,
    ents: Vec<[u32; 4]>,
}

impl Block {
    /// Verifies the trailer and decodes all entries. Errors are `(offset within block, detail)`.
    pub fn decode(raw: Vec<u8>) -> Result<Block, (usize, String)> {
        let n = raw.len();
        if n < TRAILER + 4 {
            return Err((0, format!("block of {n} bytes is too short")));
        }
        let body_end = n - 4;
        let stored = get_u32(&raw, body_end).ok_or((body_end, "truncated crc".to_string()))?;
        let body = raw.get(..body_end).unwrap_or_default();
        if crc(body) != stored {
            return Err((body_end, "block checksum mismatch".into()));
        }
        let ty = raw.get(body_end - 1).copied().unwrap_or(0xff);
        if ty != TYPE_PLAIN {
            return Err((body_end - 1, format!("unknown block type {ty}")));
        }
        let contents_end = body_end - 1;
        let nr = get_u32(&raw, contents_end - 4).ok_or((0, "truncated".to_string()))? as usize;
        let restarts_bytes = nr
            .checked_mul(4)
            .and_then(|b| b.checked_add(4))
            .filter(|&b| b <= contents_end && nr >= 1)
            .ok_or((contents_end - 4, format!("bad restart count {nr}")))?;
        let entries_end = contents_end - restarts_bytes;
        let mut keys: Vec<u8> = Vec::with_capacity(entries_end);
        let mut ents = Vec::new();
        let mut r = Reader::new(raw.get(..entries_end).unwrap_or_default());
        let mut last: (usize, usize) = (0, 0);
        while !r.is_empty() {
            let at = r.pos();
            let bad = |d: &str| (at, d.to_string());
            let shared = r.len().ok_or_else(|| bad("bad entry header"))?;
            let non_shared = r.len().ok_or_else(|| bad("bad entry header"))?;
            let vlen = r.len().ok_or_else(|| bad("bad entry header"))?;
            if shared > last.1 {
                return Err(bad("shared prefix longer than previous key"));
            }
            let delta = r
                .bytes(non_shared)
                .ok_or_else(|| bad("key runs past block"))?;
            let voff = r.pos();
            r.bytes(vlen).ok_or_else(|| bad("value runs past block"))?;
            let koff = keys.len();
            keys.extend_from_within(last.0..last.0 + shared);
            keys.extend_from_slice(delta);
            let klen = shared + non_shared;
            ents.push([koff as u32, klen as u32, voff as u32, vlen as u32]);
            last = (koff, klen);
        }
        let mut data = raw;
        data.truncate(entries_end);
        Ok(Block { data, keys, ents })
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
    /// Memory held, for the cache's weigher.
    pub fn weight(&self) -> usize {
        self.data.len() + self.keys.len() + self.ents.len() * 16 + 64
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
