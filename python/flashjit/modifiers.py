"""A caller's score and mask modifiers for flashjit.attention: CUDA source
compiled into the kernels (the C API's flashjit_forward_modified and
flashjit_backward_modified), the learned sinks that travel in the same
struct, and block masks (a FlexAttention BlockMask, or one built by
flashjit.create_block_mask). The extra inputs come as a dict, name -> CUDA
tensor (a device pointer: float32 -> const float*, int32 -> const int*,
int64 -> const long long*, uint8 -> const unsigned char*) or Python int /
float (int / float); the snippets read them as aux.<name> from their last
parameter, `const Aux &aux`.

What is fast, and why: the tiles a mask_mod hides whole are skipped and
the ones it shows whole run without calling it, from a block map built on
the GPU before the kernel. A mask_mod that reads neither b nor h needs one
map for every batch and head instead of one per (batch, head); the library
finds that out itself by compiling the mask_mod once into a small probe
and seeing whether b's and h's loads survive optimisation
(mask_mod_qk_only=None, the default; True declares it, False refuses it).
That shared map is also kept across calls while the lengths, the aux
values and the snippets stay the same, unless aux holds a tensor, whose
contents may change under the same pointer: such a map is rebuilt per
call. A score_mod's derivative for the backward may be defined in the
score_mod's own source as score_mod_grad (found the same way, by a probe
compile), or given apart as score_mod_grad=, not both."""
import ctypes

from . import _capi
from .mods import Modifier

_POINTER_TYPES = None


def _pointer_types(torch):
    global _POINTER_TYPES
    if _POINTER_TYPES is None:
        _POINTER_TYPES = {torch.float32: "const float*", torch.int32: "const int*",
                          torch.int64: "const long long*", torch.uint8: "const unsigned char*"}
    return _POINTER_TYPES


_QK_ONLY_CODES = {None: _capi.MASK_MOD_QK_ONLY_AUTO, True: _capi.MASK_MOD_QK_ONLY_ON,
                  False: _capi.MASK_MOD_QK_ONLY_OFF}


def build(torch, score_mod, mask_mod, aux, device, mask_mod_qk_only=None, score_mod_grad=None,
          sinks=None):
    """The flashjit_modifiers struct (and what keeps its buffers alive) for
    score_mod / mask_mod source strings, the aux dict and the learned sinks
    (a contiguous float32 CUDA tensor [heads_q], or None; the caller keeps it
    alive and sets the struct's dsinks for a backward); mask_mod_qk_only
    None (the library decides), True or False. Raises TypeError or
    ValueError naming the argument that is wrong."""
    for name, text in (("score_mod", score_mod), ("mask_mod", mask_mod),
                       ("score_mod_grad", score_mod_grad)):
        if text is not None and not isinstance(text, str):
            raise TypeError(f"flashjit.attention: {name} must be CUDA source text (str), got "
                            f"{type(text).__name__}")
    if mask_mod_qk_only is not None and not isinstance(mask_mod_qk_only, bool):
        raise TypeError(f"flashjit.attention: mask_mod_qk_only must be None, True or False, got "
                        f"{type(mask_mod_qk_only).__name__}")
    if mask_mod_qk_only and not mask_mod:
        raise ValueError("flashjit.attention: mask_mod_qk_only=True without a mask_mod it could "
                         "describe")
    if score_mod_grad and not score_mod:
        raise ValueError("flashjit.attention: score_mod_grad without the score_mod it is the "
                         "derivative of")
    if aux and not score_mod and not mask_mod:
        raise ValueError("flashjit.attention: aux given without score_mod or mask_mod to read it")
    decls, values = [], []
    for name, value in (aux or {}).items():
        if isinstance(value, torch.Tensor):
            kind = _pointer_types(torch).get(value.dtype)
            if kind is None:
                raise TypeError(f"flashjit.attention: aux[{name!r}] is a {value.dtype} tensor: "
                                f"expected one of {sorted(str(t) for t in _pointer_types(torch))}")
            if value.device != device:
                raise ValueError(f"flashjit.attention: aux[{name!r}] is on {value.device}, the "
                                 f"inputs on {device}")
            decls.append(f"{kind} {name}")
            values.append(_capi.AuxValue(name=name.encode(), kind=_capi.AUX_POINTER,
                                         pointer=value.data_ptr()))
        elif isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"flashjit.attention: aux[{name!r}] is {type(value).__name__}: "
                            f"expected a CUDA tensor, an int or a float")
        elif isinstance(value, int):
            decls.append(f"int {name}")
            values.append(_capi.AuxValue(name=name.encode(), kind=_capi.AUX_INTEGER,
                                         integer=value))
        else:
            decls.append(f"float {name}")
            values.append(_capi.AuxValue(name=name.encode(), kind=_capi.AUX_REAL, real=value))
    array = (_capi.AuxValue * len(values))(*values) if values else None
    mods = _capi.Modifiers(
        score_mod=score_mod.encode() if score_mod else None,
        mask_mod=mask_mod.encode() if mask_mod else None,
        aux=", ".join(decls).encode() if decls else None,
        aux_values=ctypes.cast(array, ctypes.POINTER(_capi.AuxValue)) if array else None,
        aux_count=len(values), mask_mod_qk_only=_QK_ONLY_CODES[mask_mod_qk_only], reserved=0,
        score_mod_grad=score_mod_grad.encode() if score_mod_grad else None,
        sinks=sinks.data_ptr() if sinks is not None else None, dsinks=None)
    return mods, array


def inspect(mods, arch=None):
    """The library's findings on a flashjit_modifiers' sources
    (flashjit_inspect_modifiers: probe compiles, once per source and target
    in the process): a _capi.ModifierFacts. `arch` ("sm_90a") or None for
    the current device's, which only a mask_mod needs."""
    facts = _capi.ModifierFacts()
    if _capi.lib().flashjit_inspect_modifiers(ctypes.byref(mods),
                                              arch.encode() if arch else None,
                                              ctypes.byref(facts)) != 0:
        raise ValueError(f"flashjit.attention: {_capi.last_error()}")
    return facts


# Whether a score_mod source (with its aux declarations) defines its
# score_mod_grad: the library's probe, asked once per source here.
_DEFINES_GRAD = {}


def check_score_mod_grad(mods, score_mod_grad):
    """Raises where a backward of `mods` (a flashjit_modifiers with a
    score_mod) could not run: NotImplementedError for a score_mod with no
    derivative (neither score_mod_grad= nor one its source defines),
    ValueError for both."""
    key = (mods.score_mod, mods.aux)
    defines = _DEFINES_GRAD.get(key)
    if defines is None:
        # The score_mod alone: its probe needs no device (overload
        # resolution is the same on every target).
        sources = _capi.Modifiers(score_mod=mods.score_mod, aux=mods.aux)
        defines = bool(inspect(sources, "sm_80").score_mod_defines_grad)
        _DEFINES_GRAD[key] = defines
    if defines and score_mod_grad:
        raise ValueError("flashjit.attention: score_mod_grad= is given and the score_mod source "
                         "defines score_mod_grad too: give one of them")
    if not defines and not score_mod_grad:
        raise NotImplementedError(
            "flashjit.attention: a score_mod without score_mod_grad runs the forward only: "
            "define `float score_mod_grad(float score, int b, int h, int q, int k"
            f"{', const Aux &aux' if mods.aux else ''})` (d score_mod / d score) in the score_mod "
            "source, or give it as score_mod_grad=, for gradients, or call under "
            "torch.no_grad()")


def unpack_shipped(score_mod, mask_mod, aux, mask_mod_qk_only, score_mod_grad, q, k):
    """score_mod / mask_mod given as flashjit.mods objects, unpacked into
    their source, derivative, qk-only flag and aux values (merged with the
    caller's aux): (score_mod, mask_mod, aux, mask_mod_qk_only,
    score_mod_grad). Source text passes through."""
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
        if mask_mod_qk_only is None:  # the caller's True or False stands
            mask_mod_qk_only = mask_mod.mask_mod_qk_only
        mask_mod = mask_mod.mask_mod
    return score_mod, mask_mod, merged or None, mask_mod_qk_only, score_mod_grad


def checked_sinks(torch, sinks, q):
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


def block_mask(torch, mask, mask_mod, q, k):
    """The flashjit_block_mask struct (and the tensors it points at, to keep
    alive) for a FlexAttention BlockMask (torch.nn.attention.flex_attention:
    kv_num_blocks, kv_indices, full_kv_num_blocks, full_kv_indices,
    BLOCK_SIZE) or any object with those attributes, for q [batch, seqlen_q,
    heads_q, d] and k [batch, seqlen_k, ...]; raises TypeError or ValueError
    naming what is wrong. The library checks the rest (block counts against
    the lengths)."""
    if not mask_mod:
        raise ValueError("flashjit.attention: block_mask without a mask_mod: a block mask "
                         "says which tiles the mask_mod hides or shows whole; pass the mask_mod "
                         "it was built from")
    missing = [name for name in ("kv_num_blocks", "kv_indices", "BLOCK_SIZE")
               if not hasattr(mask, name)]
    if missing:
        raise TypeError(f"flashjit.attention: block_mask is a {type(mask).__name__} without "
                        f"{', '.join(missing)}: expected a FlexAttention BlockMask "
                        f"(torch.nn.attention.flex_attention.create_block_mask)")
    block_q, block_k = (mask.BLOCK_SIZE if isinstance(mask.BLOCK_SIZE, (tuple, list))
                        else (mask.BLOCK_SIZE, mask.BLOCK_SIZE))
    keep = []

    def tensor(name, ndim):
        t = getattr(mask, name, None)
        if t is None:
            return None, None
        if not isinstance(t, torch.Tensor) or t.dim() != ndim:
            raise ValueError(f"flashjit.attention: block_mask.{name} must be a {ndim}-d tensor, "
                             f"got {getattr(t, 'shape', type(t).__name__)}")
        if t.device != q.device:
            raise ValueError(f"flashjit.attention: block_mask.{name} is on {t.device}, the "
                             f"inputs on {q.device}")
        t = t.to(torch.int32).contiguous()
        keep.append(t)
        return t, t.data_ptr()

    num, num_ptr = tensor("kv_num_blocks", 3)
    indices, indices_ptr = tensor("kv_indices", 4)
    full_num, full_num_ptr = tensor("full_kv_num_blocks", 3)
    full_indices, full_indices_ptr = tensor("full_kv_indices", 4)
    if num is None or indices is None:
        raise ValueError("flashjit.attention: block_mask.kv_num_blocks and kv_indices are "
                         "required")
    batches, heads, q_blocks = num.shape
    k_blocks = indices.shape[3]
    for name, t, shape in (("kv_indices", indices, (batches, heads, q_blocks, k_blocks)),
                           ("full_kv_num_blocks", full_num, (batches, heads, q_blocks)),
                           ("full_kv_indices", full_indices,
                            (batches, heads, q_blocks, k_blocks))):
        if t is not None and tuple(t.shape) != shape:
            raise ValueError(f"flashjit.attention: block_mask.{name} has shape "
                             f"{tuple(t.shape)}: expected {shape} from kv_num_blocks "
                             f"{tuple(num.shape)} and kv_indices")
    struct = _capi.BlockMask(block_q=int(block_q), block_k=int(block_k), batches=batches,
                             heads=heads, q_blocks=q_blocks, k_blocks=k_blocks,
                             kv_num_blocks=num_ptr, kv_indices=indices_ptr,
                             full_kv_num_blocks=full_num_ptr, full_kv_indices=full_indices_ptr)
    return struct, keep


class BlockMask:
    """A block mask built by flashjit.create_block_mask, in FlexAttention's
    layout (kv_num_blocks, kv_indices, full_kv_num_blocks, full_kv_indices:
    int32 CUDA tensors [batches, heads, q_blocks(, k_blocks)]; BLOCK_SIZE),
    for attention(block_mask=) with the same mask_mod and aux values."""
    __slots__ = ("kv_num_blocks", "kv_indices", "full_kv_num_blocks", "full_kv_indices",
                 "BLOCK_SIZE", "seq_lengths")

    def __init__(self, kv_num_blocks, kv_indices, full_kv_num_blocks, full_kv_indices,
                 block_size, seq_lengths):
        self.kv_num_blocks, self.kv_indices = kv_num_blocks, kv_indices
        self.full_kv_num_blocks, self.full_kv_indices = full_kv_num_blocks, full_kv_indices
        self.BLOCK_SIZE, self.seq_lengths = block_size, seq_lengths

    def __repr__(self):
        b, h, qb, kb = self.kv_indices.shape
        return (f"flashjit.BlockMask(batches={b}, heads={h}, q_blocks={qb}, k_blocks={kb}, "
                f"BLOCK_SIZE={self.BLOCK_SIZE}, seq_lengths={self.seq_lengths})")


def create_block_mask(mask_mod, batch, heads, seqlen_q, seqlen_k, aux=None,
                      mask_mod_qk_only=None, block_size=128, device=None):
    """The block mask of `mask_mod` (CUDA source text, as attention()'s, or a
    flashjit.mods mask modifier) for batch x heads sequences of seqlen_q
    queries and seqlen_k keys, built on the GPU in one pass: which blocks of
    block_size keys each block of block_size queries sees in part or whole
    (FlexAttention's BlockMask layout; block_size an int or (block_q,
    block_k)). aux: the mask_mod's values, as attention()'s. One mask serves
    every batch and head (batches and heads of 1) where the mask_mod reads
    neither b nor h: mask_mod_qk_only=None lets the library find that out
    (a probe compile), True declares it, False asks for one per (batch,
    head). Pass it as
    attention(..., mask_mod=mask_mod, aux=aux, block_mask=mask) to every call
    with those values (every layer of a step): each call then skips its own
    pre-pass. Raises ValueError or TypeError naming the wrong argument."""
    import torch
    if isinstance(mask_mod, Modifier):
        if mask_mod.mask_mod is None:
            raise TypeError(f"flashjit.create_block_mask: {mask_mod!r} is not a mask modifier")
        merged = dict(aux or {})
        for name, value in mask_mod.aux.items():
            if name in merged:
                raise ValueError(f"flashjit.create_block_mask: aux field {name!r} is given twice")
            merged[name] = value
        aux = merged or None
        if mask_mod_qk_only is None:
            mask_mod_qk_only = mask_mod.mask_mod_qk_only
        mask_mod = mask_mod.mask_mod
    if not isinstance(mask_mod, str) or not mask_mod.strip():
        raise TypeError("flashjit.create_block_mask: mask_mod must be CUDA source text (str) or "
                        "a flashjit.mods mask modifier")
    for name, value in (("batch", batch), ("heads", heads), ("seqlen_q", seqlen_q),
                        ("seqlen_k", seqlen_k)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"flashjit.create_block_mask: {name} must be a positive int, got "
                             f"{value!r}")
    block_q, block_k = (tuple(block_size) if isinstance(block_size, (tuple, list))
                        else (block_size, block_size))
    for value in (block_q, block_k):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"flashjit.create_block_mask: block_size must be a positive int or "
                             f"two, got {block_size!r}")
    device = torch.device(device) if device is not None else torch.device("cuda")
    if device.type != "cuda":
        raise ValueError(f"flashjit.create_block_mask: device must be a CUDA device, got {device}")
    if device.index is None:  # "cuda": the current one, as tensors name it
        device = torch.device("cuda", torch.cuda.current_device())
    mods, keep = build(torch, None, mask_mod, aux, device, mask_mod_qk_only)
    if mask_mod_qk_only is None:
        # The library's finding for the device, then given explicitly so
        # that the mask's shape and its build agree.
        with torch.cuda.device(device):
            mask_mod_qk_only = bool(inspect(mods).mask_mod_qk_only)
        mods.mask_mod_qk_only = _QK_ONLY_CODES[mask_mod_qk_only]
    batches, mask_heads = (1, 1) if mask_mod_qk_only else (batch, heads)
    q_blocks, k_blocks = -(-seqlen_q // block_q), -(-seqlen_k // block_k)
    counts = torch.empty(2, batches, mask_heads, q_blocks, dtype=torch.int32, device=device)
    indices = torch.empty(2, batches, mask_heads, q_blocks, k_blocks, dtype=torch.int32,
                          device=device)
    out = _capi.BlockMask(block_q=int(block_q), block_k=int(block_k), batches=batches,
                          heads=mask_heads, q_blocks=q_blocks, k_blocks=k_blocks,
                          kv_num_blocks=counts[0].data_ptr(), kv_indices=indices[0].data_ptr(),
                          full_kv_num_blocks=counts[1].data_ptr(),
                          full_kv_indices=indices[1].data_ptr())
    problem = _capi.Problem(dtype=0, mask=0, batch=batch, heads_q=heads, heads_kv=heads,
                            seqlen_q=seqlen_q, seqlen_k=seqlen_k, head_dim_qk=64, head_dim_v=64,
                            window_left=-1, window_right=-1, softmax_scale=0.0, softcap=0.0,
                            page_size=0, seqused_k=0, varlen=0, reserved=0)
    with torch.cuda.device(device):
        stream = torch.cuda.current_stream(device).cuda_stream
        rc = _capi.lib().flashjit_create_block_mask(ctypes.byref(problem), ctypes.byref(mods),
                                                     ctypes.byref(out), stream)
    del keep
    if rc != 0:
        raise ValueError(f"flashjit.create_block_mask: {_capi.last_error()}")
    return BlockMask(counts[0], indices[0], counts[1], indices[1], (int(block_q), int(block_k)),
                     (seqlen_q, seqlen_k))

