//! Measurements around the workloads: latency histograms, the bytes the process wrote
//! (`/proc/self/io`), resident memory (`/proc/self/status`), the size of a directory, and
//! throughput sampled over time.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

/// Latencies in nanoseconds, 3 significant digits, from 1 ns to one hour.
pub struct Latency {
    hist: Histogram<u64>,
}

impl Default for Latency {
    fn default() -> Self {
        Self::new()
    }
}

impl Latency {
    /// An empty histogram.
    pub fn new() -> Latency {
        let hist = Histogram::new_with_bounds(1, 3_600_000_000_000, 3)
            .expect("1 ns ..= 1 h at 3 significant digits are valid histogram bounds");
        Latency { hist }
    }

    /// Records one operation that took `d`.
    #[inline]
    pub fn record(&mut self, d: Duration) {
        self.hist.saturating_record(d.as_nanos().max(1) as u64);
    }

    /// Adds another thread's histogram.
    pub fn merge(&mut self, other: &Latency) {
        // Same bounds on both sides, so adding cannot fail; saturate if it ever did.
        let _ = self.hist.add(&other.hist);
    }

    /// Operations recorded.
    pub fn count(&self) -> u64 {
        self.hist.len()
    }

    /// The latency at quantile `q` (0..=1) in microseconds.
    pub fn quantile_us(&self, q: f64) -> f64 {
        self.hist.value_at_quantile(q) as f64 / 1000.0
    }

    /// Largest latency in microseconds.
    pub fn max_us(&self) -> f64 {
        self.hist.max() as f64 / 1000.0
    }

    /// Mean latency in microseconds.
    pub fn mean_us(&self) -> f64 {
        self.hist.mean() / 1000.0
    }

    /// (latency µs, fraction of operations at or below it) points for a CDF plot.
    pub fn cdf(&self) -> Vec<(f64, f64)> {
        let total = self.hist.len();
        if total == 0 {
            return Vec::new();
        }
        self.hist
            .iter_quantiles(4)
            .map(|v| {
                (
                    v.value_iterated_to() as f64 / 1000.0,
                    v.quantile_iterated_to(),
                )
            })
            .collect()
    }
}

/// Bytes this process has passed to `write`-like system calls (`wchar` in `/proc/self/io`),
/// whether or not they reached the disk yet. `None` where the file does not exist.
pub fn process_wchar() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/io").ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("wchar:"))
        .and_then(|v| v.trim().parse().ok())
}

/// Resident memory of the process, from `/proc/self/status`, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Memory {
    /// The largest resident set (`VmHWM`): since the phase began when `peak_is_phase`, else
    /// since the process started.
    pub peak: u64,
    /// Whether `peak` covers only the phase (the reset through `/proc/self/clear_refs` worked).
    pub peak_is_phase: bool,
    /// Resident set at the phase's end (`VmRSS`).
    pub rss: u64,
    /// Its anonymous part (`RssAnon`: heap, stacks): memtables, caches, pinned metadata.
    pub anon: u64,
    /// Its file-backed part (`RssFile`): pages of memory-mapped files (Scree's tables with
    /// `mmap_reads`, its WAL), which the kernel can drop and read again.
    pub file: u64,
}

/// Resets the process's peak resident set (`VmHWM`) to its current size by writing `5` to
/// `/proc/self/clear_refs` (Linux 4.0+); returns whether it could.
pub fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// Returns the heap memory the allocator keeps free to the kernel (glibc's `malloc_trim`), so
/// that an engine's resident set does not include what the engines before it in this process
/// freed. Does nothing on other C libraries.
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `malloc_trim` only returns free pages of glibc's heaps to the kernel; it takes
    // the allocator's locks itself and touches no memory a caller owns. Tested by
    // `freed_memory_leaves_the_resident_set`.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// `(VmHWM, VmRSS, RssAnon, RssFile)` in bytes from the text of `/proc/<pid>/status`.
pub fn parse_status_memory(text: &str) -> Option<(u64, u64, u64, u64)> {
    let kb = |name: &str| -> Option<u64> {
        let rest = text.lines().find_map(|l| l.strip_prefix(name))?;
        let n: u64 = rest.trim().strip_suffix("kB")?.trim().parse().ok()?;
        Some(n * 1024)
    };
    Some((
        kb("VmHWM:")?,
        kb("VmRSS:")?,
        kb("RssAnon:")?,
        kb("RssFile:")?,
    ))
}

/// The process's resident memory now; `peak_is_phase` says whether [`reset_peak_rss`] worked
/// when the phase began. `None` where `/proc/self/status` does not exist.
pub fn memory(peak_is_phase: bool) -> Option<Memory> {
    let text = std::fs::read_to_string("/proc/self/status").ok()?;
    let (peak, rss, anon, file) = parse_status_memory(&text)?;
    Some(Memory {
        peak,
        peak_is_phase,
        rss,
        anon,
        file,
    })
}

/// The name of the throughput sampler's thread.
pub const SAMPLER_THREAD: &str = "bench-sampler";

/// Clock ticks per second of the CPU times in `/proc/<pid>/task/<tid>/stat` (`USER_HZ`, fixed
/// at 100 by the Linux ABI on every architecture Scree builds for).
const USER_HZ: f64 = 100.0;

/// User plus system CPU seconds in one `/proc/…/stat` line (fields 14 and 15, counted after
/// the parenthesised thread name, which may itself hold spaces and parentheses).
fn stat_cpu_seconds(stat: &str) -> Option<f64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((utime + stime) as f64 / USER_HZ)
}

/// The calling thread's id and the CPU seconds it has run (Linux; `None` elsewhere). 10 ms
/// resolution.
pub fn thread_cpu_seconds() -> Option<(u64, f64)> {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").ok()?;
    let tid = stat.split_whitespace().next()?.parse().ok()?;
    Some((tid, stat_cpu_seconds(&stat)?))
}

/// A thread's role: its name without a trailing instance number (`scree-bg-1` → `scree-bg`,
/// `rocksdb:low0` → `rocksdb:low`).
pub fn thread_role(name: &str) -> String {
    let role = name
        .trim_end_matches(|c: char| c.is_ascii_digit())
        .trim_end_matches(['-', ':', '_', ' ']);
    if role.is_empty() { name } else { role }.to_string()
}

/// CPU seconds of every live thread of this process: thread id → (role, seconds). Threads
/// that exit between two snapshots are missing from the later one (the benchmark measures its
/// own client threads from inside them). Empty where `/proc` is not Linux's.
pub fn cpu_by_thread() -> BTreeMap<u64, (String, f64)> {
    let mut out = BTreeMap::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return out;
    };
    for task in tasks.flatten() {
        let Some(tid) = task
            .file_name()
            .to_str()
            .and_then(|t| t.parse::<u64>().ok())
        else {
            continue;
        };
        // A thread may exit between the listing and these reads; skip it.
        let (Ok(comm), Ok(stat)) = (
            std::fs::read_to_string(task.path().join("comm")),
            std::fs::read_to_string(task.path().join("stat")),
        ) else {
            continue;
        };
        if let Some(secs) = stat_cpu_seconds(&stat) {
            out.insert(tid, (thread_role(comm.trim_end()), secs));
        }
    }
    out
}

/// CPU seconds by role between two [`cpu_by_thread`] snapshots. A thread only in `after`
/// started in between and counts whole.
pub fn cpu_delta_by_role(
    before: &BTreeMap<u64, (String, f64)>,
    after: &BTreeMap<u64, (String, f64)>,
) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for (tid, (role, secs)) in after {
        let start = before.get(tid).map_or(0.0, |(_, s)| *s);
        *out.entry(role.clone()).or_insert(0.0) += (secs - start).max(0.0);
    }
    out
}

/// Apparent and allocated bytes of every file under `dir`.
#[derive(Debug, Clone, Copy, Default)]
pub struct DiskUsage {
    /// Σ file lengths.
    pub apparent: u64,
    /// Σ allocated blocks × 512.
    pub allocated: u64,
    /// Files counted.
    pub files: u64,
}

/// Walks `dir` (files may vanish under a running compaction; those are skipped).
pub fn disk_usage(dir: &Path) -> std::io::Result<DiskUsage> {
    use std::os::unix::fs::MetadataExt;
    let mut usage = DiskUsage::default();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let entries = match std::fs::read_dir(&d) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && d != dir => continue,
            Err(e) => return Err(e),
        };
        for entry in entries.flatten() {
            let Ok(meta) = entry.metadata() else { continue };
            if meta.is_dir() {
                stack.push(entry.path());
            } else {
                usage.apparent += meta.len();
                usage.allocated += meta.blocks() * 512;
                usage.files += 1;
            }
        }
    }
    Ok(usage)
}

/// Counts operations as they complete (threads add in batches) and samples the count every
/// `interval` on a thread of its own, for throughput-over-time plots and the progress bar.
pub struct Sampler {
    ops: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<Vec<(f64, u64)>>>,
}

impl Sampler {
    /// Starts sampling; `on_sample(ops so far)` runs at every tick (progress bar updates).
    pub fn start(interval: Duration, on_sample: impl Fn(u64) + Send + 'static) -> Sampler {
        let ops = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (o, s) = (ops.clone(), stop.clone());
        let handle = std::thread::Builder::new()
            .name(SAMPLER_THREAD.into())
            .spawn(move || {
                let start = Instant::now();
                let mut samples = vec![(0.0, 0)];
                let mut next = start + interval;
                while !s.load(Ordering::Relaxed) {
                    let now = Instant::now();
                    if now < next {
                        std::thread::sleep((next - now).min(Duration::from_millis(10)));
                        continue;
                    }
                    let n = o.load(Ordering::Relaxed);
                    samples.push((start.elapsed().as_secs_f64(), n));
                    on_sample(n);
                    next += interval;
                }
                samples.push((start.elapsed().as_secs_f64(), o.load(Ordering::Relaxed)));
                samples
            })
            .ok();
        Sampler { ops, stop, handle }
    }

    /// The shared operation counter workers add to.
    pub fn counter(&self) -> Arc<AtomicU64> {
        self.ops.clone()
    }

    /// Stops sampling and returns (seconds since start, ops completed) samples.
    pub fn finish(mut self) -> Vec<(f64, u64)> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default()
    }
}

/// Converts cumulative (t, ops) samples into (t, ops/s) over each interval. The final,
/// partial interval is dropped when it is under 50 ms (its rate would be mostly noise), unless
/// it is the only one.
pub fn rates(samples: &[(f64, u64)]) -> Vec<(f64, f64)> {
    let n = samples.len();
    samples
        .windows(2)
        .enumerate()
        .filter_map(|(i, w)| {
            let [(t0, n0), (t1, n1)] = w else { return None };
            let dt = t1 - t0;
            let short_tail = i + 2 == n && n > 2 && dt < 0.05;
            (dt > 1e-6 && !short_tail).then(|| (*t1, n1.saturating_sub(*n0) as f64 / dt))
        })
        .collect()
}

/// The rate over each `window` seconds that ends at a sample (ops/s, from cumulative (t, ops)
/// samples), for every sample at least `window` after the start: the moving rate that shows
/// a dip a single short interval hides or exaggerates. Empty for a phase shorter than
/// `window`.
pub fn moving_rates(samples: &[(f64, u64)], window: f64) -> Vec<(f64, f64)> {
    let mut out = Vec::new();
    let mut start = 0;
    for &(t, n) in samples {
        if t < window {
            continue;
        }
        // The latest sample at or before t - window: the window's start.
        while samples
            .get(start + 1)
            .is_some_and(|&(t1, _)| t1 <= t - window + 1e-9)
        {
            start += 1;
        }
        let Some(&(t0, n0)) = samples.get(start) else {
            break;
        };
        if t - t0 > 1e-6 {
            out.push((t, n.saturating_sub(n0) as f64 / (t - t0)));
        }
    }
    out
}

/// The lowest [`moving_rates`] over one second, if the phase lasted that long.
pub fn slowest_second(samples: &[(f64, u64)]) -> Option<f64> {
    moving_rates(samples, 1.0)
        .into_iter()
        .map(|(_, r)| r)
        .reduce(f64::min)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_quantiles() {
        let mut l = Latency::new();
        for us in 1..=1000u64 {
            l.record(Duration::from_micros(us));
        }
        assert_eq!(l.count(), 1000);
        assert!((l.quantile_us(0.5) - 500.0).abs() < 1.0);
        assert!((l.quantile_us(0.99) - 990.0).abs() < 2.0);
        assert!((l.max_us() - 1000.0).abs() < 1.0);
        let cdf = l.cdf();
        assert!(cdf.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1));
        assert!((cdf.last().map_or(0.0, |p| p.1) - 1.0).abs() < 1e-9);
    }

    #[test]
    fn wchar_grows_when_we_write() {
        let Some(before) = process_wchar() else {
            return;
        };
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("f"), vec![0u8; 100_000]).expect("write");
        let after = process_wchar().expect("wchar");
        assert!(after - before >= 100_000);
        let usage = disk_usage(dir.path()).expect("usage");
        assert_eq!(usage.apparent, 100_000);
        assert_eq!(usage.files, 1);
    }

    #[test]
    fn status_memory_parses() {
        let text = "Name:\tscree\nVmPeak:\t  900 kB\nVmHWM:\t   500 kB\nVmRSS:\t   400 kB\n\
RssAnon:\t   300 kB\nRssFile:\t    90 kB\nRssShmem:\t 10 kB\n";
        assert_eq!(
            parse_status_memory(text),
            Some((500 << 10, 400 << 10, 300 << 10, 90 << 10))
        );
        assert_eq!(parse_status_memory("VmHWM:\t5 kB\n"), None);
    }

    /// Touching 64 MiB raises the peak; after a reset the peak falls back to the current
    /// resident set once the memory is freed (where the kernel lets the process reset it).
    #[test]
    fn peak_rss_rises_and_resets() {
        // Other tests of this binary allocate and free on their threads meanwhile, which can
        // hide the rise in one attempt (CI saw +21 MiB once): three attempts, each of which
        // must see the whole rise for the test to pass.
        let mut seen = Vec::new();
        let (big, during) = loop {
            let Some(before) = memory(false) else {
                return;
            };
            let big = vec![1u8; 64 << 20];
            std::hint::black_box(&big);
            let during = memory(false).expect("memory");
            if during.peak >= before.rss + (60 << 20) && during.anon >= 60 << 20 {
                break (big, during);
            }
            seen.push((before, during));
            assert!(seen.len() < 3, "no rise of 64 MiB seen: {seen:?}");
        };
        drop(big);
        if reset_peak_rss() {
            let after = memory(true).expect("memory");
            // Other tests' threads run meanwhile: allow them 32 MiB.
            assert!(
                after.peak < during.peak - (32 << 20),
                "{during:?} {after:?}"
            );
        }
    }

    /// Many small blocks, freed, stay in glibc's heap until `release_free_memory` hands them
    /// back (large blocks are mapped and unmapped directly, so small ones are what it is for).
    ///
    /// The resident set is the whole process's, and the other tests of this binary allocate
    /// on their threads meanwhile (tens of MiB at times), so the check runs in a child process
    /// of this test binary that runs this test alone.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn freed_memory_leaves_the_resident_set() {
        const ALONE: &str = "SCREE_RSS_TEST_ALONE";
        if std::env::var_os(ALONE).is_none() {
            let out = std::process::Command::new(std::env::current_exe().expect("test binary"))
                .args([
                    "--exact",
                    "bench::metrics::tests::freed_memory_leaves_the_resident_set",
                    "--test-threads=1",
                    "--nocapture",
                ])
                .env(ALONE, "1")
                .output()
                .expect("running the test alone");
            let text = String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "{text}");
            assert!(text.contains("1 passed"), "the child ran no test: {text}");
            return;
        }
        let Some(before) = memory(false) else {
            return;
        };
        // 64 MiB in 4 KiB blocks, below glibc's mmap threshold, then a small block above
        // them that stays allocated, so that freeing them cannot simply shrink the heap's top.
        let blocks: Vec<Vec<u8>> = (0..16_384).map(|i| vec![i as u8; 4096]).collect();
        let fence = vec![1u8; 64];
        let full = memory(false).expect("memory");
        assert!(full.anon >= before.anon + (48 << 20), "{before:?} {full:?}");
        drop(blocks);
        release_free_memory();
        let after = memory(false).expect("memory");
        std::hint::black_box(&fence);
        assert!(after.anon + (40 << 20) < full.anon, "{full:?} {after:?}");
    }

    #[test]
    fn cpu_seconds_parse_after_a_name_with_spaces_and_parentheses() {
        // pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
        // utime stime ...
        let line = "42 (a (b) c) R 1 2 3 4 5 6 7 8 9 10 250 130 0 0 20 0 1";
        assert_eq!(stat_cpu_seconds(line), Some(3.8));
        assert_eq!(stat_cpu_seconds("42 (x) R 1 2"), None);
        assert_eq!(stat_cpu_seconds("no parenthesis"), None);
        assert_eq!(thread_role("scree-bg-1"), "scree-bg");
        assert_eq!(thread_role("rocksdb:low0"), "rocksdb:low");
        assert_eq!(thread_role("bench-client"), "bench-client");
        assert_eq!(thread_role("42"), "42");
    }

    #[test]
    fn a_busy_thread_is_counted_under_its_role() {
        if thread_cpu_seconds().is_none() {
            return; // not Linux
        }
        let before = cpu_by_thread();
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = Arc::clone(&stop);
        let (spun_tx, spun_rx) = std::sync::mpsc::channel();
        let h = std::thread::Builder::new()
            .name("cpu-test-spin-7".into())
            .spawn(move || {
                // Spins until this thread has used 0.1 s of CPU by its own measure (however
                // long a busy machine takes to give it that), then stays alive to be counted.
                let t = Instant::now();
                let mut x = 0u64;
                let used = || thread_cpu_seconds().map_or(0.0, |(_, s)| s);
                while used() < 0.1 && t.elapsed() < Duration::from_secs(30) {
                    for _ in 0..100_000 {
                        x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                    }
                }
                let own = thread_cpu_seconds();
                let _ = spun_tx.send(());
                while !stop2.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(1));
                }
                (x, own)
            })
            .expect("spawn");
        spun_rx.recv().expect("the spin thread ends its spinning");
        let after = cpu_by_thread();
        stop.store(true, Ordering::Relaxed);
        let (_, own) = h.join().expect("join");
        let by_role = cpu_delta_by_role(&before, &after);
        let spun = by_role.get("cpu-test-spin").copied().unwrap_or(0.0);
        // At least the 0.1 s it spun (the clock ticks in hundredths), not wildly more.
        assert!((0.09..=5.0).contains(&spun), "spin thread counted {spun} s");
        assert!(own.is_some_and(|(_, o)| o >= 0.05), "own measure {own:?}");
        let (tid, _) = own.expect("own measure");
        assert_eq!(
            after.get(&tid).map(|(role, _)| role.as_str()),
            Some("cpu-test-spin")
        );
    }

    #[test]
    fn moving_rates_over_a_second() {
        // 1000 ops per 0.1 s, except none in [1.0, 1.2].
        let mut s = vec![(0.0, 0u64)];
        let mut n = 0;
        for i in 1..=30 {
            let t = f64::from(i) / 10.0;
            if !(11..=12).contains(&i) {
                n += 1000;
            }
            s.push((t, n));
        }
        let m = moving_rates(&s, 1.0);
        assert_eq!(m.len(), 21, "one per sample from t = 1.0 on");
        assert!((m[0].1 - 10_000.0).abs() < 1e-6);
        // Windows holding the 0.2 s gap ran at 8,000/s.
        let slowest = slowest_second(&s).expect("3 s of samples");
        assert!((slowest - 8_000.0).abs() < 1e-6, "{slowest}");
        assert!(slowest_second(&s[..5]).is_none());
    }

    #[test]
    fn rates_from_samples() {
        let r = rates(&[(0.0, 0), (0.1, 100), (0.2, 300)]);
        assert_eq!(r.len(), 2);
        assert_eq!(
            rates(&[(0.0, 0), (0.1, 100), (0.2, 300), (0.21, 301)]).len(),
            2
        );
        assert_eq!(rates(&[(0.0, 0), (0.01, 100)]).len(), 1);
        assert!((r[0].1 - 1000.0).abs() < 1e-6 && (r[1].1 - 2000.0).abs() < 1e-6);
    }
}
