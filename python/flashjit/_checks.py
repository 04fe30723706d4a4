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
    if is_fp8(torch, dtype):
        return _capi.E4M3
    return None


def is_fp8(torch, dtype):
    """Whether `dtype` is e4m3 (torch.float8_e4m3fn; absent before torch 2.1)."""
    return dtype == getattr(torch, "float8_e4m3fn", None)


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
    tensors, all bf16, all fp16 or all e4m3 (torch.float8_e4m3fn), all on
    q's device; returns q's dtype code. layout names the dims (for a wrong
    rank); together, the tensors that must agree, ends a dtype or device
    mismatch's message."""
    check_tensor(torch, fail, "q", q, q_dims, layout=layout)
    for name, t in others:
        check_tensor(torch, fail, name, t, q_dims, layout=layout)
    dtype = dtype_code(torch, q.dtype)
    if dtype is None:
        raise fail(TypeError, f"q must be bf16, fp16 or float8_e4m3fn, got {q.dtype}")
    for name, t in others:
        if t.dtype != q.dtype:
            raise fail(TypeError, mixed_dtype_message(torch, name, t.dtype, q.dtype)
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


def deterministic_flag(fail, deterministic):
    """deterministic, checked: True or False (FlashAttention's `deterministic`:
    the backward's mode, with dQ summed in a fixed order instead of by
    atomics)."""
    # A bool only, as pack_gqa: 1 or "yes" is a mistake, not a choice.
    if not isinstance(deterministic, bool):
        raise fail(TypeError, f"deterministic must be True or False (True: the backward sums dQ "
                              f"without atomics, for bit-identical gradients), got "
                              f"{deterministic!r}")
    return deterministic


def chunk_length(fail, attention_chunk):
    """attention_chunk, checked: 0 (off) or a chunk length > 0 (FlashAttention-3's
    attention_chunk: each query sees only the keys of its own chunk)."""
    if isinstance(attention_chunk, bool) or not isinstance(attention_chunk, int):
        raise fail(TypeError, f"attention_chunk must be an int (0: off), got "
                              f"{type(attention_chunk).__name__}")
    if not 0 <= attention_chunk <= 0x7FFFFFFF:
        raise fail(ValueError, f"attention_chunk must be 0 (off) or a chunk length > 0, got "
                               f"{attention_chunk}")
    return attention_chunk


def attention_options(fail, dim_qk, causal, window, softcap, softmax_scale, num_splits=0,
                      pack_gqa=None, attention_chunk=0):
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
                  softmax_scale=scale, softcap=softcap,
                  attention_chunk=chunk_length(fail, attention_chunk))
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


# ---- fp8 (e4m3) calls: descales, the output dtype, no gradients ----------------

FP8_HINT = "flashjit.quantize_fp8 returns e4m3 tensors with their descales"


def mixed_dtype_message(torch, name, dtype, q_dtype):
    """Why `name` of `dtype` cannot go with q of `q_dtype`."""
    if is_fp8(torch, q_dtype):
        return (f"{name} is {dtype} but q is {q_dtype}: fp8 attention takes q, k and v all in "
                f"e4m3 ({FP8_HINT})")
    if is_fp8(torch, dtype):
        return (f"{name} is {dtype} but q is {q_dtype}: e4m3 keys and values under 16-bit "
                f"queries are a KV cache (attention_with_kvcache's k_cache/v_cache with "
                f"k_scale/v_scale, or attention_varlen's with block_table or seqused_k); for "
                f"fp8 attention make q e4m3 too")
    return f"{name} is {dtype} but q is {q_dtype}"


def output_dtype(torch, fail, q_dtype, out_dtype):
    """(the output's torch dtype, flashjit_out_dtype) of q's dtype and the
    caller's out_dtype: bf16 (default) or fp16 for e4m3 q; q's own for 16-bit
    q, which out_dtype may only repeat."""
    if out_dtype is not None and out_dtype not in (torch.bfloat16, torch.float16):
        raise fail(TypeError, f"out_dtype must be torch.bfloat16 or torch.float16 (or None), "
                              f"got {out_dtype!r}")
    if is_fp8(torch, q_dtype):
        if out_dtype is None:
            return torch.bfloat16, _capi.OUT_AUTO
        return out_dtype, _capi.OUT_BF16 if out_dtype == torch.bfloat16 else _capi.OUT_FP16
    if out_dtype is not None and out_dtype != q_dtype:
        raise fail(ValueError, f"out_dtype is {out_dtype} but q is {q_dtype}: a 16-bit call's "
                               f"output has q's dtype (out_dtype picks the output of e4m3 "
                               f"inputs); leave it None")
    return q_dtype, _capi.OUT_AUTO


class Elements:
    """A call's element types as flashjit_problem and flashjit_forward_args
    take them: kv_dtype and out_dtype (codes), the output's torch dtype, and
    the descales (fp32 tensors, or None for a 16-bit tensor) of Q, K and V
    with their shared (batch, head) element strides."""
    __slots__ = ("kv_dtype", "out_dtype", "out_torch_dtype", "descales", "strides")

    def __init__(self, kv_dtype, out_dtype, out_torch_dtype, descales=(None, None, None),
                 strides=(0, 0)):
        self.kv_dtype, self.out_dtype, self.out_torch_dtype = kv_dtype, out_dtype, out_torch_dtype
        self.descales, self.strides = tuple(descales), strides

    def fields(self):
        """The flashjit_problem fields they set."""
        return dict(kv_dtype=self.kv_dtype, out_dtype=self.out_dtype)

    @property
    def fp8(self):
        return any(d is not None for d in self.descales)


def _descale_strides(t, batch, heads_kv):
    """(batch, head) element strides of a checked descale; a size-1 dim's is
    0 (never stepped), so that layouts which read alike compare equal."""
    if t.numel() == 1:
        return (0, 0)
    if t.dim() == 1:  # [heads_kv]
        return (0, t.stride(0) if heads_kv > 1 else 0)
    return (t.stride(0) if batch > 1 else 0, t.stride(1) if heads_kv > 1 else 0)


def _descale_shapes(batch, heads_kv, per_head):
    return f"[batch, heads_kv] = [{batch}, {heads_kv}]" + (
        f", [heads_kv] = [{heads_kv}]" if per_head else "") + " or one element"


def _check_descale(torch, fail, name, t, of, batch, heads_kv, device, per_head):
    """One descale: fp32 on q's device, one element or [batch, heads_kv]
    (or [heads_kv] where per_head allows it)."""
    shapes = _descale_shapes(batch, heads_kv, per_head)
    if not isinstance(t, torch.Tensor):
        raise fail(TypeError, f"{name} must be a float32 tensor of shape {shapes}, got "
                              f"{describe(torch, t)}")
    if t.dtype != torch.float32:
        raise fail(TypeError, f"{name} must be float32 (the factors {of}'s e4m3 codes are "
                              f"multiplied by), got {t.dtype}")
    if t.device != device:
        raise fail(ValueError, f"{name} is on {t.device} but q is on {device}")
    fits = (t.numel() == 1 or tuple(t.shape) == (batch, heads_kv)
            or (per_head and tuple(t.shape) == (heads_kv,)))
    if not fits:
        raise fail(ValueError, f"{name} has shape {tuple(t.shape)}, expected {shapes} (one "
                               f"factor per (batch, KV head) of {of}, or per tensor)")


def fp8_elements(torch, fail, q, kv_tensor_dtype, descales, out_dtype, batch, heads_kv,
                 per_head=False, tensor_names=("q", "k", "v")):
    """A call's Elements, checked. kv_tensor_dtype: K's and V's dtype (checked
    equal by the caller); descales: ((argument name, tensor or None) of Q, K,
    V); per_head: K's and V's factors may also be [heads_kv] (a KV cache's
    scales); tensor_names: Q's, K's and V's argument names. The descales must be given exactly for the e4m3 tensors; where
    their strides differ they are expanded into one [batch, heads_kv] layout
    (the C call takes one pair of strides for the three)."""
    q_fp8 = is_fp8(torch, q.dtype)
    kv_fp8 = is_fp8(torch, kv_tensor_dtype)
    if q_fp8 and not kv_fp8:
        raise fail(TypeError, mixed_dtype_message(torch, tensor_names[1], kv_tensor_dtype,
                                                  q.dtype))
    out_torch_dtype, out_code = output_dtype(torch, fail, q.dtype, out_dtype)
    tensors = zip(tensor_names, (q_fp8, kv_fp8, kv_fp8), (q.dtype, kv_tensor_dtype,
                                                           kv_tensor_dtype), (False, True, True))
    given = []
    for (name, t), (of, fp8, dtype, of_kv) in zip(descales, tensors):
        shapes = _descale_shapes(batch, heads_kv, per_head and of_kv)
        if fp8 and t is None:
            raise fail(TypeError, f"{name} is missing: {of} is float8_e4m3fn, whose codes need "
                                  f"their fp32 dequantization factors ({shapes}; {FP8_HINT})")
        if not fp8 and t is not None:
            raise fail(TypeError, f"{name} is given but {of} is {dtype}: descales belong to "
                                  f"float8_e4m3fn tensors; pass None")
        if t is not None:
            _check_descale(torch, fail, name, t, of, batch, heads_kv, q.device,
                           per_head and of_kv)
        given.append(t)
    kv_code = _capi.KV_E4M3 if kv_fp8 and not q_fp8 else _capi.KV_SAME
    present = [t for t in given if t is not None]
    if not present:
        return Elements(kv_code, out_code, out_torch_dtype)
    layouts = {_descale_strides(t, batch, heads_kv) for t in present}
    if len(layouts) > 1:
        given = [None if t is None else _as_grid(t, batch, heads_kv) for t in given]
        layouts = {_descale_strides(t, batch, heads_kv) for t in given if t is not None}
    return Elements(kv_code, out_code, out_torch_dtype, given, layouts.pop())


def _as_grid(t, batch, heads_kv):
    """A checked descale as a packed [batch, heads_kv] tensor (a copy)."""
    if t.numel() == 1:
        t = t.reshape(1, 1)
    elif t.dim() == 1:
        t = t.reshape(1, heads_kv)
    return t.expand(batch, heads_kv).contiguous()


def refuse_fp8_grad(torch, fail, fp8, tensors):
    """An fp8 call (fp8: whether it is one) has no backward (FlashAttention-3
    has none either): with grad mode on, a tensor of it ((name, tensor)
    pairs, the descales included) that requires grad is refused rather than
    given a result autograd cannot differentiate."""
    if not fp8 or not torch.is_grad_enabled():
        return
    names = [name for name, t in tensors if getattr(t, "requires_grad", False)]
    if names:
        raise fail(NotImplementedError,
                   f"{', '.join(names)} require{'s' if len(names) == 1 else ''} grad, but fp8 "
                   f"(float8_e4m3fn) attention is forward only: call it under torch.no_grad() "
                   f"or torch.inference_mode(), or pass detached tensors")
