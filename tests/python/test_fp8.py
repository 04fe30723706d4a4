"""flashjit's fp8 (e4m3) forward from Python on the GPU (the sm90 family):
each case against the float64 reference of the DE-QUANTIZED inputs (codes
times descales, what the kernel reads), under the fp8 criterion of
reference/accuracy.h: RMSE <= 9.1e-3 (FlashAttention-3's figure). Prints one
`<case> RMSE <value>` line per case.

    FLASHJIT_LIB=build/libflashjit.so python3 tests/python/test_fp8.py

Inputs: standard normal, outliers (N(0,1) plus 0.1% of the entries from
N(0, 10^2), FlashAttention-3's test) and an attention sink (the first 4
keys' logits 8-12 above the rest). Cases: no mask, causal, window, softcap,
GQA 32/8, head dims 64, 128, 192/128 and 256, fp16 output, per-tensor and
strided descales, varlen (with 0- and 1-query sequences), paged K/V with
shuffled pages and decode over cache lengths 0, 1, 1000 and 131072
(attention_with_kvcache, e4m3 q and cache), split-KV, torch.compile; the
rotation of quantize_fp8 against outliers; every named error; an fp8
cache under 16-bit q (q quantized per row in the kernel) and its append. Outputs are poisoned
before every launch. Skips cleanly (exit 0) where torch or a CUDA device is
missing.
"""
import math
import os
import sys

os.environ.setdefault("FLASHJIT_POISON_OUTPUT", "1")  # before the binding loads
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_env import flashjit, require_gpu, run_tests, torch  # noqa: E402
from test_attention import attention_ref  # noqa: E402

RMSE_MAX = 9.1e-3  # reference/accuracy.h: kFp8RmseBound
# The LSE's bound: 1e-3 (fp32, as the 16-bit kernels) plus 2^-10 of the
# largest |scale q.k| the inputs allow (scale * max |q| * max |k|, row
# 2-norms): the fp8 wgmma accumulates Q K^T with fewer mantissa bits than
# fp32, so its error grows with the sum of |q_i k_i|, not with the score
# (reference/accuracy.h, Fp8AccuracyCriterion::lse_score_relative).
LSE_ATOL = 1e-3
LSE_SCORE_RELATIVE = 2.0 ** -10


def score_bound(q, k, scale=None):
    """scale * max |q| * max |k| over rows (the dims last): bounds |scale q.k|."""
    if q.numel() == 0 or k.numel() == 0:
        return 0.0
    scale = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    return scale * q.double().norm(dim=-1).max().item() * k.double().norm(dim=-1).max().item()


def _e4m3():
    return torch.float8_e4m3fn


# ---- inputs -------------------------------------------------------------------

def normal(*shape, gen):
    return torch.randn(*shape, device="cuda", generator=gen)


def outliers(*shape, gen):
    x = normal(*shape, gen=gen)
    picked = torch.rand(*shape, device="cuda", generator=gen) < 1e-3
    return torch.where(picked, normal(*shape, gen=gen) * 10, x)


def inputs(kind, b, sq, sk, hq, hkv, d, dv, seed=0):
    """fp32 (q, k, v) of `kind`: normal, outlier or sink."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    make = outliers if kind == "outlier" else normal
    q, k, v = make(b, sq, hq, d, gen=gen), make(b, sk, hkv, d, gen=gen), make(b, sk, hkv, dv,
                                                                               gen=gen)
    if kind == "sink":
        # Every query shares a component 8u along a random unit vector u and
        # the first 4 keys get a*u: their logits rise by 8 a / sqrt(d), about
        # 10 (the queries' own N(0,1) along u spreads it by ~1.25).
        u = normal(d, gen=gen)
        u /= u.norm()
        q += 8 * u
        k[:, :4] += (10 * math.sqrt(d) / 8) * u
    return q, k, v


def dequantize(x8, descale, heads_kv):
    """float64 values of e4m3 codes [b, s, h, d] times their descales."""
    x = x8.to(torch.float64)
    if descale.numel() == 1:
        return x * descale.double().reshape(())
    b, s, h, d = x.shape
    grid = descale.double().reshape(b, 1, heads_kv, 1, 1)
    return (x.reshape(b, s, heads_kv, h // heads_kv, d) * grid).reshape(x.shape)


def rmse(out, ref):
    return (out.double() - ref.double()).pow(2).mean().sqrt().item()


def report(label, out, ref, lse=None, ref_lse=None, bound=RMSE_MAX, scores=0.0):
    """Prints the case's RMSE; returns a failure message or None."""
    if out.shape != ref.shape:
        return f"{label}: shape {tuple(out.shape)}, expected {tuple(ref.shape)}"
    if not torch.isfinite(out).all():
        return f"{label}: non-finite output"
    error = rmse(out, ref)
    print(f"{label} RMSE {error:.3e}")
    if not error <= bound:
        return f"{label}: RMSE {error:.3e} > {bound:.1e}"
    if lse is not None:
        finite = torch.isfinite(ref_lse)
        if not torch.equal(finite, torch.isfinite(lse)):
            return f"{label}: LSE is infinite where the reference is not (or the reverse)"
        gap = (lse[finite].double() - ref_lse[finite].double()).abs().max().item() if (
            finite.any()) else 0.0
        lse_tol = LSE_ATOL + LSE_SCORE_RELATIVE * scores
        if gap > lse_tol:
            return f"{label}: LSE differs by {gap:.3e} > {lse_tol:.3e}"
    return None


def dense_case(label, kind, b, sq, sk, hq, hkv, d, dv, per="head", out_dtype=None, seed=0,
               **kw):
    q, k, v = inputs(kind, b, sq, sk, hq, hkv, d, dv, seed)
    q8, k8, v8, qd, kd, vd = flashjit.quantize_fp8(q, k, v, per=per)
    out, lse = flashjit.attention(q8, k8, v8, q_descale=qd, k_descale=kd, v_descale=vd,
                                  out_dtype=out_dtype, return_lse=True, **kw)
    want = out_dtype or torch.bfloat16
    if out.dtype != want:
        return f"{label}: output {out.dtype}, expected {want}"
    kw.pop("num_splits", None)
    kw.pop("pack_gqa", None)
    q_deq, k_deq = dequantize(q8, qd, hkv), dequantize(k8, kd, hkv)
    ref, ref_lse = attention_ref(q_deq, k_deq, dequantize(v8, vd, hkv), upcast=False, **kw)
    return report(label, out, ref, lse, ref_lse,
                  scores=score_bound(q_deq, k_deq, kw.get("softmax_scale")))


def _collect(cases):
    errors = [e for e in cases if e]
    assert not errors, "\n".join(errors)


# ---- dense ----------------------------------------------------------------------

MASKS = (("none", {}), ("causal", {"causal": True}), ("window", {"window": (96, 16)}))
DIMS = ((64, 64), (128, 128), (192, 128), (256, 256))


def test_masks_and_head_dims():
    require_gpu()
    _collect(dense_case(f"d={d}/{dv} {name}", "normal", 2, 333, 517, 4, 2, d, dv, seed=d, **kw)
             for d, dv in DIMS for name, kw in MASKS)


def test_input_kinds():
    """Standard normal, outlier and sink inputs at d = 64, 128, 256."""
    require_gpu()
    _collect(dense_case(f"{kind} d={d} {name}", kind, 2, 512, 1024, 8, 8, d, d, seed=7, **kw)
             for kind in ("normal", "outlier", "sink") for d in (64, 128, 256)
             for name, kw in MASKS[:2])


def test_gqa_softcap_fp16_out_and_descale_layouts():
    require_gpu()
    cases = [dense_case("GQA 32/8 causal", "normal", 1, 700, 700, 32, 8, 128, 128, causal=True),
             dense_case("GQA 32/8 softcap 30", "sink", 1, 257, 1100, 32, 8, 128, 128,
                        softcap=30.0),
             dense_case("GQA 32/8 packed", "normal", 2, 5, 2000, 32, 8, 128, 128, pack_gqa=True),
             dense_case("fp16 out", "outlier", 2, 300, 300, 4, 4, 128, 128,
                        out_dtype=torch.float16),
             dense_case("per tensor", "outlier", 2, 300, 450, 8, 2, 128, 128, per="tensor"),
             dense_case("split-KV 4", "normal", 2, 3, 4096, 16, 2, 128, 128, num_splits=4),
             dense_case("split-KV 8 causal", "normal", 1, 64, 8192, 8, 8, 64, 64,
                        num_splits=8, causal=True)]
    # Descales as strided views (a transposed [heads_kv, batch] buffer,
    # passed with its strides), then a per-tensor V factor beside per-head
    # Q/K ones of different layouts (packed into one by the binding).
    q, k, v = inputs("normal", 3, 200, 300, 8, 4, 128, 128, seed=3)
    q8, k8, v8, qd, kd, vd = flashjit.quantize_fp8(q, k, v)
    qt, kt, vt = (t.t().contiguous().t() for t in (qd, kd, vd))
    assert qt.stride() == (1, 3) and torch.equal(qt, qd)
    out = flashjit.attention(q8, k8, v8, q_descale=qt, k_descale=kt, v_descale=vt)
    ref, _ = attention_ref(dequantize(q8, qd, 4), dequantize(k8, kd, 4), dequantize(v8, vd, 4),
                           upcast=False)
    cases.append(report("strided descales", out, ref))
    vmax = dequantize(v8, vd, 4).abs().max().float()
    v8t = (dequantize(v8, vd, 4) / (vmax / 448)).clamp(-448, 448).to(_e4m3())
    vone = (vmax / 448).reshape(1)
    out = flashjit.attention(q8, k8, v8t, q_descale=qd, k_descale=kt, v_descale=vone)
    ref, _ = attention_ref(dequantize(q8, qd, 4), dequantize(k8, kd, 4),
                           dequantize(v8t, vone, 4), upcast=False)
    cases.append(report("mixed descale layouts", out, ref))
    _collect(cases)


def test_head_dim_padding():
    """A head dim that is not a multiple of 16 (e4m3 rows of whole 16 bytes)
    is padded with zero codes, as the 16-bit calls pad to 8."""
    require_gpu()
    _collect([dense_case("d=72/40 padded", "normal", 2, 100, 130, 4, 2, 72, 40, causal=True)])


def test_rotation_lowers_error_with_outliers():
    """quantize_fp8(rotate=True) against outliers: the output's RMSE against
    the float64 attention of the ORIGINAL inputs drops (both printed); each
    run passes the fp8 criterion against its own de-quantized inputs."""
    require_gpu()
    q, k, v = inputs("outlier", 2, 1024, 1024, 8, 8, 128, 128, seed=11)
    exact, _ = attention_ref(q.double(), k.double(), v.double(), upcast=False)
    errors, cases = {}, []
    for rotate in (False, True):
        q8, k8, v8, qd, kd, vd = flashjit.quantize_fp8(q, k, v, rotate=rotate)
        out = flashjit.attention(q8, k8, v8, q_descale=qd, k_descale=kd, v_descale=vd)
        ref, _ = attention_ref(dequantize(q8, qd, 8), dequantize(k8, kd, 8),
                               dequantize(v8, vd, 8), upcast=False)
        cases.append(report(f"outlier rotate={rotate}", out, ref))
        errors[rotate] = rmse(out, exact)
        print(f"outlier rotate={rotate} RMSE against the unquantized inputs {errors[rotate]:.3e}")
    if not errors[True] < errors[False]:
        cases.append(f"rotation did not lower the error: {errors}")
    _collect(cases)


def test_torch_compile():
    require_gpu()
    q, k, v = inputs("normal", 2, 128, 256, 8, 2, 128, 128, seed=5)
    q8, k8, v8, qd, kd, vd = flashjit.quantize_fp8(q, k, v)

    def step(q8, k8, v8, qd, kd, vd):
        return flashjit.attention(q8, k8, v8, causal=True, q_descale=qd, k_descale=kd,
                                  v_descale=vd, out_dtype=torch.float16)

    eager = step(q8, k8, v8, qd, kd, vd)
    compiled = torch.compile(step, fullgraph=True)(q8, k8, v8, qd, kd, vd)
    assert compiled.dtype == torch.float16 and torch.equal(compiled, eager)


# ---- varlen ---------------------------------------------------------------------

def quantize_sequences(xs, heads_kv):
    """Per-sequence quantization of [1, s, h, d] fp32 tensors: (packed codes
    [total, h, d], descales [batch, heads_kv]); an empty sequence's factor
    is 1."""
    codes, scales = [], []
    for x in xs:
        if x.shape[1] == 0:
            codes.append(torch.zeros(x.shape[1:], dtype=_e4m3(), device="cuda"))
            scales.append(torch.ones(1, heads_kv, device="cuda"))
            continue
        x8, _, _, xd, _, _ = flashjit.quantize_fp8(x, x[:, :, :heads_kv], x[:, :, :heads_kv])
        codes.append(x8[0])
        scales.append(xd)
    return torch.cat(codes), torch.cat(scales)


def test_varlen():
    require_gpu()
    lens_q, lens_k = [1, 0, 129, 300, 7], [50, 17, 129, 700, 1]
    hq, hkv, d = 8, 2, 128
    gen = torch.Generator(device="cuda").manual_seed(9)
    qs = [normal(1, n, hq, d, gen=gen) for n in lens_q]
    ks = [normal(1, n, hkv, d, gen=gen) for n in lens_k]
    vs = [normal(1, n, hkv, d, gen=gen) for n in lens_k]
    q8, qd = quantize_sequences(qs, hkv)
    k8, kd = quantize_sequences(ks, hkv)
    v8, vd = quantize_sequences(vs, hkv)
    cu_q = torch.tensor([0] + list(torch.tensor(lens_q).cumsum(0)), dtype=torch.int32,
                        device="cuda")
    cu_k = torch.tensor([0] + list(torch.tensor(lens_k).cumsum(0)), dtype=torch.int32,
                        device="cuda")
    cases = []
    for name, kw in MASKS[:2]:
        out, lse = flashjit.attention_varlen(q8, k8, v8, cu_q, cu_k, max(lens_q), max(lens_k),
                                             return_lse=True, q_descale=qd, k_descale=kd,
                                             v_descale=vd, **kw)
        refs, ref_lses, scores = [], [], 0.0
        for b, (nq, nk) in enumerate(zip(lens_q, lens_k)):
            rows = slice(int(cu_q[b]), int(cu_q[b + 1]))
            keys = slice(int(cu_k[b]), int(cu_k[b + 1]))
            q_deq = dequantize(q8[None, rows], qd[b:b + 1], hkv)
            k_deq = dequantize(k8[None, keys], kd[b:b + 1], hkv)
            o, l = attention_ref(q_deq, k_deq, dequantize(v8[None, keys], vd[b:b + 1], hkv),
                                 upcast=False, **kw)
            refs.append(o[0])
            ref_lses.append(l[0])
            scores = max(scores, score_bound(q_deq, k_deq))
        cases.append(report(f"varlen {name}", out, torch.cat(refs), lse,
                            torch.cat(ref_lses, dim=1), scores=scores))
    _collect(cases)


# ---- KV cache: paged and decode (e4m3 q and cache: kv_dtype same) ------------------

def shuffled_pages(k8, v8, page, seed):
    """[b, cap, h, d] codes as shuffled pages: (k_cache, v_cache, block_table)."""
    b, cap, h, d = k8.shape
    width = cap // page
    g = torch.Generator(device="cpu").manual_seed(seed)
    order = torch.randperm(b * width + 3, generator=g)[: b * width].to("cuda")
    k_cache = torch.zeros((b * width + 3, page, h, d), dtype=_e4m3(), device="cuda")
    v_cache = torch.zeros((b * width + 3, page, h, v8.shape[3]), dtype=_e4m3(), device="cuda")
    k_cache[order] = k8.reshape(b * width, page, h, d)
    v_cache[order] = v8.reshape(b * width, page, h, v8.shape[3])
    return k_cache, v_cache, order.to(torch.int32).reshape(b, width)


def cache_case(label, lens, cap, sq, hq, hkv, d, page=0, seed=0, **kw):
    q, k, v = inputs("normal", len(lens), sq, cap, hq, hkv, d, d, seed)
    q8, k8, v8, qd, kd, vd = flashjit.quantize_fp8(q, k, v)
    del q, k, v
    seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    if page:
        k_cache, v_cache, table = shuffled_pages(k8, v8, page, seed)
    else:
        k_cache, v_cache, table = k8, v8, None
    out, lse = flashjit.attention_with_kvcache(q8, k_cache, v_cache, cache_seqlens=seqlens,
                                               block_table=table, return_lse=True, q_descale=qd,
                                               k_scale=kd, v_scale=vd, **kw)
    kw.pop("num_splits", None)
    refs, ref_lses, scores = [], [], 0.0
    for b, n in enumerate(lens):
        if n == 0:
            refs.append(torch.zeros(1, sq, hq, d, dtype=torch.float64, device="cuda"))
            ref_lses.append(torch.full((1, hq, sq), float("inf"), device="cuda"))
            continue
        q_deq = dequantize(q8[b:b + 1], qd[b:b + 1], hkv)
        k_deq = dequantize(k8[b:b + 1, :n], kd[b:b + 1], hkv)
        o, l = attention_ref(q_deq, k_deq, dequantize(v8[b:b + 1, :n], vd[b:b + 1], hkv),
                             upcast=False, **kw)
        refs.append(o)
        ref_lses.append(l)
        scores = max(scores, score_bound(q_deq, k_deq))
    return report(label, out, torch.cat(refs), lse, torch.cat(ref_lses), scores=scores)


def test_paged_kvcache():
    require_gpu()
    _collect([cache_case(f"paged {page} {name}", [700, 1, 0, 333], 768, sq, 16, 4, 128,
                         page=page, seed=page, **kw)
              for page in (16, 64, 256) for sq, name, kw in ((1, "decode", {}),
                                                             (37, "chunk causal",
                                                              {"causal": True}))])


def test_decode_cache_lengths():
    """Decode steps over cache lengths 0, 1, 1000 and 131072 (32/8 heads,
    d = 128), the library's split choice and 8 splits, contiguous and
    paged."""
    require_gpu()
    lens = [0, 1, 1000, 131072]
    _collect([cache_case("decode 0/1/1000/131072", lens, 131072, 1, 32, 8, 128),
              cache_case("decode 0/1/1000/131072 split 8", lens, 131072, 1, 32, 8, 128,
                         num_splits=8),
              cache_case("decode 0/1/1000/131072 paged 64", lens, 131072, 1, 32, 8, 128,
                         page=64)])


def test_fp8_cache_under_16bit_q():
    """An e4m3 cache under bf16 and fp16 q (kv_dtype e4m3; the kernel
    quantizes q per row): decode and a causal chunk over contiguous and
    shuffled-page caches, against the reference of the 16-bit q and the
    de-quantized cache; and new bf16 keys appended into the cache quantized
    with its scale, byte for byte as torch rounds them."""
    require_gpu()
    cases = []
    for dtype in (torch.bfloat16, torch.float16):
        for page, sq, kw in ((0, 1, {}), (64, 1, {}), (16, 37, {"causal": True})):
            lens = [700, 1, 0, 333]
            q, k, v = inputs("normal", len(lens), sq, 768, 16, 4, 128, 128, seed=page + sq)
            _, k8, v8, _, kd, vd = flashjit.quantize_fp8(q, k, v, per="tensor")
            q16 = q.to(dtype)
            seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
            if page:
                k_cache, v_cache, table = shuffled_pages(k8, v8, page, seed=page)
            else:
                k_cache, v_cache, table = k8, v8, None
            out = flashjit.attention_with_kvcache(q16, k_cache, v_cache, cache_seqlens=seqlens,
                                                  block_table=table, k_scale=kd, v_scale=vd,
                                                  **kw)
            assert out.dtype == dtype, out.dtype
            refs = []
            for b, n in enumerate(lens):
                if n == 0:
                    refs.append(torch.zeros(1, sq, 16, 128, dtype=torch.float64, device="cuda"))
                    continue
                o, _ = attention_ref(q16[b:b + 1].double(), dequantize(k8[b:b + 1, :n], kd, 4),
                                     dequantize(v8[b:b + 1, :n], vd, 4), upcast=False, **kw)
                refs.append(o)
            cases.append(report(f"{str(dtype)[6:]} q e4m3 cache page {page} sq {sq}", out,
                                torch.cat(refs)))
    # Appending bf16 keys: quantized with the cache's scale, as torch rounds.
    q = torch.randn(2, 1, 8, 128, device="cuda", dtype=torch.bfloat16)
    k_cache = torch.zeros(2, 256, 2, 128, device="cuda", dtype=_e4m3())
    v_cache = torch.zeros_like(k_cache)
    k_new = torch.randn(2, 1, 2, 128, device="cuda", dtype=torch.bfloat16)
    v_new = torch.randn(2, 1, 2, 128, device="cuda", dtype=torch.bfloat16)
    scale = torch.full((1,), 0.01, device="cuda")
    flashjit.attention_with_kvcache(q, k_cache, v_cache, k=k_new, v=v_new,
                                    cache_seqlens=torch.tensor([100, 7], dtype=torch.int32,
                                                               device="cuda"),
                                    k_scale=scale, v_scale=scale)
    for b, pos in enumerate((100, 7)):
        for cache, new in ((k_cache, k_new), (v_cache, v_new)):
            want = (new[b, 0].float() / 0.01).clamp(-448, 448).to(_e4m3())
            if not torch.equal(cache[b, pos].view(torch.uint8), want.view(torch.uint8)):
                cases.append(f"append: sequence {b}'s new row differs from torch's rounding")
    _collect(cases)


# ---- named errors ------------------------------------------------------------------

def _expect(exc, needle, fn):
    try:
        fn()
    except exc as e:
        if needle not in str(e):
            return f"{needle!r} not in {str(e)!r}"
        return None
    except Exception as e:  # noqa: BLE001 - reported as the wrong kind
        return f"{needle!r}: {type(e).__name__}: {e}"
    return f"no {exc.__name__} for {needle!r}"


def test_named_errors():
    require_gpu()
    e4m3 = _e4m3()
    q = torch.randn(2, 16, 4, 64, device="cuda")
    k = torch.randn(2, 32, 2, 64, device="cuda")
    q8, k8, v8, qd, kd, vd = flashjit.quantize_fp8(q, k, k)
    qb, kb = q.bfloat16(), k.bfloat16()
    A, V, C = ("flashjit.attention: ", "flashjit.attention_varlen: ",
               "flashjit.attention_with_kvcache: ")
    attention = flashjit.attention
    cu = torch.tensor([0, 16, 32], dtype=torch.int32, device="cuda")
    cuk = torch.tensor([0, 32, 64], dtype=torch.int32, device="cuda")
    fp8 = dict(q_descale=qd, k_descale=kd, v_descale=vd)
    cases = [
        (TypeError, A + "q_descale is missing: q is float8_e4m3fn",
         lambda: attention(q8, k8, v8, k_descale=kd, v_descale=vd)),
        (TypeError, A + "v_descale is missing",
         lambda: attention(q8, k8, v8, q_descale=qd, k_descale=kd)),
        (TypeError, A + "q_descale is given but q is torch.bfloat16",
         lambda: attention(qb, kb, kb, q_descale=qd)),
        (ValueError, A + "k_descale has shape (2, 3), expected [batch, heads_kv] = [2, 2]",
         lambda: attention(q8, k8, v8, q_descale=qd, k_descale=torch.ones(2, 3, device="cuda"),
                           v_descale=vd)),
        (TypeError, A + "q_descale must be float32",
         lambda: attention(q8, k8, v8, q_descale=qd.double(), k_descale=kd, v_descale=vd)),
        (ValueError, A + "v_descale is on cpu but q is on cuda:0",
         lambda: attention(q8, k8, v8, q_descale=qd, k_descale=kd, v_descale=vd.cpu())),
        (TypeError, A + "k is torch.bfloat16 but q is torch.float8_e4m3fn: fp8 attention takes "
                        "q, k and v all in e4m3",
         lambda: attention(q8, kb, v8, **fp8)),
        (TypeError, A + "v is torch.bfloat16 but q is torch.float8_e4m3fn",
         lambda: attention(q8, k8, kb, **fp8)),
        (TypeError, A + "k is torch.float8_e4m3fn but q is torch.bfloat16: e4m3 keys and values "
                        "under 16-bit queries are a KV cache",
         lambda: attention(qb, k8, v8, k_descale=kd, v_descale=vd)),
        (TypeError, A + "out_dtype must be torch.bfloat16 or torch.float16",
         lambda: attention(q8, k8, v8, out_dtype=torch.float32, **fp8)),
        (ValueError, A + "out_dtype is torch.float16 but q is torch.bfloat16",
         lambda: attention(qb, kb, kb, out_dtype=torch.float16)),
        (NotImplementedError, A + "q requires grad, but fp8 (float8_e4m3fn) attention is "
                                  "forward only",
         lambda: attention(q8.clone().requires_grad_(), k8, v8, **fp8)),
        (NotImplementedError, A + "k_descale requires grad",
         lambda: attention(q8, k8, v8, q_descale=qd, k_descale=kd.clone().requires_grad_(),
                           v_descale=vd)),
        (TypeError, V + "q_descale is missing",
         lambda: flashjit.attention_varlen(q8.reshape(32, 4, 64), k8.reshape(64, 2, 64),
                                           v8.reshape(64, 2, 64), cu, cuk, 16, 32,
                                           k_descale=kd, v_descale=vd)),
        (ValueError, V + "q_descale has shape (3, 2), expected [batch, heads_kv] = [2, 2]",
         lambda: flashjit.attention_varlen(q8.reshape(32, 4, 64), k8.reshape(64, 2, 64),
                                           v8.reshape(64, 2, 64), cu, cuk, 16, 32,
                                           q_descale=torch.ones(3, 2, device="cuda"),
                                           k_descale=kd, v_descale=vd)),
        (TypeError, C + "k_scale is missing: k_cache is float8_e4m3fn",
         lambda: flashjit.attention_with_kvcache(qb, k8, v8, v_scale=vd)),
        (TypeError, C + "k_scale is given but k_cache is torch.bfloat16",
         lambda: flashjit.attention_with_kvcache(qb, kb, kb, k_scale=kd)),
        (ValueError, C + "v_scale has shape (3,), expected [batch, heads_kv] = [2, 2], "
                         "[heads_kv] = [2] or one element",
         lambda: flashjit.attention_with_kvcache(qb, k8, v8, k_scale=kd,
                                                 v_scale=torch.ones(3, device="cuda"))),
        (TypeError, C + "q_descale is missing: q is float8_e4m3fn",
         lambda: flashjit.attention_with_kvcache(q8, k8, v8, k_scale=kd, v_scale=vd)),
        (ValueError, C + "head dims (40, 40) must be multiples of 16 for a "
                         "torch.float8_e4m3fn cache",
         lambda: flashjit.attention_with_kvcache(
             torch.zeros(2, 1, 4, 40, dtype=e4m3, device="cuda"),
             torch.zeros(2, 64, 2, 40, dtype=e4m3, device="cuda"),
             torch.zeros(2, 64, 2, 40, dtype=e4m3, device="cuda"), q_descale=qd, k_scale=kd,
             v_scale=vd)),
    ]
    _collect(_expect(exc, needle, fn) for exc, needle, fn in cases)


if __name__ == "__main__":
    sys.exit(run_tests(globals()))
