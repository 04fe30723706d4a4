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


def describe(torch, t):
    """What `t` is, for a message: dtype and shape of a tensor, else its type."""
    if isinstance(t, torch.Tensor):
        return f"a {t.dtype} tensor of shape {tuple(t.shape)}"
    return type(t).__name__


def int32_vector(torch, fail, name, t, length, device, batch_from):
    """`t` as a contiguous 1-D int32 tensor of `length` (the batch, which
    `batch_from` names) entries on q's device."""
    if not isinstance(t, torch.Tensor) or t.dtype != torch.int32 or t.dim() != 1:
        raise fail(TypeError, f"{name} must be an int32 tensor of shape [batch] ([{length}]), "
                              f"got {describe(torch, t)}")
    if t.shape[0] != length:
        raise fail(ValueError, f"{name} has {t.shape[0]} entries, expected batch = {batch_from} "
                               f"= {length}")
    if t.device != device:
        raise fail(ValueError, f"{name} is on {t.device} but q is on {device}")
    return t.contiguous()


def block_table(torch, fail, t, batch, device, batch_from):
    """block_table checked: (the int32 [batch, pages_per_seq] table with a
    contiguous last dim, its row stride in elements)."""
    if not isinstance(t, torch.Tensor) or t.dtype != torch.int32 or t.dim() != 2:
        raise fail(TypeError, f"block_table must be an int32 tensor of shape [batch, "
                              f"pages_per_seq], got {describe(torch, t)}")
    if t.shape[0] != batch:
        raise fail(ValueError, f"block_table has {t.shape[0]} rows, expected batch = "
                               f"{batch_from} = {batch}")
    if t.device != device:
        raise fail(ValueError, f"block_table is on {t.device} but q is on {device}")
    width = t.shape[1]
    # Rows must not overlap (a broadcast table has row stride 0): the kernel
    # reads row b at b * stride.
    if t.stride(1) != 1 or (batch > 1 and t.stride(0) < width):
        t = t.contiguous()
    return t, (t.stride(0) if batch > 1 else max(width, 1))
