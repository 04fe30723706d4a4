"""Plots bench/decode.py's results: GB/s of K and V read for each batch x KV
length row, flashjit against cuDNN and FlashAttention-2 (one process), with
HBM's 4.8 TB/s marked. Reads the --json list or the JSON lines decode.py
prints. Runs anywhere with matplotlib; no GPU.

    python3 bench/plot_decode.py decode.json docs/perf_decode.png
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

SERIES = [("ours", "flashjit", "tab:red"), ("p64", "flashjit, paged 64", "salmon"),
          ("p16", "flashjit, paged 16", "peachpuff"), ("cudnn", "cuDNN", "tab:green"),
          ("flash", "FlashAttention-2", "tab:blue")]
HBM_GBS = 4800.0


def load(path):
    text = open(path).read().strip()
    if text.startswith("["):
        return json.loads(text)
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def main():
    rows, out = load(sys.argv[1]), sys.argv[2]
    labels = [f"{r['batch']} x {r['seqlen_k'] // 1024}k" for r in rows]
    fig, ax = plt.subplots(figsize=(9, 4.8))
    # The paged columns only where decode.py measured them (--pages).
    series = [s for s in SERIES if any("gbs" in (r.get(s[0]) or {}) for r in rows)]
    width = 0.8 / len(series)
    for i, (key, name, color) in enumerate(series):
        values = [(r.get(key) or {}).get("gbs", 0.0) for r in rows]
        xs = [j + (i - (len(series) - 1) / 2) * width for j in range(len(rows))]
        ax.bar(xs, values, width, label=name, color=color)
    ax.axhline(HBM_GBS, color="gray", linestyle=":", label="HBM 4.8 TB/s")
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels(labels)
    ax.set_xlabel("batch x KV length (one query token each)")
    ax.set_ylabel("GB/s of K and V read")
    r0 = rows[0]
    ax.set_title(f"decode, bf16, {r0['heads_q']}/{r0['heads_kv']} heads, d={r0['hdim']}, H200")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3, fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    main()
