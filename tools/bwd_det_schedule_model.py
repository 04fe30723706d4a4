#!/usr/bin/env python3
"""A model of the sm90 backward's deterministic dQ order (docs/PERF.md,
thirty-fourth session): how long key blocks wait for each other's dQ adds.

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

  tools/bwd_det_schedule_model.py            the tables in docs/PERF.md
"""
import heapq


def dispatch(P, pairs, blocks, ctas, walk):
    """Items (pair, block) in dispatch order (sections of P pairs, blocks
    outer), each taken by the first of `ctas` resident CTAs to free;
    walk(pair, block, start) returns when the item ends. The last end."""
    free = [(0.0, c) for c in range(ctas)]
    heapq.heapify(free)
    finish = 0.0
    for s0 in range(0, pairs, P):
        for block in range(blocks):
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
    main()
