"""More answers to the exercises of notebook 10, for tests/test_exercises.py (gathered by
tests/answers_more.py): other right answers and more wrong ones."""

from __future__ import annotations

from answers import RIGHT

ALSO_RIGHT: dict[str, list[tuple[str, str]]] = {}
MORE_WRONG: dict[str, list[tuple]] = {}

# ---- exercise 1: combine_partials ----------------------------------------------------------
_COMBINE = RIGHT["combine_partials"]
ALSO_RIGHT["combine_partials"] = [
    ("every rank's result gathered, then one log-sum-exp over the ranks", '''
def combine_partials(out, lse):
    outs = [torch.empty_like(out) for _ in range(world_size)]
    lses = [torch.empty_like(lse) for _ in range(world_size)]
    dist.all_gather(outs, out)
    dist.all_gather(tensor_list=lses, tensor=lse)
    total = torch.logsumexp(torch.stack(lses), dim=0)
    return sum(o * torch.exp(l - total).unsqueeze(-1) for o, l in zip(outs, lses))
'''),
]
MORE_WRONG["combine_partials"] = [
    ("the outputs summed, unweighted", '''
def combine_partials(out, lse):
    total = out.clone()
    dist.all_reduce(total)
    return total''', "combine_partials gave", 2),
    ("each rank's own largest lse subtracted, not the largest of all", _COMBINE.replace(
        "    dist.all_reduce(top, op=dist.ReduceOp.MAX)\n", ""), "combine_partials gave"),
    ("rank 0's lse as the reference: inf where rank 0 saw no key", _COMBINE.replace(
        "    dist.all_reduce(top, op=dist.ReduceOp.MAX)", "    dist.broadcast(top, src=0)"),
     "combine_partials gave"),
    ("the weighted output written into the caller's out", '''
def combine_partials(out, lse):
    top = lse.clone()
    dist.all_reduce(top, op=dist.ReduceOp.MAX)
    weight = torch.exp(lse - top).unsqueeze(-1)
    out.mul_(weight)
    dist.all_reduce(out)
    dist.all_reduce(weight)
    return out / weight''', "changed the caller's out in place"),
    ("around a ring of sends and receives", '''
def combine_partials(out, lse):
    outs, lses = [out], [lse]
    o, l = out, lse
    for _ in range(world_size - 1):
        o2, l2 = torch.empty_like(o), torch.empty_like(l)
        for w in dist.batch_isend_irecv([
                dist.P2POp(dist.isend, o, (rank + 1) % world_size),
                dist.P2POp(dist.irecv, o2, (rank - 1) % world_size),
                dist.P2POp(dist.isend, l, (rank + 1) % world_size),
                dist.P2POp(dist.irecv, l2, (rank - 1) % world_size)]):
            w.wait()
        outs.append(o2)
        lses.append(l2)
        o, l = o2, l2
    total = torch.logsumexp(torch.stack(lses), dim=0)
    return sum(a * torch.exp(b - total).unsqueeze(-1) for a, b in zip(outs, lses))''',
     "collectives only"),
    ("in double precision", _COMBINE.replace(
        "    return both[..., :-1] / both[..., -1:]",
        "    return (both[..., :-1] / both[..., -1:]).double()"), "expected float32"),
    ("the output and its lse", _COMBINE.replace(
        "    return both[..., :-1] / both[..., -1:]",
        "    return both[..., :-1] / both[..., -1:], top + torch.log(both[..., -1])"),
     "combine_partials gave", 2),
    ("torch's threads set to 8, to go faster, and left so", _COMBINE.replace(
        "    top = lse.clone()", "    torch.set_num_threads(8)\n    top = lse.clone()"),
     "number of threads"),
    ("the sum started and never waited", _COMBINE.replace(
        "    dist.all_reduce(both)", "    dist.all_reduce(both, async_op=True)"), "never waited"),
]

# ---- exercise 2: ring_attention ------------------------------------------------------------
_RING = RIGHT["ring_attention"]
ALSO_RIGHT["ring_attention"] = [
    ("k and v sent apart, blocking calls ordered by parity, every score kept to the end", '''
def ring_attention(q, k, v):
    right, left = (rank + 1) % world_size, (rank - 1) % world_size
    keys, values, k_now, v_now = [k], [v], k, v
    for _ in range(world_size - 1):
        k_in, v_in = torch.empty_like(k_now), torch.empty_like(v_now)
        if rank % 2 == 0:
            dist.send(k_now, dst=right)
            dist.send(v_now, dst=right)
            dist.recv(k_in, src=left)
            dist.recv(v_in, src=left)
        else:
            dist.recv(k_in, src=left)
            dist.recv(v_in, src=left)
            dist.send(k_now, dst=right)
            dist.send(v_now, dst=right)
        keys.append(k_in)
        values.append(v_in)
        k_now, v_now = k_in, v_in
    scores = q @ torch.cat(keys, dim=2).transpose(-2, -1) / q.shape[-1] ** 0.5
    return scores.softmax(-1) @ torch.cat(values, dim=2)
'''),
]
MORE_WRONG["ring_attention"] = [
    ("no scale on the scores", _RING.replace(" * q.shape[-1] ** -0.5", ""), "ring_attention gave",
     2),
    ("a causal mask", _RING.replace(
        "        block_lse = scores.logsumexp(-1)",
        "        scores = scores.masked_fill(torch.ones_like(scores, dtype=torch.bool).triu(1), "
        "float('-inf'))\n        block_lse = scores.logsumexp(-1)"), "ring_attention gave"),
    ("one step too many: each block goes all the way home", _RING.replace(
        "for step in range(world_size):", "for step in range(world_size + 1):").replace(
        "        if out is None:", "        if step == world_size:\n            break\n"
        "        if out is None:").replace("if step < world_size - 1:", "if step < world_size:"),
     "numbers"),
    ("the partner's keys only (rank ^ 1): right at 2 ranks", '''
def ring_attention(q, k, v):
    import torch.nn.functional as F

    partner = rank ^ 1
    if partner >= world_size:
        return F.scaled_dot_product_attention(q, k, v)
    k2, v2 = torch.empty_like(k), torch.empty_like(v)
    works = dist.batch_isend_irecv([
        dist.P2POp(dist.isend, k, partner), dist.P2POp(dist.irecv, k2, partner),
        dist.P2POp(dist.isend, v, partner), dist.P2POp(dist.irecv, v2, partner)])
    for w in works:
        w.wait()
    return F.scaled_dot_product_attention(q, torch.cat([k, k2], 2), torch.cat([v, v2], 2))''',
     "ring_attention"),
    ("the received keys written into the caller's k", '''
def ring_attention(q, k, v):
    import torch.nn.functional as F

    right, left = (rank + 1) % world_size, (rank - 1) % world_size
    ks, vs = [k.clone()], [v.clone()]
    for _ in range(world_size - 1):
        k2, v2 = torch.empty_like(k), torch.empty_like(v)
        for w in dist.batch_isend_irecv([
                dist.P2POp(dist.isend, k, right), dist.P2POp(dist.irecv, k2, left),
                dist.P2POp(dist.isend, v, right), dist.P2POp(dist.irecv, v2, left)]):
            w.wait()
        k.copy_(k2)
        v.copy_(v2)
        ks.append(k2)
        vs.append(v2)
    return F.scaled_dot_product_attention(q, torch.cat(ks, 2), torch.cat(vs, 2))''',
     "changed the caller's k in place"),
    ("received from any source", _RING.replace("dist.P2POp(dist.irecv, incoming, left)",
                                               "dist.P2POp(dist.irecv, incoming, None)"),
     "ring_attention"),
    ("the sends never waited", _RING.replace(
        "            for work in works:\n                work.wait()",
        "            works[1].wait()"), "never waited"),
    ("the output and its lse", _RING.replace("    return out", "    return out, lse"),
     "ring_attention gave"),
]

# ---- exercise 3: dispatch ------------------------------------------------------------------
_DISPATCH = RIGHT["dispatch"]
ALSO_RIGHT["dispatch"] = [
    ("rows picked expert by expert, a loop instead of sorts", '''
def dispatch(tokens, expert, experts_per_rank):
    experts = experts_per_rank * world_size
    counts = torch.zeros(experts, dtype=torch.int64, device=device)
    send = []
    for e in range(experts):
        chosen = tokens[expert == e]
        counts[e] = len(chosen)
        send.append(chosen)
    received = torch.zeros_like(counts)
    dist.all_to_all_single(output=received, input=counts)
    per_source = received.view(world_size, experts_per_rank)
    rows = torch.empty(int(per_source.sum()), tokens.shape[1], device=device)
    dist.all_to_all_single(rows, torch.cat(send), per_source.sum(1).tolist(),
                           counts.view(world_size, experts_per_rank).sum(1).tolist())
    pieces = list(rows.split(per_source.flatten().tolist()))   # source 0's experts, then source 1's
    return torch.cat([pieces[s * experts_per_rank + e]
                      for e in range(experts_per_rank) for s in range(world_size)])
'''),
]
MORE_WRONG["dispatch"] = [
    ("experts_per_rank hard-coded as 2", _DISPATCH.replace(
        "    experts = experts_per_rank * world_size", "    experts_per_rank = 2\n"
        "    experts = experts_per_rank * world_size"), "dispatch", 2),
    ("the counts exchanged with all_gather", '''
def dispatch(tokens, expert, experts_per_rank):
    experts = experts_per_rank * world_size
    order = torch.argsort(expert, stable=True)
    counts = torch.bincount(expert, minlength=experts)
    every = [torch.empty_like(counts) for _ in range(world_size)]
    dist.all_gather(every, counts)
    mine = slice(rank * experts_per_rank, (rank + 1) * experts_per_rank)
    received = torch.stack(every)[:, mine].flatten()
    send_splits = counts.view(world_size, experts_per_rank).sum(1).tolist()
    receive_splits = received.view(world_size, experts_per_rank).sum(1).tolist()
    rows = tokens.new_empty((sum(receive_splits), tokens.shape[1]))
    dist.all_to_all_single(rows, tokens[order], receive_splits, send_splits)
    local = torch.arange(experts_per_rank, device=tokens.device).repeat(world_size)
    return rows[torch.argsort(local.repeat_interleave(received), stable=True)]''',
     "two all_to_all_single"),
    ("every token sent to every rank, then filtered", '''
def dispatch(tokens, expert, experts_per_rank):
    sizes = torch.full((world_size,), len(tokens), dtype=torch.int64, device=device)
    theirs = torch.empty_like(sizes)
    dist.all_to_all_single(theirs, sizes)
    rows = tokens.new_empty((int(theirs.sum()), tokens.shape[1] + 1))
    mine = torch.cat([tokens, expert[:, None].float()], 1).repeat(world_size, 1)
    dist.all_to_all_single(rows, mine, theirs.tolist(), sizes.tolist())
    keys = rows[:, -1].long()
    return torch.cat([rows[keys == e, :-1] for e in range(rank * experts_per_rank,
                                                         (rank + 1) * experts_per_rank)])''',
     "all_to_all_single sent"),
    ("within an expert, the sources in reverse order", _DISPATCH.replace(
        "    local = torch.arange(experts_per_rank, device=tokens.device).repeat(world_size)\n"
        "    return rows[torch.argsort(local.repeat_interleave(received), stable=True)]",
        "    source = torch.arange(world_size, device=tokens.device)\n"
        "    source = source.repeat_interleave(experts_per_rank)\n"
        "    local = torch.arange(experts_per_rank, device=tokens.device).repeat(world_size)\n"
        "    key = (local * world_size + world_size - 1 - source).repeat_interleave(received)\n"
        "    return rows[torch.argsort(key, stable=True)]"), "dispatch gave"),
    ("each token's rank computed in place in the caller's expert", _DISPATCH.replace(
        "    local = torch.arange(", "    dest = expert\n    dest //= experts_per_rank\n"
        "    local = torch.arange("), "changed the caller's expert in place"),
    ("the rows' all-to-all started and never waited", _DISPATCH.replace(
        "    dist.all_to_all_single(rows, tokens[order], receive_splits, send_splits)",
        "    dist.all_to_all_single(rows, tokens[order], receive_splits, send_splits, "
        "async_op=True)"), "never waited"),
    ("split sizes per expert, not per rank", _DISPATCH.replace(
        "    send_splits = counts.view(world_size, experts_per_rank).sum(1).tolist()\n"
        "    receive_splits = received.view(world_size, experts_per_rank).sum(1).tolist()",
        "    send_splits = counts.tolist()\n    receive_splits = received.tolist()"), "dispatch"),
]
