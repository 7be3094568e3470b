"""Fault drills: provoke a fault on the ranks, time it and its recovery.

Introduced in notebook 06. ``provoke(cluster, code)`` runs code that is meant to fail and
returns the RankError together with when it started and ended, so the notebook can report
the time from the fault to the error. ``Stopwatch`` times a recovery. ``timings_table`` and
``plot_timings`` show the measured times beside the process group's timeout.
``check_from_left`` is the checker of the notebook's exercise.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from .checks import check_ranks
from .parallel import RankError


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


class Stopwatch:
    """`with Stopwatch() as sw: ...` then sw.seconds: how long the block took."""

    def __enter__(self) -> Stopwatch:
        self.started, self.seconds = time.perf_counter(), float("nan")
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self.started


def timings_table(times: dict[str, tuple[float, float, str]], timeout: float) -> str:
    """fault -> (seconds to error, seconds to recover, how) as text, beside the group timeout."""
    rows = [("fault", "to error", "to recover", "recovered with")]
    rows += [(name, _seconds(err), _seconds(rec), how) for name, (err, rec, how) in times.items()]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]
    return "\n".join(lines + [f"(process group timeout: {timeout:g} s)"])


def _seconds(value: float) -> str:
    """Seconds with one decimal, two below one second."""
    return f"{value:.2f} s" if value < 1 else f"{value:.1f} s"


def plot_timings(times: dict[str, tuple[float, float, str]], timeout: float) -> Any:
    """Horizontal bars: seconds from fault to error and to recover, with the timeout marked."""
    import matplotlib.pyplot as plt

    names = list(times)
    fig, ax = plt.subplots(figsize=(6.5, 0.5 + 0.4 * len(names)), dpi=80)
    ys = range(len(names))
    ax.barh([y - 0.2 for y in ys], [times[n][0] for n in names], 0.4, label="fault → error")
    ax.barh([y + 0.2 for y in ys], [times[n][1] for n in names], 0.4, label="recovery")
    ax.axvline(timeout, color="grey", linestyle="--", label=f"group timeout ({timeout:g} s)")
    ax.set_yticks(list(ys), names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("seconds")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return fig


def check_from_left(values: list[Any]) -> None:
    """Exercise checker: rank r must hold float(r - 1 mod n), its left neighbour's rank."""
    n = len(values)
    got = [_number(v) for v in values]
    not_numbers = [r for r, v in enumerate(got) if not isinstance(v, float)]
    if not_numbers:
        raise AssertionError(f"from_left is not a number on rank(s) {not_numbers}: "
                             + ", ".join(f"rank {r}: {values[r]!r}" for r in not_numbers))
    check_ranks(got, [float((r - 1) % n) for r in range(n)], "from_left")


def _number(value: Any) -> Any:
    """A float for an int, a float or a one-element tensor; anything else unchanged."""
    if hasattr(value, "numel") and value.numel() == 1:
        return float(value.item())
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else value
