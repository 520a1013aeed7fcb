//! The RESP request parser of `scree serve` (`scree_server::resp::parse`) on arbitrary bytes,
//! with small limits: never panics, never claims more bytes than it was given, never returns
//! an argument outside the request it consumed or larger than the bulk limit; a request it
//! accepts parses the same when more bytes follow it (pipelining).
#![no_main]

use libfuzzer_sys::fuzz_target;
use scree_server::resp::{parse, Args, Limits, Parsed};

fuzz_target!(|data: &[u8]| {
    let limits = Limits {
        max_bulk: 64,
        max_elements: 8,
        max_inline: 128,
    };
    let mut rest = data;
    // Every request in the buffer, as a connection reads a pipeline.
    while let Ok(Some(p)) = parse(rest, &limits) {
        let consumed = match &p {
            Parsed::Empty { consumed } => *consumed,
            Parsed::Command { consumed, args } => {
                match args {
                    Args::Ranges(r) => {
                        assert!(!r.is_empty() && r.len() <= limits.max_elements);
                        for r in r {
                            assert!(r.start <= r.end && r.end <= *consumed);
                            assert!(r.end - r.start <= limits.max_bulk);
                        }
                    }
                    Args::Owned(o) => {
                        assert!(!o.is_empty() && o.len() <= limits.max_elements);
                        assert!(o.iter().map(Vec::len).sum::<usize>() <= *consumed);
                    }
                }
                *consumed
            }
        };
        assert!(consumed > 0 && consumed <= rest.len());
        // The same request with the rest of the buffer cut off parses the same.
        let alone = parse(&rest[..consumed], &limits);
        assert_eq!(alone, Ok(Some(p)));
        rest = &rest[consumed..];
    }
});
