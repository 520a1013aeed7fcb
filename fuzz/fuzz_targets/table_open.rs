//! Opening a sorted table from arbitrary bytes, reading every entry forward and backward and a
//! few point lookups, on both read paths (copied and memory-mapped) and with the index and
//! filter pinned or in a small block cache (`cache_index_and_filter_blocks`): errors are fine,
//! panics are not.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use scree::cache::BlockCache;
use scree::iter::InternalIter;
use scree::table::{TableIter, TableReader};

fuzz_target!(|data: &[u8]| {
    scree_fuzz::with_both_read_paths("000001.sst", data, |env, path| check(env, path));
    // Again with the footer's checksum (over its first 36 bytes, at 36..40) recomputed, so
    // mutated block handles reach the reader's range checks.
    let footer = scree::table::FOOTER;
    if data.len() >= footer {
        let mut sealed = data.to_vec();
        let off = sealed.len() - footer;
        let crc = scree::coding::crc(&sealed[off..off + 36]);
        sealed[off + 36..off + 40].copy_from_slice(&crc.to_le_bytes());
        if sealed != data {
            scree_fuzz::with_both_read_paths("000001.sst", &sealed, |env, path| check(env, path));
        }
    }
});

fn check(env: &scree::fs::Env, path: &std::path::Path) {
    for cached in [false, true] {
        let cache = BlockCache::new(1 << 16).holding_index_and_filter(cached);
        if let Ok(t) = TableReader::open(env, path, 1, cache) {
            read(Arc::new(t));
        }
    }
}

fn read(t: Arc<TableReader>) {
    let Ok(mut it) = TableIter::new(t.clone(), true) else {
        return;
    };
    let mut keys = Vec::new();
    if it.seek_to_first().is_ok() {
        while it.valid() && keys.len() < 10_000 {
            keys.push(it.key().to_vec());
            if it.next().is_err() {
                break;
            }
        }
    }
    let Ok(mut it) = TableIter::new(t.clone(), false) else {
        return;
    };
    if it.seek_to_last().is_ok() {
        let mut n = 0;
        while it.valid() && n < 10_000 {
            if it.prev().is_err() {
                break;
            }
            n += 1;
        }
    }
    for k in keys.iter().take(16) {
        let Ok(mut it) = TableIter::new(t.clone(), false) else {
            return;
        };
        let _ = it.seek(k);
        let _ = it.seek_for_prev(k);
        if k.len() >= 8 {
            let _ = t.get(&k[..k.len() - 8], u64::MAX >> 8);
        }
    }
    let _ = t.get(b"missing", 1);
}
