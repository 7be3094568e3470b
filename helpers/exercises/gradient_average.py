"""The exercises of notebook 03 (gradient averaging by hand):
their inputs, right answers and rules."""

from __future__ import annotations

import random
from typing import Any

import torch
import torch.nn.functional as F

from ..data import digits, mlp
from .core import Calls, Exercise
from .means import (
    collectives_only,
    numel,
)


def _loss_and_count(rank: int, seed: int) -> tuple[float, int]:
    gen = random.Random(seed * 1000 + rank)
    return round(gen.uniform(0.5, 3.0), 3), gen.randint(1, 40)


def _global_mean_args(rank: int, size: int, device: Any, group: Any, seed: int) -> tuple:
    return _loss_and_count(rank, seed)


def _global_mean_expected(rank: int, size: int, seed: int) -> float:
    pairs = [_loss_and_count(r, seed) for r in range(size)]
    return sum(m * c for m, c in pairs) / sum(c for _, c in pairs)


GLOBAL_MEAN = Exercise("global_mean", _global_mean_args, _global_mean_expected,
                       collectives_only, "collectives only", atol=1e-6)


def _weighted_rows(rank: int, size: int, seed: int) -> slice:
    sizes = [4 + (seed + 7 * r) % 13 for r in range(size)]
    start = sum(sizes[:rank])
    return slice(start, start + sizes[rank])


def _weighted_args(rank: int, size: int, device: Any, group: Any, seed: int) -> tuple:
    x, y, _, _ = digits()
    rows = _weighted_rows(rank, size, seed)
    model = mlp(hidden=16, seed=seed % 1000).to(device)
    F.cross_entropy(model(x[rows].to(device)), y[rows].to(device)).backward()
    return model, rows.stop - rows.start


def _flat_gradient(args: tuple, returned: Any) -> torch.Tensor:
    return torch.cat([p.grad.reshape(-1) for p in args[0].parameters()]).cpu()


def _weighted_expected(rank: int, size: int, seed: int) -> torch.Tensor:
    x, y, _, _ = digits()
    end = _weighted_rows(size - 1, size, seed).stop
    model = mlp(hidden=16, seed=seed % 1000)
    F.cross_entropy(model(x[:end]), y[:end]).backward()
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()])


WEIGHTED_AVERAGE = Exercise(
    "weighted_average_gradients", _weighted_args, _weighted_expected, collectives_only,
    "collectives only", collect=_flat_gradient, atol=1e-6)


def _sync_args(rank: int, size: int, device: Any, group: Any, seed: int) -> tuple:
    model = mlp(hidden=8, depth=2, seed=seed % 1000).to(device)
    case = seed % 4  # 0: in sync; 1-3: one rank differs, in one of three ways
    if case and rank == (seed // 4) % size:
        params = list(model.parameters())
        p = params[(seed // 16) % len(params)]
        with torch.no_grad():
            flat = p.view(-1)
            if case == 1:
                flat[0] += 1e-6                                # a tiny drift
            elif case == 2:
                flat[0], flat[-1] = flat[-1].item(), flat[0].item()  # same sum, other order
            else:
                flat[0] += 0.5                                 # a plain difference
                flat[-1] -= 0.5                                # ... that keeps the sum
    return (model,)


def _sync_expected(rank: int, size: int, seed: int) -> bool:
    return seed % 4 == 0 or size == 1  # one rank alone is always in sync with itself


def _sync_means(calls: Calls, rank: int, size: int, observed: Any) -> str | None:
    if problem := collectives_only(calls, rank, size, observed):
        return problem
    sent = sum(numel(s) for c in calls for s in c["shapes"])
    if sent > 64:
        return (f"its collectives carried {sent} numbers: compare a fingerprint of a fixed, "
                "small size, not the parameters themselves")
    return None


IN_SYNC = Exercise("in_sync", _sync_args, _sync_expected, _sync_means,
                   "collectives of a fixed, small size", cases=4)
