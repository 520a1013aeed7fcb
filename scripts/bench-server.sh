#!/usr/bin/env bash
# `scree serve` (each layout) beside Debian's redis-server (appendonly yes, appendfsync everysec)
# under redis-benchmark, in one run on this machine, plus the twemproxy cost (three scree
# shards behind nutcracker against one shard direct). Prints one table (markdown) of
# throughput, p99 latency and resident memory (VmRSS and RssAnon after the SET fill, VmHWM at
# the end, from /proc/PID/status). docs/benchmarks.md ("Redis protocol server") has a run and the targets.
#
# usage: scripts/bench-server.sh [OUT_DIR]
# env:   N_PIPE   requests of each pipelined test (-P 16)         default 2000000
#        N_PLAIN  requests of each unpipelined test                 default 200000
#        KEYSPACE redis-benchmark -r (random keys in [0, KEYSPACE))  default 10000000
#        LAYOUTS  scree layouts                                      default: all five
#                 (L/nodir: layout L with --no-key-directory, for trie and semisorted;
#                  L/pread: with --no-mmap-reads; both: L/nodir/pread)
#        CLIENTS  redis-benchmark -c                                 default 50
#        N_PROXY  requests of the twemproxy test (0: skip it)         default N_PIPE
#        REDIS    1: include redis-server, 0: skip it                  default 1
#        SCREE_BIN (default target/release/scree)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:-/tmp/scree-bench-server}
N_PIPE=${N_PIPE:-2000000}
N_PLAIN=${N_PLAIN:-200000}
KEYSPACE=${KEYSPACE:-10000000}
CLIENTS=${CLIENTS:-50}
LAYOUTS=${LAYOUTS:-"leveled fragmented trie semisorted lightweight"}
BIN=${SCREE_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release/scree}
PORT=${PORT:-7400}
N_PROXY=${N_PROXY:-$N_PIPE}
rm -rf "$OUT"
mkdir -p "$OUT"

for t in redis-benchmark redis-server nutcracker; do
  command -v "$t" >/dev/null || { echo "bench-server.sh: $t missing (apt-get install redis-server redis-tools nutcracker)" >&2; exit 2; }
done
[[ -x "$BIN" ]] || { echo "bench-server.sh: no $BIN (cargo build --release -p scree-cli)" >&2; exit 2; }

wait_port() {
  for _ in $(seq 1 600); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  return 1
}

mem() { # PID FIELD -> MiB
  awk -v f="$2:" '$1 == f { printf "%.0f", $2 / 1024 }' "/proc/$1/status"
}

# One redis-benchmark test: prints "rps p99_ms".
# Through twemproxy, redis-benchmark's CONFIG probe makes the proxy close that connection,
# which now and then ends the run early: up to three attempts, "failed -" after that.
bench() { # PORT TEST N PIPELINE
  local csv
  for _ in 1 2 3; do
    csv=$(redis-benchmark -p "$1" -t "$2" -n "$3" -P "$4" -r "$KEYSPACE" -d 100 -c "$CLIENTS" --csv 2>/dev/null | grep -i "^\"$2\"" | tail -1 || true)
    if [[ -n "$csv" ]]; then
      # "test","rps","avg","min","p50","p95","p99","max"
      echo "$csv" | awk '{ gsub(/"/, "", $0); split($0, a, ","); print a[2], a[7] }'
      return 0
    fi
    sleep 1
  done
  echo "failed -"
}

printf '| server | SET -P16 rps | p99 ms | GET -P16 rps | p99 ms | SET rps | p99 ms | GET rps | p99 ms | RSS after fill MiB | of it anonymous MiB | HWM MiB | disk MiB |\n' >"$OUT/table.md"
printf '|---|---|---|---|---|---|---|---|---|---|---|---|---|\n' >>"$OUT/table.md"

run_one() { # NAME PID PORT DIR
  local name=$1 pid=$2 port=$3 dir=$4
  read -r sp sp99 < <(bench "$port" set "$N_PIPE" 16)
  local rss anon
  rss=$(mem "$pid" VmRSS)
  # Scree maps its table files (mmap reads): their cached pages count in VmRSS as RssFile,
  # which the kernel reclaims like page cache. RssAnon is the process's own memory.
  anon=$(mem "$pid" RssAnon)
  read -r gp gp99 < <(bench "$port" get "$N_PIPE" 16)
  read -r s s99 < <(bench "$port" set "$N_PLAIN" 1)
  read -r g g99 < <(bench "$port" get "$N_PLAIN" 1)
  local hwm disk
  hwm=$(mem "$pid" VmHWM)
  disk=$(du -sm "$dir" | cut -f1)
  printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' \
    "$name" "$sp" "$sp99" "$gp" "$gp99" "$s" "$s99" "$g" "$g99" "$rss" "$anon" "$hwm" "$disk" | tee -a "$OUT/table.md"
}

# redis-server, as Debian ships it, with the AOF on.
if [[ "${REDIS:-1}" -eq 1 ]]; then
mkdir -p "$OUT/redis"
redis-server --port "$PORT" --bind 127.0.0.1 --dir "$OUT/redis" --appendonly yes \
  --appendfsync everysec --save "" --daemonize no >"$OUT/redis.log" 2>&1 &
rpid=$!
wait_port "$PORT"
run_one "redis-server 7.0 (AOF everysec)" "$rpid" "$PORT" "$OUT/redis"
kill -TERM "$rpid"; wait "$rpid" || true
fi

for spec in $LAYOUTS; do
  PORT=$((PORT + 1))
  l=${spec%%/*}
  extra=()
  [[ "$spec" == */nodir* ]] && extra+=(--no-key-directory)
  [[ "$spec" == */pread* ]] && extra+=(--no-mmap-reads)
  name=${spec//\//-}
  "$BIN" serve --db "$OUT/$name" --bind "127.0.0.1:$PORT" --layout "$l" --appendfsync everysec \
    --timeout 0 "${extra[@]}" >"$OUT/$name.log" 2>&1 &
  spid=$!
  wait_port "$PORT"
  run_one "scree serve --layout $l ${extra[*]}" "$spid" "$PORT" "$OUT/$name"
  kill -TERM "$spid"; wait "$spid" || true
done

# twemproxy: pipelined SET through three leveled shards against one shard direct.
if [[ "$N_PROXY" -eq 0 ]]; then
  echo "N_PIPE=$N_PIPE N_PLAIN=$N_PLAIN KEYSPACE=$KEYSPACE CLIENTS=$CLIENTS -d 100; table in $OUT/table.md"
  exit 0
fi
PORT=$((PORT + 10))
SCREE_BIN="$BIN" LAYOUT=leveled bash "$ROOT/scripts/cluster.sh" start "$OUT/cluster" 3 "$PORT" >/dev/null
read -r direct direct99 < <(bench $((PORT + 1)) set "$N_PROXY" 16)
bash "$ROOT/scripts/cluster.sh" stop "$OUT/cluster"
rm -rf "$OUT/cluster"
SCREE_BIN="$BIN" LAYOUT=leveled bash "$ROOT/scripts/cluster.sh" start "$OUT/cluster" 3 "$PORT" >/dev/null
read -r proxied proxied99 < <(bench "$PORT" set "$N_PROXY" 16)
shares=""
total=0
for i in 1 2 3; do
  n=$(redis-cli -p $((PORT + i)) --scan | wc -l)
  shares="$shares $n"
  total=$((total + n))
done
bash "$ROOT/scripts/cluster.sh" stop "$OUT/cluster"
{
  echo
  echo "twemproxy (3 leveled shards, ketama/murmur), SET -P 16: $proxied rps (p99 $proxied99 ms);"
  echo "one shard direct: $direct rps (p99 $direct99 ms); ratio $(awk -v a="$proxied" -v b="$direct" 'BEGIN { printf "%.2f", a / b }')"
  echo "keys per shard:$shares (total $total; shares$(for n in $shares; do awk -v n="$n" -v t="$total" 'BEGIN { printf " %.1f%%", 100 * n / t }'; done))"
} | tee -a "$OUT/table.md"
echo
echo "N_PIPE=$N_PIPE N_PLAIN=$N_PLAIN KEYSPACE=$KEYSPACE CLIENTS=$CLIENTS -d 100; table in $OUT/table.md"
