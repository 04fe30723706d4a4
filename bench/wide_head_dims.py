"""Head dims past 256: Gemma 4's global layers (8 query heads over 4 KV
heads at head dim 512) and DeepSeek MLA's 576/512 decode, flashjit's
forward against every PyTorch path that runs them, in one process.

Forward (suite wide_fwd): Gemma 4's shape, batch 1, 4k to 32k tokens,
causal and full; SDPA's backends (the flash backend stops at 256; cuDNN's,
the memory-efficient one and math where memory allows) and FlexAttention
(torch.compile'd, where it compiles at d=512), each where it runs, its
error where it does not. TFLOP/s as bench/compare.py counts them
(2 b h s^2 (d_qk + d_v), halved when causal), kernel time with the GPU kept
busy (compare.time_ms).

Backward (suite wide_bwd): the same shape, 4k to 16k tokens, forward +
backward minus forward (2.5x the forward's FLOPs), against SDPA's cuDNN,
memory-efficient and (to 8k) math backends and FlexAttention, each where it
runs.

Decode (suite wide_decode): one query token a sequence over a contiguous
cache, Gemma 4's 8/4 heads at 512 (memory-bound: GB/s of K and V against
HBM's peak), and MLA's 576/512 with 16 and 64 query heads over one KV head
(the cache's 512 first columns as V, a second tensor here).

    FLASHJIT_LIB=build/libflashjit.so python3 bench/wide_head_dims.py [--quick]
        [--json out.json] [--results DIR] [--suite NAME]
"""
import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

import flashjit  # noqa: E402
import results  # noqa: E402
from compare import flops, short_error, time_ms  # noqa: E402

BACKENDS = {"sdpa_cudnn": SDPBackend.CUDNN_ATTENTION,
            "sdpa_efficient": SDPBackend.EFFICIENT_ATTENTION,
            "sdpa_math": SDPBackend.MATH}
HBM_GBS = {"H100": 3350.0, "H200": 4800.0}


def hbm_peak():
    name = torch.cuda.get_device_name()
    return next((v for k, v in HBM_GBS.items() if k in name), 3350.0)


def flex():
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        return torch.compile(flex_attention), create_block_mask
    except Exception:  # noqa: BLE001
        return None, None


def bench_forward(s, causal, warmup, repeats, flex_fn, block_mask_fn):
    b, hq, hkv, d = 1, 8, 4, 512
    torch.manual_seed(0)
    q = torch.randn(b, s, hq, d, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(b, s, hkv, d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(b, s, hkv, d, device="cuda", dtype=torch.bfloat16)
    f = flops(b, hq, s, d, causal)
    row = {"d": d, "heads": f"{hq}/{hkv}", "seqlen": s, "causal": causal}
    outs = {}

    def ours():
        return flashjit.attention(q, k, v, causal=causal)
    try:
        outs["ours"] = ours()
        ms = time_ms(ours, warmup, repeats)
        row["ours"] = {"ms": ms, "tflops": f / ms / 1e9}
    except Exception as e:  # noqa: BLE001 - a failure is a result
        row["ours"] = {"error": short_error(e)}
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    for name, backend in BACKENDS.items():
        if name == "sdpa_math" and s > 8192:
            row[name] = {"error": "skipped: the math path's s x s scores exceed memory"}
            continue

        def sdpa():
            return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal, enable_gqa=True)
        try:
            with sdpa_kernel([backend]):
                outs[name] = sdpa().transpose(1, 2)
                ms = time_ms(sdpa, warmup, repeats)
            row[name] = {"ms": ms, "tflops": f / ms / 1e9}
        except Exception as e:  # noqa: BLE001
            row[name] = {"error": short_error(e)}
        torch.cuda.empty_cache()
    if flex_fn is not None:
        try:
            mask = None
            if causal:
                mask = block_mask_fn(lambda b_, h_, q_, k_: q_ >= k_, None, None, s, s)

            def flex_call():
                return flex_fn(qt, kt, vt, block_mask=mask, enable_gqa=True)
            outs["flex"] = flex_call().transpose(1, 2)
            ms = time_ms(flex_call, warmup, repeats)
            row["flex"] = {"ms": ms, "tflops": f / ms / 1e9}
        except Exception as e:  # noqa: BLE001
            row["flex"] = {"error": short_error(e)}
    others = [row[n]["tflops"] for n in list(BACKENDS) + ["flex"]
              if n in row and "tflops" in row[n]]
    if "tflops" in row["ours"] and others:
        row["fastest_other"] = max(others)
        row["ours/fastest"] = row["ours"]["tflops"] / max(others)
    ref = next((outs[n] for n in ("sdpa_cudnn", "sdpa_efficient", "flex", "sdpa_math")
                if n in outs), None)
    if "ours" in outs and ref is not None:
        row["max_abs_diff"] = (outs["ours"].float() - ref.float()).abs().max().item()
    del q, k, v, qt, kt, vt, outs
    torch.cuda.empty_cache()
    return row


def bench_backward(s, causal, warmup, repeats, flex_fn, block_mask_fn):
    """Gemma 4's shape, forward + backward minus the forward, 2.5x the
    forward's FLOPs (bench/compare.py's convention), every path alike."""
    b, hq, hkv, d = 1, 8, 4, 512
    torch.manual_seed(0)
    q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for h in (hq, hkv, hkv))
    dout = torch.randn(b, s, hq, d, device="cuda", dtype=torch.bfloat16)
    f = 2.5 * flops(b, hq, s, d, causal)
    row = {"d": d, "heads": f"{hq}/{hkv}", "seqlen": s, "causal": causal, "pass": "bwd"}
    mask = None
    if flex_fn is not None and causal:
        mask = block_mask_fn(lambda b_, h_, q_, k_: q_ >= k_, None, None, s, s)

    def sdpa(backend):
        def call(qq, kk, vv):
            with sdpa_kernel([backend]):
                return F.scaled_dot_product_attention(
                    qq.transpose(1, 2), kk.transpose(1, 2), vv.transpose(1, 2),
                    is_causal=causal, enable_gqa=True).transpose(1, 2)
        return call
    paths = {"ours": lambda qq, kk, vv: flashjit.attention(qq, kk, vv, causal=causal),
             "sdpa_cudnn": sdpa(SDPBackend.CUDNN_ATTENTION),
             "sdpa_efficient": sdpa(SDPBackend.EFFICIENT_ATTENTION)}
    if s <= 8192:  # the math path's s x s scores, and their gradient, in memory
        paths["sdpa_math"] = sdpa(SDPBackend.MATH)
    if flex_fn is not None:
        paths["flex"] = lambda qq, kk, vv: flex_fn(
            qq.transpose(1, 2), kk.transpose(1, 2), vv.transpose(1, 2), block_mask=mask,
            enable_gqa=True).transpose(1, 2)
    for name, call in paths.items():
        try:
            with torch.no_grad():
                fwd_ms = time_ms(lambda: call(q, k, v), warmup, repeats)

            def fwd_bwd():
                call(q, k, v).backward(dout)
            total = time_ms(fwd_bwd, warmup, repeats)
            row[name] = {"ms": total - fwd_ms, "tflops": f / max(total - fwd_ms, 1e-6) / 1e9}
        except Exception as e:  # noqa: BLE001 - a failure is a result
            row[name] = {"error": short_error(e)}
        q.grad = k.grad = v.grad = None
        torch.cuda.empty_cache()
    others = [row[n]["tflops"] for n in paths if n != "ours" and "tflops" in row.get(n, {})]
    if "tflops" in row["ours"] and others:
        row["fastest_other"] = max(others)
        row["ours/fastest"] = row["ours"]["tflops"] / max(others)
    del q, k, v, dout
    torch.cuda.empty_cache()
    return row


def bench_decode(batch, length, hq, hkv, dq, dv, warmup, repeats):
    torch.manual_seed(0)
    q = torch.randn(batch, 1, hq, dq, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(batch, length, hkv, dq, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(batch, length, hkv, dv, device="cuda", dtype=torch.bfloat16)
    row = {"batch": batch, "length": length, "heads": f"{hq}/{hkv}", "d": f"{dq}/{dv}"}
    kv_bytes = k.numel() * 2 + v.numel() * 2
    f = 2 * batch * hq * length * (dq + dv)

    def ours():
        return flashjit.attention(q, k, v)
    try:
        out = ours()
        ms = time_ms(ours, warmup, repeats)
        row["ours"] = {"ms": ms, "gbs": kv_bytes / ms / 1e6, "tflops": f / ms / 1e9,
                       "hbm_fraction": kv_bytes / ms / 1e6 / hbm_peak()}
        # The fp32 reference on two sequences (all 64 would take tens of GB).
        ref = F.scaled_dot_product_attention(q[:2].transpose(1, 2).float(),
                                             k[:2].transpose(1, 2).float(),
                                             v[:2].transpose(1, 2).float(), enable_gqa=True)
        row["max_abs_diff"] = (out[:2].float() - ref.transpose(1, 2)).abs().max().item()
        del out, ref
    except Exception as e:  # noqa: BLE001
        row["ours"] = {"error": short_error(e)}
    del q, k, v
    torch.cuda.empty_cache()
    return row


def cell(r, key="tflops"):
    return f"{r[key]:.1f}" if key in r else "-"


def print_table(title, rows, names):
    """The forward's or the backward's rows: TFLOP/s of each path, and ours
    over the fastest other."""
    print(f"\n=== {title} ===")
    print("| seqlen | mask | " + " | ".join(names) + " | x fastest other |")
    print("| ---: | :--- | " + " | ".join("---:" for _ in names) + " | ---: |")
    for r in rows:
        print(f"| {r['seqlen']} | {'causal' if r['causal'] else 'full'} | " +
              " | ".join(cell(r.get(n, {})) for n in names) +
              f" | {r.get('ours/fastest', float('nan')):.2f} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", default="")
    results.add_arguments(parser)
    args = parser.parse_args()
    warmup, repeats = (2, 5) if args.quick else (5, 15)
    flex_fn, block_mask_fn = flex()
    fwd = []
    for s in ((4096, 16384) if args.quick else (4096, 8192, 16384, 32768)):
        for causal in (False, True):
            fwd.append(bench_forward(s, causal, warmup, repeats, flex_fn, block_mask_fn))
            print(json.dumps(fwd[-1]), flush=True)
    bwd = []
    for s in ((4096,) if args.quick else (4096, 8192, 16384)):
        for causal in (False, True):
            bwd.append(bench_backward(s, causal, warmup, repeats, flex_fn, block_mask_fn))
            print(json.dumps(bwd[-1]), flush=True)
    dec = []
    for batch, length, hq, hkv, dq, dv in ((8, 8192, 8, 4, 512, 512), (32, 4096, 8, 4, 512, 512),
                                           (64, 4096, 16, 1, 576, 512),
                                           (64, 4096, 64, 1, 576, 512)):
        dec.append(bench_decode(batch, length, hq, hkv, dq, dv, warmup, repeats))
        print(json.dumps(dec[-1]), flush=True)
    print_table("head dim 512 forward (TFLOP/s), Gemma 4 8/4 heads, batch 1", fwd,
                ["ours"] + list(BACKENDS) + ["flex"])
    print_table("head dim 512 backward (TFLOP/s, 2.5x the forward's FLOPs), Gemma 4 8/4 heads, "
                "batch 1", bwd, ["ours", "sdpa_cudnn", "sdpa_efficient", "sdpa_math", "flex"])
    print("\n=== decode past 256 (one token, contiguous cache) ===")
    print("| batch x length | heads | d | GB/s | % HBM | TFLOP/s |")
    print("| --- | --- | --- | ---: | ---: | ---: |")
    for r in dec:
        o = r["ours"]
        print(f"| {r['batch']} x {r['length']} | {r['heads']} | {r['d']} | {cell(o, 'gbs')} | "
              f"{100 * o.get('hbm_fraction', float('nan')):.0f} | {cell(o)} |")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"forward": fwd, "backward": bwd, "decode": dec}, out, indent=1)
    # --quick is the reduced grid the result file's command line names, as
    # bench/decode.py's.
    narrowed = False
    method = ("kernel time with the GPU kept busy (bench/compare.time_ms), median of samples; "
              "Gemma 4 global-layer shapes, bf16")
    results.publish(args, results.suite_name(args, "wide_fwd"), fwd, method, torch=torch,
                    narrowed=narrowed)
    results.publish(args, results.suite_name(args, "wide_bwd"), bwd, method, torch=torch,
                    narrowed=narrowed)
    results.publish(args, results.suite_name(args, "wide", "decode"), dec, method, torch=torch,
                    narrowed=narrowed)


if __name__ == "__main__":
    main()
