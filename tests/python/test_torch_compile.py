"""flashjit.attention, attention_varlen and attention_with_kvcache under
torch.compile, and their custom ops under torch.library.opcheck, on the GPU
(a step of scripts/device-check.sh).

    FLASHJIT_LIB=build/libflashjit.so python3 tests/python/test_torch_compile.py

- opcheck: the forward and backward ops' schemas, fake implementations,
  autograd registration and AOT dispatch (static and dynamic shapes).
- torch.compile(fullgraph=True) of a function that calls flashjit.attention,
  forward and backward: no graph break (fullgraph fails on one), outputs and
  gradients equal to the eager call's.
- mode="reduce-overhead" (CUDA graphs): replays give the eager output.
- deterministic, num_splits and pack_gqa through compiled calls: the
  configs reach the library, and a compiled deterministic backward equals
  the eager one bit for bit.
Skips cleanly (exit 0) where torch or a CUDA device is missing.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_env import config_field, flashjit, recorded_configs, require_gpu, run_tests  # noqa: E402
from gpu_env import torch  # noqa: E402


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


def test_transformer_block_has_no_graph_break_and_matches_eager():
    """A pre-norm transformer block (attention through flashjit + MLP),
    forward and backward: torch._dynamo.explain counts no graph break, and
    the compiled block's output and parameter gradients equal eager's."""
    require_gpu()

    class TransformerBlock(torch.nn.Module):
        def __init__(self, dim=256, heads=4, heads_kv=2):
            super().__init__()
            self.heads, self.heads_kv, self.d = heads, heads_kv, dim // heads
            kw = dict(device="cuda", dtype=torch.bfloat16)
            self.norm1 = torch.nn.LayerNorm(dim, **kw)
            self.qkv = torch.nn.Linear(dim, (heads + 2 * heads_kv) * self.d, **kw)
            self.out = torch.nn.Linear(dim, dim, **kw)
            self.norm2 = torch.nn.LayerNorm(dim, **kw)
            self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim, **kw), torch.nn.GELU(),
                                           torch.nn.Linear(4 * dim, dim, **kw))

        def forward(self, x):
            b, s, _ = x.shape
            q, k, v = self.qkv(self.norm1(x)).split(
                [self.heads * self.d, self.heads_kv * self.d, self.heads_kv * self.d], dim=-1)
            q = q.view(b, s, self.heads, self.d)
            k = k.view(b, s, self.heads_kv, self.d)
            v = v.view(b, s, self.heads_kv, self.d)
            x = x + self.out(flashjit.attention(q, k, v, causal=True).reshape(b, s, -1))
            return x + self.mlp(self.norm2(x))

    torch.manual_seed(9)
    block = TransformerBlock()
    x = torch.randn(2, 384, 256, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    explanation = torch._dynamo.explain(block)(x)
    assert explanation.graph_break_count == 0, explanation.break_reasons

    def run(fn):
        block.zero_grad()
        x.grad = None
        out = fn(x)
        out.float().square().mean().backward()
        return [out.detach(), x.grad.clone()] + [p.grad.clone() for p in block.parameters()]

    eager = run(block)
    compiled = run(torch.compile(block, fullgraph=True))
    for i, (a, b) in enumerate(zip(compiled, eager)):
        close(a, b, f"block tensor {i}")


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


def cumulative(lens):
    out = [0]
    for n in lens:
        out.append(out[-1] + n)
    return torch.tensor(out, dtype=torch.int32, device="cuda")


def test_varlen_opcheck_and_fullgraph():
    require_gpu()
    import flashjit.ops  # noqa: F401
    g = torch.Generator(device="cuda").manual_seed(7)
    lens_q, lens_k = [17, 0, 100, 33], [40, 5, 100, 1]
    make = lambda n, h: torch.randn(n, h, 64, device="cuda", dtype=torch.bfloat16,  # noqa: E731
                                    generator=g).requires_grad_()
    q, k, v = make(sum(lens_q), 8), make(sum(lens_k), 2), make(sum(lens_k), 2)
    cu_q, cu_k = cumulative(lens_q), cumulative(lens_k)
    torch.library.opcheck(torch.ops.flashjit.attention_varlen_fwd.default,
                          (q, k, v, cu_q, cu_k, 100, 100, True, -1, 0, 0.0, None))

    def f(q, k, v):
        return flashjit.attention_varlen(q, k, v, cu_q, cu_k, 100, 100, causal=True)

    out = f(q, k, v)
    dout = torch.randn_like(out)
    out.backward(dout)
    eager = (out.detach(), q.grad.clone(), k.grad.clone(), v.grad.clone())
    q.grad = k.grad = v.grad = None
    out_c = torch.compile(f, fullgraph=True)(q, k, v)
    out_c.backward(dout)
    for a, b, what in zip((out_c.detach(), q.grad, k.grad, v.grad), eager,
                          ("out", "dq", "dk", "dv")):
        close(a, b, "varlen " + what)


def test_compiled_knobs_reach_the_library():
    """torch.compile(fullgraph=True) of flashjit.attention and
    attention_varlen with deterministic=True, num_splits and pack_gqa: the
    compiled forward's and backward's C calls get those configs, and the
    compiled deterministic gradients equal the eager deterministic ones bit
    for bit (the same kernels on the same values); opcheck of the ops with
    the new arguments."""
    require_gpu()
    import flashjit.ops  # noqa: F401
    knobs = dict(num_splits=2, pack_gqa=True, deterministic=True)

    def dense(q, k, v):
        return flashjit.attention(q, k, v, causal=True, **knobs)

    g = torch.Generator(device="cuda").manual_seed(11)
    lens_q, lens_k = [17, 0, 300, 33], [400, 5, 300, 1]
    cu_q, cu_k = cumulative(lens_q), cumulative(lens_k)
    make = lambda n, h: torch.randn(n, h, 64, device="cuda", dtype=torch.bfloat16,  # noqa: E731
                                    generator=g).requires_grad_()
    packed_inputs = (make(sum(lens_q), 8), make(sum(lens_k), 2), make(sum(lens_k), 2))

    def packed(q, k, v):
        return flashjit.attention_varlen(q, k, v, cu_q, cu_k, 300, 400, causal=True, **knobs)

    for name, fn, args, suffix in (("dense", dense, inputs(seed=11, requires_grad=True), ""),
                                   ("varlen", packed, packed_inputs, "_varlen")):
        results = []
        for run in (fn, torch.compile(fn, fullgraph=True)):
            for t in args:
                t.grad = None
            with recorded_configs() as seen:
                out = run(*args)
                out.backward(torch.ones_like(out))
            results.append((out.detach(), *(t.grad.clone() for t in args)))
            calls = {symbol: config for symbol, config in seen}
            forward, backward = calls.get("flashjit_forward" + suffix), calls.get(
                "flashjit_backward" + suffix)
            got = (config_field(forward, "splits"), config_field(forward, "pack_gqa"),
                   config_field(backward, "deterministic"))
            assert got == (2, 1, 1), f"{name} {run}: (splits, pack_gqa, deterministic) {got}"
        for what, a, b in zip(("out", "dq", "dk", "dv"), *results):
            assert torch.equal(a, b), f"{name}: compiled {what} differs from eager's"

    q, k, v = inputs(seed=12, requires_grad=True)
    torch.library.opcheck(torch.ops.flashjit.attention_fwd.default,
                          (q, k, v, True, -1, -1, 0.0, None, 2, 1, None, None, None, None, True))
    # The backward op has no autograd formula: inputs that need no grad.
    q, k, v = (t.detach() for t in (q, k, v))
    out, lse = torch.ops.flashjit.attention_fwd(q, k, v, True, -1, -1, 0.0, None, 0, 0)
    torch.library.opcheck(torch.ops.flashjit.attention_bwd.default,
                          (torch.randn_like(out), q, k, v, out, lse, True, -1, 0, 0.0, None,
                           True))
    q, k, v = packed_inputs
    torch.library.opcheck(torch.ops.flashjit.attention_varlen_fwd.default,
                          (q, k, v, cu_q, cu_k, 300, 400, True, -1, 0, 0.0, None, None, None,
                           None, None, 3, 2, True))


def test_kvcache_fullgraph_appends_like_eager():
    require_gpu()
    g = torch.Generator(device="cuda").manual_seed(8)
    randn = lambda *s: torch.randn(*s, device="cuda", dtype=torch.bfloat16,  # noqa: E731
                                   generator=g)
    q = randn(2, 1, 8, 128)
    k_cache, v_cache = randn(2, 256, 2, 128), randn(2, 256, 2, 128)
    k_new, v_new = randn(2, 1, 2, 128), randn(2, 1, 2, 128)
    lens = torch.tensor([10, 200], dtype=torch.int32, device="cuda")

    def f(q, kc, vc, kn, vn):
        return flashjit.attention_with_kvcache(q, kc, vc, k=kn, v=vn, cache_seqlens=lens,
                                               causal=True)

    kc_e, vc_e = k_cache.clone(), v_cache.clone()
    kc_c, vc_c = k_cache.clone(), v_cache.clone()
    with torch.no_grad():
        eager = f(q, kc_e, vc_e, k_new, v_new)
        compiled = torch.compile(f, fullgraph=True)(q, kc_c, vc_c, k_new, v_new)
    close(compiled, eager, "kvcache out")
    assert torch.equal(kc_c, kc_e) and torch.equal(vc_c, vc_e), "the compiled call's append differs"


if __name__ == "__main__":
    sys.exit(run_tests(globals()))
