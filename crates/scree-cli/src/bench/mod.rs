//! `scree bench`: db_bench- and YCSB-style workloads against every Scree layout and, with the
//! peer features, RocksDB, LevelDB, fjall and redb (`crate::peers`), in one process run with the
//! same workload code. See `docs/benchmarks.md` for what each number means.

pub mod engine;
pub mod keys;
pub mod metrics;
pub mod phase;
pub mod plot;
pub mod presence;
pub mod report;
pub mod scree_engine;
#[cfg(test)]
mod tests;
pub mod verdict;
pub mod worker;
pub mod workloads;
pub mod ycsb;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Args;

use crate::peers::{self, Peer};
use engine::{BenchEngine, EngineConfig};
use keys::KeyCodec;
use phase::{PhaseConfig, WorkloadResult};
use presence::{Presence, RunState};
use workloads::Workload;

/// Default `--num`.
pub const DEFAULT_NUM: u64 = 1_000_000;
/// `--reads` defaults to `min(num, DEFAULT_READS_CAP)`. On the 2-core reference machine a
/// sorted layout's default run (1M-key fill ≈ 5 s, 1M gets ≈ 6 s, 1M seeks+10 nexts ≈ 14 s)
/// takes ≈ 25 s and a layout without scans ≈ 12 s: with leveled, fragmented and trie the default
/// run took ≈ 60 s, so five layouts finish in about two minutes. (Same count as ANCHORS.md's
/// 1M random reads.)
pub const DEFAULT_READS_CAP: u64 = 1_000_000;

/// Arguments of `scree bench`.
#[derive(Args, Debug, Clone)]
#[command(
    after_help = "Workloads: fillrandom fillseq overwrite readrandom readmissing readseq \
seekrandom deleterandom readwhilewriting ycsb-load ycsb-a ycsb-b ycsb-c ycsb-d ycsb-e ycsb-f \
mixblind mixnonblind scangroup (needs --key-groups)\n\n\
Example: scree bench --layout all --peers rocksdb,leveldb,fjall,redb --num 300000 --json out.json\n\
Semi-sorted (SlimDB §5.4): scree bench --layout leveled,semisorted --peers rocksdb --key-groups 128 \
--workloads fillrandom,readrandom,readmissing,mixblind,mixnonblind,scangroup"
)]
pub struct BenchArgs {
    /// Workloads to run, in order, on the same database.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "fillrandom,readrandom,seekrandom"
    )]
    pub workloads: Vec<Workload>,
    /// Keys written by fills (and the key range of random reads and overwrites).
    #[arg(long, default_value_t = DEFAULT_NUM)]
    pub num: u64,
    /// Operations of reading workloads (and of YCSB A–F) [default: min(num, 1000000)].
    #[arg(long)]
    pub reads: Option<u64>,
    /// Bytes per key (at least 8; at least 16 with --key-groups).
    #[arg(long, default_value_t = 16)]
    pub key_size: usize,
    /// Semi-sorted keys in groups of G (0 = off): key i is an 8-byte prefix naming group i / G
    /// and an 8-byte suffix naming i % G, so fills write groups of G keys sharing a prefix
    /// (SlimDB §5.4 uses 128). Needed by scangroup.
    #[arg(long, default_value_t = 0, value_name = "G")]
    pub key_groups: u64,
    /// Prefix bytes of `semisorted` layouts named without a length (`semisorted`, `all`);
    /// `semisorted:N` keeps its N. 8 matches --key-groups' prefix.
    #[arg(long, default_value_t = 8, value_name = "N")]
    pub prefix_len: usize,
    /// Bytes per value.
    #[arg(long, default_value_t = 100)]
    pub value_size: usize,
    /// Client threads (readwhilewriting adds one writer).
    #[arg(long, default_value_t = 1)]
    pub threads: u64,
    /// Seed of every random choice (keys, values, YCSB operations).
    #[arg(long, default_value_t = 301)]
    pub seed: u64,
    /// Scree layouts: a comma-separated list, `all` (every implemented layout) or `none`.
    #[arg(long, default_value = "all")]
    pub layout: String,
    /// Peer engines run in the same process: rocksdb (the current release; feature
    /// `rocksdb-current`), leveldb and rocksdb-debian (Debian's 1.23 and 7.8.3; feature
    /// `peers`), fjall and redb (feature `peers-rust`).
    #[arg(long, value_delimiter = ',')]
    pub peers: Vec<Peer>,
    /// Override the YCSB request distribution of every ycsb-a..f workload (default: each
    /// workload's own — zipfian, or latest for D).
    #[arg(long, value_name = "zipfian|latest|uniform")]
    pub request_distribution: Option<ycsb::Distribution>,
    /// Keep the database(s) at DIR (one engine: DIR itself; several: DIR/<engine>).
    /// Default: a temporary directory removed afterwards.
    #[arg(long, value_name = "DIR")]
    pub db: Option<PathBuf>,
    /// Memtable (write buffer) size in MiB, the same for every engine.
    #[arg(long, default_value_t = 64)]
    pub write_buffer_mb: usize,
    /// Bloom filter bits per key, the same for every engine.
    #[arg(long, default_value_t = 10)]
    pub bloom_bits: u32,
    /// Block cache in MiB, the same for every engine (Scree's default; RocksDB's and LevelDB's
    /// own defaults are 8 MiB, as in ANCHORS.md's setup: `--block-cache-mb 8`).
    #[arg(long, default_value_t = 32)]
    pub block_cache_mb: usize,
    /// Sync the WAL on every write.
    #[arg(long)]
    pub sync: bool,
    /// `next()` calls after each seek of seekrandom.
    #[arg(long, default_value_t = 10)]
    pub seek_nexts: usize,
    /// After each workload, wait for background flushes/compactions and report how long it took.
    #[arg(long)]
    pub wait_compaction: bool,
    /// Read table blocks with O_DIRECT (Scree, RocksDB; LevelDB has no such option).
    #[arg(long)]
    pub direct_reads: bool,
    /// Scree background flush/compaction threads [default: the engine's, one per core].
    #[arg(long)]
    pub background_threads: Option<usize>,
    /// Scree threads that run only flushes, beside the background threads
    /// (`Options::flush_threads`) [default: 0].
    #[arg(long)]
    pub flush_threads: Option<usize>,
    /// Scree: compactions do not flush a waiting memtable themselves when every background
    /// thread is busy (`Options::flush_in_compactions = false`).
    #[arg(long)]
    pub no_flush_in_compactions: bool,
    /// Scree: read sorted tables with `pread` instead of a memory map
    /// (`Options::mmap_reads = false`).
    #[arg(long)]
    pub no_mmap_reads: bool,
    /// Scree: table files kept open at once (`Options::max_open_files`; 0 = every table,
    /// the engine's default).
    #[arg(long, default_value_t = 0)]
    pub max_open_files: usize,
    /// Scree: keep sorted tables' index blocks and Bloom filters in the block cache instead
    /// of pinning them (`Options::cache_index_and_filter_blocks`; the `trie` ignores it).
    #[arg(long)]
    pub cache_index_and_filter_blocks: bool,
    /// `trie`: sub-levels a container holds before they are compacted into its children
    /// [default: TrieOptions::default(), 8].
    #[arg(long)]
    pub trie_pile_size: Option<usize>,
    /// `trie`: depth of the last level, 1..=9 [default: TrieOptions::default(), 3].
    #[arg(long)]
    pub trie_last_level_depth: Option<u32>,
    /// `leveled`: most parts an L0 compaction is split into, merged in parallel
    /// (`LeveledOptions::max_subcompactions`; 1 disables) [default: LeveledOptions::default(), 2].
    #[arg(long)]
    pub leveled_subcompactions: Option<usize>,
    /// `leveled`: target size of L1 in MiB (`LeveledOptions::level_base_bytes`)
    /// [default: LeveledOptions::default(), 10].
    #[arg(long)]
    pub leveled_base_mb: Option<u64>,
    /// `leveled`: LevelDB's seek compaction, true or false (`LeveledOptions::seek_compaction`)
    /// [default: LeveledOptions::default(), true].
    #[arg(long)]
    pub leveled_seek_compaction: Option<bool>,
    /// `fragmented`: max_sstables_per_guard (1 behaves like leveled)
    /// [default: FragmentedOptions::default()].
    #[arg(long)]
    pub frag_tables_per_guard: Option<usize>,
    /// `lightweight`: DTables an equal division makes (the paper's n)
    /// [default: LightweightOptions::default(), 12].
    #[arg(long)]
    pub lwc_division_count: Option<usize>,
    /// `lightweight`: size limit of a DTable in MiB (the band size)
    /// [default: LightweightOptions::default(), 40].
    #[arg(long)]
    pub lwc_dtable_mb: Option<u64>,
    /// `lightweight`: target size of level 1 in MiB (`LightweightOptions::level_base_bytes`),
    /// used as given (`level_base_follows_l0` off) [default: LightweightOptions::default(),
    /// 10 MiB raised to the level-0 backlog].
    #[arg(long)]
    pub lwc_base_mb: Option<u64>,
    /// `lightweight`: size ratio between adjacent levels (`LightweightOptions::level_size_ratio`,
    /// the paper's amplification factor AF) [default: LightweightOptions::default(), 10].
    #[arg(long)]
    pub lwc_level_ratio: Option<u64>,
    /// `fragmented`: position the tables of a guard of the level holding the most data on the
    /// seek pool (`FragmentedOptions::parallel_seeks`; off by default: it pays only for cold
    /// reads).
    #[arg(long)]
    pub frag_parallel_seeks: bool,
    /// `lightweight`: let light-weight compactions on disjoint key ranges run at the same time
    /// (`LightweightOptions::concurrent_jobs`; off by default).
    #[arg(long)]
    pub lwc_concurrent_jobs: bool,
    /// `semisorted`: each level's structure as rows of SlimDB's Table 1, level 0 first (0 LSM,
    /// 1 LSM+CF, 2 LSM+CF+TL, 3 LSM+TL, 4 SM, 5 SM+MLCF, 6 SM+MLCF+TL, 7 SM+TL; `scree advise`
    /// prints one) [default: every level 6].
    #[arg(long, value_delimiter = ',')]
    pub semisorted_plan: Vec<u8>,
    /// Scree: search the last level on a search thread while the levels above are searched
    /// (`Options::parallel_search`, LSM-trie's parallel search; layouts with a distinct last level).
    #[arg(long)]
    pub parallel_search: bool,
    /// Scree's storage device: ordinary files, or the shingled-band emulator, host-managed
    /// (one table per band) or drive-managed (read-modify-write of a band), docs/smr.md. The
    /// results add host and device bytes, AWA and MWA. Peers always run on files.
    #[arg(long, value_enum, default_value_t = DeviceArg::Files)]
    pub device: DeviceArg,
    /// Band size in MiB of `--device smr-*` (the paper measures 20–60).
    #[arg(long, default_value_t = 40)]
    pub band_mb: u64,
    /// Write the results as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write PNG plots (throughput over time, write amplification by cause, latency CDF) to DIR.
    #[arg(long, value_name = "DIR")]
    pub plot: Option<PathBuf>,
    /// No progress bars.
    #[arg(long, short)]
    pub quiet: bool,
}

/// `--device`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DeviceArg {
    /// Ordinary files.
    Files,
    /// Host-managed shingled bands (one table file per band).
    SmrHost,
    /// Drive-managed shingled bands (read-modify-write).
    SmrDrive,
}

impl DeviceArg {
    /// The name `--device` takes.
    pub fn name(self) -> &'static str {
        match self {
            DeviceArg::Files => "files",
            DeviceArg::SmrHost => "smr-host",
            DeviceArg::SmrDrive => "smr-drive",
        }
    }
}

impl BenchArgs {
    /// The device Scree runs on.
    pub fn scree_device(&self) -> scree::Device {
        let band_mb = self.band_mb;
        match self.device {
            DeviceArg::Files => scree::Device::Files,
            DeviceArg::SmrHost => scree::Device::SmrHost { band_mb },
            DeviceArg::SmrDrive => scree::Device::SmrDrive { band_mb },
        }
    }

    /// `--reads`, or its default.
    pub fn effective_reads(&self) -> u64 {
        self.reads.unwrap_or(self.num.min(DEFAULT_READS_CAP))
    }
}

/// Which store a run is for.
#[derive(Debug, Clone)]
pub enum EngineSpec {
    /// A Scree keyspace of this layout.
    Scree(scree::Layout),
    /// A C++ peer.
    Peer(Peer),
}

impl EngineSpec {
    /// `scree/leveled`, `rocksdb`, …
    pub fn label(&self) -> String {
        match self {
            EngineSpec::Scree(scree::Layout::SemiSorted { prefix_len }) => {
                format!("scree/semisorted:{prefix_len}")
            }
            EngineSpec::Scree(l) => format!("scree/{}", l.name()),
            EngineSpec::Peer(p) => p.name().to_string(),
        }
    }
    fn open(&self, dir: &Path, cfg: &EngineConfig) -> anyhow::Result<Box<dyn BenchEngine>> {
        Ok(match self {
            EngineSpec::Scree(l) => Box::new(scree_engine::ScreeEngine::open(dir, *l, cfg)?),
            EngineSpec::Peer(p) => peers::open(*p, dir, cfg)?,
        })
    }
}

/// Everything measured for one engine.
pub struct RunResult {
    /// `scree`, `rocksdb`, `leveldb`.
    pub engine: String,
    /// Scree layout.
    pub layout: Option<String>,
    /// Column label.
    pub label: String,
    /// Settings the engine ran with.
    pub settings: Vec<(String, String)>,
    /// How waiting for compactions works for the engine.
    pub wait_method: String,
    /// Where the database was kept (`--db`), if it was.
    pub kept_at: Option<PathBuf>,
    /// Per-workload results.
    pub workloads: Vec<WorkloadResult>,
    /// Why the engine could not run at all.
    pub error: Option<String>,
}

impl RunResult {
    /// Any failure in this run.
    pub fn failed(&self) -> bool {
        self.error.is_some() || self.workloads.iter().any(|w| w.failed())
    }
}

/// The key codec the arguments ask for (refuses keys too short for the mode).
fn codec(args: &BenchArgs) -> anyhow::Result<KeyCodec> {
    Ok(KeyCodec::with_groups(
        args.key_size,
        args.value_size,
        args.seed,
        args.key_groups,
    )?)
}

fn check_args(args: &BenchArgs) -> anyhow::Result<()> {
    codec(args)?;
    if let Some(w) = args.workloads.iter().find(|w| w.needs_groups()) {
        if args.key_groups == 0 {
            bail!("{w} needs semi-sorted keys: add --key-groups G (SlimDB §5.4 uses 128)");
        }
    }
    if args.num == 0 {
        bail!("--num must be at least 1");
    }
    if args.threads == 0 {
        bail!("--threads must be at least 1");
    }
    if args.write_buffer_mb == 0 {
        bail!("--write-buffer-mb must be at least 1");
    }
    if args.workloads.is_empty() {
        bail!("--workloads is empty");
    }
    if args.device != DeviceArg::Files && !(1..=1024).contains(&args.band_mb) {
        bail!("--band-mb must be 1..=1024");
    }
    for p in &args.peers {
        p.built().map_err(anyhow::Error::msg)?;
    }
    Ok(())
}

/// Runs `scree bench`; returns whether every run succeeded.
pub fn run(args: BenchArgs) -> anyhow::Result<bool> {
    check_args(&args)?;
    let layouts = scree_engine::resolve_layouts(&args.layout, args.prefix_len)?;
    for l in &layouts {
        if let scree::Layout::SemiSorted { prefix_len } = *l {
            if prefix_len > args.key_size {
                bail!(
                    "layout semisorted:{prefix_len} refuses keys shorter than its {prefix_len}-byte \
                     prefix, and --key-size is {}: raise --key-size or lower --prefix-len",
                    args.key_size
                );
            }
        }
    }
    let mut specs: Vec<EngineSpec> = layouts.into_iter().map(EngineSpec::Scree).collect();
    let mut seen = Vec::new();
    for p in &args.peers {
        if !seen.contains(p) {
            seen.push(*p);
            specs.push(EngineSpec::Peer(*p));
        }
    }
    if specs.is_empty() {
        bail!("nothing to run: --layout none and no --peers");
    }

    let reads = args.effective_reads();
    let engine_cfg = EngineConfig {
        write_buffer_bytes: args.write_buffer_mb << 20,
        bloom_bits: args.bloom_bits,
        sync: args.sync,
        direct_reads: args.direct_reads,
        block_cache_bytes: Some(args.block_cache_mb.saturating_mul(1 << 20)),
        key_prefix_len: (args.key_groups > 0).then_some(keys::GROUP_PREFIX_BYTES),
        scree: engine::ScreeTuning {
            background_threads: args.background_threads,
            flush_threads: args.flush_threads,
            flush_in_compactions: !args.no_flush_in_compactions,
            trie_pile_size: args.trie_pile_size,
            trie_last_level_depth: args.trie_last_level_depth,
            leveled_subcompactions: args.leveled_subcompactions,
            leveled_base_mb: args.leveled_base_mb,
            leveled_seek_compaction: args.leveled_seek_compaction,
            frag_tables_per_guard: args.frag_tables_per_guard,
            frag_parallel_seeks: args.frag_parallel_seeks,
            lwc_division_count: args.lwc_division_count,
            lwc_dtable_mb: args.lwc_dtable_mb,
            lwc_base_mb: args.lwc_base_mb,
            lwc_level_ratio: args.lwc_level_ratio,
            lwc_concurrent_jobs: args.lwc_concurrent_jobs,
            parallel_search: args.parallel_search,
            mmap_reads: !args.no_mmap_reads,
            max_open_files: args.max_open_files,
            cache_index_and_filter_blocks: args.cache_index_and_filter_blocks,
            semisorted_plan: args.semisorted_plan.clone(),
            device: args.scree_device(),
        },
    };
    let phase_cfg = PhaseConfig {
        num: args.num,
        reads,
        threads: args.threads,
        seed: args.seed,
        seek_nexts: args.seek_nexts,
        request_distribution: args.request_distribution,
        wait_compaction: args.wait_compaction,
        progress: !args.quiet && std::io::stderr().is_terminal(),
        sample_interval: Duration::from_millis(100),
    };
    let codec = codec(&args)?;
    let capacity = args.num
        + args
            .workloads
            .iter()
            .map(|w| w.max_new_records(args.num, reads))
            .sum::<u64>();

    // One scratch directory for all temporary databases; removed when dropped.
    let scratch = match &args.db {
        Some(_) => None,
        None => Some(
            tempfile::Builder::new()
                .prefix("scree-bench-")
                .tempdir()
                .context("creating a temporary directory for the databases")?,
        ),
    };

    let base: PathBuf = match (&args.db, &scratch) {
        (Some(d), _) => d.clone(),
        (None, Some(s)) => s.path().to_path_buf(),
        (None, None) => bail!("no directory for the databases"),
    };

    let keys = if args.key_groups > 0 {
        format!(
            " | semi-sorted keys: groups of {} ({}-byte prefix)",
            args.key_groups,
            keys::GROUP_PREFIX_BYTES
        )
    } else {
        String::new()
    };
    eprintln!(
        "scree bench: {} on {} | num {} reads {} key {} B value {} B threads {}{keys}",
        args.workloads
            .iter()
            .map(|w| w.name())
            .collect::<Vec<_>>()
            .join(","),
        specs
            .iter()
            .map(EngineSpec::label)
            .collect::<Vec<_>>()
            .join(","),
        args.num,
        reads,
        args.key_size,
        args.value_size,
        args.threads
    );

    let mut runs = Vec::new();
    for spec in &specs {
        let label = spec.label();
        let dir = if specs.len() == 1 && args.db.is_some() {
            base.clone()
        } else {
            base.join(label.replace('/', "-"))
        };
        let run = run_engine(spec, &dir, &engine_cfg, &phase_cfg, &codec, &args, capacity);
        if args.db.is_none() {
            // Free the space before the next engine runs.
            let _ = std::fs::remove_dir_all(&dir);
        }
        if let Some(e) = &run.error {
            eprintln!("{label}: {e}");
        }
        runs.push(run);
    }

    let config = report::config_json(&args, reads, &specs);
    print!("{}", report::table(&runs, &args));
    if let Some(v) = verdict::verdict(&runs) {
        print!("{v}");
    }
    let mut ok = runs.iter().all(|r| !r.failed());
    if let Some(path) = &args.json {
        let doc = report::json(config, &runs);
        let text = serde_json::to_string_pretty(&doc).context("encoding the JSON report")?;
        std::fs::write(path, text + "\n")
            .with_context(|| format!("writing the JSON report to {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    if let Some(dir) = &args.plot {
        match plot::write_all(dir, &runs) {
            Ok(files) => eprintln!("wrote {} plots to {}", files.len(), dir.display()),
            Err(e) => {
                eprintln!("plots failed: {e:#}");
                ok = false;
            }
        }
    }
    Ok(ok)
}

fn run_engine(
    spec: &EngineSpec,
    dir: &Path,
    engine_cfg: &EngineConfig,
    phase_cfg: &PhaseConfig,
    codec: &KeyCodec,
    args: &BenchArgs,
    capacity: u64,
) -> RunResult {
    let label = spec.label();
    let mut run = RunResult {
        engine: match spec {
            EngineSpec::Scree(_) => "scree".into(),
            EngineSpec::Peer(p) => p.name().into(),
        },
        layout: match spec {
            EngineSpec::Scree(l) => Some(l.name().into()),
            EngineSpec::Peer(_) => None,
        },
        label: label.clone(),
        settings: Vec::new(),
        wait_method: String::new(),
        kept_at: args.db.as_ref().map(|_| dir.to_path_buf()),
        workloads: Vec::new(),
        error: None,
    };
    if let Err(e) = std::fs::create_dir_all(dir) {
        run.error = Some(format!("creating {}: {e}", dir.display()));
        return run;
    }
    let fresh = engine::dir_is_empty(dir);
    // What the engines before this one freed is not counted in this one's resident set.
    metrics::release_free_memory();
    let engine = match spec.open(dir, engine_cfg) {
        Ok(e) => e,
        Err(e) => {
            run.error = Some(format!("{e:#}"));
            return run;
        }
    };
    run.engine = engine.engine().to_string();
    run.layout = engine.layout();
    run.settings = engine.settings();
    if args.key_groups > 0 {
        run.settings
            .push(("key_groups".into(), args.key_groups.to_string()));
    }
    if args.workloads.contains(&Workload::ScanGroup) && run.engine != "scree" {
        run.settings.push((
            "scangroup".into(),
            "seek to the prefix, next while keys start with it".into(),
        ));
    }
    if args.workloads.contains(&Workload::MixNonBlind) {
        run.settings
            .push(("put_if_absent".into(), engine.put_if_absent_method().into()));
    }
    run.wait_method = engine.wait_method().into();
    let state = RunState {
        presence: Presence::new(capacity),
        inserts: ycsb::InsertSequence::new(args.num),
    };
    if !fresh {
        eprintln!(
            "{label}: {} already holds data; assuming it holds keys 0..{} written by a previous run",
            dir.display(),
            args.num
        );
        state.presence.set_all_below(args.num);
    }
    for &w in &args.workloads {
        let result = phase::run(engine.as_ref(), dir, &state, codec, w, phase_cfg, &label);
        if !args.quiet {
            eprintln!("{}", report::one_line(&label, &result));
        }
        let stop = result.failed();
        run.workloads.push(result);
        if stop {
            break;
        }
    }
    drop(engine);
    metrics::release_free_memory();
    run
}
