//! The WAL/manifest record reader on arbitrary bytes: never panics; every payload it returns
//! lies inside the input; a log it calls clean re-encodes to the same bytes, up to a zero tail.
#![no_main]

use libfuzzer_sys::fuzz_target;
use scree::log::{self, LogEnd};

fuzz_target!(|data: &[u8]| {
    // The manifest reader accepts a subset of the WAL reader's record types.
    let (manifest_records, _) = log::read_records(data);
    let (records, end) = log::read_wal_records(data);
    assert!(manifest_records.len() <= records.len());
    let mut total = 0usize;
    for (ty, r) in &records {
        total += log::HEADER + r.len();
        // Records decode as batches or fail cleanly.
        let _ = scree::batch::decode_public(*ty, r);
        let _ = scree::manifest::edit::Edit::decode(r);
    }
    match end {
        // A clean end is the end of the bytes, or a zero tail (a preallocated memory-mapped
        // WAL, docs/format.md "Zero tail").
        LogEnd::Clean => assert!(data.get(total..).is_some_and(|t| t.iter().all(|&b| b == 0))),
        LogEnd::TornTail { offset } | LogEnd::Corrupt { offset, .. } => {
            assert_eq!(offset as usize, total);
            assert!(total < data.len());
        }
    }
});
