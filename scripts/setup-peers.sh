#!/usr/bin/env bash
# Builds `scree` with every peer engine, so that
#   scree bench --peers rocksdb,leveldb,fjall,redb
# runs them in the same process as Scree:
#   rocksdb  the current RocksDB release (11.8.1), compiled from source in release mode by the
#            `rocksdb` crate (feature `rocksdb-current`; needs a C++ compiler and libclang);
#   leveldb  Debian's LevelDB 1.23 C library (feature `peers`, package libleveldb-dev);
#   fjall, redb  pure Rust (feature `peers-rust`).
# Debian's RocksDB 7.8.3 (`rocksdb-debian`, package librocksdb-dev) exports the same C symbols
# as the current one, so it is left out of this build; `--debian-rocksdb` builds it instead
# of the current release (for comparisons with older measurements).
#
# The first build compiles RocksDB's C++ source: 20-40 minutes on 2 cores. Cargo caches it in
# the target directory ($CARGO_TARGET_DIR or target/): later builds take seconds unless the
# crate's version or the profile changes. Idempotent: installed packages are left alone.
#
# Usage: scripts/setup-peers.sh [--debian-rocksdb]      (honours CARGO_TARGET_DIR)
set -euo pipefail
cd "$(dirname "$0")/.."

features=peers,peers-rust,rocksdb-current
pkgs=(libleveldb-dev libclang-dev g++)
peers=rocksdb,leveldb,fjall,redb
if [[ ${1:-} == --debian-rocksdb ]]; then
    features=peers,peers-rust
    pkgs=(libleveldb-dev librocksdb-dev)
    peers=rocksdb-debian,leveldb,fjall,redb
elif [[ $# -gt 0 ]]; then
    echo "usage: $0 [--debian-rocksdb]" >&2
    exit 2
fi

need=()
for pkg in "${pkgs[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
        need+=("$pkg")
    fi
done
if ((${#need[@]})); then
    sudo_cmd=()
    if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); fi
    echo "installing ${need[*]}"
    "${sudo_cmd[@]}" apt-get update
    "${sudo_cmd[@]}" apt-get install -y "${need[@]}"
else
    echo "${pkgs[*]} are installed"
fi

if [[ $features == *rocksdb-current* ]]; then
    echo "building with $features: the first build compiles RocksDB (20-40 minutes on 2 cores)"
fi
cargo build --release -p scree-cli --features "$features"
target="${CARGO_TARGET_DIR:-target}"
echo "built $target/release/scree with $features; try:"
echo "  $target/release/scree bench --peers $peers --num 300000"
