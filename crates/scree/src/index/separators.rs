//! Level 3: partial-suffix separators, one for each block boundary inside a group (a boundary
//! where the prefix hash continues), so a lookup can choose among a group's blocks.
//!
//! At a boundary with `y` the suffix hash of the block's last entry and `x` that of the next
//! block's first entry (`y ≤ x`, same prefix hash):
//!
//! - `y < x`: with `L` the number of leading bits they share, the separator is `x`'s top `L`
//!   bits. It stands for the value `σ` = those bits, then a 1, then 0s: the shortest binary
//!   fraction with `y < σ ≤ x`, so a suffix hash `s ≥ σ` sorts after every entry of the earlier
//!   block and `s < σ` before every entry of the later one. Its final 1 is implied, not stored.
//! - `y = x` (a *tie*: versions of one key, or keys whose hashes collide, on both sides): all 64
//!   bits of `x` are stored; a suffix hash equal to it may be in either block.
//!
//! The stored bits are concatenated in one bit array and a directory of their starting
//! positions (`dir.rs`, built at load from the stored lengths) gives each separator's place and length
//! (length 64 marks a tie), so a lookup reads only the separators its binary search visits.

use std::cmp::Ordering;

use super::bits::bits_msb_first;
use super::dir::SampledDir;
use super::LookupCost;

/// A decoded separator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Separator {
    /// Suffix hashes `≥` this value are past the boundary, smaller ones before it.
    Cut(u64),
    /// Suffix hashes equal to this value may be on both sides of the boundary.
    Tie(u64),
}

impl Separator {
    /// Where a suffix hash `s` lies relative to the boundary: `Greater` past it, `Less` before
    /// it, `Equal` on both sides (a tie).
    fn side(self, s: u64) -> Ordering {
        match self {
            Separator::Cut(v) if s >= v => Ordering::Greater,
            Separator::Cut(_) => Ordering::Less,
            Separator::Tie(v) => s.cmp(&v),
        }
    }

    fn value(self) -> u64 {
        match self {
            Separator::Cut(v) | Separator::Tie(v) => v,
        }
    }
}

/// The stored bits of the separator between suffix hashes `y ≤ x`: (bits, length).
pub(crate) fn separator_bits(y: u64, x: u64) -> (u64, u32) {
    if y == x {
        return (x, 64);
    }
    let l = (y ^ x).leading_zeros();
    (x.checked_shr(64 - l).unwrap_or(0), l)
}

/// The separator stored as `len` bits `bits`.
fn from_bits(bits: u64, len: u32) -> Option<Separator> {
    match len {
        64 => Some(Separator::Tie(bits)),
        0..64 => {
            let top = bits.checked_shl(64 - len).unwrap_or(0);
            Some(Separator::Cut(top | (1u64 << (63 - len))))
        }
        _ => None,
    }
}

/// The loaded level 3.
#[derive(Debug)]
pub(crate) struct Separators {
    /// Separator count + 1 values: each separator's first bit, then the bits' total length
    /// (one directory read each: a search reads a few, and an Elias–Fano `select` apiece was
    /// most of its cost).
    starts: SampledDir<1>,
    words: Vec<u64>,
    len: u64,
}

impl Separators {
    /// Loads level 3 from the separators' lengths (each ≤ 64) and bits.
    pub(crate) fn new(lengths: &[u8], mut words: Vec<u64>, len: u64) -> Result<Separators, String> {
        let mut starts = Vec::with_capacity(lengths.len() + 1);
        let mut pos = 0u64;
        for (j, &l) in lengths.iter().enumerate() {
            if l > 64 {
                return Err(format!("separator {j}: length {l} over 64"));
            }
            starts.push(pos);
            pos += u64::from(l);
        }
        starts.push(pos);
        if pos != len {
            return Err(format!("separators hold {pos} bits, their array {len}"));
        }
        words.shrink_to_fit();
        let starts: Vec<[u64; 1]> = starts.into_iter().map(|s| [s]).collect();
        Ok(Separators {
            starts: SampledDir::new(&starts)?,
            words,
            len,
        })
    }

    /// Number of separators.
    pub(crate) fn count(&self) -> usize {
        self.starts.len().saturating_sub(1)
    }

    /// Separator `j`.
    pub(crate) fn get(&self, j: usize) -> Option<Separator> {
        let [start] = self.starts.get(j)?;
        let [end] = self.starts.get(j.checked_add(1)?)?;
        let len = u32::try_from(end.checked_sub(start)?).ok()?;
        from_bits(bits_msb_first(&self.words, start, len, self.len)?, len)
    }

    /// Checks that separators `first .. first + count` (one group's) can be searched: their
    /// values never decrease, and two are equal only when the later one is a tie.
    pub(crate) fn check_group(&self, first: usize, count: usize) -> Result<(), String> {
        let mut prev: Option<Separator> = None;
        for j in first..first + count {
            let s = self
                .get(j)
                .ok_or_else(|| format!("separator {j} missing"))?;
            if let Some(p) = prev {
                let ok = match p.value().cmp(&s.value()) {
                    Ordering::Less => true,
                    Ordering::Equal => matches!(s, Separator::Tie(_)),
                    Ordering::Greater => false,
                };
                if !ok {
                    return Err(format!("separator {j} is out of order"));
                }
            }
            prev = Some(s);
        }
        Ok(())
    }

    /// The boundaries among `count` separators starting at `first` that suffix hash `s` lies
    /// past: `(lo, hi)` where it lies past all of the first `lo`, on both sides of those in
    /// `lo..hi` (ties equal to it) and before the rest. A binary search decodes one separator a
    /// step; one more says whether a run of ties equal to `s` starts at `lo`, and only then is
    /// its end searched for.
    pub(crate) fn search(
        &self,
        s: u64,
        first: usize,
        count: usize,
        cost: &mut LookupCost,
    ) -> Option<(usize, usize)> {
        let side = |j: usize, cost: &mut LookupCost| -> Option<Ordering> {
            cost.separators += 1;
            cost.rank_select += 2;
            Some(self.get(first.checked_add(j)?)?.side(s))
        };
        // Smallest j whose side is not Greater (count if none); past it, only ties equal to `s`
        // can be Equal, so the end of the run is searched for only when the first is one.
        let mut lo = 0;
        let mut hi = count;
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if side(mid, cost)? == Ordering::Greater {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        if lo == count || side(lo, cost)? != Ordering::Equal {
            return Some((lo, lo));
        }
        let (mut a, mut b) = (lo + 1, count);
        while a < b {
            let mid = a + (b - a) / 2;
            if side(mid, cost)? == Ordering::Equal {
                a = mid + 1;
            } else {
                b = mid;
            }
        }
        Some((lo, a))
    }

    /// Bytes of the heap this level holds.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.words.capacity() * 8 + self.starts.heap_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_separator_splits_its_two_suffixes() {
        let cases = [
            (0u64, 1u64),
            (0, u64::MAX),
            (0x7fff_ffff_ffff_ffff, 0x8000_0000_0000_0000),
            (0x1234_5678_0000_0000, 0x1234_5679_0000_0000),
            (u64::MAX - 1, u64::MAX),
            (5, 5),
        ];
        for (y, x) in cases {
            let (bits, len) = separator_bits(y, x);
            let sep = from_bits(bits, len).unwrap();
            if y == x {
                assert_eq!(sep, Separator::Tie(x));
                assert_eq!(sep.side(x), Ordering::Equal);
            } else {
                assert_eq!(sep.side(y), Ordering::Less, "{y:#x} {x:#x}");
                assert_eq!(sep.side(x), Ordering::Greater, "{y:#x} {x:#x}");
                let Separator::Cut(v) = sep else { panic!() };
                assert!(y < v && v <= x);
                assert_eq!(len, (y ^ x).leading_zeros());
            }
        }
    }

    #[test]
    fn search_finds_the_blocks_of_a_suffix() {
        // Boundaries after blocks holding suffixes ..10 | 20..30 | 30..30 | 30..40 | 50..
        let pairs = [(10u64, 20u64), (30, 30), (30, 30), (40, 50)];
        let mut lengths = Vec::new();
        let mut w = super::super::bits::BitWriter::default();
        for (y, x) in pairs {
            let (b, l) = separator_bits(y << 40, x << 40);
            lengths.push(l as u8);
            w.push_bits(b, l);
        }
        let (words, len) = w.finish();
        let seps = Separators::new(&lengths, words, len).unwrap();
        seps.check_group(0, 4).unwrap();
        let mut cost = LookupCost::default();
        let find = |s: u64, cost: &mut LookupCost| seps.search(s << 40, 0, 4, cost).unwrap();
        assert_eq!(find(5, &mut cost), (0, 0));
        assert_eq!(find(10, &mut cost), (0, 0));
        assert_eq!(find(20, &mut cost), (1, 1));
        assert_eq!(find(30, &mut cost), (1, 3));
        assert_eq!(find(35, &mut cost), (3, 3));
        assert_eq!(find(50, &mut cost), (4, 4));
        assert_eq!(find(60, &mut cost), (4, 4));
        assert!(cost.separators > 0);
    }
}
