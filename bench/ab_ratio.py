"""Two builds of flashjit against each other, from bench/compare.py's --json
files of each (run alternately in one device call: A B A B ...): per shape
the median TFLOP/s of each build's runs and B / A, then the geometric mean
of B / A per pass. A change meant to leave the kernels alone reads 1.00
within the noise; each build's own ratio to cuDNN is given too, since the
machine's speed can drift between runs.

    python3 bench/ab_ratio.py --a old1.json old2.json --b new1.json new2.json
"""
import argparse
import json
import math
import statistics


def shape_key(row):
    return (row.get("model") or "", row["hdim"], row.get("hdim_v", row["hdim"]),
            "causal" if row["causal"] else "full", row["seqlen"])


def tflops(row, side, name):
    cell = row.get("bwd", {}) if side == "bwd" else row
    value = cell.get(name, {})
    return value.get("tflops") if isinstance(value, dict) else None


def collect(paths, side):
    """shape -> {"ours": [..], "cudnn": [..]} over the files' runs."""
    out = {}
    for path in paths:
        with open(path) as fh:
            for row in json.load(fh)["rows"]:
                entry = out.setdefault(shape_key(row), {"ours": [], "cudnn": []})
                for name in entry:
                    value = tflops(row, side, name)
                    if value:
                        entry[name].append(value)
    return out


def compare(a_paths, b_paths, side):
    """The rows of one pass and the geometric mean of B / A (None: no rows)."""
    a, b = collect(a_paths, side), collect(b_paths, side)
    rows, logs = [], []
    for key in sorted(set(a) & set(b)):
        if not a[key]["ours"] or not b[key]["ours"]:
            continue
        ours_a, ours_b = statistics.median(a[key]["ours"]), statistics.median(b[key]["ours"])
        ratio = ours_b / ours_a
        logs.append(math.log(ratio))
        cudnn = a[key]["cudnn"] + b[key]["cudnn"]
        vs = statistics.median(cudnn) if cudnn else None
        rows.append((key, ours_a, ours_b, ratio, vs))
    geomean = math.exp(sum(logs) / len(logs)) if logs else None
    return rows, geomean


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", nargs="+", required=True, help="compare.py --json files of build A")
    ap.add_argument("--b", nargs="+", required=True, help="... of build B")
    ap.add_argument("--pass", dest="passes", default="fwd,bwd")
    args = ap.parse_args()
    for side in args.passes.split(","):
        rows, geomean = compare(args.a, args.b, side)
        if not rows:
            continue
        print(f"=== B / A ({side}, TFLOP/s, median of {len(args.a)} and {len(args.b)} runs) ===")
        print(f"{'shape':<34} {'A':>8} {'B':>8} {'B/A':>6} {'cuDNN':>8}")
        for key, ours_a, ours_b, ratio, vs in rows:
            model, hdim, hdim_v, mask, seqlen = key
            dims = f"d{hdim}" + (f"/{hdim_v}" if hdim_v != hdim else "")
            label = " ".join(x for x in (model, dims, mask, str(seqlen)) if x)
            cudnn = f"{vs:8.1f}" if vs else f"{'n/a':>8}"
            print(f"{label:<34} {ours_a:8.1f} {ours_b:8.1f} {ratio:6.3f} {cudnn}")
        print(f"geomean B/A ({side}): {geomean:.4f} over {len(rows)} shapes")


if __name__ == "__main__":
    main()
