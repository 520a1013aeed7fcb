//! The compact three-level block index of `semisorted` tables (SlimDB §3.1): given the hashes
//! of a key's prefix and suffix, which of a table's fixed-size data blocks may hold it, and
//! which blocks hold a whole prefix group. It replaces a sorted table's index block; no block
//! offsets are stored, since block `b` starts at `b × block size`.
//!
//! - Level 1 (`ect.rs`, codes in `codes.rs`): the table's distinct prefix hashes in an entropy-coded trie (SILT's ECT)
//!   mapping a prefix hash to its rank; for a hash it proves absent, its predecessor's rank.
//! - Level 2 (`groups.rs`): rank → the first and last block of that prefix's group, in two
//!   rank/select bit vectors.
//! - Level 3 (`separators.rs`): for each block boundary inside a group, the shortest partial
//!   suffix hash that separates the entries on its two sides; a binary search among a group's
//!   separators picks the block.
//!
//! **Where the hash bits come from.** The index never hashes a key. Its inputs are the table's
//! sort keys: a table is ordered by the 64-bit keyed hash of each key's prefix, then the 64-bit
//! keyed hash of its suffix (then the key itself), both compared as unsigned integers; the
//! layout computes them (with its per-database hash key) and passes the same two numbers to
//! [`IndexBuilder::add`] and to lookups. Level 1 uses the prefix hash's bits from the most
//! significant down: the top `bucket_bits` choose a bucket, each following bit one trie level
//! (bit `63 − d` at depth `d`). Level 3 compares the suffix hash, most significant bit first,
//! with separators cut from the suffix hashes next to each boundary. The levels are compact
//! only if the hashes are uniform (a keyed hash makes them so); skewed hashes make them larger,
//! never wrong.
//!
//! A lookup decodes one level-1 bucket (the codes on its path and the left subtrees it passes),
//! two selects and a bit of level 2, and for a group spanning `m + 1` blocks, `⌈log2(m + 1)⌉ + 1`
//! separators or so; [`LookupCost`] counts it. The index's memory is measured by
//! [`BlockIndex::heap_bytes`] from its arrays. Bytes: docs/format.md, "Compact three-level index
//! (semisorted)"; design and measurements: docs/architecture-semisorted.md.

mod bits;
mod builder;
mod codes;
mod dir;
mod ect;
mod format;
mod groups;
mod reader;
mod separators;

#[cfg(test)]
mod tests;

pub use builder::{IndexBuilder, DEFAULT_BUCKET_KEYS};
pub use reader::{BlockIndex, HeapBytes};

/// What lookups decoded, summed over the lookups counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LookupCost {
    /// Lookups counted.
    pub lookups: u64,
    /// Level-1 trie node codes decoded (on the path and in skipped left subtrees).
    pub trie_codes: u64,
    /// Level-1 code bits read.
    pub trie_bits: u64,
    /// Rank, select and Elias–Fano accesses (levels 1–3).
    pub rank_select: u64,
    /// Level-3 separators decoded.
    pub separators: u64,
}
