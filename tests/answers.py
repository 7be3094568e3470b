"""Answers to the course's exercises, for tests/test_exercises.py: the right one, and the wrong
ones learners really write, each with a piece of the message its checker must give.

Kinds of wrong answer planted for (nearly) every exercise: the stub; right only at the world
size it is tried at (a hard-coded size, a sum that happens to match); the wrong type or
shape; the right value by the forbidden means (a collective where point-to-point is asked
for, no communication at all, every rank doing everything); a deadlock; right on rank 0 only.
"""

from __future__ import annotations


def define(source: str, name: str):
    """The function `name` that source defines (for the exercises run in the notebook)."""
    namespace: dict = {}
    exec(source, namespace)
    return namespace[name]


RIGHT: dict[str, str] = {}
# name -> [(what, source, message piece[, the world size to try it at: 3 unless said])]
WRONG: dict[str, list[tuple]] = {}

# ---- notebook 00 ---------------------------------------------------------------------------
RIGHT["count_ranks"] = '''
def count_ranks():
    one = torch.ones(1, device=device)
    dist.all_reduce(one)
    return int(one.item())
'''
WRONG["count_ranks"] = [
    ("the stub", "def count_ranks():\n    return None", "gave None (a NoneType), expected 3"),
    ("hard-coded 3", "def count_ranks():\n    return 3", "made 0 collective calls"),
    ("hard-coded 4", "def count_ranks():\n    return 4", "made 0 collective calls", 4),
    ("world_size", "def count_ranks():\n    return world_size", "made 0 collective calls"),
    ("get_world_size", "def count_ranks():\n    return dist.get_world_size()",
     "made 0 collective calls"),
    ("sum of ranks, right at 3", '''
def count_ranks():
    t = torch.tensor([float(rank)], device=device)
    dist.all_reduce(t)
    return int(t.item())''', "at world size 2, rank 0: count_ranks gave 1"),
    ("a float", RIGHT["count_ranks"].replace("int(one.item())", "one.item()"),
     "3.0 (a float), expected 3 (an int)"),
    ("a tensor", RIGHT["count_ranks"].replace("int(one.item())", "one"), "tensor [3.0]"),
    ("two collectives",
     RIGHT["count_ranks"].replace("    return", "    dist.barrier()\n    return"),
     "made 2 collective calls"),
]

# what "without asking" rules out, and what the checker reads to see it (both world sizes)
_ASKING = [
    ("a barrier, then world_size", '''
def count_ranks():
    dist.barrier()
    return world_size''', "count_ranks reads world_size"),
    ("a barrier, then dist.get_world_size()", '''
def count_ranks():
    dist.barrier()
    return dist.get_world_size()''', "count_ranks reads get_world_size"),
    ("the collective, then a helper that reads world_size", '''
def how_many():
    return world_size

def count_ranks():
    one = torch.ones(1, device=device)
    dist.all_reduce(one)
    return how_many()''', "count_ranks reads world_size"),
]
WRONG["count_ranks"] += [(*planted, size) for planted in _ASKING for size in (3, 4)]

# ---- notebook 01 ---------------------------------------------------------------------------
RIGHT["swap_with_partner"] = '''
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
WRONG["swap_with_partner"] = [
    ("the lesson's partner, read from outside", "partner = rank ^ 1\n" + RIGHT[
        "swap_with_partner"].replace("    partner = rank ^ 1\n", ""),
     "name 'partner' is not defined"),
    ("the stub", "def swap_with_partner(mine):\n    return None", "gave None"),
    ("no exchange", "def swap_with_partner(mine):\n    return mine", "expected"),
    ("no partner check", RIGHT["swap_with_partner"].replace(
        "    if partner >= world_size:\n        return mine\n", ""),
     "rank 2: swap_with_partner raised"),
    ("a collective", '''
def swap_with_partner(mine):
    everyone = [torch.empty_like(mine) for _ in range(world_size)]
    dist.all_gather(everyone, mine)
    partner = rank ^ 1
    return everyone[partner] if partner < world_size else mine''', "point-to-point calls only"),
    ("both receive first", RIGHT["swap_with_partner"].replace("rank % 2 == 0", "False"),
     "a deadlock at world size 3: rank 0 waits in recv from rank 1, rank 1 waits in recv from "
     "rank 0"),
    ("a list", RIGHT["swap_with_partner"].replace("    return theirs", "    return [theirs]"),
     "a list"),
]

# the exercise asks for blocking calls ordered by parity: step 5's other fix is not it
_NOT_BLOCKING = [
    ("isend and irecv, then wait", '''
def swap_with_partner(mine):
    partner = rank ^ 1
    if partner >= world_size:
        return mine
    theirs = torch.empty_like(mine)
    reqs = [dist.isend(mine, dst=partner), dist.irecv(theirs, src=partner)]
    for req in reqs:
        req.wait()
    return theirs''', "blocking dist.send and dist.recv only"),
    ("batch_isend_irecv", '''
def swap_with_partner(mine):
    partner = rank ^ 1
    if partner >= world_size:
        return mine
    theirs = torch.empty_like(mine)
    ops = [dist.P2POp(dist.isend, mine, partner), dist.P2POp(dist.irecv, theirs, partner)]
    for req in dist.batch_isend_irecv(ops):
        req.wait()
    return theirs''', "blocking dist.send and dist.recv only"),
]
WRONG["swap_with_partner"] += [(*planted, size) for planted in _NOT_BLOCKING for size in (3, 4)]

RIGHT["shift_right"] = '''
def shift_right(mine):
    shifted = torch.empty_like(mine)
    right, left = (rank + 1) % world_size, (rank - 1) % world_size
    ops = [dist.P2POp(dist.isend, mine, right), dist.P2POp(dist.irecv, shifted, left)]
    for req in dist.batch_isend_irecv(ops):
        req.wait()
    return shifted
'''
WRONG["shift_right"] = [
    ("the stub", "def shift_right(mine):\n    return torch.zeros_like(mine)", "expected"),
    ("hard-coded 3", RIGHT["shift_right"].replace("% world_size", "% 3"),
     "at world size 2"),
    ("hard-coded 4", RIGHT["shift_right"].replace("% world_size", "% 4"), "at world size 3", 4),
    ("to the left", RIGHT["shift_right"].replace("mine, right", "mine, left").replace(
        "shifted, left", "shifted, right"), "at world size 3, rank 0: shift_right gave"),
    ("a collective", '''
def shift_right(mine):
    everyone = [torch.empty_like(mine) for _ in range(world_size)]
    dist.all_gather(everyone, mine)
    return everyone[(rank - 1) % world_size]''', "point-to-point calls only"),
    ("everyone receives first", '''
def shift_right(mine):
    shifted = torch.empty_like(mine)
    dist.recv(shifted, src=(rank - 1) % world_size)
    dist.send(mine, dst=(rank + 1) % world_size)
    return shifted''', "a deadlock at world size 3: rank 0 waits in recv from rank 2"),
]

# not posted together, or not around the ring (both world sizes)
_SHIFT_FORM = [
    ("isend then irecv, one by one", '''
def shift_right(mine):
    shifted = torch.empty_like(mine)
    reqs = [dist.isend(mine, dst=(rank + 1) % world_size),
            dist.irecv(shifted, src=(rank - 1) % world_size)]
    for req in reqs:
        req.wait()
    return shifted''', "one by one"),
    ("every rank sends to every rank", '''
def shift_right(mine):
    others = [r for r in range(world_size) if r != rank]
    got = {r: torch.empty_like(mine) for r in others}
    ops = [dist.P2POp(dist.isend, mine, r) for r in others]
    ops += [dist.P2POp(dist.irecv, got[r], r) for r in others]
    for req in dist.batch_isend_irecv(ops):
        req.wait()
    return got[(rank - 1) % world_size]''', "a rank sends only to its right neighbour"),
]
WRONG["shift_right"] += [(*planted, size) for planted in _SHIFT_FORM for size in (3, 4)]

RIGHT["ring_sum"] = '''
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
WRONG["ring_sum"] = [
    ("the stub", "def ring_sum(x):\n    return x", "expected"),
    ("all_reduce", "def ring_sum(x):\n    t = x.clone()\n    dist.all_reduce(t)\n    return t",
     "point-to-point calls only"),
    ("two steps, right at 3", RIGHT["ring_sum"].replace("range(world_size - 1)", "range(2)"),
     "at world size 2"),
    ("a float", RIGHT["ring_sum"].replace("return total", "return total.sum().item()"),
     "(a float)"),
]

# the right total, but not around the ring in world_size - 1 steps (both world sizes)
_NOT_A_RING = [
    ("a star through rank 0", '''
def ring_sum(x):
    if rank == 0:
        total = x.clone()
        for src in range(1, world_size):
            part = torch.empty_like(x)
            dist.recv(part, src=src)
            total += part
        for dst in range(1, world_size):
            dist.send(total, dst=dst)
        return total
    dist.send(x, dst=0)
    total = torch.empty_like(x)
    dist.recv(total, src=0)
    return total''', "a rank sends only to its right neighbour"),
    ("every rank sends to every rank", '''
def ring_sum(x):
    others = [r for r in range(world_size) if r != rank]
    parts = [torch.empty_like(x) for _ in others]
    ops = [dist.P2POp(dist.isend, x, r) for r in others]
    ops += [dist.P2POp(dist.irecv, p, r) for r, p in zip(others, parts)]
    for req in dist.batch_isend_irecv(ops):
        req.wait()
    return x + sum(parts)''', "a rank sends only to its right neighbour"),
    ("a token around the ring, then the total around again", '''
def ring_sum(x):
    right, left = (rank + 1) % world_size, (rank - 1) % world_size
    total = x.clone()
    if rank != 0:
        incoming = torch.empty_like(x)
        dist.recv(incoming, src=left)
        total += incoming
    if rank != world_size - 1:
        dist.send(total, dst=right)
    if rank == world_size - 1:
        dist.send(total, dst=right)
    else:
        dist.recv(total, src=left)
        if rank != world_size - 2:
            dist.send(total, dst=right)
    return total''', "the ring takes exactly"),
    ("isend and irecv one by one", RIGHT["ring_sum"].replace(
        "ops = [dist.P2POp(dist.isend, passing, right), dist.P2POp(dist.irecv, incoming, left)]\n"
        "        for req in dist.batch_isend_irecv(ops):",
        "reqs = [dist.isend(passing, dst=right), dist.irecv(incoming, src=left)]\n"
        "        for req in reqs:"), "one by one"),
]
WRONG["ring_sum"] += [(*planted, size) for planted in _NOT_A_RING for size in (3, 4)]

# ---- notebook 02 ---------------------------------------------------------------------------
RIGHT["mean_of_all"] = '''
def mean_of_all(x):
    total = x.clone()
    dist.all_reduce(total)
    return total / world_size
'''
WRONG["mean_of_all"] = [
    ("the stub", "def mean_of_all(x):\n    return x", "expected"),
    ("the sum", RIGHT["mean_of_all"].replace(" / world_size", ""), "expected"),
    ("hard-coded 3", RIGHT["mean_of_all"].replace("world_size", "3"), "at world size 2"),
    ("hard-coded 4", RIGHT["mean_of_all"].replace("world_size", "4"), "at world size 3", 4),
    ("all_gather", '''
def mean_of_all(x):
    everyone = [torch.empty_like(x) for _ in range(world_size)]
    dist.all_gather(everyone, x)
    return torch.stack(everyone).mean(0)''', "one all_reduce is all it takes"),
    ("reduce and broadcast", '''
def mean_of_all(x):
    t = x.clone()
    dist.reduce(t, dst=0)
    dist.broadcast(t, src=0)
    return t / world_size''', "made 2 collective calls"),
    ("a float", RIGHT["mean_of_all"].replace("return total / world_size",
                                             "return (total / world_size).mean().item()"),
     "(a float)"),
]

# x left as it was (the text says so): all_reduce in place on the caller's x, at 3 and 4 ranks
WRONG["mean_of_all"] += [
    (what, source, "changed the caller's x", size) for size in (3, 4) for what, source in (
        ("all_reduce on x itself",
         "def mean_of_all(x):\n    dist.all_reduce(x)\n    return x / world_size"),
        ("AVG on x itself",
         "def mean_of_all(x):\n    dist.all_reduce(x, op=dist.ReduceOp.AVG)\n    return x"),
    )
]

RIGHT["ring_all_gather"] = '''
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
WRONG["ring_all_gather"] = [
    ("the stub", "def ring_all_gather(chunk):\n    return torch.zeros(2 * world_size)",
     "expected"),
    ("all_gather", '''
def ring_all_gather(chunk):
    everyone = [torch.empty_like(chunk) for _ in range(world_size)]
    dist.all_gather(everyone, chunk)
    return torch.cat(everyone)''', "point-to-point calls only"),
    ("hard-coded 3", RIGHT["ring_all_gather"].replace("n, size = world_size,", "n, size = 3,"),
     "at world size 2"),
    ("a list", RIGHT["ring_all_gather"].replace("    return gathered",
                                                "    return list(gathered.split(size))"),
     "a list"),
]

# a ring of world_size - 1 steps of one chunk each (the text says so), at 3 and 4 ranks
WRONG["ring_all_gather"] += [
    (what, source, piece, size) for size in (3, 4) for what, source, piece in (
        ("every rank to every rank", '''
def ring_all_gather(chunk):
    n, size = world_size, chunk.numel()
    parts = [torch.empty_like(chunk) for _ in range(n)]
    parts[rank] = chunk.clone()
    ops = [dist.P2POp(dist.isend, chunk, r) for r in range(n) if r != rank]
    ops += [dist.P2POp(dist.irecv, parts[r], r) for r in range(n) if r != rank]
    for req in dist.batch_isend_irecv(ops):
        req.wait()
    return torch.cat(parts)''', "sent to rank(s)"),
        ("a star through rank 0", '''
def ring_all_gather(chunk):
    n, size = world_size, chunk.numel()
    gathered = torch.zeros(n * size, device=chunk.device, dtype=chunk.dtype)
    if rank == 0:
        gathered[:size] = chunk
        for r in range(1, n):
            dist.recv(gathered[r * size:(r + 1) * size], src=r)
        for r in range(1, n):
            dist.send(gathered, dst=r)
    else:
        dist.send(chunk, dst=0)
        dist.recv(gathered, src=0)
    return gathered''', "around the ring a rank"),
        ("the whole buffer every step", '''
def ring_all_gather(chunk):
    n, size = world_size, chunk.numel()
    gathered = torch.zeros(n * size, device=chunk.device, dtype=chunk.dtype)
    gathered[rank * size:(rank + 1) * size] = chunk
    right, left = (rank + 1) % n, (rank - 1) % n
    for step in range(n - 1):
        inc = (rank - step - 1) % n
        received = torch.empty_like(gathered)
        ops = [dist.P2POp(dist.isend, gathered.clone(), right),
               dist.P2POp(dist.irecv, received, left)]
        for req in dist.batch_isend_irecv(ops):
            req.wait()
        gathered[inc * size:(inc + 1) * size] = received[inc * size:(inc + 1) * size]
    return gathered''', "each step passes one chunk"),
    )
]

RIGHT["tree_broadcast"] = '''
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
WRONG["tree_broadcast"] = [
    ("the stub", "def tree_broadcast(t):\n    return t", "expected"),
    ("dist.broadcast", "def tree_broadcast(t):\n    dist.broadcast(t, src=0)\n    return t",
     "point-to-point calls only"),
    ("every rank from rank 0 (right at 3)", '''
def tree_broadcast(t):
    if rank == 0:
        for r in range(1, world_size):
            dist.send(t, dst=r)
    else:
        dist.recv(t, src=0)
    return t''', "a tree needs at most 2 rounds", 4),
]

# the tree of the text, t filled and returned (the text says so), at 3 and 4 ranks
WRONG["tree_broadcast"] += [
    (what, source, piece, size) for size in (3, 4) for what, source, piece in (
        ("a chain 0 -> 1 -> 2 -> ...", '''
def tree_broadcast(t):
    if rank > 0:
        dist.recv(t, src=rank - 1)
    if rank + 1 < world_size:
        dist.send(t, dst=rank + 1)
    return t''', "in the tree rank 2 receives once, from rank 0"),
        ("rank 1 sends to all the others", '''
def tree_broadcast(t):
    if rank == 0:
        dist.send(t, dst=1)
    elif rank == 1:
        dist.recv(t, src=0)
        for r in range(2, world_size):
            dist.send(t, dst=r)
    else:
        dist.recv(t, src=1)
    return t''', "in the tree rank 2 receives once, from rank 0"),
        ("a copy filled and returned", RIGHT["tree_broadcast"].replace(
            "def tree_broadcast(t):\n", "def tree_broadcast(t):\n    t = t.clone()\n"),
         "returned another tensor"),
    )
]

# ---- notebook 03 ---------------------------------------------------------------------------
RIGHT["global_mean"] = '''
def global_mean(value, count):
    t = torch.tensor([value * count, float(count)], dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return (t[0] / t[1]).item()
'''
WRONG["global_mean"] = [
    ("the stub", "def global_mean(value, count):\n    return value", "expected"),
    ("mean of the means", '''
def global_mean(value, count):
    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return (t / world_size).item()''', "expected"),
    ("a tensor", RIGHT["global_mean"].replace("(t[0] / t[1]).item()", "t[0] / t[1]"),
     "tensor"),
]

RIGHT["weighted_average_gradients"] = '''
def weighted_average_gradients(model, n_local):
    total = torch.tensor([float(n_local)], device=device)
    dist.all_reduce(total)
    for p in model.parameters():
        p.grad *= n_local
        dist.all_reduce(p.grad)
        p.grad /= total
'''
WRONG["weighted_average_gradients"] = [
    ("the stub", "def weighted_average_gradients(model, n_local):\n    pass",
     "values off by up to"),
    ("a plain average", '''
def weighted_average_gradients(model, n_local):
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= world_size''', "values off by up to"),
]
WRONG["weighted_average_gradients"] += [  # the exercise changes gradients, never the weights
    ("an SGD step as well", RIGHT["weighted_average_gradients"] + '''
        with torch.no_grad():
            p -= 0.1 * p.grad''', "changed the parameter", size) for size in (3, 4)]

RIGHT["in_sync"] = '''
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
WRONG["in_sync"] = [
    ("the stub", "def in_sync(model):\n    return True", "made no collective call"),
    ("everything from rank 0", '''
def in_sync(model):
    mine = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    theirs = mine.clone()
    dist.broadcast(theirs, src=0)
    same = torch.tensor([float(torch.equal(mine, theirs))], device=device)
    dist.all_reduce(same, op=dist.ReduceOp.MIN)
    return bool(same.item() == 1.0)''', "carried"),
    ("sums only", '''
def in_sync(model):
    total = sum(p.detach().double().sum() for p in model.parameters()).reshape(1).to(device)
    low, high = total.clone(), total.clone()
    dist.all_reduce(low, op=dist.ReduceOp.MIN)
    dist.all_reduce(high, op=dist.ReduceOp.MAX)
    return bool(low.item() == high.item())''', "expected False"),
    ("a tensor", RIGHT["in_sync"].replace("bool(low.item() == high.item())", "low == high"),
     "tensor"),
]
WRONG["in_sync"] += [  # the last bit (one ulp), and object collectives, at 3 and 4 ranks
    *[("a fingerprint of the values rounded to 1e-6", RIGHT["in_sync"].replace(
        "flat.numpy()", "torch.round(flat, decimals=6).numpy()"), "expected False", size)
      for size in (3, 4)],
    *[("everyone's parameters by all_gather_object", '''
def in_sync(model):
    mine = [p.detach().cpu() for p in model.parameters()]
    everyone = [None] * world_size
    dist.all_gather_object(everyone, mine)
    return all(all(torch.equal(a, b) for a, b in zip(theirs, mine)) for theirs in everyone)''',
       "tensor collectives only", size) for size in (3, 4)],
]

# ---- notebook 04 ---------------------------------------------------------------------------
RIGHT["distributed_accuracy"] = '''
def distributed_accuracy(model, x, y):
    share = slice(rank, len(x), world_size)  # disjoint shares, together all of x
    with torch.no_grad():
        correct = (model(x[share]).argmax(dim=1) == y[share]).sum().double()
    dist.all_reduce(correct)
    return correct.item() / len(x)
'''
WRONG["distributed_accuracy"] = [
    ("the stub", "def distributed_accuracy(model, x, y):\n    return 0.0", "expected"),
    ("mean of the ranks' accuracies", '''
def distributed_accuracy(model, x, y):
    share = slice(rank, len(x), world_size)
    with torch.no_grad():
        acc = (model(x[share]).argmax(dim=1) == y[share]).double().mean()
    dist.all_reduce(acc)
    return acc.item() / world_size''', "expected"),
    ("every rank evaluates everything", '''
def distributed_accuracy(model, x, y):
    with torch.no_grad():
        acc = (model(x).argmax(dim=1) == y).double().mean()
    dist.all_reduce(acc)
    return acc.item() / world_size''', "each rank evaluates only its share"),
    ("a tensor", RIGHT["distributed_accuracy"].replace("correct.item() / len(x)",
                                                      "correct / len(x)"), "tensor"),
]

RIGHT["accumulate"] = '''
import torch.nn.functional as F

def accumulate(model, opt, micro_batches):
    opt.zero_grad()
    k = len(micro_batches)
    with model.no_sync():
        for xb, yb in micro_batches[:-1]:
            (F.cross_entropy(model(xb), yb) / k).backward()
    xb, yb = micro_batches[-1]
    (F.cross_entropy(model(xb), yb) / k).backward()
    opt.step()
'''
WRONG["accumulate"] = [
    ("no no_sync", '''
def accumulate(model, opt, micro_batches):
    opt.zero_grad()
    for xb, yb in micro_batches:
        (F.cross_entropy(model(xb), yb) / len(micro_batches)).backward()
    opt.step()''', "averaged the gradients"),
    ("no division", RIGHT["accumulate"].replace(" / k", ""), "off by up to"),
    ("a step per micro-batch", '''
def accumulate(model, opt, micro_batches):
    for xb, yb in micro_batches:
        opt.zero_grad()
        F.cross_entropy(model(xb), yb).backward()
        opt.step()''', "off by up to"),
]
WRONG["accumulate"] += [(what, source, piece, size) for size in (3, 4) for what, source, piece in [
    ("no zero_grad: an earlier step's gradients added in",
     RIGHT["accumulate"].replace("    opt.zero_grad()\n", ""), "off by up to"),
    ("all micro-batches in one forward pass", '''
def accumulate(model, opt, micro_batches):
    opt.zero_grad()
    xs = torch.cat([xb for xb, _ in micro_batches])
    ys = torch.cat([yb for _, yb in micro_batches])
    F.cross_entropy(model(xs), ys).backward()
    opt.step()''', "one micro-batch"),
    ("every forward first, the summed losses in one backward", '''
def accumulate(model, opt, micro_batches):
    opt.zero_grad()
    k = len(micro_batches)
    loss = sum(F.cross_entropy(model(xb), yb) for xb, yb in micro_batches) / k
    loss.backward()
    opt.step()''', "one micro-batch at a time"),
]]

RIGHT["my_shard"] = '''
import math

def my_shard(n_samples, epoch):
    order = torch.randperm(n_samples, generator=torch.Generator().manual_seed(epoch)).tolist()
    total = math.ceil(n_samples / world_size) * world_size
    order = (order * math.ceil(total / n_samples))[:total]  # pad: repeat, as often as needed
    return order[rank:total:world_size]
'''
WRONG["my_shard"] = [
    ("the stub", "def my_shard(n_samples, epoch):\n    return []", "expected"),
    ("no padding", RIGHT["my_shard"].replace(
        "    order = (order * math.ceil(total / n_samples))[:total]  # pad: repeat, as often as "
        "needed\n", ""), "expected"),
    ("no epoch", RIGHT["my_shard"].replace("manual_seed(epoch)", "manual_seed(0)"), "expected"),
    ("padded with the first index repeated, not the indices from the first", RIGHT["my_shard"]
     .replace("    order = (order * math.ceil(total / n_samples))[:total]  # pad: repeat, as often "
              "as needed\n", "    order = order + order[:1] * (total - n_samples)\n"),
     "expected"),
    ("blocks instead of a stride", RIGHT["my_shard"].replace(
        "order[rank:total:world_size]",
        "order[rank * total // world_size:(rank + 1) * total // world_size]"), "expected"),
    ("a tensor", RIGHT["my_shard"].replace("return order[rank:total:world_size]",
                                           "return torch.tensor(order[rank:total:world_size])"),
     "tensor"),
]
_PAD_ONCE = RIGHT["my_shard"].replace(  # right unless the data set has fewer samples than ranks
    "order = (order * math.ceil(total / n_samples))[:total]  # pad: repeat, as often as needed",
    "order += order[: total - n_samples]  # pad by repeating the first indices, once")
_WITH_SAMPLER = '''
from torch.utils.data import DistributedSampler

def my_shard(n_samples, epoch):
    sampler = DistributedSampler(range(n_samples), num_replicas=world_size, rank=rank,
                                 shuffle=True, seed=0)
    sampler.set_epoch(epoch)
    return list(sampler)'''
WRONG["my_shard"] += [(what, source, piece, size) for size in (3, 4) for what, source, piece in [
    ("padding repeats the indices once only", _PAD_ONCE, "expected"),
    ("DistributedSampler itself", _WITH_SAMPLER, "DistributedSampler: by hand"),
]]

# ---- notebook 05 ---------------------------------------------------------------------------
RIGHT["load_wrong_way"] = '''
from helpers.data import mlp

def load_wrong_way(path):
    state = torch.load(path, map_location=device, weights_only=True)
    with torch.random.fork_rng(devices=[]):  # mlp() draws its first weights from the generator
        model = mlp().to(device)
    model.load_state_dict({key.removeprefix("module."): value for key, value in state.items()})
    return model
'''
WRONG["load_wrong_way"] = [
    ("the stub", "def load_wrong_way(path):\n    return None", "gave None"),
    ("strict=False", RIGHT["load_wrong_way"].replace(
        '{key.removeprefix("module."): value for key, value in state.items()}',
        "state, strict=False"), "values off by up to"),
    ("the state dict itself", '''
def load_wrong_way(path):
    return torch.load(path, weights_only=True)''', "gave a dict, not a model"),
]
WRONG["load_wrong_way"] += [
    (what, source, piece, size) for size in (3, 4) for what, source, piece in [
        ("the stripped state dict, not a model", '''
def load_wrong_way(path):
    state = torch.load(path, map_location=device, weights_only=True)
    return {key.removeprefix("module."): value for key, value in state.items()}''',
         "gave a dict, not a model"),
        ("weights_only=False", RIGHT["load_wrong_way"].replace(
            "weights_only=True", "weights_only=False"), "loaded the file with weights_only=False"),
        ("builds the model from the global generator", RIGHT["load_wrong_way"].replace(
            "    with torch.random.fork_rng(devices=[]):", "    if True:"),
         "changed torch's random generator"),
    ]]

RIGHT["newest_loadable"] = '''
from pathlib import Path
from helpers.checkpoint import CheckpointError, checkpoint_step, load_checkpoint

def newest_loadable(directory):
    found = [p for p in Path(directory).glob("step-*.pt") if checkpoint_step(p) is not None]
    for path in sorted(found, key=checkpoint_step, reverse=True):
        try:
            load_checkpoint(path)
        except CheckpointError:
            continue
        return str(path)
    return None
'''
WRONG["newest_loadable"] = [
    ("the newest name", '''
from helpers.checkpoint import latest_checkpoint

def newest_loadable(directory):
    return str(latest_checkpoint(directory))''', "expected"),
    ("plain torch.load", RIGHT["newest_loadable"].replace(
        "load_checkpoint(path)", "torch.load(path, weights_only=True)").replace(
        "except CheckpointError:", "except Exception:"), "expected"),
]
WRONG["newest_loadable"] += [(what, source, piece, 4) for what, source, piece
                              in WRONG["newest_loadable"]]  # wrong in every case, at 4 ranks too
WRONG["newest_loadable"] += [
    (what, source, piece, size) for size in (3, 4) for what, source, piece in [
        ("a Path, not a str", RIGHT["newest_loadable"].replace("return str(path)", "return path"),
         "(a pathlib.PosixPath)"),
        ("no good file: an error instead of None", '''
from pathlib import Path
from helpers.checkpoint import CheckpointError, checkpoint_step, load_checkpoint

def newest_loadable(directory):
    def loads(path):
        try:
            load_checkpoint(path)
            return True
        except CheckpointError:
            return False
    found = [p for p in Path(directory).glob("step-*.pt") if checkpoint_step(p) is not None]
    return str(max((p for p in found if loads(p)), key=checkpoint_step))''', "raised ValueError"),
        ("deletes the bad files", RIGHT["newest_loadable"].replace(
            "        except CheckpointError:\n", "        except CheckpointError:\n"
            "            path.unlink()\n"), "changed the directory"),
    ]]

RIGHT["load_and_share"] = '''
def load_and_share(path, model):
    box = [torch.load(path, map_location="cpu", weights_only=True) if rank == 0 else None]
    dist.broadcast_object_list(box, src=0)
    model.load_state_dict(box[0])
'''
WRONG["load_and_share"] = [
    ("every rank reads the file", '''
def load_and_share(path, model):
    model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))''',
     "opened the file itself"),
    ("rank 0 alone", '''
def load_and_share(path, model):
    if rank == 0:
        model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))''',
     "at world size 3, rank 1"),
]
WRONG["load_and_share"] += [
    (what, source, piece, size) for size in (3, 4) for what, source, piece in [
        ("point-to-point sends, then a barrier", '''
def load_and_share(path, model):
    if rank == 0:
        model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
    for tensor in model.state_dict().values():
        if rank == 0:
            for other in range(1, world_size):
                dist.send(tensor, dst=other)
        else:
            dist.recv(tensor, src=0)
    dist.barrier()''', "collectives only"),
        ("weights_only=False on rank 0", RIGHT["load_and_share"].replace(
            "weights_only=True", "weights_only=False"), "loaded the file with weights_only=False"),
    ]]

# ---- notebook 06 ---------------------------------------------------------------------------
RIGHT["ring_exchange"] = '''
def ring_exchange(token):
    right, left = (rank + 1) % world_size, (rank - 1) % world_size
    mine, got = torch.tensor([token], device="cpu"), torch.zeros(1, device="cpu")
    if rank % 2 == 0:
        dist.send(mine, dst=right)
        dist.recv(got, src=left)
    else:
        dist.recv(got, src=left)
        dist.send(mine, dst=right)
    return got.item()
'''
WRONG["ring_exchange"] = [
    ("the stub", "def ring_exchange(token):\n    return None", "gave None"),
    ("batch_isend_irecv", '''
def ring_exchange(token):
    got = torch.zeros(1)
    ops = [dist.P2POp(dist.isend, torch.tensor([token]), (rank + 1) % world_size),
           dist.P2POp(dist.irecv, got, (rank - 1) % world_size)]
    for req in dist.batch_isend_irecv(ops):
        req.wait()
    return got.item()''', "blocking dist.send and dist.recv only"),
    ("everyone receives first", RIGHT["ring_exchange"].replace("rank % 2 == 0", "False"),
     "a deadlock at world size 3: rank 0 waits in recv from rank 2"),
    ("an int", RIGHT["ring_exchange"].replace("return got.item()", "return int(got.item())"),
     "(an int)"),
    ("its own token, no message", "def ring_exchange(token):\n    return token",
     "ring_exchange gave"),
]
# the token comes from the left neighbour, through a recv that names it (both world sizes)
_NOT_FROM_THE_LEFT = [
    ("the wrong way round the ring", RIGHT["ring_exchange"].replace(
        "dst=right", "dst=LEFT").replace("src=left", "src=right").replace("dst=LEFT", "dst=left"),
     "ring_exchange gave"),
    ("the left neighbour's rank, not its token", RIGHT["ring_exchange"].replace(
        "return got.item()", "return float(left)"), "ring_exchange gave"),
    ("recv from any source", RIGHT["ring_exchange"].replace("dist.recv(got, src=left)",
                                                            "dist.recv(got)"),
     "dist.recv with src= the left neighbour"),
]
WRONG["ring_exchange"] += [(*planted, size) for planted in _NOT_FROM_THE_LEFT for size in (3, 4)]

RIGHT["skip_together"] = '''
def skip_together(batch_ok):
    ok = torch.tensor([1.0 if batch_ok else 0.0], device=device)
    dist.all_reduce(ok, op=dist.ReduceOp.MIN)
    if ok.item() == 0.0:
        return None
    t = torch.ones(1, device=device)
    dist.all_reduce(t)
    return t.item()
'''
WRONG["skip_together"] = [
    ("each rank decides alone", '''
def skip_together(batch_ok):
    if not batch_ok:
        return None
    t = torch.ones(1, device=device)
    dist.all_reduce(t)
    return t.item()''', "one to agree"),
    ("0.0 instead of None", RIGHT["skip_together"].replace("        return None",
                                                          "        return 0.0"),
     "expected None"),
]
# agree first, then skip the all-reduce on every rank; any number of bad batches (both sizes)
_NOT_TOGETHER = [
    ("the step's all-reduce first, then agree", '''
def skip_together(batch_ok):
    t = torch.ones(1, device=device)
    dist.all_reduce(t)
    ok = torch.tensor([1.0 if batch_ok else 0.0], device=device)
    dist.all_reduce(ok, op=dist.ReduceOp.MIN)
    return t.item() if ok.item() == 1.0 else None''', "although a rank's batch was bad"),
    ("one bad batch at most", '''
def skip_together(batch_ok):
    bad = torch.tensor([0.0 if batch_ok else 1.0], device=device)
    dist.all_reduce(bad)
    if bad.item() == 1.0:
        return None
    t = torch.ones(1, device=device)
    dist.all_reduce(t)
    return t.item()''', "expected None"),
]
WRONG["skip_together"] += [(*planted, size) for planted in _NOT_TOGETHER for size in (3, 4)]

FIRST_MISMATCH_RIGHT = '''
from collections import Counter

def first_mismatch(traces):
    numbers = sorted({e["seq"] for t in traces.values() for e in t})
    for seq in numbers:
        calls = {r: next((e for e in t if e["seq"] == seq), None) for r, t in traces.items()}
        missing = sorted(r for r, e in calls.items() if e is None)
        if missing:  # a rank that never made the call is the one to blame
            return seq, missing
        keys = {r: (e["op"], e["shapes"]) for r, e in calls.items()}
        counts = Counter(keys.values())
        if len(counts) > 1:
            usual = counts.most_common(1)[0][0]
            return seq, sorted(r for r, k in keys.items() if k != usual)
    return None
'''
FIRST_MISMATCH_WRONG = [
    ("ops only", FIRST_MISMATCH_RIGHT.replace('(e["op"], e["shapes"])', 'e["op"]'),
     "expected"),
    ("the sequence number only", FIRST_MISMATCH_RIGHT.replace(
        "return seq, sorted(r for r, k in keys.items() if k != usual)", "return seq"),
     "expected"),
    ("never a match", "def first_mismatch(traces):\n    return None", "expected"),
    # records as they really come: numbered from anywhere, two culprits, any rank the odd one
    ("numbered from 0", FIRST_MISMATCH_RIGHT.replace(
        'sorted({e["seq"] for t in traces.values() for e in t})',
        'range(max(len(t) for t in traces.values()))'), "expected"),
    ("one culprit only", FIRST_MISMATCH_RIGHT.replace("return seq, missing",
                                                      "return seq, missing[:1]"), "expected"),
    ("the lowest rank's record as the reference", '''
def first_mismatch(traces):
    reference = traces[min(traces)]
    for i, e in enumerate(reference):
        odd = sorted(r for r, t in traces.items()
                     if i >= len(t) or (t[i]["op"], t[i]["shapes"]) != (e["op"], e["shapes"]))
        if odd:
            return e["seq"], odd
    return None''', "expected"),
]

# ---- exercises that run in the notebook itself: name -> (right answer, wrong ones) ----------
IN_NOTEBOOK: dict[str, tuple[str, list[tuple[str, str, str]]]] = {
    "first_mismatch": (FIRST_MISMATCH_RIGHT, FIRST_MISMATCH_WRONG)}

# ---- notebook 07 ---------------------------------------------------------------------------
ENV_FOR_RIGHT = '''
def env_for(hosts, per_host, host, local_rank, port):
    return {"MASTER_ADDR": hosts[0], "MASTER_PORT": str(port),
            "WORLD_SIZE": str(len(hosts) * per_host), "RANK": str(host * per_host + local_rank),
            "LOCAL_RANK": str(local_rank), "LOCAL_WORLD_SIZE": str(per_host),
            "GROUP_RANK": str(host)}
'''
IN_NOTEBOOK["env_for"] = (ENV_FOR_RIGHT, [
    ("the stub", "def env_for(hosts, per_host, host, local_rank, port):\n    return {}",
     "a dict without ['MASTER_ADDR'"),
    ("ints, not strings", ENV_FOR_RIGHT.replace('str(host * per_host + local_rank)',
                                                'host * per_host + local_rank'),
     "RANK: 0 (an int), expected '0' (a str)"),
    ("RANK = LOCAL_RANK", ENV_FOR_RIGHT.replace('str(host * per_host + local_rank)',
                                                'str(local_rank)'), "RANK: '0'"),
    ("ranks dealt round the hosts", ENV_FOR_RIGHT.replace(
        'str(host * per_host + local_rank)', 'str(local_rank * len(hosts) + host)'), "RANK:"),
    ("MASTER_ADDR is its own host", ENV_FOR_RIGHT.replace('hosts[0]', 'hosts[host]'),
     "MASTER_ADDR:"),
    ("WORLD_SIZE is the host's", ENV_FOR_RIGHT.replace('str(len(hosts) * per_host)',
                                                       'str(per_host)'), "WORLD_SIZE:"),
    ("hard-coded 2 hosts of 4", ENV_FOR_RIGHT.replace('str(len(hosts) * per_host)', '"8"')
     .replace('str(host * per_host + local_rank)', 'str(4 * host + local_rank)'),
     "RANK:"),
    ("ROLE_RANK added, as LOCAL_RANK", '''
def env_for(hosts, per_host, host, local_rank, port):
    return {"MASTER_ADDR": hosts[0], "MASTER_PORT": str(port),
            "WORLD_SIZE": str(len(hosts) * per_host), "RANK": str(host * per_host + local_rank),
            "LOCAL_RANK": str(local_rank), "LOCAL_WORLD_SIZE": str(per_host),
            "GROUP_RANK": str(host), "ROLE_RANK": str(local_rank)}''', "ROLE_RANK:"),
    ("GROUP_WORLD_SIZE added, as WORLD_SIZE", '''
def env_for(hosts, per_host, host, local_rank, port):
    return {"MASTER_ADDR": hosts[0], "MASTER_PORT": str(port),
            "WORLD_SIZE": str(len(hosts) * per_host), "RANK": str(host * per_host + local_rank),
            "LOCAL_RANK": str(local_rank), "LOCAL_WORLD_SIZE": str(per_host),
            "GROUP_RANK": str(host), "GROUP_WORLD_SIZE": str(len(hosts) * per_host)}''',
     "GROUP_WORLD_SIZE:"),
    ("a variable torchrun does not set", '''
def env_for(hosts, per_host, host, local_rank, port):
    return {"MASTER_ADDR": hosts[0], "MASTER_PORT": str(port),
            "WORLD_SIZE": str(len(hosts) * per_host), "RANK": str(host * per_host + local_rank),
            "LOCAL_RANK": str(local_rank), "LOCAL_WORLD_SIZE": str(per_host),
            "GROUP_RANK": str(host), "NODE_RANK": str(host)}''', "['NODE_RANK']"),
    ("sets them in os.environ too", '''
import os


def env_for(hosts, per_host, host, local_rank, port):
    env = {"MASTER_ADDR": hosts[0], "MASTER_PORT": str(port),
           "WORLD_SIZE": str(len(hosts) * per_host), "RANK": str(host * per_host + local_rank),
           "LOCAL_RANK": str(local_rank), "LOCAL_WORLD_SIZE": str(per_host),
           "GROUP_RANK": str(host)}
    os.environ.update(env)
    return env''', "changed os.environ"),
    ("MASTER_ADDR from the first job's pattern", '''
def env_for(hosts, per_host, host, local_rank, port):
    return {"MASTER_ADDR": hosts[0].rsplit(".", 1)[0] + ".10", "MASTER_PORT": str(port),
            "WORLD_SIZE": str(len(hosts) * per_host), "RANK": str(host * per_host + local_rank),
            "LOCAL_RANK": str(local_rank), "LOCAL_WORLD_SIZE": str(per_host),
            "GROUP_RANK": str(host)}''', "MASTER_ADDR:"),
])

NODE_RANKS_RIGHT = '''
def node_ranks(tasks_per_node, node):
    counts = []
    for part in tasks_per_node.split(","):
        count, _, times = part.partition("(x")
        counts += [int(count)] * (int(times.rstrip(")")) if times else 1)
    first = sum(counts[:node])
    return list(range(first, first + counts[node]))
'''
IN_NOTEBOOK["node_ranks"] = (NODE_RANKS_RIGHT, [
    ("the stub", "def node_ranks(tasks_per_node, node):\n    return None",
     "None (a NoneType)"),
    ("(xN) ignored", NODE_RANKS_RIGHT.replace(
        '[int(count)] * (int(times.rstrip(")")) if times else 1)', '[int(count)]'), "expected"),
    ("every node like the first", '''
def node_ranks(tasks_per_node, node):
    per_node = int(tasks_per_node.split("(")[0].split(",")[0])
    return list(range(node * per_node, (node + 1) * per_node))''', "expected"),
    ("a range, not a list", NODE_RANKS_RIGHT.replace(
        "return list(range(first, first + counts[node]))",
        "return range(first, first + counts[node])"), "(a range)"),
    ("off by one", NODE_RANKS_RIGHT.replace("sum(counts[:node])", "sum(counts[:node + 1])"),
     "expected"),
    ("one character per field", '''
def node_ranks(tasks_per_node, node):
    counts = []
    for p in tasks_per_node.split(","):
        c = int(p[0])
        k = int(p[3]) if "(x" in p else 1
        counts += [c] * k
    first = sum(counts[:node])
    return list(range(first, first + counts[node]))''', "expected"),
    ("a one-digit repeat", '''
def node_ranks(tasks_per_node, node):
    counts = []
    for part in tasks_per_node.split(","):
        count, _, times = part.partition("(x")
        counts += [int(count)] * (int(times[0]) if times else 1)
    first = sum(counts[:node])
    return list(range(first, first + counts[node]))''', "expected"),
])

RENDEZVOUS_PROBLEMS_RIGHT = '''
from collections import Counter


def number(text):
    "What int() reads in text, as env:// reads it; None if it reads no number."
    try:
        return int(text)
    except ValueError:
        return None


def rendezvous_problems(envs):
    settings = [(e["MASTER_ADDR"], number(e["MASTER_PORT"]), number(e["WORLD_SIZE"]))
                for e in envs]
    usual = tuple(Counter(s[i] for s in settings).most_common(1)[0][0] for i in range(3))
    size = usual[2]
    ranks = [number(e["RANK"]) for e in envs]
    taken = Counter(ranks)
    blame = []
    for i, (mine, rank) in enumerate(zip(settings, ranks)):
        if mine != usual or rank is None or not 0 <= rank < size or taken[rank] > 1:
            blame.append(i)
    return blame
'''
IN_NOTEBOOK["rendezvous_problems"] = (RENDEZVOUS_PROBLEMS_RIGHT, [
    ("the stub", "def rendezvous_problems(envs):\n    return []", "expected"),
    ("judged against the first process", RENDEZVOUS_PROBLEMS_RIGHT.replace(
        "Counter(s[i] for s in settings).most_common(1)[0][0]", "settings[0][i]"), "expected"),
    ("only the second of two equal ranks", RENDEZVOUS_PROBLEMS_RIGHT.replace(
        "taken[rank] > 1", "rank in ranks[:i]"), "expected"),
    ("ranks out of range let through", RENDEZVOUS_PROBLEMS_RIGHT.replace(
        "not 0 <= rank < size", "rank < 0"), "expected"),
    ("int() on every rank, unguarded", RENDEZVOUS_PROBLEMS_RIGHT.replace(
        "        return int(text)\n    except ValueError:\n        return None",
        "        return int(text)\n    finally:\n        pass"), "raised"),
    ("a set, not a sorted list", RENDEZVOUS_PROBLEMS_RIGHT.replace("return blame",
                                                                    "return set(blame)"),
     "(a set)"),
    ("the world size taken as len(envs)", RENDEZVOUS_PROBLEMS_RIGHT.replace(
        "size = usual[2]", "size = len(envs)"), "one missing"),
    ("digits only, compared as text", '''
from collections import Counter


def rendezvous_problems(envs):
    usual = {key: Counter(e[key] for e in envs).most_common(1)[0][0]
             for key in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE")}
    size = int(usual["WORLD_SIZE"])
    taken = Counter(e["RANK"] for e in envs)
    return [i for i, e in enumerate(envs)
            if any(e[key] != value for key, value in usual.items())
            or not (e["RANK"].isdigit() and int(e["RANK"]) < size) or taken[e["RANK"]] > 1]''',
     "expected"),
    ("equal ranks compared as text", RENDEZVOUS_PROBLEMS_RIGHT.replace(
        "taken = Counter(ranks)", "taken = Counter(e['RANK'] for e in envs)").replace(
        "taken[rank] > 1", "taken[envs[i]['RANK']] > 1"), "expected"),
    ("settings compared as text", RENDEZVOUS_PROBLEMS_RIGHT.replace(
        'settings = [(e["MASTER_ADDR"], number(e["MASTER_PORT"]), number(e["WORLD_SIZE"]))',
        'settings = [(e["MASTER_ADDR"], e["MASTER_PORT"], e["WORLD_SIZE"])').replace(
        "size = usual[2]", "size = int(usual[2])"), "expected"),
])

# ---- notebook 08 ---------------------------------------------------------------------------
RIGHT["my_piece"] = '''
import math

def my_piece(flat):
    size = math.ceil(flat.numel() / world_size)
    padded = torch.zeros(size * world_size, dtype=flat.dtype, device=flat.device)
    padded[:flat.numel()] = flat
    return padded[rank * size:(rank + 1) * size].clone()
'''
WRONG["my_piece"] = [
    ("the stub", "def my_piece(flat):\n    return None", "gave"),
    ("torch.chunk: no padding, pieces of unequal length",
     "def my_piece(flat):\n    return torch.chunk(flat, world_size)[rank]", "gave"),
    ("wrong padding: n // world_size + 1 per rank", RIGHT["my_piece"].replace(
        "math.ceil(flat.numel() / world_size)", "flat.numel() // world_size + 1"), "gave"),
]

RIGHT["global_norm"] = '''
def global_norm(shard):
    squares = shard.double().pow(2).sum().reshape(1)
    dist.all_reduce(squares)
    return squares.sqrt().item()
'''
WRONG["global_norm"] = [
    ("the stub", "def global_norm(shard):\n    return 0.0", "expected"),
    ("the norm of the local shard only",
     "def global_norm(shard):\n    return shard.norm().item()", "this rank's shard's norm only"),
    ("the sum of the shards' norms", '''
def global_norm(shard):
    norm = shard.norm().reshape(1)
    dist.all_reduce(norm)
    return norm.item()''', "norms do not add"),
]

RIGHT["zero_sgd_step"] = '''
import math

def zero_sgd_step(params, grad, lr):
    size = math.ceil(params.numel() / world_size)
    padded = torch.zeros(size * world_size, dtype=grad.dtype, device=grad.device)
    padded[:grad.numel()] = grad
    mine = torch.empty(size, dtype=grad.dtype, device=grad.device)
    dist.reduce_scatter_single(mine, padded)
    mine /= world_size
    full = torch.zeros(size * world_size, dtype=params.dtype, device=params.device)
    full[:params.numel()] = params
    shard = full[rank * size:(rank + 1) * size] - lr * mine
    dist.all_gather_single(full, shard)
    params.copy_(full[:params.numel()])
'''
WRONG["zero_sgd_step"] = [
    ("the stub", "def zero_sgd_step(params, grad, lr):\n    pass", "gave"),
    ("an all-reduce of the whole gradient", '''
def zero_sgd_step(params, grad, lr):
    g = grad.clone()
    dist.all_reduce(g)
    params -= lr * g / world_size''', "reduce-scatter the gradient instead"),
    ("summed, not averaged", RIGHT["zero_sgd_step"].replace("    mine /= world_size\n", ""),
     "average them"),
]

# ---- notebook 09 ---------------------------------------------------------------------------
RIGHT["row_parallel_forward"] = '''
def row_parallel_forward(h_part, w_part, bias):
    partial = h_part @ w_part.T
    dist.all_reduce(partial)
    return partial + bias
'''
_ROW = RIGHT["row_parallel_forward"]
WRONG["row_parallel_forward"] = [
    ("the stub: this rank's partial output", '''
def row_parallel_forward(h_part, w_part, bias):
    return h_part @ w_part.T + bias''', "row_parallel_forward gave"),
    ("the bias added on every rank before the sum", '''
def row_parallel_forward(h_part, w_part, bias):
    out = h_part @ w_part.T + bias
    dist.all_reduce(out)
    return out''', "row_parallel_forward gave"),
    ("the bias divided by a hard-coded 4 before the sum: right at 4 ranks only", '''
def row_parallel_forward(h_part, w_part, bias):
    out = h_part @ w_part.T + bias / 4
    dist.all_reduce(out)
    return out''', "at world size 3", 4),
    ("all_gather of the slices, then the whole product", '''
def row_parallel_forward(h_part, w_part, bias):
    hs = [torch.empty_like(h_part) for _ in range(world_size)]
    ws = [torch.empty_like(w_part) for _ in range(world_size)]
    dist.all_gather(hs, h_part)
    dist.all_gather(ws, w_part)
    return torch.cat(hs, dim=1) @ torch.cat(ws, dim=1).T + bias''', "exactly one, please"),
    ("ReduceOp.AVG: the mean of the partial outputs", _ROW.replace(
        "dist.all_reduce(partial)", "dist.all_reduce(partial, op=dist.ReduceOp.AVG)"),
     "row_parallel_forward gave"),
]

RIGHT["column_parallel_backward"] = '''
def column_parallel_backward(x, w_part, grad_out_part):
    grad_x = grad_out_part @ w_part
    dist.all_reduce(grad_x)
    return [grad_x, grad_out_part.T @ x]
'''
_COL = RIGHT["column_parallel_backward"]
WRONG["column_parallel_backward"] = [
    ("no all-reduce in backward: this rank's part of the input's gradient", '''
def column_parallel_backward(x, w_part, grad_out_part):
    return [grad_out_part @ w_part, grad_out_part.T @ x]''', "column_parallel_backward gave"),
    ("the weight's gradient summed over the ranks too", '''
def column_parallel_backward(x, w_part, grad_out_part):
    grad_x, grad_w = grad_out_part @ w_part, grad_out_part.T @ x
    dist.all_reduce(grad_x)
    dist.all_reduce(grad_w)
    return [grad_x, grad_w]''', "column_parallel_backward gave"),
    ("ReduceOp.AVG: the mean, not the sum", _COL.replace(
        "dist.all_reduce(grad_x)", "dist.all_reduce(grad_x, op=dist.ReduceOp.AVG)"),
     "column_parallel_backward gave"),
    ("AVG times a hard-coded 4: right at 4 ranks only", _COL.replace(
        "dist.all_reduce(grad_x)",
        "dist.all_reduce(grad_x, op=dist.ReduceOp.AVG)\n    grad_x *= 4"),
     "at world size 3", 4),
]

RIGHT["pipeline_forward"] = '''
def pipeline_forward(stage, micro_batches):
    outputs = []
    with torch.no_grad():
        for mb in micro_batches:
            a = torch.empty_like(mb)
            if rank == 0:
                a = mb
            else:
                dist.recv(a, src=rank - 1)
            out = stage(a)
            if rank < world_size - 1:
                dist.send(out, dst=rank + 1)
            else:
                outputs.append(out)
    return outputs
'''
_PIPE = RIGHT["pipeline_forward"]
WRONG["pipeline_forward"] = [
    ("the stub: the last stage alone", '''
def pipeline_forward(stage, micro_batches):
    return [stage(mb) for mb in micro_batches] if rank == world_size - 1 else []''',
     "pipeline_forward gave"),
    ("every stage receives first, rank 0 from the last: a deadlock", '''
def pipeline_forward(stage, micro_batches):
    outputs = []
    with torch.no_grad():
        for mb in micro_batches:
            a = torch.empty_like(mb)
            dist.recv(a, src=(rank - 1) % world_size)
            out = stage(mb if rank == 0 else a)
            if rank < world_size - 1:
                dist.send(out, dst=rank + 1)
            else:
                outputs.append(out)
    return outputs''', "a deadlock"),
    ("the last stage hard-coded as rank 3: right at 4 ranks only",
     _PIPE.replace("if rank < world_size - 1:", "if rank < 3:"), "at world size 3", 4),
    ("broadcasts from each stage in turn", '''
def pipeline_forward(stage, micro_batches):
    outputs = []
    with torch.no_grad():
        for mb in micro_batches:
            a = mb.clone()
            for r in range(world_size):
                if rank == r:
                    a = stage(a)
                dist.broadcast(a, src=r)
            if rank == world_size - 1:
                outputs.append(a)
    return outputs''', "point-to-point calls only"),
]

# ---- notebook 10 ---------------------------------------------------------------------------
RIGHT["combine_partials"] = '''
def combine_partials(out, lse):
    top = lse.clone()
    dist.all_reduce(top, op=dist.ReduceOp.MAX)
    weight = torch.exp(lse - top).unsqueeze(-1)
    both = torch.cat([out * weight, weight], dim=-1)
    dist.all_reduce(both)
    return both[..., :-1] / both[..., -1:]
'''
_COMBINE = RIGHT["combine_partials"]
WRONG["combine_partials"] = [
    ("the stub: this rank's own result", '''
def combine_partials(out, lse):
    return out''', "combine_partials gave"),
    ("the mean of the outputs, unweighted", '''
def combine_partials(out, lse):
    total = out.clone()
    dist.all_reduce(total, op=dist.ReduceOp.AVG)
    return total''', "combine_partials gave"),
    ("exp taken directly: overflows above 88", '''
def combine_partials(out, lse):
    weight = torch.exp(lse).unsqueeze(-1)
    both = torch.cat([out * weight, weight], dim=-1)
    dist.all_reduce(both)
    return both[..., :-1] / both[..., -1:]''', "combine_partials gave"),
]

RIGHT["ring_attention"] = '''
def ring_attention(q, k, v):
    right, left = (rank + 1) % world_size, (rank - 1) % world_size
    held, out, lse = torch.stack([k, v]), None, None
    for step in range(world_size):
        if step < world_size - 1:
            incoming = torch.empty_like(held)
            works = dist.batch_isend_irecv([dist.P2POp(dist.isend, held, right),
                                            dist.P2POp(dist.irecv, incoming, left)])
        scores = q @ held[0].transpose(-2, -1) * q.shape[-1] ** -0.5
        block_lse = scores.logsumexp(-1)
        block_out = torch.exp(scores - block_lse.unsqueeze(-1)) @ held[1]
        if out is None:
            out, lse = block_out, block_lse
        else:
            merged = torch.logaddexp(lse, block_lse)
            out = (out * torch.exp(lse - merged).unsqueeze(-1)
                   + block_out * torch.exp(block_lse - merged).unsqueeze(-1))
            lse = merged
        if step < world_size - 1:
            for work in works:
                work.wait()
            held = incoming
    return out
'''
_RING_ATT = RIGHT["ring_attention"]
WRONG["ring_attention"] = [
    ("the stub: this rank's keys only", '''
def ring_attention(q, k, v):
    import torch.nn.functional as F

    return F.scaled_dot_product_attention(q, k, v)''', "ring_attention gave"),
    ("every rank's keys gathered with all_gather", '''
def ring_attention(q, k, v):
    import torch.nn.functional as F

    ks = [torch.empty_like(k) for _ in range(world_size)]
    vs = [torch.empty_like(v) for _ in range(world_size)]
    dist.all_gather(ks, k)
    dist.all_gather(vs, v)
    return F.scaled_dot_product_attention(q, torch.cat(ks, dim=2), torch.cat(vs, dim=2))''',
     "point-to-point calls only"),
    ("the ring turned the other way: to the left, from the right", _RING_ATT.replace(
        "right, left = (rank + 1) % world_size, (rank - 1) % world_size",
        "right, left = (rank - 1) % world_size, (rank + 1) % world_size"), "sent to rank(s)"),
]

RIGHT["dispatch"] = '''
def dispatch(tokens, expert, experts_per_rank):
    experts = experts_per_rank * world_size
    order = torch.argsort(expert, stable=True)
    counts = torch.bincount(expert, minlength=experts)
    received = torch.empty_like(counts)
    dist.all_to_all_single(received, counts)
    send_splits = counts.view(world_size, experts_per_rank).sum(1).tolist()
    receive_splits = received.view(world_size, experts_per_rank).sum(1).tolist()
    rows = tokens.new_empty((sum(receive_splits), tokens.shape[1]))
    dist.all_to_all_single(rows, tokens[order], receive_splits, send_splits)
    local = torch.arange(experts_per_rank, device=tokens.device).repeat(world_size)
    return rows[torch.argsort(local.repeat_interleave(received), stable=True)]
'''
_DISPATCH = RIGHT["dispatch"]
WRONG["dispatch"] = [
    ("the stub: this rank's own tokens for its experts", '''
def dispatch(tokens, expert, experts_per_rank):
    return tokens[expert // experts_per_rank == rank]''', "dispatch gave"),
    ("the rows as they arrive: by source rank, not by expert", _DISPATCH.replace(
        "    return rows[torch.argsort(local.repeat_interleave(received), stable=True)]",
        "    return rows"), "dispatch gave"),
    ("everything gathered everywhere, then filtered", '''
def dispatch(tokens, expert, experts_per_rank):
    sizes = [torch.zeros(1, dtype=torch.int64, device=device) for _ in range(world_size)]
    dist.all_gather(sizes, torch.tensor([len(tokens)], device=device))
    out = []
    for e in range(rank * experts_per_rank, (rank + 1) * experts_per_rank):
        for s in range(world_size):
            t = tokens.new_empty((int(sizes[s]), tokens.shape[1]))
            x = expert.new_empty(int(sizes[s]))
            if s == rank:
                t.copy_(tokens)
                x.copy_(expert)
            dist.broadcast(t, src=s)
            dist.broadcast(x, src=s)
            out.append(t[x == e])
    return torch.cat(out)''', "two all_to_all_single"),
]


# ---- notebook 11: in tests/answers_composed.py ----------------------------------------------
def _composed() -> None:
    from answers_composed import IN_NOTEBOOK as composed

    IN_NOTEBOOK.update(composed)


_composed()
