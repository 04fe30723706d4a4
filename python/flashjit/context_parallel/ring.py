"""The ring's arithmetic for one rank, written once for the real ring and
the simulated one: generators that yield their communication to a driver
(comm.py). `handle = yield ("send", tensors)` starts passing tensors to the
next rank and receiving the previous rank's; `tensors = yield ("wait",
handle)` finishes it. Every rank yields the same sequence, so a driver can
run all of them in lockstep in one process.

Forward: step t runs this rank's queries against the K/V that started on
rank (rank - t) mod R (the next block is in flight meanwhile) and merges
the partial (out, lse) by their LSEs in fp32 (float64 for float64 inputs).
Backward: the K/V go around again; each block's gradients come from
flashjit's backward given the GLOBAL out and LSE, which makes them exact
contributions (P = exp(S - lse) is the final softmax's); dQ accumulates
locally, dK/dV in fp32 accumulators that travel with their K/V and arrive
home after R shifts."""
from .layout import block_plan, chunk_ids, chunks_per_rank


def block_forward(q, k, v, causal, softcap, softmax_scale):
    """One block's (out, lse [b, h, sq] fp32, +inf where a row sees no key)."""
    from .. import dense  # looked up per call: the CPU tests put a reference in its place
    return dense.attention(q, k, v, causal=causal, softcap=softcap, softmax_scale=softmax_scale,
                           return_lse=True)


def block_backward(dout, q, k, v, out, lse, causal, softcap, softmax_scale, deterministic):
    """One block's (dq, dk, dv) given the final out and lse."""
    from .. import ops
    return ops.attention_bwd(dout, q, k, v, out, lse, causal, -1, -1, softcap, softmax_scale,
                             deterministic)


def accumulation_dtype(torch, dtype):
    return torch.float64 if dtype == torch.float64 else torch.float32


def _rows(t, dim, lo, hi, n):
    return t.narrow(dim, lo * n, (hi - lo) * n)


def _merge(torch, acc_out, acc_lse, out, lse):
    """acc <- the softmax over both key sets, in place. lse +inf (a block
    row that saw no key) counts as no contribution; a row with none so far
    has acc_lse -inf."""
    neg = float("-inf")
    lse = lse.to(acc_lse.dtype)
    lse = torch.where(lse == float("inf"), torch.full_like(lse, neg), lse)
    new = torch.logaddexp(acc_lse, lse)
    base = torch.where(new == neg, torch.zeros_like(new), new)
    w_acc = torch.exp(acc_lse - base).transpose(1, 2).unsqueeze(-1)
    w_new = torch.exp(lse - base).transpose(1, 2).unsqueeze(-1)
    acc_out.copy_(acc_out * w_acc + out.to(acc_out.dtype) * w_new)
    acc_lse.copy_(new)


def forward_steps(torch, rank, world, q, k, v, layout, causal, softcap, softmax_scale):
    """Generator: this rank's (out in q's dtype, lse [b, h, s_local] in the
    accumulation dtype: fp32, float64 for float64 inputs, which the
    backward's P = exp(S - lse) then keeps exact)."""
    n = q.shape[1] // chunks_per_rank(layout)
    mine = chunk_ids(layout, rank, world)
    acc = accumulation_dtype(torch, q.dtype)
    b, s, h, _ = q.shape
    acc_out = torch.zeros(b, s, h, v.shape[3], dtype=acc, device=q.device)
    acc_lse = torch.full((b, h, s), float("-inf"), dtype=acc, device=q.device)
    kv = (k, v)
    for step in range(world):
        pending = (yield ("send", kv)) if step + 1 < world else None
        theirs = chunk_ids(layout, (rank - step) % world, world)
        for q0, q1, k0, k1, block_causal in block_plan(mine, theirs, causal):
            out, lse = block_forward(_rows(q, 1, q0, q1, n), _rows(kv[0], 1, k0, k1, n),
                                     _rows(kv[1], 1, k0, k1, n), block_causal, softcap,
                                     softmax_scale)
            _merge(torch, _rows(acc_out, 1, q0, q1, n), _rows(acc_lse, 2, q0, q1, n), out, lse)
        if pending is not None:
            kv = yield ("wait", pending)
    lse = torch.where(acc_lse == float("-inf"), torch.full_like(acc_lse, float("inf")), acc_lse)
    return acc_out.to(q.dtype), lse


def backward_steps(torch, rank, world, dout, q, k, v, out, lse, layout, causal, softcap,
                   softmax_scale, deterministic):
    """Generator: this rank's (dq, dk, dv) in the inputs' dtypes."""
    n = q.shape[1] // chunks_per_rank(layout)
    mine = chunk_ids(layout, rank, world)
    acc = accumulation_dtype(torch, q.dtype)
    dout = dout.contiguous()
    dq = torch.zeros(q.shape, dtype=acc, device=q.device)
    kv = (k, v)
    dkv = None  # the accumulators of the K/V this rank holds, once they arrive
    dkv_pending = None
    for step in range(world):
        pending = (yield ("send", kv)) if step + 1 < world else None
        theirs = chunk_ids(layout, (rank - step) % world, world)
        dk = torch.zeros(kv[0].shape, dtype=acc, device=q.device)
        dv = torch.zeros(kv[1].shape, dtype=acc, device=q.device)
        for q0, q1, k0, k1, block_causal in block_plan(mine, theirs, causal):
            grads = block_backward(
                _rows(dout, 1, q0, q1, n), _rows(q, 1, q0, q1, n), _rows(kv[0], 1, k0, k1, n),
                _rows(kv[1], 1, k0, k1, n), _rows(out, 1, q0, q1, n).contiguous(),
                _rows(lse, 2, q0, q1, n).contiguous(), block_causal, softcap, softmax_scale,
                deterministic)
            _rows(dq, 1, q0, q1, n).add_(grads[0])
            _rows(dk, 1, k0, k1, n).add_(grads[1])
            _rows(dv, 1, k0, k1, n).add_(grads[2])
        if dkv_pending is not None:
            # The accumulators of these K/V from the ranks before, waited
            # for only now so that their transfer hid behind this step.
            dkv = yield ("wait", dkv_pending)
            dk.add_(dkv[0])
            dv.add_(dkv[1])
        dkv_pending = yield ("send", (dk, dv))
        if pending is not None:
            kv = yield ("wait", pending)
    dkv = yield ("wait", dkv_pending)  # this rank's own, home after R shifts
    return dq.to(q.dtype), dkv[0].to(k.dtype), dkv[1].to(v.dtype)
