#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages flashjit builds against, only those that
# are missing. Needs root when something is missing; otherwise prints what to
# install and fails. Used by scripts/quickstart.sh and .ci/run.
#
# Each package is probed by a file it provides, not by its name: Debian 12
# ships libtinfo.a in libncurses-dev (libtinfo-dev is a transitional name), and
# a tool may come from elsewhere (a newer cmake in /usr/local).
#
# With --fuzz: also clang-14 and its runtime libraries (libFuzzer, ASan),
# which the fuzz targets need (FLASHJIT_FUZZ; .ci/run).
set -euo pipefail

fuzz=0
[ "${1:-}" = "--fuzz" ] && fuzz=1

have_file() {  # any of the glob patterns exists
  local pattern
  for pattern in "$@"; do
    compgen -G "$pattern" >/dev/null && return 0
  done
  return 1
}

missing=()
command -v cmake >/dev/null || missing+=(cmake)
command -v g++ >/dev/null || missing+=(g++)
have_file /usr/lib/llvm-14/lib/libLLVMSupport.a || missing+=(llvm-14-dev)
have_file /usr/include/sqlite3.h || missing+=(libsqlite3-dev)
have_file /usr/include/yaml-cpp/yaml.h || missing+=(libyaml-cpp-dev)
have_file /usr/include/gtest/gtest.h || missing+=(libgtest-dev)
have_file /usr/include/zlib.h || missing+=(zlib1g-dev)
have_file '/usr/lib/*/libtinfo.a' /usr/lib/libtinfo.a || missing+=(libtinfo-dev)
if [ $fuzz -eq 1 ]; then
  command -v clang++-14 >/dev/null || missing+=(clang-14)
  have_file '/usr/lib/llvm-14/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a' \
    || missing+=(libclang-rt-14-dev)
fi

# The CUDA headers (cuda.h, nvrtc.h) come with the CUDA toolkit, not Debian;
# only the headers are needed to build (libcuda and libnvrtc are dlopen'ed).
cuda_include=""
for dir in ${CUDA_HOME:+"$CUDA_HOME/include"} /usr/local/cuda/include /usr/include; do
  if [ -f "$dir/cuda.h" ] && [ -f "$dir/nvrtc.h" ]; then cuda_include=$dir; break; fi
done
if [ -z "$cuda_include" ]; then
  echo "install-deps: cuda.h and nvrtc.h not found (looked in \$CUDA_HOME/include," \
       "/usr/local/cuda/include, /usr/include). Install the CUDA toolkit (headers suffice)" \
       "or set CUDA_HOME." >&2
  exit 1
fi

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: every build dependency is present"
  exit 0
fi
echo "install-deps: missing: ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: not root; run: sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
