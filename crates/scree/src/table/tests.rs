//! Unit tests of sorted tables: concatenated runs, cached metadata.

use super::*;

#[cfg(test)]
#[allow(clippy::indexing_slicing)]
mod concat_tests {
    use super::test_support::std_ctx;
    use super::{table_path, ConcatIter, TableBuilder, TableFile};
    use crate::iter::InternalIter;
    use crate::key::{cmp_ikey, make_ikey, ValueKind};
    use crate::stats::WriteCause;

    /// `ConcatIter::seek` and `seek_for_prev` keep the `InternalIter` contract (first entry
    /// >= target, last entry <= target) when the target is exactly a table's smallest or
    /// > largest internal key, or falls in the gap between two tables: a table whose smallest
    /// > key equals the target must be the one searched, not skipped for its predecessor.
    #[test]
    fn seeks_on_table_boundaries_find_the_exact_entry() {
        let dir = tempfile::tempdir().expect("dir");
        let ctx = std_ctx(dir.path(), 1 << 20);
        // Three tables of a sorted run; zeroed and ordinary sequence numbers, a tombstone.
        let runs: [&[(&str, u64, ValueKind)]; 3] = [
            &[("b", 0, ValueKind::Put), ("d", 7, ValueKind::Put)],
            &[
                ("f", 9, ValueKind::Delete),
                ("f", 3, ValueKind::Put),
                ("h", 0, ValueKind::Put),
            ],
            &[("k", 4, ValueKind::Put), ("m", 0, ValueKind::Put)],
        ];
        let mut all: Vec<Vec<u8>> = Vec::new();
        let mut files = Vec::new();
        for (no, run) in runs.iter().enumerate() {
            let no = no as u64 + 1;
            let w = ctx
                .env
                .create(&table_path(&ctx.dir, no), WriteCause::Flush)
                .expect("create");
            let mut b = TableBuilder::new(w, no, 4096, 10);
            for &(k, seq, kind) in run.iter() {
                let ik = make_ikey(k.as_bytes(), seq, kind);
                b.add(&ik, k.as_bytes()).expect("add");
                all.push(ik);
            }
            files.push(TableFile::new(b.finish().expect("finish"), ctx.clone()));
        }
        let mut it = ConcatIter::new(files, true);
        let mut targets = all.clone();
        for k in ["a", "c", "e", "g", "j", "l", "n"] {
            targets.push(make_ikey(k.as_bytes(), 5, ValueKind::Put));
        }
        for t in &targets {
            let want_next = all.iter().find(|k| cmp_ikey(k, t).is_ge());
            it.seek(t).expect("seek");
            assert_eq!(it.valid().then(|| it.key().to_vec()).as_ref(), want_next);
            let want_prev = all.iter().rev().find(|k| cmp_ikey(k, t).is_le());
            it.seek_for_prev(t).expect("seek_for_prev");
            assert_eq!(
                it.valid().then(|| it.key().to_vec()).as_ref(),
                want_prev,
                "seek_for_prev({:?})",
                String::from_utf8_lossy(t)
            );
        }
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing)]
mod cached_meta_tests {
    use std::sync::Arc;

    use super::sep_index::TableIndex;
    use super::test_support::std_ctx_with as ctx_with;
    use super::{get_in_tables, table_path, TableBuilder, TableCtx, TableFile, FOOTER};
    use crate::cache::BlockCache;
    use crate::coding::get_u64;
    use crate::error::Error;
    use crate::filter::bloom::LoadedFilter;
    use crate::iter::InternalIter;
    use crate::key::{make_ikey, ValueKind, MAX_SEQ};
    use crate::memtable::Lookup;
    use crate::stats::WriteCause;

    fn ctx(dir: &std::path::Path, cached: bool) -> Arc<TableCtx> {
        ctx_with(
            dir,
            BlockCache::new(1 << 20).holding_index_and_filter(cached),
        )
    }

    /// Keys longer than 8 bytes, so that index separators are too (and weigh more).
    fn key(i: u32) -> String {
        format!("a-key-longer-than-8-bytes-{i:05}")
    }

    /// A table of 400 keys in 256-byte blocks; its (index, filter) offsets from the footer.
    fn table(ctx: &Arc<TableCtx>) -> (Arc<TableFile>, u64, u64) {
        table_of(ctx, 400)
    }

    fn table_of(ctx: &Arc<TableCtx>, n: u32) -> (Arc<TableFile>, u64, u64) {
        let w = ctx
            .env
            .create(&table_path(&ctx.dir, 1), WriteCause::Flush)
            .expect("create");
        let mut b = TableBuilder::new(w, 1, 256, 10);
        for i in 0..n {
            let k = key(i);
            b.add(&make_ikey(k.as_bytes(), 1, ValueKind::Put), k.as_bytes())
                .expect("add");
        }
        let t = TableFile::new(b.finish().expect("finish"), ctx.clone());
        let bytes = ctx.env.fs.read_all(&t.path()).expect("read");
        let foot = &bytes[bytes.len() - FOOTER..];
        let (io, fo) = (get_u64(foot, 0), get_u64(foot, 16));
        (t, io.expect("index offset"), fo.expect("filter offset"))
    }

    fn get(t: &Arc<TableFile>, k: &str) -> crate::Result<Lookup> {
        get_in_tables([t], k.as_bytes(), MAX_SEQ)
    }

    /// Asserts that `t` reads key `i` as its value (`what` names the moment).
    fn reads(t: &Arc<TableFile>, i: u32, what: &str) {
        let want = Lookup::Value(key(i).into_bytes());
        assert_eq!(get(t, &key(i)).expect(what), want, "{what}");
    }

    /// Index and filter in the cache: lookups and scans answer as from pinned ones, an
    /// evicted one is read again, and one damaged on disk after it was first loaded is a
    /// `Corruption` naming the file and what failed once the cache has let it go — never a
    /// wrong answer or a panic.
    #[test]
    fn an_evicted_index_or_filter_is_read_again_and_checked() {
        let dir = tempfile::tempdir().expect("dir");
        let ctx = ctx(dir.path(), true);
        let (t, io, fo) = table(&ctx);
        for i in (0..400).step_by(7) {
            let want = Lookup::Value(key(i).into_bytes());
            assert_eq!(get(&t, &key(i)).expect("get"), want);
        }
        assert_eq!(get(&t, "key99999").expect("get"), Lookup::Absent);
        let s = ctx.env.stats.snapshot();
        let reader_size = std::mem::size_of::<super::TableReader>() as u64;
        assert_eq!(s.table_reader_bytes, reader_size, "nothing pinned");
        assert!(s.index_filter_cache_hits > 0);
        assert_eq!(s.index_filter_cache_misses, 0, "loaded at open");

        // Evicted: read again, same answers, counted as misses.
        ctx.cache.remove(1, io);
        ctx.cache.remove(1, fo);
        reads(&t, 5, "get");
        let mut it = t.iter(true).expect("iter");
        it.seek_to_first().expect("seek");
        let mut n = 0;
        while it.valid() {
            n += 1;
            it.next().expect("next");
        }
        assert_eq!(n, 400);
        assert_eq!(ctx.env.stats.snapshot().index_filter_cache_misses, 2);

        // Damaged on disk after loading: found when the cache no longer has it.
        let path = t.path();
        let mut bytes = std::fs::read(&path).expect("read");
        bytes[fo as usize + 3] ^= 0x40;
        bytes[io as usize + 5] ^= 0x01;
        std::fs::write(&path, &bytes).expect("write");
        reads(&t, 5, "still cached");
        ctx.cache.remove(1, fo);
        match get(&t, &key(5)) {
            Err(Error::Corruption { detail, offset, .. }) => {
                assert!(detail.contains("filter checksum"), "{detail}");
                assert_eq!(offset, fo);
            }
            other => panic!("damaged filter read as {other:?}"),
        }
        let mut good = std::fs::read(&path).expect("read");
        good[fo as usize + 3] ^= 0x40;
        std::fs::write(&path, &good).expect("write");
        ctx.cache.remove(1, fo);
        ctx.cache.remove(1, io);
        assert!(
            matches!(get(&t, &key(5)), Err(Error::Corruption { .. })),
            "a damaged index is an error"
        );
        assert!(t.iter(true).is_err(), "an iterator needs the index");
    }

    /// Pinned (the default), the reader holds its index and filter and the cache holds
    /// neither.
    #[test]
    fn pinned_index_and_filter_stay_out_of_the_cache() {
        let dir = tempfile::tempdir().expect("dir");
        let ctx = ctx(dir.path(), false);
        let (t, io, fo) = table(&ctx);
        reads(&t, 9, "get");
        assert!(ctx.cache.get_meta::<TableIndex>(1, io).is_none());
        assert!(ctx.cache.get_meta::<LoadedFilter>(1, fo).is_none());
        let pinned = ctx.env.stats.snapshot().table_reader_bytes;
        assert!(pinned > 1000 + std::mem::size_of::<super::TableReader>() as u64);
    }

    /// A compaction's iterator reads an evicted index again without putting it back in the
    /// cache (it reads the table once, just before deleting it, and must not evict what
    /// readers use); a reader's iterator caches it again.
    #[test]
    fn a_compaction_iterator_does_not_cache_an_evicted_index_again() {
        let dir = tempfile::tempdir().expect("dir");
        let ctx = ctx(dir.path(), true);
        let (t, io, _) = table(&ctx);
        reads(&t, 1, "get");
        ctx.cache.remove(1, io);
        let count = |mut it: super::TableIter| {
            it.seek_to_first().expect("seek");
            let mut n = 0;
            while it.valid() {
                n += 1;
                it.next().expect("next");
            }
            n
        };
        assert_eq!(count(t.iter(false).expect("iter")), 400);
        assert!(
            ctx.cache.get_meta::<TableIndex>(1, io).is_none(),
            "compaction re-cached it"
        );
        assert_eq!(ctx.env.stats.snapshot().index_filter_cache_misses, 1);
        assert_eq!(count(t.iter(true).expect("iter")), 400);
        assert!(
            ctx.cache.get_meta::<TableIndex>(1, io).is_some(),
            "a reader caches it"
        );
        assert_eq!(ctx.env.stats.snapshot().index_filter_cache_misses, 2);
        assert_eq!(count(t.iter(false).expect("iter")), 400);
        assert_eq!(
            ctx.env.stats.snapshot().index_filter_cache_misses,
            2,
            "a hit"
        );
    }

    /// Readers that miss the same evicted index together read it once: the others wait for
    /// that read instead of each reading and decoding it (held at a paused read, a reader
    /// without this made every thread read).
    #[test]
    fn readers_that_miss_an_index_together_read_it_once() {
        use crate::fs::{Env, FileSystem};
        use crate::testing::fault::{FaultFs, OpKind};
        let fault = FaultFs::new(7);
        fault
            .create_dir_all(std::path::Path::new("/db"))
            .expect("dir");
        let ctx = Arc::new(TableCtx {
            env: Env {
                fs: fault.as_dyn(),
                stats: Arc::default(),
                direct_reads: false,
                mmap_reads: false,
            },
            cache: BlockCache::new(1 << 20).holding_index_and_filter(true),
            dir: "/db".into(),
            open: super::OpenTables::default(),
            purge: super::purge::Purger::inline(),
            compaction_wanted: Default::default(),
        });
        let (t, io, _) = table(&ctx);
        // Opened (footer, index and filter read) before the readers start.
        reads(&t, 1, "get");
        ctx.cache.remove(1, io);
        let name = t
            .path()
            .file_name()
            .expect("name")
            .to_string_lossy()
            .to_string();
        let gate = fault.pause(OpKind::Read, &name);
        let readers: Vec<_> = (0..4u32)
            .map(|i| {
                let t = t.clone();
                std::thread::spawn(move || get(&t, &key(i * 50)))
            })
            .collect();
        gate.wait_until_held(std::time::Duration::from_secs(120));
        // Give the other readers time to reach the read too, were they to read.
        std::thread::sleep(std::time::Duration::from_millis(200));
        let held = gate.waiting();
        gate.open();
        for (i, r) in readers.into_iter().enumerate() {
            let got = r.join().expect("reader");
            let want = Lookup::Value(key(i as u32 * 50).into_bytes());
            assert_eq!(got.expect("get"), want);
        }
        assert_eq!(held, 1, "readers held at the index read");
        assert_eq!(ctx.env.stats.snapshot().index_filter_cache_misses, 1);
    }

    /// An index larger than the cache would admit stays pinned by its table instead of being
    /// refused by the cache and read again on every use.
    #[test]
    fn an_index_too_large_for_the_cache_stays_pinned() {
        let dir = tempfile::tempdir().expect("dir");
        let ctx = ctx_with(
            dir.path(),
            BlockCache::new(16 << 10).holding_index_and_filter(true),
        );
        // 16 KiB: one shard on any machine (too few items for more), so ≈ 14.7 KB at most;
        // this index (≈ 1,300 blocks, 31-byte separators) weighs ≈ 70 KB, the filter ≈ 10 KB.
        let (t, io, fo) = table_of(&ctx, 8000);
        for i in (0..8000).step_by(11) {
            let want = Lookup::Value(key(i).into_bytes());
            assert_eq!(get(&t, &key(i)).expect("get"), want);
        }
        assert!(
            ctx.cache.get_meta::<TableIndex>(1, io).is_none(),
            "too large to cache"
        );
        assert!(
            ctx.cache.get_meta::<LoadedFilter>(1, fo).is_some(),
            "the filter fits"
        );
        let s = ctx.env.stats.snapshot();
        assert_eq!(s.index_filter_cache_misses, 0, "never read again");
        let reader_size = std::mem::size_of::<super::TableReader>() as u64;
        let max = ctx.cache.max_item_bytes() as u64;
        assert!(
            s.table_reader_bytes > reader_size + max,
            "{}",
            s.table_reader_bytes
        );
    }

    /// A table deleted after the open-table bound closed its reader still takes its index
    /// and filter out of the cache (rather than leaving them there until evicted).
    #[test]
    fn a_deleted_table_leaves_the_cache_even_when_closed() {
        let dir = tempfile::tempdir().expect("dir");
        let ctx = ctx(dir.path(), true);
        let (t, io, fo) = table(&ctx);
        reads(&t, 3, "get");
        t.close();
        assert!(
            ctx.cache.get_meta::<TableIndex>(1, io).is_some(),
            "kept for a reopen"
        );
        reads(&t, 4, "reopened");
        assert_eq!(ctx.env.stats.snapshot().index_filter_cache_misses, 0);
        t.close();
        let path = t.path();
        t.mark_obsolete();
        drop(t);
        assert!(!path.exists(), "deleted");
        assert!(ctx.cache.get_meta::<TableIndex>(1, io).is_none());
        assert!(ctx.cache.get_meta::<LoadedFilter>(1, fo).is_none());
    }
}
