#!/usr/bin/env bash
# Profiles flashjit kernels with Nsight Compute on the GPU machine (binaries
# from .device/, as scripts/device-check.sh). Each shape is `flashjit run`
# flags; the profiled launch is the 4th of the kernel whose name matches
# KERNEL (a regex; default the sm90 forward). Full reports go to
# $OUT/ncu-N.txt; a digest of the lines that matter (time, tensor pipe,
# issue slots, top stall reasons, registers/smem) is printed last.
#   KERNEL=flashjit_bwd_sm90 scripts/device-profile.sh "--pass bwd --hdim 128"
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
OUT=${OUT:-$(mktemp -d /tmp/flashjit-profile.XXXXXX)}
KERNEL=${KERNEL:-flashjit_fwd_sm90}
BIN=$PWD/.device/bin
export FLASHJIT_DB=${FLASHJIT_DB:-$(mktemp -d /tmp/flashjit-db.XXXXXX)/flashjit.db}
[ $# -gt 0 ] || set -- "--hdim 128 --seqlen 8192 --batch 2 --heads 16"
n=0
for shape in "$@"; do
  n=$((n + 1))
  # shellcheck disable=SC2086
  "$BIN/flashjit" run $shape --warmup 1 --repeats 3 >/dev/null 2>&1  # compile outside the profile
  # shellcheck disable=SC2086
  ncu -k "regex:$KERNEL" --launch-skip 3 --launch-count 1 \
      --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats \
      --section SchedulerStats --section LaunchStats --section Occupancy --section MemoryWorkloadAnalysis \
      --section InstructionStats \
      "$BIN/flashjit" run $shape --warmup 1 --repeats 4 >"$OUT/ncu-$n.txt" 2>&1
  echo "===== [$n] $shape"
  grep -E "flashjit_(fwd|bwd)|Duration|Compute \(SM\) Throughput|Memory Throughput|DRAM Throughput|Issue Slots Busy|Issued Ipc Active|No Eligible|Registers Per Thread|Dynamic Shared|Achieved Occupancy|Warp Cycles Per Issued|Executed Ipc|L2 Hit Rate|Block Limit|Waves Per SM|Grid Size|est. speedup|Stall" \
       "$OUT/ncu-$n.txt" | sed 's/^ *//' | cut -c1-160 | head -40
done
