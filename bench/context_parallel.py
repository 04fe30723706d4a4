"""Context parallelism's scaling: forward+backward of
flashjit.distributed.ring_attention over R GPUs against the single-GPU
kernel. Runs under torchrun on one multi-GPU host:

    torchrun --nproc-per-node=8 bench/context_parallel.py --tokens-per-gpu 131072 --causal
    torchrun --nproc-per-node=8 bench/context_parallel.py --causal --json out.json

Per rank the ring holds seqlen/R positions (zigzag by default). Printed: the
ring's forward+backward time (median over --iters, the slowest rank's),
tokens/s (the whole sequence's), and the scaling efficiency: the
single-GPU kernel's forward+backward on the whole sequence divided by R
(the rank's share of the work, measured on rank 0's GPU) over the ring's
time. ring-flash-attention reports about 90% on 8xH800 (forward+backward).
--single-tokens N times the single-GPU kernel on N tokens instead and
scales it by (seqlen/N)^2 (causal or full work grows with the square), for
sequences one GPU cannot hold."""
import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "python"))


def refuse(message):
    print(f"bench/context_parallel.py: {message}", file=sys.stderr)
    sys.exit(2)


def timed(torch, fn, iters, warmup=2):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokens-per-gpu", type=int, default=131072)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--heads-kv", type=int, default=None)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--causal", action="store_true")
    p.add_argument("--layout", default="zigzag", choices=("zigzag", "contiguous"))
    p.add_argument("--dtype", default="bf16", choices=("bf16", "fp16"))
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--single-tokens", type=int, default=None)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    try:
        import torch
    except ImportError:
        refuse("needs torch")
    if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
        refuse(f"needs a host of 2 or more GPUs (this one has "
               f"{torch.cuda.device_count() if torch.cuda.is_available() else 0})")
    if "RANK" not in os.environ:
        refuse("run it under torchrun, e.g. torchrun --nproc-per-node=8 "
               "bench/context_parallel.py --causal")
    import flashjit
    from flashjit import distributed
    dist = torch.distributed
    local = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    rank, world = dist.get_rank(), dist.get_world_size()
    if world < 2:
        refuse("needs --nproc-per-node of 2 or more")
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    hkv = args.heads_kv or args.heads
    s_local = args.tokens_per_gpu
    seqlen = s_local * world
    gen = torch.Generator(device="cuda").manual_seed(rank)

    def randn(*shape):
        return torch.randn(*shape, device="cuda", dtype=dtype, generator=gen).requires_grad_()

    shard = dict(q=randn(args.batch, s_local, args.heads, args.head_dim),
                 k=randn(args.batch, s_local, hkv, args.head_dim),
                 v=randn(args.batch, s_local, hkv, args.head_dim))
    shard["dout"] = torch.randn_like(shard["q"])

    def ring_step():
        out = distributed.ring_attention(shard["q"], shard["k"], shard["v"], causal=args.causal,
                                         layout=args.layout, check_ranks=False)
        out.backward(shard["dout"])

    ring_time = timed(torch, ring_step, args.iters)
    slowest = torch.tensor([ring_time], device="cuda", dtype=torch.float64)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    ring_time = slowest.item()
    shard.clear()  # room for the single-GPU run
    torch.cuda.empty_cache()
    row = None
    if rank == 0:
        n = min(args.single_tokens or seqlen, seqlen)
        gen.manual_seed(0)
        q1 = randn(args.batch, n, args.heads, args.head_dim)
        k1 = randn(args.batch, n, hkv, args.head_dim)
        v1 = randn(args.batch, n, hkv, args.head_dim)
        d1 = torch.randn_like(q1)

        def single_step():
            flashjit.attention(q1, k1, v1, causal=args.causal).backward(d1)

        single = timed(torch, single_step, args.iters) * (seqlen / n) ** 2
        share = single / world
        row = dict(gpu=torch.cuda.get_device_name(), world=world, seqlen=seqlen,
                   tokens_per_gpu=s_local, batch=args.batch, heads=args.heads, heads_kv=hkv,
                   head_dim=args.head_dim, causal=args.causal, layout=args.layout,
                   dtype=args.dtype, ring_s=ring_time, single_gpu_s=single,
                   single_measured_tokens=n, tokens_per_s=args.batch * seqlen / ring_time,
                   efficiency=share / ring_time)
        print(f"{row['gpu']} x{world} {args.layout} {'causal' if args.causal else 'full'} "
              f"seqlen {seqlen} ({s_local}/GPU) b{args.batch} h{args.heads}/{hkv} "
              f"d{args.head_dim} {args.dtype}: ring fwd+bwd {ring_time * 1e3:.1f} ms, "
              f"{row['tokens_per_s']:.3g} tokens/s; single GPU {single * 1e3:.1f} ms"
              f"{'' if n == seqlen else f' (from {n} tokens, scaled)'}; efficiency "
              f"{row['efficiency'] * 100:.1f}% (ring-flash-attention: ~90% on 8xH800)")
        if args.json:
            with open(args.json, "w") as fh:
                json.dump(row, fh, indent=1)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
