//! Runs one workload on one engine: worker threads, the throughput sampler and progress bar,
//! the optional wait for compactions, and the before/after counters that give write
//! amplification, stall time, block reads and disk usage for the phase.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::engine::{BenchEngine, EngineError, WrittenByCause};
use super::keys::KeyCodec;
use super::metrics::{self, DiskUsage, Latency, Sampler};
use super::presence::RunState;
use super::worker::{Ctx, ThreadOutcome};
use super::workloads::{run_thread, run_writer, Workload};

/// Knobs of a phase, from the command line.
#[derive(Debug, Clone)]
pub struct PhaseConfig {
    /// `--num`.
    pub num: u64,
    /// `--reads`.
    pub reads: u64,
    /// `--threads`.
    pub threads: u64,
    /// `--seed`.
    pub seed: u64,
    /// `--seek-nexts`.
    pub seek_nexts: usize,
    /// `--request-distribution`.
    pub request_distribution: Option<super::ycsb::Distribution>,
    /// `--wait-compaction`.
    pub wait_compaction: bool,
    /// Show a progress bar on stderr.
    pub progress: bool,
    /// Throughput sampling interval.
    pub sample_interval: Duration,
}

/// Everything measured for one workload on one engine.
pub struct WorkloadResult {
    /// Workload name.
    pub name: String,
    /// Does the workload write?
    pub writes: bool,
    /// Operations completed.
    pub ops: u64,
    /// Wall time of the operations (without the wait for compactions).
    pub seconds: f64,
    /// Key+value bytes moved.
    pub bytes: u64,
    /// Latencies.
    pub latency: Latency,
    /// Lookups that found their key (reading workloads).
    pub found: Option<u64>,
    /// Lookups of keys known to be present.
    pub expected_found: Option<u64>,
    /// Lookups made.
    pub lookups: Option<u64>,
    /// User bytes written (the engine's count for Scree, the benchmark's for peers).
    pub user_bytes: u64,
    /// Bytes the whole process wrote (`wchar` delta).
    pub wchar_bytes: Option<u64>,
    /// Engine-reported bytes written by cause.
    pub engine_written: Option<WrittenByCause>,
    /// Bytes the engine's flushes and compactions wrote into each level (index = level).
    pub engine_written_by_level: Option<Vec<u64>>,
    /// Stall seconds during the phase.
    pub stall_seconds: Option<f64>,
    /// The part of them spent waiting for a flush (Scree only).
    pub memtable_stall_seconds: Option<f64>,
    /// Seconds of flushes and of compaction jobs during the phase (Scree only).
    pub flush_seconds: Option<f64>,
    pub compaction_seconds: Option<f64>,
    /// The longest flush since the database was opened, at the phase's end (Scree only).
    pub max_flush_seconds: Option<f64>,
    /// The part of them spent in slowdown delays (Scree only).
    pub slowdown_seconds: Option<f64>,
    /// Data block reads during the phase.
    pub data_block_reads: Option<u64>,
    /// Metadata block reads during the phase.
    pub metadata_block_reads: Option<u64>,
    /// Data blocks found in the block cache during the phase.
    pub data_block_cache_hits: Option<u64>,
    /// Disk usage after the phase.
    pub disk: Option<DiskUsage>,
    /// Resident memory of the process: the peak during the phase, the resident set at its end.
    pub memory: Option<metrics::Memory>,
    /// Index and filter bytes the engine pins outside its block cache at the phase's end.
    pub pinned_metadata_bytes: Option<u64>,
    /// The layout's job counters at the phase's end, cumulative since open.
    pub layout_counters: Option<serde_json::Value>,
    /// Keys present at the phase's end (the benchmark's model).
    pub live_keys: u64,
    /// The band emulator's counts during the phase (`--device smr-*`).
    pub device: Option<super::engine::DeviceCounters>,
    /// CPU seconds each thread role ran while the operations ran (not during the wait for
    /// compactions): `bench-client` for the benchmark's own threads, the engine's thread
    /// names without instance numbers for the rest (Linux only).
    pub cpu_seconds_by_thread: Option<BTreeMap<String, f64>>,
    /// How long waiting for compactions took.
    pub wait_compaction_seconds: Option<f64>,
    /// (t, ops completed) samples.
    pub samples: Vec<(f64, u64)>,
    /// YCSB operation counts.
    pub op_counts: BTreeMap<&'static str, u64>,
    /// The engine does not support this workload (message).
    pub unsupported: Option<String>,
    /// Why the workload failed (engine error or wrong read results).
    pub error: Option<String>,
}

impl WorkloadResult {
    /// Pinned index + filter bits per live key at the phase's end.
    pub fn pinned_bits_per_key(&self) -> Option<f64> {
        (self.live_keys > 0).then_some(())?;
        self.pinned_metadata_bytes
            .map(|b| b as f64 * 8.0 / self.live_keys as f64)
    }

    /// Multiplicative write amplification on the band emulator: device bytes written / user
    /// bytes.
    pub fn mwa(&self) -> Option<f64> {
        self.per_user_byte(self.device.map(|d| d.device_written))
    }

    /// Operations per second.
    pub fn ops_per_sec(&self) -> f64 {
        if self.seconds > 0.0 {
            self.ops as f64 / self.seconds
        } else {
            0.0
        }
    }
    /// Megabytes (10⁶) of keys and values per second.
    pub fn mb_per_sec(&self) -> f64 {
        if self.seconds > 0.0 {
            self.bytes as f64 / 1e6 / self.seconds
        } else {
            0.0
        }
    }
    fn per_user_byte(&self, n: Option<u64>) -> Option<f64> {
        (self.user_bytes > 0).then_some(())?;
        n.map(|n| n as f64 / self.user_bytes as f64)
    }
    /// Engine-reported bytes written ÷ user bytes.
    pub fn write_amplification(&self) -> Option<f64> {
        self.per_user_byte(self.engine_written.as_ref().map(|w| w.total()))
    }
    /// Process `wchar` ÷ user bytes.
    pub fn wchar_write_amplification(&self) -> Option<f64> {
        self.per_user_byte(self.wchar_bytes)
    }
    fn per_op(&self, n: Option<u64>) -> Option<f64> {
        (self.ops > 0).then_some(())?;
        n.map(|n| n as f64 / self.ops as f64)
    }
    /// CPU cores the thread roles that `pick` selects kept busy on average while the
    /// operations ran (CPU seconds ÷ wall seconds).
    pub fn cpu_cores(&self, pick: impl Fn(&str) -> bool) -> Option<f64> {
        (self.seconds > 0.0).then_some(())?;
        let m = self.cpu_seconds_by_thread.as_ref()?;
        Some(
            m.iter()
                .filter(|(r, _)| pick(r))
                .map(|(_, s)| s)
                .sum::<f64>()
                / self.seconds,
        )
    }
    /// Data block reads per operation.
    pub fn data_block_reads_per_op(&self) -> Option<f64> {
        self.per_op(self.data_block_reads)
    }
    /// Metadata block reads per operation.
    pub fn metadata_block_reads_per_op(&self) -> Option<f64> {
        self.per_op(self.metadata_block_reads)
    }
    /// Data blocks found in the block cache per operation.
    pub fn data_block_cache_hits_per_op(&self) -> Option<f64> {
        self.per_op(self.data_block_cache_hits)
    }
    /// Whether this result makes the run fail.
    pub fn failed(&self) -> bool {
        self.error.is_some()
    }
}

fn progress_bar(cfg: &PhaseConfig, label: &str, total: u64) -> ProgressBar {
    if !cfg.progress {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template(
        "{prefix:>28} [{elapsed_precise}] {wide_bar} {human_pos}/{human_len} (eta {eta})",
    ) {
        pb.set_style(style);
    }
    pb.set_prefix(label.to_string());
    pb
}

/// The name of the benchmark's client threads.
pub const CLIENT_THREAD: &str = "bench-client";
/// The name of readwhilewriting's writer thread.
pub const WRITER_THREAD: &str = "bench-writer";

/// CPU seconds by thread role since `before`, with the clients' own measure under
/// [`CLIENT_THREAD`] and the writer's under [`WRITER_THREAD`]. A live thread that still carries
/// one of those names was started by one of them (a peer engine's thread inherits its
/// creator's name) and is reported apart. `None` where `/proc` gives no CPU times.
fn cpu_by_role(
    before: &BTreeMap<u64, (String, f64)>,
    clients: Option<f64>,
    writer: Option<f64>,
    client_tids: &[u64],
) -> Option<BTreeMap<String, f64>> {
    let clients = clients?;
    let mut after = metrics::cpu_by_thread();
    after.retain(|tid, _| !client_tids.contains(tid));
    let mut roles = BTreeMap::new();
    for (role, secs) in metrics::cpu_delta_by_role(before, &after) {
        let role = if role == CLIENT_THREAD || role == WRITER_THREAD {
            format!("started by {role}")
        } else {
            role
        };
        *roles.entry(role).or_insert(0.0) += secs;
    }
    roles.insert(CLIENT_THREAD.to_string(), clients);
    if let Some(w) = writer {
        roles.insert(WRITER_THREAD.to_string(), w);
    }
    Some(roles)
}

/// Runs `workload` on `engine` (whose files are under `dir`).
pub fn run(
    engine: &dyn BenchEngine,
    dir: &Path,
    state: &RunState,
    codec: &KeyCodec,
    workload: Workload,
    cfg: &PhaseConfig,
    label: &str,
) -> WorkloadResult {
    let total = workload.ops(cfg.num, cfg.reads);
    let threads = cfg.threads.max(1);
    let before = engine.counters();
    let wchar_before = metrics::process_wchar();

    // Before the clock starts: the `latest` chooser sums ζ over every record.
    let ycsb = match workload {
        Workload::Ycsb(letter) => {
            super::workloads::ycsb_setup(letter, cfg.num, total, cfg.request_distribution)
        }
        _ => None,
    };

    let pb = progress_bar(cfg, &format!("{label} {workload}"), total);
    let pb2 = pb.clone();
    let sampler = Sampler::start(cfg.sample_interval, move |n| pb2.set_position(n));
    let progress = sampler.counter();
    let stop = AtomicBool::new(false);
    let racy = match workload {
        Workload::ReadWhileWriting => true,
        Workload::Ycsb(_) => threads > 1 && workload.max_new_records(0, 1) > 0,
        // Another thread's put or create may land between a check and the presence bit.
        Workload::MixBlind | Workload::MixNonBlind => threads > 1,
        _ => false,
    };
    let ctx = Ctx {
        engine,
        codec,
        state,
        num: cfg.num,
        seed: cfg.seed,
        seek_nexts: cfg.seek_nexts,
        stop: &stop,
        progress: &progress,
        racy,
        total_ops: total,
        ycsb,
    };

    let cpu_before = metrics::cpu_by_thread();
    let peak_is_phase = metrics::reset_peak_rss();
    let start = Instant::now();
    let mut outcome = ThreadOutcome::default();
    let mut writer_outcome = None;
    // CPU seconds of the client threads, each measured by itself just before it returns, and
    // their thread ids (a joined thread can still be listed in /proc for a moment).
    let mut client_cpu: Option<f64> = Some(0.0);
    let mut writer_cpu: Option<f64> = None;
    let mut client_tids: Vec<u64> = Vec::new();
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let ctx = &ctx;
                std::thread::Builder::new()
                    .name(CLIENT_THREAD.into())
                    .spawn_scoped(s, move || {
                        let o = run_thread(ctx, workload, t, threads);
                        (o, metrics::thread_cpu_seconds())
                    })
            })
            .collect();
        let writer = (workload == Workload::ReadWhileWriting).then(|| {
            let (ctx, done) = (&ctx, &done);
            std::thread::Builder::new()
                .name(WRITER_THREAD.into())
                .spawn_scoped(s, move || {
                    let o = run_writer(ctx, done);
                    (o, metrics::thread_cpu_seconds())
                })
        });
        let mut add_cpu = |c: Option<(u64, f64)>| {
            client_tids.extend(c.map(|(tid, _)| tid));
            client_cpu = client_cpu.zip(c).map(|(a, (_, b))| a + b);
        };
        for h in workers {
            match h.map(|h| h.join()) {
                Ok(Ok((o, cpu))) => {
                    outcome.merge(o);
                    add_cpu(cpu);
                }
                Ok(Err(_)) => {
                    outcome.error = Some(EngineError::Failed("a worker thread panicked".into()))
                }
                Err(e) => {
                    outcome.error = Some(EngineError::Failed(format!(
                        "could not start a worker thread: {e}"
                    )))
                }
            }
        }
        done.store(true, Ordering::Relaxed);
        if let Some(h) = writer {
            writer_outcome = Some(match h.map(|h| h.join()) {
                Ok(Ok((o, cpu))) => {
                    client_tids.extend(cpu.map(|(tid, _)| tid));
                    writer_cpu = cpu.map(|(_, secs)| secs);
                    Ok(o)
                }
                Ok(Err(_)) => Err("the writer thread panicked".to_string()),
                Err(e) => Err(format!("could not start the writer thread: {e}")),
            });
        }
    });
    if let Err(e) = engine.finish_writes() {
        if outcome.error.is_none() {
            outcome.error = Some(e);
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    let cpu_seconds_by_thread = cpu_by_role(&cpu_before, client_cpu, writer_cpu, &client_tids);
    let samples = sampler.finish();
    pb.finish_and_clear();
    match writer_outcome {
        Some(Ok(w)) => outcome.merge(w),
        Some(Err(m)) => outcome.error = Some(EngineError::Failed(m)),
        None => {}
    }

    let mut unsupported = None;
    let mut error = None;
    match outcome.error.take() {
        Some(EngineError::Unsupported(m)) => unsupported = Some(m),
        Some(EngineError::Failed(m)) => error = Some(format!("engine error: {m}")),
        None => {}
    }
    if outcome.mismatches > 0 {
        let first = outcome.first_mismatch.clone().unwrap_or_default();
        let msg = format!("{} wrong read results; first: {first}", outcome.mismatches);
        error = Some(match error {
            Some(e) => format!("{e}; {msg}"),
            None => msg,
        });
    }

    let mut wait_compaction_seconds = None;
    if cfg.wait_compaction && error.is_none() {
        let t = Instant::now();
        if let Err(e) = engine.wait_for_compactions() {
            error = Some(format!("waiting for compactions: {e}"));
        }
        wait_compaction_seconds = Some(t.elapsed().as_secs_f64());
    }

    let after = engine.counters();
    let memory = metrics::memory(peak_is_phase);
    let wchar_after = metrics::process_wchar();
    let disk = metrics::disk_usage(dir).ok();
    let delta = |a: Option<u64>, b: Option<u64>| Some(a?.saturating_sub(b?));
    let seconds_delta = |a: Option<f64>, b: Option<f64>| Some((a? - b?).max(0.0));
    let engine_user = delta(after.user_bytes, before.user_bytes);
    let lookups = (outcome.lookups > 0 || !workload.writes()).then_some(outcome.lookups);
    let reads_anything = lookups.is_some();
    let unsupported_now = unsupported.is_some();

    WorkloadResult {
        name: workload.name(),
        writes: workload.writes(),
        ops: outcome.ops,
        seconds,
        bytes: outcome.bytes,
        latency: outcome.latency,
        found: (reads_anything && !unsupported_now).then_some(outcome.found),
        expected_found: (reads_anything && !unsupported_now).then_some(outcome.expected_found),
        lookups,
        user_bytes: engine_user.unwrap_or(outcome.user_bytes),
        // Bytes copied into memory maps (Scree's WAL) are written without a `write()` call.
        wchar_bytes: delta(wchar_after, wchar_before)
            .map(|w| w + delta(after.mapped_bytes, before.mapped_bytes).unwrap_or(0)),
        engine_written: match (after.written, before.written) {
            (Some(a), Some(b)) => Some(a.since(&b)),
            _ => None,
        },
        engine_written_by_level: match (&after.level_bytes, &before.level_bytes) {
            (Some(a), Some(b)) => Some(
                a.iter()
                    .enumerate()
                    .map(|(i, x)| x.saturating_sub(b.get(i).copied().unwrap_or(0)))
                    .collect(),
            ),
            _ => None,
        },
        stall_seconds: seconds_delta(after.stall_seconds, before.stall_seconds),
        slowdown_seconds: seconds_delta(after.slowdown_seconds, before.slowdown_seconds),
        memtable_stall_seconds: seconds_delta(
            after.memtable_stall_seconds,
            before.memtable_stall_seconds,
        ),
        flush_seconds: seconds_delta(after.flush_seconds, before.flush_seconds),
        compaction_seconds: seconds_delta(after.compaction_seconds, before.compaction_seconds),
        max_flush_seconds: after.max_flush_seconds,
        data_block_reads: delta(after.data_block_reads, before.data_block_reads),
        metadata_block_reads: delta(after.metadata_block_reads, before.metadata_block_reads),
        data_block_cache_hits: delta(after.data_block_cache_hits, before.data_block_cache_hits),
        disk,
        memory,
        pinned_metadata_bytes: after.pinned_metadata_bytes,
        layout_counters: after.layout_counters.clone(),
        live_keys: state.presence.count_from(0),
        device: match (after.device, before.device) {
            (Some(a), Some(b)) => Some(a.since(&b)),
            _ => None,
        },
        cpu_seconds_by_thread,
        wait_compaction_seconds,
        samples,
        op_counts: outcome.op_counts,
        unsupported,
        error,
    }
}
