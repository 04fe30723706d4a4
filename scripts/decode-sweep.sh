#!/usr/bin/env bash
# Decode configs on the GPU machine (bundle in .device/): GB/s of K+V for
# each shape of bench/decode.py's table under each config, one line each:
#   shape | config flags | GB/s | kernel
# CONFIGS (one per line, `flashjit run` config flags) and SHAPES override
# the defaults.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
BIN=${BIN:-.device/bin}
export FLASHJIT_DB=${FLASHJIT_DB:-$(mktemp -d /tmp/flashjit-sweep.XXXXXX)/db}
SHAPES=${SHAPES:-"1x8192 8x8192 64x4096 256x1024 16x32768 1x131072"}
CONFIGS=${CONFIGS:-"
--splits 0
--block-n 64 --stages 4
--block-n 128 --stages 2
--block-n 128 --stages 4
"}
for shape in $SHAPES; do
  b=${shape%x*} sk=${shape#*x}
  while IFS= read -r cfg; do
    [ -n "$cfg" ] || continue
    # shellcheck disable=SC2086
    out=$("$BIN/flashjit" run --batch "$b" --heads 32 --heads-kv 8 --seqlen-q 1 --seqlen-k "$sk" \
          --hdim 128 --repeats 30 $cfg 2>&1)
    printf '%-9s | %-34s | %8s | %s\n' "$shape" "$cfg" \
      "$(echo "$out" | sed -n 's/^perf.* \([0-9.]*\) GB\/s.*/\1/p')" \
      "$(echo "$out" | awk '/^kernel/{print $2} /rror/{print}')"
  done <<< "$CONFIGS"
done
