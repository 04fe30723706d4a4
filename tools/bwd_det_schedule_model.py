#!/usr/bin/env python3
"""A model of the sm90 backward's deterministic dQ order: how long key
blocks wait for each other's dQ adds.

Resident CTAs take work items (a key block of a (KV head, batch) pair) in
dispatch order: sections of P pairs, key blocks outer. Each item walks its
query tiles last first (causal, square: key block k sees tiles k..K-1);
every tile computes for `tau`, then its dQ part is staged (the buffer must
have been read by the tile before's adds) and one of two writers adds it.
In the deterministic mode a tile's adds go in key-block order, split into
`fields` that are ordered apart: a field is issued once the key block
before has released it, streams for Lbw / fields, and is released `O`
later (performed, fenced, seen). `pipelined`: the next field is issued
before the previous is performed. L2 and DRAM are not modelled.

  tools/bwd_det_schedule_model.py            the waits of each order, per field count
  tools/bwd_det_schedule_model.py orders     longest against shortest first
"""
import heapq


def dispatch(P, pairs, blocks, ctas, walk, shortest_first=False):
    """Items (pair, block) in dispatch order (sections of P pairs, blocks
    outer: first first, or last first where shortest_first), each taken by
    the first of `ctas` resident CTAs to free; walk(pair, block, start)
    returns when the item ends. The last end."""
    free = [(0.0, c) for c in range(ctas)]
    heapq.heapify(free)
    finish = 0.0
    for s0 in range(0, pairs, P):
        for block in (range(blocks - 1, -1, -1) if shortest_first else range(blocks)):
            for pair in range(s0, min(pairs, s0 + P)):
                t0, c = heapq.heappop(free)
                end = walk(pair, block, t0)
                finish = max(finish, end)
                heapq.heappush(free, (end, c))
    return finish


def run(P=16, pairs=128, K=16, ctas=132, tau=1.0, Lbw=0.4, O=0.2, det=True, fields=1,
        pipelined=False):
    released = {}  # (pair, tile, field, key block) -> time the next may add it

    def walk(p, kb, t0):
        t, writer_free, buffer_free = t0, [t0, t0], t0
        for i, m in enumerate(range(K - 1, kb - 1, -1)):
            t = max(t + tau, buffer_free)  # computed, then staged once the buffer is read
            w = i % 2
            start = max(t, writer_free[w])
            if not det:
                buffer_free = start + Lbw
                writer_free[w] = start
                continue
            issue_from, streamed = start, start
            for f in range(fields):
                need = max([released[(p, m, f, j)] for j in range(kb)], default=0.0)
                issue = max(issue_from, need)
                streamed = max(issue, streamed) + Lbw / fields
                released[(p, m, f, kb)] = streamed + O
                issue_from = issue if pipelined else streamed + O
            buffer_free = streamed
            writer_free[w] = max(released[(p, m, fields - 1, kb)], issue_from)
        return max(t, *writer_free)

    return dispatch(P, pairs, K, ctas, walk)


def run_orders(P=16, pairs=64, K=32, heads=1, ctas=132, tau=1.0, Lbw=0.4, O=0.2, det=True,
               shortest_first=False):
    """The two dispatch orders of the deterministic mode (one field, one
    tile's adds awaited): longest first, each item walking its tiles last
    first and a tile taking its adds key block ascending; shortest first
    (BwdParams::shortest_first), tiles first first, adds descending.
    `heads` query heads a KV head (GQA), walked inner."""
    released = {}

    def walk(p, kb, t0):
        t, writer_free, buffer_free = t0, [t0, t0], t0
        tiles = range(kb, K) if shortest_first else range(K - 1, kb - 1, -1)
        i = 0
        for m in tiles:
            for h in range(heads):
                t = max(t + tau, buffer_free)
                w = i % 2
                i += 1
                start = max(t, writer_free[w])
                if not det:
                    buffer_free, writer_free[w] = start + Lbw, start
                    continue
                earlier = range(kb + 1, m + 1) if shortest_first else range(kb)
                need = max([released[(p, m, h, j)] for j in earlier], default=0.0)
                streamed = max(start, need) + Lbw
                released[(p, m, h, kb)] = streamed + O
                buffer_free, writer_free[w] = streamed, streamed + O
        return max(t, *writer_free)

    return dispatch(P, pairs, K, ctas, walk, shortest_first)


def orders_table():
    """Longest against shortest first, against the default mode's time,
    by the work per SM in longest items (pairs x key blocks / 2 / SMs: the
    tail shortest first leaves is about one longest item)."""
    shapes = [("d=256 2k, 8x8 (the grid)", 64, 32, 1, 16, 4),
              ("d=256 8k, 2x8 (the grid)", 16, 128, 1, 8, 1),
              ("d=256 8k, 1x8", 8, 128, 1, 8, 1),
              ("d=256 2k, 2x8", 16, 32, 1, 16, 4),
              ("d=256 2k, 1x8", 8, 32, 1, 8, 4),
              ("d=256 2k, GQA 16/4, 4 batch", 16, 32, 4, 16, 1)]
    print("| shape (pairs, key blocks) | work per SM / longest item | L 0.4, O 0.2: longest / "
          "shortest first | L 0.5, O 0.5 |")
    print("| --- | --- | --- | --- |")
    for name, pairs, K, heads, p_longest, p_shortest in shapes:
        cells = []
        for l, o in [(0.4, 0.2), (0.5, 0.5)]:
            base = run_orders(P=p_longest, pairs=pairs, K=K, heads=heads, Lbw=l, O=o, det=False)
            longest = run_orders(P=p_longest, pairs=pairs, K=K, heads=heads, Lbw=l, O=o)
            shortest = run_orders(P=p_shortest, pairs=pairs, K=K, heads=heads, Lbw=l, O=o,
                                  shortest_first=True)
            cells.append(f"{base / longest:.2f} / {base / shortest:.2f}")
        print(f"| {name} ({pairs}, {K}) | {pairs * K / 2 / 132:.1f} | " + " | ".join(cells) + " |")


def run_cluster(P=16, pairs=128, K=16, clusters=66, tau=1.0, Lbw=0.4, O=0.2, det=True):
    """dQ clusters: an item is two adjacent key blocks on two CTAs, each
    adding half of a tile's dQ (both blocks' parts), so a tile's adds take
    Lbw / 2; the pair walks the first block's tiles (the second idles on
    the first's diagonal); one writer, which awaits each tile's adds."""
    released = {}

    def walk(p, q, t0):
        t, writer_free, buffer_free = t0, t0, t0
        for m in range(K - 1, 2 * q - 1, -1):
            t = max(t + tau, buffer_free)
            start = max(t, writer_free)
            if not det:
                buffer_free, writer_free = start + Lbw / 2, start
                continue
            need = max([released[(p, m, j)] for j in range(q)], default=0.0)
            streamed = max(start, need) + Lbw / 2
            released[(p, m, q)] = streamed + O
            buffer_free, writer_free = streamed, streamed + O
        return max(t, writer_free)

    return dispatch(P, pairs, K // 2, clusters, walk)


def main():
    orders = [("whole tile", 1, False), ("halves, each awaited", 2, False),
              ("halves, two in flight", 2, True), ("quarters, two in flight", 4, True)]
    regimes = [(0.4, 0.2), (0.5, 0.3), (0.5, 0.5)]
    default = {r: run(det=False, Lbw=r[0], O=r[1]) for r in regimes}  # the default mode's time

    def row(name, deterministic_time):
        cells = [" / ".join(f"{default[r] / deterministic_time(P, *r):.2f}" for P in (16, 24, 32))
                 for r in regimes]
        print(f"| {name} | " + " | ".join(cells) + " |")

    print("| order | " + " | ".join(f"L {l}, O {o}" for l, o in regimes) + " |")
    print("| --- |" + " --- |" * len(regimes))
    for name, fields, pipelined in orders:
        row(name, lambda P, l, o: run(P=P, Lbw=l, O=o, fields=fields, pipelined=pipelined))
    row("clusters, each half a tile once a pair", lambda P, l, o: run_cluster(P=P, Lbw=l, O=o))
    print()
    print("clusters in the default mode, time against without:",
          ", ".join(f"{run_cluster(det=False, Lbw=l, O=o) / default[(l, o)]:.3f}"
                    for l, o in regimes))


if __name__ == "__main__":
    import sys
    orders_table() if sys.argv[1:] == ["orders"] else main()
