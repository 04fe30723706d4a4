"""Packed varlen batches (flashjit.attention_varlen) against the dense kernel
and PyTorch SDPA's flash and cuDNN backends, in one process, forward and
backward, TFLOP/s on the real tokens:

(a) equal lengths: 4 x 8192 packed against flashjit.attention's dense batch
    4 x 8192, d = 64/128/256, full and causal (the bar: >= 0.95x);
(b) a realistic packed batch: 16 documents of lengths drawn from 128..8192
    (fixed seed) totalling ~32k tokens, against the dense kernel at the same
    total tokens (4 x 8192), against the dense kernel over 16 sequences of
    the documents' mean length (same tokens, same count: what the lengths
    allow apart from their spread), against padding every document to the longest
    with SDPA's cuDNN and flash backends, and against a Python loop over the
    documents with flashjit.attention (the bars: >= 0.9x dense and >= 1.5x
    padded cuDNN).

Timing as bench/compare.py (median of CUDA-event samples with the GPU kept
busy), flashjit's sides measured in --rounds interleaved rounds (median); backward = forward + backward minus forward, FLOPs 2.5x the forward's;
FLOPs 4*h*lq*lk*d per document, halved when causal.

    FLASHJIT_LIB=build/libflashjit.so python3 bench/varlen.py [--quick] [--json out.json]
                                                              [--results DIR]

Writes the suite varlen to bench/results/<gpu>/ (bench/results.py).
"""
import argparse
import json
import os
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

import flashjit  # noqa: E402
import results  # noqa: E402
from compare import short_error, time_backward, time_ms  # noqa: E402

TABLE_HEADER = "=== flashjit varlen (TFLOP/s on real tokens) ==="
HIDDEN = 2048
METHOD = ("kernel time as bench/compare.py's (the GPU kept busy, median of {repeats} samples "
          "after {warmup} warm-up calls), flashjit's sides in {rounds} interleaved rounds "
          "(median); backward = forward + backward minus forward, 2.5x the FLOPs; TFLOP/s on "
          "the real tokens: 4*h*l^2*d per document, halved when causal")


def doc_flops(lens, h, d, causal):
    return sum(4 * h * n * n * d / (2 if causal else 1) for n in lens)


def cumulative(lens):
    out = [0]
    for n in lens:
        out.append(out[-1] + n)
    return torch.tensor(out, dtype=torch.int32, device="cuda")


def measure(forward, leaves, f, warmup, repeats, passes):
    """{"fwd": TFLOP/s, "bwd": TFLOP/s} (or an error string per pass)."""
    out = {}
    try:
        if "fwd" in passes:
            with torch.no_grad():
                ms = time_ms(forward, warmup, repeats)
            out["fwd"] = f / ms / 1e9
        if "bwd" in passes:
            r = time_backward(forward, leaves, torch.randn_like(forward()), warmup, repeats, f)
            out["bwd"] = r.get("tflops", r.get("error"))
    except Exception as e:  # a failure is a result, not the end of the run
        out["error"] = short_error(e)
    return out


def interleaved(measures, rounds):
    """{name: result} for {name: () -> measure(...) result}, each measured
    `rounds` times in turn (A, B, C, A, B, C, ...) and reduced to the median
    per pass: the clocks' drift over a run then moves every side alike, so
    the ratios between them hold (one round per side read the d=256 packed
    forward at 0.90x and 1.03x the dense kernel in two runs of one build)."""
    samples = {name: [] for name in measures}
    for _ in range(rounds):
        for name, m in measures.items():
            samples[name].append(m())
    out = {}
    for name, results in samples.items():
        merged = {}
        for key in {k for r in results for k in r}:
            values = sorted(r[key] for r in results if isinstance(r.get(key), float))
            if values:
                merged[key] = values[len(values) // 2]
            else:
                merged[key] = next(r[key] for r in results if key in r)
        out[name] = merged
    return out


def packed_inputs(lens, h, d, requires_grad):
    t = sum(lens)
    make = lambda: torch.randn(t, h, d, device="cuda", dtype=torch.bfloat16,  # noqa: E731
                               requires_grad=requires_grad)
    return make(), make(), make()


def bench_equal(d, causal, warmup, repeats, passes, rounds):
    h, b, s = HIDDEN // d, 4, 8192
    f = doc_flops([s] * b, h, d, causal)
    q, k, v = packed_inputs([s] * b, h, d, True)
    cu = cumulative([s] * b)
    qd, kd, vd = (t.detach().view(b, s, h, d).requires_grad_() for t in (q, k, v))
    row = {"case": f"equal 4x8192 d={d} {'causal' if causal else 'full'}"}
    row.update(interleaved({
        "varlen": lambda: measure(
            lambda: flashjit.attention_varlen(q, k, v, cu, cu, s, s, causal=causal), (q, k, v), f,
            warmup, repeats, passes),
        "dense": lambda: measure(lambda: flashjit.attention(qd, kd, vd, causal=causal),
                                 (qd, kd, vd), f, warmup, repeats, passes),
    }, rounds))
    return row


def document_lengths(seed=0, docs=16, total=32768):
    rng = random.Random(seed)
    lens = [rng.randint(128, 8192) for _ in range(docs)]
    scale = total / sum(lens)
    return [max(128, min(8192, int(n * scale) // 8 * 8)) for n in lens]


def bench_mixed(d, causal, warmup, repeats, passes, rounds):
    h = HIDDEN // d
    lens = document_lengths()
    f = doc_flops(lens, h, d, causal)
    q, k, v = packed_inputs(lens, h, d, True)
    cu, longest = cumulative(lens), max(lens)
    row = {"case": f"16 docs ({sum(lens)} tokens, longest {longest}) d={d} "
                   f"{'causal' if causal else 'full'}", "lens": lens}
    # The dense kernel at the same total tokens: its TFLOP/s is the bar.
    b, s = 4, 8192
    qd, kd, vd = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16,
                              requires_grad=True) for _ in range(3))
    # The dense kernel over as many sequences of the mean length (same
    # tokens, same count): what the documents' lengths allow, apart from
    # their spread.
    mean = sum(lens) // len(lens) // 8 * 8
    qm, km, vm = (torch.randn(len(lens), mean, h, d, device="cuda", dtype=torch.bfloat16,
                              requires_grad=True) for _ in range(3))
    row.update(interleaved({
        "varlen": lambda: measure(
            lambda: flashjit.attention_varlen(q, k, v, cu, cu, longest, longest, causal=causal),
            (q, k, v), f, warmup, repeats, passes),
        "dense_same_tokens": lambda: measure(
            lambda: flashjit.attention(qd, kd, vd, causal=causal), (qd, kd, vd),
            doc_flops([s] * b, h, d, causal), warmup, repeats, passes),
        "dense_mean_length": lambda: measure(
            lambda: flashjit.attention(qm, km, vm, causal=causal), (qm, km, vm),
            doc_flops([mean] * len(lens), h, d, causal), warmup, repeats, passes),
    }, rounds))
    # Padding every document to the longest, for SDPA ([b, h, s, d]): the
    # padding's work is done and wasted; TFLOP/s counts the real tokens'.
    n = len(lens)
    qp, kp, vp = (torch.randn(n, h, longest, d, device="cuda", dtype=torch.bfloat16,
                              requires_grad=True) for _ in range(3))
    for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION),
                          ("flash", SDPBackend.FLASH_ATTENTION)):
        def sdpa(backend=backend):
            with sdpa_kernel([backend]):
                return F.scaled_dot_product_attention(qp, kp, vp, is_causal=causal)
        row[f"padded_{name}"] = measure(sdpa, (qp, kp, vp), f, warmup, repeats, passes)
    # A loop over the documents with the dense call.
    bounds = list(zip(cu[:-1].tolist(), cu[1:].tolist()))

    def loop():
        return torch.cat([flashjit.attention(q[a:e][None], k[a:e][None], v[a:e][None],
                                             causal=causal)[0] for a, e in bounds])
    row["loop"] = measure(loop, (q, k, v), f, warmup, repeats, passes)
    return row


def fmt(r, key):
    x = r.get(key)
    return f"{x:7.1f}" if isinstance(x, float) else "    err"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="d=128 only, fewer repeats")
    ap.add_argument("--pass", dest="passes", choices=["fwd", "bwd", "both"], default="both")
    ap.add_argument("--json", default="")
    ap.add_argument("--rounds", type=int, default=3,
                    help="interleaved rounds of flashjit's sides (varlen, dense), median kept")
    ap.add_argument("--dims", default="", help="head dims, e.g. 64,256 (default: 64,128,256; "
                                               "--quick: 128)")
    results.add_arguments(ap)
    args = ap.parse_args()
    passes = ("fwd", "bwd") if args.passes == "both" else (args.passes,)
    dims = (128,) if args.quick else (64, 128, 256)
    if args.dims:
        dims = tuple(int(x) for x in args.dims.split(","))
    warmup, repeats = (3, 7) if args.quick else (5, 15)
    rows = []
    for d in dims:
        for causal in (False, True):
            rows.append(bench_equal(d, causal, warmup, repeats, passes, args.rounds))
            print(json.dumps(rows[-1]), flush=True)
            rows.append(bench_mixed(d, causal, warmup, repeats, passes, args.rounds))
            print(json.dumps(rows[-1]), flush=True)
    print()
    print(TABLE_HEADER)
    for p in passes:
        print(f"-- {p}: varlen | dense (same tokens) | x dense | dense (docs' mean length) | "
              f"x dense | padded cuDNN | x cuDNN | padded FA2 | loop")
        for r in rows:
            v = r["varlen"]
            dense = r.get("dense", r.get("dense_same_tokens", {}))
            ratio = (v[p] / dense[p] if isinstance(v.get(p), float)
                     and isinstance(dense.get(p), float) else float("nan"))
            mean = r.get("dense_mean_length", {})
            xm = (v[p] / mean[p] if isinstance(v.get(p), float)
                  and isinstance(mean.get(p), float) else float("nan"))
            cudnn = r.get("padded_cudnn", {})
            xc = (v[p] / cudnn[p] if isinstance(v.get(p), float)
                  and isinstance(cudnn.get(p), float) else float("nan"))
            print(f"| {r['case']} | {fmt(v, p)} | {fmt(dense, p)} | {ratio:.2f} | "
                  f"{fmt(mean, p)} | {xm:.2f} | {fmt(cudnn, p)} | {xc:.2f} | {fmt(r.get('padded_flash', {}), p)} | "
                  f"{fmt(r.get('loop', {}), p)} |")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    # Head dims other than the default ones are written only under a --suite name.
    config = {"dtype": "bf16", "hidden": HIDDEN, "warmup": warmup, "repeats": repeats,
              "rounds": args.rounds, "dims": list(dims), "passes": list(passes)}
    results.publish(args, results.suite_name(args, "varlen"), rows,
                    METHOD.format(**config), config, torch, flashjit.version(),
                    narrowed=bool(args.dims))


if __name__ == "__main__":
    main()
