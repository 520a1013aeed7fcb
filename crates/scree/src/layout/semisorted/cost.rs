//! SlimDB's cost model (§4, Table 1): for a store of `N` keys in levels of `N_i = N_0 · r^i`
//! entries, a memory budget and a workload mix, the structure of each level (a row of
//! [`LevelPlan`]: stepped or LSM, filter or not, pinned three-level index or not) that
//! minimises the expected disk reads per operation. A pure function, searched exhaustively
//! (8^levels plans; 32,768 for the paper's five levels), so that it can be tested and
//! simulated without I/O; `scree advise` prints its answer.
//!
//! Costs are in random 4 KiB reads per operation, as in the paper: a positive read, a negative
//! read, and a write (`w` = the cost of writing a 4 KiB block sequentially relative to a random
//! read, divided by `B` entries per block). Memory per entry comes from [`MemoryCosts`], which
//! the caller measures from real structures (Table 1's 13/15/17/2 bits are the paper's).

use crate::options::LevelPlan;

/// Bits of memory per entry of each structure, measured (see docs/architecture-semisorted.md).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MemoryCosts {
    /// A cuckoo filter of an LSM level (Table 1's CF).
    pub cf: f64,
    /// A multi-level cuckoo filter of a stepped level.
    pub mlcf: f64,
    /// The pinned three-level index.
    pub index: f64,
}

impl MemoryCosts {
    /// The paper's Table 1: CF 13 bits, MLCF 15, three-level index 2 (CF+TL = 15, MLCF+TL = 17).
    pub const PAPER: MemoryCosts = MemoryCosts {
        cf: 13.0,
        mlcf: 15.0,
        index: 2.0,
    };
    /// Scree's structures as measured: a CF of 14-bit fingerprints in 4-slot buckets at 94 %
    /// load with a 1-bit id; a stepped level's MLCF at 17.2–20.2 bits per key as the level
    /// fills (16- down to 13-bit tags, 3–4-bit ids, segments added per arrival: 20.3 is the
    /// cost of a level at any fill, "Filter sizing measured"); the index at 0.6–0.8 bits per
    /// key with its load-time directory (docs/architecture-semisorted.md, "Measured").
    pub const MEASURED: MemoryCosts = MemoryCosts {
        cf: 17.0,
        mlcf: 20.3,
        index: 0.8,
    };
}

/// What the model is asked.
#[derive(Debug, Clone, PartialEq)]
pub struct Question {
    /// Keys in the store.
    pub keys: u64,
    /// Entries of level 0 (`N_0`).
    pub level0: u64,
    /// Growth factor and sub-levels of a stepped level (`r`).
    pub r: u32,
    /// Memory budget for filters and indexes, bytes.
    pub memory_bytes: u64,
    /// Shares of positive reads, negative reads and writes (summing to 1).
    pub mix: [f64; 3],
    /// Entries per 4 KiB block (`B`).
    pub per_block: f64,
    /// Sequential block write relative to a random block read (`w`, 0.146 in the paper).
    pub write_cost: f64,
    /// False-positive rate of the filters (`f`).
    pub fpr: f64,
    /// Memory per entry of each structure.
    pub memory: MemoryCosts,
}

/// One row's costs: memory bits per entry, positive read, negative read, write.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RowCost {
    /// Bits of memory per entry.
    pub mem_bits: f64,
    /// Reads of a positive lookup that finds its key in this level.
    pub pos: f64,
    /// Reads a lookup spends on this level when the key is not there.
    pub neg: f64,
    /// Cost per entry written into this level.
    pub write: f64,
}

/// Table 1's row `plan` under `q`.
pub fn row_cost(plan: LevelPlan, q: &Question) -> RowCost {
    let (r, f) = (f64::from(q.r), q.fpr);
    let wb = q.write_cost / q.per_block;
    let m = &q.memory;
    let (mem_bits, pos, neg) = match (plan.stepped, plan.filter, plan.index) {
        (false, false, false) => (0.0, 2.0, 2.0),
        (false, true, false) => (m.cf, 2.0, 2.0 * f),
        (false, true, true) => (m.cf + m.index, 1.0, f),
        (false, false, true) => (m.index, 1.0, 1.0),
        (true, false, false) => (0.0, r + 1.0, 2.0 * r),
        (true, true, false) => (m.mlcf, 2.0, 2.0 * f),
        (true, true, true) => (m.mlcf + m.index, 1.0, f),
        (true, false, true) => (m.index, (r + 1.0) / 2.0, r),
    };
    // An LSM level rewrites its run r times on average while it fills; a stepped level
    // writes each entry once (DESIGN.md: Table 1's row 4 reads rw/B, a slip).
    let write = if plan.stepped { wb } else { r * wb };
    RowCost {
        mem_bits,
        pos,
        neg,
        write,
    }
}

/// The answer for one plan.
#[derive(Debug, Clone, PartialEq)]
pub struct Estimate {
    /// The structure of each level, level 0 first.
    pub plan: Vec<LevelPlan>,
    /// Entries per level (`N_i`; the last holds the rest).
    pub entries: Vec<u64>,
    /// Expected reads of a positive lookup (`S_PR`).
    pub positive: f64,
    /// Of a negative lookup (`S_NR`).
    pub negative: f64,
    /// Cost of a write (`S_W`).
    pub write: f64,
    /// `r_PR·S_PR + r_NR·S_NR + r_W·S_W`.
    pub total: f64,
    /// Memory the plan needs, bytes.
    pub memory_bytes: f64,
}

/// Entries of each level of a store of `q.keys` keys: `N_0 · r^i`, the last level holding
/// what remains (at least one level).
pub fn level_entries(q: &Question) -> Vec<u64> {
    let mut out = Vec::new();
    let mut left = q.keys;
    let mut n = q.level0.max(1);
    while left > 0 && out.len() < 16 {
        let take = left.min(n);
        out.push(take);
        left -= take;
        n = n.saturating_mul(u64::from(q.r.max(2)));
    }
    if left > 0 {
        if let Some(l) = out.last_mut() {
            *l += left;
        }
    }
    if out.is_empty() {
        out.push(0);
    }
    out
}

/// The costs of `plan` (one entry per level of [`level_entries`]).
pub fn estimate(q: &Question, plan: &[LevelPlan]) -> Estimate {
    let entries = level_entries(q);
    let n: f64 = entries.iter().sum::<u64>().max(1) as f64;
    let rows: Vec<RowCost> = plan.iter().map(|p| row_cost(*p, q)).collect();
    let (mut pos, mut neg, mut write, mut mem) = (0.0, 0.0, 0.0, 0.0);
    let (mut neg_above, mut write_above) = (0.0, 0.0);
    for (&ni, c) in entries.iter().zip(&rows) {
        let share = ni as f64 / n;
        pos += share * (c.pos + neg_above);
        neg_above += c.neg;
        write_above += c.write;
        write += share * write_above;
        mem += ni as f64 * c.mem_bits / 8.0;
    }
    neg += neg_above;
    let [rp, rn, rw] = q.mix;
    Estimate {
        plan: plan.to_vec(),
        entries,
        positive: pos,
        negative: neg,
        write,
        total: rp * pos + rn * neg + rw * write,
        memory_bytes: mem,
    }
}

/// The plan of least total cost within the memory budget, searched over every combination of
/// Table 1's eight rows (`None` when even the plan without filters and indexes is over budget,
/// which cannot happen: it needs no memory). Ties go to the plan found first, in row order.
pub fn best_plan(q: &Question) -> Option<Estimate> {
    let levels = level_entries(q).len();
    let rows: Vec<LevelPlan> = (0..8).filter_map(LevelPlan::from_row).collect();
    let mut idx = vec![0usize; levels];
    let mut best: Option<Estimate> = None;
    loop {
        let plan: Vec<LevelPlan> = idx.iter().filter_map(|&i| rows.get(i).copied()).collect();
        let e = estimate(q, &plan);
        if e.memory_bytes <= q.memory_bytes as f64
            && best.as_ref().is_none_or(|b| e.total < b.total - 1e-12)
        {
            best = Some(e);
        }
        // Next combination (odometer).
        let mut carry = true;
        for i in idx.iter_mut() {
            *i += 1;
            if *i < rows.len() {
                carry = false;
                break;
            }
            *i = 0;
        }
        if carry {
            return best;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figure9(memory_mb: u64, mix: [f64; 3]) -> Question {
        // The paper's Figure 9: l = 5, r = 8, N_0 = 2^17 (about half a billion entries).
        let level0 = 1u64 << 17;
        let keys = (0..5).map(|i| level0 * 8u64.pow(i)).sum();
        Question {
            keys,
            level0,
            r: 8,
            memory_bytes: memory_mb << 20,
            mix,
            per_block: 16.0,
            write_cost: 0.146,
            fpr: 0.001,
            memory: MemoryCosts::PAPER,
        }
    }

    /// With the paper's inputs (Figure 9: five levels, r = 8, N_0 = 2^17) and 300–900 MB, the
    /// search gives Figure 4's memory structure: a filter and a pinned index at levels 0–3,
    /// only the index at level 4, which is LSM; levels 0–2 stepped whenever writes are in the
    /// mix. Where Table 1 as printed departs from Figure 4: level 3 is stepped too when the
    /// mix writes (SM+MLCF+TL has LSM+CF+TL's read costs and a lower write cost, for 2 more
    /// bits), and a read-only mix, for which stepped and LSM rows cost the same reads, takes
    /// the cheaper LSM rows everywhere. At 256 MiB level 3 cannot also pin its index (Figure
    /// 4's structure needs 280 MB).
    #[test]
    fn the_papers_inputs_give_figure_4s_memory_structure() {
        let mixes = [
            [0.0, 0.5, 0.5],
            [0.5, 0.0, 0.5],
            [1.0, 0.0, 0.0],
            [0.6, 0.2, 0.2],
        ];
        for mb in [300, 512, 900] {
            for mix in mixes {
                let best = best_plan(&figure9(mb, mix)).unwrap();
                let names: Vec<String> = best.plan.iter().map(|p| p.name()).collect();
                let writes = mix[2] > 0.0;
                let upper = if writes { "SM+MLCF+TL" } else { "LSM+CF+TL" };
                assert_eq!(
                    names,
                    [upper, upper, upper, upper, "LSM+TL"],
                    "{mb} MB, mix {mix:?}"
                );
            }
        }
        let at256 = best_plan(&figure9(256, [0.0, 0.5, 0.5])).unwrap();
        let names: Vec<String> = at256.plan.iter().map(|p| p.name()).collect();
        assert_eq!(
            names,
            ["SM+MLCF+TL", "SM+MLCF+TL", "SM+MLCF+TL", "LSM+CF", "LSM+TL"]
        );
    }

    /// More memory never costs more; with none, nothing is kept in memory; the search finds
    /// the exhaustive minimum (checked against every plan of a small store).
    #[test]
    fn the_search_is_exhaustive_and_monotone_in_memory() {
        let mix = [0.3, 0.2, 0.5];
        let mut last = f64::INFINITY;
        for mb in [0u64, 1, 4, 16, 64, 256, 1024, 4096] {
            let best = best_plan(&figure9(mb, mix)).unwrap();
            assert!(best.total <= last + 1e-12, "{mb} MB");
            assert!(best.memory_bytes <= (mb << 20) as f64);
            last = best.total;
            if mb == 0 {
                assert!(best.plan.iter().all(|p| !p.filter && !p.index));
            }
        }
        let mut q = figure9(2, mix);
        q.keys = q.level0 * 9;
        let best = best_plan(&q).unwrap();
        assert_eq!(best.plan.len(), 2);
        for a in 0..8 {
            for b in 0..8 {
                let p = [
                    LevelPlan::from_row(a).unwrap(),
                    LevelPlan::from_row(b).unwrap(),
                ];
                let e = estimate(&q, &p);
                if e.memory_bytes <= q.memory_bytes as f64 {
                    assert!(best.total <= e.total + 1e-12, "{p:?}");
                }
            }
        }
    }

    /// Table 1's rows, by hand: an unfiltered stepped level costs r + 1 reads for a positive
    /// lookup and 2r for a negative one; a filtered, indexed one one read and f.
    #[test]
    fn rows_follow_table_1() {
        let q = figure9(100, [1.0, 0.0, 0.0]);
        let c = |t| row_cost(LevelPlan::from_row(t).unwrap(), &q);
        assert_eq!((c(4).pos, c(4).neg), (9.0, 16.0));
        assert_eq!((c(6).pos, c(6).neg), (1.0, 0.001));
        assert_eq!((c(7).pos, c(7).neg), (4.5, 8.0));
        assert_eq!(c(0).write, 8.0 * c(4).write);
        assert_eq!(c(2).mem_bits, 15.0);
        assert_eq!(c(6).mem_bits, 17.0);
    }
}
