"""flashjit.attention: exact attention over dense [batch, seqlen, heads,
head_dim] tensors, with flash_attn.flash_attn_func's contract,
differentiable, with a caller's score and mask modifiers and learned sinks.

An eager call that needs no gradient and ran before with the same shapes,
strides, dtypes and arguments is served by the warm-call cache (_warm.py);
calls that a torch.compile trace reaches go through the custom ops (ops.py).
"""
import ctypes

from . import _launch, _warm, modifiers
from ._checks import attention_options, check_inputs, deterministic_flag, failure, fp8_elements
from ._checks import forward_knobs, is_fp8, refuse_fp8_grad
from ._layout import kernel_strides, unpad
from .autograd import attention_function

NAME = "flashjit.attention"
_fail = failure(NAME)


def prepare_call(torch, q, k, v, causal, window, softcap, softmax_scale, num_splits=0,
                 pack_gqa=None, q_descale=None, k_descale=None, v_descale=None,
                 out_dtype=None, deterministic=False, attention_chunk=0):
    """The checked arguments as the _launch.Call the forward and backward
    share; raises TypeError or ValueError naming the wrong argument."""
    dtype = check_inputs(torch, _fail, q, 4, (("k", k), ("v", v)),
                         layout="[batch, seqlen, heads, head_dim]", together="q, k and v")
    batch, seqlen_q, heads_q, dim_qk = q.shape
    batch_k, seqlen_k, heads_kv, dim_k = k.shape
    if tuple(v.shape[:3]) != (batch_k, seqlen_k, heads_kv):
        raise _fail(ValueError, f"k {tuple(k.shape)} and v {tuple(v.shape)} must agree in batch, "
                                f"seqlen and heads")
    dim_v = v.shape[3]
    if batch_k != batch:
        raise _fail(ValueError, f"q has batch {batch} but k has {batch_k}")
    if dim_k != dim_qk:
        raise _fail(ValueError, f"q has head_dim {dim_qk} but k has {dim_k}")
    if heads_kv == 0 or heads_q % heads_kv != 0:
        raise _fail(ValueError, f"heads_q ({heads_q}) must be a multiple of heads_kv ({heads_kv})")
    for name, d in (("q/k", dim_qk), ("v", dim_v)):
        if not 1 <= d <= 576:
            raise _fail(ValueError, f"head_dim of {name} is {d}; flashjit supports 1..576 "
                                    f"(past 256: on Hopper, sm_90a)")
    elements = fp8_elements(torch, _fail, q, k.dtype, (("q_descale", q_descale),
                                                       ("k_descale", k_descale),
                                                       ("v_descale", v_descale)),
                            out_dtype, batch, heads_kv)
    options, splits, pack = attention_options(_fail, dim_qk, causal, window, softcap,
                                              softmax_scale, num_splits, pack_gqa,
                                              attention_chunk)
    deterministic = deterministic_flag(_fail, deterministic)
    problem = _launch.padded_problem(dtype, batch, heads_q, heads_kv, seqlen_q, seqlen_k,
                                     dim_qk, dim_v, options, elements)
    empty = batch * seqlen_q * heads_q == 0 or seqlen_k == 0
    call = _launch.Call(NAME, problem, dim_qk, dim_v, empty, splits, pack, elements=elements,
                        deterministic=deterministic)
    refuse_fp8_grad(torch, _fail, elements.fp8, (("q", q), ("k", k), ("v", v),
                                             ("q_descale", q_descale), ("k_descale", k_descale),
                                             ("v_descale", v_descale)))
    return call


def attention(q, k, v, causal=False, window=(-1, -1), softcap=0.0, softmax_scale=None,
              return_lse=False, num_splits=0, pack_gqa=None, score_mod=None, mask_mod=None,
              aux=None, mask_mod_qk_only=None, score_mod_grad=None, sinks=None,
              block_mask=None, q_descale=None, k_descale=None, v_descale=None, out_dtype=None,
              deterministic=False, attention_chunk=0):
    """Exact attention softmax(softmax_scale * q k^T + mask) v on CUDA tensors,
    differentiable with respect to q, k and v.

    q: [batch, seqlen_q, heads_q, head_dim]; k: [batch, seqlen_k, heads_kv, head_dim];
    v: [batch, seqlen_k, heads_kv, head_dim_v]. bf16, fp16 or float8_e4m3fn, all
    the same, on one CUDA device; heads_q a multiple of heads_kv (GQA/MQA); head
    dims up to 256, and up to 576 on Hopper (Gemma 4's 512, MLA's 576/512:
    the forward on the sm90 kernel, the backward on the sm80 family's).

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
    deterministic: whether the backward runs its deterministic mode, as
        FlashAttention's `deterministic`: dQ is summed over the key blocks
        in a fixed order instead of by atomics, so two backwards of the same
        inputs give bit-identical dq, dk and dv (a little slower; README's
        performance table). The forward is deterministic either way; a call
        without gradients runs the same forward.
    attention_chunk: FlashAttention-3's (Llama 4's chunked local attention):
        > 0 keeps each query to the keys of its own chunk of this many
        positions (the query's position counted bottom-right aligned, as the
        masks), on top of causal/window; the tiles outside a query block's
        chunks are never loaded. 0: off. Eager calls only for now (torch.compile
        refuses it).
    score_mod, mask_mod: CUDA source of the caller's own variant, compiled
        into the kernel once per text (a new length compiles nothing):
        `float score_mod(float score, int b, int h, int q, int k)` maps each
        scaled score (after softcap), `bool mask_mod(int b, int h, int q,
        int k)` hides keys on top of the mask; q and k are positions in the
        sequence, h the query head. aux: their extra inputs, a dict of CUDA
        tensors (device pointers by dtype), ints and floats, read as
        aux.<name> from one more parameter, `const Aux &aux`. What is
        fast: the tiles mask_mod hides whole are skipped and the ones it
        shows whole run without calling it, from a block map built on the
        GPU (sm90). A mask_mod that reads neither b nor h needs one map for
        every batch and head rather than one per (batch, head), kept across
        calls while the lengths and aux values stay (not where aux holds a
        tensor: its contents may change, so that map is built per call).
    mask_mod_qk_only: None (the default) lets the library find out whether
        mask_mod reads b or h: it compiles mask_mod once into a probe with
        b and h as unknown kernel parameters and checks whether their loads
        survive optimisation (an aux array indexed by b reads b; `b * 0`
        does not). True declares that it reads only q and k without the
        probe (a mask that reads b or h is then wrong); False builds the
        map per (batch, head) whatever the probe would find.
    score_mod_grad: CUDA source of `float score_mod_grad(float score, int b,
        int h, int q, int k)`, d score_mod / d score at the same arguments,
        for gradients with respect to q, k and v (a mask_mod alone is always
        differentiable). The score_mod source may define it itself instead,
        with score_mod's parameters: the library finds it there; giving it
        here too is an error. Eager only (not under torch.compile). The
        snippets run with the caller's privileges, like any kernel.
        score_mod and mask_mod also take the shipped modifiers of
        flashjit.mods (alibi(slopes), relative_bias(table, n),
        document(doc_ids), prefix_lm(n), sliding_window(w, sinks),
        causal()), their aux values bound, their score modifiers
        differentiable.
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

    q_descale, k_descale, v_descale: with float8_e4m3fn q, k and v (the
        sm90 family; flashjit.quantize_fp8 makes them), the fp32 factors
        their codes are multiplied by (real = code * descale), on q's
        device: [batch, heads_kv] (one per sequence and KV head, any
        strides; q's shared by the query heads of a group) or one element
        (per tensor). Required for e4m3 tensors, refused for 16-bit ones.
    out_dtype: the output's dtype for e4m3 inputs, torch.bfloat16 (the
        default) or torch.float16; a 16-bit call's output has q's dtype.
        fp8 calls are forward only (the LSE stays fp32 in the usual units):
        with grad mode on, an e4m3 input that requires grad is refused.

    Returns out [batch, seqlen_q, heads_q, head_dim_v] (and lse). Runs on the
    current CUDA stream of the tensors' device.

    Gradients: when grad mode is on and q, k or v requires grad, out carries a
    grad_fn whose backward runs flashjit's backward kernels from the saved q,
    k, v, out and lse (P is never stored: memory stays O(seqlen)); dk and dv
    of a KV head sum the query heads that share it. Otherwise no autograd
    machinery is involved.
    """
    import torch

    fp8 = (q_descale, k_descale, v_descale, out_dtype)
    if (score_mod is not None or mask_mod is not None or aux is not None
            or mask_mod_qk_only is not None or score_mod_grad is not None or sinks is not None
            or block_mask is not None):
        return _modified_attention(torch, q, k, v, causal, window, softcap, softmax_scale,
                                   return_lse, num_splits, pack_gqa, score_mod, mask_mod, aux,
                                   mask_mod_qk_only, score_mod_grad, sinks, block_mask, fp8,
                                   deterministic, attention_chunk)
    if attention_chunk != 0 and torch.compiler.is_compiling():
        raise NotImplementedError("flashjit.attention: attention_chunk is not traceable by "
                                  "torch.compile yet; call it eagerly")
    if torch.compiler.is_compiling():
        # torch.compile traces the custom ops (flashjit/ops.py: fake
        # implementations, autograd through the backward op); eager calls
        # below go straight to the library.
        from . import ops  # registers torch.ops.flashjit.* on import
        refuse_fp8_grad(torch, _fail, is_fp8(torch, getattr(q, "dtype", None)),
                        (("q", q), ("k", k), ("v", v)))
        # Checked before the op's conversions, which would take "on" for True.
        forward_knobs(_fail, num_splits, pack_gqa)
        deterministic_flag(_fail, deterministic)
        left, right = window
        out, lse = torch.ops.flashjit.attention_fwd(
            q, k, v, bool(causal), int(left), int(right), float(softcap),
            None if softmax_scale is None else float(softmax_scale), int(num_splits),
            ops.pack_code(pack_gqa), *fp8, deterministic)
        return (out, lse) if return_lse else out

    differentiable = False
    call_key = None
    try:
        differentiable = (q.requires_grad or k.requires_grad or v.requires_grad) and (
            torch.is_grad_enabled())
    except AttributeError:  # not tensors: prepare_call says which
        pass
    else:
        # fp8 calls take the full path: the entries hold no descales.
        if not differentiable and all(a is None for a in fp8) and attention_chunk == 0:
            # A call whose shapes, strides, dtypes and arguments ran before.
            call_key, served = _warm.serve(torch, q, k, v, causal, window, softcap,
                                           softmax_scale, num_splits, pack_gqa, deterministic,
                                           return_lse)
            if served is not None:
                return served if return_lse else served[0]

    call = prepare_call(torch, q, k, v, causal, window, softcap, softmax_scale, num_splits,
                        pack_gqa, *fp8, deterministic, attention_chunk)
    if differentiable:
        out, lse = attention_function(torch).apply(q, k, v, None, call)
        return (out, lse) if return_lse else out

    out, lse, qp, kp, vp = _launch.forward(torch, call, q, k, v, want_lse=return_lse)
    if (qp is q and kp is k and vp is v and not call.empty and not call.pad_v
            and not _launch.POISON_OUTPUT):
        _warm.store(call_key, call, [kernel_strides(t) for t in (q, k, v)], call.config,
                    q.get_device())
    out = unpad(out, call.dim_v)
    return (out, lse) if return_lse else out


def _modified_attention(torch, q, k, v, causal, window, softcap, softmax_scale, return_lse,
                        num_splits, pack_gqa, score_mod, mask_mod, aux, mask_mod_qk_only,
                        score_mod_grad, sinks, block_mask, fp8, deterministic,
                        attention_chunk=0):
    """attention() with a caller's modifiers (modifiers.py) or learned sinks,
    eager; differentiable with respect to q, k, v and the sinks (a score_mod
    then needs its score_mod_grad, given or defined in its source); fp8:
    (q_descale, k_descale, v_descale, out_dtype)."""
    if torch.compiler.is_compiling():
        raise NotImplementedError("flashjit.attention: score_mod/mask_mod/sinks are not "
                                  "traceable by torch.compile yet; call it eagerly")
    differentiable = torch.is_grad_enabled() and any(
        getattr(t, "requires_grad", False) for t in (q, k, v, sinks))
    call = prepare_call(torch, q, k, v, causal, window, softcap, softmax_scale, num_splits,
                        pack_gqa, *fp8, deterministic, attention_chunk)
    if sinks is not None:
        call.sinks = modifiers.checked_sinks(torch, sinks, q)
    score_mod, mask_mod, aux, mask_mod_qk_only, score_mod_grad = modifiers.unpack_shipped(
        score_mod, mask_mod, aux, mask_mod_qk_only, score_mod_grad, q, k)
    mods, keep = modifiers.build(torch, score_mod, mask_mod, aux, q.device, mask_mod_qk_only,
                                 score_mod_grad, call.sinks)
    if differentiable and score_mod:
        # The backward's derivative, before the forward runs.
        modifiers.check_score_mod_grad(mods, score_mod_grad)
    if block_mask is not None:
        mask_struct, mask_tensors = modifiers.block_mask(torch, block_mask, mask_mod, q, k)
        mods.block_mask = ctypes.pointer(mask_struct)
        keep = (keep, mask_struct, mask_tensors)
    # The aux tensors too: the backward reads them through their pointers.
    call.modifiers, call.keep = mods, (keep, aux)
    if differentiable:
        out, lse = attention_function(torch).apply(q, k, v, sinks, call)
        return (out, lse) if return_lse else out
    out, lse, _, _, _ = _launch.forward(torch, call, q, k, v, want_lse=return_lse)
    out = unpad(out, call.dim_v)
    return (out, lse) if return_lse else out
