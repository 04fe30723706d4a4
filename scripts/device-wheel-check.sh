#!/usr/bin/env bash
# On the GPU machine, from the repository root: installs the wheel built here
# (scripts/wheel-check.sh leaves it in build-wheel/dist/; build-device-bundle.sh
# copies it to .device/wheel/) with --no-deps into a fresh virtual environment
# that sees the system's PyTorch, hides the CUDA toolkit's NVRTC (each
# libnvrtc file the loader could find is covered by /dev/null in a private
# mount namespace), and from a folder outside the repository, with no
# FLASHJIT_* variable but the test database set, imports the installed
# flashjit, shows that it compiled with the NVRTC pip installed beside
# PyTorch, and runs the Python tests against it.
#   TESTS="test_attention.py test_torch_compile.py"   the test files to run
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
root=$PWD
wheel=$(ls "$root"/.device/wheel/flashjit-*.whl 2>/dev/null | head -n 1)
if [ -z "$wheel" ]; then
  echo "device-wheel-check: no wheel in .device/wheel/ (scripts/wheel-check.sh, then" \
       "scripts/build-device-bundle.sh)" >&2
  exit 2
fi
TESTS=${TESTS:-test_attention.py test_varlen.py test_kvcache.py test_modifiers.py test_torch_compile.py}

if [ "${FLASHJIT_IN_NAMESPACE:-0}" != 1 ]; then
  # Re-run inside a private mount namespace, so the covering mounts vanish
  # with it and the machine's files are never touched.
  exec unshare --mount --propagation private env FLASHJIT_IN_NAMESPACE=1 bash "$0" "$@"
fi

nvrtc_files=$( (ls /usr/local/cuda*/lib64/libnvrtc* /usr/local/cuda*/targets/*/lib/libnvrtc* 2>/dev/null
                ldconfig -p | awk '/libnvrtc/ {print $NF}') | xargs -r -n1 readlink -f | sort -u)
for f in $nvrtc_files; do
  case $f in *site-packages*|*dist-packages*) continue ;; esac
  mount --bind /dev/null "$f" || { echo "device-wheel-check: cannot cover $f" >&2; exit 2; }
  echo "hidden: $f"
done
if python3 -c 'import ctypes; ctypes.CDLL("libnvrtc.so.13")' 2>/dev/null; then
  echo "device-wheel-check: the toolkit's libnvrtc.so.13 is still loadable" >&2
  exit 2
fi

venv=$(mktemp -d /tmp/flashjit-venv.XXXXXX)
python3 -m venv --system-site-packages --without-pip "$venv" || exit 2
# PyTorch may live in an environment of its own rather than the system's
# (python3 itself a virtual environment's): the new one sees it through a
# .pth file naming the folder torch is imported from.
purelib=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
if ! "$venv/bin/python" -c 'import torch' 2>/dev/null; then
  python3 -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))' \
    >"$purelib/system-torch.pth" || exit 2
  echo "PyTorch from: $(cat "$purelib/system-torch.pth")"
fi
if ! python3 -m pip --python "$venv/bin/python" install --no-deps --no-index -q "$wheel"; then
  # A pip older than --python (22.3): into the environment's folder directly.
  python3 -m pip install --no-deps --no-index -q --target "$purelib" "$wheel" || exit 2
fi
work=$(mktemp -d /tmp/flashjit-wheel-run.XXXXXX)
cp -r "$root/tests/python" "$work/tests"
cd "$work" || exit 2
unset FLASHJIT_LIB FLASHJIT_CLI FLASHJIT_NVRTC CUDA_HOME PYTHONPATH
export FLASHJIT_DB=$work/flashjit.db FLASHJIT_TEST_INSTALLED=1 PYTHONUNBUFFERED=1

"$venv/bin/python" - <<'PY' || exit 1
import torch, flashjit
q = torch.randn(1, 64, 2, 64, device="cuda", dtype=torch.bfloat16)
out = flashjit.attention(q, q, q, causal=True)
torch.cuda.synchronize()
nvrtc = sorted({line.split()[-1] for line in open("/proc/self/maps") if "libnvrtc" in line})
print("installed flashjit:", flashjit.__file__)
print("NVRTC loaded:", nvrtc, "| compiles:", flashjit.compile_count())
assert flashjit.compile_count() >= 1, "nothing was compiled"
assert nvrtc and all("site-packages" in p or "dist-packages" in p for p in nvrtc), nvrtc
assert "site-packages" in flashjit.__file__ and "/tmp/flashjit-venv" in flashjit.__file__
PY

failed=0
for t in $TESTS; do
  echo "===== $t (installed wheel, toolkit NVRTC hidden)"
  "$venv/bin/python" "tests/$t" 2>&1 | tail -n 6
  [ "${PIPESTATUS[0]}" -eq 0 ] || failed=$((failed + 1))
done
echo "device-wheel-check: $failed test file(s) failed"
exit $((failed > 0))
