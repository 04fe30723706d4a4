"""flashjit.attention_with_kvcache: decode and chunked prefill over a KV cache,
contiguous or paged, with flash_attn_with_kvcache's contract.

    out = flashjit.attention_with_kvcache(q, k_cache, v_cache, k=k_new, v=v_new,
                                          cache_seqlens=lens, block_table=table,
                                          causal=True)

The cache is read in place and, when k/v are given, written in place: no copy
of it is ever made. Not differentiable (an inference call).
"""
import ctypes

from . import _capi
from ._checks import block_table as check_block_table
from ._checks import check_inputs, check_tensor, int32_vector

_NAME = "flashjit.attention_with_kvcache"


def _fail(kind, message):
    return kind(f"{_NAME}: {message}")


def _check_tensor(torch, name, t, dims, device=None):
    check_tensor(torch, _fail, name, t, dims, device)


def _cache_ready(name, t):
    """The cache is used in place: its layout must already suit the kernels
    (head_dim contiguous, strides multiples of 8 elements, 16-byte aligned)."""
    from . import _kernel_ready
    if not _kernel_ready(t):
        raise _fail(ValueError,
                    f"{name} must have a contiguous last dimension, strides that are multiples "
                    f"of 8 elements and a 16-byte aligned start (got strides {tuple(t.stride())}); "
                    f"the cache is read and written in place, so flashjit does not copy it")



def attention_with_kvcache(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None,
                           block_table=None, softmax_scale=None, causal=False, window=(-1, -1),
                           softcap=0.0, num_splits=0, return_lse=False):
    """Attention of q over a KV cache, optionally appending this step's k/v first.

    q: [batch, seqlen_q, heads_q, d].
    k_cache, v_cache: [batch, seqlen_cache, heads_kv, d], or with block_table
        the paged cache [num_pages, page_size, heads_kv, d] (page_size a
        multiple of 16 in [16, 512]). bf16 or fp16 as q; d a multiple of 8
        from 32 to 256 (the sm90 family on Hopper serves a cache).
    k, v: optional [batch, seqlen_new, heads_kv, d], written into the cache
        at positions cache_seqlens[b] .. cache_seqlens[b] + seqlen_new - 1
        before attending (the cache tensors are modified in place;
        cache_seqlens is not: advance it yourself). Needs cache_seqlens.
    cache_seqlens: int32 [batch] tensor or an int: each sequence's cached
        keys before the append. Sequence b then attends to
        min(cache_seqlens[b] + seqlen_new, capacity) keys, where the capacity
        is seqlen_cache, or block_table's width times page_size. None: every
        sequence uses the whole cache.
    block_table: int32 [batch, max_pages_per_seq]: the pages of each
        sequence's keys in order. Entries past a sequence's key count are
        never read; an entry outside [0, num_pages) reads as zeros.
    causal / window: aligned bottom-right against each sequence's own key
        count (a chunk of new queries sees the whole cached prefix).
    softcap, softmax_scale: as flashjit.attention.
    num_splits: split-KV count (0: the library chooses, 1: off).
    return_lse: also return the fp32 [batch, heads_q, seqlen_q] log-sum-exp
        (+inf for a row that sees no key, whose output is 0).

    Cache slots past a sequence's key count (within its last page, or of a
    contiguous cache) are read and masked: they must hold finite values, as a
    zero-initialised cache does. Runs on the current CUDA stream of q's device.
    """
    import torch
    from . import (_POISON_OUTPUT, _check_rc, _custom_ops, _forward_config, _forward_knobs,
                   _kernel_strides, _mask, _prepare)

    if torch.compiler.is_compiling():
        # torch.compile traces the custom op (flashjit/ops.py), which writes
        # k_cache/v_cache in place as this function does.
        _custom_ops()
        if isinstance(cache_seqlens, int) and not isinstance(cache_seqlens, bool):
            cache_seqlens = torch.full((q.shape[0],), cache_seqlens, dtype=torch.int32,
                                       device=q.device)
        left, right = window
        out, lse = torch.ops.flashjit.attention_with_kvcache(
            q, k_cache, v_cache, k, v, cache_seqlens, block_table,
            None if softmax_scale is None else float(softmax_scale), bool(causal), int(left),
            int(right), float(softcap), int(num_splits))
        return (out, lse) if return_lse else out

    dtype = check_inputs(torch, _fail, q, 4, (("k_cache", k_cache), ("v_cache", v_cache)))
    device = q.device
    batch, seqlen_q, heads_q, dim = q.shape
    outer, rows, heads_kv, dim_k = k_cache.shape
    if tuple(v_cache.shape[:3]) != (outer, rows, heads_kv):
        raise _fail(ValueError, f"k_cache {tuple(k_cache.shape)} and v_cache "
                                f"{tuple(v_cache.shape)} must agree in their first three dims")
    dim_v = v_cache.shape[3]
    if dim_k != dim:
        raise _fail(ValueError, f"q has head_dim {dim} but k_cache has {dim_k}")
    if dim % 8 or dim_v % 8:
        raise _fail(ValueError, f"head dims ({dim}, {dim_v}) must be multiples of 8: the cache "
                                f"is used in place, so it cannot be padded")
    if heads_kv == 0 or heads_q % heads_kv:
        raise _fail(ValueError, f"heads_q ({heads_q}) must be a multiple of heads_kv ({heads_kv})")
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
        if outer != batch:
            raise _fail(ValueError, f"k_cache has batch {outer} but q has {batch} (pass "
                                    f"block_table for a paged cache)")
        seqlen_k = rows

    if isinstance(cache_seqlens, int) and not isinstance(cache_seqlens, bool):
        cache_seqlens = torch.full((batch,), cache_seqlens, dtype=torch.int32, device=device)
    if cache_seqlens is not None:
        cache_seqlens = int32_vector(torch, _fail, "cache_seqlens", cache_seqlens, batch, device,
                                     "q's batch")

    seqlen_new = 0
    if (k is None) != (v is None):
        raise _fail(ValueError, "pass both k and v (this step's keys and values) or neither")
    if k is not None:
        if cache_seqlens is None:
            raise _fail(ValueError, "k/v need cache_seqlens: they are written at each "
                                    "sequence's cache_seqlens")
        _check_tensor(torch, "k", k, 4, device)
        _check_tensor(torch, "v", v, 4, device)
        seqlen_new = k.shape[1]
        for name, t, d in (("k", k, dim), ("v", v, dim_v)):
            if tuple(t.shape) != (batch, seqlen_new, heads_kv, d):
                raise _fail(ValueError, f"{name} has shape {tuple(t.shape)}, expected "
                                        f"{(batch, seqlen_new, heads_kv, d)}")
            if t.dtype != q.dtype:
                raise _fail(TypeError, f"{name} is {t.dtype} but q is {q.dtype}")
        k, v = _prepare(torch, k, 0), _prepare(torch, v, 0)

    mask, window_left, window_right = _mask(causal, window)
    softcap = float(softcap)
    if softcap < 0:
        raise _fail(ValueError, f"softcap must be >= 0 (0: off), got {softcap}")
    splits, pack = _forward_knobs(num_splits, None)
    scale = dim ** -0.5 if softmax_scale is None else float(softmax_scale)

    out = torch.empty((batch, seqlen_q, heads_q, dim_v), dtype=q.dtype, device=device)
    lse = (torch.empty((batch, heads_q, seqlen_q), dtype=torch.float32, device=device)
           if return_lse else None)
    if batch * seqlen_q * heads_q == 0:
        return (out, lse) if return_lse else out
    qp = _prepare(torch, q, 0)
    if _POISON_OUTPUT:
        out.fill_(float("nan"))
        if lse is not None:
            lse.fill_(float("nan"))

    problem = _capi.Problem(
        dtype=dtype, mask=mask, batch=batch, heads_q=heads_q, heads_kv=heads_kv,
        seqlen_q=seqlen_q, seqlen_k=seqlen_k, head_dim_qk=dim, head_dim_v=dim_v,
        window_left=window_left, window_right=window_right, softmax_scale=scale,
        softcap=softcap, page_size=page_size, seqused_k=int(cache_seqlens is not None))
    args = _capi.ForwardArgs(
        qp.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), out.data_ptr(),
        lse.data_ptr() if lse is not None else None,
        *_kernel_strides(qp), *_kernel_strides(k_cache), *_kernel_strides(v_cache),
        *_kernel_strides(out))
    cache = _capi.KvCacheArgs(
        cache_seqlens.data_ptr() if cache_seqlens is not None else None,
        block_table.data_ptr() if block_table is not None else None,
        table_stride, outer if block_table is not None else 0,
        k.data_ptr() if k is not None else None, v.data_ptr() if v is not None else None,
        seqlen_new,
        *(_kernel_strides(k) if k is not None else (0, 0, 0)),
        *(_kernel_strides(v) if v is not None else (0, 0, 0)))

    lib = _capi.lib()
    if not hasattr(lib, "flashjit_forward_kvcache"):
        raise RuntimeError(f"{_NAME}: the loaded libflashjit.so has no flashjit_forward_kvcache "
                           f"(built before the KV cache); rebuild it")
    with torch.cuda.device(device):
        stream = torch.cuda.current_stream(device).cuda_stream
        config = _forward_config(splits, pack)
        _check_rc(lib.flashjit_forward_kvcache(
            ctypes.byref(problem), ctypes.byref(args), ctypes.byref(cache),
            ctypes.c_void_p(stream), ctypes.byref(config) if config is not None else None), _NAME)
    return (out, lse) if return_lse else out
