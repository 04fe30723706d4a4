#!/usr/bin/env bash
# Builds the kernels of experiments kept as diffs in docs/experiments, for an
# A/B on the GPU machine against the bundle of the commit they apply to:
#   scripts/build-experiments.sh NAME...   (docs/experiments/NAME.diff)
# Each NAME is applied to the commit its header names ("# Base: SHA"), else
# to BASE (default: 02e063a, the lean tile's kernels with the section
# switch FLASHJIT_BWD_DISPATCH_SECTION), in a git worktree under build-exp/
# (git-ignored, one CMake build reused across runs), and its CLI and GPU
# tests go to .device-NAME/bin/,
# stripped (about 10 MiB each, 5 for an upper bound's CLI alone; carry
# what fits in 64 MiB, eight folders at most, with .device-base).
# CLI_ONLY=1 builds the CLIs alone (5 MiB each), for an A/B without tests.
# .device-base/bin/ gets BASE's own, the A of the A/B: the diffs' own bases
# since 5624b2a have the same backward kernels' SASS as 02e063a
# (scripts/sass-compare.sh).
# Then on the GPU machine: scripts/device-experiments.sh NAME...
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
base=${BASE:-02e063a}
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

# build_into NAME [cli]: the worktree as it is now, into .device-NAME/bin;
# the CLI alone for a timing-only upper bound (no tests to run: 5 MiB).
build_into() {
  local targets=(flashjit_cli flashjit_gpu_tests) files=(build-exp/build/flashjit)
  if [ "${2:-}" = cli ]; then
    targets=(flashjit_cli)
  else
    files+=(build-exp/build/tests/flashjit_gpu_tests)
  fi
  cmake --build build-exp/build -j"$(nproc)" --target "${targets[@]}"
  rm -rf ".device-$1"
  mkdir -p ".device-$1/bin"
  cp "${files[@]}" ".device-$1/bin/"
  strip --strip-unneeded ".device-$1"/bin/*
}

build_into base
for name in "$@"; do
  diff_file=$root/docs/experiments/$name.diff
  own_base=$(sed -n 's/^# Base: \([0-9a-f]\{7,40\}\)$/\1/p' "$diff_file" | head -n 1)
  git -C "$src" checkout -q --detach "${own_base:-$base}"
  # The diff's header lines (before "diff --git") are prose: git apply skips them.
  git -C "$src" apply "$diff_file"
  if [ -n "${CLI_ONLY:-}" ] || grep -q '^# Upper bound' "$diff_file"; then
    build_into "$name" cli
  else
    build_into "$name"
  fi
  git -C "$src" checkout -q -- .
  git -C "$src" clean -fdq
done
du -sh .device-* | sort -k2
