"""flashjit.attention against an fp32 reference through torch, on the GPU.

Run with pytest, or directly: FLASHJIT_LIB=build/libflashjit.so python3 tests/python/test_attention.py
(-k SUBSTRING runs the tests whose name has it, --case SUBSTRING the shape cases whose
label has it, -x stops at the first failure, -v lists every case).
Skips cleanly (exit 0) where torch or a CUDA device is missing.

Criterion (FlashAttention's): max|out - ref| <= 2 * max|out_lowprec - ref| + 1e-5, where
ref is computed in fp32 from the same bf16/fp16 inputs and out_lowprec is the same
reference computed in the input dtype. Outputs are poisoned with NaN before every
launch (FLASHJIT_POISON_OUTPUT=1), so an element the kernel does not write fails.

Gradients (test_grad_*): out.backward(dout) through flashjit.attention against autograd
through the same reference, with DESIGN.md's gradient criterion for each of dq, dk, dv:
max|g - g_ref| <= 3 * max|g_lowprec - g_ref| + 1e-5 (g_ref in fp32 from the same inputs,
g_lowprec the reference run in the input dtype). Gradients and the backward's workspace
are poisoned too. --full runs both dtypes for every head dim in test_grad_head_dims.
"""
import math
import os
import sys
import traceback
import unittest

os.environ.setdefault("FLASHJIT_POISON_OUTPUT", "1")  # before the binding loads
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_env import flashjit, require_gpu as _require_gpu, skip_reason as _skip_reason, torch  # noqa: E402
from gpu_env import config_field, recorded_configs, reference_kw  # noqa: E402


# ---- reference ---------------------------------------------------------------

def allowed_mask(seqlen_q, seqlen_k, causal, window, device, attention_chunk=0):
    """[seqlen_q, seqlen_k] bool: True where query i may see key j. Bottom-right
    aligned: row i sits at key position i + seqlen_k - seqlen_q; with
    attention_chunk C, key j must also lie in that position's chunk of C
    (floor division: positions are negative where seqlen_q > seqlen_k)."""
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
    if attention_chunk > 0:
        ok &= torch.div(j, attention_chunk, rounding_mode="floor") == torch.div(
            i, attention_chunk, rounding_mode="floor")
    return ok


def attention_ref(q, k, v, causal=False, window=(-1, -1), softcap=0.0, softmax_scale=None,
                  upcast=True, attention_chunk=0):
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
    ok = allowed_mask(sq, sk, causal, window, q.device, attention_chunk)
    lse = torch.logsumexp(scores.float().masked_fill(~ok, float("-inf")), dim=-1)
    # Rows that see no key: FlashAttention writes zeros (and their gradients
    # are 0). They are left unmasked for the softmax, then zeroed, so that
    # autograd through the reference meets no NaN (softmax of a row of -inf).
    no_key = ~ok.any(dim=-1, keepdim=True)
    p = torch.softmax(scores.masked_fill(~(ok | no_key), float("-inf")), dim=-1)
    p = p.masked_fill(no_key, 0.0)
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
    # The kernel's knobs leave the attention they compute alone.
    kw = reference_kw(kw)
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


# ---- gradients -----------------------------------------------------------------

def make_dout(q, v, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    b, sq, hq, _ = q.shape
    return torch.randn(b, sq, hq, v.shape[3], device="cuda", dtype=q.dtype, generator=g)


def grads_ref(q, k, v, dout, dtype, **kw):
    """[dq, dk, dv] of sum(attention_ref(q, k, v) * dout) by autograd through the
    reference, every op in `dtype`: fp32 is the reference, the input dtype the
    low-precision baseline (it rounds at least everything the kernel rounds)."""
    leaves = [t.detach().to(dtype).requires_grad_() for t in (q, k, v)]
    with torch.enable_grad():
        out, _ = attention_ref(*leaves, upcast=False, **kw)
        out.backward(dout.to(dtype))
    return [t.grad for t in leaves]


def check_grad(q, k, v, dout, label="", **kw):
    """flashjit's gradients against the fp32 reference's, with the criterion
    max|g - g_ref| <= 3 * max|g_lowprec - g_ref| + 1e-5 for each of dq, dk, dv.
    Returns a failure message or None."""
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    out = flashjit.attention(*leaves, **kw)
    if out.grad_fn is None:
        return f"{label}: out has no grad_fn although q, k and v require grad"
    out.backward(dout)
    torch.cuda.synchronize()
    with torch.no_grad():
        plain = flashjit.attention(q, k, v, **kw)
    torch.cuda.synchronize()
    if not torch.equal(out.detach(), plain):
        return f"{label}: the forward under autograd differs from the plain forward"
    ref = grads_ref(q, k, v, dout, torch.float32, **reference_kw(kw))
    low = grads_ref(q, k, v, dout, q.dtype, **reference_kw(kw))
    for name, leaf, r, lo in zip(("dq", "dk", "dv"), leaves, ref, low):
        g = leaf.grad
        if g is None:
            return f"{label}: {name} is None"
        if g.shape != leaf.shape or g.dtype != leaf.dtype:
            return (f"{label}: {name} {tuple(g.shape)} {g.dtype}, expected {tuple(leaf.shape)} "
                    f"{leaf.dtype}")
        nan = torch.isnan(g).sum().item()
        if nan:
            return f"{label}: {nan} of {g.numel()} elements of {name} are NaN (unwritten or wrong)"
        if g.numel() == 0:
            continue
        err = (g.float() - r).abs().max().item()
        base = (lo.float() - r).abs().max().item()
        bound = 3 * base + 1e-5
        if not err <= bound:
            return (f"{label}: max|{name}-ref| {err:.3g} > {bound:.3g} (3 * low-precision error "
                    f"{base:.3g} + 1e-5)")
    return None


def same_kernel_grads(a, b):
    """Two runs of the backward on the same values (other layouts, streams):
    equal up to the order of dQ's fp32 atomics, about an ulp of the dtype."""
    return (a.float() - b.float()).abs().max().item() <= 1e-2 * max(1.0, b.float().abs().max().item())


def run_cases(cases, grad=False):
    """cases: (label, kwargs-for-make_inputs, kwargs-for-attention). Collects every
    failure. grad=True checks the gradients (check_grad) instead of the forward."""
    _require_gpu()
    failures = []
    for label, shape, kw in cases:
        if _FILTER and _FILTER not in label:
            continue
        try:
            q, k, v = make_inputs(**shape)
            if grad:
                dout = make_dout(q, v, shape["seed"] + 7)
                msg = check_grad(q, k, v, dout, label=label, **kw)
            else:
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


def test_splits_and_pack_gqa():
    """num_splits and pack_gqa choose the forward's kernel, never the result."""
    _require_gpu()
    items = []
    for hq, hkv in ((8, 2), (8, 8)):
        for sq, sk in ((1, 4097), (17, 1023)):
            for kw in (dict(num_splits=1, pack_gqa=False), dict(num_splits=4),
                       dict(num_splits=3, pack_gqa=True), dict(pack_gqa=True, causal=True)):
                items.append((shape(b=2, sq=sq, sk=sk, hq=hq, hkv=hkv, d=128), kw))
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


def test_head_dims_past_256():
    """Gemma 4's 512 and MLA's 576/512 (two consumer warpgroups per 64 rows on
    Hopper): the forward against the reference, then the gradients (the sm80
    family's backward, 32 keys a CTA) under causal, softcap, GQA and window."""
    _require_gpu()
    if torch.cuda.get_device_capability() != (9, 0):
        print("SKIP: head dims past 256 need sm_90a", flush=True)
        return
    run_cases(cases_of([
        (shape(b=1, sq=515, hq=8, hkv=4, d=512), dict(causal=True)),
        (shape(b=2, sq=200, sk=333, hq=4, hkv=2, d=512), dict(softcap=30.0)),
        (shape(b=1, sq=257, hq=4, hkv=1, d=576, dv=512), dict(causal=True)),
        (shape(b=1, sq=1, sk=2000, hq=8, hkv=4, d=512), {}),
        (shape(b=1, sq=300, hq=4, d=384, dtype=torch.float16), dict(window=(100, 0))),
    ]))
    # MLA's V as a view of K's first 512 columns (read from K's tiles): the
    # same bits as from a copy.
    torch.manual_seed(3)
    q = torch.randn(2, 70, 32, 576, device="cuda", dtype=torch.bfloat16)
    latent = torch.randn(2, 300, 1, 576, device="cuda", dtype=torch.bfloat16)
    aliased = flashjit.attention(q, latent, latent[..., :512], causal=True)
    copied = flashjit.attention(q, latent, latent[..., :512].contiguous(), causal=True)
    assert torch.equal(aliased, copied), (aliased.float() - copied.float()).abs().max().item()
    run_cases(cases_of([
        (shape(b=1, sq=515, hq=8, hkv=4, d=512), dict(causal=True)),
        (shape(b=2, sq=200, sk=333, hq=4, hkv=2, d=512), dict(softcap=30.0)),
        (shape(b=1, sq=257, hq=4, hkv=1, d=576, dv=512), dict(causal=True)),
        (shape(b=1, sq=300, hq=4, d=384, dtype=torch.float16), dict(window=(100, 0))),
        (shape(b=1, sq=129, sk=77, hq=2, d=320), {}),
    ]), grad=True)


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


def test_warm_calls_match_the_full_path():
    """The warm-call cache (flashjit/_warm.py): a call whose shapes, strides,
    dtypes and arguments ran before is served from its entry; its output
    equals the full path's, for new data, with and without the LSE, on a
    side stream, from several threads, and a misaligned pointer of the same
    key falls back to the full path. Poisoning is off here (it disables the
    cache)."""
    _require_gpu()
    import threading
    from flashjit import _launch, _warm
    saved = _launch.POISON_OUTPUT
    _launch.POISON_OUTPUT = False
    try:
        cases = [dict(b=2, sq=257, sk=300, hq=8, hkv=2, d=128, dv=128, dtype=torch.bfloat16),
                 dict(b=1, sq=1, sk=3000, hq=32, hkv=8, d=128, dv=128, dtype=torch.bfloat16),
                 dict(b=3, sq=64, sk=64, hq=4, hkv=4, d=64, dv=64, dtype=torch.float16)]
        for i, shape_kw in enumerate(cases):
            for kw in (dict(causal=True), dict(window=(37, 5)), dict(softcap=20.0)):
                label = f"{shape_kw} {kw}"
                q, k, v = make_inputs(**shape_kw, seed=10 * i)
                flashjit.attention(q, k, v, **kw)  # the full path stores the entry
                before = _warm.served
                q, k, v = make_inputs(**shape_kw, seed=10 * i + 1)
                failure = check(q, k, v, label=label + " warm", **kw)
                assert failure is None, failure
                plain = flashjit.attention(q, k, v, **kw)
                assert _warm.served == before + 2, f"{label}: the warm calls took the full path"
                out, _ = flashjit.attention(q, k, v, return_lse=True, **kw)
                assert torch.equal(out, plain), f"{label}: return_lse changed the warm output"
                # Same key, a pointer 2 bytes off: the full path copies it.
                buf = torch.empty(q.numel() + 8, dtype=q.dtype, device=q.device)
                odd = buf[1:1 + q.numel()].view(q.shape)
                odd.copy_(q)
                assert torch.equal(flashjit.attention(odd, k, v, **kw), plain), (
                    f"{label}: a misaligned q of a warm key")
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    on_side = flashjit.attention(q, k, v, **kw)
                side.synchronize()
                assert torch.equal(on_side, plain), f"{label}: warm call on a side stream"

        # Threads: each its own inputs of one key, many calls each.
        shape_kw = cases[0]
        inputs = [make_inputs(**shape_kw, seed=100 + t) for t in range(4)]
        expected = [flashjit.attention(*inp, causal=True) for inp in inputs]
        torch.cuda.synchronize()
        errors = []

        def worker(t):
            try:
                stream = torch.cuda.Stream()
                with torch.cuda.stream(stream):
                    for _ in range(50):
                        out = flashjit.attention(*inputs[t], causal=True)
                        stream.synchronize()
                        if not torch.equal(out, expected[t]):
                            errors.append(f"thread {t}: output differs")
                            return
            except Exception as e:  # reported below
                errors.append(f"thread {t}: {e!r}")

        threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, "; ".join(errors)
    finally:
        _launch.POISON_OUTPUT = saved


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


def test_grad_head_dims():
    """Every head dim 32..256 (multiples of 8): one case each, rotating through
    full/causal/window x bf16/fp16; 64, 128, 256 and the irregular 40, 72, 200
    with every mask in both dtypes (--full: every head dim so)."""
    _require_gpu()
    masks = (dict(), dict(causal=True), dict(window=(48, 16)))
    dtypes = (torch.bfloat16, torch.float16)
    items = []
    for i, d in enumerate(range(32, 257, 8)):
        if _FULL or d in (40, 64, 72, 128, 200, 256):
            combos = [(kw, dt) for kw in masks for dt in dtypes]
        else:
            combos = [(masks[i % 3], dtypes[(i // 3) % 2])]
        for kw, dt in combos:
            items.append((shape(b=1, sq=113, sk=203, hq=2, d=d, dtype=dt), kw))
    run_cases(cases_of(items), grad=True)


def test_grad_padded_head_dims():
    """Head dims that are not multiples of 8: q, k, v and dout zero-padded,
    the gradients sliced back."""
    _require_gpu()
    items = []
    for d in (59, 111):
        for dt in (torch.bfloat16, torch.float16):
            for causal in (False, True):
                items.append((shape(b=2, sq=113, hq=3, d=d, dtype=dt), dict(causal=causal)))
            items.append((shape(b=1, sq=17, sk=113, hq=2, d=d, dtype=dt), dict(window=(32, 8))))
    # distinct q/k and v head dims (the padded v: 59 -> 64)
    items.append((shape(b=1, sq=113, hq=2, d=64, dv=59), dict(causal=True)))
    items.append((shape(b=1, sq=113, hq=2, d=128, dv=59, dtype=torch.float16), dict(causal=True)))
    run_cases(cases_of(items), grad=True)


def test_grad_seqlens():
    """Irregular and unequal sequence lengths; with causal and seqlen_q > seqlen_k
    the first rows see no key (their dq is 0)."""
    _require_gpu()
    items = []
    for d in (64, 128):
        for causal in (False, True):
            for sq, sk in ((17, 17), (113, 113), (1023, 1023), (17, 113), (113, 17),
                           (113, 1023), (1023, 113), (1, 300)):
                dt = torch.float16 if (sq + d) % 3 == 0 else torch.bfloat16
                items.append((shape(b=2, sq=sq, sk=sk, hq=4, d=d, dtype=dt), dict(causal=causal)))
    run_cases(cases_of(items), grad=True)


def test_grad_gqa_mqa():
    """dk and dv of a KV head sum the query heads that share it."""
    _require_gpu()
    items = []
    for hq, hkv in ((8, 2), (8, 1), (6, 3)):
        for causal in (False, True):
            for dt in (torch.bfloat16, torch.float16):
                items.append((shape(b=2, sq=257, sk=513, hq=hq, hkv=hkv, d=128, dtype=dt),
                              dict(causal=causal)))
    items.append((shape(b=1, sq=300, hq=8, hkv=2, d=64), dict(window=(64, 0))))
    run_cases(cases_of(items), grad=True)


def test_attention_chunk():
    """Chunked attention (FlashAttention-3's attention_chunk) over each mask,
    chunks shorter and longer than a tile and not a multiple of one, lengths
    on both sides of each other, GQA; forward and gradients."""
    _require_gpu()
    items = []
    for chunk in (48, 200, 1024):
        for sq, sk in ((1023, 1023), (113, 1023), (1023, 113)):
            for mask in (dict(), dict(causal=True), dict(window=(100, 7))):
                items.append((shape(b=1, sq=sq, sk=sk, hq=4, hkv=2, d=128),
                              dict(attention_chunk=chunk, **mask)))
    run_cases(cases_of(items))
    run_cases(cases_of([(shape(b=2, sq=517, sk=517, hq=2, d=64), dict(attention_chunk=100)),
                        (shape(b=1, sq=300, sk=700, hq=2, d=128, dtype=torch.float16),
                         dict(causal=True, attention_chunk=128))]), grad=True)


def test_grad_windows():
    _require_gpu()
    items = []
    for d in (64, 128):
        for sq, sk in ((1023, 1023), (113, 1023), (1023, 113)):
            for window in ((64, 16), (0, 0), (128, -1), (-1, 32)):
                items.append((shape(b=1, sq=sq, sk=sk, hq=2, d=d), dict(window=window)))
            items.append((shape(b=1, sq=sq, sk=sk, hq=2, d=d, dtype=torch.float16),
                          dict(causal=True, window=(100, 7))))
    run_cases(cases_of(items), grad=True)


def test_grad_softcap_and_scale():
    """softcap's derivative (1 - tanh^2) and a non-default scale."""
    _require_gpu()
    items = []
    for causal in (False, True):
        for dt in (torch.bfloat16, torch.float16):
            items.append((shape(b=2, sq=1023, hq=2, d=128, dtype=dt), dict(causal=causal, softcap=30.0)))
        items.append((shape(b=2, sq=113, sk=1023, hq=4, d=64), dict(causal=causal, softcap=5.0)))
        items.append((shape(b=1, sq=200, hq=4, hkv=2, d=256), dict(causal=causal, softcap=20.0)))
        items.append((shape(b=2, sq=513, hq=4, d=128), dict(causal=causal, softmax_scale=0.3)))
    items.append((shape(b=1, sq=333, hq=2, d=111, dtype=torch.float16), dict(window=(50, 50), softcap=10.0)))
    run_cases(cases_of(items), grad=True)


def test_grad_strided_inputs_and_dout():
    """Views as inputs (gradients flow back to their base) and a dout that is
    not kernel-ready (transposed, sliced, broadcast)."""
    _require_gpu()
    b, s, h, d = 2, 333, 4, 128
    failures = []
    g = torch.Generator(device="cuda").manual_seed(3)

    def randn(*shape):
        return torch.randn(*shape, device="cuda", dtype=torch.bfloat16, generator=g)

    def compare(name, got, ref_grads):
        for n, x, r in zip(("dq", "dk", "dv"), got, ref_grads):
            if not same_kernel_grads(x, r):
                err = (x.float() - r.float()).abs().max().item()
                failures.append(f"{name}: {n} differs from the packed-input gradient by {err:.3g}")

    # packed qkv [b, s, 3, h, d]: one leaf, three strided views
    qkv = randn(b, s, 3, h, d).requires_grad_()
    dout = randn(b, s, h, d)
    out = flashjit.attention(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], causal=True)
    out.backward(dout)
    q, k, v = (qkv.detach()[:, :, i].contiguous() for i in range(3))
    msg = check_grad(q, k, v, dout, label="packed qkv (reference)", causal=True)
    if msg:
        failures.append(msg)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    flashjit.attention(*leaves, causal=True).backward(dout)
    compare("packed qkv", [qkv.grad[:, :, i] for i in range(3)], [t.grad for t in leaves])

    # heads-major storage [b, h, s, d] seen as [b, s, h, d]
    base = [randn(b, h, s, d).requires_grad_() for _ in range(3)]
    out = flashjit.attention(*(t.transpose(1, 2) for t in base))
    out.backward(dout)
    leaves = [t.detach().transpose(1, 2).contiguous().requires_grad_() for t in base]
    flashjit.attention(*leaves).backward(dout)
    compare("transposed [b,h,s,d]", [t.grad.transpose(1, 2) for t in base], [t.grad for t in leaves])

    # dout not kernel-ready: transposed storage, last-dim stride 2, broadcast (sum())
    q, k, v = make_inputs(b=b, sq=s, sk=s, hq=h, hkv=h, d=d, dv=d, dtype=torch.bfloat16, seed=5)
    douts = {"transposed dout": randn(b, h, s, d).transpose(1, 2),
             "dout last-dim stride 2": randn(b, s, h, 2 * d)[..., ::2],
             "misaligned dout": randn(b * s * h * d + 1)[1:].view(b, s, h, d)}
    for name, dt in douts.items():
        msg = check_grad(q, k, v, dt, label=name, causal=True)
        if msg:
            failures.append(msg)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    flashjit.attention(*leaves).float().sum().backward()  # dout: ones, expanded
    ref = [t.clone().requires_grad_() for t in (q, k, v)]
    flashjit.attention(*ref).backward(torch.ones_like(dout))
    compare("broadcast dout", [t.grad for t in leaves], [t.grad for t in ref])
    assert not failures, "\n".join(failures)


def _flashjit_grads(q, k, v, dout, **kw):
    """[dq, dk, dv] of one flashjit forward and backward from copies of q, k, v."""
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    flashjit.attention(*leaves, **kw).backward(dout)
    torch.cuda.synchronize()
    return [t.grad for t in leaves]


def test_grad_deterministic():
    """deterministic=True (FlashAttention's): the backward's C call gets the
    deterministic config, its gradients meet the gradient criterion, and a
    second backward of the same inputs gives bit-identical dq, dk and dv.
    GQA/MQA, masks, softcap, head dims 64/128/256 and a padded 59, both
    dtypes; the default mode's backward is called without it."""
    _require_gpu()
    items = [(shape(b=2, sq=257, sk=513, hq=8, hkv=2, d=128), dict(causal=True)),
             (shape(b=1, sq=113, sk=203, hq=4, d=64, dtype=torch.float16),
              dict(window=(48, 16))),
             (shape(b=2, sq=1023, hq=4, hkv=1, d=128), dict(softcap=30.0)),
             (shape(b=1, sq=200, sk=333, hq=4, hkv=2, d=256, dtype=torch.float16),
              dict(causal=True)),
             (shape(b=2, sq=113, hq=3, d=59), dict(causal=True))]
    cases = cases_of([(s, dict(kw, deterministic=True)) for s, kw in items])
    run_cases(cases, grad=True)
    failures = []
    for label, s, kw in cases:
        q, k, v = make_inputs(**s)
        dout = make_dout(q, v, s["seed"] + 7)
        with recorded_configs() as seen:
            first = _flashjit_grads(q, k, v, dout, **kw)
            again = _flashjit_grads(q, k, v, dout, **kw)
        backward = [config for symbol, config in seen if symbol.startswith("flashjit_backward")]
        if [config_field(c, "deterministic") for c in backward] != [1, 1]:
            failures.append(f"{label}: the backward calls' configs are {backward}")
        for name, a, b in zip(("dq", "dk", "dv"), first, again):
            if not torch.equal(a, b):
                err = (a.float() - b.float()).abs().max().item()
                failures.append(f"{label}: {name} differs between two deterministic backwards "
                                f"(max {err:.3g})")
    s, kw = items[0]
    q, k, v = make_inputs(**s)
    with recorded_configs() as seen:
        _flashjit_grads(q, k, v, make_dout(q, v, 1), **kw)
    backward = [config for symbol, config in seen if symbol.startswith("flashjit_backward")]
    if [config_field(c, "deterministic") for c in backward] != [0]:
        failures.append(f"default mode: the backward calls' configs are {backward}")
    assert not failures, "\n".join(failures)


def test_grad_only_some_inputs():
    """Only the inputs that require grad get one; the others stay None."""
    _require_gpu()
    q, k, v = make_inputs(b=1, sq=200, sk=300, hq=4, hkv=2, d=64, dv=64, dtype=torch.bfloat16)
    dout = make_dout(q, v, 1)
    full = [t.clone().requires_grad_() for t in (q, k, v)]
    flashjit.attention(*full, causal=True).backward(dout)
    for i in range(3):
        leaves = [t.clone() for t in (q, k, v)]
        leaves[i].requires_grad_()
        flashjit.attention(*leaves, causal=True).backward(dout)
        for j in range(3):
            if j == i:
                assert same_kernel_grads(leaves[j].grad, full[j].grad), f"input {j}: gradient differs"
            else:
                assert leaves[j].grad is None, f"input {j} got a gradient it did not ask for"


def test_grad_return_lse_and_modes():
    """return_lse under autograd (lse not differentiable); no autograd node
    under no_grad, inference_mode or without requires_grad."""
    _require_gpu()
    q, k, v = make_inputs(b=2, sq=129, sk=257, hq=4, hkv=2, d=128, dv=128, dtype=torch.bfloat16)
    plain, plain_lse = flashjit.attention(q, k, v, causal=True, return_lse=True)
    assert plain.grad_fn is None and not plain.requires_grad
    qg = q.clone().requires_grad_()
    out, lse = flashjit.attention(qg, k, v, causal=True, return_lse=True)
    assert out.requires_grad and out.grad_fn is not None
    assert not lse.requires_grad, "lse must not be differentiable"
    torch.cuda.synchronize()
    assert torch.equal(out.detach(), plain) and torch.equal(lse, plain_lse)
    out.backward(make_dout(q, v, 2))
    assert qg.grad is not None and qg.grad.shape == q.shape
    with torch.no_grad():
        assert flashjit.attention(qg, k, v).grad_fn is None
    with torch.inference_mode():
        assert flashjit.attention(qg, k, v).grad_fn is None
    # softcap/window through autograd keep the same contract
    out = flashjit.attention(qg, k, v, window=(16, 16), softcap=5.0)
    assert out.grad_fn is not None


def test_grad_empty_inputs():
    """No keys: out = 0, so every gradient is 0 (dk, dv empty). No rows: dq empty."""
    _require_gpu()
    q, k, v = make_inputs(b=2, sq=16, sk=0, hq=2, hkv=2, d=59, dv=59, dtype=torch.bfloat16)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out = flashjit.attention(*leaves)
    out.backward(torch.ones_like(out))
    assert out.shape == (2, 16, 2, 59) and bool((out == 0).all())
    assert bool((leaves[0].grad == 0).all()) and leaves[0].grad.shape == q.shape
    assert leaves[1].grad.shape == k.shape and leaves[2].grad.shape == v.shape
    q, k, v = make_inputs(b=1, sq=0, sk=16, hq=2, hkv=2, d=64, dv=64, dtype=torch.bfloat16)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out = flashjit.attention(*leaves, causal=True)
    out.backward(torch.ones_like(out))
    assert leaves[0].grad.shape == q.shape and bool((leaves[1].grad == 0).all())


def test_grad_streams():
    """The backward runs on the stream autograd gives it (the forward's)."""
    _require_gpu()
    q, k, v = make_inputs(b=2, sq=1023, sk=1023, hq=4, hkv=4, d=64, dv=64, dtype=torch.bfloat16)
    dout = make_dout(q, v, 3)
    ref = [t.clone().requires_grad_() for t in (q, k, v)]
    flashjit.attention(*ref, causal=True).backward(dout)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    with torch.cuda.stream(side):
        flashjit.attention(*leaves, causal=True).backward(dout)
    side.synchronize()
    torch.cuda.synchronize()
    for r, x in zip(ref, leaves):
        assert same_kernel_grads(x.grad, r.grad), "gradients on a side stream differ"


def test_grad_one_compile_per_class():
    """A backward of a class that ran already compiles nothing for new seqlens,
    batch or heads."""
    _require_gpu()
    q, k, v = make_inputs(b=2, sq=1024, sk=1024, hq=4, hkv=4, d=128, dv=128, dtype=torch.bfloat16)
    leaves = [t.requires_grad_() for t in (q, k, v)]
    flashjit.attention(*leaves, causal=True).backward(make_dout(q, v, 4))
    torch.cuda.synchronize()
    before = flashjit.compile_count()
    for s in (1000, 1100, 77):
        q, k, v = make_inputs(b=1, sq=s, sk=s, hq=8, hkv=8, d=128, dv=128, dtype=torch.bfloat16)
        leaves = [t.requires_grad_() for t in (q, k, v)]
        flashjit.attention(*leaves, causal=True).backward(make_dout(q, v, 5))
    torch.cuda.synchronize()
    assert flashjit.compile_count() == before, (
        f"compile_count went from {before} to {flashjit.compile_count()} for new seqlens")


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

    expect(TypeError, "bf16, fp16 or float8_e4m3fn, got torch.float32", lambda: flashjit.attention(q.float(), k.float(), v.float()))
    expect(TypeError, "same dtype", lambda: flashjit.attention(q, k.half(), v))
    expect(ValueError, "CUDA tensor", lambda: flashjit.attention(q.cpu(), k.cpu(), v.cpu()))
    expect(ValueError, "multiple of heads_kv", lambda: flashjit.attention(q, k[:, :, :3], v[:, :, :3]))
    big = torch.zeros(1, 8, 1, 584, device="cuda", dtype=torch.bfloat16)
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
# Both dtypes for every head dim in test_grad_head_dims (--full, or FLASHJIT_TEST_FULL=1).
_FULL = os.environ.get("FLASHJIT_TEST_FULL", "") not in ("", "0")


def main(argv):
    global _FILTER, _STOP_FIRST, _VERBOSE, _FULL
    name_filter = argv[argv.index("-k") + 1] if "-k" in argv else None
    if "--case" in argv:
        _FILTER = argv[argv.index("--case") + 1]
    _STOP_FIRST = "-x" in argv
    _VERBOSE = "-v" in argv
    _FULL = _FULL or "--full" in argv
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
