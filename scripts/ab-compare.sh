#!/usr/bin/env bash
# A/B of two builds' kernels on the GPU machine: `flashjit run --check` of
# each shape with the binaries in $A (default .device-old) and $B (default
# .device), each with a database of its own, one line per build and shape:
#   build | shape | check perf(TFLOP/s) | kernel
# Build the baseline bundle, move it to .device-old, build the candidate, and
# carry both. Shapes are `flashjit run` flags; defaults cover head dims 64,
# 128, 256, full and causal, long and short sequences. BUILDS="dir dir ..."
# times more than two builds, each shape in all of them before the next.
#   PASS=bwd scripts/ab-compare.sh "--hdim 128 --seqlen 8192"
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
A=${A:-.device-old} B=${B:-.device}
read -r -a builds <<<"${BUILDS:-$A $B}"
[ $# -gt 0 ] || set -- \
  "--hdim 128 --seqlen 8192 --batch 2 --heads 16" \
  "--hdim 128 --seqlen 8192 --batch 2 --heads 16 --causal" \
  "--hdim 64 --seqlen 8192 --batch 2 --heads 32" \
  "--hdim 64 --seqlen 8192 --batch 2 --heads 32 --causal" \
  "--hdim 128 --seqlen 1024 --batch 16 --heads 16" \
  "--hdim 256 --seqlen 8192 --batch 2 --heads 8"
db=$(mktemp -d /tmp/flashjit-ab.XXXXXX)
for shape in "$@"; do
  for build in "${builds[@]}"; do
    # A kernel that hangs (a barrier bug under test) costs RUN_TIMEOUT
    # seconds, not the whole call: timeout prints no check or perf line.
    # shellcheck disable=SC2086
    out=$(FLASHJIT_DB=$db/$(basename "$build").db timeout "${RUN_TIMEOUT:-90}" \
          "$build/bin/flashjit" run $shape --pass "${PASS:-fwd}" --repeats 30 --check 2>&1)
    echo "$build | $shape | $(echo "$out" | awk '/^check|^perf/{printf "%s ", $2}')| $(echo "$out" | awk '/^kernel/{print $2}')"
  done
done
