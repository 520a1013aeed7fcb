//! Writers, plain readers and snapshot readers at once, on every layout, with flushes and
//! compactions running underneath.
//!
//! Writers move amounts between accounts with batches (each writer owns its accounts, so the
//! batches need no read-modify-write isolation); each batch also bumps the writer's transfer
//! counter in a second keyspace. Invariants every snapshot must show: the sum over all accounts is
//! constant; each writer's counter never goes backwards between two snapshots in order; a
//! snapshot read twice gives the same answer; with range scans (forward and reverse) the sum and
//! the account count hold too. Plain readers check that every value parses and is in range.
//!
//! Knob: `SCREE_CONCURRENCY_SECS` (default 2 seconds per layout).

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use scree::testing::fault::FaultFs;
use scree::{Db, Keyspace, Layout, Snapshot, WriteBatch, WriteOptions};

const ACCOUNTS: u64 = 48;
const WRITERS: u64 = 3;
const START: u64 = 1000;
const TOTAL: u64 = ACCOUNTS * START;

fn acct(i: u64) -> Vec<u8> {
    format!("acct{i:03}").into_bytes()
}

fn counter(w: u64) -> Vec<u8> {
    format!("w{w}").into_bytes()
}

fn num(v: &[u8]) -> Result<u64, String> {
    std::str::from_utf8(v)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("not a number: {:?}", String::from_utf8_lossy(v)))
}

fn padded(n: u64) -> Vec<u8> {
    // Values of varying length (a padding suffix after a separator) so blocks fill unevenly.
    let mut v = n.to_string().into_bytes();
    v.resize(v.len() + (n as usize % 50), b' ');
    v
}

fn parse(v: &[u8]) -> Result<u64, String> {
    num(String::from_utf8_lossy(v).trim_end().as_bytes())
}

/// Sum of the accounts and the writers' counters at a snapshot, read with gets.
fn read_snapshot(s: &Snapshot, acc: &Keyspace, meta: &Keyspace) -> Result<(u64, Vec<u64>), String> {
    let mut sum = 0;
    for i in 0..ACCOUNTS {
        let v = s
            .get(acc, acct(i))
            .map_err(|e| e.to_string())?
            .ok_or(format!("account {i} missing"))?;
        sum += parse(&v)?;
    }
    let mut counts = Vec::new();
    for w in 0..WRITERS {
        let c = match s.get(meta, counter(w)).map_err(|e| e.to_string())? {
            Some(v) => num(&v)?,
            None => 0,
        };
        counts.push(c);
    }
    Ok((sum, counts))
}

/// `threads`: (background threads, flush-only threads).
fn run(layout: Layout, secs: f64, threads: (usize, usize)) -> Result<String, String> {
    let fs = FaultFs::new(7);
    let mut o = common::small_db();
    o.fs = Some(fs.as_dyn());
    (o.background_threads, o.flush_threads) = threads;
    let db = Db::open("/db", o.clone()).map_err(|e| e.to_string())?;
    let acc = db
        .keyspace("acc", common::small_ks(layout))
        .map_err(|e| e.to_string())?;
    let meta = db
        .keyspace("meta", common::small_ks(layout))
        .map_err(|e| e.to_string())?;
    let mut b = WriteBatch::new();
    for i in 0..ACCOUNTS {
        b.put(&acc, acct(i), padded(START));
    }
    db.write(b, &WriteOptions::default())
        .map_err(|e| e.to_string())?;
    let stop = Arc::new(AtomicBool::new(false));
    let transfers = Arc::new(AtomicU64::new(0));
    let snapshots = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let scans = common::has_scans(layout);
    let result: Result<(), String> = std::thread::scope(|sc| {
        let mut handles = Vec::new();
        for w in 0..WRITERS {
            let (db, acc, meta, stop, transfers) = (
                db.clone(),
                acc.clone(),
                meta.clone(),
                stop.clone(),
                transfers.clone(),
            );
            handles.push(sc.spawn(move || -> Result<(), String> {
                let mine: Vec<u64> = (0..ACCOUNTS).filter(|i| i % WRITERS == w).collect();
                let mut bal: Vec<u64> = vec![START; mine.len()];
                let mut x = 0x2545_F491u64 ^ w;
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let a = (x % mine.len() as u64) as usize;
                    let bi = ((x >> 20) % mine.len() as u64) as usize;
                    if a == bi {
                        continue;
                    }
                    let amount = (x >> 40) % (bal[a] + 1);
                    bal[a] -= amount;
                    bal[bi] += amount;
                    n += 1;
                    let mut b = WriteBatch::new();
                    b.put(&acc, acct(mine[a]), padded(bal[a]));
                    b.put(&acc, acct(mine[bi]), padded(bal[bi]));
                    b.put(&meta, counter(w), n.to_string());
                    let sync = n.is_multiple_of(64);
                    db.write(b, &WriteOptions { sync })
                        .map_err(|e| format!("writer {w}: {e}"))?;
                    transfers.fetch_add(1, Ordering::Relaxed);
                }
                Ok(())
            }));
        }
        for r in 0..2u64 {
            let (db, acc, meta, stop, snapshots) = (
                db.clone(),
                acc.clone(),
                meta.clone(),
                stop.clone(),
                snapshots.clone(),
            );
            handles.push(sc.spawn(move || -> Result<(), String> {
                let mut last_counts = vec![0u64; WRITERS as usize];
                while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                    let s = db.snapshot();
                    let (sum, counts) = read_snapshot(&s, &acc, &meta)?;
                    if sum != TOTAL {
                        return Err(format!("snapshot {}: sum {sum} != {TOTAL}", s.sequence()));
                    }
                    for (w, (&c, &l)) in counts.iter().zip(&last_counts).enumerate() {
                        if c < l {
                            return Err(format!("writer {w}'s counter went back: {l} -> {c}"));
                        }
                    }
                    last_counts = counts.clone();
                    if scans {
                        let fwd: Vec<(Vec<u8>, Vec<u8>)> = s
                            .range(&acc, acct(0)..)
                            .collect::<scree::Result<_>>()
                            .map_err(|e| e.to_string())?;
                        let mut rev: Vec<(Vec<u8>, Vec<u8>)> = s
                            .range(&acc, acct(0)..)
                            .rev()
                            .collect::<scree::Result<_>>()
                            .map_err(|e| e.to_string())?;
                        rev.reverse();
                        if fwd != rev {
                            return Err("forward and reverse scans differ".into());
                        }
                        let total: u64 = fwd
                            .iter()
                            .map(|(_, v)| parse(v))
                            .collect::<Result<Vec<_>, _>>()?
                            .iter()
                            .sum();
                        if fwd.len() as u64 != ACCOUNTS || total != TOTAL {
                            return Err(format!(
                                "scan at snapshot {}: {} accounts, sum {total}",
                                s.sequence(),
                                fwd.len()
                            ));
                        }
                    }
                    // The same snapshot later gives the same answer.
                    if r == 0 {
                        std::thread::sleep(Duration::from_millis(1));
                        let again = read_snapshot(&s, &acc, &meta)?;
                        if again != (sum, counts) {
                            return Err("a snapshot changed under its reader".into());
                        }
                    }
                    snapshots.fetch_add(1, Ordering::Relaxed);
                }
                Ok(())
            }));
        }
        {
            let (acc, stop) = (acc.clone(), stop.clone());
            handles.push(sc.spawn(move || -> Result<(), String> {
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                    i = (i + 7) % ACCOUNTS;
                    let v = acc
                        .get(acct(i))
                        .map_err(|e| e.to_string())?
                        .ok_or(format!("account {i} missing"))?;
                    if parse(&v)? > TOTAL {
                        return Err(format!("account {i} holds more than everything"));
                    }
                }
                Ok(())
            }));
        }
        {
            let (db, stop) = (db.clone(), stop.clone());
            handles.push(sc.spawn(move || -> Result<(), String> {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(40));
                    i += 1;
                    if i.is_multiple_of(5) {
                        db.compact().map_err(|e| format!("compact: {e}"))?;
                    } else {
                        db.flush().map_err(|e| format!("flush: {e}"))?;
                    }
                }
                Ok(())
            }));
        }
        let mut first_err = None;
        for h in handles {
            let r = h.join().unwrap_or_else(|_| Err("a thread panicked".into()));
            if let Err(e) = r {
                stop.store(true, Ordering::SeqCst);
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    });
    result?;
    db.check_invariants().map_err(|e| e.to_string())?;
    let summary = format!(
        "{layout}: {} transfers, {} snapshots checked, {} flushes, {} compactions",
        transfers.load(Ordering::Relaxed),
        snapshots.load(Ordering::Relaxed),
        db.stats().flushes,
        db.stats().compactions
    );
    drop((acc, meta, db));
    // Everything adds up after a reopen too.
    let db = Db::open("/db", o).map_err(|e| e.to_string())?;
    let acc = db
        .keyspace("acc", common::small_ks(layout))
        .map_err(|e| e.to_string())?;
    let meta = db
        .keyspace("meta", common::small_ks(layout))
        .map_err(|e| e.to_string())?;
    let (sum, _) = read_snapshot(&db.snapshot(), &acc, &meta)?;
    if sum != TOTAL {
        return Err(format!("after reopen: sum {sum} != {TOTAL}"));
    }
    Ok(summary)
}

#[test]
fn writers_readers_and_snapshot_readers_on_every_layout() {
    let secs: f64 = std::env::var("SCREE_CONCURRENCY_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2.0);
    for layout in Layout::implemented() {
        match run(layout, secs, (2, 0)) {
            Ok(s) => println!("concurrency {s}"),
            Err(e) => panic!("{layout}: {e}"),
        }
    }
}

/// One general worker and one flush-only thread (`Options::flush_threads`): flushes and
/// compactions run on different threads, and the invariants hold as with two workers.
#[test]
fn a_flush_only_thread_beside_one_worker_on_every_layout() {
    for layout in Layout::implemented() {
        match run(layout, 1.0, (1, 1)) {
            Ok(s) => println!("concurrency (flush thread) {s}"),
            Err(e) => panic!("{layout}: {e}"),
        }
    }
    let mut o = common::small_db();
    o.flush_threads = 17;
    let dir = tempfile::tempdir().expect("tempdir");
    match Db::open(dir.path(), o) {
        Err(scree::Error::InvalidArgument(m)) => assert!(m.contains("flush_threads"), "{m}"),
        other => panic!("{other:?}"),
    }
}

/// With one background thread, a full memtable used to wait until the running compaction
/// ended, and writers with it. A compaction now runs a waiting flush itself between its output
/// tables (`JobCtx::flush_point`). On every layout: that happens under a write-heavy load, and
/// every key reads back as the model says, before and after a reopen.
#[test]
fn a_compaction_runs_a_waiting_flush_when_no_thread_is_free() {
    for layout in Layout::implemented() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut o = common::small_db();
        o.background_threads = 1;
        let db = Db::open(dir.path(), o.clone()).expect("open");
        let ks = db
            .keyspace("k", common::small_ks(layout))
            .expect("keyspace");
        let key = |i: u64| format!("{:016x}", i.wrapping_mul(0x9e37_79b9_7f4a_7c15)).into_bytes();
        let value = |i: u64| format!("v{i}-{}", "x".repeat((i % 40) as usize)).into_bytes();
        let mut model = std::collections::BTreeMap::new();
        let mut i = 0u64;
        // Writes until the mechanism has shown up (it needs a compaction and a full memtable
        // at once), then 2,000 more; bounded so a regression fails instead of hanging.
        let mut until = u64::MAX;
        while i < until && i < 400_000 {
            // Some keys are written twice, so compactions drop versions too.
            let k = i % 150_000;
            ks.put(key(k), value(i)).expect("put");
            model.insert(key(k), value(i));
            i += 1;
            if until == u64::MAX && i.is_multiple_of(500) && db.stats().flushes_in_compactions > 0 {
                until = i + 2_000;
            }
        }
        let s = db.stats();
        assert!(
            s.flushes_in_compactions > 0,
            "{layout}: no flush ran inside a compaction in {i} puts ({} flushes, {} compactions)",
            s.flushes,
            s.compactions
        );
        for (k, v) in &model {
            assert_eq!(ks.get(k).expect("get").as_deref(), Some(&v[..]), "{layout}");
        }
        drop(ks);
        drop(db);
        let db = Db::open(dir.path(), o).expect("reopen");
        let ks = db
            .keyspace("k", common::small_ks(layout))
            .expect("keyspace");
        for (k, v) in &model {
            assert_eq!(
                ks.get(k).expect("get").as_deref(),
                Some(&v[..]),
                "{layout} reopened"
            );
        }
        println!(
            "{layout}: {} flushes inside compactions of {} flushes, {i} puts",
            s.flushes_in_compactions, s.flushes
        );
    }
}

/// `Options::flush_in_compactions = false`: flushes wait for a free background thread again.
#[test]
fn without_flush_in_compactions_only_background_threads_flush() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut o = common::small_db();
    o.background_threads = 1;
    o.flush_in_compactions = false;
    let db = Db::open(dir.path(), o).expect("open");
    let ks = db
        .keyspace("k", common::small_ks(Layout::Trie))
        .expect("keyspace");
    for i in 0..20_000u64 {
        let k = format!("{:016x}", i.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        ks.put(k.as_bytes(), i.to_string()).expect("put");
    }
    db.wait_for_compactions().expect("wait");
    let s = db.stats();
    assert!(s.flushes > 0 && s.compactions > 0, "{s:?}");
    assert_eq!(s.flushes_in_compactions, 0);
}

/// `Db::compact()` returns under a write load that keeps giving it new work (rather than
/// looping for as long as the writes go on, on every layout), and the data stays exact.
#[test]
fn compact_returns_while_writes_go_on() {
    for layout in Layout::implemented() {
        let started = Instant::now();
        let dir = tempfile::tempdir().expect("dir");
        let db = Db::open(dir.path(), common::small_db()).expect("open");
        let ks = db.keyspace("k", common::small_ks(layout)).expect("ks");
        for i in 0..5_000u32 {
            ks.put(i.to_be_bytes(), [5u8; 200]).expect("put");
        }
        let stop = Arc::new(AtomicBool::new(false));
        let writer = {
            let (ks, stop) = (ks.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut i = 0u32;
                while !stop.load(Ordering::Relaxed) {
                    ks.put((1_000_000 + i).to_be_bytes(), [6u8; 200])
                        .expect("put");
                    i += 1;
                    if i.is_multiple_of(5000) {
                        std::thread::sleep(std::time::Duration::from_millis(1));
                    }
                }
                i
            })
        };
        let (tx, rx) = std::sync::mpsc::channel();
        let compactor = {
            let db = db.clone();
            std::thread::spawn(move || {
                let r = db.compact();
                let _ = tx.send(());
                r
            })
        };
        let returned = rx.recv_timeout(std::time::Duration::from_secs(120)).is_ok();
        stop.store(true, Ordering::Relaxed);
        let n = writer.join().expect("writer");
        compactor.join().expect("compactor").expect("compact");
        assert!(
            returned,
            "{layout}: compact() did not return within 120 s of writes"
        );
        println!(
            "{layout}: compact() returned: {returned}; {n} writes meanwhile; {:?}",
            started.elapsed()
        );
        for i in (0..5_000u32).step_by(97) {
            assert_eq!(
                ks.get(i.to_be_bytes()).expect("get").as_deref(),
                Some(&[5u8; 200][..])
            );
        }
        for i in (0..n).step_by(31) {
            assert_eq!(
                ks.get((1_000_000 + i).to_be_bytes())
                    .expect("get")
                    .as_deref(),
                Some(&[6u8; 200][..])
            );
        }
    }
}

/// Non-blind writes are atomic with respect to every other write, on every layout: threads
/// incrementing shared counters with `update` lose no increment while blind puts and deletes of
/// other keys, flushes and compactions run beside them; of threads racing `put_if_absent` on one
/// key exactly one wins and its value stays.
#[test]
fn updates_and_put_if_absent_are_atomic_under_concurrent_writers() {
    const THREADS: u64 = 4;
    const ROUNDS: u64 = 300;
    for layout in Layout::implemented() {
        let d = tempfile::tempdir().unwrap();
        let db = Db::open(d.path(), common::small_db()).unwrap();
        let mut o = common::small_ks(layout);
        o.write_buffer_bytes = 64 * 1024;
        let ks = db.keyspace("k", o).unwrap();
        let stop = AtomicBool::new(false);
        let winners = AtomicU64::new(0);
        std::thread::scope(|s| {
            // Blind writers of other keys, and a flusher, so memtables rotate underneath.
            for w in 0..2u64 {
                let (ks, stop) = (&ks, &stop);
                s.spawn(move || {
                    let mut i = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let k = format!("blind{w}-{:04}", i % 500);
                        if i.is_multiple_of(7) {
                            ks.delete(&k).unwrap();
                        } else {
                            ks.put(&k, vec![b'x'; 100]).unwrap();
                        }
                        i += 1;
                    }
                });
            }
            let flusher = {
                let (db, stop) = (&db, &stop);
                s.spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        db.flush().unwrap();
                        std::thread::sleep(Duration::from_millis(5));
                    }
                })
            };
            let workers: Vec<_> = (0..THREADS)
                .map(|t| {
                    let (ks, winners) = (&ks, &winners);
                    s.spawn(move || {
                        for r in 0..ROUNDS {
                            // Two counters: one every thread bumps, one a pair of threads bumps.
                            for key in ["all".to_string(), format!("pair{}", t / 2)] {
                                ks.update(&key, |old| {
                                    let n = old.map_or(0, |v| num(v).unwrap());
                                    Some((n + 1).to_string().into_bytes())
                                })
                                .unwrap();
                            }
                            let race = format!("race{r:03}");
                            if ks.put_if_absent(&race, t.to_string()).unwrap() {
                                winners.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    })
                })
                .collect();
            for w in workers {
                w.join().unwrap();
            }
            stop.store(true, Ordering::Relaxed);
            flusher.join().unwrap();
        });
        let get_num = |k: &str| num(&ks.get(k).unwrap().unwrap()).unwrap();
        assert_eq!(get_num("all"), THREADS * ROUNDS, "{layout}");
        for p in 0..THREADS / 2 {
            assert_eq!(get_num(&format!("pair{p}")), 2 * ROUNDS, "{layout}");
        }
        assert_eq!(
            winners.load(Ordering::Relaxed),
            ROUNDS,
            "{layout}: one winner per race"
        );
        // A present key is not overwritten; a deleted one is absent again; `update` returning
        // `None` deletes.
        assert!(!ks.put_if_absent("race000", "late").unwrap());
        assert!(get_num("race000") < THREADS, "{layout}");
        ks.delete("race000").unwrap();
        assert!(ks.put_if_absent("race000", "7").unwrap());
        assert_eq!(ks.update("race000", |_| None).unwrap(), None);
        assert_eq!(ks.get("race000").unwrap(), None, "{layout}");
        assert_eq!(ks.update("never", |_| None).unwrap(), None);
        // The value a failed check saw: none written for an oversized value.
        assert!(ks
            .update("big", |_| Some(vec![0; scree::MAX_VALUE_BYTES + 1]))
            .is_err());
        assert_eq!(ks.get("big").unwrap(), None);
        db.compact().unwrap();
        drop(ks);
        drop(db);
        // Recovered as acknowledged.
        let db = Db::open(d.path(), common::small_db()).unwrap();
        let ks = db.keyspace("k", common::small_ks(layout)).unwrap();
        assert_eq!(
            num(&ks.get("all").unwrap().unwrap()).unwrap(),
            THREADS * ROUNDS,
            "{layout}: after reopen"
        );
    }
}
