//! Links the C libraries of the peer engines (RocksDB, LevelDB) when the `peers` feature is on;
//! the default build needs neither. `SCREE_PEERS_LIB_DIR` adds a library search directory for
//! libraries installed outside the system paths.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=SCREE_PEERS_LIB_DIR");
    if std::env::var_os("CARGO_FEATURE_PEERS").is_none() {
        return;
    }
    if let Some(dir) = std::env::var_os("SCREE_PEERS_LIB_DIR") {
        println!("cargo:rustc-link-search=native={}", dir.to_string_lossy());
    }
    println!("cargo:rustc-link-lib=dylib=rocksdb");
    println!("cargo:rustc-link-lib=dylib=leveldb");
}
