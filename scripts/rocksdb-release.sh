#!/usr/bin/env bash
# Builds a release RocksDB (assertions off: -DNDEBUG) as a shared library and a `scree` binary
# linked against it, to check the peer comparison against more than Debian's package. Debian 12's
# librocksdb 7.8.3 keeps RocksDB's assertions compiled in, which RocksDB's tracker reports as
# making writes up to 2x slower (facebook/rocksdb#4041; docs/benchmarks.md, "The peers").
#
# The source is RocksDB 7.9.2 as bundled in the crates.io package librocksdb-sys 0.10.0+7.9.2
# (fetched by cargo, so only crates.io is needed). Built with cmake + ninja, no compression
# libraries, -march=native (PORTABLE=OFF). About 30 minutes on 2 cores.
#
# usage: scripts/rocksdb-release.sh [WORKDIR]      (default /tmp/scree-rocksdb-release)
# then:  LD_LIBRARY_PATH=WORKDIR/build WORKDIR/target/release/scree bench --peers rocksdb ...
# The bench's settings line reports the RocksDB version the binary was built against.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
WORK=${1:-/tmp/scree-rocksdb-release}
CRATE="librocksdb-sys"
VERSION="0.10.0+7.9.2"
mkdir -p "$WORK/fetch/src"
cat >"$WORK/fetch/Cargo.toml" <<EOF
[package]
name = "fetch-rocksdb-source"
version = "0.0.0"
edition = "2021"
[dependencies]
$CRATE = "=$VERSION"
EOF
: >"$WORK/fetch/src/lib.rs"
(cd "$WORK/fetch" && cargo fetch)
SRC=$(cd "$WORK/fetch" && cargo metadata --format-version 1 |
  python3 -c 'import json,sys; d=json.load(sys.stdin); print(next(p["manifest_path"] for p in d["packages"] if p["name"]==sys.argv[1]))' "$CRATE")
SRC=$(dirname "$SRC")/rocksdb
cmake -S "$SRC" -B "$WORK/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS=-DNDEBUG \
  -DWITH_GFLAGS=OFF -DWITH_TESTS=OFF -DWITH_ALL_TESTS=OFF -DWITH_BENCHMARK_TOOLS=OFF \
  -DWITH_CORE_TOOLS=OFF -DWITH_TOOLS=OFF -DWITH_SNAPPY=OFF -DWITH_LZ4=OFF -DWITH_ZSTD=OFF \
  -DWITH_ZLIB=OFF -DWITH_BZ2=OFF -DWITH_LIBURING=OFF -DPORTABLE=OFF -DFAIL_ON_WARNINGS=OFF \
  -DROCKSDB_BUILD_SHARED=ON
ninja -C "$WORK/build" rocksdb-shared
# LevelDB still comes from the system (libleveldb-dev, scripts/setup-peers.sh).
SCREE_PEERS_LIB_DIR="$WORK/build" SCREE_PEERS_INCLUDE_DIR="$SRC/include" \
  CARGO_TARGET_DIR="$WORK/target" cargo build --release -p scree-cli --features peers \
  --manifest-path "$ROOT/Cargo.toml"
echo "built $WORK/target/release/scree against $WORK/build/librocksdb.so; run it with"
echo "  LD_LIBRARY_PATH=$WORK/build $WORK/target/release/scree bench --peers rocksdb ..."
