"""Probe (issue #13): does decode read K/V faster when one CTA reads two KV
heads' adjacent 256-byte chunks of each token row (512 contiguous bytes)
rather than one head's 256?

The two KV heads of a pair are one head of dim 2d (a free view of the
[b][s][h][d] cache); each query head's q is put in its pair's half of a
2d-wide query, zeros in the other half, so q'.k' = q.k of its own head and
the output's own half is its attention (the other half is discarded).
Timed as bench/decode.py (kernel time, GPU kept busy), GB/s of the cache.

    FLASHJIT_LIB=... python3 bench/probe_head_pairs.py [--rows 16x32768,...]
"""
import argparse
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

import flashjit  # noqa: E402
from decode import ROWS, time_ms  # noqa: E402


def paired_query(q, hkv, group):
    """q [b, 1, hq, d] -> [b, 1, hq, group*d]: head j's q in the slot of its
    KV head within its group of `group` KV heads."""
    b, s, hq, d = q.shape
    ratio = hq // hkv
    out = torch.zeros(b, s, hq, group * d, device=q.device, dtype=q.dtype)
    for j in range(hq):
        slot = (j // ratio) % group
        out[:, :, j, slot * d:(slot + 1) * d] = q[:, :, j]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", default="")
    ap.add_argument("--splits", default="0")
    args = ap.parse_args()
    rows = ROWS
    if args.rows:
        rows = [tuple(int(x) for x in r.split("x")) for r in args.rows.split(",")]
    hq, hkv, d = 32, 8, 128
    print("row | ours d128 | pairs d256 | x | cudnn | max diff")
    for b, sk in rows:
        torch.manual_seed(0)
        q = torch.randn(b, 1, hq, d, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(b, sk, hkv, d, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(b, sk, hkv, d, device="cuda", dtype=torch.bfloat16)
        kv_bytes = 2 * k.numel() * 2
        q2 = paired_query(q, hkv, 2)
        k2 = k.view(b, sk, hkv // 2, 2 * d)
        v2 = v.view(b, sk, hkv // 2, 2 * d)
        scale = 1.0 / math.sqrt(d)
        ratio = hq // hkv
        sel = torch.tensor([((j // ratio) % 2) for j in range(hq)], device="cuda")
        line = f"{b}x{sk}"
        ref = None
        qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            ref = F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True).transpose(1, 2)
            ms_cudnn = time_ms(lambda: F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True), 5, 20)
        for splits in [int(s) for s in args.splits.split(",")]:
            ms1 = time_ms(lambda: flashjit.attention(q, k, v, num_splits=splits), 5, 20)
            ms2 = time_ms(lambda: flashjit.attention(q2, k2, v2, softmax_scale=scale,
                                                     num_splits=splits), 5, 20)
            o2 = flashjit.attention(q2, k2, v2, softmax_scale=scale, num_splits=splits)
            o2 = o2.view(b, 1, hq, 2, d)
            mine = torch.where(sel.view(1, 1, hq, 1) == 0, o2[:, :, :, 0], o2[:, :, :, 1])
            diff = float((mine.float() - ref.float()).abs().max())
            g1, g2, gc = (kv_bytes / ms / 1e6 for ms in (ms1, ms2, ms_cudnn))
            print(f"{line} s{splits} | {g1:7.0f} | {g2:7.0f} | {g2 / g1:5.3f} | {gc:7.0f} | {diff:.1e}",
                  flush=True)
        del q, k, v, q2, k2, v2
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
