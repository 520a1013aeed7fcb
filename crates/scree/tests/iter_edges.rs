//! Range iterators on the sorted layouts: targeted edge cases.

mod common;

use scree::{Db, Error, Layout};

/// A damaged data block met in the middle of a scan is an `Err` item in either direction and
/// from either end of a mixed walk: never a panic, never a silent end or a skipped block.
#[test]
fn a_damaged_block_is_an_error_item_forward_backward_and_mixed() {
    for layout in [Layout::Leveled, Layout::Fragmented] {
        for mmap in [true, false] {
            let d = tempfile::tempdir().unwrap();
            let opts = || {
                let mut o = common::small_db();
                o.block_cache_bytes = 0;
                o.mmap_reads = mmap;
                o
            };
            {
                let db = Db::open(d.path(), opts()).unwrap();
                let ks = db.keyspace("k", common::small_ks(layout)).unwrap();
                for i in 0..600u32 {
                    ks.put(format!("k{i:05}"), vec![b'v'; 40]).unwrap();
                }
                db.flush().unwrap();
                db.compact().unwrap();
            }
            // Flip one byte a third into the largest table (its data blocks).
            let (path, len) = std::fs::read_dir(d.path())
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.extension().is_some_and(|x| x == "sst"))
                .map(|p| {
                    let l = std::fs::metadata(&p).unwrap().len();
                    (p, l)
                })
                .max_by_key(|(_, l)| *l)
                .unwrap();
            let mut bytes = std::fs::read(&path).unwrap();
            bytes[len as usize / 3] ^= 0x40;
            std::fs::write(&path, &bytes).unwrap();

            let db = Db::open(d.path(), opts()).unwrap();
            let ks = db.keyspace("k", common::small_ks(layout)).unwrap();
            let what = format!("{layout} mmap {mmap}");
            let check = |items: Vec<scree::Result<(Vec<u8>, Vec<u8>)>>, dir: &str| {
                let errs = items.iter().filter(|r| r.is_err()).count();
                assert_eq!(
                    errs,
                    1,
                    "{what} {dir}: {} items, {errs} errors",
                    items.len()
                );
                assert!(
                    matches!(items.last(), Some(Err(Error::Corruption { .. }))),
                    "{what} {dir}: the error is not the last item"
                );
                assert!(items.len() < 600, "{what} {dir}");
            };
            check(ks.range::<&[u8], _>(..).collect(), "forward");
            check(ks.range::<&[u8], _>(..).rev().collect(), "reverse");
            // Mixed: the two ends meet at the damaged block; whichever end reaches it first
            // reports it, and nothing is yielded after.
            let mut it = ks.range::<&[u8], _>(..);
            let mut items = Vec::new();
            let mut front = true;
            loop {
                let n = if front { it.next() } else { it.next_back() };
                front = !front;
                match n {
                    Some(r) => items.push(r),
                    None => break,
                }
            }
            check(items, "mixed");
            assert!(it.next().is_none() && it.next_back().is_none(), "{what}");
        }
    }
}

/// Keys of up to 64 KiB that share long prefixes (each much larger than a block and a table
/// target), overwritten and deleted across memtables and levels, scanned in both directions
/// with bounds that fall between them, at a snapshot and at the latest state.
#[test]
fn huge_keys_with_shared_prefixes_scan_both_ways_at_snapshots() {
    use std::collections::BTreeMap;
    use std::ops::Bound;
    for layout in [Layout::Leveled, Layout::Fragmented] {
        let d = tempfile::tempdir().unwrap();
        let db = Db::open(d.path(), common::small_db()).unwrap();
        let ks = db.keyspace("k", common::small_ks(layout)).unwrap();
        // Key i: a run of 0xFF (long for most keys), then i, then more bytes for odd i.
        let key = |i: u32| {
            let n = match i % 4 {
                0 => scree::MAX_KEY_BYTES - 8,
                1 => 20_000,
                2 => 3,
                _ => 9_000,
            };
            let mut k = vec![0xffu8; n];
            k.extend_from_slice(&i.to_be_bytes());
            if i % 2 == 1 {
                k.extend_from_slice(&[0xff; 4]);
            }
            k
        };
        let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        let mut snaps = Vec::new();
        for round in 0..4u32 {
            for i in 0..40u32 {
                let k = key(i);
                if (i + round) % 3 == 0 {
                    ks.delete(&k).unwrap();
                    model.remove(&k);
                } else {
                    let v = vec![round as u8; (i as usize * 131) % 3000];
                    ks.put(&k, &v).unwrap();
                    model.insert(k, v);
                }
            }
            snaps.push((db.snapshot(), model.clone()));
            match round {
                0 => db.flush().unwrap(),
                1 => db.compact().unwrap(),
                2 => db.flush().unwrap(),
                _ => {}
            }
        }
        db.compact().unwrap();
        db.check_invariants().unwrap();
        let bounds = |i: u32| -> [Bound<Vec<u8>>; 3] {
            [
                Bound::Included(key(i)),
                Bound::Excluded(key(i)),
                Bound::Unbounded,
            ]
        };
        for (s, m) in &snaps {
            for (a, b) in [(0u32, 39u32), (5, 17), (17, 5), (12, 12), (1, 38)] {
                for lo in bounds(a) {
                    for hi in bounds(b) {
                        let want: Vec<_> = m
                            .iter()
                            .filter(|(k, _)| {
                                (match &lo {
                                    Bound::Included(l) => *k >= l,
                                    Bound::Excluded(l) => *k > l,
                                    Bound::Unbounded => true,
                                }) && (match &hi {
                                    Bound::Included(h) => *k <= h,
                                    Bound::Excluded(h) => *k < h,
                                    Bound::Unbounded => true,
                                })
                            })
                            .map(|(k, v)| (k.clone(), v.clone()))
                            .collect();
                        let got: Vec<_> = s
                            .range(&ks, (lo.clone(), hi.clone()))
                            .map(|r| r.unwrap())
                            .collect();
                        assert!(
                            got == want,
                            "{layout} {a}..{b}: {} vs {}",
                            got.len(),
                            want.len()
                        );
                        let mut got: Vec<_> = s
                            .range(&ks, (lo.clone(), hi.clone()))
                            .rev()
                            .map(|r| r.unwrap())
                            .collect();
                        got.reverse();
                        assert!(got == want, "{layout} rev {a}..{b}");
                    }
                }
            }
            // A prefix of 0xFF bytes shared by nearly every key.
            let got = s.prefix(&ks, vec![0xffu8; 9_000]).rev().count();
            let want = m.keys().filter(|k| k.starts_with(&[0xff; 9_000])).count();
            assert_eq!(got, want, "{layout}");
        }
    }
}

/// Mixed `next`/`next_back` walks at snapshots (and at the latest state) while another thread
/// rewrites every key in one batch per round, flushing and compacting: each walk must show
/// exactly one round's state, every key once.
#[test]
fn mixed_direction_walks_see_one_round_while_flushes_and_compactions_run() {
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};
    const KEYS: u32 = 150;
    let deleted = |i: u32, round: u32| (i + round).is_multiple_of(5);
    for layout in [Layout::Leveled, Layout::Fragmented] {
        let d = tempfile::tempdir().unwrap();
        let db = Db::open(d.path(), common::small_db()).unwrap();
        let ks = db.keyspace("k", common::small_ks(layout)).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicU32::new(0));
        let writer = {
            let (db, ks, stop, done) = (db.clone(), ks.clone(), stop.clone(), done.clone());
            std::thread::spawn(move || {
                let mut round = 0u32;
                while !stop.load(Ordering::Relaxed) {
                    let mut b = scree::WriteBatch::new();
                    for i in 0..KEYS {
                        let k = format!("k{i:04}");
                        if deleted(i, round) {
                            b.delete(&ks, k);
                        } else {
                            let mut v = format!("{round:08}").into_bytes();
                            v.resize(8 + (i as usize * 37) % 400, b'x');
                            b.put(&ks, k, v);
                        }
                    }
                    db.write(b, &scree::WriteOptions::default()).unwrap();
                    round += 1;
                    done.store(round, Ordering::SeqCst);
                    match round % 10 {
                        3 => db.flush().unwrap(),
                        7 if round % 30 == 7 => db.compact().unwrap(),
                        _ => {}
                    }
                }
                round
            })
        };
        let end = Instant::now() + Duration::from_millis(1500);
        let mut walks = 0u32;
        while Instant::now() < end {
            let written = done.load(Ordering::SeqCst);
            let snap = db.snapshot();
            let mut it = if walks.is_multiple_of(3) {
                ks.range::<&[u8], _>(..)
            } else {
                snap.range::<&[u8], _>(&ks, ..)
            };
            let mut got = Vec::new();
            let mut front = walks.is_multiple_of(2);
            let mut n = 0u32;
            loop {
                // Runs of 1..=4 steps per end.
                if n.is_multiple_of(1 + walks % 4) {
                    front = !front;
                }
                n += 1;
                let x = if front { it.next() } else { it.next_back() };
                match x {
                    Some(r) => got.push(r.unwrap()),
                    None => break,
                }
            }
            got.sort();
            let Some(round) = got.first().map(|(_, v)| {
                std::str::from_utf8(&v[..8])
                    .unwrap()
                    .parse::<u32>()
                    .unwrap()
            }) else {
                assert_eq!(written, 0, "{layout}: an empty walk after the first round");
                walks += 1;
                continue;
            };
            let want: Vec<Vec<u8>> = (0..KEYS)
                .filter(|&i| !deleted(i, round))
                .map(|i| format!("k{i:04}").into_bytes())
                .collect();
            let keys: Vec<Vec<u8>> = got.iter().map(|(k, _)| k.clone()).collect();
            assert!(
                round + 1 >= written,
                "{layout}: walk {walks} saw round {round} after {written} rounds were written"
            );
            assert_eq!(keys, want, "{layout}: walk {walks} at round {round}");
            assert!(
                got.iter()
                    .all(|(_, v)| v[..8] == *format!("{round:08}").as_bytes()),
                "{layout}: walk {walks} mixes rounds"
            );
            walks += 1;
        }
        stop.store(true, Ordering::Relaxed);
        let rounds = writer.join().unwrap();
        assert!(
            rounds > 20 && walks > 20,
            "{layout}: {rounds} rounds, {walks} walks"
        );
    }
}
