"""Where a sequence's positions live across the ranks of a ring.

The sequence is cut into equal chunks. "contiguous": rank r holds chunk r of
R. "zigzag": rank r holds chunks r and 2R-1-r of 2R, so that under a causal
mask every rank has the same number of visible (query, key) pairs (the
early chunk sees little, the late one much). A rank's chunks are stored
one after the other, in ascending position, which is what lets the ring
run a rank's own block as one causal call."""

LAYOUTS = ("zigzag", "contiguous")


def check_layout(who, layout):
    if layout not in LAYOUTS:
        raise ValueError(f"{who}: layout {layout!r} is not one of {', '.join(map(repr, LAYOUTS))}")


def chunks_per_rank(layout):
    return 2 if layout == "zigzag" else 1


def chunk_ids(layout, rank, world):
    """The global chunk indices rank `rank` holds, ascending."""
    if layout == "zigzag":
        return (rank, 2 * world - 1 - rank)
    return (rank,)


def _chunk_length(who, seqlen, world, layout):
    pieces = world * chunks_per_rank(layout)
    if seqlen % pieces:
        raise ValueError(f"{who}: sequence length {seqlen} is not a multiple of {pieces} "
                         f"({world} ranks x {chunks_per_rank(layout)} chunks each, layout "
                         f"{layout!r})")
    return seqlen // pieces


def shard(x, rank, world, layout="zigzag", dim=1):
    """Rank `rank`'s shard of the full sequence `x` (positions along `dim`):
    a new contiguous tensor, its chunks in ascending position."""
    check_layout("shard", layout)
    if not 0 <= rank < world:
        raise ValueError(f"shard: rank {rank} is outside a world of {world}")
    n = _chunk_length("shard", x.shape[dim], world, layout)
    import torch
    return torch.cat([x.narrow(dim, c * n, n) for c in chunk_ids(layout, rank, world)],
                     dim=dim).contiguous()


def unshard(shards, layout="zigzag", dim=1):
    """The full sequence from every rank's shard, in rank order (the inverse
    of shard)."""
    check_layout("unshard", layout)
    import torch
    world = len(shards)
    per = chunks_per_rank(layout)
    if shards[0].shape[dim] % per:
        raise ValueError(f"unshard: a shard of {shards[0].shape[dim]} positions does not split "
                         f"into {per} chunks (layout {layout!r})")
    n = shards[0].shape[dim] // per
    chunks = [None] * (world * per)
    for rank, s in enumerate(shards):
        for i, c in enumerate(chunk_ids(layout, rank, world)):
            chunks[c] = s.narrow(dim, i * n, n)
    return torch.cat(chunks, dim=dim)


def block_plan(q_chunks, k_chunks, causal):
    """The attention calls that one step of the ring makes: the queries of
    chunks q_chunks against the keys of chunks k_chunks (global chunk
    indices, ascending), as (q_from, q_to, k_from, k_to, causal) in units of
    local chunks. A query chunk sees an earlier key chunk whole, its own
    chunk causally (square: flashjit's bottom-right causal mask is then the
    top-left one) and no later chunk. Query chunks that see the same key
    chunks share one call."""
    nq, nk = len(q_chunks), len(k_chunks)
    if not causal:
        return [(0, nq, 0, nk, False)]
    if tuple(q_chunks) == tuple(k_chunks):
        # Ascending chunks: the local causal mask is the global one.
        return [(0, nq, 0, nk, True)]
    if set(q_chunks) & set(k_chunks):
        raise ValueError("block_plan: two shards that share a chunk but are not the same shard")
    calls = []
    for qi, qc in enumerate(q_chunks):
        seen = [ki for ki, kc in enumerate(k_chunks) if kc < qc]
        runs = []  # contiguous runs of visible key chunks
        for ki in seen:
            if runs and runs[-1][1] == ki:
                runs[-1][1] = ki + 1
            else:
                runs.append([ki, ki + 1])
        for k_from, k_to in runs:
            last = calls[-1] if calls else None
            if last and last[1] == qi and last[2:4] == (k_from, k_to):
                calls[-1] = (last[0], qi + 1, k_from, k_to, False)
            else:
                calls.append((qi, qi + 1, k_from, k_to, False))
    return calls
