"""flashjit.context_parallel's simulated ring on one GPU: R = 2, 3, 4 virtual
ranks, zigzag and contiguous, causal and full, against dense
flashjit.attention and the fp32 reference, with test_attention.py's
criteria: outputs max|out - ref| <= 2 * max|out_lowprec - ref| + 1e-5 and the
LSE within 1e-3 + 1e-3 * |lse|; gradients max|g - g_ref| <= 3 *
max|g_lowprec - g_ref| + 1e-5 (g_lowprec: the reference in the input
dtype), and the dense kernel's own gradients meet the same bound.

    FLASHJIT_LIB=build/libflashjit.so python3 tests/python/test_context_parallel.py

Skips cleanly (exit 0) where torch or a CUDA device is missing. The
multi-GPU ring is test_context_parallel_dist.py (torchrun)."""
import os
import sys

os.environ.setdefault("FLASHJIT_POISON_OUTPUT", "1")  # before the binding loads
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_env import flashjit, require_gpu, run_tests, torch  # noqa: E402
from test_attention import attention_ref, grads_ref, make_dout, make_inputs  # noqa: E402

CASES = [  # (b, s per chunk, hq, hkv, d)
    (2, 64, 4, 4, 64),
    (1, 96, 8, 2, 128),  # GQA
]


def _bound(name, value, ref, low, factor, label):
    err = (value.float() - ref.float()).abs().max().item()
    base = (low.float() - ref.float()).abs().max().item()
    bound = factor * base + 1e-5
    assert err <= bound, (f"{label}: max|{name}-ref| {err:.3g} > {bound:.3g} "
                          f"({factor} * {base:.3g} + 1e-5)")


def ring_case(world, layout, causal, dtype, b, per_chunk, hq, hkv, d, seed):
    from flashjit.context_parallel import shard, simulate_ring_attention, unshard
    s = world * (2 if layout == "zigzag" else 1) * per_chunk
    q, k, v = make_inputs(b, s, s, hq, hkv, d, d, dtype, seed=seed)
    dout = make_dout(q, v, seed + 7)
    label = f"R={world} {layout} causal={causal} {dtype} b={b} s={s} h={hq}/{hkv} d={d}"
    shards = [[shard(t, r, world, layout).requires_grad_() for r in range(world)]
              for t in (q, k, v)]
    outs, lses = simulate_ring_attention(*shards, causal=causal, layout=layout, return_lse=True)
    torch.autograd.backward(outs, [shard(dout, r, world, layout) for r in range(world)])
    out, lse = unshard(outs, layout), unshard(lses, layout, dim=2)
    grads = [unshard([p.grad for p in parts], layout) for parts in shards]
    torch.cuda.synchronize()
    assert out.dtype == dtype and lse.dtype == torch.float32, label
    for t in [out, lse, *grads]:
        assert not torch.isnan(t).any(), f"{label}: NaN"

    ref, ref_lse = attention_ref(q, k, v, causal=causal)
    low, _ = attention_ref(q, k, v, causal=causal, upcast=False)
    _bound("out", out, ref, low, 2, label)
    lse_err = (lse - ref_lse).abs()
    assert bool((lse_err <= 1e-3 + 1e-3 * ref_lse.abs()).all()), \
        f"{label}: lse max error {lse_err.max().item():.3g}"
    dense, dense_lse = flashjit.attention(q, k, v, causal=causal, return_lse=True)
    # Against dense flashjit: both within the reference's criterion, and the
    # ring's output no further from dense than the low-precision error allows.
    _bound("out vs dense", out, dense, low, 2, label)
    lse_gap = (lse - dense_lse).abs().max().item()
    assert lse_gap <= 2e-3 * max(1.0, dense_lse.abs().max().item()), (label, lse_gap)

    ref_g = grads_ref(q, k, v, dout, torch.float32, causal=causal)
    low_g = grads_ref(q, k, v, dout, dtype, causal=causal)
    for name, g, r, lo in zip(("dq", "dk", "dv"), grads, ref_g, low_g):
        assert g.dtype == dtype, (label, name, g.dtype)
        _bound(name, g, r, lo, 3, label)


def test_simulated_ring_against_dense_and_reference():
    require_gpu()
    seed = 0
    for world in (2, 3, 4):
        for layout in ("zigzag", "contiguous"):
            for causal in (True, False):
                for dtype in (torch.bfloat16, torch.float16):
                    for case in CASES:
                        seed += 1
                        ring_case(world, layout, causal, dtype, *case, seed=seed)


def test_world_of_one_is_dense():
    """R = 1: one causal (or full) block, the dense call's output exactly."""
    require_gpu()
    from flashjit.context_parallel import simulate_ring_attention
    q, k, v = make_inputs(1, 256, 256, 4, 4, 64, 64, torch.bfloat16, seed=3)
    for causal in (True, False):
        (out,), (lse,) = simulate_ring_attention([q], [k], [v], causal=causal, return_lse=True)
        dense, dense_lse = flashjit.attention(q, k, v, causal=causal, return_lse=True)
        assert torch.equal(out, dense) and torch.equal(lse, dense_lse), causal


if __name__ == "__main__":
    sys.exit(run_tests(globals()))
