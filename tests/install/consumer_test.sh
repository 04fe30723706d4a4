#!/usr/bin/env bash
# ctest install_consumer: installs the build into a temporary prefix, builds
# examples/consumer against it with find_package(flashjit), and runs it.
#   consumer_test.sh <build dir> <source dir>
set -euo pipefail
build=$1
source=$2
tmp=$(mktemp -d /tmp/flashjit-install-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

cmake --install "$build" --prefix "$tmp/prefix" >"$tmp/install.log"
cmake -S "$source/examples/consumer" -B "$tmp/consumer" -DCMAKE_PREFIX_PATH="$tmp/prefix" \
  -DCMAKE_BUILD_TYPE=Release >"$tmp/configure.log" || { cat "$tmp/configure.log"; exit 1; }
cmake --build "$tmp/consumer" >"$tmp/build.log" || { cat "$tmp/build.log"; exit 1; }

output=$("$tmp/consumer/app" 2>&1) || { echo "$output"; echo "app failed"; exit 1; }
echo "$output"
expect() {
  grep -q "$1" <<<"$output" || { echo "install_consumer: output lacks '$1'"; exit 1; }
}
expect '^flashjit [0-9]'
expect '^C++ API error (expected): .'
expect '^C API error (expected): .'
# The installed library is the one the app runs with, not the build tree's.
if command -v ldd >/dev/null; then
  libs=$(ldd "$tmp/consumer/app")
  grep -q "$tmp/prefix/.*libflashjit" <<<"$libs" ||
    { echo "$libs"; echo "install_consumer: app does not use the installed library"; exit 1; }
fi
echo "install_consumer: ok"
