"""Time work on every rank, and turn times into bandwidths.

Introduced in notebook 02 (the bandwidth lab), used again for training steps in 03 and 04,
and for recoveries in 06.

One statistic throughout: **the median, over repeats, of the slowest rank's time**. Each
repeat starts on every rank at once (a barrier); a repeat lasts as long as its slowest rank,
because in data parallelism every rank waits for the last one at the next collective; and the
median over repeats is robust to a stray slow repeat. GPU work is asynchronous, so a timer
must wait for the device (``sync``) before it reads the clock. Where the parts of one step
matter (notebook 04's timeline), ``mark`` records a CUDA event on a GPU instead: it times the
GPU's own work on one stream, where a clock read after ``sync`` would also wait for the others.

Bandwidth: the algorithm bandwidth is bytes / time; the bus bandwidth multiplies it by a
factor per operation, so that every operation can be compared with the speed of one link
(nccl-tests' convention).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist

# bytes that cross a link per byte of the operation's size, on n ranks (size: the whole
# tensor for all_reduce, broadcast, reduce and send/recv; the gathered total for all_gather
# and reduce_scatter)
BUS_FACTORS: dict[str, Callable[[int], float]] = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "send/recv": lambda n: 1.0,
}


def sync(device: torch.device | str | None) -> None:
    """Wait until the device has finished its queued work (a no-op on the CPU)."""
    if device is not None and torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def slowest_median(times: Sequence[Sequence[float]]) -> float:
    """The course's statistic: median over repeats of the slowest rank; times[repeat][rank]."""
    if not times or not all(times):
        raise ValueError("need at least one repeat with one rank's time")
    return statistics.median(max(per_rank) for per_rank in times)


def time_on_all_ranks(
    fn: Callable[[], object],
    device: torch.device,
    *,
    warmup: int = 2,
    repeats: int = 5,
    group: object = None,
    clock: Callable[[], float] = time.perf_counter,
) -> float:
    """Seconds one call of fn takes: the slowest rank's time, median over repeats.

    Call it on every rank of `group` with the same warmup and repeats: each repeat starts
    with a barrier, and the ranks' times are gathered, so every rank returns the same number.
    """
    for _ in range(warmup):
        fn()
    sync(device)
    mine = []
    for _ in range(repeats):
        dist.barrier(group=group)
        start = clock()
        fn()
        sync(device)
        mine.append(clock() - start)
    n = dist.get_world_size(group)
    gathered = [torch.zeros(repeats, dtype=torch.float64, device=device) for _ in range(n)]
    dist.all_gather(gathered, torch.tensor(mine, dtype=torch.float64, device=device), group=group)
    per_rank = [t.tolist() for t in gathered]
    return slowest_median([[per_rank[r][i] for r in range(n)] for i in range(repeats)])


def mark(device: torch.device | str | None) -> float | torch.cuda.Event:
    """Now, as `device` sees it (notebook 04): on a GPU, a CUDA event recorded on the current
    stream, which completes when the GPU has done the work queued before it; elsewhere, the
    host clock. Read two marks with seconds_between (on a GPU, after sync(device))."""
    if device is not None and torch.device(device).type == "cuda":
        event = torch.cuda.Event(enable_timing=True)
        event.record(torch.cuda.current_stream(device))
        return event
    return time.perf_counter()


def seconds_between(start: float | torch.cuda.Event, end: float | torch.cuda.Event) -> float:
    """Seconds from mark `start` to mark `end` (notebook 04); CUDA events must have completed."""
    if isinstance(start, torch.cuda.Event):
        return start.elapsed_time(end) / 1e3
    return end - start


class Stopwatch:
    """`with Stopwatch() as sw: ...` then sw.seconds: how long the block took (notebook 06)."""

    def __enter__(self) -> Stopwatch:
        self.started, self.seconds = time.perf_counter(), float("nan")
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self.started


def bus_factor(op: str, n: int) -> float:
    """Bytes on the busiest link per byte of `op`'s size on n ranks (notebook 02)."""
    if op not in BUS_FACTORS:
        raise ValueError(f"no bus factor for {op!r}; known: {sorted(BUS_FACTORS)}")
    if n < 1:
        raise ValueError(f"world size must be at least 1, got {n}")
    return BUS_FACTORS[op](n)


def algbw(nbytes: float, seconds: float) -> float:
    """Algorithm bandwidth in bytes/s: the operation's size over its time (notebook 02)."""
    if seconds <= 0:
        raise ValueError(f"time must be positive, got {seconds}")
    return nbytes / seconds


def busbw(op: str, nbytes: float, seconds: float, n: int) -> float:
    """Bus bandwidth in bytes/s: algorithm bandwidth times the bus factor (notebook 02)."""
    return algbw(nbytes, seconds) * bus_factor(op, n)


def sizes_pow2(smallest: int, largest: int, step: int = 4) -> list[int]:
    """Message sizes in bytes from smallest to largest, each `step` times the last (notebook 02)."""
    if smallest < 1 or largest < smallest or step < 2:
        raise ValueError(f"bad range {smallest}..{largest} step {step}")
    sizes = [smallest]
    while sizes[-1] * step <= largest:
        sizes.append(sizes[-1] * step)
    return sizes
