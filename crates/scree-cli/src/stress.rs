//! `scree stress`: a multi-threaded workload meant to be killed (SIGKILL) at random moments, and
//! its verifier (`--verify`). `scripts/torture.sh` runs the two in a loop.
//!
//! Writers: each thread owns its keys (`tTT-kKKKKK` in keyspaces `s0` and `s1`, and a twin key
//! `tTT-twin` in both) and issues a deterministic sequence of operations — puts and deletes,
//! synced or not, and batches across both keyspaces (a batch that touches the twins writes the
//! same value to both). Operation `seq` of thread `t` is a pure function of (seed, t, seq), so
//! the verifier can regenerate every operation, including the one in flight when the process
//! died. A writer appends `A t seq floor` to the expected-state file ONLY after the call was
//! acknowledged; `floor` is the number of `A` lines written before the call was issued (those
//! operations precede it in the WAL).
//!
//! Readers: snapshot readers check that the twins are equal at every snapshot and (layouts with
//! scans) that a snapshot's range scan is stable; a maintenance thread flushes and compacts.
//!
//! At start the run records the database's current contents of its key space as `B` lines
//! (the base); a new cycle starts from what the last verification accepted.
//!
//! `--verify` reopens the database (recovery) and checks, per thread, that the recovered state
//! equals the base plus a prefix of that thread's operations, that the prefix includes every
//! acknowledged operation (a SIGKILL loses nothing handed to the OS, synced or not; with
//! `--allow-unsynced-loss` — power-loss semantics — only synced operations, and everything
//! acknowledged before them, must be there), that the floors hold across threads, that the twins
//! agree, and the layout invariants.

// The driver's and the verifier's per-thread tables are sized by the thread count before any
// use; an index out of range is a bug in this checker, and a panic is how it should report it.
#![allow(clippy::indexing_slicing)]

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use scree::{Db, Keyspace, KeyspaceOptions, Layout, Options, WriteBatch, WriteOptions};

/// Arguments of `scree stress`.
#[derive(clap::Args, Debug)]
pub struct StressArgs {
    /// Database directory.
    #[arg(long)]
    pub dir: PathBuf,
    /// Layout of the keyspaces (leveled, fragmented, trie, …).
    #[arg(long, default_value = "leveled")]
    pub layout: String,
    /// How long to run (the torture script kills it before).
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
    /// Writer threads.
    #[arg(long, default_value_t = 4)]
    pub threads: usize,
    /// The expected-state file (rewritten by each run, read by --verify).
    #[arg(long)]
    pub expected: PathBuf,
    /// Verify the database against the expected-state file instead of running.
    #[arg(long)]
    pub verify: bool,
    /// With --verify: power-loss semantics (unsynced writes may be lost, as a prefix).
    #[arg(long)]
    pub allow_unsynced_loss: bool,
    /// Keys per thread and keyspace.
    #[arg(long, default_value_t = 300)]
    pub keys_per_thread: u32,
    /// Largest value in bytes.
    #[arg(long, default_value_t = 300)]
    pub value_len: u32,
    /// Percentage of writes with `sync`.
    #[arg(long, default_value_t = 10)]
    pub sync_percent: u32,
    /// Seed of the operation sequences (default: random).
    #[arg(long)]
    pub seed: Option<u64>,
    /// `Options::max_open_files` of the run and of --verify (0: every table open): a tight
    /// bound closes and reopens table files (sorted tables, HTables, BloomClusters) under the
    /// writers, readers and compactions.
    #[arg(long, default_value_t = 0)]
    pub max_open_files: usize,
}

const KS: [&str; 2] = ["s0", "s1"];

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = splitmix(self.0);
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// The parameters every run of a cycle and its verifier share (the `H` line).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Params {
    seed: u64,
    cycle: u64,
    threads: usize,
    keys: u32,
    value_len: u32,
    sync_percent: u32,
    layout: String,
}

impl Params {
    fn header(&self) -> String {
        format!(
            "H {} {} {} {} {} {} {}\n",
            self.seed,
            self.cycle,
            self.threads,
            self.keys,
            self.value_len,
            self.sync_percent,
            self.layout
        )
    }
    fn parse(line: &str) -> anyhow::Result<Params> {
        let f: Vec<&str> = line.split(' ').collect();
        if f.len() != 8 || f.first() != Some(&"H") {
            bail!("bad header line {line:?}");
        }
        let n = |i: usize| -> anyhow::Result<u64> {
            f.get(i)
                .ok_or_else(|| anyhow!("header field {i}"))?
                .parse::<u64>()
                .with_context(|| format!("header field {i}"))
        };
        Ok(Params {
            seed: n(1)?,
            cycle: n(2)?,
            threads: n(3)? as usize,
            keys: n(4)? as u32,
            value_len: n(5)? as u32,
            sync_percent: n(6)? as u32,
            layout: f.get(7).map(|s| s.to_string()).unwrap_or_default(),
        })
    }
}

/// A key of thread `t`: `None` = the twin.
fn key_name(t: usize, k: Option<u32>) -> Vec<u8> {
    match k {
        Some(k) => format!("t{t:02}-k{k:05}").into_bytes(),
        None => format!("t{t:02}-twin").into_bytes(),
    }
}

/// One write of an operation: keyspace, key, value (None = delete).
type W = (usize, Vec<u8>, Option<Vec<u8>>);

struct OpSpec {
    writes: Vec<W>,
    sync: bool,
}

/// Operation `seq` (1-based) of thread `t`.
fn op(p: &Params, t: usize, seq: u64) -> OpSpec {
    let mut r = Rng(splitmix(
        p.seed ^ ((t as u64) << 48) ^ seq.wrapping_mul(0x1000_0001),
    ));
    let sync = r.below(100) < u64::from(p.sync_percent);
    let value = |r: &mut Rng, salt: u64| -> Vec<u8> {
        let mut v = format!("c{:x}t{t}s{seq}.{salt}|", p.cycle).into_bytes();
        let len = 8 + r.below(u64::from(p.value_len.max(1))) as usize;
        let fill = b'a' + (seq % 26) as u8;
        v.resize(v.len().max(len), fill);
        v
    };
    let mut writes = Vec::new();
    let kind = r.below(100);
    if kind < 50 {
        let ks = r.below(2) as usize;
        let k = r.below(u64::from(p.keys)) as u32;
        writes.push((ks, key_name(t, Some(k)), Some(value(&mut r, 0))));
    } else if kind < 65 {
        let ks = r.below(2) as usize;
        let k = r.below(u64::from(p.keys)) as u32;
        writes.push((ks, key_name(t, Some(k)), None));
    } else {
        let n = 1 + r.below(4);
        for i in 0..n {
            let ks = r.below(2) as usize;
            let k = r.below(u64::from(p.keys)) as u32;
            let v = if r.below(5) == 0 {
                None
            } else {
                Some(value(&mut r, i + 1))
            };
            writes.push((ks, key_name(t, Some(k)), v));
        }
        if r.below(2) == 0 {
            let v = if r.below(8) == 0 {
                None
            } else {
                Some(value(&mut r, 99))
            };
            writes.push((0, key_name(t, None), v.clone()));
            writes.push((1, key_name(t, None), v));
        }
    }
    OpSpec { writes, sync }
}

/// Small keyspace options, so that flushes and compactions happen every second.
/// The keyspace options of a run; `two_pass_gc`: `trie` garbage collections take two passes
/// (every pile here is far below the default single-pass size).
fn ks_options(layout: Layout, two_pass_gc: bool) -> KeyspaceOptions {
    let mut o = KeyspaceOptions::new(layout);
    o.write_buffer_bytes = 256 * 1024;
    o.block_size = 1024;
    o.leveled.level_base_bytes = 512 * 1024;
    o.leveled.target_table_bytes = 128 * 1024;
    o.leveled.level_size_ratio = 4;
    let f = &mut o.fragmented;
    f.max_levels = 4;
    f.l0_compaction_trigger = 2;
    f.l0_slowdown_trigger = 6;
    f.l0_stop_trigger = 10;
    f.max_sstables_per_guard = 2;
    f.top_level_bits = 6;
    f.bit_decrement = 1;
    f.level_base_bytes = 512 * 1024;
    f.level_size_ratio = 4;
    let tr = &mut o.trie;
    tr.pile_size = 2;
    tr.last_level_depth = 2;
    tr.slowdown_sublevels = 6;
    tr.stop_sublevels = 10;
    if two_pass_gc {
        tr.gc_single_pass_bytes = 0;
    }
    o
}

/// The run's database options; seeds with bit 1 set keep sorted tables' index blocks and
/// filters in the (small) block cache, so evictions and rereads happen under the kills too.
fn db_options(max_open_files: usize, seed: u64) -> Options {
    Options {
        background_threads: 2,
        block_cache_bytes: 4 << 20,
        max_open_files,
        cache_index_and_filter_blocks: seed & 2 == 2,
        ..Options::default()
    }
}

/// Opens the database; runs of an odd seed collect garbage in two passes, so torture kills
/// land in both kinds of collection and a seed replays its kind (bit 1 of the seed: see
/// [`db_options`]).
fn open(
    dir: &Path,
    layout: Layout,
    max_open_files: usize,
    seed: u64,
) -> anyhow::Result<(Db, Vec<Keyspace>)> {
    let mut o = db_options(max_open_files, seed);
    // The keyspaces' options from the open on (the flush of what it recovers uses them).
    o.keyspace_options = KS
        .iter()
        .map(|n| (n.to_string(), ks_options(layout, seed & 1 == 1)))
        .collect();
    let db = Db::open(dir, o).with_context(|| format!("open {}", dir.display()))?;
    let mut ks = Vec::new();
    for name in KS {
        ks.push(db.keyspace(name, ks_options(layout, seed & 1 == 1))?);
    }
    Ok((db, ks))
}

/// A key space's contents: (keyspace index, key) → value.
type State = BTreeMap<(usize, Vec<u8>), Vec<u8>>;

/// The contents of the key space of `threads` threads.
fn read_all(ks: &[Keyspace], p: &Params) -> anyhow::Result<State> {
    let mut out = BTreeMap::new();
    for t in 0..p.threads {
        for (i, k) in ks.iter().enumerate() {
            for key in (0..p.keys).map(Some).chain(std::iter::once(None)) {
                let name = key_name(t, key);
                if let Some(v) = k.get(&name)? {
                    out.insert((i, name), v);
                }
            }
        }
    }
    Ok(out)
}

struct ExpectedLog {
    file: File,
    lines: u64,
}

/// Runs the workload until `seconds` pass (or the process is killed).
pub fn run(args: StressArgs) -> anyhow::Result<bool> {
    if args.verify {
        return verify(&args);
    }
    let layout: Layout = args.layout.parse()?;
    let seed = args.seed.unwrap_or_else(|| splitmix(now_nanos()));
    let (db, ks) = open(&args.dir, layout, args.max_open_files, seed)?;
    let p = Params {
        seed,
        cycle: splitmix(now_nanos() ^ 0x5eed) >> 16,
        threads: args.threads.max(1),
        keys: args.keys_per_thread.max(1),
        value_len: args.value_len.max(1),
        sync_percent: args.sync_percent.min(100),
        layout: layout.name().to_string(),
    };
    // The base: what this cycle starts from. Written (and synced) before any new write, so that
    // a kill at any moment leaves an expected file whose base is complete.
    let base = read_all(&ks, &p)?;
    let tmp = args.expected.with_extension("tmp");
    {
        let mut f = File::create(&tmp).with_context(|| format!("create {}", tmp.display()))?;
        let mut text = p.header();
        for ((i, k), v) in &base {
            text.push_str(&format!(
                "B {i} {} {}\n",
                String::from_utf8_lossy(k),
                String::from_utf8_lossy(v)
            ));
        }
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, &args.expected)?;
    let file = OpenOptions::new().append(true).open(&args.expected)?;
    let log = Arc::new(Mutex::new(ExpectedLog { file, lines: 0 }));
    let stop = Arc::new(AtomicBool::new(false));
    let failure: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
    let acked = Arc::new(AtomicU64::new(0));
    let snapshots_checked = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs_f64(args.seconds.max(0.0));
    let scans = layout.order().serves_range();
    std::thread::scope(|s| {
        for t in 0..p.threads {
            let (db, ks, log, stop, failure, acked, p) = (
                db.clone(),
                ks.clone(),
                log.clone(),
                stop.clone(),
                failure.clone(),
                acked.clone(),
                p.clone(),
            );
            s.spawn(move || {
                let mut seq = 0u64;
                while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                    seq += 1;
                    let spec = op(&p, t, seq);
                    let floor = log.lock().map(|l| l.lines).unwrap_or(0);
                    let wo = WriteOptions { sync: spec.sync };
                    let r = if spec.writes.len() == 1 {
                        let (i, k, v) = &spec.writes[0];
                        match v {
                            Some(v) => ks[*i].put_opt(k, v, &wo),
                            None => ks[*i].delete_opt(k, &wo),
                        }
                    } else {
                        let mut b = WriteBatch::new();
                        for (i, k, v) in &spec.writes {
                            match v {
                                Some(v) => b.put(&ks[*i], k, v),
                                None => b.delete(&ks[*i], k),
                            }
                        }
                        db.write(b, &wo)
                    };
                    if let Err(e) = r {
                        fail(&failure, &stop, format!("thread {t} op {seq}: {e}"));
                        return;
                    }
                    // Only now, after the acknowledgement.
                    if let Ok(mut l) = log.lock() {
                        let line = format!("A {t} {seq} {floor}\n");
                        if let Err(e) = l.file.write_all(line.as_bytes()) {
                            fail(&failure, &stop, format!("expected file: {e}"));
                            return;
                        }
                        l.lines += 1;
                    }
                    acked.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        // Snapshot reader.
        {
            let (db, ks, stop, failure, checked, p) = (
                db.clone(),
                ks.clone(),
                stop.clone(),
                failure.clone(),
                snapshots_checked.clone(),
                p.clone(),
            );
            s.spawn(move || {
                let mut r = Rng(p.seed ^ 77);
                while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                    let snap = db.snapshot();
                    let t = r.below(p.threads as u64) as usize;
                    let twin = key_name(t, None);
                    let res = (|| -> anyhow::Result<()> {
                        let a = snap.get(&ks[0], &twin)?;
                        let b = snap.get(&ks[1], &twin)?;
                        if a != b {
                            bail!(
                                "snapshot {}: twins of thread {t} differ: {:?} vs {:?}",
                                snap.sequence(),
                                a.map(|v| String::from_utf8_lossy(&v).into_owned()),
                                b.map(|v| String::from_utf8_lossy(&v).into_owned())
                            );
                        }
                        if scans {
                            let lo = format!("t{t:02}-").into_bytes();
                            let hi = format!("t{t:02}.").into_bytes();
                            let first: Vec<_> = snap
                                .range(&ks[1], lo.clone()..hi.clone())
                                .collect::<scree::Result<_>>()?;
                            std::thread::sleep(Duration::from_millis(2));
                            let second: Vec<_> =
                                snap.range(&ks[1], lo..hi).collect::<scree::Result<_>>()?;
                            if first != second {
                                bail!("snapshot {}: two scans differ", snap.sequence());
                            }
                            let tw = first.iter().find(|(k, _)| *k == twin).map(|(_, v)| v);
                            if tw != b.as_ref() {
                                let show = |v: Option<&Vec<u8>>| {
                                    v.map(|v| String::from_utf8_lossy(v).into_owned())
                                };
                                let again = snap.get(&ks[1], &twin)?;
                                bail!(
                                    "snapshot {}: scan and get disagree on the twin of thread \
                                     {t}: scan {:?}, get {:?}, get again {:?}, {} keys scanned",
                                    snap.sequence(),
                                    show(tw),
                                    show(b.as_ref()),
                                    show(again.as_ref()),
                                    first.len()
                                );
                            }
                        }
                        Ok(())
                    })();
                    if let Err(e) = res {
                        fail(&failure, &stop, format!("snapshot reader: {e:#}"));
                        return;
                    }
                    checked.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        // Flushes and compactions.
        {
            let (db, stop, failure) = (db.clone(), stop.clone(), failure.clone());
            s.spawn(move || {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(150));
                    i += 1;
                    let r = if i.is_multiple_of(8) {
                        db.compact()
                    } else {
                        db.flush()
                    };
                    if let Err(e) = r {
                        fail(&failure, &stop, format!("flush/compact: {e}"));
                        return;
                    }
                }
            });
        }
    });
    let mut failed = failure.lock().ok().and_then(|f| f.clone());
    if failed.is_none() {
        if let Err(e) = db.check_invariants() {
            failed = Some(format!("layout invariants at the end of the run: {e}"));
        }
    }
    drop(ks);
    drop(db);
    println!(
        "stress {}: {} acknowledged operations by {} threads, {} snapshots checked",
        p.layout,
        acked.load(Ordering::Relaxed),
        p.threads,
        snapshots_checked.load(Ordering::Relaxed)
    );
    match failed {
        Some(f) => {
            eprintln!("scree stress: {f}");
            Ok(false)
        }
        None => Ok(true),
    }
}

fn fail(slot: &Mutex<Option<String>>, stop: &AtomicBool, msg: String) {
    if let Ok(mut s) = slot.lock() {
        if s.is_none() {
            *s = Some(msg);
        }
    }
    stop.store(true, Ordering::SeqCst);
}

fn now_nanos() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// The expected-state file.
struct Expected {
    p: Params,
    base: State,
    /// `A` lines in order: (thread, seq, floor).
    acks: Vec<(usize, u64, u64)>,
}

fn read_expected(path: &Path) -> anyhow::Result<Expected> {
    let f = File::open(path).with_context(|| format!("open {}", path.display()))?;
    let mut r = BufReader::new(f);
    let mut line = String::new();
    r.read_line(&mut line)?;
    let p = Params::parse(line.trim_end_matches('\n'))?;
    let mut base = BTreeMap::new();
    let mut acks = Vec::new();
    loop {
        line.clear();
        if r.read_line(&mut line)? == 0 {
            break;
        }
        let Some(l) = line.strip_suffix('\n') else {
            // A line cut by the kill: its acknowledgement was not recorded.
            break;
        };
        let f: Vec<&str> = l.split(' ').collect();
        match f.as_slice() {
            ["B", ks, key, value] => {
                base.insert(
                    (ks.parse()?, key.as_bytes().to_vec()),
                    value.as_bytes().to_vec(),
                );
            }
            ["A", t, seq, floor] => acks.push((t.parse()?, seq.parse()?, floor.parse()?)),
            _ => bail!("bad line {l:?} in {}", path.display()),
        }
    }
    Ok(Expected { p, base, acks })
}

fn thread_of(key: &[u8]) -> Option<usize> {
    let s = std::str::from_utf8(key).ok()?;
    s.strip_prefix('t')?.get(..2)?.parse().ok()
}

fn verify(args: &StressArgs) -> anyhow::Result<bool> {
    let exp = read_expected(&args.expected)?;
    let p = &exp.p;
    let layout: Layout = p.layout.parse()?;
    let (db, ks) = open(&args.dir, layout, args.max_open_files, p.seed)?;
    let got = read_all(&ks, p)?;
    let mut problems: Vec<String> = Vec::new();
    // Nothing outside the key space (layouts with scans).
    if layout.order().serves_range() {
        for (i, k) in ks.iter().enumerate() {
            for r in k.range::<Vec<u8>, _>(..) {
                let (key, v) = r?;
                let known = thread_of(&key).is_some_and(|t| t < p.threads);
                if !known || got.get(&(i, key.clone())) != Some(&v) {
                    problems.push(format!(
                        "scan of {} finds {:?} which gets do not",
                        KS[i],
                        String::from_utf8_lossy(&key)
                    ));
                }
            }
        }
    }
    for t in 0..p.threads {
        let a = got.get(&(0, key_name(t, None)));
        let b = got.get(&(1, key_name(t, None)));
        if a != b {
            problems.push(format!("thread {t}: the twins differ after recovery"));
        }
    }
    // Per thread: acknowledged seqs are 1..=last, in order.
    let mut last = vec![0u64; p.threads];
    let mut synced_last = vec![0u64; p.threads];
    let mut floor_of: Vec<Vec<u64>> = vec![Vec::new(); p.threads];
    for &(t, seq, floor) in &exp.acks {
        let Some(l) = last.get_mut(t) else {
            bail!("ack of unknown thread {t}");
        };
        if seq != *l + 1 {
            bail!("thread {t}: ack of op {seq} after op {l}");
        }
        *l = seq;
        if op(p, t, seq).sync {
            synced_last[t] = seq;
        }
        floor_of[t].push(floor);
    }
    // Per thread: the prefixes whose state equals what was recovered.
    let mut ranges: Vec<(u64, u64)> = Vec::new();
    for (t, &last_t) in last.iter().enumerate() {
        let mine = |m: &State| -> State {
            m.iter()
                .filter(|((_, k), _)| thread_of(k) == Some(t))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        };
        let want = mine(&got);
        let mut state = mine(&exp.base);
        let mut mismatches = want
            .keys()
            .chain(state.keys())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .filter(|k| want.get(*k) != state.get(*k))
            .count();
        let mut range: Option<(u64, u64)> = None;
        for seq in 0..=last_t + 1 {
            if seq > 0 {
                for (i, k, v) in op(p, t, seq).writes {
                    let key = (i, k);
                    let before = state.get(&key) == want.get(&key);
                    match v {
                        Some(v) => state.insert(key.clone(), v),
                        None => state.remove(&key),
                    };
                    let after = state.get(&key) == want.get(&key);
                    match (before, after) {
                        (true, false) => mismatches += 1,
                        (false, true) => mismatches -= 1,
                        _ => {}
                    }
                }
            }
            if mismatches == 0 {
                range = Some(match range {
                    None => (seq, seq),
                    Some((lo, _)) => (lo, seq),
                });
            }
        }
        match range {
            Some(r) => ranges.push(r),
            None => {
                problems.push(format!(
                    "thread {t}: the recovered state is the base plus no prefix of its {} \
                     acknowledged operations (a hole, a torn batch, or a wrong value)",
                    last_t
                ));
                ranges.push((0, u64::MAX));
            }
        }
    }
    // Required prefixes: every acknowledged op (SIGKILL), or synced ops and their floors.
    let mut need: Vec<u64> = (0..p.threads)
        .map(|t| {
            if args.allow_unsynced_loss {
                synced_last[t]
            } else {
                last[t]
            }
        })
        .collect();
    let mut pick: Vec<u64> = vec![0; p.threads];
    for _ in 0..=p.threads {
        let mut changed = false;
        for t in 0..p.threads {
            let (lo, hi) = ranges[t];
            let want = need[t].max(lo);
            if want > hi {
                continue;
            }
            if pick[t] != want {
                pick[t] = want;
                changed = true;
            }
        }
        // Floors: if op s of u is present, every op acknowledged before it was issued is.
        for u in 0..p.threads {
            let s = pick[u].min(last[u]);
            if s == 0 {
                continue;
            }
            let floor = floor_of[u].get(s as usize - 1).copied().unwrap_or(0) as usize;
            for &(t, seq, _) in exp.acks.iter().take(floor) {
                if need[t] < seq {
                    need[t] = seq;
                    changed = true;
                }
            }
        }
        if !changed {
            break;
        }
    }
    let mut inflight = 0;
    for t in 0..p.threads {
        let (lo, hi) = ranges[t];
        if hi == u64::MAX {
            continue;
        }
        if need[t] > hi {
            problems.push(format!(
                "thread {t}: operations up to {} must have survived, recovery has {lo}..={hi} \
                 ({} acknowledged, last synced {})",
                need[t], last[t], synced_last[t]
            ));
        }
        if hi > last[t] {
            inflight += 1;
        }
    }
    if let Err(e) = db.check_invariants() {
        problems.push(format!("layout invariants: {e}"));
    }
    drop(ks);
    drop(db);
    for pr in &problems {
        println!("problem: {pr}");
    }
    println!(
        "verify {}: {} threads, {} acknowledged operations ({} synced), {} in-flight operations \
         applied, {} keys recovered: {}",
        p.layout,
        p.threads,
        exp.acks.len(),
        exp.acks
            .iter()
            .filter(|(t, s, _)| op(p, *t, *s).sync)
            .count(),
        inflight,
        got.len(),
        if problems.is_empty() { "OK" } else { "FAILED" }
    );
    Ok(problems.is_empty())
}
