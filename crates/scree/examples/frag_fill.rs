//! Measures the `fragmented` layout against others until `scree bench` lands: fills N unique
//! random 16-byte keys with 100-byte values, waits for compactions, prints write amplification
//! (with and without the WAL) and ops/s, then times random reads and seeks (+10 nexts).
//!
//! `cargo run --release --example frag_fill -- [layouts] [num] [buffer_mib] [reads] [seeks]`
//! e.g. `cargo run --release --example frag_fill -- leveled,fragmented 5000000 64`.
//! Environment: `FRAG_DIR` (default a temp dir), `FRAG_PARALLEL_SEEKS=1`,
//! `FRAG_MAX_TABLES=N` (max_sstables_per_guard), `FRAG_L0_TRIGGER=N`, `FRAG_SEEK_THRESHOLD=N`,
//! `FRAG_EXPECTED_KEYS=N`, `FRAG_REUSE=1` (with `FRAG_DIR`: read an existing database),
//! `FRAG_DIRECT=1` (O_DIRECT table reads: cold reads).

use std::time::Instant;

use scree::{Db, KeyspaceOptions, Layout, Options};

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

/// CPU seconds (user + system) used by this process so far.
fn cpu_seconds() -> f64 {
    let Ok(s) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    let fields: Vec<&str> = s
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let t = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (t(11) + t(12)) / 100.0
}

fn main() -> scree::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let layouts = args.get(1).map_or("leveled,fragmented", |s| s.as_str());
    let num: u64 = args
        .get(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let buf_mib: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(64);
    let reads: u64 = args.get(4).and_then(|s| s.parse().ok()).unwrap_or(200_000);
    let seeks: u64 = args.get(5).and_then(|s| s.parse().ok()).unwrap_or(100_000);
    // FRAG_REUSE=1 with FRAG_DIR: skip the fill and read an existing database (kept).
    let reuse = std::env::var("FRAG_REUSE").is_ok_and(|v| v == "1");
    for name in layouts.split(',') {
        let layout: Layout = name.parse()?;
        let tmp;
        let dir = match std::env::var("FRAG_DIR") {
            Ok(d) => {
                let p = std::path::PathBuf::from(d).join(name);
                if !reuse {
                    let _ = std::fs::remove_dir_all(&p);
                }
                p
            }
            Err(_) => {
                tmp = std::env::temp_dir().join(format!("frag_fill_{}_{name}", std::process::id()));
                let _ = std::fs::remove_dir_all(&tmp);
                tmp.clone()
            }
        };
        let mut dbo = Options::default();
        dbo.direct_reads = std::env::var("FRAG_DIRECT").is_ok_and(|v| v == "1");
        let db = Db::open(&dir, dbo)?;
        let mut ko = KeyspaceOptions::new(layout);
        ko.write_buffer_bytes = buf_mib << 20;
        if let Ok(v) = std::env::var("FRAG_PARALLEL_SEEKS") {
            ko.fragmented.parallel_seeks = v == "1";
        }
        if let Some(v) = std::env::var("FRAG_MAX_TABLES")
            .ok()
            .and_then(|s| s.parse().ok())
        {
            ko.fragmented.max_sstables_per_guard = v;
        }
        if let Some(v) = std::env::var("FRAG_L0_TRIGGER")
            .ok()
            .and_then(|s| s.parse().ok())
        {
            ko.fragmented.l0_compaction_trigger = v;
            ko.fragmented.l0_slowdown_trigger = ko.fragmented.l0_slowdown_trigger.max(2 * v);
            ko.fragmented.l0_stop_trigger = ko.fragmented.l0_stop_trigger.max(3 * v);
        }
        if let Some(v) = std::env::var("FRAG_SEEK_THRESHOLD")
            .ok()
            .and_then(|s| s.parse().ok())
        {
            ko.fragmented.seek_compaction_threshold = v;
        }
        if let Some(v) = std::env::var("FRAG_EXPECTED_KEYS")
            .ok()
            .and_then(|s| s.parse().ok())
        {
            ko.fragmented.expected_keys = v;
        }
        let ks = db.keyspace("bench", ko)?;
        let cpu0 = cpu_seconds();
        let t = Instant::now();
        let mut v = [0u8; 100];
        for i in 0..if reuse { 0 } else { num } {
            value(i, &mut v);
            ks.put(key(i), v)?;
        }
        let fill = t.elapsed().as_secs_f64();
        db.wait_for_compactions()?;
        let total = t.elapsed().as_secs_f64();
        let cpu = cpu_seconds() - cpu0;
        let s = db.stats();
        println!(
            "{name}: fill {:.0} ops/s ({fill:.1}s, {total:.1}s with compactions, {cpu:.1} CPU-s), WA {:.2} (without WAL {:.2}), flush {} MB, compaction {} MB, stall {:.1}s slowdown {:.1}s, compactions {}",
            num as f64 / fill,
            s.write_amplification,
            s.write_amplification_without_wal,
            s.bytes_written.flush >> 20,
            s.bytes_written.compaction >> 20,
            s.stall_seconds,
            s.slowdown_seconds,
            s.compactions,
        );
        for k in &s.keyspaces {
            for l in &k.levels {
                println!(
                    "  L{}: {} tables, {} MB {}",
                    l.level,
                    l.tables,
                    l.bytes >> 20,
                    l.detail
                );
            }
        }
        let cpu0 = cpu_seconds();
        let t = Instant::now();
        let mut found = 0u64;
        for j in 0..reads {
            let i = mix(j ^ 0xABCD) % num;
            if ks.get(key(i))?.is_some() {
                found += 1;
            }
        }
        let rs = t.elapsed().as_secs_f64();
        let rcpu = cpu_seconds() - cpu0;
        let s2 = db.stats();
        println!(
            "  readrandom {:.0} ops/s, {:.0} ops/CPU-s ({found} of {reads} found), data blocks/get {:.2}",
            reads as f64 / rs,
            reads as f64 / rcpu.max(1e-9),
            (s2.data_block_reads - s.data_block_reads) as f64 / reads.max(1) as f64
        );
        let cpu0 = cpu_seconds();
        let t = Instant::now();
        let mut n = 0u64;
        for j in 0..seeks {
            let i = mix(j ^ 0x1234) % num;
            let mut it = ks.range(key(i).to_vec()..);
            for _ in 0..11 {
                match it.next() {
                    Some(r) => {
                        r?;
                        n += 1;
                    }
                    None => break,
                }
            }
        }
        let ss = t.elapsed().as_secs_f64();
        let scpu = cpu_seconds() - cpu0;
        let s3 = db.stats();
        println!(
            "  seekrandom {:.0} ops/s, {:.0} ops/CPU-s ({n} entries), data blocks/seek {:.2}, written during seeks {} MB",
            seeks as f64 / ss,
            seeks as f64 / scpu.max(1e-9),
            (s3.data_block_reads - s2.data_block_reads) as f64 / seeks.max(1) as f64,
            (s3.bytes_written.total() - s2.bytes_written.total()) >> 20
        );
        drop(ks);
        drop(db);
        if std::env::var("FRAG_DIR").is_err() {
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
    Ok(())
}
