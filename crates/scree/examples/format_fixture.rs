//! Writes a database of known contents for cross-checking the on-disk format documents
//! (docs/format.md, docs/format-htable.md) with `scripts/decode_format.py`.
//!
//! `cargo run --release --example format_fixture -- OUT LAYOUTS [OPS] [SEED] [MODE]`
//!
//! Creates `OUT/db` (removed first) with two keyspaces per layout of `LAYOUTS`
//! (comma-separated, e.g. `leveled,fragmented,trie`): `<layout>_a` (small values, tiny write
//! buffers, so every level and file kind exists) and `<layout>_b` (larger values, some past an
//! HTable bucket), plus 64 empty keyspaces before a last one, `hi_<first layout>`, whose id is
//! at least 64 (two-byte WAL tags), without Bloom filters in sorted tables and with 4 bits per
//! key in HTables. It writes OPS (default 20000) random puts, overwrites and deletes, single
//! and in batches across keyspaces, with empty keys and values and keys of 1..300 bytes,
//! flushing now and then while a snapshot is held (so tables keep several versions of a key),
//! waits for compactions, then writes a few hundred more operations that stay in the WAL, one
//! of them synced (the later ones are WAL records of type 3).
//!
//! MODE: `crash` (the default) ends the process without closing the database (the WAL keeps
//! data, a memory-mapped WAL keeps its zero tail); `close` drops it cleanly; `reopen` writes
//! nothing: it recovers the database an earlier run left at `OUT/db` and closes it; `dump`
//! recovers it and writes what the engine reads to `OUT/engine.tsv` (sorted keyspaces by a
//! scan, trie keyspaces by a lookup of every key of `OUT/expected.tsv`).
//! `FIXTURE_TRIE_DEPTH` sets the trie's last-level depth (default 2; 1 gives BloomClusters of
//! several blocks).
//!
//! Writes `OUT/expected.tsv`: one line per live key, `keyspace TAB hex(key) TAB hex(value)`,
//! sorted, the format of `decode_format.py --dump-keys`; and `OUT/hashes.tsv`: XXH3-64 and
//! SipHash-1-3-128 of a few inputs, to test a second implementation of the hashes.

#![allow(clippy::field_reassign_with_default)]

use std::collections::BTreeMap;
use std::io::Write;

use scree::{Db, Keyspace, KeyspaceOptions, Layout, Options, WriteBatch, WriteOptions};

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut x = self.0;
        x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        x ^ (x >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .filter_map(|i| u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok())
        .collect()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Key `i` of a keyspace: mostly 16 bytes; a few empty, short, binary or long (up to 300
/// bytes, so every XXH3 length class is hashed).
fn key(i: u64) -> Vec<u8> {
    match i % 97 {
        0 if i == 0 => Vec::new(),
        1 => vec![0u8; 1 + (i as usize % 3)],
        2 => vec![0xffu8; 5 + (i as usize % 4)],
        3 => format!("long{i:06}")
            .repeat(1 + (i as usize % 30))
            .into_bytes(),
        _ => format!("k{:015x}", i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 4).into_bytes(),
    }
}

fn value(rng: &mut Rng, big: bool) -> Vec<u8> {
    let n = match rng.below(100) {
        0..=2 => 0,
        3..=5 if big => 5000 + rng.below(20000) as usize,
        6 if big => 70_000,
        _ => 1 + rng.below(if big { 900 } else { 120 }) as usize,
    };
    rng.bytes(n)
}

fn ks_opts(layout: Layout, big: bool) -> KeyspaceOptions {
    let mut o = KeyspaceOptions::new(layout);
    o.write_buffer_bytes = if big { 256 * 1024 } else { 64 * 1024 };
    o.block_size = 512;
    o.leveled.level_base_bytes = 16 * 1024;
    o.leveled.target_table_bytes = 8 * 1024;
    o.leveled.level_size_ratio = 4;
    let f = &mut o.fragmented;
    f.max_levels = 4;
    f.l0_compaction_trigger = 2;
    f.l0_slowdown_trigger = 4;
    f.l0_stop_trigger = 8;
    f.max_sstables_per_guard = 2;
    f.top_level_bits = 6;
    f.bit_decrement = 1;
    f.level_base_bytes = 64 * 1024;
    f.level_size_ratio = 4;
    f.seek_compaction_threshold = 4;
    let l = &mut o.lightweight;
    l.max_levels = 4;
    l.l0_compaction_trigger = 2;
    l.level_base_bytes = 32 * 1024;
    l.level_size_ratio = 4;
    l.dtable_max_bytes = 48 * 1024;
    l.division_count = 4;
    let t = &mut o.trie;
    t.pile_size = 2;
    t.last_level_depth = std::env::var("FIXTURE_TRIE_DEPTH")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    t.slowdown_sublevels = 4;
    t.stop_sublevels = 8;
    o
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    run(&args)
}

/// The whole example, `args` as on its command line (`args[0]` is ignored). Also run by
/// `tests/format_crosscheck.rs`, in a child process (mode `crash` ends the process).
pub fn run(args: &[String]) -> Result<(), Box<dyn std::error::Error>> {
    let out = std::path::PathBuf::from(args.get(1).expect("OUT directory"));
    let layouts: Vec<Layout> = args
        .get(2)
        .map_or("leveled", |s| s.as_str())
        .split(',')
        .map(|s| s.parse())
        .collect::<scree::Result<_>>()?;
    let ops: u64 = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(20_000);
    let seed: u64 = args.get(4).and_then(|s| s.parse().ok()).unwrap_or(1);
    let mode = args.get(5).map_or("crash", |s| s.as_str());
    let crash = mode == "crash";
    std::fs::create_dir_all(&out)?;
    let dir = out.join("db");
    if mode == "reopen" {
        // Recover the database left by an earlier run and close it cleanly: nothing written.
        let db = Db::open(&dir, Options::default())?;
        for l in &layouts {
            for (suffix, big) in [("a", false), ("b", true)] {
                db.keyspace(&format!("{l}_{suffix}"), ks_opts(*l, big))?;
            }
        }
        db.wait_for_compactions()?;
        println!("{}: reopened and closed", dir.display());
        return Ok(());
    }
    if mode == "dump" {
        // Read the database back through the engine into `OUT/engine.tsv` (the format of
        // `expected.tsv`): sorted keyspaces by a full scan, trie keyspaces by a lookup of every
        // key of `expected.tsv` (so a key missing from it is not seen).
        let db = Db::open(&dir, Options::default())?;
        let expected = std::fs::read_to_string(out.join("expected.tsv")).unwrap_or_default();
        let mut names: Vec<(String, Layout)> = Vec::new();
        for l in &layouts {
            for suffix in ["a", "b"] {
                names.push((format!("{l}_{suffix}"), *l));
            }
        }
        names.push((format!("hi_{}", layouts[0]), layouts[0]));
        let mut lines = Vec::new();
        for (name, l) in &names {
            let ks = db.keyspace(name, ks_opts(*l, false))?;
            if !l.order().serves_range() {
                for line in expected
                    .lines()
                    .filter(|x| x.starts_with(&format!("{name}\t")))
                {
                    let k = unhex(line.split('\t').nth(1).unwrap_or(""));
                    if let Some(v) = ks.get(&k)? {
                        lines.push(format!("{name}\t{}\t{}", hex(&k), hex(&v)));
                    }
                }
            } else {
                for item in ks.range::<&[u8], _>(..) {
                    let (k, v) = item?;
                    lines.push(format!("{name}\t{}\t{}", hex(&k), hex(&v)));
                }
            }
        }
        lines.sort();
        let body: String = lines.iter().map(|l| format!("{l}\n")).collect();
        std::fs::write(out.join("engine.tsv"), body)?;
        println!("{}: {} live keys read", dir.display(), lines.len());
        return Ok(());
    }
    let _ = std::fs::remove_dir_all(&dir);

    write_hashes(&out)?;

    let mut dbo = Options::default();
    dbo.background_threads = 2;
    dbo.block_cache_bytes = 256 * 1024;
    let db = Db::open(&dir, dbo)?;
    let mut kss: Vec<(String, Keyspace, bool)> = Vec::new();
    for l in &layouts {
        for (suffix, big) in [("a", false), ("b", true)] {
            let name = format!("{l}_{suffix}");
            let ks = db.keyspace(&name, ks_opts(*l, big))?;
            kss.push((name, ks, big));
        }
    }
    for i in 0..64 {
        db.keyspace(&format!("pad{i:02}"), KeyspaceOptions::new(Layout::Leveled))?;
    }
    let hi = format!("hi_{}", layouts[0]);
    let mut hio = ks_opts(layouts[0], false);
    hio.bloom_bits_per_key = 0; // sorted tables without a filter
    hio.trie.bloom_bits_per_key = 4;
    kss.push((hi.clone(), db.keyspace(&hi, hio)?, false));

    let mut model: Vec<BTreeMap<Vec<u8>, Vec<u8>>> = vec![BTreeMap::new(); kss.len()];
    let mut rng = Rng(seed);
    let key_range = (ops / 3).max(10);
    let mut snap = None;
    let step = |rng: &mut Rng, model: &mut Vec<BTreeMap<Vec<u8>, Vec<u8>>>, sync: bool| {
        let n = if rng.below(10) == 0 {
            1 + rng.below(8)
        } else {
            1
        };
        let mut b = WriteBatch::new();
        for _ in 0..n {
            let j = rng.below(kss.len() as u64) as usize;
            let (_, ks, big) = &kss[j];
            let mut k = key(rng.below(key_range));
            // A layout of prefix groups refuses keys shorter than the prefix: pad them.
            if let scree::Order::PrefixGroups(n) = ks.layout().order() {
                if k.len() < n {
                    k.resize(n, b'_');
                }
            }
            if rng.below(5) == 0 {
                b.delete(ks, &k);
                model[j].remove(&k);
            } else {
                let v = value(rng, *big);
                b.put(ks, &k, &v);
                model[j].insert(k, v);
            }
        }
        db.write(b, &WriteOptions { sync })
    };
    for i in 0..ops {
        step(&mut rng, &mut model, false)?;
        if i % 3000 == 1000 {
            snap = Some(db.snapshot());
        }
        if i % 3000 == 2000 {
            db.flush()?;
            snap = None;
        }
    }
    drop(snap);
    db.wait_for_compactions()?;
    // A tail that stays in the WAL (too small to fill a write buffer); the writes after the
    // synced one are appended after a completed sync (WAL records of type 3).
    for i in 0..300 {
        step(&mut rng, &mut model, i == 100)?;
    }

    let mut f = std::io::BufWriter::new(std::fs::File::create(out.join("expected.tsv"))?);
    let mut lines = Vec::new();
    for (j, (name, _, _)) in kss.iter().enumerate() {
        for (k, v) in &model[j] {
            lines.push(format!("{name}\t{}\t{}", hex(k), hex(v)));
        }
    }
    lines.sort();
    for l in &lines {
        writeln!(f, "{l}")?;
    }
    f.flush()?;
    println!(
        "{}: {} live keys in {} keyspaces",
        dir.display(),
        lines.len(),
        kss.len()
    );
    if crash {
        // Leave the database as a crash would (no close, no flush of the memtables).
        std::process::exit(0);
    }
    drop(kss);
    drop(db);
    Ok(())
}

/// Hashes of test inputs, for checking a second implementation of XXH3-64 and SipHash-1-3-128.
fn write_hashes(out: &std::path::Path) -> std::io::Result<()> {
    use std::hash::Hasher;
    let mut f = std::fs::File::create(out.join("hashes.tsv"))?;
    let key: [u8; 16] = *b"0123456789abcdef";
    for n in [
        0usize, 1, 2, 3, 4, 7, 8, 9, 16, 17, 32, 33, 64, 65, 96, 97, 128, 129, 200, 240, 241, 300,
        1024, 1025, 5000,
    ] {
        let input: Vec<u8> = (0..n).map(|i| (i * 7 + 3) as u8).collect();
        let x = xxhash_rust::xxh3::xxh3_64(&input);
        let mut h = siphasher::sip128::SipHasher13::new_with_key(&key);
        h.write(&input);
        use siphasher::sip128::Hasher128;
        let s = u128::from_le_bytes(h.finish128().as_bytes());
        writeln!(f, "{n}\t{x:016x}\t{s:032x}")?;
    }
    Ok(())
}
