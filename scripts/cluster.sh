#!/usr/bin/env bash
# N `scree serve` shards behind twemproxy (Debian's `nutcracker`), on loopback (docs/cluster.md).
#
# usage:
#   scripts/cluster.sh start DIR [N=3] [BASE_PORT=7000]   N servers on BASE_PORT+1..BASE_PORT+N,
#                                                         the proxy on BASE_PORT
#   scripts/cluster.sh restart DIR I                      restart server I (1..N) with its flags
#   scripts/cluster.sh kill9 DIR I                        SIGKILL server I
#   scripts/cluster.sh stop DIR                           SIGTERM every server and the proxy
# env: SCREE_BIN (default: target/release/scree, else target/debug/scree), LAYOUT (leveled),
#      APPENDFSYNC (everysec), NUTCRACKER (nutcracker).
# DIR holds the databases (DIR/sI), nutcracker.yml, logs and pid files.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cmd=${1:?usage: cluster.sh start|restart|kill9|stop DIR ...}
DIR=${2:?DIR missing}
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)

bin() {
  if [[ -n "${SCREE_BIN:-}" ]]; then echo "$SCREE_BIN"; return; fi
  local t=${CARGO_TARGET_DIR:-$ROOT/target}
  for p in release debug; do
    if [[ -x "$t/$p/scree" ]]; then echo "$t/$p/scree"; return; fi
  done
  echo "cluster.sh: no scree binary under $t (cargo build --release -p scree-cli)" >&2
  exit 2
}

wait_port() {
  local port=$1
  for _ in $(seq 1 300); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  echo "cluster.sh: nothing listens on port $port" >&2
  return 1
}

start_server() {
  local i=$1
  local port
  port=$(cat "$DIR/s$i.port")
  "$(bin)" serve --db "$DIR/s$i" --bind "127.0.0.1:$port" \
    --layout "${LAYOUT:-leveled}" --appendfsync "${APPENDFSYNC:-everysec}" \
    --timeout 0 >>"$DIR/s$i.log" 2>&1 &
  echo $! >"$DIR/s$i.pid"
  wait_port "$port"
}

case "$cmd" in
  start)
    N=${3:-3}
    BASE=${4:-7000}
    conf="$DIR/nutcracker.yml"
    {
      echo "scree:"
      echo "  listen: 127.0.0.1:$BASE"
      echo "  hash: murmur"
      echo "  distribution: ketama"
      echo "  redis: true"
      # A shard that is down is not ejected: its keys stay on it (requests to it fail until it
      # is back) instead of moving to the others and reading as missing.
      echo "  auto_eject_hosts: false"
      echo "  timeout: 10000"
      echo "  server_retry_timeout: 1000"
      echo "  servers:"
      for i in $(seq 1 "$N"); do
        # Named servers: ketama hashes the name, so a shard keeps its keys on any address.
        echo "   - 127.0.0.1:$((BASE + i)):1 s$i"
      done
    } >"$conf"
    for i in $(seq 1 "$N"); do
      echo $((BASE + i)) >"$DIR/s$i.port"
      start_server "$i"
    done
    "${NUTCRACKER:-nutcracker}" -t -c "$conf" >/dev/null
    "${NUTCRACKER:-nutcracker}" -c "$conf" -o "$DIR/nutcracker.log" \
      -s $((BASE + 1000)) -a 127.0.0.1 &
    echo $! >"$DIR/nutcracker.pid"
    wait_port "$BASE"
    echo "cluster: $N scree servers on 127.0.0.1:$((BASE + 1))..$((BASE + N)), twemproxy on 127.0.0.1:$BASE"
    ;;
  restart)
    i=${3:?server number missing}
    if [[ -f "$DIR/s$i.pid" ]] && kill -0 "$(cat "$DIR/s$i.pid")" 2>/dev/null; then
      kill -TERM "$(cat "$DIR/s$i.pid")"
      while kill -0 "$(cat "$DIR/s$i.pid")" 2>/dev/null; do sleep 0.1; done
    fi
    start_server "$i"
    ;;
  kill9)
    i=${3:?server number missing}
    pid=$(cat "$DIR/s$i.pid")
    kill -KILL "$pid"
    while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
    ;;
  stop)
    for f in "$DIR"/*.pid; do
      [[ -f "$f" ]] || continue
      pid=$(cat "$f")
      kill -TERM "$pid" 2>/dev/null || true
    done
    for f in "$DIR"/*.pid; do
      [[ -f "$f" ]] || continue
      pid=$(cat "$f")
      while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
      rm -f "$f"
    done
    ;;
  *)
    echo "usage: cluster.sh start|restart|kill9|stop DIR ..." >&2
    exit 2
    ;;
esac
