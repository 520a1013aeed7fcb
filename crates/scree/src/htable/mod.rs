//! HTable (LSM-trie §2.4): owns the on-disk table of fixed 4 KiB hash buckets with no index, its
//! build-time load balancing (HashMark migration plus an indexed overflow region), its reader,
//! the placement-hash bit layout shared with the `trie` layout, and the BloomCluster that packs
//! one bucket column's Bloom filters of a container's sub-levels into one block.
//! Byte layout: `docs/format-htable.md`.
//!
//! # Placement hash bit layout
//!
//! Every item is placed by `h = placement_hash(hash_key, user_key)`, a keyed SipHash-1-3 with a
//! 128-bit output (the `hash_key` is random per database and kept in the manifest). Bits are
//! numbered 127 (most significant) down to 0:
//!
//! | bits | use |
//! |---|---|
//! | 127-3d .. 125-3d | trie child of a node at depth `d` (root = depth 0), see [`trie_child`] |
//! | 127-s .. 64-s | bucket window of a table with bucket shift `s` (`3d` for a depth-`d` container): bucket = `⌊window × n_buckets / 2^64⌋`, see [`bucket_of`] |
//! | 31 .. 0 | HashMark infix: ranks items inside an overloaded bucket, see [`rank_in_bucket`] |
//!
//! The bucket window starts right below the bits every item of the container shares, so the
//! bucket is a monotone function of the hash inside a container: a table's buckets hold its
//! items in hash order (migrated items aside), and the items a compaction sends to child `c`
//! have their home buckets in one contiguous range. Only the top `log2(n_buckets)` bits of
//! the window choose the bucket, so for `3d + log2(n_buckets) <= 96` (any bucket count up to
//! depth 21) the bucket never depends on the infix bits; beyond that ranks within one bucket
//! are only less random, never wrong.

pub(crate) mod balance;
pub mod builder;
pub mod cluster;
mod format;
pub mod reader;
#[cfg(test)]
mod tests;
mod verify;
mod writer;

use siphasher::sip128::{Hasher128, SipHasher13};
use std::hash::Hasher;

pub use builder::{
    buckets_for_bytes, finish_borrowed, segments_for, HTableBuilder, HTableOptions, HTableSummary,
    ItemRef, TableSizer, MIN_BUCKETS_PER_SEGMENT,
};
pub use cluster::{
    BloomClusterBuilder, BloomClusterReader, BloomColumn, ClusterBlock, CLUSTER_BLOCK_SIZE,
};
pub(crate) use format::filter_may_contain;
pub use format::FilterSet;
pub use reader::{HItem, HTableReader, TableScan};
pub use writer::HTableStream;

/// Size of one bucket (and of one BloomCluster block): one disk read.
pub const BUCKET_SIZE: usize = 4096;
/// Bytes of a bucket taken by its header (masked CRC32C u32 + entry count u16).
pub const BUCKET_HEADER: usize = 6;
/// Bytes of a bucket available to entries.
pub const BUCKET_CAPACITY: usize = BUCKET_SIZE - BUCKET_HEADER;
/// The HTable format version written in the footer.
pub const FORMAT_VERSION: u32 = 3;

/// [`AddedTable::format`](crate::manifest::edit::AddedTable::format) code of an HTable.
pub const FORMAT_HTABLE: u8 = 1;
/// File name extension of HTables.
pub const HTABLE_EXT: &str = "ht";

/// The HTable in the format registry ([`crate::table_format`]).
pub const HTABLE: crate::table_format::TableFormat = crate::table_format::TableFormat {
    name: "HTable",
    code: Some(FORMAT_HTABLE),
    ext: HTABLE_EXT,
    verify: verify::verify_htable,
    for_each: Some(verify::for_each_htable),
    describe: verify::describe_htable,
    fuzz_target: Some("htable"),
};

/// The keyed 128-bit placement hash of a user key (SipHash-1-3, 128-bit output, the 16-byte
/// key as given). The result is `u128::from_le_bytes(finish128().as_bytes())`, so it is the same
/// on every platform.
pub fn placement_hash(hash_key: &[u8; 16], user_key: &[u8]) -> u128 {
    let mut h = SipHasher13::new_with_key(hash_key);
    h.write(user_key);
    u128::from_le_bytes(h.finish128().as_bytes())
}

/// The child (0..8) a trie node at `depth` (root = 0) routes `hash` to: bits
/// `127-3*depth ..= 125-3*depth`. `None` when the hash has no bits left (`depth > 41`).
pub fn trie_child(hash: u128, depth: u32) -> Option<u8> {
    let shift = 125u32.checked_sub(depth.checked_mul(3)?)?;
    Some(((hash >> shift) & 7) as u8)
}

/// The bucket shift of the tables of a trie container at `depth`: the `3 × depth` hash bits
/// every item of the container shares.
pub fn bucket_shift_for_depth(depth: u32) -> u32 {
    depth.saturating_mul(3).min(127)
}

/// The bucket of `hash` in a table of `n_buckets` buckets whose items share the top `shift`
/// hash bits: the 64 bits below those, scaled to the bucket count (`⌊w × n / 2^64⌋`, a
/// monotone map; `n_buckets == 0` is treated as 1, `shift` above 127 as 127).
pub fn bucket_of(hash: u128, n_buckets: u32, shift: u32) -> u32 {
    bucket_of_window(bucket_window(hash, shift), n_buckets)
}

/// The bucket window of `hash` in a table with bucket shift `shift`: the 64 hash bits below
/// the top `shift` (`shift` above 127 is treated as 127). Inside a container the window
/// orders items as their hashes do.
pub fn bucket_window(hash: u128, shift: u32) -> u64 {
    ((hash << shift.min(127)) >> 64) as u64
}

/// The bucket of bucket window `window` in a table of `n_buckets` buckets: `⌊window × n /
/// 2^64⌋` (`n_buckets == 0` is treated as 1).
pub fn bucket_of_window(window: u64, n_buckets: u32) -> u32 {
    ((u128::from(window) * u128::from(n_buckets.max(1))) >> 64) as u32
}

/// The 32-bit HashMark infix of a hash: bits 0..32.
pub fn hash_mark_infix(hash: u128) -> u32 {
    hash as u32
}

/// The rank of `hash` inside home bucket `bucket`: the HashMark infix rotated left by
/// `bucket % 32`, so an item that ranks high (and migrates) in one bucket is unlikely to rank
/// high again in another (§2.4.2).
pub fn rank_in_bucket(hash: u128, bucket: u32) -> u32 {
    hash_mark_infix(hash).rotate_left(bucket % 32)
}
