"""Digest of the deterministic-waits probe (docs/experiments/
bwd-sm90-probe-det-waits.diff): pair 0's dQ writers print one line per tile,

    probe kb <key block> m <m-block> sm <CTA> t <globaltimer ns> wait <ns> before <n>

for every launch of a `flashjit run` (warm-up runs too). This keeps the last
launch (its lines after the last gap of more than GAP_US microseconds in t),
then prints per key block: its tiles, its start (first wait's t, from the
launch's first), the total of its waits, the share of them at its first
quarter of tiles (a chain's start) against the rest (a convoy), and a total.

    python3 scripts/det-waits-digest.py probe.txt [GAP_US]
"""
import re
import sys
from collections import defaultdict

LINE = re.compile(r"probe kb (\d+) m (\d+) sm (\d+) t (\d+) wait (\d+) before (\d+)")


def last_launch(rows, gap_ns):
    """The rows after the last gap in time of more than gap_ns."""
    rows = sorted(rows, key=lambda r: r["t"])
    start = 0
    for i in range(1, len(rows)):
        if rows[i]["t"] - rows[i - 1]["t"] > gap_ns:
            start = i
    return rows[start:]


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    gap_ns = float(sys.argv[2] if len(sys.argv) > 2 else 200) * 1000
    rows = []
    with open(sys.argv[1]) as f:
        for line in f:
            m = LINE.search(line)
            if m:
                kb, mb, sm, t, wait, before = map(int, m.groups())
                rows.append({"kb": kb, "m": mb, "sm": sm, "t": t, "wait": wait, "before": before})
    if not rows:
        sys.exit(f"{sys.argv[1]}: no probe lines")
    rows = last_launch(rows, gap_ns)
    t0 = rows[0]["t"]
    by_kb = defaultdict(list)
    for r in rows:
        by_kb[r["kb"]].append(r)
    print("| key block | tiles | start (us) | waits (us) | first quarter (us) | rest (us) |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    total = first_total = 0.0
    for kb in sorted(by_kb):
        tiles = sorted(by_kb[kb], key=lambda r: r["t"])
        quarter = max(1, len(tiles) // 4)
        waits = sum(r["wait"] for r in tiles) / 1000
        first = sum(r["wait"] for r in tiles[:quarter]) / 1000
        total += waits
        first_total += first
        print(f"| {kb} | {len(tiles)} | {(tiles[0]['t'] - t0) / 1000:.1f} | {waits:.1f} | "
              f"{first:.1f} | {waits - first:.1f} |")
    span = (rows[-1]["t"] - t0) / 1000
    print(f"\nlaunch span {span:.1f} us, {len(rows)} tiles, waits {total:.1f} us "
          f"({first_total:.1f} in the key blocks' first quarters)")


if __name__ == "__main__":
    main()
