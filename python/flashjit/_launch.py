"""The call path every entry point shares (dense.py, varlen.py, kvcache.py):
an entry point checks its arguments (_checks.py) and describes the call as a
`Call` (the C problem and the extra argument blocks of its kind); `forward`
and `backward` then allocate the outputs, fill the argument block with the
tensors' pointers and strides, and make the C call on the tensors' device
and its current stream.

The C entry point follows from the extra blocks, as flashjit.h names them:
flashjit_forward[_varlen][_kvcache][_modified] and
flashjit_backward[_varlen][_modified], each taking (problem, args, the
blocks in that order, stream, config).

Set FLASHJIT_POISON_OUTPUT=1 (read at import) to fill outputs (and
gradients, and the backward's workspace) with NaN before each launch, so
that a kernel that leaves elements unwritten is caught.
"""
import ctypes
import os

from . import _capi
from ._layout import grad_buffer, kernel_strides, prepare, row_strides, unpad

# Read by each call (a test switches it off around the warm-call cache).
POISON_OUTPUT = os.environ.get("FLASHJIT_POISON_OUTPUT", "") not in ("", "0")

_PATHS = {"auto": _capi.PATH_AUTO, "sm80": _capi.PATH_SM80, "sm90": _capi.PATH_SM90}


def pinned_config(variable):
    """$FLASHJIT_KERNEL_PATH (forward) and $FLASHJIT_BACKWARD_PATH (backward)
    = auto|sm80|sm90 pin a pass's kernel family (benchmarks compare the
    families); unset, the library chooses."""
    path = os.environ.get(variable)
    if not path:
        return None
    if path not in _PATHS:
        raise ValueError(f"{variable}={path!r}: expected one of {sorted(_PATHS)}")
    return _capi.Config(path=_PATHS[path])


def forward_config(splits, pack_gqa):
    """The forward's flashjit_config: $FLASHJIT_KERNEL_PATH's family and the
    call's split-KV and GQA-packing choices; None (the library chooses
    everything) when none of them is set."""
    config = pinned_config("FLASHJIT_KERNEL_PATH")
    if splits == 0 and pack_gqa == _capi.PACK_GQA_AUTO:
        return config
    if config is None:
        config = _capi.Config()
    config.splits, config.pack_gqa = splits, pack_gqa
    return config


def backward_config(deterministic):
    """The backward's flashjit_config: $FLASHJIT_BACKWARD_PATH's family and the
    call's deterministic mode; None (the library chooses everything) when
    neither is set."""
    config = pinned_config("FLASHJIT_BACKWARD_PATH")
    if not deterministic:
        return config
    if config is None:
        config = _capi.Config()
    config.deterministic = 1
    return config


def padded_problem(dtype, batch, heads_q, heads_kv, seqlen_q, seqlen_k, dim_qk, dim_v, options,
                   elements=None, **fields):
    """The flashjit_problem of a checked call, its head dims padded to
    16-byte rows (multiples of 8 16-bit elements, of 16 e4m3 ones: the
    kernels' 16-byte loads); options: the mask and score fields of
    _checks.attention_options; elements: the call's _checks.Elements (None:
    16-bit throughout); fields: the rest (page_size, seqused_k, varlen)."""
    fp8 = dtype == _capi.E4M3 or (elements is not None and elements.kv_dtype == _capi.KV_E4M3)
    multiple = 16 if fp8 else 8
    if elements is not None:
        fields.update(elements.fields())
    return _capi.Problem(dtype=dtype, batch=batch, heads_q=heads_q, heads_kv=heads_kv,
                         seqlen_q=seqlen_q, seqlen_k=seqlen_k,
                         head_dim_qk=dim_qk + (-dim_qk % multiple),
                         head_dim_v=dim_v + (-dim_v % multiple), **options, **fields)


def _pointer(t):
    return t.data_ptr() if t is not None else None


def varlen_args(cu_seqlens_q, cu_seqlens_k, total_q, total_k, seqused_q=None, seqused_k=None):
    """The flashjit_varlen_args of a packed batch (cu_seqlens_k may be None:
    over a paged cache the key counts can come from seqused_k alone;
    seqused_q: the queries each sequence uses, or None: all; seqused_k: the
    backward's key counts, the forward's cache_seqlens, or None)."""
    return _capi.VarlenArgs(_pointer(cu_seqlens_q), _pointer(cu_seqlens_k), total_q, total_k,
                            _pointer(seqused_q), _pointer(seqused_k))


def kvcache_args(cache_seqlens, block_table, table_stride, num_pages, k_new=None, v_new=None,
                 cache_batch_idx=None, cache_batches=0, cache_leftpad=None,
                 cu_seqlens_k_new=None):
    """The flashjit_kvcache_args of a call over a KV cache: each sequence's
    key count (or None: the whole cache), the page table (or None: a
    contiguous cache) with its row stride and the number of pages, this
    step's keys and values to append (kernel-ready [batch, seqlen_new,
    heads_kv, d], or None), and a contiguous cache's placement of the
    sequences (int32 [batch] entries of its cache_batches, and start rows;
    None: entry b, row 0). A packed batch's new keys: k_new/v_new the
    [1, total_new, heads_kv, d] view of its packed rows and
    cu_seqlens_k_new (int32 [batch + 1]) each sequence's first."""
    strides = row_strides if cu_seqlens_k_new is not None else kernel_strides
    return _capi.KvCacheArgs(
        _pointer(cache_seqlens), _pointer(block_table), table_stride, num_pages,
        _pointer(k_new), _pointer(v_new), k_new.shape[1] if k_new is not None else 0,
        *(strides(k_new) if k_new is not None else (0, 0, 0)),
        *(strides(v_new) if v_new is not None else (0, 0, 0)),
        _pointer(cache_batch_idx), cache_batches if cache_batch_idx is not None else 0,
        _pointer(cache_leftpad), _pointer(cu_seqlens_k_new))


class Call:
    """One checked call: its C problem and what its forward and backward
    share. varlen / cache / modifiers: the extra argument blocks
    (flashjit_varlen_args, flashjit_kvcache_args, flashjit_modifiers) or
    None; keep: what those blocks point into, alive as long as the call;
    sinks: the learned sinks as the kernels read them (float32 [heads_q],
    contiguous) or None; empty: no query, or no key for any (O = 0, LSE =
    +inf, no launch); elements: the element types and descales
    (_checks.Elements) or None for a 16-bit call; config: the forward's
    flashjit_config (splits, pack_gqa); deterministic: whether the backward
    runs its deterministic mode."""
    __slots__ = ("name", "problem", "dim_qk", "dim_v", "pad_qk", "pad_v", "empty", "config",
                 "varlen", "cache", "modifiers", "sinks", "keep", "elements", "deterministic")

    def __init__(self, name, problem, dim_qk, dim_v, empty=False, splits=0,
                 pack_gqa=_capi.PACK_GQA_AUTO, varlen=None, cache=None, keep=(), elements=None,
                 deterministic=False):
        self.name, self.problem, self.dim_qk, self.dim_v = name, problem, dim_qk, dim_v
        self.pad_qk, self.pad_v = problem.head_dim_qk - dim_qk, problem.head_dim_v - dim_v
        self.empty = empty
        self.config = forward_config(splits, pack_gqa)
        self.varlen, self.cache, self.modifiers = varlen, cache, None
        self.sinks = None
        self.keep = keep
        self.elements = elements
        self.deterministic = deterministic

    @property
    def fp8(self):
        """Whether any input is e4m3 (no backward, no warm-call entry)."""
        return self.elements is not None and self.elements.fp8

    def out_dtype(self, q):
        """The output's torch dtype: the fp8 call's out_dtype, else q's."""
        return self.elements.out_torch_dtype if self.elements is not None else q.dtype

    def descale_fields(self):
        """flashjit_forward_args' descale pointers and strides."""
        if not self.fp8:
            return (None, None, None, 0, 0)
        return (*(_pointer(t) for t in self.elements.descales), *self.elements.strides)

    def strides(self, t, of_keys):
        """A tensor's kernel strides: a varlen call's packed rows have no
        batch stride, but a paged cache's pages do."""
        packed = self.varlen is not None and not (of_keys and self.problem.page_size)
        return row_strides(t) if packed else kernel_strides(t)

    def blocks(self, backward):
        """(the C entry point's name, its extra argument blocks)."""
        name = "flashjit_backward" if backward else "flashjit_forward"
        blocks = []
        # The backward takes no cache block: a differentiable packed batch's
        # key counts ride in its varlen block.
        for suffix, block in (("_varlen", self.varlen),
                              ("_kvcache", None if backward else self.cache),
                              ("_modified", self.modifiers)):
            if block is not None:
                name += suffix
                blocks.append(block)
        return name, blocks


def entry_point(who, symbol):
    """The library's function `symbol`, or a RuntimeError for a library built
    before it."""
    function = getattr(_capi.lib(), symbol, None)
    if function is None:
        raise RuntimeError(f"{who}: the loaded libflashjit.so has no {symbol} (built before "
                           f"it); rebuild it")
    return function


def run(torch, device, who, symbol, problem, args, blocks, config):
    """The C call symbol(problem, args, *blocks, stream, config) on the current
    stream of `device`; raises RuntimeError with the library's message."""
    function = entry_point(who, symbol)
    # The library launches into the current context (PyTorch's primary
    # context of the current device): make that the tensors' device.
    with torch.cuda.device(device):
        stream = torch.cuda.current_stream(device).cuda_stream
        rc = function(ctypes.byref(problem), ctypes.byref(args),
                      *(ctypes.byref(b) for b in blocks), ctypes.c_void_p(stream),
                      ctypes.byref(config) if config is not None else None)
    if rc != 0:
        raise RuntimeError(f"{who}: {_capi.last_error()}")


def forward(torch, call, q, k, v, want_lse):
    """Runs the forward. Returns (out, lse, qp, kp, vp): out [b, sq, hq, dv +
    pad_v] (padded; the caller slices), lse [b, hq, sq] fp32 or None, and
    the (padded) inputs the kernel read. q, k, v: [b, s, h, d]; a varlen
    call passes its packed tensors as [1, total, h, d] views."""
    p = call.problem
    batch, seqlen_q, heads_q = q.shape[:3]
    out = torch.empty((batch, seqlen_q, heads_q, p.head_dim_v), dtype=call.out_dtype(q),
                      device=q.device)
    lse = (torch.empty((batch, heads_q, seqlen_q), dtype=torch.float32, device=q.device)
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

    qp, kp, vp = (prepare(torch, q, call.pad_qk), prepare(torch, k, call.pad_qk),
                  prepare(torch, v, call.pad_v))
    if POISON_OUTPUT:
        out.fill_(float("nan"))
        if lse is not None:
            lse.fill_(float("nan"))
    args = _capi.ForwardArgs(
        qp.data_ptr(), kp.data_ptr(), vp.data_ptr(), out.data_ptr(),
        lse.data_ptr() if lse is not None else None,
        *call.strides(qp, False), *call.strides(kp, True), *call.strides(vp, True),
        *call.strides(out, False), *call.descale_fields())
    symbol, blocks = call.blocks(backward=False)
    run(torch, q.device, call.name, symbol, p, args, blocks, call.config)
    return out, lse, qp, kp, vp


def _workspace(torch, call, who, device):
    """The backward's workspace, 16-byte aligned: (tensor, pointer, bytes)."""
    lib = _capi.lib()
    p = ctypes.byref(call.problem)
    nbytes = int(lib.flashjit_backward_varlen_workspace_bytes(p, call.varlen.total_q)
                 if call.varlen is not None else lib.flashjit_backward_workspace_bytes(p))
    if nbytes == 0:
        raise RuntimeError(f"{who}: {_capi.last_error() or 'invalid sizes'}")
    workspace = torch.empty(nbytes, dtype=torch.uint8, device=device)
    pointer = workspace.data_ptr()
    if pointer % 16:  # the caching allocator gives 512-byte alignment; be sure anyway
        workspace = torch.empty(nbytes + 16, dtype=torch.uint8, device=device)
        pointer = workspace.data_ptr() + (-workspace.data_ptr() % 16)
    return workspace, pointer, nbytes


def backward(torch, call, dout, qp, kp, vp, out, lse):
    """(dq, dk, dv, dsinks) of the forward that read qp, kp, vp (padded) and
    wrote out (padded) and lse: the gradients without the head dims' padding,
    and d sinks (float32 [heads_q]) for a call with learned sinks, else None.
    dout: the unpadded [b, sq, hq, dv] gradient of the output (a varlen
    call's as its [1, total, h, dv] view)."""
    who = call.name + " backward"
    symbol, blocks = call.blocks(backward=True)
    entry_point(who, symbol)  # before any allocation: an old library says so at once
    # Zeros in the extra columns of dO: D = rowsum(dO * O) and dP = dO V^T are
    # unchanged, and the extra columns of dV come out 0 (dropped anyway).
    dout = prepare(torch, dout, call.pad_v)
    dq, dk, dv = grad_buffer(torch, qp), grad_buffer(torch, kp), grad_buffer(torch, vp)
    workspace, ws_ptr, nbytes = _workspace(torch, call, who, qp.device)
    dsinks = None
    if call.sinks is not None:
        dsinks = torch.empty_like(call.sinks)
        call.modifiers.dsinks = dsinks.data_ptr()
    if POISON_OUTPUT:
        for t in (dq, dk, dv) + ((dsinks,) if dsinks is not None else ()):
            t.fill_(float("nan"))
        workspace.fill_(0xFF)  # NaN as fp32: an accumulator that is not zeroed shows
    # Rows a packed batch leaves unused (past seqused_q / seqused_k) are
    # never written by the kernels: their gradient is 0, not whatever the
    # buffer held (FlashAttention-3 leaves them unspecified).
    if call.varlen is not None and call.varlen.seqused_q:
        dq.zero_()
    if call.varlen is not None and call.varlen.seqused_k:
        dk.zero_()
        dv.zero_()

    args = _capi.BackwardArgs(
        qp.data_ptr(), kp.data_ptr(), vp.data_ptr(), out.data_ptr(), dout.data_ptr(),
        lse.data_ptr(), dq.data_ptr(), dk.data_ptr(), dv.data_ptr(),
        *call.strides(qp, False), *call.strides(kp, True), *call.strides(vp, True),
        *call.strides(out, False), *call.strides(dout, False),
        *call.strides(dq, False), *call.strides(dk, True), *call.strides(dv, True),
        ws_ptr, nbytes)
    run(torch, qp.device, who, symbol, call.problem, args, blocks,
        backward_config(call.deterministic))
    # The workspace and dout are freed when this returns: the caching
    # allocator reuses their blocks only in stream order on this stream, after
    # the kernels above.
    return (unpad(dq, call.dim_qk), unpad(dk, call.dim_qk), unpad(dv, call.dim_v), dsinks)
