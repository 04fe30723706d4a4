"""flashjit.attention_with_kvcache against the fp32 reference of
test_attention.py, applied per sequence to the keys it holds, on the GPU.

    FLASHJIT_LIB=build/libflashjit.so python3 tests/python/test_kvcache.py

Contiguous and paged caches (shuffled block tables, page sizes 16/64/256),
cache_seqlens differing per sequence (0 and 1 included) or an int, k/v
appended in place (the cache afterwards equals the reference's), GQA, causal,
window, softcap, both dtypes, return_lse, pack_gqa True and False (their
configs reaching the library, the result unchanged), bad arguments. Outputs
are poisoned
before every launch (FLASHJIT_POISON_OUTPUT=1). Skips cleanly (exit 0) where
torch or a CUDA device is missing.
"""
import os
import sys

os.environ.setdefault("FLASHJIT_POISON_OUTPUT", "1")  # before the binding loads
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_env import config_field, flashjit, recorded_configs, reference_kw, require_gpu  # noqa: E402
from gpu_env import run_tests, torch  # noqa: E402
from test_attention import attention_ref  # noqa: E402


def paged(k, v, page, seed):
    """[b, s, h, d] k/v as a cache of pages of `page` rows at shuffled places:
    (k_cache, v_cache, block_table). Unused pages (two spares) hold NaN."""
    b, s, h, d = k.shape
    width = s // page
    g = torch.Generator(device="cpu").manual_seed(seed)
    order = torch.randperm(b * width + 2, generator=g)[: b * width].to(k.device)
    k_cache = torch.full((b * width + 2, page, h, d), float("nan"), dtype=k.dtype,
                         device=k.device)
    v_cache = torch.full((b * width + 2, page, h, v.shape[3]), float("nan"), dtype=v.dtype,
                         device=v.device)
    k_cache[order] = k.reshape(b * width, page, h, d)
    v_cache[order] = v.reshape(b * width, page, h, v.shape[3])
    return k_cache, v_cache, order.to(torch.int32).reshape(b, width)


def reference(q, k, v, lens, **kw):
    """Per sequence: attention over its first lens[b] keys; 0 keys -> O 0, LSE +inf."""
    kw = reference_kw(kw)
    outs, lses = [], []
    for i in range(q.shape[0]):
        n = int(lens[i])
        if n == 0:
            outs.append(torch.zeros_like(q[i:i + 1, ..., : v.shape[3]]))
            lses.append(torch.full((1, q.shape[2], q.shape[1]), float("inf"), device=q.device))
            continue
        o, lse = attention_ref(q[i:i + 1], k[i:i + 1, :n], v[i:i + 1, :n], **kw)
        outs.append(o)
        lses.append(lse)
    return torch.cat(outs), torch.cat(lses)


def run_case(b, sq, cap, hq, hkv, d, dtype, page=0, new=0, lens=None, seed=0, **kw):
    torch.manual_seed(seed)
    dev = "cuda"
    q = torch.randn(b, sq, hq, d, device=dev, dtype=dtype)
    k = torch.randn(b, cap, hkv, d, device=dev, dtype=dtype)
    v = torch.randn(b, cap, hkv, d, device=dev, dtype=dtype)
    if lens is None:
        lens = torch.randint(0, cap - new + 1, (b,), dtype=torch.int32)
    lens = torch.as_tensor(lens, dtype=torch.int32).to(dev)
    k_new = torch.randn(b, new, hkv, d, device=dev, dtype=dtype) if new else None
    v_new = torch.randn(b, new, hkv, d, device=dev, dtype=dtype) if new else None
    # The reference's keys: the cache with this step's keys written at lens[b].
    k_ref, v_ref = k.clone(), v.clone()
    for i in range(b):
        n = int(lens[i])
        if new:
            k_ref[i, n:n + new] = k_new[i]
            v_ref[i, n:n + new] = v_new[i]
    if page:
        k_cache, v_cache, table = paged(k, v, page, seed)
    else:
        k_cache, v_cache, table = k.clone(), v.clone(), None
    out, lse = flashjit.attention_with_kvcache(q, k_cache, v_cache, k=k_new, v=v_new,
                                               cache_seqlens=lens, block_table=table,
                                               return_lse=True, **kw)
    ref_out, ref_lse = reference(q, k_ref, v_ref, lens + new, **kw)
    low_out, _ = reference(q, k_ref, v_ref, lens + new, upcast=False, **kw)
    err = (out.float() - ref_out.float()).abs().max().item()
    base = (low_out.float() - ref_out.float()).abs().max().item()
    label = f"b={b} sq={sq} cap={cap} h={hq}/{hkv} d={d} {dtype} page={page} new={new} {kw}"
    assert err <= 2 * base + 1e-5, f"{label}: max err {err} > 2 * {base} + 1e-5"
    finite = torch.isfinite(ref_lse)
    assert torch.equal(finite, torch.isfinite(lse)), f"{label}: LSE finiteness differs"
    lse_err = (lse[finite] - ref_lse[finite]).abs().max().item() if finite.any() else 0.0
    assert lse_err <= 1e-3, f"{label}: LSE err {lse_err}"
    if new:
        # The appended keys sit in the cache where the table says.
        logical_k = k_cache[table.long()].reshape(b, cap, hkv, d) if page else k_cache
        for i in range(b):
            n = int(lens[i])
            assert torch.equal(logical_k[i, n:n + new], k_new[i]), f"{label}: append missing"


def decode_step_inputs(seed, b=3, sq=2, cap=256, hq=8, hkv=2, d=128, new=2):
    """A decode step's bf16 q [b, sq, hq, d], cache contents k/v [b, cap, hkv,
    d], new keys and values [b, new, hkv, d] and cache_seqlens (0, 100 and a
    full cache)."""
    torch.manual_seed(seed)
    def randn(*shape):
        return torch.randn(*shape, device="cuda", dtype=torch.bfloat16)
    lens = torch.tensor([0, 100, cap - new], dtype=torch.int32, device="cuda")[:b]
    return (randn(b, sq, hq, d), randn(b, cap, hkv, d), randn(b, cap, hkv, d),
            randn(b, new, hkv, d), randn(b, new, hkv, d), lens)


def test_rotary():
    """rotary_cos/rotary_sin as flash_attn_with_kvcache's: the call against
    the reference on q and the appended k rotated by flashjit.rotary (whose
    own test checks it against the definition); the cache afterwards holds
    the rotated keys. Both styles, partial rotary dims, causal (queries at
    their own positions) and not (every query at cache_seqlens), paged."""
    require_gpu()
    from flashjit.rotary import rotate_step
    from test_rotary_cpu import tables
    for interleaved, causal, page, rotary_dim in ((False, True, 0, 128), (True, False, 64, 64),
                                                  (False, False, 16, 32)):
        b, cap, hkv, d, new = 3, 256, 2, 128, 2
        q, k, v, k_new, v_new, lens = decode_step_inputs(rotary_dim)
        cos, sin = (t.cuda() for t in tables(cap + 8, rotary_dim // 2))
        if page:
            k_cache, v_cache, table = paged(k, v, page, seed=1)
        else:
            k_cache, v_cache, table = k.clone(), v.clone(), None
        out = flashjit.attention_with_kvcache(q, k_cache, v_cache, k=k_new, v=v_new,
                                              cache_seqlens=lens, block_table=table,
                                              causal=causal, rotary_cos=cos, rotary_sin=sin,
                                              rotary_interleaved=interleaved)
        fail = lambda kind, message: kind(message)  # noqa: E731
        rq, rk = rotate_step(torch, fail, q, k_new, cos, sin, lens, interleaved, causal)
        k_ref, v_ref = k.clone(), v.clone()
        for i in range(b):
            n = int(lens[i])
            k_ref[i, n:n + new] = rk[i]
            v_ref[i, n:n + new] = v_new[i]
        ref_out, _ = reference(rq, k_ref, v_ref, lens + new, causal=causal)
        low_out, _ = reference(rq, k_ref, v_ref, lens + new, causal=causal, upcast=False)
        err = (out.float() - ref_out.float()).abs().max().item()
        base = (low_out.float() - ref_out.float()).abs().max().item()
        label = f"rotary interleaved={interleaved} causal={causal} page={page} dim={rotary_dim}"
        assert err <= 2 * base + 1e-5, f"{label}: max err {err} > 2 * {base} + 1e-5"
        logical_k = k_cache[table.long()].reshape(b, cap, hkv, d) if page else k_cache
        for i in range(b):
            n = int(lens[i])
            assert torch.equal(logical_k[i, n:n + new], rk[i]), f"{label}: rotated keys"


def test_cache_batch_idx_and_leftpad():
    """cache_batch_idx (a pool of cache entries, shuffled, with spares of
    NaN, one index outside the pool) and cache_leftpad (rows before it hold
    NaN) as flash_attn_with_kvcache's: sequence b attends to rows
    leftpad[b] .. cache_seqlens[b] + new - 1 of entry cache_batch_idx[b], its
    masks bottom-right aligned at the end, and appends at cache_seqlens[b]."""
    require_gpu()
    dev = "cuda"
    for causal, window, new, use_idx, use_pad, sq in (
            (True, (-1, -1), 1, True, True, 1), (False, (-1, -1), 0, True, False, 4),
            (False, (50, 0), 2, False, True, 3), (True, (-1, -1), 3, True, True, 16)):
        torch.manual_seed(new + sq)
        b, pool, cap, hq, hkv, d = 4, 7, 300, 16, 4, 128
        q = torch.randn(b, sq, hq, d, device=dev, dtype=torch.bfloat16)
        k_pool = torch.randn(pool, cap, hkv, d, device=dev, dtype=torch.bfloat16)
        v_pool = torch.randn(pool, cap, hkv, d, device=dev, dtype=torch.bfloat16)
        idx = torch.tensor([5, 2, 0 if new else -1, 6], dtype=torch.int32, device=dev)
        if not use_idx:
            idx = torch.arange(b, dtype=torch.int32, device=dev)
            k_pool, v_pool = k_pool[:b].clone(), v_pool[:b].clone()
        lens = torch.tensor([0, 37, 200, cap - new], dtype=torch.int32, device=dev)
        pad = torch.tensor([0, 20, 150, 9], dtype=torch.int32, device=dev)
        k_new = torch.randn(b, new, hkv, d, device=dev, dtype=torch.bfloat16) if new else None
        v_new = torch.randn(b, new, hkv, d, device=dev, dtype=torch.bfloat16) if new else None
        # The reference: each sequence's rows pad .. lens + new of its entry.
        k_seq = torch.zeros(b, cap, hkv, d, device=dev, dtype=torch.bfloat16)
        v_seq = torch.zeros_like(k_seq)
        counts = []
        k_cache, v_cache = k_pool.clone(), v_pool.clone()
        used = set()
        for i in range(b):
            e, n, p0 = int(idx[i]), int(lens[i]), int(pad[i]) if use_pad else 0
            if not 0 <= e < k_pool.shape[0]:
                counts.append(0)
                continue
            used.add(e)
            k_cache[e, :p0] = float("nan")
            v_cache[e, :p0] = float("nan")
            rows_k, rows_v = k_pool[e].clone(), v_pool[e].clone()
            if new:
                rows_k[n:n + new], rows_v[n:n + new] = k_new[i], v_new[i]
            end = min(n + new, cap)
            count = max(end - p0, 0)
            k_seq[i, :count], v_seq[i, :count] = rows_k[p0:end], rows_v[p0:end]
            counts.append(count)
        for e in range(k_pool.shape[0]):
            if e not in used:  # spare entries: any read poisons the result
                k_cache[e], v_cache[e] = float("nan"), float("nan")
        out, lse = flashjit.attention_with_kvcache(
            q, k_cache, v_cache, k=k_new, v=v_new, cache_seqlens=lens, causal=causal,
            window=window, return_lse=True, cache_batch_idx=idx if use_idx else None,
            cache_leftpad=pad if use_pad else None)
        kw = dict(causal=causal, window=window)
        ref_out, ref_lse = reference(q, k_seq, v_seq, counts, **kw)
        low_out, _ = reference(q, k_seq, v_seq, counts, upcast=False, **kw)
        err = (out.float() - ref_out.float()).abs().max().item()
        base = (low_out.float() - ref_out.float()).abs().max().item()
        label = f"batch_idx={use_idx} leftpad={use_pad} causal={causal} window={window} new={new}"
        assert err <= 2 * base + 1e-5, f"{label}: max err {err} > 2 * {base} + 1e-5"
        finite = torch.isfinite(ref_lse)
        assert torch.equal(finite, torch.isfinite(lse)), f"{label}: LSE finiteness differs"
        for i in range(b):
            e, n = int(idx[i]), int(lens[i])
            if new and 0 <= e < k_pool.shape[0]:
                assert torch.equal(k_cache[e, n:n + new], k_new[i]), f"{label}: append missing"


def test_packed_queries_and_new_keys():
    """cu_seqlens_q / cu_seqlens_k_new as FlashAttention-3's
    flash_attn_with_kvcache: packed queries and packed new keys (0 for one
    sequence), appended at cache_seqlens[b] of a contiguous or paged cache
    (pages of 16 and of 1) before attending, causal and not."""
    require_gpu()
    dev = "cuda"
    lens_q, lens_new = [3, 1, 0, 17], [3, 0, 2, 17]
    lens = [10, 200, 5, 300]
    b, cap, hq, hkv, d = 4, 384, 8, 2, 128
    for page, causal in ((0, True), (16, False), (1, True)):
        torch.manual_seed(page + 7)
        q = torch.randn(sum(lens_q), hq, d, device=dev, dtype=torch.bfloat16)
        k_new = torch.randn(sum(lens_new), hkv, d, device=dev, dtype=torch.bfloat16)
        v_new = torch.randn(sum(lens_new), hkv, d, device=dev, dtype=torch.bfloat16)
        k = torch.randn(b, cap, hkv, d, device=dev, dtype=torch.bfloat16)
        v = torch.randn(b, cap, hkv, d, device=dev, dtype=torch.bfloat16)
        cu_q = torch.tensor([0] + list(torch.tensor(lens_q).cumsum(0)), dtype=torch.int32,
                            device=dev)
        cu_new = torch.tensor([0] + list(torch.tensor(lens_new).cumsum(0)), dtype=torch.int32,
                              device=dev)
        cache_seqlens = torch.tensor(lens, dtype=torch.int32, device=dev)
        if page:
            k_cache, v_cache, table = paged(k, v, page, seed=page)
        else:
            k_cache, v_cache, table = k.clone(), v.clone(), None
        out, lse = flashjit.attention_with_kvcache(
            q, k_cache, v_cache, k=k_new, v=v_new, cache_seqlens=cache_seqlens,
            block_table=table, causal=causal, return_lse=True, cu_seqlens_q=cu_q,
            cu_seqlens_k_new=cu_new, max_seqlen_q=max(lens_q))
        assert out.shape == (sum(lens_q), hq, d) and lse.shape == (hq, sum(lens_q))
        logical_k = k_cache[table.long()].reshape(b, cap, hkv, d) if page else k_cache
        label = f"packed page={page} causal={causal}"
        for i in range(b):
            n, m, q0, n0 = lens[i], lens_new[i], int(cu_q[i]), int(cu_new[i])
            assert torch.equal(logical_k[i, n:n + m], k_new[n0:n0 + m]), f"{label}: append {i}"
            if lens_q[i] == 0:
                continue
            ks = torch.cat([k[i, :n], k_new[n0:n0 + m]])[None]
            vs = torch.cat([v[i, :n], v_new[n0:n0 + m]])[None]
            qs = q[None, q0:q0 + lens_q[i]]
            ref, ref_lse = attention_ref(qs, ks, vs, causal=causal)
            low, _ = attention_ref(qs, ks, vs, causal=causal, upcast=False)
            err = (out[q0:q0 + lens_q[i]].float() - ref[0].float()).abs().max().item()
            base = (low[0].float() - ref[0].float()).abs().max().item()
            assert err <= 2 * base + 1e-5, f"{label}: seq {i} err {err} > 2 * {base} + 1e-5"
            lse_err = (lse[:, q0:q0 + lens_q[i]] - ref_lse[0]).abs().max().item()
            assert lse_err <= 1e-3, f"{label}: seq {i} LSE err {lse_err}"


def test_fa3_interface():
    """flashjit.flash_attn_interface.flash_attn_with_kvcache (FA3's names) is
    attention_with_kvcache: the same outputs, LSE and appended cache, bit for
    bit, over a paged cache with rotary (FA3's interleaved default)."""
    require_gpu()
    from flashjit.flash_attn_interface import flash_attn_with_kvcache
    from test_rotary_cpu import tables
    q, k, v, k_new, v_new, lens = decode_step_inputs(5)
    cos, sin = (t.cuda() for t in tables(256 + 8, 32))
    results = []
    for via_fa3 in (True, False):
        k_cache, v_cache, table = paged(k, v, 16, seed=3)
        if via_fa3:
            out, lse = flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new,
                                               rotary_cos=cos, rotary_sin=sin,
                                               cache_seqlens=lens, page_table=table,
                                               causal=True, return_softmax_lse=True)
        else:
            out, lse = flashjit.attention_with_kvcache(
                q, k_cache, v_cache, k=k_new, v=v_new, rotary_cos=cos, rotary_sin=sin,
                cache_seqlens=lens, block_table=table, causal=True, return_lse=True,
                rotary_interleaved=True)
        results.append((out, lse, k_cache))
    for name, a, b_ in zip(("out", "lse", "k_cache"), *results):
        # Bit for bit; the cache's spare pages hold NaN in both.
        same = ((a == b_) | (a.isnan() & b_.isnan())).all().item()
        assert same, (f"the FA3 interface's {name} differs from attention_with_kvcache's: max "
                      f"{(a.float() - b_.float()).abs().nan_to_num(9.0).max().item()}")


def test_mla_latent_cache():
    """DeepSeek MLA decode: one latent KV head of 576 columns serving 128 (and,
    under tensor parallelism, 16) query heads, V the cache's first 512
    columns given as a view of the K cache (the kernel then reads each page
    once), contiguous and paged (shuffled pages of 64), one and two query
    positions (causal among them); against the reference on separate copies
    of K and V."""
    require_gpu()
    if torch.cuda.get_device_capability() != (9, 0):
        print("     SKIP: head dims past 256 need sm_90a")
        return
    for hq, sq, page in ((128, 1, 64), (128, 2, 0), (16, 1, 64), (16, 4, 0)):
        torch.manual_seed(hq + sq + page)
        b, cap = 3, 640
        q = torch.randn(b, sq, hq, 576, device="cuda", dtype=torch.bfloat16)
        latent = torch.randn(b, cap, 1, 576, device="cuda", dtype=torch.bfloat16)
        lens = torch.tensor([cap, 1, 333], dtype=torch.int32, device="cuda")
        if page:
            k_cache, _, table = paged(latent, latent, page, seed=sq)
        else:
            k_cache, table = latent.clone(), None
        v_cache = k_cache[..., :512]
        out, lse = flashjit.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens,
                                                   block_table=table, causal=sq > 1,
                                                   return_lse=True)
        assert out.shape == (b, sq, hq, 512), out.shape
        kw = dict(causal=sq > 1)
        ref_out, ref_lse = reference(q, latent, latent[..., :512].contiguous(), lens, **kw)
        low_out, _ = reference(q, latent, latent[..., :512].contiguous(), lens, upcast=False,
                               **kw)
        err = (out.float() - ref_out.float()).abs().max().item()
        base = (low_out.float() - ref_out.float()).abs().max().item()
        label = f"MLA h={hq} sq={sq} page={page}"
        assert err <= 2 * base + 1e-5, f"{label}: max err {err} > 2 * {base} + 1e-5"
        # Rows that see no key (sequence 1's first query under causal): +inf.
        finite = torch.isfinite(ref_lse)
        assert torch.equal(finite, torch.isfinite(lse)), f"{label}: LSE finiteness differs"
        lse_err = (lse[finite] - ref_lse[finite]).abs().max().item()
        assert lse_err <= 1e-3, f"{label}: LSE err {lse_err}"
        print(f"     {label}: max err {err:.2e} (bf16 reference {base:.2e})")


def test_contiguous_and_paged():
    require_gpu()
    for page in (0, 16, 64, 256):
        for dtype in (torch.bfloat16, torch.float16):
            run_case(4, 1, 512, 32, 8, 128, dtype, page=page, lens=[0, 1, 300, 512], seed=page)
            run_case(3, 5, 768, 16, 2, 64, dtype, page=page, new=2, causal=True, seed=page + 1)
    # Pages that are not whole 16-row runs (gathered row by row).
    for page in (1, 4, 24):
        run_case(4, 1, 480, 16, 4, 128, torch.bfloat16, page=page, lens=[0, 1, 300, 479], new=1,
                 seed=page)
        run_case(2, 3, 96 * page, 8, 8, 64, torch.float16, page=page, new=2, causal=True,
                 seed=page + 1)


def test_masks_softcap_head_dims():
    require_gpu()
    run_case(2, 16, 1024, 8, 8, 256, torch.bfloat16, page=64, window=(100, 0), seed=3)
    run_case(2, 3, 1024, 8, 1, 128, torch.float16, page=16, new=1, softcap=30.0, seed=4)
    run_case(2, 128, 512, 8, 2, 128, torch.bfloat16, page=0, new=7, causal=True, seed=5)


def test_pack_gqa():
    """pack_gqa True and False (with num_splits 0, 1 and 3) reach the C
    call and leave the result alone: contiguous and paged caches, decode and
    chunks with appended keys, GQA and MQA."""
    require_gpu()
    for pack_gqa in (True, False):
        for b, sq, hq, hkv, page, new, kw in ((4, 1, 32, 8, 0, 0, dict()),
                                              (3, 5, 16, 2, 64, 2, dict(causal=True)),
                                              (2, 3, 8, 1, 16, 1, dict(num_splits=3)),
                                              (2, 1, 8, 2, 256, 0, dict(num_splits=1))):
            kw = dict(kw, pack_gqa=pack_gqa)
            with recorded_configs() as seen:
                run_case(b, sq, 768, hq, hkv, 128, torch.bfloat16, page=page, new=new,
                         seed=hq + page, **kw)
            configs = [c for symbol, c in seen if symbol.startswith("flashjit_forward_kvcache")]
            want = (kw.get("num_splits", 0), 1 if pack_gqa else 2)  # PACK_GQA_ON / _OFF
            got = [(config_field(c, "splits"), config_field(c, "pack_gqa")) for c in configs]
            assert got == [want], f"page={page} h={hq}/{hkv} {kw}: configs {got}, expected {want}"


def test_int_cache_seqlens_and_full_cache():
    require_gpu()
    dev = "cuda"
    q = torch.randn(2, 1, 8, 128, device=dev, dtype=torch.bfloat16)
    k = torch.randn(2, 256, 2, 128, device=dev, dtype=torch.bfloat16)
    v = torch.randn_like(k)
    out = flashjit.attention_with_kvcache(q, k, v, cache_seqlens=100)
    ref, _ = reference(q, k, v, [100, 100])
    assert (out.float() - ref.float()).abs().max().item() < 2e-2
    # No cache_seqlens: the whole cache, the same as flashjit.attention.
    full = flashjit.attention_with_kvcache(q, k, v)
    assert torch.equal(full, flashjit.attention(q, k, v))


def test_bad_arguments():
    require_gpu()
    dev = "cuda"
    q = torch.randn(2, 1, 8, 128, device=dev, dtype=torch.bfloat16)
    k = torch.randn(2, 256, 2, 128, device=dev, dtype=torch.bfloat16)
    lens = torch.tensor([3, 4], dtype=torch.int32, device=dev)
    cases = [
        (dict(cache_seqlens=lens.long()), "int32"),
        (dict(cache_seqlens=lens, k=k[:, :1]), "pass both k and v"),
        (dict(k=k[:, :1], v=k[:, :1]), "need cache_seqlens"),
        (dict(cache_seqlens=lens, cache_batch_idx=lens.long()), "cache_batch_idx must be an int32"),
        (dict(cache_seqlens=lens, cache_leftpad=lens[:1]), "cache_leftpad has 1 entries"),
        (dict(cache_seqlens=lens, cache_leftpad=lens,
              block_table=torch.zeros(2, 1, dtype=torch.int32, device=dev)), "pass one"),
    ]
    errors = []
    for kw, expected in cases:
        try:
            flashjit.attention_with_kvcache(q, k, k.clone(), **kw)
            errors.append(f"{kw.keys()}: no error")
        except (TypeError, ValueError, RuntimeError) as e:
            if expected not in str(e):
                errors.append(f"{list(kw)}: {e!r} lacks {expected!r}")
    # A page size past 512 is the library's error.
    try:
        kc = torch.zeros(2, 528, 2, 128, device=dev, dtype=torch.bfloat16)
        flashjit.attention_with_kvcache(q, kc, kc.clone(), cache_seqlens=lens,
                                        block_table=torch.zeros(2, 1, dtype=torch.int32,
                                                                device=dev))
        errors.append("page 528: no error")
    except RuntimeError as e:
        if "page_size=528" not in str(e):
            errors.append(f"page 528: {e}")
    assert not errors, "\n".join(errors)


if __name__ == "__main__":
    sys.exit(run_tests(globals()))
