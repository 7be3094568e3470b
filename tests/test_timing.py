"""helpers.timing on synthetic timings: bus factors, bandwidths, the one statistic, the timer."""

from __future__ import annotations

import itertools
import time

import pytest
import torch

from helpers import timing
from helpers.text import format_bytes


@pytest.mark.parametrize(
    ("op", "n", "factor"),
    [("all_reduce", 4, 1.5), ("all_reduce", 2, 1.0), ("all_reduce", 1, 0.0),
     ("all_gather", 4, 0.75), ("reduce_scatter", 3, 2 / 3), ("broadcast", 8, 1.0),
     ("reduce", 8, 1.0), ("send/recv", 2, 1.0)],
)
def test_bus_factors_follow_the_standard_convention(op, n, factor):
    assert timing.bus_factor(op, n) == pytest.approx(factor)


def test_bus_factor_rejects_unknown_operations_and_world_sizes():
    with pytest.raises(ValueError, match="no bus factor for 'all_to_all'"):
        timing.bus_factor("all_to_all", 4)
    with pytest.raises(ValueError, match="at least 1"):
        timing.bus_factor("all_reduce", 0)


def test_bandwidths_from_synthetic_times():
    # 8 MB all_reduce in 10 ms on 4 ranks: 800 MB/s algorithm, 1200 MB/s on the bus
    assert timing.algbw(8e6, 0.01) == pytest.approx(8e8)
    assert timing.busbw("all_reduce", 8e6, 0.01, 4) == pytest.approx(1.2e9)
    # all_gather of 4 MB in total in 2 ms on 4 ranks: each link carries 3/4 of it
    assert timing.busbw("all_gather", 4e6, 0.002, 4) == pytest.approx(1.5e9)
    assert timing.busbw("broadcast", 1e6, 0.001, 8) == pytest.approx(1e9)
    with pytest.raises(ValueError, match="positive"):
        timing.algbw(1e6, 0.0)


def test_slowest_median_takes_the_slowest_rank_then_the_median_repeat():
    times = [[1.0, 2.0, 1.5],   # repeat 0: slowest rank took 2
             [1.0, 1.0, 9.0],   # repeat 1: a stray slow rank, 9
             [3.0, 1.0, 1.0]]   # repeat 2: 3
    assert timing.slowest_median(times) == 3.0
    assert timing.slowest_median([[0.5]]) == 0.5
    with pytest.raises(ValueError):
        timing.slowest_median([])


def test_sizes_and_formatting():
    assert timing.sizes_pow2(8, 32 * 2**20, 4)[:3] == [8, 32, 128]
    assert timing.sizes_pow2(8, 32 * 2**20, 4)[-1] == 32 * 2**20
    assert timing.sizes_pow2(8, 31 * 2**20, 4)[-1] == 8 * 2**20
    assert timing.sizes_pow2(8, 8) == [8]
    with pytest.raises(ValueError):
        timing.sizes_pow2(16, 8)
    assert [format_bytes(b) for b in (8, 1536, 16 * 2**20)] == ["8 B", "1.5 KiB", "16 MiB"]


def test_time_on_all_ranks_warms_up_then_times_each_repeat(one_rank_group):
    ticks = itertools.count()  # a fake clock: each reading is one second after the last
    calls = []
    durations = iter([5, 1, 3])  # synthetic: repeat i lasts durations[i] fake seconds

    def clock():
        return float(next(ticks))

    def fn():
        calls.append(1)
        if len(calls) > 2:  # after the 2 warm-up calls, advance the clock by the duration
            for _ in range(next(durations) - 1):
                next(ticks)

    seconds = timing.time_on_all_ranks(fn, torch.device("cpu"), warmup=2, repeats=3, clock=clock)
    assert len(calls) == 5, "2 warm-up calls + 3 timed repeats"
    assert seconds == 3.0, "median of the repeats (5, 1, 3)"


def test_time_on_all_ranks_measures_real_time(one_rank_group):
    start = time.perf_counter()
    seconds = timing.time_on_all_ranks(lambda: time.sleep(0.005), torch.device("cpu"), repeats=3)
    whole = time.perf_counter() - start  # 2 warm-up calls and 3 repeats, timed from outside
    # the median of 3 repeats: two of them took at least as long, and both lie inside `whole`
    assert 0.005 <= seconds <= whole / 2, (seconds, whole)


def test_sync_is_a_no_op_on_the_cpu_and_the_stopwatch_times_a_block():
    timing.sync(torch.device("cpu"))
    timing.sync("cpu")
    timing.sync(None)
    start = time.perf_counter()
    with timing.Stopwatch() as sw:
        time.sleep(0.01)
    assert 0.01 <= sw.seconds <= time.perf_counter() - start, sw.seconds
