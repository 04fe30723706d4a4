#!/usr/bin/env bash
# Where a flashjit kernel's warps stall, by SASS instruction (Nsight Compute
# source-level sampling), on the GPU machine with the binaries in .device/.
# Profiles the 4th launch of KERNEL (a regex) in `flashjit run FLAGS`, prints
# the kernel's stall reasons and leaves the per-instruction table in
# $OUT/TAG-source.csv (read it with scripts/hotspots-digest.py).
#   scripts/device-hotspots.sh flashjit_bwd_sm90 d128 "--pass bwd --hdim 128"
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
KERNEL=$1 TAG=$2 FLAGS=$3
OUT=${OUT:-$(mktemp -d /tmp/flashjit-hotspots.XXXXXX)}
BIN=$PWD/.device/bin
export FLASHJIT_DB=${FLASHJIT_DB:-$(mktemp -d /tmp/flashjit-db.XXXXXX)/flashjit.db}
# shellcheck disable=SC2086
"$BIN/flashjit" run $FLAGS --warmup 1 --repeats 3 >/dev/null 2>&1  # compile outside the profile
# shellcheck disable=SC2086
ncu -k "regex:$KERNEL" --launch-skip 3 --launch-count 1 --section WarpStateStats \
    --section SourceCounters -o "$OUT/$TAG" -f "$BIN/flashjit" run $FLAGS --warmup 1 --repeats 4 \
    >/dev/null 2>&1
ncu -i "$OUT/$TAG.ncu-rep" --page source --csv --print-source sass >"$OUT/$TAG-source.csv" 2>/dev/null
rm -f "$OUT/$TAG.ncu-rep"
python3 scripts/hotspots-digest.py "$OUT/$TAG-source.csv" 25
