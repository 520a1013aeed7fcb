//! The verdict printed under the bench table: for each workload, which engine did best on the
//! measure that workload is about (bytes written per user byte for fills, operations per second
//! for everything) and by how much against `leveled`, the baseline, from the numbers measured
//! in this run. Nothing here is a constant: with no `leveled` run there is no verdict.

use std::fmt::Write;

use super::phase::WorkloadResult;
use super::RunResult;

/// One verdict line per measure, or `None` when the run has no `leveled` column or fewer than
/// two engines.
pub fn verdict(runs: &[RunResult]) -> Option<String> {
    let base = runs
        .iter()
        .position(|r| r.layout.as_deref() == Some("leveled"))?;
    if runs.len() < 2 {
        return None;
    }
    let workloads = runs.iter().map(|r| r.workloads.len()).max().unwrap_or(0);
    let mut out = String::new();
    let _ = writeln!(out, "\nVerdict (against leveled, this run):");
    for wi in 0..workloads {
        let cells: Vec<(&str, &WorkloadResult)> = runs
            .iter()
            .filter_map(|r| {
                let w = r.workloads.get(wi)?;
                (!w.failed() && w.unsupported.is_none() && w.ops > 0)
                    .then_some((r.label.as_str(), w))
            })
            .collect();
        let Some(b) = runs.get(base).and_then(|r| r.workloads.get(wi)) else {
            continue;
        };
        if b.failed() || b.unsupported.is_some() || b.ops == 0 || cells.len() < 2 {
            continue;
        }
        if b.writes {
            if let Some(line) = best(&cells, b, "wrote least", "WA", Lower, |w| {
                w.write_amplification()
            }) {
                let _ = writeln!(out, "  {:<12} {line}", b.name);
            }
        }
        let what = if b.writes {
            "filled fastest"
        } else {
            "ran fastest"
        };
        if let Some(line) = best(&cells, b, what, "ops/s", Higher, |w| Some(w.ops_per_sec())) {
            let _ = writeln!(out, "  {:<12} {line}", b.name);
        }
    }
    Some(out)
}

/// Which way a measure improves.
#[derive(Clone, Copy)]
enum Better {
    Lower,
    Higher,
}
use Better::{Higher, Lower};

/// "`what`: ENGINE (VALUE UNIT, R× leveled's); others: …", the engines ranked best first.
fn best(
    cells: &[(&str, &WorkloadResult)],
    base: &WorkloadResult,
    what: &str,
    unit: &str,
    better: Better,
    measure: impl Fn(&WorkloadResult) -> Option<f64>,
) -> Option<String> {
    let b = measure(base).filter(|x| *x > 0.0)?;
    let mut ranked: Vec<(&str, f64)> = cells
        .iter()
        .filter_map(|(l, w)| Some((*l, measure(w)?)))
        .collect();
    ranked.sort_by(|x, y| match better {
        Lower => x.1.total_cmp(&y.1),
        Higher => y.1.total_cmp(&x.1),
    });
    let (first, rest) = ranked.split_first()?;
    let fmt = |x: f64| {
        if unit == "ops/s" {
            super::report::human(x)
        } else {
            format!("{x:.2}")
        }
    };
    let mut line = format!(
        "{what}: {} ({} {unit}, {:.2}× leveled's)",
        first.0,
        fmt(first.1),
        first.1 / b
    );
    let others: Vec<String> = rest
        .iter()
        .map(|(l, x)| format!("{l} {:.2}×", x / b))
        .collect();
    if !others.is_empty() {
        let _ = write!(line, "; then {}", others.join(", "));
    }
    Some(line)
}
