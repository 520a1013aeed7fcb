#!/usr/bin/env bash
# YCSB workloads A, B, C, D and F through go-ycsb's redis binding (hash datatype: HSET, HMGET,
# DEL) against redis-server (appendonly yes, appendfsync everysec) and `scree serve` (each
# layout in LAYOUTS), in one run. go-ycsb's redis binding has no scan, so workload E is not
# run. Prints the throughput and p99 of each workload (docs/benchmarks.md).
#
# usage: scripts/ycsb-server.sh GO_YCSB WORKLOADS_DIR [OUT_DIR]
#   GO_YCSB: the go-ycsb binary; WORKLOADS_DIR: go-ycsb's workloads/ directory. Build both:
#     d=$(go mod download -json github.com/pingcap/go-ycsb@v1.0.3 | jq -r .Dir)
#     cp -r "$d" /tmp/go-ycsb-src && chmod -R u+w /tmp/go-ycsb-src
#     (cd /tmp/go-ycsb-src && go build -o /tmp/go-ycsb ./cmd/go-ycsb)
# env: RECORDS (default 200000), OPS (default 200000), THREADS (default 16),
#      LAYOUTS (default leveled), SCREE_BIN (default target/release/scree)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
YCSB=${1:?go-ycsb binary}
WL=${2:?workloads directory}
OUT=${3:-/tmp/scree-ycsb-server}
RECORDS=${RECORDS:-200000}
OPS=${OPS:-200000}
THREADS=${THREADS:-16}
LAYOUTS=${LAYOUTS:-leveled}
BIN=${SCREE_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release/scree}
PORT=${PORT:-7600}
rm -rf "$OUT"
mkdir -p "$OUT"

wait_port() {
  for _ in $(seq 1 600); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  return 1
}

# "OPS" and "99th(us)" of go-ycsb's TOTAL line, or of its one operation line.
summary() { # LOG
  local line
  line=$(grep -E '^(TOTAL|READ|UPDATE|INSERT|READ_MODIFY_WRITE) ' "$1" | grep -v ERROR | tail -1 || true)
  local total
  total=$(grep -E '^TOTAL ' "$1" | tail -1 || true)
  [[ -n "$total" ]] && line=$total
  local ops p99
  ops=$(echo "$line" | sed -n 's/.*OPS: \([0-9.]*\).*/\1/p')
  p99=$(echo "$line" | sed -n 's/.*, 99th(us): \([0-9.]*\),.*/\1/p')
  echo "${ops:-?} ${p99:-?}"
}

run_all() { # NAME PORT
  local name=$1 port=$2
  local row="| $name |"
  local common=(-p "redis.addr=127.0.0.1:$port" -p redis.datatype=hash -p "recordcount=$RECORDS"
    -p "operationcount=$OPS" -p "threadcount=$THREADS")
  "$YCSB" load redis -P "$WL/workloada" "${common[@]}" >"$OUT/$name-load.log" 2>&1
  read -r o p < <(summary "$OUT/$name-load.log")
  row="$row $o | $p |"
  for w in a b c d f; do
    "$YCSB" run redis -P "$WL/workload$w" "${common[@]}" >"$OUT/$name-$w.log" 2>&1
    if grep -q -- "-ERROR" "$OUT/$name-$w.log"; then
      echo "errors in $OUT/$name-$w.log:" >&2
      grep -- "-ERROR" "$OUT/$name-$w.log" | head -3 >&2
    fi
    read -r o p < <(summary "$OUT/$name-$w.log")
    row="$row $o | $p |"
  done
  echo "$row" | tee -a "$OUT/table.md"
}

echo "| server | load ops/s | p99 us | A ops/s | p99 us | B | p99 | C | p99 | D | p99 | F | p99 |" >"$OUT/table.md"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|" >>"$OUT/table.md"

mkdir -p "$OUT/redis"
redis-server --port "$PORT" --bind 127.0.0.1 --dir "$OUT/redis" --appendonly yes \
  --appendfsync everysec --save "" >"$OUT/redis.log" 2>&1 &
rpid=$!
wait_port "$PORT"
run_all redis-server "$PORT"
kill -TERM "$rpid"; wait "$rpid" || true

for l in $LAYOUTS; do
  PORT=$((PORT + 1))
  "$BIN" serve --db "$OUT/$l" --bind "127.0.0.1:$PORT" --layout "$l" --timeout 0 >"$OUT/$l.log" 2>&1 &
  spid=$!
  wait_port "$PORT"
  run_all "scree-$l" "$PORT"
  kill -TERM "$spid"; wait "$spid" || true
done
echo "RECORDS=$RECORDS OPS=$OPS THREADS=$THREADS; logs and table in $OUT"
