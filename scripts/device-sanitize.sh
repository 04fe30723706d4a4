#!/usr/bin/env bash
# compute-sanitizer over every kernel family at small irregular shapes, on
# the GPU machine, from the repository root, with the binaries built here
# carried in .device/ (scripts/build-device-bundle.sh), as device-check.sh.
# Runs each tool (memcheck, racecheck, synccheck) over the GPU tests of each
# family, logs each run to $OUT/sanitize-<tool>-<family>.log (a temporary
# folder when OUT is unset) and prints LAST one verdict line per (tool,
# family):
#   sanitize: memcheck  fwd-sm80        PASS (0 errors; 8 tests)
# Exit 0 when every run that was not skipped passed.
#   TOOLS="memcheck racecheck synccheck"   the tools to run (default: all three)
#   FAMILIES="fwd-sm80 fwd-sm90 fwd-fp8 bwd-atomic bwd-deterministic bwd-sm90 bwd-sm90-split reference"
#                                          the families (default: all eight); a
#                                          device run is limited to 10 minutes,
#                                          so a subset per call may be needed
#   LIMIT_S=540                            per run
#   COMPUTE_SANITIZER=/path/to/compute-sanitizer
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

BIN=$PWD/.device/bin
LOGDIR=${OUT:-$(mktemp -d /tmp/flashjit-sanitize.XXXXXX)}
mkdir -p "$LOGDIR"
LIMIT_S=${LIMIT_S:-540}
TOOLS=${TOOLS:-memcheck racecheck synccheck}
FAMILIES=${FAMILIES:-fwd-sm80 fwd-sm90 fwd-fp8 bwd-atomic bwd-deterministic bwd-sm90 bwd-sm90-split reference}

sanitizer=${COMPUTE_SANITIZER:-}
if [ -z "$sanitizer" ]; then
  sanitizer=$(command -v compute-sanitizer || true)
  for candidate in "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer" \
                   /usr/local/cuda/compute-sanitizer/compute-sanitizer; do
    [ -z "$sanitizer" ] && [ -x "$candidate" ] && sanitizer=$candidate
  done
fi
if [ -z "$sanitizer" ] || [ ! -x "$BIN/flashjit_gpu_tests" ]; then
  echo "device-sanitize: need compute-sanitizer (PATH, CUDA_HOME or COMPUTE_SANITIZER) and" \
       ".device/bin/flashjit_gpu_tests (scripts/build-device-bundle.sh, carry .device)" >&2
  exit 2
fi

# The gtest filter of each family: small shapes off every tile (301x405,
# 201x259, 150x200, 97x150, ...), causal, windowed and GQA among them.
filter_of() {
  case $1 in
    fwd-sm80) echo 'Configs/ForwardCorrectness.*' ;;              # explicit sm80 tiles, 8 cases
    fwd-sm90) echo 'Sm90Sanitizer.*' ;;                           # d = 64, 128, 256, causal GQA
    fwd-fp8) echo 'Fp8Forward.*' ;;                               # e4m3: V^T, P at 2^8, descales
    bwd-atomic) echo 'Configs/BackwardCorrectness.*' ;;           # fp32 atomics into dQ
    bwd-deterministic) echo 'Deterministic/BackwardCorrectness.*' ;;  # the dQ kernel, no atomics
    # sm90 backward: d=64 full, causal, window; d=128 causal, window; softcap;
    # d=64 with 64-query tiles (dQ over own keys): full, causal, window
    bwd-sm90) echo 'Sm90/BackwardSm90Correctness.*/case2:Sm90/BackwardSm90Correctness.*/case9:Sm90/BackwardSm90Correctness.*/case16:Sm90/BackwardSm90Correctness.*/case26:Sm90/BackwardSm90Correctness.*/case32:Sm90/BackwardSm90Correctness.*/case36:Sm90/BackwardSm90Correctness.*/case49:Sm90/BackwardSm90Correctness.*/case52:Sm90/BackwardSm90Correctness.*/case54' ;;
    # the head-dim split (the sm90 backward's 192 and 192/128 tilings, dQ
    # staged, register A fragments): 192/128 deterministic (128 keys),
    # causal, full (64 keys); 192 window; 192 with 64-key tiles; 192/128 on
    # 128 keys (two passes): causal, window with softcap, 176/104 full
    bwd-sm90-split) echo 'Sm90/BackwardSm90Correctness.*/case95:Sm90/BackwardSm90Correctness.*/case96:Sm90/BackwardSm90Correctness.*/case97:Sm90/BackwardSm90Correctness.*/case101:Sm90/BackwardSm90Correctness.*/case106:Sm90/BackwardSm90Correctness.*/case117:Sm90/BackwardSm90Correctness.*/case118:Sm90/BackwardSm90Correctness.*/case119' ;;
    reference) echo 'GpuReference.MatchesTheCpuReferenceOnIrregularShapes:GpuReference.FullyMaskedRowsAreZeroWithInfiniteLse' ;;
    *) return 1 ;;
  esac
}

# A fresh database: kernels are compiled in the test process (host code only
# under the sanitizer) and nothing comes from an earlier run's store.
FLASHJIT_DB=$(mktemp -d /tmp/flashjit-sanitize-db.XXXXXX)/flashjit.db
export FLASHJIT_DB

verdicts=()
failed=0
for tool in $TOOLS; do
  for family in $FAMILIES; do
    if ! filter=$(filter_of "$family"); then
      verdicts+=("$(printf 'sanitize: %-9s %-17s FAIL (unknown family)' "$tool" "$family")")
      failed=$((failed + 1))
      continue
    fi
    log=$LOGDIR/sanitize-$tool-$family.log
    echo "===== $tool $family: $filter"
    extra=()
    [ "$tool" = memcheck ] && extra=(--leak-check no)
    start=$SECONDS
    rc=0
    timeout --kill-after=15 "$LIMIT_S" "$sanitizer" --tool "$tool" "${extra[@]}" \
      --error-exitcode 99 --print-limit 50 \
      "$BIN/flashjit_gpu_tests" --gtest_filter="$filter" --gtest_brief=1 >"$log" 2>&1 || rc=$?
    seconds=$((SECONDS - start))
    tail -n 6 "$log" | cut -c1-200
    # memcheck and synccheck: "ERROR SUMMARY: N errors"; racecheck:
    # "RACECHECK SUMMARY: H hazards displayed (N errors, W warnings)".
    errors=$(sed -n -e 's/.*ERROR SUMMARY: \([0-9]*\) error.*/\1/p' \
                    -e 's/.*RACECHECK SUMMARY: .*(\([0-9]*\) error.*/\1/p' "$log" | tail -n 1)
    hazards=$(sed -n 's/.*RACECHECK SUMMARY: \([0-9]*\) hazard.*/\1/p' "$log" | tail -n 1)
    ran=$(sed -n 's/^\[==========\] \([0-9]*\) tests\{0,1\} from.*ran.*/\1/p' "$log" | tail -n 1)
    # "[  SKIPPED ] 8 tests." (brief) or "..., listed below:" (full)
    skipped=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) tests\{0,1\}[.,].*/\1/p' "$log" | tail -n 1)
    ran=${ran:-0} skipped=${skipped:-0} errors=${errors:-?}
    detail="$errors errors"
    [ -n "$hazards" ] && detail="$detail, $hazards hazards"
    detail="$detail; $((ran - skipped)) tests; ${seconds}s"
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
      verdict="FAIL (timed out after ${LIMIT_S}s; $detail)"
    elif [ "$ran" -gt 0 ] && [ "$skipped" -eq "$ran" ]; then
      verdict="SKIP (every test skipped: $(grep -m1 -A1 ': Skipped$' "$log" | tail -n 1 | cut -c1-80))"
    elif [ $rc -ne 0 ] || [ "$errors" != 0 ] || [ "$ran" -eq 0 ]; then
      verdict="FAIL (exit $rc; $detail)"
    else
      verdict="PASS ($detail)"
    fi
    [[ $verdict == FAIL* ]] && failed=$((failed + 1))
    verdicts+=("$(printf 'sanitize: %-9s %-17s %s' "$tool" "$family" "$verdict")")
  done
done

echo
echo "===== compute-sanitizer verdicts (logs in $LOGDIR; $("$sanitizer" --version | tail -n 1))"
printf '%s\n' "${verdicts[@]}"
echo "device-sanitize: $failed run(s) failed"
exit $((failed > 0))
