//! WAL batch payload decoding: never panics, never allocates without bound.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok((_seq, entries)) = scree::batch::decode_public(data) {
        let bytes: usize = entries.iter().map(|(_, _, k, v)| k.len() + v.len()).sum();
        assert!(bytes <= data.len());
    }
});
