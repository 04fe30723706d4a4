#!/usr/bin/env bash
# Runs the GPU test binary on the GPU machine in a fraction of its serial
# time: the tests that time the host or run processes of their own (host
# cost, concurrency, tuning, first-call databases, fault isolation) one
# after another, then everything else in SHARDS processes at once on the
# one GPU (gtest sharding; the correctness cases are small and independent).
# Each process has a database of its own. Prints every failure, one summary
# line per part and a total last; exits non-zero when anything failed.
#   scripts/gpu-tests.sh [BINARY]   (default .device/bin/flashjit_gpu_tests)
#   SHARDS=4  FILTER=<gtest filter applied to both parts, default *>
#   PART=serial|shards  one of the two parts (default both): the whole run
#   took more than the device's 10 minutes a call on an H100 (2026-12-07),
#   so it runs as two calls there.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
BIN=${1:-.device/bin/flashjit_gpu_tests}
SHARDS=${SHARDS:-4}
FILTER=${FILTER:-*}
SERIAL='HostCost.*:Concurrency.*:ConcurrencyChild.*:*Tune*:FirstCallDb*:BackwardFirstCallDb*:FaultIsolation*'
LOGS=${LOGS:-$(mktemp -d /tmp/flashjit-gpu-tests.XXXXXX)}  # LOGS=DIR keeps them (e.g. under $OUT)
mkdir -p "$LOGS"

if [ ! -x "$BIN" ]; then
  echo "gpu-tests: no test binary at $BIN" >&2
  exit 2
fi

# run NAME FILTER [ENV...]: one process, its log in $LOGS/NAME.log.
run() {
  local name=$1 filter=$2
  shift 2
  local db
  db=$(mktemp -d /tmp/flashjit-db.XXXXXX)/flashjit.db
  env FLASHJIT_DB="$db" "$@" "$BIN" --gtest_brief=1 --gtest_filter="$filter" \
      >"$LOGS/$name.log" 2>&1
}

# The tests of FILTER among SERIAL (gtest cannot intersect two positive
# filters: the listings are intersected here).
names() {
  "$BIN" --gtest_list_tests --gtest_filter="$1" 2>/dev/null |
    awk '/^[^ ]/ { suite = $1 } /^  / { print suite $1 }' | sort
}
serial_filter=$(comm -12 <(names "$FILTER") <(names "$SERIAL") | paste -sd: -)
start=$SECONDS
serial_rc=0
PART=${PART:-both}
if [ -n "$serial_filter" ] && [ "$PART" != shards ]; then
  run serial "$serial_filter"
  serial_rc=$?
fi
serial_s=$((SECONDS - start))

start=$SECONDS
pids=()
[ "$PART" = serial ] && SHARDS=0
for ((i = 0; i < SHARDS; i++)); do
  run "shard$i" "$FILTER-$SERIAL" GTEST_TOTAL_SHARDS="$SHARDS" GTEST_SHARD_INDEX="$i" &
  pids+=($!)
done
shard_rc=0
for pid in "${pids[@]}"; do wait "$pid" || shard_rc=1; done
shard_s=$((SECONDS - start))

failed=0
for log in "$LOGS"/*.log; do
  name=$(basename "$log" .log)
  passed=$(grep -oE '^\[  PASSED  \] [0-9]+' "$log" | grep -oE '[0-9]+$' || echo 0)
  failures=$(grep -cE '^\[  FAILED  \] [A-Za-z]' "$log")
  skipped=$(grep -oE '^\[  SKIPPED \] [0-9]+' "$log" | grep -oE '[0-9]+$' || echo 0)
  printf 'gpu-tests %-7s passed %4s  skipped %3s  failed %3s\n' "$name" "${passed:-0}" \
         "${skipped:-0}" "$failures"
  if [ "$failures" -gt 0 ] || ! grep -qE '^\[  PASSED  \]|^\[==========\]' "$log"; then
    grep -E '^\[  FAILED  \] [A-Za-z]|Failure|Expected|Which is|actual' "$log" | head -40
    failed=1
  fi
done
echo "gpu-tests: serial part ${serial_s}s, $SHARDS shards ${shard_s}s; logs in $LOGS"
if [ $failed -ne 0 ] || [ $serial_rc -ne 0 ] || [ $shard_rc -ne 0 ]; then
  echo "gpu-tests: FAILED"
  exit 1
fi
echo "gpu-tests: all passed"
