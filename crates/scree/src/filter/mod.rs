//! Filters: the Bloom filter used by sorted tables and HTable buckets, and the cuckoo filters
//! of the `semisorted` layout (a multi-level cuckoo filter per stepped level, and the plain
//! cuckoo filter it is measured against).

pub mod bloom;
pub mod cuckoo;
