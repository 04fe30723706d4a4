"""Plots bench/compare.py's JSON: forward TFLOP/s against seqlen, one PNG per
head dim (full and causal side by side), for flashjit's sm80 and sm90
families, cuDNN and FlashAttention-2 (all measured in one process), plus
FlexAttention's points from shared/anchors.md where it has them (another
process, marked as such). Runs anywhere with matplotlib; no GPU.

    python3 bench/plot_perf.py compare.json docs/perf
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# FlexAttention forward, bf16, H200, anchors.md (2026-11-29): not same-process.
FLEX_ANCHORS = {(128, False): {2048: 293, 8192: 353}, (128, True): {2048: 264, 8192: 300}}

SERIES = [("ours", "flashjit (auto: sm90)", "tab:red", "-"),
          ("ours_sm80", "flashjit sm80", "tab:orange", "--"),
          ("cudnn", "cuDNN", "tab:green", "-"),
          ("flash", "FlashAttention-2", "tab:blue", "-")]


def tflops(row, key):
    cell = row.get(key) or {}
    return cell.get("tflops")


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    data = json.load(open(sys.argv[1]))
    rows = data["rows"] if isinstance(data, dict) else data
    for d in sorted({r["hdim"] for r in rows}):
        fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
        for ax, causal in zip(axes, (False, True)):
            sub = sorted((r for r in rows if r["hdim"] == d and r["causal"] == causal),
                         key=lambda r: r["seqlen"])
            for key, label, color, style in SERIES:
                pts = [(r["seqlen"], tflops(r, key)) for r in sub if tflops(r, key)]
                if pts:
                    ax.plot(*zip(*pts), style, marker="o", color=color, label=label)
            flex = FLEX_ANCHORS.get((d, causal))
            if flex:
                ax.plot(list(flex), list(flex.values()), "x", color="tab:purple", markersize=9,
                        label="FlexAttention (anchors.md, other process)")
            ax.set_xscale("log", base=2)
            ax.set_title(f"head dim {d}, {'causal' if causal else 'full'}")
            ax.set_xlabel("seqlen (batch x seqlen = 16k tokens)")
            ax.grid(True, alpha=0.3)
        axes[0].set_ylabel("forward TFLOP/s (bf16, H200)")
        axes[1].legend(loc="lower right", fontsize=8)
        fig.tight_layout()
        out = f"{sys.argv[2]}_d{d}.png"
        fig.savefig(out, dpi=110)
        print("wrote", out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
