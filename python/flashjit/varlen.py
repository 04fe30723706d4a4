"""flashjit.attention_varlen: a packed batch of sequences of different lengths,
with flash_attn_varlen_func's contract.

    out = flashjit.attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k,
                                    max_seqlen_q, max_seqlen_k, causal=True)

q is [total_q, heads_q, d], k/v [total_k, heads_kv, d]; sequence b owns rows
cu_seqlens_q[b] .. cu_seqlens_q[b + 1] of q (likewise of k/v). Differentiable
with respect to q, k and v (flashjit's varlen backward kernels).

The serving call (flash_attn_varlen_func with block_table and seqused_k: a
batch mixing decode steps and prefill chunks over a paged KV cache), forward
only:

    out = flashjit.attention_varlen(q, k_cache, v_cache, cu_seqlens_q, None,
                                    max_seqlen_q, max_seqlen_k, causal=True,
                                    block_table=table, seqused_k=lens)
"""
from . import _launch
from ._checks import attention_options, block_table as check_block_table
from ._checks import check_inputs, check_tensor, deterministic_flag, failure, forward_knobs
from ._checks import fp8_elements, int32_vector, is_fp8, mixed_dtype_message, output_dtype
from ._checks import refuse_fp8_grad
from ._layout import prepare, unpad
from .autograd import varlen_function

NAME = "flashjit.attention_varlen"
_fail = failure(NAME)

_MAX_ROWS = 2 ** 31 - 1  # int32 row indices in the kernels
_BATCH_FROM = "len(cu_seqlens_q) - 1"


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
                     return_lse=False, block_table=None, seqused_k=None, q_descale=None,
                     k_descale=None, v_descale=None, out_dtype=None, num_splits=0,
                     pack_gqa=None, deterministic=False, attention_chunk=0, seqused_q=None):
    """Attention over a packed batch of sequences of different lengths.

    q: [total_q, heads_q, d]; k, v: [total_k, heads_kv, d] / [total_k,
        heads_kv, d_v], bf16, fp16 or float8_e4m3fn; head dims that are not
        multiples of 16 bytes are padded (copies), as flashjit.attention
        does.
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
    q_descale, k_descale, v_descale, out_dtype: fp8 inputs as in
        flashjit.attention, the descales [batch, heads_kv] (batch = the
        number of sequences) or one element; forward only. Over a KV cache
        (below) an e4m3 cache may also go with 16-bit q (k_descale and
        v_descale then its scales, also [heads_kv]).

    num_splits, pack_gqa: the forward's split-KV count and GQA packing, as
        flashjit.attention's: num_splits 0 lets the library choose per call,
        1 turns splitting off, up to 256 splits each work tile's key range
        (at most one split per key tile of the longest sequence, else the
        library's error); pack_gqa True packs the query heads that share a
        KV head into one tile's rows (the sm90 family, Hopper; the sm80
        family refuses True by name), False does not, None lets the library
        choose. They set the forward's kernel only; the result is the same
        attention either way (up to floating-point rounding).
    deterministic: whether the backward runs its deterministic mode (dQ
        summed without atomics: bit-identical gradients run to run), as
        flashjit.attention's.
    attention_chunk: chunked attention within each sequence, as
        flashjit.attention's (eager calls only for now).

    seqused_q: int32 [batch] device tensor (FlashAttention-3's): sequence b
        uses only its first seqused_q[b] queries (clamped to its
        cu_seqlens_q length); masks align those with the end of its keys,
        and its other rows are never written. They must hold finite values
        in q and in the output's gradient: the Hopper backward reads whole
        tiles and multiplies those rows by zero, which a NaN survives.

    Rows of q that no sequence owns or uses get unspecified output (and a
    zero gradient).
    Differentiable with respect to q, k and v: the backward recomputes the
    probabilities from the saved log-sum-exp, as flashjit.attention does.

    Over a KV cache (the serving call; forward only):
    block_table: int32 [batch, pages_per_seq] device tensor (batch =
        len(cu_seqlens_q) - 1). k and v are then the paged cache
        [num_pages, page_size, heads_kv, d] (page_size 1 to 512: pages of
        whole 16-row runs are read by TMA on Hopper, others gathered row by
        row by the sm80 family); row b lists sequence b's pages in order. Entries past a
        sequence's keys are never read; an entry outside [0, num_pages)
        reads as zeros. Slots of a sequence's last page past its key count
        are read and masked: they must hold finite values (a zeroed cache
        does). max_seqlen_k must not exceed pages_per_seq * page_size (the
        capacity per sequence), which sizes the kernel: over pages a key
        count is cut at the capacity, not at max_seqlen_k.
    seqused_k: int32 [batch] device tensor, sequence b's key count. Over a
        paged cache it makes cu_seqlens_k optional (None; not read when
        given); without seqused_k the counts are cu_seqlens_k's
        differences. Without block_table k/v are packed
        [total_k, heads_kv, d] as above, cu_seqlens_k is required (sequence
        b's keys start at row cu_seqlens_k[b]) and sequence b uses its first
        seqused_k[b] keys (cut at max_seqlen_k and at its own cu_seqlens_k
        rows); the rows past them must hold finite values (the Hopper
        kernels read whole tiles and mask them).
    Masks align each sequence's queries with the END of its keys, so a chunk
    of new queries sees its whole cached prefix (append this step's keys to
    the cache first). The cache is read, never written. A head dim that is
    not a multiple of 8 is padded as above, which copies the whole cache on
    every call (as FlashAttention's wrapper does), and so does a cache view
    the kernel cannot read in place: keep the cache kernel-ready (last dim
    contiguous, other strides multiples of 8 elements) and d a multiple of
    8. Over pages not differentiable: with grad mode on, a q, k or v that
    requires grad is a NotImplementedError (call under torch.no_grad() or
    torch.inference_mode(), or detach). Packed K/V with seqused_k are (as
    FlashAttention-3's, eager calls): the backward uses sequence b's first
    seqused_k[b] keys of its cu_seqlens_k rows, and the gradient of every
    row a sequence leaves unused (past seqused_k, or seqused_q) is 0.
    """
    import torch

    cached = block_table is not None or seqused_k is not None
    if block_table is not None:
        _refuse_grad(torch, q, k, v)
    fp8 = (q_descale, k_descale, v_descale, out_dtype)
    if attention_chunk != 0 and torch.compiler.is_compiling():
        raise NotImplementedError("flashjit.attention_varlen: attention_chunk is not traceable "
                                  "by torch.compile yet; call it eagerly")
    if seqused_q is not None and torch.compiler.is_compiling():
        raise NotImplementedError("flashjit.attention_varlen: seqused_q is not traceable by "
                                  "torch.compile yet; call it eagerly")
    if torch.compiler.is_compiling():
        # torch.compile traces the custom ops (flashjit/ops.py); eager calls
        # below go straight to the library.
        from . import ops  # registers torch.ops.flashjit.* on import
        refuse_fp8_grad(torch, _fail, is_fp8(torch, getattr(q, "dtype", None)),
                        (("q", q), ("k", k), ("v", v)))
        # Checked before the ops' conversions, which would take "on" for True.
        forward_knobs(_fail, num_splits, pack_gqa)
        deterministic_flag(_fail, deterministic)
        left, right = window
        scale = None if softmax_scale is None else float(softmax_scale)
        knobs = (int(num_splits), ops.pack_code(pack_gqa))
        if cached:
            out, lse = torch.ops.flashjit.attention_varlen_kvcache(
                q, k, v, cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q), int(max_seqlen_k),
                bool(causal), int(left), int(right), float(softcap), scale, block_table,
                seqused_k, *fp8, *knobs)
        else:
            out, lse = torch.ops.flashjit.attention_varlen_fwd(
                q, k, v, cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q), int(max_seqlen_k),
                bool(causal), int(left), int(right), float(softcap), scale, *fp8, *knobs,
                deterministic)
        return (out, lse) if return_lse else out

    call = prepare_call(torch, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                        softmax_scale, causal, window, softcap, block_table=block_table,
                        seqused_k=seqused_k, fp8=fp8, num_splits=num_splits,
                        pack_gqa=pack_gqa, deterministic=deterministic,
                        attention_chunk=attention_chunk, seqused_q=seqused_q)
    if call is None:
        out, lse = empty_result(torch, q, v, out_dtype)
    elif (block_table is None and not call.fp8 and torch.is_grad_enabled()
          and any(t.requires_grad for t in (q, k, v))):
        out, lse = varlen_function(torch).apply(q, k, v, call)
    else:
        out, lse = forward(torch, call, q, k, v, want_lse=return_lse)
    return (out, lse) if return_lse else out


def _refuse_grad(torch, q, k, v):
    """A call over a paged KV cache has no backward (as FlashAttention's paged
    varlen call): refused rather than returning a result autograd cannot
    differentiate."""
    if not torch.is_grad_enabled():
        return
    names = [name for name, t in (("q", q), ("k", k), ("v", v))
             if getattr(t, "requires_grad", False)]
    if names:
        raise _fail(NotImplementedError,
                    f"{', '.join(names)} require{'s' if len(names) == 1 else ''} grad, but a call "
                    f"over a paged KV cache (block_table) is forward only: its result is "
                    f"not differentiable; call it under torch.no_grad() or "
                    f"torch.inference_mode(), or pass detached tensors")


def forward(torch, call, q, k, v, want_lse):
    """The forward of a prepared call, without autograd: (out [total_q,
    heads_q, dv], lse [heads_q, total_q] fp32 or None). k and v: packed
    [total_k, heads_kv, d], or the paged cache [num_pages, page_size,
    heads_kv, d] whose batch stride steps between pages (padding, or a
    layout the kernel cannot read, copies the cache)."""
    paged = call.problem.page_size > 0
    k, v = (k, v) if paged else (k.unsqueeze(0), v.unsqueeze(0))
    outp, lse, _, _, _ = _launch.forward(torch, call, q.unsqueeze(0), k, v, want_lse)
    return unpad(outp[0], call.dim_v), (lse[0] if lse is not None else None)


def prepare_call(torch, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                 softmax_scale, causal, window, softcap, block_table=None, seqused_k=None,
                 fp8=(None, None, None, None), num_splits=0, pack_gqa=None,
                 deterministic=False, attention_chunk=0, seqused_q=None):
    """The checked arguments as the _launch.Call the forward and backward
    share (over a KV cache when block_table or seqused_k is given), or None
    when there is nothing to attend (no kernel to run). fp8: (q_descale,
    k_descale, v_descale, out_dtype)."""
    if block_table is not None or seqused_k is not None:
        return prepare_cache_call(torch, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                   max_seqlen_k, softmax_scale, causal, window, softcap,
                                   block_table, seqused_k, fp8, num_splits, pack_gqa,
                                   deterministic, attention_chunk, seqused_q)

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
    used_q = _used_queries(torch, seqused_q, batch, device)
    max_q = _length("max_seqlen_q", max_seqlen_q)
    max_k = _length("max_seqlen_k", max_seqlen_k)
    for name, longest, total in (("max_seqlen_q", max_q, total_q), ("max_seqlen_k", max_k,
                                                                    total_k)):
        if longest > total:
            raise _fail(ValueError, f"{name}={longest} exceeds the packed tensor's {total} rows")
    elements = _elements(torch, q, k.dtype, fp8, batch, heads_kv, (q, k, v))
    options, splits, pack = attention_options(_fail, dim, causal, window, softcap,
                                              softmax_scale, num_splits, pack_gqa,
                                              attention_chunk)
    deterministic = deterministic_flag(_fail, deterministic)
    if total_q == 0 or heads_q == 0 or max_q == 0:
        return None
    problem = _launch.padded_problem(dtype, batch, heads_q, heads_kv, max_q, max(max_k, 1), dim,
                                     dim_v, options, elements, varlen=1)
    offsets = _launch.varlen_args(cu_q, cu_k, total_q, total_k, used_q)
    return _launch.Call(NAME, problem, dim, dim_v, splits=splits, pack_gqa=pack, varlen=offsets,
                        keep=(cu_q, cu_k, used_q), elements=elements,
                        deterministic=deterministic)


def _used_queries(torch, seqused_q, batch, device):
    """seqused_q checked: None, or the contiguous int32 [batch] tensor."""
    if seqused_q is None:
        return None
    return int32_vector(torch, _fail, "seqused_q", seqused_q, batch, device, _BATCH_FROM)


def _elements(torch, q, kv_dtype, fp8, batch, heads_kv, tensors, per_head=False):
    """The call's checked _checks.Elements (fp8: the caller's descales and
    out_dtype); an fp8 call whose tensors require grad is refused."""
    q_descale, k_descale, v_descale, out_dtype = fp8
    elements = fp8_elements(torch, _fail, q, kv_dtype, (("q_descale", q_descale),
                                                        ("k_descale", k_descale),
                                                        ("v_descale", v_descale)),
                            out_dtype, batch, heads_kv, per_head)
    refuse_fp8_grad(torch, _fail, elements.fp8, tuple(zip(("q", "k", "v"), tensors)) + (
        ("q_descale", q_descale), ("k_descale", k_descale), ("v_descale", v_descale)))
    return elements


def empty_result(torch, q, v, out_dtype=None):
    """(out, lse) of a call with no query to attend: zeros and +inf (out in
    the call's output dtype: out_dtype is the caller's, checked)."""
    total_q, heads_q = q.shape[0], q.shape[1]
    dtype, _ = output_dtype(torch, _fail, q.dtype, out_dtype)
    # v's last dim: packed [total_k, heads_kv, dv] or paged [pages, page, heads_kv, dv].
    out = torch.zeros((total_q, heads_q, v.shape[-1]), dtype=dtype, device=q.device)
    lse = torch.full((heads_q, total_q), float("inf"), dtype=torch.float32, device=q.device)
    return out, lse


# ---- the serving call: a packed batch of queries over a KV cache ---------------

def prepare_cache_call(torch, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                        softmax_scale, causal, window, softcap, block_table, seqused_k, fp8,
                        num_splits, pack_gqa, deterministic, attention_chunk=0,
                        seqused_q=None, new_keys=None):
    """prepare_call over a KV cache (block_table and/or seqused_k given); an
    e4m3 cache may go with 16-bit q (kv_dtype e4m3). deterministic is
    checked only: the call has no backward, and its forward is deterministic
    either way. new_keys: (k_new, v_new, cu_seqlens_k_new), packed new keys
    the kernels append at seqused_k first (flashjit.attention_with_kvcache's
    packed call), or None."""
    paged = block_table is not None
    dtype = check_inputs(torch, _fail, q, 3, ())
    device = q.device
    dims = 4 if paged else 3
    for name, t in (("k", k), ("v", v)):
        if paged and isinstance(t, torch.Tensor) and t.dim() != 4:
            raise _fail(ValueError, f"{name} must be the paged cache [num_pages, page_size, "
                                    f"heads_kv, head_dim] when block_table is given, got shape "
                                    f"{tuple(t.shape)}")
        check_tensor(torch, _fail, name, t, dims, device)
        # q's dtype, or an e4m3 cache under 16-bit q.
        if t.dtype != q.dtype and not (is_fp8(torch, t.dtype) and not is_fp8(torch, q.dtype)):
            raise _fail(TypeError, mixed_dtype_message(torch, name, t.dtype, q.dtype))
    if v.dtype != k.dtype:
        raise _fail(TypeError, f"v is {v.dtype} but k is {k.dtype}: the cache's keys and values "
                               f"must have one dtype")
    total_q, heads_q, dim = q.shape
    heads_kv, dim_k, dim_v = k.shape[-2], k.shape[-1], v.shape[-1]
    if tuple(v.shape[:-1]) != tuple(k.shape[:-1]):
        raise _fail(ValueError, f"k {tuple(k.shape)} and v {tuple(v.shape)} must agree in all "
                                f"but their last dim")
    if dim_k != dim:
        raise _fail(ValueError, f"q has head_dim {dim} but k has {dim_k}")
    if heads_kv == 0 or heads_q % heads_kv:
        raise _fail(ValueError, f"heads_q ({heads_q}) must be a multiple of heads_kv ({heads_kv})")
    cu_q = _offsets(torch, "cu_seqlens_q", cu_seqlens_q, None, device)
    batch = cu_q.shape[0] - 1
    if cu_seqlens_k is not None:
        cu_k = _offsets(torch, "cu_seqlens_k", cu_seqlens_k, batch, device)
    elif paged and seqused_k is not None:
        cu_k = None  # the keys are the pages, the counts seqused_k
    elif paged:
        raise _fail(ValueError, "cu_seqlens_k or seqused_k is required with block_table: each "
                                "sequence's key count is seqused_k[b], else cu_seqlens_k[b + 1] "
                                "- cu_seqlens_k[b]")
    else:
        raise _fail(ValueError, "cu_seqlens_k is required with seqused_k and no block_table: "
                                "k/v are packed and sequence b's keys start at row "
                                "cu_seqlens_k[b] (pass block_table for a paged cache)")
    used_q = _used_queries(torch, seqused_q, batch, device)
    used = None if seqused_k is None else int32_vector(torch, _fail, "seqused_k", seqused_k,
                                                       batch, device, _BATCH_FROM)
    max_q = _length("max_seqlen_q", max_seqlen_q)
    max_k = _length("max_seqlen_k", max_seqlen_k)
    if max_q > total_q:
        raise _fail(ValueError, f"max_seqlen_q={max_q} exceeds the packed tensor's {total_q} rows")
    table, table_stride, num_pages, page = None, 0, 0, 0
    if paged:
        num_pages, page = k.shape[0], k.shape[1]
        if not 1 <= page <= 512:
            raise _fail(ValueError, f"k/v have page_size {page} (their dim 1): a paged cache "
                                    f"needs 1 to 512 rows a page")
        if not 1 <= num_pages <= _MAX_ROWS:
            raise _fail(ValueError, f"k/v have {num_pages} pages (their dim 0): a paged cache "
                                    f"needs 1 to 2^31-1")
        table, table_stride = check_block_table(torch, _fail, block_table, batch, device,
                                                _BATCH_FROM)
        width = table.shape[1]
        seqlen_k = width * page  # the capacity per sequence, what the C call asks
        if max_k > seqlen_k:
            raise _fail(ValueError, f"max_seqlen_k={max_k} exceeds the cache's capacity per "
                                    f"sequence: block_table's {width} pages x page_size {page} "
                                    f"= {seqlen_k}")
        if seqlen_k > _MAX_ROWS:
            raise _fail(ValueError, f"block_table's {width} pages x page_size {page} = "
                                    f"{seqlen_k} keys per sequence exceed 2^31-1")
        total_k = 0  # the keys are pages, not packed rows
        no_key = width == 0
    else:
        total_k = k.shape[0]
        if max_k > total_k:
            raise _fail(ValueError, f"max_seqlen_k={max_k} exceeds the packed tensor's "
                                    f"{total_k} rows")
        seqlen_k = max_k
        no_key = max_k == 0
    elements = _elements(torch, q, k.dtype, fp8, batch, heads_kv, (q, k, v), per_head=True)
    options, splits, pack = attention_options(_fail, dim, causal, window, softcap,
                                              softmax_scale, num_splits, pack_gqa,
                                              attention_chunk)
    deterministic_flag(_fail, deterministic)
    if total_q == 0 or heads_q == 0 or max_q == 0 or no_key:
        return None  # no query, or no key for any (O = 0, LSE = +inf)
    problem = _launch.padded_problem(dtype, batch, heads_q, heads_kv, max_q, seqlen_k, dim, dim_v,
                                     options, elements, page_size=page,
                                     seqused_k=int(used is not None), varlen=1)
    # Packed keys with counts are differentiable: the backward reads them here.
    offsets = _launch.varlen_args(cu_q, cu_k, total_q, total_k, used_q,
                                  used if not paged else None)
    k_new = v_new = cu_new = None
    if new_keys is not None:
        k_new, v_new, cu_new = _new_keys(torch, new_keys, q, heads_kv, dim, dim_v, batch, used)
    cache = _launch.kvcache_args(used, table, table_stride, num_pages, k_new, v_new,
                                 cu_seqlens_k_new=cu_new)
    return _launch.Call(NAME, problem, dim, dim_v, splits=splits, pack_gqa=pack, varlen=offsets,
                        cache=cache, keep=(cu_q, cu_k, used, table, used_q, k_new, v_new, cu_new),
                        elements=elements)


def _new_keys(torch, new_keys, q, heads_kv, dim, dim_v, batch, used):
    """Packed new keys checked: ([1, total_new, heads_kv, d] views of k_new
    and v_new, cu_seqlens_k_new). They are written into the cache in place,
    so the head dims must need no padding."""
    k_new, v_new, cu_new = new_keys
    if used is None:
        raise _fail(ValueError, "k/v need cache_seqlens: they are written at each sequence's "
                                "cache_seqlens")
    for name, t, d in (("k", k_new, dim), ("v", v_new, dim_v)):
        check_tensor(torch, _fail, name, t, 3, q.device)
        if t.dtype != q.dtype:
            raise _fail(TypeError, f"{name} is {t.dtype} but q is {q.dtype}")
        if t.shape[1:] != (heads_kv, d) or t.shape[0] != k_new.shape[0]:
            raise _fail(ValueError, f"{name} has shape {tuple(t.shape)}, expected "
                                    f"[total_new, {heads_kv}, {d}] (packed new keys)")
    if dim % 8 or dim_v % 8:
        raise _fail(ValueError, f"head dims ({dim}, {dim_v}) must be multiples of 8 to append "
                                f"into the cache: it is written in place, so it cannot be "
                                f"padded")
    cu_new = _offsets(torch, "cu_seqlens_k_new", cu_new, batch, q.device)
    if k_new.shape[0] == 0:
        return None, None, None  # nothing to append
    return prepare(torch, k_new.unsqueeze(0), 0), prepare(torch, v_new.unsqueeze(0), 0), cu_new
