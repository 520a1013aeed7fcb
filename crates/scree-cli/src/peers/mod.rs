//! The peer engines `scree bench --peers` runs beside Scree, each behind a cargo feature so
//! that the default build needs none of them:
//! - `rocksdb`: the current RocksDB release, compiled from source by the `rocksdb` crate
//!   (feature `rocksdb-current`; the first build takes 20-40 minutes);
//! - `leveldb` and `rocksdb-debian`: Debian's LevelDB 1.23 and RocksDB 7.8.3 C libraries,
//!   through minimal hand-written bindings to their C APIs (feature `peers`;
//!   `scripts/setup-peers.sh` installs them). Both RocksDBs export the same C symbols, so
//!   `rocksdb-debian` is left out of a build with `rocksdb-current`;
//! - `fjall` and `redb`: pure-Rust engines (feature `peers-rust`).

use std::fmt;
use std::str::FromStr;

use crate::bench::engine::{BenchEngine, EngineConfig};

#[cfg(feature = "peers")]
mod cffi;
#[cfg(feature = "peers-rust")]
pub mod fjall;
#[cfg(feature = "peers")]
pub mod leveldb;
#[cfg(feature = "peers-rust")]
pub mod redb;
#[cfg(feature = "rocksdb-current")]
pub mod rocksdb;
#[cfg(all(feature = "peers", not(feature = "rocksdb-current")))]
pub mod rocksdb_debian;

/// A peer engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peer {
    /// The current RocksDB release, built from source (`rocksdb` crate).
    RocksDb,
    /// Debian's RocksDB 7.8.3 through `librocksdb`.
    RocksDbDebian,
    /// LevelDB through `libleveldb`.
    LevelDb,
    /// fjall (pure Rust LSM-tree).
    Fjall,
    /// redb (pure Rust B-tree).
    Redb,
}

/// Every peer, in the order `--help` lists them.
pub const ALL: [Peer; 5] = [
    Peer::RocksDb,
    Peer::LevelDb,
    Peer::Fjall,
    Peer::Redb,
    Peer::RocksDbDebian,
];

impl Peer {
    /// The name `--peers` takes.
    pub fn name(self) -> &'static str {
        match self {
            Peer::RocksDb => "rocksdb",
            Peer::RocksDbDebian => "rocksdb-debian",
            Peer::LevelDb => "leveldb",
            Peer::Fjall => "fjall",
            Peer::Redb => "redb",
        }
    }

    /// Whether this binary has the peer; if not, what to build.
    pub fn built(self) -> Result<(), String> {
        let (have, how) = match self {
            Peer::RocksDb => (
                cfg!(feature = "rocksdb-current"),
                "the `rocksdb-current` feature, which compiles the current RocksDB from source \
                 (20-40 minutes the first time; needs a C++ compiler and libclang): \
                 scripts/setup-peers.sh, or cargo build --release -p scree-cli --features \
                 rocksdb-current",
            ),
            Peer::RocksDbDebian => (
                cfg!(all(feature = "peers", not(feature = "rocksdb-current"))),
                "the `peers` feature without `rocksdb-current` (both RocksDBs export the same \
                 C symbols, so one binary links only one of them): install librocksdb-dev, \
                 then cargo build --release -p scree-cli --features peers",
            ),
            Peer::LevelDb => (
                cfg!(feature = "peers"),
                "the `peers` feature, which links Debian's LevelDB (and RocksDB 7.8.3) C \
                 libraries: scripts/setup-peers.sh installs them and builds",
            ),
            Peer::Fjall | Peer::Redb => (
                cfg!(feature = "peers-rust"),
                "the `peers-rust` feature: cargo build --release -p scree-cli --features \
                 peers-rust",
            ),
        };
        if have {
            Ok(())
        } else {
            Err(format!(
                "--peers {}: this scree binary was built without it; it needs {how}",
                self.name()
            ))
        }
    }
}

impl fmt::Display for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Peer {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim().to_ascii_lowercase();
        ALL.into_iter().find(|p| p.name() == s).ok_or_else(|| {
            let known: Vec<&str> = ALL.iter().map(|p| p.name()).collect();
            format!("unknown peer `{s}` (known: {})", known.join(", "))
        })
    }
}

/// Opens `peer` at `dir`; an error names the feature a build without the peer needs.
pub fn open(
    peer: Peer,
    dir: &std::path::Path,
    cfg: &EngineConfig,
) -> anyhow::Result<Box<dyn BenchEngine>> {
    peer.built().map_err(anyhow::Error::msg)?;
    let _ = (dir, cfg);
    let engine: Option<Box<dyn BenchEngine>> = match peer {
        #[cfg(feature = "rocksdb-current")]
        Peer::RocksDb => Some(Box::new(rocksdb::RocksDb::open(dir, cfg)?)),
        #[cfg(all(feature = "peers", not(feature = "rocksdb-current")))]
        Peer::RocksDbDebian => Some(Box::new(rocksdb_debian::RocksDb::open(dir, cfg)?)),
        #[cfg(feature = "peers")]
        Peer::LevelDb => Some(Box::new(leveldb::LevelDb::open(dir, cfg)?)),
        #[cfg(feature = "peers-rust")]
        Peer::Fjall => Some(Box::new(fjall::Fjall::open(dir, cfg)?)),
        #[cfg(feature = "peers-rust")]
        Peer::Redb => Some(Box::new(redb::Redb::open(dir, cfg)?)),
        #[allow(unreachable_patterns)]
        _ => None,
    };
    engine.ok_or_else(|| anyhow::anyhow!("--peers {peer}: not in this build"))
}

/// Sums the `Write(MB)` column of LevelDB's `leveldb.stats` property (bytes written by flushes
/// and compactions, per level, in MiB rounded to whole numbers).
#[cfg_attr(not(feature = "peers"), allow(dead_code))]
pub fn parse_leveldb_stats_write_mb(stats: &str) -> Option<f64> {
    let mut total = 0.0;
    let mut rows = 0;
    for line in stats.lines() {
        let cols: Vec<&str> = line.split_whitespace().collect();
        // Level Files Size(MB) Time(sec) Read(MB) Write(MB)
        if cols.len() == 6 && cols.iter().all(|c| c.parse::<f64>().is_ok()) {
            total += cols.get(5)?.parse::<f64>().ok()?;
            rows += 1;
        }
    }
    (rows > 0 || stats.contains("Compactions")).then_some(total)
}

/// `(files, bytes)` per level from LevelDB's `leveldb.sstables` property (lines like
/// ` 12:2110123['a' @ 1 : 1 .. 'b' @ 2 : 1]` under `--- level N ---`).
#[cfg_attr(not(feature = "peers"), allow(dead_code))]
pub fn parse_leveldb_sstables(text: &str) -> Vec<(u64, u64)> {
    let mut levels: Vec<(u64, u64)> = Vec::new();
    let mut current: Option<usize> = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("--- level ") {
            current = rest.trim_end_matches(" ---").trim().parse().ok();
            if let Some(l) = current {
                if levels.len() <= l {
                    levels.resize(l + 1, (0, 0));
                }
            }
            continue;
        }
        let (Some(l), Some((_, after))) = (current, line.trim_start().split_once(':')) else {
            continue;
        };
        let size: String = after.chars().take_while(|c| c.is_ascii_digit()).collect();
        if let (Ok(bytes), Some(slot)) = (size.parse::<u64>(), levels.get_mut(l)) {
            slot.0 += 1;
            slot.1 += bytes;
        }
    }
    levels
}

/// Whether LevelDB's directory shows a memtable flush or a compaction in flight, which
/// neither `leveldb.stats` nor `leveldb.sstables` does until it finishes: more than one `.log`
/// file (the log of an immutable memtable is deleted only once its flush is installed), or a
/// table file (`.ldb`/`.sst`) numbered above every table `leveldb.sstables` lists (an output
/// being written: outputs take new file numbers). Unlisted tables with lower numbers are inputs
/// of finished compactions, which LevelDB may leave on disk until a later compaction deletes
/// them, so they do not count. `files` are the names in the database directory.
#[cfg_attr(not(feature = "peers"), allow(dead_code))]
pub fn leveldb_files_busy(files: &[String], sstables: &str) -> bool {
    let live: std::collections::HashSet<u64> = sstables
        .lines()
        .filter(|l| !l.starts_with("--- level "))
        .filter_map(|l| l.trim_start().split_once(':')?.0.parse().ok())
        .collect();
    let number = |name: &str, ext: &str| name.strip_suffix(ext)?.parse::<u64>().ok();
    let logs = files.iter().filter(|f| number(f, ".log").is_some()).count();
    let newest = live.iter().copied().max().unwrap_or(0);
    logs > 1
        || files.iter().any(|f| {
            number(f, ".ldb")
                .or_else(|| number(f, ".sst"))
                .is_some_and(|n| n > newest)
        })
}

/// Memtable prefix Bloom filter size, as a fraction of the write buffer, in group mode
/// (RocksDB's documented example value), for both RocksDB peers.
#[cfg(any(feature = "peers", feature = "rocksdb-current"))]
const ROCKSDB_MEMTABLE_PREFIX_BLOOM_RATIO: f64 = 0.1;

/// The settings both RocksDB peers set and report alike: background jobs, statistics, and the
/// prefix extractor when the keys come in groups of a `key_prefix_len`-byte prefix.
#[cfg(any(feature = "peers", feature = "rocksdb-current"))]
fn rocksdb_shared_settings(key_prefix_len: Option<usize>) -> Vec<(String, String)> {
    let mut settings = vec![
        ("max_background_jobs".into(), "default (2)".into()),
        (
            "statistics".into(),
            "enabled (for WA and stall counters)".into(),
        ),
    ];
    if let Some(len) = key_prefix_len {
        settings.push((
            "prefix_extractor".into(),
            format!(
                "fixed {len} bytes, prefix Bloom in tables (whole keys too) and memtable \
                 (ratio {ROCKSDB_MEMTABLE_PREFIX_BLOOM_RATIO}); seeks of scans \
                 total_order_seek, prefix scans prefix_same_as_start"
            ),
        ));
    }
    settings
}

/// The value of ticker `name` (`rocksdb.x.y COUNT : 123`) in RocksDB's statistics string.
#[cfg_attr(
    not(all(feature = "peers", not(feature = "rocksdb-current"))),
    allow(dead_code)
)]
pub fn parse_rocksdb_ticker(stats: &str, name: &str) -> Option<u64> {
    stats.lines().find_map(|l| {
        let rest = l.strip_prefix(name)?;
        let rest = rest.trim_start().strip_prefix("COUNT")?.trim_start();
        rest.strip_prefix(':')?.trim().parse().ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_leveldb_stats() {
        let s = "                               Compactions\n\
Level  Files Size(MB) Time(sec) Read(MB) Write(MB)\n\
--------------------------------------------------\n\
  0        3        6         0        0        64\n\
  1        5       10         1       70        70\n";
        assert_eq!(parse_leveldb_stats_write_mb(s), Some(134.0));
    }

    #[test]
    fn parses_leveldb_sstables() {
        let s = "--- level 0 ---\n 7:2097152['a' @ 1 : 1 .. 'b' @ 2 : 1]\n 8:100['c' @ 3 : 1 .. 'd' @ 4 : 1]\n--- level 1 ---\n--- level 2 ---\n 3:5000['e' @ 5 : 1 .. 'f' @ 6 : 1]\n";
        assert_eq!(
            parse_leveldb_sstables(s),
            vec![(2, 2_097_252), (0, 0), (1, 5000)]
        );
    }

    #[test]
    fn leveldb_flush_in_flight_is_busy() {
        let sst = "--- level 0 ---\n 7:2097152['a' @ 1 : 1 .. 'b' @ 2 : 1]\n--- level 1 ---\n 5:100['c' @ 3 : 1 .. 'd' @ 4 : 1]\n";
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        // Idle: one log, every table listed.
        let idle = names(&[
            "CURRENT",
            "LOCK",
            "LOG",
            "MANIFEST-000002",
            "000008.log",
            "000007.ldb",
            "000005.ldb",
        ]);
        assert!(!leveldb_files_busy(&idle, sst));
        // An immutable memtable being flushed: its log is still there, its table not listed.
        let flushing = names(&[
            "000006.log",
            "000008.log",
            "000007.ldb",
            "000005.ldb",
            "000009.ldb",
        ]);
        assert!(leveldb_files_busy(&flushing, sst));
        assert!(leveldb_files_busy(
            &names(&["000006.log", "000008.log"]),
            sst
        ));
        // A compaction writing an output not yet installed.
        assert!(leveldb_files_busy(
            &names(&["000008.log", "000007.ldb", "000005.ldb", "000010.sst"]),
            sst
        ));
        // An input of a finished compaction that LevelDB has not deleted yet is not work.
        assert!(!leveldb_files_busy(
            &names(&["000008.log", "000003.ldb", "000007.ldb", "000005.ldb"]),
            sst
        ));
    }

    #[test]
    fn parses_rocksdb_tickers() {
        let s = "rocksdb.block.cache.miss COUNT : 10\nrocksdb.wal.bytes COUNT : 1234\nrocksdb.wal.synced COUNT : 0\n";
        assert_eq!(parse_rocksdb_ticker(s, "rocksdb.wal.bytes"), Some(1234));
        assert_eq!(parse_rocksdb_ticker(s, "rocksdb.wal"), None);
        assert_eq!(parse_rocksdb_ticker(s, "rocksdb.flush.write.bytes"), None);
    }

    #[test]
    fn peer_names() {
        assert_eq!("RocksDB".parse::<Peer>(), Ok(Peer::RocksDb));
        assert_eq!("rocksdb-debian".parse::<Peer>(), Ok(Peer::RocksDbDebian));
        for p in ALL {
            assert_eq!(p.name().parse::<Peer>(), Ok(p));
        }
        let e = "lmdb".parse::<Peer>().expect_err("unknown");
        assert!(e.contains("fjall, redb"), "{e}");
    }

    /// A peer missing from the build is refused with the feature to build, not opened.
    #[test]
    fn missing_peers_name_their_feature() {
        let cfg = EngineConfig {
            write_buffer_bytes: 1 << 20,
            bloom_bits: 10,
            sync: false,
            direct_reads: false,
            block_cache_bytes: None,
            key_prefix_len: None,
            scree: Default::default(),
        };
        let dir = tempfile::tempdir().expect("tempdir");
        for p in ALL {
            match p.built() {
                Ok(()) => {
                    if let Err(e) = open(p, &dir.path().join(p.name()), &cfg) {
                        panic!("{p}: {e:#}");
                    }
                }
                Err(e) => {
                    assert!(e.contains("feature"), "{e}");
                    let err = open(p, dir.path(), &cfg).err().expect("refused");
                    assert_eq!(err.to_string(), e);
                }
            }
        }
    }
}
