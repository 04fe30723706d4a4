#!/usr/bin/env bash
# ncu kernel durations of one decode shape under several configs (bundle in
# .device/): for each config, the main kernel's and the combine kernel's
# duration (us) and DRAM throughput (% of peak). Shape and configs:
#   SHAPE="1 8192" CONFIGS="--splits 8|--splits 16" scripts/decode-profile.sh
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
BIN=${BIN:-.device/bin}
read -r b sk <<< "${SHAPE:-1 8192}"
IFS='|' read -r -a configs <<< "${CONFIGS:---splits 0}"
# A folder of its own: a database directly in /tmp is one others could
# plant files beside, and flashjit would compile instead of loading from it.
db=$(mktemp -d /tmp/flashjit-profile.XXXXXX)/flashjit.db
for cfg in "${configs[@]}"; do
  # shellcheck disable=SC2086
  FLASHJIT_DB=$db ncu -k regex:flashjit_fwd --launch-skip 2 --launch-count 2 \
    --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size \
    "$BIN/flashjit" run --batch "$b" --heads 32 --heads-kv 8 --seqlen-q 1 --seqlen-k "$sk" --hdim 128 \
    --repeats 3 $cfg 2>&1 |
    awk -v cfg="$cfg" '/flashjit_fwd_/{k=$1} /gpu__time_duration/{d[k]=$3} /dram__throughput/{t[k]=$3}
         /launch__grid_size/{g[k]=$2}
         END{printf "%-44s", cfg; for (k in d) printf " | %s grid %s %s us dram %s%%", k, g[k], d[k], t[k]; print ""}'
done
