//! Helpers shared by the fuzz targets: an environment holding one file, in memory or on disk,
//! and inputs checked as found and again with a trailing checksum recomputed.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use scree::fs::std_fs::StdFs;
use scree::fs::{Env, FileSystem};
use scree::stats::IoStats;
use scree::testing::fault::FaultFs;

/// An `Env` over a fresh in-memory file system holding `data` at `/f/<name>`; returns the env
/// and the file's path. Reads copy the bytes (`pread`-like); nothing is memory-mapped.
pub fn env_with_file(name: &str, data: &[u8]) -> (Env, PathBuf) {
    let fs = FaultFs::new(1);
    let _ = fs.create_dir_all(Path::new("/f"));
    let path = PathBuf::from("/f").join(name);
    fs.set_file_bytes(&path, data.to_vec());
    let env = Env {
        fs: Arc::new(fs),
        stats: Arc::new(IoStats::default()),
        direct_reads: false,
        mmap_reads: false,
    };
    (env, path)
}

/// Runs `body` on `data` stored as `name` twice: in memory (read by copy) and as a real file
/// read through a memory map (`Options::mmap_reads`, the default read path of tables), so the
/// decoding of mapped blocks and buckets is fuzzed too. The real file is written under the
/// temporary directory with a name used once, and removed after `body` returns (its readers
/// and maps are dropped by then).
pub fn with_both_read_paths(name: &str, data: &[u8], mut body: impl FnMut(&Env, &Path)) {
    let (env, path) = env_with_file(name, data);
    body(&env, &path);
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!("scree-fuzz-{}", std::process::id()));
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let path = dir.join(format!("{n:06}-{name}"));
    if std::fs::create_dir_all(&dir).is_err() || std::fs::write(&path, data).is_err() {
        return;
    }
    let env = Env {
        fs: Arc::new(StdFs),
        stats: Arc::new(IoStats::default()),
        direct_reads: false,
        mmap_reads: true,
    };
    body(&env, &path);
    let _ = std::fs::remove_file(&path);
}

/// Runs `check` on `data` as found, then (when that changes it) with its last four bytes
/// replaced by the CRC32C of the bytes before them, so mutated contents behind a trailing
/// checksum reach the structural checks.
pub fn as_found_and_resealed(data: &[u8], mut check: impl FnMut(&[u8])) {
    check(data);
    if data.len() >= 5 {
        let mut sealed = data.to_vec();
        let body = sealed.len() - 4;
        let crc = scree::coding::crc(&sealed[..body]);
        sealed[body..].copy_from_slice(&crc.to_le_bytes());
        if sealed != data {
            check(&sealed);
        }
    }
}
