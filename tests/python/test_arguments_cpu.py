"""FlashAttention-3's arguments of flashjit's Python calls without a GPU (run
by ctest as python_arguments_cpu): deterministic, num_splits and pack_gqa
are refused by name when wrong, before any GPU work, and carried into each
call's flashjit_config (the forward's splits and pack_gqa, the backward's
deterministic) on the eager path, through the torch.compile branch of the
entry points and through the custom ops' registered backwards.

The tensors are fake (FakeTensorMode): shapes, dtypes and devices without
memory, so neither a GPU, a driver nor libflashjit.so is needed. The eager
entry points check that their tensors are CUDA tensors: fake CUDA tensors
there. The ops run their fake implementations on any device, and autograd
runs their registered backwards on fake CPU tensors (a fake CUDA tensor
would need a CUDA context there). Needs torch; without it the test is
skipped (exit 77, ctest's SKIP_RETURN_CODE).

    python3 tests/python/test_arguments_cpu.py
"""
import contextlib
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_env import flashjit, run_tests, torch  # noqa: E402  (this checkout's python/ first)

SKIP = 77  # ctest's SKIP_RETURN_CODE for this test

DETERMINISTIC = ("deterministic must be True or False (True: the backward sums dQ without "
                 "atomics, for bit-identical gradients), got ")
SPLITS_RANGE = "num_splits must be in [0, 256] (0: the library chooses, 1: off), got "
SPLITS_TYPE = "num_splits must be an int (0: the library chooses, 1: off), got "
PACK = "pack_gqa must be None (the library chooses), True or False, got "
CHUNK_RANGE = "attention_chunk must be 0 (off) or a chunk length > 0, got "
CHUNK_TYPE = "attention_chunk must be an int (0: off), got "


@contextlib.contextmanager
def fake(device):
    """Fake tensors; a fake tensor's data_ptr() (the argument blocks read it)
    is 0, with a deprecation warning that is expected here."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*data pointer of FakeTensor.*")
        yield lambda *shape, dtype=torch.bfloat16: torch.empty(*shape, dtype=dtype,
                                                               device=device)


@contextlib.contextmanager
def no_path_variables():
    """$FLASHJIT_KERNEL_PATH and $FLASHJIT_BACKWARD_PATH unset (they add a
    path to the configs)."""
    names = ("FLASHJIT_KERNEL_PATH", "FLASHJIT_BACKWARD_PATH")
    saved = {n: os.environ.pop(n) for n in names if n in os.environ}
    try:
        yield
    finally:
        os.environ.update(saved)


@contextlib.contextmanager
def tracing():
    """The entry points' torch.compile branch (they call the custom ops
    while torch.compiler.is_compiling()), without dynamo."""
    real = torch.compiler.is_compiling
    torch.compiler.is_compiling = lambda: True
    try:
        yield
    finally:
        torch.compiler.is_compiling = real


def recorded_op_calls():
    """A dispatch mode that records every flashjit custom op call as (name,
    {argument: value}) in its `calls`, the schema's defaults filled in."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Recorder(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.calls = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func.namespace == "flashjit":
                values = {}
                for i, a in enumerate(func._schema.arguments):
                    values[a.name] = (args[i] if i < len(args) else
                                      kwargs[a.name] if a.name in kwargs else a.default_value)
                self.calls.append((func._schema.name.split("::")[1], values))
            return func(*args, **kwargs)

    return Recorder()


def _expect(exc, message, fn):
    try:
        fn()
    except exc as e:
        assert str(e) == message, f"message {str(e)!r}, expected {message!r}"
        return
    except Exception as e:  # the wrong type: named in the failure
        raise AssertionError(f"{type(e).__name__}: {e} (expected {exc.__name__}: {message})")
    raise AssertionError(f"accepted (expected {exc.__name__}: {message})")


def _bad_values(prefix, call, splits=True, deterministic=True, chunk=True):
    """(label, exception, exact message, thunk) of each bad value for `call`
    (a function of the keyword arguments)."""
    cases = [("pack_gqa 'on'", TypeError, prefix + PACK + "'on'", lambda: call(pack_gqa="on")),
             ("pack_gqa 1", TypeError, prefix + PACK + "1", lambda: call(pack_gqa=1))]
    if splits:
        cases += [
            ("num_splits -1", ValueError, prefix + SPLITS_RANGE + "-1",
             lambda: call(num_splits=-1)),
            ("num_splits 257", ValueError, prefix + SPLITS_RANGE + "257",
             lambda: call(num_splits=257)),
            ("num_splits 2.0", TypeError, prefix + SPLITS_TYPE + "float",
             lambda: call(num_splits=2.0)),
            ("num_splits True", TypeError, prefix + SPLITS_TYPE + "bool",
             lambda: call(num_splits=True))]
    if deterministic:
        cases += [
            ("deterministic 1", TypeError, prefix + DETERMINISTIC + "1",
             lambda: call(deterministic=1)),
            ("deterministic None", TypeError, prefix + DETERMINISTIC + "None",
             lambda: call(deterministic=None)),
            ("deterministic 'yes'", TypeError, prefix + DETERMINISTIC + "'yes'",
             lambda: call(deterministic="yes"))]
    if chunk:
        cases += [
            ("attention_chunk -1", ValueError, prefix + CHUNK_RANGE + "-1",
             lambda: call(attention_chunk=-1)),
            ("attention_chunk 2.0", TypeError, prefix + CHUNK_TYPE + "float",
             lambda: call(attention_chunk=2.0)),
            ("attention_chunk True", TypeError, prefix + CHUNK_TYPE + "bool",
             lambda: call(attention_chunk=True))]
    return cases


def _check_cases(cases):
    failures = []
    for label, exc, message, thunk in cases:
        try:
            _expect(exc, message, thunk)
        except AssertionError as e:
            failures.append(f"{label}: {e}")
    assert not failures, "\n".join(failures)
    return len(cases)


def test_bad_values_are_refused_by_name():
    """Eager calls: each entry point refuses a wrong num_splits, pack_gqa or
    deterministic with a message naming it, before any GPU work, for grad
    and no-grad calls alike, and for a packed batch with no query (which
    launches nothing) too."""
    A, V, K = "flashjit.attention: ", "flashjit.attention_varlen: ", \
        "flashjit.attention_with_kvcache: "
    with fake("cuda") as empty:
        q, k = empty(2, 5, 8, 64), empty(2, 7, 2, 64)
        qg = empty(2, 5, 8, 64).requires_grad_()
        qv, kv = empty(10, 8, 64), empty(12, 2, 64)
        cu = torch.zeros(3, dtype=torch.int32, device="cuda")
        table = torch.zeros(2, 1, dtype=torch.int32, device="cuda")
        used = torch.zeros(2, dtype=torch.int32, device="cuda")
        pages = empty(4, 16, 2, 64)
        cache = empty(2, 32, 2, 64)
        cases = _bad_values(A, lambda **kw: flashjit.attention(q, k, k, **kw))
        cases += [(label + " (grad)", exc, message, thunk) for label, exc, message, thunk in
                  _bad_values(A, lambda **kw: flashjit.attention(qg, k, k, **kw))]
        cases += _bad_values(A, lambda **kw: flashjit.attention(
            q, k, k, score_mod="return score;", **kw))
        cases += _bad_values(V, lambda **kw: flashjit.attention_varlen(
            qv, kv, kv, cu, cu, 5, 6, **kw))
        cases += _bad_values(V, lambda **kw: flashjit.attention_varlen(
            qv[:0], kv, kv, cu, cu, 0, 6, **kw))
        cases += _bad_values(V, lambda **kw: flashjit.attention_varlen(
            qv, pages, pages, cu, None, 5, 16, block_table=table, seqused_k=used, **kw))
        cases += _bad_values(K, lambda **kw: flashjit.attention_with_kvcache(
            q, cache, cache, cache_seqlens=3, **kw), deterministic=False)
        count = _check_cases(cases)
    print(f"bad values refused: {count}")


def test_bad_values_are_refused_while_tracing():
    """The torch.compile branch checks the values before converting them for
    the ops (int() and the pack_gqa code would take 2.0 for 2 and 'on' for
    True)."""
    A, V, K = "flashjit.attention: ", "flashjit.attention_varlen: ", \
        "flashjit.attention_with_kvcache: "
    with fake("cpu") as empty, tracing():
        q, k = empty(2, 5, 8, 64), empty(2, 7, 2, 64)
        qv, kv = empty(10, 8, 64), empty(12, 2, 64)
        cu = torch.zeros(3, dtype=torch.int32)
        table = torch.zeros(2, 1, dtype=torch.int32)
        pages = empty(4, 16, 2, 64)
        # (A chunk is refused while tracing whatever its value: below.)
        cases = _bad_values(A, lambda **kw: flashjit.attention(q, k, k, **kw), chunk=False)
        cases += _bad_values(V, lambda **kw: flashjit.attention_varlen(
            qv, kv, kv, cu, cu, 5, 6, **kw), chunk=False)
        cases += _bad_values(V, lambda **kw: flashjit.attention_varlen(
            qv, pages, pages, cu, None, 5, 16, block_table=table, **kw), chunk=False)
        cases += _bad_values(K, lambda **kw: flashjit.attention_with_kvcache(
            q, k, k, cache_seqlens=3, **kw), deterministic=False, chunk=False)
        untraceable = " attention_chunk is not traceable by torch.compile yet; call it eagerly"
        cases += [
            ("attention_chunk traced", NotImplementedError, A + untraceable.lstrip(),
             lambda: flashjit.attention(q, k, k, attention_chunk=64)),
            ("attention_chunk traced (varlen)", NotImplementedError,
             V + untraceable.lstrip(),
             lambda: flashjit.attention_varlen(qv, kv, kv, cu, cu, 5, 6, attention_chunk=64)),
            ("attention_chunk traced (kvcache)", NotImplementedError,
             K + untraceable.lstrip(),
             lambda: flashjit.attention_with_kvcache(q, k, k, cache_seqlens=3,
                                                     attention_chunk=64))]
        count = _check_cases(cases)
    print(f"bad values refused while tracing: {count}")


def test_calls_carry_the_arguments():
    """Each prepared call's forward config holds num_splits and pack_gqa
    (None: nothing asked, the library chooses), and its backward config
    the deterministic mode, with $FLASHJIT_BACKWARD_PATH's family when set."""
    from flashjit import _capi, _launch, dense, kvcache, varlen
    ON, OFF = _capi.PACK_GQA_ON, _capi.PACK_GQA_OFF
    with fake("cuda") as empty, no_path_variables():
        q, k = empty(2, 5, 8, 64), empty(2, 7, 2, 64)
        call = dense.prepare_call(torch, q, k, k, False, (-1, -1), 0.0, None)
        assert call.config is None and call.deterministic is False
        assert _launch.backward_config(call.deterministic) is None
        call = dense.prepare_call(torch, q, k, k, True, (-1, -1), 0.0, None, 3, False,
                                  deterministic=True)
        assert (call.config.splits, call.config.pack_gqa) == (3, OFF), call.config
        assert call.deterministic is True
        config = _launch.backward_config(call.deterministic)
        assert (config.deterministic, config.path, config.splits) == (1, _capi.PATH_AUTO, 0)

        qv, kv = empty(10, 8, 64), empty(12, 2, 64)
        cu = torch.zeros(3, dtype=torch.int32, device="cuda")
        call = varlen.prepare_call(torch, qv, kv, kv, cu, cu, 5, 6, None, True, (-1, -1), 0.0)
        assert call.config is None and call.deterministic is False
        call = varlen.prepare_call(torch, qv, kv, kv, cu, cu, 5, 6, None, True, (-1, -1), 0.0,
                                   num_splits=1, pack_gqa=True, deterministic=True)
        assert (call.config.splits, call.config.pack_gqa) == (1, ON), call.config
        assert call.deterministic is True and call.varlen is not None
        call = varlen.prepare_call(torch, qv, kv, kv, cu, cu, 5, 6, None, True, (-1, -1), 0.0,
                                   num_splits=3, pack_gqa=False)
        assert (call.config.splits, call.config.pack_gqa) == (3, OFF), call.config

        pages = empty(4, 16, 2, 64)
        table = torch.zeros(2, 1, dtype=torch.int32, device="cuda")
        used = torch.zeros(2, dtype=torch.int32, device="cuda")
        call = varlen.prepare_call(torch, qv, pages, pages, cu, None, 5, 16, None, True,
                                   (-1, -1), 0.0, block_table=table, seqused_k=used,
                                   num_splits=3, pack_gqa=False)
        assert call.cache is not None and call.problem.page_size == 16
        assert (call.config.splits, call.config.pack_gqa) == (3, OFF), call.config

        cache = empty(2, 32, 2, 64)
        call = kvcache.prepare_call(torch, q, cache, cache, None, None, 3, None, None, False,
                                    (-1, -1), 0.0, 2, pack_gqa=True)
        assert (call.config.splits, call.config.pack_gqa) == (2, ON), call.config
        call = kvcache.prepare_call(torch, q, cache, cache, None, None, 3, None, None, False,
                                    (-1, -1), 0.0, 0)
        assert call.config is None

        # The pinned family joins the deterministic mode (and stands alone).
        os.environ["FLASHJIT_BACKWARD_PATH"] = "sm80"
        config = _launch.backward_config(True)
        assert (config.deterministic, config.path) == (1, _capi.PATH_SM80)
        config = _launch.backward_config(False)
        assert (config.deterministic, config.path) == (0, _capi.PATH_SM80)
        del os.environ["FLASHJIT_BACKWARD_PATH"]


def test_warm_key_keeps_types_apart():
    """Values equal across types (2.0 and 2, 1 and True) make different
    warm-call keys: an entry stored for the right type never serves the
    wrong one, which the full path refuses by name."""
    from flashjit import _warm
    with fake("cuda") as empty:
        q, k = empty(2, 5, 8, 64), empty(2, 7, 2, 64)
        keys = {}
        for label, splits, pack, det in (("right", 2, True, True),
                                         ("float splits", 2.0, True, True),
                                         ("int pack", 2, 1, True), ("int det", 2, True, 1)):
            key, served = _warm.serve(torch, q, k, k, False, (-1, -1), 0.0, None, splits, pack,
                                      det, False)
            assert served is None and key is not None, label
            keys[label] = key
    assert len(set(keys.values())) == len(keys), keys


def test_ops_carry_the_arguments_through_tracing_and_autograd():
    """While tracing, each entry point calls its op with num_splits,
    pack_gqa (the op's code: 0 auto, 1 pack, 2 not) and deterministic; the
    forward ops' registered backwards pass deterministic on to the backward
    ops, and return a gradient slot per op argument (autograd checks the
    count)."""
    with fake("cpu") as empty, tracing():
        q = empty(2, 5, 8, 64).requires_grad_()
        k = empty(2, 7, 2, 64).requires_grad_()
        cu = torch.zeros(3, dtype=torch.int32)
        with recorded_op_calls() as recorder:
            flashjit.attention(q, k, k, causal=True, num_splits=2, pack_gqa=False,
                               deterministic=True).sum().backward()
            flashjit.attention(q, k, k).sum().backward()
            flashjit.attention_varlen(q[0], k[0], k[0], cu, cu, 5, 7, num_splits=3,
                                      pack_gqa=True, deterministic=True).sum().backward()
            flashjit.attention_varlen(q[0], k[0], k[0], cu, cu, 5, 7).sum().backward()
            with torch.no_grad():
                pages = empty(4, 16, 2, 64)
                flashjit.attention_varlen(q[0], pages, pages, cu, None, 5, 16,
                                          block_table=torch.zeros(2, 1, dtype=torch.int32),
                                          seqused_k=torch.zeros(2, dtype=torch.int32),
                                          num_splits=3, pack_gqa=True)
                flashjit.attention_with_kvcache(q, k, k, cache_seqlens=3, num_splits=4,
                                                pack_gqa=False)
        assert q.grad is not None and k.grad is not None
    got = [(name, {a: v.get(a) for a in ("num_splits", "pack_gqa", "deterministic") if a in v})
           for name, v in recorder.calls]
    expected = [
        ("attention_fwd", dict(num_splits=2, pack_gqa=2, deterministic=True)),
        ("attention_bwd", dict(deterministic=True)),
        ("attention_fwd", dict(num_splits=0, pack_gqa=0, deterministic=False)),
        ("attention_bwd", dict(deterministic=False)),
        ("attention_varlen_fwd", dict(num_splits=3, pack_gqa=1, deterministic=True)),
        ("attention_varlen_bwd", dict(deterministic=True)),
        ("attention_varlen_fwd", dict(num_splits=0, pack_gqa=0, deterministic=False)),
        ("attention_varlen_bwd", dict(deterministic=False)),
        ("attention_varlen_kvcache", dict(num_splits=3, pack_gqa=1)),
        ("attention_with_kvcache", dict(num_splits=4, pack_gqa=2)),
    ]
    assert got == expected, f"\n{got}\n!=\n{expected}"


_cpu_kernel_calls = []


def _register_cpu_kernels():
    """CPU kernels for the ops (zeros of the outputs' shapes) that record the
    knobs they are called with: torch.compile then runs a traced call end to
    end on the CPU. Registered once per process (this test's)."""
    if _cpu_kernel_calls:
        return
    _cpu_kernel_calls.append(None)  # registered
    record = _cpu_kernel_calls.append
    register = torch.library.register_kernel

    @register("flashjit::attention_fwd", "cpu")
    def _(q, k, v, causal, window_left, window_right, softcap, softmax_scale, num_splits,
          pack_gqa, q_descale=None, k_descale=None, v_descale=None, out_dtype=None,
          deterministic=False):
        record(("attention_fwd", num_splits, pack_gqa, deterministic))
        b, sq, hq, _ = q.shape
        return (q.new_zeros((b, sq, hq, v.shape[3])),
                q.new_zeros((b, hq, sq), dtype=torch.float32))

    @register("flashjit::attention_bwd", "cpu")
    def _(dout, q, k, v, out, lse, causal, window_left, window_right, softcap, softmax_scale,
          deterministic=False):
        record(("attention_bwd", deterministic))
        return torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)

    @register("flashjit::attention_varlen_fwd", "cpu")
    def _(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal,
          window_left, window_right, softcap, softmax_scale, q_descale=None, k_descale=None,
          v_descale=None, out_dtype=None, num_splits=0, pack_gqa=0, deterministic=False):
        record(("attention_varlen_fwd", num_splits, pack_gqa, deterministic))
        total_q, hq, _ = q.shape
        return (q.new_zeros((total_q, hq, v.shape[2])),
                q.new_zeros((hq, total_q), dtype=torch.float32))

    @register("flashjit::attention_varlen_bwd", "cpu")
    def _(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
          causal, window_left, window_right, softcap, softmax_scale, deterministic=False):
        record(("attention_varlen_bwd", deterministic))
        return torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)

    @register("flashjit::attention_with_kvcache", "cpu")
    def _(q, k_cache, v_cache, k, v, cache_seqlens, block_table, softmax_scale, causal,
          window_left, window_right, softcap, num_splits, q_descale=None, k_scale=None,
          v_scale=None, out_dtype=None, pack_gqa=0):
        record(("attention_with_kvcache", num_splits, pack_gqa))
        b, sq, hq, _ = q.shape
        return (q.new_zeros((b, sq, hq, v_cache.shape[3])),
                q.new_zeros((b, hq, sq), dtype=torch.float32))


def test_torch_compile_carries_the_arguments():
    """torch.compile(fullgraph=True) of calls with the knobs, forward and
    backward (aot_eager: the traced graphs run as they are, on the CPU
    kernels of _register_cpu_kernels): the ops run with num_splits, the
    pack_gqa code and deterministic, the backward ops with deterministic."""
    _register_cpu_kernels()
    del _cpu_kernel_calls[1:]
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 5, 8, 64, generator=g).bfloat16().requires_grad_()
    k = torch.randn(2, 7, 2, 64, generator=g).bfloat16().requires_grad_()
    cu = torch.tensor([0, 2, 5], dtype=torch.int32)
    cu_k = torch.tensor([0, 3, 7], dtype=torch.int32)

    def dense(q, k, v):
        return flashjit.attention(q, k, v, causal=True, num_splits=2, pack_gqa=False,
                                  deterministic=True)

    def packed(q, k, v):
        return flashjit.attention_varlen(q, k, v, cu, cu_k, 3, 4, num_splits=3, pack_gqa=True,
                                         deterministic=True)

    def cache(q, k, v):
        return flashjit.attention_with_kvcache(q, k, v, cache_seqlens=3, pack_gqa=True)

    for fn, args in ((dense, (q, k, k)), (packed, (q[0], k[0], k[0]))):
        torch.compile(fn, backend="aot_eager", fullgraph=True)(*args).float().sum().backward()
    with torch.no_grad():
        torch.compile(cache, backend="aot_eager", fullgraph=True)(q, k, k)
    expected = [("attention_fwd", 2, 2, True), ("attention_bwd", True),
                ("attention_varlen_fwd", 3, 1, True), ("attention_varlen_bwd", True),
                ("attention_with_kvcache", 0, 1)]
    assert _cpu_kernel_calls[1:] == expected, f"{_cpu_kernel_calls[1:]} != {expected}"


def test_op_schemas_default_every_new_argument():
    """The arguments added to the ops have defaults (calls and opcheck
    arguments of the earlier schemas keep working), and an op's pack_gqa
    code outside 0..2 is refused by name."""
    from flashjit import ops
    tails = {"attention_fwd": "ScalarType? out_dtype=None, bool deterministic=False)",
             "attention_bwd": "float? softmax_scale, bool deterministic=False)",
             "attention_varlen_fwd": "ScalarType? out_dtype=None, SymInt num_splits=0, "
                                     "SymInt pack_gqa=0, bool deterministic=False)",
             "attention_varlen_bwd": "float? softmax_scale, bool deterministic=False)",
             "attention_with_kvcache": "ScalarType? out_dtype=None, SymInt pack_gqa=0)",
             "attention_varlen_kvcache": "ScalarType? out_dtype=None, SymInt num_splits=0, "
                                         "SymInt pack_gqa=0)"}
    for name, tail in tails.items():
        schema = str(getattr(torch.ops.flashjit, name).default._schema)
        assert tail + " ->" in schema, schema
    _expect(ValueError, "flashjit.attention_varlen: pack_gqa code 3 is not 0 (the library "
                        "chooses), 1 (pack) or 2 (do not pack)",
            lambda: ops._packing("flashjit.attention_varlen", 3))
    assert [ops._packing("x", c) for c in (0, 1, 2)] == [None, True, False]
    assert [ops.pack_code(p) for p in (None, True, False)] == [0, 1, 2]


def skip_reason():
    """Why these tests cannot run here (no GPU needed), or None."""
    if torch is None:
        return "torch is not installed"
    if not hasattr(torch.library, "custom_op"):
        return f"torch {torch.__version__} has no torch.library.custom_op (2.4+)"
    return None


if __name__ == "__main__":
    sys.exit(run_tests(globals(), skip=skip_reason, skip_status=SKIP))
