#!/usr/bin/env bash
# Builds Release in build/ (configuring it if needed) and gathers what the GPU
# machine runs into .device/ (git-ignored), stripped:
#   .device/bin/flashjit, .device/bin/flashjit_gpu_tests,
#   .device/bin/flashjit_unit_tests, .device/lib/libflashjit.so,
#   .device/wheel/flashjit-*.whl (when build-wheel/dist has one)
#   .device/COMMIT: the commit built, "-dirty" after it when the library's
#   sources differ from it (the benchmarks' result files name it)
# Carry .device/ to the GPU machine and run scripts/device-check.sh there.
# LLVM, SQLite and yaml-cpp are linked in statically; what is left (libc,
# libstdc++, libtinfo; libcuda and libnvrtc are dlopen'ed) is on the GPU
# machine too, so binaries built on Debian 12 run there. The NEEDED list
# printed below shows it.
set -euo pipefail
cd "$(dirname "$0")/.."

limit_mib=48  # the carry limit is 64 MiB in all, with the working tree

if [ ! -f build/CMakeCache.txt ]; then
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
fi
cmake --build build -j"$(nproc)" --target flashjit flashjit_cli flashjit_gpu_tests flashjit_unit_tests

rm -rf .device
mkdir -p .device/bin .device/lib
cp build/flashjit build/tests/flashjit_gpu_tests build/tests/flashjit_unit_tests .device/bin/
# The real file, under the name the Python binding and FLASHJIT_LIB use.
cp -L build/libflashjit.so .device/lib/libflashjit.so
strip --strip-unneeded .device/bin/* .device/lib/libflashjit.so
if commit=$(git rev-parse --short HEAD 2>/dev/null); then
  git diff --quiet HEAD -- include generator runtime templates reference cache tuner cli python \
    CMakeLists.txt cmake || commit=$commit-dirty
  echo "$commit" >.device/COMMIT
fi
# The wheel scripts/wheel-check.sh built, when there is one, for
# scripts/device-wheel-check.sh (warned about when older than the sources).
wheel=$(ls build-wheel/dist/flashjit-*.whl 2>/dev/null | head -n 1 || true)
if [ -n "$wheel" ]; then
  mkdir -p .device/wheel
  cp "$wheel" .device/wheel/
  newer=$(find python runtime generator templates include -newer "$wheel" -type f | head -n 3)
  [ -n "$newer" ] && echo "warning: $wheel is older than $(echo $newer | tr '\n' ' ')(scripts/wheel-check.sh rebuilds it)" >&2
fi

for f in .device/bin/* .device/lib/*; do
  printf '%-36s %8s  needs: %s\n' "$f" "$(du -h "$f" | cut -f1)" \
    "$(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')"
done
kib=$(du -sk .device | cut -f1)
echo ".device/: $((kib / 1024)) MiB ($kib KiB)"
if [ "$kib" -gt $((limit_mib * 1024)) ]; then
  echo "error: .device/ is over ${limit_mib} MiB; the device carry limit is 64 MiB in all" >&2
  exit 1
fi
