//! Level 2: a prefix's rank to the blocks its group (the entries of that prefix hash) occupies,
//! in two rank/select bit vectors (vers-vecs' `RsVec`), no block offsets stored:
//!
//! - `last`: for each group in rank order, as many 0s as its last block is past the previous
//!   group's last block, then a 1 (unary deltas; the first group's delta counts from block 0).
//!   The last block of group `r` is `select1(r) − r`.
//! - `cont`: one bit per block, set when the block's first entry has the same prefix hash as the
//!   previous block's last entry (the group continues across the boundary; bit 0 is clear).
//!
//! A group's first block is the previous group's last block `L` if it ends there too, or if it
//! continues across the boundary after `L`; otherwise it is `L + 1`. The set bits of `cont` are
//! also the boundaries level 3 keeps a separator for, so `rank1` of `cont` numbers them.

use vers_vecs::{BitVec, RsVec};

use super::LookupCost;

/// Words of group-end bits [`Groups::range_from`] scans from its bucket's start before it
/// falls back to a select (a bucket of ~32 groups of a few blocks each fits in 2–4).
const HINT_WORDS: usize = 8;

/// A rank/select vector of exactly `len` bits from words whose unused bits are zero. Its
/// arrays are cloned once built: a clone allocates each at its length, without the spare
/// capacity construction leaves, so the heap it holds is what `heap_size` reports.
pub(crate) fn rs_vec(words: Vec<u64>, len: u64) -> RsVec {
    let mut bv = BitVec::from_vec(words);
    let len = usize::try_from(len).unwrap_or(usize::MAX);
    if bv.len() > len {
        bv.drop_last(bv.len() - len);
    }
    RsVec::from_bit_vec(bv).clone()
}

/// The loaded level 2.
#[derive(Debug)]
pub(crate) struct Groups {
    last: RsVec,
    cont: RsVec,
    num_groups: u32,
}

impl Groups {
    /// Loads and checks level 2 for `num_groups` groups over `num_blocks` blocks: `last` must
    /// hold `num_groups` 1s and end with one (the last group ends in the last block), `cont`'s
    /// set bits must be exactly the boundaries inside some group.
    pub(crate) fn new(
        last: RsVec,
        cont: RsVec,
        num_groups: u32,
        num_blocks: u32,
    ) -> Result<Groups, String> {
        let want_last = u64::from(num_groups) + u64::from(num_blocks).saturating_sub(1);
        if num_groups == 0 || num_blocks == 0 {
            if num_groups != 0 || num_blocks != 0 || !last.is_empty() || !cont.is_empty() {
                return Err("groups without blocks, or blocks without groups".into());
            }
        } else if last.len() as u64 != want_last
            || last.rank1(last.len()) != num_groups as usize
            || last.get(last.len() - 1) != Some(1)
        {
            return Err("group end bits do not match the group and block counts".into());
        }
        if cont.len() != num_blocks as usize || cont.get(0) == Some(1) {
            return Err("continuation bits do not match the block count".into());
        }
        let g = Groups {
            last,
            cont,
            num_groups,
        };
        // Every boundary inside a group is a continuation, and nothing else is. The groups
        // are walked in order, each found from the end bit of the one before it (a select per
        // group made opening a table of 290k one-key groups cost tens of milliseconds).
        let mut inside = 0u64;
        let mut ignored = LookupCost::default();
        let mut prev_pos: Option<usize> = None;
        for r in 0..num_groups {
            let range = match prev_pos {
                Some(p) => g.range_after(r, p, &mut ignored),
                None => g.range(r, &mut ignored),
            };
            let (first, last) = range.ok_or_else(|| format!("group {r}: no block range"))?;
            prev_pos = Some(last as usize + r as usize);
            let set = g.cont.rank1(last as usize + 1) - g.cont.rank1(first as usize + 1);
            if set as u64 != u64::from(last - first) {
                return Err(format!(
                    "group {r}: a boundary inside it is not a continuation"
                ));
            }
            inside += u64::from(last - first);
        }
        if g.cont.rank1(g.cont.len()) as u64 != inside {
            return Err("a continuation bit lies between groups".into());
        }
        Ok(g)
    }

    /// Number of groups.
    pub(crate) fn len(&self) -> u32 {
        self.num_groups
    }

    fn last_block(&self, r: u32) -> Option<u32> {
        let pos = self.last.select1(r as usize);
        if pos >= self.last.len() {
            return None;
        }
        u32::try_from(pos - r as usize).ok()
    }

    /// The position of the first set bit of `last` at or after `pos`, looked for in the next
    /// two words (a group's delta is short: its blocks); past them, `None`.
    fn next_end_near(&self, pos: usize) -> Option<usize> {
        let mut p = pos;
        while p < self.last.len() && p < pos + 128 {
            let n = (self.last.len() - p).min(64);
            let w = self.last.get_bits(p, n)?;
            if w != 0 {
                return Some(p + w.trailing_zeros() as usize);
            }
            p += n;
        }
        None
    }

    /// Where the group-end bits of group `r` begin: just past the end bit of group `r − 1`
    /// (0 for the first group; the array's length for `r` = the group count). Level 1's
    /// directory keeps it for each bucket's first rank ([`Groups::range_from`]).
    pub(crate) fn start_of(&self, r: u64) -> Option<u64> {
        if r == 0 {
            return Some(0);
        }
        let r = usize::try_from(r).ok()?;
        let pos = self.last.select1(r - 1);
        (pos < self.last.len()).then_some(pos as u64 + 1)
    }

    /// The position of the `k`-th (0-based) set bit of `last` at or after `pos`, looked for in
    /// the next [`HINT_WORDS`] words; past them, `None`.
    fn nth_end_from(&self, pos: usize, mut k: u32) -> Option<usize> {
        let mut p = pos;
        while p < self.last.len() && p < pos + 64 * HINT_WORDS {
            let n = (self.last.len() - p).min(64);
            let mut w = self.last.get_bits(p, n)?;
            let ones = w.count_ones();
            if k < ones {
                for _ in 0..k {
                    w &= w - 1;
                }
                return Some(p + w.trailing_zeros() as usize);
            }
            k -= ones;
            p += n;
        }
        None
    }

    /// [`Groups::range`] of group `r`, given that the group-end bits of group `bucket_rank`
    /// (≤ `r`) begin at `start` (level 1's directory entry of `r`'s bucket): the end of group
    /// `r − 1` is found by scanning on from there, without a select, when it is near (a
    /// bucket's groups end within a few words); otherwise as [`Groups::range`] finds it.
    pub(crate) fn range_from(
        &self,
        r: u32,
        bucket_rank: u64,
        start: u64,
        cost: &mut LookupCost,
    ) -> Option<(u32, u32)> {
        let rr = u64::from(r);
        if r == 0 || rr < bucket_rank {
            return self.range(r, cost);
        }
        let start = usize::try_from(start).ok()?;
        let prev_pos = if rr == bucket_rank {
            start.checked_sub(1)
        } else {
            self.nth_end_from(start, u32::try_from(rr - bucket_rank - 1).ok()?)
        };
        match prev_pos {
            Some(p) if p < self.last.len() => self.range_after(r, p, cost),
            _ => self.range(r, cost),
        }
    }

    /// First and last block (inclusive) of group `r`: one select for the group before it, and
    /// its own end found by scanning on from there (a second select only for a long group).
    pub(crate) fn range(&self, r: u32, cost: &mut LookupCost) -> Option<(u32, u32)> {
        if r == 0 {
            cost.rank_select += 1;
            return Some((0, self.last_block(0)?));
        }
        let prev_pos = self.last.select1(r as usize - 1);
        cost.rank_select += 1;
        if prev_pos >= self.last.len() {
            return None;
        }
        self.range_after(r, prev_pos, cost)
    }

    /// [`Groups::range`] of group `r ≥ 1` once the end bit of group `r − 1` is known to be at
    /// `prev_pos`.
    fn range_after(&self, r: u32, prev_pos: usize, cost: &mut LookupCost) -> Option<(u32, u32)> {
        let prev = u32::try_from(prev_pos.checked_sub(r as usize - 1)?).ok()?;
        let last = match self.next_end_near(prev_pos + 1) {
            Some(pos) => u32::try_from(pos - r as usize).ok()?,
            None => {
                cost.rank_select += 1;
                self.last_block(r)?
            }
        };
        if last == prev {
            return Some((last, last));
        }
        let first = if self.cont.get(prev as usize + 1)? == 1 {
            prev
        } else {
            prev + 1
        };
        Some((first, last))
    }

    /// The block a prefix hash absent from the table would fall in, given that `r` groups sort
    /// before it: the last block of the group before it (block 0 if none).
    pub(crate) fn gap_block(&self, r: u32, cost: &mut LookupCost) -> Option<u32> {
        if r == 0 {
            return Some(0);
        }
        cost.rank_select += 1;
        self.last_block(r - 1)
    }

    /// Index of the separator of the boundary before block `b` (that boundary must be a
    /// continuation): the number of continuations before it.
    pub(crate) fn separator_index(&self, b: u32, cost: &mut LookupCost) -> usize {
        cost.rank_select += 1;
        self.cont.rank1(b as usize)
    }

    /// Number of separators level 3 must hold.
    pub(crate) fn separators(&self) -> usize {
        self.cont.rank1(self.cont.len())
    }

    /// Bytes of the heap this level holds.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.last.heap_size() + self.cont.heap_size()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Groups ending after gaps short and long (past the scan's two words) have the ranges
    /// the unary deltas say, found with one select where the gap is short.
    #[test]
    fn ranges_follow_the_deltas_short_and_long() {
        // Last blocks of 6 groups; groups 2 and 4 span many blocks.
        let lasts = [0u32, 0, 150, 151, 400, 401];
        let num_blocks = 402u32;
        let mut bits = Vec::new();
        let mut prev = 0u32;
        for &l in &lasts {
            bits.extend(std::iter::repeat_n(false, (l - prev) as usize));
            bits.push(true);
            prev = l;
        }
        let mut words = vec![0u64; bits.len().div_ceil(64)];
        for (i, &b) in bits.iter().enumerate() {
            if b {
                words[i / 64] |= 1 << (i % 64);
            }
        }
        // Continuations: inside groups 2 (blocks 1..=150) and 4 (152..=400).
        let mut cont = vec![0u64; (num_blocks as usize).div_ceil(64)];
        for b in (2..=150).chain(153..=400) {
            cont[b / 64] |= 1 << (b % 64);
        }
        let g = Groups::new(
            rs_vec(words, bits.len() as u64),
            rs_vec(cont, u64::from(num_blocks)),
            lasts.len() as u32,
            num_blocks,
        )
        .unwrap();
        let mut cost = LookupCost::default();
        let want = [(0, 0), (0, 0), (1, 150), (151, 151), (152, 400), (401, 401)];
        for (r, w) in want.iter().enumerate() {
            assert_eq!(g.range(r as u32, &mut cost), Some(*w), "group {r}");
        }
        // Groups 1, 3 and 5 end within the scan of their predecessor's end; 2 and 4 do not.
        assert_eq!(cost.rank_select, 1 + 1 + 2 + 1 + 2 + 1);
    }
}
