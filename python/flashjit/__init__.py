"""flashjit: JIT-compiled FlashAttention kernels, called on PyTorch tensors.

    import torch, flashjit
    q = torch.randn(2, 4096, 16, 128, device="cuda", dtype=torch.bfloat16)
    k, v = torch.randn_like(q), torch.randn_like(q)
    out = flashjit.attention(q, k, v, causal=True)             # [2, 4096, 16, 128]
    out, lse = flashjit.attention(q, k, v, return_lse=True)    # lse: [2, 16, 4096] fp32
    out = flashjit.attention(q, k, v, num_splits=4, pack_gqa=True)  # decode knobs

fp8 (e4m3) on Hopper, forward only: quantize_fp8 gives float8_e4m3fn tensors
and their fp32 descales (per (batch, KV head), or per tensor):

    q8, k8, v8, qd, kd, vd = flashjit.quantize_fp8(q, k, v, rotate=True)
    out = flashjit.attention(q8, k8, v8, q_descale=qd, k_descale=kd, v_descale=vd)  # bf16

The same contract as flash_attn.flash_attn_func, differentiable: when grad
mode is on and q, k or v requires grad, the call goes through a
torch.autograd.Function whose backward runs flashjit_backward (recomputing the
probabilities from the saved O and log-sum-exp; P is never stored):

    q.requires_grad_(); out = flashjit.attention(q, k, v, causal=True)
    out.backward(dout)                                          # q.grad, ...
    out = flashjit.attention(q, k, v, deterministic=True)       # bit-identical grads

The binding is pure Python over the C API (include/flashjit/flashjit.h) through
ctypes. libflashjit.so is found through $FLASHJIT_LIB (the file or its
folder), else inside the package (`pip install .` puts it there), else
<repo>/build*/libflashjit.so, else <repo>/.device/lib. It loads when flashjit
is imported, and NVRTC with it on a thread of its own (so that a first call
served from the database does not wait for NVRTC): set FLASHJIT_LIB,
FLASHJIT_NVRTC and CUDA_HOME before the import.

The first call for a problem class (dtype, head dims, mask kind, softcap, GPU)
compiles its kernel; later calls, for any batch, heads or sequence lengths,
reuse it.

Set FLASHJIT_POISON_OUTPUT=1 (read at import) to fill outputs (and gradients,
and the backward's workspace) with NaN before each launch, so that a kernel
that leaves elements unwritten is caught.

The modules: dense.py (attention), varlen.py (attention_varlen), kvcache.py
(attention_with_kvcache; rotary.py its rotary embedding), autograd.py (their
torch.autograd.Functions),
modifiers.py and mods.py (score and mask modifiers, block masks), fp8.py
(quantize_fp8), ops.py (torch.library custom ops for torch.compile),
service.py (query, tune, precompile), flash_attn_interface.py (FlashAttention-3's
flash_attn_func, flash_attn_varlen_func and flash_attn_with_kvcache, names
and defaults as FA3's, over these), integrations/ (flashjit behind other
libraries, each imported only on request: integrations/transformers.py),
context_parallel/ (ring attention over torch.distributed, imported on
request as flashjit.distributed or flashjit.context_parallel);
below them the call path they share: _checks.py (argument checks),
_launch.py (the C problem, argument blocks and call), _layout.py (strides
and copies), _warm.py (the warm-call cache), _capi.py (the ctypes mirror of
flashjit.h).
"""
import sys

from . import mods  # noqa: F401  (flashjit.mods: the shipped modifiers)
from ._capi import LibraryNotFound, compile_count, runtime_stats, version
from .dense import attention
from .fp8 import quantize_fp8
from .kvcache import attention_with_kvcache
from .modifiers import BlockMask, create_block_mask
from .service import FlashjitCommandError, precompile, query, tune
from .varlen import attention_varlen

__all__ = ["attention", "attention_varlen", "attention_with_kvcache", "compile_count",
           "runtime_stats", "version", "LibraryNotFound", "query", "tune", "precompile",
           "FlashjitCommandError", "create_block_mask", "BlockMask", "quantize_fp8"]

# torch.compile traces the custom ops of ops.py (torch >= 2.4). With torch
# imported already they are registered now, not mid-trace; else the first
# traced call registers them (or import flashjit.ops before compiling).
if "torch" in sys.modules:
    try:
        from . import ops  # noqa: F401
    except (AttributeError, ImportError):  # torch < 2.4: no custom_op; eager calls still work
        pass

# The library loads at import, and NVRTC on a thread of its own while the
# caller sets up (its CUDA context, its model): a first call's cubin key names
# NVRTC's version, and NVRTC takes ~10 ms to load, which a first call served
# from the database would otherwise wait for. A fork waits for that load.
from . import _capi  # noqa: E402
_capi.preload()
