//! SlimDB's Table 3 redone for Scree's compact three-level index (`scree::index`): bits per key
//! of a table's index, measured from the heap of the loaded index, for prefix groups of 16, 32
//! and 64 keys and Zipf-sized groups.
//!
//! `cargo run --release -p scree --example index_table3`
//!
//! Two tables of 4 KiB blocks, 16-byte keys (8-byte prefix, 8-byte suffix):
//! - **§5.2**: the paper's own table, 8,744 blocks of 17 entries (it reports 148,639 entries of
//!   256 bytes in 8,744 blocks, after LevelDB's key prefix compression);
//! - **§5.4**: a 32 MiB table of 8,192 blocks holding entries of a 16-byte key and a 100-byte
//!   value, 33 to a block, as a sorted table's block lays them out: 3 bytes of lengths, a 4-byte
//!   sequence tag, key and value (123 bytes), a 4-byte restart every 16 entries, the restart
//!   count and a 5-byte trailer (4,080 of 4,096 bytes). With 32 to a block, groups of 16 and 32
//!   would never straddle a block and need no separators, which flatters those columns.
//!
//! Groups: Fix.N has N entries per prefix; Zipf sizes follow Zipf's law over their rank,
//! ⌈8000 / i^0.14⌉ for the i-th largest (the paper's largest group is 8,000; the exponent is
//! the one that puts the paper's 26 groups in the §5.2 table). Prefixes and suffixes are hashed
//! with keyed SipHash-1-3 as the layout would; entries are sorted by (prefix hash, suffix hash,
//! key) and filled into blocks in order.
//!
//! "total" is `BlockIndex::heap_bytes`; "dhat" is what the allocator saw the decode leave live
//! (dhat's counting allocator, the index boxed), so the figure is measured twice and no formula
//! enters it; the example stops if the two differ by a byte. Lookups: every key of the table, in a scrambled order, must be located to exactly
//! its block; the cost columns are per lookup. Absent keys (a fresh prefix, or a present prefix
//! with a fresh suffix) report how often level 1 answered "none".

use std::path::Path;
use std::time::Instant;

use scree::index::{BlockIndex, IndexBuilder, LookupCost};
use siphasher::sip::SipHasher13;

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

/// splitmix64's finalizer: a bijection on u64.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

#[derive(Clone, Copy)]
enum Pattern {
    Fixed(u64),
    Zipf,
}

impl Pattern {
    fn name(self) -> String {
        match self {
            Pattern::Fixed(n) => format!("Fix.{n}"),
            Pattern::Zipf => "Zipf".into(),
        }
    }
    fn group_size(self, i: u64) -> u64 {
        match self {
            Pattern::Fixed(n) => n,
            Pattern::Zipf => (8000.0 / ((i + 1) as f64).powf(0.14)).ceil() as u64,
        }
    }
}

struct Table {
    /// (prefix hash, suffix hash, block), in table order.
    entries: Vec<(u64, u64, u32)>,
    groups: u64,
}

fn make_table(pattern: Pattern, blocks: u32, per_block: u32, seed: u64) -> Table {
    let hasher = SipHasher13::new_with_keys(mix(seed), mix(seed + 1));
    let total = u64::from(blocks) * u64::from(per_block);
    let mut keys: Vec<(u64, u64, [u8; 16])> = Vec::with_capacity(total as usize);
    let (mut group, mut n) = (0u64, 0u64);
    while n < total {
        let size = pattern.group_size(group).min(total - n);
        let prefix = mix(seed ^ (group << 20)).to_be_bytes();
        let ph = hasher.hash(&prefix);
        for j in 0..size {
            let suffix = mix(seed.wrapping_add(n + j).rotate_left(17)).to_be_bytes();
            let mut key = [0u8; 16];
            key[..8].copy_from_slice(&prefix);
            key[8..].copy_from_slice(&suffix);
            keys.push((ph, hasher.hash(&suffix), key));
        }
        n += size;
        group += 1;
    }
    keys.sort_unstable();
    let entries = keys
        .iter()
        .enumerate()
        .map(|(i, &(p, s, _))| (p, s, (i as u64 / u64::from(per_block)) as u32))
        .collect();
    Table {
        entries,
        groups: group,
    }
}

struct Measured {
    index: Box<BlockIndex>,
    dhat_bytes: usize,
    encoded: usize,
}

fn build(t: &Table, bucket_keys: usize) -> Measured {
    let mut b = IndexBuilder::with_bucket_keys(bucket_keys);
    for &(p, s, blk) in &t.entries {
        b.add(p, s, blk).expect("entries in table order");
    }
    let bytes = b.finish().expect("index bytes");
    let profiler = dhat::Profiler::builder().testing().build();
    let before = dhat::HeapStats::get().curr_bytes;
    let index =
        Box::new(BlockIndex::decode(&bytes, Path::new("table3"), 0).expect("index decodes"));
    let dhat_bytes = dhat::HeapStats::get().curr_bytes - before;
    drop(profiler);
    Measured {
        index,
        dhat_bytes,
        encoded: bytes.len(),
    }
}

fn main() {
    let configs = [
        ("§5.2", 8744u32, 17u32, [2.56, 1.94, 1.57, 1.56]),
        ("§5.4", 8192, 33, [2.56, 1.94, 1.57, 1.56]),
    ];
    let patterns = [
        Pattern::Fixed(16),
        Pattern::Fixed(32),
        Pattern::Fixed(64),
        Pattern::Zipf,
    ];
    println!("Bits per key of the compact three-level index (heap of the loaded index / entries)");
    println!();
    println!(
        "{:<5} {:<7} {:>7} {:>6} {:>6} {:>6} | {:>6} {:>6} {:>6} {:>6} | {:>6} {:>6} {:>5} | {:>6} {:>5} {:>6} {:>5}",
        "table", "groups", "entries", "prefix", "blocks", "seps",
        "L1", "L2", "L3", "total", "dhat", "paper", "ratio", "L1/pfx", "sep L", "L3/sep", "disk"
    );
    let mut cost_rows = Vec::new();
    for (name, blocks, per_block, paper) in configs {
        for (pi, &pattern) in patterns.iter().enumerate() {
            let t = make_table(pattern, blocks, per_block, 42 + pi as u64);
            let m = build(&t, scree::index::DEFAULT_BUCKET_KEYS);
            let idx = &m.index;
            let h = idx.heap_bytes();
            let n = t.entries.len() as f64;
            let bpk = |bytes: usize| bytes as f64 * 8.0 / n;
            // Separators the table needs, and the bits each keeps: the leading bits shared by
            // the suffix hashes on the two sides of a boundary inside a group (64 for a tie).
            let (mut seps, mut sep_bits) = (0usize, 0u64);
            for w in t.entries.windows(2) {
                if w[1].2 != w[0].2 && w[1].0 == w[0].0 {
                    seps += 1;
                    sep_bits += u64::from((w[0].1 ^ w[1].1).leading_zeros());
                }
            }
            println!(
                "{:<5} {:<7} {:>7} {:>6} {:>6} {:>6} | {:>6.3} {:>6.3} {:>6.3} {:>6.3} | {:>6.3} {:>6.2} {:>5.2} | {:>6.2} {:>5.1} {:>6.1} {:>5}",
                name,
                pattern.name(),
                t.entries.len(),
                idx.num_groups(),
                idx.num_blocks(),
                seps,
                bpk(h.level1),
                bpk(h.level2),
                bpk(h.level3 + h.fixed),
                bpk(h.total()),
                bpk(m.dhat_bytes),
                paper[pi],
                bpk(m.dhat_bytes) / paper[pi],
                h.level1 as f64 * 8.0 / f64::from(idx.num_groups()),
                sep_bits as f64 / seps.max(1) as f64,
                h.level3 as f64 * 8.0 / seps.max(1) as f64,
                m.encoded,
            );
            assert_eq!(
                t.groups,
                u64::from(idx.num_groups()),
                "distinct prefix hashes"
            );
            cost_rows.push((name, pattern, lookups(&t, idx)));
        }
    }
    println!();
    println!("L1, L2, L3 (with the index's own fields), total: BlockIndex::heap_bytes per entry, in bits;");
    println!(
        "dhat: heap the decode left live, per entry; ratio: dhat / paper; L1/pfx: level-1 bits per"
    );
    println!(
        "distinct prefix; sep L: bits kept per separator (mean); L3/sep: level-3 heap bits per"
    );
    println!("separator; disk: encoded bytes. Lookups, per lookup of a present key (all of them):");
    println!();
    println!(
        "{:<5} {:<7} {:>9} {:>7} {:>9} {:>9} {:>9} | {:>10} {:>10}",
        "table",
        "groups",
        "ns",
        "codes",
        "code bits",
        "rank/sel",
        "seps",
        "absent pfx",
        "absent sfx"
    );
    for (name, pattern, c) in cost_rows {
        println!(
            "{:<5} {:<7} {:>9.0} {:>7.1} {:>9.1} {:>9.1} {:>9.2} | {:>9.1}% {:>9.1}%",
            name,
            pattern.name(),
            c.ns,
            c.cost.trie_codes as f64 / c.cost.lookups as f64,
            c.cost.trie_bits as f64 / c.cost.lookups as f64,
            c.cost.rank_select as f64 / c.cost.lookups as f64,
            c.cost.separators as f64 / c.cost.lookups as f64,
            c.absent_prefix_none * 100.0,
            c.absent_suffix_one * 100.0,
        );
    }
    println!();
    println!("ns: wall time per locate (shared machine; a rough figure); codes, code bits: level-1 codes");
    println!("and bits decoded; rank/sel: rank, select and Elias-Fano accesses; seps: separators decoded.");
    println!("absent pfx: lookups of 100,000 fresh prefixes that level 1 answered \"none\";");
    println!(
        "absent sfx: lookups of a present prefix with a fresh suffix answered with one block."
    );
    println!();
    bucket_sweep();
}

struct Lookups {
    ns: f64,
    cost: LookupCost,
    absent_prefix_none: f64,
    absent_suffix_one: f64,
}

fn lookups(t: &Table, idx: &BlockIndex) -> Lookups {
    let n = t.entries.len();
    // A scrambled order: i ↦ (i × odd) mod n visits every entry once when gcd(odd, n) = 1.
    let mut step = (0x9E37_79B9usize % n) | 1;
    while gcd(step, n) != 1 {
        step += 2;
    }
    let mut cost = LookupCost::default();
    let start = Instant::now();
    let mut wrong = 0usize;
    for i in 0..n {
        let (p, s, b) = t.entries[i * step % n];
        if idx.locate(p, s) != Some(b..b + 1) {
            wrong += 1;
        }
    }
    let ns = start.elapsed().as_nanos() as f64 / n as f64;
    assert_eq!(wrong, 0, "keys not located to their block");
    for &(p, s, _) in &t.entries {
        idx.locate_counted(p, s, &mut cost);
    }
    let trials = 100_000u64;
    let none = (0..trials)
        .filter(|&i| idx.locate(mix(i ^ 0xABCD_0000), mix(i)).is_none())
        .count();
    let one = (0..trials)
        .filter(|&i| {
            let (p, _, _) = t.entries[(mix(i) % n as u64) as usize];
            idx.locate(p, mix(i ^ 0x5555)).is_some_and(|r| r.len() == 1)
        })
        .count();
    Lookups {
        ns,
        cost,
        absent_prefix_none: none as f64 / trials as f64,
        absent_suffix_one: one as f64 / trials as f64,
    }
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Level 1's size and decoding work for other bucket sizes (§5.4 table, Fix.16: the most
/// prefixes).
fn bucket_sweep() {
    println!(
        "Level-1 bucket size (§5.4 table, Fix.16): bits per distinct prefix and codes per lookup"
    );
    println!();
    println!(
        "{:>11} {:>8} {:>10} {:>12}",
        "bucket keys", "buckets", "L1/pfx", "codes/lookup"
    );
    let t = make_table(Pattern::Fixed(16), 8192, 33, 42);
    for bk in [8usize, 16, 32, 64, 128, 256] {
        let m = build(&t, bk);
        let idx = &m.index;
        let mut cost = LookupCost::default();
        for &(p, s, _) in &t.entries {
            idx.locate_counted(p, s, &mut cost);
        }
        let groups = f64::from(idx.num_groups());
        let buckets = idx.buckets();
        println!(
            "{:>11} {:>8} {:>10.3} {:>12.1}",
            bk,
            buckets,
            idx.heap_bytes().level1 as f64 * 8.0 / groups,
            cost.trie_codes as f64 / cost.lookups as f64,
        );
    }
}
