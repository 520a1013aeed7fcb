//! `scree serve`: a Redis-protocol server on Scree. RESP2 and RESP3, pipelining, strings with
//! expiry, hashes and sorted sets mapped onto keyspaces, AUTH, protected mode, bounded
//! requests, a client cap, idle timeouts, `appendfsync always|everysec|no` and a clean
//! shutdown on SIGTERM. docs/server.md describes the commands, the key encoding and the
//! limits.
//!
//! Entry points: [`run`] (blocking, until SIGTERM/SIGINT) for the `scree serve` command, and
//! [`start`] (async, returns a [`Running`] server) for tests and embedders.
#![deny(clippy::unwrap_used, clippy::indexing_slicing)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::indexing_slicing))]
#![warn(missing_docs)]

use std::net::SocketAddr;
use std::path::PathBuf;

pub mod commands;
pub mod expiry;
pub mod gc;
pub mod glob;
pub mod info;
pub mod resp;
mod server;
pub mod store;

pub use server::{run, start, Running};

/// When the WAL is synced (Redis's `appendfsync`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Fsync {
    /// Before replying to a batch of commands that wrote.
    Always,
    /// Once a second, when something was written.
    #[value(name = "everysec")]
    EverySec,
    /// Never explicitly (the engine writes the WAL on every write; the OS syncs it).
    No,
}

/// The server's settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// Database directory.
    pub db: PathBuf,
    /// Listen address (port 0: any free port; [`Running::addr`] says which).
    pub bind: SocketAddr,
    /// Layout of the `redis` keyspace (the others follow from it, docs/server.md).
    pub layout: scree::Layout,
    /// Password clients must give (`AUTH`); required to bind a non-loopback address.
    pub requirepass: Option<String>,
    /// WAL sync policy.
    pub appendfsync: Fsync,
    /// Most clients connected at once; more are refused with an error.
    pub maxclients: usize,
    /// Seconds a client may stay idle before it is disconnected (0: never).
    pub timeout_secs: u64,
    /// Request size bounds.
    pub limits: resp::Limits,
    /// Memtable size of each keyspace, bytes.
    pub write_buffer_bytes: usize,
    /// Block cache, bytes.
    pub block_cache_bytes: usize,
    /// Threads serving connections.
    pub threads: usize,
    /// Keep the key directory on layouts without key order (`trie`, `semisorted`), which
    /// `SCAN` and `FLUSHDB` walk there; off saves one entry per new key, and those two
    /// commands are then refused (docs/server.md, "Key directory").
    pub key_directory: bool,
    /// Read tables through a memory map (the engine's `Options::mmap_reads`, default on):
    /// faster GETs, and the mapped pages a GET touches count in the process's resident set
    /// (`RssFile`) although the kernel reclaims them like page cache. Off: `pread`, whose
    /// pages stay in the page cache, outside the resident set.
    pub mmap_reads: bool,
}

impl Config {
    /// Defaults: loopback port 6379, `leveled`, `everysec`, 10,000 clients, 300 s idle
    /// timeout, Redis's request bounds but 64 MiB bulk strings.
    pub fn new(db: impl Into<PathBuf>) -> Config {
        Config {
            db: db.into(),
            bind: SocketAddr::from(([127, 0, 0, 1], 6379)),
            layout: scree::Layout::Leveled,
            requirepass: None,
            appendfsync: Fsync::EverySec,
            maxclients: 10_000,
            timeout_secs: 300,
            limits: resp::Limits::default(),
            write_buffer_bytes: 64 << 20,
            block_cache_bytes: 32 << 20,
            threads: std::thread::available_parallelism().map_or(2, |n| n.get()),
            key_directory: true,
            mmap_reads: true,
        }
    }

    /// Refuses settings that cannot serve: protected mode (a non-loopback address without a
    /// password), zero clients, bounds past the engine's limits.
    pub fn check(&self) -> anyhow::Result<()> {
        if !self.bind.ip().is_loopback() && self.requirepass.is_none() {
            anyhow::bail!(
                "refusing to listen on {} without --requirepass (protected mode): any host \
                 that can reach it could read and write every key. Set a password, or bind a \
                 loopback address (127.0.0.1, ::1)",
                self.bind
            );
        }
        if self.requirepass.as_deref() == Some("") {
            anyhow::bail!("--requirepass must not be empty");
        }
        if self.maxclients == 0 {
            anyhow::bail!("--maxclients must be at least 1");
        }
        if self.limits.max_bulk == 0 || self.limits.max_bulk > scree::MAX_VALUE_BYTES {
            anyhow::bail!(
                "--proto-max-bulk-len must be 1..={} (the engine's largest value)",
                scree::MAX_VALUE_BYTES
            );
        }
        if self.limits.max_elements == 0 || self.limits.max_inline < 16 {
            anyhow::bail!("request bounds too small to carry a command");
        }
        if self.threads == 0 {
            anyhow::bail!("--threads must be at least 1");
        }
        store::layouts_for(self.layout).map_err(anyhow::Error::msg)?;
        Ok(())
    }
}

/// The `scree serve` command line.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Database directory (created if missing).
    #[arg(long)]
    pub db: PathBuf,
    /// Address to listen on. Anything but loopback needs --requirepass.
    #[arg(long, default_value = "127.0.0.1:6379")]
    pub bind: SocketAddr,
    /// Layout of the keyspace of Redis keys: leveled, fragmented, trie, semisorted[:N],
    /// lightweight (hashes and sorted sets get a layout that serves their scans).
    #[arg(long, default_value = "leveled")]
    pub layout: scree::Layout,
    /// Password clients must AUTH with.
    #[arg(long)]
    pub requirepass: Option<String>,
    /// When the WAL is synced: always (before replying), everysec, no.
    #[arg(long, value_enum, default_value = "everysec")]
    pub appendfsync: Fsync,
    /// Most clients connected at once.
    #[arg(long, default_value_t = 10_000)]
    pub maxclients: usize,
    /// Seconds before an idle client is disconnected (0: never).
    #[arg(long, default_value_t = 300)]
    pub timeout: u64,
    /// Largest bulk string in a request, bytes (at most 64 MiB, the engine's value limit).
    #[arg(long, default_value_t = scree::MAX_VALUE_BYTES)]
    pub proto_max_bulk_len: usize,
    /// Most elements in one request.
    #[arg(long, default_value_t = 1 << 20)]
    pub max_multibulk_len: usize,
    /// Memtable size of each keyspace, MiB.
    #[arg(long, default_value_t = 64)]
    pub write_buffer_mb: usize,
    /// Block cache, MiB.
    #[arg(long, default_value_t = 32)]
    pub block_cache_mb: usize,
    /// Threads serving connections (default: the number of cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// On trie and semisorted, keep no key directory: each new key costs one entry less, and
    /// SCAN and FLUSHDB are refused. Chosen when the database is made; refused later.
    #[arg(long)]
    pub no_key_directory: bool,
    /// Read tables with pread instead of a memory map: slower GETs, and the table pages GETs
    /// touch stay in the page cache instead of counting in the server's resident set.
    #[arg(long)]
    pub no_mmap_reads: bool,
}

impl ServeArgs {
    /// The settings these flags give.
    pub fn config(&self) -> Config {
        let mut c = Config::new(&self.db);
        c.bind = self.bind;
        c.layout = self.layout;
        c.requirepass = self.requirepass.clone();
        c.appendfsync = self.appendfsync;
        c.maxclients = self.maxclients;
        c.timeout_secs = self.timeout;
        c.limits.max_bulk = self.proto_max_bulk_len;
        c.limits.max_elements = self.max_multibulk_len;
        c.write_buffer_bytes = self.write_buffer_mb << 20;
        c.block_cache_bytes = self.block_cache_mb << 20;
        if let Some(t) = self.threads {
            c.threads = t;
        }
        c.key_directory = !self.no_key_directory;
        c.mmap_reads = !self.no_mmap_reads;
        c
    }
}
