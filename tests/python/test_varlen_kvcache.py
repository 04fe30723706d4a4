"""flashjit.attention_varlen over a KV cache (the serving call:
flash_attn_varlen_func with block_table and seqused_k) against the fp32
reference of test_attention.py, applied per sequence to the keys gathered
from its pages, on the GPU.

    FLASHJIT_LIB=build/libflashjit.so python3 tests/python/test_varlen_kvcache.py

Mixed decode/prefill batches (sequences of 1 query and of hundreds, 0 keys,
fewer keys than queries, up to 4000 keys) over shuffled page tables of page
sizes 16, 64 and 256 (pages no sequence owns hold NaN, table entries past a
sequence's pages point outside the cache, the slots of a last page past the
count hold finite noise); GQA 8/2; causal (bottom-right), window, softcap;
bf16 and fp16; head dims 64, 128 and padded ones (59, 111: not multiples of
8, so q, k and the whole cache are zero-padded). The result is also checked
against flashjit.attention_with_kvcache on the same cache (one query per
sequence), against flashjit.attention_varlen over the same keys packed
without a cache, and the contiguous seqused_k variant against the packed
call with cu_seqlens_k trimmed. Criterion (test_attention.py's): per
sequence, max|out - ref| <= 2 * max|out_lowprec - ref| + 1e-5, the same
bound between two flashjit results. Outputs are poisoned before every
launch (FLASHJIT_POISON_OUTPUT=1) and every row a sequence owns must come
back finite. torch.compile (fullgraph) and opcheck of the custom op; bad
arguments refused before any launch. Skips cleanly (exit 0) where torch or a
CUDA device is missing.
"""
import os
import sys

os.environ.setdefault("FLASHJIT_POISON_OUTPUT", "1")  # before the binding loads
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_env import config_field, flashjit, recorded_configs, reference_kw, require_gpu  # noqa: E402
from gpu_env import run_tests, torch  # noqa: E402
from test_attention import attention_ref  # noqa: E402

# A mixed batch: decode steps (1 query), prefill chunks (17..300 queries over
# their cached prefix and themselves), sequences without keys, and one with
# fewer keys than queries (under causal its first rows see no key).
LENS_Q = [1, 1, 300, 1, 17, 128, 1, 5, 64]
LENS_K = [1, 0, 2500, 3001, 17, 828, 4000, 0, 40]


def cumulative(lens):
    out = [0]
    for n in lens:
        out.append(out[-1] + n)
    return torch.tensor(out, dtype=torch.int32, device="cuda")


def offsets(lens):
    out = [0]
    for n in lens:
        out.append(out[-1] + n)
    return out


def paged_cache(lens_k, page, hkv, d, dv, dtype, seed, spare_pages=3):
    """Each sequence's keys in ceil(n / page) pages at shuffled places:
    (k_cache, v_cache, block_table). Pages no sequence owns hold NaN (never
    read); the slots of a sequence's last page past its count hold finite
    noise (read, then masked); table entries past a sequence's pages lie
    outside [0, num_pages) (never read)."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    counts = [-(-n // page) for n in lens_k]
    width = max(counts + [1]) + 1
    owned = sum(counts)
    num_pages = owned + spare_pages
    order = torch.randperm(num_pages, generator=g)[:owned].tolist()
    k_cache = torch.full((num_pages, page, hkv, d), float("nan"), dtype=dtype, device="cuda")
    v_cache = torch.full((num_pages, page, hkv, dv), float("nan"), dtype=dtype, device="cuda")
    table = torch.empty(len(lens_k), width, dtype=torch.int32)
    first = 0
    for b, (n, c) in enumerate(zip(lens_k, counts)):
        pages = order[first:first + c]
        first += c
        table[b, :c] = torch.tensor(pages, dtype=torch.int32)
        table[b, c:] = num_pages + 7 + b if b % 2 else -1 - b
        if c:
            rows = c * page
            kb = torch.randn(rows, hkv, d, device="cuda", dtype=dtype)
            vb = torch.randn(rows, hkv, dv, device="cuda", dtype=dtype)
            kb[n:] *= 4  # the last page's tail: finite, and visible if it leaked
            vb[n:] *= 4
            idx = torch.tensor(pages, device="cuda")
            k_cache[idx] = kb.view(c, page, hkv, d)
            v_cache[idx] = vb.view(c, page, hkv, dv)
    return k_cache, v_cache, table.cuda()


def gather(cache, table, b, n):
    """Sequence b's first n keys (or values), read from its pages."""
    page = cache.shape[1]
    c = -(-n // page)
    pages = table[b, :c].long()
    return cache[pages].reshape(c * page, *cache.shape[2:])[:n]


def references(q, keys, values, lens_q, **kw):
    """Per sequence: (ref out [lq, hq, dv], ref lse [hq, lq], low-precision
    out), with O = 0 and LSE = +inf for a sequence without keys."""
    kw = reference_kw(kw)
    refs = []
    q_off = offsets(lens_q)
    for b, lq in enumerate(lens_q):
        qs = q[None, q_off[b]:q_off[b] + lq]
        if keys[b].shape[0] == 0:
            zero = torch.zeros(lq, q.shape[1], values[b].shape[-1], dtype=q.dtype,
                               device=q.device)
            inf = torch.full((q.shape[1], lq), float("inf"), device=q.device)
            refs.append((zero, inf, zero))
            continue
        ref, ref_lse = attention_ref(qs, keys[b][None], values[b][None], **kw)
        low, _ = attention_ref(qs, keys[b][None], values[b][None], upcast=False, **kw)
        refs.append((ref[0], ref_lse[0], low[0]))
    return refs


def check_reference(label, out, lse, refs, lens_q):
    """out/lse against the per-sequence references: finite rows, the
    criterion, the LSE (when given)."""
    errors = []
    q_off = offsets(lens_q)
    for b, (ref, ref_lse, low) in enumerate(refs):
        q0, lq = q_off[b], lens_q[b]
        if lq == 0:
            continue
        got = out[q0:q0 + lq]
        bad = (~torch.isfinite(got)).sum().item()
        if bad:
            errors.append(f"{label}: seq {b}: {bad} outputs not finite (unwritten?)")
            continue
        err = (got.float() - ref.float()).abs().max().item()
        base = (low.float() - ref.float()).abs().max().item()
        if not err <= 2 * base + 1e-5:
            errors.append(f"{label}: seq {b}: max err {err:.3g} > 2 * {base:.3g} + 1e-5")
        if lse is None:
            continue
        got_lse = lse[:, q0:q0 + lq]
        finite = torch.isfinite(ref_lse)
        if not torch.equal(finite, torch.isfinite(got_lse)):
            errors.append(f"{label}: seq {b}: LSE finiteness differs")
        elif finite.any():
            lse_err = (got_lse[finite] - ref_lse[finite]).abs().max().item()
            if not lse_err <= 1e-3:
                errors.append(f"{label}: seq {b}: LSE err {lse_err:.3g}")
        if (~finite).any() and not torch.isposinf(got_lse[~finite]).all():
            errors.append(f"{label}: seq {b}: a row without keys has LSE != +inf")
    assert not errors, "\n".join(errors)


def check_same(label, a, b, refs, lens_q):
    """Two flashjit results of the same attention agree within the
    criterion's bound, sequence by sequence (exactly 0 without keys)."""
    errors = []
    q_off = offsets(lens_q)
    for i, (ref, _, low) in enumerate(refs):
        q0, lq = q_off[i], lens_q[i]
        if lq == 0:
            continue
        x, y = a[q0:q0 + lq].float(), b[q0:q0 + lq].float()
        err = (x - y).abs().max().item()
        base = (low.float() - ref.float()).abs().max().item()
        if not err <= 2 * base + 1e-5:
            errors.append(f"{label}: seq {i}: max difference {err:.3g} > 2 * {base:.3g} + 1e-5")
    assert not errors, "\n".join(errors)


def serving_case(lens_q, lens_k, hq, hkv, d, dtype, page, seed=0, dv=None, packed=True, **kw):
    """The serving call over a shuffled paged cache against the reference,
    and (packed=True) against attention_varlen over the same keys packed."""
    torch.manual_seed(seed)
    dv = dv or d
    label = f"q={lens_q} k={lens_k} h={hq}/{hkv} d={d}/{dv} {dtype} page={page} {kw}"
    tq = sum(lens_q)
    q = torch.randn(tq, hq, d, device="cuda", dtype=dtype)
    k_cache, v_cache, table = paged_cache(lens_k, page, hkv, d, dv, dtype, seed)
    cu_q = cumulative(lens_q)
    used = torch.tensor(lens_k, dtype=torch.int32, device="cuda")
    max_q, max_k = max(lens_q), max(lens_k)
    with torch.no_grad():
        out, lse = flashjit.attention_varlen(q, k_cache, v_cache, cu_q, None, max_q, max_k,
                                             block_table=table, seqused_k=used,
                                             return_lse=True, **kw)
    torch.cuda.synchronize()
    assert out.shape == (tq, hq, dv) and out.dtype == dtype, f"{label}: out {tuple(out.shape)}"
    assert lse.shape == (hq, tq) and lse.dtype == torch.float32, f"{label}: lse {lse.shape}"
    keys = [gather(k_cache, table, b, n) for b, n in enumerate(lens_k)]
    values = [gather(v_cache, table, b, n) for b, n in enumerate(lens_k)]
    refs = references(q, keys, values, lens_q, **kw)
    check_reference(label, out, lse, refs, lens_q)
    if packed and sum(lens_k):
        # The same keys packed, no cache: flashjit.attention_varlen's own path.
        plain = flashjit.attention_varlen(q, torch.cat(keys), torch.cat(values), cu_q,
                                          cumulative(lens_k), max_q, max_k, **kw)
        check_same(label + " vs packed", out, plain, refs, lens_q)
    return q, k_cache, v_cache, table, used, out, lse, refs


def test_mixed_batch_paged():
    require_gpu()
    for page in (16, 64, 256):
        serving_case(LENS_Q, LENS_K, 8, 2, 128, torch.bfloat16, page, seed=page, causal=True)
        serving_case(LENS_Q, LENS_K, 8, 2, 64, torch.float16, page, seed=page + 1,
                     window=(100, 7))
        serving_case(LENS_Q, LENS_K, 8, 2, 128, torch.float16, page, seed=page + 2,
                     softcap=30.0, causal=True)
    serving_case(LENS_Q, LENS_K, 8, 2, 64, torch.bfloat16, 64, seed=3)  # no mask
    serving_case(LENS_Q, LENS_K, 8, 8, 128, torch.bfloat16, 64, seed=4, window=(256, 0))
    serving_case(LENS_Q, LENS_K, 8, 1, 64, torch.float16, 16, seed=5, causal=True,
                 softmax_scale=0.05)


def test_splits_and_pack_gqa():
    """num_splits (1, 3) and pack_gqa (True, False) reach the serving call's
    C call (and the packed call's beside it) and leave the result alone."""
    require_gpu()
    for num_splits in (1, 3):
        for pack_gqa in (True, False):
            kw = dict(num_splits=num_splits, pack_gqa=pack_gqa)
            with recorded_configs() as seen:
                serving_case(LENS_Q, LENS_K, 8, 2, 128, torch.bfloat16, 64,
                             seed=30 + num_splits, causal=True, **kw)
            want = (num_splits, 1 if pack_gqa else 2)  # flashjit.h: PACK_GQA_ON / _OFF
            got = [(symbol, (config_field(c, "splits"), config_field(c, "pack_gqa")))
                   for symbol, c in seen]
            expected = [("flashjit_forward_varlen_kvcache", want), ("flashjit_forward_varlen", want)]
            assert got == expected, f"{kw}: {got}, expected {expected}"


def test_padded_head_dims():
    # d = 59 / 111: q, k and the whole cache are zero-padded to 64 / 112, v's
    # extra output columns dropped; the default scale stays 1/sqrt(d).
    require_gpu()
    serving_case(LENS_Q, LENS_K, 8, 2, 59, torch.bfloat16, 64, seed=6, causal=True)
    serving_case([3, 1, 40], [100, 999, 40], 6, 3, 111, torch.float16, 16, seed=7, dv=59,
                 softcap=20.0)
    serving_case([3, 1, 40], [100, 999, 40], 4, 2, 128, torch.bfloat16, 256, seed=9, dv=59,
                 window=(50, 0))


def test_without_lse_and_without_queries():
    require_gpu()
    q, k_cache, v_cache, table, used, out, _, refs = serving_case(
        [1, 33, 1], [700, 900, 1], 8, 2, 128, torch.bfloat16, 64, seed=8, causal=True,
        packed=False)
    with torch.no_grad():
        again = flashjit.attention_varlen(q, k_cache, v_cache, cumulative([1, 33, 1]), None, 33,
                                          900, causal=True, block_table=table, seqused_k=used)
    check_reference("return_lse=False", again, None, refs, [1, 33, 1])
    empty = q[:0]
    none = flashjit.attention_varlen(empty, k_cache, v_cache, cumulative([0, 0, 0]), None, 0,
                                     900, block_table=table, seqused_k=used)
    assert none.shape == (0, 8, 128)


def test_decode_batch_matches_attention_with_kvcache():
    """One query per sequence: the serving call and attention_with_kvcache
    over the same pages agree (and both match the reference)."""
    require_gpu()
    lens_k = [0, 1, 17, 1000, 4096, 2047]
    lens_q = [1] * len(lens_k)
    for page, dtype, kw in ((16, torch.bfloat16, dict(causal=True)),
                            (64, torch.float16, dict(softcap=30.0)),
                            (256, torch.bfloat16, dict(window=(300, 0)))):
        q, k_cache, v_cache, table, used, out, lse, refs = serving_case(
            lens_q, lens_k, 32, 8, 128, dtype, page, seed=page + 10, **kw)
        b, hq, d = len(lens_k), q.shape[1], q.shape[2]
        label = f"decode page={page} {dtype} {kw}"
        with torch.no_grad():
            dec, dec_lse = flashjit.attention_with_kvcache(
                q.view(b, 1, hq, d), k_cache, v_cache, cache_seqlens=used, block_table=table,
                return_lse=True, **kw)
        dec = dec.view(b, hq, dec.shape[-1])
        check_same(label + " vs attention_with_kvcache", out, dec, refs, lens_q)
        dec_lse = dec_lse.view(b, hq).t()  # [b, hq, 1] -> the varlen [hq, total_q]
        finite = torch.isfinite(lse)
        assert torch.equal(finite, torch.isfinite(dec_lse)), f"{label}: LSE finiteness"
        if finite.any():
            lse_err = (lse[finite] - dec_lse[finite]).abs().max().item()
            assert lse_err <= 1e-3, f"{label}: LSE differs from attention_with_kvcache by {lse_err}"


def test_paged_counts_from_cu_seqlens_k():
    """block_table without seqused_k: each sequence's count is cu_seqlens_k's
    difference; the same result as with seqused_k."""
    require_gpu()
    q, k_cache, v_cache, table, used, out, _, refs = serving_case(
        LENS_Q, LENS_K, 8, 2, 128, torch.bfloat16, 64, seed=20, causal=True, packed=False)
    with torch.no_grad():
        by_offsets = flashjit.attention_varlen(q, k_cache, v_cache, cumulative(LENS_Q),
                                               cumulative(LENS_K), max(LENS_Q), max(LENS_K),
                                               causal=True, block_table=table)
        # cu_seqlens_k given beside seqused_k: seqused_k decides.
        both = flashjit.attention_varlen(q, k_cache, v_cache, cumulative(LENS_Q),
                                         cumulative(LENS_K), max(LENS_Q), max(LENS_K),
                                         causal=True, block_table=table, seqused_k=used)
    check_same("counts from cu_seqlens_k", out, by_offsets, refs, LENS_Q)
    check_same("cu_seqlens_k and seqused_k", out, both, refs, LENS_Q)


def test_contiguous_seqused_k_matches_trimmed_packed():
    """seqused_k without block_table: packed k/v with room past each
    sequence's used keys (finite noise there), against the packed call over
    the used keys only."""
    require_gpu()
    for dtype, d, kw in ((torch.bfloat16, 128, dict(causal=True)),
                         (torch.float16, 64, dict(window=(64, 3), softcap=10.0)),
                         (torch.bfloat16, 59, dict())):
        torch.manual_seed(30 + d)
        lens_q = [1, 200, 1, 7, 3]
        used_k = [900, 350, 0, 7, 2000]
        room = [1000, 350, 16, 100, 2001]  # rows allocated per sequence
        hq, hkv = 8, 2
        q = torch.randn(sum(lens_q), hq, d, device="cuda", dtype=dtype)
        k = 4 * torch.randn(sum(room), hkv, d, device="cuda", dtype=dtype)
        v = 4 * torch.randn(sum(room), hkv, d, device="cuda", dtype=dtype)
        r_off = offsets(room)
        keys = [k[r_off[b]:r_off[b] + n] for b, n in enumerate(used_k)]
        values = [v[r_off[b]:r_off[b] + n] for b, n in enumerate(used_k)]
        for t in keys + values:
            t.div_(4)  # the used rows at unit scale, the room past them at 4x
        cu_q = cumulative(lens_q)
        used = torch.tensor(used_k, dtype=torch.int32, device="cuda")
        label = f"contiguous seqused_k {dtype} d={d} {kw}"
        with torch.no_grad():
            out, lse = flashjit.attention_varlen(q, k, v, cu_q, cumulative(room), max(lens_q),
                                                 max(used_k), seqused_k=used, return_lse=True,
                                                 **kw)
            trimmed = flashjit.attention_varlen(q, torch.cat(keys), torch.cat(values), cu_q,
                                                cumulative(used_k), max(lens_q), max(used_k),
                                                **kw)
        torch.cuda.synchronize()
        refs = references(q, keys, values, lens_q, **kw)
        check_reference(label, out, lse, refs, lens_q)
        check_same(label + " vs trimmed packed", out, trimmed, refs, lens_q)


def test_gradients_are_refused_and_no_grad_runs():
    require_gpu()
    q, k_cache, v_cache, table, used, out, _, refs = serving_case(
        [2, 1], [50, 60], 4, 2, 64, torch.bfloat16, 16, seed=40, packed=False)
    cu_q = cumulative([2, 1])
    q.requires_grad_()
    before = flashjit.compile_count()
    try:
        flashjit.attention_varlen(q, k_cache, v_cache, cu_q, None, 2, 60, block_table=table,
                                  seqused_k=used)
        raise AssertionError("a q that requires grad was accepted over a KV cache")
    except NotImplementedError as e:
        assert "forward only" in str(e) and "q requires grad" in str(e), str(e)
    assert flashjit.compile_count() == before
    with torch.no_grad():
        again = flashjit.attention_varlen(q, k_cache, v_cache, cu_q, None, 2, 60,
                                          block_table=table, seqused_k=used)
    assert not again.requires_grad
    check_same("under no_grad", again, out, refs, [2, 1])


def test_bad_arguments():
    """Refused with a message naming the argument, before any launch."""
    require_gpu()
    dev = "cuda"
    bf = torch.bfloat16
    q = torch.randn(4, 8, 64, device=dev, dtype=bf)
    kc = torch.zeros(6, 16, 2, 64, device=dev, dtype=bf)
    table = torch.zeros(2, 3, dtype=torch.int32, device=dev)
    used = torch.tensor([5, 30], dtype=torch.int32, device=dev)
    cu_q = cumulative([1, 3])
    packed = torch.zeros(40, 2, 64, device=dev, dtype=bf)
    cu_k = cumulative([10, 30])

    def paged(**kw):
        args = dict(q=q, k=kc, v=kc, cu_seqlens_q=cu_q, cu_seqlens_k=None, max_seqlen_q=3,
                    max_seqlen_k=30, block_table=table, seqused_k=used)
        args.update(kw)
        return lambda: flashjit.attention_varlen(**args)

    def contiguous(**kw):
        args = dict(q=q, k=packed, v=packed, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
                    max_seqlen_q=3, max_seqlen_k=30, seqused_k=used)
        args.update(kw)
        return lambda: flashjit.attention_varlen(**args)

    cases = [
        ("table int64", TypeError, "block_table must be an int32 tensor",
         paged(block_table=table.long())),
        ("table 1-D", TypeError, "block_table must be an int32 tensor", paged(block_table=used)),
        ("table rows", ValueError, "block_table has 3 rows, expected batch",
         paged(block_table=torch.zeros(3, 3, dtype=torch.int32, device=dev))),
        ("table on the CPU", ValueError, "block_table is on cpu", paged(block_table=table.cpu())),
        ("seqused_k int64", TypeError, "seqused_k must be an int32 tensor",
         paged(seqused_k=used.long())),
        ("seqused_k length", ValueError, "seqused_k has 3 entries, expected batch",
         paged(seqused_k=torch.zeros(3, dtype=torch.int32, device=dev))),
        ("seqused_k on the CPU", ValueError, "seqused_k is on cpu", paged(seqused_k=used.cpu())),
        ("page 1024", ValueError, "page_size 1024",
         paged(k=torch.zeros(1, 1024, 2, 64, device=dev, dtype=bf),
               v=torch.zeros(1, 1024, 2, 64, device=dev, dtype=bf))),
        ("no pages", ValueError, "0 pages", paged(k=kc[:0], v=kc[:0])),
        ("max_seqlen_k past the capacity", ValueError, "capacity", paged(max_seqlen_k=49)),
        ("max_seqlen_q past total_q", ValueError, "max_seqlen_q=5", paged(max_seqlen_q=5)),
        ("no counts", ValueError, "cu_seqlens_k or seqused_k is required",
         paged(seqused_k=None)),
        ("cu_seqlens_k entries", ValueError, "cu_seqlens_k has 4 entries",
         paged(cu_seqlens_k=cumulative([1, 2, 3]))),
        ("3-D cache", ValueError, "paged cache [num_pages, page_size",
         paged(k=packed, v=packed)),
        ("v dtype", TypeError, "v is torch.float16", paged(v=kc.half())),
        ("k/v shapes", ValueError, "must agree", paged(v=kc[:5])),
        ("q/k head dims", ValueError, "q has head_dim 64 but k has 32",
         paged(k=kc[..., :32], v=kc[..., :32])),
        ("heads", ValueError, "heads_q (8) must be a multiple of heads_kv (3)",
         paged(k=torch.zeros(6, 16, 3, 64, device=dev, dtype=bf),
               v=torch.zeros(6, 16, 3, 64, device=dev, dtype=bf))),
        ("q on the CPU", ValueError, "q must be a CUDA tensor", paged(q=q.cpu())),
        ("softcap", ValueError, "softcap must be >= 0", paged(softcap=-1.0)),
        ("contiguous without cu_seqlens_k", ValueError, "cu_seqlens_k is required",
         contiguous(cu_seqlens_k=None)),
        ("contiguous 4-D k", ValueError, "k must be 3-D", contiguous(k=kc, v=kc)),
        ("contiguous max_seqlen_k", ValueError, "max_seqlen_k=41 exceeds",
         contiguous(max_seqlen_k=41)),
        ("contiguous seqused_k length", ValueError, "seqused_k has 1 entries",
         contiguous(seqused_k=used[:1])),
        ("grad", NotImplementedError, "forward only",
         paged(q=q.clone().requires_grad_())),
    ]
    before = flashjit.compile_count()
    errors = []
    for label, exc, expected, call in cases:
        try:
            call()
            errors.append(f"{label}: accepted")
        except exc as e:
            if expected not in str(e) or not str(e).startswith("flashjit.attention_varlen: "):
                errors.append(f"{label}: {e!r} lacks {expected!r}")
        except Exception as e:  # the wrong type
            errors.append(f"{label}: {type(e).__name__}: {e} (expected {exc.__name__})")
    assert not errors, "\n".join(errors)
    assert flashjit.compile_count() == before, "a refused call compiled a kernel"


def test_compile_fullgraph_and_opcheck():
    """The serving call under torch.compile(fullgraph=True) through the
    custom op torch.ops.flashjit.attention_varlen_kvcache, and opcheck of the
    op (schema, fake implementation, dynamic shapes)."""
    require_gpu()
    import flashjit.ops  # noqa: F401  registers torch.ops.flashjit.*
    lens_q, lens_k = [1, 40, 1], [300, 200, 0]
    q, k_cache, v_cache, table, used, out, _, refs = serving_case(
        lens_q, lens_k, 8, 2, 64, torch.bfloat16, 16, seed=50, causal=True, packed=False)
    cu_q = cumulative(lens_q)
    torch.library.opcheck(torch.ops.flashjit.attention_varlen_kvcache.default,
                          (q, k_cache, v_cache, cu_q, None, 40, 300, True, -1, 0, 0.0, None,
                           table, used))

    def f(q, k_cache, v_cache, table, used):
        return flashjit.attention_varlen(q, k_cache, v_cache, cu_q, None, 40, 300, causal=True,
                                         block_table=table, seqused_k=used)

    with torch.no_grad():
        got = torch.compile(f, fullgraph=True)(q, k_cache, v_cache, table, used)
    check_same("torch.compile", got, out, refs, lens_q)


if __name__ == "__main__":
    sys.exit(run_tests(globals()))
