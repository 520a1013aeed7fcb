//! Build-time load balancing of HTable buckets (LSM-trie §2.4.2): owns the greedy paired
//! migration from the most loaded to the least loaded bucket, the HashMark watermark, and the
//! migration records a lookup follows.
//!
//! Input: per home bucket, its *rank groups* (all items of the bucket sharing one rank, see
//! `rank_in_bucket`) in ascending rank order with their encoded sizes. A rank group never
//! splits, so every version of a user key (same hash, same rank) stays together.
//!
//! Algorithm (paper, plus two generalisations noted *):
//! 1. A group larger than the cap can go nowhere but the overflow region.*
//! 2. Buckets are kept sorted by load. While the most loaded bucket (the source) is over the
//!    cap: fill it with its groups in ascending rank order; the first group that does not fit
//!    is the watermark, its rank the HashMark; it and every higher-ranked group migrate. The
//!    source leaves the list.
//! 3. The migrating groups go, in rank order, to the least loaded bucket while they fit; when
//!    the next one does not fit there, the then least loaded bucket is taken (the paper stops
//!    here instead)*; a group that fits nowhere goes to the overflow region.
//!
//! Destinations never exceed the cap, so a destination is never a later source and every item
//! is one hop from its home: a lookup with the records in memory reads exactly one block.
//!
//! *Segments.* The planner can run the greedy separately inside `segments` equal contiguous
//! ranges of buckets (`segment_range`), so no item leaves its home's range. The `trie` layout
//! uses eight, one per child of the table's container (its buckets follow the hash bits, and
//! the next three bits pick the child): a compaction can then read and merge one child's
//! eighth of each input at a time. One segment is the paper's global list.

use std::collections::BTreeSet;

use super::format::Migration;

/// Destination code for "the overflow region" inside the planner (on disk it is `n_buckets`).
pub(crate) const OVERFLOW: u32 = u32::MAX;

/// The rank groups of every bucket, flattened (one allocation for the whole table instead of
/// one per bucket): bucket `b`'s groups are `rank_size[start[b]..start[b + 1]]`, as
/// `(rank, encoded bytes)` in ascending rank order.
#[derive(Debug, Clone, Default)]
pub(crate) struct Groups {
    pub(crate) rank_size: Vec<(u32, usize)>,
    pub(crate) start: Vec<usize>,
}

impl Groups {
    /// Number of buckets.
    pub(crate) fn buckets(&self) -> usize {
        self.start.len().saturating_sub(1)
    }
    /// Indices (into `rank_size` and a plan) of bucket `b`'s groups.
    pub(crate) fn of(&self, b: usize) -> std::ops::Range<usize> {
        let s = self.start.get(b).copied().unwrap_or(0);
        let e = self.start.get(b + 1).copied().unwrap_or(s);
        s..e
    }
    /// Groups given per bucket (tests).
    #[cfg(test)]
    pub(crate) fn from_nested(nested: &[Vec<(u32, usize)>]) -> Self {
        let mut g = Groups {
            rank_size: Vec::new(),
            start: vec![0],
        };
        for gs in nested {
            g.rank_size.extend_from_slice(gs);
            g.start.push(g.rank_size.len());
        }
        g
    }
}

/// Bucket range `[floor(k·n/segments), floor((k+1)·n/segments))` of segment `k`.
pub(crate) fn segment_range(n: usize, segments: usize, k: usize) -> std::ops::Range<usize> {
    let s = segments.max(1) as u128;
    let at = |k: usize| ((k as u128 * n as u128) / s) as usize;
    at(k)..at(k + 1)
}

/// Where each rank group goes: `plan[g]` (parallel to `groups.rank_size`) is a bucket id (the
/// group's own bucket = stays home) or [`OVERFLOW`]. Migrations stay inside each of
/// `segments` bucket ranges ([`segment_range`]; `1` = one global list, as in the paper).
pub(crate) fn plan(groups: &Groups, cap: usize, segments: usize) -> Vec<u32> {
    let n = groups.buckets();
    let mut dest: Vec<u32> = vec![OVERFLOW; groups.rank_size.len()];
    let mut load: Vec<usize> = vec![0; n];
    for b in 0..n {
        let mut l = 0usize;
        for g in groups.of(b) {
            let size = groups.rank_size.get(g).map_or(0, |x| x.1);
            if size <= cap {
                l += size;
                if let Some(d) = dest.get_mut(g) {
                    *d = b as u32;
                }
            }
        }
        if let Some(x) = load.get_mut(b) {
            *x = l;
        }
    }
    for k in 0..segments.max(1) {
        let range = segment_range(n, segments, k);
        let list: BTreeSet<(usize, u32)> = range
            .map(|b| (load.get(b).copied().unwrap_or(0), b as u32))
            .collect();
        plan_segment(groups, cap, list, &mut load, &mut dest);
    }
    dest
}

/// The greedy of one segment whose buckets, by `(load, id)`, are `list`.
fn plan_segment(
    groups: &Groups,
    cap: usize,
    mut list: BTreeSet<(usize, u32)>,
    load: &mut [usize],
    dest: &mut [u32],
) {
    while let Some(&(src_load, src)) = list.last() {
        if src_load <= cap {
            break;
        }
        list.remove(&(src_load, src));
        let gs = groups.of(src as usize);
        // Watermark: fill with groups in ascending rank order until one does not fit.
        let mut kept = 0usize;
        let mut first_moved = gs.end;
        for g in gs.clone() {
            if dest.get(g) != Some(&src) {
                continue;
            }
            let size = groups.rank_size.get(g).map_or(0, |x| x.1);
            if kept + size > cap {
                first_moved = g;
                break;
            }
            kept += size;
        }
        if let Some(l) = load.get_mut(src as usize) {
            *l = kept;
        }
        let mut current: Option<u32> = None;
        for g in first_moved..gs.end {
            let size = groups.rank_size.get(g).map_or(0, |x| x.1);
            if dest.get(g) != Some(&src) {
                continue; // already bound for the overflow region
            }
            let load_of =
                |b: u32, load: &[usize]| load.get(b as usize).copied().unwrap_or(usize::MAX);
            let target = match current {
                Some(d) if load_of(d, load).saturating_add(size) <= cap => Some(d),
                _ => match list.first() {
                    Some(&(l, d)) if l.saturating_add(size) <= cap => Some(d),
                    _ => None,
                },
            };
            let to = match target {
                Some(d) => {
                    let old = load_of(d, load);
                    list.remove(&(old, d));
                    list.insert((old + size, d));
                    if let Some(l) = load.get_mut(d as usize) {
                        *l = old + size;
                    }
                    current = Some(d);
                    d
                }
                None => OVERFLOW,
            };
            if let Some(slot) = dest.get_mut(g) {
                *slot = to;
            }
        }
    }
}

/// The migration records of a plan: for each bucket, one record wherever the destination
/// changes along ascending ranks (starting from "home"). `n_buckets` encodes the overflow region.
pub(crate) fn records(groups: &Groups, dest: &[u32]) -> Vec<Migration> {
    let n_buckets = groups.buckets() as u32;
    let mut out = Vec::new();
    for b in 0..groups.buckets() {
        let src = b as u32;
        let mut prev = src;
        for g in groups.of(b) {
            let (Some(&(rank, _)), Some(&d)) = (groups.rank_size.get(g), dest.get(g)) else {
                continue;
            };
            let d = if d == OVERFLOW { n_buckets } else { d };
            if d != prev {
                out.push(Migration {
                    src,
                    mark: rank,
                    dest: d,
                });
                prev = d;
            }
        }
    }
    out
}

/// Follows `records` (sorted by `(src, mark)`) for an item of home bucket `home` and rank
/// `rank`: the bucket it is stored in, or `n_buckets` for the overflow region.
pub(crate) fn locate(records: &[Migration], home: u32, rank: u32) -> u32 {
    let start = records.partition_point(|m| m.src < home);
    let end = records.partition_point(|m| (m.src, m.mark) <= (home, rank));
    if end > start {
        records.get(end - 1).map_or(home, |m| m.dest)
    } else {
        home
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::unwrap_used)]
mod tests {
    use super::*;

    /// The plan per bucket, as the groups were given.
    fn nested(groups: &Groups, dest: &[u32]) -> Vec<Vec<u32>> {
        (0..groups.buckets())
            .map(|b| groups.of(b).map(|g| dest[g]).collect())
            .collect()
    }

    #[test]
    fn overloaded_bucket_migrates_its_highest_ranks() {
        // Bucket 0 holds 5 groups of 30 bytes with cap 100; buckets 1 and 2 are empty.
        let groups = vec![
            (0..5).map(|i| (i * 10, 30)).collect::<Vec<_>>(),
            vec![],
            vec![(7, 90)],
        ];
        let g = Groups::from_nested(&groups);
        let flat = plan(&g, 100, 1);
        let dest = nested(&g, &flat);
        assert_eq!(dest[0], vec![0, 0, 0, 1, 1]);
        let recs = records(&g, &flat);
        assert_eq!(
            recs,
            vec![Migration {
                src: 0,
                mark: 30,
                dest: 1
            }]
        );
        assert_eq!(locate(&recs, 0, 29), 0);
        assert_eq!(locate(&recs, 0, 30), 1);
        assert_eq!(locate(&recs, 0, u32::MAX), 1);
        assert_eq!(locate(&recs, 2, 7), 2);
    }

    #[test]
    fn oversize_group_and_leftovers_go_to_overflow() {
        let groups = vec![vec![(1, 50), (2, 500), (3, 60)], vec![(5, 90)]];
        let g = Groups::from_nested(&groups);
        let flat = plan(&g, 100, 1);
        let dest = nested(&g, &flat);
        // 500 > cap: overflow; then 50 + 60 > 100: rank 3 migrates, but bucket 1 has only 10
        // bytes free, so it goes to the overflow region too.
        assert_eq!(dest[0], vec![0, OVERFLOW, OVERFLOW]);
        let recs = records(&g, &flat);
        assert_eq!(
            recs,
            vec![Migration {
                src: 0,
                mark: 2,
                dest: 2
            }]
        );
        assert_eq!(locate(&recs, 0, 3), 2);
    }

    #[test]
    fn a_source_can_spill_over_several_destinations() {
        let groups = vec![
            (0..10).map(|i| (i, 20)).collect::<Vec<_>>(),
            vec![(0, 50)],
            vec![(0, 60)],
        ];
        let g = Groups::from_nested(&groups);
        let flat = plan(&g, 100, 1);
        let dest = nested(&g, &flat);
        let total: usize = groups.iter().flatten().map(|g| g.1).sum();
        assert_eq!(total, 310);
        // The source keeps 5 groups (100 bytes). Of the 5 that move, two go to bucket 1
        // (50 -> 90), two to bucket 2 once bucket 1 is full (60 -> 100), and the last fits
        // nowhere (both buckets have 10 bytes free), so it goes to the overflow region.
        assert_eq!(dest[0][5..], [1, 1, 2, 2, OVERFLOW]);
        let moved: Vec<u32> = dest[0][5..].to_vec();
        assert!(moved.iter().all(|&d| d != 0));
        let recs = records(&g, &flat);
        for (i, &d) in dest[0].iter().enumerate() {
            let want = if d == OVERFLOW { 3 } else { d };
            assert_eq!(locate(&recs, 0, groups[0][i].0), want);
        }
    }
}
