//! Bloom filters: probing an arbitrary filter never panics; a filter built from keys admits
//! every one of them.
#![no_main]

use libfuzzer_sys::fuzz_target;
use scree::filter::bloom;

fuzz_target!(|data: &[u8]| {
    let (head, filter) = data.split_at(data.len().min(8));
    let mut h = [0u8; 8];
    h[..head.len()].copy_from_slice(head);
    let _ = bloom::may_contain(filter, u64::from_le_bytes(h));
    let hashes: Vec<u64> = data.chunks(3).map(bloom::bloom_hash).collect();
    let bits = 1 + u32::from(data.first().copied().unwrap_or(0) % 20);
    let f = bloom::encode(&hashes, bits);
    for &x in &hashes {
        assert!(bloom::may_contain(&f, x));
    }
});
