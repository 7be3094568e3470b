"""Fault drills: provoke a fault on the ranks, time it and its recovery.

Introduced in notebook 06. ``provoke(cluster, code)`` runs code that is meant to fail and
returns the RankError together with when it started and ended, so the notebook can report
the time from the fault to the error. ``timings_table`` shows the measured times beside the
process group's timeout (``helpers.timing.Stopwatch`` times a recovery, and
``helpers.figures.plot_timings`` draws the same table).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from .cluster.px import RankError
from .text import format_seconds, table


@dataclass
class Fault:
    """The error a fault produced, and when (time.perf_counter) the code started and failed."""

    error: RankError
    started: float
    ended: float

    @property
    def seconds(self) -> float:
        return self.ended - self.started


def provoke(cluster: Any, code: str, timeout: float | None = None) -> Fault:
    """Run code that should fail on some rank; return its RankError, timed. No error: raise."""
    started = time.perf_counter()
    try:
        cluster.px(code, timeout=timeout)
    except RankError as err:
        return Fault(err, started, time.perf_counter())
    raise AssertionError("the code ran without error on every rank: the fault did not happen")


def timings_table(times: dict[str, tuple[float, float, str]], timeout: float) -> str:
    """fault -> (seconds to error, seconds to recover, how) as text, beside the group timeout."""
    rows = [("fault", "to error", "to recover", "recovered with")]
    rows += [(name, format_seconds(err), format_seconds(rec), how)
             for name, (err, rec, how) in times.items()]
    return table(rows) + f"\n(process group timeout: {timeout:g} s)"
