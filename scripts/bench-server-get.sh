#!/usr/bin/env bash
# Pipelined GET after a pipelined SET fill, for one or two `scree` builds and redis-server in
# the same run: per server, `-t set -n N` (the fill), then `-t get -n N` (-P 16, -d 100,
# -c 50, -r KEYSPACE), with the server's CPU per GET over the GET phase (user + system ticks
# of every thread, /proc/PID/task/*/stat, split as `conn` = tokio's workers / redis-server's
# main thread and `bg` = the rest) and, for scree, the engine's counters over the GET phase
# from INFO's scree section (data and metadata block reads, cache hits, per GET). CPU per GET
# is the measure on a shared machine; rates are only comparable as ratios inside one run.
# docs/benchmarks.md, "GET through the server".
#
# usage: scripts/bench-server-get.sh BIN_A [BIN_B|-] [SPEC...]
#        SPEC: a layout, then any of /nodir (--no-key-directory), /pread (--no-mmap-reads),
#        /cacheN (--block-cache-mb N): leveled, trie/nodir, leveled/cache256, ...
# env:   N 2000000 requests per phase   KEYSPACE 10000000   PORT 7680
#        DIR /tmp/scree-get (databases, removed after each run)   REDIS 1 (0: skip it)
#        SETTLE 0 seconds to wait after the fill   PERF "" (a file prefix: perf record the GETs)
#        PERF_G -g (perf's call-graph option, e.g. "--call-graph dwarf,8192")
set -euo pipefail
A=$1 B=${2:--}; shift 2 || shift $#
SPECS=("${@:-leveled}")
N=${N:-2000000} KEYSPACE=${KEYSPACE:-10000000}
PORT=${PORT:-7680} DIR=${DIR:-/tmp/scree-get} SETTLE=${SETTLE:-0} PERF=${PERF:-}
# shellcheck source=scripts/server-bench-lib.sh
source "$(dirname "$0")/server-bench-lib.sh"

total() { # PID -> user + system ticks of the process (exited threads included)
  sed 's/^.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'
}

counters() { # PORT -> "gets data_block_reads metadata_block_reads cache_hits cache_misses"
  redis-cli -p "$1" info scree | tr -d '\r' | awk -F: '
    $1 == "gets" { g = $2 } $1 == "data_block_reads" { d = $2 } $1 == "metadata_block_reads" { m = $2 }
    $1 == "cache_hits" { h = $2 } $1 == "cache_misses" { x = $2 }
    END { print g + 0, d + 0, m + 0, h + 0, x + 0 }'
}

rate() { # PORT TEST
  redis-benchmark -p "$1" -t "$2" -n "$N" -r "$KEYSPACE" -d 100 -P 16 -c 50 2>&1 |
    awk '/throughput summary/ {print $3}'
}

one() { # NAME BIN|redis SPEC
  local d="$DIR/db" pid c0 b0 c1 b1 t0 t1 srps grps k0 k1 shape=""
  rm -rf "$d"; mkdir -p "$d"
  start_server "$2" "$3" "$d" "$PORT"
  srps=$(rate "$PORT" set)
  sleep "$SETTLE"
  if [[ "$2" != redis ]]; then
    read -r -a k0 < <(counters "$PORT")
    shape=$(redis-cli -p "$PORT" info scree | tr -d '\r' | grep '^keyspace_redis:' | sed 's/.*layout=[^,]*,//')
  fi
  local perfpid=""
  if [[ -n "$PERF" ]]; then
    perf record -F 499 ${PERF_G:--g} -p "$pid" -o "$PERF.$1.${3//\//-}.data" >/dev/null 2>&1 &
    perfpid=$!
  fi
  read -r c0 b0 < <(ticks "$pid"); t0=$(total "$pid")
  grps=$(rate "$PORT" get)
  read -r c1 b1 < <(ticks "$pid"); t1=$(total "$pid")
  if [[ -n "$perfpid" ]]; then kill -INT "$perfpid"; wait "$perfpid" || true; fi
  local eng=""
  if [[ "$2" != redis ]]; then
    read -r -a k1 < <(counters "$PORT")
    eng=$(awk -v g="$((k1[0] - k0[0]))" -v d="$((k1[1] - k0[1]))" -v m="$((k1[2] - k0[2]))" \
      -v h="$((k1[3] - k0[3]))" -v x="$((k1[4] - k0[4]))" \
      'BEGIN { g = g > 0 ? g : 1; printf "data_reads/get=%.3f meta_reads/get=%.3f hits/get=%.3f misses/get=%.3f", d / g, m / g, h / g, x / g }')
  fi
  kill -TERM "$pid"; wait "$pid" || true
  rm -rf "$d"
  echo "$1 $3 set_rps=$srps get_rps=$grps $(awk -v t="$((t1 - t0))" -v c="$((c1 - c0))" -v n="$N" -v hz="$(getconf CLK_TCK)" \
    'BEGIN { f = 1e6 / hz / n; printf "us_per_get=%.2f conn=%.2f bg=%.2f", t * f, c * f, (t - c) * f }') $eng ${shape:+[$shape]} load=$(cut -d' ' -f1 /proc/loadavg)"
}

[[ "${REDIS:-1}" -eq 1 ]] && one redis redis -
for s in "${SPECS[@]}"; do
  one A "$A" "$s"
  [[ "$B" != - ]] && one B "$B" "$s"
done
