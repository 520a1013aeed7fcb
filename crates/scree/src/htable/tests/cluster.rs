//! BloomCluster tests: round trips, lookups, budgets, damage.

use super::*;

fn cluster_fixture(
    dir: &Path,
    env: &Env,
    n: u32,
    sublevels: u64,
    per_level: u64,
) -> (Vec<Vec<Version>>, Vec<HTableReader>) {
    let mut all = Vec::new();
    let mut readers = Vec::new();
    for lvl in 0..sublevels {
        let versions: Vec<Version> = (0..per_level)
            .map(|i| {
                let k = format!("L{lvl}-k{i}").into_bytes();
                (k, lvl * 1_000_000 + i + 1, ValueKind::Put, value(50, i))
            })
            .collect();
        let p = dir.join(format!("sub{lvl}"));
        write_table(
            env,
            &p,
            &versions,
            HTableOptions {
                n_buckets: Some(n),
                ..Default::default()
            },
        );
        readers.push(open(env, &p, false).unwrap());
        all.push(versions);
    }
    (all, readers)
}

#[test]
fn bloom_cluster_round_trip_and_lookup() {
    let dir = tempfile::tempdir().unwrap();
    let env = env();
    let n = 8;
    let (all, readers) = cluster_fixture(dir.path(), &env, n, 6, 300);
    let mut b = BloomClusterBuilder::new(n);
    for (i, r) in readers.iter().take(5).enumerate() {
        b.add_sublevel(100 + i as u64, r.read_filters().unwrap())
            .unwrap();
    }
    assert_eq!(b.overflowing_column(), None);
    let cp = dir.path().join("cluster");
    let mut w = env.create(&cp, WriteCause::Metadata).unwrap();
    b.finish(&mut w).unwrap();
    w.sync().unwrap();

    // Adding the sixth sub-level rebuilds from the old cluster, same bytes as from scratch.
    let c = BloomClusterReader::open(env.open(&cp, false).unwrap()).unwrap();
    assert_eq!(c.table_ids(), &[100, 101, 102, 103, 104]);
    let mut b2 = BloomClusterBuilder::from_reader(&c).unwrap();
    b2.add_sublevel(105, readers[5].read_filters().unwrap())
        .unwrap();
    b.add_sublevel(105, readers[5].read_filters().unwrap())
        .unwrap();
    assert_eq!(b2.finish_to_vec().unwrap(), b.finish_to_vec().unwrap());
    std::fs::write(&cp, b2.finish_to_vec().unwrap()).unwrap();
    let c = BloomClusterReader::open(env.open(&cp, false).unwrap()).unwrap();
    assert_eq!(c.n_sublevels(), 6);

    // Lookup: one metadata read (the column), then about one data read.
    let before = env.stats.snapshot();
    let mut lookups = 0u64;
    let mut false_candidates = 0usize;
    for (lvl, versions) in all.iter().enumerate() {
        for (k, s, _, v) in versions {
            let h = placement_hash(&HK, k);
            let col = c.column(bucket_of(h, n, 0)).unwrap();
            let cands = col.candidates(k);
            assert!(cands.contains(&lvl));
            false_candidates += cands.len() - 1;
            let got = readers[lvl].get_unfiltered(h, k, MAX_SEQ).unwrap().unwrap();
            assert_eq!((got.0, &got.2), (*s, v));
            lookups += 1;
        }
    }
    let after = env.stats.snapshot();
    assert_eq!(
        after.metadata_block_reads - before.metadata_block_reads,
        lookups
    );
    assert_eq!(after.data_block_reads - before.data_block_reads, lookups);
    assert!(
        false_candidates < lookups as usize / 20,
        "{false_candidates}"
    );
    let k = b"absent";
    let col = c.column(bucket_of(placement_hash(&HK, k), n, 0)).unwrap();
    assert!(col.candidates(k).len() <= 1);
    assert!(matches!(c.column(n), Err(Error::InvalidArgument(_))));

    // retain drops a sub-level.
    b.retain(|id| id != 102);
    assert_eq!(b.table_ids(), &[100, 101, 103, 104, 105]);
}

#[test]
fn bloom_cluster_too_large_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let env = env();
    // 2 buckets of ~60 keys: ~120 B filters per column per sub-level; 40 sub-levels do not fit.
    let (_, readers) = cluster_fixture(dir.path(), &env, 2, 1, 120);
    let f = readers[0].read_filters().unwrap();
    let mut b = BloomClusterBuilder::new(2);
    for i in 0..40 {
        b.add_sublevel(i, f.clone()).unwrap();
    }
    let (col, need) = b.overflowing_column().unwrap();
    assert!(need > CLUSTER_BLOCK_SIZE);
    match b.finish_to_vec() {
        Err(Error::InvalidArgument(m)) => assert!(m.contains(&format!("column {col}")), "{m}"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        b.add_sublevel(99, FilterSet::from_filters([vec![1u8]])),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn bloom_cluster_byte_flips_are_detected_or_harmless() {
    let dir = tempfile::tempdir().unwrap();
    let env = env();
    let n = 2;
    let (_, readers) = cluster_fixture(dir.path(), &env, n, 3, 30);
    let mut b = BloomClusterBuilder::new(n);
    for (i, r) in readers.iter().enumerate() {
        b.add_sublevel(i as u64 + 7, r.read_filters().unwrap())
            .unwrap();
    }
    let bytes = b.finish_to_vec().unwrap();
    let cp = dir.path().join("c");
    std::fs::write(&cp, &bytes).unwrap();
    let good = BloomClusterReader::open(env.open(&cp, false).unwrap()).unwrap();
    let good_cols: Vec<BloomColumn> = (0..n).map(|c| good.column(c).unwrap()).collect();
    for (pos, &orig) in bytes.iter().enumerate() {
        let _flip = Flip::new(&cp, pos, orig ^ 0x10, orig);
        let r = match BloomClusterReader::open(env.open(&cp, false).unwrap()) {
            Ok(r) => r,
            Err(e) => {
                assert!(matches!(e, Error::Corruption { .. }), "pos {pos}: {e}");
                continue;
            }
        };
        assert_eq!(r.table_ids(), good.table_ids());
        for c in 0..n {
            match r.column(c) {
                Ok(col) => assert_eq!(col, good_cols[c as usize], "pos {pos}"),
                Err(e) => assert!(matches!(e, Error::Corruption { .. }), "pos {pos}: {e}"),
            }
        }
    }
}

/// A cluster trailer (valid checksum) whose column count its blocks cannot hold is refused at
/// open. Without the check, u32::MAX columns would open and a rebuild reserve ~96 GB.
#[test]
fn bloom_cluster_with_more_columns_than_its_blocks_hold_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let env = env();
    let (_, readers) = cluster_fixture(dir.path(), &env, 2, 2, 30);
    let mut b = BloomClusterBuilder::new(2);
    for (i, r) in readers.iter().enumerate() {
        b.add_sublevel(i as u64, r.read_filters().unwrap()).unwrap();
    }
    let good = b.finish_to_vec().unwrap();
    let cp = dir.path().join("c");
    for n_columns in [u64::from(u32::MAX), 2 + u64::from(u16::MAX)] {
        let mut bytes = good.clone();
        let len = bytes.len();
        // Trailer: ids (2 × 8), directory (1 block × 4), then the 36-byte fixed end whose
        // first field is n_columns; the checksum (at len − 12) covers the trailer before it.
        let trailer_off = len - (2 * 8 + 4 + 36);
        bytes[len - 36..len - 28].copy_from_slice(&n_columns.to_le_bytes());
        let crc = super::format::region_crc(trailer_off as u64, &bytes[trailer_off..len - 12]);
        bytes[len - 12..len - 8].copy_from_slice(&crc.to_le_bytes());
        std::fs::write(&cp, &bytes).unwrap();
        match BloomClusterReader::open(env.open(&cp, false).unwrap()) {
            Err(e @ Error::Corruption { .. }) => {
                assert!(e.to_string().contains("block directory"), "{e}")
            }
            other => panic!(
                "{n_columns} columns: expected Corruption, got {:?}",
                other.map(|r| r.n_columns())
            ),
        }
    }
    // The unmodified file opens (the edit above is the only difference).
    std::fs::write(&cp, &good).unwrap();
    assert_eq!(
        BloomClusterReader::open(env.open(&cp, false).unwrap())
            .unwrap()
            .n_columns(),
        2
    );
}

#[test]
fn reader_rejects_non_tables() {
    let dir = tempfile::tempdir().unwrap();
    let env = env();
    let p = dir.path().join("x");
    for bytes in [vec![], vec![0u8; 50], vec![7u8; 9000]] {
        std::fs::write(&p, &bytes).unwrap();
        let e = open(&env, &p, true).unwrap_err();
        assert!(matches!(e, Error::Corruption { .. }), "{e}");
    }
    let _: Option<CountedReader> = None;
}

#[test]
fn bloom_cluster_packs_several_columns_per_block() {
    let dir = tempfile::tempdir().unwrap();
    let env = env();
    let n = 300;
    let (all, readers) = cluster_fixture(dir.path(), &env, n, 3, 3000);
    let mut b = BloomClusterBuilder::new(n);
    for (i, r) in readers.iter().enumerate() {
        b.add_sublevel(10 + i as u64, r.read_filters().unwrap())
            .unwrap();
    }
    let bytes = b.finish_to_vec().unwrap();
    let cp = dir.path().join("cluster");
    std::fs::write(&cp, &bytes).unwrap();
    let c = BloomClusterReader::open(env.open(&cp, false).unwrap()).unwrap();
    // ~10 keys per column per sub-level: 3 × ~21 B per column, ~60 columns per block.
    assert!(
        c.n_blocks() > 1 && c.n_blocks() < n as usize / 20,
        "{}",
        c.n_blocks()
    );
    assert!(bytes.len() < n as usize * CLUSTER_BLOCK_SIZE / 20);
    let before = env.stats.snapshot();
    let mut lookups = 0;
    for (lvl, versions) in all.iter().enumerate() {
        for (k, _, _, _) in versions {
            let h = placement_hash(&HK, k);
            let col = c.column(bucket_of(h, n, 0)).unwrap();
            assert!(col.candidates(k).contains(&lvl));
            lookups += 1;
        }
    }
    let after = env.stats.snapshot();
    assert_eq!(
        after.metadata_block_reads - before.metadata_block_reads,
        lookups
    );
    // Rebuilding from the file gives the same bytes.
    let b2 = BloomClusterBuilder::from_reader(&c).unwrap();
    assert_eq!(b2.finish_to_vec().unwrap(), bytes);
}
