//! Process-kill torture in CI: for every implemented layout, `SCREE_TORTURE_CYCLES` (default 20)
//! cycles of `scree stress` SIGKILLed after a random 100..700 ms, then `scree stress --verify`
//! and `scree check`. The long run is `scripts/torture.sh LAYOUT 1000` (docs/reliability.md).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_scree")
}

fn run(args: &[&str]) -> (bool, String) {
    let out = Command::new(bin()).args(args).output().expect("run scree");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn torture(layout: &str, cycles: u64, seed: u64) {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("db");
    let exp = dir.path().join("expected");
    let (db_s, exp_s) = (db.to_str().expect("utf8"), exp.to_str().expect("utf8"));
    let mut rng = seed;
    let mut acked = 0u64;
    for cycle in 1..=cycles {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let delay = 100 + rng % 600;
        let mut child = Command::new(bin())
            .args([
                "stress",
                "--dir",
                db_s,
                "--layout",
                layout,
                "--seconds",
                "60",
                "--threads",
                "3",
                "--expected",
                exp_s,
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn stress");
        std::thread::sleep(Duration::from_millis(delay));
        if let Ok(Some(status)) = child.try_wait() {
            let out = child.wait_with_output().expect("output");
            panic!(
                "{layout} cycle {cycle}: stress exited early ({status}): {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        child.kill().expect("SIGKILL");
        let _ = child.wait();
        if Path::new(&exp).exists() {
            let (ok, text) = run(&["stress", "--dir", db_s, "--expected", exp_s, "--verify"]);
            assert!(
                ok,
                "{layout} cycle {cycle} (killed after {delay} ms): verification failed:\n{text}"
            );
            acked += text
                .split(" threads, ")
                .nth(1)
                .and_then(|s| s.split(' ').next())
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0);
        }
        if db.exists() {
            let (ok, text) = run(&["check", db_s]);
            assert!(ok, "{layout} cycle {cycle}: scree check:\n{text}");
        }
    }
    println!("torture {layout}: {cycles} cycles, {acked} acknowledged operations verified");
}

#[test]
fn sigkill_torture_every_layout() {
    let cycles = std::env::var("SCREE_TORTURE_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let layouts: Vec<String> = scree::Layout::implemented()
        .iter()
        .map(|l| l.name().to_string())
        .collect();
    std::thread::scope(|s| {
        for (i, l) in layouts.iter().enumerate() {
            s.spawn(move || torture(l, cycles, 0x9E37_79B9 + i as u64));
        }
    });
}
