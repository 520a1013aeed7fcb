//! `scree advise`: SlimDB's cost model (§4, Table 1) for a `semisorted` keyspace — the
//! structure of each level that minimises expected disk reads per operation within a memory
//! budget, with the predicted costs (`scree::layout::semisorted::cost`).

use clap::Args;

use scree::layout::semisorted::cost::{best_plan, estimate, MemoryCosts, Question};
use scree::LevelPlan;

/// Arguments of `scree advise`.
#[derive(Args, Debug, Clone)]
pub struct AdviseArgs {
    /// Keys the store will hold.
    #[arg(long)]
    pub keys: u64,
    /// Memory for filters and indexes, MiB.
    #[arg(long)]
    pub memory_mb: f64,
    /// Shares of positive reads, negative reads and writes (any scale: `2,1,1`).
    #[arg(long, value_delimiter = ',', required = true)]
    pub mix: Vec<f64>,
    /// Sub-levels per stepped level and growth factor (`r`).
    #[arg(long, default_value_t = 8)]
    pub r: u32,
    /// Entries of level 0 (`N_0`) [default: r memtables of --write-buffer-mb].
    #[arg(long)]
    pub level0: Option<u64>,
    /// Memtable size in MiB (sets the default N_0).
    #[arg(long, default_value_t = 64)]
    pub write_buffer_mb: u64,
    /// Bytes per key and per value (entries per block and per memtable).
    #[arg(long, default_value_t = 16)]
    pub key_size: u64,
    /// Bytes per value.
    #[arg(long, default_value_t = 100)]
    pub value_size: u64,
    /// Data block size.
    #[arg(long, default_value_t = 4096)]
    pub block_size: u64,
    /// Cost of a sequential block write relative to a random block read (the paper's SSD: 0.146).
    #[arg(long, default_value_t = 0.146)]
    pub write_cost: f64,
    /// Use the paper's Table 1 memory costs (13/15/17/2 bits) instead of Scree's measured ones.
    #[arg(long)]
    pub paper_memory: bool,
    /// Also print the cost of this plan (Table 1 rows, level 0 first: `6,6,6,2,3`).
    #[arg(long, value_delimiter = ',')]
    pub compare: Vec<u8>,
}

/// Runs `scree advise`.
pub fn run(a: AdviseArgs) -> anyhow::Result<bool> {
    let total: f64 = a.mix.iter().sum();
    let mix: [f64; 3] = match <[f64; 3]>::try_from(a.mix.as_slice()) {
        Ok(m) if total > 0.0 && m.iter().all(|x| *x >= 0.0) => m,
        _ => anyhow::bail!(
            "--mix needs three non-negative shares: positive reads, negative reads, writes"
        ),
    };
    if a.r < 2 {
        anyhow::bail!("--r must be at least 2");
    }
    let entry = (a.key_size + a.value_size + 8).max(1);
    let per_memtable = (a.write_buffer_mb << 20) / entry;
    let q = Question {
        keys: a.keys,
        level0: a.level0.unwrap_or(per_memtable * u64::from(a.r)).max(1),
        r: a.r,
        memory_bytes: (a.memory_mb * 1048576.0) as u64,
        mix: mix.map(|x| x / total),
        per_block: (a.block_size / entry).max(1) as f64,
        write_cost: a.write_cost,
        fpr: 0.001,
        memory: if a.paper_memory {
            MemoryCosts::PAPER
        } else {
            MemoryCosts::MEASURED
        },
    };
    let best = best_plan(&q).ok_or_else(|| anyhow::anyhow!("no plan fits the budget"))?;
    println!(
        "{} keys in {} levels of N_0 = {} entries, r = {}; B = {} entries per block, w = {}, f = {}; \
         memory costs {} (bits/entry: CF {}, MLCF {}, index {})",
        q.keys,
        best.entries.len(),
        q.level0,
        q.r,
        q.per_block,
        q.write_cost,
        q.fpr,
        if a.paper_memory { "of the paper's Table 1" } else { "measured in Scree" },
        q.memory.cf,
        q.memory.mlcf,
        q.memory.index
    );
    print_estimate("best plan", &best);
    let rows = best
        .plan
        .iter()
        .map(|p| p.row().to_string())
        .collect::<Vec<_>>()
        .join(",");
    println!("open it with SemiSortedOptions::plan = rows [{rows}] (scree bench --semisorted-plan {rows})");
    if !a.compare.is_empty() {
        let plan = a
            .compare
            .iter()
            .map(|&t| LevelPlan::from_row(t).ok_or_else(|| anyhow::anyhow!("row {t} is not 0..=7")))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let last = *plan.last().unwrap_or(&LevelPlan::FULL);
        let plan: Vec<LevelPlan> = (0..best.entries.len())
            .map(|i| plan.get(i).copied().unwrap_or(last))
            .collect();
        print_estimate("compared plan", &estimate(&q, &plan));
    }
    Ok(true)
}

fn print_estimate(title: &str, e: &scree::layout::semisorted::cost::Estimate) {
    println!("{title}:");
    println!("  level  entries        structure");
    for (i, (n, p)) in e.entries.iter().zip(&e.plan).enumerate() {
        println!("  {i:>5}  {n:>13}  {} (row {})", p.name(), p.row());
    }
    println!(
        "  reads per positive get {:.3}, per negative get {:.4}, write cost {:.4}; per operation {:.4}; memory {:.1} MiB",
        e.positive,
        e.negative,
        e.write,
        e.total,
        e.memory_bytes / 1048576.0
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(mix: Vec<f64>) -> AdviseArgs {
        AdviseArgs {
            keys: 50_000_000,
            memory_mb: 256.0,
            mix,
            r: 8,
            level0: None,
            write_buffer_mb: 64,
            key_size: 16,
            value_size: 100,
            block_size: 4096,
            write_cost: 0.146,
            paper_memory: false,
            compare: vec![6, 6, 2, 3],
        }
    }

    /// A plan is printed for a valid question; a mix that is not three non-negative shares is
    /// refused with a message naming `--mix`.
    #[test]
    fn advise_answers_and_refuses_bad_mixes() {
        assert!(run(args(vec![1.0, 1.0, 2.0])).unwrap());
        for bad in [vec![1.0, 1.0], vec![-1.0, 1.0, 1.0], vec![0.0, 0.0, 0.0]] {
            let e = run(args(bad)).unwrap_err().to_string();
            assert!(e.contains("--mix"), "{e}");
        }
    }
}
