//! The loaded index: [`BlockIndex`] answers which blocks of a table may hold a key, or a prefix
//! group, from the three levels, and says how much heap it holds.

use std::ops::Range;
use std::path::Path;

use super::ect::{Ect, Found, Walk};
use super::format::{self, Parts};
use super::groups::{rs_vec, Groups};
use super::separators::Separators;
use super::LookupCost;
use crate::error::{Error, Result};

/// A table's compact three-level block index, loaded.
///
/// Lookups take the table's hashes of a key's prefix and suffix (the table's sort keys, see the
/// module documentation) and answer with block numbers: block `b` is the table's `b`-th
/// fixed-size data block. Nothing here reads a data block; the caller compares whole keys.
#[derive(Debug)]
pub struct BlockIndex {
    num_entries: u64,
    num_blocks: u32,
    /// Leading bits all the table's prefix hashes share, and their value (format version 2):
    /// level 1 holds the hashes shifted past them.
    shared_bits: u8,
    shared_top: u64,
    ect: Ect,
    groups: Groups,
    separators: Separators,
}

/// Heap bytes of a loaded index, by level.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HeapBytes {
    /// The index value itself (its fields, held wherever the caller keeps it).
    pub fixed: usize,
    /// Level 1: the trie's code stream and its bucket directory.
    pub level1: usize,
    /// Of `level1`: the bucket directory built at load (`dir.rs`; not in the file).
    pub level1_dir: usize,
    /// Level 2: the group-end and continuation bit vectors with their rank/select support.
    pub level2: usize,
    /// Level 3: the separators' bits and their starting positions.
    pub level3: usize,
}

impl HeapBytes {
    /// All of them.
    pub fn total(&self) -> usize {
        self.fixed + self.level1 + self.level2 + self.level3
    }
}

impl BlockIndex {
    /// Loads an index from its bytes, which were found at `offset` in `file` (both only name the
    /// place of damage in an error). Damaged or inconsistent bytes are `Error::Corruption`.
    pub fn decode(bytes: &[u8], file: &Path, offset: u64) -> Result<BlockIndex> {
        let (p, offs) = format::decode(bytes, file, offset)?;
        Self::from_parts(p).map_err(|(level, detail)| {
            let at = match level {
                1 => offs.level1,
                2 => offs.level2,
                _ => offs.level3,
            };
            Error::corruption(file, at, format!("compact index level {level}: {detail}"))
        })
    }

    /// Builds the loaded form, checking that the levels agree; an error names the level.
    pub(crate) fn from_parts(p: Parts) -> std::result::Result<BlockIndex, (u8, String)> {
        let last_len = p.last_len();
        let groups = Groups::new(
            rs_vec(p.last_words, last_len),
            rs_vec(p.cont_words, u64::from(p.num_blocks)),
            p.num_groups,
            p.num_blocks,
        )
        .map_err(|e| (2, e))?;
        // Level 1's directory also keeps, for each bucket's first rank, where level 2's
        // group-end bits of that rank begin.
        let ect = Ect::new(
            p.bucket_bits,
            &p.bucket_counts,
            &p.bucket_bit_lens,
            p.trie_words,
            p.trie_len,
            |r| groups.start_of(r),
        )
        .map_err(|e| (1, e))?;

        let separators =
            Separators::new(&p.sep_lens, p.sep_words, p.sep_len).map_err(|e| (3, e))?;
        if separators.count() != groups.separators() {
            return Err((
                3,
                "separator count differs from the continuation count".into(),
            ));
        }
        let mut ignored = LookupCost::default();
        for r in 0..groups.len() {
            let (first, last) = groups
                .range(r, &mut ignored)
                .ok_or((2, "bad group".into()))?;
            if last > first {
                let j = groups.separator_index(first + 1, &mut ignored);
                separators
                    .check_group(j, (last - first) as usize)
                    .map_err(|e| (3, format!("group {r}: {e}")))?;
            }
        }
        Ok(BlockIndex {
            num_entries: p.num_entries,
            num_blocks: p.num_blocks,
            shared_bits: p.shared_bits,
            shared_top: p.shared_top,
            ect,
            groups,
            separators,
        })
    }

    /// The blocks that may hold the key whose prefix and suffix hash to `prefix_hash` and
    /// `suffix_hash`, as a range of block numbers.
    ///
    /// - A key present in the table: exactly the blocks holding entries with both hashes. That is
    ///   one block, unless entries with the same two hashes (versions of one key, or keys whose
    ///   hashes collide) straddle a block boundary: then every block they are in.
    /// - An absent key: `None` when level 1 proves its prefix hash absent; otherwise one block —
    ///   the block the key would sort into — with one exception: when its prefix hash shares every
    ///   bit level 1 keeps of a present prefix whose group spans several blocks, it is answered as
    ///   if it had that prefix (one of that group's blocks).
    pub fn locate(&self, prefix_hash: u64, suffix_hash: u64) -> Option<Range<u32>> {
        self.locate_counted(prefix_hash, suffix_hash, &mut LookupCost::default())
    }

    /// [`locate`](Self::locate), adding what it decoded to `cost`.
    pub fn locate_counted(
        &self,
        prefix_hash: u64,
        suffix_hash: u64,
        cost: &mut LookupCost,
    ) -> Option<Range<u32>> {
        cost.lookups += 1;
        let range = match self.level1(prefix_hash, cost) {
            Some(Walk {
                found: Found::Leaf(r),
                bucket_rank,
                extra,
            }) => self.groups.range_from(r, bucket_rank, extra, cost),
            Some(Walk {
                found: Found::Absent(_),
                ..
            }) => return None,
            // Unreachable for a checked index; "anywhere" is never a wrong answer.
            None => return Some(0..self.num_blocks),
        };
        let Some((first, last)) = range else {
            return Some(0..self.num_blocks);
        };
        if first == last {
            return Some(first..first + 1);
        }
        let j = self.groups.separator_index(first + 1, cost);
        match self
            .separators
            .search(suffix_hash, j, (last - first) as usize, cost)
        {
            Some((lo, hi)) => Some(first + lo as u32..first + hi as u32 + 1),
            None => Some(first..last + 1),
        }
    }

    /// The blocks holding the group of `prefix_hash` (every entry with that prefix hash), for a
    /// prefix scan. For a prefix hash level 1 proves absent, an empty range at the block it
    /// would fall in; for another absent one, the blocks of the present prefix it shares every
    /// kept bit with (a superset of where it would fall).
    pub fn prefix_blocks(&self, prefix_hash: u64) -> Range<u32> {
        let cost = &mut LookupCost::default();
        cost.lookups += 1;
        match self.level1(prefix_hash, cost).map(|w| w.found) {
            Some(Found::Leaf(r)) => match self.groups.range(r, cost) {
                Some((first, last)) => first..last + 1,
                None => 0..self.num_blocks,
            },
            Some(Found::Absent(r)) => match self.groups.gap_block(r, cost) {
                Some(b) => b..b,
                None => 0..self.num_blocks,
            },
            None => 0..self.num_blocks,
        }
    }

    /// Level 1's answer for `prefix_hash`: a hash outside the table's shared leading bits sorts
    /// before or after every group; any other is looked up shifted past them.
    fn level1(&self, prefix_hash: u64, cost: &mut LookupCost) -> Option<Walk> {
        let mask = !(u64::MAX >> self.shared_bits);
        let top = prefix_hash & mask;
        if top != self.shared_top {
            let before = if top < self.shared_top {
                0
            } else {
                self.groups.len()
            };
            return Some(Walk {
                found: Found::Absent(before),
                bucket_rank: 0,
                extra: 0,
            });
        }
        self.ect.find(prefix_hash << self.shared_bits, cost)
    }

    /// Number of data blocks the index covers.
    pub fn num_blocks(&self) -> u32 {
        self.num_blocks
    }

    /// Number of distinct prefix hashes (groups).
    pub fn num_groups(&self) -> u32 {
        self.groups.len()
    }

    /// Number of level-1 buckets.
    pub fn buckets(&self) -> u64 {
        self.ect.buckets()
    }

    /// Number of entries the table holds (as the builder counted them).
    pub fn num_entries(&self) -> u64 {
        self.num_entries
    }

    /// Heap bytes this index holds, by level: the sizes of the arrays it allocated, read from
    /// them (not derived from a formula of its counts). The Huffman tables shared by all indexes
    /// of the process (about 1 KiB, built once) are not counted.
    pub fn heap_bytes(&self) -> HeapBytes {
        HeapBytes {
            fixed: std::mem::size_of::<Self>(),
            level1: self.ect.heap_bytes(),
            level1_dir: self.ect.dir_heap_bytes(),
            level2: self.groups.heap_bytes(),
            level3: self.separators.heap_bytes(),
        }
    }

    /// Bits of heap per entry of the table.
    pub fn bits_per_key(&self) -> f64 {
        if self.num_entries == 0 {
            return 0.0;
        }
        self.heap_bytes().total() as f64 * 8.0 / self.num_entries as f64
    }
}
