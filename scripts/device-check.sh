#!/usr/bin/env bash
# The one script run on the GPU machine, from the repository root, with the
# binaries built here carried in .device/ (scripts/build-device-bundle.sh):
#   .device/bin/{flashjit,flashjit_gpu_tests,flashjit_unit_tests}, .device/lib/libflashjit.so
# Runs every check in order, continuing past failures, logs each step to
# NN-step.log in a temporary folder and prints a summary LAST: pass/fail per
# step, then the first-call and memory lines and the benchmark tables
# (forward, then backward, then a baseline build against this one, then the
# deterministic backward against the default mode, then decode, then
# varlen, then serving, then the modifiers against FlexAttention, then the
# fp8 forward and fp8 KV cache decode, then head dim 512 and MLA decode).
#   QUICK=1   the reduced benchmark grid (bench/compare.py --quick)
#   SKIP=a,b  steps to leave out, ONLY=a,b the steps to run (names as in
#             the summary); one call of the device tool runs 10 minutes at
#             most, so the whole list takes two or three calls
#   BASELINE=DIR  a bundle of another build (e.g. .device-old): the ab-grid
#             step times its grids and this build's alternately (A B A B)
#             and prints B / A per shape (bench/ab_ratio.py)
# The benchmarks' result files go to RESULTS (default: results/ in the log
# folder); with OUT set (the device tool's), the logs and the results are
# packed into $OUT/logs.tgz and $OUT/results.tgz (few files come back from
# that machine). `python3 bench/report.py --add DIR` takes the results into
# bench/results/ and regenerates docs/PERF.md.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

LOGDIR=${LOGDIR:-$(mktemp -d /tmp/flashjit-device-check.XXXXXX)}  # LOGDIR=DIR keeps the logs there
export LOGDIR  # ab_grid's
mkdir -p "$LOGDIR"
export BIN=$PWD/.device/bin
export FLASHJIT_LIB=$PWD/.device/lib/libflashjit.so
export FLASHJIT_CLI=$BIN/flashjit  # the unit tests' CLI cases run this binary
# A fresh database: every step sees heuristic configs and compiles cold.
FLASHJIT_DB=$(mktemp -d /tmp/flashjit-db.XXXXXX)/flashjit.db
export FLASHJIT_DB
export PYTHONUNBUFFERED=1
RESULTS=${RESULTS:-$LOGDIR/results}
export RESULTS  # scripts/det-ratios.sh's

if [ ! -x "$BIN/flashjit" ] || [ ! -f "$FLASHJIT_LIB" ]; then
  echo "device-check: .device/ is missing or incomplete; build it with scripts/build-device-bundle.sh" \
       "and carry .device" >&2
  exit 2
fi

names=() results=() seconds=()
n=0
# step NAME TIMEOUT_S COMMAND...: runs COMMAND with its output in the step's log.
step() {
  local name=$1 limit=$2
  shift 2
  n=$((n + 1))
  local log
  log=$LOGDIR/$(printf '%02d' "$n")-$name.log
  [ -n "${ONLY:-}" ] && [[ ",$ONLY," != *",$name,"* ]] && return
  if [[ ",${SKIP:-}," == *",$name,"* ]]; then
    names+=("$name") results+=("skipped") seconds+=(0)
    return
  fi
  echo "===== [$n] $name: $*"
  local start=$SECONDS rc=0
  # Through bash -c so that a step may be one of the functions below.
  timeout --kill-after=15 "$limit" bash -c '"$@"' "$name" "$@" >"$log" 2>&1 || rc=$?
  local result=pass
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    result="FAIL (timeout ${limit}s)"
  elif [ $rc -ne 0 ]; then
    result="FAIL (exit $rc)"
  elif grep -q '^SKIP:' "$log"; then
    result=skip
  fi
  tail -n 15 "$log" | cut -c1-220
  names+=("$name") results+=("$result") seconds+=($((SECONDS - start)))
}

have_torch() { python3 -c 'import torch; assert torch.cuda.is_available()' >/dev/null 2>&1; }
python_step() {  # a Python step, or a skip line when torch/CUDA is missing
  if have_torch; then "$@"; else echo "SKIP: python3 cannot import torch with CUDA"; fi
}

run_shapes() {
  local rc=0 shape
  for shape in \
    "--dtype bf16 --batch 2 --heads 16 --seqlen 2048 --hdim 128 --causal" \
    "--dtype fp16 --batch 1 --heads 8 --seqlen 1023 --hdim 64" \
    "--dtype bf16 --batch 2 --heads 32 --heads-kv 8 --seqlen 4096 --hdim 128 --causal" \
    "--dtype bf16 --batch 3 --heads 4 --seqlen-q 113 --seqlen-k 1023 --hdim 256 --causal" \
    "--dtype bf16 --heads 16 --hdim 128 --causal --varlen --seqlens-q 17,4096,300,0,1023" \
    "--dtype fp16 --heads 32 --heads-kv 8 --hdim 64 --varlen --batch 9 --seqlen-q 700 --seqlen-k 2000" \
    "--dtype bf16 --heads 32 --heads-kv 8 --hdim 128 --causal --varlen --seqlens-q 1,1,300,1,2000 --seqlens-k 4000,17,1300,0,2500 --page-size 64 --cache-seqlens" \
    "--dtype fp16 --heads 16 --heads-kv 4 --hdim 96 --mask window:256,0 --varlen --seqlens-q 1,130,1 --seqlens-k 900,700,33 --page-size 16" \
    "--pass bwd --dtype bf16 --heads 16 --hdim 128 --causal --seqlen 2048" \
    "--pass bwd --dtype bf16 --heads 8 --heads-kv 2 --hdim 128 --causal --varlen --seqlens-q 0,1,17,113,1023 --seqlens-k 5,1,17,200,0" \
    "--pass bwd --dtype fp16 --heads 4 --hdim 256 --varlen --seqlens-q 300,17,700" \
    "--dtype e4m3 --batch 2 --heads 16 --seqlen 2048 --hdim 128 --causal" \
    "--dtype e4m3 --heads 8 --heads-kv 2 --seqlen-q 333 --seqlen-k 1029 --hdim 256 --out-dtype fp16" \
    "--dtype bf16 --kv-dtype e4m3 --batch 4 --heads 32 --heads-kv 8 --seqlen-q 1 --seqlen-k 4000 --hdim 128" \
    "--dtype bf16 --batch 2 --heads 16 --heads-kv 4 --seqlen 4096 --hdim 128 --causal --attention-chunk 1000" \
    "--pass bwd --dtype bf16 --heads 8 --seqlen-q 700 --seqlen-k 1300 --hdim 128 --mask window:300,0 --attention-chunk 256"; do
    echo "+ flashjit run --check $shape"
    # shellcheck disable=SC2086
    "$BIN/flashjit" run --check $shape || rc=1
  done
  return $rc
}

wheel_step() {  # the installed wheel with the toolkit's NVRTC hidden, when a wheel was carried
  if ! ls .device/wheel/flashjit-*.whl >/dev/null 2>&1; then
    echo "SKIP: no wheel in .device/wheel (scripts/wheel-check.sh before build-device-bundle.sh)"
  elif ! have_torch; then
    echo "SKIP: python3 cannot import torch with CUDA"
  else
    TESTS=test_attention.py bash scripts/device-wheel-check.sh
  fi
}

# A baseline build's grids against this one's, alternately A B A B, each
# pass's TFLOP/s per shape and B / A (bench/ab_ratio.py); the last run of
# this build writes the grid suites.
ab_grid() {
  if [ -z "${BASELINE:-}" ] || [ ! -f "$BASELINE/lib/libflashjit.so" ]; then
    echo "SKIP: no BASELINE bundle (BASELINE=.device-old, carried)"
    return 0
  fi
  local rc=0 round lib tag quick=()
  [ "${QUICK:-0}" = 1 ] && quick=(--quick)
  # One database a build: the second round finds the first's cubins and
  # times the same kernels without compiling them again.
  local -A db=([a]=$(mktemp -d /tmp/flashjit-ab.XXXXXX)/db [b]=$(mktemp -d /tmp/flashjit-ab.XXXXXX)/db)
  for round in 1 2; do
    for tag in a b; do
      lib=$BASELINE/lib/libflashjit.so
      [ $tag = b ] && lib=$FLASHJIT_LIB
      local results=''
      [ $tag = b ] && [ $round = 2 ] && results=$RESULTS
      echo "+ $tag$round: $lib"
      FLASHJIT_LIB=$lib FLASHJIT_DB=${db[$tag]} \
        python3 bench/compare.py "${quick[@]}" --results "$results" \
        --json "$LOGDIR/ab-$tag$round.json" >"$LOGDIR/ab-$tag$round.log" 2>&1 || rc=1
      tail -n 3 "$LOGDIR/ab-$tag$round.log"
    done
  done
  python3 bench/ab_ratio.py --a "$LOGDIR"/ab-a?.json --b "$LOGDIR"/ab-b?.json || rc=1
  return $rc
}

export -f have_torch python_step run_shapes wheel_step ab_grid

quick=()
[ "${QUICK:-0}" = 1 ] && quick=(--quick)

step nvidia-smi 60 nvidia-smi -L
step gpu-tests 600 bash scripts/gpu-tests.sh "$BIN/flashjit_gpu_tests"
step unit-tests 300 "$BIN/flashjit_unit_tests" --gtest_brief=1
step info 60 "$BIN/flashjit" info
step compile 120 "$BIN/flashjit" compile --hdim 128 --causal
step run-check 300 run_shapes
step python-tests 600 python_step python3 tests/python/test_attention.py
step python-kvcache 300 python_step python3 tests/python/test_kvcache.py
step python-varlen 300 python_step python3 tests/python/test_varlen.py
step python-serving 300 python_step python3 tests/python/test_varlen_kvcache.py
step python-modifiers 300 python_step python3 tests/python/test_modifiers.py
step python-bad-input 120 python_step python3 tests/python/test_bad_input.py
step python-compile 300 python_step python3 tests/python/test_torch_compile.py
# Tiny transformers models under attn_implementation="fjit" (skips without
# transformers).
step python-transformers 300 python_step python3 tests/python/test_transformers.py
step fp8-tests 300 python_step python3 tests/python/test_fp8.py
step wheel 400 wheel_step
step latency 120 python_step python3 bench/latency.py --results "$RESULTS" --json "$LOGDIR/latency.json"
step first-call 300 python_step python3 bench/first_call.py --results "$RESULTS" --json "$LOGDIR/first_call.json"
step memory 300 python_step python3 bench/memory.py --json "$LOGDIR/memory.json"
step ab-grid 600 python_step ab_grid
step compare 600 python_step python3 bench/compare.py "${quick[@]}" --results "$RESULTS" --json "$LOGDIR/compare.json"
step models 600 python_step python3 bench/compare.py --models --repeats 20 --results "$RESULTS" --json "$LOGDIR/models.json"
step det-ratios 400 bash scripts/det-ratios.sh "$(dirname "$BIN")"
step decode 300 python_step python3 bench/decode.py "${quick[@]}" --results "$RESULTS" --json "$LOGDIR/decode.json"
step varlen 600 python_step python3 bench/varlen.py "${quick[@]}" --results "$RESULTS" --json "$LOGDIR/varlen.json"
step serving 300 python_step python3 bench/serving.py "${quick[@]}" --results "$RESULTS" --json "$LOGDIR/serving.json"
step modifiers 400 python_step python3 bench/modifiers.py "${quick[@]}" --results "$RESULTS" --json "$LOGDIR/modifiers.json"
step fp8 400 python_step python3 bench/fp8.py "${quick[@]}" --results "$RESULTS" --json "$LOGDIR/fp8.json"
step wide 400 python_step python3 bench/wide_head_dims.py "${quick[@]}" --results "$RESULTS" --json "$LOGDIR/wide.json"

echo
echo "===== summary (logs in $LOGDIR)"
printf '| %-13s | %-20s | %7s |\n' step result seconds
printf '| %-13s | %-20s | %7s |\n' ------------- -------------------- -------
failed=0
for i in "${!names[@]}"; do
  printf '| %-13s | %-20s | %7s |\n' "${names[$i]}" "${results[$i]}" "${seconds[$i]}"
  [[ ${results[$i]} == FAIL* ]] && failed=$((failed + 1))
done
latency=$(sed -n '/^=== call latency/,$p' "$LOGDIR"/*-latency.log 2>/dev/null)
[ -n "$latency" ] && printf '\n%s\n' "$latency"
first_call=$(grep -hE -A1 '^median (cold|warm) ' "$LOGDIR"/*-first-call.log 2>/dev/null)
[ -n "$first_call" ] && printf '\nfirst call (bench/first_call.py):\n%s\n' "$first_call"
memory=$(grep -h '^memory: ' "$LOGDIR"/*-memory.log 2>/dev/null)
[ -n "$memory" ] && printf '\nforward + backward memory (bench/memory.py):\n%s\n' "$memory"
ab=$(sed -n '/^=== B \/ A/,$p' "$LOGDIR"/*-ab-grid.log 2>/dev/null)
[ -n "$ab" ] && printf '\nthe baseline (A, %s) against this build (B):\n%s\n' "${BASELINE:-}" "$ab"
table=$(sed -n '/^=== flashjit vs SDPA/,$p' "$LOGDIR"/*-compare.log 2>/dev/null)
[ -n "$table" ] && printf '\n%s\n' "$table"
models=$(sed -n '/^=== flashjit vs SDPA/,$p' "$LOGDIR"/*-models.log 2>/dev/null)
[ -n "$models" ] && printf '\nreal models'"'"' shapes (bench/compare.py --models):\n%s\n' "$models"
det=$(sed -n '/^=== deterministic \/ default/,$p' "$LOGDIR"/*-det-ratios.log 2>/dev/null)
[ -n "$det" ] && printf '\n%s\n' "$det"
decode=$(sed -n '/^=== flashjit vs SDPA (decode/,$p' "$LOGDIR"/*-decode.log 2>/dev/null)
[ -n "$decode" ] && printf '\n%s\n' "$decode"
varlen=$(sed -n '/^=== flashjit varlen/,$p' "$LOGDIR"/*-varlen.log 2>/dev/null)
[ -n "$varlen" ] && printf '\n%s\n' "$varlen"
serving=$(sed -n '/^=== flashjit serving/,$p' "$LOGDIR"/*-serving.log 2>/dev/null)
[ -n "$serving" ] && printf '\n%s\n' "$serving"
modifiers=$(sed -n '/^=== flashjit modifiers/,$p' "$LOGDIR"/*-modifiers.log 2>/dev/null)
[ -n "$modifiers" ] && printf '\n%s\n' "$modifiers"
fp8=$(sed -n '/^=== flashjit fp8/,$p' "$LOGDIR"/*-fp8.log 2>/dev/null)
[ -n "$fp8" ] && printf '\n%s\n' "$fp8"
wide=$(sed -n '/^=== head dim 512 forward/,$p' "$LOGDIR"/*-wide.log 2>/dev/null)
[ -n "$wide" ] && printf '\n%s\n' "$wide"
if [ -n "${OUT:-}" ]; then
  # Few files come back from the device machine: the logs and the result
  # files, packed.
  tar czf "$OUT/logs.tgz" -C "$LOGDIR" --exclude results . 2>/dev/null
  [ -d "$RESULTS" ] && tar czf "$OUT/results.tgz" -C "$RESULTS" .
fi
echo
echo "device-check: $failed step(s) failed"
exit $((failed > 0))
