//! [`IndexBuilder`]: takes a table's entries in table order, as (prefix hash, suffix hash,
//! block), and produces the index's bytes. It keeps one value per group and a few bits per block,
//! never the entries.

use super::bits::BitWriter;
use super::ect::{self, bucket_bits_for};
use super::format::{self, Parts};
use super::separators::separator_bits;
use crate::error::{Error, Result};

/// Average keys per level-1 bucket the builder aims for (at most this many, at least half).
/// Larger buckets spend fewer bits on the bucket directory and decode more codes per lookup.
pub const DEFAULT_BUCKET_KEYS: usize = 32;

/// Builds a compact three-level index from a table's entries.
#[derive(Debug)]
pub struct IndexBuilder {
    bucket_keys: usize,
    prev: Option<(u64, u64, u32)>,
    num_entries: u64,
    /// Distinct prefix hashes in order, and the last block of each.
    prefixes: Vec<u64>,
    group_last: Vec<u32>,
    cont: BitWriter,
    sep_lens: Vec<u8>,
    sep_bits: BitWriter,
}

impl Default for IndexBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl IndexBuilder {
    /// A builder with [`DEFAULT_BUCKET_KEYS`].
    pub fn new() -> Self {
        Self::with_bucket_keys(DEFAULT_BUCKET_KEYS)
    }

    /// A builder whose level-1 buckets average at most `bucket_keys` prefixes.
    pub fn with_bucket_keys(bucket_keys: usize) -> Self {
        IndexBuilder {
            bucket_keys: bucket_keys.max(1),
            prev: None,
            num_entries: 0,
            prefixes: Vec::new(),
            group_last: Vec::new(),
            cont: BitWriter::default(),
            sep_lens: Vec::new(),
            sep_bits: BitWriter::default(),
        }
    }

    /// Adds the table's next entry: the hashes of its key's prefix and suffix and the block it
    /// is stored in. Entries come in table order ((prefix hash, suffix hash) never decreases);
    /// the first is in block 0 and each is in the block of the one before or the next block
    /// (blocks are filled in order, none is empty, no entry straddles two; at most 2^32 − 1).
    pub fn add(&mut self, prefix_hash: u64, suffix_hash: u64, block: u32) -> Result<()> {
        let Some((ph, sh, b)) = self.prev else {
            if block != 0 {
                return Err(Error::InvalidArgument(format!(
                    "compact index: the first entry is in block {block}, not 0"
                )));
            }
            self.prefixes.push(prefix_hash);
            self.group_last.push(0);
            self.cont.push(false);
            self.prev = Some((prefix_hash, suffix_hash, 0));
            self.num_entries = 1;
            return Ok(());
        };
        if (prefix_hash, suffix_hash) < (ph, sh) {
            return Err(Error::InvalidArgument(format!(
                "compact index: entry {} ({prefix_hash:#x}, {suffix_hash:#x}) sorts before the one before it",
                self.num_entries
            )));
        }
        if block == u32::MAX {
            return Err(Error::InvalidArgument(
                "compact index: a table has at most 2^32 − 1 blocks".into(),
            ));
        }
        if block != b && Some(block) != b.checked_add(1) {
            return Err(Error::InvalidArgument(format!(
                "compact index: entry {} in block {block} after one in block {b}",
                self.num_entries
            )));
        }
        if block != b {
            let continues = prefix_hash == ph;
            self.cont.push(continues);
            if continues {
                let (bits, len) = separator_bits(sh, suffix_hash);
                self.sep_lens.push(len as u8);
                self.sep_bits.push_bits(bits, len);
            }
        }
        if prefix_hash != ph {
            self.prefixes.push(prefix_hash);
            self.group_last.push(block);
        } else if let Some(last) = self.group_last.last_mut() {
            *last = block;
        }
        self.prev = Some((prefix_hash, suffix_hash, block));
        self.num_entries += 1;
        Ok(())
    }

    /// Number of entries added.
    pub fn num_entries(&self) -> u64 {
        self.num_entries
    }

    /// The index's bytes (docs/format.md, "Compact three-level index (semisorted)").
    pub fn finish(self) -> Result<Vec<u8>> {
        Ok(format::encode(&self.into_parts()?))
    }

    pub(crate) fn into_parts(self) -> Result<Parts> {
        let num_groups = u32::try_from(self.prefixes.len())
            .map_err(|_| Error::InvalidArgument("compact index: over 2^32 groups".into()))?;
        let num_blocks = self.prev.map_or(0, |(_, _, b)| b + 1);
        let bucket_bits = if self.prefixes.is_empty() {
            0
        } else {
            bucket_bits_for(self.prefixes.len(), self.bucket_keys)
        };
        // Leading bits all the prefix hashes share (a merge output covers a narrow hash range):
        // level 1 keys the hashes past them, so its buckets split the table's own range.
        let shared_bits = match (self.prefixes.first(), self.prefixes.last()) {
            (Some(&a), Some(&b)) if self.prefixes.len() >= 2 => (a ^ b).leading_zeros().min(63),
            _ => 0,
        };
        let shared_top = self
            .prefixes
            .first()
            .map_or(0, |&a| a & !(u64::MAX >> shared_bits));
        let shifted: Vec<u64> = self.prefixes.iter().map(|&p| p << shared_bits).collect();
        let l1 = ect::encode(&shifted, bucket_bits);
        let mut last = BitWriter::default();
        let mut prev_last = 0u32;
        for &l in &self.group_last {
            for _ in prev_last..l {
                last.push(false);
            }
            last.push(true);
            prev_last = l;
        }
        let (last_words, _) = last.finish();
        let (cont_words, _) = self.cont.finish();
        let (sep_words, sep_len) = self.sep_bits.finish();
        Ok(Parts {
            num_entries: self.num_entries,
            num_blocks,
            num_groups,
            bucket_bits,
            shared_bits: shared_bits as u8,
            shared_top,
            bucket_counts: l1.counts,
            bucket_bit_lens: l1.bit_lens,
            trie_words: l1.words,
            trie_len: l1.len,
            last_words,
            cont_words,
            sep_lens: self.sep_lens,
            sep_words,
            sep_len,
        })
    }
}
