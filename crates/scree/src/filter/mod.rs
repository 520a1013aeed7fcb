//! Filters: the Bloom filter used by sorted tables and HTable buckets (and, later, cuckoo
//! filters and Bloom clusters).

pub mod bloom;
