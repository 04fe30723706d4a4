"""flashjit as an attention implementation of Hugging Face transformers (5.x).

    import flashjit.integrations.transformers            # registers "fjit"
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16,
                                                 attn_implementation="fjit").cuda()
    model.set_attn_implementation("fjit")                 # or switch a loaded model

Importing the module registers the implementation in transformers'
AttentionInterface (the attention function) and AttentionMaskInterface (its
masks: those of "flash_attention_2", the 2-D padding mask or None, never a
4-D one); register() does it again (after a test swapped the registries, or
under another name) and returns the name.

The name is not "flashjit": transformers reads any attn_implementation that
contains "flash" as a FlashAttention build to load from the Hugging Face Hub
(and GPT-OSS swaps it for one of its own list), so a function registered
under such a name is never called.

What a call receives (query, key, value [batch, heads, seqlen, head_dim],
key and value holding the whole cache in generation) and what flashjit does
with it:
  - no mask: flashjit.attention on the tensors as they are (GQA without
    repeat_kv: heads_kv < heads); a decode step (one query against the
    cache) is causal aligned to the bottom-right corner, as flashjit's masks
    are.
  - a 2-D padding mask (left or right padding, training or generation): the
    tokens are unpadded into flashjit.attention_varlen, whose output is
    padded back with zeros (as "flash_attention_2" does); with learned sinks
    (GPT-OSS), which the varlen call lacks, flashjit.attention over the
    padded tensors with a mask_mod that hides the padding keys.
  - packed sequences, from cu_seq_lens_q/k and max_length_q/k (transformers'
    DataCollatorWithFlattening) or from position_ids that restart (as
    "flash_attention_2" reads them): flashjit.attention_varlen over the
    flattened batch; with sinks, flashjit.attention with a mask_mod that
    keeps each query in its own sequence.
  - sliding_window w: key j is visible to query i when i - j < w
    (transformers' sliding_window_overlay), flashjit's window (w - 1, 0);
    not causal (Gemma 3 with use_bidirectional_attention), |i - j| < w:
    (w - 1, w - 1).
  - softcap (Gemma 2): softcap * tanh(score / softcap) of the scaled
    scores, flashjit's softcap; scaling: softmax_scale; s_aux (GPT-OSS's
    sinks, one logit per query head joining each row's softmax, not scaled):
    flashjit's sinks=.
  - dropout must be 0 (model.eval(), or config.attention_dropout = 0), and
    q, k and v bf16 or fp16 (load the model with dtype=torch.bfloat16):
    anything else raises, naming the value. The attention weights are never
    returned (None), as with "sdpa".
Gradients flow to q, k, v and the sinks (flashjit's backward kernels).
"""
import warnings

import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, flash_attention_mask

from ..dense import attention as _flashjit_attention
from ..varlen import attention_varlen as _flashjit_attention_varlen

NAME = "fjit"

# The flashjit calls this module makes and the dtypes they take: the seams
# through which tests/python/test_transformers_cpu.py runs the plumbing on
# the CPU with reference attention functions of the same contract.
_attention = _flashjit_attention
_attention_varlen = _flashjit_attention_varlen
_DTYPES = (torch.bfloat16, torch.float16)

# mask_mod snippets (true = visible) of the calls with sinks, which only the
# dense call takes. Padding: aux.keys is the uint8 [batch, seqlen_k] mask,
# 1 = a token.
KEY_PADDING_MASK = (
    "__device__ bool mask_mod(int b, int h, int q, int k, const Aux &aux) {\n"
    "  return aux.keys[static_cast<long long>(b) * aux.seqlen_k + k] != 0;\n"
    "}\n")
# Packed sequences: aux.sequence is the int32 [batch, seqlen] index of each
# token's sequence (queries and keys alike: seqlen_q == seqlen_k).
SAME_SEQUENCE_MASK = (
    "__device__ bool mask_mod(int b, int h, int q, int k, const Aux &aux) {\n"
    "  const long long row = static_cast<long long>(b) * aux.seqlen;\n"
    "  return aux.sequence[row + q] == aux.sequence[row + k];\n"
    "}\n")


def register(name=NAME):
    """Registers the attention function and its masks under `name` (default
    "fjit") in transformers' AttentionInterface and AttentionMaskInterface;
    returns the name, for attn_implementation=. A name containing "flash" is
    refused (transformers would load a Hub kernel for it instead)."""
    if not isinstance(name, str) or not name or "|" in name or "/" in name:
        raise ValueError(f"flashjit: the attention implementation's name must be a plain "
                         f"string, got {name!r}")
    if "flash" in name:
        raise ValueError(f"flashjit: {name!r} contains 'flash': transformers treats such an "
                         f"attn_implementation as a FlashAttention build to load from the Hub "
                         f"and never calls the function registered under it; use {NAME!r}")
    AttentionInterface.register(name, attention_forward)
    AttentionMaskInterface.register(name, flash_attention_mask)
    return name


def attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None,
                      sliding_window=None, softcap=None, is_causal=None, s_aux=None,
                      position_ids=None, cu_seq_lens_q=None, cu_seq_lens_k=None,
                      max_length_q=None, max_length_k=None, **kwargs):
    """transformers' attention function contract: query [batch, heads,
    seqlen_q, head_dim], key/value [batch, heads_kv, seqlen_k, head_dim];
    returns (out [batch, seqlen_q, heads, head_dim_v], None)."""
    if dropout:
        raise ValueError(f"flashjit: attention dropout is not supported (got dropout={dropout}): "
                         f"call model.eval() or set config.attention_dropout = 0.0")
    if query.dtype not in _DTYPES:
        raise TypeError(f"flashjit: the attention inputs are {query.dtype}, but flashjit takes "
                        f"bf16 or fp16 only: load the model with dtype=torch.bfloat16 (or "
                        f"model.to(torch.bfloat16)), or run it under torch.autocast")
    if kwargs.get("position_bias") is not None:
        raise NotImplementedError("flashjit: an additive position_bias is not supported; use "
                                  "attn_implementation='sdpa' for this model")
    if kwargs.get("output_attentions"):
        warnings.warn("flashjit: output_attentions=True is ignored (the attention weights are "
                      "never formed); use attn_implementation='eager' to get them",
                      stacklevel=2)
    causal = getattr(module, "is_causal", True) if is_causal is None else bool(is_causal)
    options = dict(causal=causal, window=_window(sliding_window, causal),
                   softcap=float(softcap) if softcap else 0.0, softmax_scale=scaling)
    # [batch, heads, seqlen, d] -> flashjit's [batch, seqlen, heads, d]: views.
    q, k, v = query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2)
    if attention_mask is not None:
        out = _padded(q, k, v, attention_mask, s_aux, options)
    elif cu_seq_lens_q is not None and cu_seq_lens_k is not None:
        out = _packed(q, k, v, _int32(cu_seq_lens_q), _int32(cu_seq_lens_k),
                      _length(max_length_q, cu_seq_lens_q), _length(max_length_k, cu_seq_lens_k),
                      s_aux, options)
    else:
        packed = _offsets_of_positions(position_ids, q, k)
        if packed is not None:
            out = _packed(q, k, v, packed[0], packed[0], packed[1], packed[1], s_aux, options)
        else:
            out = _attention(q, k, v, sinks=s_aux, **options)
    return out, None


def _window(sliding_window, causal):
    """flashjit's window=(left, right) of transformers' sliding_window."""
    if sliding_window is None:
        return (-1, -1)
    w = int(sliding_window)
    if w < 1:
        raise ValueError(f"flashjit: sliding_window must be >= 1, got {sliding_window}")
    # Key j shows for query i when i - j < w (w keys, the query's own
    # included) and, causal, j <= i; bidirectional, |i - j| < w (Gemma 3's
    # window and "flash_attention_2"'s).
    return (w - 1, 0) if causal else (w - 1, w - 1)


def _int32(t):
    return t.to(torch.int32).contiguous()


def _length(value, offsets):
    """An int max_length_q/k; from the offsets when it is not given."""
    if value is None:
        return int(offsets.diff().max().item())
    return int(value.item()) if isinstance(value, torch.Tensor) else int(value)


def _padded(q, k, v, attention_mask, sinks, options):
    """Attention under a 2-D padding mask [batch, seqlen_k] (True/1 = a
    token), the last seqlen_q of whose positions are the queries'."""
    if attention_mask.dim() != 2:
        raise ValueError(f"flashjit: got a {attention_mask.dim()}-D attention mask "
                         f"{tuple(attention_mask.shape)}; flashjit takes the 2-D padding mask "
                         f"[batch, seqlen_k] that flash_attention_mask gives (register() "
                         f"registers it); custom 4-D masks are not supported")
    keys = attention_mask.shape[1]
    if k.shape[1] > keys:
        # A static cache: the slots past the mask hold no token yet.
        k, v = k[:, :keys], v[:, :keys]
    elif k.shape[1] < keys:
        raise ValueError(f"flashjit: the attention mask covers {keys} keys but there are "
                         f"{k.shape[1]}")
    mask = attention_mask.to(torch.bool)
    batch, seqlen_q, heads, _ = q.shape
    if sinks is not None:
        aux = {"keys": mask.to(torch.uint8).contiguous(), "seqlen_k": keys}
        return _attention(q, k, v, sinks=sinks, mask_mod=KEY_PADDING_MASK, aux=aux, **options)
    q_mask = mask[:, keys - seqlen_q:]
    lengths_k = mask.sum(-1, dtype=torch.int32)
    lengths_q = q_mask.sum(-1, dtype=torch.int32)
    max_q, max_k = torch.stack([lengths_q.max(), lengths_k.max()]).tolist()
    cu_q = F.pad(lengths_q.cumsum(0, dtype=torch.int32), (1, 0))
    cu_k = F.pad(lengths_k.cumsum(0, dtype=torch.int32), (1, 0))
    out = _attention_varlen(q[q_mask], k[mask], v[mask], cu_q, cu_k, max_q, max_k, **options)
    # The padding queries' rows are zeros (they see no key of theirs).
    padded = out.new_zeros(batch, seqlen_q, heads, out.shape[-1])
    return padded.index_put((q_mask,), out)


def _packed(q, k, v, cu_q, cu_k, max_q, max_k, sinks, options):
    """Attention over packed sequences: sequence i owns rows cu[i] ..
    cu[i + 1] of the flattened [batch * seqlen] tokens."""
    batch, seqlen_q, heads, _ = q.shape
    if sinks is not None:
        if k.shape[1] != seqlen_q or not torch.equal(cu_q, cu_k):
            raise NotImplementedError("flashjit: packed sequences with sinks need the same "
                                      "offsets for queries and keys")
        tokens = torch.arange(batch * seqlen_q, device=q.device, dtype=torch.int32)
        sequence = torch.searchsorted(cu_q[1:], tokens, right=True).to(torch.int32)
        aux = {"sequence": sequence.view(batch, seqlen_q).contiguous(), "seqlen": seqlen_q}
        return _attention(q, k, v, sinks=sinks, mask_mod=SAME_SEQUENCE_MASK, aux=aux, **options)
    flat = [t.reshape(-1, *t.shape[2:]) for t in (q, k, v)]
    out = _attention_varlen(*flat, cu_q, cu_k, max_q, max_k, **options)
    return out.view(batch, seqlen_q, heads, out.shape[-1])


def _offsets_of_positions(position_ids, q, k):
    """(cu_seqlens int32, max_seqlen) of the sequences packed in each row,
    each starting where position_ids does not step by 1 (transformers'
    find_packed_sequence_indices); None when nothing is packed (one sequence
    a row, a cache's step, or no usable position_ids)."""
    batch, seqlen = q.shape[:2]
    if position_ids is None or seqlen < 2 or k.shape[1] != seqlen or position_ids.dim() != 2:
        return None
    positions = position_ids.expand(batch, -1) if position_ids.shape[0] == 1 else position_ids
    if tuple(positions.shape) != (batch, seqlen):
        return None
    starts = torch.ones_like(positions, dtype=torch.bool)
    starts[:, 1:] = positions[:, 1:] - positions[:, :-1] != 1
    if not bool(starts[:, 1:].any()):
        return None
    first = starts.flatten().nonzero().flatten().to(torch.int32)
    end = torch.tensor([batch * seqlen], dtype=torch.int32, device=first.device)
    cu = torch.cat([first, end])
    return cu, int(cu.diff().max().item())


register()
