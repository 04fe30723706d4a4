#!/usr/bin/env bash
# Compiles the same kernels with two CLIs (no GPU needed) and compares their
# SASS (both families: sm90, and sm80 compiled for sm_90a), one line per
# configuration: "same"; "renamed" (the same instructions, as many of
# each, up to register numbers and order: a change of register allocation,
# nothing more); or "DIFFERS" with each side's instruction count and spills. For changes meant to leave the machine code
# alone (moving template code into parts, renaming); anything else shows up.
#   scripts/sass-compare.sh OLD_CLI NEW_CLI [PASS]   (PASS: bwd, the default, or fwd;
#   each has its own configurations)
#   CONFIGS="flags|flags|..." to override the configurations below
#   ARCH=sm_80 to compile for another target than sm_90a
# Needs cuobjdump and the nvdisasm it runs: $CUOBJDUMP, on PATH, or pip's
# nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm. Or FLASHJIT_CUOBJDUMP, as
# the unit tests take it.
set -uo pipefail
old=${1:?old CLI} new=${2:?new CLI} pass=${3:-bwd}
arch=${ARCH:-sm_90a}
cuobjdump=${CUOBJDUMP:-${FLASHJIT_CUOBJDUMP:-$(command -v cuobjdump || true)}}
if [ -z "$cuobjdump" ]; then
  cuobjdump=$(python3 -c 'import nvidia, os; print(os.path.join(nvidia.__path__[0], "cu13/bin/cuobjdump"))' \
    2>/dev/null)
fi
[ -x "$cuobjdump" ] || {
  echo "no cuobjdump: pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm" >&2
  exit 2
}
work=$(mktemp -d /tmp/flashjit-sass.XXXXXX)
cat >"$work/mask_mod.cuh" <<'EOF'
__device__ bool mask_mod(int b, int h, int q, int k) { return (q / 512) == (k / 512) || k < 64; }
EOF
cat >"$work/score_mod.cuh" <<'EOF'
__device__ float score_mod(float s, int b, int h, int q, int k) { return s - 0.01f * (q - k); }
EOF
cat >"$work/alibi.cuh" <<'EOF'
__device__ float score_mod(float s, int b, int h, int q, int k) { return s + 0.0625f * (h + 1) * (k - q); }
EOF
cat >"$work/score_mod_grad.cuh" <<'EOF'
__device__ float score_mod_grad(float s, int b, int h, int q, int k) { return 1.f; }
EOF
default_configs="--hdim 64|--hdim 64 --causal|--hdim 64 --causal --deterministic|\
--hdim 40 --causal|--hdim 96 --causal|--hdim 96 --causal --deterministic|\
--hdim 128|--hdim 128 --causal|--hdim 128 --causal --deterministic|\
--hdim 128 --causal --heads 32 --heads-kv 8|--hdim 128 --mask window:256,0|\
--hdim 128 --softcap 30|--hdim 128 --dtype fp16|--hdim 128 --sinks|\
--hdim 128 --varlen --seqlens-q 1000,3000 --causal|\
--hdim 128 --mask-mod $work/mask_mod.cuh|--hdim 128 --mask-mod $work/mask_mod.cuh --mask-mod-qk-only|\
--hdim 128 --score-mod $work/score_mod.cuh --score-mod-grad $work/score_mod_grad.cuh|\
--hdim 192 --causal|--hdim 192 --hdim-v 128 --causal|--hdim 192 --hdim-v 128|\
--hdim 192 --hdim-v 256 --causal|--hdim 128 --hdim-v 192 --causal|--hdim 256|--hdim 256 --causal|\
--hdim 256 --causal --deterministic|--hdim 256 --mask-mod $work/mask_mod.cuh|\
--path sm80 --hdim 128 --causal|--path sm80 --hdim 64 --softcap 30|--path sm80 --hdim 256 --causal|\
--path sm80 --hdim 128 --causal --deterministic|--path sm80 --hdim 128 --softcap 30 --deterministic|\
--path sm80 --hdim 128 --score-mod $work/score_mod.cuh --score-mod-grad $work/score_mod_grad.cuh|\
--path sm80 --hdim 64 --mask-mod $work/mask_mod.cuh --deterministic"
if [ "$pass" = fwd ]; then
  default_configs="--hdim 64|--hdim 64 --causal|--hdim 96 --causal|--hdim 128|--hdim 128 --causal|\
--hdim 128 --mask window:256,0|--hdim 128 --softcap 30|--hdim 128 --dtype fp16|--hdim 128 --sinks|\
--hdim 192 --hdim-v 128 --causal|--hdim 256|--hdim 256 --causal|\
--hdim 128 --causal --heads 32 --heads-kv 8|--hdim 128 --seqlen-q 1 --seqlen-k 8192 --heads 32 --heads-kv 8|\
--hdim 128 --seqlen-q 1 --seqlen-k 8192 --heads 8 --heads-kv 8 --splits 4|\
--hdim 128 --varlen --seqlens-q 1000,3000 --causal|\
--hdim 128 --varlen --seqlens-q 1,1,16 --seqlens-k 1000,2000,3000 --page-size 64|\
--hdim 128 --varlen --seqlens-q 1,1,16 --seqlens-k 1000,2000,3000 --cache-seqlens|\
--hdim 64 --mask-mod $work/mask_mod.cuh|--hdim 128 --mask-mod $work/mask_mod.cuh|\
--hdim 128 --mask-mod $work/mask_mod.cuh --mask-mod-qk-only|\
--hdim 128 --score-mod $work/score_mod.cuh|--hdim 128 --causal --score-mod $work/alibi.cuh|\
--path sm80 --hdim 64|--path sm80 --hdim 128 --causal|--path sm80 --hdim 128 --softcap 30|\
--path sm80 --hdim 128 --sinks|--path sm80 --hdim 128 --mask window:256,0|--path sm80 --hdim 256 --causal|\
--path sm80 --hdim 96 --score-mod $work/score_mod.cuh|--path sm80 --hdim 128 --mask-mod $work/mask_mod.cuh|\
--path sm80 --hdim 128 --seqlen-q 1 --seqlen-k 8192 --splits 4"
fi
IFS='|' read -r -a configs <<<"${CONFIGS:-$default_configs}"

# sass CLI FLAGS OUT: the cubin's SASS without the header, and the spill line.
sass() {
  local cli=$1 flags=$2 out=$3
  # shellcheck disable=SC2086
  FLASHJIT_DB=$out.db "$cli" compile --arch "$arch" --pass "$pass" $flags -o "$out.cubin" \
    >"$out.log" 2>&1 || { echo "compile failed: $(tail -n 1 "$out.log")"; return 1; }
  "$cuobjdump" -sass "$out.cubin" | grep -E '^\s+/\*[0-9a-f]{4}\*/|Function :' >"$out.sass"
  sed -n 's/^spills *//p' "$out.log"
}
# The instructions without addresses, encodings and register numbers, sorted.
normalized() {
  sed -E 's@^ *\/\*[0-9a-f]+\*\/ *@@; s@ *\/\*.*@@; s@\bU?R[0-9]+\b@R@g; s@\bU?P[0-6]\b@P@g' "$1" | sort
}
status=0
for flags in "${configs[@]}"; do
  a=$(sass "$old" "$flags" "$work/a") || { echo "$flags | old: $a"; status=1; continue; }
  b=$(sass "$new" "$flags" "$work/b") || { echo "$flags | new: $b"; status=1; continue; }
  label=${flags//$work\//}
  if cmp -s "$work/a.sass" "$work/b.sass"; then
    echo "same    | $label"
  elif cmp -s <(normalized "$work/a.sass") <(normalized "$work/b.sass"); then
    # The same instructions, each as often, with other register numbers or
    # in another order: what a change of ptxas's allocation order does.
    echo "renamed | $label | $(grep -c '/\*' "$work/a.sass") instructions, the same multiset up to register names"
  else
    status=1
    echo "DIFFERS | $label | $(grep -c '/\*' "$work/a.sass") -> $(grep -c '/\*' "$work/b.sass") instructions | spills $a -> $b"
  fi
done
rm -rf "$work"
exit $status
