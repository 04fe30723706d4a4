"""Argument checks shared by the entry points over packed or cached tensors
(kvcache.py, varlen.py); `fail(kind, message)` builds the entry point's own
exception, named after it."""


def check_tensor(torch, fail, name, t, dims, device=None):
    """`t` is a `dims`-D CUDA tensor (on `device`, q's, when given)."""
    if not isinstance(t, torch.Tensor):
        raise fail(TypeError, f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != dims:
        raise fail(ValueError, f"{name} must be {dims}-D, got shape {tuple(t.shape)}")
    if not t.is_cuda:
        raise fail(ValueError, f"{name} must be a CUDA tensor, got device {t.device}")
    if device is not None and t.device != device:
        raise fail(ValueError, f"{name} is on {t.device} but q is on {device}")


def check_inputs(torch, fail, q, q_dims, others):
    """q and `others` ((name, tensor) pairs, the same rank as q) are CUDA
    tensors on q's device, all bf16 or all fp16; returns q's dtype code."""
    from . import _dtype_code
    check_tensor(torch, fail, "q", q, q_dims)
    for name, t in others:
        check_tensor(torch, fail, name, t, q_dims, q.device)
    dtype = _dtype_code(torch, q.dtype)
    if dtype is None:
        raise fail(TypeError, f"q must be bf16 or fp16, got {q.dtype}")
    for name, t in others:
        if t.dtype != q.dtype:
            raise fail(TypeError, f"{name} is {t.dtype} but q is {q.dtype}")
    return dtype
