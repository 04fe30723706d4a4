"""The warm-call cache of flashjit.attention's inference forward: a repeated
call as cheap as SDPA's.

A call's validation, its ctypes problem and argument block (strides
included), its config and its output shapes depend only on the tensors'
shapes, strides, dtypes and devices and on the keyword arguments. The first
call of such a key takes the full path (dense.prepare_call, _launch.forward)
and, when the call needs nothing per call besides pointers (no
head-dim padding, inputs the kernel can read as they are, no poisoning),
stores an entry here. A later call with the same key builds the key, checks
the pointers' alignment, allocates the outputs, writes the five pointers
into its thread's copy of the argument block and calls the library, which
finds its resolved kernel behind one more key lookup (its warm-class cache).

Entries are per thread: the argument block is written before each call and
ctypes releases the GIL during it, so threads must not share one.
"""
import ctypes
import os
import threading

from . import _capi

# Entries per thread; a model has a handful of attention shapes, a benchmark
# sweep a few hundred. Cleared when full rather than evicted one by one.
_MAX_ENTRIES = 1024

_local = threading.local()
# Calls served from an entry, all threads (for the tests: a cache that never
# hits would pass every output check).
served = 0


class Entry:
    __slots__ = ("problem_ref", "args", "args_ref", "config_ref", "out_shape", "lse_shape",
                 "device", "forward")

    def __init__(self, call, args, config, out_shape, device):
        p = call.problem
        self.problem_ref = ctypes.byref(p)
        self.args = args
        self.args_ref = ctypes.byref(args)
        self.config_ref = ctypes.byref(config) if config is not None else None
        self.out_shape = out_shape
        self.lse_shape = (p.batch, p.heads_q, p.seqlen_q)
        self.device = device
        self.forward = _capi.lib().flashjit_forward


def _entries():
    try:
        return _local.entries
    except AttributeError:
        _local.entries = {}
        return _local.entries


def _environment_reader(name):
    """A reader of $name that is cheap when it is unset: os.environ.get goes
    through Mapping.get, which raises and catches KeyError (~1 us, a tenth of
    a warm call). os.environ's own bytes-keyed dict is read where it exists
    (POSIX); it is the dict that os.environ writes through to."""
    data = getattr(os.environ, "_data", None)
    if isinstance(data, dict) and os.name == "posix":
        encoded = name.encode()

        def read():
            value = data.get(encoded)
            return None if value is None else value.decode(errors="replace")
        return read
    return lambda: os.environ.get(name)


# $FLASHJIT_KERNEL_PATH pins the forward's family (_launch.forward_config);
# part of the key, since benchmarks change it between calls.
_kernel_path = _environment_reader("FLASHJIT_KERNEL_PATH")


def serve(torch, q, k, v, causal, window, softcap, softmax_scale, num_splits, pack_gqa,
          deterministic, want_lse):
    """(key, result): the call's key (None when it has none: an argument that
    is not a tensor; the full path then reports what is wrong) and, when an
    entry of that key served the call, (out, lse); else None. The types of
    causal, num_splits, pack_gqa and deterministic are part of the key so
    that values equal across types (causal=1 and True, num_splits=2.0 and 2,
    pack_gqa=1 and True) do not share an entry validated for only one of
    them: the full path refuses the wrong type by name."""
    try:
        call_key = (q.shape, q.stride(), q.dtype, q.get_device(), k.shape, k.stride(), k.dtype,
                    k.get_device(), v.shape, v.stride(), v.dtype, v.get_device(), causal,
                    type(causal), window, softcap, softmax_scale, num_splits, type(num_splits),
                    pack_gqa, type(pack_gqa), deterministic, type(deterministic),
                    _kernel_path())
        entry = _entries().get(call_key)
    except (AttributeError, TypeError):  # not tensors; an unhashable window
        return None, None
    if entry is None:
        return call_key, None
    return call_key, _run(entry, torch, q, k, v, want_lse)


def store(call_key, call, strides, config, device):
    """Remembers a call that the full path served with q, k, v as they are;
    strides: the kernel strides (batch, seq, head) of q, k and v."""
    if call_key is None:
        return
    entries = _entries()
    try:
        if call_key in entries:  # a warm key whose call needed the full path (pointers, device)
            return
    except TypeError:  # an unhashable argument
        return
    args = _capi.ForwardArgs()
    for name, (b, s, h) in zip(("q", "k", "v"), strides):
        setattr(args, f"{name}_stride_batch", b)
        setattr(args, f"{name}_stride_seq", s)
        setattr(args, f"{name}_stride_head", h)
    p = call.problem
    out_shape = (p.batch, p.seqlen_q, p.heads_q, p.head_dim_v)
    # The output is allocated packed: its strides follow from its shape.
    args.o_stride_batch = p.seqlen_q * p.heads_q * p.head_dim_v
    args.o_stride_seq = p.heads_q * p.head_dim_v
    args.o_stride_head = p.head_dim_v
    if len(entries) >= _MAX_ENTRIES:
        entries.clear()
    entries[call_key] = Entry(call, args, config, out_shape, device)


def _run(entry, torch, q, k, v, want_lse):
    """The forward of a stored call: (out, lse) or None when this call's
    pointers or current device need the full path."""
    qp, kp, vp = q.data_ptr(), k.data_ptr(), v.data_ptr()
    if (qp | kp | vp) & 15:
        return None
    if torch._C._cuda_getDevice() != entry.device:
        return None  # the full path switches to the tensors' device
    out = q.new_empty(entry.out_shape)
    lse = q.new_empty(entry.lse_shape, dtype=torch.float32) if want_lse else None
    args = entry.args
    args.q, args.k, args.v = qp, kp, vp
    args.o = out.data_ptr()
    args.lse = lse.data_ptr() if lse is not None else None
    stream = torch._C._cuda_getCurrentRawStream(entry.device)
    if entry.forward(entry.problem_ref, entry.args_ref, stream, entry.config_ref) != 0:
        raise RuntimeError(f"flashjit.attention: {_capi.last_error()}")
    global served
    served += 1
    return out, lse
