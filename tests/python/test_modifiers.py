"""flashjit.attention with a caller's score_mod / mask_mod (issue #15)
against a PyTorch reference that applies the same bias and mask, on the GPU.

    FLASHJIT_LIB=build/libflashjit.so python3 tests/python/test_modifiers.py

ALiBi over per-head slopes, a document mask over per-token ids (int32
tensor aux), a prefix-LM mask over an int aux, both dtypes; causal as a
mask_mod equal to the built-in causal; gradients of score_mods (with their
score_mod_grad) and mask_mods against the reference's autograd; the
forward-only and bad-argument errors. Outputs are poisoned before every launch (FLASHJIT_POISON_OUTPUT=1).
Skips cleanly (exit 0) where torch or a CUDA device is missing.
"""
import math
import os
import sys

os.environ.setdefault("FLASHJIT_POISON_OUTPUT", "1")  # before the binding loads
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_env import flashjit, require_gpu, run_tests, torch  # noqa: E402

ALIBI = """
__device__ float score_mod(float score, int b, int h, int q, int k, const Aux &aux) {
  return score + aux.slopes[h] * (k - q);
}
"""
DOCUMENTS = """
__device__ bool mask_mod(int b, int h, int q, int k, const Aux &aux) {
  return aux.doc_ids[b * aux.seqlen + q] == aux.doc_ids[b * aux.seqlen + k];
}
"""
PREFIX_LM = """
__device__ bool mask_mod(int b, int h, int q, int k, const Aux &aux) {
  return k < aux.prefix || k <= q;
}
"""
CAUSAL = "__device__ bool mask_mod(int b, int h, int q, int k) { return k <= q; }\n"


def reference(q, k, v, bias=None, allowed=None, upcast=True):
    """(out, lse) of softmax(q k^T / sqrt(d) + bias, masked by allowed) v."""
    dtype = q.dtype
    if upcast:
        q, k, v = q.float(), k.float(), v.float()
    b, sq, hq, d = q.shape
    k = k.repeat_interleave(hq // k.shape[2], dim=2)
    v = v.repeat_interleave(hq // v.shape[2], dim=2)
    scores = torch.einsum("bthd,bshd->bhts", q / math.sqrt(d), k)
    if bias is not None:
        scores = scores + bias
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    lse = torch.logsumexp(scores.float(), dim=-1)
    p = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return torch.einsum("bhts,bshd->bthd", p.to(v.dtype), v).to(dtype), lse


def check(out, lse, q, k, v, **ref):
    exact, exact_lse = reference(q, k, v, **ref)
    low, _ = reference(q, k, v, upcast=False, **ref)
    err = (out.float() - exact.float()).abs().max().item()
    base = (low.float() - exact.float()).abs().max().item()
    assert err <= 2 * base + 1e-5, f"max error {err} against the low-precision baseline {base}"
    finite = exact_lse.isfinite()
    assert torch.allclose(lse[finite], exact_lse[finite], atol=1e-3), "lse"


def inputs(b, s, hq, hkv, d, dtype, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return [torch.randn(b, s, h, d, device="cuda", dtype=dtype, generator=g)
            for h in (hq, hkv, hkv)]


def test_alibi_matches_the_reference():
    require_gpu()
    for dtype in (torch.bfloat16, torch.float16):
        q, k, v = inputs(2, 333, 8, 2, 128, dtype)
        slopes = torch.tensor([-2.0 ** (-8 * (h + 1) / 8) for h in range(8)], device="cuda")
        with torch.no_grad():
            out, lse = flashjit.attention(q, k, v, score_mod=ALIBI, aux={"slopes": slopes},
                                          return_lse=True)
        pos = torch.arange(333, device="cuda")
        bias = slopes[None, :, None, None] * (pos[None, None, None, :] - pos[None, None, :, None])
        check(out, lse, q, k, v, bias=bias)


def test_document_and_prefix_masks_match_the_reference():
    require_gpu()
    q, k, v = inputs(2, 300, 4, 4, 64, torch.bfloat16, seed=1)
    pos = torch.arange(300, device="cuda")
    docs = torch.stack([pos // 37, pos // 91]).to(torch.int32)
    with torch.no_grad():
        out, lse = flashjit.attention(q, k, v, mask_mod=DOCUMENTS,
                                      aux={"doc_ids": docs, "seqlen": 300}, return_lse=True)
    allowed = (docs[:, None, :, None] == docs[:, None, None, :])
    check(out, lse, q, k, v, allowed=allowed)
    with torch.no_grad():
        out, lse = flashjit.attention(q, k, v, mask_mod=PREFIX_LM, aux={"prefix": 50},
                                      return_lse=True)
    allowed = (pos[None, :] < 50) | (pos[None, :] <= pos[:, None])
    check(out, lse, q, k, v, allowed=allowed[None, None])


def test_causal_as_a_mask_mod_is_the_built_in_causal():
    require_gpu()
    q, k, v = inputs(2, 257, 8, 8, 128, torch.bfloat16, seed=2)
    with torch.no_grad():
        a = flashjit.attention(q, k, v, mask_mod=CAUSAL)
        b = flashjit.attention(q, k, v, causal=True)
    assert torch.equal(a, b)


def test_block_map_shared_over_batch_and_heads_equals_one_per_head():
    # Documents of 1..133 tokens shared by both sequences: mask_mod_qk_only's
    # one map and the map per (batch, head) list the same tiles, so the
    # results are bit-identical, and both match the reference; whole key
    # tiles are hidden (and skipped) and shown (no mask_mod call).
    require_gpu()
    q, k, v = inputs(2, 1000, 4, 2, 128, torch.bfloat16, seed=3)
    pos = torch.arange(1000, device="cuda")
    docs = ((pos // 133) + (pos % 211 == 7).cumsum(0)).to(torch.int32)
    shared = """
__device__ bool mask_mod(int b, int h, int q, int k, const Aux &aux) {
  return aux.doc_ids[q] == aux.doc_ids[k];
}
"""
    with torch.no_grad():
        a, lse_a = flashjit.attention(q, k, v, mask_mod=shared, aux={"doc_ids": docs},
                                      mask_mod_qk_only=True, return_lse=True)
        b, lse_b = flashjit.attention(q, k, v, mask_mod=shared, aux={"doc_ids": docs},
                                      return_lse=True)
    assert torch.equal(a, b) and torch.equal(lse_a, lse_b)
    allowed = docs[:, None] == docs[None, :]
    check(a, lse_a, q, k, v, allowed=allowed[None, None])


ALIBI_GRAD = """
__device__ float score_mod_grad(float score, int b, int h, int q, int k, const Aux &aux) {
  return 1.f;
}
"""
TANH_CAP = """
__device__ float score_mod(float score, int b, int h, int q, int k) {
  return 20.f * tanhf(score / 20.f);
}
"""
TANH_CAP_GRAD = """
__device__ float score_mod_grad(float score, int b, int h, int q, int k) {
  const float t = tanhf(score / 20.f);
  return 1.f - t * t;
}
"""


def grads(fn, q, k, v, dout):
    """(dq, dk, dv) of sum(fn(q, k, v) * dout)."""
    q, k, v = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    fn(q, k, v).backward(dout)
    return q.grad, k.grad, v.grad


def check_grads(got, q, k, v, dout, **ref):
    """DESIGN.md's gradient criterion: 3x the same-precision reference's error."""
    exact = grads(lambda a, b, c: reference(a, b, c, **ref)[0], q, k, v, dout)
    low = grads(lambda a, b, c: reference(a, b, c, upcast=False, **ref)[0], q, k, v, dout)
    for name, g, e, lo in zip(("dq", "dk", "dv"), got, exact, low):
        assert torch.isfinite(g).all(), f"{name}: not finite (poisoned output left)"
        err = (g.float() - e.float()).abs().max().item()
        base = (lo.float() - e.float()).abs().max().item()
        assert err <= 3 * base + 1e-5, f"{name}: max error {err} against the baseline {base}"


def test_gradients_of_score_mods_match_the_reference():
    # ALiBi and a tanh softcap written as score_mods, with their derivatives,
    # under GQA and an irregular length, both dtypes.
    require_gpu()
    for dtype in (torch.bfloat16, torch.float16):
        q, k, v = inputs(2, 333, 8, 2, 128, dtype, seed=4)
        dout = torch.randn_like(q)
        slopes = torch.tensor([-2.0 ** (-8 * (h + 1) / 8) for h in range(8)], device="cuda")
        pos = torch.arange(333, device="cuda")
        bias = slopes[None, :, None, None] * (pos[None, None, None, :] - pos[None, None, :, None])
        got = grads(lambda a, b, c: flashjit.attention(
            a, b, c, score_mod=ALIBI, score_mod_grad=ALIBI_GRAD, aux={"slopes": slopes}),
            q, k, v, dout)
        check_grads(got, q, k, v, dout, bias=bias)
        got = grads(lambda a, b, c: flashjit.attention(
            a, b, c, score_mod=TANH_CAP, score_mod_grad=TANH_CAP_GRAD), q, k, v, dout)
        # The reference's softcap: 20 tanh(s / 20) of the scaled scores.
        d = q.shape[-1]
        capped = lambda a, b, c: _capped_reference(a, b, c, 20.0)  # noqa: E731
        exact = grads(lambda a, b, c: capped(a.float(), b.float(), c.float()).to(dtype),
                      q, k, v, dout)
        low = grads(capped, q, k, v, dout)
        for name, g, e, lo in zip(("dq", "dk", "dv"), got, exact, low):
            err = (g.float() - e.float()).abs().max().item()
            base = (lo.float() - e.float()).abs().max().item()
            assert err <= 3 * base + 1e-5, f"softcap {name}: {err} against {base} (d={d})"


def _capped_reference(q, k, v, cap):
    hq = q.shape[2]
    k = k.repeat_interleave(hq // k.shape[2], dim=2)
    v = v.repeat_interleave(hq // v.shape[2], dim=2)
    scores = torch.einsum("bthd,bshd->bhts", q / math.sqrt(q.shape[-1]), k)
    p = torch.softmax((cap * torch.tanh(scores / cap)).float(), dim=-1).to(v.dtype)
    return torch.einsum("bhts,bshd->bthd", p, v)


def test_gradients_of_mask_mods_match_the_reference():
    # Documents per sequence (b read), and causal as a mask_mod against the
    # built-in causal's gradients.
    require_gpu()
    q, k, v = inputs(2, 300, 4, 4, 64, torch.bfloat16, seed=5)
    dout = torch.randn_like(q)
    pos = torch.arange(300, device="cuda")
    docs = torch.stack([pos // 37, pos // 91]).to(torch.int32)
    got = grads(lambda a, b, c: flashjit.attention(
        a, b, c, mask_mod=DOCUMENTS, aux={"doc_ids": docs, "seqlen": 300}), q, k, v, dout)
    allowed = (docs[:, None, :, None] == docs[:, None, None, :])
    check_grads(got, q, k, v, dout, allowed=allowed)
    got = grads(lambda a, b, c: flashjit.attention(a, b, c, mask_mod=CAUSAL,
                                                   mask_mod_qk_only=True), q, k, v, dout)
    allowed = pos[None, :] <= pos[:, None]
    check_grads(got, q, k, v, dout, allowed=allowed[None, None])


def test_errors():
    require_gpu()
    q, k, v = inputs(1, 64, 2, 2, 64, torch.bfloat16)
    q.requires_grad_(True)
    for call, message in (
            (lambda: flashjit.attention(q, k, v, score_mod=ALIBI, aux={"slopes": q.detach()}),
             "forward only"),
            (lambda: flashjit.attention(q.detach(), k, v, aux={"n": 1}), "without score_mod"),
            (lambda: flashjit.attention(q.detach(), k, v, score_mod=ALIBI,
                                        aux={"slopes": [1.0]}), "expected a CUDA tensor"),
            (lambda: flashjit.attention(q.detach(), k, v, score_mod=ALIBI,
                                        aux={"slopes": q.detach()}, mask_mod_qk_only=True),
             "without a mask_mod"),
            (lambda: flashjit.attention(q.detach(), k, v, score_mod_grad=ALIBI_GRAD),
             "without the score_mod"),
            (lambda: flashjit.attention(q.detach(), k, v, score_mod=1), "CUDA source text")):
        try:
            call()
        except (NotImplementedError, TypeError, ValueError) as e:
            assert message in str(e), str(e)
        else:
            raise AssertionError(f"no error for {message}")
    # A snippet that does not compile: NVRTC's message in the snippet's lines.
    try:
        flashjit.attention(q.detach(), k, v, score_mod="float score_mod(float s, int b, int h, "
                           "int q, int k) {\n  return s + nope;\n}\n")
    except RuntimeError as e:
        assert "score_mod(2): error" in str(e), str(e)
    else:
        raise AssertionError("a snippet that does not compile ran")


if __name__ == "__main__":
    sys.exit(run_tests(globals()))
