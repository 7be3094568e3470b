"""Time training steps on every rank and agree on one figure: the slowest rank's median.

Introduced in notebook 03 (cost of communication) and reused by notebook 04 and
benchmarks/ddp_step.py. A data-parallel step is as slow as its slowest rank, because every
rank waits for the others in the all-reduce; so the figure reported is the largest median.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch
import torch.distributed as dist


def _wait_for(device: torch.device | None) -> None:
    """Wait until the work queued on device is done (GPU work is asynchronous)."""
    if device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)


def time_steps(
    step: Callable[[], object], n: int = 20, warmup: int = 3, device: torch.device | None = None
) -> list[float]:
    """Seconds taken by each of n calls of step, after warmup untimed calls."""
    for _ in range(warmup):
        step()
    _wait_for(device)
    times = []
    for _ in range(n):
        start = time.perf_counter()
        step()
        _wait_for(device)
        times.append(time.perf_counter() - start)
    return times


def slowest_median(times: list[float], device: torch.device, group: object = None) -> float:
    """The median of this rank's times, then the largest such median over the ranks of group."""
    value = torch.tensor([statistics.median(times)], dtype=torch.float64, device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX, group=group)
    return value.item()


def time_on_all_ranks(
    step: Callable[[], object], device: torch.device, n: int = 20, warmup: int = 3
) -> float:
    """Seconds per step, all ranks starting together: the slowest rank's median of n steps."""
    dist.barrier()
    return slowest_median(time_steps(step, n, warmup, device), device)
