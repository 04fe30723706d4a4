"""FlashAttention-3's Python interface over flashjit: the functions of
flash-attention's hopper/flash_attn_interface.py with their names, argument
order, defaults and return values, so that code (and FlashAttention's own
tests) written for FA3 runs on flashjit by changing one import:

    from flashjit.flash_attn_interface import flash_attn_func, flash_attn_varlen_func
    from flashjit.flash_attn_interface import flash_attn_with_kvcache

Each function renames its arguments to flashjit's (window_size -> window,
page_table -> block_table, return_attn_probs / return_softmax_lse ->
return_lse, an fp8 cache's k_descale / v_descale -> k_scale / v_scale) and
calls flashjit.attention, attention_varlen or attention_with_kvcache, whose
docstrings give the semantics. What FA3 takes and flashjit does not serve is
an error naming it, never ignored: qv (MLA's separate query part:
concatenate it to q and the cache's latent to k), sm_margin other than 0
and scheduler_metadata (flashjit schedules per call).
"""
from .dense import attention
from .kvcache import attention_with_kvcache
from .varlen import attention_varlen

__all__ = ["flash_attn_func", "flash_attn_varlen_func", "flash_attn_with_kvcache",
           "flash_attn_qkvpacked_func"]


def _refuse(who, qv=None, sm_margin=0, scheduler_metadata=None):
    """FA3 arguments flashjit does not serve: an error naming each."""
    if qv is not None:
        raise NotImplementedError(f"{who}: qv (a separate query part, MLA's) is not supported: "
                                  f"concatenate qv to q and the latent cache to k (flashjit "
                                  f"serves q/k head dims up to 576 with v a view of k)")
    if sm_margin:
        raise NotImplementedError(f"{who}: sm_margin={sm_margin} is not supported: flashjit's "
                                  f"kernels use every SM; pass 0")
    if scheduler_metadata is not None:
        raise NotImplementedError(f"{who}: scheduler_metadata is not supported: flashjit "
                                  f"schedules each call itself; pass None")


def flash_attn_func(q, k, v, softmax_scale=None, causal=False, qv=None, q_descale=None,
                    k_descale=None, v_descale=None, window_size=(-1, -1), attention_chunk=0,
                    softcap=0.0, num_splits=1, pack_gqa=None, deterministic=False, sm_margin=0,
                    return_attn_probs=False):
    """FA3's flash_attn_func: flashjit.attention. Returns out, or (out,
    softmax_lse) with return_attn_probs."""
    _refuse("flash_attn_func", qv, sm_margin)
    return attention(q, k, v, causal=causal, window=tuple(window_size), softcap=softcap,
                     softmax_scale=softmax_scale, return_lse=return_attn_probs,
                     num_splits=num_splits, pack_gqa=pack_gqa, q_descale=q_descale,
                     k_descale=k_descale, v_descale=v_descale, deterministic=deterministic,
                     attention_chunk=attention_chunk)


def flash_attn_qkvpacked_func(qkv, softmax_scale=None, causal=False, q_descale=None,
                              k_descale=None, v_descale=None, window_size=(-1, -1),
                              attention_chunk=0, softcap=0.0, deterministic=False,
                              num_heads_q=None, sm_margin=0, return_attn_probs=False):
    """FA3's flash_attn_qkvpacked_func: qkv [batch, seqlen, 3, heads, d], or
    with num_heads_q [batch, seqlen, heads_q + 2 * heads_kv, d]."""
    _refuse("flash_attn_qkvpacked_func", None, sm_margin)
    if qkv.dim() == 5:
        q, k, v = qkv.unbind(dim=2)
    else:
        if num_heads_q is None:
            raise ValueError("flash_attn_qkvpacked_func: a 4-D qkv [batch, seqlen, heads, d] "
                             "needs num_heads_q (the query heads; the rest split evenly "
                             "between k and v)")
        heads_kv = (qkv.shape[2] - num_heads_q) // 2
        q, k, v = qkv.split([num_heads_q, heads_kv, heads_kv], dim=2)
    return flash_attn_func(q, k, v, softmax_scale=softmax_scale, causal=causal,
                           q_descale=q_descale, k_descale=k_descale, v_descale=v_descale,
                           window_size=window_size, attention_chunk=attention_chunk,
                           softcap=softcap, deterministic=deterministic,
                           return_attn_probs=return_attn_probs)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           seqused_q=None, seqused_k=None, softmax_scale=None, causal=False,
                           qv=None, q_descale=None, k_descale=None, v_descale=None,
                           window_size=(-1, -1), attention_chunk=0, softcap=0.0, num_splits=1,
                           pack_gqa=None, deterministic=False, sm_margin=0,
                           return_attn_probs=False):
    """FA3's flash_attn_varlen_func: flashjit.attention_varlen. Returns out,
    or (out, softmax_lse [heads, total_q]) with return_attn_probs."""
    _refuse("flash_attn_varlen_func", qv, sm_margin)
    return attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                            softmax_scale=softmax_scale, causal=causal,
                            window=tuple(window_size), softcap=softcap,
                            return_lse=return_attn_probs, seqused_k=seqused_k,
                            q_descale=q_descale, k_descale=k_descale, v_descale=v_descale,
                            num_splits=num_splits, pack_gqa=pack_gqa,
                            deterministic=deterministic, attention_chunk=attention_chunk,
                            seqused_q=seqused_q)


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, qv=None, rotary_cos=None,
                            rotary_sin=None, cache_seqlens=None, cache_batch_idx=None,
                            cache_leftpad=None, page_table=None, cu_seqlens_q=None,
                            cu_seqlens_k_new=None, max_seqlen_q=None, rotary_seqlens=None,
                            q_descale=None, k_descale=None, v_descale=None, softmax_scale=None,
                            causal=False, window_size=(-1, -1), attention_chunk=0, softcap=0.0,
                            rotary_interleaved=True, scheduler_metadata=None, num_splits=0,
                            pack_gqa=None, sm_margin=0, return_softmax_lse=False):
    """FA3's flash_attn_with_kvcache: flashjit.attention_with_kvcache (k_cache
    and v_cache written in place when k and v are given). Under an e4m3
    cache k_descale / v_descale are its dequantization factors (flashjit's
    k_scale / v_scale). Returns out, or (out, softmax_lse) with
    return_softmax_lse."""
    _refuse("flash_attn_with_kvcache", qv, sm_margin, scheduler_metadata)
    return attention_with_kvcache(
        q, k_cache, v_cache, k=k, v=v, cache_seqlens=cache_seqlens, block_table=page_table,
        softmax_scale=softmax_scale, causal=causal, window=tuple(window_size), softcap=softcap,
        num_splits=num_splits, return_lse=return_softmax_lse, q_descale=q_descale,
        k_scale=k_descale, v_scale=v_descale, pack_gqa=pack_gqa,
        attention_chunk=attention_chunk, rotary_cos=rotary_cos, rotary_sin=rotary_sin,
        rotary_interleaved=rotary_interleaved, cache_batch_idx=cache_batch_idx,
        cache_leftpad=cache_leftpad, cu_seqlens_q=cu_seqlens_q,
        cu_seqlens_k_new=cu_seqlens_k_new, max_seqlen_q=max_seqlen_q,
        rotary_seqlens=rotary_seqlens)
