"""Inputs and checkers for the ring exercises: shift right (notebook 01), ring all-gather (02).

Each exercise starts from inputs that are a known function of the rank, so the checker can
say what every rank should hold without trusting values the exercise may have overwritten.
The checkers take values pulled from every rank (``helpers.plots.pull_cpu``) and name each
rank that is wrong.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from .checks import check_ranks


def shift_input(rank: int) -> torch.Tensor:
    """The tensor rank `rank` starts with in the shift exercise of notebook 01."""
    return torch.arange(3.0) + 10 * rank


def check_shift(shifted: Sequence[Any]) -> None:
    """Every rank r must hold shift_input(r - 1): its left neighbour's tensor (notebook 01)."""
    n = len(shifted)
    check_ranks(shifted, [shift_input((r - 1) % n) for r in range(n)], "shifted")


def gather_input(rank: int) -> torch.Tensor:
    """The chunk rank `rank` contributes in the ring all-gather exercise of notebook 02."""
    return torch.tensor([rank + 1.0, -(rank + 1.0)])


def check_ring_all_gather(gathered: Sequence[Any]) -> None:
    """Every rank must hold all ranks' chunks, in rank order, in one tensor (notebook 02)."""
    n = len(gathered)
    expected = torch.cat([gather_input(r) for r in range(n)])
    check_ranks(gathered, [expected] * n, "gathered")
