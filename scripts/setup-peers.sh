#!/usr/bin/env bash
# Installs the C libraries of the peer engines (RocksDB, LevelDB; Debian 12 ships 7.8.3 and
# 1.23) and builds `scree` with the `peers` feature, so that `scree bench --peers rocksdb,leveldb`
# runs them in the same process as Scree. Idempotent: packages already installed are left alone,
# and cargo rebuilds only what changed.
#
# Usage: scripts/setup-peers.sh            (honours CARGO_TARGET_DIR)
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
for pkg in librocksdb-dev libleveldb-dev; do
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
    echo "librocksdb-dev and libleveldb-dev are installed"
fi

cargo build --release -p scree-cli --features peers
target="${CARGO_TARGET_DIR:-target}"
echo "built $target/release/scree with peers; try:"
echo "  $target/release/scree bench --peers rocksdb,leveldb --num 300000"
