//! `scree check DIR`: the offline consistency check of `scree::check` on a database directory.
//! Prints every problem with its file and offset; exits non-zero when there is any.

use std::path::PathBuf;
use std::sync::Arc;

use scree::check;
use scree::fs::std_fs::StdFs;

/// Arguments of `scree check`.
#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    /// The database directory (it is only read: nothing is recovered, written or removed).
    pub dir: PathBuf,
    /// Also print notes (torn WAL tails, files the next open will remove) and counts.
    #[arg(long, short)]
    pub verbose: bool,
}

/// Runs the check; `Ok(true)` when the database has no problem.
pub fn run(args: CheckArgs) -> anyhow::Result<bool> {
    let rep = check::check_dir(&args.dir, Arc::new(StdFs))?;
    for p in &rep.problems {
        println!("problem: {p}");
    }
    if args.verbose {
        for n in &rep.notes {
            println!("note: {n}");
        }
    }
    println!(
        "{}: {} problem(s); {} files, {} log records, {} table blocks, {} entries checked",
        args.dir.display(),
        rep.problems.len(),
        rep.files,
        rep.records,
        rep.blocks,
        rep.entries
    );
    Ok(rep.problems.is_empty())
}
