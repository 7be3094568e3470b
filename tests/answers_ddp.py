"""More answers to the exercises of notebook 04, for tests/test_exercises.py (gathered by
tests/answers_more.py): other right answers and more wrong ones."""

from __future__ import annotations

from answers import RIGHT

ALSO_RIGHT: dict[str, list[tuple[str, str]]] = {}
MORE_WRONG: dict[str, list[tuple]] = {}
IN_NOTEBOOK_ALSO_RIGHT: dict[str, list[tuple[str, str]]] = {}
IN_NOTEBOOK_MORE_WRONG: dict[str, list[tuple[str, str, str]]] = {}

# ---- exercise 1: my_shard ------------------------------------------------------------------
ALSO_RIGHT["my_shard"] = [
    ("numpy: np.resize pads by repeating, then tolist(); keyword generator", '''
import numpy as np

def my_shard(n_samples, epoch):
    g = torch.Generator()
    g.manual_seed(0 + epoch)
    order = torch.randperm(n_samples, generator=g).numpy()
    total = -(-n_samples // world_size) * world_size
    return np.resize(order, total)[rank::world_size].tolist()
'''),
    ("itertools.cycle, the ranks asked of dist", '''
import itertools

def my_shard(n_samples, epoch):
    me, n = dist.get_rank(), dist.get_world_size()
    order = torch.randperm(n_samples, generator=torch.Generator().manual_seed(epoch)).tolist()
    total = (n_samples + n - 1) // n * n
    padded = list(itertools.islice(itertools.cycle(order), total))
    return [padded[i] for i in range(me, total, n)]
'''),
]
MORE_WRONG["my_shard"] = [
    ("the global generator reseeded with torch.manual_seed(epoch)", RIGHT["my_shard"].replace(
        "torch.randperm(n_samples, generator=torch.Generator().manual_seed(epoch))",
        "(torch.manual_seed(epoch), torch.randperm(n_samples))[1]"),
     "changed torch's random generator"),
    ("rank 0 shuffles and broadcasts the order", '''
import math

def my_shard(n_samples, epoch):
    order = torch.zeros(n_samples, dtype=torch.int64)
    if rank == 0:
        order = torch.randperm(n_samples, generator=torch.Generator().manual_seed(epoch))
    dist.broadcast(order, src=0)
    order = order.tolist()
    total = math.ceil(n_samples / world_size) * world_size
    order = (order * math.ceil(total / n_samples))[:total]
    return order[rank:total:world_size]''', "this needs no communication"),
    ("a list of 0-d tensors: list() of a tensor", RIGHT["my_shard"].replace(
        "manual_seed(epoch)).tolist()", "manual_seed(epoch))\n    order = list(order)"),
     "item 0: an int64 tensor"),
    ("a list of numpy ints", '''
import numpy as np

def my_shard(n_samples, epoch):
    order = torch.randperm(n_samples, generator=torch.Generator().manual_seed(epoch)).numpy()
    total = -(-n_samples // world_size) * world_size
    return list(np.resize(order, total)[rank::world_size])''', "numpy.int64"),
    ("a tuple", RIGHT["my_shard"].replace("return order[rank:total:world_size]",
                                          "return tuple(order[rank:total:world_size])"),
     "my_shard returned a tuple of the right indices: a list, please"),
    ("padded with the first indices 0, 1, ... instead of the shuffled ones",
     RIGHT["my_shard"].replace(
         "order = (order * math.ceil(total / n_samples))[:total]",
         "order = order + [i % n_samples for i in range(total - n_samples)]"),
     "rank 1: my_shard gave item 22: 0 (an int)"),
    ("the remainder dropped (drop_last) instead of padded", RIGHT["my_shard"].replace(
        "total = math.ceil(n_samples / world_size) * world_size",
        "total = max(n_samples // world_size, 1) * world_size"),
     "my_shard gave a list of 22 items, expected a list of 23 items"),
    ("shuffled with numpy's global generator", '''
import math
import numpy as np

def my_shard(n_samples, epoch):
    np.random.seed(epoch)
    order = np.random.permutation(n_samples).tolist()
    total = math.ceil(n_samples / world_size) * world_size
    order = (order * math.ceil(total / n_samples))[:total]
    return order[rank:total:world_size]''', "changed numpy's random generator"),
    ("world size hard-coded 4: right at 4 ranks only", RIGHT["my_shard"].replace(
        "world_size", "4"), "at world size 3, rank 0: my_shard gave", 4),
    ("world size hard-coded 2: right at 2 ranks only", RIGHT["my_shard"].replace(
        "world_size", "2"), "at world size 1, rank 0: my_shard gave", 2),
]

# ---- exercise 2: accumulate ----------------------------------------------------------------
ALSO_RIGHT["accumulate"] = [
    ("summed losses over the rows, nullcontext for the last, gradients set to None", '''
import contextlib

def accumulate(model, opt, micro_batches):
    for p in model.parameters():
        p.grad = None
    rows = sum(len(yb) for _, yb in micro_batches)
    for i, (xb, yb) in enumerate(micro_batches):
        last = i == len(micro_batches) - 1
        with contextlib.nullcontext() if last else model.no_sync():
            loss = F.cross_entropy(input=model(xb), target=yb, reduction="sum") / rows
            loss.backward()
    opt.step()
'''),
    ("DDP's require_backward_grad_sync flag, set before each forward", '''
def accumulate(model, opt, micro_batches):
    opt.zero_grad(set_to_none=False)
    k = len(micro_batches)
    for i, (xb, yb) in enumerate(micro_batches):
        model.require_backward_grad_sync = i == k - 1
        loss = F.cross_entropy(model(xb), yb) / k
        loss.backward()
    model.require_backward_grad_sync = True
    opt.step()
'''),
]
MORE_WRONG["accumulate"] = [
    ("the forward outside no_sync, only the backward inside", '''
def accumulate(model, opt, micro_batches):
    opt.zero_grad()
    k = len(micro_batches)
    for xb, yb in micro_batches[:-1]:
        loss = F.cross_entropy(model(xb), yb) / k
        with model.no_sync():
            loss.backward()
    xb, yb = micro_batches[-1]
    (F.cross_entropy(model(xb), yb) / k).backward()
    opt.step()''', "DDP averaged the gradients 3 times"),
    ("every micro-batch under no_sync, the last one too", '''
def accumulate(model, opt, micro_batches):
    opt.zero_grad()
    with model.no_sync():
        for xb, yb in micro_batches:
            (F.cross_entropy(model(xb), yb) / len(micro_batches)).backward()
    opt.step()''', "accumulate gave values off by up to"),
    ("divided by the world size as well: DDP already averages", RIGHT["accumulate"].replace(
        "k = len(micro_batches)", "k = len(micro_batches) * world_size"),
     "accumulate gave values off by up to", 2),
    ("the number of micro-batches hard-coded 3", RIGHT["accumulate"].replace(
        "k = len(micro_batches)", "k = 3"),
     "at world size 1, rank 0: accumulate gave values off by up to", 2),
    ("no_sync for every micro-batch, the gradients averaged by hand", '''
def accumulate(model, opt, micro_batches):
    opt.zero_grad()
    with model.no_sync():
        for xb, yb in micro_batches:
            (F.cross_entropy(model(xb), yb) / len(micro_batches)).backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= world_size
    opt.step()''', "averaged the gradients yourself (all_reduce), and DDP never did"),
    ("the last micro-batch taken with pop()", '''
def accumulate(model, opt, micro_batches):
    opt.zero_grad()
    k = len(micro_batches)
    xb, yb = micro_batches.pop()
    with model.no_sync():
        for xs, ys in micro_batches:
            (F.cross_entropy(model(xs), ys) / k).backward()
    (F.cross_entropy(model(xb), yb) / k).backward()
    opt.step()''', "changed the caller's list micro_batches (it held 3 items, now 2)"),
    ("the learning rate divided by k, in the caller's optimizer", RIGHT["accumulate"].replace(
        "    opt.zero_grad()\n",
        "    opt.zero_grad()\n    for group in opt.param_groups:\n"
        "        group['lr'] /= len(micro_batches)\n").replace(" / k", ""),
     "changed the optimizer's settings (lr)"),
    ("the loss logged in eval mode after the step, the model left there",
     RIGHT["accumulate"] + '''    model.eval()
    with torch.no_grad():
        losses = [F.cross_entropy(model(xb), yb).item() for xb, yb in micro_batches]
''', "left the model in eval mode (it was in train mode)"),
    ("the step taken on rank 0 only", RIGHT["accumulate"].replace(
        "    opt.step()", "    if rank == 0:\n        opt.step()"),
     "at world size 3, rank 1: accumulate gave values off by up to"),
    ("the loss all-reduced for a log line, on rank 0 only", RIGHT["accumulate"].replace(
        "    opt.step()", '''    opt.step()
    if rank == 0:
        logged = torch.tensor([1.0])
        dist.all_reduce(logged)'''), "rank 0: accumulate raised"),
]

# ---- exercise 3: distributed_accuracy ------------------------------------------------------
ALSO_RIGHT["distributed_accuracy"] = [
    ("contiguous shares by tensor_split, [correct, count] summed, keyword arguments, the "
     "world named as the group, eval mode put back", '''
def distributed_accuracy(model, x, y):
    was_training = model.training
    model.eval()
    xs, ys = torch.tensor_split(x, world_size)[rank], torch.tensor_split(y, world_size)[rank]
    with torch.no_grad():
        right = (model(xs).argmax(dim=1) == ys).sum()
    counts = torch.stack([right, torch.tensor(len(ys), device=right.device)]).to(torch.int64)
    dist.all_reduce(tensor=counts, op=dist.ReduceOp.SUM, group=dist.group.WORLD)
    model.train(was_training)
    return counts[0].item() / counts[1].item()
'''),
    ("each rank's (correct, count) by all_gather_object", '''
def distributed_accuracy(model, x, y):
    mine = range(rank, len(x), world_size)
    with torch.no_grad():
        correct = int((model(x[list(mine)]).argmax(dim=1) == y[list(mine)]).sum())
    everyone = [None] * world_size
    dist.all_gather_object(everyone, (correct, len(mine)))
    return sum(c for c, _ in everyone) / sum(n for _, n in everyone)
'''),
]
_ACCURACY = RIGHT["distributed_accuracy"]
MORE_WRONG["distributed_accuracy"] = [
    ("eval mode for the evaluation, then train mode, whatever the mode was", _ACCURACY.replace(
        "    with torch.no_grad():", "    model.eval()\n    with torch.no_grad():").replace(
        "    dist.all_reduce(correct)", "    model.train()\n    dist.all_reduce(correct)"),
     "it was in eval mode"),
    ("padded shares as DistributedSampler makes them, divided by the padded total", '''
from torch.utils.data import DistributedSampler

def distributed_accuracy(model, x, y):
    sampler = DistributedSampler(range(len(x)), num_replicas=world_size, rank=rank,
                                 shuffle=False)
    share = list(sampler)
    with torch.no_grad():
        correct = (model(x[share]).argmax(dim=1) == y[share]).sum().double()
    dist.all_reduce(correct)
    return correct.item() / (len(share) * world_size)''',
     "rank 0: distributed_accuracy gave 0.533"),
    ("contiguous shares of len(x) // world_size: the remainder never evaluated", '''
def distributed_accuracy(model, x, y):
    chunk = len(x) // world_size
    share = slice(rank * chunk, (rank + 1) * chunk)
    with torch.no_grad():
        correct = (model(x[share]).argmax(dim=1) == y[share]).sum().double()
    dist.all_reduce(correct)
    return correct.item() / len(x)''', "distributed_accuracy gave"),
    ("the counts reduced to rank 0 only", _ACCURACY.replace(
        "dist.all_reduce(correct)", "dist.reduce(correct, dst=0)"),
     "at world size 3, rank 1: distributed_accuracy gave"),
    ("an async all_reduce never waited", _ACCURACY.replace(
        "dist.all_reduce(correct)", "dist.all_reduce(correct, async_op=True)"),
     "started all_reduce (asynchronous) and never waited for it"),
    ("rank 0 evaluates everything and broadcasts", '''
def distributed_accuracy(model, x, y):
    acc = torch.zeros(1, dtype=torch.float64)
    if rank == 0:
        with torch.no_grad():
            acc[0] = (model(x).argmax(dim=1) == y).double().mean()
    dist.broadcast(acc, src=0)
    return acc.item()''', "rank 0: evaluated"),
    ("eval mode, never put back", _ACCURACY.replace(
        "    share =", "    model.eval()\n    share ="),
     "left the model in eval mode (it was in train mode)"),
    ("the parameters frozen with requires_grad_(False) instead of no_grad", _ACCURACY.replace(
        "    with torch.no_grad():\n        correct", "    model.requires_grad_(False)\n"
        "    if True:\n        correct"), "requires_grad True became False"),
    ("shares drawn by a shuffle that reseeds torch", _ACCURACY.replace(
        "    share = slice(rank, len(x), world_size)",
        "    torch.manual_seed(0)\n    share = torch.randperm(len(x))[rank::world_size]"),
     "changed torch's random generator"),
    ("every rank receives first: a deadlock", '''
def distributed_accuracy(model, x, y):
    share = slice(rank, len(x), world_size)
    with torch.no_grad():
        correct = (model(x[share]).argmax(dim=1) == y[share]).sum().double().reshape(1)
    total = torch.zeros(1, dtype=torch.float64)
    if rank == 0:
        total += correct
        for r in range(1, world_size):
            other = torch.zeros(1, dtype=torch.float64)
            dist.recv(other, src=r)
            total += other
        for r in range(1, world_size):
            dist.send(total, dst=r)
    else:
        dist.recv(total, src=0)
        dist.send(correct, dst=0)
    return total.item() / len(x)''',
     "a deadlock at world size 3: rank 0 waits in recv from rank 1"),
    ("shares hard-coded for 2 ranks", _ACCURACY.replace(
        "slice(rank, len(x), world_size)", "slice(rank, len(x), 2)"),
     "at world size 1, rank 0: distributed_accuracy gave", 2),
    ("the caller's y overwritten with the predictions", '''
def distributed_accuracy(model, x, y):
    share = slice(rank, len(x), world_size)
    with torch.no_grad():
        labels = y[share].clone()
        y[share] = model(x[share]).argmax(dim=1)
        correct = (y[share] == labels).sum().double()
    dist.all_reduce(correct)
    return correct.item() / len(x)''', "changed the caller's y in place"),
]
