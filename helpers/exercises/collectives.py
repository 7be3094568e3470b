"""The exercises of notebook 02 (collectives):
their inputs, right answers and rules."""

from __future__ import annotations

import math
from typing import Any

import torch

from .core import Calls, Exercise
from .means import (
    one_all_reduce,
    point_to_point_only,
)
from .point_to_point import ring_value


def _mean_args(rank: int, size: int, device: Any, group: Any, seed: int) -> tuple:
    return (ring_value(rank, seed).to(device),)


def _mean_expected(rank: int, size: int, seed: int) -> torch.Tensor:
    return sum(ring_value(r, seed) for r in range(size)) / size


MEAN_OF_ALL = Exercise("mean_of_all", _mean_args, _mean_expected, one_all_reduce,
                       "one all_reduce")


def gather_input(rank: int, seed: int = 0) -> torch.Tensor:
    """The chunk rank `rank` contributes in notebook 02's ring all-gather exercise."""
    gen = torch.Generator().manual_seed(seed * 1000 + rank)
    return torch.tensor([rank + 1.0, -(rank + 1.0)]) + torch.randint(0, 9, (1,), generator=gen)


def _gather_args(rank: int, size: int, device: Any, group: Any, seed: int) -> tuple:
    return (gather_input(rank, seed).to(device),)


def _gather_expected(rank: int, size: int, seed: int) -> torch.Tensor:
    return torch.cat([gather_input(r, seed) for r in range(size)])


RING_ALL_GATHER = Exercise("ring_all_gather", _gather_args, _gather_expected,
                           point_to_point_only, "point-to-point calls only", min_size=2)


def _tree_args(rank: int, size: int, device: Any, group: Any, seed: int) -> tuple:
    value = ring_value(0, seed) if rank == 0 else torch.zeros(3)
    return (value.to(device),)


def _tree_expected(rank: int, size: int, seed: int) -> torch.Tensor:
    return ring_value(0, seed)


def _tree_means(calls: Calls, rank: int, size: int, observed: Any) -> str | None:
    if any(c["kind"] == "collective" for c in calls):
        return "used a collective: point-to-point calls only, please"
    parts = [(c["op"], c["peer"]) for c in calls if c["op"] != "batch_isend_irecv"]
    parts += [(p[0], p[1]) for c in calls for p in c.get("parts") or ()]
    sends = [p for op, p in parts if op in ("send", "isend")]
    receives = [p for op, p in parts if op in ("recv", "irecv")]
    rounds = math.ceil(math.log2(size)) if size > 1 else 0
    if rank != 0 and len(receives) != 1:
        return f"received {len(receives)} messages: every rank but 0 receives exactly once"
    if len(sends) > rounds:
        return (f"sent {len(sends)} messages: with {size} ranks a tree needs at most {rounds} "
                "rounds, so at most that many sends from any rank")
    return None


TREE_BROADCAST = Exercise("tree_broadcast", _tree_args, _tree_expected, _tree_means,
                          "point-to-point only, in ceil(log2 n) rounds", min_size=2)
