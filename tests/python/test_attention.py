"""flashjit.attention against an fp32 reference through torch, on the GPU.

Run with pytest, or directly: FLASHJIT_LIB=build/libflashjit.so python3 tests/python/test_attention.py
(-k SUBSTRING runs the tests whose name has it, --case SUBSTRING the shape cases whose
label has it, -x stops at the first failure, -v lists every case).
Skips cleanly (exit 0) where torch or a CUDA device is missing.

Criterion (FlashAttention's): max|out - ref| <= 2 * max|out_lowprec - ref| + 1e-5, where
ref is computed in fp32 from the same bf16/fp16 inputs and out_lowprec is the same
reference computed in the input dtype. Outputs are poisoned with NaN before every
launch (FLASHJIT_POISON_OUTPUT=1), so an element the kernel does not write fails.
"""
import math
import os
import sys
import tempfile
import traceback
import unittest

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(_REPO, "python"))
os.environ.setdefault("FLASHJIT_POISON_OUTPUT", "1")
# A private tuning/cubin database: the tests see the heuristic configs and
# never a stale entry of the user's.
os.environ.setdefault("FLASHJIT_DB", os.path.join(tempfile.mkdtemp(prefix="flashjit-test-"), "test.db"))

try:
    import torch
except ImportError:  # pragma: no cover - depends on the machine
    torch = None

import flashjit  # noqa: E402  (after sys.path)


def _skip_reason():
    if torch is None:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA device"
    try:
        flashjit.version()
    except flashjit.LibraryNotFound as e:
        return str(e)
    return None


def _require_gpu():
    reason = _skip_reason()
    if reason:
        raise unittest.SkipTest(reason)  # pytest reports this as a skip too


# ---- reference ---------------------------------------------------------------

def allowed_mask(seqlen_q, seqlen_k, causal, window, device):
    """[seqlen_q, seqlen_k] bool: True where query i may see key j. Bottom-right
    aligned: row i sits at key position i + seqlen_k - seqlen_q."""
    left, right = window
    if causal:
        right = 0
    i = torch.arange(seqlen_q, device=device).view(-1, 1) + (seqlen_k - seqlen_q)
    j = torch.arange(seqlen_k, device=device).view(1, -1)
    ok = torch.ones(seqlen_q, seqlen_k, dtype=torch.bool, device=device)
    if left >= 0:
        ok &= j >= i - left
    if right >= 0:
        ok &= j <= i + right
    return ok


def attention_ref(q, k, v, causal=False, window=(-1, -1), softcap=0.0, softmax_scale=None,
                  upcast=True):
    """(out in q's dtype, lse fp32 [b, h, sq]). upcast=False computes in the
    input dtype: the low-precision baseline of the tolerance."""
    dtype = q.dtype
    if upcast:
        q, k, v = q.float(), k.float(), v.float()
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    k = k.repeat_interleave(hq // hkv, dim=2)
    v = v.repeat_interleave(hq // hkv, dim=2)
    scale = 1.0 / math.sqrt(d) if softmax_scale is None else softmax_scale
    scores = torch.einsum("bthd,bshd->bhts", q * scale, k)
    if softcap > 0:
        scores = torch.tanh(scores / softcap) * softcap
    ok = allowed_mask(sq, sk, causal, window, q.device)
    scores = scores.masked_fill(~ok, float("-inf"))
    lse = torch.logsumexp(scores.float(), dim=-1)
    p = torch.softmax(scores, dim=-1)
    # Rows that see no key: FlashAttention writes zeros.
    p = p.masked_fill(~ok.any(dim=-1, keepdim=True), 0.0)
    out = torch.einsum("bhts,bshd->bthd", p, v)
    return out.to(dtype), lse


def make_inputs(b, sq, sk, hq, hkv, d, dv, dtype, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    def randn(*shape):
        return torch.randn(*shape, device="cuda", dtype=dtype, generator=g)
    return randn(b, sq, hq, d), randn(b, sk, hkv, d), randn(b, sk, hkv, dv)


def check(q, k, v, label="", lse_check=True, **kw):
    """Runs flashjit and both references; returns a failure message or None."""
    out, lse = flashjit.attention(q, k, v, return_lse=True, **kw)
    torch.cuda.synchronize()
    ref, ref_lse = attention_ref(q, k, v, **kw)
    low, _ = attention_ref(q, k, v, upcast=False, **kw)
    if out.shape != ref.shape:
        return f"{label}: output shape {tuple(out.shape)}, expected {tuple(ref.shape)}"
    if out.dtype != q.dtype:
        return f"{label}: output dtype {out.dtype}, expected {q.dtype}"
    nan = torch.isnan(out).sum().item()
    if nan:
        return f"{label}: {nan} of {out.numel()} outputs are NaN (unwritten or wrong)"
    err = (out.float() - ref.float()).abs().max().item()
    base = (low.float() - ref.float()).abs().max().item()
    bound = 2 * base + 1e-5
    if not err <= bound:
        return f"{label}: max|out-ref| {err:.3g} > {bound:.3g} (2 * low-precision error {base:.3g} + 1e-5)"
    if lse_check:
        if lse.shape != ref_lse.shape or lse.dtype != torch.float32:
            return f"{label}: lse {tuple(lse.shape)} {lse.dtype}, expected {tuple(ref_lse.shape)} float32"
        # Rows that see no key: O = 0 (checked above) and, as FlashAttention
        # writes, LSE = +inf.
        seen = torch.isfinite(ref_lse)
        lse_err = (lse[seen] - ref_lse[seen]).abs()
        tol = 1e-3 + 1e-3 * ref_lse[seen].abs()
        if seen.any() and not bool((lse_err <= tol).all()):
            return f"{label}: lse max error {lse_err.max().item():.3g} (tolerance 1e-3 + 1e-3*|lse|)"
        if not bool((lse[~seen] == float("inf")).all()):
            return f"{label}: rows that see no key must have lse +inf (FlashAttention's convention)"
    return None


def run_cases(cases):
    """cases: (label, kwargs-for-make_inputs, kwargs-for-attention). Collects every failure."""
    _require_gpu()
    failures = []
    for label, shape, kw in cases:
        if _FILTER and _FILTER not in label:
            continue
        try:
            q, k, v = make_inputs(**shape)
            msg = check(q, k, v, label=label, **kw)
        except Exception as e:  # one failing case must not hide the others
            msg = f"{label}: {type(e).__name__}: {e}"
        if msg:
            failures.append(msg)
            print("  FAIL", msg, flush=True)
            if _STOP_FIRST:
                break
        elif _VERBOSE:
            print("  ok  ", label, flush=True)
    assert not failures, f"{len(failures)} case(s) failed:\n" + "\n".join(failures)


def shape(b=2, sq=128, sk=None, hq=4, hkv=None, d=64, dv=None, dtype=None, seed=0):
    return dict(b=b, sq=sq, sk=sq if sk is None else sk, hq=hq, hkv=hq if hkv is None else hkv,
                d=d, dv=d if dv is None else dv, dtype=dtype or torch.bfloat16, seed=seed)


def label(s, kw):
    dt = "fp16" if s["dtype"] == torch.float16 else "bf16"
    extra = " ".join(f"{k}={v}" for k, v in kw.items())
    return (f"{dt} b={s['b']} sq={s['sq']} sk={s['sk']} hq={s['hq']} hkv={s['hkv']} "
            f"d={s['d']} dv={s['dv']} {extra}").strip()


def cases_of(items):
    return [(label(s, kw), s, kw) for s, kw in items]


# ---- tests -------------------------------------------------------------------

def test_head_dims_and_seqlens():
    _require_gpu()
    items = []
    for d in (32, 59, 64, 96, 111, 128, 256):
        for causal in (False, True):
            for sq in (1, 17, 113, 1023):
                items.append((shape(b=2, sq=sq, hq=4, d=d), dict(causal=causal)))
    run_cases(cases_of(items))


def test_seqlen_q_differs_from_seqlen_k():
    _require_gpu()
    items = []
    for d in (64, 128):
        for causal in (False, True):
            for sq, sk in ((1, 1023), (17, 113), (113, 17), (113, 1023), (1023, 113), (256, 2048)):
                items.append((shape(b=2, sq=sq, sk=sk, hq=4, d=d), dict(causal=causal)))
    run_cases(cases_of(items))


def test_gqa_mqa():
    _require_gpu()
    items = []
    for hq, hkv in ((8, 2), (8, 1), (6, 3)):
        for causal in (False, True):
            items.append((shape(b=2, sq=257, sk=513, hq=hq, hkv=hkv, d=128), dict(causal=causal)))
    run_cases(cases_of(items))


def test_windows():
    _require_gpu()
    items = []
    for d in (64, 128):
        for sq, sk in ((1023, 1023), (113, 1023), (1023, 113)):
            for window in ((64, 16), (0, 0), (128, -1), (-1, 32), (256, 0)):
                items.append((shape(b=1, sq=sq, sk=sk, hq=4, d=d), dict(window=window)))
            # causal with a window is window (left, 0)
            items.append((shape(b=1, sq=sq, sk=sk, hq=4, d=d), dict(causal=True, window=(100, 7))))
    run_cases(cases_of(items))


def test_softcap_and_scale():
    _require_gpu()
    items = []
    for causal in (False, True):
        items.append((shape(b=2, sq=1023, hq=4, d=128), dict(causal=causal, softcap=30.0)))
        items.append((shape(b=2, sq=113, sk=1023, hq=4, d=64), dict(causal=causal, softcap=5.0)))
        items.append((shape(b=2, sq=513, hq=4, d=128), dict(causal=causal, softmax_scale=0.3)))
    run_cases(cases_of(items))


def test_fp16():
    _require_gpu()
    items = []
    for d in (64, 111, 128, 256):
        for causal in (False, True):
            items.append((shape(b=2, sq=1023, hq=4, d=d, dtype=torch.float16), dict(causal=causal)))
    items.append((shape(b=1, sq=113, sk=1023, hq=8, hkv=2, d=128, dtype=torch.float16),
                  dict(window=(64, 8))))
    run_cases(cases_of(items))


def test_distinct_v_head_dim():
    """q/k and v head dims differ (the C API carries both). If the kernel path
    rejects it, the error must be a clean RuntimeError naming the problem."""
    _require_gpu()
    q, k, v = make_inputs(b=1, sq=257, sk=257, hq=4, hkv=4, d=128, dv=64, dtype=torch.bfloat16)
    try:
        flashjit.attention(q, k, v)
    except RuntimeError as e:
        assert str(e).startswith("flashjit.attention:"), str(e)
        print(f"  note: distinct v head dim rejected: {e}", flush=True)
        return
    run_cases(cases_of([(shape(b=1, sq=257, hq=4, d=128, dv=64), {}),
                        (shape(b=1, sq=257, hq=4, d=64, dv=128), dict(causal=True))]))


def test_strided_inputs():
    """Views need no copies where strides allow, and get one where they do not."""
    _require_gpu()
    torch.manual_seed(0)
    b, s, h, d = 2, 333, 4, 128
    failures = []

    def run(name, q, k, v, **kw):
        msg = check(q, k, v, label=name, **kw)
        if msg:
            failures.append(msg)

    # packed qkv: [b, s, 3, h, d] -> seq stride 3*h*d
    qkv = torch.randn(b, s, 3, h, d, device="cuda", dtype=torch.bfloat16)
    run("packed qkv", qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], causal=True)
    # heads-major storage [b, h, s, d] seen as [b, s, h, d]
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
               for _ in range(3))
    run("transposed [b,h,s,d]", q, k, v)
    # last dim not contiguous: copied
    wide = torch.randn(b, s, h, 2 * d, device="cuda", dtype=torch.bfloat16)
    run("last-dim stride 2", wide[..., ::2], wide[..., 1::2], wide[..., ::2].contiguous())
    # misaligned data pointer (offset of one element): copied
    flat = torch.randn(b * s * h * d + 1, device="cuda", dtype=torch.bfloat16)
    mis = flat[1:].view(b, s, h, d)
    assert mis.data_ptr() % 16 != 0
    run("misaligned pointer", mis, mis, mis, causal=True)
    # strides that are not multiples of 8 elements: copied
    odd = torch.randn(b, s, h, d + 3, device="cuda", dtype=torch.bfloat16)[..., :d]
    run("seq stride not a multiple of 8", odd, odd, odd)
    # a slice of the sequence and of the heads
    big = torch.randn(b, 2 * s, 2 * h, d, device="cuda", dtype=torch.bfloat16)
    run("slices", big[:, 5:5 + s, :h], big[:, s:, h:], big[:, :s, ::2], causal=True)
    # inputs are not modified
    before = qkv.clone()
    flashjit.attention(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2])
    torch.cuda.synchronize()
    if not torch.equal(before, qkv):
        failures.append("inputs were modified")
    assert not failures, "\n".join(failures)


def test_return_lse():
    _require_gpu()
    q, k, v = make_inputs(b=2, sq=513, sk=777, hq=8, hkv=2, d=128, dv=128, dtype=torch.bfloat16)
    out = flashjit.attention(q, k, v, causal=True)
    out2, lse = flashjit.attention(q, k, v, causal=True, return_lse=True)
    torch.cuda.synchronize()
    assert torch.equal(out, out2), "return_lse changed the output"
    assert lse.shape == (2, 8, 513) and lse.dtype == torch.float32 and lse.is_contiguous()
    # torch.logsumexp of the scaled, masked scores in fp32
    kk = k.float().repeat_interleave(4, dim=2)
    scores = torch.einsum("bthd,bshd->bhts", q.float(), kk) / math.sqrt(128)
    ok = allowed_mask(513, 777, True, (-1, -1), q.device)
    ref = torch.logsumexp(scores.masked_fill(~ok, float("-inf")), dim=-1)
    err = (lse - ref).abs().max().item()
    assert err < 1e-3, f"lse max error {err}"


def test_streams_and_devices():
    _require_gpu()
    q, k, v = make_inputs(b=2, sq=1023, sk=1023, hq=4, hkv=4, d=64, dv=64, dtype=torch.bfloat16)
    ref = flashjit.attention(q, k, v, causal=True)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        out = flashjit.attention(q, k, v, causal=True)
    side.synchronize()
    torch.cuda.synchronize()
    assert torch.equal(ref, out), "result on a side stream differs"
    if torch.cuda.device_count() > 1:
        q1, k1, v1 = (t.to("cuda:1") for t in (q, k, v))
        out1 = flashjit.attention(q1, k1, v1, causal=True)
        torch.cuda.synchronize("cuda:1")
        assert out1.device == q1.device
        assert torch.equal(out1.cpu(), ref.cpu()), "result on cuda:1 differs"


def test_one_compile_per_class():
    """Sequence lengths, batch and heads are run-time parameters: a new seqlen of
    a class that ran already compiles nothing."""
    _require_gpu()
    q, k, v = make_inputs(b=2, sq=1024, sk=1024, hq=4, hkv=4, d=128, dv=128, dtype=torch.bfloat16)
    flashjit.attention(q, k, v, causal=True)
    torch.cuda.synchronize()
    before = flashjit.compile_count()
    for s in (1000, 1100, 77):
        q, k, v = make_inputs(b=1, sq=s, sk=s, hq=8, hkv=8, d=128, dv=128, dtype=torch.bfloat16)
        flashjit.attention(q, k, v, causal=True)
    torch.cuda.synchronize()
    assert flashjit.compile_count() == before, (
        f"compile_count went from {before} to {flashjit.compile_count()} for new seqlens")


def test_empty_inputs():
    """No rows: empty output, nothing launched. No keys: O = 0, LSE = +inf."""
    _require_gpu()
    q, k, v = make_inputs(b=0, sq=16, sk=16, hq=2, hkv=2, d=64, dv=64, dtype=torch.bfloat16)
    out, lse = flashjit.attention(q, k, v, return_lse=True)
    assert out.shape == (0, 16, 2, 64) and lse.shape == (0, 2, 16)
    q, k, v = make_inputs(b=2, sq=16, sk=0, hq=2, hkv=2, d=59, dv=59, dtype=torch.bfloat16)
    out, lse = flashjit.attention(q, k, v, return_lse=True)
    torch.cuda.synchronize()
    assert out.shape == (2, 16, 2, 59) and bool((out == 0).all())
    assert bool((lse == float("inf")).all())


def test_grad_error():
    _require_gpu()
    q, k, v = make_inputs(b=1, sq=64, sk=64, hq=2, hkv=2, d=64, dv=64, dtype=torch.bfloat16)
    qg = q.clone().requires_grad_()
    try:
        flashjit.attention(qg, k, v)
    except NotImplementedError as e:
        assert "backward is not implemented yet (issue #5)" in str(e)
        assert "torch.no_grad()" in str(e)
    else:
        raise AssertionError("no error for an input that requires grad")
    with torch.no_grad():
        out = flashjit.attention(qg, k, v)
    torch.cuda.synchronize()
    assert not out.requires_grad


def test_validation_errors():
    _require_gpu()
    q, k, v = make_inputs(b=1, sq=64, sk=64, hq=4, hkv=4, d=64, dv=64, dtype=torch.bfloat16)

    def expect(exc, needle, fn):
        try:
            fn()
        except exc as e:
            assert needle in str(e), f"message {str(e)!r} lacks {needle!r}"
        else:
            raise AssertionError(f"no {exc.__name__} ({needle})")

    expect(TypeError, "bf16 or fp16", lambda: flashjit.attention(q.float(), k.float(), v.float()))
    expect(TypeError, "same dtype", lambda: flashjit.attention(q, k.half(), v))
    expect(ValueError, "CUDA tensor", lambda: flashjit.attention(q.cpu(), k.cpu(), v.cpu()))
    expect(ValueError, "multiple of heads_kv", lambda: flashjit.attention(q, k[:, :, :3], v[:, :, :3]))
    big = torch.zeros(1, 8, 1, 264, device="cuda", dtype=torch.bfloat16)
    expect(ValueError, "head_dim", lambda: flashjit.attention(big, big, big))
    expect(ValueError, "4-D", lambda: flashjit.attention(q[0], k[0], v[0]))
    expect(ValueError, "window", lambda: flashjit.attention(q, k, v, window=(-2, 0)))
    expect(ValueError, "batch", lambda: flashjit.attention(q, torch.cat([k, k]), torch.cat([v, v])))


def test_version():
    _require_gpu()
    assert flashjit.version(), "empty version"
    assert isinstance(flashjit.compile_count(), int)


# ---- direct runner -------------------------------------------------------------

_FILTER = None
_STOP_FIRST = False
_VERBOSE = False


def main(argv):
    global _FILTER, _STOP_FIRST, _VERBOSE
    name_filter = argv[argv.index("-k") + 1] if "-k" in argv else None
    if "--case" in argv:
        _FILTER = argv[argv.index("--case") + 1]
    _STOP_FIRST = "-x" in argv
    _VERBOSE = "-v" in argv
    reason = _skip_reason()
    if reason:
        print(f"SKIP: {reason}")
        return 0
    print(f"flashjit {flashjit.version()} | torch {torch.__version__} | {torch.cuda.get_device_name()}",
          flush=True)
    tests = [(n, f) for n, f in sorted(globals().items())
             if n.startswith("test_") and callable(f) and (not name_filter or name_filter in n)]
    failed, skipped = [], 0
    for name, fn in tests:
        try:
            fn()
            print(f"PASS {name}", flush=True)
        except unittest.SkipTest as e:
            skipped += 1
            print(f"SKIP {name}: {e}", flush=True)
        except Exception:
            failed.append(name)
            print(f"FAIL {name}\n{traceback.format_exc()}", flush=True)
        if failed and _STOP_FIRST:
            break
    print(f"NVRTC compiles in this process: {flashjit.compile_count()}")
    print(f"{len(tests) - len(failed) - skipped} passed, {len(failed)} failed, {skipped} skipped",
          flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
