"""flashjit.quantize_fp8: e4m3 inputs and their descales for flashjit's fp8
calls, from 16-bit or fp32 tensors.

    q8, k8, v8, qd, kd, vd = flashjit.quantize_fp8(q, k, v)
    out = flashjit.attention(q8, k8, v8, q_descale=qd, k_descale=kd, v_descale=vd)

per="head" gives each (batch, KV head) its own factor, as FlashAttention-3's
contract: the amax over the sequence, the head dim and (for Q) the query
heads that share the KV head, descale = amax / 448 (the largest e4m3 value),
so the group's largest magnitude lands on 448. per="tensor" gives one factor
a tensor.

rotate=True is FlashAttention-3's incoherent processing: Q and K are first
multiplied along the head dim by one random orthogonal matrix per KV head
(shared by its query heads), R = H diag(s) with H the normalised
Walsh-Hadamard matrix and s random signs, so Q K^T is unchanged while an
outlier coordinate is spread over the whole head dim (and the amax, hence
the rounding step, shrinks). Where the head dim is not a power of two, R is
block-diagonal over its largest power-of-two divisor (192 = 3 x 64). V is
not rotated: the output is unchanged.
"""

E4M3_MAX = 448.0  # the largest finite float8_e4m3fn value, 1.75 * 2^8

_FLOAT_DTYPES = ("bfloat16", "float16", "float32", "float64")


def _check(torch, name, t, heads_kv=None):
    if not isinstance(t, torch.Tensor) or t.dim() != 4:
        raise ValueError(f"flashjit.quantize_fp8: {name} must be a 4-D tensor [batch, seqlen, "
                         f"heads, head_dim], got "
                         f"{tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__}")
    if t.dtype not in tuple(getattr(torch, d) for d in _FLOAT_DTYPES):
        raise TypeError(f"flashjit.quantize_fp8: {name} must be bf16, fp16, fp32 or fp64, got "
                        f"{t.dtype}")


def hadamard_block(dim):
    """The power-of-two block of the rotation of head dim `dim`: its largest
    power-of-two divisor."""
    return dim & -dim


def _hadamard(torch, n, dtype, device):
    """The normalised n x n Walsh-Hadamard matrix (Sylvester's construction),
    orthogonal and symmetric."""
    h = torch.ones((1, 1), dtype=torch.float64)
    while h.shape[0] < n:
        h = torch.cat((torch.cat((h, h), 1), torch.cat((h, -h), 1)), 0)
    return (h / n ** 0.5).to(dtype=dtype, device=device)


def rotation_signs(torch, heads_kv, dim, seed=0):
    """The random signs s of R = H diag(s), one row of `dim` per KV head
    (float64 on the CPU, from a torch.Generator seeded with `seed`)."""
    generator = torch.Generator().manual_seed(int(seed))
    bits = torch.randint(0, 2, (heads_kv, dim), generator=generator, dtype=torch.int64)
    return (1 - 2 * bits).to(torch.float64)


def rotate_heads(torch, x, heads_kv, seed=0):
    """x [batch, seqlen, heads, d] times each KV head's R along d (heads a
    multiple of heads_kv; query head h uses KV head h // (heads / heads_kv)),
    in float64 for float64 x, else float32 (the result's dtype)."""
    batch, seqlen, heads, dim = x.shape
    dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    block = hadamard_block(dim)
    signs = rotation_signs(torch, heads_kv, dim, seed).to(dtype=dtype, device=x.device)
    h = _hadamard(torch, block, dtype, x.device)
    group = heads // heads_kv
    y = x.to(dtype).reshape(batch, seqlen, heads_kv, group, dim) * signs.view(1, 1, heads_kv, 1,
                                                                              dim)
    # Row vector times H diag(s): the signs first, then H (symmetric) per block.
    y = y.reshape(batch, seqlen, heads_kv, group, dim // block, block) @ h
    return y.reshape(batch, seqlen, heads, dim)


def _descales(torch, x, heads_kv, per):
    """float32 descales of x (float32 or float64 values): [batch, heads_kv]
    per head, [1] per tensor; amax / 448, 1 where the amax is 0."""
    if per == "tensor":
        amax = x.abs().amax().reshape(1)
    else:
        batch, seqlen, heads, dim = x.shape
        grouped = x.reshape(batch, seqlen, heads_kv, heads // heads_kv, dim)
        amax = grouped.abs().amax(dim=(1, 3, 4))
    amax = amax.to(torch.float32)
    return torch.where(amax > 0, amax / E4M3_MAX, torch.ones_like(amax))


def _encode(torch, x, descale, heads_kv):
    """x / descale as float8_e4m3fn (round to nearest even, clamped to +-448)."""
    if descale.numel() == 1:
        scaled = x / descale.to(x.dtype)
    else:
        batch, seqlen, heads, dim = x.shape
        factors = descale.to(x.dtype).view(batch, 1, heads_kv, 1, 1)
        scaled = (x.reshape(batch, seqlen, heads_kv, heads // heads_kv, dim) / factors).reshape(
            x.shape)
    return scaled.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)


def quantize_fp8(q, k, v, per="head", rotate=False, seed=0):
    """(q8, k8, v8, q_descale, k_descale, v_descale): q, k, v as
    float8_e4m3fn and their float32 descales (real = code * descale), ready
    for flashjit.attention's fp8 call.

    q: [batch, seqlen_q, heads_q, d]; k: [batch, seqlen_k, heads_kv, d]; v:
        [batch, seqlen_k, heads_kv, d_v]; bf16, fp16, fp32 (or fp64), on any
        device (CPU or CUDA); heads_q a multiple of heads_kv.
    per: "head": descales [batch, heads_kv], each the amax of its (batch,
        KV head) group (Q's over the group's query heads too) / 448;
        "tensor": one-element descales. An all-zero group's descale is 1.
    rotate: multiply Q and K by a random orthogonal matrix per KV head first
        (Walsh-Hadamard times random signs; Q K^T unchanged, V untouched),
        which spreads outliers and lowers the quantization error.
    seed: the rotation's torch.Generator seed (the same seed, the same
        rotation).
    """
    import torch

    if per not in ("head", "tensor"):
        raise ValueError(f"flashjit.quantize_fp8: per must be 'head' or 'tensor', got {per!r}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        _check(torch, name, t)
    heads_q, heads_kv = q.shape[2], k.shape[2]
    if heads_kv == 0 or heads_q % heads_kv or v.shape[2] != heads_kv:
        raise ValueError(f"flashjit.quantize_fp8: heads_q ({heads_q}) must be a multiple of "
                         f"heads_kv ({heads_kv}), and v must have heads_kv heads (got "
                         f"{v.shape[2]})")
    if q.shape[0] != k.shape[0] or k.shape[:3] != v.shape[:3] or q.shape[3] != k.shape[3]:
        raise ValueError(f"flashjit.quantize_fp8: q {tuple(q.shape)}, k {tuple(k.shape)} and v "
                         f"{tuple(v.shape)} must agree in batch (and k, v in seqlen and heads; "
                         f"q, k in head_dim)")

    def wide(t):
        return t.to(torch.float64 if t.dtype == torch.float64 else torch.float32)

    if rotate:
        qw, kw = (rotate_heads(torch, t, heads_kv, seed) for t in (q, k))
    else:
        qw, kw = wide(q), wide(k)
    vw = wide(v)
    out = []
    descales = []
    for x in (qw, kw, vw):
        descale = _descales(torch, x, heads_kv, per)
        out.append(_encode(torch, x, descale, heads_kv))
        descales.append(descale)
    return (*out, *descales)
