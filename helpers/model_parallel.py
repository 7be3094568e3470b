"""Model parallelism as notebook 09 teaches it: tensor-parallel layers, pipeline schedules,
the bubble formula, and the functions RPC workers call by name.

The notebook writes each of these in the open first; the versions here are for the cells,
checkers and solutions that reuse them. RPC sends a function by its module and name, so the
functions a worker runs for another (``make_part``, ``parameter_rrefs``, ``gradients``) must
live in an importable module, not in a notebook cell.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn


# ---- tensor parallelism (step 1) ------------------------------------------------------------
class CopyToTP(torch.autograd.Function):
    """Megatron's f: identity forward; backward sums the input's gradient over the group."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any = None) -> torch.Tensor:
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        grad = grad.clone()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


class ReduceFromTP(torch.autograd.Function):
    """Megatron's g: forward sums the partial outputs over the group; identity backward."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any = None) -> torch.Tensor:
        x = x.clone()
        dist.all_reduce(x, group=group)
        return x

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad, None


class ColumnParallel(nn.Module):
    """This rank's rows of full.weight (its share of the output features), and of the bias."""

    def __init__(self, full: nn.Linear, group: Any = None):
        super().__init__()
        rank, size = dist.get_rank(group), dist.get_world_size(group)
        rows = full.out_features // size
        part = slice(rank * rows, (rank + 1) * rows)
        self.group = group
        self.weight = nn.Parameter(full.weight.detach()[part].clone())
        self.bias = nn.Parameter(full.bias.detach()[part].clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(CopyToTP.apply(x, self.group), self.weight, self.bias)


class RowParallel(nn.Module):
    """This rank's columns of full.weight (its share of the input features); the whole bias,
    added once, after the sum."""

    def __init__(self, full: nn.Linear, group: Any = None):
        super().__init__()
        rank, size = dist.get_rank(group), dist.get_world_size(group)
        cols = full.in_features // size
        self.group = group
        self.weight = nn.Parameter(full.weight.detach()[:, rank * cols:(rank + 1) * cols].clone())
        self.bias = nn.Parameter(full.bias.detach().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ReduceFromTP.apply(F.linear(x, self.weight), self.group) + self.bias


def tensor_parallel_mlp(full: nn.Sequential, group: Any = None) -> nn.Sequential:
    """Linear, ReLU, Linear split over the group: column-parallel, then row-parallel."""
    return nn.Sequential(ColumnParallel(full[0], group), nn.ReLU(),
                         RowParallel(full[2], group))


# ---- shapes chosen from the world size ----------------------------------------------------
def hidden_width(world_size: int, target: int = 48) -> int:
    """The hidden width of the notebook's block: target where world_size divides it, else the
    multiple of world_size nearest target (at 5 ranks 50, at 7 ranks 49). Column- and
    row-parallel layers cut it into equal slices, one per rank, as Megatron-LM's do (they
    assert that the tensor-parallel size divides the width)."""
    if world_size < 1:
        raise ValueError(f"world_size={world_size}: give a number of ranks from 1 up")
    return world_size * max(1, round(target / world_size))


def mesh_2d(world_size: int, ranks_per_host: int | None = None) -> tuple[int, int] | None:
    """(dp, tp): the shape of a 2-D mesh of all the ranks with both sides above 1, or None
    where there is none (1, 2, 3 or a prime number of ranks). Tensor parallelism sends two
    all-reduces per block and step, so its groups (the mesh's rows: consecutive ranks) stay
    inside a host where the ranks allow (tp divides ranks_per_host); among those shapes, the
    most square one, tp the larger side: 4 -> (2, 2), 6 -> (2, 3), 8 -> (2, 4), 16 -> (4, 4);
    8 ranks on 4 hosts of 2 -> (4, 2)."""
    shapes = [(world_size // tp, tp) for tp in range(2, world_size // 2 + 1)
              if world_size % tp == 0]
    if not shapes:
        return None
    inside = [s for s in shapes if ranks_per_host and ranks_per_host % s[1] == 0]
    return min(inside or shapes, key=lambda s: (abs(s[0] - s[1]), -s[1]))


def library_micro_batches(stages: int, at_least: int = 4) -> int:
    """Micro-batches for torch.distributed.pipelining's Schedule1F1B, which refuses fewer
    micro-batches than stages: the smallest power of two that is at least both."""
    m = at_least
    while m < stages:
        m *= 2
    return m


# ---- pipeline parallelism (step 4) ----------------------------------------------------------
def gpipe_order(n_micro: int) -> list[tuple[str, int]]:
    """GPipe: every micro-batch's forward, then every backward (the same on every stage)."""
    return [("F", i) for i in range(n_micro)] + [("B", i) for i in range(n_micro)]


def one_f_one_b_order(stage: int, stages: int, n_micro: int) -> list[tuple[str, int]]:
    """1F1B: stages-stage-1 warm-up forwards, then one forward and one backward in turn,
    then the remaining backwards (the notebook's one_f_one_b_order(m), its rank and world size
    as arguments)."""
    warmup = min(stages - stage - 1, n_micro)
    order = [("F", i) for i in range(warmup)]
    for i in range(n_micro - warmup):
        order += [("F", warmup + i), ("B", i)]
    return order + [("B", i) for i in range(n_micro - warmup, n_micro)]


def bubble_fraction(stages: int, n_micro: int) -> float:
    """The share of a step each stage idles in GPipe and 1F1B: (p-1)/(m+p-1)."""
    return (stages - 1) / (n_micro + stages - 1)


def schedule_slots(orders: list[list[tuple[str, int]]], forward: int = 1,
                   backward: int = 2) -> tuple[int, int]:
    """Play the stages' orders (orders[s] is stage s's) on an ideal machine: a forward takes
    `forward` slots, a backward `backward`, messages are free, and each operation starts as
    soon as its stage is free and its input exists (forward i on stage s needs forward i on
    s-1; backward i needs backward i on s+1, or on the last stage its own forward i).
    Returns (the step's length, each stage's busy slots); raises if the orders deadlock."""
    busy = {sum(forward if kind == "F" else backward for kind, _ in order) for order in orders}
    if len(busy) != 1:
        raise ValueError(f"the stages do different amounts of work: {sorted(busy)} slots")
    length = play_ranks([[(kind, i, s) for kind, i in order] for s, order in enumerate(orders)],
                        len(orders), forward, backward)
    return int(length), busy.pop()


def play_ranks(orders: list[list[tuple[str, int, int]]], stages: int, forward: float = 1,
               backward: float = 2) -> float:
    """schedule_slots for ranks that may hold several stages (notebook 11's interleaved
    schedule): orders[r] is rank r's list of (kind, micro-batch, stage), run in that order,
    one at a time. The same dependencies between stages; returns the step's length."""
    done: dict[tuple[str, int, int], float] = {}
    clock, position = [0.0] * len(orders), [0] * len(orders)
    moved = True
    while moved:
        moved = False
        for r, order in enumerate(orders):
            while position[r] < len(order):
                kind, i, s = order[position[r]]
                if kind == "F":
                    needs = ("F", i, s - 1) if s > 0 else None
                else:
                    needs = ("B", i, s + 1) if s < stages - 1 else ("F", i, s)
                if needs is not None and needs not in done:
                    break
                took = forward if kind == "F" else backward
                clock[r] = max(clock[r], done.get(needs, 0)) + took
                done[kind, i, s] = clock[r]
                position[r] += 1
                moved = True
    stuck = {r: orders[r][position[r]] for r in range(len(orders)) if position[r] < len(orders[r])}
    if stuck:
        raise RuntimeError("the orders deadlock: each stuck rank and the operation (kind, "
                           f"micro-batch, stage) it waits in: {stuck}")
    return max(clock)


# ---- RPC (step 6): what a worker runs when another asks -----------------------------------
def make_part(seed: int, d_in: int, d_out: int) -> nn.Module:
    """A Linear then a ReLU, its weights drawn from a generator of its own."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return nn.Sequential(nn.Linear(d_in, d_out), nn.ReLU())


def parameter_rrefs(module_rref: Any) -> list[Any]:
    """On the module's owner: an RRef to each of its parameters (for DistributedOptimizer)."""
    from torch.distributed.rpc import RRef

    return [RRef(p) for p in module_rref.local_value().parameters()]


def gradients(context_id: int, module_rref: Any) -> list[torch.Tensor]:
    """On the module's owner: its parameters' gradients in one distributed autograd context."""
    from torch.distributed import autograd as dist_autograd

    grads = dist_autograd.get_gradients(context_id)
    return [grads[p] for p in module_rref.local_value().parameters()]


def parameters(module_rref: Any) -> list[torch.Tensor]:
    """On the module's owner: copies of its parameters."""
    return [p.detach().clone() for p in module_rref.local_value().parameters()]
