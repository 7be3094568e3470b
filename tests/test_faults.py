"""Fault drill helpers (helpers.faults), with a stand-in cluster."""

from __future__ import annotations

import pytest

from helpers import RankError
from helpers.faults import provoke, timings_table


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


def test_timings_are_shown_beside_the_timeout():
    times = {"skipped collective": (5.04, 0.03, "form_group"),
             "dead engine": (2.1, 11.5, "restart")}
    text = timings_table(times, timeout=5)
    assert "skipped collective  5.0 s     0.03 s" in text and "11.5 s" in text
    assert text.endswith("(process group timeout: 5 s)")
