"""flashjit.context_parallel's ring arithmetic without a GPU (run by ctest as
python_context_parallel_cpu): flashjit's two block calls (attention with
its LSE; the backward op given out and lse) are replaced by a float64
reference of their contract, and the simulated ring of R = 1..4 virtual
ranks, zigzag and contiguous, causal and full, GQA and softcap, must give
the outputs, LSEs and gradients of plain attention on the whole sequence
to 1e-10. Also the shard/unshard round trip, the block plans and the
refusals. Needs torch (CPU is enough); without it exit 77 (ctest's
SKIP_RETURN_CODE).

    python3 tests/python/test_context_parallel_cpu.py
"""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_env import run_tests, torch  # noqa: E402  (this checkout's python/ first)

SKIP = 77
TOL = 1e-10


# ---- a float64 reference of the two calls' contract -----------------------------

def _scores(q, k, causal, softcap, softmax_scale):
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    k = k.repeat_interleave(hq // hkv, dim=2)
    scale = 1.0 / math.sqrt(d) if softmax_scale is None else softmax_scale
    raw = torch.einsum("bthd,bshd->bhts", q, k) * scale
    s = torch.tanh(raw / softcap) * softcap if softcap > 0 else raw
    i = torch.arange(sq).view(-1, 1) + (sk - sq)  # bottom-right aligned
    ok = torch.arange(sk).view(1, -1) <= i if causal else torch.ones(sq, sk, dtype=torch.bool)
    return raw, s, ok, scale


def reference_block_forward(q, k, v, causal=False, softcap=0.0, softmax_scale=None,
                            return_lse=False):
    """flashjit.attention's contract: out, lse [b, h, sq]; a row that sees no
    key has out 0 and lse +inf."""
    assert return_lse
    _, s, ok, _ = _scores(q, k, causal, softcap, softmax_scale)
    s = s.masked_fill(~ok, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse.unsqueeze(-1)).nan_to_num(0.0)
    hq, hkv = q.shape[2], k.shape[2]
    out = torch.einsum("bhts,bshd->bthd", p, v.repeat_interleave(hq // hkv, dim=2))
    lse = torch.where(torch.isneginf(lse), torch.full_like(lse, float("inf")), lse)
    return out.to(q.dtype), lse


def reference_block_backward(dout, q, k, v, out, lse, causal, window_left, window_right, softcap,
                             softmax_scale, deterministic=False):
    """The backward op's contract: the gradients of the block given the
    (global) out and lse, by the formulas the kernels implement."""
    assert (window_left, window_right) == (-1, -1)
    hq, hkv = q.shape[2], k.shape[2]
    g = hq // hkv
    raw, s, ok, scale = _scores(q, k, causal, softcap, softmax_scale)
    p = torch.exp(s - lse.unsqueeze(-1)).masked_fill(~ok, 0.0)
    ve = v.repeat_interleave(g, dim=2)
    dp = torch.einsum("bthd,bshd->bhts", dout, ve)
    delta = (dout * out).sum(-1).transpose(1, 2).unsqueeze(-1)  # [b, h, sq, 1]
    ds = p * (dp - delta)
    if softcap > 0:
        ds = ds * (1 - torch.tanh(raw / softcap) ** 2)
    ke = k.repeat_interleave(g, dim=2)
    dq = torch.einsum("bhts,bshd->bthd", ds, ke) * scale
    dk = torch.einsum("bhts,bthd->bshd", ds, q) * scale
    dv = torch.einsum("bhts,bthd->bshd", p, dout)
    b, sk = k.shape[0], k.shape[1]
    dk = dk.reshape(b, sk, hkv, g, -1).sum(3)
    dv = dv.reshape(b, sk, hkv, g, -1).sum(3)
    return dq, dk, dv


def plain_attention(q, k, v, causal, softcap, softmax_scale):
    """The whole sequence through autograd: an independent path."""
    _, s, ok, _ = _scores(q, k, causal, softcap, softmax_scale)
    s = s.masked_fill(~ok, float("-inf"))
    hq, hkv = q.shape[2], k.shape[2]
    out = torch.einsum("bhts,bshd->bthd", torch.softmax(s, dim=-1),
                       v.repeat_interleave(hq // hkv, dim=2))
    return out, torch.logsumexp(s, dim=-1)


class patched_calls:
    def __enter__(self):
        from flashjit import dense, ops
        self.saved = (dense.attention, ops.attention_bwd)
        dense.attention, ops.attention_bwd = reference_block_forward, reference_block_backward
        return self

    def __exit__(self, *exc):
        from flashjit import dense, ops
        dense.attention, ops.attention_bwd = self.saved


# ---- the simulated ring ----------------------------------------------------------

def _inputs(seed, b, s, hq, hkv, d, dv):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(b, s, hq, d, dtype=torch.float64, generator=g),
            torch.randn(b, s, hkv, d, dtype=torch.float64, generator=g),
            torch.randn(b, s, hkv, dv, dtype=torch.float64, generator=g),
            torch.randn(b, s, hq, dv, dtype=torch.float64, generator=g))


def _max_err(a, b):
    return (a - b).abs().max().item()


def ring_against_plain(world, layout, causal, softcap=0.0, softmax_scale=None, hq=4, hkv=2,
                       seed=0, per_chunk=5):
    from flashjit.context_parallel import shard, simulate_ring_attention, unshard
    per = 2 if layout == "zigzag" else 1
    s = world * per * per_chunk
    q, k, v, dout = _inputs(seed, 2, s, hq, hkv, 16, 12)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    ref_out, ref_lse = plain_attention(*leaves, causal, softcap, softmax_scale)
    ref_out.backward(dout)
    shards = [[shard(t, r, world, layout).requires_grad_() for r in range(world)]
              for t in (q, k, v)]
    with patched_calls():
        outs, lses = simulate_ring_attention(*shards, causal=causal, softcap=softcap,
                                             softmax_scale=softmax_scale, layout=layout,
                                             return_lse=True)
        torch.autograd.backward(outs, [shard(dout, r, world, layout) for r in range(world)])
    label = f"R={world} {layout} causal={causal} softcap={softcap}"
    out = unshard(outs, layout)
    lse = unshard(lses, layout, dim=2)
    assert out.dtype == torch.float64 and out.shape == ref_out.shape, (label, out.shape)
    # float64 inputs keep a float64 LSE (fp32 for the kernels' 16-bit ones).
    assert lse.dtype == torch.float64 and lse.shape == ref_lse.shape, (label, lse.dtype)
    assert _max_err(out, ref_out.detach()) < TOL, (label, "out", _max_err(out, ref_out))
    assert _max_err(lse, ref_lse.detach()) < TOL, (label, "lse", _max_err(lse, ref_lse))
    for name, parts, leaf in zip(("dq", "dk", "dv"), shards, leaves):
        grad = unshard([p.grad for p in parts], layout)
        err = _max_err(grad, leaf.grad)
        assert err < TOL, (label, name, err)
        assert leaf.grad.abs().max().item() > 1e-3, (label, name, "a vanishing gradient")


def test_ring_matches_plain_attention():
    for world in (1, 2, 3, 4):
        for layout in ("zigzag", "contiguous"):
            for causal in (True, False):
                ring_against_plain(world, layout, causal, seed=world)


def test_ring_softcap_scale_and_mqa():
    for layout in ("zigzag", "contiguous"):
        ring_against_plain(3, layout, True, softcap=2.5, softmax_scale=0.3, hq=3, hkv=1,
                           seed=11)
        ring_against_plain(4, layout, False, softcap=1.5, hq=2, hkv=2, seed=12, per_chunk=3)


def test_ring_catches_a_wrong_merge():
    """The criterion bites: a merge that drops the normalisation of the
    running output (a plausible bug) fails it."""
    from flashjit.context_parallel import ring
    real = ring._merge

    def wrong(torch_, acc_out, acc_lse, out, lse):
        acc_out.add_(out.to(acc_out.dtype))
        acc_lse.copy_(torch_.logaddexp(acc_lse, lse.to(acc_lse.dtype)))

    ring._merge = wrong
    try:
        ring_against_plain(2, "zigzag", True)
    except AssertionError:
        pass
    else:
        raise AssertionError("a wrong merge passed the ring test")
    finally:
        ring._merge = real


def test_shard_round_trip():
    from flashjit.context_parallel import shard, unshard
    x = torch.arange(2 * 24 * 3).reshape(2, 24, 3)
    for world in (1, 2, 3, 4, 6):
        for layout in ("zigzag", "contiguous"):
            parts = [shard(x, r, world, layout) for r in range(world)]
            assert torch.equal(unshard(parts, layout), x), (world, layout)
    zig = [shard(x, r, 3, "zigzag")[0, :, 0].tolist() for r in range(3)]
    # 6 chunks of 4 positions: rank 0 holds chunks 0 and 5, rank 1 1 and 4, rank 2 2 and 3.
    assert zig[0] == [3 * p for p in list(range(0, 4)) + list(range(20, 24))], zig[0]
    assert zig[2] == [3 * p for p in range(8, 16)], zig[2]
    try:
        shard(x, 0, 5, "zigzag")
    except ValueError as e:
        assert "multiple of 10" in str(e), e
    else:
        raise AssertionError("a length that does not split was accepted")


def test_zigzag_balances_causal_work():
    """Each rank's causal (query, key) pairs over the whole ring: equal under
    zigzag, growing with the rank under contiguous."""
    from flashjit.context_parallel.layout import block_plan, chunk_ids
    for world in (2, 4, 8):
        for layout in ("zigzag", "contiguous"):
            work = []
            for r in range(world):
                total = 0
                for step in range(world):
                    mine = chunk_ids(layout, r, world)
                    theirs = chunk_ids(layout, (r - step) % world, world)
                    for q0, q1, k0, k1, causal in block_plan(mine, theirs, True):
                        n = q1 - q0
                        total += n * (n + 1) / 2 if causal else n * (k1 - k0)
                work.append(total)
            if layout == "zigzag":
                assert len(set(work)) == 1, (world, work)
            else:
                assert work == sorted(work) and work[0] < work[-1], (world, work)


def test_block_plan_calls():
    from flashjit.context_parallel.layout import block_plan
    # Zigzag, R = 2: rank 1 holds chunks (1, 2); rank 0's K/V (0, 3).
    assert block_plan((1, 2), (0, 3), True) == [(0, 2, 0, 1, False)]
    assert block_plan((0, 3), (1, 2), True) == [(1, 2, 0, 2, False)]
    assert block_plan((0, 3), (0, 3), True) == [(0, 2, 0, 2, True)]
    assert block_plan((0,), (1,), True) == []
    assert block_plan((1,), (0,), False) == [(0, 1, 0, 1, False)]


def test_refusals():
    from flashjit import distributed
    q = torch.zeros(1, 4, 2, 8, dtype=torch.float64)
    cases = [
        (dict(window=(4, 0)), NotImplementedError, "window"),
        (dict(sinks=torch.zeros(2)), NotImplementedError, "sinks"),
        (dict(score_mod="x"), NotImplementedError, "score_mod"),
        (dict(layout="ring"), ValueError, "layout"),
        (dict(bogus=1), TypeError, "bogus"),
    ]
    for kw, error, word in cases:
        try:
            distributed.simulate_ring_attention([q, q], [q, q], [q, q], **kw)
        except error as e:
            assert word in str(e), (kw, e)
        else:
            raise AssertionError(f"{kw} was accepted")
    try:
        distributed.ring_attention(q, q, q, cu_seqlens=torch.zeros(2, dtype=torch.int32))
    except NotImplementedError as e:
        assert "varlen" in str(e), e
    else:
        raise AssertionError("varlen was accepted")
    if hasattr(torch, "float8_e4m3fn"):
        q8 = q.to(torch.float8_e4m3fn)
        try:
            distributed.ring_attention(q8, q8, q8)
        except NotImplementedError as e:
            assert "fp8" in str(e), e
        else:
            raise AssertionError("fp8 was accepted")
    try:
        distributed.simulate_ring_attention([q[:, :3]], [q[:, :3]], [q[:, :3]])
    except ValueError as e:
        assert "multiple of 2" in str(e), e
    else:
        raise AssertionError("an odd zigzag shard was accepted")
    try:
        distributed.ring_attention(q, q, q)
    except RuntimeError as e:
        assert "init_process_group" in str(e), e
    else:
        raise AssertionError("a call without torch.distributed was accepted")


def _gloo_worker(rank, world, port):
    """One rank of a real ring over torch.distributed (gloo, CPU processes):
    ring_attention's P2P driver and its checks, the reference in place of
    the kernels; the whole sequence's plain attention is the oracle."""
    import torch.distributed as dist
    from flashjit import distributed
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    try:
        for layout in ("zigzag", "contiguous"):
            for causal in (True, False):
                q, k, v, dout = _inputs(5, 2, world * 2 * 3, 4, 2, 16, 12)
                leaves = [t.clone().requires_grad_() for t in (q, k, v)]
                ref_out, ref_lse = plain_attention(*leaves, causal, 0.0, None)
                ref_out.backward(dout)
                mine = [distributed.shard(t, rank, world, layout).requires_grad_()
                        for t in (q, k, v)]
                if causal:
                    # K and V stored [batch, heads, seqlen, dim] (transposed
                    # views): the ring must send them as values, not bytes.
                    for i in (1, 2):
                        stored = mine[i].detach().transpose(1, 2).contiguous()
                        mine[i] = stored.transpose(1, 2).requires_grad_()
                with patched_calls():
                    out, lse = distributed.ring_attention(*mine, causal=causal, layout=layout,
                                                          return_lse=True)
                    out.backward(distributed.shard(dout, rank, world, layout))
                label = (rank, world, layout, causal)
                want = distributed.shard(ref_out.detach(), rank, world, layout)
                assert _max_err(out, want) < TOL, (label, "out")
                want = distributed.shard(ref_lse.detach(), rank, world, layout, dim=2)
                assert _max_err(lse, want) < TOL, (label, "lse")
                for name, t, leaf in zip(("dq", "dk", "dv"), mine, leaves):
                    want = distributed.shard(leaf.grad, rank, world, layout)
                    assert _max_err(t.grad, want) < TOL, (label, name, _max_err(t.grad, want))
        # Under torch.compile: a graph break around the ring, the model's
        # code on either side compiled, the same values.
        q, k, v, _ = _inputs(6, 1, world * 2 * 2, 2, 2, 8, 8)
        mine = [distributed.shard(t, rank, world, "zigzag") for t in (q, k, v)]

        def model(q, k, v):
            return distributed.ring_attention(q * 2, k, v, causal=True).sin() + 1

        if world == 2:  # one world size is enough, and compiling is slow
            with patched_calls():
                compiled = torch.compile(model, backend="aot_eager")(*mine)
                assert _max_err(compiled, model(*mine)) == 0, (rank, "torch.compile")
        # A rank whose shard differs is named, not a hang.
        q = torch.zeros(1, 4 if rank == 0 else 6, 2, 8, dtype=torch.float64)
        try:
            distributed.ring_attention(q, q, q)
        except ValueError as e:
            assert "equal shard" in str(e), e
        else:
            raise AssertionError("shards of different lengths were accepted")
        # Every rank done before any tears its group down: gloo aborts a
        # rank whose peer closed the connections under its last collective
        # (seen once in CI: SIGABRT, "terminate called without an active
        # exception").
        dist.barrier()
    finally:
        dist.destroy_process_group()


def test_real_ring_over_gloo():
    """ring_attention itself (P2PRing: batch_isend_irecv, all_gather) in 2
    and 3 CPU processes, and under torch.compile."""
    import socket
    import torch.multiprocessing as mp
    for world in (2, 3):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        mp.spawn(_gloo_worker, args=(world, port), nprocs=world, join=True)


def skip_reason():
    if torch is None:
        return "torch is not installed"
    return None


if __name__ == "__main__":
    sys.exit(run_tests(globals(), skip=skip_reason, skip_status=SKIP))
