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
