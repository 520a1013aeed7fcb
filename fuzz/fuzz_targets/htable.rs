//! HTables (LSM-trie buckets): opening arbitrary bytes, reading every item and probing keys
//! never panics, on both read paths (copied and memory-mapped).
#![no_main]

use libfuzzer_sys::fuzz_target;
use scree::htable::HTableReader;

fuzz_target!(|data: &[u8]| {
    scree_fuzz::with_both_read_paths("000001.ht", data, |env, path| {
        let Ok(file) = env.open(path, false) else {
            return;
        };
        let Ok(t) = HTableReader::open(file, true) else {
            return;
        };
        let mut keys = Vec::new();
        let _ = t.for_each(|_, ikey, _| {
            if keys.len() < 64 {
                keys.push(ikey.to_vec());
            }
            Ok(())
        });
        let hk = t.hash_key();
        for k in &keys {
            let uk = &k[..k.len().saturating_sub(8)];
            let h = scree::htable::placement_hash(&hk, uk);
            let _ = t.may_contain(h, uk);
            let _ = t.get(h, uk, u64::MAX >> 8);
        }
    });
});
