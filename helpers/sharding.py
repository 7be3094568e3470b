"""Sharding, as notebook 08 teaches it: a flat vector padded and cut into equal shards, the
bytes a rank holds, the bytes a step sends, and the small model and data the notebook trains.

Introduced in notebook 08. The notebook writes ZeRO-1, 2 and 3 out in its cells; what later
cells and the exercise checkers reuse (the padding, the byte counts, the data) lives here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from .timing import bus_factor

WIDTHS = (24, 48, 48, 10)  # 10 outputs: 4042 parameters, a multiple of no number from 3 to 8
GLOBAL_BATCH = 24  # rows per step, the same at every world size, shared as equally as can be


def shard_size(numel: int, world_size: int) -> int:
    """Elements per rank once numel is padded to a multiple of world_size."""
    return math.ceil(numel / world_size)


def padded_shard(flat: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
    """This rank's shard of a 1-D tensor padded with zeros to a multiple of world_size."""
    size = shard_size(flat.numel(), world_size)
    padded = flat.new_zeros(size * world_size)
    padded[:flat.numel()] = flat
    return padded[rank * size:(rank + 1) * size].clone()


def tensor_bytes(tensors: Iterable[torch.Tensor | None]) -> int:
    """Bytes held by the tensors' elements (None counts nothing)."""
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


def formulas(numel: int, world_size: int, itemsize: int = 4) -> dict[str, tuple[int, int, int]]:
    """Bytes per rank (parameters, gradients, Adam's two moments) for each strategy, fp32,
    shards padded: DDP holds everything, ZeRO-1 shards the moments, ZeRO-2 the gradients too,
    ZeRO-3 the parameters too."""
    full, shard = numel * itemsize, shard_size(numel, world_size) * itemsize
    return {"DDP": (full, full, 2 * full), "ZeRO-1": (full, full, 2 * shard),
            "ZeRO-2": (full, shard, 2 * shard), "ZeRO-3": (shard, shard, 2 * shard)}


def _size_of(call: dict[str, Any]) -> int:
    """Bytes of a collective's size: its largest tensor (the whole of a gather or a scatter)."""
    def numel(shape: Any) -> int:
        return sum(numel(s) for s in shape) if isinstance(shape, list) else math.prod(shape)

    itemsize = getattr(torch, call["dtype"]).itemsize if call.get("dtype") else 0
    return max((numel(s) for s in call["shapes"]), default=0) * itemsize


OPS = {"all_reduce": "all_reduce", "all_gather_into_tensor": "all_gather",
       "all_gather_single": "all_gather", "all_gather": "all_gather",
       "reduce_scatter_tensor": "reduce_scatter", "reduce_scatter_single": "reduce_scatter",
       "reduce_scatter": "reduce_scatter"}


def traffic(calls: Iterable[dict[str, Any]], world_size: int) -> dict[str, float]:
    """Bytes each rank sends, per kind of collective, for calls of the course's call record:
    the size of each call times its bus factor ((n-1)/n for a gather or a reduce-scatter,
    2(n-1)/n for an all-reduce)."""
    sent: dict[str, float] = {}
    for call in calls:
        if (op := OPS.get(call["op"])) is not None:
            sent[op] = sent.get(op, 0.0) + _size_of(call) * bus_factor(op, world_size)
    return sent


def net(seed: int = 0) -> nn.Sequential:
    """The notebook's model: three Linear layers of the widths in WIDTHS."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        a, b, c, d = WIDTHS
        return nn.Sequential(nn.Linear(a, b), nn.ReLU(), nn.Linear(b, c), nn.ReLU(),
                             nn.Linear(c, d))


def global_batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The whole batch of one step (GLOBAL_BATCH rows), the same at every world size."""
    g = torch.Generator().manual_seed(1000 + step)
    return (torch.randn(GLOBAL_BATCH, WIDTHS[0], generator=g),
            torch.randint(0, WIDTHS[-1], (GLOBAL_BATCH,), generator=g))


def rows_of(rank: int, world_size: int, total: int = GLOBAL_BATCH) -> slice:
    """This rank's rows of total, contiguous and as equal as can be: where world_size does not
    divide total, some ranks hold one row more (at 5 ranks, 24 rows: 4, 5, 5, 5, 5)."""
    return slice(rank * total // world_size, (rank + 1) * total // world_size)


def my_batch(step: int, rank: int, world_size: int,
             device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's share of global_batch(step) (rows_of), on device."""
    x, y = global_batch(step)
    rows = rows_of(rank, world_size)
    return x[rows].to(device), y[rows].to(device)


def share_loss(out: torch.Tensor, y: torch.Tensor, world_size: int) -> torch.Tensor:
    """This rank's part of the global batch's mean cross-entropy, times world_size: the sum
    over its rows divided by GLOBAL_BATCH, not by its own rows. Averaged over the ranks (what
    DDP, and the notebook's reduce-scatters, do to gradients), it gives the gradient of the
    global mean, also where the shares are unequal; a rank's own mean would weigh the rows of a
    smaller share more."""
    return nn.functional.cross_entropy(out, y, reduction="sum") * (world_size / GLOBAL_BATCH)


def one_process(steps: int, lr: float = 1e-2, seed: int = 0) -> nn.Sequential:
    """net(seed) trained by one process with Adam on the global batches of steps 0..steps-1:
    what every data-parallel run of the notebook must match."""
    model = net(seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    for step in range(steps):
        x, y = global_batch(step)
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return model
