//! End-to-end tests of the benchmark pipeline on the in-memory engine: workloads verify what
//! they read, failures and unsupported operations are reported as such, and the JSON document
//! has every field of the documented schema.

use std::time::Duration;

use clap::Parser;

use super::engine::memory::MemEngine;
use super::engine::BenchEngine;
use super::keys::KeyCodec;
use super::phase::{self, PhaseConfig, WorkloadResult};
use super::presence::{Presence, RunState};
use super::workloads::Workload;
use super::{report, ycsb, BenchArgs, RunResult};

#[derive(Parser)]
struct Wrap {
    #[command(flatten)]
    args: BenchArgs,
}

fn parse_args<const N: usize>(argv: [&str; N]) -> Result<BenchArgs, clap::Error> {
    Wrap::try_parse_from(argv).map(|w| w.args)
}

fn cfg(num: u64, reads: u64, threads: u64) -> PhaseConfig {
    PhaseConfig {
        num,
        reads,
        threads,
        seed: 9,
        seek_nexts: 10,
        request_distribution: None,
        wait_compaction: true,
        progress: false,
        sample_interval: Duration::from_millis(5),
    }
}

fn run_all(engine: &MemEngine, workloads: &[&str], c: &PhaseConfig) -> Vec<WorkloadResult> {
    let codec = KeyCodec::new(16, 100, 1);
    let dir = tempfile::tempdir().expect("tempdir");
    let state = RunState {
        presence: Presence::new(c.num + c.reads * 2),
        inserts: ycsb::InsertSequence::new(c.num),
    };
    workloads
        .iter()
        .map(|w| {
            let w: Workload = w.parse().expect("workload");
            phase::run(engine, dir.path(), &state, &codec, w, c, "mem")
        })
        .collect()
}

#[test]
fn every_workload_verifies_what_it_reads() {
    let names = [
        "fillrandom",
        "readrandom",
        "readmissing",
        "seekrandom",
        "readseq",
        "overwrite",
        "readwhilewriting",
        "ycsb-a",
        "ycsb-b",
        "ycsb-c",
        "ycsb-d",
        "ycsb-e",
        "ycsb-f",
        "deleterandom",
        "readrandom",
        "readseq",
        "fillseq",
        "readrandom",
    ];
    for threads in [1, 2] {
        let engine = MemEngine::default();
        let results = run_all(&engine, &names, &cfg(5_000, 3_000, threads));
        for r in &results {
            assert!(
                r.error.is_none(),
                "{} ({threads} threads): {:?}",
                r.name,
                r.error
            );
            assert!(r.unsupported.is_none());
            assert!(r.ops > 0, "{}", r.name);
        }
        let by = |i: usize| &results[i];
        assert_eq!(by(0).ops, 5_000);
        assert_eq!(by(1).found, Some(3_000), "all present after fillrandom");
        assert_eq!(by(2).found, Some(0), "readmissing finds nothing");
        assert_eq!(by(3).found, Some(3_000));
        assert_eq!(by(4).found, Some(3_000));
        // After deleterandom some keys are gone, and reads agree with the model exactly.
        assert!(by(14).found < Some(3_000));
        assert_eq!(by(14).found, by(14).expected_found);
        assert_eq!(by(17).found, Some(3_000), "fillseq restores every key");
        // YCSB D and E insert; the mix shows up in the op counts.
        assert!(by(10).op_counts.get("insert").copied().unwrap_or(0) > 0);
        assert!(by(11).op_counts.get("scan").copied().unwrap_or(0) > 2_000);
        // Write amplification is measured on writing workloads.
        assert!(by(0).write_amplification().is_some());
        assert!(by(0).wait_compaction_seconds.is_some());
    }
}

#[test]
fn lost_writes_fail_the_run() {
    let mut engine = MemEngine::default();
    engine.lossy = true;
    let results = run_all(&engine, &["fillseq", "readseq"], &cfg(5_000, 5_000, 1));
    let read = &results[1];
    assert!(read.failed(), "a lost write must fail the read phase");
    assert!(read.found < read.expected_found);
}

#[test]
fn unsupported_scans_are_not_failures() {
    let mut engine = MemEngine::default();
    engine.no_scans = true;
    let results = run_all(
        &engine,
        &["fillrandom", "seekrandom", "ycsb-e"],
        &cfg(2_000, 1_000, 1),
    );
    for r in &results[1..] {
        assert!(r.unsupported.is_some(), "{}", r.name);
        assert!(!r.failed());
        let j = serde_json::to_value(report::workload_json(r)).expect("json");
        assert!(j["found"].is_null() && j["write_amplification"].is_null());
    }
}

#[test]
fn json_has_the_documented_schema() {
    let engine = MemEngine::default();
    let c = cfg(3_000, 1_000, 1);
    let results = run_all(&engine, &["fillrandom", "readrandom"], &c);
    let args = parse_args(["bench", "--num", "3000", "--reads", "1000"]).expect("args");
    let run = RunResult {
        engine: engine.engine().into(),
        layout: engine.layout(),
        label: "scree/memory".into(),
        settings: engine.settings(),
        wait_method: engine.wait_method().into(),
        kept_at: None,
        workloads: results,
        error: None,
    };
    let doc = report::json(
        report::config_json(&args, 1_000, &[]),
        std::slice::from_ref(&run),
    );
    assert!(doc["config"].is_object());
    assert_eq!(doc["config"]["num"], 3000);
    let r = &doc["runs"][0];
    assert_eq!(r["engine"], "scree");
    assert_eq!(r["layout"], "memory");
    let fill = &r["workloads"][0];
    let read = &r["workloads"][1];
    for w in [fill, read] {
        for field in [
            "name",
            "ops",
            "seconds",
            "ops_per_sec",
            "latency_us",
            "found",
            "user_bytes",
            "bytes_written",
            "write_amplification",
            "disk_bytes",
            "stall_seconds",
            "wchar_write_amplification",
            "data_block_reads_per_op",
            "metadata_block_reads_per_op",
            "wait_compaction_seconds",
        ] {
            assert!(w.get(field).is_some(), "missing {field}");
        }
        for q in ["p50", "p99", "p999", "max"] {
            assert!(w["latency_us"][q].is_number(), "latency {q}");
        }
    }
    assert_eq!(fill["name"], "fillrandom");
    assert_eq!(fill["ops"], 3000);
    assert!(fill["found"].is_null());
    assert!(fill["write_amplification"]
        .as_f64()
        .is_some_and(|x| x > 0.0));
    assert_eq!(read["found"], 1000);
    assert!(read["write_amplification"].is_null());
    // The table renders every engine column.
    let table = report::table(std::slice::from_ref(&run), &args);
    assert!(table.contains("scree/memory") && table.contains("readrandom"));
}

#[test]
fn plots_render_with_and_without_fonts() {
    let engine = MemEngine::default();
    let results = run_all(
        &engine,
        &["fillrandom", "readrandom"],
        &cfg(20_000, 20_000, 1),
    );
    let run = RunResult {
        engine: "scree".into(),
        layout: Some("memory".into()),
        label: "scree/memory".into(),
        settings: Vec::new(),
        wait_method: String::new(),
        kept_at: None,
        workloads: results,
        error: None,
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let files = super::plot::write_all(dir.path(), std::slice::from_ref(&run)).expect("plots");
    assert_eq!(files.len(), 5);
    for f in files {
        assert!(std::fs::metadata(&f).expect("png").len() > 1000);
    }
}

#[test]
fn default_arguments() {
    let args = parse_args(["bench"]).expect("args");
    assert_eq!(args.num, 1_000_000);
    assert_eq!(args.effective_reads(), 1_000_000);
    assert_eq!(args.key_size, 16);
    assert_eq!(args.value_size, 100);
    assert_eq!(args.write_buffer_mb, 64);
    assert_eq!(args.bloom_bits, 10);
    assert!(!args.sync);
    assert_eq!(
        args.workloads,
        vec![
            Workload::FillRandom,
            Workload::ReadRandom,
            Workload::SeekRandom
        ]
    );
    let small = parse_args(["bench", "--num", "1000"]).expect("args");
    assert_eq!(small.effective_reads(), 1000);
    assert!(parse_args(["bench", "--workloads", "fillrandom,bogus"]).is_err());
}

/// Runs a small mixed workload list on a real engine and checks it verified and measured.
fn smoke(engine: &dyn BenchEngine, dir: &std::path::Path, names: &[&str]) -> Vec<WorkloadResult> {
    let c = cfg(20_000, 5_000, 2);
    let codec = KeyCodec::new(16, 100, 1);
    let state = RunState {
        presence: Presence::new(c.num + c.reads * 2),
        inserts: ycsb::InsertSequence::new(c.num),
    };
    names
        .iter()
        .map(|w| {
            let w: Workload = w.parse().expect("workload");
            let r = phase::run(engine, dir, &state, &codec, w, &c, "smoke");
            assert!(r.error.is_none(), "{}: {:?}", r.name, r.error);
            r
        })
        .collect()
}

const SMOKE: [&str; 7] = [
    "fillrandom",
    "readrandom",
    "readmissing",
    "seekrandom",
    "ycsb-d",
    "deleterandom",
    "readrandom",
];

#[test]
fn every_scree_layout_passes_verification() {
    let cfg = super::engine::EngineConfig {
        write_buffer_bytes: 1 << 20,
        bloom_bits: 10,
        sync: false,
        direct_reads: false,
        block_cache_bytes: None,
        scree: Default::default(),
    };
    for layout in scree::Layout::implemented() {
        let dir = tempfile::tempdir().expect("tempdir");
        let engine =
            super::scree_engine::ScreeEngine::open(dir.path(), layout, &cfg).expect("open scree");
        let results = smoke(&engine, dir.path(), &SMOKE);
        let fill = &results[0];
        assert!(
            fill.write_amplification().is_some_and(|wa| wa >= 1.0),
            "{layout}"
        );
        assert!(fill.stall_seconds.is_some() && fill.data_block_reads.is_some());
        assert_eq!(results[1].found, Some(5_000), "{layout}");
        assert_eq!(results[2].found, Some(0), "{layout}");
    }
}

#[test]
fn scree_tuning_flags_reach_the_keyspace() {
    use super::engine::BenchEngine;
    let cfg = super::engine::EngineConfig {
        write_buffer_bytes: 1 << 20,
        bloom_bits: 10,
        sync: false,
        direct_reads: false,
        block_cache_bytes: Some(8 << 20),
        scree: super::engine::ScreeTuning {
            background_threads: Some(1),
            flush_threads: Some(1),
            flush_in_compactions: false,
            trie_pile_size: Some(3),
            trie_last_level_depth: Some(2),
            frag_tables_per_guard: Some(1),
            frag_parallel_seeks: true,
            lwc_division_count: Some(4),
            lwc_dtable_mb: Some(8),
            parallel_search: true,
            mmap_reads: false,
            max_open_files: 0,
            cache_index_and_filter_blocks: true,
        },
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let e = super::scree_engine::ScreeEngine::open(dir.path(), scree::Layout::Trie, &cfg)
        .expect("open trie");
    let s = e.settings();
    let get = |k: &str| s.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    // --block-cache-mb gives Scree the peers' cache size (its own default is 32 MiB).
    assert_eq!(get("block_cache_bytes").as_deref(), Some("8388608"));
    let args = parse_args(["bench", "--block-cache-mb", "8"]).expect("args");
    assert_eq!(args.block_cache_mb, 8);
    // Unset, every engine gets Scree's default cache, not each library its own.
    assert_eq!(parse_args(["bench"]).expect("args").block_cache_mb, 32);
    assert_eq!(get("background_threads").as_deref(), Some("1"));
    assert_eq!(get("flush_threads").as_deref(), Some("1"));
    assert_eq!(get("flush_in_compactions").as_deref(), Some("false"));
    assert_eq!(get("parallel_search").as_deref(), Some("true"));
    assert_eq!(get("mmap_reads").as_deref(), Some("false"));
    assert_eq!(
        get("cache_index_and_filter_blocks").as_deref(),
        Some("true")
    );
    assert!(
        parse_args(["bench", "--cache-index-and-filter-blocks"])
            .expect("args")
            .cache_index_and_filter_blocks
    );
    assert_eq!(get("trie.pile_size").as_deref(), Some("3"));
    assert_eq!(get("trie.last_level_depth").as_deref(), Some("2"));
    let dir = tempfile::tempdir().expect("tempdir");
    let e = super::scree_engine::ScreeEngine::open(dir.path(), scree::Layout::Fragmented, &cfg)
        .expect("open fragmented");
    let s = e.settings();
    assert!(s
        .iter()
        .any(|(n, v)| n == "fragmented.max_sstables_per_guard" && v == "1"));
    assert!(s
        .iter()
        .any(|(n, v)| n == "fragmented.parallel_seeks" && v == "true"));
    assert!(
        parse_args(["bench", "--frag-parallel-seeks"])
            .expect("args")
            .frag_parallel_seeks
    );
}

#[cfg(feature = "peers")]
#[test]
fn peers_pass_verification_and_report_counters() {
    use crate::peers::{self, Peer};
    let cfg = super::engine::EngineConfig {
        write_buffer_bytes: 1 << 20,
        bloom_bits: 10,
        sync: false,
        direct_reads: false,
        block_cache_bytes: None,
        scree: Default::default(),
    };
    for peer in [Peer::RocksDb, Peer::LevelDb] {
        let dir = tempfile::tempdir().expect("tempdir");
        let engine = peers::open(peer, dir.path(), &cfg).expect("open peer");
        assert_eq!(engine.engine(), peer.name());
        let results = smoke(engine.as_ref(), dir.path(), &SMOKE);
        let fill = &results[0];
        // A 1 MiB buffer and 2.3 MB of data: flushes happen, so WA counts more than the WAL.
        let wa = fill.write_amplification().expect("engine WA");
        assert!(wa > 1.0, "{peer}: WA {wa}");
        assert!(fill.wchar_write_amplification().is_some_and(|w| w > 1.0));
        assert_eq!(results[1].found, Some(5_000), "{peer}");
        assert_eq!(results[2].found, Some(0), "{peer}");
        assert!(fill.wait_compaction_seconds.is_some());
        if peer == Peer::RocksDb {
            assert!(fill.stall_seconds.is_some() && fill.data_block_reads.is_some());
        }
    }
}
