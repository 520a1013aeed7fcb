#!/usr/bin/env bash
# Pipelined SET, two `scree` builds A and B alternated round by round (A B, then B A), with
# redis-server once per round, each on a fresh database: requests per second and the server's
# CPU time per SET (user + system, from /proc/PID/task/*/stat), which the load of a shared
# machine distorts less than the rate, in all and split by thread role: `conn` the threads that
# run the connections (tokio's workers; redis-server's main thread), `bg` the rest (flushes,
# compactions, the WAL window; redis-server's bio threads). Servers as in
# scripts/bench-server.sh (redis-server with the AOF everysec; scree serve --appendfsync
# everysec). docs/benchmarks.md, "Blind SET".
#
# usage: scripts/bench-server-set-ab.sh BIN_A BIN_B [SPEC...]   (SPEC: leveled, trie/nodir,
#        leveled/pread, ...: scripts/server-bench-lib.sh)
# env:   ROUNDS 4   N 1000000 requests per run   KEYSPACE 10000000 (redis-benchmark -r)
#        PORT 7640  DIR /tmp/scree-set-ab (databases, removed after each run)
set -euo pipefail
A=$1 B=$2; shift 2
SPECS=("${@:-leveled}")
ROUNDS=${ROUNDS:-4} N=${N:-1000000} KEYSPACE=${KEYSPACE:-10000000}
PORT=${PORT:-7640} DIR=${DIR:-/tmp/scree-set-ab}

# shellcheck source=scripts/server-bench-lib.sh
source "$(dirname "$0")/server-bench-lib.sh"

one() { # NAME BIN|redis SPEC
  local d="$DIR/db" pid c0 b0 c1 b1 rps
  rm -rf "$d"; mkdir -p "$d"
  start_server "$2" "$3" "$d" "$PORT"
  read -r c0 b0 < <(ticks "$pid")
  rps=$(redis-benchmark -p "$PORT" -t set -n "$N" -r "$KEYSPACE" -d 100 -P 16 -c 50 2>&1 |
    awk '/throughput summary/ {print $3}')
  read -r c1 b1 < <(ticks "$pid")
  kill -TERM "$pid"; wait "$pid" || true
  rm -rf "$d"
  echo "$1 $3 set_rps=$rps $(awk -v c="$((c1 - c0))" -v b="$((b1 - b0))" -v n="$N" -v hz="$(getconf CLK_TCK)" \
    'BEGIN { f = 1e6 / hz / n; printf "us_per_set=%.2f conn=%.2f bg=%.2f", (c + b) * f, c * f, b * f }') load=$(cut -d' ' -f1 /proc/loadavg)"
}

for r in $(seq 1 "$ROUNDS"); do
  one redis redis -
  for s in "${SPECS[@]}"; do
    if (( r % 2 )); then one A "$A" "$s"; one B "$B" "$s"; else one B "$B" "$s"; one A "$A" "$s"; fi
  done
done
