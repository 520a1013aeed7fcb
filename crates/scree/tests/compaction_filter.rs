//! The compaction filter on every layout: values it drops are gone after compaction and the
//! others stay (against a model), and a dropped put never lets an older version of its key
//! come back, at the tip or in a snapshot (docs/compaction-filter.md).

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use scree::{CompactionFilter, Db, Keyspace, Layout};

/// Drops values that start with `D` (and counts what it was asked).
#[derive(Debug, Default)]
struct DropD {
    asked: AtomicU64,
}

impl CompactionFilter for DropD {
    fn drop_value(&self, _key: &[u8], value: &[u8]) -> bool {
        self.asked.fetch_add(1, Ordering::Relaxed);
        value.first() == Some(&b'D')
    }
}

fn open(dir: &std::path::Path, layout: Layout, f: Arc<DropD>) -> (Db, Keyspace) {
    let db = Db::open(dir, common::small_db()).unwrap();
    let mut o = common::small_ks(layout);
    o.compaction_filter = Some(f);
    let ks = db.keyspace("ks", o).unwrap();
    (db, ks)
}

fn key(l: Layout, i: u32) -> Vec<u8> {
    let mut k = format!("key{i:06}").into_bytes();
    while k.len() < common::min_key_len(l) {
        k.insert(0, b'0');
    }
    k
}

fn value(i: u32, round: u32, drop: bool) -> Vec<u8> {
    let mut v = format!("{}{i}-{round}-", if drop { 'D' } else { 'K' }).into_bytes();
    v.resize(40 + (i as usize % 50), b'v');
    v
}

/// Rounds of puts, overwrites (kept → dropped, dropped → kept) and deletes with flushes
/// between them; then `compact`: every key reads as the model says, where the model has no
/// value for a key whose newest value the filter drops.
#[test]
fn dropped_values_disappear_after_compaction_and_others_stay() {
    for layout in Layout::implemented() {
        let dir = tempfile::tempdir().unwrap();
        let f = Arc::new(DropD::default());
        let (db, ks) = open(dir.path(), layout, f.clone());
        let mut model: BTreeMap<Vec<u8>, Option<Vec<u8>>> = BTreeMap::new();
        let n = 1500u32;
        for round in 0..4u32 {
            for i in 0..n {
                // A key's fate changes from round to round: 7 patterns over 4 rounds.
                let sel = (i.wrapping_mul(2654435761) >> 7).wrapping_add(round * (i % 7)) % 5;
                let k = key(layout, i);
                match sel {
                    0 => {
                        ks.delete(&k).unwrap();
                        model.insert(k, None);
                    }
                    1 | 2 => {
                        let v = value(i, round, true);
                        ks.put(&k, &v).unwrap();
                        model.insert(k, Some(v));
                    }
                    _ => {
                        let v = value(i, round, false);
                        ks.put(&k, &v).unwrap();
                        model.insert(k, Some(v));
                    }
                }
            }
            db.flush().unwrap();
        }
        // Reads do not consult the filter: before any compaction of the last round's data,
        // its dropped values still read (the filter decides when data is rewritten).
        for (k, v) in &model {
            if let Some(v) = v {
                let got = ks.get(k).unwrap();
                assert!(
                    got.as_ref() == Some(v) || (v[0] == b'D' && got.is_none()),
                    "{layout}: {k:?} before compact read {got:?}"
                );
            }
        }
        db.compact().unwrap();
        db.wait_for_compactions().unwrap();
        assert!(
            f.asked.load(Ordering::Relaxed) > 0,
            "{layout}: filter never asked"
        );
        let (mut dropped, mut kept) = (0, 0);
        for (k, v) in &model {
            let want = v.clone().filter(|v| v[0] != b'D');
            if v.is_some() && want.is_none() {
                dropped += 1;
            } else if want.is_some() {
                kept += 1;
            }
            assert_eq!(ks.get(k).unwrap(), want, "{layout}: key {k:?}");
        }
        assert!(
            dropped > 100 && kept > 100,
            "{layout}: {dropped} dropped, {kept} kept"
        );
        if layout.order().serves_range() {
            let live: Vec<Vec<u8>> = model
                .iter()
                .filter(|(_, v)| v.as_ref().is_some_and(|v| v[0] != b'D'))
                .map(|(k, _)| k.clone())
                .collect();
            let scanned: Vec<Vec<u8>> = ks.range::<Vec<u8>, _>(..).map(|r| r.unwrap().0).collect();
            assert_eq!(scanned, live, "{layout}: scan after compaction");
        }
        db.check_invariants().unwrap();
        // Reopened, the same (the filter is set again at open; nothing is resurrected).
        drop((ks, db));
        let (db, ks) = open(dir.path(), layout, f);
        for (k, v) in &model {
            let want = v.clone().filter(|v| v[0] != b'D');
            assert_eq!(ks.get(k).unwrap(), want, "{layout}: reopened, key {k:?}");
        }
        drop(db);
    }
}

/// A put the filter drops is never replaced by an older version of its key: not while a
/// snapshot older than it holds it back (it is kept, and the snapshot sees its own version),
/// and not after (the key reads as absent, at the tip and in a snapshot newer than the put).
#[test]
fn a_dropped_put_never_resurrects_an_older_version() {
    for layout in Layout::implemented() {
        let dir = tempfile::tempdir().unwrap();
        let f = Arc::new(DropD::default());
        let (db, ks) = open(dir.path(), layout, f);
        let (a, b) = (key(layout, 1), key(layout, 2));
        let (ka, da) = (value(1, 0, false), value(1, 1, true));
        let (kb, db_) = (value(2, 0, false), value(2, 1, true));
        // `a`: kept version, then a snapshot, then a dropped version.
        ks.put(&a, &ka).unwrap();
        db.flush().unwrap();
        let s1 = db.snapshot();
        ks.put(&a, &da).unwrap();
        // `b`: kept version flushed, then a dropped version, then a snapshot after both.
        ks.put(&b, &kb).unwrap();
        db.flush().unwrap();
        ks.put(&b, &db_).unwrap();
        // Filler in the same key range, so merges overlap the tables of `a` and `b`.
        for i in 3..600 {
            ks.put(key(layout, i), value(i, 0, false)).unwrap();
        }
        let s2 = db.snapshot();
        db.compact().unwrap();
        // s1 predates `a`'s dropped put: it is kept, s1 sees the kept version.
        assert_eq!(s1.get(&ks, &a).unwrap(), Some(ka.clone()), "{layout}: s1 a");
        let tip_a = ks.get(&a).unwrap();
        assert!(
            tip_a.is_none() || tip_a == Some(da.clone()),
            "{layout}: tip a resurrected {tip_a:?}"
        );
        // Neither s2 nor the tip ever sees `b`'s older, kept version.
        for (who, got) in [
            ("s2", s2.get(&ks, &b).unwrap()),
            ("tip", ks.get(&b).unwrap()),
        ] {
            assert!(
                got.is_none() || got == Some(db_.clone()),
                "{layout}: {who} b resurrected {got:?}"
            );
        }
        drop((s1, s2));
        // More overlapping writes and a compaction with no snapshot: both are gone, never
        // replaced by their older versions.
        for round in 1..3 {
            for i in 3..600 {
                ks.put(key(layout, i), value(i, round, false)).unwrap();
            }
            db.compact().unwrap();
            for k in [&a, &b] {
                let got = ks.get(k).unwrap();
                assert!(
                    got.is_none() || got.as_ref().is_some_and(|v| v[0] == b'D'),
                    "{layout}: round {round}: resurrected {got:?}"
                );
            }
        }
        db.check_invariants().unwrap();
    }
}

/// Drops a value of `data` whose key is absent from another keyspace (`live`), read through a
/// `WeakKeyspace` from the compaction thread; counts the reads that failed.
#[derive(Debug)]
struct LiveIn {
    live: scree::WeakKeyspace,
    failed: AtomicU64,
}

impl CompactionFilter for LiveIn {
    fn drop_value(&self, key: &[u8], _value: &[u8]) -> bool {
        match self.live.get(key) {
            Ok(v) => v.is_none(),
            Err(_) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                false
            }
        }
    }
}

/// A filter that reads another keyspace: compactions of `data` keep exactly the keys `live`
/// holds (on every layout, both keyspaces of it), without deadlock; the filter's handle does
/// not keep the database open (dropping the handles closes it, so it reopens at once; a
/// `Keyspace` in the filter would make a cycle and leave the lock held); reads after the
/// close are `Closed`.
#[test]
fn a_filter_reading_another_keyspace_through_a_weak_handle() {
    for layout in Layout::implemented() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), common::small_db()).unwrap();
        let live = db.keyspace("live", common::small_ks(layout)).unwrap();
        let f = Arc::new(LiveIn {
            live: live.downgrade(),
            failed: AtomicU64::new(0),
        });
        let mut o = common::small_ks(layout);
        o.compaction_filter = Some(f.clone());
        let data = db.keyspace("data", o).unwrap();
        let n = 2000u32;
        let mut model = BTreeMap::new();
        for round in 0..3u32 {
            for i in 0..n {
                let k = key(layout, i);
                let v = value(i, round, false);
                data.put(&k, &v).unwrap();
                model.insert(k.clone(), v);
                if (i + round) % 3 == 0 {
                    live.put(&k, b"").unwrap();
                } else if round == 2 {
                    live.delete(&k).unwrap();
                }
            }
            db.flush().unwrap();
        }
        db.compact().unwrap();
        db.wait_for_compactions().unwrap();
        for (k, v) in &model {
            let is_live = live.get(k).unwrap().is_some();
            let got = data.get(k).unwrap();
            if is_live {
                assert_eq!(got.as_ref(), Some(v), "{layout}: a live key was dropped");
            } else {
                assert_eq!(got, None, "{layout}: a key absent from `live` survived");
            }
        }
        assert_eq!(f.failed.load(Ordering::Relaxed), 0, "{layout}");
        let weak = live.downgrade();
        drop((data, live, db));
        assert!(
            matches!(weak.get(b"k"), Err(scree::Error::Closed)),
            "{layout}"
        );
        // Closed: the lock is free and the data reads back.
        let db = Db::open(dir.path(), common::small_db()).unwrap();
        let live = db.keyspace("live", common::small_ks(layout)).unwrap();
        assert!(live.get(key(layout, 1)).unwrap().is_some(), "{layout}");
    }
}
