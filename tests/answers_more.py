"""More answers to the exercises, for tests/test_exercises.py: other
right answers, written unlike the worked solution, that must pass; and more of the wrong
answers learners write, each with a piece of the message its checker must give.

Kinds of wrong answer added here: right only at one world size (tried at 2 ranks as well),
the wrong shape or type, the right value by the forbidden means (a star or an all-to-all
where a pair or a ring is asked, a tree's rounds out of order, point-to-point where
collectives are asked, a fingerprint that grows with the model), a requirement of the text
(inputs left as they were, t filled and returned), side effects, a deadlock, right on some
ranks only.
"""

from __future__ import annotations

from answers import RIGHT

# name -> [(what, source)]: each must pass at 3 ranks (and at 2 alone), and at 4
ALSO_RIGHT: dict[str, list[tuple[str, str]]] = {}
# name -> [(what, source, message piece[, the world size to try it at: 3 unless said])]
MORE_WRONG: dict[str, list[tuple]] = {}
# the exercises run in the notebook itself: name -> [(what, source)] and [(what, source, piece)]
IN_NOTEBOOK_ALSO_RIGHT: dict[str, list[tuple[str, str]]] = {}
IN_NOTEBOOK_MORE_WRONG: dict[str, list[tuple[str, str, str]]] = {}

# ---- notebook 00 ---------------------------------------------------------------------------
ALSO_RIGHT["count_ranks"] = [
    ("the largest rank + 1, an int64 tensor, on the whole world by name", '''
def count_ranks():
    t = torch.tensor([rank + 1], dtype=torch.int64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=dist.group.WORLD)
    return t.item()
'''),
    ("keyword arguments, a request waited on", '''
def count_ranks():
    ones = torch.ones(1, device=device)
    dist.all_reduce(tensor=ones, op=dist.ReduceOp.SUM, async_op=True).wait()
    return round(ones.item())
'''),
]
MORE_WRONG["count_ranks"] = [
    ("sum of ranks, right at 3 only", '''
def count_ranks():
    t = torch.tensor([float(rank)], device=device)
    dist.all_reduce(t)
    return int(t.item())''', "at world size 2, rank 0: count_ranks gave 1 (an int), expected 2", 2),
    ("a barrier, then world_size", '''
def count_ranks():
    dist.barrier()
    return world_size''', "count_ranks reads world_size", 2),
    ("the last rank's rank + 1, broadcast from a hard-coded rank 3", '''
def count_ranks():
    t = torch.tensor([rank + 1], device=device)
    dist.broadcast(t, src=3)
    return int(t.item())''', "at world size 3, rank 0: count_ranks raised", 4),
    ("reduced to rank 0 only", '''
def count_ranks():
    one = torch.ones(1, device=device)
    dist.reduce(one, dst=0)
    return int(one.item())''', "at world size 3, rank 2: count_ranks gave 1 (an int), expected 3"),
    *[("a barrier, then the group's list of ranks", '''
def count_ranks():
    dist.barrier()
    return len(dist.get_process_group_ranks(dist.group.WORLD))''',
       "count_ranks reads get_process_group_ranks", size) for size in (3, 4)],
    ("the count written to the environment", '''
import os

def count_ranks():
    one = torch.ones(1, device=device)
    dist.all_reduce(one)
    os.environ["RANKS_COUNTED"] = str(int(one.item()))
    return int(one.item())''', "changed the environment (os.environ)"),
]

# ---- notebook 01 ---------------------------------------------------------------------------
ALSO_RIGHT["swap_with_partner"] = [
    ("odd ranks send first, partner by arithmetic, keyword arguments", '''
def swap_with_partner(mine):
    if world_size % 2 == 1 and rank == world_size - 1:
        return mine
    partner = rank + 1 if rank % 2 == 0 else rank - 1
    theirs = mine.clone()
    if rank % 2 == 1:
        dist.send(tensor=mine, dst=partner, group=dist.group.WORLD)
        dist.recv(tensor=theirs, src=partner, group=dist.group.WORLD)
    else:
        dist.recv(tensor=theirs, src=partner, group=dist.group.WORLD)
        dist.send(tensor=mine, dst=partner, group=dist.group.WORLD)
    return theirs
'''),
    ("a receive from any source (gloo's recv without src)", '''
def swap_with_partner(mine):
    partner = rank ^ 1
    if partner >= world_size:
        return mine
    theirs = torch.zeros_like(mine)
    if rank < partner:
        dist.send(mine, partner)
        dist.recv(theirs)
    else:
        dist.recv(theirs)
        dist.send(mine, partner)
    return theirs
'''),
]
_SWAP = '''
def swap_with_partner(mine):
    partner = rank ^ 1
    if partner >= world_size:
        return mine
    theirs = torch.empty_like(mine)
    if rank % 2 == 0:
        dist.send(mine, dst=partner)
        dist.recv(theirs, src=partner)
    else:
        dist.recv(theirs, src=partner)
        dist.send(mine, dst=partner)
    return theirs
'''
MORE_WRONG["swap_with_partner"] = [
    ("a collective", '''
def swap_with_partner(mine):
    everyone = [torch.empty_like(mine) for _ in range(world_size)]
    dist.all_gather(everyone, mine)
    partner = rank ^ 1
    return everyone[partner] if partner < world_size else mine''', "point-to-point calls only", 2),
    ("isend and irecv, then wait", '''
def swap_with_partner(mine):
    partner = rank ^ 1
    if partner >= world_size:
        return mine
    theirs = torch.empty_like(mine)
    reqs = [dist.isend(mine, dst=partner), dist.irecv(theirs, src=partner)]
    for req in reqs:
        req.wait()
    return theirs''', "blocking dist.send and dist.recv only", 2),
    ("pairs hard-coded for 4 ranks", _SWAP.replace(
        "    partner = rank ^ 1\n    if partner >= world_size:\n        return mine\n",
        "    partner = {0: 1, 1: 0, 2: 3, 3: 2}[rank]\n"),
     "at world size 3, rank 2: swap_with_partner raised", 4),
    ("everyone sends to everyone, in turn", '''
def swap_with_partner(mine):
    got = {}
    for r in range(world_size):
        if r == rank:
            for dst in range(world_size):
                if dst != rank:
                    dist.send(mine, dst=dst)
        else:
            got[r] = torch.empty_like(mine)
            dist.recv(got[r], src=r)
    return got.get(rank ^ 1, mine)''',
     "sent to 1, 2, 3 and received from 1, 2, 3: a swap is one send to the partner, rank 1, "
     "and one receive from it", 4),
    ("received into mine, in place", _SWAP.replace(
        "    theirs = torch.empty_like(mine)\n", "    theirs = mine\n"),
     "at world size 3, rank 0: swap_with_partner gave"),
    ("a buffer of a fixed shape", _SWAP.replace("torch.empty_like(mine)",
                                                    "torch.empty(2, device=device)"),
     "tensor of shape [2], expected float32 of shape"),
]

ALSO_RIGHT["shift_right"] = [
    ("blocking calls ordered by parity, keyword arguments", '''
def shift_right(mine):
    out = torch.zeros_like(mine)
    to, frm = (rank + 1) % world_size, (rank + world_size - 1) % world_size
    if rank % 2 == 0:
        dist.send(tensor=mine, dst=to, group=dist.group.WORLD)
        dist.recv(tensor=out, src=frm, group=dist.group.WORLD)
    else:
        dist.recv(tensor=out, src=frm, group=dist.group.WORLD)
        dist.send(tensor=mine, dst=to, group=dist.group.WORLD)
    return out
'''),
]
MORE_WRONG["shift_right"] = [
    ("hard-coded 3", '''
def shift_right(mine):
    shifted = torch.empty_like(mine)
    ops = [dist.P2POp(dist.isend, mine, (rank + 1) % 3),
           dist.P2POp(dist.irecv, shifted, (rank - 1) % 3)]
    for req in dist.batch_isend_irecv(ops):
        req.wait()
    return shifted''', "at world size 2, rank 0: shift_right raised", 2),
    ("a collective", '''
def shift_right(mine):
    everyone = [torch.empty_like(mine) for _ in range(world_size)]
    dist.all_gather(everyone, mine)
    return everyone[(rank - 1) % world_size]''', "point-to-point calls only", 2),
    ("no communication", "def shift_right(mine):\n    return mine.clone()",
     "at world size 3, rank 0: shift_right gave"),
    ("a chain that forgets to wrap around", '''
def shift_right(mine):
    shifted = mine.clone()
    if rank > 0:
        dist.recv(shifted, src=rank - 1)
    if rank < world_size - 1:
        dist.send(mine, dst=rank + 1)
    return shifted''', "at world size 3, rank 0: shift_right gave"),
    ("a star through rank 0", '''
def shift_right(mine):
    if rank == 0:
        everyone = [mine] + [torch.empty_like(mine) for _ in range(1, world_size)]
        for src in range(1, world_size):
            dist.recv(everyone[src], src=src)
        for dst in range(1, world_size):
            dist.send(everyone[dst - 1], dst=dst)
        return everyone[-1]
    dist.send(mine, dst=0)
    shifted = torch.empty_like(mine)
    dist.recv(shifted, src=0)
    return shifted''', "a rank sends only to its right neighbour", 4),
    ("a buffer of a fixed shape", '''
def shift_right(mine):
    shifted = torch.empty(3, device=device)
    right, left = (rank + 1) % world_size, (rank - 1) % world_size
    ops = [dist.P2POp(dist.isend, mine, right), dist.P2POp(dist.irecv, shifted, left)]
    for req in dist.batch_isend_irecv(ops):
        req.wait()
    return shifted''', "tensor of shape [3], expected float32 of shape"),
]

ALSO_RIGHT["ring_sum"] = [
    ("blocking calls ordered by parity, a new total each step", '''
def ring_sum(x):
    to, frm = (rank + 1) % world_size, (rank - 1) % world_size
    total, passing = x, x
    for _ in range(world_size - 1):
        incoming = torch.empty_like(x)
        if rank % 2 == 0:
            dist.send(tensor=passing, dst=to, group=dist.group.WORLD)
            dist.recv(tensor=incoming, src=frm, group=dist.group.WORLD)
        else:
            dist.recv(tensor=incoming, src=frm, group=dist.group.WORLD)
            dist.send(tensor=passing, dst=to, group=dist.group.WORLD)
        total = total + incoming
        passing = incoming
    return total
'''),
]
_RING_SUM = '''
def ring_sum(x):
    total, passing = x.clone(), x.clone()
    right, left = (rank + 1) % world_size, (rank - 1) % world_size
    for _ in range(world_size - 1):
        incoming = torch.empty_like(passing)
        ops = [dist.P2POp(dist.isend, passing, right), dist.P2POp(dist.irecv, incoming, left)]
        for req in dist.batch_isend_irecv(ops):
            req.wait()
        total += incoming
        passing = incoming
    return total
'''
MORE_WRONG["ring_sum"] = [
    ("two steps, right at 3", _RING_SUM.replace("range(world_size - 1)", "range(2)"),
     "at world size 2, rank 0: ring_sum gave", 2),
    ("three steps, right at 4", _RING_SUM.replace("range(world_size - 1)", "range(3)"),
     "at world size 3, rank 0: ring_sum gave", 4),
    ("the running total passed on", _RING_SUM.replace("passing = incoming", "passing = total"),
     "at world size 3, rank 0: ring_sum gave"),
    ("a chain: the total on the last rank only", '''
def ring_sum(x):
    total = x.clone()
    if rank > 0:
        incoming = torch.empty_like(x)
        dist.recv(incoming, src=rank - 1)
        total += incoming
    if rank < world_size - 1:
        dist.send(total, dst=rank + 1)
    return total''', "at world size 3, rank 0: ring_sum gave"),
    *[("around the ring the other way", _RING_SUM.replace(
        "right, left = (rank + 1) % world_size, (rank - 1) % world_size",
        "right, left = (rank - 1) % world_size, (rank + 1) % world_size"),
       "a rank sends only to its right neighbour", size) for size in (3, 4)],
    ("every rank sends first, blocking", '''
def ring_sum(x):
    total, passing = x.clone(), x.clone()
    for _ in range(world_size - 1):
        incoming = torch.empty_like(x)
        dist.send(passing, dst=(rank + 1) % world_size)
        dist.recv(incoming, src=(rank - 1) % world_size)
        total += incoming
        passing = incoming
    return total''', "a deadlock at world size 3: rank 0 waits in send to rank 1"),
    ("a buffer of a fixed shape", _RING_SUM.replace(
        "incoming = torch.empty_like(passing)", "incoming = torch.empty(3, device=device)"),
     "at world size 2, rank 0: ring_sum raised RuntimeError: output with shape"),
]

# ---- notebook 02 ---------------------------------------------------------------------------
ALSO_RIGHT["mean_of_all"] = [
    ("AVG on a copy, keyword arguments, the world by name", '''
def mean_of_all(x):
    mean = torch.clone(x)
    dist.all_reduce(tensor=mean, op=dist.ReduceOp.AVG, group=dist.group.WORLD)
    return mean
'''),
    ("a detached copy divided in place", '''
def mean_of_all(x):
    total = x.detach().clone()
    dist.all_reduce(total, op=dist.ReduceOp.SUM)
    total.div_(world_size)
    return total
'''),
]
MORE_WRONG["mean_of_all"] = [
    ("hard-coded 2", '''
def mean_of_all(x):
    total = x.clone()
    dist.all_reduce(total)
    return total / 2''', "at world size 1, rank 0: mean_of_all gave", 2),
    ("float64", '''
def mean_of_all(x):
    total = x.double()
    dist.all_reduce(total)
    return total / world_size''', "a float64 tensor of shape"),
    ("only rank 0 divides", '''
def mean_of_all(x):
    total = x.clone()
    dist.all_reduce(total)
    if rank == 0:
        total /= world_size
    return total''', "at world size 3, rank 1: mean_of_all gave"),
    ("x.detach() taken for a copy", '''
def mean_of_all(x):
    total = x.detach()
    dist.all_reduce(total)
    return total / world_size''', "changed the caller's x"),
    ("AVG, then divided again", '''
def mean_of_all(x):
    total = x.clone()
    dist.all_reduce(total, op=dist.ReduceOp.AVG)
    return total / world_size''', "at world size 3, rank 0: mean_of_all gave"),
    ("notebook 01's ring instead of a collective", '''
def mean_of_all(x):
    total, passing = x.clone(), x.clone()
    right, left = (rank + 1) % world_size, (rank - 1) % world_size
    for _ in range(world_size - 1):
        incoming = torch.empty_like(passing)
        ops = [dist.P2POp(dist.isend, passing, right), dist.P2POp(dist.irecv, incoming, left)]
        for req in dist.batch_isend_irecv(ops):
            req.wait()
        total += incoming
        passing = incoming
    return total / world_size''', "one collective, no point-to-point call"),
]

ALSO_RIGHT["ring_all_gather"] = [
    ("blocking calls by parity, a list of chunks, keyword arguments", '''
def ring_all_gather(chunk):
    n = world_size
    parts = [None] * n
    parts[rank] = chunk.clone()
    for step in range(n - 1):
        out, inc = (rank - step) % n, (rank - step - 1) % n
        parts[inc] = torch.empty_like(chunk)
        if rank % 2 == 0:
            dist.send(tensor=parts[out], dst=(rank + 1) % n, group=dist.group.WORLD)
            dist.recv(tensor=parts[inc], src=(rank - 1) % n, group=dist.group.WORLD)
        else:
            dist.recv(tensor=parts[inc], src=(rank - 1) % n, group=dist.group.WORLD)
            dist.send(tensor=parts[out], dst=(rank + 1) % n, group=dist.group.WORLD)
    return torch.cat(parts)
'''),
]
_GATHER = '''
def ring_all_gather(chunk):
    n, size = world_size, chunk.numel()
    gathered = torch.zeros(n * size, device=chunk.device, dtype=chunk.dtype)
    gathered[rank * size:(rank + 1) * size] = chunk
    right, left = (rank + 1) % n, (rank - 1) % n
    for step in range(n - 1):
        out, inc = (rank - step) % n, (rank - step - 1) % n
        received = torch.empty_like(chunk)
        ops = [dist.P2POp(dist.isend, gathered[out * size:(out + 1) * size].clone(), right),
               dist.P2POp(dist.irecv, received, left)]
        for req in dist.batch_isend_irecv(ops):
            req.wait()
        gathered[inc * size:(inc + 1) * size] = received
    return gathered
'''
MORE_WRONG["ring_all_gather"] = [
    ("chunks of two numbers, as in the lesson's example", RIGHT["ring_all_gather"].replace(
        "n, size = world_size, chunk.numel()", "n, size = world_size, 2"),
     "at world size 3, rank 0: ring_all_gather raised", 3),
    ("hard-coded 3", _GATHER.replace("n, size = world_size,", "n, size = 3,"),
     "at world size 2, rank 0: ring_all_gather raised", 2),
    ("rows stacked, not one tensor end to end", _GATHER.replace(
        "    return gathered", "    return gathered.view(n, size)"),
     "a float32 tensor of shape [3, 3], expected float32 of shape [9]"),
    ("the indices of step 10, not shifted by one", _GATHER.replace(
        "out, inc = (rank - step) % n, (rank - step - 1) % n",
        "out, inc = (rank - step + 1) % n, (rank - step) % n"),
     "at world size 3, rank 0: ring_all_gather gave"),
    ("its own chunk passed on every step", _GATHER.replace(
        "gathered[out * size:(out + 1) * size].clone()", "chunk"),
     "at world size 3, rank 0: ring_all_gather gave"),
    ("every rank sends first, blocking", '''
def ring_all_gather(chunk):
    n, size = world_size, chunk.numel()
    parts = [torch.empty_like(chunk) for _ in range(n)]
    parts[rank] = chunk.clone()
    for step in range(n - 1):
        out, inc = (rank - step) % n, (rank - step - 1) % n
        dist.send(parts[out], dst=(rank + 1) % n)
        dist.recv(parts[inc], src=(rank - 1) % n)
    return torch.cat(parts)''', "a deadlock at world size 3: rank 0 waits in send to rank 1"),
    ("all_gather", '''
def ring_all_gather(chunk):
    everyone = [torch.empty_like(chunk) for _ in range(world_size)]
    dist.all_gather(everyone, chunk)
    return torch.cat(everyone)''', "point-to-point calls only", 2),
]

ALSO_RIGHT["tree_broadcast"] = [
    ("each rank's own part of the tree: receive once, then send nearest first", '''
def tree_broadcast(t):
    step = 1
    if rank > 0:
        highest = 1 << (rank.bit_length() - 1)
        dist.recv(tensor=t, src=rank - highest, group=dist.group.WORLD)
        step = 2 * highest
    while rank + step < world_size:
        dist.send(tensor=t, dst=rank + step, group=dist.group.WORLD)
        step *= 2
    return t
'''),
    ("non-blocking calls posted round by round with batch_isend_irecv", '''
import math

def tree_broadcast(t):
    for k in range(math.ceil(math.log2(world_size))):
        step = 2 ** k
        ops = []
        if rank < step and rank + step < world_size:
            ops.append(dist.P2POp(dist.isend, t, rank + step))
        elif step <= rank < 2 * step:
            ops.append(dist.P2POp(dist.irecv, t, rank - step))
        if ops:
            for req in dist.batch_isend_irecv(ops):
                req.wait()
    return t
'''),
    ("rounds counted by bit_length, one round too many at 4", '''
def tree_broadcast(t):
    for k in range(world_size.bit_length()):
        low, high = 2 ** k, 2 ** (k + 1)
        if rank < low and rank + low < world_size:
            dist.send(t, rank + low)
        elif low <= rank < high:
            dist.recv(t, rank - low)
    return t
'''),
]
_TREE = '''
import math

def tree_broadcast(t):
    for k in range(math.ceil(math.log2(world_size))):
        step = 2 ** k
        if rank < step and rank + step < world_size:
            dist.send(t, dst=rank + step)
        elif step <= rank < 2 * step:
            dist.recv(t, src=rank - step)
    return t
'''
MORE_WRONG["tree_broadcast"] = [
    *[("floor(log2 n) rounds, right at powers of two", _TREE.replace(
        "math.ceil(math.log2(world_size))", "int(math.log2(world_size))"),
       "at world size 3, rank 2: tree_broadcast gave", size) for size in (3, 4)],
    ("the farthest child first", '''
def tree_broadcast(t):
    step = 1
    if rank > 0:
        highest = 1 << (rank.bit_length() - 1)
        dist.recv(t, src=rank - highest)
        step = 2 * highest
    children = []
    while rank + step < world_size:
        children.append(rank + step)
        step *= 2
    for child in reversed(children):
        dist.send(t, dst=child)
    return t''', "sent to [2, 1], in that order", 4),
    ("a receive from any source", _TREE.replace("dist.recv(t, src=rank - step)", "dist.recv(t)"),
     "received from any source: in the tree rank 1 receives once, from rank 0"),
    ("the receivers' bound forgotten", '''
import math

def tree_broadcast(t):
    for k in range(math.ceil(math.log2(world_size))):
        step = 2 ** k
        if rank < step:
            if rank + step < world_size:
                dist.send(t, dst=rank + step)
        else:
            dist.recv(t, src=rank - step)
    return t''', "a deadlock at world size 3: rank 0 waits in send to rank 2, rank 2 waits in "
                 "recv from rank 1"),
    ("t filled, not returned", _TREE.replace("    return t\n", ""), "tree_broadcast gave None", 2),
    ("dist.broadcast", "def tree_broadcast(t):\n    dist.broadcast(t, src=0)\n    return t",
     "point-to-point calls only", 2),
]

# ---- notebook 03 ---------------------------------------------------------------------------
ALSO_RIGHT["global_mean"] = [
    ("everyone's pair gathered, the mean computed on each rank", '''
def global_mean(value, count):
    mine = torch.tensor([value * count, count], dtype=torch.float64, device=device)
    everyone = [torch.zeros_like(mine) for _ in range(world_size)]
    dist.all_gather(everyone, mine, group=dist.group.WORLD)
    total = torch.stack(everyone).sum(dim=0)
    return float(total[0] / total[1])
'''),
    ("two reductions in float32, keyword arguments", '''
def global_mean(value, count):
    loss_sum = torch.tensor([value * count], device=device)
    samples = torch.tensor([count], dtype=torch.int64, device=device)
    dist.all_reduce(tensor=loss_sum, op=dist.ReduceOp.SUM)
    dist.all_reduce(tensor=samples, op=dist.ReduceOp.SUM)
    return loss_sum.item() / samples.item()
'''),
]
_GLOBAL_MEAN = '''
def global_mean(value, count):
    t = torch.tensor([value * count, float(count)], dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return (t[0] / t[1]).item()
'''
MORE_WRONG["global_mean"] = [
    ("mean of the means", '''
def global_mean(value, count):
    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return (t / world_size).item()''', "at world size 2, rank 0: global_mean gave", 2),
    *[("every rank's count taken for its own", '''
def global_mean(value, count):
    t = torch.tensor([value * count], dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return (t / (count * world_size)).item()''',
       f"at world size {size}, rank 0: global_mean gave", size) for size in (3, 4)],
    ("the means summed over the counts summed", _GLOBAL_MEAN.replace(
        "[value * count, float(count)]", "[value, float(count)]"),
     "at world size 3, rank 0: global_mean gave"),
    ("reduced to rank 0 only", _GLOBAL_MEAN.replace("dist.all_reduce(t)", "dist.reduce(t, dst=0)"),
     "at world size 3, rank 1: global_mean gave"),
    ("point-to-point through rank 0", '''
def global_mean(value, count):
    t = torch.tensor([value * count, float(count)], dtype=torch.float64, device=device)
    if rank == 0:
        for src in range(1, world_size):
            part = torch.empty_like(t)
            dist.recv(part, src=src)
            t += part
        for dst in range(1, world_size):
            dist.send(t, dst=dst)
    else:
        dist.send(t, dst=0)
        dist.recv(t, src=0)
    return (t[0] / t[1]).item()''', "collectives only, please"),
    ("a numpy float", _GLOBAL_MEAN.replace("(t[0] / t[1]).item()", "(t[0] / t[1]).cpu().numpy()"),
     "expected"),
    ("a list of one float", _GLOBAL_MEAN.replace("(t[0] / t[1]).item()", "(t[:1] / t[1]).tolist()"),
     "a list"),
]

ALSO_RIGHT["weighted_average_gradients"] = [
    ("one flat buffer, the count in its last slot, copied back", '''
def weighted_average_gradients(model, n_local):
    grads = [p.grad for p in model.parameters()]
    flat = torch.cat([g.reshape(-1) * n_local for g in grads]
                     + [torch.tensor([float(n_local)], device=device)])
    dist.all_reduce(tensor=flat, op=dist.ReduceOp.SUM, group=dist.group.WORLD)
    offset = 0
    for g in grads:
        g.copy_((flat[offset:offset + g.numel()] / flat[-1]).view_as(g))
        offset += g.numel()
'''),
    ("new gradient tensors assigned, weights gathered as a fraction first", '''
def weighted_average_gradients(model, n_local):
    total = torch.tensor([n_local], dtype=torch.int64, device=device)
    dist.all_reduce(total)
    share = n_local / total.item()
    for p in model.parameters():
        g = p.grad * share
        dist.all_reduce(g)
        p.grad = g
'''),
]
_WEIGHTED = '''
def weighted_average_gradients(model, n_local):
    total = torch.tensor([float(n_local)], device=device)
    dist.all_reduce(total)
    for p in model.parameters():
        p.grad *= n_local
        dist.all_reduce(p.grad)
        p.grad /= total
'''
MORE_WRONG["weighted_average_gradients"] = [
    ("a plain average", '''
def weighted_average_gradients(model, n_local):
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= world_size''', "at world size 2, rank 0: weighted_average_gradients gave", 2),
    ("every rank's count taken for its own", '''
def weighted_average_gradients(model, n_local):
    for p in model.parameters():
        p.grad *= n_local
        dist.all_reduce(p.grad)
        p.grad /= n_local * world_size''', "values off by up to"),
    ("the weighted sum not divided by the total count", _WEIGHTED.replace(
        "        p.grad /= total\n", "        p.grad /= world_size\n"), "values off by up to"),
    ("reduced to rank 0 only", _WEIGHTED.replace(
        "dist.all_reduce(p.grad)", "dist.reduce(p.grad, dst=0)"),
     "at world size 3, rank 1: weighted_average_gradients gave"),
    ("new gradients returned, p.grad left as it was", '''
def weighted_average_gradients(model, n_local):
    total = torch.tensor([float(n_local)], device=device)
    dist.all_reduce(total)
    averaged = []
    for p in model.parameters():
        g = p.grad * n_local
        dist.all_reduce(g)
        averaged.append(g / total)
    return averaged''', "values off by up to"),
    ("the weights averaged instead of the gradients", _WEIGHTED.replace("p.grad", "p.data"),
     "values off by up to"),
    ("point-to-point through rank 0", '''
def weighted_average_gradients(model, n_local):
    grads = [p.grad for p in model.parameters()]
    flat = torch.cat([g.reshape(-1) * n_local for g in grads]
                     + [torch.tensor([float(n_local)], device=device)])
    if rank == 0:
        for src in range(1, world_size):
            part = torch.empty_like(flat)
            dist.recv(part, src=src)
            flat += part
        for dst in range(1, world_size):
            dist.send(flat, dst=dst)
    else:
        dist.send(flat, dst=0)
        dist.recv(flat, src=0)
    offset = 0
    for g in grads:
        g.copy_((flat[offset:offset + g.numel()] / flat[-1]).view_as(g))
        offset += g.numel()''', "collectives only, please"),
]

ALSO_RIGHT["in_sync"] = [
    ("every rank's digest gathered (4 numbers), compared with torch.equal", '''
import hashlib

def in_sync(model):
    data = b"".join(p.detach().cpu().numpy().tobytes() for p in model.parameters())
    digest = hashlib.blake2b(data, digest_size=32).digest()
    mine = torch.tensor([int.from_bytes(digest[i:i + 8], "big", signed=True)
                         for i in range(0, 32, 8)], device=device)
    everyone = [torch.empty_like(mine) for _ in range(world_size)]
    dist.all_gather(everyone, mine, group=dist.group.WORLD)
    return all(torch.equal(mine, theirs) for theirs in everyone)
'''),
]
_SYNC = '''
import hashlib

def in_sync(model):
    flat = torch.cat([p.detach().reshape(-1).cpu() for p in model.parameters()])
    digest = hashlib.sha256(flat.numpy().tobytes()).digest()
    fingerprint = torch.tensor([int.from_bytes(digest[:8], "little", signed=True)], device=device)
    low, high = fingerprint.clone(), fingerprint.clone()
    dist.all_reduce(low, op=dist.ReduceOp.MIN)
    dist.all_reduce(high, op=dist.ReduceOp.MAX)
    return bool(low.item() == high.item())
'''
MORE_WRONG["in_sync"] = [
    *[("compared with rank 0's fingerprint, each rank on its own", '''
import hashlib

def in_sync(model):
    flat = torch.cat([p.detach().reshape(-1).cpu() for p in model.parameters()])
    digest = hashlib.sha256(flat.numpy().tobytes()).digest()
    mine = torch.tensor([int.from_bytes(digest[:8], "little", signed=True)], device=device)
    theirs = mine.clone()
    dist.broadcast(theirs, src=0)
    return bool(torch.equal(mine, theirs))''', "in_sync gave True (a bool), expected False", size)
      for size in (3, 4)],
    ("a fingerprint per parameter tensor", '''
import hashlib

def in_sync(model):
    prints = [int.from_bytes(hashlib.sha256(p.detach().cpu().numpy().tobytes()).digest()[:8],
                             "little", signed=True) for p in model.parameters()]
    fingerprint = torch.tensor(prints, device=device)
    low, high = fingerprint.clone(), fingerprint.clone()
    dist.all_reduce(low, op=dist.ReduceOp.MIN)
    dist.all_reduce(high, op=dist.ReduceOp.MAX)
    return torch.equal(low, high)''', "its collectives carried 132 numbers from this rank"),
    ("a random projection, seeded globally", '''
def in_sync(model):
    flat = torch.cat([p.detach().reshape(-1).cpu().double() for p in model.parameters()])
    torch.manual_seed(0)
    fingerprint = (flat @ torch.randn(flat.numel(), dtype=torch.float64)).reshape(1).to(device)
    low, high = fingerprint.clone(), fingerprint.clone()
    dist.all_reduce(low, op=dist.ReduceOp.MIN)
    dist.all_reduce(high, op=dist.ReduceOp.MAX)
    return bool(low.item() == high.item())''', "changed torch's random generator"),
    ("fingerprints passed around the ring", '''
import hashlib

def in_sync(model):
    flat = torch.cat([p.detach().reshape(-1).cpu() for p in model.parameters()])
    digest = hashlib.sha256(flat.numpy().tobytes()).digest()
    passing = torch.tensor([int.from_bytes(digest[:8], "little", signed=True)], device=device)
    mine, same = passing.clone(), True
    for _ in range(world_size - 1):
        incoming = torch.empty_like(passing)
        ops = [dist.P2POp(dist.isend, passing, (rank + 1) % world_size),
               dist.P2POp(dist.irecv, incoming, (rank - 1) % world_size)]
        for req in dist.batch_isend_irecv(ops):
            req.wait()
        same = same and torch.equal(incoming, mine)
        passing = incoming
    return same''', "collectives only, please"),
    ("a numpy bool", _SYNC.replace("bool(low.item() == high.item())",
                                   "(low.cpu().numpy() == high.cpu().numpy())[0]"), "expected"),
    ("a tensor", _SYNC.replace("bool(low.item() == high.item())", "low == high"), "tensor", 2),
]


# ---- notebooks 04 to 11: one module each ---------------------------------------------------
def _gather() -> None:
    import answers_checkpointing
    import answers_composed
    import answers_ddp
    import answers_hangs
    import answers_launching
    import answers_model_parallel
    import answers_sequences
    import answers_sharding

    for module in (answers_ddp, answers_checkpointing, answers_hangs, answers_launching,
                   answers_sharding, answers_model_parallel, answers_sequences, answers_composed):
        for mine, theirs in ((ALSO_RIGHT, "ALSO_RIGHT"), (MORE_WRONG, "MORE_WRONG"),
                             (IN_NOTEBOOK_ALSO_RIGHT, "IN_NOTEBOOK_ALSO_RIGHT"),
                             (IN_NOTEBOOK_MORE_WRONG, "IN_NOTEBOOK_MORE_WRONG")):
            added = getattr(module, theirs, {})
            assert not set(added) & set(mine), (module.__name__, set(added) & set(mine))
            mine.update(added)
    import answers_shared  # kinds planted in exercises that have answers above: added to them

    for mine, theirs in ((MORE_WRONG, answers_shared.MORE_WRONG_SHARED),
                         (ALSO_RIGHT, answers_shared.ALSO_RIGHT_SHARED)):
        for name, planted in theirs.items():
            mine[name] = mine[name] + planted


_gather()
