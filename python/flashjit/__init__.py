"""flashjit: JIT-compiled FlashAttention kernels, called on PyTorch tensors.

    import torch, flashjit
    q = torch.randn(2, 4096, 16, 128, device="cuda", dtype=torch.bfloat16)
    k, v = torch.randn_like(q), torch.randn_like(q)
    out = flashjit.attention(q, k, v, causal=True)             # [2, 4096, 16, 128]
    out, lse = flashjit.attention(q, k, v, return_lse=True)    # lse: [2, 16, 4096] fp32

The same contract as flash_attn.flash_attn_func (forward only for now). The
binding is pure Python over the C API (include/flashjit/flashjit.h) through
ctypes: no build step. libflashjit.so is found through $FLASHJIT_LIB (the file
or its folder), else <repo>/build*/libflashjit.so, else <repo>/.device/lib.

The first call for a problem class (dtype, head dims, mask kind, softcap, GPU)
compiles its kernel; later calls, for any batch, heads or sequence lengths,
reuse it.

Set FLASHJIT_POISON_OUTPUT=1 (read at import) to fill outputs with NaN before
each launch, so that a kernel that leaves elements unwritten is caught.
"""
import ctypes
import math
import os

from . import _capi
from ._capi import LibraryNotFound

__all__ = ["attention", "compile_count", "version", "LibraryNotFound"]

_POISON_OUTPUT = os.environ.get("FLASHJIT_POISON_OUTPUT", "") not in ("", "0")

_GRAD_ERROR = ("flashjit.attention: backward is not implemented yet (issue #5); call it under "
               "torch.no_grad() or on tensors that do not require grad")


def version():
    """The library's version string, e.g. "0.1.0"."""
    return _capi.lib().flashjit_version().decode()


def compile_count():
    """NVRTC compilations this process has performed (cache hits do not count)."""
    return int(_capi.lib().flashjit_compile_count())


def _dtype_code(torch, dtype):
    if dtype == torch.bfloat16:
        return _capi.BF16
    if dtype == torch.float16:
        return _capi.FP16
    return None


def _kernel_strides(t):
    """(batch, seq, head) element strides of a [b, s, h, d] tensor. The stride of
    a size-1 dimension is never used by the kernel; PyTorch may give it any
    value, so the packed one is passed instead."""
    b, s, h, d = t.shape
    packed = (s * h * d, h * d, d)
    return tuple(t.stride(i) if t.size(i) != 1 else packed[i] for i in range(3))


def _kernel_ready(t):
    """The kernel loads 16-byte vectors: the last dim must be contiguous, the
    other strides multiples of 8 elements and the pointer 16-byte aligned."""
    return (t.stride(-1) == 1 and t.data_ptr() % 16 == 0
            and all(s % 8 == 0 for s in _kernel_strides(t)))


def _prepare(torch, t, pad):
    if pad:
        # Zeros in the extra columns of q and k leave every score unchanged;
        # the extra columns of v produce output columns that are dropped.
        return torch.nn.functional.pad(t, (0, pad))
    if _kernel_ready(t):
        return t
    # Not .contiguous(): a contiguous view at a misaligned offset would come
    # back as it is.
    return t.clone(memory_format=torch.contiguous_format)


def _mask(causal, window):
    try:
        left, right = (int(w) for w in window)
    except (TypeError, ValueError):
        raise ValueError(f"flashjit.attention: window must be a pair (left, right) of ints, "
                         f"-1 meaning unbounded; got {window!r}") from None
    if left < -1 or right < -1:
        raise ValueError(f"flashjit.attention: window bounds must be >= -1 (-1: unbounded); "
                         f"got ({left}, {right})")
    if causal:
        right = 0  # flash_attn: causal with a window is window (left, 0)
    if left < 0 and right < 0:
        return _capi.MASK_NONE, -1, -1
    if left < 0 and right == 0:
        return _capi.MASK_CAUSAL, -1, 0
    return _capi.MASK_WINDOW, left, right


def attention(q, k, v, causal=False, window=(-1, -1), softcap=0.0, softmax_scale=None,
              return_lse=False):
    """Exact attention softmax(softmax_scale * q k^T + mask) v on CUDA tensors.

    q: [batch, seqlen_q, heads_q, head_dim]; k: [batch, seqlen_k, heads_kv, head_dim];
    v: [batch, seqlen_k, heads_kv, head_dim_v]. bf16 or fp16, all the same, on one
    CUDA device; heads_q a multiple of heads_kv (GQA/MQA); head dims up to 256.

    causal: mask aligned to the bottom-right corner (FlashAttention >= 2.1): query
        row i sees key j <= i + seqlen_k - seqlen_q.
    window: (left, right) sliding window, -1 unbounded; with causal=True it is
        (left, 0).
    softcap: > 0 applies softcap * tanh(scores / softcap) before the mask.
    softmax_scale: default 1 / sqrt(head_dim).
    return_lse: also return the log-sum-exp of the scaled scores, fp32
        [batch, heads_q, seqlen_q].

    Returns out [batch, seqlen_q, heads_q, head_dim_v] (and lse). Runs on the
    current CUDA stream of the tensors' device.
    """
    import torch

    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)):
        raise NotImplementedError(_GRAD_ERROR)

    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"flashjit.attention: {name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"flashjit.attention: {name} must be 4-D [batch, seqlen, heads, head_dim], "
                             f"got shape {tuple(t.shape)}")
        if not t.is_cuda:
            raise ValueError(f"flashjit.attention: {name} must be a CUDA tensor, got device {t.device}")
    dtype = _dtype_code(torch, q.dtype)
    if dtype is None:
        raise TypeError(f"flashjit.attention: q must be bf16 or fp16, got {q.dtype}")
    for name, t in (("k", k), ("v", v)):
        if t.dtype != q.dtype:
            raise TypeError(f"flashjit.attention: {name} is {t.dtype} but q is {q.dtype}; "
                            f"q, k and v must have the same dtype")
        if t.device != q.device:
            raise ValueError(f"flashjit.attention: {name} is on {t.device} but q is on {q.device}; "
                             f"q, k and v must be on the same device")

    batch, seqlen_q, heads_q, dim_qk = q.shape
    batch_k, seqlen_k, heads_kv, dim_k = k.shape
    if tuple(v.shape[:3]) != (batch_k, seqlen_k, heads_kv):
        raise ValueError(f"flashjit.attention: k {tuple(k.shape)} and v {tuple(v.shape)} must agree "
                         f"in batch, seqlen and heads")
    dim_v = v.shape[3]
    if batch_k != batch:
        raise ValueError(f"flashjit.attention: q has batch {batch} but k has {batch_k}")
    if dim_k != dim_qk:
        raise ValueError(f"flashjit.attention: q has head_dim {dim_qk} but k has {dim_k}")
    if heads_kv == 0 or heads_q % heads_kv != 0:
        raise ValueError(f"flashjit.attention: heads_q ({heads_q}) must be a multiple of heads_kv "
                         f"({heads_kv})")
    for name, d in (("q/k", dim_qk), ("v", dim_v)):
        if not 1 <= d <= 256:
            raise ValueError(f"flashjit.attention: head_dim of {name} is {d}; flashjit supports 1..256")
    mask, window_left, window_right = _mask(causal, window)
    softcap = float(softcap)
    if softcap < 0:
        raise ValueError(f"flashjit.attention: softcap must be >= 0 (0: off), got {softcap}")
    # From the original head dim: padding must not change the result.
    scale = 1.0 / math.sqrt(dim_qk) if softmax_scale is None else float(softmax_scale)

    pad_qk, pad_v = -dim_qk % 8, -dim_v % 8
    out = torch.empty((batch, seqlen_q, heads_q, dim_v + pad_v), dtype=q.dtype, device=q.device)
    lse = (torch.empty((batch, heads_q, seqlen_q), dtype=torch.float32, device=q.device)
           if return_lse else None)
    if out.numel() == 0 or seqlen_k == 0:
        # No keys: like FlashAttention, O = 0 and LSE = +inf for every row.
        out.zero_()
        if lse is not None:
            lse.fill_(float("inf"))
        out = out[..., :dim_v]
        return (out, lse) if return_lse else out

    qp, kp, vp = _prepare(torch, q, pad_qk), _prepare(torch, k, pad_qk), _prepare(torch, v, pad_v)
    if _POISON_OUTPUT:
        out.fill_(float("nan"))
        if lse is not None:
            lse.fill_(float("nan"))

    problem = _capi.Problem(
        dtype=dtype, mask=mask, batch=batch, heads_q=heads_q, heads_kv=heads_kv,
        seqlen_q=seqlen_q, seqlen_k=seqlen_k, head_dim_qk=dim_qk + pad_qk,
        head_dim_v=dim_v + pad_v, window_left=window_left, window_right=window_right,
        softmax_scale=scale, softcap=softcap)
    args = _capi.ForwardArgs(
        qp.data_ptr(), kp.data_ptr(), vp.data_ptr(), out.data_ptr(),
        lse.data_ptr() if lse is not None else None,
        *_kernel_strides(qp), *_kernel_strides(kp), *_kernel_strides(vp), *_kernel_strides(out))

    lib = _capi.lib()
    # The library launches into the current context (PyTorch's primary
    # context of the current device): make that the tensors' device.
    with torch.cuda.device(q.device):
        stream = torch.cuda.current_stream(q.device).cuda_stream
        rc = lib.flashjit_forward(ctypes.byref(problem), ctypes.byref(args),
                                  ctypes.c_void_p(stream), None)
        if rc != 0:
            raise RuntimeError(f"flashjit.attention: {_capi.last_error()}")

    if pad_v:
        out = out[..., :dim_v]
    return (out, lse) if return_lse else out
