"""Memory of flashjit's forward + backward at a long sequence: it must stay
O(seqlen) (P is never stored; the backward recomputes it from the
saved O and log-sum-exp).

Default shape: seqlen 131072, batch 1, 16 heads, head dim 128, bf16, causal.
The "peak extra memory" is torch.cuda.max_memory_allocated() over one
forward + backward minus the bytes of q, k, v, o, dout, dq, dk, dv themselves:
what the attention needs on top of its inputs and outputs (the LSE, the
backward's workspace: the fp32 dQ accumulator and rowsum(dO * O), and any
temporary). For comparison, one fp32 score matrix of this shape would be
b * h * seqlen^2 * 4 bytes (1 TiB). The first call (which compiles) is run
before the measured one. Prints one line:

    memory: seqlen 131072 b=1 h=16 d=128 bf16 causal | fwd 2345.6 ms, bwd 6789.0 ms
    (301 / 259 TFLOP/s) | peak extra 1096.0 MiB (q/k/v/o/dout/dq/dk/dv: 4096.0 MiB) | ...

    FLASHJIT_LIB=build/libflashjit.so python3 bench/memory.py [--seqlen N] [--json out.json]
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python"))

import torch  # noqa: E402

import flashjit  # noqa: E402

MIB = 1 << 20


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seqlen", type=int, default=131072)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--hdim", type=int, default=128)
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    ap.add_argument("--mask", default="causal", choices=["causal", "full"])
    ap.add_argument("--json", help="write the measurement here")
    args = ap.parse_args()
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    causal = args.mask == "causal"
    b, s, h, d = args.batch, args.seqlen, args.heads, args.hdim

    torch.cuda.init()
    flashjit.version()
    torch.manual_seed(0)
    q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=dtype, requires_grad=True)
               for _ in range(3))
    dout = torch.randn(b, s, h, d, device="cuda", dtype=dtype)

    # The first call compiles (forward and backward kernels): not measured.
    out = flashjit.attention(q, k, v, causal=causal)
    out.backward(dout)
    torch.cuda.synchronize()
    del out
    for t in (q, k, v):
        t.grad = None
    torch.cuda.synchronize()

    # Measured: one forward + backward from here, with q, k, v and dout alive.
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()  # q, k, v, dout (and nothing else of ours)
    inputs_bytes = sum(t.numel() * t.element_size() for t in (q, k, v, dout))
    e0, e1, e2 = (torch.cuda.Event(enable_timing=True) for _ in range(3))
    e0.record()
    out = flashjit.attention(q, k, v, causal=causal)
    e1.record()
    out.backward(dout)
    e2.record()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated()
    fwd_ms, bwd_ms = e0.elapsed_time(e1), e1.elapsed_time(e2)

    tensors = (q, k, v, out, dout, q.grad, k.grad, v.grad)
    tensors_bytes = sum(t.numel() * t.element_size() for t in tensors)
    # Memory allocated before the measurement that is not q/k/v/dout (normally 0).
    other_before = before - inputs_bytes
    extra = peak - other_before - tensors_bytes
    lse_bytes = b * h * s * 4
    workspace_bytes = b * h * s * (d + 1) * 4  # backward_workspace_bytes (fp32 dQ accumulator + D)
    f = 4 * b * h * s * s * d / (2 if causal else 1)
    result = {"seqlen": s, "batch": b, "heads": h, "hdim": d, "dtype": args.dtype, "mask": args.mask,
              "fwd_ms": fwd_ms, "bwd_ms": bwd_ms, "fwd_tflops": f / fwd_ms / 1e9,
              "bwd_tflops": 2.5 * f / bwd_ms / 1e9, "peak_bytes": peak,
              "tensors_bytes": tensors_bytes, "peak_extra_bytes": extra,
              "lse_bytes": lse_bytes, "workspace_bytes_expected": workspace_bytes,
              "device": torch.cuda.get_device_name(), "flashjit": flashjit.version()}
    print(f"memory: seqlen {s} b={b} h={h} d={d} {args.dtype} {args.mask} | "
          f"fwd {fwd_ms:.1f} ms, bwd {bwd_ms:.1f} ms ({result['fwd_tflops']:.0f} / "
          f"{result['bwd_tflops']:.0f} TFLOP/s) | peak extra {extra / MIB:.1f} MiB "
          f"(q/k/v/o/dout/dq/dk/dv: {tensors_bytes / MIB:.1f} MiB; lse {lse_bytes / MIB:.1f} MiB + "
          f"workspace {workspace_bytes / MIB:.1f} MiB expected) | peak {peak / MIB:.1f} MiB",
          flush=True)
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
