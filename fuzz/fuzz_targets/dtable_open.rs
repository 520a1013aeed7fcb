//! Opening a `lightweight` DTable from arbitrary bytes (the tail found from the file's end,
//! every segment opened as an embedded sorted table, the aggregation block decoded), merging
//! its segments forward and backward and looking keys up, on both read paths and with the
//! index and filter pinned or cached: errors are fine, panics are not.
#![no_main]

use libfuzzer_sys::fuzz_target;
use scree::cache::BlockCache;
use scree::layout::lightweight::dtable::{open_and_read, TAIL_FOOTER};

fuzz_target!(|data: &[u8]| {
    scree_fuzz::with_both_read_paths("000001.dtb", data, |env, path| check(env, path));
    // Again with the tail's checksum recomputed (over every byte of the tail before it), so
    // mutated segment entries reach the decoder's range checks.
    if data.len() >= TAIL_FOOTER {
        let foot = data.len() - TAIL_FOOTER;
        let body = u32::from_le_bytes([data[foot], data[foot + 1], data[foot + 2], data[foot + 3]]);
        if let Some(start) = foot.checked_sub(body as usize) {
            let mut sealed = data.to_vec();
            let crc = scree::coding::crc(&sealed[start..foot + 8]);
            sealed[foot + 8..foot + 12].copy_from_slice(&crc.to_le_bytes());
            if sealed != data {
                scree_fuzz::with_both_read_paths("000001.dtb", &sealed, |env, path| {
                    check(env, path)
                });
            }
        }
    }
});

fn check(env: &scree::fs::Env, path: &std::path::Path) {
    for cached in [false, true] {
        let cache = BlockCache::new(1 << 16).holding_index_and_filter(cached);
        let _ = open_and_read(env, path, cache);
    }
}
