"""flashjit.attention_with_kvcache: decode and chunked prefill over a KV cache,
contiguous or paged, with flash_attn_with_kvcache's contract.

    out = flashjit.attention_with_kvcache(q, k_cache, v_cache, k=k_new, v=v_new,
                                          cache_seqlens=lens, block_table=table,
                                          causal=True)

The cache is read in place and, when k/v are given, written in place: no copy
of it is ever made. Not differentiable (an inference call).
"""
from . import _launch
from ._checks import attention_options, block_table as check_block_table
from ._checks import check_inputs, check_tensor, failure, forward_knobs, fp8_elements
from ._checks import int32_vector, is_fp8
from ._checks import mixed_dtype_message, refuse_fp8_grad
from ._layout import kernel_ready, prepare
from .rotary import rotate_step

NAME = "flashjit.attention_with_kvcache"
_fail = failure(NAME)


def _cache_ready(name, t):
    """The cache is used in place: its layout must already suit the kernels
    (head_dim contiguous, strides multiples of 16 bytes, 16-byte aligned)."""
    if not kernel_ready(t):
        raise _fail(ValueError,
                    f"{name} must have a contiguous last dimension, strides that are multiples "
                    f"of 16 bytes and a 16-byte aligned start (got strides {tuple(t.stride())}); "
                    f"the cache is read and written in place, so flashjit does not copy it")


def attention_with_kvcache(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None,
                           block_table=None, softmax_scale=None, causal=False, window=(-1, -1),
                           softcap=0.0, num_splits=0, return_lse=False, q_descale=None,
                           k_scale=None, v_scale=None, out_dtype=None, pack_gqa=None,
                           attention_chunk=0, rotary_cos=None, rotary_sin=None,
                           rotary_interleaved=False, cache_batch_idx=None, cache_leftpad=None,
                           cu_seqlens_q=None, cu_seqlens_k_new=None, max_seqlen_q=None,
                           rotary_seqlens=None):
    """Attention of q over a KV cache, optionally appending this step's k/v first.

    q: [batch, seqlen_q, heads_q, d].
    k_cache, v_cache: [batch, seqlen_cache, heads_kv, d], or with block_table
        the paged cache [num_pages, page_size, heads_kv, d] (page_size 1 to
        512: pages of whole 16-row runs are read by TMA on Hopper, others
        gathered row by row by the sm80 family, 16-bit only). bf16 or fp16 as q, or float8_e4m3fn
        (an fp8 cache, d a multiple of 16 up to 256); d a multiple of 8 from 32 to 576
        (the sm90 family on Hopper serves a cache).
    k, v: optional [batch, seqlen_new, heads_kv, d] in q's dtype, written into the cache
        at positions cache_seqlens[b] .. cache_seqlens[b] + seqlen_new - 1
        before attending (the cache tensors are modified in place;
        cache_seqlens is not: advance it yourself). Needs cache_seqlens.
    cache_seqlens: int32 [batch] tensor or an int: each sequence's cached
        keys before the append. Sequence b then attends to
        min(cache_seqlens[b] + seqlen_new, capacity) keys, where the capacity
        is seqlen_cache, or block_table's width times page_size. None: every
        sequence uses the whole cache.
    cache_batch_idx: int32 [batch], a contiguous cache's entry of each
        sequence: sequence b reads (and appends to) k_cache[cache_batch_idx[b]],
        so k_cache may have more entries than q has sequences (a pool of
        slots; FlashAttention's cache_batch_idx). An index outside
        [0, k_cache.shape[0]) reads no keys (the output row is 0) and appends
        nothing. Not with block_table (the table places pages already).
    cache_leftpad: int32 [batch], a contiguous cache's first row of each
        sequence (left padding): sequence b attends to rows cache_leftpad[b]
        .. cache_seqlens[b] + seqlen_new - 1 of its entry, its masks aligned
        bottom-right at the end as without it; the append still writes at
        cache_seqlens[b], and rotary positions stay cache_seqlens[b] + i
        (FlashAttention's cache_leftpad). Needs cache_seqlens; not with
        block_table.
    cu_seqlens_q, max_seqlen_q, cu_seqlens_k_new: packed queries and new
        keys (FlashAttention-3's): q is [total_q, heads_q, d] with sequence
        b's queries rows cu_seqlens_q[b] .. [b + 1] (int32 [batch + 1]; the
        longest max_seqlen_q), and k, v are [total_new, heads_kv, d] with its
        new keys rows cu_seqlens_k_new[b] .. [b + 1], appended at
        cache_seqlens[b] (required); the output is [total_q, heads_q, dv]
        and the LSE [heads_q, total_q]. Offsets are device data, clamped by
        the kernels as flashjit.attention_varlen's. Head dims must be
        multiples of 8 (the cache is written in place); no rotary,
        cache_batch_idx or cache_leftpad with packed queries.
    block_table: int32 [batch, max_pages_per_seq]: the pages of each
        sequence's keys in order. Entries past a sequence's key count are
        never read; an entry outside [0, num_pages) reads as zeros.
    causal / window: aligned bottom-right against each sequence's own key
        count (a chunk of new queries sees the whole cached prefix).
    softcap, softmax_scale: as flashjit.attention.
    num_splits: split-KV count (0: the library chooses, 1: off).
    pack_gqa: whether the query heads that share a KV head are packed into
        one tile's rows, so each K/V tile is read once per group: True,
        False, or None to let the library choose (as flashjit.attention's).
        Has an effect with GQA/MQA; the result is the same either way (up
        to floating-point rounding).
    attention_chunk: chunked attention (Llama 4), as flashjit.attention's:
        each query (at its position in the cache, bottom-right aligned)
        sees only the keys of its own chunk (eager calls only for now).
    rotary_cos, rotary_sin, rotary_interleaved: rotary position embedding as
        flash_attn_with_kvcache's ([seqlen_ro, rotary_dim / 2] tables): the
        first rotary_dim columns of q and of the appended k rotated at
        their cache positions (cache_seqlens[b] + i; every query at
        cache_seqlens[b] without a causal or window mask), GPT-NeoX style or
        interleaved (GPT-J). Computed by PyTorch ops before the attention
        (flashjit/rotary.py), 16-bit q only. rotary_seqlens (int32 [batch] or
        an int, FlashAttention-3's): the positions start there instead of
        at cache_seqlens.
    return_lse: also return the fp32 [batch, heads_q, seqlen_q] log-sum-exp
        (+inf for a row that sees no key, whose output is 0).
    k_scale, v_scale: an e4m3 cache's fp32 dequantization factors (real =
        code * scale), on q's device: one element (per tensor, vLLM's
        convention), [heads_kv], or [batch, heads_kv]; required for an e4m3
        cache. Under bf16/fp16 q the output has q's dtype: the kernel
        quantizes q per row to e4m3 and reads the cache as it is; new
        bf16/fp16 keys k, v are quantized into the cache with these scales.
    q_descale, out_dtype: float8_e4m3fn q (with an e4m3 cache) as in
        flashjit.attention: q's factors [batch, heads_kv] or one element,
        the output bf16 (default) or fp16.

    Cache slots past a sequence's key count (within its last page, or of a
    contiguous cache) are read and masked: they must hold finite values, as a
    zero-initialised cache does. Runs on the current CUDA stream of q's device.
    """
    import torch

    if cu_seqlens_q is not None or cu_seqlens_k_new is not None:
        return _packed_call(torch, q, k_cache, v_cache, k, v, cache_seqlens, block_table,
                            cu_seqlens_q, cu_seqlens_k_new, max_seqlen_q, softmax_scale, causal,
                            window, softcap, num_splits, return_lse,
                            (q_descale, k_scale, v_scale, out_dtype), pack_gqa, attention_chunk,
                            (rotary_cos, rotary_sin, cache_batch_idx, cache_leftpad,
                             rotary_seqlens))
    if attention_chunk != 0 and torch.compiler.is_compiling():
        raise NotImplementedError("flashjit.attention_with_kvcache: attention_chunk is not "
                                  "traceable by torch.compile yet; call it eagerly")
    if rotary_cos is not None or rotary_sin is not None:
        # q's and k's own checks name them first; the call's checks below
        # then see the rotated tensors (same shapes, dtypes and devices).
        check_inputs(torch, _fail, q, 4, ())
        if k is not None:
            check_tensor(torch, _fail, "k", k, 4, q.device)
        masked = bool(causal) or tuple(window) != (-1, -1)
        positions = cache_seqlens if rotary_seqlens is None else rotary_seqlens
        q, k = rotate_step(torch, _fail, q, k, rotary_cos, rotary_sin, positions,
                           bool(rotary_interleaved), masked)
    elif rotary_seqlens is not None:
        raise _fail(ValueError, "rotary_seqlens was given without rotary_cos/rotary_sin: it "
                                "places the rotary positions; pass the tables too, or None")
    if torch.compiler.is_compiling() and (cache_batch_idx is not None
                                          or cache_leftpad is not None):
        raise NotImplementedError("flashjit.attention_with_kvcache: cache_batch_idx and "
                                  "cache_leftpad are not traceable by torch.compile yet; call "
                                  "it eagerly")
    if torch.compiler.is_compiling():
        # torch.compile traces the custom op (flashjit/ops.py), which writes
        # k_cache/v_cache in place as this function does.
        from . import ops  # registers torch.ops.flashjit.* on import
        cache_seqlens = _lengths_tensor(torch, cache_seqlens, q.shape[0], q.device)
        # Checked before the op's conversions, which would take "on" for True.
        forward_knobs(_fail, num_splits, pack_gqa)
        left, right = window
        out, lse = torch.ops.flashjit.attention_with_kvcache(
            q, k_cache, v_cache, k, v, cache_seqlens, block_table,
            None if softmax_scale is None else float(softmax_scale), bool(causal), int(left),
            int(right), float(softcap), int(num_splits), q_descale, k_scale, v_scale, out_dtype,
            ops.pack_code(pack_gqa))
        return (out, lse) if return_lse else out

    call = prepare_call(torch, q, k_cache, v_cache, k, v, cache_seqlens, block_table,
                        softmax_scale, causal, window, softcap, num_splits,
                        (q_descale, k_scale, v_scale, out_dtype), pack_gqa, attention_chunk,
                        cache_batch_idx, cache_leftpad)
    out, lse, _, _, _ = _launch.forward(torch, call, q, k_cache, v_cache, want_lse=return_lse)
    return (out, lse) if return_lse else out


def _lengths_tensor(torch, cache_seqlens, batch, device):
    """cache_seqlens given as an int: the int32 [batch] tensor of it (FA's
    convention); anything else as it is, for the checks to name."""
    if isinstance(cache_seqlens, int) and not isinstance(cache_seqlens, bool):
        return torch.full((batch,), cache_seqlens, dtype=torch.int32, device=device)
    return cache_seqlens


def _packed_call(torch, q, k_cache, v_cache, k, v, cache_seqlens, block_table, cu_seqlens_q,
                 cu_seqlens_k_new, max_seqlen_q, softmax_scale, causal, window, softcap,
                 num_splits, return_lse, fp8, pack_gqa, attention_chunk, unsupported):
    """attention_with_kvcache over packed queries (cu_seqlens_q): the serving
    call of flashjit.attention_varlen over the cache, appending the packed
    new keys first. A contiguous cache [batch, seqlen_cache, ...] is read as
    packed rows, sequence b's from row b * seqlen_cache."""
    from . import varlen
    for name, value in zip(("rotary_cos", "rotary_sin", "cache_batch_idx", "cache_leftpad",
                            "rotary_seqlens"), unsupported):
        if value is not None:
            raise _fail(NotImplementedError, f"{name} is not supported with packed queries "
                                             f"(cu_seqlens_q) yet")
    if torch.compiler.is_compiling():
        raise NotImplementedError(f"{NAME}: packed queries (cu_seqlens_q) are not traceable by "
                                  f"torch.compile yet; call it eagerly")
    if cu_seqlens_q is None or max_seqlen_q is None:
        raise _fail(ValueError, "packed queries need cu_seqlens_q and max_seqlen_q (and "
                                "cu_seqlens_k_new with k/v)")
    if (k is None) != (cu_seqlens_k_new is None) or (k is None) != (v is None):
        raise _fail(ValueError, "pass k, v and cu_seqlens_k_new together (this step's packed "
                                "keys and values and each sequence's first row of them), or "
                                "none")
    batch = cu_seqlens_q.shape[0] - 1 if isinstance(cu_seqlens_q, torch.Tensor) else -1
    if batch >= 0:
        cache_seqlens = _lengths_tensor(torch, cache_seqlens, batch, q.device)
    if cache_seqlens is None:
        raise _fail(ValueError, "packed queries need cache_seqlens: each sequence's cached keys")
    check_tensor(torch, _fail, "k_cache", k_cache, 4, q.device)
    check_tensor(torch, _fail, "v_cache", v_cache, 4, q.device)
    if block_table is not None:
        keys, values, cu_k, max_k = k_cache, v_cache, None, block_table.shape[-1] * k_cache.shape[1]
    else:
        entries, rows = k_cache.shape[:2]
        if entries != batch:
            raise _fail(ValueError, f"k_cache has batch {entries} but cu_seqlens_q has {batch} "
                                    f"sequences")
        for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
            _cache_ready(name, t)
            if entries > 1 and t.stride(0) != rows * t.stride(1):
                raise _fail(ValueError, f"{name}'s entries must be one block of rows (stride(0) "
                                        f"== seqlen_cache * stride(1)): packed queries read a "
                                        f"contiguous cache as packed rows")
        keys = k_cache.reshape(entries * rows, *k_cache.shape[2:])
        values = v_cache.reshape(entries * rows, *v_cache.shape[2:])
        cu_k = torch.arange(0, (batch + 1) * rows, rows, dtype=torch.int32, device=q.device)
        max_k = rows
    call = varlen.prepare_cache_call(
        torch, q, keys, values, cu_seqlens_q, cu_k, max_seqlen_q, max_k, softmax_scale, causal,
        window, softcap, block_table, cache_seqlens, fp8, num_splits, pack_gqa, False,
        attention_chunk, new_keys=(k, v, cu_seqlens_k_new) if k is not None else None)
    if call is None:
        out, lse = varlen.empty_result(torch, q, v_cache, fp8[3])
    else:
        out, lse = varlen.forward(torch, call, q, keys, values, want_lse=return_lse)
    return (out, lse) if return_lse else out


def prepare_call(torch, q, k_cache, v_cache, k, v, cache_seqlens, block_table, softmax_scale,
                 causal, window, softcap, num_splits, fp8=(None, None, None, None),
                 pack_gqa=None, attention_chunk=0, cache_batch_idx=None, cache_leftpad=None):
    """The checked arguments as a _launch.Call; raises TypeError or
    ValueError naming the wrong argument. fp8: (q_descale, k_scale,
    v_scale, out_dtype)."""
    dtype = check_inputs(torch, _fail, q, 4, ())
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        check_tensor(torch, _fail, name, t, 4, q.device)
        # q's dtype, or an e4m3 cache under 16-bit q.
        if t.dtype != q.dtype and not (is_fp8(torch, t.dtype) and not is_fp8(torch, q.dtype)):
            raise _fail(TypeError, mixed_dtype_message(torch, name, t.dtype, q.dtype))
    if v_cache.dtype != k_cache.dtype:
        raise _fail(TypeError, f"v_cache is {v_cache.dtype} but k_cache is {k_cache.dtype}: the "
                               f"cache's keys and values must have one dtype")
    device = q.device
    batch, seqlen_q, heads_q, dim = q.shape
    outer, rows, heads_kv, dim_k = k_cache.shape
    if tuple(v_cache.shape[:3]) != (outer, rows, heads_kv):
        raise _fail(ValueError, f"k_cache {tuple(k_cache.shape)} and v_cache "
                                f"{tuple(v_cache.shape)} must agree in their first three dims")
    dim_v = v_cache.shape[3]
    if dim_k != dim:
        raise _fail(ValueError, f"q has head_dim {dim} but k_cache has {dim_k}")
    row = 16 if is_fp8(torch, k_cache.dtype) else 8  # elements of 16 bytes
    if dim % row or dim_v % row:
        raise _fail(ValueError, f"head dims ({dim}, {dim_v}) must be multiples of {row} for a "
                                f"{k_cache.dtype} cache (rows of whole 16 bytes): the cache is "
                                f"used in place, so it cannot be padded")
    if heads_kv == 0 or heads_q % heads_kv:
        raise _fail(ValueError, f"heads_q ({heads_q}) must be a multiple of heads_kv ({heads_kv})")
    # The scalar options before the cache's layout, which reads its pointers.
    options, splits, pack = attention_options(_fail, dim, causal, window, softcap,
                                              softmax_scale, num_splits, pack_gqa,
                                              attention_chunk)
    _cache_ready("k_cache", k_cache)
    _cache_ready("v_cache", v_cache)

    page_size = 0
    table_stride = 0
    if block_table is not None:
        block_table, table_stride = check_block_table(torch, _fail, block_table, batch, device,
                                                      "q's batch")
        page_size = rows
        seqlen_k = block_table.shape[1] * page_size
    else:
        if outer != batch and cache_batch_idx is None:
            raise _fail(ValueError, f"k_cache has batch {outer} but q has {batch} (pass "
                                    f"block_table for a paged cache, or cache_batch_idx for "
                                    f"a pool of cache entries)")
        seqlen_k = rows
    for name, t in (("cache_batch_idx", cache_batch_idx), ("cache_leftpad", cache_leftpad)):
        if t is not None and block_table is not None:
            raise _fail(ValueError, f"{name} places sequences in a contiguous cache; with "
                                    f"block_table the pages already place them: pass one")
    if cache_batch_idx is not None:
        cache_batch_idx = int32_vector(torch, _fail, "cache_batch_idx", cache_batch_idx, batch,
                                       device, "q's batch")
    if cache_leftpad is not None:
        cache_leftpad = int32_vector(torch, _fail, "cache_leftpad", cache_leftpad, batch, device,
                                     "q's batch")

    cache_seqlens = _lengths_tensor(torch, cache_seqlens, batch, device)
    if cache_seqlens is not None:
        cache_seqlens = int32_vector(torch, _fail, "cache_seqlens", cache_seqlens, batch, device,
                                     "q's batch")
    elif cache_leftpad is not None or cache_batch_idx is not None:
        # The kernels place sequences only over per-sequence key counts:
        # without cache_seqlens every sequence uses its whole entry.
        cache_seqlens = torch.full((batch,), rows, dtype=torch.int32, device=device)

    if (k is None) != (v is None):
        raise _fail(ValueError, "pass both k and v (this step's keys and values) or neither")
    if k is not None:
        if cache_seqlens is None:
            raise _fail(ValueError, "k/v need cache_seqlens: they are written at each "
                                    "sequence's cache_seqlens")
        check_tensor(torch, _fail, "k", k, 4, device)
        check_tensor(torch, _fail, "v", v, 4, device)
        seqlen_new = k.shape[1]
        for name, t, d in (("k", k, dim), ("v", v, dim_v)):
            if tuple(t.shape) != (batch, seqlen_new, heads_kv, d):
                raise _fail(ValueError, f"{name} has shape {tuple(t.shape)}, expected "
                                        f"{(batch, seqlen_new, heads_kv, d)}")
            if t.dtype != q.dtype:
                raise _fail(TypeError, f"{name} is {t.dtype} but q is {q.dtype}")
        k, v = prepare(torch, k, 0), prepare(torch, v, 0)

    q_descale, k_scale, v_scale, out_dtype = fp8
    elements = fp8_elements(torch, _fail, q, k_cache.dtype,
                            (("q_descale", q_descale), ("k_scale", k_scale),
                             ("v_scale", v_scale)), out_dtype, batch, heads_kv, per_head=True,
                            tensor_names=("q", "k_cache", "v_cache"))
    refuse_fp8_grad(torch, _fail, elements.fp8, (("q", q), ("k", k), ("v", v),
                                             ("q_descale", q_descale), ("k_scale", k_scale),
                                             ("v_scale", v_scale)))
    problem = _launch.padded_problem(dtype, batch, heads_q, heads_kv, seqlen_q, seqlen_k, dim,
                                     dim_v, options, elements, page_size=page_size,
                                     seqused_k=int(cache_seqlens is not None))
    cache = _launch.kvcache_args(cache_seqlens, block_table, table_stride,
                                 outer if block_table is not None else 0, k, v,
                                 cache_batch_idx, outer, cache_leftpad)
    # No query: nothing to attend, and no append (the kernel writes k/v).
    empty = batch * seqlen_q * heads_q == 0
    return _launch.Call(NAME, problem, dim, dim_v, empty, splits, pack, cache=cache,
                        keep=(cache_seqlens, block_table, k, v, cache_batch_idx, cache_leftpad),
                        elements=elements)
