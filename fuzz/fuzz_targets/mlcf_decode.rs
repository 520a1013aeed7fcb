//! The multi-level cuckoo filter (`scree::filter::cuckoo::MultiLevelCuckoo`, semisorted's
//! level filter) decoded from arbitrary bytes, as found and again with the checksum recomputed
//! (so mutated contents reach the structural checks): never a panic. A filter that loads
//! answers only with ids it has, `verify` passes or says `Corruption`, its encoding decodes
//! to the same bytes and answers, and inserts, removes and remaps on it stay in bounds.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use scree::filter::cuckoo::{Answer, MultiLevelCuckoo, Prior};
use scree::Error;

const HASH_KEY: [u8; 16] = *b"scree-fuzz-mlcf!";

fuzz_target!(|data: &[u8]| {
    scree_fuzz::as_found_and_resealed(data, check);
});

fn check(raw: &[u8]) {
    let mut f = match MultiLevelCuckoo::decode(Path::new("fuzz"), 0, HASH_KEY, raw) {
        Ok(f) => f,
        Err(Error::Corruption { .. } | Error::Unsupported(_)) => return,
        Err(e) => panic!("decode failed with a non-corruption error: {e}"),
    };
    if let Err(e) = f.verify(Path::new("fuzz"), 0) {
        assert!(matches!(e, Error::Corruption { .. }), "verify: {e}");
    }
    let ids = f.id_capacity();
    // Keys from the input itself (16-byte chunks: a semisorted filter hashes 8 + 8).
    let keys: Vec<&[u8]> = raw.chunks_exact(16).take(16).collect();
    let answers: Vec<Answer> = keys.iter().map(|k| f.lookup(k)).collect();
    for a in &answers {
        if let Answer::SubLevel(id) = a {
            assert!(*id < ids, "id {id} of {ids}");
        }
    }
    let bytes = f.encode();
    let again = MultiLevelCuckoo::decode(Path::new("fuzz"), 0, HASH_KEY, &bytes)
        .expect("a decoded filter's encoding decodes");
    assert_eq!(again.encode(), bytes, "encoding round trip");
    for (k, a) in keys.iter().zip(&answers) {
        assert_eq!(again.lookup(k), *a, "answers after the round trip");
    }
    // Mutations of a decoded filter: inserts as the newest id, removes, a remap that drops
    // the oldest id.
    if ids > 0 {
        for k in &keys {
            let _ = f.insert(k, ids - 1, Prior::Unknown);
        }
        for k in keys.iter().take(4) {
            f.remove(k);
        }
        let map: Vec<Option<u8>> = (0..ids).map(|i| i.checked_sub(1)).collect();
        let _ = f.remap(&map);
        for k in &keys {
            if let Answer::SubLevel(id) = f.lookup(k) {
                assert!(id < f.id_capacity());
            }
        }
    }
}
