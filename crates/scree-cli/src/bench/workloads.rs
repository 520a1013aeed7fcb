//! The db_bench and YCSB workloads: their names, how many operations each runs, and the loop one
//! worker thread executes (with every read checked against what was written).

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use super::engine::{BenchEngine, EngineError};
use super::keys::{KeyCodec, Permutation, Rng};
use super::metrics::Latency;
use super::ycsb::{self, InsertSequence, Op, Spec};

/// A workload, by its db_bench / YCSB name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    /// `num` unique keys in random order.
    FillRandom,
    /// `num` keys in ascending order.
    FillSeq,
    /// `num` puts of random existing keys (with repeats).
    Overwrite,
    /// `reads` gets of random present keys.
    ReadRandom,
    /// `reads` gets of keys that were never written (they sort between present keys).
    ReadMissing,
    /// Iterates the keyspace in order, `reads` entries.
    ReadSeq,
    /// `reads` seeks to random keys, each followed by `--seek-nexts` nexts.
    SeekRandom,
    /// `num` deletes of random keys (with repeats).
    DeleteRandom,
    /// `reads` random gets by `--threads` readers while one more thread overwrites.
    ReadWhileWriting,
    /// YCSB load: `num` records inserted in random order.
    YcsbLoad,
    /// YCSB core workload A … F (`reads` operations).
    Ycsb(char),
}

impl Workload {
    /// Every workload, for help texts.
    pub const ALL: &'static [&'static str] = &[
        "fillrandom",
        "fillseq",
        "overwrite",
        "readrandom",
        "readmissing",
        "readseq",
        "seekrandom",
        "deleterandom",
        "readwhilewriting",
        "ycsb-load",
        "ycsb-a",
        "ycsb-b",
        "ycsb-c",
        "ycsb-d",
        "ycsb-e",
        "ycsb-f",
    ];

    /// The workload's name.
    pub fn name(self) -> String {
        match self {
            Workload::FillRandom => "fillrandom".into(),
            Workload::FillSeq => "fillseq".into(),
            Workload::Overwrite => "overwrite".into(),
            Workload::ReadRandom => "readrandom".into(),
            Workload::ReadMissing => "readmissing".into(),
            Workload::ReadSeq => "readseq".into(),
            Workload::SeekRandom => "seekrandom".into(),
            Workload::DeleteRandom => "deleterandom".into(),
            Workload::ReadWhileWriting => "readwhilewriting".into(),
            Workload::YcsbLoad => "ycsb-load".into(),
            Workload::Ycsb(c) => format!("ycsb-{c}"),
        }
    }

    /// Operations the workload runs in total (over all threads).
    pub fn ops(self, num: u64, reads: u64) -> u64 {
        match self {
            Workload::FillRandom
            | Workload::FillSeq
            | Workload::Overwrite
            | Workload::DeleteRandom
            | Workload::YcsbLoad => num,
            _ => reads,
        }
    }

    /// Whether the workload writes (its write amplification is reported).
    pub fn writes(self) -> bool {
        match self {
            Workload::ReadRandom
            | Workload::ReadMissing
            | Workload::ReadSeq
            | Workload::SeekRandom => false,
            Workload::Ycsb(c) => c != 'c',
            _ => true,
        }
    }

    /// Records the workload may insert beyond `num` (to size the presence map).
    pub fn max_new_records(self, reads: u64) -> u64 {
        match self {
            Workload::Ycsb('d') | Workload::Ycsb('e') => reads,
            _ => 0,
        }
    }
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

impl FromStr for Workload {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s.trim().to_ascii_lowercase().as_str() {
            "fillrandom" => Workload::FillRandom,
            "fillseq" => Workload::FillSeq,
            "overwrite" => Workload::Overwrite,
            "readrandom" => Workload::ReadRandom,
            "readmissing" => Workload::ReadMissing,
            "readseq" => Workload::ReadSeq,
            "seekrandom" => Workload::SeekRandom,
            "deleterandom" => Workload::DeleteRandom,
            "readwhilewriting" => Workload::ReadWhileWriting,
            "ycsb-load" | "ycsbload" => Workload::YcsbLoad,
            other => match other.strip_prefix("ycsb-").or(other.strip_prefix("ycsb")) {
                Some(l) if l.len() == 1 && ('a'..='f').contains(&l.as_bytes()[0].into()) => {
                    Workload::Ycsb(l.as_bytes()[0].into())
                }
                _ => {
                    return Err(format!(
                        "unknown workload `{s}` (known: {})",
                        Workload::ALL.join(", ")
                    ))
                }
            },
        })
    }
}

/// Which key indexes are present, as the benchmark wrote them: one bit per record. Reads are
/// checked against it. A bit is set only after the engine acknowledged the put (release), so a
/// reader that sees it set (acquire) must find the key.
pub struct Presence {
    words: Vec<AtomicU64>,
}

impl Presence {
    /// `capacity` records, all absent.
    pub fn new(capacity: u64) -> Presence {
        Presence {
            words: (0..capacity.div_ceil(64))
                .map(|_| AtomicU64::new(0))
                .collect(),
        }
    }
    /// Marks records `[0, n)` present (a database that existed before the run).
    pub fn set_all_below(&self, n: u64) {
        for i in 0..n {
            self.set(i);
        }
    }
    /// Marks `i` present.
    pub fn set(&self, i: u64) {
        if let Some(w) = self.words.get((i / 64) as usize) {
            w.fetch_or(1 << (i % 64), Ordering::Release);
        }
    }
    /// Marks `i` absent.
    pub fn clear(&self, i: u64) {
        if let Some(w) = self.words.get((i / 64) as usize) {
            w.fetch_and(!(1 << (i % 64)), Ordering::Release);
        }
    }
    /// Whether `i` is present.
    pub fn get(&self, i: u64) -> bool {
        self.words
            .get((i / 64) as usize)
            .is_some_and(|w| w.load(Ordering::Acquire) & (1 << (i % 64)) != 0)
    }
    /// Present records with index ≥ `from`.
    pub fn count_from(&self, from: u64) -> u64 {
        let first = (from / 64) as usize;
        self.words
            .iter()
            .enumerate()
            .skip(first)
            .map(|(wi, w)| {
                let mut bits = w.load(Ordering::Acquire);
                if wi == first {
                    bits &= !0u64 << (from % 64);
                }
                bits.count_ones() as u64
            })
            .sum()
    }
}

/// State that lives across the workloads of one engine's run.
pub struct RunState {
    /// What the benchmark wrote.
    pub presence: Presence,
    /// YCSB's insert sequence (record numbers after the loaded ones).
    pub inserts: Arc<InsertSequence>,
}

/// Everything a worker thread needs.
pub struct Ctx<'a> {
    /// The store.
    pub engine: &'a dyn BenchEngine,
    /// Key and value format.
    pub codec: &'a KeyCodec,
    /// Cross-workload state.
    pub state: &'a RunState,
    /// `--num`.
    pub num: u64,
    /// `--seed`.
    pub seed: u64,
    /// `--seek-nexts`.
    pub seek_nexts: usize,
    /// Set by any thread on an engine error, to stop the others.
    pub stop: &'a AtomicBool,
    /// Shared count of completed operations (for sampling).
    pub progress: &'a AtomicU64,
    /// Other threads may change presence while this one reads.
    pub racy: bool,
    /// Operations of the workload over all threads (YCSB choosers are sized with it).
    pub total_ops: u64,
    /// The YCSB workload and its key chooser, built before the clock starts (the `latest`
    /// chooser computes ζ over every record); each thread clones the chooser.
    pub ycsb: Option<(Spec, ycsb::KeyChooser)>,
}

/// What one worker thread did.
#[derive(Default)]
pub struct ThreadOutcome {
    /// Per-operation latencies.
    pub latency: Latency,
    /// Operations completed.
    pub ops: u64,
    /// Key + value bytes moved (written, or read back).
    pub bytes: u64,
    /// Σ key+value of puts + key of deletes.
    pub user_bytes: u64,
    /// Lookups (gets, seeks, scanned entries).
    pub lookups: u64,
    /// Lookups that found their key.
    pub found: u64,
    /// Lookups of keys known to be present.
    pub expected_found: u64,
    /// Reads that disagreed with what was written.
    pub mismatches: u64,
    /// The first disagreement, in words.
    pub first_mismatch: Option<String>,
    /// The engine error that ended the thread.
    pub error: Option<EngineError>,
    /// Operations by kind (YCSB).
    pub op_counts: BTreeMap<&'static str, u64>,
}

impl ThreadOutcome {
    fn mismatch(&mut self, what: String) {
        self.mismatches += 1;
        if self.first_mismatch.is_none() {
            self.first_mismatch = Some(what);
        }
    }

    /// Adds another thread's outcome.
    pub fn merge(&mut self, o: ThreadOutcome) {
        self.latency.merge(&o.latency);
        self.ops += o.ops;
        self.bytes += o.bytes;
        self.user_bytes += o.user_bytes;
        self.lookups += o.lookups;
        self.found += o.found;
        self.expected_found += o.expected_found;
        self.mismatches += o.mismatches;
        if self.first_mismatch.is_none() {
            self.first_mismatch = o.first_mismatch;
        }
        if self.error.is_none() {
            self.error = o.error;
        }
        for (k, v) in o.op_counts {
            *self.op_counts.entry(k).or_default() += v;
        }
    }
}

/// How often threads publish their op count.
const PUBLISH_EVERY: u64 = 64;

/// One worker's loop state: the outcome plus reusable buffers.
struct Worker<'c, 'a> {
    ctx: &'c Ctx<'a>,
    out: ThreadOutcome,
    rng: Rng,
    key: Vec<u8>,
    value: Vec<u8>,
    read: Vec<u8>,
    unpublished: u64,
    timed: bool,
}

impl<'c, 'a> Worker<'c, 'a> {
    fn new(ctx: &'c Ctx<'a>, stream: u64) -> Self {
        Worker {
            ctx,
            out: ThreadOutcome::default(),
            rng: Rng::new(ctx.seed, stream),
            key: Vec::with_capacity(ctx.codec.key_size),
            value: Vec::with_capacity(ctx.codec.value_size),
            read: Vec::with_capacity(ctx.codec.value_size),
            unpublished: 0,
            timed: true,
        }
    }

    fn stopped(&self) -> bool {
        self.ctx.stop.load(Ordering::Relaxed)
    }

    /// Runs one timed operation and accounts for it; false when the loop must end.
    #[inline]
    fn op(&mut self, f: impl FnOnce(&mut Self) -> Result<(), EngineError>) -> bool {
        let t0 = Instant::now();
        let r = f(self);
        if self.timed {
            self.out.latency.record(t0.elapsed());
        }
        self.out.ops += 1;
        self.unpublished += 1;
        if self.unpublished == PUBLISH_EVERY {
            self.publish();
        }
        match r {
            Ok(()) => !self.stopped(),
            Err(e) => {
                self.out.error = Some(e);
                self.ctx.stop.store(true, Ordering::Relaxed);
                false
            }
        }
    }

    fn publish(&mut self) {
        if self.timed {
            self.ctx
                .progress
                .fetch_add(self.unpublished, Ordering::Relaxed);
        }
        self.unpublished = 0;
    }

    fn put(&mut self, i: u64) -> Result<(), EngineError> {
        self.ctx.codec.key(i, &mut self.key);
        self.ctx.codec.value(i, &mut self.rng, &mut self.value);
        self.ctx.engine.put(&self.key, &self.value)?;
        self.ctx.state.presence.set(i);
        let n = (self.key.len() + self.value.len()) as u64;
        self.out.user_bytes += n;
        self.out.bytes += n;
        Ok(())
    }

    fn delete(&mut self, i: u64) -> Result<(), EngineError> {
        self.ctx.codec.key(i, &mut self.key);
        self.ctx.engine.delete(&self.key)?;
        self.ctx.state.presence.clear(i);
        self.out.user_bytes += self.key.len() as u64;
        self.out.bytes += self.key.len() as u64;
        Ok(())
    }

    /// Gets key `i` and checks the answer against the presence map.
    fn get(&mut self, i: u64) -> Result<(), EngineError> {
        self.ctx.codec.key(i, &mut self.key);
        let known = self.ctx.state.presence.get(i);
        let found = self.ctx.engine.get(&self.key, &mut self.read)?;
        self.out.lookups += 1;
        if known {
            self.out.expected_found += 1;
        }
        if found {
            self.out.found += 1;
            self.out.bytes += (self.key.len() + self.read.len()) as u64;
            if !self.ctx.codec.value_matches(i, &self.read) {
                let what = format!(
                    "get(key {i}) returned a {}-byte value that is not the one written",
                    self.read.len()
                );
                self.out.mismatch(what);
            } else if !known && !self.ctx.racy {
                self.out.mismatch(format!(
                    "get(key {i}) found a key that was deleted or never written"
                ));
            }
        } else if known {
            self.out
                .mismatch(format!("get(key {i}) did not find a key that was written"));
        }
        Ok(())
    }

    fn get_missing(&mut self, i: u64) -> Result<(), EngineError> {
        self.ctx.codec.missing_key(i, &mut self.key);
        let found = self.ctx.engine.get(&self.key, &mut self.read)?;
        self.out.lookups += 1;
        if found {
            self.out.found += 1;
            self.out.mismatch(format!(
                "get(missing key {i}) found a key that was never written"
            ));
        }
        Ok(())
    }

    /// Seeks to key `i` and visits `limit` entries, checking order and values.
    fn scan(&mut self, i: u64, limit: usize) -> Result<(), EngineError> {
        self.ctx.codec.key(i, &mut self.key);
        let known = self.ctx.state.presence.get(i);
        let codec = self.ctx.codec;
        let racy = self.ctx.racy;
        let presence = &self.ctx.state.presence;
        let start = &self.key;
        let mut first: Option<bool> = None;
        let mut prev: Option<Vec<u8>> = None;
        let mut bytes = 0u64;
        let mut problem: Option<String> = None;
        let visited = self.ctx.engine.scan(start, limit, &mut |k, v| {
            bytes += (k.len() + v.len()) as u64;
            if first.is_none() {
                first = Some(k == start.as_slice());
            }
            if problem.is_some() {
                return;
            }
            if k < start.as_slice() || prev.as_deref().is_some_and(|p| k <= p) {
                problem = Some(format!("scan from key {i} returned keys out of order"));
            } else {
                match codec.index_of(k) {
                    Some(j) if codec.value_matches(j, v) => {
                        if !racy && !presence.get(j) {
                            problem = Some(format!("scan from key {i} returned absent key {j}"));
                        }
                    }
                    Some(j) => problem = Some(format!("scan returned a wrong value for key {j}")),
                    None => problem = Some("scan returned a key the benchmark never wrote".into()),
                }
            }
            prev = Some(k.to_vec());
        })?;
        let _ = visited;
        self.out.lookups += 1;
        self.out.bytes += bytes;
        let hit = first == Some(true);
        if hit {
            self.out.found += 1;
        }
        if known {
            self.out.expected_found += 1;
            if !hit {
                self.out.mismatch(format!(
                    "seek(key {i}) did not land on a key that was written"
                ));
            }
        } else if hit && !racy {
            self.out
                .mismatch(format!("seek(key {i}) landed on an absent key"));
        }
        if let Some(p) = problem {
            self.out.mismatch(p);
        }
        Ok(())
    }

    fn count(&mut self, op: Op) {
        *self.out.op_counts.entry(op.name()).or_default() += 1;
    }

    fn finish(mut self) -> ThreadOutcome {
        self.publish();
        self.out
    }
}

/// `[start, end)` of `total` split over `threads`.
pub fn share(total: u64, threads: u64, t: u64) -> (u64, u64) {
    (total * t / threads, total * (t + 1) / threads)
}

/// The loop of worker `t` of `threads` for `workload` (not readwhilewriting's writer).
pub fn run_thread(ctx: &Ctx<'_>, workload: Workload, t: u64, threads: u64) -> ThreadOutcome {
    let stream = (t << 32) ^ mix_name(&workload.name());
    let mut w = Worker::new(ctx, stream);
    let (lo, hi) = share(ctx.total_ops, threads, t);
    let n = hi - lo;
    let num = ctx.num.max(1);
    match workload {
        Workload::FillSeq => {
            for i in lo..hi {
                if !w.op(|w| w.put(i)) {
                    break;
                }
            }
        }
        Workload::FillRandom | Workload::YcsbLoad => {
            let salt = if workload == Workload::YcsbLoad {
                0x7c5b
            } else {
                0
            };
            let perm = Permutation::new(ctx.num, ctx.seed ^ salt);
            for i in lo..hi {
                let k = perm.get(i);
                if !w.op(|w| w.put(k)) {
                    break;
                }
            }
        }
        Workload::Overwrite => {
            for _ in 0..n {
                let k = w.rng.below(num);
                if !w.op(|w| w.put(k)) {
                    break;
                }
            }
        }
        Workload::DeleteRandom => {
            for _ in 0..n {
                let k = w.rng.below(num);
                if !w.op(|w| w.delete(k)) {
                    break;
                }
            }
        }
        Workload::ReadRandom | Workload::ReadWhileWriting => {
            for _ in 0..n {
                let k = w.rng.below(num);
                if !w.op(|w| w.get(k)) {
                    break;
                }
            }
        }
        Workload::ReadMissing => {
            for _ in 0..n {
                let k = w.rng.below(num);
                if !w.op(|w| w.get_missing(k)) {
                    break;
                }
            }
        }
        Workload::SeekRandom => {
            let limit = 1 + ctx.seek_nexts;
            for _ in 0..n {
                let k = w.rng.below(num);
                if !w.op(|w| w.scan(k, limit)) {
                    break;
                }
            }
        }
        Workload::ReadSeq => read_seq(&mut w, t, threads, n),
        Workload::Ycsb(letter) => ycsb_loop(&mut w, letter, n),
    }
    w.finish()
}

/// A stable per-name stream id so each workload draws its own random numbers.
fn mix_name(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// readseq: one iterator from this thread's part of the key space; each entry is one op, timed
/// from the previous entry.
fn read_seq(w: &mut Worker<'_, '_>, t: u64, threads: u64, n: u64) {
    let (start_idx, _) = share(w.ctx.num, threads, t);
    let ctx = w.ctx;
    ctx.codec.key(start_idx, &mut w.key);
    let expected = n.min(ctx.state.presence.count_from(start_idx));
    let start = w.key.clone();
    let mut last = Instant::now();
    let mut prev: Option<Vec<u8>> = None;
    let out = &mut w.out;
    let mut unpublished = 0u64;
    let result = ctx.engine.scan(&start, n as usize, &mut |k, v| {
        let now = Instant::now();
        out.latency.record(now - last);
        last = now;
        out.ops += 1;
        out.lookups += 1;
        out.found += 1;
        out.bytes += (k.len() + v.len()) as u64;
        unpublished += 1;
        if unpublished == PUBLISH_EVERY {
            ctx.progress.fetch_add(unpublished, Ordering::Relaxed);
            unpublished = 0;
        }
        let ok_order = k >= start.as_slice() && prev.as_deref().is_none_or(|p| k > p);
        let ok_value = ctx.codec.index_of(k).is_some_and(|j| {
            ctx.codec.value_matches(j, v) && (ctx.racy || ctx.state.presence.get(j))
        });
        if !(ok_order && ok_value) {
            out.mismatch(
                "readseq returned a key out of order, absent, or with a wrong value".into(),
            );
        }
        prev = Some(k.to_vec());
    });
    ctx.progress.fetch_add(unpublished, Ordering::Relaxed);
    match result {
        Ok(_) => {
            w.out.expected_found += expected;
            if !ctx.racy && w.out.found != expected {
                let what = format!(
                    "readseq visited {} entries, {} were written",
                    w.out.found, expected
                );
                w.out.mismatch(what);
            }
        }
        Err(e) => {
            w.out.error = Some(e);
            ctx.stop.store(true, Ordering::Relaxed);
        }
    }
}

/// The spec and key chooser of YCSB workload `letter` for `num` records and `ops` operations,
/// with the request distribution overridden if asked.
pub fn ycsb_setup(
    letter: char,
    num: u64,
    ops: u64,
    distribution: Option<ycsb::Distribution>,
) -> Option<(Spec, ycsb::KeyChooser)> {
    let mut spec = Spec::core(letter)?;
    if let Some(d) = distribution {
        spec.distribution = d;
    }
    let chooser = spec.chooser(num, ops);
    Some((spec, chooser))
}

/// One thread of a YCSB core workload.
fn ycsb_loop(w: &mut Worker<'_, '_>, letter: char, n: u64) {
    let Some((spec, chooser)) = &w.ctx.ycsb else {
        w.out.error = Some(EngineError::Failed(format!("no YCSB workload {letter}")));
        return;
    };
    let (spec, mut chooser) = (spec.clone(), chooser.clone());
    let seq = w.ctx.state.inserts.clone();
    for _ in 0..n {
        let op = spec.next_op(&mut w.rng);
        w.count(op);
        let ok = match op {
            Op::Read => {
                let k = chooser.next(&seq, &mut w.rng);
                w.op(|w| w.get(k))
            }
            Op::Update => {
                let k = chooser.next(&seq, &mut w.rng);
                w.op(|w| w.put(k))
            }
            Op::Insert => {
                let k = seq.next_insert();
                w.op(|w| w.put(k))
            }
            Op::Scan => {
                let k = chooser.next(&seq, &mut w.rng);
                let len = ycsb::scan_length(&mut w.rng);
                w.op(|w| w.scan(k, len))
            }
            Op::ReadModifyWrite => {
                let k = chooser.next(&seq, &mut w.rng);
                w.op(|w| {
                    w.get(k)?;
                    w.put(k)
                })
            }
        };
        if !ok {
            break;
        }
    }
}

/// readwhilewriting's writer: overwrites random keys until `done`; untimed, not counted as ops.
pub fn run_writer(ctx: &Ctx<'_>, done: &AtomicBool) -> ThreadOutcome {
    let mut w = Worker::new(ctx, 0x0003_717e);
    w.timed = false;
    let num = ctx.num.max(1);
    while !done.load(Ordering::Relaxed) {
        let k = w.rng.below(num);
        if !w.op(|w| w.put(k)) {
            break;
        }
    }
    let mut out = w.finish();
    // The writer's operations are not the workload's operations.
    out.ops = 0;
    out.bytes = 0;
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for name in Workload::ALL {
            let w: Workload = name.parse().expect(name);
            assert_eq!(&w.name(), name);
        }
        assert!("ycsb-g".parse::<Workload>().is_err());
        assert!("nope".parse::<Workload>().is_err());
    }

    #[test]
    fn presence_counts() {
        let p = Presence::new(200);
        for i in [0, 63, 64, 65, 199] {
            p.set(i);
        }
        assert_eq!(p.count_from(0), 5);
        assert_eq!(p.count_from(64), 3);
        assert_eq!(p.count_from(65), 2);
        p.clear(65);
        assert!(!p.get(65) && p.get(64));
        assert_eq!(p.count_from(64), 2);
    }

    #[test]
    fn shares_cover_everything() {
        let parts: Vec<_> = (0..3).map(|t| share(10, 3, t)).collect();
        assert_eq!(parts, vec![(0, 3), (3, 6), (6, 10)]);
    }
}
