#!/usr/bin/env bash
# The deterministic backward against the default mode (the bar: >= 0.85x),
# on the GPU machine, from the repository root: kernel time of
# `flashjit run --pass bwd` with and without --deterministic, same binary,
# over the shapes of scripts/det-rows.txt: the training grid
# (FlashAttention's convention: 16k tokens, hidden 2048; head dims 64, 128,
# 256, causal and full, 512 to 16k tokens) and the rows where the
# deterministic mode was furthest behind (d=256 causal 1k and 4k, d=192),
# most wanted first, so that a run cut short still brings them back.
# One line per shape as it goes, the table last:
#   shape | deterministic | default | ratio [| BASE's deterministic]
#   scripts/det-ratios.sh [BUILD]   BUILD: a folder with bin/flashjit (.device)
#   BASE=.device-base                also time that build's deterministic mode
#   QUICK=1                          2k and 8k only
#   ROWS=FILE                        these shapes instead, one row's
#                                    `flashjit run` flags a line
#   RESULTS=DIR                      where the suite's result file goes
#                                    (default bench/results; empty: none)
#   SUITE=NAME                       its suite name (default deterministic;
#                                    needed to write one with ROWS)
# Writes DIR/<gpu>/deterministic.json (bench/results.py) when every run
# succeeded; the commit is BUILD's COMMIT file's (build-device-bundle.sh).
# Exits 1 when a run failed (ERR in its cell).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
build=${1:-.device}
[ -x "$build/bin/flashjit" ] || { echo "no $build/bin/flashjit" >&2; exit 2; }
base=${BASE:-}
rows=${ROWS:-scripts/det-rows.txt}
[ -r "$rows" ] || { echo "no row list at $rows" >&2; exit 2; }
db=$(mktemp -d /tmp/flashjit-det.XXXXXX)

# perf BUILD FLAGS...: TFLOP/s of the backward, or ERR.
perf() {
  local dir=$1
  shift
  local out
  out=$(FLASHJIT_DB=$db/$(basename "$dir").db timeout "${RUN_TIMEOUT:-90}" \
        "$dir/bin/flashjit" run "$@" --pass bwd --repeats "${REPEATS:-20}" 2>&1)
  echo "$out" | awk '/^perf/{print $2; found=1} END{if (!found) print "ERR"}'
}

lines=()
row() {
  local det def ratio extra=""
  det=$(perf "$build" "$@" --deterministic)
  def=$(perf "$build" "$@")
  ratio=$(awk -v a="$det" -v b="$def" 'BEGIN{if (a + 0 > 0 && b + 0 > 0) printf "%.3f", a / b; else print "-"}')
  [ -n "$base" ] && extra=" | $(perf "$base" "$@" --deterministic)"
  local line="$* | $det | $def | $ratio$extra"
  echo "$line"
  lines+=("$line")
}

quick='.'
[ "${QUICK:-0}" = 1 ] && quick='--seqlen (2048|8192) '
# fd 3: flashjit must not read the list from its stdin
while read -r -u 3 args; do
  # shellcheck disable=SC2086
  row $args
done 3< <(grep -E -e "$quick" "$rows")

echo
echo "=== deterministic / default (backward, TFLOP/s, $build)"
header="shape | deterministic | default | ratio"
[ -n "$base" ] && header="$header | $base deterministic"
echo "$header"
printf '%s\n' "${lines[@]}"
rm -rf "$db"
if printf '%s\n' "${lines[@]}" | grep -q ERR; then
  exit 1
fi

results=${RESULTS-bench/results}
if [ -n "$results" ] && { [ -n "${SUITE:-}" ] || [ -z "${ROWS:-}" ]; }; then
  columns=shape,deterministic,default,ratio
  [ -n "$base" ] && columns=$columns,base_deterministic
  commit=${FLASHJIT_COMMIT:-}
  [ -z "$commit" ] && [ -f "$build/COMMIT" ] && commit=$(cat "$build/COMMIT")
  printf '%s\n' "${lines[@]}" |
    FLASHJIT_COMMIT=$commit python3 bench/results.py --suite "${SUITE:-deterministic}" \
      --columns "$columns" --results "$results" --config "repeats=${REPEATS:-20}" \
      --config "quick=${QUICK:-0}" \
      --method "kernel time of the backward as \`flashjit run --pass bwd\` times it (median of ${REPEATS:-20}), with and without --deterministic, same binary; ratio = deterministic / default TFLOP/s"
fi
