//! Manifest edits: decoding arbitrary bytes never panics, and whatever decodes re-encodes to
//! an edit that decodes to the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use scree::manifest::edit::Edit;

fuzz_target!(|data: &[u8]| {
    if let Ok(e) = Edit::decode(data) {
        let again = Edit::decode(&e.encode()).expect("a re-encoded edit decodes");
        assert_eq!(again, e);
    }
});
