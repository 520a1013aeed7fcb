//! The format documents against the code, on every CI run: `scripts/decode_format.py` is a
//! second decoder written from docs/format.md and docs/format-htable.md alone (in Python). It
//! reads a database the engine wrote (every layout, after a crash, with WAL records of
//! every type) and must find no problem and replay exactly the live keys that were written.
//! A format change without its document change fails here. It runs on every CI run because a
//! decoder nothing runs drifts unnoticed: it can go on wanting a sorted table's `max_seq` to
//! equal its largest written sequence number after the code and format.md have changed that.
//!
//! Appendable tables (keyspace edit tag 6), which only the test-only layout of the library's
//! unit tests writes, are cross-checked there:
//! `layout::segments::tests::the_format_decoder_replays_a_database_of_appendable_tables`.
//!
//! Needs `python3` (standard library only); `.ci/run` installs it where it is missing.
//! The WAL damage cross-check (`scripts/wal_damage_crosscheck.py`) needs the `scree` binary
//! and stays a manual command (docs/format.md, "Cross-check").

#[path = "../examples/format_fixture.rs"]
#[allow(dead_code)]
mod format_fixture;

use std::path::Path;
use std::process::Command;

const CHILD_DIR: &str = "SCREE_FORMAT_FIXTURE_DIR";

/// Runs in a child process: writes the fixture and ends the process without closing the
/// database, as a crash would (the example's `crash` mode).
#[test]
fn format_fixture_child() {
    if let Ok(dir) = std::env::var(CHILD_DIR) {
        let args: Vec<String> = [
            "format_fixture",
            &dir,
            "leveled,fragmented,trie,lightweight,semisorted:1",
            "10000",
            "7",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        if let Err(e) = format_fixture::run(&args) {
            eprintln!("fixture: {e}");
            std::process::exit(2);
        }
    }
}

#[test]
fn a_decoder_written_from_the_format_documents_reads_what_the_engine_wrote() {
    let dir = tempfile::tempdir().expect("tempdir");
    let child = Command::new(std::env::current_exe().expect("exe"))
        .args([
            "--exact",
            "format_fixture_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_DIR, dir.path())
        .output()
        .expect("spawn the fixture child");
    assert!(
        child.status.success(),
        "fixture child failed: {}",
        String::from_utf8_lossy(&child.stderr)
    );
    let expected = dir.path().join("expected.tsv");
    let decoded = dir.path().join("decoded.tsv");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/decode_format.py");
    let out = match Command::new("python3")
        .arg(&script)
        .arg(dir.path().join("db"))
        .arg("--dump-keys")
        .arg(&decoded)
        .output()
    {
        Ok(o) => o,
        Err(e) => panic!(
            "cannot run python3 ({e}): the format cross-check needs it \
             (Debian: apt-get install python3; .ci/run installs it)"
        ),
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().unwrap_or("");
    assert!(
        out.status.success() && last == "OK",
        "decode_format.py found problems (exit {:?}):\n{}\n{}",
        out.status.code(),
        stdout
            .lines()
            .filter(|l| !l.contains(": sst,") && !l.contains(": htable"))
            .collect::<Vec<_>>()
            .join("\n"),
        String::from_utf8_lossy(&out.stderr)
    );
    let want = std::fs::read_to_string(&expected).expect("expected.tsv");
    let got = std::fs::read_to_string(&decoded).expect("decoded.tsv");
    assert!(
        want.lines().count() > 1000,
        "the fixture wrote too few live keys to check anything"
    );
    if want != got {
        let (w, g): (Vec<&str>, Vec<&str>) = (want.lines().collect(), got.lines().collect());
        let first = w
            .iter()
            .zip(&g)
            .position(|(a, b)| a != b)
            .unwrap_or(w.len().min(g.len()));
        panic!(
            "the decoder replays other keys than were written: {} expected, {} decoded; first \
             difference at line {}: {:?} against {:?}",
            w.len(),
            g.len(),
            first + 1,
            w.get(first),
            g.get(first)
        );
    }
}
