//! The side-by-side table on stdout and the `--json` document (schema in docs/benchmarks.md).

use std::fmt::Write as _;

use serde::Serialize;
use serde_json::{json, Value};

use super::metrics::SAMPLER_THREAD;
use super::phase::{WorkloadResult, CLIENT_THREAD, WRITER_THREAD};
use super::{BenchArgs, EngineSpec, RunResult};

/// The benchmark's own operation threads (readers, writers, readwhilewriting's writer).
fn is_client(role: &str) -> bool {
    role == CLIENT_THREAD || role == WRITER_THREAD
}

/// `latency_us` of the JSON schema.
#[derive(Serialize, Debug)]
pub struct LatencyJson {
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Largest.
    pub max: f64,
    /// Mean.
    pub mean: f64,
}

/// One workload in the JSON schema (required fields first, then additions).
#[derive(Serialize, Debug)]
pub struct WorkloadJson {
    pub name: String,
    pub ops: u64,
    pub seconds: f64,
    pub ops_per_sec: f64,
    pub latency_us: LatencyJson,
    pub found: Option<u64>,
    pub user_bytes: Option<u64>,
    pub bytes_written: Option<u64>,
    pub write_amplification: Option<f64>,
    pub disk_bytes: Option<u64>,
    pub stall_seconds: Option<f64>,
    // Additions.
    pub memtable_stall_seconds: Option<f64>,
    pub slowdown_seconds: Option<f64>,
    pub flush_seconds: Option<f64>,
    pub max_flush_seconds: Option<f64>,
    pub compaction_seconds: Option<f64>,
    pub mb_per_sec: f64,
    pub expected_found: Option<u64>,
    pub lookups: Option<u64>,
    pub wchar_write_amplification: Option<f64>,
    pub engine_bytes_written: Option<u64>,
    pub engine_bytes_written_by_cause: Option<Value>,
    pub engine_bytes_written_by_level: Option<Vec<u64>>,
    pub disk_allocated_bytes: Option<u64>,
    pub disk_files: Option<u64>,
    pub data_block_reads_per_op: Option<f64>,
    pub metadata_block_reads_per_op: Option<f64>,
    pub data_block_cache_hits_per_op: Option<f64>,
    pub wait_compaction_seconds: Option<f64>,
    pub cpu_seconds_by_thread: Option<Value>,
    pub op_counts: Option<Value>,
    pub unsupported: Option<String>,
    pub error: Option<String>,
    /// `[seconds since start, ops/s over the previous interval]`.
    pub throughput_samples: Vec<(f64, f64)>,
    /// The lowest rate over any one second of the phase (ops/s; `null` if shorter).
    pub slowest_second_ops_per_sec: Option<f64>,
    /// The process's largest resident set during the phase (`VmHWM`, reset as the phase
    /// begins), or since the process started where the reset is not permitted.
    pub peak_rss_bytes: Option<u64>,
    /// `"phase"` or `"process"`: what `peak_rss_bytes` covers.
    pub peak_rss_scope: Option<&'static str>,
    /// Resident set at the phase's end, and its anonymous and file-backed parts.
    pub rss_bytes: Option<u64>,
    pub rss_anon_bytes: Option<u64>,
    pub rss_file_bytes: Option<u64>,
    /// Index and filter bytes the engine pins outside its block cache at the phase's end.
    pub pinned_metadata_bytes: Option<u64>,
    /// `pinned_metadata_bytes` × 8 / `live_keys`.
    pub pinned_metadata_bits_per_key: Option<f64>,
    /// The layout's job counters at the phase's end, cumulative since the database was
    /// opened (`lightweight`: compactions, resets, room compactions, rewrites, divisions and
    /// their bytes; `Stats::lightweight`; `leveled`: compactions, trivial moves, seek
    /// compactions and the bytes they wrote).
    pub engine_layout_counters: Option<Value>,
    /// Keys present at the phase's end.
    pub live_keys: u64,
    /// Band emulator (`--device smr-*`): bytes the engine handed to the device.
    pub device_host_bytes_written: Option<u64>,
    /// Band emulator: bytes the device wrote (host bytes plus read-modify-writes).
    pub device_bytes_written: Option<u64>,
    /// Band emulator: bytes the engine read from the device.
    pub device_host_bytes_read: Option<u64>,
    /// Band emulator: bytes the device read.
    pub device_bytes_read: Option<u64>,
    /// Band emulator: read-modify-writes.
    pub device_read_modify_writes: Option<u64>,
    /// Band emulator: device bytes written / host bytes written.
    pub awa: Option<f64>,
    /// Band emulator: device bytes written / user bytes.
    pub mwa: Option<f64>,
}

fn round(x: f64, digits: i32) -> f64 {
    let m = 10f64.powi(digits);
    (x * m).round() / m
}

/// The JSON form of one workload result.
pub fn workload_json(w: &WorkloadResult) -> WorkloadJson {
    let unsupported = w.unsupported.is_some();
    let lat = &w.latency;
    let has_lat = lat.count() > 0;
    let q = |x: f64| {
        if has_lat {
            round(lat.quantile_us(x), 3)
        } else {
            0.0
        }
    };
    let writes_measured = w.writes && !unsupported;
    WorkloadJson {
        name: w.name.clone(),
        ops: w.ops,
        seconds: round(w.seconds, 6),
        ops_per_sec: round(w.ops_per_sec(), 1),
        latency_us: LatencyJson {
            p50: q(0.5),
            p99: q(0.99),
            p999: q(0.999),
            max: if has_lat { round(lat.max_us(), 3) } else { 0.0 },
            mean: if has_lat {
                round(lat.mean_us(), 3)
            } else {
                0.0
            },
        },
        found: w.found,
        user_bytes: (!unsupported).then_some(w.user_bytes),
        bytes_written: w.wchar_bytes,
        write_amplification: writes_measured
            .then(|| w.write_amplification())
            .flatten()
            .map(|x| round(x, 4)),
        disk_bytes: w.disk.map(|d| d.apparent),
        stall_seconds: w.stall_seconds,
        memtable_stall_seconds: w.memtable_stall_seconds,
        slowdown_seconds: w.slowdown_seconds,
        flush_seconds: w.flush_seconds,
        max_flush_seconds: w.max_flush_seconds,
        compaction_seconds: w.compaction_seconds,
        mb_per_sec: round(w.mb_per_sec(), 3),
        expected_found: w.expected_found,
        lookups: w.lookups,
        wchar_write_amplification: writes_measured
            .then(|| w.wchar_write_amplification())
            .flatten()
            .map(|x| round(x, 4)),
        engine_bytes_written: w.engine_written.as_ref().map(|e| e.total()),
        engine_bytes_written_by_cause: w.engine_written.as_ref().map(|e| {
            let map: serde_json::Map<String, Value> = e
                .parts()
                .iter()
                .map(|(k, v)| ((*k).to_string(), json!(v)))
                .collect();
            Value::Object(map)
        }),
        engine_bytes_written_by_level: w.engine_written_by_level.clone(),
        disk_allocated_bytes: w.disk.map(|d| d.allocated),
        disk_files: w.disk.map(|d| d.files),
        data_block_reads_per_op: w.data_block_reads_per_op().map(|x| round(x, 4)),
        metadata_block_reads_per_op: w.metadata_block_reads_per_op().map(|x| round(x, 4)),
        data_block_cache_hits_per_op: w.data_block_cache_hits_per_op().map(|x| round(x, 4)),
        wait_compaction_seconds: w.wait_compaction_seconds.map(|x| round(x, 6)),
        cpu_seconds_by_thread: w.cpu_seconds_by_thread.as_ref().map(|m| {
            let map: serde_json::Map<String, Value> = m
                .iter()
                .map(|(k, v)| (k.clone(), json!(round(*v, 2))))
                .collect();
            Value::Object(map)
        }),
        op_counts: (!w.op_counts.is_empty()).then(|| json!(w.op_counts)),
        unsupported: w.unsupported.clone(),
        error: w.error.clone(),
        throughput_samples: super::metrics::rates(&w.samples)
            .into_iter()
            .map(|(t, r)| (round(t, 3), round(r, 1)))
            .collect(),
        slowest_second_ops_per_sec: super::metrics::slowest_second(&w.samples).map(|x| round(x, 1)),
        peak_rss_bytes: w.memory.map(|m| m.peak),
        peak_rss_scope: w
            .memory
            .map(|m| if m.peak_is_phase { "phase" } else { "process" }),
        rss_bytes: w.memory.map(|m| m.rss),
        rss_anon_bytes: w.memory.map(|m| m.anon),
        rss_file_bytes: w.memory.map(|m| m.file),
        pinned_metadata_bytes: w.pinned_metadata_bytes,
        engine_layout_counters: w.layout_counters.clone(),
        pinned_metadata_bits_per_key: w.pinned_bits_per_key().map(|x| round(x, 3)),
        live_keys: w.live_keys,
        device_host_bytes_written: w.device.map(|d| d.host_written),
        device_bytes_written: w.device.map(|d| d.device_written),
        device_host_bytes_read: w.device.map(|d| d.host_read),
        device_bytes_read: w.device.map(|d| d.device_read),
        device_read_modify_writes: w.device.map(|d| d.rmws),
        awa: w.device.and_then(|d| d.awa()).map(|x| round(x, 4)),
        mwa: writes_measured
            .then(|| w.mwa())
            .flatten()
            .map(|x| round(x, 4)),
    }
}

/// The `config` object.
pub fn config_json(args: &BenchArgs, reads: u64, specs: &[EngineSpec]) -> Value {
    json!({
        "workloads": args.workloads.iter().map(|w| w.name()).collect::<Vec<_>>(),
        "engines": specs.iter().map(EngineSpec::label).collect::<Vec<_>>(),
        "num": args.num,
        "reads": reads,
        "key_size": args.key_size,
        "key_groups": args.key_groups,
        "prefix_len": args.prefix_len,
        "value_size": args.value_size,
        "threads": args.threads,
        "seed": args.seed,
        "seek_nexts": args.seek_nexts,
        "write_buffer_mb": args.write_buffer_mb,
        "bloom_bits": args.bloom_bits,
        "sync": args.sync,
        "wait_compaction": args.wait_compaction,
        "direct_reads": args.direct_reads,
        "block_cache_mb": args.block_cache_mb,
        "device": args.device.name(),
        "band_mb": args.band_mb,
        "db": args.db.as_ref().map(|p| p.display().to_string()),
        "scree_version": env!("CARGO_PKG_VERSION"),
        "cpus": std::thread::available_parallelism().map_or(0, |n| n.get()),
    })
}

/// The whole `--json` document.
pub fn json(config: Value, runs: &[RunResult]) -> Value {
    let runs: Vec<Value> = runs
        .iter()
        .map(|r| {
            json!({
                "engine": r.engine,
                "layout": r.layout,
                "label": r.label,
                "settings": r.settings.iter()
                    .map(|(k, v)| (k.clone(), json!(v)))
                    .collect::<serde_json::Map<String, Value>>(),
                "wait_method": r.wait_method,
                "db_dir": r.kept_at.as_ref().map(|p| p.display().to_string()),
                "failed": r.failed(),
                "error": r.error,
                "peak_rss_bytes": r.workloads.iter().filter_map(|w| w.memory.map(|m| m.peak)).max(),
                "workloads": r.workloads.iter().map(workload_json).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({ "config": config, "runs": runs })
}

/// `1.23M`, `45.6k`, `789`, `1.50`: short numbers for tables and axes.
pub fn human(x: f64) -> String {
    let a = x.abs();
    if a >= 1e9 {
        format!("{:.2}G", x / 1e9)
    } else if a >= 1e6 {
        format!("{:.2}M", x / 1e6)
    } else if a >= 1e4 {
        format!("{:.1}k", x / 1e3)
    } else if a >= 100.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.2}")
    }
}

fn opt<T>(v: Option<T>, f: impl Fn(T) -> String) -> String {
    v.map_or_else(|| "-".into(), f)
}

/// One progress line per finished workload (stderr).
pub fn one_line(label: &str, w: &WorkloadResult) -> String {
    if let Some(u) = &w.unsupported {
        return format!("{label:>20} {:<16} unsupported: {u}", w.name);
    }
    let mut s = format!(
        "{label:>20} {:<16} {:>9} ops/s  p50 {:.1} µs  p99 {:.1} µs",
        w.name,
        human(w.ops_per_sec()),
        w.latency.quantile_us(0.5),
        w.latency.quantile_us(0.99)
    );
    if let (Some(f), Some(l)) = (w.found, w.lookups) {
        let _ = write!(s, "  found {f}/{l}");
    }
    if w.writes {
        let _ = write!(
            s,
            "  WA {} (wchar {})",
            opt(w.write_amplification(), |x| format!("{x:.2}")),
            opt(w.wchar_write_amplification(), |x| format!("{x:.2}"))
        );
    }
    if let Some(e) = &w.error {
        let _ = write!(s, "  FAILED: {e}");
    }
    s
}

/// The side-by-side table: one block per workload, one column per engine.
pub fn table(runs: &[RunResult], args: &BenchArgs) -> String {
    let mut out = String::new();
    let labels: Vec<&str> = runs.iter().map(|r| r.label.as_str()).collect();
    let width = labels.iter().map(|l| l.len()).max().unwrap_or(8).max(10) + 2;
    let head = 22;
    let names: Vec<String> = args.workloads.iter().map(|w| w.name()).collect();
    let _ = writeln!(out);
    for (wi, name) in names.iter().enumerate() {
        let cells: Vec<Option<&WorkloadResult>> =
            runs.iter().map(|r| r.workloads.get(wi)).collect();
        let _ = write!(out, "{:<head$}", name);
        for l in &labels {
            let _ = write!(out, "{l:>width$}");
        }
        let _ = writeln!(out);
        let writes = cells.iter().flatten().any(|w| w.writes);
        let reads = cells.iter().flatten().any(|w| w.lookups.is_some());
        let mut row = |title: &str, f: &dyn Fn(&WorkloadResult) -> String| {
            let _ = write!(out, "  {:<w$}", title, w = head - 2);
            for c in &cells {
                let text = match c {
                    None => "-".to_string(),
                    Some(w) if w.unsupported.is_some() => "unsupported".into(),
                    Some(w) => f(w),
                };
                let _ = write!(out, "{text:>width$}");
            }
            let _ = writeln!(out);
        };
        row("ops/s", &|w| {
            if w.error.is_some() {
                format!("FAILED {}", human(w.ops_per_sec()))
            } else {
                human(w.ops_per_sec())
            }
        });
        row("MB/s", &|w| format!("{:.1}", w.mb_per_sec()));
        row("p50 µs", &|w| format!("{:.1}", w.latency.quantile_us(0.5)));
        row("p99 µs", &|w| {
            format!("{:.1}", w.latency.quantile_us(0.99))
        });
        row("p99.9 µs", &|w| {
            format!("{:.1}", w.latency.quantile_us(0.999))
        });
        row("max µs", &|w| human(w.latency.max_us()));
        row("slowest 1 s ÷ mean", &|w| {
            opt(super::metrics::slowest_second(&w.samples), |s| {
                format!("{:.2}", s / w.ops_per_sec().max(1e-9))
            })
        });
        if reads {
            row("found", &|w| match (w.found, w.lookups) {
                (Some(f), Some(l)) => format!("{f}/{l}"),
                _ => "-".into(),
            });
        }
        if writes {
            row("WA (engine stats)", &|w| {
                opt(w.write_amplification(), |x| format!("{x:.2}"))
            });
            row("WA (wchar)", &|w| {
                opt(w.wchar_write_amplification(), |x| format!("{x:.2}"))
            });
            row("stall s", &|w| opt(w.stall_seconds, |x| format!("{x:.2}")));
            row("  of which slowdown s", &|w| {
                opt(w.slowdown_seconds, |x| format!("{x:.2}"))
            });
            row("  of which flush wait s", &|w| {
                opt(w.memtable_stall_seconds, |x| format!("{x:.2}"))
            });
            row(
                "flush s (longest)",
                &|w| match (w.flush_seconds, w.max_flush_seconds) {
                    (Some(f), Some(m)) => format!("{f:.2} ({m:.2})"),
                    _ => "-".into(),
                },
            );
            row("compaction s", &|w| {
                opt(w.compaction_seconds, |x| format!("{x:.2}"))
            });
        }
        if cells.iter().flatten().any(|w| w.device.is_some()) {
            row("device: host MB wr", &|w| {
                opt(w.device, |d| format!("{:.1}", d.host_written as f64 / 1e6))
            });
            row("device: dev MB wr", &|w| {
                opt(w.device, |d| {
                    format!("{:.1}", d.device_written as f64 / 1e6)
                })
            });
            row("device: AWA", &|w| {
                opt(w.device.and_then(|d| d.awa()), |x| format!("{x:.2}"))
            });
            if writes {
                row("device: MWA", &|w| opt(w.mwa(), |x| format!("{x:.2}")));
            }
            row("device: RMWs", &|w| opt(w.device, |d| d.rmws.to_string()));
        }
        row("written MB (wchar)", &|w| {
            opt(w.wchar_bytes, |x| format!("{:.1}", x as f64 / 1e6))
        });
        if reads {
            row("data blk reads/op", &|w| {
                opt(w.data_block_reads_per_op(), |x| format!("{x:.3}"))
            });
            row("meta blk reads/op", &|w| {
                opt(w.metadata_block_reads_per_op(), |x| format!("{x:.3}"))
            });
            row("data blk cache hits/op", &|w| {
                opt(w.data_block_cache_hits_per_op(), |x| format!("{x:.3}"))
            });
        }
        row("cpu cores: client", &|w| {
            opt(w.cpu_cores(is_client), |x| format!("{x:.2}"))
        });
        row("cpu cores: engine", &|w| {
            opt(
                w.cpu_cores(|role| !is_client(role) && role != SAMPLER_THREAD),
                |x| format!("{x:.2}"),
            )
        });
        row("disk MB", &|w| {
            opt(w.disk, |d| format!("{:.1}", d.apparent as f64 / 1e6))
        });
        row("peak RSS MB", &|w| {
            opt(w.memory, |m| {
                let star = if m.peak_is_phase { "" } else { "*" };
                format!("{:.1}{star}", m.peak as f64 / 1e6)
            })
        });
        row("RSS anon+file MB", &|w| {
            opt(w.memory, |m| {
                format!("{:.0}+{:.0}", m.anon as f64 / 1e6, m.file as f64 / 1e6)
            })
        });
        row("pinned idx+filt b/key", &|w| {
            opt(w.pinned_bits_per_key(), |x| format!("{x:.2}"))
        });
        if args.wait_compaction {
            row("wait compaction s", &|w| {
                opt(w.wait_compaction_seconds, |x| format!("{x:.2}"))
            });
        }
        let _ = writeln!(out);
    }
    for r in runs {
        if let Some(e) = &r.error {
            let _ = writeln!(out, "{}: FAILED to run: {e}", r.label);
        }
        for w in &r.workloads {
            if let Some(e) = &w.error {
                let _ = writeln!(out, "{} {}: FAILED: {e}", r.label, w.name);
            }
            if let Some(u) = &w.unsupported {
                let _ = writeln!(out, "{} {}: unsupported ({u})", r.label, w.name);
            }
        }
    }
    if runs
        .iter()
        .flat_map(|r| &r.workloads)
        .any(|w| w.memory.is_some_and(|m| !m.peak_is_phase))
    {
        let _ = writeln!(
            out,
            "* peak RSS since the process started: /proc/self/clear_refs refused the reset"
        );
    }
    let _ = writeln!(
        out,
        "Memory: peak RSS is the whole process's during the phase (engines run one after \
         another, each dropped and its freed heap returned (malloc_trim) before the next \
         opens); RSS anon+file at the phase's end \
         (file: pages of memory-mapped files, which the kernel can drop); pinned idx+filt: \
         index and filter bits per live key held outside the block cache."
    );
    let _ = writeln!(out, "Settings:");
    for r in runs {
        let s: Vec<String> = r.settings.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let _ = writeln!(out, "  {:<18} {}", r.label, s.join(", "));
        if args.wait_compaction {
            let _ = writeln!(out, "  {:<18} wait for compactions: {}", "", r.wait_method);
        }
    }
    out
}
