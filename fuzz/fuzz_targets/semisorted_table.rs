//! Semi-sorted tables (`semisorted` layout): opening arbitrary bytes (footer, then the compact
//! index), reading every block and blob, fetching prefix groups and looking keys up never
//! panics, on both read paths. Each input is tried twice: as it is, and with its footer's
//! checksum (over its first 44 bytes, at 44..48) recomputed, so that mutated counts and offsets
//! reach the reader's range checks.
#![no_main]

use libfuzzer_sys::fuzz_target;
use scree::layout::semisorted::table::{hashes, SemiReader, FOOTER_SIZE};
use scree::stats::ReadKind;

const HASH_KEY: [u8; 16] = [7; 16];

fuzz_target!(|data: &[u8]| {
    open_and_read(data);
    if data.len() >= FOOTER_SIZE {
        let mut sealed = data.to_vec();
        let off = sealed.len() - FOOTER_SIZE;
        let crc = scree::coding::crc(&sealed[off..off + 44]);
        sealed[off + 44..off + 48].copy_from_slice(&crc.to_le_bytes());
        if sealed != data {
            open_and_read(&sealed);
        }
    }
});

fn open_and_read(data: &[u8]) {
    scree_fuzz::with_both_read_paths("000001.sem", data, |env, path| {
        let Ok(file) = env.open(path, false) else {
            return;
        };
        let Ok(t) = SemiReader::open(file, ReadKind::Metadata, true) else {
            return;
        };
        let mut keys = Vec::new();
        let _ = t.for_each(ReadKind::Compaction, |e| {
            if keys.len() < 64 {
                keys.push(e.ikey);
            }
            Ok(())
        });
        for k in keys.iter().chain([&b"missing-key-xyz"[..].to_vec()]) {
            let uk = &k[..k.len().saturating_sub(8)];
            for prefix_len in [1, 8] {
                let h = hashes(&HASH_KEY, prefix_len, uk);
                let _ = t.get(&HASH_KEY, uk, h, u64::MAX >> 8, &mut 0);
                let p = &uk[..prefix_len.min(uk.len())];
                let _ = t.group(h.0, p, ReadKind::Data);
            }
        }
    });
}
