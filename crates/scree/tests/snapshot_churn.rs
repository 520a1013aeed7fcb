//! Snapshot churn: random puts and deletes over 20 to 220 keys (many versions each), with
//! snapshots taken and released at random, flushes, full compactions, waits and reopens, while
//! background threads merge. Every check reads every key (and, on sorted layouts, scans) at a
//! live snapshot or at the latest state and compares with a `BTreeMap` model: a version dropped
//! while a snapshot still reads it, a tombstone dropped above an older value, or a zeroed
//! sequence number that lets an older version win shows as a difference. Half the seeds use
//! shallow trees, in-place merges, one table per guard, frequent garbage collection and
//! eager L0 merges. `SCREE_CHURN_SEEDS` (default 1), `SCREE_CHURN_SEED0`, `SCREE_CHURN_LAYOUT`.

mod common;

use std::collections::BTreeMap;

use scree::{Db, Layout};

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

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn run(layout: Layout, seed: u64) {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut o = common::small_ks(layout);
    o.write_buffer_bytes = 65536 * (1 + rng.below(2) as usize);
    if rng.below(2) == 0 {
        o.fragmented.max_levels = 3;
        o.fragmented.rewrite_factor = 1 + rng.below(3);
        o.fragmented.max_sstables_per_guard = 1 + rng.below(3) as usize;
        o.fragmented.seek_compaction_threshold = 1 + rng.below(3);
        o.fragmented.guard_skew_ratio = [0, 2, 16][rng.below(3) as usize];
        o.fragmented.l0_compaction_trigger = 1 + rng.below(2) as usize;
        o.trie.gc_garbage_ratio = [0.0, 0.01, 0.2][rng.below(3) as usize];
        o.trie.max_last_level_sublevels = 2 + rng.below(3) as usize;
        o.trie.pile_size = 2 + rng.below(2) as usize;
        o.trie.last_level_depth = 1 + rng.below(2) as u32;
        o.leveled.l0_compaction_trigger = 1 + rng.below(2) as usize;
        o.leveled.max_levels = 3 + rng.below(3) as usize;
    }
    let mut dbo = common::small_db();
    dbo.background_threads = 1 + rng.below(2) as usize;
    let open = |dbo: &scree::Options, o: &scree::KeyspaceOptions| {
        let db = Db::open(dir.path(), dbo.clone()).unwrap();
        let ks = db.keyspace("t", o.clone()).unwrap();
        (db, ks)
    };
    let (mut db, mut ks) = open(&dbo, &o);
    let nkeys = 20 + rng.below(200);
    let mut model = Model::new();
    let mut snaps: Vec<(scree::Snapshot, Model)> = Vec::new();
    let scans = common::has_scans(layout);
    for step in 0..3000u64 {
        let r = rng.below(1000);
        let k = format!("k{:04}", rng.below(nkeys)).into_bytes();
        if r < 550 {
            let mut v = format!("{step}-").into_bytes();
            v.resize(v.len() + rng.below(1500) as usize, b'x');
            ks.put(&k, &v).unwrap();
            model.insert(k, v);
        } else if r < 800 {
            ks.delete(&k).unwrap();
            model.remove(&k);
        } else if r < 830 {
            snaps.push((db.snapshot(), model.clone()));
        } else if r < 850 {
            if !snaps.is_empty() {
                let i = rng.below(snaps.len() as u64) as usize;
                snaps.remove(i);
            }
        } else if r < 870 {
            db.flush().unwrap();
        } else if r < 876 {
            db.compact().unwrap();
        } else if r < 880 {
            db.wait_for_compactions().unwrap();
        } else if r < 882 {
            snaps.clear();
            drop(ks);
            drop(db);
            let (d, k2) = open(&dbo, &o);
            db = d;
            ks = k2;
        } else {
            // Check a snapshot (or the latest state).
            let which = rng.below(snaps.len() as u64 + 1) as usize;
            let (s, m) = match snaps.get(which) {
                Some((s, m)) => (Some(s), m),
                None => (None, &model),
            };
            for i in 0..nkeys {
                let k = format!("k{i:04}").into_bytes();
                let got = match s {
                    Some(s) => s.get(&ks, &k).unwrap(),
                    None => ks.get(&k).unwrap(),
                };
                assert_eq!(
                    got.as_deref(),
                    m.get(&k).map(|v| v.as_slice()),
                    "{layout:?} seed {seed} step {step} key {} snapshot {:?}",
                    String::from_utf8_lossy(&k),
                    s
                );
            }
            if scans {
                let got: Vec<(Vec<u8>, Vec<u8>)> = match s {
                    Some(s) => s
                        .range::<Vec<u8>, _>(&ks, ..)
                        .collect::<scree::Result<_>>()
                        .unwrap(),
                    None => ks
                        .range::<Vec<u8>, _>(..)
                        .collect::<scree::Result<_>>()
                        .unwrap(),
                };
                let want: Vec<(Vec<u8>, Vec<u8>)> =
                    m.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
                assert!(
                    got == want,
                    "{layout:?} seed {seed} step {step} scan differs (snapshot {s:?})"
                );
            }
        }
    }
    db.check_invariants().unwrap();
}

#[test]
fn snapshots_and_the_latest_state_match_a_model_under_churn() {
    let n: u64 = std::env::var("SCREE_CHURN_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let start: u64 = std::env::var("SCREE_CHURN_SEED0")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let only = std::env::var("SCREE_CHURN_LAYOUT").ok();
    for seed in start..start + n {
        for layout in Layout::implemented() {
            if only.as_deref().is_some_and(|l| l != layout.name()) {
                continue;
            }
            run(layout, seed);
        }
    }
}
