//! The `scree` command-line tool. Subcommands: `bench` (db_bench/YCSB-style workloads on every
//! Scree layout and, with the `peers` feature, on RocksDB and LevelDB), `advise` (SlimDB's cost model), `stress` (the torture
//! driver), `check` (offline verification), `serve` (the Redis-protocol server of
//! `scree-server`) and the inspection commands `get`, `put`, `delete`, `scan`, `stats` and
//! `dump`.

#![deny(clippy::unwrap_used, clippy::indexing_slicing)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::indexing_slicing))]
#![warn(missing_docs)]

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod advise;
mod bench;
mod check_cmd;
mod inspect;
mod peers;
mod stress;

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
    Bench(Box<bench::BenchArgs>),
    /// SlimDB's cost model for a `semisorted` keyspace: the structure of each level (stepped or
    /// LSM, filter, pinned index) for a memory budget and workload mix, with predicted costs.
    Advise(advise::AdviseArgs),
    /// Multi-threaded writers and snapshot readers meant to be SIGKILLed; `--verify` reopens
    /// and checks the database against the expected-state file (see scripts/torture.sh).
    Stress(stress::StressArgs),
    /// Offline check of a database directory: CURRENT, manifest, every table block, WALs and
    /// layout invariants. Exits non-zero on any problem.
    Check(check_cmd::CheckArgs),
    /// Print the value of a key (read-only open). Exits 1 when the key has no value.
    Get(inspect::GetArgs),
    /// Store a value (opens the database as an application would).
    Put(inspect::PutArgs),
    /// Delete a key (opens the database as an application would).
    Delete(inspect::DeleteArgs),
    /// Print a keyspace's entries in key order, `key ==> value` (read-only open; sorted layouts).
    Scan(inspect::ScanArgs),
    /// Print each keyspace's levels, tables and memtable bytes (read-only open).
    Stats(inspect::StatsArgs),
    /// Print every live file of each keyspace: level, guard or container, size, entries, key
    /// and sequence ranges (read-only open).
    Dump(inspect::DumpArgs),
    /// Print each WAL's batches (and with --entries every put and delete), its seal and how it
    /// ends, as recovery reads it (reads the files only).
    Wal(inspect::WalArgs),
    /// Serve the database over the Redis protocol (RESP2/RESP3) until SIGTERM; see
    /// docs/server.md.
    Serve(scree_server::ServeArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Advise(args) => exit_with("advise", advise::run(args)),
        Command::Stress(args) => exit_with("stress", stress::run(args)),
        Command::Check(args) => exit_with("check", check_cmd::run(args)),
        Command::Get(args) => exit_with("get", inspect::get(args)),
        Command::Put(args) => exit_with("put", inspect::put(args)),
        Command::Delete(args) => exit_with("delete", inspect::delete(args)),
        Command::Scan(args) => exit_with("scan", inspect::scan(args)),
        Command::Stats(args) => exit_with("stats", inspect::stats(args)),
        Command::Dump(args) => exit_with("dump", inspect::dump(args)),
        Command::Wal(args) => exit_with("wal", inspect::wal(args)),
        Command::Serve(args) => exit_with("serve", scree_server::run(args.config()).map(|()| true)),
        Command::Bench(args) => match bench::run(*args) {
            Ok(true) => ExitCode::SUCCESS,
            Ok(false) => {
                eprintln!("scree bench: at least one run failed (see above)");
                ExitCode::FAILURE
            }
            Err(e) => {
                eprintln!("scree bench: {}", describe(&e));
                ExitCode::from(2)
            }
        },
    }
}

/// Exit code of every command but `bench`: 0 = OK, 1 = problems found (`check`, `stress`) or
/// key not found (`get`), 2 = could not run (the error is printed).
fn exit_with(name: &str, r: anyhow::Result<bool>) -> ExitCode {
    match r {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("scree {name}: {}", describe(&e));
            ExitCode::from(2)
        }
    }
}

/// An error and its causes, each cause once: Scree's errors already print their OS error
/// (`I/O error on PATH: No such file or directory`), which `{:#}` printed a second time.
fn describe(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.is_empty() {
            out = text;
        } else if !out.ends_with(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::describe;

    #[test]
    fn an_io_error_prints_its_os_error_once() {
        let io = std::io::Error::from_raw_os_error(2);
        let e = anyhow::Error::from(scree::Error::Io {
            path: "/nowhere".into(),
            source: io,
        })
        .context("opening the database");
        let text = describe(&e);
        assert_eq!(
            text,
            format!(
                "opening the database: I/O error on /nowhere: {}",
                std::io::Error::from_raw_os_error(2)
            )
        );
    }
}
