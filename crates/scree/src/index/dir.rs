//! The loaded index's per-bucket directory: for each level-1 bucket boundary, `K`
//! non-decreasing values (the bucket's first rank and first trie bit, and where level 2's
//! group-end bits of that rank start), held so that one lookup reads one entry — a few
//! neighbouring bits — instead of an Elias–Fano `select` per value (four of them per lookup,
//! each a binary search over its own arrays, were most of a lookup's cache misses).
//!
//! Every [`SAMPLE`] entries keep their `K` values whole (`bases`); each entry keeps its
//! values' distances from its sample's, bit-packed at the fewest widths that hold the
//! largest distance of each value. Built at load from the stored counts (docs/format.md is
//! unchanged); its heap is counted with the level that owns it.

/// Entries per whole (sampled) entry.
pub(crate) const SAMPLE: usize = 32;

/// `K` monotone sequences of equal length, each entry's `K` values read together.
#[derive(Debug)]
pub(crate) struct SampledDir<const K: usize> {
    len: usize,
    /// The values of entries `0, SAMPLE, 2·SAMPLE, …`.
    bases: Vec<[u64; K]>,
    /// Bits of each value's distance from its sample's.
    widths: [u32; K],
    /// Bits of one packed entry (the sum of `widths`).
    stride: u64,
    /// The packed distances, entry `i` at bit `i × stride`, value 0 first, low bits first.
    packed: Vec<u64>,
}

/// The `w` bits (w ≤ 64) at bit `pos` of `words`, low bits first; bits past the array read 0.
fn read_bits(words: &[u64], pos: u64, w: u32) -> u64 {
    if w == 0 {
        return 0;
    }
    let (i, s) = ((pos / 64) as usize, (pos % 64) as u32);
    let lo = words.get(i).copied().unwrap_or(0) >> s;
    let hi = match s {
        0 => 0,
        _ => words.get(i + 1).copied().unwrap_or(0) << (64 - s),
    };
    let v = lo | hi;
    if w == 64 {
        v
    } else {
        v & ((1u64 << w) - 1)
    }
}

/// Writes the low `w` bits of `v` at bit `pos` of `words` (zeroed there, long enough).
fn write_bits(words: &mut [u64], pos: u64, w: u32, v: u64) {
    if w == 0 {
        return;
    }
    let (i, s) = ((pos / 64) as usize, (pos % 64) as u32);
    if let Some(x) = words.get_mut(i) {
        *x |= v << s;
    }
    if s > 0 && s + w > 64 {
        if let Some(x) = words.get_mut(i + 1) {
            *x |= v >> (64 - s);
        }
    }
}

impl<const K: usize> SampledDir<K> {
    /// The directory of `values`, each of its `K` columns non-decreasing (else the error says
    /// which entry breaks the order).
    pub(crate) fn new(values: &[[u64; K]]) -> Result<Self, String> {
        let mut widths = [0u32; K];
        let mut bases = Vec::with_capacity(values.len().div_ceil(SAMPLE));
        for (i, v) in values.iter().enumerate() {
            if i % SAMPLE == 0 {
                bases.push(*v);
            }
            let base = bases.last().copied().unwrap_or([0; K]);
            for k in 0..K {
                let (x, b) = (v.get(k).copied(), base.get(k).copied());
                let (Some(x), Some(b)) = (x, b) else { continue };
                let prev = i
                    .checked_sub(1)
                    .and_then(|p| values.get(p))
                    .and_then(|p| p.get(k).copied());
                if prev.is_some_and(|p| p > x) {
                    return Err(format!("bucket directory value {k} decreases at entry {i}"));
                }
                let d = x - b;
                if let Some(w) = widths.get_mut(k) {
                    *w = (*w).max(64 - d.leading_zeros());
                }
            }
        }
        let stride: u64 = widths.iter().map(|&w| u64::from(w)).sum();
        let total = stride * values.len() as u64;
        let mut packed = vec![0u64; usize::try_from(total.div_ceil(64)).unwrap_or(0)];
        for (i, v) in values.iter().enumerate() {
            let base = bases.get(i / SAMPLE).copied().unwrap_or([0; K]);
            let mut pos = i as u64 * stride;
            for k in 0..K {
                let w = widths.get(k).copied().unwrap_or(0);
                let d = v.get(k).copied().unwrap_or(0) - base.get(k).copied().unwrap_or(0);
                write_bits(&mut packed, pos, w, d);
                pos += u64::from(w);
            }
        }
        Ok(SampledDir {
            len: values.len(),
            bases,
            widths,
            stride,
            packed,
        })
    }

    /// Entry `i`'s values, or `None` past the end.
    #[inline]
    pub(crate) fn get(&self, i: usize) -> Option<[u64; K]> {
        if i >= self.len {
            return None;
        }
        let mut v = *self.bases.get(i / SAMPLE)?;
        let mut pos = i as u64 * self.stride;
        for (x, &w) in v.iter_mut().zip(&self.widths) {
            *x += read_bits(&self.packed, pos, w);
            pos += u64::from(w);
        }
        Some(v)
    }

    /// Number of entries.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Bytes of the heap it holds.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.bases.capacity() * std::mem::size_of::<[u64; K]>() + self.packed.capacity() * 8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_read_back_across_samples_and_word_boundaries() {
        // Columns growing by irregular steps, one with a jump needing wide distances, one
        // constant (width 0).
        let mut x = 0x1234_5678_9abc_def1u64;
        let mut vals = Vec::new();
        let (mut a, mut b) = (0u64, 5u64);
        for i in 0..1000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            a += x % 40;
            b += if i == 500 { 1 << 40 } else { x % 3000 };
            vals.push([a, b, 7]);
        }
        let d = SampledDir::new(&vals).unwrap();
        for (i, v) in vals.iter().enumerate() {
            assert_eq!(d.get(i), Some(*v), "entry {i}");
        }
        assert_eq!(d.get(vals.len()), None);
        assert!(d.heap_bytes() > 0);
        // Full-width distances.
        let vals = [[0u64], [u64::MAX], [u64::MAX]];
        let d = SampledDir::new(&vals).unwrap();
        assert_eq!(d.get(1), Some([u64::MAX]));
        assert_eq!(d.get(2), Some([u64::MAX]));
        // A decreasing column is refused.
        assert!(SampledDir::new(&[[3u64], [2]]).is_err());
        let empty: SampledDir<2> = SampledDir::new(&[]).unwrap();
        assert_eq!(empty.get(0), None);
    }
}
