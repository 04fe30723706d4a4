"""flashjit: JIT-compiled FlashAttention kernels, called on PyTorch tensors.

    import torch, flashjit
    q = torch.randn(2, 4096, 16, 128, device="cuda", dtype=torch.bfloat16)
    k, v = torch.randn_like(q), torch.randn_like(q)
    out = flashjit.attention(q, k, v, causal=True)             # [2, 4096, 16, 128]
    out, lse = flashjit.attention(q, k, v, return_lse=True)    # lse: [2, 16, 4096] fp32
    out = flashjit.attention(q, k, v, num_splits=4, pack_gqa=True)  # decode knobs

The same contract as flash_attn.flash_attn_func, differentiable: when grad
mode is on and q, k or v requires grad, the call goes through a
torch.autograd.Function whose backward runs flashjit_backward (recomputing the
probabilities from the saved O and log-sum-exp; P is never stored):

    q.requires_grad_(); out = flashjit.attention(q, k, v, causal=True)
    out.backward(dout)                                          # q.grad, ...

The binding is pure Python over the C API (include/flashjit/flashjit.h) through
ctypes. libflashjit.so is found through $FLASHJIT_LIB (the file or its
folder), else inside the package (`pip install .` puts it there), else
<repo>/build*/libflashjit.so, else <repo>/.device/lib.

The first call for a problem class (dtype, head dims, mask kind, softcap, GPU)
compiles its kernel; later calls, for any batch, heads or sequence lengths,
reuse it.

Set FLASHJIT_POISON_OUTPUT=1 (read at import) to fill outputs (and gradients,
and the backward's workspace) with NaN before each launch, so that a kernel
that leaves elements unwritten is caught.
"""
import ctypes
import math
import os
import sys

from . import _capi, _warm
from ._capi import LibraryNotFound

__all__ = ["attention", "attention_varlen", "attention_with_kvcache", "compile_count", "version",
           "LibraryNotFound", "query", "tune", "precompile", "FlashjitCommandError",
           "create_block_mask"]

_POISON_OUTPUT = os.environ.get("FLASHJIT_POISON_OUTPUT", "") not in ("", "0")


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


_MAX_SPLITS = 256  # flashjit.h: flashjit_config.splits


def _forward_knobs(num_splits, pack_gqa):
    """num_splits and pack_gqa of attention(), checked, as the values of
    flashjit_config's splits and pack_gqa fields."""
    # bool is an int to Python; num_splits=True is a mistake, not 1.
    if isinstance(num_splits, bool) or not isinstance(num_splits, int):
        raise TypeError(f"flashjit.attention: num_splits must be an int (0: the library chooses, "
                        f"1: off), got {type(num_splits).__name__}")
    if not 0 <= num_splits <= _MAX_SPLITS:
        raise ValueError(f"flashjit.attention: num_splits must be in [0, {_MAX_SPLITS}] "
                         f"(0: the library chooses, 1: off), got {num_splits}")
    if pack_gqa is None:
        return num_splits, _capi.PACK_GQA_AUTO
    if not isinstance(pack_gqa, bool):
        raise TypeError(f"flashjit.attention: pack_gqa must be None (the library chooses), True "
                        f"or False, got {pack_gqa!r}")
    return num_splits, _capi.PACK_GQA_ON if pack_gqa else _capi.PACK_GQA_OFF


class _Call:
    """What one attention() call needs besides the tensors: the validated
    arguments and the library's problem (with the padded head dims)."""
    __slots__ = ("problem", "dim_qk", "dim_v", "pad_qk", "pad_v", "empty", "splits", "pack_gqa",
                 "modifiers", "sinks")

    def __init__(self, problem, dim_qk, dim_v, pad_qk, pad_v, empty, splits=0,
                 pack_gqa=_capi.PACK_GQA_AUTO):
        self.problem, self.dim_qk, self.dim_v = problem, dim_qk, dim_v
        self.pad_qk, self.pad_v, self.empty = pad_qk, pad_v, empty
        self.splits, self.pack_gqa = splits, pack_gqa
        # (flashjit_modifiers, what keeps its buffers and aux tensors alive)
        # of a call with modifiers, for both passes; None without.
        self.modifiers = None
        # The learned sinks as the kernels read them (float32 [heads_q],
        # contiguous), or None.
        self.sinks = None


def _check_rc(rc, what="flashjit.attention"):
    if rc != 0:
        raise RuntimeError(f"{what}: {_capi.last_error()}")


def _validate(torch, q, k, v, causal, window, softcap, softmax_scale, num_splits=0,
              pack_gqa=None):
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
    splits, pack = _forward_knobs(num_splits, pack_gqa)
    # From the original head dim: padding must not change the result.
    scale = 1.0 / math.sqrt(dim_qk) if softmax_scale is None else float(softmax_scale)

    pad_qk, pad_v = -dim_qk % 8, -dim_v % 8
    problem = _capi.Problem(
        dtype=dtype, mask=mask, batch=batch, heads_q=heads_q, heads_kv=heads_kv,
        seqlen_q=seqlen_q, seqlen_k=seqlen_k, head_dim_qk=dim_qk + pad_qk,
        head_dim_v=dim_v + pad_v, window_left=window_left, window_right=window_right,
        softmax_scale=scale, softcap=softcap)
    empty = batch * seqlen_q * heads_q == 0 or seqlen_k == 0
    return _Call(problem, dim_qk, dim_v, pad_qk, pad_v, empty, splits, pack)


def _forward(torch, q, k, v, call, want_lse, modifiers=None):
    """Runs the forward. Returns (out, lse, qp, kp, vp): out [b, sq, hq, dv + pad_v]
    (padded; the caller slices), lse or None, and the (padded) inputs the kernel read.
    modifiers: a flashjit_modifiers struct (flashjit/modifiers.py) or None."""
    p = call.problem
    out = torch.empty((p.batch, p.seqlen_q, p.heads_q, p.head_dim_v), dtype=q.dtype, device=q.device)
    lse = (torch.empty((p.batch, p.heads_q, p.seqlen_q), dtype=torch.float32, device=q.device)
           if want_lse else None)
    if call.empty:
        # No keys: like FlashAttention, O = 0 and LSE = +inf for every row.
        out.zero_()
        if lse is not None:
            lse.fill_(float("inf"))
            if call.sinks is not None and p.seqlen_k == 0:
                # Only the sink: its logit is the row's LSE (P = 1 on no value).
                lse.copy_(call.sinks.view(1, -1, 1).expand_as(lse))
        return out, lse, q, k, v

    qp, kp, vp = (_prepare(torch, q, call.pad_qk), _prepare(torch, k, call.pad_qk),
                  _prepare(torch, v, call.pad_v))
    if _POISON_OUTPUT:
        out.fill_(float("nan"))
        if lse is not None:
            lse.fill_(float("nan"))

    args = _capi.ForwardArgs(
        qp.data_ptr(), kp.data_ptr(), vp.data_ptr(), out.data_ptr(),
        lse.data_ptr() if lse is not None else None,
        *_kernel_strides(qp), *_kernel_strides(kp), *_kernel_strides(vp), *_kernel_strides(out))

    lib = _capi.lib()
    # The library launches into the current context (PyTorch's primary
    # context of the current device): make that the tensors' device.
    with torch.cuda.device(q.device):
        stream = torch.cuda.current_stream(q.device).cuda_stream
        config = _forward_config(call.splits, call.pack_gqa)
        config_ref = ctypes.byref(config) if config is not None else None
        if modifiers is not None:
            _check_rc(lib.flashjit_forward_modified(ctypes.byref(p), ctypes.byref(args),
                                                    ctypes.byref(modifiers),
                                                    ctypes.c_void_p(stream), config_ref))
        else:
            _check_rc(lib.flashjit_forward(ctypes.byref(p), ctypes.byref(args),
                                           ctypes.c_void_p(stream), config_ref))
    return out, lse, qp, kp, vp


_PATHS = {"auto": 0, "sm80": 1, "sm90": 2}


def _pinned_config(variable):
    """$FLASHJIT_KERNEL_PATH (forward) and $FLASHJIT_BACKWARD_PATH (backward)
    = auto|sm80|sm90 pin a pass's kernel family (benchmarks compare the
    families); unset, the library chooses."""
    path = os.environ.get(variable)
    if not path:
        return None
    if path not in _PATHS:
        raise ValueError(f"{variable}={path!r}: expected one of {sorted(_PATHS)}")
    return _capi.Config(path=_PATHS[path])


def _forward_config(splits, pack_gqa):
    """The forward's flashjit_config: $FLASHJIT_KERNEL_PATH's family and the
    call's split-KV and GQA-packing choices; None (the library chooses
    everything) when none of them is set."""
    config = _pinned_config("FLASHJIT_KERNEL_PATH")
    if splits == 0 and pack_gqa == _capi.PACK_GQA_AUTO:
        return config
    if config is None:
        config = _capi.Config()
    config.splits, config.pack_gqa = splits, pack_gqa
    return config


def _grad_buffer(torch, like):
    """An uninitialised gradient shaped like `like` (a kernel-ready input): its
    layout when that is dense (torch.empty_like keeps it), else packed."""
    g = torch.empty_like(like)
    if not _kernel_ready(g):
        g = torch.empty(like.shape, dtype=like.dtype, device=like.device)
    return g


def _backward(torch, call, dout, qp, kp, vp, out, lse):
    """dq, dk, dv of the padded problem (the caller slices), and d sinks
    (float32 [heads_q]) for a call with learned sinks, else None."""
    lib = _capi.lib()
    if not _capi.has_backward():
        raise RuntimeError("flashjit.attention: the loaded libflashjit.so has no flashjit_backward "
                           "(built before the backward pass); rebuild it")
    p = call.problem
    # Zeros in the extra columns of dO: D = rowsum(dO * O) and dP = dO V^T are
    # unchanged, and the extra columns of dV come out 0 (dropped anyway).
    dout = _prepare(torch, dout, call.pad_v)
    dq, dk, dv = _grad_buffer(torch, qp), _grad_buffer(torch, kp), _grad_buffer(torch, vp)
    nbytes = int(lib.flashjit_backward_workspace_bytes(ctypes.byref(p)))
    if nbytes == 0:
        raise RuntimeError(f"flashjit.attention backward: {_capi.last_error() or 'invalid sizes'}")
    workspace = torch.empty(nbytes, dtype=torch.uint8, device=qp.device)
    ws_ptr = workspace.data_ptr()
    if ws_ptr % 16:  # the caching allocator gives 512-byte alignment; be sure anyway
        workspace = torch.empty(nbytes + 16, dtype=torch.uint8, device=qp.device)
        ws_ptr = workspace.data_ptr() + (-workspace.data_ptr() % 16)
    if _POISON_OUTPUT:
        for t in (dq, dk, dv):
            t.fill_(float("nan"))
        workspace.fill_(0xFF)  # NaN as fp32: an accumulator that is not zeroed shows

    args = _capi.BackwardArgs(
        qp.data_ptr(), kp.data_ptr(), vp.data_ptr(), out.data_ptr(), dout.data_ptr(),
        lse.data_ptr(), dq.data_ptr(), dk.data_ptr(), dv.data_ptr(),
        *_kernel_strides(qp), *_kernel_strides(kp), *_kernel_strides(vp),
        *_kernel_strides(out), *_kernel_strides(dout),
        *_kernel_strides(dq), *_kernel_strides(dk), *_kernel_strides(dv),
        ws_ptr, nbytes)
    with torch.cuda.device(qp.device):
        stream = torch.cuda.current_stream(qp.device).cuda_stream
        config = _pinned_config("FLASHJIT_BACKWARD_PATH")
        config_ref = ctypes.byref(config) if config is not None else None
        dsinks = None
        if call.sinks is not None:
            dsinks = torch.empty_like(call.sinks)
            if _POISON_OUTPUT:
                dsinks.fill_(float("nan"))
            call.modifiers[0].dsinks = dsinks.data_ptr()
        if call.modifiers is not None:
            _check_rc(lib.flashjit_backward_modified(ctypes.byref(p), ctypes.byref(args),
                                                     ctypes.byref(call.modifiers[0]),
                                                     ctypes.c_void_p(stream), config_ref),
                      "flashjit.attention backward")
        else:
            _check_rc(lib.flashjit_backward(ctypes.byref(p), ctypes.byref(args),
                                            ctypes.c_void_p(stream), config_ref),
                      "flashjit.attention backward")
    # The workspace and dout are freed when this returns: the caching
    # allocator reuses their blocks only in stream order on this stream, after
    # the kernels above.
    return dq, dk, dv, dsinks


_function = None


def _autograd_function(torch):
    """The torch.autograd.Function, defined on first use (torch is imported lazily)."""
    global _function
    if _function is not None:
        return _function
    from torch.autograd.function import once_differentiable

    class FlashAttention(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, sinks, call):
            # sinks: the caller's learned sinks (for autograd; the kernels
            # read call.sinks, their float32 copy) or None.
            # The LSE is always computed: the backward recomputes P from it.
            mods = call.modifiers[0] if call.modifiers is not None else None
            out, lse, qp, kp, vp = _forward(torch, q, k, v, call, want_lse=True, modifiers=mods)
            # Saved: the (padded) inputs the kernel read, O and the LSE; never P.
            ctx.save_for_backward(qp, kp, vp, out, lse)
            ctx.call = call
            ctx.shapes = (q.shape, k.shape, v.shape)
            ctx.sinks_dtype = sinks.dtype if sinks is not None else None
            ctx.mark_non_differentiable(lse)
            if call.pad_v:
                out = out[..., :call.dim_v]
            return out, lse

        @staticmethod
        @once_differentiable
        def backward(ctx, dout, _dlse):
            # The LSE is an output for the caller's information only: a
            # gradient through it is not supported (as FlashAttention).
            call = ctx.call
            qp, kp, vp, out, lse = ctx.saved_tensors
            if call.empty:
                # No key for any row (or no row): O = 0 does not depend on q,
                # k, v, nor on the sinks (D = rowsum(dO * O) = 0).
                grads = [torch.zeros(s, dtype=dout.dtype, device=dout.device) for s in ctx.shapes]
                dsinks = torch.zeros_like(call.sinks) if call.sinks is not None else None
            else:
                *grads, dsinks = _backward(torch, call, dout, qp, kp, vp, out, lse)
                if call.pad_qk:
                    grads[0] = grads[0][..., :call.dim_qk]
                    grads[1] = grads[1][..., :call.dim_qk]
                if call.pad_v:
                    grads[2] = grads[2][..., :call.dim_v]
            if dsinks is not None and ctx.needs_input_grad[3]:
                dsinks = dsinks.to(ctx.sinks_dtype)
            else:
                dsinks = None
            return (*(g if need else None for g, need in zip(grads, ctx.needs_input_grad[:3])),
                    dsinks, None)

    _function = FlashAttention
    return _function


def attention(q, k, v, causal=False, window=(-1, -1), softcap=0.0, softmax_scale=None,
              return_lse=False, num_splits=0, pack_gqa=None, score_mod=None, mask_mod=None,
              aux=None, mask_mod_qk_only=False, score_mod_grad=None, sinks=None,
              block_mask=None):
    """Exact attention softmax(softmax_scale * q k^T + mask) v on CUDA tensors,
    differentiable with respect to q, k and v.

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
        [batch, heads_q, seqlen_q] (not differentiable).
    num_splits: the forward's split-KV count, as flash_attn_with_kvcache's:
        each work tile's key range is split over this many CTAs and the
        partial results are merged (flash-decoding: for few queries and
        long keys). 0 lets the library choose per call (the tuned or
        heuristic config), 1 turns splitting off; at most 256.
    pack_gqa: whether the query heads that share a KV head are packed into
        one tile's rows, so each K/V tile is read once per group: True,
        False, or None to let the library choose. Has an effect with GQA/MQA.
    num_splits and pack_gqa set the forward's kernel only; the backward
    ignores them. The result is the same attention either way (up to
    floating-point rounding).
    score_mod, mask_mod: CUDA source of the caller's own variant, compiled
        into the kernel once per text (a new length compiles nothing):
        `float score_mod(float score, int b, int h, int q, int k)` maps each
        scaled score (after softcap), `bool mask_mod(int b, int h, int q,
        int k)` hides keys on top of the mask; q and k are positions in the
        sequence, h the query head. aux: their extra inputs, a dict of CUDA
        tensors (device pointers by dtype), ints and floats, read as
        aux.<name> from one more parameter, `const Aux &aux`. The tiles
        mask_mod hides whole are skipped and the ones it shows whole run
        without calling it, from a block map built on the GPU per call;
        mask_mod_qk_only=True declares that mask_mod reads only q and k (no
        b, h, nor per-sequence data), so one map serves every batch and
        head (a mask that reads b or h is then wrong; the forward on sm90
        only, the backward calls mask_mod on every element).
    score_mod_grad: CUDA source of `float score_mod_grad(float score, int b,
        int h, int q, int k)`, d score_mod / d score at the same arguments:
        with it a score_mod call is differentiable with respect to q, k and
        v (a mask_mod alone always is). Eager only (not under
        torch.compile). The snippets run with the caller's privileges, like
        any kernel. score_mod and mask_mod also take the shipped modifiers
        of flashjit.mods (alibi(slopes), relative_bias(table, n),
        document(doc_ids), prefix_lm(n), sliding_window(w, sinks),
        causal(), softcap(cap)), their aux values bound, their score
        modifiers differentiable.
    sinks: learned attention sinks (GPT-OSS), a CUDA tensor [heads_q] of
        logits in natural-log units (not multiplied by softmax_scale): each
        joins its head's softmax denominator as a key without a value, so
        out = sum_j exp(s_j - lse) v_j with lse = log(exp(sink) +
        sum_j exp(s_j)). Differentiable (the gradient comes back in the
        sinks' dtype); composes with the masks and the modifiers. Eager only.
    block_mask: the mask_mod's block map built once by the caller, e.g. for
        every layer: a FlexAttention BlockMask (create_block_mask) as it is,
        at any block sizes; it must agree with mask_mod. The kernels skip the
        blocks it hides and call mask_mod only where it lists a partial
        block, with no per-call pre-pass over mask_mod.

    Returns out [batch, seqlen_q, heads_q, head_dim_v] (and lse). Runs on the
    current CUDA stream of the tensors' device.

    Gradients: when grad mode is on and q, k or v requires grad, out carries a
    grad_fn whose backward runs flashjit's backward kernels from the saved q,
    k, v, out and lse (P is never stored: memory stays O(seqlen)); dk and dv
    of a KV head sum the query heads that share it. Otherwise no autograd
    machinery is involved.
    """
    import torch

    if (score_mod is not None or mask_mod is not None or aux is not None or mask_mod_qk_only
            or score_mod_grad is not None or sinks is not None or block_mask is not None):
        return _modified_attention(torch, q, k, v, causal, window, softcap, softmax_scale,
                                   return_lse, num_splits, pack_gqa, score_mod, mask_mod, aux,
                                   mask_mod_qk_only, score_mod_grad, sinks, block_mask)
    if torch.compiler.is_compiling():
        # torch.compile traces the custom ops (flashjit/ops.py: fake
        # implementations, autograd through the backward op); eager calls
        # below go straight to the library.
        ops = _custom_ops()
        left, right = window
        out, lse = torch.ops.flashjit.attention_fwd(
            q, k, v, bool(causal), int(left), int(right), float(softcap),
            None if softmax_scale is None else float(softmax_scale), int(num_splits),
            ops.pack_code(pack_gqa))
        return (out, lse) if return_lse else out

    differentiable = False
    call_key = None
    try:
        differentiable = (q.requires_grad or k.requires_grad or v.requires_grad) and (
            torch.is_grad_enabled())
    except AttributeError:  # not tensors: _validate says which
        pass
    else:
        if not differentiable:
            # A call whose shapes, strides, dtypes and arguments ran before.
            call_key, served = _warm.serve(torch, q, k, v, causal, window, softcap,
                                           softmax_scale, num_splits, pack_gqa, return_lse)
            if served is not None:
                return served if return_lse else served[0]

    call = _validate(torch, q, k, v, causal, window, softcap, softmax_scale, num_splits, pack_gqa)
    if differentiable:
        out, lse = _autograd_function(torch).apply(q, k, v, None, call)
        return (out, lse) if return_lse else out

    out, lse, qp, kp, vp = _forward(torch, q, k, v, call, want_lse=return_lse)
    if (qp is q and kp is k and vp is v and not call.empty and not call.pad_v
            and not _POISON_OUTPUT):
        _warm.store(call_key, call, [_kernel_strides(t) for t in (q, k, v)],
                    _forward_config(call.splits, call.pack_gqa), q.get_device())
    if call.pad_v:
        out = out[..., :call.dim_v]
    return (out, lse) if return_lse else out


def _modified_attention(torch, q, k, v, causal, window, softcap, softmax_scale, return_lse,
                        num_splits, pack_gqa, score_mod, mask_mod, aux, mask_mod_qk_only,
                        score_mod_grad, sinks, block_mask=None):
    """attention() with a caller's modifiers (flashjit/modifiers.py) or
    learned sinks, eager; differentiable with respect to q, k, v and the
    sinks (a score_mod then needs its score_mod_grad)."""
    if torch.compiler.is_compiling():
        raise NotImplementedError("flashjit.attention: score_mod/mask_mod/sinks are not "
                                  "traceable by torch.compile yet; call it eagerly")
    differentiable = torch.is_grad_enabled() and any(
        getattr(t, "requires_grad", False) for t in (q, k, v, sinks))
    if (differentiable and isinstance(score_mod, str) and score_mod_grad is None):
        raise NotImplementedError("flashjit.attention: a score_mod without score_mod_grad runs "
                                  "the forward only: give score_mod_grad (d score_mod / d score) "
                                  "for gradients, or call under torch.no_grad()")
    call = _validate(torch, q, k, v, causal, window, softcap, softmax_scale, num_splits, pack_gqa)
    if sinks is not None:
        call.sinks = _validate_sinks(torch, sinks, q)
    score_mod, mask_mod, aux, mask_mod_qk_only, score_mod_grad = _shipped(
        score_mod, mask_mod, aux, mask_mod_qk_only, score_mod_grad, q, k)
    from . import modifiers as _modifiers
    mods, keep = _modifiers.build(torch, score_mod, mask_mod, aux, q.device, mask_mod_qk_only,
                                  score_mod_grad, call.sinks)
    if block_mask is not None:
        mask_struct, mask_tensors = _modifiers.block_mask(torch, block_mask, mask_mod, q, k)
        mods.block_mask = ctypes.pointer(mask_struct)
        keep = (keep, mask_struct, mask_tensors)
    if differentiable:
        # The aux tensors too: the backward reads them through their pointers.
        call.modifiers = (mods, (keep, aux))
        out, lse = _autograd_function(torch).apply(q, k, v, sinks, call)
        return (out, lse) if return_lse else out
    out, lse, _, _, _ = _forward(torch, q, k, v, call, want_lse=return_lse, modifiers=mods)
    del keep  # the aux values' array, alive until the call has read it
    if call.pad_v:
        out = out[..., :call.dim_v]
    return (out, lse) if return_lse else out


def _shipped(score_mod, mask_mod, aux, mask_mod_qk_only, score_mod_grad, q, k):
    """score_mod / mask_mod given as flashjit.mods objects, unpacked into
    their source, derivative, qk-only flag and aux values (merged with the
    caller's aux); source text passes through."""
    from .mods import Modifier
    merged = dict(aux or {})

    def take(modifier, slot, has):
        if not has:
            raise TypeError(f"flashjit.attention: {slot}={modifier!r} is not a "
                            f"{'score' if slot == 'score_mod' else 'mask'} modifier: pass it as "
                            f"{'mask_mod' if slot == 'score_mod' else 'score_mod'}=")
        modifier.check(q, k)
        for name, value in modifier.aux.items():
            if name in merged:
                raise ValueError(f"flashjit.attention: aux field {name!r} is given twice (by "
                                 f"{modifier!r} and another)")
            merged[name] = value

    if isinstance(score_mod, Modifier):
        take(score_mod, "score_mod", score_mod.score_mod is not None)
        if score_mod_grad is not None:
            raise ValueError(f"flashjit.attention: score_mod_grad given with {score_mod!r}, "
                             f"which carries its own")
        score_mod, score_mod_grad = score_mod.score_mod, score_mod.score_mod_grad
    if isinstance(mask_mod, Modifier):
        take(mask_mod, "mask_mod", mask_mod.mask_mod is not None)
        mask_mod_qk_only = mask_mod_qk_only or mask_mod.mask_mod_qk_only
        mask_mod = mask_mod.mask_mod
    return score_mod, mask_mod, merged or None, mask_mod_qk_only, score_mod_grad


def _validate_sinks(torch, sinks, q):
    """The learned sinks as the kernels read them: float32 [heads_q],
    contiguous, on q's device (a copy unless they are that already)."""
    if not isinstance(sinks, torch.Tensor):
        raise TypeError(f"flashjit.attention: sinks must be a torch.Tensor [heads_q], got "
                        f"{type(sinks).__name__}")
    heads_q = q.shape[2]
    if tuple(sinks.shape) != (heads_q,):
        raise ValueError(f"flashjit.attention: sinks has shape {tuple(sinks.shape)}: expected "
                         f"({heads_q},), one logit per query head")
    if not sinks.is_floating_point():
        raise TypeError(f"flashjit.attention: sinks is {sinks.dtype}: expected a floating-point "
                        f"tensor (float32, bf16 or fp16)")
    if sinks.device != q.device:
        raise ValueError(f"flashjit.attention: sinks is on {sinks.device} but q is on {q.device}")
    return sinks.detach().to(torch.float32).contiguous()


# Decode and chunked prefill over a KV cache (flash_attn_with_kvcache).
from .kvcache import attention_with_kvcache  # noqa: E402
from .varlen import attention_varlen  # noqa: E402
from .service import FlashjitCommandError, precompile, query, tune  # noqa: E402
from . import mods  # noqa: E402,F401  (flashjit.mods: the shipped modifiers)


def create_block_mask(mask_mod, batch, heads, seqlen_q, seqlen_k, aux=None,
                      mask_mod_qk_only=False, block_size=128, device=None):
    """The block mask of `mask_mod` (CUDA source text, as attention()'s, or a
    flashjit.mods mask modifier) for batch x heads sequences of seqlen_q
    queries and seqlen_k keys, built on the GPU in one pass: which blocks of
    block_size keys each block of block_size queries sees in part or whole
    (FlexAttention's BlockMask layout; block_size an int or (block_q,
    block_k)). aux: the mask_mod's values, as attention()'s. With
    mask_mod_qk_only one mask serves every batch and head. Pass it as
    attention(..., mask_mod=mask_mod, aux=aux, block_mask=mask) to every call
    with those values (every layer of a step): each call then skips its own
    pre-pass. Raises ValueError or TypeError naming the wrong argument."""
    import torch
    from . import modifiers as _modifiers
    return _modifiers.create_block_mask(torch, mask_mod, batch, heads, seqlen_q, seqlen_k, aux,
                                        mask_mod_qk_only, block_size, device)


_ops = None


def _custom_ops():
    """flashjit/ops.py, which registers torch.ops.flashjit.* on import (torch
    >= 2.4): what calls traced by torch.compile reach; eager calls never do.
    Registered when flashjit is imported after torch (below); else import
    flashjit.ops before compiling, so that the trace finds the ops."""
    global _ops
    if _ops is None:
        from . import ops
        _ops = ops
    return _ops


if "torch" in sys.modules:  # imported already: register the ops now, not mid-trace
    try:
        _custom_ops()
    except (AttributeError, ImportError):  # torch < 2.4: no custom_op; eager calls still work
        pass


