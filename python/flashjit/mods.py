"""The shipped modifiers (include/flashjit/mods.h) for flashjit.attention:
objects that carry the library's own snippets (flashjit_shipped_modifiers,
so Python and C++ compile the same text) with their aux values bound.
Pass a score modifier as score_mod= and a mask as mask_mod=:

    flashjit.attention(q, k, v, score_mod=mods.alibi(slopes))
    flashjit.attention(q, k, v, mask_mod=mods.document(doc_ids), causal=True)

Every score modifier here carries its derivative, so the calls are
differentiable with respect to q, k and v."""
import ctypes

from . import _capi


class Modifier:
    """A shipped modifier with its aux values: score_mod / score_mod_grad /
    mask_mod source (str or None), aux (dict name -> value) and
    mask_mod_qk_only (True for the masks of q and k alone, which then need
    no probe compile; None: the library finds out). `check(q, k)` raises
    where the bound values do not fit a call's tensors."""
    __slots__ = ("name", "score_mod", "score_mod_grad", "mask_mod", "aux", "mask_mod_qk_only",
                 "_check")

    def __init__(self, name, aux, check=None):
        mods = _capi.Modifiers()
        if _capi.lib().flashjit_shipped_modifiers(name.encode(), ctypes.byref(mods)) != 0:
            raise RuntimeError(_capi.last_error())
        text = lambda b: b.decode() if b else None  # noqa: E731
        self.name = name
        self.score_mod, self.score_mod_grad = text(mods.score_mod), text(mods.score_mod_grad)
        self.mask_mod = text(mods.mask_mod)
        self.mask_mod_qk_only = {_capi.MASK_MOD_QK_ONLY_ON: True,
                                 _capi.MASK_MOD_QK_ONLY_OFF: False}.get(mods.mask_mod_qk_only)
        declared = [d.split()[-1] for d in text(mods.aux).split(", ")] if mods.aux else []
        if sorted(declared) != sorted(aux):
            raise AssertionError(f"mods.{name}: the library declares {declared}, the binding "
                                 f"gives {sorted(aux)}")
        self.aux = aux
        self._check = check

    def check(self, q, k):
        if self._check is not None:
            self._check(q, k)

    def __repr__(self):
        return f"flashjit.mods.{self.name}({', '.join(sorted(self.aux))})"


def _tensor(torch_tensor, name, dtype_name, shape_text):
    import torch
    want = getattr(torch, dtype_name)
    if not isinstance(torch_tensor, torch.Tensor):
        raise TypeError(f"flashjit.mods: {name} must be a CUDA torch.Tensor {shape_text}, got "
                        f"{type(torch_tensor).__name__}")
    if torch_tensor.dtype != want or not torch_tensor.is_cuda:
        raise TypeError(f"flashjit.mods: {name} must be a CUDA {dtype_name} tensor "
                        f"{shape_text}, got {torch_tensor.dtype} on {torch_tensor.device}")
    return torch_tensor.contiguous()


def _int(value, name, low):
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"flashjit.mods: {name} must be an int >= {low}, got {value!r}")
    return value


def alibi(slopes):
    """ALiBi: score + slopes[h] * (k - q); slopes float32 [heads_q]."""
    slopes = _tensor(slopes, "slopes", "float32", "[heads_q]")

    def check(q, k):
        if tuple(slopes.shape) != (q.shape[2],):
            raise ValueError(f"flashjit.mods.alibi: slopes has shape {tuple(slopes.shape)}, "
                             f"expected ({q.shape[2]},): one per query head")
    return Modifier("alibi", {"slopes": slopes}, check)


def relative_bias(table, max_distance):
    """score + table[h][clamp(k - q, -max_distance, max_distance) +
    max_distance]; table float32 [heads_q, 2 * max_distance + 1]."""
    max_distance = _int(max_distance, "max_distance", 0)
    table = _tensor(table, "table", "float32", "[heads_q, 2 * max_distance + 1]")

    def check(q, k):
        if tuple(table.shape) != (q.shape[2], 2 * max_distance + 1):
            raise ValueError(f"flashjit.mods.relative_bias: table has shape "
                             f"{tuple(table.shape)}, expected "
                             f"({q.shape[2]}, {2 * max_distance + 1})")
    return Modifier("relative_bias", {"table": table, "max_distance": max_distance}, check)


def document(doc_ids):
    """Document masking of packed sequences: q sees k of its own document;
    doc_ids int32 [batch, seqlen] (queries and keys alike: seqlen_q ==
    seqlen_k), or [seqlen] for a batch of one."""
    doc_ids = _tensor(doc_ids, "doc_ids", "int32", "[batch, seqlen]")
    if doc_ids.dim() == 1:
        doc_ids = doc_ids.unsqueeze(0)
    if doc_ids.dim() != 2:
        raise ValueError(f"flashjit.mods.document: doc_ids has shape {tuple(doc_ids.shape)}, "
                         f"expected [batch, seqlen]")
    seqlen = doc_ids.shape[1]

    def check(q, k):
        want = (q.shape[0], q.shape[1])
        if q.shape[1] != k.shape[1] or tuple(doc_ids.shape) != want:
            raise ValueError(f"flashjit.mods.document: doc_ids has shape "
                             f"{tuple(doc_ids.shape)}: expected {want}, one id per token, with "
                             f"as many keys as queries (got {q.shape[1]} and {k.shape[1]})")
    return Modifier("document_mask", {"doc_ids": doc_ids, "seqlen": seqlen}, check)


def prefix_lm(prefix):
    """Prefix-LM: the first `prefix` keys are visible to every query, the
    rest causally (k <= q)."""
    return Modifier("prefix_lm", {"prefix": _int(prefix, "prefix", 0)})


def sliding_window(window, sinks=0):
    """A causal sliding window of `window` keys plus the first `sinks` keys
    (StreamingLLM): k <= q and (q - k < window or k < sinks)."""
    return Modifier("sliding_window_with_sinks",
                    {"window": _int(window, "window", 1), "sinks": _int(sinks, "sinks", 0)})


def causal():
    """k <= q, the built-in causal mask as a modifier (equal lengths)."""
    return Modifier("causal_mask", {})

