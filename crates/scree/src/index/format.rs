//! The index's bytes (docs/format.md, "Compact three-level index (semisorted)"): a version, the
//! counts, the three levels' bit arrays, and a masked CRC32C of everything before it. Parsing
//! checks the checksum, then that every count and length agrees with the bytes present, before
//! anything is allocated by a count read from them.

use std::path::Path;

use crate::coding::{crc, get_u32, put_u32, put_u64, put_varint, Reader};
use crate::error::{Error, Result};

/// The format version this build writes; it reads this one and version 1 (which has no
/// shared leading bits: a table's prefix hashes were bucketed by their own top bits).
pub(crate) const VERSION: u8 = 2;

/// The largest number of bucket bits a reader accepts.
pub(crate) const MAX_BUCKET_BITS: u8 = 32;

/// The index as stored: what the builder produces and the reader loads.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Parts {
    pub(crate) num_entries: u64,
    pub(crate) num_blocks: u32,
    pub(crate) num_groups: u32,
    pub(crate) bucket_bits: u8,
    /// Leading bits every prefix hash of the table shares (0..=63), and those bits (the rest
    /// zero): level 1 holds the hashes shifted left past them, so that its buckets split the
    /// table's own hash range (a merge's output table covers a narrow one).
    pub(crate) shared_bits: u8,
    pub(crate) shared_top: u64,
    /// Level 1: per bucket, its key count and its trie's length in bits; the code stream.
    pub(crate) bucket_counts: Vec<u64>,
    pub(crate) bucket_bit_lens: Vec<u64>,
    pub(crate) trie_words: Vec<u64>,
    pub(crate) trie_len: u64,
    /// Level 2: `num_groups + num_blocks − 1` group-end bits (none without groups) and
    /// `num_blocks` continuation bits.
    pub(crate) last_words: Vec<u64>,
    pub(crate) cont_words: Vec<u64>,
    /// Level 3: one length per continuation bit, and the separators' bits.
    pub(crate) sep_lens: Vec<u8>,
    pub(crate) sep_words: Vec<u64>,
    pub(crate) sep_len: u64,
}

/// Where each level starts in the bytes, for naming offsets in errors.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Offsets {
    pub(crate) level1: u64,
    pub(crate) level2: u64,
    pub(crate) level3: u64,
}

impl Parts {
    /// Bits of the group-end array.
    pub(crate) fn last_len(&self) -> u64 {
        last_len(self.num_groups, self.num_blocks)
    }
}

fn last_len(groups: u32, blocks: u32) -> u64 {
    if groups == 0 {
        0
    } else {
        u64::from(groups) + u64::from(blocks).saturating_sub(1)
    }
}

fn put_words(out: &mut Vec<u8>, words: &[u64]) {
    for &w in words {
        put_u64(out, w);
    }
}

/// The index's bytes.
pub(crate) fn encode(p: &Parts) -> Vec<u8> {
    let mut out = Vec::new();
    out.push(VERSION);
    put_varint(&mut out, p.num_entries);
    put_varint(&mut out, u64::from(p.num_blocks));
    put_varint(&mut out, u64::from(p.num_groups));
    out.push(p.bucket_bits);
    out.push(p.shared_bits);
    put_u64(&mut out, p.shared_top);
    for &c in &p.bucket_counts {
        put_varint(&mut out, c);
    }
    for &l in &p.bucket_bit_lens {
        put_varint(&mut out, l);
    }
    put_words(&mut out, &p.trie_words);
    put_words(&mut out, &p.last_words);
    put_words(&mut out, &p.cont_words);
    out.extend_from_slice(&p.sep_lens);
    put_words(&mut out, &p.sep_words);
    let c = crc(&out);
    put_u32(&mut out, c);
    out
}

/// Parses `bytes`, found at `offset` in `file`.
pub(crate) fn decode(bytes: &[u8], file: &Path, offset: u64) -> Result<(Parts, Offsets)> {
    let bad =
        |pos: usize, what: &str| Error::corruption(file, offset.saturating_add(pos as u64), what);
    if bytes.len() < 5 {
        return Err(bad(
            0,
            "compact index: shorter than its version and checksum",
        ));
    }
    let body_len = bytes.len() - 4;
    let body = bytes.get(..body_len).unwrap_or_default();
    if get_u32(bytes, body_len) != Some(crc(body)) {
        return Err(bad(0, "compact index: checksum mismatch"));
    }
    let mut r = Reader::new(body);
    let version = r.u8().ok_or_else(|| bad(0, "compact index: no version"))?;
    if version != 1 && version != VERSION {
        return Err(bad(0, &format!("compact index: unknown version {version}")));
    }
    let mut p = Parts::default();
    let mut offs = Offsets::default();
    let counts = (|| {
        let entries = r.varint()?;
        let blocks = u32::try_from(r.varint()?).ok()?;
        let groups = u32::try_from(r.varint()?).ok()?;
        let bb = r.u8()?;
        let shared = match version {
            1 => (0, 0),
            _ => (r.u8()?, r.u64()?),
        };
        Some((entries, blocks, groups, bb, shared))
    })();
    let (entries, blocks, groups, bb, (shared_bits, shared_top)) =
        counts.ok_or_else(|| bad(r.pos(), "compact index: truncated counts"))?;
    if shared_bits > 63 || shared_top & (u64::MAX >> shared_bits) != 0 {
        return Err(bad(1, "compact index: bad shared leading bits"));
    }
    if bb > MAX_BUCKET_BITS
        || (groups == 0) != (blocks == 0)
        || (groups == 0) != (entries == 0)
        || entries < u64::from(groups).max(u64::from(blocks))
    {
        return Err(bad(1, "compact index: inconsistent counts"));
    }
    p.num_entries = entries;
    p.num_blocks = blocks;
    p.num_groups = groups;
    p.bucket_bits = bb;
    p.shared_bits = shared_bits;
    p.shared_top = shared_top;

    let level1 = r.pos();
    offs.level1 = offset.saturating_add(level1 as u64);
    // Each bucket takes at least two bytes: refuse counts the bytes cannot hold before
    // allocating for them.
    let buckets = 1usize.checked_shl(u32::from(bb)).unwrap_or(usize::MAX);
    if buckets.saturating_mul(2) > body_len - r.pos() {
        return Err(bad(r.pos(), "compact index: bucket directory past the end"));
    }
    let varints =
        |n: usize, r: &mut Reader<'_>| -> Option<Vec<u64>> { (0..n).map(|_| r.varint()).collect() };
    p.bucket_counts =
        varints(buckets, &mut r).ok_or_else(|| bad(r.pos(), "compact index: truncated buckets"))?;
    p.bucket_bit_lens =
        varints(buckets, &mut r).ok_or_else(|| bad(r.pos(), "compact index: truncated buckets"))?;
    let total = p
        .bucket_counts
        .iter()
        .try_fold(0u64, |a, &c| a.checked_add(c));
    if total != Some(u64::from(groups)) {
        return Err(bad(
            level1,
            "compact index: bucket key counts do not add up to the group count",
        ));
    }
    p.trie_len = p
        .bucket_bit_lens
        .iter()
        .try_fold(0u64, |a, &c| a.checked_add(c))
        .ok_or_else(|| bad(r.pos(), "compact index: trie length overflows"))?;
    p.trie_words = words(&mut r, p.trie_len).map_err(|w| bad(r.pos(), w))?;

    offs.level2 = offset.saturating_add(r.pos() as u64);
    p.last_words = words(&mut r, p.last_len()).map_err(|w| bad(r.pos(), w))?;
    p.cont_words = words(&mut r, u64::from(blocks)).map_err(|w| bad(r.pos(), w))?;

    offs.level3 = offset.saturating_add(r.pos() as u64);
    let seps: u64 = p.cont_words.iter().map(|w| u64::from(w.count_ones())).sum();
    let lens = usize::try_from(seps)
        .ok()
        .and_then(|n| r.bytes(n))
        .ok_or_else(|| bad(r.pos(), "compact index: truncated separator lengths"))?;
    p.sep_lens = lens.to_vec();
    p.sep_len = p.sep_lens.iter().map(|&l| u64::from(l)).sum();
    p.sep_words = words(&mut r, p.sep_len).map_err(|w| bad(r.pos(), w))?;
    if !r.is_empty() {
        return Err(bad(r.pos(), "compact index: bytes after the last level"));
    }
    Ok((p, offs))
}

/// Reads the words of a `bits`-bit array; its unused bits must be zero.
fn words(r: &mut Reader<'_>, bits: u64) -> std::result::Result<Vec<u64>, &'static str> {
    let n = usize::try_from(bits.div_ceil(64)).map_err(|_| "compact index: bit array too long")?;
    let raw = r
        .bytes(
            n.checked_mul(8)
                .ok_or("compact index: bit array too long")?,
        )
        .ok_or("compact index: truncated bit array")?;
    let words: Vec<u64> = raw
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()))
        .collect();
    let tail = bits % 64;
    if tail != 0 && words.last().is_some_and(|&w| w >> tail != 0) {
        return Err("compact index: bits set past the end of a bit array");
    }
    Ok(words)
}
