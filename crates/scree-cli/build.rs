//! Links Debian's C libraries of the peer engines (LevelDB, RocksDB 7.8.3) when the `peers`
//! feature is on; the default build needs neither. With `rocksdb-current` the `rocksdb` crate
//! links its own RocksDB, which exports the same C symbols, so Debian's is not linked.
//! `SCREE_PEERS_LIB_DIR` adds a library search directory for libraries installed outside the
//! system paths.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=SCREE_PEERS_LIB_DIR");
    if std::env::var_os("CARGO_FEATURE_PEERS").is_none() {
        return;
    }
    if let Some(dir) = std::env::var_os("SCREE_PEERS_LIB_DIR") {
        println!("cargo:rustc-link-search=native={}", dir.to_string_lossy());
    }
    println!("cargo:rustc-link-lib=dylib=leveldb");
    if std::env::var_os("CARGO_FEATURE_ROCKSDB_CURRENT").is_some() {
        return;
    }
    println!("cargo:rustc-link-lib=dylib=rocksdb");
    // RocksDB's C API has no version call: record the header's version for the report.
    let include =
        std::env::var("SCREE_PEERS_INCLUDE_DIR").unwrap_or_else(|_| "/usr/include".into());
    println!("cargo:rerun-if-env-changed=SCREE_PEERS_INCLUDE_DIR");
    let header = format!("{include}/rocksdb/version.h");
    println!("cargo:rerun-if-changed={header}");
    if let Ok(text) = std::fs::read_to_string(&header) {
        let num = |name: &str| {
            text.lines()
                .find_map(|l| l.trim().strip_prefix("#define ")?.strip_prefix(name))
                .map(|v| v.trim().to_string())
        };
        if let (Some(a), Some(b), Some(c)) = (
            num("ROCKSDB_MAJOR"),
            num("ROCKSDB_MINOR"),
            num("ROCKSDB_PATCH"),
        ) {
            println!("cargo:rustc-env=SCREE_ROCKSDB_HEADER_VERSION={a}.{b}.{c}");
        }
    }
}
