"""flashjit.attention under torch.compile, and its custom ops under
torch.library.opcheck, on the GPU. Work in progress (issue #17): written
with flashjit/ops.py, not yet run on a GPU; not a step of
scripts/device-check.sh until it has passed there.

    FLASHJIT_LIB=build/libflashjit.so python3 tests/python/test_torch_compile.py

- opcheck: the forward and backward ops' schemas, fake implementations,
  autograd registration and AOT dispatch (static and dynamic shapes).
- torch.compile(fullgraph=True) of a function that calls flashjit.attention,
  forward and backward: no graph break (fullgraph fails on one), outputs and
  gradients equal to the eager call's.
- mode="reduce-overhead" (CUDA graphs): replays give the eager output.
Skips cleanly (exit 0) where torch or a CUDA device is missing.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_env import flashjit, require_gpu, run_tests, torch  # noqa: E402


def inputs(seed=0, b=2, s=256, hq=8, hkv=2, d=64, requires_grad=False):
    g = torch.Generator(device="cuda").manual_seed(seed)
    make = lambda h: torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16,  # noqa: E731
                                 generator=g).requires_grad_(requires_grad)
    return make(hq), make(hkv), make(hkv)


def close(a, b, what):
    err = (a.float() - b.float()).abs().max().item()
    scale = b.float().abs().max().item() + 1e-6
    assert err <= 2e-2 * scale, f"{what}: max |difference| {err} (scale {scale})"


def test_opcheck():
    require_gpu()
    import flashjit.ops  # noqa: F401  registers torch.ops.flashjit.*
    q, k, v = inputs(requires_grad=True)
    torch.library.opcheck(torch.ops.flashjit.attention_fwd.default,
                          (q, k, v, True, -1, -1, 0.0, None, 0, 0))
    q2, k2, v2 = inputs(seed=1, d=72)  # a padded head dim
    out, lse = torch.ops.flashjit.attention_fwd(q2, k2, v2, False, 64, 0, 0.0, 0.1, 0, 0)
    dout = torch.randn_like(out)
    torch.library.opcheck(torch.ops.flashjit.attention_bwd.default,
                          (dout, q2, k2, v2, out, lse, False, 64, 0, 0.0, 0.1))


def test_compile_fullgraph_forward_and_backward():
    require_gpu()

    def f(q, k, v):
        return flashjit.attention(q, k, v, causal=True, softcap=20.0)

    q, k, v = inputs(requires_grad=True)
    out = f(q, k, v)
    dout = torch.randn_like(out)
    out.backward(dout)
    eager = (out.detach(), q.grad.clone(), k.grad.clone(), v.grad.clone())
    q.grad = k.grad = v.grad = None

    compiled = torch.compile(f, fullgraph=True)
    out_c = compiled(q, k, v)
    out_c.backward(dout)
    for a, b, what in zip((out_c.detach(), q.grad, k.grad, v.grad), eager,
                          ("out", "dq", "dk", "dv")):
        close(a, b, what)
    # Another length: recompiled or dynamic, still one graph.
    q3, k3, v3 = inputs(seed=3, s=384, requires_grad=True)
    close(compiled(q3, k3, v3), f(q3, k3, v3), "out at 384")


def test_compile_inside_a_model_with_lse():
    require_gpu()

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(64, 64, device="cuda", dtype=torch.bfloat16)

        def forward(self, q, k, v):
            out, lse = flashjit.attention(q, k, v, window=(32, 0), return_lse=True)
            return self.proj(out) + lse.transpose(1, 2).unsqueeze(-1).to(out.dtype)

    model = Block()
    q, k, v = inputs(seed=4)
    with torch.no_grad():
        close(torch.compile(model, fullgraph=True)(q, k, v), model(q, k, v), "model")


def test_reduce_overhead_cuda_graphs():
    require_gpu()

    def f(q, k, v):
        return flashjit.attention(q, k, v)

    compiled = torch.compile(f, mode="reduce-overhead")
    q, k, v = inputs(seed=5)
    with torch.no_grad():
        expected = f(q, k, v)
        for _ in range(3):
            got = compiled(q, k, v)
        close(got, expected, "reduce-overhead")


if __name__ == "__main__":
    sys.exit(run_tests(globals()))
