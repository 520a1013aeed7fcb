//! Memory-bounds probe: fills N unique random 16-byte keys with 100-byte values into one
//! keyspace of a layout (default options except the block cache), waits for compactions,
//! closes, reopens, and reports the process's memory (`/proc/self/status`: VmRSS, RssAnon,
//! RssFile, VmHWM), open file descriptors and memory maps after the open, after `reads`
//! random gets of present keys (which open the tables on their paths) and after a second
//! round of reads.
//!
//! `cargo run --release --example mem_probe -- LAYOUT NUM DIR [block_cache_mib] [reads]`
//! With `MEM_PROBE_REUSE=1` an existing database at DIR is read without filling;
//! `MEM_PROBE_DEPTH=d` sets the trie's `last_level_depth` (at creation); `MEM_PROBE_COMPACT=1`
//! runs `Db::compact` after the reads and reports the peak it reached;
//! `MEM_PROBE_GC_SINGLE_PASS_BYTES=b` and `MEM_PROBE_GC_RATIO=r` set the trie's
//! `gc_single_pass_bytes` and `gc_garbage_ratio` (a `compact` with ratio 0 collects nothing,
//! so a store can be prepared for a later `compact` that only collects);
//! `MEM_PROBE_WRITE_BUFFER_MB=m` sets the keyspace's write buffer;
//! `MEM_PROBE_CACHE_INDEX_AND_FILTER=1` sets `Options::cache_index_and_filter_blocks`.

use std::time::Instant;

use scree::{Db, KeyspaceOptions, Layout, Options};

#[path = "common/keys.rs"]
mod keys;
use keys::{key, mix};

fn status() -> String {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kb = |name: &str| -> u64 {
        s.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    let fds = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count());
    let maps = std::fs::read_to_string("/proc/self/maps").map_or(0, |m| m.lines().count());
    format!(
        "VmRSS {:>7.1} MiB  RssAnon {:>7.1} MiB  RssFile {:>7.1} MiB  VmHWM {:>7.1} MiB  VmSize {:>8.1} MiB  fds {fds}  maps {maps}",
        kb("VmRSS:") as f64 / 1024.0,
        kb("RssAnon:") as f64 / 1024.0,
        kb("RssFile:") as f64 / 1024.0,
        kb("VmHWM:") as f64 / 1024.0,
        kb("VmSize:") as f64 / 1024.0,
    )
}

/// Largest RssAnon (KiB) seen by the sampler since the last [`take_peak`].
static PEAK_ANON: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn anon_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with("RssAnon:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn take_peak() -> f64 {
    PEAK_ANON.swap(anon_kib(), std::sync::atomic::Ordering::Relaxed) as f64 / 1024.0
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    std::thread::spawn(|| loop {
        PEAK_ANON.fetch_max(anon_kib(), std::sync::atomic::Ordering::Relaxed);
        std::thread::sleep(std::time::Duration::from_millis(20));
    });
    let args: Vec<String> = std::env::args().skip(1).collect();
    let layout: Layout = args.first().map_or("leveled", String::as_str).parse()?;
    let num: u64 = args.get(1).map_or(Ok(1_000_000), |s| s.parse())?;
    let dir = args
        .get(2)
        .cloned()
        .unwrap_or_else(|| "/tmp/mem_probe".into());
    let cache_mib: usize = args.get(3).map_or(Ok(8), |s| s.parse())?;
    let reads: u64 = args.get(4).map_or(Ok(200_000), |s| s.parse())?;
    let reuse = std::env::var("MEM_PROBE_REUSE").is_ok_and(|v| v == "1");
    let compact = std::env::var("MEM_PROBE_COMPACT").is_ok_and(|v| v == "1");
    let mut ko = KeyspaceOptions::new(layout);
    if let Some(d) = std::env::var("MEM_PROBE_DEPTH")
        .ok()
        .and_then(|d| d.parse().ok())
    {
        ko.trie.last_level_depth = d;
    }
    if let Some(mb) = std::env::var("MEM_PROBE_WRITE_BUFFER_MB")
        .ok()
        .and_then(|m| m.parse::<usize>().ok())
    {
        ko.write_buffer_bytes = mb << 20;
    }
    if let Some(r) = std::env::var("MEM_PROBE_GC_RATIO")
        .ok()
        .and_then(|r| r.parse().ok())
    {
        ko.trie.gc_garbage_ratio = r;
    }
    if let Some(b) = std::env::var("MEM_PROBE_GC_SINGLE_PASS_BYTES")
        .ok()
        .and_then(|b| b.parse().ok())
    {
        ko.trie.gc_single_pass_bytes = b;
    }
    let cache_meta = std::env::var("MEM_PROBE_CACHE_INDEX_AND_FILTER").is_ok_and(|v| v == "1");
    let opts = || Options {
        block_cache_bytes: cache_mib << 20,
        cache_index_and_filter_blocks: cache_meta,
        ..Options::default()
    };
    println!("start: {}", status());
    // Leak check: fill (and close) a fresh database CYCLES times, trimming the heap after each.
    if let Some(cycles) = std::env::var("MEM_PROBE_CYCLES")
        .ok()
        .and_then(|c| c.parse::<u64>().ok())
    {
        for c in 0..cycles {
            let _ = std::fs::remove_dir_all(&dir);
            {
                let db = Db::open(&dir, opts())?;
                let ks = db.keyspace("bench", ko.clone())?;
                for i in 0..num {
                    ks.put(key(i), [7u8; 100])?;
                }
                db.flush()?;
                db.wait_for_compactions()?;
                for j in 0..reads {
                    let _ = ks.get(key(mix(j) % num))?;
                }
            }
            // SAFETY: malloc_trim only returns free heap memory to the OS.
            unsafe { libc::malloc_trim(0) };
            println!("cycle {c} closed + trimmed: {}", status());
        }
        let _ = std::fs::remove_dir_all(&dir);
        return Ok(());
    }
    if !reuse {
        let _ = std::fs::remove_dir_all(&dir);
        let db = Db::open(&dir, opts())?;
        let ks = db.keyspace("bench", ko.clone())?;
        let t = Instant::now();
        let value = [7u8; 100];
        for i in 0..num {
            ks.put(key(i), value)?;
            if (i + 1) % (num / 4).max(1) == 0 {
                println!("fill {:>10}: {}", i + 1, status());
            }
        }
        db.flush()?;
        db.wait_for_compactions()?;
        println!(
            "filled {num} in {:.1} s: {}  peak RssAnon {:.1} MiB",
            t.elapsed().as_secs_f64(),
            status(),
            take_peak()
        );
        if std::env::var("MEM_PROBE_OVERWRITE").is_ok_and(|v| v == "1") {
            let t = Instant::now();
            let value = [8u8; 100];
            for i in 0..num {
                ks.put(key(i), value)?;
            }
            db.flush()?;
            db.wait_for_compactions()?;
            println!(
                "overwrote {num} in {:.1} s: {}  peak RssAnon {:.1} MiB",
                t.elapsed().as_secs_f64(),
                status(),
                take_peak()
            );
            print_levels(&db);
        }
        drop(ks);
        drop(db);
        println!("closed: {}", status());
        // SAFETY: malloc_trim only returns free heap memory to the OS.
        unsafe { libc::malloc_trim(0) };
        println!("closed, after malloc_trim: {}", status());
    }
    let db = Db::open(&dir, opts())?;
    let ks = db.keyspace("bench", ko.clone())?;
    println!("reopened: {}", status());
    let s = db.stats();
    let mut tables = 0;
    let mut bytes = 0;
    for k in &s.keyspaces {
        for l in &k.levels {
            tables += l.tables;
            bytes += l.bytes;
            println!(
                "  level {} tables {} bytes {} {}",
                l.level, l.tables, l.bytes, l.detail
            );
        }
    }
    println!("tables {tables}, {:.1} MiB", bytes as f64 / 1048576.0);
    for round in 0..2 {
        let t = Instant::now();
        let mut found = 0u64;
        for j in 0..reads {
            let i = mix(j ^ (round << 40) ^ 0xABCD) % num;
            if ks.get(key(i))?.is_some() {
                found += 1;
            }
        }
        let st = db.stats();
        println!(
            "after {reads} gets (round {round}, {found} found, {:.1} s): {}\n  engine: open_table_files {} table_reader_bytes {} ({:.2} B/key) block_cache_usage_bytes {} index/filter cache hits {} misses {}",
            t.elapsed().as_secs_f64(),
            status(),
            st.open_table_files,
            st.table_reader_bytes,
            st.table_reader_bytes as f64 / num as f64,
            st.block_cache_usage_bytes,
            st.index_filter_cache_hits,
            st.index_filter_cache_misses,
        );
    }
    if compact {
        take_peak();
        println!("before compact: {}", status());
        let t = Instant::now();
        db.compact()?;
        println!(
            "after compact ({:.1} s): {}  peak RssAnon {:.1} MiB",
            t.elapsed().as_secs_f64(),
            status(),
            take_peak()
        );
        print_levels(&db);
    }
    Ok(())
}

/// The first keyspace's levels, one line each.
fn print_levels(db: &Db) {
    for l in &db.stats().keyspaces[0].levels {
        println!(
            "  level {} tables {} bytes {} {}",
            l.level, l.tables, l.bytes, l.detail
        );
    }
}
