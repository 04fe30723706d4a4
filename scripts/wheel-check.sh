#!/usr/bin/env bash
# Builds the Python wheel (pyproject.toml: scikit-build-core, from PyPI),
# checks that it holds the library and the command, installs it with
# --no-deps into a fresh virtual environment and, from a folder outside the
# repository with no FLASHJIT_* variable set, imports flashjit and runs
# flashjit.query (needs no GPU and no torch). Used by .ci/run; the wheel is
# left in build-wheel/dist/ (the GPU machine installs it the same way).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=$root/build-wheel
rm -rf "$out" "$root/build-pywheel"
mkdir -p "$out/dist"

if ! python3 -m pip --version >/dev/null 2>&1 || ! python3 -m venv --help >/dev/null 2>&1; then
  if [ "$(id -u)" -eq 0 ]; then
    apt-get update -qq && apt-get install -y -qq python3-pip python3-venv >/dev/null
  else
    echo "wheel-check: python3 needs pip and venv (apt-get install python3-pip python3-venv)" >&2
    exit 1
  fi
fi

# Its CMake folder at the depth of build/, so that ccache (.ci/run) finds the
# Release build's objects under relative paths.
python3 -m pip wheel . --no-deps -w "$out/dist" --config-settings=build-dir="$root/build-pywheel" \
  >"$out/pip-wheel.log" 2>&1 || {
  tail -n 40 "$out/pip-wheel.log"
  echo "wheel-check: pip wheel failed (log: $out/pip-wheel.log)" >&2
  exit 1
}
wheel=$(ls "$out"/dist/flashjit-*.whl)
echo "wheel-check: built $(basename "$wheel") ($(du -h "$wheel" | cut -f1))"
python3 - "$wheel" <<'PY'
import sys, zipfile
names = {i.filename: i for i in zipfile.ZipFile(sys.argv[1]).infolist()}
for needed in ("flashjit/__init__.py", "flashjit/libflashjit.so", "flashjit/bin/flashjit"):
    assert needed in names, f"{needed} is missing from the wheel: {sorted(names)}"
mode = names["flashjit/bin/flashjit"].external_attr >> 16
assert mode & 0o111, f"flashjit/bin/flashjit is not executable in the wheel ({oct(mode)})"
print("wheel-check: the wheel holds the package, libflashjit.so and bin/flashjit")
PY

python3 -m venv "$out/venv"
"$out/venv/bin/python" -m pip install --no-deps --no-index -q "$wheel"
cd "$(mktemp -d)"
env -u FLASHJIT_LIB -u FLASHJIT_CLI -u PYTHONPATH FLASHJIT_DB="$out/query.db" \
  "$out/venv/bin/python" - <<'PY'
import os
import flashjit
assert flashjit.__file__.startswith(os.environ.get("VIRTUAL_ENV", "")) or "site-packages" in \
    flashjit.__file__, flashjit.__file__
print("wheel-check: imported", flashjit.__file__, "version", flashjit.version())
r = flashjit.query(arch="sm_90a", heads=32, heads_kv=8, seqlen=4096, hdim=128, causal=True)
assert r["kernel_id"].startswith("fwd_sm90_bf16_hdqk128"), r["kernel_id"]
print("wheel-check: flashjit.query ->", r["kernel_id"])
PY
