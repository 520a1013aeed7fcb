//! WAL batch payload decoding (both record types): never panics, never allocates without bound.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The same bytes as the payload of both WAL record types (1: fixed header, 2: compact).
    for ty in [scree::log::FULL, scree::log::COMPACT_BATCH] {
        if let Ok((_seq, entries)) = scree::batch::decode_public(ty, data) {
            let bytes: usize = entries.iter().map(|(_, _, k, v)| k.len() + v.len()).sum();
            assert!(bytes <= data.len());
        }
    }
});
