"""Checkers for exercises: compare one value per rank and name every rank that is wrong.

Introduced in notebook 00. A checker runs in the notebook (the client) on values pulled
from every rank, e.g. ``check_ranks(cluster.view["total"], expected, "total")``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch


def _same(got: Any, expected: Any, atol: float) -> bool:
    """True if got equals expected: exactly for ints, within atol for floating tensors."""
    if isinstance(got, torch.Tensor) or isinstance(expected, torch.Tensor):
        try:
            got, expected = torch.as_tensor(got), torch.as_tensor(expected)
        except (TypeError, RuntimeError, ValueError):  # e.g. None where a tensor is expected
            return False
        if got.shape != expected.shape:
            return False
        if got.is_floating_point() or expected.is_floating_point():
            return torch.allclose(got.double(), expected.double(), atol=atol, rtol=0)
        return torch.equal(got, expected)
    if isinstance(got, float) or isinstance(expected, float):
        return abs(got - expected) <= atol
    return got == expected


def _show(value: Any) -> str:
    return str(value.tolist()) if isinstance(value, torch.Tensor) else repr(value)


def wrong_ranks(got: Sequence[Any], expected: Sequence[Any], atol: float = 1e-6) -> list[int]:
    """Ranks whose value differs from what that rank should hold."""
    return [r for r, (g, e) in enumerate(zip(got, expected)) if not _same(g, e, atol)]


def check_ranks(got: Sequence[Any], expected: Sequence[Any], what: str, atol: float = 1e-6) -> None:
    """Raise an AssertionError naming each rank whose `what` is wrong, with got and expected."""
    if len(got) != len(expected):
        raise AssertionError(f"{what}: got values from {len(got)} ranks, expected {len(expected)}")
    bad = wrong_ranks(got, expected, atol)
    if bad:
        lines = [f"rank {r}: {what} is {_show(got[r])}, expected {_show(expected[r])}" for r in bad]
        raise AssertionError(f"{what} is wrong on rank(s) {bad}:\n" + "\n".join(lines))
    print(f"{what}: correct on all {len(got)} ranks")
