//! Unit tests of the fragmented layout: guard selection, records, locks, iterators.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use super::*;
use crate::options::FragmentedOptions;

#[test]
fn guard_bits_scale_with_keys() {
    let o = FragmentedOptions::default();
    // 5M keys, 8 level-1 guards: 2^19 keys per level-1 guard.
    assert_eq!(top_bits(&o, 6, 5_000_000), 19);
    // Tiny stores stay at the floor: the last level still needs one bit.
    assert_eq!(top_bits(&o, 6, 10), 11);
    assert_eq!(level_bits(19, 2, 1), 19);
    assert_eq!(level_bits(19, 2, 6), 9);
    assert_eq!(level_bits(3, 2, 6), 1);
    let fixed = FragmentedOptions {
        top_level_bits: 27,
        ..Default::default()
    };
    assert_eq!(top_bits(&fixed, 6, 5_000_000), 27);
}

#[test]
fn guard_levels_nest() {
    // A key that is a guard of level l is a guard of every deeper level.
    for i in 0..200_000u64 {
        let h = guard_hash(7, &i.to_le_bytes());
        if let Some(l) = guard_level(h, 9, 2, 6) {
            for d in l..=6 {
                assert!(h.trailing_ones() >= level_bits(9, 2, d));
            }
        }
    }
    // Expected counts: level 1 needs 9 bits (1/512), level 6 needs 1 bit... clamped.
    let n = (0..100_000u64)
        .filter(|i| guard_level(guard_hash(7, &i.to_le_bytes()), 9, 2, 6) == Some(1))
        .count();
    assert!((100..300).contains(&n), "{n} level-1 guards");
}

#[test]
fn lock_ranges() {
    use locks::ranges_overlap as o;
    assert!(o(None, None, Some(b"a"), Some(b"b")));
    assert!(!o(Some(b"a"), Some(b"b"), Some(b"b"), None));
    assert!(o(Some(b"a"), Some(b"c"), Some(b"b"), None));
    assert!(!o(None, Some(b"a"), Some(b"a"), Some(b"b")));
    let mut t = LockTable::default();
    let (j1, j2) = (t.new_job(), t.new_job());
    let k = |s: &str| Some(GKey::from(s.as_bytes()));
    assert!(t.take(j1, 1, &k("a"), &k("m"), Mode::Source));
    assert!(t.take(j2, 1, &None, &None, Mode::Shared));
    assert!(!t.take(j2, 1, &k("b"), &k("c"), Mode::Exclusive));
    assert!(t.take(j2, 1, &k("m"), &k("z"), Mode::Source));
    t.release(j1);
    t.release(j2);
    assert!(t.is_empty());
}

mod version_tests_support {
    use std::sync::Arc;

    pub(super) use crate::table::test_support::metadata_only_ctx as ctx;
    pub(super) use crate::table::test_support::metadata_only_table as table_sized;

    /// An empty fragmented version.
    pub(super) fn empty() -> Arc<dyn crate::layout::LayoutVersion> {
        Arc::new(super::super::version::FragmentedVersion::empty(Arc::new(
            super::super::version::Shared::new(),
        )))
    }
}

mod version_tests {
    use std::sync::Arc;

    use super::super::version::{guard_record, FragmentedVersion, GKey};
    use super::super::version::{TAG_COMMIT, TAG_DELETE, TAG_PENDING};
    use super::version_tests_support::{ctx, empty, table_sized};
    use crate::layout::LayoutVersion;
    use crate::manifest::edit::{AddedTable, KsEdit};

    fn k(s: &str) -> GKey {
        GKey::from(s.as_bytes())
    }

    fn table(level: u32, no: u64, lo: &str, hi: &str, seqs: (u64, u64)) -> AddedTable {
        table_sized(level, no, lo, hi, seqs, 100)
    }

    fn fv(v: &Arc<dyn LayoutVersion>) -> &FragmentedVersion {
        v.as_any().downcast_ref().expect("fragmented")
    }

    /// `v` after an edit holding only `records`.
    fn apply_records(
        v: &Arc<dyn LayoutVersion>,
        t: &Arc<crate::table::TableCtx>,
        records: Vec<crate::manifest::edit::LayoutRecord>,
    ) -> Arc<dyn LayoutVersion> {
        let e = KsEdit {
            records,
            ..KsEdit::default()
        };
        v.apply(&e, t).expect("apply")
    }

    #[test]
    fn guard_records_commit_nest_and_snapshot() {
        let t = ctx();
        let v0 = empty();
        // Picked at flush: "m" for level 1 (so 1..=3), "f" and "t" for level 2 (2..=3).
        let mut e = KsEdit::default();
        e.records.push(guard_record(TAG_PENDING, 1, &[k("m")]));
        e.records
            .push(guard_record(TAG_PENDING, 2, &[k("f"), k("t")]));
        e.added.push(table(0, 10, "a", "z", (1, 5)));
        let v1 = v0.apply(&e, &t).expect("apply");
        assert_eq!(fv(&v1).pending.len(), 3);
        v1.check_invariants().expect("invariants");
        // Committed deepest first: level 3, then 2, then 1.
        let mut e = KsEdit::default();
        e.records
            .push(guard_record(TAG_COMMIT, 3, &[k("f"), k("m"), k("t")]));
        e.records
            .push(guard_record(TAG_COMMIT, 2, &[k("f"), k("m"), k("t")]));
        e.records.push(guard_record(TAG_COMMIT, 1, &[k("m")]));
        e.removed.push(10);
        e.added.push(table(1, 11, "a", "l", (1, 5)));
        e.added.push(table(1, 12, "m", "z", (1, 5)));
        let v2 = v1.apply(&e, &t).expect("apply");
        v2.check_invariants().expect("invariants");
        let f = fv(&v2);
        assert!(f.pending.is_empty());
        let l1 = f.level(1).expect("L1");
        assert_eq!(l1.guards.len(), 2);
        assert_eq!(l1.guard_index(b"b"), 0);
        assert_eq!(l1.guard_index(b"m"), 1);
        assert_eq!(l1.guard_index(b"zz"), 1);
        let l2 = f.level(2).expect("L2");
        assert_eq!(l2.guards_in(Some(b"m"), None), 2..4);
        assert_eq!(l2.keys_between(Some(b"f"), Some(b"t")), vec![k("m")]);
        // A snapshot recreates the same version.
        let mut snap = KsEdit::default();
        v2.snapshot(&mut snap);
        let v3 = v0.apply(&snap, &t).expect("apply snapshot");
        v3.check_invariants().expect("invariants");
        assert_eq!(
            format!("{:?}", v2.level_stats()),
            format!("{:?}", v3.level_stats())
        );
        // Deleting "t" at level 2 keeps it at level 3 (guard deletion goes upward only).
        let v4 = apply_records(&v3, &t, vec![guard_record(TAG_DELETE, 2, &[k("t")])]);
        v4.check_invariants().expect("invariants");
        assert!(!fv(&v4).is_guard(2, b"t"));
        assert!(fv(&v4).is_guard(3, b"t"));
    }

    #[test]
    fn a_new_deeper_level_inherits_the_guards_above() {
        // A version without a levels record whose deepest level is 2, then a commit at level 4
        // (a keyspace opened with more levels): levels 3 and 4 start with level 2's guards.
        let t = ctx();
        let v0 = empty();
        let v1 = apply_records(
            &v0,
            &t,
            vec![
                guard_record(TAG_COMMIT, 2, &[k("f"), k("m")]),
                guard_record(TAG_COMMIT, 1, &[k("m")]),
            ],
        );
        let v2 = apply_records(&v1, &t, vec![guard_record(TAG_COMMIT, 4, &[k("q")])]);
        v2.check_invariants().expect("nesting holds");
        let f = fv(&v2);
        assert!(f.is_guard(3, b"f") && f.is_guard(3, b"m") && !f.is_guard(3, b"q"));
        assert!(f.is_guard(4, b"f") && f.is_guard(4, b"m") && f.is_guard(4, b"q"));
        // The persisted level count survives a snapshot.
        let v3 = apply_records(&v2, &t, vec![super::super::version::levels_record(5)]);
        let mut snap = KsEdit::default();
        v3.snapshot(&mut snap);
        let v4 = v0.apply(&snap, &t).expect("apply");
        assert_eq!(fv(&v4).max_levels, Some(5));
    }

    #[test]
    fn invariants_catch_crossing_and_interleaving_tables() {
        let t = ctx();
        let mut snap = KsEdit::default();
        snap.records.push(guard_record(TAG_COMMIT, 1, &[k("m")]));
        snap.added.push(table(1, 11, "a", "l", (1, 5)));
        let v = empty();
        let v = v.apply(&snap, &t).expect("apply");
        v.check_invariants().expect("ok");
        // A table crossing guard "m" (bypassing apply's assertion).
        let fvv = fv(&v);
        let bad = fvv.with_extra_table(1, table(1, 12, "k", "n", (6, 9)), &t);
        assert!(bad.check_invariants().unwrap_err().contains("crosses"));
        // Two overlapping tables whose sequence ranges interleave.
        let bad = fvv.with_extra_table(1, table(1, 13, "b", "c", (3, 9)), &t);
        assert!(bad.check_invariants().unwrap_err().contains("interleave"));
    }
}

mod policy_tests {
    use std::sync::Arc;

    use super::super::version::{guard_record, FragmentedVersion, GKey, TAG_COMMIT};
    use super::super::{target_level, Why};
    use super::version_tests_support::{ctx, empty, table_sized};
    use crate::layout::LayoutVersion;
    use crate::manifest::edit::KsEdit;
    use crate::options::FragmentedOptions;

    fn k(s: &str) -> GKey {
        GKey::from(s.as_bytes())
    }

    /// Level 1 guard "m" (2 small tables) over last-level (L2) children "m" and "t" holding
    /// `child_bytes` each in `child_tables` tables.
    fn version(child_tables: u64, child_bytes: u64) -> Arc<dyn LayoutVersion> {
        let t = ctx();
        let mut e = KsEdit::default();
        e.records
            .push(guard_record(TAG_COMMIT, 2, &[k("m"), k("t")]));
        e.records.push(guard_record(TAG_COMMIT, 1, &[k("m")]));
        e.added.push(table_sized(1, 100, "m", "s", (50, 60), 100));
        e.added.push(table_sized(1, 101, "n", "z", (61, 70), 100));
        let mut no = 200;
        for (lo, hi) in [("m", "s"), ("t", "z")] {
            for i in 0..child_tables {
                let seq = 1 + i * 10;
                e.added.push(table_sized(
                    2,
                    no,
                    lo,
                    hi,
                    (seq, seq + 5),
                    child_bytes / child_tables,
                ));
                no += 1;
            }
        }
        let v = empty();
        v.apply(&e, &t).expect("apply")
    }

    #[test]
    fn second_to_last_level_rewrites_in_place_under_the_25x_rule() {
        let o = FragmentedOptions {
            max_levels: 3,
            max_sstables_per_guard: 2,
            ..Default::default()
        };
        let fv = |v: &Arc<dyn LayoutVersion>| -> FragmentedVersion {
            let f: &FragmentedVersion = v.as_any().downcast_ref().expect("fragmented");
            FragmentedVersion {
                l0: f.l0.clone(),
                levels: f.levels.clone(),
                pending: f.pending.clone(),
                entries: f.entries,
                max_levels: f.max_levels,
                shared: f.shared.clone(),
            }
        };
        // Children can take another table: push down.
        let v = version(1, 1000);
        assert_eq!(target_level(&fv(&v), &o, 1, 1, Why::Count), Some(2));
        // Children full, merging them costs 2 × 9000 bytes > 25 × 200: rewrite in level 1.
        let v = version(2, 9000);
        assert_eq!(target_level(&fv(&v), &o, 1, 1, Why::Count), Some(1));
        // Children full but cheap to merge (2 × 2000 < 25 × 200): push down.
        let v = version(2, 2000);
        assert_eq!(target_level(&fv(&v), &o, 1, 1, Why::Count), Some(2));
        // The last level merges in place.
        assert_eq!(target_level(&fv(&v), &o, 2, 1, Why::Count), Some(2));
        // Manual compaction ignores the rule and stops at the deepest level.
        assert_eq!(target_level(&fv(&v), &o, 1, 1, Why::Manual), Some(2));
    }
}
