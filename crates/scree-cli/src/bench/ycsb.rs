//! YCSB's request generators and core workloads A–F, ported from YCSB's `CoreWorkload`,
//! `ZipfianGenerator`, `ScrambledZipfianGenerator` and `SkewedLatestGenerator`.
//!
//! Record number `r` is stored under key index `r` (see `keys.rs`); YCSB's own key hashing is
//! replaced by the scrambled zipfian's FNV hash (which spreads the popular records over the key
//! space) and by `ycsb-load` inserting the records in a random order. Inserts during a run
//! (D, E) append record numbers after the loaded ones, like YCSB's transaction insert sequence.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::keys::Rng;

/// YCSB's zipfian constant.
pub const ZIPFIAN_CONSTANT: f64 = 0.99;
/// YCSB's scrambled zipfian item count and its precomputed zeta (for constant 0.99).
const SCRAMBLED_ITEM_COUNT: u64 = 10_000_000_000;
const SCRAMBLED_ZETAN: f64 = 26.469_028_201_783_02;
/// YCSB E's `maxscanlength`.
pub const MAX_SCAN_LENGTH: u64 = 100;

/// Σ_{i=st}^{n-1} 1/(i+1)^θ added to `initial`.
fn zeta(st: u64, n: u64, theta: f64, initial: f64) -> f64 {
    (st..n).fold(initial, |sum, i| sum + 1.0 / ((i + 1) as f64).powf(theta))
}

/// Zipfian over `[base, base + items)`: item `base` is the most popular (YCSB's Gray et al.
/// algorithm). The item count may grow (for the "latest" distribution); zeta is extended
/// incrementally.
#[derive(Clone, Debug)]
pub struct Zipfian {
    base: u64,
    items: u64,
    theta: f64,
    alpha: f64,
    zetan: f64,
    zeta2theta: f64,
    eta: f64,
    count_for_zeta: u64,
}

impl Zipfian {
    /// Zipfian over `items` items starting at `base`, computing zeta (O(items) once).
    pub fn new(base: u64, items: u64, theta: f64) -> Zipfian {
        Zipfian::with_zetan(base, items, theta, zeta(0, items, theta, 0.0))
    }

    fn with_zetan(base: u64, items: u64, theta: f64, zetan: f64) -> Zipfian {
        let zeta2theta = zeta(0, 2, theta, 0.0);
        let mut z = Zipfian {
            base,
            items,
            theta,
            alpha: 1.0 / (1.0 - theta),
            zetan,
            zeta2theta,
            eta: 0.0,
            count_for_zeta: items,
        };
        z.eta = z.eta_for(items);
        z
    }

    fn eta_for(&self, items: u64) -> f64 {
        (1.0 - (2.0 / items as f64).powf(1.0 - self.theta)) / (1.0 - self.zeta2theta / self.zetan)
    }

    /// A value for the configured item count.
    pub fn next(&mut self, rng: &mut Rng) -> u64 {
        self.next_with_count(self.items, rng)
    }

    /// A value in `[base, base + item_count)`, extending zeta if the count grew. (YCSB recomputes
    /// eta with the *original* item count here; we use the current one, as the formula intends.)
    pub fn next_with_count(&mut self, item_count: u64, rng: &mut Rng) -> u64 {
        if item_count > self.count_for_zeta {
            self.zetan = zeta(self.count_for_zeta, item_count, self.theta, self.zetan);
            self.count_for_zeta = item_count;
            self.eta = self.eta_for(item_count);
        }
        let u = rng.next_f64();
        let uz = u * self.zetan;
        if uz < 1.0 {
            return self.base;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return self.base + 1;
        }
        let v = (item_count as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        self.base + v.min(item_count - 1)
    }
}

/// YCSB's `Utils.fnvhash64` (FNV-1a over the 8 little-endian bytes, then `Math.abs`).
pub fn fnv_hash64(mut val: u64) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for _ in 0..8 {
        h ^= val & 0xff;
        h = h.wrapping_mul(1_099_511_628_211);
        val >>= 8;
    }
    (h as i64).unsigned_abs()
}

/// Zipfian popularity, scattered over `[min, min + items)` by hashing the zipfian rank.
#[derive(Clone, Debug)]
pub struct ScrambledZipfian {
    min: u64,
    items: u64,
    gen: Zipfian,
}

impl ScrambledZipfian {
    /// Over `items` items from `min`; with YCSB's constant the zeta of 10¹⁰ items is a constant.
    pub fn new(min: u64, items: u64) -> ScrambledZipfian {
        ScrambledZipfian {
            min,
            items,
            gen: Zipfian::with_zetan(0, SCRAMBLED_ITEM_COUNT, ZIPFIAN_CONSTANT, SCRAMBLED_ZETAN),
        }
    }

    /// The next record number.
    pub fn next(&mut self, rng: &mut Rng) -> u64 {
        self.min + fnv_hash64(self.gen.next(rng)) % self.items
    }
}

/// The insert sequence shared by the threads of one run: record numbers handed out to inserters,
/// and the highest number below which every insert has been acknowledged (YCSB's
/// `AcknowledgedCounterGenerator`, simplified: the limit is the count handed out, and a read of a
/// record whose insert is still in flight is not held against the engine — see `Presence`).
#[derive(Debug)]
pub struct InsertSequence {
    next: AtomicU64,
}

impl InsertSequence {
    /// A sequence whose first insert is record `records`.
    pub fn new(records: u64) -> Arc<InsertSequence> {
        Arc::new(InsertSequence {
            next: AtomicU64::new(records),
        })
    }
    /// Hands out the next record number to insert.
    pub fn next_insert(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }
    /// The number of records that exist or are being inserted.
    pub fn count(&self) -> u64 {
        self.next.load(Ordering::Relaxed)
    }
}

/// How a YCSB workload picks the record an operation touches.
#[derive(Clone, Debug)]
pub enum KeyChooser {
    /// Scrambled zipfian over the loaded records plus the expected inserts.
    Zipfian(ScrambledZipfian),
    /// Recent records are the most popular (YCSB D).
    Latest(Zipfian),
    /// Uniform over the loaded records.
    Uniform(u64),
}

impl KeyChooser {
    /// The next record number; never beyond the records that exist (`seq.count()`).
    pub fn next(&mut self, seq: &InsertSequence, rng: &mut Rng) -> u64 {
        let count = seq.count().max(1);
        match self {
            KeyChooser::Zipfian(z) => loop {
                let k = z.next(rng);
                if k < count {
                    return k;
                }
            },
            KeyChooser::Latest(z) => {
                let last = count - 1;
                last - z.next_with_count(count, rng).min(last)
            }
            KeyChooser::Uniform(n) => rng.below((*n).min(count).max(1)),
        }
    }
}

/// One YCSB operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// Point read.
    Read,
    /// Overwrite of an existing record.
    Update,
    /// New record.
    Insert,
    /// Short range scan.
    Scan,
    /// Read, then write back.
    ReadModifyWrite,
}

impl Op {
    /// Name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::Update => "update",
            Op::Insert => "insert",
            Op::Scan => "scan",
            Op::ReadModifyWrite => "rmw",
        }
    }
}

/// The request distribution named by a workload file (`requestdistribution`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Distribution {
    /// `requestdistribution=zipfian` (scrambled).
    Zipfian,
    /// `requestdistribution=latest`.
    Latest,
    /// `requestdistribution=uniform`.
    Uniform,
}

/// A YCSB core workload: operation proportions and request distribution.
#[derive(Clone, Debug)]
pub struct Spec {
    /// (operation, proportion), proportions summing to 1.
    pub mix: Vec<(Op, f64)>,
    /// How records are picked.
    pub distribution: Distribution,
}

impl Spec {
    /// The proportions of YCSB's `workloads/workload{a..f}` files.
    pub fn core(letter: char) -> Option<Spec> {
        use Distribution::*;
        use Op::*;
        let (mix, distribution) = match letter {
            'a' => (vec![(Read, 0.5), (Update, 0.5)], Zipfian),
            'b' => (vec![(Read, 0.95), (Update, 0.05)], Zipfian),
            'c' => (vec![(Read, 1.0)], Zipfian),
            'd' => (vec![(Read, 0.95), (Insert, 0.05)], Latest),
            'e' => (vec![(Scan, 0.95), (Insert, 0.05)], Zipfian),
            'f' => (vec![(Read, 0.5), (ReadModifyWrite, 0.5)], Zipfian),
            _ => return None,
        };
        Some(Spec { mix, distribution })
    }

    /// The fraction of operations that insert.
    pub fn insert_proportion(&self) -> f64 {
        self.mix
            .iter()
            .filter(|(op, _)| *op == Op::Insert)
            .map(|(_, p)| p)
            .sum()
    }

    /// Picks an operation (YCSB's `DiscreteGenerator`).
    pub fn next_op(&self, rng: &mut Rng) -> Op {
        let total: f64 = self.mix.iter().map(|(_, p)| p).sum();
        let mut u = rng.next_f64() * total;
        for &(op, p) in &self.mix {
            if u < p {
                return op;
            }
            u -= p;
        }
        self.mix.last().map_or(Op::Read, |(op, _)| *op)
    }

    /// The key chooser for `records` loaded records and `op_count` operations, as CoreWorkload
    /// builds it (the zipfian covers the expected new keys with YCSB's fudge factor of 2).
    pub fn chooser(&self, records: u64, op_count: u64) -> KeyChooser {
        match self.distribution {
            Distribution::Zipfian => {
                let expected_new = (op_count as f64 * self.insert_proportion() * 2.0) as u64;
                KeyChooser::Zipfian(ScrambledZipfian::new(0, records + expected_new + 1))
            }
            Distribution::Latest => {
                KeyChooser::Latest(Zipfian::new(0, records.max(1), ZIPFIAN_CONSTANT))
            }
            Distribution::Uniform => KeyChooser::Uniform(records),
        }
    }
}

/// YCSB E's scan length: uniform in `[1, MAX_SCAN_LENGTH]`.
pub fn scan_length(rng: &mut Rng) -> usize {
    1 + rng.below(MAX_SCAN_LENGTH) as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn zipfian_shape_follows_the_power_law() {
        let n = 1000;
        let mut z = Zipfian::new(0, n, ZIPFIAN_CONSTANT);
        let mut rng = Rng::new(1, 1);
        let draws = 1_000_000;
        let mut counts = vec![0u64; n as usize];
        for _ in 0..draws {
            let v = z.next(&mut rng);
            assert!(v < n);
            counts[v as usize] += 1;
        }
        // P(rank r) = 1 / (r^θ · ζ(n)).
        let zn = zeta(0, n, ZIPFIAN_CONSTANT, 0.0);
        // Ranks 1 and 2 are exact in Gray et al.'s algorithm; ranks ≥ 3 come from a continuous
        // approximation that overweights ranks 3–5 by up to ~17 % (as YCSB's generator does) and
        // is close again from rank 10 on.
        for (r, tolerance) in [
            (1usize, 0.03),
            (2, 0.03),
            (3, 0.25),
            (4, 0.2),
            (10, 0.06),
            (100, 0.06),
            (500, 0.1),
        ] {
            let expected = draws as f64 / ((r as f64).powf(ZIPFIAN_CONSTANT) * zn);
            let got = counts[r - 1] as f64;
            assert!(
                (got / expected - 1.0).abs() < tolerance,
                "rank {r}: got {got}, expected {expected}"
            );
        }
        // The mass of the 100 most popular items matches the power law.
        let head: u64 = counts[..100].iter().sum();
        let expected_head = zeta(0, 100, ZIPFIAN_CONSTANT, 0.0) / zn;
        assert!((head as f64 / draws as f64 - expected_head).abs() < 0.02);
        // Monotone on average: the top 10 ranks outweigh the next 10 by a wide margin.
        let top: u64 = counts[..10].iter().sum();
        let next: u64 = counts[10..20].iter().sum();
        assert!(top > 3 * next);
        // The head: item 0 takes about 1/ζ(n) of the draws (≈ 13 % for n = 1000).
        assert!((counts[0] as f64 / draws as f64 - 1.0 / zn).abs() < 0.01);
    }

    #[test]
    fn scrambled_zipfian_is_skewed_but_scattered() {
        let n = 100_000;
        let mut z = ScrambledZipfian::new(0, n);
        let mut rng = Rng::new(2, 2);
        let mut counts: HashMap<u64, u64> = HashMap::new();
        for _ in 0..200_000 {
            let v = z.next(&mut rng);
            assert!(v < n);
            *counts.entry(v).or_default() += 1;
        }
        let mut freq: Vec<(u64, u64)> = counts.into_iter().collect();
        freq.sort_by_key(|f| std::cmp::Reverse(f.1));
        // Skewed: the hottest record is drawn far more often than the uniform 2 times.
        assert!(freq[0].1 > 1000, "hottest {:?}", freq[0]);
        // Scattered: the ten hottest records are not the ten lowest record numbers.
        let hot_low = freq[..10].iter().filter(|(k, _)| *k < 10).count();
        assert!(hot_low < 3);
    }

    #[test]
    fn latest_prefers_recent_records() {
        let seq = InsertSequence::new(10_000);
        let spec = Spec::core('d').expect("d");
        let mut chooser = spec.chooser(10_000, 1000);
        let mut rng = Rng::new(3, 3);
        let draws = 100_000;
        let recent = (0..draws)
            .filter(|_| chooser.next(&seq, &mut rng) >= 9_990)
            .count();
        assert!(recent as f64 / draws as f64 > 0.3, "recent={recent}");
        // New inserts become the most popular.
        for _ in 0..100 {
            seq.next_insert();
        }
        let newest = (0..draws)
            .filter(|_| chooser.next(&seq, &mut rng) >= 10_050)
            .count();
        assert!(newest as f64 / draws as f64 > 0.3);
        assert!((0..1000).all(|_| chooser.next(&seq, &mut rng) < 10_100));
    }

    #[test]
    fn ycsb_proportions_match_the_workload_files() {
        let expect: [(char, &[(Op, f64)]); 6] = [
            ('a', &[(Op::Read, 0.5), (Op::Update, 0.5)]),
            ('b', &[(Op::Read, 0.95), (Op::Update, 0.05)]),
            ('c', &[(Op::Read, 1.0)]),
            ('d', &[(Op::Read, 0.95), (Op::Insert, 0.05)]),
            ('e', &[(Op::Scan, 0.95), (Op::Insert, 0.05)]),
            ('f', &[(Op::Read, 0.5), (Op::ReadModifyWrite, 0.5)]),
        ];
        for (letter, mix) in expect {
            let spec = Spec::core(letter).expect("core workload");
            let mut rng = Rng::new(4, letter as u64);
            let draws = 200_000;
            let mut counts: HashMap<Op, u64> = HashMap::new();
            for _ in 0..draws {
                *counts.entry(spec.next_op(&mut rng)).or_default() += 1;
            }
            assert_eq!(counts.len(), mix.len(), "{letter}");
            for &(op, p) in mix {
                let got = *counts.get(&op).unwrap_or(&0) as f64 / draws as f64;
                assert!((got - p).abs() < 0.005, "{letter} {op:?}: {got} vs {p}");
            }
        }
        assert_eq!(
            Spec::core('d').map(|s| s.distribution),
            Some(Distribution::Latest)
        );
        assert_eq!(
            Spec::core('a').map(|s| s.distribution),
            Some(Distribution::Zipfian)
        );
        assert!(Spec::core('g').is_none());
    }

    #[test]
    fn scan_lengths_are_uniform_up_to_100() {
        let mut rng = Rng::new(5, 5);
        let lens: Vec<usize> = (0..100_000).map(|_| scan_length(&mut rng)).collect();
        assert_eq!(lens.iter().min(), Some(&1));
        assert_eq!(lens.iter().max(), Some(&100));
        let mean = lens.iter().sum::<usize>() as f64 / lens.len() as f64;
        assert!((mean - 50.5).abs() < 0.5);
    }

    #[test]
    fn fnv_matches_ycsb() {
        // YCSB: Utils.fnvhash64(0) == Math.abs(0xa8c7f832281a39c5L) — FNV-1a of eight 0 bytes.
        assert_eq!(
            fnv_hash64(0),
            (0xa8c7_f832_281a_39c5u64 as i64).unsigned_abs()
        );
    }
}
