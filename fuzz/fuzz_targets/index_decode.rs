//! The compact three-level index (`scree::index`) decoded from arbitrary bytes, as found and
//! again with the checksum recomputed (so mutated contents reach the structural checks): never
//! a panic, and an index that loads answers only with blocks it has.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use scree::index::BlockIndex;

fuzz_target!(|data: &[u8]| {
    scree_fuzz::as_found_and_resealed(data, check);
});

fn check(raw: &[u8]) {
    let Ok(idx) = BlockIndex::decode(raw, Path::new("fuzz"), 0) else {
        return;
    };
    let blocks = idx.num_blocks();
    let _ = idx.heap_bytes();
    // Hashes from the input itself, and the ends of the range.
    let mut hashes = vec![0u64, u64::MAX, 1 << 63];
    hashes.extend(
        raw.chunks_exact(8)
            .take(32)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap())),
    );
    for &p in &hashes {
        let g = idx.prefix_blocks(p);
        assert!(g.start <= g.end && g.end <= blocks);
        for &s in hashes.iter().take(8) {
            if let Some(r) = idx.locate(p, s) {
                assert!(r.start < r.end && r.end <= blocks);
            }
        }
    }
}
