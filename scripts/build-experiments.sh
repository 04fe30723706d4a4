#!/usr/bin/env bash
# Builds the kernels of experiments kept as diffs in docs/experiments, for an
# A/B on the GPU machine against the bundle of the commit they apply to:
#   scripts/build-experiments.sh NAME...   (docs/experiments/NAME.diff)
# Each NAME is applied to BASE (default: the commit the thirtieth session's
# diffs were written against) in a git worktree under build-exp/ (git-ignored,
# one CMake build reused across runs), and its CLI and GPU tests go to
# .device-NAME/bin/, stripped (about 11 MiB each: carry .device and at most
# three of them). .device-base/bin/ gets BASE's own, the A of the A/B.
# Then on the GPU machine: scripts/device-experiments.sh NAME...
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
base=${BASE:-e35d4b8}
[ $# -gt 0 ] || { sed -n '2,10p' "$0" >&2; exit 2; }
for name in "$@"; do
  [ -f "docs/experiments/$name.diff" ] || { echo "no docs/experiments/$name.diff" >&2; exit 2; }
done

src=build-exp/src
if [ ! -d "$src" ]; then
  mkdir -p build-exp
  git worktree add --detach "$src" "$base"
fi
git -C "$src" checkout -q --detach "$base"
git -C "$src" checkout -q -- .
if [ ! -f build-exp/build/CMakeCache.txt ]; then
  cmake -S "$src" -B build-exp/build -DCMAKE_BUILD_TYPE=Release
fi

build_into() {  # the worktree as it is now, into .device-$1/bin
  cmake --build build-exp/build -j"$(nproc)" --target flashjit_cli flashjit_gpu_tests
  rm -rf ".device-$1"
  mkdir -p ".device-$1/bin"
  cp build-exp/build/flashjit build-exp/build/tests/flashjit_gpu_tests ".device-$1/bin/"
  strip --strip-unneeded ".device-$1"/bin/*
}

build_into base
for name in "$@"; do
  # The diff's header lines (before "diff --git") are prose: git apply skips them.
  git -C "$src" apply "$root/docs/experiments/$name.diff"
  build_into "$name"
  git -C "$src" checkout -q -- .
done
du -sh .device-* | sort -k2
