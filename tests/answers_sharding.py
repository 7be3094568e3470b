"""More answers to the exercises of notebook 08, for tests/test_exercises.py (gathered by
tests/answers_more.py): other right answers and more wrong ones, some tried at 2 ranks."""

from __future__ import annotations

from answers import RIGHT

ALSO_RIGHT: dict[str, list[tuple[str, str]]] = {}
MORE_WRONG: dict[str, list[tuple]] = {}

# ---- exercise 1: my_piece ------------------------------------------------------------------
ALSO_RIGHT["my_piece"] = [
    ("F.pad, then view as (world_size, size) and take a row", '''
import torch.nn.functional as F

def my_piece(flat):
    n = dist.get_world_size()
    size = -(-flat.numel() // n)
    return F.pad(flat, (0, size * n - flat.numel())).view(n, size)[dist.get_rank()].clone()
'''),
]
_HARD_4 = RIGHT["my_piece"].replace("world_size", "4")
_PLUS_ONE = RIGHT["my_piece"].replace("math.ceil(flat.numel() / world_size)",
                                      "flat.numel() // world_size + 1")
_ROUNDED_DOWN = RIGHT["my_piece"].replace("math.ceil(flat.numel() / world_size)",
                                          "flat.numel() // world_size")
# a wrong padding fails in every check, whatever its seed: at 2, 3 and 4 ranks here, and with
# learners' random seeds in test_a_wrong_padding_fails_whatever_the_seed
PADDINGS: dict[str, list[tuple[str, str]]] = {
    "my_piece": [("n // world_size + 1 per rank", _PLUS_ONE),
                 ("n // world_size per rank (rounded down)", _ROUNDED_DOWN),
                 ("torch.chunk",
                  "def my_piece(flat):\n    return torch.chunk(flat, world_size)[rank]")],
}
MORE_WRONG["my_piece"] = [
    ("the lesson's padded_shard, imported in the function", '''
def my_piece(flat):
    from helpers.sharding import padded_shard
    return padded_shard(flat, rank, world_size)''', "this very function"),
    ("zeros that require grad, so the piece does too", RIGHT["my_piece"].replace(
        "device=flat.device)", "device=flat.device, requires_grad=True)").replace(
        "    padded[:flat.numel()] = flat", "    padded = padded.clone()\n"
        "    padded[:flat.numel()] = flat"), "requires grad"),
    ("a hard-coded 4 ranks (right at 4 only)", _HARD_4, "gave", 3),
    ("the lesson's padded_shard (the function the exercise asks for)",
     "def my_piece(flat):\n    return padded_shard(flat, rank, world_size)",
     "name 'padded_shard' is not defined"),
    ("the lesson's n (the world size at the full size only)", RIGHT["my_piece"].replace(
        "math.ceil(flat.numel() / world_size)", "math.ceil(flat.numel() / n)").replace(
        "size * world_size", "size * n"), "name 'n' is not defined"),
    *[(f"wrong padding: {what}, tried at {size} ranks", source, "at world size", size)
      for what, source in PADDINGS["my_piece"] for size in (2, 3, 4)],
    ("a hard-coded 2 ranks, tried at 2", RIGHT["my_piece"].replace("world_size", "2"),
     "at world size 1, rank 0", 2),
    ("torch.tensor_split: unequal pieces, no padding",
     "def my_piece(flat):\n    return torch.tensor_split(flat, world_size)[rank]", "gave", 2),
    ("padding at the front", '''
import math

def my_piece(flat):
    size = math.ceil(flat.numel() / world_size)
    padded = torch.cat([flat.new_zeros(size * world_size - flat.numel()), flat])
    return padded[rank * size:(rank + 1) * size]''', "gave"),
    ("padded with the last value instead of zeros", '''
import math

def my_piece(flat):
    size = math.ceil(flat.numel() / world_size)
    padded = torch.cat([flat, flat[-1:].expand(size * world_size - flat.numel())])
    return padded[rank * size:(rank + 1) * size]''', "gave"),
    ("strided: every world_size-th element", '''
import math
import torch.nn.functional as F

def my_piece(flat):
    size = math.ceil(flat.numel() / world_size)
    return F.pad(flat, (0, size * world_size - flat.numel()))[rank::world_size]''', "gave"),
    ("a list of floats", RIGHT["my_piece"].replace(".clone()", ".tolist()"), "a list"),
    ("padded in place into the input (resize_)", '''
import math

def my_piece(flat):
    n = flat.numel()
    size = math.ceil(n / world_size)
    flat.resize_(size * world_size)
    flat[n:] = 0
    return flat[rank * size:(rank + 1) * size].clone()''', "flat was given new memory (resize_"),
    ("scattered from rank 0 (communication where none is needed)", '''
import math

def my_piece(flat):
    size = math.ceil(flat.numel() / world_size)
    padded = torch.zeros(size * world_size, dtype=flat.dtype, device=flat.device)
    padded[:flat.numel()] = flat
    mine = torch.empty(size, dtype=flat.dtype, device=flat.device)
    dist.scatter(mine, list(padded.chunk(world_size)) if rank == 0 else None, src=0)
    return mine''', "needs no communication"),
]

# ---- exercise 2: global_norm ---------------------------------------------------------------
ALSO_RIGHT["global_norm"] = [
    ("torch.linalg.vector_norm squared, math.sqrt, keyword op", '''
import math

def global_norm(shard):
    sq = torch.linalg.vector_norm(shard).pow(2).reshape(1)
    dist.all_reduce(sq, op=dist.ReduceOp.SUM, group=dist.group.WORLD)
    return math.sqrt(sq.item())
'''),
]
MORE_WRONG["global_norm"] = [
    ("a numpy float64", '''
import numpy as np

def global_norm(shard):
    squares = shard.double().pow(2).sum().reshape(1)
    dist.all_reduce(squares)
    return np.sqrt(squares.item())''', "numpy.float64"),
    ("deterministic algorithms turned on for good", RIGHT["global_norm"].replace(
        "    squares = shard", "    torch.use_deterministic_algorithms(True)\n    squares = shard"),
     "deterministic algorithms"),
    ("the local norm, tried at 2 ranks",
     "def global_norm(shard):\n    return float(shard.norm())", "this rank's shard's norm only", 2),
    ("no square root", RIGHT["global_norm"].replace("squares.sqrt().item()", "squares.item()"),
     "take its square root"),
    ("the mean of the squares (AVG)", RIGHT["global_norm"].replace(
        "dist.all_reduce(squares)", "dist.all_reduce(squares, op=dist.ReduceOp.AVG)"),
     "expected", 2),
    ("the square root of a sum of norms", '''
def global_norm(shard):
    norm = shard.norm().reshape(1)
    dist.all_reduce(norm)
    return norm.sqrt().item()''', "expected"),
    ("a tensor", RIGHT["global_norm"].replace("squares.sqrt().item()", "squares.sqrt()"),
     "tensor"),
    ("the whole gradient gathered (another collective)", '''
def global_norm(shard):
    parts = [torch.empty_like(shard) for _ in range(world_size)]
    dist.all_gather(parts, shard)
    return torch.cat(parts).double().norm().item()''', "exactly one all_reduce"),
    ("the shards placed in a full vector and all-reduced", '''
def global_norm(shard):
    full = torch.zeros(world_size * shard.numel(), dtype=torch.float64, device=shard.device)
    full[rank * shard.numel():(rank + 1) * shard.numel()] = shard
    dist.all_reduce(full)
    return full.norm().item()''', "one number per rank is enough"),
    ("squares in place: the shard changed", '''
def global_norm(shard):
    shard.pow_(2)
    total = shard.double().sum().reshape(1)
    dist.all_reduce(total)
    return total.sqrt().item()''', "changed the caller's shard in place"),
    ("a norm times the hard-coded sqrt(4)",
     "def global_norm(shard):\n    return shard.norm().item() * 2.0", "expected", 4),
]

# ---- exercise 3: zero_sgd_step -------------------------------------------------------------
ALSO_RIGHT["zero_sgd_step"] = [
    ("lists of chunks, ReduceOp.AVG", '''
import torch.nn.functional as F

def zero_sgd_step(params, grad, lr):
    n = dist.get_world_size()
    size = -(-params.numel() // n)
    pad = size * n - params.numel()
    mine = torch.empty(size, dtype=grad.dtype, device=grad.device)
    dist.reduce_scatter(mine, list(F.pad(grad, (0, pad)).chunk(n)), op=dist.ReduceOp.AVG)
    shard = F.pad(params, (0, pad)).chunk(n)[dist.get_rank()] - lr * mine
    pieces = [torch.empty_like(shard) for _ in range(n)]
    dist.all_gather(pieces, shard)
    params.copy_(torch.cat(pieces)[:params.numel()])
'''),
]
_NO_PAD = '''
def zero_sgd_step(params, grad, lr):
    size = params.numel() // world_size
    mine = torch.empty(size, dtype=grad.dtype, device=grad.device)
    dist.reduce_scatter_tensor(mine, grad[:size * world_size].clone())
    shard = params[rank * size:(rank + 1) * size] - lr * mine / world_size
    full = torch.empty(size * world_size, dtype=params.dtype, device=params.device)
    dist.all_gather_single(full, shard)
    params[:size * world_size] = full'''
_OVER_PADDED = RIGHT["zero_sgd_step"].replace("math.ceil(params.numel() / world_size)",
                                             "params.numel() // world_size + 1")
PADDINGS["zero_sgd_step"] = [("no padding: the tail never updated", _NO_PAD),
                             ("n // world_size + 1 per rank (a shard too many)", _OVER_PADDED)]
MORE_WRONG["zero_sgd_step"] = [
    *[(f"no padding: the tail of the vector never updated, tried at {size} ranks", _NO_PAD,
       "gave", size) for size in (2, 3, 4)],
    *[(f"padded to n // world_size + 1 per rank, tried at {size} ranks", _OVER_PADDED,
       "pad", size) for size in (2, 3, 4)],
    ("params rebound to a new tensor, the caller's left alone", RIGHT["zero_sgd_step"].replace(
        "    params.copy_(full[:params.numel()])", "    params = full[:params.numel()]"),
     "params unchanged"),
    ("divided by a hard-coded 4", RIGHT["zero_sgd_step"].replace("mine /= world_size",
                                                                "mine /= 4"), "gave", 3),
    ("the shard updated, never gathered", '''
import math

def zero_sgd_step(params, grad, lr):
    size = math.ceil(params.numel() / world_size)
    padded = torch.zeros(size * world_size, dtype=grad.dtype, device=grad.device)
    padded[:grad.numel()] = grad
    mine = torch.empty(size, dtype=grad.dtype, device=grad.device)
    dist.reduce_scatter_single(mine, padded)
    stop = min((rank + 1) * size, params.numel())
    params[rank * size:stop] -= lr * mine[:max(0, stop - rank * size)] / world_size''',
     "gave"),
    ("a new tensor returned, params left alone", RIGHT["zero_sgd_step"].replace(
        "    params.copy_(full[:params.numel()])", "    return full[:params.numel()]"),
     "update params in place"),
    ("the gradient padded in place (grad changed)", '''
import math

def zero_sgd_step(params, grad, lr):
    n = grad.numel()
    size = math.ceil(n / world_size)
    grad.resize_(size * world_size)
    grad[n:] = 0
    mine = torch.empty(size, dtype=grad.dtype, device=grad.device)
    dist.reduce_scatter_tensor(mine, grad)
    full = torch.zeros(size * world_size, dtype=params.dtype, device=params.device)
    full[:params.numel()] = params
    dist.all_gather_into_tensor(full, full[rank * size:(rank + 1) * size] - lr * mine / world_size)
    params.copy_(full[:params.numel()])''', "grad was given new memory (resize_"),
    ("all-reduce, then each rank's shard all-gathered", '''
import math

def zero_sgd_step(params, grad, lr):
    size = math.ceil(params.numel() / world_size)
    g = torch.zeros(size * world_size, dtype=grad.dtype, device=grad.device)
    g[:grad.numel()] = grad
    dist.all_reduce(g)
    full = torch.zeros(size * world_size, dtype=params.dtype, device=params.device)
    full[:params.numel()] = params
    shard = (full - lr * g / world_size)[rank * size:(rank + 1) * size].clone()
    dist.all_gather_single(full, shard)
    params.copy_(full[:params.numel()])''', "reduce-scatter the gradient instead", 2),
    ("every rank updates everything after all_gather of the gradients", '''
def zero_sgd_step(params, grad, lr):
    grads = [torch.empty_like(grad) for _ in range(world_size)]
    dist.all_gather(grads, grad)
    params -= lr * torch.stack(grads).mean(dim=0)''', "one reduce-scatter of the gradient"),
    ("the update computed before the reduce-scatter filled mine (zeros)", RIGHT[
        "zero_sgd_step"].replace("mine = torch.empty(", "mine = torch.zeros(").replace(
        "    dist.reduce_scatter_single(mine, padded)\n    mine /= world_size\n", "").replace(
        "    dist.all_gather_single(full, shard)\n",
        "    dist.reduce_scatter_single(mine, padded)\n    dist.all_gather_single(full, shard)\n"),
     "params unchanged"),
    # payloads: what the two collectives carry, not only how many numbers
    ("the averaged gradient shards all-gathered, then every rank updates the whole vector",
     RIGHT["zero_sgd_step"].split("    mine /= world_size\n")[0]
     + "    every = torch.empty(size * world_size, dtype=grad.dtype, device=grad.device)\n"
       "    dist.all_gather_single(every, mine / world_size)\n"
       "    params -= lr * every[:params.numel()]\n",
     "all-gathered something other than this rank's updated shard"),
    ("the gradient padded with ones", RIGHT["zero_sgd_step"].replace(
        "padded = torch.zeros(", "padded = torch.ones("), "not zeros", 4),
    ("the parameters reduce-scattered instead of the gradient (then scaled back)", '''
import math

def zero_sgd_step(params, grad, lr):
    size = math.ceil(params.numel() / world_size)
    full = torch.zeros(size * world_size, dtype=params.dtype, device=params.device)
    full[:params.numel()] = params - lr * grad
    mine = torch.empty(size, dtype=grad.dtype, device=grad.device)
    dist.reduce_scatter_single(mine, full)
    dist.all_gather_single(full, mine / world_size)
    params.copy_(full[:params.numel()])''',
     "reduce-scattered something other than this rank's gradient"),
]
ALSO_RIGHT["zero_sgd_step"] += [
    ("the gradient divided by world_size before the reduce-scatter, the update gathered as the "
     "list form", '''
def zero_sgd_step(params, grad, lr):
    k = (params.numel() + world_size - 1) // world_size
    padded = torch.cat([grad / world_size, grad.new_zeros(k * world_size - grad.numel())])
    mine = torch.empty(k, dtype=grad.dtype, device=grad.device)
    dist.reduce_scatter_single(mine, padded)
    full = torch.cat([params, params.new_zeros(k * world_size - params.numel())])
    shard = full[rank * k:(rank + 1) * k] - lr * mine
    pieces = [torch.empty_like(shard) for _ in range(world_size)]
    dist.all_gather(pieces, shard)
    params.copy_(torch.cat(pieces)[:params.numel()])
'''),
]
