#!/usr/bin/env bash
# Process-kill torture: run `scree stress` (multi-threaded writers, snapshot readers, flushes,
# compactions) on one database, SIGKILL it at a random moment, then reopen and verify it against
# the expected-state file (`scree stress --verify`: every acknowledged write present, the state a
# per-thread prefix of the issued operations, batches whole, twins equal, layout invariants) and
# run the offline check (`scree check`). Repeat.
#
# usage: scripts/torture.sh LAYOUT CYCLES [WORKDIR]
#   env: SCREE_BIN (default target/release/scree, built if missing), THREADS (4),
#        MIN_MS / MAX_MS (kill delay range, default 300 / 2500), SYNC_PERCENT (10), KEEP=1 (keep
#        the work directory on success), MAX_OPEN_FILES (0: every table open; e.g. 4 closes
#        and reopens table readers all the time).
# Long run (docs/reliability.md): for l in leveled fragmented trie; do scripts/torture.sh $l 1000; done
set -euo pipefail

LAYOUT=${1:?usage: torture.sh LAYOUT CYCLES [WORKDIR]}
CYCLES=${2:?usage: torture.sh LAYOUT CYCLES [WORKDIR]}
WORK=${3:-$(mktemp -d /tmp/scree-torture.XXXXXX)}
THREADS=${THREADS:-4}
MIN_MS=${MIN_MS:-300}
MAX_MS=${MAX_MS:-2500}
SYNC_PERCENT=${SYNC_PERCENT:-10}
MAX_OPEN_FILES=${MAX_OPEN_FILES:-0}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${SCREE_BIN:-$ROOT/target/release/scree}
if [[ ! -x $BIN ]]; then
  (cd "$ROOT" && cargo build --release -p scree-cli)
fi

mkdir -p "$WORK"
DB=$WORK/db
EXP=$WORK/expected
acked=0
killed=0
start=$(date +%s)
for ((i = 1; i <= CYCLES; i++)); do
  "$BIN" stress --dir "$DB" --layout "$LAYOUT" --seconds 600 --threads "$THREADS" \
    --sync-percent "$SYNC_PERCENT" --max-open-files "$MAX_OPEN_FILES" --expected "$EXP" \
    >"$WORK/stress.out" 2>&1 &
  pid=$!
  delay=$((MIN_MS + (RANDOM * 32768 + RANDOM) % (MAX_MS - MIN_MS + 1)))
  sleep "$(printf '%d.%03d' $((delay / 1000)) $((delay % 1000)))"
  if kill -0 "$pid" 2>/dev/null; then
    kill -9 "$pid"
    killed=$((killed + 1))
  fi
  status=0
  wait "$pid" 2>/dev/null || status=$?
  if [[ $status -ne 0 && $status -ne 137 ]]; then
    echo "cycle $i: scree stress failed (exit $status):" >&2
    cat "$WORK/stress.out" >&2
    echo "work directory kept: $WORK" >&2
    exit 1
  fi
  if [[ -f $EXP ]]; then
    if ! "$BIN" stress --dir "$DB" --expected "$EXP" --verify --max-open-files "$MAX_OPEN_FILES" \
      >"$WORK/verify.out" 2>&1; then
      echo "cycle $i (killed after ${delay} ms): verification FAILED:" >&2
      cat "$WORK/verify.out" >&2
      echo "work directory kept: $WORK" >&2
      exit 1
    fi
    n=$(sed -n 's/.* threads, \([0-9]*\) acknowledged.*/\1/p' "$WORK/verify.out")
    acked=$((acked + ${n:-0}))
  fi
  if [[ -d $DB ]] && ! "$BIN" check "$DB" >"$WORK/check.out" 2>&1; then
    echo "cycle $i: scree check found problems:" >&2
    cat "$WORK/check.out" >&2
    echo "work directory kept: $WORK" >&2
    exit 1
  fi
done
echo "torture $LAYOUT: $CYCLES cycles ($killed killed by SIGKILL), $acked acknowledged operations verified, $(($(date +%s) - start)) s"
if [[ ${KEEP:-0} != 1 ]]; then
  rm -rf "$WORK"
fi
