//! Scree: an embeddable key-value storage engine for write-heavy workloads of small items,
//! offering the write-optimized designs of five research papers as per-keyspace *layouts*.
#![deny(clippy::unwrap_used, clippy::indexing_slicing)]
// Unit tests may unwrap and index: a panic there is a failed test, not a crashed user.
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::indexing_slicing))]
#![warn(missing_docs)]

pub mod check;
pub mod coding;
pub mod error;
pub mod filter;
pub mod fs;
pub mod htable;
pub mod inspect;
pub mod key;
pub mod stats;

pub use error::{Error, Result};
pub use stats::Stats;

pub mod batch;
pub mod cache;
pub mod compaction;
mod db;
pub mod iter;
pub mod iterator;
pub mod layout;
pub mod log;
pub mod manifest;
pub mod memtable;
pub mod options;
pub mod table;
pub mod table_format;
mod wal_chain;

pub use batch::{WriteBatch, WriteOptions};
pub use db::{Db, Keyspace, Snapshot};
pub use iterator::{Key, RangeIter, Value};
pub use options::{
    KeyspaceOptions, Layout, LeveledOptions, Options, WalRecovery, MAX_KEY_BYTES, MAX_VALUE_BYTES,
};
pub use stats::{BytesWritten, KeyspaceStats, LevelReads, LevelStats, LevelWrites, TableInfo};
