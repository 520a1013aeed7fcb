# Shared by scripts/bench-server-get.sh and scripts/bench-server-set-ab.sh (sourced, not run):
# starting one server on a fresh database and reading its threads' CPU by role.

# Per thread role, the CPU ticks of PID's threads: "conn N bg N" — `conn` the threads that run
# the connections (tokio's workers; redis-server's main thread), `bg` the rest.
ticks() { # PID -> "conn bg"
  for t in /proc/"$1"/task/*; do
    echo "$(tr ' ' '_' <"$t/comm") $(sed 's/^.*) //' "$t/stat" | awk '{print $12 + $13}')"
  done | awk '{ r = ($1 ~ /^(tokio-rt-worker|redis-server)$/) ? "conn" : "bg"; a[r] += $2 }
              END { print a["conn"] + 0, a["bg"] + 0 }'
}

# Starts redis-server (BIN `redis`: the AOF with everysec) or `BIN serve` (--appendfsync
# everysec) on DB at 127.0.0.1:PORT in the background, sets `pid`, and waits until the port
# accepts. SPEC: a layout, then any of /nodir (--no-key-directory), /pread (--no-mmap-reads),
# /cacheN (--block-cache-mb N).
start_server() { # BIN|redis SPEC DB PORT
  if [[ "$1" == redis ]]; then
    redis-server --port "$4" --bind 127.0.0.1 --dir "$3" --appendonly yes \
      --appendfsync everysec --save "" --daemonize no >/dev/null 2>&1 &
  else
    local extra=()
    [[ "$2" == */nodir* ]] && extra+=(--no-key-directory)
    [[ "$2" == */pread* ]] && extra+=(--no-mmap-reads)
    [[ "$2" =~ /cache([0-9]+) ]] && extra+=(--block-cache-mb "${BASH_REMATCH[1]}")
    "$1" serve --db "$3" --bind "127.0.0.1:$4" --layout "${2%%/*}" --appendfsync everysec \
      --timeout 0 "${extra[@]}" >/dev/null 2>&1 &
  fi
  pid=$!
  for _ in $(seq 1 100); do (exec 3<>"/dev/tcp/127.0.0.1/$4") 2>/dev/null && break; sleep 0.1; done
}
