//! Range iterators on the sorted layouts: targeted edge cases (review, 2026-11-24).

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
