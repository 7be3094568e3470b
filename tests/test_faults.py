"""Fault drill helpers (helpers.faults) and the checker of notebook 06's exercise."""

from __future__ import annotations

import matplotlib
import pytest
import torch

from helpers import RankError
from helpers.faults import Stopwatch, check_from_left, plot_timings, provoke, timings_table

matplotlib.use("Agg")


class FakeCluster:
    """Stands in for a Cluster: px either succeeds or raises the given RankError."""

    def __init__(self, error=None):
        self.error = error

    def px(self, code, timeout=None):
        if self.error:
            raise self.error


def test_provoke_returns_the_error_and_its_timing():
    err = RankError("boom", {1: "ValueError: x"}, [], [])
    fault = provoke(FakeCluster(err), "raise")
    assert fault.error is err and fault.seconds >= 0 and fault.ended >= fault.started
    with pytest.raises(AssertionError, match="the fault did not happen"):
        provoke(FakeCluster(), "pass")


def test_stopwatch_times_a_block():
    with Stopwatch() as sw:
        sum(range(1000))
    assert 0 <= sw.seconds < 1


def test_timings_are_shown_beside_the_timeout():
    times = {"skipped collective": (5.04, 0.03, "form_group"),
             "dead engine": (2.1, 11.5, "restart")}
    text = timings_table(times, timeout=5)
    assert "skipped collective  5.0 s     0.03 s" in text and "11.5 s" in text
    assert text.endswith("(process group timeout: 5 s)")
    fig = plot_timings(times, timeout=5)
    assert len(fig.axes[0].patches) == 4
    matplotlib.pyplot.close(fig)


def test_exercise_checker_accepts_the_left_neighbour_on_every_rank():
    check_from_left([3.0, 0.0, 1.0, 2.0])
    check_from_left([1, torch.tensor([0.0])])  # ints and one-element tensors are fine


def test_exercise_checker_names_each_wrong_rank():
    with pytest.raises(AssertionError, match=r"wrong on rank\(s\) \[2\]") as err:
        check_from_left([2.0, 0.0, 2.0])  # planted: rank 2 kept its own value
    assert "rank 2: from_left is 2.0, expected 1.0" in str(err.value)
    with pytest.raises(AssertionError, match=r"not a number on rank\(s\) \[0, 1\]"):
        check_from_left([None, None])
