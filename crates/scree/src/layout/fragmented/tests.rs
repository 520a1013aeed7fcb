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
    use locks::LockTable;
    let mut t = LockTable::default();
    let (j1, j2) = (t.new_job(), t.new_job());
    let k = |s: &str| Some(GKey::from(s.as_bytes()));
    assert!(t.take_range(j1, 1, &k("a"), &k("m"), Mode::Source));
    assert!(t.take_range(j2, 1, &None, &None, Mode::Shared));
    assert!(!t.take_range(j2, 1, &k("b"), &k("c"), Mode::Exclusive));
    assert!(t.take_range(j2, 1, &k("m"), &k("z"), Mode::Source));
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
    use super::super::{target_level, Cand, Fragmented, Why};
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

    /// Aggressive compaction (the paper's "within 25 %"): a level about as large as the next
    /// one is pushed down; one far smaller than the next is not, nor any with the ratio 0.
    #[test]
    fn a_level_within_the_aggressive_ratio_of_the_next_is_pushed_down() {
        let p = Fragmented::new();
        let o = FragmentedOptions {
            max_levels: 3,
            max_sstables_per_guard: 2,
            ..Default::default()
        };
        let size_candidates = |v: &Arc<dyn LayoutVersion>, o: &FragmentedOptions| {
            let f: &FragmentedVersion = v.as_any().downcast_ref().expect("fragmented");
            p.candidates(f, o, false)
                .into_iter()
                .filter_map(|c| match c {
                    Cand::Guard {
                        level,
                        why: Why::Size,
                        ..
                    } => Some(level),
                    _ => None,
                })
                .collect::<Vec<usize>>()
        };
        // Level 1 holds 200 bytes, level 2 holds 2 × 90: within 25 % of each other.
        let v = version(1, 90);
        assert_eq!(size_candidates(&v, &o), vec![1]);
        // Level 2 holds 2 × 1000: level 1 is a tenth of it.
        assert!(size_candidates(&version(1, 1000), &o).is_empty());
        // Off.
        let off = FragmentedOptions {
            aggressive_ratio: 0.0,
            ..o.clone()
        };
        assert!(size_candidates(&v, &off).is_empty());
    }
}

/// Guards against a guard consolidated at two levels letting a fragment land next to an older
/// table it overlaps with interleaving sequence numbers (`check_invariants` would fail, and a
/// debug build panic in the compaction). The job merges such a child instead.
mod consolidation_tests {
    use std::sync::atomic::AtomicU64;
    use std::sync::Arc;

    use super::super::version::{guard_record, levels_record, FragmentedVersion, GKey, TAG_COMMIT};
    use super::super::{Cand, Fragmented, Why};
    use crate::key::{make_ikey, ValueKind};
    use crate::layout::{JobCtx, Layout, LayoutVersion};
    use crate::manifest::edit::{AddedTable, KsEdit};
    use crate::memtable::Lookup;
    use crate::options::{KeyspaceOptions, Layout as LayoutKind};
    use crate::stats::{IoStats, WriteCause};
    use crate::table::{table_path, TableBuilder, TableCtx, TableMeta};

    /// Table files on the real file system in `dir`, with a 1 MiB block cache.
    pub(super) fn std_tables(dir: &std::path::Path) -> Arc<TableCtx> {
        crate::table::test_support::std_ctx(dir, 1 << 20)
    }

    pub(super) struct Fixture {
        _dir: tempfile::TempDir,
        pub(super) tables: Arc<TableCtx>,
        next: AtomicU64,
        stats: Arc<IoStats>,
        pub(super) opts: KeyspaceOptions,
    }

    impl Fixture {
        pub(super) fn new() -> Fixture {
            let dir = tempfile::tempdir().unwrap();
            let tables = std_tables(dir.path());
            let mut opts = KeyspaceOptions::new(LayoutKind::Fragmented);
            opts.fragmented.max_levels = 4;
            opts.fragmented.max_sstables_per_guard = 2;
            opts.fragmented.guard_skew_ratio = 16;
            Fixture {
                _dir: dir,
                tables,
                next: AtomicU64::new(1000),
                stats: Arc::default(),
                opts,
            }
        }
        pub(super) fn ctx(&self) -> JobCtx<'_> {
            JobCtx {
                tables: &self.tables,
                next_file: &self.next,
                smallest_snapshot: u64::MAX >> 8,
                opts: &self.opts,
                stats: &self.stats,
                hash_key: [0; 16],
                flush_point: None,
            }
        }
        /// A table of `(key, seq, value length)` entries, sorted by key.
        pub(super) fn table(&self, entries: &[(&str, u64, usize)]) -> TableMeta {
            let no = self.next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let w = self
                .tables
                .env
                .create(&table_path(&self.tables.dir, no), WriteCause::Flush)
                .unwrap();
            let mut b = TableBuilder::new(w, no, 4096, 10);
            for (key, seq, len) in entries {
                let v = format!("{key}@{seq}").into_bytes();
                let mut v = v.clone();
                v.resize((*len).max(v.len()), b'.');
                b.add(&make_ikey(key.as_bytes(), *seq, ValueKind::Put), &v)
                    .unwrap();
            }
            b.finish().unwrap()
        }
    }

    pub(super) fn add(level: u32, meta: TableMeta) -> AddedTable {
        AddedTable {
            level,
            slot: 0,
            format: 0,
            meta,
        }
    }

    pub(super) fn fv(v: &Arc<dyn LayoutVersion>) -> &FragmentedVersion {
        v.as_any().downcast_ref().expect("fragmented")
    }

    fn run(
        f: &Fixture,
        v: &Arc<dyn LayoutVersion>,
        job: Option<Box<dyn crate::layout::Job>>,
    ) -> Arc<dyn LayoutVersion> {
        let mut job = job.expect("a job");
        let e = job.run(&f.ctx()).expect("run");
        drop(job);
        v.apply(&e, &f.tables).expect("apply")
    }

    fn flush(
        f: &Fixture,
        v: &Arc<dyn LayoutVersion>,
        entries: &[(&str, u64, usize)],
    ) -> Arc<dyn LayoutVersion> {
        let mut e = KsEdit::default();
        e.added.push(add(0, f.table(entries)));
        v.apply(&e, &f.tables).expect("apply")
    }

    /// The value a get finds, as "key@seq" (the fixture's values start with it).
    pub(super) fn get(v: &Arc<dyn LayoutVersion>, key: &str) -> Option<String> {
        match v.get(key.as_bytes(), u64::MAX >> 8).unwrap() {
            Lookup::Value(b) => Some(
                String::from_utf8_lossy(&b)
                    .trim_end_matches('.')
                    .to_string(),
            ),
            _ => None,
        }
    }

    #[test]
    fn consolidation_never_lands_an_interleaving_fragment() {
        let f = Fixture::new();
        let p = Fragmented::new();
        // Guards "e3" and "m" at levels 1..3; level 1 holds e1@35 in its sentinel and
        // e4@55, e9@56 in guard "e3"; level 2 holds a large table in guard "m".
        let big: Vec<(String, u64, usize)> = (0..200)
            .map(|i| (format!("m{i:03}"), 1 + i as u64 / 100, 500))
            .collect();
        let big_ref: Vec<(&str, u64, usize)> =
            big.iter().map(|(a, b, c)| (a.as_str(), *b, *c)).collect();
        let gk = |s: &str| GKey::from(s.as_bytes());
        let mut e = KsEdit::default();
        e.records.push(levels_record(4));
        for j in [3usize, 2, 1] {
            e.records
                .push(guard_record(TAG_COMMIT, j, &[gk("e3"), gk("m")]));
        }
        e.added.push(add(2, f.table(&big_ref)));
        e.added.push(add(1, f.table(&[("e1", 35, 10)])));
        e.added
            .push(add(1, f.table(&[("e4", 55, 10), ("e9", 56, 10)])));
        let empty: Arc<dyn LayoutVersion> = p.empty_version(&f.tables);
        let mut v = empty.apply(&e, &f.tables).expect("apply");
        v.check_invariants().expect("start");
        let o = f.opts.fragmented.clone();

        // 1. Guard "e3" of level 1 goes to level 2.
        v = run(&f, &v, p.guard_job(fv(&v), &o, 1, 1, Why::Count));
        v.check_invariants().expect("step 1");
        // 2. a@90 is flushed and compacted into level 1, whose empty guards "e3" and "m" are
        //    deleted: level 1 is one sentinel guard.
        v = flush(&f, &v, &[("a", 90, 10)]);
        v = run(&f, &v, p.job_for(fv(&v), &o, &Cand::L0));
        v.check_invariants().expect("step 2");
        assert!(!fv(&v).is_guard(1, b"e3"));
        // 3. f@95 likewise: the level-1 sentinel holds a@90, e1@35 and f@95.
        v = flush(&f, &v, &[("f", 95, 10)]);
        v = run(&f, &v, p.job_for(fv(&v), &o, &Cand::L0));
        v.check_invariants().expect("step 3");
        // 4. The sentinel goes to level 2, where guard "e3" (e4@55..e9@56, receiving f@95) is
        //    skewed and joins the sentinel. Its fragment a@90, e1@35, f@95 would overlap
        //    e4..e9 with interleaving sequence numbers, so that child is merged instead.
        v = run(&f, &v, p.guard_job(fv(&v), &o, 1, 0, Why::Count));
        v.check_invariants().expect("step 4");
        assert!(
            !fv(&v).is_guard(2, b"e3"),
            "the skewed guard joined the sentinel"
        );
        assert!(fv(&v).is_guard(2, b"m"));
        for (key, want) in [
            ("a", "a@90"),
            ("e1", "e1@35"),
            ("e4", "e4@55"),
            ("e9", "e9@56"),
            ("f", "f@95"),
            ("m000", "m000@1"),
            ("m199", "m199@2"),
        ] {
            assert_eq!(get(&v, key).as_deref(), Some(want), "{key}");
        }
        assert_eq!(get(&v, "b"), None);
    }
}

/// Compactions planned, run and installed in random interleavings (as the engine's background
/// threads may: picks and installs serialized by the pick lock, runs overlapping), with
/// flushes and pending guards between them; after every install the invariants hold and
/// every get returns the model's value.
mod interleaving_tests {
    use std::collections::BTreeMap;
    use std::sync::atomic::AtomicU64;
    use std::sync::Arc;

    use super::super::version::{guard_record, levels_record, FragmentedVersion, TAG_PENDING};
    use super::super::{Cand, Fragmented, Why};
    use crate::key::{make_ikey, ValueKind};
    use crate::layout::{Job, JobCtx, Layout, LayoutVersion};
    use crate::manifest::edit::{AddedTable, KsEdit};
    use crate::memtable::Lookup;
    use crate::options::{KeyspaceOptions, Layout as LayoutKind};
    use crate::stats::{IoStats, WriteCause};
    use crate::table::{table_path, TableBuilder};

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n.max(1)
        }
    }

    fn fv(v: &Arc<dyn LayoutVersion>) -> &FragmentedVersion {
        v.as_any().downcast_ref().expect("fragmented")
    }

    /// `snapshot`: a snapshot is taken at a random point and held to the end; jobs run with
    /// it as their smallest snapshot, and gets at it must return the model's values then.
    fn simulate(seed: u64, snapshot: bool) {
        let dir = tempfile::tempdir().unwrap();
        let tables = super::consolidation_tests::std_tables(dir.path());
        let next = AtomicU64::new(10);
        let stats: Arc<IoStats> = Arc::default();
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let mut opts = KeyspaceOptions::new(LayoutKind::Fragmented);
        let levels = 3 + rng.below(2) as usize;
        let f = &mut opts.fragmented;
        f.max_levels = levels;
        f.max_sstables_per_guard = 1 + rng.below(3) as usize;
        f.l0_compaction_trigger = 1 + rng.below(3) as usize;
        f.rewrite_factor = [0, 1, 25][rng.below(3) as usize];
        f.guard_skew_ratio = [0, 2, 4, 16][rng.below(4) as usize];
        f.aggressive_ratio = [0.0, 0.25][rng.below(2) as usize];
        let smallest_snapshot = if rng.below(2) == 0 { u64::MAX >> 8 } else { 0 };
        let o = opts.fragmented.clone();
        // The snapshot's sequence number (none: `u64::MAX`) and the model it must read.
        let snap_at = if snapshot {
            20 + rng.below(200)
        } else {
            u64::MAX
        };
        let mut snap_model: Option<BTreeMap<String, Option<String>>> = None;
        let ctx_at = |seq: u64| JobCtx {
            tables: &tables,
            next_file: &next,
            smallest_snapshot: if snapshot {
                snap_at.min(seq)
            } else {
                smallest_snapshot
            },
            opts: &opts,
            stats: &stats,
            hash_key: [0; 16],
            flush_point: None,
        };
        let p = Fragmented::new();
        let mut v: Arc<dyn LayoutVersion> = p.empty_version(&tables);
        let mut e = KsEdit::default();
        e.records.push(levels_record(levels));
        v = v.apply(&e, &tables).unwrap();
        let mut model: BTreeMap<String, Option<String>> = BTreeMap::new();
        let mut seq = 0u64;
        let mut inflight: Vec<Box<dyn Job>> = Vec::new();
        let last = levels - 1;
        // Every key the latest model names (deleted ones included) is read at `seq`, where
        // `model` holds what it reads (a key it does not name is absent there).
        let check_at = |v: &Arc<dyn LayoutVersion>,
                        latest: &BTreeMap<String, Option<String>>,
                        model: &BTreeMap<String, Option<String>>,
                        seq: u64,
                        at: &str| {
            if let Err(e) = v.check_invariants() {
                panic!("seed {seed} {at}: {e}");
            }
            for k in latest.keys() {
                let want = &model.get(k).cloned().flatten();
                let got = match v.get(k.as_bytes(), seq).unwrap() {
                    Lookup::Value(b) => Some(String::from_utf8_lossy(&b).to_string()),
                    _ => None,
                };
                assert_eq!(&got, want, "seed {seed} {at}: key {k} at {seq}");
            }
        };
        let check = |v: &Arc<dyn LayoutVersion>,
                     model: &BTreeMap<String, Option<String>>,
                     snap: &Option<BTreeMap<String, Option<String>>>,
                     at: &str| {
            check_at(v, model, model, u64::MAX >> 8, at);
            if let Some(m) = snap {
                check_at(v, model, m, snap_at, at);
            }
        };
        for step in 0..300 {
            match rng.below(10) {
                0..=2 => {
                    // A flush: a few keys (puts and deletes), some picked as pending guards.
                    let n = 1 + rng.below(8);
                    let mut keys: Vec<String> =
                        (0..n).map(|_| format!("k{:02}", rng.below(40))).collect();
                    // A few keys carry large values, so that guards are skewed.
                    let large = |k: &str| k.ends_with('7');
                    keys.sort();
                    keys.dedup();
                    let no = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let w = tables
                        .env
                        .create(&table_path(&tables.dir, no), WriteCause::Flush)
                        .unwrap();
                    let mut b = TableBuilder::new(w, no, 512, 10);
                    let mut e = KsEdit::default();
                    let mut pend: BTreeMap<usize, Vec<super::super::version::GKey>> =
                        BTreeMap::new();
                    for k in &keys {
                        if seq == snap_at && snap_model.is_none() {
                            snap_model = Some(model.clone());
                        }
                        seq += 1;
                        if rng.below(5) == 0 {
                            b.add(&make_ikey(k.as_bytes(), seq, ValueKind::Delete), b"")
                                .unwrap();
                            model.insert(k.clone(), None);
                        } else {
                            let mut val = format!("{k}@{seq}").into_bytes();
                            let len = if large(k) { 4000 } else { 10 };
                            val.resize(len + rng.below(200) as usize, b'.');
                            b.add(&make_ikey(k.as_bytes(), seq, ValueKind::Put), &val)
                                .unwrap();
                            model
                                .insert(k.clone(), Some(String::from_utf8_lossy(&val).to_string()));
                        }
                        if rng.below(4) == 0 {
                            let l = 1 + rng.below(last as u64) as usize;
                            let fvv = fv(&v);
                            let known = fvv.is_guard(l, k.as_bytes())
                                || fvv.pending.get(k.as_bytes()).is_some_and(|&t| t <= l);
                            if !known {
                                pend.entry(l).or_default().push(k.as_bytes().into());
                            }
                        }
                    }
                    e.added.push(AddedTable {
                        level: 0,
                        slot: 0,
                        format: 0,
                        meta: b.finish().unwrap(),
                    });
                    for (l, ks) in pend {
                        e.records.push(guard_record(TAG_PENDING, l, &ks));
                    }
                    v = v.apply(&e, &tables).unwrap();
                    check(&v, &model, &snap_model, &format!("step {step} flush"));
                }
                3..=5 => {
                    // Plan a job: the policy's pick, or a guard chosen at random.
                    let job = if rng.below(2) == 0 {
                        p.pick(&v, &ctx_at(seq))
                    } else {
                        let fvv = fv(&v);
                        let level = 1 + rng.below(last as u64) as usize;
                        match fvv.level(level) {
                            Some(lvl) => {
                                let idx = rng.below(lvl.guards.len() as u64) as usize;
                                let why = [Why::Count, Why::Size, Why::Seek, Why::Manual]
                                    [rng.below(4) as usize];
                                if rng.below(4) == 0 {
                                    p.job_for(fvv, &o, &Cand::L0)
                                } else {
                                    p.guard_job(fvv, &o, level, idx, why)
                                }
                            }
                            None => None,
                        }
                    };
                    if let Some(j) = job {
                        inflight.push(j);
                    }
                }
                _ => {
                    if inflight.is_empty() {
                        continue;
                    }
                    let i = rng.below(inflight.len() as u64) as usize;
                    let mut job = inflight.swap_remove(i);
                    let e = job.run(&ctx_at(seq)).unwrap();
                    v = v.apply(&e, &tables).unwrap();
                    drop(job);
                    check(&v, &model, &snap_model, &format!("step {step} install"));
                }
            }
        }
        while let Some(mut job) = inflight.pop() {
            let e = job.run(&ctx_at(seq)).unwrap();
            v = v.apply(&e, &tables).unwrap();
            drop(job);
            check(&v, &model, &snap_model, "drain");
        }
    }

    #[test]
    fn random_interleavings_of_jobs_keep_invariants_and_gets() {
        let n: u64 = std::env::var("SCREE_FRAG_SIM_SEEDS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(40);
        for seed in 0..n {
            simulate(seed, false);
        }
    }

    /// The same with a snapshot held from a random point on: versions it reads must survive
    /// every merge, and sequence numbers at or below it are zeroed at the bottom.
    #[test]
    fn random_interleavings_of_jobs_keep_a_snapshot_readable() {
        let n: u64 = std::env::var("SCREE_FRAG_SIM_SEEDS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(40);
        for seed in 0..n {
            simulate(seed, true);
        }
    }
}

/// A suspected race: a guard merged in place while its parent pushes a fragment into it. Both
/// jobs run side by side (`Source` and `Shared` on the guard are compatible), and either
/// install order is right: a fragment pushed from the parent holds only entries newer than
/// everything in the guard, so the merged table, whatever key span it covers, is older than
/// the fragment. The one push that can carry older entries is the one that consolidates
/// guards, and it needs `Exclusive` on its output range, which a running in-place merge holds
/// `Source` on: that push deletes nothing meanwhile.
mod in_place_merge_beside_a_push {
    use std::sync::Arc;

    use super::super::version::{guard_record, levels_record, GKey, TAG_COMMIT, TAG_DELETE};
    use super::super::{Fragmented, Why};
    use super::consolidation_tests::{add, fv, get, Fixture};
    use crate::layout::{Layout, LayoutVersion};
    use crate::manifest::edit::KsEdit;

    /// `levels` levels; guard "m" at levels 1 and 2, the other `guards_at_2` at level 2 only.
    /// Level-2 guard "m": two tables spanning m1..m6; level-1 guard "m": newer m1, m6.
    fn start(
        f: &Fixture,
        p: &Fragmented,
        levels: usize,
        guards_at_2: &[&str],
    ) -> Arc<dyn LayoutVersion> {
        let gk = |s: &str| GKey::from(s.as_bytes());
        let mut e = KsEdit::default();
        e.records.push(levels_record(levels));
        let at2: Vec<GKey> = guards_at_2.iter().map(|g| gk(g)).collect();
        e.records.push(guard_record(TAG_COMMIT, 2, &at2));
        e.records.push(guard_record(TAG_COMMIT, 1, &[gk("m")]));
        e.added
            .push(add(2, f.table(&[("m1", 1, 10), ("m5", 2, 10)])));
        e.added
            .push(add(2, f.table(&[("m2", 10, 10), ("m6", 11, 10)])));
        e.added
            .push(add(1, f.table(&[("m1", 20, 10), ("m6", 21, 10)])));
        let empty: Arc<dyn LayoutVersion> = p.empty_version(&f.tables);
        let v = empty.apply(&e, &f.tables).expect("apply");
        v.check_invariants().expect("start");
        v
    }

    /// Installs the push and the other job in the order given, checking the invariants after
    /// each, and the newest version of every key at the end.
    fn install_both(
        f: &Fixture,
        v: &Arc<dyn LayoutVersion>,
        push: &KsEdit,
        other: &KsEdit,
        push_first: bool,
    ) -> Arc<dyn LayoutVersion> {
        let (first, second) = if push_first {
            (push, other)
        } else {
            (other, push)
        };
        let v = v.apply(first, &f.tables).expect("first install");
        v.check_invariants().expect("after the first install");
        let v = v.apply(second, &f.tables).expect("second install");
        v.check_invariants().expect("after both installs");
        for (key, want) in [
            ("m1", "m1@20"),
            ("m2", "m2@10"),
            ("m5", "m5@2"),
            ("m6", "m6@21"),
        ] {
            assert_eq!(
                get(&v, key).as_deref(),
                Some(want),
                "{key} (push first: {push_first})"
            );
        }
        v
    }

    #[test]
    fn an_in_place_merge_and_a_push_into_the_same_guard_install_in_either_order() {
        for push_first in [true, false] {
            let mut f = Fixture::new();
            f.opts.fragmented.max_levels = 3;
            let p = Fragmented::new();
            // Guard "m" at levels 1 and 2 (the last); "t" only at level 2, empty there.
            let v = start(&f, &p, 3, &["m", "t"]);
            let o = f.opts.fragmented.clone();

            // The in-place merge of last-level guard "m" is planned first, then the push of
            // level-1 guard "m" into it: both are planned.
            let mut merge = p
                .guard_job(fv(&v), &o, 2, 1, Why::Count)
                .expect("in-place merge planned");
            let mut push = p
                .guard_job(fv(&v), &o, 1, 1, Why::Count)
                .expect("push planned beside the merge");
            let merge_edit = merge.run(&f.ctx()).expect("merge");
            let push_edit = push.run(&f.ctx()).expect("push");
            assert!(merge_edit.added.iter().all(|a| a.level == 2));
            assert_eq!(
                merge_edit.removed.len(),
                2,
                "the guard's two tables are merged"
            );
            // The push appends (it cannot take the guard to merge it) and, with the merge
            // holding the guard, deletes no guard: empty "t" stays.
            assert_eq!(push_edit.removed.len(), 1);
            assert!(push_edit.records.iter().all(|r| r.tag != TAG_DELETE));

            let v = install_both(&f, &v, &push_edit, &merge_edit, push_first);
            drop((merge, push));
            let last = fv(&v).level(2).expect("level 2");
            assert_eq!(last.guards[1].tables.len(), 2, "merged table and fragment");
            assert!(fv(&v).is_guard(2, b"t"));
        }
    }
    /// A push takes `Exclusive` on its whole output range to look for guards to consolidate,
    /// and must not keep it when it finds none: else no guard inside that range could be
    /// compacted until the push was installed — the child guards of a guard being pushed
    /// would wait, although fragments are made to let them run side by side.
    #[test]
    fn a_push_that_changes_no_guard_lets_its_child_guards_compact_meanwhile() {
        for push_first in [true, false] {
            let f = Fixture::new();
            let p = Fragmented::new();
            // Four levels (the last is 3). Guard "m" at levels 1 and 2. Nothing to consolidate.
            let v = start(&f, &p, 4, &["m"]);
            let o = f.opts.fragmented.clone();

            let mut push = p
                .guard_job(fv(&v), &o, 1, 1, Why::Count)
                .expect("push of level-1 guard m planned");
            let mut child = p
                .guard_job(fv(&v), &o, 2, 1, Why::Count)
                .expect("level-2 guard m planned while its parent is pushed into it");
            let push_edit = push.run(&f.ctx()).expect("push");
            let child_edit = child.run(&f.ctx()).expect("child");
            assert!(push_edit.added.iter().all(|a| a.level == 2));
            assert!(child_edit.added.iter().all(|a| a.level == 3));
            assert_eq!(
                child_edit.removed.len(),
                2,
                "the child's two tables go down"
            );

            install_both(&f, &v, &push_edit, &child_edit, push_first);
            drop((push, child));
        }
    }
}
