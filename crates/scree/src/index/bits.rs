//! Plain bit arrays of the index: the entropy-coded trie's code stream and the level-3
//! separator bits. Bit `i` of an array is bit `i mod 64` of word `i / 64` (the little-endian
//! `u64` words docs/format.md describes); codes and separators are written and read most
//! significant bit first, one position after another.

/// Appends bits to a growing array of words.
#[derive(Debug, Default)]
pub(crate) struct BitWriter {
    words: Vec<u64>,
    len: u64,
}

impl BitWriter {
    /// Appends one bit.
    pub(crate) fn push(&mut self, bit: bool) {
        let word = (self.len / 64) as usize;
        if word == self.words.len() {
            self.words.push(0);
        }
        if bit {
            if let Some(w) = self.words.get_mut(word) {
                *w |= 1 << (self.len % 64);
            }
        }
        self.len += 1;
    }

    /// Appends the low `n` bits of `value` (n ≤ 64), its bit `n - 1` first.
    pub(crate) fn push_bits(&mut self, value: u64, n: u32) {
        for i in (0..n).rev() {
            self.push((value >> i) & 1 == 1);
        }
    }

    /// Number of bits written.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// The words (unused bits of the last one are zero) and the length in bits.
    pub(crate) fn finish(self) -> (Vec<u64>, u64) {
        (self.words, self.len)
    }
}

/// Bit `pos` of `words`, or `None` past the array.
pub(crate) fn bit(words: &[u64], pos: u64) -> Option<bool> {
    let w = words.get(usize::try_from(pos / 64).ok()?)?;
    Some((w >> (pos % 64)) & 1 == 1)
}

/// The `n` bits (n ≤ 64) starting at `pos`, the bit at `pos` the most significant of the
/// result; `None` if they run past `end` or the array.
pub(crate) fn bits_msb_first(words: &[u64], pos: u64, n: u32, end: u64) -> Option<u64> {
    if n > 64 || pos.checked_add(u64::from(n))? > end {
        return None;
    }
    if n == 0 {
        return Some(0);
    }
    // The (up to) two words holding them, read low bit first, then reversed: the bit at
    // `pos` ends up the most significant of `n`.
    let (w, s) = (usize::try_from(pos / 64).ok()?, (pos % 64) as u32);
    let lo = *words.get(w)? >> s;
    let hi = if s + n > 64 {
        *words.get(w + 1)? << (64 - s)
    } else {
        0
    };
    Some((lo | hi).reverse_bits() >> (64 - n))
}

/// Reads bits one after another from `pos` up to (not including) `end`.
#[derive(Debug)]
pub(crate) struct BitReader<'a> {
    words: &'a [u64],
    pos: u64,
    end: u64,
}

impl<'a> BitReader<'a> {
    /// A reader of `words[start..end]` (in bits).
    pub(crate) fn new(words: &'a [u64], start: u64, end: u64) -> Self {
        BitReader {
            words,
            pos: start,
            end,
        }
    }

    /// The next bit, or `None` at the end.
    pub(crate) fn read(&mut self) -> Option<bool> {
        if self.pos >= self.end {
            return None;
        }
        let b = bit(self.words, self.pos)?;
        self.pos += 1;
        Some(b)
    }

    /// The next `n` bits (n ≤ 32) in stream order, the next bit the lowest, and how many of
    /// them lie before the end (bits past it read as 0). Does not move.
    pub(crate) fn peek(&self, n: u32) -> (u64, u32) {
        let avail = self.end.saturating_sub(self.pos).min(u64::from(n)) as u32;
        if avail == 0 {
            return (0, 0);
        }
        let (w, s) = ((self.pos / 64) as usize, (self.pos % 64) as u32);
        let lo = self.words.get(w).copied().unwrap_or(0) >> s;
        let hi = match s {
            0 => 0,
            _ => self.words.get(w + 1).copied().unwrap_or(0) << (64 - s),
        };
        ((lo | hi) & ((1u64 << avail) - 1), avail)
    }

    /// Moves past `n` bits (at most to the end).
    pub(crate) fn advance(&mut self, n: u32) {
        self.pos = (self.pos + u64::from(n)).min(self.end);
    }

    /// The position of the next bit.
    pub(crate) fn pos(&self) -> u64 {
        self.pos
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_bits_read_back_most_significant_first() {
        let mut w = BitWriter::default();
        w.push_bits(0b1011, 4);
        w.push(false);
        w.push_bits(u64::MAX, 64);
        w.push_bits(0x5, 3);
        let (words, len) = w.finish();
        assert_eq!(len, 72);
        assert_eq!(words.len(), 2);
        assert_eq!(bits_msb_first(&words, 0, 4, len), Some(0b1011));
        assert_eq!(bits_msb_first(&words, 5, 64, len), Some(u64::MAX));
        assert_eq!(bits_msb_first(&words, 69, 3, len), Some(0x5));
        assert_eq!(bits_msb_first(&words, 69, 4, len), None);
        // Every position and width agrees with bit-by-bit reading.
        for pos in 0..len {
            for n in 0..=(len - pos).min(64) as u32 {
                let mut v = 0u64;
                for i in 0..u64::from(n) {
                    v = (v << 1) | u64::from(bit(&words, pos + i).unwrap());
                }
                assert_eq!(
                    bits_msb_first(&words, pos, n, len),
                    Some(v),
                    "pos {pos} n {n}"
                );
            }
        }
        let mut r = BitReader::new(&words, 0, 5);
        let got: Vec<bool> = std::iter::from_fn(|| r.read()).collect();
        assert_eq!(got, [true, false, true, true, false]);
        assert_eq!(r.pos(), 5);
        // Bit i is bit i mod 64 of word i / 64.
        assert_eq!(words[0] & 0xf, 0b1101);
    }
}
