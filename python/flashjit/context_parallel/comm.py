"""The drivers of ring.py's generators: the real ring over torch.distributed
point-to-point ops (one generator, this rank's) and the in-process ring of
the simulation (every rank's generator, in lockstep)."""


class P2PRing:
    """Passes tensors to the next rank of `group` and receives the previous
    rank's with one batch_isend_irecv per transfer: NCCL runs it on its own
    stream, so the attention launched before the wait overlaps it."""

    def __init__(self, torch, group):
        dist = torch.distributed
        self.torch, self.dist, self.group = torch, dist, group
        self.rank = dist.get_rank(group)
        self.world = dist.get_world_size(group)
        self.next = dist.get_global_rank(group, (self.rank + 1) % self.world)
        self.prev = dist.get_global_rank(group, (self.rank - 1) % self.world)

    def send(self, tensors):
        dist = self.dist
        # Both sides contiguous: NCCL moves bytes, and empty_like would keep
        # a strided input's layout on the receiving side only.
        received = [self.torch.empty(t.shape, dtype=t.dtype, device=t.device) for t in tensors]
        ops = [dist.P2POp(dist.isend, t.contiguous(), self.next, self.group) for t in tensors]
        ops += [dist.P2POp(dist.irecv, r, self.prev, self.group) for r in received]
        # The ops hold the tensors being sent until the wait.
        return dist.batch_isend_irecv(ops), received, ops

    def wait(self, handle):
        requests, received, _ = handle
        for request in requests:
            request.wait()
        return tuple(received)


def run(steps, ring):
    """Drives one rank's generator over `ring`; its return value."""
    reply = None
    while True:
        try:
            kind, payload = steps.send(reply)
        except StopIteration as done:
            return done.value
        reply = ring.send(payload) if kind == "send" else ring.wait(payload)


def run_lockstep(all_steps):
    """Drives every rank's generator (rank order) in one process: a send of
    rank r arrives at rank r+1 (mod R), as a copy, so that no rank sees
    another's later in-place updates. The ranks' return values."""
    world = len(all_steps)
    replies = [None] * world
    results = [None] * world
    in_flight = {}
    serial = 0
    while True:
        messages = []
        for r, steps in enumerate(all_steps):
            try:
                messages.append(steps.send(replies[r]))
            except StopIteration as done:
                results[r] = done.value
                messages.append(None)
        if all(m is None for m in messages):
            return results
        kinds = {m[0] if m is not None else None for m in messages}
        if len(kinds) != 1:
            raise RuntimeError(f"simulated ring: the ranks left lockstep "
                               f"({sorted(map(str, kinds))})")
        if messages[0][0] == "send":
            serial += 1
            in_flight[serial] = [tuple(t.clone() for t in m[1]) for m in messages]
            replies = [serial] * world
        else:
            sent = in_flight.pop(messages[0][1])
            replies = [sent[(r - 1) % world] for r in range(world)]
