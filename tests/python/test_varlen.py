"""flashjit.attention_varlen against the fp32 reference of test_attention.py,
applied per sequence, on the GPU.

    FLASHJIT_LIB=build/libflashjit.so python3 tests/python/test_varlen.py

Packed batches mixing lengths 0, 1, 17, 113, 1023; seqlen_q != seqlen_k per
sequence; GQA; causal, window, softcap; both dtypes; head dims 64/128/256 and
a padded one (72); return_lse in the [heads_q, total_q] layout; gradients
against the reference per sequence (0 for a sequence without keys); bad
arguments. Outputs are poisoned before every launch
(FLASHJIT_POISON_OUTPUT=1). Skips cleanly (exit 0) where torch or a CUDA
device is missing.
"""
import os
import sys

os.environ.setdefault("FLASHJIT_POISON_OUTPUT", "1")  # before the binding loads
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_env import flashjit, require_gpu, run_tests, torch  # noqa: E402
from test_attention import attention_ref  # noqa: E402


def cumulative(lens):
    out = [0]
    for n in lens:
        out.append(out[-1] + n)
    return torch.tensor(out, dtype=torch.int32, device="cuda")


def run_case(lens_q, lens_k, hq, hkv, d, dtype, seed=0, dv=None, **kw):
    torch.manual_seed(seed)
    dv = dv or d
    tq, tk = sum(lens_q), sum(lens_k)
    q = torch.randn(tq, hq, d, device="cuda", dtype=dtype)
    k = torch.randn(tk, hkv, d, device="cuda", dtype=dtype)
    v = torch.randn(tk, hkv, dv, device="cuda", dtype=dtype)
    cu_q, cu_k = cumulative(lens_q), cumulative(lens_k)
    out, lse = flashjit.attention_varlen(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k),
                                         return_lse=True, **kw)
    assert out.shape == (tq, hq, dv) and lse.shape == (hq, tq)
    label = f"q={lens_q} k={lens_k} h={hq}/{hkv} d={d}/{dv} {dtype} {kw}"
    for i, (lq, lk) in enumerate(zip(lens_q, lens_k)):
        if lq == 0:
            continue
        q0, k0 = int(cu_q[i]), int(cu_k[i])
        got, got_lse = out[q0:q0 + lq], lse[:, q0:q0 + lq]
        if lk == 0:
            assert torch.equal(got, torch.zeros_like(got)), f"{label}: seq {i} without keys"
            assert torch.isinf(got_lse).all(), f"{label}: seq {i} LSE"
            continue
        qs, ks, vs = q[None, q0:q0 + lq], k[None, k0:k0 + lk], v[None, k0:k0 + lk]
        ref, ref_lse = attention_ref(qs, ks, vs, **kw)
        low, _ = attention_ref(qs, ks, vs, upcast=False, **kw)
        err = (got.float() - ref[0].float()).abs().max().item()
        base = (low[0].float() - ref[0].float()).abs().max().item()
        assert err <= 2 * base + 1e-5, f"{label}: seq {i} max err {err} > 2 * {base} + 1e-5"
        finite = torch.isfinite(ref_lse[0])
        assert torch.equal(finite, torch.isfinite(got_lse)), f"{label}: seq {i} LSE finiteness"
        if finite.any():
            lse_err = (got_lse[finite] - ref_lse[0][finite]).abs().max().item()
            assert lse_err <= 1e-3, f"{label}: seq {i} LSE err {lse_err}"


def test_mixed_lengths():
    require_gpu()
    lq = [0, 1, 17, 113, 1023, 300]
    lk = [5, 1, 17, 600, 1023, 0]
    for dtype in (torch.bfloat16, torch.float16):
        run_case(lq, lk, 8, 2, 128, dtype, seed=1)
        run_case(lq, lk, 8, 8, 64, dtype, seed=2, causal=True)
    run_case(lq, lk, 4, 1, 256, torch.bfloat16, seed=3, window=(100, 7))
    run_case(lq, lk, 6, 3, 72, torch.float16, seed=4, softcap=30.0, causal=True)  # padded


def test_decode_shapes_and_equal_lengths():
    require_gpu()
    run_case([1] * 8, [4096, 17, 1, 0, 3000, 128, 64, 2000], 32, 8, 128, torch.bfloat16, seed=5)
    run_case([256] * 4, [256] * 4, 16, 4, 128, torch.bfloat16, seed=6, causal=True)


def grad_case(lens_q, lens_k, hq, hkv, d, dtype, seed=0, **kw):
    """Gradients of a packed batch against the reference's, sequence by
    sequence (a sequence's gradients only depend on its own rows)."""
    torch.manual_seed(seed)
    tq, tk = sum(lens_q), sum(lens_k)
    q = torch.randn(tq, hq, d, device="cuda", dtype=dtype, requires_grad=True)
    k = torch.randn(tk, hkv, d, device="cuda", dtype=dtype, requires_grad=True)
    v = torch.randn(tk, hkv, d, device="cuda", dtype=dtype, requires_grad=True)
    cu_q, cu_k = cumulative(lens_q), cumulative(lens_k)
    out = flashjit.attention_varlen(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), **kw)
    dout = torch.randn_like(out)
    out.backward(dout)
    label = f"q={lens_q} k={lens_k} h={hq}/{hkv} d={d} {dtype} {kw}"
    for i, (lq, lk) in enumerate(zip(lens_q, lens_k)):
        q0, k0 = int(cu_q[i]), int(cu_k[i])
        if lq == 0 or lk == 0:
            # No query or no key: the sequence's gradients are 0.
            for name, g in (("dq", q.grad[q0:q0 + lq]), ("dk", k.grad[k0:k0 + lk]),
                            ("dv", v.grad[k0:k0 + lk])):
                assert torch.equal(g, torch.zeros_like(g)), f"{label}: seq {i} {name} not 0"
            continue
        grads = []
        for upcast in (True, False):
            qs = q.detach()[None, q0:q0 + lq].clone().requires_grad_()
            ks = k.detach()[None, k0:k0 + lk].clone().requires_grad_()
            vs = v.detach()[None, k0:k0 + lk].clone().requires_grad_()
            ref, _ = attention_ref(qs, ks, vs, upcast=upcast, **kw)
            ref.backward(dout[None, q0:q0 + lq])
            grads.append((qs.grad[0], ks.grad[0], vs.grad[0]))
        (rq, rk, rv), (lq_, lk_, lv_) = grads
        for name, got, ref, low in (("dq", q.grad[q0:q0 + lq], rq, lq_),
                                    ("dk", k.grad[k0:k0 + lk], rk, lk_),
                                    ("dv", v.grad[k0:k0 + lk], rv, lv_)):
            err = (got.float() - ref.float()).abs().max().item()
            base = (low.float() - ref.float()).abs().max().item()
            # The dense gradients' criterion (test_attention.py): 3x the low-precision error.
            assert err <= 3 * base + 1e-5, f"{label}: seq {i} {name} err {err} > 3 * {base}"


def test_gradients():
    require_gpu()
    lq = [0, 1, 17, 113, 300]
    lk = [5, 1, 17, 200, 300]
    grad_case(lq, lk, 8, 2, 128, torch.bfloat16, seed=11)
    grad_case(lq, lk, 4, 4, 64, torch.float16, seed=12, causal=True)
    grad_case([64, 0, 129], [64, 80, 0], 4, 1, 256, torch.bfloat16, seed=13, window=(50, 3))
    grad_case([33, 70], [90, 70], 6, 3, 72, torch.bfloat16, seed=14, softcap=20.0, causal=True)


def test_no_grad_path_matches_the_differentiable_one():
    require_gpu()
    q = torch.randn(10, 4, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(12, 4, 64, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    cu_q = cumulative([4, 6])
    cu_k = cumulative([5, 7])
    out = flashjit.attention_varlen(q, k, v, cu_q, cu_k, 6, 7)
    assert out.requires_grad
    with torch.no_grad():
        plain = flashjit.attention_varlen(q, k, v, cu_q, cu_k, 6, 7)
    assert not plain.requires_grad and torch.equal(plain, out.detach())


def test_bad_arguments():
    require_gpu()
    q = torch.randn(10, 4, 64, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(12, 4, 64, device="cuda", dtype=torch.bfloat16)
    cu_q, cu_k = cumulative([4, 6]), cumulative([5, 7])
    cases = [
        ((q, k, k, cu_q.long(), cu_k, 6, 7), "int32"),
        ((q, k, k, cu_q, cumulative([12]), 6, 7), "entries"),
        ((q, k, k, cu_q, cu_k, 11, 7), "exceeds"),
        ((q[None], k, k, cu_q, cu_k, 6, 7), "3-D"),
    ]
    errors = []
    for args, expected in cases:
        try:
            flashjit.attention_varlen(*args)
            errors.append(f"{expected}: no error")
        except (TypeError, ValueError) as e:
            if expected not in str(e):
                errors.append(f"{expected}: got {e}")
    assert not errors, errors


if __name__ == "__main__":
    sys.exit(run_tests(globals()))
