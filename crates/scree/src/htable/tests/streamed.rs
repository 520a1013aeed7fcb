//! Tables streamed by segment (compaction output) against tables written at once.

use super::*;

/// Versions with skewed value sizes (a few larger than a bucket) and several per key.
fn skewed_versions(n: u64, seed: u64) -> Vec<Version> {
    let mut x = seed | 1;
    let mut rnd = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut vs: Vec<Version> = Vec::new();
    for i in 0..n {
        let k = format!("key{:012}", rnd() % (n * 3 / 4)).into_bytes();
        let r = rnd();
        let vlen = match r % 100 {
            0 => 5000,
            1..=5 => 900,
            _ => 100,
        };
        let kind = if r % 17 == 0 {
            ValueKind::Delete
        } else {
            ValueKind::Put
        };
        vs.push((k, 1000 + i, kind, vec![(r & 0xff) as u8; vlen]));
    }
    vs
}

/// A table written segment by segment (`HTableStream`, as a garbage collection writes one) is
/// byte for byte the table written at once, when given the same bucket count and base; each
/// segment's items are what `scan_window` returns for its windows, and a `TableSizer` pass
/// over the items chooses the bucket count the one-shot writer chose.
#[test]
fn a_table_streamed_by_segment_equals_the_table_written_at_once() {
    let vs = skewed_versions(40_000, 12345);
    let env = env();
    let dir = tempfile::tempdir().unwrap();
    for (i, opts) in [
        HTableOptions {
            balance_segments: 8,
            target_fill: 0.95,
            bucket_fill_cap: 1.0,
            ..Default::default()
        },
        HTableOptions {
            balance_segments: 8,
            bucket_fill_cap: 0.9,
            ..Default::default()
        },
        HTableOptions::default(),
    ]
    .into_iter()
    .enumerate()
    {
        let (want, s) = builder_for(&vs, opts).finish_to_vec().unwrap();
        assert!(s.overflow_items > 0 && s.migrated_items > 0);
        let items = sorted_items(&vs);
        let base = items
            .iter()
            .map(|it| crate::key::parse(&it.ikey).seq)
            .min()
            .unwrap();
        let mut sizer = TableSizer::new(&opts, base).unwrap();
        for it in &items {
            let p = crate::key::parse(&it.ikey);
            sizer.add(it.hash, p.user_key.len(), it.value.len(), p.trailer());
        }
        assert_eq!(sizer.items(), items.len() as u64);
        assert_eq!(sizer.oldest_seq(), base);
        assert_eq!(sizer.n_buckets(), s.n_buckets);

        // The one-shot table, to scan by window.
        let one = dir.path().join(format!("one{i}"));
        std::fs::write(&one, &want).unwrap();
        let r = open(&env, &one, false).unwrap();

        let path = dir.path().join(format!("t{i}"));
        let mut w = env.create(&path, WriteCause::Gc).unwrap();
        let mut st = HTableStream::new(HK, opts, s.n_buckets, base, &mut w).unwrap();
        assert_eq!(st.segments(), if i < 2 { 8 } else { 1 });
        let mut seen = 0;
        for k in 0..st.segments() {
            let (lo, hi) = st.segment_windows(k).unwrap();
            let scan = r.scan_window(0, lo, hi).unwrap();
            let refs: Vec<ItemRef<'_>> = (0..scan.len())
                .map(|j| {
                    let (hash, ukey, trailer, value) = scan.get(j).unwrap();
                    ItemRef {
                        hash,
                        ukey,
                        trailer,
                        value,
                        bloom: crate::filter::bloom::bloom_hash(ukey),
                    }
                })
                .collect();
            seen += refs.len();
            st.write_segment(refs).unwrap();
        }
        assert_eq!(seen, items.len());
        let (s2, _) = st.finish().unwrap();
        w.sync().unwrap();
        drop(w);
        assert_eq!(s2, s);
        assert!(std::fs::read(&path).unwrap() == want, "options {i}");
    }
}

/// A streamed table refuses an item outside the segment being written and one older than
/// the base it was given, with the reason.
#[test]
fn a_streamed_table_refuses_items_outside_its_segment_or_base() {
    let env = env();
    let dir = tempfile::tempdir().unwrap();
    let opts = HTableOptions {
        balance_segments: 8,
        ..Default::default()
    };
    let ukey = b"k".as_slice();
    let hash = placement_hash(&HK, ukey);
    let item = |seq: u64| ItemRef {
        hash,
        ukey,
        trailer: (seq << 8) | 1,
        value: b"v",
        bloom: crate::filter::bloom::bloom_hash(ukey),
    };
    let n = 1024;
    let seg = (bucket_of(hash, n, 0) as usize * 8 / n as usize) as u32;
    let mut w = env.create(&dir.path().join("a"), WriteCause::Gc).unwrap();
    let mut st = HTableStream::new(HK, opts, n, 10, &mut w).unwrap();
    match st.write_segment(vec![item(5)]) {
        Err(Error::InvalidArgument(m)) => assert!(m.contains("below the table's base 10"), "{m}"),
        other => panic!("{other:?}"),
    }
    let mut w = env.create(&dir.path().join("b"), WriteCause::Gc).unwrap();
    let mut st = HTableStream::new(HK, opts, n, 10, &mut w).unwrap();
    for _ in 0..(seg + 1) % 8 {
        st.write_segment(Vec::new()).unwrap();
    }
    match st.write_segment(vec![item(20)]) {
        Err(Error::InvalidArgument(m)) => assert!(m.contains("given with segment"), "{m}"),
        other => panic!("{other:?}"),
    }
}

fn item_ref(it: &HItem) -> ItemRef<'_> {
    let p = crate::key::parse(&it.ikey);
    ItemRef {
        hash: it.hash,
        ukey: p.user_key,
        trailer: p.trailer(),
        value: &it.value,
        bloom: crate::filter::bloom::bloom_hash(p.user_key),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Any items, bucket count (one segment or eight, many empty), shift and cap: the table
    /// streamed segment by segment, each segment given the items whose bucket windows lie in
    /// `segment_windows`, is the one-shot table byte for byte, and `scan_window` of that table
    /// returns each segment's items.
    #[test]
    fn a_streamed_table_equals_the_one_shot_table(
        versions in arb_versions(),
        n_buckets in prop_oneof![1u32..12, 500u32..1100],
        segments in prop_oneof![Just(1u32), Just(8)],
        bucket_shift in prop_oneof![Just(0u32), Just(3), Just(127)],
        cap in prop_oneof![Just(0.95f64), Just(1.0)],
    ) {
        let opts = HTableOptions {
            n_buckets: Some(n_buckets),
            balance_segments: segments,
            bucket_fill_cap: cap,
            bucket_shift,
            ..Default::default()
        };
        let (want, s) = builder_for(&versions, opts).finish_to_vec().unwrap();
        let items = sorted_items(&versions);
        let base = items
            .iter()
            .map(|it| crate::key::parse(&it.ikey).seq)
            .min()
            .unwrap_or(0);
        let dir = tempfile::tempdir().unwrap();
        let env = env();
        let one = dir.path().join("one");
        std::fs::write(&one, &want).unwrap();
        let r = open(&env, &one, false).unwrap();
        let path = dir.path().join("t");
        let mut w = env.create(&path, WriteCause::Gc).unwrap();
        let mut st = HTableStream::new(HK, opts, n_buckets, base, &mut w).unwrap();
        let mut given = 0;
        for k in 0..st.segments() {
            let (lo, hi) = st.segment_windows(k).unwrap();
            let seg: Vec<ItemRef<'_>> = items
                .iter()
                .filter(|it| (lo..=hi).contains(&bucket_window(it.hash, bucket_shift)))
                .map(item_ref)
                .collect();
            prop_assert_eq!(r.scan_window(bucket_shift, lo, hi).unwrap().len(), seg.len());
            given += seg.len();
            st.write_segment(seg).unwrap();
        }
        prop_assert_eq!(given, items.len());
        let (s2, _) = st.finish().unwrap();
        w.sync().unwrap();
        drop(w);
        prop_assert_eq!(s2, s);
        prop_assert!(std::fs::read(&path).unwrap() == want);
    }
}
