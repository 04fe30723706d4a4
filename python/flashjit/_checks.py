"""Argument checks shared by the entry points (dense.py, varlen.py,
kvcache.py). Each raises the entry point's own exception through
`fail(kind, message)` (see `failure`), so every message starts with the
function the caller called."""
import math

from . import _capi

MAX_SPLITS = 256  # flashjit.h: flashjit_config.splits


def failure(entry):
    """The `fail(kind, message)` of the entry point named `entry`: an
    exception of `kind` whose message names it."""
    def fail(kind, message):
        return kind(f"{entry}: {message}")
    return fail


def dtype_code(torch, dtype):
    """The flashjit_dtype of a torch dtype, or None for one flashjit lacks."""
    if dtype == torch.bfloat16:
        return _capi.BF16
    if dtype == torch.float16:
        return _capi.FP16
    return None


def check_tensor(torch, fail, name, t, dims, device=None, layout=""):
    """`t` is a `dims`-D CUDA tensor (on `device`, q's, when given); layout
    names the dims in the message about a wrong rank."""
    if not isinstance(t, torch.Tensor):
        raise fail(TypeError, f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != dims:
        raise fail(ValueError, f"{name} must be {dims}-D{' ' + layout if layout else ''}, got "
                               f"shape {tuple(t.shape)}")
    if not t.is_cuda:
        raise fail(ValueError, f"{name} must be a CUDA tensor, got device {t.device}")
    if device is not None and t.device != device:
        raise fail(ValueError, f"{name} is on {t.device} but q is on {device}")


def check_inputs(torch, fail, q, q_dims, others, layout="", together=""):
    """q and `others` ((name, tensor) pairs, the same rank as q) are CUDA
    tensors, all bf16 or all fp16, all on q's device; returns q's dtype
    code. layout names the dims (for a wrong rank); together, the tensors
    that must agree, ends a dtype or device mismatch's message."""
    check_tensor(torch, fail, "q", q, q_dims, layout=layout)
    for name, t in others:
        check_tensor(torch, fail, name, t, q_dims, layout=layout)
    dtype = dtype_code(torch, q.dtype)
    if dtype is None:
        raise fail(TypeError, f"q must be bf16 or fp16, got {q.dtype}")
    for name, t in others:
        if t.dtype != q.dtype:
            raise fail(TypeError, f"{name} is {t.dtype} but q is {q.dtype}"
                                  + (f"; {together} must have the same dtype" if together else ""))
        if t.device != q.device:
            raise fail(ValueError, f"{name} is on {t.device} but q is on {q.device}"
                                   + (f"; {together} must be on the same device" if together
                                      else ""))
    return dtype


def mask_fields(fail, causal, window):
    """(mask, window_left, window_right) of flashjit_problem for causal and
    window=(left, right), -1 meaning unbounded."""
    try:
        left, right = (int(w) for w in window)
    except (TypeError, ValueError):
        raise fail(ValueError, f"window must be a pair (left, right) of ints, -1 meaning "
                               f"unbounded; got {window!r}") from None
    if left < -1 or right < -1:
        raise fail(ValueError, f"window bounds must be >= -1 (-1: unbounded); got "
                               f"({left}, {right})")
    if causal:
        right = 0  # flash_attn: causal with a window is window (left, 0)
    if left < 0 and right < 0:
        return _capi.MASK_NONE, -1, -1
    if left < 0 and right == 0:
        return _capi.MASK_CAUSAL, -1, 0
    return _capi.MASK_WINDOW, left, right


def forward_knobs(fail, num_splits, pack_gqa):
    """num_splits and pack_gqa, checked, as the values of flashjit_config's
    splits and pack_gqa fields."""
    # bool is an int to Python; num_splits=True is a mistake, not 1.
    if isinstance(num_splits, bool) or not isinstance(num_splits, int):
        raise fail(TypeError, f"num_splits must be an int (0: the library chooses, 1: off), got "
                              f"{type(num_splits).__name__}")
    if not 0 <= num_splits <= MAX_SPLITS:
        raise fail(ValueError, f"num_splits must be in [0, {MAX_SPLITS}] (0: the library "
                               f"chooses, 1: off), got {num_splits}")
    if pack_gqa is None:
        return num_splits, _capi.PACK_GQA_AUTO
    if not isinstance(pack_gqa, bool):
        raise fail(TypeError, f"pack_gqa must be None (the library chooses), True or False, got "
                              f"{pack_gqa!r}")
    return num_splits, _capi.PACK_GQA_ON if pack_gqa else _capi.PACK_GQA_OFF


def attention_options(fail, dim_qk, causal, window, softcap, softmax_scale, num_splits=0,
                      pack_gqa=None):
    """The options every entry point shares, checked in this order: the mask
    (causal, window), softcap, the forward's knobs and the scale (default
    1/sqrt(dim_qk), of the head dim before any padding: padding must not
    change the result). Returns (the flashjit_problem fields they set, as a
    dict, the config's splits, its pack_gqa)."""
    mask, window_left, window_right = mask_fields(fail, causal, window)
    softcap = float(softcap)
    if softcap < 0:
        raise fail(ValueError, f"softcap must be >= 0 (0: off), got {softcap}")
    splits, pack = forward_knobs(fail, num_splits, pack_gqa)
    scale = 1.0 / math.sqrt(dim_qk) if softmax_scale is None else float(softmax_scale)
    fields = dict(mask=mask, window_left=window_left, window_right=window_right,
                  softmax_scale=scale, softcap=softcap)
    return fields, splits, pack


def describe(torch, t):
    """What `t` is, for a message: dtype and shape of a tensor, else its type."""
    if isinstance(t, torch.Tensor):
        return f"a {t.dtype} tensor of shape {tuple(t.shape)}"
    return type(t).__name__


def int32_vector(torch, fail, name, t, length, device, batch_from):
    """`t` as a contiguous 1-D int32 tensor of `length` (the batch, which
    `batch_from` names) entries on q's device."""
    if not isinstance(t, torch.Tensor) or t.dtype != torch.int32 or t.dim() != 1:
        raise fail(TypeError, f"{name} must be an int32 tensor of shape [batch] ([{length}]), "
                              f"got {describe(torch, t)}")
    if t.shape[0] != length:
        raise fail(ValueError, f"{name} has {t.shape[0]} entries, expected batch = {batch_from} "
                               f"= {length}")
    if t.device != device:
        raise fail(ValueError, f"{name} is on {t.device} but q is on {device}")
    return t.contiguous()


def block_table(torch, fail, t, batch, device, batch_from):
    """block_table checked: (the int32 [batch, pages_per_seq] table with a
    contiguous last dim, its row stride in elements)."""
    if not isinstance(t, torch.Tensor) or t.dtype != torch.int32 or t.dim() != 2:
        raise fail(TypeError, f"block_table must be an int32 tensor of shape [batch, "
                              f"pages_per_seq], got {describe(torch, t)}")
    if t.shape[0] != batch:
        raise fail(ValueError, f"block_table has {t.shape[0]} rows, expected batch = "
                               f"{batch_from} = {batch}")
    if t.device != device:
        raise fail(ValueError, f"block_table is on {t.device} but q is on {device}")
    width = t.shape[1]
    # Rows must not overlap (a broadcast table has row stride 0): the kernel
    # reads row b at b * stride.
    if t.stride(1) != 1 or (batch > 1 and t.stride(0) < width):
        t = t.contiguous()
    return t, (t.stride(0) if batch > 1 else max(width, 1))
