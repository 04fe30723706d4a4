"""A serving-like batch: decode steps and prefill chunks over one
paged KV cache, as a continuous-batching server sends them, in one process.

The batch (fixed seed): 48 decode sequences (1 query each) with 1k-32k keys,
and 4 prefill chunks of 512-2048 new queries whose keys are their cached
prefix (1k-30k) plus themselves; causal, aligned bottom-right per sequence (a
decode query sees all its keys, a chunk its whole prefix). Llama-3-8B's
attention: 32 query heads, 8 KV heads, d=128, bf16. The keys sit in a paged
cache (page sizes 16 and 64 by default) at shuffled pages.

Rows (each timed as bench/decode.py times: back-to-back calls with the GPU
kept busy by torch.cuda._sleep, CUDA events, the median):
  mixed    the one serving call: flashjit.attention_varlen with block_table
           and seqused_k over all 52 sequences;
  decode   the decode part alone: flashjit.attention_with_kvcache over the
           48 decode sequences (same pages);
  prefill  the prefill part alone: the serving call over the 4 chunks;
  sum      decode + prefill, and mixed / sum (< 1: the one call wins);
  decode in mixed  the decode sequences' K/V bytes over (mixed - prefill): the
           decode part's bandwidth inside the one call;
  2 calls  decode then prefill, timed together;
  cuDNN    PyTorch SDPA's cuDNN backend on the padded dense equivalent: each
           sequence's keys gathered into [52, max_k] and its queries into
           [52, max_q], a mask hiding the padding and aligning causal
           bottom-right (GQA as SDPA takes it, enable_gqa or K/V repeated).
           Its work covers the padding; TFLOP/s counts the real FLOPs only.
           Also the same padded shapes without a mask ("no mask": timing
           only, the padded dense work alone, which attends to the padding).
TFLOP/s: 4 * heads_q * d per (query, visible key) pair. GB/s: the K and V
bytes of the sequences' keys (for decode, the 48 decode sequences' keys),
against HBM's 4.8 TB/s. A row that fails prints its error and the run goes
on. Printed as JSON rows, then a table; --json writes them to a file.

    FLASHJIT_LIB=build/libflashjit.so python3 bench/serving.py [--quick] [--json out.json]
        [--pages 16,64] [--seed 0] [--decodes 48] [--prefills 4] [--no-cudnn] [--results DIR]

Writes the suite serving to bench/results/<gpu>/ (bench/results.py).
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
from compare import short_error  # noqa: E402
from decode import HBM_GBS, time_ms  # noqa: E402

TABLE_HEADER = "=== flashjit serving batch: one mixed call vs decode + prefill, cuDNN padded ==="
HEADS_Q, HEADS_KV, HDIM = 32, 8, 128
DTYPE = torch.bfloat16
METHOD = ("kernel time as bench/decode.py's (back-to-back calls, the GPU kept busy, median of "
          "{repeats} samples after {warmup} warm-up calls), flashjit's rows in {rounds} "
          "interleaved rounds (median); TFLOP/s: 4*heads_q*d per visible (query, key) pair; "
          "GB/s: the sequences' K and V bytes / time")


def workload(seed, decodes, prefills):
    """(lens_q, lens_k): the decode sequences first, then the chunks."""
    rng = random.Random(seed)
    dec_keys = [rng.randint(1024, 32768) for _ in range(decodes)]
    chunks = [rng.randint(512, 2048) for _ in range(prefills)]
    prefixes = [rng.randint(1024, 32768 - 2048) for _ in range(prefills)]
    lens_q = [1] * decodes + chunks
    lens_k = dec_keys + [p + c for p, c in zip(prefixes, chunks)]
    return lens_q, lens_k


def cumulative(lens):
    out = [0]
    for n in lens:
        out.append(out[-1] + n)
    return out


def pairs(lq, lk):
    """(query, key) pairs a causal bottom-right sequence computes: query r
    sees min(lk, max(0, r + lk - lq + 1)) keys."""
    if lk >= lq:
        return lq * lk - lq * (lq - 1) // 2
    return lk * (lk + 1) // 2


def flops(lens_q, lens_k):
    return sum(4 * HEADS_Q * HDIM * pairs(a, b) for a, b in zip(lens_q, lens_k))


def kv_bytes(lens_k):
    return 2 * sum(lens_k) * HEADS_KV * HDIM * torch.finfo(DTYPE).bits // 8


def paged_cache(keys, values, lens_k, page, seed):
    """The packed keys/values [total_k, heads_kv, d] as a paged cache at
    shuffled pages: (k_cache, v_cache, block_table int32 [batch, width])."""
    counts = [-(-n // page) for n in lens_k]
    num_pages = sum(counts)
    width = max(counts)
    g = torch.Generator(device="cpu").manual_seed(seed)
    perm = torch.randperm(num_pages, generator=g).to(torch.int32)
    # Zeroed: the slots of a last page past its count are read (then masked).
    k_cache = torch.zeros(num_pages, page, HEADS_KV, HDIM, device="cuda", dtype=DTYPE)
    v_cache = torch.zeros_like(k_cache)
    table = torch.zeros(len(lens_k), width, dtype=torch.int32)
    off = cumulative(lens_k)
    first = 0
    for b, (n, c) in enumerate(zip(lens_k, counts)):
        pages = perm[first:first + c]
        first += c
        table[b, :c] = pages
        rows = torch.arange(n, device="cuda")
        dest = pages.to("cuda").long()[rows // page] * page + rows % page
        k_cache.view(-1, HEADS_KV, HDIM)[dest] = keys[off[b]:off[b] + n]
        v_cache.view(-1, HEADS_KV, HDIM)[dest] = values[off[b]:off[b] + n]
    return k_cache, v_cache, table.cuda()


def measure(fn, warmup, repeats, calls, f=None, nbytes=None):
    """{"us", "tflops", "gbs"} (or {"error"}), and the output of one call."""
    try:
        out = fn()
        ms = time_ms(fn, warmup, repeats, calls)
        row = {"us": ms * 1e3}
        if f:
            row["tflops"] = f / ms / 1e9
        if nbytes:
            row["gbs"] = nbytes / ms / 1e6
            row["hbm_pct"] = 100 * row["gbs"] / HBM_GBS
        return row, out
    except Exception as e:  # a failure is a result, not the end of the run
        return {"error": short_error(e)}, None


def max_diff(a, b):
    return float((a.float() - b.float()).abs().max()) if a.numel() else 0.0


def bench_page(page, q, keys, values, lens_q, lens_k, decodes, warmup, repeats, seed, rounds):
    row = {"page_size": page}
    try:
        k_cache, v_cache, table = paged_cache(keys, values, lens_k, page, seed + page)
    except Exception as e:
        row["error"] = short_error(e)
        return row, None
    row["num_pages"], row["pages_per_seq"] = k_cache.shape[0], table.shape[1]
    used = torch.tensor(lens_k, dtype=torch.int32, device="cuda")
    cu_q = torch.tensor(cumulative(lens_q), dtype=torch.int32, device="cuda")
    chunks, pre_keys = lens_q[decodes:], lens_k[decodes:]
    cu_pre = torch.tensor(cumulative(chunks), dtype=torch.int32, device="cuda")
    q_dec = q[:decodes].view(decodes, 1, HEADS_Q, HDIM)
    q_pre = q[decodes:]
    table_dec, table_pre = table[:decodes], table[decodes:]
    used_dec, used_pre = used[:decodes], used[decodes:]
    max_q, max_k = max(lens_q), max(lens_k)

    def mixed():
        return flashjit.attention_varlen(q, k_cache, v_cache, cu_q, None, max_q, max_k,
                                         causal=True, block_table=table, seqused_k=used)

    def decode():
        return flashjit.attention_with_kvcache(q_dec, k_cache, v_cache, cache_seqlens=used_dec,
                                               block_table=table_dec, causal=True)

    def prefill():
        return flashjit.attention_varlen(q_pre, k_cache, v_cache, cu_pre, None, max(chunks),
                                         max(pre_keys), causal=True, block_table=table_pre,
                                         seqused_k=used_pre)

    def two_calls():
        decode()
        prefill()

    f_all, f_dec, f_pre = flops(lens_q, lens_k), flops(lens_q[:decodes], lens_k[:decodes]), \
        flops(chunks, pre_keys)
    # The four rows in `rounds` interleaved rounds, each row's median kept
    # (the clocks' drift over a run then moves them alike).
    samples = {"mixed": [], "decode": [], "prefill": [], "two_calls": []}
    out_mixed = out_dec = out_pre = None
    with torch.no_grad():
        for _ in range(rounds):
            r, out_mixed = measure(mixed, warmup, repeats, 20, f_all, kv_bytes(lens_k))
            samples["mixed"].append(r)
            r, out_dec = (measure(decode, warmup, repeats, 50, f_dec, kv_bytes(lens_k[:decodes]))
                          if decodes else ({"us": 0.0}, None))
            samples["decode"].append(r)
            r, out_pre = (measure(prefill, warmup, repeats, 20, f_pre, kv_bytes(pre_keys))
                          if chunks else ({"us": 0.0}, None))
            samples["prefill"].append(r)
            samples["two_calls"].append(
                measure(two_calls, warmup, repeats, 20, f_all, kv_bytes(lens_k))[0])
    for name, results in samples.items():
        timed = sorted((r for r in results if "us" in r), key=lambda r: r["us"])
        row[name] = timed[len(timed) // 2] if timed else results[0]
    if "us" in row["decode"] and "us" in row["prefill"]:
        total = row["decode"]["us"] + row["prefill"]["us"]
        row["sum_us"] = total
        if "us" in row["mixed"] and total > 0:
            row["mixed_over_sum"] = row["mixed"]["us"] / total
        # The decode part inside the one call: its sequences' K/V bytes over
        # the time the call takes beyond the prefill part alone.
        extra = row["mixed"].get("us", 0.0) - row["prefill"]["us"]
        if decodes and extra > 0:
            gbs = kv_bytes(lens_k[:decodes]) / extra / 1e3
            row["decode_in_mixed"] = {"us": extra, "gbs": gbs, "hbm_pct": 100 * gbs / HBM_GBS}
    # Not a test (tests/python/test_varlen_kvcache.py is): the one call and
    # the two compute the same attention. Printed, never fatal.
    try:
        if out_mixed is not None and out_dec is not None:
            row["max_abs_diff_decode"] = max_diff(out_mixed[:decodes], out_dec.view(decodes,
                                                                                  HEADS_Q, HDIM))
        if out_mixed is not None and out_pre is not None:
            row["max_abs_diff_prefill"] = max_diff(out_mixed[decodes:], out_pre)
    except Exception as e:
        row["diff_error"] = short_error(e)
    return row, out_mixed  # the cache is freed as this returns


def bench_cudnn(q, keys, values, lens_q, lens_k, warmup, repeats):
    """SDPA's cuDNN backend on the padded dense batch: (row, out packed
    [total_q, heads_q, d] or None)."""
    b, max_q, max_k = len(lens_q), max(lens_q), max(lens_k)
    row = {"shape": [b, HEADS_Q, max_q, max_k], "padded_pairs": b * max_q * max_k}
    q_off, k_off = cumulative(lens_q), cumulative(lens_k)
    try:
        qd = torch.zeros(b, HEADS_Q, max_q, HDIM, device="cuda", dtype=DTYPE)
        kd = torch.zeros(b, HEADS_KV, max_k, HDIM, device="cuda", dtype=DTYPE)
        vd = torch.zeros_like(kd)
        for i, (lq, lk) in enumerate(zip(lens_q, lens_k)):
            qd[i, :, :lq] = q[q_off[i]:q_off[i] + lq].transpose(0, 1)
            kd[i, :, :lk] = keys[k_off[i]:k_off[i] + lk].transpose(0, 1)
            vd[i, :, :lk] = values[k_off[i]:k_off[i] + lk].transpose(0, 1)
        # Query r of sequence i sees key j < lk with j <= r + lk - lq; a
        # padded query row sees key 0 (no row without a key: no NaN).
        lq_t = torch.tensor(lens_q, device="cuda").view(b, 1, 1)
        lk_t = torch.tensor(lens_k, device="cuda").view(b, 1, 1)
        r = torch.arange(max_q, device="cuda").view(1, max_q, 1)
        j = torch.arange(max_k, device="cuda").view(1, 1, max_k)
        visible = (j < lk_t) & (j <= r + lk_t - lq_t)
        visible |= (r >= lq_t) & (j == 0)
        mask = torch.zeros(b, 1, max_q, max_k, device="cuda", dtype=DTYPE)
        mask.masked_fill_(~visible.unsqueeze(1), float("-inf"))
        del visible
    except Exception as e:
        row["error"] = short_error(e)
        return row, None
    f = flops(lens_q, lens_k)
    out = None
    for gqa in (True, False):
        if gqa:
            kt, vt, extra = kd, vd, {"enable_gqa": True}
        else:
            kt, vt, extra = (kd.repeat_interleave(HEADS_Q // HEADS_KV, dim=1),
                             vd.repeat_interleave(HEADS_Q // HEADS_KV, dim=1), {})
        # "cudnn": the exact attention (the mask); "cudnn_nomask": the same
        # padded shapes without a mask, the dense work alone (timing only:
        # it attends to the padding, a lower bound of padding's cost).
        for key, m in (("cudnn", mask), ("cudnn_nomask", None)):
            def sdpa(kt=kt, vt=vt, extra=extra, m=m):
                return F.scaled_dot_product_attention(qd, kt, vt, attn_mask=m, **extra)
            with torch.no_grad(), sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                result, dense = measure(sdpa, warmup, repeats, 3, f, kv_bytes(lens_k))
            result["gqa"] = gqa
            row[key] = result
            if key == "cudnn" and "error" not in result:
                out = torch.cat([dense[i, :, :lq].transpose(0, 1)
                                 for i, lq in enumerate(lens_q)])
            del dense
        if "error" not in row["cudnn"]:
            break
        del kt, vt
        torch.cuda.empty_cache()
    return row, out  # the padded tensors are freed as this returns


def fmt(x, spec="8.1f"):
    return format(x, spec) if isinstance(x, (int, float)) else "     err"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer repeats")
    ap.add_argument("--pages", default="16,64", help="page sizes")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--decodes", type=int, default=48)
    ap.add_argument("--prefills", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3,
                    help="interleaved rounds of flashjit's rows, median kept")
    ap.add_argument("--no-cudnn", action="store_true", help="skip the padded cuDNN row")
    ap.add_argument("--json", default="")
    results.add_arguments(ap)
    args = ap.parse_args()
    pages = [int(x) for x in args.pages.split(",") if x]
    warmup, repeats = (3, 7) if args.quick else (5, 20)

    lens_q, lens_k = workload(args.seed, args.decodes, args.prefills)
    d = args.decodes
    info = {"decodes": d, "prefills": args.prefills, "heads_q": HEADS_Q, "heads_kv": HEADS_KV,
            "hdim": HDIM, "dtype": "bf16", "lens_q": lens_q, "lens_k": lens_k,
            "total_q": sum(lens_q), "total_k": sum(lens_k),
            "decode_keys": sum(lens_k[:d]), "prefill_queries": sum(lens_q[d:]),
            "flops": flops(lens_q, lens_k), "kv_bytes": kv_bytes(lens_k),
            "decode_kv_bytes": kv_bytes(lens_k[:d])}
    print(json.dumps({"workload": {k: v for k, v in info.items()
                                   if k not in ("lens_q", "lens_k")}}), flush=True)
    torch.manual_seed(args.seed)
    q = torch.randn(sum(lens_q), HEADS_Q, HDIM, device="cuda", dtype=DTYPE)
    keys = torch.randn(sum(lens_k), HEADS_KV, HDIM, device="cuda", dtype=DTYPE)
    values = torch.randn_like(keys)

    rows, outs = [], {}
    for page in pages:
        row, out = bench_page(page, q, keys, values, lens_q, lens_k, d, warmup, repeats,
                              args.seed, args.rounds)
        rows.append(row)
        if out is not None:
            outs[page] = out
        torch.cuda.empty_cache()
        print(json.dumps(row), flush=True)
    cudnn = None
    if not args.no_cudnn:
        cudnn, dense_out = bench_cudnn(q, keys, values, lens_q, lens_k, warmup, repeats)
        torch.cuda.empty_cache()
        try:
            if dense_out is not None and outs:
                # Sanity, not a test: the real rows against the mixed call's.
                cudnn["max_abs_diff_vs_mixed"] = max_diff(dense_out, next(iter(outs.values())))
        except Exception as e:
            cudnn["diff_error"] = short_error(e)
        print(json.dumps({"cudnn_padded": cudnn}), flush=True)

    print()
    print(TABLE_HEADER)
    print(f"bf16, {HEADS_Q}/{HEADS_KV} heads, d={HDIM}, causal; {d} decode sequences "
          f"({info['decode_keys']} keys) + {args.prefills} prefill chunks "
          f"({info['prefill_queries']} queries); kernel time (GPU kept busy), us")
    c = (cudnn or {}).get("cudnn", {})
    cn = (cudnn or {}).get("cudnn_nomask", {})
    print("| page | mixed | decode | prefill | decode + prefill | mixed / sum | 2 calls | "
          "decode GB/s | decode % HBM | decode in mixed GB/s | % HBM | mixed TFLOP/s | "
          "cuDNN padded | x cuDNN | cuDNN no mask | x no mask |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
          "| ---: | ---: | ---: | ---: |")

    def ratio(other, m):
        return (other["us"] / m["us"] if "us" in other and "us" in m and m["us"] > 0
                else float("nan"))
    for r in rows:
        m, dec, pre, two = (r.get(k, {}) for k in ("mixed", "decode", "prefill", "two_calls"))
        print(f"| {r['page_size']} | {fmt(m.get('us'))} | {fmt(dec.get('us'))} | "
              f"{fmt(pre.get('us'))} | {fmt(r.get('sum_us'))} | "
              f"{fmt(r.get('mixed_over_sum'), '.3f')} | {fmt(two.get('us'))} | "
              f"{fmt(dec.get('gbs'), '.0f')} | {fmt(dec.get('hbm_pct'), '.0f')} | "
              f"{fmt(r.get('decode_in_mixed', {}).get('gbs'), '.0f')} | "
              f"{fmt(r.get('decode_in_mixed', {}).get('hbm_pct'), '.0f')} | "
              f"{fmt(m.get('tflops'), '.1f')} | {fmt(c.get('us'))} | {ratio(c, m):.1f} | "
              f"{fmt(cn.get('us'))} | {ratio(cn, m):.1f} |")
        if "error" in r:
            print(f"  page {r['page_size']}: {r['error']}")
        for k in ("mixed", "decode", "prefill", "two_calls"):
            if "error" in r.get(k, {}):
                print(f"  page {r['page_size']} {k}: {r[k]['error']}")
    if cudnn is not None and "error" in cudnn:
        print(f"  cuDNN: {cudnn['error']}")
    elif cudnn is not None:
        for label, r in (("padded, masked", c), ("padded, no mask", cn)):
            if "error" in r:
                print(f"  cuDNN {label}: {r['error']}")
            elif "us" in r:
                print(f"cuDNN {label} {cudnn['shape']} (gqa={r.get('gqa')}): {r['us']:.1f} us, "
                      f"{r.get('tflops', float('nan')):.1f} TFLOP/s on real FLOPs")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"workload": info, "rows": rows, "cudnn_padded": cudnn}, fh, indent=1)
    # Another batch (--seed, --decodes, --prefills) is written only under a --suite name.
    config = {"dtype": "bf16", "warmup": warmup, "repeats": repeats, "rounds": args.rounds,
              "pages": pages, "seed": args.seed}
    narrowed = (args.seed, args.decodes, args.prefills) != (0, 48, 4)
    results.publish(args, results.suite_name(args, "serving"), rows, METHOD.format(**config),
                    config, torch, flashjit.version(), narrowed,
                    extras={"workload": info, "cudnn_padded": cudnn})


if __name__ == "__main__":
    main()
