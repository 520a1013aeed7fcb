//! The db_bench and YCSB workloads: their names, how many operations each runs, and the loop one
//! worker thread executes (with every read checked against what was written).

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use super::engine::EngineError;
use super::keys::Permutation;
use super::worker::{Ctx, ThreadOutcome, Worker, PUBLISH_EVERY};
use super::ycsb::{self, Op, Spec};

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
    /// `reads` operations, half gets of random present keys, half blind puts of random
    /// existing keys (SlimDB §5.4's 50%R+50%BW).
    MixBlind,
    /// `reads` operations, half gets of random present keys, half non-blind writes:
    /// `put_if_absent` of a key that is present (one of `[0, num)`) or, as often, of one of
    /// `[num, 2·num)` that is absent until a create of it succeeds (50%R+50%NBW as creates
    /// that must not overwrite).
    MixNonBlind,
    /// `reads` scans of a whole prefix group picked at random among the groups of `[0, num)`
    /// (needs `--key-groups`).
    ScanGroup,
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
        "mixblind",
        "mixnonblind",
        "scangroup",
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
            Workload::MixBlind => "mixblind".into(),
            Workload::MixNonBlind => "mixnonblind".into(),
            Workload::ScanGroup => "scangroup".into(),
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
            | Workload::SeekRandom
            | Workload::ScanGroup => false,
            Workload::Ycsb(c) => c != 'c',
            _ => true,
        }
    }

    /// Records the workload may insert beyond `num` (to size the presence map).
    pub fn max_new_records(self, num: u64, reads: u64) -> u64 {
        match self {
            Workload::Ycsb('d') | Workload::Ycsb('e') => reads,
            Workload::MixNonBlind => num,
            _ => 0,
        }
    }

    /// Whether the workload needs semi-sorted keys (`--key-groups`).
    pub fn needs_groups(self) -> bool {
        self == Workload::ScanGroup
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
            "mixblind" => Workload::MixBlind,
            "mixnonblind" => Workload::MixNonBlind,
            "scangroup" => Workload::ScanGroup,
            "ycsb-load" | "ycsbload" => Workload::YcsbLoad,
            other => match other
                .strip_prefix("ycsb-")
                .or(other.strip_prefix("ycsb"))
                .map(str::as_bytes)
            {
                Some(&[l @ b'a'..=b'f']) => Workload::Ycsb(l.into()),
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
        Workload::MixBlind => {
            for _ in 0..n {
                let k = w.rng.below(num);
                let ok = if w.rng.next_u64() & 1 == 0 {
                    w.count_name("read");
                    w.op(|w| w.get(k))
                } else {
                    w.count_name("write");
                    w.op(|w| w.put(k))
                };
                if !ok {
                    break;
                }
            }
        }
        Workload::MixNonBlind => {
            for _ in 0..n {
                let r = w.rng.next_u64();
                let ok = if r & 1 == 0 {
                    w.count_name("read");
                    let k = w.rng.below(num);
                    w.op(|w| w.get(k))
                } else {
                    // Half of the creates aim at present keys, half at keys past `num`.
                    let k = w
                        .rng
                        .below(num)
                        .saturating_add(if r & 2 == 0 { 0 } else { num });
                    w.op(|w| w.put_if_absent(k))
                };
                if !ok {
                    break;
                }
            }
        }
        Workload::ScanGroup => {
            let groups = ctx.codec.groups;
            if groups == 0 {
                w.out.error = Some(EngineError::Failed(
                    "scangroup needs semi-sorted keys (--key-groups G)".into(),
                ));
                ctx.stop.store(true, Ordering::Relaxed);
            } else {
                let count = num.div_ceil(groups);
                for _ in 0..n {
                    let g = w.rng.below(count);
                    if !w.op(|w| w.scan_group(g)) {
                        break;
                    }
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
    fn shares_cover_everything() {
        let parts: Vec<_> = (0..3).map(|t| share(10, 3, t)).collect();
        assert_eq!(parts, vec![(0, 3), (3, 6), (6, 10)]);
    }
}
