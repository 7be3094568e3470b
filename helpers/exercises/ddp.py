"""The exercises of notebook 04 (DistributedDataParallel):
their inputs, right answers and rules."""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..data import digits, mlp
from .core import Calls, Exercise
from .means import (
    collectives_only,
    no_communication,
)


class Counting(nn.Module):
    """A model that counts the rows it is asked to classify (for the means rule)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model, self.rows = model, 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.rows += len(x)
        return self.model(x)


def _accuracy_data(seed: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    _, _, x, y = digits()
    n = (79, 83, 89, 97, 101)[seed % 5]  # a prime: never a multiple of the world size, so
    return x[:n], y[:n], seed % 1000     # DistributedSampler pads, and shares differ in size


def _accuracy_args(rank: int, size: int, device: Any, group: Any, seed: int) -> tuple:
    x, y, model_seed = _accuracy_data(seed)
    return Counting(mlp(seed=model_seed).to(device)), x.to(device), y.to(device)


def _rows_seen(args: tuple, returned: Any) -> int:
    return args[0].rows


def _accuracy_expected(rank: int, size: int, seed: int) -> float:
    x, y, model_seed = _accuracy_data(seed)
    with torch.no_grad():
        return (mlp(seed=model_seed)(x).argmax(dim=1) == y).float().mean().item()


def _accuracy_means(calls: Calls, rank: int, size: int, observed: Any) -> str | None:
    if problem := collectives_only(calls, rank, size, observed):
        return problem
    share = math.ceil(101 / size) + 1
    if observed > share:
        return (f"evaluated {observed} samples: each rank evaluates only its share (about "
                f"1/{size} of them)")
    return None


DISTRIBUTED_ACCURACY = Exercise(
    "distributed_accuracy", _accuracy_args, _accuracy_expected, _accuracy_means,
    "each rank evaluates only its share", observe=_rows_seen, atol=1e-6, cases=2)


def _accumulate_setup(seed: int) -> tuple[int, int, float]:
    return 3 + seed % 2, 4 + seed % 3, 0.3  # micro-batches, batch per micro-batch, lr


def _micro_batches(rank: int, size: int, seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    x, y, _, _ = digits()
    k, b, _ = _accumulate_setup(seed)
    start = (seed % 200) + rank * k * b
    return [(x[start + i * b:start + (i + 1) * b], y[start + i * b:start + (i + 1) * b])
            for i in range(k)]


def _accumulate_args(rank: int, size: int, device: Any, group: Any, seed: int) -> tuple:
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = DDP(mlp(hidden=16, seed=seed % 1000).to(device), process_group=group,
                device_ids=[device] if device.type == "cuda" else None)
    reductions = []

    def counted(state, bucket):  # no annotations: DDP checks them, and strings fail its check
        reductions.append(1)
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        return allreduce_hook(state, bucket)

    model.register_comm_hook(group, counted)
    model.reductions = reductions
    opt = torch.optim.SGD(model.parameters(), lr=_accumulate_setup(seed)[2])
    batches = [(xb.to(device), yb.to(device)) for xb, yb in _micro_batches(rank, size, seed)]
    return model, opt, batches


def _ddp_parameters(args: tuple, returned: Any) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in args[0].module.parameters()]).cpu()


def _reductions(args: tuple, returned: Any) -> int:
    return len(args[0].reductions)


def _accumulate_expected(rank: int, size: int, seed: int) -> torch.Tensor:
    _, _, lr = _accumulate_setup(seed)
    model = mlp(hidden=16, seed=seed % 1000)
    xs = torch.cat([xb for r in range(size) for xb, _ in _micro_batches(r, size, seed)])
    ys = torch.cat([yb for r in range(size) for _, yb in _micro_batches(r, size, seed)])
    F.cross_entropy(model(xs), ys).backward()
    with torch.no_grad():
        return torch.cat([(p - lr * p.grad).reshape(-1) for p in model.parameters()])


def _accumulate_means(calls: Calls, rank: int, size: int, observed: Any) -> str | None:
    if observed != 1:
        return (f"DDP averaged the gradients {observed} times: once per optimizer step, "
                "please (no_sync for all micro-batches but the last)")
    return None


ACCUMULATE = Exercise(
    "accumulate", _accumulate_args, _accumulate_expected, _accumulate_means,
    "one all-reduce per optimizer step", collect=_ddp_parameters, observe=_reductions,
    atol=1e-5)


def _shard_args(rank: int, size: int, device: Any, group: Any, seed: int) -> tuple:
    return 50 + seed % 41, seed % 7  # samples, epoch


def _shard_expected(rank: int, size: int, seed: int) -> list[int]:
    from torch.utils.data import DistributedSampler

    n, epoch = 50 + seed % 41, seed % 7
    sampler = DistributedSampler(range(n), num_replicas=size, rank=rank, shuffle=True, seed=0)
    sampler.set_epoch(epoch)
    return list(sampler)


MY_SHARD = Exercise("my_shard", _shard_args, _shard_expected, no_communication,
                    "no communication", cases=2)
