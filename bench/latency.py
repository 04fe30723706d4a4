"""Call latency from Python: flashjit.attention against PyTorch
SDPA's flash and cuDNN backends, in one process.

Two numbers per call, each the median of many samples:
  latency: one call on an idle GPU, from the Python call to the end of the
           kernel (synchronize before and after): what a model that calls
           attention layer by layer in eager mode waits for;
  host:    the Python call alone, with the GPU kept busy (torch.cuda._sleep)
           so that the launch never waits on the GPU: the CPU time a call
           costs, Python binding and driver launch included.
SDPA gets its native layout ([b, h, s, d], contiguous) and its backend is
selected once, outside the timed region, as a model would.

    FLASHJIT_LIB=build/libflashjit.so python3 bench/latency.py [--json out.json] [--results DIR]

Writes the suite latency to bench/results/<gpu>/ (bench/results.py).
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

TABLE_HEADER = "=== call latency from Python (us) ==="
# (batch, seqlen, heads, head dim, causal): a short call, where the host's
# cost is most of the latency, and a batch where the kernel's is.
ROWS = [(1, 128, 16, 128, True), (32, 512, 16, 128, True)]
BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}
METHOD = ("call latency: one call on an idle GPU, Python call to kernel end (synchronize before "
          "and after), median of 100 calls; host: the Python call alone with the GPU kept busy, "
          "median of 20 x 20 calls; {rounds} rounds interleaved, the median round's")


def latency_us(fn, repeats=100, warmup=10):
    """Median wall time of one call on an idle GPU, Python call to kernel end."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e6)
    times.sort()
    return times[len(times) // 2]


def host_us(fn, repeats=20, calls=20):
    times = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        torch.cuda._sleep(4_000_000)  # ~2 ms: longer than the calls take to enqueue
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - t0) * 1e6 / calls)
    torch.cuda.synchronize()
    times.sort()
    return times[len(times) // 2]


ROUNDS = 7


def bench_row(b, s, h, d, causal):
    """Each implementation measured in ROUNDS interleaved rounds (ours, flash,
    cuDNN, ours, ...), the median of the rounds' medians reported: an idle
    GPU's latency drifts over seconds (clocks, other tenants of the host), and
    interleaving gives every implementation the same drift."""
    q = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16)
    k, v = torch.randn_like(q), torch.randn_like(q)
    row = {"shape": f"b={b} s={s} h={h} d={d}{' causal' if causal else ''}"}
    qt, kt, vt = (t.transpose(1, 2).contiguous() for t in (q, k, v))
    calls = {"flashjit": (None, lambda: flashjit.attention(q, k, v, causal=causal))}
    for name, backend in BACKENDS.items():
        calls[name] = (backend, lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal))
    samples = {name: {"latency_us": [], "host_us": []} for name in calls}
    errors = {}
    with torch.no_grad():
        for _ in range(ROUNDS):
            for name, (backend, fn) in calls.items():
                if name in errors:
                    continue
                try:
                    if backend is None:
                        lat, host = latency_us(fn), host_us(fn)
                    else:
                        with sdpa_kernel([backend]):
                            lat, host = latency_us(fn), host_us(fn)
                except Exception as e:  # a backend that refuses the shape
                    errors[name] = short_error(e)
                    continue
                samples[name]["latency_us"].append(lat)
                samples[name]["host_us"].append(host)
    for name in calls:
        if name in errors:
            row[name] = {"error": errors[name]}
        else:
            row[name] = {key: sorted(xs)[len(xs) // 2] for key, xs in samples[name].items()}
            row[name]["rounds"] = samples[name]
    return row


def fmt(cell, key):
    return f"{cell[key]:7.1f}" if key in cell else "      —"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the rows here")
    results.add_arguments(parser)
    args = parser.parse_args()
    rows = [bench_row(*r) for r in ROWS]
    print(TABLE_HEADER)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, flashjit {flashjit.version()}, bf16")
    print("| shape | ours latency | flash | cudnn | ours / cudnn | ours host | flash host | cudnn host |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        o, f, c = r["flashjit"], r["flash"], r["cudnn"]
        ratio = f"{o['latency_us'] / c['latency_us']:.2f}" if "latency_us" in c else "—"
        print(f"| {r['shape']} | {fmt(o, 'latency_us')} | {fmt(f, 'latency_us')} | {fmt(c, 'latency_us')} "
              f"| {ratio} | {fmt(o, 'host_us')} | {fmt(f, 'host_us')} | {fmt(c, 'host_us')} |")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(rows, out, indent=1)
    results.publish(args, results.suite_name(args, "latency"), rows,
                    METHOD.format(rounds=ROUNDS), {"dtype": "bf16", "rounds": ROUNDS}, torch,
                    flashjit.version())


if __name__ == "__main__":
    main()
