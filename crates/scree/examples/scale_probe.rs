//! Scale probe: how per-operation costs of the layout seam grow with the number of tables.
//!
//! Builds versions of `leveled`, `fragmented` and `trie` holding N synthetic tables (metadata
//! only: no table file is ever opened) and times the calls the engine makes per flush, per
//! compaction, per read and per manifest roll-over / recovery:
//! `apply` of a flush edit (one L0 table) and of a compaction edit (two tables out, two in),
//! `files`, `snapshot`, `pick`, `needs_compaction`, `pressure`, and `get` of a key no table
//! holds (the lookup's placement work only). It also replays a manifest-like edit stream (a
//! snapshot of N tables then `N/4` flush edits, as a manifest held before it was rolled over
//! at twice its snapshot) to show the cost of recovery, and the same with the edits bounded by
//! `manifest::MAX_EDITS_PER_LARGE_MANIFEST`.
//!
//! `cargo run --release --example scale_probe -- [sizes] [layouts]`,
//! e.g. `cargo run --release --example scale_probe -- 1000,10000,100000 leveled,fragmented,trie`.
//! `SCALE_REPLAY=0` skips the replay measurement.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Instant;

use scree::cache::BlockCache;
use scree::coding::{put_slice, put_varint};
use scree::fs::std_fs::StdFs;
use scree::fs::Env;
use scree::key::{make_ikey, ValueKind};
use scree::layout::{new_layout, JobCtx, LayoutVersion};
use scree::manifest::edit::{AddedTable, KsEdit, LayoutRecord};
use scree::stats::IoStats;
use scree::table::{TableCtx, TableMeta};
use scree::{KeyspaceOptions, Layout};

fn ctx() -> Arc<TableCtx> {
    Arc::new(TableCtx {
        env: Env {
            fs: Arc::new(StdFs),
            stats: Arc::default(),
            direct_reads: false,
            mmap_reads: false,
        },
        cache: BlockCache::new(0),
        dir: std::env::temp_dir().join("scree-scale-probe-no-files"),
        open: scree::table::OpenTables::default(),
        purge: scree::table::purge::Purger::inline(),
        compaction_wanted: Default::default(),
    })
}

fn meta(no: u64, lo: &str, hi: &str, seq: u64) -> TableMeta {
    TableMeta {
        file_no: no,
        size: 2 << 20,
        smallest: make_ikey(lo.as_bytes(), seq, ValueKind::Put),
        largest: make_ikey(hi.as_bytes(), seq, ValueKind::Put),
        entries: 20_000,
        min_seq: seq,
        max_seq: seq,
        append: None,
    }
}

fn add(level: u32, slot: u64, format: u8, meta: TableMeta) -> AddedTable {
    AddedTable {
        level,
        slot,
        format,
        meta,
    }
}

/// Key of table `i`: tables cover `k{i}a ..= k{i}m`; `k{i}z` lies in no table.
fn lo(i: u64) -> String {
    format!("k{i:010}a")
}
fn hi(i: u64) -> String {
    format!("k{i:010}m")
}
fn gap(i: u64) -> String {
    format!("k{i:010}z")
}

fn time<R>(reps: u32, mut f: impl FnMut() -> R) -> f64 {
    let t = Instant::now();
    for _ in 0..reps {
        std::hint::black_box(f());
    }
    t.elapsed().as_secs_f64() * 1e6 / f64::from(reps)
}

struct Built {
    version: Arc<dyn LayoutVersion>,
    /// A compaction-like edit on `version`: two tables out, two new ones in.
    compaction: KsEdit,
    /// Builds the n-th flush edit (a new L0 table, or an upper-level container table).
    flush: Box<dyn Fn(u64) -> KsEdit>,
    build_us: f64,
}

const TRIE_DEPTH: u32 = 5;

fn trie_cid(i: u64) -> u64 {
    (u64::from(TRIE_DEPTH) << 56) | (i % (1 << (3 * TRIE_DEPTH)))
}

fn build(kind: Layout, n: u64, tables: &Arc<TableCtx>) -> (Built, KsEdit) {
    let layout = new_layout(kind).expect("layout");
    let empty = layout.empty_version(tables);
    let mut snap = KsEdit::default();
    let base = 1_000_000u64;
    match kind {
        Layout::Leveled => {
            // L1 holds n/10, L2 the rest; all sorted and disjoint per level.
            for i in 0..n {
                let level = if i % 10 == 0 { 1 } else { 2 };
                snap.added
                    .push(add(level, 0, 0, meta(base + i, &lo(i), &hi(i), 1 + i % 7)));
            }
        }
        Layout::Fragmented => {
            // Levels L0..L3; L3 has n/2 guards holding two tables each (newer one 1..), L1/L2
            // a guard every 64 / 8 keys of L3.
            let mut lv = Vec::new();
            put_varint(&mut lv, 4);
            snap.records.push(LayoutRecord { tag: 4, data: lv });
            for (level, every) in [(3u64, 2u64), (2, 16), (1, 128)] {
                let mut d = Vec::new();
                put_varint(&mut d, level);
                for g in (every..n).step_by(every as usize) {
                    put_slice(&mut d, lo(g).as_bytes());
                }
                snap.records.push(LayoutRecord { tag: 2, data: d });
            }
            for i in 0..n {
                // Two tables per L3 guard: i and i+1 share guard lo(i & !1); the odd one newer.
                snap.added
                    .push(add(3, 0, 0, meta(base + i, &lo(i), &hi(i), 10 + i % 2)));
            }
        }
        Layout::Trie => {
            let mut d = Vec::new();
            put_varint(&mut d, 1);
            put_varint(&mut d, u64::from(TRIE_DEPTH));
            snap.records.push(LayoutRecord { tag: 1, data: d });
            for i in 0..n {
                snap.added.push(add(
                    TRIE_DEPTH,
                    trie_cid(i),
                    scree::htable::FORMAT_HTABLE,
                    meta(base + i, &lo(i), &hi(i), 1 + i / (1 << (3 * TRIE_DEPTH))),
                ));
            }
        }
        _ => unreachable!(),
    }
    let t = Instant::now();
    let version = empty.apply(&snap, tables).expect("build");
    let build_us = t.elapsed().as_secs_f64() * 1e6;
    let next = base + n + 10;
    let mut compaction = KsEdit {
        removed: vec![base + 2, base + 3],
        ..KsEdit::default()
    };
    let (level, slot, format) = match kind {
        Layout::Leveled => (2, 0, 0),
        Layout::Fragmented => (3, 0, 0),
        _ => (TRIE_DEPTH, trie_cid(2), scree::htable::FORMAT_HTABLE),
    };
    compaction
        .added
        .push(add(level, slot, format, meta(next, &lo(2), &hi(2), 20)));
    let slot3 = if kind == Layout::Trie { trie_cid(3) } else { 0 };
    compaction.added.push(add(
        level,
        slot3,
        format,
        meta(next + 1, &lo(3), &hi(3), 20),
    ));
    let flush: Box<dyn Fn(u64) -> KsEdit> = Box::new(move |k: u64| {
        let no = next + 10 + k;
        let m = meta(no, "a", "b", 1_000 + k);
        let a = match kind {
            // An upper-level container of the trie (depth 1).
            Layout::Trie => add(1, (1 << 56) | (k % 8), scree::htable::FORMAT_HTABLE, m),
            _ => add(0, 0, 0, m),
        };
        KsEdit {
            added: vec![a],
            // Keep L0 short: the previous flush's table leaves.
            removed: if k > 0 && kind != Layout::Trie {
                vec![no - 1]
            } else {
                Vec::new()
            },
            ..KsEdit::default()
        }
    });
    (
        Built {
            version,
            compaction,
            flush,
            build_us,
        },
        snap,
    )
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let sizes: Vec<u64> = args
        .get(1)
        .map_or("1000,10000,100000", |s| s.as_str())
        .split(',')
        .map(|s| s.parse().expect("size"))
        .collect();
    let kinds: Vec<Layout> = args
        .get(2)
        .map_or("leveled,fragmented,trie", |s| s.as_str())
        .split(',')
        .map(|s| match s {
            "leveled" => Layout::Leveled,
            "fragmented" => Layout::Fragmented,
            "trie" => Layout::Trie,
            o => panic!("layout {o}"),
        })
        .collect();
    let replay = std::env::var("SCALE_REPLAY").map_or(true, |v| v != "0");
    let tables = ctx();
    println!(
        "{:<11} {:>7} {:>10} {:>10} {:>10} {:>9} {:>10} {:>9} {:>9} {:>8} {:>7} {:>12}",
        "layout",
        "tables",
        "build_ms",
        "flush_us",
        "compact_us",
        "files_us",
        "snapshot_us",
        "pick_us",
        "needs_us",
        "press_ns",
        "get_ns",
        "replay_s(n/4 edits / bounded)"
    );
    for &kind in &kinds {
        for &n in &sizes {
            let (b, snap) = build(kind, n, &tables);
            let layout = new_layout(kind).expect("layout");
            let reps = (2_000_000 / n).clamp(3, 200) as u32;
            let v = &b.version;
            // A flush edit that does not remove (the first): adds one table.
            let flush_us = time(reps, || v.apply(&(b.flush)(0), &tables).expect("flush"));
            let compact_us = time(reps, || v.apply(&b.compaction, &tables).expect("compact"));
            let files_us = time(reps, || v.files().len());
            let snapshot_us = time(reps, || {
                let mut e = KsEdit::default();
                v.snapshot(&mut e);
                e.added.len()
            });
            let mut opts = KeyspaceOptions::new(kind);
            opts.fragmented.max_levels = 4;
            let next = AtomicU64::new(1 << 40);
            let stats: Arc<IoStats> = Arc::default();
            let jctx = JobCtx {
                tables: &tables,
                next_file: &next,
                smallest_snapshot: 0,
                opts: &opts,
                stats: &stats,
                hash_key: [0; 16],
                flush_point: None,
            };
            // Policies keep reservations: a fresh one per call, so each pick plans from scratch.
            let pick_us = time(reps, || {
                let l = new_layout(kind).expect("layout");
                l.pick(v, &jctx).is_some()
            });
            let needs_us = time(reps, || layout.needs_compaction(v, &opts));
            let press_ns = time(reps * 100, || layout.pressure(v, &opts)) * 1e3;
            let mut k = 0u64;
            let get_ns = time(reps * 100, || {
                k = (k + 7919) % n;
                v.get(gap(k).as_bytes(), u64::MAX >> 8).is_ok()
            }) * 1e3;
            // Recovery: the snapshot, then n/4 flush edits (a manifest at roll-over holds
            // about as many edit bytes as snapshot bytes). Measured on up to 2000 edits and
            // scaled.
            let replay_s = if replay {
                let edits = n / 4;
                let measured = edits.min(2000);
                let t = Instant::now();
                let mut cur = layout
                    .empty_version(&tables)
                    .apply(&snap, &tables)
                    .expect("snap");
                let snap_s = t.elapsed().as_secs_f64();
                let t = Instant::now();
                for i in 0..measured {
                    cur = cur.apply(&(b.flush)(i), &tables).expect("replay");
                }
                let per = t.elapsed().as_secs_f64() / measured.max(1) as f64;
                let bounded = edits.min(scree::manifest::MAX_EDITS_PER_LARGE_MANIFEST);
                format!(
                    "{:.2}/{:.2}",
                    snap_s + per * edits as f64,
                    snap_s + per * bounded as f64
                )
            } else {
                "-".into()
            };
            println!(
                "{:<11} {:>7} {:>10.1} {:>10.1} {:>10.1} {:>9.1} {:>10.1} {:>9.1} {:>9.1} {:>8.0} {:>7.0} {:>12}",
                kind.name(),
                n,
                b.build_us / 1e3,
                flush_us,
                compact_us,
                files_us,
                snapshot_us,
                pick_us,
                needs_us,
                press_ns,
                get_ns,
                replay_s
            );
        }
    }
}
