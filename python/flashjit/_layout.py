"""Tensor layouts as the kernels read them: the element strides they are
given, what their 16-byte vector loads require, and the copy (or zero
padding of the head dim) that makes a tensor readable."""


def kernel_strides(t):
    """(batch, seq, head) element strides of a [b, s, h, d] tensor. The stride of
    a size-1 dimension is never used by the kernel; PyTorch may give it any
    value, so the packed one is passed instead."""
    b, s, h, d = t.shape
    packed = (s * h * d, h * d, d)
    return tuple(t.stride(i) if t.size(i) != 1 else packed[i] for i in range(3))


def row_strides(t):
    """(0, row, head): the strides of a [1, total, heads, d] view of a packed
    batch, whose sequences the offsets address (no batch stride)."""
    return (0,) + kernel_strides(t)[1:]


def kernel_ready(t):
    """The kernel loads 16-byte vectors: the last dim must be contiguous, the
    other strides multiples of 16 bytes (8 16-bit elements, 16 e4m3 ones)
    and the pointer 16-byte aligned."""
    size = t.element_size()
    return (t.stride(-1) == 1 and t.data_ptr() % 16 == 0
            and all(s * size % 16 == 0 for s in kernel_strides(t)))


def prepare(torch, t, pad):
    """`t` as the kernel reads it: `pad` zero columns appended to the head
    dim, else `t` itself when it is kernel-ready, else a packed copy."""
    if pad:
        # Zeros in the extra columns of q and k leave every score unchanged;
        # the extra columns of v produce output columns that are dropped.
        return torch.nn.functional.pad(t, (0, pad))
    if kernel_ready(t):
        return t
    # Not .contiguous(): a contiguous view at a misaligned offset would come
    # back as it is.
    return t.clone(memory_format=torch.contiguous_format)


def grad_buffer(torch, like):
    """An uninitialised gradient shaped like `like` (a kernel-ready input): its
    layout when that is dense (torch.empty_like keeps it), else packed."""
    g = torch.empty_like(like)
    if not kernel_ready(g):
        g = torch.empty(like.shape, dtype=like.dtype, device=like.device)
    return g


def unpad(t, dim):
    """`t` without the head dim's padding past `dim` columns."""
    return t[..., :dim] if t.shape[-1] != dim else t
