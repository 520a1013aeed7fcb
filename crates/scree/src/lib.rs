//! Scree: an embeddable key-value storage engine for write-heavy workloads of small items,
//! offering the write-optimized designs of five research papers as per-keyspace *layouts*.
//!
//! What a user touches: [`Db`], [`Keyspace`] (and [`WeakKeyspace`], for compaction filters
//! that read), [`Snapshot`], [`WriteBatch`], the options ([`Options`], [`KeyspaceOptions`],
//! [`Layout`] and its [`Order`]), [`Error`], [`Stats`], the iterators ([`RangeIter`]); [`fs`]
//! for a custom file system; [`check`] and [`inspect`] for offline verification and WAL dumps. The modules marked hidden are the engine's internals,
//! public only for the project's own tests, fuzz targets and tools: they are not a stable API.
#![deny(clippy::unwrap_used, clippy::indexing_slicing)]
// Unit tests may unwrap and index: a panic there is a failed test, not a crashed user.
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::indexing_slicing))]
#![warn(missing_docs)]

pub mod check;
pub mod compaction_filter;
pub mod fs;
pub mod inspect;

mod db;
mod error;
mod hint;
mod iterator;
mod options;
mod wal_chain;

#[doc(hidden)]
pub mod batch;
#[doc(hidden)]
pub mod cache;
#[doc(hidden)]
pub mod coding;
#[doc(hidden)]
pub mod filter;
#[doc(hidden)]
pub mod htable;
#[doc(hidden)]
pub mod index;
#[doc(hidden)]
pub mod iter;
#[doc(hidden)]
pub mod key;
#[doc(hidden)]
pub mod layout;
#[doc(hidden)]
pub mod log;
#[doc(hidden)]
pub mod manifest;
#[doc(hidden)]
pub mod memtable;
#[doc(hidden)]
pub mod stats;
#[doc(hidden)]
pub mod table;
#[doc(hidden)]
pub mod table_format;
#[doc(hidden)]
pub mod testing;

pub use batch::{WriteBatch, WriteOptions};
pub use compaction_filter::CompactionFilter;
pub use db::{Db, Keyspace, Snapshot, WeakKeyspace};
pub use error::{Error, Result};
pub use iterator::{Key, RangeIter, Value};
pub use options::{
    Device, FragmentedOptions, KeyspaceOptions, Layout, LevelPlan, LeveledOptions,
    LightweightOptions, Options, Order, SemiSortedOptions, TrieOptions, WalRecovery, MAX_KEY_BYTES,
    MAX_VALUE_BYTES,
};
pub use stats::{
    BytesWritten, KeyspaceStats, LevelMemory, LevelReads, LevelStats, LevelWrites,
    LightweightStats, Stats, TableInfo,
};
