#!/usr/bin/env bash
# On the GPU machine, in one call: the experiments scripts/build-experiments.sh
# built (.device-NAME/, against .device-base/). For each NAME whose diff is
# not a timing-only upper bound, the backward gradient and determinism tests
# with its kernels first; then an A/B of every NAME against the base
# (scripts/ab-compare.sh, --pass bwd, each build with a database of its own).
# Prints one table last: shape | base (check, TFLOP/s) | NAME (check, TFLOP/s)
# About 90 s of tests per tested NAME and 4 s per shape and build: give the
# call a 600 s limit, TESTS=0 to skip the tests.
#   scripts/device-experiments.sh NAME...   SHAPES="flags|flags|..." to override
# PASS=fwd for forward experiments (their diffs say "# Pass: fwd"): the
# forward's correctness tests and `flashjit run --pass fwd`.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
[ $# -gt 0 ] || { sed -n '2,10p' "$0" >&2; exit 2; }
[ -x .device-base/bin/flashjit ] || { echo "no .device-base: run build-experiments.sh" >&2; exit 2; }
default_shapes="--hdim 128 --seqlen 8192 --batch 2 --heads 16|\
--hdim 128 --seqlen 8192 --batch 2 --heads 16 --causal|\
--hdim 128 --seqlen 2048 --batch 8 --heads 16|\
--hdim 128 --seqlen 512 --batch 32 --heads 16 --causal|\
--hdim 128 --seqlen 6000 --batch 1 --heads 64 --heads-kv 8 --causal|\
--hdim 64 --seqlen 8192 --batch 2 --heads 32|\
--hdim 256 --seqlen 8192 --batch 2 --heads 8 --causal"
if [ "${PASS:-bwd}" = fwd ]; then  # where the forward is still behind cuDNN, and the grid's
  default_shapes="--hdim 256 --seqlen 1024 --batch 16 --heads 8 --causal|\
--hdim 256 --seqlen 2048 --batch 8 --heads 8 --causal|\
--hdim 128 --seqlen 8192 --batch 2 --heads 16 --causal|\
--hdim 128 --seqlen 2048 --batch 8 --heads 16|\
--hdim 64 --seqlen 8192 --batch 2 --heads 32|\
--hdim 192 --hdim-v 128 --seqlen 8192 --batch 2 --heads 16 --causal"
fi
IFS='|' read -r -a shapes <<<"${SHAPES:-$default_shapes}"

pass=${PASS:-bwd}
if [ "$pass" = fwd ]; then
  filter='*ForwardCorrectness*:ForwardDeterminism.*:*VarlenCorrectness*:Varlen.*:*KvCacheCorrectness*:KvCache.*:*DecodeCorrectness*'
else
  filter='*BackwardCorrectness*:*BackwardSm90Correctness*:BackwardDeterminism.*:VarlenBackward.*'
fi
for name in "$@"; do
  own=$(sed -n 's/^# Pass: \(fwd\|bwd\)$/\1/p' "docs/experiments/$name.diff" 2>/dev/null | head -n 1)
  [ "${own:-bwd}" = "$pass" ] || { echo "$name is a --pass ${own:-bwd} experiment: PASS=${own:-bwd}" >&2; exit 2; }
done
tests_rc=0
for name in "$@"; do
  [ "${TESTS:-1}" = 1 ] || break
  if grep -q '^# Upper bound' "docs/experiments/$name.diff" 2>/dev/null; then
    echo "== $name: timing only (an upper bound), no gradient tests"
    continue
  fi
  if [ ! -x ".device-$name/bin/flashjit_gpu_tests" ]; then
    echo "== $name: no GPU tests carried (built with CLI_ONLY=1)"
    tests_rc=1
    continue
  fi
  echo "== $name: $pass correctness tests"
  # A hang (an experiment's barrier bug) ends at TEST_TIMEOUT seconds.
  FILTER=$filter SHARDS=16 timeout "${TEST_TIMEOUT:-240}" \
    bash scripts/gpu-tests.sh ".device-$name/bin/flashjit_gpu_tests" | tail -n 20 || tests_rc=1
done

declare -A perf
builds=".device-base"
for name in "$@"; do builds+=" .device-$name"; done
echo "== A/B: $builds"
while IFS= read -r line; do
  echo "$line"
  build=$(echo "$line" | cut -d'|' -f1 | xargs)
  shape=$(echo "$line" | cut -d'|' -f2 | xargs)
  perf["$build|$shape"]=$(echo "$line" | cut -d'|' -f3 | xargs)
done < <(BUILDS="$builds" PASS=$pass bash scripts/ab-compare.sh "${shapes[@]}")
echo
printf '%-62s | %-18s' "shape (--pass $pass)" "base"
for name in "$@"; do printf ' | %-30s' "$name"; done
echo
for shape in "${shapes[@]}"; do
  shape=$(echo "$shape" | xargs)
  printf '%-62s | %-18s' "$shape" "${perf[.device-base|$shape]:-?}"
  for name in "$@"; do printf ' | %-30s' "${perf[.device-$name|$shape]:-?}"; done
  echo
done
exit $tests_rc
