"""flashjit.attention_varlen against the fp32 reference of test_attention.py,
applied per sequence, on the GPU.

    FLASHJIT_LIB=build/libflashjit.so python3 tests/python/test_varlen.py

Packed batches mixing lengths 0, 1, 17, 113, 1023; seqlen_q != seqlen_k per
sequence; GQA; causal, window, softcap; both dtypes; head dims 64/128/256 and
a padded one (72); return_lse in the [heads_q, total_q] layout; gradients
against the reference per sequence (0 for a sequence without keys); bad
arguments; num_splits and pack_gqa (their configs reaching the library, the
result unchanged) and the deterministic backward (bit-identical gradients
over two runs). Outputs are poisoned before every launch
(FLASHJIT_POISON_OUTPUT=1). Skips cleanly (exit 0) where torch or a CUDA
device is missing.
"""
import os
import sys

os.environ.setdefault("FLASHJIT_POISON_OUTPUT", "1")  # before the binding loads
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_env import config_field, flashjit, recorded_configs, reference_kw, require_gpu  # noqa: E402
from gpu_env import run_tests, torch  # noqa: E402
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
        ref, ref_lse = attention_ref(qs, ks, vs, **reference_kw(kw))
        low, _ = attention_ref(qs, ks, vs, upcast=False, **reference_kw(kw))
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
    sequence (a sequence's gradients only depend on its own rows). Returns
    the gradients (dq, dk, dv)."""
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
            ref, _ = attention_ref(qs, ks, vs, upcast=upcast, **reference_kw(kw))
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
    return q.grad, k.grad, v.grad


def test_gradients():
    require_gpu()
    lq = [0, 1, 17, 113, 300]
    lk = [5, 1, 17, 200, 300]
    grad_case(lq, lk, 8, 2, 128, torch.bfloat16, seed=11)
    grad_case(lq, lk, 4, 4, 64, torch.float16, seed=12, causal=True)
    grad_case([64, 0, 129], [64, 80, 0], 4, 1, 256, torch.bfloat16, seed=13, window=(50, 3))
    grad_case([33, 70], [90, 70], 6, 3, 72, torch.bfloat16, seed=14, softcap=20.0, causal=True)


def used_rows_case(lens_q, lens_k, used_q, used_k, hq, hkv, d, seed):
    """A packed batch using only some rows (seqused_q / seqused_k, either may
    be None), causal and not, both dtypes: out, dQ, dK, dV of the used rows
    against the reference on just them; the unused queries' dO (large finite
    values here: the contract, as the unused keys') changes nothing, and the
    unused keys get dK = dV = 0."""
    for causal, dtype in ((True, torch.bfloat16), (False, torch.float16)):
        torch.manual_seed(seed)
        q = torch.randn(sum(lens_q), hq, d, device="cuda", dtype=dtype, requires_grad=True)
        k = torch.randn(sum(lens_k), hkv, d, device="cuda", dtype=dtype, requires_grad=True)
        v = torch.randn(sum(lens_k), hkv, d, device="cuda", dtype=dtype, requires_grad=True)
        cu_q, cu_k = cumulative(lens_q), cumulative(lens_k)
        counts = {name: None if used is None else
                  torch.tensor(used, dtype=torch.int32, device="cuda")
                  for name, used in (("seqused_q", used_q), ("seqused_k", used_k))}
        out = flashjit.attention_varlen(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k),
                                        causal=causal, **counts)
        nq = [min(u, n) for u, n in zip(used_q or lens_q, lens_q)]
        nk = [min(u, n) for u, n in zip(used_k or lens_k, lens_k)]
        dout = torch.randn_like(out)
        for i in range(len(lens_q)):
            q0 = int(cu_q[i])
            dout[q0 + nq[i]:q0 + lens_q[i]] = 3e4
        out.backward(dout)
        label = f"used rows q={used_q} k={used_k} causal={causal} {dtype}"
        for i in range(len(lens_q)):
            q0, k0 = int(cu_q[i]), int(cu_k[i])
            for name, g in (("dk", k.grad), ("dv", v.grad)):
                unused = g[k0 + nk[i]:k0 + lens_k[i]]
                assert torch.equal(unused, torch.zeros_like(unused)), f"{label}: seq {i} {name}"
            if nq[i] == 0 or nk[i] == 0:
                for name, g in (("dk", k.grad[k0:k0 + nk[i]]), ("dv", v.grad[k0:k0 + nk[i]])):
                    assert torch.equal(g, torch.zeros_like(g)), f"{label}: seq {i} {name} not 0"
                continue
            results = []
            for upcast in (True, False):
                qs = q.detach()[None, q0:q0 + nq[i]].clone().requires_grad_()
                ks = k.detach()[None, k0:k0 + nk[i]].clone().requires_grad_()
                vs = v.detach()[None, k0:k0 + nk[i]].clone().requires_grad_()
                ref, _ = attention_ref(qs, ks, vs, upcast=upcast, causal=causal)
                ref.backward(dout[None, q0:q0 + nq[i]])
                results.append((ref[0], qs.grad[0], ks.grad[0], vs.grad[0]))
            for j, name, got in ((0, "out", out.detach()[q0:q0 + nq[i]]),
                                 (1, "dq", q.grad[q0:q0 + nq[i]]),
                                 (2, "dk", k.grad[k0:k0 + nk[i]]),
                                 (3, "dv", v.grad[k0:k0 + nk[i]])):
                ref, low = results[0][j], results[1][j]
                err = (got.float() - ref.float()).abs().max().item()
                base = (low.float() - ref.float()).abs().max().item()
                assert err <= 3 * base + 1e-5, f"{label}: seq {i} {name} err {err} > 3 * {base}"


def test_seqused_q():
    """seqused_q as FlashAttention-3's: sequence b uses its first
    seqused_q[b] queries (masks aligned from those to the end of its keys)."""
    require_gpu()
    used_rows_case([40, 1, 130, 7, 64], [90, 33, 130, 0, 200], [17, 0, 130, 5, 200], None,
                   8, 2, 128, seed=21)


def test_seqused_k_gradients():
    """seqused_k over packed K/V is differentiable (FlashAttention-3's): each
    sequence attends to its first seqused_k[b] keys; with seqused_q too."""
    require_gpu()
    used_rows_case([33, 1, 70, 5], [90, 40, 70, 16], None, [50, 40, 0, 3], 8, 4, 64, seed=31)
    used_rows_case([33, 1, 70, 5], [90, 40, 70, 16], [20, 1, 70, 0], [50, 40, 9, 3], 8, 4, 64,
                   seed=32)


def _knob_calls(seen, prefix):
    """The recorded configs of the C calls whose entry point starts with prefix."""
    return [config for symbol, config in seen if symbol.startswith(prefix)]


def test_splits_and_pack_gqa():
    """num_splits (1 and 3) and pack_gqa (True, False) reach the forward's C
    call and leave the result alone: GQA and MHA, causal, decode rows next
    to long prefills, a sequence without keys, both dtypes."""
    require_gpu()
    lq = [1, 17, 113, 300, 1, 0]
    lk = [4096, 1023, 17, 600, 0, 5]
    for num_splits in (1, 3):
        for pack_gqa in (True, False):
            for hq, hkv, dtype, kw in ((8, 2, torch.bfloat16, dict(causal=True)),
                                       (4, 4, torch.float16, dict()),
                                       (8, 1, torch.bfloat16, dict(window=(100, 7)))):
                kw = dict(kw, num_splits=num_splits, pack_gqa=pack_gqa)
                with recorded_configs() as seen:
                    run_case(lq, lk, hq, hkv, 128, dtype, seed=20 + num_splits, **kw)
                configs = _knob_calls(seen, "flashjit_forward_varlen")
                want = (num_splits, 1 if pack_gqa else 2)  # flashjit.h: PACK_GQA_ON / _OFF
                got = [(config_field(c, "splits"), config_field(c, "pack_gqa"))
                       for c in configs]
                assert got == [want], f"{kw} h={hq}/{hkv}: configs {got}, expected [{want}]"


def test_gradients_deterministic():
    """deterministic=True: the backward's C call gets the deterministic
    config, the gradients meet the criterion, and a second run gives
    bit-identical dq, dk and dv."""
    require_gpu()
    for lq, lk, hq, hkv, d, dtype, kw in (
            ([0, 1, 17, 113, 300], [5, 1, 17, 200, 300], 8, 2, 128, torch.bfloat16,
             dict(causal=True)),
            ([64, 0, 129], [64, 80, 0], 4, 4, 64, torch.float16, dict(window=(50, 3))),
            ([33, 70, 1], [90, 70, 400], 6, 3, 256, torch.bfloat16, dict(softcap=20.0))):
        kw = dict(kw, deterministic=True)
        with recorded_configs() as seen:
            first = grad_case(lq, lk, hq, hkv, d, dtype, seed=d, **kw)
            again = grad_case(lq, lk, hq, hkv, d, dtype, seed=d, **kw)
        configs = _knob_calls(seen, "flashjit_backward_varlen")
        got = [config_field(c, "deterministic") for c in configs]
        assert got == [1, 1], f"h={hq}/{hkv} d={d} {kw}: backward configs {configs}"
        for name, a, b in zip(("dq", "dk", "dv"), first, again):
            assert torch.equal(a, b), (f"h={hq}/{hkv} d={d} {kw}: {name} differs between two "
                                       f"deterministic backwards")
    with recorded_configs() as seen:
        grad_case([17, 40], [30, 40], 4, 2, 64, torch.bfloat16, seed=1)
    got = [config_field(c, "deterministic") for c in _knob_calls(seen, "flashjit_backward")]
    assert got == [0], f"the default mode's backward configs: {got}"


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
