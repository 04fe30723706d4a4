"""ring_attention (one sequence over the ranks of a torch.distributed group)
and simulate_ring_attention (the same arithmetic for R virtual ranks in one
process), each a torch.autograd.Function over ring.py's generators."""
from . import comm, ring
from .layout import check_layout, chunks_per_rank

# flashjit.attention's arguments the ring does not carry, refused by name.
_NOT_SUPPORTED = ("window", "score_mod", "mask_mod", "aux", "mask_mod_qk_only", "score_mod_grad",
                  "sinks", "block_mask", "attention_chunk", "q_descale", "k_descale",
                  "v_descale", "out_dtype", "num_splits", "pack_gqa")


def _refuse(who, torch, q, k, v, cu_seqlens, unsupported):
    if cu_seqlens is not None:
        raise NotImplementedError(f"{who}: varlen (cu_seqlens) is not supported yet; pack "
                                  f"the batch into dense [batch, seqlen, heads, dim] shards")
    for name, value in unsupported.items():
        if name not in _NOT_SUPPORTED:
            raise TypeError(f"{who}() got an unexpected keyword argument {name!r}")
        if name == "window" and tuple(value) == (-1, -1):
            continue
        if value is not None and not (name in ("attention_chunk", "num_splits") and value == 0):
            raise NotImplementedError(f"{who}: {name} is not supported over a ring (dense "
                                      f"causal/full attention with softcap only)")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{who}: {name} is not a tensor")
        if t.dim() != 4:
            raise ValueError(f"{who}: {name} has shape {tuple(t.shape)}; expected the rank's "
                             f"shard [batch, seqlen_local, heads, head_dim]")
        if "float8" in str(t.dtype):
            raise NotImplementedError(f"{who}: fp8 ({t.dtype}) is not supported over a ring")
    if not q.dtype == k.dtype == v.dtype:
        raise ValueError(f"{who}: q, k and v have dtypes {q.dtype}, {k.dtype}, {v.dtype}; "
                         f"expected one")
    if not q.shape[1] == k.shape[1] == v.shape[1]:
        raise ValueError(f"{who}: q, k and v shards hold {q.shape[1]}, {k.shape[1]} and "
                         f"{v.shape[1]} positions; a ring needs the same shard of one sequence")


def _check_shard(who, seqlen, layout):
    per = chunks_per_rank(layout)
    if seqlen == 0 or seqlen % per:
        raise ValueError(f"{who}: a shard of {seqlen} positions; layout {layout!r} needs a "
                         f"positive multiple of {per}")


_functions = {}


def _ring_function(torch):
    if "ring" in _functions:
        return _functions["ring"]
    from torch.autograd.function import once_differentiable

    class RingAttention(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, p2p, options):
            out, lse = comm.run(ring.forward_steps(torch, p2p.rank, p2p.world, q, k, v,
                                                   *options[:4]), p2p)
            ctx.save_for_backward(q, k, v, out, lse)
            ctx.p2p, ctx.options = p2p, options
            ctx.mark_non_differentiable(lse)
            return out, lse

        @staticmethod
        @once_differentiable
        def backward(ctx, dout, _dlse):
            q, k, v, out, lse = ctx.saved_tensors
            p2p = ctx.p2p
            dq, dk, dv = comm.run(ring.backward_steps(torch, p2p.rank, p2p.world, dout, q, k, v,
                                                      out, lse, *ctx.options), p2p)
            return dq, dk, dv, None, None

    _functions["ring"] = RingAttention
    return RingAttention


def _simulated_function(torch):
    if "simulated" in _functions:
        return _functions["simulated"]
    from torch.autograd.function import once_differentiable

    class SimulatedRingAttention(torch.autograd.Function):
        @staticmethod
        def forward(ctx, options, *qkv):
            world = len(qkv) // 3
            qs, ks, vs = qkv[:world], qkv[world:2 * world], qkv[2 * world:]
            results = comm.run_lockstep([
                ring.forward_steps(torch, r, world, qs[r], ks[r], vs[r], *options[:4])
                for r in range(world)])
            outs = [o for o, _ in results]
            lses = [lse for _, lse in results]
            ctx.save_for_backward(*qkv, *outs, *lses)
            ctx.options, ctx.world = options, world
            ctx.mark_non_differentiable(*lses)
            return (*outs, *lses)

        @staticmethod
        @once_differentiable
        def backward(ctx, *grads):
            world = ctx.world
            saved = ctx.saved_tensors
            qs, ks, vs = saved[:world], saved[world:2 * world], saved[2 * world:3 * world]
            outs, lses = saved[3 * world:4 * world], saved[4 * world:]
            douts = [g if g is not None else torch.zeros_like(o)
                     for g, o in zip(grads[:world], outs)]
            results = comm.run_lockstep([
                ring.backward_steps(torch, r, world, douts[r], qs[r], ks[r], vs[r], outs[r],
                                    lses[r], *ctx.options) for r in range(world)])
            return (None, *[g[0] for g in results], *[g[1] for g in results],
                    *[g[2] for g in results])

    _functions["simulated"] = SimulatedRingAttention
    return SimulatedRingAttention


def ring_attention(q, k, v, group=None, causal=False, softcap=0.0, softmax_scale=None,
                   layout="zigzag", deterministic=False, return_lse=False, cu_seqlens=None,
                   check_ranks=True, **unsupported):
    """Context parallelism: attention over one sequence split across the
    ranks of a torch.distributed process group (ring attention),
    differentiable with respect to q, k and v.

    Every rank calls it with its shard [batch, seqlen/R, heads, head_dim] of
    q, k and v (flashjit.context_parallel.shard cuts them; `layout` must be
    the one they were cut with): "zigzag" (the default, balanced under a
    causal mask) or "contiguous". K/V blocks travel around the ring with
    batched isend/irecv while the current block's attention runs; partial
    outputs merge by their log-sum-exp in fp32; the backward sends K/V
    around again with fp32 dK/dV accumulators that return to their owner.
    Returns this rank's out (and lse [batch, heads, seqlen/R] fp32, +inf
    where a row sees no key) in the shard's layout.

    Supported: dense bf16/fp16 q, k, v on the group's CUDA devices (NCCL),
    causal or full, softcap, softmax_scale, GQA/MQA, deterministic
    backward. Refused by name: varlen (cu_seqlens), sliding windows,
    attention_chunk, score/mask modifiers, sinks, block masks, fp8, and a
    group of one rank (call flashjit.attention). check_ranks=True
    all-gathers the shard's shape and dtype first (one small collective) so
    that a rank with a different shard fails with a message, not a hang.
    torch.compile runs it eagerly (a graph break around it)."""
    import torch
    eager = _functions.get("eager")
    if eager is None:
        # Dynamo cannot trace the P2P driver: it stops at this call and
        # runs it as it is, the model's graph on either side.
        eager = _functions["eager"] = torch.compiler.disable(_ring_attention)
    return eager(torch, q, k, v, group, causal, softcap, softmax_scale, layout, deterministic,
                 return_lse, cu_seqlens, check_ranks, unsupported)


def _ring_attention(torch, q, k, v, group, causal, softcap, softmax_scale, layout, deterministic,
                    return_lse, cu_seqlens, check_ranks, unsupported):
    who = "flashjit.distributed.ring_attention"
    _refuse(who, torch, q, k, v, cu_seqlens, unsupported)
    check_layout(who, layout)
    _check_shard(who, q.shape[1], layout)
    dist = torch.distributed
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError(f"{who}: torch.distributed is not initialised "
                           f"(init_process_group first)")
    group = group if group is not None else dist.group.WORLD
    world = dist.get_world_size(group)
    if world < 2:
        raise ValueError(f"{who}: the group has one rank; call flashjit.attention instead")
    if check_ranks:
        _check_ranks(who, torch, dist, group, world, q, k, v)
    p2p = comm.P2PRing(torch, group)
    options = (layout, bool(causal), float(softcap),
               None if softmax_scale is None else float(softmax_scale), bool(deterministic))
    out, lse = _ring_function(torch).apply(q, k, v, p2p, options)
    return (out, lse) if return_lse else out


def _check_ranks(who, torch, dist, group, world, q, k, v):
    codes = {torch.bfloat16: 1, torch.float16: 2, torch.float32: 3, torch.float64: 4}
    mine = [codes.get(q.dtype, 0)] + [x for t in (q, k, v) for x in t.shape]
    local = torch.tensor(mine, dtype=torch.int64, device=q.device)
    everyone = [torch.empty_like(local) for _ in range(world)]
    dist.all_gather(everyone, local, group=group)
    rows = [e.tolist() for e in everyone]
    for r, row in enumerate(rows):
        if row[0] != rows[0][0]:
            raise ValueError(f"{who}: rank {r} of the group has dtype code {row[0]}, rank 0 "
                             f"{rows[0][0]}; every rank's shards must share one dtype")
        if row[1:] != rows[0][1:]:
            raise ValueError(f"{who}: rank {r} has shards q/k/v {row[1:]} (shapes flattened), "
                             f"rank 0 {rows[0][1:]}; every rank needs an equal shard")


def simulate_ring_attention(qs, ks, vs, causal=False, softcap=0.0, softmax_scale=None,
                            layout="zigzag", deterministic=False, return_lse=False, **unsupported):
    """ring_attention's arithmetic (its blocks, masks, merges and backward
    accumulation, the same code) for R = len(qs) virtual ranks in one
    process, without torch.distributed: qs, ks, vs are the ranks' shards
    (shard(x, r, R, layout)). Returns the list of the ranks' outputs (and the
    list of their LSEs: fp32, float64 for float64 inputs, which only a
    reference in place of the kernels accepts); differentiable with respect
    to every shard."""
    import torch
    who = "flashjit.context_parallel.simulate_ring_attention"
    world = len(qs)
    if world < 1 or len(ks) != world or len(vs) != world:
        raise ValueError(f"{who}: {len(qs)}, {len(ks)} and {len(vs)} shards of q, k and v; "
                         f"expected one of each per rank")
    for q, k, v in zip(qs, ks, vs):
        _refuse(who, torch, q, k, v, None, unsupported)
        if q.shape != qs[0].shape or k.shape != ks[0].shape or v.shape != vs[0].shape:
            raise ValueError(f"{who}: the ranks' shards differ in shape")
    check_layout(who, layout)
    _check_shard(who, qs[0].shape[1], layout)
    options = (layout, bool(causal), float(softcap),
               None if softmax_scale is None else float(softmax_scale), bool(deterministic))
    results = _simulated_function(torch).apply(options, *qs, *ks, *vs)
    outs, lses = list(results[:world]), list(results[world:])
    return (outs, lses) if return_lse else outs
