#!/usr/bin/env bash
# Quick start: install what is missing (as root), build Release in build/, and
# run one attention problem: bf16, batch 2, 16 heads, seqlen 2048, head dim
# 128, causal. With a GPU it runs and checks the kernel against the reference;
# without one it compiles the kernel for an H100/H200 (sm_90a) instead.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh
if [ ! -f build/CMakeCache.txt ]; then
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
fi
cmake --build build -j"$(nproc)"

problem=(--dtype bf16 --batch 2 --heads 16 --seqlen 2048 --hdim 128 --causal)
# A GPU is one flashjit itself can use: `info` lists it as "GPU 0: ...".
info=$(build/flashjit info 2>/dev/null || true)
if grep -q '^GPU [0-9]' <<<"$info"; then
  echo "+ build/flashjit run --check ${problem[*]}"
  build/flashjit run --check "${problem[@]}"
else
  echo "+ build/flashjit compile --arch sm_90a ${problem[*]}"
  build/flashjit compile --arch sm_90a "${problem[@]}"
  echo "no GPU here: compiled for sm_90a instead of running"
fi
