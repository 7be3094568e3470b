"""Step timing: warm-up calls are not timed, and the ranks agree on the slowest median."""

from __future__ import annotations

import time

import pytest
import torch
import torch.distributed as dist

from helpers.step_timer import slowest_median, time_on_all_ranks, time_steps


@pytest.fixture
def one_rank_group():
    """A process group of this test process alone (gloo, in-memory store)."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_time_steps_skips_warmup_and_measures_each_call():
    calls = []

    def step():
        calls.append(None)
        time.sleep(0.01)

    times = time_steps(step, n=5, warmup=2)
    assert len(calls) == 7 and len(times) == 5
    assert all(0.009 <= t < 1.0 for t in times)


def test_slowest_median_on_one_rank_is_the_median(one_rank_group):
    assert slowest_median([0.3, 0.1, 0.2, 10.0, 0.25], torch.device("cpu")) == pytest.approx(0.25)


def test_time_on_all_ranks(one_rank_group):
    seconds = time_on_all_ranks(lambda: time.sleep(0.005), torch.device("cpu"), n=3, warmup=1)
    assert 0.004 <= seconds < 1.0
