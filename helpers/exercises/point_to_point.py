"""The exercises of notebook 01 (point to point):
their inputs, right answers and rules."""

from __future__ import annotations

from typing import Any

import torch

from .core import Calls, Exercise
from .means import (
    point_to_point_only,
)


def _pair_value(rank: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed * 1000 + rank)
    return torch.randint(0, 100, (2,), generator=gen).float()


def _swap_args(rank: int, size: int, device: Any, group: Any, seed: int) -> tuple:
    return (_pair_value(rank, seed).to(device),)


def _swap_expected(rank: int, size: int, seed: int) -> torch.Tensor:
    partner = rank ^ 1
    return _pair_value(partner if partner < size else rank, seed)


def _swap_means(calls: Calls, rank: int, size: int, observed: Any) -> str | None:
    if (rank ^ 1) >= size:
        return None if not calls else (f"rank {rank} has no partner at world size {size}, "
                                       f"but called {sorted({c['op'] for c in calls})}")
    return point_to_point_only(calls, rank, size, observed)


SWAP_WITH_PARTNER = Exercise(
    "swap_with_partner", _swap_args, _swap_expected, _swap_means,
    "point-to-point calls only, and no call on a rank without a partner", min_size=2)


def shift_input(rank: int, seed: int = 0) -> torch.Tensor:
    """The tensor rank `rank` starts with in notebook 01's shift exercise."""
    gen = torch.Generator().manual_seed(seed * 1000 + rank)
    return torch.arange(3.0) + 10 * rank + torch.randint(0, 5, (1,), generator=gen).float()


def _shift_args(rank: int, size: int, device: Any, group: Any, seed: int) -> tuple:
    return (shift_input(rank, seed).to(device),)


def _shift_expected(rank: int, size: int, seed: int) -> torch.Tensor:
    return shift_input((rank - 1) % size, seed)


SHIFT_RIGHT = Exercise("shift_right", _shift_args, _shift_expected, point_to_point_only,
                       "point-to-point calls only", min_size=2)


def ring_value(rank: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed * 1000 + rank)
    return torch.randint(-50, 50, (3,), generator=gen).float()


def _ring_sum_args(rank: int, size: int, device: Any, group: Any, seed: int) -> tuple:
    return (ring_value(rank, seed).to(device),)


def _ring_sum_expected(rank: int, size: int, seed: int) -> torch.Tensor:
    return sum(ring_value(r, seed) for r in range(size))


def _ring_sum_means(calls: Calls, rank: int, size: int, observed: Any) -> str | None:
    if problem := point_to_point_only(calls, rank, size, observed):
        return problem
    sends = sum(1 for c in calls if c["op"] in ("send", "isend")) + sum(
        1 for c in calls for p in c.get("parts") or () if p[0] == "isend")
    if sends > size:
        return f"sent {sends} messages: a ring needs no more than {size - 1} per rank"
    return None


RING_SUM = Exercise("ring_sum", _ring_sum_args, _ring_sum_expected, _ring_sum_means,
                    "point-to-point only, around the ring", min_size=2)
