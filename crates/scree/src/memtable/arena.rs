//! The memtable arena: append-only byte records in 1 MiB chunks, addressed by [`Loc`]. Both
//! memtable indexes keep their keys and values here, so an insert allocates nothing per entry
//! (a chunk now and then) and dropping a memtable frees a few hundred chunks instead of a heap
//! block per entry (freeing 2 × 500k small blocks cost ≈ 14 % of the `trie` background
//! threads' time; a `malloc` per put was 9 % of a sorted layout's writer thread). Records are
//! never moved once written; the owner serializes appends (its write lock).

/// Bytes per chunk (a larger record gets a chunk of its own size).
pub(super) const CHUNK: usize = 1 << 20;

/// Where a record starts: chunk index and offset in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Loc {
    pub chunk: u32,
    pub off: u32,
}

impl Loc {
    /// "No location" (a chunk index that never exists).
    pub const NONE: Loc = Loc {
        chunk: u32::MAX,
        off: 0,
    };
}

/// The chunks.
#[derive(Default)]
pub(super) struct Arena {
    chunks: Vec<Vec<u8>>,
}

impl Arena {
    /// Appends the concatenation of `parts` as one record and returns where it starts.
    pub fn append(&mut self, parts: &[&[u8]]) -> Loc {
        let n: usize = parts.iter().map(|p| p.len()).sum();
        let fits = self
            .chunks
            .last()
            .is_some_and(|c| c.capacity() - c.len() >= n);
        if !fits {
            self.chunks.push(Vec::with_capacity(CHUNK.max(n)));
        }
        let chunk = self.chunks.len() - 1;
        let c = self.chunks.last_mut();
        let off = c.as_ref().map_or(0, |c| c.len());
        if let Some(c) = c {
            for p in parts {
                c.extend_from_slice(p);
            }
        }
        Loc {
            chunk: chunk as u32,
            off: off as u32,
        }
    }

    /// The `len` bytes at `at` (None if they are not in the arena).
    pub fn bytes(&self, at: Loc, len: usize) -> Option<&[u8]> {
        let start = at.off as usize;
        self.chunks
            .get(at.chunk as usize)?
            .get(start..start.checked_add(len)?)
    }

    /// The `len` bytes at `at`, writable in place (None if they are not in the arena).
    pub fn bytes_mut(&mut self, at: Loc, len: usize) -> Option<&mut [u8]> {
        let start = at.off as usize;
        self.chunks
            .get_mut(at.chunk as usize)?
            .get_mut(start..start.checked_add(len)?)
    }

    /// The chunk holding `at` and the offset of `at` in it.
    pub fn chunk_of(&self, at: Loc) -> Option<(&[u8], usize)> {
        Some((self.chunks.get(at.chunk as usize)?, at.off as usize))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_read_back_across_chunks_and_oversized_records() {
        let mut a = Arena::default();
        let big = vec![7u8; CHUNK + 3];
        let mut locs = Vec::new();
        for i in 0..3000u32 {
            let body = vec![i as u8; (i % 700) as usize];
            let l = if i % 1000 == 999 {
                a.append(&[&big])
            } else {
                a.append(&[&i.to_le_bytes(), &body])
            };
            locs.push((i, l));
        }
        for (i, l) in locs {
            if i % 1000 == 999 {
                assert_eq!(a.bytes(l, CHUNK + 3), Some(big.as_slice()));
            } else {
                let n = 4 + (i % 700) as usize;
                let got = a.bytes(l, n).expect("record");
                assert_eq!(got.get(..4), Some(i.to_le_bytes().as_slice()));
                assert!(got
                    .get(4..)
                    .is_some_and(|b| b.iter().all(|&x| x == i as u8)));
            }
        }
        assert_eq!(a.bytes(Loc::NONE, 1), None);
        let l = a.append(&[b"abc"]);
        if let Some(b) = a.bytes_mut(l, 3) {
            b.copy_from_slice(b"xyz");
        }
        assert_eq!(a.bytes(l, 3), Some(b"xyz".as_slice()));
        assert_eq!(a.bytes(l, usize::MAX), None);
    }
}
