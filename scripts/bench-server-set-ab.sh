#!/usr/bin/env bash
# Pipelined SET, two `scree` builds A and B alternated round by round (A B, then B A), with
# redis-server once per round, each on a fresh database: requests per second and the server's
# CPU time per SET (user + system, from /proc/PID/stat), which the load of a shared machine
# distorts less than the rate. Servers as in scripts/bench-server.sh (redis-server with the AOF
# everysec; scree serve --appendfsync everysec). docs/benchmarks.md, "Blind SET".
#
# usage: scripts/bench-server-set-ab.sh BIN_A BIN_B [SPEC...]   (SPEC: leveled, trie/nodir, ...)
# env:   ROUNDS 4   N 1000000 requests per run   KEYSPACE 10000000 (redis-benchmark -r)
#        PORT 7640  DIR /tmp/scree-set-ab (databases, removed after each run)
set -euo pipefail
A=$1 B=$2; shift 2
SPECS=("${@:-leveled}")
ROUNDS=${ROUNDS:-4} N=${N:-1000000} KEYSPACE=${KEYSPACE:-10000000}
PORT=${PORT:-7640} DIR=${DIR:-/tmp/scree-set-ab}

one() { # NAME BIN|redis SPEC
  local d="$DIR/db" pid t0 t1 rps
  rm -rf "$d"; mkdir -p "$d"
  if [[ "$2" == redis ]]; then
    redis-server --port "$PORT" --bind 127.0.0.1 --dir "$d" --appendonly yes \
      --appendfsync everysec --save "" --daemonize no >/dev/null 2>&1 &
  else
    local extra=()
    [[ "$3" == */nodir ]] && extra=(--no-key-directory)
    "$2" serve --db "$d" --bind "127.0.0.1:$PORT" --layout "${3%/nodir}" --appendfsync everysec \
      --timeout 0 "${extra[@]}" >/dev/null 2>&1 &
  fi
  pid=$!
  for _ in $(seq 1 100); do (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break; sleep 0.1; done
  t0=$(awk '{print $14 + $15}' "/proc/$pid/stat")
  rps=$(redis-benchmark -p "$PORT" -t set -n "$N" -r "$KEYSPACE" -d 100 -P 16 -c 50 2>&1 |
    awk '/throughput summary/ {print $3}')
  t1=$(awk '{print $14 + $15}' "/proc/$pid/stat")
  kill -TERM "$pid"; wait "$pid" || true
  rm -rf "$d"
  echo "$1 $3 set_rps=$rps us_per_set=$(awk -v a="$t0" -v b="$t1" -v n="$N" -v hz="$(getconf CLK_TCK)" \
    'BEGIN { printf "%.2f", (b - a) * 1e6 / hz / n }') load=$(cut -d' ' -f1 /proc/loadavg)"
}

for r in $(seq 1 "$ROUNDS"); do
  one redis redis -
  for s in "${SPECS[@]}"; do
    if (( r % 2 )); then one A "$A" "$s"; one B "$B" "$s"; else one B "$B" "$s"; one A "$A" "$s"; fi
  done
done
