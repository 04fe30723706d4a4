"""flashjit.attention_varlen: a packed batch of sequences of different lengths,
with flash_attn_varlen_func's contract.

    out = flashjit.attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k,
                                    max_seqlen_q, max_seqlen_k, causal=True)

q is [total_q, heads_q, d], k/v [total_k, heads_kv, d]; sequence b owns rows
cu_seqlens_q[b] .. cu_seqlens_q[b + 1] of q (likewise of k/v). Forward only for
now (issue #14): calling backward through it raises.
"""
import ctypes

from . import _capi

_NAME = "flashjit.attention_varlen"


def _fail(kind, message):
    return kind(f"{_NAME}: {message}")


def _check(torch, name, t, dims, device=None):
    if not isinstance(t, torch.Tensor):
        raise _fail(TypeError, f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != dims:
        raise _fail(ValueError, f"{name} must be {dims}-D, got shape {tuple(t.shape)}")
    if not t.is_cuda:
        raise _fail(ValueError, f"{name} must be a CUDA tensor, got device {t.device}")
    if device is not None and t.device != device:
        raise _fail(ValueError, f"{name} is on {t.device} but q is on {device}")


def _offsets(torch, name, t, batch, device):
    if not isinstance(t, torch.Tensor) or t.dtype != torch.int32 or t.dim() != 1:
        raise _fail(TypeError, f"{name} must be an int32 tensor of shape [batch + 1]")
    if batch is not None and t.shape[0] != batch + 1:
        raise _fail(ValueError, f"{name} has {t.shape[0]} entries, cu_seqlens_q has {batch + 1}")
    if t.shape[0] < 2:
        raise _fail(ValueError, f"{name} needs at least 2 entries (batch + 1), got {t.shape[0]}")
    if t.device != device:
        raise _fail(ValueError, f"{name} is on {t.device} but q is on {device}")
    return t.contiguous()


def _length(name, value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _fail(TypeError if not isinstance(value, int) else ValueError,
                    f"{name} must be an int >= 0 (the longest sequence's length), got {value!r}")
    return value


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                     softmax_scale=None, causal=False, window=(-1, -1), softcap=0.0,
                     return_lse=False):
    """Attention over a packed batch of sequences of different lengths.

    q: [total_q, heads_q, d]; k, v: [total_k, heads_kv, d] / [total_k,
        heads_kv, d_v], bf16 or fp16; head dims that are not multiples of 8
        are padded (copies), as flashjit.attention does.
    cu_seqlens_q, cu_seqlens_k: int32 [batch + 1] device tensors: 0, then
        each sequence's end (non-decreasing, the last equal to total). They
        are not checked on the host (that would synchronise): the kernels
        clamp them to the tensors, so bad offsets give wrong rows, never an
        out-of-bounds access.
    max_seqlen_q, max_seqlen_k: the longest sequence's lengths (ints); a
        sequence longer than these is cut there.
    causal / window: aligned bottom-right per sequence; softcap and
        softmax_scale as flashjit.attention.
    return_lse: also return the fp32 [heads_q, total_q] log-sum-exp.

    Rows of q that no sequence owns get unspecified output. Forward only for
    now: backward through it raises NotImplementedError.
    """
    import torch
    from . import (_POISON_OUTPUT, _check_rc, _dtype_code, _forward_config, _kernel_strides,
                   _mask, _prepare)

    _check(torch, "q", q, 3)
    device = q.device
    _check(torch, "k", k, 3, device)
    _check(torch, "v", v, 3, device)
    dtype = _dtype_code(torch, q.dtype)
    if dtype is None:
        raise _fail(TypeError, f"q must be bf16 or fp16, got {q.dtype}")
    for name, t in (("k", k), ("v", v)):
        if t.dtype != q.dtype:
            raise _fail(TypeError, f"{name} is {t.dtype} but q is {q.dtype}")
    total_q, heads_q, dim = q.shape
    total_k, heads_kv, dim_k = k.shape
    if tuple(v.shape[:2]) != (total_k, heads_kv):
        raise _fail(ValueError, f"k {tuple(k.shape)} and v {tuple(v.shape)} must agree in their "
                                f"first two dims")
    dim_v = v.shape[2]
    if dim_k != dim:
        raise _fail(ValueError, f"q has head_dim {dim} but k has {dim_k}")
    if heads_kv == 0 or heads_q % heads_kv:
        raise _fail(ValueError, f"heads_q ({heads_q}) must be a multiple of heads_kv ({heads_kv})")
    cu_q = _offsets(torch, "cu_seqlens_q", cu_seqlens_q, None, device)
    batch = cu_q.shape[0] - 1
    cu_k = _offsets(torch, "cu_seqlens_k", cu_seqlens_k, batch, device)
    max_q = _length("max_seqlen_q", max_seqlen_q)
    max_k = _length("max_seqlen_k", max_seqlen_k)
    for name, longest, total in (("max_seqlen_q", max_q, total_q), ("max_seqlen_k", max_k,
                                                                    total_k)):
        if longest > total:
            raise _fail(ValueError, f"{name}={longest} exceeds the packed tensor's {total} rows")
    mask, window_left, window_right = _mask(causal, window)
    softcap = float(softcap)
    if softcap < 0:
        raise _fail(ValueError, f"softcap must be >= 0 (0: off), got {softcap}")
    scale = dim ** -0.5 if softmax_scale is None else float(softmax_scale)

    out = torch.empty((total_q, heads_q, dim_v), dtype=q.dtype, device=device)
    lse = torch.empty((heads_q, total_q), dtype=torch.float32, device=device) \
        if return_lse else None
    if total_q == 0 or heads_q == 0 or max_q == 0:
        if lse is not None:
            lse.fill_(float("inf"))
        return _no_grad_result(torch, (out, lse) if return_lse else out, q, k, v)
    pad_qk, pad_v = -dim % 8, -dim_v % 8
    # [total, heads, d] as a [1, total, heads, d] view: the kernels' layout.
    qp, kp, vp = (_prepare(torch, t.unsqueeze(0), pad)
                  for t, pad in ((q, pad_qk), (k, pad_qk), (v, pad_v)))
    outp = out if not pad_v else torch.empty((total_q, heads_q, dim_v + pad_v), dtype=q.dtype,
                                             device=device)
    if _POISON_OUTPUT:
        outp.fill_(float("nan"))
        if lse is not None:
            lse.fill_(float("nan"))

    problem = _capi.Problem(
        dtype=dtype, mask=mask, batch=batch, heads_q=heads_q, heads_kv=heads_kv,
        seqlen_q=max_q, seqlen_k=max(max_k, 1), head_dim_qk=dim + pad_qk,
        head_dim_v=dim_v + pad_v, window_left=window_left, window_right=window_right,
        softmax_scale=scale, softcap=softcap, varlen=1)

    def strides(t):  # (batch unused, row, head) of a [1, total, heads, d] view
        return (0,) + _kernel_strides(t)[1:]

    o4 = outp.unsqueeze(0)
    args = _capi.ForwardArgs(
        qp.data_ptr(), kp.data_ptr(), vp.data_ptr(), o4.data_ptr(),
        lse.data_ptr() if lse is not None else None,
        *strides(qp), *strides(kp), *strides(vp), *strides(o4))
    varlen = _capi.VarlenArgs(cu_q.data_ptr(), cu_k.data_ptr(), total_q, total_k)
    lib = _capi.lib()
    if not hasattr(lib, "flashjit_forward_varlen"):
        raise RuntimeError(f"{_NAME}: the loaded libflashjit.so has no flashjit_forward_varlen "
                           f"(built before varlen); rebuild it")
    with torch.cuda.device(device):
        stream = torch.cuda.current_stream(device).cuda_stream
        config = _forward_config(0, _capi.PACK_GQA_AUTO)
        _check_rc(lib.flashjit_forward_varlen(
            ctypes.byref(problem), ctypes.byref(args), ctypes.byref(varlen),
            ctypes.c_void_p(stream), ctypes.byref(config) if config is not None else None), _NAME)
    if pad_v:
        out.copy_(outp[..., :dim_v])
    return _no_grad_result(torch, (out, lse) if return_lse else out, q, k, v)


def _no_grad_result(torch, result, q, k, v):
    """The outputs, with a backward that raises when any input needs grad:
    the varlen backward is not implemented yet, and silently returning no
    gradient would train a model wrong."""
    if not (torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))):
        return result
    out = result[0] if isinstance(result, tuple) else result
    out = _Unsupported.apply(out, q, k, v)
    return (out, result[1]) if isinstance(result, tuple) else out


def _make_unsupported():
    import torch

    class Unsupported(torch.autograd.Function):
        @staticmethod
        def forward(ctx, out, q, k, v):
            return out.clone()

        @staticmethod
        def backward(ctx, grad):
            raise NotImplementedError(
                f"{_NAME}: the backward of a packed varlen batch is not implemented yet "
                f"(issue #14); pad the batch and use flashjit.attention, or call this under "
                f"torch.no_grad()")

    return Unsupported


class _LazyUnsupported:
    _fn = None

    @classmethod
    def apply(cls, *args):
        if cls._fn is None:
            cls._fn = _make_unsupported()
        return cls._fn.apply(*args)


_Unsupported = _LazyUnsupported
