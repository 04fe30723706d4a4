"""Where the backward's time goes, kernel by kernel,
flashjit against SDPA's cuDNN backend, under torch.profiler.

Each shape runs forward + backward (torch.autograd.grad, fixed dout) `calls`
times after warm-up; the table lists every kernel's device time per call
(microseconds), ours and cuDNN's, so that the main kernel, the row-wise
kernels (preprocess, dQ conversion) and the forward can be told apart.
Shapes: FlashAttention's convention (16k tokens, hidden 2048), written
d:seqlen[:c] (c: causal), e.g. 128:512,128:512:c,64:8192.

    FLASHJIT_LIB=... python3 bench/probe_bwd_kernels.py [--shapes ...] [--calls 20]
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

import flashjit  # noqa: E402


def parse_shape(text):
    parts = text.split(":")
    return int(parts[0]), int(parts[1]), len(parts) > 2 and parts[2] == "c"


def kernel_times(step, calls):
    """{kernel name: us per call} of `calls` runs of step()."""
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            step()
        torch.cuda.synchronize()
    out = {}
    for e in prof.key_averages():
        t = getattr(e, "device_time_total", 0) or getattr(e, "cuda_time_total", 0)
        if t > 0 and e.count > 0:
            out[e.key] = (t / calls, e.count // calls)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="128:512,128:512:c,64:512,128:8192")
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--hidden", type=int, default=2048)
    args = ap.parse_args()
    torch.manual_seed(0)
    for text in args.shapes.split(","):
        d, s, causal = parse_shape(text)
        b, h = max(1, args.tokens // s), args.hidden // d
        q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                   for _ in range(3))
        dout = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16)

        def ours():
            o = flashjit.attention(q, k, v, causal=causal)
            torch.autograd.grad(o, (q, k, v), dout)

        qt, kt, vt = (t.detach().transpose(1, 2).requires_grad_(True) for t in (q, k, v))
        dt = dout.transpose(1, 2)

        def cudnn():
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                o = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
            torch.autograd.grad(o, (qt, kt, vt), dt)

        print(f"=== d={d} s={s} {'causal' if causal else 'full'} b={b} h={h} ===")
        for name, step in (("ours", ours), ("cudnn", cudnn)):
            times = kernel_times(step, args.calls)
            total = sum(t for t, _ in times.values())
            print(f"  {name}: {total:8.1f} us per fwd+bwd")
            for key, (t, n) in sorted(times.items(), key=lambda kv: -kv[1][0]):
                print(f"    {t:8.1f} us x{n:<2d} {key[:110]}")


if __name__ == "__main__":
    main()
