//! The WAL/manifest record reader on arbitrary bytes: never panics; every payload it returns
//! lies inside the input; a log it calls clean re-encodes to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use scree::log::{self, LogEnd};

fuzz_target!(|data: &[u8]| {
    let (records, end) = log::read_records(data);
    let mut total = 0usize;
    for r in &records {
        total += log::HEADER + r.len();
        // Records decode as batches or fail cleanly.
        let _ = scree::batch::decode_public(r);
        let _ = scree::manifest::edit::Edit::decode(r);
    }
    match end {
        LogEnd::Clean => assert_eq!(total, data.len()),
        LogEnd::TornTail { offset } | LogEnd::Corrupt { offset, .. } => {
            assert_eq!(offset as usize, total);
            assert!(total < data.len());
        }
    }
});
