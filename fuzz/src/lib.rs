//! Helpers shared by the fuzz targets: an in-memory environment holding one file.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use scree::fs::fault::FaultFs;
use scree::fs::{Env, FileSystem};
use scree::stats::IoStats;

/// An `Env` over a fresh in-memory file system holding `data` at `/f/<name>`; returns the env
/// and the file's path.
pub fn env_with_file(name: &str, data: &[u8]) -> (Env, PathBuf) {
    let fs = FaultFs::new(1);
    let _ = fs.create_dir_all(Path::new("/f"));
    let path = PathBuf::from("/f").join(name);
    fs.set_file_bytes(&path, data.to_vec());
    let env = Env {
        fs: Arc::new(fs),
        stats: Arc::new(IoStats::default()),
        direct_reads: false,
    };
    (env, path)
}
