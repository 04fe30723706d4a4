#!/usr/bin/env bash
# Quick start: install what is missing (as root), build Release in build/, and
# make this machine fast for the shapes of a tuning plan (default:
# plans/default.yaml, FlashAttention's benchmark shapes). With a GPU it tunes
# every problem class of the plan and stores the winners in the database;
# without one it precompiles every candidate kernel for an H100/H200 (sm_90a)
# into the database instead, so that a GPU machine given that database starts
# warm. Either way it ends by asking which kernel one shape gets, and why.
#
#   scripts/quickstart.sh [PLAN]
set -euo pipefail
cd "$(dirname "$0")/.."
plan=${1:-plans/default.yaml}

bash scripts/install-deps.sh
if [ ! -f build/CMakeCache.txt ]; then
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
fi
cmake --build build -j"$(nproc)"

shape=(--dtype bf16 --batch 4 --heads 16 --seqlen 4096 --hdim 128 --causal)
# A GPU is one flashjit itself can use: `info` lists it as "GPU 0: ...".
info=$(build/flashjit info 2>/dev/null || true)
if grep -q '^GPU [0-9]' <<<"$info"; then
  echo "+ build/flashjit tune --plan $plan"
  build/flashjit tune --plan "$plan"
  echo "+ build/flashjit query ${shape[*]}"
  build/flashjit query "${shape[@]}"
else
  echo "no GPU here: precompiling the plan's kernels for sm_90a instead of tuning"
  echo "+ build/flashjit precompile --arch sm_90a --plan $plan"
  build/flashjit precompile --arch sm_90a --plan "$plan"
  echo "+ build/flashjit query --arch sm_90a ${shape[*]}"
  build/flashjit query --arch sm_90a "${shape[@]}"
fi
