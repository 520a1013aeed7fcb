//! HTables (LSM-trie buckets): opening arbitrary bytes, reading every item and probing keys
//! never panics, on both read paths (copied and memory-mapped). Each input is tried twice: as
//! it is, and with its footer's checksum recomputed, so that mutated footer fields (counts,
//! offsets, shifts) reach the reader's checks instead of stopping at the checksum: a crafted
//! item count, say, reaches the check that keeps it from overflowing a multiplication.
#![no_main]

use libfuzzer_sys::fuzz_target;
use scree::htable::HTableReader;

/// Bytes of an HTable footer; its checksum covers the first 100 and sits at 100..104
/// (docs/format-htable.md).
const FOOTER: usize = 112;

fuzz_target!(|data: &[u8]| {
    open_and_read(data);
    if data.len() >= FOOTER {
        let mut sealed = data.to_vec();
        let off = sealed.len() - FOOTER;
        let crc = scree::coding::crc2(&(off as u64).to_le_bytes(), &sealed[off..off + 100]);
        sealed[off + 100..off + 104].copy_from_slice(&crc.to_le_bytes());
        if sealed != data {
            open_and_read(&sealed);
        }
    }
});

fn open_and_read(data: &[u8]) {
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
}
