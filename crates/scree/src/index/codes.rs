//! The codes of the entropy-coded trie's nodes (SILT's ECT): a node holding `n` keys is stored
//! as the number `l` of its keys whose next hash bit is 0. For uniformly distributed hashes `l`
//! follows Binomial(n, ½), so:
//!
//! - `n ≤ 16`: a canonical Huffman code built from the weights `C(n, l)`, `l = 0..=n`
//!   ([`huffman_lengths`] says exactly how, because the lengths are part of the format);
//! - `n > 16`: order-0 Exp-Golomb of the zigzagged distance `l − ⌊n/2⌋`.
//!
//! Nodes of `n ≤ 1` keys are never coded. The tables are built once per process from the
//! lengths and shared by every index.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::LazyLock;

use super::bits::{BitReader, BitWriter};

/// The largest node size coded with a Huffman table.
pub(crate) const HUFFMAN_MAX_N: usize = 16;

/// Code lengths of Huffman's algorithm over symbols `0..=n` weighted `C(n, l)`: repeatedly
/// merge the two lightest nodes; equal weights are taken leaves first (by symbol), then merged
/// nodes in the order they were made. A symbol's length is its depth in the final tree.
pub(crate) fn huffman_lengths(n: usize) -> Vec<u8> {
    let mut lengths = vec![0u8; n + 1];
    // (weight, kind: 0 leaf / 1 merged, id) ordered smallest first; members say which symbols
    // each node holds.
    let mut heap = BinaryHeap::new();
    let mut members: Vec<Vec<usize>> = Vec::new();
    let mut c = 1u64;
    for l in 0..=n {
        heap.push(Reverse((c, 0u8, l)));
        members.push(vec![l]);
        // C(n, l + 1) from C(n, l).
        c = c * (n - l) as u64 / (l as u64 + 1);
    }
    let mut merged = 0usize;
    while heap.len() > 1 {
        let (Some(Reverse(a)), Some(Reverse(b))) = (heap.pop(), heap.pop()) else {
            break;
        };
        let mut syms = Vec::new();
        for (_, kind, id) in [a, b] {
            let idx = if kind == 0 { id } else { n + 1 + id };
            if let Some(m) = members.get(idx) {
                syms.extend_from_slice(m);
            }
        }
        for &s in &syms {
            if let Some(len) = lengths.get_mut(s) {
                *len += 1;
            }
        }
        members.push(syms);
        heap.push(Reverse((a.0 + b.0, 1, merged)));
        merged += 1;
    }
    lengths
}

/// A canonical Huffman code: codes of one length are consecutive integers, assigned in symbol
/// order, shorter lengths first.
#[derive(Debug)]
struct Table {
    /// Per symbol: (code, length).
    codes: Vec<(u32, u8)>,
    /// Per length 0..=max: the first code of that length and how many codes have it.
    first: Vec<u32>,
    count: Vec<u32>,
    /// Per length: index into `symbols` of its first symbol.
    offset: Vec<u32>,
    /// Symbols sorted by (length, symbol).
    symbols: Vec<u8>,
    /// The decoding table of codes up to [`FAST_BITS`] long, indexed by the next
    /// `FAST_BITS` bits in stream order (the first bit the lowest): `symbol << 8 | length`, or
    /// 0 where the code is longer (decoded bit by bit).
    fast: Vec<u16>,
}

/// Bits a [`Table`]'s fast decoding table looks at: codes this short are decoded with one
/// lookup; longer ones (the least likely counts) bit by bit.
const FAST_BITS: u32 = 8;

impl Table {
    fn new(lengths: &[u8]) -> Table {
        let max = lengths.iter().copied().max().unwrap_or(0) as usize;
        let mut count = vec![0u32; max + 1];
        for &l in lengths {
            if let Some(c) = count.get_mut(l as usize) {
                *c += 1;
            }
        }
        let mut first = vec![0u32; max + 1];
        let mut offset = vec![0u32; max + 1];
        let (mut code, mut off) = (0u32, 0u32);
        for len in 1..=max {
            let c = count.get(len).copied().unwrap_or(0);
            if let (Some(f), Some(o)) = (first.get_mut(len), offset.get_mut(len)) {
                *f = code;
                *o = off;
            }
            code = (code + c) << 1;
            off += c;
        }
        let mut symbols: Vec<u8> = (0..lengths.len() as u8).collect();
        symbols.sort_by_key(|&s| (lengths.get(s as usize).copied().unwrap_or(0), s));
        let mut codes = vec![(0u32, 0u8); lengths.len()];
        let mut next = first.clone();
        for &s in &symbols {
            let len = lengths.get(s as usize).copied().unwrap_or(0);
            if let (Some(slot), Some(n)) = (codes.get_mut(s as usize), next.get_mut(len as usize)) {
                *slot = (*n, len);
                *n += 1;
            }
        }
        let mut fast = vec![0u16; 1 << FAST_BITS];
        for (sym, &(code, len)) in codes.iter().enumerate() {
            let len = u32::from(len);
            if len == 0 || len > FAST_BITS {
                continue;
            }
            // The code's first (most significant) bit is the stream's first, index bit 0.
            let stream = (0..len).fold(0usize, |acc, j| {
                acc | ((((code >> (len - 1 - j)) & 1) as usize) << j)
            });
            for high in 0..1usize << (FAST_BITS - len) {
                if let Some(slot) = fast.get_mut(stream | high << len) {
                    *slot = (sym as u16) << 8 | len as u16;
                }
            }
        }
        Table {
            codes,
            first,
            count,
            offset,
            symbols,
            fast,
        }
    }
}

/// Tables for n = 2..=HUFFMAN_MAX_N, at index n − 2.
static TABLES: LazyLock<Vec<Table>> = LazyLock::new(|| {
    (2..=HUFFMAN_MAX_N)
        .map(|n| Table::new(&huffman_lengths(n)))
        .collect()
});

fn zigzag(d: i64) -> u64 {
    if d >= 0 {
        (d as u64) << 1
    } else {
        ((-(d + 1)) as u64) << 1 | 1
    }
}

fn unzigzag(z: u64) -> i64 {
    if z & 1 == 0 {
        (z >> 1) as i64
    } else {
        -((z >> 1) as i64) - 1
    }
}

/// Writes the left count `left` of a node of `n ≥ 2` keys.
pub(crate) fn put_left(w: &mut BitWriter, n: usize, left: usize) {
    if n <= HUFFMAN_MAX_N {
        if let Some((code, len)) = TABLES
            .get(n.wrapping_sub(2))
            .and_then(|t| t.codes.get(left))
        {
            w.push_bits(u64::from(*code), u32::from(*len));
        }
        return;
    }
    let v = zigzag(left as i64 - (n / 2) as i64) + 1;
    let bits = 64 - v.leading_zeros();
    w.push_bits(0, bits - 1);
    w.push_bits(v, bits);
}

/// Reads the left count of a node of `n ≥ 2` keys; `None` if the bits hold no valid code or
/// the count exceeds `n`.
pub(crate) fn get_left(r: &mut BitReader<'_>, n: usize) -> Option<usize> {
    if n <= HUFFMAN_MAX_N {
        let t = TABLES.get(n.checked_sub(2)?)?;
        let (next, avail) = r.peek(FAST_BITS);
        let e = t.fast.get(next as usize).copied().unwrap_or(0);
        let len = u32::from(e & 0xff);
        if len != 0 && len <= avail {
            r.advance(len);
            return Some(usize::from(e >> 8));
        }
        let mut code = 0u32;
        for len in 1..t.first.len() {
            code = (code << 1) | u32::from(r.read()?);
            let (first, count) = (*t.first.get(len)?, *t.count.get(len)?);
            if code >= first && code - first < count {
                let idx = t.offset.get(len)? + (code - first);
                return t.symbols.get(idx as usize).map(|&s| s as usize);
            }
        }
        return None;
    }
    // Exp-Golomb: the whole code at once when it lies in the next 32 bits (stream order,
    // the next bit lowest): `z` zeros, then the `z + 1` bits of `v`, most significant first.
    let (next, avail) = r.peek(32);
    if next != 0 {
        let z = next.trailing_zeros();
        if 2 * z < avail {
            let field = (next >> z) & ((1u64 << (z + 1)) - 1);
            let v = field.reverse_bits() >> (63 - z);
            r.advance(2 * z + 1);
            let left = i64::try_from(n / 2).ok()?.checked_add(unzigzag(v - 1))?;
            return usize::try_from(left).ok().filter(|&l| l <= n);
        }
    }
    let mut zeros = 0u32;
    while !r.read()? {
        zeros += 1;
        if zeros > 63 {
            return None;
        }
    }
    let mut v = 1u64;
    for _ in 0..zeros {
        v = (v << 1) | u64::from(r.read()?);
    }
    let left = i64::try_from(n / 2).ok()?.checked_add(unzigzag(v - 1))?;
    usize::try_from(left).ok().filter(|&l| l <= n)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lengths are part of the format (docs/format.md lists them): a change here is a new
    /// format version.
    #[test]
    fn huffman_lengths_are_pinned() {
        let expected: [&[u8]; 15] = [
            &[2, 1, 2],
            &[3, 2, 1, 3],
            &[3, 2, 2, 2, 3],
            &[4, 3, 2, 2, 2, 4],
            &[5, 4, 2, 2, 2, 3, 5],
            &[6, 5, 3, 2, 2, 2, 4, 6],
            &[7, 6, 4, 2, 2, 2, 3, 5, 7],
            &[7, 6, 4, 3, 2, 2, 3, 3, 5, 7],
            &[8, 7, 5, 3, 3, 2, 2, 3, 4, 6, 8],
            &[9, 8, 6, 4, 3, 2, 2, 3, 3, 5, 7, 9],
            &[10, 9, 7, 5, 3, 3, 2, 2, 3, 4, 6, 8, 10],
            &[10, 9, 7, 5, 4, 3, 2, 2, 3, 4, 4, 6, 8, 10],
            &[12, 11, 9, 7, 5, 3, 3, 2, 2, 3, 4, 6, 8, 10, 12],
            &[12, 11, 9, 7, 5, 4, 3, 2, 2, 3, 4, 4, 6, 8, 10, 12],
            &[12, 11, 9, 7, 5, 4, 3, 3, 2, 3, 3, 4, 4, 6, 8, 10, 12],
        ];
        for (i, want) in expected.iter().enumerate() {
            assert_eq!(huffman_lengths(i + 2), *want, "n = {}", i + 2);
            // A complete prefix code: Kraft sum exactly 1.
            let kraft: f64 = want.iter().map(|&l| 0.5f64.powi(l as i32)).sum();
            assert!((kraft - 1.0).abs() < 1e-12);
        }
    }

    #[test]
    fn every_left_count_round_trips() {
        for n in 2..=200usize {
            let mut w = BitWriter::default();
            for left in 0..=n {
                put_left(&mut w, n, left);
            }
            let (words, len) = w.finish();
            let mut r = BitReader::new(&words, 0, len);
            for left in 0..=n {
                assert_eq!(get_left(&mut r, n), Some(left), "n {n} left {left}");
            }
            assert_eq!(r.pos(), len);
        }
    }

    /// Every code, at every alignment and with the stream ending right after it or running
    /// on, decodes through the fast table to what the bit-by-bit decoding gives.
    #[test]
    fn fast_table_agrees_with_the_codes() {
        for n in 2..=HUFFMAN_MAX_N {
            let t = &TABLES[n - 2];
            for left in 0..=n {
                for pad in [0u32, 3, 61, 63] {
                    for tail in [0u64, 13] {
                        let mut w = BitWriter::default();
                        w.push_bits(0, pad);
                        put_left(&mut w, n, left);
                        let code_end = w.len();
                        w.push_bits(u64::MAX, tail as u32);
                        let (words, len) = w.finish();
                        let mut r = BitReader::new(&words, u64::from(pad), len);
                        assert_eq!(get_left(&mut r, n), Some(left), "n {n} left {left}");
                        assert_eq!(r.pos(), code_end);
                    }
                }
                let (_, l) = t.codes[left];
                if u32::from(l) <= FAST_BITS {
                    assert!(t.fast.iter().any(|&e| usize::from(e >> 8) == left));
                }
            }
        }
    }

    /// Exp-Golomb codes (nodes over 16 keys), at every alignment, with the stream ending right
    /// after the code or running on, decode in one step or bit by bit to the same count.
    #[test]
    fn exp_golomb_codes_decode_at_any_alignment() {
        for n in [17usize, 24, 40, 200, 5000] {
            for left in [0, 1, n / 2 - 1, n / 2, n / 2 + 1, n - 1, n] {
                for pad in [0u32, 3, 40, 61, 63] {
                    for tail in [0u32, 1, 13, 40] {
                        let mut w = BitWriter::default();
                        w.push_bits(0, pad);
                        put_left(&mut w, n, left);
                        let code_end = w.len();
                        w.push_bits(0, tail);
                        let (words, len) = w.finish();
                        let mut r = BitReader::new(&words, u64::from(pad), len);
                        assert_eq!(
                            get_left(&mut r, n),
                            Some(left),
                            "n {n} left {left} pad {pad}"
                        );
                        assert_eq!(r.pos(), code_end);
                    }
                }
            }
        }
    }

    #[test]
    fn bad_codes_are_refused() {
        // Exp-Golomb with 64 leading zeros.
        let words = [0u64, 0, 0];
        assert_eq!(get_left(&mut BitReader::new(&words, 0, 192), 100), None);
        // A distance past n: v − 1 = zigzag(+60) for n = 20.
        let mut w = BitWriter::default();
        let v = zigzag(60) + 1;
        let bits = 64 - v.leading_zeros();
        w.push_bits(0, bits - 1);
        w.push_bits(v, bits);
        let (words, len) = w.finish();
        assert_eq!(get_left(&mut BitReader::new(&words, 0, len), 20), None);
        // Truncated Huffman code.
        assert_eq!(get_left(&mut BitReader::new(&[0], 0, 1), 16), None);
    }
}
