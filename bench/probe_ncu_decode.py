"""Probe (issue #13): one decode call of `which` (ours, pairs, cudnn) inside
a CUDA profiler range, for ncu --profile-from-start off.

    ncu --profile-from-start off --metrics ... python3 bench/probe_ncu_decode.py ours 16 32768
"""
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

import flashjit  # noqa: E402
from probe_head_pairs import paired_query  # noqa: E402

which, b, sk = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
hq, hkv, d = 32, 8, 128
q = torch.randn(b, 1, hq, d, device="cuda", dtype=torch.bfloat16)
k = torch.randn(b, sk, hkv, d, device="cuda", dtype=torch.bfloat16)
v = torch.randn(b, sk, hkv, d, device="cuda", dtype=torch.bfloat16)
if which == "ours":
    fn = lambda: flashjit.attention(q, k, v)  # noqa: E731
elif which == "pairs":
    q2 = paired_query(q, hkv, 2)
    k2, v2 = k.view(b, sk, hkv // 2, 2 * d), v.view(b, sk, hkv // 2, 2 * d)
    fn = lambda: flashjit.attention(q2, k2, v2, softmax_scale=1 / math.sqrt(d))  # noqa: E731
else:
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))

    def fn():
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            return F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True)
for _ in range(3):
    fn()
torch.cuda.synchronize()
torch.cuda.profiler.start()
fn()
torch.cuda.synchronize()
torch.cuda.profiler.stop()
