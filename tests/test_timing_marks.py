"""helpers.timing.mark and seconds_between (notebook 04's timeline): host clock on the CPU,
CUDA events on a GPU."""

from __future__ import annotations

import time

import pytest
import torch

from helpers.timing import mark, seconds_between, sync


@pytest.mark.parametrize("device", [None, "cpu", torch.device("cpu")])
def test_on_the_cpu_a_mark_is_the_host_clock(device):
    start = mark(device)
    time.sleep(0.02)
    end = mark(device)
    assert isinstance(start, float)
    assert 0.015 < seconds_between(start, end) < 1.0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_on_a_gpu_a_mark_is_an_event_the_gpu_reaches():
    device = torch.device("cuda", torch.cuda.current_device())
    start = mark(device)
    torch.cuda._sleep(50_000_000)  # queued GPU work the host does not wait for
    end = mark(device)
    assert isinstance(start, torch.cuda.Event)
    sync(device)
    assert seconds_between(start, end) > 0.001
