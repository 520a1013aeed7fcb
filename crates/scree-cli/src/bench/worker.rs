//! One worker thread's machinery: what it needs (`Ctx`), what it reports (`ThreadOutcome`),
//! and the timed operations that check every read against what was written (`Worker`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use super::engine::{BenchEngine, EngineError};
use super::keys::{KeyCodec, Rng, ValueCursor};
use super::metrics::Latency;
use super::presence::RunState;
use super::ycsb::{self, Op, Spec};

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
    pub fn mismatch(&mut self, what: String) {
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
pub const PUBLISH_EVERY: u64 = 64;

/// One worker's loop state: the outcome plus reusable buffers.
pub struct Worker<'c, 'a> {
    pub ctx: &'c Ctx<'a>,
    pub out: ThreadOutcome,
    pub rng: Rng,
    pub value_cursor: ValueCursor,
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub read: Vec<u8>,
    pub unpublished: u64,
    pub timed: bool,
    /// Indexes this thread put whose presence bits are not yet set (see [`Worker::put`]).
    pub pending_present: Vec<u64>,
    /// Members of the group being scanned that the scan visited (one bit per member).
    pub seen: Vec<u64>,
}

impl<'c, 'a> Worker<'c, 'a> {
    pub fn new(ctx: &'c Ctx<'a>, stream: u64) -> Self {
        Worker {
            ctx,
            out: ThreadOutcome::default(),
            rng: Rng::new(ctx.seed, stream),
            value_cursor: ctx
                .codec
                .value_cursor(&mut Rng::new(ctx.seed, stream ^ 0x5a17_0000)),
            key: Vec::with_capacity(ctx.codec.key_size),
            value: Vec::with_capacity(ctx.codec.value_size),
            read: Vec::with_capacity(ctx.codec.value_size),
            unpublished: 0,
            timed: true,
            pending_present: Vec::with_capacity(PUBLISH_EVERY as usize),
            seen: Vec::new(),
        }
    }

    pub fn stopped(&self) -> bool {
        self.ctx.stop.load(Ordering::Relaxed)
    }

    /// Runs one timed operation and accounts for it; false when the loop must end.
    #[inline]
    pub fn op(&mut self, f: impl FnOnce(&mut Self) -> Result<(), EngineError>) -> bool {
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

    pub fn publish(&mut self) {
        self.settle_presence();
        if self.timed {
            self.ctx
                .progress
                .fetch_add(self.unpublished, Ordering::Relaxed);
        }
        self.unpublished = 0;
    }

    /// Sets the presence bits of this thread's acknowledged puts.
    pub fn settle_presence(&mut self) {
        if !self.pending_present.is_empty() {
            self.ctx.state.presence.set_many(&self.pending_present);
            self.pending_present.clear();
        }
    }

    /// Puts key `i`. Its presence bit is set after the engine acknowledged the put, at the
    /// next [`Worker::publish`] (every [`PUBLISH_EVERY`] operations) or before this thread's
    /// next read or delete, whichever comes first: one random bit per put in a bitmap of
    /// `--num` bits cost the writer a cache miss per put (≈ 10 % of a `trie` fill's writer
    /// thread), a batch lets the misses overlap. Other threads may see the bit late, which
    /// concurrent workloads already tolerate (`Ctx::racy`).
    pub fn put(&mut self, i: u64) -> Result<(), EngineError> {
        self.ctx.codec.key(i, &mut self.key);
        self.ctx
            .codec
            .value(i, &mut self.value_cursor, &mut self.value);
        self.ctx.engine.put(&self.key, &self.value)?;
        self.pending_present.push(i);
        let n = (self.key.len() + self.value.len()) as u64;
        self.out.user_bytes += n;
        self.out.bytes += n;
        Ok(())
    }

    pub fn delete(&mut self, i: u64) -> Result<(), EngineError> {
        self.settle_presence();
        self.ctx.codec.key(i, &mut self.key);
        self.ctx.engine.delete(&self.key)?;
        self.ctx.state.presence.clear(i);
        self.out.user_bytes += self.key.len() as u64;
        self.out.bytes += self.key.len() as u64;
        Ok(())
    }

    /// Gets key `i` and checks the answer against the presence map.
    pub fn get(&mut self, i: u64) -> Result<(), EngineError> {
        self.settle_presence();
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

    pub fn get_missing(&mut self, i: u64) -> Result<(), EngineError> {
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
    pub fn scan(&mut self, i: u64, limit: usize) -> Result<(), EngineError> {
        self.settle_presence();
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

    /// Creates key `i` unless it exists (a non-blind write) and checks the answer against the
    /// presence map: a create of a present key must be refused, one of an absent key must
    /// write. Counted as a lookup (found = refused) and, when it wrote, as a put.
    pub fn put_if_absent(&mut self, i: u64) -> Result<(), EngineError> {
        self.settle_presence();
        self.ctx.codec.key(i, &mut self.key);
        self.ctx
            .codec
            .value(i, &mut self.value_cursor, &mut self.value);
        let known = self.ctx.state.presence.get(i);
        let wrote = self.ctx.engine.put_if_absent(&self.key, &self.value)?;
        self.out.lookups += 1;
        if known {
            self.out.expected_found += 1;
        }
        if wrote {
            self.pending_present.push(i);
            let n = (self.key.len() + self.value.len()) as u64;
            self.out.user_bytes += n;
            self.out.bytes += n;
            self.count_name("create");
            if known && !self.ctx.racy {
                self.out.mismatch(format!(
                    "put_if_absent(key {i}) wrote over a key that was written"
                ));
            }
        } else {
            self.out.found += 1;
            self.out.bytes += self.key.len() as u64;
            self.count_name("exists");
            if !known && !self.ctx.racy {
                self.out.mismatch(format!(
                    "put_if_absent(key {i}) refused a key that was deleted or never written"
                ));
            }
        }
        Ok(())
    }

    /// Scans the whole prefix group `g` and checks that it visits every present member once,
    /// with its value, and nothing else. Counted as one lookup (found when it visited anything);
    /// the entries visited are counted under `scan_entries`.
    pub fn scan_group(&mut self, g: u64) -> Result<(), EngineError> {
        self.settle_presence();
        let codec = self.ctx.codec;
        let (lo, hi) = codec.group_range(g);
        let presence = &self.ctx.state.presence;
        let expected = presence.count_range(lo, hi);
        let prefix = codec.group_prefix(g);
        let racy = self.ctx.racy;
        let words = (codec.groups as usize).div_ceil(64);
        self.seen.clear();
        self.seen.resize(words, 0);
        let seen = &mut self.seen;
        let mut bytes = 0u64;
        let mut problem: Option<String> = None;
        let visited = self.ctx.engine.scan_prefix(&prefix, &mut |k, v| {
            bytes += (k.len() + v.len()) as u64;
            if problem.is_some() {
                return;
            }
            let member = codec
                .index_of(k)
                .filter(|j| (lo..hi).contains(j) && k.starts_with(&prefix));
            let Some(j) = member else {
                problem = Some(format!(
                    "scan of group {g} returned a key outside the group or never written"
                ));
                return;
            };
            let (word, bit) = (((j - lo) / 64) as usize, (j - lo) % 64);
            let first_visit = seen.get_mut(word).is_some_and(|w| {
                let fresh = *w & (1 << bit) == 0;
                *w |= 1 << bit;
                fresh
            });
            if !first_visit {
                problem = Some(format!("scan of group {g} returned key {j} twice"));
            } else if !codec.value_matches(j, v) {
                problem = Some(format!(
                    "scan of group {g} returned a wrong value for key {j}"
                ));
            } else if !racy && !presence.get(j) {
                problem = Some(format!("scan of group {g} returned absent key {j}"));
            }
        })?;
        self.out.lookups += 1;
        self.out.bytes += bytes;
        *self.out.op_counts.entry("scan_entries").or_default() += visited as u64;
        if expected > 0 {
            self.out.expected_found += 1;
        }
        if visited > 0 {
            self.out.found += 1;
        }
        if let Some(p) = problem {
            self.out.mismatch(p);
        } else if !racy && visited as u64 != expected {
            self.out.mismatch(format!(
                "scan of group {g} visited {visited} entries, {expected} were written"
            ));
        }
        Ok(())
    }

    pub fn count(&mut self, op: Op) {
        self.count_name(op.name());
    }

    /// Counts one operation of kind `name` (reported as `op_counts`).
    pub fn count_name(&mut self, name: &'static str) {
        *self.out.op_counts.entry(name).or_default() += 1;
    }

    pub fn finish(mut self) -> ThreadOutcome {
        self.publish();
        self.out
    }
}
