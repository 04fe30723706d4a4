#!/usr/bin/env bash
# On the GPU machine: tunes bench/compare.py's grid (plans/grid.yaml) into a
# fresh database, then runs compare.py with it, so the benchmark measures the
# tuned kernels a pre-tuned GPU serves. Logs and JSON go to $OUT.
#   PASS=fwd|bwd   which pass (default fwd); BUDGET_S per class (default 12)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
OUT=${OUT:-$(mktemp -d /tmp/flashjit-tuned.XXXXXX)}
PASS=${PASS:-fwd}
export FLASHJIT_DB=${FLASHJIT_DB:-$(mktemp -d /tmp/flashjit-db.XXXXXX)/grid.db}
export FLASHJIT_LIB=$PWD/.device/lib/libflashjit.so
start=$SECONDS
# A plan names its passes (defaults: fwd); this copy asks for $PASS.
plan=$OUT/grid-$PASS.yaml
sed "s/^defaults: {/defaults: {passes: [$PASS], /" plans/grid.yaml >"$plan"
.device/bin/flashjit tune --plan "$plan" --budget-s "${BUDGET_S:-12}" >"$OUT/tune-$PASS.log" 2>&1
echo "tune: exit $?, $((SECONDS - start)) s"
tail -n 3 "$OUT/tune-$PASS.log"
python3 bench/compare.py --pass "$PASS" --json "$OUT/compare-$PASS.json" >"$OUT/compare-$PASS.log" 2>&1
echo "compare: exit $?, $((SECONDS - start)) s"
sed -n '/^=== flashjit vs SDPA/,$p' "$OUT/compare-$PASS.log"
