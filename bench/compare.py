"""flashjit.attention against PyTorch SDPA's flash (FlashAttention-2) and cuDNN
backends, in one process, forward and backward passes.

FlashAttention's benchmark convention: 16k tokens (batch = 16384 // seqlen),
hidden 2048 (heads = 2048 // head_dim), FLOPs 4*b*h*s^2*d, halved when causal.
Median of CUDA-event timings after warm-up. Absolute numbers move between
machines; the ratios ours/flash and ours/cudnn are the result.

--models replaces the grid with attention shapes of real models (GQA 32/8,
28/4 and 64/8 at head dim 128; head dims 40, 80 and 96; lengths 1500, 3000
and 6000, causal; the same 16k tokens): SDPA takes GQA as enable_gqa=True.

Backward (--pass bwd or both): the time of forward + backward
(torch.autograd.grad of the output with respect to q, k, v, a fixed random
dout) minus the time of the forward in the same grad mode, for every
implementation alike; backward FLOPs = 2.5 x forward FLOPs. Its table follows
the forward's.

    FLASHJIT_LIB=build/libflashjit.so python3 bench/compare.py [--quick] [--pass fwd|bwd|both]
                                                               [--json out.json] [--results DIR]

Writes the suites grid_fwd and grid_bwd (models_fwd, models_bwd with --models)
to bench/results/<gpu>/ (bench/results.py); bench/report.py renders them.
"""
import argparse
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

import flashjit  # noqa: E402
import results  # noqa: E402

BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}
TABLE_HEADER = "=== flashjit vs SDPA (forward, TFLOP/s) ==="
BWD_TABLE_HEADER = "=== flashjit vs SDPA (backward, TFLOP/s) ==="
BWD_FLOPS_FACTOR = 2.5
METHOD_FWD = ("kernel time: CUDA events over back-to-back calls, the GPU kept busy while the host "
              "enqueues them; median of {repeats} samples after {warmup} warm-up calls; "
              "TFLOP/s = 2*b*h*s^2*(d_qk + d_v) / time, halved when causal")
METHOD_BWD = ("kernel time of forward + backward minus forward, both in grad mode (CUDA events, "
              "the GPU kept busy, median of {repeats} samples after {warmup} warm-up calls); "
              "TFLOP/s = 2.5 x the forward's FLOPs / time")


def time_ms(fn, warmup, repeats, min_sample_ms=1.0):
    """Median per-call time over `repeats` CUDA-event samples after `warmup`
    calls. A sample is enough back-to-back calls to last about min_sample_ms
    (at least 3). Before each sample the GPU is kept busy for ~1 ms
    (torch.cuda._sleep) while the host enqueues the start event, the calls
    and the end event: the sample then times the kernels alone, not the
    host's launch latency (Python, ctypes, SDPA's dispatch) in front of the
    first call, which an idle GPU would otherwise wait for and count."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()

    def sample(calls):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(SLEEP_CYCLES)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / calls

    calls = max(3, min(100, math.ceil(min_sample_ms / max(sample(1), 1e-3))))
    times = sorted(sample(calls) for _ in range(repeats))
    return times[len(times) // 2]


# About 1 ms at H200 clocks: longer than the host takes to enqueue a sample.
SLEEP_CYCLES = 2_000_000


def flops(b, h, s, d, causal, dv=None):
    """2 b h s^2 (d_qk + d_v): QK^T then PV; halved when causal."""
    return 2 * b * h * s * s * (d + (dv or d)) / (2 if causal else 1)


def parse_hdim(text):
    """"128" -> (128, 128); "192/128" -> (192, 128): Q/K's head dim, then V's."""
    qk, _, v = text.partition("/")
    return int(qk), int(v or qk)


def short_error(e):
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text[:200]}"


# Attention shapes of real models, off the power-of-two grid: (label, head
# dim, query heads, KV heads, seqlen).
MODEL_SHAPES = [
    (label, d, hq, hkv, s)
    for (label, d, hq, hkv) in (("llama3-8b", 128, 32, 8), ("qwen2-7b", 128, 28, 4),
                                ("llama3-70b", 128, 64, 8), ("d40", 40, 16, 16),
                                ("phi2", 80, 32, 32), ("phi3-mini", 96, 32, 32))
    for s in (1500, 3000, 6000)
]


def bench_shape(d, causal, s, dtype, warmup, repeats, tokens, hidden, sdpa_layout, passes,
                heads=None, heads_kv=None, dv=None, model=None):
    dv = dv or d
    b, h = max(1, tokens // s), heads or hidden // d
    hkv = heads_kv or h
    row = {"hdim": d, "causal": causal, "seqlen": s, "batch": b, "heads": h}
    if model:
        row["model"] = model
    if dv != d:
        row["hdim_v"] = dv
    if hkv != h:
        row["heads_kv"] = hkv
    if "fwd" in passes:
        bench_forward(row, d, causal, s, dtype, warmup, repeats, b, h, sdpa_layout, hkv, dv)
    if "bwd" in passes:
        row["bwd"] = bench_backward(d, causal, s, dtype, warmup, repeats, b, h, sdpa_layout, hkv, dv)
    torch.cuda.empty_cache()
    return row


def bench_forward(row, d, causal, s, dtype, warmup, repeats, b, h, sdpa_layout, hkv, dv):
    torch.manual_seed(0)
    # [b, s, h, d] for flashjit; SDPA takes [b, h, s, d]: transposed views of
    # the same memory, as FlashAttention's own layout is used through SDPA.
    q = torch.randn(b, s, h, d, device="cuda", dtype=dtype)
    k = torch.randn(b, s, hkv, d, device="cuda", dtype=dtype)
    v = torch.randn(b, s, hkv, dv, device="cuda", dtype=dtype)
    gqa = {"enable_gqa": True} if hkv != h else {}
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    if sdpa_layout == "bhsd":  # SDPA on its own contiguous layout instead
        qt, kt, vt = (t.contiguous() for t in (qt, kt, vt))
    f = flops(b, h, s, d, causal, dv)
    outs = {}

    def ours():
        return flashjit.attention(q, k, v, causal=causal)

    try:
        compiles = flashjit.compile_count()
        t0 = time.perf_counter()
        outs["ours"] = ours()
        torch.cuda.synchronize()
        row["ours_first_call_ms"] = (time.perf_counter() - t0) * 1e3
        row["ours_compiled"] = flashjit.compile_count() - compiles
        ms = time_ms(ours, warmup, repeats)
        row["ours"] = {"ms": ms, "tflops": f / ms / 1e9}
    except Exception as e:  # a failure is a result, not the end of the run
        row["ours"] = {"error": short_error(e)}

    # flashjit's sm80 (mma.sync) family pinned, for the plots: the heuristic
    # takes sm90 on Hopper where it serves the head dim. A path the caller
    # pinned in the environment is put back afterwards.
    pinned = os.environ.get("FLASHJIT_KERNEL_PATH")
    os.environ["FLASHJIT_KERNEL_PATH"] = "sm80"
    try:
        ms = time_ms(ours, warmup, repeats)
        row["ours_sm80"] = {"ms": ms, "tflops": f / ms / 1e9}
    except Exception as e:
        row["ours_sm80"] = {"error": short_error(e)}
    finally:
        if pinned is None:
            del os.environ["FLASHJIT_KERNEL_PATH"]
        else:
            os.environ["FLASHJIT_KERNEL_PATH"] = pinned

    for name, backend in BACKENDS.items():
        def sdpa():
            return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal, **gqa)
        try:
            with sdpa_kernel([backend]):
                outs[name] = sdpa().transpose(1, 2)
                ms = time_ms(sdpa, warmup, repeats)
            row[name] = {"ms": ms, "tflops": f / ms / 1e9}
        except Exception as e:
            row[name] = {"error": short_error(e)}

    # Not a test (tests/python is): a sanity check that the timed kernel
    # computes attention. Printed, never fatal.
    ref = outs.get("flash", outs.get("cudnn"))
    if "ours" in outs and ref is not None:
        row["max_abs_diff_vs_" + ("flash" if "flash" in outs else "cudnn")] = (
            (outs["ours"].float() - ref.float()).abs().max().item())
    for name in ("flash", "cudnn"):
        if "tflops" in row["ours"] and "tflops" in row[name]:
            row["ours/" + name] = row["ours"]["tflops"] / row[name]["tflops"]
    del q, k, v, qt, kt, vt, outs
    torch.cuda.empty_cache()


def time_backward(forward, leaves, dout, warmup, repeats, f):
    """{"ms", "tflops", "fwd_ms", "fwd_bwd_ms"}: forward + backward minus forward,
    both in grad mode (the forward saves what its backward needs)."""
    def fwd():
        return forward()

    def fwd_bwd():
        torch.autograd.grad(forward(), leaves, dout)

    fwd_ms = time_ms(fwd, warmup, repeats)
    fb_ms = time_ms(fwd_bwd, warmup, repeats)
    ms = fb_ms - fwd_ms
    if ms <= 0:
        return {"error": f"forward+backward ({fb_ms:.3f} ms) not slower than forward ({fwd_ms:.3f} ms)"}
    return {"ms": ms, "tflops": BWD_FLOPS_FACTOR * f / ms / 1e9, "fwd_ms": fwd_ms, "fwd_bwd_ms": fb_ms}


def bench_backward(d, causal, s, dtype, warmup, repeats, b, h, sdpa_layout, hkv, dv):
    """The backward row: {"ours", "flash", "cudnn", "ours/flash", "ours/cudnn",
    "max_abs_diff_vs_flash"} (the largest difference over dq, dk, dv)."""
    out = {}
    torch.manual_seed(1)
    q = torch.randn(b, s, h, d, device="cuda", dtype=dtype, requires_grad=True)
    k = torch.randn(b, s, hkv, d, device="cuda", dtype=dtype, requires_grad=True)
    v = torch.randn(b, s, hkv, dv, device="cuda", dtype=dtype, requires_grad=True)
    gqa = {"enable_gqa": True} if hkv != h else {}
    dout = torch.randn(b, s, h, dv, device="cuda", dtype=dtype)
    f = flops(b, h, s, d, causal, dv)
    grads = {}

    def ours():
        return flashjit.attention(q, k, v, causal=causal)

    try:
        compiles = flashjit.compile_count()
        t0 = time.perf_counter()
        grads["ours"] = torch.autograd.grad(ours(), (q, k, v), dout)
        torch.cuda.synchronize()
        out["ours_first_call_ms"] = (time.perf_counter() - t0) * 1e3
        out["ours_compiled"] = flashjit.compile_count() - compiles
        out["ours"] = time_backward(ours, (q, k, v), dout, warmup, repeats, f)
    except Exception as e:  # a failure is a result, not the end of the run
        out["ours"] = {"error": short_error(e)}

    # SDPA: bshd gives it transposed views of the same leaves (its gradients
    # come back as [b, s, h, d]); bhsd gives it contiguous [b, h, s, d] leaves.
    if sdpa_layout == "bhsd":
        leaves = tuple(t.detach().transpose(1, 2).contiguous().requires_grad_() for t in (q, k, v))
        dout_t = dout.transpose(1, 2).contiguous()

        def sdpa():
            return F.scaled_dot_product_attention(*leaves, is_causal=causal, **gqa)

        def to_bshd(gs):
            return [g.transpose(1, 2) for g in gs]
    else:
        leaves = (q, k, v)
        dout_t = dout.transpose(1, 2)

        def sdpa():
            return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                                  v.transpose(1, 2), is_causal=causal, **gqa)

        def to_bshd(gs):
            return list(gs)

    for name, backend in BACKENDS.items():
        try:
            with sdpa_kernel([backend]):
                g = to_bshd(torch.autograd.grad(sdpa(), leaves, dout_t))
                if name == "flash" or "flash" not in grads:
                    grads[name] = g
                out[name] = time_backward(sdpa, leaves, dout_t, warmup, repeats, f)
        except Exception as e:
            out[name] = {"error": short_error(e)}

    ref_name = "flash" if "flash" in grads else "cudnn"
    if "ours" in grads and ref_name in grads:
        out["max_abs_diff_vs_" + ref_name] = max(
            (a.float() - r.float()).abs().max().item() for a, r in zip(grads["ours"], grads[ref_name]))
    for name in ("flash", "cudnn"):
        if "tflops" in out["ours"] and "tflops" in out[name]:
            out["ours/" + name] = out["ours"]["tflops"] / out[name]["tflops"]
    return out  # the tensors go with this frame; bench_shape empties the cache


def bwd_view(r):
    """A backward row shaped like a forward row, for the table and geomeans."""
    keys = ("model", "hdim", "hdim_v", "causal", "seqlen", "batch", "heads", "heads_kv")
    return {**{k: r[k] for k in keys if k in r}, **r["bwd"]}


def geomean(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def hdim_label(r):
    return f"{r['hdim']}/{r['hdim_v']}" if "hdim_v" in r else str(r["hdim"])


def summarize(rows):
    out = {}
    for d in sorted({hdim_label(r) for r in rows}, key=lambda x: [int(p) for p in x.split("/")]):
        sel = [r for r in rows if hdim_label(r) == d]
        out[f"hdim{d}"] = {k: geomean([r.get(k) for r in sel]) for k in ("ours/flash", "ours/cudnn")}
    out["all"] = {k: geomean([r.get(k) for r in rows]) for k in ("ours/flash", "ours/cudnn")}
    return out


def fmt_t(x):
    return f"{x['tflops']:7.1f}" if "tflops" in x else "    err"


def fmt_r(x):
    return f"{x:6.2f}" if x is not None else "     -"


def print_row(r, tol):
    diff_key = next((k for k in r if k.startswith("max_abs_diff")), None)
    diff = r.get(diff_key)
    check = "-" if diff is None else f"{diff:.1e}" + ("" if diff < tol else " LARGE")
    mask = "causal" if r["causal"] else "full"
    heads = f"{r['heads']}/{r['heads_kv']}" if "heads_kv" in r else f"{r['heads']}"
    print(f"| {hdim_label(r):>4s} | {mask:6s} | {r['seqlen']:6d} | {r['batch']:3d}x{heads:<5s} | "
          f"{fmt_t(r['ours'])} | {fmt_t(r['flash'])} | {fmt_t(r['cudnn'])} | "
          f"{fmt_r(r.get('ours/flash'))} | {fmt_r(r.get('ours/cudnn'))} | {check:>12s} |", flush=True)


def print_header():
    print("| hdim | mask   | seqlen |  b x h    |    ours |   flash |   cudnn | /flash | /cudnn | max|ours-ref| |")
    print("| ---: | :---   | -----: | --------: | ------: | ------: | ------: | -----: | -----: | -----------: |",
          flush=True)


def print_summary(summary):
    for key, g in summary.items():
        print(f"geomean {key:11s}: ours/flash {fmt_r(g['ours/flash'])}   ours/cudnn {fmt_r(g['ours/cudnn'])}")


def print_table(header, env, args, rows, tol):
    print()
    print(header)
    print(f"{env['device']} | {args.dtype} | tokens {args.tokens} | hidden {args.hidden} | "
          f"median of {args.repeats} after {args.warmup} warm-up")
    print_header()
    for r in rows:
        print_row(r, tol)
    summary = summarize(rows)
    print_summary(summary)
    return summary


def publish(args, rows, passes):
    """The result files: <base>_fwd and <base>_bwd, base grid (or models). A
    grid other than the default one (--hdims, --seqlens, --masks, --tokens,
    --hidden) is written only under a --suite name of its own."""
    defaults = {"hdims": "64,128,256", "seqlens": "512,1024,2048,4096,8192,16384",
                "masks": "full,causal", "tokens": 16384, "hidden": 2048}
    if args.quick:
        defaults["seqlens"] = "1024,8192"
    narrowed = not args.models and any(getattr(args, k) != v for k, v in defaults.items())
    base = "models" if args.models else "grid"
    config = {"dtype": args.dtype, "tokens": args.tokens, "hidden": args.hidden,
              "warmup": args.warmup, "repeats": args.repeats, "sdpa_layout": args.sdpa_layout}
    if "fwd" in passes:
        results.publish(args, results.suite_name(args, base, "fwd"),
                        [{k: v for k, v in r.items() if k != "bwd"} for r in rows],
                        METHOD_FWD.format(**config), config, torch, flashjit.version(), narrowed)
    if "bwd" in passes:
        results.publish(args, results.suite_name(args, base, "bwd"), [bwd_view(r) for r in rows],
                        METHOD_BWD.format(**config), config, torch, flashjit.version(), narrowed)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hdims", default="64,128,256",
                    help="comma list; 192/128 is Q/K's head dim 192 with V's 128")
    ap.add_argument("--seqlens", default="512,1024,2048,4096,8192,16384")
    ap.add_argument("--masks", default="full,causal", help="comma list of full, causal")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    ap.add_argument("--pass", dest="passes", default="both", choices=["fwd", "bwd", "both"],
                    help="forward, backward (fwd+bwd minus fwd, 2.5x the FLOPs) or both (default)")
    ap.add_argument("--quick", action="store_true", help="a reduced grid: seqlens 1024,8192")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=30, help="timed runs per shape (median; >= 20)")
    ap.add_argument("--tokens", type=int, default=16384, help="batch * seqlen")
    ap.add_argument("--hidden", type=int, default=2048, help="heads * head_dim")
    ap.add_argument("--sdpa-layout", default="bshd", choices=["bshd", "bhsd"],
                    help="bshd: SDPA gets transposed views of ours' [b,s,h,d] tensors (default); "
                         "bhsd: contiguous [b,h,s,d] copies")
    ap.add_argument("--models", action="store_true",
                    help="real models' shapes (MODEL_SHAPES, causal) instead of the grid")
    ap.add_argument("--json", help="write every row and the geometric means here")
    results.add_arguments(ap)
    args = ap.parse_args()
    if args.repeats < 20:
        ap.error("--repeats must be at least 20")
    if args.quick:
        args.seqlens = "1024,8192"
    passes = ("fwd", "bwd") if args.passes == "both" else (args.passes,)
    hdims = [parse_hdim(x) for x in args.hdims.split(",")]
    seqlens = [int(x) for x in args.seqlens.split(",")]
    masks = [m.strip() for m in args.masks.split(",")]
    if not set(masks) <= {"full", "causal"}:
        ap.error("--masks takes full and/or causal")
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    tol = 2e-2 if args.dtype == "bf16" else 5e-3
    # Gradients of random inputs reach a few units: a looser sanity bound.
    bwd_tol = 2.5e-1 if args.dtype == "bf16" else 5e-2

    torch.backends.cuda.matmul.allow_tf32 = False
    env = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
           "flashjit": flashjit.version(), "dtype": args.dtype,
           "date": time.strftime("%Y-%m-%d %H:%M:%S"), "warmup": args.warmup, "repeats": args.repeats,
           "sdpa_layout": args.sdpa_layout, "pass": args.passes}
    print(" | ".join(f"{k} {v}" for k, v in env.items()), flush=True)
    print_header()
    rows = []
    if args.models:
        shapes = [(d, d, True, s, hq, hkv, label) for (label, d, hq, hkv, s) in MODEL_SHAPES]
    else:
        shapes = [(d, dv, mask == "causal", s, None, None, None)
                  for d, dv in hdims for mask in masks for s in seqlens]
    for d, dv, causal, s, hq, hkv, label in shapes:
        r = bench_shape(d, causal, s, dtype, args.warmup, args.repeats,
                        args.tokens, args.hidden, args.sdpa_layout, passes, hq, hkv, dv, label)
        rows.append(r)
        if "fwd" in passes:
            print_row(r, tol)
            for name in ("ours", "flash", "cudnn"):
                if "error" in r[name]:
                    print(f"    {name}: {r[name]['error']}", flush=True)
        if "bwd" in passes:
            print("bwd", end=" ")
            print_row(bwd_view(r), bwd_tol)
            for name in ("ours", "flash", "cudnn"):
                if "error" in r["bwd"][name]:
                    print(f"    bwd {name}: {r['bwd'][name]['error']}", flush=True)

    # The whole tables again at the end, where a log's tail shows them.
    result = {"env": env, "rows": rows}
    if "fwd" in passes:
        result["geomean"] = print_table(TABLE_HEADER, env, args, rows, tol)
    if "bwd" in passes:
        result["geomean_bwd"] = print_table(BWD_TABLE_HEADER, env, args,
                                            [bwd_view(r) for r in rows], bwd_tol)
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=1)
        print(f"wrote {args.json}")
    publish(args, rows, passes)
    errors = sum("error" in r["ours"] for r in rows if "ours" in r)
    errors += sum("error" in r["bwd"]["ours"] for r in rows if "bwd" in r)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
