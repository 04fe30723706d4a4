"""flashjit.attention_varlen: a packed batch of sequences of different lengths,
with flash_attn_varlen_func's contract.

    out = flashjit.attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k,
                                    max_seqlen_q, max_seqlen_k, causal=True)

q is [total_q, heads_q, d], k/v [total_k, heads_kv, d]; sequence b owns rows
cu_seqlens_q[b] .. cu_seqlens_q[b + 1] of q (likewise of k/v). Differentiable
with respect to q, k and v (flashjit's varlen backward kernels).
"""
import ctypes

from . import _capi
from ._checks import check_inputs

_NAME = "flashjit.attention_varlen"


def _fail(kind, message):
    return kind(f"{_NAME}: {message}")


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

    Rows of q that no sequence owns get unspecified output (and gradient).
    Differentiable with respect to q, k and v: the backward recomputes the
    probabilities from the saved log-sum-exp, as flashjit.attention does.
    """
    import torch

    if torch.compiler.is_compiling():
        # torch.compile traces the custom ops (flashjit/ops.py); eager calls
        # below go straight to the library.
        from . import _custom_ops
        _custom_ops()
        left, right = window
        out, lse = torch.ops.flashjit.attention_varlen_fwd(
            q, k, v, cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q), int(max_seqlen_k),
            bool(causal), int(left), int(right), float(softcap),
            None if softmax_scale is None else float(softmax_scale))
        return (out, lse) if return_lse else out

    call = prepare_call(torch, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                        softmax_scale, causal, window, softcap)
    if call is None:
        out, lse = empty_result(torch, q, v)
        return (out, lse) if return_lse else out
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    if not needs_grad:
        out, lse = _forward(torch, call, q, k, v, want_lse=return_lse)[:2]
        return (out, lse) if return_lse else out
    out, lse = _function().apply(q, k, v, call)
    return (out, lse) if return_lse else out


def prepare_call(torch, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                 softmax_scale, causal, window, softcap):
    """The checked arguments as the _Call the forward and backward share, or
    None when there is no query (no kernel to run)."""
    from . import _mask

    dtype = check_inputs(torch, _fail, q, 3, (("k", k), ("v", v)))
    device = q.device
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
    if total_q == 0 or heads_q == 0 or max_q == 0:
        return None
    return _Call(torch, dtype, batch, heads_q, heads_kv, max_q, max_k, dim, dim_v, mask,
                 window_left, window_right, scale, softcap, total_q, total_k, cu_q, cu_k)


def empty_result(torch, q, v):
    """(out, lse) of a call with no query to attend: zeros and +inf."""
    total_q, heads_q = q.shape[0], q.shape[1]
    out = torch.zeros((total_q, heads_q, v.shape[2]), dtype=q.dtype, device=q.device)
    lse = torch.full((heads_q, total_q), float("inf"), dtype=torch.float32, device=q.device)
    return out, lse


class _Call:
    """What the forward and backward of one call share: the C problem (head
    dims padded to multiples of 8), the padding, the offsets and totals."""

    def __init__(self, torch, dtype, batch, heads_q, heads_kv, max_q, max_k, dim, dim_v, mask,
                 window_left, window_right, scale, softcap, total_q, total_k, cu_q, cu_k):
        self.pad_qk, self.pad_v = -dim % 8, -dim_v % 8
        self.dim_v = dim_v
        self.problem = _capi.Problem(
            dtype=dtype, mask=mask, batch=batch, heads_q=heads_q, heads_kv=heads_kv,
            seqlen_q=max_q, seqlen_k=max(max_k, 1), head_dim_qk=dim + self.pad_qk,
            head_dim_v=dim_v + self.pad_v, window_left=window_left, window_right=window_right,
            softmax_scale=scale, softcap=softcap, varlen=1)
        self.cu_q, self.cu_k = cu_q, cu_k
        self.varlen = _capi.VarlenArgs(cu_q.data_ptr(), cu_k.data_ptr(), total_q, total_k)


def _strides(t):
    """(batch unused, row, head) element strides of a [1, total, heads, d] view."""
    from . import _kernel_strides
    return (0,) + _kernel_strides(t)[1:]


def _forward(torch, call, q, k, v, want_lse):
    """(out [total_q, heads_q, dv], lse or None, and the padded [1, total,
    heads, d] views q, k, v, out the backward needs)."""
    from . import _POISON_OUTPUT, _check_rc, _forward_config, _prepare
    p = call.problem
    total_q, heads_q = q.shape[0], q.shape[1]
    qp, kp, vp = (_prepare(torch, t.unsqueeze(0), pad)
                  for t, pad in ((q, call.pad_qk), (k, call.pad_qk), (v, call.pad_v)))
    outp = torch.empty((1, total_q, heads_q, p.head_dim_v), dtype=q.dtype, device=q.device)
    lse = torch.empty((heads_q, total_q), dtype=torch.float32, device=q.device) \
        if want_lse else None
    if _POISON_OUTPUT:
        outp.fill_(float("nan"))
        if lse is not None:
            lse.fill_(float("nan"))
    args = _capi.ForwardArgs(
        qp.data_ptr(), kp.data_ptr(), vp.data_ptr(), outp.data_ptr(),
        lse.data_ptr() if lse is not None else None,
        *_strides(qp), *_strides(kp), *_strides(vp), *_strides(outp))
    lib = _capi.lib()
    if not hasattr(lib, "flashjit_forward_varlen"):
        raise RuntimeError(f"{_NAME}: the loaded libflashjit.so has no flashjit_forward_varlen "
                           f"(built before varlen); rebuild it")
    with torch.cuda.device(q.device):
        stream = torch.cuda.current_stream(q.device).cuda_stream
        config = _forward_config(0, _capi.PACK_GQA_AUTO)
        _check_rc(lib.flashjit_forward_varlen(
            ctypes.byref(p), ctypes.byref(args), ctypes.byref(call.varlen),
            ctypes.c_void_p(stream), ctypes.byref(config) if config is not None else None), _NAME)
    out = outp[0, ..., :call.dim_v] if call.pad_v else outp[0]
    return out, lse, qp, kp, vp, outp


def _backward(torch, call, dout, qp, kp, vp, outp, lse):
    """dq, dk, dv ([total, heads, d] of the unpadded head dims)."""
    from . import (_POISON_OUTPUT, _check_rc, _grad_buffer, _pinned_config, _prepare)
    lib = _capi.lib()
    if not hasattr(lib, "flashjit_backward_varlen"):
        raise RuntimeError(f"{_NAME} backward: the loaded libflashjit.so has no "
                           f"flashjit_backward_varlen (built before the varlen backward); "
                           f"rebuild it")
    p = call.problem
    # Zeros in dO's extra columns leave D and dP unchanged (flashjit.attention).
    dop = _prepare(torch, dout.unsqueeze(0), call.pad_v)
    dq, dk, dv = _grad_buffer(torch, qp), _grad_buffer(torch, kp), _grad_buffer(torch, vp)
    nbytes = int(lib.flashjit_backward_varlen_workspace_bytes(ctypes.byref(p),
                                                              call.varlen.total_q))
    if nbytes == 0:
        raise RuntimeError(f"{_NAME} backward: {_capi.last_error() or 'invalid sizes'}")
    workspace = torch.empty(nbytes + 16, dtype=torch.uint8, device=qp.device)
    ws_ptr = workspace.data_ptr() + (-workspace.data_ptr() % 16)
    if _POISON_OUTPUT:
        for t in (dq, dk, dv):
            t.fill_(float("nan"))
        workspace.fill_(0xFF)
    args = _capi.BackwardArgs(
        qp.data_ptr(), kp.data_ptr(), vp.data_ptr(), outp.data_ptr(), dop.data_ptr(),
        lse.data_ptr(), dq.data_ptr(), dk.data_ptr(), dv.data_ptr(),
        *_strides(qp), *_strides(kp), *_strides(vp), *_strides(outp), *_strides(dop),
        *_strides(dq), *_strides(dk), *_strides(dv), ws_ptr, nbytes)
    with torch.cuda.device(qp.device):
        stream = torch.cuda.current_stream(qp.device).cuda_stream
        config = _pinned_config("FLASHJIT_BACKWARD_PATH")
        _check_rc(lib.flashjit_backward_varlen(
            ctypes.byref(p), ctypes.byref(args), ctypes.byref(call.varlen),
            ctypes.c_void_p(stream), ctypes.byref(config) if config is not None else None),
            f"{_NAME} backward")
    dim_qk = p.head_dim_qk - call.pad_qk
    return dq[0, ..., :dim_qk], dk[0, ..., :dim_qk], dv[0, ..., :call.dim_v]


_fn = None


def _function():
    """The torch.autograd.Function, defined on first use (torch is imported lazily)."""
    global _fn
    if _fn is None:
        import torch
        from torch.autograd.function import once_differentiable

        class AttentionVarlen(torch.autograd.Function):
            @staticmethod
            def forward(ctx, q, k, v, call):
                out, lse, qp, kp, vp, outp = _forward(torch, call, q, k, v, want_lse=True)
                ctx.save_for_backward(qp, kp, vp, outp, lse, call.cu_q, call.cu_k)
                ctx.call = call
                ctx.mark_non_differentiable(lse)
                return out, lse

            @staticmethod
            @once_differentiable
            def backward(ctx, dout, _dlse):
                qp, kp, vp, outp, lse, _, _ = ctx.saved_tensors
                dq, dk, dv = _backward(torch, ctx.call, dout, qp, kp, vp, outp, lse)
                return dq, dk, dv, None

        _fn = AttentionVarlen
    return _fn
