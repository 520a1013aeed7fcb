//! What the benchmark wrote, to check reads against: a bitmap of present key indexes, and the
//! state that lives across the workloads of one engine's run.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::ycsb::InsertSequence;

/// Which key indexes are present, as the benchmark wrote them: one bit per record. Reads are
/// checked against it. A bit is set only after the engine acknowledged the put (release), so a
/// reader that sees it set (acquire) must find the key.
pub struct Presence {
    words: Vec<AtomicU64>,
}

impl Presence {
    /// `capacity` records, all absent.
    pub fn new(capacity: u64) -> Presence {
        Presence {
            words: (0..capacity.div_ceil(64))
                .map(|_| AtomicU64::new(0))
                .collect(),
        }
    }
    /// Marks records `[0, n)` present (a database that existed before the run).
    pub fn set_all_below(&self, n: u64) {
        for i in 0..n {
            self.set(i);
        }
    }
    /// Marks `i` present.
    pub fn set(&self, i: u64) {
        if let Some(w) = self.words.get((i / 64) as usize) {
            w.fetch_or(1 << (i % 64), Ordering::Release);
        }
    }
    /// Marks every index of `ids` present. The words are loaded first, with plain loads that
    /// can be in flight together, so the locked updates after them mostly hit the cache.
    pub fn set_many(&self, ids: &[u64]) {
        let mut touch = 0u64;
        for &i in ids {
            if let Some(w) = self.words.get((i / 64) as usize) {
                touch ^= w.load(Ordering::Relaxed);
            }
        }
        std::hint::black_box(touch);
        for &i in ids {
            self.set(i);
        }
    }
    /// Marks `i` absent.
    pub fn clear(&self, i: u64) {
        if let Some(w) = self.words.get((i / 64) as usize) {
            w.fetch_and(!(1 << (i % 64)), Ordering::Release);
        }
    }
    /// Whether `i` is present.
    pub fn get(&self, i: u64) -> bool {
        self.words
            .get((i / 64) as usize)
            .is_some_and(|w| w.load(Ordering::Acquire) & (1 << (i % 64)) != 0)
    }
    /// Present records with index in `[from, to)`.
    pub fn count_range(&self, from: u64, to: u64) -> u64 {
        if to <= from {
            return 0;
        }
        let (first, last) = ((from / 64) as usize, ((to - 1) / 64) as usize);
        let mut n = 0;
        for wi in first..=last {
            let Some(w) = self.words.get(wi) else { break };
            let mut bits = w.load(Ordering::Acquire);
            if wi == first {
                bits &= !0u64 << (from % 64);
            }
            if wi == last {
                let end = (to - 1) % 64;
                if end < 63 {
                    bits &= (1u64 << (end + 1)) - 1;
                }
            }
            n += bits.count_ones() as u64;
        }
        n
    }
    /// Present records with index ≥ `from`.
    pub fn count_from(&self, from: u64) -> u64 {
        let first = (from / 64) as usize;
        self.words
            .iter()
            .enumerate()
            .skip(first)
            .map(|(wi, w)| {
                let mut bits = w.load(Ordering::Acquire);
                if wi == first {
                    bits &= !0u64 << (from % 64);
                }
                bits.count_ones() as u64
            })
            .sum()
    }
}

/// State that lives across the workloads of one engine's run.
pub struct RunState {
    /// What the benchmark wrote.
    pub presence: Presence,
    /// YCSB's insert sequence (record numbers after the loaded ones).
    pub inserts: Arc<InsertSequence>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presence_counts() {
        let p = Presence::new(200);
        for i in [0, 63, 64, 65, 199] {
            p.set(i);
        }
        assert_eq!(p.count_from(0), 5);
        assert_eq!(p.count_from(64), 3);
        assert_eq!(p.count_from(65), 2);
        p.clear(65);
        assert!(!p.get(65) && p.get(64));
        assert_eq!(p.count_from(64), 2);
    }

    #[test]
    fn count_range_counts_exactly_the_range() {
        let p = Presence::new(300);
        let set = [0u64, 1, 63, 64, 127, 128, 200, 255, 256, 299];
        for &i in &set {
            p.set(i);
        }
        for from in [0u64, 1, 2, 63, 64, 65, 127, 128, 129, 255, 256, 299, 300] {
            for to in [0u64, 1, 63, 64, 65, 128, 129, 256, 257, 299, 300, 400] {
                let want = set.iter().filter(|&&i| i >= from && i < to).count() as u64;
                assert_eq!(p.count_range(from, to), want, "[{from}, {to})");
            }
        }
    }

    #[test]
    fn set_many_sets_exactly_the_given_bits() {
        let p = Presence::new(1024);
        let ids = [1023, 0, 64, 63, 500, 64];
        p.set_many(&ids);
        for i in 0..1024 {
            assert_eq!(p.get(i), ids.contains(&i), "bit {i}");
        }
        // An index past the map is ignored, as by `set`.
        p.set_many(&[1024, 5000]);
        assert_eq!(p.count_from(0), 5);
    }
}
