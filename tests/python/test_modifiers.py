"""flashjit.attention with a caller's score_mod / mask_mod
against a PyTorch reference that applies the same bias and mask, on the GPU.

    FLASHJIT_LIB=build/libflashjit.so python3 tests/python/test_modifiers.py

ALiBi over per-head slopes, a document mask over per-token ids (int32
tensor aux), a prefix-LM mask over an int aux, both dtypes; causal as a
mask_mod equal to the built-in causal; gradients of score_mods (with their
score_mod_grad) and mask_mods against the reference's autograd; learned
sinks (forward, LSE, d q/k/v and d sinks); the shipped modifiers of
flashjit.mods; FlexAttention's block masks passed as they are; a
score_mod_grad defined in the score_mod's own source; the shared block map
chosen by the library where a mask_mod reads neither b nor h; the
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


def test_shipped_modifiers_match_the_reference():
    # flashjit.mods: ALiBi (its forward and its gradients), documents with
    # ALiBi at once (two modifiers' aux merged), a sliding window with sinks,
    # relative bias from a table; irregular lengths, GQA.
    require_gpu()
    from flashjit import mods
    q, k, v = inputs(2, 333, 8, 2, 128, torch.bfloat16, seed=7)
    slopes = torch.tensor([-2.0 ** (-8 * (h + 1) / 8) for h in range(8)], device="cuda")
    pos = torch.arange(333, device="cuda")
    dist = pos[None, None, None, :] - pos[None, None, :, None]
    bias = slopes[None, :, None, None] * dist
    docs = torch.stack([pos // 37, pos // 91]).to(torch.int32)
    allowed_docs = docs[:, None, :, None] == docs[:, None, None, :]
    with torch.no_grad():
        out, lse = flashjit.attention(q, k, v, score_mod=mods.alibi(slopes), return_lse=True)
        check(out, lse, q, k, v, bias=bias)
        out, lse = flashjit.attention(q, k, v, score_mod=mods.alibi(slopes),
                                      mask_mod=mods.document(docs), return_lse=True)
        check(out, lse, q, k, v, bias=bias, allowed=allowed_docs)
        out, lse = flashjit.attention(q, k, v, mask_mod=mods.sliding_window(64, sinks=4),
                                      return_lse=True)
        window = (dist <= 0) & ((-dist < 64) | (pos[None, None, None, :] < 4))
        check(out, lse, q, k, v, allowed=window)
        table = torch.randn(8, 2 * 16 + 1, device="cuda")
        out, lse = flashjit.attention(q, k, v, score_mod=mods.relative_bias(table, 16),
                                      return_lse=True)
        rel = table[:, (dist.clamp(-16, 16) + 16)[0, 0]]  # [h, t, s]
        check(out, lse, q, k, v, bias=rel[None])
    dout = torch.randn_like(q)
    got = grads(lambda a, b, c: flashjit.attention(a, b, c, score_mod=mods.alibi(slopes)),
                q, k, v, dout)
    check_grads(got, q, k, v, dout, bias=bias)
    for call, message in (
            (lambda: flashjit.attention(q, k, v, mask_mod=mods.alibi(slopes)),
             "is not a mask modifier: pass it as score_mod="),
            (lambda: flashjit.attention(q, k, v, score_mod=mods.alibi(slopes[:4])),
             "expected (8,): one per query head"),
            (lambda: flashjit.attention(q, k, v, mask_mod=mods.document(docs[:, :100])),
             "expected (2, 333)"),
            (lambda: flashjit.attention(q, k, v, score_mod=mods.alibi(slopes),
                                        aux={"slopes": slopes}), "given twice"),
            (lambda: mods.alibi(slopes.double()), "must be a CUDA float32 tensor")):
        try:
            call()
        except (TypeError, ValueError) as e:
            assert message in str(e), str(e)
        else:
            raise AssertionError(f"no error for {message}")


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
                                      mask_mod_qk_only=False, return_lse=True)
        # Left to the library: the probe finds neither b nor h read, so the
        # shared map, the same bits.
        c, lse_c = flashjit.attention(q, k, v, mask_mod=shared, aux={"doc_ids": docs},
                                      return_lse=True)
    assert torch.equal(a, b) and torch.equal(lse_a, lse_b)
    assert torch.equal(a, c) and torch.equal(lse_a, lse_c)
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
    # A sliding window with sinks (a mask of (q, k) and two integers): the
    # forward's edge tiles masked from runs, both maps kept across calls;
    # the second call's dK and dV are the same bits (dQ's atomics may
    # reorder).
    from flashjit import mods
    window = mods.sliding_window(64, sinks=4)
    first = grads(lambda a, b, c: flashjit.attention(a, b, c, mask_mod=window), q, k, v, dout)
    again = grads(lambda a, b, c: flashjit.attention(a, b, c, mask_mod=window), q, k, v, dout)
    allowed = (pos[None, :] <= pos[:, None]) & (
        (pos[:, None] - pos[None, :] < 64) | (pos[None, :] < 4))
    check_grads(first, q, k, v, dout, allowed=allowed[None, None])
    assert torch.equal(first[1], again[1]) and torch.equal(first[2], again[2])


def test_score_mod_grad_in_the_score_mod_source():
    # The derivative defined beside score_mod in one snippet: the backward
    # finds it (with aux: ALiBi; without: a tanh softcap), the gradients
    # those of the reference; given apart too, the call is refused.
    require_gpu()
    q, k, v = inputs(2, 333, 8, 2, 128, torch.bfloat16, seed=14)
    dout = torch.randn_like(q)
    slopes = torch.tensor([-2.0 ** (-8 * (h + 1) / 8) for h in range(8)], device="cuda")
    pos = torch.arange(333, device="cuda")
    bias = slopes[None, :, None, None] * (pos[None, None, None, :] - pos[None, None, :, None])
    got = grads(lambda a, b, c: flashjit.attention(
        a, b, c, score_mod=ALIBI + ALIBI_GRAD, aux={"slopes": slopes}), q, k, v, dout)
    check_grads(got, q, k, v, dout, bias=bias)
    apart = grads(lambda a, b, c: flashjit.attention(
        a, b, c, score_mod=ALIBI, score_mod_grad=ALIBI_GRAD, aux={"slopes": slopes}),
        q, k, v, dout)
    for name, g, h in zip(("dq", "dk", "dv"), got, apart):
        err = (g.float() - h.float()).abs().max().item()
        assert err <= 1e-2, f"{name}: in the snippet and apart differ by {err}"
    capped = grads(lambda a, b, c: flashjit.attention(a, b, c, score_mod=TANH_CAP + TANH_CAP_GRAD),
                   q, k, v, dout)
    exact = grads(lambda a, b, c: _capped_reference(a.float(), b.float(), c.float(), 20.0)
                  .to(torch.bfloat16), q, k, v, dout)
    low = grads(lambda a, b, c: _capped_reference(a, b, c, 20.0), q, k, v, dout)
    for name, g, e, lo in zip(("dq", "dk", "dv"), capped, exact, low):
        err = (g.float() - e.float()).abs().max().item()
        base = (lo.float() - e.float()).abs().max().item()
        assert err <= 3 * base + 1e-5, f"softcap in the snippet {name}: {err} against {base}"
    qg = q.detach().clone().requires_grad_(True)
    for call, exc, message in (
            (lambda: flashjit.attention(qg, k, v, score_mod=ALIBI + ALIBI_GRAD,
                                        score_mod_grad=ALIBI_GRAD, aux={"slopes": slopes}),
             ValueError, "give one of them"),
            (lambda: flashjit.attention(qg, k, v, score_mod=ALIBI, aux={"slopes": slopes}),
             NotImplementedError, "define `float score_mod_grad(float score, int b, int h, "
                                  "int q, int k, const Aux &aux)`")):
        try:
            call()
        except exc as e:
            assert message in str(e), str(e)
        else:
            raise AssertionError(f"no {exc.__name__} for {message}")


def test_the_library_finds_masks_of_q_and_k_alone():
    # mask_mod_qk_only=None (the default): a mask that reads neither b nor h
    # (one set of documents for every sequence, or b folded away) gets one
    # block map for every batch and head, the same bits as the flag; one
    # that reads b (documents per sequence) or h (a window per head) keeps a
    # map per (batch, head) and matches the reference; False forces that.
    # The probe compiles once: a repeat with other lengths compiles nothing.
    require_gpu()
    pos = torch.arange(1024, device="cuda")
    docs = torch.stack([pos // 137, pos // 291]).to(torch.int32)
    shared = ("__device__ bool mask_mod(int b, int h, int q, int k, const Aux &aux) {\n"
              "  return aux.doc_ids[q + b * 0] == aux.doc_ids[k];\n}\n")
    per_head = ("__device__ bool mask_mod(int b, int h, int q, int k, const Aux &aux) {\n"
                "  return k <= q && q - k < aux.windows[h];\n}\n")
    one = {"doc_ids": docs[0].contiguous()}
    windows = torch.tensor([16, 100, 333, 1000], device="cuda", dtype=torch.int32)
    for mask_mod, aux, shape in ((shared, one, (1, 1, 8, 8)),
                                 (DOCUMENTS, {"doc_ids": docs, "seqlen": 1024}, (2, 4, 8, 8)),
                                 (per_head, {"windows": windows}, (2, 4, 8, 8))):
        found = flashjit.create_block_mask(mask_mod, 2, 4, 1024, 1024, aux=aux)
        assert tuple(found.kv_indices.shape) == shape, (mask_mod, found)
    forced = flashjit.create_block_mask(shared, 2, 4, 1024, 1024, aux=one, mask_mod_qk_only=False)
    assert tuple(forced.kv_indices.shape) == (2, 4, 8, 8), forced

    q, k, v = inputs(2, 1000, 4, 2, 128, torch.bfloat16, seed=15)
    with torch.no_grad():
        outs = [flashjit.attention(q, k, v, mask_mod=shared, aux=one, mask_mod_qk_only=flag,
                                   return_lse=True) for flag in (None, True, False)]
    for out, lse in outs[1:]:
        assert torch.equal(outs[0][0], out) and torch.equal(outs[0][1], lse)
    allowed = docs[0, None, None, :1000, None] == docs[0, None, None, None, :1000]
    check(*outs[0], q, k, v, allowed=allowed)
    before = flashjit.compile_count()
    q2, k2, v2 = inputs(2, 777, 4, 2, 128, torch.bfloat16, seed=16)
    with torch.no_grad():
        flashjit.attention(q2, k2, v2, mask_mod=shared, aux=one)
    assert flashjit.compile_count() == before, "a new length compiled (the probe or a kernel)"
    with torch.no_grad():
        out, lse = flashjit.attention(q, k, v, mask_mod=per_head, aux={"windows": windows},
                                      return_lse=True)
    p = torch.arange(1000, device="cuda")
    allowed = (p[None, None, None, :] <= p[None, None, :, None]) & (
        p[None, None, :, None] - p[None, None, None, :] < windows[None, :, None, None])
    check(out, lse, q, k, v, allowed=allowed)


def test_flex_block_masks_are_taken_as_they_are():
    # A FlexAttention BlockMask (create_block_mask at its own 128 x 128 and
    # at 64 x 256, per batch and head and broadcast) stands in for the
    # kernel's pre-pass: the same outputs as without it within the
    # criterion, forward and gradients; a block mask without a mask_mod,
    # or of other lengths, is refused by name.
    require_gpu()
    from torch.nn.attention.flex_attention import create_block_mask
    q, k, v = inputs(2, 1000, 4, 2, 128, torch.bfloat16, seed=7)
    dout = torch.randn_like(q)
    pos = torch.arange(1000, device="cuda")
    docs = torch.stack([pos // 137, pos // 291]).to(torch.int32)
    allowed = (docs[:, None, :, None] == docs[:, None, None, :]) & (
        pos[None, None, None, :] <= pos[None, None, :, None])

    def flex_mask(b, h, qi, ki):
        return (docs[b, qi] == docs[b, ki]) & (ki <= qi)

    aux = {"doc_ids": docs, "seqlen": 1000}
    causal_docs = DOCUMENTS.replace("aux.doc_ids[b * aux.seqlen + k];",
                                    "aux.doc_ids[b * aux.seqlen + k] && k <= q;")
    for size, heads in (((128, 128), 4), ((64, 256), None)):
        mask = create_block_mask(flex_mask, 2, heads, 1000, 1000, device="cuda",
                                 BLOCK_SIZE=size)
        with torch.no_grad():
            out, lse = flashjit.attention(q, k, v, mask_mod=causal_docs, aux=aux,
                                          block_mask=mask, return_lse=True)
        check(out, lse, q, k, v, allowed=allowed)
        got = grads(lambda a, b, c: flashjit.attention(a, b, c, mask_mod=causal_docs, aux=aux,
                                                       block_mask=mask), q, k, v, dout)
        check_grads(got, q, k, v, dout, allowed=allowed)
    short = create_block_mask(flex_mask, 2, None, 700, 1000, device="cuda")
    for call, message in (
            (lambda: flashjit.attention(q, k, v, block_mask=mask), "without a mask_mod"),
            (lambda: flashjit.attention(q, k, v, mask_mod=causal_docs, aux=aux,
                                        block_mask=short), "build the mask for this call's"),
            (lambda: flashjit.attention(q, k, v, mask_mod=causal_docs, aux=aux,
                                        block_mask=object()), "expected a FlexAttention")):
        try:
            with torch.no_grad():
                call()
        except (TypeError, ValueError, RuntimeError) as e:
            assert message in str(e), str(e)
        else:
            raise AssertionError(f"no error for {message}")


def test_create_block_mask_lists_what_flex_lists():
    # flashjit.create_block_mask of a CUDA mask_mod gives FlexAttention's
    # lists for the same mask (lengths of whole blocks, where the two agree
    # on the edge blocks), per (batch, head) and shared; attention with it
    # matches the reference, forward and gradients, at irregular lengths.
    require_gpu()
    from torch.nn.attention.flex_attention import create_block_mask
    pos = torch.arange(1024, device="cuda")
    docs = torch.stack([pos // 137, pos // 291]).to(torch.int32)
    aux = {"doc_ids": docs, "seqlen": 1024}
    causal_docs = DOCUMENTS.replace("aux.doc_ids[b * aux.seqlen + k];",
                                    "aux.doc_ids[b * aux.seqlen + k] && k <= q;")

    def flex_mask(b, h, qi, ki):
        return (docs[b, qi] == docs[b, ki]) & (ki <= qi)

    ours = flashjit.create_block_mask(causal_docs, 2, 3, 1024, 1024, aux=aux)
    flex = create_block_mask(flex_mask, 2, 3, 1024, 1024, device="cuda")
    assert ours.BLOCK_SIZE == (128, 128), ours
    for name in ("kv_num_blocks", "full_kv_num_blocks"):
        assert torch.equal(getattr(ours, name), getattr(flex, name).to(torch.int32)), name
    for num, indices in (("kv_num_blocks", "kv_indices"),
                         ("full_kv_num_blocks", "full_kv_indices")):
        counts = getattr(ours, num)
        a, b = getattr(ours, indices), getattr(flex, indices).to(torch.int32)
        for row in zip(*torch.nonzero(counts >= 0, as_tuple=True)):
            n = int(counts[row])
            assert torch.equal(a[row][:n], b[row][:n]), (indices, row)
    shared = flashjit.create_block_mask(
        "__device__ bool mask_mod(int b, int h, int q, int k, const Aux &aux) {\n"
        "  return aux.doc_ids[q] == aux.doc_ids[k];\n}\n", 2, 3, 1024, 1024,
        aux={"doc_ids": docs[0].contiguous()}, mask_mod_qk_only=True)
    assert shared.kv_num_blocks.shape == (1, 1, 8), shared
    shipped = flashjit.create_block_mask(flashjit.mods.document(docs), 2, 3, 1024, 1024)
    assert shipped.kv_indices.shape == (2, 3, 8, 8), shipped

    q, k, v = inputs(2, 1000, 4, 2, 128, torch.bfloat16, seed=9)
    dout = torch.randn_like(q)
    p = torch.arange(1000, device="cuda")
    allowed = (docs[:, None, :1000, None] == docs[:, None, None, :1000]) & (
        p[None, None, None, :] <= p[None, None, :, None])
    mask = flashjit.create_block_mask(causal_docs, 2, 4, 1000, 1000, aux=aux,
                                      block_size=(64, 256))
    with torch.no_grad():
        out, lse = flashjit.attention(q, k, v, mask_mod=causal_docs, aux=aux, block_mask=mask,
                                      return_lse=True)
    check(out, lse, q, k, v, allowed=allowed)
    got = grads(lambda a, b, c: flashjit.attention(a, b, c, mask_mod=causal_docs, aux=aux,
                                                   block_mask=mask), q, k, v, dout)
    check_grads(got, q, k, v, dout, allowed=allowed)
    try:
        flashjit.create_block_mask(causal_docs, 2, 4, 1000, 1000, aux={"doc_ids": docs})
    except ValueError as e:
        assert "aux" in str(e), str(e)
    else:
        raise AssertionError("a missing aux value did not raise")


def sink_reference(q, k, v, sinks, causal=False, upcast=True):
    """(out, lse) of attention with learned sinks: each head's sink logit
    joins the softmax as a key without a value (GPT-OSS)."""
    dtype = q.dtype
    if upcast:
        q, k, v = q.float(), k.float(), v.float()
    b, sq, hq, d = q.shape
    sk = k.shape[1]
    k = k.repeat_interleave(hq // k.shape[2], dim=2)
    v = v.repeat_interleave(hq // v.shape[2], dim=2)
    scores = torch.einsum("bthd,bshd->bhts", q / math.sqrt(d), k).float()
    if causal:  # bottom-right aligned, as the built-in causal
        i = torch.arange(sq, device=q.device)[:, None]
        j = torch.arange(sk, device=q.device)[None, :]
        scores = scores.masked_fill(j > i + sk - sq, float("-inf"))
    sink = sinks.float()[None, :, None, None].expand(b, hq, sq, 1)
    full = torch.cat([scores, sink], dim=-1)
    lse = torch.logsumexp(full, dim=-1)
    p = torch.softmax(full, dim=-1)[..., :sk]
    return torch.einsum("bhts,bshd->bthd", p.to(v.dtype), v).to(dtype), lse


def test_learned_sinks_forward_and_gradients_match_the_reference():
    # GQA 8/2, an irregular length, full and causal with more queries than
    # keys (the first rows see only their sink: O = 0, LSE = the sink);
    # gradients of q, k, v and the sinks (bf16 sinks: d sinks comes back in
    # bf16) against the reference's autograd.
    require_gpu()
    for causal, sq, sk in ((False, 333, 333), (True, 300, 211)):
        g = torch.Generator(device="cuda").manual_seed(11)
        q = torch.randn(2, sq, 8, 128, device="cuda", dtype=torch.bfloat16, generator=g)
        k, v = (torch.randn(2, sk, 2, 128, device="cuda", dtype=torch.bfloat16, generator=g)
                for _ in range(2))
        sinks = torch.tensor([(h % 5 - 2) * 1.7 + 0.3 for h in range(8)], device="cuda")
        out, lse = flashjit.attention(q, k, v, causal=causal, sinks=sinks, return_lse=True)
        exact, exact_lse = sink_reference(q, k, v, sinks, causal)
        low, _ = sink_reference(q, k, v, sinks, causal, upcast=False)
        err = (out.float() - exact.float()).abs().max().item()
        base = (low.float() - exact.float()).abs().max().item()
        assert err <= 2 * base + 1e-5, f"causal={causal}: out error {err}, baseline {base}"
        assert torch.allclose(lse, exact_lse, atol=1e-3), f"causal={causal}: lse"
        if causal:
            assert torch.equal(out[:, :sq - sk], torch.zeros_like(out[:, :sq - sk]))
            assert torch.allclose(lse[:, :, :sq - sk], sinks[None, :, None].expand(2, 8, sq - sk))

        dout = torch.randn_like(q)
        leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
        bf16_sinks = sinks.to(torch.bfloat16).requires_grad_(True)
        flashjit.attention(*leaves, causal=causal, sinks=bf16_sinks).backward(dout)
        got = [t.grad for t in leaves]
        assert bf16_sinks.grad.dtype == torch.bfloat16
        ref_sinks = bf16_sinks.detach().float()

        def reference_grads(upcast):
            ins = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
            s = ref_sinks.clone().requires_grad_(True)
            sink_reference(*ins, s, causal, upcast)[0].backward(dout)
            return [t.grad for t in ins] + [s.grad]

        exact_g, low_g = reference_grads(True), reference_grads(False)
        for name, gg, e, lo in zip(("dq", "dk", "dv"), got, exact_g, low_g):
            assert torch.isfinite(gg).all(), f"{name}: not finite (poisoned output left)"
            err = (gg.float() - e.float()).abs().max().item()
            base = (lo.float() - e.float()).abs().max().item()
            assert err <= 3 * base + 1e-5, f"causal={causal} {name}: {err} against {base}"
        # d sinks per head: within what rounding O to bf16 moves D = rowsum(dO
        # * O) (2^-8 of sum |dO * O| per row, weighted by the sink's
        # probability, twice), plus its own rounding to bf16.
        prob = torch.exp(ref_sinks[None, :, None] - exact_lse)  # [b, h, t]
        magnitude = (prob * (dout.float() * exact.float()).abs().sum(-1).transpose(1, 2)).sum((0, 2))
        err = (bf16_sinks.grad.float() - exact_g[3]).abs()
        base = (low_g[3].float() - exact_g[3]).abs()
        bound = 3 * base + 2 * 2.0 ** -8 * magnitude + 2.0 ** -8 * exact_g[3].abs()
        assert (err <= bound).all(), f"causal={causal} d sinks: {err.tolist()} > {bound.tolist()}"
        assert exact_g[3].abs().max() > 1e-2, "d sinks trivially zero"


def test_errors():
    require_gpu()
    q, k, v = inputs(1, 64, 2, 2, 64, torch.bfloat16)
    q.requires_grad_(True)
    for call, message in (
            (lambda: flashjit.attention(q, k, v, score_mod=ALIBI,
                                        aux={"slopes": torch.ones(2, device="cuda")}),
             "forward only"),
            (lambda: flashjit.attention(q.detach(), k, v, score_mod=ALIBI,
                                        aux={"slopes": q.detach()}),
             "aux['slopes'] is a torch.bfloat16 tensor: expected one of"),
            (lambda: flashjit.attention(q.detach(), k, v, aux={"n": 1}), "without score_mod"),
            (lambda: flashjit.attention(q.detach(), k, v, score_mod=ALIBI,
                                        aux={"slopes": [1.0]}), "expected a CUDA tensor"),
            (lambda: flashjit.attention(q.detach(), k, v, score_mod=ALIBI,
                                        aux={"slopes": q.detach()}, mask_mod_qk_only=True),
             "without a mask_mod"),
            (lambda: flashjit.attention(q.detach(), k, v, score_mod_grad=ALIBI_GRAD),
             "without the score_mod"),
            (lambda: flashjit.attention(q.detach(), k, v, mask_mod=CAUSAL, mask_mod_qk_only=1),
             "must be None, True or False"),
            (lambda: flashjit.attention(q.detach(), k, v, score_mod=1), "CUDA source text"),
            (lambda: flashjit.attention(q.detach(), k, v, sinks=torch.zeros(3, device="cuda")),
             "expected (2,), one logit per query head"),
            (lambda: flashjit.attention(q.detach(), k, v, sinks=torch.zeros(2, device="cuda",
                                                                            dtype=torch.int32)),
             "expected a floating-point"),
            (lambda: flashjit.attention(q.detach(), k, v, sinks=torch.zeros(2)), "but q is on"),
            (lambda: flashjit.attention(q.detach(), k, v, sinks=[0.0, 0.0]),
             "must be a torch.Tensor")):
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
