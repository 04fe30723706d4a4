"""Digest of an Nsight Compute source page (--page source --csv
--print-source sass): the share of each stall reason over all warp samples,
then the N instructions with the most samples, each with its top reasons.

    python3 scripts/hotspots-digest.py TAG-source.csv [N]
"""
import csv
import sys

REASONS = ["long_sb", "wait", "barrier", "selected", "mio", "short_sb", "dispatch", "math",
           "lg", "not_selected", "sleep", "branch_resolving", "no_inst", "membar", "drain"]


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def main():
    rows = list(csv.reader(open(sys.argv[1])))
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    header = rows[1]
    col = {name: i for i, name in enumerate(header)}
    data = rows[2:]
    samples = col["Warp Stall Sampling (All Samples)"]
    reasons = [r for r in REASONS if "stall_" + r in col]
    total = sum(number(r[samples]) for r in data) or 1.0
    print("samples %d: %s" % (total, ", ".join(
        "%s %.1f%%" % (r, 100 * sum(number(x[col["stall_" + r]]) for x in data) / total)
        for r in reasons)))
    for r in sorted(data, key=lambda x: -number(x[samples]))[:count]:
        top = sorted(((number(r[col["stall_" + n]]), n) for n in reasons), reverse=True)[:2]
        print("%5.1f%% %6s %-58s %s" % (100 * number(r[samples]) / total,
                                        hex(int(r[col["Address"]], 16) & 0xffff),
                                        r[col["Source"]].strip()[:58],
                                        " ".join("%s %.0f" % (n, v) for v, n in top if v)))


if __name__ == "__main__":
    main()
