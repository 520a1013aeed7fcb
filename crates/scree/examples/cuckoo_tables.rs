//! SlimDB's filter micro-benchmark (§5.3, Tables 5–6, Figure 10) redone on Scree's cuckoo
//! filters, in memory and single-threaded: an 8-sub-level store of `N` random 16-byte keys per
//! sub-level, filtered either by one plain cuckoo filter per sub-level (16-bit fingerprints,
//! "CF") or by one multi-level cuckoo filter (14-bit fingerprints, 4-bit ids, "MLCF"). At
//! duplication ratio `d`, each of the 7 newer sub-levels holds the first `d·N` keys of the
//! oldest one and `(1−d)·N` keys of its own. Keys are generated, sorted per sub-level, and
//! inserted oldest sub-level first; the MLCF inserts are non-blind (a duplicate is
//! `Prior::Present`), as in the paper. Memory is measured from the filters' allocations.
//!
//! Then: the same store written blind (every insert `Prior::Unknown`) at d = 50 %; the
//! multi-level filter with 13-bit fingerprints (17-bit slots, the paper's width) beside the
//! default 14; and the cost of opening a level's filter by decoding its persisted bytes versus
//! rebuilding it from the level's keys.
//!
//! `cargo run --release --example cuckoo_tables -- [N] [DIR]` (N = 1,000,000 by default; the
//! paper's is 10,000,000). Insert rates are the median of `CUCKOO_TABLES_REPS` builds (3). DIR (default: the system temporary directory) receives the
//! persisted filter and a file of the level's keys and 100-byte values, read back with
//! O_DIRECT to time a rebuild's scan; `CUCKOO_TABLES_NO_IO=1` skips those files.
//!
//! `cargo run --release --example cuckoo_tables -- grown [N]` measures a level filter as the
//! `semisorted` layout grows it, one sub-level of N keys at a time, against one sized for the
//! full level when its first sub-level arrives.
//!
//! `cargo run --release --example cuckoo_tables -- open [N] [DIR]` measures only the opening
//! costs; `-- fixture DIR` instead writes the fixture the format document's second decoder
//! (`scripts/decode_mlcf.py`) is checked on.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use scree::filter::cuckoo::{
    key_hash, Answer, CuckooFilter, CuckooParams, KeyHashing, MultiLevelCuckoo, Prior,
};

const SUB_LEVELS: usize = 8;
const HASH_KEY: [u8; 16] = *b"cuckoo-tables-16";
const PROBES: usize = 1_000_000;

/// A bijection on u64 (splitmix64's finalizer).
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// Key number `i`: 16 random-looking bytes, distinct for distinct `i`.
fn key(i: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&mix(i).to_le_bytes());
    k[8..].copy_from_slice(&mix(i ^ 0x5555_5555_5555_5555).to_le_bytes());
    k
}

/// The store: sub-levels oldest first, each a sorted list of keys marked with whether an older
/// sub-level holds them too.
struct Store {
    levels: Vec<Vec<([u8; 16], bool)>>,
    /// Distinct keys with the sub-level of their newest version.
    distinct: Vec<([u8; 16], u8)>,
}

fn store(n: u64, dup: f64) -> Store {
    let shared = (n as f64 * dup).round() as u64;
    let mut levels = Vec::with_capacity(SUB_LEVELS);
    let mut next_fresh = n;
    for s in 0..SUB_LEVELS {
        let ids: Vec<u64> = if s == 0 {
            (0..n).collect()
        } else {
            let fresh = next_fresh..next_fresh + (n - shared);
            next_fresh += n - shared;
            (0..shared).chain(fresh).collect()
        };
        let mut keys: Vec<([u8; 16], bool)> = ids
            .into_iter()
            .map(|i| (key(i), s > 0 && i < shared))
            .collect();
        keys.sort_unstable();
        levels.push(keys);
    }
    let newest_shared = (SUB_LEVELS - 1) as u8;
    let mut distinct: Vec<([u8; 16], u8)> = (0..n)
        .map(|i| (key(i), if i < shared { newest_shared } else { 0 }))
        .collect();
    let mut fresh = n;
    for s in 1..SUB_LEVELS {
        for _ in 0..n - shared {
            distinct.push((key(fresh), s as u8));
            fresh += 1;
        }
    }
    Store { levels, distinct }
}

fn cf_params(n: u64) -> CuckooParams {
    CuckooParams {
        fingerprint_bits: 16,
        ..CuckooParams::for_level(n as usize, SUB_LEVELS as u32)
    }
}

fn mlcf_params(n: u64) -> CuckooParams {
    CuckooParams::for_level(n as usize * SUB_LEVELS, SUB_LEVELS as u32)
}

/// Negative probe `i`: a key no sub-level holds.
fn negative(i: usize) -> [u8; 16] {
    key(u64::MAX / 2 + i as u64)
}

struct Run {
    cf_bits: f64,
    mlcf_bits: f64,
    mlcf_bits_distinct: f64,
    cf_fpr_any: f64,
    cf_false_probes: f64,
    mlcf_fpr: f64,
    cf_insert_mops: f64,
    mlcf_insert_mops: f64,
    cf_pos_mops: f64,
    mlcf_pos_mops: f64,
    cf_neg_mops: f64,
    mlcf_neg_mops: f64,
    secondary: usize,
    ambiguous: usize,
    probe_all: usize,
    growths: u32,
    distinct: usize,
}

fn mops(ops: usize, secs: f64) -> f64 {
    ops as f64 / secs / 1e6
}

/// The newest sub-level whose filter may hold `k` (one hash for all filters).
fn cf_lookup(cfs: &[CuckooFilter], k: &[u8]) -> Option<usize> {
    let h = key_hash(&HASH_KEY, k);
    cfs.iter().rposition(|f| f.contains_hashed(h))
}

/// Runs `build` `reps` times; returns the last result and the median time in seconds.
fn timed<T>(reps: usize, mut build: impl FnMut() -> T) -> (T, f64) {
    let mut times = Vec::with_capacity(reps);
    let mut last = None;
    for _ in 0..reps.max(1) {
        let t = Instant::now();
        last = Some(build());
        times.push(t.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    (last.expect("one run"), times[times.len() / 2])
}

fn reps() -> usize {
    std::env::var("CUCKOO_TABLES_REPS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3)
}

fn build_cfs(n: u64, st: &Store) -> Vec<CuckooFilter> {
    let mut cfs = Vec::with_capacity(SUB_LEVELS);
    for keys in &st.levels {
        let mut f = CuckooFilter::new(HASH_KEY, &cf_params(n)).expect("params");
        for (k, _) in keys {
            f.insert_hashed(key_hash(&HASH_KEY, k));
        }
        cfs.push(f);
    }
    cfs
}

fn build_mlcf(params: &CuckooParams, st: &Store, blind: bool) -> MultiLevelCuckoo {
    let mut ml = MultiLevelCuckoo::new(HASH_KEY, params.clone()).expect("params");
    insert_levels(&mut ml, st, blind);
    ml
}

fn run(n: u64, st: &Store) -> Run {
    let inserts = n as usize * SUB_LEVELS;
    // Plain cuckoo filters, one per sub-level; the multi-level filter, non-blind.
    let (cfs, cf_insert) = timed(reps(), || build_cfs(n, st));
    let (ml, ml_insert) = timed(reps(), || build_mlcf(&mlcf_params(n), st, false));

    // Positive lookups of random present keys; every answer checked.
    let picks: Vec<usize> = (0..PROBES)
        .map(|i| (mix(i as u64 ^ 0xABCD) % st.distinct.len() as u64) as usize)
        .collect();
    let t = Instant::now();
    let mut found = 0usize;
    for &p in &picks {
        let (k, _) = st.distinct[p];
        found += cf_lookup(&cfs, &k).map_or(0, |s| s + 1);
    }
    let cf_pos = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let mut answers = 0usize;
    for &p in &picks {
        let (k, _) = st.distinct[p];
        answers += match ml.lookup(&k) {
            Answer::SubLevel(s) => usize::from(s) + 1,
            _ => 0,
        };
    }
    let ml_pos = t.elapsed().as_secs_f64();
    std::hint::black_box((found, answers));
    let mut probe_all = 0;
    for (k, newest) in &st.distinct {
        match ml.lookup(k) {
            Answer::SubLevel(s) if s == *newest => {}
            Answer::ProbeAll => probe_all += 1,
            other => panic!("false negative: {other:?} for a key newest in {newest}"),
        }
        assert!(
            cf_lookup(&cfs, k) >= Some(usize::from(*newest)),
            "false negative"
        );
    }

    // Negative lookups.
    let t = Instant::now();
    let (mut any, mut probes) = (0usize, 0usize);
    for i in 0..PROBES {
        let h = key_hash(&HASH_KEY, &negative(i));
        let hits = cfs.iter().filter(|f| f.contains_hashed(h)).count();
        probes += hits;
        any += usize::from(hits > 0);
    }
    let cf_neg = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let mut ml_fp = 0usize;
    for i in 0..PROBES {
        ml_fp += usize::from(ml.lookup(&negative(i)) != Answer::Absent);
    }
    let ml_neg = t.elapsed().as_secs_f64();

    let cf_bytes: usize = cfs.iter().map(CuckooFilter::heap_bytes).sum();
    let s = ml.stats();
    Run {
        cf_bits: (cf_bytes * 8) as f64 / inserts as f64,
        mlcf_bits: ml.bits_per_key(inserts),
        mlcf_bits_distinct: ml.bits_per_key(st.distinct.len()),
        cf_fpr_any: any as f64 / PROBES as f64,
        cf_false_probes: probes as f64 / PROBES as f64,
        mlcf_fpr: ml_fp as f64 / PROBES as f64,
        cf_insert_mops: mops(inserts, cf_insert),
        mlcf_insert_mops: mops(inserts, ml_insert),
        cf_pos_mops: mops(PROBES, cf_pos),
        mlcf_pos_mops: mops(PROBES, ml_pos),
        cf_neg_mops: mops(PROBES, cf_neg),
        mlcf_neg_mops: mops(PROBES, ml_neg),
        secondary: s.secondary_entries,
        ambiguous: s.ambiguous_entries,
        probe_all,
        growths: s.growths,
        distinct: st.distinct.len(),
    }
}

/// Inserts the sub-levels oldest first: a shared key of a newer sub-level is present, newest
/// in the previous sub-level; the others are new.
fn insert_levels(ml: &mut MultiLevelCuckoo, st: &Store, blind: bool) {
    for (s, keys) in st.levels.iter().enumerate() {
        for &(ref k, shared) in keys {
            let prior = if blind {
                Prior::Unknown
            } else if shared {
                Prior::Present(s as u8 - 1)
            } else {
                Prior::Absent
            };
            ml.insert(k, s as u8, prior).expect("sub-level in range");
        }
    }
}

fn blind_run(n: u64) {
    let st = store(n, 0.5);
    let inserts = n as usize * SUB_LEVELS;
    let (ml, secs) = timed(reps(), || build_mlcf(&mlcf_params(n), &st, true));
    let mut probe_all = 0;
    for (k, newest) in &st.distinct {
        match ml.lookup(k) {
            Answer::SubLevel(s) if s == *newest => {}
            Answer::ProbeAll => probe_all += 1,
            other => panic!("false negative: {other:?} for a key newest in {newest}"),
        }
    }
    let fp = (0..PROBES)
        .filter(|&i| ml.lookup(&negative(i)) != Answer::Absent)
        .count();
    let s = ml.stats();
    println!(
        "| blind, d = 50 % | {:.2} / {:.2} | {:.5} | {:.2} | {} ({} B of {} B budget) | {} | {:.1} % |",
        ml.bits_per_key(inserts),
        ml.bits_per_key(st.distinct.len()),
        fp as f64 / PROBES as f64,
        mops(inserts, secs),
        s.secondary_entries,
        s.secondary_bytes,
        ml.params().secondary_budget_bytes,
        s.ambiguous_entries,
        100.0 * probe_all as f64 / st.distinct.len() as f64,
    );
}

/// The multi-level filter at d = 0 with `f`-bit fingerprints: bits per key, false-positive
/// rate, inserts per second.
fn width_row(n: u64, f: u32) {
    let st = store(n, 0.0);
    let inserts = n as usize * SUB_LEVELS;
    let params = CuckooParams {
        fingerprint_bits: f,
        ..mlcf_params(n)
    };
    let (ml, secs) = timed(reps(), || build_mlcf(&params, &st, false));
    for (k, newest) in &st.distinct {
        assert_eq!(ml.lookup(k), Answer::SubLevel(*newest));
    }
    let fp = (0..PROBES)
        .filter(|&i| ml.lookup(&negative(i)) != Answer::Absent)
        .count();
    println!(
        "| {f} + {} = {} bits | {:.2} | {:.5} | {:.2} | {} |",
        params.id_bits,
        f + params.id_bits,
        ml.bits_per_key(inserts),
        fp as f64 / PROBES as f64,
        mops(inserts, secs),
        ml.stats().secondary_entries,
    );
}

/// A buffer whose slice at `start..start + len` is 4 KiB-aligned, for O_DIRECT reads.
struct Aligned {
    buf: Vec<u8>,
    start: usize,
}

impl Aligned {
    fn new(len: usize) -> Aligned {
        let buf = vec![0u8; len + 4096];
        let start = buf.as_ptr().align_offset(4096);
        Aligned { buf, start }
    }
    fn slice(&mut self, len: usize) -> &mut [u8] {
        &mut self.buf[self.start..self.start + len]
    }
}

/// Reads a file with O_DIRECT (past the page cache) in 1 MiB requests; returns bytes read.
fn read_direct(path: &Path) -> std::io::Result<usize> {
    let mut f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)?;
    let mut buf = Aligned::new(1 << 20);
    let mut total = 0;
    loop {
        let got = f.read(buf.slice(1 << 20))?;
        if got == 0 {
            return Ok(total);
        }
        total += got;
    }
}

fn write_synced(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut f = File::create(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

fn open_costs(n: u64, dir: &Path) -> std::io::Result<()> {
    let st = store(n, 0.0);
    let params = mlcf_params(n);
    let mut ml = MultiLevelCuckoo::new(HASH_KEY, params.clone()).expect("params");
    insert_levels(&mut ml, &st, false);
    let keys = st.distinct.len();

    let t = Instant::now();
    let bytes = ml.encode();
    let encode = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let back = MultiLevelCuckoo::decode(Path::new("mem"), 0, HASH_KEY, &bytes).expect("decodes");
    let decode = t.elapsed().as_secs_f64();
    assert_eq!(back.stats().primary_entries, ml.stats().primary_entries);
    let t = Instant::now();
    back.verify(Path::new("mem"), 0).expect("verifies");
    let verify = t.elapsed().as_secs_f64();
    drop(back);
    let t = Instant::now();
    let it = st.distinct.iter().map(|(k, s)| (k.as_slice(), *s));
    let rebuilt = MultiLevelCuckoo::build(HASH_KEY, params, it).expect("builds");
    let rebuild = t.elapsed().as_secs_f64();
    assert_eq!(rebuilt.stats().growths, 0);
    drop(rebuilt);

    println!();
    println!(
        "Open a level's filter, {keys} keys, {} filter bytes ({:.2} bits/key):",
        bytes.len(),
        (bytes.len() * 8) as f64 / keys as f64
    );
    println!();
    println!("| step | time | per key |");
    println!("|---|---|---|");
    let row = |what: &str, secs: f64| {
        println!(
            "| {what} | {:.1} ms | {:.1} ns |",
            secs * 1e3,
            secs * 1e9 / keys as f64
        );
    };
    row("encode (persist)", encode);
    row("decode with its checks (open, persisted)", decode);
    row("verify: one entry per class (offline checks only)", verify);
    row(
        "build from the level's distinct keys (open, rebuilt; CPU only)",
        rebuild,
    );

    if std::env::var_os("CUCKOO_TABLES_NO_IO").is_some() {
        return Ok(());
    }
    let filter_path = dir.join("cuckoo_tables.mlcf");
    let t = Instant::now();
    write_synced(&filter_path, &bytes)?;
    row(
        "write the filter file + fsync (persist)",
        t.elapsed().as_secs_f64(),
    );
    let mut padded = bytes.clone();
    padded.resize(bytes.len().next_multiple_of(4096), 0);
    write_synced(&filter_path, &padded)?;
    let t = Instant::now();
    let got = read_direct(&filter_path)?;
    row(
        "read the filter file, O_DIRECT (open, persisted)",
        t.elapsed().as_secs_f64(),
    );
    assert_eq!(got, padded.len());
    std::fs::remove_file(&filter_path)?;

    // The level's data as a rebuild would scan it: every key with a 100-byte value.
    let data_path: PathBuf = dir.join("cuckoo_tables.level");
    let record = 16 + 100;
    let mut data = Vec::with_capacity((keys * record).next_multiple_of(4096));
    for (k, _) in &st.distinct {
        data.extend_from_slice(k);
        data.extend_from_slice(&[0x5a; 100]);
    }
    data.resize(data.len().next_multiple_of(4096), 0);
    write_synced(&data_path, &data)?;
    let t = Instant::now();
    let got = read_direct(&data_path)?;
    let secs = t.elapsed().as_secs_f64();
    assert_eq!(got, data.len());
    row(
        &format!(
            "read the level's {} MB of keys and 100-byte values, O_DIRECT (open, rebuilt)",
            data.len() / 1_000_000
        ),
        secs,
    );
    std::fs::remove_file(&data_path)?;
    Ok(())
}

/// Writes the fixture `scripts/decode_mlcf.py` checks the format document against: in `dir/a` a
/// filter that grew, with secondary keys and ambiguous entries; in `dir/b` an overflowed one;
/// in `dir/c` the first's shape hashing keys as the `semisorted` layout does (split at 4 bytes:
/// encoding version 2). Each directory holds `filter.mlcf`, `hash_key.hex` and `answers.tsv` (hex key, then the
/// engine's answer) for the present keys and as many absent ones.
fn fixture(dir: &Path) -> std::io::Result<()> {
    let cases = [
        ("a", 8, 4, 500, 3_000, 4_000usize, KeyHashing::Whole),
        ("b", 4, 1, 64, 2_000, 2_000, KeyHashing::Whole),
        ("c", 8, 4, 500, 3_000, 4_000, KeyHashing::Split(4)),
    ];
    for (name, f, slots, capacity, keys, budget, hashing) in cases {
        let params = CuckooParams {
            fingerprint_bits: f,
            slots_per_bucket: slots,
            capacity,
            secondary_budget_bytes: budget,
            ..CuckooParams::for_level(capacity, SUB_LEVELS as u32)
        };
        let mut ml = MultiLevelCuckoo::with_hashing(HASH_KEY, hashing, params).expect("params");
        for i in 0..keys {
            ml.insert(&key(i), (i % 5) as u8, Prior::Absent)
                .expect("id");
        }
        for i in 0..keys / 3 {
            ml.insert(&key(i), 6, Prior::Unknown).expect("id");
        }
        let out = dir.join(name);
        std::fs::create_dir_all(&out)?;
        std::fs::write(out.join("filter.mlcf"), ml.encode())?;
        let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        std::fs::write(out.join("hash_key.hex"), hex(&HASH_KEY) + "\n")?;
        let mut answers = String::new();
        for i in (0..keys).chain(u64::MAX / 2..u64::MAX / 2 + keys) {
            let k = key(i);
            let a = match ml.lookup(&k) {
                Answer::Absent => "absent".to_string(),
                Answer::ProbeAll => "probe-all".to_string(),
                Answer::SubLevel(t) => t.to_string(),
            };
            answers.push_str(&format!("{}\t{a}\n", hex(&k)));
        }
        std::fs::write(out.join("answers.tsv"), answers)?;
        let s = ml.stats();
        println!(
            "{}: {} entries ({} ambiguous), {} secondary keys, {} growths, overflowed {}",
            out.display(),
            s.primary_entries,
            s.ambiguous_entries,
            s.secondary_entries,
            s.growths,
            s.overflowed
        );
    }
    Ok(())
}

/// A level filter as the `semisorted` layout grows it (`layout::semisorted::filter_params`
/// and `filter_with`: 13-bit tags at 7 segments, ids for 7 sub-levels, a segment per
/// sub-level added before each arrival, ids widened for the 8th) against the earlier sizing
/// (14-bit fingerprints, 5-bit ids for 26 sub-levels, sized for 8 sub-levels when the first
/// arrives), measured after each of 8 sub-levels of `n` distinct keys (d = 0, non-blind).
fn grown(n: u64) {
    let st = store(n, 0.0);
    let mut grown = MultiLevelCuckoo::new(
        HASH_KEY,
        CuckooParams {
            fingerprint_bits: 13,
            reserve_segments: SUB_LEVELS as u32 - 1,
            segments: 1,
            ..CuckooParams::for_level(n as usize, SUB_LEVELS as u32 - 1)
        },
    )
    .expect("params");
    let mut sized = MultiLevelCuckoo::new(
        HASH_KEY,
        CuckooParams::for_level(n as usize * SUB_LEVELS, 26),
    )
    .expect("params");
    println!(
        "| sub-levels | grown: segments, tag + id bits | grown bits/key | grown FPR | grown \
         Minserts/s (with its growth) | sized for 8: bits/key | sized for 8: FPR |"
    );
    println!("|---|---|---|---|---|---|---|");
    for (s, keys) in st.levels.iter().enumerate() {
        let id = s as u8;
        let t = Instant::now();
        grown.ensure_ids(s + 1).expect("ids");
        grown.reserve(keys.len());
        // The layout's budget: one bit per key the level holds.
        grown.raise_secondary_budget(n as usize * (s + 1) / 8);
        for (k, _) in keys {
            grown.insert(k, id, Prior::Absent).expect("id");
        }
        let secs = t.elapsed().as_secs_f64();
        for (k, _) in keys {
            sized.insert(k, id, Prior::Absent).expect("id");
        }
        let held = n as usize * (s + 1);
        let fpr = |f: &MultiLevelCuckoo| {
            (0..PROBES)
                .filter(|&i| f.lookup(&negative(i)) != Answer::Absent)
                .count() as f64
                / PROBES as f64
        };
        let g = grown.stats();
        println!(
            "| {} | {}, {} + {} | {:.2} | {:.5} | {:.2} | {:.2} | {:.5} |",
            s + 1,
            grown.segments(),
            g.tag_bits,
            g.id_bits,
            grown.bits_per_key(held),
            fpr(&grown),
            mops(keys.len(), secs),
            sized.bits_per_key(held),
            fpr(&sized),
        );
    }
    // Every present key: its newest sub-level, or `ProbeAll` (a class made ambiguous past the
    // secondary budget); never `Absent` nor an older sub-level.
    let mut probe_all = [0usize; 2];
    for (k, newest) in &st.distinct {
        for (f, n) in [&grown, &sized].into_iter().zip(probe_all.iter_mut()) {
            match f.lookup(k) {
                Answer::SubLevel(s) if s == *newest => {}
                Answer::ProbeAll => *n += 1,
                other => panic!("wrong answer {other:?} for a key newest in {newest}"),
            }
        }
    }
    let (g, z) = (grown.stats(), sized.stats());
    println!(
        "\nProbeAll of {} present keys: grown {} ({} secondary keys, {} ambiguous), sized for 8 \
         {} ({} secondary keys, {} ambiguous).",
        st.distinct.len(),
        probe_all[0],
        g.secondary_entries,
        g.ambiguous_entries,
        probe_all[1],
        z.secondary_entries,
        z.ambiguous_entries,
    );
}

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let first = args.next();
    if first.as_deref() == Some("grown") {
        let n = args
            .next()
            .map_or(1_000_000, |a| a.parse().expect("N is a number"));
        grown(n);
        return Ok(());
    }
    if first.as_deref() == Some("fixture") {
        let dir = args
            .next()
            .map_or_else(|| std::env::temp_dir().join("mlcf"), PathBuf::from);
        return fixture(&dir);
    }
    if first.as_deref() == Some("open") {
        let n = args
            .next()
            .map_or(1_000_000, |a| a.parse().expect("N is a number"));
        let dir = args.next().map_or_else(std::env::temp_dir, PathBuf::from);
        return open_costs(n, &dir);
    }
    let n: u64 = first
        .map(|a| a.replace([',', '_'], "").parse().expect("N is a number"))
        .unwrap_or(1_000_000);
    let dir = args.next().map_or_else(std::env::temp_dir, PathBuf::from);
    println!(
        "{SUB_LEVELS} sub-levels × {n} keys; CF: 16-bit fingerprints, one filter per sub-level \
         sized for {n}; MLCF: 14-bit fingerprints + 4-bit ids, sized for {}; both 4-slot \
         buckets at 94 % load, 500 kicks; {PROBES} probes per lookup column.",
        n as usize * SUB_LEVELS
    );
    println!();
    println!(
        "| dup. | CF bits/key | MLCF bits/key (inserted / distinct) | CF FPR (any / probes) | \
         MLCF FPR | CF Minserts/s | MLCF Minserts/s | CF / MLCF Mlookups/s pos. | \
         CF / MLCF Mlookups/s neg. | MLCF secondary / ambiguous / growths | ProbeAll |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for dup in [0.0, 0.1, 0.3, 0.5, 0.7, 0.9] {
        let st = store(n, dup);
        let r = run(n, &st);
        println!(
            "| {:.0} % | {:.2} | {:.2} / {:.2} | {:.5} / {:.5} | {:.5} | {:.2} | {:.2} | \
             {:.2} / {:.2} | {:.2} / {:.2} | {} / {} / {} | {} of {} |",
            dup * 100.0,
            r.cf_bits,
            r.mlcf_bits,
            r.mlcf_bits_distinct,
            r.cf_fpr_any,
            r.cf_false_probes,
            r.mlcf_fpr,
            r.cf_insert_mops,
            r.mlcf_insert_mops,
            r.cf_pos_mops,
            r.mlcf_pos_mops,
            r.cf_neg_mops,
            r.mlcf_neg_mops,
            r.secondary,
            r.ambiguous,
            r.growths,
            r.probe_all,
            r.distinct,
        );
    }
    println!();
    println!(
        "| writes | bits/key (inserted / distinct) | FPR | Minserts/s | secondary entries | \
         ambiguous | ProbeAll of present keys |"
    );
    println!("|---|---|---|---|---|---|---|");
    blind_run(n);
    println!();
    println!("| MLCF slot (fingerprint + id), d = 0 % | bits/key | FPR | Minserts/s | secondary entries |");
    println!("|---|---|---|---|---|");
    for f in [14, 13] {
        width_row(n, f);
    }
    open_costs(n, &dir)
}
