//! The `scree` command-line tool. Subcommands: `bench` (db_bench/YCSB-style workloads on every
//! Scree layout and, with the `peers` feature, on RocksDB and LevelDB).

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod bench;
mod peers;

/// Scree: an embeddable write-optimized key-value storage engine.
#[derive(Parser, Debug)]
#[command(name = "scree", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run benchmark workloads on Scree layouts (and RocksDB/LevelDB with --peers); prints a
    /// side-by-side table. With no arguments: 1M keys, fillrandom,readrandom,seekrandom on
    /// every implemented layout.
    Bench(bench::BenchArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Bench(args) => match bench::run(args) {
            Ok(true) => ExitCode::SUCCESS,
            Ok(false) => {
                eprintln!("scree bench: at least one run failed (see above)");
                ExitCode::FAILURE
            }
            Err(e) => {
                eprintln!("scree bench: {e:#}");
                ExitCode::from(2)
            }
        },
    }
}
