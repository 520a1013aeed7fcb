//! Measures the `trie` layout against others until `scree bench` can set trie options: fills N
//! unique random 16-byte keys with 100-byte values (random order), waits for compactions,
//! prints write amplification (with and without the WAL), the trie's shape and the average
//! number of levels an item was written at, then times random reads of present keys and of
//! absent keys and prints data/metadata block reads per get, in total and per level.
//!
//! `cargo run --release --example trie_fill -- [layouts] [num] [buffer_mib] [reads]`
//! e.g. `cargo run --release --example trie_fill -- leveled,trie 5000000 8 1000000`.
//! Environment: `TRIE_DIR` (default a temp dir; with `TRIE_REUSE=1` an existing database is
//! read without filling), `TRIE_PILE` (pile_size), `TRIE_DEPTH` (last_level_depth),
//! `TRIE_DIRECT=1` (direct reads), `TRIE_PARALLEL=1` (parallel search),
//! `TRIE_GC=ratio`, `TRIE_FILL=target_fill`, `TRIE_CLUSTER_CACHE=bytes`, `TRIE_THREADS`
//! (background threads).

use std::time::Instant;

use scree::{Db, KeyspaceOptions, Layout, Options, Stats};

#[path = "common/keys.rs"]
mod keys;
use keys::{key, mix};

fn value(i: u64, out: &mut [u8; 100]) {
    let mut x = mix(i ^ 0x5555_5555);
    for chunk in out.chunks_mut(8) {
        x = mix(x);
        let b = x.to_le_bytes();
        let n = chunk.len();
        chunk.copy_from_slice(b.get(..n).unwrap_or_default());
    }
}

/// CPU seconds used by the calling thread (robust to other load on a shared machine).
fn thread_cpu() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we pass.
    unsafe {
        libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts);
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

/// CPU seconds used by the whole process.
fn process_cpu() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we pass.
    unsafe {
        libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts);
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

fn env<T: std::str::FromStr>(name: &str) -> Option<T> {
    std::env::var(name).ok().and_then(|s| s.parse().ok())
}

fn per_get(a: &Stats, b: &Stats, gets: u64) -> String {
    let g = gets.max(1) as f64;
    let mut s = format!(
        "data blocks/get {:.3}, metadata blocks/get {:.3}",
        (b.data_block_reads - a.data_block_reads) as f64 / g,
        (b.metadata_block_reads - a.metadata_block_reads) as f64 / g
    );
    if let (Some(ka), Some(kb)) = (a.keyspaces.first(), b.keyspaces.first()) {
        for (la, lb) in ka.level_reads.iter().zip(&kb.level_reads) {
            s.push_str(&format!(
                "\n    level {}: data {:.3}/get, metadata {:.3}/get",
                lb.level,
                (lb.data_block_reads - la.data_block_reads) as f64 / g,
                (lb.metadata_block_reads - la.metadata_block_reads) as f64 / g
            ));
        }
    }
    s
}

fn main() -> scree::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let layouts = args.get(1).map_or("leveled,trie", |s| s.as_str());
    let num: u64 = args
        .get(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let buf_mib: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(64);
    let reads: u64 = args.get(4).and_then(|s| s.parse().ok()).unwrap_or(200_000);
    let reuse = std::env::var("TRIE_REUSE").is_ok_and(|v| v == "1");
    for name in layouts.split(',') {
        let layout: Layout = name.parse()?;
        let dir = match std::env::var("TRIE_DIR") {
            Ok(d) => std::path::PathBuf::from(d).join(name),
            Err(_) => std::env::temp_dir().join(format!("trie_fill_{}_{name}", std::process::id())),
        };
        if !reuse {
            let _ = std::fs::remove_dir_all(&dir);
        }
        let mut opts = Options::default();
        opts.direct_reads = std::env::var("TRIE_DIRECT").is_ok_and(|v| v == "1");
        opts.parallel_search = std::env::var("TRIE_PARALLEL").is_ok_and(|v| v == "1");
        if let Some(t) = env("TRIE_THREADS") {
            opts.background_threads = t;
        }
        let db = Db::open(&dir, opts)?;
        let mut ko = KeyspaceOptions::new(layout);
        ko.write_buffer_bytes = buf_mib << 20;
        if let Some(p) = env::<usize>("TRIE_PILE") {
            ko.trie.pile_size = p;
            ko.trie.slowdown_sublevels = ko.trie.slowdown_sublevels.max(p * 2);
            ko.trie.stop_sublevels = ko.trie.stop_sublevels.max(p * 3);
        }
        if let Some(d) = env("TRIE_DEPTH") {
            ko.trie.last_level_depth = d;
        }
        if let Some(g) = env("TRIE_GC") {
            ko.trie.gc_garbage_ratio = g;
        }
        if let Some(f) = env("TRIE_FILL") {
            ko.trie.target_fill = f;
        }
        if let Some(c) = env("TRIE_CLUSTER_CACHE") {
            ko.trie.cluster_cache_bytes = c;
        }
        let trie = ko.trie.clone();
        let ks = db.keyspace("bench", ko)?;
        let t = Instant::now();
        let (c0, p0) = (thread_cpu(), process_cpu());
        let mut v = [0u8; 100];
        for i in 0..if reuse { 0 } else { num } {
            value(i, &mut v);
            ks.put(key(i), v)?;
        }
        let fill = t.elapsed().as_secs_f64();
        let c1 = thread_cpu();
        db.wait_for_compactions()?;
        let total = t.elapsed().as_secs_f64();
        let p1 = process_cpu();
        let s = db.stats();
        if num > 0 && !reuse {
            println!(
                "  fill CPU: writer thread {:.2} us/op, whole process {:.2} us/op",
                (c1 - c0) * 1e6 / num as f64,
                (p1 - p0) * 1e6 / num as f64
            );
        }
        println!(
            "{name}: fill {:.0} ops/s ({fill:.1}s, {total:.1}s with compactions), WA {:.3} \
             (without WAL {:.3}), wal {} MB, flush {} MB, compaction {} MB, metadata {} MB, \
             gc {} MB, stall {:.1}s slowdown {:.1}s, compactions {}, flushes {}",
            num as f64 / fill,
            s.write_amplification,
            s.write_amplification_without_wal,
            s.bytes_written.wal >> 20,
            s.bytes_written.flush >> 20,
            s.bytes_written.compaction >> 20,
            s.bytes_written.metadata >> 20,
            s.bytes_written.gc >> 20,
            s.stall_seconds,
            s.slowdown_seconds,
            s.compactions,
            s.flushes,
        );
        if layout == Layout::Trie {
            println!(
                "  trie: pile_size {}, last_level_depth {}, target_fill {}, bloom {} bits/key",
                trie.pile_size, trie.last_level_depth, trie.target_fill, trie.bloom_bits_per_key
            );
        }
        let mut items_written = 0u64;
        for k in &s.keyspaces {
            for l in &k.levels {
                println!(
                    "  L{}: {} tables, {} MB {}",
                    l.level,
                    l.tables,
                    l.bytes >> 20,
                    l.detail
                );
                items_written += l.bytes;
            }
        }
        if s.user_bytes > 0 {
            println!(
                "  bytes stored / user bytes {:.3}",
                items_written as f64 / s.user_bytes as f64
            );
        }
        let t = Instant::now();
        let c0 = thread_cpu();
        let mut found = 0u64;
        for j in 0..reads {
            let i = mix(j ^ 0xABCD) % num;
            if ks.get(key(i))?.is_some() {
                found += 1;
            }
        }
        let rs = t.elapsed().as_secs_f64();
        let rc = thread_cpu() - c0;
        let s2 = db.stats();
        println!(
            "  readrandom {:.0} ops/s ({:.2} us CPU/op; {found} of {reads} found), {}",
            reads as f64 / rs,
            rc * 1e6 / reads.max(1) as f64,
            per_get(&s, &s2, reads)
        );
        let t = Instant::now();
        let c0 = thread_cpu();
        let mut found = 0u64;
        for j in 0..reads {
            let mut k = key(mix(j ^ 0x77) % num);
            // A key of the same length that was never written.
            k[0] = b'z';
            if ks.get(k)?.is_some() {
                found += 1;
            }
        }
        let ms = t.elapsed().as_secs_f64();
        let mc = thread_cpu() - c0;
        let s3 = db.stats();
        println!(
            "  readmissing {:.0} ops/s ({:.2} us CPU/op; {found} of {reads} found), {}",
            reads as f64 / ms,
            mc * 1e6 / reads.max(1) as f64,
            per_get(&s2, &s3, reads)
        );
        drop(ks);
        drop(db);
        if std::env::var("TRIE_DIR").is_err() {
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
    Ok(())
}
