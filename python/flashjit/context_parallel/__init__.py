"""Context parallelism: one sequence's attention split across the ranks of a
torch.distributed group (ring attention), forward and backward.

    from flashjit.context_parallel import ring_attention, shard, unshard
    q_local = shard(q, rank, world, layout="zigzag")       # and k, v
    out_local = ring_attention(q_local, k_local, v_local, causal=True)

layout.py: where positions live (zigzag, contiguous) and each ring step's
block plan; ring.py: one rank's forward and backward as generators that
yield their communication; comm.py: the drivers (torch.distributed P2P,
and the in-process lockstep ring of simulate_ring_attention); api.py: the
entry points and their autograd Functions. flashjit.distributed re-exports
them."""
from .api import ring_attention, simulate_ring_attention
from .layout import LAYOUTS, shard, unshard

__all__ = ["ring_attention", "simulate_ring_attention", "shard", "unshard", "LAYOUTS"]
