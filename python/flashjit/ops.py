"""torch.library custom ops over flashjit's entry points, so that
torch.compile(fullgraph=True) traces flashjit.attention (forward and
backward), flashjit.attention_varlen (forward and backward; forward only over
a KV cache, the serving call) and flashjit.attention_with_kvcache with no
graph break, and CUDA-graph capture keeps working (mode="reduce-overhead").
Registered when flashjit is imported with torch already imported, or on the
first call (tests/python/test_torch_compile.py and, for the serving call,
test_varlen_kvcache.py run them on the GPU).

    torch.ops.flashjit.attention_fwd(q, k, v, causal, window_left, window_right,
                                     softcap, softmax_scale, num_splits, pack_gqa,
                                     q_descale, k_descale, v_descale, out_dtype,
                                     deterministic)
        -> (out [b, sq, hq, dv], lse [b, hq, sq] fp32)
    torch.ops.flashjit.attention_bwd(dout, q, k, v, out, lse, causal, window_left,
                                     window_right, softcap, softmax_scale, deterministic)
        -> (dq, dk, dv)
    torch.ops.flashjit.attention_varlen_fwd(q, k, v, cu_seqlens_q, cu_seqlens_k,
                                            max_seqlen_q, max_seqlen_k, causal,
                                            window_left, window_right, softcap,
                                            softmax_scale, q_descale, k_descale,
                                            v_descale, out_dtype, num_splits, pack_gqa,
                                            deterministic)
        -> (out [total_q, hq, dv], lse [hq, total_q] fp32)
    torch.ops.flashjit.attention_varlen_bwd(dout, q, k, v, out, lse, cu_seqlens_q,
                                            cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                            causal, window_left, window_right,
                                            softcap, softmax_scale, deterministic)
        -> (dq, dk, dv)
    torch.ops.flashjit.attention_with_kvcache(q, k_cache, v_cache, k, v,
                                              cache_seqlens, block_table,
                                              softmax_scale, causal, window_left,
                                              window_right, softcap, num_splits,
                                              q_descale, k_scale, v_scale, out_dtype,
                                              pack_gqa)
        -> (out, lse)   (k_cache and v_cache are written when k/v are given)
    torch.ops.flashjit.attention_varlen_kvcache(q, k, v, cu_seqlens_q, cu_seqlens_k,
                                                max_seqlen_q, max_seqlen_k, causal,
                                                window_left, window_right, softcap,
                                                softmax_scale, block_table, seqused_k,
                                                q_descale, k_descale, v_descale,
                                                out_dtype, num_splits, pack_gqa)
        -> (out [total_q, hq, dv], lse [hq, total_q] fp32)   (forward only;
           cu_seqlens_k, block_table and seqused_k optional as in
           attention_varlen; the cache is read, not written)

The forward ops have registered autograd formulas (their backward ops), but
for the KV-cache ones (no backward: attention_varlen refuses inputs that
require grad before reaching it), and every op has a fake implementation,
so tracing needs no GPU work.
flashjit's functions call them while torch.compile traces; in eager mode
they keep their direct paths (no dispatcher on the way to the launch).
pack_gqa: 0 lets the library choose, 1 packs, 2 does not; softmax_scale None
is 1/sqrt(head_dim). The descales (None for 16-bit inputs) and out_dtype
(None: bf16 for e4m3 inputs, else q's) are flashjit.attention's; the fake
implementations give the output that dtype. fp8 forwards have no backward:
the entry points refuse e4m3 inputs that require grad before tracing them.
The fake implementations repeat the schemas' defaults, because the
dispatcher leaves out trailing arguments that equal their schema default
(a 16-bit call's descales) when it calls them.
deterministic: the backward's mode (flashjit.attention's); a forward op
keeps it for its registered backward, which passes it to the backward op.
Arguments added to an op come last and have defaults, so that calls and
opcheck arguments of its earlier schema keep working.
"""
from typing import Optional, Tuple

import torch

from . import _launch, dense, kvcache, varlen
from ._checks import failure, output_dtype
from ._layout import prepare

_PACKING = {0: None, 1: True, 2: False}


def pack_code(pack_gqa):
    """attention()'s pack_gqa (None, True, False) as the op's int."""
    return 0 if pack_gqa is None else 1 if pack_gqa else 2


def _packing(who, code):
    """An op's pack_gqa code as the entry point's None, True or False."""
    if code not in _PACKING:
        raise ValueError(f"{who}: pack_gqa code {code} is not 0 (the library chooses), 1 (pack) "
                         f"or 2 (do not pack)")
    return _PACKING[code]


def _call(q, k, v, causal, window_left, window_right, softcap, softmax_scale, num_splits=0,
          pack_gqa=0, fp8=(None, None, None, None), deterministic=False):
    return dense.prepare_call(torch, q, k, v, causal, (window_left, window_right), softcap,
                              softmax_scale, num_splits, _packing(dense.NAME, pack_gqa), *fp8,
                              deterministic)


def _out_dtype(who, q, out_dtype):
    """The output dtype the op gives (a fake implementation's too)."""
    return output_dtype(torch, failure(who), q.dtype, out_dtype)[0]


def _like(t, g):
    """`g` with `t`'s strides (what the fake implementations promise)."""
    return g if g.stride() == t.stride() else torch.empty_like(t).copy_(g)


@torch.library.custom_op("flashjit::attention_fwd", mutates_args=(), device_types="cuda")
def attention_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                  window_left: int, window_right: int, softcap: float,
                  softmax_scale: Optional[float], num_splits: int, pack_gqa: int,
                  q_descale: Optional[torch.Tensor] = None,
                  k_descale: Optional[torch.Tensor] = None,
                  v_descale: Optional[torch.Tensor] = None,
                  out_dtype: Optional[torch.dtype] = None,
                  deterministic: bool = False) -> Tuple[torch.Tensor, torch.Tensor]:
    call = _call(q, k, v, causal, window_left, window_right, softcap, softmax_scale, num_splits,
                 pack_gqa, (q_descale, k_descale, v_descale, out_dtype), deterministic)
    out, lse, _, _, _ = _launch.forward(torch, call, q, k, v, want_lse=True)
    if call.pad_v:
        out = out[..., :call.dim_v].contiguous()
    return out, lse


@attention_fwd.register_fake
def _(q, k, v, causal, window_left, window_right, softcap, softmax_scale, num_splits, pack_gqa,
      q_descale=None, k_descale=None, v_descale=None, out_dtype=None, deterministic=False):
    b, sq, hq, _ = q.shape
    return (q.new_empty((b, sq, hq, v.shape[3]), dtype=_out_dtype(dense.NAME, q, out_dtype)),
            q.new_empty((b, hq, sq), dtype=torch.float32))


@torch.library.custom_op("flashjit::attention_bwd", mutates_args=(), device_types="cuda")
def attention_bwd(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  out: torch.Tensor, lse: torch.Tensor, causal: bool, window_left: int,
                  window_right: int, softcap: float, softmax_scale: Optional[float],
                  deterministic: bool = False) -> Tuple[torch.Tensor, torch.Tensor,
                                                        torch.Tensor]:
    call = _call(q, k, v, causal, window_left, window_right, softcap, softmax_scale,
                 deterministic=deterministic)
    if call.empty:
        # No key for any row (or no row): O does not depend on q, k, v.
        return torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    qp, kp, vp = (prepare(torch, q, call.pad_qk), prepare(torch, k, call.pad_qk),
                  prepare(torch, v, call.pad_v))
    # The kernel's output had zero columns past dim_v (V's padding): the
    # same O, padded again.
    outp = prepare(torch, out, call.pad_v)
    dq, dk, dv, _ = _launch.backward(torch, call, dout, qp, kp, vp, outp, lse)
    return _like(q, dq), _like(k, dk), _like(v, dv)


@attention_bwd.register_fake
def _(dout, q, k, v, out, lse, causal, window_left, window_right, softcap, softmax_scale,
      deterministic=False):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _arguments(name):
    """The names of the custom op flashjit::`name`'s arguments, in its
    schema's order: a registered backward returns one gradient (or None)
    per argument, and setup_context gets every argument, defaults filled
    in."""
    return [a.name for a in getattr(torch.ops.flashjit, name).default._schema.arguments]


_FWD_ARGUMENTS = _arguments("attention_fwd")


def _setup_context(ctx, inputs, output):
    q, k, v, causal, window_left, window_right, softcap, softmax_scale = inputs[:8]
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse)
    ctx.mask_args = (causal, window_left, window_right, softcap, softmax_scale)
    ctx.deterministic = inputs[_FWD_ARGUMENTS.index("deterministic")]
    ctx.mark_non_differentiable(lse)


def _attention_backward(ctx, dout, _dlse):
    # The LSE is an output for the caller's information: no gradient through
    # it (as FlashAttention).
    q, k, v, out, lse = ctx.saved_tensors
    dq, dk, dv = attention_bwd(dout, q, k, v, out, lse, *ctx.mask_args, ctx.deterministic)
    return (dq, dk, dv) + (None,) * (len(_FWD_ARGUMENTS) - 3)


attention_fwd.register_autograd(_attention_backward, setup_context=_setup_context)


# ---- packed varlen batches (flashjit.attention_varlen) --------------------------

def _varlen_call(q, k, v, cu_q, cu_k, max_q, max_k, causal, window_left, window_right, softcap,
                 softmax_scale, fp8=(None, None, None, None), num_splits=0, pack_gqa=0,
                 deterministic=False):
    """The attention_varlen call of these arguments: its checks, then the
    _launch.Call its forward and backward share (None when there is no
    query)."""
    return varlen.prepare_call(torch, q, k, v, cu_q, cu_k, max_q, max_k, softmax_scale, causal,
                                (window_left, window_right), softcap, fp8=fp8,
                                num_splits=num_splits, pack_gqa=_packing(varlen.NAME, pack_gqa),
                                deterministic=deterministic)


@torch.library.custom_op("flashjit::attention_varlen_fwd", mutates_args=(), device_types="cuda")
def attention_varlen_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                         cu_seqlens_q: torch.Tensor, cu_seqlens_k: torch.Tensor,
                         max_seqlen_q: int, max_seqlen_k: int, causal: bool, window_left: int,
                         window_right: int, softcap: float, softmax_scale: Optional[float],
                         q_descale: Optional[torch.Tensor] = None,
                         k_descale: Optional[torch.Tensor] = None,
                         v_descale: Optional[torch.Tensor] = None,
                         out_dtype: Optional[torch.dtype] = None, num_splits: int = 0,
                         pack_gqa: int = 0,
                         deterministic: bool = False) -> Tuple[torch.Tensor, torch.Tensor]:
    fp8 = (q_descale, k_descale, v_descale, out_dtype)
    call = _varlen_call(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal,
                        window_left, window_right, softcap, softmax_scale, fp8, num_splits,
                        pack_gqa, deterministic)
    if call is None:
        return varlen.empty_result(torch, q, v, out_dtype)
    out, lse = varlen.forward(torch, call, q, k, v, want_lse=True)
    return out.contiguous(), lse


@attention_varlen_fwd.register_fake
def _(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, window_left,
      window_right, softcap, softmax_scale, q_descale=None, k_descale=None, v_descale=None,
      out_dtype=None, num_splits=0, pack_gqa=0, deterministic=False):
    total_q, hq, _ = q.shape
    return (q.new_empty((total_q, hq, v.shape[2]), dtype=_out_dtype(varlen.NAME, q, out_dtype)),
            q.new_empty((hq, total_q), dtype=torch.float32))


@torch.library.custom_op("flashjit::attention_varlen_bwd", mutates_args=(), device_types="cuda")
def attention_varlen_bwd(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                         out: torch.Tensor, lse: torch.Tensor, cu_seqlens_q: torch.Tensor,
                         cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int,
                         causal: bool, window_left: int, window_right: int, softcap: float,
                         softmax_scale: Optional[float],
                         deterministic: bool = False) -> Tuple[torch.Tensor, torch.Tensor,
                                                               torch.Tensor]:
    call = _varlen_call(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal,
                        window_left, window_right, softcap, softmax_scale,
                        deterministic=deterministic)
    if call is None:
        return torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    qp, kp, vp = (prepare(torch, t.unsqueeze(0), pad)
                  for t, pad in ((q, call.pad_qk), (k, call.pad_qk), (v, call.pad_v)))
    outp = prepare(torch, out.unsqueeze(0), call.pad_v)
    dq, dk, dv, _ = _launch.backward(torch, call, dout.unsqueeze(0), qp, kp, vp, outp, lse)
    return _like(q, dq[0]), _like(k, dk[0]), _like(v, dv[0])


@attention_varlen_bwd.register_fake
def _(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal,
      window_left, window_right, softcap, softmax_scale, deterministic=False):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


_VARLEN_ARGUMENTS = _arguments("attention_varlen_fwd")


def _setup_varlen(ctx, inputs, output):
    q, k, v, cu_q, cu_k, max_q, max_k = inputs[:7]
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse, cu_q, cu_k)
    ctx.sizes = (max_q, max_k)
    ctx.mask_args = tuple(inputs[7:12])
    ctx.deterministic = inputs[_VARLEN_ARGUMENTS.index("deterministic")]
    ctx.mark_non_differentiable(lse)


def _varlen_backward(ctx, dout, _dlse):
    q, k, v, out, lse, cu_q, cu_k = ctx.saved_tensors
    dq, dk, dv = attention_varlen_bwd(dout, q, k, v, out, lse, cu_q, cu_k, *ctx.sizes,
                                      *ctx.mask_args, ctx.deterministic)
    return (dq, dk, dv) + (None,) * (len(_VARLEN_ARGUMENTS) - 3)


attention_varlen_fwd.register_autograd(_varlen_backward, setup_context=_setup_varlen)


# ---- KV cache (flashjit.attention_with_kvcache) ----------------------------------

@torch.library.custom_op("flashjit::attention_with_kvcache",
                         mutates_args=("k_cache", "v_cache"), device_types="cuda")
def attention_with_kvcache_op(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                              k: Optional[torch.Tensor], v: Optional[torch.Tensor],
                              cache_seqlens: Optional[torch.Tensor],
                              block_table: Optional[torch.Tensor],
                              softmax_scale: Optional[float], causal: bool, window_left: int,
                              window_right: int, softcap: float, num_splits: int,
                              q_descale: Optional[torch.Tensor] = None,
                              k_scale: Optional[torch.Tensor] = None,
                              v_scale: Optional[torch.Tensor] = None,
                              out_dtype: Optional[torch.dtype] = None,
                              pack_gqa: int = 0) -> Tuple[torch.Tensor, torch.Tensor]:
    return kvcache.attention_with_kvcache(
        q, k_cache, v_cache, k=k, v=v, cache_seqlens=cache_seqlens, block_table=block_table,
        softmax_scale=softmax_scale, causal=causal, window=(window_left, window_right),
        softcap=softcap, num_splits=num_splits, return_lse=True, q_descale=q_descale,
        k_scale=k_scale, v_scale=v_scale, out_dtype=out_dtype,
        pack_gqa=_packing(kvcache.NAME, pack_gqa))


@attention_with_kvcache_op.register_fake
def _(q, k_cache, v_cache, k, v, cache_seqlens, block_table, softmax_scale, causal, window_left,
      window_right, softcap, num_splits, q_descale=None, k_scale=None, v_scale=None,
      out_dtype=None, pack_gqa=0):
    b, sq, hq, _ = q.shape
    return (q.new_empty((b, sq, hq, v_cache.shape[3]),
                        dtype=_out_dtype(kvcache.NAME, q, out_dtype)),
            q.new_empty((b, hq, sq), dtype=torch.float32))


# ---- the serving call (flashjit.attention_varlen with block_table / seqused_k) ----

@torch.library.custom_op("flashjit::attention_varlen_kvcache", mutates_args=(),
                         device_types="cuda")
def attention_varlen_kvcache(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                             cu_seqlens_q: torch.Tensor, cu_seqlens_k: Optional[torch.Tensor],
                             max_seqlen_q: int, max_seqlen_k: int, causal: bool,
                             window_left: int, window_right: int, softcap: float,
                             softmax_scale: Optional[float], block_table: Optional[torch.Tensor],
                             seqused_k: Optional[torch.Tensor],
                             q_descale: Optional[torch.Tensor] = None,
                             k_descale: Optional[torch.Tensor] = None,
                             v_descale: Optional[torch.Tensor] = None,
                             out_dtype: Optional[torch.dtype] = None, num_splits: int = 0,
                             pack_gqa: int = 0) -> Tuple[torch.Tensor, torch.Tensor]:
    call = varlen.prepare_call(torch, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                max_seqlen_k, softmax_scale, causal, (window_left, window_right),
                                softcap, block_table=block_table, seqused_k=seqused_k,
                                fp8=(q_descale, k_descale, v_descale, out_dtype),
                                num_splits=num_splits, pack_gqa=_packing(varlen.NAME, pack_gqa))
    if call is None:
        return varlen.empty_result(torch, q, v, out_dtype)
    # Without block_table and seqused_k, the packed forward.
    out, lse = varlen.forward(torch, call, q, k, v, want_lse=True)
    return out.contiguous(), lse


@attention_varlen_kvcache.register_fake
def _(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, window_left,
      window_right, softcap, softmax_scale, block_table, seqused_k, q_descale=None,
      k_descale=None, v_descale=None, out_dtype=None, num_splits=0, pack_gqa=0):
    total_q, hq, _ = q.shape
    # v: packed [total_k, hkv, dv] or paged [num_pages, page_size, hkv, dv].
    return (q.new_empty((total_q, hq, v.shape[-1]), dtype=_out_dtype(varlen.NAME, q, out_dtype)),
            q.new_empty((hq, total_q), dtype=torch.float32))
