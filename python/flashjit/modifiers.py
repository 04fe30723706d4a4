"""A caller's score and mask modifiers for flashjit.attention (issue #15):
CUDA source compiled into the forward kernel (the C API's
flashjit_forward_modified). The extra inputs come as a dict, name -> CUDA
tensor (a device pointer: float32 -> const float*, int32 -> const int*,
int64 -> const long long*, uint8 -> const unsigned char*) or Python int /
float (int / float); the snippets read them as aux.<name> from their last
parameter, `const Aux &aux`."""
import ctypes

from . import _capi

_POINTER_TYPES = None


def _pointer_types(torch):
    global _POINTER_TYPES
    if _POINTER_TYPES is None:
        _POINTER_TYPES = {torch.float32: "const float*", torch.int32: "const int*",
                          torch.int64: "const long long*", torch.uint8: "const unsigned char*"}
    return _POINTER_TYPES


def build(torch, score_mod, mask_mod, aux, device, mask_mod_qk_only=False, score_mod_grad=None,
          sinks=None):
    """The flashjit_modifiers struct (and what keeps its buffers alive) for
    score_mod / mask_mod source strings, the aux dict and the learned sinks
    (a contiguous float32 CUDA tensor [heads_q], or None; the caller keeps it
    alive and sets the struct's dsinks for a backward); raises TypeError or
    ValueError naming the argument that is wrong."""
    for name, text in (("score_mod", score_mod), ("mask_mod", mask_mod),
                       ("score_mod_grad", score_mod_grad)):
        if text is not None and not isinstance(text, str):
            raise TypeError(f"flashjit.attention: {name} must be CUDA source text (str), got "
                            f"{type(text).__name__}")
    if not isinstance(mask_mod_qk_only, bool):
        raise TypeError(f"flashjit.attention: mask_mod_qk_only must be a bool, got "
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
        aux_count=len(values), mask_mod_qk_only=int(mask_mod_qk_only), reserved=0,
        score_mod_grad=score_mod_grad.encode() if score_mod_grad else None,
        sinks=sinks.data_ptr() if sinks is not None else None, dsinks=None)
    return mods, array
