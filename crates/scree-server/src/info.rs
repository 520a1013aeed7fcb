//! `INFO`: Redis's sections (server, clients, memory, persistence, stats, keyspace) and a
//! `scree` section with the engine's [`scree::Stats`].

use std::fmt::Write as _;
use std::sync::atomic::Ordering;

use crate::commands::{Shared, REDIS_VERSION};
use crate::Fsync;

/// Resident memory of this process: (VmRSS, VmHWM) in bytes, from `/proc/self/status`.
pub fn resident_bytes() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|r| r.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn human(b: u64) -> String {
    let units = ["B", "K", "M", "G", "T"];
    let mut x = b as f64;
    let mut u = 0;
    while x >= 1024.0 && u + 1 < units.len() {
        x /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b}B")
    } else {
        format!("{x:.2}{}", units.get(u).copied().unwrap_or("?"))
    }
}

/// The text of `INFO [section ...]`.
pub fn info(sh: &Shared, args: &[&[u8]]) -> String {
    let asked: Vec<String> = args
        .iter()
        .map(|a| String::from_utf8_lossy(a).to_ascii_lowercase())
        .collect();
    let want = |s: &str| {
        asked.is_empty()
            || asked
                .iter()
                .any(|a| a == s || a == "all" || a == "everything" || a == "default")
    };
    let mut o = String::new();
    let c = &sh.config;
    if want("server") {
        let up = sh.started.elapsed().as_secs();
        let _ = write!(
            o,
            "# Server\r\nredis_version:{REDIS_VERSION}\r\nscree_version:{}\r\n\
             redis_mode:standalone\r\narch_bits:64\r\nprocess_id:{}\r\ntcp_port:{}\r\n\
             uptime_in_seconds:{up}\r\nuptime_in_days:{}\r\nexecutable:scree serve\r\n\r\n",
            env!("CARGO_PKG_VERSION"),
            std::process::id(),
            sh.port,
            up / 86400
        );
    }
    if want("clients") {
        let _ = write!(
            o,
            "# Clients\r\nconnected_clients:{}\r\nmaxclients:{}\r\n\r\n",
            sh.clients.load(Ordering::Relaxed),
            c.maxclients
        );
    }
    let stats = sh.store.db().stats();
    if want("memory") {
        let (rss, hwm) = resident_bytes();
        let _ = write!(
            o,
            "# Memory\r\nused_memory:{rss}\r\nused_memory_human:{}\r\nused_memory_rss:{rss}\r\n\
             used_memory_rss_human:{}\r\nused_memory_peak:{hwm}\r\nused_memory_peak_human:{}\r\n\
             block_cache_bytes:{}\r\nmaxmemory:0\r\nmaxmemory_policy:noeviction\r\n\r\n",
            human(rss),
            human(rss),
            human(hwm),
            stats.block_cache_usage_bytes
        );
    }
    if want("persistence") {
        let fsync = match c.appendfsync {
            Fsync::Always => "always",
            Fsync::EverySec => "everysec",
            Fsync::No => "no",
        };
        let _ = write!(
            o,
            "# Persistence\r\nloading:0\r\naof_enabled:1\r\nappendfsync:{fsync}\r\n\
             rdb_changes_since_last_save:{}\r\nflushes:{}\r\ncompactions:{}\r\n\r\n",
            sh.unsynced.load(Ordering::Relaxed),
            stats.flushes,
            stats.compactions
        );
    }
    if want("stats") {
        let _ = write!(
            o,
            "# Stats\r\ntotal_connections_received:{}\r\ntotal_commands_processed:{}\r\n\
             rejected_connections:{}\r\nexpired_keys:{}\r\n\r\n",
            sh.connections.load(Ordering::Relaxed),
            sh.commands.load(Ordering::Relaxed),
            sh.rejected.load(Ordering::Relaxed),
            sh.store.expired_reads()
        );
    }
    if want("keyspace") {
        let _ = write!(o, "# Keyspace\r\n");
        let n = sh.store.dbsize().unwrap_or(0);
        if n > 0 {
            let _ = write!(o, "db0:keys={n},expires=0,avg_ttl=0\r\n");
        }
        o.push_str("\r\n");
    }
    if want("scree") {
        let _ = write!(
            o,
            "# Scree\r\nlayout:{}\r\nuser_bytes:{}\r\nwrite_amplification:{:.3}\r\n\
             write_amplification_without_wal:{:.3}\r\nbytes_read:{}\r\ndata_block_reads:{}\r\n\
             metadata_block_reads:{}\r\ncache_hits:{}\r\ncache_misses:{}\r\ngets:{}\r\n\
             stall_seconds:{:.3}\r\nslowdown_seconds:{:.3}\r\nflushes:{}\r\ncompactions:{}\r\n",
            sh.store.layout(),
            stats.user_bytes,
            stats.write_amplification,
            stats.write_amplification_without_wal,
            stats.bytes_read,
            stats.data_block_reads,
            stats.metadata_block_reads,
            stats.cache_hits,
            stats.cache_misses,
            stats.gets,
            stats.stall_seconds,
            stats.slowdown_seconds,
            stats.flushes,
            stats.compactions
        );
        for k in &stats.keyspaces {
            let tables: u64 = k.levels.iter().map(|l| l.tables).sum();
            let bytes: u64 = k.levels.iter().map(|l| l.bytes).sum();
            let _ = write!(
                o,
                "keyspace_{}:layout={},levels={},tables={tables},bytes={bytes},memtable_bytes={}\r\n",
                k.name.replace('.', "_"),
                k.layout,
                k.levels.len(),
                k.memtable_bytes
            );
        }
        o.push_str("\r\n");
    }
    // No trailing blank line, as Redis.
    while o.ends_with("\r\n\r\n") {
        o.truncate(o.len() - 2);
    }
    o
}
