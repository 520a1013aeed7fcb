//! Sorted-table blocks: the index block (`Block`, and the `TableIndex` made of it) and data blocks (`DataBlock` walked by a
//! `BlockCursor`) decoded from arbitrary bytes; every access of a decoded block must be safe.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use scree::key::cmp_ikey;
use scree::table::block::{Block, BlockCursor, DataBlock};
use scree::table::sep_index::TableIndex;

fuzz_target!(|data: &[u8]| {
    let (probe, raw) = data.split_at(data.len().min(12));
    check(probe, raw);
    // Again with the block's checksum recomputed, so mutated contents reach the decoders'
    // checks instead of stopping at the checksum.
    if raw.len() >= 4 {
        let mut sealed = raw.to_vec();
        let body = sealed.len() - 4;
        let crc = scree::coding::crc(&sealed[..body]);
        sealed[body..].copy_from_slice(&crc.to_le_bytes());
        if sealed != raw {
            check(probe, &sealed);
        }
    }
});

fn check(probe: &[u8], raw: &[u8]) {
    if let Ok(b) = Block::decode(raw.to_vec()) {
        for i in 0..b.len() {
            let _ = (b.key(i), b.value(i));
        }
        let _ = b.lower_bound(probe, |a, b| a.cmp(b));
        // An index decoded from any block: its prefix-assisted search for an internal key
        // answers as a plain search over its separators does.
        if let Ok(ix) = TableIndex::from_block(&b) {
            if probe.len() >= 8 {
                let plain = (0..ix.len()).find(|&i| cmp_ikey(&ix.key(i), probe).is_ge());
                assert_eq!(ix.lower_bound_ikey(probe), plain.unwrap_or(ix.len()));
            }
            for i in 0..ix.len() {
                let _ = ix.handle(i);
            }
        }
    }
    if let Ok(b) = DataBlock::decode(raw.to_vec()) {
        let b = Arc::new(b);
        let mut c = BlockCursor::new(b.clone());
        let mut n = 0;
        if c.seek_to_first().is_ok() {
            while c.valid() && n < 100_000 {
                let _ = (c.key(), c.value());
                if c.next().is_err() {
                    break;
                }
                n += 1;
            }
        }
        let mut c = BlockCursor::new(b.clone());
        if c.seek_to_last().is_ok() {
            let mut m = 0;
            while c.valid() && m < 100_000 {
                if c.prev().is_err() {
                    break;
                }
                m += 1;
            }
        }
        let mut c = BlockCursor::new(b);
        let _ = c.seek(probe, cmp_ikey);
    }
}
