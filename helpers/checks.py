"""Every exercise checker of the course: it names each rank whose answer is wrong.

A checker runs in the notebook (the client) on values pulled from every rank, e.g.
``check_ranks(cluster.view["total"], expected, "total")``, and either prints that every rank
is right or raises an AssertionError listing each wrong rank with what it holds and what it
should hold. Exercises start from inputs that are a known function of the rank (the
``*_input`` functions below), so a checker knows what every rank should hold without
trusting values the exercise may have overwritten.

Introduced in notebook 00; each section names the notebook whose exercise it checks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn


# ---- one value per rank (notebook 00, and the base of the others) ----------------------
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


# ---- point-to-point rings (notebooks 01, 02 and 06) ----------------------------------
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


def check_from_left(values: list[Any]) -> None:
    """Exercise checker: rank r must hold float(r - 1 mod n), its left neighbour's rank."""
    n = len(values)
    got = [_number(v) for v in values]
    not_numbers = [r for r, v in enumerate(got) if not isinstance(v, float)]
    if not_numbers:
        raise AssertionError(f"from_left is not a number on rank(s) {not_numbers}: "
                             + ", ".join(f"rank {r}: {values[r]!r}" for r in not_numbers))
    check_ranks(got, [float((r - 1) % n) for r in range(n)], "from_left")


def _number(value: Any) -> Any:
    """A float for an int, a float or a one-element tensor; anything else unchanged."""
    if hasattr(value, "numel") and value.numel() == 1:
        return float(value.item())
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else value


# ---- training (notebooks 03 and 04) --------------------------------------------------
def _as_tensor(value: object) -> torch.Tensor:
    """value as a float64 tensor on the CPU."""
    return torch.as_tensor(value, dtype=torch.float64).cpu()


def _problem(got: object, expected: torch.Tensor, limit: float) -> str | None:
    """What is wrong with one rank's value, or None if it is within limit of expected."""
    if got is None:
        return "is None"
    g = _as_tensor(got)
    if g.shape != expected.shape:
        return f"has shape {tuple(g.shape)}, expected {tuple(expected.shape)}"
    diff = (g - expected).abs().max().item() if g.numel() else 0.0
    if math.isnan(diff) or diff > limit:
        return f"is off by up to {diff:.3g} (tolerance {limit:.3g})"
    return None


def check_close_per_rank(
    got: Sequence[object], expected: object, what: str, atol: float = 1e-5, rtol: float = 1e-4
) -> None:
    """Raise an AssertionError naming each rank whose `what` is not within tolerance of expected."""
    e = _as_tensor(expected)
    limit = atol + rtol * (e.abs().max().item() if e.numel() else 0.0)
    problems = {r: p for r, g in enumerate(got) if (p := _problem(g, e, limit)) is not None}
    if problems:
        lines = [f"rank {r}: {what} {p}" for r, p in problems.items()]
        raise AssertionError(f"{what} is wrong on rank(s) {list(problems)}:\n" + "\n".join(lines))
    print(f"{what}: correct on all {len(got)} ranks")


# ---- checkpoints (notebook 05) -------------------------------------------------------
def weights_fingerprint(module: Any) -> torch.Tensor:
    """The sum of each parameter (float64, on the CPU; empty if `module` is not a model)."""
    if not isinstance(module, nn.Module):
        return torch.zeros(0, dtype=torch.float64)
    sums = [p.detach().double().sum().cpu() for p in module.parameters()]
    return torch.stack(sums) if sums else torch.zeros(0, dtype=torch.float64)
