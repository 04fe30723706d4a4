"""Decode: one query token per sequence against a long KV cache, flashjit
against PyTorch SDPA's flash (FlashAttention-2) and cuDNN backends in one
process.

Llama-3-8B's attention shape by default: 32 query heads, 8 KV heads, head dim
128, bf16. GB/s = bytes of K and V read (batch * seqlen_k * heads_kv *
head_dim * 2 tensors * 2 bytes) / time, against HBM's 4.8 TB/s. Two times:
kernel time (back-to-back calls with the GPU kept busy, as compare.py) and
call latency (one call on an idle GPU, from the Python call to the end of
the kernel). SDPA gets the KV heads as they are with enable_gqa=True where
the backend accepts it, else K and V repeated to the query heads (its
bytes are still counted as the cache's: what a caller has to read).

    FLASHJIT_LIB=build/libflashjit.so python3 bench/decode.py [--quick] [--json out.json]
        [--rows 1x8192,8x8192] [--splits N] [--pack on|off|auto] [--pages 64,16] [--results DIR]

flashjit also runs attention_with_kvcache over the same keys in a paged cache
(--pages: page sizes; shuffled page tables, cache_seqlens = the KV length),
columns p64, p16: GB/s and the ratio to the contiguous call.

Writes the suites decode and decode_paged to bench/results/<gpu>/
(bench/results.py).
"""
import argparse
import json
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
from compare import short_error  # noqa: E402
from latency import latency_us  # noqa: E402

BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}
TABLE_HEADER = "=== flashjit vs SDPA (decode, GB/s of K/V) ==="
# batch x KV length: one long sequence, a serving batch, many short ones,
# and 128k keys.
ROWS = [(1, 8192), (8, 8192), (64, 4096), (256, 1024), (16, 32768), (1, 131072)]
HBM_GBS = 4800.0
METHOD = ("kernel time: CUDA events over 50 back-to-back calls, the GPU kept busy for twice "
          "the time the host takes to enqueue them; median of {repeats} samples after {warmup} "
          "warm-up calls; GB/s = bytes of K and V / time; latency: one call on an idle GPU, "
          "Python call to kernel end, median of 20")


def time_ms(fn, warmup, repeats, calls=50):
    """Median per-call kernel time over `repeats` samples of `calls`
    back-to-back calls, the GPU kept busy (torch.cuda._sleep) for longer than
    the host takes to enqueue them all: decode kernels take ~10 us, less than
    a Python call costs the host, so compare.py's fixed ~1 ms of sleep would
    time the host. The sleep covers twice the measured enqueue time."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    host_s = time.perf_counter() - t0
    torch.cuda.synchronize()
    # torch.cuda._sleep spins cycles; ~2 GHz on an H200.
    sleep_cycles = int(max(2 * host_s, 1e-3) * 2e9)
    times = []
    for _ in range(repeats):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(sleep_cycles)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / calls)
    times.sort()
    return times[len(times) // 2]


def latency_ms(fn, repeats=20):
    """Median wall time of one call on an idle GPU, Python call to kernel end."""
    return latency_us(fn, repeats, warmup=3) / 1e3


def paged_cache(k, v, page):
    """k, v [b, s, h, d] as a paged cache with a shuffled page table:
    (k_cache, v_cache, block_table)."""
    b, s, h, d = k.shape
    width = s // page
    order = torch.randperm(b * width, device=k.device)
    k_cache = torch.empty(b * width, page, h, d, device=k.device, dtype=k.dtype)
    v_cache = torch.empty_like(k_cache)
    k_cache[order] = k.reshape(b * width, page, h, d)
    v_cache[order] = v.reshape(b * width, page, h, d)
    return k_cache, v_cache, order.to(torch.int32).reshape(b, width)


def bench_row(b, sk, hq, hkv, d, dtype, warmup, repeats, splits, pack, pages=()):
    torch.manual_seed(0)
    q = torch.randn(b, 1, hq, d, device="cuda", dtype=dtype)
    k = torch.randn(b, sk, hkv, d, device="cuda", dtype=dtype)
    v = torch.randn(b, sk, hkv, d, device="cuda", dtype=dtype)
    kv_bytes = 2 * b * sk * hkv * d * q.element_size()
    row = {"batch": b, "seqlen_k": sk, "heads_q": hq, "heads_kv": hkv, "hdim": d,
           "kv_bytes": kv_bytes}
    outs = {}

    def ours():
        return flashjit.attention(q, k, v, num_splits=splits, pack_gqa=pack)

    try:
        outs["ours"] = ours()
        ms = time_ms(ours, warmup, repeats)
        row["ours"] = {"ms": ms, "gbs": kv_bytes / ms / 1e6, "latency_ms": latency_ms(ours)}
    except Exception as e:  # a failure is a result, not the end of the run
        row["ours"] = {"error": short_error(e)}

    lens = torch.full((b,), sk, dtype=torch.int32, device="cuda")
    for page in pages:
        key = f"p{page}"
        if sk % page:
            row[key] = {"error": f"seqlen_k {sk} is not a multiple of page {page}"}
            continue
        k_cache, v_cache, table = paged_cache(k, v, page)

        def paged():
            return flashjit.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens,
                                                   block_table=table, num_splits=splits)
        try:
            outs[key] = paged()
            ms = time_ms(paged, warmup, repeats)
            row[key] = {"ms": ms, "gbs": kv_bytes / ms / 1e6, "latency_ms": latency_ms(paged)}
        except Exception as e:
            row[key] = {"error": short_error(e)}
        del k_cache, v_cache
        torch.cuda.empty_cache()

    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    for name, backend in BACKENDS.items():
        for gqa in (True, False):
            if gqa:
                def sdpa():
                    return F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True)
            else:
                rep = hq // hkv
                ke, ve = (t.repeat_interleave(rep, dim=1) for t in (kt, vt))

                def sdpa():
                    return F.scaled_dot_product_attention(qt, ke, ve)
            try:
                with sdpa_kernel([backend]):
                    outs[name] = sdpa().transpose(1, 2)
                    ms = time_ms(sdpa, warmup, repeats)
                    lat = latency_ms(sdpa)
                row[name] = {"ms": ms, "gbs": kv_bytes / ms / 1e6, "latency_ms": lat,
                             "gqa": gqa}
                break
            except Exception as e:
                row[name] = {"error": short_error(e)}
        torch.cuda.empty_cache()

    ref = outs.get("cudnn", outs.get("flash"))
    if ref is not None and "ours" in outs:
        row["max_abs_diff"] = float((outs["ours"].float() - ref.float()).abs().max())
    for page in pages:
        if ref is not None and f"p{page}" in outs:
            row[f"p{page}"]["max_abs_diff"] = float(
                (outs[f"p{page}"].float() - ref.float()).abs().max())
    return row


def fmt(r, key="gbs"):
    return f"{r[key]:7.0f}" if key in r else "    err"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="three rows, fewer repeats")
    ap.add_argument("--rows", default="", help="BxS,BxS,... (default: ROWS)")
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--heads-kv", type=int, default=8)
    ap.add_argument("--hdim", type=int, default=128)
    ap.add_argument("--splits", type=int, default=0, help="0: flashjit's heuristic")
    ap.add_argument("--pack", choices=["auto", "on", "off"], default="auto")
    ap.add_argument("--pages", default="64,16",
                    help="page sizes of the paged-cache columns ('' for none)")
    ap.add_argument("--json", default="")
    results.add_arguments(ap)
    args = ap.parse_args()
    rows = ROWS
    if args.rows:
        rows = [tuple(int(x) for x in r.split("x")) for r in args.rows.split(",")]
    elif args.quick:
        rows = [ROWS[0], ROWS[2], ROWS[5]]
    pack = {"auto": None, "on": True, "off": False}[args.pack]
    pages = [int(x) for x in args.pages.split(",") if x]
    warmup, repeats = (3, 10) if args.quick else (5, 20)

    measured = []
    for b, sk in rows:
        measured.append(bench_row(b, sk, args.heads, args.heads_kv, args.hdim, torch.bfloat16,
                                 warmup, repeats, args.splits, pack, pages))
        r = measured[-1]
        print(json.dumps(r), flush=True)

    print()
    print(TABLE_HEADER)
    print(f"bf16, {args.heads}/{args.heads_kv} heads, d={args.hdim}, 1 query; kernel time "
          f"(GPU kept busy), GB/s of K+V; latency: one call on an idle GPU (us)")
    paged_cols = "".join(f" p{p} | p{p}/contig |" for p in pages)
    print("| batch x KV | flashjit | FA2 | cuDNN | x cuDNN | x FA2 | % HBM | lat ours | lat cuDNN |"
          + paged_cols)
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |" + " ---: |" * 2 * len(pages))
    ratios = []
    for r in measured:
        o, f, c = r["ours"], r["flash"], r["cudnn"]
        xc = o["gbs"] / c["gbs"] if "gbs" in o and "gbs" in c else float("nan")
        xf = o["gbs"] / f["gbs"] if "gbs" in o and "gbs" in f else float("nan")
        if xc == xc:
            ratios.append(xc)
        hbm = 100 * o["gbs"] / HBM_GBS if "gbs" in o else float("nan")
        lo = o.get("latency_ms", float("nan")) * 1e3
        lc = c.get("latency_ms", float("nan")) * 1e3
        paged = ""
        for p in pages:
            pr = r.get(f"p{p}", {})
            ratio = pr["gbs"] / o["gbs"] if "gbs" in pr and "gbs" in o else float("nan")
            paged += f" {fmt(pr)} | {ratio:.2f} |"
        print(f"| {r['batch']} x {r['seqlen_k']} | {fmt(o)} | {fmt(f)} | {fmt(c)} | {xc:.2f} | "
              f"{xf:.2f} | {hbm:.0f} | {lo:.0f} | {lc:.0f} |" + paged)
    if ratios:
        geo = 1.0
        for x in ratios:
            geo *= x
        geo **= 1 / len(ratios)
        print(f"geometric mean x cuDNN: {geo:.3f} over {len(ratios)} rows")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(measured, fh, indent=1)
    publish(args, measured, pages, warmup, repeats)


def publish(args, measured, pages, warmup, repeats):
    """decode: the contiguous call and SDPA's backends; decode_paged: the
    paged cache's columns beside the contiguous call. Rows other than the
    default table's (--rows, --heads, --heads-kv, --hdim, --splits, --pack)
    are written only under a --suite name."""
    narrowed = bool(args.rows) or (args.heads, args.heads_kv, args.hdim, args.splits,
                                   args.pack) != (32, 8, 128, 0, "auto")
    config = {"dtype": "bf16", "warmup": warmup, "repeats": repeats, "pages": pages}
    method = METHOD.format(warmup=warmup, repeats=repeats)
    shape = ("batch", "seqlen_k", "heads_q", "heads_kv", "hdim")
    page_keys = {f"p{p}" for p in pages}
    results.publish(args, results.suite_name(args, "decode"),
                    [{k: v for k, v in r.items() if k not in page_keys} for r in measured],
                    method, config, torch, flashjit.version(), narrowed)
    if pages:
        paged = [dict({k: r[k] for k in shape}, contiguous=r["ours"],
                      **{k: r[k] for k in sorted(page_keys)}) for r in measured]
        results.publish(args, results.suite_name(args, "decode", "paged"), paged, method, config,
                        torch, flashjit.version(), narrowed)


if __name__ == "__main__":
    main()
