"""flashjit.distributed.ring_attention across real GPUs (NCCL): every rank's
output and gradients, unsharded, against the single-GPU result
(flashjit.attention on the whole sequence) and the fp32 reference, with
test_attention.py's criteria (outputs 2 * the low-precision error + 1e-5,
gradients 3 * + 1e-5, LSE 1e-3 + 1e-3 * |lse|), zigzag and contiguous, causal
and full, bf16 and fp16, MHA and GQA; and a group of one rank refused.

    python3 tests/python/test_context_parallel_dist.py   # spawns 2, 4, 8 ranks (as GPUs allow)
    torchrun --nproc-per-node=4 tests/python/test_context_parallel_dist.py   # one world size

Skips cleanly (exit 0, saying why) with fewer than 2 GPUs, without torch or
without NCCL."""
import os
import sys
import traceback

os.environ.setdefault("FLASHJIT_POISON_OUTPUT", "1")  # before the binding loads
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_env import flashjit, skip_reason as _gpu_skip_reason, torch  # noqa: E402

CASES = [  # (batch, positions per chunk, heads_q, heads_kv, head_dim)
    (2, 128, 4, 4, 64),
    (1, 192, 8, 2, 128),
]


def skip_reason():
    reason = _gpu_skip_reason()
    if reason:
        return reason
    if torch.cuda.device_count() < 2:
        return (f"the multi-GPU ring needs at least 2 GPUs; this machine has "
                f"{torch.cuda.device_count()}")
    if not torch.distributed.is_available() or not torch.distributed.is_nccl_available():
        return "torch.distributed with NCCL is not available"
    return None


def _bound(name, value, ref, low, factor, label):
    err = (value.float() - ref.float()).abs().max().item()
    base = (low.float() - ref.float()).abs().max().item()
    bound = factor * base + 1e-5
    assert err <= bound, (f"{label}: max|{name}-ref| {err:.3g} > {bound:.3g} "
                          f"({factor} * {base:.3g} + 1e-5)")


def check_case(rank, world, layout, causal, dtype, b, per_chunk, hq, hkv, d, seed):
    from flashjit import distributed
    from test_attention import attention_ref, grads_ref, make_dout, make_inputs
    dist = torch.distributed
    s = world * (2 if layout == "zigzag" else 1) * per_chunk
    # The same generator seed on every device gives every rank the same
    # whole sequence.
    q, k, v = make_inputs(b, s, s, hq, hkv, d, d, dtype, seed=seed)
    dout = make_dout(q, v, seed + 7)
    label = f"R={world} {layout} causal={causal} {dtype} b={b} s={s} h={hq}/{hkv} d={d}"
    mine = [distributed.shard(t, rank, world, layout).requires_grad_() for t in (q, k, v)]
    out, lse = distributed.ring_attention(*mine, causal=causal, layout=layout, return_lse=True)
    out.backward(distributed.shard(dout, rank, world, layout))

    def gather(t, dim=1):
        parts = [torch.empty_like(t) for _ in range(world)]
        dist.all_gather(parts, t.contiguous())
        return distributed.unshard(parts, layout, dim=dim)

    out_all, lse_all = gather(out.detach()), gather(lse, dim=2)
    grads = [gather(t.grad) for t in mine]
    if rank != 0:
        return
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    single, single_lse = flashjit.attention(*leaves, causal=causal, return_lse=True)
    single.backward(dout)
    ref, ref_lse = attention_ref(q, k, v, causal=causal)
    low, _ = attention_ref(q, k, v, causal=causal, upcast=False)
    _bound("out", out_all, ref, low, 2, label)
    _bound("out vs single-GPU", out_all, single, low, 2, label)
    lse_err = (lse_all - ref_lse).abs()
    assert bool((lse_err <= 1e-3 + 1e-3 * ref_lse.abs()).all()), \
        f"{label}: lse max error {lse_err.max().item():.3g}"
    ref_g = grads_ref(q, k, v, dout, torch.float32, causal=causal)
    low_g = grads_ref(q, k, v, dout, dtype, causal=causal)
    for name, g, leaf, r, lo in zip(("dq", "dk", "dv"), grads, leaves, ref_g, low_g):
        assert g.dtype == dtype and g.shape == leaf.shape, (label, name)
        _bound(name, g, r, lo, 3, label)
        _bound(f"{name} vs single-GPU", g, leaf.grad, lo, 3, label)


def worker(rank, world):
    """One rank; returns the number of failed cases (rank 0 counts them)."""
    dist = torch.distributed
    torch.cuda.set_device(rank % torch.cuda.device_count())
    failed = 0
    seed = 0
    for layout in ("zigzag", "contiguous"):
        for causal in (True, False):
            for dtype in (torch.bfloat16, torch.float16):
                for case in CASES:
                    seed += 1
                    try:
                        check_case(rank, world, layout, causal, dtype, *case, seed=seed)
                    except AssertionError:
                        failed += 1
                        traceback.print_exc()
    one = dist.new_group([0])  # every rank takes part in creating it
    if rank == 0:
        from flashjit import distributed
        x = torch.zeros(1, 8, 2, 64, device="cuda", dtype=torch.bfloat16)
        try:
            distributed.ring_attention(x, x, x, group=one)
        except ValueError as e:
            assert "one rank" in str(e), e
        else:
            failed += 1
            print("FAIL: a group of one rank was accepted")
        print(f"world {world}: {failed} failed", flush=True)
    dist.barrier()
    return failed


def _spawned(rank, world, port, failures):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    torch.distributed.init_process_group("nccl", rank=rank, world_size=world,
                                         device_id=torch.device("cuda", rank))
    try:
        failed = worker(rank, world)
        if rank == 0:
            failures.put(failed)
    finally:
        torch.distributed.destroy_process_group()


def main():
    reason = skip_reason()
    if reason:
        print(f"SKIP: {reason}")
        return 0
    if "RANK" in os.environ:  # under torchrun: one world size, the launcher's
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        local = int(os.environ.get("LOCAL_RANK", rank))
        torch.cuda.set_device(local)
        torch.distributed.init_process_group("nccl", device_id=torch.device("cuda", local))
        try:
            failed = worker(rank, world)
            flag = torch.tensor([failed], device="cuda")
            torch.distributed.broadcast(flag, 0)
            return 1 if flag.item() else 0
        finally:
            torch.distributed.destroy_process_group()
    import socket
    import torch.multiprocessing as mp
    total = 0
    for world in (2, 4, 8):
        if world > torch.cuda.device_count():
            print(f"world {world}: not run ({torch.cuda.device_count()} GPUs)")
            continue
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        failures = mp.get_context("spawn").SimpleQueue()
        mp.spawn(_spawned, args=(world, port, failures), nprocs=world, join=True)
        total += failures.get()
    print(f"{total} failed")
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
