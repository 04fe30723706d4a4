"""Rotary position embedding for flashjit.attention_with_kvcache, with
flash_attn_with_kvcache's arguments: rotary_cos / rotary_sin of shape
[seqlen_ro, rotary_dim / 2] rotate the first rotary_dim columns of q and of
the appended k at their positions in the cache, GPT-NeoX style (the two
halves of those columns) or GPT-J style (interleaved pairs,
rotary_interleaved=True).

Positions: the appended keys of sequence b sit at cache_seqlens[b],
cache_seqlens[b] + 1, ...; so do the queries under a causal or sliding
window mask, while without a mask every query is taken at cache_seqlens[b]
(FlashAttention's convention: the new tokens are one step). The rotation is
computed in fp32 by PyTorch ops before the attention call (traceable by
torch.compile), not fused into the kernel. The table must cover every
rotated position: with cache_seqlens an int (or None) a shorter one is an
error; with a device tensor (not read back: no sync per step) positions
past it take its last row.
"""


def check_rotary(torch, fail, cos, sin, q, dim):
    """Raises TypeError or ValueError naming what is wrong with rotary_cos /
    rotary_sin for q ([batch, seqlen, heads, dim])."""
    if (cos is None) != (sin is None):
        raise fail(ValueError, "rotary_cos and rotary_sin go together: give both or neither")
    for name, t in (("rotary_cos", cos), ("rotary_sin", sin)):
        if not isinstance(t, torch.Tensor):
            raise fail(TypeError, f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 2:
            raise fail(ValueError, f"{name} must be [seqlen_ro, rotary_dim / 2], got shape "
                                   f"{tuple(t.shape)}")
        if t.device != q.device:
            raise fail(ValueError, f"{name} is on {t.device} but q is on {q.device}")
        if not t.is_floating_point():
            raise fail(TypeError, f"{name} must be floating point, got {t.dtype}")
    if cos.shape != sin.shape:
        raise fail(ValueError, f"rotary_cos {tuple(cos.shape)} and rotary_sin "
                               f"{tuple(sin.shape)} must have one shape")
    rotary_dim = 2 * cos.shape[1]
    if rotary_dim == 0 or rotary_dim > dim:
        raise fail(ValueError, f"rotary_cos's {cos.shape[1]} columns rotate {rotary_dim} of the "
                               f"head dim's {dim}: expected 1 to {dim // 2} columns")


def rotary_positions(torch, start, batch, seqlen, device, one_step):
    """[batch, seqlen] int64 positions from each sequence's `start` (an int32
    [batch] tensor, an int, or None for 0): start + i, or start for every i
    when `one_step`."""
    if start is None or isinstance(start, int):
        start = torch.full((batch,), start or 0, dtype=torch.int64, device=device)
    offsets = torch.zeros(seqlen, dtype=torch.int64, device=device) if one_step else \
        torch.arange(seqlen, dtype=torch.int64, device=device)
    return start.to(torch.int64)[:, None] + offsets[None, :]


def apply_rotary(torch, x, cos, sin, positions, interleaved):
    """x [batch, seqlen, heads, dim] with its first 2 * cos.shape[1] columns
    rotated at `positions` ([batch, seqlen]); a new tensor of x's dtype."""
    half = cos.shape[1]
    c = cos.float()[positions][:, :, None, :]  # [batch, seqlen, 1, half]
    s = sin.float()[positions][:, :, None, :]
    rot = x[..., :2 * half].float()
    if interleaved:
        a, b = rot[..., 0::2], rot[..., 1::2]
        out = torch.stack((a * c - b * s, a * s + b * c), dim=-1).flatten(-2)
    else:
        a, b = rot[..., :half], rot[..., half:]
        out = torch.cat((a * c - b * s, a * s + b * c), dim=-1)
    return torch.cat((out.to(x.dtype), x[..., 2 * half:]), dim=-1)


def rotate_step(torch, fail, q, k_new, cos, sin, cache_seqlens, interleaved, masked):
    """(q, k_new) rotated as the module says; k_new may be None."""
    batch, seqlen_q, _, dim = q.shape
    check_rotary(torch, fail, cos, sin, q, dim)
    seqlen_new = k_new.shape[1] if k_new is not None else 0
    if q.dtype not in (torch.bfloat16, torch.float16):
        raise fail(TypeError, f"rotary embedding rotates 16-bit q, got {q.dtype}")
    # Lengths known on the host (an int, or none) are checked against the
    # table; device lengths are not read back (a sync every decode step):
    # their positions are clamped to the table's rows instead, so a short
    # table never reads past itself.
    if cache_seqlens is None or isinstance(cache_seqlens, int):
        last = (cache_seqlens or 0) + max(seqlen_q if masked else 1, seqlen_new) - 1
        if last >= cos.shape[0]:
            raise fail(ValueError, f"rotary_cos has {cos.shape[0]} rows but position {last} is "
                                   f"rotated (cache_seqlens plus this step's tokens): give a "
                                   f"table of at least {last + 1} rows")
    q_pos = rotary_positions(torch, cache_seqlens, batch, seqlen_q, q.device, not masked)
    k_pos = rotary_positions(torch, cache_seqlens, batch, seqlen_new, q.device, False)
    q_pos = q_pos.clamp(max=cos.shape[0] - 1)
    k_pos = k_pos.clamp(max=cos.shape[0] - 1)
    q = apply_rotary(torch, q, cos, sin, q_pos, interleaved)
    if k_new is not None:
        k_new = apply_rotary(torch, k_new, cos, sin, k_pos, interleaved)
    return q, k_new
