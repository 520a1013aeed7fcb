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
    run_with(engine, &KeyCodec::new(16, 100, 1), workloads, c)
}

fn run_with(
    engine: &dyn BenchEngine,
    codec: &KeyCodec,
    workloads: &[&str],
    c: &PhaseConfig,
) -> Vec<WorkloadResult> {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = RunState {
        presence: Presence::new(2 * c.num + c.reads * 2),
        inserts: ycsb::InsertSequence::new(c.num),
    };
    workloads
        .iter()
        .map(|w| {
            let w: Workload = w.parse().expect("workload");
            phase::run(engine, dir.path(), &state, codec, w, c, "mem")
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

/// An engine configuration of `write_buffer_bytes` buffers (and a prefix extractor of
/// `key_prefix_len` bytes for peers that have one), 10 Bloom bits per key, the rest default.
fn small_cfg(
    write_buffer_bytes: usize,
    key_prefix_len: Option<usize>,
) -> super::engine::EngineConfig {
    super::engine::EngineConfig {
        write_buffer_bytes,
        bloom_bits: 10,
        sync: false,
        direct_reads: false,
        block_cache_bytes: None,
        key_prefix_len,
        scree: Default::default(),
    }
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
    let cfg = small_cfg(1 << 20, None);
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
fn the_verdict_ranks_what_was_measured_against_leveled() {
    let cfg = small_cfg(1 << 20, None);
    let mut runs = Vec::new();
    for layout in [scree::Layout::Leveled, scree::Layout::Trie] {
        let dir = tempfile::tempdir().expect("tempdir");
        let engine =
            super::scree_engine::ScreeEngine::open(dir.path(), layout, &cfg).expect("open scree");
        let workloads = smoke(&engine, dir.path(), &["fillrandom", "readrandom"]);
        runs.push(RunResult {
            engine: engine.engine().into(),
            layout: engine.layout(),
            label: format!("scree/{layout}"),
            settings: Vec::new(),
            wait_method: String::new(),
            kept_at: None,
            workloads,
            error: None,
        });
    }
    let v = super::verdict::verdict(&runs).expect("a leveled column");
    let wa = |i: usize| runs[i].workloads[0].write_amplification().expect("WA");
    let (least, ratio) = if wa(1) < wa(0) {
        ("scree/trie", wa(1) / wa(0))
    } else {
        ("scree/leveled", 1.0)
    };
    let want = format!(
        "wrote least: {least} ({:.2} WA, {ratio:.2}× leveled's)",
        wa(0).min(wa(1))
    );
    assert!(v.contains(&want), "{v}\nwanted: {want}");
    assert!(v.contains("fillrandom") && v.contains("readrandom") && v.contains("ran fastest"));
    // No baseline, no verdict.
    assert!(super::verdict::verdict(&runs[1..]).is_none());
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
        key_prefix_len: None,
        scree: super::engine::ScreeTuning {
            background_threads: Some(1),
            flush_threads: Some(1),
            flush_in_compactions: false,
            trie_pile_size: Some(3),
            trie_last_level_depth: Some(2),
            leveled_subcompactions: Some(3),
            leveled_base_mb: Some(1),
            leveled_seek_compaction: Some(false),
            frag_tables_per_guard: Some(1),
            frag_parallel_seeks: true,
            lwc_division_count: Some(4),
            lwc_dtable_mb: Some(8),
            lwc_base_mb: Some(2),
            lwc_level_ratio: Some(16),
            lwc_concurrent_jobs: true,
            parallel_search: true,
            mmap_reads: false,
            max_open_files: 0,
            cache_index_and_filter_blocks: true,
            semisorted_plan: vec![6, 2],
            device: scree::Device::Files,
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
    let dir = tempfile::tempdir().expect("tempdir");
    let e = super::scree_engine::ScreeEngine::open(dir.path(), scree::Layout::Lightweight, &cfg)
        .expect("open lightweight");
    let s = e.settings();
    assert!(s
        .iter()
        .any(|(n, v)| n == "lightweight.level_base_bytes" && v == "2097152"));
    // An explicit base is used as given, not raised to the level-0 backlog.
    assert!(s
        .iter()
        .any(|(n, v)| n == "lightweight.level_base_follows_l0" && v == "false"));
    assert!(s
        .iter()
        .any(|(n, v)| n == "lightweight.dtable_max_bytes" && v == "8388608"));
    assert!(s
        .iter()
        .any(|(n, v)| n == "lightweight.level_size_ratio" && v == "16"));
    assert_eq!(
        parse_args(["bench", "--lwc-base-mb", "256"])
            .expect("args")
            .lwc_base_mb,
        Some(256)
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let e = super::scree_engine::ScreeEngine::open(dir.path(), scree::Layout::Leveled, &cfg)
        .expect("open leveled");
    let s = e.settings();
    assert!(s
        .iter()
        .any(|(n, v)| n == "leveled.max_subcompactions" && v == "3"));
    assert!(s
        .iter()
        .any(|(n, v)| n == "leveled.level_base_bytes" && v == "1048576"));
    assert!(s
        .iter()
        .any(|(n, v)| n == "leveled.seek_compaction" && v == "false"));
    let args = parse_args([
        "bench",
        "--leveled-subcompactions",
        "4",
        "--leveled-base-mb",
        "256",
        "--leveled-seek-compaction",
        "false",
    ])
    .expect("args");
    assert_eq!(args.leveled_subcompactions, Some(4));
    assert_eq!(args.leveled_base_mb, Some(256));
    assert_eq!(args.leveled_seek_compaction, Some(false));
    // Out of range: the engine refuses it with the option's name.
    let mut bad = cfg.clone();
    bad.scree.leveled_subcompactions = Some(0);
    let dir = tempfile::tempdir().expect("tempdir");
    let err = super::scree_engine::ScreeEngine::open(dir.path(), scree::Layout::Leveled, &bad)
        .err()
        .expect("0 sub-compactions refused");
    assert!(
        err.to_string()
            .contains("max_subcompactions must be 1..=64, got 0"),
        "{err}"
    );
}

/// Every peer in this build (the tests below are compiled only when there is one).
#[cfg(any(feature = "peers", feature = "peers-rust", feature = "rocksdb-current"))]
fn built_peers() -> Vec<crate::peers::Peer> {
    crate::peers::ALL
        .into_iter()
        .filter(|p| p.built().is_ok())
        .collect()
}

#[cfg(any(feature = "peers", feature = "peers-rust", feature = "rocksdb-current"))]
#[test]
fn peers_pass_verification_and_report_counters() {
    use crate::peers::{self, Peer};
    let cfg = small_cfg(1 << 20, None);
    for peer in built_peers() {
        let dir = tempfile::tempdir().expect("tempdir");
        let engine = peers::open(peer, dir.path(), &cfg).expect("open peer");
        assert_eq!(engine.engine(), peer.name());
        let results = smoke(engine.as_ref(), dir.path(), &SMOKE);
        let fill = &results[0];
        // A 1 MiB buffer and 2.3 MB of data: flushes (redb: commits) happen, so the process
        // writes more than the WAL, and engines that count their writes say so too.
        assert!(
            fill.wchar_write_amplification().is_some_and(|w| w > 1.0),
            "{peer}"
        );
        if matches!(peer, Peer::RocksDb | Peer::RocksDbDebian | Peer::LevelDb) {
            let wa = fill.write_amplification().expect("engine WA");
            assert!(wa > 1.0, "{peer}: WA {wa}");
        }
        assert_eq!(results[1].found, Some(5_000), "{peer}");
        assert_eq!(results[2].found, Some(0), "{peer}");
        assert!(fill.wait_compaction_seconds.is_some());
        if matches!(peer, Peer::RocksDb | Peer::RocksDbDebian) {
            assert!(fill.stall_seconds.is_some() && fill.data_block_reads.is_some());
        }
        // Reopened, the peer holds exactly what it held before (redb's last batch included):
        // every key of the fill's range and of ycsb-d's inserts, present or deleted.
        let codec = KeyCodec::new(16, 100, 1);
        let contents = |e: &dyn BenchEngine| -> Vec<Option<Vec<u8>>> {
            let (mut key, mut value) = (Vec::new(), Vec::new());
            (0..40_000)
                .map(|i| {
                    codec.key(i, &mut key);
                    e.get(&key, &mut value).expect("get").then(|| value.clone())
                })
                .collect()
        };
        let before = contents(engine.as_ref());
        let present = before.iter().flatten().count();
        // deleterandom removed some of the 20 000 and ycsb-d inserted some above them.
        assert!(present > 1_000, "{peer}: {present}");
        drop(engine);
        let engine = peers::open(peer, dir.path(), &cfg).expect("reopen peer");
        assert!(
            contents(engine.as_ref()) == before,
            "{peer}: reopened contents differ"
        );
    }
}

const GROUPED: [&str; 9] = [
    "fillrandom",
    "readrandom",
    "readmissing",
    "scangroup",
    "mixblind",
    "mixnonblind",
    "scangroup",
    "deleterandom",
    "scangroup",
];

/// Checks a run of [`GROUPED`] that the engine fully supports.
/// `threads > 1` makes the non-blind mix racy (another thread's create may not be in the model
/// yet), so its answers are checked only single-threaded.
fn check_grouped(results: &[WorkloadResult], reads: u64, threads: u64, what: &str) {
    for r in results {
        assert!(r.error.is_none(), "{what} {}: {:?}", r.name, r.error);
        assert!(r.unsupported.is_none(), "{what} {}", r.name);
    }
    assert_eq!(results[1].found, Some(reads), "{what}: every key present");
    assert_eq!(
        results[2].found,
        Some(0),
        "{what}: missing keys stay missing"
    );
    // Every scan found a full group before the deletes, and agrees with the model after.
    for i in [3, 6, 8] {
        let scan = &results[i];
        assert_eq!(scan.lookups, Some(reads), "{what}");
        assert_eq!(scan.found, scan.expected_found, "{what} scan {i}");
        assert!(scan.op_counts.get("scan_entries").copied().unwrap_or(0) > 0);
    }
    // mixblind: about half reads, half blind writes, reads all found.
    let blind = &results[4];
    let (r, w) = (blind.op_counts["read"], blind.op_counts["write"]);
    assert_eq!(r + w, reads, "{what}");
    assert!(
        r > reads / 3 && w > reads / 3,
        "{what}: {r} reads {w} writes"
    );
    assert_eq!(blind.found, Some(r), "{what}");
    // Engines without write counters (fjall, redb) have the process's wchar.
    assert!(
        blind
            .write_amplification()
            .or(blind.wchar_write_amplification())
            .is_some(),
        "{what}"
    );
    // mixnonblind: creates of present keys are refused, creates of absent keys write.
    let nb = &results[5];
    let (creates, exists) = (nb.op_counts["create"], nb.op_counts["exists"]);
    assert!(
        creates > reads / 8 && exists > reads / 8,
        "{what}: {creates} {exists}"
    );
    if threads == 1 {
        assert_eq!(nb.found, nb.expected_found, "{what}");
    }
}

fn grouped_cfg(threads: u64) -> PhaseConfig {
    cfg(4_000, 1_000, threads)
}

#[test]
fn grouped_workloads_verify_what_they_read() {
    let codec = KeyCodec::with_groups(16, 100, 1, 16).expect("codec");
    for threads in [1, 2] {
        let engine = MemEngine::default();
        let results = run_with(&engine, &codec, &GROUPED, &grouped_cfg(threads));
        check_grouped(&results, 1_000, threads, &format!("mem, {threads} threads"));
        // A full group is 16 entries: 1000 scans before the deletes visit 16000 entries.
        assert_eq!(results[3].op_counts["scan_entries"], 16_000);
        assert!(results[8].op_counts["scan_entries"] < 16_000);
    }
    // A partial last group (num not a multiple of G) is scanned as far as it was written.
    let engine = MemEngine::default();
    let c = cfg(4_007, 2_000, 1);
    let results = run_with(&engine, &codec, &["fillseq", "scangroup"], &c);
    assert!(results[1].error.is_none(), "{:?}", results[1].error);
    assert_eq!(results[1].found, Some(2_000));
}

#[test]
fn scangroup_catches_lost_keys() {
    let codec = KeyCodec::with_groups(16, 100, 1, 64).expect("codec");
    let mut engine = MemEngine::default();
    engine.lossy = true;
    let results = run_with(
        &engine,
        &codec,
        &["fillseq", "scangroup"],
        &cfg(20_000, 2_000, 1),
    );
    let scan = &results[1];
    assert!(scan.failed(), "a lost write must fail the group scan");
    assert!(
        scan.error.as_deref().is_some_and(|e| e.contains("entries")),
        "{:?}",
        scan.error
    );
}

#[test]
fn mixnonblind_catches_overwrites() {
    let codec = KeyCodec::with_groups(16, 100, 1, 16).expect("codec");
    let mut engine = MemEngine::default();
    engine.clobber = true;
    let results = run_with(
        &engine,
        &codec,
        &["fillrandom", "mixnonblind"],
        &cfg(2_000, 1_000, 1),
    );
    let nb = &results[1];
    assert!(
        nb.failed(),
        "put_if_absent over a present key must fail the run"
    );
    assert!(
        nb.error
            .as_deref()
            .is_some_and(|e| e.contains("wrote over")),
        "{:?}",
        nb.error
    );
}

#[test]
fn unsupported_group_scans_are_not_failures() {
    let codec = KeyCodec::with_groups(16, 100, 1, 16).expect("codec");
    let mut engine = MemEngine::default();
    engine.no_scans = true;
    let results = run_with(
        &engine,
        &codec,
        &["fillrandom", "scangroup", "readrandom"],
        &cfg(2_000, 1_000, 1),
    );
    assert!(results[1].unsupported.is_some() && !results[1].failed());
    // The run goes on after it.
    assert_eq!(results[2].found, Some(1_000));
}

#[test]
fn scree_layouts_run_the_semi_sorted_workloads() {
    let cfg = small_cfg(256 << 10, Some(8));
    let codec = KeyCodec::with_groups(16, 100, 1, 32).expect("codec");
    let layouts =
        super::scree_engine::resolve_layouts("leveled,trie,semisorted", 8).expect("layouts");
    for layout in layouts {
        let dir = tempfile::tempdir().expect("tempdir");
        let engine =
            super::scree_engine::ScreeEngine::open(dir.path(), layout, &cfg).expect("open scree");
        let mut names = GROUPED.to_vec();
        names.push("seekrandom");
        let results = run_with(&engine, &codec, &names, &grouped_cfg(2));
        let what = layout.to_string();
        if layout == scree::Layout::Trie {
            // No prefix scans on a hash-ordered layout: reported, and the rest still runs.
            for i in [3, 6, 8, 9] {
                assert!(results[i].unsupported.is_some(), "trie {}", results[i].name);
                assert!(!results[i].failed());
            }
            assert_eq!(results[1].found, Some(1_000));
            assert!(results[5].error.is_none(), "{:?}", results[5].error);
            continue;
        }
        check_grouped(&results[..9], 1_000, 2, &what);
        let seek = &results[9];
        if matches!(layout, scree::Layout::SemiSorted { .. }) {
            assert!(seek.unsupported.is_some(), "semisorted has no range scans");
            let s = engine.settings();
            assert!(s
                .iter()
                .any(|(k, v)| k == "semisorted.prefix_len" && v == "8"));
        } else {
            assert!(seek.error.is_none(), "{:?}", seek.error);
        }
    }
}

#[test]
fn layout_and_key_group_arguments() {
    use scree::Layout;
    let resolve = |spec: &str, n: usize| super::scree_engine::resolve_layouts(spec, n).expect(spec);
    assert_eq!(
        resolve("semisorted", 8),
        vec![Layout::SemiSorted { prefix_len: 8 }]
    );
    assert_eq!(
        resolve("leveled, semisorted:3", 8),
        vec![Layout::Leveled, Layout::SemiSorted { prefix_len: 3 }]
    );
    let all = resolve("all", 6);
    assert!(
        all.contains(&Layout::SemiSorted { prefix_len: 6 }),
        "{all:?}"
    );
    assert!(!all.contains(&Layout::SemiSorted { prefix_len: 1 }));
    let args = parse_args(["bench"]).expect("args");
    assert_eq!((args.key_groups, args.prefix_len), (0, 8));
    let spec = super::EngineSpec::Scree(Layout::SemiSorted { prefix_len: 8 });
    assert_eq!(spec.label(), "scree/semisorted:8");

    let check = |argv: &[&str]| {
        let mut v = vec!["bench"];
        v.extend_from_slice(argv);
        super::check_args(&Wrap::try_parse_from(v).expect("parse").args)
    };
    assert!(check(&["--key-groups", "128"]).is_ok());
    let short = check(&["--key-groups", "128", "--key-size", "12"]).expect_err("short keys");
    assert!(short.to_string().contains("at least 16"), "{short}");
    let no_groups = check(&["--workloads", "fillrandom,scangroup"]).expect_err("no groups");
    assert!(
        no_groups.to_string().contains("--key-groups"),
        "{no_groups}"
    );
    assert!(check(&["--workloads", "fillrandom,mixblind,mixnonblind"]).is_ok());
}

#[test]
fn semisorted_prefix_longer_than_the_key_is_refused() {
    let mut args = parse_args([
        "bench",
        "--layout",
        "semisorted",
        "--prefix-len",
        "20",
        "--num",
        "10",
    ])
    .expect("args");
    args.quiet = true;
    let e = super::run(args).expect_err("prefix longer than keys");
    assert!(e.to_string().contains("--key-size"), "{e}");
}

#[cfg(any(feature = "peers", feature = "peers-rust", feature = "rocksdb-current"))]
#[test]
fn peers_run_the_semi_sorted_workloads() {
    use crate::peers::{self, Peer};
    // Small buffers so that the groups end up in several tables: RocksDB's prefix Bloom
    // filters and total-order seeks are exercised, not only the memtable (and redb commits
    // several batches).
    let cfg = small_cfg(256 << 10, Some(8));
    let codec = KeyCodec::with_groups(16, 100, 1, 32).expect("codec");
    for peer in built_peers() {
        let dir = tempfile::tempdir().expect("tempdir");
        let engine = peers::open(peer, dir.path(), &cfg).expect("open peer");
        let mut names = GROUPED.to_vec();
        names.extend(["seekrandom", "readseq"]);
        let results = run_with(engine.as_ref(), &codec, &names, &grouped_cfg(1));
        check_grouped(&results[..9], 1_000, 1, peer.name());
        for r in &results[9..] {
            assert!(r.error.is_none(), "{peer} {}: {:?}", r.name, r.error);
            assert!(r.unsupported.is_none());
        }
        assert!(engine.put_if_absent_method().contains("get then put"));
        if matches!(peer, Peer::RocksDb | Peer::RocksDbDebian) {
            let s = engine.settings();
            assert!(s.iter().any(|(k, _)| k == "prefix_extractor"), "{s:?}");
        }
    }
}

/// `--device smr-drive` runs Scree on the band emulator: every workload verifies, the fill
/// reports device counters whose AWA is device ÷ host bytes and whose MWA is device ÷ user
/// bytes, and the JSON and table carry them.
#[test]
fn scree_on_the_band_emulator_reports_device_bytes() {
    let args = parse_args([
        "bench",
        "--device",
        "smr-drive",
        "--band-mb",
        "1",
        "--num",
        "20000",
    ])
    .expect("args");
    assert_eq!(args.scree_device(), scree::Device::SmrDrive { band_mb: 1 });
    let mut cfg = super::engine::EngineConfig {
        write_buffer_bytes: 256 << 10,
        bloom_bits: 10,
        sync: false,
        direct_reads: false,
        block_cache_bytes: None,
        key_prefix_len: None,
        scree: Default::default(),
    };
    cfg.scree.device = args.scree_device();
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = super::scree_engine::ScreeEngine::open(dir.path(), scree::Layout::Leveled, &cfg)
        .expect("open scree");
    let results = smoke(&engine, dir.path(), &["fillrandom", "readrandom"]);
    let fill = &results[0];
    let d = fill.device.expect("device counters");
    assert!(d.host_written > 0 && d.device_written >= d.host_written);
    let awa = d.awa().expect("awa");
    assert_eq!(awa, d.device_written as f64 / d.host_written as f64);
    let mwa = fill.mwa().expect("mwa");
    assert_eq!(mwa, d.device_written as f64 / fill.user_bytes as f64);
    assert!(results[1].device.is_some_and(|r| r.host_read > 0));
    let json = report::workload_json(fill);
    assert_eq!(json.device_bytes_written, Some(d.device_written));
    assert!(json.awa.is_some() && json.mwa.is_some());
    assert!(engine
        .settings()
        .iter()
        .any(|(k, v)| k == "device" && v.starts_with("smr-drive")));
    assert!(parse_args(["bench", "--device", "smr-tape"]).is_err());
}
