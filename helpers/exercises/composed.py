"""The exercises of notebook 11 (composed parallelism): their cases and right answers.

They run in the notebook itself, not on ranks, as notebook 07's do: each checker calls the
learner's function on many cases drawn from a fixed generator (meshes of one to four
dimensions, parameter shapes that do and do not divide, clusters of 1 to 256 ranks) and names
the first ones it gets wrong; its arguments, os.environ and the random generators must be left
as they were, and every call must return a value of its own (in_notebook.judge_in_notebook)."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from typing import Any

from ..mesh import axis_groups
from .in_notebook import judge_in_notebook

Shape = tuple[int, ...]


# ---- exercise 1: who shares my group along an axis -------------------------------------------
def group_of_cases(trials: int = 150) -> list[tuple[str, tuple, list[int]]]:
    """Meshes of 1 to 4 dimensions of sizes 1 to 5, a random rank and axis of each; and the
    meshes of the notebook ((2, 2, 2), (2, 1, 2), (1, 3, 2)) and (4, 8, 4), every axis."""
    gen = random.Random(37)
    meshes = [((2, 2, 2), r, a) for r in range(8) for a in range(3)]
    meshes += [((2, 1, 2), r, a) for r in range(4) for a in range(3)]
    meshes += [((1, 3, 2), 5, a) for a in range(3)] + [((4, 8, 4), 37, a) for a in range(3)]
    while len(meshes) < trials:
        shape = tuple(gen.randint(1, 5) for _ in range(gen.randint(1, 4)))
        meshes.append((shape, gen.randrange(math.prod(shape)), gen.randrange(len(shape))))
    cases = []
    for shape, rank, axis in meshes:
        mine = next(g for g in axis_groups(shape, axis) if rank in g)
        cases.append((f"rank {rank} of a mesh of shape {shape}, axis {axis}", (rank, shape, axis),
                      mine))
    return cases


def check_group_of(group_of: Callable[..., Any]) -> None:
    """Notebook 11, exercise 1: the ranks of my group along one axis of a mesh."""
    judge_in_notebook("group_of", group_of, group_of_cases(),
                      "ranks of meshes of 1 to 4 dimensions")


# ---- exercise 2: what FSDP2 sends along dp -------------------------------------------------
def fsdp_bytes_right(shapes: Sequence[Shape], dp: int, itemsize: int) -> int:
    """Bytes one rank sends in one step of one unit: two all-gathers and one reduce-scatter,
    each moving (dp - 1) padded shards on a ring; a shard holds ceil(rows / dp) rows of each
    parameter."""
    shard = sum(math.ceil(s[0] / dp) * math.prod(s[1:]) for s in shapes)
    return 3 * (dp - 1) * shard * itemsize


def fsdp_bytes_cases(trials: int = 120) -> list[tuple[str, tuple, int]]:
    """Units of 1 to 6 parameters (vectors and matrices, rows that do and do not divide by dp,
    fewer rows than ranks too), dp from 1 to 16, items of 2 and 4 bytes; and the notebook's
    block at dp = 2 and 3."""
    gen = random.Random(811)
    block = [(32, 32), (32,)] * 4 + [(128, 32), (128,), (32, 128), (32,), (32,), (32,), (32,),
                                      (32,)]
    units = [(block, 2, 4), (block, 3, 4), ([(7, 3)], 1, 4), ([(3,)], 4, 2)]
    while len(units) < trials:
        shapes = [tuple(gen.randint(1, 40) for _ in range(gen.randint(1, 2)))
                  for _ in range(gen.randint(1, 6))]
        units.append((shapes, gen.choice([1, 2, 3, 4, 5, 6, 8, 16]), gen.choice([2, 4])))
    return [(f"{len(shapes)} parameter{'s' * (len(shapes) > 1)} {shapes[:3]}"
             f"{' ...' if len(shapes) > 3 else ''}, "
             f"dp = {dp}, {itemsize}-byte items", (shapes, dp, itemsize),
             fsdp_bytes_right(shapes, dp, itemsize)) for shapes, dp, itemsize in units]


def check_fsdp_bytes(fsdp_bytes: Callable[..., Any]) -> None:
    """Notebook 11, exercise 2: the bytes one rank sends along dp for one FSDP2 unit."""
    judge_in_notebook("fsdp_bytes", fsdp_bytes, fsdp_bytes_cases(), "units of parameters")


# ---- exercise 3: a mesh for a memory budget ------------------------------------------------
class Memory:
    """The memory model of one case: bytes per rank of each shape (pp, dp, tp) of the world,
    drawn at random from a seed (so that any order of preference, or any rule of validity left
    out, meets a case where it picks another shape). Asked for anything but such a shape, it
    raises a KeyError naming what it was given."""

    def __init__(self, world_size: int, seed: int) -> None:
        self.seed = seed
        gen = random.Random(seed)
        self.table = {(pp, world_size // (pp * tp), tp): gen.randint(1, 1000)
                      for tp in range(1, world_size + 1) for pp in range(1, world_size + 1)
                      if world_size % (pp * tp) == 0}

    def __call__(self, shape: tuple[int, int, int]) -> int:
        if shape not in self.table:
            raise KeyError(f"{shape!r} is not a shape (pp, dp, tp) of this world")
        return self.table[shape]

    def __repr__(self) -> str:
        return f"Memory(seed={self.seed})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Memory) and vars(self) == vars(other)


def pick_shape_right(world_size: int, ranks_per_host: int, heads: int, layers: int,
                     memory: Callable[[tuple[int, int, int]], int], budget: int
                     ) -> tuple[int, int, int] | None:
    """The valid shape that fits, the smallest pp first, then the smallest tp; or None."""
    for pp in range(1, world_size + 1):
        for tp in range(1, world_size + 1):
            if world_size % (tp * pp) or heads % tp or ranks_per_host % tp or layers % pp:
                continue
            shape = (pp, world_size // (tp * pp), tp)
            if memory(shape) <= budget:
                return shape
    return None


def pick_shape_cases(trials: int = 200) -> list[tuple[str, tuple, Any]]:
    """Clusters of 1 to 256 ranks, 1 to 8 per host; heads and blocks that allow some degrees
    and not others; random memory per shape; budgets that some shapes fit (exactly at the
    budget, too) and, in a few cases, none."""
    gen = random.Random(1011)
    cases: list[tuple[str, tuple, Any]] = []
    while len(cases) < trials:
        per_host = gen.choice([1, 2, 4, 8])
        world = per_host * gen.choice([1, 2, 3, 4, 8, 16, 32])
        heads, layers = gen.choice([3, 4, 5, 6, 8, 12, 16]), gen.choice([4, 6, 12, 15, 16, 30, 32])
        memory = Memory(world, gen.randrange(10**6))
        sizes = sorted(memory.table.values())
        # the first case: some shape fits (whether a valid one does is up to the case)
        budget = gen.choice(sizes) - (1 if cases and gen.random() < 0.1 else 0)
        args = (world, per_host, heads, layers, memory, budget)
        cases.append((f"{world} ranks, {per_host} per host, {heads} heads, {layers} blocks, "
                      f"{memory!r}, budget {budget}", args, pick_shape_right(*args)))
    return cases


def check_pick_shape(pick_shape: Callable[..., Any]) -> None:
    """Notebook 11, exercise 3: the mesh to train on, for a memory budget."""
    judge_in_notebook("pick_shape", pick_shape, pick_shape_cases(), "clusters and budgets")
