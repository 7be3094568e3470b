"""Checker for the training exercises: every rank must hold (nearly) the expected values.

Introduced in notebook 03 (averaged gradients) and reused by notebook 04 (test accuracy).
Unlike ``helpers.checks.check_ranks``, it reports the largest difference instead of printing
whole tensors, which for a model's gradient would be thousands of numbers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch


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
