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
    /// Also print notes (torn WAL tails, files the next open will remove), each keyspace's
    /// levels (tables, bytes, layout detail such as guards or containers) and each file the
    /// manifest names as its format describes it (version, blocks, buckets, filters).
    #[arg(long, short)]
    pub verbose: bool,
    /// Skip looking every table entry up through its layout (which finds tables filed where
    /// reads do not look, and filters or indexes that miss a key) to check a large database
    /// several times faster; every byte is still read and verified.
    #[arg(long)]
    pub no_lookups: bool,
}

/// Runs the check; `Ok(true)` when the database has no problem.
pub fn run(args: CheckArgs) -> anyhow::Result<bool> {
    let opts = check::CheckOptions {
        lookups: !args.no_lookups,
        describe: args.verbose,
    };
    let rep = check::check_dir_with(&args.dir, Arc::new(StdFs), opts)?;
    for p in &rep.problems {
        println!("problem: {p}");
    }
    if args.verbose {
        for n in &rep.notes {
            println!("note: {n}");
        }
        for (ks, levels) in &rep.levels {
            for l in levels {
                println!(
                    "keyspace {ks}: level {}: {} tables, {} bytes{}{}",
                    l.level,
                    l.tables,
                    l.bytes,
                    if l.detail.is_empty() { "" } else { ", " },
                    l.detail
                );
            }
        }
        for (path, d) in &rep.described {
            let name = path.file_name().unwrap_or(path.as_os_str());
            println!("file {}: {d}", name.to_string_lossy());
        }
    }
    let lookups = if args.no_lookups {
        "lookups skipped".to_string()
    } else {
        format!("{} found by a lookup", rep.lookups)
    };
    println!(
        "{}: {} problem(s); {} files, {} log records, {} table blocks, {} entries checked, {}",
        args.dir.display(),
        rep.problems.len(),
        rep.files,
        rep.records,
        rep.blocks,
        rep.entries,
        lookups
    );
    Ok(rep.problems.is_empty())
}
