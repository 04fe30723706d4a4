"""flashjit over torch.distributed: context parallelism (ring attention), one
sequence across the ranks of a process group. The implementation lives in
flashjit.context_parallel; this is the name the API is known by."""
from .context_parallel import LAYOUTS, ring_attention, shard, simulate_ring_attention, unshard

__all__ = ["ring_attention", "simulate_ring_attention", "shard", "unshard", "LAYOUTS"]
