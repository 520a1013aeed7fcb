//! Shared helpers for integration tests: small options that exercise every level.
#![allow(dead_code)]

use scree::{KeyspaceOptions, Layout, Options};

/// Options with small buffers so that flushes and compactions happen in tiny tests.
pub fn small_ks(layout: Layout) -> KeyspaceOptions {
    let mut o = KeyspaceOptions::new(layout);
    o.write_buffer_bytes = 64 * 1024;
    o.block_size = 512;
    o.leveled.level_base_bytes = 16 * 1024;
    o.leveled.target_table_bytes = 8 * 1024;
    o.leveled.level_size_ratio = 4;
    scree_test_tune(&mut o);
    o
}

/// Layout-specific small settings (extended as layouts land).
pub fn scree_test_tune(o: &mut KeyspaceOptions) {
    // fragmented: four levels, two tables per guard, a few guards among a few hundred keys.
    let f = &mut o.fragmented;
    f.max_levels = 4;
    f.l0_compaction_trigger = 2;
    f.l0_slowdown_trigger = 4;
    f.l0_stop_trigger = 8;
    f.max_sstables_per_guard = 2;
    f.top_level_bits = 6;
    f.bit_decrement = 1;
    f.level_base_bytes = 64 * 1024;
    f.level_size_ratio = 4;
    f.seek_compaction_threshold = 4;
    // trie: piles of 2 and the last level at depth 2 (three levels), so a few flushes reach
    // every level.
    let t = &mut o.trie;
    t.pile_size = 2;
    t.last_level_depth = 2;
    t.slowdown_sublevels = 4;
    t.stop_sublevels = 8;
    // semisorted: steps of 2 sub-levels over three levels, small tables.
    let s = &mut o.semisorted;
    s.sub_levels = 2;
    s.max_levels = 3;
    s.slowdown_sublevels = 4;
    s.stop_sublevels = 8;
    s.target_table_bytes = 8 * 1024;
    // lightweight: four levels of small budgets and DTables of 48 KiB divided in 4, so that
    // light-weight compactions, aggregation, balance and division all happen in small tests.
    let l = &mut o.lightweight;
    l.max_levels = 4;
    l.l0_compaction_trigger = 2;
    l.l0_slowdown_trigger = 4;
    l.l0_stop_trigger = 8;
    l.level_base_bytes = 32 * 1024;
    // As given: raised to the level-0 backlog (128 KiB) the levels would be too large for
    // small tests to reach the fourth.
    l.level_base_follows_l0 = false;
    l.level_size_ratio = 4;
    l.dtable_max_bytes = 48 * 1024;
    l.division_count = 4;
}

pub fn small_db() -> Options {
    let mut o = Options::default();
    o.background_threads = 2;
    o.block_cache_bytes = 256 * 1024;
    o
}

/// The extension of the table files a keyspace of layout `l` writes (the format registry).
pub fn data_ext(l: Layout) -> &'static str {
    scree::table_format::written_by(l)
        .expect("implemented layout")
        .ext
}

/// Whether the layout offers ordered scans (its key order is total).
pub fn has_scans(l: Layout) -> bool {
    l.order().serves_range()
}

/// The shortest key the layout accepts (a `PrefixGroups` layout needs the whole prefix).
pub fn min_key_len(l: Layout) -> usize {
    match l.order() {
        scree::Order::PrefixGroups(n) => n,
        _ => 0,
    }
}
