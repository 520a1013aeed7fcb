//! Unit tests of the fragmented layout: guard selection, records, locks, iterators.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use super::*;
use crate::options::FragmentedOptions;

#[test]
fn guard_bits_scale_with_keys() {
    let o = FragmentedOptions::default();
    // 5M keys, 8 level-1 guards: 2^19 keys per level-1 guard.
    assert_eq!(top_bits(&o, 5_000_000), 19);
    // Tiny stores stay at the floor: the last level still needs one bit.
    assert_eq!(top_bits(&o, 10), 11);
    assert_eq!(level_bits(19, 2, 1), 19);
    assert_eq!(level_bits(19, 2, 6), 9);
    assert_eq!(level_bits(3, 2, 6), 1);
    let fixed = FragmentedOptions {
        top_level_bits: 27,
        ..Default::default()
    };
    assert_eq!(top_bits(&fixed, 5_000_000), 27);
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
