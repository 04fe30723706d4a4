"""What the GPU-side Python tests share: the binding from this checkout's
python/ (or the installed one, FLASHJIT_TEST_INSTALLED=1), a private
tuning/cubin database (the tests see the heuristic configs and never a stale
entry of the user's), torch when installed, the reason to skip where
torch, a CUDA device or the library is missing, and a record of the configs
the binding passes to the library (recorded_configs)."""
import contextlib
import os
import sys
import tempfile
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# FLASHJIT_TEST_INSTALLED=1: test the flashjit that pip installed (the
# wheel's), not this checkout's python/ (scripts/device-wheel-check.sh).
if os.environ.get("FLASHJIT_TEST_INSTALLED", "") in ("", "0"):
    sys.path.insert(0, os.path.join(REPO, "python"))
os.environ.setdefault("FLASHJIT_DB", os.path.join(tempfile.mkdtemp(prefix="flashjit-test-"), "test.db"))

try:
    import torch
except ImportError:  # pragma: no cover - depends on the machine
    torch = None

import flashjit  # noqa: E402  (after sys.path)


def skip_reason():
    """Why the GPU tests cannot run here, or None."""
    if torch is None:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA device"
    try:
        flashjit.version()
    except flashjit.LibraryNotFound as e:
        return str(e)
    return None


def require_gpu():
    reason = skip_reason()
    if reason:
        raise unittest.SkipTest(reason)  # pytest reports this as a skip too


# The Python arguments that choose a kernel, never the attention: a
# reference computed from a call's keyword arguments drops them.
KERNEL_KNOBS = ("num_splits", "pack_gqa", "deterministic")


def reference_kw(kw):
    """A call's keyword arguments without KERNEL_KNOBS."""
    return {name: value for name, value in kw.items() if name not in KERNEL_KNOBS}


@contextlib.contextmanager
def recorded_configs():
    """Records the flashjit_config of every C call the binding makes inside
    (not the warm-call cache's, which bypasses _launch.run): a list of
    (entry point, {field: value} or None for no config), so that a test
    sees that an argument reached the library, not only that the result
    was right."""
    from flashjit import _launch
    real = _launch.run
    seen = []

    def spy(torch_, device, who, symbol, problem, args, blocks, config):
        fields = None if config is None else {
            name: getattr(config, name) for name, _ in config._fields_}
        seen.append((symbol, fields))
        return real(torch_, device, who, symbol, problem, args, blocks, config)

    _launch.run = spy
    try:
        yield seen
    finally:
        _launch.run = real


def config_field(config, name):
    """A recorded config's field; 0 (the library's default) without one."""
    return 0 if config is None else config[name]


def run_tests(namespace, skip=skip_reason, skip_status=0):
    """Runs every test_* function of `namespace` (a test module's globals) in
    name order, printing ok / FAIL with the traceback for each, then the
    count; the exit status. One SKIP line, and skip_status, where skip()
    gives a reason the tests cannot run (by default: no GPU tests here)."""
    import traceback
    reason = skip()
    if reason:
        print(f"SKIP: {reason}")
        return skip_status
    failed = 0
    for name, fn in sorted(namespace.items()):
        if name.startswith("test_") and callable(fn):
            try:
                fn()
                print(f"ok   {name}")
            except Exception:
                failed += 1
                print(f"FAIL {name}")
                traceback.print_exc()
    print(f"{failed} failed")
    return 1 if failed else 0


def transformers_missing():
    """Why Hugging Face transformers cannot serve the transformers tests
    (not installed, or older than 5), or None."""
    try:
        import transformers
    except ImportError:
        return "transformers is not installed"
    if int(transformers.__version__.split(".")[0]) < 5:
        return f"transformers {transformers.__version__} is older than 5"
    return None
