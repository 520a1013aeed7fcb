//! Model-based test: random operation sequences against a `BTreeMap`, for every layout.

mod common;

use std::collections::BTreeMap;
use std::ops::Bound;

use std::sync::Arc;

use proptest::prelude::*;
use scree::fs::band::{BandConfig, BandFs, BandMode};
use scree::fs::std_fs::StdFs;
use scree::{Db, Error, KeyspaceOptions, Layout, WriteBatch, WriteOptions};

#[derive(Debug, Clone)]
enum Op {
    Put(u16, u16),
    Delete(u16),
    Batch(Vec<(u16, Option<u16>)>),
    Get(u16),
    Range(u16, u16, bool),
    Prefix(u8),
    Snapshot,
    ReadSnapshot(usize, u16, u16),
    DropSnapshot,
    Flush,
    Compact,
    Reopen,
}

fn key(k: u16) -> Vec<u8> {
    // Two-level key space so prefix scans have something to find.
    format!("{:02}/{:04}", k % 7, k).into_bytes()
}

fn value(k: u16, v: u16) -> Vec<u8> {
    let len = (v as usize * 37) % 900;
    let mut out = format!("v{k}-{v}-").into_bytes();
    out.resize(out.len() + len, b'a' + (v % 26) as u8);
    out
}

fn op() -> impl Strategy<Value = Op> {
    let k = 0u16..300;
    prop_oneof![
        30 => (k.clone(), any::<u16>()).prop_map(|(k, v)| Op::Put(k, v)),
        8 => k.clone().prop_map(Op::Delete),
        4 => prop::collection::vec((k.clone(), prop::option::of(any::<u16>())), 1..8).prop_map(Op::Batch),
        10 => k.clone().prop_map(Op::Get),
        4 => (k.clone(), k.clone(), any::<bool>()).prop_map(|(a, b, r)| Op::Range(a.min(b), a.max(b), r)),
        2 => (0u8..7).prop_map(Op::Prefix),
        2 => Just(Op::Snapshot),
        3 => (any::<usize>(), k.clone(), k.clone()).prop_map(|(i, a, b)| Op::ReadSnapshot(i, a.min(b), a.max(b))),
        1 => Just(Op::DropSnapshot),
        2 => Just(Op::Flush),
        1 => Just(Op::Compact),
        1 => Just(Op::Reopen),
    ]
}

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// Compares scan results showing keys (as text) and value lengths only, so failures are
/// readable.
fn same(
    got: &[(Vec<u8>, Vec<u8>)],
    want: &[(Vec<u8>, Vec<u8>)],
    what: &str,
) -> Result<(), TestCaseError> {
    let show = |v: &[(Vec<u8>, Vec<u8>)]| -> Vec<String> {
        v.iter()
            .map(|(k, val)| {
                format!(
                    "{}={}",
                    String::from_utf8_lossy(k),
                    String::from_utf8_lossy(&val[..val.len().min(12)])
                )
            })
            .collect()
    };
    if got != want {
        return Err(TestCaseError::fail(format!(
            "{what}: got {:?}\nwant {:?}",
            show(got),
            show(want)
        )));
    }
    Ok(())
}

fn model_range(m: &Model, lo: &[u8], hi: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    m.range::<[u8], _>((Bound::Included(lo), Bound::Excluded(hi)))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn run(layout: Layout, ops: Vec<Op>) -> Result<(), TestCaseError> {
    run_on(layout, ops, None)
}

/// Runs `ops` with `layout`, on ordinary files or on the band emulator of `device` (a new
/// emulator per case, shared by its reopens; bands of 1 MiB so that small tests fill a few).
fn run_on(layout: Layout, ops: Vec<Op>, device: Option<BandMode>) -> Result<(), TestCaseError> {
    run_tuned(layout, ops, device, &|_| {})
}

/// [`run_on`] with the keyspace options changed by `tune` after the small test settings.
fn run_tuned(
    layout: Layout,
    ops: Vec<Op>,
    device: Option<BandMode>,
    tune: &dyn Fn(&mut KeyspaceOptions),
) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().map_err(|e| TestCaseError::fail(e.to_string()))?;
    let scans = common::has_scans(layout);
    // Cases of an odd length keep sorted tables' index blocks and filters in a block cache
    // too small for them (evicted and read again under the model's operations).
    let mut opts = common::small_db();
    let band_fs = device.map(|mode| {
        let fs = BandFs::new(Arc::new(StdFs), BandConfig::new(mode, 1 << 20)).expect("device");
        Arc::new(fs)
    });
    if let Some(fs) = &band_fs {
        opts.fs = Some(fs.clone());
    }
    let cached = ops.len() % 2 == 1;
    if cached {
        opts.block_cache_bytes = 16 << 10;
        opts.cache_index_and_filter_blocks = true;
    }
    let open = || -> scree::Result<(Db, scree::Keyspace)> {
        let db = Db::open(dir.path(), opts.clone())?;
        let mut ko = common::small_ks(layout);
        tune(&mut ko);
        let ks = db.keyspace("t", ko)?;
        Ok((db, ks))
    };
    let (mut db, mut ks) = open().map_err(|e| TestCaseError::fail(e.to_string()))?;
    let mut model = Model::new();
    let mut snaps: Vec<(scree::Snapshot, Model)> = Vec::new();
    let fail = |e: Error| TestCaseError::fail(format!("{e}"));
    for op in ops {
        match op {
            Op::Put(k, v) => {
                ks.put(key(k), value(k, v)).map_err(fail)?;
                model.insert(key(k), value(k, v));
            }
            Op::Delete(k) => {
                ks.delete(key(k)).map_err(fail)?;
                model.remove(&key(k));
            }
            Op::Batch(items) => {
                let mut b = WriteBatch::new();
                for (k, v) in &items {
                    match v {
                        Some(v) => b.put(&ks, key(*k), value(*k, *v)),
                        None => b.delete(&ks, key(*k)),
                    }
                }
                db.write(
                    b,
                    &WriteOptions {
                        sync: items.len() % 2 == 0,
                    },
                )
                .map_err(fail)?;
                for (k, v) in items {
                    match v {
                        Some(v) => model.insert(key(k), value(k, v)),
                        None => model.remove(&key(k)),
                    };
                }
            }
            Op::Get(k) => {
                let got = ks.get(key(k)).map_err(fail)?;
                prop_assert_eq!(got.as_ref(), model.get(&key(k)), "get {}", k);
            }
            Op::Range(a, b, rev) => {
                let (lo, hi) = (key(a).min(key(b)), key(a).max(key(b)));
                let it = ks.range(lo.clone()..hi.clone());
                if !scans {
                    let first = ks.range(lo..hi).next();
                    prop_assert!(matches!(first, Some(Err(Error::Unsupported(_)))));
                    continue;
                }
                let mut want = model_range(&model, &lo, &hi);
                let got: Vec<_> = if rev {
                    want.reverse();
                    it.rev().collect::<scree::Result<_>>().map_err(fail)?
                } else {
                    it.collect::<scree::Result<_>>().map_err(fail)?
                };
                same(&got, &want, &format!("range {a}..{b} rev={rev}"))?;
            }
            Op::Prefix(p) => {
                if !scans {
                    continue;
                }
                let pre = format!("{p:02}/").into_bytes();
                let got: Vec<_> = ks
                    .prefix(&pre)
                    .collect::<scree::Result<_>>()
                    .map_err(fail)?;
                let want: Vec<_> = model
                    .iter()
                    .filter(|(k, _)| k.starts_with(&pre))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                same(&got, &want, &format!("prefix {p}"))?;
                // Mixed directions meet in the middle without repeating.
                let mut it = ks.prefix(&pre);
                let mut seen = Vec::new();
                let mut front = true;
                loop {
                    let n = if front { it.next() } else { it.next_back() };
                    front = !front;
                    match n {
                        Some(r) => seen.push(r.map_err(fail)?.0),
                        None => break,
                    }
                }
                seen.sort();
                let want_keys: Vec<_> = model
                    .keys()
                    .filter(|k| k.starts_with(&pre))
                    .cloned()
                    .collect();
                prop_assert_eq!(seen, want_keys);
            }
            Op::Snapshot => {
                snaps.push((db.snapshot(), model.clone()));
            }
            Op::ReadSnapshot(i, a, b) => {
                if snaps.is_empty() {
                    continue;
                }
                let (s, m) = &snaps[i % snaps.len()];
                let got = s.get(&ks, key(a)).map_err(fail)?;
                prop_assert_eq!(got.as_ref(), m.get(&key(a)));
                if scans {
                    let (lo, hi) = (key(a).min(key(b)), key(a).max(key(b)));
                    let (a, b) = (lo, hi);
                    let got: Vec<_> = s
                        .range(&ks, a.clone()..b.clone())
                        .collect::<scree::Result<_>>()
                        .map_err(fail)?;
                    same(&got, &model_range(m, &a, &b), "snapshot range")?;
                }
            }
            Op::DropSnapshot => {
                if !snaps.is_empty() {
                    snaps.remove(0);
                }
            }
            Op::Flush => db.flush().map_err(fail)?,
            Op::Compact => {
                db.compact().map_err(fail)?;
                db.check_invariants().map_err(fail)?;
            }
            Op::Reopen => {
                snaps.clear();
                drop(ks);
                drop(db);
                let (d, k) = open().map_err(fail)?;
                db = d;
                ks = k;
            }
        }
    }
    // Final full check.
    for (k, v) in &model {
        let got = ks.get(k).map_err(fail)?;
        prop_assert_eq!(got.as_ref(), Some(v));
    }
    if scans {
        let all: Vec<_> = ks
            .range::<Vec<u8>, _>(..)
            .collect::<scree::Result<_>>()
            .map_err(fail)?;
        let want: Vec<_> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        same(&all, &want, "final scan")?;
    }
    db.check_invariants().map_err(fail)?;
    if let Some(fs) = &band_fs {
        // Every table byte went through the device, and the device's accounting holds: it
        // wrote the host's bytes plus what read-modify-writes rewrote.
        let d = db.stats().device.expect("device stats");
        prop_assert_eq!(d.band_bytes, fs.config().band_bytes);
        prop_assert_eq!(d.device_bytes_written, d.host_bytes_written + d.rmw_bytes);
        prop_assert!(d.conventional_bytes_written <= d.host_bytes_written);
        if device == Some(BandMode::HostManaged) {
            prop_assert_eq!(d.rmw_bytes, 0);
        }
        let on_disk: u64 = std::fs::read_dir(dir.path())
            .map_err(|e| TestCaseError::fail(e.to_string()))?
            .filter_map(|e| e.ok())
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .ends_with(common::data_ext(layout))
            })
            .count() as u64;
        prop_assert_eq!(
            on_disk,
            0,
            "table files must live on the device, not the directory"
        );
    }
    if cached && scans {
        // The final scan opened an iterator on every table: their indexes came through the
        // cache (16 KiB: one shard on any machine, so these small tables' indexes fit).
        let s = db.stats();
        prop_assert!(
            s.open_table_files == 0 || s.index_filter_cache_hits + s.index_filter_cache_misses > 0,
            "{} tables open, no index or filter from the cache",
            s.open_table_files
        );
    }
    Ok(())
}

fn cases() -> u32 {
    std::env::var("SCREE_MODEL_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(24)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), max_shrink_iters: 200, ..ProptestConfig::default() })]

    #[test]
    fn every_layout_matches_a_btreemap(ops in prop::collection::vec(op(), 1..400)) {
        for layout in Layout::implemented() {
            run(layout, ops.clone())?;
        }
    }

    /// Every layout on the drive-managed band emulator: table files placed by its allocator,
    /// paying read-modify-writes, read back exactly.
    #[test]
    fn every_layout_matches_a_btreemap_on_smr_drive(ops in prop::collection::vec(op(), 1..400)) {
        for layout in Layout::implemented() {
            run_on(layout, ops.clone(), Some(BandMode::DriveManaged))?;
        }
    }

    /// `leveled` with merges out of L0 split into up to four parts merged in parallel
    /// (sub-compactions), on tables of 4 KiB so that even small merges split.
    #[test]
    fn leveled_with_sub_compactions_matches_a_btreemap(ops in prop::collection::vec(op(), 1..400)) {
        run_tuned(Layout::Leveled, ops, None, &|o| {
            o.leveled.max_subcompactions = 4;
            o.leveled.target_table_bytes = 4096;
        })?;
    }

    /// `leveled` and `lightweight` on the host-managed emulator: one table per band (the small
    /// tests' tables fit a 1 MiB band; `lightweight` keeps its DTables under the band).
    #[test]
    fn leveled_and_lightweight_match_a_btreemap_on_smr_host(ops in prop::collection::vec(op(), 1..400)) {
        for layout in [Layout::Leveled, Layout::Lightweight] {
            run_on(layout, ops.clone(), Some(BandMode::HostManaged))?;
        }
    }
}
