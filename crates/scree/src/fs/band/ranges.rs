//! A set of disjoint byte ranges of the emulated device (free space, allocated space), kept
//! coalesced, with the queries the band allocator needs.

use std::collections::BTreeMap;

/// Disjoint half-open ranges `[start, start + len)`, adjacent ones merged.
#[derive(Debug, Default, Clone)]
pub(super) struct RangeSet {
    /// start → length.
    map: BTreeMap<u64, u64>,
    /// Σ lengths.
    total: u64,
}

impl RangeSet {
    /// The bytes the set holds.
    pub(super) fn total(&self) -> u64 {
        self.total
    }

    /// Adds `[start, start + len)`, which must not overlap the set (the allocator's
    /// invariant: a byte is either free or allocated, never both, never twice).
    pub(super) fn insert(&mut self, start: u64, len: u64) {
        if len == 0 {
            return;
        }
        debug_assert!(self.overlap(start, start + len) == 0, "overlapping insert");
        let mut s = start;
        let mut l = len;
        // Merge with the range ending at `start`.
        if let Some((&ps, &pl)) = self.map.range(..start).next_back() {
            if ps + pl == start {
                self.map.remove(&ps);
                s = ps;
                l += pl;
            }
        }
        // Merge with the range starting at `start + len`.
        if let Some(nl) = self.map.remove(&(start + len)) {
            l += nl;
        }
        self.map.insert(s, l);
        self.total += len;
    }

    /// Removes `[start, start + len)` from the set (the parts it holds), splitting ranges.
    pub(super) fn remove(&mut self, start: u64, len: u64) {
        if len == 0 {
            return;
        }
        let end = start + len;
        // Ranges that may overlap: the one starting before `start`, and those inside.
        let first = self
            .map
            .range(..start)
            .next_back()
            .map(|(&s, _)| s)
            .unwrap_or(start);
        let hit: Vec<(u64, u64)> = self.map.range(first..end).map(|(&s, &l)| (s, l)).collect();
        for (s, l) in hit {
            let e = s + l;
            if e <= start {
                continue;
            }
            self.map.remove(&s);
            if s < start {
                self.map.insert(s, start - s);
            }
            if e > end {
                self.map.insert(end, e - end);
            }
            self.total -= e.min(end) - s.max(start);
        }
    }

    /// Bytes of the set inside `[lo, hi)`.
    pub(super) fn overlap(&self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            return 0;
        }
        let first = self
            .map
            .range(..lo)
            .next_back()
            .map(|(&s, _)| s)
            .unwrap_or(lo);
        self.map
            .range(first..hi)
            .map(|(&s, &l)| (s + l).min(hi).saturating_sub(s.max(lo)))
            .sum()
    }

    /// The length of the range that starts exactly at `at`, if one does (the bytes after a
    /// file's last extent that it can grow into in place).
    pub(super) fn starting_at(&self, at: u64) -> Option<u64> {
        self.map.get(&at).copied()
    }

    /// The lowest range (first fit).
    pub(super) fn lowest(&self) -> Option<(u64, u64)> {
        self.map.iter().next().map(|(&s, &l)| (s, l))
    }

    /// The ranges in address order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.map.iter().map(|(&s, &l)| (s, l))
    }

    /// The ranges in address order.
    #[cfg(test)]
    pub(super) fn ranges(&self) -> Vec<(u64, u64)> {
        self.iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::RangeSet;

    #[test]
    fn insert_coalesces_and_remove_splits() {
        let mut r = RangeSet::default();
        r.insert(10, 5);
        r.insert(20, 5);
        r.insert(15, 5);
        assert_eq!(r.ranges(), vec![(10, 15)]);
        assert_eq!(r.total(), 15);
        r.remove(12, 3);
        assert_eq!(r.ranges(), vec![(10, 2), (15, 10)]);
        assert_eq!(r.total(), 12);
        assert_eq!(r.overlap(0, 100), 12);
        assert_eq!(r.overlap(11, 16), 2);
        r.remove(0, 1000);
        assert_eq!(r.total(), 0);
        assert!(r.lowest().is_none());
    }
}
