//! The fuzz crate (`fuzz/`, not a workspace member) still builds against this crate: a change of
//! a public type once broke every fuzz target for a whole session unnoticed, because nothing in
//! `cargo test --workspace` compiled them. The fuzzing itself is `scripts/fuzz.sh`.

use std::path::Path;
use std::process::Command;

#[test]
fn the_fuzz_targets_and_their_corpus_maker_compile() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/Cargo.toml");
    let out = Command::new(env!("CARGO"))
        .args([
            "check",
            "--quiet",
            "--bins",
            "--examples",
            "--manifest-path",
        ])
        .arg(&manifest)
        .output()
        .expect("run cargo");
    assert!(
        out.status.success(),
        "cargo check of {} failed:\n{}",
        manifest.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// CI's short fuzz run: every target for 5 seconds through `scripts/fuzz.sh` (which installs
/// cargo-fuzz when it is missing and builds the targets with overflow checks), from the
/// committed seed corpora plus a fresh work corpus. A failing input fails the test; it is saved
/// under `fuzz/artifacts/TARGET/`. The long runs (`scripts/fuzz.sh 3600`) are in
/// docs/reliability.md.
#[test]
fn every_fuzz_target_runs_briefly_without_failure() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/fuzz.sh");
    let work = tempfile::tempdir().expect("work dir");
    let out = Command::new("bash")
        .arg(&script)
        .arg("5")
        .env("FUZZ_WORK", work.path())
        .output()
        .expect("run scripts/fuzz.sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "scripts/fuzz.sh 5 failed:\n{stdout}\n{stderr}"
    );
    // One line per target with its execution count, then the total.
    let runs: Vec<u64> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("fuzz "))
        .filter_map(|l| l.split(": ").nth(1))
        .filter_map(|l| l.split(' ').next())
        .filter_map(|n| n.parse().ok())
        .collect();
    assert!(runs.len() >= 8, "fewer targets than expected:\n{stdout}");
    assert!(
        runs.iter().all(|&n| n > 0),
        "a target ran nothing:\n{stdout}"
    );
    println!("{stdout}");
}
