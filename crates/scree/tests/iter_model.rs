//! Double-ended iteration against a `BTreeMap` model on the sorted layouts: every bound kind
//! (inverted and empty ranges too), prefixes of 0xFF bytes and the empty prefix, `next` and
//! `next_back` mixed on one iterator, at snapshots and at the latest state, with flushes and
//! compactions (background and manual) in between, and iterators held across later writes,
//! flushes and compactions (they must keep showing the state at their creation).

mod common;

use std::collections::{BTreeMap, VecDeque};
use std::ops::Bound;

use proptest::prelude::*;
use scree::{Db, Error, Keyspace, Layout, RangeIter, Snapshot, WriteBatch, WriteOptions};

/// Bytes keys are made of: prefixes of each other, with 0x00 and 0xFF at both ends.
const ALPHABET: [u8; 4] = [0x00, 0x41, 0xfe, 0xff];

/// Every key of up to three bytes over [`ALPHABET`], the empty key first (85 keys).
fn keys() -> Vec<Vec<u8>> {
    let mut out = vec![Vec::new()];
    for len in 1..=3u32 {
        for n in 0..ALPHABET.len().pow(len) {
            let mut k = Vec::new();
            let mut x = n;
            for _ in 0..len {
                k.push(ALPHABET[x % ALPHABET.len()]);
                x /= ALPHABET.len();
            }
            out.push(k);
        }
    }
    out
}

fn value(k: usize, v: u16, big: bool) -> Vec<u8> {
    let mut out = format!("v{k}-{v}-").into_bytes();
    // Some values span many 512-byte blocks and more than an 8 KiB table; a few of them fill
    // a 64 KiB memtable, so frozen memtables wait for their flush beside the active one.
    let len = if big {
        6000 + v as usize % 24000
    } else {
        v as usize % 200
    };
    out.resize(out.len() + len, b'a' + (v % 26) as u8);
    out
}

#[derive(Debug, Clone, Copy)]
enum B {
    In(usize),
    Ex(usize),
    Un,
}

#[derive(Debug, Clone)]
enum Op {
    Put(usize, u16, bool),
    Delete(usize),
    Batch(Vec<(usize, Option<u16>)>),
    Snapshot,
    DropSnapshot(usize),
    Flush,
    Compact,
    /// A range at the latest state (None) or at a snapshot, stepped front (true) and back.
    Range(Option<usize>, B, B, Vec<bool>),
    /// A prefix (indexes into `keys()`; the empty key gives the empty prefix).
    Prefix(Option<usize>, usize, Vec<bool>),
    /// A range iterator kept for later `Resume`s.
    Hold(Option<usize>, B, B, Vec<bool>),
    Resume(usize, Vec<bool>),
    Get(Option<usize>, usize),
}

fn bound(n: usize) -> impl Strategy<Value = B> {
    prop_oneof![
        2 => (0..n).prop_map(B::In),
        2 => (0..n).prop_map(B::Ex),
        1 => Just(B::Un),
    ]
}

fn steps() -> impl Strategy<Value = Vec<bool>> {
    prop::collection::vec(any::<bool>(), 0..24)
}

fn at() -> impl Strategy<Value = Option<usize>> {
    prop::option::of(any::<usize>())
}

fn op(n: usize) -> impl Strategy<Value = Op> {
    let k = 0..n;
    prop_oneof![
        30 => (k.clone(), any::<u16>(), prop::bool::weighted(0.08)).prop_map(|(k, v, b)| Op::Put(k, v, b)),
        10 => k.clone().prop_map(Op::Delete),
        4 => prop::collection::vec((k.clone(), prop::option::of(any::<u16>())), 1..8).prop_map(Op::Batch),
        3 => Just(Op::Snapshot),
        1 => any::<usize>().prop_map(Op::DropSnapshot),
        2 => Just(Op::Flush),
        1 => Just(Op::Compact),
        6 => (at(), bound(n), bound(n), steps()).prop_map(|(a, l, h, s)| Op::Range(a, l, h, s)),
        3 => (at(), k.clone(), steps()).prop_map(|(a, p, s)| Op::Prefix(a, p, s)),
        2 => (at(), bound(n), bound(n), steps()).prop_map(|(a, l, h, s)| Op::Hold(a, l, h, s)),
        4 => (any::<usize>(), steps()).prop_map(|(i, s)| Op::Resume(i, s)),
        4 => (at(), k.clone()).prop_map(|(a, k)| Op::Get(a, k)),
    ]
}

type Model = BTreeMap<Vec<u8>, Vec<u8>>;
type Items = VecDeque<(Vec<u8>, Vec<u8>)>;

fn to_bound(b: B, keys: &[Vec<u8>]) -> Bound<Vec<u8>> {
    match b {
        B::In(i) => Bound::Included(keys[i].clone()),
        B::Ex(i) => Bound::Excluded(keys[i].clone()),
        B::Un => Bound::Unbounded,
    }
}

/// The model's items inside `(lo, hi)`, by filtering (`BTreeMap::range` panics on inverted
/// ranges, which the engine must answer as empty).
fn expect(m: &Model, lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>) -> Items {
    m.iter()
        .filter(|(k, _)| {
            (match lo {
                Bound::Included(l) => *k >= l,
                Bound::Excluded(l) => *k > l,
                Bound::Unbounded => true,
            }) && (match hi {
                Bound::Included(h) => *k <= h,
                Bound::Excluded(h) => *k < h,
                Bound::Unbounded => true,
            })
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn show(x: &Option<(Vec<u8>, Vec<u8>)>) -> String {
    match x {
        None => "end".into(),
        Some((k, v)) => format!(
            "{k:02x?}={}",
            String::from_utf8_lossy(&v[..v.len().min(12)])
        ),
    }
}

/// Steps `it` and the model's deque together; then (when `drain`) alternates to the end and
/// checks that the iterator stays finished.
fn walk(
    it: &mut RangeIter,
    want: &mut Items,
    steps: &[bool],
    drain: bool,
    what: &str,
) -> Result<(), TestCaseError> {
    let mut one = |front: bool, i: usize| -> Result<bool, TestCaseError> {
        let got = if front { it.next() } else { it.next_back() };
        let got = got
            .transpose()
            .map_err(|e| TestCaseError::fail(format!("{what}: step {i}: {e}")))?;
        let exp = if front {
            want.pop_front()
        } else {
            want.pop_back()
        };
        if got != exp {
            return Err(TestCaseError::fail(format!(
                "{what}: step {i} ({}): got {} want {}",
                if front { "next" } else { "next_back" },
                show(&got),
                show(&exp)
            )));
        }
        Ok(got.is_some())
    };
    let mut i = 0;
    for &front in steps {
        one(front, i)?;
        i += 1;
    }
    if drain {
        let mut front = steps.len().is_multiple_of(2);
        while one(front, i)? {
            front = !front;
            i += 1;
        }
        one(true, i)?;
        one(false, i + 1)?;
    }
    Ok(())
}

struct Held {
    it: RangeIter,
    want: Items,
    what: String,
}

/// `parallel`: seeks position a fragmented level's tables on the seek pool, and gets probe
/// the last level on the search pool.
fn run(layout: Layout, parallel: bool, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let keys = keys();
    let dir = tempfile::tempdir().map_err(|e| TestCaseError::fail(e.to_string()))?;
    let fail = |e: Error| TestCaseError::fail(format!("{layout} (parallel {parallel}): {e}"));
    let mut o = common::small_db();
    o.parallel_search = parallel;
    o.max_immutable_memtables = 4;
    let db = Db::open(dir.path(), o).map_err(fail)?;
    let mut ko = common::small_ks(layout);
    ko.fragmented.parallel_seeks = parallel;
    let ks: Keyspace = db.keyspace("t", ko).map_err(fail)?;
    let mut model = Model::new();
    let mut snaps: Vec<(Snapshot, Model)> = Vec::new();
    let mut held: Vec<Held> = Vec::new();
    let view = |a: Option<usize>, snaps: &Vec<(Snapshot, Model)>| -> Option<usize> {
        a.filter(|_| !snaps.is_empty()).map(|i| i % snaps.len())
    };
    for (n, op) in ops.into_iter().enumerate() {
        let hold = matches!(op, Op::Hold(..));
        match op {
            Op::Put(k, v, big) => {
                ks.put(&keys[k], value(k, v, big)).map_err(fail)?;
                model.insert(keys[k].clone(), value(k, v, big));
            }
            Op::Delete(k) => {
                ks.delete(&keys[k]).map_err(fail)?;
                model.remove(&keys[k]);
            }
            Op::Batch(items) => {
                let mut b = WriteBatch::new();
                for (k, v) in &items {
                    match v {
                        Some(v) => b.put(&ks, &keys[*k], value(*k, *v, false)),
                        None => b.delete(&ks, &keys[*k]),
                    }
                }
                db.write(b, &WriteOptions::default()).map_err(fail)?;
                for (k, v) in items {
                    match v {
                        Some(v) => model.insert(keys[k].clone(), value(k, v, false)),
                        None => model.remove(&keys[k]),
                    };
                }
            }
            Op::Snapshot => snaps.push((db.snapshot(), model.clone())),
            Op::DropSnapshot(i) => {
                if !snaps.is_empty() {
                    let i = i % snaps.len();
                    snaps.remove(i);
                }
            }
            Op::Flush => db.flush().map_err(fail)?,
            Op::Compact => {
                db.compact().map_err(fail)?;
                db.check_invariants().map_err(fail)?;
            }
            Op::Range(a, lo, hi, st) | Op::Hold(a, lo, hi, st) => {
                let (lo, hi) = (to_bound(lo, &keys), to_bound(hi, &keys));
                let at = view(a, &snaps);
                let (mut it, mut want) = match at {
                    Some(i) => (
                        snaps[i].0.range(&ks, (lo.clone(), hi.clone())),
                        expect(&snaps[i].1, &lo, &hi),
                    ),
                    None => (ks.range((lo.clone(), hi.clone())), expect(&model, &lo, &hi)),
                };
                let what = format!("{layout} op {n}: range {lo:02x?}..{hi:02x?} at {at:?}");
                walk(&mut it, &mut want, &st, !hold, &what)?;
                if hold {
                    held.push(Held { it, want, what });
                }
            }
            Op::Prefix(a, p, st) => {
                let p = &keys[p];
                let at = view(a, &snaps);
                let m = at.map_or(&model, |i| &snaps[i].1);
                let mut want: Items = m
                    .iter()
                    .filter(|(k, _)| k.starts_with(p))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                let mut it = match at {
                    Some(i) => snaps[i].0.prefix(&ks, p),
                    None => ks.prefix(p),
                };
                let what = format!("{layout} op {n}: prefix {p:02x?} at {at:?}");
                walk(&mut it, &mut want, &st, true, &what)?;
            }
            Op::Get(a, k) => {
                let at = view(a, &snaps);
                let (got, want) = match at {
                    Some(i) => (snaps[i].0.get(&ks, &keys[k]), snaps[i].1.get(&keys[k])),
                    None => (ks.get(&keys[k]), model.get(&keys[k])),
                };
                let got = got.map_err(fail)?;
                prop_assert_eq!(
                    got.as_ref(),
                    want,
                    "{} op {}: get {:02x?} at {:?}",
                    layout,
                    n,
                    keys[k],
                    at
                );
            }
            Op::Resume(i, st) => {
                if held.is_empty() {
                    continue;
                }
                let i = i % held.len();
                let h = &mut held[i];
                let what = format!("{} (resumed at op {n})", h.what);
                walk(&mut h.it, &mut h.want, &st, false, &what)?;
                if h.want.is_empty() {
                    held.remove(i);
                }
            }
        }
    }
    for mut h in held {
        let what = format!("{} (drained at the end)", h.what);
        walk(&mut h.it, &mut h.want, &[], true, &what)?;
    }
    db.check_invariants().map_err(fail)?;
    Ok(())
}

fn cases() -> u32 {
    std::env::var("SCREE_ITER_MODEL_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), max_shrink_iters: 400, ..ProptestConfig::default() })]

    #[test]
    fn double_ended_iterators_match_a_btreemap_at_snapshots(
        ops in prop::collection::vec(op(85), 1..300)
    ) {
        for (layout, parallel) in [
            (Layout::Leveled, false),
            (Layout::Fragmented, false),
            (Layout::Fragmented, true),
            (Layout::Lightweight, false),
        ] {
            run(layout, parallel, ops.clone())?;
        }
    }
}
